"""noderag.index"""

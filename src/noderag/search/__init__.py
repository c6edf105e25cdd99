"""noderag.search"""

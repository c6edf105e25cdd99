"""noderag.embed"""

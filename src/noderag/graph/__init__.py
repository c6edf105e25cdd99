"""noderag.graph"""

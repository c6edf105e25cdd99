"""noderag.llm"""

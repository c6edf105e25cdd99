"""Concrete LLM backends (each imports its heavy dependency lazily)."""

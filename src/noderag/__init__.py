"""noderag: NodeRAG heterograph retrieval on a compiled core."""

__version__ = "0.1.0"

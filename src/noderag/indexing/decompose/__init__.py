"""Decomposers: chunk -> semantic units with entities and relationships."""

from .base import ChunkDecomposition, ChunkInput, DecomposeFailure, Decomposer, Unit
from .factory import make_decomposer

__all__ = ["ChunkDecomposition", "ChunkInput", "DecomposeFailure", "Decomposer", "Unit", "make_decomposer"]

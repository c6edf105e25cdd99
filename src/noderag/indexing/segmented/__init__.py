"""Segment-parallel builds: parts of a corpus built into segments independently and committed as one index."""

from .build import SegmentedReport, build_segmented

__all__ = ["SegmentedReport", "build_segmented"]

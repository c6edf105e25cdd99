"""Vectorised text helpers shared by the exporters: Arrow string arrays to bytes, escaping, number lists.

Every exporter builds its output a record batch at a time with Arrow compute kernels (no Python
loop per node or edge), then writes the concatenated bytes of one string array.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["concat_bytes", "xml_escape", "drop_nul", "join_list", "to_str", "wrap"]

# characters XML 1.0 does not allow (C0 controls but tab, newline and carriage return; U+FFFE/U+FFFF)
_XML_INVALID = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x{FFFE}\x{FFFF}]"


def concat_bytes(arr: pa.Array) -> memoryview:
    """The UTF-8 bytes of every value of a string array, back to back (nulls count as empty)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    if len(arr) == 0:
        return memoryview(b"")
    if arr.type == pa.large_string():
        off_dtype = np.int64
    elif arr.type == pa.string():
        off_dtype = np.int32
    else:
        raise TypeError(f"expected a string array, got {arr.type}")
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_dtype)[arr.offset:arr.offset + len(arr) + 1]
    lo, hi = int(offsets[0]), int(offsets[-1])
    return memoryview(bufs[2])[lo:hi] if bufs[2] is not None else memoryview(b"")


def xml_escape(arr: pa.Array) -> pa.Array:
    """Text fit for XML element content: ``& < >`` as entities, ``\\r`` as ``&#13;`` (kept on reading back),
    characters XML 1.0 forbids replaced by U+FFFD."""
    arr = pc.replace_substring(arr, "&", "&amp;")
    arr = pc.replace_substring(arr, "<", "&lt;")
    arr = pc.replace_substring(arr, ">", "&gt;")
    arr = pc.replace_substring(arr, "\r", "&#13;")
    return pc.replace_substring_regex(arr, _XML_INVALID, "\ufffd")


def drop_nul(arr: pa.Array) -> pa.Array:
    """Text without NUL characters (PostgreSQL text cannot hold them): each replaced by U+FFFD."""
    return pc.replace_substring(arr, "\x00", "\ufffd")


def to_str(arr: pa.Array) -> pa.Array:
    """Any scalar array as its string form (floats in their shortest round-trip spelling)."""
    return arr if arr.type in (pa.string(), pa.large_string()) else pc.cast(arr, pa.string())


def join_list(arr: pa.Array, sep: str, prefix: str = "", suffix: str = "") -> pa.Array:
    """A list array as strings ``prefix + v1 sep v2 ... + suffix`` (null lists stay null)."""
    inner = pc.binary_join(pc.cast(arr, pa.list_(pa.string())), sep)
    if prefix or suffix:
        inner = pc.binary_join_element_wise(prefix, inner, suffix, "")
    return inner


def wrap(prefix: str, arr: pa.Array, suffix: str) -> pa.Array:
    """``prefix + value + suffix`` per value; a null value gives "" (the attribute is left out)."""
    out = pc.binary_join_element_wise(prefix, to_str(arr), suffix, "", null_handling="emit_null")
    return pc.fill_null(out, "")

"""Handing memory the last step freed back to the operating system.

A step over a full-rate capture allocates and frees hundreds of MB of slice-sized arrays. The
C library keeps freed heap memory for reuse and Arrow's allocator keeps its freed pages, so
the process's resident size after a step is its peak, not what it still holds: the next
step's allocations then come on top (on the 60 s capture, 350 MB of the report's peak was
memory freed by earlier steps). `give_back` between steps returns it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import pyarrow as pa


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None  # glibc only
    except (OSError, AttributeError):
        return None


def give_back() -> None:
    """Returns the freed heap memory of the C library (glibc's malloc_trim) and the freed
    pages of Arrow's memory pool to the operating system; a no-op where neither exists."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa.default_memory_pool().release_unused()

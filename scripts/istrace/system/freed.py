"""Handing memory the last step freed back to the operating system.

A step over a full-rate capture allocates and frees hundreds of MB of slice-sized arrays. The
C library keeps freed heap memory for reuse and Arrow's allocator keeps its freed pages, so
the process's resident size after a step is its peak, not what it still holds: the next
step's allocations then come on top of memory nobody uses. `give_back` between steps
returns it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

# Arrow's allocations through the C library's malloc (Arrow's "system" pool), not its default
# mimalloc: then one allocator holds what a step freed, and malloc_trim hands it all back.
# mimalloc (even told to purge at once and commit as it goes) kept what a step's Arrow
# temporaries (Parquet pages, parsed JSON, text compared as Arrow strings) had used, so
# every process peaked higher with it and none ran faster; jemalloc kept more still.
ARROW_SETTINGS = {"ARROW_DEFAULT_MEMORY_POOL": "system"}


@functools.cache
def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    # the process's own symbols, glibc's among them (find_library ran `ldconfig -p`: a
    # process forked from this one, of its size, on each command's first give_back)
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None


# glibc's mallopt parameter for the number of malloc arenas
_M_ARENA_MAX = -8


def prompt_release() -> None:
    """ARROW_SETTINGS, unless the environment says otherwise; Arrow reads them when pyarrow
    loads, so this comes first (istrace's command line does it before any
    subcommand; a process that imported pyarrow already is left as it is). And one malloc
    arena for every thread: what a thread of the report's (one that sends a table to a
    forked process, pickled) freed stayed resident in that thread's arena, which malloc_trim
    did not give back, for good."""
    if "pyarrow" in sys.modules:
        return
    for name, value in ARROW_SETTINGS.items():
        os.environ.setdefault(name, value)
    if "MALLOC_ARENA_MAX" not in os.environ:
        try:
            ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)  # glibc only
        except (OSError, AttributeError):
            pass


def give_back() -> None:
    """Returns the freed heap memory of the C library (glibc's malloc_trim: Arrow's too, with
    ARROW_SETTINGS) and the freed pages of Arrow's memory pool, whichever it is, to the
    operating system; a no-op where neither exists."""
    import pyarrow as pa  # loaded by then: every caller works on Arrow tables

    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa.default_memory_pool().release_unused()

"""Handing memory the last step freed back to the operating system.

A step over a full-rate capture allocates and frees hundreds of MB of slice-sized arrays. The
C library keeps freed heap memory for reuse and Arrow's allocator keeps its freed pages, so
the process's resident size after a step is its peak, not what it still holds: the next
step's allocations then come on top (on the 60 s capture, 350 MB of the report's peak was
memory freed by earlier steps). `give_back` between steps returns it.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys

# Arrow's default pool is mimalloc, which keeps pages freed for reuse a while and commits
# whole arenas at once: a step's Arrow temporaries (parsed JSON, Parquet pages, text
# compared as Arrow strings) stayed resident under the next step's, `give_back`'s
# release_unused or not. Told to purge at once and commit as it goes, a 10 s capture's
# report peaks at 0.30 GB (0.39 before) and a 60 s one's at 0.55 GB (0.69-0.74), its merge
# at 0.52 GB (0.58-0.60), no slower.
MIMALLOC_SETTINGS = {"MIMALLOC_PURGE_DELAY": "0", "MIMALLOC_ARENA_EAGER_COMMIT": "0"}


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
    """MIMALLOC_SETTINGS, unless the environment says otherwise; mimalloc reads them when
    pyarrow loads, so this comes first (istrace's command line does it before any
    subcommand; a process that imported pyarrow already is left as it is). And one malloc
    arena for every thread: what a thread of the report's (one that sends a table to a
    forked process, pickled) freed stayed resident in that thread's arena, which malloc_trim
    did not give back (a full-rate minute's tracker result sent on: 10 MB for good)."""
    if "pyarrow" in sys.modules:
        return
    for name, value in MIMALLOC_SETTINGS.items():
        os.environ.setdefault(name, value)
    if "MALLOC_ARENA_MAX" not in os.environ:
        try:
            ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 1)  # glibc only
        except (OSError, AttributeError):
            pass


def give_back() -> None:
    """Returns the freed heap memory of the C library (glibc's malloc_trim) and the freed
    pages of Arrow's memory pool to the operating system; a no-op where neither exists."""
    import pyarrow as pa  # loaded by then: every caller works on Arrow tables

    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    pa.default_memory_pool().release_unused()

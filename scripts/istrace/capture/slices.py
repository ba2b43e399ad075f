"""Walking a segments table a slice of rows at a time, so an analysis of a long capture holds
one slice's temporaries, not copies of millions of rows.

Slices are cut where every time stamp before the cut is below every one after it (a capture's
stamps can step back by microseconds where two CPUs stamped it), so a slice sorted by time and
the next one follow each other exactly as the whole table sorted by time would.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# 65 536 rows: a slice's arrays stay in the CPU's caches, which larger slices lose.
SLICE_ROWS = 1 << 16

_I64_MIN, _I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def clean_cuts(ts: np.ndarray, rows: int = SLICE_ROWS) -> list[int]:
    """Table positions about `rows` apart (first 0, last len) where every time stamp before the
    position is below every one from it on."""
    return clean_cuts_by_block(len(ts), lambda a, b: ts[a:b], rows)


def clean_cuts_by_block(n: int, block: Callable[[int, int], np.ndarray],
                        rows: int = SLICE_ROWS) -> list[int]:
    """clean_cuts of `n` time stamps that `block(a, b)` hands out a block at a time (two
    passes: the blocks' lowest stamps, then the cuts)."""
    if n <= rows:
        return [0, n]
    starts = list(range(0, n, rows))
    block_min = np.array([block(s, s + rows).min() for s in starts], np.int64)
    # the smallest time stamp of the blocks after each block
    after = np.append(np.minimum.accumulate(block_min[::-1])[::-1][1:], _I64_MAX)
    cuts, before = [0], _I64_MIN
    for k, s in enumerate(starts):
        blk = block(s, s + rows).astype(np.int64, copy=False)
        if k:
            top = np.maximum(before, np.maximum.accumulate(blk))  # highest up to each row
            top_before = np.concatenate([[before], top[:-1]])
            low_from = np.minimum(np.minimum.accumulate(blk[::-1])[::-1], after[k])
            ok = np.flatnonzero(top_before < low_from)
            if len(ok) and s + int(ok[0]) > cuts[-1]:
                cuts.append(s + int(ok[0]))
        before = max(before, int(blk.max()))
    return cuts + [n]

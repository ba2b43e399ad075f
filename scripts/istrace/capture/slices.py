"""Walking a segments table a slice of rows at a time, so an analysis of a long capture holds
one slice's temporaries, not copies of millions of rows.

Slices are cut where every time stamp before the cut is below every one after it (a capture's
stamps can step back by microseconds where two CPUs stamped it), so a slice sorted by time and
the next one follow each other exactly as the whole table sorted by time would.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from istrace.capture.labels import codes_of

# 65 536 rows: a slice's arrays stay in the CPU's caches (the tracker takes 1.1 s over a 10 s
# full-rate capture this way, 1.8-2.2 s in slices of a million rows).
SLICE_ROWS = 1 << 16

_I64_MIN, _I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


def clean_cuts(ts: np.ndarray, rows: int = SLICE_ROWS) -> list[int]:
    """Table positions about `rows` apart (first 0, last len) where every time stamp before the
    position is below every one from it on."""
    n = len(ts)
    if n <= rows:
        return [0, n]
    starts = list(range(0, n, rows))
    block_min = np.array([ts[s:s + rows].min() for s in starts], np.int64)
    # the smallest time stamp of the blocks after each block
    after = np.append(np.minimum.accumulate(block_min[::-1])[::-1][1:], _I64_MAX)
    cuts, before = [0], _I64_MIN
    for k, s in enumerate(starts):
        blk = ts[s:s + rows].astype(np.int64, copy=False)
        if k:
            top = np.maximum(before, np.maximum.accumulate(blk))  # highest up to each row
            top_before = np.concatenate([[before], top[:-1]])
            low_from = np.minimum(np.minimum.accumulate(blk[::-1])[::-1], after[k])
            ok = np.flatnonzero(top_before < low_from)
            if len(ok) and s + int(ok[0]) > cuts[-1]:
                cuts.append(s + int(ok[0]))
        before = max(before, int(blk.max()))
    return cuts + [n]


def payload_slices(segs: pd.DataFrame, d: str, columns: tuple[str, ...] = ("ts_ns", "len"),
                   conn: str | None = None, rows: int = SLICE_ROWS,
                   extra: dict[str, np.ndarray] | None = None
                   ) -> Iterator[dict[str, np.ndarray]]:
    """The payload-carrying segments of direction `d` (of one connection with `conn`), the
    arrays of `columns` (and of `extra`, arrays as long as the table) a slice at a time, each
    slice in time order (stable): joined, the slices are the table's payload segments sorted
    by time."""
    if segs is None or segs.empty:
        return
    ts = segs["ts_ns"].to_numpy()
    length = segs["len"].to_numpy()
    dir_codes, (dc,) = codes_of(segs["dir"], d)
    conn_codes, (cc,) = codes_of(segs["conn"], conn) if conn is not None else (None, (0,))
    cols = {c: segs[c].to_numpy() for c in columns} | (extra or {})
    cuts = clean_cuts(ts, rows)
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        m = (dir_codes[a:b] == dc) & (length[a:b] > 0)
        if conn_codes is not None:
            m &= conn_codes[a:b] == cc
        if not m.any():
            continue
        out = {c: v[a:b][m] for c, v in cols.items()}
        t = ts[a:b][m]
        if not (t[1:] >= t[:-1]).all():
            o = np.argsort(t, kind="stable")
            out = {c: v[o] for c, v in out.items()}
        yield out

"""Payload per connection and over time: each connection's bytes, segments, first and last
time and largest segment in one direction (payload_totals), and the bytes per time bin
(throughput).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.capture.segsource import Segments, SegmentsLike, as_segments, payload_slices


def payload_totals(segs: SegmentsLike | None, d: str) -> pd.DataFrame:
    """Per connection (as a group-by would order them), the payload segments of `d`: bytes,
    segments, first_ns, last_ns, largest (bytes of the largest segment). One pass of slices."""
    src = as_segments(segs)
    if src is None or src.empty:
        return pd.DataFrame(columns=["bytes", "segments", "first_ns", "last_ns", "largest"])
    return src.cached(("payload_totals", d), lambda: _payload_totals(src, d)).copy()


def _payload_totals(src: Segments, d: str) -> pd.DataFrame:
    labels = src.conn_labels
    k = len(labels)
    nbytes, count, largest = np.zeros(k, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64)
    first, last = np.full(k, -1, np.int64), np.full(k, -1, np.int64)
    for sl in payload_slices(src, d, ("ts_ns", "len", "conn")):
        c, ln, ts = sl["conn"].astype(np.int64), sl["len"].astype(np.int64), sl["ts_ns"]
        ok = c >= 0
        c, ln, ts = c[ok], ln[ok], ts[ok]
        nbytes += np.bincount(c, weights=ln, minlength=k).astype(np.int64)
        count += np.bincount(c, minlength=k)
        np.maximum.at(largest, c, ln)
        here, at = np.unique(c, return_index=True)  # each connection's first in time order
        new = first[here] < 0
        first[here[new]] = ts[at[new]]
        here, at = np.unique(c[::-1], return_index=True)
        last[here] = ts[len(ts) - 1 - at]
    order = src.group_order("conn")
    order = order[count[order] > 0]
    return pd.DataFrame({"bytes": nbytes[order], "segments": count[order],
                         "first_ns": first[order], "last_ns": last[order],
                         "largest": largest[order]},
                        index=pd.Index([labels[i] for i in order]))


def throughput(segs: SegmentsLike | None, d: str = "t2i", bins: int = 200,
               bin_ns: int | None = None) -> pd.DataFrame:
    """Payload bytes per time bin of one direction: t_ns (bin start), bytes, MBps (1e6 B/s)."""
    cols = ["t_ns", "bytes", "MBps"]
    t = payload_totals(segs, d)
    if t.empty:
        return pd.DataFrame(columns=cols)
    t0, t1 = int(t["first_ns"].min()), int(t["last_ns"].max()) + 1
    if bin_ns is None:
        bin_ns = max((t1 - t0) // bins, 100_000)
    n = (t1 - 1 - t0) // bin_ns + 1
    by = np.zeros(n)
    for sl in payload_slices(segs, d):
        idx = (sl["ts_ns"].astype(np.int64) - t0) // bin_ns
        by += np.bincount(idx, weights=sl["len"].astype(np.float64), minlength=n)
    return pd.DataFrame({"t_ns": t0 + np.arange(n, dtype=np.int64) * bin_ns, "bytes": by,
                         "MBps": by / (bin_ns / 1e9) / 1e6})

"""Round-trip time at any capture point from TCP timestamps (RFC 7323), the way passive ping
(pping) measures it: a segment leaving the capture point carries TSval X; the first segment
back from the far end that echoes X (TSecr = X) arrives one round trip later, plus whatever the
far end waited before sending. The smallest of many such samples is the path's round trip.

The tracker's own RTT (data to the ACK that covers it) is the path's only at the data sender;
at the receiver it measures the receiver's ACK delay. This one holds at either end, and from
the client's pcap it includes the SYN -> SYN/ACK exchange.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from istrace.capture.segsource import SegmentsLike, as_segments, row_slices
from istrace.capture.slices import SLICE_ROWS

_VALUE_BITS = 32  # a TSval is 32 bits: (connection, value) as one int64 key


def _firsts(key: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each distinct key, rising; the earliest time it has)."""
    if not len(key):
        return key, ts
    order = np.lexsort((ts, key))
    key, ts = key[order], ts[order]
    first = np.concatenate([[True], key[1:] != key[:-1]])
    return key[first], ts[first]


def echo_rtt_samples(segs: SegmentsLike | None, out_dir: str,
                     slice_rows: int = SLICE_ROWS) -> pd.DataFrame:
    """Samples (conn, ts_ns of the echo, rtt_ns) for segments sent in `out_dir` from the
    capture point and echoed back. Needs columns conn, dir, ts_ns, tsval, tsecr. The segments
    are read a slice at a time, keeping the first time each (connection, timestamp value)
    left and came back: a few thousand values a second of the TCP clock, where the segments
    are a hundred thousand a second."""
    cols = ["conn", "ts_ns", "rtt_ns"]
    src = as_segments(segs)
    if src is None or src.empty or not (src.has("tsval") and src.has("tsecr")):
        return pd.DataFrame(columns=cols)
    back = "t2i" if out_dir == "i2t" else "i2t"
    # The first time each value left, the first time it came back: later copies are
    # retransmissions or later segments of the same clock tick.
    sides: dict[str, tuple[int, list[tuple[np.ndarray, np.ndarray]]]] = {
        "tsval": (src.code("dir", out_dir), []), "tsecr": (src.code("dir", back), [])}
    for _, _, r in row_slices(src, ["ts_ns", "conn", "dir", "tsval", "tsecr"], slice_rows):
        for name, (code, found) in sides.items():
            v = r[name].astype(np.int64)
            m = (r["dir"] == code) & (v > 0) & (r["conn"] >= 0)
            key = (r["conn"][m].astype(np.int64) << _VALUE_BITS) | v[m]
            found.append(_firsts(key, r["ts_ns"][m].astype(np.int64)))
            if len(found) > 1:  # what the slices so far found, as one
                k, t = (np.concatenate(x) for x in zip(*found, strict=True))
                found[:] = [_firsts(k, t)]
    none = (np.zeros(0, np.int64),) * 2
    (k_out, t_out), (k_back, t_back) = (f[0] if f else none for _, f in sides.values())
    key, i, j = np.intersect1d(k_out, k_back, assume_unique=True, return_indices=True)
    rtt = t_back[j] - t_out[i]
    ok = rtt >= 0
    labels = np.asarray(src.labels("conn"), dtype=object)
    out = pd.DataFrame({"conn": labels[key[ok] >> _VALUE_BITS], "ts_ns": t_back[j][ok],
                        "rtt_ns": rtt[ok]})
    return out.sort_values("ts_ns", kind="stable").reset_index(drop=True)


def echo_rtt_ms(segs: SegmentsLike | None, out_dir: str) -> dict[str, float | None]:
    """min, 5th percentile and median of the echo samples, ms (None without timestamps)."""
    s = echo_rtt_samples(segs, out_dir)["rtt_ns"]
    if len(s) < 3:
        return {"min_ms": None, "p5_ms": None, "p50_ms": None}
    return {"min_ms": float(s.min()) / 1e6, "p5_ms": float(s.quantile(0.05)) / 1e6,
            "p50_ms": float(s.median()) / 1e6}

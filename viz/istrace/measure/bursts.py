"""The data sender's bursts: runs of payload segments of one direction with pauses shorter
than a gap between them, the gap itself (from the segments' spacing), and what the bursts
give: the idle intervals between them, the share of the time idle, the peak send rate.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from istrace.capture.segsource import Segments, SegmentsLike, as_segments, payload_slices


def no_gaps() -> pd.DataFrame:
    """The gaps table with no row, typed (an untyped empty frame cannot be ranked)."""
    return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ("start_ns", "end_ns", "gap_ns")})


def data_bursts(segs: SegmentsLike, d: str = "t2i", gap_ns: int = 1_000_000) -> pd.DataFrame:
    """Runs of payload-carrying segments of one direction separated by less than `gap_ns`.

    Columns: start_ns, end_ns, bytes, segments. Drives the idle ratio: the link is busy during
    a burst, idle between bursts. Read a slice of the table at a time (the burst still open
    at a slice's end goes on into the next); worked out once per segments, direction and gap
    (the accounting, the diagnosis and the ladder plot ask for the same).
    """
    src = as_segments(segs)
    if src is None:
        return pd.DataFrame(columns=["start_ns", "end_ns", "bytes", "segments"])
    # a shallow copy: copy-on-write keeps the cached table as it is whatever the caller
    # changes, and a full-rate minute's 190 000 bursts are not held twice
    return src.cached(("data_bursts", d, gap_ns),
                      lambda: _data_bursts(src, d, gap_ns)).copy(deep=False)


def _data_bursts(segs: Segments, d: str, gap_ns: int) -> pd.DataFrame:
    cols = ["start_ns", "end_ns", "bytes", "segments"]
    parts: list[tuple[np.ndarray, ...]] = []
    run: list[int] | None = None  # the open burst: start, end, bytes, segments
    for sl in payload_slices(segs, d):
        ts = sl["ts_ns"].astype(np.int64, copy=False)
        ln = sl["len"].astype(np.int64)
        new = np.empty(len(ts), bool)
        new[1:] = np.diff(ts) > gap_ns
        new[0] = run is None or int(ts[0]) - run[1] > gap_ns
        first = np.flatnonzero(new)
        if run is not None and not new[0]:  # the open burst goes on into this slice
            upto = int(first[0]) if len(first) else len(ts)
            run = [run[0], int(ts[upto - 1]), run[2] + int(ln[:upto].sum()), run[3] + upto]
        if not len(first):
            continue
        if run is not None:
            parts.append(tuple(np.array([v], np.int64) for v in run))
        last = np.concatenate([first[1:] - 1, [len(ts) - 1]])
        nbytes = np.add.reduceat(ln, first)
        count = last - first + 1
        parts.append((ts[first[:-1]], ts[last[:-1]], nbytes[:-1], count[:-1]))
        run = [int(ts[first[-1]]), int(ts[-1]), int(nbytes[-1]), int(count[-1])]
    if run is not None:
        parts.append(tuple(np.array([v], np.int64) for v in run))
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame({c: np.concatenate([p[k] for p in parts]).astype(np.int64, copy=False)
                         for k, c in enumerate(cols)}, copy=False)


def burst_gap_threshold(segs: SegmentsLike, d: str = "t2i") -> int:
    """Gap that separates bursts: 5x the median spacing of data segments, at least 100 us
    (shorter pauses are the sender's own pacing, not waiting for the other end). Once per
    segments and direction."""
    src = as_segments(segs)
    if src is None:
        return 1_000_000
    med = src.cached(("median_spacing", d), lambda: median_spacing(src, d))
    return 1_000_000 if med is None else int(max(5 * med, 100_000))


def _spacings(segs: SegmentsLike, d: str) -> Iterator[np.ndarray]:
    """The time between each payload segment of `d` and the next, in time order, by slice."""
    last = None
    for sl in payload_slices(segs, d, ("ts_ns",)):
        ts = sl["ts_ns"].astype(np.int64, copy=False)
        yield np.diff(ts, prepend=ts[:1] if last is None else [last])[last is None:]
        last = int(ts[-1])


def median_spacing(segs: SegmentsLike, d: str) -> float | None:
    """The exact median of the spacings (as np.median; None under two), in two passes of
    bounded memory: counts per microsecond-wide bin, then per nanosecond in the one or two
    bins holding the middle ranks (spacings of 67 ms or more counted one by one). The bins
    are counted only as far as some spacing reaches: a full-rate capture's spacings are a few
    microseconds, so a fixed million bins a slice were mostly empty and most of the time.
    65 536 bins at most: one long pause (a second, which a long capture holds) would
    otherwise make every slice's count a million bins long."""
    top = 1 << 16
    coarse = np.zeros(0, np.int64)
    for x in _spacings(segs, d):
        here = np.bincount(np.minimum(x >> 10, top))
        if len(here) > len(coarse):
            coarse = np.concatenate([coarse, np.zeros(len(here) - len(coarse), np.int64)])
        coarse[:len(here)] += here
    n = int(coarse.sum())
    if n < 2:
        return None
    cum = np.cumsum(coarse)
    ranks = sorted({(n - 1) // 2, n // 2})
    bins = {int(np.searchsorted(cum, r, side="right")) for r in ranks}
    fine: dict[int, np.ndarray] = {b: np.zeros(1024, np.int64) for b in bins if b < top}
    wide: list[np.ndarray] = []
    for x in _spacings(segs, d):
        key = np.minimum(x >> 10, top)
        for b in bins:
            if b < top:
                fine[b] += np.bincount(x[key == b] & 1023, minlength=1024)
            else:
                wide.append(x[key == b])
    big = np.sort(np.concatenate(wide)) if wide else np.zeros(0, np.int64)

    def value(r: int) -> int:
        b = int(np.searchsorted(cum, r, side="right"))
        k = r - int(cum[b] - coarse[b])  # less the spacings in the bins before b
        if b >= top:
            return int(big[k])
        return (b << 10) + int(np.searchsorted(np.cumsum(fine[b]), k, side="right"))
    return float(np.mean([value(r) for r in ((n - 1) // 2, n // 2)]))


def gaps_from_bursts(bursts: pd.DataFrame, rate_bps: float | None = None) -> pd.DataFrame:
    """Idle intervals between data bursts: from a burst's last segment (+ its serialisation at
    `rate_bps` when known) to the next burst's first. Columns: start_ns, end_ns, gap_ns."""
    if len(bursts) < 2:
        return no_gaps()
    end = bursts["end_ns"].to_numpy(np.int64)
    if rate_bps:
        per = bursts["bytes"].to_numpy() / np.maximum(bursts["segments"].to_numpy(), 1)
        end = end + (per / rate_bps * 1e9).astype(np.int64)
    a, b = end[:-1], bursts["start_ns"].to_numpy(np.int64)[1:]
    return pd.DataFrame({"start_ns": a, "end_ns": b, "gap_ns": b - a})


def peak_rate(bursts: pd.DataFrame, min_segments: int = 8) -> float | None:
    """Fastest sustained send rate seen (bytes/s over a burst's first to last segment)."""
    b = bursts[bursts["segments"] >= min_segments]
    if b.empty:
        return None
    dur = (b["end_ns"] - b["start_ns"]).to_numpy(np.float64)
    ok = dur > 0
    if not ok.any():
        return None
    per = (b["bytes"].to_numpy() / b["segments"].to_numpy())[ok]
    rates = (b["bytes"].to_numpy()[ok] - per) / (dur[ok] / 1e9)
    return float(np.median(rates))


def idle_ratio(bursts: pd.DataFrame, start_ns: int | None = None, end_ns: int | None = None,
               rate_bps: float | None = None) -> float:
    """Share of [start, end] with no data on the wire. A burst lasts from its first segment to
    its last, plus its last segment's serialisation at `rate_bps` (bytes/s) when known."""
    if bursts.empty:
        return float("nan")
    s = bursts["start_ns"].to_numpy(np.int64)
    e = bursts["end_ns"].to_numpy(np.int64).astype(float)
    if rate_bps:
        per = bursts["bytes"].to_numpy() / np.maximum(bursts["segments"].to_numpy(), 1)
        e = e + per / rate_bps * 1e9
    t0 = s.min() if start_ns is None else start_ns
    t1 = e.max() if end_ns is None else end_ns
    total = t1 - t0
    if total <= 0:
        return float("nan")
    busy = np.clip(e, t0, t1) - np.clip(s, t0, t1)
    return float(1.0 - busy.sum() / total)

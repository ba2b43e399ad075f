"""The tracker's estimates for one data direction of one connection, from one capture point's
segments fed a slice of the table at a time.

A slice needs of the slices before it only what `_Carry` holds: the highest byte sent and
acknowledged, the segments not yet acknowledged (Karn's rule, retransmission detection), the
last ACK and its duplicate run, the smoothed RTT, the trailing window of the delivery rate and
the open loss episode. All of it is bounded by what is in flight, not by the capture's length,
so tracking a minute of full-rate traffic takes a slice's memory, and any slicing yields the
same rows as one slice (tests/track/test_track_slices.py). A slice's marks and the Disorder
intervals it decides are handed on after it (`found`); what waits for the direction's end is
a row per loss episode, whose kind needs the median RTT (a fixed-size histogram).

Slices are cut only where every time stamp before the cut is below every one after it (a
capture's stamps can step back by microseconds where two CPUs stamped it): the rows of a slice
merge into one time-ordered stream exactly as they would in the whole table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from istrace.capture.decoded import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN
from istrace.capture.labels import coded_labels
from istrace.capture.tcpseq import Unwrapper

# an event's columns, as `finish` gives them
EVENT_FIELDS = ["ts_ns", "kind", "seq", "bytes", "cmd", "note"]

_I64_MIN, _I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max
Columns = dict[str, np.ndarray]


def rate_window(span_ns: int) -> int:
    """The delivery rate's trailing window: a fiftieth of the series' span, 1 ms..1 s."""
    return int(min(max(span_ns // 50, 1_000_000), 1_000_000_000))


# The window's start is rounded up to a grid of this many steps per window, so that only the
# first row after each grid point can start a window: the history a slice carries is at most
# this many rows, not every row of the window (at full rate, hundreds of thousands). The
# window's start moves later by less than a step (a thousandth of the window): on a steady
# stream the rate changes by that share of its bytes (tests/track/test_rate_window); where a
# burst of ACKs leaves the window, the rate's step comes up to a step's time earlier.
RATE_GRID_STEPS = 1024


def rate_grid(window_ns: int) -> int:
    return max(window_ns // RATE_GRID_STEPS, 1)


def trailing_rate(ts: np.ndarray, cum_bytes: np.ndarray, window_ns: int,
                  first: int = 0) -> np.ndarray:
    """Bytes per second over the trailing window ending at each row from `first` on (ts
    sorted; the rows before it are the window's history), over at least a quarter of the
    window (one early row is not a rate). The window starts at the first grid point
    (`rate_grid`) at or after its nominal start: the same rows whatever history is given,
    as long as it holds `window_starts` of the rows before."""
    end_ts, end_cum = ts[first:], cum_bytes[first:]
    g = rate_grid(window_ns)
    start = np.searchsorted(ts, -((window_ns - end_ts) // g) * g, side="left")
    dt = np.maximum(end_ts - ts[start], window_ns // 4 or 1)
    return (end_cum - cum_bytes[start]) * 1e9 / dt


def window_starts(ts: np.ndarray, window_ns: int, before: int | None) -> np.ndarray:
    """The rows of `ts` (sorted; `before`: the time of the row before them, None: none) that
    can start a trailing_rate window: the first at or after each grid point."""
    cell = ts // rate_grid(window_ns)
    first = np.empty(len(ts), bool)
    if len(ts):
        first[0] = before is None or cell[0] > before // rate_grid(window_ns)
        first[1:] = cell[1:] > cell[:-1]
    return first


@dataclass
class Plan:
    """What the whole direction decides before its first slice is tracked."""
    base: int           # sequence number of the first data byte (SYN + 1, else the first data)
    minor: bool         # under 1% of the bytes of the other direction: change-only samples
    window_ns: int      # the delivery rate's trailing window: a fiftieth of the span, 1 ms..1 s
    stream_rows: int    # data segments plus ACKs of them


def plan(slices: Iterable[tuple[Columns, np.ndarray, np.ndarray]]) -> Plan | None:
    """A first pass over the slices, each (columns, rows sent in the direction, rows coming
    back) (None: the direction carries no data)."""
    base = first_data = None
    sent = back = rows = 0
    lo, hi = _I64_MAX, _I64_MIN
    for cols, s, r in slices:
        flags, length, ts = cols["flags"], cols["len"], cols["ts_ns"]
        data = s & (length > 0)
        if base is None:
            syn = np.flatnonzero(s & ((flags & TCP_SYN) != 0))
            if len(syn):
                base = int(cols["seq"][syn[0]]) + 1
        if first_data is None and data.any():
            first_data = int(cols["seq"][data][0])
        sent += int(length[data].sum(dtype=np.int64))
        back += int(length[r].sum(dtype=np.int64))
        stream = data | (r & ((flags & TCP_ACK) != 0))
        if stream.any():
            rows += int(stream.sum())
            lo, hi = min(lo, int(ts[stream].min())), max(hi, int(ts[stream].max()))
    if first_data is None:
        return None
    return Plan(first_data if base is None else base, sent * 100 < back,
                rate_window(hi - lo), rows)


def _cummax(values: np.ndarray, start: int) -> np.ndarray:
    """Running maximum that begins at `start` (what the slices before reached)."""
    return np.maximum(np.maximum.accumulate(values), start) if len(values) else values


@dataclass
class _Carry:
    """What one slice hands the next."""
    max_end: int | None = None   # highest data byte end sent, in table order
    snd_nxt: int = -1            # highest end sent, in time order
    una: int = -1                # highest ACK seen
    # originals (sent once) not yet acknowledged, by end: Karn's RTT samples
    o_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    o_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # retransmissions not yet acknowledged: an ACK of their bytes is ambiguous (Karn)
    rtx_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rtx_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # sent, unacked
    # where the highest end sent stepped up, above the highest ACK: when each hole opened
    step_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last_ack: int | None = None  # the last ACK and its window: is the next one a duplicate?
    last_win: int = 0
    dup_run: int = 0
    srtt: float = np.nan
    rwnd: float = np.nan
    # the stream's rows that can start a later row's delivery-rate window (window_starts):
    # time and bytes acknowledged
    hist_ts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hist_cum: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hist_last: int | None = None  # the time of the stream's last row so far
    first_row: bool = True
    last_d_ts: int = 0
    last_a_ts: int = 0


class _Column:
    """A column that grows by slices, in one buffer doubled when full. What a pass keeps of
    each slice (its events, RTT samples, duplicate ACKs) kept as an array per slice was
    thousands of small blocks among the slices' freed temporaries, each pinning a heap page
    no trim could hand back, several times the events' own size."""

    def __init__(self, dtype: type | np.dtype) -> None:
        self._buf = np.empty(0, dtype)
        self._n = 0

    def extend(self, values: np.ndarray) -> None:
        need = self._n + len(values)
        if need > len(self._buf):
            grown = np.empty(max(need, 2 * len(self._buf), 1024), self._buf.dtype)
            grown[:self._n] = self._buf[:self._n]
            self._buf = grown
        self._buf[self._n:need] = values
        self._n = need

    def __len__(self) -> int:
        return self._n

    @property
    def dtype(self) -> np.dtype:
        return self._buf.dtype

    def values(self) -> np.ndarray:
        return self._buf[:self._n]


_UNRESOLVED = _I64_MAX  # an episode not yet acknowledged past its recovery point


class _Episodes:
    """The loss episodes found, in time order, as columns: a start, whether the Nth duplicate
    ACK began it (else a retransmission), the first byte not acknowledged then, the recovery
    point, the end (_UNRESOLVED until an ACK passes the recovery point: only the last can
    be), the latest duplicate ACK at or before the start, and `reach`, the latest end of
    this and the episodes before (for `covers`)."""

    _TYPES = {"t": np.int64, "dup": np.bool_, "seq0": np.int64, "recover": np.int64,
              "end": np.int64, "last_dup": np.int64, "reach": np.int64}

    def __init__(self) -> None:
        self._cols = {name: _Column(t) for name, t in self._TYPES.items()}

    def __len__(self) -> int:
        return len(self._cols["t"])

    def col(self, name: str) -> np.ndarray:
        return self._cols[name].values()

    def add(self, t: int, dup: bool, seq0: int, recover: int, last_dup: int) -> None:
        for name, v in (("t", t), ("dup", dup), ("seq0", seq0), ("recover", recover),
                        ("end", _UNRESOLVED), ("last_dup", last_dup), ("reach", _UNRESOLVED)):
            self._cols[name].extend(np.array([v], self._TYPES[name]))

    @property
    def open(self) -> bool:
        return int(self.col("end")[-1]) == _UNRESOLVED

    @property
    def last_end(self) -> int:
        return int(self.col("end")[-1])

    def resolve(self, a_ts: np.ndarray, a_ack: np.ndarray, start: int,
                chunk: int = 4096) -> None:
        """The last episode's end: the first ACK from `start` on at or past its recovery
        point (looked for a chunk at a time: an episode ends within a few round trips)."""
        recover = int(self.col("recover")[-1])
        for lo in range(start, len(a_ack), chunk):
            hit = np.flatnonzero(a_ack[lo:lo + chunk] >= recover)
            if len(hit):
                end = int(a_ts[lo + int(hit[0])])
                self.col("end")[-1] = end
                # the interval the state table gives it: [start, max(end, start)]
                reach, last = self.col("reach"), max(end, int(self.col("t")[-1]))
                reach[-1] = max(last, int(reach[-2])) if len(reach) > 1 else last
                return

    def covers(self, t: int) -> bool:
        """Whether `t` lies in an episode [start, end] (an open one: to the direction's end,
        which is after any time seen)."""
        j = int(np.searchsorted(self.col("t"), t, side="right")) - 1
        return j >= 0 and int(self.col("reach")[j]) >= t


class LogHistogram:
    """The median of the RTT samples from a histogram of their logarithms, STEPS bins an
    octave: a fixed size, where the samples held grew with the capture. Nanoseconds to days
    fit; what lies outside counts in the end bins."""

    STEPS = 256
    LO, HI = -10, 40  # octaves of a microsecond

    def __init__(self) -> None:
        self.counts = np.zeros((self.HI - self.LO) * self.STEPS, np.int64)

    def __len__(self) -> int:
        return int(self.counts.sum())

    def add(self, us: np.ndarray) -> None:
        if not len(us):
            return
        octaves = np.log2(np.clip(us, 2.0 ** self.LO, 2.0 ** self.HI))
        bins = np.floor((octaves - self.LO) * self.STEPS).astype(np.int64)
        self.counts += np.bincount(np.minimum(bins, len(self.counts) - 1),
                                   minlength=len(self.counts))

    def median(self) -> float | None:
        """The two middle samples' bins' centres, averaged (as np.median averages the two
        middle samples of an even count); None: no sample."""
        n = len(self)
        if not n:
            return None
        cum = np.cumsum(self.counts)
        mid = np.searchsorted(cum, [(n - 1) // 2 + 1, n // 2 + 1], side="left")
        centres = 2.0 ** (self.LO + (mid + 0.5) / self.STEPS)
        return float(centres.mean())


class Direction:
    """Tracks one direction: `feed` each slice in table order, taking the state intervals and
    marks it decided with `found` (none are held to the end), then `finish`."""

    def __init__(self, conn: str, d: str, host: str, p: Plan, shift: int,
                 cmd_of: Callable[[np.ndarray], np.ndarray], dupack_threshold: int,
                 reorder_window_ns: int) -> None:
        self.conn, self.d, self.host, self.p, self.shift = conn, d, host, p, shift
        self.cmd_of, self.thr, self.reorder_ns = cmd_of, dupack_threshold, reorder_window_ns
        self.seq, self.ack = Unwrapper(p.base), Unwrapper(p.base)
        self.c = _Carry()
        # the events as columns, not a tuple each (a lossy minute has a hundred thousand
        # duplicate ACKs); kind and note as codes into the texts, each made once
        self._ev = {name: _Column(t) for name, t in (("ts_ns", np.int64), ("kind", np.int8),
                                                     ("seq", np.int64), ("bytes", np.int64),
                                                     ("cmd", np.float64), ("note", np.int32))}
        self._kinds: dict[str, int] = {}
        self._notes: dict[str, int] = {}
        self.episodes = _Episodes()
        # duplicate-ACK runs closed but not yet judged (start, length, next ACK): a slice's
        self.runs: list[tuple[int, int, int]] = []
        self.open_run: list[int] | None = None             # [start, length, last ts]
        self.last_dup: int | None = None                   # the latest duplicate ACK's time
        self.disorder_end: int | None = None               # where the last Disorder ended
        self.rtts = LogHistogram()
        self._states: list[tuple] = []                     # decided, not yet taken (`found`)

    # ----------------------------------------------------------------------------------------
    def feed(self, col: Columns, snd: np.ndarray, rev: np.ndarray) -> Columns:
        """One slice's sample columns (ts_ns, srtt_us, rtt_us, inflight_bytes, rwnd,
        delivery_rate_bps), in time order."""
        c = self.c
        flags, length = col["flags"], col["len"]
        data = snd & (length > 0)
        d_ts = col["ts_ns"][data].astype(np.int64, copy=False)
        d_start = self.seq(col["seq"][data])
        d_len = length[data].astype(np.int64)
        d_end = d_start + d_len
        acks = rev & ((flags & TCP_ACK) != 0)
        del data
        a_ts = col["ts_ns"][acks].astype(np.int64, copy=False)
        a_ack = np.maximum(self.ack(col["ack"][acks]), 0)  # an ACK of the SYN: no data yet
        a_flags = flags[acks]
        a_win = col["win"][acks].astype(np.int64)
        a_win = np.where((a_flags & TCP_SYN) != 0, a_win, a_win << self.shift)
        a_una = _cummax(a_ack, c.una)
        prev_una = np.concatenate([[max(c.una, 0)], a_una[:-1]]) if len(a_una) else a_una

        # both streams in time order: in flight = highest end sent - highest ack seen
        ts = np.concatenate([d_ts, a_ts])
        kind = np.concatenate([np.zeros(len(d_ts), np.int8), np.ones(len(a_ts), np.int8)])
        order = np.lexsort((kind, ts))
        ts, kind = ts[order], kind[order]
        all_end = _cummax(d_end, _I64_MIN if c.max_end is None else c.max_end)
        snd_nxt = _cummax(np.concatenate([all_end, np.full(len(a_ts), -1)])[order], c.snd_nxt)
        una = _cummax(np.concatenate([np.full(len(d_ts), -1), a_una])[order], c.una)
        inflight = np.maximum(snd_nxt - np.maximum(una, 0), 0)
        inv = np.empty_like(order)
        inv[order] = np.arange(len(order))
        del order
        a_pos = inv[len(d_ts):]

        is_rtx, is_reorder = self._retransmissions(d_ts, d_start, d_end, all_end, np.maximum(
            una[inv[:len(d_ts)]], 0), max(int(una[-1]), 0) if len(una) else 0)
        del inv
        rtt = self._karn_rtt(d_ts, d_start, d_end, is_rtx, a_ts, a_ack, a_una, prev_una)
        a_sack = col["sack"][acks] if "sack" in col else np.zeros(len(a_ts), np.int8)
        dup = self._dupacks(length[acks], a_flags, a_sack, a_ack, a_una, a_win, inflight[a_pos])
        del acks, a_flags, a_sack
        dup_run = self._dup_runs(dup, a_ts)

        self._event(d_ts[is_rtx], "retransmit", d_start[is_rtx], d_len[is_rtx], [""])
        self._event(d_ts[is_reorder], "reorder", d_start[is_reorder], d_len[is_reorder],
                    ["filled a hole soon after it opened"])
        self._event(a_ts[dup], "dupack", a_ack[dup], np.zeros(int(dup.sum()), np.int64),
                    [f"dup #{k}" for k in dup_run[dup].tolist()])
        self._episodes(d_ts, all_end, is_rtx, a_ts, a_ack, a_una, dup_run)
        self._judge_runs()

        n = len(ts)
        rtt_all = np.full(n, np.nan)
        rwnd_all = np.full(n, np.nan)
        if len(a_pos):
            rtt_all[a_pos] = rtt
            rwnd_all[a_pos] = a_win
        rwnd_all = _ffill(rwnd_all, c.rwnd)
        srtt = self._srtt(rtt_all)
        rate = self._rate(ts, np.maximum(una, 0))
        out = {"ts_ns": ts, "srtt_us": srtt, "rtt_us": rtt_all,
               "inflight_bytes": inflight.astype(float), "rwnd": rwnd_all,
               "delivery_rate_bps": rate}
        if self.p.minor and n:  # change-only, as the probes report: a row per segment sent
            keep = (kind == 0) | ~np.isnan(rtt_all)
            keep[1:] |= (una[1:] != una[:-1]) | (snd_nxt[1:] != snd_nxt[:-1]) | (
                rwnd_all[1:] != rwnd_all[:-1])
            keep[0] |= c.first_row or bool(una[0] != c.una) or bool(
                snd_nxt[0] != c.snd_nxt) or bool(rwnd_all[0] != c.rwnd)
            out = {k: v[keep] for k, v in out.items()}
        if n:
            c.first_row = False
            c.snd_nxt, c.una, c.rwnd = int(snd_nxt[-1]), int(una[-1]), float(rwnd_all[-1])
        if len(d_ts):
            c.max_end, c.last_d_ts = int(all_end[-1]), int(d_ts[-1])
        if len(a_ts):
            c.last_a_ts = int(a_ts[-1])
        self._forget_acknowledged()
        return out

    # ----------------------------------------------------------------------------------------
    def _retransmissions(self, d_ts: np.ndarray, d_start: np.ndarray, d_end: np.ndarray,
                         all_end: np.ndarray, una_at_send: np.ndarray, una_after: int
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(retransmitted, reordered) per data segment. A segment behind the highest byte sent
        is a retransmission when its bytes were sent or acknowledged before; one that fills a
        fresh hole soon after the hole opened was reordered on the way to this capture point
        (or lost before it and resent: indistinguishable here)."""
        c = self.c
        if not len(d_ts):
            return np.zeros(0, bool), np.zeros(0, bool)
        prev_max = np.concatenate([[0 if c.max_end is None else max(c.max_end, 0)],
                                   np.maximum(all_end[:-1], 0)])
        behind = (d_end > d_start) & (d_start < prev_max)
        del prev_max
        # sent before in this slice: all but the first of equal starts (a stable sort keeps
        # them in sending order; np.unique and minimum.at took 2.4 times as long)
        order = np.argsort(d_start, kind="stable")
        by_start = d_start[order]
        seen = np.zeros(len(d_start), bool)
        seen[order[1:][by_start[1:] == by_start[:-1]]] = True
        seen |= np.isin(d_start, c.starts)
        del order, by_start
        # when the hole at each segment's start opened: the first send that passed that byte
        step_end = np.concatenate([c.step_end, all_end])
        step_ts = np.concatenate([c.step_ts, d_ts])
        hole_open_ts = step_ts[np.searchsorted(step_end, d_start, side="right").clip(
            max=len(step_ts) - 1)]
        late = (d_ts - hole_open_ts) > self.reorder_ns
        is_rtx = behind & (seen | (d_start < una_at_send) | late)
        up = np.concatenate([[True], step_end[1:] > step_end[:-1]])
        c.step_end, c.step_ts = step_end[up], step_ts[up]
        # only the starts the next slice can still resend (the rest _forget_acknowledged
        # drops): sorting a whole slice's starts was a quarter of the tracking
        c.starts = np.union1d(c.starts, d_start[d_start >= una_after])
        return is_rtx, behind & ~is_rtx

    def _karn_rtt(self, d_ts: np.ndarray, d_start: np.ndarray, d_end: np.ndarray,
                  is_rtx: np.ndarray, a_ts: np.ndarray, a_ack: np.ndarray, a_una: np.ndarray,
                  prev_una: np.ndarray) -> np.ndarray:
        """RTT samples (Karn), us per ACK: an ACK that newly covers the end of a segment sent
        once, measured from that segment's send time. Only ACKs that advance snd_una count,
        and none whose newly acknowledged bytes a retransmission sent before it touched."""
        c = self.c
        orig = ~is_rtx & (d_end > d_start)
        o_end = np.concatenate([c.o_end, d_end[orig]])
        o_ts = np.concatenate([c.o_ts, d_ts[orig]])
        o_order = np.argsort(o_end, kind="stable")
        c.o_end, c.o_ts = o_end[o_order], o_ts[o_order]
        c.rtx_start = np.concatenate([c.rtx_start, d_start[is_rtx]])
        c.rtx_ts = np.concatenate([c.rtx_ts, d_ts[is_rtx]])
        adv = a_ack > prev_una
        if not (len(c.o_end) and adv.any()):
            return np.full(len(a_ts), np.nan)
        k = np.searchsorted(c.o_end, a_ack, side="right") - 1
        okk = adv & (k >= 0)
        kk = np.where(okk, k, 0)
        del k
        seg_end, seg_ts = c.o_end[kk], c.o_ts[kk]
        # The ACKs that advance snd_una split the sequence space: each retransmitted byte is
        # newly acknowledged by one of them, the first whose snd_una passes it.
        touched = np.zeros(len(a_ts), bool)
        if len(c.rtx_start):
            hit = np.searchsorted(a_una, c.rtx_start, side="right")
            ok = hit < len(a_una)
            hit, start, rtx_ts = hit[ok], c.rtx_start[ok], c.rtx_ts[ok]
            touched[hit[(start >= prev_una[hit]) & (rtx_ts <= a_ts[hit])]] = True
        okk &= (seg_end > prev_una) & (seg_ts <= a_ts) & ~touched
        return np.where(okk, (a_ts - seg_ts) / 1000.0, np.nan)

    def _dupacks(self, a_len: np.ndarray, a_flags: np.ndarray, a_sack: np.ndarray,
                 a_ack: np.ndarray, a_una: np.ndarray, a_win: np.ndarray,
                 in_flight_at_ack: np.ndarray) -> np.ndarray:
        """Duplicate ACKs: pure ACKs repeating the highest ack with the same window while data
        is out. Same ACK number as the one before and as the highest; the window unchanged, or
        a SACK block present (RFC 6675: a SACK-carrying ACK counts even if the window moved)."""
        c = self.c
        pure = (a_len == 0) & ((a_flags & (TCP_SYN | TCP_FIN | TCP_RST)) == 0)
        if not len(a_ack):
            return pure
        prev_ack = np.concatenate([[-1 if c.last_ack is None else c.last_ack], a_ack[:-1]])
        prev_win = np.concatenate([[c.last_win], a_win[:-1]])
        same = (a_ack == prev_ack) & (a_ack == a_una) & ((a_win == prev_win) | (a_sack > 0))
        if c.last_ack is None:
            same[0] = False
        c.last_ack, c.last_win = int(a_ack[-1]), int(a_win[-1])
        return pure & same & (in_flight_at_ack > 0)

    def _dup_runs(self, dup: np.ndarray, a_ts: np.ndarray) -> np.ndarray:
        """The number of each duplicate ACK in its run; runs closed (the ACK after the last
        duplicate) go to `self.runs` with that next ACK's time."""
        c = self.c
        dup_run = np.zeros(len(dup), np.int64)
        if len(dup) and c.dup_run and not dup[0] and self.open_run is not None:
            self._close_run(int(a_ts[0]))
        for i in np.flatnonzero(dup):
            dup_run[i] = (dup_run[i - 1] if i > 0 else c.dup_run) + 1 \
                if (i > 0 and dup[i - 1]) or (i == 0 and c.dup_run) else 1
            if dup_run[i] == 1:
                self.open_run = [int(a_ts[i]), 1, int(a_ts[i])]
            elif self.open_run is not None:
                self.open_run[1:] = [int(dup_run[i]), int(a_ts[i])]
            if i + 1 < len(dup) and not dup[i + 1]:
                self._close_run(int(a_ts[i + 1]))
        if len(dup):
            c.dup_run = int(dup_run[-1]) if dup[-1] else 0
        return dup_run

    def _close_run(self, next_ts: int | None) -> None:
        if self.open_run is not None:
            start, length, last = self.open_run
            self.runs.append((start, length, last if next_ts is None else next_ts))
            self.open_run = None

    def _episodes(self, d_ts: np.ndarray, all_end: np.ndarray, is_rtx: np.ndarray,
                  a_ts: np.ndarray, a_ack: np.ndarray, a_una: np.ndarray,
                  dup_run: np.ndarray) -> None:
        """Loss episodes: from the first retransmission or the Nth duplicate ACK until an ACK
        passes the highest byte sent when the episode began (the recovery point). Whether it
        was fast recovery or a timeout needs the median RTT: decided in `finish`, from the
        time of the latest duplicate ACK at or before the episode's start, kept with it."""
        c, eps = self.c, self.episodes
        if len(eps) and eps.open:
            eps.resolve(a_ts, a_ack, 0)
        dups = a_ts[dup_run > 0]
        starts = sorted(
            [(int(d_ts[i]), "rtx", int(i)) for i in np.flatnonzero(is_rtx)]
            + [(int(a_ts[i]), "dup", int(i)) for i in np.flatnonzero(dup_run == self.thr)])
        for t, why, _ in starts:
            if len(eps) and (eps.open or t <= eps.last_end):
                continue
            j = int(np.searchsorted(d_ts, t, side="right")) - 1
            if j >= 0:
                recover = int(all_end[j])
            else:
                recover = c.max_end if c.max_end is not None else int(all_end[0])
            k = int(np.searchsorted(a_ts, t, side="right")) - 1
            seq0 = int(a_una[k]) if k >= 0 else max(c.una, 0)
            before = dups[dups <= t]
            last_dup = max(int(before.max()) if len(before) else _I64_MIN,
                           _I64_MIN if self.last_dup is None else self.last_dup)
            eps.add(t, why == "dup", seq0, recover, last_dup)
            eps.resolve(a_ts, a_ack, int(np.searchsorted(a_ts, t, side="left")))
        if len(dups):
            self.last_dup = max(int(dups.max()), _I64_MIN if self.last_dup is None
                                else self.last_dup)

    def _judge_runs(self) -> None:
        """Disorder: duplicate-ACK runs that did not reach the threshold, outside the loss
        episodes and the Disorder intervals before (each starts where the one before it ended,
        or later). A run closed in this slice started in it or before: every episode that
        starts before the run is known by now, so it is judged now, not held to the end."""
        for t, length, nxt in self.runs:
            if length < self.thr and not self.episodes.covers(t) and (
                    self.disorder_end is None or t > self.disorder_end):
                self._states.append((self.conn, self.d, self.host, "estimated", "Disorder",
                                     t, nxt))
                self.disorder_end = nxt
        self.runs = []

    def _srtt(self, rtt: np.ndarray) -> np.ndarray:
        """RFC 6298 smoothing (alpha 1/8) of the RTT samples, carried between samples."""
        c = self.c
        out = np.full(len(rtt), np.nan)
        s = c.srtt
        samples = np.flatnonzero(~np.isnan(rtt))
        self.rtts.add(rtt[samples])
        for i in samples:
            s = rtt[i] if np.isnan(s) else s + (rtt[i] - s) / 8.0
            out[i] = s
        out = _ffill(out, c.srtt)
        c.srtt = s
        return out

    def _rate(self, ts: np.ndarray, cum: np.ndarray) -> np.ndarray:
        """Bytes per second acknowledged over the trailing window ending at each row."""
        c, w = self.c, self.p.window_ns
        if self.p.stream_rows < 2:
            return np.full(len(ts), np.nan)
        all_ts = np.concatenate([c.hist_ts, ts])
        all_cum = np.concatenate([c.hist_cum, cum])
        # the rates of this slice's rows only: the history's were the slice before's
        rate = trailing_rate(all_ts, all_cum, w, len(c.hist_ts))
        if len(ts):
            # what a later row's window can start at: the history's and this slice's rows
            # that begin a grid step, within a window of the last row
            starts = window_starts(ts, w, c.hist_last)
            c.hist_last = int(ts[-1])
            new_ts = np.concatenate([c.hist_ts, ts[starts]])
            new_cum = np.concatenate([c.hist_cum, cum[starts]])
            keep = int(np.searchsorted(new_ts, ts[-1] - w, side="left"))
            c.hist_ts, c.hist_cum = new_ts[keep:], new_cum[keep:]
        return rate

    def _forget_acknowledged(self) -> None:
        """Drop what no later ACK or segment can need: everything at or below snd_una."""
        c = self.c
        una = max(c.una, 0)
        live = c.o_end > una
        c.o_end, c.o_ts = c.o_end[live], c.o_ts[live]
        live = c.rtx_start >= una
        c.rtx_start, c.rtx_ts = c.rtx_start[live], c.rtx_ts[live]
        c.starts = c.starts[c.starts >= una]
        live = c.step_end > una
        c.step_end, c.step_ts = c.step_end[live], c.step_ts[live]

    # ----------------------------------------------------------------------------------------
    def finish(self) -> tuple[list[tuple], dict[str, Any] | None]:
        """What `found` would give, once every slice was fed: the runs still open, and the
        loss episodes, whose kind needs the whole direction's median RTT."""
        c, eps = self.c, self.episodes
        self._close_run(None)
        self._judge_runs()
        median = self.rtts.median()
        recent_ns = int(max(2 * median * 1000, 1_000_000)) if median is not None \
            else 200_000_000
        if len(eps):
            last = max(c.last_d_ts, c.last_a_ts)
            t, end = eps.col("t"), eps.col("end")
            end = np.where(end == _UNRESOLVED, last, end)
            # Fast recovery when duplicate ACKs led up to the retransmission within about an
            # RTT (with SACK one ACK can report 3+ lost segments, so one duplicate is enough);
            # a retransmission after silence is a timeout.
            fast = eps.col("dup") | (eps.col("last_dup") > t - recent_ns)
            seq0 = eps.col("seq0")
            self._event(t, "loss_episode", seq0, eps.col("recover") - seq0,
                        np.where(fast, "fast retransmit", "timeout / no dupacks").tolist())
            self._states += [(self.conn, self.d, self.host, "estimated",
                              "Recovery" if f else "Loss", s, max(e, s))
                             for f, s, e in zip(fast.tolist(), t.tolist(), end.tolist(),
                                                strict=True)]
        return self.found()

    def found(self) -> tuple[list[tuple], dict[str, Any] | None]:
        """(CA-state intervals, marks) decided since the last call, the marks in time order:
        each slice's are taken after it is fed and written, so none is held to the end."""
        states, self._states = self._states, []
        events = self._event_table()
        self._ev = {name: _Column(col.dtype) for name, col in self._ev.items()}
        return states, events

    def _event(self, ts: np.ndarray, kind: str, seq: np.ndarray, nbytes: np.ndarray,
               notes: list[str]) -> None:
        """Events of one kind: their times, sequence numbers, bytes and notes (one for all,
        or one each)."""
        if not len(ts):
            return
        seq = np.asarray(seq, np.int64)
        ev = self._ev
        ev["ts_ns"].extend(np.asarray(ts, np.int64))
        ev["kind"].extend(np.full(len(ts), self._kinds.setdefault(kind, len(self._kinds))))
        ev["seq"].extend(seq)
        ev["bytes"].extend(np.asarray(nbytes, np.int64))
        ev["cmd"].extend(self.cmd_of(seq))
        codes = [self._notes.setdefault(x, len(self._notes)) for x in notes]
        ev["note"].extend(np.full(len(ts), codes[0]) if len(codes) == 1 else np.array(codes))

    def _event_table(self) -> dict[str, Any] | None:
        """The events' columns (EVENT_FIELDS) in time order, ties in the order found (None:
        none), kind and note categorical (labels.object_labels'), the command a float (NaN:
        unknown), as the table stores it."""
        if not len(self._ev["ts_ns"]):
            return None
        order = np.argsort(self._ev["ts_ns"].values(), kind="stable")
        cols: dict[str, Any] = {name: c.values()[order] for name, c in self._ev.items()}
        cols["kind"] = coded_labels(cols["kind"], list(self._kinds))
        cols["note"] = coded_labels(cols["note"], list(self._notes))
        return {name: cols[name] for name in EVENT_FIELDS}


def _ffill(values: np.ndarray, before: float) -> np.ndarray:
    """Each NaN replaced by the last value before it (`before`: the slices' before)."""
    if not len(values):
        return values
    seen = ~np.isnan(values)
    idx = np.where(seen, np.arange(len(values)), -1)
    np.maximum.accumulate(idx, out=idx)
    out = values[np.maximum(idx, 0)]
    out[idx < 0] = before
    return out

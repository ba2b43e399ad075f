"""Where a transfer's time went: every nanosecond of one connection's data phase, given to the
one cause that held the data sender back at that moment.

The data sender (the target for READs, the initiator for WRITEs) is either sending or idle.
Its timeline, as seen at its own capture point, is cut into bursts of data segments and the
gaps between them (istrace.measure.bursts.data_bursts), and each piece is given a cause:

  idle, the command's data still to send  -> the window that stopped it: tcp_loss_recovery (a
      loss-recovery CA state), tcp_rwnd (in flight at the receive window), tcp_cwnd (at the
      congestion window), tcp_sndbuf (neither window full: the socket's send buffer); the
      kernel's own chronographs (ss rwnd_limited / sndbuf_limited) decide where sampled
  idle, no data to send                   -> iscsi_r2t (a WRITE waiting for its R2T),
      target_service (the next command was at the target, not yet answered with data), else
      initiator_concurrency (the initiator had not sent the next command)
  sending                                 -> network_capacity (at the path's known capacity),
      host_cpu_target / host_cpu_initiator (the sender's CPU saturated), else unknown

This is RFC 4898's and Linux's sender-limit triage (tcp_info busy / rwnd_limited /
sndbuf_limited), extended across the iSCSI and SCSI layers. Causes the accounting cannot tell
apart without probe events are named with `unsure` reasons rather than guessed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from istrace.capture import orderstat
from istrace.capture.segsource import SegmentsLike
from istrace.capture.tracksamples import Samples, SamplesLike, as_samples
from istrace.measure.bursts import burst_gap_threshold, data_bursts
from istrace.measure.payload import payload_totals

LOSS_STATES = ("Recovery", "Loss")
# In flight within 10% of a window counts as that window being full (one MSS of slack at the
# small windows a limit shows up with).
FULL = 0.9
# after a loss, a window below this share of its ceiling on the connection is the loss's cut
CUT = 0.9
# seen from the receiver only (no window): how long after a loss episode began the window
# counts as still cut (a window of a few hundred segments regrows in about this many RTTs)
REGROW_NS = 500_000_000
# A burst sent at >= 75% of the path's capacity is the link doing its job.
AT_CAPACITY = 0.75
# A process using >= 90% of the CPU it may use is saturated.
CPU_SATURATED = 0.9


@dataclass
class Accounting:
    """Time per cause (ns) over the data phases of the connections accounted."""

    direction: str
    sender: str
    time_ns: dict[str, int] = field(default_factory=dict)
    span_ns: int = 0
    bytes: int = 0
    connections: list[str] = field(default_factory=list)
    # Per connection: its own time per cause, bytes and data-phase span (the same sums, split).
    per_connection: dict[str, dict[str, Any]] = field(default_factory=dict)
    unsure: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Per host (and `initiator_workload`): how saturated its CPU was (cpu_saturation).
    cpu: dict[str, float] = field(default_factory=dict)

    def add(self, cause: str, ns: float) -> None:
        if ns > 0:
            self.time_ns[cause] = self.time_ns.get(cause, 0) + int(ns)

    def shares(self) -> dict[str, float]:
        total = sum(self.time_ns.values())
        if total <= 0:
            return {}
        return {k: v / total for k, v in sorted(self.time_ns.items(), key=lambda kv: -kv[1])}


def _coverage(intervals: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints (t, covered time before t) of a union of [start_ns, end_ns) intervals, so the
    covered time inside any [a, b] is one np.interp at b minus one at a."""
    if intervals is None or intervals.empty:
        return np.array([0.0, 1.0]), np.array([0.0, 0.0])
    iv = intervals.sort_values("start_ns")
    s = iv["start_ns"].to_numpy(np.float64)
    e = np.maximum(iv["end_ns"].to_numpy(np.float64), s)
    # Merge overlaps so covered time is never counted twice.
    ends = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > ends[:-1]])
    grp = np.cumsum(new) - 1
    ms = pd.Series(s).groupby(grp).min().to_numpy()
    me = pd.Series(ends).groupby(grp).max().to_numpy()
    t = np.empty(2 * len(ms))
    t[0::2], t[1::2] = ms, me
    cov = np.zeros_like(t)
    cov[1::2] = np.cumsum(me - ms)
    cov[2::2] = cov[1:-1:2]
    return t, cov


def _covered(cov: tuple[np.ndarray, np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    t, c = cov
    return np.interp(b, t, c) - np.interp(a, t, c)


def _before(ts: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the last element of sorted `ts` at or before each `at` (-1: none)."""
    return np.searchsorted(ts, at, side="right") - 1


def sender_commands(cap: Any, d: str) -> tuple[pd.DataFrame | None, str]:
    """The commands as timed at the data sender, and where the times come from."""
    sender = "target" if d == "t2i" else "initiator"
    cmds = cap.commands.get(sender)
    if cmds is not None and not cmds.empty:
        return cmds, f"{sender}.pcap"
    cmds = cap.main_commands()
    if cmds is None or cmds.empty:
        return None, "none"
    return cmds, f"{'initiator' if sender == 'target' else 'target'}.pcap (other end's times)"


def _cpu_rows(cap: Any, window: tuple[int, int] | None) -> pd.DataFrame | None:
    """The host sampler's CPU rows inside `window` (all of them when none fall inside)."""
    cpu = getattr(cap, "cpu", None)
    if cpu is None or not isinstance(cpu, pd.DataFrame) or cpu.empty \
            or "what" not in cpu.columns or "busy" not in cpu.columns:
        return None
    if window is not None:
        inside = cpu[(cpu["ts_ns"] > window[0]) & (cpu["ts_ns"] <= window[1])]
        cpu = inside if not inside.empty else cpu
    return cpu


_PROCS = (("tgtd", "target"), ("workload", "initiator"))


def cpu_use(cap: Any, window: tuple[int, int] | None = None) -> dict[str, dict[str, float]]:
    """Mean CPU use per host from the host sampler: the target daemon and the workload as a
    share of what they may use (their cgroup's quota as sampled, else the cap in meta.json,
    else one core), and all the host's CPUs together (`all_cpus`: on the namespace testbed both
    ends and the emulated path share one machine), over the samples inside `window` (the data
    phase: idle time before and after the transfer would water a saturated process down). The
    mean, not the median: a process's CPU time comes in 10 ms ticks, so a 5% cap shows 2-3
    ticks per 500 ms sample and any one sample is +-40%; their mean is the whole window's
    ticks over its time."""
    cpu = _cpu_rows(cap, window)
    if cpu is None:
        return {}
    tb = cap.meta.get("testbed") if isinstance(cap.meta.get("testbed"), dict) else {}
    caps = {"tgtd": (tb or {}).get("tgt_cpu"), "workload": (tb or {}).get("ini_cpu")}
    out: dict[str, dict[str, float]] = {}
    for what, host in (*_PROCS, ("cpu", "target"), ("cpu", "initiator")):
        rows = cpu[(cpu["what"] == what) & (cpu["host"].astype(str) == host)]
        x = rows["busy"].dropna()
        if x.empty:
            continue
        if what == "cpu":
            out.setdefault(host, {})["all_cpus"] = float(x.mean())
            continue
        sampled = rows["cap"].dropna() if "cap" in rows.columns else pd.Series(dtype=float)
        given = caps[what]
        limit = float(sampled.mean()) if not sampled.empty else (
            float(given) / 100.0 if given else 1.0)
        out.setdefault(host, {})[what] = float(x.mean()) / limit if limit > 0 else 0.0
    return out


def cpu_throttled(cap: Any, window: tuple[int, int] | None = None) -> dict[str, float]:
    """Per host, the share of its process's CPU-quota periods inside `window` in which the
    kernel held it at its quota (the cgroup's nr_throttled / nr_periods); only for processes
    whose cgroup has a quota and that were runnable in some period."""
    cpu = _cpu_rows(cap, window)
    if cpu is None or "periods" not in cpu.columns:
        return {}
    out = {}
    for what, host in _PROCS:
        rows = cpu[(cpu["what"] == what) & (cpu["host"].astype(str) == host)]
        periods = float(rows["periods"].sum())  # NaN (not sampled) counts as none
        if periods > 0:
            out[host] = float(rows["throttled"].sum()) / periods
    return out


def cpu_saturation(cap: Any, window: tuple[int, int] | None = None) -> dict[str, float]:
    """Per host, the most saturated of its process and its machine (>= CPU_SATURATED: the
    host could not run faster). A process under a CPU quota is as saturated as the share of
    quota periods it was throttled in: counted exactly by the kernel, where its clock ticks
    are few (a 5% cap earns 2-3 per sample) and read 85-95% of the cap for a process held
    at it all along."""
    use = cpu_use(cap, window)
    held = cpu_throttled(cap, window)
    for host, share in held.items():
        what = next(w for w, h in _PROCS if h == host)
        if what in use.get(host, {}):
            use[host][what] = share
    out = {h: max(v.values()) for h, v in use.items() if v}
    # The workload alone (not the machine it shares with the target on the testbed): when it
    # used all the CPU it may, the commands it did not issue waited for that CPU.
    wl = use.get("initiator", {}).get("workload")
    if wl is not None:
        out["initiator_workload"] = wl
    return out


def float_column(s: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric column as float64, NaN where missing: the column itself when it is one."""
    col = s[name]
    if col.dtype == np.float64:  # NaN is its own missing value: the column itself, no copy
        return col.to_numpy()
    return col.to_numpy(np.float64, na_value=np.nan)


Series = Iterable[tuple[np.ndarray, np.ndarray]]  # (times, values) chunks, times rising


def _series(s: Samples, column: str, also: str | None = None, **where: str | None) -> Series:
    """One column of the samples `where` picks, in time order a chunk at a time, the rows
    where it (and `also`) is missing left out."""
    cols = ["ts_ns", column] + ([also] if also else [])
    for c in s.timed(cols, **where):
        v = float_column(c, column)
        ok = ~np.isnan(v)
        if also:
            ok &= ~np.isnan(float_column(c, also))
        yield c["ts_ns"].to_numpy(np.int64)[ok], v[ok]


def asof(series: Series, at: np.ndarray) -> tuple[np.ndarray, int]:
    """(the series' value at or before each time in `at`, NaN before its first; its rows),
    one chunk at a time: the tracker's samples are millions."""
    order = np.argsort(at, kind="stable")
    t = at[order]
    got = np.full(len(at), np.nan)
    carry, pos, rows = np.nan, 0, 0
    for ts, v in series:
        if not len(ts):
            continue
        rows += len(ts)
        # times before the chunk's first row take the last value before it; those at its
        # last row's time wait for the next chunk (it may start at the same time)
        first = int(np.searchsorted(t, ts[0], side="left"))
        got[pos:max(first, pos)] = carry
        pos = max(first, pos)
        end = max(int(np.searchsorted(t, ts[-1], side="left")), pos)
        got[pos:end] = v[_before(ts, t[pos:end])]
        pos = end
        carry = v[-1]
    got[pos:] = carry
    out = np.empty(len(at))
    out[order] = got
    return out, rows


def _one_cause(n: int, cause: str) -> np.ndarray:
    """`cause` for each of n pieces, as an object array whose rows all hold the one string:
    np.full made a copy of it per row (a minute's 93 000 gaps: 5 MB of one word)."""
    out = np.empty(n, dtype=object)
    out[:] = cause
    return out


def _window_cause(samples: SamplesLike | None, at: np.ndarray, mss: float, conn: str | None = None,
                  d: str | None = None) -> np.ndarray:
    """For each time in `at`: which window held in-flight data back, over the samples of
    connection `conn` and direction `d` (None: all). Bytes in flight and the receive window
    from the pcap (every segment), the congestion window from probe events (change-only: a
    steady cwnd has few samples, so in-flight is not read from them)."""
    cause = _one_cause(len(at), "tcp_window")
    s = as_samples(samples)
    where: dict[str, str | None] = {"conn": conn, "dir": d}
    if not s.rows(**where):
        return cause
    inf, n = asof(_series(s, "inflight_bytes", source="estimated", **where), at)
    src: str | None = "estimated"
    if not n:  # no pcap estimate: bytes in flight from the probes
        src = None
        inf, _ = asof(_series(s, "inflight_bytes", **where), at)
    win, n = asof(_series(s, "rwnd", also="inflight_bytes", source=src, **where), at)
    if n:
        with np.errstate(invalid="ignore"):
            cause[inf >= FULL * win] = "tcp_rwnd"
    cw, n = asof(_series(s, "cwnd", source="exact", **where), at)
    if n:
        cw = cw * mss
        todo = (cause == "tcp_window") & ~np.isnan(cw) & ~np.isnan(inf)
        with np.errstate(invalid="ignore"):
            full = inf >= cw - 2 * mss
        cause[todo & full] = "tcp_cwnd"
        # Exact cwnd not full and the receive window not full: the socket's send buffer was
        # full, or the sending application had not written yet; only the kernel's clocks
        # (ss -ti) tell these apart (_chrono_cause).
        cause[todo & ~full] = "tcp_sndbuf_or_app"
    return cause


def _below_ceiling(samples: SamplesLike | None, at: np.ndarray, sender: str, episodes: np.ndarray,
                   conn: str | None = None, d: str | None = None) -> np.ndarray:
    """For each time in `at`: whether the sender's window is below CUT of the highest it
    reached on the connection. After a loss a window held below that is the loss's doing (a
    loss-free sender's window would have grown on); one at its ceiling is held there by
    something else: a clamp, a limit of the congestion control. (A CI capture with one fast
    retransmit, undone, and cwnd clamped at 40 throughout had 58% of its time called loss
    recovery.) From the exact congestion window when the probes gave it, else from the bytes
    in flight at the sender's capture point (their 99th percentile: one burst is not a
    ceiling). The receiver's capture point sees no window (its ACKs leave as the data comes):
    with only that, a loss is blamed for the window-limited time within REGROW_NS after a
    loss episode began (`episodes`, sorted starts), not for all the time after the first
    (CI: one retransmission in 4 s of a send-buffer-limited transfer was called 63% loss
    recovery from the initiator's pcap). No samples at all: True."""
    below = np.ones(len(at), bool)
    s = as_samples(samples)
    where: dict[str, str | None] = {"conn": conn, "dir": d}
    if s.empty or not len(at):
        return below
    cwnd = s.column("cwnd", source="exact", **where)  # probe events: few
    if len(cwnd):
        top = float(cwnd.max())
        now, _ = asof(_series(s, "cwnd", source="exact", **where), at)
    else:
        if not any(len(v) for v in s.values("inflight_bytes", source="estimated", **where)):
            return below
        # the sender's capture point (samples that name none: theirs)
        host = sender if any(k.host is not None for k, _ in s.keys()) else None
        mine = {**where, "source": "estimated", "host": host}
        n = sum(len(v) for v in s.values("inflight_bytes", **mine))
        if not n:
            k = _before(episodes, at)
            return (k >= 0) & (at - episodes[np.maximum(k, 0)] <= REGROW_NS)
        top = orderstat.quantile(lambda: s.values("inflight_bytes", **mine), 0.99, n)
        now, _ = asof(_series(s, "inflight_bytes", **mine), at)
    with np.errstate(invalid="ignore"):
        return ~(now >= CUT * top)


def _episode_starts(states: pd.DataFrame | None, first_loss_ns: int) -> np.ndarray:
    """When each loss episode (Recovery or Loss state) began, sorted, with the first
    retransmission among them."""
    starts = [np.array([first_loss_ns], np.int64)]
    if states is not None and not states.empty:
        st = states[states["state"].astype(str).isin(LOSS_STATES)]
        starts.append(st["start_ns"].to_numpy(np.int64))
    return np.unique(np.concatenate(starts))


def _inside(spans: tuple[np.ndarray, np.ndarray] | None, a: np.ndarray,
            b: np.ndarray) -> np.ndarray:
    """Whether each gap [a, b] lies inside one PDU's segments (spans sorted by start)."""
    if spans is None or len(spans[0]) == 0:
        return np.zeros(len(a), bool)
    start, end = spans
    k = _before(start, a)
    return (k >= 0) & (end[np.maximum(k, 0)] >= b)


def _chrono_cause(sock: pd.DataFrame | None, a: np.ndarray, b: np.ndarray,
                  cause: np.ndarray, app: str, inside: np.ndarray | None = None,
                  pace: str = "tcp_cwnd") -> np.ndarray:
    """Where the sender's socket was sampled (ss -ti), the kernel's own accounting over the
    sampling period holding the gap overrules the estimate: the rwnd_limited or sndbuf_limited
    clock running most of the period names that limit; otherwise the snapshot at the period's
    end says whether the congestion window was full (unacked >= cwnd - 2: the congestion
    control held the data) or not: inside a PDU (`inside`) the data was written, so the pacing
    rate held it (congestion control again); between PDUs the sending application (`app`) had
    not written. The busy clock alone says little: it runs whenever data is unacked."""
    need = {"rwnd_limited_us", "sndbuf_limited_us"}
    if sock is None or sock.empty or not need <= set(sock.columns):
        return cause
    s = sock.sort_values("ts_ns")
    t = s["ts_ns"].to_numpy(np.int64)
    if len(t) < 2:
        return cause
    dt = np.diff(t) / 1e3

    def grew(col: str) -> np.ndarray:
        return np.diff(s[col].ffill().fillna(0).to_numpy(np.float64))

    rl, sl = grew("rwnd_limited_us"), grew("sndbuf_limited_us")
    unacked = s["unacked"].to_numpy(np.float64) if "unacked" in s.columns \
        else np.full(len(s), np.nan)
    cwnd = s["cwnd"].to_numpy(np.float64) if "cwnd" in s.columns else np.full(len(s), np.nan)
    k = _before(t, (a + b) // 2)
    ok = (k >= 0) & (k < len(dt))
    kk = np.clip(k, 0, len(dt) - 1)
    half = 0.5 * dt[kk]
    with np.errstate(invalid="ignore"):
        full = unacked[kk + 1] >= cwnd[kk + 1] - 2
        known = ~np.isnan(unacked[kk + 1]) & ~np.isnan(cwnd[kk + 1])
    out = cause.copy()
    inside = np.zeros(len(a), bool) if inside is None else inside
    # Queued bytes at the send buffer's size: the writer is held whatever the clock says (a
    # non-blocking writer such as tgtd gets EAGAIN, and the sndbuf_limited clock may not run).
    if {"wmem_queued", "sndbuf_bytes"} <= set(s.columns):
        wq = s["wmem_queued"].to_numpy(np.float64)
        sb = s["sndbuf_bytes"].to_numpy(np.float64)
        with np.errstate(invalid="ignore"):
            buf_full = wq[kk + 1] >= 0.9 * sb[kk + 1]
    else:
        buf_full = np.zeros(len(a), bool)
    # A snapshot every few hundred ms only settles what the per-gap estimate left open; a
    # window the probes saw full at the gap (cwnd, rwnd) stays.
    open_ = ok & ~np.isin(cause, ["tcp_cwnd", "tcp_rwnd"])
    out[open_ & known & full] = "tcp_cwnd"
    out[open_ & known & ~full & inside] = pace
    out[open_ & known & ~full & ~inside] = app
    out[open_ & buf_full & ~(known & full)] = "tcp_sndbuf"
    out[ok & (rl[kk] > half)] = "tcp_rwnd"
    out[ok & (sl[kk] > half)] = "tcp_sndbuf"
    return out


def account_connection(acc: Accounting, segs: SegmentsLike, cmds: pd.DataFrame | None,
                       r2t_ts: np.ndarray, samples: SamplesLike | None, states: pd.DataFrame | None,
                       sock: pd.DataFrame | None, capacity_bps: float | None,
                       cpu: dict[str, float], link_busy: float | None = None,
                       first_loss_ns: int | None = None,
                       pdu_spans: tuple[np.ndarray, np.ndarray] | None = None,
                       conn: str | None = None) -> None:
    """Add one connection's data phase (segments of direction acc.direction, as seen at the
    sender) to `acc`, and with `conn` keep its own share in acc.per_connection.

    With the path's capacity known, the link is busy `link_busy` of the span (all connections'
    bytes / capacity over their common span), whatever the sender's own burst pattern looks
    like (ACK-clocked sending through a slower link shows as short bursts and gaps at the
    sender); the rest of the span is shared among the other causes in proportion to the time
    the sender's gaps and bursts gave them."""
    one = Accounting(direction=acc.direction, sender=acc.sender)
    _classify(one, segs, cmds, r2t_ts, samples, states, sock, capacity_bps, cpu, first_loss_ns,
              pdu_spans, conn)
    acc.span_ns += one.span_ns
    acc.bytes += one.bytes
    acc.unsure += one.unsure
    mine = Accounting(direction=acc.direction, sender=acc.sender)
    if link_busy is None or one.span_ns <= 0:
        mine.time_ns = dict(one.time_ns)
    else:
        link = min(link_busy, 1.0) * one.span_ns
        mine.add("network_capacity", link)
        rest = {k: v for k, v in one.time_ns.items() if k != "network_capacity"}
        total = sum(rest.values())
        left = one.span_ns - link
        if total <= 0:
            mine.add("sending_unexplained", left)
        else:
            for k, v in rest.items():
                mine.add(k, v * left / total)
    for k, v in mine.time_ns.items():
        acc.add(k, v)
    if conn is not None:
        acc.connections.append(conn)
        acc.per_connection[conn] = {"time_ns": mine.time_ns, "bytes": one.bytes,
                                    "span_ns": one.span_ns}


def _classify(acc: Accounting, segs: SegmentsLike, cmds: pd.DataFrame | None,
              r2t_ts: np.ndarray, samples: SamplesLike | None, states: pd.DataFrame | None,
              sock: pd.DataFrame | None, capacity_bps: float | None,
              cpu: dict[str, float], first_loss_ns: int | None,
              pdu_spans: tuple[np.ndarray, np.ndarray] | None,
              conn: str | None) -> None:
    """Time per cause of one connection from the sender's bursts and gaps. In parts, each
    one's per-burst or per-gap arrays gone before the next makes its own: a minute's
    190 000 gaps are 1.5 MB an array, and the parts held 37 MB at once."""
    d = acc.direction
    loss = states[states["state"].astype(str).isin(LOSS_STATES)] if states is not None \
        and not states.empty else None
    cov = _coverage(loss)
    ends = _account_sending(acc, data_bursts(segs, d, burst_gap_threshold(segs, d)),
                            cmds, cov, capacity_bps, cpu)
    if ends is None:
        return
    ga, gb = _gaps(*ends)
    del ends
    if len(ga) == 0:
        return
    gap = (gb - ga).astype(np.float64)
    g_loss = np.minimum(_covered(cov, ga.astype(float), gb.astype(float)), gap)
    acc.add("tcp_loss_recovery", float(g_loss.sum()))
    gap_left = gap - g_loss
    del gap, g_loss
    pending = _account_idle(acc, cmds, r2t_ts, sock, cpu, ga, gb, gap_left)
    if pending.any():
        pa, pb, left = ga[pending], gb[pending], gap_left[pending]
        del ga, gb, gap_left, pending
        _account_held_back(acc, segs, samples, states, sock, cpu, first_loss_ns, pdu_spans,
                           conn, pa, pb, left)


def _account_sending(acc: Accounting, bursts: pd.DataFrame, cmds: pd.DataFrame | None,
                     cov: tuple[np.ndarray, np.ndarray], capacity_bps: float | None,
                     cpu: dict[str, float]) -> tuple[int, np.ndarray, np.ndarray] | None:
    """The data phase's span and bytes, and its sending time by cause: at capacity,
    CPU-bound, or not explained. (start of the data phase, each burst's start, its end with
    its last segment's serialisation); None: no bursts."""
    if bursts.empty:
        return None
    per = bursts["bytes"].to_numpy(np.float64) / np.maximum(bursts["segments"].to_numpy(), 1)
    ser = per / capacity_bps * 1e9 if capacity_bps else np.zeros(len(bursts))
    bs = bursts["start_ns"].to_numpy(np.int64)
    be = bursts["end_ns"].to_numpy(np.int64) + ser.astype(np.int64)
    start = int(bs[0])
    if cmds is not None and not cmds.empty and "issue_ts_ns" in cmds.columns:
        iss = cmds["issue_ts_ns"].dropna()
        if not iss.empty:
            start = min(start, int(iss.min()))
    end = int(be[-1])
    acc.span_ns += end - start
    acc.bytes += int(bursts["bytes"].sum())

    busy = be - bs
    in_loss = np.minimum(_covered(cov, bs.astype(float), be.astype(float)), busy)
    acc.add("tcp_loss_recovery", float(in_loss.sum()))
    rate = np.where(busy > 0, (bursts["bytes"].to_numpy(np.float64)) / np.maximum(busy, 1) * 1e9,
                    np.nan)
    rest = (busy - in_loss).astype(np.float64)
    host = acc.sender
    if capacity_bps:
        at_cap = rate >= AT_CAPACITY * capacity_bps
        # One-segment bursts carry no rate: they go with the link when most bytes did.
        at_cap |= np.isnan(rate) & (bursts["segments"].to_numpy() <= 1)
        acc.add("network_capacity", float(rest[at_cap].sum()))
        rest = np.where(at_cap, 0.0, rest)
    if cpu.get(host, 0.0) >= CPU_SATURATED:
        acc.add(f"host_cpu_{host}", float(rest.sum()))
    else:
        acc.add("sending_unexplained", float(rest.sum()))
    return start, bs, be


def _gaps(start: int, bs: np.ndarray, be: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The idle gaps: before the first burst (command in flight) and between bursts."""
    ga = np.concatenate([[start], be[:-1]]).astype(np.int64)
    gb = bs.astype(np.int64)
    keep = gb > ga
    return ga[keep], gb[keep]


def _account_idle(acc: Accounting, cmds: pd.DataFrame | None, r2t_ts: np.ndarray,
                  sock: pd.DataFrame | None, cpu: dict[str, float], ga: np.ndarray,
                  gb: np.ndarray, gap_left: np.ndarray) -> np.ndarray:
    """The gaps with no data to send: R2T waits, target service, then the initiator's
    missing concurrency. Returns which gaps had data pending (their cause is a window's)."""
    pending = np.zeros(len(ga), bool)
    service = np.zeros(len(ga))
    r2t = np.zeros(len(ga), bool)
    if cmds is not None and not cmds.empty and {"first_data_ts_ns", "last_data_ts_ns"} <= set(
            cmds.columns):
        c = cmds.dropna(subset=["first_data_ts_ns", "last_data_ts_ns"])
        c = c.sort_values("first_data_ts_ns")
        fd = c["first_data_ts_ns"].to_numpy(np.int64)
        ld = np.maximum.accumulate(c["last_data_ts_ns"].to_numpy(np.int64))
        k = _before(fd, ga)
        pending = (k >= 0) & (ld[np.maximum(k, 0)] >= gb)
        # The command whose data ends the gap: time since it reached the sender was service.
        nxt = np.searchsorted(fd, gb, side="left")
        ok = nxt < len(fd)
        arr = c["issue_ts_ns"].to_numpy(np.float64) if "issue_ts_ns" in c.columns \
            else np.full(len(fd), np.nan)
        arr_n = np.where(ok, arr[np.minimum(nxt, len(fd) - 1)], np.nan)
        srv = np.where(np.isnan(arr_n), 0.0, gb - np.clip(arr_n, ga, gb))
        service = np.where(pending, 0.0, srv)
    if len(r2t_ts):
        k = _before(r2t_ts, gb)
        r2t = (k >= 0) & (r2t_ts[np.maximum(k, 0)] > ga)
        pending &= ~r2t  # a WRITE waiting for its R2T has no data it may send
    acc.add("iscsi_r2t", float(gap_left[r2t].sum()))
    free = ~pending & ~r2t
    srv_t = np.minimum(service, gap_left)
    srv_cause = "host_cpu_target" if cpu.get("target", 0.0) >= CPU_SATURATED \
        else "target_service"
    # A command at the target whose data could not start because the socket's send buffer or
    # the receive window was full is a TCP limit, not the target's slowness (kernel clocks).
    srv_why = _chrono_cause(sock, ga[free], gb[free], _one_cause(int(free.sum()), srv_cause),
                            srv_cause)
    srv_why[~np.isin(srv_why, ["tcp_sndbuf", "tcp_rwnd"])] = srv_cause
    for cause in np.unique(srv_why):
        acc.add(str(cause), float(srv_t[free][srv_why == cause].sum()))
    # Nothing pending and no service time: the initiator had not issued the next command —
    # too few outstanding, or a workload held at its CPU limit (its own process saturated).
    # Without commands neither can be told from a slow target.
    ini_cause = "host_cpu_initiator" if cpu.get("initiator_workload", 0.0) >= CPU_SATURATED \
        else "initiator_concurrency"
    if cmds is None or cmds.empty:
        ini_cause = "idle_unexplained"
    acc.add(ini_cause, float((gap_left - srv_t)[free].sum()))
    return pending


def _account_held_back(acc: Accounting, segs: SegmentsLike, samples: SamplesLike | None,
                       states: pd.DataFrame | None, sock: pd.DataFrame | None,
                       cpu: dict[str, float],
                       first_loss_ns: int | None,
                       pdu_spans: tuple[np.ndarray, np.ndarray] | None, conn: str | None,
                       pa: np.ndarray, pb: np.ndarray, left: np.ndarray) -> None:
    """The gaps [pa, pb) with data left to send (`left` of each not yet given a cause): the
    window that held the data back."""
    d, host = acc.direction, acc.sender
    mss = float(payload_totals(segs, d)["largest"].max())
    # the connection's samples of this direction (no connection named: all of them)
    pick = (conn, d) if conn is not None else (None, None)
    why = _window_cause(samples, pa, mss, *pick)
    inside = _inside(pdu_spans, pa, pb)
    # Inside one PDU the sender had written all of it (tgtd, istrace-gen and the kernel
    # initiator hand a whole PDU to the socket): with neither window full the socket
    # held it back, by its pacing rate or a full send buffer, not the application.
    why[inside & (why == "tcp_sndbuf_or_app")] = "tcp_sndbuf_or_pacing"
    saturated = cpu.get(host, 0.0) >= CPU_SATURATED
    app = f"host_cpu_{host}" if saturated else (
        "target_service" if host == "target" else "initiator_concurrency")
    # With the sender's machine saturated, data held back by nothing but timing (pacing,
    # the application) waited for a CPU; full windows stay what they are.
    why = _chrono_cause(sock, pa, pb, why, app, inside,
                        pace=f"host_cpu_{host}" if saturated else "tcp_cwnd")
    if saturated:
        why[np.isin(why, ["tcp_sndbuf_or_pacing", "tcp_sndbuf_or_app"])] = f"host_cpu_{host}"
    if first_loss_ns is not None:
        # A congestion window held small after a loss is the loss's doing (the window was
        # cut), not slow start's; one at its ceiling (never cut: the loss undone, a
        # clamp) is the window's own.
        after = (pa >= first_loss_ns) & _below_ceiling(
            samples, pa, acc.sender, _episode_starts(states, first_loss_ns), *pick)
        why[after & np.isin(why, ["tcp_cwnd", "tcp_window"])] = "tcp_loss_recovery"
    for cause in np.unique(why):
        acc.add(str(cause), float(left[why == cause].sum()))

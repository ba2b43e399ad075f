"""TCP cwnd/congestion-state tracker: one tidy time series per connection and direction.

Two sources, said in the `source` column of every row:
  exact      from probe events (layer `tcp`: tcp_probe, cong_state, retransmit; docs/schema.md §1)
  estimated  from a pcap alone, seen at one capture point: bytes in flight (highest sequence
             sent minus highest ACK seen), RTT samples from ACKs of never-retransmitted
             segments (Karn), receive window (scaled by the SYN's window scale), delivery rate,
             retransmissions, duplicate ACKs and loss episodes (and which iSCSI command each
             loss hit, from the PDUs' TCP sequence ranges).

Three tables come out (`TrackResult`): `samples` (one row per observation), `states` (CA-state
intervals) and `events` (retransmit / dupack / loss_episode marks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from istrace.capture.decoded import TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN
from istrace.capture.tcpseq import unwrap
from pandas.api.types import union_categoricals

SAMPLE_COLUMNS = [
    "ts_ns", "conn", "dir", "host", "source", "cwnd", "ssthresh", "srtt_us", "rtt_us",
    "inflight_pkts", "inflight_bytes", "rwnd", "delivery_rate_bps", "ca_state",
]
STATE_COLUMNS = ["conn", "dir", "host", "source", "state", "start_ns", "end_ns"]
EVENT_COLUMNS = ["ts_ns", "conn", "dir", "host", "source", "kind", "seq", "bytes", "cmd", "note"]
CA_STATES = ["Open", "Disorder", "CWR", "Recovery", "Loss"]

_U32 = 1 << 32


@dataclass
class TrackResult:
    samples: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SAMPLE_COLUMNS))
    states: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STATE_COLUMNS))
    events: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EVENT_COLUMNS))
    notes: list[str] = field(default_factory=list)

    def extend(self, other: TrackResult) -> None:
        self.samples = _concat([self.samples, other.samples], SAMPLE_COLUMNS)
        self.states = _concat([self.states, other.states], STATE_COLUMNS)
        self.events = _concat([self.events, other.events], EVENT_COLUMNS)
        self.notes += other.notes


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=columns)
    if len(frames) == 1:  # the usual case (one connection, one direction): no copy
        return frames[0][columns]
    # label columns stay categorical (pd.concat makes text of categoricals whose labels
    # differ, the per-connection ones always do): millions of samples, a few labels
    labels = [c for c in columns if all(
        c in f.columns and isinstance(f[c].dtype, pd.CategoricalDtype) for f in frames)]
    out = pd.concat([f.drop(columns=labels) for f in frames], ignore_index=True)
    for c in labels:
        out[c] = union_categoricals([pd.Categorical.from_codes(
            f[c].cat.codes, f[c].cat.categories.astype(object)) for f in frames])
    return out[columns]


def _frame(data: dict[str, object], columns: list[str], n: int) -> pd.DataFrame:
    """Build a table with every column of `columns`, absent ones all-missing."""
    out = {}
    for c in columns:
        v = data.get(c)
        out[c] = np.full(n, np.nan) if v is None else v
    return pd.DataFrame(out, columns=columns, copy=False)  # no 2-D block: no second copy


# --------------------------------------------------------------------------------------------
# exact: probe events


def _num(frame: pd.DataFrame, name: str) -> np.ndarray | None:
    """A numeric column as float64 with NaN for missing (nullable ints included)."""
    if name not in frame.columns:
        return None
    return pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=np.float64,
                                                                 na_value=np.nan)


def _const(n: int, value: str) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, np.int8), [value])


def label_codes(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(integer codes, distinct labels) of a label column; categoricals cost nothing."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        return series.cat.codes.to_numpy(), np.asarray(series.cat.categories, dtype=object)
    codes, uniq = pd.factorize(series.to_numpy(dtype=object), use_na_sentinel=True)
    return codes, np.asarray(uniq, dtype=object)


def track_events(events: pd.DataFrame) -> TrackResult:
    """Exact time series from probe event records (docs/schema.md §1, layer == 'tcp')."""
    res = TrackResult()
    if events is None or events.empty or "layer" not in events.columns:
        return res
    ev = events[(events["layer"] == "tcp").to_numpy(dtype=bool, na_value=False)]
    if ev.empty:
        return res
    ts_all = ev["ts_ns"].to_numpy(np.int64)
    if not (np.diff(ts_all) >= 0).all():
        ev = ev.iloc[np.argsort(ts_all, kind="stable")]
    # Labels as integer codes: millions of probe rows never become Python strings.
    if "dir" in ev.columns and ev["dir"].notna().all():
        d_code = (ev["dir"] == "t2i").to_numpy(dtype=np.int8)
    else:
        d_code = (ev["host"] == "target").to_numpy(dtype=np.int8, na_value=0)
    dirs = np.array(["i2t", "t2i"], dtype=object)
    if "conn" in ev.columns:
        c_code, c_uniq = label_codes(ev["conn"])
        c_uniq = np.append(c_uniq, "?")
        c_code = np.where(c_code < 0, len(c_uniq) - 1, c_code)
    else:
        c_code, c_uniq = np.zeros(len(ev), np.int64), np.array(["?"], dtype=object)
    h_code, h_uniq = label_codes(ev["host"])
    e_code, e_uniq = label_codes(ev["event"])

    def is_event(name: str) -> np.ndarray:
        hit = np.flatnonzero(e_uniq == name)
        return e_code == hit[0] if len(hit) else np.zeros(len(ev), bool)

    def cat(codes: np.ndarray, labels: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, pd.Index(labels).astype(object)) \
            if len(set(labels)) == len(labels) else pd.Categorical(labels[codes])

    is_probe = is_event("tcp_probe")
    if is_probe.any():
        probe = ev[is_probe]
        n = len(probe)
        rwnd = _num(probe, "snd_wnd") if "snd_wnd" in probe.columns else _num(probe, "rwnd")
        ca_col = None
        if "ca_state" in probe.columns:
            ca_code, ca_uniq = label_codes(probe["ca_state"])
            ca_col = pd.Categorical.from_codes(ca_code, pd.Index(ca_uniq).astype(object))
        res.samples = _frame({
            "ts_ns": probe["ts_ns"].to_numpy(np.int64), "conn": cat(c_code[is_probe], c_uniq),
            "dir": cat(d_code[is_probe], dirs), "host": cat(h_code[is_probe], h_uniq),
            "source": _const(n, "exact"),
            "cwnd": _num(probe, "cwnd"), "ssthresh": _num(probe, "ssthresh"),
            "srtt_us": _num(probe, "srtt_us"), "inflight_pkts": _num(probe, "inflight"),
            "rwnd": rwnd, "ca_state": ca_col,
        }, SAMPLE_COLUMNS, n)
        nxt, una = _num(probe, "seq"), _num(probe, "ack")
        key = c_code[is_probe].astype(np.int64) * 2 + d_code[is_probe]
        if una is not None:
            res.samples["delivery_rate_bps"] = _probe_delivery_rate(
                res.samples["ts_ns"].to_numpy(np.int64), una, key)
        if nxt is not None and una is not None:
            # tcp_probe's seq/ack are the socket's snd_nxt/snd_una: bytes not yet acknowledged.
            res.samples["inflight_bytes"] = np.where(np.isnan(nxt) | np.isnan(una), np.nan,
                                                     np.mod(nxt - una, _U32))
    ts_ev = ev["ts_ns"].to_numpy(np.int64)
    key_all = c_code.astype(np.int64) * 2 + d_code
    is_cs = is_event("cong_state")
    if is_cs.any() and "ca_state" in ev.columns:
        cs = ev[is_cs]
        ca = cs["ca_state"].to_numpy(dtype=object)
        ok = pd.notna(ca)
        rows = []
        last_of = pd.Series(ts_ev).groupby(key_all).max()
        k_cs = key_all[is_cs][ok]
        ts_cs = ts_ev[is_cs][ok]
        ca = ca[ok].astype(str)
        host_cs = h_uniq[h_code[is_cs][ok]]
        for k in dict.fromkeys(k_cs.tolist()):
            sel = k_cs == k
            ts, st = ts_cs[sel], ca[sel]
            conn, d = c_uniq[k // 2], dirs[k % 2]
            last = int(max(last_of.get(k, ts[-1]), ts[-1]))
            # A state lasts from its first report to the next different state.
            change = np.concatenate([[True], st[1:] != st[:-1]])
            starts = np.flatnonzero(change)
            ends = np.concatenate([ts[starts[1:]], [last]])
            for j, i in enumerate(starts):
                rows.append((conn, d, host_cs[sel][0], "exact", st[i], int(ts[i]),
                             int(ends[j])))
        res.states = pd.DataFrame(rows, columns=STATE_COLUMNS)

    is_rt = is_event("retransmit")
    if is_rt.any():
        rt = ev[is_rt]
        n = len(rt)
        res.events = _frame({
            "ts_ns": rt["ts_ns"].to_numpy(np.int64), "conn": c_uniq[c_code[is_rt]],
            "dir": dirs[d_code[is_rt]], "host": h_uniq[h_code[is_rt]],
            "source": np.full(n, "exact", dtype=object),
            "kind": np.full(n, "retransmit", dtype=object),
            "seq": _num(rt, "seq"), "bytes": _num(rt, "bytes"),
            "note": rt["reason"].to_numpy(dtype=object) if "reason" in rt.columns else None,
        }, EVENT_COLUMNS, n)
    return res


def _probe_delivery_rate(ts: np.ndarray, ack: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Bytes/s acknowledged, from successive snd_una (`ack`) values of each socket's probes."""
    out = np.full(len(ts), np.nan)
    for k in np.unique(key):
        idx = np.flatnonzero((key == k) & ~np.isnan(ack))
        if len(idx) < 2:
            continue
        una = unwrap(ack[idx].astype(np.int64), int(ack[idx][0]))
        out[idx] = _rate(ts[idx], una)
    return out


def _rate(ts: np.ndarray, cum_bytes: np.ndarray, window_ns: int | None = None) -> np.ndarray:
    """Bytes per second over the trailing window ending at each sample (bits not bytes: no)."""
    if len(ts) < 2:
        return np.full(len(ts), np.nan)
    if window_ns is None:
        span = int(ts[-1] - ts[0])
        window_ns = int(min(max(span // 50, 1_000_000), 1_000_000_000))
    start = np.searchsorted(ts, ts - window_ns, side="left")
    dt = np.maximum(ts - ts[start], window_ns // 4 or 1)
    return (cum_bytes - cum_bytes[start]) * 1e9 / dt


# --------------------------------------------------------------------------------------------
# estimated: pcap segments


# what _track_one reads of a segment
_TRACK_COLUMNS = ["ts_ns", "seq", "ack", "flags", "win", "len", "sack", "conn", "dir"]


def _window_scales(segs: pd.DataFrame) -> dict[tuple[str, str], int | None]:
    """Window scale each side announced, applied only when both SYNs carried the option."""
    syn = segs[(segs["flags"] & TCP_SYN) != 0]
    shift: dict[tuple[str, str], int] = {}
    for conn, d, ws in zip(syn["conn"], syn["dir"], syn["wscale"], strict=True):
        shift.setdefault((conn, d), int(ws))
    out: dict[tuple[str, str], int | None] = {}
    for conn in segs["conn"].unique():
        a, b = shift.get((conn, "i2t")), shift.get((conn, "t2i"))
        if a is None or b is None:
            out[(conn, "i2t")] = out[(conn, "t2i")] = None  # SYN not captured: unknown
        elif a < 0 or b < 0:
            out[(conn, "i2t")] = out[(conn, "t2i")] = 0
        else:
            out[(conn, "i2t")], out[(conn, "t2i")] = a, b
    return out


def track_pcap(segs: pd.DataFrame, pdus: pd.DataFrame | None = None,
               host: str = "initiator", dirs: tuple[str, ...] = ("i2t", "t2i"),
               dupack_threshold: int = 3, reorder_window_ns: int = 3_000_000) -> TrackResult:
    """Estimated time series from one capture point's segments (with `conn`/`dir` columns).

    `dirs` picks the data directions to track; a direction is best tracked at its sender's
    capture point (t2i at the target), where in-flight bytes are what the sender had out.
    """
    res = TrackResult()
    if segs is None or segs.empty:
        return res
    scales = _window_scales(segs)
    segs = segs[[k for k in _TRACK_COLUMNS if k in segs.columns]]  # a view, not a copy
    conns = segs["conn"].unique()
    for conn in conns:
        c = segs if len(conns) == 1 else segs[segs["conn"] == conn]
        for d in dirs:
            if scales.get((conn, d)) is None:
                res.notes.append(f"{conn}: SYN not captured, receive window unscaled (raw)")
                scales[(conn, d)] = 0
            sub = _track_one(c, conn, d, host, scales, pdus, dupack_threshold,
                             reorder_window_ns)
            if sub is not None:
                res.extend(sub)
    res.notes = list(dict.fromkeys(res.notes))
    return res


def _track_one(c: pd.DataFrame, conn: str, d: str, host: str,
               scales: dict[tuple[str, str], int | None], pdus: pd.DataFrame | None,
               dupack_threshold: int, reorder_window_ns: int) -> TrackResult | None:
    rev = "t2i" if d == "i2t" else "i2t"
    # Masks and the columns' arrays, not sub-tables: a table per subset (the direction, its
    # data, the ACKs) would copy every column of millions of rows, several times over.
    col = {k: c[k].to_numpy() for k in ("ts_ns", "seq", "ack", "flags", "win", "len")}
    flags, length = col["flags"], col["len"]
    snd = (c["dir"] == d).to_numpy()
    data = snd & (length > 0)
    if not data.any():
        return None
    syn = np.flatnonzero(snd & ((flags & TCP_SYN) != 0))
    base = int(col["seq"][syn[0]]) + 1 if len(syn) else int(col["seq"][data][0])

    # Sender side: each segment's start/end, relative to the first data byte.
    d_ts = col["ts_ns"][data].astype(np.int64, copy=False)
    d_start = unwrap(col["seq"][data].astype(np.int64, copy=False), base)
    d_len = length[data].astype(np.int64)
    d_end = d_start + d_len

    # Receiver side: ACKs of this direction's data.
    from_rev = (c["dir"] == rev).to_numpy()
    acks = from_rev & ((flags & TCP_ACK) != 0)
    # A direction carrying only commands or only status (under 1% of the bytes the other way)
    # is acknowledged by every data segment of the other: those ACK rows repeat its state.
    minor = int(length[data].sum()) * 100 < int(length[from_rev].sum())
    del data, from_rev
    a_ts = col["ts_ns"][acks].astype(np.int64, copy=False)
    a_ack = unwrap(col["ack"][acks].astype(np.int64, copy=False), base) if acks.any() else \
        np.zeros(0, np.int64)
    a_ack = np.maximum(a_ack, 0)  # an ACK of the SYN alone: nothing of the data yet
    shift = scales.get((conn, rev)) or 0
    a_flags = flags[acks]
    a_win = col["win"][acks].astype(np.int64)
    a_win = np.where((a_flags & TCP_SYN) != 0, a_win, a_win << shift)
    a_una = np.maximum.accumulate(a_ack) if len(a_ack) else a_ack

    # Merge both streams in time order: in flight = highest end sent - highest ack seen.
    ts = np.concatenate([d_ts, a_ts])
    kind = np.concatenate([np.zeros(len(d_ts), np.int8), np.ones(len(a_ts), np.int8)])
    order = np.lexsort((kind, ts))
    ts, kind = ts[order], kind[order]
    snd_nxt = np.maximum.accumulate(
        np.concatenate([np.maximum.accumulate(d_end), np.full(len(a_ts), -1)])[order])
    una = np.maximum.accumulate(np.concatenate([np.full(len(d_ts), -1), a_una])[order])
    inflight = np.maximum(snd_nxt - np.maximum(una, 0), 0)
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    del order
    a_pos = inv[len(d_ts):]  # where each ACK sits in the merged stream

    is_rtx, is_reorder = _retransmissions(d_ts, d_start, d_end, np.maximum(
        una[inv[: len(d_ts)]], 0), reorder_window_ns)
    del inv
    rtt = _karn_rtt(d_ts, d_start, d_end, is_rtx, a_ts, a_ack, a_una)
    a_sack = c["sack"].to_numpy()[acks] if "sack" in c.columns else np.zeros(len(a_ts), int)
    dup = _dupacks(length[acks], a_flags, a_sack, a_ack, a_una, a_win,
                   inflight[a_pos], int(d_end.max()))
    del acks, a_flags, a_sack
    dup_run = np.zeros(len(a_ack), np.int64)
    for i in np.flatnonzero(dup):  # consecutive duplicates of one ack value
        dup_run[i] = dup_run[i - 1] + 1 if i > 0 and dup[i - 1] else 1

    events = []
    cmd_of = _cmd_lookup(pdus, conn, d, base)
    for i in np.flatnonzero(is_rtx):
        events.append((int(d_ts[i]), "retransmit", int(d_start[i]), int(d_len[i]),
                       cmd_of(int(d_start[i])), ""))
    for i in np.flatnonzero(is_reorder):
        events.append((int(d_ts[i]), "reorder", int(d_start[i]), int(d_len[i]),
                       cmd_of(int(d_start[i])), "filled a hole soon after it opened"))
    for i in np.flatnonzero(dup):
        events.append((int(a_ts[i]), "dupack", int(a_ack[i]), 0, cmd_of(int(a_ack[i])),
                       f"dup #{dup_run[i]}"))

    # Loss episodes: from the first retransmission or the Nth duplicate ACK until the ACK passes
    # the highest byte sent when the episode began (the recovery point).
    states = []
    starts = sorted(
        [(int(d_ts[i]), "rtx", i) for i in np.flatnonzero(is_rtx)]
        + [(int(a_ts[i]), "dup", i) for i in np.flatnonzero(dup_run == dupack_threshold)])
    all_end = np.maximum.accumulate(d_end)
    ep_end_ts = -1
    valid = rtt[~np.isnan(rtt)]
    recent_ns = int(max(2 * np.median(valid) * 1000, 1_000_000)) if len(valid) else 200_000_000
    for t, why, _ in starts:
        if t <= ep_end_ts:
            continue
        j = np.searchsorted(d_ts, t, side="right") - 1
        recover = int(all_end[max(j, 0)])
        done = _first_at_least(a_ack, recover, _first_at(a_ts, t))
        end = int(a_ts[done]) if done is not None else \
            int(max(d_ts[-1], a_ts[-1] if len(a_ts) else 0))
        # Fast recovery when duplicate ACKs led up to the retransmission within about an RTT
        # (with SACK one ACK can report 3+ lost segments, so one duplicate is enough); a
        # retransmission after silence is a timeout.
        fast = why == "dup" or bool(dup[_window(a_ts, t - recent_ns, t)].any())
        state = "Recovery" if fast else "Loss"
        seq0 = int(a_una[np.searchsorted(a_ts, t, side="right") - 1]) if len(a_ts) and \
            a_ts[0] <= t else 0
        events.append((t, "loss_episode", seq0, recover - seq0, cmd_of(seq0),
                       "fast retransmit" if fast else "timeout / no dupacks"))
        states.append((conn, d, host, "estimated", state, t, max(end, t)))
        ep_end_ts = end
    # Disorder: duplicate ACKs that did not reach the threshold, outside the episodes above
    # and the Disorder intervals before (each starts where the one before it ended, or later).
    in_episode = _covered_by([(s, e) for *_, s, e in states])
    last_end = None
    for i in np.flatnonzero(dup & (dup_run == 1)):
        run_end = i
        while run_end + 1 < len(dup) and dup[run_end + 1]:
            run_end += 1
        t = int(a_ts[i])
        if dup_run[run_end] < dupack_threshold and not in_episode(t) and \
                (last_end is None or t > last_end):
            nxt = int(a_ts[run_end + 1]) if run_end + 1 < len(a_ts) else int(a_ts[run_end])
            states.append((conn, d, host, "estimated", "Disorder", t, nxt))
            last_end = nxt

    res = TrackResult()
    n = len(ts)
    rtt_all = np.full(n, np.nan)
    rwnd_all = np.full(n, np.nan)
    if len(a_pos):
        rtt_all[a_pos] = rtt
        rwnd_all[a_pos] = a_win
        rwnd_all = pd.Series(rwnd_all).ffill().to_numpy()
    srtt = _ewma_srtt(rtt_all)
    rate = _rate(ts, np.maximum(una, 0))
    cols = {"ts_ns": ts, "srtt_us": srtt, "rtt_us": rtt_all,
            "inflight_bytes": inflight.astype(float), "rwnd": rwnd_all,
            "delivery_rate_bps": rate}
    if minor:  # change-only, as the probes report: a row per segment sent, else per change
        keep = (kind == 0) | ~np.isnan(rtt_all)
        keep[1:] |= (una[1:] != una[:-1]) | (snd_nxt[1:] != snd_nxt[:-1]) | (
            rwnd_all[1:] != rwnd_all[:-1])
        keep[0] = True
        cols = {k: v[keep] for k, v in cols.items()}
        n = len(cols["ts_ns"])
    res.samples = _frame({
        **cols, "conn": _const(n, conn), "dir": _const(n, d), "host": _const(n, host),
        "source": _const(n, "estimated")}, SAMPLE_COLUMNS, n)
    res.states = pd.DataFrame(states, columns=STATE_COLUMNS)
    if events:
        ev = pd.DataFrame(events, columns=["ts_ns", "kind", "seq", "bytes", "cmd", "note"])
        ev["conn"], ev["dir"], ev["host"], ev["source"] = conn, d, host, "estimated"
        res.events = ev.sort_values("ts_ns", kind="stable")[EVENT_COLUMNS].reset_index(drop=True)
    return res


def _retransmissions(d_ts: np.ndarray, d_start: np.ndarray, d_end: np.ndarray,
                     una_at_send: np.ndarray, reorder_window_ns: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(retransmitted, reordered) per data segment. A segment behind the highest byte sent is
    a retransmission when its bytes were sent or acknowledged before; one that fills a fresh
    hole soon after the hole opened was reordered on the way to this capture point (or lost
    before it and resent: indistinguishable here)."""
    prev_max = np.maximum.accumulate(np.concatenate([[0], d_end]))[:-1]
    behind = (d_end > d_start) & (d_start < prev_max)
    del prev_max
    idx = np.arange(len(d_start))
    _, first_of = np.unique(d_start, return_inverse=True)
    first = np.full(first_of.max() + 1, len(idx))
    np.minimum.at(first, first_of, idx)
    seen = first[first_of] < idx
    del idx, first_of, first
    hole_open_ts = d_ts[np.maximum(np.searchsorted(np.maximum.accumulate(d_end), d_start,
                                                   side="right"), 0).clip(max=len(d_ts) - 1)]
    late = (d_ts - hole_open_ts) > reorder_window_ns
    is_rtx = behind & (seen | (d_start < una_at_send) | late)
    return is_rtx, behind & ~is_rtx


def _karn_rtt(d_ts: np.ndarray, d_start: np.ndarray, d_end: np.ndarray, is_rtx: np.ndarray,
              a_ts: np.ndarray, a_ack: np.ndarray, a_una: np.ndarray) -> np.ndarray:
    """RTT samples (Karn), us per ACK: an ACK that newly covers the end of a segment sent once,
    measured from that segment's send time. Only ACKs that advance snd_una count."""
    orig = ~is_rtx & (d_end > d_start)
    o_end, o_ts = d_end[orig], d_ts[orig]
    o_order = np.argsort(o_end, kind="stable")
    o_end, o_ts = o_end[o_order], o_ts[o_order]
    del orig, o_order
    rtx_starts = np.sort(d_start[is_rtx])
    prev_una = np.concatenate([[0], a_una[:-1]]) if len(a_una) else a_una
    adv = a_ack > prev_una
    if not (len(o_end) and adv.any()):
        return np.full(len(a_ts), np.nan)
    k = np.searchsorted(o_end, a_ack, side="right") - 1
    okk = adv & (k >= 0)
    kk = np.where(okk, k, 0)
    del k
    seg_end, seg_ts = o_end[kk], o_ts[kk]
    # Skip when any retransmission touched the newly acked range (ambiguous sample).
    touched = np.searchsorted(rtx_starts, a_ack, side="left") > np.searchsorted(
        rtx_starts, prev_una, side="left")
    okk &= (seg_end > prev_una) & (seg_ts <= a_ts) & ~touched
    return np.where(okk, (a_ts - seg_ts) / 1000.0, np.nan)


def _dupacks(a_len: np.ndarray, a_flags: np.ndarray, a_sack: np.ndarray, a_ack: np.ndarray,
             a_una: np.ndarray, a_win: np.ndarray, in_flight_at_ack: np.ndarray,
             highest_end: int) -> np.ndarray:
    """Duplicate ACKs: pure ACKs repeating the highest ack with the same window while data is
    out. Same ACK number as the one before and as the highest; the window unchanged, or a
    SACK block present (RFC 6675: a SACK-carrying ACK counts even if the window moved)."""
    pure = (a_len == 0) & ((a_flags & (TCP_SYN | TCP_FIN | TCP_RST)) == 0)
    same = np.zeros(len(a_ack), bool)
    if len(a_ack) > 1:
        same[1:] = (a_ack[1:] == a_ack[:-1]) & (a_ack[1:] == a_una[1:]) & (
            (a_win[1:] == a_win[:-1]) | (a_sack[1:] > 0))
    outstanding = a_una < max(highest_end, 0)
    return pure & same & (in_flight_at_ack > 0) & outstanding


def _ewma_srtt(rtt: np.ndarray) -> np.ndarray:
    """RFC 6298 smoothing (alpha 1/8) of the RTT samples, carried between samples."""
    out = np.full(len(rtt), np.nan)
    s = np.nan
    for i in np.flatnonzero(~np.isnan(rtt)):
        s = rtt[i] if np.isnan(s) else s + (rtt[i] - s) / 8.0
        out[i] = s
    return pd.Series(out).ffill().to_numpy()


def _first_at(ts: np.ndarray, t: int) -> int:
    """Index of the first time stamp >= t (ts sorted)."""
    return int(np.searchsorted(ts, t, side="left"))


def _first_at_least(values: np.ndarray, v: int, start: int, chunk: int = 4096) -> int | None:
    """Index of the first of values[start:] >= v, or None; looks a chunk at a time, since the
    answer is usually near `start` (an episode ends within a few round trips)."""
    for lo in range(start, len(values), chunk):
        hit = np.flatnonzero(values[lo:lo + chunk] >= v)
        if len(hit):
            return lo + int(hit[0])
    return None


def _window(ts: np.ndarray, after: int, upto: int) -> slice:
    """The positions of the time stamps in (after, upto] (ts sorted)."""
    return slice(int(np.searchsorted(ts, after, side="right")),
                 int(np.searchsorted(ts, upto, side="right")))


def _covered_by(intervals: list[tuple[int, int]]) -> Callable[[int], bool]:
    """A test of whether a time lies in one of the closed intervals [start, end]: the latest
    end among the intervals that start at or before it reaches it."""
    if not intervals:
        return lambda t: False
    iv = sorted(intervals)
    starts = np.array([s for s, _ in iv], np.int64)
    reach = np.maximum.accumulate(np.array([e for _, e in iv], np.int64))

    def covered(t: int) -> bool:
        j = int(np.searchsorted(starts, t, side="right")) - 1
        return j >= 0 and int(reach[j]) >= t
    return covered


def _cmd_lookup(pdus: pd.DataFrame | None, conn: str, d: str, base: int) -> object:
    """seq offset -> index of the command whose PDU holds that byte (None when unknown)."""
    none: object = lambda _seq: None  # noqa: E731
    if pdus is None or pdus.empty or "tcp_seq" not in pdus.columns:
        return none
    p = pdus[(pdus["conn"] == conn) & (pdus["dir"] == d)].dropna(subset=["tcp_seq"])
    if p.empty:
        return none
    start = (p["tcp_seq"].to_numpy(np.int64) - base) % _U32
    cmd = p["cmd"].to_numpy() if "cmd" in p.columns else np.full(len(p), np.nan)
    order = np.argsort(start, kind="stable")
    start, cmd = start[order], cmd[order]

    def lookup(seq: int) -> object:
        i = int(np.searchsorted(start, seq, side="right")) - 1
        if i < 0 or pd.isna(cmd[i]):
            return None
        return int(cmd[i])
    return lookup


# --------------------------------------------------------------------------------------------


def loss_commands(res: TrackResult) -> pd.DataFrame:
    """Commands hit by retransmissions/loss episodes: cmd, count, first time."""
    ev = res.events
    if ev.empty:
        return pd.DataFrame(columns=["cmd", "retransmits", "first_ts_ns"])
    hit = ev[ev["kind"].isin(["retransmit", "loss_episode"]) & ev["cmd"].notna()]
    return (hit.groupby("cmd").agg(retransmits=("kind", "size"), first_ts_ns=("ts_ns", "min"))
            .reset_index())


def state_time(res: TrackResult) -> pd.DataFrame:
    """Total time per (conn, dir, state, source), in ns, with the number of intervals."""
    st = res.states
    if st.empty:
        return pd.DataFrame(columns=["conn", "dir", "state", "source", "intervals", "total_ns"])
    st = st.assign(dur=st["end_ns"].astype(np.int64) - st["start_ns"].astype(np.int64))
    return (st.groupby(["conn", "dir", "state", "source"])
            .agg(intervals=("dur", "size"), total_ns=("dur", "sum")).reset_index())

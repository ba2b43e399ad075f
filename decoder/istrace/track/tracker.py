"""TCP cwnd/congestion-state tracker: one tidy time series per connection and direction.

Two sources, said in the `source` column of every row:
  exact      from probe events (layer `tcp`: tcp_probe, cong_state, retransmit; docs/schema.md §1)
  estimated  from a pcap alone, seen at one capture point: bytes in flight (highest sequence
             sent minus highest ACK seen), RTT samples from ACKs of never-retransmitted
             segments (Karn), receive window (scaled by the SYN's window scale), delivery rate,
             retransmissions, duplicate ACKs and loss episodes (and which iSCSI command each
             loss hit, from the PDUs' TCP sequence ranges).

Three tables come out (`TrackResult`): `samples` (one row per observation, istrace.capture.
tracksamples: in memory, or written to track.parquet as they are made when a `SampleWriter` is
given), `states` (CA-state intervals) and `events` (retransmit / dupack / loss_episode marks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from istrace.capture.decoded import TCP_SYN
from istrace.capture.labels import concat_labelled, label_codes, object_labels
from istrace.capture.segsource import Segments, SegmentsLike, as_segments, row_slices
from istrace.capture.slices import SLICE_ROWS
from istrace.capture.tcpseq import unwrap
from istrace.capture.tracksamples import COLUMNS as SAMPLE_COLUMNS
from istrace.capture.tracksamples import FrameSamples, Key, Samples, SampleWriter
from istrace.capture.tracktables import (
    EVENT_COLUMNS,
    STATE_COLUMNS,
    FrameTable,
    TableWriter,
    TrackTable,
)
from istrace.system import freed
from istrace.track import estimate

CA_STATES = ["Open", "Disorder", "CWR", "Recovery", "Loss"]

_U32 = 1 << 32


@dataclass
class TrackResult:
    samples: Samples = field(default_factory=FrameSamples)
    states: TrackTable = field(default_factory=lambda: FrameTable(STATE_COLUMNS))
    events: TrackTable = field(default_factory=lambda: FrameTable(EVENT_COLUMNS))
    notes: list[str] = field(default_factory=list)

    def extend(self, other: TrackResult) -> None:
        """Append `other`'s tables (its own are used up: their columns move here). Samples
        in memory are joined; written ones are the writer's (`SampleWriter.close`), and so
        are states and events written (`TableWriter`: `other`'s are written there first)."""
        if other.samples.empty:
            pass
        elif self.samples.empty:
            self.samples = other.samples
        elif isinstance(self.samples, FrameSamples) and isinstance(other.samples, FrameSamples):
            self.samples = FrameSamples(concat_labelled([self.samples.df, other.samples.df],
                                                        SAMPLE_COLUMNS))
        else:
            raise ValueError("samples written to a file join only through their writer")
        self.states = _joined([self.states, other.states], STATE_COLUMNS)
        self.events = _joined([self.events, other.events], EVENT_COLUMNS)
        self.notes += other.notes


@dataclass
class TrackSink:
    """Where a tracking writes its three tables as it makes them, none held: the samples,
    the CA-state intervals and the marks (each direction's as each slice is tracked)."""
    samples: SampleWriter
    states: TableWriter
    events: TableWriter

    def put(self, part: TrackResult) -> TrackResult:
        """`part`'s states and events written; `part` with them emptied."""
        if not part.states.empty:
            self.states.write(part.states)
        if not part.events.empty:
            self.events.write(part.events)
        part.states, part.events = FrameTable(STATE_COLUMNS), FrameTable(EVENT_COLUMNS)
        return part


def _joined(tables: list[TrackTable], columns: list[str]) -> TrackTable:
    """The tables as one: a lone non-empty one as it is (a file's too), several held in
    memory joined once (none: an empty one)."""
    full = [t for t in tables if not t.empty]
    if len(full) <= 1:
        return full[0] if full else FrameTable(columns)
    frames = [t.df for t in full if isinstance(t, FrameTable)]
    if len(frames) < len(full):
        raise ValueError("states and events written to a file join only through their writer")
    return FrameTable(columns, concat_labelled(frames, columns))


def _states(rows: Sequence[tuple[object, ...]]) -> FrameTable:
    """CA-state intervals as a table, the labels categorical as the events' (and as a
    written table reads back)."""
    df = pd.DataFrame(rows, columns=STATE_COLUMNS)
    for c in ("conn", "dir", "host", "source", "state"):
        df[c] = object_labels(df[c].to_numpy(dtype=object))
    return FrameTable(STATE_COLUMNS, df)


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


def _const(n: int, value: str) -> pd.Categorical[str]:
    return pd.Categorical.from_codes(np.zeros(n, np.int8), pd.Index([value]))


# the probe events' columns track_events reads (the TCP layer's: docs/schema.md §1)
PROBE_COLUMNS = ("ts_ns", "host", "layer", "event", "conn", "dir", "seq", "ack", "cwnd",
                 "ssthresh", "srtt_us", "ca_state", "inflight", "rwnd", "snd_wnd", "bytes",
                 "reason")


def track_events(events: pd.DataFrame, sink: TrackSink | None = None) -> TrackResult:
    """Exact time series from probe event records (docs/schema.md §1, layer == 'tcp'); the
    tables written to `sink` when given."""
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
        samples = _frame({
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
            samples["delivery_rate_bps"] = _probe_delivery_rate(
                samples["ts_ns"].to_numpy(np.int64), una, key)
        if nxt is not None and una is not None:
            # tcp_probe's seq/ack are the socket's snd_nxt/snd_una: bytes not yet acknowledged.
            samples["inflight_bytes"] = np.where(np.isnan(nxt) | np.isnan(una), np.nan,
                                                 np.mod(nxt - una, _U32))
        if sink is not None:
            sink.samples.write_all(samples)
        else:
            res.samples = FrameSamples(samples)
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
        res.states = _states(rows)

    is_rt = is_event("retransmit")
    if is_rt.any():
        rt = ev[is_rt]
        n = len(rt)
        res.events = FrameTable(EVENT_COLUMNS, _frame({
            "ts_ns": rt["ts_ns"].to_numpy(np.int64), "conn": cat(c_code[is_rt], c_uniq),
            "dir": cat(d_code[is_rt], dirs), "host": cat(h_code[is_rt], h_uniq),
            "source": _const(n, "exact"), "kind": _const(n, "retransmit"),
            "seq": _num(rt, "seq"), "bytes": _num(rt, "bytes"),
            "note": (object_labels(rt["reason"].to_numpy(dtype=object))
                     if "reason" in rt.columns else None),
        }, EVENT_COLUMNS, n))
    return res if sink is None else sink.put(res)


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


def _rate(ts: np.ndarray, cum_bytes: np.ndarray) -> np.ndarray:
    """Bytes per second over the trailing window ending at each sample (the pcap estimates'
    rule, istrace.track.estimate)."""
    if len(ts) < 2:
        return np.full(len(ts), np.nan)
    return estimate.trailing_rate(ts, cum_bytes, estimate.rate_window(int(ts[-1] - ts[0])))


# --------------------------------------------------------------------------------------------
# estimated: pcap segments


# what _track_one reads of a segment
_TRACK_COLUMNS = ["ts_ns", "seq", "ack", "flags", "win", "len", "sack"]


def _window_scales(segs: Segments) -> dict[tuple[str, str], int | None]:
    """Window scale each side announced, applied only when both SYNs carried the option."""
    conn_labels, dir_labels = segs.conn_labels, segs.dir_labels
    shift: dict[tuple[str, str], int] = {}
    for a, b, c in row_slices(segs, ["flags", "wscale"]):
        syn = np.flatnonzero((c["flags"] & TCP_SYN) != 0)
        if not len(syn):
            continue
        lab = segs.read(["conn", "dir"], a, b)  # only where a SYN is: a few slices
        for i in syn:
            cc, dc = lab["conn"][i], lab["dir"][i]
            if cc >= 0 and dc >= 0:
                shift.setdefault((str(conn_labels[cc]), str(dir_labels[dc])),
                                 int(c["wscale"][i]))
    out: dict[tuple[str, str], int | None] = {}
    for conn in segs.conns():
        si, st = shift.get((conn, "i2t")), shift.get((conn, "t2i"))
        if si is None or st is None:
            out[(conn, "i2t")] = out[(conn, "t2i")] = None  # SYN not captured: unknown
        elif si < 0 or st < 0:
            out[(conn, "i2t")] = out[(conn, "t2i")] = 0
        else:
            out[(conn, "i2t")], out[(conn, "t2i")] = si, st
    return out


def track_pcap(segs: SegmentsLike | None, pdus: pd.DataFrame | None = None,
               host: str = "initiator", dirs: tuple[str, ...] = ("i2t", "t2i"),
               dupack_threshold: int = 3, reorder_window_ns: int = 3_000_000,
               slice_rows: int = SLICE_ROWS, sink: TrackSink | None = None) -> TrackResult:
    """Estimated time series from one capture point's segments (with `conn`/`dir` columns).

    `dirs` picks the data directions to track; a direction is best tracked at its sender's
    capture point (t2i at the target), where in-flight bytes are what the sender had out.
    Each direction is tracked `slice_rows` segments at a time (any value: the same rows),
    read from the segments a slice at a time; with a `sink`, each slice's samples, marks and
    the state intervals decided are written there as they are made (none held).
    """
    res = TrackResult()
    segs = as_segments(segs)
    if segs is None or segs.empty:
        return res
    scales = _window_scales(segs)
    conns = segs.conns()
    for conn in conns:
        c = segs if len(conns) == 1 else segs.only(conn)
        for d in dirs:
            if scales.get((conn, d)) is None:
                res.notes.append(f"{conn}: SYN not captured, receive window unscaled (raw)")
                scales[(conn, d)] = 0
            sub = _track_one(c, conn, d, host, scales, pdus, dupack_threshold,
                             reorder_window_ns, slice_rows, sink)
            if sub is not None:
                res.extend(sub)
    res.notes = list(dict.fromkeys(res.notes))
    return res


def _track_one(c: Segments, conn: str, d: str, host: str,
               scales: dict[tuple[str, str], int | None], pdus: pd.DataFrame | None,
               dupack_threshold: int, reorder_window_ns: int, slice_rows: int,
               sink: TrackSink | None = None) -> TrackResult | None:
    """One direction of one connection, fed to `estimate.Direction` a slice at a time, each
    slice read when it is fed (twice: the plan's pass, then the samples')."""
    rev = "t2i" if d == "i2t" else "i2t"
    names = [k for k in _TRACK_COLUMNS if c.has(k)]
    d_code, rev_code = c.code("dir", d), c.code("dir", rev)
    cuts = c.cuts(slice_rows)

    def slices() -> Iterator[tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]]:
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            got = c.read([*names, "dir"], a, b)
            here = got.pop("dir")
            yield got, here == d_code, here == rev_code

    plan = estimate.plan(slices())
    if plan is None:
        return None
    tr = estimate.Direction(conn, d, host, plan, scales.get((conn, rev)) or 0,
                            _cmd_lookup(pdus, conn, d, plan.base), dupack_threshold,
                            reorder_window_ns)
    key = Key(conn, d, host, "estimated")
    parts = []
    res = TrackResult()
    found: list[TrackResult] = []

    def take(states: list[tuple], events: dict[str, np.ndarray] | None) -> None:
        got = TrackResult(states=_states(states) if states else FrameTable(STATE_COLUMNS),
                          events=_events(events, conn, d, host))
        if sink is not None:
            sink.put(got)
        else:
            found.append(got)

    for col, snd, from_rev in slices():
        part = tr.feed(col, snd, from_rev)
        if sink is None:
            parts.append(part)
        elif len(part["ts_ns"]):
            sink.samples.write(key, part)
        take(*tr.found())
    take(*tr.finish())
    del tr
    freed.give_back()  # the slices' temporaries, before the whole columns are made
    if found:  # joined once (a join a slice was a copy of the whole table a slice)
        res.states = _joined([f.states for f in found], STATE_COLUMNS)
        res.events = _joined([f.events for f in found], EVENT_COLUMNS)
    if parts:
        cols = {}
        for k in list(parts[0]):
            cols[k] = np.concatenate([p.pop(k) for p in parts])
            # this column's slices go back now: the slices and the columns are never all
            # held at once
            freed.give_back()
        n = len(cols["ts_ns"])
        res.samples = FrameSamples(_frame({
            **cols, "conn": _const(n, conn), "dir": _const(n, d), "host": _const(n, host),
            "source": _const(n, "estimated"),
            "ca_state": pd.Categorical.from_codes(np.full(n, -1, np.int8), pd.Index(CA_STATES))},
            SAMPLE_COLUMNS, n))
    return res


def _events(events: dict[str, np.ndarray] | None, conn: str, d: str, host: str
            ) -> FrameTable:
    """A direction's marks (estimate.EVENT_FIELDS) as the events table."""
    if events is None:
        return FrameTable(EVENT_COLUMNS)
    n = len(events["ts_ns"])
    return FrameTable(EVENT_COLUMNS, pd.DataFrame(
        {**events, "conn": _const(n, conn), "dir": _const(n, d), "host": _const(n, host),
         "source": _const(n, "estimated")}, copy=False)[EVENT_COLUMNS])


# the PDU columns _cmd_lookup reads
PDU_COLUMNS = ["conn", "dir", "tcp_seq", "cmd"]


def _cmd_lookup(pdus: pd.DataFrame | None, conn: str, d: str,
                base: int) -> Callable[[np.ndarray], np.ndarray]:
    """seq offsets -> index of the command whose PDU holds each byte (NaN when unknown)."""
    def none(seq: np.ndarray) -> np.ndarray:
        return np.full(len(seq), np.nan)
    if pdus is None or pdus.empty or "tcp_seq" not in pdus.columns:
        return none
    p = pdus[(pdus["conn"] == conn) & (pdus["dir"] == d)].dropna(subset=["tcp_seq"])
    if p.empty:
        return none
    start = unwrap(p["tcp_seq"].to_numpy(np.int64), base)  # past 4 GiB as the segments are
    cmd = (pd.to_numeric(p["cmd"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
           if "cmd" in p.columns else np.full(len(p), np.nan))
    order = np.argsort(start, kind="stable")
    start, cmd = start[order], cmd[order]

    def lookup(seq: np.ndarray) -> np.ndarray:
        i = np.searchsorted(start, seq, side="right") - 1
        out = np.full(len(seq), np.nan)
        out[i >= 0] = cmd[i[i >= 0]]
        return out
    return lookup


# --------------------------------------------------------------------------------------------


def loss_commands(res: TrackResult) -> pd.DataFrame:
    """Commands hit by retransmissions/loss episodes: cmd, count, first time. The marks are
    read a block at a time (a lossy hour's are millions), each block's commands summed."""
    parts = []
    for b in res.events.blocks(["cmd", "ts_ns"], kind=("retransmit", "loss_episode")):
        b = b[b["cmd"].notna()]
        parts.append(b.groupby("cmd").agg(retransmits=("ts_ns", "size"),
                                          first_ts_ns=("ts_ns", "min")))
    if not parts:
        return pd.DataFrame(columns=["cmd", "retransmits", "first_ts_ns"])
    return (pd.concat(parts).groupby(level="cmd")
            .agg(retransmits=("retransmits", "sum"), first_ts_ns=("first_ts_ns", "min"))
            .reset_index())


def retransmit_count(res: TrackResult, d: str | None = None) -> int:
    """Retransmissions (of direction `d`; None: both): exact and estimated marks describe
    the same ones, so one source is counted, the pcap's when it has any."""
    src = res.events.read(["source"], kind="retransmit", dir=d)["source"]
    estimated = int((src == "estimated").sum())
    return estimated if estimated else len(src)


_STATE_KEYS = ["conn", "dir", "state", "source"]


def state_time(res: TrackResult) -> pd.DataFrame:
    """Total time per (conn, dir, state, source), in ns, with the number of intervals; the
    intervals read a block at a time, each block's summed."""
    parts = []
    for b in res.states.blocks([*_STATE_KEYS, "start_ns", "end_ns"]):
        dur = b["end_ns"].to_numpy(np.int64) - b["start_ns"].to_numpy(np.int64)
        keys = pd.DataFrame({k: b[k].astype(object).to_numpy() for k in _STATE_KEYS})
        parts.append(keys.assign(dur=dur).groupby(_STATE_KEYS, sort=False)
                     .agg(intervals=("dur", "size"), total_ns=("dur", "sum")))
    if not parts:
        return pd.DataFrame(columns=[*_STATE_KEYS, "intervals", "total_ns"])
    return pd.concat(parts).groupby(level=_STATE_KEYS).sum().reset_index()

"""Every plot of a capture: which data each kind draws, from a loaded `Capture`.

`make_plots` writes PNG (+ SVG) per kind; the command line (`istrace plot`) and the report
both call it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from istrace.capture.events import APP_READ_EVENTS, analysed_rows
from istrace.capture.load import Capture, merged_blocks, read_merged
from istrace.capture.meta import one_way_ms
from istrace.measure.bursts import burst_gap_threshold, data_bursts
from istrace.measure.direction import data_dir, sender_segs
from istrace.measure.outstanding import outstanding, resp_times
from istrace.measure.payload import payload_totals, throughput
from istrace.measure.spans import SPAN_COLUMNS, SpanArrays, data_spans, spans_frame
from istrace.plot import data
from istrace.plot.seqgraph import seq_graph
from istrace.system import freed

KINDS = ["ladder", "tcpseq", "cwnd", "timeline", "throughput", "resptime", "outstanding"]


def shared_passes(cap: Capture) -> None:
    """The passes over the segments that several of the report's steps ask for, made now and
    kept with the segments (their cache): of the data sender's, the payload per connection,
    the gap between bursts and the bursts; of each host's, the commands' data spans. The
    report makes them before it forks its drawing processes, which then find them made,
    where each made its own (the payload three times, the bursts twice), and hands the spans
    to its tracer. The data PDUs' spans, which only the diagnosis reads, are not made here:
    a span per PDU was held by every drawing process forked after."""
    d = data_dir(cap)
    segs = sender_segs(cap, d)
    if segs is None or segs.empty:
        return
    payload_totals(segs, d)
    data_bursts(segs, d, burst_gap_threshold(segs, d))
    for host in cap.segs:
        data_spans(cap, host)
        freed.give_back()  # what the pass freed, before the next pass or the processes forked


def data_phase(cap: Capture, d: str) -> tuple[int, int] | None:
    """The data sender's first to last payload segment, on the initiator's clock (the
    timeline's): the run its window is a part of."""
    segs = sender_segs(cap, d)
    t = payload_totals(segs, d)
    if t.empty or int(t["segments"].sum()) == 0:
        return None
    shift = cap.offset_ns if next((h for h, s in cap.segs.items() if s is segs), "") \
        == "target" else 0
    return int(t["first_ns"].min()) - shift, int(t["last_ns"].max()) - shift


def one_way_ns(cap: Capture) -> int | None:
    """One-way delay for single-capture ladders: testbed setting, else half the median RTT."""
    v = one_way_ms(cap.meta)
    if v is not None and v > 0:
        return int(v * 1e6)
    if cap.track is not None and not cap.track.samples.empty:
        r = cap.track.samples.order_stats("rtt_us")
        if r.n:
            return int(r.median * 500)
    return None


# PDUs of commands this near the ladder's window are read with it: an arrow across a long
# one-way delay, a burst begun before the window, still reach into it. The margin is the
# window's length, or ten one-way delays when longer, at most LADDER_PAD_NS (when the delay
# is not known, that): a command shown has a PDU inside the window at one end or the other,
# so any margin above the delay shows the same rows (tests/plot/test_plot_data.py), and a
# wider one only reads PDUs no arrow is drawn for.
LADDER_PAD_NS = 2_000_000_000


def ladder_pad(window: tuple[int, int], owd_ns: int | None) -> int:
    if owd_ns is None:
        return LADDER_PAD_NS
    return min(LADDER_PAD_NS, max(window[1] - window[0], 10 * owd_ns, 1_000_000))


def ladder_for(cap: Capture, window: tuple[int, int] | None
               ) -> tuple[pd.DataFrame, tuple[int, int] | None]:
    """The ladder's rows and its window (None: data.default_window's, the first commands'),
    made of the PDUs of the commands with one within ladder_pad of the window (and those
    of no command inside that) only, each file read a block at a time: a minute's 125 000
    PDUs joined end to end were a third of the plotting process's peak, for 20 arrows."""
    hosts = [h for h in ("initiator", "target") if h in cap.pdus]
    if not hosts:
        return data.ladder_rows(None, None), window
    owd = one_way_ns(cap)

    def picked(h: str, columns: list[str],
               keep: Callable[[pd.DataFrame, pd.Series], pd.Series]) -> pd.DataFrame | None:
        # keep(block, its times on the initiator's clock)
        off = cap.offset_ns if h == "target" else 0
        return cap.pdus.read_where(h, columns, lambda b: keep(b, b["ts_ns"] - off))

    def rows_of(keep: Callable[[pd.DataFrame, pd.Series], pd.Series]) -> pd.DataFrame:
        got = {h: picked(h, data.LADDER_PDU_COLUMNS, keep) for h in hosts}
        return data.ladder_rows(got.get("initiator"), got.get("target"), cap.offset_ns, owd)

    def every(b: pd.DataFrame, t: pd.Series) -> pd.Series:
        return pd.Series(True, index=b.index)

    if window is None:
        # the ladder's first commands are those of its first SCSI Command rows, which are
        # the initiator's PDUs when it has them
        first = picked(hosts[0], ["ts_ns", "opcode_name", "cmd"],
                       lambda b, t: b["opcode_name"] == "SCSI Command")
        if first is None or first.empty:
            return rows_of(every), None
        chosen = first.sort_values("ts_ns", kind="stable")["cmd"].head(data.WINDOW_COMMANDS)
        if chosen.isna().any():  # commands not numbered: the whole ladder
            rows = rows_of(every)
            return rows, data.default_window(rows)
        window = data.default_window(rows_of(lambda b, t: b["cmd"].isin(chosen)))
    pad = ladder_pad(window, owd)
    w0, w1 = window[0] - pad, window[1] + pad

    def near(b: pd.DataFrame, t: pd.Series) -> pd.Series:
        return (t >= w0) & (t <= w1)
    cmds = [p["cmd"].dropna() for h in hosts
            if (p := picked(h, ["ts_ns", "cmd"], near)) is not None]
    numbers = pd.concat(cmds).unique() if cmds else []
    return rows_of(lambda b, t: b["cmd"].isin(numbers) | (b["cmd"].isna() & near(b, t))), \
        window


def needs_track(cap: Capture) -> set[str]:
    """The plot kinds that read the tracker's result: the cwnd plot, and the ladder when the
    one-way delay is not in meta.json (then half the tracker's median RTT)."""
    v = one_way_ms(cap.meta)
    return {"cwnd"} | (set() if v is not None and v > 0 else {"ladder"})


# what each kind costs to draw, relative, to share the kinds out between the drawing
# processes (docs/measurements/report.md has where the figures come from)
DRAW_COST = {"ladder": 10, "tcpseq": 8, "cwnd": 7, "timeline": 4, "throughput": 5,
             "resptime": 5, "outstanding": 2}


def split_kinds(late: set[str]) -> tuple[list[str], list[str]]:
    """The plot kinds shared between two drawing processes, each drawing its share of the
    kinds that are ready at once and then those it waits for: the first then draws the
    `late` ones (they need the tracker's result), the second the timeline (it needs the
    spans). (The first's kinds drawn at once, the second's.) The costlier ones go first to
    whichever has less to draw, so that both end at about the same time."""
    waits = ([k for k in KINDS if k in late and k != "timeline"], ["timeline"])
    load = [sum(DRAW_COST[k] for k in w) for w in waits]
    parts: tuple[list[str], list[str]] = ([], [])
    for k in sorted((k for k in KINDS if k not in late and k != "timeline"),
                    key=lambda k: -DRAW_COST[k]):
        i = 0 if load[0] <= load[1] else 1
        parts[i].append(k)
        load[i] += DRAW_COST[k]
    return ([k for k in KINDS if k in parts[0]], [k for k in KINDS if k in parts[1]])


def parse_window(text: str | None, t0: int) -> tuple[int, int] | None:
    """'START:END' in ms from the first record -> absolute ns window."""
    if not text:
        return None
    try:
        a, b = (float(x) for x in text.split(":", 1))
    except ValueError as exc:
        raise ValueError(f"--window {text!r}: use START_MS:END_MS") from exc
    if b <= a:
        raise ValueError(f"--window {text!r}: end must be after start")
    return t0 + int(a * 1e6), t0 + int(b * 1e6)


def first_ts(cap: Capture) -> int:
    cands = [t for s in cap.segs.values() if (t := s.ts_min()) is not None]
    cands += [int(p["ts_ns"].min()) for h in cap.pdus
              if (p := cap.pdus.read(h, ["ts_ns"])) is not None and p["ts_ns"].notna().any()]
    return min(cands) if cands else 0


def make_plots(cap: Capture, out: Path, kinds: list[str], window_ms: str | None = None,
               formats: tuple[str, ...] = ("png", "svg"),
               spans: pd.DataFrame | None = None,
               span_window: tuple[int, int] | None = None) -> dict[str, list[Path]]:
    """Each plot of `kinds` into out/<kind>.<format>. `spans`: timeline_spans(cap), when the
    caller has them already, or with `span_window` those timeline_shown(spans) keeps, and its
    window (the report writes every span to the Perfetto trace in another process)."""
    # matplotlib takes half a second to import: only the process that draws pays it (the
    # report's drawing processes, beside the tracking), not every user of these helpers
    from istrace.plot import plots

    made: dict[str, list[Path]] = {}
    window = parse_window(window_ms, first_ts(cap)) if window_ms else None
    d = data_dir(cap)
    segs = sender_segs(cap, d)
    tr = cap.track
    for kind in kinds:
        if kind == "ladder":
            rows, shown = ladder_for(cap, window)
            bursts = (data_bursts(segs, d, burst_gap_threshold(segs, d))
                      if segs is not None else None)
            fig = plots.ladder(rows, shown, bursts, 1.0 if d == "t2i" else 0.0)
        elif kind == "tcpseq":
            conn = data.busiest_conn(segs, d)
            several = segs is not None and len(segs.conns()) > 1
            fig = plots.tcpseq(seq_graph(segs, d, conn=conn),
                               title=f"TCP sequence / time, {d} (tcptrace style)"
                               + (f", {conn} (the busiest connection)" if several else ""))
        elif kind == "cwnd":
            if tr is None:
                fig = plots.empty_figure("cwnd", "tracker not run")
            else:
                fig = plots.cwnd(tr.samples, tr.states, tr.events, throughput(segs, d), d)
        elif kind == "timeline":
            if spans is None:  # those in the window: the socket I/O's a block at a time
                parts = span_parts(cap)
                w = window or default_timeline_window(parts.held)
                spans = spans_within(parts, w)
                del parts
            else:
                w = window or span_window or default_timeline_window(spans)
            fig = plots.timeline(spans, w, run=data_phase(cap, d))
        elif kind == "throughput":
            series = {}
            for host, s in cap.segs.items():
                for dd in ("t2i", "i2t"):
                    t = throughput(s, dd)
                    if not t.empty and t["bytes"].sum() > 0:
                        series[f"{dd} at {host}"] = t
            fig = plots.throughput_plot(series)
        elif kind == "resptime":
            fig = plots.resptime_plot(resp_times(cap.main_commands()))
        elif kind == "outstanding":
            fig = plots.outstanding_plot(outstanding(cap.main_commands()))
        else:
            raise ValueError(f"unknown plot kind {kind!r}")
        made[kind] = plots.save(fig, out / kind, formats)
        # this plot's tables and artists, before the next one's. A closed figure is a cycle
        # of artists (its data's arrays in them) that only the cyclic collector frees, and a
        # plot makes few Python objects and many large arrays: left to run when it would, it
        # ran a plot or two later, with several plots' data held at once
        del fig
        gc.collect()
        freed.give_back()
    return made


def _no_spans() -> Iterator[pd.DataFrame]:
    return iter(())


@dataclass
class SpanParts:
    """The timeline's spans in two parts. `held`: every span but those of the hosts' socket
    I/O system calls (events.analysed_rows leaves them out): a few per command. Those are
    one per few packets (123 000 of a full-rate minute's 148 000 spans), each made of one
    event alone: `socket_io()` makes them a row group of merged.parquet at a time, each
    block in time order; `socket_io_start` is the earliest start among them. Without
    merged.parquet, `held` has them all."""
    held: pd.DataFrame
    socket_io: Callable[[], Iterator[pd.DataFrame]] = _no_spans
    socket_io_start: int | None = None

    def every(self) -> pd.DataFrame:
        """Both parts as one table, in time order."""
        return _by_start(data.concat_spans([self.held, *self.socket_io()]))


def span_parts(cap: Capture, spans_of: dict[str, list[SpanArrays]] | None = None
               ) -> SpanParts:
    """The timeline's spans (SpanParts): the probe events' from merged.parquet, tied to their
    commands there, else from the streams; the commands'; and from the pcaps when each
    command's data crossed each end's TCP and the wire (host -> data_spans(cap, host) in
    `spans_of` when the caller has them, else made here)."""
    socket_io: Callable[[], Iterator[pd.DataFrame]] = _no_spans
    starts: list[int] = []
    ev = None
    if "cmd_id" in cap.merged_columns:
        # the probe events tied to their commands (read here: nothing else needs them), the
        # columns the spans are made of (all 38 held the events twice over beside cap.events)
        columns = [c for c in data.TIMELINE_EVENT_COLUMNS if c in cap.merged_columns]
        try:
            m = read_merged(cap.dir, columns, probe_rows_only=True, keep=_held_span_rows)
        except (OSError, ValueError):  # its schema read at load, its rows not: the raw events
            m = None
        freed.give_back()  # the row groups read and cut, freed but kept by the allocator
        if m is not None:
            commands = cap.commands.get("initiator")

            def socket_io() -> Iterator[pd.DataFrame]:
                for block in merged_blocks(cap.dir, columns, _socket_io_span_rows):
                    yield data.event_spans(_on_initiator_clock(block, cap.offset_ns), commands,
                                           cap.offset_ns)
            starts = [int(b["start_ns"].min()) for b in socket_io() if len(b)]
            if len(m) or starts:
                ev = _on_initiator_clock(m, cap.offset_ns)
    if ev is None:  # not merged: every event, the socket I/O system calls too
        ev = cap.all_events()
        socket_io, starts = _no_spans, []
    spans = data.timeline_spans(cap.commands.get("initiator"), cap.commands.get("target"),
                                ev, cap.offset_ns)
    del ev
    # From the pcaps: when each command's data crossed each end's TCP and the wire.
    seg_rows = [spans_frame(spans_of[h] if spans_of is not None and h in spans_of
                            else data_spans(cap, h), f"{h} TCP", h,
                            cap.offset_ns if h == "target" else 0)
                for h in ("initiator", "target") if h in cap.segs]
    seg_rows = [s for s in seg_rows if not s.empty]
    if seg_rows:
        both = pd.concat(seg_rows, ignore_index=True)
        wire = both.groupby("cmd").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"),
                                       bytes=("bytes", "first")).reset_index()
        wire = wire.assign(row="wire", host="wire", layer="net", label="data on the wire")
        have_tcp_probe = spans["row"].isin(["initiator TCP", "target TCP"]).any()
        extra = [wire[SPAN_COLUMNS]] + ([] if have_tcp_probe else seg_rows)
        spans = _by_start(data.concat_spans([spans[spans["row"] != "wire"]] + extra))
    return SpanParts(spans, socket_io, min(starts) if starts else None)


def timeline_spans(cap: Capture) -> pd.DataFrame:
    """Every span of the timeline, in time order (span_parts, both parts as one table)."""
    return span_parts(cap).every()


def _by_start(spans: pd.DataFrame) -> pd.DataFrame:
    return spans.sort_values("start_ns", kind="stable").reset_index(drop=True)


def _on_initiator_clock(m: pd.DataFrame, offset_ns: int) -> pd.DataFrame:
    """merged.parquet's probe rows with ts_ns, their time on the initiator's clock (the
    table is the caller's to change: read for this, never shared)."""
    m["ts_ns"] = m.pop("ts_ns_merged") + np.where(m["host"] == "target", offset_ns, 0)
    return m


def span_rows(t: pa.Table) -> pa.ChunkedArray:
    """Which of merged.parquet's probe rows data.timeline_spans uses (data.span_events),
    picked before they become a pandas table: of a minute's 329 000, 149 000."""
    names = ["host", "layer", "event"]
    kinds = [tuple(str(r[c]) for c in names) for r in
             t.select(names).group_by(names).aggregate([]).to_pylist()
             if all(r[c] is not None for c in names)]
    drawn, paired = data.span_events(kinds)  # type: ignore[arg-type]
    key = pc.binary_join_element_wise(*(pc.cast(t[c], pa.string()) for c in names), "\x1f")

    def among(chosen: set[tuple[str, str, str]]) -> pa.ChunkedArray:
        return pc.is_in(key, value_set=pa.array(["\x1f".join(k) for k in chosen], pa.string()))
    with_lat = pc.is_valid(t["lat_ns"]) if "lat_ns" in t.column_names else pa.scalar(False)
    return pc.fill_null(pc.or_(pc.and_(among(drawn), with_lat), among(paired)), False)


def _held_span_rows(t: pa.Table) -> pa.ChunkedArray:
    return pc.and_(span_rows(t), analysed_rows(t))


def _socket_io_span_rows(t: pa.Table) -> pa.ChunkedArray:
    return pc.and_(span_rows(t), pc.invert(analysed_rows(t)))


def _spans_inside(start: np.ndarray, end: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """For each span [start, end], how many of the spans [s, e] lie inside it: those that
    start within it (a search in the sorted starts) and end by its end."""
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    lo = np.searchsorted(s, start, side="left")
    hi = np.searchsorted(s, end, side="right")
    out = np.zeros(len(start), np.int64)
    for i in np.flatnonzero(hi > lo):
        out[i] = int((e[lo[i]:hi[i]] <= end[i]).sum())
    return out


def timeline_shown(spans: pd.DataFrame | SpanParts
                   ) -> tuple[pd.DataFrame, tuple[int, int] | None]:
    """The spans the timeline plot draws by default and its window (default_timeline_window;
    every span when it has none): what the plot needs of a capture's spans, a few hundred
    of a minute's 150 000. Of SpanParts, the window is the held spans' (it is found among
    the application's reads, which are held), and only the socket I/O spans inside it are
    kept, a block at a time."""
    parts = spans if isinstance(spans, SpanParts) else SpanParts(spans)
    w = default_timeline_window(parts.held)
    return spans_within(parts, w), w


def spans_within(parts: SpanParts, window: tuple[int, int] | None) -> pd.DataFrame:
    """Of both parts, the spans that overlap `window` (every one without), in time order:
    the socket I/O's a block at a time, none of them held but those."""
    if window is None:
        return parts.every()
    return _by_start(data.concat_spans([data.spans_in(b, window) for b in
                                        (parts.held, *parts.socket_io())]))


def shown_while_written(parts: SpanParts) -> tuple[
        Iterator[pd.DataFrame], Callable[[], tuple[pd.DataFrame, tuple[int, int] | None]]]:
    """parts.socket_io()'s blocks, for a writer to go through once (the Perfetto trace's),
    and a call that then returns what timeline_shown(parts) does, kept from those blocks on
    the way: a pass over merged.parquet less."""
    w = default_timeline_window(parts.held)
    kept = [parts.held if w is None else data.spans_in(parts.held, w)]

    def blocks() -> Iterator[pd.DataFrame]:
        for b in parts.socket_io():
            kept.append(b if w is None else data.spans_in(b, w))
            yield b

    def shown() -> tuple[pd.DataFrame, tuple[int, int] | None]:
        return _by_start(data.concat_spans(kept)), w
    return blocks(), shown


def default_timeline_window(spans: pd.DataFrame, commands: int = 64) -> tuple[int, int] | None:
    """The first application read spanning commands (if any) or the first `commands`
    commands: the study's fig. 2 view."""
    if spans.empty:
        return None
    # The first of the application's reads that spans whole commands (the study's 2 MB
    # read()), if any; the socket I/O of a user-space initiator is not the application's.
    sc = spans[(spans["row"] == "initiator syscall").to_numpy(bool)
               & spans["label"].astype(str).str.match(APP_READ_EVENTS).to_numpy(bool)]
    sc = sc.dropna(subset=["start_ns", "end_ns"])
    isc = spans[spans["row"] == "initiator iSCSI"].dropna(subset=["start_ns", "end_ns"])
    if not sc.empty and not isc.empty:
        covers = _spans_inside(sc["start_ns"].to_numpy(np.int64), sc["end_ns"].to_numpy(np.int64),
                               isc["start_ns"].to_numpy(np.int64), isc["end_ns"].to_numpy(np.int64))
        best = int(np.argmax(covers))
        if covers[best] > 0:
            r = sc.iloc[best]
            pad = int((r["end_ns"] - r["start_ns"]) * 0.03)
            return int(r["start_ns"]) - pad, int(r["end_ns"]) + pad
    cmds = spans["cmd"].dropna().unique()
    if len(cmds):
        keep = spans[spans["cmd"].isin(cmds[:commands])]
        pad = int((keep["end_ns"].max() - keep["start_ns"].min()) * 0.02)
        return int(keep["start_ns"].min()) - pad, int(keep["end_ns"].max()) + pad
    return None

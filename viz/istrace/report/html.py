"""`report.html`: the diagnosis and every plot in one self-contained page (plots embedded),
plus trace.json (Chrome/Perfetto) beside it."""

from __future__ import annotations

import base64
import html
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from istrace.capture import layout
from istrace.capture.load import Capture, load_capture
from istrace.capture.outputs import write_verdict
from istrace.capture.swapwrite import replace_text
from istrace.measure.spans import data_spans
from istrace.plot.render import (
    KINDS,
    make_plots,
    needs_track,
    shared_passes,
    shown_while_written,
    span_parts,
    split_kinds,
)
from istrace.report import glance, perfetto
from istrace.report.diagnosis import IDLE_DEFINITION, diagnose
from istrace.system import forked, freed
from istrace.track.of_capture import track_to_file


def _img(path: Path) -> str:
    b64 = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{path.stem}" src="data:image/png;base64,{b64}" style="max-width:100%">'


CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc}
.headline{font-size:1.1em}.def,.clock,.caption{color:#555;font-size:.9em}
.warn{background:#c62828;color:#fff;padding:.6em;font-weight:bold;margin:.3em 0}
.note{background:#fff3cd;padding:.4em;margin:.3em 0}.missing{color:#8a6d00}
li{margin:.3em 0}table{border-collapse:collapse}.for{color:#555}
td,th{border:1px solid #ccc;padding:2px 6px;font-size:.9em}"""
TITLES = {"ladder": "Packet ladder", "tcpseq": "TCP sequence / time",
          "cwnd": "Congestion window, CA state, throughput",
          "timeline": "Cross-layer timeline", "throughput": "Throughput",
          "resptime": "Response time", "outstanding": "Commands outstanding"}


def write_html(cap: Capture, diag: dict[str, Any], plots_made: dict[str, list[Path]],
               path: Path, trace_note: str) -> None:
    """The verdict first (glance.verdict_section), then the measurements, then the plots."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>istrace report "
             f"{e(cap.dir.name)}</title><style>{CSS}</style></head><body>",
             f"<h1>istrace report: {e(str(cap.dir))}</h1>",
             glance.verdict_section(cap.meta, diag["verdict"], diag["warnings"])]
    parts.append("<section id='measurements'><h2>Measurements</h2><ul>")
    parts += [f"<li>{e(f)}</li>" for f in diag["findings"]] or ["<li>nothing to say</li>"]
    parts.append("</ul>")
    if diag.get("idle_ratio") is not None:
        parts.append(f"<p class='def'>{e(IDLE_DEFINITION[0].upper() + IDLE_DEFINITION[1:])}."
                     "</p>")
    parts.append(glance.clock_sentence(cap.clock or {}, cap.meta, cap.clock_note))
    parts.append(f"<p class='def'>{e(trace_note)}</p></section>")
    if diag["missing"]:
        parts.append("<h2>Missing inputs</h2><ul class='missing'>")
        parts += [f"<li>{e(m)}</li>" for m in diag["missing"]]
        parts.append("</ul>")
    st = diag.get("states")
    if st is not None and not st.empty:
        parts.append("<h2>TCP congestion states</h2>" + st.to_html(index=False))
    for kind, paths in plots_made.items():
        png = [p for p in paths if p.suffix == ".png"]
        if png:
            parts.append(f"<h2>{e(TITLES.get(kind, kind))}</h2>{_img(png[0])}")
    parts.append("</body></html>")
    replace_text(path, "\n".join(parts))


def _track_alone(cap: Capture, out: Path) -> Any:
    """The tracking (track_to_file), in a process forked for it (only: it changes `cap`),
    which lets go of the tables the tracker does not read (the commands, the probe events:
    it reads the TCP layer's itself, and the PDUs it looks commands up in); what its slices
    leave freed and fragmented stays in that process, not under the diagnosis here (a
    full-rate minute's tracking left 20 MB resident, the diagnosis's peak on top)."""
    cap.commands = {}
    cap.release_events()
    freed.give_back()
    return track_to_file(cap, out)


def report(d: Path, out: Path | None = None,
           ports: tuple[int, ...] | None = None) -> tuple[Path, dict[str, Any]]:
    t0 = time.monotonic()

    def step(what: str) -> None:  # a full-rate capture takes tens of seconds: say where
        freed.give_back()  # what the step before freed, before the next one allocates
        print(f"report: {time.monotonic() - t0:5.1f} s  {what} ...", file=sys.stderr)

    step(f"loading {d} (decoding as needed)")
    cap = load_capture(d, ports=ports)
    # The plots in two more processes (matplotlib imported there, and only there), beside the
    # tracking and the diagnosis. Each draws its share of the plots that need neither the
    # tracker nor the spans at once; then the first draws those that need the tracker (its
    # samples are in track.parquet: only the tables' handles are sent), the second the
    # timeline, from the spans in its window that the tracing process made. One drawing
    # process was the report's longest (half its CPU), the tracking's CPU idle at its end;
    # with one process drawing both the tracker's plots and the timeline, those two were
    # drawn one after the other at the end, the first process idle. The second is forked
    # from the first once matplotlib is loaded (a second of CPU to import, paid once), and
    # the first hands it the spans this process sends.
    # They are forked before anything beyond the capture's tables and the shared passes (a
    # few MB, forked first, the tracer runs beside them) is made: each starts at the size of
    # the tables, not of what this process made and freed after. The tracking reads none of
    # the passes' results: it is forked with the tracer, before them (forked after, it held
    # what they made, a full-rate minute's 4 MB more, and began 2 s later).
    late = needs_track(cap)
    first, second = split_kinds(late)

    def plot_rest(get: Callable[[], Any]) -> dict[str, list[Path]]:
        made = make_plots(cap, d / layout.PLOTS, second, formats=("png",))
        shown, window = get()
        made.update(make_plots(cap, d / layout.PLOTS, ["timeline"], formats=("png",),
                               spans=shown, span_window=window))
        return made

    def plotter(get: Callable[[], Any]) -> dict[str, list[Path]]:
        cap.release_events()  # no plot reads them: the tracker's are in its result
        importlib.import_module("istrace.plot.plots")  # matplotlib, before the fork
        feed_rest, rest = forked.start_fed(plot_rest)
        made = make_plots(cap, d / layout.PLOTS, first, formats=("png",))
        cap.track = get()
        relayed = forked.relay(get, feed_rest, 1)  # the spans shown, while these are drawn
        made.update(make_plots(cap, d / layout.PLOTS, [k for k in KINDS if k in late],
                               formats=("png",)))
        relayed()
        return {**made, **rest()}
    # The timeline's spans (one per command and layer, a minute's are 80 MB to make) in a
    # process of their own, which writes them to the Perfetto trace and hands back those the
    # timeline plot draws (its window's): it needs neither the tracker nor the diagnosis, nor
    # matplotlib (40 MB and half a second to import), and no other process holds every span.
    # The instants first: made after the spans, their making (a bounded million rows, 40 MB
    # at its peak) came on top of the spans held, whose making then peaks alone.
    # The socket I/O system calls' spans (one per few packets) are made a block at a time as
    # they are written, those the plot shows kept on the way: never all at once.
    def tracer(get: Callable[[], Any]) -> tuple[int, pd.DataFrame, tuple[int, int] | None]:
        cap.release_events()  # the trace's are merged.parquet's (or all_events(), read anew)
        instants = perfetto.merged_instants(cap)
        freed.give_back()
        # each host's data spans, made by the shared passes there while the instants were
        # made here (made twice, they were the tracer's peak and the diagnosis's)
        parts = span_parts(cap, get())
        freed.give_back()
        blocks, shown = shown_while_written(parts)
        n = perfetto.write_trace(d / layout.TRACE_JSON, parts.held, instants, more_spans=blocks,
                                 more_start=parts.socket_io_start)
        return n, *shown()
    step("timeline spans and the Perfetto trace (in another process)")
    feed_tracer, traced = forked.start_fed(tracer)
    step(f"tracking TCP ({sum(len(s) for s in cap.segs.values())} segments, in another "
         "process)")
    # without a second CPU, run where its result is waited for (below)
    tracked = forked.start(lambda: _track_alone(cap, d / layout.TRACK)) \
        if forked.can_fork() else None
    # what the plots, the diagnosis and the tracer read of the segments, made once, beside
    # the tracer
    step("the payload, the bursts and the data spans of the segments")
    spans_made: dict[str, Any] = {}
    try:
        shared_passes(cap)
        spans_made = {h: data_spans(cap, h) for h in cap.segs}  # made by the passes
    finally:  # the tracer is not left waiting by a pass that failed
        feed_tracer(spans_made)
    step("plotting (in two more processes, beside the next steps)")
    feed, plotted = forked.start_fed(plotter, nested=True)
    step("waiting for the tracking")
    try:
        # the samples go to track.parquet as they are made; the steps after read them there
        cap.track = tracked() if tracked is not None else track_to_file(cap, d / layout.TRACK)
    finally:
        feed(cap.track)  # None if the tracking failed: the plots say it was not run
    # the spans go on to the plotter as soon as the tracer has them (nothing if it failed:
    # the plotter is not left waiting), so the timeline is drawn during the diagnosis: fed
    # after it, the timeline was drawn last, one CPU idle
    trace_done = forked.hand_on(traced, feed, lambda r: (pd.DataFrame(), None) if r is None
                                else r[1:])
    step("diagnosing")
    diag = diagnose(cap)
    write_verdict(diag["verdict"], d)
    step("waiting for the Perfetto trace")
    n = trace_done()[0]
    step("waiting for the plots")
    done = plotted()
    made = {k: done[k] for k in KINDS if k in done}
    step("writing report.html")
    note = f"Perfetto / Chrome trace: {d / layout.TRACE_JSON} ({n} events)."
    path = out or d / layout.REPORT
    write_html(cap, diag, made, path, note)
    return path, diag

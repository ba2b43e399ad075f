"""Drawing: each function turns the tables of `data` into one figure, saved as PNG and SVG.

Times on the axes are milliseconds from the first record shown. Big inputs are thinned or
aggregated in `data` first, so every plot draws in seconds whatever the trace size.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
# Agg draws a line of more vertices than this in pieces: whole, a thinned series of a long
# capture (20 000 points, each bin's swing taller than a short one's) took memory for all of
# its ink at once: the cwnd plot's drawing took 83-92 MB on a 60 s capture, 49-61 MB at
# 10 s; in pieces 43 and 39 MB. The pieces' joins change 0.02-0.04% of its pixels.
matplotlib.rcParams["agg.path.chunksize"] = 10_000
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from istrace.capture.swapwrite import replacing  # noqa: E402
from istrace.capture.tracksamples import Samples, SamplesLike, as_samples  # noqa: E402
from istrace.capture.tracktables import EVENT_COLUMNS, STATE_COLUMNS, TrackTable, as_table  # noqa: E402
from istrace.measure.bursts import gaps_from_bursts  # noqa: E402
from istrace.measure.outstanding import outstanding_ceiling  # noqa: E402
from istrace.plot import data  # noqa: E402
from istrace.plot.png import save_png  # noqa: E402
from istrace.plot.thin import Thinner, thin  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

KIND_COLORS = {"SCSI Command": "tab:blue", "SCSI Data-In": "tab:green",
               "SCSI Data-Out": "tab:olive", "R2T": "tab:purple",
               "SCSI Response": "tab:red"}
STATE_COLORS = {"Open": None, "Disorder": "#ffe08a", "CWR": "#9ecae1", "Recovery": "#fdae6b",
                "Loss": "#fb6a4a"}
CMD_CMAP = plt.get_cmap("tab20")


def save(fig: Figure, stem: Path, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in formats:
        p = stem.with_suffix("." + fmt)
        with replacing(p) as tmp:
            if fmt == "png":
                save_png(fig, tmp, dpi=110)
            else:
                fig.savefig(tmp, bbox_inches="tight")
        out.append(p)
    plt.close(fig)
    return out


def empty_figure(title: str, why: str) -> Figure:
    fig, ax = plt.subplots(figsize=(8, 2.5))
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=11, wrap=True)
    return fig


def _ms(t: np.ndarray | pd.Series | list[float], t0: int) -> np.ndarray:
    return (np.asarray(t, dtype=np.float64) - t0) / 1e6


# ------------------------------------------------------------------------------ 1. ladder


def ladder(rows: pd.DataFrame, window: tuple[int, int] | None = None,
           bursts: pd.DataFrame | None = None, sender_x: float = 1.0,
           title: str = "iSCSI packet ladder") -> Figure:
    """Time runs down; arrows from sender to receiver column, data bursts as filled bands."""
    if rows.empty:
        return empty_figure(title, "no decoded PDUs (need pdus.csv from `istrace decode`)")
    w0, w1 = window if window else data.default_window(rows)
    sel = rows[(rows["t_recv_end_ns"] >= w0) & (rows["t_send_ns"] <= w1)]
    if sel.empty:
        return empty_figure(title, "no PDUs in the chosen time window")
    t0 = int(w0)
    span_ms = max((w1 - w0) / 1e6, 1e-3)
    fig, ax = plt.subplots(figsize=(8.5, min(3 + 0.32 * len(sel), 14)))
    xi, xt = 0.0, 1.0
    arrow_labels: list[tuple[Any, list[tuple[float, float]]]] = []
    r: Any  # a row's fields (pandas-stubs type them as any scalar at all)
    for r in sel.itertuples():
        i2t = r.dir == "i2t"
        xs, xr = (xi, xt) if i2t else (xt, xi)
        color = KIND_COLORS.get(r.kind, "gray")
        ys, yr = _ms([r.t_send_ns], t0)[0], _ms([r.t_recv_ns], t0)[0]
        ye_s, ye_r = _ms([r.t_send_end_ns], t0)[0], _ms([r.t_recv_end_ns], t0)[0]
        style = "--" if r.estimated else "-"
        if r.pdus > 1:
            ax.add_patch(plt.Polygon([(xs, ys), (xr, yr), (xr, ye_r), (xs, ye_s)],
                                     closed=True, color=color, alpha=0.25, lw=0))
            ax.annotate("", xy=(xr, ye_r), xytext=(xs, ye_s),
                        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2,
                                    "linestyle": style})
        ax.annotate("", xy=(xr, yr), xytext=(xs, ys),
                    arrowprops={"arrowstyle": "->", "color": color, "lw": 1.4,
                                "linestyle": style})
        ym = (ys + max(yr, ye_r)) / 2 if r.pdus > 1 else (ys + yr) / 2
        t = ax.text(0.5, ym, r.label, ha="center", va="bottom", fontsize=8, color=color,
                    clip_on=True,
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7})
        # elsewhere along its arrow when the middle is taken (a burst's band: its middle only)
        on_arrow = [(x, ys + (yr - ys) * abs(x - xs)) for x in (0.25, 0.75)] \
            if r.pdus == 1 else []
        arrow_labels.append((t, on_arrow))
    # The data sender's activity: busy bursts (from the segments) and the idle gaps between.
    side = 1.0 if sender_x >= 0.5 else -1.0
    bx = sender_x + 0.04 * side
    if bursts is not None and not bursts.empty:
        b = bursts[(bursts["end_ns"] >= w0) & (bursts["start_ns"] <= w1)]
        a, z = _ms(b["start_ns"], t0), _ms(b["end_ns"], t0)
        # one collection of hundreds of bars: a line each took 0.6 s of a 10 s capture's report
        _bars(ax, bx, a, np.maximum(z, a + span_ms / 400), color="tab:green")
        gaps = gaps_from_bursts(bursts)
        gaps = gaps[(gaps["end_ns"] >= w0) & (gaps["start_ns"] <= w1)]
    else:
        gaps = data.idle_gaps(sel, int(span_ms * 1e6 * 0.02))
    # Label only the gaps that matter at this zoom: the 15 longest above 2% of the window.
    labelled = set(gaps[gaps["gap_ns"] >= 0.02 * (w1 - w0)].nlargest(15, "gap_ns").index)
    _bars(ax, bx, _ms(gaps["start_ns"], t0), _ms(gaps["end_ns"], t0), color="0.6", alpha=0.5)
    idle_labels: list[tuple[Any, list[tuple[float, float]]]] = []
    g: Any  # a row's fields, as r's above
    for g in gaps.itertuples():
        if g.Index not in labelled:
            continue
        a, z = _ms([g.start_ns], t0)[0], _ms([g.end_ns], t0)[0]
        idle_labels.append((ax.text(bx + 0.03 * side, (a + z) / 2, f"idle {g.gap_ns / 1e6:.2f} ms",
                                    ha="left" if side > 0 else "right", va="center", fontsize=7,
                                    color="0.3", clip_on=True), []))
    owd = (sel["t_recv_ns"] - sel["t_send_ns"]).median() / 1e6
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylim(span_ms * 1.02, -span_ms * 0.02)
    ax.set_xticks([xi, xt], ["initiator", "target"])
    ax.xaxis.tick_top()
    for x in (xi, xt):
        ax.axvline(x, color="k", lw=1)
    ax.set_ylabel("time [ms] (runs down)")
    est = " (far-end times estimated)" if sel["estimated"].any() else ""
    ax.set_title(f"{title}: one-way delay ~{owd:.3f} ms{est}", pad=22)
    ax.legend(handles=[Patch(color=c, label=k) for k, c in KIND_COLORS.items()],
              loc="lower left", fontsize=7, framealpha=0.8)
    _declutter(fig, arrow_labels)
    _declutter(fig, idle_labels)
    return fig


def _declutter(fig: Figure, labels: list[tuple[Any, list[tuple[float, float]]]]) -> None:
    """No label over another: each, in turn, stays where it is if free, else takes the first
    free place of its own list (data coordinates), else is left out (its arrow and colour
    remain). PDUs a few ms apart at the top of a ladder put their labels on one spot."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    taken: list[Any] = []
    for text, places in labels:
        for at in [None, *places]:
            if at is not None:
                text.set_position(at)
            box = text.get_window_extent(renderer).expanded(1.02, 1.1)
            if not any(box.overlaps(b) for b in taken):
                taken.append(box)
                break
        else:
            text.set_visible(False)


def _bars(ax: Axes, x: float, a: np.ndarray, z: np.ndarray, **style: Any) -> None:
    """Vertical bars at `x` from each `a` to its `z`, drawn as lines are (width 5, square
    ends)."""
    if len(a):
        ax.add_collection(LineCollection(
            [[(x, lo), (x, hi)] for lo, hi in zip(a, z, strict=True)], lw=5, capstyle="butt",
            zorder=2, **style), autolim=False)


# ------------------------------------------------------------------------------ 2. tcp seq


def tcpseq(graph: dict[str, pd.DataFrame], title: str = "TCP sequence / time (data direction)",
           t0: int | None = None) -> Figure:
    sg, ak = graph["segments"], graph["acks"]
    if sg.empty:
        return empty_figure(title, "no TCP data segments (need initiator.pcap or target.pcap)")
    t0 = int(sg["t_ns"].min()) if t0 is None else t0
    fig, ax = plt.subplots(figsize=(10, 5.5))
    mb = 1 / (1 << 20)
    tt = _ms(sg["t_ns"], t0)
    lines = np.stack([np.column_stack([tt, sg["start"] * mb]),
                      np.column_stack([tt, sg["end"] * mb])], axis=1)
    ok = ~sg["rtx"].to_numpy()
    ax.add_collection(LineCollection(lines[ok], colors="tab:blue", lw=2.5, zorder=3))
    # and a tick at each: a segment is a kilobyte of a graph of megabytes, under a pixel tall,
    # its line drew nothing; above the ACK line, which runs beside it
    ax.plot(tt[ok], sg["end"].to_numpy()[ok] * mb, ls="none", marker="|", ms=5, mew=1,
            color="tab:blue", zorder=3, label="data segment")
    if (~ok).any():
        ax.add_collection(LineCollection(lines[~ok], colors="tab:red", lw=2.5, zorder=3))
        ax.scatter(tt[~ok], sg["end"].to_numpy()[~ok] * mb, marker="x", color="tab:red",
                   s=30, label=f"retransmission ({sg.attrs.get('retransmissions', (~ok).sum())})",
                   zorder=3)
    if not ak.empty:
        ta = _ms(ak["t_ns"], t0)
        ax.step(ta, ak["ack"] * mb, where="post", color="tab:green", lw=2.5, label="ACK")
        ax.step(ta, ak["win_edge"] * mb, where="post", color="0.6", lw=0.8,
                label="ACK + receive window")
    ax.autoscale_view()
    ax.set_xlabel("time [ms]")
    ax.set_ylabel("relative sequence [MiB]")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(alpha=0.3)
    return fig


# ------------------------------------------------------------------------------ 3. cwnd


def _thinned(s: Samples, d: str, column: str, max_points: int) -> pd.DataFrame:
    """thin() of one column's rows of direction d (missing values left out), in time order,
    read a chunk at a time twice: the rows and time range first, then the thinning. The
    pcap's estimates when there are any (the probes' are few, and merging both in time order
    would hold them all)."""
    source = "estimated" if s.rows(dir=d, source="estimated") else None
    def rows() -> Iterator[dict[str, np.ndarray]]:
        for c in s.timed(["ts_ns", column], dir=d, source=source):
            v = c[column].to_numpy(np.float64, na_value=np.nan)
            ok = ~np.isnan(v)
            yield {"ts_ns": c["ts_ns"].to_numpy(np.int64)[ok], column: v[ok]}
    n, lo, hi = 0, None, None
    for c in rows():
        if len(c["ts_ns"]):
            n += len(c["ts_ns"])
            a, b = int(c["ts_ns"].min()), int(c["ts_ns"].max())
            lo, hi = (a, b) if lo is None or hi is None else (min(lo, a), max(hi, b))
    if not n or lo is None or hi is None:
        return pd.DataFrame({"ts_ns": np.zeros(0, np.int64), column: np.zeros(0)})
    th = Thinner(n, lo, hi, max_points)
    for c in rows():
        th.feed(c, "ts_ns", column)
    return th.frame(["ts_ns", column])


def cwnd(samples: SamplesLike, states: pd.DataFrame | TrackTable,
         events: pd.DataFrame | TrackTable,
         thr: pd.DataFrame | None = None, d: str = "t2i",
         title: str = "Congestion window and CA state") -> Figure:
    # the tracker's samples are a row per segment and ACK, millions at full rate: read a
    # chunk at a time, only the rows and columns drawn kept
    s = as_samples(samples)
    if not s.rows(dir=d):
        return empty_figure(title, f"no TCP samples for direction {d}")
    span = s.time_range(dir=d)
    if span is None:  # rows, none with a time
        return empty_figure(title, f"no TCP samples for direction {d}")
    t0, t_end = span
    fig, ax = plt.subplots(figsize=(10, 5))
    # cwnd is the probes' (exact): the pcap's estimates have none
    parts = [c[c["cwnd"].notna()] for c in s.timed(["ts_ns", "cwnd", "ssthresh"], dir=d,
                                                   source="exact")]
    exact = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if not exact.empty:
        ex = thin(exact, "ts_ns", "cwnd", 30000)
        ax.step(_ms(ex["ts_ns"], t0), ex["cwnd"], where="post", color="tab:blue",
                label="cwnd [segments] (exact)")
        ss = ex[ex["ssthresh"].notna() & (ex["ssthresh"] < 1e6)]
        if not ss.empty:
            ax.step(_ms(ss["ts_ns"], t0), ss["ssthresh"], where="post", color="tab:orange",
                    ls="--", label="ssthresh [segments]")
        ax.set_ylabel("segments")
    else:
        est = _thinned(s, d, "inflight_bytes", 30000)
        ax.step(_ms(est["ts_ns"], t0), est["inflight_bytes"] / 1024, where="post",
                color="tab:blue", lw=0.8, label="bytes in flight [KiB] (estimated from pcap)")
        ax.set_ylabel("KiB in flight (cwnd unknown without probes)")
    # the direction's intervals and retransmissions only, read from their files (a lossy
    # minute has a hundred thousand marks)
    st = as_table(states, STATE_COLUMNS).read(["state", "source", "start_ns", "end_ns"], dir=d)
    px = max((t_end - t0) / 1e6 / 2000, 1e-9)  # ~ one pixel, in ms
    for state, g in st.groupby("state", sort=False):
        c = STATE_COLORS.get(str(state))
        if c is None:
            continue
        # Thousands of short episodes: join those closer than a pixel, draw one collection.
        a, b, _ = _merge_spans(_ms(g["start_ns"], t0), _ms(g["end_ns"], t0),
                               np.zeros(len(g)), px)
        w = np.maximum(b - a, 5 * px)  # a millisecond's episode of a minute: still seen
        ax.broken_barh(list(zip(a, w, strict=True)), (0, 1), transform=ax.get_xaxis_transform(),
                       color=c, alpha=0.5, lw=0,
                       label=f"{state} ({', '.join(sorted(set(g['source'])))}; {len(g)}x)")
    ev = as_table(events, EVENT_COLUMNS).read(["ts_ns", "source"], dir=d, kind="retransmit")
    if not ev.empty and ev["source"].nunique() > 1:  # the same retransmissions seen twice
        ev = ev[ev["source"] == "estimated"]
    if not ev.empty:
        # one marker per pixel's width (the first), all at one height: a lossy minute has
        # tens of thousands, each drawn over the last (the legend counts them all)
        x = np.asarray(_ms(ev["ts_ns"], t0), np.float64)
        _, first = np.unique(np.floor(x / px).astype(np.int64), return_index=True)
        ax.plot(x[np.sort(first)], np.full(len(first), ax.get_ylim()[1] * 0.97), "v",
                color="tab:red", ms=6, label=f"retransmission ({len(ev)})")
    ax.set_xlabel("time [ms]")
    ax.grid(alpha=0.3)
    if thr is not None and not thr.empty:
        ax2 = ax.twinx()
        ax2.plot(_ms(thr["t_ns"], t0), thr["MBps"], color="tab:green", lw=1, alpha=0.8,
                 label="throughput [MB/s]")
        ax2.set_ylabel("throughput [MB/s]", color="tab:green")
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
    else:
        h2, l2 = [], []
    h1, l1 = ax.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8, framealpha=0.85)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{title} ({d})")
    return fig


# ------------------------------------------------------------------------------ 4. timeline


def timeline(spans: pd.DataFrame, window: tuple[int, int] | None = None,
             title: str = "Cross-layer timeline", max_spans_per_row: int = 4000,
             run: tuple[int, int] | None = None) -> Figure:
    """`run`: the data phase the window is part of; the axis then counts from the earlier of
    its start and the window's, and the title says which part of the run is shown."""
    if spans.empty:
        return empty_figure(title, "no spans: need decoded commands or probe events")
    if window:
        spans = data.spans_in(spans, window)
    w0 = int(window[0]) if window else int(spans["start_ns"].min())
    t1 = int(window[1]) if window else int(spans["end_ns"].max())
    t0 = min(run[0], w0) if run else w0  # the axis's zero: the run's start
    shown = ""
    if run:
        whole = window is None or (window[0] <= run[0] and window[1] >= run[1])
        shown = ("\nthe whole run: " if whole else "\nshown: the first commands, ") + \
            f"{(w0 - t0) / 1e9:.2f}-{(t1 - t0) / 1e9:.2f} s of the run's " \
            f"{(run[1] - t0) / 1e9:.2f} s" + ("" if whole else " (every span is in trace.json)")
    rows = [r[2] for r in data.TIMELINE_ROWS]
    fig, ax = plt.subplots(figsize=(12, 5.5))
    x0 = (w0 - t0) / 1e6
    width_ms = max((t1 - w0) / 1e6, 1e-6)
    min_w = width_ms / 1500  # a span narrower than a pixel is drawn a pixel wide
    for y, row in enumerate(rows):
        s = spans[spans["row"] == row]
        if s.empty:
            ax.text(x0 + width_ms / 2, y, "(no data)", ha="center", va="center", fontsize=7,
                    color="0.6")
            continue
        a, b = _ms(s["start_ns"], t0), _ms(s["end_ns"], t0)
        cmd = s["cmd"].to_numpy(dtype=np.float64)
        if len(s) > max_spans_per_row:
            a, b, cmd = _merge_spans(a, b, cmd, min_w)
        w = np.maximum(b - a, min_w)
        colors = [CMD_CMAP(int(c) % 20) if not np.isnan(c) else (0.45, 0.45, 0.45, 1)
                  for c in cmd]
        # Concurrent spans (queue depth > 1) side by side in sub-lanes of the row.
        lanes = data.assign_lanes(a, a + w) if len(a) <= max_spans_per_row else \
            np.zeros(len(a), np.int64)
        n_l = int(lanes.max()) + 1 if len(lanes) else 1
        h = 0.76 / n_l
        lo = y - 0.38 + lanes * h
        verts = [[(x, b0), (x + ww, b0), (x + ww, b0 + h * 0.9), (x, b0 + h * 0.9)]
                 for x, ww, b0 in zip(a, w, lo, strict=True)]
        ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="k",
                                         linewidths=0.3 if len(verts) < 300 else 0))
    ax.axhline(4.5, color="0.5", lw=0.8, ls=":")
    ax.axhline(5.5, color="0.5", lw=0.8, ls=":")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlim(x0 - width_ms * 0.01, x0 + width_ms * 1.01)
    ax.set_xlabel("time [ms] from the run's start" if run else "time [ms]")
    ax.set_title(f"{title} (colour = SCSI command; grey = not tied to one){shown}")
    ax.grid(axis="x", alpha=0.3)
    return fig


def _merge_spans(a: np.ndarray, b: np.ndarray, cmd: np.ndarray,
                 min_w: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Join spans closer than a pixel so a row of millions draws as a few thousand boxes."""
    o = np.argsort(a, kind="stable")
    a, b, cmd = a[o], b[o], cmd[o]
    reach = np.maximum.accumulate(b)
    new = np.concatenate([[True], a[1:] > reach[:-1] + min_w])
    gid = np.cumsum(new) - 1
    starts = a[new]
    ends = np.zeros(len(starts))
    np.maximum.at(ends, gid, b)
    return starts, ends, cmd[new]


# ------------------------------------------------------------------------------ 5. the rest


def throughput_plot(series: dict[str, pd.DataFrame], title: str = "Throughput") -> Figure:
    have = {k: v for k, v in series.items() if not v.empty}
    if not have:
        return empty_figure(title, "no TCP payload found")
    t0 = min(int(v["t_ns"].min()) for v in have.values())
    fig, ax = plt.subplots(figsize=(10, 4))
    for label, v in have.items():
        # one direction seen at both ends draws twice on one line: the target's dashed, so
        # the initiator's shows through and each legend entry has a line to match
        ax.step(_ms(v["t_ns"], t0), v["MBps"], where="post", label=label,
                ls="--" if label.endswith("at target") else "-")
    ax.set_xlabel("time [ms]")
    ax.set_ylabel("throughput [MB/s]")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def resptime_plot(rt_us: pd.Series, title: str = "SCSI command response time") -> Figure:
    if rt_us.empty:
        return empty_figure(title, "no answered commands (need commands.csv)")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    ms = rt_us.to_numpy() / 1000
    a1.hist(ms, bins=min(60, max(10, len(ms) // 5)), color="tab:blue")
    a1.set_xlabel("response time [ms]")
    a1.set_ylabel("commands")
    a1.set_title("histogram")
    x = np.sort(ms)
    a2.plot(x, np.arange(1, len(x) + 1) / len(x), color="tab:blue")
    for q in (0.5, 0.99):
        v = float(np.quantile(x, q))
        a2.axvline(v, color="0.5", ls=":")
        a2.text(v, q, f" p{int(q * 100)} {v:.3f} ms", fontsize=8, va="bottom")
    a2.set_xlabel("response time [ms]")
    a2.set_ylabel("fraction of commands")
    a2.set_title("cumulative")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    fig.suptitle(f"{title} (n = {len(ms)})")
    return fig


def outstanding_plot(series: pd.DataFrame, title: str = "Commands outstanding") -> Figure:
    if series.empty:
        return empty_figure(title, "no commands (need commands.csv)")
    t0 = int(series["t_ns"].min())
    s = thin(series, "t_ns", "outstanding", 40000)
    ceil = outstanding_ceiling(series)
    fig, ax = plt.subplots(figsize=(10, 3.8))
    ax.step(_ms(s["t_ns"], t0), s["outstanding"], where="post", color="tab:purple", lw=1)
    ax.axhline(ceil["max"], color="tab:red", ls="--", lw=1,
               label=f"max {ceil['max']} ({ceil['time_at_max'] * 100:.0f}% of the time"
                     f"{', flat ceiling: a concurrency limit' if ceil['flat'] else ''})")
    ax.set_xlabel("time [ms]")
    ax.set_ylabel("commands outstanding")
    ax.set_ylim(0, ceil["max"] * 1.25 + 0.5)
    locator = ax.yaxis.get_major_locator()
    if isinstance(locator, MaxNLocator):  # the default, AutoLocator, is one
        locator.set_params(integer=True)
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return fig

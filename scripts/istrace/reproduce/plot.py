"""PNG figures of the reproduced experiments (matplotlib, no display needed).

Each function takes the experiment's tidy table (pandas DataFrame of the CSV, status=ok rows)
and writes one PNG. Measured points are markers joined by lines; models are thin dashed lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from istrace.model import study as model  # noqa: E402

MB = model.MB
UNLIMITED = 100000  # the parallel experiment's "no limit" marker
TGTD_CMD_WINDOW = 128  # tgtd's default MaxQueueCmd: commands it admits per session


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" in df.columns:
        df = df[df["status"].astype(str) == "ok"]
    return df.copy()


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _delay_axis(ax: plt.Axes, delays: list[float]) -> None:
    """Delays 0,1,2,4..64 ms: symlog keeps 0 on the axis and spreads the doublings evenly."""
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xticks(delays)
    ax.set_xticklabels([f"{d:g}" for d in delays])
    ax.set_xlabel("one-way delay (ms)")


def plot_delay_sweep(df: pd.DataFrame, path: Path, title: str) -> Path:
    """Throughput vs delay per command size and queue, with eq. (1) over the iSCSI series.

    The model's LowerLayerThroughput is the socket baseline measured at the same delay and
    queue, as in the study.
    """
    df = _ok(df)
    df["delay_ms"] = df["delay_ms"].astype(float)
    df["mbps"] = df["mbps"].astype(float)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    series = sorted(df["series"].unique(), key=_series_order)
    queues = sorted(df["txqueuelen"].astype(int).unique())
    for si, name in enumerate(series):
        color = colors[si % len(colors)]
        for qi, txq in enumerate(queues):
            part = df[(df["series"] == name) & (df["txqueuelen"].astype(int) == txq)]
            part = part.sort_values("delay_ms")
            if part.empty:
                continue
            style = "-" if qi == len(queues) - 1 else ":"
            ax.plot(part["delay_ms"], part["mbps"], style, marker="o" if qi else "s",
                    color=color, label=f"{name} Tx{txq}")
            if name == "socket":
                continue
            lower = df[(df["series"] == "socket") & (df["txqueuelen"].astype(int) == txq)]
            lower = lower.set_index("delay_ms")["mbps"]
            size = float(part["size"].iloc[0])
            xs, ys = [], []
            for d in part["delay_ms"]:
                if d in lower.index and lower[d] > 0:
                    xs.append(d)
                    ys.append(model.seq_read_throughput(size, d / 1e3, lower[d] * MB) / MB)
            if xs and qi == len(queues) - 1:
                ax.plot(xs, ys, "--", lw=0.9, color=color, alpha=0.7)
                if size == min(float(v) for v in df["size"]):
                    # The same model paying one round trip (2 one-way delays) per command.
                    rt = [model.seq_read_throughput(size, d / 1e3, lower[d] * MB, 2.0) / MB
                          for d in xs]
                    ax.plot(xs, rt, "-.", lw=0.9, color="gray",
                            label=f"eq. (1) with 2 delays, {name}")
    ax.plot([], [], "--", color="gray", lw=0.9, label="eq. (1) model (4 delays), lower = socket")
    ax.set_yscale("log")
    _delay_axis(ax, sorted(df["delay_ms"].unique()))
    ax.set_ylabel("throughput (MB/s)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def _series_order(name: str) -> tuple[int, float]:
    if name == "socket":
        return (1, 0.0)
    try:
        return (0, float(name.rstrip("KMB")) * (1024 if name.endswith(("M", "MB")) else 1))
    except ValueError:
        return (0, 0.0)


def plot_parallel(df: pd.DataFrame, path: Path, title: str, rtt_s: float) -> Path:
    """Transactions/s vs readers per initiator limit, with the limit/RTT ceiling each hits."""
    df = _ok(df)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 2]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    limits = sorted(df["limit"].astype(int).unique())
    for i, lim in enumerate(limits):
        part = df[df["limit"].astype(int) == lim].sort_values("readers")
        readers = part["readers"].astype(int)
        color = colors[i % len(colors)]
        name = f"initiator limit {lim}" if lim < UNLIMITED else "no initiator limit"
        ax.plot(readers, part["tps"].astype(float), "-o", color=color, label=name)
        if lim < UNLIMITED:
            ax.axhline(model.outstanding_ceiling(lim, rtt_s), ls="--", lw=0.8, color=color)
        ax2.plot(readers, part["outstanding"].astype(float), "-o", color=color, label=name)
    n_max = int(df["readers"].astype(int).max())
    if n_max > TGTD_CMD_WINDOW:
        ax.axhline(model.outstanding_ceiling(TGTD_CMD_WINDOW, rtt_s), ls="-.", lw=0.8,
                   color="gray", label=f"target CmdSN window ({TGTD_CMD_WINDOW}) / RTT")
    ax.plot([1, n_max], [1 / rtt_s, n_max / rtt_s], ":", color="gray", lw=0.9,
            label="N / RTT (no limit)")
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_yscale("log", base=2)
        for axis in (a.xaxis, a.yaxis):
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        a.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("aggregate transactions/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax2.set_ylabel("mean outstanding commands")
    ax2.set_xlabel("parallel 512-byte readers")
    ax2.legend(fontsize=7)
    return _save(fig, path)


def plot_sessions(df: pd.DataFrame, search: pd.DataFrame, path: Path, title: str) -> Path:
    """Mean throughput vs sessions per delay with 95% intervals (`df`: one row per count with
    mbps and ci95); the golden-section path numbered, the pick starred."""
    df = _ok(df)
    search = _ok(search)
    delays = sorted(df["delay_ms"].astype(float).unique())
    fig, axes = plt.subplots(1, len(delays), figsize=(4.2 * len(delays), 4.5), squeeze=False)
    for ax, d in zip(axes[0], delays, strict=True):
        part = df[df["delay_ms"].astype(float) == d].sort_values("sessions")
        ci = part["ci95"].astype(float).fillna(0.0) if "ci95" in part else None
        ax.errorbar(part["sessions"].astype(int), part["mbps"].astype(float), yerr=ci,
                    fmt="-o", color="C0", capsize=3, label="grid: mean, 95% interval")
        s = search[search["delay_ms"].astype(float) == d]
        if not s.empty:
            s = s.sort_values("step")
            ax.plot(s["sessions"].astype(int), s["mbps"].astype(float), "x", color="C3",
                    label="golden-section evaluations")
            for _, r in s.iterrows():
                ax.annotate(str(int(r["step"])), (int(r["sessions"]), float(r["mbps"])),
                            textcoords="offset points", xytext=(3, 4), fontsize=7, color="C3")
            best = s.loc[s["mbps"].astype(float).idxmax()]
            ax.plot([int(best["sessions"])], [float(best["mbps"])], "*", ms=14, color="C1",
                    label=f"search pick: {int(best['sessions'])}")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_title(f"one-way delay {d:g} ms", fontsize=9)
        ax.set_xlabel("parallel sessions")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("aggregate throughput (MB/s)")
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_window(df: pd.DataFrame, path: Path, title: str) -> Path:
    """Throughput vs delay per buffer / MSS setting; dashed: the measured window / RTT."""
    df = _ok(df)
    groups = [g for g in ("buffer", "mss", "write-buffer", "write-mss") if g in set(df["vary"])]
    ncol = min(len(groups), 2) or 1
    nrow = -(-len(groups) // ncol) or 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.5 * ncol, 5 * nrow), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, g in zip(axes.flat, groups, strict=False):
        part = df[df["vary"] == g]
        settings = sorted({(int(b), int(m)) for b, m in zip(part["buffer"], part["mss"],
                                                               strict=True)})
        for i, (buf, mss) in enumerate(settings):
            sel = part[(part["buffer"].astype(int) == buf) & (part["mss"].astype(int) == mss)]
            sel = sel.sort_values("delay_ms")
            color = colors[i % len(colors)]
            d = sel["delay_ms"].astype(float)
            win = float(sel["window"].astype(float).median())
            label = (f"buffer {buf // 1024} KiB (window ~{win / 1024:.0f} KiB)"
                     if g.endswith("buffer") else f"MSS {mss} B (window ~{win / 1024:.1f} KiB)")
            ax.plot(d, sel["mbps"].astype(float), "-o", color=color, label=label)
            ax.plot(d, sel["bound_mbps"].astype(float), "--", lw=0.9, color=color)
        ax.plot([], [], "--", color="gray", lw=0.9, label="window / RTT bound")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("one-way delay (ms)")
        ax.set_ylabel("throughput (MB/s)")
        op = "WRITE: the target's" if g.startswith("write-") else "READ: the initiator's"
        ax.set_title(f"{op} TCP receive buffer (MSS 1460)" if g.endswith("buffer")
                     else f"{op} MSS (receive buffer {int(part['buffer'].iloc[0]) // 1024} KiB)",
                     fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


PARAM_TITLES = {
    "pdu-size": "1 MiB READs per data PDU size (MaxRecvDataSegmentLength)",
    "burst-write": "1 MiB WRITEs per MaxBurstLength (an R2T per burst)",
    "burst-read": "1 MiB READs per MaxBurstLength (no R2T)",
    "unsolicited": "64 KiB WRITEs: R2T, ImmediateData, InitialR2T=No",
}


def _size_label(value: str) -> str:
    if not value.isdigit():
        return value
    n = int(value)
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else \
        f"{n >> 10} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


def plot_params(df: pd.DataFrame, path: Path, title: str) -> Path:
    """One panel per key series: MB/s vs delay per key value; dashed, eq. (3) with the
    negotiated keys."""
    df = _ok(df)
    series = [s for s in PARAM_TITLES if s in set(df["series"])]
    cols = min(2, max(len(series), 1))
    rows = -(-max(len(series), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.6 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes.flat, series, strict=False):
        part = df[df["series"] == name]
        for i, value in enumerate(dict.fromkeys(part["value"].astype(str))):
            sel = part[part["value"].astype(str) == value].sort_values("delay_ms")
            color = colors[i % len(colors)]
            d = sel["delay_ms"].astype(float)
            ax.plot(d, sel["mbps"].astype(float), "-o", color=color, label=_size_label(value))
            ax.plot(d, sel["model_mbps"].astype(float), "--", lw=0.9, color=color)
        ax.plot([], [], "--", color="gray", lw=0.9, label="model (eq. 3)")
        delays = sorted(part["delay_ms"].astype(float).unique())
        ax.set_xscale("log")
        ax.set_xticks(delays, [f"{d:g}" for d in delays])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("one-way delay (ms)")
        ax.set_ylabel("throughput (MB/s)")
        ax.set_ylim(bottom=0)
        ax.set_title(PARAM_TITLES[name], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(series):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def _block_axis(ax: plt.Axes, blocks: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(blocks, [_size_label(str(b)) for b in blocks], fontsize=7)
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("block size")


def plot_blocksize(df: pd.DataFrame, path: Path, title: str) -> Path:
    """Latency (1 outstanding), throughput (8 outstanding), and the throughput runs' CPU by
    kind: the machine's user/system/softirq/irq stacked, tgtd and istrace-gen as lines."""
    df = _ok(df)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    lat = df[df["series"] == "latency"].sort_values("block")
    thr = df[df["series"] == "throughput"].sort_values("block")
    jumbo = df[df["series"] == "throughput-jumbo"].sort_values("block")
    blocks = sorted(df["block"].astype(int).unique())
    ax = axes[0]
    ax.plot(lat["block"], lat["lat_mean_us"].astype(float), "-o", label="mean")
    ax.plot(lat["block"], lat["lat_p99_us"].astype(float), "--", lw=0.9, label="p99")
    if "lat_p1_us" in lat:
        # the service time: p1 has little of the wake-up and steal noise the mean carries
        ax.plot(lat["block"], lat["lat_p1_us"].astype(float), ":", lw=0.9, label="p1")
    ax.set_ylabel("READ latency (µs)")
    ax.set_title("one reader, the same block each time", fontsize=9)
    ax = axes[1]
    ax.plot(thr["block"], thr["mbps"].astype(float), "-o", label="8 outstanding")
    if not jumbo.empty:
        ax.plot(jumbo["block"], jumbo["mbps"].astype(float), "-s", label="8 outstanding, MTU 9000")
    for _, r in thr[thr["cpu_bound"].astype(str) != ""].iterrows():
        ax.annotate("CPU-bound", (r["block"], float(r["mbps"])), fontsize=7,
                    textcoords="offset points", xytext=(0, 6), ha="center")
    ax.set_ylabel("throughput (MB/s)")
    ax.set_title("eight commands outstanding", fontsize=9)
    ax = axes[2]
    bottom = pd.Series(0.0, index=thr.index)
    for kind in ("user", "system", "softirq", "irq"):
        vals = thr[kind].astype(float)
        ax.fill_between(thr["block"], bottom, bottom + vals, step=None, alpha=0.5, label=kind)
        bottom = bottom + vals
    ax.plot(thr["block"], thr["tgt_cpu"].astype(float), "-s", color="black", ms=4,
            label="tgtd (target)")
    ax.plot(thr["block"], thr["ini_cpu"].astype(float), "-^", color="gray", ms=4,
            label="istrace-gen (initiator)")
    if not thr.empty:
        ax.axhline(float(thr["cpus"].iloc[0]), color="red", lw=0.8, ls=":", label="all CPUs")
    ax.set_ylabel("CPUs busy (1.0 = one CPU)")
    ax.set_title("CPU of the throughput runs, by kind (one kernel: both ends)", fontsize=9)
    ax = axes[3]
    for part, label in ((thr, "MTU 1500"), (jumbo, "MTU 9000")):
        if not part.empty:
            ax.plot(part["block"], pd.to_numeric(part["cpu_s_per_gb"], errors="coerce"), "-o",
                    label=label)
    ax.set_ylabel("CPU-seconds per GB read (both ends)")
    ax.set_title("CPU cost per byte, 8 outstanding", fontsize=9)
    for ax in axes:
        _block_axis(ax, blocks)
        if ax is axes[3]:
            ax.set_yscale("log")   # the cost falls ~1/size: a log axis shows the jumbo gap
        else:
            ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def plot_kernel(df: pd.DataFrame, path: Path, title: str) -> Path:
    """The stock kernel stack's caps: requests per 2 MiB read against max_sectors_kb, and
    transactions/s and the most SCSI commands outstanding against readers per queue_depth."""
    df = _ok(df)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    split = df[df["kind"] == "split"].sort_values("max_sectors_kb")
    ax = axes[0]
    if not split.empty:
        kb = split["max_sectors_kb"].astype(int)
        ax.bar(range(len(kb)), split["requests_per_read"].astype(float), color="C0")
        ax.set_xticks(range(len(kb)), [f"{k}" for k in kb])
        for i, (n, b) in enumerate(zip(split["requests_per_read"].astype(float),
                                       split["request_bytes"].astype(float), strict=True)):
            ax.annotate(f"{n:g} x {b / 1024:g} KiB", (i, n), fontsize=7, ha="center",
                        textcoords="offset points", xytext=(0, 3))
    ax.set_xlabel("max_sectors_kb")
    ax.set_ylabel("block requests (= SCSI commands) per 2 MiB read()")
    ax.set_title("the block layer's split", fontsize=9)
    rd = df[df["kind"] == "readers"]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # keyed by the two int columns (cmds_max, queue_depth)
    series = [(cast(tuple[int, int], k), g) for k, g in
              rd.groupby([rd["cmds_max"].astype(int), rd["queue_depth"].astype(int)])]
    for i, ((cm, qd), part) in enumerate(sorted(series, key=lambda kv: (-kv[0][0], kv[0][1]))):
        part = part.sort_values("readers")
        readers = part["readers"].astype(int)
        cq = pd.to_numeric(part["can_queue"], errors="coerce").max()
        # the kernel clamps the device's queue_depth to the host's can_queue
        cap = min(qd, int(cq)) if cq == cq else qd
        label = f"queue_depth {qd}" if cap == qd else f"cmds_max {cm}: can_queue {cap}"
        c = colors[(i + 1) % len(colors)]
        axes[1].plot(readers, part["tps"].astype(float), "-o", color=c, label=label)
        axes[2].plot(readers, part["max_outstanding"].astype(float), "-o", color=c, label=label)
        axes[2].axhline(cap, color=c, lw=0.8, ls="--")
    axes[1].set_ylabel("transactions/s (emulated CPU: the shape, not the rate)")
    axes[1].set_title("512-byte readers", fontsize=9)
    axes[2].set_ylabel("most SCSI commands outstanding (dashed: the cap set)")
    axes[2].set_title("the ceiling the report names", fontsize=9)
    axes[1].set_ylim(bottom=0)
    axes[2].set_yscale("log", base=2)     # depths 2..32 and counts 1..16 all legible
    for ax in axes[1:]:
        ax.set_xscale("log", base=2)
        for axis in (ax.xaxis, ax.yaxis) if ax is axes[2] else (ax.xaxis,):
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("parallel readers")
        if not rd.empty:
            ax.legend(fontsize=7)
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)

"""Experiment `window` (seed 002, figs. 10/11): throughput against delay for several TCP
receive-buffer sizes and MSS values, against the one-window-per-round-trip bound; READs, and
WRITEs with the same knobs on the other end.

The data receiver's buffer is fixed per point (net.ipv4.tcp_rmem in its namespace, with
autotuning off so the buffer stays what was set; tgtd's sockets take their buffer from its
listener, so a WRITE point's testbed starts tgtd with the buffer as the target's tcp_rmem) and
its MSS is set with the route metric `advmss`: the initiator's for READs, the target's for
WRITEs (series `write-buffer`, `write-mss`). The window the data sender actually sees is read
from its socket (`ss`: snd_wnd, mss) in the middle of each run, so the bound window/RTT is
measured, not assumed: Linux
advertises only part of a buffer (its share scales with segment overhead, so a small MSS gets
a smaller window from the same buffer). Commands keep two buffers' worth in flight so only the
window can hold them back (a WRITE also waits for its R2T, one round trip, which the bound
does not count). (A route `window` metric would be the direct knob, but this kernel lets
receive-buffer handling lift that clamp, so it bounds nothing.)
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pandas as pd
from istrace.model import study as model
from istrace.reproduce import plot as repro_plot
from istrace.reproduce import run as repro_run
from istrace.reproduce.sweep import Row, measured_rows, none_measured, num

COLUMNS = ["vary", "buffer", "mss", "delay_ms", "mbps", "window", "mss_seen", "bound_mbps",
           "ratio", "rwnd_limited_pct", "rtt_ms", "seconds", "status", "error"]
KEY = ["vary", "buffer", "mss", "delay_ms"]
DEFAULT_MSS = 1460
MSS_BUFFER = 64 << 10  # the MSS series share one buffer size

FIGURE = "repro-window.png"
FIGURE_TITLE = ("READ and WRITE throughput vs delay per receive buffer and MSS "
                "(seed 002 figs. 10/11)")


def plan(quick: bool) -> list[Row]:
    if quick:
        delays = [2, 10, 50]
        buffers = [32 << 10, 256 << 10]
        mss = [536, 1460]
    else:
        delays = [1, 2, 5, 10, 20, 50]
        buffers = [16 << 10, 64 << 10, 256 << 10, 1 << 20]
        mss = [256, 536, 1460]
    pts: list[Row] = []
    for d in delays:
        # READs first: a WRITE point sets the target's side, which READs never look at
        for op in ("", "write-"):
            pts += [{"vary": f"{op}buffer", "buffer": b, "mss": DEFAULT_MSS, "delay_ms": d}
                    for b in buffers]
            if op == "" or not quick:
                pts += [{"vary": f"{op}mss", "buffer": MSS_BUFFER, "mss": m, "delay_ms": d}
                        for m in mss]
    return pts


def is_write(p: Row) -> bool:
    return str(p["vary"]).startswith("write-")


LOOK_SEP = "@@look@@"
LOOK_GAP_S = 0.005  # between looks: a few hundred a second, a small share of one CPU


def sender_views(tb: repro_run.Testbed, seconds: float, write: bool = False,
                 max_looks: int = 2000) -> list[dict[str, float]]:
    """snd_wnd, mss and rwnd-limited share of the data sender's iSCSI connection (`ss -ti`:
    the target's for READs, the initiator's for WRITEs), looked at back to back for `seconds`.

    One shell in the sender's namespace runs the looks: the window moves with the reader
    (at MSS 536 it swings by half as the receive queue is pruned), and the bound is its top,
    so the looks must be dense: spawning `ss` from Python is too slow to catch the top."""
    port = "dport" if write else "sport"
    loop = (f"n=0; while [ $n -lt {max_looks} ]; do "
            f"ss -tni state established '( {port} = :3260 )'; echo {LOOK_SEP}; "
            f"sleep {LOOK_GAP_S}; n=$((n+1)); done")
    run = tb.run_ini if write else tb.run_tgt
    out = run(["timeout", f"{seconds:.3f}", "sh", "-c", loop], capture_output=True).stdout
    views = []
    for look in out.split(LOOK_SEP):
        got: dict[str, float] = {}
        for key, pat in (("window", r"snd_wnd:(\d+)"), ("mss_seen", r"\bmss:(\d+)"),
                         ("rwnd_limited_pct", r"rwnd_limited:\S+?\(([0-9.]+)%\)")):
            m = re.search(pat, look)
            if m:
                got[key] = float(m.group(1))
        if got:
            views.append(got)
    return views


def measure(tb: repro_run.Testbed, p: Row, secs: float, rtt_ms: float) -> Row:
    buf, mss, write = int(p["buffer"]), int(p["mss"]), is_write(p)
    if write:
        # tgtd's accepted sockets take the buffer its listener got at start: the testbed was
        # brought up with this buffer as the target's tcp_rmem (see group/bed in run())
        repro_run.set_route_metrics(tb, advmss=mss, side="target")
    else:
        repro_run.fixed_receive_buffer(tb, buf)
        repro_run.set_route_metrics(tb, advmss=mss)
    size = max(16 << 10, -(-buf // (32 << 10)) * (16 << 10))  # 4 x size = 2 buffers
    argv = [repro_run.gen_binary(), "--portal", tb.portal, "--target", tb.iqn,
            "--size", str(size), "--queue-depth", "4", "--time", f"{secs:g}", "--json",
            "--quiet", *(["--write"] if write else [])]
    proc = tb.popen_ini(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The window once slow start is over, until shortly before the run ends.
        time.sleep(secs * 0.3)
        views = sender_views(tb, secs * 0.6, write)
        stdout, stderr = proc.communicate(timeout=secs + 60)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0:
        raise repro_run.ReproError(f"istrace-gen failed ({proc.returncode}): "
                                   f"{stderr.strip()[-200:]}")
    r = repro_run.parse_gen_json(stdout)
    window = max((v.get("window", 0.0) for v in views), default=0.0)
    if window <= 0:
        raise repro_run.ReproError(f"could not read the {'initiator' if write else 'target'}"
                                   "'s snd_wnd with ss")
    bound = model.window_bound(window, rtt_ms / 1e3) / model.MB
    seen = [v for v in views if "mss_seen" in v]
    return {"mbps": round(r.mbps, 4), "window": int(window),
            "mss_seen": int(seen[-1]["mss_seen"]) if seen else "",
            "rwnd_limited_pct": views[-1].get("rwnd_limited_pct", ""),
            "bound_mbps": round(bound, 4), "ratio": round(r.mbps / bound, 3),
            "rtt_ms": rtt_ms, "seconds": round(r.seconds, 3)}


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    secs = time_s or (2.0 if quick else 3.0)
    meas = repro_run.with_path_rtt(lambda tb, p, rtt: measure(tb, p, secs, rtt))

    failed = repro_run.sweep_grouped(
        out / "window.csv", COLUMNS, KEY, "window", plan(quick),
        group=lambda p: (p["delay_ms"], int(p["buffer"]) if is_write(p) else 0),
        bed=lambda p: {"delay_ms": float(p["delay_ms"]),
                       **({"tgt_rmem": int(p["buffer"])} if is_write(p) else {})},
        tag="rw", measure=meas,
        summary=lambda r: (f"{num(r, 'mbps'):.2f} MB/s, window {num(r, 'window'):.0f} B "
                           f"(bound {num(r, 'bound_mbps'):.2f})"))
    return finish(out, failed=failed)




def load(out: Path) -> pd.DataFrame:
    return measured_rows(out / "window.csv")


def finish(out: Path, failed: int = 0) -> int:
    df = load(out)
    if none_measured("window", df):
        return 1
    repro_plot.plot_window(df, out / FIGURE, FIGURE_TITLE)
    for vary, part in df.groupby("vary"):
        cols = "mss" if str(vary).endswith("mss") else "buffer"
        print(f"window: varying {vary}: MB/s")
        print(part.pivot_table(index="delay_ms", columns=cols, values="mbps").round(3)
              .to_string())
        print(f"window: varying {vary}: advertised window seen by the data sender (bytes)")
        print(part.pivot_table(index="delay_ms", columns=cols, values="window").round(0)
              .to_string())
    print(f"window: measured / (window/RTT) median {df['ratio'].median():.2f}, "
          f"max {df['ratio'].max():.2f}")
    print(f"window: wrote {out / 'window.csv'}, {out / 'repro-window.png'}")
    if failed:
        print(f"window: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0

"""`istrace reproduce EXPERIMENT [--quick] [--out DIR]`: re-run the studies' experiments.

Each experiment sweeps the built-in testbed with the pseudo-initiator, writes one CSV row per
point as soon as it is measured (re-running the same command resumes where it stopped), then
draws its PNG and prints its table. `--plot-only` redraws from the CSV without measuring.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from istrace.reproduce import blocksize as repro_blocksize
from istrace.reproduce import delay as repro_delay
from istrace.reproduce import kernel as repro_kernel
from istrace.reproduce import parallel as repro_parallel
from istrace.reproduce import params as repro_params
from istrace.reproduce import run as repro_run
from istrace.reproduce import scenarios as repro_scenarios
from istrace.reproduce import sessions as repro_sessions
from istrace.reproduce import window as repro_window

# name -> (run(out, quick, time_s) -> rc, finish(out) -> rc, what it reproduces)
EXPERIMENTS: dict[str, tuple[Callable[..., int], Callable[[Path], int], str]] = {
    "delay-sweep": (repro_delay.run, repro_delay.finish,
                    "seed 000 fig. 6: throughput vs delay, 32K..4M commands, socket, 2 queues"),
    "parallel": (repro_parallel.run, repro_parallel.finish,
                 "seed 001: 512-byte readers at 16 ms, transactions/s vs readers per limit"),
    "sessions": (repro_sessions.run, repro_sessions.finish,
                 "seed 004: throughput vs parallel sessions at 10-100 ms, golden-section search"),
    "window": (repro_window.run, repro_window.finish,
               "seed 002: throughput vs delay per TCP window / MSS, window/RTT bound"),
    "params": (repro_params.run, repro_params.finish,
               "seed 002 fig. 9: iSCSI keys (PDU size, MaxBurstLength, R2T, ImmediateData) "
               "vs delay, with eq. 3"),
    "blocksize": (repro_blocksize.run, repro_blocksize.finish,
                  "seed 003 figs. 1-2: READ latency and throughput vs block size, CPU by kind"),
    "kernel": (repro_kernel.run, repro_kernel.finish,
               "seed 001 on the stock kernel (VM: open-iscsi + LIO): block split and "
               "queue_depth ceiling, named by istrace report"),
    "scenarios": (repro_scenarios.run, repro_scenarios.finish,
                  "the verdict's scenario suite: captures with a cause fixed in advance"),
}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="istrace reproduce", description=__doc__.split("\n")[0],
        epilog="experiments:\n" + "\n".join(f"  {k:<12} {v[2]}" for k, v in EXPERIMENTS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=[*EXPERIMENTS, "all"])
    ap.add_argument("--quick", action="store_true",
                    help="fewer, shorter points (< 3 min per experiment; what CI runs)")
    ap.add_argument("--out", type=Path, default=None,
                    help="output directory (default ./repro-out/EXPERIMENT[-quick])")
    ap.add_argument("--time", type=float, default=None, metavar="S",
                    help="seconds per measured point (default: 2 quick, 3 full)")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw figure and table from an existing CSV, measure nothing")
    ap.add_argument("--only", default=None, metavar="NAME,...",
                    help="scenarios: run only these scenarios")
    ap.add_argument("--table", type=Path, default=None, metavar="FILE",
                    help="scenarios: also write the markdown table here "
                         "(e.g. docs/verdict-scenarios.md)")
    ap.add_argument("--cc", default="reno",
                    help="TCP congestion control in the testbed namespaces (default reno, the "
                    "studies' loss-based TCP; must be in tcp_allowed_congestion_control)")
    return ap


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_cleanly() -> list[Any]:
    """SIGTERM (and SIGINT even when started in the background, where the shell ignores it)
    end the run like Ctrl-C: the testbed comes down and the CSV keeps every finished point.
    Returns the previous handlers."""
    return [signal.signal(signal.SIGTERM, _interrupt), signal.signal(signal.SIGINT, _interrupt)]


def main(argv: list[str]) -> int:
    a = _parser().parse_args(argv)
    if a.plot_only:
        return _run(a)
    previous = _stop_cleanly()
    try:
        return _run(a)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def _run(a: argparse.Namespace) -> int:
    if a.time is not None and not 0.5 <= a.time <= 600:
        print("istrace reproduce: --time must be within 0.5..600 s", file=sys.stderr)
        return 2
    names = list(EXPERIMENTS) if a.experiment == "all" else [a.experiment]
    if not a.plot_only and os.geteuid() != 0:
        print("istrace reproduce: must run as root (it builds network namespaces)",
              file=sys.stderr)
        return 2
    if not a.plot_only:
        if not all(c.isalnum() or c == "_" for c in a.cc):
            print(f"istrace reproduce: bad --cc {a.cc!r}", file=sys.stderr)
            return 2
        repro_run.CONGESTION_CONTROL[0] = a.cc
    rc = 0
    for name in names:
        run, finish, _ = EXPERIMENTS[name]
        suffix = "-quick" if a.quick else ""
        out = a.out if a.out is not None and len(names) == 1 else \
            (a.out or Path("repro-out")) / f"{name}{suffix}"
        out.mkdir(parents=True, exist_ok=True)
        print(f"reproduce {name}: output in {out}", file=sys.stderr, flush=True)
        try:
            if a.plot_only:
                rc |= finish(out)
            elif name == "scenarios":
                only = [x.strip() for x in a.only.split(",") if x.strip()] if a.only else None
                rc |= repro_scenarios.run(out, a.quick, a.time, only=only, table_path=a.table)
            else:
                rc |= run(out, a.quick, a.time)
        except FileNotFoundError as exc:
            print(f"istrace reproduce {name}: {exc}", file=sys.stderr)
            rc |= 1
        except ValueError as exc:
            print(f"istrace reproduce {name}: {exc}", file=sys.stderr)
            rc |= 1
        except KeyboardInterrupt:
            print(f"istrace reproduce {name}: interrupted; measured points are in {out} and "
                  "the same command resumes", file=sys.stderr)
            return 130
    return rc

#!/usr/bin/env python3
"""Probe cost per layer: one testbed, reads alternating between no probes and the probes of
both ends restricted to one configuration (`--layers ...` or any istrace-probe options),
several passes.  Reports per configuration the throughput and the machine's CPU time per
MB read (busy jiffies of all CPUs from /proc/stat): on a box that is not saturated the
CPU per MB shows a probe's cost when the throughput alone does not.  No bpf_stats.

usage: python3 bpf/bench/layers.py [PASSES] [SECONDS] [CONFIG ...]
       CONFIG: a comma list of layers (tcp,net,block,syscall,scsi,iscsi), "all", or
       "opts:<istrace-probe options>", e.g. "opts:--disable tgt_tx"; a prefix
       "old:" runs the istrace-probe binary named by $ISTRACE_BENCH_OLD_PROBE instead
       (A/B of two builds in one run).
       default configs: tcp syscall scsi,iscsi net,block all.
Run under `flock /tmp/istrace-bench.lock` on a shared machine.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for sub in ("scripts", "bpf", "decoder"):
    sys.path.insert(0, str(ROOT / sub))

from istrace.probe import loader as probe_cli  # noqa: E402
from istrace.probe.loader import Probe  # noqa: E402
from istrace.system.paths import binary  # noqa: E402
from istrace.testbed import state as testbed_state  # noqa: E402
from istrace.testbed.namespaces import Testbed, TestbedConfig  # noqa: E402


def busy() -> tuple[int, int]:
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(v) - v[3] - v[4], sum(v)


def probe_args(config: str) -> list[str]:
    if config.startswith("old:"):
        return probe_args(config[4:])
    if config.startswith("opts:"):
        return config[5:].split()
    return [] if config == "all" else ["--layers", config]


def old_binary(_name: str) -> Path:
    return Path(os.environ["ISTRACE_BENCH_OLD_PROBE"])


def main(argv: list[str]) -> int:
    passes = int(argv[0]) if argv else 3
    secs = float(argv[1]) if len(argv) > 1 else 2.0
    configs = argv[2:] or ["tcp", "syscall", "scsi,iscsi", "net,block", "all"]
    gen = binary("istrace-gen")
    out = Path(tempfile.mkdtemp(prefix="istrace-layers-"))
    ncpu = os.cpu_count() or 1
    res: dict[str, list[tuple[float, float, int, int]]] = {c: [] for c in ["none", *configs]}
    with Testbed(TestbedConfig(name=os.environ.get("ISTRACE_BENCH_NAME", "olayr"),
                               lun_mb=256)) as tb:
        state = testbed_state.load(tb.cfg.name) or tb.state
        tgtd = next(p["pid"] for p in state["pids"] if p["what"] == "tgtd")

        def read() -> tuple[float, float]:
            b0 = busy()
            r = tb.run_ini([str(gen), "--portal", tb.portal, "--target", tb.iqn, "--size", "1M",
                            "--time", str(secs), "--queue-depth", "4", "--json", "--quiet"],
                           capture_output=True, timeout=secs + 60)
            b1 = busy()
            if r.returncode != 0:
                sys.exit(f"layers: istrace-gen failed: {r.stderr.strip()[-300:]}")
            mb_s = float(json.loads(r.stdout.strip().splitlines()[-1])["mb_s"])
            cpu = ncpu * (b1[0] - b0[0]) / max(1, b1[1] - b0[1])  # CPUs busy on average
            return mb_s, 1000.0 * cpu / max(mb_s, 1e-9)  # CPU-ms per MB

        read()
        for p in range(passes):
            order = configs if p % 2 == 0 else configs[::-1]
            for c in order:
                mb, cpm = read()
                res["none"].append((mb, cpm, 0, 0))
                pi = Probe(out / "i.jsonl", ["--host", "initiator", "--netns", tb.ini_ns,
                                             "--usdt", str(gen), *probe_args(c)])
                pt = Probe(out / "t.jsonl", ["--host", "target", "--netns", tb.tgt_ns,
                                             "--tgtd", str(tgtd), "--block-dev", tb.lun_path,
                                             *probe_args(c)])
                if c.startswith("old:"):
                    probe_cli.binary = old_binary  # type: ignore[assignment]
                with pi, pt:
                    probe_cli.binary = binary
                    time.sleep(0.2)
                    mb2, cpm2 = read()
                n_ev = n_lost = 0
                for f in (pi.out, pt.out):
                    end = json.loads(f.read_text().splitlines()[-1])
                    n_ev += end["events"]
                    n_lost += end["lost"]
                res[c].append((mb2, cpm2, n_ev, n_lost))
                print(f"pass {p + 1} {c:12}: off {mb:6.1f} MB/s {cpm:5.2f} CPU-ms/MB | on "
                      f"{mb2:6.1f} MB/s {cpm2:5.2f} CPU-ms/MB, {n_ev / secs:.0f} ev/s, "
                      f"{n_lost} lost", flush=True)
    base = res["none"]
    b_mb = statistics.median(r[0] for r in base)
    b_cpm = statistics.median(r[1] for r in base)
    print(f"{'probes':14} {'MB/s':>7} {'loss':>7} {'CPU-ms/MB':>10} {'extra CPU':>9} {'ev/s':>7}")
    print(f"{'none':14} {b_mb:7.1f} {'':>7} {b_cpm:10.2f}")
    for c in configs:
        mb = statistics.median(r[0] for r in res[c])
        cpm = statistics.median(r[1] for r in res[c])
        ev = statistics.median(r[2] for r in res[c]) / secs
        print(f"{c:14} {mb:7.1f} {100 * (b_mb - mb) / b_mb:+6.1f}% {cpm:10.2f} "
              f"{100 * (cpm - b_cpm) / b_cpm:+8.1f}% {ev:7.0f}"
              f"{'  LOST ' + str(sum(r[3] for r in res[c])) if any(r[3] for r in res[c]) else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

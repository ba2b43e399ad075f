#!/usr/bin/env python3
"""Where the probes' CPU goes: one read on the namespace testbed with the probes of both
ends attached, per BPF program (hits/s, ns per hit, share of one CPU), per event kind
(events/s), and the loaders' own CPU.  Diagnosis only: kernel.bpf_stats_enabled is on
during the read (it costs two clock reads per program run), so the throughput printed
here is not the overhead figure — bpf/bench/overhead.sh is.

usage: python3 bpf/bench/profile.py [SECONDS] [SIZE] [DEPTH] [-- extra istrace-probe args]
Run under `flock /tmp/istrace-bench.lock` on a shared machine.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for sub in ("scripts", "bpf", "decoder"):
    sys.path.insert(0, str(ROOT / sub))

from istrace.probe.loader import Probe  # noqa: E402
from istrace.system.paths import binary  # noqa: E402
from istrace.testbed import state as testbed_state  # noqa: E402
from istrace.testbed.namespaces import Testbed, TestbedConfig  # noqa: E402


def prog_stats() -> dict[int, tuple[str, int, int]]:
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=False).stdout
    return {p["id"]: (str(p.get("name", "")), int(p.get("run_cnt", 0)),
                      int(p.get("run_time_ns", 0))) for p in json.loads(out or "[]")}


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat"""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def threads(pid: int) -> dict[str, int]:
    """CPU ticks per thread (by name) of a process"""
    out: dict[str, int] = collections.Counter()
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            st = (t / "stat").read_text()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st.rsplit(")", 1)[1].split()
        out[f"{name}/{t.name}"] += int(f[11]) + int(f[12])
    return out


def event_counts(path: Path) -> collections.Counter[str]:
    c: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("layer") != "meta":
            c[f"{ev.get('layer')}/{ev.get('event')}"] += 1
    return c


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    secs = float(argv[0]) if argv else 3.0
    size = argv[1] if len(argv) > 1 else "1M"
    depth = argv[2] if len(argv) > 2 else "4"
    gen = binary("istrace-gen")
    out = Path(tempfile.mkdtemp(prefix="istrace-profile-"))
    hz = os.sysconf("SC_CLK_TCK")
    tgtd = 0

    def read(tb: Testbed, label: str = "") -> float:
        m0, t0, c0 = machine_busy(), threads(tgtd), resource.getrusage(resource.RUSAGE_CHILDREN)
        w0 = time.monotonic()
        r = tb.run_ini([str(gen), "--portal", tb.portal, "--target", tb.iqn, "--size", size,
                        "--time", str(secs), "--queue-depth", depth, "--json", "--quiet"],
                       capture_output=True, timeout=secs + 60)
        if r.returncode != 0:
            sys.exit(f"profile: istrace-gen failed: {r.stderr.strip()[-300:]}")
        wall = time.monotonic() - w0
        m1, t1, c1 = machine_busy(), threads(tgtd), resource.getrusage(resource.RUSAGE_CHILDREN)
        if label:
            gen_cpu = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) / wall
            busy = [f"{k} {100 * (v - t0.get(k, 0)) / hz / wall:.0f}%" for k, v in t1.items()
                    if v - t0.get(k, 0) > 0.02 * hz * wall]
            print(f"{label}: {json.loads(r.stdout.strip().splitlines()[-1])['mb_s']:.1f} MB/s; "
                  f"machine busy {100 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1]):.0f}% of "
                  f"{os.cpu_count()} CPUs; istrace-gen {100 * gen_cpu:.0f}% of one CPU; "
                  f"tgtd threads: {', '.join(busy)}")
        return float(json.loads(r.stdout.strip().splitlines()[-1])["mb_s"])

    with Testbed(TestbedConfig(name=os.environ.get("ISTRACE_BENCH_NAME", "oprof"),
                               lun_mb=256)) as tb:
        state = testbed_state.load(tb.cfg.name) or tb.state
        tgtd = next(p["pid"] for p in state["pids"] if p["what"] == "tgtd")
        read(tb)
        read(tb, "without probes")
        pi = Probe(out / "ini.jsonl", ["--host", "initiator", "--netns", tb.ini_ns,
                                       "--usdt", str(gen), *extra])
        pt = Probe(out / "tgt.jsonl", ["--host", "target", "--netns", tb.tgt_ns,
                                       "--tgtd", str(tgtd), "--block-dev", tb.lun_path, *extra])
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=False)
        try:
            with pi, pt:
                assert pi.proc and pt.proc
                before, c0 = prog_stats(), (cpu_ticks(pi.proc.pid), cpu_ticks(pt.proc.pid))
                t0 = time.monotonic()
                mb = read(tb, "with probes")
                wall = time.monotonic() - t0
                after, c1 = prog_stats(), (cpu_ticks(pi.proc.pid), cpu_ticks(pt.proc.pid))
        finally:
            subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=0"], check=False)
    print(f"read {mb:.1f} MB/s over {wall:.2f} s (bpf_stats on)")
    rows = []
    for pid, (name, cnt, ns) in after.items():
        b = before.get(pid, (name, 0, 0))
        dc, dn = cnt - b[1], ns - b[2]
        if dc:
            rows.append((dn, dc, name, pid))
    total = 0
    print(f"{'program':24} {'id':>6} {'hits/s':>10} {'ns/hit':>8} {'CPU %':>7}")
    for dn, dc, name, pid in sorted(rows, reverse=True):
        total += dn
        print(f"{name:24} {pid:6} {dc / wall:10.0f} {dn / dc:8.0f} {100 * dn / 1e9 / wall:7.2f}")
    print(f"all programs: {100 * total / 1e9 / wall:.2f}% of one CPU")
    for what, a, b in (("initiator", c0[0], c1[0]), ("target", c0[1], c1[1])):
        print(f"loader {what}: {100 * (b - a) / hz / wall:.2f}% of one CPU")
    for what, f in (("initiator", pi.out), ("target", pt.out)):
        counts = event_counts(f)
        print(f"events {what}: {sum(counts.values()) / wall:.0f}/s: " +
              ", ".join(f"{k} {v / wall:.0f}" for k, v in counts.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

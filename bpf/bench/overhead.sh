#!/usr/bin/env bash
# Probe overhead: istrace-gen read throughput on the namespace testbed with and without
# every probe attached on both ends (all layers, tgtd uprobes, istrace-gen USDT), in one
# run.  Rounds alternate (off, on, off, on, ...) so load from other work on the machine
# hits both sides alike (odd rounds run the probed read first); the medians are compared.
# On a machine shared with other work throughput is noisy, so it also reports the CPU the
# loaders used (utime+stime), the probes' lost events (must be 0) and how many events each
# round produced, the data path's CPU per MB (tgtd and istrace-gen, softirq work
# included: less sensitive to other jobs than MB/s), and after the timed rounds one more probed read with
# kernel.bpf_stats_enabled gives the CPU of the BPF programs themselves (stats cost two
# clock reads per program run, so they are off during the timed rounds).
#
# usage: bpf/bench/overhead.sh [ROUNDS] [SECONDS] [SIZE] [DEPTH]
#        defaults: 5 rounds of 3 s, 1M reads, queue depth 4.  Needs root and a build.
# Env: ISTRACE_BENCH_NAME (testbed name, default obnch), ISTRACE_BENCH_OUT (keep files),
#      ISTRACE_BENCH_PROBE_ARGS (extra istrace-probe options for both ends, e.g.
#      "--layers tcp" to cost one layer alone), ISTRACE_BENCH_CONTROL=1 (A/A run: no probes
#      in the "with" rounds, to see the noise of the machine), ISTRACE_BENCH_OFFLOADS=1
#      (testbed with TSO/GSO/GRO on, as a real NIC has them: per-packet hooks then fire
#      per GRO/GSO super-packet instead of per wire segment), ISTRACE_BENCH_BYSTANDER=1 (the
#      timed workload is an iperf3 flow between two namespaces of its own, beside the traced
#      testbed: what the probes cost sockets that are not iSCSI's), ISTRACE_BENCH_TWO_PROBES=1
#      (one loader per end, each running every program for both ends' calls, instead of
#      one loader for both ends with --peer-*, as `istrace capture` runs them).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
ROUNDS=${1:-5} SECONDS_PER=${2:-3} SIZE=${3:-1M} DEPTH=${4:-4}
export ROUNDS SECONDS_PER SIZE DEPTH
export PYTHONPATH="$ROOT/scripts:$ROOT/bpf:$ROOT/decoder:$ROOT/viz${PYTHONPATH:+:$PYTHONPATH}"
exec python3 - <<'PY'
import atexit, contextlib, json, os, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path

from istrace.probe.loader import Probe
from istrace.testbed import state as testbed_state
from istrace.system.paths import binary
from istrace.testbed.namespaces import Testbed, TestbedConfig

rounds, secs = int(os.environ["ROUNDS"]), float(os.environ["SECONDS_PER"])
size, depth = os.environ["SIZE"], int(os.environ["DEPTH"])
name = os.environ.get("ISTRACE_BENCH_NAME", "obnch")
keep = os.environ.get("ISTRACE_BENCH_OUT")
out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="istrace-overhead-"))
out.mkdir(parents=True, exist_ok=True)
gen = binary("istrace-gen")
extra = os.environ.get("ISTRACE_BENCH_PROBE_ARGS", "").split()
control = os.environ.get("ISTRACE_BENCH_CONTROL") == "1"  # A/A: no probes in "on" rounds
two_probes = os.environ.get("ISTRACE_BENCH_TWO_PROBES") == "1"  # one loader per end


cpu_per_mb: dict[str, list[float]] = {"off": [], "on": []}


def workload_cpu() -> float:
    """CPU seconds of tgtd (all threads) and of the waited-for istrace-gen runs so far.
    Tick accounting charges softirq work (both ends' TCP on veth) to the task it
    interrupts, so this is the data path's CPU, BPF programs and uprobe traps included,
    and none of the other jobs on the machine."""
    f = Path(f"/proc/{tgtd}/stat").read_text().rsplit(")", 1)[1].split()
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK") + ch.ru_utime + ch.ru_stime


bystander = os.environ.get("ISTRACE_BENCH_BYSTANDER") == "1"
BYS = ("obys-s", "obys-c", "10.79.9.1", "10.79.9.2")  # server ns, client ns, their addresses


def bystander_up() -> subprocess.Popen:
    """Two namespaces joined by a veth pair, an iperf3 server in the first."""
    s_ns, c_ns, s_ip, c_ip = BYS
    bystander_down()
    for cmd in (["ip", "netns", "add", s_ns], ["ip", "netns", "add", c_ns],
                ["ip", "link", "add", "obys0", "netns", s_ns, "type", "veth", "peer", "name",
                 "obys1", "netns", c_ns],
                ["ip", "-n", s_ns, "addr", "add", f"{s_ip}/24", "dev", "obys0"],
                ["ip", "-n", c_ns, "addr", "add", f"{c_ip}/24", "dev", "obys1"],
                ["ip", "-n", s_ns, "link", "set", "obys0", "up"],
                ["ip", "-n", c_ns, "link", "set", "obys1", "up"],
                ["ip", "-n", s_ns, "link", "set", "lo", "up"],
                ["ip", "-n", c_ns, "link", "set", "lo", "up"]):
        subprocess.run(cmd, check=True)
    srv = subprocess.Popen(["ip", "netns", "exec", s_ns, "iperf3", "-s", "-p", "5301"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return srv


def bystander_down() -> None:
    for ns in BYS[:2]:
        subprocess.run(["ip", "netns", "del", ns], check=False, stderr=subprocess.DEVNULL)


def iperf(side: str) -> float:
    """One iperf3 run beside the testbed, MB/s; its CPU per MB from the client's rusage."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(["ip", "netns", "exec", BYS[1], "iperf3", "-c", BYS[2], "-p", "5301",
                        "-t", str(secs), "-J"], capture_output=True, text=True,
                       timeout=secs + 30, check=False)
    if r.returncode != 0:
        sys.exit(f"overhead: iperf3 failed ({r.returncode}): {r.stdout[-300:]}{r.stderr[-300:]}")
    bps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]
    if side:
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        mb = bps / 8e6 * secs
        cpu_per_mb[side].append(1000.0 * (c1.ru_utime + c1.ru_stime - c0.ru_utime
                                          - c0.ru_stime) / max(mb, 1e-9))
    return bps / 8e6


def read(tb: Testbed, side: str = "") -> float:
    if bystander:
        return iperf(side)
    c0 = workload_cpu()
    r = tb.run_ini([str(gen), "--portal", tb.portal, "--target", tb.iqn, "--size", size,
                    "--time", str(secs), "--queue-depth", str(depth), "--json", "--quiet"],
                   capture_output=True, timeout=secs + 60)
    if r.returncode != 0:
        sys.exit(f"overhead: istrace-gen failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    if side:
        mb = float(res["bytes"]) / 1e6
        cpu_per_mb[side].append(1000.0 * (workload_cpu() - c0) / max(mb, 1e-9))
    return float(res["mb_s"])


PROGS = ("tcp_probe", "tcp_sockops", "cong_state", "retransmit", "sock_state", "rcv_space", "kfree_skb",
         "qdisc_enqueue", "bio_", "rq_", "sys_", "usdt_", "tgt_", "lib_")


def bpf_runs() -> dict[int, tuple[str, int, int]]:
    """Per loaded istrace program: (name, run count, run time ns)."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True,
                         check=False).stdout
    return {p["id"]: (str(p.get("name")), int(p.get("run_cnt", 0)),
                      int(p.get("run_time_ns", 0)))
            for p in json.loads(out or "[]") if str(p.get("name", "")).startswith(PROGS)}


def cpu_s(probes: tuple[Probe, ...]) -> float:
    """user+system CPU seconds the loaders used so far"""
    total = 0
    for p in probes:
        if p.proc is not None and p.proc.poll() is None:
            f = Path(f"/proc/{p.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(f[11]) + int(f[12])
    return total / os.sysconf("SC_CLK_TCK")


def probes(tb: Testbed, tag: str) -> tuple[list[Probe], list[Path]]:
    """The loaders as a capture runs them (one for both ends of the testbed, or one per end
    with ISTRACE_BENCH_TWO_PROBES=1), and the two event streams."""
    ini, tgt = out / f"ini-{tag}.jsonl", out / f"tgt-{tag}.jsonl"
    ini_args = ["--host", "initiator", "--netns", tb.ini_ns, "--usdt", str(gen)]
    tgt_args = ["--tgtd", str(tgtd), "--block-dev", tb.lun_path]
    if two_probes:
        ps = [Probe(ini, [*ini_args, *extra]),
              Probe(tgt, ["--host", "target", "--netns", tb.tgt_ns, *tgt_args, *extra])]
    else:
        ps = [Probe(ini, [*ini_args, "--peer-host", "target", "--peer-netns", tb.tgt_ns,
                          "--peer-out", str(tgt), *tgt_args, *extra])]
    if control:
        for p in ps:
            p.start = lambda: None  # type: ignore[method-assign]
            p.stop = lambda: 0  # type: ignore[method-assign]
        for f in (ini, tgt):
            f.write_text('{"event":"end","events":0,"lost":0}\n')
    return ps, [ini, tgt]


def all_started(ps: list[Probe]) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for p in ps:
        stack.enter_context(p)
    return stack


results: dict[str, list[float]] = {"off": [], "on": []}
events, lost, loader_cpu = [], [], []
bpf_cpu = 0.0
offloads = os.environ.get("ISTRACE_BENCH_OFFLOADS") == "1"
print(f"testbed offloads (TSO/GSO/GRO): {'on' if offloads else 'off (wire-sized segments)'}",
      flush=True)
if bystander:
    print("workload: an iperf3 flow on port 5301 between two other namespaces (probes on the "
          "testbed's ends, as in a capture)", flush=True)
    iperf_server = bystander_up()
    atexit.register(bystander_down)     # also when a run fails: no namespaces left behind
    atexit.register(iperf_server.kill)
with Testbed(TestbedConfig(name=name, lun_mb=256, offloads=offloads)) as tb:
    state = testbed_state.load(name) or tb.state
    tgtd = next(p["pid"] for p in state["pids"] if p["what"] == "tgtd")
    read(tb)  # warm-up: login path, page cache of the LUN
    for i in range(rounds):
        if i % 2 == 0:
            results["off"].append(read(tb, "off"))
        ps, files = probes(tb, str(i))
        with all_started(ps):
            c0, t0 = cpu_s(tuple(ps)), time.monotonic()
            results["on"].append(read(tb, "on"))
            wall = time.monotonic() - t0
            loader_cpu.append((cpu_s(tuple(ps)) - c0) / wall)
        if i % 2 == 1:
            results["off"].append(read(tb, "off"))
        n_ev = n_lost = 0
        for f in files:
            end = json.loads(f.read_text().splitlines()[-1])
            n_ev += end["events"]
            n_lost = max(n_lost, end["lost"]) if not two_probes else n_lost + end["lost"]
        events.append(n_ev)
        lost.append(n_lost)
        print(f"round {i + 1}/{rounds}: off {results['off'][-1]:.1f} MB/s, "
              f"on {results['on'][-1]:.1f} MB/s, {n_ev} events, {n_lost} lost, "
              f"loaders {100 * loader_cpu[-1]:.1f}% of one CPU", flush=True)
        if not keep:
            for f in files:
                f.unlink(missing_ok=True)
    if not control:  # one more probed read, untimed, for the programs' own run time
        subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=False)
        try:
            ps, _ = probes(tb, "stats")
            with all_started(ps):
                before, t0 = bpf_runs(), time.monotonic()
                read(tb)
                wall = time.monotonic() - t0
                after = bpf_runs()
            per: dict[str, list[float]] = {}
            for k, (name, cnt, ns) in after.items():
                b = before.get(k, (name, 0, 0))
                x = per.setdefault(name, [0.0, 0.0])
                x[0] += (cnt - b[1]) / wall
                x[1] += (ns - b[2]) / 1e9 / wall
            bpf_cpu = sum(x[1] for x in per.values())
            top = sorted(per.items(), key=lambda kv: -kv[1][1])[:8]
            print("BPF programs, % of one CPU (runs/s): " + ", ".join(
                f"{n} {100 * c:.2f}% ({r:.0f}/s)" for n, (r, c) in top), flush=True)
        finally:
            subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=0"], check=False)
off, on = statistics.median(results["off"]), statistics.median(results["on"])
cpu = bpf_cpu
lcpu = statistics.median(loader_cpu)
# paired: each round's with/without ratio (the two reads ran back to back)
ratios = [b / a for a, b in zip(results["off"], results["on"], strict=True)]
r_mean = statistics.fmean(ratios)
r_se = statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
loss = 100.0 * (off - on) / off
rate = statistics.median(events) / secs
cpu_ratios = [b / a for a, b in zip(cpu_per_mb["off"], cpu_per_mb["on"], strict=True)]
c_mean = statistics.fmean(cpu_ratios)
c_se = statistics.stdev(cpu_ratios) / len(cpu_ratios) ** 0.5 if len(cpu_ratios) > 1 else 0.0
print(f"paired rounds: with/without = {r_mean:.3f} +- {r_se:.3f} (mean +- s.e.), i.e. "
      f"overhead {100 * (1 - r_mean):+.1f}% +- {100 * r_se:.1f}%")
print(f"data path CPU (tgtd + istrace-gen, softirq included) per MB: "
      f"{statistics.median(cpu_per_mb['off']):.2f} -> "
      f"{statistics.median(cpu_per_mb['on']):.2f} ms, "
      f"paired {100 * (c_mean - 1):+.1f}% +- {100 * c_se:.1f}%")
print(f"median without probes {off:.1f} MB/s, with all probes {on:.1f} MB/s: "
      f"overhead {loss:+.1f}% of throughput; BPF programs {100 * cpu:.2f}% of one CPU "
      f"(separate read with bpf_stats); loaders {100 * lcpu:.2f}% of one CPU; "
      f"{rate:.0f} events/s; lost events {sum(lost)}")
print(json.dumps({"rounds": rounds, "seconds": secs, "size": size, "depth": depth,
                  "mb_s_off": results["off"], "mb_s_on": results["on"],
                  "median_off": off, "median_on": on, "overhead_pct": round(loss, 2),
                  "events_per_round": events, "lost": sum(lost),
                  "bpf_cpu_share": round(cpu, 5),
                  "loader_cpu_share": [round(c, 5) for c in loader_cpu],
                  "paired_ratio_mean": round(r_mean, 4), "paired_ratio_se": round(r_se, 4),
                  "cpu_ms_per_mb_off": [round(c, 4) for c in cpu_per_mb["off"]],
                  "cpu_ms_per_mb_on": [round(c, 4) for c in cpu_per_mb["on"]],
                  "cpu_ratio_mean": round(c_mean, 4), "cpu_ratio_se": round(c_se, 4)}))
sys.exit(0 if sum(lost) == 0 else 1)
PY

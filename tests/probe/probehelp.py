"""Shared pieces of the probe tests: one traced read run on the namespace testbed."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from istrace.capture.conn import conn_key, parse_endpoint
from istrace.probe.loader import Probe
from istrace.system.paths import REPO_ROOT, binary
from istrace.testbed import state as testbed_state
from istrace.testbed.namespaces import Testbed

PROBE = REPO_ROOT / "bpf" / "istrace-probe"
DROP_OBJ = REPO_ROOT / "kernel" / "istrace_drop.bpf.o"


@dataclass
class Run:
    dir: Path
    gen_rc: int
    gen_out: str
    ss_text: str
    tcpdump_drops: dict[str, int] = field(default_factory=dict)
    probe_err: dict[str, str] = field(default_factory=dict)
    xdp_dropped: int = -1


def tgtd_pid(tb: Testbed) -> int:
    state = testbed_state.load(tb.cfg.name) or tb.state
    return int(next(p["pid"] for p in state["pids"] if p["what"] == "tgtd"))


def evict_lun(path: str) -> None:
    """Write back and drop the LUN's pages so tgtd's reads reach the block layer."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _start_tcpdump(tb: Testbed, host: str, out: Path) -> subprocess.Popen[bytes]:
    dev, popen = (tb.ini_dev, tb.popen_ini) if host == "initiator" else (tb.tgt_dev, tb.popen_tgt)
    err = open(out / f"tcpdump-{host}.err", "wb")  # noqa: SIM115 - closed by the process end
    # --immediate-mode, as istrace capture runs it: without it the packets still in the
    # kernel ring at the stop are counted but never written (CI: the target's last 7 536 of
    # 382 797, the last 8 READs missing from its pcap)
    p = popen(["tcpdump", "-B", "524288", "-s", "0", "-U", "--immediate-mode", "-i", dev, "-w",
               str(out / f"{host}.pcap"), "tcp port 3260"], stderr=err, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if b"listening on" in (out / f"tcpdump-{host}.err").read_bytes():
            return p
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"tcpdump on {dev} did not start: "
                       f"{(out / f'tcpdump-{host}.err').read_text(errors='replace')}")


def _stop_tcpdump(p: subprocess.Popen[bytes], errfile: Path) -> int:
    """Packets the pcap misses: dropped by the kernel, or matched but not written."""
    p.terminate()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    text = errfile.read_text(errors="replace")
    m = re.search(r"(\d+) packets dropped by kernel", text)
    got = re.search(r"(\d+) packets captured", text)
    seen = re.search(r"(\d+) packets received by filter", text)
    if not m:
        return -1
    unwritten = int(seen.group(1)) - int(got.group(1)) if got and seen else 0
    return int(m.group(1)) + max(unwritten, 0)


# back to back for as long as the read lasts (one ss call takes 5-150 ms here), at most n
SS_LOOP = ("end=$(( $(date +%s%N) + {ms} * 1000000 )); i=0; "
           "while [ $(date +%s%N) -lt $end ] && [ $i -lt {n} ]; do i=$((i+1)); "
           "echo \"T $(date +%s%N)\"; ss -tin state established '( sport = :3260 )'; "
           "echo \"E $(date +%s%N)\"; sleep 0.01; done")


def traced_read(tb: Testbed, out: Path, seconds: float = 2.0, size: str = "1M",
                depth: int = 2, xdp_drop: bool = False, ss_samples: int = 30,
                loaders: int = 1) -> Run:
    """Probes + captures on both ends while istrace-gen reads; ss -ti sampled on the target.
    One loader for both ends (as `istrace capture` runs it on the testbed), or one per end."""
    out.mkdir(parents=True, exist_ok=True)
    gen = binary("istrace-gen")
    evict_lun(tb.lun_path)
    if xdp_drop:
        subprocess.run(["ip", "-n", tb.ini_ns, "link", "set", "dev", tb.ini_dev, "xdpgeneric",
                        "obj", str(DROP_OBJ), "sec", "xdp"], check=True, capture_output=True)
    dumps = {h: _start_tcpdump(tb, h, out) for h in ("initiator", "target")}
    run = Run(out, -1, "", "")
    try:
        ini = ["--host", "initiator", "--netns", tb.ini_ns, "--usdt", str(gen)]
        tgt = ["--tgtd", str(tgtd_pid(tb)), "--block-dev", tb.lun_path]
        if loaders == 1:
            pi = pt = Probe(out / "events-initiator.jsonl",
                            [*ini, "--peer-host", "target", "--peer-netns", tb.tgt_ns,
                             "--peer-out", str(out / "events-target.jsonl"), *tgt],
                            stderr_path=out / "probe.err")
        else:
            pi = Probe(out / "events-initiator.jsonl", ini,
                       stderr_path=out / "probe-initiator.err")
            pt = Probe(out / "events-target.jsonl",
                       ["--host", "target", "--netns", tb.tgt_ns, *tgt],
                       stderr_path=out / "probe-target.err")
        with contextlib.ExitStack() as stack:
            for p in dict.fromkeys((pi, pt)):
                stack.enter_context(p)
            ss = tb.popen_tgt(["sh", "-c", SS_LOOP.format(n=ss_samples, ms=int(seconds * 1000))],
                              stdout=subprocess.PIPE, text=True)
            r = tb.run_ini([str(gen), "--portal", tb.portal, "--target", tb.iqn, "--size", size,
                            "--time", str(seconds), "--queue-depth", str(depth), "--quiet",
                            "--timeout", "20"], capture_output=True, timeout=seconds + 60)
            run.gen_rc, run.gen_out = r.returncode, r.stdout + r.stderr
            run.ss_text, _ = ss.communicate(timeout=60)
        run.probe_err = {"initiator": pi.stderr(), "target": pt.stderr()}
    finally:
        tb.wait_iscsi_closed(10)  # the connection's last packets, before the stop
        for h, p in dumps.items():
            run.tcpdump_drops[h] = _stop_tcpdump(p, out / f"tcpdump-{h}.err")
        if xdp_drop:
            dump = subprocess.run(["bpftool", "map", "dump", "name", "drop_stats", "-j"],
                                  capture_output=True, text=True, check=False)
            m = re.findall(r'"value":\s*(\d+)', dump.stdout)
            if len(m) >= 2:
                run.xdp_dropped = int(m[1])
            subprocess.run(["ip", "-n", tb.ini_ns, "link", "set", "dev", tb.ini_dev,
                            "xdpgeneric", "off"], check=False, capture_output=True)
    return run


def ss_samples(text: str) -> pd.DataFrame:
    """(t0_ns, t1_ns, conn, cwnd) per established socket per `ss -tin` sample."""
    rows = []
    t0 = 0
    conn = None
    pending: list[tuple[str, int]] = []
    for line in text.splitlines():
        if line.startswith("T "):
            t0, pending = int(line[2:]), []
        elif line.startswith("E "):
            rows += [(t0, int(line[2:]), c, w) for c, w in pending]
        elif (m := re.search(r"(\S+:\d+)\s+(\S+:\d+)\s*$", line)) and not line[0].isspace():
            # on the target the peer is the initiator
            conn = conn_key(*parse_endpoint(m.group(2)), *parse_endpoint(m.group(1)))
        elif "cwnd:" in line and conn:
            m = re.search(r"\bcwnd:(\d+)", line)
            if m:
                pending.append((conn, int(m.group(1))))
    return pd.DataFrame(rows, columns=["t0", "t1", "conn", "cwnd"])

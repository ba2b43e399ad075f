"""During a capture, sample what the kernel itself accounts: the iSCSI sockets' tcp_info
(`ss -ti`: the sender-limit clocks busy / rwnd_limited / sndbuf_limited, cwnd, pacing, buffers)
and the CPU time of the target and initiator processes and of each CPU (user, system, softirq),
with the throttling counters of a process's cgroup when it has a CPU quota.

One JSON object per host per sample, one line each, flushed as written (a killed capture keeps
what was sampled): `hoststats-<host>.jsonl` (docs/schema.md §7), read back by
istrace.capture.hoststats. Cost: one `ss` exec per host per period (the testbed's namespaces
have a small private TCP hash table, see istrace.system.netns, so the dump itself is cheap)
and a few /proc reads; docs/schema.md §7 has the measured figure.
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from istrace.capture import layout
from istrace.capture.conn import conn_key, parse_endpoint
from istrace.system import cgroupcpu
from istrace.system.cputime import USER_HZ, cpu_stat, tree_times

# ss -ti fields: name -> (regex group over the info line, unit conversion to our column)
_NUM = r"([0-9.]+)"
_FIELDS: dict[str, tuple[str, float]] = {
    "cwnd": (r"\bcwnd:" + _NUM, 1), "ssthresh": (r"\bssthresh:" + _NUM, 1),
    "rtt_ms": (r"\brtt:" + _NUM, 1), "rttvar_ms": (r"\brtt:[0-9.]+/" + _NUM, 1),
    "minrtt_ms": (r"\bminrtt:" + _NUM, 1), "mss": (r"\bmss:" + _NUM, 1),
    "snd_wnd": (r"\bsnd_wnd:" + _NUM, 1), "rcv_space": (r"\brcv_space:" + _NUM, 1),
    "rcv_wnd": (r"\brcv_wnd:" + _NUM, 1),
    "bytes_sent": (r"\bbytes_sent:" + _NUM, 1), "bytes_acked": (r"\bbytes_acked:" + _NUM, 1),
    "bytes_received": (r"\bbytes_received:" + _NUM, 1),
    "bytes_retrans": (r"\bbytes_retrans:" + _NUM, 1),
    "retrans_total": (r"\bretrans:[0-9]+/" + _NUM, 1), "lost": (r"\blost:" + _NUM, 1),
    "unacked": (r"\bunacked:" + _NUM, 1), "notsent": (r"\bnotsent:" + _NUM, 1),
    "delivery_rate_bps": (r"\bdelivery_rate " + _NUM + "bps", 1),
    "pacing_rate_bps": (r"\bpacing_rate " + _NUM + "bps", 1),
    # ss prints the chronographs in whole milliseconds; the columns are microseconds.
    "busy_us": (r"\bbusy:" + _NUM + "ms", 1000),
    "rwnd_limited_us": (r"\brwnd_limited:" + _NUM + "ms", 1000),
    "sndbuf_limited_us": (r"\bsndbuf_limited:" + _NUM + "ms", 1000),
    "rmem_alloc": (r"skmem:\(r" + _NUM, 1), "rcvbuf_bytes": (r"skmem:\([^)]*\brb" + _NUM, 1),
    "wmem_alloc": (r"skmem:\([^)]*\bt" + _NUM, 1),
    "sndbuf_bytes": (r"skmem:\([^)]*\btb" + _NUM, 1),
    "wmem_queued": (r"skmem:\([^)]*\bw" + _NUM, 1),
}
_RX = {k: (re.compile(rx), mul) for k, (rx, mul) in _FIELDS.items()}
_CC = re.compile(r"\b(cubic|bbr|reno|dctcp|bic|htcp|vegas|westwood|illinois|hybla)\b")


def parse_ss(text: str, port: int) -> list[dict[str, Any]]:
    """Sockets of `ss -tinmH state established` output: a line `Recv-Q Send-Q local peer`
    followed by an indented line of key:value fields per socket."""
    out: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            parts = line.split()
            if len(parts) < 4:
                cur = None
                continue
            local, peer = parts[-2], parts[-1]
            try:
                lo, pe = parse_endpoint(local), parse_endpoint(peer)
            except ValueError:
                cur = None
                continue
            # The connection key puts the initiator first: the end not on the iSCSI port.
            ini, tgt = (pe, lo) if lo[1] == port else (lo, pe)
            cur = {"local": local, "peer": peer, "recv_q": int(parts[-4]),
                   "send_q": int(parts[-3]), "conn": conn_key(*ini, *tgt)}
            out.append(cur)
        elif cur is not None:
            for key, (rx, mul) in _RX.items():
                m = rx.search(line)
                if m:
                    cur[key] = float(m.group(1)) * mul
            cur["app_limited"] = " app_limited" in line
            if "busy_us" in cur:
                # ss leaves out a limit clock that never ran: it is zero, not unknown.
                cur.setdefault("rwnd_limited_us", 0.0)
                cur.setdefault("sndbuf_limited_us", 0.0)
            m = _CC.search(line)
            if m:
                cur["cc"] = m.group(1)
    return out


class Sampler(threading.Thread):
    """Samples each host every `period_s` until stop(); errors are recorded, not raised."""

    def __init__(self, out: Path, hosts: dict[str, str | None], port: int, period_s: float,
                 pids: Callable[[], dict[str, dict[str, int]]]) -> None:
        super().__init__(name="istrace-sampler", daemon=True)
        self.out, self.hosts, self.port, self.period = out, hosts, port, period_s
        self.pids = pids  # host -> {what: pid}, asked each time (the workload starts later)
        self.done = threading.Event()
        self.samples = 0
        self.errors: list[str] = []
        self.cpu_s = 0.0
        self.ss_wall_s = 0.0
        self.ss_cpu_s = 0.0
        self._files: dict[str, IO[str]] = {}

    def _ss(self, ns: str | None) -> str:
        argv = ["ss", "-tinmH"] + (["-N", ns] if ns else []) + [
            "state", "established", f"( sport = :{self.port} or dport = :{self.port} )"]
        t = time.monotonic()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=5)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.ss_wall_s += time.monotonic() - t
        self.ss_cpu_s += (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if r.returncode != 0:
            raise OSError(r.stderr.strip() or f"ss exited {r.returncode}")
        return r.stdout

    def sample_once(self) -> None:
        cpus = cpu_stat()
        pids = self.pids()
        for host, ns in self.hosts.items():
            rec: dict[str, Any] = {"ts_ns": time.time_ns(), "mono_ns": time.monotonic_ns(),
                                   "host": host, "user_hz": USER_HZ, "cpus": cpus}
            try:
                rec["sockets"] = parse_ss(self._ss(ns), self.port)
            except (OSError, subprocess.SubprocessError) as exc:
                rec["sockets"] = []
                if len(self.errors) < 5:
                    self.errors.append(f"ss on {host}: {exc}")
            procs: dict[str, dict[str, Any]] = {}
            for what, pid in pids.get(host, {}).items():
                t = tree_times(pid)
                if t:
                    procs[what] = {"pid": pid, "utime": t[0], "stime": t[1]}
                    q = cgroupcpu.quota_stat(pid)
                    if q is not None:
                        procs[what]["cgroup"] = q
            rec["procs"] = procs
            f = self._files.get(host)
            if f is None:
                f = self._files[host] = open(  # noqa: SIM115 - closed in run()
                    layout.hoststats_file(self.out, host), "a")
            f.write(json.dumps(rec) + "\n")
            f.flush()
        self.samples += 1

    def run(self) -> None:
        t0 = time.thread_time()
        try:
            while not self.done.is_set():
                started = time.monotonic()
                try:
                    self.sample_once()
                except OSError as exc:
                    self.errors.append(str(exc))
                    break
                self.done.wait(max(0.0, self.period - (time.monotonic() - started)))
        finally:
            self.cpu_s = time.thread_time() - t0
            for f in self._files.values():
                f.close()

    def stop(self) -> dict[str, Any]:
        """Stop sampling and say how it went, for meta.json."""
        self.done.set()
        self.join(timeout=10)
        return {"period_ms": round(self.period * 1e3), "samples": self.samples,
                "sampler_cpu_s": round(self.cpu_s, 3), "ss_wall_s": round(self.ss_wall_s, 3),
                "ss_cpu_s": round(self.ss_cpu_s, 3),
                "errors": self.errors,
                "files": [layout.hoststats_file(self.out, h).name for h in self.hosts]}

"""`istrace capture`: run a workload and record both ends of the path.

    istrace capture --delay 16ms --workload 'gen --size 4M --time 10' --out DIR

Brings a testbed up (or uses the running one named by --name), starts tcpdump on the
initiator end and the target end, the BPF probes on both ends when they are built, runs the
workload in the initiator namespace, then stops probes and captures in that order and writes
DIR/meta.json. A capture that lost packets says so loudly. With --initiator-host/--target-host
the same runs on two real machines over ssh and the files are fetched back into DIR.
It starts only when DIR's disk has room for what it is expected to write, and on a testbed
stops the same way, early, before that disk is full (istrace.session.diskspace).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from istrace.capture import layout
from istrace.capture import meta as capture_meta
from istrace.session import diskspace
from istrace.session.hosts import Host
from istrace.session.sampler import Sampler
from istrace.system import paths
from istrace.testbed import namespaces as testbed
from istrace.testbed import state as testbed_state

BUFFER_KIB = 524288  # tcpdump -B: the default buffer drops about half of a bulk read
POLL_S = 0.1  # free space polled this often while the workload runs
ENDED_EARLY = 4  # exit code of a capture stopped before its disk was full


class CaptureError(RuntimeError):
    pass


class Interrupted(Exception):
    """SIGTERM (or SIGINT) arrived: stop in order and keep what was written."""


def _on_signal(signum: int, frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _log(msg: str) -> None:
    print(f"capture: {msg}", file=sys.stderr, flush=True)


def build_workload(cmd: str, portal: str, iqn: str, chap: tuple[str, str] | None,
                   gen_path: str) -> str:
    """The shell command the initiator runs: `gen ...` becomes istrace-gen with the target."""
    words = shlex.split(cmd)
    if not words:
        raise CaptureError("empty --workload")
    if words[0] == "gen":
        extra = []
        if "--portal" not in words:
            extra += ["--portal", portal]
        if "--target" not in words and "--discover" not in words:
            extra += ["--target", iqn]
        if chap and "--chap-user" not in words:
            extra += ["--chap-user", chap[0], "--chap-secret", chap[1]]
        return shlex.join([gen_path, *extra, *words[1:]])
    return cmd


def workload_env(portal: str, iqn: str, chap: tuple[str, str] | None) -> dict[str, str]:
    auth = f"{chap[0]}%{chap[1]}@" if chap else ""
    return {"ISTRACE_PORTAL": portal, "ISTRACE_IQN": iqn,
            "ISTRACE_TARGET_IP": portal.rsplit(":", 1)[0],
            "ISTRACE_LUN_URL": f"iscsi://{auth}{portal}/{iqn}/1"}


def remote_clock(h: Host) -> dict[str, Any]:
    """The host's kernel and a rough clock reading bracketed by ours (ssh round trip = bound)."""
    before = time.time_ns()
    r = h.run("date +%s%N; uname -r; hostname")
    after = time.time_ns()
    lines = r.stdout.split()
    info: dict[str, Any] = {"local_before_ns": before, "local_after_ns": after}
    if r.returncode == 0 and len(lines) >= 3 and lines[0].isdigit():
        remote = int(lines[0])
        info.update(remote_ns=remote, kernel=lines[1], hostname=lines[2],
                    offset_ns_estimate=remote - (before + after) // 2,
                    bound_ns=(after - before) // 2)
    else:
        info["error"] = (r.stderr or r.stdout).strip()[:200]
    return info


class Session:
    """One capture: everything it started, so that any exit path stops it in order."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.out = Path(a.out).resolve()
        self.tb: testbed.Testbed | None = None
        self.own_testbed = False
        self.hosts: list[Host] = []
        self.tcpdumps: dict[str, subprocess.Popen[bytes]] = {}
        self.probes: dict[str, Any] = {}
        self.workload: subprocess.Popen[bytes] | None = None
        self.sampler: Sampler | None = None
        self.watch: diskspace.Watch | None = None  # set on a testbed: its disk is this one
        self.meta: dict[str, Any] = {"status": "starting", "out": str(self.out)}

    # ---- meta.json, rewritten at every step so a killed capture still leaves one --------------
    def save_meta(self) -> None:
        capture_meta.write_meta(self.out, self.meta)

    # ---- setup ----------------------------------------------------------------------------------
    def setup_hosts(self) -> None:
        a = self.a
        if a.initiator_host or a.target_host:
            if not (a.initiator_host and a.target_host and a.portal and a.iqn):
                raise CaptureError("real hosts need --initiator-host, --target-host, "
                                   "--portal and --iqn")
            work = f"{a.remote_dir}/{self.out.name}-{os.getpid()}"  # + role: one dir per host
            self.hosts = [Host.ssh("initiator", a.ssh_cmd, a.initiator_host, f"{work}-i",
                                   a.initiator_iface),
                          Host.ssh("target", a.ssh_cmd, a.target_host, f"{work}-t",
                                   a.target_iface)]
            self.portal = a.portal if ":" in a.portal else f"{a.portal}:3260"
            self.iqn = a.iqn
            self.chap = (a.chap_user, a.chap_secret) if a.chap_user and a.chap_secret else None
            self.meta["testbed"] = {"mode": "ssh", "initiator_host": a.initiator_host,
                                    "target_host": a.target_host, "portal": self.portal,
                                    "iqn": self.iqn, "ssh_cmd": a.ssh_cmd}
            for h in self.hosts:
                h.prepare()
            self.meta["clock"] = {"same_host_clock": False, "hosts": {
                h.role: remote_clock(h) for h in self.hosts}}
            return
        state = testbed_state.load(a.name)
        if state is not None and state.get("ready") and not testbed_state.alive(state):
            _log(f"testbed {a.name} is left over from a run that ended (its namespaces or "
                 "processes are gone): bringing it up again")
            state = None
        if state is not None and state.get("ready"):
            _log(f"using the running testbed {a.name} (its path settings apply)")
            self.tb = testbed.Testbed.attach(a.name)
        else:
            cfg = testbed.config_from_args(a)
            self.tb = testbed.Testbed(cfg)
            _log(f"bringing testbed {cfg.name} up (delay {cfg.one_way()} ms, "
                 f"rate {cfg.rate_mbit or 'unlimited'} Mbit/s, loss {cfg.loss:.4%})")
            self.own_testbed = True
            self.tb.up()
        tb = self.tb
        self.meta["testbed"] = {"mode": "netns", **tb.describe(),
                                "created_by_capture": self.own_testbed,
                                "compensate_us": tb.state.get("compensate_us")}
        self.portal, self.iqn = tb.portal, tb.iqn
        self.chap = ((tb.cfg.chap_user, tb.cfg.chap_secret)
                     if tb.cfg.chap_user and tb.cfg.chap_secret else None)
        self.hosts = [Host.netns("initiator", tb.ini_ns, self.out, tb.ini_dev),
                      Host.netns("target", tb.tgt_ns, self.out, tb.tgt_dev)]
        self.meta["clock"] = {"same_host_clock": True,
                              "note": "both ends are namespaces of one host: one CLOCK_REALTIME, "
                                      "offset 0 exactly"}

    def start_tcpdumps(self) -> None:
        a = self.a
        for h in self.hosts:
            pcap = h.path(f"{h.role}.pcap")
            # Immediate mode hands each packet to tcpdump as it arrives: without it, packets
            # still in the kernel ring when tcpdump stops are counted but never written.
            argv = ["tcpdump", "-i", h.iface, "-B", str(a.buffer_kib), "-s", str(a.snaplen),
                    "--immediate-mode", "-n", "-Z", "root", "-w", pcap]
            cmd = h.background(f"tcpdump-{h.role}", shlex.join(argv))
            if a.filter:
                cmd += " " + shlex.quote(a.filter)
            err = open(self.out / f"tcpdump-{h.role}.log", "wb")  # noqa: SIM115
            proc = h.popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
            err.close()
            self.tcpdumps[h.role] = proc
            if self.tb is not None:
                self.tb.record_pid(proc.pid, f"tcpdump-{h.role}")
        deadline = time.monotonic() + 15
        for role, proc in self.tcpdumps.items():
            log = self.out / f"tcpdump-{role}.log"
            while "listening on" not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise CaptureError(f"tcpdump on the {role} did not start: "
                                       f"{log.read_text(errors='replace').strip()[-300:]}")
                time.sleep(0.05)
        _log(f"tcpdump running on both ends (-B {a.buffer_kib} KiB)")

    def start_probes(self, gen_used: bool) -> None:
        status: dict[str, Any] = {}
        self.meta["probes"] = status
        if self.a.no_probes:
            for h in self.hosts:
                status[h.role] = {"status": "probes unavailable: disabled (--no-probes)"}
            return
        if self.tb is None:
            self._start_remote_probes(status, gen_used)
            return
        try:
            exe = paths.binary("istrace-probe")
            from istrace.probe.loader import Probe, ProbeError
        except (paths.MissingBinary, ImportError) as exc:
            for h in self.hosts:
                status[h.role] = {"status": f"probes unavailable: {exc}"}
            _log(f"probes unavailable: {exc}")
            return
        tb = self.tb
        # Both ends are namespaces of this kernel: one loader traces both (each program then
        # runs once per system call, segment or ACK, not once per end) and writes each end's
        # events to that end's file, as a loader on each of two hosts would.
        args = ["--host", "initiator", "--netns", tb.ini_ns,
                "--peer-host", "target", "--peer-netns", tb.tgt_ns,
                "--peer-out", str(self.out / "events-target.jsonl")]
        if gen_used:
            try:
                args += ["--usdt", str(paths.binary("istrace-gen"))]
            except paths.MissingBinary:
                pass
        if tb.tgtd_pid:
            args += ["--tgtd", str(tb.tgtd_pid)]
        args += self._probe_args()
        probe = Probe(self.out / "events-initiator.jsonl", args,
                      stderr_path=self.out / "probe.log")
        try:
            probe.start()
        except ProbeError as exc:
            for role in ("initiator", "target"):
                status[role] = {"status": f"probes unavailable: {exc}"}
            _log(f"probes unavailable: {exc}")
            return
        assert probe.proc is not None
        tb.record_pid(probe.proc.pid, "probe")
        for role in ("initiator", "target"):
            self.probes[role] = probe     # stopped once; its return code is each end's
            status[role] = {"status": "running", "file": f"events-{role}.jsonl",
                            "binary": str(exe), "args": args, "log": "probe.log"}
        _log("probes: initiator and target (one loader for both namespaces)")

    def _probe_args(self) -> list[str]:
        return shlex.split(getattr(self.a, "probe_args", "") or "")

    def _start_remote_probes(self, status: dict[str, Any], gen_used: bool) -> None:
        for h in self.hosts:
            extra = ["--host", h.role] + (["--usdt", "istrace-gen"]
                                          if gen_used and h.role == "initiator" else [])
            extra += self._probe_args()
            argv = ["istrace", "probe", "--out", h.path(f"events-{h.role}.jsonl"), *extra]
            err = open(self.out / f"probe-{h.role}.log", "wb")  # noqa: SIM115
            h.popen(h.background(f"probe-{h.role}", shlex.join(argv)),
                    stdout=subprocess.DEVNULL, stderr=err)
            err.close()
            status[h.role] = {"status": "running (remote)", "file": f"events-{h.role}.jsonl"}
        time.sleep(self.a.remote_probe_wait)

    def start_sampler(self) -> None:
        """The kernel's own tcp_info and the CPU, every --sample-ms (session/sampler.py)."""
        ms = getattr(self.a, "sample_ms", 0) or 0
        if ms <= 0:
            self.meta["hoststats"] = {"status": "off (--sample-ms 0)"}
            return
        if self.tb is None:
            self.meta["hoststats"] = {"status": "not sampled: real hosts (ss -ti over ssh "
                                                "every period would cost more than it shows)"}
            return
        tb = self.tb
        port = int(str(self.portal).rsplit(":", 1)[-1]) if ":" in str(self.portal) else 3260

        def pids() -> dict[str, dict[str, int]]:
            out: dict[str, dict[str, int]] = {"target": {}, "initiator": {}}
            tgtd = tb.tgtd_pid
            if tgtd:
                out["target"]["tgtd"] = tgtd
            if self.workload is not None and self.workload.poll() is None:
                out["initiator"]["workload"] = self.workload.pid
            return out

        self.sampler = Sampler(self.out, {"initiator": tb.ini_ns, "target": tb.tgt_ns}, port,
                               ms / 1e3, pids)
        self.sampler.start()
        self.meta["hoststats"] = {"status": "running", "period_ms": ms}
        _log(f"sampling tcp_info and CPU every {ms:g} ms")

    # ---- the workload -------------------------------------------------------------------------
    def run_workload(self) -> int:
        a = self.a
        ini = self.hosts[0]
        gen_path = "istrace-gen"
        if not ini.remote:
            try:
                gen_path = str(paths.binary("istrace-gen"))
            except paths.MissingBinary as exc:
                if shlex.split(a.workload)[:1] == ["gen"]:
                    raise CaptureError(str(exc)) from None
        cmd = build_workload(a.workload, self.portal, self.iqn, self.chap, gen_path)
        env = workload_env(self.portal, self.iqn, self.chap)
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        shell = ini.background("workload", f"env {exports} sh -c {shlex.quote(cmd)}")
        self.meta["workload"] = {"command": a.workload, "effective": cmd, "env": env,
                                 "stdout": "workload.stdout", "stderr": "workload.stderr",
                                 "timeout_s": a.timeout}
        self.save_meta()
        _log(f"workload: {cmd}")
        with open(self.out / "workload.stdout", "wb") as so, \
                open(self.out / "workload.stderr", "wb") as se:
            self.workload = ini.popen(shell, stdout=so, stderr=se)
        if self.tb is not None:
            self.tb.record_pid(self.workload.pid, "workload")
        t0 = time.monotonic()
        rc = self._wait_workload(t0 + a.timeout)
        self.meta["workload"].update(returncode=rc, seconds=round(time.monotonic() - t0, 3))
        return rc

    def _wait_workload(self, deadline: float) -> int:
        """The workload's exit code; it is stopped at --timeout (124), or when the free space
        falls under the reserve (its own code, and meta.json's ended_early says why)."""
        assert self.workload is not None
        while True:
            try:
                return self.workload.wait(timeout=max(0.0, min(POLL_S,
                                                               deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
            free = self.watch.low() if self.watch is not None else None
            if free is not None:
                assert self.watch is not None
                at_s = round((time.time_ns() - self.meta["started_ns"]) / 1e9, 3)
                self.meta["ended_early"] = {"reason": "disk", "free_bytes": free,
                                            "reserve_bytes": self.watch.reserve_bytes,
                                            "at_s": at_s, "dir": str(self.out)}
                _log(f"{self.out}: {diskspace.size(free)} free, under the "
                     f"{diskspace.size(self.watch.reserve_bytes)} kept for a clean stop: "
                     "stopping the workload")
                self.stop_workload(waits=(0.5, 0.5, 1))
                return self.workload.wait()
            if time.monotonic() >= deadline:
                _log(f"workload still running after {self.a.timeout} s: stopping it")
                self.stop_workload()
                return 124

    def stop_workload(self, waits: tuple[float, float, float] = (5, 3, 3)) -> None:
        """SIGINT, then SIGTERM, then SIGKILL, each given its wait to end the workload."""
        w = self.workload
        if w is None or w.poll() is not None:
            return
        for sig, wait in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), waits,
                             strict=True):
            try:
                os.killpg(w.pid, sig)
            except ProcessLookupError:
                break
            if self.hosts[0].remote:
                self.hosts[0].stop("workload", sig.name[3:])
            try:
                w.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue

    # ---- stop, in order: workload, probes, captures ----------------------------------------------
    def stop_all(self) -> None:
        self.stop_workload()
        if self.sampler is not None:
            self.meta["hoststats"] = {"status": "ok", **self.sampler.stop()}
            self.sampler = None
        for role, probe in self.probes.items():
            rc = probe.stop()
            self.meta["probes"][role].update(status="ok" if rc in (0, -2, 130) else
                                             f"probe exited {rc}", returncode=rc)
        if self.tb is None:
            for h in self.hosts:
                if "probes" in self.meta and h.role in self.meta["probes"] \
                        and not self.a.no_probes:
                    h.stop(f"probe-{h.role}", "INT")
        for role, proc in self.tcpdumps.items():
            host = next(h for h in self.hosts if h.role == role)
            if host.remote:
                host.stop(f"tcpdump-{role}", "TERM")
            elif proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.tcpdumps.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def gather(self) -> None:
        caps: dict[str, Any] = {}
        total = 0
        for h in self.hosts:
            name = f"{h.role}.pcap"
            fetched = h.fetch(name, self.out / name)
            if h.remote and "probes" in self.meta and not self.a.no_probes:
                h.fetch(f"events-{h.role}.jsonl", self.out / f"events-{h.role}.jsonl")
            log = (self.out / f"tcpdump-{h.role}.log").read_text(errors="replace") \
                if (self.out / f"tcpdump-{h.role}.log").exists() else ""
            counts = capture_meta.tcpdump_counts(log)
            drops = (counts["dropped_by_kernel"] or 0) + (counts["dropped_by_interface"] or 0)
            total += drops
            pcap = self.out / name
            caps[h.role] = {"file": name, "iface": h.iface, "snaplen": self.a.snaplen,
                            "buffer_kib": self.a.buffer_kib, "filter": self.a.filter or None,
                            "bytes": pcap.stat().st_size if pcap.exists() else 0,
                            "fetched": fetched, **counts,
                            "counts_known": counts["dropped_by_kernel"] is not None}
            h.cleanup()
            if not h.remote:
                for stale in self.out.glob(f"*-{h.role}.pid"):
                    stale.unlink(missing_ok=True)
        (self.out / "workload.pid").unlink(missing_ok=True)
        self.meta["captures"] = caps
        self.meta["drops_total"] = total
        self.meta["complete"] = total == 0 and all(c["counts_known"] for c in caps.values())
        if total:
            self.meta.setdefault("warnings", []).append(
                f"capture lost {total} packets (tcpdump kernel drops): timings and throughput "
                "decoded from it are incomplete")
        for role, c in caps.items():
            seen, kept = c.get("received_by_filter"), c.get("packets_captured")
            if seen is not None and kept is not None and seen > kept + (c.get(
                    "dropped_by_kernel") or 0):
                self.meta.setdefault("warnings", []).append(
                    f"{role} capture: {seen - kept} packets passed the filter but were not "
                    "written before tcpdump stopped")
        if self.tb is not None and self.tb.emulator == "dummynet":
            self._path_stats(self.tb.run_dir / "dummynet.json")
        self.meta["negotiated"] = capture_meta.negotiated(self.out / "initiator.pcap",
                                                           capture_meta.target_ports(self.meta)[0])

    def _path_stats(self, stats: Path, wait_s: float = 3.0) -> None:
        """The emulator's counters as of after the traffic: it rewrites its stats file every
        second, so the copy read just after the workload can be up to a second old (CI: 351
        queue drops counted of a transfer that went on to resend 617 segments). Wait for a
        write made after now, or its final one."""
        after, deadline = time.time(), time.monotonic() + wait_s
        while stats.exists():
            written = stats.stat().st_mtime  # before the read: the text is at least this new
            st = json.loads(stats.read_text())
            if st.get("final") or written > after:
                break
            if time.monotonic() > deadline:
                self.meta.setdefault("warnings", []).append(
                    f"path emulator stats not rewritten within {wait_s:.0f} s: its counters "
                    "may miss the end of the transfer")
                break
            time.sleep(0.05)
        else:
            return
        self.meta["path_stats"] = st

    def teardown(self) -> None:
        if self.tb is not None and self.own_testbed and not self.a.keep:
            _log(f"bringing testbed {self.tb.cfg.name} down")
            try:
                self.tb.down()
            except testbed.TestbedError as exc:
                _log(f"testbed down: {exc} (run `istrace testbed down --name "
                     f"{self.tb.cfg.name}`)")


def _summary(meta: dict[str, Any]) -> int:
    caps = meta.get("captures", {})
    for role, c in caps.items():
        print(f"  {role:9} {c['file']}: {c.get('packets_captured')} packets, "
              f"{c.get('dropped_by_kernel')} dropped by kernel, {c['bytes']} bytes")
    w = meta.get("workload", {})
    print(f"  workload  exit {w.get('returncode')} after {w.get('seconds')} s "
          f"(output in workload.stdout / workload.stderr)")
    for role, p in meta.get("probes", {}).items():
        print(f"  probes    {role}: {p.get('status')}")
    drops = meta.get("drops_total", 0)
    if drops:
        bar = "!" * 72
        print(f"{bar}\n!! WARNING: the capture LOST {drops} packets (tcpdump kernel drops):"
              f"\n!! decoded timings and throughput from it are incomplete.\n{bar}",
              file=sys.stderr)
    elif caps and not meta.get("complete"):
        print("WARNING: tcpdump did not report its drop counters; completeness unknown",
              file=sys.stderr)
    return drops


def run(a: Any, argv: list[str]) -> int:
    """One capture session with the options of `istrace capture` (argv kept in meta.json);
    returns the command's exit code."""
    if os.geteuid() != 0 and not a.initiator_host:
        print("istrace capture: must run as root (namespaces, tcpdump)", file=sys.stderr)
        return 2
    out = Path(a.out)
    # an earlier capture's files are also mixed with this one's when this one writes fewer
    # (no probes, one end): replaced only when asked
    try:
        removed = layout.clear_for_capture(out, a.replace)
    except layout.EarlierCapture as exc:
        print(f"istrace capture: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"istrace capture: cannot clear {out}: {exc}", file=sys.stderr)
        return 2
    if removed:
        _log(f"{out}: the earlier capture's {removed} files and folders removed (--replace)")
    need = diskspace.budget(_path_config(a), a.snaplen, a.workload, a.timeout)
    free = diskspace.free_bytes(out)
    short = free < need.need_bytes
    if short and not getattr(a, "ignore_free_space", False):
        print(f"istrace capture: {diskspace.refusal(out, need, free)}", file=sys.stderr)
        return 2
    if short:
        _log(f"{diskspace.size(free)} free for about {diskspace.size(need.need_bytes)}: "
             "starting anyway (--ignore-free-space), to stop before the disk is full")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"istrace capture: cannot create {out}: {exc}", file=sys.stderr)
        return 2
    s = Session(a)
    s.meta.update(started_ns=time.time_ns(), argv=["istrace", "capture", *argv],
                  host=capture_meta.host_info(), tools=capture_meta.tool_versions(),
                  clock_start=capture_meta.clock_info(),
                  disk={**need.describe(),
                        "free_bytes_at_start": free, "started_anyway": short})
    old_term = signal.signal(signal.SIGTERM, _on_signal)
    rc = 1
    try:
        s.save_meta()
        s.setup_hosts()
        s.meta["status"] = "capturing"
        s.save_meta()
        s.start_tcpdumps()
        gen_used = shlex.split(a.workload)[:1] == ["gen"]
        s.start_probes(gen_used)
        s.start_sampler()
        if s.tb is not None:  # real hosts write on their own disks, fetched at the end
            s.watch = diskspace.Watch(s.out, need.reserve_bytes)
        s.save_meta()
        wrc = s.run_workload()
        if "ended_early" in s.meta:  # no settling: the disk has no room for it
            s.meta["status"] = "ended_early"
            rc = ENDED_EARLY
        else:
            time.sleep(a.settle + sum(s.tb.cfg.one_way()) / 1000 if s.tb else a.settle)
            if s.tb is not None and not s.tb.wait_iscsi_closed(5):
                _log("an iSCSI connection is still open 5 s after the workload: its last "
                     "packets may be missing from the capture")
            s.meta["status"] = "ok" if wrc == 0 else "workload_failed"
            rc = 0 if wrc == 0 else 3
    except (KeyboardInterrupt, Interrupted) as exc:
        _log(f"interrupted ({exc or 'SIGINT'}): stopping in order")
        s.meta["status"] = "interrupted"
        rc = 130
    except (CaptureError, testbed.TestbedError, ValueError, OSError,
            subprocess.SubprocessError, RuntimeError) as exc:
        s.meta.update(status="error", error=str(exc))
        print(f"istrace capture: {exc}", file=sys.stderr)
        rc = 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the cleanup, once
        try:
            s.stop_all()
            s.gather()
        except Exception as exc:  # noqa: BLE001 - never lose meta.json to a cleanup error
            s.meta.setdefault("cleanup_errors", []).append(str(exc))
        s.meta.update(ended_ns=time.time_ns(), clock_end=capture_meta.clock_info())
        s.meta["duration_s"] = round((s.meta["ended_ns"] - s.meta["started_ns"]) / 1e9, 3)
        s.save_meta()
        s.teardown()
        signal.signal(signal.SIGTERM, old_term)
    print(f"capture {s.meta['status']}: {out}")
    _summary(s.meta)
    early = s.meta.get("ended_early")
    if early:
        print(f"istrace capture: ended early at {early['at_s']:g} s: {out} had "
              f"{diskspace.size(early['free_bytes'])} free, under the "
              f"{diskspace.size(early['reserve_bytes'])} kept for a clean stop; the pcaps "
              "are whole up to then (meta.json ended_early): free space or capture less",
              file=sys.stderr)
    return rc


def _path_config(a: Any) -> dict[str, Any]:
    """The path settings the capture will run on: the running testbed's, else those given
    (real hosts: none known)."""
    if getattr(a, "initiator_host", None) or getattr(a, "target_host", None):
        return {}
    state = testbed_state.load(a.name)
    if state is not None and state.get("ready") and testbed_state.alive(state):
        return dict(state.get("config") or {})
    return {"rate_mbit": getattr(a, "rate", 0), "nic_rate_mbit": getattr(a, "nic_rate", 0),
            "mtu": getattr(a, "mtu", 0)}


__all__ = ["run", "build_workload", "workload_env"]

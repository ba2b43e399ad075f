"""The full-kernel testbed: Debian's stock kernel in a QEMU VM (virtme-ng), with LIO, open-iscsi
and netem, so every layer of a real Linux storage stack can be probed.

    python -m istrace.testbed.vm up --name vm1 --delay-ms 5 --queue-depth 4
    python -m istrace.testbed.vm capture --name vm1 --out /tmp/cap --dd-count 2
    python -m istrace.testbed.vm down --name vm1

The VM shares the host's root file system read-only (virtme-ng), so the guest runs the scripts
of scripts/vm/ straight from this tree. Its only writable host directory is the run directory
(/tmp/istrace-vm/<name>): the host drops requests into run/cmd/, the guest agent
(scripts/vm/guest_agent.sh) runs them and writes their output and exit code back. Inside the VM
the target (LIO) sits in network namespace `isttgt` behind a veth; the initiator (iscsid,
iscsi_tcp) uses the VM's root namespace; netem delays each direction by delay_ms.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from istrace.capture import layout
from istrace.capture import meta as capture_meta
from istrace.system import paths
from istrace.system.paths import REPO_ROOT
from istrace.testbed import pattern
from istrace.testbed import state as testbed_state
from istrace.testbed.lifecycle import UpDown

VM_ROOT = Path(os.environ.get("ISTRACE_VM_ROOT", "/tmp/istrace-vm"))
VMDIR = REPO_ROOT / "scripts" / "vm"
PROBE_MODES = ("istrace", "off")
INI_IP = "10.78.0.1"
TGT_IP = "10.78.0.2"
IQN = "iqn.2026-11.org.istrace:vm-target"
INI_IQN = "iqn.2026-11.org.istrace:vm-initiator"
_NAME_RE = re.compile(r"^[a-z0-9]{1,6}$")
# What the VM needs on the host; `scripts/deps.sh --vm` installs all of it.
_HOST_TOOLS = ("vng", "qemu-system-x86_64", "busybox", "iscsiadm", "iscsid", "fio",
               "tcpdump")


class VmError(RuntimeError):
    pass


class VmHung(VmError):
    """A guest request outlived its deadline: the guest may be wedged (seen once in ~70
    captures under TCG: a direct read that never completed and an agent that no longer
    answered). Only a fresh boot gets it back."""


@dataclass
class VmConfig:
    """One VM testbed. Tunables are the initiator's (iscsid.conf / sysfs) unless said."""

    name: str = "vm"
    delay_ms: float = 0.0        # one-way, each direction (netem on both veth ends)
    lun_mb: int = 64
    queue_depth: int = 32        # node.session.queue_depth (SCSI device queue depth)
    cmds_max: int = 128          # node.session.cmds_max (the iSCSI host's can_queue)
    max_sectors_kb: int = 0      # /sys/block/sdX/queue/max_sectors_kb, 0 = kernel default
    mrdsl: int = 262144          # initiator's MaxRecvDataSegmentLength
    tgt_mrdsl: int = 262144      # LIO's MaxRecvDataSegmentLength
    max_burst: int = 262144      # MaxBurstLength (both sides offer it)
    first_burst: int = 65536     # FirstBurstLength (both sides offer it)
    cpus: int = 2
    memory_mb: int = 2048
    kernel: str = ""             # /boot/vmlinuz-*; empty = newest with modules installed
    boot_timeout_s: float = 600.0

    def validate(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"VM name {self.name!r}: use 1-6 lower-case letters/digits")
        if not 0 <= self.delay_ms <= 500:
            raise ValueError(f"one-way delay {self.delay_ms} ms outside 0..500")
        if not 1 <= self.lun_mb <= 1024:
            raise ValueError("lun size must be 1..1024 MiB (it lives in the VM's RAM)")
        if not 1 <= self.queue_depth <= 1024:
            raise ValueError("queue_depth must be 1..1024")
        # open-iscsi refuses to log in below 16 (libiscsi keeps 15 tasks for management:
        # can_queue = cmds_max - 15, so 16 gives a can_queue of 1)
        if self.cmds_max < 16 or self.cmds_max > 2048 or self.cmds_max & (self.cmds_max - 1):
            raise ValueError("cmds_max must be a power of two in 16..2048")
        if self.max_sectors_kb and not 4 <= self.max_sectors_kb <= 32767:
            raise ValueError("max_sectors_kb must be 0 (default) or 4..32767")
        for key in ("mrdsl", "tgt_mrdsl", "max_burst", "first_burst"):
            v = getattr(self, key)
            if not 512 <= v <= 16777215:
                raise ValueError(f"{key} {v} outside 512..16777215 (RFC 7143)")
        if self.first_burst > self.max_burst:
            raise ValueError("FirstBurstLength must not exceed MaxBurstLength")

    def env(self, run_dir: Path) -> str:
        """The guest's settings file (sourced by the scripts of scripts/vm/)."""
        values = {
            "RUNDIR": run_dir, "VMDIR": VMDIR, "DELAY_MS": _num(self.delay_ms),
            "INI_IP": INI_IP, "TGT_IP": TGT_IP, "IQN": IQN, "INI_IQN": INI_IQN,
            "LUN_SRC": run_dir / "lun1.img", "LUN_BYTES": self.lun_mb << 20,
            "QUEUE_DEPTH": self.queue_depth, "CMDS_MAX": self.cmds_max,
            "MAX_SECTORS_KB": self.max_sectors_kb, "MRDSL": self.mrdsl,
            "TGT_MRDSL": self.tgt_mrdsl, "MAX_BURST": self.max_burst,
            "FIRST_BURST": self.first_burst,
        }
        return "".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items())


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def find_kernel() -> str:
    """Newest /boot/vmlinuz-* whose modules are installed (a stock kernel with SCSI, LIO...)."""
    found = []
    for path in glob.glob("/boot/vmlinuz-*"):
        release = path.split("vmlinuz-", 1)[1]
        if Path(f"/lib/modules/{release}/modules.dep").is_file():
            found.append(path)
    if not found:
        raise VmError("no /boot/vmlinuz-* with modules: run `bash scripts/deps.sh --vm`")
    return sorted(found)[-1]


def missing_host_tools() -> list[str]:
    gone = [t for t in _HOST_TOOLS if shutil.which(t) is None]
    if not Path("/usr/lib/python3/dist-packages/rtslib_fb").is_dir():
        gone.append("python3-rtslib-fb")
    try:
        find_kernel()
    except VmError:
        gone.append("linux-image-amd64")
    return gone


def ensure_host_tools() -> None:
    """Install the VM's packages on first use (kept out of every build's deps run)."""
    if not missing_host_tools():
        return
    print("vmtestbed: installing the VM packages (scripts/deps.sh --vm)", file=sys.stderr)
    rc = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "deps.sh"), "--vm"]).returncode
    still = missing_host_tools()
    if rc != 0 or still:
        raise VmError(f"VM packages missing after deps.sh --vm: {', '.join(still) or rc}")


def kvm_usable() -> bool:
    """Whether /dev/kvm runs a stock kernel. Here it is a paravirtual KVM that does not, so
    the default is TCG; ISTRACE_VM_KVM=1 opts in where hardware KVM works."""
    return os.environ.get("ISTRACE_VM_KVM") == "1" and os.access("/dev/kvm", os.R_OK | os.W_OK)


def run_dir(name: str) -> Path:
    return VM_ROOT / name


class VmTestbed(UpDown):
    """A running (or to-be-started) VM testbed; a context manager like Testbed."""

    def __init__(self, cfg: VmConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.dir = run_dir(cfg.name)
        self.info: dict[str, Any] = {}

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str) -> VmTestbed:
        state = _load_state(name)
        if state is None:
            raise VmError(f"no VM testbed named {name!r} is up (nothing in {run_dir(name)})")
        tb = cls(VmConfig(**state["config"]))
        tb.info = state.get("info", {})
        return tb

    def up(self) -> None:
        if self.alive():
            raise VmError(f"VM testbed {self.cfg.name!r} is already up; `down` it first")
        ensure_host_tools()
        kernel = self.cfg.kernel or find_kernel()
        if self.dir.exists():
            shutil.rmtree(self.dir)
        (self.dir / "cmd").mkdir(parents=True)
        _save_state(self.cfg.name, {"config": asdict(self.cfg)})
        print(f"vmtestbed: LUN of {self.cfg.lun_mb} MiB with the schema pattern", file=sys.stderr)
        pattern.fill(self.dir / "lun1.img", self.cfg.lun_mb << 20)
        (self.dir / "config.env").write_text(self.cfg.env(self.dir))
        # --verbose: the guest kernel's log goes to console.log, the evidence when a guest
        # request hangs
        cmd = ["nice", "-n", "5", "vng", "--verbose", "--run", kernel, "--cpus", str(self.cfg.cpus),
               "--memory", f"{self.cfg.memory_mb}M", f"--rwdir={self.dir}",
               "--name", f"ist{self.cfg.name}",
               "--exec", f"bash {VMDIR}/guest_agent.sh {self.dir}"]
        if not kvm_usable():
            cmd.insert(4, "--disable-kvm")
        print(f"vmtestbed: booting {kernel} ({'KVM' if kvm_usable() else 'TCG'}, "
              f"{self.cfg.cpus} vCPUs)", file=sys.stderr)
        with open(self.dir / "console.log", "wb") as console:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=console,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        _save_state(self.cfg.name, {"config": asdict(self.cfg), "pid": proc.pid,
                                    "pid_start": testbed_state.proc_start(proc.pid),
                                    "kernel": kernel})
        t0 = time.monotonic()
        status_file = self.dir / "up.status"
        while not status_file.exists():
            if proc.poll() is not None:
                self.down()
                raise VmError(f"VM exited during boot (rc {proc.returncode}); "
                              f"see {self.dir}/console.log")
            if time.monotonic() - t0 > self.cfg.boot_timeout_s:
                self.down()
                raise VmError(f"VM not up after {self.cfg.boot_timeout_s:.0f} s")
            time.sleep(1)
        if status_file.read_text().strip() != "ok":
            log = (self.dir / "guest_up.log").read_text(errors="replace")[-2000:]
            self.down(keep=True)
            raise VmError(f"guest setup failed:\n{log}")
        self.info = json.loads((self.dir / "up.json").read_text())
        _save_state(self.cfg.name, {**(_load_state(self.cfg.name) or {}), "info": self.info})
        print(f"vmtestbed: up in {time.monotonic() - t0:.0f} s: {self.info['dev']} "
              f"queue_depth={self.info['queue_depth']} can_queue={self.info['can_queue']} "
              f"max_sectors_kb={self.info['max_sectors_kb']}", file=sys.stderr)

    def alive(self) -> bool:
        state = _load_state(self.cfg.name)
        if not state or "pid" not in state:
            return False
        return testbed_state.proc_start(state["pid"]) == state.get("pid_start")

    def down(self, keep: bool = False) -> None:
        """Power the VM off (politely, then by signal) and remove the run directory."""
        state = _load_state(self.cfg.name) or {}
        pid = state.get("pid")
        if pid and testbed_state.proc_start(pid) == state.get("pid_start"):
            (self.dir / "cmd").mkdir(parents=True, exist_ok=True)
            (self.dir / "cmd" / "shutdown").touch()
            deadline = time.monotonic() + 60
            start = state.get("pid_start")
            while time.monotonic() < deadline and _reap(pid) and \
                    testbed_state.proc_start(pid) == start:
                time.sleep(0.5)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if testbed_state.proc_start(pid) != state.get("pid_start"):
                    break
                try:
                    os.killpg(pid, sig)   # the vng process leads its own group (qemu inside)
                except ProcessLookupError:
                    break
                time.sleep(3)
        if not keep and self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        elif keep:
            (self.dir / "state.json").unlink(missing_ok=True)

    # -- talking to the guest ---------------------------------------------------------------
    def run(self, script: str, timeout_s: float = 300.0) -> tuple[int, str]:
        """Run a bash script in the VM (as root, in the initiator's namespace); (rc, output)."""
        if not self.alive():
            raise VmError(f"VM testbed {self.cfg.name!r} is not running")
        job = f"{int(time.time() * 1000):x}-{uuid.uuid4().hex[:6]}"
        tmp = self.dir / "cmd" / f"{job}.tmp"
        preamble = (f"# timeout={int(timeout_s) + 5}\n. {self.dir}/config.env\n"
                    f"DEV=$(sed -n 's/.*\"dev\": \"\\([^\"]*\\)\".*/\\1/p' "
                    f"{self.dir}/up.json)\nexport DEV\n")
        tmp.write_text(f"{preamble}{script}\n")
        tmp.rename(self.dir / "cmd" / f"{job}.sh")
        rc_file = self.dir / "cmd" / f"{job}.rc"
        deadline = time.monotonic() + timeout_s
        while not rc_file.exists():
            if not self.alive():
                raise VmError("VM died while running a request; see console.log")
            if time.monotonic() > deadline:
                raise VmHung(f"guest request timed out after {timeout_s:.0f} s: {script[:80]}")
            time.sleep(0.3)
        out = (self.dir / "cmd" / f"{job}.out").read_text(errors="replace")
        return int(rc_file.read_text().strip() or 1), out

    def retune(self, **changes: int) -> dict[str, Any]:
        """New initiator tunables (queue_depth, cmds_max, max_sectors_kb, mrdsl, max_burst,
        first_burst) through a fresh login; returns what the new session reports."""
        for key, value in changes.items():
            if not hasattr(self.cfg, key):
                raise ValueError(f"unknown tunable {key}")
            setattr(self.cfg, key, value)
        self.cfg.validate()
        (self.dir / "config.env").write_text(self.cfg.env(self.dir))
        rc, out = self.run(f"bash {VMDIR}/guest_retune.sh {self.dir}/config.env")
        if rc != 0:
            raise VmError(f"re-login failed: {out.strip()[-500:]}")
        self.info = json.loads((self.dir / "up.json").read_text())
        _save_state(self.cfg.name, {**(_load_state(self.cfg.name) or {}),
                                    "config": asdict(self.cfg), "info": self.info})
        return self.info

    def restart(self) -> Path:
        """Boot a fresh VM with the same settings (the tunables in force included), after
        keeping the old one's kernel log; returns where that log was kept."""
        kept = self.dir.parent / f"{self.cfg.name}-console-{int(time.time())}.log"
        if (self.dir / "console.log").exists():
            shutil.copyfile(self.dir / "console.log", kept)
        print(f"vmtestbed: restarting {self.cfg.name!r}; the old guest's kernel log is in "
              f"{kept}", file=sys.stderr)
        self.down()
        self.up()
        return kept

    def capture(self, out_dir: str | Path, workload: str, probes: str = "istrace",
                timeout_s: float = 900.0, hang_retries: int = 0, replace: bool = False) -> Path:
        """`capture_once`; a guest that hangs is rebooted and the capture run again, up to
        `hang_retries` times, saying so (a hang is never passed over silently). An `out_dir`
        holding an earlier capture is refused (layout.EarlierCapture), before the guest runs
        anything, unless `replace` (which removes it): the new capture's files copied over
        the old ones would be analysed with the old one's merged trace and decoded PDUs."""
        layout.clear_for_capture(Path(out_dir), replace)
        for attempt in range(hang_retries + 1):
            try:
                return self.capture_once(out_dir, workload, probes, timeout_s)
            except VmHung as exc:
                if attempt == hang_retries:
                    raise
                print(f"vmtestbed: WARNING: the guest hung ({exc}); capturing again on a "
                      "fresh boot", file=sys.stderr)
                self.restart()
                # what the hung attempt left of istrace's (a hang comes before the copy: none
                # so far); the directory's other files stay, as at the start
                layout.clear_for_capture(Path(out_dir), replace=True)
        raise AssertionError("unreachable")

    def capture_once(self, out_dir: str | Path, workload: str, probes: str = "istrace",
                     timeout_s: float = 900.0) -> Path:
        """Run `workload` (bash; $DEV is the disk) under tcpdump and the probes of both ends:
        `istrace` (istrace-probe, the host's loader, on this kernel) or `off`. The result
        is a standard capture directory (pcaps, events-<end>.jsonl, meta.json) in `out_dir`,
        which `istrace merge|track|plot|report` read unchanged."""
        if probes not in PROBE_MODES:
            raise VmError(f"probes {probes!r}: one of {', '.join(PROBE_MODES)}")
        probe = ""
        if probes == "istrace":
            try:
                probe = str(paths.binary("istrace-probe"))
            except paths.MissingBinary as exc:
                raise VmError(str(exc)) from None
        cap_id = f"cap-{uuid.uuid4().hex[:8]}"
        guest_out = self.dir / cap_id
        script = (f"bash {VMDIR}/guest_capture.sh {self.dir}/config.env {guest_out} "
                  f"{shlex.quote(workload)} {probes} {shlex.quote(probe)}")
        t0 = time.time_ns()
        rc, out = self.run(script, timeout_s=timeout_s)
        if not guest_out.is_dir():
            raise VmError(f"capture produced nothing (rc {rc}): {out.strip()[-800:]}")
        (guest_out / "capture.log").write_text(out)
        dest = Path(out_dir)
        dest.mkdir(parents=True, exist_ok=True)
        for item in guest_out.iterdir():
            shutil.move(str(item), dest / item.name)
        guest_out.rmdir()
        capture_meta.write_meta(dest, self.capture_meta(dest, workload, rc, t0, probes))
        if rc != 0:
            raise VmError(f"workload failed (rc {rc}); see {dest}/workload.out")
        return dest

    def capture_meta(self, d: Path, workload: str, rc: int, t0_ns: int,
                     probes: str) -> dict[str, Any]:
        """meta.json of a VM capture: the same blocks a namespace capture writes (schema §6),
        with the kernel stack's tunables in the testbed block."""
        up = json.loads((d / "testbed.json").read_text()) if (d / "testbed.json").exists() \
            else {}
        cfg = self.cfg
        kernel = (_load_state(cfg.name) or {}).get("kernel") or cfg.kernel or ""
        testbed = {"mode": "vm", "name": cfg.name,
                   "kernel": Path(kernel).name.replace("vmlinuz-", ""),
                   "portal": f"{TGT_IP}:3260", "iqn": IQN, "ini_ip": INI_IP,
                   "tgt_ip": TGT_IP, "emulator": "netem", "offloads": False,
                   "delay_i2t_ms": cfg.delay_ms, "delay_t2i_ms": cfg.delay_ms,
                   "rate_mbit": 0.0, "lun_mb": cfg.lun_mb, "initiator": "open-iscsi (iscsi_tcp)",
                   "target": "LIO (iscsi_target_mod, fileio)",
                   # what the session really uses, read back from sysfs by `up`/`set`,
                   # and the node setting behind can_queue
                   "tunables": {"cmds_max": cfg.cmds_max, **up}}
        caps: dict[str, Any] = {}
        total = 0
        for role in ("initiator", "target"):
            log = d / f"tcpdump-{role}.log"
            counts = capture_meta.tcpdump_counts(log.read_text(errors="replace")
                                                 if log.exists() else "")
            drops = (counts["dropped_by_kernel"] or 0) + (counts["dropped_by_interface"] or 0)
            total += drops
            pcap = d / f"{role}.pcap"
            caps[role] = {"file": pcap.name, "iface": "vi" if role == "initiator" else "vt",
                          "snaplen": 0, "buffer_kib": 524288,
                          "bytes": pcap.stat().st_size if pcap.exists() else 0, **counts,
                          "counts_known": counts["dropped_by_kernel"] is not None}
        wl = json.loads((d / "workload.json").read_text()) if (d / "workload.json").exists() \
            else {}
        meta: dict[str, Any] = {
            "status": "done" if rc == 0 else "workload failed", "out": str(d),
            "testbed": testbed, "captures": caps, "drops_total": total,
            "complete": total == 0 and all(c["counts_known"] for c in caps.values()),
            "clock": {"same_host_clock": True,
                      "note": "both ends run in one guest kernel: one clock, offset 0 exactly"},
            "workload": {"command": workload, "returncode": rc,
                         "seconds": round((wl.get("end_ns", 0) - wl.get("start_ns", 0)) / 1e9,
                                          3) if wl else None},
            "started_ns": t0_ns, "ended_ns": time.time_ns(),
            "probes": {role: _probe_status(d, role) for role in ("initiator", "target")}
            if probes == "istrace" else {"status": "off (--probes off)"},
            "hoststats": {"status": "not sampled: the VM testbed has no host sampler yet"},
        }
        if total:
            meta["warnings"] = [f"capture lost {total} packets (tcpdump kernel drops)"]
        meta["negotiated"] = capture_meta.negotiated(d / "initiator.pcap", 3260)
        return meta


def _probe_status(d: Path, role: str) -> dict[str, Any]:
    """One end's probe outcome: its hook table (events-<end>.meta.json) or why there is none."""
    side = d / f"events-{role}.meta.json"
    if not side.exists():
        log = d / f"probe-{role}.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        return {"status": "failed: " + " / ".join(tail) if tail else "failed: no output"}
    info = json.loads(side.read_text())
    return {"status": "ok" if info.get("state") == "done" else str(info.get("state")),
            "events": info.get("events"), "lost": info.get("lost"),
            "hooks": info.get("hooks", {})}


def _reap(pid: int) -> bool:
    """Collect the vng process if this process started it and it has exited (else it stays
    a zombie that looks alive, and `down` would wait out its whole deadline). True always:
    a loop condition."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return True


def _load_state(name: str) -> dict[str, Any] | None:
    return testbed_state.read(run_dir(name) / "state.json")


def _save_state(name: str, state: dict[str, Any]) -> None:
    testbed_state.write(run_dir(name) / "state.json", state)


# -- workloads ------------------------------------------------------------------------------
def dd_workload(count: int, bs: str = "2M", skip: int = 0) -> str:
    return f"dd if=$DEV of=/dev/null iflag=direct bs={bs} count={count} skip={skip}"


def readers_workload(readers: int, runtime_s: float, bs: int = 512) -> str:
    """`readers` processes each issuing one synchronous O_DIRECT pread at a time (fio psync)."""
    return (f"fio --name=readers --filename=$DEV --rw=randread --bs={bs} --direct=1 "
            f"--ioengine=psync --numjobs={readers} --time_based --runtime={runtime_s:g} "
            f"--group_reporting --output-format=json --randseed=1")


# -- command line ---------------------------------------------------------------------------
def _add_config_args(p: argparse.ArgumentParser) -> None:
    d = VmConfig()
    p.add_argument("--name", default=d.name, help="testbed name (1-6 of a-z0-9)")
    p.add_argument("--delay-ms", type=float, default=d.delay_ms, help="one-way delay, ms")
    p.add_argument("--lun-mb", type=int, default=d.lun_mb)
    _add_tunable_args(p, d)
    p.add_argument("--cpus", type=int, default=d.cpus)
    p.add_argument("--memory-mb", type=int, default=d.memory_mb)
    p.add_argument("--kernel", default="", help="guest kernel (default: newest /boot/vmlinuz)")
    p.add_argument("--boot-timeout", type=float, default=d.boot_timeout_s)


def _add_tunable_args(p: argparse.ArgumentParser, d: VmConfig | None) -> None:
    def dflt(key: str) -> int | None:
        return None if d is None else int(getattr(d, key))
    p.add_argument("--queue-depth", type=int, default=dflt("queue_depth"),
                   help="node.session.queue_depth")
    p.add_argument("--cmds-max", type=int, default=dflt("cmds_max"),
                   help="node.session.cmds_max (power of two)")
    p.add_argument("--max-sectors-kb", type=int, default=dflt("max_sectors_kb"),
                   help="block queue max_sectors_kb (0 = kernel default)")
    p.add_argument("--mrdsl", type=int, default=dflt("mrdsl"),
                   help="initiator MaxRecvDataSegmentLength")
    p.add_argument("--max-burst", type=int, default=dflt("max_burst"), help="MaxBurstLength")
    p.add_argument("--first-burst", type=int, default=dflt("first_burst"),
                   help="FirstBurstLength")


def _config(a: argparse.Namespace) -> VmConfig:
    return VmConfig(name=a.name, delay_ms=a.delay_ms, lun_mb=a.lun_mb,
                    queue_depth=a.queue_depth, cmds_max=a.cmds_max,
                    max_sectors_kb=a.max_sectors_kb, mrdsl=a.mrdsl, max_burst=a.max_burst,
                    first_burst=a.first_burst, cpus=a.cpus, memory_mb=a.memory_mb,
                    kernel=a.kernel, boot_timeout_s=a.boot_timeout)


def _fail(exc: Exception) -> int:
    print(f"vmtestbed: {exc}", file=sys.stderr)
    return 1


def main_up(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="istrace testbed up --kernel",
                                description="boot the full-kernel VM testbed and log in")
    _add_config_args(p)
    a = p.parse_args(argv)
    try:
        tb = VmTestbed(_config(a))
        tb.up()
    except (VmError, ValueError, OSError) as exc:
        return _fail(exc)
    print(json.dumps(tb.info, indent=1))
    return 0


def _name_only(prog: str, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--name", default=VmConfig.name)
    return p.parse_args(argv)


def main_down(argv: list[str]) -> int:
    a = _name_only("istrace testbed down --kernel", argv)
    state = _load_state(a.name)
    if state is None:
        print(f"vmtestbed: {a.name!r} is not up", file=sys.stderr)
        shutil.rmtree(run_dir(a.name), ignore_errors=True)
        return 0
    VmTestbed(VmConfig(**state["config"])).down()
    print(f"vmtestbed: {a.name} down", file=sys.stderr)
    return 0


def main_status(argv: list[str]) -> int:
    a = _name_only("istrace testbed status --kernel", argv)
    state = _load_state(a.name)
    if state is None:
        print(f"{a.name}: down")
        return 1
    alive = VmTestbed(VmConfig(**state["config"])).alive()
    print(json.dumps({"name": a.name, "running": alive, "kernel": state.get("kernel"),
                      "config": state["config"], "session": state.get("info")}, indent=1))
    return 0 if alive else 1


def main_set(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="istrace testbed set --kernel",
                                description="new initiator tunables through a fresh login")
    p.add_argument("--name", default=VmConfig.name)
    _add_tunable_args(p, None)
    a = p.parse_args(argv)
    changes = {k: v for k, v in vars(a).items() if k != "name" and v is not None}
    try:
        info = VmTestbed.attach(a.name).retune(**changes)
    except (VmError, ValueError) as exc:
        return _fail(exc)
    print(json.dumps(info, indent=1))
    return 0


def main_run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="vmtestbed run", description="run a command in the VM")
    p.add_argument("--name", default=VmConfig.name)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    try:
        rc, out = VmTestbed.attach(a.name).run(" ".join(command), timeout_s=a.timeout)
    except VmError as exc:
        return _fail(exc)
    sys.stdout.write(out)
    return rc


def main_capture(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="istrace capture --kernel",
                                description="capture a workload on the VM testbed")
    p.add_argument("--name", default=VmConfig.name)
    p.add_argument("--out", required=True, help="capture directory to write")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--dd-count", type=int, help="dd iflag=direct bs=--bs count=N")
    w.add_argument("--readers", type=int, help="N parallel 512-byte O_DIRECT readers (fio)")
    w.add_argument("--workload", help="any bash command; $DEV is the initiator's disk")
    p.add_argument("--bs", default="2M")
    p.add_argument("--runtime", type=float, default=5.0, help="seconds, for --readers")
    p.add_argument("--probes", choices=PROBE_MODES, default="istrace",
                   help="istrace-probe (default), or packets only")
    p.add_argument("--replace", action="store_true",
                   help="when --out holds an earlier capture, remove it and everything derived "
                        "from it first (without, the capture refuses to start)")
    a = p.parse_args(argv)
    try:
        layout.clear_for_capture(Path(a.out), a.replace)
    except (layout.EarlierCapture, OSError) as exc:
        print(f"vmtestbed: {exc}", file=sys.stderr)
        return 2
    if a.readers is not None:
        workload = readers_workload(a.readers, a.runtime)
    elif a.workload:
        workload = a.workload
    else:
        workload = dd_workload(a.dd_count or 1, a.bs)
    try:
        dest = VmTestbed.attach(a.name).capture(a.out, workload, probes=a.probes)
    except (VmError, OSError) as exc:
        return _fail(exc)
    print(f"vmtestbed: capture in {dest}", file=sys.stderr)
    return 0


_ACTIONS = {"up": main_up, "down": main_down, "status": main_status, "set": main_set,
            "run": main_run, "capture": main_capture}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in _ACTIONS:
        print(f"usage: python -m istrace.testbed.vm {{{'|'.join(_ACTIONS)}}} [options]",
              file=sys.stderr)
        return 2
    return _ACTIONS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

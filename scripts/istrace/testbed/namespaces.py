"""The built-in testbed: initiator and target namespaces, tgtd, and an emulated path.

    from istrace.testbed.namespaces import Testbed, TestbedConfig
    with Testbed(TestbedConfig(name="dec1", delay_ms=16)) as tb:
        tb.run_ini(["iscsi-ls", f"iscsi://{tb.portal}"])

Without path emulation the two namespaces share one veth pair. With a delay, rate, loss or
queue limit a middle namespace routes every packet through TUN devices into the dummynet
forwarder (scripts/dummynet), or through netem where the kernel has it. Addresses are the same
either way (initiator 10.77.0.1, target 10.77.0.2), so captures always show one connection key.
Everything created is recorded in /run/istrace/<name>/state.json first, so `istrace testbed
down --name NAME` clears it even after a kill -9 of the process that built it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from istrace.system import netns
from istrace.testbed import cpucap, pattern
from istrace.testbed import path as testbed_path
from istrace.testbed import state as testbed_state
from istrace.testbed import tgt as testbed_tgt
from istrace.testbed.lifecycle import UpDown

INI_IP = "10.77.0.1"
TGT_IP = "10.77.0.2"
MID_IP = testbed_path.MID_IP
ISCSI_PORT = 3260
MTU_MIN, MTU_MAX = 576, testbed_path.MTU_MAX
_NAME_RE = re.compile(r"^[a-z0-9]{1,6}$")


@dataclass
class TestbedConfig:
    """Settings of one testbed. Delays in ms, rate in Mbit/s, loss a fraction (0.05 = 5%)."""

    __test__ = False  # not a pytest test class, despite the name

    name: str = "ist"
    delay_ms: float = 0.0                # one-way, both directions
    delay_i2t_ms: float | None = None    # overrides delay_ms for initiator -> target
    delay_t2i_ms: float | None = None    # overrides delay_ms for target -> initiator
    rate_mbit: float = 0.0               # 0 = unlimited
    loss: float = 0.0                    # drop probability per packet, each direction
    queue: int = 0                       # forwarder queue limit in packets, 0 = default
    txqueuelen: int = 0                  # transmit queue of each end's interface, 0 = default
    nic_rate_mbit: float = 0.0           # each end's interface sends at most this (htb)
    mtu: int = 0                         # every link of the path, bytes (0 = 1500)
    lun_mb: int = 64
    lun2_mb: int = 0                     # optional second LUN (2), same pattern
    targets: int = 1                     # more targets: IQN.t2, IQN.t3, ... each with a LUN 1
    chap_user: str | None = None
    chap_secret: str | None = None
    chap_mutual_user: str | None = None  # target's own credentials for mutual CHAP
    chap_mutual_secret: str | None = None
    emulator: str = "auto"               # auto | dummynet | netem
    offloads: bool = False               # leave TSO/GSO/GRO on (segments bigger than the wire)
    seed: int = 1                        # loss RNG seed of the forwarder
    ini_rmem: int = 0                    # initiator's tcp_rmem max, bytes (0 = 64 MiB)
    tgt_wmem: int = 0                    # target's tcp_wmem max, bytes (0 = 64 MiB)
    tgt_rmem: int = 0                    # target's tcp_rmem max, bytes (0 = 64 MiB): WRITEs'
                                         # window (tgtd's accepted sockets take the buffer
                                         # its listener got when it started)
    tgt_cpu: float = 0.0                 # tgtd's CPU cap, % of one CPU (0 = none)
    ini_cpu: float = 0.0                 # the workload's CPU cap, % of one CPU (0 = none)
    tgt_cwnd: int = 0                    # target's congestion window clamp, segments (0 = none)
    # iSCSI keys the target offers (tgtadm --op update: InitialR2T, FirstBurstLength, ...)
    tgt_params: dict[str, str] = field(default_factory=dict)
    cc: str = ""                         # TCP congestion control of both ends ("" = host's)
    extra: dict[str, Any] = field(default_factory=dict)

    def one_way(self) -> tuple[float, float]:
        i2t = self.delay_ms if self.delay_i2t_ms is None else self.delay_i2t_ms
        t2i = self.delay_ms if self.delay_t2i_ms is None else self.delay_t2i_ms
        return float(i2t), float(t2i)

    def emulated(self) -> bool:
        return any(self.one_way()) or self.rate_mbit > 0 or self.loss > 0 or self.queue > 0

    def validate(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"testbed name {self.name!r}: use 1-6 lower-case letters/digits")
        for d in self.one_way():
            if not 0 <= d <= 200:
                raise ValueError(f"one-way delay {d} ms outside 0..200")
        for rate in (self.rate_mbit, self.nic_rate_mbit):
            if rate < 0 or rate > 100000:
                raise ValueError(f"rate {rate} Mbit/s out of range")
        if self.mtu and not MTU_MIN <= self.mtu <= MTU_MAX:
            raise ValueError(f"MTU {self.mtu}: {MTU_MIN}..{MTU_MAX} (the forwarder carries "
                             f"packets up to {MTU_MAX} bytes)")
        if self.txqueuelen < 0 or self.queue < 0:
            raise ValueError("queue lengths must be >= 0")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss {self.loss} must be a fraction in [0, 1)")
        if not 1 <= self.targets <= 16:
            raise ValueError(f"targets {self.targets}: 1..16")
        if self.lun_mb < 1 or self.lun2_mb < 0:
            raise ValueError("lun size must be >= 1 MiB")
        if (self.chap_user is None) != (self.chap_secret is None):
            raise ValueError("CHAP needs both a user and a secret")
        for b in (self.ini_rmem, self.tgt_wmem, self.tgt_rmem):
            if b and b < 4096:
                raise ValueError(f"socket buffer {b} bytes: at least 4096")
        if not 0 <= self.tgt_cwnd <= 100000:
            raise ValueError(f"cwnd clamp {self.tgt_cwnd} segments out of range")
        for c in (self.tgt_cpu, self.ini_cpu):
            if c < 0:
                raise ValueError(f"CPU cap {c}% must be >= 0")
        if self.emulator not in ("auto", "dummynet", "netem"):
            raise ValueError(f"emulator {self.emulator!r}: auto, dummynet or netem")
        for key, value in self.tgt_params.items():
            if not key.isalnum() or not str(value).replace("-", "").isalnum():
                raise ValueError(f"target key {key}={value}: letters and digits only")


class TestbedError(RuntimeError):
    pass


def _host_cc() -> str:
    """The congestion control new namespaces inherit (the host's default)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
            return f.read().strip()
    except OSError:
        return "?"


def owner_alive(state: dict[str, Any]) -> int | None:
    """The pid of the live process that made this testbed, or None when it has exited.
    Without a recorded start time (older state files) any live process of that pid counts."""
    owner, start = state.get("owner_pid"), state.get("owner_start")
    if not owner:
        return None
    now = testbed_state.proc_start(int(owner))
    if now is not None and (start is None or now == start):
        return int(owner)
    return None


class Testbed(UpDown):
    """One testbed; a context manager that brings it up on enter and down on exit."""

    __test__ = False

    def __init__(self, cfg: TestbedConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        n = cfg.name
        self.ini_ns, self.tgt_ns = f"ist-{n}-i", f"ist-{n}-t"
        self.mid_ns: str | None = f"ist-{n}-m" if cfg.emulated() else None
        self.ini_dev, self.tgt_dev = f"ist{n}-i", f"ist{n}-t"
        self.ini_ip, self.tgt_ip = INI_IP, TGT_IP
        self.portal = f"{TGT_IP}:{ISCSI_PORT}"
        self.iqn = f"iqn.2026-11.org.istrace:{n}"
        self.run_dir = testbed_state.run_dir(n)
        self.lun_path = str(self.run_dir / "lun1.img")
        self.lun2_path: str | None = str(self.run_dir / "lun2.img") if cfg.lun2_mb else None
        # every target's IQN (tid k+1) and its LUN 1 file; the first is `iqn`/`lun_path`
        self.iqns = [self.iqn] + [f"{self.iqn}.t{k}" for k in range(2, cfg.targets + 1)]
        self.lun_paths = [self.lun_path] + [str(self.run_dir / f"lun1-t{k}.img")
                                            for k in range(2, cfg.targets + 1)]
        self.control_port = 0
        self.emulator = "none"
        self.state: dict[str, Any] = {}
        self._owner = False

    # ---- life cycle -------------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str) -> Testbed:
        """The running testbed `name` (made by another process); down() is left to its owner."""
        state = testbed_state.load(name)
        if state is None:
            raise TestbedError(f"no testbed named {name!r} (istrace testbed up --name {name})")
        cfg = TestbedConfig(**{k: v for k, v in state["config"].items()
                               if k in TestbedConfig.__dataclass_fields__})
        tb = cls(cfg)
        tb.state = state
        tb.control_port = int(state.get("control_port", 0))
        tb.emulator = state.get("emulator", "none")
        return tb

    def up(self) -> None:
        self._clear_leftovers()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.state = {"name": self.cfg.name, "config": asdict(self.cfg), "netns": [],
                      "root_links": [], "pids": [], "files": [], "created": time.time(),
                      "owner_pid": os.getpid(),
                      "owner_start": testbed_state.proc_start(os.getpid())}
        self._owner = True
        testbed_state.save(self.state)
        try:
            self._make_network()
            self._make_target()
            self._make_workload_cgroup()
            self._clamp_cwnd()
            self.state["ready"] = True
            testbed_state.save(self.state)
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        """Remove every namespace, link, process and file this testbed made."""
        state = testbed_state.load(self.cfg.name) or self.state
        if not state:
            return
        problems = testbed_state.teardown(state)
        if problems:
            raise TestbedError("; ".join(problems))

    @property
    def tgtd_pid(self) -> int | None:
        state = testbed_state.load(self.cfg.name) or self.state
        pids = [int(p["pid"]) for p in state.get("pids", []) if p.get("what") == "tgtd"]
        return pids[0] if pids else None

    def _clear_leftovers(self) -> None:
        old = testbed_state.load(self.cfg.name)
        owner = owner_alive(old or {})
        if owner and owner != os.getpid():
            raise TestbedError(f"testbed {self.cfg.name!r} is in use by live process {owner}; "
                               f"pick another name or `istrace testbed down --name "
                               f"{self.cfg.name}`")
        if old is not None:
            print(f"testbed {self.cfg.name}: clearing the leftovers of an earlier run",
                  file=sys.stderr)
            testbed_state.teardown(old)
        for ns in (self.ini_ns, self.tgt_ns, f"ist-{self.cfg.name}-m"):
            if netns.ns_exists(ns):
                testbed_state.teardown({"name": self.cfg.name, "netns": [ns]})

    def _add_ns(self, ns: str) -> None:
        self.state["netns"].append(ns)
        testbed_state.save(self.state)
        netns.ns_add(ns)

    # ---- network ----------------------------------------------------------------------------
    def _make_network(self) -> None:
        self._add_ns(self.ini_ns)
        self._add_ns(self.tgt_ns)
        cfg = self.cfg
        use_netem = False
        if cfg.emulated() and cfg.emulator != "dummynet":
            use_netem = testbed_path.netem_available(self.ini_ns)
            if cfg.emulator == "netem" and not use_netem:
                raise TestbedError("netem is not available in this kernel (use --emulator auto)")
        if not cfg.emulated() or use_netem:
            self.mid_ns = None
            netns.veth(self.ini_dev, self.ini_ns, self.tgt_dev, self.tgt_ns)
            for dev, ns, me, peer in ((self.ini_dev, self.ini_ns, INI_IP, TGT_IP),
                                      (self.tgt_dev, self.tgt_ns, TGT_IP, INI_IP)):
                netns.sh(["ip", "addr", "add", f"{me}/32", "peer", f"{peer}/32", "dev", dev],
                         ns=ns)
        else:
            assert self.mid_ns is not None
            self._add_ns(self.mid_ns)
            testbed_path.routed_links(self, MID_IP)
        big = 67108864  # room for a 1 Gbit/s x 400 ms window: the path limits a transfer
        for dev, ns in ((self.ini_dev, self.ini_ns), (self.tgt_dev, self.tgt_ns)):
            rmem = (cfg.ini_rmem if ns == self.ini_ns else cfg.tgt_rmem) or big
            wmem = cfg.tgt_wmem if ns == self.tgt_ns and cfg.tgt_wmem else big
            # A small cap is the point (a window-limited scenario): the default and the
            # initial value shrink with it.
            netns.sysctl(ns, "net.ipv4.tcp_rmem", f"4096 {min(131072, rmem)} {rmem}")
            netns.sysctl(ns, "net.ipv4.tcp_wmem", f"4096 {min(16384, wmem)} {wmem}")
            if cfg.cc:
                try:
                    netns.sysctl(ns, "net.ipv4.tcp_congestion_control", cfg.cc)
                except netns.NetError as exc:
                    raise TestbedError(f"congestion control {cfg.cc!r}: {exc}") from None
            if not cfg.offloads:
                netns.offloads_off(dev, ns)
            if cfg.txqueuelen or cfg.nic_rate_mbit:
                testbed_path.set_txqueuelen(dev, ns, cfg.txqueuelen, cfg.nic_rate_mbit)
        if cfg.emulated():
            if use_netem:
                self.emulator = "netem"
                testbed_path.netem(self)
            else:
                self.emulator = "dummynet"
                testbed_path.start_dummynet(self)
        if cfg.mtu:
            testbed_path.set_mtu(self, cfg.mtu)
        self.state.update(emulator=self.emulator, mid_ns=self.mid_ns, ini_ns=self.ini_ns,
                          tgt_ns=self.tgt_ns, ini_ip=INI_IP, tgt_ip=TGT_IP)
        testbed_state.save(self.state)
        self._wait_path()
        if self.emulator == "dummynet":
            testbed_path.calibrate(self)
            testbed_state.save(self.state)

    def _wait_path(self) -> None:
        """The path carries packets both ways (a ping answered) before anyone uses it."""
        rtt_s = sum(self.cfg.one_way()) / 1000
        for _ in range(20):
            r = self.run_ini(["ping", "-c", "1", "-W", str(max(1, int(rtt_s * 4) + 1)),
                              TGT_IP], capture_output=True)
            if r.returncode == 0:
                return
        raise TestbedError(f"no ping answer from {TGT_IP} across the testbed path")

    # ---- target -----------------------------------------------------------------------------
    def _make_target(self) -> None:
        cfg = self.cfg
        for path in self.lun_paths:
            self.state["files"].append(path)
            testbed_state.save(self.state)
            pattern.fill(path, cfg.lun_mb << 20)
        if self.lun2_path:
            self.state["files"].append(self.lun2_path)
            pattern.fill(self.lun2_path, cfg.lun2_mb << 20)
        self.control_port = testbed_tgt.pick_control_port(cfg.name)
        self.state["control_port"] = self.control_port
        self.state["files"] += testbed_tgt.socket_files(self.control_port)
        testbed_state.save(self.state)
        log = open(self.run_dir / "tgtd.log", "wb")  # noqa: SIM115 - the daemon owns it
        proc = subprocess.Popen(testbed_tgt.tgtd_argv(self.tgt_ns, TGT_IP, self.control_port,
                                                        self.run_dir),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
        log.close()
        testbed_state.add_pid(self.state, proc.pid, "tgtd", hard=True)
        if cfg.tgt_cpu:
            try:
                cg = cpucap.cap(f"istrace-{cfg.name}-tgtd", proc.pid, cfg.tgt_cpu)
            except (cpucap.CpuCapError, OSError) as exc:
                raise TestbedError(f"--tgt-cpu {cfg.tgt_cpu:g}: {exc}") from None
            self.state.setdefault("cgroups", []).append(str(cg))
            testbed_state.save(self.state)
        adm = testbed_tgt.Tgtadm(self.control_port)
        adm.wait_ready(proc)
        tids = list(range(1, len(self.iqns) + 1))
        for tid, iqn, path in zip(tids, self.iqns, self.lun_paths, strict=True):
            adm.add_target(tid, iqn)
            adm.add_lun(tid, 1, path)
            if tid == 1 and self.lun2_path:
                adm.add_lun(1, 2, self.lun2_path)
            adm.allow_all(tid)
            for key, value in cfg.tgt_params.items():
                adm.set_param(tid, key, value)
        if cfg.chap_user and cfg.chap_secret:
            adm.chap(tids, cfg.chap_user, cfg.chap_secret)
            if cfg.chap_mutual_user and cfg.chap_mutual_secret:
                adm.chap(tids, cfg.chap_mutual_user, cfg.chap_mutual_secret, outgoing=True)
        self.state.update(portal=self.portal, iqn=self.iqn, lun_path=self.lun_path,
                          iqns=self.iqns, lun_paths=self.lun_paths)
        testbed_state.save(self.state)

    def set_target_keys(self, keys: dict[str, str]) -> None:
        """Change the iSCSI keys tgtd offers on every target; sessions that log in from now
        on negotiate them (a sweep changes keys between points without a new testbed)."""
        for key, value in keys.items():
            if not key.isalnum() or not str(value).replace("-", "").isalnum():
                raise ValueError(f"target key {key}={value}: letters and digits only")
        adm = testbed_tgt.Tgtadm(self.control_port)
        for tid in range(1, len(self.iqns) + 1):
            for key, value in keys.items():
                adm.set_param(tid, key, str(value))
        self.cfg.tgt_params.update({k: str(v) for k, v in keys.items()})

    # ---- running things inside -----------------------------------------------------------------
    def run_ini(self, cmd: list[str] | str, **kw: Any) -> subprocess.CompletedProcess[Any]:
        kw.setdefault("text", True)
        return subprocess.run(netns.in_ns(self.ini_ns, cmd), check=False, **kw)

    def run_tgt(self, cmd: list[str] | str, **kw: Any) -> subprocess.CompletedProcess[Any]:
        kw.setdefault("text", True)
        return subprocess.run(netns.in_ns(self.tgt_ns, cmd), check=False, **kw)

    def wait_iscsi_closed(self, timeout: float = 10.0) -> bool:
        """Wait until neither namespace holds an iSCSI socket that may still send (one
        neither listening nor in TIME-WAIT), at most `timeout` s; whether they all closed.
        On a lossy or busy path a connection's last packets (a FIN sent again after a loss,
        the ACK of it) come seconds after the workload exits: a capture stopped before them
        counts them as received and never writes them."""
        deadline = time.monotonic() + timeout
        query = ["ss", "-tanH", f"( sport = :{ISCSI_PORT} or dport = :{ISCSI_PORT} )"]
        while True:
            lines = [line for run in (self.run_ini, self.run_tgt)
                     for line in run(query, capture_output=True, timeout=10).stdout.splitlines()
                     if line.strip()]
            if all(line.split()[0] in ("LISTEN", "TIME-WAIT") for line in lines):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def popen_ini(self, cmd: list[str] | str, **kw: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(netns.in_ns(self.ini_ns, cmd), **kw)

    def popen_tgt(self, cmd: list[str] | str, **kw: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(netns.in_ns(self.tgt_ns, cmd), **kw)

    def _clamp_cwnd(self) -> None:
        """--tgt-cwnd N: the target's route to the initiator gets `cwnd lock N`. A connection
        takes a locked cwnd as its clamp only from the TCP metrics cache (tcp_init_metrics),
        which a connection fills when it closes: one throw-away connection to the portal
        does, and the cache is checked."""
        n = self.cfg.tgt_cwnd
        if not n:
            return
        route = netns.sh(["ip", "route", "show", self.ini_ip], ns=self.tgt_ns).split()
        if not route:
            raise TestbedError(f"--tgt-cwnd: no route to {self.ini_ip} in {self.tgt_ns}")
        netns.sh(["ip", "route", "change", *route, "cwnd", "lock", str(n)], ns=self.tgt_ns)
        netns.sh(["ip", "tcp_metrics", "flush", "all"], check=False, ns=self.tgt_ns)
        host, port = self.portal.rsplit(":", 1)
        probe = ("import socket, time\n"
                 f"s = socket.create_connection(({host!r}, {port}), timeout=5)\n"
                 "time.sleep(0.05)\ns.close()\n")
        metric = ""
        for _ in range(20):
            self.run_ini([sys.executable, "-c", probe], capture_output=True, timeout=10)
            time.sleep(0.1)
            metric = netns.sh(["ip", "tcp_metrics", "show", self.ini_ip], check=False,
                              ns=self.tgt_ns)
            if f"cwnd {n}" in metric.split(" rtt")[0]:
                return
        raise TestbedError(f"--tgt-cwnd {n}: the TCP metrics cache did not take the clamp "
                           f"({metric.strip() or 'no entry'})")

    def _make_workload_cgroup(self) -> None:
        """--ini-cpu: an empty cgroup capped at that share of one CPU; record_pid() moves the
        workload into it."""
        cfg = self.cfg
        if not cfg.ini_cpu:
            return
        try:
            cg = cpucap.make(f"istrace-{cfg.name}-workload", cfg.ini_cpu)
        except (cpucap.CpuCapError, OSError) as exc:
            raise TestbedError(f"--ini-cpu {cfg.ini_cpu:g}: {exc}") from None
        self.state.setdefault("cgroups", []).append(str(cg))
        self.state["workload_cgroup"] = str(cg)
        testbed_state.save(self.state)

    def record_pid(self, pid: int, what: str) -> None:
        """Note a process this testbed's `down` must stop (captures, probes, workloads); a
        workload goes into the --ini-cpu cgroup with its children."""
        state = testbed_state.load(self.cfg.name) or self.state
        testbed_state.add_pid(state, pid, what)
        self.state = state
        cg = state.get("workload_cgroup")
        if what == "workload" and cg:
            try:
                cpucap.move_tree(Path(cg), pid)
            except OSError as exc:
                raise TestbedError(f"--ini-cpu: cannot move the workload into {cg}: {exc}") \
                    from None

    def describe(self) -> dict[str, Any]:
        i2t, t2i = self.cfg.one_way()
        return {"name": self.cfg.name, "ini_ns": self.ini_ns, "tgt_ns": self.tgt_ns,
                "mid_ns": self.mid_ns, "ini_ip": self.ini_ip, "tgt_ip": self.tgt_ip,
                "ini_dev": self.ini_dev, "tgt_dev": self.tgt_dev,
                "portal": self.portal, "iqn": self.iqn, "lun_path": self.lun_path,
                "iqns": self.iqns,
                "lun_mb": self.cfg.lun_mb, "emulator": self.emulator,
                "delay_i2t_ms": i2t, "delay_t2i_ms": t2i, "rate_mbit": self.cfg.rate_mbit,
                "loss": self.cfg.loss, "queue": self.cfg.queue,
                "txqueuelen": self.cfg.txqueuelen, "nic_rate_mbit": self.cfg.nic_rate_mbit,
                "mtu": self.cfg.mtu or 1500, "offloads": self.cfg.offloads,
                "ini_rmem": self.cfg.ini_rmem,
                "tgt_wmem": self.cfg.tgt_wmem, "tgt_rmem": self.cfg.tgt_rmem,
                "tgt_cpu": self.cfg.tgt_cpu,
                "ini_cpu": self.cfg.ini_cpu, "tgt_params": dict(self.cfg.tgt_params),
                "tgt_cwnd": self.cfg.tgt_cwnd,
                "cc": self.cfg.cc or _host_cc(),
                "chap": bool(self.cfg.chap_user), "control_port": self.control_port}


def config_from_args(a: Any) -> TestbedConfig:
    """The testbed settings among a command line's options (`testbed up`, `capture`)."""
    return TestbedConfig(name=a.name, delay_ms=a.delay, delay_i2t_ms=a.delay_i2t,
                         delay_t2i_ms=a.delay_t2i, rate_mbit=a.rate, loss=a.loss,
                         queue=a.queue, txqueuelen=a.txqueuelen, nic_rate_mbit=a.nic_rate,
                         mtu=getattr(a, "mtu", 0),
                         lun_mb=a.lun_mb, lun2_mb=a.lun2_mb, targets=a.targets,
                         chap_user=a.chap_user, chap_secret=a.chap_secret,
                         chap_mutual_user=a.chap_mutual_user,
                         chap_mutual_secret=a.chap_mutual_secret, emulator=a.emulator,
                         offloads=a.offloads, ini_rmem=getattr(a, "ini_rmem", 0),
                         tgt_wmem=getattr(a, "tgt_wmem", 0), tgt_rmem=getattr(a, "tgt_rmem", 0),
                         tgt_cpu=getattr(a, "tgt_cpu", 0.0),
                         ini_cpu=getattr(a, "ini_cpu", 0.0),
                         tgt_cwnd=getattr(a, "tgt_cwnd", 0),
                         tgt_params=dict(getattr(a, "tgt_param", None) or []),
                         cc=getattr(a, "cc", "") or "")

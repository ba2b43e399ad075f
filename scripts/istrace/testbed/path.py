"""Path emulation: the routed middle namespace and the dummynet forwarder, or netem.

Middle namespace layout (i2t shown; t2i mirrors it through the second TUN device):

    ini ns           mid ns                                              tgt ns
    istN-i  <veth>   istN-mi --(ip rule iif istN-mi -> table 100)--> istN-di (TUN)
                                        dummynet reads, holds for the delay, writes back
                     istN-di --(main table: 10.77.0.2 dev istN-mt)--> istN-mt <veth> istN-t

A packet written into a TUN device enters the middle namespace's stack as if received on it,
so the main routing table forwards it on to the far veth; only packets arriving on a veth are
steered into the forwarder, which keeps the two directions apart without any bridge.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

from istrace.system import netns
from istrace.system.paths import REPO_ROOT
from istrace.testbed import state as testbed_state


class Testbed(Protocol):
    """What the path needs of a testbed (istrace.testbed.namespaces.Testbed has it): the
    hosts' namespaces, devices and addresses, its settings, run folder and state record."""

    cfg: Any
    state: dict[str, Any]
    run_dir: Path
    ini_ns: str
    tgt_ns: str
    mid_ns: str | None
    ini_dev: str
    tgt_dev: str
    ini_ip: str
    tgt_ip: str

    def run_ini(self, cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[Any]: ...

TABLE_I2T, TABLE_T2I = 100, 101
MID_IP = "10.77.0.254"
COMP_MAX_US = 100
# With a rate limit and no --queue: a router-sized queue of one bandwidth-delay product (at
# least Linux's default txqueuelen, 1000), not the forwarder's whole ring, which would hold
# seconds of traffic and wreck TCP's feedback.
DEFAULT_QUEUE = 1000


def default_queue(rate_mbit: float, rtt_ms: float) -> int:
    """Packets of 1500 bytes in one bandwidth-delay product, at least DEFAULT_QUEUE."""
    if not rate_mbit:
        return 0
    bdp = rate_mbit * 1e6 * rtt_ms / 1e3 / (8 * 1500)
    return max(DEFAULT_QUEUE, int(bdp + 0.999))
# SCHED_FIFO forwarder threads: packets leave on time even on a busy machine.
RT = os.environ.get("ISTRACE_DUMMYNET_RT", "1") != "0"


class PathError(RuntimeError):
    pass


def dummynet_binary() -> Path:
    local = REPO_ROOT / "scripts" / "dummynet" / "istrace-dummynet"
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which("istrace-dummynet")
    if found:
        return Path(found)
    raise PathError(f"istrace-dummynet is not built: run `make -C {REPO_ROOT}/scripts`")


def netem_available(ns: str) -> bool:
    """Probe at run time: can a netem qdisc be attached here (on this namespace's lo)?"""
    ok = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root",
                         "netem", "delay", "0ms"], capture_output=True).returncode == 0
    if ok:
        netns.sh(["tc", "qdisc", "del", "dev", "lo", "root"], ns=ns, check=False)
    return ok


def set_txqueuelen(dev: str, ns: str, qlen: int, nic_rate_mbit: float = 0.0) -> None:
    """The end's transmit queue (the study's NIC buffer). veth has no qdisc by default, so a
    pfifo of that many packets is attached for the length to mean anything. With a NIC rate
    the end sends no faster than that (htb), so its own queue fills and overflows the way a
    real NIC's does: a drop there is local congestion, which puts TCP into CWR."""
    qlen = qlen or 1000
    netns.sh(["ip", "link", "set", "dev", dev, "txqueuelen", str(qlen)], ns=ns)
    if not nic_rate_mbit:
        netns.sh(["tc", "qdisc", "replace", "dev", dev, "root", "pfifo", "limit", str(qlen)],
                 ns=ns)
        return
    rate = f"{nic_rate_mbit}mbit"
    netns.sh(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
              "default", "1"], ns=ns)
    netns.sh(["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
              "rate", rate, "ceil", rate], ns=ns)
    netns.sh(["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo",
              "limit", str(qlen)], ns=ns)


MTU_MAX = 9000  # istrace-dummynet's slots hold 9216 bytes: a jumbo frame's IP packet


def set_mtu(tb: Testbed, mtu: int) -> None:
    """The same MTU on every link of the path: both ends, and the middle's veths and TUNs."""
    devs = [(tb.ini_dev, tb.ini_ns), (tb.tgt_dev, tb.tgt_ns)]
    if tb.mid_ns is not None:
        devs += [(dev, tb.mid_ns) for dev in mid_devs(tb)
                 if netns.link_exists(dev, tb.mid_ns)]
    for dev, ns in devs:
        netns.sh(["ip", "link", "set", "dev", dev, "mtu", str(mtu)], ns=ns)


def mid_devs(tb: Testbed) -> tuple[str, str, str, str]:
    n = tb.cfg.name
    return f"ist{n}-mi", f"ist{n}-mt", f"ist{n}-di", f"ist{n}-dt"


def routed_links(tb: Testbed, mid_ip: str) -> None:
    """ini <-> mid <-> tgt with /32 point-to-point addresses, forwarding on in mid."""
    mid = tb.mid_ns
    assert mid is not None
    mi, mt, _, _ = mid_devs(tb)
    netns.veth(tb.ini_dev, tb.ini_ns, mi, mid)
    netns.veth(tb.tgt_dev, tb.tgt_ns, mt, mid)
    for dev, ns, me, far in ((tb.ini_dev, tb.ini_ns, tb.ini_ip, tb.tgt_ip),
                             (tb.tgt_dev, tb.tgt_ns, tb.tgt_ip, tb.ini_ip)):
        netns.sh(["ip", "addr", "add", f"{me}/32", "peer", f"{mid_ip}/32", "dev", dev], ns=ns)
        netns.sh(["ip", "route", "add", f"{far}/32", "via", mid_ip, "dev", dev], ns=ns)
    for dev, peer in ((mi, tb.ini_ip), (mt, tb.tgt_ip)):
        netns.sh(["ip", "addr", "add", f"{mid_ip}/32", "peer", f"{peer}/32", "dev", dev], ns=mid)
        netns.offloads_off(dev, mid)
    for key, value in (("net.ipv4.ip_forward", "1"), ("net.ipv4.conf.all.rp_filter", "0"),
                       ("net.ipv4.conf.default.rp_filter", "0"),
                       ("net.ipv4.conf.all.send_redirects", "0"),
                       ("net.ipv4.conf.default.send_redirects", "0")):
        netns.sysctl(mid, key, value)
    for dev in (mi, mt):
        netns.sysctl(mid, f"net.ipv4.conf.{dev}.rp_filter", "0")


def start_dummynet(tb: Testbed) -> None:
    """Start the forwarder in the middle namespace and steer each direction into its TUN."""
    mid = tb.mid_ns
    assert mid is not None
    mi, mt, di, dt = mid_devs(tb)
    cfg = tb.cfg
    i2t, t2i = cfg.one_way()
    argv = ["ip", "netns", "exec", mid, str(dummynet_binary()),
            "--tun-i2t", di, "--tun-t2i", dt,
            "--delay-i2t-us", str(int(round(i2t * 1000))),
            "--delay-t2i-us", str(int(round(t2i * 1000))),
            "--rate-bps", str(int(cfg.rate_mbit * 1e6)), "--loss", repr(cfg.loss),
            "--queue", str(cfg.queue or default_queue(cfg.rate_mbit, i2t + t2i)),
            "--seed", str(cfg.seed),
            "--stats", str(tb.run_dir / "dummynet.json"),
            "--control", str(tb.run_dir / "dummynet.ctl"), *(["--rt"] if RT else []),
            *(["--mtu", str(cfg.mtu)] if cfg.mtu else [])]
    log = open(tb.run_dir / "dummynet.log", "wb")  # noqa: SIM115 - the daemon owns it
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    testbed_state.add_pid(tb.state, proc.pid, "dummynet")
    tb.state["dummynet_pid"] = proc.pid
    deadline = time.monotonic() + 10
    while not (netns.link_exists(di, mid) and netns.link_exists(dt, mid)):
        if proc.poll() is not None or time.monotonic() > deadline:
            text = (tb.run_dir / "dummynet.log").read_text(errors="replace").strip()
            raise PathError(f"dummynet did not start: {text or proc.returncode}")
        time.sleep(0.05)
    for dev in (di, dt):
        netns.sh(["ip", "link", "set", "dev", dev, "txqueuelen", "10000", "up"], ns=mid)
        netns.sysctl(mid, f"net.ipv4.conf.{dev}.rp_filter", "0")
    for iif, table, tun in ((mi, TABLE_I2T, di), (mt, TABLE_T2I, dt)):
        netns.sh(["ip", "route", "add", "default", "dev", tun, "table", str(table)], ns=mid)
        netns.sh(["ip", "rule", "add", "iif", iif, "lookup", str(table), "pref", str(table)],
                 ns=mid)


def rt_prefix() -> list[str]:
    """`chrt -f 20` where real-time priority is allowed, else nothing."""
    ok = subprocess.run(["chrt", "-f", "20", "true"], capture_output=True).returncode == 0
    return ["chrt", "-f", "20"] if ok else []


def _low_rtt_ms(tb: Testbed, dst: str, count: int) -> float | None:
    """25th percentile of `count` pings: robust against the load spikes of a shared machine.
    ping runs SCHED_FIFO like the forwarder, so the scheduler's queue is not measured."""
    r = tb.run_ini([*rt_prefix(), "ping", "-n", "-c", str(count), "-i", "0.02", "-W", "2",
                    dst], capture_output=True, timeout=30)
    rtts = sorted(float(x) for x in re.findall(r"time=([0-9.]+)", r.stdout))
    return rtts[len(rtts) // 4] if len(rtts) >= 3 else None


def calibrate(tb: Testbed) -> int:
    """Measure the forwarder's own latency and have it taken off the hold time.

    RTT through the forwarder = set delays + serialisation + the forwarder's cost + the stack
    cost of the hops. Everything beyond the set delays and serialisation, halved, is the
    per-direction compensation in microseconds (0 when noise makes it negative), so the set
    delay is the whole one-way latency, as a ping sees it. Only the hold time changes; with
    delay 0 nothing can be taken off.
    """
    cfg = tb.cfg
    through = _low_rtt_ms(tb, tb.tgt_ip, 15)
    if through is None:
        return 0
    serial_ms = 2 * 84 * 8 / (cfg.rate_mbit * 1e3) if cfg.rate_mbit else 0.0
    excess_ms = through - sum(cfg.one_way()) - serial_ms
    # capped: a forwarder that costs more than 100 us per pass is overloaded, not slow
    comp_us = max(0, min(int(excess_ms * 1000 / 2), COMP_MAX_US,
                         min(int(d * 1000) for d in cfg.one_way())))
    (tb.run_dir / "dummynet.ctl").write_text(f"compensate_us {comp_us}\n")
    pid = int(tb.state["dummynet_pid"])
    if testbed_state.proc_start(pid) is not None:
        os.kill(pid, signal.SIGUSR1)
    tb.state["compensate_us"] = comp_us
    return comp_us


def netem(tb: Testbed) -> None:
    """Where the kernel has netem: delay/rate/loss/limit as a root qdisc on each end."""
    cfg = tb.cfg
    for dev, ns, delay in ((tb.ini_dev, tb.ini_ns, cfg.one_way()[0]),
                           (tb.tgt_dev, tb.tgt_ns, cfg.one_way()[1])):
        args = ["tc", "qdisc", "replace", "dev", dev, "root", "netem", "delay", f"{delay}ms"]
        if cfg.rate_mbit:
            args += ["rate", f"{cfg.rate_mbit}mbit"]
        if cfg.loss:
            args += ["loss", f"{cfg.loss * 100}%"]
        args += ["limit", str(cfg.queue or max(cfg.txqueuelen, 100000))]
        netns.sh(args, ns=ns)

"""`istrace testbed up|down|status [--kernel]`: the built-in testbed's command line.

The namespace testbed lives in istrace.testbed.namespaces, the full-kernel VM in
istrace.testbed.vm; the path options here are shared with `istrace capture`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from istrace.system import netns
from istrace.testbed import path as testbed_path
from istrace.testbed import state as testbed_state
from istrace.testbed import tgt as testbed_tgt
from istrace.testbed.namespaces import Testbed, TestbedError, config_from_args, owner_alive


def parse_delay(text: str) -> float:
    """'16ms', '0.5s', '200us' or a bare number of ms -> milliseconds."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(us|ms|s)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad delay {text!r} (e.g. 16ms)")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def parse_rate(text: str) -> float:
    """'1gbit', '500mbit', '800kbit', '100m' or a bare number of Mbit/s -> Mbit/s."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmg])?(bit|bps|b)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"bad rate {text!r} (e.g. 1gbit, 500mbit)")
    scale = {"k": 0.001, "m": 1.0, "g": 1000.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def parse_loss(text: str) -> float:
    """'0.1%' -> 0.001; a bare number is a fraction."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad loss {text!r} (e.g. 0.1%)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"loss {text!r} outside [0, 100%)")
    return value


def parse_bytes(text: str) -> int:
    """'64k' -> 65536, '4M' -> 4194304 (binary units), a bare number is bytes."""
    t = text.strip().lower().removesuffix("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 64k, 4M)") from None
    if value < 4096:
        raise argparse.ArgumentTypeError(f"size {text!r}: at least 4096 bytes")
    return value


def parse_key_value(text: str) -> tuple[str, str]:
    """'InitialR2T=No' -> ('InitialR2T', 'No')."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip() or not key.strip().isalnum():
        raise argparse.ArgumentTypeError(f"bad {text!r} (KEY=VALUE, e.g. InitialR2T=No)")
    return key.strip(), value.strip()


def add_path_args(p: argparse.ArgumentParser) -> None:
    """The path and target options `testbed up` and `capture` share."""
    p.add_argument("--name", default="ist", help="testbed name, 1-6 chars (default ist)")
    p.add_argument("--delay", type=parse_delay, default=0.0, help="one-way delay, e.g. 16ms")
    p.add_argument("--delay-i2t", type=parse_delay, default=None)
    p.add_argument("--delay-t2i", type=parse_delay, default=None)
    p.add_argument("--rate", type=parse_rate, default=0.0, help="e.g. 1gbit, 500mbit")
    p.add_argument("--loss", type=parse_loss, default=0.0, help="e.g. 0.1%%")
    p.add_argument("--queue", type=int, default=0, help="forwarder queue limit, packets")
    p.add_argument("--txqueuelen", type=int, default=0, help="each end's transmit queue")
    p.add_argument("--mtu", type=int, default=0,
                   help="MTU of every link of the path, 576..9000 (default 1500; 9000: jumbo "
                        "frames)")
    p.add_argument("--nic-rate", type=parse_rate, default=0.0,
                   help="each end's NIC sends at most this (its txqueuelen then overflows)")
    p.add_argument("--lun-mb", type=int, default=64)
    p.add_argument("--lun2-mb", type=int, default=0, help="second LUN (2) on the first target")
    p.add_argument("--targets", type=int, default=1, help="targets: IQN, IQN.t2, ... (1-16)")
    p.add_argument("--chap-user")
    p.add_argument("--chap-secret")
    p.add_argument("--chap-mutual-user")
    p.add_argument("--chap-mutual-secret")
    p.add_argument("--emulator", choices=("auto", "dummynet", "netem"), default="auto")
    p.add_argument("--offloads", action="store_true", help="leave TSO/GSO/GRO on")
    p.add_argument("--ini-rmem", type=parse_bytes, default=0,
                   help="initiator's largest receive buffer (net.ipv4.tcp_rmem max, e.g. 64k): "
                        "caps the receive window")
    p.add_argument("--tgt-wmem", type=parse_bytes, default=0,
                   help="target's largest send buffer (net.ipv4.tcp_wmem max, e.g. 64k)")
    p.add_argument("--tgt-rmem", type=parse_bytes, default=0,
                   help="target's largest receive buffer (net.ipv4.tcp_rmem max, e.g. 64k): "
                        "caps the receive window of WRITEs")
    p.add_argument("--cc", default="",
                   help="TCP congestion control at both ends (e.g. cubic, bbr; default: the "
                        "host's)")
    p.add_argument("--tgt-cpu", type=float, default=0.0,
                   help="cap tgtd at this %% of one CPU (cgroup cpu.max / cfs quota)")
    p.add_argument("--tgt-param", type=parse_key_value, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="an iSCSI key tgtd offers (repeatable), e.g. InitialR2T=No, "
                        "FirstBurstLength=262144, MaxRecvDataSegmentLength=262144")
    p.add_argument("--tgt-cwnd", type=int, default=0, metavar="SEGMENTS",
                   help="clamp the target's congestion window (route `cwnd lock`, taken "
                        "through the TCP metrics cache): a congestion-window-limited sender")
    p.add_argument("--ini-cpu", type=float, default=0.0,
                   help="cap the capture's workload (istrace-gen and its children) at this %% "
                        "of one CPU (cgroup cpu.max / cfs quota)")


def _status(name: str | None) -> int:
    root = testbed_state.RUN_ROOT
    names = [name] if name else sorted(p.name for p in root.glob("*")
                                       if (p / "state.json").exists())
    if not names:
        print("no testbeds")
        return 0
    rc = 0
    for n in names:
        state = testbed_state.load(n)
        if state is None:
            print(f"{n}: not up")
            rc = 1
            continue
        alive = [p["what"] for p in state.get("pids", [])
                 if testbed_state.proc_start(int(p["pid"])) == p.get("start")]
        ns_ok = all(netns.ns_exists(ns) for ns in state.get("netns", []))
        cfg = state.get("config", {})
        print(json.dumps({"name": n, "ready": bool(state.get("ready")), "netns_ok": ns_ok,
                          "running": alive, "portal": state.get("portal"),
                          "iqn": state.get("iqn"), "emulator": state.get("emulator"),
                          "delay_ms": cfg.get("delay_ms"), "rate_mbit": cfg.get("rate_mbit"),
                          "loss": cfg.get("loss")}))
    return rc


def _down(name: str) -> int:
    state = testbed_state.load(name)
    if state is None:  # no record: still clear namespaces that follow our naming
        leftovers = [ns for ns in (f"ist-{name}-{s}" for s in "itm") if netns.ns_exists(ns)]
        if not leftovers:
            print(f"testbed {name}: not up")
            return 0
        state = {"name": name, "netns": leftovers}
    problems = testbed_state.teardown(state)
    for p in problems:
        print(f"testbed down: {p}", file=sys.stderr)
    print(f"testbed {name}: down" if not problems else f"testbed {name}: partly down")
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    if "--kernel" in argv:  # the full-kernel VM testbed (open-iscsi, LIO, netem) has its own CLI
        from istrace.testbed import vm as vmtestbed
        return vmtestbed.main([x for x in argv if x != "--kernel"])
    ap = argparse.ArgumentParser(prog="istrace testbed",
                                 description="Bring the namespace testbed up or down.",
                                 epilog="Add --kernel for the full-kernel VM testbed "
                                 "(open-iscsi + LIO + netem under QEMU): see "
                                 "docs/vm-testbed.md.")
    sub = ap.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="bring a testbed up and leave it running")
    add_path_args(up)
    down = sub.add_parser("down", help="remove a testbed (also after a crash)")
    down.add_argument("--name", default="ist")
    down.add_argument("--all", action="store_true",
                      help="every testbed whose maker has exited (others are in use: skipped)")
    st = sub.add_parser("status", help="show testbeds")
    st.add_argument("--name", default=None)
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("istrace testbed: must run as root (network namespaces)", file=sys.stderr)
        return 2
    if a.action == "status":
        return _status(a.name)
    if a.action == "down" and a.all:
        names = sorted(p.name for p in testbed_state.RUN_ROOT.glob("*") if
                       (p / "state.json").exists())
        rcs = []
        for n in names:
            owner = owner_alive(testbed_state.load(n) or {})
            if owner:
                print(f"testbed {n}: in use by live process {owner}, left up "
                      f"(`down --name {n}` removes it anyway)")
                continue
            rcs.append(_down(n))
        return max(rcs, default=0)
    if a.action == "down":
        return _down(a.name)
    try:
        cfg = config_from_args(a)
        tb = Testbed(cfg)
        print(f"testbed {cfg.name}: coming up ...", flush=True)
        tb.up()
    except (ValueError, TestbedError, netns.NetError, testbed_tgt.TargetError,
            testbed_path.PathError) as exc:
        print(f"istrace testbed up: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(tb.describe(), indent=2))
    print(f"testbed {cfg.name}: up; `istrace testbed down --name {cfg.name}` removes it")
    return 0


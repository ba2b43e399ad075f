"""`istrace capture`: run a workload and record both ends of the path (istrace.session.run).

    istrace capture --delay 16ms --workload 'gen --size 4M --time 10' --out DIR
"""

from __future__ import annotations

import argparse

from istrace.cli.testbed import add_path_args
from istrace.session import run


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="istrace capture",
                                 description="Run a workload and capture both ends.")
    add_path_args(ap)
    ap.set_defaults(name="cap")
    ap.add_argument("--workload", required=True,
                    help="'gen ARGS' (istrace-gen, target filled in) or any shell command; "
                         "$ISTRACE_PORTAL, $ISTRACE_IQN, $ISTRACE_TARGET_IP, $ISTRACE_LUN_URL "
                         "are set")
    ap.add_argument("--out", required=True, help="capture directory")
    ap.add_argument("--replace", action="store_true",
                    help="when --out holds an earlier capture, remove it and everything derived "
                         "from it first (without, the capture refuses to start)")
    ap.add_argument("--ignore-free-space", action="store_true",
                    help="start even when --out's disk has less free space than the capture "
                         "is expected to write (it still stops, early, before the disk is "
                         "full; exit code 4)")
    ap.add_argument("--snaplen", type=int, default=0, help="bytes per packet (0 = all)")
    ap.add_argument("--filter", default="", help="pcap filter (default: everything)")
    ap.add_argument("--buffer-kib", type=int, default=run.BUFFER_KIB,
                    help=f"tcpdump -B, KiB (default {run.BUFFER_KIB}; smaller ones drop packets)")
    ap.add_argument("--timeout", type=float, default=3600, help="workload time limit, s")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds to keep capturing after the workload ends (then, on a "
                         "testbed, until its iSCSI connections have closed, at most 5 s)")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--probe-args", default="",
                    help="more istrace-probe options for both ends, e.g. '--syscall-entries' "
                         "(istrace probe --help)")
    ap.add_argument("--sample-ms", type=float, default=500,
                    help="sample the iSCSI sockets' tcp_info (ss -ti) and the hosts' CPU every "
                         "N ms into hoststats-<host>.jsonl (0 = off; default 500)")
    ap.add_argument("--keep", action="store_true", help="leave the testbed up afterwards")
    ap.add_argument("--initiator-host", help="real initiator host (ssh)")
    ap.add_argument("--target-host", help="real target host (ssh)")
    ap.add_argument("--ssh-cmd", default="ssh -o BatchMode=yes",
                    help="command that runs one shell command on a host: CMD HOST 'command'")
    ap.add_argument("--initiator-iface", default="eth0")
    ap.add_argument("--target-iface", default="eth0")
    ap.add_argument("--portal", help="target portal IP[:PORT] (real hosts)")
    ap.add_argument("--iqn", help="target IQN (real hosts)")
    ap.add_argument("--remote-dir", default="/tmp/istrace-capture")
    ap.add_argument("--remote-probe-wait", type=float, default=3.0,
                    help="seconds to let remote probes attach")
    a = ap.parse_args(argv)
    if a.snaplen < 0:
        ap.error("--snaplen must be >= 0")
    if a.buffer_kib < 1:
        ap.error("--buffer-kib must be >= 1")
    return a


def main(argv: list[str]) -> int:
    if "--kernel" in argv:  # workload inside the full-kernel VM testbed
        from istrace.testbed import vm as vmtestbed
        return vmtestbed.main_capture([x for x in argv if x != "--kernel"])
    return run.run(parse_args(argv), argv)

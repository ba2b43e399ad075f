#!/usr/bin/python3
"""Inside the VM: configure LIO (iSCSI target, one fileio LUN) through rtslib-fb.

Runs under the distribution's /usr/bin/python3 (where python3-rtslib-fb lives), inside the
target's network namespace so the portal's listening socket belongs to that namespace.
targetcli is not used: it wants D-Bus and a writable HOME, neither of which the VM has.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import rtslib_fb as rts

# rtslib warns that it cannot move its (unused) save-file directory; nothing is saved here.
warnings.filterwarnings("ignore", category=UserWarning)


def setup(a: argparse.Namespace) -> None:
    store = rts.FileIOStorageObject("istlun1", a.lun, size=a.size, write_back=False)
    iscsi = rts.FabricModule("iscsi")
    target = rts.Target(iscsi, a.iqn)
    tpg = rts.TPG(target, 1)
    rts.LUN(tpg, 1, store)
    rts.NetworkPortal(tpg, a.ip, a.port)
    # Demo mode: any initiator may log in and sees LUN 1 without an ACL, no CHAP.
    tpg.set_attribute("generate_node_acls", "1")
    tpg.set_attribute("demo_mode_write_protect", "0")
    tpg.set_attribute("cache_dynamic_acls", "1")
    tpg.set_attribute("authentication", "0")
    tpg.set_attribute("default_cmdsn_depth", str(a.cmdsn_depth))
    # The target's side of the negotiation; the initiator offers its own in iscsid.conf.
    tpg.set_parameter("MaxRecvDataSegmentLength", str(a.mrdsl))
    tpg.set_parameter("MaxBurstLength", str(a.max_burst))
    tpg.set_parameter("FirstBurstLength", str(a.first_burst))
    tpg.enable = True


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lun", required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--iqn", required=True)
    p.add_argument("--ip", required=True)
    p.add_argument("--port", type=int, default=3260)
    p.add_argument("--mrdsl", type=int, default=262144)
    p.add_argument("--max-burst", type=int, default=262144)
    p.add_argument("--first-burst", type=int, default=65536)
    p.add_argument("--cmdsn-depth", type=int, default=128)
    a = p.parse_args(argv)
    try:
        setup(a)
    except (rts.RTSLibError, OSError) as exc:
        print(f"guest_lio: {exc}", file=sys.stderr)
        return 1
    print(f"guest_lio: {a.iqn} LUN 1 = {a.lun} on {a.ip}:{a.port}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""segments.csv (the C decoder's) against tshark's own dissection of the same capture: tshark
is the independent second reader of TCP headers."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import pandas as pd

FIELDS = ["frame.number", "frame.time_epoch", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst",
          "ipv6.dst", "tcp.dstport", "tcp.seq_raw", "tcp.ack_raw", "tcp.flags",
          "tcp.window_size_value", "tcp.len", "tcp.options.wscale.shift", "tcp.options.mss_val",
          "tcp.options.timestamp.tsval", "tcp.options.timestamp.tsecr", "tcp.options.sack_le"]


def _int(v: str, absent: int = -1) -> int:
    return int(v, 0) if v else absent


def tshark_segments(pcap: Path) -> pd.DataFrame:
    """The segments table's columns as tshark sees every TCP packet of `pcap`."""
    cmd = ["tshark", "-r", str(pcap), "-n", "-Y", "tcp", "-T", "fields", "-E", "separator=/t",
           "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    rows = []
    for line in r.stdout.splitlines():
        v = dict(zip(FIELDS, line.split("\t"), strict=True))
        src = v["ip.src"] or f"[{v['ipv6.src']}]"
        dst = v["ip.dst"] or f"[{v['ipv6.dst']}]"
        rows.append({
            "frame": int(v["frame.number"]) - 1,
            "ts_ns": int(Decimal(v["frame.time_epoch"]) * 1_000_000_000),
            "src": src, "sport": int(v["tcp.srcport"]), "dst": dst,
            "dport": int(v["tcp.dstport"]), "seq": int(v["tcp.seq_raw"]),
            "ack": _int(v["tcp.ack_raw"], 0), "flags": int(v["tcp.flags"], 16) & 0xFF,
            "win": int(v["tcp.window_size_value"]), "len": int(v["tcp.len"]),
            "wscale": min(_int(v["tcp.options.wscale.shift"]), 14),
            "mss": _int(v["tcp.options.mss_val"]),
            "tsval": _int(v["tcp.options.timestamp.tsval"]),
            "tsecr": _int(v["tcp.options.timestamp.tsecr"]),
            "sack": int(bool(v["tcp.options.sack_le"])),
        })
    return pd.DataFrame(rows)


def assert_same_as_tshark(segs: pd.DataFrame, pcap: Path) -> int:
    """Every row and column of a segments table equals tshark's; returns the row count."""
    want = tshark_segments(pcap)
    got = segs[list(want.columns)].reset_index(drop=True)
    assert len(got) == len(want) > 0, (len(got), len(want))
    for col in want.columns:
        bad = got[col].astype(str).to_numpy() != want[col].astype(str).to_numpy()
        assert not bad.any(), (col, got[bad].head(3).to_dict("records"),
                               want[bad].head(3).to_dict("records"))
    return len(got)

"""Small captures for the decoder core tests, built with istrace.synth.pcapwriter."""

from __future__ import annotations

import re
from pathlib import Path

from istrace.synth import pcapwriter as pw

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / "decoder" / "istrace-decode"


def schema_columns(section: str) -> list[str]:
    """Column names of one table of docs/schema.md, in order (`## 2.` -> pdus.csv)."""
    text = (REPO / "docs" / "schema.md").read_text()
    part = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    cols: list[str] = []
    for line in part.splitlines():
        m = re.match(r"\|\s*([a-z_][a-z_0-9, ]*?)\s*\|", line)
        if m and m.group(1) not in ("column",):
            cols += [c.strip() for c in m.group(1).split(",")]
    return cols


def connection_columns() -> list[str]:
    text = (REPO / "docs" / "schema.md").read_text()
    part = text.split("## 4.", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`([A-Za-z_0-9]+)`", part.split("and `notes`")[0]) + ["notes"]


def session_segments(flow: pw.Flow) -> list[pw.Segment]:
    """Handshake, login, READ(10) of 32 KiB in 4 Data-In PDUs, a TEST UNIT READY answered
    with CHECK CONDITION (fixed sense), READ CAPACITY(16) saying 4096-byte blocks, and a
    READ(16) of 8 blocks after it (so 32 KiB again)."""
    s = flow.handshake()
    s += flow.send("i2t", pw.login_req([("InitiatorName", "iqn.t:ini"),
                                        ("TargetName", "iqn.t:tgt"),
                                        ("MaxRecvDataSegmentLength", "65536")]))
    s += flow.send("t2i", pw.login_rsp([("MaxRecvDataSegmentLength", "8192"),
                                        ("MaxBurstLength", "262144")]))
    s += flow.send("i2t", pw.scsi_cmd(1, pw.cdb_read10(2048, 64), edtl=32768, read=True))
    for k in range(4):
        kw = {"status": 0, "statsn": 1} if k == 3 else {}
        s += flow.send("t2i", pw.data_in(1, bytes([k]) * 8192, offset=8192 * k, datasn=k,
                                         final=k == 3, **kw))
    s += flow.send("i2t", pw.scsi_cmd(2, pw.cdb_tur(), cmdsn=2))
    s += flow.send("t2i", pw.scsi_rsp(2, status=2, statsn=2,
                                      sense=pw.fixed_sense(5, 0x24, 0)))
    s += flow.send("i2t", pw.scsi_cmd(3, pw.cdb_readcap16(), edtl=32, read=True, cmdsn=3))
    s += flow.send("t2i", pw.data_in(3, pw.readcap16_data(16383, 4096), status=0, statsn=3))
    s += flow.send("i2t", pw.scsi_cmd(4, pw.cdb_read16(8, 8), edtl=32768, read=True, cmdsn=4))
    s += flow.send("t2i", pw.data_in(4, b"\x07" * 32768, status=0, statsn=4))
    return s


def write_session(path: Path, *, gz: bool = False, fmt: str = "pcap") -> Path:
    flow = pw.Flow()
    pk = pw.packets_of(flow, session_segments(flow))
    pw.write_capture(str(path), pk, fmt=fmt, gz=gz)
    return path


def session_image() -> bytes:
    flow = pw.Flow()
    return pw.pcap_bytes(pw.packets_of(flow, session_segments(flow)))

"""Per-PDU records from tshark's iSCSI/SCSI dissectors (PDML), in the shape of pdus.csv.

tshark prints one record per frame; a frame may hold several PDUs and a PDU may end in a later
frame than it starts. PDML keeps the protocol layers in order, so each `iscsi` layer starts a
PDU and the `scsi` layers after it (CDB, sense, data) belong to it. tshark does not report the
TCP sequence number of a PDU's first byte, so it is rebuilt by chaining PDU lengths per
direction from the first PDU, and every PDU is checked to end inside the frame tshark put it
in (or, reassembled by a segment that came out of order, to overlap it): a PDU tshark missed
or invented breaks the chain and is reported, not hidden.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from istrace.capture.conn import conn_key

TSHARK_OPTS = ["-o", "tcp.desegment_tcp_streams:TRUE", "-o", "iscsi.desegment_iscsi_messages:TRUE",
               "-o", "tcp.reassemble_out_of_order:TRUE", "-o", "iscsi.protocol_version:RFC3720"]

# pdus.csv column <- tshark field (iSCSI header fields)
ISCSI_FIELDS = {
    "opcode": "iscsi.opcode", "itt": "iscsi.initiatortasktag", "cmdsn": "iscsi.cmdsn",
    "expstatsn": "iscsi.expstatsn", "statsn": "iscsi.statsn", "expcmdsn": "iscsi.expcmdsn",
    "maxcmdsn": "iscsi.maxcmdsn", "datasn": "iscsi.datasn", "r2tsn": "iscsi.r2tsn",
    "dsl": "iscsi.datasegmentlength", "buffer_offset": "iscsi.bufferOffset",
    "desired_len": "iscsi.desireddatalength", "ttt": "iscsi.targettransfertag",
    "edtl": "iscsi.scsicommand.expecteddatatransferlength",
    "status": "iscsi.scsiresponse.status", "response": "iscsi.scsiresponse.response",
}
# CDB fields (only when really inside the CDB: tshark also shows generated copies of size 0)
CDB_OPCODE = ("scsi_sbc.opcode", "scsi.spc.opcode")
CDB_LBA = ("scsi_sbc.rdwr6.lba", "scsi_sbc.rdwr10.lba", "scsi_sbc.rdwr16.lba",
           "scsi_sbc.verify.lba", "scsi_sbc.verify.lba64", "scsi_sbc.wrverify.lba",
           "scsi_sbc.wrverify.lba64")
CDB_XFER = ("scsi_sbc.rdwr6.xferlen", "scsi_sbc.rdwr10.xferlen", "scsi_sbc.rdwr12.xferlen",
            "scsi_sbc.verify.vlen", "scsi_sbc.verify.vlen32", "scsi_sbc.wrverify.xferlen",
            "scsi_sbc.wrverify.xferlen32")
SENSE = {"sense_key": "scsi.sns.key", "asc": "scsi.sns.asc", "ascq": "scsi.sns.ascq"}


@dataclass
class TPdu:
    frame: int
    conn: str
    dir: str
    frame_seq: int  # tcp.seq_raw of the frame tshark shows the PDU in
    frame_len: int
    fields: dict[str, int] = field(default_factory=dict)
    has_hdigest: bool = False
    has_ddigest: bool = False
    ahs_len: int = 0
    tcp_seq: int = -1

    @property
    def length(self) -> int:
        dsl = self.fields.get("dsl", 0)
        n = 48 + self.ahs_len + (4 if self.has_hdigest else 0) + dsl + (-dsl % 4)
        return n + (4 if self.has_ddigest and dsl else 0)


def _num(show: str) -> int:
    if ":" in show:  # FT_BYTES, e.g. the 8-byte LBA of READ(16)
        return int(show.replace(":", ""), 16)
    return int(show, 0)


def decode_as_iscsi(pcap: Path, target_ports: tuple[int, ...] = (3260,)) -> list[str]:
    """tshark `-d` arguments that make every initiator port of the capture iSCSI as well. An
    initiator's ephemeral port may be one Wireshark registered for another protocol (seen:
    44322, PMPROXY): when iSCSI's dissector passes over a segment, that protocol's takes the
    whole connection, and tshark decodes none of its iSCSI PDUs."""
    want = " or ".join(f"tcp.dstport == {p}" for p in target_ports)
    r = subprocess.run(["tshark", "-r", str(pcap), "-n", "-Y", want, "-T", "fields",
                        "-e", "tcp.srcport"], capture_output=True, text=True, timeout=240,
                       check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    ports = sorted({int(x) for x in r.stdout.split() if x.isdigit()} - set(target_ports))
    return [a for p in ports for a in ("-d", f"tcp.port=={p},iscsi")]


def run_tshark_pdml(pcap: Path, out: Path) -> Path:
    with open(out, "wb") as f:
        r = subprocess.run(["tshark", "-r", str(pcap), *TSHARK_OPTS, *decode_as_iscsi(pcap),
                            "-Y", "iscsi", "-T", "pdml", "-j", "ip ipv6 tcp iscsi scsi"],
                           stdout=f, stderr=subprocess.PIPE, timeout=240, check=False)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return out


def parse_pdml(path: Path, target_ports: tuple[int, ...] = (3260,)) -> list[TPdu]:
    """Every iSCSI PDU tshark dissected, in capture order."""
    out: list[TPdu] = []
    for _ev, pkt in ET.iterparse(path, events=("end",)):
        if pkt.tag != "packet":
            continue
        src = dst = ""
        sport = dport = seq = tlen = 0
        frame = 0
        cur: TPdu | None = None
        for proto in pkt.iter("proto"):
            name = proto.get("name")
            if name in ("ip", "ipv6"):
                for f in proto.iter("field"):
                    n = f.get("name")
                    if n in ("ip.src", "ipv6.src"):
                        src = f.get("show", "")
                    elif n in ("ip.dst", "ipv6.dst"):
                        dst = f.get("show", "")
            elif name == "tcp":
                got: dict[str, int] = {}
                for f in proto.iter("field"):
                    n, show = f.get("name", ""), f.get("show", "")
                    if n in ("tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.len") and \
                            n not in got:
                        got[n] = int(show)
                sport, dport = got.get("tcp.srcport", 0), got.get("tcp.dstport", 0)
                seq, tlen = got.get("tcp.seq_raw", 0), got.get("tcp.len", 0)
            elif name == "iscsi":
                d = "i2t" if dport in target_ports else "t2i"
                ini = (src, sport) if d == "i2t" else (dst, dport)
                tgt = (dst, dport) if d == "i2t" else (src, sport)
                cur = TPdu(frame, conn_key(*ini, *tgt), d, seq, tlen)
                out.append(cur)
                wanted = {v: k for k, v in ISCSI_FIELDS.items()}
                for f in proto.iter("field"):
                    n, show = f.get("name", ""), f.get("show", "")
                    if n in wanted and n not in cur.fields and show:
                        cur.fields[wanted[n]] = _num(show)
                    elif n == "iscsi.headerdigest32":
                        cur.has_hdigest = True
                    elif n == "iscsi.datadigest32":
                        cur.has_ddigest = True
                    elif n == "iscsi.totalahslength":
                        cur.ahs_len = 4 * _num(show)
            elif name == "scsi" and cur is not None:
                for f in proto.iter("field"):
                    n, show, size = f.get("name", ""), f.get("show", ""), f.get("size", "0")
                    if not show:
                        continue
                    if n == "scsi.lun" and "lun" not in cur.fields:
                        cur.fields["lun"] = _num(show)
                    if size == "0":
                        continue  # generated from the request, not in this PDU's bytes
                    if n in CDB_OPCODE and "cdb_opcode" not in cur.fields:
                        cur.fields["cdb_opcode"] = _num(show)
                    elif n in CDB_LBA and "lba" not in cur.fields:
                        cur.fields["lba"] = _num(show)
                    elif n in CDB_XFER and "xfer_blocks" not in cur.fields:
                        cur.fields["xfer_blocks"] = _num(show)
                    for col, tf in SENSE.items():
                        if n == tf and col not in cur.fields:
                            cur.fields[col] = _num(show)
            elif name == "geninfo":
                for f in proto.iter("field"):
                    if f.get("name") == "num":
                        frame = int(f.get("show", "0"))
        pkt.clear()
    return out


# how far past a frame tshark's out-of-order queue may hold whole PDUs it dissects there
_QUEUED = 1 << 24


def chain_seqs(pdus: list[TPdu]) -> list[str]:
    """Fill tcp_seq by chaining lengths per (conn, dir). Returns chain breaks (should be [])."""
    problems: list[str] = []
    nxt: dict[tuple[str, str], int] = {}
    for p in pdus:
        key = (p.conn, p.dir)
        if key not in nxt:
            # The first PDU of a direction (a Login Request/Response) ends its frame.
            nxt[key] = (p.frame_seq + p.frame_len - p.length) & 0xFFFFFFFF
        p.tcp_seq = nxt[key]
        end = (p.tcp_seq + p.length - 1) & 0xFFFFFFFF
        # A segment that arrived out of order completes the PDU: tshark shows it in that
        # frame, which lies inside the PDU rather than at its end (the veth path reorders
        # under load), or before it: the frame filled the gap in front of PDUs whose bytes
        # had come already, and tshark dissects those queued PDUs there too. A PDU that
        # neither overlaps its frame nor follows it breaks the chain.
        overlaps = ((p.frame_seq - p.tcp_seq) & 0xFFFFFFFF) < p.length or \
            ((p.tcp_seq - p.frame_seq) & 0xFFFFFFFF) < p.frame_len
        queued = ((p.tcp_seq - p.frame_seq - p.frame_len) & 0xFFFFFFFF) < _QUEUED
        if ((end - p.frame_seq) & 0xFFFFFFFF) >= p.frame_len and not overlaps and not queued:
            problems.append(f"frame {p.frame}: PDU {p.fields.get('opcode')} at {p.tcp_seq} "
                            f"len {p.length} does not end in its frame "
                            f"[{p.frame_seq}, +{p.frame_len})")
            nxt[key] = (p.frame_seq + p.frame_len) & 0xFFFFFFFF  # resume after this frame
        else:
            nxt[key] = (end + 1) & 0xFFFFFFFF
    return problems

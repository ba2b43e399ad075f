"""Write the seed corpora of both fuzz targets from the hard-case conversations.

    python3 make_seeds.py OUTDIR     -> OUTDIR/pcap/*, OUTDIR/stream/*
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1] / "tests" / "decoder")]

import decoder_cases as dc  # noqa: E402
from istrace.synth import pcapwriter as pw  # noqa: E402


def small(digests: bool = False) -> dc.Conversation:
    """A short conversation: login, READ CAPACITY(16), READ(10) of 2 blocks in 2 Data-In with
    AHS-less headers, a CHECK CONDITION, NOP and a text exchange."""
    c = dc.Conversation()
    dg = pw.Digests(digests, digests)
    v = "CRC32C" if digests else "None"
    kv = [("InitiatorName", "iqn.x:i"), ("TargetName", "iqn.x:t"), ("HeaderDigest", v),
          ("DataDigest", v), ("MaxRecvDataSegmentLength", "512")]
    c.add("i2t", pw.login_req(kv))
    c.add("t2i", pw.login_rsp(kv))
    c.add("i2t", pw.scsi_cmd(1, pw.cdb_readcap16(), edtl=32, read=True, digests=dg))
    c.add("t2i", pw.data_in(1, pw.readcap16_data(1023, 512), status=0, statsn=1, digests=dg))
    c.add("i2t", pw.scsi_cmd(2, pw.cdb_read10(8, 2), edtl=1024, cmdsn=2, read=True, digests=dg))
    c.add("t2i", pw.data_in(2, dc.pattern(4096, 512), datasn=0, final=False, digests=dg))
    c.add("t2i", pw.data_in(2, dc.pattern(4608, 512), offset=512, datasn=1, status=0, statsn=2,
                            digests=dg))
    c.add("i2t", pw.scsi_cmd(3, pw.cdb_write16(4, 1), edtl=512, cmdsn=3, write=True,
                             immediate_data=dc.pattern(0, 512), digests=dg))
    c.add("t2i", pw.scsi_rsp(3, status=2, statsn=3, sense=pw.fixed_sense(5, 0x24, 0),
                             residual=("over", 7), digests=dg))
    c.add("i2t", pw.scsi_cmd(4, pw.cdb_inquiry(255, True, 0x83), edtl=255, cmdsn=4, read=True,
                             digests=dg))
    c.add("t2i", pw.scsi_rsp(4, status=2, statsn=4, sense=pw.descriptor_sense(6, 0x29, 1),
                             digests=dg))
    c.add("i2t", pw.scsi_cmd(5, bytes([0x7F, 0, 0, 0, 0, 0, 0, 0x18]) + bytes(24), cmdsn=5,
                             digests=dg))  # 32-byte CDB: extended CDB AHS
    c.add("i2t", pw.text_req([("SendTargets", "All")], itt=6, cmdsn=6, expstatsn=5, digests=dg))
    c.add("t2i", pw.nop_in(itt=0xFFFFFFFF, statsn=5, expcmdsn=7, maxcmdsn=38, digests=dg))
    c.add("i2t", pw.nop_out(itt=7, cmdsn=7, expstatsn=6, data=b"ping", digests=dg))
    c.add("i2t", pw.logout_req(itt=8, cmdsn=8, expstatsn=6, digests=dg))
    c.add("t2i", pw.logout_rsp(itt=8, statsn=6, expcmdsn=9, maxcmdsn=40, digests=dg))
    return c


def stream_seed(c: dc.Conversation, chunk: int = 0) -> bytes:
    i2t = b"".join(p.data for p in c.pdus if p.dir == "i2t")
    t2i = b"".join(p.data for p in c.pdus if p.dir == "t2i")
    body = len(i2t) + len(t2i)
    v = next(v for v in range(65536) if v * body // 65535 >= len(i2t))
    assert v * body // 65535 == len(i2t), "seed too large for an exact split"
    return struct.pack(">HBB", v, chunk, 0) + i2t + t2i


def main(out: Path) -> int:
    (out / "pcap").mkdir(parents=True, exist_ok=True)
    (out / "stream").mkdir(parents=True, exist_ok=True)
    (out / "output").mkdir(parents=True, exist_ok=True)
    n = 0
    for digests in (False, True):
        c = small(digests)
        segs = c.segments()
        for lt in (pw.LINKTYPE_ETHERNET, pw.LINKTYPE_LINUX_SLL2, pw.LINKTYPE_RAW,
                   pw.LINKTYPE_NULL):
            pk = pw.packets_of(c.flow, segs, lt)
            (out / "pcap" / f"small-{digests:d}-{lt}.pcap").write_bytes(pw.pcap_bytes(pk, lt))
            n += 1
        pk = pw.packets_of(c.flow, segs, pw.LINKTYPE_ETHERNET, vlan=5)
        (out / "pcap" / f"small-{digests:d}.pcapng").write_bytes(pw.pcapng_bytes(pk))
        for chunk in (0, 7, 100):
            (out / "stream" / f"small-{digests:d}-{chunk}").write_bytes(stream_seed(c, chunk))
            n += 1
    v6 = small()
    v6.flow = pw.Flow(ini_ip="fd00::1", tgt_ip="fd00::2")
    segs = v6.segments()
    (out / "pcap" / "small-v6.pcap").write_bytes(pw.pcap_bytes(pw.packets_of(v6.flow, segs)))
    # The hard-case reference conversation, three segments per PDU, so reassembly is exercised.
    b = dc.basic(digests=True)
    segs = b.flow.handshake()
    for p in b.pdus:
        k = len(p.data) // 3
        for piece in (p.data[:k], p.data[k:2 * k], p.data[2 * k:]):
            segs += b.flow.send(p.dir, piece)
    (out / "pcap" / "basic-digests.pcap").write_bytes(pw.pcap_bytes(pw.packets_of(b.flow, segs)))
    # The output target: byte 0 picks the format (text, text -v, JSON, CSV+summary).
    for f in sorted((out / "pcap").iterdir()):
        for mode in range(4):
            (out / "output" / f"{f.name}.{mode}").write_bytes(bytes([mode]) + f.read_bytes())
    print(f"seeds: {n + 3} capture files in {out}/pcap, stream and output variants")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "seeds")))

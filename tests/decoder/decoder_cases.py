"""Made-up iSCSI conversations with known decodes, shared by the hard-case tests and fuzz seeds.

`Conversation` collects PDUs (bytes + the fields the decoder must report for them) in wire
order; `segments()` cuts them into TCP segments; each hard case then bends the segment list
(split, merge, reorder, drop, truncate) and writes a capture with pcapwriter.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from istrace.synth import pcapwriter as pw

BLOCK = 4096  # the READ CAPACITY reply says 4096-byte blocks: the decoder must learn it


@dataclass
class Pdu:
    dir: str
    data: bytes
    exp: dict[str, object]
    seq: int = 0  # TCP seq of the first byte, filled when segmented


@dataclass
class Conversation:
    flow: pw.Flow = field(default_factory=pw.Flow)
    pdus: list[Pdu] = field(default_factory=list)
    digests: pw.Digests = field(default_factory=pw.Digests)

    def add(self, d: str, data: bytes, **exp: object) -> Pdu:
        p = Pdu(d, data, exp)
        self.pdus.append(p)
        return p

    def segments(self, per_pdu: bool = True) -> list[pw.Segment]:
        """Handshake, then each PDU in its own MSS-sized segments, then FIN."""
        segs = self.flow.handshake()
        for p in self.pdus:
            p.seq = self.flow.nxt[p.dir]
            segs += self.flow.send(p.dir, p.data)
        return segs + self.flow.fin()

    def assign_seqs(self) -> None:
        """Fill Pdu.seq without emitting segments (for cases that build segments themselves)."""
        nxt = {"i2t": self.flow.ini_isn + 1, "t2i": self.flow.tgt_isn + 1}
        for p in self.pdus:
            p.seq = nxt[p.dir]
            nxt[p.dir] += len(p.data)


def pattern(offset: int, length: int) -> bytes:
    """The LUN test pattern of docs/schema.md section 5."""
    first = offset // 8
    words = struct.pack(f"<{length // 8 + 2}Q", *range(first, first + length // 8 + 2))
    start = offset - first * 8
    return words[start:start + length]


def basic(digests: bool = False, bad_hdigest_at: str | None = None,
          bad_ddigest_at: str | None = None, flow: pw.Flow | None = None,
          mrdsl_t2i: int = 8192) -> Conversation:
    """Login, READ CAPACITY(16), READ(10) in 4 Data-In, WRITE(10) with R2T, TUR -> CHECK
    CONDITION with sense, INQUIRY VPD with phase-collapsed status, logout.

    bad_hdigest_at/bad_ddigest_at: name of the PDU ("read_cmd", "read_din2", ...) whose
    digest is corrupted.
    """
    c = Conversation(flow=flow or pw.Flow())
    dg = pw.Digests(header=digests, data=digests)
    c.digests = dg
    hd = "CRC32C" if digests else "None"
    exp_hd = "ok" if digests else ""

    def hdig(name: str) -> str:
        return "bad" if bad_hdigest_at == name else exp_hd

    def ddig(name: str) -> str:
        return "bad" if bad_ddigest_at == name else exp_hd

    req_kv = [("InitiatorName", "iqn.2026-01.test:ini"), ("TargetName", "iqn.2026-01.test:tgt"),
              ("SessionType", "Normal"), ("HeaderDigest", "CRC32C,None" if digests else "None"),
              ("DataDigest", "CRC32C,None" if digests else "None"),
              ("MaxRecvDataSegmentLength", str(mrdsl_t2i)), ("InitialR2T", "Yes"),
              ("ImmediateData", "Yes"), ("MaxBurstLength", "262144"),
              ("FirstBurstLength", "65536")]
    rsp_kv = [("HeaderDigest", hd), ("DataDigest", hd), ("MaxRecvDataSegmentLength", "65536"),
              ("InitialR2T", "Yes"), ("ImmediateData", "Yes"), ("MaxBurstLength", "262144"),
              ("FirstBurstLength", "65536"), ("MaxOutstandingR2T", "1")]
    c.add("i2t", pw.login_req(req_kv, itt=0x70000000), opcode=0x03, itt=0x70000000,
          immediate=1, final=1, cmdsn=1, expstatsn=0, kv=";".join(f"{k}={v}" for k, v in req_kv))
    c.add("t2i", pw.login_rsp(rsp_kv, itt=0x70000000, statsn=0, expcmdsn=1, maxcmdsn=32),
          opcode=0x23, itt=0x70000000, statsn=0, expcmdsn=1, maxcmdsn=32,
          kv=";".join(f"{k}={v}" for k, v in rsp_kv))

    # READ CAPACITY(16): phase-collapsed Data-In with status; 4096-byte blocks.
    c.add("i2t", pw.scsi_cmd(1, pw.cdb_readcap16(32), edtl=32, cmdsn=1, expstatsn=1, read=True,
                             digests=dg, bad_hdigest=bad_hdigest_at == "rc_cmd"),
          opcode=0x01, itt=1, lun=1, cmdsn=1, expstatsn=1, edtl=32, cdb_opcode=0x9E,
          hdigest=hdig("rc_cmd"))
    c.add("t2i", pw.data_in(1, pw.readcap16_data(16383, BLOCK), status=0, statsn=1, expcmdsn=2,
                            maxcmdsn=33, digests=dg),
          opcode=0x25, itt=1, statsn=1, datasn=0, buffer_offset=0, dsl=32, status=0,
          hdigest=exp_hd, ddigest=exp_hd)

    # READ(10) of 8 blocks of 4096 = 32 KiB in 4 Data-In PDUs of 8 KiB, then SCSI Response.
    c.add("i2t", pw.scsi_cmd(2, pw.cdb_read10(2048, 8), edtl=8 * BLOCK, cmdsn=2, expstatsn=2,
                             read=True, digests=dg, bad_hdigest=bad_hdigest_at == "read_cmd"),
          opcode=0x01, itt=2, lun=1, cmdsn=2, expstatsn=2, edtl=32768, cdb_opcode=0x28,
          cdb_name="READ(10)", lba=2048, xfer_blocks=8, xfer_bytes=32768,
          hdigest=hdig("read_cmd"))
    for i in range(4):
        name = f"read_din{i}"
        c.add("t2i", pw.data_in(2, pattern(2048 * BLOCK + i * 8192, 8192), offset=i * 8192,
                                datasn=i, final=i == 3, expcmdsn=3, maxcmdsn=34, digests=dg,
                                bad_ddigest=bad_ddigest_at == name,
                                bad_hdigest=bad_hdigest_at == name),
              opcode=0x25, itt=2, datasn=i, buffer_offset=i * 8192, dsl=8192, final=int(i == 3),
              hdigest=hdig(name), ddigest=ddig(name))
    c.add("t2i", pw.scsi_rsp(2, status=0, statsn=2, expcmdsn=3, maxcmdsn=34, digests=dg),
          opcode=0x21, itt=2, statsn=2, expcmdsn=3, maxcmdsn=34, status=0, response=0,
          hdigest=exp_hd)

    # WRITE(10) of 2 blocks with R2T + Data-Out.
    c.add("i2t", pw.scsi_cmd(3, pw.cdb_write10(100, 2), edtl=2 * BLOCK, cmdsn=3, expstatsn=3,
                             write=True, digests=dg),
          opcode=0x01, itt=3, cmdsn=3, edtl=8192, cdb_opcode=0x2A, cdb_name="WRITE(10)",
          lba=100, xfer_blocks=2, xfer_bytes=8192, hdigest=exp_hd)
    c.add("t2i", pw.r2t(3, ttt=0x10, offset=0, desired=8192, r2tsn=0, statsn=3, expcmdsn=4,
                        maxcmdsn=35, digests=dg),
          opcode=0x31, itt=3, ttt=0x10, buffer_offset=0, desired_len=8192, r2tsn=0, statsn=3)
    c.add("i2t", pw.data_out(3, pattern(100 * BLOCK, 8192), ttt=0x10, offset=0, expstatsn=3,
                             digests=dg, ),
          opcode=0x05, itt=3, ttt=0x10, buffer_offset=0, dsl=8192, datasn=0, expstatsn=3,
          ddigest=ddig("data_out"))
    c.add("t2i", pw.scsi_rsp(3, status=0, statsn=3, expcmdsn=4, maxcmdsn=35, digests=dg),
          opcode=0x21, itt=3, statsn=3, status=0)

    # TEST UNIT READY -> CHECK CONDITION, UNIT ATTENTION / POWER ON OCCURRED (29/00).
    c.add("i2t", pw.scsi_cmd(4, pw.cdb_tur(), edtl=0, cmdsn=4, expstatsn=4, digests=dg),
          opcode=0x01, itt=4, cmdsn=4, cdb_opcode=0x00, cdb_name="TEST UNIT READY")
    c.add("t2i", pw.scsi_rsp(4, status=0x02, statsn=4, expcmdsn=5, maxcmdsn=36,
                             sense=pw.fixed_sense(0x6, 0x29, 0x00), digests=dg,
                             bad_ddigest=bad_ddigest_at == "tur_rsp"),
          opcode=0x21, itt=4, statsn=4, status=2, sense_key=6, asc=0x29, ascq=0,
          ddigest=ddig("tur_rsp"))

    # READ(16) past the end -> descriptor sense ILLEGAL REQUEST / LBA OUT OF RANGE (21/00),
    # with an underflow residual.
    c.add("i2t", pw.scsi_cmd(5, pw.cdb_read16(1 << 33, 16), edtl=16 * BLOCK, cmdsn=5,
                             expstatsn=5, read=True, digests=dg),
          opcode=0x01, itt=5, cmdsn=5, cdb_opcode=0x88, cdb_name="READ(16)", lba=1 << 33,
          xfer_blocks=16, xfer_bytes=16 * BLOCK)
    c.add("t2i", pw.scsi_rsp(5, status=0x02, statsn=5, expcmdsn=6, maxcmdsn=37,
                             sense=pw.descriptor_sense(0x5, 0x21, 0x00),
                             residual=("under", 16 * BLOCK), digests=dg),
          opcode=0x21, itt=5, statsn=5, status=2, sense_key=5, asc=0x21, ascq=0,
          residual_kind="under", residual=16 * BLOCK)

    c.add("i2t", pw.logout_req(itt=6, cmdsn=6, expstatsn=6, digests=dg),
          opcode=0x06, itt=6, cmdsn=6, immediate=1)
    c.add("t2i", pw.logout_rsp(itt=6, statsn=6, expcmdsn=7, maxcmdsn=38, digests=dg),
          opcode=0x26, itt=6, statsn=6)
    return c


# The command table the basic conversation must produce (keyed by ITT).
BASIC_COMMANDS: dict[int, dict[str, object]] = {
    1: {"cdb_opcode": 0x9E, "direction": "read", "bytes_in": 32, "data_pdus": 1, "status": 0},
    2: {"cdb_opcode": 0x28, "lba": 2048, "xfer_blocks": 8, "xfer_bytes": 32768,
        "direction": "read", "bytes_in": 32768, "bytes_out": 0, "data_pdus": 4, "r2ts": 0,
        "status": 0, "edtl": 32768},
    3: {"cdb_opcode": 0x2A, "lba": 100, "xfer_bytes": 8192, "direction": "write",
        "bytes_out": 8192, "bytes_in": 0, "data_pdus": 1, "r2ts": 1, "status": 0},
    4: {"cdb_opcode": 0x00, "direction": "none", "status": 2, "sense_key": 6, "asc": 0x29,
        "ascq": 0},
    5: {"cdb_opcode": 0x88, "lba": 1 << 33, "status": 2, "sense_key": 5, "asc": 0x21,
        "residual_kind": "under", "residual": 16 * BLOCK},
}


def random_conversation(rng: random.Random, digests: bool = False) -> Conversation:
    """A random but well-formed session: reads (Data-In split by MaxRecvDataSegmentLength,
    status collapsed or separate), writes (immediate data, then R2Ts and Data-Out split by the
    target's MRDSL), TURs and INQUIRYs, with consistent CmdSN/StatSN. 512-byte blocks."""
    c = Conversation()
    dg = pw.Digests(digests, digests)
    c.digests = dg
    hd = "ok" if digests else ""
    mrdsl_t2i = rng.choice([512, 1024, 4096, 8192])
    mrdsl_i2t = rng.choice([512, 2048, 8192])
    first_burst = rng.choice([0, 1024, 4096])
    v = "CRC32C" if digests else "None"
    c.add("i2t", pw.login_req([("HeaderDigest", v), ("DataDigest", v),
                               ("MaxRecvDataSegmentLength", str(mrdsl_t2i))]),
          opcode=0x03)
    c.add("t2i", pw.login_rsp([("HeaderDigest", v), ("DataDigest", v),
                               ("MaxRecvDataSegmentLength", str(mrdsl_i2t)),
                               ("FirstBurstLength", str(max(first_burst, 512))),
                               ("ImmediateData", "Yes" if first_burst else "No")]),
          opcode=0x23)
    cmdsn, statsn = 1, 1
    for k in range(rng.randint(3, 25)):
        itt = 0x1000 + k
        kind = rng.choice(["read", "read", "write", "tur", "inq"])
        if kind == "read":
            blocks = rng.randint(1, 40)
            lba = rng.randrange(1 << 20)
            n = blocks * 512
            cdb = pw.cdb_read16(lba, blocks) if rng.random() < 0.5 else pw.cdb_read10(lba, blocks)
            c.add("i2t", pw.scsi_cmd(itt, cdb, edtl=n, cmdsn=cmdsn, expstatsn=statsn, read=True,
                                     digests=dg),
                  opcode=1, itt=itt, cmdsn=cmdsn, expstatsn=statsn, lba=lba, xfer_blocks=blocks,
                  xfer_bytes=n, edtl=n, hdigest=hd, cdb_opcode=cdb[0])
            collapse = rng.random() < 0.5
            offs = list(range(0, n, mrdsl_t2i))
            for sn, off in enumerate(offs):
                last = off == offs[-1]
                data = pattern(lba * 512 + off, min(mrdsl_t2i, n - off))
                st = 0 if last and collapse else None
                c.add("t2i", pw.data_in(itt, data, offset=off, datasn=sn, final=last, status=st,
                                        statsn=statsn, digests=dg),
                      opcode=0x25, itt=itt, datasn=sn, buffer_offset=off, dsl=len(data),
                      hdigest=hd, ddigest=hd, **({"statsn": statsn, "status": 0}
                                                 if st is not None else {}))
            if not collapse:
                c.add("t2i", pw.scsi_rsp(itt, statsn=statsn, digests=dg), opcode=0x21, itt=itt,
                      statsn=statsn, status=0, hdigest=hd)
        elif kind == "write":
            blocks = rng.randint(1, 24)
            lba = rng.randrange(1 << 20)
            n = blocks * 512
            imm = pattern(0, min(n, first_burst, mrdsl_i2t)) if first_burst else b""
            c.add("i2t", pw.scsi_cmd(itt, pw.cdb_write10(lba, blocks), edtl=n, cmdsn=cmdsn,
                                     expstatsn=statsn, write=True, immediate_data=imm,
                                     digests=dg),
                  opcode=1, itt=itt, cmdsn=cmdsn, lba=lba, xfer_blocks=blocks, dsl=len(imm),
                  hdigest=hd, ddigest=hd if imm else "")
            off, r2tsn = len(imm), 0
            while off < n:
                want = min(n - off, rng.choice([1024, 4096, 16384]))
                ttt = 0x500 + r2tsn
                c.add("t2i", pw.r2t(itt, ttt=ttt, offset=off, desired=want, r2tsn=r2tsn,
                                    statsn=statsn, digests=dg),
                      opcode=0x31, itt=itt, ttt=ttt, buffer_offset=off, desired_len=want,
                      r2tsn=r2tsn, hdigest=hd)
                for sn, o in enumerate(range(off, off + want, mrdsl_i2t)):
                    data = pattern(o, min(mrdsl_i2t, off + want - o))
                    last = o + len(data) == off + want
                    c.add("i2t", pw.data_out(itt, data, ttt=ttt, offset=o, datasn=sn,
                                             final=last, expstatsn=statsn, digests=dg),
                          opcode=0x05, itt=itt, ttt=ttt, buffer_offset=o, datasn=sn,
                          dsl=len(data), final=int(last), hdigest=hd, ddigest=hd)
                off += want
                r2tsn += 1
            c.add("t2i", pw.scsi_rsp(itt, statsn=statsn, digests=dg), opcode=0x21, itt=itt,
                  statsn=statsn, status=0)
        else:
            cdb = pw.cdb_tur() if kind == "tur" else pw.cdb_inquiry(96)
            c.add("i2t", pw.scsi_cmd(itt, cdb, edtl=0 if kind == "tur" else 96, cmdsn=cmdsn,
                                     expstatsn=statsn, read=kind == "inq", digests=dg),
                  opcode=1, itt=itt, cmdsn=cmdsn, cdb_opcode=cdb[0], hdigest=hd)
            key = rng.choice([0, 2, 5, 6])
            sense = pw.fixed_sense(key, 0x24, 0) if key else b""
            c.add("t2i", pw.scsi_rsp(itt, status=2 if key else 0, statsn=statsn, sense=sense,
                                     digests=dg),
                  opcode=0x21, itt=itt, statsn=statsn, status=2 if key else 0,
                  **({"sense_key": key, "asc": 0x24, "ascq": 0} if key else {}),
                  ddigest=hd if key else "")
        cmdsn += 1
        statsn += 1
    return c


def random_segments(c: Conversation, rng: random.Random) -> list[pw.Segment]:
    """Runs of same-direction PDUs as one byte stream, cut at random sizes (1..3000)."""
    c.assign_seqs()
    segs = c.flow.handshake()
    run: list[Pdu] = []
    for p in [*c.pdus, None]:
        if run and (p is None or p.dir != run[0].dir):
            data = b"".join(x.data for x in run)
            off = 0
            while off < len(data):
                n = rng.choice([1, 7, 48, 100, 1448, 1448, 2000, 3000])
                segs += c.flow.send(run[0].dir, data[off:off + n], seg=1 << 20)
                off += n
            run = []
        if p is not None:
            run.append(p)
    return segs + c.flow.fin()

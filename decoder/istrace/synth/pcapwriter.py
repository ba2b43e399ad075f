"""Tiny pcap/pcapng writer and iSCSI/TCP/IP packet builder for tests and fuzz seeds.

Everything here builds bytes exactly as they would appear on the wire, so a test can state
the expected decode field by field.  Three layers:

* iSCSI: `bhs()` and helpers (`scsi_cmd`, `data_in`, `scsi_rsp`, `login_req`, ...) build one PDU
  (BHS + AHS + optional CRC32C digests + data + padding).
* TCP/IP: `Flow` tracks both directions' sequence numbers of one connection and turns byte
  strings into segments (`Segment`), which `frame()` wraps in IPv4/IPv6 and a link layer.
* Files: `write_capture()` writes classic pcap (any link type, snaplen, optional gzip) or pcapng.
"""

from __future__ import annotations

import gzip
import ipaddress
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from istrace.capture.conn import conn_key

# ---------------------------------------------------------------- link types
LINKTYPE_NULL = 0  # BSD loopback, host byte order (little endian here)
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108  # OpenBSD loopback, network byte order
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100

# ---------------------------------------------------------------- CRC32C (iSCSI digests)
_CRC32C_TABLE: list[int] = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli) as iSCSI uses it (RFC 3720 B.4)."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def digest_bytes(data: bytes) -> bytes:
    """The 4 digest bytes as sent: the CRC in little-endian byte order (RFC 7143 13.1)."""
    return struct.pack("<I", crc32c(data))


# ---------------------------------------------------------------- iSCSI PDUs
OP_NOP_OUT = 0x00
OP_SCSI_CMD = 0x01
OP_TASK_MGMT_REQ = 0x02
OP_LOGIN_REQ = 0x03
OP_TEXT_REQ = 0x04
OP_DATA_OUT = 0x05
OP_LOGOUT_REQ = 0x06
OP_SNACK = 0x10
OP_NOP_IN = 0x20
OP_SCSI_RSP = 0x21
OP_TASK_MGMT_RSP = 0x22
OP_LOGIN_RSP = 0x23
OP_TEXT_RSP = 0x24
OP_DATA_IN = 0x25
OP_LOGOUT_RSP = 0x26
OP_R2T = 0x31
OP_ASYNC = 0x32
OP_REJECT = 0x3F


def lun_field(lun: int) -> bytes:
    """8-byte LUN field, SAM single-level peripheral addressing for LUN < 256, flat above."""
    if lun < 256:
        return struct.pack(">BB6x", 0, lun)
    return struct.pack(">H6x", 0x4000 | (lun & 0x3FFF))


@dataclass
class Digests:
    """Which digests a connection uses once in full feature phase."""

    header: bool = False
    data: bool = False


def bhs(opcode: int, flags: int, *, immediate: bool = False, ahs: bytes = b"",
        data: bytes = b"", spec: bytes = b"\0\0", lun_or_key: bytes = b"\0" * 8,
        itt: int = 0xFFFFFFFF, words: tuple[int, ...] = (), dsl: int | None = None) -> bytes:
    """48-byte Basic Header Segment.

    bytes 2-3 = `spec` (opcode specific), 8-15 = `lun_or_key`, 16-19 = ITT, and bytes 20..47 are
    the opcode-specific 32-bit `words` (up to 7, big endian, zero filled). `dsl` overrides the
    DataSegmentLength taken from `data` (for lying-header tests).
    """
    if len(ahs) % 4:
        raise ValueError("AHS length must be a multiple of 4")
    length = len(data) if dsl is None else dsl
    head = struct.pack(">BB2sB3s8sI", (0x40 if immediate else 0) | (opcode & 0x3F), flags & 0xFF,
                       spec, len(ahs) // 4, length.to_bytes(3, "big"), lun_or_key, itt)
    rest = b"".join(struct.pack(">I", w & 0xFFFFFFFF) for w in words)
    return (head + rest).ljust(48, b"\0")


def pdu(header: bytes, *, ahs: bytes = b"", data: bytes = b"", digests: Digests | None = None,
        bad_hdigest: bool = False, bad_ddigest: bool = False) -> bytes:
    """Whole PDU: BHS+AHS [+HeaderDigest] + data + pad [+DataDigest]."""
    dg = digests or Digests()
    out = header + ahs
    if dg.header:
        d = crc32c(out) ^ (1 if bad_hdigest else 0)
        out += struct.pack("<I", d)
    if data:
        padded = data + b"\0" * (-len(data) % 4)
        out += padded
        if dg.data:
            d = crc32c(padded) ^ (1 if bad_ddigest else 0)
            out += struct.pack("<I", d)
    return out


# SCSI Command flags (byte 1)
F_FINAL = 0x80
F_READ = 0x40
F_WRITE = 0x20
ATTR_SIMPLE = 0x01


def scsi_cmd(itt: int, cdb: bytes, *, lun: int = 1, edtl: int = 0, cmdsn: int = 1,
             expstatsn: int = 1, read: bool = False, write: bool = False,
             immediate_data: bytes = b"", final: bool = True, digests: Digests | None = None,
             bad_hdigest: bool = False) -> bytes:
    """SCSI Command PDU; CDBs longer than 16 bytes go to an Extended CDB AHS."""
    flags = (F_FINAL if final else 0) | (F_READ if read else 0) | (F_WRITE if write else 0)
    flags |= ATTR_SIMPLE
    ahs = b""
    base = cdb[:16].ljust(16, b"\0")
    if len(cdb) > 16:
        extra = cdb[16:]
        body = b"\0" + extra  # AHSLength counts from the reserved byte on
        ahs = struct.pack(">HB", len(body), 1) + body
        ahs += b"\0" * (-len(ahs) % 4)
    cdb_words = struct.unpack(">4I", base)
    h = bhs(OP_SCSI_CMD, flags, ahs=ahs, data=immediate_data, lun_or_key=lun_field(lun), itt=itt,
            words=(edtl, cmdsn, expstatsn, *cdb_words))
    return pdu(h, ahs=ahs, data=immediate_data, digests=digests, bad_hdigest=bad_hdigest)


def data_in(itt: int, data: bytes, *, offset: int = 0, datasn: int = 0, final: bool = True,
            status: int | None = None, statsn: int = 0, expcmdsn: int = 2, maxcmdsn: int = 33,
            lun: int = 1, ttt: int = 0xFFFFFFFF, residual: tuple[str, int] | None = None,
            digests: Digests | None = None, bad_ddigest: bool = False,
            bad_hdigest: bool = False) -> bytes:
    """SCSI Data-In PDU; `status` sets the S bit (phase collapse)."""
    flags = (F_FINAL if final else 0)
    if status is not None:
        flags |= 0x01 | F_FINAL
    res = 0
    if residual:
        flags |= 0x02 if residual[0] == "under" else 0x04
        res = residual[1]
    h = bhs(OP_DATA_IN, flags, data=data, spec=struct.pack(">BB", 0, status or 0),
            lun_or_key=lun_field(lun), itt=itt,
            words=(ttt, statsn if status is not None else 0, expcmdsn, maxcmdsn, datasn, offset,
                   res))
    return pdu(h, data=data, digests=digests, bad_ddigest=bad_ddigest, bad_hdigest=bad_hdigest)


def data_out(itt: int, data: bytes, *, ttt: int = 0xFFFFFFFF, offset: int = 0, datasn: int = 0,
             final: bool = True, expstatsn: int = 1, lun: int = 1,
             digests: Digests | None = None) -> bytes:
    h = bhs(OP_DATA_OUT, F_FINAL if final else 0, data=data, lun_or_key=lun_field(lun), itt=itt,
            words=(ttt, 0, expstatsn, 0, datasn, offset, 0))
    return pdu(h, data=data, digests=digests)


def r2t(itt: int, *, ttt: int, offset: int, desired: int, r2tsn: int = 0, statsn: int = 0,
        expcmdsn: int = 2, maxcmdsn: int = 33, lun: int = 1,
        digests: Digests | None = None) -> bytes:
    h = bhs(OP_R2T, F_FINAL, lun_or_key=lun_field(lun), itt=itt,
            words=(ttt, statsn, expcmdsn, maxcmdsn, r2tsn, offset, desired))
    return pdu(h, digests=digests)


def fixed_sense(key: int, asc: int, ascq: int) -> bytes:
    """Fixed-format (0x70) sense data, 18 bytes."""
    return struct.pack(">BBBIBIBBBBBB", 0x70, 0, key & 0x0F, 0, 10, 0, asc, ascq, 0, 0, 0, 0)


def descriptor_sense(key: int, asc: int, ascq: int) -> bytes:
    """Descriptor-format (0x72) sense data with no descriptors, 8 bytes."""
    return struct.pack(">BBBBBBBB", 0x72, key & 0x0F, asc, ascq, 0, 0, 0, 0)


def scsi_rsp(itt: int, *, status: int = 0, response: int = 0, statsn: int = 1,
             expcmdsn: int = 2, maxcmdsn: int = 33, sense: bytes = b"",
             residual: tuple[str, int] | None = None, digests: Digests | None = None,
             bad_ddigest: bool = False) -> bytes:
    """SCSI Response; `sense` is wrapped with its 2-byte SenseLength."""
    flags = F_FINAL
    res = 0
    if residual:
        flags |= 0x02 if residual[0] == "under" else 0x04
        res = residual[1]
    data = struct.pack(">H", len(sense)) + sense if sense else b""
    h = bhs(OP_SCSI_RSP, flags, data=data, spec=struct.pack(">BB", response, status), itt=itt,
            words=(0, statsn, expcmdsn, maxcmdsn, 0, 0, res))
    return pdu(h, data=data, digests=digests, bad_ddigest=bad_ddigest)


def kv_data(pairs: Iterable[tuple[str, str]]) -> bytes:
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs)


ISID = bytes.fromhex("400001370000")


def login_req(pairs: Iterable[tuple[str, str]], *, itt: int = 0, csg: int = 1, nsg: int = 3,
              transit: bool = True, cmdsn: int = 1, expstatsn: int = 0, tsih: int = 0,
              cid: int = 0) -> bytes:
    """Login Request (always immediate). Default: operational stage -> full feature phase."""
    flags = (0x80 if transit else 0) | (csg << 2) | (nsg if transit else 0)
    data = kv_data(pairs)
    h = bhs(OP_LOGIN_REQ, flags, immediate=True, data=data, spec=b"\0\0",
            lun_or_key=ISID + struct.pack(">H", tsih), itt=itt,
            words=(cid << 16, cmdsn, expstatsn))
    return pdu(h, data=data)


def login_rsp(pairs: Iterable[tuple[str, str]], *, itt: int = 0, csg: int = 1, nsg: int = 3,
              transit: bool = True, statsn: int = 0, expcmdsn: int = 1, maxcmdsn: int = 32,
              tsih: int = 1, status: tuple[int, int] = (0, 0)) -> bytes:
    flags = (0x80 if transit else 0) | (csg << 2) | (nsg if transit else 0)
    data = kv_data(pairs)
    h = bhs(OP_LOGIN_RSP, flags, data=data, spec=b"\0\0",
            lun_or_key=ISID + struct.pack(">H", tsih), itt=itt,
            words=(0, statsn, expcmdsn, maxcmdsn, (status[0] << 24) | (status[1] << 16)))
    return pdu(h, data=data)


def text_req(pairs: Iterable[tuple[str, str]], *, itt: int, cmdsn: int, expstatsn: int,
             digests: Digests | None = None) -> bytes:
    data = kv_data(pairs)
    h = bhs(OP_TEXT_REQ, F_FINAL, immediate=True, data=data, itt=itt,
            words=(0xFFFFFFFF, cmdsn, expstatsn))
    return pdu(h, data=data, digests=digests)


def nop_out(*, itt: int, cmdsn: int, expstatsn: int, data: bytes = b"",
            digests: Digests | None = None) -> bytes:
    h = bhs(OP_NOP_OUT, F_FINAL, immediate=True, data=data, itt=itt,
            words=(0xFFFFFFFF, cmdsn, expstatsn))
    return pdu(h, data=data, digests=digests)


def nop_in(*, itt: int, statsn: int, expcmdsn: int, maxcmdsn: int, data: bytes = b"",
           digests: Digests | None = None) -> bytes:
    h = bhs(OP_NOP_IN, F_FINAL, data=data, itt=itt,
            words=(0xFFFFFFFF, statsn, expcmdsn, maxcmdsn))
    return pdu(h, data=data, digests=digests)


def logout_req(*, itt: int, cmdsn: int, expstatsn: int, digests: Digests | None = None) -> bytes:
    h = bhs(OP_LOGOUT_REQ, F_FINAL, immediate=True, itt=itt, words=(0, cmdsn, expstatsn))
    return pdu(h, digests=digests)


def logout_rsp(*, itt: int, statsn: int, expcmdsn: int, maxcmdsn: int,
               digests: Digests | None = None) -> bytes:
    h = bhs(OP_LOGOUT_RSP, F_FINAL, itt=itt, words=(0, statsn, expcmdsn, maxcmdsn))
    return pdu(h, digests=digests)


# ---------------------------------------------------------------- CDBs
def cdb_tur() -> bytes:
    return bytes(6)


def cdb_inquiry(alloc: int = 96, evpd: bool = False, page: int = 0) -> bytes:
    return struct.pack(">BBBHB", 0x12, 1 if evpd else 0, page, alloc, 0)


def cdb_read10(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBIBHB", 0x28, 0, lba, 0, blocks, 0)


def cdb_write10(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBIBHB", 0x2A, 0, lba, 0, blocks, 0)


def cdb_read16(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", 0x88, 0, lba, blocks, 0, 0)


def cdb_write16(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBQIBB", 0x8A, 0, lba, blocks, 0, 0)


def cdb_read6(lba: int, blocks: int) -> bytes:
    return struct.pack(">BBHBB", 0x08, (lba >> 16) & 0x1F, lba & 0xFFFF, blocks & 0xFF, 0)


def cdb_readcap16(alloc: int = 32) -> bytes:
    return struct.pack(">BBQIBB", 0x9E, 0x10, 0, alloc, 0, 0)


def cdb_readcap10() -> bytes:
    return bytes([0x25]) + bytes(9)


def readcap16_data(last_lba: int, block_size: int) -> bytes:
    return struct.pack(">QI", last_lba, block_size).ljust(32, b"\0")


def readcap10_data(last_lba: int, block_size: int) -> bytes:
    return struct.pack(">II", last_lba, block_size)


# ---------------------------------------------------------------- TCP/IP
@dataclass
class Segment:
    """One TCP segment of a flow; `dir` is "i2t" or "t2i"."""

    dir: str
    seq: int
    ack: int
    flags: int
    payload: bytes
    ts_ns: int = 0
    caplen: int | None = None  # cut the *frame* to this many bytes (snaplen truncation)


TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10


@dataclass
class Flow:
    """One TCP connection; keeps the next sequence number of each direction."""

    ini_ip: str = "10.99.0.1"
    tgt_ip: str = "10.99.0.2"
    ini_port: int = 40000
    tgt_port: int = 3260
    ini_isn: int = 1000
    tgt_isn: int = 5_000_000
    mss: int = 1448
    nxt: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.nxt = {"i2t": self.ini_isn + 1, "t2i": self.tgt_isn + 1}

    @property
    def conn(self) -> str:
        """Connection key as docs/schema.md writes it."""
        return conn_key(self.ini_ip, self.ini_port, self.tgt_ip, self.tgt_port)

    def handshake(self) -> list[Segment]:
        return [
            Segment("i2t", self.ini_isn, 0, TCP_SYN, b""),
            Segment("t2i", self.tgt_isn, self.ini_isn + 1, TCP_SYN | TCP_ACK, b""),
            Segment("i2t", self.ini_isn + 1, self.tgt_isn + 1, TCP_ACK, b""),
        ]

    def other(self, d: str) -> str:
        return "t2i" if d == "i2t" else "i2t"

    def send(self, d: str, data: bytes, seg: int | None = None) -> list[Segment]:
        """Cut `data` into segments of at most `seg` (default MSS) bytes and advance seq."""
        size = seg or self.mss
        out = []
        for off in range(0, len(data), size):
            chunk = data[off:off + size]
            out.append(Segment(d, self.nxt[d], self.nxt[self.other(d)], TCP_ACK | TCP_PSH,
                               chunk))
            self.nxt[d] = (self.nxt[d] + len(chunk)) & 0xFFFFFFFF
        return out

    def skip(self, d: str, n: int) -> None:
        """Advance the sequence space without emitting (a capture gap)."""
        self.nxt[d] = (self.nxt[d] + n) & 0xFFFFFFFF

    def fin(self) -> list[Segment]:
        return [Segment("i2t", self.nxt["i2t"], self.nxt["t2i"], TCP_FIN | TCP_ACK, b""),
                Segment("t2i", self.nxt["t2i"], self.nxt["i2t"] + 1, TCP_FIN | TCP_ACK, b"")]


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp_segment(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int,
                payload: bytes, window: int = 65535) -> bytes:
    """TCP header (20 bytes, no options) + payload with a correct checksum."""
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4,
                      flags, window, 0, 0)
    sa, da = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    length = len(hdr) + len(payload)
    if sa.version == 4:
        pseudo = sa.packed + da.packed + struct.pack("!BBH", 0, 6, length)
    else:
        pseudo = sa.packed + da.packed + struct.pack("!IxxxB", length, 6)
    c = _csum(pseudo + hdr + payload)
    return hdr[:16] + struct.pack("!H", c) + hdr[18:] + payload


def ip_packet(src: str, dst: str, l4: bytes, proto: int = 6, ident: int = 1) -> bytes:
    """IPv4 (20-byte header) or IPv6 (40-byte header) packet around `l4`."""
    sa, da = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    if sa.version == 4:
        hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident & 0xFFFF, 0x4000, 64,
                          proto, 0, sa.packed, da.packed)
        hdr = hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:]
        return hdr + l4
    hdr = struct.pack("!IHBB16s16s", 6 << 28, len(l4), proto, 64, sa.packed, da.packed)
    return hdr + l4


MAC_I = bytes.fromhex("020000000001")
MAC_T = bytes.fromhex("020000000002")


def link_wrap(linktype: int, ip: bytes, *, outgoing: bool = True, vlan: int | None = None,
              qinq: int | None = None) -> bytes:
    """Put an IP packet into a frame of the given link type."""
    v6 = (ip[0] >> 4) == 6
    etype = ETH_P_IPV6 if v6 else ETH_P_IP
    if linktype == LINKTYPE_ETHERNET:
        src, dst = (MAC_I, MAC_T) if outgoing else (MAC_T, MAC_I)
        tags = b""
        if qinq is not None:
            tags += struct.pack("!HH", 0x88A8, qinq & 0xFFF)
        if vlan is not None:
            tags += struct.pack("!HH", ETH_P_8021Q, vlan & 0xFFF)
        return dst + src + tags + struct.pack("!H", etype) + ip
    if linktype == LINKTYPE_LINUX_SLL:
        return struct.pack("!HHH8sH", 4 if outgoing else 0, 1, 6, MAC_I.ljust(8, b"\0"),
                           etype) + ip
    if linktype == LINKTYPE_LINUX_SLL2:
        return struct.pack("!HHIHBB8s", etype, 0, 2, 1, 4 if outgoing else 0, 6,
                           MAC_I.ljust(8, b"\0")) + ip
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        return ip
    if linktype == LINKTYPE_NULL:
        return struct.pack("<I", 24 if v6 else 2) + ip
    if linktype == LINKTYPE_LOOP:
        return struct.pack("!I", 24 if v6 else 2) + ip
    raise ValueError(f"unsupported link type {linktype}")


def frame(flow: Flow, s: Segment, linktype: int = LINKTYPE_ETHERNET, *,
          vlan: int | None = None, qinq: int | None = None) -> bytes:
    """Full link-layer frame for one segment of `flow`."""
    if s.dir == "i2t":
        src, dst, sp, dp = flow.ini_ip, flow.tgt_ip, flow.ini_port, flow.tgt_port
    else:
        src, dst, sp, dp = flow.tgt_ip, flow.ini_ip, flow.tgt_port, flow.ini_port
    tcp = tcp_segment(src, dst, sp, dp, s.seq, s.ack, s.flags, s.payload)
    return link_wrap(linktype, ip_packet(src, dst, tcp), outgoing=s.dir == "i2t", vlan=vlan,
                     qinq=qinq)


# ---------------------------------------------------------------- capture files
@dataclass
class Packet:
    ts_ns: int
    data: bytes  # captured bytes
    orig_len: int  # length on the wire


def packets_of(flow: Flow, segs: Iterable[Segment], linktype: int = LINKTYPE_ETHERNET, *,
               t0_ns: int = 1_700_000_000_000_000_000, step_ns: int = 10_000,
               vlan: int | None = None, qinq: int | None = None) -> list[Packet]:
    """Frames for `segs`; a segment's own ts_ns wins, else t0 + i*step."""
    out = []
    for i, s in enumerate(segs):
        f = frame(flow, s, linktype, vlan=vlan, qinq=qinq)
        ts = s.ts_ns or t0_ns + i * step_ns
        cap = f if s.caplen is None else f[:s.caplen]
        out.append(Packet(ts, cap, len(f)))
    return out


def pcap_bytes(packets: Iterable[Packet], linktype: int = LINKTYPE_ETHERNET,
               snaplen: int = 262144, nanosecond: bool = False) -> bytes:
    """Classic pcap file image (little endian, micro- or nanosecond timestamps)."""
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for p in packets:
        sec, frac = divmod(p.ts_ns, 1_000_000_000)
        if not nanosecond:
            frac //= 1000
        out.append(struct.pack("<IIII", sec, frac, len(p.data), p.orig_len))
        out.append(p.data)
    return b"".join(out)


def _pcapng_block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def pcapng_bytes(packets: Iterable[Packet], linktype: int = LINKTYPE_ETHERNET,
                 snaplen: int = 262144) -> bytes:
    """pcapng file image: SHB, one IDB with if_tsresol=9 (ns), then EPBs."""
    shb = _pcapng_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    tsresol = struct.pack("<HHB3x", 9, 1, 9) + struct.pack("<HH", 0, 0)
    idb = _pcapng_block(0x00000001, struct.pack("<HHI", linktype, 0, snaplen) + tsresol)
    out = [shb, idb]
    for p in packets:
        hi, lo = p.ts_ns >> 32, p.ts_ns & 0xFFFFFFFF
        body = struct.pack("<IIIII", 0, hi, lo, len(p.data), p.orig_len) + p.data
        out.append(_pcapng_block(0x00000006, body))
    return b"".join(out)


def write_capture(path: str, packets: Iterable[Packet], linktype: int = LINKTYPE_ETHERNET, *,
                  fmt: str = "pcap", gz: bool = False, snaplen: int = 262144) -> str:
    """Write packets as `pcap` or `pcapng`, gzip'd if asked. Returns the path."""
    pk = list(packets)
    img = (pcapng_bytes(pk, linktype, snaplen) if fmt == "pcapng"
           else pcap_bytes(pk, linktype, snaplen))
    if gz:
        img = gzip.compress(img)
    with open(path, "wb") as f:
        f.write(img)
    return path

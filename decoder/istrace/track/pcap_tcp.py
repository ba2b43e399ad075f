"""Read the TCP segments of a pcap/pcapng file into a pandas table (no payload kept).

The cwnd/state tracker needs every TCP header of a capture, fast. tshark field export is slow
on large captures and dpkt is not a dependency, so this walks the file with `struct`, pulls
only the Ethernet/IP/TCP headers, and builds numpy columns. Handles classic pcap (micro- and
nanosecond, either byte order) and pcapng (EPB/SPB, per-interface link type and resolution),
link types Ethernet (with VLAN tags), Linux cooked v1/v2, raw IP, and loopback/null.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

# Link types (pcap LINKTYPE_*) this reader understands -> how to find the network header.
LINK_NULL, LINK_ETHERNET, LINK_RAW, LINK_RAW2, LINK_LOOP = 0, 1, 101, 12, 108
LINK_SLL, LINK_SLL2, LINK_IPV4, LINK_IPV6 = 113, 276, 228, 229

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10

COLUMNS = [
    "frame", "ts_ns", "src", "sport", "dst", "dport", "seq", "ack", "flags", "win",
    "len", "wscale", "mss", "tsval", "tsecr", "sack",
]


class PcapError(ValueError):
    """The file is not a readable pcap/pcapng capture."""


def _frames_pcap(data: memoryview, endian: str, nano: bool,
                 link: int) -> Iterator[tuple[int, int, memoryview]]:
    hdr = struct.Struct(endian + "IIII")
    scale = 1 if nano else 1000
    off, n = 24, len(data)
    while off + 16 <= n:
        sec, frac, incl, _orig = hdr.unpack_from(data, off)
        off += 16
        if off + incl > n:  # truncated last record (capture killed mid-write)
            break
        yield link, sec * 1_000_000_000 + frac * scale, data[off:off + incl]
        off += incl


def _frames_pcapng(data: memoryview) -> Iterator[tuple[int, int, memoryview]]:
    off, n = 0, len(data)
    endian = "<"
    ifaces: list[tuple[int, int]] = []  # (link type, ticks per second)
    while off + 12 <= n:
        btype = struct.unpack_from(endian + "I", data, off)[0]
        if btype == 0x0A0D0D0A:  # section header: byte order may change per section
            bom = struct.unpack_from("<I", data, off + 8)[0]
            endian = "<" if bom == 0x1A2B3C4D else ">"
            ifaces = []
        blen = struct.unpack_from(endian + "I", data, off + 4)[0]
        if blen < 12 or off + blen > n:
            break
        body = off + 8
        if btype == 1:  # interface description: link type + options (if_tsresol)
            link = struct.unpack_from(endian + "H", data, body)[0]
            tps = 1_000_000
            opt, end = body + 8, off + blen - 4
            while opt + 4 <= end:
                code, olen = struct.unpack_from(endian + "HH", data, opt)
                if code == 0:
                    break
                if code == 9 and olen >= 1:
                    r = data[opt + 4]
                    tps = 2 ** (r & 0x7F) if r & 0x80 else 10 ** r
                opt += 4 + ((olen + 3) & ~3)
            ifaces.append((link, tps))
        elif btype == 6:  # enhanced packet block
            ifid, hi, lo, incl = struct.unpack_from(endian + "IIII", data, body)
            if ifid < len(ifaces):
                link, tps = ifaces[ifid]
                ticks = (hi << 32) | lo
                ts = ticks * (1_000_000_000 // tps) if tps <= 1_000_000_000 else \
                    ticks * 1_000_000_000 // tps
                yield link, ts, data[body + 20:body + 20 + incl]
        elif btype == 3 and ifaces:  # simple packet block: no timestamp
            incl = min(struct.unpack_from(endian + "I", data, body)[0], blen - 16)
            yield ifaces[0][0], 0, data[body + 4:body + 4 + incl]
        off += blen


def _frames(path: Path) -> Iterator[tuple[int, int, memoryview]]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip-compressed capture (tcpdump -z gzip, pcapwriter)
        import gzip
        raw = gzip.decompress(raw)
    if len(raw) < 24:
        raise PcapError(f"{path}: too short to be a capture file")
    data = memoryview(raw)
    magic = raw[:4]
    classic = {
        b"\xd4\xc3\xb2\xa1": ("<", False), b"\xa1\xb2\xc3\xd4": (">", False),
        b"\x4d\x3c\xb2\xa1": ("<", True), b"\xa1\xb2\x3c\x4d": (">", True),
    }
    if magic in classic:
        endian, nano = classic[magic]
        link = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
        return _frames_pcap(data, endian, nano, link)
    if magic == b"\x0a\x0d\x0d\x0a":
        return _frames_pcapng(data)
    raise PcapError(f"{path}: not a pcap or pcapng file")


def _network_offset(link: int, frame: memoryview) -> tuple[int, int]:
    """(offset of the IP header, ethertype or 0 when the IP version byte decides)."""
    if link == LINK_ETHERNET:
        off, etype = 14, (frame[12] << 8) | frame[13] if len(frame) >= 14 else 0
        while etype in (0x8100, 0x88A8) and len(frame) >= off + 4:
            etype = (frame[off + 2] << 8) | frame[off + 3]
            off += 4
        return off, etype
    if link == LINK_SLL and len(frame) >= 16:
        return 16, (frame[14] << 8) | frame[15]
    if link == LINK_SLL2 and len(frame) >= 20:
        return 20, (frame[0] << 8) | frame[1]
    if link in (LINK_RAW, LINK_RAW2, LINK_IPV4, LINK_IPV6):
        return 0, 0
    if link in (LINK_NULL, LINK_LOOP):
        return 4, 0
    return -1, 0


def _tcp_options(frame: memoryview, start: int, end: int) -> tuple[int, int, int, int, int]:
    """wscale, mss, tsval, tsecr, sack-present (-1 where absent)."""
    wscale = mss = tsval = tsecr = -1
    sack = 0
    i = start
    while i < end:
        kind = frame[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= end:
            break
        olen = frame[i + 1]
        if olen < 2 or i + olen > end:
            break
        if kind == 3 and olen == 3:
            wscale = min(frame[i + 2], 14)
        elif kind == 2 and olen == 4:
            mss = (frame[i + 2] << 8) | frame[i + 3]
        elif kind == 8 and olen == 10:
            tsval, tsecr = struct.unpack_from(">II", frame, i + 2)
        elif kind == 5:
            sack = 1
        i += olen
    return wscale, mss, tsval, tsecr, sack


def _ip6_text(b: bytes) -> str:
    import ipaddress
    return f"[{ipaddress.IPv6Address(b)}]"


def read_segments(path: str | Path, with_data: bool = False) -> pd.DataFrame:
    """One row per TCP segment in the capture, in file order.

    Columns: frame (0-based index among all frames), ts_ns, src, sport, dst, dport, seq, ack,
    flags (TCP flag byte), win (raw header value, unscaled), len (TCP payload length from the
    IP header, so correct even when the capture was cut by a snap length), wscale/mss/tsval/
    tsecr (-1 when the option is absent), sack (1 if a SACK block is present).
    With `with_data`, a `data` column holds the captured payload bytes (shorter than `len` when
    the snap length cut it).
    """
    path = Path(path)
    if not path.is_file():
        raise PcapError(f"{path}: no such file")
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    blobs: list[bytes] = []
    ip4 = struct.Struct(">BBHHHBBH4s4s")
    tcp = struct.Struct(">HHIIBBH")
    for frame_no, (link, ts, frame) in enumerate(_frames(path)):
        off, etype = _network_offset(link, frame)
        if off < 0 or len(frame) < off + 20:
            continue
        ver = frame[off] >> 4
        if etype not in (0, 0x0800, 0x86DD):
            continue
        if ver == 4:
            vihl, _tos, tot, _id, frag, _ttl, proto, _ck, s, d = ip4.unpack_from(frame, off)
            ihl = (vihl & 0x0F) * 4
            if proto != 6 or (frag & 0x1FFF) or ihl < 20:
                continue
            src, dst = ".".join(map(str, s)), ".".join(map(str, d))
            tcp_off = off + ihl
            tcp_total = tot - ihl
        elif ver == 6 and len(frame) >= off + 40:
            plen = (frame[off + 4] << 8) | frame[off + 5]
            if frame[off + 6] != 6:  # extension headers: not seen on iSCSI paths, skip
                continue
            src = _ip6_text(bytes(frame[off + 8:off + 24]))
            dst = _ip6_text(bytes(frame[off + 24:off + 40]))
            tcp_off = off + 40
            tcp_total = plen
        else:
            continue
        if len(frame) < tcp_off + 20:
            continue
        sport, dport, seq, ack, doff, flags, win = tcp.unpack_from(frame, tcp_off)
        hlen = (doff >> 4) * 4
        if tot_ok := (tcp_total >= hlen):
            payload = tcp_total - hlen
        else:
            payload = 0
        opt_end = min(tcp_off + hlen, len(frame))
        if hlen > 20 and tot_ok:
            ws, mss, tsv, tse, sack = _tcp_options(frame, tcp_off + 20, opt_end)
        else:
            ws = mss = tsv = tse = -1
            sack = 0
        for key, val in (("frame", frame_no), ("ts_ns", ts), ("src", src), ("sport", sport),
                         ("dst", dst), ("dport", dport), ("seq", seq), ("ack", ack),
                         ("flags", flags), ("win", win), ("len", payload), ("wscale", ws),
                         ("mss", mss), ("tsval", tsv), ("tsecr", tse), ("sack", sack)):
            cols[key].append(val)
        if with_data:
            p0 = tcp_off + hlen
            blobs.append(bytes(frame[p0:min(p0 + payload_len(tcp_total, hlen), len(frame))]))
    df = pd.DataFrame({c: cols[c] for c in COLUMNS})
    if with_data:
        df["data"] = blobs
    ints = [c for c in COLUMNS if c not in ("src", "dst")]
    for c in ints:
        df[c] = np.asarray(cols[c], dtype=np.int64)
    return df


def payload_len(tcp_total: int, hlen: int) -> int:
    return max(tcp_total - hlen, 0)


def conn_and_dir(segs: pd.DataFrame, target_ports: tuple[int, ...] = (3260,)) -> pd.DataFrame:
    """Add `conn` (initiator side first, docs/schema.md) and `dir` (i2t/t2i) to a segments table.

    The target is the side whose port is an iSCSI port; failing that, the side that answered
    a SYN (SYN+ACK sender); failing that, the lower port.
    """
    out = segs.copy()
    if out.empty:
        out["conn"] = pd.Series(dtype=object)
        out["dir"] = pd.Series(dtype=object)
        return out
    synack = out[(out["flags"] & (TCP_SYN | TCP_ACK)) == (TCP_SYN | TCP_ACK)]
    servers = set(zip(synack["src"], synack["sport"], strict=True))
    sport = out["sport"].to_numpy()
    dport = out["dport"].to_numpy()
    src_is_tgt = np.isin(sport, target_ports) & ~np.isin(dport, target_ports)
    neither = ~np.isin(sport, target_ports) & ~np.isin(dport, target_ports)
    if neither.any():
        keyed = [(s, p) in servers for s, p in zip(out["src"], out["sport"], strict=True)]
        by_syn = np.asarray(keyed, dtype=bool)
        src_is_tgt = np.where(neither, by_syn | ((~by_syn) & (sport < dport) &
                                                 ~np.asarray([(d, q) in servers for d, q in zip(
                                                     out["dst"], out["dport"], strict=True)],
                                                     dtype=bool)), src_is_tgt)
    src_ep = out["src"].astype(str) + ":" + out["sport"].astype(str)
    dst_ep = out["dst"].astype(str) + ":" + out["dport"].astype(str)
    out["conn"] = np.where(src_is_tgt, dst_ep + "-" + src_ep, src_ep + "-" + dst_ep)
    out["dir"] = np.where(src_is_tgt, "t2i", "i2t")
    return out

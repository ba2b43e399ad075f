"""TCP segments of a capture, fast: classic pcap with Ethernet/SLL/raw IPv4 frames.

The merger reads every segment of both captures.  The decoder's general reader
(istrace.track.pcap_tcp) handles every format but parses each packet in Python; this one
walks only the record headers in Python and pulls the IPv4/TCP header fields for all packets
at once with numpy.  Captures it does not cover (pcapng, VLAN tags, IPv6 that may carry TCP)
go to the general reader; IP options are fine, and IPv6 that is only ICMPv6 (the router
solicitations of a capture without a port filter) is skipped.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pandas as pd

_CLASSIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1),
}
# link type -> offset of the IP header; the ethertype is checked per packet where there is one
_L2 = {1: 14, 113: 16, 101: 0, 12: 0, 228: 0}
_ETYPE_AT = {1: 12, 113: 14}

COLUMNS = ["ts_ns", "src", "sport", "dst", "dport", "seq", "ack", "flags", "win", "len"]


def _record_offsets(data: bytes, endian: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets of each packet's bytes, captured lengths, and raw (sec, frac) pairs."""
    n = len(data)
    unpack = struct.Struct(endian + "IIII").unpack_from
    offs: list[int] = []
    secs: list[int] = []
    fracs: list[int] = []
    incls: list[int] = []
    off = 24
    while off + 16 <= n:
        sec, frac, incl, _ = unpack(data, off)
        off += 16
        if off + incl > n:  # truncated last record (capture killed mid-write)
            break
        offs.append(off)
        secs.append(sec)
        fracs.append(frac)
        incls.append(incl)
        off += incl
    return (np.asarray(offs, dtype=np.int64), np.asarray(incls, dtype=np.int64),
            np.asarray(secs, dtype=np.int64) * 1_000_000_000 + np.asarray(fracs, dtype=np.int64))


def _be(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    v = np.zeros(len(at), dtype=np.int64)
    for k in range(width):
        v = (v << 8) | buf[at + k].astype(np.int64)
    return v


def _ip_text(v: np.ndarray) -> np.ndarray:
    """Dotted quads for an array of IPv4 addresses (formatted once per distinct address)."""
    uniq, inv = np.unique(v, return_inverse=True)
    text = np.array([f"{u >> 24 & 255}.{u >> 16 & 255}.{u >> 8 & 255}.{u & 255}" for u in uniq],
                    dtype=object)
    return text[inv]


def _carries_more_than_icmpv6(buf: np.ndarray, ip6: np.ndarray) -> bool:
    """Any of these IPv6 packets could hold TCP (next header other than ICMPv6)?  A capture
    without a port filter has the hosts' router solicitations in it; those alone must not
    send a whole IPv4 capture to the slow reader."""
    return bool(len(ip6)) and bool(np.any(buf[ip6 + 6] != 58))


def read_segments_fast(path: str | Path) -> pd.DataFrame | None:
    """Segments table (COLUMNS), or None when the capture needs the general reader."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 24 or data[:4] not in _CLASSIC:
        return None
    endian, scale = _CLASSIC[data[:4]]
    link = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    if link not in _L2:
        return None
    offs, incl, raw_ts = _record_offsets(data, endian)
    secs = raw_ts // 1_000_000_000
    ts = secs * 1_000_000_000 + (raw_ts - secs * 1_000_000_000) * scale
    buf = np.frombuffer(data, dtype=np.uint8)
    l2 = _L2[link]
    need = l2 + 40  # IPv4 header without options + TCP header without options
    big = incl >= need
    if link in _ETYPE_AT:
        et = np.zeros(len(offs), dtype=np.int64)
        et[big] = _be(buf, offs[big] + _ETYPE_AT[link], 2)
        if np.any(big & np.isin(et, (0x8100, 0x88A8))):
            return None  # VLAN tags: the general reader handles those
        v6 = big & (et == 0x86DD)
        if _carries_more_than_icmpv6(buf, offs[v6] + l2):
            return None
        keep = big & (et == 0x0800)
    else:
        keep = big
    o = offs[keep] + l2
    t = ts[keep]
    vihl = buf[o].astype(np.int64)
    if _carries_more_than_icmpv6(buf, o[(vihl >> 4) == 6]):
        return None
    ihl = (vihl & 15) * 4
    proto = buf[o + 9]
    frag = _be(buf, o + 6, 2) & 0x1FFF
    tot = _be(buf, o + 2, 2)
    ok = ((vihl >> 4) == 4) & (proto == 6) & (frag == 0) & (ihl >= 20)
    th = o + ihl
    ok &= (th + 20) <= (offs[keep] + incl[keep])
    o, t, ihl, tot, th = o[ok], t[ok], ihl[ok], tot[ok], th[ok]
    doff = (buf[th + 12].astype(np.int64) >> 4) * 4
    payload = tot - ihl - doff
    return pd.DataFrame({
        "ts_ns": t,
        "src": _ip_text(_be(buf, o + 12, 4)),
        "sport": _be(buf, th, 2),
        "dst": _ip_text(_be(buf, o + 16, 4)),
        "dport": _be(buf, th + 2, 2),
        "seq": _be(buf, th + 4, 4),
        "ack": _be(buf, th + 8, 4),
        "flags": buf[th + 13].astype(np.int64),
        "win": _be(buf, th + 14, 2),
        "len": np.where(payload > 0, payload, 0),
    })


def read_segments_any(path: str | Path) -> pd.DataFrame:
    fast = read_segments_fast(path)
    if fast is not None:
        return fast
    from istrace.track.pcap_tcp import read_segments

    return read_segments(path)[COLUMNS]

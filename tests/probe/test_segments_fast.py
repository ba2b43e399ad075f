"""The merger's fast segment reader against the decoder's general one, on made-up captures:
same rows where it takes the capture, a hand-over (None) where it must not."""

from __future__ import annotations

import struct
from pathlib import Path

import pandas as pd
from istrace.merge import segments
from istrace.track.pcap_tcp import read_segments

MAC = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02"


def _ipv4_tcp(src: int, dst: int, sport: int, dport: int, seq: int, payload: bytes) -> bytes:
    tcp = struct.pack(">HHIIBBHHH", sport, dport, seq, 7, 5 << 4, 0x18, 512, 0, 0) + payload
    ip = struct.pack(">BBHHHBBHII", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, src, dst)
    return MAC + b"\x08\x00" + ip + tcp


def _ipv6(next_header: int, body: bytes) -> bytes:
    ip6 = struct.pack(">IHBB", 6 << 28, len(body), next_header, 255) + bytes(32)
    return MAC + b"\x86\xdd" + ip6 + body


def _pcap(path: Path, frames: list[bytes]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000, 1000 * i, len(f), len(f)) + f)
    path.write_bytes(b"".join(out))
    return path


def _tcp_frames() -> list[bytes]:
    a, b = 0x0A4D0001, 0x0A4D0002
    return [_ipv4_tcp(a, b, 40000, 3260, 100, b"x" * 48),
            _ipv4_tcp(b, a, 3260, 40000, 900, b"y" * 1000),
            _ipv4_tcp(a, b, 40000, 3260, 148, b"")]


def test_icmpv6_noise_keeps_the_fast_path(tmp_path: Path) -> None:
    rs = _ipv6(58, bytes([133, 0, 0, 0]) + bytes(12))  # a router solicitation
    pcap = _pcap(tmp_path / "c.pcap", [rs, *_tcp_frames(), rs])
    fast = segments.read_segments_fast(pcap)
    assert fast is not None
    slow = read_segments(pcap)[segments.COLUMNS]
    assert len(fast) == 3
    pd.testing.assert_frame_equal(fast.reset_index(drop=True), slow.reset_index(drop=True),
                                  check_dtype=False)
    assert fast["len"].tolist() == [48, 1000, 0]
    assert fast["src"].tolist() == ["10.77.0.1", "10.77.0.2", "10.77.0.1"]


def test_ipv6_tcp_goes_to_the_general_reader(tmp_path: Path) -> None:
    tcp6 = struct.pack(">HHIIBBHHH", 40001, 3260, 5, 0, 5 << 4, 0x10, 512, 0, 0)
    pcap = _pcap(tmp_path / "c6.pcap", [*_tcp_frames(), _ipv6(6, tcp6)])
    assert segments.read_segments_fast(pcap) is None
    both = segments.read_segments_any(pcap)
    assert len(both) == 4 and (both["sport"] == 40001).sum() == 1

"""segments.csv (docs/schema.md): one row per TCP segment, every column checked against the
bytes written, for each link type and file format the decoder reads."""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from dechelp import decode, run_decoder
from istrace.capture.decoded import DecodeError, SegmentBlocks, read_segments, segments_file
from istrace.synth import pcapwriter as pw

T0 = 1_700_000_000_123_456_789
STEP = 1_000_003  # ns: not a whole number of microseconds
COLUMNS = ["frame", "ts_ns", "src", "sport", "dst", "dport", "seq", "ack", "flags", "win",
           "len", "wscale", "mss", "tsval", "tsecr", "sack"]
INT_COLS = [c for c in COLUMNS if c not in ("src", "dst")]

SYN_OPTS = (struct.pack("!BBH", 2, 4, 1460) + b"\x04\x02"                 # MSS, SACK permitted
            + struct.pack("!BBII", 8, 10, 0xFEDCBA98, 0) + b"\x01"        # TS (tsval > 2^31)
            + struct.pack("!BBB", 3, 3, 7))                               # NOP, WS 7
SYNACK_OPTS = (struct.pack("!BBH", 2, 4, 8960) + b"\x01\x01"
               + struct.pack("!BBII", 8, 10, 77, 0xFEDCBA98) + b"\x01" + b"\x03\x03\x0f")
TS_OPTS = b"\x01\x01" + struct.pack("!BBII", 8, 10, 1000, 77)
SACK_OPTS = TS_OPTS + b"\x01\x01" + struct.pack("!BBII", 5, 10, 5000, 6448)


@dataclass
class Seg:
    """A segment as the test writes it, and the row the decoder must give for it."""

    i2t: bool
    seq: int
    ack: int
    flags: int
    payload: bytes = b""
    win: int = 29200
    opts: bytes = b""
    cut: int | None = None  # keep only this many payload bytes (snap length)
    want: dict[str, int] | None = None  # expected option columns


def tcp_bytes(src: str, dst: str, sp: int, dp: int, s: Seg) -> bytes:
    opts = s.opts + b"\0" * (-len(s.opts) % 4)
    doff = (20 + len(opts)) // 4
    return struct.pack("!HHIIBBHHH", sp, dp, s.seq, s.ack, doff << 4, s.flags, s.win, 0,
                       0) + opts + s.payload


def conversation(v6: bool) -> tuple[str, str, list[Seg]]:
    ini, tgt = ("fd00:99::1", "fd00:99::2") if v6 else ("10.99.0.1", "10.99.0.2")
    A, PA = pw.TCP_ACK, pw.TCP_ACK | pw.TCP_PSH
    segs = [
        Seg(True, 1000, 0, pw.TCP_SYN, win=64240, opts=SYN_OPTS,
            want={"mss": 1460, "wscale": 7, "tsval": 0xFEDCBA98, "tsecr": 0}),
        Seg(False, 4_000_000_000, 1001, pw.TCP_SYN | A, win=65160, opts=SYNACK_OPTS,
            want={"mss": 8960, "wscale": 14, "tsval": 77, "tsecr": 0xFEDCBA98}),
        Seg(True, 1001, 4_000_000_001, A, opts=TS_OPTS, want={"tsval": 1000, "tsecr": 77}),
        Seg(True, 1001, 4_000_000_001, PA, b"x" * 48),
        Seg(False, 4_000_000_001, 1049, PA, b"y" * 1448),
        Seg(False, 4_000_000_001, 1049, PA, b"y" * 1448),                 # retransmission
        Seg(False, 4_000_001_449, 1049, PA, b"z" * 1448, cut=6),          # snaplen cut
        Seg(True, 1049, 4_000_001_449, A, opts=SACK_OPTS, win=501,
            want={"tsval": 1000, "tsecr": 77, "sack": 1}),
        Seg(True, 1049, 4_000_002_897, A | pw.TCP_FIN, win=0),
        Seg(False, 4_000_002_897, 1050, pw.TCP_RST, win=0),
    ]
    return ini, tgt, segs


def udp_frame(linktype: int, v6: bool) -> bytes:
    src, dst = ("fd00:99::1", "fd00:99::3") if v6 else ("10.99.0.1", "10.99.0.3")
    return pw.link_wrap(linktype, pw.ip_packet(src, dst, struct.pack("!HHHH", 53, 53, 12, 0)
                                               + b"dnsq", proto=17))


def build(tmp: Path, name: str, linktype: int, *, v6: bool = False, fmt: str = "pcap",
          gz: bool = False, nano: bool = False, **link: int) -> tuple[Path, pd.DataFrame]:
    """A capture of conversation() with non-TCP frames mixed in, and its expected rows."""
    ini, tgt, segs = conversation(v6)
    pk: list[pw.Packet] = []
    rows = []
    for s in segs:
        if len(pk) in (2, 6):  # frames that are not TCP still count in `frame`
            f = udp_frame(linktype, v6)
            pk.append(pw.Packet(T0 + len(pk) * STEP, f, len(f)))
        src, dst, sp, dp = (ini, tgt, 40000, 3260) if s.i2t else (tgt, ini, 3260, 40000)
        f = pw.link_wrap(linktype, pw.ip_packet(src, dst, tcp_bytes(src, dst, sp, dp, s)),
                         outgoing=s.i2t, **link)
        ts = T0 + len(pk) * STEP
        if not (nano or fmt == "pcapng"):
            ts -= ts % 1000  # microsecond file: the writer drops the nanoseconds
        keep = len(f) if s.cut is None else len(f) - len(s.payload) + s.cut
        pk.append(pw.Packet(ts, f[:keep], len(f)))
        text = (lambda a: f"[{a}]") if v6 else (lambda a: a)
        row = {"frame": len(pk) - 1, "ts_ns": ts, "src": text(src), "sport": sp,
               "dst": text(dst), "dport": dp, "seq": s.seq, "ack": s.ack, "flags": s.flags,
               "win": s.win, "len": len(s.payload), "wscale": -1, "mss": -1, "tsval": -1,
               "tsecr": -1, "sack": 0}
        row.update(s.want or {})
        rows.append(row)
    path = tmp / name
    if fmt == "pcap":
        img = pw.pcap_bytes(pk, linktype, nanosecond=nano)
        path.write_bytes(__import__("gzip").compress(img) if gz else img)
    else:
        pw.write_capture(str(path), pk, linktype, fmt=fmt, gz=gz)
    return path, pd.DataFrame(rows, columns=COLUMNS)


def segments(dec: Path, path: Path, *extra: str) -> pd.DataFrame:
    r = run_decoder(dec, ["--segments", "-", *extra, str(path)])
    assert r.returncode == 0, r.stderr.decode()
    return read_table(r.stdout)


def read_table(data: bytes) -> pd.DataFrame:
    df = pd.read_csv(io.BytesIO(data), dtype={c: "int64" for c in INT_COLS} | {
        "src": str, "dst": str}, keep_default_na=False)
    assert list(df.columns) == COLUMNS
    return df


def same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                  check_dtype=False)


LINKS = [
    ("eth", pw.LINKTYPE_ETHERNET, {}),
    ("eth-vlan", pw.LINKTYPE_ETHERNET, {"vlan": 42}),
    ("eth-qinq", pw.LINKTYPE_ETHERNET, {"vlan": 42, "qinq": 7}),
    ("sll", pw.LINKTYPE_LINUX_SLL, {}),
    ("sll2", pw.LINKTYPE_LINUX_SLL2, {}),
    ("raw", pw.LINKTYPE_RAW, {}),
    ("null", pw.LINKTYPE_NULL, {}),
    ("loop", pw.LINKTYPE_LOOP, {}),
]


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize(("name", "linktype", "link"), LINKS, ids=[n for n, _, _ in LINKS])
def test_every_link_type(dec: Path, tmp: Path, name: str, linktype: int, link: dict[str, int],
                         v6: bool) -> None:
    path, want = build(tmp, f"{name}.pcap", linktype, v6=v6, **link)
    same(segments(dec, path), want)


@pytest.mark.parametrize(("linktype", "v6"), [(pw.LINKTYPE_IPV4, False),
                                              (pw.LINKTYPE_IPV6, True)], ids=["ipv4", "ipv6"])
def test_ip_link_types(dec: Path, tmp: Path, linktype: int, v6: bool) -> None:
    path, want = build(tmp, "ip.pcap", linktype, v6=v6)
    same(segments(dec, path), want)


@pytest.mark.parametrize(("fmt", "gz", "nano"), [
    ("pcap", False, True), ("pcapng", False, False), ("pcapng", True, False),
    ("pcap", True, False)], ids=["pcap-ns", "pcapng-ns", "pcapng-gz", "pcap-gz"])
def test_formats_and_resolutions(dec: Path, tmp: Path, fmt: str, gz: bool, nano: bool) -> None:
    path, want = build(tmp, f"f.{fmt}", pw.LINKTYPE_ETHERNET, fmt=fmt, gz=gz, nano=nano,
                       vlan=5)
    got = segments(dec, path)
    same(got, want)
    if fmt == "pcapng" or nano:
        assert (got["ts_ns"] % 1000 != 0).any()  # the nanoseconds survive


def test_snaplen_cut_keeps_wire_length(dec: Path, tmp: Path) -> None:
    path, want = build(tmp, "cut.pcap", pw.LINKTYPE_ETHERNET)
    got = segments(dec, path)
    assert got[got["frame"] == 8]["len"].tolist() == [1448]  # 6 payload bytes captured
    same(got, want)


def test_cut_inside_headers(dec: Path, tmp: Path) -> None:
    """Options partly captured: the row is there, with what was captured; a frame cut inside
    the first 20 TCP bytes has no row but still counts."""
    s = Seg(True, 1, 2, pw.TCP_ACK, b"p" * 100, opts=TS_OPTS)
    f = pw.link_wrap(pw.LINKTYPE_ETHERNET, pw.ip_packet("10.0.0.1", "10.0.0.2",
                                                        tcp_bytes("10.0.0.1", "10.0.0.2", 5, 6, s)))
    pk = [pw.Packet(T0, f[:14 + 20 + 10], len(f)),       # TCP header cut: no row
          pw.Packet(T0 + 1000, f[:14 + 20 + 24], len(f)),  # TS option cut: row, no tsval
          pw.Packet(T0 + 2000, f, len(f))]
    path = Path(pw.write_capture(str(tmp / "hdr.pcap"), pk))
    got = segments(dec, path)
    assert got["frame"].tolist() == [1, 2]
    assert got["len"].tolist() == [100, 100]
    assert got["tsval"].tolist() == [-1, 1000]


def test_segmentation_offload_total_length_zero(dec: Path, tmp: Path) -> None:
    """IPv4 total length 0 (a TSO super-packet seen on the sending host): the wire length."""
    s = Seg(True, 1, 2, pw.TCP_ACK, b"q" * 3000)
    ip = bytearray(pw.ip_packet("10.0.0.1", "10.0.0.2", tcp_bytes("10.0.0.1", "10.0.0.2", 5,
                                                                  6, s)))
    ip[2:4] = b"\0\0"
    f = pw.link_wrap(pw.LINKTYPE_ETHERNET, bytes(ip))
    path = Path(pw.write_capture(str(tmp / "tso.pcap"), [pw.Packet(T0, f, len(f))]))
    assert segments(dec, path)["len"].tolist() == [3000]


def records(path: Path) -> pd.DataFrame:
    got = read_segments(path)
    return got.astype({"src": str, "dst": str})


@pytest.mark.parametrize("v6", [False, True], ids=["ipv4", "ipv6"])
def test_csv_dir_writes_the_same_table_as_records(dec: Path, tmp: Path, v6: bool) -> None:
    """--csv-dir's segments.bin (schema 4c), read by istrace.capture.decoded.read_segments,
    holds the rows and values of the CSV text, addresses included."""
    path, want = build(tmp, "d.pcap", pw.LINKTYPE_LINUX_SLL2, v6=v6)
    res = decode(dec, path)
    same(records(res.outdir / "segments.bin"), want)
    both = run_decoder(dec, ["--csv-dir", str(tmp / "o2"), "--segments", str(tmp / "s.csv"),
                             str(path)])
    assert both.returncode in (0, 3), both.stderr
    same(read_table((tmp / "s.csv").read_bytes()), want)
    assert (tmp / "o2" / "segments.bin").read_bytes() == (res.outdir / "segments.bin").read_bytes()


def test_records_of_an_empty_capture_and_a_damaged_file(dec: Path, tmp: Path) -> None:
    path, _ = build(tmp, "e.pcap", pw.LINKTYPE_ETHERNET)
    (tmp / "empty.pcap").write_bytes(path.read_bytes()[:24])
    r = run_decoder(dec, ["--segments", str(tmp / "e.bin"), str(tmp / "empty.pcap")])
    assert r.returncode == 0, r.stderr
    assert records(tmp / "e.bin").empty
    r = run_decoder(dec, ["--segments", str(tmp / "s.bin"), str(path)])
    assert r.returncode == 0, r.stderr
    data = (tmp / "s.bin").read_bytes()
    for bad in (data[:-1], data[:10], data[:-40] + b"NOTSEGS2" + data[-32:]):
        (tmp / "bad.bin").write_bytes(bad)
        with pytest.raises(DecodeError, match="segments table"):
            read_segments(tmp / "bad.bin")


BLOCK = 65_536  # rows of a segments.bin block (the trailer's B, docs/schema.md 4c)


def test_blocks_of_columns_read_across_their_edges(dec: Path, tmp: Path) -> None:
    """Two whole blocks and a part: any range of rows read from segments.bin, within a block
    or across the edges, is those rows of the CSV text; the trailer says the block size."""
    flow = pw.Flow()
    segs = flow.handshake() + flow.send("t2i", bytes(range(256)) * 4 * 1024, 8)
    segs += flow.send("i2t", b"x" * 8 * (2 * BLOCK + 1000 - len(segs)), 8)
    path = Path(pw.write_capture(str(tmp / "many.pcap"), pw.packets_of(flow, segs,
                                                                       step_ns=1000)))
    r = run_decoder(dec, ["--segments", str(tmp / "s.bin"), str(path)])
    assert r.returncode == 0, r.stderr
    want = segments(dec, path)
    assert len(want) == 2 * BLOCK + 1000
    assert int.from_bytes((tmp / "s.bin").read_bytes()[-8:-4], "little") == BLOCK
    same(records(tmp / "s.bin"), want)
    blocks = SegmentBlocks(tmp / "s.bin")
    cols = ["ts_ns", "seq", "ack", "len", "sport", "flags", "frame"]
    for a, b in ((0, 1), (BLOCK - 3, BLOCK + 5), (BLOCK, 2 * BLOCK), (5, 2 * BLOCK + 7),
                 (2 * BLOCK - 1, 2 * BLOCK + 1000), (2 * BLOCK + 999, 2 * BLOCK + 2000)):
        got = blocks.read(cols, a, b)
        for c in cols:
            assert got[c].tolist() == want[c].iloc[a:b].tolist(), (a, b, c)


def test_a_table_of_an_older_layout_is_decoded_again(dec: Path, tmp: Path) -> None:
    """A directory decoded by an older istrace (segments.bin of another layout, newer than
    the capture) gets this decoder's table, not an error."""
    path, want = build(tmp, "o.pcap", pw.LINKTYPE_ETHERNET)
    out = tmp / "cache"
    out.mkdir()
    (out / "segments.bin").write_bytes(b"\0" * 72 + b"ISTSEGS1" + bytes(24))
    same(records(segments_file(path, out)), want)


def test_segments_only_needs_no_iscsi(dec: Path, tmp: Path) -> None:
    """--segments alone: exit 0 on plain TCP (no iSCSI port), every port in the table."""
    flow = pw.Flow(tgt_port=5201)
    segs = flow.handshake() + flow.send("i2t", b"a" * 3000) + flow.fin()
    path = Path(pw.write_capture(str(tmp / "tcp.pcap"), pw.packets_of(flow, segs)))
    got = segments(dec, path)
    assert len(got) == len(segs)
    assert set(got["dport"]) | set(got["sport"]) == {40000, 5201}
    assert got["len"].sum() == 3000
    r = run_decoder(dec, ["--segments", "-", "--json", str(path)])
    assert r.returncode == 2  # stdout cannot carry both


def test_empty_and_truncated(dec: Path, tmp: Path) -> None:
    path, want = build(tmp, "t.pcap", pw.LINKTYPE_ETHERNET)
    data = path.read_bytes()
    (tmp / "cut.pcap").write_bytes(data[:-10])  # last record cut: the rows before it stay
    r = run_decoder(dec, ["--segments", "-", str(tmp / "cut.pcap")])
    assert r.returncode == 0
    same(read_table(r.stdout), want.iloc[:-1])
    (tmp / "empty.pcap").write_bytes(data[:24])
    assert segments(dec, tmp / "empty.pcap").empty

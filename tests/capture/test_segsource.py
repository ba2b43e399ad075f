"""Segments read from segments.bin a slice at a time (istrace.capture.segsource.FileSegments)
are the table read whole (read_segments + conn_and_dir) row for row, and every analysis that
walks them gives the same answer from either; a pass over the file leaves none of its pages
in the process."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from istrace.capture.decoded import conn_and_dir, read_segments, segments_file
from istrace.capture.segsource import FileSegments, FrameSegments, payload_slices, row_slices
from istrace.capture.slices import SLICE_ROWS, clean_cuts
from istrace.measure.bursts import data_bursts
from istrace.measure.payload import payload_totals
from istrace.plot.seqgraph import seq_graph
from istrace.synth import pcapwriter as pw
from istrace.track import tracker

PORTS = (3260,)
ROWS = 64  # many slices of a few thousand rows


def _capture(path: Path, seed: int = 1, same_ports: bool = False, sends: int = 2000) -> Path:
    """Three connections interleaved: two to an iSCSI port, one between two other ports
    (its sides told by its SYN+ACK); clocks that step back now and then. `same_ports`: the
    first two from two initiators on the same port (only the addresses tell them apart)."""
    rng = np.random.default_rng(seed)
    flows = [pw.Flow(ini_port=40000),
             pw.Flow(ini_ip="10.99.0.5" if same_ports else "10.99.0.1",
                     ini_port=40000 if same_ports else 40001, ini_isn=4_294_960_000),
             pw.Flow(ini_port=50000, tgt_ip="10.99.0.3", tgt_port=8080)]
    todo = [list(f.handshake()) for f in flows]
    for _ in range(sends):
        k = int(rng.choice(3, p=[0.6, 0.3, 0.1]))
        f = flows[k]
        if rng.random() < 0.7:
            todo[k] += f.send("t2i", bytes(int(rng.integers(1, 6000))))
        else:
            todo[k] += f.send("i2t", bytes(int(rng.integers(0, 100)) or 48))
    # the connections interleave at random; each one's own segments stay in order
    turns = np.repeat(np.arange(3), [len(t) for t in todo])
    rng.shuffle(turns)
    nxt = [iter(t) for t in todo]
    steps = rng.choice([0, 1000, 3000, 20_000, -2000], len(turns), p=[0.2, 0.4, 0.3, 0.07, 0.03])
    ts = 1_700_000_000_000_000_000 + np.cumsum(steps)
    packets = []
    for k, t in zip(turns, ts, strict=True):
        f = pw.frame(flows[k], next(nxt[k]))
        packets.append(pw.Packet(int(t), f, len(f)))
    pw.write_capture(str(path), packets)
    return path


@pytest.fixture(scope="module", params=[False, True], ids=["ports", "same-ports"])
def both(request: pytest.FixtureRequest, module_tmp: Callable[[str], Path]
         ) -> tuple[FileSegments, pd.DataFrame]:
    d = module_tmp("segsource")
    binf = segments_file(_capture(d / "initiator.pcap", same_ports=request.param),
                         d / "decoded")
    whole = conn_and_dir(read_segments(binf), PORTS)
    return FileSegments(binf, PORTS), whole


def test_rows_labels_and_cuts_are_the_whole_tables(both) -> None:
    src, whole = both
    assert len(src) == len(whole) > 3000
    assert len(whole["conn"].cat.categories) == 3
    frame = FrameSegments(whole)
    for col in ("conn", "dir"):
        # the labels in the order of the whole table's categories, each row's code theirs
        for s in (src, frame):
            assert list(s.labels(col)) == list(whole[col].cat.categories)
            codes = np.concatenate([c[col] for _a, _b, c in row_slices(s, [col], rows=ROWS)])
            assert (codes == whole[col].cat.codes.to_numpy()).all()
    assert list(src.conn_labels) == list(src.labels("conn"))
    assert list(src.dir_labels) == list(src.labels("dir"))
    assert src.code("dir", "t2i") == list(whole["dir"].cat.categories).index("t2i")
    assert src.code("conn", "nowhere") == -2
    assert src.conns() == frame.conns() == [str(c) for c in whole["conn"].unique()]
    ts = whole["ts_ns"].to_numpy()
    assert src.cuts(ROWS) == clean_cuts(ts, ROWS) and len(src.cuts(ROWS)) > 20
    assert src.ts_min() == int(ts.min())
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = int(rng.integers(0, len(src)))
        b = a + int(rng.integers(0, 500))
        got = src.read(["ts_ns", "seq", "conn", "ack", "flags", "win", "len", "sack", "dir"],
                       a, b)
        assert list(got) == ["ts_ns", "seq", "conn", "ack", "flags", "win", "len", "sack",
                             "dir"]
        for c, v in got.items():
            if c in ("conn", "dir"):
                assert (v == whole[c].cat.codes.to_numpy()[a:b]).all(), c
                continue
            want = whole[c].to_numpy()[a:b]
            assert v.dtype == want.dtype and (v == want).all(), c
    pd.testing.assert_frame_equal(src.frame(), whole[src.frame().columns])


def test_one_connection_is_the_filtered_table(both) -> None:
    src, whole = both
    for conn in src.conns():
        mine = src.only(conn)
        want = whole[whole["conn"] == conn].reset_index(drop=True)
        assert len(mine) == len(want)
        got = mine.read(["ts_ns", "seq", "len"], 0, len(mine))
        for c, v in got.items():
            assert (v == want[c].to_numpy()).all()
        assert mine.cuts(ROWS) == clean_cuts(want["ts_ns"].to_numpy(), ROWS)
        labels = mine.read(["conn", "dir"], 0, len(mine))
        assert (mine.conn_labels[labels["conn"]] == conn).all()
        assert (mine.dir_labels[labels["dir"]] == want["dir"].astype(str).to_numpy()).all()
        assert mine.conns() == [conn] and mine.only(conn) is mine
        assert len(mine.only(next(c for c in src.conns() if c != conn))) == 0
        pd.testing.assert_frame_equal(mine.frame(), want)


def test_a_connection_of_a_long_capture_holds_a_bit_a_row(tmp_path: Path) -> None:
    """A connection's rows of a file of several slices (SLICE_ROWS rows each): any range of
    them read is the filtered table's; taking the connection holds a bit per row of the
    file, not a position per row of it (8 bytes a row, in the process that tracks and
    diagnoses a capture of several)."""
    binf = segments_file(_capture(tmp_path / "initiator.pcap", sends=80_000),
                         tmp_path / "decoded")
    whole = conn_and_dir(read_segments(binf), PORTS)
    src = FileSegments(binf, PORTS)
    assert len(src) > 2 * SLICE_ROWS
    src.only(src.conns()[-1])  # what the file caches on the first look
    rng = np.random.default_rng(1)
    for conn in src.conns():
        tracemalloc.start()
        mine = src.only(conn)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        want = whole[whole["conn"] == conn].reset_index(drop=True)
        assert len(mine) == len(want) > 5000
        slices = -(-len(src) // SLICE_ROWS)
        assert held < slices * (SLICE_ROWS // 8 + 64) + 4096, (held, len(src))
        starts = rng.integers(0, len(mine), 12)
        spans = [(0, len(mine)), (len(mine) - 1, len(mine) + 10), (5, 5),
                 *((int(a), int(a + rng.integers(1, 3 * SLICE_ROWS))) for a in starts)]
        for a, b in spans:
            got = mine.read(["ts_ns", "seq", "len", "dir"], a, b)
            for c in ("ts_ns", "seq", "len"):
                assert (got[c] == want[c].to_numpy()[a:b]).all(), (conn, a, b, c)
            assert (mine.dir_labels[got["dir"]] == want["dir"].astype(str).to_numpy()[a:b]).all()
        assert mine.cuts(4096) == clean_cuts(want["ts_ns"].to_numpy(), 4096)
        assert mine.only(conn) is mine and len(mine.only("nowhere")) == 0
        pd.testing.assert_frame_equal(mine.frame(["ts_ns", "seq"]), want[["ts_ns", "seq"]])


def test_analyses_answer_the_same_from_the_file(both) -> None:
    src, whole = both
    frame = FrameSegments(whole)
    for d in ("t2i", "i2t"):
        pd.testing.assert_frame_equal(payload_totals(src, d), payload_totals(whole, d))
        pd.testing.assert_frame_equal(data_bursts(src, d, 5000),
                                      data_bursts(whole, d, 5000))
        for conn in src.conns():
            a = list(payload_slices(src, d, ("ts_ns", "seq", "len"), conn=conn, rows=ROWS))
            b = list(payload_slices(frame, d, ("ts_ns", "seq", "len"), conn=conn, rows=ROWS))
            assert len(a) == len(b) and all(
                (x[k] == y[k]).all() for x, y in zip(a, b, strict=True) for k in x)
            g, h = seq_graph(src, d, conn=conn, rows=ROWS), seq_graph(whole, d, conn=conn)
            for k in g:
                pd.testing.assert_frame_equal(g[k], h[k])
    got = tracker.track_pcap(src, None, host="target", dirs=("t2i", "i2t"), slice_rows=ROWS)
    want = tracker.track_pcap(whole, None, host="target", dirs=("t2i", "i2t"))
    assert len(got.samples) > 1000
    pd.testing.assert_frame_equal(got.samples.frame(), want.samples.frame())
    for k in ("states", "events"):
        pd.testing.assert_frame_equal(getattr(got, k).frame(), getattr(want, k).frame())
    assert got.notes == want.notes


def _resident_kib(path: Path) -> int:
    """This process' resident pages of `path`'s mappings (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0]
        if "-" in first and not first.endswith(":"):
            inside = line.rstrip().endswith(str(path))
        elif inside and first == "Rss:":
            total += int(line.split()[1])
    return total


def test_a_pass_gives_the_file_back(both) -> None:
    src, _ = both
    n = 0
    for _a, _b, c in row_slices(src, ["ts_ns", "seq", "len", "conn", "dir"], rows=ROWS):
        n += len(c["ts_ns"])
        # the pages read (and those a fault mapped around them) are given back
        assert _resident_kib(src.path) <= 64
    assert n == len(src) and src.path.stat().st_size > 200_000


def test_totals_per_connection_in_a_group_bys_order() -> None:
    """Per-connection totals list the connections as a group-by of the table would: a text
    column's sorted, a categorical's in its categories' order (not first appearance)."""
    df = pd.DataFrame({"ts_ns": np.arange(6), "len": [10, 20, 30, 40, 0, 5],
                       "dir": ["t2i"] * 6, "conn": ["b", "a", "b", "c", "a", "a"]})
    for conn in (df["conn"], pd.Categorical(df["conn"], categories=["c", "x", "b", "a"])):
        segs = df.assign(conn=conn)
        got = payload_totals(segs, "t2i")
        want = segs[segs["len"] > 0].groupby("conn", observed=True)["len"].sum()
        assert list(got.index) == list(want.index) and got["bytes"].tolist() == want.tolist()
        assert FrameSegments(segs).conns() == ["b", "a", "c"]

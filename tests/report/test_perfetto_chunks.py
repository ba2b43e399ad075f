"""The Perfetto trace is written a chunk of spans and instants at a time: any chunk size
gives the same file, a valid trace with every event once."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from istrace.capture import layout
from istrace.capture.segtable import SegmentTableWriter
from istrace.report.perfetto import merged_instants, write_trace


def _spans(n: int) -> pd.DataFrame:
    start = np.arange(n, dtype=np.int64) * 1000 + 5_000
    return pd.DataFrame({
        "row": ["initiator iSCSI", "target backing store", "wire"] * (n // 3) + ["wire"] * (n % 3),
        "host": ["initiator", "target", "wire"] * (n // 3) + ["wire"] * (n % 3),
        "layer": ["iscsi", "syscall", "net"] * (n // 3) + ["net"] * (n % 3),
        "start_ns": start, "end_ns": start + 700,
        "cmd": [float(i) if i % 4 else np.nan for i in range(n)],
        "bytes": [4096.0] * n, "label": ["READ(10)"] * n})


def _instants(n: int) -> pd.DataFrame:
    return pd.DataFrame({"ts_ns": np.arange(n, dtype=np.int64) * 333 + 4_999,
                         "host": ["initiator", "target"] * (n // 2) + ["initiator"] * (n % 2),
                         "layer": ["tcp", "iscsi"] * (n // 2) + ["tcp"] * (n % 2),
                         "event": ["tcp_probe", "SCSI Data-In"] * (n // 2)
                         + ["tcp_probe"] * (n % 2)})


@pytest.mark.parametrize("chunk", [1, 2, 7, 1000])
def test_any_chunk_size_writes_the_same_trace(tmp_path: Path, chunk: int) -> None:
    spans, ins = _spans(11), _instants(9)
    whole, cut = tmp_path / "whole.json", tmp_path / "cut.json"
    n_whole = write_trace(whole, spans, ins, chunk=100_000)
    n_cut = write_trace(cut, spans, ins, chunk=chunk)
    assert cut.read_bytes() == whole.read_bytes() and n_cut == n_whole
    ev = json.loads(cut.read_text())["traceEvents"]
    assert len(ev) == n_cut
    assert sum(e["ph"] == "X" for e in ev) == 11 and sum(e["ph"] == "i" for e in ev) == 9
    # times in us from the earliest event (an instant at 4999 ns), nanoseconds exact
    first = min((e for e in ev if e["ph"] == "X"), key=lambda e: e["ts"])
    assert first["ts"] == pytest.approx(0.001) and first["dur"] == pytest.approx(0.7)
    names = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(names) == 5  # 3 span tracks (backing store is its own) + 2 instant tracks


def test_spans_alone_and_nothing_at_all(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    assert write_trace(p, _spans(4), None, chunk=3) == 4 + 6 + 2 * 3  # spans, procs, threads
    assert json.loads(p.read_text())["traceEvents"][0]["ph"] == "X"
    write_trace(p, None, None)
    assert all(e["ph"] == "M" for e in json.loads(p.read_text())["traceEvents"])


def _segment_table(d: Path, host: str, ts: np.ndarray) -> None:
    n = len(ts)
    with SegmentTableWriter(d, host) as w:
        w.write({"ts_ns": ts, "ts_ns_merged": ts, "conn": ["c"] * n, "dir": ["t2i"] * n,
                 **{c: np.zeros(n, np.int64) for c in ("seq", "ack", "len", "flags", "win")},
                 "cmd_id": pd.array([None] * n, dtype="Int64")})


@pytest.mark.parametrize("most", [2, 5, 7, 8, 9, 13, 40])
def test_merged_instants_keep_every_probe_row_then_the_first_segments(tmp_path: Path,
                                                                      most: int) -> None:
    """Probe and PDU rows first (the earliest `most` of them when they are more: merged.parquet
    is in time order, and none after are read), then of both hosts' segments the earliest as
    many as fit (ties: the initiator's first), in time order: what bounding the whole joined
    table would keep."""
    probe = pd.DataFrame({"ts_ns_merged": np.array([10, 30, 55], np.int64),
                          "host": ["target", "initiator", "initiator"],
                          "layer": ["iscsi", "tcp", "block"],
                          "event": ["SCSI Data-In", "tcp_probe", "block_rq_issue"]})
    probe.to_parquet(tmp_path / layout.MERGED)
    seg = {"initiator": np.array([1, 7, 7, 20, 41, 60], np.int64),
           "target": np.array([3, 7, 8, 21, 22, 90, 91], np.int64)}
    for host, ts in seg.items():
        _segment_table(tmp_path, host, ts)
    cap = SimpleNamespace(dir=tmp_path, merged_columns=list(probe.columns))
    got = merged_instants(cap, most=most)

    rows = [(int(t), h, la, e) for t, h, la, e in probe.itertuples(index=False)][:most]
    net = sorted(((int(t), i, h) for i, h in enumerate(seg) for t in seg[h]))
    rows += [(t, h, "net", "segment") for t, _, h in net[:max(most - len(probe), 0)]]
    want = sorted(rows, key=lambda r: r[0])  # stable: probe rows before segments at a tie
    assert [tuple(r) for r in got[["ts_ns", "host", "layer", "event"]].astype(
        {"host": str, "layer": str, "event": str}).itertuples(index=False)] == want

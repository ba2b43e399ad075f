"""The Perfetto trace is written a chunk of spans and instants at a time: any chunk size
gives the same file, a valid trace with every event once."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from istrace.report.perfetto import write_trace


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

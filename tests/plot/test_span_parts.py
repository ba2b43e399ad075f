"""The timeline's spans in two parts (render.span_parts): the socket I/O system calls' spans,
made a few rows of merged.parquet at a time, give the spans, the window, the spans shown and
the Perfetto trace that one table of every span gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import synth
from istrace.capture.load import Capture, load_capture
from istrace.merge.merger import merge_dir
from istrace.plot import render
from istrace.report.perfetto import write_trace


def _merged(d: Path) -> Capture:
    synth.make_capture(d, n_cmds=48, qd=4)
    merge_dir(d, log=lambda m: None)
    return load_capture(d)


def _none(t: pa.Table) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(t["layer"], "no such layer"), False)


def _events(path: Path) -> list[str]:
    trace = json.loads(path.read_text())
    return sorted(json.dumps(e, sort_keys=True) for e in trace["traceEvents"])


@pytest.mark.parametrize("rows", [1, 7, 1 << 20])
def test_blocks_give_what_one_table_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          rows: int) -> None:
    cap = _merged(tmp_path / "cap")
    with monkeypatch.context() as m:  # every span in the one table
        m.setattr(render, "_held_span_rows", render.span_rows)
        m.setattr(render, "_socket_io_span_rows", _none)
        one = render.span_parts(cap)
        assert one.socket_io_start is None and not list(one.socket_io())

    whole_groups = render.merged_blocks

    def cut(*a: object, **k: object) -> Iterator[pd.DataFrame]:
        for b in whole_groups(*a, **k):  # type: ignore[arg-type]
            for i in range(0, len(b), rows):
                yield b.iloc[i:i + rows].copy()
    monkeypatch.setattr(render, "merged_blocks", cut)
    parts = render.span_parts(cap)

    # the target's reads of its backing store are made apart, in blocks of `rows`
    made = list(parts.socket_io())
    store = (one.held["row"] == "target backing store").sum()
    assert store == 48 and sum(len(b) for b in made) == store
    assert len(made) == (48 + rows - 1) // rows
    assert len(parts.held) == len(one.held) - store
    assert parts.socket_io_start == min(int(b["start_ns"].min()) for b in made)
    pd.testing.assert_frame_equal(parts.every(), one.held)

    shown, window = render.timeline_shown(parts)
    shown_one, window_one = render.timeline_shown(one.held)
    assert window == window_one and window is not None
    pd.testing.assert_frame_equal(shown, shown_one)

    a, b = tmp_path / "one.json", tmp_path / "parts.json"
    n_one = write_trace(a, one.held, None)
    blocks, shown_after = render.shown_while_written(parts)  # the report's tracer
    n_parts = write_trace(b, parts.held, None, more_spans=blocks,
                          more_start=parts.socket_io_start)
    assert n_parts == n_one and _events(b) == _events(a)
    kept, w = shown_after()
    assert w == window
    pd.testing.assert_frame_equal(kept, shown)


def test_the_window_is_an_application_read_not_socket_io() -> None:
    """The timeline's default window is the first application read spanning commands (the
    study's read()); a user-space initiator's socket receive that outlasts a command is not
    one."""
    spans = pd.DataFrame({
        "row": ["initiator syscall", "initiator syscall", "initiator iSCSI"],
        "host": "initiator", "layer": ["syscall", "syscall", "iscsi"],
        "start_ns": [0, 1_000, 2_000], "end_ns": [90_000, 50_000, 40_000],
        "cmd": [float("nan"), float("nan"), 0.0], "bytes": 4096.0,
        "label": ["recvfrom_exit", "pread64_exit", "READ(10)"]})
    pad = int(49_000 * 0.03)
    assert render.default_timeline_window(spans) == (1_000 - pad, 50_000 + pad)

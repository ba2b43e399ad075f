"""The merge reads, ties and sorts its rows a block at a time: blocks of any size give the
trace one pass over whole tables gives (the rules look each row up in the commands, never at
its neighbours; the external sort keeps ties in arrival order)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import synth
from istrace.capture import events, layout
from istrace.capture.load import load_capture
from istrace.merge import extsort, merger
from istrace.merge.merger import merge_dir


def test_tiny_blocks_give_the_same_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synth.make_capture(tmp_path, n_cmds=48, qd=4)
    merge_dir(tmp_path, write_csv=True, log=lambda m: None)
    want = pq.read_table(tmp_path / layout.MERGED)
    want_csv = (tmp_path / layout.MERGED_CSV).read_bytes()
    assert want.num_rows > 300 and want["cmd_id"].null_count < want.num_rows

    monkeypatch.setattr(events, "_BLOCK", 4096)      # a few dozen events a block
    monkeypatch.setattr(merger, "BLOCK_ROWS", 37)    # events and PDUs tied 37 rows at a time
    monkeypatch.setattr(merger, "SORTED_ROWS", 101)
    monkeypatch.setattr(merger, "ExternalSort", functools.partial(
        extsort.ExternalSort, run_rows=53, read_rows=5, fan_in=3))  # many runs, in passes
    merge_dir(tmp_path, write_csv=True, log=lambda m: None)
    got = pq.read_table(tmp_path / layout.MERGED)
    assert got.equals(want)
    assert (tmp_path / layout.MERGED_CSV).read_bytes() == want_csv
    assert not list(tmp_path.glob(".merge-*"))


def test_socket_cookies_past_2_63_are_kept(tmp_path: Path) -> None:
    """A socket cookie is the kernel's unsigned 64-bit number: one of 2^63 or more goes
    through the merge into merged.parquet and the analysis's events as it was (the merged
    table stored cookies as signed integers and the merge refused such a stream)."""
    synth.make_capture(tmp_path, n_cmds=8)
    big = (1 << 64) - 3
    path = tmp_path / "events-target.jsonl"
    lines = path.read_text().splitlines()
    tcp = [k for k, line in enumerate(lines)
           if line.startswith("{") and json.loads(line).get("layer") == "tcp"]
    assert tcp
    for k in tcp:
        ev = json.loads(lines[k])
        ev["cookie"] = big
        lines[k] = json.dumps(ev)
    path.write_text("\n".join(lines) + "\n")
    merge_dir(tmp_path, write_csv=True, log=lambda m: None)
    merged = pq.read_table(tmp_path / layout.MERGED)
    cookies = merged.filter(pc.equal(merged["layer"], "tcp"))["cookie"].to_pylist()
    assert cookies and set(cookies) == {big}, cookies
    assert str(big) in (tmp_path / layout.MERGED_CSV).read_text()
    # the tracker's events: the column has no gaps, so the kernel's unsigned integers exactly
    ev = load_capture(tmp_path).tcp_events()
    assert ev is not None and len(ev) == len(tcp)
    assert ev["cookie"].dtype == np.uint64 and set(ev["cookie"].tolist()) == {big}

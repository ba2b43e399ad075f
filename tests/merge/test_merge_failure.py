"""A merge that fails part way leaves the previous merge's tables as they were: the segment
tables, written beside the events' join in processes of their own, replace the old ones only
once everything else is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import synth
from istrace.capture import layout, segtable
from istrace.merge import merger
from istrace.merge.merger import merge_dir


def test_a_failed_merge_leaves_the_previous_tables(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    synth.make_capture(tmp_path, n_cmds=16, qd=2)
    merge_dir(tmp_path, log=lambda m: None)
    tables = {h: layout.segment_table(tmp_path, h) for h in layout.HOSTS}
    before = {h: (p.stat().st_ino, len(segtable.read(tmp_path, h))) for h, p in tables.items()}
    assert all(n > 100 for _, n in before.values())

    def disk_full(*_args: object, **_kw: object) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(merger, "_write_merged", disk_full)
    with pytest.raises(OSError, match="No space"):
        merge_dir(tmp_path, log=lambda m: None)
    after = {h: (p.stat().st_ino, len(segtable.read(tmp_path, h))) for h, p in tables.items()}
    assert after == before  # the same files, not new ones renamed over them
    left = sorted(q.name for p in tables.values() for q in p.parent.iterdir())
    assert left == ["part-0.parquet", "part-0.parquet"]  # no half-written table beside them
    assert not list(tmp_path.glob(".merge-*"))  # its scratch files gone with it


def test_a_killed_merge_s_scratch_goes_at_the_next(tmp_path: Path) -> None:
    """A merge killed outright cannot remove its scratch directory: the next one does, and
    leaves a running merge's alone."""
    synth.make_capture(tmp_path, n_cmds=4, qd=1)
    dead = tmp_path / ".merge-999999999-x1"  # no such process
    (dead / "run").mkdir(parents=True)
    alive = tmp_path / ".merge-1-x2"  # init's: running
    alive.mkdir()
    merge_dir(tmp_path, log=lambda m: None)
    assert not dead.exists() and alive.exists()
    assert sorted(p.name for p in tmp_path.glob(".merge-*")) == [alive.name]

"""A directory with no capture input is refused (non-zero, one clear line); a partial one is
analysed and says what is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import synth
from istrace.cli import report as report_cli
from istrace.merge import merger

ANALYSES = ("report", "track", "plot", "merge")


def _istrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "istrace.cli.main", *args],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("command", ANALYSES)
def test_empty_directory_is_refused(tmp_path: Path, command: str) -> None:
    r = _istrace(command, str(tmp_path))
    assert r.returncode != 0
    assert "no capture input" in r.stderr or "nothing to merge" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("command", ("report", "track", "plot"))
def test_meta_only_directory_is_refused(tmp_path: Path, command: str) -> None:
    (tmp_path / "meta.json").write_text('{"status": "error"}')
    r = _istrace(command, str(tmp_path))
    assert r.returncode == 2 and "no capture input" in r.stderr, r.stderr
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "plots").exists()


@pytest.mark.parametrize("command", ("report", "track", "plot"))
def test_missing_directory_is_refused(tmp_path: Path, command: str) -> None:
    r = _istrace(command, str(tmp_path / "nope"))
    assert r.returncode == 2 and "nope" in r.stderr, r.stderr


def test_partial_directory_says_what_is_missing(tmp_path: Path) -> None:
    synth.make_capture(tmp_path, n_cmds=8, qd=1)
    for f in tmp_path.glob("events-*"):
        f.unlink()
    r = _istrace("report", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "missing: probe events" in r.stdout
    assert (tmp_path / "report.html").is_file()


def test_report_merges_first_as_merge_then_report_would(tmp_path: Path) -> None:
    """`istrace report` on a capture not yet merged runs the merge in its own process: the
    same merged.parquet and verdict as `istrace merge` then `istrace report`; with
    --no-merge it reports from the raw tables and says merged.parquet is missing."""
    two, one, raw = tmp_path / "two", tmp_path / "one", tmp_path / "raw"
    synth.make_capture(two, n_cmds=16, qd=2)
    for d in (one, raw):
        shutil.copytree(two, d)
    assert not (two / "merged.parquet").exists()
    assert _istrace("merge", str(two)).returncode == 0
    assert _istrace("report", str(two)).returncode == 0
    r = _istrace("report", str(one))
    assert r.returncode == 0, r.stderr
    assert "merging first" in r.stderr and "merged.parquet" not in r.stdout
    assert pq.read_table(one / "merged.parquet").equals(pq.read_table(two / "merged.parquet"))
    assert json.loads((one / "verdict.json").read_text()) == json.loads(
        (two / "verdict.json").read_text())
    r = _istrace("report", "--no-merge", str(raw))
    assert r.returncode == 0, r.stderr
    assert not (raw / "merged.parquet").exists() and "missing: merged.parquet" in r.stdout


@pytest.mark.parametrize("how", ["raises", "dies"])
def test_report_goes_on_when_its_merge_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str],
                                             how: str) -> None:
    """The merge `istrace report` runs first runs in a process of its own: whether it raises
    there or that process dies, the report says so and aligns the layers from the raw
    tables, as when the merge fails in this process."""
    synth.make_capture(tmp_path, n_cmds=8, qd=1)
    parent = os.getpid()

    def broken(*_a: object, **_k: object) -> None:
        assert os.getpid() != parent, "the merge ran in the report's own process"
        if how == "dies":
            os._exit(9)
        raise merger.MergeError("no clock today")

    monkeypatch.setattr(merger, "merge_dir", broken)
    assert report_cli.main([str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "report: merge failed, layers aligned from the raw tables" in err, err
    assert ("no clock today" in err) == (how == "raises")
    assert not (tmp_path / "merged.parquet").exists()
    assert (tmp_path / "report.html").is_file()

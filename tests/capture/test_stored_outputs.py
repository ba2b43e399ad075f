"""Nothing lost: a capture's derived tables are replaced only by whole ones made from inputs
at least as long (a pcap cut short keeps the tables of the longer one), a corrupt table is made
again from the raw inputs with a one-line notice, a run killed mid-way leaves nothing a later
run trusts, and two runs at once on one directory take turns. All on one real capture."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pyarrow.parquet as pq
import pytest
from istrace.capture import layout, stamps
from storehelp import (
    ENV,
    argv,
    full_copy,
    inputs_copy,
    istrace,
    make_capture,
    no_traceback,
    verdict,
)


@pytest.fixture(scope="module")
def good(module_tmp):
    """The capture's inputs (`raw`) and a copy after an undisturbed report (`done`)."""
    base = module_tmp("store")
    raw = make_capture(base / "raw", "storea")
    done = inputs_copy(raw, base / "done")
    r = istrace("report", str(done))
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    return raw, done


def _lines(text: str, part: str) -> list[str]:
    return [x for x in text.splitlines() if part in x]


def test_a_cut_pcap_keeps_the_tables_of_the_longer_one(good, tmp_path):
    _, done = good
    d = full_copy(done, tmp_path / "cut")
    pcap = d / "target.pcap"
    with open(pcap, "r+b") as f:  # a disk that filled: the second half never written
        f.truncate(pcap.stat().st_size // 2)
    tables = {p: p.read_bytes() for p in (d / "decoded" / "target" / layout.PDUS,
                                          d / "decoded" / "target" / layout.SEGMENTS,
                                          d / layout.MERGED)}
    r = istrace("report", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    said = _lines(r.stderr, "is shorter than when it was analysed")
    assert len(said) == 1, r.stderr
    assert said[0] == (f"istrace: {pcap} is shorter than when it was analysed "
                       f"({pcap.stat().st_size} < {2 * pcap.stat().st_size} bytes, the same "
                       "first bytes: cut short): kept the tables made from the longer file; "
                       "remove decoded/target/ and merged.parquet to analyse it as it is now")
    assert "merging" not in r.stderr  # nothing made again from the shorter pcap
    for p, before in tables.items():
        assert p.read_bytes() == before, p
    assert verdict(d) == verdict(done)
    # removing them, as the line says, analyses the pcap as it is now
    for p in (d / "decoded" / "target", d / layout.MERGED):
        p.unlink() if p.is_file() else shutil.rmtree(p)
    r = istrace("report", str(d))
    assert r.returncode == 0 and "is shorter" not in r.stderr, r.stderr[-3000:]
    assert (d / "decoded" / "target" / layout.SEGMENTS).stat().st_size < \
        len(tables[d / "decoded" / "target" / layout.SEGMENTS])


def test_a_cut_pcap_keeps_an_older_istraces_tables(good, tmp_path):
    """Tables with no record of their pcap (an older istrace's): the pcap decoded again, and
    its tables kept when the new ones start with the same PDU and have fewer."""
    _, done = good
    d = full_copy(done, tmp_path / "old")
    for record in (d / "decoded" / "target" / layout.INPUTS, d / layout.MERGE_INPUTS):
        record.unlink()
    pcap = d / "target.pcap"
    with open(pcap, "r+b") as f:
        f.truncate(pcap.stat().st_size // 2)
    pdus = (d / "decoded" / "target" / layout.PDUS).read_bytes()
    for _ in range(2):  # the second run finds the tables recorded as kept
        r = istrace("report", str(d))
        assert r.returncode == 0, r.stderr[-3000:]
        no_traceback(r)
        assert _lines(r.stderr, "is shorter than when it was analysed") == [
            f"istrace: {pcap} is shorter than when it was analysed ({pcap.stat().st_size} "
            "bytes, fewer PDUs than its tables of an earlier analysis, the same first one: "
            "cut short): kept the tables made from the longer file; remove decoded/target/ "
            "and merged.parquet to analyse it as it is now"], r.stderr
        assert (d / "decoded" / "target" / layout.PDUS).read_bytes() == pdus
        assert verdict(d) == verdict(done)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_corrupt_merged_parquet_is_made_again(good, tmp_path, damage):
    _, done = good
    d = full_copy(done, tmp_path / damage)
    merged = d / layout.MERGED
    if damage == "garbage":
        merged.write_bytes(os.urandom(merged.stat().st_size))
    else:
        with open(merged, "r+b") as f:
            f.truncate(merged.stat().st_size // 2)
    r = istrace("report", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    said = _lines(r.stderr, "merged.parquet unreadable")
    assert len(said) == 1 and said[0].startswith("report: merged.parquet unreadable (") \
        and said[0].endswith("): merging again (istrace merge)"), r.stderr
    assert stamps.unreadable(merged) is None
    assert pq.read_metadata(merged).num_rows == pq.read_metadata(done / layout.MERGED).num_rows
    assert verdict(d) == verdict(done)


def test_a_corrupt_track_parquet_is_made_again(good, tmp_path):
    _, done = good
    d = full_copy(done, tmp_path / "track")
    track = d / layout.TRACK
    track.write_bytes(b"not a parquet file\n" * 100)
    r = istrace("track", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    said = _lines(r.stderr, "unreadable")
    assert len(said) == 1 and said[0].startswith(f"istrace: {track} unreadable (") \
        and said[0].endswith("): made again from the capture"), r.stderr
    assert pq.read_metadata(track).num_rows == pq.read_metadata(done / layout.TRACK).num_rows


def _killed_when(cmd: list[str], ready, timeout: float = 120) -> None:
    """Run `cmd` (its own process group) and SIGKILL the group once ready() holds, the
    command still running."""
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert p.poll() is None, "finished before it could be killed"
            assert time.monotonic() < deadline, "never got there"
            time.sleep(0.02)
        assert p.poll() is None, "finished before it could be killed"
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_a_merge_killed_then_a_report(good, tmp_path):
    raw, done = good
    d = inputs_copy(raw, tmp_path / "k")
    # killed once the merge's scratch exists: the decode done, the join under way
    _killed_when(argv("merge", str(d)), lambda: any(d.glob(".merge-*")))
    assert stamps.merge_state(d) is not None  # nothing half-made is trusted
    r = istrace("report", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    assert verdict(d) == verdict(done)
    assert not any(d.glob(".merge-*"))  # the killed run's scratch cleared


def test_a_report_killed_then_a_report(good, tmp_path):
    raw, done = good
    d = inputs_copy(raw, tmp_path / "k")
    # killed once the merge is written and the report's own steps run
    _killed_when(argv("report", str(d)), lambda: (d / layout.MERGE_INPUTS).is_file())
    assert not (d / layout.REPORT).exists()
    r = istrace("report", str(d))
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    assert verdict(d) == verdict(done)
    assert pq.read_metadata(d / layout.MERGED).num_rows == \
        pq.read_metadata(done / layout.MERGED).num_rows


def test_two_reports_at_once_take_turns(good, tmp_path):
    raw, done = good
    d = inputs_copy(raw, tmp_path / "two")
    runs = [subprocess.Popen(argv("report", str(d)), env=ENV, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in runs]
    for p, (_, err) in zip(runs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err
    waited = [err for _, err in outs if "is being analysed by another istrace run" in err]
    assert len(waited) == 1, [e[-500:] for _, e in outs]
    line = _lines(waited[0], "being analysed")[0]
    assert line.startswith(f"istrace report: {d} is being analysed by another istrace run "
                           "(pid ") and line.endswith("): waiting for it to finish")
    assert sum("merging first" in err for _, err in outs) == 1  # the second trusted it
    assert verdict(d) == verdict(done)
    assert pq.read_metadata(d / layout.MERGED).num_rows == \
        pq.read_metadata(done / layout.MERGED).num_rows

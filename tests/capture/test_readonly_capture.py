"""Read-only captures (an archive on a read-only share, here a read-only bind mount: root
ignores permission bits): every analysis command works, its derived files in the capture's
cache directory (named in one line) or where --out says; `compare` leaves the captures it
compares as they are unless --write, and says what a capture lacks. On one real capture."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest
from istrace.capture import layout
from storehelp import inputs_copy, istrace, listing, make_capture, no_traceback, read_only


@pytest.fixture(scope="module")
def cap(module_tmp):
    """(the capture's inputs, a writable copy after an undisturbed report)."""
    base = module_tmp("storero")
    raw = make_capture(base / "raw", "storeb")
    done = inputs_copy(raw, base / "done")
    r = istrace("report", str(done))
    assert r.returncode == 0, r.stderr[-3000:]
    return raw, done


def _cache_line(prog: str, d, cache_home) -> str:
    return (f"istrace {prog}: {d} is not writable: derived files go to "
            f"{layout.cache_dir(d)}")


@pytest.mark.parametrize("with_out", [False, True])
def test_report_on_a_read_only_capture(cap, tmp_path, with_out):
    raw, done = cap
    src = inputs_copy(raw, tmp_path / "src")
    before = listing(src)
    home = tmp_path / "cache"
    with read_only(src, tmp_path / "ro") as d:
        out = tmp_path / "r.html"
        r = istrace("report", str(d), *(["--out", str(out)] if with_out else []), cache=home)
        assert r.returncode == 0, r.stderr[-3000:]
        no_traceback(r)
        work = home / "istrace" / layout.cache_dir(d).parent.name / d.name
        assert f"istrace report: {d} is not writable: derived files go to {work}" in \
            r.stderr.splitlines()
        assert r.stdout.splitlines()[-1] == f"wrote {out if with_out else work / layout.REPORT}"
        assert (work / layout.VERDICT).read_text() == (done / layout.VERDICT).read_text()
        assert pq.read_metadata(work / layout.TRACK).num_rows == \
            pq.read_metadata(done / layout.TRACK).num_rows
        # a second run finds the cache's tables made: no merge again
        r = istrace("report", str(d), cache=home)
        assert r.returncode == 0 and "merging" not in r.stderr, r.stderr[-3000:]
    assert listing(src) == before


@pytest.mark.parametrize("with_out", [False, True])
def test_track_and_plot_on_a_read_only_capture(cap, tmp_path, with_out):
    raw, done = cap
    src = inputs_copy(raw, tmp_path / "src")
    before = listing(src)
    home = tmp_path / "cache"
    with read_only(src, tmp_path / "ro") as d:
        work = home / "istrace" / layout.cache_dir(d).parent.name / d.name
        track_out = tmp_path / "t" / "samples.parquet"
        r = istrace("track", str(d), *(["--out", str(track_out)] if with_out else []),
                    cache=home)
        assert r.returncode == 0, r.stderr[-3000:]
        no_traceback(r)
        assert f"istrace track: {d} is not writable: derived files go to {work}" in \
            r.stderr.splitlines()
        made = track_out if with_out else work / layout.TRACK
        assert r.stdout.splitlines()[-1].startswith(f"wrote {made}, ")
        assert pq.read_metadata(made).num_rows == \
            pq.read_metadata(done / layout.TRACK).num_rows
        plots_out = tmp_path / "p"
        r = istrace("plot", str(d), "--kind", "cwnd,outstanding", "--no-svg",
                    *(["--out", str(plots_out)] if with_out else []), cache=home)
        assert r.returncode == 0, r.stderr[-3000:]
        no_traceback(r)
        assert f"istrace plot: {d} is not writable: derived files go to {work}" in \
            r.stderr.splitlines()
        folder = plots_out if with_out else work / layout.PLOTS
        assert sorted(p.name for p in folder.iterdir()) == ["cwnd.png", "outstanding.png"]
    assert listing(src) == before


def test_merge_on_a_read_only_capture(cap, tmp_path):
    raw, done = cap
    src = inputs_copy(raw, tmp_path / "src")
    home = tmp_path / "cache"
    with read_only(src, tmp_path / "ro") as d:
        work = home / "istrace" / layout.cache_dir(d).parent.name / d.name
        r = istrace("merge", str(d), cache=home)
        assert r.returncode == 0, r.stderr[-3000:]
        no_traceback(r)
        assert r.stdout.splitlines()[-1].startswith(f"wrote {work / layout.MERGED}")
        assert pq.read_metadata(work / layout.MERGED).num_rows == \
            pq.read_metadata(done / layout.MERGED).num_rows


def test_a_read_only_archive_of_an_analysed_capture_is_used_as_it_is(cap, tmp_path):
    """Its decoded tables and merge are read through the cache's links, not made again."""
    _, done = cap
    src = tmp_path / "src"
    shutil.copytree(done, src)
    home = tmp_path / "cache"
    with read_only(src, tmp_path / "ro") as d:
        r = istrace("report", str(d), cache=home)
        assert r.returncode == 0, r.stderr[-3000:]
        no_traceback(r)
        assert "merging" not in r.stderr and "merge: decoding" not in r.stderr
        work = home / "istrace" / layout.cache_dir(d).parent.name / d.name
        assert (work / layout.MERGED).is_symlink()
        assert (work / layout.VERDICT).read_text() == (done / layout.VERDICT).read_text()


def test_compare_read_only_captures(cap, tmp_path):
    raw, done = cap
    home = tmp_path / "cache"
    a, b = inputs_copy(raw, tmp_path / "a"), inputs_copy(raw, tmp_path / "b")
    with read_only(a, tmp_path / "ra") as ra, read_only(b, tmp_path / "rb") as rb:
        r = istrace("compare", str(ra), str(rb), "--html", str(tmp_path / "c.html"),
                    cache=home)
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    for d in (ra, rb):
        assert f"istrace compare: {d} is left as it is: derived files go to " \
            f"{home / 'istrace' / layout.cache_dir(d).parent.name / d.name}" in r.stderr
    row = next(x for x in r.stdout.splitlines() if x.startswith("throughput MB/s"))
    # a number for each, the same capture twice
    _, _, x, y, ratio = row.split()
    assert float(x) > 0 and x == y and ratio == "(x1.00)", row


def test_compare_writes_into_no_capture_unless_asked(cap, tmp_path):
    raw, _ = cap
    home = tmp_path / "cache"
    a, b = inputs_copy(raw, tmp_path / "a"), inputs_copy(raw, tmp_path / "b")
    ev = tmp_path / "events-only"
    ev.mkdir()
    for n in ("events-initiator.jsonl", "events-target.jsonl", "meta.json"):
        shutil.copy2(raw / n, ev / n)
    before = {d: listing(d) for d in (a, b, ev)}
    r = istrace("compare", str(a), str(b), str(ev), "--html", str(tmp_path / "c.html"),
                cache=home)
    assert r.returncode == 0, r.stderr[-3000:]
    no_traceback(r)
    assert {d: listing(d) for d in (a, b, ev)} == before
    lack = [x for x in r.stderr.splitlines() if x.startswith(f"istrace compare: {ev}: ")]
    assert lack == [f"istrace compare: {ev}: no throughput (missing: initiator.pcap; "
                    "target.pcap; merged.parquet (istrace merge): layers aligned from raw "
                    "tables; host samples (hoststats-*.jsonl: the kernel's sender-limit "
                    "clocks and CPU use))"], r.stderr
    row = next(x for x in r.stdout.splitlines() if x.startswith("throughput MB/s"))
    assert row.split()[-1] == "missing"
    r = istrace("compare", str(a), str(b), "--write", "--html", str(tmp_path / "c.html"),
                cache=home)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "left as it is" not in r.stderr
    for d in (a, b):
        assert (d / layout.VERDICT).is_file() and (d / layout.TRACK).is_file()

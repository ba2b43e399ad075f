"""Damaged event streams (istrace.capture.events): unreadable lines counted and skipped with
their line numbers, up to the bound (1% of the lines, at least 10, at most 1000), then the
stream refused with one InputError naming the file and the first bad line; a cut last line and
a missing end record noted; the probe's own count of what it wrote read from its end record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from istrace.capture import events
from istrace.capture.events import EventStream
from istrace.capture.inputerror import InputError

META = {"ts_ns": 1, "host": "target", "layer": "meta", "event": "meta", "kernel": "6.x"}


def _line(ts: int) -> bytes:
    return (json.dumps({"ts_ns": ts, "host": "target", "layer": "tcp", "event": "probe",
                        "pid": 7, "cwnd": 10}) + "\n").encode()


def _end(n: int) -> bytes:
    return (json.dumps({"ts_ns": 10**9, "host": "target", "layer": "meta", "event": "end",
                        "lost": 0, "events": n}) + "\n").encode()


def _write(path: Path, n: int, bad_at: dict[int, bytes], end: bool = True,
           tail: bytes = b"") -> list[int]:
    """A stream of n events, line k (1-based, the meta line is 1) replaced by bad_at[k];
    the times of the events kept."""
    lines, kept = [json.dumps(META).encode() + b"\n"], []
    for i in range(n):
        k = len(lines) + 1
        if k in bad_at:
            lines.append(bad_at[k] + b"\n")
        else:
            lines.append(_line(100 + i))
            kept.append(100 + i)
    if end:
        lines.append(_end(n))
    path.write_bytes(b"".join(lines) + tail)
    return kept


def _read(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[int], EventStream, str]:
    s = EventStream(path)
    times = [t for table in s for t in table["ts_ns"].to_pylist()]
    return times, s, capsys.readouterr().err


def test_a_whole_stream_is_complete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "events-target.jsonl"
    kept = _write(p, 50, {})
    times, s, err = _read(p, capsys)
    h = s.health
    assert times == kept and err == ""
    assert (h.lines, h.bad, h.torn_line, h.ended, h.written, h.events) == (52, 0, None, True, 50,
                                                                           50)


@pytest.mark.parametrize("junk", [b"\x00\xff\xfe\x01 junk", b"not json at all",
                                  b'{"ts_ns": "soon", "host": "target"}', b"[1, 2]"])
def test_bad_lines_are_skipped_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         junk: bytes) -> None:
    p = tmp_path / "events-target.jsonl"
    kept = _write(p, 3000, {1234: junk, 2710: junk})
    times, s, err = _read(p, capsys)
    assert times == kept  # every good line, in order, across the bad block
    assert s.health.bad == 2 and [n for n, _ in s.health.first_bad] == [1234, 2710]
    assert f"{p}: line 1234: " in err and "skipped (2 unreadable lines in all: 1234, 2710)" in err
    assert len(err.splitlines()) == 1


def test_past_one_percent_the_stream_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "events-target.jsonl"
    _write(p, 3000, {k: b"\xffjunk" for k in range(500, 540)})  # 40 > 30 (1% of 3002)
    with pytest.raises(InputError) as exc:
        list(EventStream(p))
    msg = str(exc.value)
    assert msg.startswith(f"{p}: line 500: not text (junk bytes); 40 of 3002 lines unreadable "
                          "(at most 30 are skipped)")
    assert "\n" not in msg


def test_a_few_bad_lines_in_a_short_stream_are_skipped(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "events-target.jsonl"
    _write(p, 100, {k: b"junk" for k in range(10, 20)})  # 10: the least ever skipped
    times, s, _ = _read(p, capsys)
    assert len(times) == 90 and s.health.bad == 10


def test_binary_junk_is_refused_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past BAD_MAX bad lines the reading stops there: a binary file is not read through."""
    monkeypatch.setattr(events, "BAD_MAX", 20)
    p = tmp_path / "events-target.jsonl"
    _write(p, 60_000, {k: b"\xfe" for k in range(1000, 1100)})  # 3 blocks: refused in the 1st
    s, n = EventStream(p), 0
    with pytest.raises(InputError, match=r"line 1000: not text \(junk bytes\); 21 unreadable "
                       r"lines by line 1020 \(at most 20"):
        for table in s:
            n += table.num_rows
    assert s.health.bad == 21 and n < 30_000


def test_a_cut_last_line_and_no_end_record(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "events-target.jsonl"
    kept = _write(p, 40, {}, end=False, tail=b'{"ts_ns": 99999, "host": "tar')
    times, s, err = _read(p, capsys)
    assert times == kept
    assert s.health.torn_line == 42 and not s.health.ended and s.health.written is None
    assert f"{p}: line 42: cut mid-line" in err


def test_csv_stream_bad_line_numbered_from_the_header(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "events-target.csv"
    rows = ["ts_ns,host,layer,event,pid"] + [f"{100 + i},target,tcp,probe,7" for i in range(50)]
    rows[20] = "12x,target,tcp,probe,seven"
    p.write_text("\n".join(rows) + "\n")
    times, s, err = _read(p, capsys)
    assert len(times) == 49 and s.health.first_bad[0][0] == 21
    assert f"{p}: line 21: " in err

"""The probe events' one reader (istrace.capture.events): a stream cut mid-line by a killed
probe keeps every whole line, and the hosts' events come back as one table in time order."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from istrace.capture import events
from istrace.capture.events import load_events, read_events_table

META = {"ts_ns": 1, "host": "target", "layer": "meta", "event": "meta", "kernel": "6.x"}


def _line(ts: int, host: str, event: str = "write_exit", **extra: object) -> str:
    return json.dumps({"ts_ns": ts, "host": host, "layer": "syscall", "event": event,
                       "pid": 7, "bytes": 4096, **extra}) + "\n"


def _stream(path: Path, host: str, times: list[int], tail: str = "") -> None:
    path.write_text(json.dumps(META | {"host": host}) + "\n"
                    + "".join(_line(t, host) for t in times) + tail)


@pytest.mark.parametrize("filler", [0, 3000])  # small, and past the 64 KiB read back from the end
def test_cut_last_line_is_dropped_and_the_rest_kept(tmp_path: Path, filler: int) -> None:
    p = tmp_path / "events-target.jsonl"
    times = list(range(100, 100 + filler + 5))
    _stream(p, "target", times, tail='{"ts_ns": 999999, "host": "target", "lay')
    table, meta, lost = read_events_table(p)
    assert table["ts_ns"].to_pylist() == times
    assert meta["kernel"] == "6.x" and lost == 0
    assert "meta" not in table["layer"].to_pylist()


def test_only_a_cut_line_is_an_empty_stream(tmp_path: Path) -> None:
    p = tmp_path / "events-target.jsonl"
    p.write_text('{"ts_ns": 5, "host": "tar')
    table, meta, lost = read_events_table(p)
    assert table.num_rows == 0 and meta == {} and lost == 0


def test_counter_lines_give_the_lost_events(tmp_path: Path) -> None:
    p = tmp_path / "events-initiator.jsonl"
    _stream(p, "initiator", [10, 20], tail=json.dumps(
        {"ts_ns": 30, "host": "initiator", "layer": "meta", "event": "lost", "lost": 17}) + "\n")
    table, _, lost = read_events_table(p)
    assert table["ts_ns"].to_pylist() == [10, 20] and lost == 17


def test_hosts_joined_in_time_order_ties_kept_in_host_order(tmp_path: Path) -> None:
    _stream(tmp_path / "events-initiator.jsonl", "initiator", [30, 10, 50])
    _stream(tmp_path / "events-target.jsonl", "target", [20, 30, 40])
    ev = load_events(tmp_path)
    assert ev is not None
    assert ev["ts_ns"].tolist() == [10, 20, 30, 30, 40, 50]
    # a stable sort: at the same time the initiator's event (read first) stays first
    assert ev["host"].tolist() == ["initiator", "target", "initiator", "target", "target",
                                   "initiator"]


def test_missing_host_label_is_the_files(tmp_path: Path) -> None:
    (tmp_path / "events-target.jsonl").write_text(
        json.dumps({"ts_ns": 5, "layer": "syscall", "event": "write_exit"}) + "\n")
    ev = load_events(tmp_path)
    assert ev is not None and ev["host"].tolist() == ["target"]


def test_the_held_events_leave_out_socket_io_and_tcp_but_not_the_applications_reads(
        tmp_path: Path) -> None:
    """load_capture holds events.held_rows: every layer but the system calls and TCP, and of
    the system calls the initiator's reads; Capture.tcp_events() reads the TCP layer's,
    Capture.all_events() every one."""
    from istrace.capture.load import load_capture

    ini = [_line(10, "initiator", "recvfrom_exit"), _line(20, "initiator", "read_exit"),
           _line(30, "initiator", "pread64_exit"), _line(35, "initiator", "readahead_exit"),
           json.dumps({"ts_ns": 40, "host": "initiator", "layer": "tcp",
                       "event": "tcp_probe", "cwnd": 10}) + "\n",
           json.dumps({"ts_ns": 50, "host": "initiator", "layer": "block",
                       "event": "bio_queue", "bytes": 4096}) + "\n"]
    (tmp_path / "events-initiator.jsonl").write_text("".join(ini))
    # the target's reads are its backing store's and its socket's: not the application's
    (tmp_path / "events-target.jsonl").write_text(
        _line(15, "target", "write_exit") + _line(25, "target", "read_exit"))
    cap = load_capture(tmp_path, decode=False)
    held = cap.held_events()
    assert held is not None
    got = list(zip(held["ts_ns"], held["event"].astype(str), strict=True))
    assert got == [(20, "read_exit"), (30, "pread64_exit"), (50, "bio_queue")]
    tcp = cap.tcp_events()
    assert tcp is not None and tcp["event"].astype(str).tolist() == ["tcp_probe"]
    assert tcp["cwnd"].tolist() == [10]
    every = cap.all_events()
    assert every is not None
    assert every["ts_ns"].tolist() == [10, 15, 20, 25, 30, 35, 40, 50]


@pytest.mark.parametrize("block", [64, 150, 1 << 20])  # under a line, a line or two, all
@pytest.mark.parametrize("cut", [False, True])
def test_every_line_once_whatever_the_blocks_and_their_edges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, cut: bool) -> None:
    """The stream is parsed a block of whole lines at a time (events._BLOCK bytes, about):
    blocks shorter than a line, edges inside lines and a cut last line lose and double
    nothing."""
    monkeypatch.setattr(events, "_BLOCK", block)
    p = tmp_path / "events-target.jsonl"
    times = list(range(1000, 1400))
    _stream(p, "target", times, tail='{"ts_ns": 5, "ho' if cut else "")
    table, meta, _ = read_events_table(p)
    assert table["ts_ns"].to_pylist() == times and meta["kernel"] == "6.x"


def test_a_long_stream_is_not_held_whole_while_it_is_read(tmp_path: Path) -> None:
    """Arrow's memory while a stream is read stays at a few blocks, whatever its length (its
    streaming JSON reader read the whole file ahead)."""
    p = tmp_path / "events-target.jsonl"
    with open(p, "w") as f:
        f.write(json.dumps(META) + "\n")
        for i in range(0, 200_000, 1000):
            f.write("".join(_line(t, "target") for t in range(i, i + 1000)))
    assert p.stat().st_size > 20e6
    code = ("import sys, pyarrow as pa\nfrom istrace.capture.events import EventStream\n"
            "n = sum(t.num_rows for t in EventStream(sys.argv[1]))\n"
            "print(n, pa.default_memory_pool().max_memory())")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert int(out[0]) == 200_000
    assert int(out[1]) < 12e6, f"{int(out[1]) / 1e6:.0f} MB of Arrow buffers at once"


def _csv_stream(path: Path, times: list[int], tail: str = "") -> None:
    path.write_text('"ts_ns","host","layer","event","pid","comm"\n'
                    + "".join(f'{t},"target","syscall","write_exit",7,"tgtd, io"\n'
                              for t in times) + tail)


@pytest.mark.parametrize("block", [64, 150, 1 << 20])
@pytest.mark.parametrize("cut", [False, True])
def test_a_csv_stream_whatever_the_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          block: int, cut: bool) -> None:
    """`istrace probe --format csv` streams: each block parsed under the header line, a cut
    last line dropped, the columns the file lacks null."""
    monkeypatch.setattr(events, "_BLOCK", block)
    p = tmp_path / "events-target.csv"
    times = list(range(1000, 1300))
    _csv_stream(p, times, tail='1400,"tar' if cut else "")
    table, _, _ = read_events_table(p)
    assert table["ts_ns"].to_pylist() == times
    assert set(table["comm"].to_pylist()) == {"tgtd, io"} and table["cwnd"].null_count == 300


def test_a_long_csv_stream_is_not_held_whole_while_it_is_read(tmp_path: Path) -> None:
    """Arrow's memory while a CSV stream is read is a few blocks' (the streaming CSV reader
    held several times the stream): three times the events, not more of it."""
    code = ("import sys, pyarrow as pa\nfrom istrace.capture.events import EventStream\n"
            "n = sum(t.num_rows for t in EventStream(sys.argv[1]))\n"
            "print(n, pa.default_memory_pool().max_memory())")
    most = {}
    for n in (100_000, 300_000):
        p = tmp_path / str(n) / "events-target.csv"
        p.parent.mkdir()
        _csv_stream(p, list(range(n)))
        out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True,
                             text=True, check=True, timeout=120).stdout.split()
        assert int(out[0]) == n
        most[n] = int(out[1])
    assert most[300_000] < 1.2 * most[100_000], most


def test_the_merged_events_are_the_streams(tmp_path: Path) -> None:
    """A merged capture's analysed events come from merged.parquet (the streams' JSON is the
    merge's to parse): the same table, row for row and type for type, as the streams give,
    with equal times across hosts, lines out of time order in a stream, a line that names no
    host, and names first seen in another order at each end."""
    from istrace.capture import layout
    from istrace.capture.load import load_capture
    from istrace.merge.merger import merge_dir

    def ev(ts: int, host: str | None, layer: str, event: str, **extra: object) -> str:
        row = {"ts_ns": ts, "host": host, "layer": layer, "event": event, "pid": 7,
               "source": "probe", **extra}
        return json.dumps({k: v for k, v in row.items() if v is not None}) + "\n"

    ini = [ev(30, "initiator", "scsi", "cmd_issue", itt=5, lba=8),
           ev(10, "initiator", "tcp", "tcp_probe", conn="c1", cwnd=10, seq=100, ack=50,
              cookie=4097),
           ev(20, "initiator", "syscall", "pread64_exit", bytes=4096),
           ev(20, "initiator", "syscall", "recvfrom_exit", bytes=100),
           ev(40, "initiator", "scsi", "cmd_done", itt=5, lat_ns=9000)]
    tgt = [ev(20, "target", "tcp", "cong_state", conn="c1", ca_state="Recovery"),
           ev(10, "target", "scsi", "tgt_cmd_queue", itt=5),
           ev(20, None, "scsi", "tgt_io_done", itt=5),  # the stream's host: the file's
           ev(50, "target", "syscall", "write_exit", bytes=4096)]
    (tmp_path / "events-initiator.jsonl").write_text("".join(ini))
    (tmp_path / "events-target.jsonl").write_text("".join(tgt))
    streams = load_events(tmp_path, events.held_rows)
    tcp_streams = load_events(tmp_path, events.tcp_rows)
    tcp_few = load_events(tmp_path, events.tcp_rows, ["ts_ns", "host", "layer", "cwnd"])
    merge_dir(tmp_path, offset_override=15, log=lambda _m: None)  # the target's rows first
    assert (tmp_path / layout.MERGED).is_file()
    (tmp_path / "events-initiator.jsonl").write_text("")  # read from merged.parquet, or nothing
    (tmp_path / "events-target.jsonl").write_text("")
    cap = load_capture(tmp_path, decode=False)
    held = cap.held_events()
    assert streams is not None and held is not None and tcp_streams is not None
    assert held["event"].astype(str).tolist() == [
        "tgt_cmd_queue", "pread64_exit", "tgt_io_done", "cmd_issue", "cmd_done"]
    pd.testing.assert_frame_equal(held, streams)
    assert not any(m.startswith("probe events") for m in cap.missing)
    tcp = cap.tcp_events()
    assert tcp is not None and tcp["event"].astype(str).tolist() == ["tcp_probe", "cong_state"]
    pd.testing.assert_frame_equal(tcp, tcp_streams)
    few = cap.tcp_events(["cwnd"])  # what the tracker reads: a few columns, those always
    assert few is not None and list(few.columns) == ["ts_ns", "host", "layer", "cwnd"]
    pd.testing.assert_frame_equal(few, tcp_few)

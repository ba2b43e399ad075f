"""Decoder runs (istrace.capture.decoderun): a decoded directory is whole or absent, never a
run's partial tables (pdus.csv marks a directory decoded: a partial one would be trusted)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from core_helpers import write_session
from istrace.capture import decoderun, layout
from istrace.capture.decoded import load_pdus


def _scratch(parent: Path) -> list[Path]:
    return [p for p in parent.iterdir() if ".part-" in p.name] if parent.is_dir() else []


def test_a_run_moves_its_tables_in_when_it_succeeds(tmp_path: Path) -> None:
    pcap = write_session(tmp_path / "s.pcap")
    out = tmp_path / "decoded" / "initiator"
    run = decoderun.Decoding(pcap, out)
    assert run.wait(timeout=60) == out
    assert sorted(p.name for p in out.iterdir()) == [
        "commands.csv", "connections.csv", "inputs.json", "pdus.csv", "segments.bin"]
    assert len(load_pdus(out)) == 13
    assert not _scratch(out.parent)


def test_a_failed_run_leaves_no_table(tmp_path: Path) -> None:
    (tmp_path / "bad.pcap").write_text("not a capture\n")
    out = tmp_path / "decoded" / "initiator"
    with pytest.raises(decoderun.DecodeError) as e:
        decoderun.decode_to_dir(tmp_path / "bad.pcap", out, timeout=60)
    assert e.value.returncode == 2 and "not a pcap" in str(e.value)
    assert not (out / layout.PDUS).exists() and not _scratch(out.parent)


def test_a_run_stopped_half_way_leaves_no_table(tmp_path: Path) -> None:
    """A decoder reading a capture that is still being written (a FIFO here: it has begun
    its tables and waits for the rest) is stopped: its partial pdus.csv must not appear."""
    fifo = tmp_path / "growing.pcap"
    os.mkfifo(fifo)
    img = write_session(tmp_path / "s.pcap").read_bytes()
    writer = threading.Thread(target=lambda: fifo.open("wb").write(img[:200]), daemon=True)
    writer.start()  # the decoder opens the FIFO, reads a packet or two, then waits
    out = tmp_path / "decoded" / "target"
    run = decoderun.Decoding(fifo, out)
    deadline = time.monotonic() + 20
    while not any((p / layout.PDUS).exists() for p in _scratch(out.parent)):
        assert time.monotonic() < deadline, "the decoder never began its tables"
        time.sleep(0.01)
    run.cancel()
    writer.join(timeout=5)
    assert not (out / layout.PDUS).exists() and not _scratch(out.parent)


def test_start_missing_decodes_only_what_is_missing_and_removes_dead_runs_scratch(
        tmp_path: Path) -> None:
    d = tmp_path / "cap"
    d.mkdir()
    write_session(layout.pcap(d, "initiator"))
    write_session(layout.pcap(d, "target"))
    decoderun.decode_to_dir(layout.pcap(d, "target"), layout.decoded_dir(d, "target"))
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = layout.decoded_dir(d, "initiator").parent / f".initiator.part-{gone.pid}-x"
    stale.mkdir()
    (stale / layout.PDUS).write_text("pdu\n")
    runs = decoderun.start_missing(d, (3260,))
    try:
        assert list(runs) == ["initiator"]
        assert not stale.exists()
        runs["initiator"].wait(timeout=60)
    finally:
        for r in runs.values():
            r.cancel()
    assert len(load_pdus(layout.decoded_dir(d, "initiator"))) == 13
    assert decoderun.start_missing(d, (3260,)) == {}

"""A target on another port than 3260: the capture's portal (meta.json) or --port says where
iSCSI is, for the decoder and every analysis command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from istrace.capture.load import Capture, load_capture
from istrace.cli import report as report_cli
from istrace.synth import pcapwriter as pw

PORT = 3261
READS = 8


def write_reads(d: Path) -> None:
    """initiator.pcap: a handshake and eight 4 KiB READ(10)s, one at a time, on PORT."""
    d.mkdir(parents=True, exist_ok=True)
    flow = pw.Flow(tgt_port=PORT)
    segs = flow.handshake()
    for i in range(READS):
        itt = 0x10 + i
        segs += flow.send("i2t", pw.scsi_cmd(itt, pw.cdb_read10(8 * i, 8), edtl=4096,
                                             cmdsn=1 + i, read=True))
        segs += flow.send("t2i", pw.data_in(itt, bytes(4096), expcmdsn=2 + i)
                          + pw.scsi_rsp(itt, statsn=1 + i, expcmdsn=2 + i))
    pw.write_capture(str(d / "initiator.pcap"), pw.packets_of(flow, segs, step_ns=1_000_000))


def test_port_from_the_option_or_the_portal(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    write_reads(bare)
    # Nothing on 3260: no iSCSI command found (the decoder looks where it is told).
    cap = load_capture(bare)
    assert cap.ports == (3260,)
    assert "initiator" not in cap.commands or cap.commands["initiator"].empty
    # --port: the READs, on a fresh decode
    for sub in (bare / "decoded",):
        for f in sub.rglob("*"):
            if f.is_file():
                f.unlink()
    cap = load_capture(bare, ports=(PORT,))
    assert cap.ports == (PORT,) and len(cap.commands["initiator"]) == READS
    assert cap.segs["initiator"].conns() == [f"10.99.0.1:40000-10.99.0.2:{PORT}"]
    # the portal meta.json recorded: the same without the option
    withmeta = tmp_path / "meta"
    write_reads(withmeta)
    (withmeta / "meta.json").write_text(json.dumps({"testbed": {"portal": f"10.99.0.2:{PORT}"}}))
    cap = load_capture(withmeta)
    assert cap.ports == (PORT,) and len(cap.commands["initiator"]) == READS


def test_report_takes_port(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_reads(tmp_path)
    assert report_cli.main([str(tmp_path), "--port", str(PORT)]) == 0
    v = json.loads((tmp_path / "verdict.json").read_text())
    assert v["evidence"]["outstanding_max"] == 1
    with pytest.raises(SystemExit):
        report_cli.main([str(tmp_path), "--port", "70000"])
    assert "a TCP port is 1..65535" in capsys.readouterr().err


@pytest.mark.parametrize(("clock", "says"), [
    ({"offset_ns": 1500, "bound_ns": 500, "method": "tcp-segments-two-way"}, "1.5 us +- 0.5 us"),
    ({"offset_ns": 1500, "bound_ns": None, "method": "tcp-segments-one-way"}, "one side only"),
    ({"offset_ns": None, "bound_ns": None, "method": "none"}, "offset unknown"),
])
def test_the_clock_is_told_however_much_of_it_the_merge_found(clock: dict, says: str) -> None:
    """clock.json of a capture with one pcap (no offset) or one direction (one bound) is told
    as such, not a crash of the report."""
    assert says in Capture(dir=Path("."), clock=clock).clock_note

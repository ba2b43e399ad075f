"""The VM capture's post-processing, on real bpftrace lines from a VM run (no VM needed):
decoding of raw BHS/CDB words, host/layer assignment, and the cross-layer command table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from istrace.testbed import vm_analysis, vm_events

DATA = Path(__file__).parent / "data"
INI, TGT = "10.78.0.1", "10.78.0.2"


@pytest.mark.parametrize(("cdb", "want"), [
    (bytes.fromhex("28000000004000004000") + bytes(6), (0x28, 0x40, 0x40 * 512)),
    (bytes.fromhex("88000000000100000000000001000000"), (0x88, 1 << 32, 256 * 512)),
    (bytes.fromhex("0800100800") + bytes(11), (0x08, 0x1008, 256 * 512)),
    (bytes.fromhex("12000000ff00") + bytes(10), (0x12, None, None)),
])
def test_decode_cdb(cdb, want):
    assert vm_events.decode_cdb(cdb) == want


def test_iscsi_command_line_gives_itt_lba_and_edtl():
    line = ("iscsi task_xmit 771810976230 151 kworker/u4:4 bhs0=c101 bhs2=80000000000005 "
            "cdb0=400000000028 cdb1=40")
    r = vm_events.parse_line(line, 1000, INI, TGT)
    assert r is not None
    assert (r["host"], r["layer"], r["event"]) == ("initiator", "iscsi", "task_xmit")
    assert r["ts_ns"] == 771810977230
    assert r["opcode"] == 0x01 and r["cdb_opcode"] == 0x28
    assert r["itt"] == 0x05000000 and r["lba"] == 64 and r["bytes"] == 32768


def test_lio_tag_is_the_wire_itt():
    r = vm_events.parse_line("lio cmd_exec 5 795 iscsi_trx tag=5 lba=0 bytes=32768", 0, INI, TGT)
    assert r is not None
    assert (r["host"], r["layer"], r["itt"]) == ("target", "scsi", 0x05000000)


def test_tcp_host_by_local_port():
    base = ("tcp tcp_probe 9 0 swapper/0 sport={} dport={} len=48 snd_nxt=1 snd_una=1 cwnd=10 "
            "ssthresh=7 snd_wnd=5 srtt=800 rcv_wnd=6 cookie=42")
    ini = vm_events.parse_line(base.format(59522, 3260), 0, INI, TGT)
    tgt = vm_events.parse_line(base.format(3260, 59522), 0, INI, TGT)
    assert ini is not None and tgt is not None
    assert ini["host"] == "initiator" and tgt["host"] == "target"
    assert ini["conn"] == tgt["conn"] == f"{INI}:59522-{TGT}:3260"
    assert ini["srtt_us"] == 800 and ini["cwnd"] == 10 and ini["cookie"] == 42


def test_other_output_and_cut_lines_are_skipped():
    assert vm_events.parse_line("Attaching 16 probes...", 0, INI, TGT) is None
    assert vm_events.parse_line("", 0, INI, TGT) is None
    with pytest.raises(KeyError):
        vm_events.parse_line("lio cmd_exec 5 795 iscsi_trx tag=5", 0, INI, TGT)


@pytest.fixture
def capdir(tmp_path):
    shutil.copy(DATA / "probes-one-command.txt", tmp_path / "probes.txt")
    (tmp_path / "bpf-clock.json").write_text(json.dumps(
        {"realtime_minus_monotonic_ns": 1795407125477225840, "bound_ns": 95600}))
    return tmp_path


def test_convert_dir_splits_hosts_and_keeps_schema(capdir):
    counts = vm_events.convert_dir(capdir, INI, TGT)
    assert counts == {"initiator": 15, "target": 3}
    rows = [json.loads(x) for x in (capdir / "events-target.jsonl").read_text().splitlines()]
    assert {r["event"] for r in rows} == {"cmd_rx", "cmd_exec", "data_in"}
    assert all(list(r)[:24] == vm_events.COLUMNS[:24] for r in rows)
    assert json.loads((capdir / "clock-vm.json").read_text())["offset_ns"] == 0


def test_command_table_ties_every_layer(capdir):
    vm_events.convert_dir(capdir, INI, TGT)
    cmds = vm_analysis.command_table(vm_analysis.load_events(capdir))
    assert len(cmds) == 1
    c = cmds.iloc[0]
    assert (c.lba, c.bytes, c.itt, c.lio_lba, c.tag) == (0, 32768, 0x05000000, 0, 20)
    order = ["read_enter_ns", "rq_issue_ns", "scsi_issue_ns", "iscsi_queue_ns", "iscsi_xmit_ns",
             "lio_rx_ns", "lio_exec_ns", "lio_data_in_ns", "iscsi_status_ns", "scsi_done_ns",
             "rq_complete_ns", "read_exit_ns"]
    times = [int(c[k]) for k in order]
    assert times == sorted(times)
    # The tag is dispatched again later: the first completion belongs to the first dispatch.
    assert int(c.scsi_done_ns) - int(c.scsi_issue_ns) == 771978125010 - 771797164450
    assert c.outstanding == 1


def test_inflight_pairs_by_tag(capdir):
    vm_events.convert_dir(capdir, INI, TGT)
    ev = vm_analysis.load_events(capdir)
    spans = vm_analysis.command_spans(ev)
    assert len(spans) == 2 and spans.paired.all()
    assert vm_analysis.inflight_series(ev).inflight.max() == 1

"""Report verdicts and the Perfetto export, on synthetic captures with known truth."""

import json
import shutil

import pytest
import synth
from istrace.capture.outputs import read_verdict
from istrace.cli import report as report_cli
from istrace.report import html
from istrace.track.of_capture import load_tracked


def test_report_on_qd1(tmp_path):
    t = synth.make_capture(tmp_path, n_cmds=32, qd=1)
    path, diag = html.report(tmp_path)
    text = path.read_text()
    assert path.stat().st_size > 50_000 and text.count("data:image/png;base64,") == 7
    assert diag["sizes"]["scsi_command"]["typical"] == 32768
    assert diag["outstanding"]["max"] == 1
    assert diag["one_way_s"] == pytest.approx(t.owd_ns / 1e9)
    assert 0.8 < diag["idle_ratio"] < 0.95
    assert 0.9 < diag["model_idle_ratio"] < 1.0
    assert diag["limit"].startswith("application")
    v = read_verdict(tmp_path)
    assert v["primary"]["cause"] == "initiator_concurrency" and v["primary"]["share"] > 0.5
    assert abs(sum(v["shares"].values()) - 1) < 1e-3
    assert v["evidence"]["outstanding_max"] == 1
    # One connection: its own accounting is the whole.
    [c] = v["connections"]
    assert c["primary"] == "initiator_concurrency" and c["direction"] == "t2i"
    assert c["shares"] == pytest.approx(v["shares"], abs=1e-3)
    assert 32 * 32768 <= c["bytes"] < 1.01 * 32 * 32768  # data plus PDU headers
    little = [h for h in v["help"] if h["model"].startswith("Little")]
    assert little and little[0]["predicted_MBps"] > little[0]["now_MBps"]
    st = diag["states"]
    assert st["state"].tolist() == ["CWR"] and st["total_ns"].iloc[0] == 1_000_000
    assert (tmp_path / "track.parquet").is_file()
    tr = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    spans = [e for e in tr if e["ph"] == "X"]
    inst = [e for e in tr if e["ph"] == "i"]
    names = {e["args"]["name"] for e in tr if e["name"] == "thread_name"}
    assert {"initiator syscall", "initiator block", "initiator scsi", "initiator iscsi",
            "initiator tcp", "wire net", "target tcp", "target iscsi",
            "target store"} <= names
    # 1 syscall + 2 block (16 commands each) + 32 x 7 rows (SCSI .. store)
    assert len(spans) == 1 + 2 + 32 * 7
    # Every PDU at both capture points, plus every probe event (no merged.parquet here):
    # initiator 32 SCSI + 2 block + 1 syscall, target 32 preads + 8 tcp_probe + 2 cong_state.
    assert len(inst) == 2 * 3 * 32 + 35 + 42
    tracks = {(e["pid"], e["tid"]) for e in inst}
    # pid 1 initiator / 3 target; tid 1 syscall, 2 block, 3 scsi, 4 iscsi, 5 tcp
    assert tracks == {(1, 1), (1, 2), (1, 3), (1, 4), (3, 1), (3, 4), (3, 5)}
    assert all(e["dur"] >= 0 for e in spans)


def test_report_degrades_and_warns(tmp_path):
    synth.make_capture(tmp_path, n_cmds=8, qd=1, delay_in_meta=False)
    # Take away the target pcap, its decode and the probe events; add a capture drop.
    (tmp_path / "target.pcap").unlink()
    shutil.rmtree(tmp_path / "decoded" / "target")
    for f in tmp_path.glob("events-*.jsonl"):
        f.unlink()
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta["capture"]["initiator"]["dropped"] = 17
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    path, diag = html.report(tmp_path)
    assert any("17 packets dropped" in w for w in diag["warnings"])
    assert any("target.pcap" in m for m in diag["missing"])
    assert any("probe events" in m for m in diag["missing"])
    assert diag["delay_source"].startswith("half the median RTT")
    assert "CAPTURE DROPS" in path.read_text()
    cap = load_tracked(tmp_path)
    assert set(cap.segs) == {"initiator"}


def test_report_cli_errors(tmp_path):
    assert report_cli.main([str(tmp_path / "nope")]) == 2



def test_kernel_caps_are_named_from_the_settings_in_force():
    """A --kernel capture records the stack's settings (meta.json testbed.tunables): the split
    and the concurrency ceiling are named by them, and only when they match what was seen."""
    from istrace.report import diagnosis

    meta = {"testbed": {"mode": "vm", "tunables": {"max_sectors_kb": 32, "queue_depth": 2,
                                                   "can_queue": 113}}}
    assert diagnosis.split_cause(meta, 32768).startswith("max_sectors_kb = 32 ")
    # requests far below the limit were cut by something else: say so, do not guess
    assert "max_sectors_kb or the device's limits" in diagnosis.split_cause(meta, 4096)
    assert diagnosis.ceiling_cause(meta, 2) == "the SCSI device's queue_depth = 2 (meta.json)"
    assert diagnosis.ceiling_cause(meta, 113).startswith("the iSCSI host's can_queue")
    assert diagnosis.ceiling_cause(meta, 8).startswith("a concurrency limit")
    assert diagnosis.ceiling_cause({}, 2).startswith("a concurrency limit")


def test_ceiling_at_the_applications_own_parallelism_is_named_as_such():
    """A ceiling equal to the reads the application had in flight (system call layer) is the
    application's, not a setting's; where a setting sits at the same count, both are said."""
    import pandas as pd
    from istrace.measure.outstanding import app_reads_in_flight
    from istrace.report import diagnosis

    meta = {"testbed": {"mode": "vm", "tunables": {"queue_depth": 32, "can_queue": 113}}}
    assert diagnosis.ceiling_cause(meta, 1, 1).startswith(
        "the application: at most 1 read in flight at once")
    assert "queue_depth of 32 would admit more" in diagnosis.ceiling_cause(meta, 1, 1)
    both = diagnosis.ceiling_cause({"testbed": {"tunables": {"queue_depth": 2}}}, 2, 2)
    assert both.startswith("the SCSI device's queue_depth = 2") and "both limit it" in both
    assert diagnosis.ceiling_cause(meta, 4, 8).startswith("a concurrency limit")
    # cmds_max 16: can_queue 1, and the kernel clamps the device's queue_depth to it
    low = {"testbed": {"tunables": {"queue_depth": 1, "can_queue": 1, "cmds_max": 16}}}
    assert diagnosis.ceiling_cause(low, 1, 4) == (
        "the SCSI device's queue_depth = 1 and the iSCSI host's can_queue (cmds_max 16) = 1 "
        "(meta.json)")
    # two readers' preads of the disk (each queued a bio), overlapping; a third, shell read
    # that queued nothing does not count
    rows = [("syscall", "pread64_exit", 1000, 900, 11, 512),
            ("block", "bio_queue", 200, None, 11, 512),
            ("syscall", "pread64_exit", 1200, 800, 12, 512),
            ("block", "bio_queue", 500, None, 12, 512),
            ("syscall", "read_exit", 1100, 1000, 13, 100)]
    ev = pd.DataFrame(rows, columns=["layer", "event", "ts_ns", "lat_ns", "pid", "bytes"])
    ev["host"] = "initiator"
    assert app_reads_in_flight(ev) == 2
    assert app_reads_in_flight(ev[ev.layer == "syscall"]) is None   # no block layer

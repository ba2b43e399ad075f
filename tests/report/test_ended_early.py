"""A capture that ended early (meta.json `ended_early`, written by `istrace capture` when its
disk ran low) is read by the meta module and reported like any other."""

import json

import synth
from istrace.capture import meta as capture_meta
from istrace.capture.outputs import read_verdict
from istrace.cli import report as report_cli

EARLY = {"reason": "disk", "free_bytes": 21_372_928, "reserve_bytes": 22_000_000,
         "at_s": 5.956, "dir": "/mnt/cap"}


def test_report_on_a_capture_that_ended_early(tmp_path, capsys):
    synth.make_capture(tmp_path, n_cmds=16, qd=1)
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta.update(status="ended_early", ended_early=EARLY)
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert capture_meta.ended_early(capture_meta.read_meta(tmp_path)) == EARLY
    assert report_cli.main([str(tmp_path)]) == 0, capsys.readouterr().err
    assert (tmp_path / "report.html").is_file()
    assert read_verdict(tmp_path)["primary"]["cause"]

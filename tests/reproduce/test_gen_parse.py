"""Reading istrace-gen's --json summary (the format initiator-gen/stats.c prints)."""

import pytest
from istrace.reproduce.run import ReproError, parse_gen_json

SAMPLE = ('{"mode": "iscsi", "bytes": 1048576, "seconds": 2.000000, "mb_s": 0.524, '
          '"iops": 1000.0, "commands": 2000, "errors": 0, "verify_errors": 0, '
          '"lat_us": {"p50": 33000.0, "p90": 34000.0, "p99": 35000.0, "max": 40000.0}, '
          '"exit": 0, "error": null}\n')


def test_parse_summary_and_littles_law():
    r = parse_gen_json("noise\n" + SAMPLE)
    assert r.mbps == pytest.approx(0.524) and r.iops == 1000.0 and r.commands == 2000
    assert r.lat_p50_ms == pytest.approx(33.0)
    assert r.outstanding == pytest.approx(33.0) and r.outstanding_src == "little-p50"


def test_errors_and_garbage_are_refused():
    with pytest.raises(ReproError, match="errors"):
        parse_gen_json(SAMPLE.replace('"errors": 0', '"errors": 3'))
    with pytest.raises(ReproError, match="no JSON"):
        parse_gen_json("segfault\n")


def test_stalled_run_keeps_partial_figures_only_when_asked():
    stalled = SAMPLE.replace('"exit": 0, "error": null', '"exit": 8, "error": "target silent"')
    with pytest.raises(ReproError):
        parse_gen_json(stalled)
    r = parse_gen_json(stalled, allow_stall=True)
    assert r.mbps == pytest.approx(0.524) and r.raw["exit"] == 8

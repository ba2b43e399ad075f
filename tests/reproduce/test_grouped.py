"""One testbed per group of points, resume, and the retry pass after a lost testbed."""

from contextlib import contextmanager

from istrace.reproduce import run as repro_run
from istrace.reproduce.sweep import Progress, SweepCSV

COLS = ["delay_ms", "series", "mbps", "status", "error"]


def test_groups_share_a_testbed_and_failures_are_retried(tmp_path, monkeypatch):
    made = []

    @contextmanager
    def fake_testbed(name, **fields):
        made.append(fields["delay_ms"])
        if len(made) == 1:
            raise RuntimeError("tgtd exited")     # the first testbed never comes up
        yield f"tb{len(made)}"

    monkeypatch.setattr(repro_run, "testbed", fake_testbed)
    points = [{"delay_ms": d, "series": s} for d in (0, 16) for s in ("32K", "4M")]
    sweep = SweepCSV(tmp_path / "x.csv", COLS, ["delay_ms", "series"])
    seen = []

    def measure(tb, p):
        seen.append((tb, p["delay_ms"], p["series"]))
        return {"mbps": 1.0}

    rows = repro_run.run_grouped(sweep, points, group=lambda p: (p["delay_ms"],),
                                 bed=lambda p: {"delay_ms": p["delay_ms"]}, tag="rt",
                                 measure=measure, progress=Progress("t", 4),
                                 summary=lambda r: "")
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert [(str(r["delay_ms"]), r["series"]) for r in rows] == [("0", "32K"), ("0", "4M"),
                                                            ("16", "32K"), ("16", "4M")]
    assert made == [0, 16, 0]                      # delay 0 again on a fresh testbed
    assert seen == [("tb2", 16, "32K"), ("tb2", 16, "4M"), ("tb3", 0, "32K"), ("tb3", 0, "4M")]
    # A complete CSV brings no testbed up at all.
    made.clear()
    rows = repro_run.run_grouped(SweepCSV(tmp_path / "x.csv", COLS, ["delay_ms", "series"]),
                                 points, group=lambda p: (p["delay_ms"],),
                                 bed=lambda p: {"delay_ms": p["delay_ms"]}, tag="rt",
                                 measure=measure, progress=Progress("t", 4),
                                 summary=lambda r: "")
    assert made == [] and len(rows) == 4


def test_unique_name_is_a_valid_testbed_name():
    name = repro_run.unique_name("rd")
    assert len(name) == 6 and name.startswith("rd") and name[2:].isdigit()

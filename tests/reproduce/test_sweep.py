"""Sweep CSV bookkeeping (resume, crash-cut rows, errors) and the golden-section search."""

import csv

import pytest
from istrace.reproduce.sweep import Progress, SweepCSV, golden_section_max, run_points

COLS = ["delay_ms", "size", "mbps", "status", "error"]
KEY = ["delay_ms", "size"]


def _points():
    return [{"delay_ms": d, "size": s} for d in (0, 4.0, 16) for s in ("32K", "4M")]


def test_resume_measures_only_missing_points(tmp_path):
    path = tmp_path / "x.csv"
    calls = []

    def measure(p):
        calls.append((p["delay_ms"], p["size"]))
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the third point
        return {"mbps": 1.5}

    sweep = SweepCSV(path, COLS, KEY)
    with pytest.raises(KeyboardInterrupt):
        run_points(sweep, _points(), measure, Progress("t", 6), lambda r: "")
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)  # nothing finished is lost

    calls.clear()
    sweep = SweepCSV(path, COLS, KEY)  # a new run reads the file back
    out = run_points(sweep, _points(), lambda p: calls.append(p) or {"mbps": 2.0},
                     Progress("t", 6), lambda r: "")
    assert len(calls) == 4                      # only the 4 missing points were measured
    assert [o["mbps"] for o in out][:2] == ["1.5", "1.5"]
    assert len(list(csv.DictReader(path.open()))) == 6


def test_failed_point_is_recorded_and_retried(tmp_path):
    path = tmp_path / "x.csv"

    def bad(p):
        if p["size"] == "4M":
            raise RuntimeError("gen failed")
        return {"mbps": 1.0}

    out = run_points(SweepCSV(path, COLS, KEY), _points(), bad, Progress("t", 6), lambda r: "")
    assert [o["status"] for o in out].count("error") == 3
    assert "gen failed" in out[1]["error"]
    retried = []
    run_points(SweepCSV(path, COLS, KEY), _points(), lambda p: retried.append(p) or {"mbps": 3},
               Progress("t", 6), lambda r: "")
    assert len(retried) == 3 and all(p["size"] == "4M" for p in retried)


def test_row_cut_by_a_crash_is_dropped_and_file_stays_valid(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("delay_ms,size,mbps,status,error\n0,32K,1.0,ok,\n4,32K,0.")  # killed mid-row
    sweep = SweepCSV(path, COLS, KEY)
    assert len(sweep.rows) == 1
    sweep.append({"delay_ms": 4, "size": "32K", "mbps": 0.5, "status": "ok"})
    rows = list(csv.DictReader(path.open()))
    assert rows[-1] == {"delay_ms": "4", "size": "32K", "mbps": "0.5", "status": "ok",
                        "error": ""}


def test_other_columns_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="columns differ"):
        SweepCSV(path, COLS, KEY)


@pytest.mark.parametrize("opt", [1, 2, 7, 23, 50, 99, 100])
def test_golden_section_finds_max_in_few_evaluations(opt):
    seen = []

    def f(x):
        seen.append(x)
        return -abs(x - opt) ** 1.5

    r = golden_section_max(f, 1, 100)
    assert r.best == opt
    assert len(seen) == len(set(seen)) <= 14      # each x once; ~log_phi(100) + 3
    assert [x for x, _ in r.path] == seen


def test_golden_section_plateau_and_degenerate_ranges():
    # Throughput that saturates at 10 sessions and then slowly declines (overhead).
    r = golden_section_max(lambda n: min(n, 10) - 0.01 * n, 1, 64)
    assert r.best == 10 and len(r.path) <= 12
    assert golden_section_max(lambda n: 1.0, 3, 3).best == 3
    assert golden_section_max(lambda n: float(n), 1, 2).best == 2
    with pytest.raises(ValueError):
        golden_section_max(lambda n: 0.0, 5, 1)


def test_golden_section_respects_budget():
    r = golden_section_max(lambda n: -(n - 40) ** 2, 1, 1000, max_evals=5)
    assert len(r.path) == 5


def test_geometric_grid_and_grid_search():
    from istrace.reproduce.sweep import geometric_grid, golden_section_grid
    assert geometric_grid(1, 32) == [1, 2, 3, 4, 6, 8, 11, 16, 23, 32]
    assert geometric_grid(5, 5) == [5]
    # Sessions-like curve: rises to a peak at 4, then falls as the path overloads.
    curve = {1: 13.1, 2: 19.3, 3: 20.0, 4: 21.5, 6: 20.0, 8: 18.3, 11: 15.0, 16: 13.3,
             23: 9.6, 32: 7.2}
    r = golden_section_grid(lambda n: curve[n], geometric_grid(1, 32))
    assert r.best == 4 and len(r.path) <= 6
    assert all(n in curve for n, _ in r.path)

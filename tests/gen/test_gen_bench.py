"""The benchmark script runs end to end: every tool moves data, tgtd gets the malloc tunables.

Not a performance test: it asserts that each figure exists and is positive, never a speed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from istrace.system import paths

BENCH = Path(__file__).resolve().parents[2] / "initiator-gen" / "bench" / "bench.sh"
COLUMNS = ["size", "qd", "gen", "perf", "socket", "s-file", "stream", "g/perf", "g/sk", "g/sf"]


def test_bench_smoke_with_malloc_tunables() -> None:
    paths.binary("istrace-gen")  # fail early with the build hint
    # -M makes the script check tgtd's /proc/PID/environ and exit 1 when the tunables did not
    # reach it; its own testbed name, so it never meets a bench run by hand
    proc = subprocess.run([str(BENCH), "-n", "gbsm", "-l", "32", "-r", "1", "-t", "1",
                           "-c", "64k:2", "-T", "-M"],
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tgtd malloc keeps buffers (-M): yes" in proc.stdout
    rows = [ln.split() for ln in proc.stdout.splitlines() if ln.startswith("64k ")]
    assert len(rows) == 1, proc.stdout
    row = dict(zip(COLUMNS, rows[0], strict=False))
    for tool in ("gen", "perf", "socket", "s-file", "stream"):
        assert float(row[tool]) > 0, (tool, proc.stdout)
    assert float(row["g/perf"].rstrip("x")) > 0
    # client and server CPU per GB: three and four positive figures
    client, server = rows[0][-2].split("/"), rows[0][-1].split("/")
    assert len(client) == 3 and all(float(c) > 0 for c in client), proc.stdout
    assert len(server) == 4 and all(float(c) > 0 for c in server), proc.stdout

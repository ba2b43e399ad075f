"""The CI fuzz run: `make -C decoder/fuzz test` (each libFuzzer target for FUZZ_SECONDS,
seeded from the hard-case conversations). Any sanitizer finding or crash fails it."""

from __future__ import annotations

import os
import subprocess

from dechelp import REPO


def test_fuzz_targets_short_run() -> None:
    # 3 targets x 20 s keeps tests/decoder within its 4-minute budget.
    seconds = os.environ.get("ISTRACE_FUZZ_SECONDS", "20")
    r = subprocess.run(["nice", "make", "-s", "-j2", "-C", str(REPO / "decoder" / "fuzz"), "test",
                        f"FUZZ_SECONDS={seconds}"], capture_output=True, text=True,
                       timeout=int(seconds) * 2 + 300, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    # All three targets ran and reported their execution counts.
    assert out.count("stat::number_of_executed_units") == 3, out[-3000:]
    for line in out.splitlines():
        if line.startswith("stat::number_of_executed_units"):
            assert int(line.split(":")[-1]) > 1000, line

"""Shared helpers for the end-to-end `istrace reproduce --quick` tests."""

from pathlib import Path

import pytest
from istrace.cli import reproduce


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """quick_run(experiment) -> (rc, output dir): runs `istrace reproduce EXP --quick` once."""
    done: dict[str, tuple[int, Path]] = {}

    def run(exp: str) -> tuple[int, Path]:
        if exp not in done:
            out = tmp_path_factory.mktemp(exp)
            done[exp] = (reproduce.main([exp, "--quick", "--out", str(out)]), out)
        return done[exp]

    return run

"""Fixtures: the decoder binary under test (plain build and the ASan+UBSan build)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from dechelp import ASAN_BIN, NATIVE_BIN, REPO


@pytest.fixture(scope="session")
def asan_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = subprocess.run(["make", "-s", "-C", str(REPO / "decoder" / "fuzz"), "asan"],
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, f"ASan build failed:\n{r.stdout}\n{r.stderr}"
    # A private copy: a concurrent rebuild in the shared tree cannot swap it mid-run.
    private = tmp_path_factory.mktemp("asan") / ASAN_BIN.name
    shutil.copy2(ASAN_BIN, private)
    return private


@pytest.fixture(scope="session", params=["native", "asan"])
def dec(request: pytest.FixtureRequest) -> Path:
    """Every hard case runs against the normal binary and the ASan+UBSan one."""
    if request.param == "asan":
        return request.getfixturevalue("asan_bin")
    assert NATIVE_BIN.exists(), "decoder/istrace-decode is not built: run `make`"
    return NATIVE_BIN


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path

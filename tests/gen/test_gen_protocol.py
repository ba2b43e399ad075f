"""Faults tgtd never produces, from a tiny scripted target on loopback: Reject, sense data by
name, Data-In out of order, an Async Message asking for logout, a refused login."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from fake_target import FakeTarget
from gen_helpers import gen_binary


def run_against(mode: str, *args: str, binary: str = "", seed: int = 0
                ) -> tuple[int, dict, str]:
    tgt = FakeTarget(mode, seed)
    try:
        argv = [binary or gen_binary(), "--portal", f"127.0.0.1:{tgt.port}", "--target",
                "iqn.fake:t", "--size", "4k", "--count", "1", "--json", "--timeout", "3", *args]
        # leaks at exit are not errors here; memory and UB errors are
        env = {**os.environ, "ASAN_OPTIONS": "detect_leaks=0"}
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                              env=env)
    finally:
        tgt.close()
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return proc.returncode, json.loads(lines[-1]) if lines else {}, proc.stderr


def test_fake_target_good_read() -> None:
    rc, s, err = run_against("good")
    assert rc == 0, err
    assert s["commands"] == 1 and s["bytes"] == 4096 and s["lun_blocks"] == 2048


@pytest.mark.parametrize(("mode", "code", "text"), [
    ("reject", 5, "target sent Reject: invalid PDU field (reason 0x09) for SCSI Command"),
    ("sense", 6, "CHECK CONDITION (0x02): MEDIUM ERROR / UNRECOVERED READ ERROR (key 0x3, "
                 "ASC 0x11, ASCQ 0x00)"),
    ("datasn", 5, "Data-In out of order"),
    ("async", 9, "target requests logout"),
    ("refuse", 4, "login refused: Initiator error: not found (0x0203)"),
    ("chatty", 8, "no progress on 1 outstanding command for 3.0 s"),
])
def test_fake_target_faults(mode: str, code: int, text: str) -> None:
    t = time.monotonic()
    rc, s, err = run_against(mode)
    assert time.monotonic() - t < 10  # never a hang, whatever the target does
    assert rc == code, err
    assert text in err
    assert s["exit"] == code and text in s["error"]



@pytest.mark.parametrize("seed", range(12))
def test_nonsense_from_target_is_handled(sanitized_gen: str, seed: int) -> None:
    """Random but plausible PDUs: a clean exit code, no memory error, no undefined behaviour."""
    t = time.monotonic()
    rc, s, err = run_against("fuzz", "--timeout", "1", binary=sanitized_gen, seed=seed)
    assert "Sanitizer" not in err and "runtime error" not in err, err
    assert rc in (0, 5, 6, 8, 9), (rc, err)
    assert time.monotonic() - t < 10
    if rc:
        assert s["exit"] == rc and s["error"]


@pytest.mark.parametrize("seed", range(8))
def test_nonsense_during_login_is_handled(sanitized_gen: str, seed: int) -> None:
    rc, s, err = run_against("fuzzlogin", "--timeout", "1", binary=sanitized_gen, seed=seed)
    assert "Sanitizer" not in err and "runtime error" not in err, err
    assert rc in (4, 5, 8, 9), (rc, err)
    assert s["exit"] == rc and s["error"]

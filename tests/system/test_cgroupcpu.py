"""The cgroup quota reader against the kernel: a busy loop capped at 5% of a CPU is throttled
in (nearly) every period it runs in; a process without a quota has no quota to read."""

import os
import subprocess
import time

import pytest
from istrace.system import cgroupcpu
from istrace.testbed import cpucap

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="making a cgroup needs root")


def test_no_quota_reads_none():
    assert cgroupcpu.quota_stat(os.getpid()) is None
    assert cgroupcpu.quota_stat(2 ** 22 + 12345) is None  # no such process


def test_a_capped_busy_loop_is_throttled():
    try:
        d = cpucap.make(f"istrace-test-{os.getpid()}", 5)
    except cpucap.CpuCapError as exc:
        pytest.skip(str(exc))
    p = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        cpucap.move(d, p.pid)
        a = cgroupcpu.quota_stat(p.pid)
        time.sleep(0.6)
        b = cgroupcpu.quota_stat(p.pid)
    finally:
        p.kill()
        p.wait(timeout=10)
        cpucap.remove(d)
    assert a is not None and b is not None
    assert b["quota_us"] == 5000 and b["period_us"] == cpucap.PERIOD_US
    periods, held = b["periods"] - a["periods"], b["throttled"] - a["throttled"]
    assert 4 <= periods <= 8, (a, b)
    assert held >= periods - 1, (a, b)
    assert b["throttled_us"] > a["throttled_us"]

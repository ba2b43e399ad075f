"""The cgroup quota reader: against the kernel, a busy loop capped at 5% of a CPU is throttled
in (nearly) every period it runs in and a process without a quota has no quota to read; on
files laid out as cgroup v2 and v1 show them, the counters of each."""

import os
import subprocess
import time

import pytest
from istrace.system import cgroupcpu
from istrace.testbed import cpucap

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a cgroup needs root")


def test_no_quota_reads_none():
    assert cgroupcpu.quota_stat(os.getpid()) is None
    assert cgroupcpu.quota_stat(2 ** 22 + 12345) is None  # no such process


@needs_root
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


def _fake(tmp_path, cgroup_line, files):
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text(cgroup_line)
    root = tmp_path / "cg"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return proc, root


def test_v2_counters_are_read_where_a_quota_is_set(tmp_path):
    proc, root = _fake(tmp_path, "0::/system.slice/tgt.service\n", {
        "system.slice/tgt.service/cpu.max": "5000 100000\n",
        "system.slice/tgt.service/cpu.stat": "usage_usec 123456\nuser_usec 1\nsystem_usec 2\n"
                                             "nr_periods 40\nnr_throttled 38\n"
                                             "throttled_usec 3500000\n"})
    q = cgroupcpu.quota_stat(7, proc, [(str(root), "cgroup2", ["rw"])])
    assert q == {"cgroup": "/system.slice/tgt.service", "quota_us": 5000, "period_us": 100000,
                 "periods": 40, "throttled": 38, "throttled_us": 3500000, "usage_us": 123456}
    (root / "system.slice/tgt.service/cpu.max").write_text("max 100000\n")
    assert cgroupcpu.quota_stat(7, proc, [(str(root), "cgroup2", ["rw"])]) is None


def test_v1_counters_come_from_the_cpu_hierarchy(tmp_path):
    proc, root = _fake(tmp_path, "4:memory:/x\n2:cpu,cpuacct:/tgtd\n0::/\n", {
        "tgtd/cpu.cfs_quota_us": "5000\n", "tgtd/cpu.cfs_period_us": "100000\n",
        "tgtd/cpu.stat": "nr_periods 10\nnr_throttled 9\nthrottled_time 852048738\n"})
    q = cgroupcpu.quota_stat(7, proc, [(str(root), "cgroup", ["rw", "cpu", "cpuacct"])])
    assert q == {"cgroup": "/tgtd", "quota_us": 5000, "period_us": 100000, "periods": 10,
                 "throttled": 9, "throttled_us": 852048}
    (root / "tgtd/cpu.cfs_quota_us").write_text("-1\n")
    assert cgroupcpu.quota_stat(7, proc, [(str(root), "cgroup", ["rw", "cpu"])]) is None

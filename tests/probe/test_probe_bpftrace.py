"""The bpftrace quick looks (bpf/*.bt) run and show the iSCSI connection on the testbed."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from istrace.system.paths import binary
from istrace.testbed.namespaces import Testbed, TestbedConfig


def _start(script: str, out: Path) -> subprocess.Popen[bytes]:
    f = open(out, "wb")  # noqa: SIM115 - closed with the process
    # as a user runs it: `istrace probe --script NAME` mounts tracefs first when it is absent
    p = subprocess.Popen([sys.executable, "-m", "istrace.cli.main", "probe", "--script",
                          script], stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if b"Attaching" in out.read_bytes():
            time.sleep(0.5)
            return p
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    raise AssertionError(f"{script} did not start: {out.read_text(errors='replace')[-800:]}")


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def test_cwnd_and_tgtd_latency_scripts(tmp_path: Path) -> None:
    with Testbed(TestbedConfig(name="prbt3", lun_mb=16)) as tb:
        procs = {s: _start(s, tmp_path / f"{s}.txt") for s in ("cwnd.bt", "tgtd_latency.bt")}
        try:
            r = tb.run_ini([str(binary("istrace-gen")), "--portal", tb.portal, "--target",
                            tb.iqn, "--size", "256k", "--time", "1", "--quiet"],
                           capture_output=True, text=True, timeout=60)
        finally:
            for p in procs.values():
                _stop(p)
    assert r.returncode == 0, r.stderr
    cwnd = (tmp_path / "cwnd.bt.txt").read_text(errors="replace")
    # the target's socket: local 10.77.0.2:3260, a cwnd of at least the initial 10
    lines = [ln for ln in cwnd.splitlines() if re.search(r"10\.77\.0\.2\s*:3260\s", ln)]
    assert lines, cwnd[-1500:]
    assert all(int(ln.split()[-5]) >= 1 for ln in lines)
    lat = (tmp_path / "tgtd_latency.bt.txt").read_text(errors="replace")
    assert "@cmd_latency_us" in lat and "@backing_store_us" in lat, lat[-1500:]

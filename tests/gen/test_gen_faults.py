"""istrace-gen when things go wrong: refused logins (named status), CHAP, closed port, a
missing LUN (CHECK CONDITION by name), a target that stops answering or dies mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from gen_helpers import gen_binary, run_gen, tgtd_pid
from istrace.testbed.namespaces import Testbed as Bed
from istrace.testbed.namespaces import TestbedConfig as BedConfig

SECRET = "gen-chap-secret-1"
TSECRET = "gen-target-secret-2"


@pytest.fixture(scope="module")
def chap_tb() -> Iterator[Bed]:
    cfg = BedConfig(name="genc", lun_mb=8, chap_user="genuser", chap_secret=SECRET,
                    chap_mutual_user="gentgt", chap_mutual_secret=TSECRET)
    with Bed(cfg) as bed:
        yield bed


def test_chap_login_and_refusals(chap_tb: Bed) -> None:
    good = run_gen(chap_tb, "--chap-user", "genuser", "--chap-secret", SECRET, "--size", "32k",
                   "--count", "4", "--verify", "--quiet")
    assert good.rc == 0, good.stderr
    assert good.summary["negotiated"]["AuthMethod"] == "CHAP"
    bad = run_gen(chap_tb, "--chap-user", "genuser", "--chap-secret", "not-the-secret",
                  "--count", "1")
    assert bad.rc == 4
    assert "Initiator error: authentication failure (0x0201)" in bad.stderr
    assert bad.summary["exit"] == 4 and "authentication failure" in bad.summary["error"]
    none = run_gen(chap_tb, "--count", "1")  # no credentials at all
    assert none.rc == 4 and "login refused" in none.stderr


def test_mutual_chap(chap_tb: Bed) -> None:
    base = ["--chap-user", "genuser", "--chap-secret", SECRET, "--chap-target-user", "gentgt"]
    good = run_gen(chap_tb, *base, "--chap-target-secret", TSECRET, "--size", "4k", "--count",
                   "2", "--verify", "--quiet")
    assert good.rc == 0, good.stderr
    bad = run_gen(chap_tb, *base, "--chap-target-secret", "wrong-target-secret", "--count", "1")
    assert bad.rc == 4 and "mutual CHAP failed" in bad.stderr


def test_unknown_target_iqn(tb: Bed) -> None:
    r = tb.run_ini([gen_binary(), "--portal", tb.portal, "--target", tb.iqn + "-nope",
                    "--count", "1"], capture_output=True, timeout=30)
    assert r.returncode == 4
    assert "Initiator error: not found (0x0203)" in r.stderr


def test_closed_port_and_bad_address(tb: Bed) -> None:
    t = time.monotonic()
    r = tb.run_ini([gen_binary(), "--portal", f"{tb.tgt_ip}:3261", "--target", tb.iqn],
                   capture_output=True, timeout=30)
    assert r.returncode == 3 and "Connection refused" in r.stderr
    assert time.monotonic() - t < 5
    r = tb.run_ini([gen_binary(), "--portal", "no-such-host.invalid", "--target", tb.iqn],
                   capture_output=True, timeout=30)
    assert r.returncode == 3 and "cannot resolve" in r.stderr


def test_missing_lun_check_condition(tb: Bed) -> None:
    r = run_gen(tb, "--lun", "9", "--count", "1")
    assert r.rc == 6, r.stderr
    assert "CHECK CONDITION" in r.stderr and "ILLEGAL REQUEST" in r.stderr


@pytest.mark.parametrize("args", [
    ["--size", "1000"], ["--size", "65M"], ["--offset", "100"], ["--queue-depth", "0"],
    ["--header-digest", "md5"], ["--bogus"], ["--write", "--verify"], ["--time", "-1"]])
def test_usage_errors(tb: Bed, args: list[str]) -> None:
    r = run_gen(tb, "--count", "1", *args)
    assert r.rc == 2, (args, r.stderr)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("istrace-gen: ")]
    assert len(errors) == 1  # one clear line (after the login table for geometry errors)


def test_cli_wrapper_help() -> None:
    r = subprocess.run(["python3", "-m", "istrace.cli.main", "gen", "--help"],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "PYTHONPATH": "scripts"}, check=False)
    assert r.returncode == 0 and "--queue-depth" in r.stdout


def test_usdt_probes_present() -> None:
    r = subprocess.run(["readelf", "-n", gen_binary()], capture_output=True, text=True,
                       timeout=30, check=True)
    notes = r.stdout
    assert "stapsdt" in notes and "Provider: istrace" in notes
    for name in ("cmd_issue", "cmd_first_data", "cmd_done"):
        assert f"Name: {name}" in notes


@pytest.fixture
def fault_tb() -> Iterator[Bed]:
    """A testbed of its own: these tests stop and kill its tgtd."""
    with Bed(BedConfig(name="gene", lun_mb=64)) as bed:
        yield bed


def _start_run(tb: Bed, *args: str) -> subprocess.Popen[str]:
    cmd = [gen_binary(), "--portal", tb.portal, "--target", tb.iqn, "--size", "1M",
           "--queue-depth", "4", "--time", "60", "--json", *args]
    proc = tb.popen_ini(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


def _wait_running(proc: subprocess.Popen[str]) -> None:
    """Until the first progress line: data is flowing."""
    assert proc.stderr is not None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if "MB/s" in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError("istrace-gen never printed progress")


def _run_and_signal(tb: Bed, pid: int, sig: int, *args: str) -> tuple[int, str, str, float]:
    """Start a run, send `sig` to tgtd once data flows; (exit code, stdout, stderr, seconds
    from the signal to the run's end). A stopped tgtd is always continued."""
    proc = _start_run(tb, *args)
    try:
        _wait_running(proc)
        os.kill(pid, sig)
        t_sig = time.monotonic()
        out, err = proc.communicate(timeout=20)
        return proc.returncode, out, err, time.monotonic() - t_sig
    finally:
        if sig == signal.SIGSTOP:
            os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()


def test_target_stops_answering_then_dies(fault_tb: Bed) -> None:
    pid = tgtd_pid(fault_tb)
    # 1) tgtd frozen: the run ends by --timeout with the figures so far
    rc, out, err, took = _run_and_signal(fault_tb, pid, signal.SIGSTOP, "--timeout", "2")
    assert rc == 8, err
    assert "stopped answering" in err
    assert took < 2 + 6  # timeout plus slack, never a hang
    s = json.loads(out.strip().splitlines()[-1])
    assert s["exit"] == 8 and s["bytes"] > 0 and s["commands"] > 0
    assert "summary" in err  # human summary too
    time.sleep(0.5)
    # 2) tgtd killed: the connection closes, clear error, partial figures
    rc, out, err, took = _run_and_signal(fault_tb, pid, signal.SIGKILL)
    assert rc == 9, err
    assert "target closed the connection" in err
    assert took < 5
    s = json.loads(out.strip().splitlines()[-1])
    assert s["exit"] == 9 and s["bytes"] > 0
    # 3) nothing listens any more: a clean connect error
    r = fault_tb.run_ini([gen_binary(), "--portal", fault_tb.portal, "--target", fault_tb.iqn,
                          "--count", "1"], capture_output=True, timeout=30)
    assert r.returncode == 3

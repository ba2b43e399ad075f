"""istrace mounts tracefs itself on a machine that has not (a fresh Debian machine has neither
tracefs nor debugfs mounted). Each test runs in a private mount namespace with both unmounted,
so the machine's own mounts are untouched."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from istrace.system.paths import binary

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts)")

# A private mount namespace in which neither tracefs nor debugfs is mounted.
FRESH = ("umount -l /sys/kernel/debug/tracing 2>/dev/null; umount -l /sys/kernel/debug "
         "2>/dev/null; umount -l /sys/kernel/tracing 2>/dev/null; "
         "test ! -d /sys/kernel/tracing/events || { echo STILL-MOUNTED; exit 9; }; ")


def _fresh(cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           FRESH + cmd], capture_output=True, text=True, timeout=120,
                          check=False)


def test_ensure_tracefs_mounts_it() -> None:
    r = _fresh(f"{sys.executable} -c 'from istrace.system.kernelfs import ensure_tracefs; "
               "print(ensure_tracefs())' && test -d /sys/kernel/tracing/events/tcp")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "/sys/kernel/tracing"
    assert "mounted tracefs" in r.stderr


def test_bpftrace_script_runs_on_a_fresh_machine() -> None:
    r = _fresh(f"timeout -s INT 8 {sys.executable} -m istrace.cli.main probe --script "
               "ca_state; test -d /sys/kernel/tracing/events")
    assert "STILL-MOUNTED" not in r.stdout
    assert "Attaching" in r.stdout, r.stdout + r.stderr
    assert "tracepoint not found" not in r.stdout + r.stderr


def test_probe_loader_tracepoint_fallback_on_a_fresh_machine() -> None:
    """The loader's classic-tracepoint variant needs tracefs; it mounts it, not the user."""
    exe = binary("istrace-probe")
    r = _fresh(f"{exe} --out /dev/null --layers tcp --duration 1 --skip-variant sockops "
               "--skip-variant tp_btf --skip-variant raw_tp")
    text = r.stdout + r.stderr
    assert "tracefs not mounted" not in text, text
    assert r.returncode == 0, text
    assert "tcp_probe" in text and "tracepoint" in text, text

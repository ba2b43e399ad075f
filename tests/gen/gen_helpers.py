"""Helpers the istrace-gen tests share: run the tool in a testbed, talk to its tgtd.

A uniquely named module (not conftest) so other parts' conftest files never shadow it."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from istrace.system import paths
from istrace.testbed.namespaces import Testbed as Bed


@dataclass
class GenResult:
    rc: int
    summary: dict[str, Any]
    stdout: str
    stderr: str


def gen_binary() -> str:
    return str(paths.binary("istrace-gen"))


def run_gen(tb: Bed, *args: str, target: bool = True, timeout: float = 90) -> GenResult:
    """istrace-gen inside the initiator namespace with --json; parses the summary object."""
    cmd = [gen_binary(), "--portal", tb.portal]
    if target:
        cmd += ["--target", tb.iqn]
    cmd += ["--json", *args]
    proc = tb.run_ini(cmd, capture_output=True, timeout=timeout)
    summary: dict[str, Any] = {}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines:
        summary = json.loads(lines[-1])
    return GenResult(proc.returncode, summary, proc.stdout, proc.stderr)


def tgtd_pid(tb: Bed) -> int:
    pids = [int(p["pid"]) for p in tb.state.get("pids", []) if p.get("what") == "tgtd"]
    assert pids, "the testbed recorded no tgtd pid"
    return pids[0]


def tgtadm(tb: Bed, *args: str) -> str:
    argv = ["tgtadm", "-C", str(tb.control_port), "--lld", "iscsi", *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout

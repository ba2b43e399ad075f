"""A testbed's run directory: what it created, so `down` can undo it after any crash.

Everything is recorded *before* it is created (write-ahead), and processes by pid plus their
start time, so a reused pid is never killed by mistake.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from istrace.system import netns
from istrace.testbed import cpucap

RUN_ROOT = Path(os.environ.get("ISTRACE_RUN_ROOT", "/run/istrace"))


def run_dir(name: str) -> Path:
    return RUN_ROOT / name


def state_path(name: str) -> Path:
    return run_dir(name) / "state.json"


def read(path: Path) -> dict[str, Any] | None:
    """A state file, or None when there is none (or it was cut short)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write(path: Path, state: dict[str, Any]) -> None:
    """Atomically: a crash leaves the old state or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True, default=str))
    os.replace(tmp, path)


def load(name: str) -> dict[str, Any] | None:
    return read(state_path(name))


def save(state: dict[str, Any]) -> None:
    write(state_path(state["name"]), state)


def proc_start(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def add_pid(state: dict[str, Any], pid: int, what: str, hard: bool = False) -> None:
    """Record `pid`; hard=True for daemons that ignore SIGTERM (tgtd) so down SIGKILLs them."""
    state.setdefault("pids", []).append({"pid": pid, "start": proc_start(pid), "what": what,
                                         "hard": hard})
    save(state)


def _alive_same(pid: int, start: int | None) -> bool:
    now = proc_start(pid)
    if now is None:
        return False
    try:  # a zombie child of ours is dead already
        if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
            return False
    except OSError:
        return False
    return start is None or now == start


def kill_pid(pid: int, start: int | None, grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`, the process `pid` if it is still the one we made."""
    if not _alive_same(pid, start):
        return
    if grace_s > 0:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _alive_same(pid, start):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(40):
        if not _alive_same(pid, start):
            return
        time.sleep(0.05)


def alive(state: dict[str, Any]) -> bool:
    """Whether what `state` records still runs: every namespace there and every recorded
    process the same one (a testbed whose owner was killed mid-way, or whose namespaces
    another run removed, leaves a state file behind that nothing answers at)."""
    return all(netns.ns_exists(ns) for ns in state.get("netns", [])) and all(
        _alive_same(int(p["pid"]), p.get("start")) for p in state.get("pids", []))


def teardown(state: dict[str, Any]) -> list[str]:
    """Undo everything `state` records; return one line per thing that could not be undone."""
    problems: list[str] = []
    for entry in reversed(state.get("pids", [])):
        kill_pid(int(entry["pid"]), entry.get("start"),
                 grace_s=0.0 if entry.get("hard") else 3.0)
    # Anything still running inside our namespaces was started there by us (workloads,
    # captures of a crashed session): those pids belong to this testbed.
    for ns in state.get("netns", []):
        if netns.ns_exists(ns):
            for pid in netns.ns_pids(ns):
                kill_pid(pid, proc_start(pid), grace_s=1.0)
    for cg in state.get("cgroups", []):
        err = cpucap.remove(Path(cg))
        if err:
            problems.append(err)
    for dev in state.get("root_links", []):
        if netns.link_exists(dev):
            netns.sh(["ip", "link", "del", dev], check=False)
    for ns in state.get("netns", []):
        if netns.ns_exists(ns):
            netns.ns_del(ns)
            if netns.ns_exists(ns):
                problems.append(f"netns {ns} could not be removed")
    for f in state.get("files", []):
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"{f}: {exc}")
    if not problems:
        shutil.rmtree(run_dir(state["name"]), ignore_errors=True)
    return problems

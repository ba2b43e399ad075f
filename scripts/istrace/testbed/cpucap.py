"""Cap a process's CPU with a cgroup: `cpu.max` on a cgroup v2 hierarchy that has the cpu
controller, else `cpu.cfs_quota_us` on a v1 cpu hierarchy (hybrid machines, such as this one,
keep cpu on v1). The testbed uses it to make a slow target or initiator on purpose."""

from __future__ import annotations

import os
import time
from pathlib import Path

from istrace.system import cgroupcpu

PERIOD_US = 100_000


class CpuCapError(RuntimeError):
    """No cpu controller to cap with; the message says what is missing."""


def _v2_root() -> Path | None:
    for where, kind, _ in cgroupcpu.mounts():
        ctl = Path(where) / "cgroup.controllers"
        if kind == "cgroup2" and ctl.is_file() and "cpu" in ctl.read_text().split():
            return Path(where)
    return None


def _v1_root() -> Path | None:
    for where, kind, opts in cgroupcpu.mounts():
        if kind == "cgroup" and "cpu" in opts:
            return Path(where)
    return None


def make(name: str, percent: float) -> Path:
    """A new cgroup `name` limited to `percent` of one CPU, empty; returns its directory
    (give it to move() and, at the end, remove())."""
    if not 0 < percent <= 100 * (os.cpu_count() or 1):
        raise CpuCapError(f"CPU cap {percent}% out of range")
    quota = max(1000, int(PERIOD_US * percent / 100))  # the kernel's smallest quota is 1 ms
    root = _v2_root()
    if root is not None:
        sub = root / "cgroup.subtree_control"
        if "cpu" not in sub.read_text().split():
            try:
                sub.write_text("+cpu")
            except OSError as exc:
                raise CpuCapError(f"cannot enable the cpu controller in {sub}: {exc}") from None
        d = root / name
        d.mkdir(exist_ok=True)
        (d / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        return d
    root = _v1_root()
    if root is None:
        raise CpuCapError("no cgroup with the cpu controller is mounted (cgroup v2 with cpu, "
                          "or v1 -o cpu): cannot cap the CPU")
    d = root / name
    d.mkdir(exist_ok=True)
    (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (d / "cpu.cfs_quota_us").write_text(str(quota))
    return d


def move(d: Path, pid: int) -> None:
    """Move `pid` (all its threads) into cgroup `d`."""
    (d / "cgroup.procs").write_text(str(pid))


def move_tree(d: Path, pid: int) -> int:
    """Move `pid` and every descendant it has into cgroup `d`: each process is moved before its
    children are listed, so one forked meanwhile is born inside. Returns how many moved
    (processes that exit meanwhile are skipped)."""
    moved = 0
    todo = [pid]
    while todo and moved < 10000:
        p = todo.pop()
        try:
            move(d, p)
        except (ProcessLookupError, OSError):
            continue
        moved += 1
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            pass
    return moved


def cap(name: str, pid: int, percent: float) -> Path:
    """Move `pid` (all its threads) into a new cgroup `name` limited to `percent` of one CPU;
    returns the cgroup's directory (give it to remove())."""
    d = make(name, percent)
    move(d, pid)
    return d


def remove(d: Path) -> str | None:
    """Remove a cgroup made by cap() once its processes are gone; the problem, if any."""
    if not d.is_dir():
        return None
    for _ in range(50):
        try:
            d.rmdir()
            return None
        except OSError as exc:
            err = exc
            time.sleep(0.1)  # the killed process leaves the cgroup a moment after it dies
    return f"cgroup {d}: {err}"

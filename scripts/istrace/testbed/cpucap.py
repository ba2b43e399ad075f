"""Cap a process's CPU with a cgroup: `cpu.max` on a cgroup v2 hierarchy that has the cpu
controller, else `cpu.cfs_quota_us` on a v1 cpu hierarchy (hybrid machines, such as this one,
keep cpu on v1). The testbed uses it to make a slow target or initiator on purpose."""

from __future__ import annotations

import os
import time
from pathlib import Path

PERIOD_US = 100_000


class CpuCapError(RuntimeError):
    """No cpu controller to cap with; the message says what is missing."""


def _mounts() -> list[tuple[str, str, list[str]]]:
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[1], parts[2], parts[3].split(",")))
    return out


def _v2_root() -> Path | None:
    for where, kind, _ in _mounts():
        ctl = Path(where) / "cgroup.controllers"
        if kind == "cgroup2" and ctl.is_file() and "cpu" in ctl.read_text().split():
            return Path(where)
    return None


def _v1_root() -> Path | None:
    for where, kind, opts in _mounts():
        if kind == "cgroup" and "cpu" in opts:
            return Path(where)
    return None


def cap(name: str, pid: int, percent: float) -> Path:
    """Move `pid` (all its threads) into a new cgroup `name` limited to `percent` of one CPU;
    returns the cgroup's directory (give it to remove())."""
    if not 0 < percent <= 100 * (os.cpu_count() or 1):
        raise CpuCapError(f"CPU cap {percent}% out of range")
    quota = int(PERIOD_US * percent / 100)
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
        (d / "cgroup.procs").write_text(str(pid))
        return d
    root = _v1_root()
    if root is None:
        raise CpuCapError("no cgroup with the cpu controller is mounted (cgroup v2 with cpu, "
                          "or v1 -o cpu): cannot cap the CPU")
    d = root / name
    d.mkdir(exist_ok=True)
    (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (d / "cpu.cfs_quota_us").write_text(str(quota))
    (d / "cgroup.procs").write_text(str(pid))
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

"""The CPU quota of the cgroup a process runs in, and how often the kernel held it at that
quota: cgroup v2 `cpu.max` + `cpu.stat` (nr_periods, nr_throttled, throttled_usec,
usage_usec), or the v1 cpu hierarchy's `cpu.cfs_quota_us` + `cpu.stat` (throttled_time in ns,
no usage: that is cpuacct's, often mounted apart).

Why beside the process's clock ticks: a process capped at a few percent of a CPU earns two or
three 10 ms ticks per half-second sample, so its measured share of the cap is +-10% even over
seconds, while `nr_throttled / nr_periods` counts, exactly, the enforcement periods in which the
process wanted more CPU than the quota gave. Read by the capture's host sampler; the testbed's
cpucap writes the quotas."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def mounts() -> list[tuple[str, str, list[str]]]:
    """(mount point, cgroup or cgroup2, options) of every cgroup hierarchy mounted."""
    out = []
    for line in Path("/proc/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
            out.append((parts[1], parts[2], parts[3].split(",")))
    return out


def _own_cgroups(pid: int, proc: Path) -> tuple[str | None, str | None]:
    """(the v2 path, the v1 cpu hierarchy's path) of `pid`'s cgroups."""
    v2 = v1 = None
    for line in (proc / str(pid) / "cgroup").read_text().splitlines():
        num, ctl, path = line.split(":", 2)
        if num == "0" and not ctl:
            v2 = path
        elif "cpu" in ctl.split(","):
            v1 = path
    return v2, v1


def _stat(f: Path) -> dict[str, int]:
    out = {}
    for line in f.read_text().splitlines():
        k, _, v = line.partition(" ")
        if v.strip().isdigit():
            out[k] = int(v)
    return out


def _v2(root: Path, path: str) -> dict[str, Any] | None:
    d = root / path.lstrip("/")
    quota, _, period = (d / "cpu.max").read_text().partition(" ")
    if quota == "max":
        return None
    st = _stat(d / "cpu.stat")
    return {"cgroup": path, "quota_us": int(quota), "period_us": int(period),
            "periods": st.get("nr_periods", 0), "throttled": st.get("nr_throttled", 0),
            "throttled_us": st.get("throttled_usec", 0), "usage_us": st.get("usage_usec")}


def _v1(root: Path, path: str) -> dict[str, Any] | None:
    d = root / path.lstrip("/")
    quota = int((d / "cpu.cfs_quota_us").read_text())
    if quota < 0:
        return None
    st = _stat(d / "cpu.stat")
    return {"cgroup": path, "quota_us": quota,
            "period_us": int((d / "cpu.cfs_period_us").read_text()),
            "periods": st.get("nr_periods", 0), "throttled": st.get("nr_throttled", 0),
            "throttled_us": st.get("throttled_time", 0) // 1000}


def quota_stat(pid: int, proc: Path = Path("/proc"),
               hierarchies: list[tuple[str, str, list[str]]] | None = None
               ) -> dict[str, Any] | None:
    """The CPU quota and throttling counters (cumulative) of the cgroup `pid` runs in; None
    when that cgroup has no quota, the process is gone, or no cpu controller is mounted.
    `proc` and `hierarchies` (mounts()'s) stand in for the machine's in tests."""
    try:
        v2, v1 = _own_cgroups(pid, proc)
        for where, kind, opts in mounts() if hierarchies is None else hierarchies:
            root = Path(where)
            # v2 has cpu.max only where the cpu controller is enabled for the cgroup
            if kind == "cgroup2" and v2 is not None \
                    and (root / v2.lstrip("/") / "cpu.max").is_file():
                return _v2(root, v2)
            if kind == "cgroup" and "cpu" in opts and v1 is not None:
                return _v1(root, v1)
    except (OSError, ValueError):
        return None
    return None

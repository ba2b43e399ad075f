"""CPU time as the kernel accounts it: per process (and its descendants) from /proc/PID/stat
and per CPU from /proc/stat, in clock ticks (USER_HZ). Read by the capture's host sampler and
by the experiments that split CPU use by kind."""

from __future__ import annotations

import os
from pathlib import Path

USER_HZ = os.sysconf("SC_CLK_TCK")
CPU_FIELDS = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def proc_times(pid: int) -> tuple[int, int] | None:
    """(utime, stime) in clock ticks of a process and all its threads."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
    return int(f[11]), int(f[12])


def tree_times(pid: int) -> tuple[int, int] | None:
    """CPU ticks of a process and its descendants (the workload runs under a shell)."""
    total = proc_times(pid)
    if total is None:
        return None
    u, s = total
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    for k in kids:
        t = tree_times(int(k))
        if t:
            u, s = u + t[0], s + t[1]
    return u, s


def cpu_stat() -> dict[str, list[int]]:
    """/proc/stat jiffies per CPU: user nice system idle iowait irq softirq steal."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu"):
            name, *vals = line.split()
            out[name] = [int(v) for v in vals[:8]]
    return out

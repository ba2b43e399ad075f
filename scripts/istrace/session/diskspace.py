"""The capture's disk space: what it will write, checked before it starts, and watched while it
runs so that it stops cleanly before the disk is full.

The model: both ends record every packet of the path, so the capture directory grows at twice
the path's rate (plus tcpdump's 16-byte record header and the ACKs: ALLOWANCE), or, with no rate
set, at the highest rate measured on the testbed (FULL_RATE_BPS, docs/testbed.md). The
workload's length is `gen --time` (istrace-gen's default 10 s) bounded by --timeout; any other
workload's is unknown, and UNKNOWN_S of it are checked. While the capture runs, the free space
must stay above a reserve: what the capture writes while it stops (STOP_S at the rate), and
never less than RESERVE_MIN for meta.json and the logs.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FULL_RATE_BPS = 850e6   # capture directory bytes/s, no rate limit (docs/testbed.md)
ALLOWANCE = 1.1         # tcpdump's record headers and the ACKs, over the data's bytes
GEN_DEFAULT_S = 10.0    # istrace-gen without --time or --count
UNKNOWN_S = 10.0        # seconds checked for a workload whose length is unknown
STOP_S = 2.0            # seconds the capture may still write once the stop begins
RESERVE_MIN = 16 << 20  # meta.json, logs, the last buffers
FRAME = 1514            # bytes of a full-sized Ethernet frame at MTU 1500


@dataclass
class Budget:
    """What a capture is expected to write: `rate_bps` for `seconds`, and the reserve."""

    rate_bps: float
    rate_from: str
    seconds: float
    seconds_from: str

    @property
    def reserve_bytes(self) -> int:
        return max(RESERVE_MIN, int(self.rate_bps * STOP_S))

    @property
    def need_bytes(self) -> int:
        return int(self.rate_bps * self.seconds) + self.reserve_bytes

    def describe(self) -> dict[str, Any]:
        return {"rate_Bps": round(self.rate_bps), "rate_from": self.rate_from,
                "seconds": self.seconds, "seconds_from": self.seconds_from,
                "need_bytes": self.need_bytes, "reserve_bytes": self.reserve_bytes}


def size(n: float) -> str:
    """Bytes in decimal units, as df -H prints them: '58 MB', '1.7 GB'."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.1f} {unit}" if v < 10 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def workload_seconds(workload: str, timeout: float) -> tuple[float, str]:
    """How long the workload runs, and how that is known."""
    try:
        words = shlex.split(workload)
    except ValueError:
        words = []
    seconds: float | None = None
    said = "unknown"
    if words[:1] == ["gen"]:
        given = [w.split("=", 1)[1] for w in words if w.startswith("--time=")]
        given += [v for w, v in zip(words, words[1:], strict=False) if w == "--time"]
        if given:
            try:
                seconds, said = float(given[-1]), "gen --time"
            except ValueError:
                pass
        elif not any(w == "--count" or w.startswith("--count=") for w in words):
            seconds, said = GEN_DEFAULT_S, "gen's default --time"
    if seconds is not None and timeout < seconds:
        return timeout, "--timeout"
    if seconds is None:
        return min(UNKNOWN_S, timeout), f"workload length unknown: {UNKNOWN_S:g} s checked"
    return seconds, said


def path_rate(config: dict[str, Any], snaplen: int) -> tuple[float, str]:
    """Bytes/s the capture directory grows at on a path of `config` (a TestbedConfig's fields,
    rate_mbit and nic_rate_mbit 0 = none) when tcpdump keeps `snaplen` bytes (0 = all)."""
    limits = [float(config.get(k) or 0) for k in ("rate_mbit", "nic_rate_mbit")]
    limits = [r for r in limits if r > 0]
    if limits:
        bps = 2 * min(limits) * 1e6 / 8 * ALLOWANCE
        said = f"path rate {min(limits):g} Mbit/s, both ends"
    else:
        bps, said = FULL_RATE_BPS, "no path rate: the testbed's measured full rate"
    frame = int(config.get("mtu") or 1500) + 14
    if 0 < snaplen < frame:
        bps *= (snaplen + 16) / (frame + 16)
        said += f", snaplen {snaplen}"
    return bps, said


def budget(config: dict[str, Any], snaplen: int, workload: str, timeout: float) -> Budget:
    rate, rate_from = path_rate(config, snaplen)
    seconds, seconds_from = workload_seconds(workload, timeout)
    return Budget(rate, rate_from, seconds, seconds_from)


def existing(d: Path) -> Path:
    """`d`, or its nearest ancestor that exists (the directory is made only once it fits)."""
    d = d.absolute()
    while not d.exists() and d != d.parent:
        d = d.parent
    return d


def free_bytes(d: Path) -> int:
    """Bytes an unprivileged writer may still write on the file system of `d` (df's Avail)."""
    st = os.statvfs(existing(d))
    return st.f_bavail * st.f_frsize


def refusal(d: Path, b: Budget, free: int) -> str:
    """The line that refuses a capture into `d`, whose disk has `free` bytes, under b's need."""
    return (f"{existing(d)} has {size(free)} free, the capture needs about "
            f"{size(b.need_bytes)} ({size(b.rate_bps)}/s for {b.seconds:g} s: {b.rate_from}; "
            f"{b.seconds_from}; {size(b.reserve_bytes)} kept for a clean stop): free space, "
            "capture less (a shorter --time, --snaplen 200, --rate), or pass "
            "--ignore-free-space to start anyway (the capture then stops itself before the "
            "disk is full)")


class Watch:
    """Polled while the workload runs: low() says when the free space fell under the reserve."""

    def __init__(self, d: Path, reserve_bytes: int) -> None:
        self.dir = d
        self.reserve_bytes = reserve_bytes

    def low(self) -> int | None:
        """The free bytes when under the reserve, else None."""
        free = free_bytes(self.dir)
        return free if free < self.reserve_bytes else None

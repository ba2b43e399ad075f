"""What a capture directory says about itself: tcpdump's drop counts, tool versions, clocks,
and the iSCSI parameters the login negotiated."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from istrace.capture import decoderun, layout
from istrace.system import paths

_COUNTERS = {
    "packets_captured": r"(\d+) packets? captured",
    "received_by_filter": r"(\d+) packets? received by filter",
    "dropped_by_kernel": r"(\d+) packets? dropped by kernel",
    "dropped_by_interface": r"(\d+) packets? dropped by interface",
}


def tcpdump_counts(stderr_text: str) -> dict[str, int | None]:
    """The counters tcpdump prints when it stops; None for any it did not print."""
    out: dict[str, int | None] = {}
    for key, pattern in _COUNTERS.items():
        m = re.findall(pattern, stderr_text)
        out[key] = int(m[-1]) if m else None
    return out


def _first_line(argv: list[str]) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (r.stdout + r.stderr).strip()
    return text.splitlines()[0] if text else None


def tool_versions() -> dict[str, str | None]:
    return {
        "tcpdump": _first_line(["tcpdump", "--version"]),
        "tgtd": _first_line(["tgtd", "-V"]),
        "iproute2": _first_line(["ip", "-V"]),
        "python": platform.python_version(),
        "istrace": "0.1.0",
    }


def clock_info() -> dict[str, Any]:
    """Both clocks read back to back, and the clock source, so streams can be related later."""
    try:
        source = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource"
                      ).read_text().strip()
    except OSError:
        source = None
    return {"realtime_ns": time.clock_gettime_ns(time.CLOCK_REALTIME),
            "monotonic_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC),
            "clocksource": source}


def host_info() -> dict[str, Any]:
    u = os.uname()
    return {"hostname": u.nodename, "kernel": u.release, "kernel_version": u.version,
            "machine": u.machine, "cpus": os.cpu_count()}


DEFAULT_PORT = 3260


def read_meta(d: Path) -> dict[str, Any]:
    """A capture directory's meta.json ({} when there is none); ValueError when it is not a
    JSON object."""
    path = d / layout.META
    if not path.is_file():
        return {}
    meta = json.loads(path.read_text())
    if not isinstance(meta, dict):
        raise ValueError("not a JSON object")
    return meta


def ended_early(meta: dict[str, Any]) -> dict[str, Any] | None:
    """Why the capture stopped before its workload ended (meta.json `ended_early`: `reason`,
    e.g. "disk", and for a disk stop `free_bytes` and `at_s`, seconds after the start), or
    None when it ran to the end. A malformed entry still says the capture ended early."""
    early = meta.get("ended_early")
    if early is None or early is False:
        return None
    if not isinstance(early, dict):
        return {"reason": str(early)}
    out = dict(early)
    out["reason"] = str(early.get("reason") or "unknown")
    for key in ("free_bytes", "reserve_bytes", "at_s"):
        if not isinstance(out.get(key), int | float) or isinstance(out.get(key), bool):
            out.pop(key, None)
    return out


def write_meta(d: Path, meta: dict[str, Any]) -> None:
    """Write a capture directory's meta.json whole (a temporary file renamed into place), so a
    capture killed mid-write still leaves the previous complete one."""
    tmp = d / (layout.META + ".tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
    os.replace(tmp, d / layout.META)


def capture_ports(d: Path, given: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The iSCSI target port(s) an analysis of capture directory d uses: those `given`, else
    target_ports of its meta.json (3260 when that is missing or unreadable)."""
    if given:
        return tuple(given)
    try:
        return target_ports(read_meta(d))
    except (OSError, ValueError):
        return target_ports({})


def target_ports(meta: dict[str, Any]) -> tuple[int, ...]:
    """The iSCSI target port(s) of a capture: the portal meta.json recorded (the testbed's or
    the one given for real hosts), else 3260."""
    tb = meta.get("testbed") if isinstance(meta.get("testbed"), dict) else {}
    env = (meta.get("workload") or {}).get("env") if isinstance(meta.get("workload"), dict) \
        else None
    for portal in ((tb or {}).get("portal"), (env or {}).get("ISTRACE_PORTAL")):
        if isinstance(portal, str) and ":" in portal:
            try:
                return (int(portal.rsplit(":", 1)[1]),)
            except ValueError:
                continue
    return (DEFAULT_PORT,)


def negotiated(pcap: Path, port: int = 3260) -> dict[str, Any]:
    """Login parameters from the first packets of `pcap` (the decoder on a short prefix)."""
    try:
        decoderun.decoder()
    except paths.MissingBinary as exc:
        return {"unavailable": str(exc)}
    if not pcap.exists() or pcap.stat().st_size == 0:
        return {"unavailable": f"{pcap.name} is empty"}
    tmp = Path(tempfile.mkdtemp(prefix="istrace-neg-"))
    try:
        head = tmp / "head.pcap"
        subprocess.run(["tcpdump", "-r", str(pcap), "-c", "2000", "-w", str(head),
                        f"tcp port {port}"], capture_output=True, timeout=60, check=False)
        if not head.exists():
            return {"unavailable": "could not cut the capture's first packets"}
        try:
            decoderun.decode_to_dir(head, tmp / "decoded", ports=[port], timeout=120)
        except decoderun.DecodeError as exc:
            return {"unavailable": f"decoder found no login ({str(exc)[:200]})"}
        conns = tmp / "decoded" / "connections.csv"
        if not conns.exists():
            return {"unavailable": "decoder found no login"}
        from istrace.capture.decoded import read_table

        df = read_table(conns)
        if df.empty:
            return {"unavailable": "no iSCSI connection in the capture"}
        # through JSON so missing values become null, not NaN (meta.json stays strict JSON)
        return {"connections": json.loads(df.to_json(orient="records"))}
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return {"unavailable": f"decoder failed: {exc}"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def meta_number(meta: dict[str, Any], *keys: str) -> float | None:
    """First numeric value found under any of `keys`, at top level or one level down."""
    for k in keys:
        if isinstance(meta.get(k), int | float):
            return float(meta[k])
    for v in meta.values():
        if isinstance(v, dict):
            for k in keys:
                if isinstance(v.get(k), int | float):
                    return float(v[k])
    return None


def one_way_ms(meta: dict[str, Any]) -> float | None:
    """The run's one-way delay: the mean of both directions' settings when given apart."""
    a = meta_number(meta, "delay_i2t_ms")
    b = meta_number(meta, "delay_t2i_ms")
    if a is not None and b is not None:
        return (a + b) / 2
    return meta_number(meta, "delay_ms", "one_way_ms")

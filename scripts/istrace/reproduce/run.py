"""Driving the real parts for the experiments: testbeds, `istrace-gen` runs, route metrics.

Every measurement is one `istrace-gen ... --json` run inside the initiator namespace of a
testbed made for the point's path settings (delay, rate, queue). Points that share path settings
share one testbed, so a sweep brings up one testbed per delay rather than one per point.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from istrace.model.study import MB
from istrace.reproduce.sweep import Progress, Row, SweepCSV, describe, run_points
from istrace.system import paths

if TYPE_CHECKING:  # the testbed module is imported only when a sweep runs
    from istrace.testbed.namespaces import Testbed


class ReproError(RuntimeError):
    pass


def unique_name(tag: str) -> str:
    """A 6-char testbed name no other run uses at the same time: tag + pid digits."""
    return f"{tag[:2]}{os.getpid() % 10000:04d}"


def testbed_config(name: str, **fields: Any) -> Any:
    """A TestbedConfig with the fields this testbed version knows (others are dropped)."""
    from istrace.testbed.namespaces import TestbedConfig

    known = {k: v for k, v in fields.items() if k in TestbedConfig.__dataclass_fields__}
    return TestbedConfig(name=name, **known)


# TCP congestion control in both namespaces. The studies ran loss-based TCP (Linux 2.4:
# NewReno), so Reno is the default here; it is also always allowed inside a namespace, where
# only net.ipv4.tcp_allowed_congestion_control may be chosen. A host may default to BBR, which
# paces and does not back off on loss, and so hides the local-congestion effect. `--cc`.
CONGESTION_CONTROL = ["reno"]


@contextmanager
def testbed(name: str, **fields: Any) -> Iterator[Testbed]:
    from istrace.testbed.namespaces import Testbed

    cfg = testbed_config(name, **fields)
    cc = CONGESTION_CONTROL[0]
    settings = " ".join(f"{k}={v}" for k, v in fields.items())
    print(f"reproduce: testbed {name} up ({settings} cc={cc})", file=sys.stderr, flush=True)
    with Testbed(cfg) as tb:
        for run in (tb.run_ini, tb.run_tgt):
            r = run(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={cc}"],
                    capture_output=True)
            if r.returncode != 0:
                raise ReproError(f"congestion control {cc!r}: {r.stderr.strip()}")
        yield tb


def gen_binary() -> str:
    try:
        return str(paths.binary("istrace-gen"))
    except paths.MissingBinary as exc:
        raise ReproError(str(exc)) from None


@dataclass
class GenResult:
    mbps: float                # decimal MB/s of payload
    iops: float                # commands (or socket requests) completed per second
    seconds: float
    bytes: int
    commands: int
    outstanding: float         # mean outstanding commands (gen's figure or Little's law)
    outstanding_src: str
    lat_p50_ms: float
    max_outstanding: float = math.nan  # gen's own count of the most commands in flight
    raw: dict[str, Any] = field(default_factory=dict)


def _first(d: dict[str, Any], *names: str) -> float:
    """The first numeric value among `names` in `d`, NaN when none."""
    for n in names:
        if isinstance(d.get(n), int | float) and not isinstance(d.get(n), bool):
            return float(d[n])
    return math.nan


GEN_EXIT_TIMEOUT = 8  # istrace-gen: the target stayed silent for --timeout seconds


def parse_gen_json(stdout: str, allow_stall: bool = False) -> GenResult:
    """Gen's `--json` summary -> GenResult. The last JSON object line on stdout is it.

    With `allow_stall`, a run that ended because the path stalled (gen's timeout exit) keeps
    its partial figures: for an overloaded path that stall *is* the measurement.
    """
    obj: dict[str, Any] | None = None
    for line in stdout.splitlines()[::-1]:
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                break
            except ValueError:
                continue
    if obj is None:
        try:
            obj = json.loads(stdout)
        except ValueError:
            raise ReproError(f"istrace-gen printed no JSON summary: {stdout[-200:]!r}") from None
    assert obj is not None
    stalled = allow_stall and obj.get("exit") == GEN_EXIT_TIMEOUT
    if (obj.get("error") and not stalled) or int(obj.get("errors") or 0):
        raise ReproError(f"istrace-gen reported errors: {obj.get('error') or obj.get('errors')}")
    nbytes = _first(obj, "bytes")
    secs = _first(obj, "seconds")
    cmds = _first(obj, "commands")
    mbps = _first(obj, "mb_s")
    if math.isnan(mbps) and secs > 0:
        mbps = nbytes / secs / MB
    iops = _first(obj, "iops")
    if math.isnan(iops) and secs > 0:
        iops = cmds / secs
    lat = obj.get("lat_us")
    lat_us: dict[str, Any] = lat if isinstance(lat, dict) else {}
    p50 = _first(lat_us, "p50") / 1e3
    mean_lat = _first(lat_us, "mean", "avg") / 1e3
    outstanding = _first(obj, "outstanding_mean")
    src = "gen"
    if math.isnan(outstanding):
        # Little's law: mean number in the system = completion rate x mean time in it (the
        # median stands in for the mean when gen gives none: for equal small reads they agree).
        lat = mean_lat if not math.isnan(mean_lat) else p50
        outstanding = iops * lat / 1e3 if not math.isnan(lat) else math.nan
        src = "little" if not math.isnan(mean_lat) else "little-p50"
    return GenResult(mbps=mbps, iops=iops, seconds=secs, bytes=int(nbytes or 0),
                     commands=int(cmds) if not math.isnan(cmds) else 0,
                     outstanding=outstanding, outstanding_src=src, lat_p50_ms=p50,
                     max_outstanding=_first(obj, "max_outstanding"), raw=obj)


def run_gen(tb: Testbed, size: str, time_s: float, queue_depth: int = 1, sessions: int = 1,
            extra: list[str] | None = None, allow_stall: bool = False) -> GenResult:
    """One timed iSCSI READ run of `istrace-gen` in the initiator namespace."""
    argv = [gen_binary(), "--portal", tb.portal, "--target", tb.iqn, "--size", size,
            "--queue-depth", str(queue_depth), "--sessions", str(sessions),
            "--time", f"{time_s:g}", "--json", "--quiet", *(extra or [])]
    return _run_json(tb, argv, time_s, allow_stall)


def best_of(runs: int, measure: Callable[[], GenResult]) -> GenResult:
    """The best of `runs` measurements. Other jobs on a shared machine can stall one run;
    they never make a run faster than the path allows, so the best run is the one that
    measured the system rather than the neighbours."""
    results = [measure() for _ in range(max(1, runs))]
    return max(results, key=lambda r: r.iops if math.isnan(r.mbps) else r.mbps)


def run_socket(tb: Testbed, size: str, time_s: float, port: int = 3261,
               stream: bool = True) -> GenResult:
    """The pure-socket baseline: gen's --serve in the target ns, --socket from the initiator."""
    gen = gen_binary()
    server = tb.popen_tgt([gen, "--serve", f"{tb.tgt_ip}:{port}"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_listen(tb, port, server)
        argv = [gen, "--socket", f"{tb.tgt_ip}:{port}", "--size", size, "--time",
                f"{time_s:g}", "--json"] + (["--stream"] if stream else [])
        return _run_json(tb, argv, time_s)
    finally:
        server.terminate()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)


def _wait_listen(tb: Testbed, port: int, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise ReproError(f"istrace-gen --serve exited: {err.strip()[-200:]}")
        out = tb.run_tgt(["ss", "-Htln", f"sport = :{port}"], capture_output=True).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise ReproError(f"istrace-gen --serve did not listen on port {port}")


def _run_json(tb: Testbed, argv: list[str], time_s: float,
              allow_stall: bool = False) -> GenResult:
    try:
        proc = tb.run_ini(argv, capture_output=True, timeout=time_s + 60)
    except subprocess.TimeoutExpired:
        raise ReproError(f"{os.path.basename(argv[0])} did not finish in {time_s + 60:g} s") \
            from None
    if proc.returncode == GEN_EXIT_TIMEOUT and allow_stall:
        return parse_gen_json(proc.stdout, allow_stall=True)
    if proc.returncode != 0:
        last = (proc.stderr or "").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise ReproError(f"istrace-gen failed ({proc.returncode}): {last[0][:200]}")
    return parse_gen_json(proc.stdout)


def ping_rtt_ms(tb: Testbed, count: int = 5) -> float:
    """Minimum ping RTT across the path (the path's own round trip, stack included).

    The minimum, not the mean: one echo held up by a busy CPU would otherwise inflate every
    bound computed from it.
    """
    out = tb.run_ini(["ping", "-c", str(count), "-i", "0.2", "-W", "2", tb.tgt_ip],
                     capture_output=True).stdout
    m = re.search(r"= ([0-9.]+)/[0-9.]+/", out)
    if not m:
        raise ReproError(f"ping across the testbed failed: {out[-200:]!r}")
    return float(m.group(1))


def with_path_rtt(measure: Callable[[Testbed, Row, float], Row]) -> Callable[[Testbed, Row], Row]:
    """`measure(tb, point, rtt_ms)` as a sweep's measure: the path's RTT pinged once per
    delay (points of one delay share a testbed, so one ping serves them all)."""
    rtts: dict[float, float] = {}

    def meas(tb: Testbed, p: Row) -> Row:
        d = float(p["delay_ms"])
        if d not in rtts:
            rtts[d] = ping_rtt_ms(tb)
        return measure(tb, p, rtts[d])

    return meas


def fixed_receive_buffer(tb: Testbed, size: int = 8 << 20, side: str = "initiator") -> None:
    """A large fixed receive buffer in the initiator's (or the target's) namespace, autotuning
    off.

    Receive-buffer autotuning raises a connection's window clamp along with its buffer ("make
    the window clamp follow along" in tcp_rcv_space_adjust), which would undo the route's
    `window`; a fixed buffer larger than any window swept leaves the route metric in charge.
    """
    for key, value in (("net.ipv4.tcp_moderate_rcvbuf", "0"),
                       ("net.ipv4.tcp_rmem", f"4096 {size} {size}")):
        run, ns = (tb.run_ini, tb.ini_ns) if side == "initiator" else (tb.run_tgt, tb.tgt_ns)
        r = run(["sysctl", "-q", "-w", f"{key}={value}"], capture_output=True)
        if r.returncode != 0:
            raise ReproError(f"sysctl {key} in {ns}: {r.stderr.strip()}")


def set_route_metrics(tb: Testbed, window: int = 0, advmss: int = 0,
                      side: str = "initiator") -> None:
    """Clamp the initiator's (or the target's) receive window / advertised MSS towards the
    other end.

    Route metrics `window` and `advmss` are read when a connection opens, so they bound every
    new connection exactly (unlike socket buffers, whose window share the kernel scales by its
    own ratio). 0 removes the metric.
    """
    run, ns = (tb.run_ini, tb.ini_ns) if side == "initiator" else (tb.run_tgt, tb.tgt_ns)
    me, peer = (tb.ini_ip, tb.tgt_ip) if side == "initiator" else (tb.tgt_ip, tb.ini_ip)
    got = run(["ip", "-o", "route", "get", peer], capture_output=True).stdout
    m = re.search(r"\bdev (\S+)", got)
    if not m:
        raise ReproError(f"no route to {peer} in {ns}: {got.strip()}")
    via = re.search(r"\bvia (\S+)", got)
    argv = ["ip", "route", "replace", f"{peer}/32"]
    argv += ["via", via.group(1)] if via else []
    argv += ["dev", m.group(1), "src", me]
    argv += ["window", str(window)] if window else []
    argv += ["advmss", str(advmss)] if advmss else []
    r = run(argv, capture_output=True)
    if r.returncode != 0:
        raise ReproError(f"`{' '.join(argv)}` failed: {r.stderr.strip()}")


def sweep_grouped(csv: Path, columns: list[str], key: list[str], name: str, points: list[Row],
                  group: Callable[[Row], tuple[Any, ...]], bed: Callable[[Row], dict[str, Any]],
                  tag: str, measure: Callable[[Testbed, Row], Row],
                  summary: Callable[[Row], str]) -> int:
    """An experiment's sweep: `points` measured on namespace testbeds (run_grouped), one row
    each in `csv` (resumable), progress under `name`. Returns how many points failed."""
    sweep = SweepCSV(csv, columns, key)
    rows = run_grouped(sweep, points, group, bed, tag, measure, Progress(name, len(points)),
                       summary)
    return sum(r.get("status") != "ok" for r in rows)


def run_grouped(sweep: SweepCSV, points: list[Row], group: Callable[[Row], tuple[Any, ...]],
                bed: Callable[[Row], dict[str, Any]], tag: str,
                measure: Callable[[Testbed, Row], Row], progress: Progress,
                summary: Callable[[Row], str]) -> list[Row]:
    """Measure `points` (in order), one testbed per group of points with equal `group(point)`.

    A group whose points are all in the CSV already brings no testbed up (resume). Points that
    failed get one more pass on a fresh testbed (a testbed can be lost under a run, e.g. to a
    neighbour's cleanup on a shared machine).
    """
    out = _grouped_pass(sweep, points, group, bed, tag, measure, progress, summary)
    failed = [p for p, row in zip(points, out, strict=True) if row.get("status") != "ok"]
    if not failed:
        return out
    print(f"reproduce: {len(failed)} point(s) failed; measuring them once more",
          file=sys.stderr, flush=True)
    progress.total += len(failed)
    again = iter(_grouped_pass(sweep, failed, group, bed, tag, measure, progress, summary))
    return [next(again) if row.get("status") != "ok" else row for row in out]


def _grouped_pass(sweep: SweepCSV, points: list[Row], group: Callable[[Row], tuple[Any, ...]],
                  bed: Callable[[Row], dict[str, Any]], tag: str,
                  measure: Callable[[Testbed, Row], Row], progress: Progress,
                  summary: Callable[[Row], str]) -> list[Row]:
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for p in points:
        groups.setdefault(group(p), []).append(p)
    done: dict[tuple[str, ...], Row] = {}

    def keep(rows: list[Row]) -> None:
        for row in rows:
            done[sweep.point_key(row)] = row

    for members in groups.values():
        if all(sweep.find(p) is not None for p in members):
            keep(run_points(sweep, members, lambda p: {}, progress, summary))
            continue
        try:
            with testbed(unique_name(tag), **bed(members[0])) as tb:
                keep(run_points(sweep, members, partial(measure, tb), progress, summary))
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a testbed failing must not end the sweep
            print(f"reproduce: testbed for {describe(members[0], sweep.key)} failed: {exc}",
                  file=sys.stderr, flush=True)
            missing = [p for p in members if sweep.point_key(p) not in done]
            keep(run_points(sweep, missing, _raise(exc), progress, summary))
    return [done[sweep.point_key(p)] for p in points]


def _raise(exc: Exception) -> Callable[[Row], Row]:
    def f(_: Row) -> Row:
        raise ReproError(f"testbed: {exc}")
    return f

"""Experiment `kernel` (seed 001's integrated trace, on the stock kernel's storage stack).

The full-kernel VM testbed (Debian's kernel under QEMU: open-iscsi's iscsi_tcp and LIO, netem
delay) runs every point as one ordinary capture: istrace-probe on both ends, both pcaps,
meta.json with the tunables in force, then `istrace merge` and `istrace report` on it. Each row
holds what the report found, so the table is the product's answer, not this script's:

- `split`: one 2 MiB O_DIRECT read() under a block request size limit (max_sectors_kb): how
  many block requests / SCSI commands it became, and the setting the report names.
- `readers`: N parallel synchronous 512-byte readers (fio psync) under a SCSI queue_depth:
  transactions/s, the most SCSI commands ever outstanding, and the cap the report names.

Absolute rates are the emulator's (a small read costs more emulated CPU than the round
trip); the splits and ceilings are the kernel's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
from istrace.capture.load import load_capture
from istrace.merge.merger import merge_dir
from istrace.report.html import report
from istrace.reproduce import plot as repro_plot
from istrace.reproduce.sweep import (
    Progress,
    Row,
    SweepCSV,
    measured_rows,
    none_measured,
    num,
    run_points,
)
from istrace.testbed import vm as vmtestbed

COLUMNS = ["kind", "max_sectors_kb", "queue_depth", "cmds_max", "readers", "runtime_s",
           "can_queue", "reads", "tps", "mbps", "max_outstanding", "mean_outstanding",
           "ceiling_flat", "ceiling_named", "requests_per_read", "request_bytes",
           "split_named", "limited_by", "drops", "lost_events", "capture", "seconds",
           "status", "error"]
KEY = ["kind", "max_sectors_kb", "queue_depth", "cmds_max", "readers"]
DELAY_MS = 5.0
READ_BYTES = 2 << 20
DEFAULT_QD, DEFAULT_CMDS_MAX = 32, 128

FIGURE = "repro-kernel.png"
FIGURE_TITLE = (f"Stock kernel stack (open-iscsi + LIO under QEMU), {DELAY_MS:g} ms one-way: "
                "the caps istrace report names")


def plan(quick: bool) -> list[Row]:
    if quick:
        splits, depths, readers = [32, 512], [2, 32], [1, 4, 8]
    else:
        splits, depths, readers = [32, 128, 512, 8192], [2, 8, 32], [1, 2, 4, 8, 16]
    pts: list[Row] = [{"kind": "split", "max_sectors_kb": kb, "queue_depth": DEFAULT_QD,
                       "cmds_max": DEFAULT_CMDS_MAX, "readers": 1} for kb in splits]
    pts += [{"kind": "readers", "max_sectors_kb": 512, "queue_depth": qd,
             "cmds_max": DEFAULT_CMDS_MAX, "readers": n} for qd in depths for n in readers]
    if not quick:
        # the iSCSI host's can_queue as the cap (cmds_max - 15; the kernel clamps the
        # device's queue_depth to it): 1 with cmds_max 16, 17 with cmds_max 32
        pts += [{"kind": "readers", "max_sectors_kb": 512, "queue_depth": DEFAULT_QD,
                 "cmds_max": cm, "readers": n} for cm, n in ((16, 4), (32, 32))]
    return pts


def point_name(p: Row) -> str:
    return (f"{p['kind']}-msk{p['max_sectors_kb']}-qd{p['queue_depth']}-cm{p['cmds_max']}"
            f"-r{p['readers']}")


def workload(p: Row, runtime_s: float) -> str:
    if p["kind"] == "split":
        return vmtestbed.dd_workload(1, "2M")
    return vmtestbed.readers_workload(int(p["readers"]), runtime_s)


def measure(tb: vmtestbed.VmTestbed, out: Path, p: Row, runtime_s: float) -> Row:
    """One point: retune if needed, capture through the product's path, merge, report."""
    want = {"queue_depth": int(p["queue_depth"]), "cmds_max": int(p["cmds_max"]),
            "max_sectors_kb": int(p["max_sectors_kb"])}
    if any(getattr(tb.cfg, k) != v for k, v in want.items()):
        tb.retune(**want)
    d = out / "captures" / point_name(p)
    if d.exists():
        shutil.rmtree(d)           # a point measured again starts from an empty directory
    tb.capture(d, workload(p, runtime_s), probes="istrace", timeout_s=300, hang_retries=1)
    merge_dir(d)
    _, diag = report(d)
    return {**summarize(d, diag), "runtime_s": runtime_s if p["kind"] == "readers" else "",
            "capture": str(d)}


def summarize(d: Path, diag: dict[str, Any]) -> Row:
    """The row of one capture from its report's diagnosis and its decoded commands."""
    cap = load_capture(d, decode=False)
    meta = cap.meta or {}
    tun = meta.get("testbed", {}).get("tunables", {})
    cmds = cap.main_commands()
    reads = _reads(cmds)
    row: Row = {"can_queue": tun.get("can_queue", ""), "reads": len(reads),
                "drops": meta.get("drops_total", ""),
                "lost_events": sum(int(v.get("lost") or 0) for v in
                                   meta.get("probes", {}).values() if isinstance(v, dict)),
                "limited_by": diag.get("limit", "")}
    if len(reads) >= 2:
        span_s = (int(reads["resp_ts_ns"].max()) - int(reads["issue_ts_ns"].min())) / 1e9
        if span_s > 0:
            row["tps"] = round(len(reads) / span_s, 2)
            row["mbps"] = round(float(reads["xfer_bytes"].sum()) / span_s / 1e6, 4) \
                if "xfer_bytes" in reads else ""
    ceil = diag.get("outstanding", {})
    mean = ceil.get("mean", float("nan"))
    row.update({"max_outstanding": ceil.get("max", ""), "ceiling_flat": ceil.get("flat", ""),
                "mean_outstanding": round(mean, 3) if mean == mean else ""})
    if ceil.get("flat"):
        row["ceiling_named"] = diag.get("ceiling_cause", "")
    split = diag.get("split")
    if split:
        row.update({"requests_per_read": round(split["requests_per_read"], 2),
                    "request_bytes": int(split["request_bytes"]), "split_named": split["cause"]})
    elif (sizes := diag.get("sizes", {})).get("block"):
        row.update({"requests_per_read": 1, "request_bytes": int(sizes["block"]["typical"])})
    return row


def _reads(cmds: pd.DataFrame | None) -> pd.DataFrame:
    """Answered READ commands (not the session's INQUIRY / READ CAPACITY / TEST UNIT READY)."""
    if cmds is None or cmds.empty or "cdb_name" not in cmds:
        return pd.DataFrame(columns=["issue_ts_ns", "resp_ts_ns"])
    r = cmds[cmds["cdb_name"].astype(str).str.startswith("READ(")]
    return r.dropna(subset=["issue_ts_ns", "resp_ts_ns"])


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    """Boot the VM testbed, measure every point not yet in the CSV, bring the VM down."""
    runtime = time_s or (3.0 if quick else 4.0)
    sweep = SweepCSV(out / "kernel.csv", COLUMNS, KEY)
    points = plan(quick)
    todo = [p for p in points if sweep.find(p) is None]
    if todo:
        cfg = vmtestbed.VmConfig(name="rk", delay_ms=DELAY_MS, lun_mb=32,
                                 max_sectors_kb=int(todo[0]["max_sectors_kb"]),
                                 queue_depth=int(todo[0]["queue_depth"]), boot_timeout_s=600)
        with vmtestbed.VmTestbed(cfg) as tb:
            rows = measure_points(tb, out, points, runtime, sweep)
    else:
        rows = measure_points(None, out, points, runtime, sweep)
    return finish(out, failed=sum(r.get("status") != "ok" for r in rows))


def measure_points(tb: vmtestbed.VmTestbed | None, out: Path, points: list[Row],
                   runtime_s: float, sweep: SweepCSV | None = None) -> list[Row]:
    """Every point on one running VM (`tb`; None when all are already in the CSV)."""
    sweep = sweep or SweepCSV(out / "kernel.csv", COLUMNS, KEY)

    def meas(p: Row) -> Row:
        if tb is None:
            raise RuntimeError("no VM testbed to measure on")
        return measure(tb, out, p, runtime_s)

    return run_points(sweep, points, meas, Progress("kernel", len(points)), _summary)


def _summary(r: Row) -> str:
    if r.get("kind") == "split":
        n = num(r, "requests_per_read")
        return (f"{n:g} request{'' if n == 1 else 's'} of "
                f"{num(r, 'request_bytes') / 1024:g} KiB; {r.get('split_named') or '-'}")
    return (f"{num(r, 'tps'):.1f} trans/s, at most {r.get('max_outstanding')} outstanding; "
            f"{r.get('ceiling_named') or 'no flat ceiling'}")




def load(out: Path) -> pd.DataFrame:
    return measured_rows(out / "kernel.csv")


def finish(out: Path, failed: int = 0) -> int:
    df = load(out)
    if none_measured("kernel", df):
        return 1
    png = repro_plot.plot_kernel(df, out / FIGURE, FIGURE_TITLE)
    df = df.astype({c: "Int64" for c in ("request_bytes", "max_outstanding", "reads")})
    for c in ("split_named", "ceiling_named"):
        df[c] = df[c].fillna("-")
    split = df[df["kind"] == "split"]
    if not split.empty:
        print(split[["max_sectors_kb", "requests_per_read", "request_bytes", "split_named"]]
              .to_string(index=False))
    rd = df[df["kind"] == "readers"]
    if not rd.empty:
        print(rd[["queue_depth", "cmds_max", "can_queue", "readers", "tps", "max_outstanding",
                  "mean_outstanding", "ceiling_named"]].to_string(index=False))
    print(f"kernel: wrote {out / 'kernel.csv'}, {png}; each point's capture, report.html and "
          f"timeline in {out / 'captures'}")
    if failed:
        print(f"kernel: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0

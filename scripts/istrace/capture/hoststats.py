"""A capture directory's host samples (hoststats-<host>.jsonl, docs/schema.md §7), as two tidy
tables: `sockstats` (one row per iSCSI socket per sample: the kernel's tcp_info as `ss -ti`
prints it) and `cpu` (one row per sample interval and thing measured: each CPU, all CPUs, the
target daemon, the workload; `busy` is the share of one CPU, or of all CPUs for `all`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from istrace.capture import layout

CPU_COLUMNS = ["ts_ns", "host", "what", "busy", "user", "system", "softirq", "irq", "cap",
               "periods", "throttled"]


def _records(d: Path) -> list[dict]:
    out = []
    for f in layout.hoststats_files(d):
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                # A capture killed mid-write leaves a cut last line: keep the rest.
                print(f"istrace: {f.name}:{n}: unreadable line skipped", file=sys.stderr)
    return out


def _sockstats(recs: list[dict]) -> pd.DataFrame | None:
    rows = [{"ts_ns": r["ts_ns"], "host": r["host"], **s} for r in recs
            for s in r.get("sockets") or []]
    if not rows:
        return None
    df = pd.DataFrame(rows)
    if "busy_us" in df.columns:
        # ss prints a limit clock only once it has run: absent beside busy means zero.
        for col in ("rwnd_limited_us", "sndbuf_limited_us"):
            have = df[col] if col in df.columns else pd.Series(np.nan, index=df.index)
            df[col] = have.where(have.notna() | df["busy_us"].isna(), 0.0)
    return df.sort_values(["host", "ts_ns"], kind="stable").reset_index(drop=True)


def _quota(qa: dict | None, qb: dict | None, dt: float) -> dict[str, float]:
    """A process's cgroup quota over one interval: `cap` (share of one CPU it may use),
    `periods` (enforcement periods it was runnable in) and `throttled` (of those, the ones it
    used up its quota in); `busy` from the cgroup's own microsecond clock where it has one."""
    out = {"cap": np.nan, "periods": np.nan, "throttled": np.nan}
    if not qa or not qb or qa.get("cgroup") != qb.get("cgroup") or not qb.get("period_us"):
        return out
    out["cap"] = qb["quota_us"] / qb["period_us"]
    out["periods"] = float(qb["periods"] - qa["periods"])
    out["throttled"] = float(qb["throttled"] - qa["throttled"])
    if qa.get("usage_us") is not None and qb.get("usage_us") is not None:
        out["busy"] = (qb["usage_us"] - qa["usage_us"]) / 1e6 / dt
    return out


def _cpu(recs: list[dict]) -> pd.DataFrame | None:
    """Utilisation over each interval between two samples of one host."""
    rows: list[dict] = []
    by_host: dict[str, list[dict]] = {}
    for r in recs:
        by_host.setdefault(r["host"], []).append(r)
    for host, rs in by_host.items():
        rs.sort(key=lambda r: r["ts_ns"])
        for a, b in zip(rs, rs[1:], strict=False):
            dt = (b["ts_ns"] - a["ts_ns"]) / 1e9
            hz = float(b.get("user_hz") or 100)
            if dt <= 0:
                continue
            for name, vb in (b.get("cpus") or {}).items():
                va = (a.get("cpus") or {}).get(name)
                if not va:
                    continue
                dv = np.subtract(vb, va, dtype=np.float64)
                total = dv.sum()
                if total <= 0:
                    continue
                # user nice system idle iowait irq softirq steal
                rows.append({"ts_ns": b["ts_ns"], "host": host, "what": name,
                             "busy": 1 - (dv[3] + dv[4]) / total, "user": (dv[0] + dv[1]) / total,
                             "system": dv[2] / total, "softirq": dv[6] / total,
                             "irq": dv[5] / total, "cap": np.nan, "periods": np.nan,
                             "throttled": np.nan})
            for what, pb in (b.get("procs") or {}).items():
                pa = (a.get("procs") or {}).get(what)
                if not pa or pa.get("pid") != pb.get("pid"):
                    continue
                u = (pb["utime"] - pa["utime"]) / hz / dt
                s = (pb["stime"] - pa["stime"]) / hz / dt
                rows.append({"ts_ns": b["ts_ns"], "host": host, "what": what, "busy": u + s,
                             "user": u, "system": s, "softirq": np.nan, "irq": np.nan,
                             **_quota(pa.get("cgroup"), pb.get("cgroup"), dt)})
    return pd.DataFrame(rows, columns=CPU_COLUMNS) if rows else None


def load_hoststats(d: Path) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """(sockstats, cpu) of a capture directory; None for each that was not sampled."""
    recs = _records(d)
    if not recs:
        return None, None
    return _sockstats(recs), _cpu(recs)

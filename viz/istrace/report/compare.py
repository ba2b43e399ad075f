"""Captures side by side: throughput, latency per layer, the verdict and its shares, and the
settings that differ (from meta.json and the workload's command line), as a plain-text table
and one HTML page (`istrace compare A B ...`)."""

from __future__ import annotations

import base64
import html
import io
import shlex
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from istrace.capture import layout  # noqa: E402
from istrace.capture.outputs import read_verdict, write_verdict  # noqa: E402
from istrace.capture.swapwrite import replace_text  # noqa: E402
from istrace.report import verdict  # noqa: E402
from istrace.track.of_capture import load_tracked  # noqa: E402

# Testbed settings worth comparing (meta.json "testbed"); the rest are names and paths.
TESTBED_KEYS = ("delay_i2t_ms", "delay_t2i_ms", "rate_mbit", "loss", "queue", "txqueuelen",
                "nic_rate_mbit", "offloads", "ini_rmem", "tgt_wmem", "tgt_cpu", "ini_cpu")
NEGOTIATED_KEYS = ("MaxBurstLength", "FirstBurstLength", "ImmediateData", "InitialR2T",
                   "MaxOutstandingR2T", "mrdsl_t2i", "mrdsl_i2t", "HeaderDigest", "DataDigest")


# istrace-gen's defaults (istrace-gen --help), so a flag left out compares as its value.
GEN_DEFAULTS = {"--size": "4M", "--queue-depth": "1", "--sessions": "1", "--lun": "1",
                "--max-burst": "16776192", "--first-burst": "262144", "--mrdsl": "262144",
                "--immediate-data": "yes", "--initial-r2t": "yes", "--max-r2t": "1"}


def workload_settings(command: str) -> dict[str, Any]:
    """`gen --size 4M --queue-depth 8` -> {gen --size: 4M, gen --queue-depth: 8, ...} with
    istrace-gen's defaults for the flags left out; any other command is one setting."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return {"workload": command}
    if not argv or argv[0] != "gen":
        return {"workload": command}
    out: dict[str, Any] = {f"gen {k}": v for k, v in GEN_DEFAULTS.items()}
    i = 1
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            val = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") \
                else "yes"
            out[f"gen {a}"] = val
            i += 2 if val != "yes" else 1
        else:
            i += 1
    return out


def settings(meta: dict[str, Any]) -> dict[str, Any]:
    got = meta.get("testbed")
    tb: dict[str, Any] = got if isinstance(got, dict) else {}
    out = {f"testbed {k}": tb[k] for k in TESTBED_KEYS if k in tb}
    wl = meta.get("workload")
    if isinstance(wl, dict) and wl.get("command"):
        out.update(workload_settings(str(wl["command"])))
    neg = (meta.get("negotiated") or {}).get("connections") if isinstance(
        meta.get("negotiated"), dict) else None
    if neg:
        out.update({f"iSCSI {k}": neg[0].get(k) for k in NEGOTIATED_KEYS if k in neg[0]})
    return out


def latencies(cap: Any) -> dict[str, dict[str, float]]:
    """p50 / p99 in ms per layer: iSCSI response time from the pcap, probe latencies per
    (host, layer, event) that carry one."""
    out: dict[str, dict[str, float]] = {}
    cmds = cap.main_commands()
    if cmds is not None and "resp_time_us" in cmds.columns:
        r = cmds["resp_time_us"].dropna().astype(float) / 1e3
        if not r.empty:
            out["iSCSI response (pcap)"] = {"p50": float(r.median()),
                                            "p99": float(r.quantile(0.99))}
    ev = cap.all_events()
    if ev is not None and "lat_ns" in ev.columns:
        e = ev[ev["lat_ns"].notna()]
        for (host, lay, name), g in e.groupby(["host", "layer", "event"]):
            x = g["lat_ns"].astype(float) / 1e6
            out[f"{host} {lay} {name}"] = {"p50": float(x.median()),
                                           "p99": float(x.quantile(0.99))}
    return out


def summarize(d: Path) -> dict[str, Any]:
    """Everything compared about one capture directory (its verdict made if missing)."""
    cap = load_tracked(d, to_file=True)
    v = read_verdict(d) if (d / layout.VERDICT).is_file() else None
    if v is None:
        v = verdict.decide(cap)
        write_verdict(v, d)
    ev = v.get("evidence") or {}
    s = settings(cap.meta)
    if ev.get("outstanding_max") is not None:
        s["commands outstanding (measured max)"] = ev["outstanding_max"]
    return {"name": d.name or str(d), "dir": str(d), "throughput_MBps": ev.get("throughput_MBps"),
            "primary": (v.get("primary") or {}).get("cause"),
            "primary_share": (v.get("primary") or {}).get("share"),
            "shares": v.get("shares") or {}, "unsure": v.get("unsure"),
            "latency": latencies(cap), "settings": s, "missing": list(cap.missing)}


def lacking(s: dict[str, Any]) -> list[str]:
    """What a capture's column cannot show, and why (its missing inputs), a line each: said,
    not left as a blank cell."""
    why = "; ".join(s.get("missing") or []) or "its verdict has no evidence"
    out = []
    if s["throughput_MBps"] is None:
        out.append(f"no throughput (missing: {why})")
    if s["primary"] is None:
        out.append(f"no verdict (missing: {why})")
    return out


def differing(sums: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Settings whose values are not the same in every capture (absent = None)."""
    keys = list(dict.fromkeys(k for s in sums for k in s["settings"]))
    out = {}
    for k in keys:
        vals = [s["settings"].get(k) for s in sums]
        if len({repr(v) for v in vals}) > 1:
            out[k] = vals
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def text_table(sums: list[dict[str, Any]]) -> str:
    """The comparison as aligned plain text: differences first, then results."""
    base = sums[0]["throughput_MBps"]
    rows: list[list[str]] = [["", *[s["name"] for s in sums]]]
    for k, vals in differing(sums).items():
        rows.append([k, *[_fmt(v) for v in vals]])
    rows.append(["throughput MB/s", *[
        "missing" if s["throughput_MBps"] is None else
        _fmt(s["throughput_MBps"]) + (f" (x{s['throughput_MBps'] / base:.2f})"
                                      if base and s["throughput_MBps"] and i else "")
        for i, s in enumerate(sums)]])
    rows.append(["limited by", *["missing" if s["primary"] is None else
                                 f"{verdict.cause_words(s['primary'])} "
                                 f"{(s['primary_share'] or 0) * 100:.0f}%"
                                 + ("?" if s["unsure"] else "") for s in sums]])
    # causes in words (verdict.json keeps the ids): the primary's share marked '<-'
    causes = list(dict.fromkeys(c for s in sums for c in s["shares"]))
    rows.append(["share of the time, by cause ('<-' limited by, '?' unsure)",
                 *["" for _ in sums]])
    rows += [[f"  {verdict.cause_words(c)}", *[
        f"{s['shares'].get(c, 0) * 100:.0f}%" + (" <-" + ("?" if s["unsure"] else "")
                                                 if s["primary"] == c else "")
        for s in sums]] for c in causes]
    layers = list(dict.fromkeys(k for s in sums for k in s["latency"]))
    rows += [[f"p50/p99 ms {k}", *[
        (f"{s['latency'][k]['p50']:.3g}/{s['latency'][k]['p99']:.3g}" if k in s["latency"]
         else "-") for s in sums]] for k in layers]
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)).rstrip()
                     for r in rows)


def _figure(sums: list[dict[str, Any]]) -> str:
    """Throughput bars and the verdict's shares stacked per capture, as an embedded PNG."""
    names = [s["name"] for s in sums]
    causes = list(dict.fromkeys(c for s in sums for c in s["shares"]))
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 3.2 + 0.1 * len(causes)))
    a.bar(names, [s["throughput_MBps"] or 0 for s in sums], color="#4477aa")
    a.set_ylabel("MB/s")
    a.set_title("Throughput")
    left = np.zeros(len(sums))
    cmap = plt.get_cmap("tab20")
    for i, c in enumerate(causes):
        w = np.array([s["shares"].get(c, 0.0) for s in sums])
        b.barh(names, w, left=left, color=cmap(i % 20), label=verdict.cause_words(c))
        left += w
    b.set_xlim(0, 1)
    b.set_title("Where the time went (verdict shares)")
    b.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def write_html(sums: list[dict[str, Any]], path: Path) -> Path:
    e = html.escape
    rows = text_table(sums)
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>istrace compare</title>"
             "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}"
             "pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>",
             "<h1>istrace compare</h1><ul>"]
    parts += [f"<li>{e(s['name'])}: {e(s['dir'])}</li>" for s in sums]
    parts.append("</ul>")
    diff = differing(sums)
    if diff:
        parts.append("<h2>What differs</h2><ul>" + "".join(
            f"<li><b>{e(k)}</b>: {' &rarr; '.join(e(_fmt(v)) for v in vals)}</li>"
            for k, vals in diff.items()) + "</ul>")
    parts.append(f"<img src='data:image/png;base64,{_figure(sums)}' style='max-width:100%'>")
    parts.append(f"<h2>Side by side</h2><pre>{e(rows)}</pre></body></html>")
    replace_text(path, "\n".join(parts))
    return path

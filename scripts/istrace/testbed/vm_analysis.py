"""Cross-layer analysis of VM testbed captures (events-*.jsonl from vm_events).

- `command_table`: one row per SCSI command of the kernel initiator, with its time at every
  layer: read() syscall, block request, SCSI dispatch, iSCSI queue/transmit, LIO receive/execute/
  data-in, iSCSI status, SCSI done, block complete, read() return; tied by the blk-mq driver tag
  (SCSI <-> iSCSI queue), the LBA (block <-> SCSI <-> iSCSI) and the ITT (initiator <-> LIO).
- `outstanding`: SCSI commands in flight over time, and per window of a readers sweep.
- plots for docs/: the timeline of one 2 MB read() and transactions/s against readers.

    python -m istrace.testbed.vm_analysis timeline CAPDIR --png out.png --csv out.csv
    python -m istrace.testbed.vm_analysis readers CAPDIR[:LABEL] ... --png out.png --csv out.csv
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd
from istrace.capture import events

READ_OPS = (0x28, 0x88, 0xA8, 0x08)


def load_events(cap: Path) -> pd.DataFrame:
    """Both hosts' events with the VM probes' extra columns (tag, cdb_opcode)."""
    ev = events.load_events(cap, extras=True)
    if ev is None:
        raise ValueError(f"{cap}: no events-*.jsonl with events")
    return ev


def _sel(ev: pd.DataFrame, host: str, layer: str, event: str) -> pd.DataFrame:
    return ev[(ev.host == host) & (ev.layer == layer) & (ev.event == event)].copy()


def _asof(left: pd.DataFrame, right: pd.DataFrame, left_ts: str, by: str,
          direction: str, cols: dict[str, str], right_by: str | None = None) -> pd.DataFrame:
    """For each left row, the nearest right row (by time, same key) -> renamed columns."""
    right_by = right_by or by
    r = right.dropna(subset=[right_by])[["ts_ns", right_by, *[c for c in cols if c != "ts_ns"]]]
    r = r.rename(columns={right_by: by, **cols}).astype({by: "int64"})
    # Nullable integers: a float64 column (NaN for unmatched rows) would round ns timestamps.
    r = r.astype({c: "Int64" for c in cols.values() if pd.api.types.is_numeric_dtype(r[c])})
    r["_rts"] = r[cols["ts_ns"]].astype("int64")
    lhs = left.reset_index().dropna(subset=[left_ts, by])
    lhs = lhs.astype({by: "int64", left_ts: "int64"}).sort_values(left_ts)
    m = pd.merge_asof(lhs, r.sort_values("_rts"), left_on=left_ts, right_on="_rts", by=by,
                      direction=direction)  # type: ignore[arg-type]
    m = m.set_index("index").drop(columns=["_rts"])
    out = left.copy()
    for c in cols.values():
        out[c] = m[c].reindex(out.index)
    return out


def _status_pdus(ev: pd.DataFrame) -> pd.DataFrame:
    """Initiator PDUs that end a command: SCSI Response, or Data-In with the S bit."""
    pdus = _sel(ev, "initiator", "iscsi", "pdu_complete")
    flags = pdus.reason.fillna("").map(
        lambda r: int(m.group(1), 16) if (m := re.search(r"flags=0x([0-9a-f]+)", r)) else 0)
    return pdus[(pdus.opcode == 0x21) | ((pdus.opcode == 0x25) & (flags & 0x01 > 0))]


def command_table(ev: pd.DataFrame) -> pd.DataFrame:
    """One row per SCSI command the kernel initiator queued, with every layer's time."""
    cmds = _sel(ev, "initiator", "iscsi", "queuecommand")
    cmds = cmds[["ts_ns", "lba", "bytes", "tag", "cdb_opcode", "pid"]].rename(
        columns={"ts_ns": "iscsi_queue_ns"}).reset_index(drop=True)
    cmds = cmds.astype({c: "Int64" for c in ("lba", "bytes", "tag", "cdb_opcode", "pid")})
    cmds = _asof(cmds, _sel(ev, "initiator", "scsi", "cmd_issue"), "iscsi_queue_ns", "tag",
                 "backward", {"ts_ns": "scsi_issue_ns"})
    cmds = _asof(cmds, _sel(ev, "initiator", "scsi", "cmd_done"), "iscsi_queue_ns", "tag",
                 "forward", {"ts_ns": "scsi_done_ns"})
    cmds = _asof(cmds, _sel(ev, "initiator", "iscsi", "task_xmit"), "iscsi_queue_ns", "lba",
                 "forward", {"ts_ns": "iscsi_xmit_ns", "itt": "itt"})
    cmds = _asof(cmds, _sel(ev, "target", "iscsi", "cmd_rx"), "iscsi_xmit_ns", "itt",
                 "forward", {"ts_ns": "lio_rx_ns", "lba": "lio_lba"})
    cmds = _asof(cmds, _sel(ev, "target", "scsi", "cmd_exec"), "lio_rx_ns", "itt",
                 "forward", {"ts_ns": "lio_exec_ns"})
    cmds = _asof(cmds, _sel(ev, "target", "scsi", "data_in"), "lio_rx_ns", "itt",
                 "forward", {"ts_ns": "lio_data_in_ns"})
    cmds = _asof(cmds, _status_pdus(ev), "iscsi_xmit_ns", "itt", "forward",
                 {"ts_ns": "iscsi_status_ns"})
    cmds = _asof(cmds, _sel(ev, "initiator", "block", "rq_issue"), "scsi_issue_ns", "lba",
                 "backward", {"ts_ns": "rq_issue_ns", "pid": "rq_pid"})
    cmds = _asof(cmds, _sel(ev, "initiator", "block", "rq_complete"), "scsi_done_ns", "lba",
                 "forward", {"ts_ns": "rq_complete_ns"})
    sys_in = _sel(ev, "initiator", "syscall", "read_enter")
    sys_out = _sel(ev, "initiator", "syscall", "read_exit")
    cmds = _asof(cmds, sys_in, "rq_issue_ns", "rq_pid", "backward",
                 {"ts_ns": "read_enter_ns", "bytes": "read_bytes"}, right_by="pid")
    cmds = _asof(cmds, sys_out, "rq_complete_ns", "rq_pid", "forward",
                 {"ts_ns": "read_exit_ns"}, right_by="pid")
    cmds = _enclosing_read(cmds, sys_in, sys_out)
    cmds["outstanding"] = _outstanding_at_issue(cmds)
    cmds.insert(0, "cmd", range(len(cmds)))
    return cmds


def _enclosing_read(cmds: pd.DataFrame, sys_in: pd.DataFrame,
                    sys_out: pd.DataFrame) -> pd.DataFrame:
    """Requests that blk-mq dispatched later from a kworker (the reader asleep in read())
    carry no reader pid: give them the read() whose span encloses the request, if one does."""
    todo = cmds.read_enter_ns.isna() & cmds.rq_issue_ns.notna() & cmds.rq_complete_ns.notna()
    if not todo.any() or sys_in.empty:
        return cmds
    calls = pd.merge_asof(sys_in[["ts_ns", "pid", "bytes"]].sort_values("ts_ns"),
                          sys_out[["ts_ns", "pid"]].rename(columns={"ts_ns": "exit_ns"})
                          .sort_values("exit_ns"),
                          left_on="ts_ns", right_on="exit_ns", by="pid", direction="forward")
    out = cmds.copy()
    for i in out.index[todo]:
        rq_in, rq_out = out.at[i, "rq_issue_ns"], out.at[i, "rq_complete_ns"]
        hit = calls[(calls.ts_ns <= rq_in) & (calls.exit_ns >= rq_out)]
        if len(hit) == 1:
            out.loc[i, ["read_enter_ns", "read_bytes", "read_exit_ns"]] = (
                int(hit.ts_ns.iloc[0]), int(hit.bytes.iloc[0]), int(hit.exit_ns.iloc[0]))
    return out


def _outstanding_at_issue(cmds: pd.DataFrame) -> pd.Series:
    """SCSI commands in flight when each one was dispatched (itself included)."""
    issue = cmds.scsi_issue_ns.fillna(cmds.iscsi_queue_ns).astype("int64")
    done = cmds.scsi_done_ns.fillna(pd.Series([2**62] * len(cmds))).astype("int64")
    order = issue.sort_values().values
    ends = done.sort_values().values
    started = pd.Series(order).searchsorted(issue.values, side="right")
    finished = pd.Series(ends).searchsorted(issue.values, side="right")
    return pd.Series(started - finished, index=cmds.index)


def command_spans(ev: pd.DataFrame) -> pd.DataFrame:
    """SCSI dispatch -> completion per command, paired by blk-mq driver tag: a command ends at
    the next cmd_done with its tag, and at the latest when its tag is dispatched again."""
    iss = _sel(ev, "initiator", "scsi", "cmd_issue")[["ts_ns", "tag", "opcode"]]
    don = _sel(ev, "initiator", "scsi", "cmd_done")[["ts_ns", "tag"]]
    iss = iss.dropna(subset=["tag"]).astype({"tag": "int64"}).sort_values("ts_ns")
    don = don.dropna(subset=["tag"]).astype({"tag": "int64"}).sort_values("ts_ns")
    iss["next_issue_ns"] = iss.groupby("tag").ts_ns.shift(-1)
    m = pd.merge_asof(iss, don.rename(columns={"ts_ns": "done_ns"}), left_on="ts_ns",
                      right_on="done_ns", by="tag", direction="forward")
    paired = m.done_ns.notna() & (m.next_issue_ns.isna() | (m.done_ns <= m.next_issue_ns))
    end = m.done_ns.where(paired, m.next_issue_ns)
    return pd.DataFrame({"issue_ns": m.ts_ns, "done_ns": end, "opcode": m.opcode,
                         "paired": paired})


def inflight_series(ev: pd.DataFrame) -> pd.DataFrame:
    """Step series of SCSI commands in flight: columns ts_ns, inflight (after the event)."""
    # A command whose completion line is missing would count until its tag's reuse: leave
    # such commands out of the in-flight count (they are few; see the readers table).
    spans = command_spans(ev)
    spans = spans[spans.paired]
    steps = pd.concat([pd.DataFrame({"ts_ns": spans.issue_ns, "d": 1}),
                       pd.DataFrame({"ts_ns": spans.done_ns.astype("int64"), "d": -1})])
    steps = steps.sort_values(["ts_ns", "d"], kind="stable")
    steps["inflight"] = steps.d.cumsum()
    return steps[["ts_ns", "inflight"]].reset_index(drop=True)


def reader_windows(cap: Path) -> pd.DataFrame:
    """The readers sweep's windows from workload.out markers, with fio's own results."""
    rows: dict[int, dict[str, float]] = {}
    last = 0
    for line in (cap / "workload.out").read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "READERS":
            n = int(parts[1])
            rows.setdefault(n, {"readers": n})[parts[2].lower() + "_ns"] = int(parts[3])
            last = n
        elif parts[:1] == ["READERS_RESULT"] and last in rows:
            rows[last].update(fio_ios=float(parts[1]), fio_iops=float(parts[2]),
                              fio_clat_us=float(parts[3]) / 1000)
    return pd.DataFrame(list(rows.values()))


def readers_table(cap: Path, label: str, runtime_s: float = 4.0) -> pd.DataFrame:
    """Per reader count: transactions/s and SCSI commands in flight, both from the tracer,
    over the last `runtime_s` (fio's time-based run) before the window's last dispatch:
    under emulation fio's start-up takes seconds and would dilute the rate."""
    ev = load_events(cap)
    steps = inflight_series(ev)
    spans = command_spans(ev).dropna(subset=["done_ns"])
    spans = spans[spans.opcode.isin(READ_OPS)]
    out = []
    for w in reader_windows(cap).itertuples():
        mine = spans[(spans.issue_ns >= w.start_ns) & (spans.issue_ns < w.end_ns)]
        if mine.empty:
            continue
        # Closed loop: dispatch rate = completion rate, and dispatches are never missing.
        hi = int(mine.issue_ns.max())
        lo = max(int(mine.issue_ns.min()), hi - int(runtime_s * 1e9))
        mine = mine[mine.issue_ns >= lo]
        in_w = steps[(steps.ts_ns >= lo) & (steps.ts_ns <= hi)]
        ts = in_w.ts_ns.to_numpy()
        dur = (list(ts[1:] - ts[:-1]) + [0]) if len(ts) else []
        vals = in_w.inflight.to_numpy()
        total = float(sum(dur))
        mean_inflight = float((vals * pd.Series(dur, dtype=float).to_numpy()).sum() / total) \
            if total else 0.0
        out.append({"config": label, "readers": int(w.readers),
                    "tx_per_s": round(len(mine) / ((hi - lo) / 1e9), 2),
                    "fio_iops": round(float(getattr(w, "fio_iops", float("nan"))), 2),
                    "commands": len(mine), "unpaired": int((~mine.paired).sum()),
                    "inflight_mean": round(mean_inflight, 2),
                    "inflight_max": int(in_w.inflight.max()) if len(in_w) else 0,
                    "fio_clat_ms": round(float(getattr(w, "fio_clat_us", float("nan"))) / 1000,
                                         1)})
    return pd.DataFrame(out)


# -- plots ----------------------------------------------------------------------------------
_LANES = [  # (label, start column, end column, colour)
    ("read() syscall", "read_enter_ns", "read_exit_ns", "#4c72b0"),
    ("block request", "rq_issue_ns", "rq_complete_ns", "#55a868"),
    ("SCSI command", "scsi_issue_ns", "scsi_done_ns", "#c44e52"),
    ("iSCSI task (initiator)", "iscsi_xmit_ns", "iscsi_status_ns", "#8172b2"),
    ("LIO command (target)", "lio_rx_ns", "lio_data_in_ns", "#ccb974"),
]


def plot_timeline(cmds: pd.DataFrame, ev: pd.DataFrame, png: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = int(cmds.read_enter_ns.min() if cmds.read_enter_ns.notna().any()
             else cmds.iscsi_queue_ns.min())
    t1 = int(cmds[["read_exit_ns", "scsi_done_ns"]].max().max())
    n = len(cmds)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.9 * (len(_LANES) + 1)))
    for lane, (_label, a, b, colour) in enumerate(_LANES):
        y = len(_LANES) - lane
        spans = cmds[[a, b]].dropna().drop_duplicates()
        for i, (s, e) in enumerate(spans.itertuples(index=False)):
            h = 0.8 / max(1, len(spans)) if len(spans) > 1 else 0.6
            ax.broken_barh([((s - t0) / 1e6, max((e - s) / 1e6, 0.05))],
                           (y - 0.4 + i * h, h * 0.9 if len(spans) > 1 else h),
                           facecolors=colour)
        ax.text((t1 - t0) / 1e6 * 1.01, y, f"{len(spans)}", va="center", fontsize=9)
    tcp = ev[(ev.layer == "tcp") & (ev.ts_ns >= t0) & (ev.ts_ns <= t1)]
    for host, marker, yoff in (("initiator", "|", -0.15), ("target", "|", 0.15)):
        pts = tcp[tcp.host == host]
        ax.plot((pts.ts_ns - t0) / 1e6, [yoff] * len(pts), marker, ms=6, alpha=0.5,
                label=f"tcp_probe ({host} receives)")
    ax.set_yticks(list(range(len(_LANES), 0, -1)) + [0])
    ax.set_yticklabels([lane[0] for lane in _LANES] + ["TCP segments"])
    ax.set_xlabel("ms since read() entry")
    ax.set_xlim(-0.02 * (t1 - t0) / 1e6, (t1 - t0) / 1e6 * 1.06)
    ax.set_title(f"{title}: {n} SCSI command(s)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def plot_readers(table: pd.DataFrame, png: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, (label, g) in enumerate(table.groupby("config", sort=False)):
        g = g.sort_values("readers")
        colour = f"C{i}"
        a1.plot(g.readers, g.tx_per_s, "o-", color=colour, label=str(label))
        a2.plot(g.readers, g.inflight_max, "o-", color=colour, label=f"{label}: max")
        a2.plot(g.readers, g.inflight_mean, "x--", color=colour, alpha=0.6,
                label=f"{label}: time-weighted mean")
        depth = re.search(r"queue_depth=(\d+)", str(label))
        if depth and int(depth.group(1)) <= 2 * g.inflight_max.max():
            a2.axhline(int(depth.group(1)), color=colour, ls=":", lw=1)
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("parallel 512-byte readers")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    a1.set_ylabel("transactions/s (SCSI READs completed, tracer)")
    a2.set_ylabel("SCSI commands outstanding (tracer)")
    fig.suptitle(title)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="vm_analysis", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    t = sub.add_parser("timeline", help="per-command table and timeline of one capture")
    t.add_argument("cap")
    t.add_argument("--png")
    t.add_argument("--csv")
    t.add_argument("--title", default="One 2 MB O_DIRECT read() on the kernel initiator")
    r = sub.add_parser("readers", help="transactions/s and outstanding against readers")
    r.add_argument("caps", nargs="+", help="CAPDIR[:LABEL]")
    r.add_argument("--png")
    r.add_argument("--csv")
    r.add_argument("--runtime", type=float, default=4.0, help="fio runtime per reader count")
    r.add_argument("--title", default="Parallel 512-byte readers, kernel initiator -> LIO")
    a = p.parse_args(argv)
    try:
        if a.what == "timeline":
            ev = load_events(Path(a.cap))
            cmds = command_table(ev)
            if a.csv:
                cmds.to_csv(a.csv, index=False)
            if a.png:
                plot_timeline(cmds, ev, Path(a.png), a.title)
            print(cmds.to_string(max_rows=80))
        else:
            tables = []
            for spec in a.caps:
                cap, _, label = spec.partition(":")
                tables.append(readers_table(Path(cap), label or Path(cap).name, a.runtime))
            table = pd.concat(tables, ignore_index=True)
            if a.csv:
                table.to_csv(a.csv, index=False)
            if a.png:
                plot_readers(table, Path(a.png), a.title)
            print(table.to_string())
    except (ValueError, OSError, KeyError) as exc:
        print(f"vm_analysis: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

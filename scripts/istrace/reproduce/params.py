"""Experiment `params` (seed 002, fig. 9 and its parameter study): throughput against link delay
for the iSCSI keys the study varied, each measured curve beside the model's (eq. 3 in
istrace.model.study).

Four series, each one key at a time, all with one command outstanding as in the study's light
load:
- pdu-size: 1 MiB READs per MaxRecvDataSegmentLength (the data PDU size, 512 B and up).
- burst-write: 1 MiB WRITEs per MaxBurstLength; every burst past the first waits for an R2T.
- burst-read: 1 MiB READs per MaxBurstLength (full run only): no R2T, so the model says flat.
- unsolicited: 64 KiB WRITEs with R2T only, with ImmediateData, and with InitialR2T=No.

Both ends are told each key: tgtd through tgtadm (between points, on the running testbed) and
istrace-gen through its options. What was negotiated, and the PDUs and R2Ts the run actually
exchanged (gen counts them), go into the CSV, and the model is fed the negotiated values, so
a target that does something else than negotiated shows as a gap to the model, not as a
silently wrong input.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from istrace.model import study as model
from istrace.reproduce import plot as repro_plot
from istrace.reproduce import run as repro_run
from istrace.reproduce.sweep import Row, measured_rows, none_measured, num

COLUMNS = ["series", "value", "delay_ms", "write", "size", "mrdsl", "max_burst", "first_burst",
           "immediate", "initial_r2t", "mbps", "iops", "commands", "pdus_per_cmd",
           "r2t_per_cmd", "pdu_bytes", "neg_mrdsl", "neg_target_mrdsl", "neg_max_burst",
           "neg_first_burst", "neg_immediate", "neg_initial_r2t", "model_mbps", "model_r2t",
           "ratio", "rtt_ms", "seconds", "status", "error"]
KEY = ["series", "value", "delay_ms"]
RATE_MBIT = 320.0            # the path's bottleneck, as in the delay sweep
TARGET_PDU = 8192            # tgtd's own MaxRecvDataSegmentLength (its default)
BIG_READ = 1 << 20
SMALL_WRITE = 64 << 10
MODES = {  # unsolicited series: (InitialR2T, ImmediateData)
    "R2T": ("Yes", "No"),
    "immediate": ("Yes", "Yes"),
    "unsolicited": ("No", "Yes"),
}

FIGURE = "repro-params.png"
FIGURE_TITLE = "iSCSI keys vs delay, measured (solid) and eq. 3 (dashed); seed 002"


def _point(series: str, value: str, delay: float, *, write: bool, size: int, mrdsl: int,
           max_burst: int, first_burst: int, immediate: str = "Yes",
           initial_r2t: str = "Yes") -> Row:
    return {"series": series, "value": value, "delay_ms": delay, "write": int(write),
            "size": size, "mrdsl": mrdsl, "max_burst": max_burst,
            "first_burst": min(first_burst, max_burst), "immediate": immediate,
            "initial_r2t": initial_r2t}


def plan(quick: bool) -> list[Row]:
    if quick:
        delays = [1.0, 5.0]
        pdus = [512, 8192, 262144]
        bursts = [16384, 262144, 1 << 20]
        read_bursts: list[int] = []
    else:
        delays = [1.0, 5.0, 10.0, 20.0]
        pdus = [512, 1024, 2048, 4096, 8192, 65536, 262144]
        bursts = [16384, 65536, 262144, 1 << 20]
        read_bursts = [16384, 262144, 1 << 20]
    pts: list[Row] = []
    for d in delays:
        pts += [_point("pdu-size", str(p), d, write=False, size=BIG_READ, mrdsl=p,
                       max_burst=262144, first_burst=65536) for p in pdus]
        pts += [_point("burst-write", str(b), d, write=True, size=BIG_READ, mrdsl=TARGET_PDU,
                       max_burst=b, first_burst=65536) for b in bursts]
        pts += [_point("burst-read", str(b), d, write=False, size=BIG_READ, mrdsl=262144,
                       max_burst=b, first_burst=65536) for b in read_bursts]
        pts += [_point("unsolicited", mode, d, write=True, size=SMALL_WRITE, mrdsl=TARGET_PDU,
                       max_burst=262144, first_burst=65536, initial_r2t=r2t, immediate=imm)
                for mode, (r2t, imm) in MODES.items()]
    return pts


def target_keys(p: Row) -> dict[str, str]:
    """What tgtd offers for point `p`. Its MaxRecvDataSegmentLength sizes Data-Out and
    immediate data; the READs' Data-In size is the initiator's (gen's --mrdsl)."""
    return {"MaxRecvDataSegmentLength": str(max(int(p["mrdsl"]), 512) if not p["write"]
                                            else TARGET_PDU),
            "MaxBurstLength": str(p["max_burst"]), "FirstBurstLength": str(p["first_burst"]),
            "ImmediateData": str(p["immediate"]), "InitialR2T": str(p["initial_r2t"])}


def gen_options(p: Row) -> list[str]:
    opts = ["--mrdsl", str(p["mrdsl"] if not p["write"] else 262144),
            "--max-burst", str(p["max_burst"]), "--first-burst", str(p["first_burst"]),
            "--immediate-data", str(p["immediate"]).lower(),
            "--initial-r2t", str(p["initial_r2t"]).lower()]
    return opts + (["--write"] if p["write"] else [])


def predict(p: Row, neg: dict[str, object], rtt_ms: float) -> tuple[float, int]:
    """Eq. (3) with the negotiated keys: (MB/s, R2T rounds per command)."""
    size = int(p["size"])
    rate = RATE_MBIT * 1e6 / 8
    if p["write"]:
        target_pdu = int(str(neg.get("TargetMaxRecvDataSegmentLength", TARGET_PDU)))
        rounds = model.r2t_rounds(size, int(str(neg["MaxBurstLength"])),
                                  int(str(neg["FirstBurstLength"])),
                                  neg.get("ImmediateData") == "Yes",
                                  neg.get("InitialR2T") == "Yes", target_pdu)
        pdu = target_pdu
    else:
        rounds, pdu = 0, int(str(neg["MaxRecvDataSegmentLength"]))
    mbps = model.iscsi_throughput(size, pdu, rtt_ms / 1e3, rate, rounds) / model.MB
    return mbps, rounds


def measure(tb: repro_run.Testbed, p: Row, secs: float, rtt_ms: float) -> Row:
    tb.set_target_keys(target_keys(p))
    # Long enough for a few commands even where each one waits out many R2T round trips.
    guess = model.command_seconds(int(p["size"]), 8192, rtt_ms / 1e3, RATE_MBIT * 1e6 / 8,
                                  model.r2t_rounds(int(p["size"]), int(p["max_burst"]),
                                                   int(p["first_burst"]), True, True, 8192)
                                  if p["write"] else 0)
    run_s = min(30.0, max(secs, 4 * guess))
    r = repro_run.run_gen(tb, str(p["size"]), run_s, extra=gen_options(p))
    neg = r.raw.get("negotiated") or {}
    pdus = r.raw.get("pdus") or {}
    if not neg or not pdus or r.commands == 0:
        raise repro_run.ReproError("istrace-gen reported no negotiated keys, PDU counts or "
                                   "completed commands")
    data = pdus.get("data_out" if p["write"] else "data_in", 0)
    model_mbps, rounds = predict(p, neg, rtt_ms)
    per_cmd = data / r.commands
    return {"mbps": round(r.mbps, 4), "iops": round(r.iops, 2), "commands": r.commands,
            "pdus_per_cmd": round(per_cmd, 2),
            "r2t_per_cmd": round(pdus.get("r2t", 0) / r.commands, 2),
            "pdu_bytes": round(int(p["size"]) / per_cmd) if per_cmd else "",
            "neg_mrdsl": neg.get("MaxRecvDataSegmentLength", ""),
            "neg_target_mrdsl": neg.get("TargetMaxRecvDataSegmentLength", ""),
            "neg_max_burst": neg.get("MaxBurstLength", ""),
            "neg_first_burst": neg.get("FirstBurstLength", ""),
            "neg_immediate": neg.get("ImmediateData", ""),
            "neg_initial_r2t": neg.get("InitialR2T", ""),
            "model_mbps": round(model_mbps, 4), "model_r2t": rounds,
            "ratio": round(r.mbps / model_mbps, 3), "rtt_ms": rtt_ms,
            "seconds": round(r.seconds, 3)}


def run(out: Path, quick: bool, time_s: float | None = None) -> int:
    secs = time_s or (2.0 if quick else 3.0)
    meas = repro_run.with_path_rtt(lambda tb, p, rtt: measure(tb, p, secs, rtt))

    failed = repro_run.sweep_grouped(
        out / "params.csv", COLUMNS, KEY, "params", plan(quick),
        group=lambda p: (p["delay_ms"],),
        bed=lambda p: {"delay_ms": float(p["delay_ms"]), "rate_mbit": RATE_MBIT}, tag="pk",
        measure=meas,
        summary=lambda r: (f"{num(r, 'mbps'):.2f} MB/s (model {num(r, 'model_mbps'):.2f}), "
                           f"{num(r, 'pdus_per_cmd'):.0f} data PDUs and "
                           f"{num(r, 'r2t_per_cmd'):.0f} R2T per command"))
    return finish(out, failed=failed)




def load(out: Path) -> pd.DataFrame:
    return measured_rows(out / "params.csv", dtype={"value": str})


def per_pdu_cost_us(df: pd.DataFrame) -> pd.Series:
    """What the model leaves out, per data PDU: (measured - model) time per command over the
    PDUs of that command, for the READs of the pdu-size series (µs, per point)."""
    sel = df[df["series"] == "pdu-size"]
    extra_s = sel["size"] / (sel["mbps"] * model.MB) - sel["size"] / (sel["model_mbps"] * model.MB)
    return (extra_s / sel["pdus_per_cmd"] * 1e6).rename("per_pdu_us")


def findings(df: pd.DataFrame) -> list[str]:
    """Sentences the table supports, each computed from the measured columns."""
    out = []
    cost = per_pdu_cost_us(df)
    if not cost.empty:
        small = df.loc[cost.index, "mrdsl"] <= 1024
        if small.any():
            out.append(f"pdu-size: the model leaves out {cost[small].median():.1f} µs per data "
                       "PDU (median over the READs with PDUs of 1 KiB or less): per-PDU work, "
                       "not headers on the wire, is what small PDUs cost")
    reads = df[(df["write"] == 0) & df["neg_max_burst"].notna()]
    over = reads[reads["pdu_bytes"].astype(float) > reads["neg_max_burst"].astype(float)]
    if not over.empty:
        r = over.iloc[0]
        out.append(f"{r['series']}: the target sent Data-In PDUs of {float(r['pdu_bytes']):.0f} "
                   f"B with MaxBurstLength={int(r['neg_max_burst'])} negotiated: its Data-In "
                   "sequences ignore MaxBurstLength (RFC 7143 §13.13 bounds them by it)")
    writes = df[df["write"] == 1]
    off = writes[(writes["r2t_per_cmd"] - writes["model_r2t"]).abs() > 0.5]
    if not writes.empty:
        out.append(f"writes: R2Ts per command match the model's rounds at "
                   f"{len(writes) - len(off)}/{len(writes)} points")
    return out


def finish(out: Path, failed: int = 0) -> int:
    df = load(out)
    if none_measured("params", df):
        return 1
    repro_plot.plot_params(df, out / FIGURE, FIGURE_TITLE)
    for series, part in df.groupby("series", sort=False):
        print(f"params: {series}: MB/s measured (model)")
        table = part.pivot_table(index="delay_ms", columns="value", values="mbps", sort=False)
        pred = part.pivot_table(index="delay_ms", columns="value", values="model_mbps",
                                sort=False)
        shown = table.round(2).astype(str) + " (" + pred.round(2).astype(str) + ")"
        print(shown.to_string())
    for line in findings(df):
        print(f"params: {line}")
    print(f"params: measured / model median {df['ratio'].median():.2f}")
    print(f"params: wrote {out / 'params.csv'}, {out / 'repro-params.png'}")
    if failed:
        print(f"params: {failed} point(s) failed (see the CSV's error column)")
    return 1 if failed else 0

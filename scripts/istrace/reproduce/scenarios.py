"""The verdict's scenario suite: captures on the testbed whose cause is fixed in advance.

Each scenario sets the testbed and the workload so that one cause (or two, where said) limits
the transfer, runs the real `istrace capture` and `istrace report` on it, then reports a copy
with the probe events and host samples taken away ("without probes": pcaps and meta.json
only). `istrace reproduce scenarios` writes scenarios.csv and, with --table, the markdown table
of docs/verdict-scenarios.md; tests/report/test_scenarios.py asserts it.

The parameters keep this 2-core machine's CPUs out of the way (both ends and the user-space
path emulator share them: a full-speed transfer makes the CPU the cause of everything), and
use Reno, a loss-based congestion control like the cubic of ordinary distributions (a
namespace may only pick from net.ipv4.tcp_allowed_congestion_control, which always has reno;
this host's default BBR paces an app-limited flow at its low measured rate, a cause of its
own).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from istrace.capture import layout


@dataclass(frozen=True)
class Scenario:
    name: str
    testbed: tuple[str, ...]     # `istrace capture` path/testbed flags
    workload: str                # `gen ...`
    primary: str                 # the cause fixed in advance (verdict.json ids)
    secondary: str | None        # a second cause fixed in advance, if any
    why: str
    cc: str = "reno"
    # "What would help", checked: the change the verdict should advise for the primary cause,
    # run as a second capture. `{value}` in either is the setting the advice names (its
    # `value` in verdict.json: commands outstanding, buffer bytes).
    help_testbed: tuple[str, ...] | None = None
    help_workload: str | None = None


# tgtd offers InitialR2T=Yes, FirstBurstLength 64 KiB and an 8 KiB MaxRecvDataSegmentLength
# by default: a WRITE beyond 8 KiB always waits for an R2T. These let one go unsolicited.
_UNSOLICITED = ("--tgt-param", "InitialR2T=No", "--tgt-param", "FirstBurstLength=1048576",
                "--tgt-param", "MaxBurstLength=1048576",
                "--tgt-param", "MaxRecvDataSegmentLength=1048576")

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("qd1-small", ("--delay", "10ms"), "gen --size 64k --time 3",
             "initiator_concurrency", None,
             "one 64 KiB READ outstanding over a 20 ms round trip: the link idles between"),
    Scenario("qd1-4m", ("--delay", "16ms"), "gen --size 4M --time 4",
             "initiator_concurrency", None,
             "the demo: one 4 MiB READ at a time at 16 ms one way (the study's setting)"),
    Scenario("qd2-20ms", ("--delay", "20ms"), "gen --size 256k --queue-depth 2 --time 3",
             "initiator_concurrency", None,
             "two 256 KiB READs outstanding over 40 ms: a flat ceiling at 2",
             help_testbed=("--delay", "20ms"),
             help_workload="gen --size 256k --queue-depth {value} --time 6"),
    # No --rate here: through the rate-limited path a full send buffer makes tgtd retry
    # write() on EAGAIN in a busy loop (millions of syscall events in seconds).
    Scenario("rwnd", ("--delay", "10ms", "--ini-rmem", "64k"),
             "gen --size 1M --queue-depth 8 --time 3", "tcp_rwnd", None,
             "the initiator's receive buffer capped at 64 KiB: one small window per 20 ms",
             help_testbed=("--delay", "10ms", "--ini-rmem", "{value}")),
    Scenario("sndbuf", ("--delay", "10ms", "--tgt-wmem", "64k"),
             "gen --size 1M --queue-depth 8 --time 3", "tcp_sndbuf", None,
             "the target's send buffer capped at 64 KiB"),
    Scenario("capacity", ("--delay", "2ms", "--rate", "100mbit"),
             "gen --size 1M --queue-depth 8 --time 3", "network_capacity", None,
             "a 100 Mbit/s bottleneck with eight 1 MiB READs outstanding"),
    Scenario("capacity-queue", ("--delay", "2ms", "--rate", "50mbit", "--queue", "3000"),
             "gen --size 1M --queue-depth 16 --time 4", "network_capacity", "network_queueing",
             "a 50 Mbit/s bottleneck behind a 3000-packet queue: full link, RTT bloated"),
    Scenario("loss", ("--delay", "5ms", "--loss", "2%"),
             "gen --size 1M --queue-depth 8 --time 3", "tcp_loss_recovery", None,
             "2% random loss each way at 10 ms RTT"),
    Scenario("r2t", ("--delay", "5ms",),
             "gen --write --size 1M --queue-depth 4 --initial-r2t yes --immediate-data no "
             "--max-burst 65536 --first-burst 65536 --max-r2t 1 --time 3", "iscsi_r2t", None,
             "1 MiB WRITEs in 64 KiB bursts, each waiting for its R2T, one R2T at a time",
             help_testbed=("--delay", "5ms", *_UNSOLICITED),
             help_workload="gen --write --size 1M --queue-depth 4 --initial-r2t no "
                           "--immediate-data yes --max-burst 1048576 --first-burst 1048576 "
                           "--mrdsl 1048576 --time 3"),
    Scenario("cwnd", ("--delay", "10ms", "--tgt-cwnd", "40"),
             "gen --size 256k --queue-depth 8 --time 4", "tcp_cwnd", None,
             "the target's congestion window clamped at 40 segments (route cwnd lock): "
             "58 KB per 20 ms round trip, far below the receive window"),
    Scenario("initiator-cpu", ("--delay", "2ms", "--ini-cpu", "4", *_UNSOLICITED),
             "gen --write --size 256k --queue-depth 8 --time 4", "host_cpu_initiator", None,
             "the workload capped at 4% of one CPU, writing 256 KiB commands as unsolicited "
             "data (no R2T): it issues and sends only while its cgroup has CPU"),
    Scenario("target-cpu", ("--tgt-cpu", "5"), "gen --size 256k --queue-depth 4 --time 3",
             "host_cpu_target", None, "tgtd capped at 5% of one CPU"),
    Scenario("loss-qd1", ("--delay", "10ms", "--loss", "0.5%"), "gen --size 32k --time 4",
             "tcp_loss_recovery", "initiator_concurrency",
             "one 32 KiB READ at a time over 20 ms with 0.5% loss: about one command in eight "
             "loses a segment and waits out a retransmission timeout (>= 200 ms, ten command "
             "cycles), and between commands the link idles"),
    Scenario("qd1-bbr", ("--delay", "10ms"), "gen --size 64k --time 3",
             "initiator_concurrency", "tcp_cwnd",
             "one 64 KiB READ at a time under BBR: it paces this app-limited flow at its low "
             "measured rate, stretching each READ's data over ~9 ms of the 30 ms cycle",
             cc="bbr"),
)
# What a verdict may be called instead of the expected cause without probe events or host
# samples (a class the pcap alone cannot split, said as unsure): counted right, not confident.
COARSE = {"tcp_sndbuf": {"tcp_window", "tcp_sndbuf_or_app", "tcp_sndbuf_or_pacing"},
          "tcp_cwnd": {"tcp_window"},
          # Without CPU samples a slow target is the target's service time: the right layer,
          # not why.
          "host_cpu_target": {"target_service"},
          # Nor is a workload held at its CPU cap told from one that issues too few commands.
          "host_cpu_initiator": {"initiator_concurrency"}}
STRIP = ("events-", "hoststats-", "decoded", "verdict.json", "report.html", "track", "plots",
         "merged", "clock.json", "trace.json")


def _istrace(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "istrace.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def _without_probes(src: Path, dst: Path) -> None:
    """The capture as a pcap-only user would have it: pcaps, meta.json, tcpdump logs."""
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and not f.name.startswith(STRIP):
            shutil.copy2(f, dst / f.name)


# Less than a whole capture, as users often have it: (tag, files kept, snaplen cut or 0). The
# verdict on these must be right, coarser, or unsure: never a confident wrong cause.
LESS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("ini-pcap", ("initiator.pcap",), 0),   # the initiator's pcap alone: no meta.json
    ("ini-cut96", ("initiator.pcap",), 96),  # and cut to 96 bytes a packet: headers only
)


def _reduced(src: Path, dst: Path, keep: tuple[str, ...], snaplen: int) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for name in keep:
        if snaplen:
            subprocess.run(["editcap", "-s", str(snaplen), str(src / name), str(dst / name)],
                           check=True, capture_output=True, timeout=120)
        else:
            shutil.copy2(src / name, dst / name)


def judge_less(sc: Scenario, d: Path, out: Path) -> dict[str, Any]:
    """The verdict on each LESS reduction of capture `d` (columns <tag>_* of scenarios.csv)."""
    row: dict[str, Any] = {}
    for tag, keep, snaplen in LESS:
        dd = out / f"{sc.name}-{tag}"
        _reduced(d, dd, keep, snaplen)
        try:
            x = _verdict(dd)
        except RuntimeError as exc:
            row.update({f"{tag}_primary": "report failed", f"{tag}_error": str(exc)[-300:],
                        f"{tag}_ok": False})
            continue
        p, unsure = x["primary"]["cause"], bool(x.get("unsure"))
        row.update({f"{tag}_primary": p, f"{tag}_share": x["primary"]["share"],
                    f"{tag}_unsure": unsure,
                    f"{tag}_ok": p == sc.primary or p in COARSE.get(sc.primary, set()) or unsure})
    return row


def _verdict(d: Path) -> dict[str, Any]:
    r = _istrace("report", str(d))
    if r.returncode != 0:
        raise RuntimeError(f"istrace report {d}: {r.stderr.strip()[-500:]}")
    return json.loads((d / layout.VERDICT).read_text())


def _capture(sc: Scenario, testbed: tuple[str, ...], workload: str, d: Path,
             name: str) -> subprocess.CompletedProcess[str]:
    shutil.rmtree(d, ignore_errors=True)
    return _istrace("capture", "--name", name, "--cc", sc.cc, *testbed, "--workload",
                    workload, "--out", str(d), "--timeout", "120")


def gen_MBps(d: Path) -> float | None:
    """The workload's own throughput: istrace-gen's summary line in workload.stderr."""
    try:
        text = (d / "workload.stderr").read_text(errors="replace")
    except OSError:
        return None
    m = re.findall(r"^summary \(iscsi\): .* = ([0-9.]+) MB/s", text, re.M)
    return float(m[-1]) if m else None


def _fill(template: str, value: int | None) -> str | None:
    """The scenario's change with the advice's setting in place of `{value}`; None when the
    template wants one and the advice names none."""
    if "{value}" not in template:
        return template
    return None if value is None else template.replace("{value}", str(int(value)))


def check_help(sc: Scenario, v: dict[str, Any], out: Path, name: str) -> dict[str, Any]:
    """Run the change the verdict advises for the scenario's cause and measure the gain
    against the prediction (columns help_* of scenarios.csv)."""
    if sc.help_testbed is None and sc.help_workload is None:
        return {}
    advice = [h for h in v.get("help") or [] if h.get("cause") == sc.primary]
    row: dict[str, Any] = {"help_advice": advice[0]["change"] if advice else "",
                           "help_model": (advice[0].get("model") or "") if advice else "",
                           "help_predicted_MBps": advice[0].get("predicted_MBps")
                           if advice else None}
    value = advice[0].get("value") if advice else None
    tb = [_fill(a, value) for a in (sc.help_testbed or sc.testbed)]
    wl = _fill(sc.help_workload or sc.workload, value)
    if wl is None or any(a is None for a in tb):
        row["help_status"] = "the advice names no setting to apply"
        return row
    testbed = tuple(a for a in tb if a is not None)
    row["help_run"] = " ".join((*testbed, "--workload", repr(wl)))
    d = out / f"{sc.name}-helped"
    r = _capture(sc, testbed, wl, d, name)
    if r.returncode != 0:
        row.update(help_status="capture failed", help_error=r.stderr.strip()[-300:])
        return row
    row["help_status"] = "ok"
    row["help_measured_MBps"] = gen_MBps(d)
    return row


def run_one(sc: Scenario, out: Path, name: str = "sc", helped: bool = True) -> dict[str, Any]:
    """Capture and judge one scenario (and, with `helped`, run the advised change); a row of
    scenarios.csv."""
    d = out / sc.name
    t0 = time.monotonic()
    r = _capture(sc, sc.testbed, sc.workload, d, name)
    row: dict[str, Any] = {"name": sc.name, "expected_primary": sc.primary,
                           "expected_secondary": sc.secondary or "", "why": sc.why}
    if r.returncode != 0:
        row.update(status="capture failed", error=r.stderr.strip()[-300:])
        return row
    v = _verdict(d)
    bare = out / f"{sc.name}-noprobes"
    _without_probes(d, bare)
    w = _verdict(bare)
    ev = v.get("evidence") or {}
    row.update(
        status="ok", seconds=round(time.monotonic() - t0, 1),
        throughput_MBps=ev.get("throughput_MBps"), gen_MBps=gen_MBps(d),
        given_primary=v["primary"]["cause"], given_share=v["primary"]["share"],
        given_secondary=" ".join(s["cause"] for s in v.get("secondary") or []),
        unsure=bool(v.get("unsure")), text=v.get("text", ""),
        shares=json.dumps(v.get("shares") or {}),
        noprobes_primary=w["primary"]["cause"], noprobes_share=w["primary"]["share"],
        noprobes_unsure=bool(w.get("unsure")))
    row["right"] = row["given_primary"] == sc.primary
    row["secondary_right"] = (not sc.secondary) or sc.secondary in row["given_secondary"].split()
    row["noprobes_right"] = row["noprobes_primary"] == sc.primary
    row["noprobes_coarse"] = row["noprobes_primary"] in COARSE.get(sc.primary, set())
    row.update(judge_less(sc, d, out))
    if helped:
        row.update(check_help(sc, v, out, name))
        now, pred, got = row["gen_MBps"], row.get("help_predicted_MBps"), \
            row.get("help_measured_MBps")
        if now and got:
            row["help_measured_gain"] = round(got / now, 2)
        if now and pred:
            row["help_predicted_gain"] = round(pred / now, 2)
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def run_suite(out: Path, only: list[str] | None = None,
              helped: bool = True) -> list[dict[str, Any]]:
    """Every scenario (or those named in `only`), in order; scenarios.csv in `out`. With
    `helped`, the scenarios that name a change also run it (a second capture each)."""
    out.mkdir(parents=True, exist_ok=True)
    known = {s.name for s in SCENARIOS}
    unknown = sorted(set(only or []) - known)
    if unknown:
        raise ValueError(f"no scenario {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    todo = [s for s in SCENARIOS if not only or s.name in only]
    rows = []
    t_all = time.monotonic()
    for i, sc in enumerate(todo, 1):
        print(f"scenarios: [{i}/{len(todo)}] {sc.name}: {sc.why}", file=sys.stderr, flush=True)
        row = run_one(sc, out, helped=helped)
        rows.append(row)
        mark = "ok" if row.get("right") else "WRONG"
        print(f"scenarios:   expected {sc.primary}, given {row.get('given_primary')} "
              f"({mark}); without probes {row.get('noprobes_primary')}; "
              f"{row.get('gen_MBps')} MB/s; {row.get('seconds')} s"
              + (f"  [{row.get('status')}]" if row.get("status") != "ok" else ""),
              file=sys.stderr, flush=True)
        if row.get("help_status"):
            print(f"scenarios:   advice: {row.get('help_advice')}: predicted "
                  f"{row.get('help_predicted_MBps')} MB/s, measured "
                  f"{row.get('help_measured_MBps')} MB/s ({row.get('help_status')})",
                  file=sys.stderr, flush=True)
        (out / "scenarios.csv").write_text(_csv(rows))
    print(f"scenarios: {len(todo)} in {time.monotonic() - t_all:.0f} s", file=sys.stderr,
          flush=True)
    return rows


def _csv(rows: list[dict[str, Any]]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_csv(index=False)


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of docs/verdict-scenarios.md."""
    def pct(x: Any) -> str:
        return f"{float(x) * 100:.0f}%" if isinstance(x, int | float) else "-"

    lines = ["| scenario | fixed cause | verdict with probes | right | without probes | right |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        exp = r["expected_primary"] + (f" + {r['expected_secondary']}"
                                       if r.get("expected_secondary") else "")
        got = (f"{r.get('given_primary')} {pct(r.get('given_share'))}"
               + (f" + {r['given_secondary']}" if r.get("given_secondary") else "")
               + (" (unsure)" if r.get("unsure") else ""))
        bare = (f"{r.get('noprobes_primary')} {pct(r.get('noprobes_share'))}"
                + (" (unsure)" if r.get("noprobes_unsure") else ""))
        ok = "yes" if r.get("right") and r.get("secondary_right") else (
            "primary only" if r.get("right") else "no")
        ok2 = "yes" if r.get("noprobes_right") else ("coarser" if r.get("noprobes_coarse")
                                                      else "no")
        lines.append(f"| {r['name']} | {exp} | {got} | {ok} | {bare} | {ok2} |")
    n = len(rows)
    right = sum(bool(r.get("right")) for r in rows)
    bare_right = sum(bool(r.get("noprobes_right")) for r in rows)
    lines += ["", f"Primary right with probes: {right}/{n} ({right / max(n, 1) * 100:.0f}%); "
              f"without probes: {bare_right}/{n} ({bare_right / max(n, 1) * 100:.0f}%)."]
    lines += ["", "With less data (" + "; ".join(
        f"{tag}: {', '.join(keep)}" + (f" cut to {snap} bytes" if snap else "") + ", no meta.json"
        for tag, keep, snap in LESS) + "): right, coarser, or unsure, never confidently wrong:",
        "", "| scenario | " + " | ".join(tag for tag, _, _ in LESS) + " |",
        "| --- |" + " --- |" * len(LESS)]
    for r in rows:
        cells = []
        for tag, _, _ in LESS:
            p = r.get(f"{tag}_primary")
            mark = ("right" if p == r["expected_primary"] else "unsure" if r.get(f"{tag}_unsure")
                    else "coarser" if r.get(f"{tag}_ok") else "WRONG")
            cells.append(f"{p} {pct(r.get(f'{tag}_share'))} ({mark})" if p else "-")
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    helped = [r for r in rows if r.get("help_status")]
    if helped:
        lines += ["", "What would help, run and measured (MB/s as istrace-gen reports):", "",
                  "| scenario | advice | model | now | predicted | measured |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in helped:
            def mb(x: Any) -> str:
                return f"{float(x):.1f}" if isinstance(x, int | float) and x == x else "-"
            lines.append(f"| {r['name']} | {r.get('help_advice')} | {r.get('help_model')} | "
                         f"{mb(r.get('gen_MBps'))} | {mb(r.get('help_predicted_MBps'))} | "
                         f"{mb(r.get('help_measured_MBps'))} |")
    return "\n".join(lines)


BEGIN, END = "<!-- scenarios table: begin -->", "<!-- scenarios table: end -->"


def write_table(path: Path, text: str) -> None:
    """The table into `path`: between the BEGIN/END markers of an existing file (its prose
    stays), else as the whole file."""
    old = path.read_text() if path.is_file() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        path.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}")
    else:
        path.write_text(f"{BEGIN}\n{text}\n{END}\n")


def run(out: Path, quick: bool, time_s: float | None, only: list[str] | None = None,
        table_path: Path | None = None) -> int:
    """`istrace reproduce scenarios`: every scenario (or `only` those), scenarios.csv and
    verdict-scenarios.md in `out` (and at `table_path`); --quick skips the "what would
    help" runs. Each scenario's length is part of its definition (time_s is not used)."""
    del time_s
    rows = run_suite(out, only, helped=not quick)
    (out / "verdict-scenarios.md").write_text(table(rows) + "\n")
    if table_path is not None:
        write_table(table_path, table(rows))
    print(table(rows))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


def finish(out: Path) -> int:
    """Print the table of an earlier run (--plot-only)."""
    import pandas as pd

    csv = out / "scenarios.csv"
    if not csv.is_file():
        print(f"istrace reproduce scenarios: no {csv}", file=sys.stderr)
        return 1
    # a CSV's column names are strings
    rows = cast(list[dict[str, Any]], pd.read_csv(csv, keep_default_na=False).to_dict("records"))
    print(table(rows))
    return 0

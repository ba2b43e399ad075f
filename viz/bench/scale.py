"""Benchmark: `istrace merge` + `istrace report` on a full-rate capture; pcap MB/s and peak RSS.

    python3 viz/bench/scale.py DIR                  # an existing capture directory
    python3 viz/bench/scale.py --capture 10 DIR     # capture 10 s at full rate into DIR first
    python3 viz/bench/scale.py --report-only DIR    # istrace report alone, on DIR's decoded
                                                    # and merged tables as they are
    options: --cold (drop the page cache first: the pcaps come from disk), --peer (time
    tshark reading the same pcaps, `tshark -r PCAP -q -z io,stat,0`, as the ratio's peer),
    --repeat N (the one command N times: its median, fastest and slowest)

`--report-only` is how memory against capture length is measured (10 s and 60 s captures:
docs/measurements/report.md), and works where the pcaps were deleted once decoded.

Everything merge and report derive is removed before each run (decoded/, merged.*, track*,
plots/, report.html, trace.json, verdict.json), so each step does its whole work: first the
decoder on both pcaps at once (what merge would run itself, timed apart), then merge, then
report; then, from the raw capture again, `istrace report` alone (it merges first, and the
merge decodes: the whole analysis in one command and one process). Times are wall clock,
RSS the kernel's peak (GNU time -v: the largest of the process and each of its children;
the decoder maps the pcap and hands its pages back as it goes, so its RSS is a window of the
file). Prints one table row per step and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from istrace.capture import layout  # noqa: E402
from istrace.capture.decoded import segment_count  # noqa: E402
from istrace.system import paths  # noqa: E402

# what istrace report writes; merge and decode write the rest
REPORTED = ["track.csv", "track.parquet", "track_states.csv", "track_events.csv",
            "track_states.parquet", "track_events.parquet", "plots", "report.html",
            "trace.json", "verdict.json", "verdict.parquet"]
DERIVED = ["decoded", "merged.parquet", "merged.csv", "clock.json", "commands", *REPORTED]


def timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MB, stderr) of one command under GNU time; its CPU seconds
    (user + system, children included) are cpu_seconds(stderr)."""
    r = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True,
                       check=False)
    if r.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    assert wall and rss, r.stderr[-1000:]
    secs = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    return secs, int(rss.group(1)) / 1024, r.stderr


def cpu_seconds(stderr: str) -> float:
    """User + system seconds of a command timed by `timed`, its children included: on a
    shared machine whose speed changes from minute to minute, the code's own cost (the wall
    clock waits for CPUs other jobs hold)."""
    found = re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", stderr)
    return sum(float(x) for x in found)


def clean(d: Path, names: list[str]) -> None:
    for name in names:
        p = d / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--capture", type=float, metavar="SECONDS",
                    help="make the capture first: istrace-gen 4 MiB reads, queue depth 8")
    ap.add_argument("--cold", action="store_true", help="drop the page cache before merging")
    ap.add_argument("--peer", action="store_true", help="time tshark on the same pcaps")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="time the one command N times (median, fastest, slowest)")
    ap.add_argument("--report-only", action="store_true",
                    help="time istrace report alone on the decoded and merged tables there")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat: at least 1")
    d: Path = a.dir
    if a.report_only:
        return report_only(d)
    if a.capture:
        subprocess.run(["istrace", "capture", "--lun-mb", "512", "--out", str(d), "--replace",
                        "--workload",
                        f"gen --size 4M --queue-depth 8 --time {a.capture:g}"], check=True)
    pcaps = [p for p in (d / "initiator.pcap", d / "target.pcap") if p.is_file()]
    if not pcaps:
        sys.exit(f"{d}: no initiator.pcap / target.pcap")
    mb = sum(p.stat().st_size for p in pcaps) / 1e6
    clean(d, DERIVED)
    if a.cold:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    else:  # warm means warm: the pcaps read once, untimed (else the figure is the cache's luck)
        for p in pcaps:
            with open(p, "rb") as f:
                while f.read(8 << 20):
                    pass
    rows = []
    # the decoder on both pcaps at once, as merge runs it
    dec = [shlex.join([str(paths.binary("istrace-decode")), "-q", "--csv-dir",
                       str(layout.decoded_dir(d, p.stem)), str(p)]) for p in pcaps]
    both = " ".join(f"{c} & p{i}=$!;" for i, c in enumerate(dec)) + " " + " && ".join(
        f"wait $p{i}" for i in range(len(dec)))
    steps = [("decode (" + " + ".join(p.stem for p in pcaps) + ")", ["sh", "-c", both])]
    for p in pcaps:
        layout.decoded_dir(d, p.stem).mkdir(parents=True, exist_ok=True)
    for step, argv in steps + [("merge", ["istrace", "merge", str(d)]),
                               ("report", ["istrace", "report", str(d)])]:
        secs, rss, err = timed(argv)
        cpu = cpu_seconds(err)
        rows.append({"step": step, "seconds": round(secs, 2), "cpu_seconds": round(cpu, 2),
                     "peak_rss_mb": round(rss),
                     "pcap_mb_per_s": round(mb / secs, 1)})
        print(f"{step:16s} {secs:7.1f} s  {mb / secs:7.1f} MB/s of pcap  peak RSS {rss:7.0f} MB"
              f"  CPU {cpu:6.1f} s",
              flush=True)
    total = sum(r["seconds"] for r in rows)
    cpu_total = sum(r["cpu_seconds"] for r in rows)
    peak = max(r["peak_rss_mb"] for r in rows)
    print(f"{'all':16s} {total:7.1f} s  {mb / total:7.1f} MB/s of pcap  peak RSS {peak:7.0f} MB"
          f" of any step  CPU {cpu_total:6.1f} s  ({mb:.0f} MB of pcap)")
    out = {"pcap_mb": round(mb), "steps": rows, "seconds": round(total, 2),
           "cpu_seconds": round(cpu_total, 2),
           "pcap_mb_per_s": round(mb / total, 1), "peak_rss_mb": peak, "cold": a.cold}
    # the same from the raw capture in one command: istrace report merges first (and the
    # merge decodes), in one process; --repeat times: this machine's speed moves by a fifth
    # from minute to minute, one run is a draw, the median of several is the figure
    runs = []
    for i in range(a.repeat):
        clean(d, DERIVED)
        if a.cold:
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
        secs, rss, err = timed(["istrace", "report", str(d)])
        cpu = cpu_seconds(err)
        runs.append({"seconds": round(secs, 2), "cpu_seconds": round(cpu, 2),
                     "peak_rss_mb": round(rss), "pcap_mb_per_s": round(mb / secs, 1)})
        print(f"{'istrace report':16s} {secs:7.1f} s  {mb / secs:7.1f} MB/s of pcap  peak RSS "
              f"{rss:7.0f} MB  CPU {cpu:6.1f} s  (one command on the raw capture: decode, "
              f"merge, report; run {i + 1} of {a.repeat})", flush=True)
    med = statistics.median(r["seconds"] for r in runs)
    out["one_command"] = {**runs[0], "runs": runs, "median_seconds": med,
                          "median_pcap_mb_per_s": round(mb / med, 1)}
    if a.repeat > 1:
        secs = sorted(r["seconds"] for r in runs)
        print(f"{'istrace report':16s} median {med:.2f} s: {mb / med:.1f} MB/s of pcap "
              f"(fastest {secs[0]:.2f} s, slowest {secs[-1]:.2f} s, {a.repeat} runs)")
    if a.peer:
        secs = 0.0
        for p in pcaps:
            s, _, _ = timed(["tshark", "-r", str(p), "-q", "-z", "io,stat,0"])
            secs += s
        out["tshark_seconds"] = round(secs, 2)
        print(f"{'tshark':16s} {secs:7.1f} s  {mb / secs:7.1f} MB/s of pcap (io,stat over both "
              f"pcaps): istrace merge + report takes {total / secs:.2f}x tshark's time")
    print(json.dumps(out))
    return 0


def report_only(d: Path) -> int:
    """istrace report on what merge and decode left in `d`: seconds, peak RSS, segments."""
    found = [next((b / layout.SEGMENTS for b in layout.decoded_dirs(d, h)
                   if (b / layout.SEGMENTS).is_file()), None) for h in layout.HOSTS]
    bins = [b for b in found if b is not None]
    if not bins or not (d / layout.MERGED).is_file():
        sys.exit(f"{d}: run istrace merge first (no decoded segments.bin or merged.parquet)")
    segments = sum(segment_count(b) for b in bins)
    clean(d, REPORTED)
    secs, rss, _ = timed(["istrace", "report", str(d)])
    print(f"report {secs:7.1f} s  peak RSS {rss:7.0f} MB  {segments / 1e6:.2f} M segments "
          f"({rss / (segments / 1e6):.0f} MB per million)")
    print(json.dumps({"segments": segments, "seconds": round(secs, 2),
                      "peak_rss_mb": round(rss)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

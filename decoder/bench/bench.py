"""Decoder benchmark: istrace-decode vs tshark on a generated capture of large iSCSI reads.

    python3 decoder/bench/bench.py [--out DIR] [--size-mb 1100] [--prefix-mb 200]
                                   [--mrdsl 262144] [--tshark-full] [--keep]

Generates (gen_reads.c) a >= 1 GB pcap of READ(16)s of 1-4 MiB answered by Data-In PDUs of
--mrdsl bytes in 1448-byte TCP segments, plus a prefix of it (same seed, smaller size). Times
istrace-decode (--csv-dir and --summary) on both and tshark's iSCSI dissector on the prefix
(or the whole file with --tshark-full), all from the page cache, one process at a time.
Prints MB/s of each and the ratio, and checks that istrace found exactly the PDUs and commands
the generator wrote. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DECODER = HERE.parent / "istrace-decode"
TSHARK_FIELDS = ["iscsi.opcode", "iscsi.initiatortasktag", "iscsi.cmdsn", "iscsi.statsn",
                 "iscsi.datasegmentlength", "iscsi.datasn", "iscsi.bufferOffset",
                 "scsi_sbc.opcode", "iscsi.scsiresponse.status"]


@dataclass
class Run:
    name: str
    size: int
    wall: float
    cpu: float
    rss_mb: float

    @property
    def mbps(self) -> float:
        return self.size / 1e6 / self.wall

    @property
    def cpu_mbps(self) -> float:
        """Throughput per CPU second: fairer than wall time on a loaded, shared machine."""
        return self.size / 1e6 / max(self.cpu, 1e-3)


def build_generator(out: Path) -> Path:
    exe = out / "gen-reads"
    src = HERE / "gen_reads.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-O2", "-o", str(exe), str(src)],
                       check=True)
    return exe


def generate(exe: Path, path: Path, size_mb: int, mrdsl: int) -> dict[str, str]:
    print(f"generating {path} ({size_mb} MB, MaxRecvDataSegmentLength {mrdsl}) ...",
          flush=True)
    r = subprocess.run([str(exe), "--out", str(path), "--size-mb", str(size_mb), "--mrdsl",
                        str(mrdsl)], check=True, capture_output=True, text=True)
    return dict(line.split("=", 1) for line in r.stdout.split())


def warm(path: Path) -> None:
    """Read the file once so every timed run starts from the page cache."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def timed(name: str, cmd: list[str], size: int, stdout: int | None = subprocess.DEVNULL
          ) -> tuple[Run, subprocess.CompletedProcess[bytes]]:
    print(f"  {name}: {' '.join(cmd)}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"bench: {name} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run = Run(name, size, wall, cpu, after.ru_maxrss / 1024)
    print(f"    {run.wall:7.2f} s wall, {run.cpu:7.2f} s cpu, {run.mbps:8.1f} MB/s wall, "
          f"{run.cpu_mbps:8.1f} MB/s per cpu-s", flush=True)
    return run, r


def count_rows(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f) - 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/istrace-bench"))
    ap.add_argument("--size-mb", type=int, default=1100)
    ap.add_argument("--prefix-mb", type=int, default=200)
    ap.add_argument("--mrdsl", type=int, default=262144)
    ap.add_argument("--decoder", type=Path, default=DECODER)
    ap.add_argument("--tshark-full", action="store_true", help="tshark on the whole file too")
    ap.add_argument("--keep", action="store_true", help="keep the generated captures")
    a = ap.parse_args(argv)
    if not a.decoder.exists():
        sys.exit(f"bench: {a.decoder} not built (run make)")
    if not shutil.which("tshark"):
        sys.exit("bench: tshark not installed")
    a.out.mkdir(parents=True, exist_ok=True)
    exe = build_generator(a.out)
    full = a.out / f"reads-{a.size_mb}M-{a.mrdsl}.pcap"
    prefix = a.out / f"reads-{a.prefix_mb}M-{a.mrdsl}.pcap"
    meta_full = generate(exe, full, a.size_mb, a.mrdsl)
    meta_prefix = generate(exe, prefix, a.prefix_mb, a.mrdsl)
    runs: list[Run] = []
    problems: list[str] = []
    for label, path, meta in (("full", full, meta_full), ("prefix", prefix, meta_prefix)):
        size = path.stat().st_size
        print(f"{label}: {size / 1e6:.0f} MB, {meta['packets']} packets, {meta['pdus']} PDUs, "
              f"{meta['commands']} commands", flush=True)
        warm(path)
        csv_dir = a.out / f"csv-{label}"
        csv_dir.mkdir(exist_ok=True)
        run, _ = timed(f"istrace --csv-dir ({label})",
                       [str(a.decoder), "-q", "--csv-dir", str(csv_dir), str(path)], size)
        runs.append(run)
        pdus, cmds = count_rows(csv_dir / "pdus.csv"), count_rows(csv_dir / "commands.csv")
        if pdus != int(meta["pdus"]) or cmds != int(meta["commands"]):
            problems.append(f"{label}: istrace found {pdus} PDUs / {cmds} commands, generator "
                            f"wrote {meta['pdus']} / {meta['commands']}")
        run, r = timed(f"istrace --summary ({label})",
                       [str(a.decoder), "--summary", str(path)], size, stdout=subprocess.PIPE)
        runs.append(run)
        if label == "full":
            print("\n".join("    | " + x for x in r.stdout.decode().splitlines()[:40]))
        if label == "prefix" or a.tshark_full:
            warm(path)
            lines = a.out / f"tshark-{label}.tsv"
            cmd = ["tshark", "-r", str(path), "-o", "tcp.desegment_tcp_streams:TRUE",
                   "-o", "iscsi.desegment_iscsi_messages:TRUE", "-Y", "iscsi", "-T", "fields"]
            for fld in TSHARK_FIELDS:
                cmd += ["-e", fld]
            with open(lines, "wb") as f:
                run, _ = timed(f"tshark -Y iscsi -T fields ({label})", cmd, size,
                               stdout=f.fileno())
            runs.append(run)
            print(f"    tshark printed {count_rows(lines) + 1} frame lines", flush=True)
    by = {r.name: r for r in runs}
    ts = by.get("tshark -Y iscsi -T fields (prefix)")
    print("\nresult (MB = 10^6 bytes of capture file, page cache warm):")
    print(f"  {'run':<36} {'MB':>7} {'wall s':>8} {'cpu s':>8} {'MB/s':>9} {'x tshark':>9}"
          f" {'MB/cpu-s':>9} {'x tshark':>9}")
    for r in runs:
        ratio = cratio = ""
        if ts and not r.name.startswith("tshark"):
            ratio, cratio = f"{r.mbps / ts.mbps:9.1f}", f"{r.cpu_mbps / ts.cpu_mbps:9.1f}"
        print(f"  {r.name:<36} {r.size / 1e6:7.0f} {r.wall:8.2f} {r.cpu:8.2f} {r.mbps:9.1f} "
              f"{ratio:>9} {r.cpu_mbps:9.1f} {cratio:>9}")
    for p in problems:
        print(f"  PROBLEM: {p}")
    if not a.keep:
        for p in (full, prefix):
            p.unlink(missing_ok=True)
    load = os.getloadavg()
    print(f"cpu: {os.cpu_count()} cores, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f};"
          f" decoder {a.decoder}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

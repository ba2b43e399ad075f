"""Experiments on the full-kernel VM testbed (issue 10), each one capture directory:

- `split`: one 2 MB O_DIRECT read() through the kernel initiator, to see how the block layer cut
  it (max_sectors_kb) into block requests and SCSI commands.
- `readers`: seed 001's parallel 512-byte readers (1..N processes, one synchronous read each),
  swept inside one capture per queue depth so bpftrace compiles once; markers in workload.out
  (REALTIME ns) split the trace into one window per reader count.

    python -m istrace.reproduce.vm_experiments split   --name vm1 --out /tmp/vmx/split \
        --max-sectors-kb 32
    python -m istrace.reproduce.vm_experiments readers --name vm1 --out /tmp/vmx/qd4 --queue-depth 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from istrace.testbed.vm import VmError, VmTestbed, dd_workload

DEFAULT_READERS = (1, 2, 4, 8, 16)


def readers_sweep_workload(readers: tuple[int, ...], runtime_s: float) -> str:
    """Bash for the guest: fio psync randread 512 B at each reader count, with markers."""
    counts = " ".join(str(n) for n in readers)
    return (
        f"for n in {counts}; do "
        f'echo "READERS $n START $(date +%s%N)"; '
        f"fio --name=readers --filename=$DEV --rw=randread --bs=512 --direct=1 "
        f"--ioengine=psync --numjobs=$n --time_based --runtime={runtime_s:g} "
        f"--group_reporting --randseed=1 --output-format=json --output=/dev/shm/fio.json "
        f"|| exit 1; "
        f'echo "READERS $n END $(date +%s%N)"; '
        f"/usr/bin/python3 -c 'import json; j = json.load(open(\"/dev/shm/fio.json\")); "
        f"r = j[\"jobs\"][0][\"read\"]; print(\"READERS_RESULT\", r[\"total_ios\"], "
        f"r[\"iops\"], r[\"clat_ns\"][\"mean\"])'; "
        f"done"
    )


def run_split(tb: VmTestbed, out: Path, max_sectors_kb: int, count: int = 1) -> Path:
    if max_sectors_kb and tb.cfg.max_sectors_kb != max_sectors_kb:
        tb.retune(max_sectors_kb=max_sectors_kb)
    return tb.capture(out, dd_workload(count, "2M"), probes="bpftrace")


def run_readers(tb: VmTestbed, out: Path, queue_depth: int, cmds_max: int,
                readers: tuple[int, ...] = DEFAULT_READERS, runtime_s: float = 4.0) -> Path:
    if (tb.cfg.queue_depth, tb.cfg.cmds_max) != (queue_depth, cmds_max):
        tb.retune(queue_depth=queue_depth, cmds_max=cmds_max)
    return tb.capture(out, readers_sweep_workload(readers, runtime_s), probes="bpftrace",
                      timeout_s=1800)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="vm_experiments", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=("split", "readers"))
    p.add_argument("--name", default="vm")
    p.add_argument("--out", required=True)
    p.add_argument("--max-sectors-kb", type=int, default=0)
    p.add_argument("--count", type=int, default=1, help="2 MB reads, for split")
    p.add_argument("--queue-depth", type=int, default=32)
    p.add_argument("--cmds-max", type=int, default=128)
    p.add_argument("--readers", default=",".join(map(str, DEFAULT_READERS)))
    p.add_argument("--runtime", type=float, default=4.0, help="seconds per reader count")
    a = p.parse_args(argv)
    try:
        tb = VmTestbed.attach(a.name)
        if a.experiment == "split":
            dest = run_split(tb, Path(a.out), a.max_sectors_kb, a.count)
        else:
            readers = tuple(int(x) for x in a.readers.split(","))
            dest = run_readers(tb, Path(a.out), a.queue_depth, a.cmds_max, readers, a.runtime)
    except (VmError, ValueError, OSError) as exc:
        print(f"vm_experiments: {exc}", file=sys.stderr)
        return 1
    print(f"vm_experiments: {a.experiment} capture in {dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

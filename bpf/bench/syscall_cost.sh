#!/usr/bin/env bash
# What the syscall layer costs one system call: a loop of 2 M calls in a namespace of its
# own, without probes and with `istrace-probe --netns NS --layers syscall`, for a call the
# programs trace (read) and one they turn away (getppid), and for read in another namespace
# (a bystander: a task of the host nobody traces); then the programs' own time per run from
# bpf_stats.  usage: bpf/bench/syscall_cost.sh [COUNT]   (root, a build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
N=${1:-2000000} NS=istrace-sccost$$ OTHER=istrace-scother$$ WORK=$(mktemp -d)
PROBE="$ROOT/bpf/istrace-probe" PID=""
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	sysctl -qw kernel.bpf_stats_enabled=0 || true
	ip netns del "$NS" 2>/dev/null || true
	ip netns del "$OTHER" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
cc -O2 -Wall -Wextra -Werror -o "$WORK/loop" "$ROOT/bpf/bench/syscall_loop.c"
ip netns add "$NS"; ip netns add "$OTHER"
loop() { ip netns exec "$NS" "$WORK/loop" "$1" "$N"; }
bystander() { ip netns exec "$OTHER" "$WORK/loop" read "$N" | sed "s/^read/bystander read/"; }
prog_ns() {  # run time and count of the syscall programs, one "name ns count" line each
	bpftool prog show 2>/dev/null | grep -o "name sys_[a-z_]*.*run_time_ns [0-9]* run_cnt [0-9]*" |
		awk '{print $2, $(NF-2), $NF}'
}
echo "no probes:"; loop getppid; loop read; bystander
"$PROBE" --out "$WORK/ev.csv" --netns "$NS" --layers syscall 2>"$WORK/probe.log" & PID=$!
for _ in $(seq 50); do grep -q "streaming to" "$WORK/probe.log" && break; sleep 0.2; done
echo "with the syscall layer:"; loop getppid; loop read; bystander
sysctl -qw kernel.bpf_stats_enabled=1
for call in getppid read bystander; do
	before=$(prog_ns)
	if [ "$call" = bystander ]; then bystander >/dev/null; else loop "$call" >/dev/null; fi
	after=$(prog_ns)
	paste <(echo "$before") <(echo "$after") |
		awk -v c="$call" '$6 > $3 {printf "  %s: %s %.0f ns per run\n", c, $1, ($5-$2)/($6-$3)}'
done
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
tail -1 "$WORK/probe.log"

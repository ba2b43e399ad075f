#!/usr/bin/env bash
# The most one istrace gen process moves on one core, against a target that is never the
# bottleneck (bench/sink_target.c: zeros from one static buffer), beside iperf3 on the same
# path: alternate runs, median (min..max) of each, and gen/iperf3.
#
#   sudo initiator-gen/bench/ceiling.sh [-r REPEATS] [-t SECONDS] [-c "SIZE:QD ..."] [-O]
#                                       [-C CPU] [-n NAME]
#
# gen and the iperf3 client are pinned to CPU (default 0) with taskset; the servers are not
# pinned. gen asks for 16 MiB Data-In PDUs (--mrdsl), which the sink honours. -O leaves
# TSO/GSO/GRO on in the testbed (as bench.sh). Not a test: asserts nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GEN=$ROOT/initiator-gen/istrace-gen
SINK=$ROOT/initiator-gen/bench/sink-target
NAME=genk
REPEATS=5
SECS=4
CASES="4M:8 64k:32"
CPU=0
TESTBED_OPTS=()
while getopts "r:t:c:OC:n:h" opt; do
  case $opt in
    r) REPEATS=$OPTARG ;;
    t) SECS=$OPTARG ;;
    c) CASES=$OPTARG ;;
    O) TESTBED_OPTS=(--offloads) ;;
    C) CPU=$OPTARG ;;
    n) NAME=$OPTARG ;;
    *) sed -n '2,11p' "$0"; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "ceiling.sh: must run as root (network namespaces)" >&2; exit 2; }
make -s -C "$ROOT/initiator-gen" istrace-gen sink-target
command -v iperf3 >/dev/null || { echo "ceiling.sh: iperf3 missing" >&2; exit 2; }

PY=(env PYTHONPATH="$ROOT/scripts:$ROOT/decoder:$ROOT/viz:$ROOT/bpf" python3)
INI=(ip netns exec "ist-$NAME-i" taskset -c "$CPU")
TGT=(ip netns exec "ist-$NAME-t")
TGT_IP=10.77.0.2
SINK_PORT=3270
RAW=$(mktemp /tmp/istrace-ceiling.XXXXXX)
TIMEF=$(mktemp /tmp/istrace-ceiling-time.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && { wait "$p" 2>/dev/null || true; }; done
  "${PY[@]}" -m istrace.cli.main testbed down --name "$NAME" >/dev/null 2>&1 || true
  rm -f "$RAW" "$TIMEF"
}
trap cleanup EXIT

echo "ceiling.sh: testbed $NAME up ..." >&2
"${PY[@]}" -m istrace.cli.main testbed up --name "$NAME" --lun-mb 8 "${TESTBED_OPTS[@]}" >/dev/null
"${TGT[@]}" "$SINK" "$TGT_IP" "$SINK_PORT" &
PIDS+=($!)
"${TGT[@]}" iperf3 -s -B "$TGT_IP" >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5

run_gen() {  # size qd -> "MB/s CPU-s/GB"
  "${INI[@]}" /usr/bin/time -f '%U %S' -o "$TIMEF" "$GEN" --portal "$TGT_IP:$SINK_PORT" \
    --target iqn.2026-12.org.istrace:sink --size "$1" --queue-depth "$2" --time "$SECS" \
    --mrdsl 16776192 --json --quiet 2>/dev/null |
    jq -r '"\(.mb_s) \(.cpu_s_per_gb)"'
}
run_iperf() {  # -> "MB/s CPU-s/GB" (the client's received bytes: -R, the server sends)
  local out by
  out=$("${INI[@]}" /usr/bin/time -f '%U %S' -o "$TIMEF" iperf3 -c "$TGT_IP" -R -t "$SECS" -J)
  by=$(jq '.end.sum_received.bytes' <<<"$out")
  awk -v by="$by" -v s="$(jq '.end.sum_received.seconds' <<<"$out")" \
    '{ printf "%.1f %.4f\n", by / 1e6 / s, ($1 + $2) / (by / 1e9) }' "$TIMEF"
}
for rep in $(seq 1 "$REPEATS"); do
  for c in $CASES; do
    echo "ceiling.sh: repeat $rep/$REPEATS, gen $c and iperf3" >&2
    printf 'gen %s %s\n' "$c" "$(run_gen "${c%%:*}" "${c##*:}")" >>"$RAW"
    printf 'iperf3 %s %s\n' "$c" "$(run_iperf)" >>"$RAW"
  done
done

echo
echo "one istrace gen on CPU $CPU vs iperf3 -R on the same path, $REPEATS x ${SECS}s;" \
  "offloads $([ ${#TESTBED_OPTS[@]} -gt 0 ] && echo on || echo off); load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg)"
awk '
  function med(key,   n, i, j, t, a) {
    n = split(v[key], a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { v[$2, $1, "mbs"] = v[$2, $1, "mbs"] " " $3; v[$2, $1, "cpu"] = v[$2, $1, "cpu"] " " $4; c[$2] = 1 }
  END {
    printf "%-7s %-26s %-26s %-26s %s\n", "case", "gen MB/s", "iperf3 MB/s", "gen CPU s/GB", "gen/iperf3"
    for (k in c) {
      g = med(k SUBSEP "gen" SUBSEP "mbs"); gs = sprintf("%.1f (%.1f..%.1f)", g, lo, hi)
      p = med(k SUBSEP "iperf3" SUBSEP "mbs"); ps = sprintf("%.1f (%.1f..%.1f)", p, lo, hi)
      u = med(k SUBSEP "gen" SUBSEP "cpu"); us = sprintf("%.3f (%.3f..%.3f)", u, lo, hi)
      printf "%-7s %-26s %-26s %-26s %.0f%%\n", k, gs, ps, us, (p > 0 ? 100 * g / p : 0)
    }
  }' "$RAW"

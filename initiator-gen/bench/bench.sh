#!/usr/bin/env bash
# istrace-gen benchmark: istrace gen vs libiscsi's iscsi-perf vs the plain-TCP socket baseline,
# on one testbed (tgtd in a namespace pair), same block size and queue depth, interleaved runs.
#
#   sudo initiator-gen/bench/bench.sh [-r REPEATS] [-t SECONDS] [-c "SIZE:QD ..."] [-T] [-M] [-O]
#                                     [-n TESTBED-NAME (gbnch)] [-l LUN-MiB (256)]
#
# -T tunes the target for big commands (tgtd MaxBurstLength and MaxRecvDataSegmentLength
# 16776192, istrace gen --mrdsl 16776192) so a 4 MiB READ travels as one Data-In PDU;
# iscsi-perf negotiates its own (smaller) values either way.
# -M starts tgtd with glibc's malloc told to keep big buffers (GLIBC_TUNABLES mmap_threshold
# 64 MiB, trim_threshold 256 MiB): tgtd allocates each command's data buffer afresh, and
# by default a buffer of 128 KiB or more is a new mmap() (page faults, zeroing, munmap with
# its TLB shootdown) per command. -O leaves TSO/GSO/GRO on in the testbed (fewer, bigger
# packets for every tool alike). Every tool of a run talks to the same target either way.
# Prints one row per case: the median MB/s (10^6 bytes/s) of each tool, gen/iscsi-perf,
# gen/socket and gen/sock-file, the spread (max-min)/median of the repeats (the noise of a
# shared machine), and CPU seconds per GB of the client and of the server (tgtd or the socket
# server). Not a test: it asserts nothing; docs/gen.md has figures.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GEN=$ROOT/initiator-gen/istrace-gen
NAME=gbnch            # testbed name (its tgtd control port stays below 32767)
PORT=5299             # socket baseline port on the target side (from memory)
FPORT=5300            # socket baseline that reads the LUN file, as tgtd does
REPEATS=3
SECS=4
CASES="4M:1 4M:4 64k:8 4k:8"
TUNE=0
GEN_EXTRA=()
MALLOC=0
TESTBED_OPTS=()
TGTD_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=268435456
LUN_MB=256
while getopts "r:t:c:TMOn:l:h" opt; do
  case $opt in
    r) REPEATS=$OPTARG ;;
    t) SECS=$OPTARG ;;
    c) CASES=$OPTARG ;;
    T) TUNE=1; GEN_EXTRA=(--mrdsl 16776192) ;;
    M) MALLOC=1 ;;
    O) TESTBED_OPTS=(--offloads) ;;
    n) NAME=$OPTARG ;;
    l) LUN_MB=$OPTARG ;;
    *) sed -n '2,19p' "$0"; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench: must run as root (network namespaces)" >&2; exit 2; }
[ -x "$GEN" ] || make -C "$ROOT/initiator-gen" >/dev/null
command -v iscsi-perf >/dev/null || { echo "bench: iscsi-perf (libiscsi-bin) missing" >&2; exit 2; }

ISTRACE=(env PYTHONPATH="$ROOT/scripts:$ROOT/decoder:$ROOT/viz:$ROOT/bpf" python3 -m istrace.cli.main)
INI=(ip netns exec "ist-$NAME-i")
TGT=(ip netns exec "ist-$NAME-t")
TGT_IP=10.77.0.2
PORTAL=$TGT_IP:3260
IQN=iqn.2026-11.org.istrace:$NAME
RAW=$(mktemp /tmp/istrace-bench.XXXXXX)
SRV_PID=
FSRV_PID=

cleanup() {
  for p in $SRV_PID $FSRV_PID; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
  "${ISTRACE[@]}" testbed down --name "$NAME" >/dev/null 2>&1 || true
  rm -f "$RAW" "${CPUF:-}"
}
trap cleanup EXIT

echo "bench: testbed $NAME up ($LUN_MB MiB LUN) ..." >&2
if [ "$MALLOC" = 1 ]; then
  # tgtd inherits the environment of `testbed up`; checked below, not assumed
  GLIBC_TUNABLES=$TGTD_TUNABLES "${ISTRACE[@]}" testbed up --name "$NAME" --lun-mb "$LUN_MB" \
    "${TESTBED_OPTS[@]}" >/dev/null
else
  "${ISTRACE[@]}" testbed up --name "$NAME" --lun-mb "$LUN_MB" "${TESTBED_OPTS[@]}" >/dev/null
fi
TGTD_PID=$(PYTHONPATH="$ROOT/scripts:$ROOT/decoder:$ROOT/viz:$ROOT/bpf" python3 -c "from istrace.testbed import state as s
print([p['pid'] for p in s.load('$NAME')['pids'] if p['what'] == 'tgtd'][0])")
if [ "$MALLOC" = 1 ]; then
  # (glibc cuts the variable at its ':' once parsed: look for the first tunable)
  tr '\0' '\n' <"/proc/$TGTD_PID/environ" | grep -qx "GLIBC_TUNABLES=${TGTD_TUNABLES%%:*}" ||
    { echo "bench: tgtd ($TGTD_PID) did not get GLIBC_TUNABLES" >&2; exit 1; }
fi
"${TGT[@]}" "$GEN" --serve "$TGT_IP:$PORT" 2>/dev/null &
SRV_PID=$!
"${TGT[@]}" "$GEN" --serve "$TGT_IP:$FPORT" --serve-file "/run/istrace/$NAME/lun1.img" \
  2>/dev/null &
FSRV_PID=$!
if [ "$TUNE" = 1 ]; then
  port=$(PYTHONPATH="$ROOT/scripts:$ROOT/decoder:$ROOT/viz:$ROOT/bpf" python3 -c \
    "from istrace.testbed import state as s; print(s.load('$NAME')['control_port'])")
  for key in MaxBurstLength MaxRecvDataSegmentLength; do
    tgtadm -C "$port" --lld iscsi --op update --mode target --tid 1 --name "$key" \
      --value 16776192
  done
fi
sleep 0.5

bytes_of() {  # 4M -> 4194304
  local n=${1%[kKmMgG]} u=${1: -1}
  case $u in k|K) echo $((n << 10)) ;; m|M) echo $((n << 20)) ;; g|G) echo $((n << 30)) ;;
    *) echo "$1" ;; esac
}

CPUF=$(mktemp /tmp/istrace-bench-cpu.XXXXXX)
# Each runner prints "MB/s CPU-seconds-per-GB" of the initiator side (user + system time of
# the client process): a figure the load of other users disturbs much less than MB/s.
cpu_per_gb() {  # bytes -> s/GB from the /usr/bin/time output in $CPUF
  awk -v b="$1" '{ c = $1 + $2 } END { printf "%.3f\n", (b > 0 ? c / (b / 1e9) : 0) }' "$CPUF"
}
run_gen() {  # size qd
  local out
  out=$("${INI[@]}" /usr/bin/time -f '%U %S' -o "$CPUF" "$GEN" --portal "$PORTAL" \
    --target "$IQN" --size "$1" --queue-depth "$2" --time "$SECS" --json --quiet \
    "${GEN_EXTRA[@]}" 2>/dev/null)
  echo "$(jq -r .mb_s <<<"$out") $(cpu_per_gb "$(jq -r .bytes <<<"$out")") $(jq -r .bytes <<<"$out")"
}
run_perf() {  # size qd (MB/s from its average IOPS x transfer size)
  local bytes blocks iops
  bytes=$(bytes_of "$1"); blocks=$((bytes / 512))
  iops=$("${INI[@]}" /usr/bin/time -f '%U %S' -o "$CPUF" timeout $((SECS + 20)) \
    iscsi-perf -m "$2" -b "$blocks" -t "$SECS" "iscsi://$PORTAL/$IQN/1" | tr '\r' '\n' |
    sed -n 's/^iops average \([0-9]*\).*/\1/p' | tail -1)
  iops=${iops:-0}
  local total
  total=$(awk -v i="$iops" -v b="$bytes" -v s="$SECS" 'BEGIN { print i * b * s }')
  echo "$(awk -v i="$iops" -v b="$bytes" 'BEGIN { printf "%.3f", i * b / 1e6 }')" \
    "$(cpu_per_gb "$total") $total"
}
run_sock() {  # port size qd [--stream]
  local port=$1 out; shift
  out=$("${INI[@]}" /usr/bin/time -f '%U %S' -o "$CPUF" "$GEN" --socket "$TGT_IP:$port" \
    --size "$1" --queue-depth "$2" --time "$SECS" --json --quiet ${3:-} 2>/dev/null)
  echo "$(jq -r .mb_s <<<"$out") $(cpu_per_gb "$(jq -r .bytes <<<"$out")") $(jq -r .bytes <<<"$out")"
}

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# The server side's CPU too (tgtd for both initiators, the socket servers for the baselines):
# on two shared cores the target's cost per byte is what bounds the throughput.
measure() {  # tool server-pid runner args... -> one raw line (uses $size and $qd)
  local tool=$1 pid=$2 a b mbs cpu bytes; shift 2
  a=$(ticks "$pid")
  read -r mbs cpu bytes <<<"$("$@")"
  b=$(ticks "$pid")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$size" "$qd" "$tool" "${mbs:-0}" "${cpu:-0}" \
    "$(awk -v t=$((b - a)) -v by="${bytes:-0}" -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "%.3f", (by > 0 ? t / hz / (by / 1e9) : 0) }')" >>"$RAW"
}
for rep in $(seq 1 "$REPEATS"); do
  for c in $CASES; do
    size=${c%%:*} qd=${c##*:}
    echo "bench: repeat $rep/$REPEATS, $size x qd $qd" >&2
    # interleaved, so a burst of load from other users hits every tool alike
    measure gen "$TGTD_PID" run_gen "$size" "$qd"
    measure perf "$TGTD_PID" run_perf "$size" "$qd"
    measure sock "$SRV_PID" run_sock $PORT "$size" "$qd"
    measure fsock "$FSRV_PID" run_sock $FPORT "$size" "$qd"
    measure stream "$SRV_PID" run_sock $PORT "$size" "$qd" --stream
  done
done

echo
echo "istrace-gen benchmark: median of $REPEATS runs of ${SECS}s each, MB/s = 10^6 bytes/s;"
yn() { [ "$1" = 1 ] && echo yes || echo no; }
echo "target tuned for big PDUs (-T): $(yn "$TUNE"); tgtd malloc keeps buffers (-M):" \
  "$(yn "$MALLOC"); offloads on (-O): $([ ${#TESTBED_OPTS[@]} -gt 0 ] && echo yes || echo no)"
echo "socket = from memory, sock-file = server preads the LUN file like tgtd"
echo "spread = (max-min)/median of the repeats; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -F'\t' -v cases="$CASES" '
  function median(key,   n, i, j, t, a) {
    n = split(vals[key], a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo[key] = a[1]; hi[key] = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function spread(key, m) { return m > 0 ? 100 * (hi[key] - lo[key]) / m : 0 }
  function m(s, q, t, f) { return median(s SUBSEP q SUBSEP t (f == "" ? "" : SUBSEP f)) }
  {
    k = $1 SUBSEP $2 SUBSEP $3
    vals[k] = vals[k] " " $4; vals[k SUBSEP "cpu"] = vals[k SUBSEP "cpu"] " " $5
    vals[k SUBSEP "srv"] = vals[k SUBSEP "srv"] " " $6
  }
  END {
    printf "%-4s %3s %7s %7s %7s %7s %7s  %6s %5s %5s  %-17s %-15s %s\n", "size", "qd", "gen",
      "perf", "socket", "s-file", "stream", "g/perf", "g/sk", "g/sf", "spread g/p/sk/sf%",
      "client s/GB g/p/sk", "server s/GB g/p/sk/sf"
    n = split(cases, cs, " ")
    for (i = 1; i <= n; i++) {
      split(cs[i], p, ":"); s = p[1]; q = p[2]
      g = m(s, q, "gen"); f = m(s, q, "perf"); k = m(s, q, "sock"); fk = m(s, q, "fsock")
      st = m(s, q, "stream")
      sp = sprintf("%.0f/%.0f/%.0f/%.0f", spread(s SUBSEP q SUBSEP "gen", g),
        spread(s SUBSEP q SUBSEP "perf", f), spread(s SUBSEP q SUBSEP "sock", k),
        spread(s SUBSEP q SUBSEP "fsock", fk))
      cl = sprintf("%.2f/%.2f/%.2f", m(s, q, "gen", "cpu"), m(s, q, "perf", "cpu"), m(s, q, "sock", "cpu"))
      sv = sprintf("%.2f/%.2f/%.2f/%.2f", m(s, q, "gen", "srv"), m(s, q, "perf", "srv"),
        m(s, q, "sock", "srv"), m(s, q, "fsock", "srv"))
      printf "%-4s %3s %7.1f %7.1f %7.1f %7.1f %7.1f  %5.2fx %4.0f%% %4.0f%%  %-17s %-15s %s\n", s, q,
        g, f, k, fk, st, (f > 0 ? g / f : 0), (k > 0 ? 100 * g / k : 0), (fk > 0 ? 100 * g / fk : 0),
        sp, cl, sv
    }
  }' "$RAW"

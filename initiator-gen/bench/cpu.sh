#!/usr/bin/env bash
# CPU per GB of istrace gen beside libiscsi's iscsi-perf: paired runs against one tgtd.
#
#   sudo initiator-gen/bench/cpu.sh [-r PAIRS] [-t SECONDS] [-c "r:SIZE:QD w:SIZE:QD ..."]
#                                   [-B OLD-ISTRACE-GEN] [-T] [-M] [-O] [-n NAME] [-l LUN-MiB]
#
# Each pair runs gen, then the other tool (iscsi-perf for a READ case; for a WRITE case, which
# iscsi-perf cannot do, the -B binary, e.g. an older istrace-gen), the order swapped every
# pair, so load from other users hits both sides alike. -B also adds that binary to the READ
# cases. Both sides' CPU is measured the same way: user + system seconds of the process from
# /usr/bin/time, divided by the bytes it moved (gen's and -B's from their JSON summary,
# iscsi-perf's as its average IOPS x size x seconds). tgtd's CPU over each run is shown too:
# on a namespace testbed the TCP receive work runs wherever the softirq is raised, so a
# client that sleeps leaves more of it to the target's process. -T -M -O as in bench.sh.
# Prints the median and the spread (min..max) of each figure. Not a test: asserts nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GEN=$ROOT/initiator-gen/istrace-gen
NAME=gencpu
PAIRS=5
SECS=4
CASES="r:4M:8 r:64k:32 w:1M:8"
OLD=
TUNE=0
MALLOC=0
TESTBED_OPTS=()
LUN_MB=256
TGTD_TUNABLES=glibc.malloc.mmap_threshold=67108864:glibc.malloc.trim_threshold=268435456
while getopts "r:t:c:B:TMOn:l:h" opt; do
  case $opt in
    r) PAIRS=$OPTARG ;;
    t) SECS=$OPTARG ;;
    c) CASES=$OPTARG ;;
    B) OLD=$OPTARG ;;
    T) TUNE=1 ;;
    M) MALLOC=1 ;;
    O) TESTBED_OPTS=(--offloads) ;;
    n) NAME=$OPTARG ;;
    l) LUN_MB=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "cpu.sh: must run as root (network namespaces)" >&2; exit 2; }
[ -x "$GEN" ] || make -C "$ROOT/initiator-gen" >/dev/null
command -v iscsi-perf >/dev/null || { echo "cpu.sh: iscsi-perf (libiscsi-bin) missing" >&2; exit 2; }
[ -z "$OLD" ] || [ -x "$OLD" ] || { echo "cpu.sh: -B $OLD is not an executable" >&2; exit 2; }

PY=(env PYTHONPATH="$ROOT/scripts:$ROOT/decoder:$ROOT/viz:$ROOT/bpf" python3)
INI=(ip netns exec "ist-$NAME-i")
PORTAL=10.77.0.2:3260
IQN=iqn.2026-11.org.istrace:$NAME
RAW=$(mktemp /tmp/istrace-cpu.XXXXXX)
TIMEF=$(mktemp /tmp/istrace-cpu-time.XXXXXX)
cleanup() {
  "${PY[@]}" -m istrace.cli.main testbed down --name "$NAME" >/dev/null 2>&1 || true
  rm -f "$RAW" "$TIMEF"
}
trap cleanup EXIT

echo "cpu.sh: testbed $NAME up ($LUN_MB MiB LUN) ..." >&2
ENV=()
[ "$MALLOC" = 1 ] && ENV=(GLIBC_TUNABLES=$TGTD_TUNABLES)  # tgtd inherits it
env "${ENV[@]}" "${PY[@]}" -m istrace.cli.main testbed up --name "$NAME" --lun-mb "$LUN_MB" \
  "${TESTBED_OPTS[@]}" >/dev/null
read -r TGTD_PID CTL_PORT <<<"$("${PY[@]}" -c "from istrace.testbed import state as s
st = s.load('$NAME')
print([p['pid'] for p in st['pids'] if p['what'] == 'tgtd'][0], st['control_port'])")"
GEN_EXTRA=()
if [ "$TUNE" = 1 ]; then
  for key in MaxBurstLength MaxRecvDataSegmentLength; do
    tgtadm -C "$CTL_PORT" --lld iscsi --op update --mode target --tid 1 --name "$key" \
      --value 16776192
  done
  GEN_EXTRA=(--mrdsl 16776192)
fi

bytes_of() {  # 4M -> 4194304
  local n=${1%[kKmMgG]} u=${1: -1}
  case $u in k|K) echo $((n << 10)) ;; m|M) echo $((n << 20)) ;; *) echo "$1" ;; esac
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
cpu_of_run() { awk '{ print $1 + $2 }' "$TIMEF"; }

run_gen() {  # binary dir size qd -> "bytes"
  local out wr=()
  [ "$2" = w ] && wr=(--write)
  out=$("${INI[@]}" /usr/bin/time -f '%U %S' -o "$TIMEF" "$1" --portal "$PORTAL" \
    --target "$IQN" --size "$3" --queue-depth "$4" --time "$SECS" --json --quiet \
    "${wr[@]}" "${GEN_EXTRA[@]}" 2>/dev/null) || true
  jq -r '.bytes // 0' <<<"${out:-{\}}"
}
run_perf() {  # dir size qd -> "bytes" (its average IOPS x size x seconds)
  local size iops
  size=$(bytes_of "$2")
  iops=$("${INI[@]}" /usr/bin/time -f '%U %S' -o "$TIMEF" timeout $((SECS + 20)) \
    iscsi-perf -m "$3" -b $((size / 512)) -t "$SECS" "iscsi://$PORTAL/$IQN/1" | tr '\r' '\n' |
    sed -n 's/^iops average \([0-9]*\).*/\1/p' | tail -1)
  echo $(( ${iops:-0} * size * SECS ))
}
measure() {  # tool dir size qd -> one raw line: tool dir size qd MB/s cpu-s/GB tgtd-s/GB
  local tool=$1 a b bytes t0 t1; shift
  a=$(ticks "$TGTD_PID"); t0=$(date +%s.%N)
  case $tool in
    gen) bytes=$(run_gen "$GEN" "$@") ;;
    old) bytes=$(run_gen "$OLD" "$@") ;;
    perf) bytes=$(run_perf "$@") ;;
  esac
  t1=$(date +%s.%N); b=$(ticks "$TGTD_PID")
  awk -v tool="$tool" -v d="$1" -v s="$2" -v q="$3" -v by="$bytes" -v c="$(cpu_of_run)" \
    -v tk=$((b - a)) -v hz="$(getconf CLK_TCK)" -v secs="$SECS" 'BEGIN {
      gb = by / 1e9
      printf "%s\t%s\t%s\t%s\t%.1f\t%.4f\t%.4f\n", tool, d, s, q, by / 1e6 / secs,
        (gb > 0 ? c / gb : 0), (gb > 0 ? tk / hz / gb : 0) }' >>"$RAW"
}

for pair in $(seq 1 "$PAIRS"); do
  for c in $CASES; do
    IFS=: read -r dir size qd <<<"$c"
    others=()
    [ "$dir" = r ] && others+=(perf)
    [ -n "$OLD" ] && others+=(old)
    echo "cpu.sh: pair $pair/$PAIRS, $dir $size x qd $qd: gen ${others[*]}" >&2
    if [ $((pair % 2)) = 1 ]; then order=(gen "${others[@]}"); else order=("${others[@]}" gen); fi
    for tool in "${order[@]}"; do measure "$tool" "$dir" "$size" "$qd"; done
  done
done

echo
echo "istrace gen vs iscsi-perf: $PAIRS pairs of ${SECS}s runs, median (min..max);" \
  "MB/s = 10^6 bytes/s; CPU = user+system s per GB moved"
echo "-T $TUNE -M $MALLOC -O $([ ${#TESTBED_OPTS[@]} -gt 0 ] && echo 1 || echo 0);" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
awk -F'\t' -v cases="$CASES" '
  function med(key,   n, i, j, t, a) {
    n = split(v[key], a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  function cell(key, fmt,   m) { m = med(key); return sprintf(fmt " (" fmt ".." fmt ")", m, lo, hi) }
  { k = $2 SUBSEP $3 SUBSEP $4 SUBSEP $1; v[k, "mbs"] = v[k, "mbs"] " " $5
    v[k, "cpu"] = v[k, "cpu"] " " $6; v[k, "srv"] = v[k, "srv"] " " $7; seen[k] = 1 }
  END {
    printf "%-3s %-5s %3s %-5s %-24s %-26s %-26s\n", "dir", "size", "qd", "tool", "MB/s",
      "client CPU s/GB", "tgtd CPU s/GB"
    n = split(cases, cs, " ")
    for (i = 1; i <= n; i++) {
      split(cs[i], p, ":")
      for (t = 1; t <= 3; t++) {
        tool = (t == 1 ? "gen" : t == 2 ? "perf" : "old")
        k = p[1] SUBSEP p[2] SUBSEP p[3] SUBSEP tool
        if (!(k in seen)) continue
        cpu[tool] = med(k SUBSEP "cpu")
        printf "%-3s %-5s %3s %-5s %-24s %-26s %-26s\n", p[1], p[2], p[3], tool,
          cell(k SUBSEP "mbs", "%.1f"), cell(k SUBSEP "cpu", "%.3f"), cell(k SUBSEP "srv", "%.3f")
      }
      for (t = 2; t <= 3; t++) {
        tool = (t == 2 ? "perf" : "old")
        if ((p[1] SUBSEP p[2] SUBSEP p[3] SUBSEP tool) in seen && cpu["gen"] > 0)
          printf "    %s CPU / gen CPU: %.2fx\n", tool, cpu[tool] / cpu["gen"]
      }
      delete cpu
    }
  }' "$RAW"

#!/usr/bin/env bash
# `make demo`: the README's first command. A testbed with 16 ms one-way delay, a capture of the
# pseudo-initiator reading 4 MiB per command for ~10 s, then the diagnosis report.
# Needs root; run after `make install` (falls back to the source tree when istrace is not on PATH).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${ISTRACE_DEMO_OUT:-$ROOT/demo-out}
NAME=${ISTRACE_DEMO_NAME:-demo}
SECONDS_RUN=${ISTRACE_DEMO_SECONDS:-10}

if command -v istrace >/dev/null 2>&1; then
  ISTRACE=(istrace)
else
  export PYTHONPATH="$ROOT/scripts:$ROOT/decoder:$ROOT/viz:$ROOT/bpf${PYTHONPATH:+:$PYTHONPATH}"
  ISTRACE=(python3 -m istrace.cli.main)
fi
step() { printf '\n== demo: %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { echo "demo: must run as root (network namespaces, tcpdump, BPF)" >&2; exit 1; }

step "clearing any earlier demo testbed"
"${ISTRACE[@]}" testbed down --name "$NAME" >/dev/null

step "testbed up: initiator and target namespaces, tgtd, 16 ms one-way delay (32 ms RTT)"
"${ISTRACE[@]}" testbed up --name "$NAME" --delay 16ms --lun-mb 256
trap 'step "testbed down"; "${ISTRACE[@]}" testbed down --name "$NAME" || true' EXIT

if [ -x "$ROOT/initiator-gen/istrace-gen" ] || command -v istrace-gen >/dev/null 2>&1; then
  WORKLOAD="gen --size 4M --time $SECONDS_RUN"
else
  echo "demo: istrace-gen is not built; using iscsi-perf with 4 MiB (8192-block) reads instead"
  WORKLOAD="iscsi-perf -t $SECONDS_RUN -b 8192 -m 1 \$ISTRACE_LUN_URL"
fi

step "capture: $WORKLOAD  ->  $OUT"
rm -rf "$OUT"
"${ISTRACE[@]}" capture --name "$NAME" --workload "$WORKLOAD" --out "$OUT"

step "merge: both ends' probes and pcaps on one clock (offset estimated from segments both saw)"
"${ISTRACE[@]}" merge "$OUT" || echo "demo: merge failed; the report aligns layers from the raw tables"

step "report"
if "${ISTRACE[@]}" report "$OUT"; then
  REPORT=$(ls "$OUT"/*.html 2>/dev/null | head -1 || true)
  step "done: report at ${REPORT:-$OUT}"
else
  echo "demo: istrace report is not available; the decoder's summary instead"
  "${ISTRACE[@]}" decode --summary "$OUT/initiator.pcap" | tee "$OUT/summary.txt"
  step "done: summary at $OUT/summary.txt, capture in $OUT"
fi

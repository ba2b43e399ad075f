#!/bin/bash
# Inside the VM: one capture session on the full-kernel testbed.
#   $1 = testbed env file, $2 = output dir (a host directory shared read-write),
#   $3 = workload shell command ($DEV is the initiator's disk),
#   $4 = probes: istrace (istrace-probe, the host's loader) or off,
#   $5 = the istrace-probe binary (the host's build: the guest shares its file system)
# Packets: tcpdump -B 524288 on both veth ends. Probes on syscall, block, SCSI, the iSCSI
# initiator, LIO and TCP. Everything is written to tmpfs while the workload runs and copied to
# $2 afterwards, so 9p stays out of the measured path. The files are those of any capture
# directory (docs/schema.md): pcaps, events-<end>.jsonl, tcpdump-<end>.log.
set -euo pipefail
CONF=$1; OUT=$2; WORKLOAD=$3; PROBES=${4:-istrace}; PROBE=${5:-}
# shellcheck disable=SC1090
. "$CONF"
log() { echo "guest_capture: $(date +%T.%3N) $*"; }
DEV=$(sed -n 's/.*"dev": "\([^"]*\)".*/\1/p' "$RUNDIR/up.json")
export DEV
W=/dev/shm/istcap.$$
rm -rf "$W"; mkdir -p "$W" "$OUT"
pids=()
cleanup() {
  # SIGINT lets tcpdump and the probes flush; whatever still runs 15 s later is killed.
  for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for _ in $(seq 75); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
}
trap cleanup EXIT
give_up() {  # keep what there is (the probes' logs say why) and fail
  cleanup
  cp -r "$W"/. "$OUT"/ 2>/dev/null || true
  exit 1
}

# istrace-probe, the loader the host runs, on this kernel: one instance per end. Both ends
# share one kernel, so the kernel-wide SCSI hooks are split by end: the initiator keeps the
# SCSI midlayer and iscsi_tcp, the target keeps LIO; each end's TCP, syscalls and tasks are
# those of its network namespace.
start_probe() {  # role netns args...
  local role=$1 ns=$2
  shift 2
  "$PROBE" --out "$W/events-$role.jsonl" --host "$role" --netns "$ns" --port 3260 "$@" \
    > "$W/probe-$role.out" 2> "$W/probe-$role.log" &
  pids+=($!)
}
# The workload runs in its own cgroup: the initiator's syscalls and block requests are its
# tasks' (forks included), not the guest agent's or this script's, which share its namespace.
CG=/sys/fs/cgroup/istrace-workload.$$
mkdir -p "$CG"
if [ "$PROBES" = istrace ]; then
  log "istrace-probe on both ends (slow to load under TCG)"
  start_probe initiator /proc/1/ns/net --cgroup "$CG" --block-dev "$DEV" \
    --disable lio_cmd_start --disable lio_cmd_done --disable lio_cmd_rx --disable lio_data_in \
    --disable lio_bs_submit
  start_probe target /run/netns/isttgt --layers tcp,net,syscall,scsi,iscsi \
    --disable scsi_dispatch --disable scsi_done --disable kiscsi_queue --disable kiscsi_pdu \
    --disable kiscsi_xmit
  for _ in $(seq 900); do
    n=$(grep -l "streaming to" "$W"/probe-*.log 2>/dev/null | wc -l || true)
    [ "$n" = 2 ] && break
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { log "a probe exited:"; \
      tail -5 "$W"/probe-*.log; give_up; }; done
    sleep 0.2
  done
  if [ "$n" != 2 ]; then log "the probes did not attach in 180 s"; tail -5 "$W"/probe-*.log; give_up; fi
fi

log "tcpdump on both ends"
tcpdump -U --immediate-mode -B 524288 -s 0 -n -i vi -w "$W/initiator.pcap" tcp port 3260 2> "$W/tcpdump-initiator.log" &
pids+=($!)
ip netns exec isttgt tcpdump -U --immediate-mode -B 524288 -s 0 -n -i vt -w "$W/target.pcap" tcp port 3260 \
  2> "$W/tcpdump-target.log" &
pids+=($!)
for _ in $(seq 100); do
  grep -q "listening on" "$W/tcpdump-initiator.log" && grep -q "listening on" "$W/tcpdump-target.log" && break
  sleep 0.1
done

log "workload: $WORKLOAD"
start=$(date +%s%N)
set +e
bash -c 'echo $$ > "$1/cgroup.procs" && exec bash -c "$2"' _ "$CG" "$WORKLOAD" \
  > "$W/workload.out" 2>&1
wrc=$?
set -e
end=$(date +%s%N)
echo "{\"rc\": $wrc, \"start_ns\": $start, \"end_ns\": $end}" > "$W/workload.json"
# tcpdump stops at SIGINT without reading what is still queued for it, and under emulation
# it lags: wait until both pcaps (written per packet, -U) stop growing for a second.
last=""
for _ in $(seq 40); do
  now=$(stat -c %s "$W/initiator.pcap" "$W/target.pcap" | tr '\n' ' ')
  [ "$now" = "$last" ] && break
  last=$now
  sleep 1
done
cleanup
trap - EXIT
rmdir "$CG" 2>/dev/null || true
cp "$RUNDIR/up.json" "$W/testbed.json"
cp -r "$W"/. "$OUT"/
rm -rf "$W"
log "done (workload rc $wrc): $(ls "$OUT" | tr '\n' ' ')"
exit $wrc

#!/bin/bash
# Sourced by guest_up.sh and guest_retune.sh inside the VM: after an iSCSI login, find the
# SCSI disk it attached, apply MAX_SECTORS_KB and describe the session into RUNDIR/up.json.

# Sets $dev (sdX) and $sid (the session id); returns 1 when no disk appeared within 30 s.
session_up() {
  dev=""
  for _ in $(seq 150); do
    dev=$(iscsiadm -m session -P 3 2>/dev/null | sed -n 's/.*Attached scsi disk \(sd[a-z]*\).*/\1/p' | head -1)
    [ -n "$dev" ] && [ -b "/dev/$dev" ] && break
    sleep 0.2
  done
  [ -n "$dev" ] || return 1
  [ "$MAX_SECTORS_KB" = 0 ] || echo "$MAX_SECTORS_KB" > "/sys/block/$dev/queue/max_sectors_kb"
  sid=$(iscsiadm -m session | sed -n 's/^tcp: \[\([0-9]*\)\].*/\1/p' | head -1)
  "$VMDIR/guest_describe.sh" "$dev" "$sid" > "$RUNDIR/up.json.tmp"
  mv "$RUNDIR/up.json.tmp" "$RUNDIR/up.json"
}

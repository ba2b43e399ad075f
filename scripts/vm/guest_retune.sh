#!/bin/bash
# Inside the VM: log the session out and in again with new initiator tunables
# ($1 = env file, already rewritten by the host), then refresh RUNDIR/up.json.
# cmds_max (the host's can_queue) and the login keys only change with a new session.
set -euo pipefail
CONF=$1
# shellcheck disable=SC1090
. "$CONF"
node=(-m node -T "$IQN" -p "$TGT_IP:3260")
iscsiadm "${node[@]}" --logout > /dev/null
upd() { iscsiadm "${node[@]}" -o update -n "$1" -v "$2"; }
upd node.session.queue_depth "$QUEUE_DEPTH"
upd node.session.cmds_max "$CMDS_MAX"
upd node.conn[0].iscsi.MaxRecvDataSegmentLength "$MRDSL"
upd node.session.iscsi.MaxBurstLength "$MAX_BURST"
upd node.session.iscsi.FirstBurstLength "$FIRST_BURST"
iscsiadm "${node[@]}" --login > /dev/null
# shellcheck source=guest_session.sh
. "$VMDIR/guest_session.sh"
session_up || { echo "guest_retune: no SCSI disk after login" >&2; exit 1; }
cat "$RUNDIR/up.json"

#!/bin/bash
# Inside the VM: the kernel storage stack of the full-kernel testbed.
#   target side:    netns "isttgt", veth "vt", LIO (iscsi_target_mod + fileio LUN on tmpfs)
#   initiator side: the VM's root netns, veth "vi", open-iscsi (iscsid + iscsi_tcp) -> /dev/sdX
# netem on both veth ends delays each direction by DELAY_MS. Settings come from $1 (env file);
# the result (device, session id, what was negotiated) goes to $RUNDIR/up.json.
set -euo pipefail
CONF=$1
# shellcheck disable=SC1090
. "$CONF"
log() { echo "guest_up: $*"; }

log "modules"
for m in configfs target_core_mod target_core_file iscsi_target_mod iscsi_tcp sd_mod \
         sch_netem veth; do
  modprobe "$m"
done
mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config

log "network: initiator $INI_IP (vi) <-> target $TGT_IP (vt in netns isttgt), ${DELAY_MS} ms each way"
ip netns add isttgt
ip link add vi type veth peer name vt
ip link set vt netns isttgt
ip addr add "$INI_IP/24" dev vi
ip link set vi up
ip link set lo up
ip netns exec isttgt ip addr add "$TGT_IP/24" dev vt
ip netns exec isttgt ip link set vt up
ip netns exec isttgt ip link set lo up
# Segments on the wire as the peers sent them: the captures then show real TCP segments.
ethtool -K vi tso off gso off gro off >/dev/null 2>&1 || true
ip netns exec isttgt ethtool -K vt tso off gso off gro off >/dev/null 2>&1 || true
if [ "$DELAY_MS" != "0" ]; then
  tc qdisc add dev vi root netem delay "${DELAY_MS}ms" limit 100000
  ip netns exec isttgt tc qdisc add dev vt root netem delay "${DELAY_MS}ms" limit 100000
fi
ping -c 1 -W 5 "$TGT_IP" >/dev/null

log "LUN: $LUN_BYTES bytes of the schema pattern on tmpfs"
mkdir -p /dev/shm/istrace
cp "$LUN_SRC" /dev/shm/istrace/lun1.img

log "LIO target $IQN"
mkdir -p /etc/rtslib-fb-target
# `ip netns exec` gives the command a fresh /sys without configfs: mount it there again.
ip netns exec isttgt sh -c 'mount -t configfs configfs /sys/kernel/config && exec "$@"' lio \
  /usr/bin/python3 "$VMDIR/guest_lio.py" --lun /dev/shm/istrace/lun1.img \
  --size "$LUN_BYTES" --iqn "$IQN" --ip "$TGT_IP" --mrdsl "$TGT_MRDSL" \
  --max-burst "$MAX_BURST" --first-burst "$FIRST_BURST"

log "open-iscsi initiator"
mkdir -p /etc/iscsi /run/lock/iscsi /var/lib/iscsi
echo "InitiatorName=$INI_IQN" > /etc/iscsi/initiatorname.iscsi
cat > /etc/iscsi/iscsid.conf <<CONF
iscsid.startup = /bin/true
node.startup = manual
node.session.timeo.replacement_timeout = 15
node.conn[0].timeo.login_timeout = 15
node.conn[0].timeo.logout_timeout = 15
# No NOP-Out pings: every PDU in a trace then belongs to the workload.
node.conn[0].timeo.noop_out_interval = 0
node.conn[0].timeo.noop_out_timeout = 0
node.session.initial_login_retry_max = 4
node.session.cmds_max = $CMDS_MAX
node.session.queue_depth = $QUEUE_DEPTH
node.session.iscsi.InitialR2T = No
node.session.iscsi.ImmediateData = Yes
node.session.iscsi.FirstBurstLength = $FIRST_BURST
node.session.iscsi.MaxBurstLength = $MAX_BURST
node.conn[0].iscsi.MaxRecvDataSegmentLength = $MRDSL
node.conn[0].iscsi.MaxXmitDataSegmentLength = 0
discovery.sendtargets.iscsi.MaxRecvDataSegmentLength = 32768
node.session.scan = auto
CONF
iscsid
for _ in $(seq 50); do [ -S /run/iscsid.pid ] || [ -e /run/iscsid.pid ] && break; sleep 0.2; done
iscsiadm -m discovery -t sendtargets -p "$TGT_IP:3260" >/dev/null
iscsiadm -m node -T "$IQN" -p "$TGT_IP:3260" --login >/dev/null

# shellcheck source=guest_session.sh
. "$VMDIR/guest_session.sh"
session_up || { log "no SCSI disk appeared after login"; exit 1; }
host=$(basename "$(readlink -f /sys/class/iscsi_session/session$sid/device)/..")
log "up: /dev/$dev (session $sid, $host)"

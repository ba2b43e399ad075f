#!/bin/bash
# Inside the VM: one JSON object describing the logged-in session ($1 = sdX, $2 = session id):
# the block/SCSI limits in force and what the login negotiated, read back from sysfs.
set -euo pipefail
dev=$1; sid=$2
q=/sys/block/$dev/queue
sess=/sys/class/iscsi_session/session$sid
conn=$(ls -d /sys/class/iscsi_connection/connection"$sid":* | head -1)
sdev=$(readlink -f "/sys/block/$dev/device")
shost=$(ls -d "$sess"/device/../scsi_host/host* 2>/dev/null | head -1 || true)
[ -n "$shost" ] || shost=$(ls -d /sys/class/scsi_host/host* | tail -1)
rd() { cat "$1" 2>/dev/null || echo ""; }
num() { local v; v=$(rd "$1"); [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo null; }
cat <<JSON
{"dev": "/dev/$dev", "session": $sid,
 "max_sectors_kb": $(num $q/max_sectors_kb), "max_hw_sectors_kb": $(num $q/max_hw_sectors_kb),
 "nr_requests": $(num $q/nr_requests), "logical_block_size": $(num $q/logical_block_size),
 "queue_depth": $(num "$sdev"/queue_depth), "can_queue": $(num "$shost"/can_queue),
 "cmd_per_lun": $(num "$shost"/cmd_per_lun),
 "MaxRecvDataSegmentLength": $(num "$conn"/max_recv_dlength),
 "MaxXmitDataSegmentLength": $(num "$conn"/max_xmit_dlength),
 "MaxBurstLength": $(num "$sess"/max_burst_len), "FirstBurstLength": $(num "$sess"/first_burst_len),
 "ImmediateData": $(num "$sess"/immediate_data), "InitialR2T": $(num "$sess"/initial_r2t),
 "targetname": "$(rd "$sess"/targetname)"}
JSON

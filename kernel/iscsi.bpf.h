/* SPDX-License-Identifier: GPL-2.0 */
/*
 * iSCSI initiators: the kernel's (libiscsi module: queuecommand and every PDU it
 * completes) and the user-space library libiscsi (uprobes), which the pseudo-initiator
 * and QEMU use.  Either gives the ITT that ties a SCSI command to its PDUs on the wire.
 */
#ifndef ISTRACE_ISCSI_BPF_H
#define ISTRACE_ISCSI_BPF_H

#include "common.bpf.h"
#include "scsi.bpf.h" /* on_scsi_cmnd */

/* libiscsi (kernel initiator): queuecommand(struct Scsi_Host *, struct scsi_cmnd *);
 * fentry where the kernel allows it (module BTF), kprobe otherwise */
SEC("fentry/iscsi_queuecommand")
int BPF_PROG(kiscsi_queue_fentry, void *shost, void *sc) { return on_scsi_cmnd(sc, EV_KISCSI_QUEUE); }

SEC("kprobe/iscsi_queuecommand")
int BPF_KPROBE(kiscsi_queue_kp, void *shost, void *sc) { return on_scsi_cmnd(sc, EV_KISCSI_QUEUE); }

/* iscsi_complete_pdu(conn, struct iscsi_hdr *hdr, data, datalen): wire-format BHS */
static __always_inline int on_kiscsi_pdu(void *hdr)
{
	struct istrace_event *e;
	__u8 bhs[20] = {};

	if (bpf_probe_read_kernel(bhs, sizeof(bhs), hdr))
		return 0;
	e = ev_new(EV_KISCSI_PDU);
	if (!e)
		return 0;
	e->opcode = bhs[0] & 0x3f;
	e->bytes = ((__u32)bhs[5] << 16) | ((__u32)bhs[6] << 8) | bhs[7];
	e->itt = be32(bhs + 16);
	e->flags |= F_OPCODE | F_BYTES | F_ITT;
	ev_submit(e);
	return 0;
}

SEC("fentry/iscsi_complete_pdu")
int BPF_PROG(kiscsi_pdu_fentry, void *conn, void *hdr) { return on_kiscsi_pdu(hdr); }

SEC("kprobe/iscsi_complete_pdu")
int BPF_KPROBE(kiscsi_pdu_kp, void *conn, void *hdr) { return on_kiscsi_pdu(hdr); }

/* libiscsi, the user-space initiator library (uprobes) */

/* libiscsi: the scsi_task pointer between entry and return of iscsi_scsi_command_async. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} lib_task SEC(".maps");

/* int iscsi_scsi_command_async(iscsi, lun, struct scsi_task *task, cb, d, private_data):
 * the ITT is assigned inside, so the event is emitted on return. */
SEC("uprobe")
int BPF_KPROBE(lib_cmd_entry, void *iscsi, int lun, void *task)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 p = (__u64)task;

	if (!task_wanted())
		return 0;
	bpf_map_update_elem(&lib_task, &tid, &p, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lib_cmd_return, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct istrace_event *e;
	__u8 cdb[16] = {};
	__u64 *p;
	void *task;
	__s32 xfer = 0;
	__u32 itt = 0;

	p = bpf_map_lookup_elem(&lib_task, &tid);
	if (!p)
		return 0;
	task = (void *)*p;
	bpf_map_delete_elem(&lib_task, &tid);
	bpf_probe_read_user(cdb, sizeof(cdb), task + cfg.lib_task_cdb);
	bpf_probe_read_user(&xfer, sizeof(xfer), task + cfg.lib_task_xfer);
	bpf_probe_read_user(&itt, sizeof(itt), task + cfg.lib_task_itt);
	e = ev_new(EV_LIB_CMD);
	if (!e)
		return 0;
	fill_cdb(e, cdb);
	e->itt = itt;
	e->bytes = xfer > 0 ? xfer : 0;
	e->status = ret;
	e->flags |= F_ITT | F_BYTES | F_STATUS;
	ev_submit(e);
	return 0;
}

/* int iscsi_queue_pdu(struct iscsi_context *, struct iscsi_pdu *): struct private */
SEC("uprobe")
int BPF_KPROBE(lib_queue_pdu) { return on_plain(EV_LIB_QUEUE_PDU); }

#endif

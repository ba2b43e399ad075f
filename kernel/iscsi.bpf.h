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

/* A SCSI Command PDU's BHS in memory (wire format): ITT, expected length, CDB. Other
 * opcodes are not recorded (a task's Data-Out and NOP headers pass the same functions). */
static __always_inline int on_cmd_bhs(const void *hdr, __u32 type)
{
	struct istrace_event *e;
	__u8 bhs[48] = {};

	if (!hdr || bpf_probe_read_kernel(bhs, sizeof(bhs), hdr))
		return 0;
	if ((bhs[0] & 0x3f) != 0x01)
		return 0;
	e = ev_new(type);
	if (!e)
		return 0;
	fill_cdb(e, bhs + 32);
	e->itt = be32(bhs + 16);
	e->bytes = be32(bhs + 20);
	e->flags |= F_ITT | F_BYTES;
	ev_submit(e);
	return 0;
}

/* iscsi_tcp (kernel initiator): iscsi_tcp_task_xmit(struct iscsi_task *) sends the task's
 * PDUs; for a command its header is built by now, ITT included (queuecommand had none). */
struct iscsi_task___istrace {
	void *hdr;
} __attribute__((preserve_access_index));

static __always_inline int on_task_xmit(void *task)
{
	return on_cmd_bhs(BPF_CORE_READ((struct iscsi_task___istrace *)task, hdr), EV_KISCSI_XMIT);
}

SEC("fentry/iscsi_tcp_task_xmit")
int BPF_PROG(kiscsi_xmit_fentry, void *task) { return on_task_xmit(task); }
SEC("kprobe/iscsi_tcp_task_xmit")
int BPF_KPROBE(kiscsi_xmit_kp, void *task) { return on_task_xmit(task); }

/* LIO (iscsi_target_mod): iscsit_setup_scsi_cmd(conn, cmd, unsigned char *buf), buf being
 * the received BHS: the command as the target first sees it, before the target core. */
SEC("fentry/iscsit_setup_scsi_cmd")
int BPF_PROG(lio_cmd_rx_fentry, void *conn, void *cmd, void *buf)
{
	return on_cmd_bhs(buf, EV_LIO_CMD_RX);
}
SEC("kprobe/iscsit_setup_scsi_cmd")
int BPF_KPROBE(lio_cmd_rx_kp, void *conn, void *cmd, void *buf)
{
	return on_cmd_bhs(buf, EV_LIO_CMD_RX);
}

/* LIO: lio_queue_data_in(struct se_cmd *): the backing store's data is ready and goes to
 * the iSCSI layer to be sent as Data-In (the end of the target's service time). */
SEC("fentry/lio_queue_data_in")
int BPF_PROG(lio_data_in_fentry, void *se_cmd) { return on_se_cmd(se_cmd, EV_LIO_DATA_IN); }
SEC("kprobe/lio_queue_data_in")
int BPF_KPROBE(lio_data_in_kp, void *se_cmd) { return on_se_cmd(se_cmd, EV_LIO_DATA_IN); }

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
	mark_peer_task(e);
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

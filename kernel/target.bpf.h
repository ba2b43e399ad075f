/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The user-space iSCSI target tgtd (tgt 1.0.85), by uprobes: PDUs received and sent,
 * commands executed, queued to the backing store, submitted and done, with the
 * target-side latency from queue to done.
 */
#ifndef ISTRACE_TARGET_BPF_H
#define ISTRACE_TARGET_BPF_H

#include "common.bpf.h"

/* tgtd: target_cmd_queue time per (tgid, tag), closed by target_cmd_io_done. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u64);
} tgt_start SEC(".maps");

/* Offsets of tgt's private structs come from cfg (see docs/probes.md). */

static __always_inline int on_tgt_cmd(void *cmd, __u32 type, int result)
{
	struct istrace_event *e;
	__u8 cdb[16] = {};
	__u64 tag = 0, now, key, *start;
	void *scb = NULL;
	__u32 dir = 0, len = 0;

	if (!cmd || !task_wanted())
		return 0;
	bpf_probe_read_user(&tag, sizeof(tag), cmd + cfg.tgt_cmd_tag);
	bpf_probe_read_user(&scb, sizeof(scb), cmd + cfg.tgt_cmd_scb);
	bpf_probe_read_user(&dir, sizeof(dir), cmd + cfg.tgt_cmd_dir);
	/* DATA_WRITE = 1: the expected length is in out_sdb, otherwise in in_sdb */
	bpf_probe_read_user(&len, sizeof(len),
			    cmd + (dir == 1 ? cfg.tgt_cmd_out_len : cfg.tgt_cmd_in_len));
	if (scb)
		bpf_probe_read_user(cdb, sizeof(cdb), scb);
	e = ev_new(type);
	if (!e)
		return 0;
	mark_peer_task(e);
	now = e->ts_ns;
	fill_cdb(e, cdb);
	e->itt = bpf_ntohl((__u32)tag);
	e->bytes = len;
	e->flags |= F_ITT | F_BYTES;
	key = ((__u64)e->pid << 32) | e->itt;
	if (type == EV_TGT_QUEUE) {
		bpf_map_update_elem(&tgt_start, &key, &now, BPF_ANY);
	} else if (type == EV_TGT_IO_DONE) {
		start = bpf_map_lookup_elem(&tgt_start, &key);
		if (start) {
			e->lat_ns = now - *start;
			e->flags |= F_LAT;
			bpf_map_delete_elem(&tgt_start, &key);
		}
	}
	if (type == EV_TGT_IO_DONE) {
		e->status = result;
		e->flags |= F_STATUS;
	}
	ev_submit(e);
	return 0;
}

/* int target_cmd_queue(int tid, struct scsi_cmd *cmd) */
SEC("uprobe")
int BPF_KPROBE(tgt_cmd_queue, int tid, void *cmd) { return on_tgt_cmd(cmd, EV_TGT_QUEUE, 0); }

/* int bs_thread_cmd_submit(struct scsi_cmd *cmd) */
SEC("uprobe")
int BPF_KPROBE(tgt_bs_submit, void *cmd) { return on_tgt_cmd(cmd, EV_TGT_BS_SUBMIT, 0); }

/* void target_cmd_io_done(struct scsi_cmd *cmd, int result); when the loader put the
 * probe past the entry (cfg.tgt_io_done_off), cmd has moved to rdx (the third argument
 * register), result is still in esi */
SEC("uprobe")
int BPF_KPROBE(tgt_io_done, void *cmd, int result, void *cmd_moved)
{
	return on_tgt_cmd(cfg.tgt_io_done_off ? cmd_moved : cmd, EV_TGT_IO_DONE, result);
}

/* int iscsi_scsi_cmd_execute(struct iscsi_task *task) */
SEC("uprobe")
int BPF_KPROBE(tgt_execute, void *task)
{
	struct istrace_event *e;
	__u8 cdb[16] = {};
	__u32 itt = 0, len = 0;

	if (!task || !task_wanted())
		return 0;
	bpf_probe_read_user(&itt, sizeof(itt), task + cfg.tgt_task_itt);
	/* struct iscsi_cmd: data_length follows the ITT */
	bpf_probe_read_user(&len, sizeof(len), task + cfg.tgt_task_itt + 4);
	/* scsi_cmd.scb is set later (iscsi_target_cmd_queue): take the CDB from the
	 * command PDU's BHS, 16 bytes after the ITT (RFC 7143 SCSI Command layout) */
	bpf_probe_read_user(cdb, sizeof(cdb), task + cfg.tgt_task_itt + 16);
	e = ev_new(EV_TGT_EXECUTE);
	if (!e)
		return 0;
	mark_peer_task(e);
	fill_cdb(e, cdb);
	e->itt = bpf_ntohl(itt);
	e->bytes = bpf_ntohl(len);
	e->flags |= F_ITT | F_BYTES;
	ev_submit(e);
	return 0;
}

/* void iscsi_rx_handler(struct iscsi_connection *), iscsi_tx_handler(...) */
SEC("uprobe")
int BPF_KPROBE(tgt_rx) { return on_plain(EV_TGT_RX); }
SEC("uprobe")
int BPF_KPROBE(tgt_tx) { return on_plain(EV_TGT_TX); }

#endif

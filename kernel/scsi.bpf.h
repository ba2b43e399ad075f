/* SPDX-License-Identifier: GPL-2.0 */
/*
 * SCSI in the kernel: the midlayer's dispatch and completion (initiator side) and
 * LIO's target core (target side).  Both carry the CDB, so both give LBA and length.
 */
#ifndef ISTRACE_SCSI_BPF_H
#define ISTRACE_SCSI_BPF_H

#include "common.bpf.h"

/*
 * None of these types exist on a kernel without SCSI/iSCSI/LIO (like the test
 * machine): the local "___istrace" flavours relocate against vmlinux or module
 * BTF where they do, and on a kernel without them the program fails to load and
 * the loader reports the hook as not available.
 */
struct scsi_cmnd___istrace {
	unsigned char cmnd[32]; /* an array since 5.19; a pointer before (not handled) */
	struct {
		unsigned int length;
	} sdb;
	int result;
} __attribute__((preserve_access_index));

struct se_cmd___istrace {
	__u64 tag;
	unsigned char *t_task_cdb;
	__u32 data_length;
	__u8 scsi_status;
} __attribute__((preserve_access_index));

static __always_inline int on_scsi_cmnd(void *cmd, __u32 type)
{
	struct scsi_cmnd___istrace *sc = cmd;
	struct istrace_event *e;
	__u8 cdb[16] = {};

	if (bpf_core_field_size(sc->cmnd) != 32)
		return 0;
	e = ev_new(type);
	if (!e)
		return 0;
	bpf_core_read(cdb, sizeof(cdb), &sc->cmnd);
	fill_cdb(e, cdb);
	e->bytes = BPF_CORE_READ(sc, sdb.length);
	e->status = BPF_CORE_READ(sc, result);
	e->flags |= F_BYTES | F_STATUS;
	ev_submit(e);
	return 0;
}

SEC("raw_tp/scsi_dispatch_cmd_start")
int BPF_PROG(scsi_start_raw, void *cmd) { return on_scsi_cmnd(cmd, EV_SCSI_DISPATCH); }
SEC("raw_tp/scsi_dispatch_cmd_done")
int BPF_PROG(scsi_done_raw, void *cmd) { return on_scsi_cmnd(cmd, EV_SCSI_DONE); }

/* LIO: se_cmd.tag holds the ITT as received (network byte order). */
static __always_inline int on_se_cmd(void *cmd, __u32 type)
{
	struct se_cmd___istrace *c = cmd;
	struct istrace_event *e;
	__u8 cdb[16] = {};

	e = ev_new(type);
	if (!e)
		return 0;
	bpf_probe_read_kernel(cdb, sizeof(cdb), BPF_CORE_READ(c, t_task_cdb));
	fill_cdb(e, cdb);
	e->itt = bpf_ntohl((__u32)BPF_CORE_READ(c, tag));
	e->bytes = BPF_CORE_READ(c, data_length);
	e->status = BPF_CORE_READ(c, scsi_status);
	e->flags |= F_ITT | F_BYTES | F_STATUS;
	ev_submit(e);
	return 0;
}

/* LIO's fileio backing store: fd_execute_rw(struct se_cmd *, sgl, nents, dir) starts the
 * command's file I/O; target_cmd_complete (lio_cmd_done) is its end, so the two give the
 * backing store's service time (the iblock backend, iblock_execute_rw, is not hooked). */
SEC("fentry/fd_execute_rw")
int BPF_PROG(lio_bs_submit_fentry, void *cmd) { return on_se_cmd(cmd, EV_LIO_BS_SUBMIT); }
SEC("kprobe/fd_execute_rw")
int BPF_KPROBE(lio_bs_submit_kp, void *cmd) { return on_se_cmd(cmd, EV_LIO_BS_SUBMIT); }

SEC("raw_tp/target_sequencer_start")
int BPF_PROG(lio_start_raw, void *cmd) { return on_se_cmd(cmd, EV_LIO_CMD_START); }
SEC("raw_tp/target_cmd_complete")
int BPF_PROG(lio_done_raw, void *cmd) { return on_se_cmd(cmd, EV_LIO_CMD_DONE); }

#endif

/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * istrace event ABI: the one record every BPF program in kernel/ emits and the
 * loader (bpf/istrace-probe) turns into a JSON line of docs/schema.md section 1.
 *
 * Shared by BPF (included after vmlinux.h) and user space (after <linux/types.h>),
 * so it uses only __u8..__u64.  Keep in sync with docs/schema.md and the event table
 * in bpf/probe_event.c (each type's layer and name, and how its fields are printed).
 */
#ifndef ISTRACE_EVENTS_H
#define ISTRACE_EVENTS_H

#define ISTRACE_COMM_LEN 16
#define ISTRACE_MAX_PIDS 64
#define ISTRACE_MAX_EXCLUDE 4

/* Event types.  The loader's table maps each to (layer, event name, fields). */
enum istrace_event_type {
	EV_NONE = 0,
	/* tcp */
	EV_TCP_PROBE,        /* tcp:tcp_probe: cwnd, ssthresh, windows, srtt, inflight */
	EV_CONG_STATE,       /* tcp:tcp_cong_state_set: new CA state */
	EV_RETRANSMIT,       /* tcp:tcp_retransmit_skb: seq of the resent segment */
	EV_SOCK_STATE,       /* sock:inet_sock_set_state: old -> new TCP state */
	EV_RCV_SPACE,        /* tcp:tcp_rcv_space_adjust: receive-buffer autotuning */
	/* net */
	EV_SKB_DROP,         /* skb:kfree_skb on an iSCSI connection, with drop reason */
	EV_QDISC_ENQUEUE,    /* qdisc:qdisc_enqueue with a backlog (local queueing) */
	/* block */
	EV_BIO_QUEUE,
	EV_BIO_SPLIT,
	EV_BIO_MERGE,
	EV_RQ_ISSUE,
	EV_RQ_COMPLETE,
	/* syscall */
	EV_SYS_ENTER,        /* read/write/pread/readv/recv/send/io_uring_enter entry */
	EV_SYS_EXIT,         /* the same call's return: bytes moved, latency */
	/* scsi / iscsi, kernel */
	EV_SCSI_DISPATCH,    /* scsi:scsi_dispatch_cmd_start */
	EV_SCSI_DONE,        /* scsi:scsi_dispatch_cmd_done */
	EV_KISCSI_QUEUE,     /* kprobe iscsi_queuecommand (libiscsi, kernel initiator) */
	EV_KISCSI_PDU,       /* kprobe iscsi_complete_pdu (a PDU received by the initiator) */
	EV_LIO_CMD_START,    /* target:target_sequencer_start (LIO) */
	EV_LIO_CMD_DONE,     /* target:target_cmd_complete (LIO) */
	EV_KISCSI_XMIT,      /* iscsi_tcp_task_xmit: a SCSI Command PDU leaves the initiator */
	EV_LIO_CMD_RX,       /* iscsit_setup_scsi_cmd: LIO received a SCSI Command PDU */
	EV_LIO_DATA_IN,      /* lio_queue_data_in: LIO hands the read data to iSCSI to send */
	EV_LIO_BS_SUBMIT,    /* fd_execute_rw: LIO's fileio backing store starts the command's I/O */
	/* iscsi / scsi, user space */
	EV_USDT_ISSUE,       /* istrace gen USDT istrace:cmd_issue */
	EV_USDT_FIRST_DATA,  /* istrace gen USDT istrace:cmd_first_data */
	EV_USDT_DONE,        /* istrace gen USDT istrace:cmd_done */
	EV_LIB_CMD,          /* libiscsi iscsi_scsi_command_async return: ITT assigned */
	EV_LIB_QUEUE_PDU,    /* libiscsi iscsi_queue_pdu entry */
	EV_TGT_RX,           /* tgtd iscsi_rx_handler entry */
	EV_TGT_TX,           /* tgtd iscsi_tx_handler entry */
	EV_TGT_EXECUTE,      /* tgtd iscsi_scsi_cmd_execute */
	EV_TGT_QUEUE,        /* tgtd target_cmd_queue */
	EV_TGT_BS_SUBMIT,    /* tgtd bs_thread_cmd_submit (backing-store thread handoff) */
	EV_TGT_IO_DONE,      /* tgtd target_cmd_io_done, latency since target_cmd_queue */
	EV_MAX
};

/* Flags: which optional fields of the record are valid (others are printed as null). */
#define F_CONN     (1u << 0)   /* saddr/daddr/sport/dport/family/cookie */
#define F_LBA      (1u << 1)
#define F_BYTES    (1u << 2)
#define F_ITT      (1u << 3)
#define F_OPCODE   (1u << 4)
#define F_SEQ      (1u << 5)
#define F_ACK      (1u << 6)
#define F_CWND     (1u << 7)   /* cwnd, ssthresh, srtt_us, inflight, rwnd, snd_wnd */
#define F_CA       (1u << 8)
#define F_LAT      (1u << 9)
#define F_DEV      (1u << 10)
#define F_REASON   (1u << 11)  /* reason code: meaning depends on the type */
#define F_STATUS   (1u << 12)
#define F_RWND     (1u << 13)  /* only rwnd (rcv_space) */
#define F_PEER     (1u << 14)  /* a task or block event of the second host (netns2) */

struct istrace_event {
	__u64 ts_ns;        /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 cookie;       /* socket cookie */
	__u64 lba;          /* block: 512-byte sector; scsi/iscsi: LBA from the CDB */
	__u64 bytes;
	__u64 lat_ns;
	__u32 flags;        /* F_* */
	__u32 type;         /* enum istrace_event_type */
	__u32 pid;          /* tgid */
	__u32 tid;
	__u32 netns;        /* network namespace inode of the socket (0 if none) */
	__u32 itt;          /* host byte order */
	__u32 seq, ack;
	__u32 cwnd, ssthresh, srtt_us, inflight, rwnd, snd_wnd;
	__u32 dev;          /* block: dev_t (major << 20 | minor); net: ifindex; syscall: fd */
	__u32 reason;       /* drop reason / old TCP state / syscall nr / qlen */
	__s32 status;       /* SCSI status / result / syscall return (clamped) */
	__u32 again;        /* syscall exit: EAGAIN retries folded into this call */
	__u16 sport, dport; /* host byte order, local / remote of the socket */
	__u16 family;       /* AF_INET / AF_INET6 */
	__u8 ca_state;      /* TCP_CA_Open .. TCP_CA_Loss, or new TCP state */
	__u8 opcode;        /* SCSI CDB opcode / iSCSI opcode */
	__u8 saddr[16], daddr[16]; /* local / remote of the socket */
	char comm[ISTRACE_COMM_LEN];
};

/* Filter configuration, written by the loader into .rodata before load. */
struct istrace_filter {
	__u32 netns;        /* 0: any */
	/* a second host in another namespace of this kernel (the testbed), traced by the same
	 * programs so that each runs once per call: 0 = none.  Its sockets are told by the
	 * event's netns, its tasks' and block events by F_PEER. */
	__u32 netns2;
	__u16 port;         /* iSCSI port (either end of the connection); 0: any */
	__u8 sys_entries;   /* 1: an event at each traced system call's entry as well */
	__u8 pad;
	__u32 block_dev;    /* dev_t of block events; 0: any */
	__u32 self_pid;     /* the loader: never traced */
	__u8 any_task;      /* 1: no task filter given: user probes accept every task */
	__u8 netns_tasks;   /* 1: syscalls of any task in `netns` */
	__u8 block_by_pid;  /* 1: block requests only when a traced tgid queued the bio */
	__u8 have_pids;     /* 1: the pids map is not empty */
	/* user-space struct offsets (bytes), see docs/probes.md */
	__u32 tgt_task_itt;     /* struct iscsi_task.req.itt (network order) */
	__u32 tgt_task_scmd;    /* struct iscsi_task.scmd */
	__u32 tgt_cmd_tag;      /* struct scsi_cmd.tag (= ITT as received, network order) */
	__u32 tgt_cmd_scb;      /* struct scsi_cmd.scb (CDB pointer) */
	__u32 tgt_cmd_dir;      /* struct scsi_cmd.data_dir */
	__u32 tgt_cmd_in_len;   /* struct scsi_cmd.in_sdb.length */
	__u32 tgt_cmd_out_len;  /* struct scsi_cmd.out_sdb.length */
	__u32 lib_task_cdb;     /* struct scsi_task.cdb (libiscsi, public header) */
	__u32 lib_task_xfer;    /* struct scsi_task.expxferlen */
	__u32 lib_task_itt;     /* struct scsi_task.itt */
	/* tcp_probe/rcv_space: a socket's event is written when cwnd, ssthresh, CA state
	 * or a window changed (8 KiB steps below 64 KiB, then at most 12.5%: wnd_key), or
	 * this long after its last one; 0 = always */
	__u64 tcp_sample_ns;
	/* tasks never traced by syscalls/user probes/block (the capture's own tcpdump...) */
	char exclude_comm[ISTRACE_MAX_EXCLUDE][ISTRACE_COMM_LEN];
	/* x86-64: the tgt_io_done uprobe sits this many bytes into target_cmd_io_done, on an
	 * instruction the kernel emulates (see the loader), with cmd in rdx; 0 = at entry */
	__u32 tgt_io_done_off;
	/* force a reader wake-up each time this many bytes have been written; 0 = 256 KiB */
	__u32 wakeup_bytes;
	/* tasks of this cgroup v2 (its descendants' tasks not included) are the traced ones:
	 * follows every fork of a workload started in it; 0 = no cgroup filter */
	__u64 cgroup_id;
};

#endif /* ISTRACE_EVENTS_H */

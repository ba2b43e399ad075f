// SPDX-License-Identifier: GPL-2.0
/*
 * One ring buffer record -> one row of columns (docs/schema.md section 1).  Kernel
 * numbers (CA states, TCP states, syscall numbers, drop reasons, dev_t) become the
 * names the decoder and the plots group by, so that no reader needs this kernel's
 * headers.  This runs once per event on the machine being measured: the names that
 * repeat (syscall event names, the connection text) are made once and kept.
 */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>

#include "probe.h"

static const char *const ca_names[] = { "Open", "Disorder", "CWR", "Recovery", "Loss" };
static const char *const tcp_states[] = {
	"?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT",
	"CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV",
};

static const char *ca_name(__u32 s) { return s < 5 ? ca_names[s] : "?"; }
static const char *tcp_state(__u32 s) { return s < 13 ? tcp_states[s] : "?"; }

/* Traced syscalls and what their arguments carry (SYS_* bits of istrace.bpf.c):
 * 1 = 3rd argument is the size, 2 = 2nd is a count of submissions, 4 = 4th is the offset.
 * Vector calls (readv...) carry no size at entry; their exit has the bytes moved. */
const struct syscall_info syscalls[] = {
	{ SYS_read, "read", 1 }, { SYS_write, "write", 1 },
	{ SYS_pread64, "pread64", 1 | 4 }, { SYS_pwrite64, "pwrite64", 1 | 4 },
	{ SYS_readv, "readv", 0 }, { SYS_writev, "writev", 0 },
	{ SYS_preadv, "preadv", 4 }, { SYS_pwritev, "pwritev", 4 },
	{ SYS_recvfrom, "recvfrom", 1 }, { SYS_sendto, "sendto", 1 },
	{ SYS_recvmsg, "recvmsg", 0 }, { SYS_sendmsg, "sendmsg", 0 },
#ifdef SYS_io_uring_enter
	{ SYS_io_uring_enter, "io_uring_enter", 2 },
#endif
	{ SYS_io_submit, "io_submit", 2 },
};
const size_t nsyscalls = sizeof(syscalls) / sizeof(syscalls[0]);

static const char *sys_name(__u32 nr)
{
	static char buf[24];
	size_t i;

	for (i = 0; i < nsyscalls; i++)
		if (syscalls[i].nr == (long)nr)
			return syscalls[i].name;
	snprintf(buf, sizeof(buf), "sys%u", nr);
	return buf;
}

struct evinfo { const char *layer, *name; };
static const struct evinfo evinfo[EV_MAX] = {
	[EV_TCP_PROBE] = { "tcp", "tcp_probe" },
	[EV_CONG_STATE] = { "tcp", "cong_state" },
	[EV_RETRANSMIT] = { "tcp", "retransmit" },
	[EV_SOCK_STATE] = { "tcp", "sock_state" },
	[EV_RCV_SPACE] = { "tcp", "rcv_space" },
	[EV_SKB_DROP] = { "net", "skb_drop" },
	[EV_QDISC_ENQUEUE] = { "net", "qdisc_enqueue" },
	[EV_BIO_QUEUE] = { "block", "bio_queue" },
	[EV_BIO_SPLIT] = { "block", "bio_split" },
	[EV_BIO_MERGE] = { "block", "bio_merge" },
	[EV_RQ_ISSUE] = { "block", "rq_issue" },
	[EV_RQ_COMPLETE] = { "block", "rq_complete" },
	[EV_SYS_ENTER] = { "syscall", "enter" },
	[EV_SYS_EXIT] = { "syscall", "exit" },
	[EV_SCSI_DISPATCH] = { "scsi", "scsi_dispatch" },
	[EV_SCSI_DONE] = { "scsi", "scsi_done" },
	[EV_KISCSI_QUEUE] = { "iscsi", "kiscsi_queue" },
	[EV_KISCSI_PDU] = { "iscsi", "kiscsi_pdu" },
	[EV_LIO_CMD_START] = { "scsi", "lio_cmd_start" },
	[EV_LIO_CMD_DONE] = { "scsi", "lio_cmd_done" },
	[EV_KISCSI_XMIT] = { "iscsi", "kiscsi_xmit" },
	[EV_LIO_CMD_RX] = { "iscsi", "lio_cmd_rx" },
	[EV_LIO_DATA_IN] = { "iscsi", "lio_data_in" },
	[EV_LIO_BS_SUBMIT] = { "scsi", "lio_bs_submit" },
	[EV_USDT_ISSUE] = { "scsi", "cmd_issue" },
	[EV_USDT_FIRST_DATA] = { "scsi", "cmd_first_data" },
	[EV_USDT_DONE] = { "scsi", "cmd_done" },
	[EV_LIB_CMD] = { "iscsi", "lib_cmd_issue" },
	[EV_LIB_QUEUE_PDU] = { "iscsi", "lib_queue_pdu" },
	[EV_TGT_RX] = { "iscsi", "tgt_rx" },
	[EV_TGT_TX] = { "iscsi", "tgt_tx" },
	[EV_TGT_EXECUTE] = { "iscsi", "tgt_execute" },
	[EV_TGT_QUEUE] = { "scsi", "tgt_cmd_queue" },
	[EV_TGT_BS_SUBMIT] = { "scsi", "tgt_bs_submit" },
	[EV_TGT_IO_DONE] = { "scsi", "tgt_io_done" },
};

static void fmt_addr(char *buf, size_t n, int family, const __u8 *a, __u16 port)
{
	char tmp[INET6_ADDRSTRLEN];

	/* RFC 5952 text (what inet_ntop and Python's ipaddress print), as the decoder does */
	if (family == AF_INET6 && inet_ntop(AF_INET6, a, tmp, sizeof(tmp)))
		snprintf(buf, n, "[%s]:%u", tmp, port);
	else
		snprintf(buf, n, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], port);
}

/* Whose event: a socket's by its namespace, a task's or block request's by F_PEER. */
static int stream_of(const struct istrace_event *e)
{
	if (nstreams < 2)
		return 0;
	if (e->flags & F_PEER)
		return 1;
	return (e->flags & F_CONN) && e->netns && e->netns == streams[1].netns;
}

int handle_event(void *ctx, void *data, size_t len)
{
	const struct istrace_event *e = data;
	const struct evinfo *info;
	char a[64], b[64], buf[112];
	bool block, syscall;
	__u32 f;

	(void)ctx;
	if (len < sizeof(*e) || e->type >= EV_MAX || !evinfo[e->type].name) {
		nbad++;
		return 0;
	}
	info = &evinfo[e->type];
	f = e->flags;
	block = !strcmp(info->layer, "block");
	syscall = !strcmp(info->layer, "syscall");
	cur = &streams[stream_of(e)];
	rec_clear();
	put_i(C_TS, (__s64)e->ts_ns + clock_offset_ns);
	put_s(C_HOST, cur->host);
	put_s(C_LAYER, info->layer);
	if (syscall) {
		/* "<call>_enter"/"<call>_exit", made once per call and kind */
		static char names[512][2][32];
		char *name = e->reason < 512 ? names[e->reason][e->type == EV_SYS_EXIT] : buf;

		if (!name[0] || name == buf)
			snprintf(name, 32, "%s_%s", sys_name(e->reason), info->name);
		put_s(C_EVENT, name);
	} else {
		put_s(C_EVENT, info->name);
	}
	put_u(C_PID, e->pid);
	{
		size_t n = strnlen(e->comm, ISTRACE_COMM_LEN);

		memcpy(buf, e->comm, n);
		buf[n] = 0;
		put_s(C_COMM, buf);
	}
	if (f & F_CONN) {
		/* initiator side first: the end not on the iSCSI port is the initiator */
		bool local_is_target = opt.port && e->sport == opt.port;

		/* the text of the last connection is kept: most events are on one */
		static struct { __u8 saddr[16], daddr[16]; __u16 sport, dport, family; } last_key;
		static char last_conn[VAL_MAX];
		struct { __u8 saddr[16], daddr[16]; __u16 sport, dport, family; } key;

		memset(&key, 0, sizeof(key));
		memcpy(key.saddr, e->saddr, 16);
		memcpy(key.daddr, e->daddr, 16);
		key.sport = e->sport;
		key.dport = e->dport;
		key.family = e->family;
		if (!last_conn[0] || memcmp(&key, &last_key, sizeof(key))) {
			fmt_addr(a, sizeof(a), e->family, e->saddr, e->sport);
			fmt_addr(b, sizeof(b), e->family, e->daddr, e->dport);
			snprintf(last_conn, sizeof(last_conn), "%.55s-%.55s",
				 local_is_target ? b : a, local_is_target ? a : b);
			memcpy(&last_key, &key, sizeof(key));
		}
		put_s(C_CONN, last_conn);
		if (e->cookie)
			put_u(C_COOKIE, e->cookie);
	}
	if (f & F_LBA)
		put_u(syscall ? C_OFFSET : C_LBA, e->lba);
	if (f & F_BYTES)
		put_u(C_BYTES, e->bytes);
	if (f & F_ITT)
		put_u(C_ITT, e->itt);
	if ((f & F_OPCODE) && !block)
		put_u(C_OPCODE, e->opcode);
	if (f & F_SEQ)
		put_u(C_SEQ, e->seq);
	if (f & F_ACK)
		put_u(C_ACK, e->ack);
	if (f & F_CWND) {
		put_u(C_CWND, e->cwnd);
		put_u(C_SSTHRESH, e->ssthresh);
		put_u(C_SRTT, e->srtt_us);
		put_u(C_INFLIGHT, e->inflight);
		put_u(C_SNDWND, e->snd_wnd);
	}
	if (f & (F_CWND | F_RWND))
		put_u(C_RWND, e->rwnd);
	if ((f & F_CA) && e->type != EV_SOCK_STATE)
		put_s(C_CA, ca_name(e->ca_state));
	if (f & F_LAT)
		put_u(C_LAT, e->lat_ns);
	if (f & F_DEV) {
		if (block)
			snprintf(buf, sizeof(buf), "%u:%u", e->dev >> 20, e->dev & 0xfffff);
		else
			snprintf(buf, sizeof(buf), "ifindex:%u", e->dev);
		put_s(C_DEV, buf);
	}
	switch (e->type) {
	case EV_SKB_DROP:
		put_s(C_REASON, drop_reason_name(e->reason));
		break;
	case EV_SOCK_STATE:
		snprintf(buf, sizeof(buf), "%s->%s", tcp_state(e->reason), tcp_state(e->ca_state));
		put_s(C_REASON, buf);
		break;
	case EV_CONG_STATE:
		snprintf(buf, sizeof(buf), "from %s", ca_name(e->reason));
		put_s(C_REASON, buf);
		break;
	case EV_QDISC_ENQUEUE:
		snprintf(buf, sizeof(buf), "qlen=%u", e->reason);
		put_s(C_REASON, buf);
		break;
	case EV_BIO_QUEUE: case EV_BIO_SPLIT: case EV_BIO_MERGE:
	case EV_RQ_ISSUE: case EV_RQ_COMPLETE: {
		static const char *const ops[] = { "read", "write", "flush", "discard" };
		const char *op = e->opcode < 4 ? ops[e->opcode] : "other";

		if (e->type == EV_BIO_SPLIT)
			snprintf(buf, sizeof(buf), "%s;split_at=%u", op, e->reason);
		else if (e->type == EV_BIO_MERGE)
			snprintf(buf, sizeof(buf), "%s;%s", op, e->reason ? "front" : "back");
		else
			snprintf(buf, sizeof(buf), "%s", op);
		put_s(C_REASON, buf);
		break;
	}
	default:
		break;
	}
	put_u(C_TID, e->tid);
	if (e->netns)
		put_u(C_NETNS, e->netns);
	if (e->type == EV_SYS_ENTER) {
		put_i(C_FD, e->status);
	} else if (e->type == EV_SYS_EXIT) {
		put_i(C_FD, (__s32)e->dev);
		put_i(C_RET, e->status);
	}
	if (e->type == EV_SYS_EXIT && e->again)
		put_u(C_AGAIN, e->again);
	else if (f & F_STATUS)
		put_i(C_STATUS, e->status);
	put_s(C_SOURCE, "probe");
	rec_write();
	cur->nevents++;
	return 0;
}

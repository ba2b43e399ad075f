// SPDX-License-Identifier: GPL-2.0
/*
 * istrace probes: every layer of an iSCSI path, one ring buffer, one record type
 * (istrace_events.h).  The loader (bpf/istrace-probe.c) picks per hook the first
 * variant that loads and attaches: tp_btf, then raw_tp (then kprobe for kernel
 * functions), and disables the rest.  Each variant is a thin wrapper around one
 * __always_inline handler, so the variants cannot drift apart.
 *
 * Filtering happens here, not in user space, so an untraced connection costs a
 * few loads and a compare: TCP/net events by network namespace inode and iSCSI
 * port; syscalls and user probes by traced tgid (pids map) or by the task's
 * network namespace; block requests by device and by who queued the bio.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/usdt.bpf.h>
#include "istrace_events.h"

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load (read-only in the kernel, so the verifier prunes). */
const volatile struct istrace_filter cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* resized by the loader (--ringbuf-mb) */
} events SEC(".maps");

/* Ring-buffer reservations that failed: events lost, per CPU, summed by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* tgids whose syscalls / user probes are traced. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ISTRACE_MAX_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* Syscall numbers worth tracing (filled by the loader: arch-specific numbers). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, __u8);
} sys_wanted SEC(".maps");

struct sys_start_val {
	__u64 ts;
	__u64 count;
	__u64 off;
	__u32 nr;
	__s32 fd;
	__u32 has_off;
	__u32 open; /* task storage: 1 between an emitted enter and its exit */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tid */
	__type(value, struct sys_start_val);
} sys_start SEC(".maps");

struct bio_key {
	__u64 sector;
	__u32 dev;
	__u32 pad;
};

/* Sectors whose bio a traced task queued: their requests are the ones we follow. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct bio_key);
	__type(value, __u8);
} bio_wanted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* struct request * */
	__type(value, __u64);
} rq_start SEC(".maps");

/* tgtd: target_cmd_queue time per (tgid, tag), closed by target_cmd_io_done. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u64);
} tgt_start SEC(".maps");

/* libiscsi: the scsi_task pointer between entry and return of iscsi_scsi_command_async. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} lib_task SEC(".maps");

/* Per socket: what its last tcp_probe / rcv_space event said (change-only output). */
struct sock_last {
	__u64 ts;
	__u64 rcv_ts;
	__u32 cwnd, ssthresh, snd_wnd, rwnd;
	__u32 space, rcvbuf;
	__u8 ca_state;
	__u8 pad[7];
};

/* A plain hash (an LRU lookup costs more, and this one runs per segment); entries go at
 * TCP_CLOSE (sock_state).  When full, new sockets just get an event per ACK. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* struct sock * */
	__type(value, struct sock_last);
} sock_last SEC(".maps");

/* The same state in the socket itself, for the tp_btf variants: a socket-local storage
 * lookup is a few loads (a hash lookup hashes the key and walks a bucket), it runs for
 * every segment of every traced connection, and it goes away with the socket. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sock_last);
} sock_last_sk SEC(".maps");

/* Syscall entry state per task, for the tp_btf variants: sys_exit runs for every syscall
 * of the host, and a task nobody traced has no storage, so its test is one NULL check. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_start_val);
} sys_start_task SEC(".maps");

/* ---------------------------------------------------------------- helpers */

static __always_inline struct istrace_event *ev_new(__u32 type)
{
	struct istrace_event *e;
	__u64 id;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		__u32 k = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &k);

		if (n)
			*n += 1;
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	id = bpf_get_current_pid_tgid();
	e->ts_ns = bpf_ktime_get_ns();
	e->type = type;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	return e;
}

/* Wake the reader only once per cfg.wakeup_bytes written (256 KiB): it polls every
 * 100 ms anyway, a forced wake-up is an irq_work (a self-IPI, about a microsecond in this
 * VM), and a reader draining while events are written makes the ring's consumer
 * position bounce between the CPUs.  The test is on the producer
 * position, which only grows: a test on the unread amount would fire for every event
 * while a slow reader drains around the threshold (measured: a traced read() 1230 ns,
 * 460 ns without wake-ups).  The window is two records wide so that two CPUs writing at
 * once do not both miss the crossing; one missed anyway is caught by the 100 ms poll. */
#define REC_BYTES (sizeof(struct istrace_event) + 8) /* + the ring's record header */

static __always_inline void ev_submit(struct istrace_event *e)
{
	__u64 step = cfg.wakeup_bytes ? cfg.wakeup_bytes : 256 * 1024;
	__u64 pos = bpf_ringbuf_query(&events, BPF_RB_PROD_POS);
	bool cross = pos >= 2 * REC_BYTES && pos / step != (pos - 2 * REC_BYTES) / step;

	bpf_ringbuf_submit(e, cross ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline __u32 current_netns(void)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();

	return BPF_CORE_READ(t, nsproxy, net_ns, ns.inum);
}

/* tp_btf programs: direct loads (nsproxy is NULL for an exiting task: the load of a
 * trusted pointer's field then reads 0, it does not fault) */
static __always_inline __u32 current_netns_btf(void)
{
	struct task_struct *t = bpf_get_current_task_btf();

	return t->nsproxy->net_ns->ns.inum;
}

static __always_inline bool comm_excluded(void)
{
	char comm[ISTRACE_COMM_LEN];
	int i, j;

	bpf_get_current_comm(comm, sizeof(comm));
	for (i = 0; i < ISTRACE_MAX_EXCLUDE; i++) {
		bool same = cfg.exclude_comm[i][0] != 0;

		for (j = 0; j < ISTRACE_COMM_LEN && same; j++) {
			if (comm[j] != cfg.exclude_comm[i][j])
				same = false;
			else if (!comm[j])
				break;
		}
		if (same)
			return true;
	}
	return false;
}

/* Syscalls and user-space probes: traced tgid, or any task in the traced netns. */
static __always_inline bool task_wanted_ex(bool btf)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (tgid == cfg.self_pid)
		return false;
	if (cfg.have_pids && bpf_map_lookup_elem(&pids, &tgid))
		return true;
	if (cfg.any_task)
		return !comm_excluded();
	/* the namespace test rejects other hosts' tasks before the costlier comm test */
	return cfg.netns_tasks && cfg.netns &&
	       (btf ? current_netns_btf() : current_netns()) == cfg.netns && !comm_excluded();
}

static __always_inline bool task_wanted(void)
{
	return task_wanted_ex(false);
}

static __always_inline bool ports_wanted(__u16 sport, __u16 dport)
{
	return !cfg.port || sport == cfg.port || dport == cfg.port;
}

static __always_inline bool sock_wanted(const struct sock *sk)
{
	__u16 family;

	if (!sk)
		return false;
	/* cheapest test first: most sockets on a busy host fail the port test */
	if (!ports_wanted(BPF_CORE_READ(sk, __sk_common.skc_num),
			  bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport))))
		return false;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return false;
	return !cfg.netns || BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum) == cfg.netns;
}

/* The same test with direct loads, for tp_btf programs whose socket pointer the
 * verifier knows (no helper call per field: these run for every packet of the host). */
static __always_inline bool sock_wanted_btf(const struct sock *sk)
{
	__u16 family;

	if (!sk)
		return false;
	if (!ports_wanted(sk->__sk_common.skc_num, bpf_ntohs(sk->__sk_common.skc_dport)))
		return false;
	/* then the namespace: on one machine with both ends, the other end's probe sees
	 * every segment of the connection too */
	if (cfg.netns && sk->__sk_common.skc_net.net->ns.inum != cfg.netns)
		return false;
	family = sk->__sk_common.skc_family;
	return family == AF_INET || family == AF_INET6;
}

static __always_inline void fill_conn(struct istrace_event *e, const struct sock *sk,
				      __u64 cookie)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	e->family = family;
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum);
	if (family == AF_INET) {
		bpf_core_read(e->saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(e->daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	/* Cookies are made lazily: a socket nobody asked about still reads 0 here. */
	e->cookie = cookie ? cookie : BPF_CORE_READ(sk, __sk_common.skc_cookie.counter);
	e->flags |= F_CONN;
}

static __always_inline void fill_cwnd(struct istrace_event *e, const struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	const struct inet_connection_sock *icsk = (const struct inet_connection_sock *)sk;
	__u32 out = BPF_CORE_READ(tp, packets_out);
	__u32 left = BPF_CORE_READ(tp, sacked_out) + BPF_CORE_READ(tp, lost_out);

	e->cwnd = BPF_CORE_READ(tp, snd_cwnd);
	e->ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
	/* tcp_sock keeps srtt_us scaled by 8; the tcp_probe tracepoint's `srtt`
	 * field is this value >> 3 already.  We read the socket, so shift once. */
	e->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	e->snd_wnd = BPF_CORE_READ(tp, snd_wnd);
	e->rwnd = BPF_CORE_READ(tp, rcv_wnd);
	/* tcp_packets_in_flight() */
	e->inflight = (out > left ? out - left : 0) + BPF_CORE_READ(tp, retrans_out);
	e->seq = BPF_CORE_READ(tp, snd_nxt);
	e->ack = BPF_CORE_READ(tp, snd_una);
	e->ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
	e->flags |= F_CWND | F_SEQ | F_ACK | F_CA;
}

static __always_inline __u32 be32(const __u8 *b)
{
	return ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
}

/* LBA and transfer length (blocks) of READ/WRITE/VERIFY 6/10/12/16 CDBs. */
static __always_inline void fill_cdb(struct istrace_event *e, const __u8 *c)
{
	__u8 op = c[0];

	e->opcode = op;
	e->flags |= F_OPCODE;
	switch (op) {
	case 0x08: case 0x0a: /* READ(6), WRITE(6) */
		e->lba = ((__u32)(c[1] & 0x1f) << 16) | ((__u32)c[2] << 8) | c[3];
		e->flags |= F_LBA;
		break;
	case 0x28: case 0x2a: case 0x2f: /* READ(10), WRITE(10), VERIFY(10) */
	case 0xa8: case 0xaa: /* READ(12), WRITE(12) */
		e->lba = be32(c + 2);
		e->flags |= F_LBA;
		break;
	case 0x88: case 0x8a: case 0x8f: /* READ(16), WRITE(16), VERIFY(16) */
		e->lba = ((__u64)be32(c + 2) << 32) | be32(c + 6);
		e->flags |= F_LBA;
		break;
	}
}

/* ---------------------------------------------------------------- TCP */

/* A window's change-only key: 8 KiB steps below 64 KiB, then 8 steps per octave (at
 * most 12.5% apart).  A window wobbling around a few MiB as the reader drains its buffer
 * is not news (it made 9 of 10 tcp_probe events at 16 KiB steps), one closing is; the
 * heartbeat still samples the exact value every cfg.tcp_sample_ns. */
static __always_inline __u32 wnd_key(__u32 w)
{
	__u32 e = 0, x = w;

	if (w < 65536)
		return w >> 13;
	if (x >> 16) {
		e += 16;
		x >>= 16;
	}
	if (x >> 8) {
		e += 8;
		x >>= 8;
	}
	if (x >> 4) {
		e += 4;
		x >>= 4;
	}
	if (x >> 2) {
		e += 2;
		x >>= 2;
	}
	if (x >> 1)
		e += 1;
	/* e: the highest set bit, 16..31; then the three bits below it */
	return 8 + ((e - 16) << 3) + ((w >> ((e - 3) & 31)) & 7);
}

/* Whether this tcp_probe hit is worth an event: something the study plots changed, or
 * the socket has been quiet for cfg.tcp_sample_ns (a heartbeat with srtt, inflight). */
static __always_inline bool tcp_probe_due(const struct sock *sk, struct sock_last *now)
{
	struct sock_last *last;
	__u64 key = (__u64)sk;

	now->ts = bpf_ktime_get_ns();
	last = bpf_map_lookup_elem(&sock_last, &key);
	if (last && now->ts - last->ts < cfg.tcp_sample_ns && last->cwnd == now->cwnd &&
	    last->ssthresh == now->ssthresh && last->snd_wnd == now->snd_wnd &&
	    last->rwnd == now->rwnd && last->ca_state == now->ca_state)
		return false;
	if (last) {
		last->ts = now->ts;
		last->cwnd = now->cwnd;
		last->ssthresh = now->ssthresh;
		last->snd_wnd = now->snd_wnd;
		last->rwnd = now->rwnd;
		last->ca_state = now->ca_state;
	} else {
		bpf_map_update_elem(&sock_last, &key, now, BPF_NOEXIST);
	}
	return true;
}

static __always_inline int on_tcp_probe(struct sock *sk, __u64 cookie)
{
	struct istrace_event *e;

	e = ev_new(EV_TCP_PROBE);
	if (!e)
		return 0;
	fill_conn(e, sk, cookie);
	fill_cwnd(e, sk);
	ev_submit(e);
	return 0;
}

/* Change-only test on the socket's own storage: the tp_btf variants' fast path.  The
 * clock is the socket's tcp_mstamp (us, refreshed by TCP at each segment sent or
 * received: at most one segment old here), a load instead of a helper call per hit. */
static __always_inline bool sample_due(struct sock_last *last, const struct sock_last *now,
				       __u64 ts)
{
	if (!last)
		return true; /* no storage (allocation failed): every hit is an event */
	if (last->ts && ts - last->ts < cfg.tcp_sample_ns / 1000 && last->cwnd == now->cwnd &&
	    last->ssthresh == now->ssthresh && last->snd_wnd == now->snd_wnd &&
	    last->rwnd == now->rwnd && last->ca_state == now->ca_state)
		return false;
	last->ts = ts;
	last->cwnd = now->cwnd;
	last->ssthresh = now->ssthresh;
	last->snd_wnd = now->snd_wnd;
	last->rwnd = now->rwnd;
	last->ca_state = now->ca_state;
	return true;
}

/* fill_conn + fill_cwnd with direct loads: tcp_probe_btf writes thousands of events a
 * second, and each BPF_CORE_READ above is a helper call. */
static __always_inline void fill_tcp_btf(struct istrace_event *e, const struct sock *sk,
					 const struct tcp_sock *tp, __u64 cookie)
{
	const struct inet_connection_sock *icsk = &tp->inet_conn;
	__u16 family = sk->__sk_common.skc_family;
	__u32 out = tp->packets_out, left = tp->sacked_out + tp->lost_out;

	e->family = family;
	e->sport = sk->__sk_common.skc_num;
	e->dport = bpf_ntohs(sk->__sk_common.skc_dport);
	e->netns = sk->__sk_common.skc_net.net->ns.inum;
	if (family == AF_INET) {
		__u32 a = sk->__sk_common.skc_rcv_saddr, b = sk->__sk_common.skc_daddr;

		__builtin_memcpy(e->saddr, &a, 4);
		__builtin_memcpy(e->daddr, &b, 4);
	} else {
		bpf_core_read(e->saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(e->daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	e->cookie = cookie;
	e->cwnd = tp->snd_cwnd;
	e->ssthresh = tp->snd_ssthresh;
	e->srtt_us = tp->srtt_us >> 3; /* kept x8 in the socket: shift once */
	e->snd_wnd = tp->snd_wnd;
	e->rwnd = tp->rcv_wnd;
	e->inflight = (out > left ? out - left : 0) + tp->retrans_out;
	e->seq = tp->snd_nxt;
	e->ack = tp->snd_una;
	e->ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	e->flags |= F_CONN | F_CWND | F_SEQ | F_ACK | F_CA;
}

/* tcp_probe runs for every segment received on the host: the tp_btf variant filters
 * with direct loads through the BTF-typed socket (no helper call per field) and keeps
 * its change-only state in the socket. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe_btf, struct sock *sk, const struct sk_buff *skb)
{
	const struct inet_connection_sock *icsk;
	const struct tcp_sock *tp;
	struct istrace_event *e;
	struct sock_last now;

	if (!sock_wanted_btf(sk))
		return 0;
	tp = bpf_skc_to_tcp_sock(sk); /* the verifier knows only struct sock here */
	if (!tp)
		return 0;
	if (cfg.tcp_sample_ns) {
		icsk = &tp->inet_conn;
		now.cwnd = tp->snd_cwnd;
		now.ssthresh = tp->snd_ssthresh;
		now.snd_wnd = wnd_key(tp->snd_wnd);
		now.rwnd = wnd_key(tp->rcv_wnd);
		now.ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
		if (!sample_due(bpf_sk_storage_get(&sock_last_sk, sk, NULL,
						   BPF_SK_STORAGE_GET_F_CREATE), &now,
				tp->tcp_mstamp))
			return 0;
	}
	e = ev_new(EV_TCP_PROBE);
	if (!e)
		return 0;
	fill_tcp_btf(e, sk, tp, bpf_get_socket_cookie(sk));
	ev_submit(e);
	return 0;
}

SEC("raw_tp/tcp_probe")
int BPF_PROG(tcp_probe_raw, struct sock *sk, const struct sk_buff *skb)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	const struct inet_connection_sock *icsk = (const struct inet_connection_sock *)sk;
	struct sock_last now = {};

	if (!sock_wanted(sk))
		return 0;
	if (cfg.tcp_sample_ns) {
		now.cwnd = BPF_CORE_READ(tp, snd_cwnd);
		now.ssthresh = BPF_CORE_READ(tp, snd_ssthresh);
		now.snd_wnd = wnd_key(BPF_CORE_READ(tp, snd_wnd));
		now.rwnd = wnd_key(BPF_CORE_READ(tp, rcv_wnd));
		now.ca_state = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state);
		if (!tcp_probe_due(sk, &now))
			return 0;
	}
	return on_tcp_probe(sk, 0);
}

/* Classic tracepoint (perf_event, needs tracefs): the last resort before giving up.
 * Its format fields are the tracepoint's own: `srtt` there is already microseconds
 * (the kernel shifted srtt_us >> 3 when filling it), so it is used as is. */
SEC("tracepoint/tcp/tcp_probe")
int tcp_probe_tp(struct trace_event_raw_tcp_probe *ctx)
{
	struct sock *sk = (struct sock *)ctx->skaddr;
	struct istrace_event *e;
	struct sock_last now = {};

	if (!ports_wanted(ctx->sport, ctx->dport) || !sock_wanted(sk))
		return 0;
	if (cfg.tcp_sample_ns) {
		now.cwnd = ctx->snd_cwnd;
		now.ssthresh = ctx->ssthresh;
		now.snd_wnd = wnd_key(ctx->snd_wnd);
		now.rwnd = wnd_key(ctx->rcv_wnd);
		now.ca_state = BPF_CORE_READ_BITFIELD_PROBED((struct inet_connection_sock *)sk,
							     icsk_ca_state);
		if (!tcp_probe_due(sk, &now))
			return 0;
	}
	e = ev_new(EV_TCP_PROBE);
	if (!e)
		return 0;
	fill_conn(e, sk, ctx->sock_cookie);
	fill_cwnd(e, sk);
	e->cwnd = ctx->snd_cwnd;
	e->ssthresh = ctx->ssthresh;
	e->snd_wnd = ctx->snd_wnd;
	e->rwnd = ctx->rcv_wnd;
	e->srtt_us = ctx->srtt; /* already us: no second shift */
	e->seq = ctx->snd_nxt;
	e->ack = ctx->snd_una;
	ev_submit(e);
	return 0;
}

static __always_inline int on_cong_state(struct sock *sk, __u8 state, __u64 cookie)
{
	struct istrace_event *e;

	e = ev_new(EV_CONG_STATE);
	if (!e)
		return 0;
	fill_conn(e, sk, cookie);
	fill_cwnd(e, sk);
	/* The tracepoint fires before icsk_ca_state is updated: old state is in the socket. */
	e->reason = e->ca_state;
	e->ca_state = state;
	e->flags |= F_REASON;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/tcp_cong_state_set")
int BPF_PROG(cong_state_btf, struct sock *sk, __u8 state)
{
	return sock_wanted_btf(sk) ? on_cong_state(sk, state, bpf_get_socket_cookie(sk)) : 0;
}

SEC("raw_tp/tcp_cong_state_set")
int BPF_PROG(cong_state_raw, struct sock *sk, __u8 state)
{
	return sock_wanted(sk) ? on_cong_state(sk, state, 0) : 0;
}

static __always_inline int on_retransmit(const struct sock *sk, const struct sk_buff *skb,
					 __u64 cookie)
{
	struct istrace_event *e;
	__u32 seqs[2] = {}; /* struct tcp_skb_cb starts with seq, end_seq */

	e = ev_new(EV_RETRANSMIT);
	if (!e)
		return 0;
	fill_conn(e, sk, cookie);
	fill_cwnd(e, sk);
	bpf_core_read(seqs, sizeof(seqs), &skb->cb);
	e->seq = seqs[0];
	e->bytes = seqs[1] - seqs[0];
	e->flags |= F_BYTES;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(retransmit_btf, const struct sock *sk, const struct sk_buff *skb)
{
	return sock_wanted_btf(sk) ? on_retransmit(sk, skb, bpf_get_socket_cookie((void *)sk)) : 0;
}

SEC("raw_tp/tcp_retransmit_skb")
int BPF_PROG(retransmit_raw, const struct sock *sk, const struct sk_buff *skb)
{
	return sock_wanted(sk) ? on_retransmit(sk, skb, 0) : 0;
}

static __always_inline int on_sock_state(const struct sock *sk, int old, int new, __u64 cookie)
{
	struct istrace_event *e;

	__u64 key = (__u64)sk;

	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return 0;
	if (new == 7) /* TCP_CLOSE */
		bpf_map_delete_elem(&sock_last, &key);
	e = ev_new(EV_SOCK_STATE);
	if (!e)
		return 0;
	fill_conn(e, sk, cookie);
	e->reason = old;
	e->ca_state = new;
	e->flags |= F_REASON;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sock_state_btf, const struct sock *sk, int old, int new)
{
	return sock_wanted_btf(sk) ? on_sock_state(sk, old, new, bpf_get_socket_cookie((void *)sk)) : 0;
}

SEC("raw_tp/inet_sock_set_state")
int BPF_PROG(sock_state_raw, const struct sock *sk, int old, int new)
{
	return sock_wanted(sk) ? on_sock_state(sk, old, new, 0) : 0;
}

static __always_inline int emit_rcv_space(struct sock *sk, __u32 space, __u32 rcvbuf,
					  __u64 cookie)
{
	struct istrace_event *e;

	e = ev_new(EV_RCV_SPACE);
	if (!e)
		return 0;
	fill_conn(e, sk, cookie);
	e->rwnd = space;
	e->bytes = rcvbuf;
	e->flags |= F_RWND | F_BYTES;
	ev_submit(e);
	return 0;
}

/* Called on every read by the application: write only what autotuning changed (or a
 * heartbeat every cfg.tcp_sample_ns).  Returns whether an event is due. */
static __always_inline bool rcv_space_due(struct sock_last *last, __u32 space, __u32 rcvbuf,
					  __u64 now)
{
	if (last->rcv_ts && last->space == space && last->rcvbuf == rcvbuf &&
	    now - last->rcv_ts < cfg.tcp_sample_ns)
		return false;
	last->space = space;
	last->rcvbuf = rcvbuf;
	last->rcv_ts = now;
	return true;
}

SEC("tp_btf/tcp_rcv_space_adjust")
int BPF_PROG(rcv_space_btf, struct sock *sk)
{
	const struct tcp_sock *tp;
	struct sock_last *last;
	__u32 space, rcvbuf;

	if (!sock_wanted_btf(sk))
		return 0;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	space = tp->rcvq_space.space;
	rcvbuf = sk->sk_rcvbuf;
	if (cfg.tcp_sample_ns) {
		last = bpf_sk_storage_get(&sock_last_sk, sk, NULL, BPF_SK_STORAGE_GET_F_CREATE);
		/* tcp_mstamp: see sample_due */
		if (last && !rcv_space_due(last, space, rcvbuf, tp->tcp_mstamp * 1000))
			return 0;
	}
	return emit_rcv_space(sk, space, rcvbuf, bpf_get_socket_cookie(sk));
}

SEC("raw_tp/tcp_rcv_space_adjust")
int BPF_PROG(rcv_space_raw, struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	struct sock_last *last, init = {};
	__u64 key = (__u64)sk;
	__u32 space, rcvbuf;

	if (!sock_wanted(sk))
		return 0;
	space = BPF_CORE_READ(tp, rcvq_space.space);
	rcvbuf = BPF_CORE_READ(sk, sk_rcvbuf);
	if (cfg.tcp_sample_ns) {
		last = bpf_map_lookup_elem(&sock_last, &key);
		if (last && !rcv_space_due(last, space, rcvbuf, bpf_ktime_get_ns()))
			return 0;
		if (!last) {
			init.space = space;
			init.rcvbuf = rcvbuf;
			init.rcv_ts = bpf_ktime_get_ns();
			bpf_map_update_elem(&sock_last, &key, &init, BPF_ANY);
		}
	}
	return emit_rcv_space(sk, space, rcvbuf, 0);
}

/* ---------------------------------------------------------------- net: drops, qdisc */

/* A dropped skb without a socket (e.g. on receive): take the ports from its headers. */
static __always_inline bool skb_headers(struct istrace_event *e, const struct sk_buff *skb)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 nh = BPF_CORE_READ(skb, network_header);
	__u16 proto = bpf_ntohs(BPF_CORE_READ(skb, protocol));
	__u16 ports[2] = {};
	__u8 vhl = 0, l4 = 0;
	__u32 thoff;

	if (proto == ETH_P_IP) {
		bpf_probe_read_kernel(&vhl, 1, head + nh);
		bpf_probe_read_kernel(&l4, 1, head + nh + 9);
		if (l4 != IPPROTO_TCP)
			return false;
		bpf_probe_read_kernel(e->saddr, 4, head + nh + 12);
		bpf_probe_read_kernel(e->daddr, 4, head + nh + 16);
		thoff = nh + (vhl & 0xf) * 4;
		e->family = AF_INET;
	} else if (proto == ETH_P_IPV6) {
		bpf_probe_read_kernel(&l4, 1, head + nh + 6);
		if (l4 != IPPROTO_TCP) /* extension headers: not followed */
			return false;
		bpf_probe_read_kernel(e->saddr, 16, head + nh + 8);
		bpf_probe_read_kernel(e->daddr, 16, head + nh + 24);
		thoff = nh + 40;
		e->family = AF_INET6;
	} else {
		return false;
	}
	bpf_probe_read_kernel(ports, sizeof(ports), head + thoff);
	e->sport = bpf_ntohs(ports[0]);
	e->dport = bpf_ntohs(ports[1]);
	e->flags |= F_CONN;
	return ports_wanted(e->sport, e->dport);
}

static __always_inline int on_kfree_skb(struct sk_buff *skb, __u32 reason)
{
	struct istrace_event *e;
	struct sock *sk = BPF_CORE_READ(skb, sk);
	struct net_device *dev = BPF_CORE_READ(skb, dev);
	__u32 ns;

	if (sk) {
		if (!sock_wanted(sk))
			return 0;
	} else {
		if (!dev)
			return 0;
		ns = BPF_CORE_READ(dev, nd_net.net, ns.inum);
		if (cfg.netns && ns != cfg.netns)
			return 0;
	}
	e = ev_new(EV_SKB_DROP);
	if (!e)
		return 0;
	if (sk) {
		fill_conn(e, sk, 0);
	} else if (!skb_headers(e, skb)) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	if (dev) {
		e->dev = BPF_CORE_READ(dev, ifindex);
		e->flags |= F_DEV;
	}
	e->bytes = BPF_CORE_READ(skb, len);
	e->reason = reason;
	e->flags |= F_REASON | F_BYTES;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(kfree_skb_btf, struct sk_buff *skb, void *location, int reason)
{
	return on_kfree_skb(skb, reason);
}

SEC("raw_tp/kfree_skb")
int BPF_PROG(kfree_skb_raw, struct sk_buff *skb, void *location, int reason)
{
	return on_kfree_skb(skb, reason);
}

static __always_inline int on_qdisc_enqueue(struct Qdisc *q, struct sk_buff *skb)
{
	struct istrace_event *e;
	struct sock *sk = BPF_CORE_READ(skb, sk);
	__u32 qlen;

	if (!sock_wanted(sk))
		return 0;
	qlen = BPF_CORE_READ(q, q.qlen);
	if (!qlen) /* nothing waits: no local queueing to report */
		return 0;
	e = ev_new(EV_QDISC_ENQUEUE);
	if (!e)
		return 0;
	fill_conn(e, sk, 0);
	e->reason = qlen;
	e->bytes = BPF_CORE_READ(q, qstats.backlog);
	e->dev = BPF_CORE_READ(q, dev_queue, dev, ifindex);
	e->flags |= F_REASON | F_BYTES | F_DEV;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/qdisc_enqueue")
int BPF_PROG(qdisc_enqueue_btf, struct Qdisc *q, const struct netdev_queue *txq,
	     struct sk_buff *skb)
{
	return on_qdisc_enqueue(q, skb);
}

SEC("raw_tp/qdisc_enqueue")
int BPF_PROG(qdisc_enqueue_raw, struct Qdisc *q, const struct netdev_queue *txq,
	     struct sk_buff *skb)
{
	return on_qdisc_enqueue(q, skb);
}

/* ---------------------------------------------------------------- block */

static __always_inline __u32 disk_dev(struct gendisk *d)
{
	/* dev_t as the kernel encodes it (MKDEV: major << 20 | minor) */
	return ((__u32)BPF_CORE_READ(d, major) << 20) | (__u32)BPF_CORE_READ(d, first_minor);
}

static __always_inline int on_bio(struct bio *bio, __u32 type, __u32 extra)
{
	struct istrace_event *e;
	struct bio_key k = {};
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	k.dev = disk_dev(BPF_CORE_READ(bio, bi_bdev, bd_disk));
	if (cfg.block_dev && k.dev != cfg.block_dev)
		return 0;
	if (cfg.block_by_pid && !bpf_map_lookup_elem(&pids, &tgid) &&
	    !(cfg.netns_tasks && cfg.netns && current_netns() == cfg.netns && !comm_excluded()))
		return 0;
	k.sector = BPF_CORE_READ(bio, bi_iter.bi_sector);
	if (type == EV_BIO_QUEUE) {
		__u8 one = 1;

		bpf_map_update_elem(&bio_wanted, &k, &one, BPF_ANY);
	}
	e = ev_new(type);
	if (!e)
		return 0;
	e->dev = k.dev;
	e->lba = k.sector;
	e->bytes = BPF_CORE_READ(bio, bi_iter.bi_size);
	e->opcode = BPF_CORE_READ(bio, bi_opf) & 0xff; /* REQ_OP_READ 0, WRITE 1 */
	e->reason = extra;
	e->flags |= F_DEV | F_LBA | F_BYTES | F_OPCODE | F_REASON;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(bio_queue_btf, struct bio *bio) { return on_bio(bio, EV_BIO_QUEUE, 0); }
SEC("raw_tp/block_bio_queue")
int BPF_PROG(bio_queue_raw, struct bio *bio) { return on_bio(bio, EV_BIO_QUEUE, 0); }
/* reason = the sector where the bio was split */
SEC("tp_btf/block_split")
int BPF_PROG(bio_split_btf, struct bio *bio, unsigned int at) { return on_bio(bio, EV_BIO_SPLIT, at); }
SEC("raw_tp/block_split")
int BPF_PROG(bio_split_raw, struct bio *bio, unsigned int at) { return on_bio(bio, EV_BIO_SPLIT, at); }
/* reason = 0 back merge, 1 front merge */
SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(bio_backmerge_btf, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 0); }
SEC("raw_tp/block_bio_backmerge")
int BPF_PROG(bio_backmerge_raw, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 0); }
SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(bio_frontmerge_btf, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 1); }
SEC("raw_tp/block_bio_frontmerge")
int BPF_PROG(bio_frontmerge_raw, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 1); }

static __always_inline int on_rq_issue(struct request *rq)
{
	struct istrace_event *e;
	struct bio_key k = {};
	__u64 key = (__u64)rq, now;

	k.dev = disk_dev(BPF_CORE_READ(rq, q, disk));
	if (cfg.block_dev && k.dev != cfg.block_dev)
		return 0;
	k.sector = BPF_CORE_READ(rq, __sector);
	/* Requests are issued from whatever context runs the queue: follow those
	 * whose first bio a traced task queued. */
	if (cfg.block_by_pid && !bpf_map_lookup_elem(&bio_wanted, &k))
		return 0;
	e = ev_new(EV_RQ_ISSUE);
	if (!e)
		return 0;
	now = e->ts_ns;
	bpf_map_update_elem(&rq_start, &key, &now, BPF_ANY);
	e->dev = k.dev;
	e->lba = k.sector;
	e->bytes = BPF_CORE_READ(rq, __data_len);
	e->opcode = BPF_CORE_READ(rq, cmd_flags) & 0xff;
	e->flags |= F_DEV | F_LBA | F_BYTES | F_OPCODE;
	ev_submit(e);
	return 0;
}

static __always_inline int on_rq_complete(struct request *rq, int error, unsigned int nr_bytes)
{
	struct istrace_event *e;
	__u64 key = (__u64)rq, *start;

	start = bpf_map_lookup_elem(&rq_start, &key);
	if (!start)
		return 0;
	e = ev_new(EV_RQ_COMPLETE);
	if (!e) {
		bpf_map_delete_elem(&rq_start, &key);
		return 0;
	}
	e->lat_ns = e->ts_ns - *start;
	bpf_map_delete_elem(&rq_start, &key);
	e->dev = disk_dev(BPF_CORE_READ(rq, q, disk));
	e->lba = BPF_CORE_READ(rq, __sector);
	e->bytes = nr_bytes;
	e->opcode = BPF_CORE_READ(rq, cmd_flags) & 0xff;
	e->status = error;
	e->flags |= F_DEV | F_LBA | F_BYTES | F_OPCODE | F_LAT | F_STATUS;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(rq_issue_btf, struct request *rq) { return on_rq_issue(rq); }
SEC("raw_tp/block_rq_issue")
int BPF_PROG(rq_issue_raw, struct request *rq) { return on_rq_issue(rq); }
SEC("tp_btf/block_rq_complete")
int BPF_PROG(rq_complete_btf, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, error, nr_bytes);
}
SEC("raw_tp/block_rq_complete")
int BPF_PROG(rq_complete_raw, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, error, nr_bytes);
}

/* ---------------------------------------------------------------- syscalls */

/* sys_wanted values: which arguments carry what (set by the loader per syscall) */
#define SYS_ARG3_SIZE 1   /* read/write/pread64/recvfrom/sendto: (fd, buf, size, ...) */
#define SYS_ARG2_COUNT 2  /* io_uring_enter(fd, to_submit), io_submit(ctx, nr) */
#define SYS_ARG4_OFFSET 4 /* pread64/pwrite64/preadv/pwritev: file offset */

static __always_inline int on_sys_enter(struct pt_regs *regs, long id, bool btf)
{
	struct sys_start_val v = {}, *slot;
	struct istrace_event *e;
	__u32 nr = id, tid;
	__u8 *want, w;

	if (id < 0 || id >= 512)
		return 0;
	want = bpf_map_lookup_elem(&sys_wanted, &nr);
	if (!want || !*want || !task_wanted_ex(btf))
		return 0;
	w = *want;
	tid = (__u32)bpf_get_current_pid_tgid();
	v.nr = nr;
	/* tp_btf: regs is a BTF pointer, the arguments are plain loads; raw_tp: helpers */
	v.fd = btf ? PT_REGS_PARM1_SYSCALL(regs) : PT_REGS_PARM1_CORE_SYSCALL(regs);
	if (w & SYS_ARG3_SIZE)
		v.count = btf ? PT_REGS_PARM3_SYSCALL(regs) : PT_REGS_PARM3_CORE_SYSCALL(regs);
	else if (w & SYS_ARG2_COUNT)
		v.count = btf ? PT_REGS_PARM2_SYSCALL(regs) : PT_REGS_PARM2_CORE_SYSCALL(regs);
	if (w & SYS_ARG4_OFFSET) {
		v.off = btf ? PT_REGS_PARM4_SYSCALL(regs) : PT_REGS_PARM4_CORE_SYSCALL(regs);
		v.has_off = 1;
	}
	e = ev_new(EV_SYS_ENTER);
	if (!e)
		return 0;
	v.ts = e->ts_ns;
	v.open = 1; /* open: sys_exit of this task emits */
	if (btf) {
		slot = bpf_task_storage_get(&sys_start_task, bpf_get_current_task_btf(), NULL,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (slot)
			*slot = v;
	} else {
		bpf_map_update_elem(&sys_start, &tid, &v, BPF_ANY);
	}
	e->reason = nr;
	e->status = v.fd;
	e->flags |= F_REASON | F_STATUS;
	if (w & (SYS_ARG3_SIZE | SYS_ARG2_COUNT)) {
		e->bytes = v.count;
		e->flags |= F_BYTES;
	}
	if (v.has_off) {
		e->lba = v.off; /* printed as "offset" (bytes) for syscalls */
		e->flags |= F_LBA;
	}
	ev_submit(e);
	return 0;
}

static __always_inline int emit_sys_exit(const struct sys_start_val *v, long ret)
{
	struct istrace_event *e = ev_new(EV_SYS_EXIT);

	if (!e)
		return 0;
	e->reason = v->nr;
	e->lat_ns = e->ts_ns - v->ts;
	if (v->has_off) {
		e->lba = v->off;
		e->flags |= F_LBA;
	}
	e->bytes = ret > 0 ? ret : 0;
	e->status = ret < -0x7fffffffL ? -0x7fffffff : (ret > 0x7fffffffL ? 0x7fffffff : ret);
	e->flags |= F_REASON | F_BYTES | F_STATUS | F_LAT;
	ev_submit(e);
	return 0;
}

/* every syscall of the host exits here: a task never traced has no storage at all */
static __always_inline int on_sys_exit_btf(long ret)
{
	struct sys_start_val *v;

	v = bpf_task_storage_get(&sys_start_task, bpf_get_current_task_btf(), NULL, 0);
	if (!v || !v->open)
		return 0;
	v->open = 0;
	return emit_sys_exit(v, ret);
}

static __always_inline int on_sys_exit_raw(long ret)
{
	struct sys_start_val *v;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	v = bpf_map_lookup_elem(&sys_start, &tid);
	if (!v)
		return 0;
	emit_sys_exit(v, ret);
	bpf_map_delete_elem(&sys_start, &tid);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id) { return on_sys_enter(regs, id, true); }
SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id) { return on_sys_enter(regs, id, false); }
SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret) { return on_sys_exit_btf(ret); }
SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs *regs, long ret) { return on_sys_exit_raw(ret); }

/* ---------------------------------------------------------------- SCSI / iSCSI, kernel */
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

SEC("raw_tp/target_sequencer_start")
int BPF_PROG(lio_start_raw, void *cmd) { return on_se_cmd(cmd, EV_LIO_CMD_START); }
SEC("raw_tp/target_cmd_complete")
int BPF_PROG(lio_done_raw, void *cmd) { return on_se_cmd(cmd, EV_LIO_CMD_DONE); }

/* ---------------------------------------------------------------- USDT: istrace gen */

static __always_inline int on_usdt(__u32 type, long itt, long lba, long bytes, long status,
				   bool has_status)
{
	struct istrace_event *e;

	if (!task_wanted())
		return 0;
	e = ev_new(type);
	if (!e)
		return 0;
	e->itt = itt;
	e->lba = lba;
	e->bytes = bytes;
	e->flags |= F_ITT | F_LBA | F_BYTES;
	if (has_status) {
		e->status = status;
		e->flags |= F_STATUS;
	}
	ev_submit(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(usdt_cmd_issue, long itt, long lba, long bytes)
{
	return on_usdt(EV_USDT_ISSUE, itt, lba, bytes, 0, false);
}

SEC("usdt")
int BPF_USDT(usdt_cmd_first_data, long itt, long lba, long bytes)
{
	return on_usdt(EV_USDT_FIRST_DATA, itt, lba, bytes, 0, false);
}

SEC("usdt")
int BPF_USDT(usdt_cmd_done, long itt, long lba, long bytes, long status)
{
	return on_usdt(EV_USDT_DONE, itt, lba, bytes, status, true);
}

/* ---------------------------------------------------------------- uprobes: tgtd */
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
	fill_cdb(e, cdb);
	e->itt = bpf_ntohl(itt);
	e->bytes = bpf_ntohl(len);
	e->flags |= F_ITT | F_BYTES;
	ev_submit(e);
	return 0;
}

static __always_inline int on_plain(__u32 type)
{
	struct istrace_event *e;

	if (!task_wanted())
		return 0;
	e = ev_new(type);
	if (e)
		ev_submit(e);
	return 0;
}

/* void iscsi_rx_handler(struct iscsi_connection *), iscsi_tx_handler(...) */
SEC("uprobe")
int BPF_KPROBE(tgt_rx) { return on_plain(EV_TGT_RX); }
SEC("uprobe")
int BPF_KPROBE(tgt_tx) { return on_plain(EV_TGT_TX); }

/* ---------------------------------------------------------------- uprobes: libiscsi */

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

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every layer's programs share: the filter the loader fills in (cfg), the ring
 * buffer and its lost counter, the traced tgids, and the helpers that reserve, fill
 * and submit an event.  A test here runs on every hook of the host, so each one is as
 * cheap as the verifier allows (see task_wanted_ex and sock_wanted_btf).
 */
#ifndef ISTRACE_COMMON_BPF_H
#define ISTRACE_COMMON_BPF_H

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
 * while a slow reader drains around the threshold (a traced read() then paid mostly for
 * wake-ups).  The window is two records wide so that two CPUs writing at
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

/* One of the traced hosts' namespaces (the second only on a one-kernel testbed). */
static __always_inline bool netns_traced(__u32 ns)
{
	return ns == cfg.netns || (cfg.netns2 && ns == cfg.netns2);
}

/* A task-context event of the second host: the loader writes it to that host's stream. */
static __always_inline void mark_peer_task(struct istrace_event *e)
{
	if (cfg.netns2 && current_netns() == cfg.netns2)
		e->flags |= F_PEER;
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
	if (cfg.cgroup_id)
		return bpf_get_current_cgroup_id() == cfg.cgroup_id && !comm_excluded();
	if (cfg.any_task)
		return !comm_excluded();
	/* the namespace test rejects other hosts' tasks before the costlier comm test */
	return cfg.netns_tasks && cfg.netns &&
	       netns_traced(btf ? current_netns_btf() : current_netns()) && !comm_excluded();
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
	return !cfg.netns || netns_traced(BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum));
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
	if (cfg.netns && !netns_traced(sk->__sk_common.skc_net.net->ns.inum))
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

/* An event with only the task fields (user probes whose arguments are private). */
static __always_inline int on_plain(__u32 type)
{
	struct istrace_event *e;

	if (!task_wanted())
		return 0;
	e = ev_new(type);
	if (e) {
		mark_peer_task(e);
		ev_submit(e);
	}
	return 0;
}

#endif

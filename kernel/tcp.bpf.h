/* SPDX-License-Identifier: GPL-2.0 */
/*
 * TCP: tcp_probe (cwnd, windows, RTT per ACK), congestion state changes, retransmits,
 * socket state changes and receive-buffer tuning.  tcp_probe runs for every segment of
 * every connection of the host, so its output is change-only per socket (sock_last).
 */
#ifndef ISTRACE_TCP_BPF_H
#define ISTRACE_TCP_BPF_H

#include "common.bpf.h"

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

/* The tp_btf and sock_ops variants' change-only test, on the socket's own storage. */
static __always_inline bool tcp_sample_due_btf(const struct sock *sk, const struct tcp_sock *tp)
{
	const struct inet_connection_sock *icsk = &tp->inet_conn;
	struct sock_last now;

	if (!cfg.tcp_sample_ns)
		return true;
	now.cwnd = tp->snd_cwnd;
	now.ssthresh = tp->snd_ssthresh;
	now.snd_wnd = wnd_key(tp->snd_wnd);
	now.rwnd = wnd_key(tp->rcv_wnd);
	now.ca_state = BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state);
	return sample_due(bpf_sk_storage_get(&sock_last_sk, (void *)sk, NULL,
					     BPF_SK_STORAGE_GET_F_CREATE), &now, tp->tcp_mstamp);
}

static __always_inline void emit_tcp_probe_btf(const struct sock *sk, const struct tcp_sock *tp,
					       __u64 cookie)
{
	struct istrace_event *e = ev_new(EV_TCP_PROBE);

	if (!e)
		return;
	fill_tcp_btf(e, sk, tp, cookie);
	ev_submit(e);
}

/* tcp_probe runs for every segment received on the host: the tp_btf variant filters
 * with direct loads through the BTF-typed socket (no helper call per field) and keeps
 * its change-only state in the socket. */
SEC("tp_btf/tcp_probe")
int BPF_PROG(tcp_probe_btf, struct sock *sk, const struct sk_buff *skb)
{
	const struct tcp_sock *tp;

	if (!sock_wanted_btf(sk))
		return 0;
	tp = bpf_skc_to_tcp_sock(sk); /* the verifier knows only struct sock here */
	if (tp && tcp_sample_due_btf(sk, tp))
		emit_tcp_probe_btf(sk, tp, bpf_get_socket_cookie(sk));
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

#endif

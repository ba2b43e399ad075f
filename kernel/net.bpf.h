/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Below TCP: packets the stack dropped (with the kernel's reason) and qdisc queueing,
 * the places where a segment TCP sent can wait or vanish before the wire.
 */
#ifndef ISTRACE_NET_BPF_H
#define ISTRACE_NET_BPF_H

#include "common.bpf.h"

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
	__u32 ns = 0;

	if (sk) {
		if (!sock_wanted(sk))
			return 0;
	} else {
		if (!dev)
			return 0;
		ns = BPF_CORE_READ(dev, nd_net.net, ns.inum);
		if (cfg.netns && !netns_traced(ns))
			return 0;
	}
	e = ev_new(EV_SKB_DROP);
	if (!e)
		return 0;
	if (cfg.netns2 && ns == cfg.netns2) /* no socket: the device's namespace says whose */
		e->flags |= F_PEER;
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

#endif

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cwnd per ACK only where it decides the transfer: a sock_ops program (attached to the
 * cgroup v2 root, so every socket of the host passes it once) turns on the RTT callback
 * for the iSCSI connections it is asked about and for no other socket.  The callback runs
 * when an ACK gives the socket an RTT sample: at the data sender, once per ACK; at the
 * data receiver only for the few ACKs of its own small sends.  tcp_probe, by contrast,
 * runs for every segment every socket of the host receives.
 *
 * The events are tcp_probe's (EV_TCP_PROBE, the same change-only sampling in the same
 * socket storage), so nothing downstream changes.  A connection established before the
 * program was attached never passes it: the loader falls back to tcp_probe when the
 * iSCSI port already has connections (probe_kernel.c).
 */
#ifndef ISTRACE_SOCKOPS_BPF_H
#define ISTRACE_SOCKOPS_BPF_H

#include "tcp.bpf.h"

#define SOCKOPS_ESTABLISHED_ACTIVE 4   /* BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB */
#define SOCKOPS_ESTABLISHED_PASSIVE 5  /* BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB */
#define SOCKOPS_RTT 12                 /* BPF_SOCK_OPS_RTT_CB */
#define SOCKOPS_RTT_CB_FLAG (1 << 3)   /* BPF_SOCK_OPS_RTT_CB_FLAG */

SEC("sockops")
int tcp_sockops(struct bpf_sock_ops *skops)
{
	const struct tcp_sock *tp;
	const struct sock *sk;
	struct bpf_sock *bsk;
	__u32 op = skops->op;

	if (op != SOCKOPS_ESTABLISHED_ACTIVE && op != SOCKOPS_ESTABLISHED_PASSIVE &&
	    op != SOCKOPS_RTT)
		return 1;
	bsk = skops->sk; /* once: the verifier checks this load against NULL, not a second */
	if (!bsk)
		return 1;
	tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return 1;
	sk = &tp->inet_conn.icsk_inet.sk;
	/* Every istrace-probe attached (one per end on the testbed) runs for every callback
	 * of a socket any of them turned on: each keeps to its own namespace and port. */
	if (!sock_wanted_btf(sk))
		return 1;
	if (op != SOCKOPS_RTT) {
		/* once per connection of the host: only the wanted ones get callbacks */
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | SOCKOPS_RTT_CB_FLAG);
		return 1;
	}
	if (tcp_sample_due_btf(sk, tp))
		emit_tcp_probe_btf(sk, tp, bpf_get_socket_cookie(skops));
	return 1;
}

#endif

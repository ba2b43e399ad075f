// SPDX-License-Identifier: GPL-2.0
/*
 * Test helper, not a probe: an XDP program that drops every DROP_EVERY-th TCP data
 * segment sent from the iSCSI port, to provoke retransmissions and congestion-state
 * changes on a path that has no loss emulator (no netem, no tc classifiers).
 * Attach on the initiator's interface:  ip link set dev DEV xdp obj istrace_drop.bpf.o sec xdp
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define DROP_EVERY 50 /* 2% of the data segments */
#define ISCSI_PORT 3260

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2); /* [0] data segments seen, [1] dropped */
	__type(key, __u32);
	__type(value, __u64);
} drop_stats SEC(".maps");

SEC("xdp")
int drop_some(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;
	__u32 k0 = 0, k1 = 1;
	__u64 *seen, *dropped, n;
	int payload;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->protocol != IPPROTO_TCP || ip->ihl < 5)
		return XDP_PASS;
	tcp = (void *)ip + ip->ihl * 4;
	if ((void *)(tcp + 1) > end || tcp->source != bpf_htons(ISCSI_PORT))
		return XDP_PASS;
	payload = (int)bpf_ntohs(ip->tot_len) - ip->ihl * 4 - tcp->doff * 4;
	if (payload <= 0)
		return XDP_PASS;
	seen = bpf_map_lookup_elem(&drop_stats, &k0);
	dropped = bpf_map_lookup_elem(&drop_stats, &k1);
	if (!seen || !dropped)
		return XDP_PASS;
	n = __sync_fetch_and_add(seen, 1) + 1;
	if (n % DROP_EVERY)
		return XDP_PASS;
	__sync_fetch_and_add(dropped, 1);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";

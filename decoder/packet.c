/* Packet parsing. Every length is checked against the captured length first; a packet cut
 * by the snap length still yields its TCP header when that much was captured, with
 * caplen < len telling the reassembler which payload bytes are missing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include "packet.h"

#include <pcap/dlt.h>
#include <string.h>

#ifndef DLT_LINUX_SLL2
#define DLT_LINUX_SLL2 276
#endif
#ifndef DLT_IPV4
#define DLT_IPV4 228
#endif
#ifndef DLT_IPV6
#define DLT_IPV6 229
#endif

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int packet_dlt_supported(int dlt)
{
	switch (dlt) {
	case DLT_EN10MB: case DLT_LINUX_SLL: case DLT_LINUX_SLL2: case DLT_RAW: case 101:
	case DLT_IPV4: case DLT_IPV6: case DLT_NULL: case DLT_LOOP:
		return 1;
	default:
		return 0;
	}
}

/* TCP header at p (avail captured bytes, seglen bytes on the wire from IP). */
static enum pkt_result parse_tcp(const uint8_t *p, uint32_t avail, uint32_t seglen,
				 struct tcp_seg *out)
{
	if (avail < 20)
		return PKT_SHORT;
	uint32_t hl = (uint32_t)(p[12] >> 4) * 4;
	out->sport = rd16(p);
	out->dport = rd16(p + 2);
	out->seq = rd32(p + 4);
	out->ack = rd32(p + 8);
	out->flags = p[13];
	out->win = rd16(p + 14);
	out->hlen = hl;
	out->seglen = seglen;
	out->tcp_avail = avail;
	out->tcp = p;
	out->hdr_seen = 1;
	if (seglen < 20 || hl < 20 || hl > seglen || avail < hl)
		return PKT_SHORT;
	out->payload = p + hl;
	out->len = seglen - hl;
	out->caplen = avail - hl < out->len ? avail - hl : out->len;
	return PKT_TCP;
}

/* IP packet at p: avail captured bytes, wire bytes from here on. */
static enum pkt_result parse_ip(const uint8_t *p, uint32_t avail, uint32_t wire,
				struct tcp_seg *out)
{
	if (avail < 1)
		return PKT_SHORT;
	unsigned v = p[0] >> 4;
	if (v == 4) {
		if (avail < 20)
			return PKT_SHORT;
		uint32_t ihl = (uint32_t)(p[0] & 0x0f) * 4;
		uint32_t tot = rd16(p + 2);
		if (ihl < 20 || avail < ihl)
			return PKT_SHORT;
		/* tot 0: a segmentation-offload super-packet; trust the wire length. */
		if (tot == 0)
			tot = wire;
		if (tot < ihl)
			return PKT_SHORT;
		if (tot > wire)
			tot = wire; /* claimed longer than what was on the wire: keep what was */
		uint16_t frag = rd16(p + 6);
		if (frag & 0x3fff)
			return PKT_FRAGMENT;
		if (p[9] != 6)
			return PKT_NOT_TCP;
		out->family = 4;
		memset(out->src, 0, 16);
		memset(out->dst, 0, 16);
		memcpy(out->src, p + 12, 4);
		memcpy(out->dst, p + 16, 4);
		uint32_t cap = avail < tot ? avail : tot;
		return parse_tcp(p + ihl, cap - ihl, tot - ihl, out);
	}
	if (v == 6) {
		if (avail < 40)
			return PKT_SHORT;
		uint32_t plen = rd16(p + 4);
		uint32_t total = plen ? 40 + plen : wire; /* 0: jumbogram, use what the wire had */
		if (total > wire)
			total = wire;
		uint8_t nh = p[6];
		uint32_t off = 40;
		memcpy(out->src, p + 8, 16);
		memcpy(out->dst, p + 24, 16);
		out->family = 6;
		/* Walk extension headers (bounded: each one advances off by >= 8). */
		for (int guard = 0; guard < 16; guard++) {
			if (nh == 6)
				break;
			if (nh == 44)
				return PKT_FRAGMENT;
			if (nh == 0 || nh == 43 || nh == 60 || nh == 135 || nh == 139 || nh == 140) {
				if (avail < off + 8 || total < off + 8)
					return PKT_SHORT;
				uint32_t l = ((uint32_t)p[off + 1] + 1) * 8;
				nh = p[off];
				off += l;
			} else if (nh == 51) { /* AH: length in 4-byte units minus 2 */
				if (avail < off + 8 || total < off + 8)
					return PKT_SHORT;
				uint32_t l = ((uint32_t)p[off + 1] + 2) * 4;
				nh = p[off];
				off += l;
			} else {
				return PKT_NOT_TCP;
			}
		}
		if (nh != 6)
			return PKT_NOT_TCP;
		if (off > total || off > avail)
			return PKT_SHORT;
		uint32_t cap = avail < total ? avail : total;
		return parse_tcp(p + off, cap - off, total - off, out);
	}
	return PKT_NOT_IP;
}

static enum pkt_result by_ethertype(uint16_t et, const uint8_t *p, uint32_t avail,
				    uint32_t wire, struct tcp_seg *out)
{
	if (et == 0x0800 || et == 0x86dd)
		return parse_ip(p, avail, wire, out);
	return PKT_NOT_IP;
}

enum pkt_result packet_parse(int dlt, const uint8_t *pkt, uint32_t caplen, uint32_t wirelen,
			     struct tcp_seg *out)
{
	if (wirelen < caplen)
		wirelen = caplen;
	out->hdr_seen = 0;
	switch (dlt) {
	case DLT_EN10MB: {
		if (caplen < 14)
			return PKT_SHORT;
		uint32_t off = 12;
		uint16_t et = rd16(pkt + off);
		/* 802.1Q, 802.1ad (QinQ) and the old 0x9100 tag, any depth the packet has. */
		while (et == 0x8100 || et == 0x88a8 || et == 0x9100) {
			off += 4;
			if (caplen < off + 2)
				return PKT_SHORT;
			et = rd16(pkt + off);
		}
		off += 2;
		return by_ethertype(et, pkt + off, caplen - off, wirelen - off, out);
	}
	case DLT_LINUX_SLL:
		if (caplen < 16)
			return PKT_SHORT;
		return by_ethertype(rd16(pkt + 14), pkt + 16, caplen - 16, wirelen - 16, out);
	case DLT_LINUX_SLL2:
		if (caplen < 20)
			return PKT_SHORT;
		return by_ethertype(rd16(pkt), pkt + 20, caplen - 20, wirelen - 20, out);
	case DLT_RAW:
	case 101:
	case DLT_IPV4:
	case DLT_IPV6:
		return parse_ip(pkt, caplen, wirelen, out);
	case DLT_NULL:
	case DLT_LOOP:
		/* 4-byte address family in host (NULL) or network (LOOP) order; the IP version
		 * nibble that follows says the same thing without guessing the byte order. */
		if (caplen < 4)
			return PKT_SHORT;
		return parse_ip(pkt + 4, caplen - 4, wirelen - 4, out);
	default:
		return PKT_BAD_LINK;
	}
}

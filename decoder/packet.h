/* Link layer -> IPv4/IPv6 -> TCP: find the TCP segment in one captured packet. */
#ifndef ISTRACE_PACKET_H
#define ISTRACE_PACKET_H
#include <stddef.h>
#include <stdint.h>

enum pkt_result {
	PKT_TCP = 0,
	PKT_NOT_IP,    /* ARP, unknown ethertype, ... */
	PKT_NOT_TCP,   /* UDP, ICMP, ... */
	PKT_FRAGMENT,  /* IP fragment: noted, skipped */
	PKT_SHORT,     /* captured bytes end before the TCP header does */
	PKT_BAD_LINK,  /* link type we do not read */
};

struct tcp_seg {
	uint8_t family;      /* 4 or 6 */
	uint8_t src[16], dst[16];
	uint16_t sport, dport;
	uint32_t seq, ack;
	uint8_t flags;       /* TCP flags byte */
	const uint8_t *payload;
	uint32_t len;        /* payload length on the wire */
	uint32_t caplen;     /* payload bytes actually captured (<= len) */
	/* The raw header, for the segments table (segments_out.c): set as soon as the fixed
	 * 20 TCP header bytes were captured, also when the result is PKT_SHORT (a bad data
	 * offset, options cut by the snap length). */
	uint8_t hdr_seen;
	uint16_t win;        /* window field, unscaled */
	uint32_t hlen;       /* data offset * 4, as the header says (may be < 20 when bogus) */
	uint32_t seglen;     /* TCP header + payload bytes on the wire (from the IP length) */
	uint32_t tcp_avail;  /* captured bytes from the TCP header on */
	const uint8_t *tcp;  /* the TCP header */
};

enum { TH_FIN = 0x01, TH_SYN = 0x02, TH_RST = 0x04, TH_PSH = 0x08, TH_ACK = 0x10 };

/* dlt: pcap_datalink(); wirelen: the packet's original length. */
enum pkt_result packet_parse(int dlt, const uint8_t *pkt, uint32_t caplen, uint32_t wirelen,
			     struct tcp_seg *out);
int packet_dlt_supported(int dlt);

#endif

/* Writes a pcap of one iSCSI session doing large sequential READ(16)s, as fast as the disk
 * takes it: Ethernet/IPv4/TCP, 1448-byte segments, Data-In PDUs of MaxRecvDataSegmentLength,
 * commands of 1-4 MiB, pure ACKs from the initiator every second data segment.
 *
 *   gen-reads --out FILE [--size-mb N] [--mrdsl BYTES] [--seed N] [--status-in-data 0|1|2]
 *
 * The same seed always gives the same packets, so a smaller --size-mb is an exact prefix of a
 * larger one (apart from the final command, which is always completed). Prints what it wrote as
 * key=value lines: packets, bytes, commands, pdus (the decoder must find exactly these).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSS 1448
#define HDRS (14 + 20 + 20)

struct gen {
	FILE *f;
	uint64_t ts_ns;
	uint32_t seq[2], ip_id;
	uint64_t packets, bytes, pdus, commands, data_segments;
	uint8_t frame[HDRS + MSS];
	/* t2i byte stream waiting to be cut into full segments */
	uint8_t pend[MSS];
	size_t pend_len;
	uint64_t rng;
};

static const uint8_t mac_i[6] = { 2, 0, 0, 0, 0, 1 }, mac_t[6] = { 2, 0, 0, 0, 0, 2 };
static const uint32_t ip_i = 0x0a4d0001, ip_t = 0x0a4d0002; /* 10.77.0.1, 10.77.0.2 */

static uint32_t rnd(struct gen *g)
{
	g->rng = g->rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(g->rng >> 33);
}

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void put32(uint8_t *p, uint32_t v) { put16(p, (uint16_t)(v >> 16)); put16(p + 2, (uint16_t)v); }
static void put64(uint8_t *p, uint64_t v) { put32(p, (uint32_t)(v >> 32)); put32(p + 4, (uint32_t)v); }

static void die(const char *what)
{
	fprintf(stderr, "gen-reads: %s: %s\n", what, strerror(errno));
	exit(2);
}

/* One frame, direction 0 = i2t, 1 = t2i, payload len bytes already at frame+HDRS. */
static void emit(struct gen *g, int dir, uint8_t flags, size_t len)
{
	uint8_t *e = g->frame, *ip = e + 14, *tcp = ip + 20;
	uint32_t src = dir ? ip_t : ip_i, dst = dir ? ip_i : ip_t;

	memcpy(e, dir ? mac_i : mac_t, 6);
	memcpy(e + 6, dir ? mac_t : mac_i, 6);
	put16(e + 12, 0x0800);
	ip[0] = 0x45; ip[1] = 0;
	put16(ip + 2, (uint16_t)(40 + len));
	put16(ip + 4, (uint16_t)g->ip_id++);
	put16(ip + 6, 0x4000);
	ip[8] = 64; ip[9] = 6;
	put16(ip + 10, 0);
	put32(ip + 12, src);
	put32(ip + 16, dst);
	uint32_t sum = 0;
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)ip[i] << 8 | ip[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	put16(ip + 10, (uint16_t)~sum);
	put16(tcp, dir ? 3260 : 40312);
	put16(tcp + 2, dir ? 40312 : 3260);
	put32(tcp + 4, g->seq[dir]);
	put32(tcp + 8, g->seq[!dir]);
	tcp[12] = 5 << 4; tcp[13] = flags;
	put16(tcp + 14, 65535);
	put32(tcp + 16, 0); /* checksum left to "offload", as a capture on the sender shows */
	g->seq[dir] += (uint32_t)len + ((flags & 0x03) ? 1 : 0);

	uint32_t caplen = (uint32_t)(HDRS + len);
	uint32_t rec[4] = { (uint32_t)(g->ts_ns / 1000000000), (uint32_t)(g->ts_ns % 1000000000 / 1000),
			    caplen, caplen };
	if (fwrite(rec, sizeof rec, 1, g->f) != 1 || fwrite(g->frame, caplen, 1, g->f) != 1)
		die("write");
	/* ~10 Gbit/s wire time per frame */
	g->ts_ns += (uint64_t)(caplen + 24) * 8 / 10;
	g->packets++;
	g->bytes += 16 + caplen;
}

static void ack(struct gen *g)
{
	emit(g, 0, 0x10, 0);
}

/* Append bytes to the t2i stream; full segments go out at once. data == NULL: payload bytes
 * whose value does not matter (a fixed pattern, no per-byte work). */
static void t2i_bytes(struct gen *g, const uint8_t *data, size_t len)
{
	while (len) {
		size_t n = MSS - g->pend_len < len ? MSS - g->pend_len : len;
		if (data)
			memcpy(g->pend + g->pend_len, data, n);
		else
			memset(g->pend + g->pend_len, 0x5a, n);
		g->pend_len += n;
		len -= n;
		if (data)
			data += n;
		if (g->pend_len == MSS) {
			memcpy(g->frame + HDRS, g->pend, MSS);
			emit(g, 1, 0x10, MSS);
			g->pend_len = 0;
			if (++g->data_segments % 2 == 0)
				ack(g);
		}
	}
}

static void t2i_flush(struct gen *g)
{
	if (g->pend_len) {
		memcpy(g->frame + HDRS, g->pend, g->pend_len);
		emit(g, 1, 0x18, g->pend_len);
		g->pend_len = 0;
		ack(g);
	}
}

static void i2t_pdu(struct gen *g, const uint8_t *pdu, size_t len)
{
	memcpy(g->frame + HDRS, pdu, len);
	emit(g, 0, 0x18, len);
	g->pdus++;
}

static size_t kv(uint8_t *p, const char *text)
{
	/* text holds "k=v\n" lines; on the wire each pair ends with NUL */
	size_t n = strlen(text);
	memcpy(p, text, n);
	for (size_t i = 0; i < n; i++)
		if (p[i] == '\n')
			p[i] = 0;
	while (n % 4)
		p[n++] = 0;
	return n;
}

static void login(struct gen *g, uint32_t mrdsl)
{
	uint8_t pdu[1024];
	char text[512];
	memset(pdu, 0, sizeof pdu);
	snprintf(text, sizeof text,
		 "InitiatorName=iqn.2026-11.istrace:bench\nTargetName=iqn.2026-11.istrace:lun\n"
		 "SessionType=Normal\nHeaderDigest=None\nDataDigest=None\n"
		 "MaxRecvDataSegmentLength=%u\nImmediateData=Yes\nInitialR2T=Yes\n"
		 "MaxBurstLength=16776192\nFirstBurstLength=262144\n", mrdsl);
	size_t raw = strlen(text);
	size_t n = kv(pdu + 48, text);
	pdu[0] = 0x43; pdu[1] = 0x87; /* immediate login, T, CSG=1 NSG=3 */
	pdu[5] = (uint8_t)(raw >> 16); pdu[6] = (uint8_t)(raw >> 8); pdu[7] = (uint8_t)raw;
	memcpy(pdu + 8, "\x40\x00\x01\x37\x00\x00", 6);
	put32(pdu + 24, 1); /* CmdSN */
	i2t_pdu(g, pdu, 48 + n);

	memset(pdu, 0, sizeof pdu);
	snprintf(text, sizeof text,
		 "HeaderDigest=None\nDataDigest=None\nMaxRecvDataSegmentLength=%u\n"
		 "ImmediateData=Yes\nInitialR2T=Yes\nMaxBurstLength=16776192\n"
		 "FirstBurstLength=262144\nMaxOutstandingR2T=1\n", 262144u);
	raw = strlen(text);
	n = kv(pdu + 48, text);
	pdu[0] = 0x23; pdu[1] = 0x87;
	pdu[5] = (uint8_t)(raw >> 16); pdu[6] = (uint8_t)(raw >> 8); pdu[7] = (uint8_t)raw;
	memcpy(pdu + 8, "\x40\x00\x01\x37\x00\x00\x00\x01", 8);
	put32(pdu + 24, 0); put32(pdu + 28, 1); put32(pdu + 32, 64); /* StatSN, ExpCmdSN, MaxCmdSN */
	t2i_bytes(g, pdu, 48 + n);
	t2i_flush(g);
	g->pdus++;
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	uint64_t size_mb = 1100, seed = 1;
	uint32_t mrdsl = 262144;
	int mode = 2; /* 0: separate SCSI Response, 1: status in last Data-In, 2: alternate */
	static const struct option lo[] = {
		{ "out", 1, 0, 'o' }, { "size-mb", 1, 0, 's' }, { "mrdsl", 1, 0, 'm' },
		{ "seed", 1, 0, 'r' }, { "status-in-data", 1, 0, 'd' }, { 0, 0, 0, 0 }
	};
	for (int c; (c = getopt_long(argc, argv, "o:s:m:r:d:", lo, NULL)) != -1;) {
		switch (c) {
		case 'o': out = optarg; break;
		case 's': size_mb = strtoull(optarg, NULL, 0); break;
		case 'm': mrdsl = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'r': seed = strtoull(optarg, NULL, 0); break;
		case 'd': mode = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: gen-reads --out FILE [--size-mb N] [--mrdsl B] [--seed N]\n");
			return 2;
		}
	}
	if (!out || mrdsl < 512 || mrdsl > (1u << 24) || mrdsl % 4 || mode < 0 || mode > 2) {
		fprintf(stderr, "gen-reads: need --out FILE; --mrdsl a multiple of 4 in 512..16M\n");
		return 2;
	}
	struct gen *g = calloc(1, sizeof *g);
	if (!g)
		die("calloc");
	g->f = fopen(out, "wb");
	if (!g->f)
		die(out);
	static char iobuf[1 << 22];
	setvbuf(g->f, iobuf, _IOFBF, sizeof iobuf);
	uint32_t fh[6] = { 0xa1b2c3d4, 0x00040002, 0, 0, 262144, 1 };
	if (fwrite(fh, sizeof fh, 1, g->f) != 1)
		die("write");
	g->bytes = sizeof fh;
	g->rng = seed;
	g->ts_ns = 1800000000ULL * 1000000000ULL;
	/* Sequence numbers chosen so the t2i stream wraps past 2^32 within the first GB. */
	g->seq[0] = 0x10000000;
	g->seq[1] = 0xf0000000u;
	emit(g, 0, 0x02, 0);
	emit(g, 1, 0x12, 0);
	ack(g);
	login(g, mrdsl);

	uint64_t limit = size_mb << 20, lba = 0;
	uint32_t cmdsn = 1, statsn = 1, itt = 0x10;
	uint8_t bhs[48];
	while (g->bytes < limit) {
		uint32_t mib = 1 + rnd(g) % 4, len = mib << 20, blocks = len / 512;
		int collapse = mode == 2 ? (int)(g->commands & 1) : mode;
		memset(bhs, 0, 48);
		bhs[0] = 0x01; bhs[1] = 0xc1; /* F R, simple */
		bhs[9] = 1;                   /* LUN 1 */
		put32(bhs + 16, itt);
		put32(bhs + 20, len);
		put32(bhs + 24, cmdsn);
		put32(bhs + 28, statsn);
		bhs[32] = 0x88;
		put64(bhs + 34, lba);
		put32(bhs + 42, blocks);
		i2t_pdu(g, bhs, 48);
		for (uint32_t off = 0, sn = 0; off < len; off += mrdsl, sn++) {
			uint32_t n = len - off < mrdsl ? len - off : mrdsl;
			int last = off + n == len;
			memset(bhs, 0, 48);
			bhs[0] = 0x25;
			bhs[1] = last ? (collapse ? 0x81 : 0x80) : 0;
			bhs[5] = (uint8_t)(n >> 16); bhs[6] = (uint8_t)(n >> 8); bhs[7] = (uint8_t)n;
			bhs[9] = 1;
			put32(bhs + 16, itt);
			put32(bhs + 20, 0xffffffff);
			if (last && collapse)
				put32(bhs + 24, statsn);
			put32(bhs + 28, cmdsn + 1);
			put32(bhs + 32, cmdsn + 64);
			put32(bhs + 36, sn);
			put32(bhs + 40, off);
			t2i_bytes(g, bhs, 48);
			t2i_bytes(g, NULL, n);
			g->pdus++;
		}
		if (!collapse) {
			memset(bhs, 0, 48);
			bhs[0] = 0x21; bhs[1] = 0x80;
			put32(bhs + 16, itt);
			put32(bhs + 24, statsn);
			put32(bhs + 28, cmdsn + 1);
			put32(bhs + 32, cmdsn + 64);
			t2i_bytes(g, bhs, 48);
			g->pdus++;
		}
		t2i_flush(g);
		statsn++;
		cmdsn++;
		itt++;
		lba += blocks;
		g->commands++;
	}
	if (fclose(g->f))
		die("close");
	printf("file=%s\npackets=%llu\nbytes=%llu\ncommands=%llu\npdus=%llu\nmrdsl=%u\n", out,
	       (unsigned long long)g->packets, (unsigned long long)g->bytes,
	       (unsigned long long)g->commands, (unsigned long long)g->pdus, mrdsl);
	free(g);
	return 0;
}

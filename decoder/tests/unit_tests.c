/* Unit tests of the decoder core: CRC32C vectors, CDB and sense decode, BHS plausibility, and
 * TCP/PDU framing edge cases on pcaps built here in memory. Exit status 0 = all passed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "crc32c.h"
#include "decode.h"
#include "scsi.h"

static int failures, checks;

#define CHECK(cond, ...)                                                                  \
	do {                                                                              \
		checks++;                                                                 \
		if (!(cond)) {                                                            \
			failures++;                                                       \
			fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);   \
			fprintf(stderr, __VA_ARGS__);                                     \
			fputc('\n', stderr);                                              \
		}                                                                         \
	} while (0)

/* --- CRC32C: RFC 3720 appendix B.4 ------------------------------------------------------- */

static void test_crc(void)
{
	uint8_t b[48];
	for (int sw = 0; sw < 2; sw++) {
		crc32c_force_software(sw);
		memset(b, 0, 32);
		CHECK(crc32c(b, 32) == 0x8a9136aa, "zeros sw=%d %08x", sw, crc32c(b, 32));
		memset(b, 0xff, 32);
		CHECK(crc32c(b, 32) == 0x62a8ab43, "ones sw=%d", sw);
		for (int i = 0; i < 32; i++)
			b[i] = (uint8_t)i;
		CHECK(crc32c(b, 32) == 0x46dd794e, "incrementing sw=%d", sw);
		for (int i = 0; i < 32; i++)
			b[i] = (uint8_t)(31 - i);
		CHECK(crc32c(b, 32) == 0x113fdb5c, "decrementing sw=%d", sw);
		static const uint8_t rd[48] = {
			0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
			0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
			0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
		CHECK(crc32c(rd, 48) == 0xd9963a56, "iSCSI read sw=%d %08x", sw, crc32c(rd, 48));
		CHECK(crc32c("123456789", 9) == 0xe3069283, "check value sw=%d", sw);
		/* unaligned start and incremental update give the same answer */
		uint8_t big[1000];
		for (int i = 0; i < 1000; i++)
			big[i] = (uint8_t)(i * 7);
		uint32_t whole = crc32c(big + 3, 990);
		uint32_t part = crc32c_update(crc32c_init(), big + 3, 333);
		part = crc32c_final(crc32c_update(part, big + 336, 657));
		CHECK(whole == part, "incremental sw=%d", sw);
	}
	crc32c_force_software(0);
}

/* --- SCSI ---------------------------------------------------------------------------------- */

static void test_cdb(void)
{
	struct cdb_info ci;
	uint8_t r10[10] = {0x28, 0, 0, 0, 0x08, 0, 0, 0, 0x40, 0};
	cdb_decode(r10, 10, 512, &ci);
	CHECK(!strcmp(ci.name, "READ(10)") && ci.lba == 2048 && ci.blocks == 64 &&
		      ci.bytes == 32768 && ci.has_lba && ci.has_blocks,
	      "READ(10) %s %llu", ci.name, (unsigned long long)ci.lba);
	uint8_t r6[6] = {0x08, 0x1f, 0xff, 0xff, 0, 0};
	cdb_decode(r6, 6, 4096, &ci);
	CHECK(ci.lba == 0x1fffff && ci.blocks == 256 && ci.bytes == 256 * 4096, "READ(6) len 0=256");
	uint8_t w16[16] = {0x8a, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0};
	cdb_decode(w16, 16, 512, &ci);
	CHECK(!strcmp(ci.name, "WRITE(16)") && ci.lba == (1ull << 32) && ci.blocks == 4096,
	      "WRITE(16) lba %llu", (unsigned long long)ci.lba);
	uint8_t w12[12] = {0xaa, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0};
	cdb_decode(w12, 12, 512, &ci);
	CHECK(!strcmp(ci.name, "WRITE(12)") && ci.lba == 9 && ci.blocks == 3, "WRITE(12)");
	uint8_t inq[6] = {0x12, 1, 0x80, 0, 0xff, 0};
	cdb_decode(inq, 6, 512, &ci);
	CHECK(!strcmp(ci.name, "INQUIRY") && ci.bytes == 255 && !ci.has_blocks &&
		      strstr(ci.extra, "evpd=1 page=0x80"),
	      "INQUIRY %s", ci.extra);
	uint8_t rc16[16] = {0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0};
	cdb_decode(rc16, 16, 512, &ci);
	CHECK(!strcmp(ci.name, "READ CAPACITY(16)") && ci.bytes == 32, "RC16 %s", ci.name);
	uint8_t rl[12] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0};
	cdb_decode(rl, 12, 512, &ci);
	CHECK(!strcmp(ci.name, "REPORT LUNS") && ci.bytes == 4096, "REPORT LUNS");
	uint8_t caw[16] = {0x89, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 1, 0, 0};
	cdb_decode(caw, 16, 512, &ci);
	CHECK(!strcmp(ci.name, "COMPARE AND WRITE") && ci.lba == 5 && ci.blocks == 1, "CAW");
	uint8_t rso[12] = {0xa3, 0x0c, 1, 0x28, 0, 0, 0, 0, 2, 0, 0, 0};
	cdb_decode(rso, 12, 512, &ci);
	CHECK(!strcmp(ci.name, "REPORT SUPPORTED OPERATION CODES") && ci.bytes == 512, "RSOC");
	uint8_t pri[10] = {0x5e, 0x00, 0, 0, 0, 0, 0, 0x02, 0, 0};
	cdb_decode(pri, 10, 512, &ci);
	CHECK(!strcmp(ci.name, "PR IN READ KEYS") && ci.bytes == 512, "PRIN %s", ci.name);
	uint8_t ws[16] = {0x93, 0x08, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0};
	cdb_decode(ws, 16, 512, &ci);
	CHECK(!strcmp(ci.name, "WRITE SAME(16)") && ci.lba == 16 && ci.blocks == 32 &&
		      strstr(ci.extra, "unmap=1"),
	      "WRITE SAME(16)");
	uint8_t unk[6] = {0xc5, 0, 0, 0, 0, 0};
	cdb_decode(unk, 6, 512, &ci);
	CHECK(!strcmp(ci.name, "UNKNOWN(0xc5)") && !ci.has_lba, "unknown %s", ci.name);
	/* A CDB too short for its fields: name only, no garbage fields. */
	cdb_decode(r10, 4, 512, &ci);
	CHECK(!strcmp(ci.name, "READ(10)") && !ci.has_lba && !ci.has_blocks, "short CDB");
	cdb_decode(r10, 0, 512, &ci);
	CHECK(!ci.has_lba, "empty CDB");
}

static void test_sense(void)
{
	struct sense_info si;
	uint8_t fixed[18] = {0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0x00, 0, 0, 0, 0};
	sense_decode(fixed, sizeof fixed, &si);
	CHECK(si.valid && si.key == 5 && si.asc == 0x24 && si.ascq == 0, "fixed");
	char t[160];
	sense_text(si.key, si.asc, si.ascq, t, sizeof t);
	CHECK(!strcmp(t, "ILLEGAL REQUEST: INVALID FIELD IN CDB"), "text %s", t);
	uint8_t desc[8] = {0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0};
	sense_decode(desc, sizeof desc, &si);
	CHECK(si.valid && si.key == 6 && si.asc == 0x29 && si.response_code == 0x72, "desc");
	uint8_t shortfix[10] = {0x71, 0, 0x03};
	sense_decode(shortfix, sizeof shortfix, &si);
	CHECK(si.valid && si.key == 3 && si.asc == 0, "short fixed");
	uint8_t bad[4] = {0x12, 0, 0, 0};
	sense_decode(bad, sizeof bad, &si);
	CHECK(!si.valid, "not sense");
	sense_decode(bad, 0, &si);
	CHECK(!si.valid, "empty");
	sense_text(3, 0x99, 0x01, t, sizeof t);
	CHECK(!strcmp(t, "MEDIUM ERROR: VENDOR SPECIFIC ASC 0x99 ASCQ 0x01"), "vendor %s", t);
	CHECK(!strcmp(scsi_status_name(0x02), "CHECK CONDITION") && !scsi_status_name(0x03),
	      "status names");
}

/* --- BHS builder -------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static void put24(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 16); p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)v;
}

static void bhs(uint8_t *b, uint8_t op, uint8_t flags, uint32_t dsl, uint32_t itt)
{
	memset(b, 0, 48);
	b[0] = op;
	b[1] = flags;
	put24(b + 5, dsl);
	put32(b + 16, itt);
}

static void test_bhs(void)
{
	uint8_t b[48];
	bhs(b, 0x01, 0xc1, 0, 7);
	CHECK(bhs_plausible(b, DIR_I2T) && !bhs_plausible(b, DIR_T2I), "scsi cmd direction");
	bhs(b, 0x25, 0x81, 512, 7);
	CHECK(bhs_plausible(b, DIR_T2I), "data-in");
	b[1] = 0x88; /* reserved bit */
	CHECK(!bhs_plausible(b, DIR_T2I), "data-in reserved bit");
	bhs(b, 0x31, 0x80, 0, 7);
	CHECK(!bhs_plausible(b, DIR_T2I), "r2t without a transfer tag");
	put32(b + 20, 0x10);
	put32(b + 44, 8192);
	CHECK(bhs_plausible(b, DIR_T2I), "r2t");
	put24(b + 5, 4);
	CHECK(!bhs_plausible(b, DIR_T2I), "r2t with data");
	/* Payload that looks like a NOP-In followed by a Logout Response (LUN pattern words
	 * 0x8020.. as the testbed fills the disk) must not pass for headers. */
	for (int i = 0; i < 6; i++) {
		uint64_t w = 0x8020 + (uint64_t)i;
		for (int k = 0; k < 8; k++)
			b[8 * i + k] = (uint8_t)(w >> (8 * k));
	}
	CHECK(!bhs_plausible(b, DIR_T2I), "pattern words as NOP-In");
	bhs(b, 0x1c, 0x80, 0, 7);
	CHECK(iscsi_opcode_valid(0x1c, DIR_I2T) && !bhs_plausible(b, DIR_I2T), "vendor");
	CHECK(!iscsi_opcode_valid(0x07, DIR_I2T) && !iscsi_opcode_valid(0x3f, DIR_I2T),
	      "invalid opcodes");
	bhs(b, 0x25, 0x81, 512, 0x1234);
	b[3] = 0x02;
	put32(b + 24, 9);
	put32(b + 36, 3);
	put32(b + 40, 8192);
	struct pdu_rec r;
	memset(&r, 0, sizeof r);
	bhs_fill(&r, b);
	CHECK(r.opcode == 0x25 && r.final && (r.has & H_STATUS) && r.status == 2 &&
		      r.statsn == 9 && r.datasn == 3 && r.buffer_offset == 8192 && r.itt == 0x1234,
	      "fill data-in");
	uint8_t lun[8] = {0x40, 0x05, 0, 0, 0, 0, 0, 0};
	int single;
	CHECK(lun_value(lun, &single) == 5 && single, "flat lun");
	lun[2] = 1;
	lun_value(lun, &single);
	CHECK(!single, "multi-level lun");
}

/* --- pcap builder ------------------------------------------------------------------------- */

struct cap {
	uint8_t *buf;
	size_t len, cap;
	uint32_t seq[2], ack_of[2];
	uint32_t t;
};

static void cap_put(struct cap *c, const void *p, size_t n)
{
	if (!n)
		return;
	if (c->len + n > c->cap) {
		c->cap = (c->len + n) * 2;
		c->buf = realloc(c->buf, c->cap);
	}
	memcpy(c->buf + c->len, p, n);
	c->len += n;
}

static void cap_init(struct cap *c)
{
	memset(c, 0, sizeof *c);
	uint32_t gh[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};
	cap_put(c, gh, 24);
	c->seq[0] = 1000;
	c->seq[1] = 50000;
}

/* One Ethernet/IPv4/TCP packet of direction dir with payload at seq; caplen_cut > 0 keeps
 * only that many payload bytes in the capture. */
static void cap_pkt_at(struct cap *c, int dir, uint32_t seq, uint8_t flags, const uint8_t *pl,
		       uint32_t n, uint32_t caplen_cut, uint32_t ack)
{
	uint8_t h[54];
	memset(h, 0, sizeof h);
	h[12] = 0x08;
	uint8_t *ip = h + 14;
	ip[0] = 0x45;
	uint32_t tot = 40 + n;
	ip[2] = (uint8_t)(tot >> 8);
	ip[3] = (uint8_t)tot;
	ip[8] = 64;
	ip[9] = 6;
	uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
	memcpy(ip + 12, dir ? b : a, 4);
	memcpy(ip + 16, dir ? a : b, 4);
	uint8_t *tcp = ip + 20;
	uint16_t ps = dir ? 3260 : 40000, pd = dir ? 40000 : 3260;
	tcp[0] = (uint8_t)(ps >> 8); tcp[1] = (uint8_t)ps;
	tcp[2] = (uint8_t)(pd >> 8); tcp[3] = (uint8_t)pd;
	put32(tcp + 4, seq);
	put32(tcp + 8, ack);
	tcp[12] = 0x50;
	tcp[13] = flags;
	uint32_t keep = caplen_cut && caplen_cut < n ? caplen_cut : n;
	uint32_t rec[4] = {1700000000, c->t++, 54 + keep, 54 + n};
	cap_put(c, rec, 16);
	cap_put(c, h, 54);
	cap_put(c, pl, keep);
}

static void cap_syn(struct cap *c)
{
	cap_pkt_at(c, 0, c->seq[0]++, TH_SYN, NULL, 0, 0, 0);
	cap_pkt_at(c, 1, c->seq[1]++, TH_SYN | TH_ACK, NULL, 0, 0, c->seq[0]);
}

/* Send bytes in order as segments of at most mss. */
static void cap_send(struct cap *c, int dir, const uint8_t *p, uint32_t n, uint32_t mss)
{
	while (n) {
		uint32_t k = n < mss ? n : mss;
		cap_pkt_at(c, dir, c->seq[dir], TH_ACK | TH_PSH, p, k, 0, c->seq[!dir]);
		c->seq[dir] += k;
		p += k;
		n -= k;
	}
}

/* --- collecting sink ---------------------------------------------------------------------- */

struct got {
	struct pdu_rec r[256];
	char kv[256][512];
	int n;
	struct cmd_rec c[64];
	int nc;
	struct conn_rec conn;
	char hd[16], dd[16], iname[64];
	int nconn;
};

static void sink_pdu(void *ctx, const struct pdu_rec *r)
{
	struct got *g = ctx;
	if (g->n < 256) {
		g->r[g->n] = *r;
		snprintf(g->kv[g->n], sizeof g->kv[0], "%s", r->kv_len ? r->kv : "");
		g->r[g->n].kv = NULL;
		g->n++;
	}
}
static void sink_cmd(void *ctx, const struct cmd_rec *c)
{
	struct got *g = ctx;
	if (g->nc < 64)
		g->c[g->nc++] = *c;
}
static void sink_conn(void *ctx, const struct conn_rec *c)
{
	struct got *g = ctx;
	g->conn = *c;
	snprintf(g->hd, sizeof g->hd, "%s", c->header_digest ? c->header_digest : "");
	snprintf(g->dd, sizeof g->dd, "%s", c->data_digest ? c->data_digest : "");
	snprintf(g->iname, sizeof g->iname, "%s", c->initiator_name ? c->initiator_name : "");
	g->nconn++;
}

static struct got *decode(struct cap *c, struct decode_stats *st)
{
	static struct got g;
	memset(&g, 0, sizeof g);
	struct decode_sinks s = {&g, sink_pdu, sink_cmd, sink_conn, NULL};
	struct decode_opts o;
	decode_opts_init(&o);
	int rc = istrace_decode_buffer(c->buf, c->len, &o, &s, st);
	CHECK(rc == 0, "decode rc %d", rc);
	free(c->buf);
	c->buf = NULL;
	return &g;
}

/* A READ(10) of `blocks` 512-byte blocks answered by one Data-In with status. */
static uint32_t build_read(uint8_t *out, uint32_t itt, uint32_t lba, uint32_t blocks)
{
	bhs(out, 0x01, 0xc1, 0, itt);
	out[9] = 1; /* LUN 1 */
	put32(out + 20, blocks * 512);
	put32(out + 24, itt);
	out[32] = 0x28;
	put32(out + 34, lba);
	out[39] = (uint8_t)(blocks >> 8);
	out[40] = (uint8_t)blocks;
	return 48;
}

static uint32_t build_datain(uint8_t *out, uint32_t itt, uint32_t len, uint32_t statsn)
{
	bhs(out, 0x25, 0x81, len, itt);
	put32(out + 24, statsn);
	for (uint32_t i = 0; i < len; i++)
		out[48 + i] = (uint8_t)(i * 13 + 1);
	return 48 + len + ((4 - (len & 3)) & 3);
}

/* A connection that has sent one READ(10) of `blocks` blocks, tag `itt`, and its Data-In of
 * `len` bytes built in buf, not sent yet: returns the Data-In's length, *s0 the target's
 * sequence number where it will start. */
static uint32_t read_then_datain(struct cap *c, uint8_t *buf, uint32_t itt, uint32_t blocks,
				 uint32_t len, uint32_t *s0)
{
	cap_init(c);
	cap_syn(c);
	cap_send(c, 0, buf, build_read(buf, itt, 0, blocks), 1448);
	*s0 = c->seq[1];
	return build_datain(buf, itt, len, 1);
}

/* Bytes [from, from + len) of the target's stream that starts at s0, in one segment. */
static void t2i_bytes(struct cap *c, uint32_t s0, const uint8_t *buf, uint32_t from,
		      uint32_t len)
{
	cap_pkt_at(c, 1, s0 + from, TH_ACK, buf + from, len, 0, c->seq[0]);
}

static void test_split_and_batch(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	cap_init(&c);
	cap_syn(&c);
	uint32_t n = build_read(buf, 1, 2048, 64);
	cap_send(&c, 0, buf, n, 20); /* the header over 3 segments: 20 + 20 + 8 */
	n = build_datain(buf, 1, 32768, 1);
	cap_send(&c, 1, buf, n, 1448);
	/* 5 NOP-Outs in one segment */
	for (int i = 0; i < 5; i++) {
		bhs(buf + 48 * i, 0x40, 0x80, 0, 100 + (uint32_t)i);
		put32(buf + 48 * i + 20, 0xffffffff);
	}
	cap_send(&c, 0, buf, 240, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 7, "pdus %d", g->n);
	CHECK(g->r[0].opcode == 1 && g->r[0].ci.lba == 2048 && g->r[0].ci.bytes == 32768 &&
		      g->r[0].tcp_seq == 1001 && g->r[0].notes == 0,
	      "cmd seq %u notes %x", g->r[0].tcp_seq, g->r[0].notes);
	CHECK(g->r[1].opcode == 0x25 && g->r[1].dsl == 32768 && g->r[1].cmd == 0 &&
		      (g->r[1].has & H_RESPTIME) && g->r[1].status == 0,
	      "data-in");
	for (int i = 0; i < 5; i++)
		CHECK(g->r[2 + i].opcode == 0 && g->r[2 + i].itt == 100u + (uint32_t)i &&
			      g->r[2 + i].immediate && g->r[2 + i].tcp_seq == 1049 + 48u * (uint32_t)i,
		      "nop %d", i);
	CHECK(g->nc == 1 && g->c[0].complete && g->c[0].bytes_in == 32768 &&
		      g->c[0].data_pdus == 1 && !strcmp(g->c[0].direction, "read"),
	      "command row");
	CHECK(st.resyncs == 0 && st.gaps == 0, "clean");
}

/* Segments of one Data-In: reordered, retransmitted, overlapping. */
static void test_reorder_retransmit(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	uint32_t s0, n = read_then_datain(&c, buf, 7, 16, 8192, &s0);
	/* segments A(0..1000) C(2000..n) B(1000..2000), then A again, then an overlap 500..1500 */
	const uint32_t piece[][2] = { { 0, 1000 }, { 2000, n - 2000 }, { 1000, 1000 }, { 0, 1000 },
				      { 500, 1000 } };
	for (size_t i = 0; i < sizeof(piece) / sizeof(piece[0]); i++)
		t2i_bytes(&c, s0, buf, piece[i][0], piece[i][1]);
	c.seq[1] = s0 + n;
	bhs(buf, 0x20, 0x80, 0, 0xffffffff);
	cap_send(&c, 1, buf, 48, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 3, "pdus %d", g->n);
	CHECK(g->r[1].opcode == 0x25 && g->r[1].dsl == 8192 && (g->r[1].notes & N_REORDER),
	      "reordered data-in notes %x", g->r[1].notes);
	CHECK(g->r[2].opcode == 0x20 && g->r[2].tcp_seq == s0 + n, "nop-in after");
	CHECK(st.retransmits >= 2 && st.reordered == 1, "retx %llu reord %llu",
	      (unsigned long long)st.retransmits, (unsigned long long)st.reordered);
}

/* A segment the capture lost (the peer ACKs past it): the PDU with the hole is marked, the
 * next header is found again. */
static void test_gap(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	uint32_t s0, n = read_then_datain(&c, buf, 9, 16, 8192, &s0);
	t2i_bytes(&c, s0, buf, 0, 1448);
	/* 1448..2896 never captured */
	t2i_bytes(&c, s0, buf, 2896, n - 2896);
	c.seq[1] = s0 + n;
	cap_pkt_at(&c, 0, c.seq[0], TH_ACK, NULL, 0, 0, c.seq[1]);
	/* a second command whose response header falls in a lost segment */
	n = build_read(buf, 10, 16, 1);
	cap_send(&c, 0, buf, n, 1448);
	uint32_t s1 = c.seq[1];
	n = build_datain(buf, 10, 512, 2);
	c.seq[1] = s1 + n; /* lost */
	bhs(buf, 0x20, 0x80, 0, 0xffffffff);
	put32(buf + 20, 0xffffffff);
	cap_send(&c, 1, buf, 48, 1448);
	cap_pkt_at(&c, 0, c.seq[0], TH_ACK, NULL, 0, 0, c.seq[1]);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 4, "pdus %d", g->n);
	CHECK(g->r[1].opcode == 0x25 && (g->r[1].notes & N_GAP) && g->r[1].dsl == 8192,
	      "gap in data notes %x", g->r[1].notes);
	CHECK(g->r[2].opcode == 0x01 && g->r[2].itt == 10, "second cmd");
	CHECK(g->r[3].opcode == 0x20 && (g->r[3].notes & N_RESYNC) && g->r[3].tcp_seq == s1 + n,
	      "nop-in after lost header: op %x notes %x", g->r[3].opcode, g->r[3].notes);
	CHECK(st.gaps == 2, "gaps %llu", (unsigned long long)st.gaps);
	CHECK(g->nc == 2 && !g->c[1].complete, "second command left open");
}

/* Capture starting mid-PDU (no SYN): the first PDU found is the next real header. */
static void test_mid_pdu_start(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	cap_init(&c);
	uint32_t n = build_datain(buf, 3, 4000, 1);
	/* begin 1000 bytes into a Data-In, in 1448-byte segments, then R2T, NOP-In */
	uint32_t m = n - 1000;
	memmove(buf, buf + 1000, m);
	bhs(buf + m, 0x31, 0x80, 0, 4);
	put32(buf + m + 20, 0x55);
	put32(buf + m + 44, 4096);
	bhs(buf + m + 48, 0x20, 0x80, 0, 0xffffffff);
	cap_send(&c, 1, buf, m + 96, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 2, "pdus %d", g->n);
	CHECK(g->r[0].opcode == 0x31 && (g->r[0].notes & N_RESYNC) && g->r[0].desired_len == 4096 &&
		      g->r[0].tcp_seq == 50000 + m,
	      "r2t after resync op %x seq %u", g->r[0].opcode, g->r[0].tcp_seq);
	CHECK(g->r[1].opcode == 0x20 && !(g->r[1].notes & N_RESYNC), "nop-in");
	/* Both headers lie in the third segment (offsets 2896..4343): its time, not the time
	 * of the segment that let the hunt decide. */
	CHECK(g->r[0].ts_ns == 1700000000LL * 1000000000 + 2000 && g->r[1].ts_ns == g->r[0].ts_ns,
	      "resync ts %lld", (long long)g->r[0].ts_ns);
}

/* Disk data laid out as the testbed fills LUNs (little-endian 64-bit word w at byte 8w) is
 * mostly zeros and repeats every 8 bytes: around words 0x2300.. it reads like a chain of
 * Login Responses. A capture starting inside such a payload must not invent PDUs. */
static void test_pattern_payload_not_taken_for_headers(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[40000];
	cap_init(&c);
	uint32_t n = 16384;
	bhs(buf, 0x25, 0x00, n, 0x77);
	put32(buf + 20, 0xffffffff);
	for (uint32_t i = 0; i < n / 8; i++) {
		uint64_t w = 0x2200 + i;
		for (int k = 0; k < 8; k++)
			buf[48 + 8 * i + (uint32_t)k] = (uint8_t)(w >> (8 * k));
	}
	uint32_t total = 48 + n;
	bhs(buf + total, 0x25, 0x81, 512, 0x77);
	put32(buf + total + 20, 0xffffffff);
	put32(buf + total + 24, 9);
	put32(buf + total + 40, n);
	uint32_t second = total;
	total += 48 + 512;
	/* start 1000 bytes into the payload, odd-sized segments so starts fall anywhere */
	cap_send(&c, 1, buf + 1000, total - 1000, 1001);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 1, "pdus %d (first op %x dsl %u)", g->n, g->n ? g->r[0].opcode : 0,
	      g->n ? g->r[0].dsl : 0);
	CHECK(g->n >= 1 && g->r[0].opcode == 0x25 && g->r[0].tcp_seq == 50000 + second - 1000 &&
		      g->r[0].buffer_offset == n && (g->r[0].notes & N_RESYNC),
	      "the real Data-In");
}

/* snaplen: a Data-In whose payload was cut by the capture; the next header is intact. */
static void test_truncated(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	uint32_t s0, n = read_then_datain(&c, buf, 5, 8, 4096, &s0);
	cap_pkt_at(&c, 1, s0, TH_ACK, buf, 1448, 100, c.seq[0]);
	cap_pkt_at(&c, 1, s0 + 1448, TH_ACK, buf + 1448, 1448, 100, c.seq[0]);
	cap_pkt_at(&c, 1, s0 + 2896, TH_ACK, buf + 2896, n - 2896, 100, c.seq[0]);
	c.seq[1] = s0 + n;
	bhs(buf, 0x20, 0x80, 0, 0xffffffff);
	cap_send(&c, 1, buf, 48, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 3, "pdus %d", g->n);
	CHECK(g->r[1].opcode == 0x25 && (g->r[1].notes & N_TRUNCATED) && g->r[1].dsl == 4096,
	      "truncated data-in %x", g->r[1].notes);
	CHECK(g->r[2].opcode == 0x20 && g->r[2].notes == 0, "nop-in after %x", g->r[2].notes);
	CHECK(st.truncated_packets == 3, "truncated packets %llu",
	      (unsigned long long)st.truncated_packets);
}

static uint32_t le_digest(uint8_t *p, uint32_t crc)
{
	p[0] = (uint8_t)crc; p[1] = (uint8_t)(crc >> 8); p[2] = (uint8_t)(crc >> 16); p[3] = (uint8_t)(crc >> 24);
	return 4;
}

static uint32_t build_login(uint8_t *out, int rsp, const char *kv, uint32_t kvlen, uint8_t flags)
{
	bhs(out, rsp ? 0x23 : 0x43, flags, kvlen, 0x77);
	memcpy(out + 48, kv, kvlen);
	uint32_t pad = (4 - (kvlen & 3)) & 3;
	memset(out + 48 + kvlen, 0, pad);
	return 48 + kvlen + pad;
}

/* Digests negotiated in the login (keys split over two PDUs with the C bit), then verified. */
/* A READ of one block at `lba` with a header digest, then its 512-byte Data-In with header
 * and data digests; `corrupt`: other data under a wrong data digest. */
static void read_with_digests(struct cap *c, uint8_t *buf, uint32_t itt, uint32_t lba,
			      bool corrupt)
{
	uint32_t n = build_read(buf, itt, lba, 1);
	n += le_digest(buf + n, crc32c(buf, 48));
	cap_send(c, 0, buf, n, 1448);
	bhs(buf, 0x25, 0x81, 512, itt);
	n = 48 + le_digest(buf + 48, crc32c(buf, 48));
	for (uint32_t i = 0; i < 512; i++)
		buf[n + i] = corrupt ? 0xab : (uint8_t)i;
	uint32_t dcrc = corrupt ? 0x12345678 : crc32c(buf + n, 512);
	n += 512;
	n += le_digest(buf + n, dcrc);
	cap_send(c, 1, buf, n, 1448);
}

static void test_digests_and_login(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	cap_init(&c);
	cap_syn(&c);
	const char k1[] = "InitiatorName=iqn.x\0HeaderDig";
	const char k2[] = "est=CRC32C\0DataDigest=CRC32C\0MaxRecvDataSegmentLength=65536";
	uint32_t n = build_login(buf, 0, k1, sizeof k1 - 1, 0x40 | 0x04 | 0x03);
	cap_send(&c, 0, buf, n, 1448);
	n = build_login(buf, 1, "", 0, 0x04 | 0x03);
	cap_send(&c, 1, buf, n, 1448);
	n = build_login(buf, 0, k2, sizeof k2, 0x80 | 0x04 | 0x03);
	cap_send(&c, 0, buf, n, 1448);
	const char r1[] = "HeaderDigest=CRC32C\0DataDigest=CRC32C\0MaxRecvDataSegmentLength=262144";
	n = build_login(buf, 1, r1, sizeof r1, 0x80 | 0x04 | 0x03);
	cap_send(&c, 1, buf, n, 1448);
	/* full feature phase: READ with header digest; Data-In with header+data digests */
	read_with_digests(&c, buf, 0x99, 8, false);
	/* the same again with a corrupted data digest */
	read_with_digests(&c, buf, 0x9a, 9, true);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 8, "pdus %d", g->n);
	CHECK(strstr(g->kv[0], "InitiatorName=iqn.x") && !strstr(g->kv[0], "HeaderDig"),
	      "kv0 %s", g->kv[0]);
	CHECK(strstr(g->kv[2], "HeaderDigest=CRC32C") && strstr(g->kv[2], "MaxRecvDataSegmentLength=65536"),
	      "kv2 %s", g->kv[2]);
	CHECK(g->r[4].opcode == 1 && g->r[4].hdigest == DIG_OK, "cmd hd %d", g->r[4].hdigest);
	CHECK(g->r[5].opcode == 0x25 && g->r[5].hdigest == DIG_OK && g->r[5].ddigest == DIG_OK,
	      "data-in digests %d %d", g->r[5].hdigest, g->r[5].ddigest);
	CHECK(g->r[7].opcode == 0x25 && g->r[7].hdigest == DIG_OK && g->r[7].ddigest == DIG_BAD,
	      "bad data digest %d", g->r[7].ddigest);
	CHECK(st.ddigest_bad == 1 && st.hdigest_bad == 0, "digest counts");
	CHECK(!strcmp(g->hd, "CRC32C") && !strcmp(g->dd, "CRC32C") && g->conn.mrdsl_t2i == 65536 &&
		      g->conn.mrdsl_i2t == 262144 && !strcmp(g->iname, "iqn.x"),
	      "negotiated hd=%s dd=%s mrdsl %lld %lld", g->hd, g->dd,
	      (long long)g->conn.mrdsl_t2i, (long long)g->conn.mrdsl_i2t);
}

/* No handshake, no login, digests on: the hunt proves them from the bytes themselves. */
static void test_digests_without_login(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[4096];
	cap_init(&c);
	uint32_t n = build_read(buf, 0x50, 8, 1);
	n += le_digest(buf + n, crc32c(buf, 48));
	cap_send(&c, 0, buf, n, 1448);
	bhs(buf, 0x25, 0x81, 512, 0x50);
	n = 48 + le_digest(buf + 48, crc32c(buf, 48));
	for (int i = 0; i < 512; i++)
		buf[n + (uint32_t)i] = (uint8_t)(i * 3);
	uint32_t dcrc = crc32c(buf + n, 512);
	n += 512;
	n += le_digest(buf + n, dcrc);
	bhs(buf + n, 0x20, 0x80, 0, 0xffffffff);
	put32(buf + n + 20, 0xffffffff);
	uint32_t h = n;
	n += 48;
	n += le_digest(buf + n, crc32c(buf + h, 48));
	cap_send(&c, 1, buf, n, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 3, "pdus %d", g->n);
	CHECK(g->r[0].opcode == 1 && g->r[0].hdigest == DIG_OK, "cmd hd %d", g->r[0].hdigest);
	CHECK(g->r[1].opcode == 0x25 && g->r[1].hdigest == DIG_OK && g->r[1].ddigest == DIG_OK,
	      "data-in %d %d", g->r[1].hdigest, g->r[1].ddigest);
	CHECK(g->r[2].opcode == 0x20 && g->r[2].hdigest == DIG_OK, "nop-in");
	CHECK(!strcmp(g->hd, "CRC32C") && !strcmp(g->dd, "CRC32C"), "conn %s %s", g->hd, g->dd);
}

/* READ CAPACITY(10) data teaches the block size used for later CDBs on that LUN. */
static void test_block_size(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[70000];
	cap_init(&c);
	cap_syn(&c);
	bhs(buf, 0x01, 0xc1, 0, 1);
	buf[9] = 1;
	put32(buf + 20, 8);
	buf[32] = 0x25;
	cap_send(&c, 0, buf, 48, 1448);
	bhs(buf, 0x25, 0x81, 8, 1);
	put32(buf + 48, 999);
	put32(buf + 52, 4096);
	cap_send(&c, 1, buf, 56, 1448);
	uint32_t n = build_read(buf, 2, 100, 8);
	cap_send(&c, 0, buf, n, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n == 3 && g->r[2].ci.bytes == 32768 && g->conn.block_size == 4096,
	      "block size bytes %llu", (unsigned long long)g->r[2].ci.bytes);
}

/* Garbage on the iSCSI port: no PDUs, no crash. */
static void test_garbage(void)
{
	struct cap c;
	struct decode_stats st;
	static uint8_t buf[20000];
	cap_init(&c);
	cap_syn(&c);
	uint32_t x = 12345;
	for (int i = 0; i < 20000; i++) {
		x = x * 1103515245 + 12345;
		buf[i] = (uint8_t)(x >> 16);
	}
	buf[0] = 0x7f; /* never a valid opcode */
	cap_send(&c, 0, buf, 20000, 1448);
	struct got *g = decode(&c, &st);
	CHECK(g->n < 3, "pdus from garbage %d", g->n);
	/* the raw stream entry point on the same bytes */
	struct decode_opts o;
	decode_opts_init(&o);
	struct decode_sinks s = {g, sink_pdu, sink_cmd, sink_conn, NULL};
	memset(g, 0, sizeof *g);
	CHECK(istrace_decode_streams(buf, 20000, 7000, 333, &o, &s, &st) == 0, "streams");
}

int main(void)
{
	test_crc();
	test_cdb();
	test_sense();
	test_bhs();
	test_split_and_batch();
	test_reorder_retransmit();
	test_gap();
	test_mid_pdu_start();
	test_pattern_payload_not_taken_for_headers();
	test_truncated();
	test_digests_and_login();
	test_digests_without_login();
	test_block_size();
	test_garbage();
	printf("unit tests: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}

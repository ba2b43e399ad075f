/* C unit tests: CRC32C and MD5 vectors, CHAP, BHS encode/decode, parsing, pattern, histogram. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "crc32c.h"
#include "login.h"
#include "md5.h"
#include "names.h"
#include "pdu.h"
#include "session.h"
#include "stats.h"
#include "util.h"
#include "verify.h"

static int failures, checks;

#define CHECK(cond)                                                                    \
	do {                                                                           \
		checks++;                                                              \
		if (!(cond)) {                                                         \
			failures++;                                                    \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                      \
	} while (0)

static void test_crc32c_path(int soft)
{
	unsigned char buf[64];
	crc32c_force_software(soft);
	/* RFC 3720 B.4 */
	memset(buf, 0, 32);
	CHECK(crc32c(buf, 32) == 0x8a9136aa);
	memset(buf, 0xff, 32);
	CHECK(crc32c(buf, 32) == 0x62a8ab43);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)i;
	CHECK(crc32c(buf, 32) == 0x46dd794e);
	for (int i = 0; i < 32; i++)
		buf[i] = (unsigned char)(31 - i);
	CHECK(crc32c(buf, 32) == 0x113fdb5c);
	static const unsigned char read_pdu[48] = {
		0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0, 0, 0x04, 0,
		0, 0, 0, 0x14, 0, 0, 0, 0x18, 0x28, 0, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0};
	CHECK(crc32c(read_pdu, 48) == 0xd9963a56);
	CHECK(crc32c("123456789", 9) == 0xe3069283);
	CHECK(crc32c("", 0) == 0);
	/* split updates and unaligned starts give the same digest */
	unsigned char big[1000];
	for (int i = 0; i < 1000; i++)
		big[i] = (unsigned char)(i * 7 + 3);
	uint32_t whole = crc32c(big + 1, 999);
	uint32_t part = crc32c_update(crc32c_init(), big + 1, 13);
	part = crc32c_final(crc32c_update(part, big + 14, 986));
	CHECK(whole == part);
	/* wire order is little-endian: RFC 3720 lists the zero vector as aa 36 91 8a */
	unsigned char d[4];
	put32le(d, 0x8a9136aa);
	CHECK(d[0] == 0xaa && d[3] == 0x8a);
}

static void md5_hex(const char *s, char *out)
{
	struct md5_ctx c;
	unsigned char d[16];
	md5_init(&c);
	md5_update(&c, s, strlen(s));
	md5_final(&c, d);
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_md5(void)
{
	char h[33];
	static const char *const vec[][2] = { /* RFC 1321 appendix A.5 */
		{"", "d41d8cd98f00b204e9800998ecf8427e"},
		{"a", "0cc175b9c0f1b6a831c399e269772661"},
		{"abc", "900150983cd24fb0d6963f7d28e17f72"},
		{"message digest", "f96b697d7cb7938d525a2f31aaf161d0"},
		{"abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
		 "d174ab98d277d9f5a5611c2c9f419d9f"},
		{"1234567890123456789012345678901234567890123456789012345678901234567890123456789"
		 "0",
		 "57edf4a22be3c955ac49da2e2107b67a"},
	};
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		md5_hex(vec[i][0], h);
		CHECK(strcmp(h, vec[i][1]) == 0);
	}
	/* byte-at-a-time feeding equals one call */
	struct md5_ctx c;
	unsigned char d1[16], d2[16];
	const char *msg = "The quick brown fox jumps over the lazy dog, 64+ bytes long, really long";
	md5_init(&c);
	for (const char *p = msg; *p; p++)
		md5_update(&c, p, 1);
	md5_final(&c, d1);
	md5_init(&c);
	md5_update(&c, msg, strlen(msg));
	md5_final(&c, d2);
	CHECK(memcmp(d1, d2, 16) == 0);
}

static void test_chap(void)
{
	char out[40];
	/* MD5(0x07 || "secret123" || 01..10), cross-checked with Python's hashlib */
	CHECK(chap_response(7, "secret123", "0x0102030405060708090a0b0c0d0e0f10", out,
			    sizeof(out)) == 0);
	CHECK(strcmp(out, "0x0ce2809426c34e5214a048496a67f727") == 0);
	CHECK(chap_response(7, "s", "0x123", out, sizeof(out)) == -1);  /* odd length */
	CHECK(chap_response(7, "s", "0xzz", out, sizeof(out)) == -1);   /* not hex */
	CHECK(chap_response(7, "s", "0102", out, sizeof(out)) == -1);   /* no 0x */
	CHECK(chap_response(7, "s", "0x", out, sizeof(out)) == -1);     /* empty */
}

static void test_bhs(void)
{
	unsigned char raw[BHS_LEN];
	bhs_init(raw, OP_SCSI_CMD, 0, BHS_F | CMD_R | CMD_ATTR_SIMPLE, 0, 0x12345678);
	put64(raw + 8, lun_encode(1));
	put32(raw + 20, 4194304);
	CHECK(raw[0] == 0x01 && raw[1] == 0xc1);
	CHECK(raw[8] == 0x00 && raw[9] == 0x01);
	struct bhs h;
	memcpy(h.raw, raw, BHS_LEN);
	bhs_decode(&h);
	CHECK(h.opcode == OP_SCSI_CMD && !h.immediate && h.itt == 0x12345678);
	CHECK(h.ttt == 4194304 && h.dsl == 0 && h.ahs_len == 0);
	/* a Data-In with status, residual, 24-bit DSL */
	memset(h.raw, 0, BHS_LEN);
	h.raw[0] = 0x25;
	h.raw[1] = BHS_F | DIN_S | DIN_U;
	h.raw[3] = 0x02;
	h.raw[4] = 3;
	put24(h.raw + 5, 0xabcdef);
	put32(h.raw + 24, 77);
	put32(h.raw + 28, 78);
	put32(h.raw + 32, 90);
	put32(h.raw + 36, 5);
	put32(h.raw + 40, 0x10000);
	put32(h.raw + 44, 512);
	bhs_decode(&h);
	CHECK(h.opcode == OP_DATA_IN && (h.flags & DIN_S) && h.raw[3] == 2);
	CHECK(h.dsl == 0xabcdef && h.ahs_len == 12);
	CHECK(h.statsn == 77 && h.expcmdsn == 78 && h.maxcmdsn == 90);
	CHECK(h.datasn == 5 && h.offset == 0x10000 && h.word44 == 512);
	bhs_init(raw, OP_LOGIN_REQ, 1, LOGIN_T | (1 << 2) | 3, 100, 0);
	CHECK(raw[0] == 0x43 && raw[1] == 0x87 && get24(raw + 5) == 100);
	CHECK(lun_encode(0) == 0 && lun_encode(300) == 0x412cull << 48);
	CHECK(pad4(0) == 0 && pad4(1) == 3 && pad4(4) == 0 && pad4(7) == 1);
	CHECK(sn_lt(0xfffffff0u, 5) && !sn_lt(5, 0xfffffff0u) && sn_le(3, 3));
	/* SN tracking: window, wrap, stale values ignored */
	struct conn c;
	memset(&c, 0, sizeof(c));
	c.cmdsn = 10;
	c.expcmdsn = 10;
	c.maxcmdsn = 9; /* closed */
	CHECK(!conn_window_open(&c));
	memset(h.raw, 0, BHS_LEN);
	h.raw[0] = OP_SCSI_RSP;
	put32(h.raw + 24, 41);
	put32(h.raw + 28, 11);
	put32(h.raw + 32, 40);
	bhs_decode(&h);
	conn_update_sn(&c, &h);
	CHECK(c.expstatsn == 42 && c.expcmdsn == 11 && c.maxcmdsn == 40 && conn_window_open(&c));
	put32(h.raw + 32, 3); /* MaxCmdSN < ExpCmdSN - 1: invalid, ignored */
	bhs_decode(&h);
	conn_update_sn(&c, &h);
	CHECK(c.maxcmdsn == 40);
	memset(h.raw, 0, BHS_LEN); /* an unsolicited NOP-In does not advance StatSN */
	h.raw[0] = OP_NOP_IN;
	put32(h.raw + 16, RSVD_TAG);
	put32(h.raw + 24, 42);
	put32(h.raw + 28, 11);
	put32(h.raw + 32, 40);
	bhs_decode(&h);
	conn_update_sn(&c, &h);
	CHECK(c.expstatsn == 42);
}

static void test_text_and_names(void)
{
	struct kvbuf b = {0};
	kv_add(&b, "HeaderDigest", "%s", "CRC32C,None");
	kv_add(&b, "MaxBurstLength", "%u", 262144u);
	CHECK(b.len == strlen("HeaderDigest=CRC32C,None") + 1 + strlen("MaxBurstLength=262144") + 1);
	CHECK(strcmp(kv_get(b.buf, b.len, "MaxBurstLength"), "262144") == 0);
	CHECK(kv_get(b.buf, b.len, "MaxBurst") == NULL);
	CHECK(kv_get(b.buf, b.len, "Digest") == NULL);
	/* unterminated last pair must not be read past the end */
	const char bad[] = {'A', '=', '1'};
	CHECK(kv_get(bad, sizeof(bad), "A") == NULL);
	CHECK(strcmp(login_status_name(2, 1), "authentication failure") == 0);
	CHECK(strcmp(login_class_name(2), "Initiator error") == 0);
	CHECK(strcmp(login_status_name(2, 3), "not found") == 0);
	CHECK(strcmp(reject_reason_name(0x09), "invalid PDU field") == 0);
	char s[256];
	unsigned char fixed[18] = {0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0x00};
	sense_describe(fixed, sizeof(fixed), s, sizeof(s));
	CHECK(strstr(s, "ILLEGAL REQUEST / LOGICAL BLOCK ADDRESS OUT OF RANGE") == s);
	unsigned char desc[8] = {0x72, 0x06, 0x29, 0x00};
	sense_describe(desc, sizeof(desc), s, sizeof(s));
	CHECK(strstr(s, "UNIT ATTENTION / POWER ON, RESET") == s);
	unsigned char seg[4] = {0x00, 0x40, 0x70, 0x00}; /* SenseLength longer than the segment */
	response_sense_describe(seg, sizeof(seg), s, sizeof(s));
	CHECK(strlen(s) > 0);
	sense_describe(fixed, 2, s, sizeof(s));
	CHECK(strcmp(s, "no sense data") == 0);
}

static void test_parsing(void)
{
	uint64_t v;
	int blk;
	CHECK(parse_size("4M", &v, &blk) == 0 && v == 4u << 20 && !blk);
	CHECK(parse_size("32k", &v, &blk) == 0 && v == 32768);
	CHECK(parse_size("512", &v, &blk) == 0 && v == 512);
	CHECK(parse_size("1G", &v, &blk) == 0 && v == 1u << 30);
	CHECK(parse_size("8blk", &v, &blk) == 0 && v == 8 && blk);
	CHECK(parse_size("4Q", &v, &blk) == -1);
	CHECK(parse_size("-1", &v, &blk) == -1);
	CHECK(parse_size("", &v, &blk) == -1);
	CHECK(parse_size("99999999999999999999", &v, &blk) == -1);
	CHECK(parse_size("99999999999G", &v, &blk) == -1);
	char host[64];
	int port;
	CHECK(split_hostport("10.0.0.1:3261", host, sizeof(host), &port, 3260) == 0 &&
	      !strcmp(host, "10.0.0.1") && port == 3261);
	CHECK(split_hostport("10.0.0.1", host, sizeof(host), &port, 3260) == 0 && port == 3260);
	CHECK(split_hostport("[::1]:9", host, sizeof(host), &port, 3260) == 0 &&
	      !strcmp(host, "::1") && port == 9);
	CHECK(split_hostport("fe80::1", host, sizeof(host), &port, 3260) == 0 &&
	      !strcmp(host, "fe80::1") && port == 3260);
	CHECK(split_hostport("h:0", host, sizeof(host), &port, 3260) == -1);
	CHECK(split_hostport("h:70000", host, sizeof(host), &port, 3260) == -1);
	CHECK(split_hostport("[::1", host, sizeof(host), &port, 3260) == -1);
	CHECK(split_hostport("h:", host, sizeof(host), &port, 3260) == -1);
}

static void test_pattern(void)
{
	unsigned char buf[4096];
	uint64_t bad = 0;
	pattern_fill(buf, 512 * 3, sizeof(buf));
	uint64_t first;
	memcpy(&first, buf, 8);
	CHECK(first == 3 * 64); /* block n starts with n*64 (little-endian host) */
	CHECK(pattern_check(buf, 512 * 3, sizeof(buf), &bad) == 0);
	CHECK(pattern_check(buf, 512 * 4, sizeof(buf), &bad) == -1 && bad == 512 * 4);
	buf[1000] ^= 1;
	CHECK(pattern_check(buf, 512 * 3, sizeof(buf), &bad) == -1 && bad == 512 * 3 + 1000);
}

static void test_hist(void)
{
	for (uint64_t v = 0; v < 5000000; v = v * 3 / 2 + 1) {
		unsigned b = hist_bucket(v);
		CHECK(hist_bucket_top(b) >= v);
		if (b)
			CHECK(hist_bucket_top(b - 1) < v);
	}
	struct hist *h = calloc(1, sizeof(*h));
	for (uint64_t i = 1; i <= 1000; i++)
		hist_add(h, i * 1000);
	uint64_t p50 = hist_quantile(h, 0.5), p99 = hist_quantile(h, 0.99);
	CHECK(p50 >= 500000 && p50 <= 500000 * 1.02);
	CHECK(p99 >= 990000 && p99 <= 990000 * 1.02);
	CHECK(hist_quantile(h, 1.0) == 1000000);
	hist_add(h, UINT64_MAX); /* never out of range */
	CHECK(hist_quantile(h, 1.0) == UINT64_MAX);
	free(h);
}

int main(void)
{
	test_crc32c_path(0);
	test_crc32c_path(1);
	test_md5();
	test_chap();
	test_bhs();
	test_text_and_names();
	test_parsing();
	test_pattern();
	test_hist();
	printf("test_unit: %d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}

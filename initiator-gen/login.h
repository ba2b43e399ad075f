/* Login: security stage (None / CHAP-MD5, optional mutual) and operational negotiation. */
#ifndef ISTRACE_LOGIN_H
#define ISTRACE_LOGIN_H
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "gen.h"

struct negotiated {
	int hdigest, ddigest;
	uint32_t mrdsl_i2t; /* target's MaxRecvDataSegmentLength: what we may send */
	uint32_t mrdsl_t2i; /* ours */
	uint32_t max_burst, first_burst, max_r2t;
	int immediate_data, initial_r2t;
	uint16_t tsih;
	uint16_t tpgt;
	char auth[8]; /* "None" or "CHAP" */
	char target_alias[128];
};

/* Key=value text accumulator (NUL-separated, as on the wire). */
struct kvbuf {
	char buf[8192];
	size_t len;
};
void kv_add(struct kvbuf *b, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Look a key up in a received NUL-separated text; NULL when absent. */
const char *kv_get(const char *text, size_t len, const char *key);

/* CHAP_R = MD5(id || secret || challenge), RFC 1994. Output hex "0x...", 35 bytes. */
int chap_response(uint8_t id, const char *secret, const char *challenge_hex, char *out,
		  size_t outlen);

/* Log in on an open connection. discovery selects SessionType=Discovery. isid: 6 bytes.
 * verbose: print asked/granted table to stderr. Returns 0, or -1 with c->err set. */
int login_run(struct conn *c, const struct gen_opts *o, int discovery, const unsigned char isid[6],
	      struct negotiated *neg, int verbose);

#endif

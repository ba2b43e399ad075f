/* Login phase (RFC 7143 §6): a small state machine over Login Request/Response pairs. */
#define _GNU_SOURCE
#include "login.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "md5.h"
#include "names.h"
#include "pdu.h"

#define STAGE_SEC 0
#define STAGE_OP 1
#define STAGE_FFP 3
#define MAX_ROUNDS 16

void kv_add(struct kvbuf *b, const char *key, const char *fmt, ...)
{
	char val[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(val, sizeof(val), fmt, ap);
	va_end(ap);
	int n = snprintf(b->buf + b->len, sizeof(b->buf) - b->len, "%s=%s", key, val);
	if (n < 0 || (size_t)n + 1 >= sizeof(b->buf) - b->len)
		return; /* our own keys always fit; never overflow */
	b->len += (size_t)n + 1;
}

const char *kv_get(const char *text, size_t len, const char *key)
{
	size_t kl = strlen(key);
	size_t i = 0;
	while (i < len) {
		const char *s = text + i;
		size_t sl = strnlen(s, len - i);
		if (sl > kl && memcmp(s, key, kl) == 0 && s[kl] == '=' && i + sl < len)
			return s + kl + 1;
		i += sl + 1;
	}
	return NULL;
}

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9') return ch - '0';
	if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
	return -1;
}

/* "0x..." hex to bytes; returns length or -1. */
static int hex_decode(const char *s, unsigned char *out, size_t outlen)
{
	if (!s || (strncmp(s, "0x", 2) && strncmp(s, "0X", 2)))
		return -1;
	s += 2;
	size_t n = strlen(s);
	if (n == 0 || n % 2 || n / 2 > outlen)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return (int)(n / 2);
}

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	*out++ = '0';
	*out++ = 'x';
	for (size_t i = 0; i < n; i++) {
		*out++ = d[in[i] >> 4];
		*out++ = d[in[i] & 15];
	}
	*out = 0;
}

int chap_response(uint8_t id, const char *secret, const char *challenge_hex, char *out,
		  size_t outlen)
{
	unsigned char chal[1024], dig[16];
	int cl = hex_decode(challenge_hex, chal, sizeof(chal));
	if (cl < 0 || outlen < 35)
		return -1;
	struct md5_ctx m;
	md5_init(&m);
	md5_update(&m, &id, 1);
	md5_update(&m, secret, strlen(secret));
	md5_update(&m, chal, (size_t)cl);
	md5_final(&m, dig);
	hex_encode(dig, 16, out);
	return 0;
}

struct login_state {
	struct conn *c;
	const unsigned char *isid;
	uint32_t itt;
	uint16_t tsih;
	int first;
	char rx[16384]; /* last response text (continuations appended) */
	size_t rxlen;
	uint8_t rflags;
};

/* One Login Request/Response exchange. Returns 0 with the response text in st->rx, or -1. */
static int exchange(struct login_state *st, int csg, int nsg, int transit, const struct kvbuf *kv)
{
	struct conn *c = st->c;
	unsigned char bhs[BHS_LEN];
	uint8_t flags = (uint8_t)((csg & 3) << 2 | (transit ? (LOGIN_T | (nsg & 3)) : 0));
	bhs_init(bhs, OP_LOGIN_REQ, 1, flags, (uint32_t)kv->len, st->itt);
	memcpy(bhs + 8, st->isid, 6);
	put16(bhs + 14, st->tsih);
	put16(bhs + 20, 0); /* CID */
	put32(bhs + 24, c->cmdsn);
	put32(bhs + 28, c->expstatsn);
	if (conn_send_pdu(c, bhs, kv->buf, (uint32_t)kv->len) < 0)
		return -1;
	st->rxlen = 0;
	for (;;) {
		struct bhs h;
		if (conn_recv_bhs(c, &h) < 0)
			return -1;
		if (h.opcode == OP_REJECT) {
			conn_recv_data(c, &h, NULL);
			err_set(&c->err, EXIT_LOGIN, "target rejected the Login Request: %s (0x%02x)",
				reject_reason_name(h.raw[2]), h.raw[2]);
			return -1;
		}
		if (h.opcode != OP_LOGIN_RSP) {
			err_set(&c->err, EXIT_PROTOCOL, "expected Login Response, got %s (0x%02x)",
				opcode_name(h.opcode), h.opcode);
			return -1;
		}
		if (h.dsl > sizeof(st->rx) - st->rxlen - 1) {
			err_set(&c->err, EXIT_PROTOCOL, "login text too long (%u bytes)", h.dsl);
			return -1;
		}
		if (conn_recv_data(c, &h, st->rx + st->rxlen) < 0)
			return -1;
		st->rxlen += h.dsl;
		st->rx[st->rxlen] = 0;
		if (st->first) { /* the first response sets the SN baseline */
			c->expstatsn = h.statsn + 1;
			c->expcmdsn = h.expcmdsn;
			c->maxcmdsn = h.maxcmdsn;
			st->first = 0;
		} else {
			conn_update_sn(c, &h);
		}
		uint8_t cls = h.raw[36], det = h.raw[37];
		if (cls != 0) {
			const char *where = kv_get(st->rx, st->rxlen, "TargetAddress");
			err_set(&c->err, EXIT_LOGIN, "login refused: %s: %s (0x%02x%02x)%s%s",
				login_class_name(cls), login_status_name(cls, det), cls, det,
				where ? ", redirected to " : "", where ? where : "");
			return -1;
		}
		st->tsih = get16(h.raw + 14);
		st->rflags = h.flags;
		if (!(h.flags & LOGIN_C))
			break;
		/* the target has more text: ask for the rest with an empty request */
		bhs_init(bhs, OP_LOGIN_REQ, 1, (uint8_t)((csg & 3) << 2), 0, st->itt);
		memcpy(bhs + 8, st->isid, 6);
		put16(bhs + 14, st->tsih);
		put32(bhs + 24, c->cmdsn);
		put32(bhs + 28, c->expstatsn);
		if (conn_send_pdu(c, bhs, NULL, 0) < 0)
			return -1;
	}
	return 0;
}

static uint32_t num_key(const char *text, size_t len, const char *key, uint32_t dflt)
{
	const char *v = kv_get(text, len, key);
	if (!v)
		return dflt;
	char *end;
	unsigned long n = strtoul(v, &end, 0);
	if (*end || n > 0xffffffffUL)
		return dflt;
	return (uint32_t)n;
}

static int yes_key(const char *text, size_t len, const char *key, int dflt)
{
	const char *v = kv_get(text, len, key);
	if (!v)
		return dflt;
	return strcasecmp(v, "Yes") == 0;
}

static int security_stage(struct login_state *st, const struct gen_opts *o, int discovery,
			  struct negotiated *neg)
{
	struct conn *c = st->c;
	struct kvbuf kv = {0};
	int chap = o->chap_user != NULL;
	kv_add(&kv, "InitiatorName", "%s", o->initiator_name);
	kv_add(&kv, "SessionType", "%s", discovery ? "Discovery" : "Normal");
	if (!discovery)
		kv_add(&kv, "TargetName", "%s", o->target);
	kv_add(&kv, "AuthMethod", "%s", chap ? "CHAP" : "None");
	if (exchange(st, STAGE_SEC, STAGE_OP, !chap, &kv) < 0)
		return -1;
	const char *am = kv_get(st->rx, st->rxlen, "AuthMethod");
	snprintf(neg->auth, sizeof(neg->auth), "%s", am ? am : "None");
	if (!chap) {
		if (am && strcasecmp(am, "None")) {
			err_set(&c->err, EXIT_LOGIN,
				"target wants AuthMethod=%s: give --chap-user/--chap-secret", am);
			return -1;
		}
		return 0;
	}
	if (!am || strcasecmp(am, "CHAP")) {
		err_set(&c->err, EXIT_LOGIN, "target did not accept AuthMethod=CHAP (answered %s)",
			am ? am : "nothing");
		return -1;
	}
	kv.len = 0;
	kv_add(&kv, "CHAP_A", "5");
	if (exchange(st, STAGE_SEC, STAGE_OP, 0, &kv) < 0)
		return -1;
	const char *alg = kv_get(st->rx, st->rxlen, "CHAP_A");
	const char *cid = kv_get(st->rx, st->rxlen, "CHAP_I");
	const char *chal = kv_get(st->rx, st->rxlen, "CHAP_C");
	if (!alg || strcmp(alg, "5") || !cid || !chal) {
		err_set(&c->err, EXIT_LOGIN, "target's CHAP challenge is incomplete or not MD5");
		return -1;
	}
	char resp[40];
	unsigned long idv = strtoul(cid, NULL, 0);
	if (idv > 255 || chap_response((uint8_t)idv, o->chap_secret, chal, resp, sizeof(resp))) {
		err_set(&c->err, EXIT_LOGIN, "target sent a malformed CHAP challenge");
		return -1;
	}
	kv.len = 0;
	kv_add(&kv, "CHAP_N", "%s", o->chap_user);
	kv_add(&kv, "CHAP_R", "%s", resp);
	int mutual = o->chap_target_user != NULL;
	unsigned char mychal[16];
	uint8_t myid = 0;
	if (mutual) {
		char hex[40];
		if (getrandom(mychal, sizeof(mychal), 0) != (ssize_t)sizeof(mychal) ||
		    getrandom(&myid, 1, 0) != 1) {
			err_set(&c->err, EXIT_INTERNAL, "no randomness for the CHAP challenge");
			return -1;
		}
		hex_encode(mychal, sizeof(mychal), hex);
		kv_add(&kv, "CHAP_I", "%u", myid);
		kv_add(&kv, "CHAP_C", "%s", hex);
	}
	if (exchange(st, STAGE_SEC, STAGE_OP, 1, &kv) < 0)
		return -1;
	if (mutual) {
		const char *tn = kv_get(st->rx, st->rxlen, "CHAP_N");
		const char *tr = kv_get(st->rx, st->rxlen, "CHAP_R");
		char want[40], hex[40];
		hex_encode(mychal, sizeof(mychal), hex);
		chap_response(myid, o->chap_target_secret, hex, want, sizeof(want));
		if (!tn || !tr || strcmp(tn, o->chap_target_user) || strcasecmp(tr, want)) {
			err_set(&c->err, EXIT_LOGIN,
				"mutual CHAP failed: the target did not prove it knows the secret of "
				"'%s'", o->chap_target_user);
			return -1;
		}
	}
	return 0;
}

static void print_row(const char *key, const char *asked, const char *granted)
{
	fprintf(stderr, "  %-26s %-14s %s\n", key, asked, granted);
}

static int operational_stage(struct login_state *st, const struct gen_opts *o, int discovery,
			     struct negotiated *neg, int verbose)
{
	struct conn *c = st->c;
	struct kvbuf kv = {0};
	const char *hd = o->header_digest ? "CRC32C,None" : "None";
	const char *dd = o->data_digest ? "CRC32C,None" : "None";
	kv_add(&kv, "HeaderDigest", "%s", hd);
	kv_add(&kv, "DataDigest", "%s", dd);
	kv_add(&kv, "MaxRecvDataSegmentLength", "%u", o->mrdsl);
	if (!discovery) {
		kv_add(&kv, "InitialR2T", "%s", o->initial_r2t ? "Yes" : "No");
		kv_add(&kv, "ImmediateData", "%s", o->immediate_data ? "Yes" : "No");
		kv_add(&kv, "MaxBurstLength", "%u", o->max_burst);
		kv_add(&kv, "FirstBurstLength", "%u", o->first_burst);
		kv_add(&kv, "MaxOutstandingR2T", "%u", o->max_r2t);
		kv_add(&kv, "MaxConnections", "1");
		kv_add(&kv, "DataPDUInOrder", "Yes");
		kv_add(&kv, "DataSequenceInOrder", "Yes");
		kv_add(&kv, "DefaultTime2Wait", "0");
		kv_add(&kv, "DefaultTime2Retain", "0");
		kv_add(&kv, "IFMarker", "No");
		kv_add(&kv, "OFMarker", "No");
	}
	kv_add(&kv, "ErrorRecoveryLevel", "0");
	/* collect every answer across rounds; the target may answer over several responses */
	char all[16384];
	size_t alen = 0;
	struct kvbuf empty = {0};
	const struct kvbuf *send = &kv;
	for (int round = 0;; round++) {
		if (round >= MAX_ROUNDS) {
			err_set(&c->err, EXIT_LOGIN, "operational negotiation did not finish");
			return -1;
		}
		if (exchange(st, STAGE_OP, STAGE_FFP, 1, send) < 0)
			return -1;
		if (st->rxlen < sizeof(all) - alen) {
			memcpy(all + alen, st->rx, st->rxlen);
			alen += st->rxlen;
		}
		if ((st->rflags & LOGIN_T) && (st->rflags & 3) == STAGE_FFP)
			break;
		send = &empty;
	}
	const char *v;
	v = kv_get(all, alen, "HeaderDigest");
	neg->hdigest = v && strcasecmp(v, "CRC32C") == 0;
	v = kv_get(all, alen, "DataDigest");
	neg->ddigest = v && strcasecmp(v, "CRC32C") == 0;
	neg->mrdsl_t2i = o->mrdsl;
	neg->mrdsl_i2t = num_key(all, alen, "MaxRecvDataSegmentLength", 8192);
	if (neg->mrdsl_i2t < 512 || neg->mrdsl_i2t > 16777215)
		neg->mrdsl_i2t = 8192;
	neg->max_burst = num_key(all, alen, "MaxBurstLength", 262144);
	neg->first_burst = num_key(all, alen, "FirstBurstLength", 65536);
	neg->max_r2t = num_key(all, alen, "MaxOutstandingR2T", 1);
	neg->immediate_data = yes_key(all, alen, "ImmediateData", 1) && o->immediate_data;
	neg->initial_r2t = yes_key(all, alen, "InitialR2T", 1) || o->initial_r2t;
	v = kv_get(all, alen, "TargetAlias");
	snprintf(neg->target_alias, sizeof(neg->target_alias), "%s", v ? v : "");
	neg->tpgt = (uint16_t)num_key(all, alen, "TargetPortalGroupTag", 0);
	if (neg->first_burst > neg->max_burst)
		neg->first_burst = neg->max_burst;
	if (verbose) {
		char a[32], g[32];
		fprintf(stderr, "login: %s %s: TSIH 0x%04x, auth %s%s%s\n", c->peer,
			discovery ? "(discovery)" : o->target, st->tsih, neg->auth,
			neg->target_alias[0] ? ", alias " : "", neg->target_alias);
		print_row("key", "asked", "granted");
		print_row("HeaderDigest", hd, neg->hdigest ? "CRC32C" : "None");
		print_row("DataDigest", dd, neg->ddigest ? "CRC32C" : "None");
		snprintf(a, sizeof(a), "%u", o->mrdsl);
		snprintf(g, sizeof(g), "%u (target's: %u)", o->mrdsl, neg->mrdsl_i2t);
		print_row("MaxRecvDataSegmentLength", a, g);
		if (!discovery) {
			snprintf(a, sizeof(a), "%u", o->max_burst);
			snprintf(g, sizeof(g), "%u", neg->max_burst);
			print_row("MaxBurstLength", a, g);
			snprintf(a, sizeof(a), "%u", o->first_burst);
			snprintf(g, sizeof(g), "%u", neg->first_burst);
			print_row("FirstBurstLength", a, g);
			print_row("ImmediateData", o->immediate_data ? "Yes" : "No",
				  neg->immediate_data ? "Yes" : "No");
			print_row("InitialR2T", o->initial_r2t ? "Yes" : "No",
				  neg->initial_r2t ? "Yes" : "No");
			snprintf(a, sizeof(a), "%u", o->max_r2t);
			snprintf(g, sizeof(g), "%u", neg->max_r2t);
			print_row("MaxOutstandingR2T", a, g);
		}
		v = kv_get(all, alen, "ErrorRecoveryLevel");
		print_row("ErrorRecoveryLevel", "0", v ? v : "0");
	}
	v = kv_get(all, alen, "ErrorRecoveryLevel");
	if (v && strcmp(v, "0")) {
		err_set(&c->err, EXIT_LOGIN, "target insists on ErrorRecoveryLevel=%s", v);
		return -1;
	}
	return 0;
}

int login_run(struct conn *c, const struct gen_opts *o, int discovery, const unsigned char isid[6],
	      struct negotiated *neg, int verbose)
{
	struct login_state *st = calloc(1, sizeof(*st));
	if (!st) {
		err_set(&c->err, EXIT_INTERNAL, "out of memory");
		return -1;
	}
	memset(neg, 0, sizeof(*neg));
	st->c = c;
	st->isid = isid;
	st->itt = 0;
	st->first = 1;
	c->cmdsn = 1;
	c->expstatsn = 0;
	int rc = security_stage(st, o, discovery, neg);
	if (!rc && !((st->rflags & LOGIN_T) && (st->rflags & 3) == STAGE_OP)) {
		err_set(&c->err, EXIT_LOGIN, "target did not leave the security stage");
		rc = -1;
	}
	if (!rc)
		rc = operational_stage(st, o, discovery, neg, verbose);
	if (!rc) {
		neg->tsih = st->tsih;
		c->hdigest = neg->hdigest;
		c->ddigest = neg->ddigest;
		c->mrdsl_tx = neg->mrdsl_i2t;
		/* the login's CmdSN is reused by the first full-feature command (§11.12.6) */
		c->cmdsn = c->expcmdsn;
	}
	free(st);
	return rc ? -1 : 0;
}

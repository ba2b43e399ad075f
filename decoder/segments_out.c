/* segments.csv: one row per TCP segment (every port, pure ACKs, SYN/FIN/RST, retransmissions).
 * Written from the packet loop, so it must cost little per packet: rows are formatted straight
 * into a large buffer with a two-digits-at-a-time integer formatter, and the text of the last
 * few addresses is kept (a capture mostly alternates between two hosts). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include "segments_out.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEG_BUF (1u << 18)
#define ROW_MAX 512 /* longest row: 2 addresses (64-byte copies) + 14 numbers (<= 20) + commas */
#define ADDR_CACHE 8

static const char header[] =
	"frame,ts_ns,src,sport,dst,dport,seq,ack,flags,win,len,wscale,mss,tsval,tsecr,sack\n";

struct addr_ent {
	uint8_t ip[16]; /* IPv4: 4 bytes, then zeros (as packet.c leaves them) */
	uint8_t fam;
	uint8_t n;
	char txt[64];   /* copied whole (a constant-size copy is a few moves), n bytes count */
};

struct seg_out {
	struct seg_bin *bin; /* a FILE.bin: records (segments_bin.c) rather than text */
	FILE *f;
	int err;
	size_t len;
	unsigned next_slot;
	struct addr_ent cache[ADDR_CACHE];
	uint64_t sec;      /* the last timestamp's seconds, their digits in sec_txt */
	char sec_txt[24];
	size_t sec_n;
	char buf[SEG_BUF];
};

static const char digits2[] =
	"00010203040506070809101112131415161718192021222324252627282930313233343536373839"
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

/* Digits are written right to left straight into the row (no temporary, no memcpy call), in
 * 32-bit arithmetic; 64-bit values are cut into a 32-bit head and 9-digit groups. */
static inline void fill32(char *e, uint32_t v)
{
	while (v >= 100) {
		uint32_t r = v % 100;
		v /= 100;
		e -= 2;
		e[0] = digits2[2 * r];
		e[1] = digits2[2 * r + 1];
	}
	if (v >= 10) {
		e -= 2;
		e[0] = digits2[2 * v];
		e[1] = digits2[2 * v + 1];
	} else {
		e[-1] = (char)('0' + v);
	}
}

static inline unsigned nd32(uint32_t v)
{
	return v < 100000 ? (v < 10 ? 1 : v < 100 ? 2 : v < 1000 ? 3 : v < 10000 ? 4 : 5)
			  : (v < 1000000 ? 6 : v < 10000000 ? 7 : v < 100000000 ? 8
			     : v < 1000000000 ? 9 : 10);
}

static inline char *put_u32(char *p, uint32_t v)
{
	unsigned n = nd32(v);
	fill32(p + n, v);
	return p + n;
}

/* Exactly 9 digits, zero-padded (v < 10^9). */
static inline char *put_9(char *p, uint32_t v)
{
	for (int i = 8; i > 0; i -= 2) {
		uint32_t r = v % 100;
		v /= 100;
		p[i - 1] = digits2[2 * r];
		p[i] = digits2[2 * r + 1];
	}
	p[0] = (char)('0' + v);
	return p + 9;
}

static char *put_u64(char *p, uint64_t v)
{
	if (v <= UINT32_MAX)
		return put_u32(p, (uint32_t)v);
	uint64_t hi = v / 1000000000u;
	p = put_u64(p, hi);
	return put_9(p, (uint32_t)(v - hi * 1000000000u));
}

static inline char *put_i32(char *p, int32_t v)
{
	if (v < 0) {
		*p++ = '-';
		return put_u32(p, (uint32_t)0 - (uint32_t)v);
	}
	return put_u32(p, (uint32_t)v);
}

/* The text of an address, cached (seg_addr_text). */
static const struct addr_ent *addr(struct seg_out *s, uint8_t fam, const uint8_t *ip)
{
	uint64_t k[2];
	memcpy(k, ip, 16);
	for (unsigned i = 0; i < ADDR_CACHE; i++) {
		const struct addr_ent *e = &s->cache[i];
		uint64_t c[2];
		memcpy(c, e->ip, 16);
		if (c[0] == k[0] && c[1] == k[1] && e->fam == fam)
			return e;
	}
	struct addr_ent *e = &s->cache[s->next_slot++ % ADDR_CACHE];
	e->fam = fam;
	memcpy(e->ip, ip, 16);
	e->n = (uint8_t)seg_addr_text(fam, ip, e->txt, sizeof e->txt);
	return e;
}

size_t seg_addr_text(uint8_t fam, const uint8_t *ip, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	if (!inet_ntop(fam == 4 ? AF_INET : AF_INET6, ip, a, sizeof a))
		a[0] = 0;
	int w = snprintf(buf, len, fam == 4 ? "%s" : "[%s]", a);
	return w < 0 ? 0 : (size_t)w >= len ? len - 1 : (size_t)w;
}

uint32_t seg_payload_len(const struct tcp_seg *g)
{
	return g->seglen >= g->hlen ? g->seglen - g->hlen : 0;
}

void seg_options(const struct tcp_seg *g, struct seg_opts *o)
{
	o->wscale = o->mss = -1;
	o->tsval = o->tsecr = -1;
	o->sack = 0;
	if (g->hlen <= 20 || g->seglen < g->hlen)
		return;
	const uint8_t *t = g->tcp;
	uint32_t end = g->hlen < g->tcp_avail ? g->hlen : g->tcp_avail; /* captured options only */
	uint32_t i = 20;
	while (i < end) {
		uint8_t kind = t[i];
		if (kind == 0)
			break;
		if (kind == 1) {
			i++;
			continue;
		}
		if (i + 1 >= end)
			break;
		uint32_t olen = t[i + 1];
		if (olen < 2 || i + olen > end)
			break;
		if (kind == 3 && olen == 3)
			o->wscale = t[i + 2] < 14 ? t[i + 2] : 14; /* RFC 7323: at most 14 */
		else if (kind == 2 && olen == 4)
			o->mss = t[i + 2] << 8 | t[i + 3];
		else if (kind == 8 && olen == 10) {
			o->tsval = (int64_t)((uint32_t)t[i + 2] << 24 | (uint32_t)t[i + 3] << 16 |
					     (uint32_t)t[i + 4] << 8 | t[i + 5]);
			o->tsecr = (int64_t)((uint32_t)t[i + 6] << 24 | (uint32_t)t[i + 7] << 16 |
					     (uint32_t)t[i + 8] << 8 | t[i + 9]);
		} else if (kind == 5)
			o->sack = 1;
		i += olen;
	}
}

static void flush_buf(struct seg_out *s)
{
	if (s->len && fwrite(s->buf, 1, s->len, s->f) != s->len)
		s->err = 1;
	s->len = 0;
}

/* ns since the epoch: the seconds' digits change once a second, so they are kept. */
static char *put_ts(struct seg_out *s, char *p, int64_t ts_ns)
{
	uint64_t t = ts_ns < 0 ? 0 : (uint64_t)ts_ns; /* decoder_time() never gives < 0 */
	uint64_t sec = t / 1000000000u;
	uint32_t ns = (uint32_t)(t - sec * 1000000000u);
	if (!sec)
		return put_u32(p, ns);
	if (sec != s->sec) {
		s->sec = sec;
		s->sec_n = (size_t)(put_u64(s->sec_txt, sec) - s->sec_txt);
	}
	memcpy(p, s->sec_txt, sizeof s->sec_txt);
	return put_9(p + s->sec_n, ns);
}

void seg_out_row(struct seg_out *s, uint64_t frame, int64_t ts_ns, const struct tcp_seg *g)
{
	if (s->bin) {
		seg_bin_row(s->bin, frame, ts_ns, g);
		return;
	}
	if (s->len + ROW_MAX > SEG_BUF)
		flush_buf(s);
	char *p = s->buf + s->len;
	const struct addr_ent *a = addr(s, g->family, g->src);
	p = put_u64(p, frame);
	*p++ = ',';
	p = put_ts(s, p, ts_ns);
	*p++ = ',';
	memcpy(p, a->txt, sizeof a->txt);
	p += a->n;
	*p++ = ',';
	p = put_u32(p, g->sport);
	*p++ = ',';
	a = addr(s, g->family, g->dst);
	memcpy(p, a->txt, sizeof a->txt);
	p += a->n;
	*p++ = ',';
	p = put_u32(p, g->dport);
	*p++ = ',';
	p = put_u32(p, g->seq);
	*p++ = ',';
	p = put_u32(p, g->ack);
	*p++ = ',';
	p = put_u32(p, g->flags);
	*p++ = ',';
	p = put_u32(p, g->win);
	*p++ = ',';
	p = put_u32(p, seg_payload_len(g));
	if (g->hlen <= 20) { /* no options: the common case of data segments without timestamps */
		static const char none[] = ",-1,-1,-1,-1,0\n";
		memcpy(p, none, sizeof none - 1);
		p += sizeof none - 1;
	} else {
		struct seg_opts o;
		seg_options(g, &o);
		*p++ = ',';
		p = put_i32(p, o.wscale);
		*p++ = ',';
		p = put_i32(p, o.mss);
		*p++ = ',';
		p = o.tsval < 0 ? put_i32(p, -1) : put_u32(p, (uint32_t)o.tsval);
		*p++ = ',';
		p = o.tsecr < 0 ? put_i32(p, -1) : put_u32(p, (uint32_t)o.tsecr);
		*p++ = ',';
		*p++ = (char)('0' + o.sack);
		*p++ = '\n';
	}
	s->len = (size_t)(p - s->buf);
}

struct seg_out *seg_out_open(const char *path, char *err, size_t errlen)
{
	size_t plen = strlen(path);
	int is_stdout = !strcmp(path, "-"), records = plen >= 4 && !strcmp(path + plen - 4, ".bin");
	FILE *f = is_stdout ? stdout : fopen(path, "wb");
	if (!f) {
		snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
		return NULL;
	}
	struct seg_out *s = calloc(1, sizeof *s);
	if (!s || (records && !(s->bin = seg_bin_new(f)))) {
		snprintf(err, errlen, "out of memory");
		free(s);
		if (!is_stdout)
			fclose(f);
		return NULL;
	}
	s->f = f;
	if (records)
		return s;
	s->sec = UINT64_MAX;
	memcpy(s->buf, header, sizeof header - 1);
	s->len = sizeof header - 1;
	return s;
}

int seg_out_close(struct seg_out *s)
{
	if (!s)
		return 0;
	int err;
	if (s->bin) {
		err = seg_bin_finish(s->bin);
	} else {
		flush_buf(s);
		err = s->err;
	}
	if (s->f == stdout) {
		if (fflush(s->f) != 0)
			err = 1;
	} else if (fclose(s->f) != 0) {
		err = 1;
	}
	free(s);
	return err ? -1 : 0;
}

/* segments.bin: the TCP segments table in blocks of columns that numpy maps without parsing
 * (docs/schema.md §4c): blocks of BLOCK_ROWS segments, each block every column's values of its
 * rows one column after the other (little-endian), then the text of each distinct address
 * (rows name them by index), then each distinct endpoint pair (src, dst, ports: rows name
 * them by index too), then a 40-byte trailer with the counts. Column by column because
 * every reader takes a few columns of many rows: from records that was a strided pass over
 * all of them per column, from a block a contiguous copy. The columns and their values are
 * segments.csv's (segments_out.c), a row for a row. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "segments_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_ROWS 65536
static const char magic[8] = { 'I', 'S', 'T', 'S', 'E', 'G', 'S', '2' };

/* The columns in the order a block stores them (widest first: every column of a block starts
 * aligned to its width), with their widths in bytes. */
enum { C_TS, C_FRAME, C_TSVAL, C_TSECR, C_SEQ, C_ACK, C_LEN, C_WIN, C_SRC, C_DST, C_MSS,
       C_EP, C_SPORT, C_DPORT, C_FLAGS, C_WSCALE, C_SACK, N_COLS };
static const unsigned col_width[N_COLS] = { 8, 8, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 1, 1, 1 };
#define ROW_BYTES 71 /* the widths' sum */
#define EP_BYTES 16  /* an endpoint pair in the list: src, dst, sport, dport, SYN+ACK, pad */

struct addr_slot {
	uint8_t used, fam;
	uint8_t ip[16];
	uint32_t index;
};

/* A distinct (src, dst, sport, dport), addresses by index: a capture's millions of rows are
 * between a handful, and a reader labels each row's connection and direction by its pair's
 * index instead of comparing its addresses and ports. `synack`: some row of the pair was a
 * SYN+ACK (its source answered a SYN: the server side, when the ports do not tell). */
struct ep {
	uint32_t src, dst;
	uint16_t sport, dport;
	uint8_t synack;
};

struct seg_bin {
	FILE *f;
	int err;
	uint64_t n;
	unsigned char *col[N_COLS]; /* the block being filled: BLOCK_ROWS values a column */
	size_t nbuf;
	/* distinct addresses: an open-addressing table over (family, ip), and their text in
	 * index order */
	struct addr_slot *slots;
	size_t nslots, naddr;
	char *text;
	size_t text_len, text_cap;
	uint32_t last_index[2];
	uint8_t last_ip[2][16], last_fam[2];
	/* distinct endpoint pairs: an open-addressing table of indexes into eps (UINT32_MAX:
	 * free), eps in order of first appearance */
	uint32_t *ep_slots;
	size_t n_ep_slots;
	struct ep *eps;
	size_t n_eps, eps_cap;
	uint32_t last_ep[2];
};

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static size_t slot_of(const struct seg_bin *s, uint8_t fam, const uint8_t *ip)
{
	uint64_t h = 1469598103934665603ull ^ fam;
	for (int i = 0; i < 16; i++)
		h = (h ^ ip[i]) * 1099511628211ull;
	size_t k = (size_t)h & (s->nslots - 1);
	while (s->slots[k].used && !(s->slots[k].fam == fam && !memcmp(s->slots[k].ip, ip, 16)))
		k = (k + 1) & (s->nslots - 1);
	return k;
}

static int grow(struct seg_bin *s)
{
	size_t old_n = s->nslots, n = old_n ? old_n * 2 : 64;
	struct addr_slot *old = s->slots;
	s->slots = calloc(n, sizeof *s->slots);
	if (!s->slots) {
		s->slots = old;
		return -1;
	}
	s->nslots = n;
	for (size_t i = 0; i < old_n; i++)
		if (old[i].used)
			s->slots[slot_of(s, old[i].fam, old[i].ip)] = old[i];
	free(old);
	return 0;
}

/* The text of a new address, appended to the address list. */
static int add_text(struct seg_bin *s, uint8_t fam, const uint8_t *ip)
{
	char t[64];
	size_t n = seg_addr_text(fam, ip, t, sizeof t);
	if (s->text_len + n + 1 > s->text_cap) {
		size_t cap = s->text_cap ? s->text_cap * 2 : 1024;
		while (cap < s->text_len + n + 1)
			cap *= 2;
		char *p = realloc(s->text, cap);
		if (!p)
			return -1;
		s->text = p;
		s->text_cap = cap;
	}
	memcpy(s->text + s->text_len, t, n);
	s->text[s->text_len + n] = 0;
	s->text_len += n + 1;
	return 0;
}

/* The index of an address, added on first sight; the last two are checked first (a capture
 * mostly alternates between two hosts). UINT32_MAX when out of memory. */
static uint32_t addr_index(struct seg_bin *s, uint8_t fam, const uint8_t *ip)
{
	for (int i = 0; i < 2; i++)
		if (s->last_fam[i] == fam && !memcmp(s->last_ip[i], ip, 16))
			return s->last_index[i];
	if ((s->naddr + 1) * 2 > s->nslots && grow(s))
		return UINT32_MAX;
	size_t k = slot_of(s, fam, ip);
	if (!s->slots[k].used) {
		if (add_text(s, fam, ip))
			return UINT32_MAX;
		s->slots[k] = (struct addr_slot){ .used = 1, .fam = fam, .index = (uint32_t)s->naddr++ };
		memcpy(s->slots[k].ip, ip, 16);
	}
	s->last_fam[1] = s->last_fam[0];
	memcpy(s->last_ip[1], s->last_ip[0], 16);
	s->last_index[1] = s->last_index[0];
	s->last_fam[0] = fam;
	memcpy(s->last_ip[0], ip, 16);
	s->last_index[0] = s->slots[k].index;
	return s->slots[k].index;
}

static int same_ep(const struct ep *a, const struct ep *b)
{
	return a->src == b->src && a->dst == b->dst && a->sport == b->sport && a->dport == b->dport;
}

static size_t ep_slot_of(const struct seg_bin *s, const struct ep *e)
{
	uint64_t h = ((uint64_t)e->src * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)e->dst << 32) ^
		     ((uint64_t)e->sport << 16) ^ e->dport;
	h *= 0xff51afd7ed558ccdull;
	size_t k = (size_t)(h >> 17) & (s->n_ep_slots - 1);
	while (s->ep_slots[k] != UINT32_MAX && !same_ep(&s->eps[s->ep_slots[k]], e))
		k = (k + 1) & (s->n_ep_slots - 1);
	return k;
}

static int grow_eps(struct seg_bin *s)
{
	size_t n = s->n_ep_slots ? s->n_ep_slots * 2 : 64;
	uint32_t *slots = malloc(n * sizeof *slots);
	if (!slots)
		return -1;
	memset(slots, 0xff, n * sizeof *slots);
	free(s->ep_slots);
	s->ep_slots = slots;
	s->n_ep_slots = n;
	for (size_t i = 0; i < s->n_eps; i++)
		s->ep_slots[ep_slot_of(s, &s->eps[i])] = (uint32_t)i;
	return 0;
}

/* The index of a row's endpoint pair, added on first sight; the last two are checked first
 * (a connection's two directions alternate). UINT32_MAX when out of memory. */
static uint32_t ep_index(struct seg_bin *s, const struct ep *e)
{
	for (int i = 0; i < 2; i++)
		if (s->last_ep[i] < s->n_eps && same_ep(&s->eps[s->last_ep[i]], e))
			return s->last_ep[i];
	if ((s->n_eps + 1) * 2 > s->n_ep_slots && grow_eps(s))
		return UINT32_MAX;
	size_t k = ep_slot_of(s, e);
	if (s->ep_slots[k] == UINT32_MAX) {
		if (s->n_eps == s->eps_cap) {
			size_t cap = s->eps_cap ? s->eps_cap * 2 : 16;
			struct ep *p = realloc(s->eps, cap * sizeof *p);
			if (!p)
				return UINT32_MAX;
			s->eps = p;
			s->eps_cap = cap;
		}
		s->eps[s->n_eps] = *e;
		s->ep_slots[k] = (uint32_t)s->n_eps++;
	}
	s->last_ep[1] = s->last_ep[0];
	s->last_ep[0] = s->ep_slots[k];
	return s->ep_slots[k];
}

/* The block so far, a column after the other, each as long as the block's rows. */
static void flush_block(struct seg_bin *s)
{
	for (int c = 0; c < N_COLS && s->nbuf; c++)
		if (fwrite(s->col[c], col_width[c], s->nbuf, s->f) != s->nbuf)
			s->err = 1;
	s->nbuf = 0;
}

static void seg_bin_free(struct seg_bin *s)
{
	free(s->col[0]);
	free(s->ep_slots);
	free(s->eps);
	free(s->slots);
	free(s->text);
	free(s);
}

struct seg_bin *seg_bin_new(FILE *f)
{
	struct seg_bin *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->col[0] = malloc((size_t)BLOCK_ROWS * ROW_BYTES);
	if (!s->col[0] || grow(s) || grow_eps(s)) {
		seg_bin_free(s);
		return NULL;
	}
	for (int c = 1; c < N_COLS; c++)
		s->col[c] = s->col[c - 1] + (size_t)BLOCK_ROWS * col_width[c - 1];
	s->f = f;
	s->last_fam[0] = s->last_fam[1] = 0xff; /* no address yet */
	s->last_ep[0] = s->last_ep[1] = UINT32_MAX;
	return s;
}

void seg_bin_row(struct seg_bin *s, uint64_t frame, int64_t ts_ns, const struct tcp_seg *g)
{
	size_t i = s->nbuf;
	struct seg_opts o = { -1, -1, -1, -1, 0 };
	uint32_t src = addr_index(s, g->family, g->src), dst = addr_index(s, g->family, g->dst);
	struct ep e = { src, dst, g->sport, g->dport, 0 };
	uint32_t ep = src == UINT32_MAX || dst == UINT32_MAX ? UINT32_MAX : ep_index(s, &e);
	if (ep == UINT32_MAX) {
		s->err = 1;
		return;
	}
	if ((g->flags & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK))
		s->eps[ep].synack = 1;
	if (g->hlen > 20)
		seg_options(g, &o);
	put64(s->col[C_TS] + 8 * i, (uint64_t)ts_ns);
	put64(s->col[C_FRAME] + 8 * i, frame);
	put64(s->col[C_TSVAL] + 8 * i, (uint64_t)o.tsval);
	put64(s->col[C_TSECR] + 8 * i, (uint64_t)o.tsecr);
	put32(s->col[C_SEQ] + 4 * i, g->seq);
	put32(s->col[C_ACK] + 4 * i, g->ack);
	put32(s->col[C_LEN] + 4 * i, seg_payload_len(g));
	put32(s->col[C_WIN] + 4 * i, g->win);
	put32(s->col[C_SRC] + 4 * i, src);
	put32(s->col[C_DST] + 4 * i, dst);
	put32(s->col[C_MSS] + 4 * i, (uint32_t)o.mss);
	put32(s->col[C_EP] + 4 * i, ep);
	put16(s->col[C_SPORT] + 2 * i, g->sport);
	put16(s->col[C_DPORT] + 2 * i, g->dport);
	s->col[C_FLAGS][i] = g->flags;
	s->col[C_WSCALE][i] = (unsigned char)(int8_t)o.wscale;
	s->col[C_SACK][i] = (unsigned char)o.sack;
	s->n++;
	if (++s->nbuf == BLOCK_ROWS)
		flush_block(s);
}

int seg_bin_finish(struct seg_bin *s)
{
	unsigned char t[40];
	flush_block(s);
	if (s->text_len && fwrite(s->text, 1, s->text_len, s->f) != s->text_len)
		s->err = 1;
	for (size_t k = 0; k < s->n_eps; k++) {
		unsigned char r[EP_BYTES] = { 0 };
		put32(r, s->eps[k].src);
		put32(r + 4, s->eps[k].dst);
		put16(r + 8, s->eps[k].sport);
		put16(r + 10, s->eps[k].dport);
		r[12] = s->eps[k].synack;
		if (fwrite(r, 1, sizeof r, s->f) != sizeof r)
			s->err = 1;
	}
	memcpy(t, magic, 8);
	put32(t + 8, ROW_BYTES);
	put32(t + 12, (uint32_t)s->naddr);
	put64(t + 16, s->n);
	put64(t + 24, s->text_len);
	put32(t + 32, BLOCK_ROWS);
	put32(t + 36, (uint32_t)s->n_eps);
	if (fwrite(t, 1, sizeof t, s->f) != sizeof t)
		s->err = 1;
	int err = s->err;
	seg_bin_free(s);
	return err ? -1 : 0;
}

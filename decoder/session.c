/* The decoder's bookkeeping: connections (flat hash), commands by (connection, ITT) (flat
 * hash), login/text negotiation, and the two output queues that hand records to the sinks
 * in PDU order and command issue order. Also the packet loop. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <pcap/pcap.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "crc32c.h"
#include "scsi.h"

struct itt_ent {
	uint64_t key; /* (conn id + 1) << 32 | itt; 0 = empty */
	uint64_t cmd;
};

struct decoder {
	struct decode_opts o;
	struct decode_sinks sk;
	struct decode_stats *st;
	int dlt;
	struct conn **conns;
	uint32_t n_conns, cap_conns;
	struct conn **chash;
	uint32_t chash_cap;
	struct conn *last;
	struct itt_ent *imap;
	uint64_t imap_cap, imap_n;
	struct pdu_rec *pr;
	uint64_t pr_head, pr_next, pr_cap;
	struct cmd_rec *cr;
	uint64_t cr_head, cr_next, cr_cap;
	uint64_t ooo_total;
};

#define PR_MAX (1u << 17) /* PDUs held back behind one still being assembled */

struct decode_stats *decoder_stats(struct decoder *d) { return d->st; }
uint64_t *decoder_ooo_total(struct decoder *d) { return &d->ooo_total; }

void decode_opts_init(struct decode_opts *o)
{
	memset(o, 0, sizeof *o);
	o->ports[0] = 3260;
	o->n_ports = 1;
	o->block_size = 512;
}

/* --- output queues ---------------------------------------------------------------------- */

static struct pdu_rec *pslot(struct decoder *d, uint64_t i) { return &d->pr[i & (d->pr_cap - 1)]; }
static struct cmd_rec *cslot(struct decoder *d, uint64_t i) { return &d->cr[i & (d->cr_cap - 1)]; }

static void emit_pdu_head(struct decoder *d)
{
	struct pdu_rec *r = pslot(d, d->pr_head);
	if (r->kv)
		r->kv[r->kv_len] = 0;
	d->st->pdus++;
	if (d->sk.pdu)
		d->sk.pdu(d->sk.ctx, r);
	d->pr_head++;
}

static void flush_pdus(struct decoder *d, int force)
{
	while (d->pr_head < d->pr_next && (force || pslot(d, d->pr_head)->complete))
		emit_pdu_head(d);
}

static void flush_cmds(struct decoder *d, int force)
{
	while (d->cr_head < d->cr_next && (force || cslot(d, d->cr_head)->complete)) {
		if (d->sk.cmd)
			d->sk.cmd(d->sk.ctx, cslot(d, d->cr_head));
		d->cr_head++;
	}
}

static int grow_ring(void **arr, uint64_t *cap, uint64_t head, uint64_t next, size_t elsz)
{
	uint64_t ncap = *cap ? *cap * 2 : 256;
	char *n = calloc(ncap, elsz);
	if (!n)
		return 0;
	for (uint64_t i = head; i < next; i++)
		memcpy(n + (i & (ncap - 1)) * elsz, (char *)*arr + (i & (*cap - 1)) * elsz, elsz);
	/* Only called when the ring is full: every old slot is moved, nothing is lost. */
	free(*arr);
	*arr = n;
	*cap = ncap;
	return 1;
}

static uint64_t pdu_alloc(struct decoder *d)
{
	if (d->pr_next - d->pr_head == d->pr_cap) {
		if (d->pr_cap >= PR_MAX) {
			/* Something waits too long (a PDU whose data never ends): let it go out. */
			struct pdu_rec *h = pslot(d, d->pr_head);
			h->notes |= N_INCOMPLETE;
			emit_pdu_head(d);
			flush_pdus(d, 0);
		} else {
			/* The ring is full, so every slot is live and moves with its kv buffer. */
			void *arr = d->pr;
			if (!grow_ring(&arr, &d->pr_cap, d->pr_head, d->pr_next, sizeof *d->pr))
				emit_pdu_head(d);
			else
				d->pr = arr;
		}
	}
	uint64_t idx = d->pr_next++;
	struct pdu_rec *r = pslot(d, idx);
	char *kv = r->kv;
	size_t cap = r->kv_cap;
	memset(r, 0, sizeof *r);
	r->kv = kv;
	r->kv_cap = kv ? cap : 0;
	r->pdu = idx;
	r->cmd = -1;
	return idx;
}

static uint64_t cmd_alloc(struct decoder *d)
{
	if (d->cr_next - d->cr_head == d->cr_cap) {
		void *arr = d->cr;
		if (grow_ring(&arr, &d->cr_cap, d->cr_head, d->cr_next, sizeof *d->cr))
			d->cr = arr;
		else
			flush_cmds(d, 1);
	}
	uint64_t idx = d->cr_next++;
	struct cmd_rec *r = cslot(d, idx);
	memset(r, 0, sizeof *r);
	r->cmd = idx;
	r->first_data_ts = r->last_data_ts = r->resp_ts = -1;
	d->st->commands++;
	return idx;
}

static struct cmd_rec *cmd_get(struct decoder *d, int64_t idx)
{
	if (idx < 0 || (uint64_t)idx < d->cr_head || (uint64_t)idx >= d->cr_next)
		return NULL;
	return cslot(d, (uint64_t)idx);
}

/* --- ITT map: open addressing, linear probing, backward-shift deletion ----------------- */

static uint64_t hash64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return k;
}

static uint64_t itt_key(const struct conn *c, uint32_t itt)
{
	return ((uint64_t)(c->id + 1) << 32) | itt;
}

static int64_t itt_find(struct decoder *d, uint64_t key)
{
	if (!d->imap_cap)
		return -1;
	uint64_t m = d->imap_cap - 1;
	for (uint64_t i = hash64(key) & m;; i = (i + 1) & m) {
		if (d->imap[i].key == key)
			return (int64_t)d->imap[i].cmd;
		if (d->imap[i].key == 0)
			return -1;
	}
}

static void itt_put(struct decoder *d, uint64_t key, uint64_t cmd);

int decoder_itt_open(struct decoder *d, const struct conn *c, uint32_t itt)
{
	return itt_find(d, itt_key(c, itt)) >= 0;
}

static void itt_grow(struct decoder *d)
{
	struct itt_ent *old = d->imap;
	uint64_t ocap = d->imap_cap;
	uint64_t ncap = ocap ? ocap * 2 : 1024;
	struct itt_ent *n = calloc(ncap, sizeof *n);
	if (!n)
		return;
	d->imap = n;
	d->imap_cap = ncap;
	d->imap_n = 0;
	for (uint64_t i = 0; i < ocap; i++)
		if (old[i].key)
			itt_put(d, old[i].key, old[i].cmd);
	free(old);
}

static void itt_put(struct decoder *d, uint64_t key, uint64_t cmd)
{
	if ((d->imap_n + 1) * 2 > d->imap_cap)
		itt_grow(d);
	if (!d->imap_cap)
		return;
	uint64_t m = d->imap_cap - 1;
	for (uint64_t i = hash64(key) & m;; i = (i + 1) & m) {
		if (d->imap[i].key == key) {
			d->imap[i].cmd = cmd;
			return;
		}
		if (d->imap[i].key == 0) {
			d->imap[i].key = key;
			d->imap[i].cmd = cmd;
			d->imap_n++;
			return;
		}
	}
}

static void itt_del(struct decoder *d, uint64_t key)
{
	if (!d->imap_cap)
		return;
	uint64_t m = d->imap_cap - 1;
	uint64_t i = hash64(key) & m;
	while (d->imap[i].key != key) {
		if (d->imap[i].key == 0)
			return;
		i = (i + 1) & m;
	}
	d->imap[i].key = 0;
	d->imap_n--;
	/* Shift back later entries of the probe run so lookups never stop early. */
	for (uint64_t j = (i + 1) & m; d->imap[j].key; j = (j + 1) & m) {
		uint64_t h = hash64(d->imap[j].key) & m;
		if (((j - h) & m) >= ((j - i) & m)) {
			d->imap[i] = d->imap[j];
			d->imap[j].key = 0;
			i = j;
		}
	}
}

/* --- connections ----------------------------------------------------------------------- */

static uint64_t conn_hash(uint8_t fam, const uint8_t *ip0, uint16_t p0, const uint8_t *ip1,
			  uint16_t p1)
{
	uint64_t h = fam * 0x9e3779b97f4a7c15ULL ^ ((uint64_t)p0 << 16 | p1);
	for (int i = 0; i < 16; i += 8) {
		uint64_t a, b;
		memcpy(&a, ip0 + i, 8);
		memcpy(&b, ip1 + i, 8);
		h = hash64(h ^ a) ^ hash64(b + i);
	}
	return hash64(h);
}

static int conn_match(const struct conn *c, uint8_t fam, const uint8_t *ip0, uint16_t p0,
		      const uint8_t *ip1, uint16_t p1)
{
	return c->family == fam && c->port[0] == p0 && c->port[1] == p1 &&
	       !memcmp(c->ip[0], ip0, 16) && !memcmp(c->ip[1], ip1, 16);
}

static void addr_text(uint8_t fam, const uint8_t *ip, uint16_t port, char *out, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	if (fam == 4) {
		inet_ntop(AF_INET, ip, a, sizeof a);
		snprintf(out, len, "%s:%u", a, port);
	} else {
		inet_ntop(AF_INET6, ip, a, sizeof a);
		snprintf(out, len, "[%s]:%u", a, port);
	}
}

static void chash_insert(struct decoder *d, struct conn *c)
{
	uint32_t m = d->chash_cap - 1;
	uint64_t h = conn_hash(c->family, c->ip[0], c->port[0], c->ip[1], c->port[1]);
	for (uint32_t i = (uint32_t)h & m;; i = (i + 1) & m)
		if (!d->chash[i]) {
			d->chash[i] = c;
			return;
		}
}

static struct conn *conn_get(struct decoder *d, uint8_t fam, const uint8_t *ip0, uint16_t p0,
			     const uint8_t *ip1, uint16_t p1)
{
	if (d->last && conn_match(d->last, fam, ip0, p0, ip1, p1))
		return d->last;
	if (d->chash_cap) {
		uint32_t m = d->chash_cap - 1;
		uint64_t h = conn_hash(fam, ip0, p0, ip1, p1);
		for (uint32_t i = (uint32_t)h & m; d->chash[i]; i = (i + 1) & m)
			if (conn_match(d->chash[i], fam, ip0, p0, ip1, p1))
				return d->last = d->chash[i];
	}
	if ((d->n_conns + 1) * 2 > d->chash_cap) {
		uint32_t ncap = d->chash_cap ? d->chash_cap * 2 : 64;
		struct conn **n = calloc(ncap, sizeof *n);
		if (!n)
			return NULL;
		free(d->chash);
		d->chash = n;
		d->chash_cap = ncap;
		for (uint32_t i = 0; i < d->n_conns; i++)
			chash_insert(d, d->conns[i]);
	}
	if (d->n_conns == d->cap_conns) {
		uint32_t ncap = d->cap_conns ? d->cap_conns * 2 : 16;
		struct conn **n = realloc(d->conns, ncap * sizeof *n);
		if (!n)
			return NULL;
		d->conns = n;
		d->cap_conns = ncap;
	}
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->id = d->n_conns;
	c->family = fam;
	memcpy(c->ip[0], ip0, 16);
	memcpy(c->ip[1], ip1, 16);
	c->port[0] = p0;
	c->port[1] = p1;
	char a[64], b[64];
	addr_text(fam, ip0, p0, a, sizeof a);
	addr_text(fam, ip1, p1, b, sizeof b);
	snprintf(c->name, sizeof c->name, "%s-%s", a, b);
	for (int i = 0; i < 2; i++) {
		c->s[i].cur = -1;
		c->s[i].state = P_HUNT;
	}
	c->mrdsl[0] = c->mrdsl[1] = -1;
	c->max_burst = c->first_burst = c->max_out_r2t = -1;
	c->last_bs = d->o.block_size;
	d->conns[d->n_conns++] = c;
	d->st->connections++;
	chash_insert(d, c);
	return d->last = c;
}

static uint32_t lun_block_size(struct decoder *d, struct conn *c, uint64_t lun)
{
	for (uint32_t i = 0; i < c->n_lbs; i++)
		if (c->lbs[i].lun == lun)
			return c->lbs[i].bs;
	return d->o.block_size;
}

static void learn_block_size(struct conn *c, uint64_t lun, uint32_t bs)
{
	c->last_bs = bs;
	for (uint32_t i = 0; i < c->n_lbs; i++)
		if (c->lbs[i].lun == lun) {
			c->lbs[i].bs = bs;
			return;
		}
	if (c->n_lbs < MAX_LUN_BS)
		c->lbs[c->n_lbs++] = (struct lun_bs){lun, bs};
}

/* --- PDU records ----------------------------------------------------------------------- */

static void kv_append(struct pdu_rec *r, const char *s, size_t n)
{
	if (r->kv_len + n + 2 > r->kv_cap) {
		size_t nc = r->kv_cap ? r->kv_cap : 128;
		while (r->kv_len + n + 2 > nc)
			nc *= 2;
		char *p = realloc(r->kv, nc);
		if (!p)
			return;
		r->kv = p;
		r->kv_cap = nc;
	}
	if (r->kv_len)
		r->kv[r->kv_len++] = ';';
	memcpy(r->kv + r->kv_len, s, n);
	r->kv_len += n;
	r->kv[r->kv_len] = 0;
}

void pdu_add_notes(struct decoder *d, int64_t idx, uint32_t notes)
{
	if (idx < 0 || (uint64_t)idx < d->pr_head || (uint64_t)idx >= d->pr_next)
		return;
	pslot(d, (uint64_t)idx)->notes |= notes;
}

int64_t pdu_begin(struct decoder *d, struct conn *c, int dir, const uint8_t *h,
		  uint32_t hl, uint8_t hdigest, uint32_t seq, int64_t ts, uint32_t notes,
		  uint32_t *want)
{
	uint64_t idx = pdu_alloc(d);
	struct pdu_rec *r = pslot(d, idx);
	r->ts_ns = ts;
	r->conn_id = c->id;
	r->conn = c->name;
	r->dir = (uint8_t)dir;
	r->tcp_seq = seq;
	bhs_fill(r, h);
	r->hdigest = hdigest;
	r->notes = notes;
	if (hdigest == DIG_BAD)
		d->st->hdigest_bad++;
	if (hl > BHS_LEN) {
		r->ahs_kept = hl - BHS_LEN < sizeof r->ahs ? hl - BHS_LEN : sizeof r->ahs;
		memcpy(r->ahs, h + BHS_LEN, r->ahs_kept);
	}
	uint32_t dsl = r->dsl;
	c->pdus++;
	c->bytes += hl + (c->hd_on ? 4 : 0) +
		    (dsl ? dsl + ((4 - (dsl & 3)) & 3) + (c->dd_on ? 4 : 0) : 0);
	*want = 0;
	int single;
	uint64_t lun = lun_value(h + 8, &single);
	switch (r->opcode) {
	case 0x01: { /* SCSI Command */
		memcpy(r->cdb, h + 32, 16);
		r->cdb_len = 16;
		/* AHS: extended CDB (type 1) and expected bidi read length (type 2). */
		for (uint32_t off = BHS_LEN; off + 4 <= hl;) {
			uint32_t alen = rd16be(h + off);
			uint8_t type = h[off + 2];
			if (off + 3 + alen > hl)
				break;
			if (type == 1 && alen > 1) {
				uint32_t ext = alen - 1;
				if (ext > sizeof r->cdb - 16)
					ext = sizeof r->cdb - 16;
				memcpy(r->cdb + 16, h + off + 4, ext);
				r->cdb_len = 16 + ext;
			} else if (type == 2 && alen >= 5) {
				char t[64];
				int n = snprintf(t, sizeof t, "ExpBidirectionalReadDataLength=%u",
						 rd32be(h + off + 4));
				kv_append(r, t, (size_t)n);
			}
			off += (4 + (alen > 1 ? alen - 1 : 0) + 3) & ~3u;
		}
		uint32_t bs = lun_block_size(d, c, lun);
		cdb_decode(r->cdb, r->cdb_len, bs, &r->ci);
		r->has |= H_CDB;
		uint64_t ci = cmd_alloc(d);
		struct cmd_rec *cr = cslot(d, ci);
		cr->conn_id = c->id;
		cr->conn = c->name;
		cr->itt = r->itt;
		memcpy(cr->lun_raw, h + 8, 8);
		cr->ci = r->ci;
		cr->edtl = r->edtl;
		uint8_t rw = r->flags & 0x60;
		cr->direction = rw == 0x60 ? "bidi" : rw == 0x40 ? "read" : rw == 0x20 ? "write" : "none";
		cr->issue_ts = ts;
		cr->bytes_out = dsl;
		uint64_t key = itt_key(c, r->itt);
		int64_t old = itt_find(d, key);
		if (old >= 0 && c->open_cmds)
			c->open_cmds--; /* tag reused before a response: the old one is abandoned */
		cr->outstanding = ++c->open_cmds;
		itt_put(d, key, ci);
		r->cmd = (int64_t)ci;
		r->has |= H_CMD;
		break;
	}
	case 0x05: case 0x25: case 0x31: case 0x21: {
		int64_t ci = itt_find(d, itt_key(c, r->itt));
		struct cmd_rec *cr = cmd_get(d, ci);
		if (!cr) {
			r->notes |= N_NOCMD;
			d->st->nocmd_pdus++;
		} else {
			r->cmd = ci;
			r->has |= H_CMD;
			/* The task's LUN: in Data-In/Response the BHS LUN is reserved or absent. */
			memcpy(r->lun_raw, cr->lun_raw, 8);
			r->has |= H_LUN;
			if (r->opcode == 0x05 || r->opcode == 0x25) {
				if (cr->first_data_ts < 0)
					cr->first_data_ts = ts;
				cr->last_data_ts = ts;
				cr->data_pdus++;
				if (r->opcode == 0x25)
					cr->bytes_in += dsl;
				else
					cr->bytes_out += dsl;
				const char *n = cr->ci.name;
				if (r->opcode == 0x25 && r->buffer_offset == 0 && n &&
				    (cr->ci.opcode == 0x25 ||
				     (cr->ci.opcode == 0x9e && !strcmp(n, "READ CAPACITY(16)"))))
					*want = 32;
			} else if (r->opcode == 0x31) {
				cr->r2ts++;
			}
		}
		if (r->opcode == 0x21)
			*want = SENSE_KEEP;
		break;
	}
	case 0x03: case 0x04: case 0x23: case 0x24:
		*want = KV_KEEP;
		if (r->opcode == 0x03) {
			memcpy(c->isid, h + 8, 6);
			c->tsih = rd16be(h + 14);
			c->cid = rd16be(h + 20);
			c->has_login = 1;
			c->hd_known = c->dd_known = 1; /* digests stay off until the login ends */
		} else if (r->opcode == 0x23) {
			if (rd16be(h + 14))
				c->tsih = rd16be(h + 14);
		}
		break;
	case 0x32:
		*want = SENSE_KEEP;
		break;
	case 0x3f:
		*want = BHS_LEN;
		break;
	default:
		break;
	}
	return (int64_t)idx;
}

static void set_str(char **dst, const char *v)
{
	char *n = strdup(v);
	if (!n)
		return;
	free(*dst);
	*dst = n;
}

static void copy_val(char *dst, size_t len, const char *v)
{
	snprintf(dst, len, "%s", v);
}

/* One negotiated key=value (login or text) seen in direction dir. */
static void apply_key(struct conn *c, int dir, uint8_t opcode, const char *k, const char *v)
{
	int login = opcode == 0x03 || opcode == 0x23;
	if (!strcmp(k, "MaxRecvDataSegmentLength")) {
		c->mrdsl[dir] = strtoll(v, NULL, 0);
		return;
	}
	if (!login)
		return;
	if (!strcmp(k, "InitiatorName") && dir == DIR_I2T)
		set_str(&c->initiator_name, v);
	else if (!strcmp(k, "TargetName"))
		set_str(&c->target_name, v);
	else if (!strcmp(k, "SessionType"))
		set_str(&c->session_type, v);
	else if (!strcmp(k, "HeaderDigest") && (dir == DIR_T2I || !c->header_digest[0]))
		copy_val(c->header_digest, sizeof c->header_digest, v);
	else if (!strcmp(k, "DataDigest") && (dir == DIR_T2I || !c->data_digest[0]))
		copy_val(c->data_digest, sizeof c->data_digest, v);
	else if (!strcmp(k, "MaxBurstLength"))
		c->max_burst = strtoll(v, NULL, 0);
	else if (!strcmp(k, "FirstBurstLength"))
		c->first_burst = strtoll(v, NULL, 0);
	else if (!strcmp(k, "MaxOutstandingR2T"))
		c->max_out_r2t = strtoll(v, NULL, 0);
	else if (!strcmp(k, "ImmediateData"))
		copy_val(c->immediate_data, sizeof c->immediate_data, v);
	else if (!strcmp(k, "InitialR2T"))
		copy_val(c->initial_r2t, sizeof c->initial_r2t, v);
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not one. */
size_t utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	unsigned min;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; }
	else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; }
	else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; }
	else return 0;
	if (n < len)
		return 0;
	unsigned cp = c & (0x3f >> (len - 1));
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static void kv_process(struct decoder *d, struct conn *c, int dir, struct pdu_rec *r,
		       const uint8_t *data, uint32_t have)
{
	(void)d;
	struct stream *s = &c->s[dir];
	int cont = (r->flags & 0x40) != 0;
	int cut = have < r->dsl; /* bytes missing (capture gap, snaplen or the KV_KEEP limit) */
	if (cut)
		r->notes |= N_KVTRUNC;
	if (s->kvc_trunc) {
		/* Skip the tail of the pair cut in the previous PDU. */
		const uint8_t *z = have ? memchr(data, 0, have) : NULL;
		uint32_t skip = z ? (uint32_t)(z - data) + 1 : have;
		data += skip;
		have -= skip;
		if (z)
			s->kvc_trunc = 0;
		r->notes |= N_KVTRUNC;
	}
	if (s->kvc_len + have + 1 > s->kvc_cap) {
		size_t nc = s->kvc_cap ? s->kvc_cap : 1024;
		while (s->kvc_len + have + 1 > nc)
			nc *= 2;
		if (nc <= 4 * KV_KEEP) {
			char *p = realloc(s->kvc, nc);
			if (p) {
				s->kvc = p;
				s->kvc_cap = nc;
			}
		}
	}
	if (have && s->kvc_len + have + 1 <= s->kvc_cap) {
		memcpy(s->kvc + s->kvc_len, data, have);
		s->kvc_len += have;
	} else if (have) {
		r->notes |= N_KVTRUNC;
	}
	size_t start = 0;
	for (size_t i = 0; i <= s->kvc_len; i++) {
		int end_of_text = i == s->kvc_len;
		if (end_of_text && (cont || cut))
			break; /* continues in the next PDU, or was cut: never show half a pair */
		if (!end_of_text && s->kvc[i] != 0)
			continue;
		if (i > start) {
			char *pair = s->kvc + start;
			size_t n = i - start;
			if (end_of_text)
				s->kvc[i] = 0; /* room reserved above (+1) */
			/* Keep the kv column one line of valid UTF-8: control characters, the ';'
			 * separator and bytes that are not UTF-8 become '?'. */
			for (size_t j = 0; j < n;) {
				unsigned char ch = (unsigned char)pair[j];
				size_t u = utf8_seq_len((const unsigned char *)pair + j, n - j);
				if (ch < 0x20 || ch == 0x7f || ch == ';' || u == 0) {
					pair[j++] = '?';
					continue;
				}
				j += u;
			}
			kv_append(r, pair, n);
			char *eq = memchr(pair, '=', n);
			if (eq) {
				*eq = 0;
				apply_key(c, dir, r->opcode, pair, eq + 1);
				*eq = '=';
			}
		}
		start = i + 1;
	}
	if (cut && cont)
		s->kvc_trunc = 1; /* the next PDU starts with the tail of a pair we lost */
	if (start >= s->kvc_len || cut) {
		s->kvc_len = 0;
	} else {
		memmove(s->kvc, s->kvc + start, s->kvc_len - start);
		s->kvc_len -= start;
	}
}

/* SCSI Response and Async Message carry SenseLength (2 bytes) then the sense data; a
 * SenseLength past what arrived is clipped so a short or cut PDU never reads beyond it. */
static void take_sense(struct pdu_rec *r, const uint8_t *data, uint32_t have)
{
	if (have < 2)
		return;
	uint32_t slen = rd16be(data);
	if (slen > have - 2)
		slen = have - 2;
	struct sense_info si;
	sense_decode(data + 2, slen, &si);
	if (si.valid) {
		r->sense_key = si.key;
		r->asc = si.asc;
		r->ascq = si.ascq;
		r->has |= H_SENSE;
	}
}

void pdu_finish(struct decoder *d, struct conn *c, int dir, int64_t idx, const uint8_t *data,
		uint32_t have, uint8_t ddigest, uint32_t notes)
{
	if (idx < 0 || (uint64_t)idx < d->pr_head || (uint64_t)idx >= d->pr_next)
		return;
	struct pdu_rec *r = pslot(d, (uint64_t)idx);
	r->ddigest = ddigest;
	r->notes |= notes;
	if (ddigest == DIG_BAD)
		d->st->ddigest_bad++;
	int single;
	uint64_t lun = lun_value(r->lun_raw, &single);
	struct cmd_rec *cr = cmd_get(d, r->cmd);
	switch (r->opcode) {
	case 0x21: /* SCSI Response: data = SenseLength + sense data */
		if (r->dsl >= 2)
			take_sense(r, data, have);
		break;
	case 0x25:
		if (cr && have >= 8 && r->buffer_offset == 0) {
			uint32_t bs = 0;
			if (cr->ci.opcode == 0x25)
				bs = rd32be(data + 4);
			else if (have >= 12)
				bs = rd32be(data + 8);
			int s2;
			if (bs >= 1 && bs <= (1u << 24))
				learn_block_size(c, lun_value(cr->lun_raw, &s2), bs);
		}
		break;
	case 0x03: case 0x04: case 0x23: case 0x24:
		kv_process(d, c, dir, r, data, have);
		if (r->opcode == 0x23 && (r->flags & 0x80) && (r->flags & 3) == 3 &&
		    r->bhs[36] == 0) {
			/* Final Login Response into full feature phase: digests start now. */
			c->login_done = 1;
			c->hd_on = !strcmp(c->header_digest, "CRC32C");
			c->dd_on = !strcmp(c->data_digest, "CRC32C");
			c->hd_known = c->dd_known = 1;
		}
		break;
	case 0x3f:
		if (have >= BHS_LEN) {
			char t[128];
			int n = snprintf(t, sizeof t, "Reason=0x%02x;RejectedOpcode=0x%02x;RejectedITT=0x%08x",
					 r->bhs[2], data[0] & 0x3f, rd32be(data + 16));
			kv_append(r, t, (size_t)n);
		}
		break;
	case 0x32:
		if (r->bhs[36] == 0)
			take_sense(r, data, have);
		break;
	default:
		break;
	}
	(void)lun;
	/* A response (SCSI Response, or Data-In with status) closes its command. */
	int is_resp = r->opcode == 0x21 || (r->opcode == 0x25 && (r->flags & 1));
	if (is_resp && cr && !cr->complete) {
		cr->resp_ts = r->ts_ns;
		if (r->has & H_STATUS) {
			cr->has_status = 1;
			cr->status = r->status;
		}
		if (r->has & H_SENSE) {
			cr->has_sense = 1;
			cr->sense_key = r->sense_key;
			cr->asc = r->asc;
			cr->ascq = r->ascq;
		}
		cr->residual_kind = r->residual_kind;
		cr->residual = r->residual;
		cr->complete = 1;
		r->resp_time_ns = cr->resp_ts - cr->issue_ts;
		r->has |= H_RESPTIME;
		itt_del(d, itt_key(c, r->itt));
		if (c->open_cmds)
			c->open_cmds--;
		flush_cmds(d, 0);
	}
	c->notes |= r->notes;
	r->complete = 1;
	flush_pdus(d, 0);
}

/* --- the packet loop ------------------------------------------------------------------- */

static struct decoder *decoder_new(const struct decode_opts *o, const struct decode_sinks *s,
				   struct decode_stats *st)
{
	struct decoder *d = calloc(1, sizeof *d);
	if (!d)
		return NULL;
	if (o)
		d->o = *o;
	else
		decode_opts_init(&d->o);
	if (d->o.n_ports <= 0) {
		d->o.ports[0] = 3260;
		d->o.n_ports = 1;
	}
	if (!d->o.block_size)
		d->o.block_size = 512;
	if (s)
		d->sk = *s;
	d->st = st;
	memset(st, 0, sizeof *st);
	st->first_ts = -1;
	return d;
}

static void conn_emit(struct decoder *d, struct conn *c)
{
	struct conn_rec cr;
	memset(&cr, 0, sizeof cr);
	cr.conn_id = c->id;
	cr.conn = c->name;
	cr.initiator_name = c->initiator_name;
	cr.target_name = c->target_name;
	cr.session_type = c->session_type;
	memcpy(cr.isid, c->isid, 6);
	cr.has_login = c->has_login;
	cr.tsih = c->tsih;
	cr.cid = c->cid;
	cr.header_digest = c->header_digest[0] ? c->header_digest
			   : c->has_login ? "None" : NULL;
	cr.data_digest = c->data_digest[0] ? c->data_digest : c->has_login ? "None" : NULL;
	if (!c->has_login) {
		/* No login seen: what the stream itself proved, else unknown. */
		cr.header_digest = c->hd_known && c->hd_on ? "CRC32C" : NULL;
		cr.data_digest = c->dd_known ? (c->dd_on ? "CRC32C" : "None") : NULL;
	}
	cr.mrdsl_i2t = c->mrdsl[DIR_T2I];
	cr.mrdsl_t2i = c->mrdsl[DIR_I2T];
	if (c->has_login && c->login_done) {
		/* RFC 7143 default when a side declared nothing. */
		if (cr.mrdsl_i2t < 0)
			cr.mrdsl_i2t = 8192;
		if (cr.mrdsl_t2i < 0)
			cr.mrdsl_t2i = 8192;
	}
	cr.max_burst = c->max_burst;
	cr.first_burst = c->first_burst;
	cr.max_out_r2t = c->max_out_r2t;
	cr.immediate_data = c->immediate_data[0] ? c->immediate_data : NULL;
	cr.initial_r2t = c->initial_r2t[0] ? c->initial_r2t : NULL;
	cr.block_size = c->last_bs;
	cr.pdus = c->pdus;
	cr.bytes = c->bytes;
	static char notes[160];
	notes[0] = 0;
	if (!c->has_login)
		strcat(notes, "no-login;");
	if (c->notes & N_RESYNC)
		strcat(notes, "resync;");
	if (c->notes & N_GAP)
		strcat(notes, "gap;");
	if (c->notes & N_TRUNCATED)
		strcat(notes, "truncated;");
	if (c->notes & (N_RETRANSMIT | N_OVERLAP))
		strcat(notes, "retransmit;");
	if (c->notes & N_REORDER)
		strcat(notes, "reorder;");
	size_t nl = strlen(notes);
	if (nl)
		notes[nl - 1] = 0;
	cr.notes = notes;
	if (d->sk.conn)
		d->sk.conn(d->sk.ctx, &cr);
}

static void decoder_finish(struct decoder *d)
{
	for (uint32_t i = 0; i < d->n_conns; i++) {
		reasm_end(d, d->conns[i], DIR_I2T);
		reasm_end(d, d->conns[i], DIR_T2I);
	}
	flush_pdus(d, 1);
	flush_cmds(d, 1);
	for (uint32_t i = 0; i < d->n_conns; i++)
		if (d->conns[i]->pdus)
			conn_emit(d, d->conns[i]);
}

static void decoder_free(struct decoder *d)
{
	for (uint32_t i = 0; i < d->n_conns; i++) {
		struct conn *c = d->conns[i];
		stream_free(&c->s[0]);
		stream_free(&c->s[1]);
		free(c->initiator_name);
		free(c->target_name);
		free(c->session_type);
		free(c);
	}
	for (uint64_t i = 0; i < d->pr_cap; i++)
		free(d->pr[i].kv);
	free(d->pr);
	free(d->cr);
	free(d->conns);
	free(d->chash);
	free(d->imap);
	free(d);
}

static int port_match(const struct decoder *d, uint16_t p)
{
	for (int i = 0; i < d->o.n_ports; i++)
		if (d->o.ports[i] == p)
			return 1;
	return 0;
}

/* Capture time in ns; absurd values (a corrupt pcapng can say anything) are clamped so
 * times stay inside int64. */
int64_t decoder_time(int64_t sec_in, int64_t ns_in)
{
	uint64_t sec = sec_in < 0 ? 0 : (uint64_t)sec_in;
	uint64_t frac = ns_in < 0 ? 0 : (uint64_t)ns_in;
	if (sec > 9000000000ULL)
		sec = 9000000000ULL;
	if (frac > 999999999ULL)
		frac = 999999999ULL;
	return (int64_t)(sec * 1000000000ULL + frac);
}

void decoder_packet(struct decoder *d, int64_t ts, uint32_t caplen, uint32_t wirelen,
		    const uint8_t *pkt)
{
	struct decode_stats *st = d->st;
	uint64_t frame = st->packets++;
	st->bytes_captured += caplen;
	if (st->first_ts < 0)
		st->first_ts = ts;
	st->last_ts = ts;
	struct tcp_seg g;
	enum pkt_result pr = packet_parse(d->dlt, pkt, caplen, wirelen, &g);
	if (g.hdr_seen && d->sk.seg)
		d->sk.seg(d->sk.ctx, frame, ts, &g);
	switch (pr) {
	case PKT_TCP:
		break;
	case PKT_NOT_IP: st->non_ip++; return;
	case PKT_NOT_TCP: st->non_tcp++; return;
	case PKT_FRAGMENT: st->ip_fragments++; return;
	default: st->short_packets++; return;
	}
	st->tcp_packets++;
	if (d->o.segments_only)
		return;
	int dir;
	struct conn *c;
	if (port_match(d, g.dport)) {
		dir = DIR_I2T;
		c = conn_get(d, g.family, g.src, g.sport, g.dst, g.dport);
	} else if (port_match(d, g.sport)) {
		dir = DIR_T2I;
		c = conn_get(d, g.family, g.dst, g.dport, g.src, g.sport);
	} else {
		return;
	}
	if (!c)
		return;
	st->iscsi_packets++;
	st->payload_bytes += g.len;
	if (g.caplen < g.len)
		st->truncated_packets++;
	reasm_segment(d, c, dir, &g, ts);
}

struct decoder *decoder_begin(const struct decode_opts *o, const struct decode_sinks *s,
			      struct decode_stats *st, int dlt)
{
	struct decoder *d = decoder_new(o, s, st);
	if (!d) {
		snprintf(st->read_error_text, sizeof st->read_error_text, "out of memory");
		st->read_error = 1;
		return NULL;
	}
	d->dlt = dlt;
	if (!packet_dlt_supported(dlt)) {
		const char *n = pcap_datalink_val_to_name(dlt);
		snprintf(st->read_error_text, sizeof st->read_error_text,
			 "unsupported link type %d (%s)", dlt, n ? n : "unknown");
		st->read_error = 1;
		decoder_free(d);
		return NULL;
	}
	return d;
}

void decoder_end(struct decoder *d)
{
	decoder_finish(d);
	decoder_free(d);
}

int istrace_decode_pcap(pcap_t *p, const struct decode_opts *o, const struct decode_sinks *s,
			struct decode_stats *st)
{
	struct decoder *d = decoder_begin(o, s, st, pcap_datalink(p));
	if (!d)
		return -1;
	struct pcap_pkthdr *h;
	const u_char *pkt;
	int rc;
	while ((rc = pcap_next_ex(p, &h, &pkt)) == 1)
		decoder_packet(d, decoder_time(h->ts.tv_sec, h->ts.tv_usec), h->caplen, h->len, pkt);
	if (rc == -1) {
		st->read_error = 1;
		snprintf(st->read_error_text, sizeof st->read_error_text, "%s", pcap_geterr(p));
	}
	decoder_end(d);
	return 0;
}

int istrace_decode_streams(const uint8_t *buf, size_t len, size_t split, size_t chunk,
			   const struct decode_opts *o, const struct decode_sinks *s,
			   struct decode_stats *st)
{
	struct decoder *d = decoder_new(o, s, st);
	if (!d)
		return -1;
	if (split > len)
		split = len;
	if (chunk == 0)
		chunk = 1448;
	static const uint8_t ipa[16] = {10, 0, 0, 1}, ipb[16] = {10, 0, 0, 2};
	struct conn *c = conn_get(d, 4, ipa, 40000, ipb, 3260);
	if (c) {
		c->s[0].state = c->s[1].state = P_HDR;
		size_t pos[2] = {0, split}, endp[2] = {split, len};
		/* Alternate directions chunk by chunk, like a request/response exchange. */
		while (pos[0] < endp[0] || pos[1] < endp[1]) {
			for (int dir = 0; dir < 2; dir++) {
				size_t n = endp[dir] - pos[dir];
				if (n > chunk)
					n = chunk;
				if (!n)
					continue;
				stream_feed(d, c, dir, buf + pos[dir], (uint32_t)n,
					    (int64_t)(pos[0] + pos[1]) * 1000, 1);
				c->s[dir].next_seq += (uint32_t)n;
				pos[dir] += n;
			}
		}
	}
	decoder_finish(d);
	decoder_free(d);
	return 0;
}

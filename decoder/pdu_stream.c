/* PDU framing on one direction's reassembled byte stream: header accumulation (parsed in
 * place when a header lies inside one segment), data skipping by count, digests, and
 * hunting for a plausible BHS when the boundary is unknown (capture start, gaps). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "crc32c.h"

static inline uint32_t rd32le(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint32_t pad4(uint32_t n) { return (4 - (n & 3)) & 3; }

/* Header bytes (BHS + AHS + header digest) of the PDU whose BHS is b. */
static uint32_t header_len(const struct conn *c, const uint8_t *b, int hd)
{
	(void)c;
	return BHS_LEN + (uint32_t)b[4] * 4 + (hd ? 4 : 0);
}

static uint64_t pdu_total(const uint8_t *b, int hd, int dd)
{
	uint32_t dsl = rd24be(b + 5);
	uint64_t t = BHS_LEN + (uint64_t)b[4] * 4 + (hd ? 4 : 0);
	if (dsl)
		t += dsl + pad4(dsl) + (dd ? 4 : 0);
	return t;
}

static int reserve(uint8_t **buf, uint32_t *cap, uint32_t need)
{
	if (need <= *cap)
		return 1;
	uint32_t n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	uint8_t *p = realloc(*buf, n);
	if (!p)
		return 0;
	*buf = p;
	*cap = n;
	return 1;
}

static void go_hunt(struct stream *s)
{
	s->state = P_HUNT;
	s->hlen = 0;
	s->n_hp = 0;
	s->hdr_have = 0;
}

static void finish_pdu(struct decoder *d, struct conn *c, int dir, uint32_t extra_notes)
{
	struct stream *s = &c->s[dir];
	if (s->cur >= 0) {
		uint8_t dd = DIG_NONE;
		if (s->dd)
			dd = s->damaged ? DIG_UNCHECKED
					: (crc32c_final(s->dd_crc) == rd32le(s->dd_bytes) ? DIG_OK
											  : DIG_BAD);
		int64_t idx = s->cur;
		s->cur = -1;
		pdu_finish(d, c, dir, idx, s->dbuf, s->dhave, dd, extra_notes);
	}
	s->state = P_HDR;
	s->hdr_have = 0;
}

static void on_header(struct decoder *d, struct conn *c, int dir, const uint8_t *h,
		      uint32_t hlen_with_digest, int64_t ts)
{
	struct stream *s = &c->s[dir];
	int hd = c->hd_on;
	uint32_t hl = hlen_with_digest - (hd ? 4 : 0);
	uint8_t hdig = DIG_NONE;
	if (hd)
		hdig = crc32c(h, hl) == rd32le(h + hl) ? DIG_OK : DIG_BAD;
	uint32_t dsl = rd24be(h + 5);
	s->dd = c->dd_on && dsl > 0;
	s->data_body = dsl + pad4(dsl);
	s->data_left = dsl ? (uint64_t)s->data_body + (s->dd ? 4 : 0) : 0;
	s->data_pos = 0;
	s->dd_crc = crc32c_init();
	s->damaged = 0;
	s->dhave = 0;
	uint32_t notes = s->notes_next | (s->resync_next ? N_RESYNC : 0);
	s->notes_next = 0;
	s->resync_next = 0;
	uint32_t want = 0;
	s->cur = pdu_begin(d, c, dir, h, hl, hdig, s->pdu_seq, ts, notes, &want);
	if (want > dsl)
		want = dsl;
	if (want && !reserve(&s->dbuf, &s->dcap, want))
		want = 0;
	s->dwant = want;
	s->state = P_DATA;
	if (s->data_left == 0)
		finish_pdu(d, c, dir, 0);
}

static void data_consume(struct stream *s, const uint8_t *p, uint32_t take)
{
	if (s->dhave < s->dwant && s->dhave == s->data_pos) {
		uint32_t k = s->dwant - s->dhave;
		if (k > take)
			k = take;
		memcpy(s->dbuf + s->dhave, p, k);
		s->dhave += k;
	}
	if (s->dd) {
		uint32_t in_body = 0;
		if (s->data_pos < s->data_body) {
			in_body = s->data_body - s->data_pos;
			if (in_body > take)
				in_body = take;
			s->dd_crc = crc32c_update(s->dd_crc, p, in_body);
		}
		for (uint32_t i = in_body; i < take; i++) {
			uint32_t at = s->data_pos + i - s->data_body;
			if (at < 4)
				s->dd_bytes[at] = p[i];
		}
	}
	s->data_pos += take;
}

/* --- hunting ---------------------------------------------------------------------------- */

static void add_piece(struct piece *a, uint32_t *n, uint32_t off, int64_t ts, int seg)
{
	if (*n && a[*n - 1].off == off) {
		a[*n - 1].ts = ts;
		a[*n - 1].seg_start = (uint8_t)seg;
	} else if (*n < MAX_PIECES) {
		a[(*n)++] = (struct piece){off, (uint8_t)seg, ts};
	} /* else: the bytes count as part of the last piece */
}

/* Pieces of src describing bytes from offset k on, renumbered from 0 into dst. */
static uint32_t shift_pieces(const struct piece *src, uint32_t n, uint32_t k, struct piece *dst)
{
	uint32_t j = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t end = i + 1 < n ? src[i + 1].off : UINT32_MAX;
		if (end <= k)
			continue;
		dst[j] = src[i];
		if (src[i].off < k) {
			dst[j].off = 0;
			dst[j].seg_start = 0; /* the segment began before k */
		} else {
			dst[j].off = src[i].off - k;
		}
		j++;
	}
	return j;
}

static int is_seg_start(const struct stream *s, uint32_t off)
{
	for (uint32_t i = 0; i < s->n_hp; i++)
		if (s->hp[i].off == off && s->hp[i].seg_start)
			return 1;
	return 0;
}

static void lock_at(struct decoder *d, struct conn *c, int dir, uint32_t k)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	st->resyncs++;
	st->resync_skipped_bytes += k;
	uint32_t n = s->hlen - k;
	/* The bytes from the boundary on are parsed again, now framed, each piece with the
	 * time of the segment it came in. */
	if (s->replay_len == 0 && reserve(&s->replay, &s->replay_cap, n)) {
		memcpy(s->replay, s->hbuf + k, n);
		s->replay_len = n;
		s->n_rp = shift_pieces(s->hp, s->n_hp, k, s->rp);
	}
	s->pos_seq = s->hbuf_seq + k;
	s->state = P_HDR;
	s->hdr_have = 0;
	s->resync_next = 1;
	s->hlen = 0;
	s->n_hp = 0;
}

static void replay_append(struct stream *s, const uint8_t *p, uint32_t n, int64_t ts, int seg)
{
	if (n && reserve(&s->replay, &s->replay_cap, s->replay_len + n)) {
		add_piece(s->rp, &s->n_rp, s->replay_len, ts, seg);
		memcpy(s->replay + s->replay_len, p, n);
		s->replay_len += n;
	}
}

/* Carries something payload rarely has: the all-ones tag of a NOP or of a plain Data-In,
 * or the task tag of a command still open on this connection. */
static int cand_strong(struct decoder *d, const struct conn *c, const uint8_t *b)
{
	uint8_t op = b[0] & 0x3f;
	uint32_t itt = rd32be(b + 16), ttt = rd32be(b + 20);
	if (op == 0x00 || op == 0x20)
		return 1; /* bhs_plausible already required an all-ones tag */
	if (op == 0x25 && !(b[1] & 0x40) && ttt == 0xffffffffu)
		return 1;
	if (op == 0x25 || op == 0x05 || op == 0x31 || op == 0x21)
		return decoder_itt_open(d, c, itt);
	return 0;
}

/* Give up the first k bytes of the hunt buffer (k <= hlen): skipped as unparseable. */
static void hunt_drop(struct decoder *d, struct stream *s, uint32_t k)
{
	struct piece tmp[MAX_PIECES];

	decoder_stats(d)->resync_skipped_bytes += k;
	memmove(s->hbuf, s->hbuf + k, s->hlen - k);
	s->hlen -= k;
	s->hbuf_seq += k;
	s->n_hp = shift_pieces(s->hp, s->n_hp, k, tmp);
	memcpy(s->hp, tmp, s->n_hp * sizeof tmp[0]);
}

/* Scan the hunt buffer for a BHS. Returns 1 when it locked on one. */
static int hunt_scan(struct decoder *d, struct conn *c, int dir, int final)
{
	struct stream *s = &c->s[dir];
	uint32_t k = 0;
	for (; k + BHS_LEN <= s->hlen; k++) {
		const uint8_t *b = s->hbuf + k;
		if (!bhs_plausible(b, dir))
			continue;
		uint32_t hl = BHS_LEN + (uint32_t)b[4] * 4;
		int hd = c->hd_on, dd = c->dd_on, hd_proved = 0, dd_proved = 0;
		if (k + hl + 4 <= s->hlen) {
			int crc_ok = crc32c(b, hl) == rd32le(b + hl);
			if (c->hd_known && c->hd_on && !crc_ok)
				continue;
			if (!c->hd_known && crc_ok) {
				hd = 1; /* a matching CRC32C after the header: digests are on */
				hd_proved = 1;
			}
		} else if (c->hd_known && c->hd_on) {
			break; /* wait for the digest bytes */
		}
		/* How much the candidate proves by itself. Payload that happens to fit the field
		 * rules (disk data is full of zeros) must not pass: "strong" candidates carry
		 * something data rarely has -- a matching header digest, the all-ones tag a
		 * NOP or a plain Data-In carries, or the task tag of a command still open. */
		uint8_t op = b[0] & 0x3f;
		int strong = hd_proved || cand_strong(d, c, b);
		int rare = !(op == 0x01 || op == 0x05 || op == 0x21 || op == 0x25 || op == 0x31 ||
			     op == 0x00 || op == 0x20); /* login, text, logout, TMF, ... */
		int seg = is_seg_start(s, k);
		uint64_t total = pdu_total(b, hd, dd);
		int next_ok = 0, next_known = 0;
		if (k + total + BHS_LEN <= s->hlen) {
			next_known = 1;
			next_ok = bhs_plausible(b + total, dir);
			if (!c->dd_known && rd24be(b + 5) && strong) {
				/* Data digest unknown: the next header says whether 4 bytes follow. */
				uint64_t t2 = pdu_total(b, hd, !dd);
				int alt = k + t2 + BHS_LEN <= s->hlen && bhs_plausible(b + t2, dir);
				if (next_ok && !alt) {
					dd_proved = 1;
				} else if (!next_ok && alt) {
					next_ok = 1;
					dd = !dd;
					dd_proved = 1;
				} /* both plausible: keep the current guess, prove nothing */
			}
		}
		if (next_known && !next_ok)
			continue;
		/* A weak candidate is believed where a segment began, or when the header its
		 * length points at is a strong one. */
		if (!strong && !seg) {
			if (!next_known) {
				if (k + total + BHS_LEN > HUNT_MAX)
					continue;
				if (final)
					continue;
				break; /* wait for the next header */
			}
			if (!cand_strong(d, c, b + total))
				continue;
		}
		if (!next_known && !hd_proved && (!seg || rare) && !final) {
			if (k + total + BHS_LEN > HUNT_MAX)
				continue; /* can never check it: not good enough */
			break;            /* wait for more bytes to check the next header */
		}
		if (!next_known && !strong && final && (!seg || rare))
			continue;
		if (hd_proved) {
			c->hd_on = 1;
			c->hd_known = 1;
		}
		if (dd_proved) {
			c->dd_on = (uint8_t)dd;
			c->dd_known = 1;
		}
		lock_at(d, c, dir, k);
		return 1;
	}
	/* Drop what can no longer start a header we would accept. */
	if (k > 0)
		hunt_drop(d, s, k);
	return 0;
}

static void hunt_feed(struct decoder *d, struct conn *c, int dir, const uint8_t *p,
		      uint32_t n, int64_t ts, int seg_start)
{
	struct stream *s = &c->s[dir];
	while (n) {
		if (s->hlen == 0) {
			s->hbuf_seq = s->pos_seq;
			s->n_hp = 0;
		}
		uint32_t room = HUNT_MAX - s->hlen;
		if (room == 0) {
			/* Nothing acceptable in a full buffer: give all but a header's worth up. */
			hunt_drop(d, s, s->hlen - (BHS_LEN - 1));
			continue;
		}
		uint32_t take = n < room ? n : room;
		if (!reserve(&s->hbuf, &s->hcap, s->hlen + take))
			return;
		add_piece(s->hp, &s->n_hp, s->hlen, ts, seg_start);
		seg_start = 0;
		memcpy(s->hbuf + s->hlen, p, take);
		s->hlen += take;
		s->pos_seq += take;
		p += take;
		n -= take;
		if (hunt_scan(d, c, dir, 0)) {
			/* Bytes not yet appended are parsed after the replay, in order. */
			replay_append(s, p, n, ts, 0);
			return;
		}
	}
}

/* --- framing ---------------------------------------------------------------------------- */

static int header_sane(const uint8_t *b, int dir)
{
	return !(b[0] & 0x80) && iscsi_opcode_valid(b[0], dir);
}

static void process(struct decoder *d, struct conn *c, int dir, const uint8_t *p, uint32_t n,
		    int64_t ts, int seg_start)
{
	struct stream *s = &c->s[dir];
	while (n) {
		switch (s->state) {
		case P_HUNT:
			hunt_feed(d, c, dir, p, n, ts, seg_start);
			return;
		case P_HDR: {
			if (s->hdr_have == 0) {
				s->pdu_seq = s->pos_seq;
				if (n >= BHS_LEN) {
					if (!header_sane(p, dir)) {
						go_hunt(s);
						continue;
					}
					uint32_t need = header_len(c, p, c->hd_on);
					if (n >= need) { /* fast path: parse in place */
						s->pos_seq += need;
						on_header(d, c, dir, p, need, ts);
						p += need;
						n -= need;
						seg_start = 0;
						continue;
					}
				}
			}
			if (!s->hdr && !(s->hdr = malloc(HDR_MAX))) {
				/* No memory for a split header: lose this PDU, find the next one. */
				decoder_stats(d)->dropped_pdus++;
				go_hunt(s);
				continue;
			}
			uint32_t need = s->hdr_have < BHS_LEN ? BHS_LEN : s->hdr_need;
			uint32_t take = need - s->hdr_have;
			if (take > n)
				take = n;
			memcpy(s->hdr + s->hdr_have, p, take);
			s->hdr_have += take;
			s->pos_seq += take;
			p += take;
			n -= take;
			seg_start = 0;
			if (s->hdr_have == BHS_LEN && need == BHS_LEN) {
				if (!header_sane(s->hdr, dir)) {
					/* Lost framing: hunt from the byte after this bogus header. */
					uint8_t tmp[BHS_LEN];
					memcpy(tmp, s->hdr, BHS_LEN);
					go_hunt(s);
					s->pos_seq = s->pdu_seq + 1;
					hunt_feed(d, c, dir, tmp + 1, BHS_LEN - 1, ts, 0);
					if (s->state == P_HUNT)
						continue;
					/* Locked inside the old header: the rest of p follows the replay. */
					replay_append(s, p, n, ts, 0);
					return;
				}
				s->hdr_need = header_len(c, s->hdr, c->hd_on);
			}
			if (s->hdr_have >= BHS_LEN && s->hdr_have == s->hdr_need) {
				s->hdr_have = 0;
				on_header(d, c, dir, s->hdr, s->hdr_need, ts);
			}
			break;
		}
		case P_DATA: {
			if (s->data_left == 0) { /* defensive: never spin on an empty data area */
				finish_pdu(d, c, dir, 0);
				break;
			}
			uint32_t take = s->data_left < n ? (uint32_t)s->data_left : n;
			if (s->cur >= 0)
				data_consume(s, p, take);
			s->data_left -= take;
			s->pos_seq += take;
			p += take;
			n -= take;
			seg_start = 0;
			if (s->data_left == 0)
				finish_pdu(d, c, dir, 0);
			break;
		}
		}
	}
}

/* Parse what a lock left in the replay buffer, piece by piece with each piece's time. */
static void run_replay(struct decoder *d, struct conn *c, int dir)
{
	struct stream *s = &c->s[dir];
	while (s->replay_len) {
		uint8_t *buf = s->replay;
		uint32_t len = s->replay_len;
		struct piece pc[MAX_PIECES];
		uint32_t npc = s->n_rp;
		memcpy(pc, s->rp, npc * sizeof pc[0]);
		if (npc == 0 || pc[0].off != 0) { /* cannot happen; keep the loop safe anyway */
			pc[0] = (struct piece){0, 1, 0};
			npc = 1;
		}
		s->replay = NULL;
		s->replay_len = s->replay_cap = 0;
		s->n_rp = 0;
		for (uint32_t i = 0; i < npc; i++) {
			uint32_t end = i + 1 < npc ? pc[i + 1].off : len;
			if (end > len)
				end = len;
			if (end > pc[i].off)
				process(d, c, dir, buf + pc[i].off, end - pc[i].off, pc[i].ts,
					pc[i].seg_start);
			if (s->replay_len) {
				/* Locked again: the pieces not parsed yet follow the new replay. */
				for (uint32_t j = i + 1; j < npc; j++) {
					uint32_t e = j + 1 < npc ? pc[j + 1].off : len;
					if (e > len)
						e = len;
					if (e > pc[j].off)
						replay_append(s, buf + pc[j].off, e - pc[j].off, pc[j].ts,
							      pc[j].seg_start);
				}
				break;
			}
		}
		free(buf);
	}
}

/* No more contiguous bytes are coming (a gap, or the end): give the hunt one last look,
 * accepting a strong header whose successor cannot be checked. Returns 1 if it locked. */
static int hunt_flush(struct decoder *d, struct conn *c, int dir)
{
	struct stream *s = &c->s[dir];
	if (s->state != P_HUNT || s->hlen < BHS_LEN || !hunt_scan(d, c, dir, 1))
		return 0;
	run_replay(d, c, dir);
	return 1;
}

void stream_feed(struct decoder *d, struct conn *c, int dir, const uint8_t *p, uint32_t n,
		 int64_t ts, int seg_start)
{
	struct stream *s = &c->s[dir];
	s->started = 1;
	process(d, c, dir, p, n, ts, seg_start);
	run_replay(d, c, dir);
}

void stream_gap(struct decoder *d, struct conn *c, int dir, uint32_t n, int truncated)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	uint32_t nt = truncated ? N_TRUNCATED : N_GAP;
	s->started = 1;
	while (n) {
		switch (s->state) {
		case P_HUNT:
			if (hunt_flush(d, c, dir))
				continue; /* framed again: the gap falls on a PDU now */
			st->resync_skipped_bytes += s->hlen;
			s->hlen = 0;
			s->n_hp = 0;
			s->pos_seq += n;
			s->notes_next |= nt;
			return;
		case P_HDR:
			if (s->hdr_have >= BHS_LEN) {
				/* The length is known: skip the rest of this PDU without a record. */
				uint64_t total = pdu_total(s->hdr, c->hd_on, c->dd_on);
				st->dropped_pdus++;
				s->cur = -1;
				s->dd = 0;
				s->dwant = 0;
				s->data_left = total > s->hdr_have ? total - s->hdr_have : 0;
				s->hdr_have = 0;
				s->state = P_DATA;
				if (s->data_left == 0)
					s->state = P_HDR;
				continue;
			}
			if (s->hdr_have > 0)
				st->dropped_pdus++;
			go_hunt(s);
			s->notes_next |= nt;
			s->pos_seq += n;
			return;
		case P_DATA: {
			if (s->data_left == 0) {
				finish_pdu(d, c, dir, 0);
				break;
			}
			uint32_t take = s->data_left < n ? (uint32_t)s->data_left : n;
			s->data_left -= take;
			s->data_pos += take;
			s->pos_seq += take;
			s->damaged = 1;
			n -= take;
			if (s->cur >= 0)
				pdu_add_notes(d, s->cur, nt);
			if (s->data_left == 0)
				finish_pdu(d, c, dir, 0);
			break;
		}
		}
	}
}

void stream_end(struct decoder *d, struct conn *c, int dir)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	while (hunt_flush(d, c, dir))
		;
	if (s->state == P_DATA && s->cur >= 0) {
		st->incomplete_pdus++;
		s->damaged = 1;
		finish_pdu(d, c, dir, N_INCOMPLETE);
	} else if (s->state == P_HDR && s->hdr_have > 0) {
		st->incomplete_pdus++;
	} else if (s->state == P_HUNT) {
		st->resync_skipped_bytes += s->hlen;
	}
	/* Back to the state of a stream never seen, buffers kept. */
	s->state = P_HUNT;
	s->hlen = 0;
	s->n_hp = 0;
	s->hdr_have = 0;
	s->cur = -1;
	s->started = 0;
	s->have_seq = 0;
	s->notes_next = 0;
	s->resync_next = 0;
	s->kvc_len = 0;
	s->kvc_trunc = 0;
}

void stream_free(struct stream *s)
{
	while (s->ooo) {
		struct ooo_seg *q = s->ooo;
		s->ooo = q->next;
		free(q);
	}
	free(s->hdr);
	free(s->dbuf);
	free(s->hbuf);
	free(s->replay);
	free(s->kvc);
}

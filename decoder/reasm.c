/* TCP reassembly, one byte stream per direction. In-order segments go straight to the PDU
 * framer without a copy; early segments wait in a bounded, seq-sorted queue; bytes the
 * capture never saw become gaps the framer is told about, so nothing is decoded from them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* How far before a mid-connection stream's first captured segment its start may lie (the
 * peer's last ACK): at most a receive window's worth of bytes in flight. */
#define START_BACK_MAX (16u << 20)

static void note(struct decoder *d, struct conn *c, int dir, uint32_t n)
{
	struct stream *s = &c->s[dir];
	s->notes_next |= n;
	if (s->cur >= 0)
		pdu_add_notes(d, s->cur, n);
}

/* Hand bytes [seq, seq+len) with cap of them captured to the framer. */
static void deliver(struct decoder *d, struct conn *c, int dir, const uint8_t *p, uint32_t len,
		    uint32_t cap, int64_t ts, int seg_start)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	if (cap > len)
		cap = len;
	if (cap)
		stream_feed(d, c, dir, p, cap, ts, seg_start);
	if (cap < len) {
		st->truncated_bytes += len - cap;
		stream_gap(d, c, dir, len - cap, 1);
	}
	s->next_seq += len;
}

/* Deliver queued segments that have become in order. */
static void drain(struct decoder *d, struct conn *c, int dir)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	while (s->ooo && seq_le(s->ooo->seq, s->next_seq)) {
		struct ooo_seg *q = s->ooo;
		s->ooo = q->next;
		s->ooo_bytes -= q->caplen;
		*decoder_ooo_total(d) -= q->caplen;
		uint32_t end = q->seq + q->len;
		if (seq_le(end, s->next_seq)) {
			st->retransmits++;
			note(d, c, dir, N_RETRANSMIT);
		} else {
			uint32_t skip = s->next_seq - q->seq;
			if (skip) {
				st->overlaps++;
				note(d, c, dir, N_OVERLAP);
			}
			note(d, c, dir, N_REORDER);
			deliver(d, c, dir, q->data + (skip < q->caplen ? skip : q->caplen),
				q->len - skip, q->caplen > skip ? q->caplen - skip : 0, q->ts, skip == 0);
		}
		free(q);
	}
}

/* The bytes up to `upto` will never arrive: report them as a gap and go on from there. */
static void force_gap(struct decoder *d, struct conn *c, int dir, uint32_t upto)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	if (seq_lt(s->next_seq, upto)) {
		uint32_t n = upto - s->next_seq;
		st->gaps++;
		st->gap_bytes += n;
		stream_gap(d, c, dir, n, 0);
		s->next_seq = upto;
	}
	/* Always: a queue head at or behind next_seq must leave, or callers looping on
	 * s->ooo would never end. */
	drain(d, c, dir);
}

static void enqueue(struct decoder *d, struct conn *c, int dir, uint32_t seq,
		    const uint8_t *p, uint32_t len, uint32_t cap, int64_t ts)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	struct ooo_seg **pp = &s->ooo;
	while (*pp && seq_lt((*pp)->seq, seq))
		pp = &(*pp)->next;
	if (*pp && (*pp)->seq == seq && (*pp)->len >= len) {
		st->retransmits++; /* same bytes queued already: first copy wins */
		return;
	}
	struct ooo_seg *q = malloc(sizeof *q + cap);
	if (!q)
		return; /* out of memory: the hole becomes a gap later */
	q->seq = seq;
	q->len = len;
	q->caplen = cap;
	q->ts = ts;
	memcpy(q->data, p, cap);
	q->next = *pp;
	*pp = q;
	s->ooo_bytes += cap;
	uint64_t *total = decoder_ooo_total(d);
	*total += cap;
	st->reordered++;
	/* Bounded memory: past the limit, give up on the hole before the first queued byte. */
	while (s->ooo && (s->ooo_bytes > OOO_MAX_BYTES || *total > OOO_MAX_TOTAL)) {
		st->ooo_evicted++;
		force_gap(d, c, dir, s->ooo->seq);
	}
}

void reasm_segment(struct decoder *d, struct conn *c, int dir, const struct tcp_seg *g,
		   int64_t ts)
{
	struct stream *s = &c->s[dir];
	struct decode_stats *st = decoder_stats(d);
	uint32_t seq = g->seq;
	if (g->flags & TH_SYN) {
		seq++;
		if (!s->have_isn || s->isn != g->seq) {
			s->have_isn = 1;
			s->isn = g->seq;
			if (s->have_seq && (s->started || s->ooo)) {
				/* A new connection on the same ports: finish the old byte stream,
				 * early bytes still queued included. */
				reasm_end(d, c, dir);
				if (dir == DIR_I2T) {
					/* ... and its login starts again without digests. */
					c->hd_on = c->dd_on = 0;
					c->hd_known = c->dd_known = 0;
					c->login_done = 0;
				}
			}
			s->have_seq = 1;
			s->next_seq = seq;
			s->fin = 0;
			if (!s->started)
				s->state = P_HDR; /* we saw the start: the first byte starts a PDU */
			s->pos_seq = seq;
		}
	}
	if (!s->have_seq) {
		if (g->len == 0)
			goto ack;
		s->have_seq = 1;
		s->next_seq = seq;
		/* A capture that starts mid-connection: when the peer had acknowledged only up to
		 * an earlier byte, the bytes between were still on their way (reordered, or sent
		 * as the capture began), so the stream starts there and this segment waits; the
		 * ACK rule below turns them into a gap if the capture never sees them. */
		if (s->have_acked && seq_lt(s->acked, seq) && seq - s->acked <= START_BACK_MAX)
			s->next_seq = s->acked;
		s->pos_seq = s->next_seq;
	}
	if (g->len) {
		if (seq == s->next_seq) {
			deliver(d, c, dir, g->payload, g->len, g->caplen, ts, 1);
			if (s->ooo)
				drain(d, c, dir);
		} else if (seq_lt(seq, s->next_seq)) {
			uint32_t end = seq + g->len;
			if (seq_le(end, s->next_seq)) {
				st->retransmits++;
				note(d, c, dir, N_RETRANSMIT);
			} else {
				uint32_t skip = s->next_seq - seq;
				st->overlaps++;
				note(d, c, dir, N_OVERLAP);
				deliver(d, c, dir, g->payload + (skip < g->caplen ? skip : g->caplen),
					g->len - skip, g->caplen > skip ? g->caplen - skip : 0, ts, 0);
				if (s->ooo)
					drain(d, c, dir);
			}
		} else {
			enqueue(d, c, dir, seq, g->payload, g->len, g->caplen, ts);
		}
	}
	if (g->flags & (TH_FIN | TH_RST)) {
		if ((g->flags & TH_FIN) && seq + g->len == s->next_seq)
			s->fin = 1;
	}
ack:
	/* The peer acknowledged bytes we hold later data for but never saw: the capture lost
	 * them (a network loss would not be acknowledged), so the hole will never fill. */
	if (g->flags & TH_ACK) {
		struct stream *o = &c->s[!dir];
		if (!o->have_acked || seq_lt(o->acked, g->ack)) {
			o->have_acked = 1;
			o->acked = g->ack;
		}
		if (o->have_seq && o->ooo && seq_lt(o->next_seq, g->ack) &&
		    seq_lt(o->ooo->seq, g->ack)) {
			force_gap(d, c, !dir, o->ooo->seq);
		}
	}
}

void reasm_end(struct decoder *d, struct conn *c, int dir)
{
	struct stream *s = &c->s[dir];
	while (s->ooo)
		force_gap(d, c, dir, s->ooo->seq);
	stream_end(d, c, dir);
}

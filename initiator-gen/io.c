/* Read/write engine. Single-threaded per session: issue while the queue and the CmdSN window
 * allow, then block on the next PDU. Blocking recv() has the socket timeout, so a silent
 * target ends in EXIT_TIMEOUT, never a hang. */
#define _GNU_SOURCE
#include "io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "names.h"
#include "pdu.h"
#include "usdt.h"
#include "verify.h"

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* Take the next command number; 0 when the run has no more work. */
static int claim(struct worker *w, uint64_t *lba)
{
	struct run *r = w->run;
	if (atomic_load(&g_stop) || w->exhausted)
		return 0;
	uint64_t n = atomic_fetch_add(&r->claimed, 1);
	if (r->o->count && n >= r->o->count) {
		w->exhausted = 1;
		return 0;
	}
	uint64_t chunk = r->o->same     ? 0
			 : r->o->random ? xorshift(&w->rng) % r->nchunks
					 : n % r->nchunks;
	*lba = r->first_lba + chunk * r->xfer_blocks;
	return 1;
}

static struct cmd *lookup(struct worker *w, uint32_t itt)
{
	unsigned slot = itt & 0xffff;
	if (slot >= w->ncmds || w->cmds[slot].busy != 1 || w->cmds[slot].itt != itt)
		return NULL;
	return &w->cmds[slot];
}

static const char *cdb_label(const struct cmd *k, const struct run *r, char *out, size_t n)
{
	int c16 = r->o->force_cdb16 || k->lba + r->xfer_blocks > 0xffffffffull ||
		  r->xfer_blocks > 0xffff;
	snprintf(out, n, "%s(%d) LBA %llu, %llu blocks", k->write ? "WRITE" : "READ",
		 c16 ? 16 : 10, (unsigned long long)k->lba, (unsigned long long)r->xfer_blocks);
	return out;
}

/* Data-Out PDUs for [off, off+len) of a write, each at most the target's MRDSL. */
static int send_data_out(struct worker *w, struct cmd *k, uint32_t ttt, uint32_t off,
			 uint32_t len)
{
	struct conn *c = &w->s.c;
	uint32_t datasn = 0, end = off + len;
	while (off < end) {
		uint32_t n = end - off;
		if (n > c->mrdsl_tx)
			n = c->mrdsl_tx;
		unsigned char bhs[BHS_LEN];
		bhs_init(bhs, OP_DATA_OUT, 0, off + n == end ? BHS_F : 0, n, k->itt);
		put64(bhs + 8, w->s.lun_enc);
		put32(bhs + 20, ttt);
		put32(bhs + 28, c->expstatsn);
		put32(bhs + 36, datasn++);
		put32(bhs + 40, off);
		if (!k->first_data) {
			k->first_data = 1;
			USDT_CMD_FIRST_DATA(k->itt, k->lba, k->bytes);
		}
		if (conn_send_pdu(c, bhs, k->buf + off, n) < 0)
			return -1;
		w->data_out_pdus++;
		off += n;
	}
	return 0;
}

static int issue(struct worker *w, struct cmd *k, uint64_t lba, int retry, int more)
{
	struct run *r = w->run;
	struct conn *c = &w->s.c;
	const struct negotiated *ng = &w->s.neg;
	unsigned slot = (unsigned)(k - w->cmds);
	k->busy = 1;
	k->write = r->o->write;
	k->lba = lba;
	k->bytes = (uint32_t)(r->xfer_blocks * r->block_size);
	k->got = 0;
	k->next_datasn = 0;
	k->first_data = 0;
	if (!retry)
		k->retries = 0;
	if (++w->gen == 0xffff)
		w->gen = 0;
	k->itt = (uint32_t)w->gen << 16 | slot;
	if (!k->buf && !r->discard) {
		if (posix_memalign((void **)&k->buf, 4096, k->bytes)) {
			k->buf = NULL;
			err_set(&c->err, EXIT_INTERNAL, "out of memory for a %u byte buffer", k->bytes);
			return -1;
		}
	}
	if (k->write)
		pattern_fill(k->buf, lba * r->block_size, k->bytes);

	unsigned char bhs[BHS_LEN], *cdb = bhs + 32;
	uint32_t imm = 0, unsol = 0;
	if (k->write) {
		uint32_t fb = ng->first_burst < k->bytes ? ng->first_burst : k->bytes;
		if (ng->immediate_data)
			imm = fb < c->mrdsl_tx ? fb : c->mrdsl_tx;
		unsol = ng->initial_r2t ? imm : fb;
	}
	uint8_t flags = CMD_ATTR_SIMPLE | (k->write ? CMD_W : CMD_R) | (unsol == imm ? BHS_F : 0);
	bhs_init(bhs, OP_SCSI_CMD, 0, flags, imm, k->itt);
	put64(bhs + 8, w->s.lun_enc);
	put32(bhs + 20, k->bytes);
	put32(bhs + 24, c->cmdsn++);
	put32(bhs + 28, c->expstatsn);
	if (!r->o->force_cdb16 && lba + r->xfer_blocks <= 0xffffffffull && r->xfer_blocks <= 0xffff) {
		cdb[0] = k->write ? 0x2a : 0x28;
		put32(cdb + 2, (uint32_t)lba);
		put16(cdb + 7, (uint16_t)r->xfer_blocks);
	} else {
		cdb[0] = k->write ? 0x8a : 0x88;
		put64(cdb + 2, lba);
		put32(cdb + 10, (uint32_t)r->xfer_blocks);
	}
	k->t_issue = now_ns();
	USDT_CMD_ISSUE(k->itt, k->lba, k->bytes);
	if (imm) {
		k->first_data = 1;
		USDT_CMD_FIRST_DATA(k->itt, k->lba, k->bytes);
	}
	if (!w->outstanding)
		w->progress_ns = k->t_issue; /* the progress clock starts with the first command */
	if (!retry) {
		w->outstanding++;
		stats_issue(r->st);
	}
	if (conn_send_pdu_more(c, bhs, k->buf, imm, more && unsol == imm) < 0)
		return -1;
	if (unsol > imm && send_data_out(w, k, RSVD_TAG, imm, unsol - imm) < 0)
		return -1;
	return 0;
}

static int complete(struct worker *w, struct cmd *k, uint8_t status, const unsigned char *seg,
		    uint32_t seglen, uint8_t flags, uint32_t residual)
{
	struct run *r = w->run;
	struct conn *c = &w->s.c;
	uint64_t lat = now_ns() - k->t_issue;
	char label[96];
	USDT_CMD_DONE(k->itt, k->lba, k->bytes, status);
	/* UNIT ATTENTION reports an event (reset, new nexus), not a failed read: re-issue once
	 * or twice, as any initiator does */
	if (status == 0x02 && response_sense_key(seg, seglen) == 6 && k->retries < 3) {
		k->busy = 2; /* re-issued by the engine when the CmdSN window allows */
		k->retries++;
		w->pending_retry++;
		w->unit_attentions++;
		return 0;
	}
	if (status != 0) {
		char sense[256] = "";
		if (status == 0x02)
			response_sense_describe(seg, seglen, sense, sizeof(sense));
		err_set(&c->err, EXIT_SCSI, "%s: %s (0x%02x)%s%s", cdb_label(k, r, label, sizeof(label)),
			scsi_status_name(status) ? scsi_status_name(status) : "unknown status", status,
			sense[0] ? ": " : "", sense);
		stats_error(r->st, 0);
		return -1;
	}
	if (!k->write && (k->got != k->bytes || (flags & (DIN_U | DIN_O)))) {
		err_set(&c->err, EXIT_PROTOCOL, "%s: short read, %u of %u bytes (%s residual %u)",
			cdb_label(k, r, label, sizeof(label)), k->got, k->bytes,
			flags & DIN_O ? "overflow" : "underflow", residual);
		stats_error(r->st, 0);
		return -1;
	}
	if (!k->write && (r->o->verify || r->verify_fd >= 0)) {
		uint64_t bad = 0, off = k->lba * r->block_size;
		int rc = r->verify_fd >= 0 ? file_check(r->verify_fd, k->buf, off, k->bytes, &bad)
					   : pattern_check(k->buf, off, k->bytes, &bad);
		if (rc == -2) {
			err_set(&c->err, EXIT_VERIFY, "cannot read %llu bytes at %llu of --verify-file",
				(unsigned long long)k->bytes, (unsigned long long)off);
			stats_error(r->st, 1);
			return -1;
		}
		if (rc) {
			err_set(&c->err, EXIT_VERIFY,
				"verify failed: %s: first wrong byte at LUN offset %llu "
				"(block %llu, byte %llu of the command)",
				cdb_label(k, r, label, sizeof(label)), (unsigned long long)bad,
				(unsigned long long)(bad / r->block_size),
				(unsigned long long)(bad - off));
			stats_error(r->st, 1);
			return -1;
		}
	}
	stats_done(r->st, lat, k->bytes);
	k->busy = 0;
	w->outstanding--;
	return 0;
}

static int on_pdu(struct worker *w)
{
	struct conn *c = &w->s.c;
	struct bhs h;
	struct cmd *k;
	if (conn_recv_bhs(c, &h) < 0)
		return -1;
	conn_update_sn(c, &h);
	if (h.opcode == OP_DATA_IN || h.opcode == OP_SCSI_RSP || h.opcode == OP_R2T)
		w->progress_ns = now_ns();
	switch (h.opcode) {
	case OP_DATA_IN:
		k = lookup(w, h.itt);
		if (!k || k->write) {
			err_set(&c->err, EXIT_PROTOCOL, "Data-In for %s ITT 0x%08x",
				k ? "a write," : "unknown", h.itt);
			return -1;
		}
		if (h.datasn != k->next_datasn) {
			err_set(&c->err, EXIT_PROTOCOL,
				"Data-In out of order on ITT 0x%08x: DataSN %u, expected %u", h.itt,
				h.datasn, k->next_datasn);
			return -1;
		}
		if (h.offset != k->got || (uint64_t)h.offset + h.dsl > k->bytes) {
			err_set(&c->err, EXIT_PROTOCOL,
				"Data-In on ITT 0x%08x at buffer offset %u + %u bytes; expected offset "
				"%u within %u bytes",
				h.itt, h.offset, h.dsl, k->got, k->bytes);
			return -1;
		}
		if (!k->first_data) {
			k->first_data = 1;
			USDT_CMD_FIRST_DATA(k->itt, k->lba, k->bytes);
		}
		if ((w->run->discard ? conn_skip_data(c, &h)
				     : conn_recv_data(c, &h, k->buf + h.offset)) < 0)
			return -1;
		w->data_in_pdus++;
		k->got += h.dsl;
		k->next_datasn++;
		if (h.flags & DIN_S)
			return complete(w, k, h.raw[3], NULL, 0, h.flags, h.word44);
		return 0;
	case OP_SCSI_RSP:
		k = lookup(w, h.itt);
		if (!k) {
			err_set(&c->err, EXIT_PROTOCOL, "SCSI Response for unknown ITT 0x%08x", h.itt);
			return -1;
		}
		if (conn_recv_data(c, &h, NULL) < 0)
			return -1;
		if (h.raw[2] != 0) {
			err_set(&c->err, EXIT_SCSI, "target failure on ITT 0x%08x (iSCSI response 0x%02x)",
				h.itt, h.raw[2]);
			stats_error(w->run->st, 0);
			return -1;
		}
		return complete(w, k, h.raw[3], c->scratch, h.dsl, h.flags, h.word44);
	case OP_R2T:
		k = lookup(w, h.itt);
		if (!k || !k->write) {
			err_set(&c->err, EXIT_PROTOCOL, "R2T for %s ITT 0x%08x",
				k ? "a read," : "unknown", h.itt);
			return -1;
		}
		if ((uint64_t)h.offset + h.word44 > k->bytes || h.word44 == 0) {
			err_set(&c->err, EXIT_PROTOCOL,
				"R2T on ITT 0x%08x asks for %u bytes at %u of a %u byte write", h.itt,
				h.word44, h.offset, k->bytes);
			return -1;
		}
		if (h.dsl && conn_recv_data(c, &h, NULL) < 0)
			return -1;
		w->r2ts++;
		return send_data_out(w, k, h.ttt, h.offset, h.word44);
	default:
		return session_unsolicited(&w->s, &h);
	}
}

static int engine(struct worker *w)
{
	struct conn *c = &w->s.c;
	unsigned qd = w->run->o->queue_depth;
	for (;;) {
		/* a target that keeps talking (pings) but moves no command along is as stuck as a
		 * silent one, which the socket timeout catches */
		if (w->outstanding && (double)(now_ns() - w->progress_ns) / 1e9 > w->run->o->timeout_s) {
			err_set(&c->err, EXIT_TIMEOUT,
				"target stopped answering: no progress on %u outstanding command%s "
				"for %.1f s",
				w->outstanding, w->outstanding == 1 ? "" : "s", w->run->o->timeout_s);
			return -1;
		}
		for (unsigned i = 0; w->pending_retry && i < w->ncmds && conn_window_open(c); i++) {
			if (w->cmds[i].busy != 2)
				continue;
			w->pending_retry--;
			if (issue(w, &w->cmds[i], w->cmds[i].lba, 1, 0) < 0)
				return -1;
		}
		/* a freed slot is refilled at once, before the next PDU is handled, even when
		 * the read-ahead already holds more responses: a target with one event loop
		 * (tgtd) otherwise runs dry while we parse, and then gets the new commands in a
		 * clump. Measured against tgtd at 4 KiB x qd 8: its main thread slept 0.14 times
		 * per command when the read-ahead was drained first, 0.01 with this; 30k -> 38k
		 * commands in 2 s. (A NOP-In waiting in the read-ahead is answered right after.) */
		uint64_t lba, next;
		int have = w->outstanding < qd && conn_window_open(c) && claim(w, &lba);
		while (have) {
			struct cmd *k = NULL;
			for (unsigned i = 0; i < w->ncmds; i++)
				if (!w->cmds[i].busy) {
					k = &w->cmds[i];
					break;
				}
			/* claim the next one first, so this one knows whether another follows */
			int more = w->outstanding + 1 < qd && sn_le(c->cmdsn + 1, c->maxcmdsn) &&
				   claim(w, &next);
			if (!k || issue(w, k, lba, 0, more) < 0)
				return -1;
			lba = next;
			have = more;
		}
		if (w->outstanding == 0 && (atomic_load(&g_stop) || w->exhausted))
			return 0;
		if (on_pdu(w) < 0)
			return -1;
	}
}

void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->run;
	int ok = 1;
	if (!w->opened) {
		if (session_open(&w->s, r->o, w->idx, 0, 0) < 0)
			ok = 0;
		w->opened = 1;
	}
	w->rng = r->o->seed * 0x9e3779b97f4a7c15ull + w->idx + 1;
	w->ncmds = r->o->queue_depth;
	w->cmds = calloc(w->ncmds, sizeof(*w->cmds));
	if (!w->cmds) {
		err_set(&w->s.c.err, EXIT_INTERNAL, "out of memory");
		ok = 0;
	}
	if (!ok)
		atomic_store(&g_stop, 1);
	pthread_barrier_wait(&r->start);
	pthread_barrier_wait(&r->go);
	if (ok && engine(w) < 0)
		atomic_store(&g_stop, 1);
	session_close(&w->s);
	atomic_fetch_add(&r->finished, 1);
	return NULL;
}

void worker_free(struct worker *w)
{
	for (unsigned i = 0; w->cmds && i < w->ncmds; i++)
		free(w->cmds[i].buf);
	free(w->cmds);
	w->cmds = NULL;
}

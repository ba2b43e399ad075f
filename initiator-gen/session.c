/* Session setup and the PDUs that are not part of the I/O stream. */
#define _GNU_SOURCE
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "names.h"
#include "util.h"
#include "pdu.h"

int session_open(struct session *s, const struct gen_opts *o, unsigned idx, int discovery,
		 int verbose)
{
	memset(s, 0, sizeof(*s));
	s->o = o;
	s->idx = idx;
	s->c.fd = -1;
	/* ISID: "random" format (T=10b); pid and session index keep concurrent runs apart */
	uint32_t pid = (uint32_t)getpid();
	s->isid[0] = 0x80;
	s->isid[1] = (unsigned char)(pid >> 16);
	s->isid[2] = (unsigned char)(pid >> 8);
	s->isid[3] = (unsigned char)pid;
	s->isid[4] = (unsigned char)(idx >> 8);
	s->isid[5] = (unsigned char)idx;
	s->lun_enc = lun_encode(o->lun);
	s->next_itt = 0x1000;
	if (conn_open(&s->c, o->portal, 3260, o->timeout_s) < 0)
		return -1;
	if (login_run(&s->c, o, discovery, s->isid, &s->neg, verbose) < 0)
		return -1;
	s->logged_in = 1;
	return 0;
}

void sense_describe(const unsigned char *sense, size_t len, char *out, size_t outlen)
{
	uint8_t key, asc, ascq;
	if (len < 3) {
		snprintf(out, outlen, "no sense data");
		return;
	}
	uint8_t code = sense[0] & 0x7f;
	if (code == 0x72 || code == 0x73) {
		key = sense[1] & 0x0f;
		asc = sense[2];
		ascq = len > 3 ? sense[3] : 0;
	} else if (code == 0x70 || code == 0x71) {
		key = sense[2] & 0x0f;
		asc = len > 12 ? sense[12] : 0;
		ascq = len > 13 ? sense[13] : 0;
	} else {
		snprintf(out, outlen, "unknown sense format 0x%02x", code);
		return;
	}
	const char *an = asc_name(asc, ascq);
	char unk[40];
	if (!an) {
		snprintf(unk, sizeof(unk), "ASC/ASCQ 0x%02x/0x%02x", asc, ascq);
		an = unk;
	}
	snprintf(out, outlen, "%s / %s (key 0x%x, ASC 0x%02x, ASCQ 0x%02x)", sense_key_name(key),
		 an, key, asc, ascq);
}

int response_sense_key(const unsigned char *seg, size_t len)
{
	if (!seg || len < 5)
		return -1;
	size_t sl = get16(seg);
	const unsigned char *sense = seg + 2;
	if (sl > len - 2)
		sl = len - 2;
	uint8_t code = sense[0] & 0x7f;
	if ((code == 0x72 || code == 0x73) && sl >= 2)
		return sense[1] & 0x0f;
	if ((code == 0x70 || code == 0x71) && sl >= 3)
		return sense[2] & 0x0f;
	return -1;
}

void response_sense_describe(const unsigned char *seg, size_t len, char *out, size_t outlen)
{
	if (len < 2) {
		snprintf(out, outlen, "no sense data");
		return;
	}
	size_t sl = get16(seg);
	if (sl > len - 2)
		sl = len - 2;
	sense_describe(seg + 2, sl, out, outlen);
}

int session_unsolicited(struct session *s, const struct bhs *h)
{
	struct conn *c = &s->c;
	if (h->opcode == OP_NOP_IN) {
		if (conn_recv_data(c, h, NULL) < 0)
			return -1;
		if (h->ttt == RSVD_TAG)
			return 0; /* an answer to nothing we asked, or a plain StatSN update */
		unsigned char bhs[BHS_LEN];
		uint32_t len = h->dsl; /* echo the ping data */
		bhs_init(bhs, OP_NOP_OUT, 1, BHS_F, len, RSVD_TAG);
		memcpy(bhs + 8, h->raw + 8, 8);
		put32(bhs + 20, h->ttt);
		put32(bhs + 24, c->cmdsn);
		put32(bhs + 28, c->expstatsn);
		s->nop_pings++;
		return conn_send_pdu(c, bhs, c->scratch, len);
	}
	if (h->opcode == OP_ASYNC) {
		if (conn_recv_data(c, h, NULL) < 0)
			return -1;
		uint8_t ev = h->raw[36];
		switch (ev) {
		case 0:
			return 0; /* SCSI asynchronous event (e.g. a unit attention notice) */
		case 1:
			err_set(&c->err, EXIT_CLOSED, "target requests logout (Async Message)");
			return -1;
		case 2:
		case 3:
			err_set(&c->err, EXIT_CLOSED,
				"target will drop the %s (Async Message event %u)",
				ev == 2 ? "connection" : "session", ev);
			return -1;
		case 4:
			err_set(&c->err, EXIT_PROTOCOL,
				"target requests parameter renegotiation, which istrace-gen does not do");
			return -1;
		default:
			return 0;
		}
	}
	if (h->opcode == OP_REJECT) {
		if (conn_recv_data(c, h, NULL) < 0)
			return -1;
		uint8_t op = 0xff;
		uint32_t itt = 0;
		if (h->dsl >= BHS_LEN) {
			op = c->scratch[0] & 0x3f;
			itt = get32(c->scratch + 16);
		}
		err_set(&c->err, EXIT_PROTOCOL,
			"target sent Reject: %s (reason 0x%02x) for %s ITT 0x%08x",
			reject_reason_name(h->raw[2]), h->raw[2],
			op == 0xff ? "a PDU" : opcode_name(op), itt);
		return -1;
	}
	err_set(&c->err, EXIT_PROTOCOL, "unexpected %s (opcode 0x%02x, ITT 0x%08x)",
		opcode_name(h->opcode), h->opcode, h->itt);
	return -1;
}

/* One synchronous read-direction SCSI command with a small response buffer. */
static int scsi_sync(struct session *s, const unsigned char *cdb, size_t cdblen,
		     unsigned char *buf, uint32_t buflen, uint8_t *status, char *sense,
		     size_t senselen)
{
	struct conn *c = &s->c;
	unsigned char bhs[BHS_LEN];
	uint32_t itt = s->next_itt++;
	bhs_init(bhs, OP_SCSI_CMD, 0, BHS_F | CMD_ATTR_SIMPLE | (buflen ? CMD_R : 0), 0, itt);
	put64(bhs + 8, s->lun_enc);
	put32(bhs + 20, buflen);
	put32(bhs + 24, c->cmdsn++);
	put32(bhs + 28, c->expstatsn);
	memcpy(bhs + 32, cdb, cdblen);
	if (conn_send_pdu(c, bhs, NULL, 0) < 0)
		return -1;
	sense[0] = 0;
	for (;;) {
		struct bhs h;
		if (conn_recv_bhs(c, &h) < 0)
			return -1;
		conn_update_sn(c, &h);
		if ((h.opcode == OP_DATA_IN || h.opcode == OP_SCSI_RSP) && h.itt != itt) {
			err_set(&c->err, EXIT_PROTOCOL, "%s for unknown ITT 0x%08x",
				opcode_name(h.opcode), h.itt);
			return -1;
		}
		if (h.opcode == OP_DATA_IN) {
			if ((uint64_t)h.offset + h.dsl > buflen) {
				err_set(&c->err, EXIT_PROTOCOL,
					"Data-In beyond the buffer (offset %u + %u > %u)", h.offset,
					h.dsl, buflen);
				return -1;
			}
			if (conn_recv_data(c, &h, buf + h.offset) < 0)
				return -1;
			if (h.flags & DIN_S) {
				*status = h.raw[3];
				return 0;
			}
		} else if (h.opcode == OP_SCSI_RSP) {
			if (conn_recv_data(c, &h, NULL) < 0)
				return -1;
			*status = h.raw[3];
			if (h.raw[2] != 0) {
				err_set(&c->err, EXIT_SCSI, "target failure (iSCSI response 0x%02x)",
					h.raw[2]);
				return -1;
			}
			if (*status)
				response_sense_describe(c->scratch, h.dsl, sense, senselen);
			return 0;
		} else if (session_unsolicited(s, &h) < 0) {
			return -1;
		}
	}
}

int session_read_capacity(struct session *s)
{
	unsigned char cdb[16] = {0x9e, 0x10}, buf[32];
	put32(cdb + 10, sizeof(buf));
	char sense[256];
	for (int attempt = 0; attempt < 4; attempt++) {
		uint8_t st = 0;
		memset(buf, 0, sizeof(buf));
		if (scsi_sync(s, cdb, sizeof(cdb), buf, sizeof(buf), &st, sense, sizeof(sense)) < 0)
			return -1;
		if (st == 0) {
			s->lun_blocks = get64(buf) + 1;
			s->block_size = get32(buf + 8);
			if (s->block_size < 512 || s->block_size > (1u << 20) ||
			    (s->block_size & (s->block_size - 1))) {
				err_set(&s->c.err, EXIT_SCSI, "LUN reports an odd block size of %u",
					s->block_size);
				return -1;
			}
			return 0;
		}
		if (st != 0x02 || !strstr(sense, "UNIT ATTENTION"))
			break;
	}
	err_set(&s->c.err, EXIT_SCSI, "READ CAPACITY(16) on LUN %llu failed: %s%s%s",
		(unsigned long long)s->o->lun, sense[0] ? "CHECK CONDITION: " : "status ",
		sense[0] ? sense : "non-GOOD", "");
	return -1;
}

int session_discover(struct session *s, int json, int print, char *first, size_t firstlen)
{
	struct conn *c = &s->c;
	struct kvbuf kv = {0};
	kv_add(&kv, "SendTargets", "All");
	char *text = NULL;
	size_t tlen = 0;
	uint32_t ttt = RSVD_TAG, itt = s->next_itt++;
	for (int round = 0; round < 64; round++) {
		unsigned char bhs[BHS_LEN];
		bhs_init(bhs, OP_TEXT_REQ, 1, BHS_F, round ? 0 : (uint32_t)kv.len, itt);
		put64(bhs + 8, 0);
		put32(bhs + 20, ttt);
		put32(bhs + 24, c->cmdsn);
		put32(bhs + 28, c->expstatsn);
		if (conn_send_pdu(c, bhs, round ? NULL : kv.buf, round ? 0 : (uint32_t)kv.len) < 0)
			goto fail;
		struct bhs h;
		for (;;) {
			if (conn_recv_bhs(c, &h) < 0)
				goto fail;
			conn_update_sn(c, &h);
			if (h.opcode == OP_TEXT_RSP)
				break;
			if (session_unsolicited(s, &h) < 0)
				goto fail;
		}
		if (conn_recv_data(c, &h, NULL) < 0)
			goto fail;
		char *n = realloc(text, tlen + h.dsl + 1);
		if (!n) {
			err_set(&c->err, EXIT_INTERNAL, "out of memory");
			goto fail;
		}
		text = n;
		memcpy(text + tlen, c->scratch, h.dsl);
		tlen += h.dsl;
		text[tlen] = 0;
		if (!(h.flags & TEXT_C) && (h.flags & BHS_F))
			break;
		ttt = h.ttt; /* continue the same exchange */
	}
	int count = 0, naddr = 0;
	if (first && firstlen)
		first[0] = 0;
	if (!print)
		json = 0;
	if (json)
		printf("{\"targets\": [");
	for (size_t i = 0; i < tlen;) {
		const char *kvp = text + i;
		size_t l = strnlen(kvp, tlen - i);
		char line[1100];
		snprintf(line, sizeof(line), "%.*s", (int)(l > 1024 ? 1024 : l), kvp);
		if (!strncmp(line, "TargetName=", 11)) {
			if (first && !count)
				snprintf(first, firstlen, "%s", line + 11);
			if (!print) {
			} else if (json) {
				printf("%s{\"name\": ", count ? "]}, " : "");
				json_puts(stdout, line + 11);
				printf(", \"addresses\": [");
			} else {
				printf("TargetName=%s\n", line + 11);
			}
			naddr = 0;
			count++;
		} else if (!strncmp(line, "TargetAddress=", 14) && count && print) {
			if (json) {
				printf("%s", naddr++ ? ", " : "");
				json_puts(stdout, line + 14);
			} else {
				printf("  TargetAddress=%s\n", line + 14);
			}
		}
		i += l + 1;
	}
	if (json)
		printf("%s]}\n", count ? "]}" : "");
	if (!json && print)
		fprintf(stderr, "discovery: %d target%s at %s\n", count, count == 1 ? "" : "s",
			c->peer);
	free(text);
	return 0;
fail:
	free(text);
	return -1;
}

void session_close(struct session *s)
{
	struct conn *c = &s->c;
	if (s->logged_in && c->fd >= 0 && !c->err.code) { /* after an error the link is suspect */
		unsigned char bhs[BHS_LEN];
		bhs_init(bhs, OP_LOGOUT_REQ, 1, BHS_F | 0x00, 0, s->next_itt++);
		put32(bhs + 24, c->cmdsn);
		put32(bhs + 28, c->expstatsn);
		if (conn_send_pdu(c, bhs, NULL, 0) == 0) {
			for (int i = 0; i < 64; i++) {
				struct bhs h;
				if (conn_recv_bhs(c, &h) < 0 || conn_recv_data(c, &h, NULL) < 0)
					break;
				if (h.opcode == OP_LOGOUT_RSP)
					break;
			}
		}
		memset(&c->err, 0, sizeof(c->err)); /* logout trouble is not the run's error */
	}
	s->logged_in = 0;
	conn_close(c);
}

/* SCSI CDB/sense/status decode. One table row per CDB opcode says where its LBA and length
 * live, like a Wireshark dissector's field table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include "scsi.h"

#include <stdio.h>
#include <string.h>

enum len_kind {
	L_NONE,   /* no transfer length */
	L_BLOCKS, /* transfer length in logical blocks */
	L_BYTES,  /* allocation / parameter list length in bytes */
};

struct cdb_row {
	uint8_t opcode;
	uint8_t min_len;              /* CDB bytes the fields need */
	const char *name;
	uint8_t lba_off, lba_len;     /* lba_len 0: none; 21: READ(6)-style 21-bit LBA */
	uint8_t len_off, len_len;     /* big-endian length field */
	uint8_t len_kind;
};

/* Ordered by opcode for readability; looked up through by_opcode[]. */
static const struct cdb_row rows[] = {
	{0x00, 6, "TEST UNIT READY", 0, 0, 0, 0, L_NONE},
	{0x01, 6, "REZERO UNIT", 0, 0, 0, 0, L_NONE},
	{0x03, 6, "REQUEST SENSE", 0, 0, 4, 1, L_BYTES},
	{0x04, 6, "FORMAT UNIT", 0, 0, 0, 0, L_NONE},
	{0x07, 6, "REASSIGN BLOCKS", 0, 0, 0, 0, L_NONE},
	{0x08, 6, "READ(6)", 1, 21, 4, 1, L_BLOCKS},
	{0x0a, 6, "WRITE(6)", 1, 21, 4, 1, L_BLOCKS},
	{0x0b, 6, "SEEK(6)", 1, 21, 0, 0, L_NONE},
	{0x12, 6, "INQUIRY", 0, 0, 3, 2, L_BYTES},
	{0x15, 6, "MODE SELECT(6)", 0, 0, 4, 1, L_BYTES},
	{0x16, 6, "RESERVE(6)", 0, 0, 0, 0, L_NONE},
	{0x17, 6, "RELEASE(6)", 0, 0, 0, 0, L_NONE},
	{0x1a, 6, "MODE SENSE(6)", 0, 0, 4, 1, L_BYTES},
	{0x1b, 6, "START STOP UNIT", 0, 0, 0, 0, L_NONE},
	{0x1c, 6, "RECEIVE DIAGNOSTIC RESULTS", 0, 0, 3, 2, L_BYTES},
	{0x1d, 6, "SEND DIAGNOSTIC", 0, 0, 3, 2, L_BYTES},
	{0x1e, 6, "PREVENT ALLOW MEDIUM REMOVAL", 0, 0, 0, 0, L_NONE},
	{0x25, 10, "READ CAPACITY(10)", 0, 0, 0, 0, L_NONE},
	{0x28, 10, "READ(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x2a, 10, "WRITE(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x2b, 10, "SEEK(10)", 2, 4, 0, 0, L_NONE},
	{0x2e, 10, "WRITE AND VERIFY(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x2f, 10, "VERIFY(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x34, 10, "PRE-FETCH(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x35, 10, "SYNCHRONIZE CACHE(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x37, 10, "READ DEFECT DATA(10)", 0, 0, 7, 2, L_BYTES},
	{0x3b, 10, "WRITE BUFFER", 0, 0, 6, 3, L_BYTES},
	{0x3c, 10, "READ BUFFER", 0, 0, 6, 3, L_BYTES},
	{0x3e, 10, "READ LONG(10)", 2, 4, 7, 2, L_BYTES},
	{0x3f, 10, "WRITE LONG(10)", 2, 4, 7, 2, L_BYTES},
	{0x41, 10, "WRITE SAME(10)", 2, 4, 7, 2, L_BLOCKS},
	{0x42, 10, "UNMAP", 0, 0, 7, 2, L_BYTES},
	{0x48, 10, "SANITIZE", 0, 0, 7, 2, L_BYTES},
	{0x4c, 10, "LOG SELECT", 0, 0, 7, 2, L_BYTES},
	{0x4d, 10, "LOG SENSE", 0, 0, 7, 2, L_BYTES},
	{0x55, 10, "MODE SELECT(10)", 0, 0, 7, 2, L_BYTES},
	{0x56, 10, "RESERVE(10)", 0, 0, 0, 0, L_NONE},
	{0x57, 10, "RELEASE(10)", 0, 0, 0, 0, L_NONE},
	{0x5a, 10, "MODE SENSE(10)", 0, 0, 7, 2, L_BYTES},
	{0x5e, 10, "PERSISTENT RESERVE IN", 0, 0, 7, 2, L_BYTES},
	{0x5f, 10, "PERSISTENT RESERVE OUT", 0, 0, 5, 4, L_BYTES},
	{0x7f, 10, "VARIABLE LENGTH CDB", 0, 0, 0, 0, L_NONE},
	{0x83, 16, "EXTENDED COPY", 0, 0, 10, 4, L_BYTES},
	{0x84, 16, "RECEIVE COPY RESULTS", 0, 0, 10, 4, L_BYTES},
	{0x86, 16, "ACCESS CONTROL IN", 0, 0, 10, 4, L_BYTES},
	{0x87, 16, "ACCESS CONTROL OUT", 0, 0, 10, 4, L_BYTES},
	{0x88, 16, "READ(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x89, 16, "COMPARE AND WRITE", 2, 8, 13, 1, L_BLOCKS},
	{0x8a, 16, "WRITE(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x8c, 16, "READ ATTRIBUTE", 0, 0, 10, 4, L_BYTES},
	{0x8d, 16, "WRITE ATTRIBUTE", 0, 0, 10, 4, L_BYTES},
	{0x8e, 16, "WRITE AND VERIFY(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x8f, 16, "VERIFY(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x90, 16, "PRE-FETCH(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x91, 16, "SYNCHRONIZE CACHE(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x93, 16, "WRITE SAME(16)", 2, 8, 10, 4, L_BLOCKS},
	{0x9e, 16, "SERVICE ACTION IN(16)", 0, 0, 10, 4, L_BYTES},
	{0x9f, 16, "SERVICE ACTION OUT(16)", 0, 0, 10, 4, L_BYTES},
	{0xa0, 12, "REPORT LUNS", 0, 0, 6, 4, L_BYTES},
	{0xa3, 12, "MAINTENANCE IN", 0, 0, 6, 4, L_BYTES},
	{0xa4, 12, "MAINTENANCE OUT", 0, 0, 6, 4, L_BYTES},
	{0xa8, 12, "READ(12)", 2, 4, 6, 4, L_BLOCKS},
	{0xaa, 12, "WRITE(12)", 2, 4, 6, 4, L_BLOCKS},
	{0xae, 12, "WRITE AND VERIFY(12)", 2, 4, 6, 4, L_BLOCKS},
	{0xaf, 12, "VERIFY(12)", 2, 4, 6, 4, L_BLOCKS},
};

static const struct cdb_row *by_opcode[256];
static int table_ready;

static void build_index(void)
{
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		by_opcode[rows[i].opcode] = &rows[i];
	table_ready = 1;
}

int scsi_cdb_known(uint8_t opcode)
{
	if (!table_ready)
		build_index();
	return by_opcode[opcode] != NULL;
}

static uint64_t be(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v = (v << 8) | p[i];
	return v;
}

/* Service-action names for the opcodes that multiplex one. */
static const char *service_action_name(uint8_t op, uint8_t sa)
{
	switch (op) {
	case 0x9e:
		if (sa == 0x10) return "READ CAPACITY(16)";
		if (sa == 0x12) return "GET LBA STATUS";
		if (sa == 0x13) return "REPORT REFERRALS";
		return NULL;
	case 0xa3:
		if (sa == 0x0a) return "REPORT TARGET PORT GROUPS";
		if (sa == 0x0c) return "REPORT SUPPORTED OPERATION CODES";
		if (sa == 0x0d) return "REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS";
		if (sa == 0x0f) return "REPORT TIMESTAMP";
		return NULL;
	case 0x5e: {
		static const char *const n[] = {"PR IN READ KEYS", "PR IN READ RESERVATION",
						 "PR IN REPORT CAPABILITIES", "PR IN READ FULL STATUS"};
		return sa < 4 ? n[sa] : NULL;
	}
	case 0x5f: {
		static const char *const n[] = {
			"PR OUT REGISTER", "PR OUT RESERVE", "PR OUT RELEASE", "PR OUT CLEAR",
			"PR OUT PREEMPT", "PR OUT PREEMPT AND ABORT",
			"PR OUT REGISTER AND IGNORE EXISTING KEY", "PR OUT REGISTER AND MOVE"};
		return sa < 8 ? n[sa] : NULL;
	}
	default:
		return NULL;
	}
}

void cdb_decode(const uint8_t *cdb, size_t len, uint32_t block_size, struct cdb_info *out)
{
	memset(out, 0, sizeof *out);
	if (!table_ready)
		build_index();
	if (len == 0) {
		out->name = "EMPTY CDB";
		return;
	}
	uint8_t op = cdb[0];
	out->opcode = op;
	const struct cdb_row *r = by_opcode[op];
	if (!r) {
		snprintf(out->unk, sizeof out->unk, "UNKNOWN(0x%02x)", op);
		out->name = out->unk;
		return;
	}
	out->name = r->name;
	if (len < r->min_len)
		return; /* name only: the fields are not all there */
	const char *sa_name = len > 1 ? service_action_name(op, cdb[1] & 0x1f) : NULL;
	if (sa_name)
		out->name = sa_name;
	if (r->lba_len == 21) {
		out->lba = ((uint64_t)(cdb[1] & 0x1f) << 16) | ((uint64_t)cdb[2] << 8) | cdb[3];
		out->has_lba = 1;
	} else if (r->lba_len) {
		out->lba = be(cdb + r->lba_off, r->lba_len);
		out->has_lba = 1;
	}
	if (r->len_len) {
		uint64_t v = be(cdb + r->len_off, r->len_len);
		if (r->len_kind == L_BLOCKS) {
			/* READ(6)/WRITE(6): 0 means 256 blocks (SBC-3 5.x). */
			if ((op == 0x08 || op == 0x0a) && v == 0)
				v = 256;
			out->blocks = v;
			out->has_blocks = 1;
			out->bytes = v * block_size;
			out->has_bytes = 1;
		} else {
			out->bytes = v;
			out->has_bytes = 1;
		}
	}
	switch (op) {
	case 0x12:
		snprintf(out->extra, sizeof out->extra, "evpd=%u page=0x%02x", cdb[1] & 1, cdb[2]);
		break;
	case 0x1a:
		snprintf(out->extra, sizeof out->extra, "dbd=%u pc=%u page=0x%02x sub=0x%02x",
			 (cdb[1] >> 3) & 1, cdb[2] >> 6, cdb[2] & 0x3f, cdb[3]);
		break;
	case 0x5a:
		snprintf(out->extra, sizeof out->extra, "llbaa=%u dbd=%u pc=%u page=0x%02x sub=0x%02x",
			 (cdb[1] >> 4) & 1, (cdb[1] >> 3) & 1, cdb[2] >> 6, cdb[2] & 0x3f, cdb[3]);
		break;
	case 0x15:
	case 0x55:
		snprintf(out->extra, sizeof out->extra, "pf=%u sp=%u", (cdb[1] >> 4) & 1, cdb[1] & 1);
		break;
	case 0x1b:
		snprintf(out->extra, sizeof out->extra, "immed=%u power=%u loej=%u start=%u",
			 cdb[1] & 1, cdb[4] >> 4, (cdb[4] >> 1) & 1, cdb[4] & 1);
		break;
	case 0x1e:
		snprintf(out->extra, sizeof out->extra, "prevent=%u", cdb[4] & 3);
		break;
	case 0x4d:
		snprintf(out->extra, sizeof out->extra, "pc=%u page=0x%02x sub=0x%02x", cdb[2] >> 6,
			 cdb[2] & 0x3f, cdb[3]);
		break;
	case 0x5f:
		snprintf(out->extra, sizeof out->extra, "scope=%u type=%u", cdb[2] >> 4, cdb[2] & 0xf);
		break;
	case 0xa3:
		if ((cdb[1] & 0x1f) == 0x0c)
			snprintf(out->extra, sizeof out->extra, "options=%u opcode=0x%02x sa=0x%04x",
				 cdb[2] & 7, cdb[3], (unsigned)be(cdb + 4, 2));
		break;
	case 0xa0:
		snprintf(out->extra, sizeof out->extra, "select=0x%02x", cdb[2]);
		break;
	case 0x41:
	case 0x93:
		snprintf(out->extra, sizeof out->extra, "unmap=%u anchor=%u ndob=%u",
			 (cdb[1] >> 3) & 1, (cdb[1] >> 4) & 1, op == 0x93 ? cdb[1] & 1 : 0);
		break;
	case 0x28: case 0x2a: case 0x88: case 0x8a: case 0xa8: case 0xaa:
		if (cdb[1] & 0x08)
			snprintf(out->extra, sizeof out->extra, "fua=1");
		break;
	case 0x2f: case 0x8f: case 0xaf:
		snprintf(out->extra, sizeof out->extra, "bytchk=%u", (cdb[1] >> 1) & 3);
		break;
	case 0x35: case 0x91:
		snprintf(out->extra, sizeof out->extra, "immed=%u", (cdb[1] >> 1) & 1);
		break;
	default:
		break;
	}
}

void cdb_describe(const uint8_t *cdb, size_t len, void (*emit)(void *ctx, const char *line),
		  void *ctx)
{
	char line[160];
	struct cdb_info ci;
	if (!table_ready)
		build_index();
	if (len == 0)
		return;
	cdb_decode(cdb, len, 512, &ci);
	snprintf(line, sizeof line, "CDB[0]      Operation Code = 0x%02x (%s)", cdb[0], ci.name);
	emit(ctx, line);
	const struct cdb_row *r = by_opcode[cdb[0]];
	if (!r || len < r->min_len)
		return;
	if (service_action_name(cdb[0], cdb[1] & 0x1f)) {
		snprintf(line, sizeof line, "CDB[1]      Service Action = 0x%02x", cdb[1] & 0x1f);
		emit(ctx, line);
	}
	if (r->lba_len == 21) {
		snprintf(line, sizeof line, "CDB[1-3]    Logical Block Address = %llu",
			 (unsigned long long)ci.lba);
		emit(ctx, line);
	} else if (r->lba_len) {
		snprintf(line, sizeof line, "CDB[%u-%u]%*sLogical Block Address = %llu", r->lba_off,
			 r->lba_off + r->lba_len - 1, r->lba_off + r->lba_len - 1 >= 10 ? 3 : 4, "",
			 (unsigned long long)ci.lba);
		emit(ctx, line);
	}
	if (r->len_len) {
		const char *what = r->len_kind == L_BLOCKS ? "Transfer Length (blocks)"
			: "Allocation/Parameter List Length (bytes)";
		uint64_t v = r->len_kind == L_BLOCKS ? ci.blocks : ci.bytes;
		if (r->len_len == 1)
			snprintf(line, sizeof line, "CDB[%u]%*s%s = %llu", r->len_off,
				 r->len_off >= 10 ? 5 : 6, "", what, (unsigned long long)v);
		else
			snprintf(line, sizeof line, "CDB[%u-%u]%*s%s = %llu", r->len_off,
				 r->len_off + r->len_len - 1,
				 r->len_off + r->len_len - 1 >= 10 ? (r->len_off >= 10 ? 2 : 3) : 4, "",
				 what, (unsigned long long)v);
		emit(ctx, line);
	}
	if (ci.extra[0]) {
		snprintf(line, sizeof line, "CDB         %s", ci.extra);
		emit(ctx, line);
	}
	snprintf(line, sizeof line, "CDB[%zu]%*sControl = 0x%02x", len - 1, len - 1 >= 10 ? 5 : 6,
		 "", cdb[len - 1]);
	emit(ctx, line);
}

void sense_decode(const uint8_t *s, size_t len, struct sense_info *out)
{
	memset(out, 0, sizeof *out);
	if (len < 1)
		return;
	uint8_t rc = s[0] & 0x7f;
	out->response_code = rc;
	if (rc == 0x70 || rc == 0x71) {
		/* Fixed format: key byte 2, ASC/ASCQ bytes 12/13 (when the length reaches them). */
		if (len < 3)
			return;
		out->key = s[2] & 0x0f;
		out->asc = len > 12 ? s[12] : 0;
		out->ascq = len > 13 ? s[13] : 0;
		out->valid = 1;
	} else if (rc == 0x72 || rc == 0x73) {
		if (len < 4)
			return;
		out->key = s[1] & 0x0f;
		out->asc = s[2];
		out->ascq = s[3];
		out->valid = 1;
	}
}

void sense_text(uint8_t key, uint8_t asc, uint8_t ascq, char *buf, size_t len)
{
	const char *a = asc_name(asc, ascq);
	if (a)
		snprintf(buf, len, "%s: %s", sense_key_name(key), a);
	else if (asc >= 0x80 || ascq >= 0x80)
		snprintf(buf, len, "%s: VENDOR SPECIFIC ASC 0x%02x ASCQ 0x%02x", sense_key_name(key),
			 asc, ascq);
	else
		snprintf(buf, len, "%s: ASC 0x%02x ASCQ 0x%02x", sense_key_name(key), asc, ascq);
}

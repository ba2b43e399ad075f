/* iSCSI Basic Header Segment knowledge (RFC 7143 §11): one field table per opcode drives
 * both the record fill and the verbose "protocol translation" listing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "scsi.h"

enum fkind {
	K_SHOW,       /* shown in -v only */
	K_LUN, K_TTT, K_CMDSN, K_EXPSTATSN, K_STATSN, K_EXPCMDSN, K_MAXCMDSN, K_DATASN,
	K_R2TSN, K_BUFOFF, K_DESLEN, K_EDTL, K_RESIDUAL, K_STATUS, K_RESPONSE,
};

struct field {
	uint8_t off, len;
	const char *name;
	uint8_t kind;
};

#define END {0, 0, NULL, 0}
static const struct field f_nop_out[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{24, 4, "CmdSN", K_CMDSN}, {28, 4, "ExpStatSN", K_EXPSTATSN}, END};
static const struct field f_scsi_cmd[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Expected Data Transfer Length", K_EDTL},
	{24, 4, "CmdSN", K_CMDSN}, {28, 4, "ExpStatSN", K_EXPSTATSN}, END};
static const struct field f_tmf_req[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Referenced Task Tag", K_SHOW},
	{24, 4, "CmdSN", K_CMDSN}, {28, 4, "ExpStatSN", K_EXPSTATSN},
	{32, 4, "RefCmdSN", K_SHOW}, {36, 4, "ExpDataSN", K_SHOW}, END};
static const struct field f_login_req[] = {
	{2, 1, "Version-max", K_SHOW}, {3, 1, "Version-min", K_SHOW},
	{8, 6, "ISID", K_SHOW}, {14, 2, "TSIH", K_SHOW}, {20, 2, "CID", K_SHOW},
	{24, 4, "CmdSN", K_CMDSN}, {28, 4, "ExpStatSN", K_EXPSTATSN}, END};
static const struct field f_text_req[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{24, 4, "CmdSN", K_CMDSN}, {28, 4, "ExpStatSN", K_EXPSTATSN}, END};
static const struct field f_data_out[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{28, 4, "ExpStatSN", K_EXPSTATSN}, {36, 4, "DataSN", K_DATASN},
	{40, 4, "Buffer Offset", K_BUFOFF}, END};
static const struct field f_logout_req[] = {
	{20, 2, "CID", K_SHOW}, {24, 4, "CmdSN", K_CMDSN}, {28, 4, "ExpStatSN", K_EXPSTATSN},
	END};
static const struct field f_snack[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{28, 4, "ExpStatSN", K_EXPSTATSN}, {40, 4, "BegRun", K_SHOW}, {44, 4, "RunLength", K_SHOW},
	END};
static const struct field f_nop_in[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{24, 4, "StatSN", K_STATSN}, {28, 4, "ExpCmdSN", K_EXPCMDSN},
	{32, 4, "MaxCmdSN", K_MAXCMDSN}, END};
static const struct field f_scsi_rsp[] = {
	{2, 1, "Response", K_RESPONSE}, {3, 1, "Status", K_STATUS},
	{20, 4, "SNACK Tag", K_SHOW}, {24, 4, "StatSN", K_STATSN},
	{28, 4, "ExpCmdSN", K_EXPCMDSN}, {32, 4, "MaxCmdSN", K_MAXCMDSN},
	{36, 4, "ExpDataSN", K_SHOW}, {40, 4, "Bidirectional Read Residual Count", K_SHOW},
	{44, 4, "Residual Count", K_SHOW}, END};
static const struct field f_tmf_rsp[] = {
	{2, 1, "Response", K_RESPONSE}, {24, 4, "StatSN", K_STATSN},
	{28, 4, "ExpCmdSN", K_EXPCMDSN}, {32, 4, "MaxCmdSN", K_MAXCMDSN}, END};
static const struct field f_login_rsp[] = {
	{2, 1, "Version-max", K_SHOW}, {3, 1, "Version-active", K_SHOW},
	{8, 6, "ISID", K_SHOW}, {14, 2, "TSIH", K_SHOW},
	{24, 4, "StatSN", K_STATSN}, {28, 4, "ExpCmdSN", K_EXPCMDSN},
	{32, 4, "MaxCmdSN", K_MAXCMDSN}, {36, 1, "Status-Class", K_SHOW},
	{37, 1, "Status-Detail", K_SHOW}, END};
static const struct field f_text_rsp[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{24, 4, "StatSN", K_STATSN}, {28, 4, "ExpCmdSN", K_EXPCMDSN},
	{32, 4, "MaxCmdSN", K_MAXCMDSN}, END};
static const struct field f_data_in[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{28, 4, "ExpCmdSN", K_EXPCMDSN}, {32, 4, "MaxCmdSN", K_MAXCMDSN},
	{36, 4, "DataSN", K_DATASN}, {40, 4, "Buffer Offset", K_BUFOFF},
	{44, 4, "Residual Count", K_SHOW}, END};
static const struct field f_logout_rsp[] = {
	{2, 1, "Response", K_RESPONSE}, {24, 4, "StatSN", K_STATSN},
	{28, 4, "ExpCmdSN", K_EXPCMDSN}, {32, 4, "MaxCmdSN", K_MAXCMDSN},
	{40, 2, "Time2Wait", K_SHOW}, {42, 2, "Time2Retain", K_SHOW}, END};
static const struct field f_r2t[] = {
	{8, 8, "LUN", K_LUN}, {20, 4, "Target Transfer Tag", K_TTT},
	{24, 4, "StatSN", K_STATSN}, {28, 4, "ExpCmdSN", K_EXPCMDSN},
	{32, 4, "MaxCmdSN", K_MAXCMDSN}, {36, 4, "R2TSN", K_R2TSN},
	{40, 4, "Buffer Offset", K_BUFOFF}, {44, 4, "Desired Data Transfer Length", K_DESLEN},
	END};
static const struct field f_async[] = {
	{8, 8, "LUN", K_LUN}, {24, 4, "StatSN", K_STATSN}, {28, 4, "ExpCmdSN", K_EXPCMDSN},
	{32, 4, "MaxCmdSN", K_MAXCMDSN}, {36, 1, "AsyncEvent", K_SHOW},
	{37, 1, "AsyncVCode", K_SHOW}, {38, 2, "Parameter1", K_SHOW},
	{40, 2, "Parameter2", K_SHOW}, {42, 2, "Parameter3", K_SHOW}, END};
static const struct field f_reject[] = {
	{2, 1, "Reason", K_SHOW}, {24, 4, "StatSN", K_STATSN}, {28, 4, "ExpCmdSN", K_EXPCMDSN},
	{32, 4, "MaxCmdSN", K_MAXCMDSN}, {36, 4, "DataSN/R2TSN", K_SHOW}, END};
static const struct field f_vendor[] = {END};

struct opinfo {
	const char *name;
	const struct field *fields;
};

static const struct opinfo *op_info(uint8_t op)
{
	static const struct opinfo t[] = {
		[0x00] = {"NOP-Out", f_nop_out},
		[0x01] = {"SCSI Command", f_scsi_cmd},
		[0x02] = {"Task Management Function Request", f_tmf_req},
		[0x03] = {"Login Request", f_login_req},
		[0x04] = {"Text Request", f_text_req},
		[0x05] = {"SCSI Data-Out", f_data_out},
		[0x06] = {"Logout Request", f_logout_req},
		[0x10] = {"SNACK Request", f_snack},
		[0x1c] = {"Vendor Specific Request 0x1c", f_vendor},
		[0x1d] = {"Vendor Specific Request 0x1d", f_vendor},
		[0x1e] = {"Vendor Specific Request 0x1e", f_vendor},
		[0x20] = {"NOP-In", f_nop_in},
		[0x21] = {"SCSI Response", f_scsi_rsp},
		[0x22] = {"Task Management Function Response", f_tmf_rsp},
		[0x23] = {"Login Response", f_login_rsp},
		[0x24] = {"Text Response", f_text_rsp},
		[0x25] = {"SCSI Data-In", f_data_in},
		[0x26] = {"Logout Response", f_logout_rsp},
		[0x31] = {"R2T", f_r2t},
		[0x32] = {"Asynchronous Message", f_async},
		[0x3c] = {"Vendor Specific Response 0x3c", f_vendor},
		[0x3d] = {"Vendor Specific Response 0x3d", f_vendor},
		[0x3e] = {"Vendor Specific Response 0x3e", f_vendor},
		[0x3f] = {"Reject", f_reject},
	};
	op &= 0x3f;
	return t[op].name ? &t[op] : NULL;
}

const char *iscsi_opcode_name(uint8_t op)
{
	static char unk[64][16];
	const struct opinfo *i = op_info(op);
	if (i)
		return i->name;
	op &= 0x3f;
	if (!unk[op][0])
		snprintf(unk[op], sizeof unk[op], "Unknown 0x%02x", op);
	return unk[op];
}

int iscsi_opcode_valid(uint8_t op, int dir)
{
	op &= 0x3f;
	if (!op_info(op))
		return 0;
	return dir == DIR_I2T ? op < 0x20 : op >= 0x20;
}

/* A strict test used only while hunting for a PDU boundary: the opcode must be a standard
 * one for this direction and the reserved bits RFC 7143 requires to be zero must be. */
int bhs_plausible(const uint8_t *b, int dir)
{
	uint8_t op = b[0] & 0x3f;
	uint8_t fl = b[1];
	uint32_t ahs = b[4];
	uint32_t dsl = rd24be(b + 5);
	if (b[0] & 0x80)
		return 0;
	if (!iscsi_opcode_valid(op, dir))
		return 0;
	if ((op >= 0x1c && op <= 0x1e) || (op >= 0x3c && op <= 0x3e))
		return 0; /* vendor opcodes: valid, but too weak to resynchronise on */
	if (dir == DIR_T2I && (b[0] & 0x40))
		return 0;
	if (ahs && op != 0x01)
		return 0;
	uint32_t itt = rd32be(b + 16), ttt = rd32be(b + 20);
	int lun_zero = rd32be(b + 8) == 0 && rd32be(b + 12) == 0; /* where the LUN is reserved */
	switch (op) {
	case 0x00: /* NOP-Out: a ping (TTT all ones) or the answer to one (ITT all ones) */
	case 0x20: /* NOP-In: the same, mirrored */
		return fl == 0x80 && b[2] == 0 && b[3] == 0 &&
		       (itt == 0xffffffffu || ttt == 0xffffffffu);
	case 0x01:
		return (fl & 0x80) && !(fl & 0x18) && b[2] == 0 && b[3] == 0 &&
		       scsi_cdb_known(b[32]);
	case 0x02:
		return (fl & 0x80) && (fl & 0x7f) >= 1 && (fl & 0x7f) <= 14 && b[2] == 0 &&
		       b[3] == 0 && dsl == 0;
	case 0x03:
		return (b[0] & 0x40) && !(fl & 0x30) && ((fl >> 2) & 3) != 2 && b[2] == 0 &&
		       b[3] == 0;
	case 0x04:
	case 0x24:
		return !(fl & 0x3f) && b[2] == 0 && b[3] == 0;
	case 0x05:
		return !(fl & 0x7f) && b[2] == 0 && b[3] == 0 && dsl > 0 && rd32be(b + 24) == 0 &&
		       rd32be(b + 32) == 0 && rd32be(b + 44) == 0;
	case 0x06:
		return (fl & 0x80) && (fl & 0x7f) <= 3 && b[2] == 0 && b[3] == 0 && dsl == 0;
	case 0x10:
		return (fl & 0x80) && !(fl & 0x70) && b[2] == 0 && b[3] == 0;
	case 0x21:
		return (fl & 0x80) && !(fl & 0x61) && b[2] <= 1 && lun_zero;
	case 0x22:
		return fl == 0x80 && b[3] == 0 && dsl == 0 && lun_zero;
	case 0x26:
		return fl == 0x80 && b[2] <= 3 && b[3] == 0 && dsl == 0 && lun_zero;
	case 0x23:
		return !(fl & 0x30) && ((fl >> 2) & 3) != 2 && b[2] == 0 && b[3] == 0;
	case 0x25:
		return !(fl & 0x38) && b[2] == 0 && dsl > 0 && ((fl & 1) || b[3] == 0);
	case 0x31:
		return fl == 0x80 && b[2] == 0 && b[3] == 0 && dsl == 0 && ttt != 0xffffffffu &&
		       rd32be(b + 44) > 0;
	case 0x32:
		return fl == 0x80 && b[2] == 0 && b[3] == 0 && itt == 0xffffffffu;
	case 0x3f:
		return fl == 0x80 && b[3] == 0 && dsl >= 48 && itt == 0xffffffffu;
	default:
		return 0;
	}
}

uint64_t lun_value(const uint8_t *l, int *single)
{
	/* SAM-5 single-level LUNs: peripheral (method 00b) and flat space (01b) addressing,
	 * with the other six bytes zero. Anything else is shown as the 8 raw bytes. */
	int rest_zero = !(l[2] | l[3] | l[4] | l[5] | l[6] | l[7]);
	unsigned method = l[0] >> 6;
	if (rest_zero && method == 0 && (l[0] & 0x3f) == 0) {
		*single = 1;
		return l[1];
	}
	if (rest_zero && method == 1) {
		*single = 1;
		return ((uint64_t)(l[0] & 0x3f) << 8) | l[1];
	}
	*single = 0;
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = (v << 8) | l[i];
	return v;
}

void bhs_fill(struct pdu_rec *r, const uint8_t *b)
{
	uint8_t op = b[0] & 0x3f;
	memcpy(r->bhs, b, BHS_LEN);
	r->opcode = op;
	r->immediate = (b[0] >> 6) & 1;
	r->flags = b[1];
	r->final = (b[1] >> 7) & 1;
	r->ahs_len = (uint32_t)b[4] * 4;
	r->dsl = rd24be(b + 5);
	r->itt = rd32be(b + 16);
	const struct opinfo *oi = op_info(op);
	if (!oi)
		return;
	for (const struct field *f = oi->fields; f->name; f++) {
		uint32_t v = f->len == 4 ? rd32be(b + f->off) : f->len == 1 ? b[f->off] : 0;
		switch (f->kind) {
		case K_LUN: memcpy(r->lun_raw, b + 8, 8); r->has |= H_LUN; break;
		case K_TTT: r->ttt = v; r->has |= H_TTT; break;
		case K_CMDSN: r->cmdsn = v; r->has |= H_CMDSN; break;
		case K_EXPSTATSN: r->expstatsn = v; r->has |= H_EXPSTATSN; break;
		case K_STATSN: r->statsn = v; r->has |= H_STATSN; break;
		case K_EXPCMDSN: r->expcmdsn = v; r->has |= H_EXPCMDSN; break;
		case K_MAXCMDSN: r->maxcmdsn = v; r->has |= H_MAXCMDSN; break;
		case K_DATASN: r->datasn = v; r->has |= H_DATASN; break;
		case K_R2TSN: r->r2tsn = v; r->has |= H_R2TSN; break;
		case K_BUFOFF: r->buffer_offset = v; r->has |= H_BUFOFF; break;
		case K_DESLEN: r->desired_len = v; r->has |= H_DESLEN; break;
		case K_EDTL: r->edtl = v; r->has |= H_EDTL; break;
		case K_STATUS: r->status = (uint8_t)v; r->has |= H_STATUS; break;
		case K_RESPONSE: r->response = (uint8_t)v; r->has |= H_RESPONSE; break;
		default: break;
		}
	}
	/* Status and residuals that depend on flag bits. */
	if (op == 0x25) {
		if (b[1] & 0x01) {
			r->status = b[3];
			r->has |= H_STATUS;
			/* StatSN is valid only with the S bit (RFC 7143 §11.7.4). */
			r->statsn = rd32be(b + 24);
			r->has |= H_STATSN;
		}
		if (b[1] & 0x06) {
			r->residual_kind = (b[1] & 0x04) ? RES_OVER : RES_UNDER;
			r->residual = rd32be(b + 44);
			r->has |= H_RESIDUAL;
		}
	} else if (op == 0x21) {
		if (b[1] & 0x06) {
			r->residual_kind = (b[1] & 0x04) ? RES_OVER : RES_UNDER;
			r->residual = rd32be(b + 44);
			r->has |= H_RESIDUAL;
		}
	}
}

static void flags_text(const uint8_t *b, char *out, size_t len)
{
	uint8_t op = b[0] & 0x3f, f = b[1];
	switch (op) {
	case 0x01: {
		static const char *const attr[8] = {"Untagged", "Simple", "Ordered", "Head of Queue",
						    "ACA", "5", "6", "7"};
		snprintf(out, len, "F=%u R=%u W=%u ATTR=%u (%s)", f >> 7, (f >> 6) & 1, (f >> 5) & 1,
			 f & 7, attr[f & 7]);
		break;
	}
	case 0x02:
		snprintf(out, len, "F=%u Function=%u", f >> 7, f & 0x7f);
		break;
	case 0x03:
	case 0x23:
		snprintf(out, len, "T=%u C=%u CSG=%u NSG=%u", f >> 7, (f >> 6) & 1, (f >> 2) & 3,
			 f & 3);
		break;
	case 0x04:
	case 0x24:
		snprintf(out, len, "F=%u C=%u", f >> 7, (f >> 6) & 1);
		break;
	case 0x06:
		snprintf(out, len, "F=%u ReasonCode=%u", f >> 7, f & 0x7f);
		break;
	case 0x10:
		snprintf(out, len, "F=%u Type=%u", f >> 7, f & 0x0f);
		break;
	case 0x21:
		snprintf(out, len, "F=%u o=%u u=%u O=%u U=%u", f >> 7, (f >> 4) & 1, (f >> 3) & 1,
			 (f >> 2) & 1, (f >> 1) & 1);
		break;
	case 0x25:
		snprintf(out, len, "F=%u A=%u O=%u U=%u S=%u", f >> 7, (f >> 6) & 1, (f >> 2) & 1,
			 (f >> 1) & 1, f & 1);
		break;
	default:
		snprintf(out, len, "F=%u", f >> 7);
		break;
	}
}

struct vline {
	unsigned off;
	char text[200];
};

static void vadd(struct vline *v, unsigned *n, unsigned off, const char *text)
{
	if (*n >= 24)
		return;
	v[*n].off = off;
	snprintf(v[*n].text, sizeof v[*n].text, "%s", text);
	(*n)++;
}

void bhs_describe(const uint8_t *b, void (*emit)(void *ctx, const char *line), void *ctx)
{
	struct vline v[24];
	unsigned nv = 0;
	char line[200], ft[96];
	uint8_t op = b[0] & 0x3f;
	snprintf(line, sizeof line, "BHS[0]      Opcode = 0x%02x (%s), I = %u", op,
		 iscsi_opcode_name(op), (b[0] >> 6) & 1);
	vadd(v, &nv, 0, line);
	flags_text(b, ft, sizeof ft);
	snprintf(line, sizeof line, "BHS[1]      Flags = 0x%02x: %s", b[1], ft);
	vadd(v, &nv, 1, line);
	snprintf(line, sizeof line, "BHS[4]      TotalAHSLength = %u (x4 = %u bytes)", b[4],
		 b[4] * 4u);
	vadd(v, &nv, 4, line);
	snprintf(line, sizeof line, "BHS[5-7]    DataSegmentLength = %u", rd24be(b + 5));
	vadd(v, &nv, 5, line);
	snprintf(line, sizeof line, "BHS[16-19]  Initiator Task Tag = 0x%08x", rd32be(b + 16));
	vadd(v, &nv, 16, line);
	const struct opinfo *oi = op_info(op);
	for (const struct field *f = oi ? oi->fields : f_vendor; f->name; f++) {
		char pos[16];
		if (f->len == 1)
			snprintf(pos, sizeof pos, "BHS[%u]", f->off);
		else
			snprintf(pos, sizeof pos, "BHS[%u-%u]", f->off, f->off + f->len - 1);
		if (f->kind == K_LUN) {
			int single;
			uint64_t lv = lun_value(b + 8, &single);
			snprintf(line, sizeof line, "%-11s LUN = %llu (%02x%02x %02x%02x %02x%02x %02x%02x)%s",
				 pos, (unsigned long long)lv, b[8], b[9], b[10], b[11], b[12], b[13],
				 b[14], b[15], single ? "" : " multi-level");
		} else if (f->len == 4) {
			uint32_t x = rd32be(b + f->off);
			if (f->kind == K_TTT || strstr(f->name, "Tag"))
				snprintf(line, sizeof line, "%-11s %s = 0x%08x", pos, f->name, x);
			else
				snprintf(line, sizeof line, "%-11s %s = %u", pos, f->name, x);
		} else if (f->len == 6) {
			const uint8_t *p = b + f->off;
			snprintf(line, sizeof line, "%-11s %s = 0x%02x%02x%02x%02x%02x%02x", pos,
				 f->name, p[0], p[1], p[2], p[3], p[4], p[5]);
		} else if (f->len == 2) {
			snprintf(line, sizeof line, "%-11s %s = %u", pos, f->name, rd16be(b + f->off));
		} else {
			snprintf(line, sizeof line, "%-11s %s = %u (0x%02x)", pos, f->name, b[f->off],
				 b[f->off]);
		}
		vadd(v, &nv, f->off, line);
	}
	/* In byte order, like reading the header left to right. */
	for (unsigned i = 1; i < nv; i++)
		for (unsigned j = i; j > 0 && v[j - 1].off > v[j].off; j--) {
			struct vline t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	for (unsigned i = 0; i < nv; i++)
		emit(ctx, v[i].text);
}

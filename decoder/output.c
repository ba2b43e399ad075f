/* Writers for decoded records. A small buffered writer with its own integer formatting
 * keeps output cheap when there are many PDUs (printf shows up in profiles otherwise). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include "output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core.h"
#include "scsi.h"
#include "segments_out.h"

/* --- buffered writer -------------------------------------------------------------------- */

struct wbuf {
	FILE *f;
	char buf[1 << 16];
	size_t len;
	int err;
};

static void wflush(struct wbuf *w)
{
	if (w->len && fwrite(w->buf, 1, w->len, w->f) != w->len)
		w->err = 1;
	w->len = 0;
}

static void wput(struct wbuf *w, const char *s, size_t n)
{
	if (w->len + n > sizeof w->buf) {
		wflush(w);
		if (n > sizeof w->buf) {
			if (fwrite(s, 1, n, w->f) != n)
				w->err = 1;
			return;
		}
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

static void wstr(struct wbuf *w, const char *s) { wput(w, s, strlen(s)); }
static void wch(struct wbuf *w, char c) { wput(w, &c, 1); }

static void wu64(struct wbuf *w, uint64_t v)
{
	char t[24];
	int i = 24;
	do {
		t[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	wput(w, t + i, (size_t)(24 - i));
}

static void wi64(struct wbuf *w, int64_t v)
{
	if (v < 0) {
		wch(w, '-');
		wu64(w, (uint64_t)0 - (uint64_t)v);
	} else {
		wu64(w, (uint64_t)v);
	}
}

static void whex(struct wbuf *w, uint32_t v, int digits)
{
	static const char hx[] = "0123456789abcdef";
	char t[10];
	t[0] = '0';
	t[1] = 'x';
	for (int i = 0; i < digits; i++)
		t[2 + i] = hx[(v >> (4 * (digits - 1 - i))) & 0xf];
	wput(w, t, (size_t)digits + 2);
}

/* Microseconds from nanoseconds with 3 decimals, no floating point. */
static void wus(struct wbuf *w, int64_t ns)
{
	if (ns < 0) {
		wch(w, '-');
		ns = -ns;
	}
	wu64(w, (uint64_t)ns / 1000);
	char t[4] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
		     (char)('0' + ns % 10)};
	wput(w, t, 4);
}

static void wcsv_str(struct wbuf *w, const char *s)
{
	if (!s)
		return;
	if (!strpbrk(s, ",\"\n\r")) {
		wstr(w, s);
		return;
	}
	wch(w, '"');
	for (; *s; s++) {
		if (*s == '"')
			wch(w, '"');
		wch(w, *s);
	}
	wch(w, '"');
}

static void wjson_str(struct wbuf *w, const char *s)
{
	static const char hx[] = "0123456789abcdef";
	wch(w, '"');
	size_t n = strlen(s);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			wch(w, '\\');
			wch(w, (char)c);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			char t[6] = {'\\', 'u', '0', '0', hx[c >> 4], hx[c & 15]};
			wput(w, t, 6);
			i++;
		} else if (c < 0x80) {
			wch(w, (char)c);
			i++;
		} else {
			/* UTF-8 passes through; a byte that is not UTF-8 becomes U+FFFD. */
			size_t u = utf8_seq_len((const unsigned char *)s + i, n - i);
			if (u) {
				wput(w, s + i, u);
				i += u;
			} else {
				wstr(w, "\\ufffd");
				i++;
			}
		}
	}
	wch(w, '"');
}

void out_csv_escape(FILE *f, const char *s)
{
	struct wbuf *w = malloc(sizeof *w);
	if (!w)
		return;
	w->f = f;
	w->len = 0;
	w->err = 0;
	wcsv_str(w, s);
	wflush(w);
	free(w);
}

/* --- rows: one column emitter shared by CSV and JSON ------------------------------------- */

struct row {
	struct wbuf *w;
	int json, n;
};

static void col_start(struct row *r, const char *name)
{
	if (r->json) {
		wstr(r->w, r->n ? ",\"" : "{\"");
		wstr(r->w, name);
		wstr(r->w, "\":");
	} else if (r->n) {
		wch(r->w, ',');
	}
	r->n++;
}

static void col_null(struct row *r, const char *name)
{
	col_start(r, name);
	if (r->json)
		wstr(r->w, "null");
}

static void col_u(struct row *r, const char *name, int present, uint64_t v)
{
	if (!present)
		return col_null(r, name);
	col_start(r, name);
	wu64(r->w, v);
}

static void col_i(struct row *r, const char *name, int present, int64_t v)
{
	if (!present)
		return col_null(r, name);
	col_start(r, name);
	wi64(r->w, v);
}

static void col_us(struct row *r, const char *name, int present, int64_t ns)
{
	if (!present)
		return col_null(r, name);
	col_start(r, name);
	wus(r->w, ns);
}

static void col_s(struct row *r, const char *name, const char *s)
{
	if (!s)
		return col_null(r, name);
	col_start(r, name);
	if (r->json)
		wjson_str(r->w, s);
	else
		wcsv_str(r->w, s);
}

static void col_hex(struct row *r, const char *name, int present, uint32_t v, int digits)
{
	if (!present)
		return col_null(r, name);
	col_start(r, name);
	if (r->json)
		wch(r->w, '"');
	whex(r->w, v, digits);
	if (r->json)
		wch(r->w, '"');
}

static void row_end(struct row *r)
{
	if (r->json)
		wch(r->w, '}');
	wch(r->w, '\n');
}

static const char *const pdu_cols[] = {
	"pdu", "ts_ns", "conn", "dir", "tcp_seq", "opcode", "opcode_name", "immediate", "final",
	"flags", "ahs_len", "dsl", "lun", "itt", "ttt", "cmdsn", "expstatsn", "statsn",
	"expcmdsn", "maxcmdsn", "datasn", "r2tsn", "buffer_offset", "desired_len", "edtl",
	"cdb_opcode", "cdb_name", "lba", "xfer_blocks", "xfer_bytes", "status", "status_name",
	"response", "sense_key", "asc", "ascq", "sense_text", "residual_kind", "residual",
	"hdigest", "ddigest", "cmd", "resp_time_us", "kv", "note", NULL};

static const char *const cmd_cols[] = {
	"cmd", "conn", "itt", "lun", "cdb_opcode", "cdb_name", "lba", "xfer_blocks", "xfer_bytes",
	"edtl", "direction", "issue_ts_ns", "first_data_ts_ns", "last_data_ts_ns", "resp_ts_ns",
	"resp_time_us", "bytes_in", "bytes_out", "data_pdus", "r2ts", "status", "status_name",
	"sense_key", "asc", "ascq", "sense_text", "residual_kind", "residual", "outstanding", NULL};

static const char *const conn_cols[] = {
	"conn", "initiator_name", "target_name", "session_type", "isid", "tsih", "cid",
	"HeaderDigest", "DataDigest", "mrdsl_i2t", "mrdsl_t2i", "MaxBurstLength",
	"FirstBurstLength", "ImmediateData", "InitialR2T", "MaxOutstandingR2T", "block_size",
	"pdus", "bytes", "notes", NULL};

static void header_line(struct wbuf *w, const char *const *cols)
{
	for (int i = 0; cols[i]; i++) {
		if (i)
			wch(w, ',');
		wstr(w, cols[i]);
	}
	wch(w, '\n');
}

static const char *dig_text(uint8_t d)
{
	return d == DIG_OK ? "ok" : d == DIG_BAD ? "bad" : NULL;
}

static const char *res_text(uint8_t k)
{
	return k == RES_UNDER ? "under" : k == RES_OVER ? "over" : NULL;
}

static void status_name(uint8_t s, char *buf, size_t len)
{
	const char *n = scsi_status_name(s);
	if (n)
		snprintf(buf, len, "%s", n);
	else
		snprintf(buf, len, "0x%02x", s);
}

static void notes_text(uint32_t n, char *buf, size_t len)
{
	static const char *const names[] = {"resync", "truncated", "gap", "retransmit",
					    "overlap", "reorder", "incomplete", "no-command",
					    "kv-truncated"};
	size_t at = 0;
	buf[0] = 0;
	for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
		if (n & (1u << i)) {
			int k = snprintf(buf + at, len - at, "%s%s", at ? ";" : "", names[i]);
			if (k < 0 || (size_t)k >= len - at)
				break;
			at += (size_t)k;
		}
}

static void pdu_row(struct row *r, const struct pdu_rec *p)
{
	char sn[32], st[160], nt[160];
	int single;
	uint64_t lun = lun_value(p->lun_raw, &single);
	uint32_t h = p->has;
	col_u(r, "pdu", 1, p->pdu);
	col_i(r, "ts_ns", 1, p->ts_ns);
	col_s(r, "conn", p->conn);
	col_s(r, "dir", p->dir == DIR_I2T ? "i2t" : "t2i");
	col_u(r, "tcp_seq", 1, p->tcp_seq);
	col_u(r, "opcode", 1, p->opcode);
	col_s(r, "opcode_name", iscsi_opcode_name(p->opcode));
	col_u(r, "immediate", 1, p->immediate);
	col_u(r, "final", 1, p->final);
	col_hex(r, "flags", 1, p->flags, 2);
	col_u(r, "ahs_len", 1, p->ahs_len);
	col_u(r, "dsl", 1, p->dsl);
	col_u(r, "lun", h & H_LUN, lun);
	col_hex(r, "itt", 1, p->itt, 8);
	col_hex(r, "ttt", h & H_TTT, p->ttt, 8);
	col_u(r, "cmdsn", h & H_CMDSN, p->cmdsn);
	col_u(r, "expstatsn", h & H_EXPSTATSN, p->expstatsn);
	col_u(r, "statsn", h & H_STATSN, p->statsn);
	col_u(r, "expcmdsn", h & H_EXPCMDSN, p->expcmdsn);
	col_u(r, "maxcmdsn", h & H_MAXCMDSN, p->maxcmdsn);
	col_u(r, "datasn", h & H_DATASN, p->datasn);
	col_u(r, "r2tsn", h & H_R2TSN, p->r2tsn);
	col_u(r, "buffer_offset", h & H_BUFOFF, p->buffer_offset);
	col_u(r, "desired_len", h & H_DESLEN, p->desired_len);
	col_u(r, "edtl", h & H_EDTL, p->edtl);
	int cdb = (h & H_CDB) != 0;
	col_u(r, "cdb_opcode", cdb, p->ci.opcode);
	col_s(r, "cdb_name", cdb ? p->ci.name : NULL);
	col_u(r, "lba", cdb && p->ci.has_lba, p->ci.lba);
	col_u(r, "xfer_blocks", cdb && p->ci.has_blocks, p->ci.blocks);
	col_u(r, "xfer_bytes", cdb && p->ci.has_bytes, p->ci.bytes);
	col_u(r, "status", h & H_STATUS, p->status);
	if (h & H_STATUS)
		status_name(p->status, sn, sizeof sn);
	col_s(r, "status_name", (h & H_STATUS) ? sn : NULL);
	col_u(r, "response", h & H_RESPONSE, p->response);
	col_u(r, "sense_key", h & H_SENSE, p->sense_key);
	col_u(r, "asc", h & H_SENSE, p->asc);
	col_u(r, "ascq", h & H_SENSE, p->ascq);
	if (h & H_SENSE)
		sense_text(p->sense_key, p->asc, p->ascq, st, sizeof st);
	col_s(r, "sense_text", (h & H_SENSE) ? st : NULL);
	col_s(r, "residual_kind", (h & H_RESIDUAL) ? res_text(p->residual_kind) : NULL);
	col_u(r, "residual", h & H_RESIDUAL, p->residual);
	col_s(r, "hdigest", dig_text(p->hdigest));
	col_s(r, "ddigest", dig_text(p->ddigest));
	col_i(r, "cmd", p->cmd >= 0, p->cmd);
	col_us(r, "resp_time_us", h & H_RESPTIME, p->resp_time_ns);
	col_s(r, "kv", p->kv_len ? p->kv : NULL);
	notes_text(p->notes, nt, sizeof nt);
	col_s(r, "note", nt[0] ? nt : NULL);
	row_end(r);
}

static void cmd_row(struct row *r, const struct cmd_rec *c)
{
	char sn[32], st[160];
	int single;
	col_u(r, "cmd", 1, c->cmd);
	col_s(r, "conn", c->conn);
	col_hex(r, "itt", 1, c->itt, 8);
	col_u(r, "lun", 1, lun_value(c->lun_raw, &single));
	col_u(r, "cdb_opcode", 1, c->ci.opcode);
	col_s(r, "cdb_name", c->ci.name);
	col_u(r, "lba", c->ci.has_lba, c->ci.lba);
	col_u(r, "xfer_blocks", c->ci.has_blocks, c->ci.blocks);
	col_u(r, "xfer_bytes", c->ci.has_bytes, c->ci.bytes);
	col_u(r, "edtl", 1, c->edtl);
	col_s(r, "direction", c->direction);
	col_i(r, "issue_ts_ns", 1, c->issue_ts);
	col_i(r, "first_data_ts_ns", c->first_data_ts >= 0, c->first_data_ts);
	col_i(r, "last_data_ts_ns", c->last_data_ts >= 0, c->last_data_ts);
	col_i(r, "resp_ts_ns", c->complete, c->resp_ts);
	col_us(r, "resp_time_us", c->complete, c->resp_ts - c->issue_ts);
	col_u(r, "bytes_in", 1, c->bytes_in);
	col_u(r, "bytes_out", 1, c->bytes_out);
	col_u(r, "data_pdus", 1, c->data_pdus);
	col_u(r, "r2ts", 1, c->r2ts);
	col_u(r, "status", c->has_status, c->status);
	if (c->has_status)
		status_name(c->status, sn, sizeof sn);
	col_s(r, "status_name", c->has_status ? sn : NULL);
	col_u(r, "sense_key", c->has_sense, c->sense_key);
	col_u(r, "asc", c->has_sense, c->asc);
	col_u(r, "ascq", c->has_sense, c->ascq);
	if (c->has_sense)
		sense_text(c->sense_key, c->asc, c->ascq, st, sizeof st);
	col_s(r, "sense_text", c->has_sense ? st : NULL);
	col_s(r, "residual_kind", res_text(c->residual_kind));
	col_u(r, "residual", c->residual_kind != RES_NONE, c->residual);
	col_u(r, "outstanding", 1, c->outstanding);
	row_end(r);
}

static void conn_row(struct row *r, const struct conn_rec *c)
{
	char isid[16];
	snprintf(isid, sizeof isid, "0x%02x%02x%02x%02x%02x%02x", c->isid[0], c->isid[1],
		 c->isid[2], c->isid[3], c->isid[4], c->isid[5]);
	col_s(r, "conn", c->conn);
	col_s(r, "initiator_name", c->initiator_name);
	col_s(r, "target_name", c->target_name);
	col_s(r, "session_type", c->session_type);
	col_s(r, "isid", c->has_login ? isid : NULL);
	col_u(r, "tsih", c->has_login, c->tsih);
	col_u(r, "cid", c->has_login, c->cid);
	col_s(r, "HeaderDigest", c->header_digest);
	col_s(r, "DataDigest", c->data_digest);
	col_i(r, "mrdsl_i2t", c->mrdsl_i2t >= 0, c->mrdsl_i2t);
	col_i(r, "mrdsl_t2i", c->mrdsl_t2i >= 0, c->mrdsl_t2i);
	col_i(r, "MaxBurstLength", c->max_burst >= 0, c->max_burst);
	col_i(r, "FirstBurstLength", c->first_burst >= 0, c->first_burst);
	col_s(r, "ImmediateData", c->immediate_data);
	col_s(r, "InitialR2T", c->initial_r2t);
	col_i(r, "MaxOutstandingR2T", c->max_out_r2t >= 0, c->max_out_r2t);
	col_u(r, "block_size", 1, c->block_size);
	col_u(r, "pdus", 1, c->pdus);
	col_u(r, "bytes", 1, c->bytes);
	col_s(r, "notes", c->notes && c->notes[0] ? c->notes : NULL);
	row_end(r);
}

/* --- summary accumulators --------------------------------------------------------------- */

struct sizes {
	uint64_t size[64], count[64], other;
	int n;
};

static void size_add(struct sizes *s, uint64_t v)
{
	for (int i = 0; i < s->n; i++)
		if (s->size[i] == v) {
			s->count[i]++;
			return;
		}
	if (s->n < 64) {
		s->size[s->n] = v;
		s->count[s->n++] = 1;
	} else {
		s->other++;
	}
}

struct i64v {
	int64_t *v;
	size_t n, cap;
};

static void v_add(struct i64v *a, int64_t x)
{
	if (a->n == a->cap) {
		size_t nc = a->cap ? a->cap * 2 : 1024;
		int64_t *p = realloc(a->v, nc * sizeof *p);
		if (!p)
			return;
		a->v = p;
		a->cap = nc;
	}
	a->v[a->n++] = x;
}

/* --- the output object ------------------------------------------------------------------ */

struct out {
	struct out_opts o;
	struct wbuf *std, *pdus, *cmds, *conns;
	struct seg_out *seg_dir, *seg_file; /* csv_dir/segments.bin, segments_path */
	int64_t t0;
	int have_t0;
	uint64_t op_count[2][64], op_bytes[2][64];
	uint64_t data_in, data_out, n_cmds, n_open, out_max, out_sum;
	struct sizes rsz, wsz;
	struct i64v rt_all, rt_read, rt_write;
	uint64_t n_conn;
	uint64_t status_count[256];
};

static struct wbuf *wopen(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (!f) {
		snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
		return NULL;
	}
	struct wbuf *w = calloc(1, sizeof *w);
	if (!w) {
		fclose(f);
		return NULL;
	}
	w->f = f;
	return w;
}

struct out *out_new(const struct out_opts *o, char *err, size_t errlen)
{
	struct out *w = calloc(1, sizeof *w);
	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	w->o = *o;
	w->std = calloc(1, sizeof *w->std);
	if (!w->std) {
		free(w);
		return NULL;
	}
	w->std->f = stdout;
	if (o->csv_dir) {
		if (mkdir(o->csv_dir, 0777) != 0 && errno != EEXIST) {
			snprintf(err, errlen, "%s: cannot create directory: %s", o->csv_dir,
				 strerror(errno));
			free(w->std);
			free(w);
			return NULL;
		}
		w->pdus = wopen(o->csv_dir, "pdus.csv", err, errlen);
		w->cmds = w->pdus ? wopen(o->csv_dir, "commands.csv", err, errlen) : NULL;
		w->conns = w->cmds ? wopen(o->csv_dir, "connections.csv", err, errlen) : NULL;
		if (!w->conns) {
			/* one of them failed: err says which */
			if (w->pdus) { fclose(w->pdus->f); free(w->pdus); }
			if (w->cmds) { fclose(w->cmds->f); free(w->cmds); }
			free(w->std);
			free(w);
			return NULL;
		}
		header_line(w->pdus, pdu_cols);
		header_line(w->cmds, cmd_cols);
		header_line(w->conns, conn_cols);
		char path[4096];
		snprintf(path, sizeof path, "%s/segments.bin", o->csv_dir);
		if (!(w->seg_dir = seg_out_open(path, err, errlen))) {
			out_finish(w, NULL);
			return NULL;
		}
	}
	if (o->segments_path && !(w->seg_file = seg_out_open(o->segments_path, err, errlen))) {
		out_finish(w, NULL);
		return NULL;
	}
	return w;
}

static void emit_line(void *ctx, const char *line)
{
	struct wbuf *w = ctx;
	wstr(w, "        ");
	wstr(w, line);
	wch(w, '\n');
}

static void text_pdu(struct out *o, const struct pdu_rec *p)
{
	struct wbuf *w = o->std;
	char t[256];
	if (!o->have_t0) {
		o->t0 = p->ts_ns;
		o->have_t0 = 1;
	}
	int64_t rel = p->ts_ns - o->t0; /* both in [0, 9e18]: no overflow */
	int64_t arel = rel < 0 ? -rel : rel;
	snprintf(t, sizeof t, "%s%4lld.%06lld %s %s %-26s itt=0x%08x", rel < 0 ? "-" : "",
		 (long long)(arel / 1000000000), (long long)(arel % 1000000000 / 1000),
		 p->conn, p->dir == DIR_I2T ? "i2t" : "t2i", iscsi_opcode_name(p->opcode), p->itt);
	wstr(w, t);
	uint32_t h = p->has;
	int single;
	if (h & H_LUN) {
		snprintf(t, sizeof t, " lun=%llu", (unsigned long long)lun_value(p->lun_raw, &single));
		wstr(w, t);
	}
	if (h & H_TTT && p->ttt != 0xffffffffu) {
		snprintf(t, sizeof t, " ttt=0x%08x", p->ttt);
		wstr(w, t);
	}
	if (h & H_CMDSN) { wstr(w, " cmdsn="); wu64(w, p->cmdsn); }
	if (h & H_STATSN) { wstr(w, " statsn="); wu64(w, p->statsn); }
	if (h & H_DATASN) { wstr(w, " datasn="); wu64(w, p->datasn); }
	if (h & H_R2TSN) { wstr(w, " r2tsn="); wu64(w, p->r2tsn); }
	if (h & H_BUFOFF) { wstr(w, " off="); wu64(w, p->buffer_offset); }
	if (h & H_DESLEN) { wstr(w, " want="); wu64(w, p->desired_len); }
	if (p->dsl) { wstr(w, " dsl="); wu64(w, p->dsl); }
	if (p->opcode == 0x03 || p->opcode == 0x23) {
		snprintf(t, sizeof t, " T=%u CSG=%u NSG=%u", p->flags >> 7, (p->flags >> 2) & 3,
			 p->flags & 3);
		wstr(w, t);
		if (p->opcode == 0x23) {
			snprintf(t, sizeof t, " status=%u/%u", p->bhs[36], p->bhs[37]);
			wstr(w, t);
		}
	}
	if (h & H_CDB) {
		const struct cdb_info *c = &p->ci;
		wch(w, ' ');
		wstr(w, c->name);
		if (c->has_lba) { wstr(w, " lba="); wu64(w, c->lba); }
		if (c->has_blocks) {
			snprintf(t, sizeof t, " len=%llu blk (%llu B)", (unsigned long long)c->blocks,
				 (unsigned long long)c->bytes);
			wstr(w, t);
		} else if (c->has_bytes) {
			snprintf(t, sizeof t, " xfer=%llu B", (unsigned long long)c->bytes);
			wstr(w, t);
		}
		if (c->extra[0]) { wch(w, ' '); wstr(w, c->extra); }
		wstr(w, " edtl=");
		wu64(w, p->edtl);
	}
	if (h & H_RESPONSE && p->opcode != 0x21) { wstr(w, " response="); wu64(w, p->response); }
	if (p->opcode == 0x21 && p->response) { wstr(w, " response="); wu64(w, p->response); }
	if (h & H_STATUS) {
		char sn[32];
		status_name(p->status, sn, sizeof sn);
		wstr(w, " status=");
		wstr(w, sn);
	}
	if (h & H_SENSE) {
		char st[160];
		sense_text(p->sense_key, p->asc, p->ascq, st, sizeof st);
		snprintf(t, sizeof t, " sense=%x/%02x/%02x (", p->sense_key, p->asc, p->ascq);
		wstr(w, t);
		wstr(w, st);
		wch(w, ')');
	}
	if (h & H_RESIDUAL) {
		wstr(w, p->residual_kind == RES_OVER ? " overflow=" : " underflow=");
		wu64(w, p->residual);
	}
	if (p->hdigest) { wstr(w, " hd="); wstr(w, p->hdigest == DIG_OK ? "ok" : p->hdigest == DIG_BAD ? "BAD" : "?"); }
	if (p->ddigest) { wstr(w, " dd="); wstr(w, p->ddigest == DIG_OK ? "ok" : p->ddigest == DIG_BAD ? "BAD" : "?"); }
	if (h & H_RESPTIME) { wstr(w, " rt="); wus(w, p->resp_time_ns); wstr(w, "us"); }
	if (p->cmd >= 0 && p->opcode != 0x01) { wstr(w, " cmd#"); wi64(w, p->cmd); }
	if (p->notes) {
		char nt[160];
		notes_text(p->notes, nt, sizeof nt);
		wstr(w, " [");
		wstr(w, nt);
		wch(w, ']');
	}
	if (p->kv_len && !o->o.verbose) {
		wstr(w, " ");
		wstr(w, p->kv);
	}
	wch(w, '\n');
	if (o->o.verbose) {
		snprintf(t, sizeof t, "TCP seq %u, conn %s, %s", p->tcp_seq, p->conn,
			 p->dir == DIR_I2T ? "initiator -> target" : "target -> initiator");
		emit_line(w, t);
		bhs_describe(p->bhs, emit_line, w);
		if (p->ahs_kept) {
			snprintf(t, sizeof t, "AHS[48-%u]   %u bytes (type %u)", 48 + p->ahs_len - 1,
				 p->ahs_len, p->ahs_kept > 2 ? p->ahs[2] : 0);
			emit_line(w, t);
		}
		if (h & H_CDB)
			cdb_describe(p->cdb, p->cdb_len, emit_line, w);
		if (p->hdigest) {
			snprintf(t, sizeof t, "HeaderDigest CRC32C: %s", dig_text(p->hdigest) ? dig_text(p->hdigest) : "unchecked");
			emit_line(w, t);
		}
		if (p->ddigest) {
			snprintf(t, sizeof t, "DataDigest CRC32C: %s", dig_text(p->ddigest) ? dig_text(p->ddigest) : "unchecked");
			emit_line(w, t);
		}
		if (p->kv_len) {
			const char *s = p->kv;
			while (*s) {
				const char *e = strchr(s, ';');
				size_t n = e ? (size_t)(e - s) : strlen(s);
				snprintf(t, sizeof t, "Data: %.*s", (int)(n > 200 ? 200 : n), s);
				emit_line(w, t);
				s += n;
				if (*s)
					s++;
			}
		}
	}
	if (o->o.flush_each) {
		wflush(w);
		fflush(w->f);
	}
}

static void on_pdu(void *ctx, const struct pdu_rec *p)
{
	struct out *o = ctx;
	o->op_count[p->dir][p->opcode & 0x3f]++;
	o->op_bytes[p->dir][p->opcode & 0x3f] += p->dsl;
	if (p->opcode == 0x25)
		o->data_in += p->dsl;
	else if (p->opcode == 0x05)
		o->data_out += p->dsl;
	if (o->o.text)
		text_pdu(o, p);
	if (o->o.json) {
		struct row r = {o->std, 1, 0};
		pdu_row(&r, p);
		if (o->o.flush_each) {
			wflush(o->std);
			fflush(stdout);
		}
	}
	if (o->pdus) {
		struct row r = {o->pdus, 0, 0};
		pdu_row(&r, p);
	}
}

/* 1: a READ(6/10/12/16), 2: a WRITE(6/10/12/16), 0: anything else. */
static int rw_kind(uint8_t op)
{
	switch (op) {
	case 0x08: case 0x28: case 0xa8: case 0x88:
		return 1;
	case 0x0a: case 0x2a: case 0xaa: case 0x8a:
		return 2;
	default:
		return 0;
	}
}

static void on_cmd(void *ctx, const struct cmd_rec *c)
{
	struct out *o = ctx;
	o->n_cmds++;
	o->out_sum += c->outstanding;
	if (c->outstanding > o->out_max)
		o->out_max = c->outstanding;
	if (c->has_status)
		o->status_count[c->status]++;
	int kind = rw_kind(c->ci.opcode);
	if (kind)
		size_add(kind == 1 ? &o->rsz : &o->wsz, c->edtl);
	if (c->complete) {
		int64_t rt = c->resp_ts - c->issue_ts;
		v_add(&o->rt_all, rt);
		if (kind)
			v_add(kind == 1 ? &o->rt_read : &o->rt_write, rt);
	} else {
		o->n_open++;
	}
	if (o->cmds) {
		struct row r = {o->cmds, 0, 0};
		cmd_row(&r, c);
	}
}

static void on_conn(void *ctx, const struct conn_rec *c)
{
	struct out *o = ctx;
	o->n_conn++;
	if (o->conns) {
		struct row r = {o->conns, 0, 0};
		conn_row(&r, c);
	}
}

static void on_seg(void *ctx, uint64_t frame, int64_t ts, const struct tcp_seg *g)
{
	struct out *o = ctx;
	if (o->seg_dir)
		seg_out_row(o->seg_dir, frame, ts, g);
	if (o->seg_file)
		seg_out_row(o->seg_file, frame, ts, g);
}

void out_sinks(struct out *w, struct decode_sinks *s)
{
	s->ctx = w;
	s->pdu = on_pdu;
	s->cmd = on_cmd;
	s->conn = on_conn;
	s->seg = w->seg_dir || w->seg_file ? on_seg : NULL;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void pct_line(FILE *f, const char *what, struct i64v *v)
{
	if (!v->n)
		return;
	qsort(v->v, v->n, sizeof *v->v, cmp64);
	/* nearest-rank percentiles */
	size_t i50 = (v->n * 50 + 99) / 100, i90 = (v->n * 90 + 99) / 100,
	       i99 = (v->n * 99 + 99) / 100;
	fprintf(f, "  %-8s n=%-8zu p50 %10.1f  p90 %10.1f  p99 %10.1f  max %10.1f  (us)\n", what,
		v->n, v->v[i50 ? i50 - 1 : 0] / 1e3, v->v[i90 ? i90 - 1 : 0] / 1e3,
		v->v[i99 ? i99 - 1 : 0] / 1e3, v->v[v->n - 1] / 1e3);
}

static void human(uint64_t b, char *buf, size_t len)
{
	if (b >= (1u << 20) && b % (1u << 20) == 0)
		snprintf(buf, len, "%llu MiB", (unsigned long long)(b >> 20));
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(buf, len, "%llu KiB", (unsigned long long)(b >> 10));
	else
		snprintf(buf, len, "%llu B", (unsigned long long)b);
}

static void sizes_block(FILE *f, const char *what, struct sizes *s)
{
	uint64_t total = s->other;
	for (int i = 0; i < s->n; i++)
		total += s->count[i];
	if (!total)
		return;
	/* sort by count, descending */
	for (int i = 0; i < s->n; i++)
		for (int j = i + 1; j < s->n; j++)
			if (s->count[j] > s->count[i]) {
				uint64_t t = s->count[i]; s->count[i] = s->count[j]; s->count[j] = t;
				t = s->size[i]; s->size[i] = s->size[j]; s->size[j] = t;
			}
	char h[32];
	human(s->size[0], h, sizeof h);
	fprintf(f, "  %s: %llu commands; most common size %llu bytes (%s) = %.1f%%\n", what,
		(unsigned long long)total, (unsigned long long)s->size[0], h,
		100.0 * s->count[0] / total);
	for (int i = 0; i < s->n && i < 8; i++) {
		human(s->size[i], h, sizeof h);
		fprintf(f, "    %10llu B %-10s %8llu  %5.1f%%\n", (unsigned long long)s->size[i], h,
			(unsigned long long)s->count[i], 100.0 * s->count[i] / total);
	}
	if (s->n > 8 || s->other)
		fprintf(f, "    (more sizes not shown)\n");
}

static void summary(struct out *o, const struct decode_stats *st)
{
	/* stdout carrying JSON lines or the segments table stays only that: the text to stderr */
	int to_stderr = o->o.json || (o->o.segments_path && !strcmp(o->o.segments_path, "-"));
	FILE *f = to_stderr ? stderr : stdout;
	double dur = st->last_ts > st->first_ts ? (st->last_ts - st->first_ts) / 1e9 : 0;
	fprintf(f, "== istrace decode summary%s%s ==\n", o->o.input_name ? ": " : "",
		o->o.input_name ? o->o.input_name : "");
	fprintf(f, "capture: %llu packets, %llu bytes captured, %.6f s\n",
		(unsigned long long)st->packets, (unsigned long long)st->bytes_captured, dur);
	fprintf(f, "iSCSI: %llu connections, %llu PDUs, %llu SCSI commands (%llu still open at end)\n",
		(unsigned long long)o->n_conn, (unsigned long long)st->pdus,
		(unsigned long long)o->n_cmds, (unsigned long long)o->n_open);
	fprintf(f, "PDUs by opcode:\n");
	for (int dir = 0; dir < 2; dir++)
		for (int op = 0; op < 64; op++)
			if (o->op_count[dir][op])
				fprintf(f, "  %s %-34s %10llu   data %14llu B\n", dir ? "t2i" : "i2t",
					iscsi_opcode_name((uint8_t)op),
					(unsigned long long)o->op_count[dir][op],
					(unsigned long long)o->op_bytes[dir][op]);
	fprintf(f, "data: Data-In %llu B, Data-Out %llu B", (unsigned long long)o->data_in,
		(unsigned long long)o->data_out);
	if (dur > 0)
		fprintf(f, "; throughput over the capture: read %.2f MB/s, write %.2f MB/s",
			o->data_in / dur / 1e6, o->data_out / dur / 1e6);
	fprintf(f, "\n");
	fprintf(f, "PDU block size (bytes per SCSI READ/WRITE command, from the EDTL):\n");
	if (!o->rsz.n && !o->wsz.n)
		fprintf(f, "  no READ/WRITE commands\n");
	sizes_block(f, "READ", &o->rsz);
	sizes_block(f, "WRITE", &o->wsz);
	fprintf(f, "response time (command PDU to response PDU):\n");
	pct_line(f, "all", &o->rt_all);
	pct_line(f, "READ", &o->rt_read);
	pct_line(f, "WRITE", &o->rt_write);
	if (o->n_cmds)
		fprintf(f, "outstanding commands per connection at issue: max %llu, mean %.2f\n",
			(unsigned long long)o->out_max, (double)o->out_sum / o->n_cmds);
	int any = 0;
	for (int s = 0; s < 256; s++)
		if (o->status_count[s] && s != 0) {
			if (!any)
				fprintf(f, "non-GOOD status:");
			any = 1;
			char sn[32];
			status_name((uint8_t)s, sn, sizeof sn);
			fprintf(f, " %s x%llu", sn, (unsigned long long)o->status_count[s]);
		}
	if (any)
		fprintf(f, "\n");
	fprintf(f, "not decoded / worked around: %llu gaps (%llu B), %llu truncated packets, "
		   "%llu resyncs (%llu B skipped), %llu PDUs dropped, %llu incomplete, "
		   "%llu retransmits, %llu reordered, %llu bad header digests, %llu bad data "
		   "digests, %llu PDUs without their command, %llu IP fragments\n",
		(unsigned long long)st->gaps, (unsigned long long)st->gap_bytes,
		(unsigned long long)st->truncated_packets, (unsigned long long)st->resyncs,
		(unsigned long long)st->resync_skipped_bytes, (unsigned long long)st->dropped_pdus,
		(unsigned long long)st->incomplete_pdus, (unsigned long long)st->retransmits,
		(unsigned long long)st->reordered, (unsigned long long)st->hdigest_bad,
		(unsigned long long)st->ddigest_bad, (unsigned long long)st->nocmd_pdus,
		(unsigned long long)st->ip_fragments);
}

static int wclose(struct wbuf *w)
{
	if (!w)
		return 0;
	wflush(w);
	int err = w->err;
	if (w->f != stdout) {
		if (fclose(w->f) != 0)
			err = 1;
	} else if (fflush(w->f) != 0) {
		err = 1;
	}
	free(w);
	return err;
}

int out_finish(struct out *o, const struct decode_stats *st)
{
	wflush(o->std);
	if (o->o.summary && st)
		summary(o, st);
	int err = wclose(o->std) | wclose(o->pdus) | wclose(o->cmds) | wclose(o->conns);
	err |= seg_out_close(o->seg_dir) | seg_out_close(o->seg_file);
	free(o->rt_all.v);
	free(o->rt_read.v);
	free(o->rt_write.v);
	free(o);
	return err ? -1 : 0;
}

/* Sinks for the fuzz targets: read every field of every record the decoder hands out, so a
 * dangling pointer, an unterminated string or an uninitialised length shows up under ASan. */
#ifndef ISTRACE_FUZZ_SINKS_H
#define ISTRACE_FUZZ_SINKS_H

#include <string.h>

#include "../decode.h"
#include "../segments_out.h"

static volatile uint64_t fuzz_sink_acc;

static inline uint64_t fuzz_str(const char *s)
{
	return s ? (uint64_t)strlen(s) : 0;
}

static void fuzz_pdu(void *ctx, const struct pdu_rec *r)
{
	(void)ctx;
	uint64_t a = r->pdu + (uint64_t)r->ts_ns + r->tcp_seq + r->opcode + r->dsl + r->itt;
	a += fuzz_str(r->conn) + fuzz_str(r->ci.name) + r->ci.lba + r->ci.bytes;
	a += fuzz_str(r->ci.extra) + r->status + r->sense_key + r->residual + r->hdigest;
	if (r->kv)
		a += strnlen(r->kv, r->kv_len + 1);
	for (uint32_t i = 0; i < r->cdb_len && i < sizeof r->cdb; i++)
		a += r->cdb[i];
	for (uint32_t i = 0; i < r->ahs_kept && i < sizeof r->ahs; i++)
		a += r->ahs[i];
	fuzz_sink_acc += a;
}

static void fuzz_cmd(void *ctx, const struct cmd_rec *r)
{
	(void)ctx;
	fuzz_sink_acc += r->cmd + fuzz_str(r->conn) + fuzz_str(r->ci.name) + fuzz_str(r->direction) +
			 r->bytes_in + r->bytes_out + (uint64_t)r->resp_ts + r->outstanding;
}

static void fuzz_conn(void *ctx, const struct conn_rec *r)
{
	(void)ctx;
	fuzz_sink_acc += fuzz_str(r->conn) + fuzz_str(r->initiator_name) + fuzz_str(r->target_name) +
			 fuzz_str(r->session_type) + fuzz_str(r->header_digest) +
			 fuzz_str(r->data_digest) + fuzz_str(r->immediate_data) +
			 fuzz_str(r->initial_r2t) + fuzz_str(r->notes) + r->pdus + r->block_size;
}

static void fuzz_seg(void *ctx, uint64_t frame, int64_t ts, const struct tcp_seg *g)
{
	(void)ctx;
	struct seg_opts o;
	seg_options(g, &o);
	uint64_t a = frame + (uint64_t)ts + g->src[15] + g->dst[15] + g->seq + g->win;
	a += seg_payload_len(g) + (uint64_t)o.tsval + (uint64_t)o.wscale + (uint64_t)o.sack;
	for (uint32_t i = 0; i < g->tcp_avail && i < g->hlen; i++)
		a += g->tcp[i];
	fuzz_sink_acc += a;
}

static const struct decode_sinks fuzz_sinks = { NULL, fuzz_pdu, fuzz_cmd, fuzz_conn, fuzz_seg };

#endif

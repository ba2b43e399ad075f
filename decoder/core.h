/* Internal state shared by the decoder core's files (not part of the library API). */
#ifndef ISTRACE_CORE_H
#define ISTRACE_CORE_H
#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "packet.h"

#define BHS_LEN 48
#define HDR_MAX (BHS_LEN + 255 * 4 + 4)   /* BHS + largest AHS + header digest */
#define KV_KEEP (64 * 1024)               /* login/text data kept per PDU */
#define SENSE_KEEP 260                    /* SCSI Response data kept (sense length + sense) */
#define HUNT_MAX (1024 * 1024)            /* bytes buffered while looking for a BHS */
#define OOO_MAX_BYTES (8u * 1024 * 1024)  /* out-of-order bytes held per direction */
#define OOO_MAX_TOTAL (256ull * 1024 * 1024) /* ... and by all directions together */
#define MAX_LUN_BS 16

enum parse_state { P_HUNT, P_HDR, P_DATA };

struct ooo_seg {
	struct ooo_seg *next;
	uint32_t seq, len, caplen;
	int64_t ts;
	uint8_t data[];
};

/* A run of buffered stream bytes that came from one captured segment. */
struct piece {
	uint32_t off;
	uint8_t seg_start;
	int64_t ts;
};
#define MAX_PIECES 32

struct stream {
	/* TCP reassembly */
	uint8_t have_seq, fin, have_isn;
	uint32_t next_seq, isn;
	uint8_t have_acked;        /* the peer has acknowledged bytes of this stream */
	uint32_t acked;            /* highest ACK the peer sent for this stream */
	struct ooo_seg *ooo;
	size_t ooo_bytes;
	/* PDU framing */
	uint8_t state;
	uint8_t started;           /* parser has seen its first byte */
	uint32_t pos_seq;          /* TCP seq of the next byte the parser sees */
	uint8_t *hdr;              /* HDR_MAX bytes, allocated the first time a header is split */
	uint32_t hdr_have, hdr_need;
	uint32_t pdu_seq;          /* seq of the current PDU's first byte */
	int64_t cur;               /* ring index of the PDU being assembled, -1 none */
	uint64_t data_left;        /* bytes left of data + padding + data digest */
	uint32_t data_body;        /* dsl + padding (what the data digest covers) */
	uint32_t data_pos;         /* bytes of the data area seen so far */
	uint8_t dd;                /* this PDU carries a data digest */
	uint32_t dd_crc;
	uint8_t dd_bytes[4];
	uint8_t damaged;           /* data bytes missing: digest and contents unchecked */
	uint8_t *dbuf;             /* kept data bytes */
	uint32_t dcap, dwant, dhave;
	uint32_t notes_next;       /* notes for the next PDU header */
	uint32_t resync_next;      /* next PDU header was found by hunting */
	/* hunting */
	uint8_t *hbuf;
	uint32_t hlen, hcap;
	uint32_t hbuf_seq;
	struct piece hp[MAX_PIECES]; /* where each captured chunk in hbuf began, and its time */
	uint32_t n_hp;
	uint8_t *replay;           /* bytes to re-parse after a lock */
	uint32_t replay_len, replay_cap;
	struct piece rp[MAX_PIECES];
	uint32_t n_rp;
	/* login/text key=value text carried across PDUs with the C bit */
	char *kvc;
	size_t kvc_len, kvc_cap;
	uint8_t kvc_trunc;
};

struct lun_bs {
	uint64_t lun;
	uint32_t bs;
};

struct conn {
	uint32_t id;
	uint8_t family;
	uint8_t ip[2][16];         /* [0] initiator, [1] target */
	uint16_t port[2];
	char name[136];
	struct stream s[2];
	/* negotiation */
	uint8_t hd_on, dd_on;      /* digests in use for full-feature PDUs */
	uint8_t hd_known, dd_known; /* from the login, or proved by the stream itself */
	uint8_t login_done;
	char *initiator_name, *target_name, *session_type;
	char header_digest[32], data_digest[32], immediate_data[8], initial_r2t[8];
	int64_t mrdsl[2];          /* declared MaxRecvDataSegmentLength: [0] by initiator, [1] target */
	int64_t max_burst, first_burst, max_out_r2t;
	uint8_t isid[6];
	uint8_t has_login;
	uint16_t tsih, cid;
	struct lun_bs lbs[MAX_LUN_BS];
	uint32_t n_lbs;
	uint32_t last_bs;
	uint32_t open_cmds;
	uint64_t pdus, bytes;
	uint32_t notes;            /* union of PDU notes seen on it */
};

struct decoder;

/* session.c: called by the PDU framer. */
int64_t pdu_begin(struct decoder *d, struct conn *c, int dir, const uint8_t *hdr,
		  uint32_t hdr_len, uint8_t hdigest, uint32_t seq, int64_t ts, uint32_t notes,
		  uint32_t *want);
void pdu_finish(struct decoder *d, struct conn *c, int dir, int64_t idx, const uint8_t *data,
		uint32_t have, uint8_t ddigest, uint32_t notes);
void pdu_add_notes(struct decoder *d, int64_t idx, uint32_t notes);
int decoder_itt_open(struct decoder *d, const struct conn *c, uint32_t itt);
struct decode_stats *decoder_stats(struct decoder *d);
uint64_t *decoder_ooo_total(struct decoder *d); /* out-of-order bytes held, all streams */

/* session.c: the packet loop pieces, for readers other than libpcap (mapped.c). */
struct decoder *decoder_begin(const struct decode_opts *o, const struct decode_sinks *s,
			      struct decode_stats *st, int dlt);
void decoder_packet(struct decoder *d, int64_t ts, uint32_t caplen, uint32_t wirelen,
		    const uint8_t *pkt);
void decoder_end(struct decoder *d);
int64_t decoder_time(int64_t sec, int64_t ns);
/* mapped.c: a classic pcap file image in memory; -2 when it is not one. drop: m is a file
 * mapping whose pages may be given back to the kernel once passed. */
int decode_classic_image(const uint8_t *m, size_t size, int drop, const struct decode_opts *o,
			 const struct decode_sinks *s, struct decode_stats *st);

/* pdu_stream.c */
void stream_feed(struct decoder *d, struct conn *c, int dir, const uint8_t *p, uint32_t n,
		 int64_t ts, int seg_start);
void stream_gap(struct decoder *d, struct conn *c, int dir, uint32_t n, int truncated);
void stream_end(struct decoder *d, struct conn *c, int dir);
void stream_free(struct stream *s);

/* reasm.c */
void reasm_segment(struct decoder *d, struct conn *c, int dir, const struct tcp_seg *seg,
		   int64_t ts);
void reasm_end(struct decoder *d, struct conn *c, int dir);

/* iscsi.c: BHS knowledge */
const char *iscsi_opcode_name(uint8_t op);
int iscsi_opcode_valid(uint8_t op, int dir);
int bhs_plausible(const uint8_t *b, int dir);
/* Fill the record's BHS fields through the opcode's field table. */
void bhs_fill(struct pdu_rec *r, const uint8_t *b);
/* Verbose: one line per BHS field with its byte offsets. */
void bhs_describe(const uint8_t *b, void (*emit)(void *ctx, const char *line), void *ctx);
uint64_t lun_value(const uint8_t *l, int *single);
size_t utf8_seq_len(const unsigned char *s, size_t n); /* session.c */

static inline uint32_t rd32be(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t rd24be(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}
static inline uint16_t rd16be(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline int seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline int seq_le(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }

#endif

/* istrace decoder core: pcap/pcapng -> iSCSI PDUs, SCSI commands, connections.
 *
 * The core is a library: it reads packets, reassembles TCP per direction, parses iSCSI PDUs
 * and hands finished records to the caller's sinks (callbacks). Output formats live in
 * output.c; the command line in main.c. Records follow docs/schema.md.
 */
#ifndef ISTRACE_DECODE_H
#define ISTRACE_DECODE_H

#include <stddef.h>
#include <stdint.h>

/* libpcap's handle, declared here so this header needs no feature macros (pcap.h does). */
typedef struct pcap pcap_t;
struct tcp_seg; /* packet.h */

#define DECODE_MAX_PORTS 16

struct decode_opts {
	uint16_t ports[DECODE_MAX_PORTS]; /* iSCSI target ports; default {3260} */
	int n_ports;
	uint32_t block_size; /* default block size until READ CAPACITY says otherwise */
	int segments_only;   /* only the segments sink: no reassembly, no PDUs */
};

/* Which optional PDU fields are present (schema columns that may be empty). */
enum {
	H_LUN = 1u << 0, H_TTT = 1u << 1, H_CMDSN = 1u << 2, H_EXPSTATSN = 1u << 3,
	H_STATSN = 1u << 4, H_EXPCMDSN = 1u << 5, H_MAXCMDSN = 1u << 6, H_DATASN = 1u << 7,
	H_R2TSN = 1u << 8, H_BUFOFF = 1u << 9, H_DESLEN = 1u << 10, H_EDTL = 1u << 11,
	H_STATUS = 1u << 12, H_RESPONSE = 1u << 13, H_SENSE = 1u << 14, H_RESIDUAL = 1u << 15,
	H_CMD = 1u << 16, H_RESPTIME = 1u << 17, H_CDB = 1u << 18,
};

/* PDU notes: what the decoder had to work around (schema column `note`). */
enum {
	N_RESYNC = 1u << 0,     /* boundary found by hunting for a plausible BHS */
	N_TRUNCATED = 1u << 1,  /* snaplen cut bytes of this PDU; data not checked */
	N_GAP = 1u << 2,        /* capture hole inside this PDU's data */
	N_RETRANSMIT = 1u << 3, /* TCP retransmission seen while this PDU was assembled */
	N_OVERLAP = 1u << 4,    /* partially overlapping segment (first copy kept) */
	N_REORDER = 1u << 5,    /* out-of-order segment reassembled */
	N_INCOMPLETE = 1u << 6, /* capture ended inside this PDU */
	N_NOCMD = 1u << 7,      /* task tag does not match a command seen in the capture */
	N_KVTRUNC = 1u << 8,    /* key=value data cut: only whole pairs shown and applied */
};

enum { DIR_I2T = 0, DIR_T2I = 1 };
enum { DIG_NONE = 0, DIG_OK = 1, DIG_BAD = 2, DIG_UNCHECKED = 3 };
enum { RES_NONE = 0, RES_UNDER = 1, RES_OVER = 2 };

/* A decoded CDB (scsi.c). */
struct cdb_info {
	uint8_t opcode;
	uint8_t has_lba, has_blocks, has_bytes;
	const char *name;   /* static string; "UNKNOWN(0x..)" kept in unk[] */
	uint64_t lba;
	uint64_t blocks;    /* transfer length / number of blocks from the CDB */
	uint64_t bytes;     /* blocks * block size, or allocation/parameter list length */
	char unk[24];
	char extra[64];     /* e.g. "evpd=1 page=0x80" */
};

struct pdu_rec {
	uint64_t pdu;
	int64_t ts_ns;
	uint32_t conn_id;
	const char *conn;
	uint8_t dir;
	uint32_t tcp_seq;
	uint8_t opcode, immediate, final, flags;
	uint32_t ahs_len, dsl;
	uint8_t lun_raw[8];
	uint32_t itt, ttt;
	uint32_t cmdsn, expstatsn, statsn, expcmdsn, maxcmdsn, datasn, r2tsn;
	uint32_t buffer_offset, desired_len, edtl;
	uint32_t has; /* H_* */
	uint8_t cdb[64];
	uint32_t cdb_len;
	struct cdb_info ci;
	uint8_t status, response;
	uint8_t sense_key, asc, ascq;
	uint8_t residual_kind;
	uint32_t residual;
	uint8_t hdigest, ddigest;
	int64_t cmd;
	int64_t resp_time_ns;
	char *kv; /* NUL-terminated "k=v;k=v", owned by the decoder */
	size_t kv_len, kv_cap;
	uint32_t notes;
	uint8_t bhs[48];
	uint8_t ahs[64]; /* first AHS bytes, for -v */
	uint32_t ahs_kept;
	uint8_t complete;
};

struct cmd_rec {
	uint64_t cmd;
	uint32_t conn_id;
	const char *conn;
	uint32_t itt;
	uint8_t lun_raw[8];
	struct cdb_info ci;
	uint32_t edtl;
	const char *direction;
	int64_t issue_ts, first_data_ts, last_data_ts, resp_ts;
	uint64_t bytes_in, bytes_out;
	uint32_t data_pdus, r2ts;
	uint8_t has_status, status, has_sense, sense_key, asc, ascq;
	uint8_t residual_kind;
	uint32_t residual;
	uint32_t outstanding;
	uint8_t complete;
};

struct conn_rec {
	uint32_t conn_id;
	const char *conn;
	const char *initiator_name, *target_name, *session_type;
	uint8_t isid[6];
	uint8_t has_login;
	uint16_t tsih, cid;
	const char *header_digest, *data_digest;
	int64_t mrdsl_i2t, mrdsl_t2i, max_burst, first_burst, max_out_r2t; /* -1 = unknown */
	const char *immediate_data, *initial_r2t;
	uint32_t block_size;
	uint64_t pdus, bytes;
	const char *notes;
};

struct decode_stats {
	uint64_t packets, bytes_captured, tcp_packets, iscsi_packets, payload_bytes;
	uint64_t non_ip, non_tcp, ip_fragments, short_packets, truncated_packets;
	uint64_t retransmits, overlaps, reordered, gaps, gap_bytes, truncated_bytes;
	uint64_t resyncs, resync_skipped_bytes, dropped_pdus, incomplete_pdus;
	uint64_t hdigest_bad, ddigest_bad, nocmd_pdus, ooo_evicted;
	uint64_t pdus, commands, connections;
	int64_t first_ts, last_ts;
	int read_error; /* the capture file ended with an error (e.g. truncated) */
	char read_error_text[256];
};

struct decode_sinks {
	void *ctx;
	void (*pdu)(void *ctx, const struct pdu_rec *r);
	void (*cmd)(void *ctx, const struct cmd_rec *r);
	void (*conn)(void *ctx, const struct conn_rec *r);
	/* Every TCP segment of the capture, all ports, in file order (NULL: not wanted).
	 * frame: 0-based index among all packets of the file; seg: packet.h. */
	void (*seg)(void *ctx, uint64_t frame, int64_t ts_ns, const struct tcp_seg *seg);
};

void decode_opts_init(struct decode_opts *o);

/* Decode every packet of an open capture. Returns 0, or -1 on a read error before any packet
 * (stats->read_error_text says why). Sinks are called in pdu/command order. */
int istrace_decode_pcap(pcap_t *p, const struct decode_opts *o, const struct decode_sinks *s,
			struct decode_stats *stats);

/* Open a capture: path, "-" for stdin; gzip'd input is detected by its magic.
 * On failure returns NULL and writes a one-line reason into err. */
pcap_t *istrace_open_capture(const char *path, char *err, size_t errlen);

/* Plain classic pcap files only, read through a memory mapping (the fast path).
 * Returns 0 done, -1 error (stats->read_error_text), -2 not such a file: use libpcap. */
int istrace_decode_mapped(const char *path, const struct decode_opts *o,
			  const struct decode_sinks *s, struct decode_stats *stats);

/* Convenience for fuzzers and tests: a whole capture file (plain or gzip'd) in memory. */
int istrace_decode_buffer(const uint8_t *buf, size_t len, const struct decode_opts *o,
			  const struct decode_sinks *s, struct decode_stats *stats);

/* Feed raw bytes as both directions of one synthetic TCP connection (fuzzing the iSCSI layer
 * without packets): i2t gets buf[0..split), t2i gets buf[split..len), in chunks of `chunk`. */
int istrace_decode_streams(const uint8_t *buf, size_t len, size_t split, size_t chunk,
			   const struct decode_opts *o, const struct decode_sinks *s,
			   struct decode_stats *stats);

#endif

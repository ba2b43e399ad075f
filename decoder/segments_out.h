/* The TCP segments table (segments.csv, docs/schema.md): one row per TCP segment of a
 * capture, every port, written by the decoder's `seg` sink. */
#ifndef ISTRACE_SEGMENTS_OUT_H
#define ISTRACE_SEGMENTS_OUT_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "packet.h"

struct seg_out;

/* path "-" is stdout; a path ending in ".bin" gets segments.bin's records (segments_bin.c),
 * any other the CSV text. Returns NULL with a message in err when the file cannot be
 * created. */
struct seg_out *seg_out_open(const char *path, char *err, size_t errlen);
void seg_out_row(struct seg_out *s, uint64_t frame, int64_t ts_ns, const struct tcp_seg *g);
/* Flush and close (NULL is fine). Returns 0, or -1 on a write error. */
int seg_out_close(struct seg_out *s);

/* segments.bin (docs/schema.md §4c), behind seg_out for a FILE.bin: records to f (which the
 * caller opens and closes); finish writes the address list and the trailer, frees s and
 * returns 0, or -1 on a write error. */
struct seg_bin;
struct seg_bin *seg_bin_new(FILE *f);
void seg_bin_row(struct seg_bin *s, uint64_t frame, int64_t ts_ns, const struct tcp_seg *g);
int seg_bin_finish(struct seg_bin *s);

/* The option fields of one row (-1 where absent; sack 1 when a SACK option is present). */
struct seg_opts {
	int32_t wscale, mss;
	int64_t tsval, tsecr;
	int32_t sack;
};
void seg_options(const struct tcp_seg *g, struct seg_opts *o);
/* An address as both encodings of the table write it: "10.0.0.1", "[fe80::1]" (as the
 * decoder's connection names do); returns its length (at most len - 1). */
size_t seg_addr_text(uint8_t fam, const uint8_t *ip, char *buf, size_t len);
/* Payload length on the wire: IP length minus the TCP header, 0 when the header claims more. */
uint32_t seg_payload_len(const struct tcp_seg *g);

#endif

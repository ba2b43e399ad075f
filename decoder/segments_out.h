/* The TCP segments table (segments.csv, docs/schema.md): one row per TCP segment of a
 * capture, every port, written by the decoder's `seg` sink. */
#ifndef ISTRACE_SEGMENTS_OUT_H
#define ISTRACE_SEGMENTS_OUT_H
#include <stddef.h>
#include <stdint.h>

#include "packet.h"

struct seg_out;

/* path "-" is stdout. Returns NULL with a message in err when the file cannot be created. */
struct seg_out *seg_out_open(const char *path, char *err, size_t errlen);
void seg_out_row(struct seg_out *s, uint64_t frame, int64_t ts_ns, const struct tcp_seg *g);
/* Flush and close (NULL is fine). Returns 0, or -1 on a write error. */
int seg_out_close(struct seg_out *s);

/* The option fields of one row (-1 where absent; sack 1 when a SACK option is present). */
struct seg_opts {
	int32_t wscale, mss;
	int64_t tsval, tsecr;
	int32_t sack;
};
void seg_options(const struct tcp_seg *g, struct seg_opts *o);
/* Payload length on the wire: IP length minus the TCP header, 0 when the header claims more. */
uint32_t seg_payload_len(const struct tcp_seg *g);

#endif

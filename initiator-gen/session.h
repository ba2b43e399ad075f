/* An iSCSI session on one connection: open (connect + login), synchronous SCSI commands,
 * discovery, unsolicited-PDU handling, logout. */
#ifndef ISTRACE_SESSION_H
#define ISTRACE_SESSION_H
#include <stddef.h>
#include <stdint.h>

#include "conn.h"
#include "login.h"

struct session {
	struct conn c;
	struct negotiated neg;
	const struct gen_opts *o;
	unsigned idx;
	unsigned char isid[6];
	uint64_t lun_enc;
	uint32_t block_size;
	uint64_t lun_blocks;
	uint32_t next_itt;
	int logged_in;
	uint64_t nop_pings; /* NOP-In pings answered */
};

int session_open(struct session *s, const struct gen_opts *o, unsigned idx, int discovery,
		 int verbose);
/* READ CAPACITY(16) (retrying past UNIT ATTENTION); fills block_size and lun_blocks. */
int session_read_capacity(struct session *s);
/* SendTargets=All; prints "TargetName ... TargetAddress ..." lines (or JSON) to stdout unless
 * print is 0. The first target's name goes to first (when not NULL). */
int session_discover(struct session *s, int json, int print, char *first, size_t firstlen);
/* Logout (best effort, bounded by the timeout) and close. */
void session_close(struct session *s);

/* NOP-In (answer pings), Async Message, Reject. Returns 0 when handled and harmless,
 * -1 with s->c.err set when fatal. The data segment has NOT been read yet. */
int session_unsolicited(struct session *s, const struct bhs *h);

/* "ILLEGAL REQUEST / LOGICAL BLOCK ADDRESS OUT OF RANGE (0x05/0x21/0x00)" from sense bytes. */
void sense_describe(const unsigned char *sense, size_t len, char *out, size_t outlen);
/* Sense key of a SCSI Response data segment (SenseLength + sense); -1 when none. */
int response_sense_key(const unsigned char *seg, size_t len);
/* Decode a SCSI Response data segment (SenseLength + sense) into a description. */
void response_sense_describe(const unsigned char *seg, size_t len, char *out, size_t outlen);

#endif

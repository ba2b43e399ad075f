/* SCSI: CDB field tables, status names, sense data (fixed and descriptor formats). */
#ifndef ISTRACE_SCSI_H
#define ISTRACE_SCSI_H
#include <stddef.h>
#include <stdint.h>

#include "decode.h"
#include "scsi_names.h"

/* Decode a CDB of len bytes; block_size turns block counts into bytes. */
void cdb_decode(const uint8_t *cdb, size_t len, uint32_t block_size, struct cdb_info *out);

/* Is this CDB opcode one the table knows (used to judge a candidate header)? */
int scsi_cdb_known(uint8_t opcode);


struct sense_info {
	int valid;
	uint8_t key, asc, ascq;
	uint8_t response_code; /* 0x70..0x73 */
};
/* Parse sense data (after the 2-byte SenseLength of a SCSI Response data segment). */
void sense_decode(const uint8_t *s, size_t len, struct sense_info *out);
/* "ILLEGAL REQUEST: INVALID FIELD IN CDB" into buf. */
void sense_text(uint8_t key, uint8_t asc, uint8_t ascq, char *buf, size_t len);

/* Verbose listing of a CDB's fields: calls emit(ctx, line) per field. */
void cdb_describe(const uint8_t *cdb, size_t len, void (*emit)(void *ctx, const char *line),
		  void *ctx);

#endif

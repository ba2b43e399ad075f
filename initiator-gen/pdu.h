/* iSCSI Basic Header Segment (RFC 7143 §11.2): byte-exact encode/decode helpers. */
#ifndef ISTRACE_PDU_H
#define ISTRACE_PDU_H
#include <stddef.h>
#include <stdint.h>

#define BHS_LEN 48
#define RSVD_TAG 0xffffffffu

enum iscsi_op {
	OP_NOP_OUT = 0x00,
	OP_SCSI_CMD = 0x01,
	OP_TMF_REQ = 0x02,
	OP_LOGIN_REQ = 0x03,
	OP_TEXT_REQ = 0x04,
	OP_DATA_OUT = 0x05,
	OP_LOGOUT_REQ = 0x06,
	OP_NOP_IN = 0x20,
	OP_SCSI_RSP = 0x21,
	OP_TMF_RSP = 0x22,
	OP_LOGIN_RSP = 0x23,
	OP_TEXT_RSP = 0x24,
	OP_DATA_IN = 0x25,
	OP_LOGOUT_RSP = 0x26,
	OP_R2T = 0x31,
	OP_ASYNC = 0x32,
	OP_REJECT = 0x3f,
};

#define BHS_I 0x40 /* byte 0: immediate delivery */
#define BHS_F 0x80 /* byte 1: final */
/* SCSI Command byte 1 */
#define CMD_R 0x40
#define CMD_W 0x20
#define CMD_ATTR_SIMPLE 0x01
/* Data-In byte 1 */
#define DIN_A 0x40
#define DIN_O 0x04
#define DIN_U 0x02
#define DIN_S 0x01
/* Login byte 1 */
#define LOGIN_T 0x80
#define LOGIN_C 0x40
/* Text byte 1 */
#define TEXT_C 0x40

static inline uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t get24(const unsigned char *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}
static inline uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) << 32 | get32(p + 4);
}
static inline void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)(v >> 8);
	p[1] = (unsigned char)v;
}
static inline void put24(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 16);
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)v;
}
static inline void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}
static inline void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}
static inline void put32le(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}
static inline uint32_t get32le(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Decoded view of the fields every BHS has, plus the common target->initiator SN fields. */
struct bhs {
	unsigned char raw[BHS_LEN];
	uint8_t opcode;
	int immediate;
	uint8_t flags;   /* byte 1 */
	uint32_t ahs_len; /* bytes */
	uint32_t dsl;     /* DataSegmentLength, bytes */
	uint64_t lun;     /* bytes 8..15 raw */
	uint32_t itt, ttt;
	uint32_t statsn, expcmdsn, maxcmdsn; /* bytes 24, 28, 32 (target PDUs) */
	uint32_t datasn;   /* byte 36 */
	uint32_t offset;   /* byte 40 */
	uint32_t word44;   /* residual count (Data-In, SCSI Response) or R2T desired length */
};

/* Fill the decoded fields from raw[]. Never fails: every 48-byte header decodes. */
void bhs_decode(struct bhs *h);
/* Start a request header: zeroes it, sets opcode, immediate bit, flags, dsl, itt. */
void bhs_init(unsigned char raw[BHS_LEN], uint8_t op, int immediate, uint8_t flags, uint32_t dsl,
	      uint32_t itt);
/* Single-level LUN (SAM): peripheral addressing below 256, flat space above. */
uint64_t lun_encode(uint64_t lun);
/* Bytes of padding after a data segment of len bytes. */
static inline uint32_t pad4(uint32_t len) { return (4 - (len & 3)) & 3; }
/* RFC 1982 serial number comparison: a < b. */
static inline int sn_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline int sn_le(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }

#endif

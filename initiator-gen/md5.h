/* MD5 (RFC 1321), only for CHAP_A=5 (RFC 1994 / RFC 7143 §12.1.3). */
#ifndef ISTRACE_MD5_H
#define ISTRACE_MD5_H
#include <stddef.h>
#include <stdint.h>

struct md5_ctx {
	uint32_t h[4];
	uint64_t len;
	unsigned char buf[64];
	size_t fill;
};

void md5_init(struct md5_ctx *c);
void md5_update(struct md5_ctx *c, const void *data, size_t len);
void md5_final(struct md5_ctx *c, unsigned char out[16]);

#endif

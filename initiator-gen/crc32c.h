/* CRC32C (Castagnoli), the iSCSI header/data digest (RFC 7143 §13.1). */
#ifndef ISTRACE_CRC32C_H
#define ISTRACE_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Call once before any thread uses the CRC (builds tables, picks the CPU path). */
void crc32c_init(int force_soft);

/* Continue a CRC: start with crc32c_update(0, ...); the result is the final digest value. */
uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);
static inline uint32_t crc32c(const void *buf, size_t len) { return crc32c_update(0, buf, len); }

#endif

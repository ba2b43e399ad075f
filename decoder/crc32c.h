/* CRC32C (Castagnoli), as iSCSI header and data digests use it (RFC 7143 §13.1). */
#ifndef ISTRACE_CRC32C_H
#define ISTRACE_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Running CRC: start with crc32c_init(), feed with crc32c_update(), end with crc32c_final(). */
static inline uint32_t crc32c_init(void) { return 0xffffffffu; }
uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len);
static inline uint32_t crc32c_final(uint32_t crc) { return crc ^ 0xffffffffu; }
uint32_t crc32c(const void *buf, size_t len);
/* Tests: force the table path (on=1) or go back to the best available (on=0). */
void crc32c_force_software(int on);

#endif

/* The LUN test pattern (docs/schema.md §5): little-endian 64-bit word w holds w. */
#ifndef ISTRACE_VERIFY_H
#define ISTRACE_VERIFY_H
#include <stddef.h>
#include <stdint.h>

/* Fill len bytes that sit at LUN byte offset off (both multiples of 8). */
void pattern_fill(unsigned char *buf, uint64_t off, size_t len);
/* 0 when buf matches; else -1 and *bad = LUN byte offset of the first differing byte. */
int pattern_check(const unsigned char *buf, uint64_t off, size_t len, uint64_t *bad);
/* Same against a reference file (read with pread in chunks). -2 on a read error. */
int file_check(int fd, const unsigned char *buf, uint64_t off, size_t len, uint64_t *bad);

#endif

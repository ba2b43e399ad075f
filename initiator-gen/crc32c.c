/* CRC32C: SSE4.2 instruction when the CPU has it, else a slice-by-8 table.
 * Digesting megabytes of Data-In per command must not become the bottleneck. */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t table[8][256];
static int table_ready;
static int use_hw;

static void build_table(void)
{
	for (uint32_t n = 0; n < 256; n++) {
		uint32_t c = n;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
		table[0][n] = c;
	}
	for (uint32_t n = 0; n < 256; n++)
		for (int t = 1; t < 8; t++)
			table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xff];
	table_ready = 1;
}

static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t len)
{
	while (len && ((uintptr_t)p & 7)) {
		c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
		len--;
	}
	while (len >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w ^= c; /* little-endian host assumed for the table walk */
		c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
		    table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
		    table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p,
							  size_t len)
{
	uint64_t c64 = c;
	while (len && ((uintptr_t)p & 7)) {
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
		len--;
	}
	while (len >= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
		p += 8;
		len -= 8;
	}
	while (len--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	return (uint32_t)c64;
}
#endif

uint32_t crc32c_update(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	uint32_t c = ~crc;
#if defined(__x86_64__)
	if (use_hw)
		return ~crc_hw(c, p, len);
#endif
	return ~crc_soft(c, p, len);
}

void crc32c_init(int force_soft)
{
	if (!table_ready)
		build_table();
#if defined(__x86_64__)
	use_hw = !force_soft && __builtin_cpu_supports("sse4.2");
#else
	(void)force_soft;
#endif
}

/* BHS encode/decode. */
#include "pdu.h"

#include <string.h>

void bhs_decode(struct bhs *h)
{
	const unsigned char *r = h->raw;
	h->opcode = r[0] & 0x3f;
	h->immediate = (r[0] & BHS_I) != 0;
	h->flags = r[1];
	h->ahs_len = (uint32_t)r[4] * 4;
	h->dsl = get24(r + 5);
	h->lun = get64(r + 8);
	h->itt = get32(r + 16);
	h->ttt = get32(r + 20);
	h->statsn = get32(r + 24);
	h->expcmdsn = get32(r + 28);
	h->maxcmdsn = get32(r + 32);
	h->datasn = get32(r + 36);
	h->offset = get32(r + 40);
	h->word44 = get32(r + 44);
}

void bhs_init(unsigned char raw[BHS_LEN], uint8_t op, int immediate, uint8_t flags, uint32_t dsl,
	      uint32_t itt)
{
	memset(raw, 0, BHS_LEN);
	raw[0] = (unsigned char)((op & 0x3f) | (immediate ? BHS_I : 0));
	raw[1] = flags;
	put24(raw + 5, dsl);
	put32(raw + 16, itt);
}

uint64_t lun_encode(uint64_t lun)
{
	if (lun < 256)
		return lun << 48;
	return ((0x4000 | (lun & 0x3fff)) << 48);
}

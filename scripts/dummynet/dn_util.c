/* Pure helpers of istrace-dummynet; see dummynet.h. */
#include "dummynet.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int dn_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -1;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

int dn_parse_prob(const char *s, double *out)
{
	if (!s || !*s)
		return -1;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0.0 || v > 1.0)
		return -1;
	*out = v;
	return 0;
}

const char *dn_parse_params(const char *delay_us, const char *rate_bps, const char *loss,
			    const char *queue, struct dn_params *p)
{
	uint64_t d, r, q;
	if (dn_parse_u64(delay_us, 0, DN_MAX_DELAY_US, &d))
		return "bad delay: microseconds in 0..200000";
	if (dn_parse_u64(rate_bps, 0, DN_MAX_RATE_BPS, &r))
		return "bad rate: bit/s in 0..100000000000 (0 = unlimited)";
	if (r && r < 8000)
		return "bad rate: at least 8000 bit/s";
	if (dn_parse_prob(loss, &p->loss))
		return "bad loss: a probability in 0..1";
	if (dn_parse_u64(queue, 0, 1u << 22, &q))
		return "bad queue: packets in 0..4194304";
	p->delay_ns = d * 1000u;
	p->rate_bps = r;
	p->queue_pkts = (uint32_t)q;
	p->overhead = 0;
	return NULL;
}

uint64_t dn_tx_ns(uint64_t bytes, uint64_t rate_bps)
{
	if (!rate_bps)
		return 0;
	/* bytes <= 2^32 and rate >= 8000: 128-bit keeps bytes*8e9 exact */
	unsigned __int128 ns = (unsigned __int128)bytes * 8u * 1000000000u;
	return (uint64_t)((ns + rate_bps - 1) / rate_bps);
}

uint32_t dn_pow2_at_least(uint32_t v)
{
	uint32_t p = 1;
	while (p < v && p < (1u << 31))
		p <<= 1;
	return p;
}

uint64_t dn_seed(uint64_t seed, uint64_t stream)
{
	/* splitmix64 of seed and stream: distinct, well-mixed, never zero */
	uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 0x2545f4914f6cdd1dull;
}

double dn_uniform(uint64_t *state)
{
	uint64_t x = *state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return (double)((x * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}

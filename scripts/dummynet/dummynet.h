/* istrace-dummynet: the pure parts (parsing, link timing, random numbers), unit-tested alone. */
#ifndef ISTRACE_DUMMYNET_H
#define ISTRACE_DUMMYNET_H

#include <stdint.h>

#define DN_MAX_DELAY_US 200000u           /* 200 ms one way */
#define DN_MAX_RATE_BPS 100000000000ull   /* 100 Gbit/s */

struct dn_params {
	uint64_t delay_ns;   /* one-way delay */
	uint64_t rate_bps;   /* 0 = unlimited */
	double loss;         /* drop probability, 0..1 */
	uint32_t queue_pkts; /* packets waiting for the link; 0 = only the ring bounds it */
	uint32_t overhead;   /* bytes added to each packet's length for the rate (L2 framing) */
};

/* Parse an unsigned decimal in [lo, hi]; 0 on success, -1 on anything else. */
int dn_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* Parse a probability in [0, 1]; 0 on success, -1 otherwise. */
int dn_parse_prob(const char *s, double *out);
/* Fill `p` from the option strings; NULL on success, else a one-line error. */
const char *dn_parse_params(const char *delay_us, const char *rate_bps, const char *loss,
			    const char *queue, struct dn_params *p);
/* Nanoseconds a packet of `bytes` occupies a link of `rate_bps` (0 when unlimited). */
uint64_t dn_tx_ns(uint64_t bytes, uint64_t rate_bps);
/* Smallest power of two >= v (v <= 2^31). */
uint32_t dn_pow2_at_least(uint32_t v);
/* A non-zero generator state for stream `stream` of seed `seed`. */
uint64_t dn_seed(uint64_t seed, uint64_t stream);
/* Uniform double in [0, 1) (xorshift64*). */
double dn_uniform(uint64_t *state);

#endif

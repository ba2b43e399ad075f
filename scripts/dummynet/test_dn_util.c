/* Unit tests of the dummynet helpers: parsing edges, link timing, loss generator. */
#include "dummynet.h"

#include <stdio.h>
#include <stdlib.h>

static int fails;
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, \
	__LINE__, #cond); fails++; } } while (0)

int main(void)
{
	uint64_t v;
	double d;
	struct dn_params p;
	CHECK(dn_parse_u64("0", 0, 10, &v) == 0 && v == 0);
	CHECK(dn_parse_u64("10", 0, 10, &v) == 0 && v == 10);
	CHECK(dn_parse_u64("11", 0, 10, &v) == -1);
	CHECK(dn_parse_u64("-1", 0, 10, &v) == -1);
	CHECK(dn_parse_u64("", 0, 10, &v) == -1);
	CHECK(dn_parse_u64("5x", 0, 10, &v) == -1);
	CHECK(dn_parse_u64("99999999999999999999999", 0, UINT64_MAX, &v) == -1);
	CHECK(dn_parse_prob("0.05", &d) == 0 && d == 0.05);
	CHECK(dn_parse_prob("1.5", &d) == -1);
	CHECK(dn_parse_prob("nan", &d) == -1);
	CHECK(dn_parse_prob("-0.1", &d) == -1);
	CHECK(dn_parse_params("16000", "1000000000", "0.001", "1000", &p) == NULL);
	CHECK(p.delay_ns == 16000000ull && p.rate_bps == 1000000000ull && p.queue_pkts == 1000);
	CHECK(dn_parse_params("200001", "0", "0", "0", &p) != NULL);
	CHECK(dn_parse_params("0", "100", "0", "0", &p) != NULL);
	CHECK(dn_parse_params("0", "0", "2", "0", &p) != NULL);
	/* 1500 bytes at 1 Gbit/s take 12 us; 1 byte at 3 bit/s-ish rounds up, never 0 */
	CHECK(dn_tx_ns(1500, 1000000000ull) == 12000);
	CHECK(dn_tx_ns(1500, 0) == 0);
	CHECK(dn_tx_ns(1, 8000) == 1000000);
	CHECK(dn_tx_ns(1, 3000000000ull) == 3);
	CHECK(dn_pow2_at_least(1000) == 1024 && dn_pow2_at_least(1024) == 1024);
	CHECK(dn_pow2_at_least(0) == 1 && dn_pow2_at_least(3000000000u) == (1u << 31));
	/* the loss draw: uniform enough that 5% of 200k draws lands within 0.3% */
	uint64_t s = dn_seed(1, 0), s2 = dn_seed(1, 1);
	CHECK(s != s2 && s != 0);
	int hits = 0, n = 200000;
	double lo = 1, hi = 0;
	for (int i = 0; i < n; i++) {
		double u = dn_uniform(&s);
		if (u < lo) lo = u;
		if (u > hi) hi = u;
		hits += u < 0.05;
	}
	CHECK(lo >= 0 && hi < 1 && lo < 0.001 && hi > 0.999);
	CHECK(hits > n * 0.047 && hits < n * 0.053);
	if (fails)
		return 1;
	printf("dn_util: all tests passed\n");
	return 0;
}

/* Throughput counters and a log-linear latency histogram (1.6% resolution), shared by all
 * sessions under one mutex: an uncontended lock per completed command costs ~20 ns. */
#ifndef ISTRACE_STATS_H
#define ISTRACE_STATS_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define HIST_SUB_BITS 6
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (64u * HIST_SUB)

struct hist {
	uint64_t n[HIST_BUCKETS];
	uint64_t count, max;
};

void hist_reset(struct hist *h);
void hist_add(struct hist *h, uint64_t v);
/* Value at quantile q (0..1); 0 when empty. Upper edge of the bucket, capped at max. */
uint64_t hist_quantile(const struct hist *h, double q);
unsigned hist_bucket(uint64_t v);
uint64_t hist_bucket_top(unsigned b);

struct stats {
	pthread_mutex_t mu;
	struct hist total, interval;
	uint64_t bytes, cmds, errors, verify_errors;
	uint64_t int_bytes, int_cmds;
	int outstanding, max_outstanding;
	uint64_t lat_sum_ns;
	double outstanding_ns; /* integral of outstanding over time, for its mean */
	uint64_t t_change;     /* last change of outstanding */
	uint64_t t_start, t_last, t_done; /* t_done: last completion */
};

void stats_init(struct stats *s);
void stats_done(struct stats *s, uint64_t lat_ns, uint64_t bytes);
void stats_restart_clock(struct stats *s);
void stats_issue(struct stats *s);
void stats_error(struct stats *s, int verify);
/* One progress line to stderr covering the time since the previous one. */
void stats_progress(struct stats *s);
/* The main thread while the workers run: a progress line each second (unless quiet), the
 * end of a --time run (sets *stop), back once `workers` have counted themselves into
 * *finished. Shared by the iSCSI and the socket modes so both report alike. */
void stats_watch(struct stats *s, atomic_int *finished, int workers, double time_s, int quiet,
		 atomic_int *stop);
/* Summary, human (stderr) and optionally JSON (stdout, one object). extra_json: more
 * "key": value members (already formatted, may be empty). */
void stats_summary(struct stats *s, int json, const char *mode, int exit_code,
		   const char *error, const char *extra_json);

#endif

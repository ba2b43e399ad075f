/* Progress lines and the final summary. */
#include "stats.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#include <string.h>

#include "gen.h"
#include "util.h"

void hist_reset(struct hist *h) { memset(h, 0, sizeof(*h)); }

unsigned hist_bucket(uint64_t v)
{
	if (v < HIST_SUB)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* e >= HIST_SUB_BITS */
	unsigned sub = (unsigned)(v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1);
	return (e - HIST_SUB_BITS + 1) * HIST_SUB + sub;
}

uint64_t hist_bucket_top(unsigned b)
{
	if (b < HIST_SUB)
		return b;
	unsigned e = b / HIST_SUB + HIST_SUB_BITS - 1, sub = b % HIST_SUB;
	uint64_t base = (1ull << e) | ((uint64_t)sub << (e - HIST_SUB_BITS));
	return base + (1ull << (e - HIST_SUB_BITS)) - 1;
}

void hist_add(struct hist *h, uint64_t v)
{
	unsigned b = hist_bucket(v);
	if (b >= HIST_BUCKETS)
		b = HIST_BUCKETS - 1;
	h->n[b]++;
	h->count++;
	if (v > h->max)
		h->max = v;
}

uint64_t hist_quantile(const struct hist *h, double q)
{
	if (!h->count)
		return 0;
	uint64_t want = (uint64_t)(q * (double)h->count + 0.999999);
	if (want < 1)
		want = 1;
	uint64_t seen = 0;
	for (unsigned b = 0; b < HIST_BUCKETS; b++) {
		seen += h->n[b];
		if (seen >= want) {
			uint64_t top = hist_bucket_top(b);
			return top < h->max ? top : h->max;
		}
	}
	return h->max;
}

void stats_init(struct stats *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->t_start = s->t_last = now_ns();
}

/* Called under the lock whenever outstanding is about to change. */
static void integrate(struct stats *s, uint64_t t)
{
	/* Callers read the clock before taking the lock, so t may be older than the last
	 * change; moving t_change back would count that stretch twice. */
	uint64_t from = s->t_change > s->t_start ? s->t_change : s->t_start;
	if (t > from)
		s->outstanding_ns += (double)s->outstanding * (double)(t - from);
	if (t > s->t_change)
		s->t_change = t;
}

void stats_restart_clock(struct stats *s)
{
	pthread_mutex_lock(&s->mu);
	s->t_start = s->t_last = now_ns();
	pthread_mutex_unlock(&s->mu);
}

void stats_issue(struct stats *s)
{
	pthread_mutex_lock(&s->mu);
	integrate(s, now_ns());
	if (++s->outstanding > s->max_outstanding)
		s->max_outstanding = s->outstanding;
	pthread_mutex_unlock(&s->mu);
}

void stats_done(struct stats *s, uint64_t lat_ns, uint64_t bytes)
{
	uint64_t t = now_ns();
	pthread_mutex_lock(&s->mu);
	integrate(s, t);
	s->lat_sum_ns += lat_ns;
	hist_add(&s->total, lat_ns);
	hist_add(&s->interval, lat_ns);
	s->bytes += bytes;
	s->int_bytes += bytes;
	s->cmds++;
	s->int_cmds++;
	s->t_done = t;
	s->outstanding--;
	pthread_mutex_unlock(&s->mu);
}

void stats_error(struct stats *s, int verify)
{
	pthread_mutex_lock(&s->mu);
	s->errors++;
	if (verify)
		s->verify_errors++;
	pthread_mutex_unlock(&s->mu);
}

void stats_progress(struct stats *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t t = now_ns();
	double dt = (double)(t - s->t_last) / 1e9;
	if (dt <= 0)
		dt = 1e-9;
	fprintf(stderr,
		"%7.1fs  %9.1f MB/s  %9.0f IOPS  outstanding %3d  lat p50 %9.1f us  p99 %9.1f us\n",
		(double)(t - s->t_start) / 1e9, (double)s->int_bytes / 1e6 / dt,
		(double)s->int_cmds / dt, s->outstanding,
		(double)hist_quantile(&s->interval, 0.50) / 1e3,
		(double)hist_quantile(&s->interval, 0.99) / 1e3);
	hist_reset(&s->interval);
	s->int_bytes = s->int_cmds = 0;
	s->t_last = t;
	pthread_mutex_unlock(&s->mu);
}

void stats_summary(struct stats *s, int json, const char *mode, int exit_code,
		   const char *error, const char *extra_json)
{
	pthread_mutex_lock(&s->mu);
	/* a run that ends early (count reached, error) is timed to its last completion */
	uint64_t end = s->cmds && s->t_done > s->t_start ? s->t_done : now_ns();
	double secs = (double)(end - s->t_start) / 1e9;
	if (secs <= 0)
		secs = 1e-9;
	double mbs = (double)s->bytes / 1e6 / secs, iops = (double)s->cmds / secs;
	/* p10: the service time with little of the machine's noise (wake-ups, steal) added */
	double p10 = (double)hist_quantile(&s->total, 0.10) / 1e3;
	/* p1: the service time itself; it holds when other jobs take the CPU (then p10 carries
	 * their wake-up delays too) */
	double p1 = (double)hist_quantile(&s->total, 0.01) / 1e3;
	double p50 = (double)hist_quantile(&s->total, 0.50) / 1e3;
	double p90 = (double)hist_quantile(&s->total, 0.90) / 1e3;
	double p99 = (double)hist_quantile(&s->total, 0.99) / 1e3;
	double mx = (double)s->total.max / 1e3;
	double mean = s->cmds ? (double)s->lat_sum_ns / (double)s->cmds / 1e3 : 0;
	integrate(s, end);
	double out_mean = s->outstanding_ns / (secs * 1e9);
	fprintf(stderr,
		"summary (%s): %llu bytes in %.3f s = %.1f MB/s, %.0f IOPS, %llu commands, "
		"%llu errors\n  latency us: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f\n",
		mode, (unsigned long long)s->bytes, secs, mbs, iops, (unsigned long long)s->cmds,
		(unsigned long long)s->errors, p50, p90, p99, mx);
	if (json) {
		printf("{\"mode\": \"%s\", \"bytes\": %llu, \"seconds\": %.6f, \"mb_s\": %.3f, "
		       "\"iops\": %.1f, \"commands\": %llu, \"errors\": %llu, "
		       "\"verify_errors\": %llu, \"max_outstanding\": %d, \"outstanding_mean\": %.3f, "
		       "\"lat_us\": {\"p1\": %.1f, \"p10\": %.1f, \"p50\": %.1f, \"p90\": %.1f, \"p99\": %.1f, \"max\": %.1f, "
		       "\"mean\": %.1f}, \"exit\": %d, \"error\": ",
		       mode, (unsigned long long)s->bytes, secs, mbs, iops,
		       (unsigned long long)s->cmds, (unsigned long long)s->errors,
		       (unsigned long long)s->verify_errors, s->max_outstanding, out_mean, p1, p10, p50, p90, p99,
		       mx, mean, exit_code);
		if (error)
			json_puts(stdout, error);
		else
			fputs("null", stdout);
		/* our own CPU time: shows whether the initiator or the target is the bottleneck */
		struct rusage ru;
		getrusage(RUSAGE_SELF, &ru);
		double user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
		double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
		printf(", \"cpu_s\": %.6f, \"user_s\": %.6f, \"sys_s\": %.6f, "
		       "\"cpu_s_per_gb\": %.4f",
		       user + sys, user, sys, s->bytes ? (user + sys) / ((double)s->bytes / 1e9) : 0.0);
		if (extra_json && *extra_json)
			printf(", %s", extra_json);
		printf("}\n");
		fflush(stdout);
	}
	pthread_mutex_unlock(&s->mu);
}

void stats_watch(struct stats *s, atomic_int *finished, int workers, double time_s, int quiet,
		 atomic_int *stop)
{
	uint64_t next = s->t_start + 1000000000ull;
	while (atomic_load(finished) < workers) {
		usleep(10000);
		uint64_t t = now_ns();
		if (time_s > 0 && (double)(t - s->t_start) / 1e9 >= time_s)
			atomic_store(stop, 1);
		if (t >= next) {
			if (!quiet)
				stats_progress(s);
			next += 1000000000ull;
		}
	}
}

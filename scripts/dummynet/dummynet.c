/* istrace-dummynet: a user-space path emulator between two TUN devices.
 *
 * The testbed's middle namespace routes each direction's packets into its own TUN device.
 * For every direction one thread reads packets from that device, decides their fate (random
 * loss, queue limit, a link of the given rate, then the one-way delay) and writes each one back
 * into the same device when it is due; the kernel then forwards it on to the far end.
 *
 * Model per direction (as FreeBSD dummynet's pipe): a FIFO queue of at most `queue` packets in
 * front of a link of `rate` bit/s (one packet of burst), followed by a delay line of `delay`.
 *   tx_start = max(arrival, link_free); link_free = tx_start + len*8/rate;
 *   due      = link_free + delay.
 * Packets leave in arrival order, so one ring per direction holds both the queue and the delay
 * line. Times are CLOCK_MONOTONIC nanoseconds; sleeps are ppoll() to the next due packet with
 * the timer slack set to 1 ns, and a short spin for the last few microseconds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "dummynet.h"

#define MTU_MAX 9216u         /* a 9000-byte jumbo MTU fits */
#define READ_BATCH 64         /* packets read per wakeup before sending what is due */
#define MIN_SPIN_NS 20000ull  /* wait this close to a due time by spinning, not sleeping */
#define IDLE_POLL_NS 100000000ull
#define EARLY_NS 4000ull      /* send what is due this soon with the packet due now: fewer wakeups */

/* A slot's packet bytes live in a separate arena, `mtu + 1` bytes per slot, so a jumbo MTU
 * costs memory only when asked for (the ring is walked round, so every slot gets touched). */
struct slot {
	uint64_t due_ns;
	uint64_t link_done_ns; /* when the link finished sending it: queue accounting */
	uint32_t len;
};

struct counters {
	_Atomic uint64_t rx_pkts, rx_bytes, tx_pkts, tx_bytes;
	_Atomic uint64_t drop_loss, drop_queue, drop_ring, drop_big, write_err;
	_Atomic uint64_t max_queue;
};

struct direction {
	const char *name;
	const char *tun;
	int fd;
	struct dn_params p;
	struct slot *ring;
	uint8_t *bytes;       /* cap slots of slot_bytes each */
	size_t slot_bytes;    /* largest packet + 1: a read that fills it may have been cut */
	uint32_t cap;         /* power of two */
	uint32_t head, tail;  /* free-running; count = tail - head */
	uint32_t linked;      /* first slot whose link_done_ns is still in the future */
	uint64_t link_free_ns;
	uint64_t rng;
	struct counters c;
	pthread_t thread;
};

static atomic_int stop_flag;
/* Median time from a wakeup being triggered on one CPU to the woken thread running, measured
 * at start. A packet that wakes a sleeping thread arrived about this long before the read. */
static uint64_t wake_ns;
/* The path's own latency per direction beyond the set delay (this forwarder's wakeups, the TUN
 * and the stack's hops), measured by the testbed after start (the RTT through the path at low
 * quantile minus the set delays, halved) and taken off each packet's hold, so a ping's RTT is
 * the set delays. */
static _Atomic uint64_t compensate_ns;
static uint64_t spin_ns = MIN_SPIN_NS; /* = wake_ns: a timer wakeup is as late as any other */

static inline void bump(_Atomic uint64_t *c, uint64_t by)
{
	/* one writer per counter: a relaxed load+store is enough for the stats reader */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + by,
			      memory_order_relaxed);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int open_tun(const char *name)
{
	struct ifreq ifr;
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Send every packet whose time has come, in order. */
static void send_due(struct direction *d, uint64_t now)
{
	uint32_t mask = d->cap - 1;
	while (d->head != d->tail) {
		struct slot *s = &d->ring[d->head & mask];
		if (s->due_ns > now + EARLY_NS)
			break;
		ssize_t n = write(d->fd, d->bytes + (size_t)(d->head & mask) * d->slot_bytes, s->len);
		if (n == (ssize_t)s->len) {
			bump(&d->c.tx_pkts, 1);
			bump(&d->c.tx_bytes, s->len);
		} else {
			bump(&d->c.write_err, 1);
		}
		d->head++;
	}
	if ((int32_t)(d->linked - d->head) < 0)
		d->linked = d->head;
}

/* Packets still waiting for the link (not yet in the delay line). */
static uint32_t queued(struct direction *d, uint64_t now)
{
	uint32_t mask = d->cap - 1;
	while (d->linked != d->tail && d->ring[d->linked & mask].link_done_ns <= now)
		d->linked++;
	return d->tail - d->linked;
}

/* Read up to READ_BATCH packets; returns how many reads succeeded (0 when drained).
 * `first_arrival` is the estimated arrival time of the first packet (see wake_ns). */
static int read_batch(struct direction *d, uint64_t now, uint64_t first_arrival)
{
	static __thread uint8_t scratch[65536];
	uint32_t mask = d->cap - 1;
	int got = 0;
	for (int i = 0; i < READ_BATCH; i++) {
		int full = d->tail - d->head == d->cap;
		struct slot *s = &d->ring[d->tail & mask];
		uint8_t *buf = full ? scratch : d->bytes + (size_t)(d->tail & mask) * d->slot_bytes;
		size_t room = full ? sizeof(scratch) : d->slot_bytes;
		ssize_t n = read(d->fd, buf, room);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break; /* EAGAIN: drained */
		}
		got++;
		bump(&d->c.rx_pkts, 1);
		bump(&d->c.rx_bytes, (uint64_t)n);
		if (full) {
			bump(&d->c.drop_ring, 1);
			continue;
		}
		if ((size_t)n > d->slot_bytes - 1) { /* may have been cut short: never forward it */
			bump(&d->c.drop_big, 1);
			continue;
		}
		if (d->p.loss > 0 && dn_uniform(&d->rng) < d->p.loss) {
			bump(&d->c.drop_loss, 1);
			continue;
		}
		uint32_t q = queued(d, now);
		if (d->p.queue_pkts && q >= d->p.queue_pkts) {
			bump(&d->c.drop_queue, 1);
			continue;
		}
		if (q + 1 > atomic_load_explicit(&d->c.max_queue, memory_order_relaxed))
			atomic_store_explicit(&d->c.max_queue, q + 1, memory_order_relaxed);
		uint64_t arrival = got == 1 ? first_arrival : now;
		uint64_t start = d->link_free_ns > arrival ? d->link_free_ns : arrival;
		uint64_t done = start + dn_tx_ns((uint64_t)n + d->p.overhead, d->p.rate_bps);
		if (d->p.rate_bps)
			d->link_free_ns = done;
		s->len = (uint32_t)n;
		s->link_done_ns = done;
		uint64_t comp = atomic_load_explicit(&compensate_ns, memory_order_relaxed);
		s->due_ns = done + (d->p.delay_ns > comp ? d->p.delay_ns - comp : 0);
		d->tail++;
	}
	return got;
}

static void *run_direction(void *arg)
{
	struct direction *d = arg;
	struct pollfd pfd = {.fd = d->fd, .events = POLLIN};
	uint64_t woke_by_packet_after = 0; /* when the last sleep began, if a packet ended it */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
		uint64_t now = now_ns();
		uint64_t first = now;
		if (woke_by_packet_after) {
			first = now > wake_ns ? now - wake_ns : now;
			if (first < woke_by_packet_after)
				first = woke_by_packet_after;
			woke_by_packet_after = 0;
		}
		int got = read_batch(d, now, first);
		now = now_ns();
		send_due(d, now);
		if (got == READ_BATCH)
			continue; /* more waiting: read again before sleeping */
		uint64_t wait = IDLE_POLL_NS;
		if (d->head != d->tail) {
			uint64_t due = d->ring[d->head & (d->cap - 1)].due_ns;
			wait = due > now + EARLY_NS ? due - now - EARLY_NS : 0;
			if (wait < spin_ns) {
				while (now_ns() + EARLY_NS < due) {
					struct pollfd q = pfd;
					if (poll(&q, 1, 0) > 0)
						break; /* a new packet: take it in first */
				}
				continue;
			}
			wait -= spin_ns;
			if (wait > IDLE_POLL_NS)
				wait = IDLE_POLL_NS;
		}
		struct timespec ts = {.tv_sec = (time_t)(wait / 1000000000ull),
				      .tv_nsec = (long)(wait % 1000000000ull)};
		uint64_t slept_at = now_ns();
		struct pollfd q = pfd;
		if (ppoll(&q, 1, &ts, NULL) > 0)
			woke_by_packet_after = slept_at;
	}
	return NULL;
}

struct calib {
	int rfd;
	int n;
	uint64_t *samples;
};

static void *calib_thread(void *arg)
{
	struct calib *c = arg;
	for (int i = 0; i < c->n; i++) {
		struct pollfd p = {.fd = c->rfd, .events = POLLIN};
		uint64_t sent;
		if (poll(&p, 1, 1000) <= 0 || read(c->rfd, &sent, sizeof(sent)) != sizeof(sent))
			break;
		c->samples[i] = now_ns() - sent;
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Measure the cross-thread wakeup latency (median of 100 pipe wakeups, capped at 100 us). */
static uint64_t calibrate_wake(void)
{
	enum { N = 100 };
	uint64_t samples[N] = {0};
	int fds[2];
	if (pipe(fds) != 0)
		return 0;
	struct calib c = {.rfd = fds[0], .n = N, .samples = samples};
	pthread_t t;
	if (pthread_create(&t, NULL, calib_thread, &c) != 0) {
		close(fds[0]);
		close(fds[1]);
		return 0;
	}
	for (int i = 0; i < N; i++) {
		struct timespec gap = {.tv_sec = 0, .tv_nsec = 1000000};
		nanosleep(&gap, NULL);
		uint64_t t0 = now_ns();
		if (write(fds[1], &t0, sizeof(t0)) != sizeof(t0))
			break;
	}
	pthread_join(t, NULL);
	close(fds[0]);
	close(fds[1]);
	qsort(samples, N, sizeof(samples[0]), cmp_u64);
	uint64_t med = samples[N / 2];
	return med > 100000 ? 100000 : med;
}

static void write_stats(const char *path, struct direction *dirs, int ndirs, int final)
{
	char tmp[4096];
	if (!path)
		return;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return;
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
	double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
	fprintf(f, "{\"final\": %s, \"cpu_user_s\": %.3f, \"cpu_sys_s\": %.3f, \"wake_ns\": %" PRIu64
		", \"compensate_ns\": %" PRIu64, final ? "true" : "false", user, sys, wake_ns,
		(uint64_t)atomic_load(&compensate_ns));
	for (int i = 0; i < ndirs; i++) {
		struct direction *d = &dirs[i];
#define C(x) atomic_load_explicit(&d->c.x, memory_order_relaxed)
		fprintf(f,
			", \"%s\": {\"tun\": \"%s\", \"delay_ns\": %" PRIu64 ", \"rate_bps\": %" PRIu64
			", \"loss\": %.6f, \"queue_pkts\": %u, \"rx_pkts\": %" PRIu64
			", \"rx_bytes\": %" PRIu64 ", \"tx_pkts\": %" PRIu64 ", \"tx_bytes\": %" PRIu64
			", \"drop_loss\": %" PRIu64 ", \"drop_queue\": %" PRIu64 ", \"drop_ring\": %" PRIu64
			", \"drop_big\": %" PRIu64 ", \"write_err\": %" PRIu64 ", \"max_queue\": %" PRIu64
			"}",
			d->name, d->tun, d->p.delay_ns, d->p.rate_bps, d->p.loss, d->p.queue_pkts,
			C(rx_pkts), C(rx_bytes), C(tx_pkts), C(tx_bytes), C(drop_loss), C(drop_queue),
			C(drop_ring), C(drop_big), C(write_err), C(max_queue));
#undef C
	}
	fprintf(f, "}\n");
	if (fclose(f) == 0)
		rename(tmp, path);
}

/* SIGUSR1: re-read `compensate_us N` from the control file. */
static void read_control(const char *path)
{
	char line[128];
	uint64_t us;
	FILE *f = path ? fopen(path, "r") : NULL;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "compensate_us ", 14) && !dn_parse_u64(line + 14, 0, 10000, &us)) {
			atomic_store(&compensate_ns, us * 1000);
			printf("istrace-dummynet: compensating %" PRIu64 " us per direction\n", us);
			fflush(stdout);
		}
	}
	fclose(f);
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: istrace-dummynet --tun-i2t DEV --tun-t2i DEV [--delay-i2t-us N] "
		"[--delay-t2i-us N]\n"
		"       [--rate-bps N] [--loss P] [--queue PKTS] [--overhead BYTES] [--ring SLOTS]\n"
		"       [--seed N] [--stats FILE] [--rt] [--no-compensate] [--control FILE] [--mtu N]\n"
		"Forwards packets between two TUN devices with a delay (0..%u us each way), a rate\n"
		"limit (0 = none), a loss probability (0..1) and a queue limit (packets, 0 = ring).\n"
		"SIGUSR1 re-reads `compensate_us N` from the --control file; SIGTERM stops it.\n",
		DN_MAX_DELAY_US);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"tun-i2t", required_argument, 0, 'a'}, {"tun-t2i", required_argument, 0, 'b'},
		{"delay-i2t-us", required_argument, 0, 'd'}, {"delay-t2i-us", required_argument, 0, 'e'},
		{"rate-bps", required_argument, 0, 'r'}, {"loss", required_argument, 0, 'l'},
		{"queue", required_argument, 0, 'q'}, {"overhead", required_argument, 0, 'o'},
		{"ring", required_argument, 0, 'n'}, {"seed", required_argument, 0, 's'},
		{"stats", required_argument, 0, 'S'}, {"rt", no_argument, 0, 'R'},
		{"no-compensate", no_argument, 0, 'C'}, {"control", required_argument, 0, 'K'},
		{"mtu", required_argument, 0, 'M'}, {"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	const char *tun[2] = {NULL, NULL}, *stats = NULL, *control = NULL;
	const char *delay_s[2] = {"0", "0"}, *rate_s = "0", *loss_s = "0", *queue_s = "0";
	/* 2047: the largest packet carried unless --mtu (1500 fits) */
	const char *overhead_s = "0", *ring_s = "32768", *seed_s = "1", *mtu_s = "2047";
	int rt = 0, compensate = 1, c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'a': tun[0] = optarg; break;
		case 'b': tun[1] = optarg; break;
		case 'd': delay_s[0] = optarg; break;
		case 'e': delay_s[1] = optarg; break;
		case 'r': rate_s = optarg; break;
		case 'l': loss_s = optarg; break;
		case 'q': queue_s = optarg; break;
		case 'o': overhead_s = optarg; break;
		case 'n': ring_s = optarg; break;
		case 'M': mtu_s = optarg; break;
		case 's': seed_s = optarg; break;
		case 'S': stats = optarg; break;
		case 'R': rt = 1; break;
		case 'C': compensate = 0; break;
		case 'K': control = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc || !tun[0] || !tun[1]) {
		usage(stderr);
		return 2;
	}
	struct dn_params p[2];
	uint64_t ring, seed, overhead, mtu;
	const char *err = NULL;
	for (int i = 0; i < 2 && !err; i++)
		err = dn_parse_params(delay_s[i], rate_s, loss_s, queue_s, &p[i]);
	if (!err && (dn_parse_u64(overhead_s, 0, 1000, &overhead) ||
		     dn_parse_u64(ring_s, 1024, 1u << 22, &ring) ||
		     dn_parse_u64(seed_s, 0, UINT64_MAX, &seed) ||
		     dn_parse_u64(mtu_s, 576, MTU_MAX, &mtu)))
		err = "bad --overhead (0..1000), --ring (1024..4194304), --seed or --mtu (576..9216)";
	if (err) {
		fprintf(stderr, "istrace-dummynet: %s\n", err);
		return 2;
	}
	uint32_t cap = dn_pow2_at_least((uint32_t)ring);

	static struct direction dirs[2];
	const char *names[2] = {"i2t", "t2i"};
	for (int i = 0; i < 2; i++) {
		struct direction *d = &dirs[i];
		d->name = names[i];
		d->tun = tun[i];
		d->p = p[i];
		d->p.overhead = (uint32_t)overhead;
		d->cap = cap;
		d->rng = dn_seed(seed, (uint64_t)i);
		d->fd = open_tun(tun[i]);
		if (d->fd < 0) {
			fprintf(stderr, "istrace-dummynet: cannot create TUN %s: %s\n", tun[i],
				strerror(errno));
			return 1;
		}
		/* preallocated, touched on first use only: memory follows the real backlog */
		d->slot_bytes = (size_t)mtu + 1;
		d->ring = mmap(NULL, (size_t)cap * sizeof(struct slot), PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		d->bytes = mmap(NULL, (size_t)cap * d->slot_bytes, PROT_READ | PROT_WRITE,
				MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (d->ring == MAP_FAILED || d->bytes == MAP_FAILED) {
			fprintf(stderr, "istrace-dummynet: no memory for %u slots\n", cap);
			return 1;
		}
	}
	if (rt) {
		struct sched_param sp = {.sched_priority = 10};
		if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
			fprintf(stderr, "istrace-dummynet: SCHED_FIFO refused (%s), running normal\n",
				strerror(errno));
	}

	wake_ns = compensate ? calibrate_wake() : 0;
	if (wake_ns > spin_ns)
		spin_ns = wake_ns;

	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads inherit: only main waits for them */
	for (int i = 0; i < 2; i++) {
		if (pthread_create(&dirs[i].thread, NULL, run_direction, &dirs[i]) != 0) {
			fprintf(stderr, "istrace-dummynet: cannot start a thread\n");
			return 1;
		}
	}
	printf("istrace-dummynet: ready %s(i2t %" PRIu64 " us) %s(t2i %" PRIu64
	       " us) rate %" PRIu64 " bit/s loss %.6f queue %u ring %u wake %" PRIu64 " ns\n",
	       tun[0], p[0].delay_ns / 1000, tun[1], p[1].delay_ns / 1000, p[0].rate_bps, p[0].loss,
	       p[0].queue_pkts, cap, wake_ns);
	fflush(stdout);
	for (;;) {
		struct timespec one = {.tv_sec = 1, .tv_nsec = 0};
		int sig = sigtimedwait(&set, NULL, &one);
		if (sig == SIGUSR1) {
			read_control(control);
			continue;
		}
		if (sig > 0)
			break;
		write_stats(stats, dirs, 2, 0);
	}
	atomic_store(&stop_flag, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(dirs[i].thread, NULL);
	write_stats(stats, dirs, 2, 1);
	for (int i = 0; i < 2; i++)
		close(dirs[i].fd);
	return 0;
}

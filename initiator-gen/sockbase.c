/* Socket baseline server and client. */
#define _GNU_SOURCE
#include "sockbase.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"
#include "pdu.h"
#include "stats.h"
#include "util.h"
#include "verify.h"

#define STREAM_LEN UINT64_MAX
#define SRV_BUF (4u << 20)

static unsigned char *srv_buf;
static int srv_file = -1;     /* --serve-file: read what is sent from here, like a target */
static uint64_t srv_file_size;

/* Next n bytes to send: the static pattern buffer, or the file read at *pos (wrapping). */
static const unsigned char *next_chunk(unsigned char *priv, size_t n, uint64_t *pos)
{
	if (srv_file < 0)
		return srv_buf;
	size_t done = 0;
	while (done < n) {
		if (*pos >= srv_file_size)
			*pos = 0;
		size_t want = n - done;
		if (want > srv_file_size - *pos)
			want = (size_t)(srv_file_size - *pos);
		ssize_t r = pread(srv_file, priv + done, want, (off_t)*pos);
		if (r <= 0)
			return NULL;
		done += (size_t)r;
		*pos += (uint64_t)r;
	}
	return priv;
}

static void *serve_one(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct gen_err e = {0};
	unsigned char req[8];
	uint64_t pos = 0;
	unsigned char *priv = srv_file >= 0 ? malloc(SRV_BUF) : NULL;
	if (srv_file >= 0 && !priv)
		goto out;
	while (io_recv_all(fd, req, 8, &e, 0) == 0) {
		uint64_t left = get64(req);
		while (left) {
			size_t n = left < SRV_BUF ? (size_t)left : SRV_BUF;
			const unsigned char *p = next_chunk(priv, n, &pos);
			if (!p || io_send_all(fd, p, n, &e) < 0)
				goto out;
			if (left != STREAM_LEN)
				left -= n;
		}
	}
out:
	free(priv);
	close(fd);
	return NULL;
}

int sock_serve(const struct gen_opts *o)
{
	char host[256];
	int port;
	const char *spec = o->serve_addr;
	char buf[300];
	if (!strchr(spec, ':') || spec[0] == ':') { /* bare "PORT" or ":PORT" */
		snprintf(buf, sizeof(buf), "0.0.0.0:%s", spec[0] == ':' ? spec + 1 : spec);
		spec = buf;
	}
	if (split_hostport(spec, host, sizeof(host), &port, 0) < 0 || port == 0) {
		fprintf(stderr, "istrace-gen: bad --serve address '%s' (want [ADDR:]PORT)\n",
			o->serve_addr);
		return EXIT_USAGE;
	}
	srv_buf = malloc(SRV_BUF);
	if (!srv_buf)
		return EXIT_INTERNAL;
	pattern_fill(srv_buf, 0, SRV_BUF);
	if (o->verify_file) {
		srv_file = open(o->verify_file, O_RDONLY | O_CLOEXEC);
		off_t end = srv_file >= 0 ? lseek(srv_file, 0, SEEK_END) : -1;
		if (end <= 0) {
			fprintf(stderr, "istrace-gen: cannot read --serve-file %s\n", o->verify_file);
			return EXIT_USAGE;
		}
		srv_file_size = (uint64_t)end;
	}
	struct addrinfo hints = {0}, *res;
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", port);
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(host, ps, &hints, &res)) {
		fprintf(stderr, "istrace-gen: cannot resolve '%s'\n", host);
		return EXIT_USAGE;
	}
	int ls = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ls < 0 || bind(ls, res->ai_addr, res->ai_addrlen) < 0 || listen(ls, 64) < 0) {
		fprintf(stderr, "istrace-gen: cannot listen on %s: %s\n", o->serve_addr,
			strerror(errno));
		freeaddrinfo(res);
		return EXIT_CONNECT;
	}
	freeaddrinfo(res);
	fprintf(stderr, "serving on %s:%d (8-byte length request -> that many bytes from %s)\n",
		host, port, o->verify_file ? o->verify_file : "memory");
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR && atomic_load(&g_stop))
				break;
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		pthread_t t;
		if (pthread_create(&t, NULL, serve_one, (void *)(intptr_t)fd) == 0)
			pthread_detach(t);
		else
			close(fd);
	}
	close(ls);
	return 0;
}

struct sock_worker {
	const struct gen_opts *o;
	struct stats *st;
	unsigned idx;
	struct gen_err err;
	atomic_int *finished;
	pthread_barrier_t *start;
};

static atomic_uint_fast64_t sock_claimed;

static int sock_claim(const struct gen_opts *o)
{
	if (atomic_load(&g_stop))
		return 0;
	uint64_t n = atomic_fetch_add(&sock_claimed, 1);
	return !(o->count && n >= o->count);
}

static void *sock_worker_main(void *arg)
{
	struct sock_worker *w = arg;
	const struct gen_opts *o = w->o;
	struct conn c;
	int ok = conn_open(&c, o->socket_addr, 0, o->timeout_s) == 0;
	if (!ok) {
		w->err = c.err;
		atomic_store(&g_stop, 1);
	}
	unsigned char *buf = ok ? malloc(o->size) : NULL;
	uint64_t *t_issue = ok ? calloc(o->queue_depth, sizeof(uint64_t)) : NULL;
	if (ok && (!buf || !t_issue)) {
		err_set(&w->err, EXIT_INTERNAL, "out of memory");
		ok = 0;
	}
	pthread_barrier_wait(w->start);
	unsigned char req[8];
	if (ok && o->stream) {
		put64(req, STREAM_LEN);
		if (io_send_all(c.fd, req, 8, &w->err) == 0) {
			while (!atomic_load(&g_stop) && sock_claim(o)) {
				stats_issue(w->st);
				uint64_t t = now_ns();
				if (io_recv_all(c.fd, buf, o->size, &w->err, o->timeout_s) < 0)
					break;
				stats_done(w->st, now_ns() - t, o->size);
			}
		}
	} else if (ok) {
		/* requests are answered in order: a ring of issue times is enough */
		unsigned head = 0, tail = 0, inflight = 0;
		for (;;) {
			while (inflight < o->queue_depth && sock_claim(o)) {
				put64(req, o->size);
				t_issue[head] = now_ns();
				head = (head + 1) % o->queue_depth;
				inflight++;
				stats_issue(w->st);
				if (io_send_all(c.fd, req, 8, &w->err) < 0)
					goto done;
			}
			if (!inflight)
				break;
			if (io_recv_all(c.fd, buf, o->size, &w->err, o->timeout_s) < 0)
				break;
			stats_done(w->st, now_ns() - t_issue[tail], o->size);
			tail = (tail + 1) % o->queue_depth;
			inflight--;
		}
	}
done:
	if (w->err.code)
		atomic_store(&g_stop, 1);
	if (ok)
		conn_close(&c);
	free(buf);
	free(t_issue);
	atomic_fetch_add(w->finished, 1);
	return NULL;
}

int sock_client(const struct gen_opts *o)
{
	struct stats *st = malloc(sizeof(*st));
	struct sock_worker *ws = calloc(o->sessions, sizeof(*ws));
	pthread_t *th = calloc(o->sessions, sizeof(*th));
	pthread_barrier_t start;
	atomic_int finished = 0;
	if (!st || !ws || !th)
		return EXIT_INTERNAL;
	stats_init(st);
	pthread_barrier_init(&start, NULL, o->sessions + 1);
	for (unsigned i = 0; i < o->sessions; i++) {
		ws[i] = (struct sock_worker){o, st, i, {0, ""}, &finished, &start};
		if (pthread_create(&th[i], NULL, sock_worker_main, &ws[i])) {
			fprintf(stderr, "istrace-gen: cannot start thread\n");
			return EXIT_INTERNAL;
		}
	}
	pthread_barrier_wait(&start);
	st->t_start = st->t_last = now_ns();
	stats_watch(st, &finished, (int)o->sessions, o->time_s, o->quiet, &g_stop);
	int code = 0;
	const char *msg = NULL;
	for (unsigned i = 0; i < o->sessions; i++) {
		pthread_join(th[i], NULL);
		if (ws[i].err.code && !code) {
			code = ws[i].err.code;
			msg = ws[i].err.msg;
		}
	}
	if (msg)
		fprintf(stderr, "istrace-gen: %s\n", msg);
	char extra[256];
	snprintf(extra, sizeof(extra),
		 "\"size\": %llu, \"queue_depth\": %u, \"sessions\": %u, \"stream\": %s",
		 (unsigned long long)o->size, o->queue_depth, o->sessions,
		 o->stream ? "true" : "false");
	stats_summary(st, o->json, "socket", code, msg, extra);
	return code;
}

/* TCP transport for iSCSI PDUs. Blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO: a silent target
 * turns into EXIT_TIMEOUT instead of a hang, and the engine stays simple. */
#define _GNU_SOURCE
#include "conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "crc32c.h"

#define RX_CAP (16u << 10)   /* read-ahead buffer */
#define RX_DIRECT (8u << 10) /* remainders this big are received in place */
#define LOWAT_CAP (4 << 20)  /* most we wait for at once (the kernel caps it too) */

int split_hostport(const char *spec, char *host, size_t hostlen, int *port, int dflt_port)
{
	const char *p;
	size_t hl;
	*port = dflt_port;
	if (!spec || !*spec)
		return -1;
	if (spec[0] == '[') {
		const char *close = strchr(spec, ']');
		if (!close)
			return -1;
		hl = (size_t)(close - spec - 1);
		if (hl == 0 || hl >= hostlen)
			return -1;
		memcpy(host, spec + 1, hl);
		host[hl] = 0;
		p = close + 1;
		if (*p == 0)
			return 0;
		if (*p != ':')
			return -1;
		p++;
	} else {
		const char *colon = strrchr(spec, ':');
		if (colon && strchr(spec, ':') != colon) /* bare IPv6 without port */
			colon = NULL;
		hl = colon ? (size_t)(colon - spec) : strlen(spec);
		if (hl >= hostlen)
			return -1;
		memcpy(host, spec, hl);
		host[hl] = 0;
		if (!colon)
			return 0;
		p = colon + 1;
	}
	char *end;
	errno = 0;
	long v = strtol(p, &end, 10);
	if (errno || *end || v < 1 || v > 65535 || end == p)
		return -1;
	*port = (int)v;
	return 0;
}

static void set_timeouts(int fd, double timeout_s)
{
	struct timeval tv;
	tv.tv_sec = (time_t)timeout_s;
	tv.tv_usec = (suseconds_t)((timeout_s - (double)tv.tv_sec) * 1e6);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int conn_open(struct conn *c, const char *hostport, int dflt_port, double timeout_s)
{
	char host[256], portstr[16];
	int port;
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->mrdsl_tx = 8192;
	if (split_hostport(hostport, host, sizeof(host), &port, dflt_port) < 0) {
		err_set(&c->err, EXIT_USAGE, "bad address '%s' (want HOST[:PORT] or [IPv6]:PORT)",
			hostport);
		return -1;
	}
	snprintf(portstr, sizeof(portstr), "%d", port);
	struct addrinfo hints = {0}, *res = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc) {
		err_set(&c->err, EXIT_CONNECT, "cannot resolve '%s': %s", host, gai_strerror(rc));
		return -1;
	}
	int last_errno = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			last_errno = errno;
			continue;
		}
		set_timeouts(fd, timeout_s); /* bounds connect() too on Linux */
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			c->fd = fd;
			if (ai->ai_family == AF_INET6)
				snprintf(c->peer, sizeof(c->peer), "[%s]:%d", host, port);
			else
				snprintf(c->peer, sizeof(c->peer), "%s:%d", host, port);
			break;
		}
		last_errno = errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (c->fd < 0) {
		if (last_errno == EINPROGRESS || last_errno == EAGAIN)
			last_errno = ETIMEDOUT;
		err_set(&c->err, EXIT_CONNECT, "cannot connect to %s:%d: %s", host, port,
			strerror(last_errno));
		return -1;
	}
	c->timeout_s = timeout_s;
	c->lowat = 1;
	c->scratch_len = 1 << 16;
	c->scratch = malloc(c->scratch_len);
	c->rx = malloc(RX_CAP);
	if (!c->scratch || !c->rx) {
		err_set(&c->err, EXIT_INTERNAL, "out of memory");
		return -1;
	}
	return 0;
}

void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->scratch);
	c->scratch = NULL;
	free(c->rx);
	c->rx = NULL;
}

static int io_error(struct gen_err *e, int rc, const char *what, double timeout_s)
{
	if (rc == 0) {
		err_set(e, EXIT_CLOSED, "target closed the connection (while %s)", what);
	} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
		err_set(e, EXIT_TIMEOUT, "target stopped answering: nothing for %.1f s (while %s)",
			timeout_s, what);
	} else if (errno == ECONNRESET || errno == EPIPE) {
		err_set(e, EXIT_CLOSED, "target closed the connection: %s (while %s)",
			strerror(errno), what);
	} else {
		err_set(e, EXIT_CLOSED, "connection failed: %s (while %s)", strerror(errno), what);
	}
	return -1;
}

int io_send_all(int fd, const void *buf, size_t len, struct gen_err *e)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return io_error(e, n < 0 ? -1 : 0, "sending", 0);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int io_recv_all(int fd, void *buf, size_t len, struct gen_err *e, double timeout_s)
{
	char *p = buf;
	while (len) {
		ssize_t n = recv(fd, p, len, MSG_WAITALL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return io_error(e, (int)n, "receiving", timeout_s);
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Sleep until n bytes are queued (capped: SO_RCVLOWAT cannot pass half the largest receive
 * buffer), so one wake-up and one recv() take a whole payload instead of a wake-up per few
 * packets. Only bytes a header has announced are waited for: waiting for bytes merely likely
 * to come (the next PDU's) held back the answer to every command that ended, and with it the
 * next command, which changed the queue depth the generator puts on the wire. */
static int set_lowat(struct conn *c, size_t n)
{
	int lowat = n > (size_t)LOWAT_CAP ? LOWAT_CAP : (int)n;
	if (lowat != c->lowat) {
		setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
		c->lowat = lowat;
	}
	return lowat;
}

static int wait_bytes(struct conn *c, size_t n)
{
	struct pollfd pf = {.fd = c->fd, .events = POLLIN};
	int r;
	set_lowat(c, n);
	do
		r = poll(&pf, 1, (int)(c->timeout_s * 1000));
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		errno = EAGAIN;
		return io_error(&c->err, -1, "receiving", c->timeout_s);
	}
	return 0;
}

/* len bytes into buf, or dropped in the kernel when buf is NULL: recv() with MSG_TRUNC on TCP
 * consumes them without copying them to user space (tcp(7)). What is queued is taken at
 * once; the rest is waited for with wait_bytes. */
static int take_all(struct conn *c, unsigned char *buf, size_t len)
{
	while (len) {
		ssize_t n = recv(c->fd, buf, len, MSG_DONTWAIT | (buf ? 0 : MSG_TRUNC));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (wait_bytes(c, len) < 0)
				return -1;
			continue;
		}
		if (n <= 0)
			return io_error(&c->err, (int)n, "receiving", c->timeout_s);
		len -= (size_t)n;
		if (buf)
			buf += n;
	}
	return 0;
}

/* n bytes from the connection (into dst, or dropped when dst is NULL): first what the
 * read-ahead holds, then big remainders straight into dst or dropped in the kernel (no extra
 * copy), each waited for as a whole; small ones through one recv() that may bring the next
 * PDUs too. After a big remainder the next refill asks for what the caller needs only (the
 * next header): the bytes behind it are most likely the next big payload, better received in
 * place or dropped. */
static int conn_read(struct conn *c, void *dst, size_t n)
{
	unsigned char *d = dst;
	for (;;) {
		size_t have = c->rx_len - c->rx_off;
		size_t take = have < n ? have : n;
		if (d) {
			memcpy(d, c->rx + c->rx_off, take);
			d += take;
		}
		c->rx_off += take;
		n -= take;
		if (!n)
			return 0;
		if (n >= RX_DIRECT) {
			c->rx_exact = 1;
			return take_all(c, d, n);
		}
		ssize_t r;
		if (c->rx_exact) { /* just the next header: it is usually queued already */
			if (take_all(c, c->rx, n) < 0)
				return -1;
			r = (ssize_t)n;
		} else {
			if (c->lowat > 1 && wait_bytes(c, 1) < 0)
				return -1;
			do
				r = recv(c->fd, c->rx, RX_CAP, 0);
			while (r < 0 && errno == EINTR);
			if (r <= 0)
				return io_error(&c->err, (int)r, "receiving", c->timeout_s);
		}
		c->rx_off = 0;
		c->rx_len = (size_t)r;
	}
}

int conn_send_pdu(struct conn *c, const unsigned char bhs[BHS_LEN], const void *data,
		  uint32_t len)
{
	return conn_send_pdu_more(c, bhs, data, len, 0);
}

int conn_send_pdu_more(struct conn *c, const unsigned char bhs[BHS_LEN], const void *data,
		       uint32_t len, int more)
{
	unsigned char hd[4], dd[4], pad[4] = {0, 0, 0, 0};
	struct iovec iov[5];
	int n = 0;
	iov[n].iov_base = (void *)bhs;
	iov[n++].iov_len = BHS_LEN;
	if (c->hdigest) {
		put32le(hd, crc32c(bhs, BHS_LEN));
		iov[n].iov_base = hd;
		iov[n++].iov_len = 4;
	}
	if (len) {
		uint32_t p = pad4(len);
		iov[n].iov_base = (void *)data;
		iov[n++].iov_len = len;
		if (p) {
			iov[n].iov_base = pad;
			iov[n++].iov_len = p;
		}
		if (c->ddigest) {
			uint32_t crc = crc32c_update(crc32c_init(), data, len);
			if (p)
				crc = crc32c_update(crc, pad, p);
			put32le(dd, crc32c_final(crc));
			iov[n].iov_base = dd;
			iov[n++].iov_len = 4;
		}
	}
	struct msghdr mh = {0};
	mh.msg_iov = iov;
	mh.msg_iovlen = (size_t)n;
	while (mh.msg_iovlen) {
		ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return io_error(&c->err, w < 0 ? -1 : 0, "sending a PDU", c->timeout_s);
		size_t left = (size_t)w;
		while (left && mh.msg_iovlen) {
			if (left >= mh.msg_iov->iov_len) {
				left -= mh.msg_iov->iov_len;
				mh.msg_iov++;
				mh.msg_iovlen--;
			} else {
				mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + left;
				mh.msg_iov->iov_len -= left;
				left = 0;
			}
		}
	}
	return 0;
}

int conn_recv_bhs(struct conn *c, struct bhs *h)
{
	if (conn_read(c, h->raw, BHS_LEN) < 0)
		return -1;
	uint32_t ahs = (uint32_t)h->raw[4] * 4;
	uint32_t crc = crc32c_init();
	if (c->hdigest)
		crc = crc32c_update(crc, h->raw, BHS_LEN);
	if (ahs) { /* we never ask for AHS; skip it but keep it in the digest */
		if (conn_read(c, c->scratch, ahs) < 0)
			return -1;
		if (c->hdigest)
			crc = crc32c_update(crc, c->scratch, ahs);
	}
	if (c->hdigest) {
		unsigned char d[4];
		if (conn_read(c, d, 4) < 0)
			return -1;
		crc = crc32c_final(crc);
		if (get32le(d) != crc) {
			err_set(&c->err, EXIT_PROTOCOL,
				"header digest mismatch: got 0x%08x, computed 0x%08x (opcode 0x%02x)",
				get32le(d), crc, h->raw[0] & 0x3f);
			return -1;
		}
	}
	bhs_decode(h);
	return 0;
}

int conn_recv_data(struct conn *c, const struct bhs *h, void *dst)
{
	uint32_t len = h->dsl, p = pad4(len);
	unsigned char tail[8];
	if (!len)
		return 0;
	if (len < RX_DIRECT)
		c->rx_exact = 0; /* small segments: PDUs come several to a read-ahead again */
	if (!dst) {
		if (len > c->scratch_len) { /* DSL is 24 bits: at most 16 MiB */
			unsigned char *n = realloc(c->scratch, len);
			if (!n) {
				err_set(&c->err, EXIT_INTERNAL, "out of memory for a %u byte segment",
					len);
				return -1;
			}
			c->scratch = n;
			c->scratch_len = len;
		}
		dst = c->scratch;
	}
	if (conn_read(c, dst, len) < 0)
		return -1;
	uint32_t tl = p + (c->ddigest ? 4 : 0);
	if (tl && conn_read(c, tail, tl) < 0)
		return -1;
	if (c->ddigest) {
		uint32_t crc = crc32c_update(crc32c_init(), dst, len);
		if (p)
			crc = crc32c_update(crc, tail, p);
		crc = crc32c_final(crc);
		if (get32le(tail + p) != crc) {
			err_set(&c->err, EXIT_PROTOCOL,
				"data digest mismatch on %s (ITT 0x%08x): got 0x%08x, computed 0x%08x",
				"PDU", h->itt, get32le(tail + p), crc);
			return -1;
		}
	}
	return 0;
}

int conn_skip_data(struct conn *c, const struct bhs *h)
{
	uint32_t len = h->dsl, p = pad4(len);
	if (c->ddigest) /* the digest needs the bytes */
		return conn_recv_data(c, h, NULL);
	if (len < RX_DIRECT)
		c->rx_exact = 0;
	return len + p ? conn_read(c, NULL, (size_t)len + p) : 0;
}

void conn_update_sn(struct conn *c, const struct bhs *h)
{
	int has_status = 0;
	switch (h->opcode) {
	case OP_SCSI_RSP: case OP_TEXT_RSP: case OP_LOGIN_RSP: case OP_LOGOUT_RSP:
	case OP_TMF_RSP: case OP_REJECT: case OP_ASYNC:
		has_status = 1;
		break;
	case OP_DATA_IN:
		has_status = (h->flags & DIN_S) != 0;
		break;
	case OP_NOP_IN:
		has_status = h->itt != RSVD_TAG; /* an unsolicited ping does not advance StatSN */
		break;
	default:
		break;
	}
	if (has_status && sn_le(c->expstatsn, h->statsn))
		c->expstatsn = h->statsn + 1;
	if (h->opcode == OP_LOGIN_RSP || h->opcode == OP_DATA_IN || h->opcode == OP_SCSI_RSP ||
	    h->opcode == OP_NOP_IN || h->opcode == OP_TEXT_RSP || h->opcode == OP_R2T ||
	    h->opcode == OP_LOGOUT_RSP || h->opcode == OP_TMF_RSP || h->opcode == OP_REJECT ||
	    h->opcode == OP_ASYNC) {
		/* MaxCmdSN = ExpCmdSN - 1 means a closed window; anything further back is bogus */
		if (sn_le(h->expcmdsn - 1, h->maxcmdsn)) {
			if (sn_lt(c->expcmdsn, h->expcmdsn))
				c->expcmdsn = h->expcmdsn;
			if (sn_lt(c->maxcmdsn, h->maxcmdsn))
				c->maxcmdsn = h->maxcmdsn;
		}
	}
}

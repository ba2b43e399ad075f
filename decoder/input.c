/* Opening captures: a file, stdin or a memory buffer, plain or gzip'd (detected by magic).
 * Compressed and piped input goes through a stdio cookie so libpcap reads it as usual;
 * reads return what the pipe has, so a live `tcpdump -w - |` streams. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <pcap/pcap.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core.h"

#define IN_CAP (256 * 1024)

struct src {
	int fd;
	const uint8_t *mem;
	size_t mem_len, mem_pos;
	uint8_t peek[2];
	size_t peek_len, peek_pos;
	int gz, eof, done;
	z_stream zs;
	uint8_t *in;
};

static ssize_t raw_read(struct src *s, char *buf, size_t n)
{
	size_t got = 0;
	while (s->peek_pos < s->peek_len && got < n)
		buf[got++] = (char)s->peek[s->peek_pos++];
	if (got)
		return (ssize_t)got;
	if (s->mem) {
		size_t k = s->mem_len - s->mem_pos;
		if (k > n)
			k = n;
		memcpy(buf, s->mem + s->mem_pos, k);
		s->mem_pos += k;
		return (ssize_t)k;
	}
	for (;;) {
		ssize_t r = read(s->fd, buf, n);
		if (r < 0 && errno == EINTR)
			continue;
		return r;
	}
}

static ssize_t src_read(void *cookie, char *buf, size_t size)
{
	struct src *s = cookie;
	if (!s->gz)
		return raw_read(s, buf, size);
	for (;;) {
		if (s->done)
			return 0;
		if (s->zs.avail_in == 0 && !s->eof) {
			ssize_t r = raw_read(s, (char *)s->in, IN_CAP);
			if (r < 0)
				return -1;
			if (r == 0)
				s->eof = 1;
			s->zs.next_in = s->in;
			s->zs.avail_in = (uInt)r;
		}
		s->zs.next_out = (Bytef *)buf;
		s->zs.avail_out = (uInt)(size > (1u << 30) ? (1u << 30) : size);
		uInt before = s->zs.avail_out;
		int rc = inflate(&s->zs, Z_NO_FLUSH);
		size_t got = before - s->zs.avail_out;
		if (rc == Z_STREAM_END) {
			/* Concatenated gzip members continue; otherwise this is the end. */
			if (s->zs.avail_in > 0 || !s->eof)
				inflateReset(&s->zs);
			else
				s->done = 1;
		} else if (rc != Z_OK && rc != Z_BUF_ERROR) {
			s->done = 1; /* corrupt: what came out so far is all there is */
			if (got)
				return (ssize_t)got;
			errno = EIO;
			return -1;
		}
		if (got)
			return (ssize_t)got;
		if (s->eof && s->zs.avail_in == 0)
			return 0; /* the compressed stream ends early: truncated */
	}
}

static int src_close(void *cookie)
{
	struct src *s = cookie;
	if (s->gz)
		inflateEnd(&s->zs);
	if (!s->mem && s->fd > 0)
		close(s->fd);
	free(s->in);
	free(s);
	return 0;
}

static FILE *src_open(struct src *s, char *err, size_t errlen)
{
	/* Peek two bytes for the gzip magic (1f 8b). */
	while (s->peek_len < 2) {
		ssize_t r = raw_read(s, (char *)s->peek + s->peek_len, 2 - s->peek_len);
		if (r < 0) {
			snprintf(err, errlen, "read error: %s", strerror(errno));
			return NULL;
		}
		if (r == 0)
			break;
		s->peek_len += (size_t)r;
	}
	s->peek_pos = 0;
	if (s->peek_len == 2 && s->peek[0] == 0x1f && s->peek[1] == 0x8b) {
		s->gz = 1;
		s->in = malloc(IN_CAP);
		if (!s->in || inflateInit2(&s->zs, 16 + MAX_WBITS) != Z_OK) {
			snprintf(err, errlen, "cannot start gzip decompression");
			return NULL;
		}
	}
	cookie_io_functions_t io = {.read = src_read, .close = src_close};
	FILE *f = fopencookie(s, "r", io);
	if (!f)
		snprintf(err, errlen, "fopencookie: %s", strerror(errno));
	return f;
}

static pcap_t *open_file(FILE *f, const char *what, char *err, size_t errlen)
{
	char ebuf[PCAP_ERRBUF_SIZE];
	pcap_t *p = pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, ebuf);
	if (!p) {
		snprintf(err, errlen, "%s: not a pcap/pcapng capture (%s)", what, ebuf);
		fclose(f);
	}
	return p;
}

pcap_t *istrace_open_capture(const char *path, char *err, size_t errlen)
{
	int is_stdin = !strcmp(path, "-");
	int fd = is_stdin ? 0 : open(path, O_RDONLY);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	struct stat sb;
	if (!is_stdin && fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		snprintf(err, errlen, "%s: is a directory", path);
		close(fd);
		return NULL;
	}
	if (!is_stdin && S_ISREG(sb.st_mode)) {
		uint8_t m[2] = {0, 0};
		ssize_t r = pread(fd, m, 2, 0);
		if (r == 2 && !(m[0] == 0x1f && m[1] == 0x8b)) {
			/* Plain file: libpcap's own reader is the fastest path. */
			close(fd);
			char ebuf[PCAP_ERRBUF_SIZE];
			pcap_t *p = pcap_open_offline_with_tstamp_precision(
				path, PCAP_TSTAMP_PRECISION_NANO, ebuf);
			if (!p)
				snprintf(err, errlen, "%s: not a pcap/pcapng capture (%s)", path, ebuf);
			return p;
		}
	}
	struct src *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		if (!is_stdin)
			close(fd);
		return NULL;
	}
	s->fd = fd;
	FILE *f = src_open(s, err, errlen);
	if (!f) {
		src_close(s);
		return NULL;
	}
	return open_file(f, is_stdin ? "stdin" : path, err, errlen);
}

int istrace_decode_buffer(const uint8_t *buf, size_t len, const struct decode_opts *o,
			  const struct decode_sinks *sk, struct decode_stats *stats)
{
	int rc = decode_classic_image(buf, len, 0, o, sk, stats);
	if (rc != -2)
		return rc;
	char err[512];
	struct src *s = calloc(1, sizeof *s);
	if (!s)
		return -1;
	s->fd = -1;
	s->mem = buf;
	s->mem_len = len;
	FILE *f = src_open(s, err, sizeof err);
	if (!f) {
		src_close(s);
		return -1;
	}
	pcap_t *p = open_file(f, "buffer", err, sizeof err);
	if (!p)
		return -1;
	rc = istrace_decode_pcap(p, o, sk, stats);
	pcap_close(p);
	return rc;
}

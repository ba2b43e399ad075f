/* Fast path for plain classic pcap files: records are read straight out of a read-only
 * memory mapping, so the kernel does not copy the file into a stdio buffer first (that copy
 * was most of the run time on large captures). Anything else goes through libpcap. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

#define MAX_RECORD (16u * 1024 * 1024) /* larger records mean a corrupt file */
/* Pages read this far behind are handed back (see below); a multiple of any page size. */
#define DROP_CHUNK ((size_t)64 * 1024 * 1024)

static uint32_t rd32(const uint8_t *p, int swap)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return swap ? __builtin_bswap32(v) : v;
}

/* Decode a classic pcap file image. Returns -2 when it is not one. `drop`: m is a page-aligned
 * file mapping whose pages may be given back as they are passed. */
int decode_classic_image(const uint8_t *m, size_t size, int drop, const struct decode_opts *o,
			 const struct decode_sinks *s, struct decode_stats *st)
{
	if (size < 24)
		return -2;
	uint32_t magic;
	memcpy(&magic, m, 4);
	int swap, nano;
	switch (magic) {
	case 0xa1b2c3d4: swap = 0; nano = 0; break;
	case 0xa1b23c4d: swap = 0; nano = 1; break;
	case 0xd4c3b2a1: swap = 1; nano = 0; break;
	case 0x4d3cb2a1: swap = 1; nano = 1; break;
	default:
		return -2; /* pcapng, gzip, or not a capture: libpcap's path says which */
	}
	int dlt = (int)(rd32(m + 20, swap) & 0x03ffffff); /* low bits: link type; high: FCS info */
	struct decoder *d = decoder_begin(o, s, st, dlt);
	if (!d)
		return -1;
	size_t off = 24, dropped = 0;
	while (off < size) {
		/* The mapping's pages stay in the process's RSS once read: a 60 s capture's pcap
		 * would count as gigabytes of it. Dropping those far behind keeps the decoder's RSS
		 * to a chunk; a private read-only file mapping refaults any of them from the page
		 * cache, so a pointer still held into them stays valid. */
		if (drop && off - dropped >= 2 * DROP_CHUNK) {
			madvise((void *)(m + dropped), DROP_CHUNK, MADV_DONTNEED);
			dropped += DROP_CHUNK;
		}
		if (size - off < 16) {
			st->read_error = 1;
			snprintf(st->read_error_text, sizeof st->read_error_text,
				 "truncated dump file; tried to read 16 header bytes, only got %zu",
				 size - off);
			break;
		}
		const uint8_t *h = m + off;
		/* Headers we will parse soon: start loading them now (the payload is skipped). */
		if (size - off > 8192)
			__builtin_prefetch(h + 8192);
		uint32_t sec = rd32(h, swap), frac = rd32(h + 4, swap);
		uint32_t caplen = rd32(h + 8, swap), wirelen = rd32(h + 12, swap);
		if (caplen > MAX_RECORD) {
			st->read_error = 1;
			snprintf(st->read_error_text, sizeof st->read_error_text,
				 "invalid packet capture length %u at offset %zu", caplen, off);
			break;
		}
		if (size - off - 16 < caplen) {
			st->read_error = 1;
			snprintf(st->read_error_text, sizeof st->read_error_text,
				 "truncated dump file; tried to read %u captured bytes, only got %zu",
				 caplen, size - off - 16);
			break;
		}
		int64_t ts = decoder_time(sec, nano ? (int64_t)frac : (int64_t)frac * 1000);
		decoder_packet(d, ts, caplen, wirelen, h + 16);
		off += 16 + (size_t)caplen;
	}
	decoder_end(d);
	return 0;
}

int istrace_decode_mapped(const char *path, const struct decode_opts *o,
			  const struct decode_sinks *s, struct decode_stats *st)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -2;
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 24 ||
	    (uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
		close(fd);
		return -2;
	}
	size_t size = (size_t)sb.st_size;
	const uint8_t *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -2;
	madvise((void *)m, size, MADV_SEQUENTIAL);
	int rc = decode_classic_image(m, size, 1, o, s, st);
	munmap((void *)m, size);
	return rc;
}

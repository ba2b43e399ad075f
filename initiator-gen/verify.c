/* Pattern fill/check without a second buffer: compare word by word in place. */
#define _GNU_SOURCE
#include "verify.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void pattern_fill(unsigned char *buf, uint64_t off, size_t len)
{
	uint64_t w = off / 8;
	for (size_t i = 0; i + 8 <= len; i += 8, w++) {
		uint64_t v = htole64(w);
		memcpy(buf + i, &v, 8);
	}
}

int pattern_check(const unsigned char *buf, uint64_t off, size_t len, uint64_t *bad)
{
	uint64_t w = off / 8;
	for (size_t i = 0; i + 8 <= len; i += 8, w++) {
		uint64_t v;
		memcpy(&v, buf + i, 8);
		if (v != htole64(w)) {
			uint64_t want = htole64(w);
			const unsigned char *a = (const unsigned char *)&v, *b = (const unsigned char *)&want;
			size_t k = 0;
			while (k < 8 && a[k] == b[k])
				k++;
			*bad = off + i + k;
			return -1;
		}
	}
	return 0;
}

int file_check(int fd, const unsigned char *buf, uint64_t off, size_t len, uint64_t *bad)
{
	enum { CHUNK = 1 << 20 };
	unsigned char *ref = malloc(CHUNK);
	if (!ref)
		return -2;
	size_t done = 0;
	int rc = 0;
	while (done < len) {
		size_t n = len - done < CHUNK ? len - done : CHUNK;
		ssize_t r = pread(fd, ref, n, (off_t)(off + done));
		if (r != (ssize_t)n) {
			rc = -2;
			break;
		}
		if (memcmp(ref, buf + done, n)) {
			size_t k = 0;
			while (ref[k] == buf[done + k])
				k++;
			*bad = off + done + k;
			rc = -1;
			break;
		}
		done += n;
	}
	free(ref);
	return rc;
}

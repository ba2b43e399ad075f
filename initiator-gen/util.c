/* Small helpers shared by every file. */
#define _GNU_SOURCE
#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

atomic_int g_stop;

void err_set(struct gen_err *e, int code, const char *fmt, ...)
{
	if (e->code)
		return; /* keep the first error: later ones are usually its consequences */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	e->code = code;
}

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void json_puts(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

int parse_size(const char *s, uint64_t *out, int *is_blocks)
{
	char *end;
	*is_blocks = 0;
	if (!s || !isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	uint64_t mul = 1;
	if (!strcasecmp(end, "") || !strcasecmp(end, "b"))
		mul = 1;
	else if (!strcasecmp(end, "k") || !strcasecmp(end, "kib") || !strcasecmp(end, "kb"))
		mul = 1ull << 10;
	else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib") || !strcasecmp(end, "mb"))
		mul = 1ull << 20;
	else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib") || !strcasecmp(end, "gb"))
		mul = 1ull << 30;
	else if (!strcasecmp(end, "blk") || !strcasecmp(end, "blocks"))
		*is_blocks = 1;
	else
		return -1;
	if (v > UINT64_MAX / mul)
		return -1;
	*out = v * mul;
	return 0;
}

/* Small helpers: error slots, clock, JSON strings, size parsing. */
#ifndef ISTRACE_UTIL_H
#define ISTRACE_UTIL_H
#include <stdint.h>
#include <stdio.h>

#include "gen.h"

/* Print s as a JSON string literal (quotes, escapes). */
void json_puts(FILE *f, const char *s);
/* "4M", "512", "64k", "1G", "8blk" -> bytes (or blocks with *is_blocks=1). -1 on bad input. */
int parse_size(const char *s, uint64_t *out, int *is_blocks);

#endif

/* Output formats: text lines (with -v field listing), JSON lines, CSV tables, summary. */
#ifndef ISTRACE_OUTPUT_H
#define ISTRACE_OUTPUT_H
#include <stdio.h>

#include "decode.h"

struct out_opts {
	int text, json, verbose, summary, flush_each;
	const char *csv_dir; /* NULL: no CSV */
	const char *segments_path; /* segments table to this file too ("-": stdout), or NULL */
	const char *input_name;
};

struct out;
/* Returns NULL with a message in err when a CSV file cannot be created. */
struct out *out_new(const struct out_opts *o, char *err, size_t errlen);
void out_sinks(struct out *w, struct decode_sinks *s);
/* Flush and close; prints the summary when asked (st NULL: none). Returns 0, or -1 on a write
 * error. */
int out_finish(struct out *w, const struct decode_stats *st);
/* Shared by the C tests: write a CSV/JSON-escaped string. */
void out_csv_escape(FILE *f, const char *s);

#endif

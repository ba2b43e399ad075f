// SPDX-License-Identifier: GPL-2.0
/*
 * The stream istrace-probe writes: JSON lines or CSV rows of the same columns
 * (docs/schema.md section 1), the meta line that opens it, the counter lines, and the
 * .meta.json beside it that a reader can trust while the stream is still growing.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "probe.h"

struct stream streams[MAX_STREAMS];
int nstreams;
struct stream *cur = &streams[0];
bool csv_out;
unsigned long long nbad;
struct record rec;

static const char *const col_name[C_N] = {
	"ts_ns", "host", "layer", "event", "pid", "comm", "conn", "cookie", "lba", "bytes", "itt",
	"opcode", "seq", "ack", "cwnd", "ssthresh", "srtt_us", "ca_state", "inflight", "rwnd",
	"snd_wnd", "lat_ns", "dev", "reason", "tid", "netns", "fd", "ret", "offset", "status",
	"again", "lost", "events", "source",
};

static const bool col_text[C_N] = {
	[C_HOST] = true, [C_LAYER] = true, [C_EVENT] = true, [C_COMM] = true, [C_CONN] = true,
	[C_CA] = true, [C_DEV] = true, [C_REASON] = true, [C_SOURCE] = true,
};

/* worst case per column: 6 bytes per escaped character, plus the key */
static char line[C_N * (6 * VAL_MAX + 32) + 4];

static char *json_str(char *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	*o++ = '"';
	for (i = 0; i < n; i++) { /* the usual case: nothing to escape, one copy */
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			break;
	}
	memcpy(o, s, i);
	o += i;
	for (; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = (char)c;
		} else if (c < 0x20 || c >= 0x7f) {
			memcpy(o, "\\u00", 4);
			o[4] = hex[c >> 4];
			o[5] = hex[c & 15];
			o += 6;
		} else {
			*o++ = (char)c;
		}
	}
	*o++ = '"';
	return o;
}

static char *csv_str(char *o, const char *s, size_t n)
{
	bool quote = memchr(s, ',', n) || memchr(s, '"', n) || memchr(s, '\r', n) ||
		     memchr(s, '\n', n);
	size_t i;

	if (quote)
		*o++ = '"';
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (quote && c == '"')
			*o++ = '"';
		*o++ = c >= 0x20 && c < 0x7f ? (char)c : (quote ? ' ' : '?');
	}
	if (quote)
		*o++ = '"';
	return o;
}

/* a JSON string of at most max bytes (up to a NUL) straight to the stream */
static void json_fputs(const char *s, size_t max)
{
	char buf[6 * 256 + 2];
	size_t n = strnlen(s, max < 256 ? max : 256);

	fwrite(buf, 1, (size_t)(json_str(buf, s, n) - buf), cur->f);
}

static void csv_header(void)
{
	int c;

	for (c = 0; c < C_N; c++)
		fprintf(cur->f, "%s%s", c ? "," : "", col_name[c]);
	fputc('\n', cur->f);
}

void rec_write(void)
{
	static struct { char text[32]; size_t len; } key[C_N];
	char *o = line;
	int c;

	if (csv_out) {
		for (c = 0; c < C_N; c++) {
			if (c)
				*o++ = ',';
			if (!rec.set[c])
				continue;
			if (col_text[c]) {
				o = csv_str(o, rec.v[c], rec.len[c]);
			} else {
				memcpy(o, rec.v[c], rec.len[c]);
				o += rec.len[c];
			}
		}
		*o++ = '\n';
		fwrite_unlocked(line, 1, (size_t)(o - line), cur->f);
		return;
	}
	if (!key[0].len) { /* `{"name":` / `,"name":`, and the same with null, once */
		for (c = 0; c < C_N; c++) {
			key[c].len = snprintf(key[c].text, sizeof(key[c].text), "%c\"%s\":",
					      c ? ',' : '{', col_name[c]);
			memcpy(key[c].text + key[c].len, "null", 4);
		}
	}
	for (c = 0; c < C_N; c++) {
		if (!rec.set[c]) {
			if (c < C_NSCHEMA) {
				memcpy(o, key[c].text, key[c].len + 4);
				o += key[c].len + 4;
			}
			continue;
		}
		memcpy(o, key[c].text, key[c].len);
		o += key[c].len;
		if (col_text[c]) {
			o = json_str(o, rec.v[c], rec.len[c]);
		} else {
			memcpy(o, rec.v[c], rec.len[c]);
			o += rec.len[c];
		}
	}
	*o++ = '}';
	*o++ = '\n';
	fwrite_unlocked(line, 1, (size_t)(o - line), cur->f);
}

void write_meta_line(void)
{
	struct utsname u;
	size_t i;
	int first = 1;
	char why[600];

	uname(&u);
	if (csv_out) {
		/* CSV has no room for the hook table: it is in the .meta.json beside the file */
		csv_header();
		rec_clear();
		put_i(C_TS, ts_ns(CLOCK_REALTIME));
		put_s(C_HOST, cur->host);
		put_s(C_LAYER, "meta");
		put_s(C_EVENT, "meta");
		put_i(C_PID, getpid());
		put_s(C_COMM, "istrace-probe");
		snprintf(why, sizeof(why), "clock_offset_ns=%lld;clock_uncertainty_ns=%llu;kernel=%s",
			 (long long)clock_offset_ns, (unsigned long long)(clock_width_ns / 2 + 1),
			 u.release);
		put_s(C_REASON, why);
		put_s(C_SOURCE, "probe");
		rec_write();
		fflush(cur->f);
		return;
	}
	fprintf(cur->f, "{\"ts_ns\":%lld,\"host\":", (long long)ts_ns(CLOCK_REALTIME));
	json_fputs(cur->host, 64);
	fprintf(cur->f, ",\"layer\":\"meta\",\"event\":\"meta\",\"pid\":%d,\"comm\":\"istrace-probe\","
		"\"clock_offset_ns\":%lld,\"clock_method\":\"bpf_ktime_get_ns (CLOCK_MONOTONIC) + "
		"offset; offset = CLOCK_REALTIME - CLOCK_MONOTONIC from the tightest of 32 "
		"realtime/monotonic/realtime reads at load\",\"clock_uncertainty_ns\":%llu,"
		"\"kernel\":", getpid(), (long long)clock_offset_ns,
		(unsigned long long)(clock_width_ns / 2 + 1));
	json_fputs(u.release, sizeof(u.release));
	fprintf(cur->f, ",\"netns\":%u,\"port\":%d,\"hooks\":{", cur->netns, opt.port);
	for (i = 0; i < NHOOKS; i++) {
		const struct hook *h = &hooks[i];

		if (!h->wanted && !h->off_reason[0])
			continue;
		fprintf(cur->f, "%s\"%s\":", first ? "" : ",", h->name);
		first = 0;
		if (h->link) {
			fprintf(cur->f, "\"%s\"", kind_name[h->v[h->chosen].kind]);
		} else {
			hook_why(h, why, sizeof(why));
			fputs("\"not attached: ", cur->f);
			fflush(cur->f);
			/* reuse the escaper without its quotes */
			for (char *c = why; *c; c++)
				if (*c == '"' || *c == '\\')
					*c = '\'';
			fprintf(cur->f, "%s\"", why);
		}
	}
	fputs("},\"source\":\"probe\"}\n", cur->f);
	fflush(cur->f);
}

void write_counter(const char *event, unsigned long long lost)
{
	rec_clear();
	put_i(C_TS, ts_ns(CLOCK_REALTIME));
	put_s(C_HOST, cur->host);
	put_s(C_LAYER, "meta");
	put_s(C_EVENT, event);
	put_i(C_PID, getpid());
	put_s(C_COMM, "istrace-probe");
	put_u(C_LOST, lost);
	put_u(C_EVENTS, cur->nevents);
	if (nbad) {
		char why[VAL_MAX];

		snprintf(why, sizeof(why), "%llu malformed records", nbad);
		put_s(C_REASON, why);
	}
	put_s(C_SOURCE, "probe");
	rec_write();
}

static void json_fstr(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* <out minus extension>.meta.json: totals and hook verdicts, replaced atomically */
void write_meta_json(unsigned long long lost, const char *state)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], why[600];
	const char *dot = strrchr(cur->path, '.');
	size_t n = dot && !strchr(dot, '/') ? (size_t)(dot - cur->path) : strlen(cur->path);
	struct utsname u;
	FILE *f;
	size_t i;
	int first = 1;

	snprintf(path, sizeof(path), "%.*s.meta.json", (int)n, cur->path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	uname(&u);
	fputs("{\n  \"host\": ", f);
	json_fstr(f, cur->host);
	fprintf(f, ",\n  \"state\": \"%s\",\n  \"format\": \"%s\",\n  \"events\": %llu,\n"
		"  \"lost\": %llu,\n  \"clock_offset_ns\": %lld,\n  \"clock_uncertainty_ns\": %llu,\n"
		"  \"clock_method\": \"bpf_ktime_get_ns (CLOCK_MONOTONIC) + offset measured at load\",\n"
		"  \"kernel\": ", state, csv_out ? "csv" : "jsonl", cur->nevents, lost,
		(long long)clock_offset_ns, (unsigned long long)(clock_width_ns / 2 + 1));
	json_fstr(f, u.release);
	fprintf(f, ",\n  \"netns\": %u,\n  \"port\": %d,\n  \"hooks\": {", cur->netns, opt.port);
	for (i = 0; i < NHOOKS; i++) {
		const struct hook *h = &hooks[i];

		if (!h->wanted && !h->off_reason[0])
			continue;
		fprintf(f, "%s\n    \"%s\": ", first ? "" : ",", h->name);
		first = 0;
		if (h->link && h->chosen >= 0) {
			fprintf(f, "\"%s\"", kind_name[h->v[h->chosen].kind]);
		} else {
			char line[640];

			hook_why(h, why, sizeof(why));
			snprintf(line, sizeof(line), "not attached: %s", why);
			json_fstr(f, line);
		}
	}
	fprintf(f, "\n  }\n}\n");
	if (fclose(f) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

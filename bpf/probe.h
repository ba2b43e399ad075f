/* SPDX-License-Identifier: GPL-2.0 */
/*
 * istrace-probe internals, shared by its .c files and by nothing else: the hook table
 * (probe_hooks.c) is read by the kernel facts, the ELF reader and the writer, so its
 * types live here with the options and the filter the loader fills in.
 */
#ifndef ISTRACE_PROBE_H
#define ISTRACE_PROBE_H

#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <linux/types.h>

#include "istrace_events.h"

#define MAX_VARIANTS 4
#define MAX_DISABLE 32

enum variant_kind {
	V_NONE, V_SOCKOPS, V_TP_BTF, V_RAW_TP, V_TRACEPOINT, V_FENTRY, V_KPROBE, V_USDT, V_UPROBE,
	V_URETPROBE,
	V_NKINDS
};

enum binary { BIN_KERNEL, BIN_GEN, BIN_TGTD, BIN_LIBISCSI };

struct variant {
	enum variant_kind kind;
	const char *prog;      /* BPF program name in kernel/istrace.bpf.c */
};

struct hook {
	const char *name;      /* user-facing, for --disable */
	const char *layer;
	const char *target;    /* tracepoint, kernel function, USDT name or user function */
	enum binary bin;
	struct variant v[MAX_VARIANTS];
	/* run-time state */
	bool failed[MAX_VARIANTS];
	char why[MAX_VARIANTS][160];
	int chosen;            /* index into v, or -1 */
	bool wanted;
	bool optional;         /* off unless --enable names it (costly, read by no analysis) */
	const char *why_optional; /* what it would cost and where its fact is found instead */
	char off_reason[160];  /* why the hook as a whole is off */
	struct bpf_link *link;
};

struct options {
	const char *out, *host, *layers, *usdt_path, *tgtd, *libiscsi, *block_dev;
	/* a second host in another namespace of this kernel, written to its own stream */
	const char *peer_out, *peer_host;
	char peer_netns_path[4096];
	const char *disable[MAX_DISABLE];
	int ndisable;
	const char *enable[MAX_DISABLE];
	int nenable;
	const char *exclude[ISTRACE_MAX_EXCLUDE];
	int nexclude;
	bool exclude_set;
	int netns_given;
	int cgroup_given; /* --cgroup: tasks by cgroup, so --netns selects sockets only */
	char netns_path[4096]; /* --netns as a path (PATH_MAX) */
	__u32 pids[ISTRACE_MAX_PIDS];
	int npids;
	double duration;
	int ringbuf_mb;
	int port;
	bool block_all, verbose, list;
	double stats_interval;
	double tcp_sample_ms;
	const char *format;
	bool skip_kind[V_NKINDS];
};

struct istrace; /* istrace.skel.h */

/* probe_args.c: the command line */
extern struct options opt;
extern struct istrace_filter filt; /* becomes the object's read-only cfg at load */
int parse_args(int argc, char **argv);
int check_names(void);
int resolve_block_dev(void);

/* probe_hooks.c: the hook table, variant choice, load and attach */
extern struct hook hooks[];
extern const size_t nhooks;
#define NHOOKS nhooks
extern const char *const kind_name[V_NKINDS];
extern const char *const all_layers[];
extern const size_t nlayers;
#define NLAYERS nlayers
extern struct istrace *skel;
extern struct ring_buffer *rb;
bool layer_selected(const char *layer);
void select_hooks(void);
int setup(void);
void teardown(void);
void hook_why(const struct hook *h, char *buf, size_t n);
void report_hooks(void);
void list_hooks(void);
int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap);

/* probe_kernel.c: what the running kernel offers */
extern struct btf *vmlinux_btf;
bool btf_has_tp(const char *tp);
int tracefs_has(const char *tp);
void ensure_tracefs(void);
int tracepoint_exists(const struct hook *h);
int function_exists(const struct hook *h);
bool have_local_storage(void);

/* probe_sockops.c: what the sock_ops variant needs from the machine */
const char *cgroup2_root(void);
int iscsi_connections_up(void);
const char *drop_reason_name(__u32 r);

/* probe_elf.c: user-space binaries (istrace-gen, tgtd, libiscsi) */
extern int tgtd_pid;
const char *bin_path(enum binary b);
__u32 tgt_io_done_offset(const char *path);
int resolve_tgtd(void);
void resolve_libiscsi(void);

/* probe_event.c: one ring buffer record -> one output row */
struct syscall_info { long nr; const char *name; __u8 kind; };
extern const struct syscall_info syscalls[];
extern const size_t nsyscalls;
int handle_event(void *ctx, void *data, size_t len);

/* probe_output.c: the JSON lines / CSV stream and the .meta.json beside it.
 * One output record: a text slot per column, serialised as a JSON line (schema columns
 * always, null when unset; extra columns only when set) or as a CSV row (every column). */
enum col {
	C_TS, C_HOST, C_LAYER, C_EVENT, C_PID, C_COMM, C_CONN, C_COOKIE, C_LBA, C_BYTES, C_ITT,
	C_OPCODE, C_SEQ, C_ACK, C_CWND, C_SSTHRESH, C_SRTT, C_CA, C_INFLIGHT, C_RWND, C_SNDWND,
	C_LAT, C_DEV, C_REASON,
	C_NSCHEMA, /* extras (docs/schema.md: added at the end) */
	C_TID = C_NSCHEMA, C_NETNS, C_FD, C_RET, C_OFFSET, C_STATUS, C_AGAIN, C_LOST, C_EVENTS, C_SOURCE,
	C_N
};

/* Formatting runs once per event (tens of thousands a second on a busy path) on the
 * machine being measured: no printf per field.  Each column is kept as text with its
 * length, and a line is assembled in one buffer and handed to stdio with one fwrite.
 * The put_* helpers are inline here so that probe_event.c's calls cost no call. */
#define VAL_MAX 112

struct record {
	char v[C_N][VAL_MAX];
	unsigned char len[C_N];
	bool set[C_N];
};

/* One host's event stream.  A probe writes one, or two on a one-kernel testbed (--peer-*):
 * there one set of programs serves both ends, each program running once per call instead
 * of once per probe, and the second host's events go to a file of their own, the file a
 * second probe would have written. */
struct stream {
	const char *path, *host;
	FILE *f;
	__u32 netns;
	unsigned long long nevents;
};
#define MAX_STREAMS 2
extern struct stream streams[MAX_STREAMS];
extern int nstreams;
extern struct stream *cur; /* the stream rec_write and the meta writers write to */

extern struct record rec;
extern bool csv_out;
extern unsigned long long nbad;

static inline void rec_clear(void)
{
	memset(rec.set, 0, sizeof(rec.set));
}

static inline void put_s(enum col c, const char *s)
{
	size_t n = strnlen(s, VAL_MAX - 1);

	memcpy(rec.v[c], s, n);
	rec.v[c][n] = 0;
	rec.len[c] = (unsigned char)n;
	rec.set[c] = true;
}

/* decimal digits of v, right-aligned in buf[0..20), returns the first digit */
static inline char *utoa_end(char *end, unsigned long long v)
{
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}

static inline void put_digits(enum col c, unsigned long long v, bool neg)
{
	char tmp[24], *p = utoa_end(tmp + sizeof(tmp), v);
	size_t n = (size_t)(tmp + sizeof(tmp) - p);

	if (neg)
		*--p = '-', n++;
	memcpy(rec.v[c], p, n);
	rec.v[c][n] = 0;
	rec.len[c] = (unsigned char)n;
	rec.set[c] = true;
}

static inline void put_u(enum col c, unsigned long long v)
{
	put_digits(c, v, false);
}

static inline void put_i(enum col c, long long v)
{
	put_digits(c, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v, v < 0);
}

void rec_write(void);
void write_meta_line(void);
void write_counter(const char *event, unsigned long long lost);
void write_meta_json(unsigned long long lost, const char *state);

/* istrace-probe.c: the clock every record is put on */
extern __s64 clock_offset_ns;   /* CLOCK_REALTIME - CLOCK_MONOTONIC */
extern __u64 clock_width_ns;
__s64 ts_ns(clockid_t c);

#endif

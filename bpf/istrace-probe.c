// SPDX-License-Identifier: GPL-2.0
/*
 * istrace-probe: loads kernel/istrace.bpf.o (skeleton), picks per hook the best
 * attach method this kernel allows, and streams events as JSON lines
 * (docs/schema.md section 1) to --out as they arrive.
 *
 * Hook choice: every hook lists its variants in preference order (tp_btf, raw_tp,
 * kprobe / usdt / uprobe).  Variants whose prerequisite is missing (no BTF for the
 * tracepoint, no such tracepoint or function, binary absent) are skipped before
 * load; a variant the kernel refuses at load or attach is switched off and the
 * object is loaded again without it, so one refused hook never stops the others.
 */
#include <arpa/inet.h>
#include <elf.h>
#undef EV_NONE /* elf.h's; istrace_events.h names its own */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <linux/types.h>

#include "istrace_events.h"
#include "istrace.skel.h"

#define MAX_VARIANTS 3
#define MAX_DISABLE 32

enum variant_kind {
	V_NONE, V_TP_BTF, V_RAW_TP, V_TRACEPOINT, V_FENTRY, V_KPROBE, V_USDT, V_UPROBE, V_URETPROBE,
	V_NKINDS
};

static const char *const kind_name[] = {
	[V_NONE] = "none", [V_TP_BTF] = "tp_btf", [V_RAW_TP] = "raw_tp",
	[V_TRACEPOINT] = "tracepoint", [V_FENTRY] = "fentry", [V_KPROBE] = "kprobe", [V_USDT] = "usdt", [V_UPROBE] = "uprobe",
	[V_URETPROBE] = "uretprobe",
};

enum binary { BIN_KERNEL, BIN_GEN, BIN_TGTD, BIN_LIBISCSI };

struct variant {
	enum variant_kind kind;
	const char *prog;      /* BPF program name in istrace.bpf.c */
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
	char off_reason[160];  /* why the hook as a whole is off */
	struct bpf_link *link;
};

#define TP(n, l, t, p) { .name = n, .layer = l, .target = t, .bin = BIN_KERNEL, \
	.v = { { .kind = V_TP_BTF, .prog = p "_btf" }, { .kind = V_RAW_TP, .prog = p "_raw" } } }
#define RAWONLY(n, l, t, p) { .name = n, .layer = l, .target = t, .bin = BIN_KERNEL, \
	.v = { { .kind = V_RAW_TP, .prog = p } } }
#define KP(n, l, t, p) { .name = n, .layer = l, .target = t, .bin = BIN_KERNEL, \
	.v = { { .kind = V_FENTRY, .prog = p "_fentry" }, { .kind = V_KPROBE, .prog = p "_kp" } } }
#define USER(n, l, t, b, k, p) { .name = n, .layer = l, .target = t, .bin = b, \
	.v = { { .kind = k, .prog = p } } }

static struct hook hooks[] = {
	{ .name = "tcp_probe", .layer = "tcp", .target = "tcp_probe", .bin = BIN_KERNEL,
	  .v = { { .kind = V_TP_BTF, .prog = "tcp_probe_btf" },
		 { .kind = V_RAW_TP, .prog = "tcp_probe_raw" },
		 { .kind = V_TRACEPOINT, .prog = "tcp_probe_tp" } } },
	TP("cong_state", "tcp", "tcp_cong_state_set", "cong_state"),
	TP("retransmit", "tcp", "tcp_retransmit_skb", "retransmit"),
	TP("sock_state", "tcp", "inet_sock_set_state", "sock_state"),
	TP("rcv_space", "tcp", "tcp_rcv_space_adjust", "rcv_space"),
	TP("kfree_skb", "net", "kfree_skb", "kfree_skb"),
	TP("qdisc_enqueue", "net", "qdisc_enqueue", "qdisc_enqueue"),
	TP("bio_queue", "block", "block_bio_queue", "bio_queue"),
	TP("bio_split", "block", "block_split", "bio_split"),
	TP("bio_backmerge", "block", "block_bio_backmerge", "bio_backmerge"),
	TP("bio_frontmerge", "block", "block_bio_frontmerge", "bio_frontmerge"),
	TP("rq_issue", "block", "block_rq_issue", "rq_issue"),
	TP("rq_complete", "block", "block_rq_complete", "rq_complete"),
	TP("sys_enter", "syscall", "sys_enter", "sys_enter"),
	TP("sys_exit", "syscall", "sys_exit", "sys_exit"),
	RAWONLY("scsi_dispatch", "scsi", "scsi_dispatch_cmd_start", "scsi_start_raw"),
	RAWONLY("scsi_done", "scsi", "scsi_dispatch_cmd_done", "scsi_done_raw"),
	RAWONLY("lio_cmd_start", "scsi", "target_sequencer_start", "lio_start_raw"),
	RAWONLY("lio_cmd_done", "scsi", "target_cmd_complete", "lio_done_raw"),
	KP("kiscsi_queue", "iscsi", "iscsi_queuecommand", "kiscsi_queue"),
	KP("kiscsi_pdu", "iscsi", "iscsi_complete_pdu", "kiscsi_pdu"),
	USER("usdt_cmd_issue", "scsi", "cmd_issue", BIN_GEN, V_USDT, "usdt_cmd_issue"),
	USER("usdt_cmd_first_data", "scsi", "cmd_first_data", BIN_GEN, V_USDT,
	     "usdt_cmd_first_data"),
	USER("usdt_cmd_done", "scsi", "cmd_done", BIN_GEN, V_USDT, "usdt_cmd_done"),
	USER("tgt_rx", "iscsi", "iscsi_rx_handler", BIN_TGTD, V_UPROBE, "tgt_rx"),
	USER("tgt_tx", "iscsi", "iscsi_tx_handler", BIN_TGTD, V_UPROBE, "tgt_tx"),
	USER("tgt_execute", "iscsi", "iscsi_scsi_cmd_execute", BIN_TGTD, V_UPROBE, "tgt_execute"),
	USER("tgt_cmd_queue", "scsi", "target_cmd_queue", BIN_TGTD, V_UPROBE, "tgt_cmd_queue"),
	USER("tgt_bs_submit", "scsi", "bs_thread_cmd_submit", BIN_TGTD, V_UPROBE, "tgt_bs_submit"),
	USER("tgt_io_done", "scsi", "target_cmd_io_done", BIN_TGTD, V_UPROBE, "tgt_io_done"),
	USER("lib_cmd_entry", "iscsi", "iscsi_scsi_command_async", BIN_LIBISCSI, V_UPROBE,
	     "lib_cmd_entry"),
	USER("lib_cmd_return", "iscsi", "iscsi_scsi_command_async", BIN_LIBISCSI, V_URETPROBE,
	     "lib_cmd_return"),
	USER("lib_queue_pdu", "iscsi", "iscsi_queue_pdu", BIN_LIBISCSI, V_UPROBE, "lib_queue_pdu"),
};
#define NHOOKS (sizeof(hooks) / sizeof(hooks[0]))

static const char *const all_layers[] = { "tcp", "net", "block", "syscall", "scsi", "iscsi" };
#define NLAYERS (sizeof(all_layers) / sizeof(all_layers[0]))

/* ------------------------------------------------------------------ options */

static struct {
	const char *out, *host, *layers, *usdt_path, *tgtd, *libiscsi, *block_dev;
	const char *disable[MAX_DISABLE];
	int ndisable;
	const char *exclude[ISTRACE_MAX_EXCLUDE];
	int nexclude;
	bool exclude_set;
	int netns_given;
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
} opt = { .host = "initiator", .port = 3260, .ringbuf_mb = 16, .stats_interval = 1.0, .tcp_sample_ms = 10,
	    .exclude = { "tcpdump", "dumpcap", "ss" }, .nexclude = 3 };

static struct istrace_filter filt;
static char tgtd_bin[PATH_MAX], lib_bin[PATH_MAX];
static int tgtd_pid = -1;
static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

static void usage(FILE *f)
{
	fprintf(f,
"usage: istrace-probe --out FILE.jsonl [options]\n"
"  --host NAME          host column (initiator, target, ...); default initiator\n"
"  --netns NS           trace sockets and tasks of this network namespace\n"
"                       (name under /run/netns, or a path like /proc/PID/ns/net)\n"
"  --pid P              trace syscalls/user probes of this tgid (repeatable)\n"
"  --port N             iSCSI port: TCP events only for connections using it (3260; 0: any)\n"
"  --layers L           comma list of tcp,net,block,syscall,scsi,iscsi (default all)\n"
"  --usdt PATH          istrace-gen binary whose istrace:* USDT probes to attach\n"
"  --tgtd PID|PATH      tgtd process or binary for the uprobes\n"
"  --libiscsi PATH      libiscsi shared library for the uprobes (default: found)\n"
"  --block-dev M:m|PATH block device (or a file on it) whose requests to trace\n"
"  --block-all          block requests of every task (default: only those a traced\n"
"                       task queued, when --pid/--netns/--tgtd is given)\n"
"  --duration S         stop after S seconds (default: until SIGINT/SIGTERM)\n"
"  --disable HOOK       do not attach HOOK (repeatable; see --list-hooks)\n"
"  --skip-variant KIND  never use this attach method (tp_btf, raw_tp, tracepoint,\n"
"                       fentry, kprobe...): exercises the fallbacks\n"
"  --ringbuf-mb N       ring buffer size (default 16)\n"
"  --stats-interval S   how often the lost-event counter goes into the stream (1)\n"
"  --exclude-comm NAME  tasks named NAME are not traced by the syscall/user/block\n"
"                       probes (repeatable, max 4; default tcpdump, dumpcap, ss;\n"
"                       --exclude-comm '' clears the list)\n"
"  --format jsonl|csv   stream format (default: csv when --out ends in .csv, else\n"
"                       JSON lines); same columns, CSV loads several times faster\n"
"  --tcp-sample-ms MS   tcp_probe/rcv_space: one event per socket when cwnd,\n"
"                       ssthresh, CA state or a window changes (windows in\n"
"                       12.5%% steps), else at most every MS (default 10);\n"
"                       0 = an event for every ACK\n"
"  --list-hooks         print the hook table and exit\n"
"  -v, --verbose        libbpf messages on stderr\n");
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "host", required_argument, NULL, 'H' },
		{ "netns", required_argument, NULL, 'n' },
		{ "pid", required_argument, NULL, 'p' },
		{ "port", required_argument, NULL, 'P' },
		{ "layers", required_argument, NULL, 'l' },
		{ "usdt", required_argument, NULL, 'u' },
		{ "tgtd", required_argument, NULL, 't' },
		{ "libiscsi", required_argument, NULL, 'L' },
		{ "block-dev", required_argument, NULL, 'b' },
		{ "block-all", no_argument, NULL, 'B' },
		{ "duration", required_argument, NULL, 'd' },
		{ "disable", required_argument, NULL, 'x' },
		{ "ringbuf-mb", required_argument, NULL, 'r' },
		{ "stats-interval", required_argument, NULL, 's' },
		{ "list-hooks", no_argument, NULL, 'T' },
		{ "exclude-comm", required_argument, NULL, 'X' },
		{ "tcp-sample-ms", required_argument, NULL, 'S' },
		{ "format", required_argument, NULL, 'F' },
		{ "skip-variant", required_argument, NULL, 'K' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char *end;
	long v;
	int c;

	while ((c = getopt_long(argc, argv, "o:vh", lo, NULL)) != -1) {
		switch (c) {
		case 'o': opt.out = optarg; break;
		case 'H': opt.host = optarg; break;
		case 'n': {
			char path[PATH_MAX];
			struct stat st;

			if (strchr(optarg, '/'))
				snprintf(path, sizeof(path), "%s", optarg);
			else
				snprintf(path, sizeof(path), "/run/netns/%s", optarg);
			if (stat(path, &st)) {
				fprintf(stderr, "istrace-probe: --netns %s: %s: %s\n", optarg, path,
					strerror(errno));
				return -1;
			}
			filt.netns = (__u32)st.st_ino;
			filt.netns_tasks = 1;
			opt.netns_given = 1;
			break;
		}
		case 'p':
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || v <= 0 || v > INT_MAX || opt.npids >= ISTRACE_MAX_PIDS) {
				fprintf(stderr, "istrace-probe: --pid %s: not a process id\n", optarg);
				return -1;
			}
			opt.pids[opt.npids++] = (__u32)v;
			break;
		case 'P':
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || v < 0 || v > 65535) {
				fprintf(stderr, "istrace-probe: --port %s: not a port\n", optarg);
				return -1;
			}
			opt.port = (int)v;
			break;
		case 'l': opt.layers = optarg; break;
		case 'u': opt.usdt_path = optarg; break;
		case 't': opt.tgtd = optarg; break;
		case 'L': opt.libiscsi = optarg; break;
		case 'b': opt.block_dev = optarg; break;
		case 'B': opt.block_all = true; break;
		case 'd':
			opt.duration = strtod(optarg, &end);
			if (*end || opt.duration <= 0 || opt.duration > 1e7) {
				fprintf(stderr, "istrace-probe: --duration %s: not a positive number\n",
					optarg);
				return -1;
			}
			break;
		case 'x':
			if (opt.ndisable < MAX_DISABLE)
				opt.disable[opt.ndisable++] = optarg;
			break;
		case 'r':
			v = strtol(optarg, &end, 10);
			if (*end || v < 1 || v > 1024) {
				fprintf(stderr, "istrace-probe: --ringbuf-mb %s: 1..1024\n", optarg);
				return -1;
			}
			opt.ringbuf_mb = (int)v;
			break;
		case 's':
			opt.stats_interval = strtod(optarg, &end);
			if (*end || opt.stats_interval < 0.05 || opt.stats_interval > 3600) {
				fprintf(stderr, "istrace-probe: --stats-interval %s: 0.05..3600\n", optarg);
				return -1;
			}
			break;
		case 'T': opt.list = true; break;
		case 'K': {
			int k;

			for (k = 1; k < V_NKINDS; k++)
				if (!strcmp(optarg, kind_name[k]))
					break;
			if (k == V_NKINDS) {
				fprintf(stderr, "istrace-probe: --skip-variant %s: tp_btf, raw_tp, "
					"tracepoint, fentry, kprobe, usdt, uprobe or uretprobe\n", optarg);
				return -1;
			}
			opt.skip_kind[k] = true;
			break;
		}
		case 'F':
			if (strcmp(optarg, "jsonl") && strcmp(optarg, "csv")) {
				fprintf(stderr, "istrace-probe: --format %s: jsonl or csv\n", optarg);
				return -1;
			}
			opt.format = optarg;
			break;
		case 'S':
			opt.tcp_sample_ms = strtod(optarg, &end);
			if (*end || opt.tcp_sample_ms < 0 || opt.tcp_sample_ms > 60000) {
				fprintf(stderr, "istrace-probe: --tcp-sample-ms %s: 0..60000\n", optarg);
				return -1;
			}
			break;
		case 'X':
			if (!opt.exclude_set)
				opt.nexclude = 0;
			opt.exclude_set = true;
			if (opt.nexclude < ISTRACE_MAX_EXCLUDE && *optarg)
				opt.exclude[opt.nexclude++] = optarg;
			break;
		case 'v': opt.verbose = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "istrace-probe: unexpected argument %s\n", argv[optind]);
		return -1;
	}
	if (!opt.out && !opt.list) {
		fprintf(stderr, "istrace-probe: --out FILE is required\n");
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ kernel facts */

static struct btf *vmlinux_btf;

static bool btf_has_tp(const char *tp)
{
	char name[128];

	if (!vmlinux_btf)
		return false;
	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	return btf__find_by_name_kind(vmlinux_btf, name, BTF_KIND_TYPEDEF) > 0;
}

/* kallsyms facts, read in one pass (the file is ~100k lines): per hook, whether its
 * tracepoint (__tracepoint_<target>) and its function (<target>) exist; -1 unknown. */
static int ksym_tp[64], ksym_fn[64];
static bool ksym_done;

static void scan_kallsyms(void)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512], name[256];
	size_t i;
	int any = 0, any_tp = 0;

	ksym_done = true;
	for (i = 0; i < NHOOKS && i < 64; i++)
		ksym_tp[i] = ksym_fn[i] = 0;
	if (f) {
		while (fgets(line, sizeof(line), f)) {
			unsigned long long addr;
			char type;

			if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3)
				continue;
			any = 1;
			if (!strncmp(name, "__tracepoint_", 13))
				any_tp++;
			for (i = 0; i < NHOOKS && i < 64; i++) {
				const char *t = hooks[i].target;

				if (hooks[i].bin != BIN_KERNEL)
					continue;
				if (!strncmp(name, "__tracepoint_", 13) && !strcmp(name + 13, t))
					ksym_tp[i] = 1;
				else if (!strcmp(name, t))
					ksym_fn[i] = 1;
			}
		}
		fclose(f);
	}
	/* unreadable, or data symbols not listed (no CONFIG_KALLSYMS_ALL): let the kernel
	 * decide at load/attach time */
	for (i = 0; i < NHOOKS && i < 64; i++) {
		if (!any)
			ksym_fn[i] = -1;
		if (!any || any_tp < 50) /* a few module ones only: not a full list */
			ksym_tp[i] = -1;
	}
}

static bool btf_has_tp(const char *tp);

/* 1/0 from tracefs (events/<system>/<name>), -1 when tracefs is not mounted */
static int tracefs_has(const char *tp)
{
	static const char *const roots[] = { "/sys/kernel/tracing/events",
					      "/sys/kernel/debug/tracing/events" };
	char pattern[PATH_MAX];
	glob_t g;
	size_t i;
	int rc;

	for (i = 0; i < 2; i++) {
		if (access(roots[i], R_OK))
			continue;
		snprintf(pattern, sizeof(pattern), "%s/*/%s", roots[i], tp);
		rc = glob(pattern, 0, NULL, &g);
		if (rc == 0)
			globfree(&g);
		return rc == 0;
	}
	return -1;
}

static int tracepoint_exists(const struct hook *h)
{
	int t;

	if (btf_has_tp(h->target)) /* its BTF trace type exists: so does the tracepoint */
		return 1;
	t = tracefs_has(h->target);
	if (t >= 0)
		return t;
	if (!ksym_done)
		scan_kallsyms();
	return ksym_tp[h - hooks];
}

static int function_exists(const struct hook *h)
{
	if (!ksym_done)
		scan_kallsyms();
	return ksym_fn[h - hooks];
}

/* ------------------------------------------------------------------ names */

static const char *drop_reason_name(__u32 r)
{
	static char buf[32];
	const struct btf_type *t;
	const struct btf_enum *e;
	int id, i;

	if (vmlinux_btf) {
		id = btf__find_by_name_kind(vmlinux_btf, "skb_drop_reason", BTF_KIND_ENUM);
		if (id > 0) {
			t = btf__type_by_id(vmlinux_btf, id);
			e = btf_enum(t);
			for (i = 0; i < btf_vlen(t); i++, e++) {
				if ((__u32)e->val == r) {
					const char *n = btf__name_by_offset(vmlinux_btf, e->name_off);

					if (n && !strncmp(n, "SKB_DROP_REASON_", 16))
						n += 16;
					return n ? n : "?";
				}
			}
		}
	}
	snprintf(buf, sizeof(buf), "reason %u", r);
	return buf;
}

static const char *const ca_names[] = { "Open", "Disorder", "CWR", "Recovery", "Loss" };
static const char *const tcp_states[] = {
	"?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT",
	"CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV",
};

static const char *ca_name(__u32 s) { return s < 5 ? ca_names[s] : "?"; }
static const char *tcp_state(__u32 s) { return s < 13 ? tcp_states[s] : "?"; }

/* Traced syscalls and what their arguments carry (SYS_* bits of istrace.bpf.c):
 * 1 = 3rd argument is the size, 2 = 2nd is a count of submissions, 4 = 4th is the offset.
 * Vector calls (readv...) carry no size at entry; their exit has the bytes moved. */
static const struct { long nr; const char *name; __u8 kind; } syscalls[] = {
	{ SYS_read, "read", 1 }, { SYS_write, "write", 1 },
	{ SYS_pread64, "pread64", 1 | 4 }, { SYS_pwrite64, "pwrite64", 1 | 4 },
	{ SYS_readv, "readv", 0 }, { SYS_writev, "writev", 0 },
	{ SYS_preadv, "preadv", 4 }, { SYS_pwritev, "pwritev", 4 },
	{ SYS_recvfrom, "recvfrom", 1 }, { SYS_sendto, "sendto", 1 },
	{ SYS_recvmsg, "recvmsg", 0 }, { SYS_sendmsg, "sendmsg", 0 },
#ifdef SYS_io_uring_enter
	{ SYS_io_uring_enter, "io_uring_enter", 2 },
#endif
	{ SYS_io_submit, "io_submit", 2 },
};
#define NSYSCALLS (sizeof(syscalls) / sizeof(syscalls[0]))

static const char *sys_name(__u32 nr)
{
	static char buf[24];
	size_t i;

	for (i = 0; i < NSYSCALLS; i++)
		if (syscalls[i].nr == (long)nr)
			return syscalls[i].name;
	snprintf(buf, sizeof(buf), "sys%u", nr);
	return buf;
}

/* ------------------------------------------------------------------ output */

struct evinfo { const char *layer, *name; };
static const struct evinfo evinfo[EV_MAX] = {
	[EV_TCP_PROBE] = { "tcp", "tcp_probe" },
	[EV_CONG_STATE] = { "tcp", "cong_state" },
	[EV_RETRANSMIT] = { "tcp", "retransmit" },
	[EV_SOCK_STATE] = { "tcp", "sock_state" },
	[EV_RCV_SPACE] = { "tcp", "rcv_space" },
	[EV_SKB_DROP] = { "net", "skb_drop" },
	[EV_QDISC_ENQUEUE] = { "net", "qdisc_enqueue" },
	[EV_BIO_QUEUE] = { "block", "bio_queue" },
	[EV_BIO_SPLIT] = { "block", "bio_split" },
	[EV_BIO_MERGE] = { "block", "bio_merge" },
	[EV_RQ_ISSUE] = { "block", "rq_issue" },
	[EV_RQ_COMPLETE] = { "block", "rq_complete" },
	[EV_SYS_ENTER] = { "syscall", "enter" },
	[EV_SYS_EXIT] = { "syscall", "exit" },
	[EV_SCSI_DISPATCH] = { "scsi", "scsi_dispatch" },
	[EV_SCSI_DONE] = { "scsi", "scsi_done" },
	[EV_KISCSI_QUEUE] = { "iscsi", "kiscsi_queue" },
	[EV_KISCSI_PDU] = { "iscsi", "kiscsi_pdu" },
	[EV_LIO_CMD_START] = { "scsi", "lio_cmd_start" },
	[EV_LIO_CMD_DONE] = { "scsi", "lio_cmd_done" },
	[EV_USDT_ISSUE] = { "scsi", "cmd_issue" },
	[EV_USDT_FIRST_DATA] = { "scsi", "cmd_first_data" },
	[EV_USDT_DONE] = { "scsi", "cmd_done" },
	[EV_LIB_CMD] = { "iscsi", "lib_cmd_issue" },
	[EV_LIB_QUEUE_PDU] = { "iscsi", "lib_queue_pdu" },
	[EV_TGT_RX] = { "iscsi", "tgt_rx" },
	[EV_TGT_TX] = { "iscsi", "tgt_tx" },
	[EV_TGT_EXECUTE] = { "iscsi", "tgt_execute" },
	[EV_TGT_QUEUE] = { "scsi", "tgt_cmd_queue" },
	[EV_TGT_BS_SUBMIT] = { "scsi", "tgt_bs_submit" },
	[EV_TGT_IO_DONE] = { "scsi", "tgt_io_done" },
};

static FILE *out;
static __s64 clock_offset_ns;   /* CLOCK_REALTIME - CLOCK_MONOTONIC */
static __u64 clock_width_ns;
static unsigned long long nevents, nbad;

/* One output record: a text slot per column, serialised as a JSON line (schema columns
 * always, null when unset; extra columns only when set) or as a CSV row (every column). */
enum col {
	C_TS, C_HOST, C_LAYER, C_EVENT, C_PID, C_COMM, C_CONN, C_COOKIE, C_LBA, C_BYTES, C_ITT,
	C_OPCODE, C_SEQ, C_ACK, C_CWND, C_SSTHRESH, C_SRTT, C_CA, C_INFLIGHT, C_RWND, C_SNDWND,
	C_LAT, C_DEV, C_REASON,
	C_NSCHEMA, /* extras (docs/schema.md: added at the end) */
	C_TID = C_NSCHEMA, C_NETNS, C_FD, C_RET, C_OFFSET, C_STATUS, C_LOST, C_EVENTS, C_SOURCE,
	C_N
};

static const char *const col_name[C_N] = {
	"ts_ns", "host", "layer", "event", "pid", "comm", "conn", "cookie", "lba", "bytes", "itt",
	"opcode", "seq", "ack", "cwnd", "ssthresh", "srtt_us", "ca_state", "inflight", "rwnd",
	"snd_wnd", "lat_ns", "dev", "reason", "tid", "netns", "fd", "ret", "offset", "status",
	"lost", "events", "source",
};

static const bool col_text[C_N] = {
	[C_HOST] = true, [C_LAYER] = true, [C_EVENT] = true, [C_COMM] = true, [C_CONN] = true,
	[C_CA] = true, [C_DEV] = true, [C_REASON] = true, [C_SOURCE] = true,
};

/* Formatting runs once per event (tens of thousands a second on a busy path) on the
 * machine being measured: no printf per field.  Each column is kept as text with its
 * length, and a line is assembled in one buffer and handed to stdio with one fwrite. */
#define VAL_MAX 112

static struct {
	char v[C_N][VAL_MAX];
	unsigned char len[C_N];
	bool set[C_N];
} rec;

static bool csv_out;

static void rec_clear(void)
{
	memset(rec.set, 0, sizeof(rec.set));
}

static void put_s(enum col c, const char *s)
{
	size_t n = strnlen(s, VAL_MAX - 1);

	memcpy(rec.v[c], s, n);
	rec.v[c][n] = 0;
	rec.len[c] = (unsigned char)n;
	rec.set[c] = true;
}

/* decimal digits of v, right-aligned in buf[0..20), returns the first digit */
static char *utoa_end(char *end, unsigned long long v)
{
	do {
		*--end = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return end;
}

static void put_digits(enum col c, unsigned long long v, bool neg)
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

static void put_u(enum col c, unsigned long long v)
{
	put_digits(c, v, false);
}

static void put_i(enum col c, long long v)
{
	put_digits(c, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v, v < 0);
}

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

	fwrite(buf, 1, (size_t)(json_str(buf, s, n) - buf), out);
}

static void csv_header(void)
{
	int c;

	for (c = 0; c < C_N; c++)
		fprintf(out, "%s%s", c ? "," : "", col_name[c]);
	fputc('\n', out);
}

static void rec_write(void)
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
		fwrite_unlocked(line, 1, (size_t)(o - line), out);
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
	fwrite_unlocked(line, 1, (size_t)(o - line), out);
}

static void fmt_addr(char *buf, size_t n, int family, const __u8 *a, __u16 port)
{
	char tmp[INET6_ADDRSTRLEN];

	/* RFC 5952 text (what inet_ntop and Python's ipaddress print), as the decoder does */
	if (family == AF_INET6 && inet_ntop(AF_INET6, a, tmp, sizeof(tmp)))
		snprintf(buf, n, "[%s]:%u", tmp, port);
	else
		snprintf(buf, n, "%u.%u.%u.%u:%u", a[0], a[1], a[2], a[3], port);
}

static int handle_event(void *ctx, void *data, size_t len)
{
	const struct istrace_event *e = data;
	const struct evinfo *info;
	char a[64], b[64], buf[112];
	bool block, syscall;
	__u32 f;

	(void)ctx;
	if (len < sizeof(*e) || e->type >= EV_MAX || !evinfo[e->type].name) {
		nbad++;
		return 0;
	}
	info = &evinfo[e->type];
	f = e->flags;
	block = !strcmp(info->layer, "block");
	syscall = !strcmp(info->layer, "syscall");
	rec_clear();
	put_i(C_TS, (__s64)e->ts_ns + clock_offset_ns);
	put_s(C_HOST, opt.host);
	put_s(C_LAYER, info->layer);
	if (syscall) {
		/* "<call>_enter"/"<call>_exit", made once per call and kind */
		static char names[512][2][32];
		char *name = e->reason < 512 ? names[e->reason][e->type == EV_SYS_EXIT] : buf;

		if (!name[0] || name == buf)
			snprintf(name, 32, "%s_%s", sys_name(e->reason), info->name);
		put_s(C_EVENT, name);
	} else {
		put_s(C_EVENT, info->name);
	}
	put_u(C_PID, e->pid);
	{
		size_t n = strnlen(e->comm, ISTRACE_COMM_LEN);

		memcpy(buf, e->comm, n);
		buf[n] = 0;
		put_s(C_COMM, buf);
	}
	if (f & F_CONN) {
		/* initiator side first: the end not on the iSCSI port is the initiator */
		bool local_is_target = opt.port && e->sport == opt.port;

		/* the text of the last connection is kept: most events are on one */
		static struct { __u8 saddr[16], daddr[16]; __u16 sport, dport, family; } last_key;
		static char last_conn[VAL_MAX];
		struct { __u8 saddr[16], daddr[16]; __u16 sport, dport, family; } key;

		memset(&key, 0, sizeof(key));
		memcpy(key.saddr, e->saddr, 16);
		memcpy(key.daddr, e->daddr, 16);
		key.sport = e->sport;
		key.dport = e->dport;
		key.family = e->family;
		if (!last_conn[0] || memcmp(&key, &last_key, sizeof(key))) {
			fmt_addr(a, sizeof(a), e->family, e->saddr, e->sport);
			fmt_addr(b, sizeof(b), e->family, e->daddr, e->dport);
			snprintf(last_conn, sizeof(last_conn), "%.55s-%.55s",
				 local_is_target ? b : a, local_is_target ? a : b);
			memcpy(&last_key, &key, sizeof(key));
		}
		put_s(C_CONN, last_conn);
		if (e->cookie)
			put_u(C_COOKIE, e->cookie);
	}
	if (f & F_LBA)
		put_u(syscall ? C_OFFSET : C_LBA, e->lba);
	if (f & F_BYTES)
		put_u(C_BYTES, e->bytes);
	if (f & F_ITT)
		put_u(C_ITT, e->itt);
	if ((f & F_OPCODE) && !block)
		put_u(C_OPCODE, e->opcode);
	if (f & F_SEQ)
		put_u(C_SEQ, e->seq);
	if (f & F_ACK)
		put_u(C_ACK, e->ack);
	if (f & F_CWND) {
		put_u(C_CWND, e->cwnd);
		put_u(C_SSTHRESH, e->ssthresh);
		put_u(C_SRTT, e->srtt_us);
		put_u(C_INFLIGHT, e->inflight);
		put_u(C_SNDWND, e->snd_wnd);
	}
	if (f & (F_CWND | F_RWND))
		put_u(C_RWND, e->rwnd);
	if ((f & F_CA) && e->type != EV_SOCK_STATE)
		put_s(C_CA, ca_name(e->ca_state));
	if (f & F_LAT)
		put_u(C_LAT, e->lat_ns);
	if (f & F_DEV) {
		if (block)
			snprintf(buf, sizeof(buf), "%u:%u", e->dev >> 20, e->dev & 0xfffff);
		else
			snprintf(buf, sizeof(buf), "ifindex:%u", e->dev);
		put_s(C_DEV, buf);
	}
	switch (e->type) {
	case EV_SKB_DROP:
		put_s(C_REASON, drop_reason_name(e->reason));
		break;
	case EV_SOCK_STATE:
		snprintf(buf, sizeof(buf), "%s->%s", tcp_state(e->reason), tcp_state(e->ca_state));
		put_s(C_REASON, buf);
		break;
	case EV_CONG_STATE:
		snprintf(buf, sizeof(buf), "from %s", ca_name(e->reason));
		put_s(C_REASON, buf);
		break;
	case EV_QDISC_ENQUEUE:
		snprintf(buf, sizeof(buf), "qlen=%u", e->reason);
		put_s(C_REASON, buf);
		break;
	case EV_BIO_QUEUE: case EV_BIO_SPLIT: case EV_BIO_MERGE:
	case EV_RQ_ISSUE: case EV_RQ_COMPLETE: {
		static const char *const ops[] = { "read", "write", "flush", "discard" };
		const char *op = e->opcode < 4 ? ops[e->opcode] : "other";

		if (e->type == EV_BIO_SPLIT)
			snprintf(buf, sizeof(buf), "%s;split_at=%u", op, e->reason);
		else if (e->type == EV_BIO_MERGE)
			snprintf(buf, sizeof(buf), "%s;%s", op, e->reason ? "front" : "back");
		else
			snprintf(buf, sizeof(buf), "%s", op);
		put_s(C_REASON, buf);
		break;
	}
	default:
		break;
	}
	put_u(C_TID, e->tid);
	if (e->netns)
		put_u(C_NETNS, e->netns);
	if (e->type == EV_SYS_ENTER)
		put_i(C_FD, e->status);
	else if (e->type == EV_SYS_EXIT)
		put_i(C_RET, e->status);
	else if (f & F_STATUS)
		put_i(C_STATUS, e->status);
	put_s(C_SOURCE, "probe");
	rec_write();
	nevents++;
	return 0;
}

/* ------------------------------------------------------------------ clock */

static __s64 ts_ns(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return (__s64)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* REALTIME - MONOTONIC from the tightest of several REALTIME/MONOTONIC/REALTIME
 * sandwiches: the offset error is at most half that sandwich's width. */
static void measure_clock(void)
{
	__u64 best = ~0ULL;
	int i;

	for (i = 0; i < 32; i++) {
		__s64 r1 = ts_ns(CLOCK_REALTIME), m = ts_ns(CLOCK_MONOTONIC);
		__s64 r2 = ts_ns(CLOCK_REALTIME);

		if ((__u64)(r2 - r1) < best) {
			best = (__u64)(r2 - r1);
			clock_offset_ns = r1 + (r2 - r1) / 2 - m;
		}
	}
	clock_width_ns = best;
}

/* ------------------------------------------------------------------ hooks */

static bool layer_selected(const char *layer)
{
	const char *p = opt.layers;
	size_t n = strlen(layer);

	if (!p || !*p || !strcmp(p, "all"))
		return true;
	while (*p) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);

		if (len == n && !strncmp(p, layer, n))
			return true;
		if (!c)
			break;
		p = c + 1;
	}
	return false;
}

static bool hook_disabled(const struct hook *h)
{
	int i;

	for (i = 0; i < opt.ndisable; i++)
		if (!strcmp(opt.disable[i], h->name) || !strcmp(opt.disable[i], h->target) ||
		    !strcmp(opt.disable[i], h->layer))
			return true;
	return false;
}

/* File bytes at the start of a function of a 64-bit ELF binary (.dynsym or .symtab),
 * or -1.  Only what the uprobe placement below needs: no relocation, no debug info. */
static int func_bytes(const char *path, const char *func, unsigned char *buf, size_t n)
{
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	const Elf64_Phdr *ph;
	struct stat st;
	Elf64_Addr addr = 0;
	unsigned char *m;
	int fd, ret = -1;
	size_t i, j;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || st.st_size < (off_t)sizeof(*eh)) {
		close(fd);
		return -1;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	eh = (const Elf64_Ehdr *)m;
#define IN_FILE(off, len) ((off) <= (Elf64_Off)st.st_size && (len) <= (Elf64_Off)st.st_size - (off))
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(*sh) || eh->e_phentsize != sizeof(*ph) ||
	    !IN_FILE(eh->e_shoff, (Elf64_Off)eh->e_shnum * sizeof(*sh)) ||
	    !IN_FILE(eh->e_phoff, (Elf64_Off)eh->e_phnum * sizeof(*ph)))
		goto out;
	sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	for (i = 0; i < eh->e_shnum && !addr; i++) {
		const Elf64_Shdr *strs;

		if ((sh[i].sh_type != SHT_DYNSYM && sh[i].sh_type != SHT_SYMTAB) ||
		    sh[i].sh_link >= eh->e_shnum || !IN_FILE(sh[i].sh_offset, sh[i].sh_size))
			continue;
		strs = &sh[sh[i].sh_link];
		if (!IN_FILE(strs->sh_offset, strs->sh_size))
			continue;
		for (j = 0; j < sh[i].sh_size / sizeof(Elf64_Sym); j++) {
			const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset) + j;
			const char *name = (const char *)m + strs->sh_offset + sym->st_name;
			size_t room = strs->sh_size > sym->st_name ? strs->sh_size - sym->st_name : 0;

			if (ELF64_ST_TYPE(sym->st_info) == STT_FUNC && sym->st_value &&
			    room > strlen(func) && !strncmp(name, func, room) && !name[strlen(func)]) {
				addr = sym->st_value;
				break;
			}
		}
	}
	ph = (const Elf64_Phdr *)(m + eh->e_phoff);
	for (i = 0; addr && i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD || addr < ph[i].p_vaddr ||
		    addr - ph[i].p_vaddr + n > ph[i].p_filesz)
			continue;
		if (IN_FILE(addr - ph[i].p_vaddr + ph[i].p_offset, n)) {
			memcpy(buf, m + (addr - ph[i].p_vaddr + ph[i].p_offset), n);
			ret = 0;
		}
		break;
	}
#undef IN_FILE
out:
	munmap(m, (size_t)st.st_size);
	return ret;
}

/* A uprobe on an instruction the kernel cannot emulate (x86: anything but nop, push,
 * jmp, call, jcc) single-steps a copy of it: a second trap, 11 us per hit on the
 * development VM against 0.6 us.  Debian 12's tgtd (tgt 1.0.85) starts
 * target_cmd_io_done with movs; when its first bytes are exactly these, the probe goes
 * on the `je` at +0x1c instead, which every call passes with cmd in rdx and result in
 * esi.  Any other build keeps the probe at the entry. */
static __u32 tgt_io_done_offset(const char *path)
{
#if defined(__x86_64__)
	static const unsigned char want[] = {
		0x48, 0x89, 0xfa,                         /* mov %rdi,%rdx */
		0x8b, 0x7f, 0x40,                         /* mov 0x40(%rdi),%edi */
		0x48, 0x8b, 0x0a,                         /* mov (%rdx),%rcx */
		0x48, 0x8b, 0x82, 0xd8, 0x01, 0x00, 0x00, /* mov 0x1d8(%rdx),%rax */
		0x8b, 0x49, 0x0c,                         /* mov 0xc(%rcx),%ecx */
		0x89, 0xb2, 0xb0, 0x00, 0x00, 0x00,       /* mov %esi,0xb0(%rdx) */
		0x83, 0xff, 0x01,                         /* cmp $0x1,%edi */
		0x74,                                     /* je ... (probed) */
	};
	unsigned char got[sizeof(want)];

	if (path && !func_bytes(path, "target_cmd_io_done", got, sizeof(got)) &&
	    !memcmp(got, want, sizeof(want)))
		return sizeof(want) - 1;
#else
	(void)path;
#endif
	return 0;
}

static const char *bin_path(enum binary b)
{
	switch (b) {
	case BIN_GEN: return opt.usdt_path;
	case BIN_TGTD: return tgtd_bin[0] ? tgtd_bin : NULL;
	case BIN_LIBISCSI: return lib_bin[0] ? lib_bin : NULL;
	default: return NULL;
	}
}

/* tp_btf variants that keep state in socket / task local storage (5.11 for tracing) */
static bool needs_local_storage(const char *prog)
{
	static const char *const progs[] = { "tcp_probe_btf", "rcv_space_btf", "sys_enter_btf",
					     "sys_exit_btf" };
	size_t i;

	for (i = 0; i < sizeof(progs) / sizeof(progs[0]); i++)
		if (!strcmp(prog, progs[i]))
			return true;
	return false;
}

static bool have_local_storage(void)
{
	static int have = -1;

	if (have < 0)
		have = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_SK_STORAGE, NULL) == 1 &&
		       libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) == 1;
	return have;
}

/* Decide, before load, which variant each hook will try (first viable, not failed). */
static void choose_variants(void)
{
	size_t i;
	int j;

	for (i = 0; i < NHOOKS; i++) {
		struct hook *h = &hooks[i];

		h->chosen = -1;
		if (!h->wanted)
			continue;
		for (j = 0; j < MAX_VARIANTS && h->v[j].kind != V_NONE; j++) {
			const char *path;

			if (!h->failed[j] && opt.skip_kind[h->v[j].kind]) {
				snprintf(h->why[j], sizeof(h->why[j]), "skipped by --skip-variant");
				h->failed[j] = true;
			}
			if (h->failed[j])
				continue;
			switch (h->v[j].kind) {
			case V_TP_BTF:
				if (!btf_has_tp(h->target)) {
					snprintf(h->why[j], sizeof(h->why[j]),
						 "no BTF for tracepoint %s", h->target);
					h->failed[j] = true;
				} else if (needs_local_storage(h->v[j].prog) && !have_local_storage()) {
					snprintf(h->why[j], sizeof(h->why[j]),
						 "no socket/task local storage in this kernel");
					h->failed[j] = true;
				}
				break;
			case V_RAW_TP:
				if (tracepoint_exists(h) == 0) {
					snprintf(h->why[j], sizeof(h->why[j]),
						 "tracepoint %s not in this kernel", h->target);
					h->failed[j] = true;
				}
				break;
			case V_TRACEPOINT:
				if (tracefs_has(h->target) != 1) {
					snprintf(h->why[j], sizeof(h->why[j]), "%s",
						 tracefs_has(h->target) < 0 ? "tracefs not mounted" :
						 "tracepoint not in this kernel");
					h->failed[j] = true;
				}
				break;
			case V_FENTRY:
			case V_KPROBE:
				if (function_exists(h) == 0) {
					snprintf(h->why[j], sizeof(h->why[j]),
						 "function %s not in this kernel", h->target);
					h->failed[j] = true;
				}
				break;
			case V_USDT: case V_UPROBE: case V_URETPROBE:
				path = bin_path(h->bin);
				if (!path || access(path, R_OK)) {
					snprintf(h->why[j], sizeof(h->why[j]), "%s",
						 h->bin == BIN_GEN ? "no --usdt istrace-gen binary given" :
						 h->bin == BIN_TGTD ? "no --tgtd PID|PATH given" :
						 "libiscsi not found (--libiscsi PATH)");
					h->failed[j] = true;
				}
				break;
			default:
				break;
			}
			if (!h->failed[j]) {
				h->chosen = j;
				break;
			}
		}
	}
}

static char last_failed_prog[64], last_failed_msg[160], core_missing[1024]; /* |prog|... */

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[1024];
	const char *p, *q;
	va_list ap2;

	va_copy(ap2, ap);
	if (opt.verbose) /* whole verifier logs: they exceed any line buffer */
		vfprintf(stderr, fmt, ap2);
	va_end(ap2);
	vsnprintf(line, sizeof(line), fmt, ap);
	/* "prog 'NAME': failed to load: -13" / "prog 'NAME': BPF program load failed: ..." */
	p = strstr(line, "prog '");
	if (p && strstr(line, "no matching targets")) {
		size_t len = strlen(core_missing);

		q = strchr(p + 6, '\'');
		if (q && len + (size_t)(q - p) + 2 < sizeof(core_missing))
			snprintf(core_missing + len, sizeof(core_missing) - len, "|%.*s|",
				 (int)(q - p - 6), p + 6);
	}
	if (p && (strstr(line, "failed to load") || strstr(line, "load failed") ||
		  strstr(line, "failed to resolve CO-RE") || strstr(line, "relo"))) {
		p += 6;
		q = strchr(p, '\'');
		if (q && (size_t)(q - p) < sizeof(last_failed_prog)) {
			memcpy(last_failed_prog, p, q - p);
			last_failed_prog[q - p] = 0;
			q = strstr(line, "': ");
			snprintf(last_failed_msg, sizeof(last_failed_msg), "%.120s", q ? q + 3 : line);
			last_failed_msg[strcspn(last_failed_msg, "\n")] = 0;
		}
	}
	(void)level;
	return 0;
}

static struct istrace *skel;
static struct ring_buffer *rb;

static void teardown(void)
{
	size_t i;

	for (i = 0; i < NHOOKS; i++) {
		bpf_link__destroy(hooks[i].link);
		hooks[i].link = NULL;
	}
	ring_buffer__free(rb);
	rb = NULL;
	istrace__destroy(skel);
	skel = NULL;
}

static struct hook *hook_of_prog(const char *prog, int *vi)
{
	size_t i;
	int j;

	for (i = 0; i < NHOOKS; i++)
		for (j = 0; j < MAX_VARIANTS && hooks[i].v[j].kind != V_NONE; j++)
			if (!strcmp(hooks[i].v[j].prog, prog)) {
				*vi = j;
				return &hooks[i];
			}
	return NULL;
}

static int open_and_load(void)
{
	struct bpf_program *p;
	int err, j;

	skel = istrace__open();
	if (!skel) {
		fprintf(stderr, "istrace-probe: cannot open the BPF object: %s\n", strerror(errno));
		return -2;
	}
	{
		__u32 size = 1u << 20; /* ring buffers are a power of two pages */

		while (size < ((__u32)opt.ringbuf_mb << 20))
			size <<= 1;
		bpf_map__set_max_entries(skel->maps.events, size);
		/* a wake-up per 256 KiB written: more often costs irq_works, much less often
		 * lets a burst fill the ring before the reader runs */
		filt.wakeup_bytes = 256u << 10;
	}
	skel->rodata->cfg = filt;
	if (!have_local_storage()) { /* the variants using them are off (choose_variants) */
		bpf_map__set_autocreate(skel->maps.sock_last_sk, false);
		bpf_map__set_autocreate(skel->maps.sys_start_task, false);
	}
	bpf_object__for_each_program(p, skel->obj) {
		struct hook *h = hook_of_prog(bpf_program__name(p), &j);

		bpf_program__set_autoload(p, h && h->chosen == j);
	}
	last_failed_prog[0] = 0;
	err = istrace__load(skel);
	if (!err)
		return 0;
	/* Find which program the kernel refused, switch that variant off, retry. */
	if (last_failed_prog[0]) {
		struct hook *h = hook_of_prog(last_failed_prog, &j);

		char needle[72];

		snprintf(needle, sizeof(needle), "|%s|", last_failed_prog);
		if (h && strstr(core_missing, needle)) {
			snprintf(h->why[j], sizeof(h->why[j]),
				 "a kernel type it reads is not in this kernel's BTF (CO-RE)");
			h->failed[j] = true;
			return -1;
		}
		if (h) {
			snprintf(h->why[j], sizeof(h->why[j]), "load refused: %.130s", last_failed_msg);
			h->failed[j] = true;
			return -1;
		}
	}
	fprintf(stderr, "istrace-probe: cannot load the BPF object: %s\n", strerror(-err));
	return -2;
}

static int attach_one(struct hook *h)
{
	struct variant *v = &h->v[h->chosen];
	struct bpf_program *p = bpf_object__find_program_by_name(skel->obj, v->prog);
	const char *path = bin_path(h->bin);
	pid_t pid = (h->bin == BIN_TGTD && tgtd_pid > 0) ? tgtd_pid : -1;

	if (!p)
		return -ENOENT;
	switch (v->kind) {
	case V_USDT:
		h->link = bpf_program__attach_usdt(p, -1, path, "istrace", h->target, NULL);
		break;
	case V_UPROBE: case V_URETPROBE: {
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .func_name = h->target,
			    .retprobe = v->kind == V_URETPROBE);
		size_t off = !strcmp(v->prog, "tgt_io_done") ? filt.tgt_io_done_off : 0;

		h->link = bpf_program__attach_uprobe_opts(p, pid, path, off, &uo);
		break;
	}
	case V_KPROBE:
		h->link = bpf_program__attach_kprobe(p, false, h->target);
		break;
	default:
		h->link = bpf_program__attach(p);
		break;
	}
	if (!h->link)
		return -errno;
	return 0;
}

/* Load and attach; returns 0, or -1 on a fatal error.  Each refused variant costs one
 * reload; there are at most NHOOKS * MAX_VARIANTS of them. */
static int setup(void)
{
	int round, err;
	size_t i;

	for (round = 0; round < (int)(NHOOKS * MAX_VARIANTS) + 2; round++) {
		bool retry = false;

		choose_variants();
		err = open_and_load();
		if (err == -2)
			return -1;
		if (err == -1) {
			teardown();
			continue;
		}
		for (i = 0; i < NHOOKS; i++) {
			struct hook *h = &hooks[i];

			if (h->chosen < 0)
				continue;
			err = attach_one(h);
			if (err) {
				snprintf(h->why[h->chosen], sizeof(h->why[h->chosen]),
					 "attach refused: %s", strerror(-err));
				h->failed[h->chosen] = true;
				/* another variant needs loading: start over without this one */
				if (h->chosen + 1 < MAX_VARIANTS && h->v[h->chosen + 1].kind != V_NONE)
					retry = true;
				h->chosen = -1;
			}
		}
		if (!retry)
			return 0;
		teardown();
	}
	fprintf(stderr, "istrace-probe: could not settle on a set of hooks\n");
	return -1;
}

static void hook_why(const struct hook *h, char *buf, size_t n)
{
	size_t o = 0;
	int j;

	buf[0] = 0;
	if (h->off_reason[0]) {
		snprintf(buf, n, "%s", h->off_reason);
		return;
	}
	for (j = 0; j < MAX_VARIANTS && h->v[j].kind != V_NONE && o < n; j++)
		o += snprintf(buf + o, n - o, "%s%s: %s", j ? "; " : "", kind_name[h->v[j].kind],
			      h->why[j][0] ? h->why[j] : "not tried");
}

static void report_hooks(void)
{
	char why[600];
	size_t i, l;

	for (i = 0; i < NHOOKS; i++) {
		const struct hook *h = &hooks[i];

		if (!h->wanted && !h->off_reason[0])
			continue;
		if (h->link) {
			fprintf(stderr, "istrace-probe: hook %-20s (%s) attached with %s\n", h->name,
				h->layer, kind_name[h->v[h->chosen].kind]);
		} else {
			hook_why(h, why, sizeof(why));
			fprintf(stderr, "istrace-probe: hook %-20s (%s) not attached: %s\n", h->name,
				h->layer, why);
		}
	}
	for (l = 0; l < NLAYERS; l++) {
		char kinds[64] = "";
		int on = 0, total = 0;

		if (!layer_selected(all_layers[l])) {
			fprintf(stderr, "istrace-probe: layer %-7s not attached: not in --layers\n",
				all_layers[l]);
			continue;
		}
		for (i = 0; i < NHOOKS; i++) {
			const struct hook *h = &hooks[i];
			const char *k;

			if (strcmp(h->layer, all_layers[l]))
				continue;
			total++;
			if (!h->link)
				continue;
			on++;
			k = kind_name[h->v[h->chosen].kind];
			if (!strstr(kinds, k) && strlen(kinds) + strlen(k) + 2 < sizeof(kinds)) {
				if (kinds[0])
					strcat(kinds, ",");
				strcat(kinds, k);
			}
		}
		if (on)
			fprintf(stderr, "istrace-probe: layer %-7s attached with %s (%d of %d hooks)\n",
				all_layers[l], kinds, on, total);
		else
			fprintf(stderr, "istrace-probe: layer %-7s not attached: no hook available "
				"on this kernel/setup (see the hook lines above)\n", all_layers[l]);
	}
}

static void write_meta_line(void)
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
		put_s(C_HOST, opt.host);
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
		fflush(out);
		return;
	}
	fprintf(out, "{\"ts_ns\":%lld,\"host\":", (long long)ts_ns(CLOCK_REALTIME));
	json_fputs(opt.host, 64);
	fprintf(out, ",\"layer\":\"meta\",\"event\":\"meta\",\"pid\":%d,\"comm\":\"istrace-probe\","
		"\"clock_offset_ns\":%lld,\"clock_method\":\"bpf_ktime_get_ns (CLOCK_MONOTONIC) + "
		"offset; offset = CLOCK_REALTIME - CLOCK_MONOTONIC from the tightest of 32 "
		"realtime/monotonic/realtime reads at load\",\"clock_uncertainty_ns\":%llu,"
		"\"kernel\":", getpid(), (long long)clock_offset_ns,
		(unsigned long long)(clock_width_ns / 2 + 1));
	json_fputs(u.release, sizeof(u.release));
	fprintf(out, ",\"netns\":%u,\"port\":%d,\"hooks\":{", filt.netns, opt.port);
	for (i = 0; i < NHOOKS; i++) {
		const struct hook *h = &hooks[i];

		if (!h->wanted && !h->off_reason[0])
			continue;
		fprintf(out, "%s\"%s\":", first ? "" : ",", h->name);
		first = 0;
		if (h->link) {
			fprintf(out, "\"%s\"", kind_name[h->v[h->chosen].kind]);
		} else {
			hook_why(h, why, sizeof(why));
			fputs("\"not attached: ", out);
			fflush(out);
			/* reuse the escaper without its quotes */
			for (char *c = why; *c; c++)
				if (*c == '"' || *c == '\\')
					*c = '\'';
			fprintf(out, "%s\"", why);
		}
	}
	fputs("},\"source\":\"probe\"}\n", out);
	fflush(out);
}

static unsigned long long read_lost(void)
{
	int ncpu = libbpf_num_possible_cpus(), i;
	unsigned long long sum = 0;
	__u64 *vals;
	__u32 k = 0;

	if (ncpu <= 0 || !skel)
		return 0;
	vals = calloc((size_t)ncpu, sizeof(*vals));
	if (!vals)
		return 0;
	if (!bpf_map_lookup_elem(bpf_map__fd(skel->maps.lost), &k, vals))
		for (i = 0; i < ncpu; i++)
			sum += vals[i];
	free(vals);
	return sum;
}

static void write_counter(const char *event, unsigned long long lost)
{
	rec_clear();
	put_i(C_TS, ts_ns(CLOCK_REALTIME));
	put_s(C_HOST, opt.host);
	put_s(C_LAYER, "meta");
	put_s(C_EVENT, event);
	put_i(C_PID, getpid());
	put_s(C_COMM, "istrace-probe");
	put_u(C_LOST, lost);
	put_u(C_EVENTS, nevents);
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
static void write_meta_json(unsigned long long lost, const char *state)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8], why[600];
	const char *dot = strrchr(opt.out, '.');
	size_t n = dot && !strchr(dot, '/') ? (size_t)(dot - opt.out) : strlen(opt.out);
	struct utsname u;
	FILE *f;
	size_t i;
	int first = 1;

	snprintf(path, sizeof(path), "%.*s.meta.json", (int)n, opt.out);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return;
	uname(&u);
	fputs("{\n  \"host\": ", f);
	json_fstr(f, opt.host);
	fprintf(f, ",\n  \"state\": \"%s\",\n  \"format\": \"%s\",\n  \"events\": %llu,\n"
		"  \"lost\": %llu,\n  \"clock_offset_ns\": %lld,\n  \"clock_uncertainty_ns\": %llu,\n"
		"  \"clock_method\": \"bpf_ktime_get_ns (CLOCK_MONOTONIC) + offset measured at load\",\n"
		"  \"kernel\": ", state, csv_out ? "csv" : "jsonl", nevents, lost,
		(long long)clock_offset_ns, (unsigned long long)(clock_width_ns / 2 + 1));
	json_fstr(f, u.release);
	fprintf(f, ",\n  \"netns\": %u,\n  \"port\": %d,\n  \"hooks\": {", filt.netns, opt.port);
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

/* ------------------------------------------------------------------ setup helpers */

static int resolve_tgtd(void)
{
	char *end;
	long pid;
	ssize_t n;
	char link[64];

	if (!opt.tgtd)
		return 0;
	pid = strtol(opt.tgtd, &end, 10);
	if (!*end && pid > 0) {
		snprintf(link, sizeof(link), "/proc/%ld/exe", pid);
		n = readlink(link, tgtd_bin, sizeof(tgtd_bin) - 1);
		if (n <= 0) {
			fprintf(stderr, "istrace-probe: --tgtd %ld: no such process\n", pid);
			return -1;
		}
		tgtd_bin[n] = 0;
		/* a binary replaced on disk reads "... (deleted)": use the live image */
		if (strstr(tgtd_bin, " (deleted)"))
			snprintf(tgtd_bin, sizeof(tgtd_bin), "/proc/%ld/exe", pid);
		tgtd_pid = (int)pid;
		if (opt.npids < ISTRACE_MAX_PIDS)
			opt.pids[opt.npids++] = (__u32)pid;
	} else {
		snprintf(tgtd_bin, sizeof(tgtd_bin), "%s", opt.tgtd);
		if (access(tgtd_bin, R_OK)) {
			fprintf(stderr, "istrace-probe: --tgtd %s: %s\n", opt.tgtd, strerror(errno));
			return -1;
		}
	}
	return 0;
}

static void resolve_libiscsi(void)
{
	static const char *const cand[] = {
		"/usr/lib/x86_64-linux-gnu/libiscsi.so.7", "/usr/lib/aarch64-linux-gnu/libiscsi.so.7",
		"/usr/lib64/libiscsi.so.7", "/usr/lib/libiscsi.so.7", "/usr/local/lib/libiscsi.so.7",
	};
	size_t i;

	if (opt.libiscsi) {
		snprintf(lib_bin, sizeof(lib_bin), "%s", opt.libiscsi);
		return;
	}
	for (i = 0; i < sizeof(cand) / sizeof(cand[0]); i++)
		if (!access(cand[i], R_OK)) {
			snprintf(lib_bin, sizeof(lib_bin), "%s", cand[i]);
			return;
		}
}

/* dev_t of the whole disk holding M:m or a file; kernel encoding (major << 20 | minor). */
static int resolve_block_dev(void)
{
	unsigned int maj, min;
	struct stat st;
	char path[PATH_MAX], buf[64];
	FILE *f;

	if (!opt.block_dev)
		return 0;
	if (sscanf(opt.block_dev, "%u:%u", &maj, &min) != 2) {
		if (stat(opt.block_dev, &st)) {
			fprintf(stderr, "istrace-probe: --block-dev %s: %s\n", opt.block_dev,
				strerror(errno));
			return -1;
		}
		if (S_ISBLK(st.st_mode)) {
			maj = major(st.st_rdev);
			min = minor(st.st_rdev);
		} else {
			maj = major(st.st_dev);
			min = minor(st.st_dev);
		}
	}
	/* a partition: its requests are counted on the whole disk */
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/partition", maj, min);
	if (!access(path, R_OK)) {
		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/../dev", maj, min);
		f = fopen(path, "r");
		if (f) {
			if (fgets(buf, sizeof(buf), f))
				sscanf(buf, "%u:%u", &maj, &min);
			fclose(f);
		}
	}
	filt.block_dev = (maj << 20) | min;
	return 0;
}

static void list_hooks(void)
{
	size_t i;
	int j;

	printf("%-20s %-8s %-26s %s\n", "hook", "layer", "target", "variants (preference order)");
	for (i = 0; i < NHOOKS; i++) {
		printf("%-20s %-8s %-26s", hooks[i].name, hooks[i].layer, hooks[i].target);
		for (j = 0; j < MAX_VARIANTS && hooks[i].v[j].kind != V_NONE; j++)
			printf(" %s", kind_name[hooks[i].v[j].kind]);
		putchar('\n');
	}
}

int main(int argc, char **argv)
{
	unsigned long long lost = 0, last_lost = 0;
	__s64 t_end, t_stats;
	size_t i, l;
	int err, j, any = 0;

	if (parse_args(argc, argv))
		return 2;
	if (opt.list) {
		list_hooks();
		return 0;
	}
	for (i = 0; i < (size_t)opt.ndisable; i++) {
		bool known = false;

		for (j = 0; j < (int)NHOOKS; j++)
			if (!strcmp(opt.disable[i], hooks[j].name) ||
			    !strcmp(opt.disable[i], hooks[j].target))
				known = true;
		for (l = 0; l < NLAYERS; l++)
			if (!strcmp(opt.disable[i], all_layers[l]))
				known = true;
		if (!known)
			fprintf(stderr, "istrace-probe: --disable %s: no such hook or layer "
				"(ignored; --list-hooks shows them)\n", opt.disable[i]);
	}
	if (opt.layers && strcmp(opt.layers, "all")) {
		const char *p = opt.layers;

		while (*p) {
			const char *c = strchr(p, ',');
			size_t len = c ? (size_t)(c - p) : strlen(p);
			bool ok = false;

			for (l = 0; l < NLAYERS; l++)
				if (strlen(all_layers[l]) == len && !strncmp(all_layers[l], p, len))
					ok = true;
			if (!ok) {
				fprintf(stderr, "istrace-probe: --layers: unknown layer '%.*s' "
					"(tcp,net,block,syscall,scsi,iscsi)\n", (int)len, p);
				return 2;
			}
			if (!c)
				break;
			p = c + 1;
		}
	}
	if (resolve_tgtd() || resolve_block_dev())
		return 2;
	if (opt.usdt_path && access(opt.usdt_path, R_OK)) {
		fprintf(stderr, "istrace-probe: --usdt %s: %s\n", opt.usdt_path, strerror(errno));
		return 2;
	}
	resolve_libiscsi();

	filt.port = (__u16)opt.port;
	filt.self_pid = (__u32)getpid();
	filt.tcp_sample_ns = (__u64)(opt.tcp_sample_ms * 1e6);
	filt.any_task = !opt.npids && !opt.netns_given;
	filt.have_pids = opt.npids > 0;
	filt.block_by_pid = !opt.block_all && (opt.npids || opt.netns_given);
	/* user-space struct offsets: libiscsi from its public header, tgtd from tgt 1.0.85
	 * usr/scsi_cmnd.h and usr/iscsi/iscsid.h on LP64 (docs/probes.md derives them) */
	filt.lib_task_cdb = offsetof(struct scsi_task, cdb);
	filt.lib_task_xfer = offsetof(struct scsi_task, expxferlen);
	filt.lib_task_itt = offsetof(struct scsi_task, itt);
	filt.tgt_io_done_off = tgt_io_done_offset(bin_path(BIN_TGTD));
	if (filt.tgt_io_done_off)
		fprintf(stderr, "istrace-probe: tgt_io_done at target_cmd_io_done+0x%x, an "
			"instruction the kernel emulates (the entry's would be single-stepped)\n",
			filt.tgt_io_done_off);
	filt.tgt_task_itt = 16;     /* iscsi_task.req (struct iscsi_hdr) .itt */
	filt.tgt_task_scmd = 208;   /* iscsi_task.scmd */
	filt.tgt_cmd_tag = 168;     /* scsi_cmd.tag */
	filt.tgt_cmd_scb = 144;     /* scsi_cmd.scb */
	filt.tgt_cmd_dir = 64;      /* scsi_cmd.data_dir */
	filt.tgt_cmd_in_len = 80;   /* scsi_cmd.in_sdb.length */
	filt.tgt_cmd_out_len = 104; /* scsi_cmd.out_sdb.length */
	for (i = 0; i < (size_t)opt.nexclude && i < ISTRACE_MAX_EXCLUDE; i++)
		strncpy(filt.exclude_comm[i], opt.exclude[i], ISTRACE_COMM_LEN - 1);

	for (i = 0; i < NHOOKS; i++) {
		struct hook *h = &hooks[i];

		h->wanted = layer_selected(h->layer);
		if (h->wanted && hook_disabled(h)) {
			h->wanted = false;
			snprintf(h->off_reason, sizeof(h->off_reason), "disabled by --disable");
		}
		if (h->wanted && !strcmp(h->layer, "syscall") && !opt.npids && !opt.netns_given) {
			h->wanted = false;
			snprintf(h->off_reason, sizeof(h->off_reason),
				 "syscalls need a task filter (--pid, --netns or --tgtd)");
		}
	}

	libbpf_set_print(libbpf_print);
	vmlinux_btf = btf__load_vmlinux_btf();
	if (!vmlinux_btf)
		fprintf(stderr, "istrace-probe: no kernel BTF (%s): tp_btf hooks unavailable\n",
			strerror(errno));

	{
		size_t n = strlen(opt.out);

		csv_out = opt.format ? !strcmp(opt.format, "csv")
				     : n > 4 && !strcmp(opt.out + n - 4, ".csv");
	}
	out = fopen(opt.out, "w");
	if (!out) {
		fprintf(stderr, "istrace-probe: --out %s: %s\n", opt.out, strerror(errno));
		return 1;
	}
	setvbuf(out, NULL, _IOFBF, 1 << 20);

	if (setup()) {
		teardown();
		fclose(out);
		return 1;
	}
	/* traced tgids and syscalls go into maps only now that the object is loaded */
	for (i = 0; i < (size_t)opt.npids; i++) {
		__u8 one = 1;

		bpf_map__update_elem(skel->maps.pids, &opt.pids[i], sizeof(__u32), &one, 1, 0);
	}
	for (i = 0; i < NSYSCALLS; i++) {
		__u32 nr = (__u32)syscalls[i].nr;

		__u8 kind = syscalls[i].kind | 0x80; /* nonzero: wanted */

		if (syscalls[i].nr >= 0 && syscalls[i].nr < 512)
			bpf_map__update_elem(skel->maps.sys_wanted, &nr, sizeof(nr), &kind, 1, 0);
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), handle_event, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "istrace-probe: ring buffer: %s\n", strerror(errno));
		teardown();
		fclose(out);
		return 1;
	}
	measure_clock();
	report_hooks();
	/* the side file first: a reader that sees the stream's meta line finds it complete */
	write_meta_json(0, "running");
	write_meta_line();
	for (i = 0; i < NHOOKS; i++)
		any |= hooks[i].link != NULL;
	fprintf(stderr, "istrace-probe: streaming to %s%s\n", opt.out,
		any ? "" : " (no hook attached: the stream will hold only meta lines)");

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	t_end = opt.duration > 0 ? ts_ns(CLOCK_MONOTONIC) + (__s64)(opt.duration * 1e9) : 0;
	t_stats = ts_ns(CLOCK_MONOTONIC) + (__s64)(opt.stats_interval * 1e9);
	while (!stop) {
		__s64 now;

		err = ring_buffer__poll(rb, 100);
		if (err < 0 && err != -EINTR) {
			fprintf(stderr, "istrace-probe: ring buffer poll: %s\n", strerror(-err));
			break;
		}
		now = ts_ns(CLOCK_MONOTONIC);
		if (now >= t_stats) {
			lost = read_lost();
			write_counter("lost", lost);
			if (lost != last_lost)
				fprintf(stderr, "istrace-probe: %llu events lost so far "
					"(ring buffer full; raise --ringbuf-mb)\n", lost);
			last_lost = lost;
			t_stats = now + (__s64)(opt.stats_interval * 1e9);
		}
		fflush(out); /* one batch at a time: kill -9 loses at most this batch */
		if (t_end && now >= t_end)
			break;
	}
	/* drain what is already in the ring, then the final count */
	ring_buffer__consume(rb);
	lost = read_lost();
	write_counter("end", lost);
	fflush(out);
	write_meta_json(lost, "done");
	fprintf(stderr, "istrace-probe: %llu events written, %llu lost\n", nevents, lost);
	teardown();
	btf__free(vmlinux_btf);
	return fclose(out) ? 1 : 0;
}

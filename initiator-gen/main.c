/* istrace-gen: options, then discovery, an iSCSI run, or the socket baseline. */
#define _GNU_SOURCE
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <fcntl.h>

#include "crc32c.h"
#include "gen.h"
#include "io.h"
#include "session.h"
#include "sockbase.h"
#include "stats.h"
#include "util.h"

static const char usage_text[] =
	"usage: istrace-gen --portal HOST[:PORT] --target IQN [options]   iSCSI READ/WRITE load\n"
	"       istrace-gen --portal HOST[:PORT] --discover                SendTargets discovery\n"
	"       istrace-gen --serve [ADDR:]PORT [--serve-file PATH]        socket baseline source\n"
	"       istrace-gen --socket HOST:PORT --size 4M --time T [--stream] socket baseline\n"
	"\n"
	"target:   --portal, --target IQN (default: the portal's first SendTargets entry),\n"
	"          --lun N (default 1), --initiator-name IQN\n"
	"auth:     --chap-user U --chap-secret S [--chap-target-user U --chap-target-secret S]\n"
	"keys:     --header-digest none|crc32c, --data-digest none|crc32c, --mrdsl N (262144),\n"
	"          --max-burst N (16776192), --first-burst N (262144), --immediate-data yes|no,\n"
	"          --initial-r2t yes|no, --max-r2t N (1)   (ErrorRecoveryLevel is always 0)\n"
	"workload: --size SIZE (bytes, k/M/G suffix = KiB/MiB/GiB, 'blk' suffix = blocks,\n"
	"          'lun' = whole LUN; default 4M), --offset SIZE, --seq (default) | --random |\n"
	"          --same (every command at --offset: the same block each time),\n"
	"          --queue-depth N (1), --sessions S (1), --time SECONDS | --count N (default\n"
	"          --time 10), --write, --verify, --verify-file PATH, --cdb16, --seed N,\n"
	"          --copy (receive READ data into buffers unchecked; by default data that is\n"
	"          not verified is dropped in the kernel, never copied)\n"
	"output:   --json (summary as one JSON object on stdout), --quiet (no progress lines)\n"
	"faults:   --timeout SECONDS (10): a target silent this long ends the run\n"
	"exit:     0 ok, 2 usage, 3 connect, 4 login refused, 5 protocol (Reject, bad PDU,\n"
	"          digest), 6 SCSI status (CHECK CONDITION), 7 verify, 8 timeout,\n"
	"          9 connection closed by target, 10 internal\n";

static void usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "istrace-gen: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(istrace-gen --help for the options)\n");
	exit(EXIT_USAGE);
}

static uint32_t parse_u32(const char *s, const char *opt, uint32_t lo, uint32_t hi)
{
	uint64_t v;
	int blk;
	if (parse_size(s, &v, &blk) || blk || v < lo || v > hi) {
		fprintf(stderr, "istrace-gen: %s wants a number in %u..%u, not '%s'\n", opt, lo, hi, s);
		exit(EXIT_USAGE);
	}
	return (uint32_t)v;
}

static int parse_yesno(const char *s, const char *opt)
{
	if (!strcasecmp(s, "yes") || !strcmp(s, "1"))
		return 1;
	if (!strcasecmp(s, "no") || !strcmp(s, "0"))
		return 0;
	fprintf(stderr, "istrace-gen: %s wants yes or no, not '%s'\n", opt, s);
	exit(EXIT_USAGE);
}

static int parse_digest(const char *s, const char *opt)
{
	if (!strcasecmp(s, "crc32c"))
		return 1;
	if (!strcasecmp(s, "none"))
		return 0;
	fprintf(stderr, "istrace-gen: %s wants none or crc32c, not '%s'\n", opt, s);
	exit(EXIT_USAGE);
}

static double parse_seconds(const char *s, const char *opt)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || !(v > 0) || v > 1e7) {
		fprintf(stderr, "istrace-gen: %s wants a positive number of seconds, not '%s'\n", opt,
			s);
		exit(EXIT_USAGE);
	}
	return v;
}

enum {
	O_PORTAL = 256, O_TARGET, O_LUN, O_INAME, O_DISCOVER, O_CHAP_USER, O_CHAP_SECRET,
	O_CHAP_TUSER, O_CHAP_TSECRET, O_HD, O_DD, O_MRDSL, O_MAXBURST, O_FIRSTBURST, O_IMM,
	O_IR2T, O_MAXR2T, O_SIZE, O_OFFSET, O_SEQ, O_RANDOM, O_QD, O_SESSIONS, O_TIME, O_COUNT,
	O_WRITE, O_VERIFY, O_VERIFY_FILE, O_CDB16, O_SEED, O_JSON, O_QUIET, O_TIMEOUT, O_SOCKET,
	O_SERVE, O_STREAM, O_HELP, O_SOFTCRC, O_SERVE_FILE, O_SAME, O_COPY,
};

static const struct option long_opts[] = {
	{"portal", required_argument, 0, O_PORTAL},
	{"target", required_argument, 0, O_TARGET},
	{"lun", required_argument, 0, O_LUN},
	{"initiator-name", required_argument, 0, O_INAME},
	{"discover", no_argument, 0, O_DISCOVER},
	{"chap-user", required_argument, 0, O_CHAP_USER},
	{"chap-secret", required_argument, 0, O_CHAP_SECRET},
	{"chap-target-user", required_argument, 0, O_CHAP_TUSER},
	{"chap-target-secret", required_argument, 0, O_CHAP_TSECRET},
	{"header-digest", required_argument, 0, O_HD},
	{"data-digest", required_argument, 0, O_DD},
	{"mrdsl", required_argument, 0, O_MRDSL},
	{"max-burst", required_argument, 0, O_MAXBURST},
	{"first-burst", required_argument, 0, O_FIRSTBURST},
	{"immediate-data", required_argument, 0, O_IMM},
	{"initial-r2t", required_argument, 0, O_IR2T},
	{"max-r2t", required_argument, 0, O_MAXR2T},
	{"size", required_argument, 0, O_SIZE},
	{"offset", required_argument, 0, O_OFFSET},
	{"seq", no_argument, 0, O_SEQ},
	{"random", no_argument, 0, O_RANDOM},
	{"same", no_argument, 0, O_SAME},
	{"queue-depth", required_argument, 0, O_QD},
	{"sessions", required_argument, 0, O_SESSIONS},
	{"time", required_argument, 0, O_TIME},
	{"count", required_argument, 0, O_COUNT},
	{"write", no_argument, 0, O_WRITE},
	{"verify", no_argument, 0, O_VERIFY},
	{"verify-file", required_argument, 0, O_VERIFY_FILE},
	{"cdb16", no_argument, 0, O_CDB16},
	{"copy", no_argument, 0, O_COPY},
	{"seed", required_argument, 0, O_SEED},
	{"json", no_argument, 0, O_JSON},
	{"quiet", no_argument, 0, O_QUIET},
	{"timeout", required_argument, 0, O_TIMEOUT},
	{"socket", required_argument, 0, O_SOCKET},
	{"serve", required_argument, 0, O_SERVE},
	{"stream", no_argument, 0, O_STREAM},
	{"serve-file", required_argument, 0, O_SERVE_FILE},
	{"soft-crc", no_argument, 0, O_SOFTCRC},
	{"help", no_argument, 0, O_HELP},
	{0, 0, 0, 0},
};

static const char *size_arg, *offset_arg;
static int soft_crc;

static void parse_args(int argc, char **argv, struct gen_opts *o)
{
	/* the defaults of docs/gen.md: large bursts, immediate data, one command at a time */
	*o = (struct gen_opts){
		.initiator_name = "iqn.2026-11.org.istrace:gen",
		.lun = 1,
		.mrdsl = 262144,
		.max_burst = 16776192,
		.first_burst = 262144,
		.max_r2t = 1,
		.immediate_data = 1,
		.initial_r2t = 0,
		.queue_depth = 1,
		.sessions = 1,
		.timeout_s = 10,
		.seed = 1,
	};
	size_arg = "4M";
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case O_PORTAL: o->portal = optarg; break;
		case O_TARGET: o->target = optarg; break;
		case O_LUN: o->lun = parse_u32(optarg, "--lun", 0, 16383); break;
		case O_INAME: o->initiator_name = optarg; break;
		case O_DISCOVER: o->discover = 1; break;
		case O_CHAP_USER: o->chap_user = optarg; break;
		case O_CHAP_SECRET: o->chap_secret = optarg; break;
		case O_CHAP_TUSER: o->chap_target_user = optarg; break;
		case O_CHAP_TSECRET: o->chap_target_secret = optarg; break;
		case O_HD: o->header_digest = parse_digest(optarg, "--header-digest"); break;
		case O_DD: o->data_digest = parse_digest(optarg, "--data-digest"); break;
		case O_MRDSL: o->mrdsl = parse_u32(optarg, "--mrdsl", 512, 16777215); break;
		case O_MAXBURST: o->max_burst = parse_u32(optarg, "--max-burst", 512, 16777215); break;
		case O_FIRSTBURST:
			o->first_burst = parse_u32(optarg, "--first-burst", 512, 16777215);
			break;
		case O_IMM: o->immediate_data = parse_yesno(optarg, "--immediate-data"); break;
		case O_IR2T: o->initial_r2t = parse_yesno(optarg, "--initial-r2t"); break;
		case O_MAXR2T: o->max_r2t = parse_u32(optarg, "--max-r2t", 1, 65535); break;
		case O_SIZE: size_arg = optarg; break;
		case O_OFFSET: offset_arg = optarg; break;
		case O_SEQ: o->random = o->same = 0; break;
		case O_RANDOM: o->random = 1; o->same = 0; break;
		case O_SAME: o->same = 1; o->random = 0; break;
		case O_QD: o->queue_depth = parse_u32(optarg, "--queue-depth", 1, 4096); break;
		case O_SESSIONS: o->sessions = parse_u32(optarg, "--sessions", 1, 256); break;
		case O_TIME: o->time_s = parse_seconds(optarg, "--time"); break;
		case O_COUNT: {
			uint64_t v;
			int blk;
			if (parse_size(optarg, &v, &blk) || blk || v == 0)
				usage_error("--count wants a positive number, not '%s'", optarg);
			o->count = v;
			break;
		}
		case O_WRITE: o->write = 1; break;
		case O_VERIFY: o->verify = 1; break;
		case O_COPY: o->copy = 1; break;
		case O_VERIFY_FILE: o->verify_file = optarg; break;
		case O_CDB16: o->force_cdb16 = 1; break;
		case O_SEED: o->seed = parse_u32(optarg, "--seed", 0, 0xffffffffu); break;
		case O_JSON: o->json = 1; break;
		case O_QUIET: o->quiet = 1; break;
		case O_TIMEOUT: o->timeout_s = parse_seconds(optarg, "--timeout"); break;
		case O_SOCKET: o->socket_addr = optarg; break;
		case O_SERVE: o->serve_addr = optarg; break;
		case O_STREAM: o->stream = 1; break;
		case O_SERVE_FILE: o->verify_file = optarg; break; /* the server's data source */
		case O_SOFTCRC: soft_crc = 1; break;
		case 'h':
		case O_HELP: fputs(usage_text, stdout); exit(0);
		default:
			usage_error("unknown or incomplete option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
	if (!o->time_s && !o->count)
		o->time_s = 10;
	if (o->serve_addr || o->socket_addr) {
		int blk;
		if (parse_size(size_arg, &o->size, &blk) || blk || o->size == 0 ||
		    o->size > (1ull << 31))
			usage_error("--size '%s' must be 1 byte .. 2G for the socket baseline",
				    size_arg);
		return;
	}
	if (!o->portal)
		usage_error("%s", "--portal HOST[:PORT] is required");
	if (o->discover)
		return;
	if ((o->chap_user == NULL) != (o->chap_secret == NULL))
		usage_error("%s", "--chap-user and --chap-secret go together");
	if ((o->chap_target_user == NULL) != (o->chap_target_secret == NULL) ||
	    (o->chap_target_user && !o->chap_user))
		usage_error("%s", "mutual CHAP needs --chap-user/--chap-secret and "
				  "--chap-target-user/--chap-target-secret");
	if (o->write && (o->verify || o->verify_file))
		usage_error("%s", "--verify checks reads: write first, then read back with --verify");
	if (o->first_burst > o->max_burst)
		usage_error("%s", "--first-burst cannot exceed --max-burst");
	if (!strcasecmp(size_arg, "lun")) {
		o->size = 0;
	} else {
		int blk;
		uint64_t v;
		if (parse_size(size_arg, &v, &blk) || v == 0)
			usage_error("bad --size '%s' (e.g. 512, 32k, 4M, 8blk, lun)", size_arg);
		if (blk)
			o->size_blocks = v;
		else
			o->size = v;
	}
	if (offset_arg) {
		int blk;
		if (parse_size(offset_arg, &o->offset, &blk))
			usage_error("bad --offset '%s'", offset_arg);
		o->offset_in_blocks = blk;
	}
}

static void on_signal(int sig)
{
	(void)sig;
	if (atomic_exchange(&g_stop, 1))
		_exit(130); /* second ^C: leave now */
}

static void negotiated_json(const struct session *s, const struct run *r, char *out, size_t n)
{
	const struct negotiated *g = &s->neg;
	snprintf(out, n,
		 "\"size\": %llu, \"queue_depth\": %u, \"sessions\": %u, \"write\": %s, "
		 "\"block_size\": %u, \"lun_blocks\": %llu, \"negotiated\": {\"HeaderDigest\": "
		 "\"%s\", \"DataDigest\": \"%s\", \"MaxRecvDataSegmentLength\": %u, "
		 "\"TargetMaxRecvDataSegmentLength\": %u, \"MaxBurstLength\": %u, "
		 "\"FirstBurstLength\": %u, \"ImmediateData\": \"%s\", \"InitialR2T\": \"%s\", "
		 "\"MaxOutstandingR2T\": %u, \"AuthMethod\": \"%s\"}",
		 (unsigned long long)(r->xfer_blocks * r->block_size), r->o->queue_depth,
		 r->o->sessions, r->o->write ? "true" : "false", r->block_size,
		 (unsigned long long)s->lun_blocks, g->hdigest ? "CRC32C" : "None",
		 g->ddigest ? "CRC32C" : "None", g->mrdsl_t2i, g->mrdsl_i2t, g->max_burst,
		 g->first_burst, g->immediate_data ? "Yes" : "No", g->initial_r2t ? "Yes" : "No",
		 g->max_r2t, g->auth);
}

/* Print the error and, if asked, a JSON summary with nothing measured. */
static int fail_early(const struct gen_opts *o, const struct gen_err *e)
{
	fprintf(stderr, "istrace-gen: %s\n", e->msg);
	if (o->json) {
		printf("{\"mode\": \"iscsi\", \"bytes\": 0, \"commands\": 0, \"errors\": 1, "
		       "\"exit\": %d, \"error\": ",
		       e->code);
		json_puts(stdout, e->msg);
		printf("}\n");
	}
	return e->code ? e->code : EXIT_INTERNAL;
}

static int geometry(struct gen_opts *o, struct run *r, const struct session *s, struct gen_err *e)
{
	uint64_t bs = s->block_size;
	r->block_size = s->block_size;
	uint64_t off = o->offset;
	if (o->offset_in_blocks)
		off *= bs;
	if (off % bs) {
		err_set(e, EXIT_USAGE, "--offset %llu is not a multiple of the %llu byte block",
			(unsigned long long)off, (unsigned long long)bs);
		return -1;
	}
	r->first_lba = off / bs;
	if (r->first_lba >= s->lun_blocks) {
		err_set(e, EXIT_USAGE, "--offset %llu is beyond the LUN (%llu bytes)",
			(unsigned long long)off, (unsigned long long)(s->lun_blocks * bs));
		return -1;
	}
	uint64_t span = s->lun_blocks - r->first_lba;
	uint64_t blocks;
	if (o->size_blocks)
		blocks = o->size_blocks;
	else if (o->size == 0)
		blocks = span;
	else if (o->size % bs) {
		err_set(e, EXIT_USAGE, "--size %llu is not a multiple of the %llu byte block",
			(unsigned long long)o->size, (unsigned long long)bs);
		return -1;
	} else
		blocks = o->size / bs;
	if (blocks > span) {
		err_set(e, EXIT_USAGE,
			"--size of %llu blocks does not fit in the %llu blocks from the offset to the "
			"end of the LUN",
			(unsigned long long)blocks, (unsigned long long)span);
		return -1;
	}
	if (blocks * bs > 0xffffffffull - bs) {
		err_set(e, EXIT_USAGE, "--size %llu bytes is more than one SCSI command can carry",
			(unsigned long long)(blocks * bs));
		return -1;
	}
	if (blocks * bs * o->queue_depth * o->sessions > (8ull << 30)) {
		err_set(e, EXIT_USAGE, "size x queue depth x sessions needs more than 8 GiB of "
				       "buffers: lower one of them");
		return -1;
	}
	r->xfer_blocks = blocks;
	r->nchunks = span / blocks;
	o->size = blocks * bs;
	return 0;
}

/* No --target: ask the portal and take its first target, as iscsiadm users expect. */
static int pick_target(struct gen_opts *o)
{
	static char name[256];
	struct session s;
	int quiet = o->quiet;
	struct gen_opts d = *o; /* discovery sessions rarely need the target's CHAP account */
	d.chap_user = d.chap_secret = d.chap_target_user = d.chap_target_secret = NULL;
	int rc = session_open(&s, &d, 0, 1, 0);
	if (!rc)
		rc = session_discover(&s, 0, 0, name, sizeof(name));
	if (!rc && !name[0])
		err_set(&s.c.err, EXIT_LOGIN, "the portal offers no targets (SendTargets)");
	int code = rc || !name[0] ? fail_early(o, &s.c.err) : 0;
	session_close(&s);
	if (!code) {
		o->target = name;
		if (!quiet)
			fprintf(stderr, "target: %s (first of the portal's SendTargets list)\n", name);
	}
	return code;
}

static int run_iscsi(struct gen_opts *o)
{
	if (!o->target) {
		int code = pick_target(o);
		if (code)
			return code;
	}
	struct worker *ws = calloc(o->sessions, sizeof(*ws));
	struct run *r = calloc(1, sizeof(*r));
	struct stats *st = malloc(sizeof(*st));
	if (!ws || !r || !st) {
		fprintf(stderr, "istrace-gen: out of memory\n");
		return EXIT_INTERNAL;
	}
	r->o = o;
	r->st = st;
	r->verify_fd = -1;
	/* READ payload nobody looks at is dropped in the kernel (MSG_TRUNC), never copied */
	r->discard = !o->write && !o->verify && !o->verify_file && !o->copy;
	struct gen_err e = {0};
	if (o->verify_file) {
		r->verify_fd = open(o->verify_file, O_RDONLY | O_CLOEXEC);
		if (r->verify_fd < 0) {
			err_set(&e, EXIT_USAGE, "cannot open --verify-file %s", o->verify_file);
			return fail_early(o, &e);
		}
	}
	/* session 0 first: it learns the LUN geometry everything else depends on */
	struct session *s0 = &ws[0].s;
	if (session_open(s0, o, 0, 0, !o->quiet) < 0 || session_read_capacity(s0) < 0) {
		int code = fail_early(o, &s0->c.err);
		session_close(s0);
		return code;
	}
	if (geometry(o, r, s0, &e) < 0) {
		session_close(s0);
		return fail_early(o, &e);
	}
	if (!o->quiet)
		fprintf(stderr,
			"LUN %llu: %llu blocks of %u bytes (%.1f MiB); %s %llu bytes per command, "
			"%s, queue depth %u, %u session%s\n",
			(unsigned long long)o->lun, (unsigned long long)s0->lun_blocks, s0->block_size,
			(double)s0->lun_blocks * s0->block_size / 1048576.0,
			o->write ? "WRITE" : "READ", (unsigned long long)o->size,
			o->same ? "same block" : o->random ? "random" : "sequential", o->queue_depth, o->sessions,
			o->sessions == 1 ? "" : "s");
	stats_init(st);
	pthread_barrier_init(&r->start, NULL, o->sessions + 1);
	pthread_barrier_init(&r->go, NULL, o->sessions + 1);
	ws[0].opened = 1;
	for (unsigned i = 0; i < o->sessions; i++) {
		ws[i].run = r;
		ws[i].idx = i;
		if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i])) {
			fprintf(stderr, "istrace-gen: cannot start a thread\n");
			exit(EXIT_INTERNAL);
		}
	}
	pthread_barrier_wait(&r->start);
	/* Start the clock before any command goes out, so rates and the mean outstanding
	 * count cover exactly the same stretch. */
	stats_restart_clock(st);
	pthread_barrier_wait(&r->go);
	stats_watch(st, &r->finished, (int)o->sessions, o->time_s, o->quiet, &g_stop);
	int code = 0;
	const char *msg = NULL;
	for (unsigned i = 0; i < o->sessions; i++) {
		pthread_join(ws[i].th, NULL);
		if (ws[i].s.c.err.code && !code) {
			code = ws[i].s.c.err.code;
			msg = ws[i].s.c.err.msg;
			if (o->sessions > 1)
				fprintf(stderr, "istrace-gen: session %u: %s\n", i, msg);
			else
				fprintf(stderr, "istrace-gen: %s\n", msg);
		}
	}
	char extra[1200];
	uint64_t ua = 0, nops = 0, din = 0, dout = 0, r2t = 0;
	for (unsigned i = 0; i < o->sessions; i++) {
		ua += ws[i].unit_attentions;
		nops += ws[i].s.nop_pings;
		din += ws[i].data_in_pdus;
		dout += ws[i].data_out_pdus;
		r2t += ws[i].r2ts;
	}
	negotiated_json(s0, r, extra, sizeof(extra) - 200);
	snprintf(extra + strlen(extra), 200,
		 ", \"unit_attentions\": %llu, \"nop_pings\": %llu, \"pdus\": {\"data_in\": %llu, "
		 "\"data_out\": %llu, \"r2t\": %llu}",
		 (unsigned long long)ua, (unsigned long long)nops, (unsigned long long)din,
		 (unsigned long long)dout, (unsigned long long)r2t);
	stats_summary(st, o->json, "iscsi", code, msg, extra);
	for (unsigned i = 0; i < o->sessions; i++)
		worker_free(&ws[i]);
	return code;
}

static int run_discover(const struct gen_opts *o)
{
	struct session s;
	int rc = session_open(&s, o, 0, 1, !o->quiet);
	if (!rc)
		rc = session_discover(&s, o->json, 1, NULL, 0);
	int code = 0;
	if (rc) {
		code = s.c.err.code ? s.c.err.code : EXIT_INTERNAL;
		fprintf(stderr, "istrace-gen: %s\n", s.c.err.msg);
	}
	session_close(&s);
	return code;
}

int main(int argc, char **argv)
{
	struct gen_opts o;
	parse_args(argc, argv, &o);
	crc32c_force_software(soft_crc); /* also builds the tables before any thread starts */
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stderr, NULL, _IOLBF, 0);
	if (o.serve_addr)
		return sock_serve(&o);
	if (o.socket_addr)
		return sock_client(&o);
	if (o.discover)
		return run_discover(&o);
	return run_iscsi(&o);
}

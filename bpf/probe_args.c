// SPDX-License-Identifier: GPL-2.0
/*
 * istrace-probe's command line.  Every check that can fail without touching the kernel
 * happens here, before anything is loaded, so a typo costs no BPF load and the error
 * names the option.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "probe.h"

struct options opt = { .host = "initiator", .port = 3260, .ringbuf_mb = 16, .stats_interval = 1.0,
		       .tcp_sample_ms = 10, .exclude = { "tcpdump", "dumpcap", "ss" }, .nexclude = 3 };

struct istrace_filter filt;

static void usage(FILE *f)
{
	fprintf(f,
"usage: istrace-probe --out FILE.jsonl [options]\n"
"  --host NAME          host column (initiator, target, ...); default initiator\n"
"  --netns NS           trace sockets and tasks of this network namespace\n"
"                       (name under /run/netns, or a path like /proc/PID/ns/net)\n"
"  --peer-host NAME --peer-netns NS --peer-out FILE\n"
"                       both ends in namespaces of this kernel (a testbed): trace the\n"
"                       second end's sockets and tasks too, with the same programs, and\n"
"                       write its events to FILE as host NAME\n"
"  --pid P              trace syscalls/user probes of this tgid (repeatable)\n"
"  --cgroup PATH        trace syscalls/user probes/block requests of the tasks in this\n"
"                       cgroup v2 directory (a workload started in it, forks included);\n"
"                       --netns then selects sockets only\n"
"  --port N             iSCSI port: TCP events only for connections using it (3260; 0: any)\n"
"  --layers L           comma list of tcp,net,block,syscall,scsi,iscsi (default all)\n"
"  --usdt PATH          istrace-gen binary whose istrace:* USDT probes to attach\n"
"  --tgtd PID|PATH      tgtd process or binary for the uprobes\n"
"  --libiscsi PATH      libiscsi shared library for the uprobes (default: found)\n"
"  --block-dev M:m|PATH block device (or a file on it) whose requests to trace\n"
"  --block-all          block requests of every task (default: only those a traced\n"
"                       task queued, when --pid/--netns/--tgtd is given)\n"
"  --duration S         stop after S seconds (default: until SIGINT/SIGTERM)\n"
"  --disable HOOK[,..]  do not attach HOOK (repeatable; see --list-hooks)\n"
"  --enable HOOK[,..]   attach HOOK, one that is off by default (tgt_rx, tgt_tx,\n"
"                       tgt_execute, usdt_cmd_first_data)\n"
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
"  --syscall-entries    an event at each traced system call's entry too (the size\n"
"                       asked for; a call still blocked when tracing stops); by\n"
"                       default one event per call, at its exit\n"
"  --list-hooks         print the hook table and exit\n"
"  -v, --verbose        libbpf messages on stderr\n");
}

enum { OPT_PEER_NETNS = 256, OPT_PEER_OUT, OPT_PEER_HOST };

/* A network namespace by name (under /run/netns) or path: its inode, and the path. */
static int netns_arg(const char *option, const char *arg, char *path, __u32 *ino)
{
	struct stat st;

	if (strchr(arg, '/'))
		snprintf(path, PATH_MAX, "%s", arg);
	else
		snprintf(path, PATH_MAX, "/run/netns/%s", arg);
	if (stat(path, &st)) {
		fprintf(stderr, "istrace-probe: %s %s: %s: %s\n", option, arg, path,
			strerror(errno));
		return -1;
	}
	*ino = (__u32)st.st_ino;
	return 0;
}

/* One --enable/--disable argument: a name or a comma-separated list (split in place). */
static int add_names(const char **list, int *n, char *arg, const char *option)
{
	char *save = NULL, *name;

	for (name = strtok_r(arg, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
		if (*n >= MAX_DISABLE) {
			fprintf(stderr, "istrace-probe: %s: more than %d names\n", option,
				MAX_DISABLE);
			return -1;
		}
		list[(*n)++] = name;
	}
	return 0;
}

int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "host", required_argument, NULL, 'H' },
		{ "netns", required_argument, NULL, 'n' },
		{ "peer-netns", required_argument, NULL, OPT_PEER_NETNS },
		{ "peer-out", required_argument, NULL, OPT_PEER_OUT },
		{ "peer-host", required_argument, NULL, OPT_PEER_HOST },
		{ "pid", required_argument, NULL, 'p' },
		{ "cgroup", required_argument, NULL, 'g' },
		{ "port", required_argument, NULL, 'P' },
		{ "layers", required_argument, NULL, 'l' },
		{ "usdt", required_argument, NULL, 'u' },
		{ "tgtd", required_argument, NULL, 't' },
		{ "libiscsi", required_argument, NULL, 'L' },
		{ "block-dev", required_argument, NULL, 'b' },
		{ "block-all", no_argument, NULL, 'B' },
		{ "duration", required_argument, NULL, 'd' },
		{ "disable", required_argument, NULL, 'x' },
		{ "enable", required_argument, NULL, 'e' },
		{ "ringbuf-mb", required_argument, NULL, 'r' },
		{ "stats-interval", required_argument, NULL, 's' },
		{ "list-hooks", no_argument, NULL, 'T' },
		{ "exclude-comm", required_argument, NULL, 'X' },
		{ "tcp-sample-ms", required_argument, NULL, 'S' },
		{ "syscall-entries", no_argument, NULL, 'E' },
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
		case 'E': filt.sys_entries = 1; break;
		case 'H': opt.host = optarg; break;
		case 'n':
			if (netns_arg("--netns", optarg, opt.netns_path, &filt.netns))
				return -1;
			filt.netns_tasks = 1;
			opt.netns_given = 1;
			break;
		case OPT_PEER_NETNS:
			if (netns_arg("--peer-netns", optarg, opt.peer_netns_path, &filt.netns2))
				return -1;
			break;
		case OPT_PEER_OUT: opt.peer_out = optarg; break;
		case OPT_PEER_HOST: opt.peer_host = optarg; break;
		case 'g': {
			struct stat st;

			/* a cgroup v2 directory's inode number is the id bpf_get_current_cgroup_id
			 * returns (kernfs node id, 64-bit kernels) */
			if (stat(optarg, &st) || !S_ISDIR(st.st_mode)) {
				fprintf(stderr, "istrace-probe: --cgroup %s: not a cgroup directory\n",
					optarg);
				return -1;
			}
			filt.cgroup_id = (__u64)st.st_ino;
			opt.cgroup_given = 1;
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
			if (add_names(opt.disable, &opt.ndisable, optarg, "--disable"))
				return -1;
			break;
		case 'e':
			if (add_names(opt.enable, &opt.nenable, optarg, "--enable"))
				return -1;
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
	if ((opt.peer_out || opt.peer_host || filt.netns2) &&
	    !(opt.peer_out && opt.peer_host && filt.netns2 && filt.netns)) {
		fprintf(stderr, "istrace-probe: a second host needs --peer-host, --peer-netns and "
			"--peer-out together, and --netns for the first\n");
		return -1;
	}
	if (filt.netns2 && filt.netns2 == filt.netns) {
		fprintf(stderr, "istrace-probe: --peer-netns is --netns's namespace\n");
		return -1;
	}
	return 0;
}

/* --disable/--enable names are only warned about (a script may name a hook another kernel
 * has) */
static void warn_unknown(const char *const *names, int n, const char *option)
{
	size_t l;
	int i, j;

	for (i = 0; i < n; i++) {
		bool known = false;

		for (j = 0; j < (int)NHOOKS; j++)
			if (!strcmp(names[i], hooks[j].name) || !strcmp(names[i], hooks[j].target))
				known = true;
		for (l = 0; l < NLAYERS; l++)
			if (!strcmp(names[i], all_layers[l]))
				known = true;
		if (!known)
			fprintf(stderr, "istrace-probe: %s %s: no such hook or layer "
				"(ignored; --list-hooks shows them)\n", option, names[i]);
	}
}

/* An unknown --layers name is an error, since it would silently trace nothing. */
int check_names(void)
{
	size_t l;

	warn_unknown(opt.disable, opt.ndisable, "--disable");
	warn_unknown(opt.enable, opt.nenable, "--enable");
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
				return -1;
			}
			if (!c)
				break;
			p = c + 1;
		}
	}
	return 0;
}

/* dev_t of the whole disk holding M:m or a file; kernel encoding (major << 20 | minor). */
int resolve_block_dev(void)
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

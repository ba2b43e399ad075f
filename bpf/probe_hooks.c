// SPDX-License-Identifier: GPL-2.0
/*
 * The hook table and the attach loop.  Every hook lists its variants in preference
 * order (tp_btf, raw_tp, tracepoint / fentry, kprobe / usdt / uprobe).  Variants whose
 * prerequisite is missing (no BTF for the tracepoint, no such tracepoint or function,
 * binary absent) are skipped before load; a variant the kernel refuses at load or
 * attach is switched off and the object is loaded again without it, so one refused
 * hook never stops the others.  Whatever stays off keeps its reason per variant: that
 * is the "not attached: why" a user sees.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "probe.h"
#include "istrace.skel.h"

const char *const kind_name[V_NKINDS] = {
	[V_NONE] = "none", [V_SOCKOPS] = "sockops", [V_TP_BTF] = "tp_btf", [V_RAW_TP] = "raw_tp",
	[V_TRACEPOINT] = "tracepoint", [V_FENTRY] = "fentry", [V_KPROBE] = "kprobe", [V_USDT] = "usdt", [V_UPROBE] = "uprobe",
	[V_URETPROBE] = "uretprobe",
};

#define TP(n, l, t, p) { .name = n, .layer = l, .target = t, .bin = BIN_KERNEL, \
	.v = { { .kind = V_TP_BTF, .prog = p "_btf" }, { .kind = V_RAW_TP, .prog = p "_raw" } } }
#define RAWONLY(n, l, t, p) { .name = n, .layer = l, .target = t, .bin = BIN_KERNEL, \
	.v = { { .kind = V_RAW_TP, .prog = p } } }
#define KP(n, l, t, p) { .name = n, .layer = l, .target = t, .bin = BIN_KERNEL, \
	.v = { { .kind = V_FENTRY, .prog = p "_fentry" }, { .kind = V_KPROBE, .prog = p "_kp" } } }
#define USER(n, l, t, b, k, p) { .name = n, .layer = l, .target = t, .bin = b, \
	.v = { { .kind = k, .prog = p } } }
/* User-space probes whose trap costs more than their fact is worth (a uprobe or USDT hit is
 * ~0.6 us on the traced thread, the pipeline's busiest): attached only when asked for
 * (--enable NAME), and the hook table says why and where the fact is found instead */
#define USER_OPT(n, l, t, b, k, p, why) { .name = n, .layer = l, .target = t, .bin = b, \
	.v = { { .kind = k, .prog = p } }, .optional = true, .why_optional = why }
#define PER_PDU "a trap per PDU on tgtd's network thread; no analysis reads it"

struct hook hooks[] = {
	{ .name = "tcp_probe", .layer = "tcp", .target = "tcp_probe", .bin = BIN_KERNEL,
	  .v = { { .kind = V_SOCKOPS, .prog = "tcp_sockops" },
		 { .kind = V_TP_BTF, .prog = "tcp_probe_btf" },
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
	KP("kiscsi_xmit", "iscsi", "iscsi_tcp_task_xmit", "kiscsi_xmit"),
	KP("lio_cmd_rx", "iscsi", "iscsit_setup_scsi_cmd", "lio_cmd_rx"),
	KP("lio_data_in", "iscsi", "lio_queue_data_in", "lio_data_in"),
	KP("lio_bs_submit", "scsi", "fd_execute_rw", "lio_bs_submit"),
	USER("usdt_cmd_issue", "scsi", "cmd_issue", BIN_GEN, V_USDT, "usdt_cmd_issue"),
	USER_OPT("usdt_cmd_first_data", "scsi", "cmd_first_data", BIN_GEN, V_USDT,
		 "usdt_cmd_first_data", "a trap per command; the PDU table has each command's "
		 "first data"),
	USER("usdt_cmd_done", "scsi", "cmd_done", BIN_GEN, V_USDT, "usdt_cmd_done"),
	USER_OPT("tgt_rx", "iscsi", "iscsi_rx_handler", BIN_TGTD, V_UPROBE, "tgt_rx", PER_PDU),
	USER_OPT("tgt_tx", "iscsi", "iscsi_tx_handler", BIN_TGTD, V_UPROBE, "tgt_tx", PER_PDU),
	USER_OPT("tgt_execute", "iscsi", "iscsi_scsi_cmd_execute", BIN_TGTD, V_UPROBE,
		 "tgt_execute", "a trap per command on tgtd's network thread, just before "
		 "tgt_cmd_queue, which carries the same fields"),
	USER("tgt_cmd_queue", "scsi", "target_cmd_queue", BIN_TGTD, V_UPROBE, "tgt_cmd_queue"),
	USER("tgt_bs_submit", "scsi", "bs_thread_cmd_submit", BIN_TGTD, V_UPROBE, "tgt_bs_submit"),
	USER("tgt_io_done", "scsi", "target_cmd_io_done", BIN_TGTD, V_UPROBE, "tgt_io_done"),
	USER("lib_cmd_entry", "iscsi", "iscsi_scsi_command_async", BIN_LIBISCSI, V_UPROBE,
	     "lib_cmd_entry"),
	USER("lib_cmd_return", "iscsi", "iscsi_scsi_command_async", BIN_LIBISCSI, V_URETPROBE,
	     "lib_cmd_return"),
	USER("lib_queue_pdu", "iscsi", "iscsi_queue_pdu", BIN_LIBISCSI, V_UPROBE, "lib_queue_pdu"),
};
const size_t nhooks = sizeof(hooks) / sizeof(hooks[0]);

const char *const all_layers[] = { "tcp", "net", "block", "syscall", "scsi", "iscsi" };
const size_t nlayers = sizeof(all_layers) / sizeof(all_layers[0]);

struct istrace *skel;
struct ring_buffer *rb;

bool layer_selected(const char *layer)
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

/* Whether a --disable / --enable list names the hook, its target or its layer. */
static bool hook_named(const char *const *names, int n, const struct hook *h)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(names[i], h->name) || !strcmp(names[i], h->target) ||
		    !strcmp(names[i], h->layer))
			return true;
	return false;
}

/* Which hooks the command line asks for; one that is not asked for but was switched
 * off by an option keeps its reason, so the report says why it is missing. */
void select_hooks(void)
{
	size_t i;

	for (i = 0; i < NHOOKS; i++) {
		struct hook *h = &hooks[i];

		h->wanted = layer_selected(h->layer);
		if (h->wanted && hook_named(opt.disable, opt.ndisable, h)) {
			h->wanted = false;
			snprintf(h->off_reason, sizeof(h->off_reason), "disabled by --disable");
		}
		if (h->wanted && h->optional && !hook_named(opt.enable, opt.nenable, h)) {
			h->wanted = false;
			snprintf(h->off_reason, sizeof(h->off_reason),
				 "off by default (%s): --enable %s", h->why_optional, h->name);
		}
		if (h->wanted && !strcmp(h->layer, "syscall") && !opt.npids && !opt.netns_given &&
		    !opt.cgroup_given) {
			h->wanted = false;
			snprintf(h->off_reason, sizeof(h->off_reason),
				 "syscalls need a task filter (--pid, --netns, --cgroup or --tgtd)");
		}
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
			case V_SOCKOPS: {
				int up = iscsi_connections_up();

				if (!cgroup2_root()) {
					snprintf(h->why[j], sizeof(h->why[j]),
						 "no cgroup v2 hierarchy mounted to attach to");
					h->failed[j] = true;
				} else if (!have_local_storage()) {
					snprintf(h->why[j], sizeof(h->why[j]),
						 "no socket local storage in this kernel");
					h->failed[j] = true;
				} else if (up != 0) {
					snprintf(h->why[j], sizeof(h->why[j]), "%s",
						 up > 0 ? "iSCSI connections already up (sock_ops sees "
						 "only new ones)" : "could not tell whether iSCSI "
						 "connections are already up");
					h->failed[j] = true;
				}
				break;
			}
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

int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
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

void teardown(void)
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
	case V_SOCKOPS: {
		int fd = open(cgroup2_root(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		h->link = bpf_program__attach_cgroup(p, fd);
		close(fd); /* the link holds the cgroup */
		break;
	}
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
int setup(void)
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

void hook_why(const struct hook *h, char *buf, size_t n)
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

void report_hooks(void)
{
	char why[600];
	size_t i, l;

	for (i = 0; i < NHOOKS; i++) {
		const struct hook *h = &hooks[i];

		if (!h->wanted && !h->off_reason[0])
			continue;
		if (h->link) {
			/* a preferred variant passed over says why (sock_ops: connections up) */
			int j = 0;

			while (j < h->chosen && !h->why[j][0])
				j++;
			fprintf(stderr, "istrace-probe: hook %-20s (%s) attached with %s", h->name,
				h->layer, kind_name[h->v[h->chosen].kind]);
			if (j < h->chosen && strcmp(h->why[j], "skipped by --skip-variant"))
				fprintf(stderr, " (not %s: %s)", kind_name[h->v[j].kind], h->why[j]);
			fputc('\n', stderr);
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

void list_hooks(void)
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

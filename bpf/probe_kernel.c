// SPDX-License-Identifier: GPL-2.0
/*
 * What the running kernel offers, asked before load: a variant whose tracepoint,
 * function or map type is missing is skipped up front, which is cheaper than a refused
 * load and gives the "not attached" line a reason a person can act on.  Every answer
 * that cannot be had is -1, "unknown": the kernel then decides at load/attach time.
 */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe.h"

struct btf *vmlinux_btf;

bool btf_has_tp(const char *tp)
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

#define TRACEFS "/sys/kernel/tracing"

/* tracefs's events/ folder, where the kernel mounts it or under debugfs, or NULL */
static const char *tracefs_events(void)
{
	static const char *const roots[] = { TRACEFS "/events", "/sys/kernel/debug/tracing/events" };
	size_t i;

	for (i = 0; i < sizeof(roots) / sizeof(roots[0]); i++)
		if (!access(roots[i], R_OK))
			return roots[i];
	return NULL;
}

/* 1/0 from tracefs (events/<system>/<name>), -1 when tracefs is not mounted */
int tracefs_has(const char *tp)
{
	const char *root = tracefs_events();
	char pattern[PATH_MAX];
	glob_t g;
	int rc;

	if (!root)
		return -1;
	snprintf(pattern, sizeof(pattern), "%s/*/%s", root, tp);
	rc = glob(pattern, 0, NULL, &g);
	if (rc == 0)
		globfree(&g);
	return rc == 0;
}

/* A fresh machine (or a container) may have neither tracefs nor debugfs mounted: the
 * classic tracepoint variants then cannot attach, and raw_tp loses its cheapest "does
 * this tracepoint exist" answer.  Most distributions mount it at boot, so mounting it
 * where the kernel expects it restores the usual state; without the right to, one line
 * says what is missing and the command that fixes it.  Runs before any hook is chosen. */
void ensure_tracefs(void)
{
	static const char fix[] = "mount -t tracefs nodev " TRACEFS;
	struct stat st;

	if (tracefs_events())
		return;
	if (stat(TRACEFS, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "istrace-probe: tracefs is not mounted and %s does not exist: this "
			"kernel has no tracefs (CONFIG_TRACING); tracepoint variants unavailable\n",
			TRACEFS);
		return;
	}
	if (mount("tracefs", TRACEFS, "tracefs", 0, NULL)) {
		if (errno == EPERM || errno == EACCES)
			fprintf(stderr, "istrace-probe: tracefs is not mounted and only root may "
				"mount it (tracepoint variants unavailable): %s\n", fix);
		else
			fprintf(stderr, "istrace-probe: tracefs is not mounted and mounting it failed "
				"(%s; tracepoint variants unavailable): %s\n", strerror(errno), fix);
		return;
	}
	if (!tracefs_events()) {
		fprintf(stderr, "istrace-probe: mounted tracefs at %s but it has no events/ "
			"(tracepoint variants unavailable)\n", TRACEFS);
		return;
	}
	fprintf(stderr, "istrace-probe: mounted tracefs at %s (it was not mounted)\n", TRACEFS);
}

int tracepoint_exists(const struct hook *h)
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

int function_exists(const struct hook *h)
{
	if (!ksym_done)
		scan_kallsyms();
	return ksym_fn[h - hooks];
}

/* socket and task local storage maps, which some tp_btf variants keep state in */
bool have_local_storage(void)
{
	static int have = -1;

	if (have < 0)
		have = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_SK_STORAGE, NULL) == 1 &&
		       libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) == 1;
	return have;
}

/* skb_drop_reason values change between kernels: their names come from its BTF */
const char *drop_reason_name(__u32 r)
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

// SPDX-License-Identifier: GPL-2.0
/*
 * What the running kernel offers, asked before load: a variant whose tracepoint,
 * function or map type is missing is skipped up front, which is cheaper than a refused
 * load and gives the "not attached" line a reason a person can act on.  Every answer
 * that cannot be had is -1, "unknown": the kernel then decides at load/attach time.
 */
#include <glob.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
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

/* 1/0 from tracefs (events/<system>/<name>), -1 when tracefs is not mounted */
int tracefs_has(const char *tp)
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

/* SPDX-License-Identifier: GPL-2.0 */
/*
 * System calls that move data (read/write families, send/recv, io_submit,
 * io_uring_enter) of traced tasks: the size asked for at entry, the bytes moved and
 * the time taken at exit.  sys_exit runs for every syscall of the host: a task nobody
 * traced is turned away with one lookup.
 */
#ifndef ISTRACE_SYSCALL_BPF_H
#define ISTRACE_SYSCALL_BPF_H

#include "common.bpf.h"

/* Syscall numbers worth tracing (filled by the loader: arch-specific numbers). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, __u8);
} sys_wanted SEC(".maps");

struct sys_start_val {
	__u64 ts;
	__u64 count;
	__u64 off;
	__u32 nr;
	__s32 fd;
	__u32 has_off;
	__u32 open; /* task storage: 1 between an emitted enter and its exit */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tid */
	__type(value, struct sys_start_val);
} sys_start SEC(".maps");

/* Syscall entry state per task, for the tp_btf variants: sys_exit runs for every syscall
 * of the host, and a task nobody traced has no storage, so its test is one NULL check. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct sys_start_val);
} sys_start_task SEC(".maps");

/* sys_wanted values: which arguments carry what (set by the loader per syscall) */
#define SYS_ARG3_SIZE 1   /* read/write/pread64/recvfrom/sendto: (fd, buf, size, ...) */
#define SYS_ARG2_COUNT 2  /* io_uring_enter(fd, to_submit), io_submit(ctx, nr) */
#define SYS_ARG4_OFFSET 4 /* pread64/pwrite64/preadv/pwritev: file offset */

static __always_inline int on_sys_enter(struct pt_regs *regs, long id, bool btf)
{
	struct sys_start_val v = {}, *slot;
	struct istrace_event *e;
	__u32 nr = id, tid;
	__u8 *want, w;

	if (id < 0 || id >= 512)
		return 0;
	want = bpf_map_lookup_elem(&sys_wanted, &nr);
	if (!want || !*want || !task_wanted_ex(btf))
		return 0;
	w = *want;
	tid = (__u32)bpf_get_current_pid_tgid();
	v.nr = nr;
	/* tp_btf: regs is a BTF pointer, the arguments are plain loads; raw_tp: helpers */
	v.fd = btf ? PT_REGS_PARM1_SYSCALL(regs) : PT_REGS_PARM1_CORE_SYSCALL(regs);
	if (w & SYS_ARG3_SIZE)
		v.count = btf ? PT_REGS_PARM3_SYSCALL(regs) : PT_REGS_PARM3_CORE_SYSCALL(regs);
	else if (w & SYS_ARG2_COUNT)
		v.count = btf ? PT_REGS_PARM2_SYSCALL(regs) : PT_REGS_PARM2_CORE_SYSCALL(regs);
	if (w & SYS_ARG4_OFFSET) {
		v.off = btf ? PT_REGS_PARM4_SYSCALL(regs) : PT_REGS_PARM4_CORE_SYSCALL(regs);
		v.has_off = 1;
	}
	e = ev_new(EV_SYS_ENTER);
	if (!e)
		return 0;
	v.ts = e->ts_ns;
	v.open = 1; /* open: sys_exit of this task emits */
	if (btf) {
		slot = bpf_task_storage_get(&sys_start_task, bpf_get_current_task_btf(), NULL,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (slot)
			*slot = v;
	} else {
		bpf_map_update_elem(&sys_start, &tid, &v, BPF_ANY);
	}
	e->reason = nr;
	e->status = v.fd;
	e->flags |= F_REASON | F_STATUS;
	if (w & (SYS_ARG3_SIZE | SYS_ARG2_COUNT)) {
		e->bytes = v.count;
		e->flags |= F_BYTES;
	}
	if (v.has_off) {
		e->lba = v.off; /* printed as "offset" (bytes) for syscalls */
		e->flags |= F_LBA;
	}
	ev_submit(e);
	return 0;
}

static __always_inline int emit_sys_exit(const struct sys_start_val *v, long ret)
{
	struct istrace_event *e = ev_new(EV_SYS_EXIT);

	if (!e)
		return 0;
	e->reason = v->nr;
	e->lat_ns = e->ts_ns - v->ts;
	if (v->has_off) {
		e->lba = v->off;
		e->flags |= F_LBA;
	}
	e->bytes = ret > 0 ? ret : 0;
	e->status = ret < -0x7fffffffL ? -0x7fffffff : (ret > 0x7fffffffL ? 0x7fffffff : ret);
	e->flags |= F_REASON | F_BYTES | F_STATUS | F_LAT;
	ev_submit(e);
	return 0;
}

/* every syscall of the host exits here: a task never traced has no storage at all */
static __always_inline int on_sys_exit_btf(long ret)
{
	struct sys_start_val *v;

	v = bpf_task_storage_get(&sys_start_task, bpf_get_current_task_btf(), NULL, 0);
	if (!v || !v->open)
		return 0;
	v->open = 0;
	return emit_sys_exit(v, ret);
}

static __always_inline int on_sys_exit_raw(long ret)
{
	struct sys_start_val *v;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	v = bpf_map_lookup_elem(&sys_start, &tid);
	if (!v)
		return 0;
	emit_sys_exit(v, ret);
	bpf_map_delete_elem(&sys_start, &tid);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id) { return on_sys_enter(regs, id, true); }
SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id) { return on_sys_enter(regs, id, false); }
SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret) { return on_sys_exit_btf(ret); }
SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs *regs, long ret) { return on_sys_exit_raw(ret); }

#endif

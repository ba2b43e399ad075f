/* SPDX-License-Identifier: GPL-2.0 */
/*
 * System calls that move data (read/write families, send/recv, io_submit,
 * io_uring_enter) of traced tasks: one event at exit with the fd, the bytes moved and the
 * time taken (its start is ts - lat).  An event at entry as well (the size asked for, and a
 * call that blocks is seen while it blocks) only with cfg.sys_entries: it would double the
 * layer's events, and each event costs the loader ~0.5 us.  sys_exit runs for every
 * syscall of the host: a task nobody traced is turned away with one lookup.
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
	__u32 has_count;
	__u32 open;   /* 1 between an entry and its exit */
	__u32 retry;  /* the last call of this task (same nr and fd) failed with EAGAIN */
	__u32 quiet;  /* this call is a retry: its events wait for its exit */
	__u32 again;  /* retries folded so far (each failed with EAGAIN) */
	__u32 peer;   /* F_PEER when the task is the second host's, read once at entry */
	__u64 exit_ts; /* exit of the last folded retry */
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

#define SYS_EAGAIN 11

static __always_inline void emit_sys_enter(const struct sys_start_val *v)
{
	struct istrace_event *e;

	if (!cfg.sys_entries)
		return;
	e = ev_new(EV_SYS_ENTER);
	if (!e)
		return;
	e->flags |= v->peer;
	e->ts_ns = v->ts; /* a folded retry is shown at its exit, stamped with its entry */
	e->reason = v->nr;
	e->status = v->fd;
	e->flags |= F_REASON | F_STATUS;
	if (v->has_count) {
		e->bytes = v->count;
		e->flags |= F_BYTES;
	}
	if (v->has_off) {
		e->lba = v->off; /* printed as "offset" (bytes) for syscalls */
		e->flags |= F_LBA;
	}
	ev_submit(e);
}

/*
 * A non-blocking writer whose socket is full may retry write() in a loop, each call
 * failing with EAGAIN (tgtd does, behind a small receive window): hundreds of thousands of
 * calls a second, which would flood the ring and the stream.  The first failure is shown;
 * the retries of the same call on the same fd that follow are folded.  The run ends with
 * the first call that does not fail so, or with the task's next traced call of another
 * kind; either way the call that ends it (or the run's last retry) is shown, its "again"
 * the number of EAGAIN calls folded just before it.  So every call is a line or counted in
 * one (a run still going when tracing stops is not counted).
 */
static __always_inline void emit_sys_exit(const struct sys_start_val *v, long ret, __u32 again,
					  __u64 ts);

/* The task's next call is of another kind: show the run's last retry, counting the rest. */
static __always_inline void flush_retries(struct sys_start_val *slot)
{
	if (!slot->retry || !slot->again)
		return;
	emit_sys_enter(slot);
	emit_sys_exit(slot, -SYS_EAGAIN, slot->again - 1, slot->exit_ts);
	slot->again = 0;
	slot->retry = 0;
}

static __always_inline int on_sys_enter(struct pt_regs *regs, long id, bool btf)
{
	struct sys_start_val v = {}, *slot;
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
	v.has_count = !!(w & (SYS_ARG3_SIZE | SYS_ARG2_COUNT));
	if (w & SYS_ARG4_OFFSET) {
		v.off = btf ? PT_REGS_PARM4_SYSCALL(regs) : PT_REGS_PARM4_CORE_SYSCALL(regs);
		v.has_off = 1;
	}
	if (cfg.netns2 && (btf ? current_netns_btf() : current_netns()) == cfg.netns2)
		v.peer = F_PEER;
	v.ts = bpf_ktime_get_ns();
	v.open = 1;
	if (btf)
		slot = bpf_task_storage_get(&sys_start_task, bpf_get_current_task_btf(), NULL,
					    BPF_LOCAL_STORAGE_GET_F_CREATE);
	else
		slot = bpf_map_lookup_elem(&sys_start, &tid);
	if (slot && slot->retry && slot->nr == v.nr && slot->fd == v.fd) {
		v.retry = 1;
		v.quiet = 1;
		v.again = slot->again;
	} else if (slot) {
		flush_retries(slot);
	}
	if (!v.quiet) {
		/* the usual case: shown now, so a call that blocks is seen while it blocks */
		emit_sys_enter(&v);
	}
	if (slot)
		*slot = v;
	else if (!btf)
		bpf_map_update_elem(&sys_start, &tid, &v, BPF_ANY);
	return 0;
}

static __always_inline void emit_sys_exit(const struct sys_start_val *v, long ret, __u32 again,
					  __u64 ts)
{
	struct istrace_event *e = ev_new(EV_SYS_EXIT);

	if (!e)
		return;
	e->flags |= v->peer;
	if (ts)
		e->ts_ns = ts;
	e->reason = v->nr;
	e->dev = v->fd;
	e->lat_ns = e->ts_ns - v->ts;
	if (v->has_off) {
		e->lba = v->off;
		e->flags |= F_LBA;
	}
	e->bytes = ret > 0 ? ret : 0;
	e->status = ret < -0x7fffffffL ? -0x7fffffff : (ret > 0x7fffffffL ? 0x7fffffff : ret);
	e->again = again;
	e->flags |= F_REASON | F_BYTES | F_STATUS | F_LAT;
	ev_submit(e);
}

/* The exit of a traced call: shown, or folded (see on_sys_enter). Returns whether the
 * task's state must be kept for a retry to come. */
static __always_inline bool sys_exit_state(struct sys_start_val *v, long ret)
{
	bool again = ret == -SYS_EAGAIN;

	v->open = 0;
	if (v->quiet && again) {
		v->again++;
		v->exit_ts = bpf_ktime_get_ns();
		return true;
	}
	if (v->quiet)
		emit_sys_enter(v);
	emit_sys_exit(v, ret, v->again, 0);
	v->quiet = 0;
	v->again = 0;
	v->retry = again;
	return again;
}

/* The number of the call exiting, where the architecture keeps it (x86: orig_ax); -1 when
 * unknown here. */
static __always_inline long sys_exit_nr(struct pt_regs *regs, bool btf)
{
#if defined(__TARGET_ARCH_x86)
	return btf ? (long)regs->orig_ax : (long)BPF_CORE_READ(regs, orig_ax);
#else
	return -1;
#endif
}

/* A call no program entered, turned away before any per-task lookup: most calls of a traced
 * task are of this kind (tgtd's setsockopt, epoll_wait, futex: 60% of its calls under a bulk
 * read).  An open entry can only be closed by the exit of its own call, which is wanted. */
static __always_inline bool sys_exit_unwanted(struct pt_regs *regs, bool btf)
{
	long nr = sys_exit_nr(regs, btf);
	__u32 k = nr;
	__u8 *want;

	if (nr < 0 || nr >= 512)
		return nr >= 512;
	want = bpf_map_lookup_elem(&sys_wanted, &k);
	return !want || !*want;
}

/* every syscall of the host exits here: a task never traced has no storage at all.  Most
 * tasks have no BPF task storage of any map, which one load shows; the helper (a lock and
 * a cache walk, ~40 ns) is left to the tasks that have some. */
static __always_inline int on_sys_exit_btf(struct pt_regs *regs, long ret)
{
	struct task_struct *task;
	struct sys_start_val *v;

	if (sys_exit_unwanted(regs, true))
		return 0;
	task = bpf_get_current_task_btf();
	if (!task->bpf_storage)
		return 0;
	v = bpf_task_storage_get(&sys_start_task, task, NULL, 0);
	if (!v || !v->open)
		return 0;
	sys_exit_state(v, ret);
	return 0;
}

static __always_inline int on_sys_exit_raw(struct pt_regs *regs, long ret)
{
	struct sys_start_val *v;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (sys_exit_unwanted(regs, false))
		return 0;
	v = bpf_map_lookup_elem(&sys_start, &tid);
	if (!v || !v->open)
		return 0;
	if (!sys_exit_state(v, ret))
		bpf_map_delete_elem(&sys_start, &tid);
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id) { return on_sys_enter(regs, id, true); }
SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id) { return on_sys_enter(regs, id, false); }
SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret) { return on_sys_exit_btf(regs, ret); }
SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs *regs, long ret) { return on_sys_exit_raw(regs, ret); }

#endif

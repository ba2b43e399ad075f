// SPDX-License-Identifier: GPL-2.0
/*
 * istrace probes: every layer of an iSCSI path, one ring buffer, one record type
 * (istrace_events.h).  The loader (bpf/probe_hooks.c) picks per hook the first
 * variant that loads and attaches: tp_btf, then raw_tp (then kprobe for kernel
 * functions), and disables the rest.  Each variant is a thin wrapper around one
 * __always_inline handler, so the variants cannot drift apart.
 *
 * Filtering happens here, not in user space, so an untraced connection costs a
 * few loads and a compare: TCP/net events by network namespace inode and iSCSI
 * port; syscalls and user probes by traced tgid (pids map) or by the task's
 * network namespace; block requests by device and by who queued the bio.
 */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Each layer lives in its own header, but they stay one compiled unit: the loader
 * switches hooks on and off inside one object through one skeleton (istrace.skel.h),
 * and the layers share one ring buffer and one cfg. */
#include "tcp.bpf.h"
#include "sockops.bpf.h"
#include "net.bpf.h"
#include "block.bpf.h"
#include "syscall.bpf.h"
#include "scsi.bpf.h"
#include "gen_usdt.bpf.h"
#include "target.bpf.h"
#include "iscsi.bpf.h"

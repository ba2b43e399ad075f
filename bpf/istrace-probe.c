// SPDX-License-Identifier: GPL-2.0
/*
 * istrace-probe: loads kernel/istrace.bpf.o (skeleton), picks per hook the best
 * attach method this kernel allows, and streams events as JSON lines
 * (docs/schema.md section 1) to --out as they arrive.
 *
 * The parts: probe_args.c (command line), probe_kernel.c (what this kernel offers),
 * probe_elf.c (user-space binaries), probe_hooks.c (hook table, load, attach, report),
 * probe_event.c (record -> columns), probe_output.c (JSON/CSV stream, meta files).
 * This file only puts them in order and runs the ring buffer loop.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <linux/types.h>

#include "probe.h"
#include "istrace.skel.h"

__s64 clock_offset_ns;
__u64 clock_width_ns;
static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

__s64 ts_ns(clockid_t c)
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

static int open_streams(void)
{
	int i;

	for (i = 0; i < nstreams; i++) {
		streams[i].f = fopen(streams[i].path, "w");
		if (!streams[i].f) {
			fprintf(stderr, "istrace-probe: %s %s: %s\n", i ? "--peer-out" : "--out",
				streams[i].path, strerror(errno));
			return -1;
		}
		setvbuf(streams[i].f, NULL, _IOFBF, 1 << 20);
	}
	return 0;
}

/* 0, or 1 when a stream could not be written out whole */
static int close_streams(void)
{
	int i, bad = 0;

	for (i = 0; i < nstreams; i++)
		if (streams[i].f && fclose(streams[i].f))
			bad = 1;
	return bad;
}

int main(int argc, char **argv)
{
	unsigned long long lost = 0, last_lost = 0;
	__s64 t_end, t_stats;
	size_t i;
	int err, any = 0;

	if (parse_args(argc, argv))
		return 2;
	if (opt.list) {
		list_hooks();
		return 0;
	}
	if (check_names())
		return 2;
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
	filt.any_task = !opt.npids && !opt.netns_given && !opt.cgroup_given;
	filt.have_pids = opt.npids > 0;
	if (opt.cgroup_given)
		filt.netns_tasks = 0;
	filt.block_by_pid = !opt.block_all && (opt.npids || opt.netns_given || opt.cgroup_given);
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

	select_hooks();

	libbpf_set_print(libbpf_print);
	vmlinux_btf = btf__load_vmlinux_btf();
	if (!vmlinux_btf)
		fprintf(stderr, "istrace-probe: no kernel BTF (%s): tp_btf hooks unavailable\n",
			strerror(errno));
	ensure_tracefs();

	{
		size_t n = strlen(opt.out);

		csv_out = opt.format ? !strcmp(opt.format, "csv")
				     : n > 4 && !strcmp(opt.out + n - 4, ".csv");
	}
	streams[nstreams++] = (struct stream){ .path = opt.out, .host = opt.host,
					       .netns = filt.netns };
	if (opt.peer_out)
		streams[nstreams++] = (struct stream){ .path = opt.peer_out,
						       .host = opt.peer_host,
						       .netns = filt.netns2 };
	if (open_streams())
		return 1;

	if (setup()) {
		teardown();
		close_streams();
		return 1;
	}
	/* traced tgids and syscalls go into maps only now that the object is loaded */
	for (i = 0; i < (size_t)opt.npids; i++) {
		__u8 one = 1;

		bpf_map__update_elem(skel->maps.pids, &opt.pids[i], sizeof(__u32), &one, 1, 0);
	}
	for (i = 0; i < nsyscalls; i++) {
		__u32 nr = (__u32)syscalls[i].nr;

		__u8 kind = syscalls[i].kind | 0x80; /* nonzero: wanted */

		if (syscalls[i].nr >= 0 && syscalls[i].nr < 512)
			bpf_map__update_elem(skel->maps.sys_wanted, &nr, sizeof(nr), &kind, 1, 0);
	}
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), handle_event, NULL, NULL);
	if (!rb) {
		fprintf(stderr, "istrace-probe: ring buffer: %s\n", strerror(errno));
		teardown();
		close_streams();
		return 1;
	}
	measure_clock();
	report_hooks();
	/* the side file first: a reader that sees the stream's meta line finds it complete;
	 * the second host's stream before the first's, which the caller waits on */
	for (i = (size_t)nstreams; i-- > 0;) {
		cur = &streams[i];
		write_meta_json(0, "running");
		write_meta_line();
	}
	for (i = 0; i < NHOOKS; i++)
		any |= hooks[i].link != NULL;
	/* scripts wait for "streaming to" (scripts/vm/guest_capture.sh) */
	for (i = 0; i < (size_t)nstreams; i++)
		fprintf(stderr, "istrace-probe: streaming to %s (host %s)%s\n", streams[i].path,
			streams[i].host,
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
			for (i = 0; i < (size_t)nstreams; i++) {
				cur = &streams[i];
				write_counter("lost", lost);
			}
			if (lost != last_lost)
				fprintf(stderr, "istrace-probe: %llu events lost so far "
					"(ring buffer full; raise --ringbuf-mb)\n", lost);
			last_lost = lost;
			t_stats = now + (__s64)(opt.stats_interval * 1e9);
		}
		for (i = 0; i < (size_t)nstreams; i++) /* kill -9 loses at most this batch */
			fflush(streams[i].f);
		if (t_end && now >= t_end)
			break;
	}
	/* drain what is already in the ring, then the final count */
	ring_buffer__consume(rb);
	lost = read_lost();
	for (i = 0; i < (size_t)nstreams; i++) {
		cur = &streams[i];
		write_counter("end", lost);
		fflush(cur->f);
		write_meta_json(lost, "done");
		fprintf(stderr, "istrace-probe: %llu %s events written, %llu lost (all hosts)\n",
			cur->nevents, cur->host, lost);
	}
	teardown();
	btf__free(vmlinux_btf);
	return close_streams();
}

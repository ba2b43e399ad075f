/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Block layer: bios as queued, split and merged, and the requests they become, issued
 * and completed.  Only the requests whose bio a traced task queued are followed
 * (bio_wanted), unless --block-all.
 */
#ifndef ISTRACE_BLOCK_BPF_H
#define ISTRACE_BLOCK_BPF_H

#include "common.bpf.h"

struct bio_key {
	__u64 sector;
	__u32 dev;
	__u32 pad;
};

/* Sectors whose bio a traced task queued: their requests are the ones we follow.  The
 * value says whose: BIO_MINE, or BIO_PEER for a task of the second host (cfg.netns2). */
#define BIO_MINE 1
#define BIO_PEER 2
/* rq_start's values are times; this bit of one marks the second host's request */
#define RQ_PEER (1ULL << 63)
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct bio_key);
	__type(value, __u8);
} bio_wanted SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64); /* struct request * */
	__type(value, __u64);
} rq_start SEC(".maps");

static __always_inline __u32 disk_dev(struct gendisk *d)
{
	/* dev_t as the kernel encodes it (MKDEV: major << 20 | minor) */
	return ((__u32)BPF_CORE_READ(d, major) << 20) | (__u32)BPF_CORE_READ(d, first_minor);
}

static __always_inline int on_bio(struct bio *bio, __u32 type, __u32 extra)
{
	struct istrace_event *e;
	struct bio_key k = {};
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	bool peer;

	k.dev = disk_dev(BPF_CORE_READ(bio, bi_bdev, bd_disk));
	if (cfg.block_dev && k.dev != cfg.block_dev)
		return 0;
	if (cfg.block_by_pid && !bpf_map_lookup_elem(&pids, &tgid) &&
	    !(cfg.cgroup_id && bpf_get_current_cgroup_id() == cfg.cgroup_id) &&
	    !(cfg.netns_tasks && cfg.netns && netns_traced(current_netns()) && !comm_excluded()))
		return 0;
	k.sector = BPF_CORE_READ(bio, bi_iter.bi_sector);
	peer = cfg.netns2 && current_netns() == cfg.netns2;
	if (type == EV_BIO_QUEUE || type == EV_BIO_SPLIT) {
		__u8 one = peer ? BIO_PEER : BIO_MINE;

		bpf_map_update_elem(&bio_wanted, &k, &one, BPF_ANY);
		/* a split leaves the rest of the bio starting at sector `extra`: its requests
		 * are the traced task's too */
		if (type == EV_BIO_SPLIT) {
			struct bio_key rest = { .dev = k.dev, .sector = extra };

			bpf_map_update_elem(&bio_wanted, &rest, &one, BPF_ANY);
		}
	}
	e = ev_new(type);
	if (!e)
		return 0;
	e->dev = k.dev;
	e->lba = k.sector;
	e->bytes = BPF_CORE_READ(bio, bi_iter.bi_size);
	e->opcode = BPF_CORE_READ(bio, bi_opf) & 0xff; /* REQ_OP_READ 0, WRITE 1 */
	e->reason = extra;
	e->flags |= F_DEV | F_LBA | F_BYTES | F_OPCODE | F_REASON | (peer ? F_PEER : 0);
	ev_submit(e);
	return 0;
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(bio_queue_btf, struct bio *bio) { return on_bio(bio, EV_BIO_QUEUE, 0); }
SEC("raw_tp/block_bio_queue")
int BPF_PROG(bio_queue_raw, struct bio *bio) { return on_bio(bio, EV_BIO_QUEUE, 0); }
/* reason = the sector where the bio was split */
SEC("tp_btf/block_split")
int BPF_PROG(bio_split_btf, struct bio *bio, unsigned int at) { return on_bio(bio, EV_BIO_SPLIT, at); }
SEC("raw_tp/block_split")
int BPF_PROG(bio_split_raw, struct bio *bio, unsigned int at) { return on_bio(bio, EV_BIO_SPLIT, at); }
/* reason = 0 back merge, 1 front merge */
SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(bio_backmerge_btf, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 0); }
SEC("raw_tp/block_bio_backmerge")
int BPF_PROG(bio_backmerge_raw, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 0); }
SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(bio_frontmerge_btf, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 1); }
SEC("raw_tp/block_bio_frontmerge")
int BPF_PROG(bio_frontmerge_raw, struct bio *bio) { return on_bio(bio, EV_BIO_MERGE, 1); }

static __always_inline int on_rq_issue(struct request *rq)
{
	struct istrace_event *e;
	struct bio_key k = {};
	__u64 key = (__u64)rq, now;
	__u8 *whose = NULL;

	k.dev = disk_dev(BPF_CORE_READ(rq, q, disk));
	if (cfg.block_dev && k.dev != cfg.block_dev)
		return 0;
	k.sector = BPF_CORE_READ(rq, __sector);
	/* Requests are issued from whatever context runs the queue: follow those
	 * whose first bio a traced task queued. */
	if (cfg.block_by_pid) {
		whose = bpf_map_lookup_elem(&bio_wanted, &k);
		if (!whose)
			return 0;
	}
	e = ev_new(EV_RQ_ISSUE);
	if (!e)
		return 0;
	if (whose && *whose == BIO_PEER)
		e->flags |= F_PEER;
	now = e->ts_ns | (e->flags & F_PEER ? RQ_PEER : 0);
	bpf_map_update_elem(&rq_start, &key, &now, BPF_ANY);
	e->dev = k.dev;
	e->lba = k.sector;
	e->bytes = BPF_CORE_READ(rq, __data_len);
	e->opcode = BPF_CORE_READ(rq, cmd_flags) & 0xff;
	e->flags |= F_DEV | F_LBA | F_BYTES | F_OPCODE;
	ev_submit(e);
	return 0;
}

static __always_inline int on_rq_complete(struct request *rq, int error, unsigned int nr_bytes)
{
	struct istrace_event *e;
	__u64 key = (__u64)rq, *start;

	start = bpf_map_lookup_elem(&rq_start, &key);
	if (!start)
		return 0;
	e = ev_new(EV_RQ_COMPLETE);
	if (!e) {
		bpf_map_delete_elem(&rq_start, &key);
		return 0;
	}
	e->lat_ns = e->ts_ns - (*start & ~RQ_PEER);
	if (*start & RQ_PEER)
		e->flags |= F_PEER;
	bpf_map_delete_elem(&rq_start, &key);
	e->dev = disk_dev(BPF_CORE_READ(rq, q, disk));
	e->lba = BPF_CORE_READ(rq, __sector);
	e->bytes = nr_bytes;
	e->opcode = BPF_CORE_READ(rq, cmd_flags) & 0xff;
	e->status = error;
	e->flags |= F_DEV | F_LBA | F_BYTES | F_OPCODE | F_LAT | F_STATUS;
	ev_submit(e);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(rq_issue_btf, struct request *rq) { return on_rq_issue(rq); }
SEC("raw_tp/block_rq_issue")
int BPF_PROG(rq_issue_raw, struct request *rq) { return on_rq_issue(rq); }
SEC("tp_btf/block_rq_complete")
int BPF_PROG(rq_complete_btf, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, error, nr_bytes);
}
SEC("raw_tp/block_rq_complete")
int BPF_PROG(rq_complete_raw, struct request *rq, int error, unsigned int nr_bytes)
{
	return on_rq_complete(rq, error, nr_bytes);
}

#endif

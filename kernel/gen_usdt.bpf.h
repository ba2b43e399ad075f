/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The pseudo-initiator istrace-gen's own USDT probes (istrace:cmd_issue,
 * cmd_first_data, cmd_done): when a READ was asked for, when its first data came and
 * when it completed, as the application saw it.  (Not libbpf's <bpf/usdt.bpf.h>, which
 * common.bpf.h includes for BPF_USDT.)
 */
#ifndef ISTRACE_GEN_USDT_BPF_H
#define ISTRACE_GEN_USDT_BPF_H

#include "common.bpf.h"

static __always_inline int on_usdt(__u32 type, long itt, long lba, long bytes, long status,
				   bool has_status)
{
	struct istrace_event *e;

	if (!task_wanted())
		return 0;
	e = ev_new(type);
	if (!e)
		return 0;
	mark_peer_task(e);
	e->itt = itt;
	e->lba = lba;
	e->bytes = bytes;
	e->flags |= F_ITT | F_LBA | F_BYTES;
	if (has_status) {
		e->status = status;
		e->flags |= F_STATUS;
	}
	ev_submit(e);
	return 0;
}

SEC("usdt")
int BPF_USDT(usdt_cmd_issue, long itt, long lba, long bytes)
{
	return on_usdt(EV_USDT_ISSUE, itt, lba, bytes, 0, false);
}

SEC("usdt")
int BPF_USDT(usdt_cmd_first_data, long itt, long lba, long bytes)
{
	return on_usdt(EV_USDT_FIRST_DATA, itt, lba, bytes, 0, false);
}

SEC("usdt")
int BPF_USDT(usdt_cmd_done, long itt, long lba, long bytes, long status)
{
	return on_usdt(EV_USDT_DONE, itt, lba, bytes, status, true);
}

#endif

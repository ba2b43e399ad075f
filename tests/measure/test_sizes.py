"""Response times and the block size at each layer: system call, block request, SCSI command."""

import numpy as np
from istrace.measure.outstanding import resp_times
from istrace.measure.sizes import block_sizes


def test_resp_times_and_sizes(cap1):
    cap, t = cap1
    rt = resp_times(cap.commands["initiator"]).to_numpy()
    assert np.allclose(rt, (np.asarray(t.resp) - np.asarray(t.issue)) / 1000)
    sizes = block_sizes(cap.commands["initiator"], cap.held_events())
    assert sizes["syscall"]["typical"] == 64 * 32768
    assert sizes["block"]["typical"] == 524288 and sizes["block"]["count"] == 4
    assert sizes["scsi_command"]["typical"] == 32768 and sizes["scsi_command"]["count"] == 64


def test_syscall_size_counts_only_reads_that_queued_block_io():
    """With a block layer, the application's read size is that of the reads during which the
    same process queued a bio: a shell's small file reads (same cgroup, same pid space) are
    not it."""
    import pandas as pd

    t0 = 1_000_000_000
    ev = pd.DataFrame([
        # the shell reads its script: no block I/O during it
        {"ts_ns": t0 + 100, "host": "initiator", "layer": "syscall", "event": "read_exit",
         "pid": 7, "bytes": 832.0, "lat_ns": 50.0},
        # dd's 2 MiB O_DIRECT read, with its bio queued inside the call
        {"ts_ns": t0 + 1000, "host": "initiator", "layer": "block", "event": "bio_queue",
         "pid": 9, "bytes": 2097152.0, "lat_ns": float("nan")},
        {"ts_ns": t0 + 5000, "host": "initiator", "layer": "syscall", "event": "read_exit",
         "pid": 9, "bytes": 2097152.0, "lat_ns": 4500.0},
        # another process's read overlapping dd's bio: not the one that queued it
        {"ts_ns": t0 + 2000, "host": "initiator", "layer": "syscall", "event": "read_exit",
         "pid": 8, "bytes": 784.0, "lat_ns": 1500.0},
    ])
    sizes = block_sizes(None, ev)
    assert sizes["syscall"] == {"typical": 2097152.0, "max": 2097152.0, "count": 1}
    # no block events (a user-space initiator): every read counts
    sizes = block_sizes(None, ev[ev["layer"] == "syscall"])
    assert sizes["syscall"]["count"] == 3

/* The read/write engine: one worker per session keeps up to --queue-depth commands in flight
 * inside the CmdSN window and receives Data-In payload straight into each command's buffer. */
#ifndef ISTRACE_IO_H
#define ISTRACE_IO_H
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "session.h"
#include "stats.h"

struct run {
	const struct gen_opts *o;
	struct stats *st;
	uint32_t block_size;
	uint64_t first_lba;   /* --offset in blocks */
	uint64_t xfer_blocks; /* blocks per command */
	uint64_t nchunks;     /* command-sized chunks in [first_lba, end of LUN) */
	atomic_uint_fast64_t claimed;
	int verify_fd; /* --verify-file, or -1 */
	int discard;   /* READ data dropped in the kernel: no buffers, no copy */
	pthread_barrier_t start; /* every session logged in */
	pthread_barrier_t go;    /* the clock has started: issue */
	atomic_int finished;
};

struct cmd {
	int busy;
	int write;
	int first_data;
	uint32_t itt;
	uint64_t lba;
	uint32_t bytes;
	uint32_t got;         /* Data-In bytes received */
	uint32_t next_datasn; /* expected DataSN of the next Data-In */
	uint64_t t_issue;
	unsigned retries; /* re-issues after UNIT ATTENTION */
	unsigned char *buf;
};

struct worker {
	struct session s;
	struct run *run;
	unsigned idx;
	struct cmd *cmds;
	unsigned ncmds, outstanding;
	uint16_t gen;
	int exhausted;
	uint64_t rng;
	int opened; /* session already open (session 0 is opened by main) */
	uint64_t unit_attentions;
	/* PDUs of the workload's commands, so a sweep can see the PDU size and R2T count the
	 * target chose rather than assume the negotiated ones */
	uint64_t data_in_pdus, data_out_pdus, r2ts;
	unsigned pending_retry; /* commands waiting to be re-issued */
	uint64_t progress_ns;   /* last Data-In / SCSI Response / R2T */
	pthread_t th;
};

/* Thread body: open the session if needed, wait at run->start, run, log out. */
void *worker_main(void *arg);
/* Free the command buffers. */
void worker_free(struct worker *w);

#endif

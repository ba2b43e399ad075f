/* istrace-gen: shared option, error and run-state types. */
#ifndef ISTRACE_GEN_H
#define ISTRACE_GEN_H
#include <stdatomic.h>
#include <stdint.h>

/* Exit codes (documented in docs/gen.md and --help). */
enum gen_exit {
	EXIT_OK = 0,
	EXIT_USAGE = 2,
	EXIT_CONNECT = 3,  /* portal unreachable, connection refused, bad address */
	EXIT_LOGIN = 4,    /* login refused (status class/detail) or negotiation failed */
	EXIT_PROTOCOL = 5, /* Reject PDU, malformed/unexpected PDU, digest mismatch */
	EXIT_SCSI = 6,     /* CHECK CONDITION or other non-GOOD SCSI status */
	EXIT_VERIFY = 7,   /* data read back differs from the pattern / file */
	EXIT_TIMEOUT = 8,  /* target stopped answering for --timeout seconds */
	EXIT_CLOSED = 9,   /* target closed the connection */
	EXIT_INTERNAL = 10 /* out of memory, thread creation, ... */
};

struct gen_opts {
	/* where */
	const char *portal; /* HOST[:PORT], IPv6 as [addr]:port */
	const char *target; /* target IQN */
	const char *initiator_name;
	uint64_t lun;
	int discover;
	/* authentication */
	const char *chap_user, *chap_secret;
	const char *chap_target_user, *chap_target_secret; /* mutual CHAP */
	/* operational keys we ask for */
	int header_digest, data_digest; /* 1 = CRC32C preferred */
	uint32_t mrdsl, max_burst, first_burst, max_r2t;
	int immediate_data, initial_r2t;
	/* workload */
	uint64_t size;      /* bytes per command; 0 = whole LUN from --offset */
	uint64_t size_blocks; /* size given in blocks (resolved after READ CAPACITY) */
	uint64_t offset;    /* bytes, or blocks when offset_in_blocks */
	int offset_in_blocks;
	int random;
	int same;           /* every command at --offset: one block, cached at the target */
	unsigned queue_depth;
	unsigned sessions;
	double time_s;      /* 0 = not time bounded */
	uint64_t count;     /* 0 = not count bounded */
	int write;
	int verify;
	const char *verify_file;
	int copy; /* receive READ data into buffers even when nothing checks it */
	int force_cdb16;
	uint64_t seed;
	/* output / behaviour */
	int json;
	int quiet;
	double timeout_s;
	/* socket baseline */
	const char *socket_addr;
	const char *serve_addr;
	int stream;
};

/* Error slot: the first error of a connection, with the exit code it maps to. */
struct gen_err {
	int code;
	char msg[320];
};

void err_set(struct gen_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Monotonic nanoseconds. */
uint64_t now_ns(void);

extern atomic_int g_stop; /* set by SIGINT, --time, or a fatal error */

#endif

/* One iSCSI connection: TCP socket, PDU send/receive with digests, sequence numbers. */
#ifndef ISTRACE_CONN_H
#define ISTRACE_CONN_H
#include <stddef.h>
#include <stdint.h>

#include "gen.h"
#include "pdu.h"

struct conn {
	int fd;
	int hdigest, ddigest; /* active digests (switched on after login) */
	uint32_t cmdsn, expstatsn, expcmdsn, maxcmdsn;
	uint32_t mrdsl_tx; /* largest data segment we may send (target's declaration) */
	unsigned char *scratch; /* for data segments that go nowhere in particular */
	size_t scratch_len;
	struct gen_err err;
	double timeout_s;
	/* small read-ahead: several small PDUs per recv(); big payloads still go straight into
	 * the command's buffer */
	unsigned char *rx;
	size_t rx_off, rx_len;
	int rx_exact; /* refill with just the bytes asked for (see conn_read) */
	int lowat;    /* SO_RCVLOWAT in force */
	char peer[300]; /* "addr:port" for messages */
};

/* Resolve HOST[:PORT] (default port dflt; IPv6 as [addr]:port) and connect with TCP_NODELAY,
 * send/receive timeouts of timeout_s. Returns 0, or -1 with c->err set (EXIT_CONNECT). */
int conn_open(struct conn *c, const char *hostport, int dflt_port, double timeout_s);
void conn_close(struct conn *c);

/* Split HOST[:PORT]; host buffer gets the bare address. Returns 0 or -1 on a malformed spec. */
int split_hostport(const char *spec, char *host, size_t hostlen, int *port, int dflt_port);

/* Send one PDU: header, optional data segment (padded, digests as negotiated). */
int conn_send_pdu(struct conn *c, const unsigned char bhs[BHS_LEN], const void *data,
		  uint32_t len);
/* Same; more=1 tells TCP another PDU follows at once (MSG_MORE), so a burst of commands
 * leaves in one segment instead of one segment (and one target wakeup) each. */
int conn_send_pdu_more(struct conn *c, const unsigned char bhs[BHS_LEN], const void *data,
		       uint32_t len, int more);
/* Receive one BHS (skipping AHS, checking the header digest) and decode it. */
int conn_recv_bhs(struct conn *c, struct bhs *h);
/* Receive h->dsl bytes into dst (or into c->scratch when dst is NULL), then padding and the
 * data digest. */
int conn_recv_data(struct conn *c, const struct bhs *h, void *dst);
/* Drop h->dsl bytes and the padding, big runs in the kernel without a copy to user space
 * (a data digest to check makes it conn_recv_data into the scratch buffer). */
int conn_skip_data(struct conn *c, const struct bhs *h);
/* Track StatSN/ExpCmdSN/MaxCmdSN from a target PDU. */
void conn_update_sn(struct conn *c, const struct bhs *h);
/* Room in the command window for one more non-immediate command. */
static inline int conn_window_open(const struct conn *c) { return sn_le(c->cmdsn, c->maxcmdsn); }

/* Raw full-buffer I/O with the socket timeouts; used by the socket baseline as well. */
int io_send_all(int fd, const void *buf, size_t len, struct gen_err *e);
int io_recv_all(int fd, void *buf, size_t len, struct gen_err *e, double timeout_s);

#endif

/* A minimal iSCSI target that is never the bottleneck: it accepts any login, answers
 * READ CAPACITY(16), and answers every READ with Data-In PDUs (the initiator's
 * MaxRecvDataSegmentLength each, status in the last) sent from one static buffer of zeros.
 * No WRITE, no digests, no error recovery: a source to measure an initiator's ceiling.
 *
 *   sink-target [ADDR] PORT        (one connection at a time, forever)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define BLOCKS (1ull << 31) /* 1 TiB of 512-byte blocks: reads never wrap */
#define MAXSEG (16u << 20)

static unsigned char zeros[MAXSEG];

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int recv_all(int fd, void *buf, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, buf, n, MSG_WAITALL);
		if (r <= 0)
			return -1;
		buf = (char *)buf + r;
		n -= (size_t)r;
	}
	return 0;
}

static int send_pdu(int fd, unsigned char *bhs, const void *data, uint32_t len, int more)
{
	static const unsigned char pad[4];
	struct iovec iov[3] = {{bhs, 48}, {(void *)data, len}, {(void *)pad, (4 - len % 4) % 4}};
	bhs[5] = (unsigned char)(len >> 16);
	bhs[6] = (unsigned char)(len >> 8);
	bhs[7] = (unsigned char)len;
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 3};
	size_t left = 48 + len + iov[2].iov_len;
	while (left) {
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
		if (w <= 0)
			return -1;
		left -= (size_t)w;
		while (w > 0) { /* advance the iovecs past what went out */
			size_t step = (size_t)w < mh.msg_iov->iov_len ? (size_t)w : mh.msg_iov->iov_len;
			mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + step;
			mh.msg_iov->iov_len -= step;
			w -= (ssize_t)step;
			if (!mh.msg_iov->iov_len && mh.msg_iovlen > 1) {
				mh.msg_iov++;
				mh.msg_iovlen--;
			}
		}
	}
	return 0;
}

static void serve(int fd)
{
	unsigned char req[48], rsp[48];
	static unsigned char data[1 << 16];
	uint32_t statsn = 1, mrdsl = 8192;
	for (;;) {
		if (recv_all(fd, req, 48) < 0)
			return;
		uint32_t dsl = (uint32_t)req[5] << 16 | (uint32_t)req[6] << 8 | req[7];
		uint32_t padded = (dsl + 3) & ~3u, ahs = (uint32_t)req[4] * 4;
		if (ahs + padded > sizeof(data) - 1 || recv_all(fd, data, ahs + padded) < 0)
			return;
		data[ahs + dsl] = 0;
		uint32_t itt = get32(req + 16), cmdsn = get32(req + 24);
		memset(rsp, 0, sizeof(rsp));
		put32(rsp + 16, itt);
		put32(rsp + 24, statsn);
		put32(rsp + 28, cmdsn + 1);
		put32(rsp + 32, cmdsn + 256);
		int op = req[0] & 0x3f;
		if (op == 0x03) { /* Login: accept the stage asked for */
			int csg = (req[1] >> 2) & 3, nsg = req[1] & 3;
			for (const char *k = (const char *)data + ahs; k < (const char *)data + ahs + dsl;
			     k += strlen(k) + 1)
				if (!strncmp(k, "MaxRecvDataSegmentLength=", 25))
					mrdsl = (uint32_t)strtoul(k + 25, NULL, 10);
			if (mrdsl < 512 || mrdsl > MAXSEG)
				mrdsl = 8192;
			static const char sec[] = "AuthMethod=None";
			static const char opk[] =
				"HeaderDigest=None\0DataDigest=None\0MaxBurstLength=16776192\0"
				"FirstBurstLength=65536\0ImmediateData=Yes\0InitialR2T=Yes\0"
				"MaxOutstandingR2T=1\0ErrorRecoveryLevel=0\0MaxRecvDataSegmentLength=65536";
			rsp[0] = 0x23;
			rsp[1] = (unsigned char)(0x80 | csg << 2 | nsg);
			memcpy(rsp + 8, req + 8, 6); /* ISID */
			put32(rsp + 28, cmdsn);
			put32(rsp + 32, cmdsn + 256);
			if (send_pdu(fd, rsp, csg ? opk : sec, csg ? sizeof(opk) : sizeof(sec), 0) < 0)
				return;
			statsn++;
		} else if (op == 0x01) {
			const unsigned char *cdb = req + 32;
			uint32_t edtl = get32(req + 20);
			rsp[0] = 0x25;
			put32(rsp + 20, 0xffffffff);
			if (cdb[0] == 0x9e) { /* READ CAPACITY(16) */
				unsigned char cap[32] = {0};
				uint64_t last = BLOCKS - 1;
				for (int i = 0; i < 8; i++)
					cap[i] = (unsigned char)(last >> (56 - 8 * i));
				cap[10] = 2; /* 512-byte blocks */
				rsp[1] = 0x81;
				if (send_pdu(fd, rsp, cap, edtl < 32 ? edtl : 32, 0) < 0)
					return;
			} else { /* any READ: zeros, mrdsl at a time, status in the last */
				uint32_t sn = 0;
				for (uint32_t off = 0; off < edtl; off += mrdsl) {
					uint32_t n = edtl - off < mrdsl ? edtl - off : mrdsl;
					int last = off + n == edtl;
					rsp[1] = last ? 0x81 : 0x00;
					put32(rsp + 36, sn++);
					put32(rsp + 40, off);
					if (send_pdu(fd, rsp, zeros, n, !last) < 0)
						return;
				}
			}
			statsn++;
		} else if (op == 0x06) { /* Logout */
			rsp[0] = 0x26;
			rsp[1] = 0x80;
			send_pdu(fd, rsp, NULL, 0, 0);
			return;
		} else if (op != 0x00) { /* NOP-Out needs no answer when it is one */
			return;
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: sink-target [ADDR] PORT\n");
		return 2;
	}
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_port = htons((uint16_t)atoi(argv[argc - 1]));
	if (inet_pton(AF_INET, argc == 3 ? argv[1] : "0.0.0.0", &a.sin_addr) != 1) {
		fprintf(stderr, "sink-target: bad address %s\n", argv[1]);
		return 2;
	}
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 4)) {
		perror("sink-target");
		return 1;
	}
	for (;;) {
		int fd = accept(l, NULL, NULL);
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		serve(fd);
		close(fd);
	}
}

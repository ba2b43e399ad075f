// SPDX-License-Identifier: GPL-2.0
/* A tight loop of one system call, timed: what the syscall layer's programs add to a call
 * they trace (read of one byte from /dev/zero) and to one they do not (getppid). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 0;
	int traced = argc > 1 && !strcmp(argv[1], "read");
	int fd = open("/dev/zero", O_RDONLY);
	char b[1];
	double t0;

	if (n <= 0 || fd < 0 || (!traced && strcmp(argv[1], "getppid"))) {
		fprintf(stderr, "usage: syscall_loop read|getppid COUNT\n");
		return 2;
	}
	t0 = now();
	for (long i = 0; i < n; i++) {
		if (!traced)
			syscall(SYS_getppid);
		else if (read(fd, b, 1) != 1)
			return 1;
	}
	printf("%s %.0f ns per call\n", argv[1], (now() - t0) / (double)n * 1e9);
	return 0;
}

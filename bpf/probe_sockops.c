// SPDX-License-Identifier: GPL-2.0
/*
 * What the sock_ops variant of tcp_probe needs from the machine: the cgroup v2 hierarchy
 * to attach to (its root: every socket of the host passes it), and the assurance that no
 * connection on the iSCSI port exists yet.  sock_ops sees a connection only as it is
 * established; one that is already up would have no cwnd at all, so then tcp_probe
 * (every segment, every socket, but every connection too) is used instead.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <glob.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

/* The cgroup v2 mount point (from /proc/self/mounts), or NULL. */
const char *cgroup2_root(void)
{
	static char path[256];
	static int done;
	char dev[64], dir[256], type[32];
	FILE *f;

	if (done)
		return path[0] ? path : NULL;
	done = 1;
	f = fopen("/proc/self/mounts", "r");
	if (!f)
		return NULL;
	while (fscanf(f, "%63s %255s %31s %*[^\n]", dev, dir, type) == 3) {
		if (!strcmp(type, "cgroup2")) {
			snprintf(path, sizeof(path), "%s", dir);
			break;
		}
	}
	fclose(f);
	return path[0] ? path : NULL;
}

/* Established connections in /proc/self/net/tcp{,6} with `port` at either end (any
 * connection when port is 0). */
static int count_here(int port)
{
	static const char *const files[] = { "/proc/self/net/tcp", "/proc/self/net/tcp6" };
	char line[512], local[64], remote[64];
	unsigned int st;
	int n = 0;
	size_t i;

	for (i = 0; i < 2; i++) {
		FILE *f = fopen(files[i], "r");

		if (!f)
			continue;
		if (!fgets(line, sizeof(line), f)) { /* header */
			fclose(f);
			continue;
		}
		while (fgets(line, sizeof(line), f)) {
			const char *lp, *rp;

			if (sscanf(line, "%*s %63s %63s %x", local, remote, &st) != 3 || st != 1)
				continue;
			lp = strrchr(local, ':');
			rp = strrchr(remote, ':');
			if (!lp || !rp)
				continue;
			if (!port || (int)strtol(lp + 1, NULL, 16) == port ||
			    (int)strtol(rp + 1, NULL, 16) == port)
				n++;
		}
		fclose(f);
	}
	return n;
}

/* The same in the network namespace at `ns_path`, from a child that enters it (the
 * loader stays where it is). -1 when that cannot be done. */
static int count_in(const char *ns_path, int port)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(ns_path, O_RDONLY | O_CLOEXEC);

		if (fd < 0 || setns(fd, CLONE_NEWNET))
			_exit(255);
		_exit(count_here(port) > 0 ? 1 : 0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) > 1)
		return -1;
	return WEXITSTATUS(status);
}

/* Whether an iSCSI connection (opt.port) is already up where the probe looks: the given
 * --netns (and --peer-netns), else this namespace and every one under /run/netns.
 * -1: could not tell. */
int iscsi_connections_up(void)
{
	glob_t g;
	size_t i;
	int any = 0, r;

	if (opt.netns_path[0]) {
		r = count_in(opt.netns_path, opt.port);
		return r == 0 && opt.peer_netns_path[0] ? count_in(opt.peer_netns_path, opt.port) : r;
	}
	if (count_here(opt.port) > 0)
		return 1;
	if (glob("/run/netns/*", 0, NULL, &g) == 0) {
		for (i = 0; i < g.gl_pathc && !any; i++) {
			r = count_in(g.gl_pathv[i], opt.port);
			if (r != 0)
				any = r; /* 1, or -1: unknown counts as "maybe" */
		}
		globfree(&g);
	}
	return any;
}

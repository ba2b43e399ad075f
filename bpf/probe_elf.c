// SPDX-License-Identifier: GPL-2.0
/*
 * The user-space binaries the uprobes and USDT probes go into: istrace-gen (--usdt),
 * tgtd and libiscsi.  Reading a function's first bytes from the ELF file is enough to
 * move one uprobe off an instruction the kernel would single-step (below); nothing
 * here needs libelf or debug info.
 */
#include <elf.h>
#undef EV_NONE /* elf.h's; istrace_events.h names its own */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe.h"

static char tgtd_bin[PATH_MAX], lib_bin[PATH_MAX];
int tgtd_pid = -1;

/* File bytes at the start of a function of a 64-bit ELF binary (.dynsym or .symtab),
 * or -1.  Only what the uprobe placement below needs: no relocation, no debug info. */
static int func_bytes(const char *path, const char *func, unsigned char *buf, size_t n)
{
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	const Elf64_Phdr *ph;
	struct stat st;
	Elf64_Addr addr = 0;
	unsigned char *m;
	int fd, ret = -1;
	size_t i, j;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || st.st_size < (off_t)sizeof(*eh)) {
		close(fd);
		return -1;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return -1;
	eh = (const Elf64_Ehdr *)m;
#define IN_FILE(off, len) ((off) <= (Elf64_Off)st.st_size && (len) <= (Elf64_Off)st.st_size - (off))
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(*sh) || eh->e_phentsize != sizeof(*ph) ||
	    !IN_FILE(eh->e_shoff, (Elf64_Off)eh->e_shnum * sizeof(*sh)) ||
	    !IN_FILE(eh->e_phoff, (Elf64_Off)eh->e_phnum * sizeof(*ph)))
		goto out;
	sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	for (i = 0; i < eh->e_shnum && !addr; i++) {
		const Elf64_Shdr *strs;

		if ((sh[i].sh_type != SHT_DYNSYM && sh[i].sh_type != SHT_SYMTAB) ||
		    sh[i].sh_link >= eh->e_shnum || !IN_FILE(sh[i].sh_offset, sh[i].sh_size))
			continue;
		strs = &sh[sh[i].sh_link];
		if (!IN_FILE(strs->sh_offset, strs->sh_size))
			continue;
		for (j = 0; j < sh[i].sh_size / sizeof(Elf64_Sym); j++) {
			const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset) + j;
			const char *name = (const char *)m + strs->sh_offset + sym->st_name;
			size_t room = strs->sh_size > sym->st_name ? strs->sh_size - sym->st_name : 0;

			if (ELF64_ST_TYPE(sym->st_info) == STT_FUNC && sym->st_value &&
			    room > strlen(func) && !strncmp(name, func, room) && !name[strlen(func)]) {
				addr = sym->st_value;
				break;
			}
		}
	}
	ph = (const Elf64_Phdr *)(m + eh->e_phoff);
	for (i = 0; addr && i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD || addr < ph[i].p_vaddr ||
		    addr - ph[i].p_vaddr + n > ph[i].p_filesz)
			continue;
		if (IN_FILE(addr - ph[i].p_vaddr + ph[i].p_offset, n)) {
			memcpy(buf, m + (addr - ph[i].p_vaddr + ph[i].p_offset), n);
			ret = 0;
		}
		break;
	}
#undef IN_FILE
out:
	munmap(m, (size_t)st.st_size);
	return ret;
}

/* A uprobe on an instruction the kernel cannot emulate (x86: anything but nop, push,
 * jmp, call, jcc) single-steps a copy of it: a second trap, 11 us per hit on the
 * development VM against 0.6 us.  Debian 12's tgtd (tgt 1.0.85) starts
 * target_cmd_io_done with movs; when its first bytes are exactly these, the probe goes
 * on the `je` at +0x1c instead, which every call passes with cmd in rdx and result in
 * esi.  Any other build keeps the probe at the entry. */
__u32 tgt_io_done_offset(const char *path)
{
#if defined(__x86_64__)
	static const unsigned char want[] = {
		0x48, 0x89, 0xfa,                         /* mov %rdi,%rdx */
		0x8b, 0x7f, 0x40,                         /* mov 0x40(%rdi),%edi */
		0x48, 0x8b, 0x0a,                         /* mov (%rdx),%rcx */
		0x48, 0x8b, 0x82, 0xd8, 0x01, 0x00, 0x00, /* mov 0x1d8(%rdx),%rax */
		0x8b, 0x49, 0x0c,                         /* mov 0xc(%rcx),%ecx */
		0x89, 0xb2, 0xb0, 0x00, 0x00, 0x00,       /* mov %esi,0xb0(%rdx) */
		0x83, 0xff, 0x01,                         /* cmp $0x1,%edi */
		0x74,                                     /* je ... (probed) */
	};
	unsigned char got[sizeof(want)];

	if (path && !func_bytes(path, "target_cmd_io_done", got, sizeof(got)) &&
	    !memcmp(got, want, sizeof(want)))
		return sizeof(want) - 1;
#else
	(void)path;
#endif
	return 0;
}

const char *bin_path(enum binary b)
{
	switch (b) {
	case BIN_GEN: return opt.usdt_path;
	case BIN_TGTD: return tgtd_bin[0] ? tgtd_bin : NULL;
	case BIN_LIBISCSI: return lib_bin[0] ? lib_bin : NULL;
	default: return NULL;
	}
}

int resolve_tgtd(void)
{
	char *end;
	long pid;
	ssize_t n;
	char link[64];

	if (!opt.tgtd)
		return 0;
	pid = strtol(opt.tgtd, &end, 10);
	if (!*end && pid > 0) {
		snprintf(link, sizeof(link), "/proc/%ld/exe", pid);
		n = readlink(link, tgtd_bin, sizeof(tgtd_bin) - 1);
		if (n <= 0) {
			fprintf(stderr, "istrace-probe: --tgtd %ld: no such process\n", pid);
			return -1;
		}
		tgtd_bin[n] = 0;
		/* a binary replaced on disk reads "... (deleted)": use the live image */
		if (strstr(tgtd_bin, " (deleted)"))
			snprintf(tgtd_bin, sizeof(tgtd_bin), "/proc/%ld/exe", pid);
		tgtd_pid = (int)pid;
		if (opt.npids < ISTRACE_MAX_PIDS)
			opt.pids[opt.npids++] = (__u32)pid;
	} else {
		snprintf(tgtd_bin, sizeof(tgtd_bin), "%s", opt.tgtd);
		if (access(tgtd_bin, R_OK)) {
			fprintf(stderr, "istrace-probe: --tgtd %s: %s\n", opt.tgtd, strerror(errno));
			return -1;
		}
	}
	return 0;
}

void resolve_libiscsi(void)
{
	static const char *const cand[] = {
		"/usr/lib/x86_64-linux-gnu/libiscsi.so.7", "/usr/lib/aarch64-linux-gnu/libiscsi.so.7",
		"/usr/lib64/libiscsi.so.7", "/usr/lib/libiscsi.so.7", "/usr/local/lib/libiscsi.so.7",
	};
	size_t i;

	if (opt.libiscsi) {
		snprintf(lib_bin, sizeof(lib_bin), "%s", opt.libiscsi);
		return;
	}
	for (i = 0; i < sizeof(cand) / sizeof(cand[0]); i++)
		if (!access(cand[i], R_OK)) {
			snprintf(lib_bin, sizeof(lib_bin), "%s", cand[i]);
			return;
		}
}

/* istrace-decode: the command line around the decoder library. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fopencookie, u_char in pcap.h: builds need no -D flags */
#endif
#include <pcap/pcap.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "decode.h"
#include "output.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: istrace-decode [options] FILE|-\n"
		"Decode iSCSI PDUs from a pcap/pcapng capture (plain or gzip'd; '-' = stdin).\n"
		"\n"
		"output (default: one text line per PDU):\n"
		"  -v, --verbose       every BHS/CDB field with the byte offsets it came from\n"
		"      --json          JSON lines, one PDU per line (keys = pdus.csv columns)\n"
		"      --csv-dir DIR   write DIR/pdus.csv, DIR/commands.csv, DIR/connections.csv,\n"
		"                      DIR/segments.bin (every TCP segment, all ports: records,\n"
		"                      docs/schema.md 4c)\n"
		"      --segments FILE the TCP segments table to FILE ('-' = stdout): CSV text, or\n"
		"                      records when FILE ends in .bin; given alone, only that:\n"
		"                      no iSCSI decoding, exit 0 even without iSCSI\n"
		"      --summary       counts per opcode, throughput, response-time percentiles,\n"
		"                      bytes per SCSI command (the PDU block size); to stderr\n"
		"                      when stdout carries --json or --segments -\n"
		"      --text          text lines even with --csv-dir/--summary\n"
		"  -q, --quiet         no stderr notes about what could not be decoded\n"
		"decoding:\n"
		"      --port N        iSCSI target TCP port (repeatable; default 3260)\n"
		"      --block-size N  block size before READ CAPACITY is seen (default 512)\n"
		"exit: 0 ok, 2 usage or input error, 3 no iSCSI found\n");
}

/* A plain classic pcap file (any byte order, us or ns)? Those take the mapped fast path. */
static int is_classic_pcap(const char *path)
{
	if (!strcmp(path, "-"))
		return 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	uint8_t m[4];
	size_t n = fread(m, 1, 4, f);
	fclose(f);
	if (n != 4)
		return 0;
	uint32_t v = (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 |
		     (uint32_t)m[3] << 24;
	return v == 0xa1b2c3d4 || v == 0xa1b23c4d || v == 0xd4c3b2a1 || v == 0x4d3cb2a1;
}

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 0);
	if (errno || !*s || *end || v > max || s[0] == '-')
		return 0;
	*out = v;
	return 1;
}

int main(int argc, char **argv)
{
	enum { O_JSON = 256, O_CSV, O_SUMMARY, O_PORT, O_BS, O_TEXT, O_SEGS };
	static const struct option lo[] = {
		{"verbose", no_argument, NULL, 'v'},     {"json", no_argument, NULL, O_JSON},
		{"csv-dir", required_argument, NULL, O_CSV}, {"summary", no_argument, NULL, O_SUMMARY},
		{"port", required_argument, NULL, O_PORT}, {"block-size", required_argument, NULL, O_BS},
		{"text", no_argument, NULL, O_TEXT},     {"quiet", no_argument, NULL, 'q'},
		{"segments", required_argument, NULL, O_SEGS},
		{"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0}};
	struct decode_opts o;
	struct out_opts oo;
	int quiet = 0, user_ports = 0, force_text = 0;
	decode_opts_init(&o);
	memset(&oo, 0, sizeof oo);
	int ch;
	while ((ch = getopt_long(argc, argv, "vqh", lo, NULL)) != -1) {
		unsigned long v;
		switch (ch) {
		case 'v': oo.verbose = 1; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		case O_JSON: oo.json = 1; break;
		case O_CSV: oo.csv_dir = optarg; break;
		case O_SUMMARY: oo.summary = 1; break;
		case O_TEXT: force_text = 1; break;
		case O_SEGS: oo.segments_path = optarg; break;
		case O_PORT:
			if (!parse_uint(optarg, 65535, &v) || v == 0) {
				fprintf(stderr, "istrace-decode: --port: not a TCP port: %s\n", optarg);
				return 2;
			}
			if (!user_ports)
				o.n_ports = 0;
			user_ports = 1;
			if (o.n_ports >= DECODE_MAX_PORTS) {
				fprintf(stderr, "istrace-decode: at most %d --port options\n",
					DECODE_MAX_PORTS);
				return 2;
			}
			o.ports[o.n_ports++] = (uint16_t)v;
			break;
		case O_BS:
			if (!parse_uint(optarg, 1u << 24, &v) || v == 0) {
				fprintf(stderr, "istrace-decode: --block-size: bad value: %s\n", optarg);
				return 2;
			}
			o.block_size = (uint32_t)v;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "istrace-decode: %s\n",
			optind >= argc ? "no input file (use - for stdin)" : "only one input file");
		usage(stderr);
		return 2;
	}
	const char *path = argv[optind];
	oo.input_name = path;
	oo.text = force_text || (!oo.json && !oo.csv_dir && !oo.summary && !oo.segments_path);
	if (oo.verbose && !oo.json)
		oo.text = 1;
	/* --segments alone: the segments table is all that is wanted, skip the iSCSI layers. */
	o.segments_only = oo.segments_path && !oo.text && !oo.json && !oo.csv_dir && !oo.summary;
	if (oo.segments_path && !strcmp(oo.segments_path, "-") && !o.segments_only) {
		fprintf(stderr, "istrace-decode: --segments - shares stdout with no other output\n");
		return 2;
	}
	struct stat sb;
	if (fstat(1, &sb) == 0 && (S_ISFIFO(sb.st_mode) || S_ISCHR(sb.st_mode)))
		oo.flush_each = 1; /* a pipe or terminal: stream each PDU as it is decoded */

	char err[1024];
	pcap_t *p = NULL;
	if (!is_classic_pcap(path)) {
		p = istrace_open_capture(path, err, sizeof err);
		if (!p) {
			fprintf(stderr, "istrace-decode: %s\n", err);
			return 2;
		}
	}
	struct out *w = out_new(&oo, err, sizeof err);
	if (!w) {
		fprintf(stderr, "istrace-decode: %s\n", err);
		if (p)
			pcap_close(p);
		return 2;
	}
	struct decode_sinks sk;
	struct decode_stats st;
	out_sinks(w, &sk);
	int rc = -2;
	if (!p)
		rc = istrace_decode_mapped(path, &o, &sk, &st);
	if (rc == -2) { /* not mappable after all: libpcap reads it */
		if (!p)
			p = istrace_open_capture(path, err, sizeof err);
		if (!p) {
			out_finish(w, &st);
			fprintf(stderr, "istrace-decode: %s\n", err);
			return 2;
		}
		rc = istrace_decode_pcap(p, &o, &sk, &st);
		pcap_close(p);
	}
	if (rc < 0) {
		out_finish(w, &st);
		fprintf(stderr, "istrace-decode: %s: %s\n", path, st.read_error_text);
		return 2;
	}
	if (out_finish(w, &st) < 0) {
		fprintf(stderr, "istrace-decode: write error: %s\n", strerror(errno));
		return 2;
	}
	if (st.read_error)
		fprintf(stderr, "istrace-decode: %s: capture ends early (%s); decoded what was there\n",
			path, st.read_error_text);
	if (o.segments_only)
		return st.read_error && st.packets == 0 ? 2 : 0;
	if (st.pdus == 0) {
		if (st.read_error && st.packets == 0)
			return 2;
		fprintf(stderr,
			"istrace-decode: %s: no iSCSI PDUs found (%llu packets, %llu TCP, %llu on the "
			"iSCSI port%s)\n",
			path, (unsigned long long)st.packets, (unsigned long long)st.tcp_packets,
			(unsigned long long)st.iscsi_packets, o.n_ports > 1 ? "s" : "");
		return 3;
	}
	uint64_t bad = st.dropped_pdus + st.incomplete_pdus + st.gaps + st.resync_skipped_bytes +
		       st.truncated_packets + st.hdigest_bad + st.ddigest_bad + st.ip_fragments;
	if (!quiet && bad)
		fprintf(stderr,
			"istrace-decode: %llu PDUs decoded; could not decode: %llu dropped PDUs, "
			"%llu incomplete, %llu gaps (%llu B), %llu truncated packets, %llu B skipped "
			"while resynchronising; %llu bad header / %llu bad data digests; %llu IP "
			"fragments skipped\n",
			(unsigned long long)st.pdus, (unsigned long long)st.dropped_pdus,
			(unsigned long long)st.incomplete_pdus, (unsigned long long)st.gaps,
			(unsigned long long)st.gap_bytes, (unsigned long long)st.truncated_packets,
			(unsigned long long)st.resync_skipped_bytes,
			(unsigned long long)st.hdigest_bad, (unsigned long long)st.ddigest_bad,
			(unsigned long long)st.ip_fragments);
	return 0;
}

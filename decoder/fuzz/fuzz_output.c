/* libFuzzer target for the output writers: byte 0 picks text, text -v, JSON lines with the
 * segments table as CSV text, or the CSV tables (segments as records) + summary; the rest is
 * a capture file decoded through output.c's own sinks. */
#include <stdlib.h>
#include <unistd.h>

#include "../output.h"
#include "fuzz_sinks.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char csv_dir[64], seg_csv[96];

static void remove_scratch(void)
{
	static const char *const names[] = { "pdus.csv", "commands.csv", "connections.csv",
					     "segments.bin", "segments.csv" };
	char path[128];
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", csv_dir, names[i]);
		unlink(path);
	}
	rmdir(csv_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Output goes nowhere; CSV files to a private scratch directory. */
	if (!freopen("/dev/null", "w", stdout))
		abort();
	snprintf(csv_dir, sizeof csv_dir, "%s", access("/dev/shm", W_OK) == 0 ?
		 "/dev/shm/istrace-fuzz-XXXXXX" : "/tmp/istrace-fuzz-XXXXXX");
	if (!mkdtemp(csv_dir))
		abort();
	snprintf(seg_csv, sizeof seg_csv, "%s/segments.csv", csv_dir);
	atexit(remove_scratch);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct out_opts oo;
	struct decode_opts o;
	struct decode_stats st;
	struct decode_sinks s;
	char err[256];

	if (size < 1)
		return 0;
	memset(&oo, 0, sizeof oo);
	switch (data[0] & 3) {
	case 0: oo.text = 1; break;
	case 1: oo.text = 1; oo.verbose = 1; break;
	case 2: oo.json = 1; oo.segments_path = seg_csv; break;
	default: oo.csv_dir = csv_dir; oo.summary = 1; break;
	}
	oo.input_name = "fuzz";
	struct out *w = out_new(&oo, err, sizeof err);
	if (!w)
		abort();
	memset(&s, 0, sizeof s);
	out_sinks(w, &s);
	decode_opts_init(&o);
	memset(&st, 0, sizeof st);
	istrace_decode_buffer(data + 1, size - 1, &o, &s, &st);
	out_finish(w, &st);
	return 0;
}

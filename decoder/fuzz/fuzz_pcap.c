/* libFuzzer target: the input is a whole capture file (pcap, pcapng, or gzip'd), decoded
 * exactly as `istrace-decode FILE` would, with the default port plus a second one. */
#include "fuzz_sinks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct decode_opts o;
	struct decode_stats st;

	decode_opts_init(&o);
	o.ports[o.n_ports++] = 3261;
	memset(&st, 0, sizeof st);
	istrace_decode_buffer(data, size, &o, &fuzz_sinks, &st);
	return 0;
}

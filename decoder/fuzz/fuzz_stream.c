/* libFuzzer target that skips the packet layers: the input is the two directions of one
 * TCP connection, so mutations land in iSCSI/SCSI parsing straight away.
 *   byte 0..1  where the initiator->target stream ends (scaled to the input length)
 *   byte 2     segment size selector (1..255 bytes, or 0 = 1448)
 *   byte 3     block size selector (512 << (b & 3))
 *   rest       i2t bytes, then t2i bytes
 */
#include "fuzz_sinks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct decode_opts o;
	struct decode_stats st;

	if (size < 4)
		return 0;
	size_t body = size - 4;
	size_t split = body ? (((size_t)data[0] << 8 | data[1]) * body) / 65535 : 0;
	size_t chunk = data[2] ? data[2] : 1448;

	decode_opts_init(&o);
	o.block_size = 512u << (data[3] & 3);
	memset(&st, 0, sizeof st);
	istrace_decode_streams(data + 4, body, split, chunk, &o, &fuzz_sinks, &st);
	return 0;
}

/* USDT probes, provider "istrace" (sys/sdt.h; zero cost unless a tracer attaches).
 * The BPF side attaches to exactly these names and argument orders:
 *   cmd_issue(itt, lba, bytes)          SCSI Command PDU handed to the socket
 *   cmd_first_data(itt, lba, bytes)     first Data-In header (read) / first data sent (write)
 *   cmd_done(itt, lba, bytes, status)   SCSI status received (status: SCSI status byte) */
#ifndef ISTRACE_USDT_H
#define ISTRACE_USDT_H
#include <sys/sdt.h>

#define USDT_CMD_ISSUE(itt, lba, bytes) DTRACE_PROBE3(istrace, cmd_issue, itt, lba, bytes)
#define USDT_CMD_FIRST_DATA(itt, lba, bytes) \
	DTRACE_PROBE3(istrace, cmd_first_data, itt, lba, bytes)
#define USDT_CMD_DONE(itt, lba, bytes, status) \
	DTRACE_PROBE4(istrace, cmd_done, itt, lba, bytes, status)

#endif

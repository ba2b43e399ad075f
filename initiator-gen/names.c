/* Tables of RFC 7143 / SPC names. */
#include "names.h"

#include <stddef.h>

const char *opcode_name(uint8_t op)
{
	switch (op) {
	case 0x00: return "NOP-Out";
	case 0x01: return "SCSI Command";
	case 0x02: return "Task Management Function Request";
	case 0x03: return "Login Request";
	case 0x04: return "Text Request";
	case 0x05: return "SCSI Data-Out";
	case 0x06: return "Logout Request";
	case 0x10: return "SNACK Request";
	case 0x20: return "NOP-In";
	case 0x21: return "SCSI Response";
	case 0x22: return "Task Management Function Response";
	case 0x23: return "Login Response";
	case 0x24: return "Text Response";
	case 0x25: return "SCSI Data-In";
	case 0x26: return "Logout Response";
	case 0x31: return "R2T";
	case 0x32: return "Asynchronous Message";
	case 0x3f: return "Reject";
	default: return "unknown opcode";
	}
}

const char *login_class_name(uint8_t cls)
{
	switch (cls) {
	case 0: return "Success";
	case 1: return "Redirection";
	case 2: return "Initiator error";
	case 3: return "Target error";
	default: return "Unknown status class";
	}
}

const char *login_status_name(uint8_t cls, uint8_t detail)
{
	static const char *const init_err[] = {
		"initiator error",        "authentication failure",
		"authorization failure",  "not found",
		"target removed",         "unsupported version",
		"too many connections",   "missing parameter",
		"can't include in session", "session type not supported",
		"session does not exist", "invalid request during login",
	};
	switch (cls) {
	case 0: return "accepted";
	case 1:
		if (detail == 1) return "target moved temporarily";
		if (detail == 2) return "target moved permanently";
		return "redirection";
	case 2:
		if (detail < sizeof(init_err) / sizeof(init_err[0]))
			return init_err[detail];
		return "initiator error (unknown detail)";
	case 3:
		if (detail == 0) return "target error";
		if (detail == 1) return "service unavailable";
		if (detail == 2) return "out of resources";
		return "target error (unknown detail)";
	default: return "unknown status";
	}
}

const char *reject_reason_name(uint8_t r)
{
	switch (r) {
	case 0x01: return "reserved (0x01)";
	case 0x02: return "data (payload) digest error";
	case 0x03: return "SNACK reject";
	case 0x04: return "protocol error";
	case 0x05: return "command not supported";
	case 0x06: return "immediate command reject - too many immediate commands";
	case 0x07: return "task in progress";
	case 0x08: return "invalid data ack";
	case 0x09: return "invalid PDU field";
	case 0x0a: return "long operation reject - can't generate Target Transfer Tag";
	case 0x0b: return "deprecated (negotiation reset)";
	case 0x0c: return "waiting for logout";
	default: return "unknown reason";
	}
}

const char *scsi_status_name(uint8_t s)
{
	switch (s) {
	case 0x00: return "GOOD";
	case 0x02: return "CHECK CONDITION";
	case 0x04: return "CONDITION MET";
	case 0x08: return "BUSY";
	case 0x18: return "RESERVATION CONFLICT";
	case 0x28: return "TASK SET FULL";
	case 0x30: return "ACA ACTIVE";
	case 0x40: return "TASK ABORTED";
	default: return "unknown status";
	}
}

const char *sense_key_name(uint8_t k)
{
	static const char *const n[16] = {
		"NO SENSE",       "RECOVERED ERROR", "NOT READY",       "MEDIUM ERROR",
		"HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION",  "DATA PROTECT",
		"BLANK CHECK",    "VENDOR SPECIFIC", "COPY ABORTED",    "ABORTED COMMAND",
		"RESERVED (0xc)", "VOLUME OVERFLOW", "MISCOMPARE",      "COMPLETED",
	};
	return n[k & 0x0f];
}

struct asc_entry {
	uint8_t asc, ascq;
	const char *name;
};

static const struct asc_entry asc_table[] = {
	{0x00, 0x00, "NO ADDITIONAL SENSE INFORMATION"},
	{0x04, 0x00, "LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE"},
	{0x04, 0x01, "LOGICAL UNIT IS IN PROCESS OF BECOMING READY"},
	{0x04, 0x02, "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED"},
	{0x0c, 0x00, "WRITE ERROR"},
	{0x11, 0x00, "UNRECOVERED READ ERROR"},
	{0x1a, 0x00, "PARAMETER LIST LENGTH ERROR"},
	{0x20, 0x00, "INVALID COMMAND OPERATION CODE"},
	{0x21, 0x00, "LOGICAL BLOCK ADDRESS OUT OF RANGE"},
	{0x24, 0x00, "INVALID FIELD IN CDB"},
	{0x25, 0x00, "LOGICAL UNIT NOT SUPPORTED"},
	{0x26, 0x00, "INVALID FIELD IN PARAMETER LIST"},
	{0x27, 0x00, "WRITE PROTECTED"},
	{0x28, 0x00, "NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED"},
	{0x29, 0x00, "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED"},
	{0x29, 0x01, "POWER ON OCCURRED"},
	{0x29, 0x02, "SCSI BUS RESET OCCURRED"},
	{0x29, 0x03, "BUS DEVICE RESET FUNCTION OCCURRED"},
	{0x2a, 0x01, "MODE PARAMETERS CHANGED"},
	{0x2a, 0x09, "CAPACITY DATA HAS CHANGED"},
	{0x3a, 0x00, "MEDIUM NOT PRESENT"},
	{0x3f, 0x0e, "REPORTED LUNS DATA HAS CHANGED"},
	{0x44, 0x00, "INTERNAL TARGET FAILURE"},
	{0x47, 0x00, "SCSI PARITY ERROR"},
	{0x47, 0x05, "PROTOCOL SERVICE CRC ERROR"},
	{0x49, 0x00, "INVALID MESSAGE ERROR"},
	{0x4b, 0x00, "DATA PHASE ERROR"},
	{0x55, 0x03, "INSUFFICIENT RESOURCES"},
};

const char *asc_name(uint8_t asc, uint8_t ascq)
{
	for (size_t i = 0; i < sizeof(asc_table) / sizeof(asc_table[0]); i++)
		if (asc_table[i].asc == asc && asc_table[i].ascq == ascq)
			return asc_table[i].name;
	return NULL;
}

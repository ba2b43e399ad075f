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

/* Names for the numbers a target sends back: login status, reject reason; SCSI status and
 * sense names come from the decoder's scsi_names.c, so both tools name a code alike. */
#ifndef ISTRACE_NAMES_H
#define ISTRACE_NAMES_H
#include <stdint.h>

#include "scsi_names.h"

const char *opcode_name(uint8_t op);
const char *login_class_name(uint8_t cls);
const char *login_status_name(uint8_t cls, uint8_t detail);
const char *reject_reason_name(uint8_t reason);

#endif

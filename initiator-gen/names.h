/* Names for the numbers a target sends back: login status, reject reason, SCSI status/sense. */
#ifndef ISTRACE_NAMES_H
#define ISTRACE_NAMES_H
#include <stdint.h>

const char *opcode_name(uint8_t op);
const char *login_class_name(uint8_t cls);
const char *login_status_name(uint8_t cls, uint8_t detail);
const char *reject_reason_name(uint8_t reason);
const char *scsi_status_name(uint8_t status);
const char *sense_key_name(uint8_t key);
/* NULL when the pair is not in the table. */
const char *asc_name(uint8_t asc, uint8_t ascq);

#endif

/* SPC names of SCSI status, sense keys and additional sense codes (decoder and istrace-gen). */
#ifndef ISTRACE_SCSI_NAMES_H
#define ISTRACE_SCSI_NAMES_H
#include <stdint.h>

const char *scsi_status_name(uint8_t status);       /* NULL if unknown */
const char *sense_key_name(uint8_t key);            /* every key 0..15 has a name */
const char *asc_name(uint8_t asc, uint8_t ascq);    /* NULL if not in the table */

#endif

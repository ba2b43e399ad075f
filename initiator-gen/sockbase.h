/* Plain-TCP baseline: the same bytes with the same request/response pacing as a READ, so
 * "socket vs iSCSI" is measured with one tool. Request: 8-byte big-endian length; answer: that
 * many bytes. Length 2^64-1 asks for an endless stream (--stream). */
#ifndef ISTRACE_SOCKBASE_H
#define ISTRACE_SOCKBASE_H
#include "gen.h"

int sock_serve(const struct gen_opts *o);
int sock_client(const struct gen_opts *o);

#endif

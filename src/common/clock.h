/*
 * clock.h: wall-clock time in milliseconds, as the mesh stores it (a node's
 * created and updated times, a lease's expiry, an item's appended-at).  The
 * loop's own monotonic clock (uv_now) times what stays in one process; this
 * one is for what is written down and compared across processes and hosts.
 */
#ifndef DURABLE_COMMON_CLOCK_H
#define DURABLE_COMMON_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch. */
int64_t durable__now_ms(void);

#endif

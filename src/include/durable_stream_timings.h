/*
 * durable_stream_timings.h: the stream timings of a mesh
 * (durable_mesh_options_t.streams): their defaults and the rule they are
 * held to.
 *
 * A field left 0 takes its default below; the streams layer fills them in
 * when the mesh opens (src/streams/directory.c), and this is the one place
 * the numbers are written.  durable_mesh_open refuses timings that break
 * the rule before it opens anything, so a C embedder hears of them; the Lua
 * binding asks the same check first, so that durable.open raises for them,
 * as it does for every other misuse.  Not installed.
 */
#ifndef DURABLE_STREAM_TIMINGS_H
#define DURABLE_STREAM_TIMINGS_H

#include <durable.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A claim waits this long for the holder's ping before it takes over. */
#define DURABLE__DEFAULT_HOLDER_PROBE_MS 5000u
/* A consumer refused its lease claims again after this long. */
#define DURABLE__DEFAULT_RECLAIM_MS 30000u
/* A failed consumer starts over after backoff_min_ms, doubling each time
 * up to backoff_max_ms. */
#define DURABLE__DEFAULT_BACKOFF_MIN_MS 1000u
#define DURABLE__DEFAULT_BACKOFF_MAX_MS 60000u
/* A host asks this often whether the other processes holding streams with
 * waiting items are alive. */
#define DURABLE__DEFAULT_LIVENESS_MS 1000u

/* 0 when the timings `o` (as given: 0 keeps a default) can be used;
 * DURABLE_EINVAL, with a message that names the options and their values,
 * when backoff_min_ms is above backoff_max_ms, both given.  One given alone
 * is not held to the other's default: a backoff never goes above its
 * maximum, so a minimum above it is the maximum every time. */
int durable__stream_timings_check(const durable_stream_options_t *o,
                                  durable_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* DURABLE_STREAM_TIMINGS_H */

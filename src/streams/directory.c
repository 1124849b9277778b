/*
 * directory.c: what the streams layer keeps per mesh for all its files:
 * the stream timings given at open (durable_mesh_options_t.streams, each 0
 * taking its default; the defaults and the check durable_mesh_open makes
 * are declared in durable_stream_timings.h), the producer's directory of the
 * streams this process has ensured (one idempotent create per stream per
 * process; losing an entry only costs one more create), and which NodeTypes
 * consume which families here (the host's wakes, waker.c).  It is kept as
 * per-mesh state (stream.c's durable__mesh_state), as the consumers' list, the
 * counters and the metrics server keep theirs, each in its own unit.
 */
#include "stream.h"

#include "durable_stream_timings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  durable_stream_options_t options;
  durable__map_t ensured;  /* stream paths made or seen by this process */
  durable__map_t consumed; /* "NodeType\nfamily" served by this process */
  durable__map_t grouped;  /* families some consumer here reads in a group */
  durable__group_seen_fn group_seen; /* the stream hubs' ear (stream_hub.c) */
} directory_t;

static const char directory_key; /* the state's key: its address */

static directory_t *directory_of(durable_mesh_t *mesh) {
  return durable__mesh_state(mesh, &directory_key);
}

static void directory_free(void *data) {
  directory_t *d = data;
  durable__map_free(&d->ensured);
  durable__map_free(&d->consumed);
  durable__map_free(&d->grouped);
  free(d);
}

static uint32_t or_default(uint32_t given, uint32_t fallback) {
  return given ? given : fallback;
}

int durable__directory_install(durable_mesh_t *mesh) {
  int rc = durable__mesh_state_add(mesh, &directory_key, sizeof(directory_t),
                                   directory_free);
  if (rc < 0)
    return rc;
  const durable_stream_options_t *o = &mesh->stream_options;
  directory_of(mesh)->options = (durable_stream_options_t){
      .holder_probe_ms =
          or_default(o->holder_probe_ms, DURABLE__DEFAULT_HOLDER_PROBE_MS),
      .reclaim_ms = or_default(o->reclaim_ms, DURABLE__DEFAULT_RECLAIM_MS),
      .backoff_min_ms =
          or_default(o->backoff_min_ms, DURABLE__DEFAULT_BACKOFF_MIN_MS),
      .backoff_max_ms =
          or_default(o->backoff_max_ms, DURABLE__DEFAULT_BACKOFF_MAX_MS),
      .liveness_ms = or_default(o->liveness_ms, DURABLE__DEFAULT_LIVENESS_MS),
  };
  return 0;
}

int durable__stream_timings_check(const durable_stream_options_t *o,
                                  durable_error_t *err) {
  if (o->backoff_min_ms != 0 && o->backoff_max_ms != 0 &&
      o->backoff_min_ms > o->backoff_max_ms)
    return durable__error(err, DURABLE_EINVAL,
                          "streams.backoff_min_ms (%u) is above "
                          "streams.backoff_max_ms (%u)",
                          (unsigned)o->backoff_min_ms,
                          (unsigned)o->backoff_max_ms);
  return 0;
}

durable_stream_options_t durable__stream_options(durable_mesh_t *mesh) {
  return directory_of(mesh)->options;
}

int durable__directory_has(durable_mesh_t *mesh, const char *stream_path) {
  return durable__map_get(&directory_of(mesh)->ensured, stream_path) != NULL;
}

void durable__directory_mark(durable_mesh_t *mesh, const char *stream_path) {
  static char present;
  durable__map_put(&directory_of(mesh)->ensured, stream_path, &present);
}

void durable__directory_forget(durable_mesh_t *mesh, const char *stream_path) {
  durable__map_del(&directory_of(mesh)->ensured, stream_path);
}

static void consumed_key(char *out, size_t size, const char *type,
                         const char *family) {
  snprintf(out, size, "%s\n%s", type, family);
}

int durable__consumed_add(durable_mesh_t *mesh, const char *type,
                          const char *family) {
  static char present;
  char key[2 * DURABLE_PATH_MAX];
  consumed_key(key, sizeof key, type, family);
  return durable__map_put(&directory_of(mesh)->consumed, key, &present);
}

int durable__consumed_has(durable_mesh_t *mesh, const char *type,
                          const char *family) {
  char key[2 * DURABLE_PATH_MAX];
  consumed_key(key, sizeof key, type, family);
  return durable__map_get(&directory_of(mesh)->consumed, key) != NULL;
}

int durable__grouped_add(durable_mesh_t *mesh, const char *family) {
  static char present;
  return durable__map_put(&directory_of(mesh)->grouped, family, &present);
}

void durable__groups_on_seen(durable_mesh_t *mesh, durable__group_seen_fn fn) {
  directory_of(mesh)->group_seen = fn;
}

void durable__group_seen(durable_mesh_t *mesh, const char *group_path,
                         const durable__stream_state_t *s, int64_t version) {
  directory_t *d = directory_of(mesh);
  if (d && d->group_seen)
    d->group_seen(mesh, group_path, s, version);
}

int durable__grouped_has(durable_mesh_t *mesh, const char *family) {
  directory_t *d = directory_of(mesh);
  return d && durable__map_get(&d->grouped, family) != NULL;
}

/* Every family some NodeType consumes here (a family consumed by two
 * NodeTypes comes twice). */
void durable__consumed_families(durable_mesh_t *mesh,
                                void (*cb)(const char *family, void *data),
                                void *data) {
  directory_t *d = directory_of(mesh);
  const char *key;
  void *value;
  for (size_t i = 0; d && durable__map_next(&d->consumed, &i, &key, &value);) {
    const char *family = strchr(key, '\n');
    if (family)
      cb(family + 1, data);
  }
}

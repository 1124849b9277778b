/*
 * directory.c: what the streams layer keeps per mesh for all its files:
 * the stream timings given at open (durable_mesh_options_t.streams, each 0
 * taking its default), the producer's directory of the streams this process
 * has ensured (one idempotent create per stream per process; losing an
 * entry only costs one more create), and which NodeTypes consume which
 * families here (the host's wakes, waker.c).  It is kept as per-mesh state
 * (stream.c's durable__mesh_state), as the consumers' list, the counters
 * and the metrics server keep theirs, each in its own unit.
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  durable_stream_options_t options;
  durable__map_t ensured;  /* stream paths made or seen by this process */
  durable__map_t consumed; /* "NodeType\nfamily" served by this process */
} directory_t;

static const char directory_key; /* the state's key: its address */

static directory_t *directory_of(durable_mesh_t *mesh) {
  return durable__mesh_state(mesh, &directory_key);
}

static void directory_free(void *data) {
  directory_t *d = data;
  durable__map_free(&d->ensured);
  durable__map_free(&d->consumed);
  free(d);
}

int durable__directory_install(durable_mesh_t *mesh) {
  int rc = durable__mesh_state_add(mesh, &directory_key, sizeof(directory_t),
                                   directory_free);
  if (rc < 0)
    return rc;
  const durable_stream_options_t *o = &mesh->stream_options;
  directory_of(mesh)->options = (durable_stream_options_t){
      .holder_probe_ms = o->holder_probe_ms ? o->holder_probe_ms : 5000,
      .reclaim_ms = o->reclaim_ms ? o->reclaim_ms : 30000,
      .backoff_min_ms = o->backoff_min_ms ? o->backoff_min_ms : 1000,
      .backoff_max_ms = o->backoff_max_ms ? o->backoff_max_ms : 60000,
      .liveness_ms = o->liveness_ms ? o->liveness_ms : 1000,
  };
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

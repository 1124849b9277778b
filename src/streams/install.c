/*
 * install.c: what the streams layer adds to every mesh, and its per-mesh
 * state.
 *
 * durable_mesh_open is this file's: it opens the hub layer's mesh
 * (durable__mesh_open) with this layer's install hook, so that the hub
 * layer knows nothing of streams (the arrow points down).  Per-mesh state --
 * the stream timings given at open (durable_mesh_options_t.streams) and the
 * directory of streams this process has ensured -- is kept on the read-issuing
 * hub, which lives exactly as long as the mesh.
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *consumers; /* consumer.c's list of this mesh's consumers */
  durable_stream_options_t options;
  durable__map_t ensured;  /* stream paths made or seen by this process */
  durable__map_t consumed; /* "NodeType\nfamily" served by this process */
  durable__map_t stats;    /* stats.c's counters per stream */
  void *metrics;           /* metrics.c's server, if one was started */
} streams_mesh_t;

static const char mesh_key; /* the attachment's key: its address */

static void mesh_state_free(void *data) {
  streams_mesh_t *m = data;
  /* (the store's session hook needs no undoing: the store closes before
   * the mesh is freed, and this may run later still, when Lua lets go of
   * the read-issuing hub: the mesh is not to be touched here) */
  durable__consumers_forget(&m->consumers);
  durable__map_free(&m->ensured);
  durable__map_free(&m->consumed);
  durable__stream_stats_free(&m->stats);
  free(m);
}

static streams_mesh_t *mesh_state(durable_mesh_t *mesh) {
  return durable__hub_attached(durable__mesh_reads_hub(mesh), &mesh_key);
}

/* The store lost the session that says this process is alive: its leases
 * may be taken over meanwhile, so no consumer hands out another item
 * before it has claimed again. */
static void on_session_lost(void *data) {
  durable_mesh_t *mesh = data;
  durable_mesh_log(mesh, DURABLE_LOG_WARN,
                   "[DurableStreams] this process lost its liveness session "
                   "with the store; every consumer claims again before its "
                   "next item");
  durable__consumers_session_lost(mesh);
}

/* The store confirmed again that this process holds its liveness lock. */
static void on_live(void *data) {
  durable__consumers_live(data);
}

void **durable__stream_consumers(durable_mesh_t *mesh) {
  streams_mesh_t *m = mesh_state(mesh);
  return m ? &m->consumers : NULL;
}

static int install(durable_mesh_t *mesh) {
  streams_mesh_t *m = calloc(1, sizeof(*m));
  if (m == NULL)
    return DURABLE_ENOMEM;
  /* the timings given at open, each 0 taking its default */
  const durable_stream_options_t *o = &mesh->stream_options;
  m->options = (durable_stream_options_t){
      .holder_probe_ms = o->holder_probe_ms ? o->holder_probe_ms : 5000,
      .reclaim_ms = o->reclaim_ms ? o->reclaim_ms : 30000,
      .backoff_min_ms = o->backoff_min_ms ? o->backoff_min_ms : 1000,
      .backoff_max_ms = o->backoff_max_ms ? o->backoff_max_ms : 60000,
      .liveness_ms = o->liveness_ms ? o->liveness_ms : 1000,
  };
  if (durable__hub_attach(durable__mesh_reads_hub(mesh), &mesh_key, m,
                          mesh_state_free) < 0) {
    free(m);
    return DURABLE_ENOMEM;
  }
  durable__store_on_session_lost(durable_mesh_store(mesh), on_session_lost,
                                 mesh);
  durable__store_on_live(durable_mesh_store(mesh), on_live, mesh);
  return durable__stream_hub_install(mesh);
}

/* Every mesh is opened with the streams layer installed in it. */
int durable_mesh_open(uv_loop_t *loop, const durable_mesh_options_t *options,
                      durable_mesh_t **out, durable_error_t *err) {
  static int (*const installs[])(durable_mesh_t * mesh) = {install, NULL};
  return durable__mesh_open(loop, options, installs, out, err);
}

durable_stream_options_t durable__stream_options(durable_mesh_t *mesh) {
  streams_mesh_t *m = mesh_state(mesh);
  return m->options;
}

/* The directory: the producer's "ensured" set (one idempotent create per
 * stream per process; losing an entry only costs one more create). */
int durable__directory_has(durable_mesh_t *mesh, const char *stream_path) {
  return durable__map_get(&mesh_state(mesh)->ensured, stream_path) != NULL;
}

durable__map_t *durable__stream_stats_map(durable_mesh_t *mesh) {
  streams_mesh_t *m = mesh_state(mesh);
  return m ? &m->stats : NULL;
}

void **durable__stream_metrics(durable_mesh_t *mesh) {
  streams_mesh_t *m = mesh_state(mesh);
  return m ? &m->metrics : NULL;
}

void durable__directory_mark(durable_mesh_t *mesh, const char *stream_path) {
  static char present;
  durable__map_put(&mesh_state(mesh)->ensured, stream_path, &present);
}

void durable__directory_forget(durable_mesh_t *mesh, const char *stream_path) {
  durable__map_del(&mesh_state(mesh)->ensured, stream_path);
}

/* The families each NodeType consumes in this process, for the host's
 * wakes (waker.c). */
static void consumed_key(char *out, size_t size, const char *type,
                         const char *family) {
  snprintf(out, size, "%s\n%s", type, family);
}

int durable__consumed_add(durable_mesh_t *mesh, const char *type,
                          const char *family) {
  static char present;
  char key[2 * DURABLE_PATH_MAX];
  consumed_key(key, sizeof key, type, family);
  return durable__map_put(&mesh_state(mesh)->consumed, key, &present);
}

int durable__consumed_has(durable_mesh_t *mesh, const char *type,
                          const char *family) {
  char key[2 * DURABLE_PATH_MAX];
  consumed_key(key, sizeof key, type, family);
  return durable__map_get(&mesh_state(mesh)->consumed, key) != NULL;
}

/* Every family some NodeType consumes here (a family consumed by two
 * NodeTypes comes twice). */
void durable__consumed_families(durable_mesh_t *mesh,
                                void (*cb)(const char *family, void *data),
                                void *data) {
  streams_mesh_t *m = mesh_state(mesh);
  const char *key;
  void *value;
  for (size_t i = 0; m && durable__map_next(&m->consumed, &i, &key, &value);) {
    const char *family = strchr(key, '\n');
    if (family)
      cb(family + 1, data);
  }
}

/*
 * install.c: what the streams layer adds to every mesh.
 *
 * durable_mesh_open is this file's: it opens the hub layer's mesh
 * (durable__mesh_open) with this layer's install hook, so that the hub
 * layer knows nothing of streams (the arrow points down).  The hook sets up
 * the layer's per-mesh state (directory.c, and the units that keep their
 * own: the consumers, the counters, the metrics server), the stream hubs'
 * NodeType, and the store's hooks for this process's liveness.  It is the
 * top of the layer: nothing here calls it.
 */
#include "stream.h"

#include "durable_stream_timings.h"

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

/* The store's watch connected (again) to server `now`: said at start (at
 * debug: a one-shot command's output is no place for it), and loudly when
 * a failover moved it (the stream hubs then read
 * their states again: what the old server said may not be what the new one
 * holds).  A reconnect ends the backoffs the store's failure caused. */
static void on_server(void *data, const char *now, const char *was) {
  durable_mesh_t *mesh = data;
  if (was == NULL)
    durable_mesh_log(mesh, DURABLE_LOG_DEBUG, "[Store] on server %s", now);
  else if (was != now)
    durable_mesh_log(mesh, DURABLE_LOG_WARN,
                     "[Store] the server changed: now on %s, was %s; every "
                     "stream's state is read again from it",
                     now, was);
  if (was != NULL)
    durable__consumers_live(mesh, 1);
}

/* More than one server of the store takes writes (NULL: only one again). */
static void on_split(void *data, const char *servers) {
  durable_mesh_t *mesh = data;
  if (servers != NULL)
    durable_mesh_log(mesh, DURABLE_LOG_ERROR,
                     "[Store] more than one server takes writes: %s; nothing "
                     "is written to any of them until only one does (stop "
                     "or fence the old primary)",
                     servers);
  else
    durable_mesh_log(mesh, DURABLE_LOG_WARN,
                     "[Store] only one server takes writes again; writing "
                     "goes on");
}

/* A commit waits long, and why (NULL: it ended). */
static void on_stall(void *data, const char *why) {
  durable_mesh_t *mesh = data;
  if (why != NULL)
    durable_mesh_log(mesh, DURABLE_LOG_WARN, "[Store] %s", why);
  else
    durable_mesh_log(mesh, DURABLE_LOG_INFO,
                     "[Store] the commit that waited has been answered");
}

/* The store confirmed again that this process holds its liveness lock. */
static void on_live(void *data) {
  durable__consumers_live(data, 0);
}

static int install(durable_mesh_t *mesh) {
  int rc;
  if ((rc = durable__directory_install(mesh)) < 0 ||
      (rc = durable__consumers_install(mesh)) < 0 ||
      (rc = durable__seen_install(mesh)) < 0 ||
      (rc = durable__stream_stats_install(mesh)) < 0 ||
      (rc = durable__window_install(mesh)) < 0 ||
      (rc = durable__publish_install(mesh)) < 0 ||
      (rc = durable__read_budget_install(mesh)) < 0 ||
      (rc = durable__metrics_install(mesh)) < 0)
    return rc;
  /* (the store's hooks need no undoing: the store closes before the mesh
   * is freed) */
  durable__store_on_session_lost(durable_mesh_store(mesh), on_session_lost,
                                 mesh);
  durable__store_on_live(durable_mesh_store(mesh), on_live, mesh);
  durable__store_on_server(durable_mesh_store(mesh), on_server, mesh);
  durable__store_on_split(durable_mesh_store(mesh), on_split, mesh);
  durable__store_on_stall(durable_mesh_store(mesh), on_stall, mesh);
  return durable__stream_hub_install(mesh);
}

/* Every mesh is opened with the streams layer installed in it, its stream
 * timings checked first: refused, nothing has been opened. */
int durable_mesh_open(uv_loop_t *loop, const durable_mesh_options_t *options,
                      durable_mesh_t **out, durable_error_t *err) {
  static int (*const installs[])(durable_mesh_t * mesh) = {install, NULL};
  int rc;
  if (options != NULL &&
      (rc = durable__stream_timings_check(&options->streams, err)) < 0) {
    *out = NULL;
    return rc;
  }
  return durable__mesh_open(loop, options, installs, out, err);
}

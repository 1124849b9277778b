/*
 * store.c: a store, from the outside: opening it (its backend chosen by the
 * URL, its instance name, the writer connected at once so that an
 * unreachable database is reported by open), and closing it (the feed's
 * watches, then the engine's workers, then the backend's watch source).
 *
 * A store opened for reading (durable_store_open_read) is the same engine
 * without its writing half: no schema made, no watch (so no LISTEN and no
 * liveness lock), every write refused; it may be a standby.
 *
 * The work itself runs on the engine (engine.c): reads (read.c), writes
 * (write.c), grants (access.c), the change feed (feed.c); the process's
 * liveness as the database sees it is fence.c's.  This file is the top of
 * the mesh layer's store: the backends it picks call down into those, never
 * back into it.
 *
 * A connection that fails with DURABLE_EUNAVAIL is dropped and opened again
 * for the next job, so a restarted database or a killed backend costs the
 * jobs in flight (reported failed, never silently lost) and nothing more;
 * a group that certainly did not commit is retried once on the new
 * connection.
 */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

const durable__backend_t *(*durable__backend_wrap)(
    const durable__backend_t *be) = NULL;

static const durable__backend_t *backend_for(const char *url) {
  if (strncmp(url, "sqlite:", 7) == 0)
    return &durable__sqlite_backend;
  if (strncmp(url, "postgresql:", 11) == 0 ||
      strncmp(url, "postgres:", 9) == 0 || strchr(url, '=') != NULL)
    return &durable__postgres_backend;
  return NULL;
}

static int store_open(uv_loop_t *loop, const char *url, int readonly,
                      durable_store_t **out, durable_error_t *err);

int durable_store_open(uv_loop_t *loop, const char *url, durable_store_t **out,
                       durable_error_t *err) {
  return store_open(loop, url, 0, out, err);
}

int durable_store_open_read(uv_loop_t *loop, const char *url,
                            durable_store_t **out, durable_error_t *err) {
  return store_open(loop, url, 1, out, err);
}

static int store_open(uv_loop_t *loop, const char *url, int readonly,
                      durable_store_t **out, durable_error_t *err) {
  *out = NULL;
  if (loop == NULL || url == NULL || *url == '\0')
    return durable__error(err, DURABLE_EINVAL, "store URL is missing");
  const durable__backend_t *be = backend_for(url);
  if (be != NULL && durable__backend_wrap != NULL)
    be = durable__backend_wrap(be); /* a test's (backend.h) */
  if (be == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "store '%s' is not a known kind (use sqlite:PATH, "
                          "sqlite::memory: or postgresql://...)",
                          url);
  durable_store_t *store = calloc(1, sizeof(*store));
  if (store == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  store->loop = loop;
  store->be = be;
  store->url = strdup(url);
  store->name = be->display_name ? be->display_name(url) : strdup(url);
  store->single = be->single_connection(url);
  store->readonly = readonly;
  durable__instance_make(store->instance, sizeof store->instance);
  if (store->url == NULL || store->name == NULL ||
      uv_mutex_init(&store->lock) != 0) {
    free(store->url);
    free(store->name);
    free(store);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }

  /* Connect the writer here, on the caller's thread, so an unreachable store
   * is reported by open (bounded by the backend's connect timeout). */
  durable_error_t e = {0};
  store->writer.store = store;
  int rc = durable__worker_connect(&store->writer, &e);
  if (rc < 0) {
    durable__error(err, rc, "%s", e.message);
    goto fail;
  }
  if ((rc = durable__engine_start(store, err)) < 0) {
    /* cannot happen short of resource exhaustion; stop what started */
    if (!store->async_open) {
      durable__worker_disconnect(&store->writer);
      goto fail;
    }
    durable_store_close(store, NULL, NULL);
    return rc;
  }
  if (!store->single && !readonly && be->watch_start) {
    rc = be->watch_start(store, url, store->instance, &store->src, &e);
    if (rc < 0) {
      durable__error(err, rc, "%s", e.message);
      durable_store_close(store, NULL, NULL);
      return rc;
    }
  }
  *out = store;
  return 0;

fail:
  uv_mutex_destroy(&store->lock);
  free(store->url);
  free(store->name);
  free(store);
  return rc;
}

static void free_store(durable_store_t *store) {
  void (*cb)(void *) = store->close_cb;
  void *data = store->close_data;
  durable__feed_free(store);
  uv_mutex_destroy(&store->lock);
  free(store->split);
  free(store->stall);
  free(store->own_commits);
  free(store->url);
  free(store->name);
  free(store);
  if (cb)
    cb(data);
}

static void on_async_closed(uv_handle_t *handle) {
  free_store(handle->data);
}

static void on_src_stopped(void *data) {
  durable_store_t *store = data;
  store->src = NULL;
  uv_close((uv_handle_t *)&store->async, on_async_closed);
}

static void on_engine_stopped(durable_store_t *store) {
  if (store->src)
    store->be->watch_stop(store->src, on_src_stopped, store);
  else
    on_src_stopped(store);
}

void durable_store_close(durable_store_t *store, void (*cb)(void *data),
                         void *data) {
  if (store == NULL)
    return;
  store->close_cb = cb;
  store->close_data = data;
  store->closing = 1;
  durable__feed_close_all(store);
  durable__engine_stop(store, on_engine_stopped);
}

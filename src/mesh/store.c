/*
 * store.c: a store, from the outside: opening it (its backend chosen by the
 * URL, its instance name, the writer connected at once so that an
 * unreachable database is reported by open), closing it (the feed's
 * watches, then the engine's workers, then the backend's watch source), and
 * the liveness of the process as the database sees it (fencing).
 *
 * The work itself runs on the engine (engine.c): reads (read.c), writes
 * (write.c), grants (access.c), the change feed (feed.c).
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
#include <time.h>

/* ---- fencing ------------------------------------------------------------ */

uint64_t durable__fence_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t durable__store_fence_ms(durable_store_t *store) {
  return store->be->watch_beat && store->src ? store->be->fence_ms : 0;
}

int durable__store_live(durable_store_t *store) {
  uint32_t fence = durable__store_fence_ms(store);
  if (fence == 0)
    return 1;
  uint64_t now = durable__fence_clock();
  store->live_asked = now;
  if (now < store->live_until)
    return 1;
  store->be->watch_beat(store->src);
  return 0;
}

void durable__store_live_confirmed(durable_store_t *store, uint64_t asked_ns) {
  uint64_t until = asked_ns + (uint64_t)store->be->fence_ms * 1000000u;
  int lapsed = durable__fence_clock() >= store->live_until;
  if (until > store->live_until)
    store->live_until = until;
  if (lapsed && durable__fence_clock() < store->live_until && store->on_live)
    store->on_live(store->on_live_data);
}

void durable__store_on_live(durable_store_t *store, void (*fn)(void *data),
                            void *data) {
  store->on_live = fn;
  store->on_live_data = data;
}

void durable__store_live_lost(durable_store_t *store) {
  store->live_until = 0;
}

int durable__store_live_wanted(durable_store_t *store) {
  uint64_t recent = 2 * (uint64_t)store->be->fence_ms * 1000000u;
  return store->live_asked != 0 &&
         durable__fence_clock() - store->live_asked < recent;
}

static const durable__backend_t *backend_for(const char *url) {
  if (strncmp(url, "sqlite:", 7) == 0)
    return &durable__sqlite_backend;
  if (strncmp(url, "postgresql:", 11) == 0 ||
      strncmp(url, "postgres:", 9) == 0 || strchr(url, '=') != NULL)
    return &durable__postgres_backend;
  return NULL;
}

/* The URL with any password replaced by "***", for messages and logs. */
static char *masked(const char *url) {
  char *s = strdup(url);
  if (s == NULL)
    return NULL;
  /* scheme://user:password@host */
  char *scheme = strstr(s, "://");
  char *at = scheme ? strchr(scheme + 3, '@') : NULL;
  char *colon = scheme ? strchr(scheme + 3, ':') : NULL;
  if (at && colon && colon < at) {
    memmove(colon + 4, at, strlen(at) + 1);
    memcpy(colon, ":***", 4);
  }
  /* password=secret in a conninfo or a query string */
  char *pw = strstr(s, "password=");
  if (pw) {
    char *end = pw + 9 + strcspn(pw + 9, " &");
    memmove(pw + 12, end, strlen(end) + 1);
    memcpy(pw + 9, "***", 3);
  }
  return s;
}

/* "HOST:PID:16hex".  The host and pid tell an operator which process holds
 * a lease; the random part makes the instance unique (a pid is reused) and
 * is its liveness key.  Its top two bits are cleared here, so that the key
 * is the whole hex part. */
static void make_instance(char *out, size_t size) {
  unsigned char r[8] = {0};
  uv_random(NULL, NULL, r, sizeof r, 0, NULL);
  r[0] &= 0x3f;
  char host[UV_MAXHOSTNAMESIZE] = "localhost";
  size_t hlen = sizeof host;
  if (uv_os_gethostname(host, &hlen) != 0)
    snprintf(host, sizeof host, "localhost");
  for (char *h = host; *h; h++)
    if (*h == ':' || *h == '\n' || *h == '/')
      *h = '-';
  snprintf(out, size, "%.48s:%d:%02x%02x%02x%02x%02x%02x%02x%02x", host,
           (int)uv_os_getpid(), r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

int durable__instance_key(const char *instance, uint64_t *key) {
  const char *hex = instance ? strrchr(instance, ':') : NULL;
  if (hex == NULL || strlen(hex + 1) != 16 ||
      strspn(hex + 1, "0123456789abcdef") != 16)
    return DURABLE_EINVAL;
  *key = strtoull(hex + 1, NULL, 16) & ((UINT64_C(1) << 62) - 1);
  return 0;
}

int durable_store_open(uv_loop_t *loop, const char *url, durable_store_t **out,
                       durable_error_t *err) {
  *out = NULL;
  if (loop == NULL || url == NULL || *url == '\0')
    return durable__error(err, DURABLE_EINVAL, "store URL is missing");
  const durable__backend_t *be = backend_for(url);
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
  store->name = masked(url);
  store->single = be->single_connection(url);
  make_instance(store->instance, sizeof store->instance);
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
  int rc = be->connect(url, &store->writer.conn, &e);
  if (rc < 0) {
    durable__error(err, rc, "%s", e.message);
    goto fail;
  }
  if ((rc = durable__engine_start(store, err)) < 0) {
    /* cannot happen short of resource exhaustion; stop what started */
    if (!store->async_open) {
      be->disconnect(store->writer.conn);
      goto fail;
    }
    durable_store_close(store, NULL, NULL);
    return rc;
  }
  if (!store->single && be->watch_start) {
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

/*
 * server.c: which server a store's connections are on, where the store may
 * be served by one of several (PostgreSQL: a primary and its standbys, any
 * of which a failover may promote).
 *
 * The watch's connection holds this process's liveness lock, and the other
 * processes ask that server whether the lock is held.  So the watch decides:
 * the server it connects to is the store's server (followed), and a worker
 * connection that lands anywhere else is refused and made again before any
 * job runs on it -- a liveness question asked there would get "not held" for
 * every live process, and a write there would go to a server this process does
 * not follow.  A worker that finds another server nudges the watch, which
 * may be waiting out its backoff on a server that is gone.
 *
 *   watch connects to S --followed--> store's server S, generation + 1
 *   worker connects to T --check----> T == S: use it; T != S: refuse, nudge
 *   worker's next job ----moved?----> generation changed: connect again
 *
 * Should more than one server take writes (the watch asks each of them now
 * and then: durable__store_split), every worker connection is refused and
 * made again until only one does, so that the store never splits.
 *
 * While the watch is away (a worker may reconnect before it) and right
 * after it reconnected, the other processes may not have taken their
 * liveness locks again yet: until SETTLE_MS after the watch is back (at
 * most SETTLE_AWAY_MS while it stays away) a lock found missing is taken
 * for one not yet taken again, not for a process gone
 * (durable__store_settling), so that a server's restart is no takeover.
 *
 * A backend without server_of (SQLite: one file) never comes here.
 */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* After the watch reconnected, how long a missing liveness lock is not
 * taken for a dead process: a server that restarted or failed over dropped
 * every process's lock, and each takes its own again within its watch's
 * backoff (at most 1 s) and a connect. */
#define SETTLE_MS 3000
#define SETTLE_AWAY_MS 10000

static int same_server(const durable__server_t *a, const durable__server_t *b) {
  return a->timeline == b->timeline && strcmp(a->system, b->system) == 0;
}

static void describe(char *out, size_t size, const durable__server_t *s) {
  snprintf(out, size, "%s (timeline %u)", s->where, s->timeline);
}

void durable__store_server_followed(durable_store_t *store,
                                    const durable__server_t *s) {
  char now[sizeof(s->where) + 32], was[sizeof(s->where) + 32];
  uv_mutex_lock(&store->lock);
  int first = store->server.system[0] == '\0';
  int changed = !first && !same_server(&store->server, s);
  describe(was, sizeof was, &store->server);
  if (first || changed)
    store->server_gen++;
  /* the watch's first connect (at open) is no reconnect */
  if (store->watch_followed++ > 0)
    store->server_back = durable__fence_clock();
  store->server = *s;
  uv_mutex_unlock(&store->lock);
  describe(now, sizeof now, s);
  if (store->on_server != NULL)
    store->on_server(store->on_server_data, now,
                     first     ? NULL
                     : changed ? was
                               : now);
}

void durable__store_split(durable_store_t *store, const char *servers) {
  char *copy = servers ? strdup(servers) : NULL;
  uv_mutex_lock(&store->lock);
  int changed = (store->split == NULL) != (servers == NULL) ||
                (servers && strcmp(store->split, servers) != 0);
  free(store->split);
  store->split = copy;
  store->server_gen += changed; /* connections made meanwhile go too */
  uv_mutex_unlock(&store->lock);
  if (changed && store->on_split != NULL)
    store->on_split(store->on_split_data, servers);
}

void durable__store_on_split(durable_store_t *store,
                             void (*fn)(void *data, const char *servers),
                             void *data) {
  store->on_split = fn;
  store->on_split_data = data;
}

int durable__store_split_refusal(durable_store_t *store, durable_error_t *err) {
  int rc = 0;
  uv_mutex_lock(&store->lock);
  if (store->split != NULL)
    rc = durable__error(err, DURABLE_EUNAVAIL,
                        "%s: more than one server takes writes: %s; nothing "
                        "is written to any of them until only one does (stop "
                        "or fence the old primary)",
                        store->name, store->split);
  uv_mutex_unlock(&store->lock);
  return rc;
}

int durable__store_server_check(durable_store_t *store,
                                const durable__server_t *s, uint64_t *gen,
                                durable_error_t *err) {
  int rc = durable__store_split_refusal(store, err);
  if (rc < 0)
    return rc;
  uv_mutex_lock(&store->lock);
  if (store->server.system[0] == '\0') {
    store->server = *s; /* the first connection, before the watch's */
    store->server_gen++;
  }
  durable__server_t ours = store->server;
  *gen = store->server_gen;
  uv_mutex_unlock(&store->lock);
  if (same_server(&ours, s))
    return 0;
  __atomic_store_n(&store->nudge, 1, __ATOMIC_RELEASE);
  uv_async_send(&store->async);
  return durable__error(
      err, DURABLE_EUNAVAIL,
      "%s: connected to %s (system %s, timeline %u), not to the server this "
      "process follows, %s (system %s, timeline %u): waiting for its "
      "liveness session to move there",
      store->name, s->where, s->system, s->timeline, ours.where, ours.system,
      ours.timeline);
}

int durable__store_settling(durable_store_t *store) {
  uv_mutex_lock(&store->lock);
  uint64_t back = store->server_back, lost = store->server_lost;
  uv_mutex_unlock(&store->lock);
  uint64_t now = durable__fence_clock(), ms = 1000000u;
  /* away (the others may be too), or back a moment ago (they may not be
   * back yet); a watch that stays away does not hold takeovers for ever */
  if (lost > back)
    return now - lost < (uint64_t)SETTLE_AWAY_MS * ms;
  return back != 0 && now - back < (uint64_t)SETTLE_MS * ms;
}

uint64_t durable__store_server_gen(durable_store_t *store) {
  uv_mutex_lock(&store->lock);
  uint64_t gen = store->server_gen;
  uv_mutex_unlock(&store->lock);
  return gen;
}

void durable__store_on_server(durable_store_t *store,
                              void (*fn)(void *data, const char *now,
                                         const char *was),
                              void *data) {
  store->on_server = fn;
  store->on_server_data = data;
  durable__server_t s;
  uv_mutex_lock(&store->lock);
  s = store->server;
  uv_mutex_unlock(&store->lock);
  char now[sizeof(s.where) + 32];
  describe(now, sizeof now, &s);
  if (fn != NULL && s.system[0] != '\0') /* followed before the hook */
    fn(data, now, NULL);
}

void durable__store_stalled(void *data, const char *why) {
  durable_store_t *store = data;
  char *copy = why ? strdup(why) : NULL;
  uv_mutex_lock(&store->lock);
  free(store->stall);
  store->stall = copy;
  __atomic_store_n(&store->stall_news, 1, __ATOMIC_RELEASE);
  uv_mutex_unlock(&store->lock);
  uv_async_send(&store->async);
}

void durable__store_on_stall(durable_store_t *store,
                             void (*fn)(void *data, const char *why),
                             void *data) {
  store->on_stall = fn;
  store->on_stall_data = data;
}

void durable__store_server_news(durable_store_t *store) {
  if (__atomic_exchange_n(&store->nudge, 0, __ATOMIC_ACQ_REL) &&
      store->src != NULL && store->be->watch_nudge != NULL && !store->closing)
    store->be->watch_nudge(store->src);
  /* every finished job wakes the loop through here: the lock only when a
   * stall was told */
  if (!__atomic_exchange_n(&store->stall_news, 0, __ATOMIC_ACQ_REL))
    return;
  uv_mutex_lock(&store->lock);
  char *why = store->stall ? strdup(store->stall) : NULL;
  uv_mutex_unlock(&store->lock);
  if (store->on_stall != NULL)
    store->on_stall(store->on_stall_data, why);
  free(why);
}

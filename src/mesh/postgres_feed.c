/*
 * postgres_feed.c: the PostgreSQL backend's change feed of other processes,
 * and this process's liveness as the others see it, both on one dedicated
 * LISTEN connection owned by the loop thread:
 *
 *   connect + lock + LISTEN (threadpool, blocking) --> uv_poll on PQsocket
 *        ^                                                | connection lost
 *        +-------- uv_timer backoff 100 ms .. 1 s <-------+
 *
 * After every (re)connect it reports "anything may have changed" (NULL) to
 * the store, so a notification lost while the connection was down is never
 * a gap: every watch re-reads from its cursor.
 *
 * The connection's session holds the process's liveness lock, which others
 * ask about (durable__pg_alive, on a worker's connection); and the session
 * answering an empty query now and then is what fences a process cut off
 * from the server (watch_ask).
 */
#include "postgres.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_MS 5000
#define WATCH_BACKOFF_MIN_MS 100
#define WATCH_BACKOFF_MAX_MS 1000

/* ---- liveness ------------------------------------------------------------
 *
 * Each open store holds a session advisory lock on its liveness key, taken
 * by the LISTEN connection below each time it connects: the server lets it
 * go when that session ends -- the process died, or its connection was lost
 * (the session's TCP keepalives bound how long a vanished machine takes).
 * Asking is a read of pg_locks, which takes nothing.
 */
int durable__pg_alive(durable__conn_t *c, uint64_t key, int *alive,
                      durable_error_t *err) {
  char name[32], hi[16], lo[16];
  int rc = durable__pg_statement(c, OP_ALIVE, NULL, name, err);
  if (rc != 0)
    return rc;
  snprintf(hi, sizeof hi, "%u", (unsigned)(key >> 32));
  snprintf(lo, sizeof lo, "%u", (unsigned)(key & 0xffffffffu));
  const char *vals[2] = {hi, lo};
  PGresult *res =
      durable__pg_run(c, name, 2, vals, &rc, err, "liveness of", lo);
  if (res == NULL)
    return rc;
  *alive = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
  PQclear(res);
  return 0;
}

/* ---- the change feed of other processes --------------------------------- */

struct durable__watch_src_s {
  durable_store_t *store;
  uv_loop_t *loop;
  char *url;
  char *instance;
  size_t instance_len;
  char lock_sql[96];   /* takes the liveness lock: see durable__pg_alive */
  PGconn *pg;          /* the LISTEN connection; loop thread; NULL while down */
  uv_poll_t poll;      /* on PQsocket(pg) while `polling` */
  uv_timer_t timer;    /* reconnect backoff */
  uv_timer_t beat;     /* asks the session to answer (fencing), while wanted */
  uint64_t beat_asked; /* durable__fence_clock() of the question out, 0:
                          none */
  int beat_answered;   /* ... and its answer came (the end is next) */
  uv_work_t work;      /* a blocking connect on the threadpool */
  /* split brain: every server of a URL that lists several asked, on the
   * threadpool, whether it takes writes (probe_work), after each connect
   * and every PROBE_MS; `writable` of them found */
  uv_timer_t probe;
  uv_work_t probe_work;
  int probing; /* probe_work out */
  durable__server_t found[4];
  int writable;
  PGconn *fresh; /* what `work` made, read after it completes */
  durable__server_t fresh_server; /* ... and the server it is on */
  uint64_t fresh_asked;           /* when `work` asked for the lock */
  char why[256]; /* why the last connect failed: there is no log to tell
                    yet, so it waits here for a debugger */
  uint64_t backoff_ms;
  int polling;
  int pending; /* open handles + work in flight: done() when 0 after stop */
  int stopping;
  void (*done)(void *data);
  void *done_data;
};

static void watch_connect(durable__watch_src_t *src);
static void probe_start(durable__watch_src_t *src);

static void watch_maybe_done(durable__watch_src_t *src) {
  if (!src->stopping || src->pending > 0)
    return;
  void (*done)(void *) = src->done;
  void *data = src->done_data;
  free(src->url);
  free(src->instance);
  free(src);
  if (done != NULL)
    done(data);
}

static void watch_handle_closed(uv_handle_t *handle) {
  durable__watch_src_t *src = handle->data;
  src->pending--;
  watch_maybe_done(src);
}

static void watch_retry_cb(uv_timer_t *timer) {
  watch_connect(timer->data);
}

static void watch_retry(durable__watch_src_t *src) {
  if (src->stopping)
    return;
  uv_timer_start(&src->timer, watch_retry_cb, src->backoff_ms, 0);
  src->backoff_ms *= 2;
  if (src->backoff_ms > WATCH_BACKOFF_MAX_MS)
    src->backoff_ms = WATCH_BACKOFF_MAX_MS;
}

static void watch_poll_closed(uv_handle_t *handle) {
  durable__watch_src_t *src = handle->data;
  /* the fd goes only now that libuv no longer watches it */
  PQfinish(src->pg);
  src->pg = NULL;
  src->pending--;
  watch_retry(src);
  watch_maybe_done(src);
}

static void watch_lost(durable__watch_src_t *src) {
  if (!src->polling)
    return;
  src->polling = 0;
  src->beat_asked = 0;
  src->beat_answered = 0;
  durable__store_live_lost(src->store);
  uv_close((uv_handle_t *)&src->poll, watch_poll_closed);
  /* the liveness lock went with the session: say so at once */
  if (!src->stopping)
    durable__store_session_lost(src->store);
}

static void watch_deliver(durable__watch_src_t *src, PGnotify *n) {
  if (strcmp(n->relname, DURABLE__PG_CHANNEL) != 0)
    return;
  const char *nl = strchr(n->extra, '\n');
  if (nl == NULL) { /* not ours to parse: assume the worst */
    durable__store_changed_elsewhere(src->store, NULL);
    return;
  }
  if ((size_t)(nl - n->extra) == src->instance_len &&
      memcmp(n->extra, src->instance, src->instance_len) == 0)
    return; /* our own commit: the store already told its watches */
  durable__store_changed_elsewhere(src->store, nl + 1);
}

static void watch_drain(durable__watch_src_t *src) {
  PGnotify *n;
  while (!src->stopping && (n = PQnotifies(src->pg)) != NULL) {
    watch_deliver(src, n);
    PQfreemem(n);
  }
}

/* ---- fencing: the session answers -------------------------------------
 *
 * A process cut off from the server cannot know at once that the server
 * has ended its session, and with it the liveness lock.  So it trusts the
 * lock for DURABLE__PG_FENCE_MS after the session last answered a question
 * asked at time t (the lock was held at some moment after t), and a takeover
 * waits DURABLE__PG_FENCE_MS after seeing the lock gone: the old holder's trust
 * ran out before that (both measured on monotonic clocks).  The question is an
 * empty query on the LISTEN connection, asked every DURABLE__PG_FENCE_MS / 4
 * while somebody wants to know (a consumer about to hand an item over), and at
 * once when asked (watch_beat); its answer queues behind any NOTIFYs. */
static void watch_ask(durable__watch_src_t *src) {
  if (!src->polling || src->beat_asked != 0)
    return;
  uint64_t now = durable__fence_clock();
  if (!PQsendQuery(src->pg, "")) {
    watch_lost(src);
    return;
  }
  src->beat_asked = now;
  if (PQflush(src->pg) < 0)
    watch_lost(src);
  /* 1 (not all sent): the rest goes with the next flush; one empty query
   * fits in any socket buffer, so this is only a full buffer's moment */
}

static void watch_answers(durable__watch_src_t *src);

static void watch_beat_tick(uv_timer_t *timer) {
  durable__watch_src_t *src = timer->data;
  if (src->beat_asked == 0) {
    if (durable__store_live_wanted(src->store))
      watch_ask(src);
    return;
  }
  /* a question out: send what is left of it; and a flush that had to wait
   * may have read the answer into libpq's buffer, where no readable
   * socket will ever announce it */
  if (PQflush(src->pg) < 0 || !PQconsumeInput(src->pg)) {
    watch_lost(src);
    return;
  }
  watch_answers(src);
}

void durable__pg_watch_beat(durable__watch_src_t *src) {
  watch_ask(src);
}

/* A worker found another server than ours: waiting out a backoff, connect
 * now; connected, ask the session to answer, which finds out soon whether
 * it is still there. */
void durable__pg_watch_nudge(durable__watch_src_t *src) {
  if (src->stopping)
    return;
  if (src->polling) {
    watch_ask(src);
  } else if (uv_is_active((uv_handle_t *)&src->timer)) {
    uv_timer_stop(&src->timer);
    src->backoff_ms = WATCH_BACKOFF_MIN_MS;
    watch_connect(src);
  }
}

/* Read the answers to the question out, if complete. */
static void watch_answers(durable__watch_src_t *src) {
  while (src->beat_asked != 0 && !PQisBusy(src->pg)) {
    PGresult *res = PQgetResult(src->pg);
    if (res == NULL) {
      if (src->beat_answered)
        durable__store_live_confirmed(src->store, src->beat_asked);
      src->beat_asked = 0;
      src->beat_answered = 0;
    } else if (PQresultStatus(res) == PGRES_EMPTY_QUERY) {
      src->beat_answered = 1; /* the empty query's own answer */
    }
    PQclear(res);
  }
}

static void watch_readable(uv_poll_t *handle, int status, int events) {
  durable__watch_src_t *src = handle->data;
  (void)events;
  if (status < 0 || !PQconsumeInput(src->pg)) {
    watch_lost(src);
    return;
  }
  watch_answers(src);
  watch_drain(src);
  if (PQstatus(src->pg) != CONNECTION_OK)
    watch_lost(src);
}

/* Connect, take the liveness lock and LISTEN, blocking (bounded by the 5 s
 * deadline).  Touches only `url` and `lock_sql` (constant) and `fresh` /
 * `why` (read after). */
static void watch_connect_work(uv_work_t *work) {
  durable__watch_src_t *src = work->data;
  src->fresh = durable__pg_open(src->url, src->why, sizeof(src->why));
  if (src->fresh == NULL)
    return;
  if (durable__pg_server(src->fresh, &src->fresh_server, src->why,
                         sizeof src->why) < 0) {
    PQfinish(src->fresh);
    src->fresh = NULL;
    return;
  }
  /* An idle LISTEN session must not be cut by a server-wide idle timeout
   * (PostgreSQL 14 and later; older servers refuse the name: no matter). */
  PQclear(PQexec(src->fresh, "SET idle_session_timeout = 0"));
  src->fresh_asked = durable__fence_clock(); /* the lock's answer confirms
                                               from here */
  /* The key is this store's alone; but after a connection lost on our
   * side only, the old session may hold it until the server notices:
   * then this attempt fails and the next one tries again (never wait). */
  PGresult *res = PQexec(src->fresh, src->lock_sql);
  int ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
           strcmp(PQgetvalue(res, 0, 0), "t") == 0;
  if (!ok && PQresultStatus(res) == PGRES_TUPLES_OK)
    snprintf(src->why, sizeof src->why,
             "the liveness lock is still held by a previous session");
  PQclear(res);
  if (ok) {
    res = PQexec(src->fresh, "LISTEN " DURABLE__PG_CHANNEL);
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
  }
  if (!ok) {
    if (*PQerrorMessage(src->fresh))
      durable__one_line_copy(src->why, sizeof(src->why),
                             PQerrorMessage(src->fresh));
    PQfinish(src->fresh);
    src->fresh = NULL;
  }
}

static void watch_connect_done(uv_work_t *work, int status) {
  durable__watch_src_t *src = work->data;
  PGconn *pg = src->fresh;
  src->fresh = NULL;
  src->pending--;
  if (src->stopping || pg == NULL || status != 0) {
    if (pg != NULL)
      PQfinish(pg);
    watch_retry(src);
    watch_maybe_done(src);
    return;
  }
  if (PQsetnonblocking(pg, 1) != 0 ||
      uv_poll_init(src->loop, &src->poll, PQsocket(pg)) != 0) {
    PQfinish(pg);
    watch_retry(src);
    return;
  }
  src->pg = pg;
  src->poll.data = src;
  src->polling = 1;
  src->pending++;
  src->backoff_ms = WATCH_BACKOFF_MIN_MS;
  durable__store_live_confirmed(src->store, src->fresh_asked);
  /* this server is the store's now: the workers follow (server.c) */
  durable__store_server_followed(src->store, &src->fresh_server);
  uv_poll_start(&src->poll, UV_READABLE, watch_readable);
  watch_drain(src); /* anything that came with the LISTEN's reply */
  /* Commits made while we were not listening were not heard: re-sync. */
  if (!src->stopping)
    durable__store_changed_elsewhere(src->store, NULL);
  probe_start(src); /* did a failover leave two servers taking writes? */
}

/* ---- split brain ---------------------------------------------------------
 *
 * A URL that lists a primary and its standbys reaches whichever takes
 * writes.  Should two take writes (an old primary started again as one
 * after a failover), connections would go to either and the store would
 * split.  So every server of the list is asked now and then; while more
 * than one takes writes, the store refuses every connection, naming them
 * (durable__store_split), until only one does. */
static void probe_work(uv_work_t *work) {
  durable__watch_src_t *src = work->data;
  src->writable = durable__pg_writable(src->url, src->found, 4, &src->stopping);
}

static void probe_done(uv_work_t *work, int status) {
  durable__watch_src_t *src = work->data;
  src->probing = 0;
  src->pending--;
  if (src->stopping || status != 0) {
    watch_maybe_done(src);
    return;
  }
  if (src->writable < 0) { /* one host: nothing to compare, ever */
    uv_timer_stop(&src->probe);
    return;
  }
  char message[4 * (sizeof(src->found[0].where) + 64)] = "";
  size_t len = 0;
  for (int i = 0; src->writable > 1 && i < src->writable; i++)
    len += (size_t)snprintf(message + len, sizeof message - len,
                            "%s%s (system %s, timeline %u)",
                            i == 0 ? "" : " and ", src->found[i].where,
                            src->found[i].system, src->found[i].timeline);
  durable__store_split(src->store, src->writable > 1 ? message : NULL);
}

static void probe_start(durable__watch_src_t *src) {
  if (src->stopping || src->probing)
    return;
  src->probe_work.data = src;
  if (uv_queue_work(src->loop, &src->probe_work, probe_work, probe_done) == 0) {
    src->probing = 1;
    src->pending++;
  }
}

static void probe_tick(uv_timer_t *timer) {
  probe_start(timer->data);
}

static void watch_connect(durable__watch_src_t *src) {
  if (src->stopping)
    return;
  src->work.data = src;
  if (uv_queue_work(src->loop, &src->work, watch_connect_work,
                    watch_connect_done) != 0) {
    watch_retry(src);
    return;
  }
  src->pending++;
}

int durable__pg_watch_start(durable_store_t *store, const char *url,
                            const char *instance, durable__watch_src_t **out,
                            durable_error_t *err) {
  *out = NULL;
  durable__watch_src_t *src = calloc(1, sizeof(*src));
  if (src == NULL || (src->url = strdup(url)) == NULL ||
      (src->instance = strdup(instance)) == NULL) {
    if (src != NULL)
      free(src->url);
    free(src);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  uint64_t key;
  if (durable__instance_key(instance, &key) < 0) {
    free(src->url);
    free(src->instance);
    free(src);
    return durable__error(err, DURABLE_EINVAL, "bad instance '%s'", instance);
  }
  snprintf(src->lock_sql, sizeof src->lock_sql,
           "SELECT pg_try_advisory_lock(%llu)", (unsigned long long)key);
  src->store = store;
  src->loop = durable__store_loop(store);
  src->instance_len = strlen(instance);
  src->backoff_ms = WATCH_BACKOFF_MIN_MS;
  uv_timer_init(src->loop, &src->timer);
  src->timer.data = src;
  uv_timer_init(src->loop, &src->beat);
  src->beat.data = src;
  /* it only wakes the loop while somebody wants to know (watch_beat_tick) */
  uv_timer_start(&src->beat, watch_beat_tick, DURABLE__PG_FENCE_MS / 4,
                 DURABLE__PG_FENCE_MS / 4);
  uv_unref((uv_handle_t *)&src->beat);
  uv_timer_init(src->loop, &src->probe);
  src->probe.data = src;
  uv_timer_start(&src->probe, probe_tick, PROBE_MS, PROBE_MS);
  uv_unref((uv_handle_t *)&src->probe);
  src->pending = 3;
  /* The first connect runs here, blocking like the writer's did: once the
   * store is open, its liveness lock is held, so no lease this process
   * takes can look abandoned to the others.  Reconnects run on the pool. */
  src->work.data = src;
  watch_connect_work(&src->work);
  if (src->fresh == NULL) {
    /* without its lock the process would look dead to every other one */
    int rc = durable__error(err, DURABLE_EUNAVAIL,
                            "store unavailable: cannot hold this process's "
                            "liveness lock: %s",
                            src->why);
    src->stopping = 1;
    uv_close((uv_handle_t *)&src->timer, watch_handle_closed);
    uv_close((uv_handle_t *)&src->beat, watch_handle_closed);
    uv_close((uv_handle_t *)&src->probe, watch_handle_closed);
    return rc;
  }
  src->pending++;
  watch_connect_done(&src->work, 0);
  *out = src;
  return 0;
}

static void watch_close(durable__watch_src_t *src) {
  uv_close((uv_handle_t *)&src->timer, watch_handle_closed);
  if (src->polling) {
    src->polling = 0;
    uv_close((uv_handle_t *)&src->poll, watch_poll_closed);
  }
}

static void watch_unlisten_late(uv_timer_t *timer) {
  watch_close(timer->data); /* no answer: close anyway */
}

/* The UNLISTEN's answer (see pg_watch_stop), or the connection lost. */
static void watch_unlistened(uv_poll_t *handle, int status, int events) {
  durable__watch_src_t *src = handle->data;
  (void)events;
  if (status == 0 && PQconsumeInput(src->pg)) {
    PGresult *res;
    while (!PQisBusy(src->pg) && (res = PQgetResult(src->pg)) != NULL) {
      int done = strcmp(PQcmdStatus(res), "UNLISTEN") == 0 ||
                 PQresultStatus(res) == PGRES_FATAL_ERROR;
      PQclear(res);
      if (done) {
        /* to the end, without blocking for what has not come yet */
        while (!PQisBusy(src->pg) && (res = PQgetResult(src->pg)) != NULL)
          PQclear(res);
        if (PQisBusy(src->pg) && PQstatus(src->pg) == CONNECTION_OK)
          return;
        break;
      }
    }
    if (PQstatus(src->pg) == CONNECTION_OK && PQisBusy(src->pg))
      return; /* more to come */
  }
  watch_close(src);
}

void durable__pg_watch_stop(durable__watch_src_t *src, void (*done)(void *data),
                            void *data) {
  __atomic_store_n(&src->stopping, 1, __ATOMIC_RELEASE); /* a probe reads it */
  src->done = done;
  src->done_data = data;
  /* a connect not started yet is dropped; a running one is waited for */
  uv_cancel((uv_req_t *)&src->work);
  if (src->probing)
    uv_cancel((uv_req_t *)&src->probe_work);
  uv_close((uv_handle_t *)&src->beat, watch_handle_closed);
  uv_close((uv_handle_t *)&src->probe, watch_handle_closed);
  /* The server pushes NOTIFYs to a listening session at any moment: a
   * socket closed while they come makes it log "could not send data to
   * client".  So first UNLISTEN, and close once it is answered (or after a
   * second).  A question still out (a beat) is no matter: libpq refuses
   * the UNLISTEN and we close at once. */
  if (src->polling && src->beat_asked == 0 &&
      PQsendQuery(src->pg, "UNLISTEN *") && PQflush(src->pg) == 0 &&
      uv_poll_start(&src->poll, UV_READABLE, watch_unlistened) == 0) {
    uv_timer_start(&src->timer, watch_unlisten_late, 1000, 0);
    return;
  }
  watch_close(src);
}

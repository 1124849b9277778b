/*
 * store.c: the store engine: opening a store, its worker threads, and the
 * read operations.
 *
 * A store owns two worker threads, each with its own blocking database
 * connection: the writer, which commits writes in groups (write.c), and the
 * reader.  An in-memory SQLite database has one connection only, so there
 * the writer runs the reads too.  Work travels as jobs (job.h):
 *
 *     loop thread                    worker threads
 *     durable_store_get() ---job---> reader: backend->get()
 *     durable_store_write() -job---> writer: BEGIN; many jobs; COMMIT
 *     callbacks  <---uv_async_t----  finished jobs
 *
 * A connection that fails with DURABLE_EUNAVAIL is dropped and opened again
 * for the next job, so a restarted database or a killed backend costs the
 * jobs in flight (reported failed, never silently lost) and nothing more;
 * a group that certainly did not commit is retried once on the new
 * connection.
 */
#include "job.h"
#include "schema.h"
#include "store.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Jobs one transaction may carry; a bound on the latency a group adds. */
#define GROUP_MAX 512
/* Rows a reader fetches per round trip while checking access. */
#define QUERY_LIMIT_MAX 1000
#define QUERY_LIMIT_DEFAULT 100

/* After finishing its work a worker watches its queue this long (yielding
 * its core to anyone who needs it) before it goes to sleep.  A producer that
 * waits for each result issues its next request right after its callback; a
 * worker still awake takes it at once instead of paying a wake-up, which on
 * a virtual machine costs about as much as the rest of an in-memory write. */
#define SPIN_NS 100000

typedef struct {
  durable_store_t *store;
  uv_thread_t thread;
  durable__job_t *head, *tail; /* queue, under store->lock */
  uv_cond_t wake;
  durable__conn_t *conn;
  int running;  /* under store->lock */
  int sleeping; /* under store->lock: waiting on `wake` */
  int queued;   /* atomic: 1 once a job is queued, 0 when the queue is
                   taken; read without the lock while spinning */
  int started;
} worker_t;

typedef struct watch_s watch_t;

struct durable_store_s {
  uv_loop_t *loop;
  const durable__backend_t *be;
  char *url;
  char *name;
  char instance[DURABLE_INSTANCE_MAX];
  int single; /* one connection: the writer also reads */

  uv_mutex_t lock; /* queues, done list, own commits, stopping */
  worker_t writer, reader;
  int stopping;
  durable__job_t *done_head, *done_tail;
  uv_async_t async;
  int workers_left;

  int64_t *own_commits; /* sorted commit ids this store made */
  size_t own_count, own_cap;

  durable__watch_src_t *src;
  void *feed; /* feed.c's state */
  /* fencing (durable__store_live), durable__fence_clock() ns: the lock is
   * known held until live_until; somebody asked at live_asked */
  uint64_t live_until, live_asked;
  void (*on_live)(void *data);
  void *on_live_data;

  void (*close_cb)(void *data);
  void *close_data;
  int closing;
};

/* ---- small helpers ------------------------------------------------------ */

uv_loop_t *durable__store_loop(durable_store_t *store) {
  return store->loop;
}

const char *durable_store_name(const durable_store_t *store) {
  return store->name;
}

const durable__backend_t *durable__store_backend(durable_store_t *store) {
  return store->be;
}

const char *durable__store_instance(durable_store_t *store) {
  return store->instance;
}

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

const char *durable_store_instance(const durable_store_t *store) {
  return store->instance;
}

void **durable__store_feed_slot(durable_store_t *store) {
  return &store->feed;
}

int durable__store_closing(durable_store_t *store) {
  return store->closing;
}

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

durable__job_t *durable__job_new(durable_store_t *store,
                                 durable__job_kind_t kind) {
  durable__job_t *job = calloc(1, sizeof(*job));
  if (job == NULL)
    return NULL;
  job->store = store;
  job->kind = kind;
  return job;
}

void durable__job_free(durable__job_t *job) {
  if (job == NULL)
    return;
  free(job->principal);
  free(job->path);
  free(job->ns);
  free(job->id);
  free(job->after);
  durable__writes_reset(job);
  durable__writes_free(job);
  durable_node_free(job->node);
  durable__nodes_free(&job->nodes);
  durable__grants_free(&job->grants);
  free(job);
}

/* ---- own commits (SQLite's watch source asks about them) ---------------- */

static void remember_commit(durable_store_t *store, int64_t id) {
  if (id <= 0)
    return;
  uv_mutex_lock(&store->lock);
  if (store->own_count == store->own_cap) {
    size_t cap = store->own_cap ? store->own_cap * 2 : 64;
    int64_t *a = realloc(store->own_commits, cap * sizeof(*a));
    if (a == NULL) { /* forgetting one only costs a spurious re-sync */
      uv_mutex_unlock(&store->lock);
      return;
    }
    store->own_commits = a;
    store->own_cap = cap;
  }
  /* commit ids come from one writer in increasing order: append */
  store->own_commits[store->own_count++] = id;
  uv_mutex_unlock(&store->lock);
}

int durable__store_commits_all_own(durable_store_t *store, int64_t after,
                                   int64_t upto) {
  int all = 1;
  uv_mutex_lock(&store->lock);
  int64_t want = after + 1;
  size_t keep = 0;
  for (size_t i = 0; i < store->own_count; i++) {
    int64_t id = store->own_commits[i];
    if (id <= after)
      continue;
    if (id <= upto) {
      if (id != want)
        all = 0;
      want = id + 1;
    } else {
      store->own_commits[keep++] = id;
    }
  }
  if (want != upto + 1)
    all = 0;
  store->own_count = keep;
  uv_mutex_unlock(&store->lock);
  return all;
}

/* ---- workers ------------------------------------------------------------ */

/* Hand `n` finished jobs back to the loop. */
static void finish(durable_store_t *store, durable__job_t **jobs, size_t n) {
  if (n == 0)
    return;
  for (size_t i = 0; i + 1 < n; i++)
    jobs[i]->next = jobs[i + 1];
  jobs[n - 1]->next = NULL;
  uv_mutex_lock(&store->lock);
  if (store->done_tail)
    store->done_tail->next = jobs[0];
  else
    store->done_head = jobs[0];
  store->done_tail = jobs[n - 1];
  uv_mutex_unlock(&store->lock);
  uv_async_send(&store->async);
}

static int ensure_conn(worker_t *w, durable_error_t *err) {
  if (w->conn)
    return 0;
  return w->store->be->connect(w->store->url, &w->conn, err);
}

static void drop_conn(worker_t *w) {
  if (w->conn)
    w->store->be->disconnect(w->conn);
  w->conn = NULL;
}

static void fail_job(durable__job_t *job, const durable_error_t *err) {
  job->status = err->code;
  job->err = *err;
}

static void run_read(worker_t *w, durable__job_t *job) {
  durable_error_t err = {0};
  if (ensure_conn(w, &err) < 0) {
    fail_job(job, &err);
    return;
  }
  durable__read_run(w->store->be, w->conn, job);
  if (job->status == DURABLE_EUNAVAIL) {
    /* the connection died: one fresh try, since a read has no effect */
    drop_conn(w);
    if (ensure_conn(w, &err) < 0)
      return;
    durable__nodes_free(&job->nodes);
    job->status = 0;
    durable__read_run(w->store->be, w->conn, job);
    if (job->status == DURABLE_EUNAVAIL)
      drop_conn(w);
  }
}

static int locked_order(const durable__locked_row_t *x, const char *part,
                        const char *table, const char *ns, const char *id) {
  int c = strcmp(x->part, part);
  if (c == 0)
    c = strcmp(x->table, table);
  if (c == 0)
    c = strcmp(x->ns, ns);
  return c ? c : strcmp(x->id, id);
}

static int row_order(const void *a, const void *b) {
  const durable__locked_row_t *y = b;
  return locked_order(a, y->part, y->table, y->ns, y->id);
}

durable__locked_row_t *durable__locked_find(durable__locked_t *locked,
                                            durable__place_t place,
                                            const char *ns, const char *id) {
  size_t lo = 0, hi = locked ? locked->count : 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c =
        locked_order(&locked->rows[mid], place.partition, place.table, ns, id);
    if (c == 0)
      return &locked->rows[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static void locked_free(durable__locked_t *locked) {
  for (size_t i = 0; i < locked->count; i++) {
    durable_node_free(locked->rows[i].got.node);
    free(locked->rows[i].ns);
    free(locked->rows[i].id);
  }
  free(locked->rows);
  *locked = (durable__locked_t){0};
}

/* Lock the existing rows the group may update, in one global order, before
 * anything else -- before its inserts too.  Two transactions that update the
 * same rows in other orders (one process's appends, another's
 * acknowledgements) would otherwise deadlock now and then, and so would two
 * producers' appends to the same streams: each inserts the item rows of one
 * stream, then waits on the other's insert of the next stream's same
 * sequence, while holding what the other waits for.  The database gives up
 * on one of them only after its deadlock_timeout (1 s).  With the stream
 * rows locked first, the second producer waits for the first to commit,
 * then finds its sequence taken and decides again.  The locks are queued
 * with the statements that follow (no round trip of their own), and what
 * they read serves the group's reads for update (job.h).  A group of a
 * single write needs none. */
static int lock_in_order(const durable__backend_t *be, durable__conn_t *conn,
                         durable__job_t **jobs, size_t n,
                         durable__locked_t *locked, durable_error_t *err) {
  if (be->lock == NULL)
    return 0;
  size_t count = 0, total = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < jobs[i]->nwrites; k++) {
      count += jobs[i]->writes[k].kind != DURABLE_WRITE_CREATE;
      total++;
    }
  if (count == 0 || total < 2)
    return 0;
  durable__locked_row_t *rows = calloc(count, sizeof(*rows));
  if (rows == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < jobs[i]->nwrites; k++) {
      const durable__write_op_t *op = &jobs[i]->writes[k];
      if (op->kind == DURABLE_WRITE_CREATE)
        continue;
      /* copies: a remade write replaces its strings (write.c) */
      rows[m].ns = strdup(op->ns);
      rows[m].id = strdup(op->id);
      if (rows[m].ns == NULL || rows[m].id == NULL) {
        locked->rows = rows;
        locked->count = m + 1;
        return durable__error(err, DURABLE_ENOMEM, "out of memory");
      }
      rows[m].table =
          durable__path_place(op->path, rows[m].part, sizeof rows[m].part)
              .table;
      m++;
    }
  qsort(rows, m, sizeof(*rows), row_order);
  size_t kept = 0; /* each row once */
  for (size_t i = 0; i < m; i++) {
    if (kept == 0 || row_order(&rows[kept - 1], &rows[i]) != 0) {
      rows[kept++] = rows[i];
    } else {
      free(rows[i].ns);
      free(rows[i].id);
    }
  }
  locked->rows = rows;
  locked->count = kept;
  int rc = 0;
  for (size_t i = 0; i < kept && rc == 0; i++) {
    durable__locked_row_t *r = &rows[i];
    r->got.status = DURABLE__PENDING;
    rc = be->lock(conn,
                  (durable__place_t){.partition = r->part, .table = r->table},
                  r->ns, r->id, &r->got, err);
  }
  return rc;
}

/* Commit `jobs` (a list of `n` write jobs) in one transaction.  Returns 0
 * when the group committed (some jobs may have failed alone, having changed
 * nothing), or a negative code when the whole group must be retried one job
 * at a time.
 *
 *   BEGIN; decide and queue every job's writes (write.c)
 *   [flush; settle the risky jobs: one that failed after a write -> undo]
 *   changed(namespaces); COMMIT        (PostgreSQL: one round trip for all)
 *   settle the others from the outcomes the commit brought back
 */
static int commit_locked(worker_t *w, durable__job_t **jobs, size_t n,
                         durable__locked_t *locked, durable_error_t *err) {
  durable_store_t *store = w->store;
  const durable__backend_t *be = store->be;
  int rc = ensure_conn(w, err);
  if (rc < 0)
    return rc;
  if ((rc = be->begin(w->conn, err)) < 0 ||
      (rc = lock_in_order(be, w->conn, jobs, n, locked, err)) < 0)
    goto rollback;
  int risky = 0;
  for (size_t i = 0; i < n; i++) {
    rc = durable__writes_apply(be, w->conn, jobs[i], locked);
    if (rc < 0) {
      *err = jobs[i]->err;
      goto rollback;
    }
    risky |= durable__writes_risky(jobs[i]);
  }
  if (risky) {
    /* Outcomes first, so that a job that failed half-way is undone. */
    if ((rc = be->flush(w->conn, err)) < 0)
      goto rollback;
    for (size_t i = 0; i < n; i++) {
      if (durable__writes_settle(jobs[i])) {
        *err = jobs[i]->err;
        rc = jobs[i]->status;
        goto rollback;
      }
    }
  }
  durable__strv_t namespaces = {0};
  for (size_t i = 0; i < n && rc == 0; i++)
    if (durable__writes_namespaces(jobs[i], &namespaces) < 0)
      rc = durable__error(err, DURABLE_ENOMEM, "out of memory");
  int64_t commit_id = 0;
  if (rc == 0 && namespaces.count > 0)
    rc = be->changed(w->conn, &namespaces, store->instance, &commit_id, err);
  durable__strv_free(&namespaces);
  if (rc < 0)
    goto rollback;
  int unknown = 0;
  if ((rc = be->commit(w->conn, &unknown, err)) < 0) {
    if (!unknown) { /* certainly not committed: as a rollback */
      for (size_t i = 0; i < n; i++)
        durable__writes_reset(jobs[i]);
      if (rc == DURABLE_EUNAVAIL)
        drop_conn(w);
      return rc;
    }
    /* The commit's outcome is unknown: it may have landed.  Say so rather
     * than retry a write that might then be applied twice. */
    for (size_t i = 0; i < n; i++) {
      if (jobs[i]->status < 0)
        continue;
      durable__writes_reset(jobs[i]);
      durable__error(&jobs[i]->err, rc,
                     "%s: the commit did not complete (%s); the write may or "
                     "may not have been saved",
                     store->name, err->message);
      jobs[i]->status = rc;
    }
    if (rc == DURABLE_EUNAVAIL)
      drop_conn(w);
    return 0;
  }
  /* No job left can have failed after a write: it would have been risky. */
  for (size_t i = 0; i < n; i++)
    if (!jobs[i]->settled)
      durable__writes_settle(jobs[i]);
  remember_commit(store, commit_id);
  return 0;

rollback:
  be->rollback(w->conn);
  for (size_t i = 0; i < n; i++)
    durable__writes_reset(jobs[i]);
  if (rc == DURABLE_EUNAVAIL)
    drop_conn(w);
  return rc;
}

static int commit_group(worker_t *w, durable__job_t **jobs, size_t n,
                        durable_error_t *err) {
  durable__locked_t locked = {0};
  int rc = commit_locked(w, jobs, n, &locked, err);
  locked_free(&locked); /* every answer is in, or the queue was dropped */
  return rc;
}

/* A transaction the database cancelled: a deadlock lock_in_order cannot
 * prevent (two processes inserting the same new rows in other orders), a
 * serialization failure.  Running it again is safe (nothing of it was
 * committed) and almost always enough. */
#define CANCELED_RETRIES 5

static void run_writes(worker_t *w, durable__job_t **jobs, size_t n) {
  durable_error_t err = {0};
  int rc = commit_group(w, jobs, n, &err);
  if (rc == DURABLE_EUNAVAIL) /* nothing committed: one try on a new link */
    rc = commit_group(w, jobs, n, &err);
  for (int i = 0; rc == DURABLE_ECANCELED && i < CANCELED_RETRIES; i++)
    rc = commit_group(w, jobs, n, &err);
  if (rc < 0 && n > 1) {
    /* Retry alone so that one failing job fails only itself. */
    for (size_t i = 0; i < n; i++) {
      durable_error_t e = {0};
      int r = commit_group(w, &jobs[i], 1, &e);
      for (int k = 0; r == DURABLE_ECANCELED && k < CANCELED_RETRIES; k++)
        r = commit_group(w, &jobs[i], 1, &e);
      if (r < 0) {
        durable__writes_reset(jobs[i]);
        fail_job(jobs[i], &e);
      }
    }
  } else if (rc < 0) {
    durable__writes_reset(jobs[0]);
    fail_job(jobs[0], &err);
  }
}

/* A grant or a revoke: its own small transaction (a revoke may be two
 * statements: clear the modes, drop a row left with none). */
static void run_grant(worker_t *w, durable__job_t *job) {
  const durable__backend_t *be = w->store->be;
  durable_error_t err = {0};
  int rc = ensure_conn(w, &err);
  if (rc == 0 && (rc = be->begin(w->conn, &err)) == 0) {
    rc = be->grant(w->conn, job->principal, job->path, (int)job->limit,
                   (int)job->num, &err);
    int unknown = 0;
    if (rc == 0)
      rc = be->commit(w->conn, &unknown, &err);
    else
      be->rollback(w->conn);
  }
  if (rc < 0) {
    fail_job(job, &err);
    if (rc == DURABLE_EUNAVAIL)
      drop_conn(w);
  }
}

/* Wait up to SPIN_NS for a job to be queued, yielding the core to anyone
 * else who needs it meanwhile. */
static void spin(worker_t *w) {
  uint64_t deadline = uv_hrtime() + SPIN_NS;
  while (!__atomic_load_n(&w->queued, __ATOMIC_ACQUIRE) &&
         uv_hrtime() < deadline)
    sched_yield();
}

static void worker_main(void *arg) {
  worker_t *w = arg;
  durable_store_t *store = w->store;
  durable__job_t *batch[GROUP_MAX];
  for (;;) {
    if (w == &store->writer)
      spin(w); /* the reader's next page is asked for ahead: it waits */
    uv_mutex_lock(&store->lock);
    while (w->head == NULL && !store->stopping) {
      w->sleeping = 1;
      uv_cond_wait(&w->wake, &store->lock);
      w->sleeping = 0;
    }
    if (w->head == NULL) { /* stopping, and nothing left */
      uv_mutex_unlock(&store->lock);
      break;
    }
    /* Take one read, or (the writer) every queued write up to GROUP_MAX. */
    size_t n = 0;
    durable__job_t *first = w->head;
    if (first->kind != JOB_WRITE) {
      w->head = first->next;
      batch[n++] = first;
    } else {
      while (w->head && w->head->kind == JOB_WRITE && n < GROUP_MAX) {
        batch[n++] = w->head;
        w->head = w->head->next;
      }
    }
    if (w->head == NULL)
      w->tail = NULL;
    __atomic_store_n(&w->queued, w->head != NULL, __ATOMIC_RELEASE);
    uv_mutex_unlock(&store->lock);

    if (first->kind == JOB_WRITE)
      run_writes(w, batch, n);
    else if (first->kind == JOB_GRANT)
      run_grant(w, first);
    else
      run_read(w, first);
    finish(store, batch, n);
  }
  drop_conn(w);
  /* tell the loop this worker is gone (a NULL-job marker is not needed:
   * the loop counts workers in on_async after stopping was set) */
  uv_mutex_lock(&store->lock);
  w->running = 0;
  uv_mutex_unlock(&store->lock);
  uv_async_send(&store->async);
}

void durable__job_submit(durable__job_t *job) {
  durable_store_t *store = job->store;
  worker_t *w =
      (job->kind == JOB_WRITE || job->kind == JOB_GRANT || store->single)
          ? &store->writer
          : &store->reader;
  job->next = NULL;
  uv_mutex_lock(&store->lock);
  if (w->tail)
    w->tail->next = job;
  else
    w->head = job;
  w->tail = job;
  __atomic_store_n(&w->queued, 1, __ATOMIC_RELEASE);
  if (w->sleeping)
    uv_cond_signal(&w->wake);
  uv_mutex_unlock(&store->lock);
}

/* ---- completions on the loop -------------------------------------------- */

/* A result as handed to a callback, with its job: what
 * durable__written_version reads. */
typedef struct {
  durable_result_t res;
  durable__job_t *job;
} result_ex_t;

durable_node_t *durable__result_take(const durable_result_t *res, size_t i) {
  durable__job_t *job = ((const result_ex_t *)res)->job;
  if (i >= job->nodes.count)
    return NULL;
  durable_node_t *node = job->nodes.items[i];
  job->nodes.items[i] = NULL; /* durable_node_free(NULL) is nothing */
  return node;
}

size_t durable__failed_write(const durable_result_t *res) {
  const durable__job_t *job = ((const result_ex_t *)res)->job;
  return job->kind == JOB_WRITE && job->status < 0 ? job->failed_write : 0;
}

int64_t durable__written_version(const durable_result_t *res, size_t i) {
  const durable__job_t *job = ((const result_ex_t *)res)->job;
  if (job->kind != JOB_WRITE || job->status < 0 || i >= job->nwrites ||
      job->writes[i].action == ACT_NONE || job->writes[i].out.status != 0)
    return 0;
  return job->writes[i].out.version;
}

static void deliver(durable__job_t *job) {
  /* Every failure comes with its line (durable.h), also one the worker set
   * as a bare code (a failed allocation deep in a read). */
  if (job->status < 0 && job->err.message[0] == '\0')
    durable__error(&job->err, job->status, "%s: %s", job->store->name,
                   durable_strerror(job->status));
  if (job->kind == JOB_WRITE && job->status == 0)
    durable__feed_dispatch(job->store, job);
  if (job->done) {
    job->done(job); /* internal users free the job themselves */
    return;
  }
  const durable_node_t **nodes = NULL;
  if (job->nodes.count > 0)
    nodes = (const durable_node_t **)job->nodes.items;
  /* a listing of grants: borrowed views of the job's strings */
  durable_grant_t *grants = NULL;
  if (job->kind == JOB_GRANTS && job->status == 0 && job->grants.count > 0) {
    grants = calloc(job->grants.count, sizeof(*grants));
    if (grants == NULL) {
      job->status = durable__error(&job->err, DURABLE_ENOMEM, "out of memory");
    } else {
      for (size_t i = 0; i < job->grants.count; i++)
        grants[i] =
            (durable_grant_t){.principal = job->grants.items[i].principal,
                              .prefix = job->grants.items[i].prefix,
                              .modes = job->grants.items[i].modes};
    }
  }
  result_ex_t rx = {
      .res =
          {
              .status = job->status,
              .message = job->status < 0 ? job->err.message : NULL,
              .node = job->node,
              .nodes = nodes,
              .count = job->nodes.count,
              .more = job->more,
              .value = job->value,
              .grants = grants,
          },
      .job = job};
  if (grants != NULL)
    rx.res.count = job->grants.count;
  if (job->cb)
    job->cb(&rx.res, job->data);
  free(grants);
  durable__job_free(job);
}

static void finish_close(durable_store_t *store);

static void on_async(uv_async_t *handle) {
  durable_store_t *store = handle->data;
  for (;;) {
    uv_mutex_lock(&store->lock);
    durable__job_t *job = store->done_head;
    store->done_head = store->done_tail = NULL;
    uv_mutex_unlock(&store->lock);
    if (job == NULL)
      break;
    while (job) {
      durable__job_t *next = job->next;
      deliver(job);
      job = next;
    }
  }
  if (store->closing) {
    uv_mutex_lock(&store->lock);
    int running = store->writer.running || store->reader.running;
    uv_mutex_unlock(&store->lock);
    if (!running && store->workers_left > 0) {
      store->workers_left = 0;
      finish_close(store);
    }
  }
}

/* ---- open and close ----------------------------------------------------- */

static int start_worker(durable_store_t *store, worker_t *w) {
  w->store = store;
  w->running = 1;
  if (uv_cond_init(&w->wake) != 0) {
    w->running = 0;
    return DURABLE_ENOMEM;
  }
  if (uv_thread_create(&w->thread, worker_main, w) != 0) {
    uv_cond_destroy(&w->wake);
    w->running = 0;
    return DURABLE_ENOMEM;
  }
  w->started = 1;
  return 0;
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
  store->workers_left = 1;
  rc = uv_async_init(loop, &store->async, on_async);
  if (rc != 0) {
    durable__error(err, DURABLE_ENOMEM, "cannot start the store: %s",
                   uv_strerror(rc));
    be->disconnect(store->writer.conn);
    goto fail;
  }
  store->async.data = store;
  if (start_worker(store, &store->writer) < 0 ||
      (!store->single && start_worker(store, &store->reader) < 0)) {
    /* cannot happen short of resource exhaustion; stop what started */
    durable__error(err, DURABLE_ENOMEM, "cannot start the store's threads");
    store->closing = 1;
    durable_store_close(store, NULL, NULL);
    return DURABLE_ENOMEM;
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

static void finish_close(durable_store_t *store) {
  worker_t *workers[] = {&store->writer, &store->reader};
  for (size_t i = 0; i < 2; i++) {
    if (!workers[i]->started)
      continue;
    uv_thread_join(&workers[i]->thread);
    uv_cond_destroy(&workers[i]->wake);
  }
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
  uv_mutex_lock(&store->lock);
  store->stopping = 1;
  uv_cond_signal(&store->writer.wake);
  if (!store->single)
    uv_cond_signal(&store->reader.wake);
  uv_mutex_unlock(&store->lock);
  /* on_async sees the workers gone (each sends one last wake-up) */
  uv_async_send(&store->async);
}

/* ---- reads --------------------------------------------------------------- */

/* Rows of namespace `ns` after `after` across every table they may be in:
 * the table of an ordinary child, plus, for each mapped segment that would
 * place a child named after it elsewhere, that one row.  Merged in id
 * order; fetches limit + 1 to know whether more follow.
 *
 * With `pipelined` (and a backend that has get_later) the probes are
 * queued before the listing, so that on PostgreSQL all of it is one round
 * trip.  Anything short of every answer in -- a probe's table dropped, an
 * error that aborted the pipeline -- returns DURABLE__PENDING, and the
 * caller asks again one statement at a time, which says what is wrong. */
static int list_children_once(const durable__backend_t *be,
                              durable__conn_t *conn, const char *ns,
                              const char *after, size_t limit, int pipelined,
                              durable__nodes_t *out, durable_error_t *err) {
  char part[DURABLE_PARTITION_MAX + 1];
  char probe[DURABLE_PATH_MAX + 64];
  size_t nprobes = 0;
  durable__got_t *got = calloc(durable__mapping_count, sizeof(*got));
  int rc = got ? 0 : durable__error(err, DURABLE_ENOMEM, "out of memory");
  snprintf(probe, sizeof probe, "%s%sx", ns, *ns ? "/" : "");
  durable__place_t place = durable__path_place(probe, part, sizeof part);
  /* plainly, the listing first: a probe's missing table must not make the
   * listing's partition look absent */
  if (rc == 0 && !pipelined)
    rc = be->list(conn, place, ns, after, limit + 1, out, err);
  for (size_t i = 0; i < durable__mapping_count && rc == 0; i++) {
    const char *seg = durable__mappings[i].segment;
    char other_part[DURABLE_PARTITION_MAX + 1];
    snprintf(probe, sizeof probe, "%s%s%s", ns, *ns ? "/" : "", seg);
    durable__place_t other =
        durable__path_place(probe, other_part, sizeof other_part);
    if (strcmp(other.table, place.table) == 0 || strcmp(seg, after) <= 0)
      continue;
    durable__got_t *g = &got[nprobes++];
    g->status = DURABLE__PENDING;
    if (pipelined) {
      rc = be->get_later(conn, other, ns, seg, g, err);
    } else {
      g->status = be->get(conn, other, ns, seg, 0, &g->node, err);
      if (g->status < 0 && g->status != DURABLE_ENOTFOUND)
        rc = g->status;
    }
  }
  if (rc == 0 && pipelined)
    rc = be->list(conn, place, ns, after, limit + 1, out, err);
  int settled = 1;
  for (size_t i = 0; i < nprobes; i++)
    settled &= got[i].status == 0 || got[i].status == DURABLE_ENOTFOUND;
  if (pipelined && !settled) {
    /* some may still be queued: settle them while `got` lives */
    durable_error_t ignored = {0};
    be->flush(conn, &ignored);
  }
  if (pipelined && (rc != 0 || !settled))
    rc = DURABLE__PENDING; /* ask again, plainly */
  for (size_t i = 0; i < nprobes; i++) {
    durable_node_t *node = got[i].node;
    if (rc != 0 || node == NULL) {
      durable_node_free(node);
      continue;
    }
    /* insert in id order */
    if ((rc = durable__nodes_push(out, node)) < 0) {
      durable_node_free(node);
      continue;
    }
    for (size_t k = out->count - 1;
         k > 0 && strcmp(out->items[k - 1]->id, out->items[k]->id) > 0; k--) {
      durable_node_t *t = out->items[k - 1];
      out->items[k - 1] = out->items[k];
      out->items[k] = t;
    }
  }
  free(got);
  return rc;
}

static int list_children(const durable__backend_t *be, durable__conn_t *conn,
                         const char *ns, const char *after, size_t limit,
                         durable__nodes_t *out, int *more,
                         durable_error_t *err) {
  size_t had = out->count;
  int rc = list_children_once(be, conn, ns, after, limit, be->get_later != NULL,
                              out, err);
  if (rc == DURABLE__PENDING) {
    while (out->count > had)
      durable_node_free(out->items[--out->count]);
    memset(err, 0, sizeof *err);
    rc = list_children_once(be, conn, ns, after, limit, 0, out, err);
  }
  if (rc != 0)
    return rc;
  *more = out->count > had + limit;
  while (out->count > had + limit)
    durable_node_free(out->items[--out->count]);
  return 0;
}

static void read_get(const durable__backend_t *be, durable__conn_t *conn,
                     durable__job_t *job, const durable__grants_t *grants) {
  char part[DURABLE_PARTITION_MAX + 1];
  if (grants) {
    /* Access is decided by the path, before the read, so that a denied
     * answer never tells whether the node exists. */
    char owner[DURABLE_PATH_MAX + 1];
    snprintf(owner, sizeof owner, "%.*s", (int)durable__owner_len(job->path),
             job->path);
    if (!durable__access_covers(grants, owner)) {
      job->status = durable__access_denied(&job->err, job->principal,
                                           DURABLE_GRANT_READ, job->path);
      return;
    }
  }
  durable__place_t place = durable__path_place(job->path, part, sizeof part);
  int rc = be->get(conn, place, job->ns, job->id, 0, &job->node, &job->err);
  if (rc == DURABLE_ENOTFOUND)
    durable__error(&job->err, rc, "no node at '%s'", job->path);
  if (job->kind == JOB_EXISTS && (rc == 0 || rc == DURABLE_ENOTFOUND)) {
    job->value = rc == 0;
    rc = 0;
  }
  job->status = rc;
}

static void read_query(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job, const durable__grants_t *grants) {
  if (job->path != NULL) {
    /* path:P, one row or none: absence is an empty result, not an error */
    if (job->after && strcmp(job->id, job->after) <= 0)
      return;
    read_get(be, conn, job, grants);
    if (job->status == DURABLE_ENOTFOUND) {
      job->status = 0;
    } else if (job->status == 0) {
      job->status = durable__nodes_push(&job->nodes, job->node);
      if (job->status == 0)
        job->node = NULL;
    }
    return;
  }
  if (grants && !durable__access_reaches(grants, job->ns)) {
    job->status = durable__access_denied(&job->err, job->principal,
                                         DURABLE_GRANT_READ, job->ns);
    return;
  }
  /* Filtering may drop rows: keep reading pages until `limit` rows pass or
   * the namespace ends, so a page is short only at the end. */
  const char *after = job->after ? job->after : "";
  char *cursor = strdup(after);
  int rc = cursor ? 0 : DURABLE_ENOMEM;
  while (rc == 0) {
    durable__nodes_t page = {0};
    int more = 0;
    size_t want = job->limit - job->nodes.count;
    rc =
        list_children(be, conn, job->ns, cursor, want, &page, &more, &job->err);
    if (rc < 0) {
      durable__nodes_free(&page);
      break;
    }
    if (page.count > 0) {
      free(cursor);
      cursor = strdup(page.items[page.count - 1]->id);
      if (cursor == NULL)
        rc = DURABLE_ENOMEM;
    }
    for (size_t i = 0; i < page.count; i++) {
      if (rc == 0 &&
          (grants == NULL ||
           durable__access_covers(grants, page.items[i]->main_node))) {
        rc = durable__nodes_push(&job->nodes, page.items[i]);
        if (rc == 0)
          continue;
      }
      durable_node_free(page.items[i]);
    }
    free(page.items);
    job->more = more;
    if (!more || job->nodes.count >= job->limit)
      break;
  }
  free(cursor);
  job->status = rc;
}

/* The items namespace of a stream-specific read, for a principal: read on
 * its owner, decided before anything is read. */
static int items_allowed(durable__job_t *job, const durable__grants_t *grants) {
  if (grants == NULL)
    return 1;
  char owner[DURABLE_PATH_MAX + 1];
  durable_path_owner(job->ns, owner, sizeof owner);
  if (durable__access_covers(grants, owner))
    return 1;
  job->status = durable__access_denied(&job->err, job->principal,
                                       DURABLE_GRANT_READ, job->ns);
  return 0;
}

static void read_items(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job, const durable__grants_t *grants) {
  char part[DURABLE_PARTITION_MAX + 1];
  char probe[DURABLE_PATH_MAX + 16];
  char after[32];
  snprintf(probe, sizeof probe, "%s/000000000001", job->ns);
  snprintf(after, sizeof after, "%012lld", (long long)job->num);
  durable__place_t place = durable__path_place(probe, part, sizeof part);
  if (!items_allowed(job, grants))
    return;
  int rc = be->list(conn, place, job->ns, after, job->limit + 1, &job->nodes,
                    &job->err);
  if (rc == 0) {
    /* only 12-digit ids are items; anything else sorts after '9...' or is
     * ignored (ids are checked, not trusted) */
    size_t keep = 0;
    for (size_t i = 0; i < job->nodes.count; i++) {
      const char *id = job->nodes.items[i]->id;
      int ok = strlen(id) == 12 && strspn(id, "0123456789") == 12;
      if (ok)
        job->nodes.items[keep++] = job->nodes.items[i];
      else
        durable_node_free(job->nodes.items[i]);
    }
    job->nodes.count = keep;
    job->more = job->nodes.count > job->limit;
    while (job->nodes.count > job->limit)
      durable_node_free(job->nodes.items[--job->nodes.count]);
  }
  job->status = rc;
}

static void read_last(const durable__backend_t *be, durable__conn_t *conn,
                      durable__job_t *job, const durable__grants_t *grants) {
  char part[DURABLE_PARTITION_MAX + 1];
  if (!items_allowed(job, grants))
    return;
  char probe[DURABLE_PATH_MAX + 16];
  snprintf(probe, sizeof probe, "%s/000000000001", job->ns);
  durable__place_t place = durable__path_place(probe, part, sizeof part);
  char *id = NULL;
  int rc = be->max_id(conn, place, job->ns, 12, &id, &job->err);
  if (rc == 0)
    job->value = id && *id ? strtoll(id, NULL, 10) : 0;
  free(id);
  job->status = rc;
}

static int by_path(const void *a, const void *b) {
  const durable_node_t *x = *(durable_node_t *const *)a;
  const durable_node_t *y = *(durable_node_t *const *)b;
  return strcmp(x->path, y->path);
}

/* Every node of one NodeType: each partition's tables, merged in path
 * order (partition names do not sort like the paths under them).  A
 * principal's grants filter the rows: pages are read on until `limit` rows
 * pass or none is left, so a page that filtering emptied is never taken for
 * the end. */
static void read_type(const durable__backend_t *be, durable__conn_t *conn,
                      durable__job_t *job, const durable__grants_t *grants) {
  durable__strv_t parts = {0};
  char *cursor = strdup(job->after ? job->after : "");
  int rc = cursor ? be->partitions(conn, &parts, &job->err) : DURABLE_ENOMEM;
  int more = 1;
  while (rc == 0 && more && job->nodes.count <= job->limit) {
    durable__nodes_t page = {0};
    for (size_t i = 0; rc == 0 && i < parts.count; i++)
      for (const char *const *t = durable__tables(); rc == 0 && *t; t++) {
        durable__place_t place = {.partition = parts.items[i], .table = *t};
        rc = be->list_type(conn, place, job->id, cursor, job->limit + 1, &page,
                           &job->err);
      }
    if (rc == 0 && page.count > 1)
      qsort(page.items, page.count, sizeof(*page.items), by_path);
    /* the first limit+1 of the merge, unfiltered, decide what follows */
    more = page.count > job->limit;
    while (page.count > job->limit + 1)
      durable_node_free(page.items[--page.count]);
    if (rc == 0 && page.count > 0) {
      free(cursor);
      cursor = strdup(page.items[page.count - 1]->path);
      if (cursor == NULL)
        rc = DURABLE_ENOMEM;
    }
    for (size_t i = 0; i < page.count; i++) {
      durable_node_t *node = page.items[i];
      page.items[i] = NULL;
      if (rc == 0 &&
          (grants == NULL || durable__access_covers(grants, node->main_node))) {
        if (durable__nodes_push(&job->nodes, node) < 0) {
          durable_node_free(node);
          rc = DURABLE_ENOMEM;
        }
      } else {
        durable_node_free(node);
      }
    }
    durable__nodes_free(&page);
    if (grants == NULL)
      break; /* unfiltered: one read is the page */
  }
  durable__strv_free(&parts);
  free(cursor);
  job->more = job->nodes.count > job->limit || (more && rc == 0);
  while (job->nodes.count > job->limit)
    durable_node_free(job->nodes.items[--job->nodes.count]);
  job->status = rc;
}

static void read_alive(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job) {
  if (job->store->single) {
    /* an in-memory store has one process, and one opening: this one */
    job->value = strcmp(job->id, job->store->instance) == 0;
    return;
  }
  int alive = 0;
  job->status = be->alive(conn, (uint64_t)job->num, &alive, &job->err);
  job->value = alive;
}

/* May job->principal do job->num (modes) on the owner of job->path? */
static void read_access(durable__job_t *job, const durable__grants_t *grants) {
  if (grants == NULL)
    return; /* the platform */
  char owner[DURABLE_PATH_MAX + 1];
  snprintf(owner, sizeof owner, "%.*s", (int)durable__owner_len(job->path),
           job->path);
  int missing = durable__access_missing(grants, owner, (int)job->num);
  if (missing)
    job->status =
        durable__access_denied(&job->err, job->principal, missing, job->path);
}

void durable__read_run(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job) {
  if (job->kind == JOB_GRANTS) { /* its principal filters; nobody acts */
    durable__grants_free(&job->grants);
    job->status = be->grants_of(conn, job->principal, &job->grants, &job->err);
    return;
  }
  durable__grants_t grants = {0};
  int restricted = job->principal != NULL;
  if (restricted) {
    int rc = durable__access_load(be, conn, job->principal, &grants, &job->err);
    if (rc < 0) {
      durable__grants_free(&grants);
      job->status = rc;
      return;
    }
  }
  const durable__grants_t *g = restricted ? &grants : NULL;
  switch (job->kind) {
  case JOB_GET:
  case JOB_EXISTS:
    read_get(be, conn, job, g);
    break;
  case JOB_QUERY:
    read_query(be, conn, job, g);
    break;
  case JOB_ITEMS:
    read_items(be, conn, job, g);
    break;
  case JOB_LAST:
    read_last(be, conn, job, g);
    break;
  case JOB_ACCESS:
    read_access(job, g);
    break;
  case JOB_TYPE:
    read_type(be, conn, job, g);
    break;
  case JOB_ALIVE:
    read_alive(be, conn, job);
    break;
  default:
    job->status = DURABLE_EINVAL;
    break;
  }
  durable__grants_free(&grants);
}

/* ---- the public read calls ---------------------------------------------- */

/* The principal a job runs as: NULL for the platform; any string is a
 * principal's name, checked here ("platform" is refused, not special). */
int durable__job_principal(durable__job_t *job, const char *principal,
                           durable_error_t *err) {
  if (principal == NULL)
    return 0;
  int rc = durable_principal_check(principal, err);
  if (rc < 0)
    return rc;
  job->principal = strdup(principal);
  return job->principal ? 0
                        : durable__error(err, DURABLE_ENOMEM, "out of memory");
}

static int submit(durable__job_t *job, durable_done_cb cb, void *data) {
  job->cb = cb;
  job->data = data;
  durable__job_submit(job);
  return 0;
}

static int path_job(durable_store_t *store, durable__job_kind_t kind,
                    const char *principal, const char *path,
                    durable__job_t **out, durable_error_t *err) {
  int rc = durable_path_check(path, err);
  if (rc < 0)
    return rc;
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if (store->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing", store->name);
  durable__job_t *job = durable__job_new(store, kind);
  if (job == NULL || durable__job_principal(job, principal, err) < 0 ||
      (job->path = strdup(path)) == NULL ||
      durable__path_split(path, &job->ns, &job->id) < 0) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  *out = job;
  return 0;
}

int durable_store_get(durable_store_t *store, const char *principal,
                      const char *path, durable_done_cb cb, void *data,
                      durable_error_t *err) {
  durable__job_t *job = NULL;
  int rc = path_job(store, JOB_GET, principal, path, &job, err);
  return rc < 0 ? rc : submit(job, cb, data);
}

int durable_store_exists(durable_store_t *store, const char *principal,
                         const char *path, durable_done_cb cb, void *data,
                         durable_error_t *err) {
  durable__job_t *job = NULL;
  int rc = path_job(store, JOB_EXISTS, principal, path, &job, err);
  return rc < 0 ? rc : submit(job, cb, data);
}

int durable_store_query(durable_store_t *store, const char *principal,
                        const char *query, const char *after, size_t limit,
                        durable_done_cb cb, void *data, durable_error_t *err) {
  if (query == NULL)
    return durable__error(err, DURABLE_EINVAL, "query is missing");
  if (limit == 0)
    limit = QUERY_LIMIT_DEFAULT;
  if (limit > QUERY_LIMIT_MAX)
    return durable__error(err, DURABLE_EINVAL, "query limit %zu is above %d",
                          limit, QUERY_LIMIT_MAX);
  durable__job_t *job = NULL;
  int rc;
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if (strncmp(query, "path:", 5) == 0) {
    rc = path_job(store, JOB_QUERY, principal, query + 5, &job, err);
    if (rc < 0)
      return rc;
  } else if (strncmp(query, "namespace:", 10) == 0) {
    const char *ns = query + 10;
    if (*ns != '\0' && (rc = durable_path_check(ns, err)) < 0)
      return rc;
    if (store->closing)
      return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                            store->name);
    job = durable__job_new(store, JOB_QUERY);
    if (job == NULL || durable__job_principal(job, principal, err) < 0 ||
        (job->ns = strdup(ns)) == NULL) {
      durable__job_free(job);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  } else if (strncmp(query, "type:", 5) == 0 && query[5] != '\0') {
    if (store->closing)
      return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                            store->name);
    job = durable__job_new(store, JOB_TYPE);
    if (job == NULL || durable__job_principal(job, principal, err) < 0 ||
        (job->id = strdup(query + 5)) == NULL) {
      durable__job_free(job);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  } else {
    return durable__error(err, DURABLE_EINVAL,
                          "query '%s' is not understood (use namespace:NS, "
                          "path:P or type:T)",
                          query);
  }
  job->limit = limit;
  if (after && *after && (job->after = strdup(after)) == NULL) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return submit(job, cb, data);
}

int durable__store_read_items(durable_store_t *store, const char *principal,
                              const char *items_ns, int64_t after, size_t limit,
                              durable_done_cb cb, void *data,
                              durable_error_t *err) {
  if (limit == 0)
    limit = QUERY_LIMIT_DEFAULT;
  if (limit > QUERY_LIMIT_MAX)
    return durable__error(err, DURABLE_EINVAL, "read limit %zu is above %d",
                          limit, QUERY_LIMIT_MAX);
  if (after < 0)
    return durable__error(err, DURABLE_EINVAL, "sequence %lld is negative",
                          (long long)after);
  durable__job_t *job = NULL;
  int rc = path_job(store, JOB_ITEMS, principal, items_ns, &job, err);
  if (rc < 0)
    return rc;
  free(job->ns);
  job->ns = job->path; /* the items namespace itself */
  job->path = NULL;
  job->num = after;
  job->limit = limit;
  return submit(job, cb, data);
}

int durable__store_last_item(durable_store_t *store, const char *principal,
                             const char *items_ns, durable_done_cb cb,
                             void *data, durable_error_t *err) {
  durable__job_t *job = NULL;
  int rc = path_job(store, JOB_LAST, principal, items_ns, &job, err);
  if (rc < 0)
    return rc;
  free(job->ns);
  job->ns = job->path;
  job->path = NULL;
  return submit(job, cb, data);
}

int durable__store_alive(durable_store_t *store, const char *instance,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  uint64_t key;
  if (durable__instance_key(instance, &key) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "'%s' is not a store instance (HOST:PID:16hex)",
                          instance ? instance : "");
  if (store->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing", store->name);
  durable__job_t *job = durable__job_new(store, JOB_ALIVE);
  if (job == NULL || (job->id = strdup(instance)) == NULL) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  job->num = (int64_t)key;
  return submit(job, cb, data);
}

int durable__store_access(durable_store_t *store, const char *principal,
                          const char *path, int modes, durable_done_cb cb,
                          void *data, durable_error_t *err) {
  if (modes < DURABLE_GRANT_READ || modes > DURABLE_GRANT_ALL)
    return durable__error(err, DURABLE_EINVAL, "access modes %d are not %s",
                          modes, "read, write or both");
  durable__job_t *job = NULL;
  int rc = path_job(store, JOB_ACCESS, principal, path, &job, err);
  if (rc < 0)
    return rc;
  job->num = modes;
  return submit(job, cb, data);
}

/* Grants are the platform's: the store has no acting principal, and the
 * grantee is the job's principal. */
static int grant_job(durable_store_t *store, const char *principal,
                     const char *prefix, int modes, int add, durable_done_cb cb,
                     void *data, durable_error_t *err) {
  int rc = durable_principal_check(principal, err);
  if (rc < 0)
    return rc;
  if (modes < (add ? 1 : 0) || modes > DURABLE_GRANT_ALL)
    return durable__error(err, DURABLE_EINVAL,
                          "grant modes %d are not read (%d), write (%d) or "
                          "both (%d)%s",
                          modes, DURABLE_GRANT_READ, DURABLE_GRANT_WRITE,
                          DURABLE_GRANT_ALL, add ? "" : ", or 0 for all");
  durable__job_t *job = NULL;
  rc = path_job(store, JOB_GRANT, principal, prefix, &job, err);
  if (rc < 0)
    return rc;
  job->num = add;
  job->limit = (size_t)(modes ? modes : DURABLE_GRANT_ALL);
  return submit(job, cb, data);
}

int durable_store_grant(durable_store_t *store, const char *principal,
                        const char *prefix, int modes, durable_done_cb cb,
                        void *data, durable_error_t *err) {
  return grant_job(store, principal, prefix, modes, 1, cb, data, err);
}

int durable_store_revoke(durable_store_t *store, const char *principal,
                         const char *prefix, int modes, durable_done_cb cb,
                         void *data, durable_error_t *err) {
  return grant_job(store, principal, prefix, modes, 0, cb, data, err);
}

int durable_store_grants(durable_store_t *store, const char *principal,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  int rc;
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if (store->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing", store->name);
  durable__job_t *job = durable__job_new(store, JOB_GRANTS);
  if (job == NULL || durable__job_principal(job, principal, err) < 0) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return submit(job, cb, data);
}

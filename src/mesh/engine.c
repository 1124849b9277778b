/*
 * engine.c: the bottom of the store: jobs, the worker threads that run them,
 * and their way back to the loop.
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
 * The engine knows no kind of work: a job's class (job.h) says which worker
 * runs it, whether the writer takes a run of such jobs at once, how to run
 * them and what to do on the loop before its callback.  The reads (read.c),
 * the writes (write.c), the grants (access.c) and the change feed (feed.c)
 * sit on it; the store (store.c) starts and stops it.
 */
#include "engine.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Jobs one transaction may carry; a bound on the latency a group adds. */
#define GROUP_MAX 512
/* After finishing its work a worker watches its queue this long (yielding
 * its core to anyone who needs it) before it goes to sleep.  A producer that
 * waits for each result issues its next request right after its callback; a
 * worker still awake takes it at once instead of paying a wake-up, which on
 * a virtual machine costs about as much as the rest of an in-memory write. */
#define SPIN_NS 100000

/* ---- the store, as its parts read it ---------------------------------- */

uv_loop_t *durable__store_loop(durable_store_t *store) {
  return store->loop;
}

const char *durable_store_name(const durable_store_t *store) {
  return store->name;
}

const char *durable_store_instance(const durable_store_t *store) {
  return store->instance;
}

int durable__store_refuse_readonly(durable_store_t *store, const char *what,
                                   durable_error_t *err) {
  if (!store->readonly)
    return 0;
  return durable__error(err, DURABLE_EINVAL,
                        "%s refused: store '%s' is opened for reading only",
                        what, store->name);
}

int durable__store_closing(durable_store_t *store) {
  return store->closing;
}

/* ---- jobs --------------------------------------------------------------- */

durable__job_t *durable__job_new(durable_store_t *store,
                                 durable__job_kind_t kind,
                                 const durable__job_class_t *cls) {
  durable__job_t *job = calloc(1, sizeof(*job));
  if (job == NULL)
    return NULL;
  job->store = store;
  job->kind = kind;
  job->cls = cls;
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
  if (job->cls->free)
    job->cls->free(job);
  durable_node_free(job->node);
  durable__nodes_free(&job->nodes);
  durable__grants_free(&job->grants);
  free(job);
}

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

int durable__job_start(durable__job_t *job, durable_done_cb cb, void *data) {
  job->cb = cb;
  job->data = data;
  durable__job_submit(job);
  return 0;
}

int durable__job_for_path(durable_store_t *store, durable__job_kind_t kind,
                          const durable__job_class_t *cls,
                          const char *principal, const char *path,
                          durable__job_t **out, durable_error_t *err) {
  int rc = durable_path_check(path, err);
  if (rc < 0)
    return rc;
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if (store->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing", store->name);
  durable__job_t *job = durable__job_new(store, kind, cls);
  if (job == NULL || durable__job_principal(job, principal, err) < 0 ||
      (job->path = strdup(path)) == NULL ||
      durable__path_split(path, &job->ns, &job->id) < 0) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  *out = job;
  return 0;
}

/* ---- own commits (SQLite's watch source asks about them) ---------------- */

void durable__store_own_commit(durable_store_t *store, int64_t id) {
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

static durable__job_t *job_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, durable__job_t, link);
}

/* Hand `n` finished jobs back to the loop. */
static void finish(durable_store_t *store, durable__job_t **jobs, size_t n) {
  if (n == 0)
    return;
  uv_mutex_lock(&store->lock);
  for (size_t i = 0; i < n; i++)
    durable__queue_insert_tail(&store->done, &jobs[i]->link);
  uv_mutex_unlock(&store->lock);
  uv_async_send(&store->async);
}

int durable__worker_connect(durable__worker_t *w, durable_error_t *err) {
  durable_store_t *store = w->store;
  const durable__backend_t *be = store->be;
  if (w->conn && be->server_of &&
      durable__store_server_gen(store) != w->server_gen)
    durable__worker_disconnect(w); /* on a server the store left */
  if (w->conn)
    return 0;
  int rc = durable__store_split_refusal(store, err);
  if (rc < 0)
    return rc; /* no connection at all while the store is split */
  rc = be->connect(store->url, store->readonly, &w->conn, err);
  if (rc == 0 && be->watch_commits)
    be->watch_commits(w->conn, durable__store_stalled, store);
  /* a store that only reads follows no server: any one of the URL's
   * serves its reads, a standby as well as the primary */
  if (rc == 0 && be->server_of && !store->readonly) {
    durable__server_t s = {0};
    if ((rc = be->server_of(w->conn, &s, err)) == 0)
      rc = durable__store_server_check(store, &s, &w->server_gen, err);
    if (rc < 0)
      durable__worker_disconnect(w);
  }
  return rc;
}

void durable__worker_disconnect(durable__worker_t *w) {
  if (w->conn)
    w->store->be->disconnect(w->conn);
  w->conn = NULL;
}

void durable__job_fail(durable__job_t *job, const durable_error_t *err) {
  job->status = err->code;
  job->err = *err;
}

/* Wait up to SPIN_NS for a job to be queued, yielding the core to anyone
 * else who needs it meanwhile. */
static void spin(durable__worker_t *w) {
  uint64_t deadline = uv_hrtime() + SPIN_NS;
  while (!__atomic_load_n(&w->queued, __ATOMIC_ACQUIRE) &&
         uv_hrtime() < deadline)
    sched_yield();
}

static void worker_main(void *arg) {
  durable__worker_t *w = arg;
  durable_store_t *store = w->store;
  durable__job_t *batch[GROUP_MAX];
  for (;;) {
    if (w == &store->writer)
      spin(w); /* the reader's next page is asked for ahead: it waits */
    uv_mutex_lock(&store->lock);
    while (durable__queue_empty(&w->jobs) && !store->stopping) {
      w->sleeping = 1;
      uv_cond_wait(&w->wake, &store->lock);
      w->sleeping = 0;
    }
    if (durable__queue_empty(&w->jobs)) { /* stopping, and nothing left */
      uv_mutex_unlock(&store->lock);
      break;
    }
    /* Take one job, or a run of queued jobs of a class that groups (the
     * writes) up to GROUP_MAX. */
    size_t n = 0;
    durable__job_t *first = job_of(durable__queue_head(&w->jobs));
    if (!first->cls->groups) {
      durable__queue_remove(&first->link);
      batch[n++] = first;
    } else {
      struct durable__queue *q;
      while ((q = durable__queue_head(&w->jobs)) != &w->jobs &&
             job_of(q)->cls == first->cls && n < GROUP_MAX) {
        durable__queue_remove(q);
        batch[n++] = job_of(q);
      }
    }
    __atomic_store_n(&w->queued, !durable__queue_empty(&w->jobs),
                     __ATOMIC_RELEASE);
    uv_mutex_unlock(&store->lock);

    first->cls->run(w, batch, n);
    finish(store, batch, n);
  }
  durable__worker_disconnect(w);
  /* tell the loop this worker is gone (a NULL-job marker is not needed:
   * the loop counts workers in on_async after stopping was set) */
  uv_mutex_lock(&store->lock);
  w->running = 0;
  uv_mutex_unlock(&store->lock);
  uv_async_send(&store->async);
}

void durable__job_submit(durable__job_t *job) {
  durable_store_t *store = job->store;
  durable__worker_t *w =
      job->cls->on_writer || store->single ? &store->writer : &store->reader;
  uv_mutex_lock(&store->lock);
  durable__queue_insert_tail(&w->jobs, &job->link);
  __atomic_store_n(&w->queued, 1, __ATOMIC_RELEASE);
  if (w->sleeping)
    uv_cond_signal(&w->wake);
  uv_mutex_unlock(&store->lock);
}

static void join_workers(durable_store_t *store) {
  durable__worker_t *workers[] = {&store->writer, &store->reader};
  for (size_t i = 0; i < 2; i++) {
    if (!workers[i]->started)
      continue;
    uv_thread_join(&workers[i]->thread);
    uv_cond_destroy(&workers[i]->wake);
  }
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
  /* a page's block goes with the job: a copy outlives it */
  if (node != NULL && durable__nodes_in_block(&job->nodes, node))
    return durable_node_dup(node);
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
  if (job->cls->delivered)
    job->cls->delivered(job);
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

static void on_async(uv_async_t *handle) {
  durable_store_t *store = handle->data;
  durable__store_server_news(store);
  for (;;) {
    /* take the finished jobs aside: the workers add to the list meanwhile,
     * and a callback may queue (and free) jobs */
    struct durable__queue done, *q;
    uv_mutex_lock(&store->lock);
    durable__queue_move(&store->done, &done);
    uv_mutex_unlock(&store->lock);
    if (durable__queue_empty(&done))
      break;
    while ((q = durable__queue_pop(&done)) != NULL)
      deliver(job_of(q));
  }
  if (store->stopped) {
    uv_mutex_lock(&store->lock);
    int running = store->writer.running || store->reader.running;
    uv_mutex_unlock(&store->lock);
    if (!running) {
      void (*stopped)(durable_store_t *) = store->stopped;
      store->stopped = NULL;
      join_workers(store);
      stopped(store);
    }
  }
}

/* ---- start and stop ---------------------------------------------------- */

static int start_worker(durable_store_t *store, durable__worker_t *w) {
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

int durable__engine_start(durable_store_t *store, durable_error_t *err) {
  durable__queue_init(&store->writer.jobs);
  durable__queue_init(&store->reader.jobs);
  durable__queue_init(&store->done);
  int rc = uv_async_init(store->loop, &store->async, on_async);
  if (rc != 0)
    return durable__error(err, DURABLE_ENOMEM, "cannot start the store: %s",
                          uv_strerror(rc));
  store->async.data = store;
  store->async_open = 1;
  if (start_worker(store, &store->writer) < 0 ||
      (!store->single && start_worker(store, &store->reader) < 0))
    return durable__error(err, DURABLE_ENOMEM,
                          "cannot start the store's threads");
  return 0;
}

void durable__engine_stop(durable_store_t *store,
                          void (*stopped)(durable_store_t *store)) {
  store->stopped = stopped;
  uv_mutex_lock(&store->lock);
  store->stopping = 1;
  /* (a worker that failed to start has no condition to signal) */
  if (store->writer.started)
    uv_cond_signal(&store->writer.wake);
  if (store->reader.started)
    uv_cond_signal(&store->reader.wake);
  uv_mutex_unlock(&store->lock);
  /* on_async sees the workers gone (each sends one last wake-up) */
  uv_async_send(&store->async);
}

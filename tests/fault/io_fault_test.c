/*
 * io_fault_test.c: the store under a failing database, which must end in
 * success or a clear error with nothing half-written: an I/O error, a full
 * disk, a lost connection, a transaction the database cancelled.
 *
 * The store's retry paths -- a connection that fails with DURABLE_EUNAVAIL
 * is dropped and opened again, a group that certainly did not commit is
 * run again once, a cancelled one (DURABLE_ECANCELED) up to five times, a
 * commit whose outcome is unknown is reported, never retried -- run only
 * when a database misbehaves, which no other test makes it do.  Here the
 * SQLite backend is wrapped (through the test-only hook
 * durable__backend_wrap, src/mesh/backend.h) by one that fails chosen calls:
 * by function, by the node path a call is about, by what the node's content
 * holds, after letting some through, for a number of calls.  A failed
 * commit is rolled back for real first (a database that refuses a COMMIT
 * keeps nothing of it); a commit "lost after it was sent" is made for real
 * and then reported failed.  Each case then checks what the caller was
 * told and what another process would find in the file:
 *
 *   commit_fails        EIO at COMMIT: the error reaches the caller, nothing
 *                       of the transaction is there (a batch neither)
 *   disk_full           the second write of a batch finds the disk full: the
 *                       first is not there either; the store goes on
 *   commit_unknown      the connection breaks after COMMIT: "may or may not
 *                       have been saved", not retried (a create made once)
 *   lost_connection     EUNAVAIL mid-transaction: reconnect, run it again
 *                       once, done; twice: a clear EUNAVAIL, then carry on
 *   reconnect_refused   the new connection fails too: EUNAVAIL, then carry on
 *   lost_read           a read's connection breaks: one fresh try
 *   canceled            ECANCELED is run again (and given up after five)
 *   ack_fails           a consumer's acknowledgement cannot commit: its
 *                       checkpoint does not move and the item is handed
 *                       over again -- nothing acknowledged that was not
 *                       handled, nothing skipped
 *   publish_fails       an append that fails is reported failed and leaves
 *                       no gap: the next one takes its sequence
 *   publish_unknown     an append whose commit is in doubt: reported failed
 *                       ("may or may not"), and the next append neither
 *                       reuses its sequence nor leaves a gap
 *   start_scan_fails    a host's first look at the streams fails: the next
 *                       liveness round looks again and wakes the owner
 *
 * Every case runs on a SQLite file in a fresh folder (a lost in-memory
 * database would be a new, empty one).  By hand: io_fault_test [CASE].
 */
#include <durable_internal.h>

#include "backend.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 10000

/* ---- the failing backend ---------------------------------------------------
 */

typedef enum {
  F_CONNECT,
  F_BEGIN,
  F_COMMIT,
  F_GET,
  F_LIST,
  F_INSERT,
  F_UPSERT,
  F_UPDATE,
  F_REPLACE,
  F_REMOVE,
  F_FLUSH,
  F_LIST_TYPE,
  F_COUNT
} fn_t;

static const char *const fn_names[F_COUNT] = {
    "connect", "begin",  "commit",  "get",    "list",  "insert",
    "upsert",  "update", "replace", "remove", "flush", "list_type",
};

/* What to fail: calls of `fn` (any write: F_COUNT with `writes`), about
 * node `path` when set, whose node content holds `content_has` when set;
 * the first `skip` such calls go through, the next `times` fail (-1: every
 * one until the fault is cleared) with `code` and `message`.  A commit with
 * `unknown` is made, then reported failed with *unknown = 1. */
typedef struct {
  int on;
  fn_t fn;
  int writes; /* insert, upsert, update or replace */
  char path[512];
  char content_has[128];
  int skip, times;
  int code;
  char message[256];
  int unknown;
} fault_t;

static const durable__backend_t *real;
static durable__backend_t wrapped;
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static fault_t faults[2];     /* a call meets the first that matches */
static int calls[F_COUNT];    /* every call, under fault_lock */
static int failures[F_COUNT]; /* ... of which failed */
static int disconnects;

/* Fail what `f` says (and, with fault_also, what `g` says too). */
static void fault_set(fault_t f) {
  pthread_mutex_lock(&fault_lock);
  faults[0] = f;
  faults[0].on = 1;
  faults[1].on = 0;
  pthread_mutex_unlock(&fault_lock);
}

static void fault_also(fault_t g) {
  pthread_mutex_lock(&fault_lock);
  faults[1] = g;
  faults[1].on = 1;
  pthread_mutex_unlock(&fault_lock);
}

static void fault_clear(void) {
  pthread_mutex_lock(&fault_lock);
  faults[0].on = faults[1].on = 0;
  pthread_mutex_unlock(&fault_lock);
}

static int count_of(int *counter, fn_t fn) {
  pthread_mutex_lock(&fault_lock);
  int n = counter[fn];
  pthread_mutex_unlock(&fault_lock);
  return n;
}

/* Count the call; 0 to let it through, else the code to fail it with
 * (`err` filled).  `path` and `content` may be NULL. */
static int fault_check(fn_t fn, const char *path, const char *content,
                       durable_error_t *err, int *unknown) {
  int rc = 0;
  pthread_mutex_lock(&fault_lock);
  calls[fn]++;
  int is_write =
      fn == F_INSERT || fn == F_UPSERT || fn == F_UPDATE || fn == F_REPLACE;
  for (int i = 0; i < 2 && rc == 0; i++) {
    fault_t *f = &faults[i];
    if (!f->on || !(f->writes ? is_write : f->fn == fn) ||
        (f->path[0] && (path == NULL || strcmp(path, f->path) != 0)) ||
        (f->content_has[0] &&
         (content == NULL || strstr(content, f->content_has) == NULL)))
      continue;
    if (f->skip > 0) {
      f->skip--;
      break;
    }
    if (f->times == 0)
      continue;
    if (f->times > 0)
      f->times--;
    rc = f->code;
    if (unknown)
      *unknown = f->unknown;
    failures[fn]++;
    snprintf(err->message, sizeof err->message, "%s (%s, injected)", f->message,
             fn_names[fn]);
    err->code = rc;
  }
  pthread_mutex_unlock(&fault_lock);
  return rc;
}

static void node_path(char *out, size_t size, const char *ns, const char *id) {
  snprintf(out, size, "%s%s%s", ns, *ns ? "/" : "", id);
}

static int w_connect(const char *url, int readonly, durable__conn_t **out,
                     durable_error_t *err) {
  int rc = fault_check(F_CONNECT, NULL, NULL, err, NULL);
  return rc ? rc : real->connect(url, readonly, out, err);
}

static void w_disconnect(durable__conn_t *conn) {
  pthread_mutex_lock(&fault_lock);
  disconnects++;
  pthread_mutex_unlock(&fault_lock);
  real->disconnect(conn);
}

static int w_begin(durable__conn_t *conn, durable_error_t *err) {
  int rc = fault_check(F_BEGIN, NULL, NULL, err, NULL);
  return rc ? rc : real->begin(conn, err);
}

static int w_commit(durable__conn_t *conn, int *unknown, durable_error_t *err) {
  int lost = 0;
  durable_error_t why = {0};
  int rc = fault_check(F_COMMIT, NULL, NULL, &why, &lost);
  if (rc == 0)
    return real->commit(conn, unknown, err);
  if (lost) {
    /* made, and the answer lost on the way back */
    int r = real->commit(conn, unknown, err);
    CHECK_OK(r);
    *unknown = 1;
  } else {
    /* refused: a database keeps nothing of a COMMIT it refused */
    real->rollback(conn);
    *unknown = 0;
  }
  *err = why;
  return rc;
}

static int w_get(durable__conn_t *conn, durable__place_t place, const char *ns,
                 const char *id, int for_update, durable_node_t **out,
                 durable_error_t *err) {
  char path[DURABLE_PATH_MAX + 2];
  node_path(path, sizeof path, ns, id);
  int rc = fault_check(F_GET, path, NULL, err, NULL);
  return rc ? rc : real->get(conn, place, ns, id, for_update, out, err);
}

static int w_list(durable__conn_t *conn, durable__place_t place, const char *ns,
                  const char *after, size_t limit, durable__nodes_t *out,
                  durable_error_t *err) {
  int rc = fault_check(F_LIST, ns, NULL, err, NULL);
  return rc ? rc : real->list(conn, place, ns, after, limit, out, err);
}

static int w_list_type(durable__conn_t *conn, durable__place_t place,
                       const char *node_type, const char *after, size_t limit,
                       durable__nodes_t *out, durable_error_t *err) {
  int rc = fault_check(F_LIST_TYPE, NULL, NULL, err, NULL);
  return rc ? rc
            : real->list_type(conn, place, node_type, after, limit, out, err);
}

static int w_insert(durable__conn_t *conn, durable__place_t place,
                    const durable_node_t *node, durable__outcome_t *out,
                    durable_error_t *err) {
  int rc = fault_check(F_INSERT, node->path, node->content, err, NULL);
  return rc ? rc : real->insert(conn, place, node, out, err);
}

static int w_upsert(durable__conn_t *conn, durable__place_t place,
                    const durable_node_t *node, durable__outcome_t *out,
                    durable_error_t *err) {
  int rc = fault_check(F_UPSERT, node->path, node->content, err, NULL);
  return rc ? rc : real->upsert(conn, place, node, out, err);
}

static int w_update(durable__conn_t *conn, durable__place_t place,
                    const durable_node_t *node, durable__outcome_t *out,
                    durable_error_t *err) {
  int rc = fault_check(F_UPDATE, node->path, node->content, err, NULL);
  return rc ? rc : real->update(conn, place, node, out, err);
}

static int w_replace(durable__conn_t *conn, durable__place_t place,
                     const durable_node_t *node, int64_t expected,
                     durable__outcome_t *out, durable_error_t *err) {
  int rc = fault_check(F_REPLACE, node->path, node->content, err, NULL);
  return rc ? rc : real->replace(conn, place, node, expected, out, err);
}

static int w_remove(durable__conn_t *conn, durable__place_t place,
                    const char *ns, const char *id, durable__outcome_t *out,
                    durable_error_t *err) {
  char path[DURABLE_PATH_MAX + 2];
  node_path(path, sizeof path, ns, id);
  int rc = fault_check(F_REMOVE, path, NULL, err, NULL);
  return rc ? rc : real->remove(conn, place, ns, id, out, err);
}

static int w_flush(durable__conn_t *conn, durable_error_t *err) {
  int rc = fault_check(F_FLUSH, NULL, NULL, err, NULL);
  return rc ? rc : real->flush(conn, err);
}

/* durable__backend_wrap: the chosen backend, with the calls above in front
 * of it (everything else is the backend's own). */
static const durable__backend_t *wrap(const durable__backend_t *be) {
  CHECK(real == NULL || real == be); /* one backend in this test */
  real = be;
  wrapped = *be;
  wrapped.connect = w_connect;
  wrapped.disconnect = w_disconnect;
  wrapped.begin = w_begin;
  wrapped.commit = w_commit;
  wrapped.get = w_get;
  wrapped.list = w_list;
  wrapped.list_type = w_list_type;
  wrapped.insert = w_insert;
  wrapped.upsert = w_upsert;
  wrapped.update = w_update;
  wrapped.replace = w_replace;
  wrapped.remove = w_remove;
  wrapped.flush = w_flush;
  return &wrapped;
}

/* ---- the case's folder, loop and store -------------------------------------
 */

static uv_loop_t loop;
static char dir[64];
static char url[128];

static void case_begin(void) {
  fault_clear();
  memset(calls, 0, sizeof calls);
  memset(failures, 0, sizeof failures);
  disconnects = 0;
  snprintf(dir, sizeof dir, "/tmp/durable-io-fault.XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  snprintf(url, sizeof url, "sqlite:%s/s.db", dir);
  CHECK_OK(uv_loop_init(&loop));
}

static void case_end(void) {
  fault_clear();
  CHECK_LOOP_CLOSES(&loop);
  check_remove_dir(dir);
}

static durable_store_t *open_store(void) {
  durable_store_t *store = NULL;
  durable_error_t err = {0};
  int rc = durable_store_open(&loop, url, &store, &err);
  CHECK_MSG(rc == 0, "opening %s: %s", url, err.message);
  return store;
}

static void on_closed(void *data) {
  ++*(int *)data;
}

static void close_store(durable_store_t *store) {
  int closed = 0;
  durable_store_close(store, on_closed, &closed);
  CHECK_MSG(check_run_until(&loop, &closed, WAIT_MS), "close: no callback");
}

/* One result kept past its callback. */
typedef struct {
  int calls, status;
  char message[512];
  char content[512];
  size_t count;
  int64_t value;
} res_t;

static void on_result(const durable_result_t *r, void *data) {
  res_t *res = data;
  res->calls++;
  res->status = r->status;
  res->count = r->count;
  res->value = r->value;
  if (r->status < 0)
    CHECK_MSG(r->message && r->message[0], "%s without a message",
              durable_err_name(r->status));
  snprintf(res->message, sizeof res->message, "%s",
           r->message ? r->message : "");
  snprintf(res->content, sizeof res->content, "%s",
           r->node && r->node->content ? r->node->content : "");
}

static void wait_res(res_t *r) {
  CHECK_MSG(check_run_until(&loop, &r->calls, WAIT_MS), "no callback");
  check_run_for(&loop, 0);
  CHECK_EQ_INT(r->calls, 1);
}

static res_t do_write(durable_store_t *store, const durable_write_t *w,
                      size_t n) {
  res_t r = {0};
  durable_error_t err = {0};
  CHECK_OK(durable_store_write(store, w, n, on_result, &r, &err));
  wait_res(&r);
  return r;
}

static res_t do_create(durable_store_t *store, const char *path,
                       const char *content) {
  durable_write_t w = {
      .kind = DURABLE_WRITE_CREATE, .path = path, .content = content};
  return do_write(store, &w, 1);
}

static res_t do_put(durable_store_t *store, const char *path,
                    const char *content) {
  durable_write_t w = {
      .kind = DURABLE_WRITE_PUT, .path = path, .content = content};
  return do_write(store, &w, 1);
}

static res_t do_get(durable_store_t *store, const char *path) {
  res_t r = {0};
  durable_error_t err = {0};
  CHECK_OK(durable_store_get(store, NULL, path, on_result, &r, &err));
  wait_res(&r);
  return r;
}

/* Whether `path` is there, as another process finds it: a store of its
 * own, opened on the file. */
static int present_elsewhere(const char *path) {
  durable_store_t *other = open_store();
  res_t r = do_get(other, path);
  close_store(other);
  CHECK_MSG(r.status == 0 || r.status == DURABLE_ENOTFOUND, "get %s: %s", path,
            r.message);
  return r.status == 0;
}

/* The failure as the caller heard it: this code, with the injected
 * message in its line. */
static void check_failed(const res_t *r, int code, const char *why) {
  CHECK_EQ_CODE(r->status, code);
  CHECK_CONTAINS(r->message, why);
}

/* ---- store cases -----------------------------------------------------------
 */

static void test_commit_fails(void) {
  case_begin();
  durable_store_t *store = open_store();
  fault_set((fault_t){.fn = F_COMMIT,
                      .times = -1,
                      .code = DURABLE_EIO,
                      .message = "disk I/O error"});
  res_t r = do_create(store, "IO/a", "{\"v\":1}");
  check_failed(&r, DURABLE_EIO, "disk I/O error");
  durable_write_t batch[3] = {
      {.kind = DURABLE_WRITE_PUT, .path = "IO/b1", .content = "{}"},
      {.kind = DURABLE_WRITE_CREATE, .path = "IO/b2", .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = "IO/b3", .content = "{}"}};
  r = do_write(store, batch, 3);
  check_failed(&r, DURABLE_EIO, "disk I/O error");
  fault_clear();
  /* nothing of either: not here, not for another process */
  CHECK_EQ_CODE(do_get(store, "IO/a").status, DURABLE_ENOTFOUND);
  CHECK(!present_elsewhere("IO/a"));
  CHECK(!present_elsewhere("IO/b1"));
  CHECK(!present_elsewhere("IO/b2"));
  CHECK(!present_elsewhere("IO/b3"));
  /* the store goes on: the same create now, on the same connection */
  CHECK_OK(do_create(store, "IO/a", "{\"v\":2}").status);
  CHECK(present_elsewhere("IO/a"));
  close_store(store);
  case_end();
}

static void test_disk_full(void) {
  case_begin();
  durable_store_t *store = open_store();
  /* the batch's first write goes in, its second finds the disk full */
  fault_set((fault_t){.writes = 1,
                      .path = "IO/full2",
                      .times = -1,
                      .code = DURABLE_EIO,
                      .message = "database or disk is full"});
  durable_write_t batch[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = "IO/full1", .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = "IO/full2", .content = "{}"}};
  res_t r = do_write(store, batch, 2);
  check_failed(&r, DURABLE_EIO, "database or disk is full");
  CHECK_GE_INT(failures[F_UPSERT], 1);
  /* a write that fails beside another caller's (in one group commit, when
   * they meet in the queue) fails alone */
  res_t other = {0}, full = {0};
  durable_error_t err = {0};
  durable_write_t w1 = {
      .kind = DURABLE_WRITE_PUT, .path = "IO/other", .content = "{}"};
  durable_write_t w2 = {
      .kind = DURABLE_WRITE_PUT, .path = "IO/full2", .content = "{}"};
  CHECK_OK(durable_store_write(store, &w1, 1, on_result, &other, &err));
  CHECK_OK(durable_store_write(store, &w2, 1, on_result, &full, &err));
  wait_res(&other);
  wait_res(&full);
  CHECK_OK(other.status);
  check_failed(&full, DURABLE_EIO, "database or disk is full");
  fault_clear();
  /* nothing half-written */
  CHECK(!present_elsewhere("IO/full1"));
  CHECK(!present_elsewhere("IO/full2"));
  CHECK(present_elsewhere("IO/other"));
  CHECK_OK(do_write(store, batch, 2).status);
  CHECK(present_elsewhere("IO/full1"));
  CHECK(present_elsewhere("IO/full2"));
  close_store(store);
  case_end();
}

static void test_commit_unknown(void) {
  case_begin();
  durable_store_t *store = open_store();
  int connects = count_of(calls, F_CONNECT);
  /* COMMIT reached the database, the connection broke before its answer */
  fault_set((fault_t){.fn = F_COMMIT,
                      .times = 1,
                      .code = DURABLE_EUNAVAIL,
                      .message = "server closed the connection",
                      .unknown = 1});
  res_t r = do_create(store, "IO/maybe", "{\"v\":1}");
  check_failed(&r, DURABLE_EUNAVAIL, "may or may not have been saved");
  CHECK_CONTAINS(r.message, "server closed the connection");
  fault_clear();
  /* made once: not run again behind the caller's back (a second create
   * would have met its row) */
  CHECK_EQ_INT(count_of(calls, F_INSERT), 1);
  /* the broken connection was dropped; the next write opens a new one */
  CHECK_EQ_INT(disconnects, 1);
  CHECK_OK(do_put(store, "IO/after", "{}").status);
  CHECK_EQ_INT(count_of(calls, F_CONNECT), connects + 1);
  CHECK(present_elsewhere("IO/maybe"));
  CHECK(present_elsewhere("IO/after"));
  close_store(store);
  case_end();
}

static void test_lost_connection(void) {
  case_begin();
  durable_store_t *store = open_store();
  int connects = count_of(calls, F_CONNECT);
  /* once: dropped, reconnected, run again, done */
  fault_set((fault_t){.fn = F_INSERT,
                      .times = 1,
                      .code = DURABLE_EUNAVAIL,
                      .message = "connection lost"});
  CHECK_OK(do_create(store, "IO/once", "{\"v\":1}").status);
  CHECK_EQ_INT(count_of(failures, F_INSERT), 1);
  CHECK_EQ_INT(count_of(calls, F_CONNECT), connects + 1);
  CHECK_EQ_INT(disconnects, 1);
  fault_clear();
  CHECK(present_elsewhere("IO/once"));
  /* twice in a row: the write fails, saying so; nothing of it is there */
  connects = count_of(calls, F_CONNECT);
  fault_set((fault_t){.fn = F_INSERT,
                      .times = 2,
                      .code = DURABLE_EUNAVAIL,
                      .message = "connection lost"});
  res_t r = do_create(store, "IO/twice", "{}");
  check_failed(&r, DURABLE_EUNAVAIL, "connection lost");
  fault_clear();
  CHECK(!present_elsewhere("IO/twice"));
  /* and the store carries on, on a new connection */
  CHECK_OK(do_create(store, "IO/twice", "{}").status);
  CHECK(present_elsewhere("IO/twice"));
  CHECK_GE_INT(count_of(calls, F_CONNECT), connects + 2);
  close_store(store);
  case_end();
}

static void test_reconnect_refused(void) {
  case_begin();
  durable_store_t *store = open_store();
  /* the connection breaks, and the database cannot be reached again: the
   * write's one try on a new connection cannot be made */
  fault_set((fault_t){.fn = F_BEGIN,
                      .times = 1,
                      .code = DURABLE_EUNAVAIL,
                      .message = "connection lost"});
  fault_also((fault_t){.fn = F_CONNECT,
                       .times = -1,
                       .code = DURABLE_EUNAVAIL,
                       .message = "could not connect to server"});
  res_t r = do_put(store, "IO/r", "{}");
  check_failed(&r, DURABLE_EUNAVAIL, "could not connect to server");
  CHECK_EQ_INT(count_of(failures, F_BEGIN), 1);
  CHECK_EQ_INT(count_of(failures, F_CONNECT), 1);
  /* still unreachable: each write says so, none hangs */
  r = do_put(store, "IO/r", "{}");
  check_failed(&r, DURABLE_EUNAVAIL, "could not connect to server");
  fault_clear();
  /* reachable again: the store carries on */
  CHECK_OK(do_put(store, "IO/r2", "{}").status);
  close_store(store);
  CHECK(!present_elsewhere("IO/r"));
  CHECK(present_elsewhere("IO/r2"));
  case_end();
}

static void test_lost_read(void) {
  case_begin();
  durable_store_t *store = open_store();
  CHECK_OK(do_put(store, "IO/n", "{\"v\":7}").status);
  CHECK_OK(do_get(store, "IO/n").status); /* the reader has connected */
  int connects = count_of(calls, F_CONNECT);
  fault_set((fault_t){.fn = F_GET,
                      .path = "IO/n",
                      .times = 1,
                      .code = DURABLE_EUNAVAIL,
                      .message = "connection lost"});
  res_t r = do_get(store, "IO/n");
  CHECK_OK(r.status); /* one fresh try */
  CHECK_EQ_STR(r.content, "{\"v\":7}");
  CHECK_EQ_INT(count_of(calls, F_CONNECT), connects + 1);
  fault_set((fault_t){.fn = F_GET,
                      .path = "IO/n",
                      .times = 2,
                      .code = DURABLE_EUNAVAIL,
                      .message = "connection lost"});
  r = do_get(store, "IO/n");
  check_failed(&r, DURABLE_EUNAVAIL, "connection lost");
  /* an I/O error is no lost connection: reported, not retried */
  fault_set((fault_t){.fn = F_GET,
                      .path = "IO/n",
                      .times = -1,
                      .code = DURABLE_EIO,
                      .message = "disk I/O error"});
  r = do_get(store, "IO/n");
  check_failed(&r, DURABLE_EIO, "disk I/O error");
  fault_clear();
  CHECK_OK(do_get(store, "IO/n").status);
  close_store(store);
  case_end();
}

static void test_canceled(void) {
  case_begin();
  durable_store_t *store = open_store();
  /* three deadlocks in a row: run again each time, made once */
  fault_set((fault_t){.fn = F_COMMIT,
                      .times = 3,
                      .code = DURABLE_ECANCELED,
                      .message = "deadlock detected"});
  CHECK_OK(do_create(store, "IO/c", "{}").status);
  CHECK_EQ_INT(count_of(failures, F_COMMIT), 3);
  CHECK_EQ_INT(count_of(calls, F_INSERT), 4);
  CHECK(present_elsewhere("IO/c"));
  /* forever: given up, saying why; nothing of it there */
  fault_set((fault_t){.fn = F_COMMIT,
                      .times = -1,
                      .code = DURABLE_ECANCELED,
                      .message = "deadlock detected"});
  res_t r = do_create(store, "IO/c2", "{}");
  check_failed(&r, DURABLE_ECANCELED, "deadlock detected");
  fault_clear();
  CHECK(!present_elsewhere("IO/c2"));
  close_store(store);
  case_end();
}

/* ---- streams ---------------------------------------------------------------
 */

static char log_text[1 << 15];
static size_t log_len;
static void log_sink(durable_log_level_t level, const char *line, void *data) {
  (void)level;
  (void)data;
  int n = snprintf(log_text + log_len, sizeof log_text - log_len, "%s\n", line);
  if (n > 0 && (size_t)n < sizeof log_text - log_len)
    log_len += (size_t)n;
}

static durable_mesh_t *open_mesh(void) {
  log_len = 0;
  log_text[0] = '\0';
  durable_mesh_options_t o = {.store = url,
                              .log = log_sink,
                              .streams = {.backoff_min_ms = 20,
                                          .backoff_max_ms = 100,
                                          .reclaim_ms = 200,
                                          .holder_probe_ms = 100,
                                          .liveness_ms = 100}};
  durable_mesh_t *mesh = NULL;
  durable_error_t err = {0};
  int rc = durable_mesh_open(&loop, &o, &mesh, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  return mesh;
}

static void close_mesh(durable_mesh_t *mesh) {
  int closed = 0;
  durable_mesh_close(mesh, on_closed, &closed);
  CHECK(check_run_until(&loop, &closed, WAIT_MS));
}

static const durable_stream_id_t stream = {.ns = "Log", .key = "K/s"};
#define STREAM_PATH "K/s/_DurableStream/Log"
#define ITEMS_NS STREAM_PATH "/_DurableStreamItem"

typedef struct {
  int calls, status;
  int64_t seq;
  char message[1024];
} pub_t;

static void on_seq(int status, int64_t seq, const char *message, void *data) {
  pub_t *p = data;
  p->calls++;
  p->status = status;
  p->seq = seq;
  snprintf(p->message, sizeof p->message, "%s", message ? message : "");
}

static pub_t publish(durable_hub_t *hub, const char *payload) {
  pub_t p = {0};
  durable_error_t err = {0};
  CHECK_OK(durable_stream_publish(hub, &stream, payload, on_seq, &p, &err));
  CHECK_MSG(check_run_until(&loop, &p.calls, WAIT_MS), "publish: no answer");
  check_run_for(&loop, 0);
  CHECK_EQ_INT(p.calls, 1);
  return p;
}

/* The stream as stored: each item's payload text (its PayloadJson, still
 * escaped), contiguous from 1, and the stream node's LastSequence and
 * Checkpoint. */
typedef struct {
  size_t count;
  char payloads[16][64];
  int64_t last, checkpoint;
  int done;
} items_t;

static void on_items(const durable_result_t *res, void *data) {
  items_t *it = data;
  CHECK_MSG(res->status == 0, "%s", res->message);
  for (size_t i = 0; i < res->count && i < 16; i++) {
    char want[16];
    snprintf(want, sizeof want, "%012zu", i + 1);
    CHECK_MSG(strcmp(res->nodes[i]->id, want) == 0,
              "item %zu of the stream is %s: a gap", i + 1, res->nodes[i]->id);
    const char *p = strstr(res->nodes[i]->content, "\"PayloadJson\":");
    CHECK(p != NULL);
    snprintf(it->payloads[i], sizeof it->payloads[i], "%.*s",
             (int)strcspn(p + 14, ","), p + 14);
  }
  it->count = res->count;
  it->done = 1;
}

static int64_t field(const char *content, const char *name) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *at = strstr(content, key);
  return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

static items_t stored_items(durable_store_t *store) {
  items_t it = {0};
  durable_error_t err = {0};
  CHECK_OK(durable__store_read_items(store, NULL, ITEMS_NS, 0, 100, on_items,
                                     &it, &err));
  CHECK(check_run_until(&loop, &it.done, WAIT_MS));
  res_t node = do_get(store, STREAM_PATH);
  CHECK_OK(node.status);
  it.last = field(node.content, "LastSequence");
  it.checkpoint = field(node.content, "Checkpoint");
  return it;
}

/* As another process finds it, after the mesh closed. */
static items_t stored_elsewhere(void) {
  durable_store_t *other = open_store();
  items_t it = stored_items(other);
  close_store(other);
  CHECK_EQ_INT(it.last, (int64_t)it.count);
  return it;
}

static durable_hub_t *client_of(durable_mesh_t *mesh, const char *address) {
  durable_hub_t *hub = NULL;
  durable_error_t err = {0};
  CHECK_OK(durable_mesh_client(mesh, address, &hub, &err));
  return hub;
}

/* A client hub at a stream's owner `address` (no node there), once the
 * owner is free: an append wakes its owner by a mesh read of it, which
 * holds a node hub at the address until the read finds nothing, and a
 * client hub is refused there meanwhile (EEXIST). */
static durable_hub_t *owner_client_of(durable_mesh_t *mesh,
                                      const char *address) {
  durable_hub_t *hub = NULL;
  durable_error_t err = {0};
  int rc;
  uint64_t deadline = uv_now(&loop) + WAIT_MS;
  while ((rc = durable_mesh_client(mesh, address, &hub, &err)) ==
             DURABLE_EEXIST &&
         uv_now(&loop) < deadline)
    check_run_for(&loop, 5);
  CHECK_MSG(rc == 0, "client hub at %s: %s", address, err.message);
  return hub;
}

static void test_publish_fails(void) {
  case_begin();
  durable_mesh_t *mesh = open_mesh();
  durable_hub_t *client = client_of(mesh, "client/p");
  CHECK_EQ_INT(publish(client, "{\"p\":1}").seq, 1);
  /* item 2's row cannot be written: the append fails, with the why */
  fault_set((fault_t){.fn = F_INSERT,
                      .path = ITEMS_NS "/000000000002",
                      .times = -1,
                      .code = DURABLE_EIO,
                      .message = "disk I/O error"});
  pub_t p = publish(client, "{\"p\":2}");
  CHECK_EQ_CODE(p.status, DURABLE_EIO);
  CHECK_CONTAINS(p.message, "Appending to durable stream Log@K/s failed");
  CHECK_CONTAINS(p.message, "disk I/O error");
  fault_clear();
  /* the next append takes sequence 2: the failed one left no gap */
  CHECK_EQ_INT(publish(client, "{\"p\":3}").seq, 2);
  close_mesh(mesh);
  items_t it = stored_elsewhere();
  CHECK_EQ_INT(it.count, 2);
  CHECK_CONTAINS(it.payloads[0], "p\\\":1");
  CHECK_CONTAINS(it.payloads[1], "p\\\":3");
  case_end();
}

static void test_publish_unknown(void) {
  case_begin();
  durable_mesh_t *mesh = open_mesh();
  durable_hub_t *client = client_of(mesh, "client/p");
  CHECK_EQ_INT(publish(client, "{\"p\":1}").seq, 1);
  /* the append of item 2 commits, and its answer is lost */
  fault_set((fault_t){.fn = F_COMMIT,
                      .times = 1,
                      .code = DURABLE_EUNAVAIL,
                      .message = "server closed the connection",
                      .unknown = 1});
  pub_t p = publish(client, "{\"p\":2}");
  CHECK_EQ_CODE(p.status, DURABLE_EUNAVAIL);
  CHECK_CONTAINS(p.message, "may or may not have been saved");
  fault_clear();
  /* the stream hub does not trust what it thought: the next append comes
   * after what is stored, neither on item 2 nor past a gap */
  pub_t next = publish(client, "{\"p\":3}");
  CHECK_OK(next.status);
  close_mesh(mesh);
  items_t it = stored_elsewhere();
  CHECK_EQ_INT(next.seq, (int64_t)it.count);
  CHECK_EQ_INT(it.count, 3); /* item 2 was made: the commit went through */
  CHECK_CONTAINS(it.payloads[1], "p\\\":2");
  CHECK_CONTAINS(it.payloads[2], "p\\\":3");
  case_end();
}

/* The consumer: each item it is handed, in order. */
static int64_t handed[32];
static int nhanded;

static void handler(durable_hub_t *hub, const durable_item_t *item,
                    durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  CHECK(nhanded < 32);
  handed[nhanded++] = item->sequence;
  durable_reply_ok(done, NULL);
}

static int log_has(void *arg) {
  return strstr(log_text, arg) != NULL;
}

static int64_t checkpoint_of(durable_mesh_t *mesh) {
  res_t node = do_get(durable_mesh_store(mesh), STREAM_PATH);
  CHECK_OK(node.status);
  return field(node.content, "Checkpoint");
}

static void test_ack_fails(void) {
  case_begin();
  durable_mesh_t *mesh = open_mesh();
  durable_hub_t *client = client_of(mesh, "client/p");
  for (int i = 1; i <= 3; i++) {
    char payload[16];
    snprintf(payload, sizeof payload, "{\"p\":%d}", i);
    CHECK_EQ_INT(publish(client, payload).seq, i);
  }
  /* item 2's acknowledgement -- the stream node's write of Checkpoint 2
   * -- cannot commit: the disk is full */
  fault_set((fault_t){.writes = 1,
                      .path = STREAM_PATH,
                      .content_has = "\"Checkpoint\":2,",
                      .times = -1,
                      .code = DURABLE_EIO,
                      .message = "database or disk is full"});
  nhanded = 0;
  durable_consumer_t c = {.ns = "Log", .handler = handler};
  durable_error_t err = {0};
  CHECK_OK(durable_hub_consume(owner_client_of(mesh, "K/s"), &c, NULL, &err));
  CHECK_MSG(check_run_until_fn(&loop, log_has, "was NOT acknowledged", WAIT_MS),
            "the failed acknowledgement was not reported; log:\n%s", log_text);
  CHECK_CONTAINS(log_text, "database or disk is full");
  /* item 2 was handled, its acknowledgement failed: the checkpoint stays
   * at 1, stored, and nothing after item 2 is handed over (item 2 may be
   * again already, after a backoff, and fail the same way) */
  CHECK_EQ_INT(checkpoint_of(mesh), 1);
  int during = nhanded;
  CHECK_GE_INT(during, 2);
  CHECK_EQ_INT(handed[0], 1);
  for (int i = 1; i < during; i++)
    CHECK_EQ_INT(handed[i], 2);
  fault_clear();
  /* then item 2 is handed over again, and item 3 after it */
  uint64_t deadline = uv_now(&loop) + WAIT_MS;
  while (checkpoint_of(mesh) < 3 && uv_now(&loop) < deadline)
    check_run_for(&loop, 20);
  CHECK_EQ_INT(checkpoint_of(mesh), 3);
  int twos = 0;
  for (int i = 1; i < nhanded - 1; i++) {
    CHECK_EQ_INT(handed[i], 2);
    twos++;
  }
  CHECK_GE_INT(twos, 2); /* its failed acknowledgement, and the one after */
  CHECK_EQ_INT(handed[nhanded - 1], 3);
  close_mesh(mesh);
  CHECK_EQ_INT(stored_elsewhere().checkpoint, 3);
  case_end();
}

/* A host's first look at the streams (durable_mesh_start_hosting) fails:
 * the owner of a stream with items waiting is still woken, by the next
 * liveness round's look at every stream, with no other change to tell it. */
static void test_start_scan_fails(void) {
  case_begin();
  durable_mesh_t *mesh = open_mesh();
  durable_hub_t *client = client_of(mesh, "client/p");
  for (int i = 1; i <= 2; i++)
    CHECK_EQ_INT(publish(client, "{}").seq, i);
  durable_write_t owner = {.kind = DURABLE_WRITE_PUT,
                           .path = "K/s",
                           .node_type = "Waked",
                           .content = "{}"};
  CHECK_OK(do_write(durable_mesh_store(mesh), &owner, 1).status);
  /* and two DurableStream nodes that are no streams, which no look can
   * ever read as one: they must not make every round look again */
  durable_write_t strays[2] = {{.kind = DURABLE_WRITE_PUT,
                                .path = "P/stray",
                                .node_type = "DurableStream",
                                .content = "{}"},
                               {.kind = DURABLE_WRITE_PUT,
                                .path = "K/x/_DurableStream/Log",
                                .node_type = "DurableStream",
                                .content =
                                    "{\"Namespace\":\"Log\",\"Key\":\"a//b\","
                                    "\"LastSequence\":1}"}};
  CHECK_OK(do_write(durable_mesh_store(mesh), strays, 2).status);
  close_mesh(mesh);

  mesh = open_mesh();
  nhanded = 0;
  durable_consumer_t c = {.ns = "Log", .handler = handler};
  durable_error_t err = {0};
  CHECK_OK(durable_node_type_consume(durable_node_type_get(mesh, "Waked"), &c,
                                     &err));
  fault_set((fault_t){.fn = F_LIST_TYPE,
                      .times = 1,
                      .code = DURABLE_EIO,
                      .message = "disk I/O error"});
  CHECK_OK(durable_mesh_start_hosting(mesh, &err));
  uint64_t deadline = uv_now(&loop) + WAIT_MS;
  while (nhanded < 2 && uv_now(&loop) < deadline)
    check_run_for(&loop, 20);
  CHECK_EQ_INT(count_of(failures, F_LIST_TYPE), 1); /* the look that failed */
  CHECK_MSG(nhanded == 2, "the owner was not woken: %d items handled; log:\n%s",
            nhanded, log_text);
  fault_clear();
  /* the look after it found everything it could: five more rounds (100 ms
   * each) look at nothing again */
  check_run_for(&loop, 150);
  int looks = count_of(calls, F_LIST_TYPE);
  check_run_for(&loop, 500);
  CHECK_EQ_INT(count_of(calls, F_LIST_TYPE), looks);
  close_mesh(mesh);
  case_end();
}

int main(int argc, char **argv) {
  durable__backend_wrap = wrap;
  static const check_test_t tests[] = {
      {"commit_fails", test_commit_fails},
      {"disk_full", test_disk_full},
      {"commit_unknown", test_commit_unknown},
      {"lost_connection", test_lost_connection},
      {"reconnect_refused", test_reconnect_refused},
      {"lost_read", test_lost_read},
      {"canceled", test_canceled},
      {"publish_fails", test_publish_fails},
      {"publish_unknown", test_publish_unknown},
      {"ack_fails", test_ack_fails},
      {"start_scan_fails", test_start_scan_fails},
  };
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

/*
 * alloc_fault_test.c: every allocation of a public operation fails once,
 * in turn, and the runtime must still give a clear error and stay
 * consistent: nothing half-written, nothing leaked, nothing acknowledged
 * that was not handled.
 *
 * libdurable has over a hundred "if (x == NULL) return ENOMEM" branches
 * that no other test reaches.  This one reaches them the way jansson's
 * test_chaos does: each scenario below (a store on sqlite::memory: and on a
 * file with a put, a batch, a get, a query and a delete; a mesh with a
 * hub's activation and a request; publishing, also as JSON; a consumer
 * draining three items, then a fourth after its stream hub's recycle; a
 * plain reader; the streams' statuses) runs once to count the allocations
 * it makes, then again for each N with allocation N failing ("once"), and
 * with N and
 * every allocation after it failing ("all after": a process that ran out).
 * Each run is a forked child, so that a crash or a hang fails that N alone
 * and names it, and so that LeakSanitizer checks each run at its exit
 * under DURABLE_SANITIZE.  A run must end with:
 *
 *  - every operation done, or failed with a message and DURABLE_ENOMEM (or
 *    EFAILED saying "out of memory": a hub's activation), each callback
 *    run exactly once, the loop closing with nothing left on it;
 *  - no allocation of the library left unfreed: they are counted here too,
 *    so that the plain debug build catches a leak;
 *  - the state consistent once allocation works again: what was reported
 *    written is there, also for another process (the file reopened), what
 *    was reported failed is not, unless its message says that it may have
 *    been ("out of memory after writing", "may or may not"); a batch is
 *    all there or not at all; a stream has no gap, no item twice, each
 *    publish reported done at its sequence; a consumer hands each item over
 *    in order, none skipped, and ends with its checkpoint at the last one,
 *    which it reaches only through its handler (nothing acknowledged that
 *    was not handled), and never hands over an acknowledged item again; a
 *    listing of the streams is whole or fails; the mesh answers a request
 *    again.
 *
 * "All after" may leave the runtime unable to go on at all (an answer needs
 * memory to be delivered): a wait that lasts STUCK_MS there lifts the fault
 * for the rest of the run, and what waited must then end within WAIT_MS --
 * nothing may be lost for good to a time without memory.
 *
 * How allocations are failed: the test executable is linked with
 * -Wl,--wrap=malloc,calloc,realloc,strdup,strndup,free (the static library
 * `durable` is linked into it, so its calls land in the __wrap_ functions
 * below; libuv, SQLite and libpq are shared libraries, whose own
 * allocations are not touched), and jansson's allocator is set with
 * json_set_alloc_funcs.  These are the allocation calls src/ makes
 * (grep -rn "alloc\|strdup\|strndup\|asprintf" src; open_memstream is
 * libc's own and left alone).  Only allocations made while a scenario has
 * armed the fault count, on any thread: the store's worker threads
 * allocate too, so the count of one run may differ a little from the next,
 * and N may land on another allocation than in the counting run; every run
 * must be clean whichever it is.
 *
 * Runtime (about 20 s in the debug build, 40 s under ASan on 2 cores): the
 * scenarios keep their counts in the hundreds; every N up to FULL_UPTO is
 * run, beyond it every STRIDE-th (offset per scenario), and "all after" on
 * every ALL_STRIDE-th N; runs go 4 at a time (DURABLE_FAULT_JOBS), since
 * most of a run is waiting.  DURABLE_FAULT_ALL=1 runs every N in both
 * modes (about a minute).  By hand:
 *
 *   alloc_fault_test                      every scenario, sampled
 *   alloc_fault_test SCENARIO             one scenario
 *   alloc_fault_test SCENARIO N [all]     one run, in this process (gdb);
 *                                         DURABLE_FAULT_VERBOSE=1 says each
 *                                         outcome and where N failed
 */
#include <durable_internal.h>

#include "check.h"
#include "stream.h" /* durable__failure_record: a failing consumer's record */

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FULL_UPTO 200 /* every N up to here */
#define STRIDE 3      /* then every STRIDE-th */
#define ALL_STRIDE 5  /* "all after": every ALL_STRIDE-th N */
#define WAIT_MS 5000  /* one callback */
#define STUCK_MS 300  /* "all after": a wait this long lifts the fault */
#define CHILD_SECONDS 30

/* ---- the allocator ---------------------------------------------------------
 */

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void __real_free(void *p);

static struct {
  atomic_int armed;     /* count (and fail) allocations now */
  atomic_long seen;     /* allocations made while armed */
  atomic_long fails;    /* ... of which failed */
  atomic_long fail_at;  /* 0: none */
  atomic_int all_after; /* fail every allocation after fail_at too */
} A;

static int g_verbose; /* DURABLE_FAULT_VERBOSE=1: say what happens */

static int fault_now(void) {
  if (!atomic_load(&A.armed))
    return 0;
  long n = atomic_fetch_add(&A.seen, 1) + 1;
  long at = atomic_load(&A.fail_at);
  if (at > 0 && (n == at || (atomic_load(&A.all_after) && n > at))) {
    atomic_fetch_add(&A.fails, 1);
    if (g_verbose && n == at) {
      /* where: addr2line -e alloc_fault_test OFFSET */
      void *frames[12];
      fprintf(stderr, "# allocation %ld fails here:\n", n);
      backtrace_symbols_fd(frames, backtrace(frames, 12), 2);
    }
    return 1;
  }
  return 0;
}

/* Every live allocation of the library (and of jansson through it), so
 * that a run can check that it freed what it allocated, sanitizer or not:
 * an open-addressing table with backward-shift deletion, under a mutex
 * since the worker threads allocate too.  A pointer freed that is not in it
 * (allocated by libc or SQLite and freed by the library) is let go. */
#define LIVE_SLOTS (1u << 16)
typedef struct {
  void *p;
  size_t size;
  void *caller;
} live_t;
static live_t live[LIVE_SLOTS];
static size_t live_count;
static int live_overflow;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t live_hash(const void *p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 17;
  x *= 0xed5ad4bbu;
  x ^= x >> 11;
  return x & (LIVE_SLOTS - 1);
}

static void live_add(void *p, size_t size, void *caller) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&live_lock);
  if (live_count + 1 >= LIVE_SLOTS / 2) {
    live_overflow = 1;
  } else {
    size_t i = live_hash(p);
    while (live[i].p != NULL)
      i = (i + 1) & (LIVE_SLOTS - 1);
    live[i] = (live_t){p, size, caller};
    live_count++;
  }
  pthread_mutex_unlock(&live_lock);
}

static void live_del(void *p) {
  if (p == NULL)
    return;
  pthread_mutex_lock(&live_lock);
  size_t i = live_hash(p);
  while (live[i].p != NULL && live[i].p != p)
    i = (i + 1) & (LIVE_SLOTS - 1);
  if (live[i].p == p) {
    live[i].p = NULL;
    live_count--;
    /* shift back the entries of the same cluster that hashed before i */
    size_t j = i;
    for (;;) {
      j = (j + 1) & (LIVE_SLOTS - 1);
      if (live[j].p == NULL)
        break;
      size_t k = live_hash(live[j].p);
      if ((j > i && (k <= i || k > j)) || (j < i && (k <= i && k > j))) {
        live[i] = live[j];
        live[j].p = NULL;
        i = j;
      }
    }
  }
  pthread_mutex_unlock(&live_lock);
}

void *__wrap_malloc(size_t size) {
  if (fault_now())
    return NULL;
  void *p = __real_malloc(size);
  live_add(p, size, __builtin_return_address(0));
  return p;
}

void *__wrap_calloc(size_t n, size_t size) {
  if (fault_now())
    return NULL;
  void *p = __real_calloc(n, size);
  live_add(p, n * size, __builtin_return_address(0));
  return p;
}

void *__wrap_realloc(void *old, size_t size) {
  if (fault_now())
    return NULL; /* `old` stays, as a real failure leaves it */
  void *p = __real_realloc(old, size);
  if (p != NULL || size == 0) {
    live_del(old);
    live_add(p, size, __builtin_return_address(0));
  }
  return p;
}

char *__wrap_strdup(const char *s) {
  if (fault_now())
    return NULL;
  char *p = __real_strdup(s);
  live_add(p, p ? strlen(p) + 1 : 0, __builtin_return_address(0));
  return p;
}

char *__wrap_strndup(const char *s, size_t n) {
  if (fault_now())
    return NULL;
  char *p = __real_strndup(s, n);
  live_add(p, p ? strlen(p) + 1 : 0, __builtin_return_address(0));
  return p;
}

void __wrap_free(void *p) {
  live_del(p);
  __real_free(p);
}

/* jansson's allocations: the library's json_dumps text is freed with free(),
 * so they go through the same table. */
static void *json_fault_malloc(size_t size) {
  if (fault_now())
    return NULL;
  void *p = __real_malloc(size);
  live_add(p, size, __builtin_return_address(0));
  return p;
}

static void json_fault_free(void *p) {
  live_del(p);
  __real_free(p);
}

static void arm(void) {
  atomic_store(&A.armed, 1);
}

static void disarm(void) {
  atomic_store(&A.armed, 0);
}

/* ---- what a run reports to the parent --------------------------------------
 */

/* In memory shared with the parent (MAP_SHARED), written by each child. */
typedef struct {
  long seen;            /* allocations counted */
  long fails;           /* allocations failed */
  long errors;          /* operations that reported an error */
  long nomem;           /* ... DURABLE_ENOMEM */
  long unknown;         /* writes reported failed that may have been saved */
  long stuck;           /* waits that went on only once memory was back */
  char last_error[256]; /* one error message, for the summary */
} report_t;
static report_t *g_report;

/* ---- helpers ---------------------------------------------------------------
 */

static uv_loop_t loop;
static char g_dir[64];  /* a fresh folder per run for the file stores */
static char g_url[128]; /* "sqlite:g_dir/s.db" */

/* What an operation ended with, kept past its callback. */
typedef struct {
  int calls;
  int status;
  int64_t value; /* a sequence, a count */
  char message[512];
  char content[512]; /* a got node's content */
  size_t count;
} outcome_t;

/* What an allocation failure may surface as: out of memory, or the failure
 * of what needed the memory, saying so (a hub's activation: EFAILED,
 * "activation of '...' failed (ENOMEM): out of memory"). */
static int expected_code(int status, const char *message) {
  return status == DURABLE_ENOMEM ||
         (status == DURABLE_EFAILED && strstr(message, "out of memory"));
}

/* An error the runtime reported: it must have a message and a code that
 * an allocation failure can explain. */
static void note_error(int status, const char *message, const char *what) {
  if (g_verbose)
    fprintf(stderr, "# error: %s: %s %s (allocation %ld)\n", what,
            durable_err_name(status), message ? message : "(null)",
            atomic_load(&A.seen));
  CHECK_MSG(message != NULL && message[0] != '\0', "%s: %s without a message",
            what, durable_err_name(status));
  CHECK_MSG(expected_code(status, message), "%s: unexpected %s: %s", what,
            durable_err_name(status), message);
  g_report->errors++;
  if (status == DURABLE_ENOMEM)
    g_report->nomem++;
  snprintf(g_report->last_error, sizeof g_report->last_error, "%s: %s", what,
           message);
}

/* What an armed operation ended with: done, or an error with a message
 * and a code an allocation failure can explain (`also`: one more code that
 * is no error of the run, such as ENOTFOUND for the delete of a node whose
 * put failed). */
static void judge(const outcome_t *o, const char *what, int also) {
  if (g_verbose)
    fprintf(stderr, "# %s: %s %s (allocation %ld)\n", what,
            durable_err_name(o->status), o->message, atomic_load(&A.seen));
  if (o->status < 0 && o->status != also)
    note_error(o->status, o->message, what);
}

/* A submission: 1 when queued (its callback is owed), else the refusal is
 * the outcome. */
static int submitted(int rc, const durable_error_t *err, outcome_t *o) {
  if (rc == 0)
    return 1;
  o->calls = 1;
  o->status = rc;
  snprintf(o->message, sizeof o->message, "%s", err->message);
  return 0;
}

/* Run the loop until pred(arg) holds.  While every allocation fails
 * ("all after"), the runtime may be unable to go on at all -- an answer
 * needs memory to be delivered -- so after STUCK_MS the fault is lifted:
 * memory is back, and from then on what was waiting must end as it would
 * have (a request, say, by its timeout), within WAIT_MS. */
static int wait_until(int (*pred)(void *arg), void *arg) {
  if (A.all_after && atomic_load(&A.armed) &&
      !check_run_until_fn(&loop, pred, arg, STUCK_MS)) {
    disarm();
    A.all_after = 0;
    A.fail_at = 0; /* for the rest of the run */
    g_report->stuck++;
  }
  return check_run_until_fn(&loop, pred, arg, WAIT_MS);
}

static int called(void *arg) {
  return ((outcome_t *)arg)->calls > 0;
}

static void wait_for(outcome_t *o, const char *what) {
  CHECK_MSG(wait_until(called, o), "%s: no callback within %d ms", what,
            WAIT_MS);
  check_run_for(&loop, 0); /* a second call would show here */
  CHECK_MSG(o->calls == 1, "%s: callback ran %d times", what, o->calls);
}

/* Submit (rc, err), wait for the callback if it was queued, judge. */
#define OP(o, what, also, call)                                                \
  do {                                                                         \
    durable_error_t op_err_ = {0};                                             \
    durable_error_t *err = &op_err_;                                           \
    if (submitted((call), err, (o)))                                           \
      wait_for((o), (what));                                                   \
    judge((o), (what), (also));                                                \
  } while (0)

/* A failed write whose message says that it may have been saved: the
 * commit went through and only the answer was lost. */
static int maybe_saved(const outcome_t *o) {
  return o->status < 0 && (strstr(o->message, "after writing") != NULL ||
                           strstr(o->message, "may or may not") != NULL);
}

static void on_result(const durable_result_t *res, void *data) {
  outcome_t *o = data;
  o->calls++;
  o->status = res->status;
  o->count = res->count;
  o->value = res->value;
  snprintf(o->message, sizeof o->message, "%s",
           res->message ? res->message : "");
  snprintf(o->content, sizeof o->content, "%s",
           res->node && res->node->content ? res->node->content : "");
  if (maybe_saved(o))
    g_report->unknown++;
}

static void on_closed(void *data) {
  ++*(int *)data;
}

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/durable-alloc-fault.XXXXXX");
  CHECK(mkdtemp(g_dir) != NULL);
  snprintf(g_url, sizeof g_url, "sqlite:%s/s.db", g_dir);
}

/* Open a store with allocation working (to check what a run left). */
static durable_store_t *open_plain(const char *url) {
  durable_store_t *store = NULL;
  durable_error_t err = {0};
  int rc = durable_store_open(&loop, url, &store, &err);
  CHECK_MSG(rc == 0, "reopening %s: %s", url, err.message);
  return store;
}

static void close_store(durable_store_t *store) {
  int closed = 0;
  durable_store_close(store, on_closed, &closed);
  CHECK_MSG(wait_until(check__flag_set, &closed),
            "durable_store_close: callback did not run");
  CHECK_EQ_INT(closed, 1);
}

/* Get `path` with allocation working: its content, or "" when absent. */
static outcome_t get_plain(durable_store_t *store, const char *path) {
  outcome_t o = {0};
  durable_error_t err = {0};
  CHECK_OK(durable_store_get(store, NULL, path, on_result, &o, &err));
  wait_for(&o, "get");
  CHECK_MSG(o.status == 0 || o.status == DURABLE_ENOTFOUND, "get %s: %s", path,
            o.message);
  return o;
}

static int64_t json_int(const char *content, const char *field) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", field);
  const char *at = strstr(content, key);
  return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

/* ---- scenario: a store ------------------------------------------------------
 *
 * open, a put, a batch of two writes, a get, a query, a delete, close;
 * then with allocation working the store (the same one in memory, the file
 * reopened) must hold exactly what was reported written. */

typedef struct {
  outcome_t put1, batch, get1, query, del1;
} store_ops_t;

/* The store after the operations of `ops`: each node present iff its write
 * was reported done (or may have been saved). */
static void check_store_state(durable_store_t *store, const store_ops_t *ops) {
  outcome_t a1 = get_plain(store, "F/a/1");
  outcome_t a2 = get_plain(store, "F/a/2");
  outcome_t a3 = get_plain(store, "F/a/3");
  /* F/a/1: put, then deleted */
  int put1 = ops->put1.status == 0, del1 = ops->del1.status == 0;
  if (a1.status == 0) {
    CHECK_MSG(!del1, "F/a/1 was reported deleted and is there");
    CHECK_MSG(put1 || maybe_saved(&ops->put1),
              "F/a/1 was reported failed (%s) and is there", ops->put1.message);
    CHECK_EQ_STR(a1.content, "{\"v\":1}");
  } else {
    CHECK_MSG(!put1 || del1 || maybe_saved(&ops->del1),
              "F/a/1 was reported written and is not there");
  }
  /* the batch: both or neither */
  CHECK_MSG(a2.status == a3.status, "half a batch is there: F/a/2 %s, F/a/3 %s",
            durable_err_name(a2.status), durable_err_name(a3.status));
  if (a2.status == 0) {
    CHECK_MSG(ops->batch.status == 0 || maybe_saved(&ops->batch),
              "the batch was reported failed (%s) and is there",
              ops->batch.message);
    CHECK_EQ_STR(a2.content, "{\"v\":2}");
    CHECK_EQ_STR(a3.content, "{\"v\":3}");
  } else {
    CHECK_MSG(ops->batch.status != 0, "the batch was reported written and is "
                                      "not there");
  }
  /* what the reads answered, when they answered */
  if (ops->get1.status == 0)
    CHECK_EQ_STR(ops->get1.content, "{\"v\":1}");
  if (ops->query.status == 0)
    CHECK_LE_INT(ops->query.count, 3);
}

static void store_ops(durable_store_t *store, store_ops_t *ops) {
  OP(&ops->put1, "put", 0,
     durable_store_put(store, "F/a/1", "Thing", "{\"v\":1}", on_result,
                       &ops->put1, err));
  durable_write_t batch[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = "F/a/2", .content = "{\"v\":2}"},
      {.kind = DURABLE_WRITE_CREATE, .path = "F/a/3", .content = "{\"v\":3}"}};
  OP(&ops->batch, "write", 0,
     durable_store_write(store, batch, 2, on_result, &ops->batch, err));
  /* absent when the put failed */
  int absent = ops->put1.status != 0 ? DURABLE_ENOTFOUND : 0;
  OP(&ops->get1, "get", absent,
     durable_store_get(store, NULL, "F/a/1", on_result, &ops->get1, err));
  OP(&ops->query, "query", 0,
     durable_store_query(store, NULL, "namespace:F/a", NULL, 0, on_result,
                         &ops->query, err));
  OP(&ops->del1, "delete", absent,
     durable_store_delete(store, "F/a/1", on_result, &ops->del1, err));
}

static void scenario_store_memory(void) {
  durable_store_t *store = NULL;
  durable_error_t err = {0};
  arm();
  int rc = durable_store_open(&loop, "sqlite::memory:", &store, &err);
  if (rc < 0) {
    note_error(rc, err.message, "durable_store_open");
    disarm();
    return;
  }
  store_ops_t ops = {0};
  store_ops(store, &ops);
  disarm();
  check_store_state(store, &ops);
  arm();
  close_store(store);
  disarm();
}

static void scenario_store_file(void) {
  durable_store_t *store = NULL;
  durable_error_t err = {0};
  make_dir();
  arm();
  int rc = durable_store_open(&loop, g_url, &store, &err);
  store_ops_t ops = {0};
  if (rc < 0) {
    note_error(rc, err.message, "durable_store_open");
    ops.put1.status = ops.batch.status = ops.get1.status = rc;
    ops.query.status = ops.del1.status = rc;
  } else {
    store_ops(store, &ops);
    close_store(store);
  }
  disarm();
  /* the file as another process would find it */
  store = open_plain(g_url);
  check_store_state(store, &ops);
  close_store(store);
  check_remove_dir(g_dir);
}

/* ---- meshes ----------------------------------------------------------------
 */

static char g_log[8192]; /* the mesh's log lines of this run */
static size_t g_log_len;
static void log_sink(durable_log_level_t level, const char *line, void *data) {
  (void)data;
  if (g_verbose)
    fprintf(stderr, "#   log %s: %s\n", durable_log_level_name(level), line);
  int n = snprintf(g_log + g_log_len, sizeof g_log - g_log_len, "%s\n", line);
  if (n > 0 && (size_t)n < sizeof g_log - g_log_len)
    g_log_len += (size_t)n;
}

static durable_mesh_options_t mesh_options(const char *url) {
  durable_mesh_options_t o = {.store = url, .log = log_sink};
  /* long enough never to expire in a run: an answer lost for want of
   * memory must be reported as such (request.c), not by a timeout */
  o.request_timeout_ms = 3000;
  o.quiesce_budget_ms = 500;
  o.streams = (durable_stream_options_t){.backoff_min_ms = 20,
                                         .backoff_max_ms = 100,
                                         .reclaim_ms = 200,
                                         .holder_probe_ms = 100,
                                         .liveness_ms = 100};
  return o;
}

/* Open a mesh (armed or not): NULL after an error was noted. */
static durable_mesh_t *open_mesh(const char *url) {
  durable_mesh_t *mesh = NULL;
  durable_error_t err = {0};
  durable_mesh_options_t o = mesh_options(url);
  int rc = durable_mesh_open(&loop, &o, &mesh, &err);
  if (rc < 0) {
    note_error(rc, err.message, "durable_mesh_open");
    return NULL;
  }
  return mesh;
}

static void close_mesh(durable_mesh_t *mesh) {
  int closed = 0;
  durable_mesh_close(mesh, on_closed, &closed);
  CHECK_MSG(wait_until(check__flag_set, &closed),
            "durable_mesh_close: callback did not run");
  CHECK_EQ_INT(closed, 1);
}

static durable_hub_t *client_hub(durable_mesh_t *mesh, const char *address) {
  durable_hub_t *hub = NULL;
  durable_error_t err = {0};
  int rc = durable_mesh_client(mesh, address, &hub, &err);
  if (rc < 0) {
    note_error(rc, err.message, "durable_mesh_client");
    return NULL;
  }
  return hub;
}

static void on_response(const durable_response_t *res, void *data) {
  outcome_t *o = data;
  o->calls++;
  o->status = res->status;
  snprintf(o->message, sizeof o->message, "%s",
           res->message ? res->message : "");
  snprintf(o->content, sizeof o->content, "%s",
           res->payload ? res->payload : "");
}

static void echo_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)data;
  char out[256];
  snprintf(out, sizeof out, "{\"echo\":%s}", msg->payload);
  durable_reply_ok(reply, out);
}

/* ---- scenario: a hub's activation and a request ---------------------------
 *
 * open a mesh, a client hub, a NodeType with a handler, its node, one
 * request (which activates the node's hub), close.  With allocation
 * working again, a second request must be answered: nothing of the
 * failure stays behind in the mesh. */
static void scenario_mesh_request(void) {
  arm();
  durable_mesh_t *mesh = open_mesh("sqlite::memory:");
  if (mesh == NULL) {
    disarm();
    return;
  }
  durable_hub_t *client = client_hub(mesh, "client/f");
  durable_node_type_t *type = durable_node_type_get(mesh, "Echo");
  int ready = client != NULL && type != NULL;
  if (client != NULL && type == NULL)
    note_error(DURABLE_ENOMEM, "durable_node_type_get gave none",
               "durable_node_type_get");
  if (ready) {
    durable_error_t err = {0};
    int rc = durable_node_type_on(type, "echo", echo_handler, NULL, &err);
    if (rc < 0) {
      note_error(rc, err.message, "durable_node_type_on");
      ready = 0;
    }
  }
  outcome_t put = {0}, ask = {0};
  if (ready) {
    OP(&put, "put", 0,
       durable_store_put(durable_mesh_store(mesh), "E/one", "Echo", "{}",
                         on_result, &put, err));
    ready = put.status == 0;
  }
  if (ready) {
    OP(&ask, "request", 0,
       durable_hub_request(client, "E/one", "echo", "[1]", 0, on_response, &ask,
                           err));
    if (ask.status == 0)
      CHECK_EQ_STR(ask.content, "{\"echo\":[1]}");
  }
  disarm();
  if (ready) { /* the mesh recovered */
    outcome_t again = {0};
    durable_error_t err = {0};
    CHECK_OK(durable_hub_request(client, "E/one", "echo", "[2]", WAIT_MS,
                                 on_response, &again, &err));
    wait_for(&again, "request again");
    CHECK_MSG(again.status == 0, "the request after the failure: %s %s",
              durable_err_name(again.status), again.message);
    CHECK_EQ_STR(again.content, "{\"echo\":[2]}");
  }
  arm();
  close_mesh(mesh);
  disarm();
}

/* ---- streams ---------------------------------------------------------------
 */

static const durable_stream_id_t g_stream = {.ns = "Log", .key = "K/s"};
#define ITEMS_NS "K/s/_DurableStream/Log/_DurableStreamItem"
#define STREAM_PATH "K/s/_DurableStream/Log"

static void on_sequence(int status, int64_t seq, const char *message,
                        void *data) {
  outcome_t *o = data;
  o->calls++;
  o->status = status;
  o->value = seq;
  snprintf(o->message, sizeof o->message, "%s", message ? message : "");
}

/* Publish `payload` (with publish id `id`, may be NULL) from `hub`, into
 * `o`; the callback is not waited for. */
static void publish_into(durable_hub_t *hub, const char *payload,
                         const char *id, outcome_t *o) {
  durable_error_t err = {0};
  durable_publish_options_t opts = {.id = id};
  int rc = durable_stream_publish_with(hub, &g_stream, payload, &opts,
                                       on_sequence, o, &err);
  submitted(rc, &err, o);
}

/* Publish with allocation working: the sequence. */
static int64_t publish_plain(durable_hub_t *hub, const char *payload,
                             const char *id) {
  outcome_t o = {0};
  publish_into(hub, payload, id, &o);
  wait_for(&o, "publish");
  CHECK_MSG(o.status == 0, "publish %s: %s", payload, o.message);
  return o.value;
}

/* The items of the stream as stored: payloads[i] of sequence i + 1. */
typedef struct {
  int64_t last_sequence, checkpoint; /* of the stream node; -1: none */
  size_t count;
  char payloads[16][64];
} items_t;

static void on_items(const durable_result_t *res, void *data) {
  items_t *it = data;
  CHECK_MSG(res->status == 0, "reading the items: %s", res->message);
  CHECK_MSG(!res->more, "more items than this test makes");
  for (size_t i = 0; i < res->count; i++) {
    const durable_node_t *n = res->nodes[i];
    /* contiguous from 1: the ids are the sequences, in order */
    char want[16];
    snprintf(want, sizeof want, "%012zu", i + 1);
    CHECK_MSG(strcmp(n->id, want) == 0, "item %zu of the stream is %s: a gap",
              i + 1, n->id);
    CHECK(i < 16);
    /* the payload is kept as a JSON string: unescape it */
    const char *p = strstr(n->content, "\"PayloadJson\":\"");
    CHECK(p != NULL);
    char *out = it->payloads[i];
    size_t k = 0;
    for (p += 15; *p && *p != '"' && k + 1 < sizeof it->payloads[i]; p++)
      out[k++] = *p == '\\' ? *++p : *p;
    out[k] = '\0';
  }
  it->count = res->count;
  it->last_sequence = -2; /* done */
}

static items_t read_items(durable_store_t *store) {
  items_t it = {.last_sequence = -1, .checkpoint = -1};
  durable_error_t err = {0};
  CHECK_OK(durable__store_read_items(store, NULL, ITEMS_NS, 0, 100, on_items,
                                     &it, &err));
  while (it.last_sequence != -2)
    uv_run(&loop, UV_RUN_ONCE);
  it.last_sequence = -1;
  outcome_t node = get_plain(store, STREAM_PATH);
  if (node.status == 0) {
    it.last_sequence = json_int(node.content, "LastSequence");
    it.checkpoint = json_int(node.content, "Checkpoint");
  }
  return it;
}

/* The item whose payload is `payload`: its sequence, or 0; CHECKs that
 * there is at most one. */
static int64_t item_of(const items_t *it, const char *payload) {
  int64_t found = 0;
  for (size_t i = 0; i < it->count; i++)
    if (strcmp(it->payloads[i], payload) == 0) {
      CHECK_MSG(found == 0, "%s was appended twice: items %lld and %zu",
                payload, (long long)found, i + 1);
      found = (int64_t)i + 1;
    }
  return found;
}

/* ---- scenario: publishing --------------------------------------------------
 *
 * open a mesh on a file, publish one item, then two at once, then one with
 * a publish id, close.  Reopened with allocation working, the stream must
 * hold each item reported published at its sequence, none reported failed
 * (unless the message says it may have been appended), no item twice and
 * no gap; LastSequence is the last item.  A publish with an id that failed
 * is retried: it must end with its item there once. */
static void scenario_publish(void) {
  make_dir();
  outcome_t pub[4] = {{0}};
  const char *payloads[4] = {"{\"p\":1}", "{\"p\":2}", "{\"p\":3}",
                             "{\"p\":4}"};
  arm();
  durable_mesh_t *mesh = open_mesh(g_url);
  durable_hub_t *client = mesh ? client_hub(mesh, "client/f") : NULL;
  if (client != NULL) {
    publish_into(client, payloads[0], NULL, &pub[0]);
    wait_for(&pub[0], "publish 1");
    publish_into(client, payloads[1], NULL, &pub[1]);
    publish_into(client, payloads[2], NULL, &pub[2]);
    wait_for(&pub[1], "publish 2");
    wait_for(&pub[2], "publish 3");
    publish_into(client, payloads[3], "id-4", &pub[3]);
    wait_for(&pub[3], "publish 4");
    for (int i = 0; i < 4; i++)
      judge(&pub[i], "publish", 0);
    /* an append as JSON, as a hub that does not speak the typed protocol
     * sends it: parsing it may run out of memory too, which is no bad
     * request */
    outcome_t raw = {0};
    OP(&raw, "an untyped append", 0,
       durable_hub_request(client, STREAM_PATH, "durable.append",
                           "{\"PayloadJson\":\"{\\\"p\\\":5}\"}", 0,
                           on_response, &raw, err));
  }
  if (mesh != NULL)
    close_mesh(mesh);
  disarm();

  /* another process's view */
  durable_store_t *store = open_plain(g_url);
  items_t it = read_items(store);
  close_store(store);
  int64_t last = (int64_t)it.count;
  if (it.last_sequence >= 0)
    CHECK_EQ_INT(it.last_sequence, last);
  else
    CHECK_EQ_INT(last, 0);
  for (int i = 0; i < 4; i++) {
    int64_t at = item_of(&it, payloads[i]);
    if (pub[i].status == 0) {
      CHECK_MSG(at == pub[i].value,
                "publish %d was answered sequence %lld, its item is %lld",
                i + 1, (long long)pub[i].value, (long long)at);
    } else if (at != 0) {
      g_report->unknown++;
      CHECK_MSG(maybe_saved(&pub[i]),
                "publish %d was reported failed (%s) and its item is %lld",
                i + 1, pub[i].message, (long long)at);
    }
  }

  /* the failed publish with an id, retried: its item once */
  if (pub[3].status != 0 && pub[0].calls) {
    mesh = open_mesh(g_url);
    CHECK(mesh != NULL);
    client = client_hub(mesh, "client/f");
    CHECK(client != NULL);
    int64_t seq = publish_plain(client, payloads[3], "id-4");
    close_mesh(mesh);
    store = open_plain(g_url);
    it = read_items(store);
    close_store(store);
    CHECK_EQ_INT(item_of(&it, payloads[3]), seq);
    CHECK_EQ_INT(it.last_sequence, (int64_t)it.count);
  }
  check_remove_dir(g_dir);
}

/* ---- scenario: a consumer draining -----------------------------------------
 *
 * three items are published with allocation working, then a consumer
 * starts (armed) and drains them.  Once allocation works again it must
 * reach the end: every item handled, in order, none skipped, and the
 * checkpoint at the last item -- an item is acknowledged only after its
 * handler finished it. */
static int64_t g_handled[64];
static int g_nhandled;

static void count_handler(durable_hub_t *hub, const durable_item_t *item,
                          durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  CHECK(g_nhandled < 64);
  g_handled[g_nhandled++] = item->sequence;
  char want[32];
  snprintf(want, sizeof want, "{\"p\":%lld}", (long long)item->sequence);
  CHECK_EQ_STR(item->payload, want);
  durable_reply_ok(done, NULL);
}

static int handled_all(void *arg) {
  (void)arg;
  for (int i = 0; i < g_nhandled; i++)
    if (g_handled[i] == 3)
      return 1;
  return 0;
}

static int64_t checkpoint_now(durable_store_t *store) {
  outcome_t node = get_plain(store, STREAM_PATH);
  return node.status == 0 ? json_int(node.content, "Checkpoint") : -1;
}

static void scenario_consumer(void) {
  durable_mesh_t *mesh = open_mesh("sqlite::memory:");
  CHECK(mesh != NULL);
  durable_hub_t *client = client_hub(mesh, "client/f");
  CHECK(client != NULL);
  for (int i = 1; i <= 3; i++) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"p\":%d}", i);
    CHECK_EQ_INT(publish_plain(client, payload, NULL), i);
  }
  g_nhandled = 0;
  durable_consumer_t c = {.ns = "Log", .handler = count_handler};
  durable_error_t err = {0};
  arm();
  durable_hub_t *hub = client_hub(mesh, g_stream.key);
  int rc = hub ? durable_hub_consume(hub, &c, NULL, &err) : DURABLE_ENOMEM;
  if (hub != NULL && rc < 0)
    note_error(rc, err.message, "durable_hub_consume");
  if (rc == 0)
    wait_until(handled_all, NULL); /* (checked below) */
  disarm();
  if (rc < 0) { /* start it with allocation working */
    if (hub == NULL)
      hub = client_hub(mesh, g_stream.key);
    CHECK(hub != NULL);
    CHECK_OK(durable_hub_consume(hub, &c, NULL, &err));
  }
  durable_store_t *store = durable_mesh_store(mesh);
  uint64_t deadline = uv_now(&loop) + WAIT_MS;
  int64_t cp;
  while ((cp = checkpoint_now(store)) < 3 && uv_now(&loop) < deadline)
    check_run_for(&loop, 20);
  CHECK_MSG(cp == 3, "the consumer did not recover: checkpoint %lld, log:\n%s",
            (long long)cp, g_log);
  /* in order, none skipped: each item is the next or a hand-over again */
  int64_t high = 0;
  for (int i = 0; i < g_nhandled; i++) {
    CHECK_MSG(g_handled[i] <= high + 1, "item %lld handed over after %lld",
              (long long)g_handled[i], (long long)high);
    if (g_handled[i] > high)
      high = g_handled[i];
  }
  CHECK_EQ_INT(high, 3);

  /* acknowledged is never handed over again: the stream hub recycled
   * (armed) reads its state back from the store on its next message, a
   * state it had no memory to decode is no empty one (checkpoint 0) */
  int before = g_nhandled;
  arm();
  rc = durable_mesh_recycle(mesh, STREAM_PATH, NULL, NULL, &err);
  if (rc < 0)
    note_error(rc, err.message, "durable_mesh_recycle");
  outcome_t fourth = {0};
  publish_into(client, "{\"p\":4}", "four", &fourth);
  wait_for(&fourth, "publish 4");
  judge(&fourth, "publish 4", 0);
  disarm();
  if (fourth.status < 0) /* saved or not, the id makes it item 4 once */
    CHECK_EQ_INT(publish_plain(client, "{\"p\":4}", "four"), 4);
  deadline = uv_now(&loop) + WAIT_MS;
  while ((cp = checkpoint_now(store)) < 4 && uv_now(&loop) < deadline)
    check_run_for(&loop, 20);
  CHECK_MSG(cp == 4, "item 4 was not consumed: checkpoint %lld, log:\n%s",
            (long long)cp, g_log);
  for (int i = before; i < g_nhandled; i++)
    CHECK_MSG(g_handled[i] == 4, "acknowledged item %lld handed over again",
              (long long)g_handled[i]);
  arm();
  close_mesh(mesh);
  disarm();
}

/* ---- scenario: a plain reader ----------------------------------------------
 *
 * three items are published with allocation working, then a reader reads
 * the stream (armed): it hands over 1, 2, 3 in order, or stops at a
 * failure with a message; nothing twice, nothing skipped. */
typedef struct {
  int64_t seqs[16];
  int n, failed;
  outcome_t failure;
} read_t;

static void on_read(durable_reader_t *reader, int status,
                    const durable_item_t *item, const char *message,
                    void *data) {
  (void)reader;
  read_t *r = data;
  CHECK_MSG(!r->failed, "a reader callback after its failure");
  if (status < 0) {
    r->failed = 1;
    r->failure.calls = 1;
    r->failure.status = status;
    snprintf(r->failure.message, sizeof r->failure.message, "%s",
             message ? message : "");
    return;
  }
  CHECK(r->n < 16);
  r->seqs[r->n++] = item->sequence;
}

static int read_ended(void *arg) {
  read_t *r = arg;
  return r->failed || r->n >= 3;
}

static void scenario_reader(void) {
  durable_mesh_t *mesh = open_mesh("sqlite::memory:");
  CHECK(mesh != NULL);
  durable_hub_t *client = client_hub(mesh, "client/f");
  CHECK(client != NULL);
  for (int i = 1; i <= 3; i++) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"p\":%d}", i);
    CHECK_EQ_INT(publish_plain(client, payload, NULL), i);
  }
  read_t r = {0};
  durable_reader_t *reader = NULL;
  durable_error_t err = {0};
  arm();
  int rc =
      durable_stream_read(mesh, &g_stream, 0, NULL, on_read, &r, &reader, &err);
  if (rc < 0)
    note_error(rc, err.message, "durable_stream_read");
  else
    wait_until(read_ended, &r); /* (checked below) */
  disarm();
  if (rc == 0) {
    /* a reader that neither failed nor finished goes on now */
    CHECK_MSG(check_run_until_fn(&loop, read_ended, &r, WAIT_MS),
              "the reader stopped after %d items without a failure", r.n);
    if (r.failed)
      judge(&r.failure, "reader", 0);
    for (int i = 0; i < r.n; i++)
      CHECK_EQ_INT(r.seqs[i], i + 1);
    arm();
    durable_reader_close(reader);
    disarm();
  }
  /* the stream is intact: a new reader reads it all */
  read_t again = {0};
  CHECK_OK(durable_stream_read(mesh, &g_stream, 0, NULL, on_read, &again,
                               &reader, &err));
  CHECK_MSG(check_run_until_fn(&loop, read_ended, &again, WAIT_MS),
            "a fresh reader read %d items", again.n);
  CHECK(!again.failed);
  durable_reader_close(reader);
  arm();
  close_mesh(mesh);
  disarm();
}

/* ---- the driver ------------------------------------------------------------
 */

typedef struct {
  const char *name;
  void (*run)(void);
} scenario_t;

/* ---- scenario: the streams' statuses ---------------------------------------
 *
 * two streams with three items each, one with a failing consumer's record
 * (written with allocation working), then durable_stream_statuses (armed):
 * it lists both with their lag and the failure, or fails with a message;
 * never a listing that leaves a stream or the failure out. */
typedef struct {
  int streams, failing;
  int64_t lag;
  outcome_t done;
} listing_t;

static void on_status(const durable_stream_status_t *st, void *data) {
  listing_t *l = data;
  l->streams++;
  l->lag += st->lag;
  l->failing += st->attempts > 0;
}

static void on_listed(int status, const char *message, void *data) {
  listing_t *l = data;
  l->done.calls++;
  l->done.status = status;
  snprintf(l->done.message, sizeof l->done.message, "%s",
           message ? message : "");
}

static void on_failure_written(int attempts, void *data) {
  *(int *)data = attempts;
}

static void scenario_statuses(void) {
  durable_mesh_t *mesh = open_mesh("sqlite::memory:");
  CHECK(mesh != NULL);
  durable_hub_t *client = client_hub(mesh, "client/f");
  CHECK(client != NULL);
  durable_stream_id_t other = {.ns = "Log", .key = "K/t"};
  for (int i = 1; i <= 3; i++) {
    outcome_t o = {0};
    durable_error_t err = {0};
    CHECK_OK(
        durable_stream_publish(client, &other, "{}", on_sequence, &o, &err));
    wait_for(&o, "publish");
    CHECK_EQ_INT(publish_plain(client, "{}", NULL), i);
  }
  int attempts = 0;
  durable_error_t err = {0};
  CHECK_OK(durable__failure_record(durable_mesh_store(mesh), STREAM_PATH, 1,
                                   "item 1 is bad", on_failure_written,
                                   &attempts, &err));
  CHECK(check_run_until(&loop, &attempts, WAIT_MS));
  CHECK_EQ_INT(attempts, 1);
  listing_t l = {0};
  arm();
  int rc = durable_stream_statuses(durable_mesh_store(mesh), NULL, NULL,
                                   on_status, on_listed, &l, &err);
  if (submitted(rc, &err, &l.done))
    wait_for(&l.done, "statuses");
  disarm();
  judge(&l.done, "statuses", 0);
  if (l.done.status == 0) {
    CHECK_EQ_INT(l.streams, 2);
    CHECK_EQ_INT(l.lag, 6);
    CHECK_EQ_INT(l.failing, 1);
  }
  arm();
  close_mesh(mesh);
  disarm();
}

static const scenario_t scenarios[] = {
    {"store_memory", scenario_store_memory},
    {"store_file", scenario_store_file},
    {"mesh_request", scenario_mesh_request},
    {"publish", scenario_publish},
    {"consumer", scenario_consumer},
    {"reader", scenario_reader},
    {"statuses", scenario_statuses},
};
#define NSCENARIOS (sizeof scenarios / sizeof scenarios[0])

static void leak_report(void) {
  size_t shown = 0;
  for (size_t i = 0; i < LIVE_SLOTS && shown < 20; i++) {
    if (live[i].p == NULL)
      continue;
    Dl_info info = {0};
    dladdr(live[i].caller, &info);
    fprintf(stderr,
            "  unfreed: %zu bytes at %p, allocated from %s+%#lx "
            "(addr2line -f -e %s %#lx)\n",
            live[i].size, live[i].p, info.dli_fname ? info.dli_fname : "?",
            (unsigned long)((char *)live[i].caller - (char *)info.dli_fbase),
            info.dli_fname ? info.dli_fname : "?",
            (unsigned long)((char *)live[i].caller - (char *)info.dli_fbase));
    shown++;
  }
}

static void on_drain_timer(uv_timer_t *t) {
  (void)t;
}

/* Run the loop until nothing keeps it alive, for at most 2 s: what a failed
 * open let go of is released on the loop, as a close is (a store's threads
 * say they are gone through it). */
static void drain_loop(void) {
  uv_timer_t t;
  uv_timer_init(&loop, &t);
  uv_timer_start(&t, on_drain_timer, 2000, 0);
  uv_unref((uv_handle_t *)&t); /* only a handle of the run keeps it going */
  while (uv_run(&loop, UV_RUN_ONCE) != 0 && uv_is_active((uv_handle_t *)&t))
    ;
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_NOWAIT);
}

/* One run, in this process: the scenario with allocation `fail_at` failing
 * (0: none), then the checks that hold for every run. */
static void run_one(const scenario_t *s, long fail_at, int all_after) {
  A.fail_at = fail_at;
  A.all_after = all_after;
  CHECK_OK(uv_loop_init(&loop));
  s->run();
  disarm();
  drain_loop();
  CHECK_LOOP_CLOSES(&loop);
  g_report->seen = atomic_load(&A.seen);
  g_report->fails = atomic_load(&A.fails);
  CHECK(!live_overflow);
  if (live_count != 0) {
    leak_report();
    CHECK_MSG(live_count == 0, "%zu allocations of the library left unfreed",
              live_count);
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs go njobs at a time: most of a run is waiting (a timeout, a backoff),
 * not computing.  Each child reports in its slot of shared memory and
 * writes its output to its slot's file, which is shown only when the run
 * failed (so that concurrent runs' lines do not mix). */
#define JOBS_MAX 8
typedef struct {
  pid_t pid; /* 0: free */
  long n;
  int all_after;
  double t0;
  FILE *out;
} job_t;

static report_t *g_reports; /* JOBS_MAX of them */
static job_t jobs[JOBS_MAX];
static int njobs = 4; /* DURABLE_FAULT_JOBS */

typedef struct {
  long runs, failed, errors, nomem, unknown, quiet, stuck;
  char sample[256];
} tally_t;

static void start_job(const scenario_t *s, int slot, long n, int all_after) {
  job_t *j = &jobs[slot];
  fflush(stdout);
  fflush(stderr);
  memset(&g_reports[slot], 0, sizeof g_reports[slot]);
  CHECK(ftruncate(fileno(j->out), 0) == 0);
  rewind(j->out);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    g_report = &g_reports[slot];
    dup2(fileno(j->out), 1);
    dup2(fileno(j->out), 2);
    alarm(CHILD_SECONDS);
    run_one(s, n, all_after);
    exit(0); /* LeakSanitizer looks here */
  }
  j->pid = pid;
  j->n = n;
  j->all_after = all_after;
  j->t0 = now_s();
}

/* Wait for one job to end and count it in; its slot. */
static int end_job(const scenario_t *s, tally_t *t) {
  int status = 0;
  pid_t pid = waitpid(-1, &status, 0);
  CHECK(pid > 0);
  int slot = 0;
  while (slot < njobs && jobs[slot].pid != pid)
    slot++;
  CHECK(slot < njobs);
  job_t *j = &jobs[slot];
  const report_t *r = &g_reports[slot];
  j->pid = 0;
  t->runs++;
  if (getenv("DURABLE_FAULT_SLOW") && now_s() - j->t0 > 0.3)
    fprintf(stderr, "# slow: %s %ld%s: %.2f s: %s\n", s->name, j->n,
            j->all_after ? " all" : "", now_s() - j->t0, r->last_error);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    t->failed++;
    fflush(j->out);
    rewind(j->out);
    char line[1024];
    while (fgets(line, sizeof line, j->out))
      fputs(line, stderr);
    fprintf(stderr,
            "FAIL %s: allocation %ld failing%s: %s %d (again by hand: "
            "alloc_fault_test %s %ld%s)\n",
            s->name, j->n, j->all_after ? " and every one after it" : "",
            WIFSIGNALED(status) ? "killed by signal" : "exit code",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
            s->name, j->n, j->all_after ? " all" : "");
    return slot;
  }
  t->errors += r->errors > 0;
  t->nomem += r->nomem > 0;
  t->unknown += r->unknown;
  t->stuck += r->stuck > 0;
  t->quiet += r->fails > 0 && r->errors == 0;
  if (r->last_error[0] && t->sample[0] == '\0')
    snprintf(t->sample, sizeof t->sample, "%s", r->last_error);
  return slot;
}

static int free_slot(const scenario_t *s, tally_t *t) {
  for (int i = 0; i < njobs; i++)
    if (jobs[i].pid == 0)
      return i;
  return end_job(s, t);
}

/* Every N of `s` (sampled): 0 when every run passed. */
static int run_scenario(const scenario_t *s, size_t index, int every) {
  double t0 = now_s();
  tally_t t = {0};
  /* the count: a run without failures, alone */
  start_job(s, 0, 0, 0);
  end_job(s, &t);
  if (t.failed) {
    fprintf(stderr, "FAIL %s: the run without failures failed\n", s->name);
    return 1;
  }
  long count = g_reports[0].seen;
  CHECK_MSG(count > 0,
            "%s: no allocation was counted: is the test linked "
            "with --wrap?",
            s->name);
  t = (tally_t){0};
  for (long n = 1; n <= count && t.failed < 3; n++) {
    int once = every || n <= FULL_UPTO || (n + (long)index) % STRIDE == 0;
    int all = every || (n + (long)index) % ALL_STRIDE == 0;
    if (once)
      start_job(s, free_slot(s, &t), n, 0);
    if (all)
      start_job(s, free_slot(s, &t), n, 1);
  }
  for (int i = 0; i < njobs; i++)
    while (jobs[i].pid != 0) /* (another slot's may end first) */
      end_job(s, &t);
  printf("%s %s: %ld allocations, %ld runs in %.1f s: %ld reported an error "
         "(%ld ENOMEM), %ld absorbed the failure, %ld maybe saved, %ld "
         "went on once memory was back\n",
         t.failed ? "not ok" : "ok", s->name, count, t.runs, now_s() - t0,
         t.errors, t.nomem, t.quiet, t.unknown, t.stuck);
  if (t.sample[0])
    printf("#   e.g. %s\n", t.sample);
  fflush(stdout);
  /* the faults must reach the library, or this test tests nothing */
  if (!t.failed && t.errors == 0) {
    fprintf(stderr, "FAIL %s: no run reported an error\n", s->name);
    return 1;
  }
  return t.failed > 0;
}

int main(int argc, char **argv) {
  json_set_alloc_funcs(json_fault_malloc, json_fault_free);
  g_verbose = getenv("DURABLE_FAULT_VERBOSE") != NULL;
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_reports = mmap(NULL, JOBS_MAX * sizeof *g_reports, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(g_reports != MAP_FAILED);
  g_report = &g_reports[0];
  const char *jobs_env = getenv("DURABLE_FAULT_JOBS");
  if (jobs_env && atoi(jobs_env) >= 1)
    njobs = atoi(jobs_env) < JOBS_MAX ? atoi(jobs_env) : JOBS_MAX;
  for (int i = 0; i < njobs; i++)
    CHECK((jobs[i].out = tmpfile()) != NULL);
  const char *only = argc > 1 ? argv[1] : NULL;
  if (argc > 2) { /* one run, here */
    for (size_t i = 0; i < NSCENARIOS; i++)
      if (strcmp(scenarios[i].name, only) == 0) {
        run_one(&scenarios[i], atol(argv[2]),
                argc > 3 && strcmp(argv[3], "all") == 0);
        printf("ok - %s %s%s: %ld allocations, %ld failed, %ld errors: %s\n",
               only, argv[2], argc > 3 ? " all" : "", g_report->seen,
               g_report->fails, g_report->errors, g_report->last_error);
        return 0;
      }
    fprintf(stderr, "no scenario named '%s'\n", only);
    return 1;
  }
  const char *all = getenv("DURABLE_FAULT_ALL");
  int every = all != NULL && strcmp(all, "1") == 0;
  int failed = 0, ran = 0;
  for (size_t i = 0; i < NSCENARIOS; i++) {
    if (only && strcmp(only, scenarios[i].name) != 0)
      continue;
    ran++;
    failed += run_scenario(&scenarios[i], i, every);
  }
  if (ran == 0) {
    fprintf(stderr, "no scenario named '%s'\n", only);
    return 1;
  }
  return failed ? 1 : 0;
}

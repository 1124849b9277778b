/*
 * fixture.c: what cases of several store contract files share; contract.h
 * says what each part is for.  The synchronous forms of the store calls
 * submit, run the case's loop until the callback ran, and keep a deep copy
 * of the result in a res_t, so that a case reads as a sequence of calls and
 * checks.
 */
#include "contract.h"

#include <stdarg.h>
#include <time.h>

const char *g_case_file; /* the case file and line that called the helper */
int g_case_line;         /* now running (see g_line in contract.h) */
static char g_context[256];
const char *contract_check_context(void) {
  if (g_case_file == NULL)
    return ""; /* no helper ran yet */
  const char *slash = strrchr(g_case_file, '/');
  snprintf(g_context, sizeof(g_context), " (from %s:%d)",
           slash ? slash + 1 : g_case_file, g_case_line);
  return g_context;
}

/* ---- the case's loop and store ----------------------------------------- */

contract_state_t T;

int g_stray_calls;

int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

const char *P(const char *fmt, ...) {
  static char ring[16][1200];
  static int next;
  char *buf = ring[next++ % 16];
  int n = snprintf(buf, sizeof(ring[0]), "%s/", T.ns);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, sizeof(ring[0]) - (size_t)n, fmt, ap);
  va_end(ap);
  return buf;
}

durable_store_t *open_store(uv_loop_t *loop) {
  durable_store_t *store = NULL;
  durable_error_t err;
  memset(&err, 0, sizeof(err));
  int rc = durable_store_open(loop, g_url, &store, &err);
  CHECK_MSG(rc == 0, "durable_store_open(%s): %s: %s", g_url,
            durable_err_name(rc), err.message);
  CHECK(store != NULL);
  return store;
}

void closed_cb(void *data) {
  ++*(int *)data;
}

void close_store(durable_store_t *store) {
  int closed = 0;
  durable_store_close(store, closed_cb, &closed);
  CHECK_MSG(check_run_until(&T.loop, &closed, WAIT_MS),
            "durable_store_close: callback did not run");
  CHECK_EQ_INT(closed, 1);
}

void case_begin(const char *name) {
  CHECK_OK(uv_loop_init(&T.loop));
  snprintf(T.ns, sizeof(T.ns), "%s/%s", g_run, name);
  T.store = open_store(&T.loop);
}

void case_end(void) {
  close_store(T.store);
  T.store = NULL;
  CHECK_EQ_INT(g_stray_calls, 0);
  CHECK_LOOP_CLOSES(&T.loop);
}

/* ---- results ------------------------------------------------------------ */

void res_reset(res_t *r) {
  durable_node_free(r->node);
  for (size_t i = 0; i < r->count; i++)
    durable_node_free(r->nodes[i]);
  free(r->nodes);
  memset(r, 0, sizeof(*r));
}

void res_cb(const durable_result_t *result, void *data) {
  res_t *r = data;
  CHECK(r != NULL);
  CHECK_EQ_INT(r->calls, 0); /* exactly once */
  r->status = result->status;
  if (result->status < 0)
    CHECK_MSG(result->message != NULL && result->message[0] != '\0',
              "status %s without a message", durable_err_name(result->status));
  if (result->message != NULL)
    snprintf(r->message, sizeof(r->message), "%s", result->message);
  r->node = result->node ? durable_node_dup(result->node) : NULL;
  CHECK(result->node == NULL || r->node != NULL);
  if (result->count > 0 && result->grants == NULL) {
    CHECK(result->nodes != NULL);
    r->nodes = calloc(result->count, sizeof(*r->nodes));
    CHECK(r->nodes != NULL);
    for (size_t i = 0; i < result->count; i++) {
      CHECK(result->nodes[i] != NULL);
      r->nodes[i] = durable_node_dup(result->nodes[i]);
    }
  }
  r->count = result->count;
  r->more = result->more;
  r->value = result->value;
  for (size_t i = 0; result->grants && i < result->count; i++) {
    size_t n = strlen(r->grants);
    snprintf(r->grants + n, sizeof(r->grants) - n, "%s %s %s;",
             result->grants[i].principal, result->grants[i].prefix,
             durable_grant_mode_name(result->grants[i].modes));
  }
  if (result->grants)
    r->count = 0; /* no nodes */
  r->calls = 1;
}

void res_wait(res_t *r) {
  CHECK_MSG(check_run_until(&T.loop, &r->calls, WAIT_MS),
            "callback did not run within %d ms", WAIT_MS);
}

void submitted(int rc, const durable_error_t *e, const char *what,
               const char *arg) {
  CHECK_MSG(rc == 0, "%s(%s) refused: %s: %s", what, arg ? arg : "(null)",
            durable_err_name(rc), e->message);
}

int get_(res_t *r, const char *principal, const char *path) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_get(T.store, principal, path, res_cb, r, &e), &e,
            "get", path);
  res_wait(r);
  return r->status;
}

int write_(res_t *r, const char *principal, const durable_write_t *w,
           size_t n) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(principal ? durable_store_write_as(T.store, principal, w, n, res_cb,
                                               r, &e)
                      : durable_store_write(T.store, w, n, res_cb, r, &e),
            &e, "write", n ? w[0].path : "");
  res_wait(r);
  return r->status;
}

int put_(res_t *r, const char *path, const char *type, const char *content) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_put(T.store, path, type, content, res_cb, r, &e), &e,
            "put", path);
  res_wait(r);
  return r->status;
}

int create_(res_t *r, const char *path, const char *type, const char *content) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_create(T.store, path, type, content, res_cb, r, &e),
            &e, "create", path);
  res_wait(r);
  return r->status;
}

int delete_(res_t *r, const char *path) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_delete(T.store, path, res_cb, r, &e), &e, "delete",
            path);
  res_wait(r);
  return r->status;
}

int update_(res_t *r, const char *path, durable_mutate_cb fn, void *arg) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_update(T.store, path, fn, arg, res_cb, r, &e), &e,
            "update", path);
  res_wait(r);
  return r->status;
}

int query_(res_t *r, const char *principal, const char *query,
           const char *after, size_t limit) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_query(T.store, principal, query, after, limit, res_cb,
                                r, &e),
            &e, "query", query);
  res_wait(r);
  return r->status;
}

int exists_(res_t *r, const char *principal, const char *path) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_exists(T.store, principal, path, res_cb, r, &e), &e,
            "exists", path);
  res_wait(r);
  return r->status;
}

int read_items_(res_t *r, const char *principal, const char *ns, int64_t after,
                size_t limit) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable__store_read_items(T.store, principal, ns, after, limit,
                                      res_cb, r, &e),
            &e, "read_items", ns);
  res_wait(r);
  return r->status;
}

int last_item_(res_t *r, const char *principal, const char *ns) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable__store_last_item(T.store, principal, ns, res_cb, r, &e), &e,
            "last_item", ns);
  res_wait(r);
  return r->status;
}

int grant_(res_t *r, int revoke, const char *principal, const char *prefix,
           int modes) {
  durable_error_t e = {0};
  res_reset(r);
  int rc = revoke ? durable_store_revoke(T.store, principal, prefix, modes,
                                         res_cb, r, &e)
                  : durable_store_grant(T.store, principal, prefix, modes,
                                        res_cb, r, &e);
  submitted(rc, &e, revoke ? "revoke" : "grant", prefix);
  res_wait(r);
  return r->status;
}

int grants_(res_t *r, const char *principal) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable_store_grants(T.store, principal, res_cb, r, &e), &e,
            "grants", principal);
  res_wait(r);
  return r->status;
}

int access_(res_t *r, const char *principal, const char *path, int modes) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(
      durable__store_access(T.store, principal, path, modes, res_cb, r, &e), &e,
      "access", path);
  res_wait(r);
  return r->status;
}

int alive_(res_t *r, durable_store_t *store, const char *instance) {
  durable_error_t e = {0};
  res_reset(r);
  submitted(durable__store_alive(store, instance, res_cb, r, &e), &e, "alive",
            instance);
  res_wait(r);
  return r->status;
}

void stray_cb(const durable_result_t *result, void *data) {
  (void)result;
  (void)data;
  g_stray_calls++;
}

void refused_(int rc, const durable_error_t *e, int want, const char *what) {
  CHECK_MSG(rc == want, "%s: want %s, got %s (%s)", what,
            durable_err_name(want), durable_err_name(rc), e->message);
  CHECK_EQ_CODE(e->code, want);
  CHECK_MSG(e->message[0] != '\0', "%s: refused without a message", what);
  for (int i = 0; i < 3; i++)
    uv_run(&T.loop, UV_RUN_NOWAIT);
  CHECK_EQ_INT(g_stray_calls, 0);
}

/* ---- node checks -------------------------------------------------------- */

void check_node_(const durable_node_t *n, const char *path, const char *type,
                 const char *content) {
  CHECK(n != NULL);
  CHECK_EQ_STR(n->path, path);
  const char *slash = strrchr(path, '/');
  if (slash == NULL) {
    CHECK_EQ_STR(n->ns, "");
    CHECK_EQ_STR(n->id, path);
  } else {
    char ns[1200];
    snprintf(ns, sizeof(ns), "%.*s", (int)(slash - path), path);
    CHECK_EQ_STR(n->ns, ns);
    CHECK_EQ_STR(n->id, slash + 1);
  }
  char owner[1200];
  CHECK_GE_INT(durable_path_owner(path, owner, sizeof(owner)), 1);
  CHECK_EQ_STR(n->main_node, owner);
  if (type != NULL)
    CHECK_EQ_STR(n->node_type, type);
  if (content != NULL)
    CHECK_EQ_STR(n->content, content);
  CHECK_GT_INT(n->version, 0);
  CHECK_LE_INT(n->created_at, n->updated_at);
  CHECK_GE_INT(n->created_at, g_case_start_ms - 60000);
  CHECK_LE_INT(n->updated_at, now_ms() + 60000);
}

/* ---- the C mutator ---- */

char *dupstr(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d)
    memcpy(d, s, n);
  return d;
}

int mutate(const durable_node_t *current, char **content, char **node_type,
           void *arg) {
  int mode = *(int *)arg;
  switch (mode) {
  case MUT_NOTHING:
    return 0;
  case MUT_FAIL:
    return DURABLE_EFAILED;
  case MUT_BAD_JSON:
    *content = dupstr("{\"n\":");
    return 1;
  default:
    break;
  }
  int n = 0;
  if (current != NULL && sscanf(current->content, "{\"n\":%d}", &n) != 1)
    return DURABLE_EINVAL;
  char buf[64];
  snprintf(buf, sizeof(buf), "{\"n\":%d}", n + 1);
  *content = dupstr(buf);
  if (mode == MUT_SET_TYPE)
    *node_type = dupstr("Counter");
  if (mode == MUT_BAD_TYPE)
    *node_type = dupstr("Coun\nter");
  return 1;
}

/* ---- ids and stream items ---- */

void check_ids(const res_t *r, const char *const *ids, size_t n) {
  CHECK_EQ_INT(r->count, n);
  for (size_t i = 0; i < n; i++)
    CHECK_EQ_STR(r->nodes[i]->id, ids[i]);
}

const char *item_path(const char *items_ns, int64_t seq) {
  static char buf[4][1300];
  static int next;
  char *b = buf[next++ % 4];
  snprintf(b, sizeof(buf[0]), "%s/%012lld", items_ns, (long long)seq);
  return b;
}

void check_items(const res_t *r, int64_t after, size_t count) {
  CHECK_EQ_INT(r->count, count);
  for (size_t i = 0; i < count; i++) {
    char id[16], content[32];
    snprintf(id, sizeof(id), "%012lld", (long long)(after + 1 + (int64_t)i));
    snprintf(content, sizeof(content), "{\"seq\":%lld}",
             (long long)(after + 1 + (int64_t)i));
    CHECK_EQ_STR(r->nodes[i]->id, id);
    CHECK_EQ_STR(r->nodes[i]->content, content);
  }
}

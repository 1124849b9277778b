/*
 * lifecycle.c: the store contract on a store's life: open and close (a URL
 * no store understands is refused at open), a close with writes queued
 * flushes them, and the liveness lock every open store holds (alive: what
 * any store can ask of an instance; fence: how long a lock that can be lost
 * while the process runs is trusted).  Leases are only as safe as these.
 */
#include "contract.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static void case_open_close(void) {
  case_begin("open_close");
  const char *name = durable_store_name(T.store);
  CHECK(name != NULL);
  if (strncmp(g_url, "sqlite:", 7) == 0)
    CHECK_EQ_STR(name, g_url);
  case_end();

  /* A URL no store understands: refused at open, naming the store, and
   * nothing left on the loop. */
  uv_loop_t loop;
  CHECK_OK(uv_loop_init(&loop));
  durable_store_t *store = NULL;
  durable_error_t err;
  memset(&err, 0, sizeof(err));
  int rc = durable_store_open(&loop, "nosuchstore:x", &store, &err);
  CHECK_LT_INT(rc, 0);
  CHECK_EQ_CODE(err.code, rc);
  CHECK_CONTAINS(err.message, "nosuchstore:x");

  /* PostgreSQL: every connection goes to a server that takes writes, so a
   * session that would be read-only (a standby, a demoted primary; here a
   * setting) is refused at open, saying so, rather than failing its first
   * write. */
  if (strncmp(g_url, "postgres", 8) == 0) {
    char url[1024];
    snprintf(url, sizeof url,
             "%s%soptions=-c%%20default_transaction_read_only%%3Don", g_url,
             strchr(g_url, '?') ? "&" : "?");
    memset(&err, 0, sizeof(err));
    rc = durable_store_open(&loop, url, &store, &err);
    CHECK_EQ_CODE(rc, DURABLE_EUNAVAIL);
    CHECK_CONTAINS(err.message, "session is read-only");
  }
  CHECK_LOOP_CLOSES(&loop);
}

/* Liveness.  Every open store holds a lock that the database lets go when
 * the store closes or its process dies, however it dies; any store can ask
 * whether an instance still holds it.  A lease is only as safe as this. */
static void wait_gone(res_t *r, const char *instance) {
  /* a server ends a session just after its client went: ask until then */
  for (int i = 0; i < 100; i++) {
    CHECK_OK(ALIVE(r, T.store, instance));
    if (r->value == 0)
      return;
    sleep_ms(50);
  }
  CHECK_MSG(0, "%s still looks alive 5 s after it went", instance);
}

/* ---- fencing (durable__store_live) ----
 * A liveness lock that can be lost while the process runs (PostgreSQL's,
 * with its session) is trusted for fence_ms after its session last
 * answered; one the process's end alone can drop (SQLite's) always. */
static void case_fence(void) {
  case_begin("fence");
  uint32_t fence = durable__store_fence_ms(T.store);
  if (strncmp(g_url, "sqlite", 6) == 0) {
    CHECK_EQ_INT((int)fence, 0);
    CHECK_EQ_INT(durable__store_live(T.store), 1);
    case_end();
    return;
  }
  CHECK_EQ_INT((int)fence, 2000);
  CHECK_EQ_INT(durable__store_live(T.store), 1); /* the lock's own answer */
  /* the loop does not run: no answer can come, and the trust runs out */
  usleep((useconds_t)(fence + 300) * 1000u);
  CHECK_EQ_INT(durable__store_live(T.store), 0);
  /* that asked the session; its answer, one round trip away, restores it */
  int live = 0;
  for (int i = 0; i < 200 && !live; i++) {
    uv_run(&T.loop, UV_RUN_NOWAIT);
    live = durable__store_live(T.store);
    if (!live)
      usleep(5000);
  }
  CHECK_MSG(live, "the session's answer did not restore the liveness");
  case_end();
}

static void case_alive(void) {
  /* a process that opens the store and is then killed with SIGKILL */
  int fds[2] = {-1, -1};
  pid_t child = -1;
  if (!g_memory) {
    CHECK_OK(pipe(fds));
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed case */
      uv_loop_t loop;
      uv_loop_init(&loop);
      durable_store_t *store = open_store(&loop);
      const char *mine = durable_store_instance(store);
      if (write(fds[1], mine, strlen(mine) + 1) < 0)
        _exit(1);
      for (;;)
        pause();
    }
    close(fds[1]);
  }
  case_begin("alive");
  res_t r = {0};
  const char *mine = durable_store_instance(T.store);
  char pid[32];
  snprintf(pid, sizeof pid, ":%d:", (int)getpid());
  CHECK_CONTAINS(mine, pid);
  CHECK_LT_INT((int)strlen(mine), DURABLE_INSTANCE_MAX);
  CHECK_OK(ALIVE(&r, T.store, mine));
  CHECK_EQ_INT((int)r.value, 1);
  CHECK_OK(ALIVE(&r, T.store, "nowhere:1:0123456789abcdef"));
  CHECK_EQ_INT((int)r.value, 0);
  durable_error_t e = {0};
  CHECK_EQ_CODE(
      durable__store_alive(T.store, "not an instance", stray_cb, NULL, &e),
      DURABLE_EINVAL);
  CHECK_CONTAINS(e.message, "not an instance");

  if (!g_memory) {
    /* another store on the same database, in this process */
    durable_store_t *other = open_store(&T.loop);
    char theirs[DURABLE_INSTANCE_MAX];
    snprintf(theirs, sizeof theirs, "%s", durable_store_instance(other));
    CHECK(strcmp(theirs, mine) != 0);
    CHECK_OK(ALIVE(&r, T.store, theirs));
    CHECK_EQ_INT((int)r.value, 1);
    CHECK_OK(ALIVE(&r, other, mine));
    CHECK_EQ_INT((int)r.value, 1);
    close_store(other);
    wait_gone(&r, theirs);
    CHECK_OK(ALIVE(&r, T.store, mine)); /* closing one left the other's */
    CHECK_EQ_INT((int)r.value, 1);

    /* the killed process */
    char killed[DURABLE_INSTANCE_MAX] = "";
    size_t got = 0;
    ssize_t n;
    while (got < sizeof killed - 1 &&
           (n = read(fds[0], killed + got, sizeof killed - 1 - got)) > 0)
      if (memchr(killed + got, '\0', (size_t)n) != NULL)
        break;
      else
        got += (size_t)n;
    close(fds[0]);
    CHECK_MSG(killed[0] != '\0', "the child did not open the store");
    CHECK_OK(ALIVE(&r, T.store, killed));
    CHECK_EQ_INT((int)r.value, 1);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    wait_gone(&r, killed);
  }
  res_reset(&r);
  case_end();
}

/* Close with writes queued: every callback runs, and (for a store that
 * outlives the process) the writes are there when opened again. */
static void case_close_flushes(void) {
  enum { N = 20 };
  case_begin("close_flushes");
  static res_t rs[N];
  for (int i = 0; i < N; i++) {
    durable_error_t e = {0};
    const char *p = P("q/n%02d", i);
    submitted(durable_store_put(T.store, p, "Q", "{}", res_cb, &rs[i], &e), &e,
              "put", p);
  }
  int closed = 0;
  durable_store_close(T.store, closed_cb, &closed);
  T.store = NULL;
  g_line = __LINE__;
  CHECK_MSG(check_run_until(&T.loop, &closed, WAIT_MS), "close did not finish");
  for (int i = 0; i < N; i++) {
    CHECK_EQ_INT(rs[i].calls, 1);
    CHECK_OK(rs[i].status);
    res_reset(&rs[i]);
  }
  CHECK_LOOP_CLOSES(&T.loop);
  if (g_memory)
    return;

  CHECK_OK(uv_loop_init(&T.loop));
  T.store = open_store(&T.loop);
  res_t r = {0};
  char q[400];
  snprintf(q, sizeof(q), "namespace:%s", P("q"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 100));
  CHECK_EQ_INT(r.count, N);
  res_reset(&r);
  case_end();
}

static void no_change(durable_watch_t *w, durable_change_kind_t kind,
                      const durable_node_t *node, void *data) {
  (void)w, (void)kind, (void)node, (void)data;
  g_stray_calls++;
}

/* A store opened for reading reads what the store wrote, and refuses every
 * write, grant and watch, naming itself; it writes nothing, not even a
 * new file. */
static void case_open_read(void) {
  case_begin("open_read");
  res_t r = {0};
  CHECK_OK(PUT(&r, P("doc"), "Doc", "{\"a\":1}"));
  res_reset(&r);
  durable_store_t *rs = NULL;
  durable_error_t err = {0};
  int rc = durable_store_open_read(&T.loop, g_url, &rs, &err);
  if (g_memory) { /* a memory database of its own: no schema there */
    CHECK_EQ_CODE(rc, DURABLE_ENOTFOUND);
    CHECK(rs == NULL);
    case_end();
    return;
  }
  CHECK_OK(rc);
  durable_store_t *writer = T.store;
  T.store = rs; /* the synchronous helpers use T.store */
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_NODE(r.node, P("doc"), "Doc", "{\"a\":1}");
  res_reset(&r);
  char q[400];
  snprintf(q, sizeof q, "namespace:%s", T.ns);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 10));
  CHECK_EQ_INT(r.count, 1);
  res_reset(&r);
  T.store = writer;
  memset(&err, 0, sizeof err);
  rc = durable_store_put(rs, P("doc2"), "Doc", "{}", stray_cb, NULL, &err);
  CHECK_EQ_CODE(rc, DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "opened for reading only");
  REFUSED(EINVAL,
          durable_store_grant(rs, "alice", T.ns, 1, stray_cb, NULL, &e));
  durable_watch_t *w = NULL;
  REFUSED(EINVAL, durable_store_watch(rs, T.ns, 0, no_change, NULL, &w, &e));
  CHECK(w == NULL);
  REFUSED(EINVAL, durable__store_alive(rs, durable_store_instance(writer),
                                       stray_cb, NULL, &e));
  close_store(rs);
  CHECK_EQ_INT(EXISTS(&r, NULL, P("doc2")), 0);
  CHECK_EQ_INT(r.value, 0); /* the refused put wrote nothing */
  res_reset(&r);

  if (g_sqlite_file[0]) { /* no file: not made, refused naming it */
    char url[600], file[560];
    snprintf(file, sizeof file, "%s.none", g_sqlite_file);
    snprintf(url, sizeof url, "sqlite:%s", file);
    memset(&err, 0, sizeof err);
    rc = durable_store_open_read(&T.loop, url, &rs, &err);
    CHECK_EQ_CODE(rc, DURABLE_ENOTFOUND);
    CHECK_CONTAINS(err.message, file);
    CHECK(access(file, F_OK) != 0);
  }
  case_end();
}

static const contract_case_t cases[] = {
    {"open_close", case_open_close},
    {"open_read", case_open_read},
    {"close_flushes", case_close_flushes},
    {"alive", case_alive},
    {"fence", case_fence},
};
const contract_table_t contract_lifecycle = {cases,
                                             sizeof cases / sizeof cases[0]};

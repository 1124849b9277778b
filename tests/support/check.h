/*
 * check.h: typed asserts, a bounded loop runner and a process-per-test
 * runner for the C tests.
 *
 * In the spirit of libuv's test/task.h: each CHECK_* evaluates its operands
 * once, and on failure prints the expression, both values, file and line on
 * stderr, then abort()s the test (its process: check_main and the store
 * contract's runner run each test in a child of its own).  Values are printed,
 * not only expressions, because a failure seen in a CI log is all one gets.
 *
 * Include <durable.h> first to have CHECK_OK / CHECK_EQ_CODE print the
 * DURABLE_E* name next to the number.
 *
 * check_run_until() runs a loop until a flag is set or a deadline passes,
 * using a private timer that it closes (and whose close it completes) before
 * returning, so it leaves nothing on the loop.
 *
 * check_remove_dir() removes a test's temporary folder and the files in it.
 *
 * check_main() runs a unit's table of named tests, printing "ok N - name"
 * or "not ok N - name (...)" for each.  Run with no argument, it runs every
 * test in a process of its own (check_fork_run, which the store contract's
 * runner uses too), so that the first abort hides none of the others; run
 * with a test's name, it runs that one in its own process, unforked, so that
 * a debugger follows it (ctest runs each test so, see tests/CMakeLists.txt).
 */
#ifndef DURABLE_TEST_CHECK_H
#define DURABLE_TEST_CHECK_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#if defined(__GNUC__)
#define CHECK__UNUSED __attribute__((unused))
#else
#define CHECK__UNUSED
#endif

/* A test may define CHECK_CONTEXT() before including this file: an
 * expression giving a string (e.g. "called from line 42") printed with every
 * failure, for checks made inside helpers. */
#ifdef CHECK_CONTEXT
#define CHECK__PRINT_CONTEXT() fprintf(stderr, "%s", CHECK_CONTEXT())
#else
#define CHECK__PRINT_CONTEXT() ((void)0)
#endif

#define CHECK__FAIL(...)                                                       \
  do {                                                                         \
    fflush(stdout);                                                            \
    fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);              \
    fprintf(stderr, __VA_ARGS__);                                              \
    CHECK__PRINT_CONTEXT();                                                    \
    fprintf(stderr, "\n");                                                     \
    fflush(stderr);                                                            \
    abort();                                                                   \
  } while (0)

#define CHECK(expr)                                                            \
  do {                                                                         \
    if (!(expr))                                                               \
      CHECK__FAIL("%s", #expr);                                                \
  } while (0)

#define CHECK_MSG(expr, ...)                                                   \
  do {                                                                         \
    if (!(expr)) {                                                             \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      CHECK__FAIL("%s", #expr);                                                \
    }                                                                          \
  } while (0)

#define CHECK__CMP_INT(a, op, b)                                               \
  do {                                                                         \
    long long check_a_ = (long long)(a);                                       \
    long long check_b_ = (long long)(b);                                       \
    if (!(check_a_ op check_b_))                                               \
      CHECK__FAIL("%s %s %s (%lld %s %lld)", #a, #op, #b, check_a_, #op,       \
                  check_b_);                                                   \
  } while (0)

#define CHECK_EQ_INT(a, b) CHECK__CMP_INT(a, ==, b)
#define CHECK_NE_INT(a, b) CHECK__CMP_INT(a, !=, b)
#define CHECK_LT_INT(a, b) CHECK__CMP_INT(a, <, b)
#define CHECK_LE_INT(a, b) CHECK__CMP_INT(a, <=, b)
#define CHECK_GT_INT(a, b) CHECK__CMP_INT(a, >, b)
#define CHECK_GE_INT(a, b) CHECK__CMP_INT(a, >=, b)

/* NULL is printed as (null) and compares equal only to NULL. */
#define CHECK_EQ_STR(a, b)                                                     \
  do {                                                                         \
    const char *check_a_ = (a);                                                \
    const char *check_b_ = (b);                                                \
    if (!((check_a_ == NULL && check_b_ == NULL) ||                            \
          (check_a_ != NULL && check_b_ != NULL &&                             \
           strcmp(check_a_, check_b_) == 0)))                                  \
      CHECK__FAIL("%s == %s (\"%s\" vs \"%s\")", #a, #b,                       \
                  check_a_ ? check_a_ : "(null)",                              \
                  check_b_ ? check_b_ : "(null)");                             \
  } while (0)

/* `hay` contains `needle`. */
#define CHECK_CONTAINS(hay, needle)                                            \
  do {                                                                         \
    const char *check_h_ = (hay);                                              \
    const char *check_n_ = (needle);                                           \
    if (check_h_ == NULL || strstr(check_h_, check_n_) == NULL)                \
      CHECK__FAIL("%s contains %s (\"%s\" lacks \"%s\")", #hay, #needle,       \
                  check_h_ ? check_h_ : "(null)", check_n_);                   \
  } while (0)

#ifdef DURABLE_H
#define CHECK__CODE_NAME(c) durable_err_name((int)(c))
#else
#define CHECK__CODE_NAME(c) ((c) == 0 ? "OK" : "error")
#endif

/* Two status codes: printed with their names ("ENOTFOUND (-2)"). */
#define CHECK_EQ_CODE(a, b)                                                    \
  do {                                                                         \
    long long check_a_ = (long long)(a);                                       \
    long long check_b_ = (long long)(b);                                       \
    if (check_a_ != check_b_)                                                  \
      CHECK__FAIL("%s == %s (%s (%lld) vs %s (%lld))", #a, #b,                 \
                  CHECK__CODE_NAME(check_a_), check_a_,                        \
                  CHECK__CODE_NAME(check_b_), check_b_);                       \
  } while (0)

/* `expr` returns 0; anything else is printed with its name. */
#define CHECK_OK(expr) CHECK_EQ_CODE(expr, 0)

/* ---- running a loop until something happened --------------------------- */

typedef struct {
  uv_timer_t timer;
  int expired;
  int closed;
} check__deadline_t;

static CHECK__UNUSED void check__deadline_cb(uv_timer_t *timer) {
  ((check__deadline_t *)timer->data)->expired = 1;
  /* A deadline already past when uv_run(UV_RUN_ONCE) starts fires in its
   * first timer phase, and the poll after it would then block with no
   * timer left (a slow, sanitized or loaded run hung so): stopping the
   * loop makes that poll return at once. */
  uv_stop(timer->loop);
}

static CHECK__UNUSED void check__deadline_closed_cb(uv_handle_t *handle) {
  ((check__deadline_t *)handle->data)->closed = 1;
}

/* Run `loop` until pred(arg) is true or `timeout_ms` passed.  Returns 1
 * when the predicate held, 0 on timeout.  Leaves no handle of its own. */
static CHECK__UNUSED int check_run_until_fn(uv_loop_t *loop,
                                            int (*pred)(void *arg), void *arg,
                                            uint64_t timeout_ms) {
  check__deadline_t d;
  d.expired = 0;
  d.closed = 0;
  if (uv_timer_init(loop, &d.timer) != 0)
    abort();
  d.timer.data = &d;
  if (uv_timer_start(&d.timer, check__deadline_cb, timeout_ms, 0) != 0)
    abort();
  /* The timer is active, so UV_RUN_ONCE blocks until some event: either the
   * work we wait for, or the deadline. */
  while (!pred(arg) && !d.expired)
    uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&d.timer, check__deadline_closed_cb);
  /* Complete the timer's close so that `d` can leave the stack. */
  while (!d.closed)
    uv_run(loop, UV_RUN_NOWAIT);
  return pred(arg);
}

static CHECK__UNUSED int check__flag_set(void *arg) {
  return *(const volatile int *)arg != 0;
}

/* Run `loop` until *flag != 0 or `timeout_ms` passed.  Returns 1 when the
 * flag was set, 0 on timeout. */
static CHECK__UNUSED int check_run_until(uv_loop_t *loop,
                                         const volatile int *flag,
                                         uint64_t timeout_ms) {
  return check_run_until_fn(loop, check__flag_set, (void *)(uintptr_t)flag,
                            timeout_ms);
}

/* Run `loop` for about `ms` milliseconds whatever happens (to let stray
 * callbacks show themselves). */
static CHECK__UNUSED void check_run_for(uv_loop_t *loop, uint64_t ms) {
  static const volatile int never = 0;
  (void)check_run_until(loop, &never, ms);
}

static CHECK__UNUSED void check__walk_cb(uv_handle_t *handle, void *arg) {
  (void)arg;
  fprintf(stderr, "  left on the loop: %s handle %p%s%s\n",
          uv_handle_type_name(uv_handle_get_type(handle)), (void *)handle,
          uv_is_active(handle) ? " (active)" : "",
          uv_is_closing(handle) ? " (closing)" : "");
}

/* uv_loop_close(loop) must return 0: nothing left on it.  Otherwise list
 * what is left and fail. */
#define CHECK_LOOP_CLOSES(loop)                                                \
  do {                                                                         \
    uv_loop_t *check_l_ = (loop);                                              \
    for (int check_i_ = 0; check_i_ < 3; check_i_++)                           \
      uv_run(check_l_, UV_RUN_NOWAIT);                                         \
    int check_rc_ = uv_loop_close(check_l_);                                   \
    if (check_rc_ != 0) {                                                      \
      uv_walk(check_l_, check__walk_cb, NULL);                                 \
      CHECK__FAIL("uv_loop_close(%s) == 0 (%s)", #loop,                        \
                  uv_err_name(check_rc_));                                     \
    }                                                                          \
  } while (0)

/* Remove the folder `dir` and the files in it (a test's temporary store:
 * the database and its -wal and -shm files); nothing there is fine. */
static CHECK__UNUSED void check_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* ---- one process per test ---------------------------------------------- */

/* What a run of tests came to so far: check_fork_run counts into it. */
typedef struct {
  size_t passed, failed, skipped;
} check_tally_t;

/* Run fn(arg) in a child process, count it in `tally` and print its line:
 * "ok N - name (T ms)", "ok N - name # SKIP" when it exited with 77, or "not
 * ok N - name (signal S | exit E, T ms)", N counting from 1 in the tally.  A
 * failed CHECK aborts the child only, so the caller goes on with its next
 * test.
 *
 * The child dumps no core (a failed CHECK is an abort: one core file per
 * failed test would pile up), dies when the runner does (ctest's timeout
 * kills the runner, and a child left behind would hold its store), and is
 * stopped by SIGALRM after `seconds` (0: never), which the line names.  It
 * ends through exit(), not _exit(): atexit handlers run, LeakSanitizer's
 * leak check among them, and a leak fails the child (exit 1 under ASan, 23
 * under LSan alone), as an ASan or UBSan error does (exit 1). */
static CHECK__UNUSED void check_fork_run(check_tally_t *tally, const char *name,
                                         void (*fn)(const void *),
                                         const void *arg, unsigned seconds) {
  size_t number = tally->passed + tally->failed + tally->skipped + 1;
  /* Unflushed output would be written twice, by parent and child. */
  fflush(stdout);
  fflush(stderr);
  uint64_t t0 = uv_hrtime();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    printf("not ok %zu - %s (fork failed)\n", number, name);
    fflush(stdout);
    tally->failed++;
    return;
  }
  if (pid == 0) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* it died before the line above */
      _exit(1);
#else
    (void)parent;
#endif
    alarm(seconds);
    fn(arg);
    exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      perror("waitpid");
      printf("not ok %zu - %s (lost)\n", number, name);
      fflush(stdout);
      tally->failed++;
      return;
    }
  }
  long ms = (long)((uv_hrtime() - t0) / 1000000);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    tally->passed++;
    printf("ok %zu - %s (%ld ms)\n", number, name, ms);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
    tally->skipped++;
    printf("ok %zu - %s # SKIP\n", number, name);
  } else if (WIFSIGNALED(status)) {
    tally->failed++;
    printf("not ok %zu - %s (signal %d%s, %ld ms)\n", number, name,
           WTERMSIG(status), WTERMSIG(status) == SIGALRM ? ": timed out" : "",
           ms);
  } else {
    tally->failed++;
    printf("not ok %zu - %s (exit %d, %ld ms)\n", number, name,
           WEXITSTATUS(status), ms);
  }
  fflush(stdout);
}

/* Print "# WHAT: P passed, F failed, S skipped" and return the exit code: 1
 * when a test failed, 77 when every test skipped (so that ctest, running
 * one test an entry, reports a skip), else 0. */
static CHECK__UNUSED int check_tally_end(const check_tally_t *tally,
                                         const char *what) {
  printf("# %s: %zu passed, %zu failed, %zu skipped\n", what, tally->passed,
         tally->failed, tally->skipped);
  fflush(stdout);
  if (tally->failed)
    return 1;
  return tally->skipped > 0 && tally->passed == 0 ? 77 : 0;
}

/* One named test of a unit's table.  tests/CMakeLists.txt reads the names
 * from the table (`check_test_t tests[] = {{"name", fn}, ...};`) to register
 * each test with ctest: keep that shape. */
typedef struct {
  const char *name;
  void (*fn)(void);
} check_test_t;

/* How long one test may run when check_main runs them all; a unit may
 * define it before including this file.  ctest's TIMEOUT bounds a test run
 * by name. */
#ifndef CHECK_TEST_SECONDS
#define CHECK_TEST_SECONDS 60
#endif

static CHECK__UNUSED void check__call(const void *test) {
  ((const check_test_t *)test)->fn();
}

/* Run the `n` tests, each in a child (check_fork_run), or only the one named
 * argv[1], in this process.  Returns the exit code: 1 when a test failed or
 * no test has that name, 77 when every test skipped. */
static CHECK__UNUSED int check_main(const check_test_t *tests, size_t n,
                                    int argc, char **argv) {
  if (argc > 1) {
    for (size_t t = 0; t < n; t++) {
      if (strcmp(argv[1], tests[t].name) != 0)
        continue;
      tests[t].fn();
      printf("ok %zu - %s\n", t + 1, tests[t].name);
      fflush(stdout);
      return 0;
    }
    fprintf(stderr, "no test named '%s'\n", argv[1]);
    return 1;
  }
  check_tally_t tally = {0, 0, 0};
  for (size_t t = 0; t < n; t++)
    check_fork_run(&tally, tests[t].name, check__call, &tests[t],
                   CHECK_TEST_SECONDS);
  return check_tally_end(&tally, argv[0]);
}

#endif /* DURABLE_TEST_CHECK_H */

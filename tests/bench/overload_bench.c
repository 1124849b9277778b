/*
 * overload_bench.c: what a producer faster than the store, and a host far
 * behind, cost in memory and in speed (see tests/bench/README.md,
 * "overload_bench").
 *
 *   [1] a burst: N durable_stream_publish started at once, none awaited
 *       (C): peak resident memory above the idle process, what is left a
 *       second after the last completion, and items/s   vs 100 rows/commit
 *   [2] the same burst from Lua (overload_bench.lua in a `durable lua`
 *       subprocess: publish_durable(...):next(...) N times)
 *   [3] a host draining S streams that are P items behind each: peak
 *       resident memory above the process before the drain, and items/s
 *                                                    vs 100 rows/commit
 *   [4] a bulk load: `durable publish NS KEY -` of L JSON lines into one
 *       stream (a subprocess)                        vs 100 rows/commit;
 *       the same with --id-field id into another, then the same file
 *       again there: nothing appended
 *
 * Resident memory is VmRSS, sampled every 10 ms on the loop (and by the
 * Lua script at every 10,000th publish and every completion's 10,000th).
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS).
 */
#include "stream_figures.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct {
  const char *only;
  int quick;
  unsigned figures;
  const char *durable, *lua;
} opt;

static struct {
  long burst;           /* [1], [2] publishes */
  long streams, behind; /* [3] */
  long plain100;        /* rows of the 100-rows-per-commit loop */
  long lines;           /* [4] */
} sz = {200000, 512, 20000, 100000, 1000000};

static void usage(FILE *f) {
  fprintf(f, "usage: overload_bench [--only sqlite|postgres] [--quick]\n"
             "                      [--figures 1,2,3] [--durable PATH] [--lua "
             "PATH]\n"
             "  --quick       small sizes everywhere: a smoke run\n"
             "  --figures L   run only these figures (1-4)\n"
             "  --durable P   the durable command for the Lua figure (default: "
             "../../durable\n"
             "                next to this binary)\n"
             "  --lua P       tests/bench/overload_bench.lua\n"
             "PostgreSQL runs when DURABLE_TEST_PG holds a libpq URL.\n");
}

static int want(int fig) {
  return opt.figures ? (opt.figures >> fig) & 1 : 1;
}

/* ---- resident memory, sampled on the loop ---------------------------------
 */

static struct {
  uv_timer_t timer;
  long peak;
} mem;

static void on_sample(uv_timer_t *t) {
  (void)t;
  long rss = rss_kib();
  if (rss > mem.peak)
    mem.peak = rss;
}

static void sample_start(void) {
  mem.peak = rss_kib();
  uv_timer_init(&C.loop, &mem.timer);
  uv_timer_start(&mem.timer, on_sample, 10, 10);
}

static long sample_stop(void) {
  on_sample(NULL);
  uv_timer_stop(&mem.timer);
  uv_close((uv_handle_t *)&mem.timer, NULL);
  return mem.peak;
}

static void on_idle_over(uv_timer_t *t) {
  *(int *)t->data = 1;
}

/* Run the loop for `ms`: what the process does once a burst is over (it
 * gives memory back) happens meanwhile. */
static void idle_for(int ms) {
  int done = 0;
  uv_timer_t t;
  uv_timer_init(&C.loop, &t);
  t.data = &done;
  uv_timer_start(&t, on_idle_over, (uint64_t)ms, 0);
  run_until(&C, &done, "idling");
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&C.loop, UV_RUN_NOWAIT); /* the close callback, while t is here */
}

/* ---- [1] a burst from C --------------------------------------------------
 */

typedef struct {
  long left, failed;
  int done;
} burst_t;

static void burst_done(int status, int64_t seq, const char *message,
                       void *data) {
  burst_t *b = data;
  (void)seq;
  (void)message;
  C.progress++;
  if (status < 0)
    b->failed++;
  if (--b->left == 0)
    b->done = 1;
}

static void fig_burst(void) {
  long n = sz.burst;
  char(*keys)[128] = owner_keys("burst", 1, "BenchOwner");
  durable_stream_id_t id = {.ns = "Bench", .key = keys[0]};
  durable_error_t err = {0};
  burst_t b = {.left = 1};
  /* the stream made and the paths warm before the idle figure */
  if (durable_stream_publish(client, &id, "{\"i\":0}", burst_done, &b, &err) <
      0)
    die("durable_stream_publish refused: %s", err.message);
  run_until(&C, &b.done, "the first publish");
  idle_for(300);
  long idle = rss_kib();
  double plain = plain100(sz.plain100);
  printf("[1] a burst of %s publishes started at once on one stream (C)\n",
         num((double)n));
  sample_start();
  b = (burst_t){.left = n};
  double t0 = now_s();
  for (long i = 1; i <= n; i++) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"i\":%ld}", i);
    if (durable_stream_publish(client, &id, payload, burst_done, &b, &err) < 0)
      die("durable_stream_publish %ld refused: %s", i, err.message);
    if (i % 10000 == 0)
      on_sample(NULL);
  }
  run_until(&C, &b.done, "the burst's completions");
  double secs = now_s() - t0;
  long peak = sample_stop();
  idle_for(1000);
  long after = rss_kib();
  printf("  %-60s %12s rows/s\n", T->plain100_name, num(plain));
  printf("  %-60s %12s items/s  (%ld failed)\n", "the burst", num(n / secs),
         b.failed);
  printf("  %-60s %11.2fx\n", "ratio burst / 100 rows/commit",
         n / secs / plain);
  printf("  %-60s %12.1f MB       [<= 100 MB]\n",
         "peak resident memory above idle", (double)(peak - idle) / 1024);
  printf("  %-60s %12.1f MB       [<= 30 MB]\n",
         "resident memory 1 s after, above idle",
         (double)(after - idle) / 1024);
  free(keys);
}

/* ---- [2] a burst from Lua ------------------------------------------------
 */

static void fig_lua_burst(void) {
  char count[32];
  snprintf(count, sizeof count, "%ld", sz.burst);
  const char *args[] = {"burst", T->url, count, NULL};
  double v[4];
  lua_numbers(opt.durable, opt.lua, args, v, 4);
  printf("[2] the same burst from Lua (publish_durable(...):next(...))\n");
  printf("  %-60s %12s items/s  (%.0f failed)\n", "the burst", num(v[0]), v[3]);
  printf("  %-60s %12.1f MB       [<= 100 MB]\n",
         "peak resident memory above idle", v[1]);
  printf("  %-60s %12.1f MB       [<= 30 MB]\n",
         "resident memory 1 s after, above idle", v[2]);
}

/* ---- [3] a host far behind -----------------------------------------------
 */

static void fig_behind(void) {
  long n = sz.streams, per = sz.behind;
  char(*keys)[128] = owner_keys("behind", (int)n, "BenchOwner");
  printf("[3] a host draining %ld streams %s items behind each\n", n,
         num((double)per));
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    char items_ns[256];
    durable_stream_id_t id = {.ns = "Bench", .key = keys[i]};
    durable_stream_items_ns(&id, items_ns, sizeof items_ns);
    fill_items(&C, durable_mesh_store(M), items_ns, 1, per - 1, 1);
  }
  burst_t b = {.left = n};
  durable_error_t err = {0};
  for (long i = 0; i < n; i++) { /* the last item makes the stream node */
    durable_stream_id_t id = {.ns = "Bench", .key = keys[i]};
    char payload[32];
    snprintf(payload, sizeof payload, "{\"i\":%ld}", per);
    if (durable_stream_publish(client, &id, payload, burst_done, &b, &err) < 0)
      die("durable_stream_publish refused: %s", err.message);
  }
  run_until(&C, &b.done, "the backlogs' last items");
  printf("  %-60s %12.1f s\n", "fill (untimed for the figure)", now_s() - t0);
  double plain = plain100(sz.plain100);
  idle_for(300);
  long before = rss_kib();
  sample_start();
  double rate = drain_run(keys, (int)n, per, 0, 0);
  long peak = sample_stop();
  printf("  %-60s %12s rows/s\n", T->plain100_name, num(plain));
  printf("  %-60s %12s items/s\n", "the drain", num(rate));
  printf("  %-60s %11.2fx\n", "ratio drain / 100 rows/commit", rate / plain);
  printf("  %-60s %12.1f MB       [<= 150 MB]\n",
         "peak resident memory above the process before",
         (double)(peak - before) / 1024);
  free(keys);
}

/* ---- [4] a bulk load --------------------------------------------------------
 */

/* Seconds `durable publish --store URL Bench KEY -` (with `ids`:
 * `--id-field id`) took to load `file`; dies when it fails. */
static double load_file(const char *file, const char *key, int ids) {
  fflush(stdout);
  double t0 = now_s();
  pid_t pid = fork();
  if (pid < 0)
    die("fork: %s", strerror(errno));
  if (pid == 0) {
    if (freopen(file, "r", stdin) == NULL ||
        freopen("/dev/null", "w", stdout) == NULL)
      _exit(127);
    execl(opt.durable, opt.durable, "publish", "--store", T->url, "Bench", key,
          "-", ids ? "--id-field" : NULL, "id", (char *)NULL);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("durable publish - of %s failed (status %d)", file, status);
  return now_s() - t0;
}

typedef struct {
  int64_t last;
  int done;
} last_t;

static void on_last(const durable_result_t *res, void *data) {
  last_t *l = data;
  C.progress++;
  if (res->status < 0)
    die("last item: %s", res->message);
  l->last = res->value;
  l->done = 1;
}

static int64_t last_of(const char *key) {
  char items_ns[256];
  durable_stream_id_t id = {.ns = "Bench", .key = key};
  durable_stream_items_ns(&id, items_ns, sizeof items_ns);
  last_t l = {0};
  durable_error_t err = {0};
  if (durable__store_last_item(durable_mesh_store(M), NULL, items_ns, on_last,
                               &l, &err) < 0)
    die("last item: %s", err.message);
  run_until(&C, &l.done, "the last item");
  return l.last;
}

static void fig_load(void) {
  long n = sz.lines;
  char(*keys)[128] = owner_keys("load", 2, "BenchOwner");
  char file[] = "/tmp/durable-load.XXXXXX";
  int fd = mkstemp(file);
  FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
  if (f == NULL)
    die("cannot write %s: %s", file, strerror(errno));
  for (long i = 1; i <= n; i++)
    fprintf(f, "{\"id\":\"i%ld\",\"i\":%ld}\n", i, i);
  fclose(f);
  printf("[4] a bulk load of %s JSON lines into one stream (durable "
         "publish -, then with --id-field id into another)\n",
         num((double)n));
  double plain = plain100(sz.plain100);
  double bare = load_file(file, keys[1], 0);
  int64_t after_bare = last_of(keys[1]);
  double first = load_file(file, keys[0], 1);
  int64_t after_first = last_of(keys[0]);
  double again = load_file(file, keys[0], 1);
  int64_t after_again = last_of(keys[0]);
  printf("  %-60s %12s rows/s\n", T->plain100_name, num(plain));
  printf("  %-60s %12s lines/s  (%.1f s, last sequence %lld)\n", "the load",
         num(n / bare), bare, (long long)after_bare);
  printf("  %-60s %11.2fx          [>= 0.5x]\n", "ratio load / 100 rows/commit",
         n / bare / plain);
  printf("  %-60s %12s lines/s  (%.1f s, last sequence %lld)\n",
         "the load with --id-field (an id node per item)", num(n / first),
         first, (long long)after_first);
  printf("  %-60s %11.2fx\n", "ratio load with ids / 100 rows/commit",
         n / first / plain);
  printf("  %-60s %12lld          (%.1f s) [0]\n",
         "the same file again: items appended",
         (long long)(after_again - after_first), again);
  unlink(file);
  free(keys);
}

/* ---- one store -------------------------------------------------------------
 */

static void run_target(void) {
  main_open(T->url);
  if (want(1))
    fig_burst();
  if (want(2))
    fig_lua_burst();
  if (want(3))
    fig_behind();
  if (want(4))
    fig_load();
  main_close();
  printf("  log lines: %ld warnings, %ld errors\n", logs.warn, logs.error);
}

static void run_sqlite(void) {
  target_sqlite("durable-overload-bench", run_target);
}

static void run_postgres(const char *url) {
  target_postgres(url, "obench", run_target);
}

int main(int argc, char **argv) {
  bench_name = "overload_bench";
  bench_usage = usage;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quick") == 0)
      opt.quick = 1;
    else if (strcmp(a, "--durable") == 0 && v)
      opt.durable = v, i++;
    else if (strcmp(a, "--lua") == 0 && v)
      opt.lua = v, i++;
    else if (strcmp(a, "--figures") == 0 && v)
      opt.figures |= parse_figures(v, 4), i++;
    else if (strcmp(a, "--only") == 0)
      opt.only = parse_only(v), i++;
    else
      other_arg(a);
  }
  if (opt.quick)
    sz.burst = 20000, sz.streams = 64, sz.behind = 2000, sz.plain100 = 10000,
    sz.lines = 50000;
  if (opt.lua == NULL)
    opt.lua = OVERLOAD_BENCH_LUA;
  if (opt.durable == NULL)
    opt.durable = find_durable(OVERLOAD_BENCH_DURABLE);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("overload_bench: durable %s; Lua figure by %s\n",
         DURABLE_VERSION_STRING, opt.durable);
  run_stores(opt.only, run_sqlite, run_postgres);
  return 0;
}

/*
 * batch_bench.c: what batch handlers buy a consumer draining a backlog,
 * each figure a ratio against a plain loop of the same store measured in
 * the same run (see tests/bench/README.md, "batch_bench").
 *
 *   [1] 1 stream, a C batch handler (--batch items a call) that
 *       acknowledges at once                       vs 1 row/commit
 *   [2] the same, one node written per batch with its acknowledgement
 *       (durable_reply_commit)                     vs 1 row/commit
 *   [3] 64 streams with batch handlers, drained together
 *                                                  vs 100 rows/commit,
 *                                and 100 rows/commit over 64 namespaces
 *   [4] Lua (batch_bench.lua in a `durable lua` subprocess): 1 stream,
 *       `batch =`, a handler returning nil; and one tx:update_node per
 *       batch                                      vs 1 row/commit
 *
 * The one-stream C drains run the one-row loop in slices beside them
 * (beside_start: a few rows after every few batches); the 64-stream drain
 * runs its loops just before it; the Lua figure runs the one-row loop just
 * before and just after its subprocess.  The backlogs are written untimed
 * as the stream hub writes them (fill_items, then one publish that makes
 * the stream node).  The C drains are timed from the first
 * durable_hub_consume until every stream node's Checkpoint says all are
 * acknowledged; the Lua one by the script, from its hosting mesh's open
 * (the owner, of a NodeType this process does not consume, waits for it)
 * until its Checkpoint says so.
 *
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS).
 */
#include "stream_figures.h"

#include <stdlib.h>
#include <string.h>

/* The one-row loop beside the one-stream drains: BESIDE_ROWS rows after
 * every BESIDE_EVERY items, about 1,000 rows over a 50,000-item drain
 * that runs at 50 times its rate, so that the slices take about as long
 * as the drain. */
#define BESIDE_EVERY 1280
#define BESIDE_ROWS 25

/* ---- options ------------------------------------------------------------ */

static struct {
  const char *only; /* NULL, "sqlite" or "postgres" */
  int reps, reps_given;
  int quick;
  long batch;
  unsigned figures; /* bit k: figure k; 0 = all */
  const char *durable, *lua;
} opt = {NULL, 3, 0, 0, 256, 0, NULL, NULL};

/* Sizes (--quick makes them small). */
static struct {
  long drain1;   /* [1], [2], [4] backlog of the one stream */
  long drain64;  /* [3] backlog of each of the 64 streams */
  long plain1;   /* rows of the one-row loop: the header, [4] (in halves) */
  long plain100; /* [3] rows of each 100-rows-per-commit loop */
} sz = {50000, 2048, 1000, 50000};

static void usage(FILE *f) {
  fprintf(f,
          "usage: batch_bench [--only sqlite|postgres] [--items N] [--reps N]\n"
          "                   [--batch N] [--quick] [--figures 1,2,...]\n"
          "                   [--durable PATH] [--lua PATH]\n"
          "  --items N     backlog of the one-stream drains (default 50000)\n"
          "  --batch N     items per batch handler call (default 256)\n"
          "  --reps N      repetitions; medians are printed (default 3)\n"
          "  --quick       small sizes everywhere: a smoke run\n"
          "  --figures L   run only these figures (1-4)\n"
          "  --durable P   the durable command for the Lua figure (default: "
          "../../durable\n"
          "                next to this binary)\n"
          "  --lua P       tests/bench/batch_bench.lua\n"
          "PostgreSQL runs when DURABLE_TEST_PG holds a libpq URL.\n");
}

static int want(int fig) {
  return opt.figures ? (opt.figures >> fig) & 1 : 1;
}

/* The target of a figure on this store: SQLite's or PostgreSQL's. */
static const char *target(const char *sqlite, const char *postgres) {
  return T->pg ? postgres : sqlite;
}

/* ---- the backlogs ----------------------------------------------------------
 */

typedef struct {
  long left;
  int done;
} published_t;

static void published(int status, int64_t seq, const char *message,
                      void *data) {
  published_t *p = data;
  (void)seq;
  C.progress++;
  if (status < 0)
    die("durable_stream_publish failed: %s (%s)", message ? message : "",
        durable_err_name(status));
  if (--p->left == 0)
    p->done = 1;
}

/* `per` items on each stream Bench@keys[i], untimed: items 1..per-1 as the
 * stream hub writes them, then item `per` by a durable_stream_publish,
 * which makes the stream node with LastSequence `per` (the next sequence
 * is derived from the highest stored item as well). */
static void fill_backlogs(char (*keys)[128], int n, long per) {
  char items_ns[256];
  published_t p = {.left = n};
  durable_error_t err = {0};
  for (int i = 0; i < n; i++) {
    durable_stream_id_t id = {.ns = "Bench", .key = keys[i]};
    durable_stream_items_ns(&id, items_ns, sizeof items_ns);
    fill_items(&C, durable_mesh_store(M), items_ns, 1, per - 1, 1);
  }
  for (int i = 0; i < n; i++) {
    durable_stream_id_t id = {.ns = "Bench", .key = keys[i]};
    char payload[32];
    snprintf(payload, sizeof payload, "{\"i\":%ld}", per);
    if (durable_stream_publish(client, &id, payload, published, &p, &err) < 0)
      die("durable_stream_publish refused: %s", err.message);
  }
  run_until(&C, &p.done, "publishing the backlogs' last items");
}

/* ---- [1] and [2]: one stream ----------------------------------------------
 */

/* items/s of one batch drain of a fresh backlog, with the one-row loop in
 * slices beside it (its rate into *plain); *mean gets items per call. */
static double drain_one(const char *tag, int rep, int effect, double *plain,
                        double *mean) {
  long calls = 0;
  char(*keys)[128] = owner_keys(tag, 1, "BenchOwner");
  fill_backlogs(keys, 1, sz.drain1);
  beside_start(BESIDE_EVERY, BESIDE_ROWS, 0);
  double rate = drain_batches(keys, 1, sz.drain1, rep, effect,
                              (uint32_t)opt.batch, &calls);
  *plain = beside_stop(NULL);
  *mean = calls ? (double)sz.drain1 / (double)calls : 0;
  free(keys);
  return rate;
}

static void fig_one_stream(void) {
  int reps = opt.reps;
  double p_ack[64], ack[64], m_ack[64], r_ack[64];
  double p_fx[64], fx[64], m_fx[64], r_fx[64];
  printf("[1] [2] one stream: a C batch handler taking up to %ld items a "
         "call drains a\n    backlog of %s items, acknowledging at once [1], "
         "or writing one node per\n    batch with the acknowledgement [2]; %d "
         "runs\n",
         opt.batch, num((double)sz.drain1), reps);
  for (int r = 0; r < reps; r++) {
    char tag[32];
    if (want(1)) {
      snprintf(tag, sizeof tag, "b1r%d", r);
      ack[r] = drain_one(tag, r, 0, &p_ack[r], &m_ack[r]);
      r_ack[r] = ack[r] / p_ack[r];
    }
    if (want(2)) {
      snprintf(tag, sizeof tag, "b2r%d", r);
      fx[r] = drain_one(tag, r, 1, &p_fx[r], &m_fx[r]);
      r_fx[r] = fx[r] / p_fx[r];
    }
  }
  if (want(1)) {
    print_rate(beside.name, p_ack, reps, "rows/s");
    print_rate("drain 1 stream, batch handler, ack at once", ack, reps,
               "items/s");
    print_rate("  items per handler call", m_ack, reps, "items");
    print_ratio("ratio batch drain / plain 1-row", r_ack, reps,
                target(">= 50x", ">= 15x"));
  }
  if (want(2)) {
    print_rate(want(1) ? "  ... beside the drain with a write per batch"
                       : beside.name,
               p_fx, reps, "rows/s");
    print_rate("drain 1 stream, batch handler, 1 node per batch with the ack",
               fx, reps, "items/s");
    print_rate("  items per handler call", m_fx, reps, "items");
    print_ratio("ratio batch drain + write / plain 1-row", r_fx, reps,
                target(">= 15x (Lua's)", ">= 6x (Lua's)"));
  }
}

/* ---- [3] 64 streams -------------------------------------------------------
 */

static void fig_many_streams(void) {
  int reps = opt.reps;
  double p100[64], p100s[64], many[64], mean[64], r_many[64], r_many_s[64];
  printf("[3] %d streams with a C batch handler each (up to %ld items a call), "
         "drained\n    together: %s items on each; %d runs\n",
         SPREAD, opt.batch, num((double)sz.drain64), reps);
  for (int r = 0; r < reps; r++) {
    char tag[32];
    long calls = 0;
    snprintf(tag, sizeof tag, "b3r%d", r);
    char(*keys)[128] = owner_keys(tag, SPREAD, "BenchOwner");
    fill_backlogs(keys, SPREAD, sz.drain64);
    p100[r] = plain100(sz.plain100);
    p100s[r] = plain100s(sz.plain100);
    many[r] = drain_batches(keys, SPREAD, sz.drain64, r, 0, (uint32_t)opt.batch,
                            &calls);
    mean[r] = calls ? (double)(sz.drain64 * SPREAD) / (double)calls : 0;
    r_many[r] = many[r] / p100[r];
    r_many_s[r] = many[r] / p100s[r];
    free(keys);
  }
  print_rate(T->plain100_name, p100, reps, "rows/s");
  print_rate(T->plain100s_name, p100s, reps, "rows/s");
  print_rate("drain 64 streams, batch handlers", many, reps, "items/s");
  print_rate("  items per handler call", mean, reps, "items");
  print_ratio("ratio 64 streams / plain 100-row", r_many, reps,
              target(">= 0.5x", ">= 0.3x"));
  print_ratio("ratio 64 streams / plain 100-row over 64 "
              "namespaces",
              r_many_s, reps, "same rows, no target");
}

/* ---- [4] Lua --------------------------------------------------------------
 */

/* A fresh backlog whose owner is of batch_bench_plugin.lua's NodeType for
 * `mode` ("ack": BatchAck, "tx": BatchTx), then `durable lua
 * batch_bench.lua --filled ...` draining it, with half the one-row loop's
 * rows run just before the subprocess and half just after.  Returns the
 * loop's rate; the drain's items/s go to *rate. */
static double lua_drain(const char *mode, int rep, double *rate) {
  char tag[32], items[32], batch[32];
  snprintf(tag, sizeof tag, "b4%sr%d", mode, rep);
  char(*keys)[128] =
      owner_keys(tag, 1, strcmp(mode, "ack") == 0 ? "BatchAck" : "BatchTx");
  fill_backlogs(keys, 1, sz.drain1);
  snprintf(items, sizeof items, "%ld", sz.drain1);
  snprintf(batch, sizeof batch, "%ld", opt.batch);
  const char *args[] = {"--filled", "--store", T->url, "--key",
                        keys[0],    "--items", items,  "--mode",
                        mode,       "--batch", batch,  NULL};
  double before = plain1(sz.plain1 / 2);
  *rate = lua_figure(opt.durable, opt.lua, args);
  double after = plain1(sz.plain1 / 2);
  free(keys);
  return 2 / (1 / before + 1 / after); /* equal rows: the harmonic mean */
}

static void fig_lua(void) {
  int reps = opt.reps;
  double p_ack[64], ack[64], r_ack[64], p_tx[64], tx[64], r_tx[64];
  printf("[4] Lua: `durable lua %s --filled` drains a backlog of %s items\n    "
         "with "
         "`batch = %ld`, its handler returning nil (ack), or one "
         "tx:update_node\n    per batch (tx); the one-row loop runs half "
         "before, half after; %d runs\n",
         opt.lua, num((double)sz.drain1), opt.batch, reps);
  for (int r = 0; r < reps; r++) {
    p_ack[r] = lua_drain("ack", r, &ack[r]);
    r_ack[r] = ack[r] / p_ack[r];
    p_tx[r] = lua_drain("tx", r, &tx[r]);
    r_tx[r] = tx[r] / p_tx[r];
  }
  print_rate(T->plain1_name, p_ack, reps, "rows/s");
  print_rate("  ... around the drain with tx:update_node", p_tx, reps,
             "rows/s");
  print_rate("Lua drain 1 stream, batch handler returning nil", ack, reps,
             "items/s");
  print_rate("Lua drain 1 stream, one tx:update_node per batch", tx, reps,
             "items/s");
  print_ratio("ratio Lua batch drain / plain 1-row", r_ack, reps,
              target(">= 25x", ">= 10x"));
  print_ratio("ratio Lua batch drain + tx:update_node / plain 1-row", r_tx,
              reps, target(">= 15x", ">= 6x"));
}

/* ---- one store -------------------------------------------------------------
 */

static void run_target(void) {
  memset(&logs, 0, sizeof logs);
  main_open(T->url);
  /* the plain loops' rates, for the header */
  double a = plain1(sz.plain1), b = plain100(sz.plain100);
  printf("  %-60s %12s rows/s\n", T->plain1_name, num(a));
  printf("  %-60s %12s rows/s\n", T->plain100_name, num(b));
  fflush(stdout);
  if (want(1) || want(2))
    fig_one_stream();
  if (want(3))
    fig_many_streams();
  if (want(4))
    fig_lua();
  main_close();
  printf("  log lines: %ld warnings, %ld errors\n", logs.warn, logs.error);
}

static void run_sqlite(void) {
  target_sqlite("durable-batch-bench", run_target);
}

static void run_postgres(const char *url) {
  target_postgres(url, "bbench", run_target);
}

/* ---- main -----------------------------------------------------------------
 */

int main(int argc, char **argv) {
  long items = 0;
  bench_name = "batch_bench";
  bench_usage = usage;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--items") == 0)
      items = parse_long(v, a, 2), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), opt.reps_given = 1, i++;
    else if (strcmp(a, "--batch") == 0)
      opt.batch = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--quick") == 0)
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
  if (opt.batch > DURABLE_BATCH_ITEMS_MAX) {
    fprintf(stderr, "batch_bench: --batch takes at most %d\n",
            DURABLE_BATCH_ITEMS_MAX);
    return 2;
  }
  if (opt.quick) {
    sz.drain1 = 5000, sz.drain64 = 256, sz.plain1 = 100, sz.plain100 = 2000;
    if (!opt.reps_given)
      opt.reps = 1;
  }
  if (items)
    sz.drain1 = items;
  if (opt.reps > 64)
    opt.reps = 64;
  if (opt.lua == NULL)
    opt.lua = BATCH_BENCH_LUA;
  if (opt.durable == NULL)
    opt.durable = find_durable(BATCH_BENCH_DURABLE);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("batch_bench: durable %s, batches of %ld, medians of %d runs; Lua "
         "figure by %s\n",
         DURABLE_VERSION_STRING, opt.batch, opt.reps, opt.durable);
  run_stores(opt.only, run_sqlite, run_postgres);
  return 0;
}

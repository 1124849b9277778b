/*
 * stream_bench.c: figures for durable streams through the public C API,
 * each a ratio against a plain loop of the same store measured in the same
 * run (see tests/bench/README.md, "stream_bench").
 *
 *   [1] one producer awaiting each sequence           vs 1 row/commit,
 *                       and (SQLite) an append's two rows in each commit
 *   [2] 16 in flight on 1 stream, on 16 streams       vs 1 row/commit
 *       64 in flight on 64 streams                     vs 100 rows/commit,
 *                                  and 100 rows/commit over 64 namespaces
 *   [3] a consumer draining a backlog: 1 stream       vs 1 row/commit
 *       1 stream, a node written with each ack         vs 1 row/commit
 *       64 streams                                     vs 100 rows/commit,
 *                                  and 100 rows/commit over 64 namespaces
 *   [4] catch-up: durable_stream_read from 0 over --items    vs a raw range
 * read (and from items-1000, memory; Lua read_durable and a Lua producer) [5]
 * latency publish -> handler entry at 1,000 items/s [6] PostgreSQL: 4 producer
 * processes on the same 4 streams
 *
 * What a host's start and the stream listing cost at 1,000 and 1,000,000
 * stored items is startup_bench.c's (both stores).
 *
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS).  Every ratio is
 * taken within one repetition (the plain loop and the measurement run back
 * to back, or, for the one-stream runs of [1] and [3], the plain loop in
 * slices between the measurement's items: beside_start) and printed as the
 * median over the repetitions, the separate values in parentheses.
 */
#include "stream_figures.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PAGE 1000        /* page size of the raw range read and listing */
#define TAIL_REPS 9      /* repetitions of the (cheap) tail read */
#define MAX_STREAMS 128  /* streams one publish driver handles */
#define MULTI_PROCS 4    /* figure 6: producer processes */
#define MULTI_STREAMS 4  /* figure 6: streams they share */
#define MULTI_INFLIGHT 4 /* figure 6: publishes in flight per stream */

/* The raw catch-up read, the store's limit for figure 4: the columns a
 * reader needs, one page after a cursor, paged by the first column (the
 * id).  %s is the table (schema-qualified on PostgreSQL); $1 the items
 * namespace, $2 the last id.  Every column it returns is fetched, so when
 * durable_stream_items gains a column that a reader needs, add it here. */
#define RAW_READ_SQL                                                           \
  "SELECT id, content FROM %s WHERE namespace = $1 AND id > $2 "               \
  "ORDER BY id LIMIT 1000"

/* ---- options ------------------------------------------------------------ */

static struct {
  const char *only; /* NULL, "sqlite" or "postgres" */
  long items;
  int reps, reps_given;
  long seconds;
  int quick;
  unsigned figures; /* bit k: figure k; 0 = all */
  const char *durable, *lua;
} opt = {NULL, 1000000, 3, 0, 10, 0, 0, NULL, NULL};

/* Sizes per figure (--quick makes them small). */
static struct {
  long plain1;   /* rows of a one-row-commit loop run */
  long plain100; /* rows of a 100-rows-per-commit loop run */
  long single;   /* [1] publishes */
  long in16;     /* [2] publishes of each 16-in-flight run */
  long in64;     /* [2] publishes of the 64-stream run */
  long drain1;   /* [3] backlog of the 1-stream drain */
  long drain64;  /* [3] backlog of each of the 64 streams */
  long lua_pub;  /* [4] Lua producer's publishes */
  long multi_s;  /* [6] seconds */
} sz = {1000, 50000, 1000, 4000, 12800, 2000, 100, 1000, 5};

static void usage(FILE *f) {
  fprintf(
      f, "usage: stream_bench [--only sqlite|postgres] [--items N] [--reps N]\n"
         "                    [--seconds N] [--quick] [--figures 1,2,...]\n"
         "                    [--durable PATH] [--lua PATH]\n"
         "  --items N     length of the catch-up stream of figure 4 (default "
         "1000000)\n"
         "  --reps N      repetitions; medians are printed (default 3)\n"
         "  --seconds N   length of the latency run of figure 5 (default 10)\n"
         "  --quick       small sizes everywhere: a smoke run\n"
         "  --figures L   run only these figures (1-6)\n"
         "  --durable P   the durable command for the Lua figures (default: "
         "../../durable\n"
         "                next to this binary)\n"
         "  --lua P       tests/bench/lua_figures.lua\n"
         "PostgreSQL runs when DURABLE_TEST_PG holds a libpq URL.\n");
}

static int want(int fig) {
  return opt.figures ? (opt.figures >> fig) & 1 : 1;
}

/* The rows of the 16-stream run, as a plain loop could commit them at
 * best: 16 per commit, one in each of 16 namespaces. */
static double plain16s(long n) {
  return plain_spread(n, 16, 16);
}

/* The one-row loop in slices beside the one-stream runs of [1] and [3]
 * (beside_start): SLICE rows after every SLICE items. */
#define SLICE 50

/* ---- publishing ------------------------------------------------------------
 */

typedef struct pub_s pub_t;
typedef struct {
  pub_t *d;
  int s;
} pub_slot_t;

struct pub_s {
  durable_hub_t *hub;
  const char *ns;
  int nstreams, inflight; /* in flight per stream */
  char (*keys)[128];
  long per_stream;
  long issued[MAX_STREAMS], done[MAX_STREAMS];
  int64_t max_seq[MAX_STREAMS];
  long total_done, total;
  long failed;
  int stop_on_fail; /* die (0) or count failures (1: figure 6's children) */
  int finished;
  pub_slot_t slots[MAX_STREAMS];
  char first_failure[512];
};

static void pub_issue(pub_t *d, int s);

static void pub_done(int status, int64_t seq, const char *message, void *data) {
  pub_slot_t *slot = data;
  pub_t *d = slot->d;
  int s = slot->s;
  C.progress++;
  if (status < 0) {
    if (!d->stop_on_fail)
      die("durable_stream_publish failed: %s (%s)", message ? message : "",
          durable_err_name(status));
    if (d->failed++ == 0)
      snprintf(d->first_failure, sizeof d->first_failure, "%s",
               message ? message : durable_err_name(status));
    if (message && strstr(message, "deadlock detected"))
      logs.deadlock++;
  } else if (seq > d->max_seq[s]) {
    d->max_seq[s] = seq;
  }
  d->done[s]++;
  if (++d->total_done == d->total)
    d->finished = 1;
  else
    beside_after(d->total_done);
  pub_issue(d, s);
}

static void pub_issue(pub_t *d, int s) {
  char payload[64];
  durable_error_t err = {0};
  while (d->issued[s] < d->per_stream &&
         d->issued[s] - d->done[s] < d->inflight) {
    durable_stream_id_t id = {.ns = d->ns, .key = d->keys[s]};
    long i = ++d->issued[s];
    snprintf(payload, sizeof payload, "{\"i\":%ld}", i);
    int rc = durable_stream_publish(d->hub, &id, payload, pub_done,
                                    &d->slots[s], &err);
    if (rc < 0)
      die("durable_stream_publish refused: %s (%s)", err.message,
          durable_err_name(rc));
  }
}

/* Publish per_stream items to each of nstreams streams ns@keys[i], with
 * `inflight` in flight per stream (a completion issues the next one on its
 * stream).  Returns items/s, counted when the last sequence is back. */
static double publish_run(const char *ns, char (*keys)[128], int nstreams,
                          long per_stream, int inflight) {
  pub_t *d = calloc(1, sizeof *d);
  if (d == NULL)
    die("out of memory");
  d->hub = client;
  d->ns = ns;
  d->keys = keys;
  d->nstreams = nstreams;
  d->inflight = inflight;
  d->per_stream = per_stream;
  d->total = per_stream * nstreams;
  for (int s = 0; s < nstreams; s++) {
    d->slots[s] = (pub_slot_t){d, s};
    /* a stream's first append; more follow from the callbacks */
  }
  double t0 = now_s(), sliced = beside.seconds;
  for (int s = 0; s < nstreams; s++)
    pub_issue(d, s);
  run_until(&C, &d->finished, "publishing");
  double dt = now_s() - t0 - (beside.seconds - sliced);
  free(d);
  return (double)(per_stream * nstreams) / dt;
}

/* Keys {partition}/{tag}/o{i} for n streams, their owner nodes (a NodeType
 * with no consumer: an append's wake finds the owner and stops there), and
 * one untimed publish to each so that the stream nodes exist and the owners
 * were woken once before anything is timed. */
static char (*make_streams(const char *tag, int n, int warm))[128] {
  char(*keys)[128] = owner_keys(tag, n, "BenchOwner");
  if (warm)
    publish_run("Bench", keys, n, 1, 1);
  return keys;
}

/* ---- [1] and [2]: producers ---------------------------------------------- */

static void fig_producers(void) {
  int reps = opt.reps;
  double p1[64], p2[64], p16s[64], p100[64], p100s[64], one[64], a[64], b[64],
      c[64];
  double r_one[64], r_two[64], r_a[64], r_b[64], r_bs[64], r_c[64], r_cs[64];
  if (want(1)) {
    printf("[1] one producer awaiting each sequence: %s publishes to one "
           "stream, the next\n    issued from the callback; %d runs\n",
           num((double)sz.single), reps);
    for (int r = 0; r < reps; r++) {
      char tag[32];
      snprintf(tag, sizeof tag, "f1r%d", r);
      char(*keys)[128] = make_streams(tag, 1, 1);
      beside_start(SLICE, SLICE, 1);
      one[r] = publish_run("Bench", keys, 1, sz.single, 1);
      p1[r] = beside_stop(&p2[r]);
      r_one[r] = one[r] / p1[r];
      r_two[r] = p2[r] > 0 ? one[r] / p2[r] : 0;
      free(keys);
    }
    print_rate(beside.name, p1, reps, "rows/s");
    if (!T->pg)
      print_rate("  ... and 2 rows/commit in 2 tables (item, LastSequence)", p2,
                 reps, "commits/s");
    print_rate("durable_stream_publish, 1 in flight", one, reps, "items/s");
    print_ratio("ratio 1 in flight / plain 1-row", r_one, reps, ">= 0.8x");
    if (!T->pg)
      print_ratio("ratio 1 in flight / plain 2-row appends", r_two, reps,
                  "same rows, no target");
  }
  if (want(2)) {
    printf("[2] publishes in flight: %s to 1 stream with 16 in flight, %s to "
           "16 streams\n    (1 in flight each), %s to %d streams (1 in flight "
           "each); %d runs\n",
           num((double)sz.in16), num((double)sz.in16), num((double)sz.in64),
           SPREAD, reps);
    for (int r = 0; r < reps; r++) {
      char tag[32];
      snprintf(tag, sizeof tag, "f2ar%d", r);
      char(*k1)[128] = make_streams(tag, 1, 1);
      snprintf(tag, sizeof tag, "f2br%d", r);
      char(*k16)[128] = make_streams(tag, 16, 1);
      snprintf(tag, sizeof tag, "f2cr%d", r);
      char(*k64)[128] = make_streams(tag, SPREAD, 1);
      p1[r] = plain1(sz.plain1);
      a[r] = publish_run("Bench", k1, 1, sz.in16, 16);
      b[r] = publish_run("Bench", k16, 16, sz.in16 / 16, 1);
      p16s[r] = plain16s(sz.in16);
      p100[r] = plain100(sz.plain100);
      p100s[r] = plain100s(sz.plain100);
      c[r] = publish_run("Bench", k64, SPREAD, sz.in64 / SPREAD, 1);
      r_a[r] = a[r] / p1[r];
      r_b[r] = b[r] / p1[r];
      r_bs[r] = b[r] / p16s[r];
      r_c[r] = c[r] / p100[r];
      r_cs[r] = c[r] / p100s[r];
      free(k1);
      free(k16);
      free(k64);
    }
    print_rate(T->plain1_name, p1, reps, "rows/s");
    print_rate("plain loop, 16 rows/commit over 16 namespaces", p16s, reps,
               "rows/s");
    print_rate(T->plain100_name, p100, reps, "rows/s");
    print_rate(T->plain100s_name, p100s, reps, "rows/s");
    print_rate("16 in flight on 1 stream", a, reps, "items/s");
    print_rate("16 in flight on 16 streams", b, reps, "items/s");
    print_rate("64 in flight on 64 streams", c, reps, "items/s");
    print_ratio("ratio 16 on 1 stream / plain 1-row", r_a, reps, "no target");
    print_ratio("ratio 16 on 16 streams / plain 1-row", r_b, reps, ">= 5x");
    print_ratio("ratio 16 on 16 streams / plain 16-row over 16 namespaces",
                r_bs, reps, "same rows, no target");
    print_ratio("ratio 64 on 64 streams / plain 100-row", r_c, reps, ">= 0.5x");
    print_ratio("ratio 64 on 64 streams / plain 100-row over 64 namespaces",
                r_cs, reps, "same rows, no target");
  }
}

/* ---- [3] draining a backlog ------------------------------------------------
 */

static void fig_drain(void) {
  int reps = opt.reps;
  double p1[64], p1fx[64], p100[64], p100s[64], one[64], many[64], fx[64];
  double r_one[64], r_many[64], r_many_s[64], r_fx[64];
  printf("[3] draining a backlog: a consumer on a client hub whose handler "
         "finishes at once;\n    %s items on 1 stream, %s items on each of %d "
         "streams; %d runs\n",
         num((double)sz.drain1), num((double)sz.drain64), SPREAD, reps);
  for (int r = 0; r < reps; r++) {
    char tag[32];
    snprintf(tag, sizeof tag, "f3ar%d", r);
    char(*k1)[128] = make_streams(tag, 1, 0);
    snprintf(tag, sizeof tag, "f3br%d", r);
    char(*k64)[128] = make_streams(tag, SPREAD, 0);
    snprintf(tag, sizeof tag, "f3cr%d", r);
    char(*kfx)[128] = make_streams(tag, 1, 0);
    /* the backlogs first, untimed */
    publish_run("Bench", k1, 1, sz.drain1, 64);
    publish_run("Bench", k64, SPREAD, sz.drain64, 4);
    publish_run("Bench", kfx, 1, sz.drain1, 64);
    beside_start(SLICE, SLICE, 0);
    one[r] = drain_run(k1, 1, sz.drain1, r, 0);
    p1[r] = beside_stop(NULL);
    beside_start(SLICE, SLICE, 0);
    fx[r] = drain_run(kfx, 1, sz.drain1, r, 1);
    p1fx[r] = beside_stop(NULL);
    r_fx[r] = fx[r] / p1fx[r];
    p100[r] = plain100(sz.plain100);
    p100s[r] = plain100s(sz.plain100);
    many[r] = drain_run(k64, SPREAD, sz.drain64, r, 0);
    r_one[r] = one[r] / p1[r];
    r_many[r] = many[r] / p100[r];
    r_many_s[r] = many[r] / p100s[r];
    free(k1);
    free(k64);
    free(kfx);
  }
  print_rate(beside.name, p1, reps, "rows/s");
  print_rate("  ... beside the drain with an effect", p1fx, reps, "rows/s");
  print_rate(T->plain100_name, p100, reps, "rows/s");
  print_rate(T->plain100s_name, p100s, reps, "rows/s");
  print_rate("drain 1 stream", one, reps, "items/s");
  print_rate("drain 64 streams", many, reps, "items/s");
  print_rate("drain 1 stream, one node written per item with its ack", fx, reps,
             "items/s");
  print_ratio("ratio drain 1 stream / plain 1-row", r_one, reps, ">= 0.8x");
  print_ratio("ratio drain + effect in the ack / plain 1-row", r_fx, reps,
              ">= 0.8x");
  print_ratio("ratio drain 64 streams / plain 100-row", r_many, reps,
              ">= 0.5x");
  print_ratio("ratio drain 64 streams / plain 100-row over 64 namespaces",
              r_many_s, reps, "same rows, no target");
}

/* ---- [4] catch-up ---------------------------------------------------------
 */

/* The raw read on the store's own database: seconds to page through every
 * item after `after`; *rows gets the count. */
static struct {
  sqlite3 *db;
  sqlite3_stmt *st;
  PGconn *conn;
} raw;

static void raw_open(void) {
  char sql[512];
  if (!T->pg) {
    sq_check(
        NULL,
        sqlite3_open_v2(T->sqlite_file, &raw.db, SQLITE_OPEN_READONLY, NULL),
        "open the store file read-only");
    snprintf(sql, sizeof sql, RAW_READ_SQL, "durable_stream_items");
    sq_check(raw.db, sqlite3_prepare_v2(raw.db, sql, -1, &raw.st, NULL),
             "prepare the raw range read");
  } else {
    raw.conn = pg_connect(T->pg_url);
    char *schema =
        PQescapeIdentifier(raw.conn, T->partition, strlen(T->partition));
    char table[256];
    snprintf(table, sizeof table, "%s.durable_stream_items", schema);
    PQfreemem(schema);
    snprintf(sql, sizeof sql, RAW_READ_SQL, table);
    PGresult *res = PQprepare(raw.conn, "raw_range", sql, 2, NULL);
    pg_ok(raw.conn, res, "prepare the raw range read");
    PQclear(res);
  }
}

static void raw_close(void) {
  if (raw.st)
    sqlite3_finalize(raw.st);
  if (raw.db)
    sqlite3_close(raw.db);
  if (raw.conn)
    PQfinish(raw.conn);
  memset(&raw, 0, sizeof raw);
}

static double raw_read(const char *ns, long after, long *rows) {
  char cursor[64];
  snprintf(cursor, sizeof cursor, "%012ld", after);
  *rows = 0;
  double t0 = now_s();
  for (;;) {
    long page = 0;
    if (!T->pg) {
      sqlite3_bind_text(raw.st, 1, ns, -1, SQLITE_STATIC);
      sqlite3_bind_text(raw.st, 2, cursor, -1, SQLITE_TRANSIENT);
      int rc, cols = sqlite3_column_count(raw.st);
      while ((rc = sqlite3_step(raw.st)) == SQLITE_ROW) {
        for (int col = 0; col < cols; col++)
          sink += (size_t)(sqlite3_column_text(raw.st, col) != NULL) +
                  (size_t)sqlite3_column_bytes(raw.st, col);
        snprintf(cursor, sizeof cursor, "%s",
                 (const char *)sqlite3_column_text(raw.st, 0));
        page++;
      }
      sq_check(raw.db, rc, "raw range read");
      sqlite3_reset(raw.st);
    } else {
      const char *vals[2] = {ns, cursor};
      PGresult *res =
          PQexecPrepared(raw.conn, "raw_range", 2, vals, NULL, NULL, 0);
      pg_ok(raw.conn, res, "raw range read");
      int n = PQntuples(res), cols = PQnfields(res);
      for (int i = 0; i < n; i++)
        for (int col = 0; col < cols; col++)
          sink += (size_t)PQgetlength(res, i, col) +
                  (size_t)(PQgetvalue(res, i, col)[0] != 0);
      if (n)
        snprintf(cursor, sizeof cursor, "%s", PQgetvalue(res, n - 1, 0));
      PQclear(res);
      page = n;
    }
    *rows += page;
    if (page < PAGE)
      break;
  }
  return now_s() - t0;
}

/* durable_stream_read from `after` until item `until`: seconds; peak RSS. */
typedef struct {
  long until, got, expect;
  int finished, order_ok;
  long rss_peak;
} rd_t;

static void rd_cb(durable_reader_t *reader, int status,
                  const durable_item_t *item, const char *message, void *data) {
  rd_t *d = data;
  C.progress++;
  if (status < 0)
    die("durable_stream_read failed: %s (%s)", message ? message : "",
        durable_err_name(status));
  if (item->sequence != d->expect++)
    d->order_ok = 0;
  if (++d->got % 10000 == 0) {
    long rss = rss_kib();
    if (rss > d->rss_peak)
      d->rss_peak = rss;
  }
  if (item->sequence >= d->until) {
    d->finished = 1;
    durable_reader_close(reader);
  }
}

static double reader_run(durable_mesh_t *mesh, const durable_stream_id_t *id,
                         long after, long until, long *rss_peak) {
  rd_t d = {.until = until, .expect = after + 1, .order_ok = 1};
  durable_reader_t *reader;
  durable_error_t err = {0};
  d.rss_peak = rss_kib();
  double t0 = now_s();
  int rc = durable_stream_read(mesh, id, after, NULL, rd_cb, &d, &reader, &err);
  if (rc < 0)
    die("durable_stream_read refused: %s", err.message);
  run_until(&C, &d.finished, "reading the stream");
  double dt = now_s() - t0;
  if (!d.order_ok || d.got != until - after)
    printf("  WARNING: durable_stream_read after %ld gave %ld items, in order: "
           "%s\n",
           after, d.got, d.order_ok ? "yes" : "NO");
  if (rss_peak && d.rss_peak > *rss_peak)
    *rss_peak = d.rss_peak;
  return dt;
}

/* Run `durable lua lua_figures.lua MODE URL NS KEY N` and return the one
 * number it prints (items/s). */
static double lua_figures(const char *mode, const char *url, const char *ns,
                          const char *key, long n) {
  char count[32];
  snprintf(count, sizeof count, "%ld", n);
  const char *args[] = {mode, url, ns, key, count, NULL};
  return lua_figure(opt.durable, opt.lua, args);
}

/* The same catch-up from a standby (PostgreSQL, with DURABLE_TEST_PG_STANDBY
 * naming one of T's server): a mesh whose read store it is, against the
 * mesh on the primary, alternately. */
static void fig_catchup_standby(const durable_stream_id_t *id, long n) {
  const char *standby = T->pg ? getenv("DURABLE_TEST_PG_STANDBY") : NULL;
  if (standby == NULL || *standby == '\0') {
    if (T->pg)
      printf("  (a standby's catch-up: set DURABLE_TEST_PG_STANDBY to a "
             "standby of this server)\n");
    return;
  }
  durable_mesh_options_t o = {
      .store = T->url, .read_store = standby, .log = log_line};
  durable_mesh_t *reader = NULL;
  durable_error_t err = {0};
  if (durable_mesh_open(&C.loop, &o, &reader, &err) < 0)
    die("cannot open a mesh reading %s: %s", standby, err.message);
  reader_run(reader, id, 0, n, NULL); /* untimed: once the standby has all */
  int reps = opt.reps;
  double prim[64], stby[64], ratio[64], rate_p[64], rate_s[64];
  for (int r = 0; r < reps; r++) {
    prim[r] = reader_run(M, id, 0, n, NULL);
    stby[r] = reader_run(reader, id, 0, n, NULL);
    ratio[r] = prim[r] / stby[r]; /* the standby's rate / the primary's */
    rate_p[r] = (double)n / prim[r];
    rate_s[r] = (double)n / stby[r];
  }
  mesh_close(&C, reader);
  print_rate("durable_stream_read from 0, on the primary", rate_p, reps,
             "items/s");
  print_rate("durable_stream_read from 0, read_store on a standby", rate_s,
             reps, "items/s");
  print_ratio("ratio standby / primary", ratio, reps, ">= 0.8x");
}

static void fig_catchup(void) {
  int reps = opt.reps;
  long n = opt.items, rows = 0;
  long tail_after = n > 1000 ? n - 1000 : 0;
  char key[128], items_ns[256];
  snprintf(key, sizeof key, "%s/catchup/o", T->partition);
  durable_stream_id_t id = {.ns = "Bench", .key = key};
  durable_stream_items_ns(&id, items_ns, sizeof items_ns);
  printf("[4] catch-up: a stream of %s items at %s/{seq:012}; %d runs\n",
         num((double)n), items_ns, reps);
  char keys[1][128];
  snprintf(keys[0], sizeof keys[0], "%s", key);
  put_owners(durable_mesh_store(M), keys, 1, "BenchOwner");
  /* items 1..n-1 as the stream hub writes them, then item n by a publish
   * (it makes the stream node with LastSequence n) */
  double fill = fill_items(&C, durable_mesh_store(M), items_ns, 1, n - 1, 1);
  publish_run("Bench", keys, 1, 1, 1);
  printf("  %-60s %12s rows/s   (%.1f s)\n",
         "fill: durable_store_write, batches of 1000, 8 in flight", num(fill),
         fill > 0 ? (double)(n - 1) / fill : 0);
  raw_open();
  raw_read(items_ns, 0, &rows); /* untimed: the same warm caches for all */
  if (rows != n)
    printf("  WARNING: the raw read found %ld items, expected %ld\n", rows, n);

  double rawt[64], full[64], lua[64], tail[TAIL_REPS];
  double r_full[64], r_lua[64], r_tail[64];
  long rss_before = rss_kib(), rss_peak = rss_before;
  for (int r = 0; r < reps; r++) {
    rawt[r] = raw_read(items_ns, 0, &rows);
    full[r] = reader_run(M, &id, 0, n, &rss_peak);
    lua[r] = lua_figures("read", T->url, "Bench", key, n);
    r_full[r] = rawt[r] / full[r];             /* our rate / raw rate */
    r_lua[r] = lua[r] / ((double)n / rawt[r]); /* Lua rate / raw rate */
  }
  long rss_after = rss_kib();
  for (int r = 0; r < TAIL_REPS; r++)
    tail[r] = reader_run(M, &id, tail_after, n, NULL);
  for (int r = 0; r < reps; r++)
    r_tail[r] = full[r] / median(tail, TAIL_REPS);
  double rate_raw[64], rate_full[64];
  for (int r = 0; r < reps; r++) {
    rate_raw[r] = (double)n / rawt[r];
    rate_full[r] = (double)n / full[r];
  }
  char label[128];
  snprintf(label, sizeof label, "raw read (%s)",
           T->pg ? "libpq, same database" : "sqlite3, same file");
  print_rate(label, rate_raw, reps, "rows/s");
  print_rate("durable_stream_read from 0", rate_full, reps, "items/s");
  print_rate("Lua read_durable from 0", lua, reps, "items/s");
  print_ratio("ratio durable_stream_read / raw", r_full, reps, ">= 0.5x");
  print_ratio("ratio Lua read_durable / raw", r_lua, reps, ">= 0.25x");
  snprintf(label, sizeof label, "durable_stream_read from %s (%s items)",
           num((double)tail_after), num((double)(n - tail_after)));
  printf("  %-60s %12.2f ms       %s\n", label, median(tail, TAIL_REPS) * 1e3,
         runs(tail, TAIL_REPS, 1e3, "%.1f"));
  print_ratio("ratio time from 0 / time from items-1000", r_tail, reps,
              ">= 100x");
  printf("  %-60s %12.1f MB       (VmRSS %s -> peak %s, end %s KiB)  "
         "[<= 50 MB]\n",
         "memory growth over the reads from 0",
         (double)(rss_peak - rss_before) / 1024, num((double)rss_before),
         num((double)rss_peak), num((double)rss_after));
  raw_close();
  fig_catchup_standby(&id, n);

  /* the Lua producer */
  double p1[64], lp[64], r_lp[64];
  for (int r = 0; r < reps; r++) {
    char tag[32];
    snprintf(tag, sizeof tag, "f4lr%d", r);
    char(*k)[128] = make_streams(tag, 1, 0);
    p1[r] = plain1(sz.plain1);
    lp[r] = lua_figures("produce", T->url, "Bench", k[0], sz.lua_pub);
    r_lp[r] = lp[r] / p1[r];
    free(k);
  }
  print_rate(T->plain1_name, p1, reps, "rows/s");
  print_rate("Lua publish_durable, 1 in flight", lp, reps, "items/s");
  print_ratio("ratio Lua 1 in flight / plain 1-row", r_lp, reps, ">= 0.8x");
}

/* ---- [5] latency ----------------------------------------------------------
 */

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct {
  long total, issued, handled, acked;
  double *lat, *pub_lat; /* ms */
  long npub;
  int64_t start_us;
  int warm, warm_saved, finished;
  uv_timer_t pace;
  char key[128];
} L;

static void lat_handler(durable_hub_t *hub, const durable_item_t *item,
                        durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  int64_t now = mono_us();
  C.progress++;
  const char *t = strstr(item->payload, "\"t\":");
  int64_t sent = t ? strtoll(t + 4, NULL, 10) : 0;
  if (item->sequence == 1) {
    L.warm = 1;
  } else if (sent > 0 && L.handled < L.total) {
    L.lat[L.handled++] = (double)(now - sent) / 1000.0;
    if (L.handled == L.total)
      L.finished = 1;
  }
  durable_reply_ok(done, NULL);
}

typedef struct {
  int64_t sent;
} lat_pub_t;

static void lat_published(int status, int64_t seq, const char *message,
                          void *data) {
  lat_pub_t *p = data;
  (void)seq;
  C.progress++;
  if (status < 0)
    die("durable_stream_publish failed: %s", message ? message : "");
  if (p->sent == 0)
    L.warm_saved = 1;
  if (p->sent > 0 && L.npub < L.total)
    L.pub_lat[L.npub++] = (double)(mono_us() - p->sent) / 1000.0;
  free(p);
}

static void lat_publish(int64_t stamp) {
  char payload[64];
  durable_error_t err = {0};
  durable_stream_id_t id = {.ns = "Lat", .key = L.key};
  lat_pub_t *p = malloc(sizeof *p);
  if (p == NULL)
    die("out of memory");
  p->sent = stamp;
  snprintf(payload, sizeof payload, "{\"t\":%" PRId64 "}", stamp);
  if (durable_stream_publish(client, &id, payload, lat_published, p, &err) < 0)
    die("durable_stream_publish refused: %s", err.message);
}

static void lat_tick(uv_timer_t *t) {
  (void)t;
  int64_t due = (mono_us() - L.start_us) / 1000 + 1; /* 1 per ms */
  if (due > L.total)
    due = L.total;
  while (L.issued < due) {
    L.issued++;
    lat_publish(mono_us());
  }
  if (L.issued >= L.total)
    uv_timer_stop(&L.pace);
}

static double pct(const double *sorted, long n, double p) {
  if (n <= 0)
    return 0;
  long i = (long)(p * (double)(n - 1) + 0.5);
  return sorted[i];
}

static int cmp_d(const void *a, const void *b) {
  return cmp_double(a, b);
}

/* The plain loop at the latency run's pace, for scale: every millisecond
 * two one-row commits, as an item costs a publish's commit and its
 * acknowledgement's; the first of each pair is timed.  Fills ms[0..total)
 * and sorts it. */
static void plain_paced(double *ms, long total) {
  int64_t start = mono_us();
  for (long i = 0; i < total; i++) {
    int64_t due = start + i * 1000;
    int64_t now = mono_us();
    if (now < due) {
      struct timespec ts = {0, (long)(due - now) * 1000};
      nanosleep(&ts, NULL);
    }
    int64_t t0 = mono_us();
    plain1(1);
    ms[i] = (double)(mono_us() - t0) / 1000.0;
    plain1(1);
  }
  qsort(ms, (size_t)total, sizeof *ms, cmp_d);
}

static void fig_latency(void) {
  memset(&L, 0, sizeof L);
  L.total = opt.seconds * 1000;
  L.lat = calloc((size_t)L.total, sizeof *L.lat);
  L.pub_lat = calloc((size_t)L.total, sizeof *L.pub_lat);
  if (!L.lat || !L.pub_lat)
    die("out of memory");
  printf("[5] latency publish -> handler entry: 1,000 items/s for %ld s to "
         "one stream,\n    consumed in the same process\n",
         opt.seconds);
  char keys[1][128];
  snprintf(L.key, sizeof L.key, "%s/lat/o", T->partition);
  snprintf(keys[0], sizeof keys[0], "%s", L.key);
  put_owners(durable_mesh_store(M), keys, 1, "BenchOwner");
  durable_error_t err = {0};
  durable_hub_t *h;
  /* one item first, so that the stream exists when the consumer starts;
   * its handling says the consumer holds the lease */
  lat_publish(0);
  run_until(&C, &L.warm_saved, "publishing the first latency item");
  if (durable_mesh_client(M, "client/latency", &h, &err) < 0)
    die("durable_mesh_client: %s", err.message);
  dstream_t ks = {0};
  snprintf(ks.key, sizeof ks.key, "%s", L.key);
  durable_consumer_t cons = {
      .ns = "Lat", .key_of = drain_key_of, .handler = lat_handler, .data = &ks};
  if (durable_hub_consume(h, &cons, NULL, &err) < 0)
    die("durable_hub_consume: %s", err.message);
  run_until(&C, &L.warm, "waiting for the first latency item");
  uv_timer_init(&C.loop, &L.pace);
  L.start_us = mono_us();
  uv_timer_start(&L.pace, lat_tick, 1, 1);
  run_until(&C, &L.finished, "the paced latency run");
  double elapsed = (double)(mono_us() - L.start_us) / 1e6;
  uv_close((uv_handle_t *)&L.pace, NULL);
  const char *lat_hub = "client/latency";
  recycle_hubs(&lat_hub, 1);
  qsort(L.lat, (size_t)L.handled, sizeof *L.lat, cmp_d);
  qsort(L.pub_lat, (size_t)L.npub, sizeof *L.pub_lat, cmp_d);
  printf("  %-60s %12s items in %.2f s (%.0f items/s)\n", "handled",
         num((double)L.handled), elapsed, L.handled / elapsed);
  printf("  %-60s %12.2f ms  [no target]\n", "publish -> handler p50",
         pct(L.lat, L.handled, 0.5));
  printf("  %-60s %12.2f ms  [<= 2 ms]\n", "publish -> handler p99",
         pct(L.lat, L.handled, 0.99));
  printf("  %-60s %12.2f ms  [<= 20 ms]\n", "publish -> handler max",
         L.handled ? L.lat[L.handled - 1] : 0);
  printf("  %-60s %12.2f ms  (p99 %.2f ms, max %.2f ms)\n",
         "publish -> sequence back p50", pct(L.pub_lat, L.npub, 0.5),
         pct(L.pub_lat, L.npub, 0.99), L.npub ? L.pub_lat[L.npub - 1] : 0);
  plain_paced(L.lat, L.total);
  printf("  %-60s %12.2f ms  (p99 %.2f ms, max %.2f ms)\n",
         "for scale: plain commit at that pace, p50", pct(L.lat, L.total, 0.5),
         pct(L.lat, L.total, 0.99), L.total ? L.lat[L.total - 1] : 0);
  free(L.lat);
  free(L.pub_lat);
}

/* ---- [6] several producer processes (PostgreSQL) ----------------------------
 */

/* The child: stream_bench --producer URL PREFIX SECONDS START_MS.  It
 * publishes to PREFIX/o0..o3 with MULTI_INFLIGHT in flight on each from
 * START_MS for SECONDS, then prints "ok failed deadlocks". */
typedef struct {
  pub_t *d;
  int64_t stop_ms;
} child_t;

static void child_publish(pub_t *d, int s);

static child_t child;

static void child_done(int status, int64_t seq, const char *message,
                       void *data) {
  pub_slot_t *slot = data;
  pub_t *d = slot->d;
  (void)seq;
  C.progress++;
  if (status < 0) {
    if (d->failed++ == 0)
      snprintf(d->first_failure, sizeof d->first_failure, "%s",
               message ? message : "");
    if (message && strstr(message, "deadlock detected"))
      logs.deadlock++;
  } else {
    d->total_done++;
  }
  d->done[slot->s]++;
  child_publish(d, slot->s);
}

static void child_publish(pub_t *d, int s) {
  durable_error_t err = {0};
  char payload[64];
  if (wall_ms() >= child.stop_ms) {
    int idle = 1;
    for (int i = 0; i < d->nstreams; i++)
      if (d->issued[i] != d->done[i])
        idle = 0;
    if (idle)
      d->finished = 1;
    return;
  }
  while (d->issued[s] - d->done[s] < d->inflight) {
    durable_stream_id_t id = {.ns = "Multi", .key = d->keys[s]};
    snprintf(payload, sizeof payload, "{\"pid\":%d,\"i\":%ld}", (int)getpid(),
             ++d->issued[s]);
    if (durable_stream_publish(d->hub, &id, payload, child_done, &d->slots[s],
                               &err) < 0)
      die("durable_stream_publish refused: %s", err.message);
  }
}

static int child_main(int argc, char **argv) {
  if (argc < 6)
    return 2;
  const char *url = argv[2], *prefix = argv[3];
  long seconds = atol(argv[4]);
  int64_t start = atoll(argv[5]);
  pub_t *d = calloc(1, sizeof *d);
  char(*keys)[128] = calloc(MULTI_STREAMS, sizeof *keys);
  if (!d || !keys)
    return 1;
  ctx_init(&C);
  M = mesh_open(&C, url, log_line);
  durable_error_t err = {0};
  char addr[64];
  snprintf(addr, sizeof addr, "client/producer-%d", (int)getpid());
  if (durable_mesh_client(M, addr, &client, &err) < 0)
    die("durable_mesh_client: %s", err.message);
  durable_hub_ref(client);
  for (int i = 0; i < MULTI_STREAMS; i++) {
    snprintf(keys[i], sizeof keys[i], "%.100s/o%d", prefix, i);
    d->slots[i] = (pub_slot_t){d, i};
  }
  d->hub = client;
  d->keys = keys;
  d->nstreams = MULTI_STREAMS;
  d->inflight = MULTI_INFLIGHT;
  child.d = d;
  child.stop_ms = start + seconds * 1000;
  while (wall_ms() < start)
    usleep(1000);
  for (int s = 0; s < MULTI_STREAMS; s++)
    child_publish(d, s);
  run_until(&C, &d->finished, "publishing from a producer process");
  printf("%ld %ld %ld\n", d->total_done, d->failed, logs.deadlock);
  if (d->failed)
    fprintf(stderr, "  producer %d: first failure: %s\n", (int)getpid(),
            d->first_failure);
  fflush(stdout);
  main_close();
  free(d);
  free(keys);
  return 0;
}

typedef struct {
  long last;
  int finished;
} last_t;

static void stream_last_got(const durable_result_t *r, void *data) {
  last_t *v = data;
  C.progress++;
  const char *p = r->status == 0 && r->node->content
                      ? strstr(r->node->content, "\"LastSequence\":")
                      : NULL;
  v->last = p ? strtol(p + 15, NULL, 10) : -1;
  v->finished = 1;
}

static void fig_multi(void) {
  char prefix[128], self[PATH_MAX];
  long secs = sz.multi_s;
  snprintf(prefix, sizeof prefix, "%s/multi", T->partition);
  printf("[6] %d producer processes, each with %d publishes in flight on each "
         "of the same\n    %d streams, for %ld s\n",
         MULTI_PROCS, MULTI_INFLIGHT, MULTI_STREAMS, secs);
  char keys[MULTI_STREAMS][128];
  for (int i = 0; i < MULTI_STREAMS; i++)
    snprintf(keys[i], sizeof keys[i], "%.100s/o%d", prefix, i);
  put_owners(durable_mesh_store(M), keys, MULTI_STREAMS, "BenchOwner");
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    die("readlink /proc/self/exe: %s", strerror(errno));
  self[n] = 0;
  double p1 = plain1(sz.plain1);
  char secs_s[32], start_s[32];
  snprintf(secs_s, sizeof secs_s, "%ld", secs);
  /* the children open their meshes first, then all start together */
  snprintf(start_s, sizeof start_s, "%" PRId64, wall_ms() + 2000);
  pid_t pids[MULTI_PROCS];
  int fds[MULTI_PROCS];
  fflush(stdout);
  for (int i = 0; i < MULTI_PROCS; i++) {
    int fd[2];
    if (pipe(fd) != 0)
      die("pipe: %s", strerror(errno));
    pids[i] = fork();
    if (pids[i] < 0)
      die("fork: %s", strerror(errno));
    if (pids[i] == 0) {
      dup2(fd[1], 1);
      close(fd[0]);
      close(fd[1]);
      alarm((unsigned)(secs + STALL_SECONDS + 10));
      execl(self, self, "--producer", T->url, prefix, secs_s, start_s,
            (char *)NULL);
      _exit(127);
    }
    close(fd[1]);
    fds[i] = fd[0];
  }
  long ok = 0, failed = 0, deadlocks = 0, bad = 0;
  for (int i = 0; i < MULTI_PROCS; i++) {
    char out[256];
    size_t o = 0;
    ssize_t k;
    while (o < sizeof out - 1 &&
           (k = read(fds[i], out + o, sizeof out - 1 - o)) > 0)
      o += (size_t)k;
    out[o] = 0;
    close(fds[i]);
    int status;
    waitpid(pids[i], &status, 0);
    long a = 0, b = 0, c = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
        sscanf(out, "%ld %ld %ld", &a, &b, &c) != 3) {
      printf("  producer %d failed (status %d): %s\n", i, status, out);
      bad++;
    }
    ok += a, failed += b, deadlocks += c;
  }
  if (bad)
    die("%ld of %d producer processes failed", bad, MULTI_PROCS);
  /* every saved item is counted once: the streams' LastSequence adds up */
  long last_sum = 0;
  for (int i = 0; i < MULTI_STREAMS; i++) {
    last_t v = {0};
    char path[256];
    durable_error_t err = {0};
    durable_stream_id_t id = {.ns = "Multi", .key = keys[i]};
    durable_stream_path(&id, path, sizeof path);
    if (durable_store_get(durable_mesh_store(M), NULL, path, stream_last_got,
                          &v, &err) < 0)
      die("durable_store_get: %s", err.message);
    run_until(&C, &v.finished, "reading a stream node");
    last_sum += v.last;
  }
  double rate = (double)ok / (double)secs;
  printf("  %-60s %12s rows/s\n", T->plain1_name, num(p1));
  printf("  %-60s %12s items/s  (%s saved, %ld failed)\n",
         "total rate of the 4 processes", num(rate), num((double)ok), failed);
  printf("  %-60s %11.2fx          [no target]\n", "ratio total / plain 1-row",
         rate / p1);
  printf("  %-60s %12ld          [0]\n", "\"deadlock detected\" seen",
         deadlocks);
  if (last_sum != ok)
    printf("  WARNING: the streams' LastSequence add up to %ld, the "
           "producers saw %ld sequences\n",
           last_sum, ok);
}

/* ---- one store -------------------------------------------------------------
 */

/* Every figure on the store T (target_sqlite / target_postgres). */
static void run_target(void) {
  target_t *t = T;
  memset(&logs, 0, sizeof logs);
  main_open(t->url);
  /* the plain loops' rates, for the header */
  double a = plain1(sz.plain1), b = plain100(sz.plain100),
         c = plain100s(sz.plain100);
  printf("  %-60s %12s rows/s\n", t->plain1_name, num(a));
  printf("  %-60s %12s rows/s\n", t->plain100_name, num(b));
  printf("  %-60s %12s rows/s\n", t->plain100s_name, num(c));
  fflush(stdout);
  if (want(1) || want(2))
    fig_producers();
  if (want(3))
    fig_drain();
  if (want(4))
    fig_catchup();
  if (want(5))
    fig_latency();
  if (want(6) && t->pg)
    fig_multi();
  main_close();
  printf("  log lines: %ld warnings, %ld errors, %ld \"deadlock detected\"\n",
         logs.warn, logs.error, logs.deadlock);
}

static void run_sqlite(void) {
  target_sqlite("durable-stream-bench", run_target);
}

static void run_postgres(const char *url) {
  target_postgres(url, "sbench", run_target);
}

/* ---- main -----------------------------------------------------------------
 */

int main(int argc, char **argv) {
  bench_name = "stream_bench";
  bench_usage = usage;
  if (argc > 1 && strcmp(argv[1], "--producer") == 0)
    return child_main(argc, argv);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--items") == 0)
      opt.items = parse_long(v, a, 2), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), opt.reps_given = 1, i++;
    else if (strcmp(a, "--seconds") == 0)
      opt.seconds = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--quick") == 0)
      opt.quick = 1;
    else if (strcmp(a, "--durable") == 0 && v)
      opt.durable = v, i++;
    else if (strcmp(a, "--lua") == 0 && v)
      opt.lua = v, i++;
    else if (strcmp(a, "--figures") == 0 && v)
      opt.figures |= parse_figures(v, 6), i++;
    else if (strcmp(a, "--only") == 0)
      opt.only = parse_only(v), i++;
    else
      other_arg(a);
  }
  if (opt.quick) {
    sz.plain1 = 100, sz.plain100 = 2000, sz.single = 100, sz.in16 = 320;
    sz.in64 = 640, sz.drain1 = 200, sz.drain64 = 10, sz.lua_pub = 100;
    sz.multi_s = 2;
    if (opt.items == 1000000)
      opt.items = 20000;
    if (opt.seconds == 10)
      opt.seconds = 2;
    if (!opt.reps_given)
      opt.reps = 1;
  }
  if (opt.reps > 64)
    opt.reps = 64;
  if (opt.lua == NULL)
    opt.lua = STREAM_BENCH_LUA;
  if (opt.durable == NULL)
    opt.durable = find_durable(STREAM_BENCH_DURABLE);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("stream_bench: durable %s, %ld catch-up items, medians of %d runs; "
         "Lua figures by %s\n",
         DURABLE_VERSION_STRING, opt.items, opt.reps, opt.durable);
  run_stores(opt.only, run_sqlite, run_postgres);
  return 0;
}

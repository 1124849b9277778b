/*
 * store_bench.c: figures for the mesh node store, each measured beside the
 * store's own limit in the same run (see tests/bench/README.md).
 *
 *   (1) group commit: N single-node puts with 64 in flight, and with 1 in
 *       flight, against a plain loop of one-row commits with the same
 *       durability on a separate connection and file/schema;
 *   (2) range read: a stream of 1,000,000 items, reading the last 1,000
 *       against reading all of them from 0 in pages of 1,000, and a raw range
 *       read of the same table on the same database;
 *   (3) both again on PostgreSQL when DURABLE_TEST_PG is set.
 *
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS), since then there
 * is no figure to print.  Every comparison is a ratio taken within one
 * repetition (the two sides run back to back, interleaved), reported as the
 * median over the repetitions: the machine is shared and noisy.
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define INFLIGHT 64 /* concurrent puts for the group commit figure */
#define PAGE 1000   /* page size of every range read */
#define TAIL_REPS 9 /* repetitions of the (cheap) tail read */

/* ---- options ------------------------------------------------------------ */

static struct {
  long writes;
  long items;
  int reps;
  const char *only; /* NULL, "sqlite" or "postgres" */
} opt = {20000, 1000000, 3, NULL};

static void usage(FILE *f) {
  fprintf(f,
          "usage: store_bench [--writes N] [--items N] [--reps N] "
          "[--only sqlite|postgres]\n"
          "  --writes N  figure 1: puts per run with 64 in flight; the "
          "plain loop and\n"
          "              the single producer write N/4 (at least 1000) "
          "(default 20000)\n"
          "  --items N   length of the stream of figure 2 (default 1000000)\n"
          "  --reps N    repetitions; medians are printed (default 3)\n"
          "  --only S    run one store only\n"
          "PostgreSQL runs when DURABLE_TEST_PG holds a libpq URL.\n");
}

/* ---- (1) writes through the store ---------------------------------------- */

typedef struct {
  ctx_t *c;
  const char *prefix; /* namespace of the written nodes */
  long n, issued, done;
  long inflight;
  int issuing, finished;
} wdrv_t;

static void w_issue(wdrv_t *d);

static void w_done(const durable_result_t *r, void *data) {
  wdrv_t *d = data;
  d->c->progress++;
  if (r->status < 0)
    die("put failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  if (++d->done == d->n)
    d->finished = 1;
  w_issue(d);
}

static void w_issue(wdrv_t *d) {
  char path[256], content[128];
  durable_error_t err = {0};
  if (d->issuing)
    return; /* a callback run from inside a put */
  d->issuing = 1;
  while (d->issued < d->n && d->issued - d->done < d->inflight) {
    long i = d->issued++;
    snprintf(path, sizeof path, "%s/n%07ld", d->prefix, i);
    item_content(content, sizeof content, i);
    int rc = durable_store_put(d->c->store, path, "BenchNode", content, w_done,
                               d, &err);
    if (rc < 0)
      die("durable_store_put(%s) refused: %s (%s)", path, err.message,
          durable_err_name(rc));
  }
  d->issuing = 0;
}

/* writes/s of n distinct puts with `inflight` in flight. */
static double store_puts(ctx_t *c, const char *prefix, long n, long inflight) {
  wdrv_t d = {.c = c, .prefix = prefix, .n = n, .inflight = inflight};
  double t0 = now_s();
  w_issue(&d);
  run_until(c, &d.finished, "writing single nodes");
  return (double)n / (now_s() - t0);
}

/* ---- (2) filling and reading a stream ------------------------------------ */

typedef struct {
  ctx_t *c;
  const char *items_ns;
  int64_t after;
  long rows;
  int finished, order_ok;
} rdrv_t;

static void r_issue(rdrv_t *d);

static void r_done(const durable_result_t *r, void *data) {
  rdrv_t *d = data;
  d->c->progress++;
  if (r->status < 0)
    die("read_items failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  for (size_t i = 0; i < r->count; i++) {
    int64_t seq = strtoll(r->nodes[i]->id, NULL, 10);
    if (seq != d->after + 1)
      d->order_ok = 0;
    d->after = seq;
  }
  d->rows += (long)r->count;
  if (r->count == 0 || !r->more)
    d->finished = 1;
  else
    r_issue(d);
}

static void r_issue(rdrv_t *d) {
  durable_error_t err = {0};
  int rc = durable__store_read_items(d->c->store, NULL, d->items_ns, d->after,
                                     PAGE, r_done, d, &err);
  if (rc < 0)
    die("durable__store_read_items refused: %s (%s)", err.message,
        durable_err_name(rc));
}

/* Seconds to read every item after `after`, page by page; *rows gets the
 * number read, and a warning is printed when they are not after+1, after+2..
 */
static double store_range(ctx_t *c, const char *items_ns, int64_t after,
                          long *rows) {
  rdrv_t d = {.c = c, .items_ns = items_ns, .after = after, .order_ok = 1};
  double t0 = now_s();
  r_issue(&d);
  run_until(c, &d.finished, "reading items");
  double dt = now_s() - t0;
  if (!d.order_ok)
    printf("  WARNING: read_items after %" PRId64
           " returned sequences with gaps or out of order\n",
           after);
  *rows = d.rows;
  return dt;
}

/* The raw range read on SQLite: the same statement shape the store would
 * use, all columns fetched as text, paging by the last id. */
static double raw_sqlite_range(sqlite3 *db, const char *ns, int64_t after,
                               long *rows) {
  static sqlite3_stmt *st;
  static sqlite3 *st_db;
  char cursor[32];
  if (st_db != db) {
    if (st)
      sqlite3_finalize(st);
    st = NULL;
    st_db = db;
    if (db == NULL)
      return 0; /* just finalize */
    sq_check(db,
             sqlite3_prepare_v2(db,
                                "SELECT " PLAIN_COLUMNS
                                " FROM durable_stream_items WHERE namespace = "
                                "?1 AND id > ?2 ORDER BY id LIMIT ?3",
                                -1, &st, NULL),
             "prepare raw range read");
  }
  snprintf(cursor, sizeof cursor, "%012" PRId64, after);
  *rows = 0;
  double t0 = now_s();
  for (;;) {
    long page = 0;
    sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, cursor, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, PAGE);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      for (int col = 0; col < 9; col++) {
        if (col < 6)
          sink += (size_t)(sqlite3_column_text(st, col) != NULL) +
                  (size_t)sqlite3_column_bytes(st, col);
        else
          sink += (size_t)sqlite3_column_int64(st, col);
      }
      snprintf(cursor, sizeof cursor, "%s",
               (const char *)sqlite3_column_text(st, 1));
      page++;
    }
    sq_check(db, rc, "raw range read");
    sqlite3_reset(st);
    *rows += page;
    if (page < PAGE)
      break;
  }
  return now_s() - t0;
}

/* The raw range read on PostgreSQL: one prepared statement, one round trip
 * per page, every column fetched as text. */
static double raw_pg_range(PGconn *conn, const char *ns, int64_t after,
                           long *rows) {
  char cursor[32], limit[16];
  snprintf(cursor, sizeof cursor, "%012" PRId64, after);
  snprintf(limit, sizeof limit, "%d", PAGE);
  *rows = 0;
  double t0 = now_s();
  for (;;) {
    const char *vals[3] = {ns, cursor, limit};
    PGresult *res = PQexecPrepared(conn, "raw_range", 3, vals, NULL, NULL, 0);
    pg_ok(conn, res, "raw range read");
    int n = PQntuples(res);
    for (int i = 0; i < n; i++)
      for (int col = 0; col < 9; col++)
        sink += (size_t)PQgetlength(res, i, col) +
                (size_t)(PQgetvalue(res, i, col)[0] != 0);
    if (n)
      snprintf(cursor, sizeof cursor, "%s", PQgetvalue(res, n - 1, 1));
    PQclear(res);
    *rows += n;
    if (n < PAGE)
      break;
  }
  return now_s() - t0;
}

/* ---- one store: figures (1) and (2) -------------------------------------- */

typedef struct {
  const char *label;      /* "SQLite" / "PostgreSQL" */
  const char *url;        /* store URL */
  const char *partition;  /* first path segment of everything written */
  const char *plain_name; /* "plain sqlite loop" / "plain libpq loop" */
  /* the plain one-row commit loop */
  double (*plain_rows)(void *plain, const char *ns, long n);
  void *plain;
  /* the raw range read: seconds, rows */
  double (*raw_range)(void *raw, const char *ns, int64_t after, long *rows);
  void *raw;
  void (*raw_open)(void *raw, const char *partition);
} target_t;

static void check_rows(const char *what, long got, long want) {
  if (got != want)
    printf("  WARNING: %s returned %ld rows, expected %ld\n", what, got, want);
}

static void run_target(target_t *t) {
  ctx_t c;
  char ns[256];
  int reps = opt.reps;
  double plain[64], group[64], single[64], r_group[64], r_single[64];

  ctx_open(&c, t->url);

  /* (1) group commit: interleaved per repetition, so that the noise of the
   * machine lands on both sides of each ratio. */
  /* one-at-a-time rates are bound by the commit latency: a quarter of the
   * writes measures them as well and saves most of the run time */
  long slow_n = opt.writes / 4 > 1000 ? opt.writes / 4 : opt.writes;
  printf("[1] group commit: %s distinct single-node writes per run with %d "
         "in flight, %s one at a time; %d runs\n",
         num((double)opt.writes), INFLIGHT, num((double)slow_n), reps);
  fflush(stdout);
  for (int r = 0; r < reps; r++) {
    snprintf(ns, sizeof ns, "%s/plain/r%d", t->partition, r);
    plain[r] = t->plain_rows(t->plain, ns, slow_n);
    snprintf(ns, sizeof ns, "%s/w/c%d_r%d", t->partition, INFLIGHT, r);
    group[r] = store_puts(&c, ns, opt.writes, INFLIGHT);
    snprintf(ns, sizeof ns, "%s/w/c1_r%d", t->partition, r);
    single[r] = store_puts(&c, ns, slow_n, 1);
    r_group[r] = group[r] / plain[r];
    r_single[r] = single[r] / plain[r];
  }
  printf("  %-44s %12s rows/s    %s\n", t->plain_name, num(median(plain, reps)),
         runs(plain, reps, 1, "%.0f"));
  printf("  %-44s %12s writes/s  %s\n", "store, 64 puts in flight",
         num(median(group, reps)), runs(group, reps, 1, "%.0f"));
  printf("  %-44s %12s writes/s  %s\n", "store, 1 put in flight",
         num(median(single, reps)), runs(single, reps, 1, "%.0f"));
  printf("  %-44s %12.2fx           %s  (target: >= 5)\n",
         "ratio 64 in flight / plain", median(r_group, reps),
         runs(r_group, reps, 1, "%.2f"));
  printf("  %-44s %12.2fx           %s  (target: >= 0.8)\n",
         "ratio 1 in flight / plain", median(r_single, reps),
         runs(r_single, reps, 1, "%.2f"));
  fflush(stdout);

  /* (2) range read. */
  long n = opt.items;
  int64_t tail_after = n > PAGE ? n - PAGE : 0;
  long tail_want = n - (long)tail_after, rows = 0;
  char items_ns[256];
  snprintf(items_ns, sizeof items_ns,
           "%s/s/_DurableStream/Log/_DurableStreamItem", t->partition);
  printf("[2] range read: stream of %s items at %s/{seq:012}\n", num((double)n),
         items_ns);
  fflush(stdout);
  double fill = fill_items(&c, c.store, items_ns, 1, n, 0);
  printf("  %-44s %12s rows/s    (%.1f s)\n",
         "fill: batches of 1000 writes, 8 in flight", num(fill), n / fill);
  fflush(stdout);
  t->raw_open(t->raw, t->partition);

  double tail[TAIL_REPS], full[64], raw_tail[TAIL_REPS], raw_full[64];
  double r_full_tail[64], r_raw[64], r_raw_tail[TAIL_REPS];
  long rss_before = rss_kib(), rss_peak = rss_before;
  /* one untimed read of each to warm the caches the same way */
  store_range(&c, items_ns, tail_after, &rows);
  t->raw_range(t->raw, items_ns, tail_after, &rows);
  for (int r = 0; r < TAIL_REPS; r++) {
    tail[r] = store_range(&c, items_ns, tail_after, &rows);
    check_rows("store tail read", rows, tail_want);
    raw_tail[r] = t->raw_range(t->raw, items_ns, tail_after, &rows);
    check_rows("raw tail read", rows, tail_want);
    r_raw_tail[r] = tail[r] / raw_tail[r];
  }
  for (int r = 0; r < reps; r++) {
    full[r] = store_range(&c, items_ns, 0, &rows);
    check_rows("store full read", rows, n);
    long rss = rss_kib();
    if (rss > rss_peak)
      rss_peak = rss;
    raw_full[r] = t->raw_range(t->raw, items_ns, 0, &rows);
    check_rows("raw full read", rows, n);
    r_full_tail[r] = full[r] / median(tail, TAIL_REPS);
    r_raw[r] = raw_full[r] / full[r]; /* our rate / raw rate */
  }
  char label[128];
  snprintf(label, sizeof label, "store: items after %s (%s rows)",
           num((double)tail_after), num((double)tail_want));
  printf("  %-44s %12.3f ms        %s\n", label, median(tail, TAIL_REPS) * 1e3,
         runs(tail, TAIL_REPS, 1e3, "%.2f"));
  printf("  %-44s %12.1f ms        %s\n",
         "store: all items from 0, pages of 1000", median(full, reps) * 1e3,
         runs(full, reps, 1e3, "%.0f"));
  printf("  %-44s %12s rows/s\n", "store: full read rate",
         num(n / median(full, reps)));
  printf("  %-44s %12.0fx           (target: >= 100)\n", "ratio full / tail",
         median(r_full_tail, reps));
  printf("  %-44s %12.3f ms        %s\n", "raw: tail read",
         median(raw_tail, TAIL_REPS) * 1e3,
         runs(raw_tail, TAIL_REPS, 1e3, "%.2f"));
  printf("  %-44s %12.1f ms        %s\n", "raw: full read, pages of 1000",
         median(raw_full, reps) * 1e3, runs(raw_full, reps, 1e3, "%.0f"));
  printf("  %-44s %12s rows/s\n", "raw: full read rate",
         num(n / median(raw_full, reps)));
  printf("  %-44s %12.2fx           %s  (target: >= 0.5)\n",
         "ratio store / raw, full read rate", median(r_raw, reps),
         runs(r_raw, reps, 1, "%.2f"));
  printf("  %-44s %12.2fx\n", "ratio store / raw, tail read time",
         median(r_raw_tail, TAIL_REPS));
  printf("  %-44s %12s KiB      (before the full reads: %s KiB)\n",
         "resident memory after the full reads", num((double)rss_peak),
         num((double)rss_before));
  fflush(stdout);

  ctx_close(&c);
}

/* ---- SQLite -----------------------------------------------------------------
 */

typedef struct {
  char file[512];
  sqlite3 *db;
} raw_sqlite_t;

static double sqlite_plain_rows(void *p, const char *ns, long n) {
  return plain_sqlite_rows(p, ns, n);
}

static void sqlite_raw_open(void *p, const char *partition) {
  raw_sqlite_t *r = p;
  (void)partition;
  sq_check(NULL, sqlite3_open_v2(r->file, &r->db, SQLITE_OPEN_READONLY, NULL),
           "open store file read-only");
}

static double sqlite_raw_range(void *p, const char *ns, int64_t after,
                               long *rows) {
  return raw_sqlite_range(((raw_sqlite_t *)p)->db, ns, after, rows);
}

static void run_sqlite(void) {
  const char *tmpdir = tmpdir_make("durable-bench");

  char url[600];
  raw_sqlite_t raw = {0};
  plain_sqlite_t plain = {0};
  plain_sqlite_start(&plain, tmpdir, raw.file, sizeof raw.file, url,
                     sizeof url);
  target_t t = {.label = "SQLite",
                .url = url,
                .partition = "Bench",
                .plain_name = "plain sqlite loop, 1 row/commit (WAL, FULL)",
                .plain_rows = sqlite_plain_rows,
                .plain = &plain,
                .raw_range = sqlite_raw_range,
                .raw = &raw,
                .raw_open = sqlite_raw_open};
  run_target(&t);

  raw_sqlite_range(NULL, NULL, 0, NULL); /* finalizes the statement */
  sqlite3_close(raw.db);
  plain_sqlite_close(&plain);
  tmpdir_remove();
}

/* ---- PostgreSQL
 * -------------------------------------------------------------- */

typedef struct {
  const char *url;
  PGconn *conn;
} raw_pg_t;

static double pg_plain_rows(void *p, const char *ns, long n) {
  return plain_pg_rows(p, ns, n);
}

static void pg_raw_open(void *p, const char *partition) {
  raw_pg_t *r = p;
  char sql[512];
  r->conn = pg_connect(r->url);
  char *schema = PQescapeIdentifier(r->conn, partition, strlen(partition));
  snprintf(sql, sizeof sql,
           "SELECT " PLAIN_COLUMNS " FROM %s.durable_stream_items "
           "WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3::int",
           schema);
  PQfreemem(schema);
  PGresult *res = PQprepare(r->conn, "raw_range", sql, 3, NULL);
  pg_ok(r->conn, res,
        "prepare raw range read (is the partition's schema "
        "named after the partition?)");
  PQclear(res);
}

static double pg_raw_range(void *p, const char *ns, int64_t after, long *rows) {
  return raw_pg_range(((raw_pg_t *)p)->conn, ns, after, rows);
}

static void run_postgres(const char *url) {
  char partition[64];
  fresh_partition("bench", partition, sizeof partition);
  plain_pg_t plain = {0};
  raw_pg_t raw = {.url = url};
  plain_pg_start(&plain, url, partition);
  target_t t = {.label = "PostgreSQL",
                .url = url,
                .partition = partition,
                .plain_name = "plain libpq loop, 1 row/commit",
                .plain_rows = pg_plain_rows,
                .plain = &plain,
                .raw_range = pg_raw_range,
                .raw = &raw,
                .raw_open = pg_raw_open};
  run_target(&t);
  if (raw.conn)
    PQfinish(raw.conn);
  plain_pg_close(&plain);
}

/* ---- main
 * --------------------------------------------------------------------- */

int main(int argc, char **argv) {
  bench_name = "store_bench";
  bench_usage = usage;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--writes") == 0)
      opt.writes = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--items") == 0)
      opt.items = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), i++;
    else if (strcmp(a, "--only") == 0)
      opt.only = parse_only(v), i++;
    else
      other_arg(a);
  }
  if (opt.reps > 64)
    opt.reps = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);

  printf("store_bench: durable %s, %ld writes per run, %ld items, medians of "
         "%d runs (tail reads: %d)\n",
         DURABLE_VERSION_STRING, opt.writes, opt.items, opt.reps, TAIL_REPS);
  run_stores(opt.only, run_sqlite, run_postgres);
  return 0;
}

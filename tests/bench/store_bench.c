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
#include <durable.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define INFLIGHT 64       /* concurrent puts for the group commit figure */
#define PAGE 1000         /* page size of every range read */
#define FILL_BATCH 1000   /* writes per durable_store_write while filling */
#define FILL_INFLIGHT 8   /* fill batches in flight */
#define TAIL_REPS 9       /* repetitions of the (cheap) tail read */
#define STALL_SECONDS 120 /* no progress for this long: give up */

/* ---- small helpers ------------------------------------------------------ */

/* What the raw reads add their column bytes to, so that fetching them is not
 * optimised away. */
static volatile size_t sink;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double s[64];
  if (n <= 0)
    return 0;
  if (n > 64)
    n = 64;
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* 1234567.8 -> "1,234,568" (in one of a few rotating buffers). */
static const char *num(double x) {
  static char bufs[8][32];
  static int k;
  char *out = bufs[k++ & 7], tmp[32];
  snprintf(tmp, sizeof tmp, "%.0f", x < 0 ? -x : x);
  size_t n = strlen(tmp), o = 0;
  if (x < 0)
    out[o++] = '-';
  for (size_t i = 0; i < n; i++) {
    if (i && (n - i) % 3 == 0)
      out[o++] = ',';
    out[o++] = tmp[i];
  }
  out[o] = 0;
  return out;
}

/* The repetitions, for judging the noise: "(a b c)". */
static const char *runs(const double *v, int n, double scale, const char *fmt) {
  static char bufs[4][256];
  static int k;
  char *out = bufs[k++ & 3];
  size_t o = 0;
  out[o++] = '(';
  for (int i = 0; i < n && o < 200; i++) {
    if (i)
      out[o++] = ' ';
    o += (size_t)snprintf(out + o, 256 - o, fmt, v[i] * scale);
  }
  snprintf(out + o, 256 - o, ")");
  return out;
}

static long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
    resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "\nstore_bench: ");
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

static void item_content(char *buf, size_t size, long long seq) {
  snprintf(buf, size,
           "{\"Sequence\":%lld,\"PayloadJson\":\"{\\\"i\\\":%lld}\"}", seq,
           seq);
}

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

static long parse_long(const char *s, const char *name, long min) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (s == NULL || errno || *end || v < min) {
    fprintf(stderr, "store_bench: %s needs a number >= %ld\n", name, min);
    usage(stderr);
    exit(2);
  }
  return v;
}

/* ---- running a loop until something is done ------------------------------ */

typedef struct {
  uv_loop_t loop;
  uv_timer_t watchdog;
  durable_store_t *store;
  const char *what;  /* what we are waiting for, for the stall message */
  uint64_t progress; /* bumped by every callback */
  uint64_t seen;     /* progress at the last watchdog tick */
  int idle_ticks;
} ctx_t;

static void watchdog_tick(uv_timer_t *t) {
  ctx_t *c = t->data;
  if (c->progress != c->seen) {
    c->seen = c->progress;
    c->idle_ticks = 0;
  } else if (++c->idle_ticks >= STALL_SECONDS) {
    die("no progress for %d s while %s: the store stalled", STALL_SECONDS,
        c->what);
  }
}

/* Run the loop until *flag; the watchdog timer keeps uv_run from spinning
 * when the store has no active handle and turns a hang into a message. */
static void run_until(ctx_t *c, const int *flag, const char *what) {
  c->what = what;
  c->idle_ticks = 0;
  c->seen = c->progress;
  uv_timer_start(&c->watchdog, watchdog_tick, 1000, 1000);
  while (!*flag)
    uv_run(&c->loop, UV_RUN_ONCE);
  uv_timer_stop(&c->watchdog);
}

static void ctx_open(ctx_t *c, const char *url) {
  durable_error_t err = {0};
  memset(c, 0, sizeof *c);
  if (uv_loop_init(&c->loop) != 0)
    die("uv_loop_init failed");
  uv_timer_init(&c->loop, &c->watchdog);
  c->watchdog.data = c;
  int rc = durable_store_open(&c->loop, url, &c->store, &err);
  if (rc < 0)
    die("cannot open store %s: %s (%s)", url, err.message,
        durable_err_name(rc));
}

static void closed_cb(void *data) {
  *(int *)data = 1;
}

static void ctx_close(ctx_t *c) {
  int closed = 0;
  durable_store_close(c->store, closed_cb, &closed);
  run_until(c, &closed, "closing the store");
  uv_close((uv_handle_t *)&c->watchdog, NULL);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&c->loop) != 0)
    printf("  note: the loop still had handles after durable_store_close\n");
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

static void w_done(const durable_result_t *r) {
  wdrv_t *d = r->data;
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

/* ---- (1) the plain loops of one-row commits -------------------------------
 */

#define PLAIN_COLUMNS                                                          \
  "namespace, id, path, node_type, content, main_node, version, "              \
  "created_at, updated_at"

typedef struct {
  sqlite3 *db;
  sqlite3_stmt *begin, *insert, *commit;
} plain_sqlite_t;

static void sq_check(sqlite3 *db, int rc, const char *what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    die("sqlite3 %s: %s", what, sqlite3_errmsg(db));
}

static void plain_sqlite_open(plain_sqlite_t *p, const char *file) {
  sq_check(NULL, sqlite3_open(file, &p->db), "open");
  sq_check(p->db,
           sqlite3_exec(p->db,
                        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                        "CREATE TABLE IF NOT EXISTS plain_nodes ("
                        "namespace TEXT NOT NULL, id TEXT NOT NULL, "
                        "path TEXT NOT NULL, node_type TEXT NOT NULL, "
                        "content TEXT NOT NULL, main_node TEXT NOT NULL, "
                        "version INTEGER NOT NULL, created_at INTEGER NOT NULL,"
                        " updated_at INTEGER NOT NULL, "
                        "PRIMARY KEY (namespace, id)) WITHOUT ROWID;",
                        NULL, NULL, NULL),
           "setup");
  sq_check(p->db,
           sqlite3_prepare_v2(p->db, "BEGIN IMMEDIATE", -1, &p->begin, NULL),
           "prepare");
  sq_check(p->db, sqlite3_prepare_v2(p->db, "COMMIT", -1, &p->commit, NULL),
           "prepare");
  sq_check(p->db,
           sqlite3_prepare_v2(p->db,
                              "INSERT INTO plain_nodes (" PLAIN_COLUMNS
                              ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)",
                              -1, &p->insert, NULL),
           "prepare");
}

static void plain_sqlite_close(plain_sqlite_t *p) {
  sqlite3_finalize(p->begin);
  sqlite3_finalize(p->insert);
  sqlite3_finalize(p->commit);
  sqlite3_close(p->db);
}

static void step_reset(sqlite3 *db, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st);
  sq_check(db, rc, what);
  sqlite3_reset(st);
}

/* rows/s of n one-row transactions. */
static double plain_sqlite_rows(plain_sqlite_t *p, const char *ns, long n) {
  char id[32], path[256], content[128];
  static int64_t version;
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    int64_t t = wall_ms();
    snprintf(id, sizeof id, "n%07ld", i);
    snprintf(path, sizeof path, "%s/%s", ns, id);
    item_content(content, sizeof content, i);
    step_reset(p->db, p->begin, "begin");
    sqlite3_bind_text(p->insert, 1, ns, -1, SQLITE_STATIC);
    sqlite3_bind_text(p->insert, 2, id, -1, SQLITE_STATIC);
    sqlite3_bind_text(p->insert, 3, path, -1, SQLITE_STATIC);
    sqlite3_bind_text(p->insert, 4, "BenchNode", -1, SQLITE_STATIC);
    sqlite3_bind_text(p->insert, 5, content, -1, SQLITE_STATIC);
    sqlite3_bind_text(p->insert, 6, path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(p->insert, 7, ++version);
    sqlite3_bind_int64(p->insert, 8, t);
    sqlite3_bind_int64(p->insert, 9, t);
    step_reset(p->db, p->insert, "insert");
    step_reset(p->db, p->commit, "commit");
  }
  return (double)n / (now_s() - t0);
}

typedef struct {
  PGconn *conn;
  char *schema; /* quoted */
} plain_pg_t;

static void pg_ok(PGconn *conn, PGresult *res, const char *what) {
  ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", PQerrorMessage(conn));
    PQclear(res);
    die("libpq %s: %s", what, msg);
  }
}

static void pg_exec(PGconn *conn, const char *sql, const char *what) {
  PGresult *res = PQexec(conn, sql);
  pg_ok(conn, res, what);
  PQclear(res);
}

static PGconn *pg_connect(const char *url) {
  PGconn *conn = PQconnectdb(url);
  if (PQstatus(conn) != CONNECTION_OK)
    die("cannot connect to DURABLE_TEST_PG: %s", PQerrorMessage(conn));
  pg_exec(conn, "SET client_min_messages = warning", "set");
  return conn;
}

static void plain_pg_open(plain_pg_t *p, const char *url, const char *schema) {
  char sql[1024];
  p->conn = pg_connect(url);
  p->schema = PQescapeIdentifier(p->conn, schema, strlen(schema));
  snprintf(sql, sizeof sql,
           "CREATE SCHEMA IF NOT EXISTS %s; "
           "CREATE TABLE IF NOT EXISTS %s.plain_nodes ("
           "namespace text COLLATE \"C\" NOT NULL, id text COLLATE \"C\" NOT "
           "NULL, path text COLLATE \"C\" NOT NULL, node_type text COLLATE "
           "\"C\" NOT NULL, content text COLLATE \"C\" NOT NULL, main_node "
           "text COLLATE \"C\" NOT NULL, version bigint NOT NULL, created_at "
           "bigint NOT NULL, updated_at bigint NOT NULL, "
           "PRIMARY KEY (namespace, id))",
           p->schema, p->schema);
  pg_exec(p->conn, sql, "setup");
  snprintf(sql, sizeof sql,
           "INSERT INTO %s.plain_nodes (" PLAIN_COLUMNS
           ") VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
           p->schema);
  PGresult *res = PQprepare(p->conn, "plain_insert", sql, 9, NULL);
  pg_ok(p->conn, res, "prepare");
  PQclear(res);
}

static void plain_pg_close(plain_pg_t *p) {
  PQfreemem(p->schema);
  PQfinish(p->conn);
}

/* rows/s of n one-row commits (autocommit INSERTs, one round trip each). */
static double plain_pg_rows(plain_pg_t *p, const char *ns, long n) {
  char id[32], path[256], content[128], ver[32], ts[32];
  static int64_t version;
  const char *vals[9];
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    snprintf(id, sizeof id, "n%07ld", i);
    snprintf(path, sizeof path, "%s/%s", ns, id);
    item_content(content, sizeof content, i);
    snprintf(ver, sizeof ver, "%" PRId64, ++version);
    snprintf(ts, sizeof ts, "%" PRId64, wall_ms());
    vals[0] = ns, vals[1] = id, vals[2] = path, vals[3] = "BenchNode";
    vals[4] = content, vals[5] = path, vals[6] = ver, vals[7] = ts,
    vals[8] = ts;
    PGresult *res =
        PQexecPrepared(p->conn, "plain_insert", 9, vals, NULL, NULL, 0);
    pg_ok(p->conn, res, "insert");
    PQclear(res);
  }
  return (double)n / (now_s() - t0);
}

/* ---- (2) filling and reading a stream ------------------------------------ */

typedef struct {
  ctx_t *c;
  const char *items_ns;
  long n, next; /* sequences 1..n; the next one to write */
  int inflight, issuing, finished;
  durable_write_t *writes;
  char (*paths)[256];
  char (*contents)[96];
} fill_t;

static void fill_issue(fill_t *f);

static void fill_done(const durable_result_t *r) {
  fill_t *f = r->data;
  f->c->progress++;
  if (r->status < 0)
    die("batch write failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  f->inflight--;
  if (f->inflight == 0 && f->next > f->n)
    f->finished = 1;
  fill_issue(f);
}

static void fill_issue(fill_t *f) {
  durable_error_t err = {0};
  if (f->issuing)
    return;
  f->issuing = 1;
  while (f->next <= f->n && f->inflight < FILL_INFLIGHT) {
    size_t k = 0;
    for (; k < FILL_BATCH && f->next <= f->n; k++, f->next++) {
      snprintf(f->paths[k], sizeof f->paths[k], "%s/%012ld", f->items_ns,
               f->next);
      item_content(f->contents[k], sizeof f->contents[k], f->next);
      f->writes[k] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                                       .path = f->paths[k],
                                       .node_type = "DurableStreamItem",
                                       .content = f->contents[k]};
    }
    int rc = durable_store_write(f->c->store, f->writes, k, fill_done, f, &err);
    if (rc < 0)
      die("durable_store_write refused: %s (%s)", err.message,
          durable_err_name(rc));
    f->inflight++;
  }
  f->issuing = 0;
}

/* rows/s of writing items 1..n in batches. */
static double fill_stream(ctx_t *c, const char *items_ns, long n) {
  fill_t f = {.c = c, .items_ns = items_ns, .n = n, .next = 1};
  f.writes = calloc(FILL_BATCH, sizeof *f.writes);
  f.paths = calloc(FILL_BATCH, sizeof *f.paths);
  f.contents = calloc(FILL_BATCH, sizeof *f.contents);
  if (!f.writes || !f.paths || !f.contents)
    die("out of memory");
  double t0 = now_s();
  fill_issue(&f);
  run_until(c, &f.finished, "filling the stream");
  double dt = now_s() - t0;
  free(f.writes);
  free(f.paths);
  free(f.contents);
  return (double)n / dt;
}

typedef struct {
  ctx_t *c;
  const char *items_ns;
  int64_t after;
  long rows;
  int finished, order_ok;
} rdrv_t;

static void r_issue(rdrv_t *d);

static void r_done(const durable_result_t *r) {
  rdrv_t *d = r->data;
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
  int rc = durable_store_read_items(d->c->store, NULL, d->items_ns, d->after,
                                    PAGE, r_done, d, &err);
  if (rc < 0)
    die("durable_store_read_items refused: %s (%s)", err.message,
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
  printf("  %-44s %12.2fx           %s  (issue #2: >= 5)\n",
         "ratio 64 in flight / plain", median(r_group, reps),
         runs(r_group, reps, 1, "%.2f"));
  printf("  %-44s %12.2fx           %s  (DESIGN: >= 0.8)\n",
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
  double fill = fill_stream(&c, items_ns, n);
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
  printf("  %-44s %12.0fx           (issue #2: >= 100)\n", "ratio full / tail",
         median(r_full_tail, reps));
  printf("  %-44s %12.3f ms        %s\n", "raw: tail read",
         median(raw_tail, TAIL_REPS) * 1e3,
         runs(raw_tail, TAIL_REPS, 1e3, "%.2f"));
  printf("  %-44s %12.1f ms        %s\n", "raw: full read, pages of 1000",
         median(raw_full, reps) * 1e3, runs(raw_full, reps, 1e3, "%.0f"));
  printf("  %-44s %12s rows/s\n", "raw: full read rate",
         num(n / median(raw_full, reps)));
  printf("  %-44s %12.2fx           %s  (DESIGN: >= 0.5)\n",
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

static void rm_rf_dir(const char *dir) {
  static const char *const names[] = {
      "store.db", "store.db-wal", "store.db-shm", "store.db-live",
      "plain.db", "plain.db-wal", "plain.db-shm"};
  char f[600];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(f, sizeof f, "%s/%s", dir, names[i]);
    unlink(f);
  }
  if (rmdir(dir) != 0)
    printf("  note: could not remove %s: %s\n", dir, strerror(errno));
}

static char tmpdir[256];
static void cleanup_tmpdir(void) {
  if (tmpdir[0])
    rm_rf_dir(tmpdir);
  tmpdir[0] = 0;
}

static void run_sqlite(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/durable-bench.XXXXXX",
           base && *base ? base : "/tmp");
  if (mkdtemp(tmpdir) == NULL)
    die("mkdtemp: %s", strerror(errno));
  atexit(cleanup_tmpdir);

  char url[600], plain_file[600];
  raw_sqlite_t raw = {0};
  plain_sqlite_t plain = {0};
  snprintf(raw.file, sizeof raw.file, "%s/store.db", tmpdir);
  snprintf(url, sizeof url, "sqlite:%s", raw.file);
  snprintf(plain_file, sizeof plain_file, "%s/plain.db", tmpdir);
  plain_sqlite_open(&plain, plain_file);

  printf("\n== SQLite %s: %s (WAL, synchronous=FULL) ==\n",
         sqlite3_libversion(), url);
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
  cleanup_tmpdir();
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
  char partition[64], plain_schema[80];
  /* a fresh partition per run: nothing of an earlier run is read or
   * deleted; lower case so that it is also its own schema name */
  snprintf(partition, sizeof partition, "bench_%lx_%ld",
           (unsigned long)time(NULL), (long)getpid());
  snprintf(plain_schema, sizeof plain_schema, "%s_plain", partition);

  plain_pg_t plain = {0};
  raw_pg_t raw = {.url = url};
  plain_pg_open(&plain, url, plain_schema);
  PGresult *res = PQexec(plain.conn, "SHOW server_version");
  pg_ok(plain.conn, res, "server_version");
  char version[64];
  snprintf(version, sizeof version, "%s", PQgetvalue(res, 0, 0));
  PQclear(res);
  res = PQexec(plain.conn, "SHOW synchronous_commit");
  pg_ok(plain.conn, res, "synchronous_commit");
  char sync[32];
  snprintf(sync, sizeof sync, "%s", PQgetvalue(res, 0, 0));
  PQclear(res);

  printf("\n== PostgreSQL %s (synchronous_commit=%s): partition %s ==\n",
         version, sync, partition);
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
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--writes") == 0)
      opt.writes = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--items") == 0)
      opt.items = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), i++;
    else if (strcmp(a, "--only") == 0) {
      opt.only = ++i < argc ? argv[i] : "";
      if (strcmp(opt.only, "sqlite") && strcmp(opt.only, "postgres")) {
        fprintf(stderr, "store_bench: --only takes sqlite or postgres\n");
        return 2;
      }
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "store_bench: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (opt.reps > 64)
    opt.reps = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);

  printf("store_bench: durable %s, %ld writes per run, %ld items, medians of "
         "%d runs (tail reads: %d)\n",
         DURABLE_VERSION_STRING, opt.writes, opt.items, opt.reps, TAIL_REPS);
  if (opt.only == NULL || strcmp(opt.only, "sqlite") == 0)
    run_sqlite();
  if (opt.only == NULL || strcmp(opt.only, "postgres") == 0) {
    const char *pg = getenv("DURABLE_TEST_PG");
    if (pg && *pg)
      run_postgres(pg);
    else
      printf("\n== PostgreSQL: skipped (set DURABLE_TEST_PG to a libpq URL) "
             "==\n");
  }
  return 0;
}

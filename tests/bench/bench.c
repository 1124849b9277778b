/*
 * bench.c: the helpers store_bench and stream_bench share (see bench.h).
 */
#include "bench.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

const char *bench_name = "bench";
void (*bench_usage)(FILE *f);
volatile size_t sink;

/* ---- small helpers ------------------------------------------------------ */

double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t wall_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double median(const double *v, int n) {
  double s[64];
  if (n <= 0)
    return 0;
  if (n > 64)
    n = 64;
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

const char *num(double x) {
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

const char *runs(const double *v, int n, double scale, const char *fmt) {
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

long rss_kib(void) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
    resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "\n%s: ", bench_name);
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

long parse_long(const char *s, const char *name, long min) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (s == NULL || errno || *end || v < min) {
    fprintf(stderr, "%s: %s needs a number >= %ld\n", bench_name, name, min);
    if (bench_usage)
      bench_usage(stderr);
    exit(2);
  }
  return v;
}

/* ---- running a loop until something is done ------------------------------ */

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

void run_until(ctx_t *c, const int *flag, const char *what) {
  c->what = what;
  c->idle_ticks = 0;
  c->seen = c->progress;
  uv_timer_start(&c->watchdog, watchdog_tick, 1000, 1000);
  while (!*flag)
    uv_run(&c->loop, UV_RUN_ONCE);
  uv_timer_stop(&c->watchdog);
}

void ctx_init(ctx_t *c) {
  memset(c, 0, sizeof *c);
  if (uv_loop_init(&c->loop) != 0)
    die("uv_loop_init failed");
  uv_timer_init(&c->loop, &c->watchdog);
  c->watchdog.data = c;
}

void ctx_open(ctx_t *c, const char *url) {
  durable_error_t err = {0};
  ctx_init(c);
  int rc = durable_store_open(&c->loop, url, &c->store, &err);
  if (rc < 0)
    die("cannot open store %s: %s (%s)", url, err.message,
        durable_err_name(rc));
}

static void closed_cb(void *data) {
  *(int *)data = 1;
}

void ctx_finish(ctx_t *c) {
  uv_close((uv_handle_t *)&c->watchdog, NULL);
  uv_run(&c->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&c->loop) != 0)
    printf("  note: the loop still had handles after closing everything\n");
}

void ctx_close(ctx_t *c) {
  if (c->store) {
    int closed = 0;
    durable_store_close(c->store, closed_cb, &closed);
    run_until(c, &closed, "closing the store");
    c->store = NULL;
  }
  ctx_finish(c);
}

/* ---- the plain loops ---------------------------------------------------- */

void item_content(char *buf, size_t size, long long seq) {
  snprintf(buf, size,
           "{\"Sequence\":%lld,\"PayloadJson\":\"{\\\"i\\\":%lld}\"}", seq,
           seq);
}

void sq_check(sqlite3 *db, int rc, const char *what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    die("sqlite3 %s: %s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
}

void step_reset(sqlite3 *db, sqlite3_stmt *st, const char *what) {
  int rc = sqlite3_step(st);
  sq_check(db, rc, what);
  sqlite3_reset(st);
}

void plain_sqlite_open(plain_sqlite_t *p, const char *file) {
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

void plain_sqlite_close(plain_sqlite_t *p) {
  sqlite3_finalize(p->begin);
  sqlite3_finalize(p->insert);
  sqlite3_finalize(p->commit);
  sqlite3_close(p->db);
}

static int64_t plain_version;

double plain_sqlite_batch(plain_sqlite_t *p, const char *ns, long n,
                          int per_commit) {
  char id[32], path[256], content[128];
  if (per_commit < 1)
    per_commit = 1;
  double t0 = now_s();
  for (long i = 0; i < n;) {
    step_reset(p->db, p->begin, "begin");
    for (int k = 0; k < per_commit && i < n; k++, i++) {
      int64_t t = wall_ms();
      snprintf(id, sizeof id, "n%07ld", i);
      snprintf(path, sizeof path, "%s/%s", ns, id);
      item_content(content, sizeof content, i);
      sqlite3_bind_text(p->insert, 1, ns, -1, SQLITE_STATIC);
      sqlite3_bind_text(p->insert, 2, id, -1, SQLITE_STATIC);
      sqlite3_bind_text(p->insert, 3, path, -1, SQLITE_STATIC);
      sqlite3_bind_text(p->insert, 4, "BenchNode", -1, SQLITE_STATIC);
      sqlite3_bind_text(p->insert, 5, content, -1, SQLITE_STATIC);
      sqlite3_bind_text(p->insert, 6, path, -1, SQLITE_STATIC);
      sqlite3_bind_int64(p->insert, 7, ++plain_version);
      sqlite3_bind_int64(p->insert, 8, t);
      sqlite3_bind_int64(p->insert, 9, t);
      step_reset(p->db, p->insert, "insert");
    }
    step_reset(p->db, p->commit, "commit");
  }
  return (double)n / (now_s() - t0);
}

double plain_sqlite_rows(plain_sqlite_t *p, const char *ns, long n) {
  return plain_sqlite_batch(p, ns, n, 1);
}

void pg_ok(PGconn *conn, PGresult *res, const char *what) {
  ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", PQerrorMessage(conn));
    PQclear(res);
    die("libpq %s: %s", what, msg);
  }
}

void pg_exec(PGconn *conn, const char *sql, const char *what) {
  PGresult *res = PQexec(conn, sql);
  pg_ok(conn, res, what);
  PQclear(res);
}

PGconn *pg_connect(const char *url) {
  PGconn *conn = PQconnectdb(url);
  if (PQstatus(conn) != CONNECTION_OK)
    die("cannot connect to DURABLE_TEST_PG: %s", PQerrorMessage(conn));
  pg_exec(conn, "SET client_min_messages = warning", "set");
  return conn;
}

void plain_pg_open(plain_pg_t *p, const char *url, const char *schema) {
  char sql[1024];
  p->conn = pg_connect(url);
  p->schema = PQescapeIdentifier(p->conn, schema, strlen(schema));
  p->batch_prepared = 0;
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

void plain_pg_close(plain_pg_t *p) {
  PQfreemem(p->schema);
  PQfinish(p->conn);
}

/* The nine values of plain row i, in bufs (9 x 256 bytes). */
static void pg_row(const char *ns, long i, char bufs[9][256],
                   const char **vals) {
  snprintf(bufs[1], 256, "n%07ld", i);
  snprintf(bufs[2], 256, "%.200s/n%07ld", ns, i);
  item_content(bufs[4], 256, i);
  snprintf(bufs[6], 256, "%" PRId64, ++plain_version);
  snprintf(bufs[7], 256, "%" PRId64, wall_ms());
  vals[0] = ns, vals[1] = bufs[1], vals[2] = bufs[2], vals[3] = "BenchNode";
  vals[4] = bufs[4], vals[5] = bufs[2], vals[6] = bufs[6], vals[7] = bufs[7],
  vals[8] = bufs[7];
}

double plain_pg_rows(plain_pg_t *p, const char *ns, long n) {
  char bufs[9][256];
  const char *vals[9];
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    pg_row(ns, i, bufs, vals);
    PGresult *res =
        PQexecPrepared(p->conn, "plain_insert", 9, vals, NULL, NULL, 0);
    pg_ok(p->conn, res, "insert");
    PQclear(res);
  }
  return (double)n / (now_s() - t0);
}

double plain_pg_batch(plain_pg_t *p, const char *ns, long n, int per_commit) {
  if (per_commit <= 1)
    return plain_pg_rows(p, ns, n);
  if (p->batch_prepared != per_commit) {
    size_t cap = 256 + (size_t)per_commit * 64, o = 0;
    char *sql = malloc(cap);
    if (sql == NULL)
      die("out of memory");
    o += (size_t)snprintf(
        sql, cap, "INSERT INTO %s.plain_nodes (" PLAIN_COLUMNS ") VALUES ",
        p->schema);
    for (int r = 0; r < per_commit; r++) {
      o += (size_t)snprintf(sql + o, cap - o, "%s(", r ? "," : "");
      for (int col = 0; col < 9; col++)
        o += (size_t)snprintf(sql + o, cap - o, "%s$%d", col ? "," : "",
                              r * 9 + col + 1);
      o += (size_t)snprintf(sql + o, cap - o, ")");
    }
    if (p->batch_prepared) {
      PGresult *d = PQexec(p->conn, "DEALLOCATE plain_insert_multi");
      PQclear(d);
    }
    PGresult *res =
        PQprepare(p->conn, "plain_insert_multi", sql, per_commit * 9, NULL);
    pg_ok(p->conn, res, "prepare multi-row insert");
    PQclear(res);
    free(sql);
    p->batch_prepared = per_commit;
  }
  char(*bufs)[9][256] = malloc((size_t)per_commit * sizeof *bufs);
  const char **vals = malloc((size_t)per_commit * 9 * sizeof *vals);
  if (bufs == NULL || vals == NULL)
    die("out of memory");
  double t0 = now_s();
  long i = 0;
  for (; i + per_commit <= n; i += per_commit) {
    for (int r = 0; r < per_commit; r++)
      pg_row(ns, i + r, bufs[r], vals + r * 9);
    PGresult *res = PQexecPrepared(p->conn, "plain_insert_multi",
                                   per_commit * 9, vals, NULL, NULL, 0);
    pg_ok(p->conn, res, "multi-row insert");
    PQclear(res);
  }
  for (; i < n; i++) { /* the rest, one row at a time */
    pg_row(ns, i, bufs[0], vals);
    PGresult *res =
        PQexecPrepared(p->conn, "plain_insert", 9, vals, NULL, NULL, 0);
    pg_ok(p->conn, res, "insert");
    PQclear(res);
  }
  double dt = now_s() - t0;
  free(bufs);
  free(vals);
  return (double)n / dt;
}

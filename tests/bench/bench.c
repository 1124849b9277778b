/*
 * bench.c: the helpers store_bench, stream_bench and startup_bench share
 * (see bench.h).
 */
#include "bench.h"
#include "stream.h" /* durable__item_encode: the rows as the runtime writes them */

#include <dirent.h>
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

const char *parse_only(const char *v) {
  if (v == NULL || (strcmp(v, "sqlite") && strcmp(v, "postgres"))) {
    fprintf(stderr, "%s: --only takes sqlite or postgres\n", bench_name);
    exit(2);
  }
  return v;
}

unsigned parse_figures(const char *v, long max) {
  unsigned figures = 0;
  char *end;
  for (const char *p = v; *p;) {
    long f = strtol(p, &end, 10);
    if (end == p || f < 1 || f > max) {
      fprintf(stderr, "%s: --figures takes numbers 1-%ld, e.g. 1,2\n",
              bench_name, max);
      exit(2);
    }
    figures |= 1u << f;
    p = *end == ',' ? end + 1 : end;
  }
  return figures;
}

void other_arg(const char *a) {
  if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
    if (bench_usage)
      bench_usage(stdout);
    exit(0);
  }
  fprintf(stderr, "%s: unknown argument '%s'\n", bench_name, a);
  if (bench_usage)
    bench_usage(stderr);
  exit(2);
}

void run_stores(const char *only, void (*run_sqlite)(void),
                void (*run_postgres)(const char *url)) {
  if (only == NULL || strcmp(only, "sqlite") == 0)
    run_sqlite();
  if (only == NULL || strcmp(only, "postgres") == 0) {
    const char *pg = getenv("DURABLE_TEST_PG");
    if (pg && *pg)
      run_postgres(pg);
    else
      printf("\n== PostgreSQL: skipped (set DURABLE_TEST_PG to a libpq URL) "
             "==\n");
  }
}

/* ---- a temporary folder -------------------------------------------------- */

int tmpdir_keep;
static char tmpdir[256];

void tmpdir_remove(void) {
  char f[600];
  if (!tmpdir[0] || tmpdir_keep)
    return;
  DIR *d = opendir(tmpdir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      snprintf(f, sizeof f, "%s/%s", tmpdir, e->d_name);
      unlink(f);
    }
    closedir(d);
  }
  if (rmdir(tmpdir) != 0)
    printf("  note: could not remove %s: %s\n", tmpdir, strerror(errno));
  tmpdir[0] = 0;
}

const char *tmpdir_make(const char *prefix) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/%s.XXXXXX", base && *base ? base : "/tmp",
           prefix);
  if (mkdtemp(tmpdir) == NULL)
    die("mkdtemp %s: %s", tmpdir, strerror(errno));
  static int registered;
  if (!registered++)
    atexit(tmpdir_remove);
  return tmpdir;
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

durable_mesh_t *mesh_open(ctx_t *c, const char *url, durable_log_cb log) {
  durable_error_t err = {0};
  durable_mesh_t *m = NULL;
  durable_mesh_options_t o = {.store = url, .log = log};
  int rc = durable_mesh_open(&c->loop, &o, &m, &err);
  if (rc < 0)
    die("cannot open a mesh on %s: %s (%s)", url, err.message,
        durable_err_name(rc));
  return m;
}

void mesh_close(ctx_t *c, durable_mesh_t *m) {
  int closed = 0;
  durable_mesh_close(m, closed_cb, &closed);
  run_until(c, &closed, "closing a mesh");
}

/* ---- writing a stream's items ---------------------------------------------
 */

typedef struct {
  ctx_t *c;
  long pending;
  int finished;
} wait_t;

static void write_done(const durable_result_t *r, void *data) {
  wait_t *w = data;
  w->c->progress++;
  if (r->status < 0)
    die("store write failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  if (--w->pending == 0)
    w->finished = 1;
}

void write_nodes(ctx_t *c, durable_store_t *store, const durable_write_t *w,
                 size_t n) {
  wait_t wt = {.c = c};
  durable_error_t err = {0};
  for (size_t i = 0; i < n; i += FILL_BATCH) {
    size_t k = n - i < FILL_BATCH ? n - i : FILL_BATCH;
    int rc = durable_store_write(store, w + i, k, write_done, &wt, &err);
    if (rc < 0)
      die("durable_store_write refused: %s (%s)", err.message,
          durable_err_name(rc));
    wt.pending++;
  }
  if (wt.pending)
    run_until(c, &wt.finished, "writing nodes");
}

typedef struct {
  ctx_t *c;
  durable_store_t *store;
  const char *items_ns;
  long next, to; /* the next sequence to write, the last */
  int stamped, inflight, issuing, finished;
  /* one batch: the store copies what a write names before
   * durable_store_write returns, so the next batch can reuse them */
  durable_write_t *writes;
  char (*paths)[256];
  char (*contents)[160];
} fill_t;

static void fill_issue(fill_t *f);

static void fill_done(const durable_result_t *r, void *data) {
  fill_t *f = data;
  f->c->progress++;
  if (r->status < 0)
    die("item batch write failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  f->inflight--;
  if (f->inflight == 0 && f->next > f->to)
    f->finished = 1;
  fill_issue(f);
}

static void fill_issue(fill_t *f) {
  durable_error_t err = {0};
  if (f->issuing)
    return;
  f->issuing = 1;
  while (f->next <= f->to && f->inflight < FILL_INFLIGHT) {
    size_t k = 0;
    int64_t at = f->stamped ? wall_ms() : 0;
    for (; k < FILL_BATCH && f->next <= f->to; k++, f->next++) {
      snprintf(f->paths[k], sizeof f->paths[k], "%.200s/%012ld", f->items_ns,
               f->next);
      if (f->stamped) {
        /* the runtime's own encoder: the rows a reader meets in use */
        char payload[32];
        snprintf(payload, sizeof payload, "{\"i\":%ld}", f->next);
        char *text = durable__item_encode(f->next, payload, at);
        if (text == NULL)
          die("out of memory");
        snprintf(f->contents[k], sizeof f->contents[k], "%s", text);
        free(text);
      } else {
        item_content(f->contents[k], sizeof f->contents[k], f->next);
      }
      f->writes[k] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                                       .path = f->paths[k],
                                       .node_type = "DurableStreamItem",
                                       .content = f->contents[k]};
    }
    int rc = durable_store_write(f->store, f->writes, k, fill_done, f, &err);
    if (rc < 0)
      die("durable_store_write refused: %s (%s)", err.message,
          durable_err_name(rc));
    f->inflight++;
  }
  f->issuing = 0;
}

double fill_items(ctx_t *c, durable_store_t *store, const char *items_ns,
                  long from, long to, int stamped) {
  if (to < from)
    return 0;
  fill_t f = {.c = c,
              .store = store,
              .items_ns = items_ns,
              .next = from,
              .to = to,
              .stamped = stamped};
  f.writes = calloc(FILL_BATCH, sizeof *f.writes);
  f.paths = calloc(FILL_BATCH, sizeof *f.paths);
  f.contents = calloc(FILL_BATCH, sizeof *f.contents);
  if (!f.writes || !f.paths || !f.contents)
    die("out of memory");
  double t0 = now_s();
  fill_issue(&f);
  run_until(c, &f.finished, "filling a stream");
  double dt = now_s() - t0;
  free(f.writes);
  free(f.paths);
  free(f.contents);
  return (double)(to - from + 1) / dt;
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
                        "PRIMARY KEY (namespace, id)) WITHOUT ROWID;"
                        "CREATE TABLE IF NOT EXISTS plain_streams ("
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
  sq_check(p->db,
           sqlite3_prepare_v2(
               p->db,
               "INSERT INTO plain_streams (" PLAIN_COLUMNS
               ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9) ON CONFLICT (namespace, "
               "id) DO UPDATE SET content = excluded.content, version = "
               "excluded.version, updated_at = excluded.updated_at",
               -1, &p->stream, NULL),
           "prepare");
}

void plain_sqlite_start(plain_sqlite_t *p, const char *dir, char *file,
                        size_t file_size, char *url, size_t url_size) {
  char plain_file[600];
  snprintf(file, file_size, "%s/store.db", dir);
  snprintf(url, url_size, "sqlite:%s", file);
  snprintf(plain_file, sizeof plain_file, "%.580s/plain.db", dir);
  plain_sqlite_open(p, plain_file);
  printf("\n== SQLite %s: %s (WAL, synchronous=FULL) ==\n",
         sqlite3_libversion(), url);
}

void plain_sqlite_close(plain_sqlite_t *p) {
  sqlite3_finalize(p->begin);
  sqlite3_finalize(p->insert);
  sqlite3_finalize(p->stream);
  sqlite3_finalize(p->commit);
  sqlite3_close(p->db);
}

static int64_t plain_version;

/* One row of the node tables' shape under ns/id, by `st` (an insert or an
 * upsert with the nine columns in PLAIN_COLUMNS order). */
static void plain_sqlite_row(plain_sqlite_t *p, sqlite3_stmt *st,
                             const char *ns, const char *id,
                             const char *content) {
  char path[512];
  int64_t t = wall_ms();
  snprintf(path, sizeof path, "%s/%s", ns, id);
  sqlite3_bind_text(st, 1, ns, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, path, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 4, "BenchNode", -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 5, content, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 6, path, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 7, ++plain_version);
  sqlite3_bind_int64(st, 8, t);
  sqlite3_bind_int64(st, 9, t);
  step_reset(p->db, st, "insert");
}

double plain_sqlite_appends(plain_sqlite_t *p, const char *ns, long n) {
  char id[32], item[128], stream[320];
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    step_reset(p->db, p->begin, "begin");
    snprintf(id, sizeof id, "n%07ld", i);
    item_content(item, sizeof item, i);
    plain_sqlite_row(p, p->insert, ns, id, item);
    /* a stream node's content, LastSequence moved on */
    snprintf(stream, sizeof stream,
             "{\"Namespace\":\"Bench\",\"Key\":\"%.40s\",\"LastSequence\":"
             "%ld,\"Subscriber\":null,\"SubscriberInstance\":null,"
             "\"LeaseEpoch\":0,\"SubscribedAt\":null,\"Checkpoint\":0,"
             "\"CheckpointAt\":null,\"OrphanedAt\":null,"
             "\"LastSubscriber\":null}",
             ns, i + 1);
    plain_sqlite_row(p, p->stream, ns, "stream", stream);
    step_reset(p->db, p->commit, "commit");
  }
  return (double)n / (now_s() - t0);
}

double plain_sqlite_spread(plain_sqlite_t *p, const char *ns, long n,
                           int per_commit, int spread) {
  char row_ns[256], id[32], content[128];
  if (per_commit < 1)
    per_commit = 1;
  if (spread < 1)
    spread = 1;
  snprintf(row_ns, sizeof row_ns, "%s", ns);
  double t0 = now_s();
  for (long i = 0; i < n;) {
    step_reset(p->db, p->begin, "begin");
    for (int k = 0; k < per_commit && i < n; k++, i++) {
      long seq = i / spread;
      if (spread > 1)
        snprintf(row_ns, sizeof row_ns, "%.200s/k%03d", ns, (int)(i % spread));
      snprintf(id, sizeof id, "n%07ld", seq);
      item_content(content, sizeof content, seq);
      plain_sqlite_row(p, p->insert, row_ns, id, content);
    }
    step_reset(p->db, p->commit, "commit");
  }
  return (double)n / (now_s() - t0);
}

double plain_sqlite_batch(plain_sqlite_t *p, const char *ns, long n,
                          int per_commit) {
  return plain_sqlite_spread(p, ns, n, per_commit, 1);
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

void pg_show(PGconn *conn, const char *name, char *out, size_t size) {
  char sql[128];
  snprintf(sql, sizeof sql, "SHOW %s", name);
  PGresult *res = PQexec(conn, sql);
  pg_ok(conn, res, name);
  snprintf(out, size, "%s", PQgetvalue(res, 0, 0));
  PQclear(res);
}

void fresh_partition(const char *tag, char *out, size_t size) {
  snprintf(out, size, "%s_%lx_%ld", tag, (unsigned long)time(NULL),
           (long)getpid());
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

void plain_pg_start(plain_pg_t *p, const char *url, const char *partition) {
  char schema[128], version[64], sync[32];
  snprintf(schema, sizeof schema, "%.100s_plain", partition);
  plain_pg_open(p, url, schema);
  pg_show(p->conn, "server_version", version, sizeof version);
  pg_show(p->conn, "synchronous_commit", sync, sizeof sync);
  printf("\n== PostgreSQL %s (synchronous_commit=%s): partition %s ==\n",
         version, sync, partition);
}

void plain_pg_close(plain_pg_t *p) {
  PQfreemem(p->schema);
  PQfinish(p->conn);
}

/* The nine values of plain row i, in bufs (9 x 256 bytes): under ns, or
 * with spread > 1 under ns/k{i % spread} with id i / spread. */
static void pg_row(const char *ns, int spread, long i, char bufs[9][256],
                   const char **vals) {
  long seq = i;
  if (spread > 1) {
    snprintf(bufs[0], 256, "%.200s/k%03d", ns, (int)(i % spread));
    ns = bufs[0];
    seq = i / spread;
  }
  snprintf(bufs[1], 256, "n%07ld", seq);
  snprintf(bufs[2], 256, "%.220s/n%07ld", ns, seq);
  item_content(bufs[4], 256, seq);
  snprintf(bufs[6], 256, "%" PRId64, ++plain_version);
  snprintf(bufs[7], 256, "%" PRId64, wall_ms());
  vals[0] = ns, vals[1] = bufs[1], vals[2] = bufs[2], vals[3] = "BenchNode";
  vals[4] = bufs[4], vals[5] = bufs[2], vals[6] = bufs[6], vals[7] = bufs[7],
  vals[8] = bufs[7];
}

/* Rows from..n-1, one autocommit INSERT each. */
static void pg_rows_one_by_one(plain_pg_t *p, const char *ns, int spread,
                               long from, long n) {
  char bufs[9][256];
  const char *vals[9];
  for (long i = from; i < n; i++) {
    pg_row(ns, spread, i, bufs, vals);
    PGresult *res =
        PQexecPrepared(p->conn, "plain_insert", 9, vals, NULL, NULL, 0);
    pg_ok(p->conn, res, "insert");
    PQclear(res);
  }
}

double plain_pg_rows(plain_pg_t *p, const char *ns, long n) {
  double t0 = now_s();
  pg_rows_one_by_one(p, ns, 1, 0, n);
  return (double)n / (now_s() - t0);
}

/* Prepare "plain_insert_multi", an INSERT of per_commit rows. */
static void pg_prepare_multi(plain_pg_t *p, int per_commit) {
  if (p->batch_prepared == per_commit)
    return;
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

double plain_pg_spread(plain_pg_t *p, const char *ns, long n, int per_commit,
                       int spread) {
  if (spread < 1)
    spread = 1;
  if (per_commit <= 1) {
    double t0 = now_s();
    pg_rows_one_by_one(p, ns, spread, 0, n);
    return (double)n / (now_s() - t0);
  }
  pg_prepare_multi(p, per_commit);
  char(*bufs)[9][256] = malloc((size_t)per_commit * sizeof *bufs);
  const char **vals = malloc((size_t)per_commit * 9 * sizeof *vals);
  if (bufs == NULL || vals == NULL)
    die("out of memory");
  double t0 = now_s();
  long i = 0;
  for (; i + per_commit <= n; i += per_commit) {
    for (int r = 0; r < per_commit; r++)
      pg_row(ns, spread, i + r, bufs[r], vals + r * 9);
    PGresult *res = PQexecPrepared(p->conn, "plain_insert_multi",
                                   per_commit * 9, vals, NULL, NULL, 0);
    pg_ok(p->conn, res, "multi-row insert");
    PQclear(res);
  }
  pg_rows_one_by_one(p, ns, spread, i, n); /* the rest, one row at a time */
  double dt = now_s() - t0;
  free(bufs);
  free(vals);
  return (double)n / dt;
}

double plain_pg_batch(plain_pg_t *p, const char *ns, long n, int per_commit) {
  return plain_pg_spread(p, ns, n, per_commit, 1);
}

/*
 * bench.h: what store_bench, stream_bench and startup_bench share
 * (bench.c): timing and printing helpers, options, a temporary folder, a
 * loop with a stall watchdog, and the plain SQLite and libpq loops that
 * every figure is measured against.
 */
#ifndef DURABLE_BENCH_H
#define DURABLE_BENCH_H

#include <durable_internal.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include <stdint.h>
#include <stdio.h>

#define STALL_SECONDS 120 /* no progress for this long: give up */
#define FILL_BATCH 1000   /* writes per durable_store_write while filling */
#define FILL_INFLIGHT 8   /* fill batches in flight */

/* ---- small helpers ------------------------------------------------------ */

/* The program's name for messages ("store_bench"), and its usage text,
 * printed when an option's value is bad. */
extern const char *bench_name;
extern void (*bench_usage)(FILE *f);

/* What the raw reads add their column bytes to, so that fetching them is not
 * optimised away. */
extern volatile size_t sink;

double now_s(void);    /* CLOCK_MONOTONIC, seconds */
int64_t wall_ms(void); /* ms since the epoch */
int cmp_double(const void *a, const void *b);
double median(const double *v, int n); /* of at most 64 values */
/* 1234567.8 -> "1,234,568" (in one of a few rotating buffers). */
const char *num(double x);
/* The repetitions, for judging the noise: "(a b c)", each v[i]*scale. */
const char *runs(const double *v, int n, double scale, const char *fmt);
long rss_kib(void); /* resident set, KiB; -1 when unknown */
/* Print "\nNAME: message" on stdout and exit 1. */
void die(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;
/* A number >= min, or a message, the usage and exit 2. */
long parse_long(const char *s, const char *name, long min);
/* The value of --only: "sqlite" or "postgres", or a message and exit 2. */
const char *parse_only(const char *v);
/* The value of --figures, "1,3": bit k set for figure k (1 to max), or a
 * message and exit 2. */
unsigned parse_figures(const char *v, long max);
/* An argument no option took: --help or -h prints the usage and exits 0,
 * anything else is a message, the usage and exit 2. */
void other_arg(const char *a)
#if defined(__GNUC__)
    __attribute__((noreturn))
#endif
    ;
/* run_sqlite() unless only is "postgres"; then, unless only is "sqlite",
 * run_postgres(DURABLE_TEST_PG), or a "skipped" line when that is unset. */
void run_stores(const char *only, void (*run_sqlite)(void),
                void (*run_postgres)(const char *url));

/* A fresh folder $TMPDIR/PREFIX.XXXXXX (or under /tmp); dies when it
 * cannot be made.  It and the files in it are removed by tmpdir_remove()
 * and at exit, unless tmpdir_keep is set. */
const char *tmpdir_make(const char *prefix);
void tmpdir_remove(void);
extern int tmpdir_keep;

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

/* The loop and its watchdog, no store. */
void ctx_init(ctx_t *c);
/* ctx_init, then the store at `url` (dies when it cannot be opened). */
void ctx_open(ctx_t *c, const char *url);
/* Run the loop until *flag; the watchdog timer keeps uv_run from spinning
 * when nothing else is active and turns a hang (no progress for
 * STALL_SECONDS) into a message and exit 1. */
void run_until(ctx_t *c, const int *flag, const char *what);
/* Close the store (if any), the watchdog and the loop. */
void ctx_close(ctx_t *c);
/* The loop only (the store, or a mesh, was closed already). */
void ctx_finish(ctx_t *c);
/* A mesh on c's loop with its log lines to `log` (dies when it cannot be
 * opened), and closing one (waits until it is closed). */
durable_mesh_t *mesh_open(ctx_t *c, const char *url, durable_log_cb log);
void mesh_close(ctx_t *c, durable_mesh_t *m);

/* ---- writing a stream's items ---------------------------------------------
 */

/* Write the n nodes w[0..n-1] to `store` (on c's loop) in transactions of
 * FILL_BATCH, all issued at once, and wait until all are committed. */
void write_nodes(ctx_t *c, durable_store_t *store, const durable_write_t *w,
                 size_t n);
/* Items from..to of a stream, at "{items_ns}/{seq:012}" with NodeType
 * DurableStreamItem, in batches of FILL_BATCH with FILL_INFLIGHT batches in
 * flight, and wait.  The content is item_content(), or with `stamped`
 * what the stream hub writes for an item (durable__item_encode, with
 * AppendedAt the batch's time).  Returns rows/s (0 when to < from). */
double fill_items(ctx_t *c, durable_store_t *store, const char *items_ns,
                  long from, long to, int stamped);

/* ---- the plain loops ---------------------------------------------------- */

#define PLAIN_COLUMNS                                                          \
  "namespace, id, path, node_type, content, main_node, version, "              \
  "created_at, updated_at"

/* The content every plain loop writes for row i. */
void item_content(char *buf, size_t size, long long seq);

void sq_check(sqlite3 *db, int rc, const char *what);
void step_reset(sqlite3 *db, sqlite3_stmt *st, const char *what);

/* A separate SQLite file (WAL, synchronous=FULL) with two tables of the
 * node tables' nine columns: plain_nodes, and plain_streams for
 * plain_sqlite_appends. */
typedef struct {
  sqlite3 *db;
  sqlite3_stmt *begin, *insert, *commit;
  sqlite3_stmt *stream; /* upsert of a row of plain_streams */
} plain_sqlite_t;

void plain_sqlite_open(plain_sqlite_t *p, const char *file);
/* In the folder dir: the store's file dir/store.db (into file) and its URL
 * "sqlite:FILE" (into url), plain_sqlite_open on dir/plain.db, then the
 * header line "== SQLite <version>: URL (WAL, synchronous=FULL) ==". */
void plain_sqlite_start(plain_sqlite_t *p, const char *dir, char *file,
                        size_t file_size, char *url, size_t url_size);
void plain_sqlite_close(plain_sqlite_t *p);
/* rows/s of n rows under namespace ns, `per_commit` rows per transaction
 * (1: one-row commits). */
double plain_sqlite_rows(plain_sqlite_t *p, const char *ns, long n);
double plain_sqlite_batch(plain_sqlite_t *p, const char *ns, long n,
                          int per_commit);
/* The same with the rows spread round-robin over `spread` namespaces
 * ns/k000, ns/k001, ...: row i goes to namespace i % spread with id
 * i / spread, so each namespace gets consecutive keys (as the items of
 * `spread` streams do) and one commit touches min(per_commit, spread)
 * places of the (namespace, id) key instead of one.  spread 1 is
 * plain_sqlite_batch (namespace ns itself). */
double plain_sqlite_spread(plain_sqlite_t *p, const char *ns, long n,
                           int per_commit, int spread);
/* rows/s of n one-row commits that each also update a second row, in a
 * second table: the two rows an append must write in one transaction
 * (the item, and LastSequence on the stream node: doc/design.md), without
 * anything the runtime adds (its commit log).  The
 * stream row is a stream node's size. */
double plain_sqlite_appends(plain_sqlite_t *p, const char *ns, long n);

void pg_ok(PGconn *conn, PGresult *res, const char *what);
void pg_exec(PGconn *conn, const char *sql, const char *what);
PGconn *pg_connect(const char *url);

/* A separate schema with the same table, on its own connection. */
typedef struct {
  PGconn *conn;
  char *schema;       /* quoted */
  int batch_prepared; /* rows per statement of "plain_insert_multi" */
} plain_pg_t;

void plain_pg_open(plain_pg_t *p, const char *url, const char *schema);
void plain_pg_close(plain_pg_t *p);
/* rows/s of n one-row commits (autocommit INSERTs, one round trip each). */
double plain_pg_rows(plain_pg_t *p, const char *ns, long n);
/* rows/s of n rows, `per_commit` rows per transaction: one multi-row
 * INSERT ... VALUES (...),(...) statement per transaction (autocommit),
 * prepared once. */
double plain_pg_batch(plain_pg_t *p, const char *ns, long n, int per_commit);
/* plain_pg_batch with the rows spread over namespaces as
 * plain_sqlite_spread does. */
double plain_pg_spread(plain_pg_t *p, const char *ns, long n, int per_commit,
                       int spread);
/* SHOW name (server_version, synchronous_commit, ...), into out. */
void pg_show(PGconn *conn, const char *name, char *out, size_t size);
/* A fresh partition TAG_<time>_<pid>: nothing of an earlier run is read or
 * deleted; lower case, so that it is also its own schema's name. */
void fresh_partition(const char *tag, char *out, size_t size);
/* plain_pg_open on the schema {partition}_plain, then the header line
 * "== PostgreSQL <version> (synchronous_commit=...): partition P ==". */
void plain_pg_start(plain_pg_t *p, const char *url, const char *partition);

#endif

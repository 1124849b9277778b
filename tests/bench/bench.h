/*
 * bench.h: what store_bench and stream_bench share (bench.c): timing and
 * printing helpers, a loop with a stall watchdog, and the plain SQLite and
 * libpq loops that every figure is measured against.
 */
#ifndef DURABLE_BENCH_H
#define DURABLE_BENCH_H

#include <durable.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include <stdint.h>
#include <stdio.h>

#define STALL_SECONDS 120 /* no progress for this long: give up */

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

/* ---- the plain loops ---------------------------------------------------- */

#define PLAIN_COLUMNS                                                          \
  "namespace, id, path, node_type, content, main_node, version, "              \
  "created_at, updated_at"

/* The content every plain loop writes for row i. */
void item_content(char *buf, size_t size, long long seq);

void sq_check(sqlite3 *db, int rc, const char *what);
void step_reset(sqlite3 *db, sqlite3_stmt *st, const char *what);

/* A separate SQLite file (WAL, synchronous=FULL) with a table of the node
 * tables' nine columns. */
typedef struct {
  sqlite3 *db;
  sqlite3_stmt *begin, *insert, *commit;
} plain_sqlite_t;

void plain_sqlite_open(plain_sqlite_t *p, const char *file);
void plain_sqlite_close(plain_sqlite_t *p);
/* rows/s of n rows under namespace ns, `per_commit` rows per transaction
 * (1: one-row commits). */
double plain_sqlite_rows(plain_sqlite_t *p, const char *ns, long n);
double plain_sqlite_batch(plain_sqlite_t *p, const char *ns, long n,
                          int per_commit);

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

#endif

/*
 * postgres.h: what the files of the PostgreSQL backend share, and nothing
 * outside them includes.  durable__postgres_backend (backend.h) is the only
 * name the rest of the mesh layer sees; its files call one another only
 * downwards:
 *
 *   postgres_store.c     the backend's functions: connect, transactions,
 *        |               partitions, reads, writes, grants
 *   postgres_feed.c      the LISTEN connection: the change feed of other
 *        |               processes, the liveness lock and its fencing
 *   postgres_sql.c       the SQL of every operation, as a table, and the
 *        |               prepared statements made from it
 *   postgres_pipeline.c  the queue of statements and its round trip
 *        |
 *   postgres_conn.c      one libpq session: open, name, errors
 */
#ifndef DURABLE_MESH_POSTGRES_H
#define DURABLE_MESH_POSTGRES_H

#include "durable_text.h"
#include "map.h"
#include "schema.h"
#include "store.h"

#include <libpq-fe.h>

#include <stddef.h>
#include <stdint.h>

/* ---- the connection ----------------------------------------------------- */

/* The channel of the change feed: what commits NOTIFY and the feed's
 * connection LISTENs to. */
#define DURABLE__PG_CHANNEL "durable_changes"

/* The connection's maps (map.h) hold small numbers, never 0, as values. */
#define MAP_NUMBER(n) ((void *)(uintptr_t)(n))

/* A statement waiting to be sent: plain SQL without parameters, or a
 * prepared statement with its parameters. */
enum { STEP_PLAIN, STEP_READ, STEP_WRITE, STEP_COMMIT };

typedef struct {
  int kind;
  int op;          /* STEP_WRITE: OP_INSERT, OP_UPSERT, OP_UPDATE, ... */
  const char *sql; /* plain SQL, or NULL for the prepared `name` */
  char name[32];
  int n;
  const char *vals[8];
  char *buf;               /* owns the copied values, `subject`, `partition` */
  const char *what;        /* for messages: "insert", "get", ... */
  const char *subject;     /* for messages: the path */
  const char *partition;   /* forgotten when its relation is missing */
  durable__outcome_t *out; /* STEP_WRITE */
  durable__got_t *got;     /* STEP_READ of get_later */
  char rows[32];           /* the many-row form of `name`, where one serves:
                              inserts, upserts, strict replaces, locks and
                              notifications */
  int strict;              /* a refusal fails the transaction (backend.h) */
} step_t;

struct durable__conn_s {
  PGconn *pg;
  char *url;  /* as given: a commit that waits long asks on another */
  char *name; /* the URL with its password masked, for messages */
  /* told of a commit that waits long (backend.h's watch_commits) */
  void (*stall)(void *data, const char *why);
  void *stall_data;
  int in_tx;     /* between begin and commit / rollback */
  int tx_sent;   /* the BEGIN of the open transaction has been sent */
  int broken;    /* the protocol went astray, or the server is gone or takes
                    no writes: only disconnect now */
  step_t *queue; /* statements not sent yet, in order */
  size_t queued, queue_cap;
  durable__map_t stmts; /* "op table partition" -> n of "durable_n" */
  unsigned next_stmt;
  unsigned resets; /* DEALLOCATE ALLs so far: names taken before are void */
  durable__map_t partitions; /* the partitions whose tables all exist */
  durable__strv_t created;   /* partitions created by the open transaction */
  char sqlstate[6];          /* of the last error */
};

/* The operations, each a line of the SQL table (postgres_sql.c) and a
 * prepared statement made from it on first use: one per table and
 * partition for those on a table. */
enum {
  OP_NONE, /* no statement: "no many-row form", the end of a list */
  /* on one table of one partition */
  OP_GET,
  OP_GET_FOR_UPDATE,
  OP_LIST,
  OP_LIST_TYPE,
  OP_LIST_TYPE_SKIP, /* OP_LIST_TYPE beside a bulk type (schema.h) */
  OP_MAX_ID,
  OP_INSERT,
  OP_UPSERT,
  OP_INSERT_ROWS, /* OP_INSERT for many rows (arrays) */
  OP_UPSERT_ROWS, /* OP_UPSERT for many rows (arrays) */
  OP_UPDATE,
  OP_REPLACE, /* OP_UPDATE if the version is $7 */
  /* the strict forms (backend.h): a refusal is an error, DURABLE__REFUSED_STATE
   * (schema.h) for a replace, unique_violation for an insert */
  OP_INSERT_STRICT,
  OP_INSERT_ROWS_STRICT,
  OP_REPLACE_STRICT,
  OP_REPLACE_ROWS_STRICT, /* OP_REPLACE_STRICT for many rows */
  OP_LOCK_ROWS,           /* OP_GET_FOR_UPDATE for many rows */
  OP_REMOVE,
  /* outside the partitions */
  OP_CHECK,  /* do all tables of partition $1 exist? */
  OP_LOCK,   /* serialise creating partition $1 across processes */
  OP_ENSURE, /* create partition $1 */
  OP_NOTIFY,
  OP_NOTIFY_ROWS, /* OP_NOTIFY of many payloads */
  OP_GRANTS,
  OP_GRANTS_ALL,
  OP_GRANT_ADD,
  OP_GRANT_CLEAR, /* clear modes $3 of a grant */
  OP_GRANT_DROP,  /* drop it when it is left with none */
  OP_ALIVE,       /* is advisory lock ($1 high, $2 low half) held? */
  OP_COUNT
};

/* ---- postgres_feed.c: the change feed and the liveness lock ------------- */

/* How long an answer of the liveness lock's session counts (backend.h's
 * fence_ms): a host cut off stops handing items over this long after the
 * last answer, and a takeover waits this long before its first item. */
#define DURABLE__PG_FENCE_MS 2000

/* backend.h's alive, watch_start, watch_stop and watch_beat. */
int durable__pg_alive(durable__conn_t *c, uint64_t key, int *alive,
                      durable_error_t *err);
int durable__pg_watch_start(durable_store_t *store, const char *url,
                            const char *instance, durable__watch_src_t **out,
                            durable_error_t *err);
void durable__pg_watch_stop(durable__watch_src_t *src, void (*done)(void *data),
                            void *data);
void durable__pg_watch_beat(durable__watch_src_t *src);
void durable__pg_watch_nudge(durable__watch_src_t *src);

/* ---- postgres_sql.c: the SQL and the prepared statements ---------------- */

/* The name of the prepared statement for `op` on `place` (NULL for the
 * statements outside partitions), preparing it on first use. */
int durable__pg_statement(durable__conn_t *c, int op,
                          const durable__place_t *place, char name[32],
                          durable_error_t *err);

/* The names of two statements, `op` and (unless `second_op` is OP_NONE)
 * `second_op`, from one cache generation: preparing one may void the names
 * taken before. */
int durable__pg_statement_pair(durable__conn_t *c, int op, int second_op,
                               const durable__place_t *place, char name[32],
                               char second[32], durable_error_t *err);

/* ---- postgres_pipeline.c: the queue and the round trip ------------------ */

/* Append a step to the connection's queue; its strings must live until it
 * is sent (a write's are copied into `buf` by the caller).  The step is
 * zeroed but for `kind`.  NULL when out of memory (`err` says so). */
step_t *durable__pg_push_step(durable__conn_t *c, int kind,
                              durable_error_t *err);
void durable__pg_clear_queue(durable__conn_t *c);

/* Send every queued step in one pipeline and take every result: outcomes
 * into their writes, answers into their reads, and the last step's result
 * into *last (may be NULL) when it is a read.  For a queue that ends with
 * COMMIT, *unknown (may be NULL) tells a failure whose outcome cannot be
 * known from one that certainly committed nothing. */
int durable__pg_drain(durable__conn_t *c, PGresult **last, int *unknown,
                      durable_error_t *err);

/* Run a prepared statement now, after whatever is queued, in the same round
 * trip.  Returns the result, or NULL with *rc and `err` set; `op` and
 * `subject` name it in messages. */
PGresult *durable__pg_run(durable__conn_t *c, const char *name, int n,
                          const char *const *vals, int *rc,
                          durable_error_t *err, const char *op,
                          const char *subject);

/* Fill `err` from a failed result (or from the connection when `res` is
 * NULL) and return the code: `code`, or when 0 the one the failure says
 * (DURABLE_EUNAVAIL, DURABLE_ECANCELED or DURABLE_EIO). */
int durable__pg_error(durable__conn_t *c, const PGresult *res, int code,
                      durable_error_t *err, const char *op,
                      const char *subject);

/* The last error said the schema or table is not there. */
int durable__pg_missing_relation(const durable__conn_t *c);
/* The partition is not known to exist any more (created again on use). */
void durable__pg_forget_partition(durable__conn_t *c, const char *partition);
/* A result that succeeded, with rows or without. */
int durable__pg_result_ok(const PGresult *res);

/* Row `row` of a result of NODE columns as a node (NULL: out of memory);
 * every row of it appended to `out`. */
durable_node_t *durable__pg_node_of_row(const PGresult *res, int row);
int durable__pg_push_rows(const PGresult *res, durable__nodes_t *out,
                          durable_error_t *err);

/* ---- postgres_conn.c: one libpq session --------------------------------- */

/* Connect, blocking, within 5 s in all, with the keepalives that bound how
 * long either end waits for the other.  `url` may be a URI or a conninfo.
 * On failure returns NULL with the reason, one line, in `why`. */
PGconn *durable__pg_open(const char *url, char *why, size_t size);

/* durable__pg_open on one host of the URL's list (`host`, and `port`
 * unless NULL, win over the URL's). */
PGconn *durable__pg_open_at(const char *url, const char *host, const char *port,
                            char *why, size_t size);
/* durable__pg_open for a store that only reads (durable_store_open_read):
 * of a URL that lists several hosts, a standby where one answers (the
 * URL's own target_session_attrs wins). */
PGconn *durable__pg_open_reader(const char *url, char *why, size_t size);
/* Of a URL that lists several hosts (`host=`), the distinct servers that
 * take writes, each asked on a connection of its own (blocking), until
 * `*stop` (atomic) is set: up to `max` into `out`; how many.  -1 for a URL
 * with one host, or that names its hosts otherwise (hostaddr, a service):
 * nothing to compare. */
int durable__pg_writable(const char *url, durable__server_t *out, int max,
                         const int *stop);

/* Which server `pg` is on (backend.h): 0, or -1 with the reason in `why`
 * (a standby, or the connection failed). */
int durable__pg_server(PGconn *pg, durable__server_t *out, char *why,
                       size_t size);

/* The URL or conninfo with any password (any option libpq hides) replaced
 * by "***", for messages (malloc'ed; NULL when out of memory). */
char *durable__pg_mask_password(const char *url);

/* A connection is gone: libpq says so, or the server's SQLSTATE (may be
 * NULL) says it is going away. */
int durable__pg_is_lost(PGconn *pg, const char *sqlstate);

/* printf into a new string (malloc'ed; NULL when out of memory). */
char *durable__pg_format(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#endif /* DURABLE_MESH_POSTGRES_H */

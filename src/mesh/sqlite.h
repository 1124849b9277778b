/*
 * sqlite.h: what the three files of the SQLite backend share.
 *
 * sqlite_conn.c opens a connection to a store file (checking whose file it
 * is, making the schema) and runs statements on it; sqlite_store.c is the
 * backend itself (durable__sqlite_backend): transactions, reads, writes and
 * grants; sqlite_watch.c keeps the commit log, rings the doorbell after a
 * commit, holds the liveness lock and hears other processes' commits;
 * sqlite_checkpoint.c copies the WAL into the database file on a thread of
 * its own.  Calls go one way, store -> watch -> conn -> checkpoint and
 * store -> conn, as between any two files of the library: no two call each
 * other.
 */
#ifndef DURABLE_MESH_SQLITE_H
#define DURABLE_MESH_SQLITE_H

#include "backend.h"

#include <sqlite3.h>
#include <stdint.h>

typedef struct durable__ckpt_s durable__ckpt_t; /* sqlite_checkpoint.c */

/* Statements of each node table, prepared lazily per connection; their SQL
 * is op_sql in sqlite_store.c, the only file that runs them. */
enum {
  OP_GET,
  OP_LIST,
  OP_MAX_ID,
  OP_INSERT,
  OP_UPDATE,
  OP_REFRESH,
  OP_REMOVE,
  OP_RETYPE,
  OP_REPLACE,
  OP_READ_BACK,
  OP_LIST_TYPE,
  OP_LIST_TYPE_SKIP,
  OP_COUNT
};

/* Statements that are not per table; their SQL is misc_sql in
 * sqlite_conn.c (durable__sqlite_stmt). */
enum {
  S_BEGIN,
  S_COMMIT,
  S_ROLLBACK,
  S_LAST_COMMIT,
  S_LOG,
  S_PRUNE,
  S_GRANTS_OF,
  S_GRANTS_ALL,
  S_GRANT_ADD,
  S_GRANT_CLEAR,
  S_GRANT_DROP,
  S_DATA_VERSION,
  S_READ_BEGIN,
  S_COUNTER,
  S_CHANGED_SINCE,
  S_COUNT
};

/* A connection: one sqlite3 handle and the statements prepared on it. */
struct durable__conn_s {
  sqlite3 *db;
  char *file;     /* for messages; ":memory:" for the in-memory store */
  size_t ntables; /* entries of durable__tables() */
  sqlite3_stmt **table_stmts; /* ntables * OP_COUNT, NULL until first use */
  sqlite3_stmt *stmts[S_COUNT];
  int64_t commit_id;   /* of the open write transaction; 0 until taken */
  int64_t version;     /* the last version it took (or found) */
  int bell_fd;         /* FILE-live, to ring the doorbell; BELL_* until open */
  uint64_t bell_key;   /* the liveness key of the store writing (0: unknown) */
  uint64_t busy_since; /* uv_hrtime() of the first try on a lock */
  durable__ckpt_t *ckpt; /* its checkpointer, once started */
  int ckpt_none;         /* the checkpointer could not start: inline */
};

/* bell_fd before it is opened, and when it never will be (the in-memory
 * store, or FILE-live could not be opened: the watches' timer covers it). */
#define BELL_UNOPENED (-1)
#define BELL_NONE (-2)

/* Bindings are SQLITE_STATIC: every caller resets and clears the statement
 * before returning, so SQLite never keeps a pointer past the call. */
static inline void bind_text(sqlite3_stmt *st, int i, const char *s) {
  sqlite3_bind_text(st, i, s ? s : "", -1, SQLITE_STATIC);
}

static inline void done_with(sqlite3_stmt *st) {
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
}

/* ---- sqlite_conn.c ---------------------------------------------------- */

/* How a connection opens: the engine's of a store that writes set the
 * journal and create the schema; the watch's only reads; those of a store
 * opened for reading (durable_store_open_read) write nothing, not even a
 * new file, and find durable's schema there or fail. */
typedef enum {
  DURABLE__SQLITE_WATCH,
  DURABLE__SQLITE_BOOTSTRAP,
  DURABLE__SQLITE_READ
} durable__sqlite_open_t;
int durable__sqlite_open(const char *url, durable__sqlite_open_t how,
                         durable__conn_t **out, durable_error_t *err);
void durable__sqlite_close(durable__conn_t *c);
/* 1 for the in-memory store: one connection, no other process. */
int durable__sqlite_single_connection(const char *url);
/* FILE-live: the liveness locks and the doorbell, beside the database. */
void durable__sqlite_live_path(const char *file, char *out, size_t size);

/* A failed statement `rc` during `what`, as a DURABLE_E* code. */
int durable__sqlite_fail(durable__conn_t *c, int rc, const char *what,
                         durable_error_t *err);
/* Prepare `sql` to keep (SQLITE_PREPARE_PERSISTENT); *out NULL on failure. */
int durable__sqlite_prepare(durable__conn_t *c, const char *sql,
                            sqlite3_stmt **out, durable_error_t *err);
/* The statement S_* `which`, prepared at its first use; NULL on failure
 * (then `err` says why). */
sqlite3_stmt *durable__sqlite_stmt(durable__conn_t *c, int which,
                                   durable_error_t *err);
/* Step a statement that returns no row to the end. */
int durable__sqlite_run(durable__conn_t *c, sqlite3_stmt *st, const char *what,
                        durable_error_t *err);
/* End the open transaction, if any, keeping nothing. */
void durable__sqlite_rollback(durable__conn_t *c);

/* ---- sqlite_watch.c --------------------------------------------------- */

/* The open transaction's commit id and the last version so far (c->version),
 * read from the commit log at their first use. */
int durable__sqlite_take_commit_id(durable__conn_t *c, durable_error_t *err);
/* Ring the doorbell after a commit (when another store may hear it). */
void durable__sqlite_ring(durable__conn_t *c);
/* backend.h's changed, alive, watch_start and watch_stop. */
int durable__sqlite_changed(durable__conn_t *c,
                            const durable__strv_t *namespaces,
                            const char *instance, int64_t *commit_id,
                            durable_error_t *err);
int durable__sqlite_alive(durable__conn_t *c, uint64_t key, int *alive,
                          durable_error_t *err);
int durable__sqlite_watch_start(durable_store_t *store, const char *url,
                                const char *instance,
                                durable__watch_src_t **out,
                                durable_error_t *err);
void durable__sqlite_watch_stop(durable__watch_src_t *w,
                                void (*done)(void *data), void *data);

/* ---- sqlite_checkpoint.c ---------------------------------------------- */

/* Checkpoint the WAL of the engine connection `c` on a thread of its own
 * rather than inside its commits (SQLite's default); and stop that thread,
 * before `c` closes. */
void durable__sqlite_checkpoints_apart(durable__conn_t *c);
void durable__sqlite_checkpoints_stop(durable__conn_t *c);

#endif /* DURABLE_MESH_SQLITE_H */

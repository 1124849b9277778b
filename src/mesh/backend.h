/*
 * backend.h: what a database must provide to be a durable store.
 *
 * Everything the two stores have in common lives above this interface, once:
 * path rules, placement, the write semantics (write.c: what each kind of
 * write reads, decides and writes), group commit, the worker threads, access
 * checks, the change feed and synced queries (engine.c, read.c, write.c,
 * access.c, feed.c).  A backend keeps only its SQL and its I/O: a blocking
 * connection used by one worker thread at a time, a handful of primitive
 * statements, and a way to hear about commits made by other processes.
 *
 *   loop thread            worker threads              database
 *   -----------            --------------              --------
 *   durable_store_*  -->   engine.c jobs --> backend --> SQLite / PostgreSQL
 *   callbacks        <--   (uv_async)
 *   feed.c           <--   backend->watch_* (other processes' commits)
 *
 * Writes have deferred results.  insert / upsert / update / remove inside a
 * transaction may only queue their statement and report its outcome later,
 * in a durable__outcome_t the caller keeps: by the time flush() or commit()
 * returns 0, every outcome queued before is known.  Any read in the
 * transaction (get, list, max_id, ...) sees every write queued before it,
 * as if each had run when it was queued.  SQLite runs each statement at
 * once (the outcome is known when the call returns, flush does nothing);
 * PostgreSQL sends the queue in one pipeline at the next read, flush or
 * commit, so a group of writes that need no read costs one round trip.
 *
 * Conventions: every function returns 0 or a negative DURABLE_E* code and
 * fills `err` (never NULL here) with a message on failure.  A negative
 * return inside a transaction means the transaction is spoiled: the caller
 * rolls back.  DURABLE_EUNAVAIL means the connection is gone: the caller
 * disconnects and reconnects.  DURABLE_ECANCELED means the database rolled
 * the transaction back on its own (PostgreSQL: a deadlock between two
 * processes' groups, a serialization failure): nothing of it was committed,
 * and the caller runs it again.  `place` names where a row lives: its
 * partition (first path segment) and its table (durable__path_table()).
 */
#ifndef DURABLE_MESH_BACKEND_H
#define DURABLE_MESH_BACKEND_H

#include "clock.h"
#include "durable_internal.h"
#include "error.h"
#include "text.h"

typedef struct durable__conn_s durable__conn_t; /* defined by each backend */
typedef struct durable__watch_src_s durable__watch_src_t;

typedef struct {
  const char *partition; /* first path segment */
  const char *table;     /* from durable__path_table() */
} durable__place_t;

/* A growable array of nodes that the caller frees with durable__nodes_free.
 * A list marked `packed` before a backend fills it keeps the nodes the
 * backend adds (durable__nodes_add) in a few large blocks of its own (node.c
 * says why): such a node is the list's, and outlives it only as a copy. */
typedef struct durable__node_block_s durable__node_block_t;
typedef struct {
  durable_node_t **items;
  size_t count, cap;
  int packed;
  durable__node_block_t *blocks;
} durable__nodes_t;

/* Append `node`, which the list then owns (it stays its own allocation). */
int durable__nodes_push(durable__nodes_t *list, durable_node_t *node);

/* A node in one allocation (node.c): `text` holds ns, id, path, node_type,
 * content and main_node, each `len` bytes (NULL for a null field).  Every
 * node the store hands out is made so; durable_node_free frees it. */
typedef struct {
  const char *s;
  size_t len;
} durable__node_text_t;
durable_node_t *durable__node_pack(const durable__node_text_t text[6],
                                   int64_t version, int64_t created_at,
                                   int64_t updated_at);
/* Append the node of a row a backend read: in a block when list->packed,
 * else packed on its own.  NULL when out of memory (nothing appended). */
durable_node_t *durable__nodes_add(durable__nodes_t *list,
                                   const durable__node_text_t text[6],
                                   int64_t version, int64_t created_at,
                                   int64_t updated_at);
/* 1 when `node` lives in one of the list's blocks. */
int durable__nodes_in_block(const durable__nodes_t *list,
                            const durable_node_t *node);
/* Done with `node`, an entry of `list` the caller removes from it: freed
 * unless it lives in a block (freed with the list). */
void durable__nodes_drop(durable__nodes_t *list, durable_node_t *node);
void durable__nodes_free(durable__nodes_t *list);

/* Grants as the backends read them (access.c frees them). */
typedef struct {
  char *principal;
  char *prefix;
  int modes; /* DURABLE_GRANT_READ | DURABLE_GRANT_WRITE, never 0 */
} durable__grant_t;

typedef struct {
  durable__grant_t *items;
  size_t count, cap;
} durable__grants_t;

int durable__grants_push(durable__grants_t *v, const char *principal,
                         const char *prefix, int modes);
void durable__grants_free(durable__grants_t *v);

/* The outcome of one write, filled in by the backend once the statement
 * ran.  The caller sets status to DURABLE__PENDING before the call and keeps
 * the outcome in place until it is known (or the transaction rolled back). */
#define DURABLE__PENDING 1
typedef struct {
  int status;         /* DURABLE__PENDING, then 0 or a row-level refusal:
                         DURABLE_EEXIST (insert: the row is there),
                         DURABLE_ENOTFOUND (update/remove: it is not) */
  int inserted;       /* upsert: 1 when the row was new */
  int64_t version;    /* insert/upsert/update: the version written */
  int64_t created_at; /* insert/upsert/update: the row's created_at as
                         stored (an upsert keeps an existing row's) */
  int strict;         /* set by the caller of an insert or a replace, where the
                         backend has strict_writes: a refusal fails the transaction
                         instead (commit or flush answers DURABLE__STRICT_REFUSED),
                         so a job of several writes needs no round trip for its
                         outcomes before the commit */
} durable__outcome_t;

/* The answer of commit or flush when a strict write was refused: nothing
 * is committed, and the store runs the group again without strict writes
 * (write.c), which finds out which write it was.  Never leaves the store. */
#define DURABLE__STRICT_REFUSED (-1000)

/* The answer of a deferred get (get_later): status DURABLE__PENDING until
 * it is known, then 0 with `node` (the caller's to free), DURABLE_ENOTFOUND,
 * or a negative code when the statement itself failed. */
typedef struct {
  int status;
  durable_node_t *node;
} durable__got_t;

/* The server a connection is on, where a store may be served by one of
 * several (PostgreSQL: a primary and its standbys, one promoted in its
 * place).  Two connections are on the same server when `system` and
 * `timeline` match: a standby cloned from a primary shares its system
 * identifier, and its promotion starts a new timeline.  `where` is for
 * messages only (host:port). */
typedef struct {
  char system[32];
  unsigned timeline;
  char where[160];
  /* when it started: two standbys promoted at once share a system and a
   * timeline, and differ here (only split-brain checks compare it) */
  char started[48];
} durable__server_t;

typedef struct durable__backend_s {
  const char *name; /* "sqlite" or "postgresql" */

  /* Open one connection (the store opens one per worker thread), creating
   * the schema if needed.  `url` is the store URL as given.  `readonly`
   * (durable_store_open_read): write nothing at all -- no schema, no
   * file -- and find the schema there, or fail naming the store; a
   * PostgreSQL server in recovery (a standby) is welcome. */
  int (*connect)(const char *url, int readonly, durable__conn_t **out,
                 durable_error_t *err);
  void (*disconnect)(durable__conn_t *conn);
  /* Which server `conn` is on (NULL: a backend with one server only).  The
   * store keeps every connection on the server its watch is on (server.c):
   * a connection that finds another one is dropped. */
  /* A commit on `conn` that waits long is told to `fn` (on the worker's
   * thread): once it has waited a few seconds, with what the server says it
   * waits for (synchronous replication, a lock), and with NULL when it
   * ends.  NULL: a backend whose commits never wait on another server. */
  void (*watch_commits)(durable__conn_t *conn,
                        void (*fn)(void *data, const char *why), void *data);
  int (*server_of)(durable__conn_t *conn, durable__server_t *out,
                   durable_error_t *err);
  /* 1 when every connection of this URL must be the same one (an in-memory
   * SQLite database): the store then runs reads on its writer thread. */
  int (*single_connection)(const char *url);
  /* The URL as messages and logs name the store, its secrets (a password)
   * shown as "***": malloc'ed, NULL when out of memory.  A backend whose
   * URLs hold no secret leaves this member NULL, and the URL is shown as
   * it is. */
  char *(*display_name)(const char *url);

  /* A write transaction.  begin takes the write lock where the database
   * needs one (SQLite: BEGIN IMMEDIATE), so that a read for update inside
   * it sees the latest commit of every process; it may also just be queued
   * with what follows.  commit sends whatever is still queued and commits;
   * on failure *unknown is 1 when the commit may nevertheless have taken
   * effect (the connection broke after COMMIT was sent), 0 when it
   * certainly did not (a queued statement failed, or COMMIT was refused):
   * then the transaction is rolled back, as by rollback.  rollback drops
   * what is queued and ends the transaction. */
  int (*begin)(durable__conn_t *conn, durable_error_t *err);
  int (*commit)(durable__conn_t *conn, int *unknown, durable_error_t *err);
  void (*rollback)(durable__conn_t *conn);

  /* Reads.  get: DURABLE_ENOTFOUND when absent; `for_update` locks the row
   * until the transaction ends (inside begin/commit only).  list: children of
   * `ns` with id > after (after may be ""), in id order (byte order), at most
   * `limit`, appended to `out`.  max_id: the greatest id among the children
   * of `ns` that consist of exactly `width` digits, "" when there is none
   * (*out malloc'ed). */
  int (*get)(durable__conn_t *conn, durable__place_t place, const char *ns,
             const char *id, int for_update, durable_node_t **out,
             durable_error_t *err);
  int (*list)(durable__conn_t *conn, durable__place_t place, const char *ns,
              const char *after, size_t limit, durable__nodes_t *out,
              durable_error_t *err);
  int (*max_id)(durable__conn_t *conn, durable__place_t place, const char *ns,
                int width, char **out, durable_error_t *err);
  /* Optional: a get whose answer comes with the next read, flush or commit
   * (a NULL get_later means: call get).  It fills `got` by the time that
   * call returns 0; the strings are copied.  PostgreSQL sends it in that
   * call's pipeline, so that a listing and the probes beside it cost one
   * round trip, not one each (50 ms each on a slow link). */
  int (*get_later)(durable__conn_t *conn, durable__place_t place,
                   const char *ns, const char *id, durable__got_t *got,
                   durable_error_t *err);
  /* An operator's listing: the partitions that exist (SQLite: one, "",
   * since its tables are shared), and the nodes of one NodeType in one
   * place with path > after, in path order, at most `limit` (a scan). */
  int (*partitions)(durable__conn_t *conn, durable__strv_t *out,
                    durable_error_t *err);
  int (*list_type)(durable__conn_t *conn, durable__place_t place,
                   const char *node_type, const char *after, size_t limit,
                   durable__nodes_t *out, durable_error_t *err);

  /* Writes, inside begin/commit, with deferred outcomes (see the top).  The
   * store fills every field of `node` except `version`, which the backend
   * assigns from a store-wide counter that grows with each write, also
   * across a delete and a re-create; the backend copies what it keeps of
   * `node`.
   *   insert: a new row; EEXIST when the row is there (nothing changed, the
   *           transaction stays usable).
   *   upsert: insert, or else update everything but created_at; never
   *           refused; `inserted` says which.
   *   update: replace the row (all of it, created_at included) that the
   *           caller read for update; remove: delete it.
   * flush: run everything queued and fill in its outcomes. */
  int (*insert)(durable__conn_t *conn, durable__place_t place,
                const durable_node_t *node, durable__outcome_t *out,
                durable_error_t *err);
  int (*upsert)(durable__conn_t *conn, durable__place_t place,
                const durable_node_t *node, durable__outcome_t *out,
                durable_error_t *err);
  int (*update)(durable__conn_t *conn, durable__place_t place,
                const durable_node_t *node, durable__outcome_t *out,
                durable_error_t *err);
  /* replace: update the row, unread, if it is at version `expected`
   * (node_type and content; created_at stays and comes back in the
   * outcome); ECONFLICT when it is at another, ENOTFOUND when absent.  No
   * read before it: one statement, one round trip with the rest. */
  int (*replace)(durable__conn_t *conn, durable__place_t place,
                 const durable_node_t *node, int64_t expected,
                 durable__outcome_t *out, durable_error_t *err);
  int (*remove)(durable__conn_t *conn, durable__place_t place, const char *ns,
                const char *id, durable__outcome_t *out, durable_error_t *err);
  int (*flush)(durable__conn_t *conn, durable_error_t *err);
  /* Lock the row ns/id (if there is one) until the transaction ends, right
   * after begin, and read it into `got` as get_later does.  The store locks
   * the rows a group will update this way, all in one order (place,
   * namespace, id), so that two processes' transactions never wait for
   * each other in a circle, and serves the group's reads for update of
   * those rows from what the locks read.  NULL where the database takes
   * one write lock for everything (SQLite). */
  int (*lock)(durable__conn_t *conn, durable__place_t place, const char *ns,
              const char *id, durable__got_t *got, durable_error_t *err);
  /* 1 when insert and replace honour durable__outcome_t.strict: where
   * statements wait in a pipeline (PostgreSQL), a refusal that aborts the
   * transaction saves the round trip that learning it would take. */
  int strict_writes;

  /* Called once per transaction before commit with the distinct namespaces
   * it changed, so that other processes hear of them after the commit
   * (PostgreSQL: one NOTIFY each, carrying `instance` so that a process can
   * skip its own).  Sets *commit_id to an id that the watch source reports
   * back for this commit, or 0.  A namespace may be listed that in the end
   * was not changed (a queued insert that met its row): the others then
   * re-read it for nothing, which is harmless. */
  int (*changed)(durable__conn_t *conn, const durable__strv_t *namespaces,
                 const char *instance, int64_t *commit_id,
                 durable_error_t *err);

  /* Access grants, one row per (principal, prefix) holding a mode mask.
   * grants_of: the grants of `principal` (NULL: of everyone), ordered by
   * principal then prefix, rows whose mask is 0 left out; inside a write
   * transaction it sees the grants as of that transaction.  grant: with
   * `add`, OR `modes` into the row (made if need be); without, clear them
   * from it and drop a row left with none.  The store runs grant inside
   * begin/commit. */
  int (*grants_of)(durable__conn_t *conn, const char *principal,
                   durable__grants_t *out, durable_error_t *err);
  int (*grant)(durable__conn_t *conn, const char *principal, const char *prefix,
               int modes, int add, durable_error_t *err);

  /* Liveness (durable__store_alive): *alive = 1 when the store whose
   * instance has the liveness key `key` (durable__instance_key) still holds
   * its lock.  watch_start takes this store's own lock, watch_stop (or the
   * process's death) lets it go. */
  int (*alive)(durable__conn_t *conn, uint64_t key, int *alive,
               durable_error_t *err);

  /* Hearing about other processes' commits.  watch_start runs on the loop
   * thread and calls durable__store_changed_elsewhere() (store.h) for each
   * namespace another process changed, or with NULL when it may have missed
   * some (after a reconnect): then everything re-syncs.  It also holds the
   * liveness lock of `instance` for as long as it runs (see alive).
   * watch_stop closes its handles and calls `done` once they are closed. */
  int (*watch_start)(durable_store_t *store, const char *url,
                     const char *instance, durable__watch_src_t **out,
                     durable_error_t *err);
  void (*watch_stop)(durable__watch_src_t *src, void (*done)(void *data),
                     void *data);

  /* Fencing (durable__store_live).  A lock that can be lost while its
   * process runs (PostgreSQL: with the session that holds it, over a network
   * that may be cut) is trusted for fence_ms after the watch last heard its
   * session answer: watch_start reports each answer with
   * durable__store_live_confirmed, asking at least every fence_ms / 4 while
   * anyone wants to know, and at once when watch_beat is called.  0 (no
   * watch_beat) for a lock only the process's end can drop (SQLite's OFD
   * locks). */
  uint32_t fence_ms;
  void (*watch_beat)(durable__watch_src_t *src);
  /* A connection found a server other than the watch's
   * (durable__store_server_check): if the watch is reconnecting, it tries
   * again now rather than after its backoff.  NULL: nothing to do. */
  void (*watch_nudge)(durable__watch_src_t *src);
} durable__backend_t;

extern const durable__backend_t durable__sqlite_backend;
extern const durable__backend_t durable__postgres_backend;

/* Test-only (tests/fault/io_fault_test.c): when set, durable_store_open
 * uses what this returns for the backend it chose for a URL -- a wrapper
 * that fails chosen calls -- instead of the backend itself.  NULL, and so
 * nothing, everywhere else. */
extern const durable__backend_t *(*durable__backend_wrap)(
    const durable__backend_t *be);

#endif /* DURABLE_MESH_BACKEND_H */

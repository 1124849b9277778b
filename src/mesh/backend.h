/*
 * backend.h: what a database must provide to be a durable store.
 *
 * Everything the two stores have in common lives above this interface, once:
 * path rules, placement, the write semantics (create / put / replace / delete
 * / mutate are all "read the row for update, decide, then insert, update or
 * delete"), group commit, the worker threads, access checks, the change feed
 * and synced queries (store.c, write.c, feed.c, access.c).  A backend keeps
 * only its SQL and its I/O: a blocking connection used by one worker thread at
 * a time, a handful of primitive statements, and a way to hear about commits
 * made by other processes.
 *
 *   loop thread            worker threads              database
 *   -----------            --------------              --------
 *   durable_store_*  -->   store.c jobs  --> backend --> SQLite / PostgreSQL
 *   callbacks        <--   (uv_async)
 *   feed.c           <--   backend->watch_* (other processes' commits)
 *
 * Conventions: every function returns 0 or a negative DURABLE_E* code and
 * fills `err` (never NULL here) with a message on failure.  DURABLE_EUNAVAIL
 * means the connection is gone: the caller disconnects and reconnects.
 * `place` names where a row lives: its partition (first path segment) and
 * its table (durable_path_table()).
 */
#ifndef DURABLE_MESH_BACKEND_H
#define DURABLE_MESH_BACKEND_H

#include "durable.h"

typedef struct durable__conn_s durable__conn_t; /* defined by each backend */
typedef struct durable__watch_src_s durable__watch_src_t;

typedef struct {
  const char *partition; /* first path segment */
  const char *table;     /* from durable_path_table() */
} durable__place_t;

/* A growable array of nodes that the caller frees with durable__nodes_free. */
typedef struct {
  durable_node_t **items;
  size_t count, cap;
} durable__nodes_t;

int durable__nodes_push(durable__nodes_t *list, durable_node_t *node);
void durable__nodes_free(durable__nodes_t *list);

/* A growable array of strings. */
typedef struct {
  char **items;
  size_t count, cap;
} durable__strv_t;

int durable__strv_push(durable__strv_t *v, const char *s);
void durable__strv_free(durable__strv_t *v);

typedef struct durable__backend_s {
  const char *name; /* "sqlite" or "postgresql" */

  /* Open one connection (the store opens one per worker thread), creating
   * the schema if needed.  `url` is the store URL as given. */
  int (*connect)(const char *url, durable__conn_t **out, durable_error_t *err);
  void (*disconnect)(durable__conn_t *conn);
  /* 1 when every connection of this URL must be the same one (an in-memory
   * SQLite database): the store then runs reads on its writer thread. */
  int (*single_connection)(const char *url);

  /* A write transaction.  begin takes the write lock where the database
   * needs one (SQLite: BEGIN IMMEDIATE), so that a read for update inside
   * it sees the latest commit of every process. */
  int (*begin)(durable__conn_t *conn, durable_error_t *err);
  int (*commit)(durable__conn_t *conn, durable_error_t *err);
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

  /* Writes, inside begin/commit.  The store fills every field of `node`
   * except `version`, which the backend assigns from a store-wide counter
   * that grows with each write (and sets in node->version).  insert gives
   * DURABLE_EEXIST when the row exists (without spoiling the transaction);
   * update and remove act on an existing row (the caller read it for
   * update). */
  int (*insert)(durable__conn_t *conn, durable__place_t place,
                durable_node_t *node, durable_error_t *err);
  int (*update)(durable__conn_t *conn, durable__place_t place,
                durable_node_t *node, durable_error_t *err);
  int (*remove)(durable__conn_t *conn, durable__place_t place, const char *ns,
                const char *id, durable_error_t *err);

  /* Called once per transaction before commit with the distinct namespaces
   * it changed, so that other processes hear of them after the commit
   * (PostgreSQL: one NOTIFY each, carrying `instance` so that a process can
   * skip its own).  Sets *commit_id to an id that the watch source reports
   * back for this commit, or 0. */
  int (*changed)(durable__conn_t *conn, const durable__strv_t *namespaces,
                 const char *instance, int64_t *commit_id,
                 durable_error_t *err);

  /* Access grants: the prefixes `principal` may read. */
  int (*grants_of)(durable__conn_t *conn, const char *principal,
                   durable__strv_t *out, durable_error_t *err);
  int (*grant)(durable__conn_t *conn, const char *principal,
               const char *prefix, int add, durable_error_t *err);

  /* Hearing about other processes' commits.  watch_start runs on the loop
   * thread and calls durable__store_changed_elsewhere() (store.h) for each
   * namespace another process changed, or with NULL when it may have missed
   * some (after a reconnect): then everything re-syncs.  watch_stop closes
   * its handles and calls `done` once they are closed. */
  int (*watch_start)(durable_store_t *store, const char *url,
                     const char *instance, durable__watch_src_t **out,
                     durable_error_t *err);
  void (*watch_stop)(durable__watch_src_t *src, void (*done)(void *data),
                     void *data);
} durable__backend_t;

extern const durable__backend_t durable__sqlite_backend;
extern const durable__backend_t durable__postgres_backend;

#endif /* DURABLE_MESH_BACKEND_H */

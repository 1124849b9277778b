/*
 * sqlite_store.c: the SQLite backend (durable__sqlite_backend).
 *
 * Everything a store does that is not SQL lives above backend.h; the
 * SQLite backend keeps SQLite's SQL and I/O only, in three files (sqlite.h):
 * this one has the transactions, reads, writes and grants; sqlite_conn.c
 * opens the connections and keeps their statements; sqlite_watch.c hears
 * other processes' commits and keeps the liveness locks.  The statements of
 * the node tables are prepared once per connection and kept, keyed by
 * (table, operation); the node tables come from durable__tables(), the only
 * names ever put into SQL text, so nothing taken from a path reaches it.
 *
 * Three facts of SQLite shape the rest:
 *
 *  - One writer at a time per file, across processes.  A write transaction is
 *    BEGIN IMMEDIATE: it takes the write lock first, so the read-for-update
 *    inside it sees the latest commit of every process and can never be
 *    refused at upgrade time (SQLITE_BUSY_SNAPSHOT).  The lock is waited for
 *    up to BUSY_TIMEOUT_MS (sqlite_conn.c) so that two processes writing one
 *    file both succeed; longer is reported as "locked".
 *  - No row locks: the write lock already serialises, so `for_update` is
 *    nothing more than a read here.
 *  - No notifications between processes.  Instead every write transaction
 *    takes a commit id (one more than the greatest so far) and logs, per
 *    namespace it changed, a row (commit id, namespace) in durable_commits;
 *    after COMMIT it rings a doorbell, which the watches of the other
 *    processes hear, and they read the log (sqlite_watch.c).
 *
 * Versions come from the same log: each row also carries the last version
 * its transaction wrote, so a transaction reads the newest row once (a seek
 * to the right edge of the log's key), counts on from there -- one more per
 * write, across processes and across a delete and a re-create -- and writes
 * one row of its own beside the nodes, instead of a counter per write.
 * SQLite runs each write at once: an outcome is known when the call returns
 * and flush has nothing to do.  A put is an insert that, meeting its row,
 * becomes an update; a create is the insert alone.
 *
 * The partition of a place is not used: on SQLite a partition is just the
 * first segment of `namespace`, already part of every key, and all
 * partitions share the same tables.
 */
#include "schema.h"
#include "sqlite.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ID_WIDTH 64

#define NODE_COLUMNS                                                           \
  "namespace, id, path, node_type, content, main_node, version, "              \
  "created_at, updated_at"

/* The SQL of the statements of each node table (sqlite.h); %s is the
 * table. */
static const char *const op_sql[OP_COUNT] = {
    [OP_GET] = "SELECT " NODE_COLUMNS " FROM %s "
               "WHERE namespace = ?1 AND id = ?2",
    [OP_LIST] = "SELECT " NODE_COLUMNS " FROM %s "
                "WHERE namespace = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
    /* BETWEEN on the key keeps it a primary-key range scan read backwards;
     * length and GLOB then drop the few ids in that range that are not
     * exactly `width` digits (e.g. "12a" or "1234" for width 3). */
    [OP_MAX_ID] = "SELECT id FROM %s WHERE namespace = ?1 "
                  "AND id BETWEEN ?2 AND ?3 AND length(id) = ?4 "
                  "AND id NOT GLOB '*[^0-9]*' ORDER BY id DESC LIMIT 1",
    /* DO NOTHING touches only the key conflict: EEXIST without an error,
     * so the transaction stays usable. */
    [OP_INSERT] = "INSERT INTO %s (" NODE_COLUMNS ") VALUES "
                  "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
    /* path and main_node follow from the key and never change; node_type
     * is set apart (OP_RETYPE), only when it changes: a column an UPDATE
     * names is an index entry SQLite rewrites, and the type index would
     * otherwise cost every acknowledgement a page.  ?3, ?4, ?6 are unused
     * slots, so every write takes the same bindings. */
    [OP_UPDATE] = "UPDATE %s SET content = ?5, version = ?7, "
                  "created_at = ?8, updated_at = ?9 "
                  "WHERE namespace = ?1 AND id = ?2",
    /* the update half of a put: everything but created_at, which it reads
     * back */
    [OP_REFRESH] = "UPDATE %s SET content = ?5, version = ?7, "
                   "updated_at = ?9 "
                   "WHERE namespace = ?1 AND id = ?2",
    [OP_RETYPE] = "UPDATE %s SET node_type = ?4 "
                  "WHERE namespace = ?1 AND id = ?2 AND node_type <> ?4",
    /* a compare-and-set on the version (?8 carries the expected one) */
    [OP_REPLACE] = "UPDATE %s SET content = ?5, version = ?7, "
                   "updated_at = ?9 WHERE namespace = ?1 AND id = ?2 "
                   "AND version = ?8",
    /* after a refresh or a replace: what it kept, on the page it wrote */
    [OP_READ_BACK] = "SELECT created_at, node_type = ?4 FROM %s "
                     "WHERE namespace = ?1 AND id = ?2",
    [OP_REMOVE] = "DELETE FROM %s WHERE namespace = ?1 AND id = ?2",
    /* served by the type index {table}_by_type (schema.h) */
    [OP_LIST_TYPE] =
        "SELECT " NODE_COLUMNS " FROM %s "
        "WHERE node_type = ?1 AND path > ?2 ORDER BY path LIMIT ?3",
    /* the same in a table whose type index leaves its bulk type out (the
     * second %s): SQLite uses a partial index only for a query that carries
     * its WHERE term literally; never asked for the bulk type itself */
    [OP_LIST_TYPE_SKIP] =
        "SELECT " NODE_COLUMNS " FROM %s "
        "WHERE node_type = ?1 AND node_type <> '%s' AND path > ?2 "
        "ORDER BY path LIMIT ?3",
};

/* ---- statements of the node tables ------------------------------------ */

/* The statement `op` of the table `place` names.  The table must be one of
 * durable__tables(): it is pasted into SQL text. */
static sqlite3_stmt *table_stmt(durable__conn_t *c, durable__place_t place,
                                int op, durable_error_t *err) {
  const char *const *tables = durable__tables();
  size_t t;
  for (t = 0; t < c->ntables; t++)
    if (place.table == tables[t] ||
        (place.table != NULL && strcmp(place.table, tables[t]) == 0))
      break;
  if (t == c->ntables) {
    durable__error(err, DURABLE_EINVAL, "unknown node table '%s'",
                   place.table ? place.table : "(null)");
    return NULL;
  }
  sqlite3_stmt **slot = &c->table_stmts[t * OP_COUNT + (size_t)op];
  if (*slot == NULL) {
    char sql[512];
    const char *bulk = durable__bulk_type(tables[t]);
    /* only OP_LIST_TYPE_SKIP has a second %s; the others ignore it */
    snprintf(sql, sizeof(sql), op_sql[op], tables[t], bulk ? bulk : "");
    if (durable__sqlite_prepare(c, sql, slot, err) != 0)
      return NULL;
  }
  return *slot;
}

/* The six text columns of the current row of a statement selecting
 * NODE_COLUMNS; -1 when one reads NULL (every column is NOT NULL: out of
 * memory). */
static int row_text(sqlite3_stmt *st, durable__node_text_t text[6]) {
  for (int i = 0; i < 6; i++) {
    text[i].s = (const char *)sqlite3_column_text(st, i);
    text[i].len = (size_t)sqlite3_column_bytes(st, i);
    if (text[i].s == NULL)
      return -1;
  }
  return 0;
}

/* The node in that row; NULL only when out of memory. */
static durable_node_t *row_node(sqlite3_stmt *st) {
  durable__node_text_t text[6];
  if (row_text(st, text) < 0)
    return NULL;
  return durable__node_pack(text, sqlite3_column_int64(st, 6),
                            sqlite3_column_int64(st, 7),
                            sqlite3_column_int64(st, 8));
}

/* The version of the transaction's next write. */
static int take_version(durable__conn_t *c, int64_t *version,
                        durable_error_t *err) {
  int rc = durable__sqlite_take_commit_id(c, err);
  if (rc != 0)
    return rc;
  *version = ++c->version;
  return 0;
}

static int connect_(const char *url, int readonly, durable__conn_t **out,
                    durable_error_t *err) {
  return durable__sqlite_open(
      url, readonly ? DURABLE__SQLITE_READ : DURABLE__SQLITE_BOOTSTRAP, out,
      err);
}

/* ---- transactions ----------------------------------------------------- */

static int begin(durable__conn_t *c, durable_error_t *err) {
  /* A transaction left open by an earlier failure would refuse every later
   * BEGIN; end it rather than wedge the connection. */
  if (!sqlite3_get_autocommit(c->db))
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  c->commit_id = c->version = 0;
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_BEGIN, err);
  return st ? durable__sqlite_run(c, st, "begin", err) : err->code;
}

static int commit(durable__conn_t *c, int *unknown, durable_error_t *err) {
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_COMMIT, err);
  int rc = st ? durable__sqlite_run(c, st, "commit", err) : err->code;
  /* Ring also when COMMIT failed: it may have committed, and a check that
   * finds nothing costs nothing. */
  if (c->commit_id != 0)
    durable__sqlite_ring(c);
  /* Whether a failed COMMIT left anything on disk is not ours to know. */
  *unknown = rc != 0 && st != NULL;
  if (rc != 0)
    durable__sqlite_rollback(c);
  return rc;
}

/* ---- reads ------------------------------------------------------------ */

static int get(durable__conn_t *c, durable__place_t place, const char *ns,
               const char *id, int for_update, durable_node_t **out,
               durable_error_t *err) {
  (void)for_update; /* BEGIN IMMEDIATE already holds the only write lock */
  *out = NULL;
  sqlite3_stmt *st = table_stmt(c, place, OP_GET, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    durable_node_t *node = row_node(st);
    done_with(st);
    if (node == NULL)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    *out = node;
    return 0;
  }
  done_with(st);
  if (rc == SQLITE_DONE)
    return durable__error(err, DURABLE_ENOTFOUND, "'%s%s%s' not found",
                          ns ? ns : "", ns && *ns ? "/" : "", id ? id : "");
  return durable__sqlite_fail(c, rc, "get", err);
}

/* Step a bound statement to its end, appending each row's node to `out`. */
static int collect_rows(durable__conn_t *c, sqlite3_stmt *st,
                        durable__nodes_t *out, const char *what,
                        durable_error_t *err) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    durable__node_text_t text[6];
    if (row_text(st, text) < 0 ||
        durable__nodes_add(out, text, sqlite3_column_int64(st, 6),
                           sqlite3_column_int64(st, 7),
                           sqlite3_column_int64(st, 8)) == NULL) {
      done_with(st);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  }
  done_with(st);
  return rc == SQLITE_DONE ? 0 : durable__sqlite_fail(c, rc, what, err);
}

static int list(durable__conn_t *c, durable__place_t place, const char *ns,
                const char *after, size_t limit, durable__nodes_t *out,
                durable_error_t *err) {
  if (limit == 0)
    return 0;
  sqlite3_stmt *st = table_stmt(c, place, OP_LIST, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, after);
  sqlite3_bind_int64(st, 3, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
  return collect_rows(c, st, out, "list", err);
}

static int partitions(durable__conn_t *c, durable__strv_t *out,
                      durable_error_t *err) {
  (void)c;
  /* one set of tables holds every partition */
  if (durable__strv_push(out, "") < 0)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return 0;
}

static int list_type(durable__conn_t *c, durable__place_t place,
                     const char *node_type, const char *after, size_t limit,
                     durable__nodes_t *out, durable_error_t *err) {
  if (limit == 0)
    return 0;
  int op = durable__type_query_skips_bulk(place.table, node_type)
               ? OP_LIST_TYPE_SKIP
               : OP_LIST_TYPE;
  sqlite3_stmt *st = table_stmt(c, place, op, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, node_type);
  bind_text(st, 2, after);
  sqlite3_bind_int64(st, 3, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
  return collect_rows(c, st, out, "list by type", err);
}

static int max_id(durable__conn_t *c, durable__place_t place, const char *ns,
                  int width, char **out, durable_error_t *err) {
  *out = NULL;
  if (width < 1 || width > MAX_ID_WIDTH)
    return durable__error(err, DURABLE_EINVAL, "id width %d out of range",
                          width);
  char low[MAX_ID_WIDTH + 1], high[MAX_ID_WIDTH + 1];
  memset(low, '0', (size_t)width);
  memset(high, '9', (size_t)width);
  low[width] = high[width] = '\0';
  sqlite3_stmt *st = table_stmt(c, place, OP_MAX_ID, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, low);
  bind_text(st, 3, high);
  sqlite3_bind_int(st, 4, width);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *out = strdup(sqlite3_column_text(st, 0)
                      ? (const char *)sqlite3_column_text(st, 0)
                      : "");
  else if (rc == SQLITE_DONE)
    *out = strdup("");
  done_with(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return durable__sqlite_fail(c, rc, "max id", err);
  if (*out == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return 0;
}

/* ---- writes ----------------------------------------------------------- */

static void bind_node(sqlite3_stmt *st, const durable_node_t *node,
                      int64_t version) {
  bind_text(st, 1, node->ns);
  bind_text(st, 2, node->id);
  bind_text(st, 3, node->path);
  bind_text(st, 4, node->node_type);
  bind_text(st, 5, node->content ? node->content : "{}");
  bind_text(st, 6, node->main_node);
  sqlite3_bind_int64(st, 7, version);
  sqlite3_bind_int64(st, 8, node->created_at);
  sqlite3_bind_int64(st, 9, node->updated_at);
}

/* Statement `op` of the node's table with its key and type bound (?1, ?2,
 * ?4: the slots of every node write). */
static sqlite3_stmt *key_type_stmt(durable__conn_t *c, durable__place_t place,
                                   int op, const durable_node_t *node,
                                   durable_error_t *err) {
  sqlite3_stmt *st = table_stmt(c, place, op, err);
  if (st != NULL) {
    bind_text(st, 1, node->ns);
    bind_text(st, 2, node->id);
    bind_text(st, 4, node->node_type);
  }
  return st;
}

/* Write `node` with statement `op` under `version`. */
static int write_node(durable__conn_t *c, durable__place_t place, int op,
                      const durable_node_t *node, int64_t version,
                      durable__outcome_t *out, durable_error_t *err) {
  sqlite3_stmt *st = table_stmt(c, place, op, err);
  if (st == NULL)
    return err->code;
  bind_node(st, node, version);
  int64_t created_at = node->created_at;
  int rc =
      durable__sqlite_run(c, st, op == OP_INSERT ? "insert" : "update", err);
  if (rc != 0)
    return rc;
  if (sqlite3_changes(c->db) == 0) {
    out->status = op == OP_INSERT ? DURABLE_EEXIST : DURABLE_ENOTFOUND;
    return 0;
  }
  int same_type = 0;
  if (op == OP_REFRESH || op == OP_REPLACE) {
    /* An UPDATE ... RETURNING builds a temporary table for its one row
     * each time; a read of the row just written is cheaper, and says
     * whether the type changed too. */
    sqlite3_stmt *back = key_type_stmt(c, place, OP_READ_BACK, node, err);
    if (back == NULL)
      return err->code;
    rc = sqlite3_step(back);
    if (rc == SQLITE_ROW) {
      created_at = sqlite3_column_int64(back, 0);
      same_type = sqlite3_column_int(back, 1) == 1;
    }
    done_with(back);
    if (rc == SQLITE_DONE) /* inside our own write transaction: never */
      return durable__error(err, DURABLE_EIO,
                            "update of '%s': the row was gone right after",
                            node->path);
    if (rc != SQLITE_ROW)
      return durable__sqlite_fail(c, rc, "update", err);
  }
  if (op != OP_INSERT && !same_type) {
    sqlite3_stmt *retype = key_type_stmt(c, place, OP_RETYPE, node, err);
    if (retype == NULL)
      return err->code;
    if ((rc = durable__sqlite_run(c, retype, "update", err)) != 0)
      return rc;
  }
  out->status = 0;
  out->version = version;
  out->created_at = created_at;
  return 0;
}

static int insert(durable__conn_t *c, durable__place_t place,
                  const durable_node_t *node, durable__outcome_t *out,
                  durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  if (rc == 0)
    rc = write_node(c, place, OP_INSERT, node, version, out, err);
  if (rc == 0 && out->status != 0)
    c->version--; /* unused: give it back */
  return rc;
}

/* An insert, or when the row is there an update under the same version
 * that keeps its created_at.  No race: the write lock is ours. */
static int upsert(durable__conn_t *c, durable__place_t place,
                  const durable_node_t *node, durable__outcome_t *out,
                  durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  if (rc == 0)
    rc = write_node(c, place, OP_INSERT, node, version, out, err);
  out->inserted = rc == 0 && out->status == 0;
  if (rc != 0 || out->inserted)
    return rc;
  return write_node(c, place, OP_REFRESH, node, version, out, err);
}

static int update(durable__conn_t *c, durable__place_t place,
                  const durable_node_t *node, durable__outcome_t *out,
                  durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  return rc ? rc : write_node(c, place, OP_UPDATE, node, version, out, err);
}

static int replace(durable__conn_t *c, durable__place_t place,
                   const durable_node_t *node, int64_t expected,
                   durable__outcome_t *out, durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  if (rc != 0)
    return rc;
  durable_node_t on = *node;
  on.created_at = expected; /* ?8: see OP_REPLACE */
  rc = write_node(c, place, OP_REPLACE, &on, version, out, err);
  if (rc != 0 || out->status == 0)
    return rc;
  c->version--; /* unused: give it back */
  /* refused: at another version, or absent? */
  durable_node_t *cur = NULL;
  rc = get(c, place, node->ns, node->id, 0, &cur, err);
  out->status = rc == 0 ? DURABLE_ECONFLICT : DURABLE_ENOTFOUND;
  durable_node_free(cur);
  if (rc == DURABLE_ENOTFOUND) {
    memset(err, 0, sizeof *err);
    rc = 0;
  }
  return rc;
}

static int remove_(durable__conn_t *c, durable__place_t place, const char *ns,
                   const char *id, durable__outcome_t *out,
                   durable_error_t *err) {
  sqlite3_stmt *st = table_stmt(c, place, OP_REMOVE, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, id);
  int rc = durable__sqlite_run(c, st, "remove", err);
  if (rc != 0)
    return rc;
  out->status = sqlite3_changes(c->db) == 0 ? DURABLE_ENOTFOUND : 0;
  return 0;
}

static int flush(durable__conn_t *c, durable_error_t *err) {
  (void)c;
  (void)err;
  return 0; /* every statement ran when it was called */
}

/* ---- grants ----------------------------------------------------------- */

static int grants_of(durable__conn_t *c, const char *principal,
                     durable__grants_t *out, durable_error_t *err) {
  sqlite3_stmt *st =
      durable__sqlite_stmt(c, principal ? S_GRANTS_OF : S_GRANTS_ALL, err);
  if (st == NULL)
    return err->code;
  if (principal)
    bind_text(st, 1, principal);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *who = (const char *)sqlite3_column_text(st, 0);
    const char *prefix = (const char *)sqlite3_column_text(st, 1);
    if (who == NULL || prefix == NULL ||
        durable__grants_push(out, who, prefix, sqlite3_column_int(st, 2)) !=
            0) {
      done_with(st);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  }
  done_with(st);
  return rc == SQLITE_DONE ? 0
                           : durable__sqlite_fail(c, rc, "read grants", err);
}

static int grant(durable__conn_t *c, const char *principal, const char *prefix,
                 int modes, int add, durable_error_t *err) {
  int steps[2] = {add ? S_GRANT_ADD : S_GRANT_CLEAR, add ? -1 : S_GRANT_DROP};
  for (int i = 0; i < 2 && steps[i] >= 0; i++) {
    sqlite3_stmt *st = durable__sqlite_stmt(c, steps[i], err);
    if (st == NULL)
      return err->code;
    bind_text(st, 1, principal);
    bind_text(st, 2, prefix);
    if (steps[i] != S_GRANT_DROP)
      sqlite3_bind_int(st, 3, modes);
    int rc = durable__sqlite_run(c, st, add ? "grant" : "revoke", err);
    if (rc != 0)
      return rc;
  }
  return 0;
}

const durable__backend_t durable__sqlite_backend = {
    .name = "sqlite",
    .connect = connect_,
    .disconnect = durable__sqlite_close,
    .single_connection = durable__sqlite_single_connection,
    .begin = begin,
    .commit = commit,
    .rollback = durable__sqlite_rollback,
    .get = get,
    .list = list,
    .max_id = max_id,
    .partitions = partitions,
    .list_type = list_type,
    .insert = insert,
    .upsert = upsert,
    .update = update,
    .replace = replace,
    .remove = remove_,
    .flush = flush,
    .changed = durable__sqlite_changed,
    .grants_of = grants_of,
    .grant = grant,
    .alive = durable__sqlite_alive,
    .watch_start = durable__sqlite_watch_start,
    .watch_stop = durable__sqlite_watch_stop,
};

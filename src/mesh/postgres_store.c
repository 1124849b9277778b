/*
 * postgres_store.c: the PostgreSQL backend (libpq), durable__postgres_backend.
 *
 * It keeps only SQL and I/O; everything the two stores share lives above
 * backend.h.  Three things shape it:
 *
 *  - Blocking connections, one per worker thread.  The engine calls every
 *    function except watch_* on its own threads (and connect once more on
 *    the loop thread at open), so plain blocking libpq is the simplest
 *    correct choice there.  Connecting is bounded by our own 5 s
 *    deadline, not libpq's per-address connect_timeout (postgres_conn.c).
 *
 *  - One schema per partition, created lazily by
 *    public.ensure_partition_schema() (schema.c).  Writes ensure their
 *    partition first; reads never create one: a partition that is not there
 *    reads as "not found" / empty, decided by a catalog check and not by
 *    provoking an error, since an error would spoil an open write
 *    transaction.  Each connection remembers which partitions exist and keeps
 *    one prepared statement per (operation, table, partition), so the steady
 *    state has no parsing or planning (postgres_sql.c, which holds the SQL).
 *
 *  - Round trips are the cost that matters (a commit's fsync is the other).
 *    Inside a transaction nothing is sent until a result is needed: the
 *    statements wait in the connection's queue and go in one pipeline at
 *    the next read, flush or commit (postgres_pipeline.c).  A commit whose
 *    answer was lost is reported as such only when nothing the server said
 *    proves that it did not happen; otherwise the group is retried on a new
 *    connection, as if it had failed earlier.
 *
 * The change feed of other processes, and this process's liveness as the
 * others see it, are a dedicated LISTEN connection (postgres_feed.c).
 */
#include "postgres.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NOTIFY payloads must stay under 8000 bytes. */
#define PAYLOAD_MAX 7999
/* The bootstrap's advisory lock key, in the one-bigint key space
 * (partition creation uses the (int, int) one, postgres_sql.c; PostgreSQL
 * keeps the two apart). */
#define BOOTSTRAP_LOCK "7238817738656605473" /* the bytes "durable!" */

/* ---- small helpers ------------------------------------------------------ */

/* "ns/id", or "id" at the top. */
static void path_of(char *buf, size_t size, const char *ns, const char *id) {
  if (ns == NULL || *ns == '\0')
    snprintf(buf, size, "%s", id);
  else
    snprintf(buf, size, "%s/%s", ns, id);
}

/* ---- partitions --------------------------------------------------------- */

/* *exists = 1 when every table of the partition exists (committed, or
 * created by our open transaction).  Reads use this to answer "absent"
 * without provoking an error. */
static int partition_exists(durable__conn_t *c, const char *partition,
                            int *exists, durable_error_t *err) {
  if (durable__map_get(&c->partitions, partition) != NULL) {
    *exists = 1;
    return 0;
  }
  char name[32];
  int rc = durable__pg_statement(c, OP_CHECK, NULL, name, err);
  if (rc != 0)
    return rc;
  const char *vals[1] = {partition};
  PGresult *res =
      durable__pg_run(c, name, 1, vals, &rc, err, "check partition", partition);
  if (res == NULL)
    return rc;
  *exists = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
  PQclear(res);
  if (*exists)
    return durable__map_put(&c->partitions, partition, MAP_NUMBER(1));
  return 0;
}

/* Make sure the partition's schema and tables exist before a write touches
 * them.  The creation is part of the caller's transaction, guarded by a
 * transaction-scoped advisory lock so that two processes creating the same
 * partition wait for each other instead of failing on the catalog's unique
 * keys; after the lock the catalog is read afresh, so the second one finds
 * everything there. */
static int ensure_partition(durable__conn_t *c, const char *partition,
                            durable_error_t *err) {
  int exists = 0;
  int rc = partition_exists(c, partition, &exists, err);
  if (rc != 0 || exists)
    return rc;

  int own = !c->in_tx; /* not expected, but then it gets its own transaction */
  if (own) {
    step_t *b = durable__pg_push_step(c, STEP_PLAIN, err);
    if (b == NULL)
      return err->code;
    b->sql = "BEGIN";
    b->what = "begin";
    c->in_tx = 1;
  }
  char lock[32], ensure[32];
  const char *vals[1] = {partition};
  PGresult *res = NULL;
  rc = durable__pg_statement_pair(c, OP_LOCK, OP_ENSURE, NULL, lock, ensure,
                                  err);
  if (rc == 0)
    res = durable__pg_run(c, lock, 1, vals, &rc, err, "lock partition",
                          partition);
  PQclear(res);
  res = NULL;
  if (rc == 0)
    res = durable__pg_run(c, ensure, 1, vals, &rc, err, "create partition",
                          partition);
  PQclear(res);
  if (rc == 0)
    rc = durable__map_put(&c->partitions, partition, MAP_NUMBER(1));
  if (rc == 0 && !own)
    rc = durable__strv_push(&c->created, partition);
  if (own) {
    durable__pg_clear_queue(c);
    if (c->tx_sent) {
      res = PQexec(c->pg, rc == 0 ? "COMMIT" : "ROLLBACK");
      if (rc == 0 &&
          (!durable__pg_result_ok(res) || strcmp(PQcmdStatus(res), "COMMIT")))
        rc = durable__pg_error(c, res, 0, err, "create partition", partition);
      PQclear(res);
    }
    c->in_tx = c->tx_sent = 0;
    if (rc != 0)
      durable__pg_forget_partition(c, partition);
  }
  return rc;
}

/* The transaction ended: partitions it created exist only if it
 * committed. */
static void end_tx(durable__conn_t *c, int committed) {
  if (!committed)
    for (size_t i = 0; i < c->created.count; i++)
      durable__pg_forget_partition(c, c->created.items[i]);
  durable__strv_free(&c->created);
  durable__pg_clear_queue(c);
  c->in_tx = c->tx_sent = 0;
}

/* ---- connect ------------------------------------------------------------ */

/* Run the bootstrap script unless its objects are already there as the
 * script would make them.  Checking first keeps every worker's connect from
 * rewriting the catalog (and lets a role that may not create in public
 * connect to a database set up by another). */
static int bootstrap(durable__conn_t *c, durable_error_t *err) {
  char *script = durable__schema_script(DURABLE__POSTGRES);
  if (script == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");

  /* The function body as pg_proc.prosrc holds it: between the $fn$ quotes. */
  int rc = 0, current = 0;
  char *open = strstr(script, "$fn$");
  char *close = open ? strstr(open + 4, "$fn$") : NULL;
  if (close != NULL) {
    static const char current_sql[] =
        "SELECT to_regclass('public.durable_version') IS NOT NULL AND "
        "to_regclass('public.durable_grants') IS NOT NULL AND EXISTS "
        "(SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = "
        "to_regclass('public.durable_grants') AND attname = 'modes') AND "
        "EXISTS "
        "(SELECT 1 FROM pg_catalog.pg_proc WHERE oid = "
        "to_regprocedure('public.ensure_partition_schema(text)') AND "
        "prosrc = $1) AND "
        "to_regprocedure('public.durable_refused()') IS NOT NULL";
    char *body = strndup(open + 4, (size_t)(close - open - 4));
    const char *vals[1] = {body};
    PGresult *res = NULL;
    if (body != NULL)
      res = PQexecParams(c->pg, current_sql, 1, NULL, vals, NULL, NULL, 0);
    if (body != NULL && !durable__pg_result_ok(res))
      rc = durable__pg_error(c, res, 0, err, "bootstrap", "");
    else if (res != NULL && PQntuples(res) == 1)
      current = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    free(body);
  }

  /* One process at a time: concurrent CREATE OR REPLACE FUNCTION fails
   * with "tuple concurrently updated". */
  const char *steps[] = {"BEGIN",
                         "SELECT pg_advisory_xact_lock(" BOOTSTRAP_LOCK ")",
                         script, "COMMIT"};
  for (size_t i = 0; rc == 0 && !current && i < 4; i++) {
    PGresult *res = PQexec(c->pg, steps[i]);
    if (!durable__pg_result_ok(res))
      rc = durable__pg_error(c, res, 0, err, "bootstrap", "");
    PQclear(res);
  }
  if (rc != 0 && PQtransactionStatus(c->pg) != PQTRANS_IDLE)
    PQclear(PQexec(c->pg, "ROLLBACK"));
  free(script);
  return rc;
}

static void pg_disconnect(durable__conn_t *c) {
  if (c == NULL)
    return;
  if (c->pg != NULL)
    PQfinish(c->pg); /* the server rolls back an open tx */
  durable__map_free(&c->stmts);
  durable__map_free(&c->partitions);
  durable__strv_free(&c->created);
  durable__pg_clear_queue(c);
  free(c->queue);
  free(c->url);
  free(c->name);
  free(c);
}

/* A store that only reads finds the schema made by one that writes: it
 * may be on a standby, where nothing can be made. */
static int schema_present(durable__conn_t *c, durable_error_t *err) {
  PGresult *res = PQexec(c->pg, "SELECT to_regclass('public.durable_version') "
                                "IS NOT NULL");
  int rc = 0;
  if (!durable__pg_result_ok(res))
    rc = durable__pg_error(c, res, 0, err, "open", "");
  else if (PQntuples(res) != 1 || PQgetvalue(res, 0, 0)[0] != 't')
    rc = durable__error(err, DURABLE_ENOTFOUND,
                        "no durable schema here: open the store for writing "
                        "once (on its primary) before reading it");
  PQclear(res);
  return rc;
}

static int pg_connect(const char *url, int readonly, durable__conn_t **out,
                      durable_error_t *err) {
  *out = NULL;
  durable__conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL || (c->name = durable__pg_mask_password(url)) == NULL ||
      (c->url = strdup(url)) == NULL) {
    if (c != NULL)
      free(c->name);
    free(c);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  char why[400];
  c->pg = readonly ? durable__pg_open_reader(url, why, sizeof(why))
                   : durable__pg_open(url, why, sizeof(why));
  if (c->pg == NULL) {
    durable__error(err, DURABLE_EUNAVAIL, "cannot connect to store '%s': %s",
                   c->name, why);
    pg_disconnect(c);
    return DURABLE_EUNAVAIL;
  }
  int rc = readonly ? schema_present(c, err) : bootstrap(c, err);
  if (rc != 0) {
    /* name the store (EUNAVAIL messages already do): durable_store_open()
     * reports this line as it is */
    if (rc != DURABLE_EUNAVAIL) {
      char line[sizeof(err->message)];
      snprintf(line, sizeof(line), "%s", err->message);
      durable__error(err, rc, "store '%s': %s", c->name, line);
    }
    pg_disconnect(c);
    return rc;
  }
  *out = c;
  return 0;
}

static int pg_server_of(durable__conn_t *c, durable__server_t *out,
                        durable_error_t *err) {
  char why[300];
  if (durable__pg_server(c->pg, out, why, sizeof why) == 0)
    return 0;
  c->broken = 1;
  return durable__error(err, DURABLE_EUNAVAIL, "store '%s': %s", c->name, why);
}

static void pg_watch_commits(durable__conn_t *c,
                             void (*fn)(void *data, const char *why),
                             void *data) {
  c->stall = fn;
  c->stall_data = data;
}

static int pg_single_connection(const char *url) {
  (void)url;
  return 0;
}

/* ---- transactions ------------------------------------------------------- */

static int pg_begin(durable__conn_t *c, durable_error_t *err) {
  if (c->in_tx)
    return durable__error(err, DURABLE_EINVAL, "begin: in a transaction");
  /* A backend that was ended while we were idle has said so on the socket:
   * reading it now (never blocking) finds out before anything is sent, so
   * the engine reconnects instead of meeting the loss mid-commit. */
  if (!c->broken)
    PQconsumeInput(c->pg);
  if (c->broken || PQstatus(c->pg) != CONNECTION_OK) /* drop it, reconnect */
    return durable__pg_error(c, NULL, DURABLE_EUNAVAIL, err, "begin", "");
  /* Queued: it goes with the first statement that is sent.  PostgreSQL
   * needs no up-front write lock: get(for_update) locks the row, and READ
   * COMMITTED reads the latest commit after the lock is granted. */
  durable__pg_clear_queue(c);
  step_t *s = durable__pg_push_step(c, STEP_PLAIN, err);
  if (s == NULL)
    return err->code;
  s->sql = "BEGIN";
  s->what = "begin";
  c->in_tx = 1;
  c->tx_sent = 0;
  return 0;
}

static int pg_flush(durable__conn_t *c, durable_error_t *err) {
  return durable__pg_drain(c, NULL, NULL, err);
}

static int pg_commit(durable__conn_t *c, int *unknown, durable_error_t *err) {
  *unknown = 0;
  if (!c->in_tx)
    return 0;
  if (!c->tx_sent && c->queued <= 1) { /* a BEGIN alone: nothing to do */
    end_tx(c, 1);
    return 0;
  }
  step_t *s = durable__pg_push_step(c, STEP_COMMIT, err);
  int rc = s == NULL ? err->code : 0;
  if (s != NULL) {
    s->sql = "COMMIT";
    s->what = "commit";
    rc = durable__pg_drain(c, NULL, unknown, err);
  }
  if (rc != 0 && !c->broken && PQstatus(c->pg) == CONNECTION_OK &&
      PQtransactionStatus(c->pg) != PQTRANS_IDLE)
    PQclear(PQexec(c->pg, "ROLLBACK"));
  end_tx(c, rc == 0);
  return rc;
}

static void pg_rollback(durable__conn_t *c) {
  if (c->in_tx && c->tx_sent && !c->broken && PQstatus(c->pg) == CONNECTION_OK)
    PQclear(PQexec(c->pg, "ROLLBACK"));
  end_tx(c, 0);
}

/* ---- reads -------------------------------------------------------------- */

/* Prepare a read on `place` (and its many-row form `rows_op` unless OP_NONE, as
 * durable__pg_statement_pair): *absent = 1 when its partition does not exist,
 * which every read answers as "nothing there". */
static int prepare_read(durable__conn_t *c, int op, int rows_op,
                        durable__place_t place, char name[32], char rows[32],
                        int *absent, durable_error_t *err) {
  int exists = 0;
  int rc = partition_exists(c, place.partition, &exists, err);
  *absent = rc == 0 && !exists;
  if (rc != 0 || *absent)
    return rc;
  rc = durable__pg_statement_pair(c, op, rows_op, &place, name, rows, err);
  if (rc != 0 && !c->in_tx && durable__pg_missing_relation(c)) {
    durable__pg_forget_partition(c,
                                 place.partition); /* dropped since we looked */
    *absent = 1;
    return 0;
  }
  return rc;
}

/* A read failed: outside a transaction a relation dropped since we looked
 * means "absent"; inside one the error stands (the transaction is spoiled). */
static int read_failed(durable__conn_t *c, durable__place_t place, int rc,
                       int *absent) {
  if (durable__pg_missing_relation(c))
    durable__pg_forget_partition(c, place.partition);
  if (!c->in_tx && durable__pg_missing_relation(c)) {
    *absent = 1;
    return 0;
  }
  return rc;
}

static int pg_get(durable__conn_t *c, durable__place_t place, const char *ns,
                  const char *id, int for_update, durable_node_t **out,
                  durable_error_t *err) {
  char name[32], path[DURABLE_PATH_MAX + 2];
  int absent = 0, rc;
  *out = NULL;
  path_of(path, sizeof(path), ns, id);
  rc = prepare_read(c, for_update ? OP_GET_FOR_UPDATE : OP_GET, OP_NONE, place,
                    name, NULL, &absent, err);
  PGresult *res = NULL;
  if (rc == 0 && !absent) {
    const char *vals[2] = {ns, id};
    res = durable__pg_run(c, name, 2, vals, &rc, err, "get", path);
    if (res == NULL)
      rc = read_failed(c, place, rc, &absent);
  }
  if (rc != 0)
    return rc;
  if (absent || PQntuples(res) == 0) {
    PQclear(res);
    return durable__error(err, DURABLE_ENOTFOUND, "'%s' not found", path);
  }
  *out = durable__pg_node_of_row(res, 0);
  PQclear(res);
  if (*out == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return 0;
}

/* A read of one row (`op`: OP_GET or OP_GET_FOR_UPDATE) sent with the next
 * drain, its answer into `got`; the strings are copied, as a queued
 * write's are. */
static int queue_read(durable__conn_t *c, int op, durable__place_t place,
                      const char *ns, const char *id, durable__got_t *got,
                      durable_error_t *err) {
  char name[32], rows[32] = "", path[DURABLE_PATH_MAX + 2];
  int absent = 0;
  int rc = prepare_read(c, op, op == OP_GET_FOR_UPDATE ? OP_LOCK_ROWS : OP_NONE,
                        place, name, rows, &absent, err);
  if (rc != 0)
    return rc;
  if (absent) {
    got->status = DURABLE_ENOTFOUND;
    return 0;
  }
  path_of(path, sizeof(path), ns, id);
  size_t lns = strlen(ns) + 1, lid = strlen(id) + 1, lpath = strlen(path) + 1;
  size_t lpart = strlen(place.partition) + 1;
  step_t *s = durable__pg_push_step(c, STEP_READ, err);
  if (s == NULL)
    return err->code;
  if ((s->buf = malloc(lns + lid + lpath + lpart)) == NULL) {
    c->queued--;
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  memcpy(s->buf, ns, lns);
  memcpy(s->buf + lns, id, lid);
  memcpy(s->buf + lns + lid, path, lpath);
  memcpy(s->buf + lns + lid + lpath, place.partition, lpart);
  s->partition = s->buf + lns + lid + lpath;
  snprintf(s->name, sizeof(s->name), "%s", name);
  snprintf(s->rows, sizeof(s->rows), "%s", rows);
  s->op = op;
  s->n = 2;
  s->vals[0] = s->buf;
  s->vals[1] = s->buf + lns;
  s->what = op == OP_GET ? "get" : "lock";
  s->subject = s->buf + lns + lid;
  s->got = got;
  return 0;
}

static int pg_get_later(durable__conn_t *c, durable__place_t place,
                        const char *ns, const char *id, durable__got_t *got,
                        durable_error_t *err) {
  return queue_read(c, OP_GET, place, ns, id, got, err);
}

static int pg_list(durable__conn_t *c, durable__place_t place, const char *ns,
                   const char *after, size_t limit, durable__nodes_t *out,
                   durable_error_t *err) {
  char name[32], lim[24];
  int absent = 0;
  int rc = prepare_read(c, OP_LIST, OP_NONE, place, name, NULL, &absent, err);
  if (rc != 0 || absent)
    return rc;
  snprintf(lim, sizeof(lim), "%zu", limit);
  const char *vals[3] = {ns, after ? after : "", lim};
  PGresult *res = durable__pg_run(c, name, 3, vals, &rc, err, "list", ns);
  if (res == NULL)
    return read_failed(c, place, rc, &absent);
  rc = durable__pg_push_rows(res, out, err);
  PQclear(res);
  return rc;
}

static int pg_list_type(durable__conn_t *c, durable__place_t place,
                        const char *node_type, const char *after, size_t limit,
                        durable__nodes_t *out, durable_error_t *err) {
  char name[32], lim[24];
  int absent = 0;
  int op = durable__type_query_skips_bulk(place.table, node_type)
               ? OP_LIST_TYPE_SKIP
               : OP_LIST_TYPE;
  int rc = prepare_read(c, op, OP_NONE, place, name, NULL, &absent, err);
  if (rc != 0 || absent)
    return rc;
  snprintf(lim, sizeof(lim), "%zu", limit);
  const char *vals[3] = {node_type, after ? after : "", lim};
  PGresult *res =
      durable__pg_run(c, name, 3, vals, &rc, err, "list by type", node_type);
  if (res == NULL)
    return read_failed(c, place, rc, &absent);
  rc = durable__pg_push_rows(res, out, err);
  PQclear(res);
  return rc;
}

/* Every schema that holds the node tables is a partition. */
static int pg_partitions(durable__conn_t *c, durable__strv_t *out,
                         durable_error_t *err) {
  PGresult *res =
      PQexec(c->pg, "SELECT n.nspname FROM pg_namespace n WHERE EXISTS "
                    "(SELECT 1 FROM pg_class t WHERE t.relnamespace = n.oid "
                    "AND t.relname = 'mesh_nodes' AND t.relkind = 'r') "
                    "ORDER BY n.nspname");
  int rc = 0;
  if (!durable__pg_result_ok(res)) {
    rc = durable__pg_error(c, res, 0, err, "partitions", "");
  } else {
    for (int i = 0, n = PQntuples(res); rc == 0 && i < n; i++)
      if (durable__strv_push(out, PQgetvalue(res, i, 0)) < 0)
        rc = durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  PQclear(res);
  return rc;
}

static int pg_max_id(durable__conn_t *c, durable__place_t place, const char *ns,
                     int width, char **out, durable_error_t *err) {
  char name[32], lo[65], hi[65], w[12];
  int absent = 0, rc;
  *out = NULL;
  if (width <= 0 || width > 64)
    return durable__error(err, DURABLE_EINVAL, "max_id: width %d", width);
  memset(lo, '0', (size_t)width);
  memset(hi, '9', (size_t)width);
  lo[width] = hi[width] = '\0';
  snprintf(w, sizeof(w), "%d", width);
  rc = prepare_read(c, OP_MAX_ID, OP_NONE, place, name, NULL, &absent, err);
  PGresult *res = NULL;
  if (rc == 0 && !absent) {
    const char *vals[4] = {ns, lo, hi, w};
    res = durable__pg_run(c, name, 4, vals, &rc, err, "max id", ns);
    if (res == NULL)
      rc = read_failed(c, place, rc, &absent);
  }
  if (rc != 0)
    return rc;
  *out = strdup(!absent && PQntuples(res) ? PQgetvalue(res, 0, 0) : "");
  PQclear(res);
  if (*out == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return 0;
}

/* ---- writes ------------------------------------------------------------- */

/* Prepare a write on `place` (and its many-row form `rows_op` unless OP_NONE,
 * as durable__pg_statement_pair): its partition first. */
static int prepare_write(durable__conn_t *c, int op, int rows_op,
                         durable__place_t place, char name[32], char rows[32],
                         durable_error_t *err) {
  int rc = ensure_partition(c, place.partition, err);
  if (rc == 0)
    rc = durable__pg_statement_pair(c, op, rows_op, &place, name, rows, err);
  return rc;
}

/* A write failed on a relation that vanished: create it again next time. */
static int write_failed(durable__conn_t *c, durable__place_t place, int rc) {
  if (durable__pg_missing_relation(c))
    durable__pg_forget_partition(c, place.partition);
  return rc;
}

/* Queue a write of `node` (NULL for a removal of ns/id) with statement
 * `op`; its outcome arrives at the next drain.  The parameters are copied:
 * the caller's strings may go. */
static int queue_write(durable__conn_t *c, int op, durable__place_t place,
                       const durable_node_t *node, const char *ns,
                       const char *id, durable__outcome_t *out,
                       durable_error_t *err) {
  char name[32], rows[32] = "", created[24], updated[24];
  char path[DURABLE_PATH_MAX + 2];
  int rc;
  int strict =
      out != NULL && out->strict && (op == OP_INSERT || op == OP_REPLACE);
  int form = !strict           ? op
             : op == OP_INSERT ? OP_INSERT_STRICT
                               : OP_REPLACE_STRICT;
  /* a replace goes many rows at a time only strict: the one-row form tells
   * "absent" from "at another version", which no many-row form does */
  int many = op == OP_INSERT || op == OP_UPSERT || (strict && op == OP_REPLACE);
  int rows_form = op == OP_UPSERT    ? OP_UPSERT_ROWS
                  : op == OP_REPLACE ? OP_REPLACE_ROWS_STRICT
                  : strict           ? OP_INSERT_ROWS_STRICT
                                     : OP_INSERT_ROWS;
  rc = prepare_write(c, form, many ? rows_form : OP_NONE, place, name, rows,
                     err);
  if (rc != 0)
    return write_failed(c, place, rc);
  const char *vals[8];
  int n;
  if (node != NULL) {
    snprintf(created, sizeof(created), "%lld", (long long)node->created_at);
    snprintf(updated, sizeof(updated), "%lld", (long long)node->updated_at);
    vals[0] = node->ns ? node->ns : "";
    vals[1] = node->id;
    vals[2] = node->path;
    vals[3] = node->node_type ? node->node_type : "";
    vals[4] = node->content ? node->content : "{}";
    vals[5] = node->main_node ? node->main_node : node->path;
    vals[6] = created;
    vals[7] = updated;
    n = 8;
  } else {
    path_of(path, sizeof(path), ns, id);
    vals[0] = ns;
    vals[1] = id;
    vals[2] = path; /* not a parameter: the subject of messages */
    n = 2;
  }
  /* one block: the values, then the subject (the path) and the partition */
  size_t len[10], total = 0;
  int k = n == 8 ? 8 : 3;
  for (int i = 0; i < k; i++)
    total += (len[i] = strlen(vals[i])) + 1;
  total += (len[k] = strlen(place.partition)) + 1;
  step_t *s = durable__pg_push_step(c, STEP_WRITE, err);
  if (s == NULL)
    return err->code;
  if ((s->buf = malloc(total)) == NULL) {
    c->queued--;
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  char *p = s->buf;
  const char *copies[10];
  for (int i = 0; i <= k; i++) {
    const char *src = i < k ? vals[i] : place.partition;
    memcpy(p, src, len[i] + 1);
    copies[i] = p;
    p += len[i] + 1;
  }
  snprintf(s->name, sizeof(s->name), "%s", name);
  snprintf(s->rows, sizeof(s->rows), "%s", rows);
  s->op = op;
  s->strict = strict;
  s->n = n;
  for (int i = 0; i < n; i++)
    s->vals[i] = copies[i];
  s->subject = copies[2]; /* the path */
  s->partition = copies[k];
  s->what = op == OP_INSERT                       ? "insert"
            : op == OP_UPSERT                     ? "put"
            : op == OP_UPDATE || op == OP_REPLACE ? "update"
                                                  : "remove";
  s->out = out;
  return 0;
}

static int pg_insert(durable__conn_t *c, durable__place_t place,
                     const durable_node_t *node, durable__outcome_t *out,
                     durable_error_t *err) {
  return queue_write(c, OP_INSERT, place, node, NULL, NULL, out, err);
}

static int pg_upsert(durable__conn_t *c, durable__place_t place,
                     const durable_node_t *node, durable__outcome_t *out,
                     durable_error_t *err) {
  return queue_write(c, OP_UPSERT, place, node, NULL, NULL, out, err);
}

static int pg_update(durable__conn_t *c, durable__place_t place,
                     const durable_node_t *node, durable__outcome_t *out,
                     durable_error_t *err) {
  return queue_write(c, OP_UPDATE, place, node, NULL, NULL, out, err);
}

static int pg_replace(durable__conn_t *c, durable__place_t place,
                      const durable_node_t *node, int64_t expected,
                      durable__outcome_t *out, durable_error_t *err) {
  durable_node_t on = *node;
  on.created_at = expected; /* $7: see OP_REPLACE */
  return queue_write(c, OP_REPLACE, place, &on, NULL, NULL, out, err);
}

static int pg_remove(durable__conn_t *c, durable__place_t place, const char *ns,
                     const char *id, durable__outcome_t *out,
                     durable_error_t *err) {
  return queue_write(c, OP_REMOVE, place, NULL, ns, id, out, err);
}

/* SELECT ... FOR UPDATE of a row, queued like a write: it rides along with
 * the transaction's first read, no round trip of its own, and what it read
 * comes back in `got`. */
static int pg_lock(durable__conn_t *c, durable__place_t place, const char *ns,
                   const char *id, durable__got_t *got, durable_error_t *err) {
  return queue_read(c, OP_GET_FOR_UPDATE, place, ns, id, got, err);
}

/* One NOTIFY per namespace, "instance\nnamespace", queued for the COMMIT
 * (PostgreSQL delivers them only if it commits); the drain sends a run of
 * them as one statement. */
static int pg_changed(durable__conn_t *c, const durable__strv_t *namespaces,
                      const char *instance, int64_t *commit_id,
                      durable_error_t *err) {
  *commit_id = 0;
  char name[32], rows[32] = "";
  int rc =
      namespaces->count == 0
          ? 0
          : durable__pg_statement_pair(
                c, OP_NOTIFY, namespaces->count > 1 ? OP_NOTIFY_ROWS : OP_NONE,
                NULL, name, rows, err);
  for (size_t i = 0; rc == 0 && i < namespaces->count; i++) {
    char *payload =
        durable__pg_format("%s\n%s", instance, namespaces->items[i]);
    if (payload == NULL)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    if (strlen(payload) > PAYLOAD_MAX) {
      free(payload);
      return durable__error(err, DURABLE_EINVAL,
                            "namespace too long for a notification: '%s'",
                            namespaces->items[i]);
    }
    if (!c->in_tx) { /* no transaction: send it now */
      const char *vals[1] = {payload};
      PQclear(durable__pg_run(c, name, 1, vals, &rc, err, "notify", ""));
      free(payload);
      continue;
    }
    step_t *s = durable__pg_push_step(c, STEP_PLAIN, err);
    if (s == NULL) {
      free(payload);
      return err->code;
    }
    s->buf = payload;
    snprintf(s->name, sizeof(s->name), "%s", name);
    snprintf(s->rows, sizeof(s->rows), "%s", rows);
    s->n = 1;
    s->vals[0] = payload;
    s->what = "notify";
    s->subject = "";
  }
  return rc;
}

/* ---- grants ------------------------------------------------------------- */

static int pg_grants_of(durable__conn_t *c, const char *principal,
                        durable__grants_t *out, durable_error_t *err) {
  char name[32];
  int rc = durable__pg_statement(c, principal ? OP_GRANTS : OP_GRANTS_ALL, NULL,
                                 name, err);
  if (rc != 0)
    return rc;
  const char *vals[1] = {principal};
  PGresult *res =
      durable__pg_run(c, name, principal ? 1 : 0, vals, &rc, err, "grants of",
                      principal ? principal : "everyone");
  if (res == NULL)
    return rc;
  for (int i = 0, n = PQntuples(res); rc == 0 && i < n; i++)
    rc = durable__grants_push(out, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                              atoi(PQgetvalue(res, i, 2)));
  PQclear(res);
  if (rc != 0)
    return durable__error(err, rc, "out of memory");
  return 0;
}

static int pg_grant(durable__conn_t *c, const char *principal,
                    const char *prefix, int modes, int add,
                    durable_error_t *err) {
  char mask[16];
  snprintf(mask, sizeof mask, "%d", modes);
  const char *vals[3] = {principal, prefix, mask};
  int ops[2] = {add ? OP_GRANT_ADD : OP_GRANT_CLEAR,
                add ? OP_NONE : OP_GRANT_DROP};
  for (int i = 0; i < 2 && ops[i] != OP_NONE; i++) {
    char name[32];
    int rc = durable__pg_statement(c, ops[i], NULL, name, err);
    if (rc != 0)
      return rc;
    PGresult *res =
        durable__pg_run(c, name, ops[i] == OP_GRANT_DROP ? 2 : 3, vals, &rc,
                        err, add ? "grant" : "revoke", principal);
    PQclear(res);
    if (rc != 0)
      return rc;
  }
  return 0;
}

const durable__backend_t durable__postgres_backend = {
    .name = "postgresql",
    .connect = pg_connect,
    .disconnect = pg_disconnect,
    .server_of = pg_server_of,
    .watch_commits = pg_watch_commits,
    .single_connection = pg_single_connection,
    .display_name = durable__pg_mask_password,
    .begin = pg_begin,
    .commit = pg_commit,
    .rollback = pg_rollback,
    .get = pg_get,
    .get_later = pg_get_later,
    .list = pg_list,
    .max_id = pg_max_id,
    .partitions = pg_partitions,
    .list_type = pg_list_type,
    .insert = pg_insert,
    .upsert = pg_upsert,
    .update = pg_update,
    .replace = pg_replace,
    .remove = pg_remove,
    .flush = pg_flush,
    .lock = pg_lock,
    .strict_writes = 1,
    .changed = pg_changed,
    .grants_of = pg_grants_of,
    .grant = pg_grant,
    .alive = durable__pg_alive,
    .watch_start = durable__pg_watch_start,
    .watch_stop = durable__pg_watch_stop,
    .fence_ms = DURABLE__PG_FENCE_MS,
    .watch_beat = durable__pg_watch_beat,
    .watch_nudge = durable__pg_watch_nudge,
};

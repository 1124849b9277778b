/*
 * postgres_sql.c: the SQL of the PostgreSQL backend, and the prepared
 * statements made from it.
 *
 * Every operation's SQL is a line of one table indexed by the operation
 * (op_sql), as SQLite's is in sqlite_store.c, so that both stores keep
 * their SQL the same way.  A statement on one table names its relation,
 * the quoted "partition".table, as %s; it is filled in when the statement
 * is prepared.  Each connection prepares a statement per (operation,
 * table, partition) on first use and keeps its name, so the steady state
 * has no parsing or planning.
 */
#include "postgres.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Past this many prepared statements a connection starts over, so a process
 * that touches many partitions does not grow its server sessions without
 * end. */
#define STMT_CACHE_MAX 1024
/* The advisory lock key space of partition creation: the (int, int) one,
 * which PostgreSQL keeps apart from the one-bigint space of the bootstrap
 * (postgres_store.c). */
#define PARTITION_LOCK "1685418593" /* "dura" */

#define NODE_COLS                                                              \
  "namespace, id, path, node_type, content, main_node, version, created_at, "  \
  "updated_at"
/* The values of a node written by one-row statements: $7 and $8 are
 * created_at and updated_at, the version is the next of the sequence. */
#define NODE_VALUES                                                            \
  "($1, $2, $3, $4, $5, $6, nextval('public.durable_version'), $7, $8)"
/* The same for many rows, each parameter an array of the rows' values. */
#define NODE_ROWS                                                              \
  "SELECT n, i, p, t, c, m, nextval('public.durable_version'), a, u FROM "     \
  "unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], "        \
  "$6::text[], $7::bigint[], $8::bigint[]) AS r(n, i, p, t, c, m, a, u)"
/* An upsert's update of the row that is there: all but created_at. */
#define UPSERT_SET                                                             \
  "ON CONFLICT (namespace, id) DO UPDATE SET "                                 \
  "path = EXCLUDED.path, node_type = EXCLUDED.node_type, "                     \
  "content = EXCLUDED.content, main_node = EXCLUDED.main_node, "               \
  "version = EXCLUDED.version, updated_at = EXCLUDED.updated_at"

/* The SQL of each operation.  In a statement on one table, %s is its
 * relation (%1$s where it comes twice); OP_LIST_TYPE_SKIP's second %s is
 * the table's bulk type, OP_CHECK's two are how many node tables there are
 * and their names (sql_of fills them in). */
static const char *const op_sql[OP_COUNT] = {
    [OP_GET] = "SELECT " NODE_COLS " FROM %s "
               "WHERE namespace = $1 AND id = $2",
    [OP_GET_FOR_UPDATE] = "SELECT " NODE_COLS " FROM %s "
                          "WHERE namespace = $1 AND id = $2 FOR UPDATE",
    [OP_LIST] = "SELECT " NODE_COLS " FROM %s "
                "WHERE namespace = $1 AND id > $2 ORDER BY id LIMIT $3",
    /* served by the type index {table}_by_type (schema.h) */
    [OP_LIST_TYPE] = "SELECT " NODE_COLS " FROM %s "
                     "WHERE node_type = $1 AND path > $2 "
                     "ORDER BY path LIMIT $3",
    /* beside a partial type index: its term as a constant, from which the
     * planner proves that the index covers the rows (it proves nothing from
     * $1); never asked for the bulk type itself */
    [OP_LIST_TYPE_SKIP] = "SELECT " NODE_COLS " FROM %s "
                          "WHERE node_type = $1 AND node_type <> '%s' "
                          "AND path > $2 ORDER BY path LIMIT $3",
    /* The bounds keep it a backward range scan of the primary key; the
     * length and the pattern only filter the few rows inside the range. */
    [OP_MAX_ID] = "SELECT id FROM %s WHERE namespace = $1 AND id >= $2 "
                  "AND id <= $3 AND length(id) = $4 AND id ~ '^[0-9]+$' "
                  "ORDER BY id DESC LIMIT 1",
    /* DO NOTHING: an existing row gives zero rows, not an error, so the
     * transaction stays usable; the strict form fails instead. */
    [OP_INSERT] = "INSERT INTO %s (" NODE_COLS ") VALUES " NODE_VALUES " "
                  "ON CONFLICT DO NOTHING RETURNING version, created_at",
    [OP_INSERT_STRICT] = "INSERT INTO %s (" NODE_COLS ") VALUES " NODE_VALUES
                         " RETURNING version, created_at",
    /* xmax is 0 in a row this statement inserted, our transaction's id in
     * one it updated: the usual way to tell the two apart */
    [OP_UPSERT] = "INSERT INTO %s (" NODE_COLS ") VALUES " NODE_VALUES
                  " " UPSERT_SET " RETURNING version, created_at, xmax = 0",
    /* One statement for many rows, each parameter an array: far less work
     * per row for the server than a statement each.  RETURNING names the
     * row, so that each outcome finds its write. */
    [OP_INSERT_ROWS] = "INSERT INTO %s (" NODE_COLS ") " NODE_ROWS " "
                       "ON CONFLICT DO NOTHING "
                       "RETURNING namespace, id, version, created_at",
    [OP_INSERT_ROWS_STRICT] = "INSERT INTO %s (" NODE_COLS ") " NODE_ROWS " "
                              "RETURNING namespace, id, version, created_at",
    [OP_UPSERT_ROWS] = "INSERT INTO %s (" NODE_COLS ") " NODE_ROWS
                       " " UPSERT_SET " RETURNING namespace, id, version, "
                       "created_at, xmax = 0",
    [OP_UPDATE] =
        "UPDATE %s SET path = $3, node_type = $4, content = $5, "
        "main_node = $6, version = nextval('public.durable_version'), "
        "created_at = $7, updated_at = $8 "
        "WHERE namespace = $1 AND id = $2 "
        "RETURNING version, created_at",
    /* a compare-and-set without a read before it: $7 (created_at's slot
     * in every node write) carries the expected version.  No row: absent;
     * a row without a version: at another version (or changed meanwhile:
     * the UPDATE re-checks its condition on the row that committed). */
    [OP_REPLACE] = "WITH was AS (SELECT 1 FROM %1$s "
                   "WHERE namespace = $1 AND id = $2), "
                   "upd AS (UPDATE %1$s SET path = $3, node_type = $4, "
                   "content = $5, main_node = $6, "
                   "version = nextval('public.durable_version'), "
                   "updated_at = $8 WHERE namespace = $1 AND id = $2 "
                   "AND version = $7::bigint RETURNING version, created_at) "
                   "SELECT upd.version, upd.created_at "
                   "FROM was LEFT JOIN upd ON true",
    /* no row updated, absent or at another version: the function raises
     * DURABLE__REFUSED_STATE (schema.c makes it) */
    [OP_REPLACE_STRICT] =
        "WITH upd AS (UPDATE %s SET path = $3, node_type = $4, "
        "content = $5, main_node = $6, "
        "version = nextval('public.durable_version'), updated_at = $8 "
        "WHERE namespace = $1 AND id = $2 AND version = $7::bigint "
        "RETURNING version, created_at) SELECT version, created_at FROM upd "
        "UNION ALL SELECT public.durable_refused(), NULL "
        "WHERE NOT EXISTS (SELECT 1 FROM upd)",
    /* OP_REPLACE_STRICT for many rows: $7 carries the expected versions;
     * fewer rows updated than asked for raises as the one-row form does */
    [OP_REPLACE_ROWS_STRICT] =
        "WITH r AS (SELECT * FROM unnest($1::text[], $2::text[], "
        "$3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], "
        "$8::bigint[]) AS r(n, i, p, t, c, m, e, u)), "
        "upd AS (UPDATE %s AS x SET path = r.p, node_type = r.t, "
        "content = r.c, main_node = r.m, "
        "version = nextval('public.durable_version'), updated_at = r.u "
        "FROM r WHERE x.namespace = r.n AND x.id = r.i AND x.version = r.e "
        "RETURNING x.namespace, x.id, x.version, x.created_at) "
        "SELECT namespace, id, version, created_at FROM upd "
        "UNION ALL SELECT NULL, NULL, public.durable_refused(), NULL "
        "WHERE (SELECT count(*) FROM upd) <> (SELECT count(*) FROM r)",
    /* OP_GET_FOR_UPDATE for many rows, locked in the key's order (the
     * sort runs below the locking) -- the order the group asked for */
    [OP_LOCK_ROWS] = "SELECT " NODE_COLS " FROM %s WHERE (namespace, id) IN "
                     "(SELECT n, i FROM unnest($1::text[], $2::text[]) "
                     "AS k(n, i)) ORDER BY namespace, id FOR UPDATE",
    [OP_REMOVE] = "DELETE FROM %s WHERE namespace = $1 AND id = $2",

    /* the catalog, not the tables: a read of a partition that is not there
     * must not provoke an error, which would spoil an open transaction */
    [OP_CHECK] = "SELECT count(*) = %s FROM pg_catalog.pg_class c "
                 "JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace "
                 "WHERE s.nspname = $1 AND c.relkind IN ('r', 'p') "
                 "AND c.relname IN (%s)",
    [OP_LOCK] = "SELECT pg_advisory_xact_lock(" PARTITION_LOCK ", "
                "hashtext($1))",
    [OP_ENSURE] = "SELECT public.ensure_partition_schema($1)",
    [OP_NOTIFY] = "SELECT pg_notify('" DURABLE__PG_CHANNEL "', $1)",
    [OP_NOTIFY_ROWS] = "SELECT pg_notify('" DURABLE__PG_CHANNEL "', p) "
                       "FROM unnest($1::text[]) AS p",
    [OP_GRANTS] = "SELECT principal, prefix, modes FROM public.durable_grants "
                  "WHERE principal = $1 AND modes <> 0 ORDER BY prefix",
    [OP_GRANTS_ALL] = "SELECT principal, prefix, modes "
                      "FROM public.durable_grants WHERE modes <> 0 "
                      "ORDER BY principal, prefix",
    [OP_GRANT_ADD] = "INSERT INTO public.durable_grants AS g "
                     "(principal, prefix, modes) VALUES ($1, $2, $3::integer) "
                     "ON CONFLICT (principal, prefix) "
                     "DO UPDATE SET modes = g.modes | excluded.modes",
    [OP_GRANT_CLEAR] = "UPDATE public.durable_grants "
                       "SET modes = modes & ~$3::integer "
                       "WHERE principal = $1 AND prefix = $2",
    [OP_GRANT_DROP] = "DELETE FROM public.durable_grants "
                      "WHERE principal = $1 AND prefix = $2 AND modes = 0",
    /* a bigint key shows as classid (high half), objid (low), objsubid 1 */
    [OP_ALIVE] = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks "
                 "WHERE locktype = 'advisory' AND granted AND database = "
                 "(SELECT oid FROM pg_catalog.pg_database "
                 "WHERE datname = current_database()) "
                 "AND classid = $1::oid AND objid = $2::oid AND objsubid = 1)",
};

/* OP_CHECK's SQL: the node tables' names are ours, quoted anyway as
 * literals. */
static char *check_sql(durable__conn_t *c) {
  size_t n = 0, len = 0;
  char *names[16];
  for (const char *const *t = durable__tables(); *t && n < 16; t++) {
    names[n] = PQescapeLiteral(c->pg, *t, strlen(*t));
    if (names[n] == NULL)
      break;
    len += strlen(names[n++]) + 2;
  }
  char *list = malloc(len + 1);
  char *sql = NULL;
  if (list != NULL) {
    char count[24];
    list[0] = '\0';
    for (size_t i = 0; i < n; i++) {
      if (i)
        strcat(list, ", ");
      strcat(list, names[i]);
    }
    snprintf(count, sizeof count, "%zu", n);
    sql = durable__pg_format(op_sql[OP_CHECK], count, list);
  }
  for (size_t i = 0; i < n; i++)
    PQfreemem(names[i]);
  free(list);
  return sql;
}

/* The SQL of `op` on `place` (NULL for the statements outside partitions);
 * NULL when out of memory. */
static char *sql_of(durable__conn_t *c, int op, const durable__place_t *place) {
  if (op == OP_CHECK)
    return check_sql(c);
  if (place == NULL)
    return strdup(op_sql[op]);
  char *schema =
      PQescapeIdentifier(c->pg, place->partition, strlen(place->partition));
  char *table = PQescapeIdentifier(c->pg, place->table, strlen(place->table));
  char *rel =
      schema && table ? durable__pg_format("%s.%s", schema, table) : NULL;
  PQfreemem(schema);
  PQfreemem(table);
  if (rel == NULL)
    return NULL;
  /* only OP_LIST_TYPE_SKIP has a second %s; the others ignore it */
  const char *bulk = durable__bulk_type(place->table);
  char *sql = durable__pg_format(op_sql[op], rel, bulk ? bulk : "");
  free(rel);
  return sql;
}

/* The name of the prepared statement for `op` on `place` (place may be
 * NULL for statements outside partitions), preparing it on first use. */
int durable__pg_statement(durable__conn_t *c, int op,
                          const durable__place_t *place, char name[32],
                          durable_error_t *err) {
  char *key =
      place ? durable__pg_format("%d %s %s", op, place->table, place->partition)
            : durable__pg_format("%d", op);
  if (key == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  uintptr_t known = (uintptr_t)durable__map_get(&c->stmts, key);
  if (known != 0) {
    snprintf(name, 32, "durable_%u", (unsigned)known);
    free(key);
    return 0;
  }

  int rc = 0;
  if (c->stmts.count >= STMT_CACHE_MAX) {
    /* what is queued names statements about to go */
    if ((rc = durable__pg_drain(c, NULL, NULL, err)) != 0) {
      free(key);
      return rc;
    }
    PGresult *res = PQexec(c->pg, "DEALLOCATE ALL");
    if (!durable__pg_result_ok(res))
      rc = durable__pg_error(c, res, 0, err, "deallocate", "");
    PQclear(res);
    if (rc != 0) {
      free(key);
      return rc;
    }
    durable__map_free(&c->stmts);
    c->resets++;
  }

  char *sql = sql_of(c, op, place);
  if (sql == NULL) {
    free(key);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }

  unsigned n = ++c->next_stmt;
  snprintf(name, 32, "durable_%u", n);
  c->sqlstate[0] = '\0';
  PGresult *res = PQprepare(c->pg, name, sql, 0, NULL);
  if (!durable__pg_result_ok(res))
    rc = durable__pg_error(c, res, 0, err, "prepare",
                           place ? place->partition : "");
  else
    rc = durable__map_put(&c->stmts, key, MAP_NUMBER(n));
  PQclear(res);
  free(sql);
  free(key);
  return rc;
}

/* The names of two statements, `op` and (unless `second_op` is OP_NONE)
 * `second_op`, from one cache generation: preparing the second may
 * DEALLOCATE ALL (above), which voids the first name, so then both are
 * taken again. */
int durable__pg_statement_pair(durable__conn_t *c, int op, int second_op,
                               const durable__place_t *place, char name[32],
                               char second[32], durable_error_t *err) {
  unsigned resets;
  int rc;
  do {
    resets = c->resets;
    rc = durable__pg_statement(c, op, place, name, err);
    if (rc == 0 && second_op != OP_NONE)
      rc = durable__pg_statement(c, second_op, place, second, err);
  } while (rc == 0 && resets != c->resets);
  return rc;
}

/*
 * schema.c: the satellite mapping list, and every piece of DDL generated
 * from it.
 *
 * A node lives in the table of the longest mapped segment that occurs as a
 * whole segment of its path, else in mesh_nodes (path.c applies the rule).
 * "_DurableStreamItem" is 18 characters on purpose: the items of a stream
 * owned by a thread message (14) or a document part (13) must still land in
 * durable_stream_items; "_DurableStreamId" (16) lands there too, above both.
 *
 * Every node table has the same columns.  Ids and namespaces compare as bytes
 * on both databases (SQLite's BINARY, PostgreSQL's COLLATE "C") so that pages
 * and the 12-digit item ids sort the same everywhere, and the primary key
 * (namespace, id) makes "children of NS after ID" an index range scan.  On
 * SQLite the tables are WITHOUT ROWID: clustered on that key, a catch-up read
 * of a stream is a sequential walk of the b-tree.
 */
#include "schema.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

const durable__mapping_t durable__mappings[] = {
    {"_DurableStreamItem", "durable_stream_items", "DurableStreamItem"},
    /* the ids of idempotent publishes, one per item published with one:
     * beside the items, out of mesh_nodes (src/streams/publish_id.c) */
    {"_DurableStreamId", "durable_stream_items", NULL},
    {"_DocumentPart", "document_parts", NULL},
    {"_ThreadMessage", "threads", NULL},
};
const size_t durable__mapping_count =
    sizeof(durable__mappings) / sizeof(durable__mappings[0]);

/* Distinct tables in order, built once from the constant mapping list
 * (under uv_once: worker threads may be the first to ask). */
static const char
    *tables[sizeof(durable__mappings) / sizeof(durable__mappings[0]) + 2];
static uv_once_t tables_once = UV_ONCE_INIT;

static void build_tables(void) {
  size_t n = 0;
  tables[n++] = DURABLE__PRIMARY_TABLE;
  for (size_t i = 0; i < durable__mapping_count; i++) {
    int seen = 0;
    for (size_t j = 0; j < n; j++)
      if (strcmp(tables[j], durable__mappings[i].table) == 0)
        seen = 1;
    if (!seen)
      tables[n++] = durable__mappings[i].table;
  }
  tables[n] = NULL;
}

const char *const *durable__tables(void) {
  uv_once(&tables_once, build_tables);
  return tables;
}

const char *durable__bulk_type(const char *table) {
  for (size_t i = 0; table && i < durable__mapping_count; i++)
    if (durable__mappings[i].bulk_type &&
        strcmp(durable__mappings[i].table, table) == 0)
      return durable__mappings[i].bulk_type;
  return NULL;
}

int durable__type_query_skips_bulk(const char *table, const char *node_type) {
  const char *bulk = durable__bulk_type(table);
  return bulk != NULL && strcmp(bulk, node_type ? node_type : "") != 0;
}

/* A tiny string builder; on allocation failure it keeps NULL. */
typedef struct {
  char *s;
  size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) {
  if (b->cap && b->s == NULL)
    return; /* failed earlier */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->len + (size_t)n + 1 > b->cap) {
    size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
    char *s = realloc(b->s, cap);
    if (s == NULL) {
      free(b->s);
      b->s = NULL;
      b->cap = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

/* The columns of every node table; `text` is the dialect's byte-ordered
 * text type, `i64` its 64-bit integer. */
static void node_table_columns(sbuf *b, const char *text, const char *i64) {
  sb_add(b,
         "namespace %s NOT NULL, id %s NOT NULL, path %s NOT NULL, "
         "node_type %s NOT NULL, content %s NOT NULL, "
         "main_node %s NOT NULL, version %s NOT NULL, "
         "created_at %s NOT NULL, updated_at %s NOT NULL, "
         "PRIMARY KEY (namespace, id)",
         text, text, text, text, text, text, i64, i64, i64);
}

/* The type index of `table` (schema.h), from "(node_type, path)" on:
 * `quote` is how a literal's quote is written where the text goes (PL/pgSQL
 * format() strings double it). */
static void type_index_tail(sbuf *b, const char *table, const char *quote) {
  const char *bulk = durable__bulk_type(table);
  sb_add(b, " (node_type, path)");
  if (bulk != NULL)
    sb_add(b, " WHERE node_type <> %s%s%s", quote, bulk, quote);
}

static char *sqlite_script(void) {
  sbuf b = {0};
  for (const char *const *t = durable__tables(); *t; t++) {
    sb_add(&b, "CREATE TABLE IF NOT EXISTS %s (", *t);
    node_table_columns(&b, "TEXT", "INTEGER");
    sb_add(&b, ") WITHOUT ROWID;\n");
    /* IF NOT EXISTS: a file made before the index gets it at its next
     * open (one pass over the table, once) */
    sb_add(&b,
           "CREATE INDEX IF NOT EXISTS %s" DURABLE__TYPE_INDEX_SUFFIX " ON %s",
           *t, *t);
    type_index_tail(&b, *t, "'");
    sb_add(&b, ";\n");
  }
  sb_add(&b,
         /* grants: principal may read (modes & 1) and write (modes & 2) owners
          * at or under prefix; a file made before modes gets the column (as
          * read grants) from sqlite_store.c's migration */
         "CREATE TABLE IF NOT EXISTS durable_grants (principal TEXT NOT NULL, "
         "prefix TEXT NOT NULL, modes INTEGER NOT NULL DEFAULT 1, "
         "PRIMARY KEY (principal, prefix)) WITHOUT ROWID;\n"
         /* the commit log: each write transaction's id with the namespaces
          * it changed, for other processes, and the last version it wrote,
          * which the next one counts on from (sqlite_store.c) */
         "CREATE TABLE IF NOT EXISTS durable_commits (commit_id INTEGER NOT "
         "NULL, namespace TEXT NOT NULL, version INTEGER NOT NULL, "
         "PRIMARY KEY (commit_id, namespace)) WITHOUT ROWID;\n");
  return b.s;
}

static char *postgres_script(void) {
  sbuf b = {0};
  sb_add(&b,
         "CREATE SEQUENCE IF NOT EXISTS public.durable_version;\n"
         "CREATE TABLE IF NOT EXISTS public.durable_grants (principal text "
         "COLLATE \"C\" NOT NULL, prefix text COLLATE \"C\" NOT NULL, "
         "modes integer NOT NULL DEFAULT 1, PRIMARY KEY (principal, prefix));\n"
         /* a database made before grants had modes: they were read grants */
         "ALTER TABLE public.durable_grants ADD COLUMN IF NOT EXISTS modes "
         "integer NOT NULL DEFAULT 1;\n"
         "CREATE OR REPLACE FUNCTION public.ensure_partition_schema(name text)"
         " RETURNS void LANGUAGE plpgsql AS $fn$\nBEGIN\n"
         "  EXECUTE format('CREATE SCHEMA IF NOT EXISTS %%I', name);\n");
  for (const char *const *t = durable__tables(); *t; t++) {
    sbuf cols = {0};
    node_table_columns(&cols, "text COLLATE \"C\"", "bigint");
    if (cols.s == NULL) {
      free(b.s);
      return NULL;
    }
    sb_add(&b,
           "  EXECUTE format('CREATE TABLE IF NOT EXISTS %%I.%s (%s)', "
           "name);\n",
           *t, cols.s);
    free(cols.s);
    sb_add(&b,
           "  EXECUTE format('CREATE INDEX IF NOT EXISTS "
           "%s" DURABLE__TYPE_INDEX_SUFFIX " ON %%I.%s",
           *t, *t);
    type_index_tail(&b, *t, "''");
    sb_add(&b, "', name);\n");
  }
  sb_add(&b, "END\n$fn$;\n");
  /* A strict replace (postgres_sql.c) that updated no row calls it: the
   * error aborts the transaction, which the store then runs again with
   * each outcome learnt before its commit. */
  sb_add(&b, "CREATE OR REPLACE FUNCTION public.durable_refused() RETURNS "
             "bigint LANGUAGE plpgsql AS $r$\nBEGIN\n  RAISE EXCEPTION USING "
             "ERRCODE = '" DURABLE__REFUSED_STATE "', MESSAGE = 'durable: a "
             "compare-and-set found the row absent or at another version; "
             "the store runs the transaction again';\nEND\n$r$;\n");
  /* The partitions made before this version of the function: the missing
   * type indexes (the bootstrap runs this script only when the function it
   * finds is not this one, so an up-to-date database skips it). */
  sb_add(&b, "DO $do$\nDECLARE s name;\nBEGIN\n"
             "  FOR s IN SELECT n.nspname FROM pg_catalog.pg_namespace n "
             "WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_class t WHERE "
             "t.relnamespace = n.oid AND t.relname = '" DURABLE__PRIMARY_TABLE
             "' AND t.relkind = 'r') LOOP\n"
             "    PERFORM public.ensure_partition_schema(s);\n"
             "  END LOOP;\nEND\n$do$;\n");
  return b.s;
}

char *durable__schema_script(durable__dialect_t dialect) {
  return dialect == DURABLE__SQLITE ? sqlite_script() : postgres_script();
}

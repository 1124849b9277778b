/*
 * schema.h: the satellite mapping list and the table DDL generated from it.
 *
 * The list is written once (schema.c).  Placement (durable__path_table), the
 * SQLite schema and PostgreSQL's public.ensure_partition_schema(name) all
 * come from it, so adding a mapping adds its table everywhere.
 */
#ifndef DURABLE_MESH_SCHEMA_H
#define DURABLE_MESH_SCHEMA_H

#include <stddef.h>

typedef struct {
  const char *segment; /* a whole path segment, e.g. "_DurableStreamItem" */
  const char *table;   /* e.g. "durable_stream_items" */
  /* the NodeType that fills the table with every append (or NULL): its rows
   * stay out of the table's type index, see durable__bulk_type */
  const char *bulk_type;
} durable__mapping_t;

extern const durable__mapping_t durable__mappings[];
extern const size_t durable__mapping_count;

#define DURABLE__PRIMARY_TABLE "mesh_nodes"

/* Every distinct table name, the primary one first; NULL-terminated. */
const char *const *durable__tables(void);

/* The type index: every node table has an index on (node_type, path) that
 * serves the type query "node_type = T AND path > AFTER ORDER BY path", so
 * an operator's listing and a host's start cost the rows of that type, not
 * the table.  In a table with a bulk type (durable_stream_items: every item
 * ever appended) the index is partial, WHERE node_type <> 'BULK', so that an
 * append writes no second b-tree entry.  A query may use that partial index
 * only when it carries the same term as literal text (SQLite matches the
 * text; PostgreSQL proves the implication from constants only, never from a
 * parameter), so a backend asks for a type other than the bulk one with
 * "... AND node_type <> 'BULK'" added, and for the bulk type itself without
 * (a scan: such a listing is O(items) by nature).
 *
 * The bulk type of `table` (one of durable__tables()), or NULL when its
 * type index covers every row.  It is one of our constants: safe to paste
 * into SQL text between single quotes. */
const char *durable__bulk_type(const char *table);
/* Whether a type query for `node_type` in `table` carries the bulk type's
 * term (the statement beside the partial index), as above: 1 in a table
 * with a bulk type, unless that type is the one asked for. */
int durable__type_query_skips_bulk(const char *table, const char *node_type);

/* The name of a table's type index: "{table}_by_type". */
#define DURABLE__TYPE_INDEX_SUFFIX "_by_type"

/* PostgreSQL: the SQLSTATE that public.durable_refused() raises, the
 * refusal of a strict replace (postgres_sql.c; postgres_pipeline.c takes
 * it for a refusal). */
#define DURABLE__REFUSED_STATE "DU001"

typedef enum { DURABLE__SQLITE, DURABLE__POSTGRES } durable__dialect_t;

/* The whole bootstrap script for a dialect (malloc'ed; the caller frees it):
 * SQLite: every node table and its type index plus the store's own tables
 * (grants, the commit log).  PostgreSQL: the version sequence, the grants
 * table, the function public.ensure_partition_schema(name) that creates a
 * partition's schema with every node table and type index in it, and a
 * call of that function for every partition already there (so that a
 * database made before the type index gets it: the script runs whenever
 * the function's body differs from this one).  Idempotent. */
char *durable__schema_script(durable__dialect_t dialect);

#endif

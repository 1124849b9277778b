/*
 * schema.h: the satellite mapping list and the table DDL generated from it.
 *
 * The list is written once (schema.c).  Placement (durable_path_table), the
 * SQLite schema and PostgreSQL's public.ensure_partition_schema(name) all
 * come from it, so adding a mapping adds its table everywhere.
 */
#ifndef DURABLE_MESH_SCHEMA_H
#define DURABLE_MESH_SCHEMA_H

#include <stddef.h>

typedef struct {
  const char *segment; /* a whole path segment, e.g. "_DurableStreamItem" */
  const char *table;   /* e.g. "durable_stream_items" */
} durable__mapping_t;

extern const durable__mapping_t durable__mappings[];
extern const size_t durable__mapping_count;

#define DURABLE__PRIMARY_TABLE "mesh_nodes"

/* Every distinct table name, the primary one first; NULL-terminated. */
const char *const *durable__tables(void);

typedef enum { DURABLE__SQLITE, DURABLE__POSTGRES } durable__dialect_t;

/* The whole bootstrap script for a dialect (malloc'ed; the caller frees it):
 * SQLite: every node table plus the store's own tables (grants, the commit
 * log).  PostgreSQL: the version sequence, the grants table and the
 * function public.ensure_partition_schema(name) that creates a partition's
 * schema with every node table in it.  Idempotent. */
char *durable__schema_script(durable__dialect_t dialect);

#endif

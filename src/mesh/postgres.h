/*
 * postgres.h: what the files of the PostgreSQL backend share, and nothing
 * outside them includes.  durable__postgres_backend (backend.h) is the only
 * name the rest of the mesh layer sees; its files call one another only
 * downwards:
 *
 *   postgres_store.c     the backend's functions: connect, transactions,
 *        |               partitions, reads, writes, grants, the change feed
 *   postgres_conn.c      one libpq session: open, name, errors
 */
#ifndef DURABLE_MESH_POSTGRES_H
#define DURABLE_MESH_POSTGRES_H

#include "map.h"
#include "schema.h"
#include "store.h"

#include <libpq-fe.h>

#include <stddef.h>

/* ---- postgres_conn.c: one libpq session --------------------------------- */

/* Connect, blocking, within 5 s in all, with the keepalives that bound how
 * long either end waits for the other.  `url` may be a URI or a conninfo.
 * On failure returns NULL with the reason, one line, in `why`. */
PGconn *durable__pg_open(const char *url, char *why, size_t size);

/* The URL or conninfo with any password replaced by "***", for messages
 * (malloc'ed; NULL when out of memory). */
char *durable__pg_mask_password(const char *url);

/* A connection is gone: libpq says so, or the server's SQLSTATE (may be
 * NULL) says it is going away. */
int durable__pg_is_lost(PGconn *pg, const char *sqlstate);

/* `src` (a libpq message, which may span lines) as one line in `dst`. */
void durable__pg_one_line(char *dst, size_t size, const char *src);

/* printf into a new string (malloc'ed; NULL when out of memory). */
char *durable__pg_format(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

#endif /* DURABLE_MESH_POSTGRES_H */

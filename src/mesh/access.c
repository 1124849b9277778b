/*
 * access.c: who may read what.
 *
 * A principal reads the nodes whose owner lies at or under one of its grant
 * prefixes, compared segment by segment ("Space" covers "Space/doc", not
 * "Spaces").  A satellite (a stream, its items, a document part) has the
 * owner of the path before its first '_' segment, so it is readable exactly
 * by those who may read that owner: one rule, no per-satellite grants.  The
 * platform (a NULL principal) reads and writes everything and never gets
 * here.  Grants are read in the same worker call as the rows they filter, so
 * a revoke takes effect on the next read, in every process.
 */
#include "job.h"
#include "store.h"

#include <string.h>

int durable__access_load(const durable__backend_t *be, durable__conn_t *conn,
                         const char *principal, durable__strv_t *grants,
                         durable_error_t *err) {
  return be->grants_of(conn, principal, grants, err);
}

/* Whether `path` is `prefix` or lies under it, segment-wise. */
static int under(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int durable__access_covers(const durable__strv_t *grants, const char *owner) {
  for (size_t i = 0; i < grants->count; i++)
    if (under(owner, grants->items[i]))
      return 1;
  return 0;
}

int durable__access_reaches(const durable__strv_t *grants, const char *ns) {
  char owner[DURABLE_PATH_MAX + 1];
  if (*ns == '\0')
    return grants->count > 0;
  if (durable_path_owner(ns, owner, sizeof owner) < 0)
    return 0;
  if (durable__access_covers(grants, owner))
    return 1;
  /* a grant below the namespace makes some of its children readable */
  for (size_t i = 0; i < grants->count; i++)
    if (under(grants->items[i], ns))
      return 1;
  return 0;
}

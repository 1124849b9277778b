/*
 * access.c: who may read and write what.
 *
 * A principal may read (write) the nodes whose owner lies at or under one of
 * its read (write) grant prefixes, compared segment by segment ("Space"
 * covers "Space/doc", not "Spaces").  A satellite (a stream, its items, a
 * document part) has the owner of the path before its first '_' segment, so
 * it is readable and writable exactly by those who may read and write that
 * owner: one rule, no per-satellite grants.  The platform (a NULL principal)
 * reads and writes everything and never gets here.
 *
 * Grants are read in the same worker call as the rows they filter, and for
 * a write inside the write's own transaction, so a revoke takes effect on
 * the next operation, in every process, with no cache to keep in step.  The
 * cost is one indexed read of a small table per operation of a principal;
 * the platform's operations (the stream hubs', a host's) pay nothing.
 *
 * The platform has no name: "platform" is refused as a principal (path.c
 * checks the names, see durable.h), so no string can become it.
 */
#include "job.h"
#include "store.h"

#include <stdlib.h>
#include <string.h>

const char *durable_grant_mode_name(int modes) {
  switch (modes) {
  case DURABLE_GRANT_READ:
    return "read";
  case DURABLE_GRANT_WRITE:
    return "write";
  case DURABLE_GRANT_ALL:
    return "read,write";
  }
  return "unknown";
}

int durable__grant_modes_parse(const char *text) {
  if (text == NULL)
    return DURABLE_EINVAL;
  int modes = 0;
  for (const char *p = text;;) {
    size_t n = strcspn(p, ",");
    if (n == 4 && strncmp(p, "read", 4) == 0)
      modes |= DURABLE_GRANT_READ;
    else if (n == 5 && strncmp(p, "write", 5) == 0)
      modes |= DURABLE_GRANT_WRITE;
    else
      return DURABLE_EINVAL;
    if (p[n] == '\0')
      return modes;
    p += n + 1;
  }
}

/* ---- grant lists --------------------------------------------------------- */

int durable__grants_push(durable__grants_t *v, const char *principal,
                         const char *prefix, int modes) {
  if (v->count == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    durable__grant_t *items = realloc(v->items, cap * sizeof(*items));
    if (items == NULL)
      return DURABLE_ENOMEM;
    v->items = items;
    v->cap = cap;
  }
  durable__grant_t *g = &v->items[v->count];
  g->principal = strdup(principal ? principal : "");
  g->prefix = strdup(prefix);
  g->modes = modes;
  if (g->principal == NULL || g->prefix == NULL) {
    free(g->principal);
    free(g->prefix);
    return DURABLE_ENOMEM;
  }
  v->count++;
  return 0;
}

void durable__grants_free(durable__grants_t *v) {
  for (size_t i = 0; i < v->count; i++) {
    free(v->items[i].principal);
    free(v->items[i].prefix);
  }
  free(v->items);
  memset(v, 0, sizeof *v);
}

/* ---- checks -------------------------------------------------------------- */

int durable__access_load(const durable__backend_t *be, durable__conn_t *conn,
                         const char *principal, durable__grants_t *grants,
                         durable_error_t *err) {
  return be->grants_of(conn, principal, grants, err);
}

/* Whether `path` is `prefix` or lies under it, segment-wise. */
static int under(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* Whether one grant gives `mode` (a single bit) on `owner`. */
static int covers_one(const durable__grants_t *grants, const char *owner,
                      int mode) {
  for (size_t i = 0; i < grants->count; i++)
    if ((grants->items[i].modes & mode) &&
        under(owner, grants->items[i].prefix))
      return 1;
  return 0;
}

int durable__access_missing(const durable__grants_t *grants, const char *owner,
                            int modes) {
  /* each mode on its own: read on "Space" and write on "Space/doc" together
   * give both on "Space/doc" */
  if ((modes & DURABLE_GRANT_READ) &&
      !covers_one(grants, owner, DURABLE_GRANT_READ))
    return DURABLE_GRANT_READ;
  if ((modes & DURABLE_GRANT_WRITE) &&
      !covers_one(grants, owner, DURABLE_GRANT_WRITE))
    return DURABLE_GRANT_WRITE;
  return 0;
}

int durable__access_covers(const durable__grants_t *grants, const char *owner) {
  return covers_one(grants, owner, DURABLE_GRANT_READ);
}

int durable__access_reaches(const durable__grants_t *grants, const char *ns) {
  char owner[DURABLE_PATH_MAX + 1];
  if (*ns == '\0') {
    for (size_t i = 0; i < grants->count; i++)
      if (grants->items[i].modes & DURABLE_GRANT_READ)
        return 1;
    return 0;
  }
  if (durable_path_owner(ns, owner, sizeof owner) < 0)
    return 0;
  if (durable__access_covers(grants, owner))
    return 1;
  /* a read grant below the namespace makes some of its children readable */
  for (size_t i = 0; i < grants->count; i++)
    if ((grants->items[i].modes & DURABLE_GRANT_READ) &&
        under(grants->items[i].prefix, ns))
      return 1;
  return 0;
}

int durable__access_denied(durable_error_t *err, const char *principal,
                           int mode, const char *path) {
  return durable__error(err, DURABLE_EACCES, "principal '%s' may not %s '%s'",
                        principal,
                        mode == DURABLE_GRANT_WRITE ? "write" : "read", path);
}

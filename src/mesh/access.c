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
 *
 * Grants and revokes are the platform's jobs, each its own small transaction
 * on the writer; the listing of grants is a read (read.c).
 */
#include "engine.h"

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

/* ---- grants and revokes ------------------------------------------------- */

/* A grant or a revoke: its own small transaction (a revoke may be two
 * statements: clear the modes, drop a row left with none). */
static void run_grant(durable__worker_t *w, durable__job_t **jobs, size_t n) {
  (void)n;
  durable__job_t *job = jobs[0];
  const durable__backend_t *be = w->store->be;
  durable_error_t err = {0};
  int rc = durable__worker_connect(w, &err);
  if (rc == 0 && (rc = be->begin(w->conn, &err)) == 0) {
    rc = be->grant(w->conn, job->principal, job->path, (int)job->limit,
                   (int)job->num, &err);
    int unknown = 0;
    if (rc == 0)
      rc = be->commit(w->conn, &unknown, &err);
    else
      be->rollback(w->conn);
  }
  if (rc < 0) {
    durable__job_fail(job, &err);
    if (rc == DURABLE_EUNAVAIL)
      durable__worker_disconnect(w);
  }
}

const durable__job_class_t durable__grant_class = {.on_writer = 1,
                                                   .run = run_grant};

/* Grants are the platform's: the store has no acting principal, and the
 * grantee is the job's principal. */
static int grant_job(durable_store_t *store, const char *principal,
                     const char *prefix, int modes, int add, durable_done_cb cb,
                     void *data, durable_error_t *err) {
  int rc = durable_principal_check(principal, err);
  if (rc < 0)
    return rc;
  if (modes < (add ? 1 : 0) || modes > DURABLE_GRANT_ALL)
    return durable__error(err, DURABLE_EINVAL,
                          "grant modes %d are not read (%d), write (%d) or "
                          "both (%d)%s",
                          modes, DURABLE_GRANT_READ, DURABLE_GRANT_WRITE,
                          DURABLE_GRANT_ALL, add ? "" : ", or 0 for all");
  durable__job_t *job = NULL;
  if ((rc = durable__store_refuse_readonly(store, add ? "grant" : "revoke",
                                           err)) < 0)
    return rc;
  rc = durable__job_for_path(store, JOB_GRANT, &durable__grant_class, principal,
                             prefix, &job, err);
  if (rc < 0)
    return rc;
  job->num = add;
  job->limit = (size_t)(modes ? modes : DURABLE_GRANT_ALL);
  return durable__job_start(job, cb, data);
}

int durable_store_grant(durable_store_t *store, const char *principal,
                        const char *prefix, int modes, durable_done_cb cb,
                        void *data, durable_error_t *err) {
  return grant_job(store, principal, prefix, modes, 1, cb, data, err);
}

int durable_store_revoke(durable_store_t *store, const char *principal,
                         const char *prefix, int modes, durable_done_cb cb,
                         void *data, durable_error_t *err) {
  return grant_job(store, principal, prefix, modes, 0, cb, data, err);
}

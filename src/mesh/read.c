/*
 * read.c: the store's reads: what a reader thread does for each kind of read
 * job (a node, a namespace's children, a stream's items, a NodeType's
 * nodes, a grant check, an instance's liveness), and the public calls that
 * make those jobs.  Every read checks the acting principal's grants on the
 * worker, in the same connection, before it answers.
 */
#include "engine.h"
#include "schema.h"

#include <stdlib.h>
#include <string.h>

/* Rows a reader fetches per round trip while checking access. */
#define QUERY_LIMIT_MAX 1000
#define QUERY_LIMIT_DEFAULT 100

/* ---- on the reader
 * --------------------------------------------------------------- */

/* Rows of namespace `ns` after `after` across every table they may be in:
 * the table of an ordinary child, plus, for each mapped segment that would
 * place a child named after it elsewhere, that one row.  Merged in id
 * order; fetches limit + 1 to know whether more follow.
 *
 * With `pipelined` (and a backend that has get_later) the probes are
 * queued before the listing, so that on PostgreSQL all of it is one round
 * trip.  Anything short of every answer in -- a probe's table dropped, an
 * error that aborted the pipeline -- returns DURABLE__PENDING, and the
 * caller asks again one statement at a time, which says what is wrong. */
static int list_children_once(const durable__backend_t *be,
                              durable__conn_t *conn, const char *ns,
                              const char *after, size_t limit, int pipelined,
                              durable__nodes_t *out, durable_error_t *err) {
  char part[DURABLE_PARTITION_MAX + 1];
  char probe[DURABLE_PATH_MAX + 64];
  size_t nprobes = 0;
  durable__got_t *got = calloc(durable__mapping_count, sizeof(*got));
  int rc = got ? 0 : durable__error(err, DURABLE_ENOMEM, "out of memory");
  snprintf(probe, sizeof probe, "%s%sx", ns, *ns ? "/" : "");
  durable__place_t place = durable__path_place(probe, part, sizeof part);
  /* plainly, the listing first: a probe's missing table must not make the
   * listing's partition look absent */
  if (rc == 0 && !pipelined)
    rc = be->list(conn, place, ns, after, limit + 1, out, err);
  for (size_t i = 0; i < durable__mapping_count && rc == 0; i++) {
    const char *seg = durable__mappings[i].segment;
    char other_part[DURABLE_PARTITION_MAX + 1];
    snprintf(probe, sizeof probe, "%s%s%s", ns, *ns ? "/" : "", seg);
    durable__place_t other =
        durable__path_place(probe, other_part, sizeof other_part);
    if (strcmp(other.table, place.table) == 0 || strcmp(seg, after) <= 0)
      continue;
    durable__got_t *g = &got[nprobes++];
    g->status = DURABLE__PENDING;
    if (pipelined) {
      rc = be->get_later(conn, other, ns, seg, g, err);
    } else {
      g->status = be->get(conn, other, ns, seg, 0, &g->node, err);
      if (g->status < 0 && g->status != DURABLE_ENOTFOUND)
        rc = g->status;
    }
  }
  if (rc == 0 && pipelined)
    rc = be->list(conn, place, ns, after, limit + 1, out, err);
  int settled = 1;
  for (size_t i = 0; i < nprobes; i++)
    settled &= got[i].status == 0 || got[i].status == DURABLE_ENOTFOUND;
  if (pipelined && !settled) {
    /* some may still be queued: settle them while `got` lives */
    durable_error_t ignored = {0};
    be->flush(conn, &ignored);
  }
  if (pipelined && (rc != 0 || !settled))
    rc = DURABLE__PENDING; /* ask again, plainly */
  for (size_t i = 0; i < nprobes; i++) {
    durable_node_t *node = got[i].node;
    if (rc != 0 || node == NULL) {
      durable_node_free(node);
      continue;
    }
    /* insert in id order */
    if ((rc = durable__nodes_push(out, node)) < 0) {
      durable_node_free(node);
      continue;
    }
    for (size_t k = out->count - 1;
         k > 0 && strcmp(out->items[k - 1]->id, out->items[k]->id) > 0; k--) {
      durable_node_t *t = out->items[k - 1];
      out->items[k - 1] = out->items[k];
      out->items[k] = t;
    }
  }
  free(got);
  return rc;
}

static int list_children(const durable__backend_t *be, durable__conn_t *conn,
                         const char *ns, const char *after, size_t limit,
                         durable__nodes_t *out, int *more,
                         durable_error_t *err) {
  size_t had = out->count;
  int rc = list_children_once(be, conn, ns, after, limit, be->get_later != NULL,
                              out, err);
  if (rc == DURABLE__PENDING) {
    while (out->count > had)
      durable_node_free(out->items[--out->count]);
    memset(err, 0, sizeof *err);
    rc = list_children_once(be, conn, ns, after, limit, 0, out, err);
  }
  if (rc != 0)
    return rc;
  *more = out->count > had + limit;
  while (out->count > had + limit)
    durable_node_free(out->items[--out->count]);
  return 0;
}

static void read_get(const durable__backend_t *be, durable__conn_t *conn,
                     durable__job_t *job, const durable__grants_t *grants) {
  char part[DURABLE_PARTITION_MAX + 1];
  if (grants) {
    /* Access is decided by the path, before the read, so that a denied
     * answer never tells whether the node exists. */
    char owner[DURABLE_PATH_MAX + 1];
    snprintf(owner, sizeof owner, "%.*s", (int)durable__owner_len(job->path),
             job->path);
    if (!durable__access_covers(grants, owner)) {
      job->status = durable__access_denied(&job->err, job->principal,
                                           DURABLE_GRANT_READ, job->path);
      return;
    }
  }
  durable__place_t place = durable__path_place(job->path, part, sizeof part);
  int rc = be->get(conn, place, job->ns, job->id, 0, &job->node, &job->err);
  if (rc == DURABLE_ENOTFOUND)
    durable__error(&job->err, rc, "no node at '%s'", job->path);
  if (job->kind == JOB_EXISTS && (rc == 0 || rc == DURABLE_ENOTFOUND)) {
    job->value = rc == 0;
    rc = 0;
  }
  job->status = rc;
}

static void read_query(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job, const durable__grants_t *grants) {
  if (job->path != NULL) {
    /* path:P, one row or none: absence is an empty result, not an error */
    if (job->after && strcmp(job->id, job->after) <= 0)
      return;
    read_get(be, conn, job, grants);
    if (job->status == DURABLE_ENOTFOUND) {
      job->status = 0;
    } else if (job->status == 0) {
      job->status = durable__nodes_push(&job->nodes, job->node);
      if (job->status == 0)
        job->node = NULL;
    }
    return;
  }
  if (grants && !durable__access_reaches(grants, job->ns)) {
    job->status = durable__access_denied(&job->err, job->principal,
                                         DURABLE_GRANT_READ, job->ns);
    return;
  }
  /* Filtering may drop rows: keep reading pages until `limit` rows pass or
   * the namespace ends, so a page is short only at the end. */
  const char *after = job->after ? job->after : "";
  char *cursor = strdup(after);
  int rc = cursor ? 0 : DURABLE_ENOMEM;
  while (rc == 0) {
    durable__nodes_t page = {0};
    int more = 0;
    size_t want = job->limit - job->nodes.count;
    rc =
        list_children(be, conn, job->ns, cursor, want, &page, &more, &job->err);
    if (rc < 0) {
      durable__nodes_free(&page);
      break;
    }
    if (page.count > 0) {
      free(cursor);
      cursor = strdup(page.items[page.count - 1]->id);
      if (cursor == NULL)
        rc = DURABLE_ENOMEM;
    }
    for (size_t i = 0; i < page.count; i++) {
      if (rc == 0 &&
          (grants == NULL ||
           durable__access_covers(grants, page.items[i]->main_node))) {
        rc = durable__nodes_push(&job->nodes, page.items[i]);
        if (rc == 0)
          continue;
      }
      durable_node_free(page.items[i]);
    }
    free(page.items);
    job->more = more;
    if (!more || job->nodes.count >= job->limit)
      break;
  }
  free(cursor);
  job->status = rc;
}

/* The items namespace of a stream-specific read, for a principal: read on
 * its owner, decided before anything is read. */
static int items_allowed(durable__job_t *job, const durable__grants_t *grants) {
  if (grants == NULL)
    return 1;
  char owner[DURABLE_PATH_MAX + 1];
  durable_path_owner(job->ns, owner, sizeof owner);
  if (durable__access_covers(grants, owner))
    return 1;
  job->status = durable__access_denied(&job->err, job->principal,
                                       DURABLE_GRANT_READ, job->ns);
  return 0;
}

static void read_items(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job, const durable__grants_t *grants) {
  char part[DURABLE_PARTITION_MAX + 1];
  char probe[DURABLE_PATH_MAX + 16];
  char after[32];
  snprintf(probe, sizeof probe, "%s/000000000001", job->ns);
  snprintf(after, sizeof after, "%012lld", (long long)job->num);
  durable__place_t place = durable__path_place(probe, part, sizeof part);
  if (!items_allowed(job, grants))
    return;
  job->nodes.packed = 1; /* a page: its readers copy what they keep */
  int rc = be->list(conn, place, job->ns, after, job->limit + 1, &job->nodes,
                    &job->err);
  if (rc == 0) {
    /* only 12-digit ids are items; anything else sorts after '9...' or is
     * ignored (ids are checked, not trusted) */
    size_t keep = 0;
    for (size_t i = 0; i < job->nodes.count; i++) {
      const char *id = job->nodes.items[i]->id;
      int ok = strlen(id) == 12 && strspn(id, "0123456789") == 12;
      if (ok)
        job->nodes.items[keep++] = job->nodes.items[i];
      else
        durable__nodes_drop(&job->nodes, job->nodes.items[i]);
    }
    job->nodes.count = keep;
    job->more = job->nodes.count > job->limit;
    while (job->nodes.count > job->limit)
      durable__nodes_drop(&job->nodes, job->nodes.items[--job->nodes.count]);
  }
  job->status = rc;
}

static void read_last(const durable__backend_t *be, durable__conn_t *conn,
                      durable__job_t *job, const durable__grants_t *grants) {
  char part[DURABLE_PARTITION_MAX + 1];
  if (!items_allowed(job, grants))
    return;
  char probe[DURABLE_PATH_MAX + 16];
  snprintf(probe, sizeof probe, "%s/000000000001", job->ns);
  durable__place_t place = durable__path_place(probe, part, sizeof part);
  char *id = NULL;
  int rc = be->max_id(conn, place, job->ns, 12, &id, &job->err);
  if (rc == 0)
    job->value = id && *id ? strtoll(id, NULL, 10) : 0;
  free(id);
  job->status = rc;
}

static int by_path(const void *a, const void *b) {
  const durable_node_t *x = *(durable_node_t *const *)a;
  const durable_node_t *y = *(durable_node_t *const *)b;
  return strcmp(x->path, y->path);
}

/* Every node of one NodeType: each partition's tables, merged in path
 * order (partition names do not sort like the paths under them).  A
 * principal's grants filter the rows: pages are read on until `limit` rows
 * pass or none is left, so a page that filtering emptied is never taken for
 * the end. */
static void read_type(const durable__backend_t *be, durable__conn_t *conn,
                      durable__job_t *job, const durable__grants_t *grants) {
  durable__strv_t parts = {0};
  char *cursor = strdup(job->after ? job->after : "");
  int rc = cursor ? be->partitions(conn, &parts, &job->err) : DURABLE_ENOMEM;
  int more = 1;
  while (rc == 0 && more && job->nodes.count <= job->limit) {
    durable__nodes_t page = {0};
    for (size_t i = 0; rc == 0 && i < parts.count; i++)
      for (const char *const *t = durable__tables(); rc == 0 && *t; t++) {
        durable__place_t place = {.partition = parts.items[i], .table = *t};
        rc = be->list_type(conn, place, job->id, cursor, job->limit + 1, &page,
                           &job->err);
      }
    if (rc == 0 && page.count > 1)
      qsort(page.items, page.count, sizeof(*page.items), by_path);
    /* the first limit+1 of the merge, unfiltered, decide what follows */
    more = page.count > job->limit;
    while (page.count > job->limit + 1)
      durable_node_free(page.items[--page.count]);
    if (rc == 0 && page.count > 0) {
      free(cursor);
      cursor = strdup(page.items[page.count - 1]->path);
      if (cursor == NULL)
        rc = DURABLE_ENOMEM;
    }
    for (size_t i = 0; i < page.count; i++) {
      durable_node_t *node = page.items[i];
      page.items[i] = NULL;
      if (rc == 0 &&
          (grants == NULL || durable__access_covers(grants, node->main_node))) {
        if (durable__nodes_push(&job->nodes, node) < 0) {
          durable_node_free(node);
          rc = DURABLE_ENOMEM;
        }
      } else {
        durable_node_free(node);
      }
    }
    durable__nodes_free(&page);
    if (grants == NULL)
      break; /* unfiltered: one read is the page */
  }
  durable__strv_free(&parts);
  free(cursor);
  job->more = job->nodes.count > job->limit || (more && rc == 0);
  while (job->nodes.count > job->limit)
    durable_node_free(job->nodes.items[--job->nodes.count]);
  job->status = rc;
}

static void read_alive(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job) {
  if (job->store->single) {
    /* an in-memory store has one process, and one opening: this one */
    job->value = strcmp(job->id, job->store->instance) == 0;
    return;
  }
  int alive = 0;
  job->status = be->alive(conn, (uint64_t)job->num, &alive, &job->err);
  /* just after a reconnect, a lock missing may not be taken again yet */
  job->value = alive || durable__store_settling(job->store);
}

/* May job->principal do job->num (modes) on the owner of job->path? */
static void read_access(durable__job_t *job, const durable__grants_t *grants) {
  if (grants == NULL)
    return; /* the platform */
  char owner[DURABLE_PATH_MAX + 1];
  snprintf(owner, sizeof owner, "%.*s", (int)durable__owner_len(job->path),
           job->path);
  int missing = durable__access_missing(grants, owner, (int)job->num);
  if (missing)
    job->status =
        durable__access_denied(&job->err, job->principal, missing, job->path);
}

void durable__read_run(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job) {
  if (job->kind == JOB_GRANTS) { /* its principal filters; nobody acts */
    durable__grants_free(&job->grants);
    job->status = be->grants_of(conn, job->principal, &job->grants, &job->err);
    return;
  }
  durable__grants_t grants = {0};
  int restricted = job->principal != NULL;
  if (restricted) {
    int rc = durable__access_load(be, conn, job->principal, &grants, &job->err);
    if (rc < 0) {
      durable__grants_free(&grants);
      job->status = rc;
      return;
    }
  }
  const durable__grants_t *g = restricted ? &grants : NULL;
  switch (job->kind) {
  case JOB_GET:
  case JOB_EXISTS:
    read_get(be, conn, job, g);
    break;
  case JOB_QUERY:
    read_query(be, conn, job, g);
    break;
  case JOB_ITEMS:
    read_items(be, conn, job, g);
    break;
  case JOB_LAST:
    read_last(be, conn, job, g);
    break;
  case JOB_ACCESS:
    read_access(job, g);
    break;
  case JOB_TYPE:
    read_type(be, conn, job, g);
    break;
  case JOB_ALIVE:
    read_alive(be, conn, job);
    break;
  default:
    job->status = DURABLE_EINVAL;
    break;
  }
  durable__grants_free(&grants);
}

/* A read: one try, and one more on a fresh connection when the first lost
 * its link, since a read has no effect. */
static void run_read(durable__worker_t *w, durable__job_t **jobs, size_t n) {
  (void)n;
  durable__job_t *job = jobs[0];
  durable_error_t err = {0};
  if (durable__worker_connect(w, &err) < 0) {
    durable__job_fail(job, &err);
    return;
  }
  durable__read_run(w->store->be, w->conn, job);
  if (job->status == DURABLE_EUNAVAIL) {
    /* the connection died: one fresh try, since a read has no effect */
    durable__worker_disconnect(w);
    if (durable__worker_connect(w, &err) < 0)
      return;
    durable__nodes_free(&job->nodes);
    job->status = 0;
    durable__read_run(w->store->be, w->conn, job);
    if (job->status == DURABLE_EUNAVAIL)
      durable__worker_disconnect(w);
  }
}

const durable__job_class_t durable__read_class = {.run = run_read};

int durable_store_get(durable_store_t *store, const char *principal,
                      const char *path, durable_done_cb cb, void *data,
                      durable_error_t *err) {
  durable__job_t *job = NULL;
  int rc = durable__job_for_path(store, JOB_GET, &durable__read_class,
                                 principal, path, &job, err);
  return rc < 0 ? rc : durable__job_start(job, cb, data);
}

int durable_store_exists(durable_store_t *store, const char *principal,
                         const char *path, durable_done_cb cb, void *data,
                         durable_error_t *err) {
  durable__job_t *job = NULL;
  int rc = durable__job_for_path(store, JOB_EXISTS, &durable__read_class,
                                 principal, path, &job, err);
  return rc < 0 ? rc : durable__job_start(job, cb, data);
}

int durable_store_query(durable_store_t *store, const char *principal,
                        const char *query, const char *after, size_t limit,
                        durable_done_cb cb, void *data, durable_error_t *err) {
  if (query == NULL)
    return durable__error(err, DURABLE_EINVAL, "query is missing");
  if (limit == 0)
    limit = QUERY_LIMIT_DEFAULT;
  if (limit > QUERY_LIMIT_MAX)
    return durable__error(err, DURABLE_EINVAL, "query limit %zu is above %d",
                          limit, QUERY_LIMIT_MAX);
  durable__job_t *job = NULL;
  int rc;
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if (strncmp(query, "path:", 5) == 0) {
    rc = durable__job_for_path(store, JOB_QUERY, &durable__read_class,
                               principal, query + 5, &job, err);
    if (rc < 0)
      return rc;
  } else if (strncmp(query, "namespace:", 10) == 0) {
    const char *ns = query + 10;
    if (*ns != '\0' && (rc = durable_path_check(ns, err)) < 0)
      return rc;
    if (store->closing)
      return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                            store->name);
    job = durable__job_new(store, JOB_QUERY, &durable__read_class);
    if (job == NULL || durable__job_principal(job, principal, err) < 0 ||
        (job->ns = strdup(ns)) == NULL) {
      durable__job_free(job);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  } else if (strncmp(query, "type:", 5) == 0 && query[5] != '\0') {
    if (store->closing)
      return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                            store->name);
    job = durable__job_new(store, JOB_TYPE, &durable__read_class);
    if (job == NULL || durable__job_principal(job, principal, err) < 0 ||
        (job->id = strdup(query + 5)) == NULL) {
      durable__job_free(job);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  } else {
    return durable__error(err, DURABLE_EINVAL,
                          "query '%s' is not understood (use namespace:NS, "
                          "path:P or type:T)",
                          query);
  }
  job->limit = limit;
  if (after && *after && (job->after = strdup(after)) == NULL) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return durable__job_start(job, cb, data);
}

int durable__store_read_items(durable_store_t *store, const char *principal,
                              const char *items_ns, int64_t after, size_t limit,
                              durable_done_cb cb, void *data,
                              durable_error_t *err) {
  if (limit == 0)
    limit = QUERY_LIMIT_DEFAULT;
  if (limit > QUERY_LIMIT_MAX)
    return durable__error(err, DURABLE_EINVAL, "read limit %zu is above %d",
                          limit, QUERY_LIMIT_MAX);
  if (after < 0)
    return durable__error(err, DURABLE_EINVAL, "sequence %lld is negative",
                          (long long)after);
  durable__job_t *job = NULL;
  int rc = durable__job_for_path(store, JOB_ITEMS, &durable__read_class,
                                 principal, items_ns, &job, err);
  if (rc < 0)
    return rc;
  free(job->ns);
  job->ns = job->path; /* the items namespace itself */
  job->path = NULL;
  job->num = after;
  job->limit = limit;
  return durable__job_start(job, cb, data);
}

int durable__store_last_item(durable_store_t *store, const char *principal,
                             const char *items_ns, durable_done_cb cb,
                             void *data, durable_error_t *err) {
  durable__job_t *job = NULL;
  int rc = durable__job_for_path(store, JOB_LAST, &durable__read_class,
                                 principal, items_ns, &job, err);
  if (rc < 0)
    return rc;
  free(job->ns);
  job->ns = job->path;
  job->path = NULL;
  return durable__job_start(job, cb, data);
}

int durable__store_alive(durable_store_t *store, const char *instance,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  uint64_t key;
  if (durable__instance_key(instance, &key) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "'%s' is not a store instance (HOST:PID:16hex)",
                          instance ? instance : "");
  /* a standby's locks are not the primary's */
  int rc = durable__store_refuse_readonly(store, "a liveness question", err);
  if (rc < 0)
    return rc;
  if (store->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing", store->name);
  durable__job_t *job =
      durable__job_new(store, JOB_ALIVE, &durable__read_class);
  if (job == NULL || (job->id = strdup(instance)) == NULL) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  job->num = (int64_t)key;
  return durable__job_start(job, cb, data);
}

int durable__store_access(durable_store_t *store, const char *principal,
                          const char *path, int modes, durable_done_cb cb,
                          void *data, durable_error_t *err) {
  if (modes < DURABLE_GRANT_READ || modes > DURABLE_GRANT_ALL)
    return durable__error(err, DURABLE_EINVAL, "access modes %d are not %s",
                          modes, "read, write or both");
  durable__job_t *job = NULL;
  int rc = durable__job_for_path(store, JOB_ACCESS, &durable__read_class,
                                 principal, path, &job, err);
  if (rc < 0)
    return rc;
  job->num = modes;
  return durable__job_start(job, cb, data);
}

/* The grants of `principal` (NULL: everyone's), a read like the others. */
int durable_store_grants(durable_store_t *store, const char *principal,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  int rc;
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if (store->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing", store->name);
  durable__job_t *job =
      durable__job_new(store, JOB_GRANTS, &durable__read_class);
  if (job == NULL || durable__job_principal(job, principal, err) < 0) {
    durable__job_free(job);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return durable__job_start(job, cb, data);
}

/*
 * write.c: what a write means, once for both databases.
 *
 * Every kind of write is the same three steps inside the writer's open
 * transaction: read the row for update, decide (create refuses a present
 * row, replace compares versions, a mutator computes the new content), then
 * insert, update or delete.  The backends only run those primitive
 * statements.  A job's writes are all-or-nothing: a job that fails after
 * changing a row makes store.c roll the group back and retry each job alone.
 *
 * Arguments are checked on the loop thread (durable__writes_prepare) so a
 * bad path or content is refused before anything is queued, with a message
 * naming the write; a mutator's output is checked on the writer thread.
 */
#include "job.h"
#include "store.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A concurrent insert of the same absent row (another process) is retried
 * from the read; the second read sees the row. */
#define RACE_RETRIES 3

static int check_json(const char *text, const char *path, durable_error_t *err) {
  json_error_t je;
  /* INT_AS_REAL: integers beyond 64 bits are still JSON; we only check
   * the text here and keep it as written. */
  json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
  if (j == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "content of '%s' is not JSON: %s at line %d column %d",
                          path, je.text, je.line, je.column);
  json_decref(j);
  return 0;
}

static void op_free(durable__write_op_t *op) {
  free(op->path);
  free(op->ns);
  free(op->id);
  free(op->node_type);
  free(op->content);
}

int durable__writes_prepare(durable__job_t *job, const durable_write_t *w,
                            size_t count, durable_error_t *err) {
  if (w == NULL || count == 0)
    return durable__error(err, DURABLE_EINVAL, "no writes given");
  job->writes = calloc(count, sizeof(*job->writes));
  if (job->writes == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  for (size_t i = 0; i < count; i++) {
    durable__write_op_t *op = &job->writes[i];
    job->nwrites = i + 1;
    int rc = durable_path_check(w[i].path, err);
    if (rc < 0) return rc;
    switch (w[i].kind) {
    case DURABLE_WRITE_PUT:
    case DURABLE_WRITE_CREATE:
    case DURABLE_WRITE_REPLACE: {
      const char *content = w[i].content ? w[i].content : "{}";
      if ((rc = check_json(content, w[i].path, err)) < 0) return rc;
      op->content = strdup(content);
      op->node_type = strdup(w[i].node_type ? w[i].node_type : "");
      if (op->content == NULL || op->node_type == NULL)
        return durable__error(err, DURABLE_ENOMEM, "out of memory");
      break;
    }
    case DURABLE_WRITE_DELETE:
      break;
    case DURABLE_WRITE_MUTATE:
      if (w[i].mutate == NULL)
        return durable__error(err, DURABLE_EINVAL,
                              "update of '%s' has no mutator", w[i].path);
      break;
    default:
      return durable__error(err, DURABLE_EINVAL,
                            "write %zu has an unknown kind %d", i + 1,
                            (int)w[i].kind);
    }
    op->kind = w[i].kind;
    op->expected_version = w[i].expected_version;
    op->mutate = w[i].mutate;
    op->mutate_arg = w[i].mutate_arg;
    if ((op->path = strdup(w[i].path)) == NULL ||
        durable__path_split(op->path, &op->ns, &op->id) < 0)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return 0;
}

void durable__writes_reset(durable__job_t *job) {
  for (size_t i = 0; i < job->nevents; i++) durable_node_free(job->events[i].node);
  free(job->events);
  job->events = NULL;
  job->nevents = 0;
  if (job->kind == JOB_WRITE) {
    durable_node_free(job->node);
    job->node = NULL;
  }
  durable__strv_free(&job->namespaces);
  job->status = 0;
  memset(&job->err, 0, sizeof job->err);
  /* the ops themselves stay: a retried job runs them again */
}

void durable__writes_free(durable__job_t *job) {
  for (size_t i = 0; i < job->nwrites; i++) op_free(&job->writes[i]);
  free(job->writes);
  job->writes = NULL;
  job->nwrites = 0;
}

static int record(durable__job_t *job, durable_change_kind_t kind,
                  const durable_node_t *node) {
  durable__event_t *ev =
      realloc(job->events, (job->nevents + 1) * sizeof(*job->events));
  if (ev == NULL) return DURABLE_ENOMEM;
  job->events = ev;
  durable_node_t *copy = durable_node_dup(node);
  if (copy == NULL) return DURABLE_ENOMEM;
  if (kind == DURABLE_CHANGE_REMOVED) {
    free(copy->content);
    copy->content = NULL;
  }
  job->events[job->nevents].kind = kind;
  job->events[job->nevents].node = copy;
  job->nevents++;
  for (size_t i = 0; i < job->namespaces.count; i++)
    if (strcmp(job->namespaces.items[i], node->ns) == 0) return 0;
  return durable__strv_push(&job->namespaces, node->ns);
}

/* Apply one write.  *wrote is set once a row changed. */
static int apply_one(const durable__backend_t *be, durable__conn_t *conn,
                     durable__job_t *job, durable__write_op_t *op, int *wrote) {
  durable_error_t *err = &job->err;
  char part[DURABLE_PARTITION_MAX + 1];
  char owner[DURABLE_PATH_MAX + 1];
  durable__place_t place = durable__path_place(op->path, part, sizeof part);
  durable_path_owner(op->path, owner, sizeof owner);

  for (int attempt = 0;; attempt++) {
    durable_node_t *cur = NULL;
    int rc = be->get(conn, place, op->ns, op->id, 1, &cur, err);
    if (rc < 0 && rc != DURABLE_ENOTFOUND) return rc;
    memset(err, 0, sizeof *err);

    char *content = NULL, *node_type = NULL;
    switch (op->kind) {
    case DURABLE_WRITE_CREATE:
      if (cur) {
        durable_node_free(cur);
        return durable__error(err, DURABLE_EEXIST,
                              "node '%s' already exists", op->path);
      }
      break;
    case DURABLE_WRITE_REPLACE:
      if (cur == NULL)
        return durable__error(err, DURABLE_ENOTFOUND, "no node at '%s'",
                              op->path);
      if (cur->version != op->expected_version) {
        int64_t v = cur->version;
        durable_node_free(cur);
        return durable__error(err, DURABLE_ECONFLICT,
                              "node '%s' is at version %lld, not %lld",
                              op->path, (long long)v,
                              (long long)op->expected_version);
      }
      break;
    case DURABLE_WRITE_DELETE:
      if (cur == NULL)
        return durable__error(err, DURABLE_ENOTFOUND, "no node at '%s'",
                              op->path);
      rc = be->remove(conn, place, op->ns, op->id, err);
      if (rc == 0) {
        *wrote = 1;
        rc = record(job, DURABLE_CHANGE_REMOVED, cur);
        durable_node_free(job->node);
        job->node = NULL;
      }
      durable_node_free(cur);
      return rc;
    case DURABLE_WRITE_MUTATE:
      rc = op->mutate(cur, &content, &node_type, op->mutate_arg);
      if (rc <= 0) {
        free(content);
        free(node_type);
        durable_node_free(cur);
        if (rc == 0) return 0; /* nothing to write */
        return durable__error(err, rc, "update of '%s' refused: %s", op->path,
                              durable_strerror(rc));
      }
      if (content == NULL ||
          (rc = check_json(content, op->path, err)) < 0) {
        free(content);
        free(node_type);
        durable_node_free(cur);
        return content ? rc : durable__error(err, DURABLE_EINVAL,
                                             "update of '%s' gave no content",
                                             op->path);
      }
      if (node_type == NULL)
        node_type = strdup(cur ? cur->node_type : "");
      break;
    default:
      break;
    }

    int64_t now = durable__now_ms();
    durable_node_t node = {
        .ns = op->ns,
        .id = op->id,
        .path = op->path,
        .node_type = node_type ? node_type : op->node_type,
        .content = content ? content : op->content,
        .main_node = owner,
        .created_at = cur ? cur->created_at : now,
        .updated_at = now,
    };
    if (node.node_type == NULL || node.content == NULL) {
      free(content);
      free(node_type);
      durable_node_free(cur);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
    int existed = cur != NULL;
    durable_node_free(cur);
    rc = existed ? be->update(conn, place, &node, err)
                 : be->insert(conn, place, &node, err);
    if (rc == DURABLE_EEXIST && !existed && attempt < RACE_RETRIES) {
      free(content);
      free(node_type);
      continue; /* another process inserted it meanwhile: read again */
    }
    if (rc == 0) {
      *wrote = 1;
      rc = record(job, existed ? DURABLE_CHANGE_UPDATED : DURABLE_CHANGE_ADDED,
                  &node);
      durable_node_free(job->node);
      job->node = rc == 0 ? durable_node_dup(&node) : NULL;
    }
    free(content);
    free(node_type);
    return rc;
  }
}

int durable__writes_apply(const durable__backend_t *be, durable__conn_t *conn,
                          durable__job_t *job, int *wrote) {
  *wrote = 0;
  for (size_t i = 0; i < job->nwrites; i++) {
    int rc = apply_one(be, conn, job, &job->writes[i], wrote);
    if (rc < 0) {
      if (job->err.message[0] == '\0')
        durable__error(&job->err, rc, "write of '%s' failed: %s",
                       job->writes[i].path, durable_strerror(rc));
      job->err.code = rc;
      job->status = rc;
      return rc;
    }
  }
  return 0;
}

/* ---- the public write calls ---------------------------------------------- */

int durable_store_write(durable_store_t *store, const durable_write_t *writes,
                        size_t count, durable_done_cb cb, void *data,
                        durable_error_t *err) {
  if (durable__store_closing(store))
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                          durable_store_name(store));
  durable__job_t *job = durable__job_new(store, JOB_WRITE);
  if (job == NULL) return durable__error(err, DURABLE_ENOMEM, "out of memory");
  int rc = durable__writes_prepare(job, writes, count, err);
  if (rc < 0) {
    durable__job_free(job);
    return rc;
  }
  job->cb = cb;
  job->data = data;
  durable__job_submit(job);
  return 0;
}

int durable_store_put(durable_store_t *store, const char *path,
                      const char *node_type, const char *content,
                      durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_PUT, .path = path,
                       .node_type = node_type, .content = content};
  return durable_store_write(store, &w, 1, cb, data, err);
}

int durable_store_create(durable_store_t *store, const char *path,
                         const char *node_type, const char *content,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_CREATE, .path = path,
                       .node_type = node_type, .content = content};
  return durable_store_write(store, &w, 1, cb, data, err);
}

int durable_store_delete(durable_store_t *store, const char *path,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_DELETE, .path = path};
  return durable_store_write(store, &w, 1, cb, data, err);
}

int durable_store_update(durable_store_t *store, const char *path,
                         durable_mutate_fn mutate, void *arg,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_MUTATE, .path = path,
                       .mutate = mutate, .mutate_arg = arg};
  return durable_store_write(store, &w, 1, cb, data, err);
}

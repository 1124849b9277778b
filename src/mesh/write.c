/*
 * write.c: what a write means, once for both databases.
 *
 * Each kind of write is decided here and turned into one primitive statement
 * of the backend, inside the writer's open transaction:
 *
 *   PUT      upsert                      (no read: the database decides)
 *   CREATE   insert, refused by a present row (no read either)
 *   REPLACE  update where the version is the expected one (no read)
 *   DELETE   read for update, remove
 *   MUTATE   read for update, run the mutator, update or insert
 *
 * Statements have deferred outcomes (backend.h), so a job runs in two steps:
 * durable__writes_apply() decides and queues (a read for update sees every
 * write queued before it), and durable__writes_settle(), once the outcomes
 * are known, turns them into the job's status, node and change events.  A
 * group of PUTs and CREATEs thus needs no round trip of its own before the
 * commit on PostgreSQL.
 *
 * A job's writes are all-or-nothing.  A job that fails after changing a row
 * makes the group roll back and each job run again alone; a job that could
 * end that way (a queued insert that may be refused, beside other writes)
 * is "risky": it is settled before the commit instead of after.
 *
 * Group commit is here too: the writer hands this file every write job
 * queued (up to the engine's bound), and they share one transaction --
 * rows locked in one order first, then every job decided and queued, then
 * one COMMIT -- retried whole after a lost link or a cancelled
 * transaction, then one job at a time.
 *
 * A job acting as a principal (durable_store_write_as) is checked first, in
 * the same transaction: its grants are read there and every write's owner
 * must be covered by a write grant (a mutator's by a read grant too),
 * else the job alone fails with EACCES before anything of it is queued.
 *
 * Arguments are checked on the loop thread (durable__writes_prepare) so a
 * bad path or content is refused before anything is queued, with a message
 * naming the write; a mutator's output (its content and its type) is
 * checked on the writer thread.
 */
#include "engine.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A concurrent insert of the same absent row (another process) is retried
 * from the read; the second read sees the row. */
#define RACE_RETRIES 3

static int check_json(const char *text, const char *path,
                      durable_error_t *err) {
  json_error_t je;
  if (durable__json_check(text, &je) < 0)
    return durable__error(
        err, DURABLE_EINVAL,
        "content of '%s' is not JSON: %s at line %d column %d", path, je.text,
        je.line, je.column);
  return 0;
}

/* A written type is a NodeType name or none (NULL, ""). */
static int check_type(const char *node_type, const char *path,
                      durable_error_t *err) {
  if (node_type == NULL || *node_type == '\0')
    return 0;
  durable_error_t why = {0};
  if (durable_node_type_check(node_type, &why) < 0)
    return durable__error(err, DURABLE_EINVAL, "write of '%s': %s", path,
                          why.message);
  return 0;
}

static void op_free(durable__write_op_t *op) {
  free(op->path);
  free(op->ns);
  free(op->id);
  free(op->owner);
  free(op->node_type);
  free(op->content);
}

/* The checks of write `i` that need no database: its path, its kind, and
 * the content and type it writes. */
static int check_write(const durable_write_t *w, size_t i,
                       durable_error_t *err) {
  int rc = durable_path_check(w->path, err);
  if (rc < 0)
    return rc;
  switch (w->kind) {
  case DURABLE_WRITE_PUT:
  case DURABLE_WRITE_CREATE:
  case DURABLE_WRITE_REPLACE:
    if ((rc = check_json(w->content ? w->content : "{}", w->path, err)) < 0)
      return rc;
    return check_type(w->node_type, w->path, err);
  case DURABLE_WRITE_DELETE:
    return 0;
  case DURABLE_WRITE_MUTATE:
    if (w->mutate == NULL)
      return durable__error(err, DURABLE_EINVAL,
                            "update of '%s' has no mutator", w->path);
    return 0;
  }
  return durable__error(err, DURABLE_EINVAL, "write %zu has an unknown kind %d",
                        i + 1, (int)w->kind);
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
    int rc = check_write(&w[i], i, err);
    if (rc < 0)
      return rc;
    if (w[i].kind == DURABLE_WRITE_PUT || w[i].kind == DURABLE_WRITE_CREATE ||
        w[i].kind == DURABLE_WRITE_REPLACE) {
      op->content = strdup(w[i].content ? w[i].content : "{}");
      op->node_type = strdup(w[i].node_type ? w[i].node_type : "");
      if (op->content == NULL || op->node_type == NULL)
        return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
    op->kind = w[i].kind;
    op->expected_version = w[i].expected_version;
    op->mutate = w[i].mutate;
    op->mutate_arg = w[i].mutate_arg;
    if ((op->path = strdup(w[i].path)) == NULL ||
        durable__path_split(op->path, &op->ns, &op->id) < 0 ||
        (op->owner = strndup(op->path, durable__owner_len(op->path))) == NULL)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return 0;
}

/* What a run decided for `op`, forgotten before a retry. */
static void op_forget(durable__write_op_t *op) {
  free(op->new_node_type);
  free(op->new_content);
  durable_node_free(op->old);
  op->new_node_type = op->new_content = NULL;
  op->old = NULL;
  op->action = ACT_NONE;
  memset(&op->out, 0, sizeof op->out);
}

void durable__writes_reset(durable__job_t *job) {
  for (size_t i = 0; i < job->nevents; i++)
    durable_node_free(job->events[i].node);
  free(job->events);
  job->events = NULL;
  job->nevents = 0;
  if (job->kind == JOB_WRITE) {
    durable_node_free(job->node);
    job->node = NULL;
    for (size_t i = 0; i < job->nwrites; i++)
      op_forget(&job->writes[i]);
  }
  job->settled = 0;
  job->unreported = 0;
  job->status = 0;
  job->failed_write = 0;
  memset(&job->err, 0, sizeof job->err);
  /* the requests themselves stay: a retried job runs them again */
}

void durable__writes_free(durable__job_t *job) {
  for (size_t i = 0; i < job->nwrites; i++) {
    op_forget(&job->writes[i]);
    op_free(&job->writes[i]);
  }
  free(job->writes);
  job->writes = NULL;
  job->nwrites = 0;
}

/* ---- step 1: decide and queue ---------------------------------------------
 */

/* Why the database refused `op` with outcome `code`, into `err`; the code
 * to report. */
static int refusal(const durable__write_op_t *op, int code,
                   durable_error_t *err) {
  if (code == DURABLE_EEXIST)
    return durable__error(err, code, "node '%s' already exists", op->path);
  if (code == DURABLE_ENOTFOUND)
    return durable__error(err, code, "no node at '%s'", op->path);
  if (code == DURABLE_ECONFLICT && op->kind == DURABLE_WRITE_REPLACE)
    return durable__error(err, code, "node '%s' is not at version %lld",
                          op->path, (long long)op->expected_version);
  if (code == DURABLE__PENDING) /* a backend broke its promise */
    return durable__error(err, DURABLE_EIO,
                          "write of '%s': its outcome never came", op->path);
  return durable__error(err, code, "write of '%s' failed: %s", op->path,
                        durable_strerror(code));
}

/* Queue `action` for `node`.  Returns the backend's code (a failure of the
 * transaction). */
static int queue(const durable__backend_t *be, durable__conn_t *conn,
                 durable__locked_t *locked, durable__place_t place,
                 durable__write_op_t *op, durable__action_t action,
                 const durable_node_t *node, durable_error_t *err) {
  durable__locked_row_t *row =
      durable__locked_find(locked, place, op->ns, op->id);
  if (row)
    row->spent = 1; /* what its lock read is not the row any more */
  op->action = action;
  op->out.status = DURABLE__PENDING;
  int rc;
  switch (action) {
  case ACT_INSERT:
    rc = be->insert(conn, place, node, &op->out, err);
    break;
  case ACT_UPSERT:
    rc = be->upsert(conn, place, node, &op->out, err);
    break;
  case ACT_UPDATE:
    rc = be->update(conn, place, node, &op->out, err);
    break;
  case ACT_REPLACE:
    rc = be->replace(conn, place, node, op->expected_version, &op->out, err);
    break;
  default:
    rc = be->remove(conn, place, op->ns, op->id, &op->out, err);
    break;
  }
  if (rc < 0)
    op->action = ACT_NONE;
  return rc;
}

/* The row `op` acts on, locked until the transaction ends: what the
 * group's lock read of it (job.h), while no write of it was queued since
 * and it was there, else read now.  DURABLE_ENOTFOUND when absent. */
static int read_for_update(const durable__backend_t *be, durable__conn_t *conn,
                           durable__locked_t *locked, durable__place_t place,
                           const durable__write_op_t *op, durable_node_t **cur,
                           durable_error_t *err) {
  durable__locked_row_t *row =
      durable__locked_find(locked, place, op->ns, op->id);
  if (row && !row->spent) {
    int rc = row->got.status == DURABLE__PENDING ? be->flush(conn, err) : 0;
    if (rc < 0)
      return rc;
    /* a row absent at the lock took no lock: another process may have
     * made it since, so that answer is asked again */
    if (row->got.status == 0) {
      *cur = durable_node_dup(row->got.node);
      return *cur ? 0 : durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
    /* the lock's read failed (the flush said so), or never answered */
  }
  return be->get(conn, place, op->ns, op->id, 1, cur, err);
}

/* Decide one write and queue its statement.  Returns 0 (queued, or nothing
 * to write) or a failure of the transaction; a refusal of the write itself
 * sets *refused and fills `job->err`. */
static int apply_one(const durable__backend_t *be, durable__conn_t *conn,
                     durable__locked_t *locked, durable__job_t *job,
                     durable__write_op_t *op, int *refused) {
  durable_error_t *err = &job->err;
  char part[DURABLE_PARTITION_MAX + 1];
  durable__place_t place = durable__path_place(op->path, part, sizeof part);
  int64_t now = durable__now_ms();
  durable_node_t node = {
      .ns = op->ns,
      .id = op->id,
      .path = op->path,
      .node_type = op->node_type,
      .content = op->content,
      .main_node = op->owner,
      .created_at = now,
      .updated_at = now,
  };
  op->created_at = op->updated_at = now;

  /* Writes that need no read: the database decides. */
  if (op->kind == DURABLE_WRITE_PUT)
    return queue(be, conn, locked, place, op, ACT_UPSERT, &node, err);
  if (op->kind == DURABLE_WRITE_CREATE) {
    op->out.strict = job->strict;
    return queue(be, conn, locked, place, op, ACT_INSERT, &node, err);
  }
  /* the database compares the version: a compare-and-set without a read
   * before it (a stream hub's write of its state, every append) */
  if (op->kind == DURABLE_WRITE_REPLACE) {
    op->out.strict = job->strict;
    int rc = queue(be, conn, locked, place, op, ACT_REPLACE, &node, err);
    if (rc < 0 || op->out.status == DURABLE__PENDING || op->out.status == 0)
      return rc;
    /* the database answered at once (SQLite) and said no: the job stops
     * here, before its other writes are run only to be undone */
    op->action = ACT_NONE; /* it changed nothing */
    *refused = 1;
    return refusal(op, op->out.status, err);
  }

  for (int attempt = 0;; attempt++) {
    durable_node_t *cur = NULL;
    int rc = read_for_update(be, conn, locked, place, op, &cur, err);
    if (rc < 0 && rc != DURABLE_ENOTFOUND)
      return rc;
    memset(err, 0, sizeof *err);

    switch (op->kind) {
    case DURABLE_WRITE_DELETE:
      if (cur == NULL) {
        *refused = 1;
        return durable__error(err, DURABLE_ENOTFOUND, "no node at '%s'",
                              op->path);
      }
      op->old = cur; /* the removal's event */
      return queue(be, conn, locked, place, op, ACT_REMOVE, NULL, err);
    case DURABLE_WRITE_MUTATE: {
      char *content = NULL, *node_type = NULL;
      rc = op->mutate(cur, &content, &node_type, op->mutate_arg);
      if (rc <= 0 || content == NULL ||
          check_json(content, op->path, err) < 0 ||
          check_type(node_type, op->path, err) < 0) {
        free(content);
        free(node_type);
        durable_node_free(cur);
        if (rc == 0)
          return 0; /* nothing to write */
        *refused = 1;
        if (rc < 0)
          return durable__error(err, rc, "update of '%s' refused: %s", op->path,
                                durable_strerror(rc));
        if (content == NULL)
          return durable__error(err, DURABLE_EINVAL,
                                "update of '%s' gave no content", op->path);
        return err->code; /* not JSON or a bad type: the check said so */
      }
      if (node_type == NULL)
        node_type = strdup(cur ? cur->node_type : "");
      op->new_content = content;
      op->new_node_type = node_type;
      if (node_type == NULL) {
        durable_node_free(cur);
        return durable__error(err, DURABLE_ENOMEM, "out of memory");
      }
      node.content = content;
      node.node_type = node_type;
      break;
    }
    default:
      durable_node_free(cur);
      return durable__error(err, DURABLE_EINVAL, "unknown write kind %d",
                            (int)op->kind);
    }

    if (cur != NULL) {
      node.created_at = op->created_at = cur->created_at;
      durable_node_free(cur);
      return queue(be, conn, locked, place, op, ACT_UPDATE, &node, err);
    }
    /* Absent (a mutator creating the node): insert, and learn at once
     * whether another process inserted it since the read. */
    rc = queue(be, conn, locked, place, op, ACT_INSERT, &node, err);
    if (rc == 0)
      rc = be->flush(conn, err);
    if (rc < 0)
      return rc;
    if (op->out.status == DURABLE_EEXIST && attempt < RACE_RETRIES) {
      op_forget(op);
      continue; /* read again: now it is there */
    }
    return 0;
  }
}

/* A principal's writes: every path's owner must be covered by a write grant
 * (a mutator's also by a read grant: it sees the node), decided from the
 * grants as this transaction sees them, before anything of the job is
 * queued, so a denied job writes nothing.  Returns 0 (allowed, or refused:
 * job->status says) or a failure of the transaction. */
static int check_access(const durable__backend_t *be, durable__conn_t *conn,
                        durable__job_t *job) {
  durable__grants_t grants = {0};
  int rc = durable__access_load(be, conn, job->principal, &grants, &job->err);
  for (size_t i = 0; rc == 0 && i < job->nwrites; i++) {
    const durable__write_op_t *op = &job->writes[i];
    int modes = DURABLE_GRANT_WRITE;
    if (op->kind == DURABLE_WRITE_MUTATE)
      modes |= DURABLE_GRANT_READ;
    int missing = durable__access_missing(&grants, op->owner, modes);
    if (missing) {
      job->status =
          durable__access_denied(&job->err, job->principal, missing, op->path);
      break;
    }
  }
  durable__grants_free(&grants);
  return rc;
}

/* The first write's mutator decided (under its row's lock): the other
 * writes are made anew from that decision (durable__store_write_remade),
 * unless the maker says they stand as they are (1).  Each must stay of the
 * same owner, so the access check made before holds.  On failure `*at` is
 * the write that could not be made. */
static int remake_rest(durable__job_t *job, int *refused, size_t *at) {
  const durable__write_op_t *first = &job->writes[0];
  for (size_t i = 1; i < job->nwrites; i++) {
    durable__write_op_t *op = &job->writes[i];
    char *path = NULL, *content = NULL, *ns = NULL, *id = NULL;
    durable_error_t why = {0};
    int rc = job->remake(first->mutate_arg, i, &path, &content);
    if (rc == 1)
      return 0; /* nothing changed since they were made */
    if (rc == 0 && (path == NULL || content == NULL))
      rc = DURABLE_ENOMEM;
    if (rc == 0 && (durable_path_check(path, &why) < 0 ||
                    durable__owner_len(path) != strlen(op->owner) ||
                    strncmp(path, op->owner, strlen(op->owner)) != 0))
      rc = DURABLE_EINVAL;
    if (rc == 0 && durable__path_split(path, &ns, &id) < 0)
      rc = DURABLE_ENOMEM;
    if (rc < 0) {
      free(path);
      free(content);
      free(ns);
      free(id);
      *refused = 1;
      *at = i;
      return durable__error(
          &job->err, rc, "write %zu could not be made: %s", i + 1,
          why.message[0] ? why.message : durable_strerror(rc));
    }
    free(op->path);
    free(op->ns);
    free(op->id);
    free(op->content);
    op->path = path;
    op->ns = ns;
    op->id = id;
    op->content = content;
  }
  return 0;
}

int durable__writes_apply(const durable__backend_t *be, durable__conn_t *conn,
                          durable__job_t *job, durable__locked_t *locked) {
  if (job->principal != NULL) {
    int rc = check_access(be, conn, job);
    if (rc < 0) {
      job->status = rc;
      return rc;
    }
    if (job->status < 0)
      return 0; /* denied: the job fails alone, nothing queued */
  }
  for (size_t i = 0; i < job->nwrites; i++) {
    int refused = 0;
    int rc = apply_one(be, conn, locked, job, &job->writes[i], &refused);
    size_t at = i;
    if (rc == 0 && i == 0 && job->remake && job->writes[0].action != ACT_NONE)
      rc = remake_rest(job, &refused, &at);
    if (rc < 0) {
      if (job->err.message[0] == '\0')
        durable__error(&job->err, rc, "write of '%s' failed: %s",
                       job->writes[at].path, durable_strerror(rc));
      job->err.code = rc;
      job->status = rc;
      job->failed_write = at + 1;
      /* a refusal fails the job alone; anything else the transaction */
      return refused ? 0 : rc;
    }
  }
  return 0;
}

int durable__writes_risky(const durable__job_t *job) {
  size_t actions = 0;
  int may_fail = job->status < 0;
  for (size_t i = 0; i < job->nwrites; i++) {
    const durable__write_op_t *op = &job->writes[i];
    if (op->action == ACT_NONE)
      continue;
    actions++;
    /* only an insert or a replace is ever refused by the database: an
     * upsert never is, and an update or a removal acts on the row read for
     * update; a strict one's refusal undoes the transaction itself */
    if (op->out.status < 0 ||
        (op->out.status == DURABLE__PENDING && !op->out.strict &&
         (op->action == ACT_INSERT || op->action == ACT_REPLACE)))
      may_fail = 1;
  }
  return may_fail && (actions > 1 || (actions == 1 && job->status < 0));
}

int durable__writes_namespaces(const durable__job_t *job,
                               durable__strv_t *out) {
  if (job->status < 0)
    return 0;
  const char *last = NULL;
  for (size_t i = 0; i < job->nwrites; i++) {
    const durable__write_op_t *op = &job->writes[i];
    if (op->action == ACT_NONE || op->out.status < 0)
      continue;
    /* writes of one job mostly share a namespace: check the last first */
    if (last != NULL && strcmp(last, op->ns) == 0)
      continue;
    int seen = 0;
    for (size_t j = out->count; j > 0 && !seen; j--)
      seen = strcmp(out->items[j - 1], op->ns) == 0;
    if (!seen && durable__strv_push(out, op->ns) < 0)
      return DURABLE_ENOMEM;
    last = op->ns;
  }
  return 0;
}

/* ---- step 2: settle --------------------------------------------------------
 */

static int record(durable__job_t *job, durable_change_kind_t kind,
                  const durable_node_t *node) {
  durable_node_t *copy = durable_node_dup(node);
  if (copy == NULL)
    return DURABLE_ENOMEM;
  if (kind == DURABLE_CHANGE_REMOVED)
    copy->content = NULL; /* inside the copy's block: nothing to free */
  job->events[job->nevents].kind = kind;
  job->events[job->nevents].node = copy;
  job->nevents++;
  return 0;
}

int durable__writes_settle(durable__job_t *job) {
  job->settled = 1;
  /* The first write refused by the database, if any, comes before a
   * refusal decided in step 1 (which stopped the job there). */
  int changed = 0;
  durable__write_op_t *failed = NULL;
  for (size_t i = 0; i < job->nwrites; i++) {
    durable__write_op_t *op = &job->writes[i];
    if (op->action == ACT_NONE)
      continue;
    if (op->out.status == 0) {
      changed = 1;
    } else if (failed == NULL) {
      failed = op;
      job->failed_write = i + 1;
    }
  }
  if (failed != NULL)
    job->status = refusal(failed, failed->out.status, &job->err);
  if (job->status < 0)
    return changed;

  job->events = calloc(job->nwrites, sizeof(*job->events));
  if (job->events == NULL)
    goto nomem;
  /* result->node: the last write's node (none after a removal); a mutator
   * that wrote nothing leaves it as it was */
  size_t last = job->nwrites;
  for (size_t i = job->nwrites; i > 0 && last == job->nwrites; i--)
    if (job->writes[i - 1].action != ACT_NONE)
      last = i - 1;
  for (size_t i = 0; i < job->nwrites; i++) {
    durable__write_op_t *op = &job->writes[i];
    if (op->action == ACT_NONE)
      continue; /* a mutator that wrote nothing */
    if (op->action == ACT_REMOVE) {
      if (record(job, DURABLE_CHANGE_REMOVED, op->old) < 0)
        goto nomem;
      continue;
    }
    durable_node_t node = {
        .ns = op->ns,
        .id = op->id,
        .path = op->path,
        .node_type = op->new_node_type ? op->new_node_type : op->node_type,
        .content = op->new_content ? op->new_content : op->content,
        .main_node = op->owner,
        .version = op->out.version,
        .created_at = op->out.created_at,
        .updated_at = op->updated_at,
    };
    int added = op->action == ACT_INSERT ||
                (op->action == ACT_UPSERT && op->out.inserted);
    if (record(job, added ? DURABLE_CHANGE_ADDED : DURABLE_CHANGE_UPDATED,
               &node) < 0 ||
        (i == last && (job->node = durable_node_dup(&node)) == NULL))
      goto nomem;
  }
  return 0;

nomem:
  /* The rows are written (or about to be): only the report is lost. */
  job->unreported = 1;
  job->status =
      durable__error(&job->err, DURABLE_ENOMEM, "out of memory after writing");
  return 0;
}

/* ---- step 0 and 3: the group's transaction -------------------------------
 */

static int locked_order(const durable__locked_row_t *x, const char *part,
                        const char *table, const char *ns, const char *id) {
  int c = strcmp(x->part, part);
  if (c == 0)
    c = strcmp(x->table, table);
  if (c == 0)
    c = strcmp(x->ns, ns);
  return c ? c : strcmp(x->id, id);
}

static int row_order(const void *a, const void *b) {
  const durable__locked_row_t *y = b;
  return locked_order(a, y->part, y->table, y->ns, y->id);
}

durable__locked_row_t *durable__locked_find(durable__locked_t *locked,
                                            durable__place_t place,
                                            const char *ns, const char *id) {
  size_t lo = 0, hi = locked ? locked->count : 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c =
        locked_order(&locked->rows[mid], place.partition, place.table, ns, id);
    if (c == 0)
      return &locked->rows[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

static void locked_free(durable__locked_t *locked) {
  for (size_t i = 0; i < locked->count; i++) {
    durable_node_free(locked->rows[i].got.node);
    free(locked->rows[i].ns);
    free(locked->rows[i].id);
  }
  free(locked->rows);
  *locked = (durable__locked_t){0};
}

/* Lock the existing rows the group may update, in one global order, before
 * anything else -- before its inserts too.  Two transactions that update the
 * same rows in other orders (one process's appends, another's
 * acknowledgements) would otherwise deadlock now and then, and so would two
 * producers' appends to the same streams: each inserts the item rows of one
 * stream, then waits on the other's insert of the next stream's same
 * sequence, while holding what the other waits for.  The database gives up
 * on one of them only after its deadlock_timeout (1 s).  With the stream
 * rows locked first, the second producer waits for the first to commit,
 * then finds its sequence taken and decides again.  The locks are queued
 * with the statements that follow (no round trip of their own), and what
 * they read serves the group's reads for update (job.h).  A group of a
 * single write needs none. */
static int lock_in_order(const durable__backend_t *be, durable__conn_t *conn,
                         durable__job_t **jobs, size_t n,
                         durable__locked_t *locked, durable_error_t *err) {
  if (be->lock == NULL)
    return 0;
  size_t count = 0, total = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < jobs[i]->nwrites; k++) {
      count += jobs[i]->writes[k].kind != DURABLE_WRITE_CREATE;
      total++;
    }
  if (count == 0 || total < 2)
    return 0;
  durable__locked_row_t *rows = calloc(count, sizeof(*rows));
  if (rows == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t k = 0; k < jobs[i]->nwrites; k++) {
      const durable__write_op_t *op = &jobs[i]->writes[k];
      if (op->kind == DURABLE_WRITE_CREATE)
        continue;
      /* copies: a remade write replaces its strings (write.c) */
      rows[m].ns = strdup(op->ns);
      rows[m].id = strdup(op->id);
      if (rows[m].ns == NULL || rows[m].id == NULL) {
        locked->rows = rows;
        locked->count = m + 1;
        return durable__error(err, DURABLE_ENOMEM, "out of memory");
      }
      rows[m].table =
          durable__path_place(op->path, rows[m].part, sizeof rows[m].part)
              .table;
      m++;
    }
  qsort(rows, m, sizeof(*rows), row_order);
  size_t kept = 0; /* each row once */
  for (size_t i = 0; i < m; i++) {
    if (kept == 0 || row_order(&rows[kept - 1], &rows[i]) != 0) {
      rows[kept++] = rows[i];
    } else {
      free(rows[i].ns);
      free(rows[i].id);
    }
  }
  locked->rows = rows;
  locked->count = kept;
  int rc = 0;
  for (size_t i = 0; i < kept && rc == 0; i++) {
    durable__locked_row_t *r = &rows[i];
    r->got.status = DURABLE__PENDING;
    rc = be->lock(conn,
                  (durable__place_t){.partition = r->part, .table = r->table},
                  r->ns, r->id, &r->got, err);
  }
  return rc;
}

/* Commit `jobs` (a list of `n` write jobs) in one transaction.  Returns 0
 * when the group committed (some jobs may have failed alone, having changed
 * nothing), or a negative code when the whole group must be retried one job
 * at a time, or DURABLE__STRICT_REFUSED (nothing committed): run it again
 * without `strict`.
 *
 *   BEGIN; decide and queue every job's writes (write.c)
 *   [flush; settle the risky jobs: one that failed after a write -> undo]
 *   changed(namespaces); COMMIT        (PostgreSQL: one round trip for all)
 *   settle the others from the outcomes the commit brought back
 *
 * With `strict` (and a backend with strict_writes), the inserts and
 * replaces of jobs of several writes are queued strict: the usual job (a
 * stream's state and its items) is then not risky, and the group costs one
 * round trip.  A refusal is rare (another process's write, a row made by
 * hand); it costs the aborted try. */
static int commit_locked(durable__worker_t *w, durable__job_t **jobs, size_t n,
                         int strict, durable__locked_t *locked,
                         durable_error_t *err) {
  durable_store_t *store = w->store;
  const durable__backend_t *be = store->be;
  int rc = durable__worker_connect(w, err);
  if (rc < 0)
    return rc;
  for (size_t i = 0; i < n; i++)
    jobs[i]->strict = strict && be->strict_writes && jobs[i]->nwrites > 1;
  if ((rc = be->begin(w->conn, err)) < 0 ||
      (rc = lock_in_order(be, w->conn, jobs, n, locked, err)) < 0)
    goto rollback;
  int risky = 0;
  for (size_t i = 0; i < n; i++) {
    rc = durable__writes_apply(be, w->conn, jobs[i], locked);
    if (rc < 0) {
      *err = jobs[i]->err;
      goto rollback;
    }
    risky |= durable__writes_risky(jobs[i]);
  }
  if (risky) {
    /* Outcomes first, so that a job that failed half-way is undone. */
    if ((rc = be->flush(w->conn, err)) < 0)
      goto rollback;
    for (size_t i = 0; i < n; i++) {
      if (durable__writes_settle(jobs[i])) {
        *err = jobs[i]->err;
        rc = jobs[i]->status;
        goto rollback;
      }
    }
  }
  durable__strv_t namespaces = {0};
  for (size_t i = 0; i < n && rc == 0; i++)
    if (durable__writes_namespaces(jobs[i], &namespaces) < 0)
      rc = durable__error(err, DURABLE_ENOMEM, "out of memory");
  int64_t commit_id = 0;
  if (rc == 0 && namespaces.count > 0)
    rc = be->changed(w->conn, &namespaces, store->instance, &commit_id, err);
  durable__strv_free(&namespaces);
  if (rc < 0)
    goto rollback;
  int unknown = 0;
  if ((rc = be->commit(w->conn, &unknown, err)) < 0) {
    if (!unknown || rc == DURABLE__STRICT_REFUSED) { /* as a rollback */
      for (size_t i = 0; i < n; i++)
        durable__writes_reset(jobs[i]);
      if (rc == DURABLE_EUNAVAIL)
        durable__worker_disconnect(w);
      return rc;
    }
    /* The commit's outcome is unknown: it may have landed.  Say so rather
     * than retry a write that might then be applied twice. */
    for (size_t i = 0; i < n; i++) {
      if (jobs[i]->status < 0)
        continue;
      durable__writes_reset(jobs[i]);
      jobs[i]->unreported = 1;
      durable__error(&jobs[i]->err, rc,
                     "%s: the commit did not complete (%s); the write may or "
                     "may not have been saved",
                     store->name, err->message);
      jobs[i]->status = rc;
    }
    if (rc == DURABLE_EUNAVAIL)
      durable__worker_disconnect(w);
    return 0;
  }
  /* No job left can have failed after a write: it would have been risky. */
  for (size_t i = 0; i < n; i++)
    if (!jobs[i]->settled)
      durable__writes_settle(jobs[i]);
  durable__store_own_commit(store, commit_id);
  return 0;

rollback:
  be->rollback(w->conn);
  for (size_t i = 0; i < n; i++)
    durable__writes_reset(jobs[i]);
  if (rc == DURABLE_EUNAVAIL)
    durable__worker_disconnect(w);
  return rc;
}

static int commit_group(durable__worker_t *w, durable__job_t **jobs, size_t n,
                        durable_error_t *err) {
  int rc = DURABLE__STRICT_REFUSED;
  for (int strict = 1; rc == DURABLE__STRICT_REFUSED && strict >= 0; strict--) {
    durable__locked_t locked = {0};
    rc = commit_locked(w, jobs, n, strict, &locked, err);
    locked_free(&locked); /* every answer is in, or the queue was dropped */
  }
  return rc;
}

/* A transaction the database cancelled: a deadlock lock_in_order cannot
 * prevent (two processes inserting the same new rows in other orders), a
 * serialization failure.  Running it again is safe (nothing of it was
 * committed) and almost always enough. */
#define CANCELED_RETRIES 5

static void run_writes(durable__worker_t *w, durable__job_t **jobs, size_t n) {
  durable_error_t err = {0};
  int rc = commit_group(w, jobs, n, &err);
  if (rc == DURABLE_EUNAVAIL) /* nothing committed: one try on a new link */
    rc = commit_group(w, jobs, n, &err);
  for (int i = 0; rc == DURABLE_ECANCELED && i < CANCELED_RETRIES; i++)
    rc = commit_group(w, jobs, n, &err);
  if (rc < 0 && n > 1) {
    /* Retry alone so that one failing job fails only itself. */
    for (size_t i = 0; i < n; i++) {
      durable_error_t e = {0};
      int r = commit_group(w, &jobs[i], 1, &e);
      for (int k = 0; r == DURABLE_ECANCELED && k < CANCELED_RETRIES; k++)
        r = commit_group(w, &jobs[i], 1, &e);
      if (r < 0) {
        durable__writes_reset(jobs[i]);
        durable__job_fail(jobs[i], &e);
      }
    }
  } else if (rc < 0) {
    durable__writes_reset(jobs[0]);
    durable__job_fail(jobs[0], &err);
  }
}

static void write_delivered(durable__job_t *job) {
  if (job->status == 0) {
    durable__feed_dispatch(job->store, job);
  } else if (job->unreported) {
    /* written, or maybe, with no change to report (no memory for it, or no
     * answer from the commit): the watches of what it wrote read again, as
     * after another process's commit, so that a reader waiting for the
     * item it appended is not left waiting for a signal that never comes */
    for (size_t i = 0; i < job->nwrites; i++) {
      const char *ns = job->writes[i].ns;
      size_t k = 0;
      while (k < i && strcmp(job->writes[k].ns, ns) != 0)
        k++;
      /* each namespace once, without allocating: durable__writes_namespaces
       * builds a list (and skips a failed job's writes), and this runs when
       * memory has run out */
      if (k == i)
        durable__store_changed_elsewhere(job->store, ns);
    }
  }
}

static void write_free(durable__job_t *job) {
  durable__writes_reset(job);
  durable__writes_free(job);
}

const durable__job_class_t durable__write_class = {.on_writer = 1,
                                                   .groups = 1,
                                                   .run = run_writes,
                                                   .delivered = write_delivered,
                                                   .free = write_free};

/* ---- the public write calls ---------------------------------------------- */

/* ---- write sets: writes kept past the call that gave them ------------- */

static size_t str_size(const char *s) {
  return s ? strlen(s) + 1 : 0;
}

static char *str_put(char **at, const char *s) {
  if (s == NULL)
    return NULL;
  size_t n = strlen(s) + 1;
  char *out = memcpy(*at, s, n);
  *at += n;
  return out;
}

durable__write_set_t *durable__write_set_new(const durable_write_t *w,
                                             size_t count,
                                             durable_error_t *err) {
  if (w == NULL || count == 0) {
    durable__error(err, DURABLE_EINVAL, "no writes given");
    return NULL;
  }
  size_t bytes = sizeof(durable__write_set_t) + count * sizeof(*w);
  for (size_t i = 0; i < count; i++) {
    if (check_write(&w[i], i, err) < 0)
      return NULL;
    if (w[i].kind == DURABLE_WRITE_MUTATE) {
      /* its mutator and argument would have to outlive the handler */
      durable__error(err, DURABLE_EINVAL,
                     "write of '%s': a commit takes put, create, replace and "
                     "delete writes, not a mutator (read the node, then "
                     "replace it at the version read)",
                     w[i].path);
      return NULL;
    }
    bytes +=
        str_size(w[i].path) + str_size(w[i].node_type) + str_size(w[i].content);
  }
  /* one allocation: the array, then its strings */
  durable__write_set_t *set = malloc(bytes);
  if (set == NULL) {
    durable__error(err, DURABLE_ENOMEM, "out of memory");
    return NULL;
  }
  set->count = count;
  char *at = (char *)(set->writes + count);
  for (size_t i = 0; i < count; i++) {
    set->writes[i] = w[i];
    set->writes[i].path = str_put(&at, w[i].path);
    set->writes[i].node_type = str_put(&at, w[i].node_type);
    set->writes[i].content = str_put(&at, w[i].content);
  }
  return set;
}

const char *durable_write_kind_name(durable_write_kind_t kind) {
  switch (kind) {
  case DURABLE_WRITE_PUT:
    return "put";
  case DURABLE_WRITE_CREATE:
    return "create";
  case DURABLE_WRITE_REPLACE:
    return "replace";
  case DURABLE_WRITE_DELETE:
    return "delete";
  case DURABLE_WRITE_MUTATE:
    return "mutate";
  }
  return "unknown";
}

int durable_store_write(durable_store_t *store, const durable_write_t *writes,
                        size_t count, durable_done_cb cb, void *data,
                        durable_error_t *err) {
  return durable_store_write_as(store, NULL, writes, count, cb, data, err);
}

int durable_store_write_as(durable_store_t *store, const char *principal,
                           const durable_write_t *writes, size_t count,
                           durable_done_cb cb, void *data,
                           durable_error_t *err) {
  return durable__store_write_remade(store, principal, writes, count, NULL, cb,
                                     data, err);
}

int durable__store_write_remade(durable_store_t *store, const char *principal,
                                const durable_write_t *writes, size_t count,
                                durable__remake_cb remake, durable_done_cb cb,
                                void *data, durable_error_t *err) {
  int rc;
  if (remake && (count < 2 || writes[0].kind != DURABLE_WRITE_MUTATE))
    return durable__error(err, DURABLE_EINVAL,
                          "writes remade by a mutator need it first");
  if (principal && (rc = durable_principal_check(principal, err)) < 0)
    return rc;
  if ((rc = durable__store_refuse_readonly(store, "write", err)) < 0)
    return rc;
  if (durable__store_closing(store))
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                          durable_store_name(store));
  durable__job_t *job =
      durable__job_new(store, JOB_WRITE, &durable__write_class);
  if (job == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  if ((rc = durable__job_principal(job, principal, err)) < 0) {
    durable__job_free(job);
    return rc;
  }
  rc = durable__writes_prepare(job, writes, count, err);
  if (rc < 0) {
    durable__job_free(job);
    return rc;
  }
  job->remake = remake;
  job->cb = cb;
  job->data = data;
  durable__job_submit(job);
  return 0;
}

int durable_store_put(durable_store_t *store, const char *path,
                      const char *node_type, const char *content,
                      durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_PUT,
                       .path = path,
                       .node_type = node_type,
                       .content = content};
  return durable_store_write(store, &w, 1, cb, data, err);
}

int durable_store_create(durable_store_t *store, const char *path,
                         const char *node_type, const char *content,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_CREATE,
                       .path = path,
                       .node_type = node_type,
                       .content = content};
  return durable_store_write(store, &w, 1, cb, data, err);
}

int durable_store_delete(durable_store_t *store, const char *path,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_DELETE, .path = path};
  return durable_store_write(store, &w, 1, cb, data, err);
}

int durable_store_update(durable_store_t *store, const char *path,
                         durable_mutate_cb mutate, void *arg,
                         durable_done_cb cb, void *data, durable_error_t *err) {
  durable_write_t w = {.kind = DURABLE_WRITE_MUTATE,
                       .path = path,
                       .mutate = mutate,
                       .mutate_arg = arg};
  return durable_store_write(store, &w, 1, cb, data, err);
}

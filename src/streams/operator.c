/*
 * operator.c: an operator's acts on a stream -- seek, trim and delete.
 *
 * Each is a request to the stream node's hub (stream_hub_operator.c),
 * which decides it on the stored state in its serial chain, like a claim
 * or an ack, and logs it -- a delete two requests: one to mark the stream,
 * the last to remove its node.  All three ask the same first: a mesh
 * acting as a principal needs write on the stream's owner, as a producer
 * does, and the stream must exist (none creates one).
 *
 * seek  sets the acknowledged checkpoint to N -- back to replay, forward to
 *       skip -- letting the lease go with a new epoch: the holder, wherever
 *       it runs, is fenced, claims again and resumes after N.  It hears of
 *       it at once (this process: durable__consumers_lease_gone; another:
 *       its waker sees the stream unheld), so a caught-up consumer replays
 *       without waiting for a new item; the item it has begun at that
 *       moment may still finish and be handed over once more, as at any
 *       change of holder.
 * trim  has the hub record TrimmedThrough = N first, so that a reader
 *       asking for a trimmed item is told so (reader.c) instead of waiting
 *       for it, and only then deletes items 1 .. N, oldest first, in
 *       transactions of TRIM_BATCH rows, each its own: appends and acks
 *       (which lock the stream node, not its items) never wait long behind
 *       it, and a trim cut off half-way is finished by asking again.  Never
 *       past the checkpoint unless forced (the checkpoint then moves to N as
 *       by a seek).  A group trim first moves that consumer group's
 *       checkpoint forward to N, as a seek of the group does (the group's
 *       hub; never back), then trims as above: so a slow group is passed
 *       knowingly, and goes on after N.  Publish ids stay
 *       (_DurableStreamId), so a retried publish of a trimmed item is still
 *       answered; a custom source's nodes are not the stream's items and
 *       are never touched.
 * delete  has the hub mark the stream DeletingAt, letting the lease go
 *       with a new epoch (refused while it is held, unless forced: the
 *       holder is fenced first), so that nothing is appended or claimed
 *       any more; then deletes every item and every publish id in the same
 *       small transactions, then a failing consumer's record, and last
 *       asks the hub to remove the node.  A later publish makes a new
 *       stream, from sequence 1.  A delete cut off half-way leaves the
 *       stream marked -- publishes to it are refused, saying so -- and is
 *       finished by asking again.  The dead-letter stream {ns}.dead is a
 *       stream of its own, kept.
 */
#include "protocol.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRIM_BATCH 500

typedef struct {
  durable_mesh_t *mesh;
  const char *msg;  /* DURABLE__MSG_SEEK, _TRIM or _DELETE */
  int trim;         /* trim or delete: items are deleted */
  int remove;       /* delete: ... and then the ids and the node */
  const char *verb; /* for its failure: "Moving the checkpoint of" ... */
  char *ns, *key, *path, *items_ns;
  char *group;       /* a consumer group's seek, delete or trim: path is the
                        group's (a trim's, until the group caught up) */
  char *stream_path; /* a group trim: the stream's, for the trim itself */
  int64_t group_was; /* ... the group's checkpoint before it (-1: not yet) */
  int64_t sequence;  /* seek: the checkpoint; trim: the last item to go */
  int force;
  int quiet;       /* retention's trim: the hub logs it at debug */
  int64_t deleted; /* trim: items deleted so far */
  int64_t batch;   /* ... in the batch being written */
  durable_sequence_cb cb;
  void *data;
} act_t;

static void act_free(act_t *a) {
  free(a->ns);
  free(a->key);
  free(a->path);
  free(a->items_ns);
  free(a->group);
  free(a->stream_path);
  free(a);
}

/* The answer: `value` is the checkpoint a seek moved from, the number of
 * items a trim deleted. */
static void finish(act_t *a, int status, int64_t value, const char *why) {
  if (a->trim && !a->remove && a->deleted > 0)
    durable__stream_count(a->mesh, a->ns, a->key, NULL, DURABLE__COUNT_TRIMMED,
                          (uint64_t)a->deleted);
  if (status == 0 && a->remove)
    durable__stream_renewed(a->mesh, a->ns, a->key, NULL);
  if (status == 0 && a->group && strcmp(a->msg, DURABLE__MSG_DELETE) == 0)
    durable__stream_renewed(a->mesh, a->ns, a->key, a->group);
  if (status == 0 && !a->trim) /* a seek: a failure recorded is of the past */
    durable__failure_clear(durable_mesh_store(a->mesh), a->path);
  if (status < 0) {
    durable_stream_id_t id = {.ns = a->ns, .key = a->key};
    char message[DURABLE_PATH_MAX + 1024], deleted[48] = "";
    char of[DURABLE_GROUP_MAX + 96] = "";
    if (a->deleted > 0)
      snprintf(deleted, sizeof deleted, " after %lld item(s)",
               (long long)a->deleted);
    if (a->group && a->group_was < 0)
      snprintf(of, sizeof of, " group %s", a->group);
    else if (a->group && a->group_was < a->sequence) /* a group trim's */
      snprintf(of, sizeof of, " (group %s moved from %lld to %lld first)",
               a->group, (long long)a->group_was, (long long)a->sequence);
    else if (a->group)
      snprintf(of, sizeof of, " (group %s at %lld already)", a->group,
               (long long)a->group_was);
    snprintf(message, sizeof message, "%s durable stream %s%s failed%s: %s",
             a->verb, durable__stream_name(&id).text, of, deleted,
             why ? why : durable_strerror(status));
    a->cb(status, a->trim ? a->deleted : 0, message, a->data);
  } else {
    a->cb(0, value, NULL, a->data);
  }
  act_free(a);
}

/* ---- trim: the deletes, after the hub recorded TrimmedThrough ---------- */

static void delete_next(act_t *a);
static void delete_ids(act_t *a);
static void delete_groups(act_t *a);

static void on_deleted(const durable_result_t *res, void *data) {
  act_t *a = data;
  if (res->status < 0)
    a->deleted -= a->batch; /* a batch is all or nothing */
  if (res->status == DURABLE_ENOTFOUND)
    delete_next(a); /* another trim took some: read again what is left */
  else if (res->status < 0)
    finish(a, res->status, 0, res->message);
  else
    delete_next(a);
}

/* The oldest items left: delete those at or below the trim's last. */
static void on_oldest(const durable_result_t *res, void *data) {
  act_t *a = data;
  if (res->status < 0) {
    finish(a, res->status, 0, res->message);
    return;
  }
  size_t n = 0;
  durable_write_t *writes =
      calloc(res->count ? res->count : 1, sizeof(*writes));
  if (writes == NULL) {
    finish(a, DURABLE_ENOMEM, 0, "out of memory");
    return;
  }
  for (size_t i = 0; i < res->count; i++)
    if (durable__item_sequence(res->nodes[i]->id) <= a->sequence)
      writes[n++] = (durable_write_t){.kind = DURABLE_WRITE_DELETE,
                                      .path = res->nodes[i]->path};
  if (n == 0) {
    free(writes);
    if (a->remove)
      delete_ids(a);
    else
      finish(a, 0, a->deleted, NULL); /* nothing at or below it is left */
    return;
  }
  a->batch = (int64_t)n;
  a->deleted += a->batch;
  durable_error_t err = {0};
  int rc = durable_store_write_as(durable_mesh_store(a->mesh),
                                  durable_mesh_principal(a->mesh), writes, n,
                                  on_deleted, a, &err);
  free(writes);
  if (rc < 0) {
    a->deleted -= (int64_t)n;
    finish(a, rc, 0, err.message);
  }
}

static void delete_next(act_t *a) {
  durable_error_t err = {0};
  if (durable__store_read_items(durable_mesh_store(a->mesh),
                                durable_mesh_principal(a->mesh), a->items_ns, 0,
                                TRIM_BATCH, on_oldest, a, &err) < 0)
    finish(a, err.code, 0, err.message);
}

/* ---- delete: the publish ids, then the node ------------------------- */

static int ask_hub(act_t *a, int64_t sequence, durable_error_t *err);

static void on_removed(const durable_response_t *res, void *data) {
  act_t *a = data;
  if (res->status < 0 && res->status != DURABLE_ENOTFOUND) /* gone: done */
    finish(a, res->status, 0, res->message);
  else
    finish(a, 0, a->deleted, NULL);
}

static void on_ids_deleted(const durable_result_t *res, void *data) {
  act_t *a = data;
  if (res->status < 0 && res->status != DURABLE_ENOTFOUND)
    finish(a, res->status, 0, res->message);
  else
    delete_ids(a); /* ENOTFOUND: another delete took some; list again */
}

static void on_ids(const durable_result_t *res, void *data) {
  act_t *a = data;
  durable_error_t err = {0};
  if (res->status < 0) {
    finish(a, res->status, 0, res->message);
    return;
  }
  if (res->count == 0) { /* items and ids gone: the groups, the node */
    delete_groups(a);
    return;
  }
  durable_write_t *writes = calloc(res->count, sizeof(*writes));
  if (writes == NULL) {
    finish(a, DURABLE_ENOMEM, 0, "out of memory");
    return;
  }
  for (size_t i = 0; i < res->count; i++)
    writes[i] = (durable_write_t){.kind = DURABLE_WRITE_DELETE,
                                  .path = res->nodes[i]->path};
  int rc = durable_store_write_as(durable_mesh_store(a->mesh),
                                  durable_mesh_principal(a->mesh), writes,
                                  res->count, on_ids_deleted, a, &err);
  free(writes);
  if (rc < 0)
    finish(a, rc, 0, err.message);
}

/* The consumer groups go (each with its failure record), then the stream's
 * failure record and the node. */
static void on_groups_deleted(const durable_result_t *res, void *data) {
  act_t *a = data;
  if (res->status < 0 && res->status != DURABLE_ENOTFOUND)
    finish(a, res->status, 0, res->message);
  else
    delete_groups(a);
}

static void on_groups(const durable_result_t *res, void *data) {
  act_t *a = data;
  durable_error_t err = {0};
  if (res->status < 0) {
    finish(a, res->status, 0, res->message);
    return;
  }
  if (res->count == 0) {
    durable__failure_clear(durable_mesh_store(a->mesh), a->path);
    if (ask_hub(a, 1, &err) < 0)
      finish(a, err.code, 0, err.message);
    return;
  }
  durable_write_t *writes = calloc(res->count, sizeof(*writes));
  if (writes == NULL) {
    finish(a, DURABLE_ENOMEM, 0, "out of memory");
    return;
  }
  for (size_t i = 0; i < res->count; i++) {
    writes[i] = (durable_write_t){.kind = DURABLE_WRITE_DELETE,
                                  .path = res->nodes[i]->path};
    durable__failure_clear(durable_mesh_store(a->mesh), res->nodes[i]->path);
  }
  int rc = durable_store_write_as(durable_mesh_store(a->mesh),
                                  durable_mesh_principal(a->mesh), writes,
                                  res->count, on_groups_deleted, a, &err);
  free(writes);
  if (rc < 0)
    finish(a, rc, 0, err.message);
}

static void delete_groups(act_t *a) {
  char query[DURABLE_PATH_MAX + 64];
  snprintf(query, sizeof query, "namespace:%s/" DURABLE__GROUP_SEGMENT,
           a->path);
  durable_error_t err = {0};
  if (durable_store_query(durable_mesh_store(a->mesh),
                          durable_mesh_principal(a->mesh), query, NULL,
                          TRIM_BATCH, on_groups, a, &err) < 0)
    finish(a, err.code, 0, err.message);
}

static void delete_ids(act_t *a) {
  char query[DURABLE_PATH_MAX + 64];
  snprintf(query, sizeof query, "namespace:%s/" DURABLE__ID_SEGMENT, a->path);
  durable_error_t err = {0};
  if (durable_store_query(durable_mesh_store(a->mesh),
                          durable_mesh_principal(a->mesh), query, NULL,
                          TRIM_BATCH, on_ids, a, &err) < 0)
    finish(a, err.code, 0, err.message);
}

/* ---- all: allowed, there, asked -------------------------------------- */

static void on_answered(const durable_response_t *res, void *data) {
  act_t *a = data;
  const durable__stream_ans_t *ans = durable__stream_answer(res);
  durable_error_t err = {0};
  if (res->status < 0)
    finish(a, res->status, 0, res->message);
  else if (ans == NULL || !ans->ok)
    finish(a, DURABLE_EIO, 0, "the stream hub did not do it");
  else if (a->stream_path) { /* a group trim: the group caught up */
    a->group_was = ans->checkpoint;
    if (ans->checkpoint < a->sequence) /* moved: a failure is of the past */
      durable__failure_clear(durable_mesh_store(a->mesh), a->path);
    free(a->path);
    a->path = a->stream_path;
    a->stream_path = NULL;
    if (ask_hub(a, a->sequence, &err) < 0)
      finish(a, err.code, 0, err.message);
  } else if (a->trim) {
    if (!a->remove && ans->sequence < a->sequence)
      a->sequence = ans->sequence; /* as far as the hub trimmed */
    delete_next(a);
  } else
    finish(a, 0, ans->checkpoint, NULL);
}

static void on_exists(const durable_result_t *res, void *data) {
  act_t *a = data;
  durable_error_t err = {0};
  if (res->status < 0) {
    finish(a, res->status, 0, res->message);
    return;
  }
  if (res->value == 0) {
    finish(a, DURABLE_ENOTFOUND, 0,
           a->group ? "the consumer group does not exist"
                    : "the stream does not exist");
    return;
  }
  if (ask_hub(a, a->remove ? 0 : a->sequence, &err) < 0)
    finish(a, err.code, 0, err.message);
}

/* The request to the stream's hub.  Subscriber names who asked, for the
 * hub's log line; Epoch is force; Sequence the seek's or trim's, or a
 * delete's step (0: mark, 1: remove). */
static int ask_hub(act_t *a, int64_t sequence, durable_error_t *err) {
  const char *principal = durable_mesh_principal(a->mesh);
  /* a group trim asks the group's hub first: a seek, forward only */
  int catch_up = a->stream_path != NULL;
  durable__stream_req_t *req =
      durable__stream_req_new(NULL, principal ? principal : "the platform",
                              a->force || catch_up ? 1
                              : a->quiet           ? 2
                                                   : 0,
                              sequence);
  if (req == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return durable__hub_request_body(
      durable__mesh_reads_hub(a->mesh), a->path,
      catch_up ? DURABLE__MSG_SEEK : a->msg, &req->base, 0,
      a->remove && sequence == 1 ? on_removed : on_answered, a, err);
}

static void check_exists(act_t *a) {
  durable_error_t err = {0};
  if (durable_store_exists(durable_mesh_store(a->mesh),
                           durable_mesh_principal(a->mesh), a->path, on_exists,
                           a, &err) < 0)
    finish(a, err.code, 0, err.message);
}

static void on_allowed(const durable_result_t *res, void *data) {
  act_t *a = data;
  if (res->status < 0)
    finish(a, res->status, 0, res->message);
  else
    check_exists(a);
}

static char *stream_path(const durable_stream_id_t *id) {
  char path[DURABLE_PATH_MAX + 1];
  durable_stream_path(id, path, sizeof path);
  return strdup(path);
}

static int act(durable_mesh_t *mesh, const durable_stream_id_t *id,
               const char *group, const char *msg, const char *verb,
               int64_t sequence, int force, int quiet, durable_sequence_cb cb,
               void *data, durable_error_t *err) {
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  char path[DURABLE_PATH_MAX + 1], items[DURABLE_PATH_MAX + 32];
  if (group)
    durable_group_path(id, group, path, sizeof path);
  else
    durable_stream_path(id, path, sizeof path);
  durable_stream_items_ns(id, items, sizeof items);
  act_t *a = calloc(1, sizeof(*a));
  if (a == NULL || (a->ns = strdup(id->ns)) == NULL ||
      (a->key = strdup(id->key)) == NULL || (a->path = strdup(path)) == NULL ||
      (a->items_ns = strdup(items)) == NULL ||
      (group && (a->group = strdup(group)) == NULL) ||
      (group && strcmp(msg, DURABLE__MSG_TRIM) == 0 &&
       (a->stream_path = stream_path(id)) == NULL)) {
    if (a)
      act_free(a);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  a->mesh = mesh;
  a->msg = msg;
  a->group_was = -1;
  /* a group's delete is its node's alone (the stream hub of the group) */
  a->remove = !group && strcmp(msg, DURABLE__MSG_DELETE) == 0;
  a->trim = a->remove || strcmp(msg, DURABLE__MSG_TRIM) == 0;
  a->verb = verb;
  a->sequence = sequence;
  a->force = force != 0;
  a->quiet = quiet;
  a->cb = cb;
  a->data = data;
  const char *principal = durable_mesh_principal(mesh);
  if (principal == NULL) {
    check_exists(a);
    return 0;
  }
  int rc = durable__store_access(durable_mesh_store(mesh), principal, id->key,
                                 DURABLE_GRANT_WRITE, on_allowed, a, err);
  if (rc < 0)
    act_free(a);
  return rc;
}

static int check_args(const durable_stream_id_t *id, durable_sequence_cb cb,
                      durable_error_t *err) {
  int rc = durable_stream_check(id, err);
  if (rc == 0 && cb == NULL)
    rc = durable__error(err, DURABLE_EINVAL, "callback is missing");
  return rc;
}

/* A seek of the stream's own checkpoint (`group` NULL) or of a group's. */
static int seek(durable_mesh_t *mesh, const durable_stream_id_t *id,
                const char *group, int64_t sequence, durable_sequence_cb cb,
                void *data, durable_error_t *err) {
  int rc = check_args(id, cb, err);
  if (rc == 0 && group)
    rc = durable_group_check(group, err);
  if (rc == 0 && sequence < 0)
    rc = durable__error(err, DURABLE_EINVAL,
                        "a checkpoint is a sequence >= 0, not %lld",
                        (long long)sequence);
  return rc < 0
             ? rc
             : act(mesh, id, group, DURABLE__MSG_SEEK,
                   "Moving the checkpoint of", sequence, 0, 0, cb, data, err);
}

int durable_stream_seek(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t sequence, durable_sequence_cb cb, void *data,
                        durable_error_t *err) {
  return seek(mesh, id, NULL, sequence, cb, data, err);
}

int durable_group_seek(durable_mesh_t *mesh, const durable_stream_id_t *id,
                       const char *group, int64_t sequence,
                       durable_sequence_cb cb, void *data,
                       durable_error_t *err) {
  if (group == NULL)
    return durable__error(err, DURABLE_EINVAL, "a group seek needs a group");
  return seek(mesh, id, group, sequence, cb, data, err);
}

int durable_group_delete(durable_mesh_t *mesh, const durable_stream_id_t *id,
                         const char *group, int force, durable_sequence_cb cb,
                         void *data, durable_error_t *err) {
  int rc = check_args(id, cb, err);
  if (rc == 0)
    rc = durable_group_check(group, err);
  return rc < 0 ? rc
                : act(mesh, id, group, DURABLE__MSG_DELETE, "Deleting", 0,
                      force, 0, cb, data, err);
}

/* A trim of the stream, passing consumer group `group` first (NULL:
 * none), as seek() is for seeks. */
static int trim(durable_mesh_t *mesh, const durable_stream_id_t *id,
                const char *group, int64_t through, int force,
                durable_sequence_cb cb, void *data, durable_error_t *err) {
  int rc = check_args(id, cb, err);
  if (rc == 0 && group)
    rc = durable_group_check(group, err);
  if (rc == 0 && through < 1)
    rc = durable__error(err, DURABLE_EINVAL,
                        "a trim goes through a sequence >= 1, not %lld",
                        (long long)through);
  return rc < 0 ? rc
                : act(mesh, id, group, DURABLE__MSG_TRIM, "Trimming", through,
                      force, 0, cb, data, err);
}

int durable_stream_trim(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t through, int force, durable_sequence_cb cb,
                        void *data, durable_error_t *err) {
  return trim(mesh, id, NULL, through, force, cb, data, err);
}

int durable_group_trim(durable_mesh_t *mesh, const durable_stream_id_t *id,
                       const char *group, int64_t through, int force,
                       durable_sequence_cb cb, void *data,
                       durable_error_t *err) {
  if (group == NULL)
    return durable__error(err, DURABLE_EINVAL, "a group trim needs a group");
  return trim(mesh, id, group, through, force, cb, data, err);
}

int durable_stream_delete(durable_mesh_t *mesh, const durable_stream_id_t *id,
                          int force, durable_sequence_cb cb, void *data,
                          durable_error_t *err) {
  int rc = check_args(id, cb, err);
  return rc < 0 ? rc
                : act(mesh, id, NULL, DURABLE__MSG_DELETE, "Deleting",
                      INT64_MAX, force, 0, cb, data, err);
}

int durable__stream_sweep(durable_mesh_t *mesh, const durable_stream_id_t *id,
                          int64_t through, durable_sequence_cb cb, void *data,
                          durable_error_t *err) {
  int rc = check_args(id, cb, err);
  return rc < 0 ? rc
                : act(mesh, id, NULL, DURABLE__MSG_TRIM, "Retention's trim of",
                      through, 0, 1, cb, data, err);
}

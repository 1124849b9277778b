/*
 * trim.c: an operator deletes a stream's acknowledged items.
 *
 * durable_stream_trim(mesh, stream, N) first has the stream node's hub
 * record TrimmedThrough = N (stream_hub.c, run_trim): from then on a reader
 * that asks for an item at or below N is told so (reader.c) instead of
 * waiting for it for ever.  Only then are the items deleted, oldest first,
 * in transactions of TRIM_BATCH rows, each its own, so that appends and
 * acknowledgements (which lock the stream node, not its items) never wait
 * long behind a trim, and a trim cut off half-way is finished by asking
 * again.  The hub refuses N past the checkpoint, unless forced: then the
 * checkpoint moves to N as by a seek.  Publish ids stay (they are kept
 * apart, _DurableStreamId), so a retried publish of a trimmed item is still
 * answered with its first sequence.  A custom source's nodes are not the
 * stream's items: a trim never touches them.
 */
#include "protocol.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRIM_BATCH 500

typedef struct {
  durable_mesh_t *mesh;
  char *ns, *key, *path, *items_ns;
  int64_t through;
  int force;
  int64_t deleted;
  durable_sequence_cb cb;
  void *data;
} trim_t;

static void trim_free(trim_t *t) {
  free(t->ns);
  free(t->key);
  free(t->path);
  free(t->items_ns);
  free(t);
}

static void finish(trim_t *t, int status, const char *why) {
  if (status < 0) {
    durable_stream_id_t id = {.ns = t->ns, .key = t->key};
    char message[DURABLE_PATH_MAX + 1024];
    snprintf(message, sizeof message,
             "Trimming durable stream %s failed after %lld item(s): %s",
             durable__stream_name(&id).text, (long long)t->deleted,
             why ? why : durable_strerror(status));
    t->cb(status, t->deleted, message, t->data);
  } else {
    t->cb(0, t->deleted, NULL, t->data);
  }
  trim_free(t);
}

static void delete_next(trim_t *t);

static void on_deleted(const durable_result_t *res, void *data) {
  trim_t *t = data;
  if (res->status < 0) {
    finish(t, res->status, res->message);
    return;
  }
  delete_next(t);
}

/* The oldest items left: delete those at or below `through`. */
static void on_oldest(const durable_result_t *res, void *data) {
  trim_t *t = data;
  if (res->status < 0) {
    finish(t, res->status, res->message);
    return;
  }
  size_t n = 0;
  durable_write_t *writes =
      calloc(res->count ? res->count : 1, sizeof(*writes));
  if (writes == NULL) {
    finish(t, DURABLE_ENOMEM, "out of memory");
    return;
  }
  for (size_t i = 0; i < res->count; i++)
    if (durable__item_sequence(res->nodes[i]->id) <= t->through)
      writes[n++] = (durable_write_t){.kind = DURABLE_WRITE_DELETE,
                                      .path = res->nodes[i]->path};
  if (n == 0) {
    free(writes);
    finish(t, 0, NULL); /* nothing at or below it is left */
    return;
  }
  t->deleted += (int64_t)n;
  durable_error_t err = {0};
  int rc = durable_store_write_as(durable_mesh_store(t->mesh),
                                  durable_mesh_principal(t->mesh), writes, n,
                                  on_deleted, t, &err);
  free(writes);
  if (rc < 0) {
    t->deleted -= (int64_t)n;
    finish(t, rc, err.message);
  }
}

static void delete_next(trim_t *t) {
  durable_error_t err = {0};
  if (durable__store_read_items(durable_mesh_store(t->mesh),
                                durable_mesh_principal(t->mesh), t->items_ns, 0,
                                TRIM_BATCH, on_oldest, t, &err) < 0)
    finish(t, err.code, err.message);
}

static void on_recorded(const durable_response_t *res, void *data) {
  trim_t *t = data;
  const durable__stream_ans_t *ans = durable__stream_answer(res);
  if (res->status < 0)
    finish(t, res->status, res->message);
  else if (ans == NULL || !ans->ok)
    finish(t, DURABLE_EIO, "the stream hub did not record the trim");
  else
    delete_next(t);
}

static void on_exists(const durable_result_t *res, void *data) {
  trim_t *t = data;
  durable_error_t err = {0};
  if (res->status < 0) {
    finish(t, res->status, res->message);
    return;
  }
  if (res->value == 0) {
    finish(t, DURABLE_ENOTFOUND, "the stream does not exist");
    return;
  }
  const char *principal = durable_mesh_principal(t->mesh);
  durable__stream_req_t *req = durable__stream_req_new(
      NULL, principal ? principal : "the platform", t->force, t->through);
  int rc = req ? durable__hub_request_body(durable__mesh_reads_hub(t->mesh),
                                           t->path, DURABLE__MSG_TRIM,
                                           &req->base, 0, on_recorded, t, &err)
               : durable__error(&err, DURABLE_ENOMEM, "out of memory");
  if (rc < 0)
    finish(t, rc, err.message);
}

static void check_exists(trim_t *t) {
  durable_error_t err = {0};
  if (durable_store_exists(durable_mesh_store(t->mesh),
                           durable_mesh_principal(t->mesh), t->path, on_exists,
                           t, &err) < 0)
    finish(t, err.code, err.message);
}

static void on_allowed(const durable_result_t *res, void *data) {
  trim_t *t = data;
  if (res->status < 0)
    finish(t, res->status, res->message);
  else
    check_exists(t);
}

int durable_stream_trim(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t through, int force, durable_sequence_cb cb,
                        void *data, durable_error_t *err) {
  int rc = durable_stream_check(id, err);
  if (rc < 0)
    return rc;
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "callback is missing");
  if (through < 1)
    return durable__error(err, DURABLE_EINVAL,
                          "a trim goes through a sequence >= 1, not %lld",
                          (long long)through);
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  char path[DURABLE_PATH_MAX + 1], items[DURABLE_PATH_MAX + 32];
  durable_stream_path(id, path, sizeof path);
  durable_stream_items_ns(id, items, sizeof items);
  trim_t *t = calloc(1, sizeof(*t));
  if (t == NULL || (t->ns = strdup(id->ns)) == NULL ||
      (t->key = strdup(id->key)) == NULL || (t->path = strdup(path)) == NULL ||
      (t->items_ns = strdup(items)) == NULL) {
    if (t)
      trim_free(t);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  t->mesh = mesh;
  t->through = through;
  t->force = force != 0;
  t->cb = cb;
  t->data = data;
  const char *principal = durable_mesh_principal(mesh);
  if (principal == NULL) {
    check_exists(t);
    return 0;
  }
  rc = durable__store_access(durable_mesh_store(mesh), principal, id->key,
                             DURABLE_GRANT_WRITE, on_allowed, t, err);
  if (rc < 0)
    trim_free(t);
  return rc;
}

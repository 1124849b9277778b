/*
 * seek.c: an operator moves a stream's checkpoint.
 *
 * durable_stream_seek(mesh, stream, N) sets the acknowledged checkpoint to
 * N -- back, to replay what follows it; forward, to skip -- as an
 * administrative act of the stream node's hub (stream_hub.c, run_seek): in
 * one write it sets the checkpoint, lets the lease go and starts a new
 * epoch.  The holder, wherever it runs, is fenced by that epoch: its next
 * acknowledgement is refused, it claims again and resumes after N.  It is
 * woken for that at once (a waker sees the stream unheld with items
 * waiting; in this process the stream hub wakes it), so a caught-up
 * consumer replays without waiting for a new item.  The item a holder has
 * begun at that moment may still finish and be handed over once more, as
 * at any change of holder.
 *
 * A mesh acting as a principal needs write on the stream's owner, as a
 * producer does; the stream must exist (seek never creates one).
 */
#include "protocol.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  durable_mesh_t *mesh;
  char *ns, *key, *path;
  int64_t to;
  durable_sequence_cb cb;
  void *data;
} seek_t;

static void seek_free(seek_t *s) {
  free(s->ns);
  free(s->key);
  free(s->path);
  free(s);
}

static void finish(seek_t *s, int status, int64_t was, const char *why) {
  if (status < 0) {
    durable_stream_id_t id = {.ns = s->ns, .key = s->key};
    char message[DURABLE_PATH_MAX + 1024];
    snprintf(message, sizeof message,
             "Moving the checkpoint of durable stream %s failed: %s",
             durable__stream_name(&id).text,
             why ? why : durable_strerror(status));
    s->cb(status, 0, message, s->data);
  } else {
    s->cb(0, was, NULL, s->data);
  }
  seek_free(s);
}

static void on_moved(const durable_response_t *res, void *data) {
  seek_t *s = data;
  const durable__stream_ans_t *ans = durable__stream_answer(res);
  if (res->status < 0)
    finish(s, res->status, 0, res->message);
  else if (ans == NULL || !ans->ok)
    finish(s, DURABLE_EIO, 0, "the stream hub did not move it");
  else
    finish(s, 0, ans->checkpoint, NULL);
}

static void on_exists(const durable_result_t *res, void *data) {
  seek_t *s = data;
  durable_error_t err = {0};
  if (res->status < 0) {
    finish(s, res->status, 0, res->message);
    return;
  }
  if (res->value == 0) {
    finish(s, DURABLE_ENOTFOUND, 0, "the stream does not exist");
    return;
  }
  const char *principal = durable_mesh_principal(s->mesh);
  durable__stream_req_t *req = durable__stream_req_new(
      NULL, principal ? principal : "the platform", 0, s->to);
  int rc = req ? durable__hub_request_body(durable__mesh_reads_hub(s->mesh),
                                           s->path, DURABLE__MSG_SEEK,
                                           &req->base, 0, on_moved, s, &err)
               : durable__error(&err, DURABLE_ENOMEM, "out of memory");
  if (rc < 0)
    finish(s, rc, 0, err.message);
}

static void check_exists(seek_t *s) {
  durable_error_t err = {0};
  if (durable_store_exists(durable_mesh_store(s->mesh),
                           durable_mesh_principal(s->mesh), s->path, on_exists,
                           s, &err) < 0)
    finish(s, err.code, 0, err.message);
}

static void on_allowed(const durable_result_t *res, void *data) {
  seek_t *s = data;
  if (res->status < 0)
    finish(s, res->status, 0, res->message);
  else
    check_exists(s);
}

int durable_stream_seek(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t sequence, durable_sequence_cb cb, void *data,
                        durable_error_t *err) {
  int rc = durable_stream_check(id, err);
  if (rc < 0)
    return rc;
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "callback is missing");
  if (sequence < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "a checkpoint is a sequence >= 0, not %lld",
                          (long long)sequence);
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  char path[DURABLE_PATH_MAX + 1];
  durable_stream_path(id, path, sizeof path);
  seek_t *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->ns = strdup(id->ns)) == NULL ||
      (s->key = strdup(id->key)) == NULL || (s->path = strdup(path)) == NULL) {
    if (s)
      seek_free(s);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  s->mesh = mesh;
  s->to = sequence;
  s->cb = cb;
  s->data = data;
  const char *principal = durable_mesh_principal(mesh);
  if (principal == NULL) {
    check_exists(s);
    return 0;
  }
  rc = durable__store_access(durable_mesh_store(mesh), principal, id->key,
                             DURABLE_GRANT_WRITE, on_allowed, s, err);
  if (rc < 0)
    seek_free(s);
  return rc;
}

/*
 * failure.c: a failing consumer's record, so that `durable streams` -- run
 * by another process than the host -- can say which item a consumer is
 * stuck on, how many times it failed and why, and so that max_attempts
 * counts across a restart of the host.
 *
 * The record is one satellite node of the stream,
 * "{key}/_DurableStream/{ns}/_DurableStreamFailure" (node type
 * DurableStreamFailure, in mesh_nodes), {Sequence, Attempts, Error,
 * FailedAt}.  It costs nothing while items succeed: it is written once per
 * failure of an item (a read-modify-write in the store's transaction, so
 * the count is the stored one plus one whatever process failed before) and
 * deleted once, when the failing item is acknowledged or dead-lettered.
 * It is not on the stream node, whose row every append and ack of the
 * stream serialises on: a failure neither waits for that chain nor wakes
 * other hosts (its namespace is not a "/_DurableStream" one, which the
 * waker watches).  A record left behind (its delete failed, or the item
 * succeeded in a process that never saw it fail) names an item at or
 * below the checkpoint; durable_stream_statuses shows a record only for
 * item checkpoint + 1, so such a record is never shown.
 */
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failure_path(const char *stream_path, char *out, size_t size) {
  int n = snprintf(out, size, "%s/" DURABLE__FAILURE_SEGMENT, stream_path);
  return n < 0 || (size_t)n >= size ? DURABLE_EINVAL : 0;
}

int durable__failure_decode(const char *content, durable__failure_t *out) {
  memset(out, 0, sizeof *out);
  int code = DURABLE_EINVAL;
  json_t *j = content ? durable__json_tree(content, &code) : NULL;
  if (j == NULL)
    return code;
  json_t *seq = json_object_get(j, "Sequence");
  json_t *attempts = json_object_get(j, "Attempts");
  if (!json_is_integer(seq) || !json_is_integer(attempts)) {
    json_decref(j);
    return DURABLE_EINVAL;
  }
  out->sequence = json_integer_value(seq);
  out->attempts = (int)json_integer_value(attempts);
  const char *error = json_string_value(json_object_get(j, "Error"));
  out->error = strdup(error ? error : "");
  out->failed_at =
      durable__parse_time(json_string_value(json_object_get(j, "FailedAt")));
  json_decref(j);
  if (out->error == NULL)
    return DURABLE_ENOMEM;
  return 0;
}

void durable__failure_free(durable__failure_t *f) {
  free(f->error);
  f->error = NULL;
}

typedef struct {
  int64_t sequence;
  char *error;
  int64_t failed_at;
  void (*done)(int attempts, void *data);
  void *data;
} record_t;

/* On the store's writer thread: depends only on `current` and the arg. */
static int mutate(const durable_node_t *current, char **content,
                  char **node_type, void *arg) {
  const record_t *r = arg;
  int attempts = 1;
  durable__failure_t was;
  int rc = current ? durable__failure_decode(current->content, &was) : 1;
  if (rc == DURABLE_ENOMEM)
    return rc; /* a count it could not read is not 0 */
  if (rc == 0) {
    if (was.sequence == r->sequence && was.attempts > 0)
      attempts = was.attempts + 1;
    durable__failure_free(&was);
  }
  char when[32];
  durable__iso_time(r->failed_at, when);
  json_t *error = durable__json_message(r->error);
  json_t *j =
      json_pack("{s:I, s:i, s:o, s:s}", "Sequence", (json_int_t)r->sequence,
                "Attempts", attempts, "Error", error, "FailedAt", when);
  *content = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  *node_type = strdup(DURABLE__FAILURE_TYPE);
  if (*content == NULL || *node_type == NULL) {
    free(*content);
    free(*node_type);
    *content = *node_type = NULL;
    return DURABLE_ENOMEM;
  }
  return 1;
}

static void on_recorded(const durable_result_t *res, void *data) {
  record_t *r = data;
  durable__failure_t f;
  int attempts = res->status;
  if (res->status == 0) {
    int rc = res->node ? durable__failure_decode(res->node->content, &f)
                       : DURABLE_EIO;
    attempts = rc == 0 ? f.attempts : rc == DURABLE_ENOMEM ? rc : DURABLE_EIO;
  }
  if (res->status == 0 && attempts > 0)
    durable__failure_free(&f);
  r->done(attempts, r->data);
  free(r->error);
  free(r);
}

int durable__failure_record(durable_store_t *store, const char *stream_path,
                            int64_t sequence, const char *error,
                            void (*done)(int attempts, void *data), void *data,
                            durable_error_t *err) {
  char path[DURABLE_PATH_MAX + 1];
  if (failure_path(stream_path, path, sizeof path) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "the failure record of '%s' would be too long",
                          stream_path);
  record_t *r = calloc(1, sizeof(*r));
  if (r == NULL || (r->error = strdup(error ? error : "")) == NULL) {
    free(r);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  r->sequence = sequence;
  r->failed_at = durable__now_ms();
  r->done = done;
  r->data = data;
  int rc = durable_store_update(store, path, mutate, r, on_recorded, r, err);
  if (rc < 0) {
    free(r->error);
    free(r);
  }
  return rc;
}

static void on_cleared(const durable_result_t *res, void *data) {
  (void)res; /* gone, or never there: either way nothing is failing */
  (void)data;
}

void durable__failure_clear(durable_store_t *store, const char *stream_path) {
  char path[DURABLE_PATH_MAX + 1];
  durable_error_t err = {0};
  if (failure_path(stream_path, path, sizeof path) == 0)
    durable_store_delete(store, path, on_cleared, NULL, &err);
}

/* ---- what the log says of a failing item ---------------------------- */

const char *durable__failure_cut(const char *why, size_t max, char *buf,
                                 size_t size) {
  size_t n = strlen(why);
  if (n <= max || max < 4 || max + 1 > size)
    return why;
  n = max - 3;
  while (n > 0 && ((unsigned char)why[n] & 0xC0) == 0x80)
    n--; /* not inside a UTF-8 sequence */
  snprintf(buf, size, "%.*s...", (int)n, why);
  return buf;
}

void durable__failure_ways_out(durable_mesh_t *mesh, const char *hub,
                               const char *name, const char *ns,
                               const char *key, const char *group, int64_t seq,
                               int times) {
  if (times <= 0 || times % DURABLE__WAYS_OUT_EVERY != 0)
    return;
  char by_group[DURABLE_GROUP_MAX + 16] = "";
  if (group)
    snprintf(by_group, sizeof by_group, " --group %s", group);
  durable_mesh_log(mesh, DURABLE_LOG_WARN,
                   "Durable stream consumer %s: item %lld of %s has failed %d "
                   "times in a row and is retried for ever; the ways out: fix "
                   "the handler (the next try takes it), `durable seek %s %s "
                   "--to %lld%s` skips it, or max_attempts moves it to the "
                   "dead letters (`durable dead`, `durable requeue`)",
                   hub, (long long)seq, name, times, ns, key, (long long)seq,
                   by_group);
}

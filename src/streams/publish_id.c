/*
 * publish_id.c: the ids of idempotent publishes (durable.h,
 * durable_publish_id_check): their rules and their nodes.
 *
 * A publish id is remembered as a write-once satellite of the stream,
 *
 *   {key}/_DurableStream/{ns}/_DurableStreamId/{id}   {"Sequence":N}
 *
 * created by the stream hub in the transaction that creates item N.  The
 * node table's primary key (namespace, id) is then the unique index that
 * makes a second append of the same id impossible, on both stores and
 * across processes, with nothing store-specific: the second CREATE fails
 * with DURABLE_EEXIST, and the node says which sequence won.  The id is a
 * path segment because it becomes one; it is kept shorter than a segment
 * (DURABLE_PUBLISH_ID_MAX) so that an id fits beside any stream whose items
 * fit.  The nodes live in durable_stream_items beside the items
 * (schema.c), not in mesh_nodes: there is one per item published with an
 * id, and mesh_nodes stays the table of the mesh's own nodes.
 */
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

int durable_publish_id_check(const durable_stream_id_t *stream, const char *id,
                             durable_error_t *err) {
  int rc =
      durable__segment_check("publish id", id, DURABLE_PUBLISH_ID_MAX, err);
  if (rc < 0 || stream == NULL)
    return rc;
  char path[DURABLE_PATH_MAX + 1], id_path[DURABLE_PATH_MAX + 1];
  if ((rc = durable_stream_check(stream, err)) < 0)
    return rc;
  durable_stream_path(stream, path, sizeof path);
  rc = durable__publish_id_path(path, id, id_path, sizeof id_path, err);
  return rc < 0 ? rc : 0;
}

int durable__publish_id_path(const char *stream_path, const char *id, char *out,
                             size_t size, durable_error_t *err) {
  int n = snprintf(out, size, "%s/" DURABLE__ID_SEGMENT "/%s", stream_path, id);
  if (n < 0 || (size_t)n >= size || n > DURABLE_PATH_MAX)
    return durable__error(err, DURABLE_EINVAL,
                          "publish id '%s' is too long for the stream %s: its "
                          "node's path would pass %d bytes",
                          id, stream_path, DURABLE_PATH_MAX);
  return n;
}

char *durable__publish_id_encode(int64_t sequence) {
  char text[48];
  snprintf(text, sizeof text, "{\"Sequence\":%lld}", (long long)sequence);
  return strdup(text);
}

int64_t durable__publish_id_sequence(const char *content) {
  int code = 0;
  json_t *j = durable__json_tree(content, &code);
  if (j == NULL && code == DURABLE_ENOMEM)
    return DURABLE_ENOMEM;
  json_t *seq = json_object_get(j, "Sequence");
  int64_t v = json_is_integer(seq) ? (int64_t)json_integer_value(seq) : 0;
  json_decref(j);
  return v > 0 ? v : 0;
}

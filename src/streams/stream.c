/*
 * stream.c: stream identities and paths, and the two node contents of a
 * stream (the stream node's state, an item's content) in JSON.
 *
 * The state keeps the spec's field names and order, so `durable get` shows
 * an operator exactly what the spec describes, with one addition:
 * SubscriberInstance, the process that holds the lease (DESIGN 3.7), beside
 * Subscriber, the hub address.  An item keeps its payload
 * as a JSON string (PayloadJson) so the text stays exactly as produced --
 * key order, "$type" first, number spellings -- whatever the store does with
 * JSON.
 */
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int durable_stream_check(const durable_stream_id_t *id, durable_error_t *err) {
  const char *ns = id ? id->ns : NULL;
  int blank = ns == NULL || strspn(ns, " \t\r\n") == strlen(ns);
  if (blank || strchr(ns, '/') != NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "A durable stream needs a non-empty Namespace "
                          "without '/' (was '%s').",
                          ns ? ns : "");
  const char *key = id->key;
  if (key == NULL || strspn(key, " \t\r\n") == strlen(key))
    return durable__error(err, DURABLE_EINVAL,
                          "Durable stream '%s' needs the owning node's path "
                          "as Key.",
                          ns);
  char path[DURABLE_PATH_MAX + 1];
  if (durable_stream_path(id, path, sizeof path) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "Durable stream '%s': the key '%s' is too long", ns,
                          key);
  /* the items' paths are the longest: check the rules on one of them */
  char items[DURABLE_PATH_MAX + 40];
  snprintf(items, sizeof items, "%s/" DURABLE__ITEM_SEGMENT "/000000000001",
           path);
  return durable_path_check(items, err);
}

int durable_stream_path(const durable_stream_id_t *id, char *out, size_t size) {
  size_t klen = strlen(id->key);
  while (klen > 0 && id->key[klen - 1] == '/')
    klen--; /* trailing '/' trimmed */
  int n = snprintf(out, size, "%.*s/" DURABLE__STREAM_SEGMENT "/%s", (int)klen,
                   id->key, id->ns);
  return n < 0 || (size_t)n >= size ? DURABLE_EINVAL : n;
}

int durable_stream_items_ns(const durable_stream_id_t *id, char *out,
                            size_t size) {
  int n = durable_stream_path(id, out, size);
  if (n < 0)
    return n;
  int m = snprintf(out + n, size - (size_t)n, "/" DURABLE__ITEM_SEGMENT);
  return m < 0 || (size_t)(n + m) >= size ? DURABLE_EINVAL : n + m;
}

durable__stream_name_t durable__stream_name(const durable_stream_id_t *id) {
  durable__stream_name_t name;
  snprintf(name.text, sizeof name.text, "%s@%s", id->ns, id->key);
  return name;
}

/* ---- times and ids ----------------------------------------------------------
 */

void durable__iso_time(int64_t ms, char out[32]) {
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

int64_t durable__parse_time(const char *text) {
  if (text == NULL)
    return 0;
  struct tm tm = {0};
  int ms = 0;
  char *rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == NULL)
    return 0;
  if (*rest == '.') {
    int digits = 0;
    for (rest++; *rest >= '0' && *rest <= '9'; rest++, digits++)
      if (digits < 3)
        ms = ms * 10 + (*rest - '0');
    for (; digits < 3; digits++)
      ms *= 10;
  }
  return (int64_t)timegm(&tm) * 1000 + ms;
}

void durable__item_id(int64_t sequence, char out[13]) {
  snprintf(out, 13, "%012lld", (long long)sequence);
}

int64_t durable__item_sequence(const char *id) {
  if (id == NULL || strlen(id) != 12 || strspn(id, "0123456789") != 12)
    return 0;
  return strtoll(id, NULL, 10);
}

/* ---- the stream node's state
 * ---------------------------------------------------- */

int durable__str_set(char **field, const char *value) {
  char *copy = NULL;
  if (value && (copy = strdup(value)) == NULL)
    return DURABLE_ENOMEM;
  free(*field);
  *field = copy;
  return 0;
}

void durable__state_free(durable__stream_state_t *s) {
  free(s->ns);
  free(s->key);
  free(s->subscriber);
  free(s->subscriber_instance);
  free(s->last_subscriber);
  memset(s, 0, sizeof *s);
}

int durable__state_copy(const durable__stream_state_t *from,
                        durable__stream_state_t *to) {
  *to = *from;
  to->ns = to->key = to->subscriber = to->subscriber_instance =
      to->last_subscriber = NULL;
  if (durable__str_set(&to->ns, from->ns) < 0 ||
      durable__str_set(&to->key, from->key) < 0 ||
      durable__str_set(&to->subscriber, from->subscriber) < 0 ||
      durable__str_set(&to->subscriber_instance, from->subscriber_instance) <
          0 ||
      durable__str_set(&to->last_subscriber, from->last_subscriber) < 0) {
    durable__state_free(to);
    return DURABLE_ENOMEM;
  }
  return 0;
}

static int64_t int_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  return json_is_integer(v) ? json_integer_value(v) : 0;
}

static const char *str_of(json_t *obj, const char *key) {
  return json_string_value(json_object_get(obj, key));
}

int durable__state_decode(const char *content, const char *stream_path,
                          durable__stream_state_t *out) {
  memset(out, 0, sizeof *out);
  json_t *j = content ? json_loads(content, JSON_DECODE_ANY, NULL) : NULL;
  int rc = 0;
  const char *ns = j ? str_of(j, "Namespace") : NULL;
  const char *key = j ? str_of(j, "Key") : NULL;
  if (ns == NULL || key == NULL || *ns == '\0' || *key == '\0') {
    /* no content: Namespace = node id, Key = namespace without the segment */
    const char *seg = strstr(stream_path, "/" DURABLE__STREAM_SEGMENT "/");
    if (seg) {
      out->key = strndup(stream_path, (size_t)(seg - stream_path));
      out->ns = strdup(seg + strlen("/" DURABLE__STREAM_SEGMENT "/"));
    }
  } else {
    out->ns = strdup(ns);
    out->key = strdup(key);
  }
  if (out->ns == NULL || out->key == NULL)
    rc = DURABLE_ENOMEM;
  if (j && rc == 0) {
    out->last_sequence = int_of(j, "LastSequence");
    out->lease_epoch = int_of(j, "LeaseEpoch");
    out->checkpoint = int_of(j, "Checkpoint");
    out->subscribed_at = durable__parse_time(str_of(j, "SubscribedAt"));
    out->checkpoint_at = durable__parse_time(str_of(j, "CheckpointAt"));
    out->orphaned_at = durable__parse_time(str_of(j, "OrphanedAt"));
    if (durable__str_set(&out->subscriber, str_of(j, "Subscriber")) < 0 ||
        durable__str_set(&out->subscriber_instance,
                         str_of(j, "SubscriberInstance")) < 0 ||
        durable__str_set(&out->last_subscriber, str_of(j, "LastSubscriber")) <
            0)
      rc = DURABLE_ENOMEM;
  }
  json_decref(j);
  if (rc < 0)
    durable__state_free(out);
  return rc;
}

static json_t *time_or_null(int64_t ms) {
  if (ms == 0)
    return json_null();
  char buf[32];
  durable__iso_time(ms, buf);
  return json_string(buf);
}

static json_t *str_or_null(const char *s) {
  return s ? json_string(s) : json_null();
}

char *durable__state_encode(const durable__stream_state_t *s) {
  json_t *j = json_object();
  if (j == NULL)
    return NULL;
  json_object_set_new(j, "Namespace", json_string(s->ns));
  json_object_set_new(j, "Key", json_string(s->key));
  json_object_set_new(j, "LastSequence", json_integer(s->last_sequence));
  json_object_set_new(j, "Subscriber", str_or_null(s->subscriber));
  json_object_set_new(j, "SubscriberInstance",
                      str_or_null(s->subscriber_instance));
  json_object_set_new(j, "LeaseEpoch", json_integer(s->lease_epoch));
  json_object_set_new(j, "SubscribedAt", time_or_null(s->subscribed_at));
  json_object_set_new(j, "Checkpoint", json_integer(s->checkpoint));
  json_object_set_new(j, "CheckpointAt", time_or_null(s->checkpoint_at));
  json_object_set_new(j, "OrphanedAt", time_or_null(s->orphaned_at));
  json_object_set_new(j, "LastSubscriber", str_or_null(s->last_subscriber));
  char *text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(j);
  return text;
}

/* ---- items
 * ---------------------------------------------------------------------- */

char *durable__item_encode(int64_t sequence, const char *payload,
                           int64_t appended_at) {
  json_t *j = json_object();
  if (j == NULL)
    return NULL;
  json_object_set_new(j, "Sequence", json_integer(sequence));
  json_object_set_new(j, "PayloadJson", json_string(payload));
  json_object_set_new(j, "AppendedAt", time_or_null(appended_at));
  char *text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(j);
  return text;
}

int durable__item_decode(const durable_node_t *node, char **payload,
                         int64_t *appended_at, durable_error_t *err) {
  json_error_t je;
  *payload = NULL;
  json_t *j =
      json_loads(node->content ? node->content : "", JSON_DECODE_ANY, &je);
  const char *text = j ? str_of(j, "PayloadJson") : NULL;
  if (text == NULL) {
    json_decref(j);
    return durable__error(err, DURABLE_EINVAL,
                          "%s carries no DurableStreamItemContent", node->path);
  }
  /* the payload itself must be JSON for a consumer to read it */
  json_t *p = json_loads(text, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
  if (p == NULL) {
    int rc = durable__error(err, DURABLE_EINVAL,
                            "Durable stream item %s could not be read as "
                            "JSON: %s",
                            node->path, je.text);
    json_decref(j);
    return rc;
  }
  json_decref(p);
  *payload = strdup(text);
  if (appended_at)
    *appended_at = durable__parse_time(str_of(j, "AppendedAt"));
  json_decref(j);
  return *payload ? 0 : DURABLE_ENOMEM;
}

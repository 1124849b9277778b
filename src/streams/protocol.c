/*
 * protocol.c: the typed bodies of the stream messages (protocol.h), and
 * their JSON forms for the requests that come as JSON (from Lua, from a
 * test playing a consumer).  Only those go through jansson; the runtime's
 * own requests never do.
 */
#include "protocol.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void req_free(durable__body_t *body) {
  durable__stream_req_t *r = (durable__stream_req_t *)body;
  free(r->payload);
  free(r->id);
  free(r->subscriber);
  free(r->group);
  free(r->effects);
  free(r);
}

static void ans_free(durable__body_t *body) {
  durable__stream_ans_t *a = (durable__stream_ans_t *)body;
  free(a->holder);
  free(a->holder_instance);
  free(a->took_over_from);
  free(a->reason);
  free(a);
}

durable__stream_req_t *durable__stream_req_new(const char *payload,
                                               const char *subscriber,
                                               int64_t epoch,
                                               int64_t sequence) {
  durable__stream_req_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->base.free = req_free;
  r->payload = durable__strdup0(payload);
  r->subscriber = durable__strdup0(subscriber);
  r->epoch = epoch;
  r->sequence = sequence;
  if ((payload && !r->payload) || (subscriber && !r->subscriber)) {
    req_free(&r->base);
    return NULL;
  }
  return r;
}

durable__stream_req_t *durable__stream_append_new(const char *payload,
                                                  const char *id) {
  durable__stream_req_t *r = durable__stream_req_new(payload, NULL, 0, 0);
  if (r && id && (r->id = strdup(id)) == NULL) {
    req_free(&r->base);
    return NULL;
  }
  return r;
}

durable__stream_ans_t *durable__stream_ans_new(void) {
  durable__stream_ans_t *a = calloc(1, sizeof(*a));
  if (a)
    a->base.free = ans_free;
  return a;
}

int durable__stream_ans_set(char **field, const char *s) {
  char *copy = durable__strdup0(s);
  if (s && !copy)
    return DURABLE_ENOMEM;
  free(*field);
  *field = copy;
  return 0;
}

const durable__stream_ans_t *
durable__stream_answer(const durable_response_t *res) {
  return res->status == 0
             ? (const durable__stream_ans_t *)durable__response_body(res)
             : NULL;
}

durable__stream_req_t *durable__stream_req_parse(durable__stream_op_t op,
                                                 const char *json,
                                                 const char **why) {
  int code = 0;
  json_t *j = durable__json_tree(json, &code);
  const char *payload = json_string_value(json_object_get(j, "PayloadJson"));
  const char *sub = json_string_value(json_object_get(j, "Subscriber"));
  json_t *id = json_object_get(j, "Id");
  durable__stream_req_t *r = NULL;
  if (j == NULL) /* or JSON that there was no memory to parse */
    *why = code == DURABLE_ENOMEM ? "is out of memory"
                                  : "got a request that is not JSON";
  else if (op == DURABLE__OP_APPEND && payload == NULL)
    *why = "got an append without PayloadJson";
  else if (op == DURABLE__OP_APPEND && id && !json_is_string(id) &&
           !json_is_null(id))
    *why = "got an append whose Id is not a string";
  else if (op != DURABLE__OP_APPEND && sub == NULL)
    *why = "got a request without Subscriber";
  else if ((r = op == DURABLE__OP_APPEND
                    ? durable__stream_append_new(payload, json_string_value(id))
                    : durable__stream_req_new(
                          NULL, sub,
                          json_integer_value(json_object_get(j, "Epoch")),
                          json_integer_value(
                              json_object_get(j, "Sequence")))) == NULL)
    *why = "is out of memory";
  const char *start = json_string_value(json_object_get(j, "Start"));
  const char *group = json_string_value(json_object_get(j, "Group"));
  if (r && op == DURABLE__OP_GROUP &&
      (durable_group_check(group, NULL) < 0 ||
       (start && durable_start_parse(start, &r->start, NULL) < 0) ||
       (r->group = strdup(group)) == NULL)) {
    *why = "got a group request without a good Group and Start";
    durable__body_free(&r->base);
    r = NULL;
  }
  json_decref(j);
  return r;
}

static json_t *str_or_null(const char *s) {
  return s ? json_string(s) : json_null();
}

char *durable__stream_ans_json(durable__stream_op_t op,
                               const durable__stream_ans_t *a) {
  json_t *j = NULL;
  switch (op) {
  case DURABLE__OP_APPEND:
    j = json_pack("{s:I}", "Sequence", (json_int_t)a->sequence);
    break;
  case DURABLE__OP_CLAIM:
    j = json_pack("{s:b, s:I, s:I, s:o, s:o, s:o}", "Granted", a->ok, "Epoch",
                  (json_int_t)a->epoch, "Checkpoint", (json_int_t)a->checkpoint,
                  "Holder", str_or_null(a->holder), "HolderInstance",
                  str_or_null(a->holder_instance), "TookOverFrom",
                  str_or_null(a->took_over_from));
    break;
  case DURABLE__OP_ACK:
    j = json_pack("{s:b, s:o}", "Accepted", a->ok, "Reason",
                  str_or_null(a->reason));
    break;
  case DURABLE__OP_RELEASE:
    j = json_pack("{s:b}", "Released", a->ok);
    break;
  case DURABLE__OP_SEEK:
    j = json_pack("{s:b, s:I}", "Moved", a->ok, "Was",
                  (json_int_t)a->checkpoint);
    break;
  case DURABLE__OP_TRIM:
    j = json_pack("{s:b, s:I}", "Trimmed", a->ok, "Was",
                  (json_int_t)a->checkpoint);
    break;
  case DURABLE__OP_DELETE:
    j = json_pack("{s:b, s:I}", "Deleted", a->ok, "Was",
                  (json_int_t)a->checkpoint);
    break;
  case DURABLE__OP_GROUP:
    j = json_pack("{s:b, s:I}", "Made", a->ok, "Was",
                  (json_int_t)a->checkpoint);
    break;
  }
  char *text = j ? json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT) : NULL;
  json_decref(j);
  return text;
}

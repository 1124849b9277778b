/*
 * request.c: messages between hubs: routing, requests and their answers,
 * timeouts, and the reply handle a handler finishes its message with.
 *
 * A request is correlated by a mesh-wide id.  The requester keeps a pending
 * record (with its timeout timer) in the mesh's table; whoever answers first
 * -- the handler's reply, a refusal, the timeout -- queues one ENV_REPLY in
 * the requester's mailbox and removes the record, so a late second answer
 * finds nothing and is dropped.  The response callback runs as a turn of
 * the requester, like any other message.
 *
 *   requester --ENV_REQUEST--> target inbox --handler--> durable_reply_ok
 *   requester <--ENV_REPLY---- durable__answer(id) <-----------'
 */
#include "hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message and an answer as handed to a callback, with what the public
 * structs do not show: the typed body (durable__msg_take and
 * durable__response_body find it from the public part). */
typedef struct {
  durable_msg_t msg;
  durable__env_t *env;
} msg_ex_t;

typedef struct {
  durable_response_t res;
  durable__body_t *body;
} response_ex_t;

durable__body_t *durable__msg_take(const durable_msg_t *msg) {
  durable__env_t *env = ((const msg_ex_t *)msg)->env;
  durable__body_t *body = env->body;
  env->body = NULL;
  return body;
}

const durable__body_t *durable__response_body(const durable_response_t *res) {
  return ((const response_ex_t *)res)->body;
}

struct durable_reply_s {
  struct durable__queue link;  /* in hub->handling */
  struct durable__queue mlink; /* in mesh->replies */
  int detached;                /* the mesh is gone */
  durable_hub_t *hub;          /* the hub whose message this is (a reference) */
  uint64_t request_id;
  char *type;
  /* set for an init step instead of a message */
  void (*step_done)(durable_hub_t *hub, int status, const char *message);
  /* set for a continuation (durable__reply_callback) */
  durable__reply_fn then;
  void *then_data;
  int abandoned; /* answered ShuttingDown when the budget ran out */
};

/* ---- answers --------------------------------------------------------------
 */

static void on_pending_timer_closed(uv_handle_t *handle) {
  durable__pending_t *p = handle->data;
  durable_mesh_t *mesh = p->hub->mesh;
  durable_hub_unref(p->hub);
  free(p);
  durable__sched_handle_closed(&mesh->sched);
}

/* Take the record out of the table and its hub's list; the caller runs its
 * callback (or not) and then releases it. */
static void unlink_pending(durable__pending_t *p) {
  durable_hub_t *hub = p->hub;
  durable__map_del(&hub->mesh->pending, p->key);
  durable__queue_remove(&p->link);
  hub->npending--;
}

static void release_pending(durable__pending_t *p) {
  uv_timer_stop(&p->timer);
  uv_close((uv_handle_t *)&p->timer, on_pending_timer_closed);
}

static void on_request_timeout(uv_timer_t *timer);

void durable__answer(durable_mesh_t *mesh, uint64_t id, int status,
                     const char *payload, durable__body_t *body,
                     const char *message) {
  char key[24];
  snprintf(key, sizeof key, "%llu", (unsigned long long)id);
  durable__pending_t *p = durable__map_get(&mesh->pending, key);
  durable__env_t *env =
      p ? durable__env_new(ENV_REPLY, NULL, payload, NULL, NULL) : NULL;
  if (env == NULL) {
    /* answered already or timed out; or out of memory, and then the
     * requester hears that much soon, the timeout's way (not only at its
     * timeout: a consumer's turn waits a day) */
    durable__body_free(body);
    if (p) {
      p->lost = 1;
      uv_timer_start(&p->timer, on_request_timeout, DURABLE__TIMER_RETRY_MS,
                     uv_timer_get_repeat(&p->timer));
    }
    return;
  }
  env->body = status == 0 ? body : NULL;
  if (status != 0)
    durable__body_free(body);
  env->request_id = id;
  env->status = status;
  if (status < 0) {
    env->message = strdup(message ? message : durable_strerror(status));
    free(env->payload);
    env->payload = NULL;
  }
  durable__hub_enqueue(p->hub, env);
}

void durable__run_reply(durable_hub_t *hub, durable__env_t *env) {
  char key[24];
  snprintf(key, sizeof key, "%llu", (unsigned long long)env->request_id);
  durable__pending_t *p = durable__map_get(&hub->mesh->pending, key);
  if (p == NULL || p->hub != hub)
    return; /* a second answer: dropped */
  unlink_pending(p);
  response_ex_t rx = {.res = {.status = env->status,
                              .payload = env->status == 0 ? env->payload : NULL,
                              .message = env->status < 0 ? env->message : NULL},
                      .body = env->body};
  if (p->cb)
    p->cb(&rx.res, p->data);
  release_pending(p);
  durable__hub_check_quiesced(hub);
  if (hub->is_reads)
    durable__sched_changed(&hub->mesh->sched); /* a closing mesh waits */
}

void durable__fail_pending(durable_hub_t *hub, int status,
                           const char *message) {
  while (!durable__queue_empty(&hub->pending)) {
    durable__pending_t *p = DURABLE__QUEUE_DATA(
        durable__queue_head(&hub->pending), durable__pending_t, link);
    unlink_pending(p);
    response_ex_t rx = {.res = {.status = status, .message = message}};
    if (p->cb)
      p->cb(&rx.res, p->data);
    release_pending(p);
  }
}

static void on_request_timeout(uv_timer_t *timer) {
  durable__pending_t *p = timer->data;
  char message[DURABLE_PATH_MAX + 64];
  if (p->lost) {
    durable__answer(p->hub->mesh, p->id, DURABLE_ENOMEM, NULL, NULL,
                    "out of memory: its answer was lost (what was asked "
                    "may or may not have been done)");
    return;
  }
  snprintf(message, sizeof message, "no answer within %llu ms",
           (unsigned long long)uv_timer_get_repeat(timer));
  durable__answer(p->hub->mesh, p->id, DURABLE_ETIMEDOUT, NULL, NULL, message);
}

/* ---- routing ----------------------------------------------------------------
 */

static void refuse(durable_mesh_t *mesh, durable__env_t *env, int status,
                   const char *fmt, const char *address) {
  if (env->kind == ENV_REQUEST) {
    char message[DURABLE_PATH_MAX + 128];
    snprintf(message, sizeof message, fmt, address);
    durable__answer(mesh, env->request_id, status, NULL, NULL, message);
  } else {
    durable_mesh_log(mesh, DURABLE_LOG_DEBUG,
                     "[Hubs] dropped '%s' for '%s': no hub can take it",
                     env->type, address);
  }
  durable__env_free(env);
}

void durable__route(durable_mesh_t *mesh, durable__env_t *env) {
  durable_hub_t *hub = durable__map_get(&mesh->hubs, env->target);
  if (hub != NULL) {
    if (hub->level >= DURABLE_HUB_QUIESCING) {
      if (env->kind == ENV_REQUEST) {
        refuse(mesh, env, DURABLE_ESHUTDOWN,
               "hub '%s' is shutting down; ask again", hub->address);
      } else { /* a post waits for the next activation */
        durable__queue_insert_tail(&hub->deferred, &env->link);
      }
      return;
    }
    durable__hub_enqueue(hub, env);
    return;
  }
  if (mesh->closing && mesh->close_phase >= 2) {
    refuse(mesh, env, DURABLE_ESHUTDOWN, "the mesh is closing ('%s')",
           env->target);
    return;
  }
  if (durable_path_check(env->target, NULL) < 0) {
    refuse(mesh, env, DURABLE_ENOTFOUND, "no node at '%s'", env->target);
    return;
  }
  hub = durable__hub_new(mesh, env->target, DURABLE_HUB_STARTING);
  if (hub == NULL) {
    refuse(mesh, env, DURABLE_ENOMEM, "out of memory activating '%s'",
           env->target);
    return;
  }
  durable__hub_enqueue(hub, env);
  mesh->activate(mesh, hub);
}

/* ---- a principal's messages ------------------------------------------------
 *
 * A mesh acting as a principal reaches a node's hub by a request or a post
 * only where it may read the node, as durable_mesh_activate: asked of the
 * store first, so that a denied one activates nothing and learns nothing --
 * not whether a node is there, not its type -- whether or not the hub is
 * active here.  The runtime's own messages (its read-issuing hub's, typed
 * bodies, a hub's to itself) were checked where they were made, and pass;
 * the stream protocol ("durable.") is never a principal's to send. */

typedef struct {
  durable_mesh_t *mesh;
  durable__env_t *env;
} gate_t;

static void refuse_why(durable_mesh_t *mesh, durable__env_t *env, int status,
                       const char *why) {
  if (env->kind == ENV_REQUEST) {
    durable__answer(mesh, env->request_id, status, NULL, NULL, why);
  } else {
    durable_mesh_log(mesh, DURABLE_LOG_WARN,
                     "[Hubs] the post of '%s' from '%s' to '%s' was refused: "
                     "%s",
                     env->type, env->sender, env->target, why);
  }
  durable__env_free(env);
}

static void on_gate(const durable_result_t *res, void *data) {
  gate_t *g = data;
  durable_mesh_t *mesh = g->mesh;
  durable__env_t *env = g->env;
  free(g);
  if (res->status == 0 && !mesh->closing)
    durable__route(mesh, env);
  else if (res->status == 0)
    refuse_why(mesh, env, DURABLE_ESHUTDOWN, "the mesh is closing");
  else
    refuse_why(mesh, env, res->status, res->message);
}

static void route_from(durable_hub_t *from, durable__env_t *env) {
  durable_mesh_t *mesh = from->mesh;
  /* (and a hub's message to itself: a consumer's turn, a timer's) */
  if (mesh->principal == NULL || from == mesh->reads || env->body != NULL ||
      strcmp(env->target, from->address) == 0) {
    durable__route(mesh, env);
    return;
  }
  if (strncmp(env->type, DURABLE__RESERVED_PREFIX,
              strlen(DURABLE__RESERVED_PREFIX)) == 0) {
    /* the runtime's protocol: never a principal's, whatever it may read */
    char why[2 * DURABLE_PATH_MAX + 256];
    snprintf(why, sizeof why,
             "principal '%s' may not send '%s' to '%s': the stream protocol "
             "is the runtime's (publish and consume instead)",
             mesh->principal, env->type, env->target);
    refuse_why(mesh, env, DURABLE_EACCES, why);
    return;
  }
  gate_t *g = malloc(sizeof(*g));
  durable_error_t err = {0};
  if (g == NULL) {
    refuse_why(mesh, env, DURABLE_ENOMEM, "out of memory");
    return;
  }
  *g = (gate_t){mesh, env};
  if (durable__store_access(mesh->store, mesh->principal, env->target,
                            DURABLE_GRANT_READ, on_gate, g, &err) < 0) {
    free(g);
    refuse_why(mesh, env, err.code, err.message);
  }
}

static int check_send(durable_hub_t *from, const char *to, const char *type,
                      durable_error_t *err) {
  if (from == NULL || to == NULL || type == NULL || *type == '\0')
    return durable__error(err, DURABLE_EINVAL,
                          "a message needs a sender, a target and a type");
  durable_error_t why = {0}; /* every hub's address is a path */
  if (durable_path_check(to, &why) < 0)
    return durable__error(err, DURABLE_EINVAL, "cannot send '%s': %s", type,
                          why.message);
  if (from->level >= DURABLE_HUB_QUIESCING)
    return durable__error(err, DURABLE_ESHUTDOWN,
                          "hub '%s' is shutting down and sends no new "
                          "requests (cannot send '%s' to '%s')",
                          from->address, type, to);
  return 0;
}

/* A request with a JSON payload or a typed body (taken). */
static int request(durable_hub_t *from, const char *to, const char *type,
                   const char *payload, durable__body_t *body,
                   uint32_t timeout_ms, durable_response_cb cb, void *data,
                   durable_error_t *err) {
  int rc = check_send(from, to, type, err);
  if (rc < 0) {
    durable__body_free(body);
    return rc;
  }
  durable_mesh_t *mesh = from->mesh;
  durable__pending_t *p = calloc(1, sizeof(*p));
  durable__env_t *env =
      durable__env_new(ENV_REQUEST, type, payload, from->address, to);
  if (env != NULL)
    env->body = body;
  else
    durable__body_free(body);
  if (p == NULL || env == NULL) {
    free(p);
    durable__env_free(env);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  p->id = ++mesh->next_request_id;
  snprintf(p->key, sizeof p->key, "%llu", (unsigned long long)p->id);
  if (durable__map_put(&mesh->pending, p->key, p) < 0) {
    free(p);
    durable__env_free(env);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  p->hub = from;
  durable_hub_ref(from);
  p->cb = cb;
  p->data = data;
  durable__queue_insert_head(&from->pending, &p->link);
  from->npending++;
  uv_timer_init(mesh->loop, &p->timer);
  durable__sched_handle_opened(&mesh->sched);
  p->timer.data = p;
  uint32_t ms = timeout_ms ? timeout_ms : mesh->request_timeout_ms;
  uv_timer_start(&p->timer, on_request_timeout, ms, ms);
  env->request_id = p->id;
  route_from(from, env);
  return 0;
}

int durable_hub_request(durable_hub_t *from, const char *to, const char *type,
                        const char *payload, uint32_t timeout_ms,
                        durable_response_cb cb, void *data,
                        durable_error_t *err) {
  return request(from, to, type, payload, NULL, timeout_ms, cb, data, err);
}

int durable__hub_request_body(durable_hub_t *from, const char *to,
                              const char *type, durable__body_t *body,
                              uint32_t timeout_ms, durable_response_cb cb,
                              void *data, durable_error_t *err) {
  return request(from, to, type, NULL, body, timeout_ms, cb, data, err);
}

int durable_hub_post(durable_hub_t *from, const char *to, const char *type,
                     const char *payload, durable_error_t *err) {
  int rc = check_send(from, to, type, err);
  if (rc < 0)
    return rc;
  durable__env_t *env =
      durable__env_new(ENV_POST, type, payload, from->address, to);
  if (env == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  route_from(from, env);
  return 0;
}

/* ---- handling a message -----------------------------------------------------
 */

static durable_reply_t *reply_new(durable_hub_t *hub, uint64_t id,
                                  const char *type) {
  durable_reply_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->type = durable__strdup0(type);
  r->hub = hub;
  r->request_id = id;
  durable_hub_ref(hub);
  hub->in_flight++;
  durable__queue_insert_head(&hub->handling, &r->link);
  durable__queue_insert_head(&hub->mesh->replies, &r->mlink);
  return r;
}

void durable__detach_replies(durable_mesh_t *mesh) {
  struct durable__queue *q;
  while ((q = durable__queue_pop(&mesh->replies)) != NULL) {
    durable_reply_t *r = DURABLE__QUEUE_DATA(q, durable_reply_t, mlink);
    r->detached = 1;
    durable_hub_unref(r->hub);
    r->hub = NULL;
  }
}

void durable__abandon_replies(durable_hub_t *hub) {
  char message[DURABLE_PATH_MAX + 96];
  snprintf(message, sizeof message,
           "hub '%s' left before it answered (its quiesce budget ran out)",
           hub->address);
  struct durable__queue *q;
  DURABLE__QUEUE_FOREACH(q, &hub->handling) {
    durable_reply_t *r = DURABLE__QUEUE_DATA(q, durable_reply_t, link);
    if (r->request_id == 0)
      continue;
    durable__answer(hub->mesh, r->request_id, DURABLE_ESHUTDOWN, NULL, NULL,
                    message);
    r->request_id = 0;
    r->abandoned = 1;
  }
}

static void reply_finish(durable_reply_t *r, int status, const char *payload,
                         durable__body_t *body, const char *message,
                         durable__commit_t *effects) {
  if (r->detached) { /* its mesh is closed: nobody to tell */
    durable__commit_free(effects);
    durable__body_free(body);
    free(r->type);
    free(r);
    return;
  }
  durable_hub_t *hub = r->hub;
  durable__queue_remove(&r->mlink);
  if (r->step_done) {
    r->step_done(hub, status, message);
  } else if (r->then) {
    r->then(hub, status, payload, message, effects, r->then_data);
    effects = NULL; /* the continuation's now */
  } else if (r->request_id) {
    durable__answer(hub->mesh, r->request_id, status, payload, body, message);
    body = NULL;
  } else if (status < 0 && !r->abandoned) {
    durable_mesh_log(
        hub->mesh, DURABLE_LOG_WARN, "[Hubs] '%s' failed at hub '%s': %s",
        r->type, hub->address, message ? message : durable_strerror(status));
  }
  durable__commit_free(effects); /* only a continuation takes them */
  durable__body_free(body);      /* nobody to read it */
  hub->in_flight--;
  durable__queue_remove(&r->link);
  free(r->type);
  free(r);
  durable__hub_check_quiesced(hub);
  durable_hub_unref(hub);
}

void durable_reply_ok(durable_reply_t *reply, const char *payload) {
  if (reply)
    reply_finish(reply, 0, payload ? payload : "null", NULL, NULL, NULL);
}

void durable__reply_body(durable_reply_t *reply, durable__body_t *body) {
  if (reply)
    reply_finish(reply, 0, "null", body, NULL, NULL);
  else
    durable__body_free(body);
}

void durable_reply_fail(durable_reply_t *reply, int code, const char *message) {
  if (reply == NULL)
    return;
  if (code >= 0)
    code = DURABLE_EFAILED;
  reply_finish(reply, code, NULL, NULL,
               message ? message : durable_strerror(code), NULL);
}

void durable_reply_fail_at(durable_reply_t *reply, int64_t sequence, int code,
                           const char *message) {
  if (reply == NULL)
    return;
  if (code >= 0)
    code = DURABLE_EFAILED;
  /* a continuation (a batch's turn) hears the item as the payload's
   * number; anyone else, the failure alone */
  char at[24];
  snprintf(at, sizeof at, "%lld", (long long)sequence);
  reply_finish(reply, code, reply->then && sequence > 0 ? at : NULL, NULL,
               message ? message : durable_strerror(code), NULL);
}

/* durable_reply_commit of a message: the writes first, then the answer. */
typedef struct {
  durable_reply_t *reply;
  durable__write_set_t *set;
  char payload[]; /* the answer once they are saved */
} commit_t;

static void on_committed(const durable_result_t *res, void *data) {
  commit_t *c = data;
  if (res->status == 0)
    reply_finish(c->reply, 0, c->payload, NULL, NULL, NULL);
  else
    reply_finish(c->reply, res->status, NULL, NULL, res->message, NULL);
  free(c->set);
  free(c);
}

void durable__commit_free(durable__commit_t *commit) {
  if (commit) {
    free(commit->writes);
    free(commit);
  }
}

/* A copy of the handler's appends, strings after the array. */
static durable__commit_t *commit_new(const durable_publish_t *p, size_t n,
                                     durable_error_t *err) {
  size_t bytes = sizeof(durable__commit_t) + n * sizeof(*p);
  /* the stream ids are the streams layer's to check (consumer.c) */
  for (size_t i = 0; i < n; i++) {
    if (p[i].stream.ns == NULL || p[i].stream.key == NULL) {
      durable__error(err, DURABLE_EINVAL, "append %zu names no stream", i + 1);
      return NULL;
    }
    if (p[i].payload == NULL || !durable__json_valid(p[i].payload)) {
      durable__error(err, DURABLE_EINVAL, "append %zu: the payload is not JSON",
                     i + 1);
      return NULL;
    }
    if (durable__json_is_null(p[i].payload)) {
      durable__error(err, DURABLE_EINVAL,
                     "append %zu: a durable stream item needs a payload (null "
                     "is none)",
                     i + 1);
      return NULL;
    }
    bytes += strlen(p[i].stream.ns) + strlen(p[i].stream.key) +
             strlen(p[i].payload) + 3;
  }
  durable__commit_t *c = calloc(1, bytes);
  if (c == NULL) {
    durable__error(err, DURABLE_ENOMEM, "out of memory");
    return NULL;
  }
  c->npublishes = n;
  char *at = (char *)(c->publishes + n);
  for (size_t i = 0; i < n; i++) {
    const char *src[3] = {p[i].stream.ns, p[i].stream.key, p[i].payload};
    const char **dst[3] = {&c->publishes[i].stream.ns,
                           &c->publishes[i].stream.key,
                           &c->publishes[i].payload};
    for (int k = 0; k < 3; k++) {
      size_t len = strlen(src[k]) + 1;
      *dst[k] = memcpy(at, src[k], len);
      at += len;
    }
  }
  return c;
}

int durable_reply_commit(durable_reply_t *reply, const char *payload,
                         const durable_write_t *writes, size_t count,
                         durable_error_t *err) {
  return durable_reply_commit_with(reply, payload, writes, count, NULL, 0, err);
}

int durable_reply_commit_with(durable_reply_t *reply, const char *payload,
                              const durable_write_t *writes, size_t count,
                              const durable_publish_t *publishes,
                              size_t npublishes, durable_error_t *err) {
  if (reply == NULL)
    return durable__error(err, DURABLE_EINVAL, "no reply");
  if (payload == NULL)
    payload = "null";
  if (!durable__json_valid(payload))
    return durable__error(err, DURABLE_EINVAL, "the reply is not JSON");
  if (npublishes > 0 && !reply->then && !reply->detached)
    return durable__error(err, DURABLE_EINVAL,
                          "appends to other streams are committed with a "
                          "stream item's acknowledgement only");
  if (count == 0 && npublishes == 0)
    return durable__error(err, DURABLE_EINVAL, "no writes given");
  durable__write_set_t *set = NULL;
  if (count > 0 && (set = durable__write_set_new(writes, count, err)) == NULL)
    return err ? err->code : DURABLE_EINVAL;
  if (reply->detached || reply->then) {
    /* a consumer's turn: the writes go with the item's acknowledgement */
    durable__commit_t *c = commit_new(publishes, npublishes, err);
    if (c == NULL) {
      free(set);
      return err ? err->code : DURABLE_ENOMEM;
    }
    c->writes = set;
    reply_finish(reply, 0, payload, NULL, NULL, c);
    return 0;
  }
  size_t n = strlen(payload) + 1;
  commit_t *c = malloc(sizeof(*c) + n);
  if (c == NULL) {
    free(set);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  c->reply = reply;
  c->set = set;
  memcpy(c->payload, payload, n);
  durable_mesh_t *mesh = reply->hub->mesh;
  int rc = durable_store_write_as(mesh->store, mesh->principal, set->writes,
                                  set->count, on_committed, c, err);
  if (rc < 0) {
    free(set);
    free(c);
  }
  return rc;
}

durable_reply_t *durable__step_reply(durable_hub_t *hub,
                                     void (*done)(durable_hub_t *hub,
                                                  int status,
                                                  const char *message)) {
  durable_reply_t *r = reply_new(hub, 0, "init");
  if (r)
    r->step_done = done;
  return r;
}

durable_reply_t *durable__reply_callback(durable_hub_t *hub,
                                         durable__reply_fn fn, void *data) {
  durable_reply_t *r = reply_new(hub, 0, "continuation");
  if (r) {
    r->then = fn;
    r->then_data = data;
  }
  return r;
}

static const durable__handler_t *handler_for(durable_hub_t *hub,
                                             const char *type) {
  for (size_t i = 0; i < hub->nhandlers; i++)
    if (strcmp(hub->handlers[i].msg_type, type) == 0)
      return &hub->handlers[i];
  if (hub->type == NULL)
    return NULL;
  for (size_t i = 0; i < hub->type->nhandlers; i++)
    if (strcmp(hub->type->handlers[i].msg_type, type) == 0)
      return &hub->type->handlers[i];
  return NULL;
}

int durable__hub_handles(durable_hub_t *hub, const char *type) {
  return strcmp(type, "ping") == 0 || handler_for(hub, type) != NULL;
}

void durable__run_message(durable_hub_t *hub, durable__env_t *env) {
  durable_mesh_t *mesh = hub->mesh;
  if (hub->level >= DURABLE_HUB_QUIESCING && !env->own_timer) {
    /* queued before the recycle began: a request is refused (the sender
     * asks again), a post waits for the next activation.  A post from the
     * hub's own timer runs: a handler in flight may be waiting for it. */
    env->target = env->target ? env->target : strdup(hub->address);
    durable__route(mesh, env);
    return;
  }
  mesh->stats.messages++;
  if (strcmp(env->type, "ping") == 0) {
    if (env->kind == ENV_REQUEST)
      durable__answer(mesh, env->request_id, 0, "\"pong\"", NULL, NULL);
    durable__env_free(env);
    return;
  }
  const durable__handler_t *h = handler_for(hub, env->type);
  if (h == NULL) {
    char message[DURABLE_PATH_MAX + 128];
    snprintf(message, sizeof message, "hub '%s' has no handler for '%s'",
             hub->address, env->type);
    if (env->kind == ENV_REQUEST)
      durable__answer(mesh, env->request_id, DURABLE_EFAILED, NULL, NULL,
                      message);
    else
      durable_mesh_log(mesh, DURABLE_LOG_WARN, "[Hubs] %s", message);
    durable__env_free(env);
    return;
  }
  durable_reply_t *reply = reply_new(hub, env->request_id, env->type);
  if (reply == NULL) {
    if (env->kind == ENV_REQUEST)
      durable__answer(mesh, env->request_id, DURABLE_ENOMEM, NULL, NULL,
                      "out of memory");
    if (env->own_timer &&
        durable_hub_post_after(hub, DURABLE__TIMER_RETRY_MS, env->type,
                               env->payload, NULL) < 0 &&
        hub->level <= DURABLE_HUB_QUIESCING) {
      /* a timer's message is not dropped (hub.h): again later, or at the
       * next turn when not even a timer can be had */
      durable__hub_enqueue(hub, env);
      return;
    }
    durable__env_free(env);
    return;
  }
  msg_ex_t mx = {.msg = {.type = env->type,
                         .payload = env->payload,
                         .sender = env->sender,
                         .request_id = env->request_id},
                 .env = env};
  h->cb(hub, &mx.msg, reply, h->data);
  durable__env_free(env);
}

/* What hub.c does with messages, through its mesh (hub.h). */
const durable__messaging_t durable__messaging = {
    .run_message = durable__run_message,
    .run_reply = durable__run_reply,
    .route = durable__route,
    .answer = durable__answer,
    .fail_pending = durable__fail_pending,
    .abandon_replies = durable__abandon_replies,
};

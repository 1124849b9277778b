/*
 * hub.c: the hub userdata (requests, posts, timers), the reply userdata a
 * Lua handler finishes its message with, and the C callbacks that run Lua
 * handlers, init steps and dispose actions.
 *
 * A hub userdata holds a reference on its C hub (durable_hub_ref), so a hub
 * that Lua keeps stays readable after it died (its address, its run level).
 * There is at most one userdata per C hub at a time: a weak table maps the
 * hub pointer to it, so a handler sees the same object on every message of
 * one activation, and a fresh activation is a fresh object.
 *
 * A message reaches Lua as fn(hub, msg, reply), where fn is the wrapper that
 * lua/durable/plugin.lua made around the user's handler.  The wrapper runs
 * the handler in a coroutine and turns its outcome (nil, a value, a
 * completion, a raise -- now or after awaits) into reply:ok(value) or
 * reply:fail(message, code), and logs a raise with its traceback.  When the
 * wrapper itself fails, dlua_pcall gives back the message and this file
 * fails the reply with it (EFAILED) and logs the traceback; the hub lives on.
 * A reply that is garbage-collected unfinished (a completion nobody will
 * settle) is failed by its __gc, so the sender is not left waiting forever.
 */
#include "lcore.h"

#include <stdlib.h>
#include <string.h>

static const char hubs_key = 0; /* weak: lightuserdata(hub) -> userdata */
static const char hub_methods_key = 0;

/* ---- the hub userdata
 * -------------------------------------------------------------- */

int dlua_push_hub(lua_State *L, dlua_mesh_t *m, durable_hub_t *hub) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &hubs_key);
  if (lua_rawgetp(L, -1, hub) == LUA_TUSERDATA) {
    dlua_hub_t *h = lua_touserdata(L, -1);
    if (h->hub == hub) {
      lua_remove(L, -2);
      return 1;
    }
  }
  lua_pop(L, 1);
  /* stack: hubs */
  if (!dlua_push_mesh(L, m)) {
    lua_pop(L, 1);
    return 0;
  }
  dlua_hub_t *h = lua_newuserdatauv(L, sizeof(*h), 1);
  h->hub = NULL;
  h->m = m;
  luaL_setmetatable(L, DLUA_HUB_MT);
  /* stack: hubs mesh h */
  lua_rotate(L, -2, 1);
  /* stack: hubs h mesh */
  lua_setiuservalue(L, -2, 1); /* the mesh outlives the hubs Lua holds */
  durable_hub_ref(hub);
  h->hub = hub;
  lua_pushvalue(L, -1);
  lua_rawsetp(L, -3, hub);
  lua_remove(L, -2);
  /* stack: h */
  return 1;
}

static dlua_hub_t *to_hub(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, DLUA_HUB_MT);
}

static dlua_hub_t *check_hub(lua_State *L, int idx) {
  dlua_hub_t *h = to_hub(L, idx);
  if (h->hub == NULL)
    luaL_error(L, "the hub was released");
  if (h->m->mesh == NULL)
    luaL_error(L, "the mesh of hub '%s' is closed",
               durable_hub_address(h->hub));
  return h;
}

static int h_release(lua_State *L) {
  dlua_hub_t *h = to_hub(L, 1);
  if (h->hub) {
    durable_hub_t *hub = h->hub;
    h->hub = NULL;
    durable_hub_unref(hub);
  }
  return 0;
}

/* hub.address, hub.node_type, hub.run_level, hub.incarnation, hub.mesh;
 * anything else from the methods table (upvalue 1). */
static int h_index(lua_State *L) {
  dlua_hub_t *h = to_hub(L, 1);
  const char *key = lua_tostring(L, 2);
  if (key && lua_type(L, 2) == LUA_TSTRING) {
    if (strcmp(key, "mesh") == 0) {
      lua_getiuservalue(L, 1, 1);
      return 1;
    }
    int field = strcmp(key, "address") == 0 || strcmp(key, "node_type") == 0 ||
                strcmp(key, "run_level") == 0 ||
                strcmp(key, "incarnation") == 0;
    if (field) {
      if (h->hub == NULL)
        return luaL_error(L, "the hub was released");
      if (key[0] == 'a')
        lua_pushstring(L, durable_hub_address(h->hub));
      else if (key[0] == 'n')
        lua_pushstring(L, durable_hub_node_type(h->hub));
      else if (key[0] == 'r')
        lua_pushstring(L,
                       durable_run_level_name(durable_hub_run_level(h->hub)));
      else
        lua_pushinteger(L, (lua_Integer)durable_hub_incarnation(h->hub));
      return 1;
    }
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static int h_tostring(lua_State *L) {
  dlua_hub_t *h = to_hub(L, 1);
  if (h->hub)
    lua_pushfstring(L, "durable.hub(%s, %s)", durable_hub_address(h->hub),
                    durable_run_level_name(durable_hub_run_level(h->hub)));
  else
    lua_pushliteral(L, "durable.hub(released)");
  return 1;
}

static char *check_payload(lua_State *L, int idx, const char *what) {
  char err[512];
  char *text = dlua_encode(L, idx, err, sizeof err);
  if (text == NULL)
    luaL_error(L, "%s: payload: %s", what, err);
  return text;
}

static void on_response(const durable_response_t *res, void *data) {
  dlua_req_t *r = data;
  lua_State *L = dlua_req_begin(r);
  if (L == NULL)
    return;
  char err[512];
  if (res->status < 0) {
    lua_pushboolean(L, 0);
    lua_pushstring(L,
                   res->message ? res->message : durable_strerror(res->status));
    lua_pushstring(L, durable_err_name(res->status));
    dlua_req_call(r, L, 3);
  } else if (res->payload == NULL || strcmp(res->payload, "null") == 0) {
    lua_pushboolean(L, 1); /* a reply of null (a handler returned nil): nil */
    lua_pushnil(L);
    dlua_req_call(r, L, 2);
  } else {
    lua_pushboolean(L, 1);
    if (dlua_decode(L, res->payload, err, sizeof err) < 0) {
      lua_pop(L, 1);
      lua_pushboolean(L, 0);
      lua_pushfstring(L, "the reply is not JSON: %s", err);
      lua_pushstring(L, durable_err_name(DURABLE_EIO));
      dlua_req_call(r, L, 3);
      return;
    }
    dlua_req_call(r, L, 2);
  }
}

/* hub:_request(to, type, payload, timeout_ms, cb) -> true | nil, msg, code.
 * cb(true, decoded reply) or cb(false, message, code); it runs as a turn of
 * this hub. */
static int h_request(lua_State *L) {
  dlua_hub_t *h = check_hub(L, 1);
  const char *to = dlua_check_text(L, 2, "request: address");
  const char *type = dlua_check_text(L, 3, "request: message type");
  lua_Integer timeout = luaL_optinteger(L, 5, 0);
  luaL_argcheck(L, timeout >= 0 && timeout <= UINT32_MAX, 5,
                "timeout_ms out of range");
  luaL_checktype(L, 6, LUA_TFUNCTION);
  char *payload = check_payload(L, 4, "request");
  dlua_req_t *r = dlua_req_new(L, h->m, 6);
  durable_error_t err = {0};
  int rc = durable_hub_request(h->hub, to, type, payload, (uint32_t)timeout,
                               on_response, r, &err);
  free(payload);
  return dlua_req_submitted(L, r, rc, &err, "request");
}

/* hub:post(to, type [, payload]) -> true | nil, message, code: a message
 * nobody awaits. */
static int h_post(lua_State *L) {
  dlua_hub_t *h = check_hub(L, 1);
  const char *to = dlua_check_text(L, 2, "post: address");
  const char *type = dlua_check_text(L, 3, "post: message type");
  char *payload = check_payload(L, 4, "post");
  durable_error_t err = {0};
  int rc = durable_hub_post(h->hub, to, type, payload, &err);
  free(payload);
  if (rc == DURABLE_EINVAL)
    return luaL_error(L, "post: %s", err.message);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* hub:timer(ms, type [, payload]) -> true | nil, message, code: post
 * type/payload to this hub after ms (a message, never a direct call). */
static int h_timer(lua_State *L) {
  dlua_hub_t *h = check_hub(L, 1);
  lua_Integer ms = luaL_checkinteger(L, 2);
  luaL_argcheck(L, ms >= 0 && ms <= UINT32_MAX, 2, "ms out of range");
  const char *type = dlua_check_text(L, 3, "timer: message type");
  char *payload = check_payload(L, 4, "timer");
  durable_error_t err = {0};
  int rc = durable_hub_post_after(h->hub, (uint32_t)ms, type, payload, &err);
  free(payload);
  if (rc == DURABLE_EINVAL)
    return luaL_error(L, "timer: %s", err.message);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- the reply userdata
 * ------------------------------------------------------------ */

dlua_reply_t *dlua_push_reply(lua_State *L, dlua_mesh_t *m, durable_hub_t *hub,
                              durable_reply_t *reply) {
  dlua_reply_t *r = lua_newuserdatauv(L, sizeof(*r), 0);
  r->reply = reply;
  r->hub = hub;
  durable_hub_ref(hub);
  r->m = m;
  durable__queue_insert_head(&m->replies, &r->link);
  luaL_setmetatable(L, DLUA_REPLY_MT);
  return r;
}

/* Put an unlinked reply back in its mesh's list, holding `hub` again. */
static void reply_link(dlua_reply_t *r, durable_hub_t *hub) {
  r->hub = hub;
  durable_hub_ref(hub);
  durable__queue_insert_head(&r->m->replies, &r->link);
}

/* (Unlinking one already unlinked does nothing: queue.h.) */
static void reply_unlink(dlua_reply_t *r) {
  durable__queue_remove(&r->link);
  if (r->hub) {
    durable_hub_t *hub = r->hub;
    r->hub = NULL;
    durable_hub_unref(hub);
  }
}

/* The C reply to finish, taken off the mesh's list: NULL when it was
 * finished already.  Taken before finishing, which may run Lua (dispose
 * actions and recycle callbacks, nested) that must not see it again. */
static durable_reply_t *reply_take(dlua_reply_t *r) {
  durable_reply_t *reply = r->reply;
  if (reply == NULL)
    return NULL;
  r->reply = NULL;
  reply_unlink(r);
  return reply;
}

void dlua_reply_finish(dlua_reply_t *r, int code, const char *payload,
                       const char *message) {
  durable_reply_t *reply = reply_take(r);
  if (reply == NULL)
    return;
  if (code == 0)
    durable_reply_ok(reply, payload);
  else
    durable_reply_fail(reply, code, message);
}

typedef struct dlua_dropped_s {
  struct dlua_dropped_s *next;
  durable_reply_t *reply;
} dlua_dropped_t;

#define DROPPED_MESSAGE "the handler's completion was dropped before it settled"

void dlua_replies_flush_dropped(dlua_mesh_t *m) {
  while (m->dropped) {
    dlua_dropped_t *d = m->dropped;
    m->dropped = d->next;
    durable_reply_fail(d->reply, DURABLE_EFAILED, DROPPED_MESSAGE);
    free(d);
  }
}

static dlua_reply_t *reply_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, dlua_reply_t, link);
}

void dlua_replies_fail_dead(dlua_mesh_t *m) {
  struct durable__queue *q = durable__queue_head(&m->replies);
  while (q != &m->replies) {
    dlua_reply_t *r = reply_of(q);
    struct durable__queue *next = q->next;
    if (r->hub && durable_hub_run_level(r->hub) == DURABLE_HUB_DEAD) {
      /* finishing one can finish others (a dispose action): start over */
      dlua_reply_finish(r, DURABLE_ESHUTDOWN, NULL,
                        "the hub left before its handler finished");
      next = durable__queue_head(&m->replies);
    }
    q = next;
  }
}

void dlua_replies_fail_all(dlua_mesh_t *m, int code, const char *message) {
  dlua_replies_flush_dropped(m);
  while (!durable__queue_empty(&m->replies))
    dlua_reply_finish(reply_of(durable__queue_head(&m->replies)), code, NULL,
                      message);
}

void dlua_replies_detach(dlua_mesh_t *m) {
  /* The mesh is freed: these can no longer be finished (their C replies
   * are lost, with the hub reference each holds). */
  while (m->dropped) {
    dlua_dropped_t *d = m->dropped;
    m->dropped = d->next;
    free(d);
  }
  while (!durable__queue_empty(&m->replies)) {
    dlua_reply_t *r = reply_of(durable__queue_head(&m->replies));
    r->reply = NULL;
    reply_unlink(r);
  }
}

static dlua_reply_t *to_reply(lua_State *L) {
  return luaL_checkudata(L, 1, DLUA_REPLY_MT);
}

/* reply:ok([value]) -> true, or false when it was finished already. */
static int r_ok(lua_State *L) {
  dlua_reply_t *r = to_reply(L);
  if (r->reply == NULL) {
    lua_pushboolean(L, 0);
    return 1;
  }
  char err[512];
  char *text = dlua_encode(L, 2, err, sizeof err);
  if (text == NULL)
    return luaL_error(L, "the handler's result: %s", err);
  dlua_reply_finish(r, 0, text, NULL);
  free(text);
  lua_pushboolean(L, 1);
  return 1;
}

/* reply:commit(writes [, value [, appends]]) -> true, or false when it was
 * finished already: finish with `writes` committed in one transaction (for
 * a stream item: with its acknowledgement, under the lease; for a message:
 * before the reply `value`), and for a stream item `appends` ({ namespace=,
 * key=, payload= }, ...) made after it through its outbox.  Bad writes or
 * appends raise, naming which; the reply is then left unfinished. */
static int r_commit(lua_State *L) {
  dlua_reply_t *r = to_reply(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 4))
    luaL_checktype(L, 4, LUA_TTABLE);
  if (r->reply == NULL) {
    lua_pushboolean(L, 0);
    return 1;
  }
  char why[512];
  char *text = dlua_encode(L, 3, why, sizeof why);
  if (text == NULL)
    return luaL_error(L, "the handler's result: %s", why);
  dlua_writes_t w = {0};
  if (luaL_len(L, 2) > 0 && dlua_writes_read(L, 2, &w, why, sizeof why) < 0) {
    free(text);
    return luaL_error(L, "%s", why);
  }
  /* the appends: strings anchored on the stack, payloads encoded */
  size_t np = lua_istable(L, 4) ? (size_t)luaL_len(L, 4) : 0;
  durable_publish_t *pubs = np ? calloc(np, sizeof(*pubs)) : NULL;
  char **texts = np ? calloc(np, sizeof(char *)) : NULL;
  why[0] = '\0';
  if (np && (pubs == NULL || texts == NULL))
    snprintf(why, sizeof why, "out of memory");
  for (size_t i = 0; i < np && why[0] == '\0'; i++) {
    lua_geti(L, 4, (lua_Integer)i + 1);
    int t = lua_gettop(L);
    lua_getfield(L, t, "namespace");
    lua_getfield(L, t, "key");
    lua_getfield(L, t, "payload");
    pubs[i].stream.ns = lua_tostring(L, t + 1);
    pubs[i].stream.key = lua_tostring(L, t + 2);
    if (pubs[i].stream.ns == NULL || pubs[i].stream.key == NULL ||
        dlua_has_nul(L, t + 1, "namespace", why, sizeof why) ||
        dlua_has_nul(L, t + 2, "key", why, sizeof why)) {
      if (why[0] == '\0')
        snprintf(why, sizeof why, "append %zu needs a namespace and a key",
                 i + 1);
      break;
    }
    char err[400];
    if ((texts[i] = dlua_encode(L, t + 3, err, sizeof err)) == NULL)
      snprintf(why, sizeof why, "append %zu: %s", i + 1, err);
    pubs[i].payload = texts[i];
    lua_checkstack(L, 8);
  }
  int rc = 0;
  durable_error_t err = {0};
  durable_reply_t *reply = r->reply;
  durable_hub_t *hub = r->hub;
  if (why[0] == '\0') {
    /* unlinked first, as dlua_reply_finish does: finishing may run Lua */
    durable_hub_ref(hub);
    r->reply = NULL;
    reply_unlink(r);
    rc = durable_reply_commit_with(reply, text, w.writes, w.count, pubs, np,
                                   &err);
    if (rc < 0) { /* refused as arguments: the reply is still to finish */
      r->reply = reply;
      reply_link(r, hub);
    }
    durable_hub_unref(hub);
  }
  for (size_t i = 0; texts && i < np; i++)
    free(texts[i]);
  free(texts);
  free(pubs);
  dlua_writes_free(&w);
  free(text);
  if (why[0])
    return luaL_error(L, "%s", why);
  if (rc < 0)
    return luaL_error(L, "%s", err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* reply:fail(message [, code [, at]]) -> true, or false when it was
 * finished already.  The sender gets the failure with the message and the
 * code ("ECONFLICT"...; default and unknown names: EFAILED).  `at`, the
 * sequence of the item that failed, is for a batch handler's reply: the
 * runtime then stops at that item rather than searching the batch for it
 * (durable_reply_fail_at); any other reply fails as without it. */
static int r_fail(lua_State *L) {
  dlua_reply_t *r = to_reply(L);
  const char *message = luaL_optstring(L, 2, "failed");
  int code = dlua_code_named(luaL_optstring(L, 3, NULL));
  if (code == 0) /* none, or a name the runtime does not have */
    code = DURABLE_EFAILED;
  int named = !lua_isnoneornil(L, 4);
  lua_Integer at = named ? luaL_checkinteger(L, 4) : 0;
  durable_reply_t *reply = reply_take(r);
  lua_pushboolean(L, reply != NULL);
  if (reply == NULL)
    return 1;
  if (named)
    durable_reply_fail_at(reply, (int64_t)at, code, message);
  else
    durable_reply_fail(reply, code, message);
  return 1;
}

/* reply:pending() -> whether it still waits to be finished. */
static int r_pending(lua_State *L) {
  lua_pushboolean(L, to_reply(L)->reply != NULL);
  return 1;
}

/* __gc and __close: an unfinished reply is failed, so its sender is not
 * left waiting -- but later, at a safe point (dlua_replies_flush_dropped):
 * finishing a reply runs runtime code (a quiesce may end, dispose actions
 * run), which must not happen inside whatever allocation triggered the GC. */
static int r_gc(lua_State *L) {
  dlua_reply_t *r = to_reply(L);
  if (r->reply == NULL)
    return 0;
  /* Lua frees the userdata after this: it must be off m->replies whatever
   * happens below */
  durable_reply_t *reply = r->reply;
  r->reply = NULL;
  reply_unlink(r);
  dlua_dropped_t *d = malloc(sizeof(*d));
  if (d == NULL)
    return 0; /* the request's own timeout answers it */
  d->reply = reply;
  d->next = r->m->dropped;
  r->m->dropped = d;
  return 0;
}

/* ---- calling Lua handlers
 * ----------------------------------------------------------- */

/* Log a failed entry with its traceback; stack: message. */
static void log_failure(dlua_mesh_t *m, lua_State *L, const char *what,
                        const dlua_fn_t *f, durable_hub_t *hub) {
  dlua_mesh_log(m, DURABLE_LOG_WARN,
                "[Lua] %s '%s' of NodeType '%s' at hub "
                "'%s' failed: %s",
                what, f->msg_type, f->node_type, durable_hub_address(hub),
                dlua_traceback(L));
}

/* Call f(hub, [msg,] reply); fail the reply with the error if it raised. */
static void call_with_reply(dlua_fn_t *f, durable_hub_t *hub,
                            const durable_msg_t *msg, durable_reply_t *reply) {
  dlua_mesh_t *m = f->m;
  lua_State *L = dlua_mesh_lua(m);
  if (L == NULL || !lua_checkstack(L, 16)) {
    durable_reply_fail(reply, DURABLE_ESHUTDOWN, "the Lua state is closing");
    return;
  }
  int top = lua_gettop(L);
  dlua_reply_t *r = dlua_push_reply(L, m, hub, reply);
  /* stack: r (anchors the reply while we look at it after the call) */
  lua_rawgeti(L, LUA_REGISTRYINDEX, f->ref);
  if (!dlua_push_hub(L, m, hub)) {
    lua_settop(L, top);
    dlua_reply_finish(r, DURABLE_ESHUTDOWN, NULL,
                      "the mesh is being collected");
    return;
  }
  int nargs = 2;
  if (msg) {
    char err[512];
    lua_createtable(L, 0, 4);
    lua_pushstring(L, msg->type);
    lua_setfield(L, -2, "type");
    lua_pushstring(L, msg->sender ? msg->sender : "");
    lua_setfield(L, -2, "sender");
    /* no payload (null) is no field; a nested null is durable.null */
    if (msg->payload && strcmp(msg->payload, "null") != 0 &&
        dlua_decode(L, msg->payload, err, sizeof err) == 0)
      lua_setfield(L, -2, "payload");
    lua_pushboolean(L, msg->request_id != 0);
    lua_setfield(L, -2, "awaited");
    nargs = 3;
  }
  lua_pushvalue(L, top + 1);
  /* stack: r fn hub [msg] r */
  if (dlua_pcall(L, m->S, m->budget, nargs, 0) != LUA_OK) {
    const char *message = lua_tostring(L, -1);
    log_failure(m, L, msg ? "handler for" : "init step", f, hub);
    dlua_reply_finish(r, DURABLE_EFAILED, NULL, message ? message : "failed");
  }
  lua_settop(L, top);
}

void dlua_handler_cb(durable_hub_t *hub, const durable_msg_t *msg,
                     durable_reply_t *reply, void *data) {
  call_with_reply(data, hub, msg, reply);
}

void dlua_step_cb(durable_hub_t *hub, durable_reply_t *done, void *data) {
  call_with_reply(data, hub, NULL, done);
}

void dlua_dispose_cb(durable_hub_t *hub, void *data) {
  dlua_fn_t *f = data;
  dlua_mesh_t *m = f->m;
  lua_State *L = dlua_mesh_lua(m);
  if (L == NULL || !lua_checkstack(L, 8))
    return;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, f->ref);
  if (!dlua_push_hub(L, m, hub)) {
    lua_settop(L, top);
    return;
  }
  if (dlua_pcall(L, m->S, m->budget, 1, 0) != LUA_OK)
    log_failure(m, L, "dispose action", f, hub);
  lua_settop(L, top);
}

void dlua_open_hub(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"_request", h_request}, {"post", h_post}, {"timer", h_timer},
      {"release", h_release},  {NULL, NULL},
  };
  /* stack: module */
  dlua_registry_table(L, &hubs_key, "v");
  lua_pop(L, 1);
  dlua_registry_table(L, &hub_methods_key, NULL);
  luaL_setfuncs(L, methods, 0);
  /* stack: module methods */
  luaL_newmetatable(L, DLUA_HUB_MT);
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, h_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, h_release);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, h_release);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, h_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_setfield(L, -2, "Hub");

  static const luaL_Reg reply_methods[] = {
      {"ok", r_ok},           {"fail", r_fail}, {"commit", r_commit},
      {"pending", r_pending}, {NULL, NULL},
  };
  if (luaL_newmetatable(L, DLUA_REPLY_MT)) {
    luaL_newlib(L, reply_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, r_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, r_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
}

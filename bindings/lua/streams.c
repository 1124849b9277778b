/*
 * streams.c: durable streams seen from Lua: publish, consumers on a
 * NodeType or on one hub, the operator's calls (seek, trim, delete,
 * retention), the stream id checks, and what the mesh does with all of it
 * (after each loop step, at its close).  The plain reader is reader.c, a
 * durable.source is source.c.
 *
 * A consumer calls back into Lua for three things, each through
 * dlua_pcall (one protected call, the instruction budget), in turns of its
 * hub:
 *
 *   key_of(hub)     -> spec.key_of(hub): the owner's path
 *   source_of(hub)  -> spec.source_of(hub): a source table or nil
 *   handler(item)   -> spec.run(hub, item, reply): the user's handler,
 *                      finished through the reply
 *   batch(items)    -> spec.run(hub, items, reply) when spec.batch is set:
 *                      the items an array, one reply for them all
 *
 * A publish's answer comes from inside the store's libuv callbacks, so it
 * is copied (the sequence) into the mesh's queue and delivered after
 * uv_run returned (turns.c).
 *
 * `spec` is a table lua/durable/streams.lua builds around the user's
 * functions (it validates what they return, and turns a returned
 * completion into the reply), so this file only moves values across.
 *
 * Lifetimes, and so registry references:
 *
 *   a NodeType's consumer   the spec table, for the mesh's life
 *   a hub's consumer        the spec table and the hub (a reference), and
 *   a consumer's source     the source's functions, bound to one hub
 *                           activation: released once that hub is Dead
 *                           (looked at after every loop step) or when the
 *                           mesh closes -- never left to the garbage
 *                           collector, so that core.refs() comes back to
 *                           its baseline when a spec closes its mesh
 */
#include "lcore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dlua_cspec_s dlua_cspec_t;

/* A consumer's configuration, as the C consumer's `data`. */
struct dlua_cspec_s {
  struct durable__queue link; /* in the mesh's consumers */
  dlua_mesh_t *m;
  int ref; /* the spec table */
  char *ns;
  char *key;          /* a hub's consumer: its stream's key */
  durable_hub_t *hub; /* a hub's consumer: that hub (a reference) */
  dlua_src_t *src;    /* a hub's consumer: its source, or NULL */
};

/* The mesh's consumers and the sources bound to hub activations. */
typedef struct dlua_streams_s {
  struct durable__queue cspecs; /* dlua_cspec_t, newest first */
  /* consumers' sources bound to a hub activation (dlua_src_t), newest
   * first */
  struct durable__queue srcs;
} dlua_streams_t;

static dlua_streams_t *streams_of(dlua_mesh_t *m) {
  if (m->streams == NULL &&
      (m->streams = calloc(1, sizeof(dlua_streams_t))) != NULL) {
    durable__queue_init(&m->streams->cspecs);
    durable__queue_init(&m->streams->srcs);
  }
  return m->streams;
}

static dlua_cspec_t *cspec_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, dlua_cspec_t, link);
}

static dlua_src_t *src_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, dlua_src_t, link);
}

/* ---- consumers ----------------------------------------------------------- */

static void cspec_free(dlua_cspec_t *cs) {
  dlua_unref(cs->m->S->main, cs->m->S, &cs->ref);
  dlua_src_free(cs->src);
  if (cs->hub)
    durable_hub_unref(cs->hub);
  free(cs->ns);
  free(cs->key);
  free(cs);
}

/* Push spec[field] of the consumer; returns the Lua state or NULL. */
static lua_State *cspec_push(dlua_cspec_t *cs, const char *field) {
  lua_State *L = dlua_mesh_lua(cs->m);
  if (L == NULL || !lua_checkstack(L, 16))
    return NULL;
  lua_rawgeti(L, LUA_REGISTRYINDEX, cs->ref);
  lua_getfield(L, -1, field);
  lua_remove(L, -2);
  return L;
}

static int tramp_key(durable_hub_t *hub, char *out, size_t size, void *data) {
  dlua_cspec_t *cs = data;
  if (cs->key) {
    int n = snprintf(out, size, "%s", cs->key);
    return n < 0 || (size_t)n >= size ? DURABLE_EINVAL : 0;
  }
  dlua_mesh_t *m = cs->m;
  lua_State *L = cspec_push(cs, "key_of");
  if (L == NULL)
    return DURABLE_ESHUTDOWN;
  int top = lua_gettop(L) - 1;
  int rc = 0;
  if (!dlua_push_hub(L, m, hub)) {
    rc = DURABLE_ESHUTDOWN;
  } else if (dlua_pcall(L, m->S, m->budget, 1, 1) != LUA_OK) {
    dlua_mesh_log(m, DURABLE_LOG_ERROR,
                  "[Lua] the key function of the '%s' consumer at hub '%s' "
                  "failed: %s",
                  cs->ns, durable_hub_address(hub), dlua_traceback(L));
    rc = DURABLE_EINVAL;
  } else {
    /* checked again here: a NUL would cut the key short in C */
    size_t len = 0;
    const char *key = lua_tolstring(L, -1, &len);
    if (key == NULL || strlen(key) != len || len >= size)
      rc = DURABLE_EINVAL;
    else
      memcpy(out, key, len + 1);
  }
  lua_settop(L, top);
  return rc;
}

static int tramp_source(durable_hub_t *hub, durable_source_t *out, void *data) {
  dlua_cspec_t *cs = data;
  if (cs->src) {
    *out = cs->src->source;
    return 0;
  }
  dlua_mesh_t *m = cs->m;
  lua_State *L = cspec_push(cs, "source_of");
  if (L == NULL)
    return DURABLE_ESHUTDOWN;
  int top = lua_gettop(L) - 1;
  int rc = 1; /* no source: the stream's own items */
  if (!dlua_push_hub(L, m, hub)) {
    rc = DURABLE_ESHUTDOWN;
  } else if (dlua_pcall(L, m->S, m->budget, 1, 1) != LUA_OK) {
    dlua_mesh_log(m, DURABLE_LOG_ERROR,
                  "[Lua] the source function of the '%s' consumer at hub '%s' "
                  "failed: %s",
                  cs->ns, durable_hub_address(hub), dlua_traceback(L));
    rc = DURABLE_EINVAL;
  } else if (!lua_isnil(L, -1)) {
    char err[256];
    dlua_src_t *s = dlua_src_new(L, -1, m, err, sizeof err);
    if (s == NULL) {
      dlua_mesh_log(m, DURABLE_LOG_ERROR,
                    "[Lua] the source function of the '%s' consumer at hub "
                    "'%s': %s",
                    cs->ns, durable_hub_address(hub), err);
      rc = DURABLE_EINVAL;
    } else {
      /* bound to this activation: released once the hub is dead */
      durable_hub_ref(hub);
      s->hub = hub;
      durable__queue_insert_head(&streams_of(m)->srcs, &s->link);
      *out = s->source;
      rc = 0;
    }
  }
  lua_settop(L, top);
  return rc;
}

/* Push what a handler gets: the item, or a batch's items as an array
 * (1..count); on an item that cannot be read, push nothing and say which
 * (`bad`) and why (`message`). */
static int push_items(lua_State *L, const durable_item_t *items, size_t count,
                      int as_array, int64_t *bad, char *message, size_t size) {
  char err[512];
  if (as_array)
    lua_createtable(L, (int)count, 0);
  for (size_t i = 0; i < count; i++) {
    int pushed = lua_checkstack(L, 8);
    if (!pushed)
      snprintf(err, sizeof err, "out of Lua stack");
    else
      pushed = dlua_push_item(L, &items[i], err, sizeof err) == 0;
    if (!pushed) {
      *bad = items[i].sequence;
      snprintf(message, size, "Durable stream item %s could not be read: %s",
               items[i].node ? items[i].node->path : "?", err);
      if (as_array)
        lua_pop(L, 1);
      return -1;
    }
    if (as_array)
      lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 0;
}

/* spec.run(hub, item, reply), or for a batch spec.run(hub, items, reply):
 * one reply for the call.  An item that cannot be read fails the call at
 * that item, so that it alone meets the retries and the dead letters. */
static void run_handler(durable_hub_t *hub, const durable_item_t *items,
                        size_t count, int as_array, durable_reply_t *done,
                        dlua_cspec_t *cs) {
  dlua_mesh_t *m = cs->m;
  lua_State *L = dlua_mesh_lua(m);
  if (L == NULL || !lua_checkstack(L, 16)) {
    durable_reply_fail(done, DURABLE_ESHUTDOWN, "the Lua state is closing");
    return;
  }
  int top = lua_gettop(L);
  int64_t bad = 0;
  char message[DURABLE_PATH_MAX + 600];
  if (push_items(L, items, count, as_array, &bad, message, sizeof message) <
      0) {
    lua_settop(L, top);
    durable_reply_fail_at(done, bad, DURABLE_EFAILED, message);
    return;
  }
  dlua_reply_t *r = dlua_push_reply(L, m, hub, done);
  /* stack: item(s) r (r anchors the reply while we look at it after the
   * call) */
  lua_rawgeti(L, LUA_REGISTRYINDEX, cs->ref);
  lua_getfield(L, -1, "run");
  lua_remove(L, -2);
  if (!dlua_push_hub(L, m, hub)) {
    lua_settop(L, top);
    dlua_reply_finish(r, DURABLE_ESHUTDOWN, NULL,
                      "the mesh is being collected");
    return;
  }
  lua_pushvalue(L, top + 1);
  lua_pushvalue(L, top + 2);
  /* stack: item(s) r run hub item(s) r */
  if (dlua_pcall(L, m->S, m->budget, 3, 0) != LUA_OK) {
    const char *why = lua_tostring(L, -1);
    char what[64];
    if (count > 1)
      snprintf(what, sizeof what, "items %lld..%lld",
               (long long)items[0].sequence,
               (long long)items[count - 1].sequence);
    else
      snprintf(what, sizeof what, "item %lld", (long long)items[0].sequence);
    dlua_mesh_log(m, DURABLE_LOG_WARN,
                  "[Lua] the '%s' handler at hub '%s' failed on %s: %s", cs->ns,
                  durable_hub_address(hub), what, dlua_traceback(L));
    dlua_reply_finish(r, DURABLE_EFAILED, NULL, why ? why : "failed");
  }
  lua_settop(L, top);
}

static void tramp_handler(durable_hub_t *hub, const durable_item_t *item,
                          durable_reply_t *done, void *data) {
  run_handler(hub, item, 1, 0, done, data);
}

static void tramp_batch(durable_hub_t *hub, const durable_item_t *items,
                        size_t count, durable_reply_t *done, void *data) {
  run_handler(hub, items, count, 1, done, data);
}

/* spec.batch (checked by lua/durable/streams.lua: { items =, bytes =,
 * wait_ms = }), zero items when absent: one item per call. */
static durable_batch_t spec_batch(lua_State *L, int spec) {
  durable_batch_t batch = {0};
  lua_getfield(L, spec, "batch");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "items");
    lua_getfield(L, -2, "bytes");
    lua_getfield(L, -3, "wait_ms");
    batch.items = (uint32_t)lua_tointeger(L, -3);
    batch.bytes = (size_t)lua_tointeger(L, -2);
    batch.wait_ms = (uint32_t)lua_tointeger(L, -1);
    lua_pop(L, 3);
  }
  lua_pop(L, 1);
  return batch;
}

/* The handler fields of a consumer's configuration: a batch handler when
 * spec.batch asks for one. */
static void spec_handler(lua_State *L, int spec, durable_consumer_t *cfg) {
  cfg->batch = spec_batch(L, spec);
  if (cfg->batch.items > 0)
    cfg->batch_handler = tramp_batch;
  else
    cfg->handler = tramp_handler;
}

/* spec.retention (a policy's text, checked by lua/durable/streams.lua with
 * core.retention_check), all when absent. */
static durable_retention_t spec_retention(lua_State *L, int spec) {
  durable_retention_t policy;
  lua_getfield(L, spec, "retention");
  if (durable_retention_parse(lua_tostring(L, -1), &policy, NULL) < 0)
    memset(&policy, 0, sizeof policy); /* checked before: not reached */
  lua_pop(L, 1);
  return policy;
}

/* A duration's text ("30s", "7d"; checked by lua/durable/streams.lua) in
 * ms; 0 when absent, -1 for "never". */
static int64_t spec_ms(lua_State *L, int t, const char *field) {
  durable_retention_t d;
  lua_getfield(L, t, field);
  const char *text = lua_tostring(L, -1);
  int64_t ms = 0;
  if (text && strcmp(text, "never") == 0)
    ms = -1;
  else if (text && durable_retention_parse(text, &d, NULL) == 0 &&
           d.keep == DURABLE_KEEP_AGE)
    ms = d.age_ms;
  lua_pop(L, 1);
  return ms;
}

/* spec.group, spec.start and spec.detach (checked by
 * lua/durable/streams.lua): the group is the spec's string, borrowed for
 * the call (the consumer copies it). */
static void spec_group(lua_State *L, int spec, durable_consumer_t *cfg) {
  lua_getfield(L, spec, "group");
  cfg->group = lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, spec, "start");
  if (lua_isinteger(L, -1)) {
    cfg->start.kind = DURABLE_START_SEQUENCE;
    cfg->start.value = lua_tointeger(L, -1);
  } else if (lua_isstring(L, -1)) {
    durable_start_parse(lua_tostring(L, -1), &cfg->start, NULL);
  }
  lua_pop(L, 1);
  lua_getfield(L, spec, "detach");
  if (lua_istable(L, -1)) {
    int t = lua_gettop(L);
    cfg->detach.idle_ms = spec_ms(L, t, "idle");
    cfg->detach.age_ms = spec_ms(L, t, "age");
    lua_getfield(L, t, "items");
    cfg->detach.items = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 0;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* spec.max_attempts (checked by lua/durable/streams.lua), 0 when absent. */
static int spec_max_attempts(lua_State *L, int spec) {
  lua_getfield(L, spec, "max_attempts");
  int n = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  return n;
}

/* mesh:_consume_type(node_type, namespace, spec): every hub of the NodeType
 * consumes the family; spec = { key_of = fn|nil, source_of = fn|nil,
 * run = fn(hub, item, reply), max_attempts, retention, batch }; with a
 * batch, run = fn(hub, items, reply). */
static int m_consume_type(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *type_name = dlua_check_text(L, 2, "NodeType name");
  const char *ns = dlua_check_text(L, 3, "stream namespace");
  luaL_checktype(L, 4, LUA_TTABLE);
  durable_error_t terr = {0};
  if (durable_node_type_check(type_name, &terr) < 0)
    return luaL_error(L, "%s", terr.message);
  durable_node_type_t *type = durable_node_type_get(m->mesh, type_name);
  if (type == NULL)
    return luaL_error(L, "out of memory");
  lua_getfield(L, 4, "key_of");
  lua_getfield(L, 4, "source_of");
  int has_key = !lua_isnil(L, -2), has_source = !lua_isnil(L, -1);
  lua_pop(L, 2);
  int max_attempts = spec_max_attempts(L, 4);
  dlua_cspec_t *cs = calloc(1, sizeof(*cs));
  if (cs == NULL || (cs->ns = strdup(ns)) == NULL) {
    free(cs);
    return luaL_error(L, "out of memory");
  }
  cs->m = m;
  lua_pushvalue(L, 4);
  cs->ref = dlua_ref(L, m->S);
  durable_consumer_t cfg = {.ns = cs->ns,
                            .key_of = has_key ? tramp_key : NULL,
                            .source_of = has_source ? tramp_source : NULL,
                            .data = cs,
                            .max_attempts = max_attempts,
                            .retention = spec_retention(L, 4)};
  spec_handler(L, 4, &cfg);
  spec_group(L, 4, &cfg);
  durable_error_t err = {0};
  if (durable_node_type_consume(type, &cfg, &err) < 0) {
    cspec_free(cs);
    return luaL_error(L, "%s", err.message);
  }
  durable__queue_insert_head(&streams_of(m)->cspecs, &cs->link);
  return 0;
}

/* hub:_consume(namespace, key, spec [, source]) -> true | nil, msg, code:
 * this hub consumes the stream for as long as it is active. */
static int h_consume(lua_State *L) {
  dlua_hub_t *h = luaL_checkudata(L, 1, DLUA_HUB_MT);
  if (h->hub == NULL)
    return luaL_error(L, "the hub was released");
  dlua_mesh_t *m = h->m;
  if (m->mesh == NULL)
    return luaL_error(L, "the mesh is closed");
  const char *ns = dlua_check_text(L, 2, "stream namespace");
  const char *key = dlua_check_text(L, 3, "stream key");
  luaL_checktype(L, 4, LUA_TTABLE);
  dlua_cspec_t *cs = calloc(1, sizeof(*cs));
  if (cs == NULL)
    return luaL_error(L, "out of memory");
  cs->m = m;
  cs->ref = LUA_NOREF;
  char why[256];
  if (!lua_isnoneornil(L, 5) &&
      (cs->src = dlua_src_new(L, 5, m, why, sizeof why)) == NULL) {
    free(cs);
    return luaL_error(L, "consume: %s", why);
  }
  if ((cs->ns = strdup(ns)) == NULL || (cs->key = strdup(key)) == NULL) {
    cspec_free(cs);
    return luaL_error(L, "out of memory");
  }
  lua_pushvalue(L, 4);
  cs->ref = dlua_ref(L, m->S);
  durable_hub_ref(h->hub);
  cs->hub = h->hub;
  durable_consumer_t cfg = {.ns = cs->ns,
                            .key_of = tramp_key,
                            .source_of = cs->src ? tramp_source : NULL,
                            .data = cs,
                            .max_attempts = spec_max_attempts(L, 4),
                            .retention = spec_retention(L, 4)};
  spec_handler(L, 4, &cfg);
  spec_group(L, 4, &cfg);
  durable_error_t err = {0};
  int rc = durable_hub_consume(h->hub, &cfg, NULL, &err);
  if (rc < 0) {
    cspec_free(cs);
    if (rc == DURABLE_EEXIST)
      return luaL_error(
          L, "hub '%s' already consumes '%s'%s%s", durable_hub_address(h->hub),
          ns, cfg.group ? " in group " : "", cfg.group ? cfg.group : "");
    if (rc == DURABLE_EINVAL)
      return luaL_error(L, "consume: %s", err.message);
    return dlua_fail(L, rc, err.message);
  }
  durable__queue_insert_head(&streams_of(m)->cspecs, &cs->link);
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- publish ------------------------------------------------------------- */

/* The publish's answer: queued for the mesh's next safe point (turns.c). */
static void on_sequence(int status, int64_t sequence, const char *message,
                        void *data) {
  dlua_req_t *r = data;
  if (status < 0)
    dlua_req_settle_failed(r, status, message);
  else
    dlua_req_settle_integer(r, (long long)sequence);
}

/* An operator's call, mesh:_op(namespace, key, ...): its mesh, NULL once
 * closed, and the stream into `id`. */
static dlua_mesh_t *operated(lua_State *L, durable_stream_id_t *id) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  if (m->mesh == NULL)
    return NULL;
  *id = dlua_check_stream(L);
  return m;
}

/* hub:_publish(namespace, key, payload_text, cb [, id [, no_owner]]): cb(true,
 * sequence) once the item is saved (for an id the stream holds already:
 * the sequence it got then), or cb(false, message, code). */
static int h_publish(lua_State *L) {
  dlua_hub_t *h = luaL_checkudata(L, 1, DLUA_HUB_MT);
  if (h->hub == NULL)
    return luaL_error(L, "the hub was released");
  if (h->m->mesh == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  durable_stream_id_t id = dlua_check_stream(L);
  /* JSON text: a NUL byte is never part of it (inside a string it is
   * written \u0000), so one here would cut the payload short */
  const char *payload = dlua_check_text(L, 4, "publish: payload JSON text");
  durable_publish_options_t options = {
      .id = dlua_opt_text(L, 6, "publish id", NULL),
      .no_owner = lua_toboolean(L, 7)};
  dlua_req_t *r = dlua_req_new(L, h->m, 5);
  durable_error_t err = {0};
  int rc = durable_stream_publish_with(h->hub, &id, payload, &options,
                                       on_sequence, r, &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* mesh:_seek(namespace, key, sequence, cb): cb(true, the checkpoint it was
 * at) once the checkpoint is moved, or cb(false, message, code). */
static int m_seek(lua_State *L) {
  durable_stream_id_t id;
  dlua_mesh_t *m = operated(L, &id);
  if (m == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  lua_Integer to = luaL_checkinteger(L, 4);
  dlua_req_t *r = dlua_req_new(L, m, 5);
  durable_error_t err = {0};
  int rc = durable_stream_seek(m->mesh, &id, (int64_t)to, on_sequence, r, &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* mesh:_group_seek(namespace, key, group, sequence, cb): cb(true, the
 * checkpoint it was at), or cb(false, message, code). */
static int m_group_seek(lua_State *L) {
  durable_stream_id_t id;
  dlua_mesh_t *m = operated(L, &id);
  if (m == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  const char *group = dlua_check_text(L, 4, "consumer group");
  lua_Integer to = luaL_checkinteger(L, 5);
  dlua_req_t *r = dlua_req_new(L, m, 6);
  durable_error_t err = {0};
  int rc = durable_group_seek(m->mesh, &id, group, (int64_t)to, on_sequence, r,
                              &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* mesh:_group_delete(namespace, key, group, force, cb): cb(true, the
 * checkpoint it had), or cb(false, message, code). */
static int m_group_delete(lua_State *L) {
  durable_stream_id_t id;
  dlua_mesh_t *m = operated(L, &id);
  if (m == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  const char *group = dlua_check_text(L, 4, "consumer group");
  int force = lua_toboolean(L, 5);
  dlua_req_t *r = dlua_req_new(L, m, 6);
  durable_error_t err = {0};
  int rc =
      durable_group_delete(m->mesh, &id, group, force, on_sequence, r, &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* mesh:_trim(namespace, key, through, force, group|nil, cb): cb(true, items
 * deleted), or cb(false, message, code); with a group, durable_group_trim. */
static int m_trim(lua_State *L) {
  durable_stream_id_t id;
  dlua_mesh_t *m = operated(L, &id);
  if (m == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  lua_Integer through = luaL_checkinteger(L, 4);
  int force = lua_toboolean(L, 5);
  const char *group =
      lua_isnil(L, 6) ? NULL : dlua_check_text(L, 6, "consumer group");
  dlua_req_t *r = dlua_req_new(L, m, 7);
  durable_error_t err = {0};
  int rc = group ? durable_group_trim(m->mesh, &id, group, (int64_t)through,
                                      force, on_sequence, r, &err)
                 : durable_stream_trim(m->mesh, &id, (int64_t)through, force,
                                       on_sequence, r, &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* mesh:_delete(namespace, key, force, cb): cb(true, items deleted), or
 * cb(false, message, code). */
static int m_delete(lua_State *L) {
  durable_stream_id_t id;
  dlua_mesh_t *m = operated(L, &id);
  if (m == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  int force = lua_toboolean(L, 4);
  dlua_req_t *r = dlua_req_new(L, m, 5);
  durable_error_t err = {0};
  int rc = durable_stream_delete(m->mesh, &id, force, on_sequence, r, &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* mesh:_set_retention(family, policy|nil, cb): cb(true, true) once stored. */
static int m_set_retention(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  if (m->mesh == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  const char *family = dlua_check_text(L, 2, "stream family");
  const char *policy = lua_isnil(L, 3) ? NULL : dlua_check_text(L, 3, "policy");
  dlua_req_t *r = dlua_req_new(L, m, 4);
  durable_error_t err = {0};
  int rc = durable_mesh_set_retention(m->mesh, family, policy,
                                      dlua_req_on_status, r, &err);
  return dlua_req_submitted(L, r, rc, &err, NULL);
}

/* ---- the mesh's side ----------------------------------------------------- */

void dlua_streams_sweep(dlua_mesh_t *m) {
  dlua_streams_t *st = m->streams;
  if (st == NULL)
    return;
  struct durable__queue *q, *next;
  DURABLE__QUEUE_FOREACH_SAFE(q, next, &st->srcs) {
    dlua_src_t *s = src_of(q);
    if (durable_hub_run_level(s->hub) == DURABLE_HUB_DEAD) {
      durable__queue_remove(&s->link);
      dlua_src_free(s);
    }
  }
  DURABLE__QUEUE_FOREACH_SAFE(q, next, &st->cspecs) {
    dlua_cspec_t *cs = cspec_of(q);
    if (cs->hub && durable_hub_run_level(cs->hub) == DURABLE_HUB_DEAD) {
      durable__queue_remove(&cs->link);
      cspec_free(cs);
    }
  }
}

void dlua_streams_closing(dlua_mesh_t *m) {
  dlua_readers_close(m);
}

void dlua_streams_release(dlua_mesh_t *m) {
  dlua_streams_closing(m);
  dlua_streams_t *st = m->streams;
  if (st == NULL)
    return;
  struct durable__queue *q;
  while ((q = durable__queue_pop(&st->srcs)) != NULL)
    dlua_src_free(src_of(q));
  while ((q = durable__queue_pop(&st->cspecs)) != NULL)
    cspec_free(cspec_of(q));
  free(st);
  m->streams = NULL;
}

/* ---- module functions ---------------------------------------------------- */

/* The stream id at 1, 2 (either may be missing: durable_stream_check says
 * so); 0, or -1 with `why` set when one holds a NUL byte. */
static int opt_id(lua_State *L, durable_stream_id_t *id, char *why,
                  size_t size) {
  *id = (durable_stream_id_t){.ns = lua_tostring(L, 1),
                              .key = lua_tostring(L, 2)};
  if (dlua_has_nul(L, 1, "stream namespace", why, size) ||
      dlua_has_nul(L, 2, "stream key", why, size))
    return -1;
  return 0;
}

/* core.stream_check(namespace, key) -> true, or nil, message, "EINVAL"
 * with durable_stream_check's message. */
static int l_stream_check(lua_State *L) {
  durable_stream_id_t id;
  char why[400];
  if (opt_id(L, &id, why, sizeof why) < 0)
    return dlua_fail(L, DURABLE_EINVAL, why);
  durable_error_t err = {0};
  int rc = durable_stream_check(&id, &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.retention_check(text), core.group_check(name) and
 * core.start_check(text): true, or nil, message, "EINVAL" naming the rule
 * the text breaks -- a retention policy, a consumer group's name, a group's
 * start.  One body for the three, each its C check. */
static int check_text(lua_State *L, const char *what,
                      int (*check)(const char *text, durable_error_t *err)) {
  char why[400];
  if (dlua_has_nul(L, 1, what, why, sizeof why))
    return dlua_fail(L, DURABLE_EINVAL, why);
  durable_error_t err = {0};
  int rc = check(luaL_checkstring(L, 1), &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

static int retention_valid(const char *text, durable_error_t *err) {
  durable_retention_t policy;
  return durable_retention_parse(text, &policy, err);
}

static int start_valid(const char *text, durable_error_t *err) {
  durable_start_t start;
  return durable_start_parse(text, &start, err);
}

static int l_retention_check(lua_State *L) {
  return check_text(L, "retention policy", retention_valid);
}

static int l_group_check(lua_State *L) {
  return check_text(L, "consumer group", durable_group_check);
}

static int l_start_check(lua_State *L) {
  return check_text(L, "start", start_valid);
}

/* core.publish_id_check(id [, namespace, key]) -> true, or nil, message,
 * "EINVAL" naming the id and the rule it breaks (with a stream: also the
 * stream's own rules, and its id node's path length). */
static int l_publish_id_check(lua_State *L) {
  char why[400];
  if (dlua_has_nul(L, 1, "publish id", why, sizeof why) ||
      dlua_has_nul(L, 2, "stream namespace", why, sizeof why) ||
      dlua_has_nul(L, 3, "stream key", why, sizeof why))
    return dlua_fail(L, DURABLE_EINVAL, why);
  durable_stream_id_t stream = {.ns = lua_tostring(L, 2),
                                .key = lua_tostring(L, 3)};
  durable_error_t err = {0};
  int rc = durable_publish_id_check(lua_isnoneornil(L, 2) ? NULL : &stream,
                                    lua_tostring(L, 1), &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.stream_path(namespace, key) -> the stream node's path, its items'
 * namespace; raises on a bad stream id. */
static int l_stream_path(lua_State *L) {
  durable_stream_id_t id;
  char why[400];
  if (opt_id(L, &id, why, sizeof why) < 0)
    return luaL_error(L, "%s", why);
  durable_error_t err = {0};
  char path[DURABLE_PATH_MAX + 1], items[DURABLE_PATH_MAX + 32];
  if (durable_stream_check(&id, &err) < 0)
    return luaL_error(L, "%s", err.message);
  durable_stream_path(&id, path, sizeof path);
  durable_stream_items_ns(&id, items, sizeof items);
  lua_pushstring(L, path);
  lua_pushstring(L, items);
  return 2;
}

void dlua_open_streams(lua_State *L) {
  /* stack: module */
  static const luaL_Reg fns[] = {{"stream_check", l_stream_check},
                                 {"stream_path", l_stream_path},
                                 {"publish_id_check", l_publish_id_check},
                                 {"retention_check", l_retention_check},
                                 {"group_check", l_group_check},
                                 {"start_check", l_start_check},
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_getfield(L, -1, "Mesh");
  lua_pushcfunction(L, m_consume_type);
  lua_setfield(L, -2, "_consume_type");
  lua_pushcfunction(L, m_seek);
  lua_setfield(L, -2, "_seek");
  lua_pushcfunction(L, m_trim);
  lua_setfield(L, -2, "_trim");
  lua_pushcfunction(L, m_group_seek);
  lua_setfield(L, -2, "_group_seek");
  lua_pushcfunction(L, m_group_delete);
  lua_setfield(L, -2, "_group_delete");
  lua_pushcfunction(L, m_delete);
  lua_setfield(L, -2, "_delete");
  lua_pushcfunction(L, m_set_retention);
  lua_setfield(L, -2, "_set_retention");
  lua_pop(L, 1);
  lua_getfield(L, -1, "Hub");
  lua_pushcfunction(L, h_publish);
  lua_setfield(L, -2, "_publish");
  lua_pushcfunction(L, h_consume);
  lua_setfield(L, -2, "_consume");
  lua_pop(L, 1);
  dlua_open_reader(L);
}
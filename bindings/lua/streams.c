/*
 * streams.c: durable streams seen from Lua: publish, the plain reader (a
 * subscription userdata), consumers on a NodeType or on one hub, sources,
 * and the mesh's stream timings.
 *
 * The C streams layer calls back into Lua for four things, each through
 * dlua_pcall (one protected call, the instruction budget) -- and where:
 *
 *   consumer   key_of(hub)     -> spec.key_of(hub): the owner's path
 *              source_of(hub)  -> spec.source_of(hub): a source table or nil
 *              handler(item)   -> spec.run(hub, item, reply): the user's
 *                                 handler, finished through the reply
 *   source     sequence_of / payload_of of a durable.source{...}
 *   reader     on_item(item), on_error(message)
 *
 * A consumer's and a source's functions run where C calls them: a
 * consumer's in turns of its hub, a source's whenever the C reader needs
 * its answer (at once).  A reader's callback and
 * a publish's answer come from inside the store's libuv callbacks, so they
 * are copied (the item's text, the sequence) into the mesh's queue and
 * delivered after uv_run returned (turns.c); an item queued before
 * sub:close() is dropped, not delivered.
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
 *   a reader                its functions and source, until :close(), its
 *                           failure, or the mesh's close
 *
 * A subscription userdata only points at its reader: the reader runs until
 * closed even when Lua drops the userdata (an Rx subscription is not
 * disposed by forgetting it), and the userdata outlives its reader to say
 * how it ended.
 */
#include "lcore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DLUA_SUB_MT "durable.subscription"

typedef struct dlua_src_s dlua_src_t;
typedef struct dlua_cspec_s dlua_cspec_t;
typedef struct dlua_sub_s dlua_sub_t;

/* A source for the C reader: a document's parts, or Lua functions. */
struct dlua_src_s {
  dlua_src_t *next; /* in the mesh's list, while bound to a hub */
  dlua_mesh_t *m;
  durable_hub_t *hub; /* its hub activation (a reference), or NULL */
  int seq_ref, payload_ref;
  char items_ns[DURABLE_PATH_MAX + 1];
  durable_source_t source;
};

/* A consumer's configuration, as the C consumer's `data`. */
struct dlua_cspec_s {
  dlua_cspec_t *next;
  dlua_mesh_t *m;
  int ref; /* the spec table */
  char *ns;
  char *key;          /* a hub's consumer: its stream's key */
  durable_hub_t *hub; /* a hub's consumer: that hub (a reference) */
  dlua_src_t *src;    /* a hub's consumer: its source, or NULL */
};

typedef enum { SUB_OPEN = 1, SUB_CLOSED, SUB_FAILED } sub_state_t;

/* The userdata: how a reader ended, and the reader while it runs. */
typedef struct {
  dlua_sub_t *sub; /* NULL once the reader is gone */
  sub_state_t state;
  char failure[1024];
} dlua_subud_t;

struct dlua_sub_s {
  dlua_sub_t *prev, *next;
  dlua_mesh_t *m;
  durable_reader_t *reader;
  int item_ref, error_ref;
  dlua_src_t *src;
  dlua_subud_t *ud; /* NULL once collected */
  char name[DURABLE_PATH_MAX + 80];
  int closed, in_cb;
  int queued; /* its events waiting in the mesh's queue (they point here) */
  int paused; /* the reader is paused while many items wait in the queue */
  char ns[DURABLE_PATH_MAX + 1], key[DURABLE_PATH_MAX + 1]; /* the stream */
};

/* A reader's items wait in the mesh's queue until Lua runs: past HIGH the
 * reader pauses, below LOW it goes on, so that a catch-up holds a bounded
 * number of items, not the stream. */
#define READ_QUEUE_HIGH 512
#define READ_QUEUE_LOW 128

/* An item or a failure of a reader, copied out of the reader's callback
 * (which runs inside the store's) to be delivered at the mesh's next safe
 * point, in order: one allocation, its texts after it (the stream is the
 * subscription's). */
typedef struct {
  dlua_event_t ev;
  dlua_sub_t *sub;
  int status;    /* < 0: the reader failed with `message` */
  char *message; /* failure */
  int64_t sequence, appended_at;
  char *payload, *node_path; /* the item (node_path may be NULL) */
  char text[];
} sub_event_t;

typedef struct dlua_streams_s {
  dlua_cspec_t *cspecs;
  dlua_src_t *srcs;
  dlua_sub_t *subs;
} dlua_streams_t;

static dlua_streams_t *streams_of(dlua_mesh_t *m) {
  if (m->streams == NULL)
    m->streams = calloc(1, sizeof(dlua_streams_t));
  return m->streams;
}

static void unref(dlua_mesh_t *m, int *ref) {
  dlua_unref(m->S->main, m->S, ref);
}

/* ---- items --------------------------------------------------------------- */

/* Push the item as a table; -1 with nothing pushed when its payload is not
 * JSON (`err` says why). */
static int push_item(lua_State *L, const durable_item_t *item, char *err,
                     size_t errlen) {
  /* stack: */
  lua_createtable(L, 0, 6);
  if (dlua_decode(L, item->payload, err, errlen) < 0) {
    lua_pop(L, 1);
    return -1;
  }
  lua_setfield(L, -2, "payload");
  lua_pushinteger(L, (lua_Integer)item->sequence);
  lua_setfield(L, -2, "sequence");
  lua_pushstring(L, item->payload);
  lua_setfield(L, -2, "raw");
  lua_createtable(L, 0, 2);
  lua_pushstring(L, item->stream.ns);
  lua_setfield(L, -2, "namespace");
  lua_pushstring(L, item->stream.key);
  lua_setfield(L, -2, "key");
  lua_setfield(L, -2, "stream");
  if (item->appended_at != 0) {
    lua_pushinteger(L, (lua_Integer)item->appended_at);
    lua_setfield(L, -2, "appended_at");
  }
  if (item->node != NULL) {
    lua_pushstring(L, item->node->path);
    lua_setfield(L, -2, "path");
  }
  /* stack: item */
  return 0;
}

/* ---- sources ------------------------------------------------------------- */

static int64_t lsrc_sequence(const durable_node_t *node, void *data) {
  dlua_src_t *s = data;
  dlua_mesh_t *m = s->m;
  lua_State *L = dlua_mesh_lua(m);
  if (L == NULL || !lua_checkstack(L, 8))
    return 0;
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->seq_ref);
  dlua_push_node(L, node);
  int64_t seq = 0;
  if (dlua_pcall(L, m->S, m->budget, 1, 1) != LUA_OK) {
    /* not taken for an item: a reader waits at that gap, and says why */
    dlua_mesh_log(m, DURABLE_LOG_WARN,
                  "[Lua] sequence_of of the source %s failed on %s: %s",
                  s->items_ns, node->path, dlua_traceback(L));
  } else {
    int isnum = 0;
    lua_Integer v = lua_tointegerx(L, -1, &isnum);
    if (isnum && v > 0)
      seq = (int64_t)v;
  }
  lua_settop(L, top);
  return seq;
}

static int lsrc_payload(const durable_node_t *node, char **payload,
                        durable_error_t *err, void *data) {
  dlua_src_t *s = data;
  dlua_mesh_t *m = s->m;
  *payload = NULL;
  if (s->payload_ref == LUA_NOREF) { /* the node's content, as stored */
    if (node->content == NULL)
      goto none;
    *payload = strdup(node->content);
    return *payload ? 0 : DURABLE_ENOMEM;
  }
  lua_State *L = dlua_mesh_lua(m);
  if (L == NULL || !lua_checkstack(L, 8)) {
    snprintf(err->message, sizeof err->message, "the Lua state is closing");
    return err->code = DURABLE_ESHUTDOWN;
  }
  int top = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, s->payload_ref);
  dlua_push_node(L, node);
  if (dlua_pcall(L, m->S, m->budget, 1, 1) != LUA_OK) {
    snprintf(err->message, sizeof err->message, "payload_of failed: %s",
             lua_tostring(L, -1));
    lua_settop(L, top);
    return err->code = DURABLE_EINVAL;
  }
  char why[400];
  if (lua_isnil(L, -1)) {
    lua_settop(L, top);
    goto none;
  }
  *payload = dlua_encode(L, -1, why, sizeof why);
  lua_settop(L, top);
  if (*payload == NULL) {
    snprintf(err->message, sizeof err->message, "payload_of: %s", why);
    return err->code = DURABLE_EINVAL;
  }
  return 0;
none:
  snprintf(err->message, sizeof err->message, "%s gives no payload",
           node->path);
  return err->code = DURABLE_EINVAL;
}

static void src_free(dlua_src_t *s) {
  if (s == NULL)
    return;
  unref(s->m, &s->seq_ref);
  unref(s->m, &s->payload_ref);
  if (s->hub)
    durable_hub_unref(s->hub);
  free(s);
}

/* A source from the table at `idx` ({ items_namespace=, sequence_of=,
 * payload_of= } or { document= }), or NULL with `err` set.  Never raises. */
static dlua_src_t *src_new(lua_State *L, int idx, dlua_mesh_t *m, char *err,
                           size_t errlen) {
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx)) {
    snprintf(err, errlen,
             "a source must be made by durable.source{...} or "
             "durable.document_parts(path), not a %s",
             luaL_typename(L, idx));
    return NULL;
  }
  dlua_src_t *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  s->m = m;
  s->seq_ref = s->payload_ref = LUA_NOREF;
  int top = lua_gettop(L);
  lua_getfield(L, idx, "document");
  lua_getfield(L, idx, "items_namespace");
  lua_getfield(L, idx, "sequence_of");
  lua_getfield(L, idx, "payload_of");
  /* stack: document items_ns sequence_of payload_of */
  const char *doc = lua_tostring(L, top + 1);
  const char *items = lua_tostring(L, top + 2);
  const char *bad = NULL;
  char nul[256]; /* the size of the callers' err buffers */
  if (dlua_has_nul(L, top + 1, "a source's document", nul, sizeof nul) ||
      dlua_has_nul(L, top + 2, "items_namespace", nul, sizeof nul)) {
    bad = nul;
  } else if (lua_type(L, top + 1) == LUA_TSTRING) {
    if (durable_source_document_parts(doc, s->items_ns, sizeof s->items_ns,
                                      &s->source) < 0)
      bad = "the document's path is not a valid path";
  } else if (lua_type(L, top + 2) != LUA_TSTRING ||
             durable_path_check(items, NULL) < 0) {
    bad = "items_namespace must be a valid path";
  } else if (!lua_isfunction(L, top + 3)) {
    bad = "sequence_of must be a function(node)";
  } else if (!lua_isnil(L, top + 4) && !lua_isfunction(L, top + 4)) {
    bad = "payload_of must be a function(node) or nil";
  } else {
    snprintf(s->items_ns, sizeof s->items_ns, "%s", items);
    if (!lua_isnil(L, top + 4)) {
      lua_pushvalue(L, top + 4);
      s->payload_ref = dlua_ref(L, m->S);
    }
    lua_pushvalue(L, top + 3);
    s->seq_ref = dlua_ref(L, m->S);
    s->source = (durable_source_t){.items_ns = s->items_ns,
                                   .sequence_of = lsrc_sequence,
                                   .payload_of = lsrc_payload,
                                   .data = s};
  }
  lua_settop(L, top);
  if (bad) {
    snprintf(err, errlen, "%s", bad);
    src_free(s);
    return NULL;
  }
  return s;
}

/* ---- consumers ----------------------------------------------------------- */

static void cspec_free(dlua_cspec_t *cs) {
  unref(cs->m, &cs->ref);
  src_free(cs->src);
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
    dlua_src_t *s = src_new(L, -1, m, err, sizeof err);
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
      dlua_streams_t *st = streams_of(m);
      s->next = st->srcs;
      st->srcs = s;
      *out = s->source;
      rc = 0;
    }
  }
  lua_settop(L, top);
  return rc;
}

static void tramp_handler(durable_hub_t *hub, const durable_item_t *item,
                          durable_reply_t *done, void *data) {
  dlua_cspec_t *cs = data;
  dlua_mesh_t *m = cs->m;
  lua_State *L = dlua_mesh_lua(m);
  if (L == NULL || !lua_checkstack(L, 16)) {
    durable_reply_fail(done, DURABLE_ESHUTDOWN, "the Lua state is closing");
    return;
  }
  int top = lua_gettop(L);
  dlua_reply_t *r = dlua_push_reply(L, m, hub, done);
  /* stack: r (anchors the reply while we look at it after the call) */
  lua_rawgeti(L, LUA_REGISTRYINDEX, cs->ref);
  lua_getfield(L, -1, "run");
  lua_remove(L, -2);
  char err[512];
  if (!dlua_push_hub(L, m, hub)) {
    lua_settop(L, top);
    dlua_reply_finish(r, DURABLE_ESHUTDOWN, NULL,
                      "the mesh is being collected");
    return;
  }
  if (push_item(L, item, err, sizeof err) < 0) {
    char message[DURABLE_PATH_MAX + 600];
    snprintf(message, sizeof message,
             "Durable stream item %s could not be read: %s",
             item->node ? item->node->path : "?", err);
    lua_settop(L, top);
    dlua_reply_finish(r, DURABLE_EFAILED, NULL, message);
    return;
  }
  lua_pushvalue(L, top + 1);
  /* stack: r run hub item r */
  if (dlua_pcall(L, m->S, m->budget, 3, 0) != LUA_OK) {
    const char *message = lua_tostring(L, -1);
    dlua_mesh_log(m, DURABLE_LOG_WARN,
                  "[Lua] the '%s' handler at hub '%s' failed on item %lld: %s",
                  cs->ns, durable_hub_address(hub), (long long)item->sequence,
                  dlua_traceback(L));
    dlua_reply_finish(r, DURABLE_EFAILED, NULL, message ? message : "failed");
  }
  lua_settop(L, top);
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

/* spec.max_attempts (checked by lua/durable/streams.lua), 0 when absent. */
static int spec_max_attempts(lua_State *L, int spec) {
  lua_getfield(L, spec, "max_attempts");
  int n = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  return n;
}

/* mesh:_consume_type(node_type, namespace, spec): every hub of the NodeType
 * consumes the family; spec = { key_of = fn|nil, source_of = fn|nil,
 * run = fn(hub, item, reply) }. */
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
                            .handler = tramp_handler,
                            .data = cs,
                            .max_attempts = max_attempts,
                            .retention = spec_retention(L, 4)};
  durable_error_t err = {0};
  if (durable_node_type_consume(type, &cfg, &err) < 0) {
    cspec_free(cs);
    return luaL_error(L, "%s", err.message);
  }
  dlua_streams_t *st = streams_of(m);
  cs->next = st->cspecs;
  st->cspecs = cs;
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
      (cs->src = src_new(L, 5, m, why, sizeof why)) == NULL) {
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
                            .handler = tramp_handler,
                            .data = cs,
                            .max_attempts = spec_max_attempts(L, 4),
                            .retention = spec_retention(L, 4)};
  durable_error_t err = {0};
  int rc = durable_hub_consume(h->hub, &cfg, NULL, &err);
  if (rc < 0) {
    cspec_free(cs);
    if (rc == DURABLE_EEXIST)
      return luaL_error(L, "hub '%s' already consumes '%s'",
                        durable_hub_address(h->hub), ns);
    if (rc == DURABLE_EINVAL)
      return luaL_error(L, "consume: %s", err.message);
    return dlua_fail(L, rc, err.message);
  }
  dlua_streams_t *st = streams_of(m);
  cs->next = st->cspecs;
  st->cspecs = cs;
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

/* The stream a call names at 2 (namespace) and 3 (key). */
static durable_stream_id_t stream_at(lua_State *L) {
  return (durable_stream_id_t){.ns = dlua_check_text(L, 2, "stream namespace"),
                               .key = dlua_check_text(L, 3, "stream key")};
}

/* An operator's call, mesh:_op(namespace, key, ...): its mesh, NULL once
 * closed, and the stream into `id`. */
static dlua_mesh_t *operated(lua_State *L, durable_stream_id_t *id) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  if (m->mesh == NULL)
    return NULL;
  *id = stream_at(L);
  return m;
}

/* hub:_publish(namespace, key, payload_text, cb [, id]): cb(true,
 * sequence) once the item is saved (for an id the stream holds already:
 * the sequence it got then), or cb(false, message, code). */
static int h_publish(lua_State *L) {
  dlua_hub_t *h = luaL_checkudata(L, 1, DLUA_HUB_MT);
  if (h->hub == NULL)
    return luaL_error(L, "the hub was released");
  if (h->m->mesh == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  durable_stream_id_t id = stream_at(L);
  /* JSON text: a NUL byte is never part of it (inside a string it is
   * written \u0000), so one here would cut the payload short */
  const char *payload = dlua_check_text(L, 4, "publish: payload JSON text");
  durable_publish_options_t options = {
      .id = dlua_opt_text(L, 6, "publish id", NULL)};
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

/* mesh:_trim(namespace, key, through, force, cb): cb(true, items deleted),
 * or cb(false, message, code). */
static int m_trim(lua_State *L) {
  durable_stream_id_t id;
  dlua_mesh_t *m = operated(L, &id);
  if (m == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closed");
  lua_Integer through = luaL_checkinteger(L, 4);
  int force = lua_toboolean(L, 5);
  dlua_req_t *r = dlua_req_new(L, m, 6);
  durable_error_t err = {0};
  int rc = durable_stream_trim(m->mesh, &id, (int64_t)through, force,
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

/* ---- the reader and its subscription ------------------------------------- */

static void sub_free(dlua_sub_t *s) {
  src_free(s->src);
  free(s);
}

/* End the reader; its callback does not run again.  No Lua runs here. */
static void sub_close(dlua_sub_t *s, sub_state_t how) {
  if (s->closed)
    return;
  s->closed = 1;
  durable_reader_close(s->reader);
  s->reader = NULL;
  unref(s->m, &s->item_ref);
  unref(s->m, &s->error_ref);
  dlua_streams_t *st = s->m->streams;
  if (s->prev)
    s->prev->next = s->next;
  else if (st && st->subs == s)
    st->subs = s->next;
  if (s->next)
    s->next->prev = s->prev;
  if (s->ud) {
    if (s->ud->state == SUB_OPEN)
      s->ud->state = how;
    s->ud->sub = NULL;
    s->ud = NULL;
  }
  if (s->in_cb == 0 && s->queued == 0)
    sub_free(s);
}

/* The reader stopped on a failure: say so, through on_error or the log. */
static void sub_failed(dlua_sub_t *s, lua_State *L, const char *message) {
  if (s->ud) {
    s->ud->state = SUB_FAILED;
    snprintf(s->ud->failure, sizeof s->ud->failure, "%s", message);
  }
  int handled = 0;
  if (s->error_ref != LUA_NOREF) {
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->error_ref);
    lua_pushstring(L, message);
    if (dlua_pcall(L, s->m->S, s->m->budget, 1, 0) == LUA_OK)
      handled = 1;
    else
      dlua_mesh_log(s->m, DURABLE_LOG_ERROR,
                    "[Lua] read_durable of %s: on_error failed: %s", s->name,
                    dlua_traceback(L));
    lua_settop(L, top);
  }
  if (!handled)
    dlua_mesh_log(s->m, DURABLE_LOG_ERROR,
                  "[Lua] read_durable of %s stopped: %s", s->name, message);
  sub_close(s, SUB_FAILED);
}

static void sub_event_free(sub_event_t *e) {
  free(e);
}

/* Deliver one item or failure: on_item(item), or on_error(message) and the
 * end of the reader.  Nothing once the subscription was closed (no item
 * after :close()) or when no Lua may run. */
static void sub_deliver(dlua_event_t *ev, lua_State *L) {
  sub_event_t *e = (sub_event_t *)ev;
  dlua_sub_t *s = e->sub;
  s->queued--;
  if (s->paused && s->queued <= READ_QUEUE_LOW && !s->closed && s->reader) {
    s->paused = 0;
    durable_reader_resume(s->reader); /* may queue items at once: C only */
  }
  if (s->closed || L == NULL || !lua_checkstack(L, 16)) {
    sub_event_free(e);
    if (s->closed && s->in_cb == 0 && s->queued == 0)
      sub_free(s);
    return;
  }
  int top = lua_gettop(L);
  s->in_cb++;
  char err[512];
  if (e->status < 0) {
    sub_failed(s, L, e->message ? e->message : durable_strerror(e->status));
  } else {
    durable_node_t node = {.path = e->node_path};
    durable_item_t item = {.stream = {.ns = s->ns, .key = s->key},
                           .sequence = e->sequence,
                           .payload = e->payload,
                           .appended_at = e->appended_at,
                           .node = e->node_path ? &node : NULL};
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->item_ref);
    if (push_item(L, &item, err, sizeof err) < 0) {
      char m[DURABLE_PATH_MAX + 600];
      snprintf(m, sizeof m, "Durable stream item %s could not be read: %s",
               e->node_path ? e->node_path : "?", err);
      lua_settop(L, top);
      sub_failed(s, L, m);
    } else if (dlua_pcall(L, s->m->S, s->m->budget, 1, 0) != LUA_OK) {
      char m[1024];
      snprintf(m, sizeof m, "on_item failed on item %lld: %s",
               (long long)e->sequence, lua_tostring(L, -1));
      dlua_mesh_log(s->m, DURABLE_LOG_WARN, "[Lua] read_durable of %s: %s",
                    s->name, dlua_traceback(L));
      lua_settop(L, top);
      sub_failed(s, L, m);
    }
  }
  lua_settop(L, top);
  s->in_cb--;
  sub_event_free(e);
  if (s->closed && s->in_cb == 0 && s->queued == 0)
    sub_free(s);
}

/* Copy `text` into the event's tail at `*at` (NULL stays NULL). */
static char *put_text(char **at, const char *text) {
  if (text == NULL)
    return NULL;
  size_t n = strlen(text) + 1;
  char *copy = memcpy(*at, text, n);
  *at += n;
  return copy;
}

/* The reader's callback, inside the store's: only a copy is queued. */
static void on_read(durable_reader_t *reader, int status,
                    const durable_item_t *item, const char *message,
                    void *data) {
  dlua_sub_t *s = data;
  if (s->closed)
    return;
  const char *failure =
      status < 0 ? (message ? message : durable_strerror(status)) : NULL;
  const char *payload = status < 0 ? NULL : item->payload;
  const char *path = status < 0 || item->node == NULL ? NULL : item->node->path;
  size_t bytes = sizeof(sub_event_t) + (failure ? strlen(failure) + 1 : 0) +
                 (payload ? strlen(payload) + 1 : 0) +
                 (path ? strlen(path) + 1 : 0);
  sub_event_t *e = malloc(bytes);
  if (e == NULL) {
    /* the item cannot be kept for delivery: stop here rather than skip it */
    if (s->ud) {
      s->ud->state = SUB_FAILED;
      snprintf(s->ud->failure, sizeof s->ud->failure,
               "out of memory: an item could not be queued");
    }
    dlua_mesh_log(s->m, DURABLE_LOG_ERROR,
                  "[Lua] read_durable of %s stopped: out of memory", s->name);
    sub_close(s, SUB_FAILED);
    return;
  }
  memset(e, 0, sizeof *e);
  char *at = e->text;
  e->ev.deliver = sub_deliver;
  e->sub = s;
  e->status = status;
  e->message = put_text(&at, failure);
  if (status >= 0) {
    e->sequence = item->sequence;
    e->appended_at = item->appended_at;
    e->payload = put_text(&at, payload);
    e->node_path = put_text(&at, path);
  }
  s->queued++;
  dlua_post(s->m, &e->ev);
  if (s->queued >= READ_QUEUE_HIGH && !s->paused) {
    s->paused = 1;
    durable_reader_pause(reader);
  }
}

/* hub:_read(namespace, key, after, source|nil, on_item, on_error|nil) ->
 * subscription. */
static int h_read(lua_State *L) {
  dlua_hub_t *h = luaL_checkudata(L, 1, DLUA_HUB_MT);
  if (h->hub == NULL)
    return luaL_error(L, "the hub was released");
  dlua_mesh_t *m = h->m;
  if (m->mesh == NULL)
    return luaL_error(L, "the mesh is closed");
  durable_stream_id_t id = stream_at(L);
  lua_Integer after = luaL_checkinteger(L, 4);
  luaL_checktype(L, 6, LUA_TFUNCTION);
  if (!lua_isnoneornil(L, 7))
    luaL_checktype(L, 7, LUA_TFUNCTION);
  dlua_subud_t *ud = lua_newuserdatauv(L, sizeof(*ud), 0);
  memset(ud, 0, sizeof(*ud));
  ud->state = SUB_CLOSED;
  luaL_setmetatable(L, DLUA_SUB_MT);
  /* stack: ... ud */
  dlua_sub_t *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return luaL_error(L, "out of memory");
  s->m = m;
  s->item_ref = s->error_ref = LUA_NOREF;
  snprintf(s->name, sizeof s->name, "%s@%s", id.ns, id.key);
  snprintf(s->ns, sizeof s->ns, "%s", id.ns);
  snprintf(s->key, sizeof s->key, "%s", id.key);
  char why[256];
  if (!lua_isnil(L, 5) &&
      (s->src = src_new(L, 5, m, why, sizeof why)) == NULL) {
    free(s);
    return luaL_error(L, "read_durable: %s", why);
  }
  lua_pushvalue(L, 6);
  s->item_ref = dlua_ref(L, m->S);
  if (!lua_isnoneornil(L, 7)) {
    lua_pushvalue(L, 7);
    s->error_ref = dlua_ref(L, m->S);
  }
  durable_error_t err = {0};
  int rc = durable_stream_read(m->mesh, &id, (int64_t)after,
                               s->src ? &s->src->source : NULL, on_read, s,
                               &s->reader, &err);
  if (rc < 0) {
    s->closed = 1;
    unref(m, &s->item_ref);
    unref(m, &s->error_ref);
    sub_free(s);
    if (rc == DURABLE_EINVAL)
      return luaL_error(L, "read_durable: %s", err.message);
    return dlua_fail(L, rc, err.message);
  }
  /* durable_stream_read asks for the first item at once, but the store answers
   * later: nothing has been delivered yet */
  dlua_streams_t *st = streams_of(m);
  s->next = st->subs;
  if (st->subs)
    st->subs->prev = s;
  st->subs = s;
  s->ud = ud;
  ud->sub = s;
  ud->state = SUB_OPEN;
  return 1;
}

static dlua_subud_t *to_sub(lua_State *L) {
  return luaL_checkudata(L, 1, DLUA_SUB_MT);
}

/* sub:close(): no item is delivered after this.  Idempotent. */
static int s_close(lua_State *L) {
  dlua_subud_t *ud = to_sub(L);
  if (ud->sub)
    sub_close(ud->sub, SUB_CLOSED);
  return 0;
}

/* sub:status() -> "open" | "closed" | "failed" [, message] */
static int s_status(lua_State *L) {
  dlua_subud_t *ud = to_sub(L);
  switch (ud->state) {
  case SUB_OPEN:
    lua_pushliteral(L, "open");
    return 1;
  case SUB_FAILED:
    lua_pushliteral(L, "failed");
    lua_pushstring(L, ud->failure);
    return 2;
  default:
    lua_pushliteral(L, "closed");
    return 1;
  }
}

/* __gc: the reader runs on (until closed or the mesh closes); it only
 * forgets the userdata. */
static int s_gc(lua_State *L) {
  dlua_subud_t *ud = to_sub(L);
  if (ud->sub)
    ud->sub->ud = NULL;
  ud->sub = NULL;
  return 0;
}

static int s_tostring(lua_State *L) {
  dlua_subud_t *ud = to_sub(L);
  static const char *names[] = {"?", "open", "closed", "failed"};
  lua_pushfstring(L, "durable.subscription(%s)", names[ud->state]);
  return 1;
}

/* ---- the mesh's side ----------------------------------------------------- */

void dlua_streams_sweep(dlua_mesh_t *m) {
  dlua_streams_t *st = m->streams;
  if (st == NULL)
    return;
  for (dlua_src_t **p = &st->srcs; *p;) {
    dlua_src_t *s = *p;
    if (durable_hub_run_level(s->hub) == DURABLE_HUB_DEAD) {
      *p = s->next;
      src_free(s);
    } else {
      p = &s->next;
    }
  }
  for (dlua_cspec_t **p = &st->cspecs; *p;) {
    dlua_cspec_t *cs = *p;
    if (cs->hub && durable_hub_run_level(cs->hub) == DURABLE_HUB_DEAD) {
      *p = cs->next;
      cspec_free(cs);
    } else {
      p = &cs->next;
    }
  }
}

void dlua_streams_closing(dlua_mesh_t *m) {
  dlua_streams_t *st = m->streams;
  while (st && st->subs)
    sub_close(st->subs, SUB_CLOSED);
}

void dlua_streams_release(dlua_mesh_t *m) {
  dlua_streams_t *st = m->streams;
  if (st == NULL)
    return;
  dlua_streams_closing(m);
  while (st->srcs) {
    dlua_src_t *s = st->srcs;
    st->srcs = s->next;
    src_free(s);
  }
  while (st->cspecs) {
    dlua_cspec_t *cs = st->cspecs;
    st->cspecs = cs->next;
    cspec_free(cs);
  }
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
 * with the spec's message. */
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

/* core.retention_check(text) -> true, or nil, message, "EINVAL" saying what
 * a policy is. */
static int l_retention_check(lua_State *L) {
  char why[400];
  if (dlua_has_nul(L, 1, "retention policy", why, sizeof why))
    return dlua_fail(L, DURABLE_EINVAL, why);
  durable_retention_t policy;
  durable_error_t err = {0};
  int rc = durable_retention_parse(luaL_checkstring(L, 1), &policy, &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
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
                                 {NULL, NULL}};
  luaL_setfuncs(L, fns, 0);
  lua_getfield(L, -1, "Mesh");
  lua_pushcfunction(L, m_consume_type);
  lua_setfield(L, -2, "_consume_type");
  lua_pushcfunction(L, m_seek);
  lua_setfield(L, -2, "_seek");
  lua_pushcfunction(L, m_trim);
  lua_setfield(L, -2, "_trim");
  lua_pushcfunction(L, m_delete);
  lua_setfield(L, -2, "_delete");
  lua_pushcfunction(L, m_set_retention);
  lua_setfield(L, -2, "_set_retention");
  lua_pop(L, 1);
  lua_getfield(L, -1, "Hub");
  lua_pushcfunction(L, h_publish);
  lua_setfield(L, -2, "_publish");
  lua_pushcfunction(L, h_read);
  lua_setfield(L, -2, "_read");
  lua_pushcfunction(L, h_consume);
  lua_setfield(L, -2, "_consume");
  lua_pop(L, 1);
  static const luaL_Reg sub_methods[] = {
      {"close", s_close}, {"status", s_status}, {NULL, NULL}};
  if (luaL_newmetatable(L, DLUA_SUB_MT)) {
    luaL_newlib(L, sub_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, s_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, s_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, s_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}

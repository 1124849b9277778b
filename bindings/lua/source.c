/*
 * source.c: a durable.source{...} or durable.document_parts(path) seen from
 * C -- the durable_source_t through which a C reader takes its items from
 * nodes other than the stream's own: a document's parts, or the Lua
 * functions sequence_of(node) and payload_of(node).
 *
 * Both kinds of reader take one: a plain reader (reader.c) for as long as
 * it runs, a consumer (streams.c) for its own life or, when its
 * source_of(hub) made it, bound to that hub activation.  Its functions run
 * where the C reader calls them, when it needs their answer, through
 * dlua_pcall (one protected call, the instruction budget): in a turn of the
 * mesh, never inside the store's callback (src/streams/reader.c).  A
 * source holds registry references on its functions until dlua_src_free:
 * never left to the garbage collector, so that core.refs() comes back to
 * its baseline when a spec (tests/spec) closes its mesh.
 */
#include "lcore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void dlua_src_free(dlua_src_t *s) {
  if (s == NULL)
    return;
  dlua_unref(s->m->S->main, s->m->S, &s->seq_ref);
  dlua_unref(s->m->S->main, s->m->S, &s->payload_ref);
  if (s->hub)
    durable_hub_unref(s->hub);
  free(s);
}

/* A source from the table at `idx` ({ items_namespace=, sequence_of=,
 * payload_of= } or { document= }), or NULL with `err` set.  Never raises. */
dlua_src_t *dlua_src_new(lua_State *L, int idx, dlua_mesh_t *m, char *err,
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
    dlua_src_free(s);
    return NULL;
  }
  return s;
}

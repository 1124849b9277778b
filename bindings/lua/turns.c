/*
 * turns.c: how results reach Lua, and the mesh as the other files see it.
 *
 * A request (dlua_req_t) is a Lua function the binding calls once with the
 * outcome of a C call: a store read or write, an activation, a publish.
 * Its C callback runs inside libuv, so it only settles the request onto the
 * mesh's queue; the queue is delivered, one dlua_pcall per result and in
 * order, once uv_run has returned (dlua_drain: mesh.c calls it after each
 * step and while the mesh closes).  The hub and streams files post their
 * own results the same way, and log through the mesh's sink.  mesh.c, the
 * mesh's methods, sits on this file; this file names nothing of it.
 */
#include "lcore.h"

#include <durable_text.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char meshes_key = 0; /* weak: lightuserdata(m) -> userdata */

/* ---- requests: a Lua function called once
 * ------------------------------------ */

static void req_deliver(dlua_event_t *ev, lua_State *L);

dlua_req_t *dlua_req_new(lua_State *L, dlua_mesh_t *m, int idx) {
  luaL_checktype(L, idx, LUA_TFUNCTION);
  dlua_req_t *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    luaL_error(L, "out of memory");
    return NULL;
  }
  r->ev.deliver = req_deliver;
  r->m = m;
  lua_pushvalue(L, idx);
  r->cb_ref = dlua_ref(L, m->S);
  return r;
}

void dlua_req_free(dlua_req_t *r) {
  dlua_unref(r->m->S->main, r->m->S, &r->cb_ref);
  free(r->message);
  free(r->text);
  durable_node_free(r->node);
  for (size_t i = 0; i < r->count && r->nodes; i++)
    durable_node_free(r->nodes[i]);
  free(r->nodes);
  free(r);
}

lua_State *dlua_req_begin(dlua_req_t *r) {
  lua_State *L = dlua_mesh_lua(r->m);
  if (L == NULL || !lua_checkstack(L, 16)) {
    dlua_req_free(r);
    return NULL;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->cb_ref);
  return L;
}

void dlua_req_call(dlua_req_t *r, lua_State *L, int nargs) {
  dlua_mesh_t *m = r->m;
  dlua_req_free(r); /* the function is on the stack: it cannot go */
  if (dlua_pcall(L, m->S, m->budget, nargs, 0) != LUA_OK) {
    dlua_mesh_log(m, DURABLE_LOG_ERROR, "[Lua] a callback failed: %s",
                  dlua_traceback(L));
    lua_pop(L, 1);
  }
}

void dlua_req_call_failed(dlua_req_t *r, lua_State *L, int status,
                          const char *message) {
  lua_pushboolean(L, 0);
  lua_pushstring(L, message ? message : durable_strerror(status));
  lua_pushstring(L, durable_err_name(status));
  dlua_req_call(r, L, 3);
}

/* ---- turns: the queue of results, delivered at a safe point
 *
 * The store calls back from inside libuv: its uv_async when a worker thread
 * finished a request, its watch's handles when a commit is heard; a reader
 * calls back from there too.  Lua run there would run in the middle of the
 * store's (or the reader's) own work -- a reader closed from its own item
 * callback, a write issued while the store walks its completion list -- and
 * be charged to whoever runs uv_run.  So, as in Neovim (libuv callbacks put
 * events on a queue; the main loop processes them once uv_run returned),
 * these callbacks only copy what they got into an event on the mesh's FIFO
 * queue, and the binding delivers the queue right after uv_run() returns
 * (mesh:_step, mesh:step) and while the mesh closes: no libuv or runtime
 * code is then on the C stack.  The alternative, a uv_idle or uv_check of
 * our own, would run Lua inside a libuv callback again; a turn of the
 * issuing hub would need the runtime to carry binding events, and not every
 * result has an issuing hub (a script's mesh:get_node).  One queue per mesh
 * keeps results in the order the C runtime gave them; each event is its own
 * dlua_pcall (its own instruction budget, its traceback in the log), just
 * as the direct call was. */

void dlua_post(dlua_mesh_t *m, dlua_event_t *ev) {
  durable__queue_insert_tail(&m->events, &ev->link);
}

/* Deliver every queued event, in order (also those queued meanwhile).  When
 * no Lua may run (finalizing) they are only released. */
void dlua_drain(dlua_mesh_t *m) {
  if (m->draining)
    return;
  m->draining = 1;
  struct durable__queue *q;
  while ((q = durable__queue_pop(&m->events)) != NULL) {
    dlua_event_t *ev = DURABLE__QUEUE_DATA(q, dlua_event_t, link);
    ev->deliver(ev, dlua_mesh_lua(m));
  }
  m->draining = 0;
}

static void req_deliver(dlua_event_t *ev, lua_State *L) {
  dlua_req_t *r = (dlua_req_t *)ev;
  (void)L; /* dlua_req_begin asks the mesh the same thing */
  if ((L = dlua_req_begin(r)) == NULL)
    return; /* no Lua may run: released */
  /* stack: fn */
  switch (r->kind) {
  case DLUA_RES_FAILED:
    lua_pushboolean(L, 0);
    lua_pushstring(L, r->message ? r->message : durable_strerror(r->status));
    lua_pushstring(L, durable_err_name(r->status));
    dlua_req_call(r, L, 3);
    return;
  case DLUA_RES_TRUE:
    lua_pushboolean(L, 1);
    lua_pushboolean(L, 1);
    break;
  case DLUA_RES_INTEGER:
    lua_pushboolean(L, 1);
    lua_pushinteger(L, (lua_Integer)r->value);
    break;
  case DLUA_RES_NODE:
    lua_pushboolean(L, 1);
    if (r->node)
      dlua_push_node(L, r->node);
    else
      lua_pushnil(L);
    break;
  case DLUA_RES_NODES:
    lua_pushboolean(L, 1);
    lua_createtable(L, (int)r->count, 0);
    for (size_t i = 0; i < r->count; i++) {
      dlua_push_node(L, r->nodes[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_pushboolean(L, r->more);
    dlua_req_call(r, L, 3);
    return;
  case DLUA_RES_JSON: {
    char why[200];
    lua_pushboolean(L, 1);
    if (dlua_decode(L, r->text, why, sizeof why) < 0) {
      lua_pop(L, 1);
      dlua_req_call_failed(r, L, DURABLE_EIO, why);
      return;
    }
    break;
  }
  }
  dlua_req_call(r, L, 2);
}

void dlua_req_settle_failed(dlua_req_t *r, int status, const char *message) {
  r->kind = DLUA_RES_FAILED;
  r->status = status;
  free(r->message);
  r->message = message ? strdup(message) : NULL;
  dlua_post(r->m, &r->ev);
}

void dlua_req_settle_true(dlua_req_t *r) {
  r->kind = DLUA_RES_TRUE;
  dlua_post(r->m, &r->ev);
}

void dlua_req_settle_integer(dlua_req_t *r, long long value) {
  r->kind = DLUA_RES_INTEGER;
  r->value = value;
  dlua_post(r->m, &r->ev);
}

void dlua_req_settle_node(dlua_req_t *r, const durable_node_t *node) {
  if (node && (r->node = durable_node_dup(node)) == NULL) {
    dlua_req_settle_failed(r, DURABLE_ENOMEM, NULL);
    return;
  }
  r->kind = DLUA_RES_NODE;
  dlua_post(r->m, &r->ev);
}

void dlua_req_settle_nodes(dlua_req_t *r, const durable_node_t **nodes,
                           size_t count, int more) {
  if (count > 0) {
    r->nodes = calloc(count, sizeof(*r->nodes));
    if (r->nodes == NULL) {
      dlua_req_settle_failed(r, DURABLE_ENOMEM, NULL);
      return;
    }
    for (size_t i = 0; i < count; i++) {
      if ((r->nodes[i] = durable_node_dup(nodes[i])) == NULL) {
        r->count = i;
        dlua_req_settle_failed(r, DURABLE_ENOMEM, NULL);
        return;
      }
    }
  }
  r->count = count;
  r->more = more;
  r->kind = DLUA_RES_NODES;
  dlua_post(r->m, &r->ev);
}

void dlua_req_settle_json(dlua_req_t *r, char *text) {
  if (text == NULL) {
    dlua_req_settle_failed(r, DURABLE_ENOMEM, NULL);
    return;
  }
  r->text = text;
  r->kind = DLUA_RES_JSON;
  dlua_post(r->m, &r->ev);
}

int dlua_req_submitted(lua_State *L, dlua_req_t *r, int rc,
                       const durable_error_t *err, const char *what) {
  if (rc < 0) {
    dlua_req_free(r);
    if (rc == DURABLE_EINVAL) {
      if (what)
        return luaL_error(L, "%s: %s", what, err->message);
      return luaL_error(L, "%s", err->message);
    }
    return dlua_fail(L, rc, err->message);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- logging
 * ----------------------------------------------------------------- */

/* The sink given to the C mesh when Lua passed a log function. */
void dlua_log_sink(durable_log_level_t level, const char *line, void *data) {
  dlua_mesh_t *m = data;
  lua_State *L = dlua_mesh_lua(m);
  /* a log line written by the log function itself goes to stderr */
  if (L == NULL || m->log_ref == LUA_NOREF || m->in_log ||
      !lua_checkstack(L, 4)) {
    durable__log_stderr(level, line);
    return;
  }
  m->in_log = 1;
  lua_rawgeti(L, LUA_REGISTRYINDEX, m->log_ref);
  lua_pushstring(L, durable_log_level_name(level));
  lua_pushstring(L, line);
  if (dlua_pcall(L, m->S, m->budget, 2, 0) != LUA_OK) {
    durable__log_stderr(level, line);
    fprintf(stderr, "durable: the log function failed: %s\n",
            lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  m->in_log = 0;
}

void dlua_mesh_log(dlua_mesh_t *m, durable_log_level_t level, const char *fmt,
                   ...) {
  char line[4096];
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (len >= (int)sizeof line) /* cut between two characters */
    line[durable__utf8_cut(line, sizeof line - 1)] = '\0';
  if (m->mesh) {
    durable_mesh_log(m->mesh, level, "%s", line);
  } else if (level <= durable__log_threshold()) {
    durable__one_line(line);
    if (m->log_ref != LUA_NOREF)
      dlua_log_sink(level, line, m);
    else
      durable__log_stderr(level, line);
  }
}

/* ---- the userdata
 * ---------------------------------------------------------------- */

int dlua_push_mesh(lua_State *L, dlua_mesh_t *m) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &meshes_key);
  int type = lua_rawgetp(L, -1, m);
  lua_remove(L, -2);
  if (type != LUA_TUSERDATA) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

dlua_mesh_t *dlua_to_mesh(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, DLUA_MESH_MT);
}

dlua_mesh_t *dlua_check_mesh(lua_State *L, int idx) {
  dlua_mesh_t *m = dlua_to_mesh(L, idx);
  if (m->mesh == NULL)
    luaL_error(L, "the mesh is closed");
  return m;
}

void dlua_check_may_run(lua_State *L, dlua_mesh_t *m, const char *what) {
  if (m->S->depth > 0)
    luaL_error(L,
               "%s cannot run inside a handler or a callback (it would run "
               "the loop there); return a completion instead",
               what);
  if (m->running)
    luaL_error(L, "%s: the loop of this mesh is already running", what);
}

void dlua_req_on_status(int status, const char *message, void *data) {
  dlua_req_t *r = data;
  if (status < 0)
    dlua_req_settle_failed(r, status, message);
  else
    dlua_req_settle_true(r);
}

void dlua_mesh_register(lua_State *L, dlua_mesh_t *m) {
  /* stack: ... mesh */
  lua_rawgetp(L, LUA_REGISTRYINDEX, &meshes_key);
  lua_pushvalue(L, -2);
  lua_rawsetp(L, -2, m);
  lua_pop(L, 1);
}

void dlua_open_turns(lua_State *L) {
  dlua_registry_table(L, &meshes_key, "v");
  lua_pop(L, 1);
}

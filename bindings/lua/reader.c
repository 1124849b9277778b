/*
 * reader.c: the plain reader seen from Lua -- hub:_read(...), which
 * read_durable wraps, and the subscription userdata it returns -- and an
 * item as Lua sees it (the table a reader's on_item and a consumer's
 * handler are both handed).
 *
 * A reader's callbacks, on_item(item) and on_error(message), come from
 * inside the store's libuv callbacks, so what they carry is copied (the
 * item's text, its sequence) into the mesh's queue and delivered after
 * uv_run returned (turns.c), each through dlua_pcall (one protected call,
 * the instruction budget); an item queued before sub:close() is dropped,
 * not delivered.  Past READ_QUEUE_HIGH items waiting the C reader is
 * paused, so that a catch-up holds a bounded number of items.
 *
 * A reader holds registry references on its functions, and its source
 * (source.c), until :close(), its failure, or the mesh's close
 * (dlua_readers_close, before the C mesh closes: readers watch its store)
 * -- never left to the garbage collector.  A subscription userdata only
 * points at its reader: the reader runs until closed even when Lua drops
 * the userdata (an Rx subscription is not disposed by forgetting it), and
 * the userdata outlives its reader to say how it ended.
 */
#include "lcore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DLUA_SUB_MT "durable.subscription"

typedef struct dlua_sub_s dlua_sub_t;

typedef enum { SUB_OPEN = 1, SUB_CLOSED, SUB_FAILED } sub_state_t;

/* The userdata: how a reader ended, and the reader while it runs. */
typedef struct {
  dlua_sub_t *sub; /* NULL once the reader is gone */
  sub_state_t state;
  char failure[1024];
} dlua_subud_t;

struct dlua_sub_s {
  struct durable__queue link; /* in the mesh's readers while open */
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

/* ---- items --------------------------------------------------------------- */

int dlua_push_item(lua_State *L, const durable_item_t *item, char *err,
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

/* ---- the reader and its subscription ------------------------------------- */

static void sub_free(dlua_sub_t *s) {
  dlua_src_free(s->src);
  free(s);
}

/* End the reader; its callback does not run again.  No Lua runs here. */
static void sub_close(dlua_sub_t *s, sub_state_t how) {
  if (s->closed)
    return;
  s->closed = 1;
  durable_reader_close(s->reader);
  s->reader = NULL;
  dlua_unref(s->m->S->main, s->m->S, &s->item_ref);
  dlua_unref(s->m->S->main, s->m->S, &s->error_ref);
  durable__queue_remove(&s->link); /* nothing when it was never listed */
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
    if (dlua_push_item(L, &item, err, sizeof err) < 0) {
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
  durable_stream_id_t id = dlua_check_stream(L);
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
  durable__queue_init(&s->link); /* listed below, once it reads */
  s->m = m;
  s->item_ref = s->error_ref = LUA_NOREF;
  snprintf(s->name, sizeof s->name, "%s@%s", id.ns, id.key);
  snprintf(s->ns, sizeof s->ns, "%s", id.ns);
  snprintf(s->key, sizeof s->key, "%s", id.key);
  char why[256];
  if (!lua_isnil(L, 5) &&
      (s->src = dlua_src_new(L, 5, m, why, sizeof why)) == NULL) {
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
    dlua_unref(m->S->main, m->S, &s->item_ref);
    dlua_unref(m->S->main, m->S, &s->error_ref);
    sub_free(s);
    if (rc == DURABLE_EINVAL)
      return luaL_error(L, "read_durable: %s", err.message);
    return dlua_fail(L, rc, err.message);
  }
  /* durable_stream_read asks for the first item at once, but the store answers
   * later: nothing has been delivered yet */
  durable__queue_insert_head(&m->readers, &s->link);
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

void dlua_readers_close(dlua_mesh_t *m) {
  struct durable__queue *readers = &m->readers;
  while (!durable__queue_empty(readers)) /* each close unlinks its reader */
    sub_close(
        DURABLE__QUEUE_DATA(durable__queue_head(readers), dlua_sub_t, link),
        SUB_CLOSED);
}

void dlua_open_reader(lua_State *L) {
  /* stack: module */
  lua_getfield(L, -1, "Hub");
  lua_pushcfunction(L, h_read);
  lua_setfield(L, -2, "_read");
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

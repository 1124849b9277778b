/*
 * mesh.c: the mesh userdata: a durable_mesh_t on a uv loop that the
 * userdata owns, seen from Lua.
 *
 * Each mesh has its own loop, so that Lua decides when it runs: nothing
 * happens until Lua calls the step primitive (which completion:wait() and
 * mesh:run_until() do) or mesh:step() (another loop driving this one, see
 * below), and every callback of that loop arrives inside that call, on the
 * thread running Lua.  A step may not start while Lua is inside a call from
 * C (a handler, a completion callback): running the loop there would run
 * other handlers inside this one, which the hub model forbids.
 *
 *   Lua: c:wait() --> step(mesh, ms) --> uv_run(ONCE) --> hub turns: handlers
 *                         |                  |             (dlua_pcall)
 *                         |                  '--> store callbacks: copy the
 *                         |                       result into the queue
 *                         '--> after uv_run returned: drain the queue, one
 *                              dlua_pcall per result, in order ("turns")
 *
 * Another loop (luv, cqueues, copas) drives a mesh through mesh:fd() (the
 * loop's backend fd, readable when it has work), mesh:step() (uv_run
 * NOWAIT, then the queue) and mesh:timeout() (how long it may wait before
 * the next step).  The mesh does not run on a foreign uv_loop_t: then there
 * would be no point after uv_run that the binding owns, so results would
 * have to be delivered inside a libuv callback again; and luv's libuv need
 * not be the copy this module was linked with.
 *
 * Results come back to Lua as turns (turns.c): a store callback only
 * queues them, and they are delivered once uv_run has returned.
 *
 * The low-level methods here take a Lua function and call it once with
 * (true, value...) or (false, message, "ECODE"); lua/durable/ turns them into
 * completions.  They are registered as "_name" and core.c moves them off
 * the method table into core.primitives.mesh.name (user objects do not
 * carry them; the friendly names belong to the Lua layer).  Misuse (a wrong
 * argument) raises; a refusal of the runtime returns nil, message, code.
 *
 * Closing: mesh:close() (or __close, or __gc) closes the C mesh and runs the
 * loop until it is freed, delivering the queue after each turn, so every
 * pending callback runs first; then the loop itself is closed.  From __gc no
 * Lua is called any more: queued results only release their references and
 * unfinished replies are failed.
 */
#include "lcore.h"

#include <durable_stream_timings.h>

#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char mesh_methods_key = 0;

/* The store, or NULL once the closing mesh has let it go. */
static durable_store_t *mesh_store(dlua_mesh_t *m) {
  return m->mesh ? durable_mesh_store(m->mesh) : NULL;
}

static void close_loop(dlua_mesh_t *m) {
  if (!m->loop_ready)
    return;
  m->loop_ready = 0;
  uv_close((uv_handle_t *)&m->step_timer, NULL);
  uv_run(&m->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&m->loop) != 0) {
    /* something of the runtime stayed on the loop: say so, then clean up */
    fprintf(stderr, "durable: mesh on '%s' left handles on its loop\n",
            m->store_name);
    uv_walk(&m->loop, (uv_walk_cb)(void (*)(void))uv_close, NULL);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    uv_loop_close(&m->loop);
  }
}

static void release_fns(lua_State *L, dlua_mesh_t *m) {
  while (m->fns) {
    dlua_fn_t *f = m->fns;
    m->fns = f->next;
    dlua_unref(L, m->S, &f->ref);
    free(f->node_type);
    free(f->msg_type);
    free(f);
  }
}

static void on_mesh_closed(void *data) {
  dlua_mesh_t *m = data;
  m->closed = 1;
}

/* Close everything the userdata holds; safe to call again. */
static void mesh_close(lua_State *L, dlua_mesh_t *m, int finalizing) {
  if (m->mesh && !m->closing) {
    m->closing = 1;
    if (finalizing) {
      m->finalizing = 1; /* no Lua from here on */
      dlua_replies_fail_all(m, DURABLE_ESHUTDOWN, "the mesh was collected");
    } else {
      dlua_replies_flush_dropped(m);
    }
    dlua_streams_closing(m); /* readers watch the store: first */
    durable_mesh_close(m->mesh, on_mesh_closed, m);
    m->running = 1;
    int more = 1;
    while (!m->closed && more) {
      more = uv_run(&m->loop, UV_RUN_ONCE);
      m->running = 0;
      dlua_drain(m); /* the store finishes every request: deliver them */
      m->running = 1;
      dlua_replies_flush_dropped(m);
      dlua_replies_fail_dead(m); /* before the mesh is freed under them */
    }
    m->running = 0;
    dlua_drain(m);
    if (!m->closed)
      fprintf(stderr,
              "durable: mesh on '%s' went idle before it finished "
              "closing\n",
              m->store_name);
    m->mesh = NULL;
    m->S->meshes--;
    dlua_replies_detach(m);
  }
  if (m->mesh == NULL) {
    close_loop(m);
    dlua_drain(m); /* anything the last turns gave (a callback of the closed
                 mesh sees "the mesh is closed" should it use it) */
    dlua_streams_release(m);
    release_fns(L, m);
    dlua_unref(L, m->S, &m->log_ref);
  }
}

/* mesh:close(): recycle every hub (each may take up to the quiesce budget),
 * run every pending callback, close the store and the loop.  Idempotent. */
static int m_close(lua_State *L) {
  dlua_mesh_t *m = dlua_to_mesh(L, 1);
  if (m->closing) {
    if (m->mesh == NULL)
      return 0; /* closed already */
    return luaL_error(L, "mesh:close(): the mesh is already closing");
  }
  if (m->mesh)
    dlua_check_may_run(L, m, "mesh:close()");
  mesh_close(L, m, 0);
  return 0;
}

static int m_gc(lua_State *L) {
  dlua_mesh_t *m = dlua_to_mesh(L, 1);
  /* __close runs at the end of a scope: a normal close.  __gc may run at
   * any allocation, even inside a handler of another mesh: no Lua then. */
  if (m->mesh && !m->closing && lua_gettop(L) >= 2 && m->S->depth == 0 &&
      !m->running)
    mesh_close(L, m, 0);
  else
    mesh_close(L, m, 1);
  return 0;
}

static int m_tostring(lua_State *L) {
  dlua_mesh_t *m = dlua_to_mesh(L, 1);
  lua_pushfstring(L, "durable.mesh(%s%s)", m->store_name,
                  m->mesh ? "" : ", closed");
  return 1;
}

/* The stream timings of core.open's `streams` table at `idx` (their shape
 * checked by lua/durable/streams.lua; nil or a missing field keeps a
 * default). */
static durable_stream_options_t stream_options(lua_State *L, int idx) {
  static const char *const names[] = {"holder_probe_ms", "reclaim_ms",
                                      "backoff_min_ms", "backoff_max_ms",
                                      "liveness_ms"};
  uint32_t v[5] = {0};
  if (lua_istable(L, idx)) {
    for (int i = 0; i < 5; i++) {
      lua_getfield(L, idx, names[i]);
      lua_Integer n = luaL_optinteger(L, -1, 0);
      if (n < 0 || n > UINT32_MAX)
        luaL_error(L, "durable.open: 'streams.%s' out of range", names[i]);
      v[i] = (uint32_t)n;
      lua_pop(L, 1);
    }
  }
  return (durable_stream_options_t){.holder_probe_ms = v[0],
                                    .reclaim_ms = v[1],
                                    .backoff_min_ms = v[2],
                                    .backoff_max_ms = v[3],
                                    .liveness_ms = v[4]};
}

/* A burst of publishes is over (durable__window_on_burst_over): its
 * completions are Lua's garbage now.  Collected at the next safe point,
 * then what the process freed goes back to the system. */
static void burst_over_deliver(dlua_event_t *ev, lua_State *L) {
  dlua_mesh_t *m = DURABLE__QUEUE_DATA(ev, dlua_mesh_t, burst_over);
  m->burst_over_posted = 0;
  /* twice: a cold completion has a finalizer, and what one holds is freed
   * only by the cycle after the one that ran it */
  if (L != NULL) {
    lua_gc(L, LUA_GCCOLLECT);
    lua_gc(L, LUA_GCCOLLECT);
  }
  malloc_trim(0);
}

static void on_burst_over(void *data) {
  dlua_mesh_t *m = data;
  if (m->burst_over_posted)
    return;
  m->burst_over_posted = 1;
  m->burst_over.deliver = burst_over_deliver;
  dlua_post(m, &m->burst_over);
}

/* opts.publish_window, checked by durable.open (init.lua) already. */
static durable_publish_window_t publish_window(lua_State *L, int idx) {
  durable_publish_window_t w = {0};
  if (!lua_istable(L, idx))
    return w;
  lua_getfield(L, idx, "items");
  w.items = (uint32_t)luaL_optinteger(L, -1, 0);
  lua_getfield(L, idx, "bytes");
  w.bytes = (uint64_t)luaL_optinteger(L, -1, 0);
  lua_getfield(L, idx, "waiting_bytes");
  w.waiting_bytes = (uint64_t)luaL_optinteger(L, -1, 0);
  lua_getfield(L, idx, "max_block_ms");
  w.max_block_ms = (uint32_t)luaL_optinteger(L, -1, 0);
  lua_pop(L, 4);
  return w;
}

/* core.stream_timings_check(streams) -> true, or nil, message, "EINVAL"
 * naming the options that break the rule between them (the C layer's,
 * durable_stream_timings.h), so that durable.open raises at its caller's
 * line before it loads a plugin. */
static int l_stream_timings_check(lua_State *L) {
  durable_stream_options_t streams = stream_options(L, 1);
  durable_error_t bad = {0};
  int rc = durable__stream_timings_check(&streams, &bad);
  if (rc < 0)
    return dlua_fail(L, rc, bad.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.open{ store=, read_store=, quiesce_budget_ms=, request_timeout_ms=,
 *            instruction_budget=, log=function(level, line) end,
 *            streams={ holder_probe_ms=, ... }, publish_window={ items=,
 *            bytes=, waiting_bytes=, max_block_ms= }, read_window={ items=,
 *            bytes= } }
 * -> mesh, or nil, message, code when the store cannot be opened. */
static int l_open(lua_State *L) {
  dlua_state_t *S = dlua_state(L);
  durable_error_t err = {0};
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "store");
  const char *store = lua_tostring(L, -1);
  if (lua_type(L, -1) != LUA_TSTRING || *store == '\0')
    return luaL_error(L, "durable.open: 'store' must be a store URL string");
  store = dlua_check_text(L, -1, "durable.open: 'store'");
  lua_getfield(L, 1, "quiesce_budget_ms");
  lua_getfield(L, 1, "request_timeout_ms");
  lua_getfield(L, 1, "instruction_budget");
  lua_getfield(L, 1, "log");
  /* stack: opts store quiesce timeout budget log */
  lua_Integer quiesce = luaL_optinteger(L, 3, 0);
  lua_Integer timeout = luaL_optinteger(L, 4, 0);
  lua_Integer budget = luaL_optinteger(L, 5, DLUA_DEFAULT_BUDGET);
  if (quiesce < 0 || quiesce > UINT32_MAX)
    return luaL_error(L, "durable.open: 'quiesce_budget_ms' out of range");
  if (timeout < 0 || timeout > UINT32_MAX)
    return luaL_error(L, "durable.open: 'request_timeout_ms' out of range");
  if (budget < 0)
    return luaL_error(L, "durable.open: 'instruction_budget' must be >= 0 "
                         "(0: no budget)");
  if (!lua_isnil(L, 6) && !lua_isfunction(L, 6))
    return luaL_error(L, "durable.open: 'log' must be a function(level, line)");
  lua_getfield(L, 1, "streams");
  durable_stream_options_t streams = stream_options(L, 7);
  lua_pop(L, 1);
  lua_getfield(L, 1, "publish_window");
  durable_publish_window_t window = publish_window(L, 7);
  lua_pop(L, 1);
  lua_getfield(L, 1, "read_window");
  durable_read_window_t reads = {0};
  if (lua_istable(L, 7)) {
    lua_getfield(L, 7, "items");
    reads.items = (uint32_t)luaL_optinteger(L, -1, 0);
    lua_getfield(L, 7, "bytes");
    reads.bytes = (uint64_t)luaL_optinteger(L, -1, 0);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  durable_error_t bad = {0};
  /* misuse raises: durable_mesh_open would only return the refusal */
  if (durable__stream_timings_check(&streams, &bad) < 0)
    return luaL_error(L, "durable.open: %s", bad.message);
  /* stack: opts store quiesce timeout budget log */
  lua_getfield(L, 1, "principal");
  const char *principal = NULL;
  if (!lua_isnil(L, 7)) {
    principal = dlua_check_text(L, 7, "durable.open: 'principal'");
    durable_error_t why = {0};
    if (durable_principal_check(principal, &why) < 0)
      return luaL_error(L, "durable.open: 'principal': %s", why.message);
  }
  lua_getfield(L, 1, "read_store");
  const char *read_store = NULL;
  if (!lua_isnil(L, 8)) {
    if (lua_type(L, 8) != LUA_TSTRING || lua_rawlen(L, 8) == 0)
      return luaL_error(L, "durable.open: 'read_store' must be a store URL "
                           "string");
    read_store = dlua_check_text(L, 8, "durable.open: 'read_store'");
  }
  /* stack: opts store quiesce timeout budget log principal read_store
   * (anchored) */

  /* Closed and consistent before anything is acquired, so __gc is safe at
   * every step below. */
  dlua_mesh_t *m = lua_newuserdatauv(L, sizeof(*m), 1);
  memset(m, 0, sizeof(*m));
  durable__queue_init(&m->replies);
  durable__queue_init(&m->events);
  durable__queue_init(&m->readers);
  m->S = S;
  m->log_ref = LUA_NOREF;
  m->budget = budget;
  snprintf(m->store_name, sizeof m->store_name, "%s", store);
  luaL_setmetatable(L, DLUA_MESH_MT);
  /* stack: opts store quiesce timeout budget log principal read_store mesh */
  int rc = uv_loop_init(&m->loop);
  if (rc != 0)
    return dlua_fail(L, DURABLE_EIO, uv_strerror(rc));
  uv_timer_init(&m->loop, &m->step_timer);
  m->loop_ready = 1;
  if (lua_isfunction(L, 6)) {
    lua_pushvalue(L, 6);
    m->log_ref = dlua_ref(L, S);
  }
  durable_mesh_options_t options = {
      .store = store,
      .read_store = read_store,
      .principal = principal,
      .quiesce_budget_ms = (uint32_t)quiesce,
      .request_timeout_ms = (uint32_t)timeout,
      .log = m->log_ref != LUA_NOREF ? dlua_log_sink : NULL,
      .log_data = m,
      .streams = streams,
      .publish_window = window,
      .read_window = reads,
  };
  rc = durable_mesh_open(&m->loop, &options, &m->mesh, &err);
  if (rc < 0) {
    m->mesh = NULL;
    mesh_close(L, m, 0);
    return dlua_fail(L, rc, err.message);
  }
  snprintf(m->store_name, sizeof m->store_name, "%s",
           durable_store_name(durable_mesh_store(m->mesh)));
  S->meshes++;
  durable__window_on_burst_over(m->mesh, on_burst_over, m);
  dlua_mesh_register(L, m);
  /* stack: ... mesh */
  return 1;
}

/* ---- running the loop
 * ---------------------------------------------------------- */

/* The step's time is up.  uv_stop also makes this turn's poll return at
 * once, should the timer have fired before it rather than during it. */
static void on_step_timer(uv_timer_t *timer) {
  uv_stop(timer->loop);
}

/* After each uv_run of a step: the safe point.  No libuv or runtime code is
 * on the stack: deliver the queue, fail the replies dropped meanwhile, let
 * go of what dead hubs held. */
static void after_run(dlua_mesh_t *m) {
  dlua_drain(m);
  dlua_replies_flush_dropped(m);
  dlua_streams_sweep(m);
}

/* mesh:_step([timeout_ms]) -> alive: run the loop once, waiting at most
 * timeout_ms for something to happen (no limit when nil).  Returns whether
 * the loop still has anything that could make something happen. */
static int m_step(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  lua_Integer ms = luaL_optinteger(L, 2, -1);
  dlua_check_may_run(L, m, "completion:wait() / mesh:run_until()");
  dlua_replies_flush_dropped(m); /* a safe point: no runtime code below */
  dlua_drain(m);
  if (ms >= 0) {
    /* from now, not from the loop's cached clock: a timer due already
     * would fire before the poll, which would then wait for ever */
    uv_update_time(&m->loop);
    uv_timer_start(&m->step_timer, on_step_timer, (uint64_t)ms, 0);
  }
  m->running = 1;
  uv_run(&m->loop, UV_RUN_ONCE);
  m->running = 0;
  uv_timer_stop(&m->step_timer);
  after_run(m);
  lua_pushboolean(L, uv_loop_alive(&m->loop));
  return 1;
}

/* How long a loop driving this mesh may wait before the next mesh:step():
 * -1 when only the fd can make something happen (no timer due, nothing
 * ready), 0 when a step is due now. */
static lua_Integer next_timeout(dlua_mesh_t *m) {
  /* results to deliver, or replies a collection dropped (failed at the
   * next step): step now */
  if (!durable__queue_empty(&m->events) || m->dropped)
    return 0;
  if (!uv_loop_alive(&m->loop))
    return -1;
  /* the loop's clock moves only inside uv_run: refresh it, or a driver
   * that asks again and again while its own loop is busy would be told
   * the same wait each time and never step */
  uv_update_time(&m->loop);
  return uv_backend_timeout(&m->loop);
}

/* mesh:step() -> timeout_ms: run the mesh's loop once without waiting
 * (uv_run NOWAIT), deliver what it gave, and say how long the caller's loop
 * may wait before stepping again (-1: until mesh:fd() is readable).  For
 * programs whose own loop (luv, cqueues, copas) drives the mesh: poll
 * mesh:fd() for reading, step when it is readable or the timeout ran out,
 * and look at mesh:timeout() again before each wait, since Lua that used the
 * mesh meanwhile (a request, a publish) may have made a step due. */
static int m_step_public(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  dlua_check_may_run(L, m, "mesh:step()");
  dlua_replies_flush_dropped(m);
  dlua_drain(m);
  m->running = 1;
  uv_run(&m->loop, UV_RUN_NOWAIT);
  m->running = 0;
  after_run(m);
  lua_pushinteger(L, next_timeout(m));
  return 1;
}

/* mesh:timeout() -> the wait before the next mesh:step() (see there);
 * runs nothing. */
static int m_timeout(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  lua_pushinteger(L, next_timeout(m));
  return 1;
}

/* mesh:fd() -> the file descriptor of the mesh's loop (uv_backend_fd):
 * readable whenever the loop has something to do.  Only for polling; it
 * goes with the mesh's close (stop polling it first). */
static int m_fd(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  int fd = uv_backend_fd(&m->loop);
  if (fd < 0)
    return dlua_fail(L, DURABLE_EIO,
                     "this platform's libuv has no backend file descriptor");
  lua_pushinteger(L, fd);
  return 1;
}

/* mesh:_now() -> the loop's clock in milliseconds (refreshed). */
static int m_now(lua_State *L) {
  dlua_mesh_t *m = dlua_to_mesh(L, 1);
  if (!m->loop_ready)
    return luaL_error(L, "the mesh is closed");
  uv_update_time(&m->loop);
  lua_pushinteger(L, (lua_Integer)uv_now(&m->loop));
  return 1;
}

/* ---- store operations
 * ------------------------------------------------------------ */

/* The store's callbacks: inside its uv_async, so they only queue the result
 * (see "turns" above). */
static void on_store_node(const durable_result_t *res, void *data) {
  dlua_req_t *r = data;
  if (res->status < 0)
    dlua_req_settle_failed(r, res->status, res->message);
  else
    dlua_req_settle_node(r, res->node);
}

static void on_store_nodes(const durable_result_t *res, void *data) {
  dlua_req_t *r = data;
  if (res->status < 0)
    dlua_req_settle_failed(r, res->status, res->message);
  else
    dlua_req_settle_nodes(r, res->nodes, res->count, res->more);
}

/* Submit with `submit` having filled rc/err; shared tail of the store ops. */
static int store_submitted(lua_State *L, dlua_req_t *r, int rc,
                           const durable_error_t *err, const char *what) {
  if (rc >= 0) {
    lua_pushboolean(L, 1);
    return 1;
  }
  dlua_req_free(r);
  if (rc == DURABLE_EINVAL) /* a wrong argument: misuse */
    return luaL_error(L, "%s: %s", what,
                      err->message[0] ? err->message : durable_strerror(rc));
  return dlua_fail(L, rc, err->message);
}

/* mesh:_get(path, cb) -> true | nil, msg, code.  cb(true, node) or
 * cb(false, message, code) ("ENOTFOUND" when there is none). */
static int m_get(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *path = dlua_check_text(L, 2, "get_node: path");
  durable_store_t *store = mesh_store(m);
  if (store == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closing");
  dlua_req_t *r = dlua_req_new(L, m, 3);
  durable_error_t err = {0};
  int rc = durable_store_get(store, durable_mesh_principal(m->mesh), path,
                             on_store_node, r, &err);
  return store_submitted(L, r, rc, &err, "get_node");
}

/* mesh:_query(query, after, limit, cb): cb(true, nodes, more). */
static int m_query(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *query = dlua_check_text(L, 2, "query");
  const char *after = dlua_opt_text(L, 3, "query: after", NULL);
  lua_Integer limit = luaL_optinteger(L, 4, 0);
  luaL_argcheck(L, limit >= 0 && limit <= 1000, 4, "limit must be 0..1000");
  durable_store_t *store = mesh_store(m);
  if (store == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closing");
  dlua_req_t *r = dlua_req_new(L, m, 5);
  durable_error_t err = {0};
  int rc = durable_store_query(store, durable_mesh_principal(m->mesh), query,
                               after, (size_t)limit, on_store_nodes, r, &err);
  return store_submitted(L, r, rc, &err, "query");
}

/* The kind named `name`, or 0. */
/* mesh:_write({ {kind=, path=, node_type=, content=, expected_version=}, ...
 * }, cb): one transaction; cb(true, last written node or nil). */
static int m_write(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TFUNCTION);
  durable_store_t *store = mesh_store(m);
  if (store == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closing");
  char why[512];
  dlua_writes_t w;
  if (dlua_writes_read(L, 2, &w, why, sizeof why) < 0)
    return luaL_error(L, "%s", why);
  durable_error_t err = {0};
  dlua_req_t *r = dlua_req_new(L, m, 3);
  int rc = durable_store_write_as(store, durable_mesh_principal(m->mesh),
                                  w.writes, w.count, on_store_node, r, &err);
  dlua_writes_free(&w);
  return store_submitted(L, r, rc, &err, "write");
}

/* ---- node types
 * ------------------------------------------------------------------ */

static dlua_fn_t *fn_new(lua_State *L, dlua_mesh_t *m, int idx,
                         const char *node_type, const char *msg_type) {
  luaL_checktype(L, idx, LUA_TFUNCTION);
  dlua_fn_t *f = calloc(1, sizeof(*f));
  if (f == NULL || (f->node_type = strdup(node_type)) == NULL ||
      (f->msg_type = strdup(msg_type)) == NULL) {
    if (f)
      free(f->node_type);
    free(f);
    luaL_error(L, "out of memory");
  }
  f->m = m;
  lua_pushvalue(L, idx);
  f->ref = dlua_ref(L, m->S);
  f->next = m->fns;
  m->fns = f;
  return f;
}

/* Drop the newest fn (its registration was refused). */
static void fn_drop(lua_State *L, dlua_mesh_t *m) {
  dlua_fn_t *f = m->fns;
  m->fns = f->next;
  dlua_unref(L, m->S, &f->ref);
  free(f->node_type);
  free(f->msg_type);
  free(f);
}

static durable_node_type_t *check_type(lua_State *L, dlua_mesh_t *m, int idx) {
  const char *name = dlua_check_text(L, idx, "NodeType name");
  durable_error_t err = {0};
  if (durable_node_type_check(name, &err) < 0)
    luaL_error(L, "%s", err.message);
  durable_node_type_t *t = durable_node_type_get(m->mesh, name);
  if (t == NULL)
    luaL_error(L, "out of memory");
  return t;
}

/* The C side of a message for a Lua handler; see hub.c. */
void dlua_handler_cb(durable_hub_t *hub, const durable_msg_t *msg,
                     durable_reply_t *reply, void *data);
void dlua_step_cb(durable_hub_t *hub, durable_reply_t *done, void *data);
void dlua_dispose_cb(durable_hub_t *hub, void *data);

/* mesh:_node_type(name): make sure NodeType `name` is configured (a type
 * with no handler still is one). */
static int m_node_type(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  check_type(L, m, 2);
  return 0;
}

/* mesh:_on(node_type, msg_type, fn): fn(hub, msg, reply) for each message. */
static int m_on(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  durable_node_type_t *t = check_type(L, m, 2);
  const char *msg_type = dlua_check_text(L, 3, "message type");
  dlua_fn_t *f = fn_new(L, m, 4, lua_tostring(L, 2), msg_type);
  durable_error_t err = {0};
  if (durable_node_type_on(t, msg_type, dlua_handler_cb, f, &err) < 0) {
    fn_drop(L, m);
    return luaL_error(L, "%s", err.message);
  }
  return 0;
}

/* mesh:_on_init(node_type, fn): fn(hub, reply) when a hub activates. */
static int m_on_init(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  durable_node_type_t *t = check_type(L, m, 2);
  dlua_fn_t *f = fn_new(L, m, 3, lua_tostring(L, 2), "init");
  if (durable_node_type_on_init(t, dlua_step_cb, f) < 0) {
    fn_drop(L, m);
    return luaL_error(L, "cannot add an init step to NodeType '%s'",
                      lua_tostring(L, 2));
  }
  return 0;
}

/* mesh:_on_dispose(node_type, fn): fn(hub) when a hub leaves. */
static int m_on_dispose(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  durable_node_type_t *t = check_type(L, m, 2);
  dlua_fn_t *f = fn_new(L, m, 3, lua_tostring(L, 2), "dispose");
  if (durable_node_type_on_dispose(t, dlua_dispose_cb, f) < 0) {
    fn_drop(L, m);
    return luaL_error(L, "cannot add a dispose action to NodeType '%s'",
                      lua_tostring(L, 2));
  }
  return 0;
}

/* ---- hubs, activation, recycle, reads
 * ---------------------------------------------- */

/* mesh:_client(address) -> hub, or nil, message, code. */
static int m_client(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *address = dlua_check_text(L, 2, "hub address");
  durable_hub_t *hub = NULL;
  durable_error_t err = {0};
  int rc = durable_mesh_client(m->mesh, address, &hub, &err);
  if (rc == DURABLE_EINVAL) /* a bad address: misuse */
    return luaL_error(L, "%s", err.message);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  if (!dlua_push_hub(L, m, hub))
    return luaL_error(L, "the mesh is closed");
  return 1;
}

/* mesh:_find(address) -> the active hub at address, or nil. */
static int m_find(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  durable_hub_t *hub =
      durable_mesh_find(m->mesh, dlua_check_text(L, 2, "hub address"));
  if (hub == NULL || !dlua_push_hub(L, m, hub))
    lua_pushnil(L);
  return 1;
}

/* mesh:reads_hub() -> the process-level read-issuing hub; never a
 * principal's: its messages speak for the runtime, past the gate of what
 * the principal may read (hub/request.c). */
static int m_reads_hub(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  if (m->mesh && durable_mesh_principal(m->mesh))
    return luaL_error(L,
                      "mesh:reads_hub(): the runtime's own hub is not for a "
                      "mesh acting as principal '%s'",
                      durable_mesh_principal(m->mesh));
  if (!dlua_push_hub(L, m, durable__mesh_reads_hub(m->mesh)))
    lua_pushnil(L);
  return 1;
}

typedef int (*status_submit_fn)(durable_mesh_t *, const char *,
                                durable_status_cb, void *, durable_error_t *);

static int status_op(lua_State *L, status_submit_fn submit, const char *what) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *address = dlua_check_text(L, 2, "hub address");
  dlua_req_t *r = dlua_req_new(L, m, 3);
  durable_error_t err = {0};
  int rc = submit(m->mesh, address, dlua_req_on_status, r, &err);
  return dlua_req_submitted(L, r, rc, &err, what);
}

/* mesh:_activate(address, cb): cb(true, true) once Started, cb(false, msg,
 * code). */
static int m_activate(lua_State *L) {
  return status_op(L, durable_mesh_activate, "activate");
}

/* mesh:_recycle(address, cb): cb(true, true) once the hub is dead. */
static int m_recycle(lua_State *L) {
  return status_op(L, durable_mesh_recycle, "recycle");
}

static void on_read(durable_read_outcome_t outcome, const durable_node_t *node,
                    const char *message, void *data) {
  dlua_req_t *r = data;
  if (outcome == DURABLE_READ_UNAVAILABLE)
    dlua_req_settle_failed(r, DURABLE_EUNAVAIL,
                           message ? message : "unavailable");
  else if (outcome == DURABLE_READ_DENIED)
    dlua_req_settle_failed(r, DURABLE_EACCES, message);
  else
    dlua_req_settle_node(r, outcome == DURABLE_READ_PRESENT ? node : NULL);
}

/* mesh:_read(path, cb): a mesh read; cb(true, node | nil) or cb(false,
 * message, "EUNAVAIL"). */
static int m_read(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *path = dlua_check_text(L, 2, "read: path");
  dlua_req_t *r = dlua_req_new(L, m, 3);
  durable_error_t err = {0};
  int rc = durable_mesh_read(m->mesh, path, on_read, r, &err);
  return dlua_req_submitted(L, r, rc, &err, "read");
}

/* ---- grants
 * ------------------------------------------------------------------ */

static void on_granted(const durable_result_t *res, void *data) {
  dlua_req_t *r = data;
  if (res->status < 0)
    dlua_req_settle_failed(r, res->status, res->message);
  else
    dlua_req_settle_true(r);
}

/* A principal's mesh may not grant: granting is the platform's. */
static int platform_only(lua_State *L, dlua_mesh_t *m, dlua_req_t *r,
                         const char *what) {
  const char *me = durable_mesh_principal(m->mesh);
  char message[DURABLE_PRINCIPAL_MAX + 128];
  snprintf(message, sizeof message,
           "principal '%s' may not %s: grants are the platform's", me, what);
  dlua_req_settle_failed(r, DURABLE_EACCES, message);
  lua_pushboolean(L, 1);
  return 1;
}

/* mesh:_grant(principal, prefix, modes, add, cb): modes DURABLE_GRANT_*
 * (0 with add false: all); cb(true, true). */
static int m_grant(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *who = dlua_check_text(L, 2, "grant: principal");
  const char *prefix = dlua_check_text(L, 3, "grant: prefix");
  lua_Integer modes = luaL_checkinteger(L, 4);
  int add = lua_toboolean(L, 5);
  durable_store_t *store = mesh_store(m);
  if (store == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closing");
  dlua_req_t *r = dlua_req_new(L, m, 6);
  durable_error_t err = {0};
  const char *what = add ? "grant" : "revoke";
  if (durable_mesh_principal(m->mesh) != NULL) {
    /* misuse still raises first, as for the platform */
    int rc = durable_principal_check(who, &err);
    if (rc == 0)
      rc = durable_path_check(prefix, &err);
    if (rc < 0)
      return dlua_req_submitted(L, r, rc, &err, what);
    return platform_only(L, m, r, what);
  }
  int rc = add ? durable_store_grant(store, who, prefix, (int)modes, on_granted,
                                     r, &err)
               : durable_store_revoke(store, who, prefix, (int)modes,
                                      on_granted, r, &err);
  return dlua_req_submitted(L, r, rc, &err, what);
}

static void on_grants(const durable_result_t *res, void *data) {
  dlua_req_t *r = data;
  if (res->status < 0) {
    dlua_req_settle_failed(r, res->status, res->message);
    return;
  }
  json_t *all = json_array();
  for (size_t i = 0; all && i < res->count; i++) {
    json_t *g =
        json_pack("{s:s, s:s, s:s}", "principal", res->grants[i].principal,
                  "prefix", res->grants[i].prefix, "mode",
                  durable_grant_mode_name(res->grants[i].modes));
    if (g == NULL || json_array_append_new(all, g) < 0) {
      json_decref(all);
      all = NULL;
    }
  }
  char *text = all ? json_dumps(all, JSON_COMPACT) : NULL;
  json_decref(all);
  dlua_req_settle_json(r, text);
}

/* mesh:_grants(principal | nil, cb): cb(true, { {principal=, prefix=,
 * mode=}, ... }).  A principal's mesh lists its own grants only. */
static int m_grants(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *who = dlua_opt_text(L, 2, "grants: principal", NULL);
  durable_store_t *store = mesh_store(m);
  if (store == NULL)
    return dlua_fail(L, DURABLE_ESHUTDOWN, "the mesh is closing");
  dlua_req_t *r = dlua_req_new(L, m, 3);
  durable_error_t err = {0};
  const char *me = durable_mesh_principal(m->mesh);
  if (me != NULL && who != NULL && strcmp(me, who) != 0) {
    char message[2 * DURABLE_PRINCIPAL_MAX + 128];
    snprintf(message, sizeof message,
             "principal '%s' may not list the grants of '%.128s': only its "
             "own",
             me, who);
    dlua_req_settle_failed(r, DURABLE_EACCES, message);
    lua_pushboolean(L, 1);
    return 1;
  }
  int rc = durable_store_grants(store, me ? me : who, on_grants, r, &err);
  return dlua_req_submitted(L, r, rc, &err, "grants");
}

/* mesh:principal() -> the principal the mesh acts as, or nil (the
 * platform). */
static int m_principal(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  if (m->mesh == NULL)
    return luaL_error(L, "the mesh is closed");
  const char *me = durable_mesh_principal(m->mesh);
  if (me)
    lua_pushstring(L, me);
  else
    lua_pushnil(L);
  return 1;
}

/* streams["NS@KEY"] = { appended, handled, failed, redelivered,
 * dead_lettered, trimmed, batches }; stack: stats streams -> stats
 * streams */
/* A table of counters. */
static void push_counts(lua_State *L, const durable_stream_stats_t *c) {
  lua_createtable(L, 0, 8);
#define COUNT(name)                                                            \
  lua_pushinteger(L, (lua_Integer)c->name);                                    \
  lua_setfield(L, -2, #name)
  COUNT(appended);
  COUNT(handled);
  COUNT(failed);
  COUNT(redelivered);
  COUNT(dead_lettered);
  COUNT(trimmed);
  COUNT(batches);
  if (c->group) { /* a group's: times a trim here detached it */
    COUNT(detached);
  }
#undef COUNT
}

/* streams["NS@KEY"] (the table at the top) = the stream's own counters,
 * with a consumer group's in its `groups` = { [GROUP] = counters } (the
 * stream's made with zeroes when only its groups counted here). */
static void push_stream_stats(const durable_stream_id_t *id,
                              const durable_stream_stats_t *c, void *data) {
  lua_State *L = data;
  int streams = lua_gettop(L);
  lua_pushfstring(L, "%s@%s", id->ns, id->key);
  int name = lua_gettop(L);
  if (c->group == NULL) {
    push_counts(L, c);
    lua_pushvalue(L, name); /* a groups table made before stays */
    if (lua_gettable(L, streams) == LUA_TTABLE) {
      lua_getfield(L, -1, "groups");
      lua_setfield(L, -3, "groups");
    }
    lua_pop(L, 1);
    lua_settable(L, streams);
    return;
  }
  lua_pushvalue(L, name);
  if (lua_gettable(L, streams) != LUA_TTABLE) {
    static const durable_stream_stats_t none = {0};
    lua_pop(L, 1);
    push_counts(L, &none);
    lua_pushvalue(L, name);
    lua_pushvalue(L, -2);
    lua_settable(L, streams);
  }
  if (lua_getfield(L, -1, "groups") != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "groups");
  }
  push_counts(L, c);
  lua_setfield(L, -2, c->group);
  lua_settop(L, streams);
}

/* mesh:stats() -> { activations, recycles, quiesce_timeouts, messages,
 * read_reprobes, active_hubs, streams = { ["NS@KEY"] = counters, with
 * groups = { [GROUP] = counters } },
 * publish = { the publish window's }, reads = { the read window's } }. */
static int m_stats(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  durable_mesh_stats_t s;
  durable_publish_stats_t p = {0};
  durable_read_stats_t r = {0};
  durable_mesh_stats(m->mesh, &s);
  if (m->mesh) {
    durable_mesh_publish_stats(m->mesh, &p);
    durable_mesh_read_stats(m->mesh, &r);
  }
/* one field of the struct `of` into the table at the top */
#define FIELD(of, name)                                                        \
  (lua_pushinteger(L, (lua_Integer)(of).name), lua_setfield(L, -2, #name))
  lua_createtable(L, 0, 9);
  FIELD(s, activations);
  FIELD(s, recycles);
  FIELD(s, quiesce_timeouts);
  FIELD(s, messages);
  FIELD(s, read_reprobes);
  FIELD(s, active_hubs);
  /* stack: stats */
  lua_newtable(L);
  if (m->mesh)
    durable_mesh_stream_stats(m->mesh, push_stream_stats, L);
  lua_setfield(L, -2, "streams");
  lua_createtable(L, 0, 7);
  FIELD(p, in_flight);
  FIELD(p, in_flight_bytes);
  FIELD(p, waiting);
  FIELD(p, waiting_bytes);
  FIELD(p, waited);
  FIELD(p, refused);
  FIELD(p, expired);
  lua_setfield(L, -2, "publish");
  lua_createtable(L, 0, 3);
  FIELD(r, held);
  FIELD(r, held_bytes);
  FIELD(r, waiting);
  lua_setfield(L, -2, "reads");
#undef FIELD
  return 1;
}

/* mesh:log(level, line): one line through the mesh's sink. */
static int m_log(lua_State *L) {
  static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  int level = luaL_checkoption(L, 2, NULL, levels) + 1;
  dlua_mesh_log(m, (durable_log_level_t)level, "%s", luaL_checkstring(L, 3));
  return 0;
}

/* mesh:store_name() -> the store as messages name it
 * (durable_store_name: the URL, or with a password its key=value pairs,
 * every secret "***"). */
static int m_store_name(lua_State *L) {
  lua_pushstring(L, dlua_to_mesh(L, 1)->store_name);
  return 1;
}

/* mesh:is_open() -> false once closed (or closing). */
static int m_is_open(lua_State *L) {
  dlua_mesh_t *m = dlua_to_mesh(L, 1);
  lua_pushboolean(L, m->mesh != NULL && !m->closing);
  return 1;
}

/* core._inside_uv_run(mesh) -> whether uv_run of the mesh's loop is on the
 * C stack right now.  For the behaviour specs (tests/spec): a completion or
 * reader callback must see false (it is delivered after uv_run returned), a
 * message handler sees true (it is a turn of the runtime, inside the loop). */
static int l_inside_uv_run(lua_State *L) {
  lua_pushboolean(L, dlua_to_mesh(L, 1)->running);
  return 1;
}

void dlua_open_mesh(lua_State *L) {
  static const luaL_Reg methods[] = {
      {"close", m_close},
      {"stats", m_stats},
      {"log", m_log},
      {"store_name", m_store_name},
      {"is_open", m_is_open},
      {"reads_hub", m_reads_hub},
      {"step", m_step_public},
      {"timeout", m_timeout},
      {"fd", m_fd},
      {"_step", m_step},
      {"_now", m_now},
      {"_get", m_get},
      {"_query", m_query},
      {"_write", m_write},
      {"_node_type", m_node_type},
      {"_on", m_on},
      {"_on_init", m_on_init},
      {"_on_dispose", m_on_dispose},
      {"_client", m_client},
      {"_find", m_find},
      {"_activate", m_activate},
      {"_recycle", m_recycle},
      {"_read", m_read},
      {"_grant", m_grant},
      {"_grants", m_grants},
      {"principal", m_principal},
      {NULL, NULL},
  };
  /* stack: module */
  dlua_open_turns(L);
  /* One methods table per Lua state, kept across reloads of the module so
   * that lua/durable/ can add its methods to the table the metatable uses. */
  dlua_registry_table(L, &mesh_methods_key, NULL);
  luaL_setfuncs(L, methods, 0);
  /* stack: module methods */
  luaL_newmetatable(L, DLUA_MESH_MT);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, m_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, m_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, m_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_setfield(L, -2, "Mesh");
  lua_pushcfunction(L, l_open);
  lua_setfield(L, -2, "open");
  lua_pushcfunction(L, l_inside_uv_run);
  lua_setfield(L, -2, "_inside_uv_run");
  lua_pushcfunction(L, l_stream_timings_check);
  lua_setfield(L, -2, "stream_timings_check");
}

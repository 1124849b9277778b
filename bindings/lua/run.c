/*
 * run.c: what a host process (`durable run`) needs from C beyond the
 * module: becoming a host of its NodeTypes' consumers, and hearing SIGINT
 * and SIGTERM.
 *
 * The first signal is a libuv signal on the mesh's loop: it only sets a
 * flag that Lua polls between turns (mesh:run_until), so no Lua runs in the
 * signal's callback.  The host then leaves gracefully -- no new item
 * starts, the item in flight finishes and is acknowledged, leases are
 * released.  Its handles are closed at once and a plain sigaction handler
 * takes over: a second signal exits the process immediately (128 + the
 * signal).  Nothing acknowledged is lost either way: an acknowledgement is
 * a committed write.
 */
#include "lcore.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

static struct {
  uv_signal_t handles[2];
  int armed;
  int seen; /* the first signal, 0 until then */
} trap;

static void exit_now(int signum) {
  _exit(128 + signum);
}

static void on_handle_closed(uv_handle_t *h) {
  (void)h;
}

static void on_signal(uv_signal_t *h, int signum) {
  (void)h;
  trap.seen = signum;
  for (int i = 0; i < 2; i++) {
    uv_signal_stop(&trap.handles[i]);
    uv_close((uv_handle_t *)&trap.handles[i], on_handle_closed);
  }
  trap.armed = 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = exit_now;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

/* core.host(mesh) -> true, or nil, message, code */
static int l_host(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  durable_error_t err = {0};
  if (durable_mesh_start_hosting(m->mesh, &err) < 0)
    return dlua_fail(L, err.code, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.serve_metrics(mesh, "HOST:PORT") -> true, or nil, message, code
 * (a bad address too: it is what a user typed, not a programming error) */
static int l_serve_metrics(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  const char *address = luaL_checkstring(L, 2);
  if (m->mesh == NULL)
    return luaL_error(L, "the mesh is closed");
  durable_error_t err = {0};
  if (durable_mesh_serve_metrics(m->mesh, address, &err) < 0)
    return dlua_fail(L, err.code, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.trap_signals(mesh): SIGINT and SIGTERM become a flag (once). */
static int l_trap_signals(lua_State *L) {
  dlua_mesh_t *m = dlua_check_mesh(L, 1);
  if (trap.armed || trap.seen)
    return 0;
  static const int which[2] = {SIGINT, SIGTERM};
  for (int i = 0; i < 2; i++) {
    uv_signal_init(&m->loop, &trap.handles[i]);
    uv_signal_start(&trap.handles[i], on_signal, which[i]);
  }
  trap.armed = 1;
  return 0;
}

/* core.signalled() -> "SIGINT" / "SIGTERM", or nil */
static int l_signalled(lua_State *L) {
  if (trap.seen == 0)
    return 0;
  lua_pushstring(L, trap.seen == SIGINT ? "SIGINT" : "SIGTERM");
  return 1;
}

void dlua_open_run(lua_State *L) {
  static const luaL_Reg fns[] = {
      {"host", l_host},
      {"serve_metrics", l_serve_metrics},
      {"trap_signals", l_trap_signals},
      {"signalled", l_signalled},
      {NULL, NULL},
  };
  /* stack: module */
  luaL_setfuncs(L, fns, 0);
}

/*
 * host.c: the interpreter behind `durable lua SCRIPT [ARGS...]`.
 *
 * The `durable` command links the same module that `require "durable.core"`
 * loads from build/lua/durable/core.so; here it is preloaded instead
 * (package.preload), so a script run by the command needs no LUA_CPATH.
 * The Lua half of the module (lua/durable/) is found through
 * package.path.  Like lua.c, errors get a traceback and the script sees
 * `arg`.  The state is closed at the end, which closes any mesh the script
 * left open (their __gc), so the process leaves nothing behind.
 */
#include "durable_lua.h"

#include "lcore.h"

#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DURABLE_LUA_DIR
#define DURABLE_LUA_DIR "lua"
#endif
#ifndef DURABLE_LUA_FROM_BIN
#define DURABLE_LUA_FROM_BIN "../share/lua/5.4"
#endif

/* Whether DIR/durable/init.lua is there: the Lua half of the module. */
static int has_durable(const char *dir) {
  char init[4096];
  int n = snprintf(init, sizeof init, "%s/durable/init.lua", dir);
  return n > 0 && (size_t)n < sizeof init && access(init, R_OK) == 0;
}

/* Where lua/durable/ is when nobody said: beside an installed command
 * (BINDIR/../share/lua/5.4, found from /proc/self/exe, so that the command
 * runs the Lua installed with it, under any prefix), else the source tree
 * this command was built from. */
static const char *default_lua_dir(char *buf, size_t size) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  char *slash = n > 0 ? (exe[n] = '\0', strrchr(exe, '/')) : NULL;
  if (slash != NULL) {
    *slash = '\0';
    int m = snprintf(buf, size, "%s/" DURABLE_LUA_FROM_BIN, exe);
    if (m > 0 && (size_t)m < size && has_durable(buf))
      return buf;
  }
  return DURABLE_LUA_DIR;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg =
        lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Put DIR/?.lua;DIR/?/init.lua in front of package.path. */
static void prepend_path(lua_State *L, const char *dir) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir,
                  lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 2);
}

/* The chunk of durable_lua_run_module: require(module)(...), its result
 * the exit status. */
static const char *module_name;

static int run(lua_State *L) {
  const char *script = lua_touserdata(L, 1);
  int argc = (int)lua_tointeger(L, 2);
  char **argv = lua_touserdata(L, 3);
  const char *dir = lua_touserdata(L, 4);
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_durable_core);
  lua_setfield(L, -2, "durable.core");
  lua_pop(L, 1);
  prepend_path(L, dir);
  lua_createtable(L, argc, 1);
  lua_pushstring(L, script);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  int loaded = module_name
                   ? luaL_loadstring(L, "return require(...)(select(2, ...))")
                   : luaL_loadfile(L, script);
  if (loaded != LUA_OK)
    return lua_error(L);
  luaL_checkstack(L, argc + 5, "too many arguments");
  if (module_name)
    lua_pushstring(L, module_name);
  for (int i = 0; i < argc; i++)
    lua_pushstring(L, argv[i]);
  int nargs = argc + (module_name ? 1 : 0);
  if (lua_pcall(L, nargs, 1, -nargs - 2) != LUA_OK)
    return lua_error(L);
  return 1; /* the chunk's result */
}

int durable_lua_run_script(const char *script, int argc, char **argv,
                           const char *lua_dir) {
  const char *from = "the caller";
  char found[4096];
  if (lua_dir == NULL) {
    lua_dir = getenv("DURABLE_LUA_DIR");
    from = "$DURABLE_LUA_DIR";
  }
  if (lua_dir == NULL || *lua_dir == '\0') {
    lua_dir = default_lua_dir(found, sizeof found);
    from = "where this command was installed or built";
  }
  /* One line, not the traceback of a require that searched every path. */
  if (!has_durable(lua_dir)) {
    fprintf(stderr,
            "durable: %s: the Lua half of durable (durable/init.lua) is not "
            "in '%s' (from %s)\n",
            module_name ? "run" : "lua", lua_dir, from);
    return 1;
  }
  lua_State *L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, "durable: lua: cannot create a Lua state\n");
    return 1;
  }
  lua_pushcfunction(L, run);
  lua_pushlightuserdata(L, (void *)script);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  lua_pushlightuserdata(L, (void *)lua_dir);
  int status = lua_pcall(L, 4, 1, 0);
  int result = status == LUA_OK ? 0 : 1;
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "durable: %s: %s\n", module_name ? "run" : "lua",
            msg ? msg : "(error object is not a string)");
  } else if (module_name && lua_isinteger(L, -1)) {
    result = (int)lua_tointeger(L, -1); /* the module's exit status */
  }
  lua_close(L);
  fflush(stdout);
  return result;
}

int durable_lua_run_module(const char *module, int argc, char **argv,
                           const char *lua_dir) {
  module_name = module;
  int rc = durable_lua_run_script(module, argc, argv, lua_dir);
  module_name = NULL;
  return rc;
}

/*
 * durable_lua.h: what a C host needs to run Lua with the `durable` module,
 * without including lua.h itself (the `durable` command is such a host:
 * src/ never includes lua.h).
 */
#ifndef DURABLE_LUA_H
#define DURABLE_LUA_H

/* Run the Lua script at `script` in a fresh Lua 5.4 state with the standard
 * libraries, `durable.core` preloaded (linked in, not loaded from a .so) and
 * `lua_dir` (NULL: $DURABLE_LUA_DIR, else the source tree's lua/ folder this
 * was built from) first on package.path, so that `require "durable"` finds
 * lua/durable/init.lua.  The global `arg` is set as the stock interpreter
 * sets it (arg[0] = script, arg[1..argc] = argv) and the same values are
 * passed to the chunk as `...`.  A failure (the script cannot be loaded, or
 * it raised) prints "durable: lua: MESSAGE" and a traceback on stderr.
 * Returns 0 on success, 1 on failure. */
int durable_lua_run_script(const char *script, int argc, char **argv,
                           const char *lua_dir);

/* The same, running require(module)(argv...) instead of a script file; the
 * module's function returns the exit status (an integer; 0 otherwise).  A
 * raise prints "durable: run: MESSAGE".  `durable run` is such a module
 * (lua/durable/run.lua). */
int durable_lua_run_module(const char *module, int argc, char **argv,
                           const char *lua_dir);

#endif

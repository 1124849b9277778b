/*
 * core.c: the `durable.core` module itself: luaopen_durable_core, which
 * opens every file's part of it (state.c first, the one they all stand on),
 * the small checks it offers the Lua face (paths, principals, grant modes,
 * NodeType names, error names and codes, what a path is on disk), and the
 * split of the mesh's and the hub's primitives out of their method tables.
 */
#include "lcore.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- module functions
 * ---------------------------------------------------------- */

/* core.refs() -> the number of registry references the module holds. */
static int core_refs(lua_State *L) {
  lua_pushinteger(L, dlua_state(L)->refs);
  return 1;
}

/* core.meshes() -> meshes opened and not yet closed in this Lua state. */
static int core_meshes(lua_State *L) {
  lua_pushinteger(L, dlua_state(L)->meshes);
  return 1;
}

/* core.err_name(code) / core.strerror(code) for a negative DURABLE_E* code. */
static int core_err_name(lua_State *L) {
  lua_pushstring(L, durable_err_name((int)luaL_checkinteger(L, 1)));
  return 1;
}

/* core.path_check(path) -> true, or nil, message, "EINVAL". */
static int core_path_check(lua_State *L) {
  durable_error_t err = {0};
  char why[400];
  luaL_checkstring(L, 1);
  const char *path = dlua_text(L, 1, "path", why, sizeof why);
  if (path == NULL)
    return dlua_fail(L, DURABLE_EINVAL, why);
  int rc = durable_path_check(path, &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.principal_check(name) -> true, or nil, message, "EINVAL": the
 * naming rules of durable_principal_check ("platform" refused). */
static int core_principal_check(lua_State *L) {
  durable_error_t err = {0};
  char why[400];
  luaL_checkstring(L, 1);
  const char *name = dlua_text(L, 1, "principal", why, sizeof why);
  if (name == NULL)
    return dlua_fail(L, DURABLE_EINVAL, why);
  int rc = durable_principal_check(name, &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.grant_modes("read,write") -> DURABLE_GRANT_* modes, or nil. */
static int core_grant_modes(lua_State *L) {
  int modes = durable__grant_modes_parse(luaL_checkstring(L, 1));
  if (modes < 0)
    lua_pushnil(L);
  else
    lua_pushinteger(L, modes);
  return 1;
}

/* core.node_type_check(name) -> true, or nil, message, "EINVAL": the
 * NodeType rules of durable_node_type_check (an empty name is refused). */
static int core_node_type_check(lua_State *L) {
  durable_error_t err = {0};
  char why[400];
  luaL_checkstring(L, 1);
  const char *name = dlua_text(L, 1, "node type", why, sizeof why);
  if (name == NULL)
    return dlua_fail(L, DURABLE_EINVAL, why);
  int rc = durable_node_type_check(name, &err);
  if (rc < 0)
    return dlua_fail(L, rc, err.message);
  lua_pushboolean(L, 1);
  return 1;
}

/* core.err_code(name) -> the negative DURABLE_E* code of "ECONFLICT"...,
 * or nil for a name the runtime does not have. */
static int core_err_code(lua_State *L) {
  int code = dlua_code_named(luaL_checkstring(L, 1));
  if (code == 0)
    lua_pushnil(L);
  else
    lua_pushinteger(L, code);
  return 1;
}

/* core.file_kind(path) -> "file", "directory", "FIFO", "socket", "device",
 * or nil when there is nothing to stat there: so that a plugin named by a
 * FIFO nobody writes is refused instead of read for ever. */
static int core_file_kind(lua_State *L) {
  struct stat st;
  if (stat(luaL_checkstring(L, 1), &st) != 0)
    return 0;
  lua_pushstring(L, S_ISREG(st.st_mode)    ? "file"
                    : S_ISDIR(st.st_mode)  ? "directory"
                    : S_ISFIFO(st.st_mode) ? "FIFO"
                    : S_ISSOCK(st.st_mode) ? "socket"
                                           : "device");
  return 1;
}

static const luaL_Reg core_functions[] = {
    {"file_kind", core_file_kind},
    {"refs", core_refs},
    {"meshes", core_meshes},
    {"err_name", core_err_name},
    {"err_code", core_err_code},
    {"path_check", core_path_check},
    {"principal_check", core_principal_check},
    {"grant_modes", core_grant_modes},
    {"node_type_check", core_node_type_check},
    {NULL, NULL},
};

/* ---- the primitives
 * ----------------------------------------------------------
 *
 * The C files register the mesh's and the hub's callback-taking primitives
 * as methods named "_x" beside the public ones.  Here, once every file has
 * registered, each "_x" leaves the method table (which user objects index)
 * for core.primitives.mesh.x / core.primitives.hub.x, which only the
 * runtime's own modules (lua/durable/) use: `mesh._write` is nil, so user
 * code cannot write around the checks and completions of the Lua face.
 * Moving every "_" name, rather than listing them, keeps a primitive added
 * later out of the method table too. */
static void split_primitives(lua_State *L, const char *cls, const char *as) {
  /* stack: module primitives */
  lua_getfield(L, -2, cls);
  lua_newtable(L);
  /* stack: module primitives methods prims */
  lua_pushnil(L);
  while (lua_next(L, -3)) {
    const char *name =
        lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    if (name && name[0] == '_' && name[1] != '_') {
      lua_setfield(L, -3, name + 1); /* prims.x = fn (popped) */
      lua_pushvalue(L, -1);          /* the key */
      lua_pushnil(L);
      lua_rawset(L, -5); /* clearing a field while traversing is allowed */
    } else {
      lua_pop(L, 1);
    }
  }
  lua_setfield(L, -3, as);
  lua_pop(L, 1);
  /* stack: module primitives */
}

int luaopen_durable_core(lua_State *L) {
  /* Loading twice (busted's insulation unloads modules between files)
   * gives a fresh table over the same registry state: counts carry on. */
  dlua_state(L);
  luaL_newlib(L, core_functions);
  /* stack: module */
  lua_pushstring(L, durable_version_string());
  lua_setfield(L, -2, "version");
  lua_pushinteger(L, DLUA_DEFAULT_BUDGET);
  lua_setfield(L, -2, "default_instruction_budget");
  dlua_open_state(L);
  dlua_open_json(L);
  dlua_open_mesh(L);
  dlua_open_hub(L);
  dlua_open_streams(L);
  dlua_open_run(L);
  lua_newtable(L);
  split_primitives(L, "Mesh", "mesh");
  split_primitives(L, "Hub", "hub");
  lua_setfield(L, -2, "primitives");
  return 1;
}

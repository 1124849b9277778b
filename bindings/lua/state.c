/*
 * state.c: what every file of the `durable.core` module stands on: its
 * per-state bookkeeping, counted registry references, the checks of text
 * arguments, and the one protected call through which C enters Lua, with
 * the module functions that steer its budget (core.trust, in_callback,
 * inherit_hook, ran_away, budget_reset).
 *
 * Every entry into Lua from C -- a message handler, an init step, a dispose
 * action, a response or store callback, a log line -- goes through
 * dlua_pcall():
 *
 *   C callback --> dlua_pcall(fn, args) --> lua_pcall with msgh
 *                    |  outermost entry: arm the count hook (the budget)
 *                    |  msgh: keep the traceback aside, return the message
 *                    '-> status; on failure one plain message on the stack
 *
 * The message handler keeps the traceback apart from the message because
 * the two go to different places: the message to the sender of a failed
 * request ("Failed: boom"), the traceback to the log.
 *
 * The instruction budget: a handler that never returns would freeze the
 * loop and with it every hub of the process.  A count hook (LUA_MASKCOUNT)
 * looks every DLUA_HOOK_GRAIN instructions; the count is shared by every
 * coroutine the entry makes (they inherit the hook), and once the budget is
 * spent the hook fires on every instruction, so a handler that catches the
 * error with pcall and carries on is stopped again at once.  Nested entries
 * (a log line written from inside a handler) share the outer budget.
 *
 * Handlers run in coroutines (lua/durable/completion.lua spawns them), and a
 * hook belongs to one thread: a coroutine made inside an entry inherits the
 * count hook, and each time the glue resumes one it first copies the
 * resuming thread's hook onto it (core.inherit_hook), so a coroutine resumed
 * in a later entry -- after an await -- runs under that entry's budget.  A
 * runaway inside a handler's coroutine ends the coroutine (coroutine.resume
 * returns the error to the glue, not to this file); the glue reports it,
 * fails that handler's message, and then gives the rest of the entry a fresh
 * budget (core.budget_reset), so that reporting it -- a log line through a
 * Lua log function -- is not stopped in turn.
 *
 * Registry references are taken only through dlua_ref()/dlua_unref(), which
 * count them; core.refs() returns the count so that specs can assert that
 * every callback's reference was let go.  Fixed registry slots use the
 * addresses of static chars as keys (lua_rawsetp), OpenResty-style.
 */
#include "lcore.h"

#include <stdio.h>
#include <string.h>

static const char state_key = 0;
static const char traceback_key = 0;
static const char trusted_key = 0; /* set of chunk sources: the module's glue */

dlua_state_t *dlua_state(lua_State *L) {
  dlua_state_t *S;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key) == LUA_TUSERDATA) {
    S = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return S;
  }
  lua_pop(L, 1);
  /* stack: */
  S = lua_newuserdatauv(L, sizeof(*S), 0);
  memset(S, 0, sizeof(*S));
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  S->main = lua_tothread(L, -1);
  lua_pop(L, 1);
  /* stack: S */
  lua_rawsetp(L, LUA_REGISTRYINDEX, &state_key);
  return S;
}

int dlua_ref(lua_State *L, dlua_state_t *S) {
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  if (ref != LUA_REFNIL && ref != LUA_NOREF)
    S->refs++;
  return ref;
}

void dlua_unref(lua_State *L, dlua_state_t *S, int *ref) {
  if (*ref == LUA_REFNIL || *ref == LUA_NOREF)
    return;
  luaL_unref(L, LUA_REGISTRYINDEX, *ref);
  S->refs--;
  *ref = LUA_NOREF;
}

int dlua_fail(lua_State *L, int code, const char *message) {
  lua_pushnil(L);
  lua_pushstring(L, message && *message ? message : durable_strerror(code));
  lua_pushstring(L, durable_err_name(code));
  return 3;
}

/* ---- names taken from Lua ----------------------------------------------- */

/* `s` (of `len` bytes) for a message: quoted as a Lua literal would be
 * (\0, \n, \xNN for other control bytes), cut after 40 bytes. */
static void show_text(const char *s, size_t len, char *out, size_t size) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; i < len && o + 8 < size; i++) {
    unsigned char c = (unsigned char)s[i];
    if (i == 40) {
      memcpy(out + o, "...", 3);
      o += 3;
      break;
    }
    if (c == '\0' || c == '\n' || c == '"' || c == '\\') {
      out[o++] = '\\';
      out[o++] = c == '\0' ? '0' : c == '\n' ? 'n' : (char)c;
    } else if (c < 0x20 || c == 0x7F) {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    } else {
      out[o++] = (char)c;
    }
  }
  out[o] = '\0';
}

int dlua_has_nul(lua_State *L, int idx, const char *what, char *why,
                 size_t size) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (s == NULL || strlen(s) == len)
    return 0;
  char shown[200];
  show_text(s, len, shown, sizeof shown);
  snprintf(why, size, "%s must not contain a NUL byte (was \"%s\")", what,
           shown);
  return 1;
}

const char *dlua_text(lua_State *L, int idx, const char *what, char *why,
                      size_t size) {
  int t = lua_type(L, idx);
  if (t != LUA_TSTRING && t != LUA_TNUMBER) {
    snprintf(why, size, "%s must be a string, not %s", what,
             lua_typename(L, t));
    return NULL;
  }
  if (dlua_has_nul(L, idx, what, why, size))
    return NULL;
  return lua_tostring(L, idx);
}

const char *dlua_check_text(lua_State *L, int idx, const char *what) {
  luaL_checklstring(L, idx, NULL); /* the usual "bad argument" otherwise */
  char why[400];
  const char *s = dlua_text(L, idx, what, why, sizeof why);
  if (s == NULL)
    luaL_error(L, "%s", why);
  return s;
}

const char *dlua_opt_text(lua_State *L, int idx, const char *what,
                          const char *def) {
  if (lua_isnoneornil(L, idx))
    return def;
  return dlua_check_text(L, idx, what);
}

void dlua_registry_table(lua_State *L, const void *key, const char *mode) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) != LUA_TNIL)
    return;
  lua_pop(L, 1);
  lua_newtable(L);
  if (mode) {
    lua_createtable(L, 0, 1);
    lua_pushstring(L, mode);
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/* ---- the protected call ----------------------------------------------------
 */

static int hook_grain(long long budget) {
  return budget < DLUA_HOOK_GRAIN ? (int)(budget > 0 ? budget : 1)
                                  : DLUA_HOOK_GRAIN;
}

/* Whether the running Lua function belongs to the module's own glue
 * (lua/durable/completion.lua, plugin.lua): that code must be let finish,
 * or the completions it was settling would stay pending forever. */
static int trusted(lua_State *L, lua_Debug *ar) {
  if (!lua_getinfo(L, "S", ar))
    return 0;
  int top = lua_gettop(L), yes = 0;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &trusted_key) == LUA_TTABLE)
    yes = lua_getfield(L, -1, ar->source) == LUA_TBOOLEAN;
  lua_settop(L, top);
  return yes;
}

static void count_hook(lua_State *L, lua_Debug *ar) {
  dlua_state_t *S = dlua_state(L);
  /* a coroutine made inside an entry may be resumed after it: not ours */
  if (S->depth == 0 || S->budget <= 0)
    return;
  if (!S->ran_away) {
    S->used += lua_gethookcount(L);
    if (S->used <= S->budget)
      return;
    S->ran_away = 1;
  } else if (trusted(L, ar)) {
    return; /* the glue finishes settling; user code it calls is stopped */
  }
  /* from now on every instruction fails, so a pcall cannot swallow it; on
   * the entry's own thread too, when this is a coroutine it made */
  lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
  if (L != S->main)
    lua_sethook(S->main, count_hook, LUA_MASKCOUNT, 1);
  lua_pushfstring(L, "handler ran away: more than %I instructions",
                  (lua_Integer)S->budget);
  lua_error(L);
}

static int stack_levels(lua_State *L) {
  lua_Debug ar;
  int n = 0;
  while (lua_getstack(L, n, &ar))
    n++;
  return n;
}

/* The message handler: the message as a string, the traceback set aside.
 * The traceback stops where C entered Lua (upvalue 1: the levels below the
 * entry), so it shows the handler, not whoever happened to run the loop. */
static int msgh(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      msg = lua_tostring(L, -1);
    else
      msg = lua_pushfstring(L, "(error object is a %s value)",
                            luaL_typename(L, 1));
  }
  int below = (int)lua_tointeger(L, lua_upvalueindex(1));
  int last = stack_levels(L) - below; /* level 0 is msgh itself */
  luaL_Buffer b;
  lua_Debug ar;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, msg);
  luaL_addstring(&b, "\nstack traceback:");
  for (int level = 1; level < last && lua_getstack(L, level, &ar); level++) {
    lua_getinfo(L, "Sln", &ar);
    lua_pushfstring(L, "\n\t%s:", ar.short_src);
    luaL_addvalue(&b);
    if (ar.currentline > 0) {
      lua_pushfstring(L, "%d:", ar.currentline);
      luaL_addvalue(&b);
    }
    if (ar.name)
      lua_pushfstring(L, " in %s '%s'", ar.namewhat, ar.name);
    else if (*ar.what == 'm')
      lua_pushliteral(L, " in main chunk");
    else if (*ar.what == 'C')
      lua_pushliteral(L, " in ?");
    else
      lua_pushfstring(L, " in function <%s:%d>", ar.short_src, ar.linedefined);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &traceback_key);
  lua_pushstring(L, msg);
  return 1;
}

const char *dlua_traceback(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &traceback_key);
  const char *tb = lua_tostring(L, -1);
  lua_pop(L, 1); /* the registry keeps the string alive */
  return tb ? tb : "";
}

int dlua_pcall(lua_State *L, dlua_state_t *S, long long budget, int nargs,
               int nresults) {
  int base = lua_gettop(L) - nargs; /* the function's index */
  int outer = S->depth == 0;
  lua_Hook old_hook = NULL;
  int old_mask = 0, old_count = 0;
  lua_pushinteger(L, stack_levels(L));
  lua_pushcclosure(L, msgh, 1);
  lua_insert(L, base);
  /* stack: msgh fn args... */
  if (outer) {
    S->budget = budget;
    S->used = 0;
    S->ran_away = 0;
    /* keep a hook someone else set (a coverage tool) to put it back */
    old_hook = lua_gethook(L);
    old_mask = lua_gethookmask(L);
    old_count = lua_gethookcount(L);
    if (budget > 0)
      lua_sethook(L, count_hook, LUA_MASKCOUNT, hook_grain(budget));
  }
  S->depth++;
  int status = lua_pcall(L, nargs, nresults, base);
  S->depth--;
  if (outer && status == LUA_OK && S->ran_away) {
    /* it returned, but only after running away somewhere: still a failure
     * (a continuation caught it); msgh never saw it, so the traceback the
     * caller logs is the message, not an older failure's */
    lua_settop(L, base);
    lua_pushfstring(L, "handler ran away: more than %I instructions",
                    (lua_Integer)S->budget);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &traceback_key);
    status = LUA_ERRRUN;
  }
  if (outer) {
    lua_sethook(L, old_hook, old_mask, old_count);
    if (status != LUA_OK && S->ran_away) {
      /* whatever pcall-in-Lua made of it, this is what happened */
      lua_pop(L, 1);
      lua_pushfstring(L, "handler ran away: more than %I instructions",
                      (lua_Integer)S->budget);
    }
    S->ran_away = 0;
  }
  lua_remove(L, base);
  /* stack: results... | message */
  return status;
}

lua_State *dlua_mesh_lua(dlua_mesh_t *m) {
  if (m == NULL || m->finalizing || m->S == NULL)
    return NULL;
  return m->S->main;
}

int dlua_code_named(const char *name) {
  if (name != NULL) {
#define XX(n, code, text)                                                      \
  if (strcmp(name, #n) == 0)                                                   \
    return code;
    DURABLE_ERRNO_MAP(XX)
#undef XX
  }
  return 0;
}

/* ---- the module functions of the protected call ---------------------------
 */

/* core.in_callback() -> true while Lua runs inside a call from C (a
 * handler, a completion callback...): there, nothing may run the loop. */
static int core_in_callback(lua_State *L) {
  lua_pushboolean(L, dlua_state(L)->depth > 0);
  return 1;
}

/* core.trust(): mark the calling chunk as the module's own glue, which a
 * spent instruction budget lets finish (only user code is stopped). */
static int core_trust(lua_State *L) {
  lua_Debug ar;
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "S", &ar))
    return luaL_error(L, "core.trust() must be called from a Lua chunk");
  luaL_getsubtable(L, LUA_REGISTRYINDEX, "durable.trusted");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, ar.source);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &trusted_key);
  return 0;
}

/* core.inherit_hook(co): give coroutine `co` the calling thread's hook, so
 * that resuming it runs it under the current entry's instruction budget
 * (or under no hook, outside entries, as the caller runs). */
static int core_inherit_hook(lua_State *L) {
  lua_State *co = lua_tothread(L, 1);
  luaL_argexpected(L, co != NULL, 1, "coroutine");
  lua_sethook(co, lua_gethook(L), lua_gethookmask(L), lua_gethookcount(L));
  return 0;
}

/* core.ran_away() -> "handler ran away: more than N instructions" when the
 * current entry spent its budget, else nil.  The glue asks after each
 * resume of a handler: a runaway in a coroutine the handler made and caught
 * still fails the handler (that coroutine's hook fired, not the handler's). */
static int core_ran_away(lua_State *L) {
  dlua_state_t *S = dlua_state(L);
  if (S->depth == 0 || !S->ran_away)
    return 0;
  lua_pushfstring(L, "handler ran away: more than %I instructions",
                  (lua_Integer)S->budget);
  return 1;
}

/* core.budget_reset(): the glue has stopped and reported the runaway (the
 * coroutine that ran away is dead): the rest of the entry gets a fresh
 * budget.  Only trusted glue calls it. */
static int core_budget_reset(lua_State *L) {
  dlua_state_t *S = dlua_state(L);
  if (S->depth == 0 || !S->ran_away)
    return 0;
  S->ran_away = 0;
  S->used = 0;
  if (S->budget > 0) {
    lua_sethook(S->main, count_hook, LUA_MASKCOUNT, hook_grain(S->budget));
    if (L != S->main)
      lua_sethook(L, count_hook, LUA_MASKCOUNT, hook_grain(S->budget));
  }
  return 0;
}

static const luaL_Reg state_functions[] = {
    {"in_callback", core_in_callback},   {"trust", core_trust},
    {"inherit_hook", core_inherit_hook}, {"ran_away", core_ran_away},
    {"budget_reset", core_budget_reset}, {NULL, NULL},
};

void dlua_open_state(lua_State *L) {
  /* stack: module */
  luaL_setfuncs(L, state_functions, 0);
}

/*
 * json.c: Lua values <-> JSON, written through jansson and read straight
 * from the text (below, "decoding"); and a Lua list of writes
 * read into the durable_write_t array the store takes (mesh:_write, a
 * handler's reply:commit_with).
 *
 * Payload and content text is stored exactly as produced, byte for byte,
 * and read back as stored, so the text must be the same every time for the
 * same value: an object is written with "$type" first (a reader that picks
 * a type by its tag, as polymorphic JSON readers do, needs the tag before
 * the fields) and then its other keys in byte order; jansson keeps
 * insertion order when dumping, so the order is fixed here, at insertion.
 * Output is compact.
 *
 *   Lua                         JSON
 *   nil, durable.null           null
 *   true / false                true / false
 *   integer                     integer (stays an integer both ways)
 *   float                       real (1.0 stays 1.0; NaN and inf refused)
 *   string (UTF-8)              string
 *   table with keys 1..n        array
 *   table with string keys      object ({} is an empty object)
 *   core.json(text)             the text itself, spliced in
 *
 * Decoding gives back the same shapes; JSON null becomes durable.null (a
 * table cannot hold nil), and an empty array gets a marker metatable so that
 * it is written back as [] rather than {}.
 *
 * Encoding never raises: it returns NULL and a message naming the path of
 * the value it could not write ("content.items[3]: cannot encode a
 * function"), so callers free what they hold before raising.
 */
#include "lcore.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 128

static const char null_key = 0;
static const char raw_mt_key = 0;
static const char array_mt_key = 0;

void dlua_push_null(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &null_key);
}

static int is_null(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TUSERDATA)
    return 0;
  dlua_push_null(L);
  int same = lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return same;
}

/* 1 if the value at idx has the metatable stored at registry[key]. */
static int has_mt(lua_State *L, int idx, const char *key) {
  if (!lua_getmetatable(L, idx))
    return 0;
  lua_rawgetp(L, LUA_REGISTRYINDEX, key);
  int same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

/* The text of a core.json(text) value at idx, or NULL. */
static const char *raw_text(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TTABLE || !has_mt(L, idx, &raw_mt_key))
    return NULL;
  lua_pushliteral(L, "text");
  lua_rawget(L, idx);
  const char *text = lua_tostring(L, -1);
  lua_pop(L, 1); /* the table keeps it alive */
  return text;
}

typedef struct {
  char *err;
  size_t errlen;
  char path[256];
} enc_t;

static json_t *enc_fail(enc_t *e, const char *fmt, const char *what) {
  if (e->err && e->err[0] == '\0') {
    char reason[200];
    snprintf(reason, sizeof reason, fmt, what);
    if (e->path[0])
      snprintf(e->err, e->errlen, "%s: %s", e->path, reason);
    else
      snprintf(e->err, e->errlen, "%s", reason);
  }
  return NULL;
}

static int cmp_keys(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  if (strcmp(x, "$type") == 0)
    return strcmp(y, "$type") == 0 ? 0 : -1;
  if (strcmp(y, "$type") == 0)
    return 1;
  return strcmp(x, y);
}

static json_t *encode(lua_State *L, int idx, enc_t *e, int depth);

/* Append ".key" or "[i]" to the path for messages; returns the old length. */
static size_t path_push(enc_t *e, const char *fmt, const char *key,
                        lua_Integer i) {
  size_t len = strlen(e->path);
  if (len < sizeof e->path - 1) {
    if (key)
      snprintf(e->path + len, sizeof e->path - len, fmt, key);
    else
      snprintf(e->path + len, sizeof e->path - len, fmt, (long long)i);
  }
  return len;
}

static json_t *encode_table(lua_State *L, int idx, enc_t *e, int depth) {
  if (depth > MAX_DEPTH)
    return enc_fail(e, "%s",
                    "nested too deeply (a table that contains itself?)");
  if (!lua_checkstack(L, 8))
    return enc_fail(e, "%s", "out of Lua stack");
  /* Look at the keys: 1..n only (an array), or strings only (an object). */
  lua_Integer n = 0, max = 0;
  int strings = 0, others = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) {
      size_t len;
      const char *key = lua_tolstring(L, -1, &len);
      if (strlen(key) != len) { /* jansson's keys are C strings */
        lua_pop(L, 1);
        return enc_fail(e, "%s", "object keys must not contain a NUL byte");
      }
      strings++;
    } else if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1) {
      n++;
      if (lua_tointeger(L, -1) > max)
        max = lua_tointeger(L, -1);
    } else {
      others++;
    }
  }
  if (others || (strings && n))
    return enc_fail(e, "%s",
                    "cannot encode a table whose keys are neither "
                    "1..n nor all strings");
  if (n > 0 || has_mt(L, idx, &array_mt_key)) {
    if (max != n)
      return enc_fail(e, "%s",
                      "cannot encode an array with holes (keys 1..n "
                      "must all be present)");
    json_t *arr = json_array();
    if (arr == NULL)
      return enc_fail(e, "%s", "out of memory");
    for (lua_Integer i = 1; i <= n; i++) {
      size_t old = path_push(e, "[%lld]", NULL, i);
      lua_rawgeti(L, idx, i); /* raw: encoding never runs Lua */
      json_t *v = encode(L, lua_gettop(L), e, depth + 1);
      lua_pop(L, 1);
      e->path[old] = '\0';
      if (v == NULL || json_array_append_new(arr, v) < 0) {
        json_decref(arr);
        return v ? enc_fail(e, "%s", "out of memory") : NULL;
      }
    }
    return arr;
  }
  /* An object: keys sorted, "$type" first, so the text is deterministic. */
  json_t *obj = json_object();
  const char **keys = strings ? malloc(sizeof(*keys) * (size_t)strings) : NULL;
  if (obj == NULL || (strings && keys == NULL)) {
    json_decref(obj);
    free(keys);
    return enc_fail(e, "%s", "out of memory");
  }
  int k = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (k < strings)
      keys[k++] = lua_tostring(L, -1); /* the table anchors it */
  }
  if (k > 1)
    qsort(keys, (size_t)k, sizeof(*keys), cmp_keys);
  for (int i = 0; i < k; i++) {
    size_t old = path_push(e, e->path[0] ? ".%s" : "%s", keys[i], 0);
    lua_pushstring(L, keys[i]);
    lua_rawget(L, idx);
    json_t *v = encode(L, lua_gettop(L), e, depth + 1);
    lua_pop(L, 1);
    e->path[old] = '\0';
    if (v == NULL || json_object_set_new(obj, keys[i], v) < 0) {
      json_decref(obj);
      free(keys);
      if (v == NULL)
        return NULL;
      return enc_fail(e, "%s", "object keys must be valid UTF-8");
    }
  }
  free(keys);
  return obj;
}

static json_t *encode(lua_State *L, int idx, enc_t *e, int depth) {
  switch (lua_type(L, idx)) {
  case LUA_TNONE: /* an argument not given */
  case LUA_TNIL:
    return json_null();
  case LUA_TBOOLEAN:
    return json_boolean(lua_toboolean(L, idx));
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx))
      return json_integer(lua_tointeger(L, idx));
    {
      lua_Number x = lua_tonumber(L, idx);
      if (!isfinite(x))
        return enc_fail(e, "%s", "cannot encode NaN or infinity");
      return json_real(x);
    }
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    json_t *j = json_stringn(s, len);
    return j ? j : enc_fail(e, "%s", "strings must be valid UTF-8");
  }
  case LUA_TTABLE: {
    const char *raw = raw_text(L, idx);
    if (raw) {
      json_error_t jerr;
      json_t *j = json_loads(raw, JSON_DECODE_ANY, &jerr);
      return j ? j : enc_fail(e, "invalid durable.json text: %s", jerr.text);
    }
    return encode_table(L, idx, e, depth);
  }
  case LUA_TUSERDATA:
  case LUA_TLIGHTUSERDATA:
    if (is_null(L, idx))
      return json_null();
    /* fall through */
  default:
    return enc_fail(e, "cannot encode a %s value", luaL_typename(L, idx));
  }
}

json_t *dlua_to_json(lua_State *L, int idx, char *err, size_t errlen) {
  enc_t e = {err, errlen, ""};
  if (err && errlen)
    err[0] = '\0';
  return encode(L, lua_absindex(L, idx), &e, 0);
}

char *dlua_encode(lua_State *L, int idx, char *err, size_t errlen) {
  const char *raw = raw_text(L, idx);
  if (raw)
    return strdup(raw); /* checked when it was made: kept as given */
  json_t *j = dlua_to_json(L, idx, err, errlen);
  if (j == NULL)
    return NULL;
  char *text = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(j);
  if (text == NULL && err)
    snprintf(err, errlen, "out of memory");
  return text;
}

void dlua_push_json(lua_State *L, const json_t *j) {
  luaL_checkstack(L, 4, "JSON nested too deeply");
  switch (json_typeof(j)) {
  case JSON_OBJECT: {
    const char *key;
    json_t *v;
    lua_createtable(L, 0, (int)json_object_size(j));
    json_object_foreach((json_t *)j, key, v) {
      dlua_push_json(L, v);
      lua_setfield(L, -2, key);
    }
    return;
  }
  case JSON_ARRAY: {
    size_t n = json_array_size(j);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
      dlua_push_json(L, json_array_get(j, i));
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    if (n == 0) { /* so that it is written back as [] */
      lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
      lua_setmetatable(L, -2);
    }
    return;
  }
  case JSON_STRING:
    lua_pushlstring(L, json_string_value(j), json_string_length(j));
    return;
  case JSON_INTEGER:
    lua_pushinteger(L, (lua_Integer)json_integer_value(j));
    return;
  case JSON_REAL:
    lua_pushnumber(L, json_real_value(j));
    return;
  case JSON_TRUE:
    lua_pushboolean(L, 1);
    return;
  case JSON_FALSE:
    lua_pushboolean(L, 0);
    return;
  default:
    dlua_push_null(L);
    return;
  }
}

/* ---- decoding: JSON text straight into Lua values -----------------------
 *
 * Every payload a Lua reader or consumer is handed is decoded here, so it
 * goes straight from the text to Lua values, with no jansson tree built and
 * freed between (that was the most of a Lua catch-up's time).  The text is
 * first checked by durable__json_valid, which accepts exactly what
 * jansson's json_loads does; what follows trusts it: every string closed
 * and valid UTF-8 with its escapes well formed (no \u0000), every number in
 * range.  The shapes are dlua_push_json's: an integer stays an integer, a
 * number with a fraction or an exponent is a float, a repeated key keeps
 * its last value, as in jansson. */

static const char *dec_ws(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
    s++;
  return s;
}

static unsigned long dec_hex4(const char *s) {
  unsigned long v = 0;
  for (int i = 0; i < 4; i++) {
    char h = s[i];
    v = v * 16 + (unsigned long)(h <= '9'   ? h - '0'
                                 : h <= 'F' ? h - 'A' + 10
                                            : h - 'a' + 10);
  }
  return v;
}

static void dec_utf8(luaL_Buffer *b, unsigned long v) {
  if (v < 0x80) {
    luaL_addchar(b, (char)v);
  } else if (v < 0x800) {
    luaL_addchar(b, (char)(0xC0 | v >> 6));
    luaL_addchar(b, (char)(0x80 | (v & 0x3F)));
  } else if (v < 0x10000) {
    luaL_addchar(b, (char)(0xE0 | v >> 12));
    luaL_addchar(b, (char)(0x80 | (v >> 6 & 0x3F)));
    luaL_addchar(b, (char)(0x80 | (v & 0x3F)));
  } else {
    luaL_addchar(b, (char)(0xF0 | v >> 18));
    luaL_addchar(b, (char)(0x80 | (v >> 12 & 0x3F)));
    luaL_addchar(b, (char)(0x80 | (v >> 6 & 0x3F)));
    luaL_addchar(b, (char)(0x80 | (v & 0x3F)));
  }
}

/* A string at its opening quote, pushed; returns what follows its closing
 * quote.  Without escapes (the common case) it is pushed as it stands. */
static const char *dec_string(lua_State *L, const char *s) {
  const char *run = ++s;
  while (*s != '"' && *s != '\\')
    s++;
  if (*s == '"') {
    lua_pushlstring(L, run, (size_t)(s - run));
    return s + 1;
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (;;) {
    luaL_addlstring(&b, run, (size_t)(s - run));
    if (*s == '"')
      break;
    char c = s[1];
    s += 2;
    if (c == 'u') {
      unsigned long v = dec_hex4(s);
      s += 4;
      if (v >= 0xD800 && v <= 0xDBFF) { /* a high surrogate: its pair */
        v = 0x10000 + ((v - 0xD800) << 10) + (dec_hex4(s + 2) - 0xDC00);
        s += 6;
      }
      dec_utf8(&b, v);
    } else {
      static const char named[] = "bfnrt", as[] = "\b\f\n\r\t";
      const char *e = strchr(named, c);
      luaL_addchar(&b, e ? as[e - named] : c); /* else " \ or / */
    }
    run = s;
    while (*s != '"' && *s != '\\')
      s++;
  }
  luaL_pushresult(&b);
  return s + 1;
}

static const char *dec_number(lua_State *L, const char *s) {
  const char *end = s;
  int real = 0;
  for (;; end++) {
    char c = *end;
    if (c == '.' || c == 'e' || c == 'E')
      real = 1;
    else if (!(c >= '0' && c <= '9') && c != '-' && c != '+')
      break;
  }
  if (!real) {
    lua_pushinteger(L, (lua_Integer)strtoll(s, NULL, 10));
    return end;
  }
  lua_pushnumber(L, durable__json_strtod(s));
  return end;
}

static const char *dec_value(lua_State *L, const char *s) {
  luaL_checkstack(L, 4, "JSON nested too deeply");
  s = dec_ws(s);
  switch (*s) {
  case '"':
    return dec_string(L, s);
  case 't':
    lua_pushboolean(L, 1);
    return s + 4;
  case 'f':
    lua_pushboolean(L, 0);
    return s + 5;
  case 'n':
    dlua_push_null(L);
    return s + 4;
  case '[': {
    lua_newtable(L);
    s = dec_ws(s + 1);
    if (*s == ']') { /* so that it is written back as [] */
      lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
      lua_setmetatable(L, -2);
      return s + 1;
    }
    for (lua_Integer i = 1;; i++) {
      s = dec_ws(dec_value(L, s));
      lua_rawseti(L, -2, i);
      if (*s++ == ']')
        return s;
    }
  }
  case '{':
    lua_newtable(L);
    s = dec_ws(s + 1);
    if (*s == '}')
      return s + 1;
    for (;;) {
      s = dec_ws(dec_string(L, dec_ws(s)));
      s = dec_ws(dec_value(L, s + 1)); /* past ':' */
      lua_rawset(L, -3);
      if (*s++ == '}')
        return s;
    }
  default:
    return dec_number(L, s);
  }
}

int dlua_decode(lua_State *L, const char *text, char *err, size_t errlen) {
  if (text == NULL)
    text = "null";
  if (durable__json_valid(text)) {
    dec_value(L, text); /* a memory error raises, holding nothing */
    return 0;
  }
  /* not JSON: jansson says what is wrong, and where */
  json_error_t jerr;
  json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);
  if (j == NULL) {
    if (err)
      snprintf(err, errlen, "invalid JSON at line %d, column %d: %s", jerr.line,
               jerr.column, jerr.text);
    return -1;
  }
  dlua_push_json(L, j); /* the check and jansson disagree: jansson's reading */
  json_decref(j);
  return 0;
}

void dlua_push_node(lua_State *L, const durable_node_t *node) {
  char err[256];
  lua_createtable(L, 0, 10);
  lua_pushstring(L, node->path);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, node->ns ? node->ns : "");
  lua_setfield(L, -2, "namespace");
  lua_pushstring(L, node->id);
  lua_setfield(L, -2, "id");
  lua_pushstring(L, node->node_type ? node->node_type : "");
  lua_setfield(L, -2, "node_type");
  lua_pushstring(L, node->main_node ? node->main_node : node->path);
  lua_setfield(L, -2, "main_node");
  lua_pushinteger(L, node->version);
  lua_setfield(L, -2, "version");
  lua_pushinteger(L, node->created_at);
  lua_setfield(L, -2, "created_at");
  lua_pushinteger(L, node->updated_at);
  lua_setfield(L, -2, "updated_at");
  if (node->content) {
    lua_pushstring(L, node->content);
    lua_setfield(L, -2, "raw");
    if (dlua_decode(L, node->content, err, sizeof err) == 0)
      lua_setfield(L, -2, "content");
  }
}

/* ---- module functions
 * ---------------------------------------------------------- */

/* core.encode(value) -> text, or raises naming what cannot be encoded. */
static int l_encode(lua_State *L) {
  char err[512];
  luaL_checkany(L, 1);
  char *text = dlua_encode(L, 1, err, sizeof err);
  if (text == NULL)
    return luaL_error(L, "durable.encode: %s", err);
  lua_pushstring(L, text);
  free(text);
  return 1;
}

/* core.decode(text) -> value, or nil, message, "EINVAL". */
static int l_decode(lua_State *L) {
  char err[512];
  const char *text = luaL_checkstring(L, 1);
  /* JSON text never holds a NUL byte (a string writes it \u0000): one here
   * would cut the text short, and what follows it would be lost */
  if (dlua_has_nul(L, 1, "durable.decode: JSON text", err, sizeof err))
    return dlua_fail(L, DURABLE_EINVAL, err);
  if (dlua_decode(L, text, err, sizeof err) < 0)
    return dlua_fail(L, DURABLE_EINVAL, err);
  return 1;
}

/* core.json(text) -> a value that encodes as `text` itself.  The text is
 * checked now, so a mistake is reported where it was made. */
static int l_json(lua_State *L) {
  json_error_t jerr;
  const char *text = dlua_check_text(L, 1, "durable.json: JSON text");
  json_t *j = json_loads(text, JSON_DECODE_ANY, &jerr);
  if (j == NULL)
    return luaL_error(L, "durable.json: invalid JSON at line %d, column %d: %s",
                      jerr.line, jerr.column, jerr.text);
  json_decref(j);
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, "text");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &raw_mt_key);
  lua_setmetatable(L, -2);
  return 1;
}

/* core.is_json(v) -> the text of a core.json value, or nil. */
static int l_is_json(lua_State *L) {
  const char *text = raw_text(L, 1);
  if (text)
    lua_pushstring(L, text);
  else
    lua_pushnil(L);
  return 1;
}

/* core.array(t) -> t, marked to be written as an array even when empty. */
static int l_array(lua_State *L) {
  if (lua_isnoneornil(L, 1))
    lua_newtable(L);
  else
    luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key);
  lua_setmetatable(L, 1);
  return 1;
}

static int null_tostring(lua_State *L) {
  lua_pushliteral(L, "durable.null");
  return 1;
}

static int raw_tostring(lua_State *L) {
  lua_getfield(L, 1, "text");
  lua_pushfstring(L, "durable.json(%s)", lua_tostring(L, -1));
  return 1;
}

void dlua_open_json(lua_State *L) {
  /* stack: module */
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &null_key) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_newuserdatauv(L, 0, 0);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, null_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "durable.null");
    lua_setfield(L, -2, "__name");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &null_key);
  }
  lua_setfield(L, -2, "null");
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &raw_mt_key) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, raw_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "durable.json");
    lua_setfield(L, -2, "__name");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &raw_mt_key);
  } else {
    lua_pop(L, 1);
  }
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &array_mt_key) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "durable.array");
    lua_setfield(L, -2, "__name");
    lua_rawsetp(L, LUA_REGISTRYINDEX, &array_mt_key);
  } else {
    lua_pop(L, 1);
  }
  static const luaL_Reg fns[] = {
      {"encode", l_encode},   {"decode", l_decode}, {"json", l_json},
      {"is_json", l_is_json}, {"array", l_array},   {NULL, NULL},
  };
  luaL_setfuncs(L, fns, 0);
}

/* ---- writes: a Lua list of writes read into durable_write_t -------------
 */

static durable_write_kind_t write_kind(const char *name) {
  if (strcmp(name, "put") == 0)
    return DURABLE_WRITE_PUT;
  if (strcmp(name, "create") == 0)
    return DURABLE_WRITE_CREATE;
  if (strcmp(name, "replace") == 0)
    return DURABLE_WRITE_REPLACE;
  if (strcmp(name, "delete") == 0)
    return DURABLE_WRITE_DELETE;
  return 0;
}

/* A list of { kind=, path=, node_type=, content=, expected_version= }:
 * content is a Lua value (or core.json(text)), encoded here. */
int dlua_writes_read(lua_State *L, int idx, dlua_writes_t *out, char *why,
                     size_t whylen) {
  memset(out, 0, sizeof *out);
  why[0] = '\0';
  lua_Integer n = luaL_len(L, idx);
  if (n < 1 || n > 10000) {
    snprintf(why, whylen, "1 to 10000 writes, not %lld", (long long)n);
    return -1;
  }
  out->writes = calloc((size_t)n, sizeof(*out->writes));
  out->texts = calloc((size_t)n, sizeof(*out->texts));
  if (out->writes == NULL || out->texts == NULL) {
    dlua_writes_free(out);
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  out->count = (size_t)n;
  for (lua_Integer i = 0; i < n && why[0] == '\0'; i++) {
    durable_write_t *wr = &out->writes[i];
    lua_geti(L, idx, i + 1);
    int w = lua_gettop(L);
    if (!lua_istable(L, w)) {
      snprintf(why, whylen, "write %lld is not a table", (long long)i + 1);
      break;
    }
    lua_getfield(L, w, "kind");
    lua_getfield(L, w, "path");
    lua_getfield(L, w, "node_type");
    lua_getfield(L, w, "expected_version");
    lua_getfield(L, w, "content");
    /* stack: ... w kind path node_type expected content */
    const char *kind = lua_tostring(L, w + 1);
    if (kind == NULL || lua_type(L, w + 2) != LUA_TSTRING) {
      snprintf(why, whylen, "write %lld needs a kind and a path",
               (long long)i + 1);
      break;
    }
    wr->kind = write_kind(kind);
    if (wr->kind == 0)
      snprintf(why, whylen,
               "write kind must be put, create, replace or delete, not '%s'",
               kind);
    wr->path = lua_tostring(L, w + 2);
    wr->node_type = lua_tostring(L, w + 3);
    if (why[0] == '\0' && (dlua_has_nul(L, w + 1, "write kind", why, whylen) ||
                           dlua_has_nul(L, w + 2, "path", why, whylen) ||
                           dlua_has_nul(L, w + 3, "node_type", why, whylen)))
      break; /* nothing is written */
    wr->expected_version = (int64_t)lua_tointeger(L, w + 4);
    if (!lua_isnil(L, w + 5) && why[0] == '\0') {
      char err[400];
      out->texts[i] = dlua_encode(L, w + 5, err, sizeof err);
      if (out->texts[i] == NULL)
        snprintf(why, whylen, "content of '%s': %s", wr->path, err);
    }
    wr->content = out->texts[i];
    /* keep the strings: leave them on the stack until the submit is done */
    lua_checkstack(L, 8);
  }
  if (why[0] == '\0')
    return 0;
  dlua_writes_free(out);
  return -1;
}

void dlua_writes_free(dlua_writes_t *w) {
  for (size_t i = 0; w->texts && i < w->count; i++)
    free(w->texts[i]);
  free(w->texts);
  free(w->writes);
  memset(w, 0, sizeof *w);
}

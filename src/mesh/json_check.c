/*
 * json_check.c: is this text JSON?  A syntax check that allocates nothing.
 *
 * Node contents and stream payloads are kept as the text written, so the
 * runtime never needs their tree -- only to know that they are JSON: on
 * every write (write.c), every publish and every item a reader hands over.
 * jansson answers that by building the whole tree and freeing it again,
 * which cost more than all the rest of a catch-up.  This check accepts what
 * jansson's json_loads(JSON_DECODE_ANY) accepts: one value with white space
 * around it; strings of valid UTF-8 (no overlong form, no surrogate,
 * nothing above U+10FFFF: durable__utf8_len, the rule paths are held to
 * too) with the JSON escapes, no NUL and no raw control character;
 * numbers in JSON's grammar, an integer (no fraction, no exponent) within
 * 64 bits and any other number within a double; the three literals;
 * nesting up to jansson's 2048.  That is the one rule for every
 * content and payload the store takes: what every reader decodes exactly
 * (jansson, and Lua, whose integers are 64-bit), so that nothing a producer
 * could append stops a consumer.  An integer beyond 64 bits would reach a
 * reader rounded, if at all: it is refused ("too big integer"), and a
 * producer that needs one sends it as a string.  A
 * caller that needs to say what is wrong calls durable__json_check, which
 * asks jansson for the message once the check has said no
 * (tests/unit/item_codec_test.c holds the two to the same answers).
 * Numbers are read as jansson reads them whatever the C locale's decimal
 * point (durable__json_strtod, which the Lua binding's decoder shares).
 */
#include "store.h"

#include "durable_text.h"

#include <errno.h>
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_DEPTH_MAX 2048

static const char *skip_ws(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
    s++;
  return s;
}

/* Four hex digits at `s` as a code unit, or -1. */
static long hex4(const char *s) {
  long v = 0;
  for (int i = 0; i < 4; i++) {
    char h = s[i];
    int d = h >= '0' && h <= '9'   ? h - '0'
            : h >= 'a' && h <= 'f' ? h - 'a' + 10
            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                   : -1;
    if (d < 0)
      return -1;
    v = v * 16 + d;
  }
  return v;
}

/* A string at its opening quote: just past its closing quote, or NULL. */
static const char *check_string(const char *s) {
  for (s++;;) {
    unsigned char c = (unsigned char)*s;
    if (c == '"')
      return s + 1;
    if (c < 0x20)
      return NULL; /* a control character, or the end of the text */
    if (c >= 0x80) {
      size_t n = durable__utf8_len(s);
      if (n == 0)
        return NULL;
      s += n;
      continue;
    }
    if (c != '\\') {
      s++;
      continue;
    }
    c = (unsigned char)s[1];
    if (c != 'u') {
      if (c == '\0' || strchr("\"\\/bfnrt", c) == NULL)
        return NULL;
      s += 2;
      continue;
    }
    long v = hex4(s + 2);
    if (v <= 0 || (v >= 0xDC00 && v <= 0xDFFF))
      return NULL; /* not hex, NUL, or a lone low surrogate */
    s += 6;
    if (v >= 0xD800 && v <= 0xDBFF) { /* a high surrogate: its pair */
      long w = s[0] == '\\' && s[1] == 'u' ? hex4(s + 2) : -1;
      if (w < 0xDC00 || w > 0xDFFF)
        return NULL;
      s += 6;
    }
  }
}

/* The C locale, for strtod_l: a number read with '.' whatever LC_NUMERIC
 * says, as jansson reads it (which puts the locale's point in place of '.'
 * in a copy).  glibc and musl hand their static C locale out here,
 * allocating nothing, so the plain strtod below is for a libc that has
 * none to give. */
static locale_t c_locale;
static uv_once_t c_locale_once = UV_ONCE_INIT;

static void c_locale_make(void) {
  c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

double durable__json_strtod(const char *s) {
  uv_once(&c_locale_once, c_locale_make);
  /* either stops where the number does */
  return c_locale != (locale_t)0 ? strtod_l(s, NULL, c_locale)
                                 : strtod(s, NULL);
}

static const char *check_number(const char *s) {
  const char *start = s;
  if (*s == '-')
    s++;
  if (*s == '0')
    s++;
  else if (*s >= '1' && *s <= '9')
    while (*s >= '0' && *s <= '9')
      s++;
  else
    return NULL;
  if (*s == '.') {
    if (*++s < '0' || *s > '9')
      return NULL;
    while (*s >= '0' && *s <= '9')
      s++;
  }
  int exponent = *s == 'e' || *s == 'E';
  if (exponent) {
    s++;
    if (*s == '+' || *s == '-')
      s++;
    if (*s < '0' || *s > '9')
      return NULL;
    while (*s >= '0' && *s <= '9')
      s++;
  }
  if (exponent || s - start > 300) { /* as jansson: beyond a double, refused */
    errno = 0;
    double d = durable__json_strtod(start);
    if (errno == ERANGE && isinf(d))
      return NULL;
  }
  if (!exponent && memchr(start, '.', (size_t)(s - start)) == NULL) {
    errno = 0; /* an integer: as jansson, beyond 64 bits refused */
    (void)strtoll(start, NULL, 10);
    if (errno == ERANGE)
      return NULL;
  }
  return s;
}

static const char *check_value(const char *s, int depth) {
  if (depth >= JSON_DEPTH_MAX)
    return NULL; /* as jansson, which counts every value, not only arrays
                    and objects */
  s = skip_ws(s);
  switch (*s) {
  case '"':
    return check_string(s);
  case 't':
    return strncmp(s, "true", 4) == 0 ? s + 4 : NULL;
  case 'f':
    return strncmp(s, "false", 5) == 0 ? s + 5 : NULL;
  case 'n':
    return strncmp(s, "null", 4) == 0 ? s + 4 : NULL;
  case '[':
  case '{': {
    char close = *s == '[' ? ']' : '}';
    int object = *s == '{';
    s = skip_ws(s + 1);
    if (*s == close)
      return s + 1;
    for (;;) {
      if (object) {
        if (*s != '"' || (s = check_string(s)) == NULL)
          return NULL;
        s = skip_ws(s);
        if (*s++ != ':')
          return NULL;
      }
      if ((s = check_value(s, depth + 1)) == NULL)
        return NULL;
      s = skip_ws(s);
      if (*s == close)
        return s + 1;
      if (*s != ',')
        return NULL;
      s = skip_ws(s + 1);
    }
  }
  default:
    return check_number(s);
  }
}

int durable__json_valid(const char *text) {
  const char *end = check_value(text, 0);
  return end != NULL && *skip_ws(end) == '\0';
}

int durable__json_check(const char *text, json_error_t *je) {
  if (durable__json_valid(text))
    return 0; /* the common case, without a tree */
  json_t *j = json_loads(text, JSON_DECODE_ANY, je);
  json_decref(j);
  return j ? 0 : -1;
}

json_t *durable__json_tree(const char *text, int *code) {
  json_t *j = json_loads(text ? text : "", JSON_DECODE_ANY, NULL);
  if (j == NULL)
    *code =
        durable__json_valid(text ? text : "") ? DURABLE_ENOMEM : DURABLE_EINVAL;
  return j;
}

int durable__json_is_null(const char *text) {
  const char *s = skip_ws(text);
  return strncmp(s, "null", 4) == 0 && *skip_ws(s + 4) == '\0';
}

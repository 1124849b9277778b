/*
 * text_test.c: the text rules of durable_text.h (src/common/oneline.c,
 * utf8.c, a time as text in clock.c) and the cuts of error messages
 * (src/common/error.c).
 *
 * Every log line, error and line of the command's output goes through
 * these, so a slip shows everywhere at once: a log line split in two, a
 * command's error that breaks a script reading its stderr line by line, a
 * message cut inside a character, a path or a JSON string let in that a
 * reader cannot decode.  The one-line forms are held to their rule on fixed
 * cases and, for the tidy copy, on every short text of a small alphabet at
 * every buffer size, against the rule written the plain way: collapse
 * everything, then cut, then trim.  The UTF-8 rule is held to a decoder
 * that says it by code point, on every code point and every lead byte; every
 * cut, at every size, must leave UTF-8.
 */
#include <durable.h>
#include <durable_internal.h>
#include <durable_text.h>

#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_one_line(void) {
  char s[] = "a\nb\r\nc\td  e\n";
  CHECK(durable__one_line(s) == s);
  CHECK_EQ_STR(s, "a b  c\td  e "); /* breaks only: tabs and runs stay */
  char empty[] = "";
  CHECK_EQ_STR(durable__one_line(empty), "");
  CHECK(durable__one_line(NULL) == NULL);
}

static void test_one_line_fputs(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  CHECK(out != NULL);
  durable__one_line_fputs("{\"a\":\r\n  [1,\n\t2]}\n", out);
  durable__one_line_fputs("", out);
  CHECK_EQ_INT(fclose(out), 0);
  CHECK_EQ_STR(text, "{\"a\":    [1, \t2]} ");
  free(text);
}

static void test_one_line_copy(void) {
  char line[64];
  CHECK(durable__one_line_copy(line, sizeof line,
                               "connection to server failed: refused\n"
                               "\tIs the server running?\n") == line);
  CHECK_EQ_STR(line, "connection to server failed: refused Is the server "
                     "running?");
  durable__one_line_copy(line, sizeof line, " \t\r\n ");
  CHECK_EQ_STR(line, "");
  durable__one_line_copy(line, sizeof line, "");
  CHECK_EQ_STR(line, "");
  /* cut to fit, never ending in a space */
  durable__one_line_copy(line, 1, "abc");
  CHECK_EQ_STR(line, "");
  durable__one_line_copy(line, 3, "ab cd");
  CHECK_EQ_STR(line, "ab");
  durable__one_line_copy(line, 4, "ab \n cd");
  CHECK_EQ_STR(line, "ab");
  durable__one_line_copy(line, 5, "ab \n cd");
  CHECK_EQ_STR(line, "ab c");
  /* in place */
  char s[] = "  two\n\tlines  ";
  CHECK_EQ_STR(durable__one_line_copy(s, sizeof s, s), "two lines");
}

/* The UTF-8 rule said by code point: the length of the character at `s`
 * (decoded, then held to the ranges), or 0. */
static size_t utf8_reference(const unsigned char *s) {
  unsigned char c = s[0];
  if (c < 0x80)
    return 1;
  size_t n = c >= 0xF8 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
  if (n == 0)
    return 0;
  unsigned long v = c & (0x7F >> n);
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    v = v << 6 | (s[i] & 0x3F);
  }
  static const unsigned long least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < least[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
    return 0;
  return n;
}

/* 1 when the first `len` bytes of `s` are UTF-8, by the reference. */
static int is_utf8(const char *s, size_t len) {
  char buf[600];
  CHECK(len < sizeof buf);
  memcpy(buf, s, len);
  buf[len] = '\0'; /* the reference stops at a NUL as at any byte */
  for (size_t i = 0; i < len;) {
    size_t n = utf8_reference((const unsigned char *)buf + i);
    if (n == 0 || i + n > len)
      return 0;
    i += n;
  }
  return 1;
}

/* `cp` as UTF-8 into `out` (4 bytes and a NUL), surrogates too; its length. */
static size_t encode(unsigned long cp, unsigned char *out) {
  size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  static const unsigned char mark[] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (size_t i = n - 1; i > 0; i--, cp >>= 6)
    out[i] = (unsigned char)(0x80 | (cp & 0x3F));
  out[0] = (unsigned char)(mark[n] | cp);
  out[n] = '\0';
  return n;
}

static void test_utf8_len(void) {
  unsigned char s[8];
  for (unsigned long cp = 1; cp <= 0x10FFFF; cp++) {
    size_t n = encode(cp, s);
    int surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    CHECK_EQ_INT(durable__utf8_len((const char *)s), surrogate ? 0 : n);
  }
  CHECK_EQ_INT(durable__utf8_len(""), 1);
  /* every lead and second byte, with the rest continuing or not */
  static const unsigned char rest[] = {0x80, 0x8F, 0x90, 0xBF,
                                       0x00, 0x41, 0xC0};
  enum { R = sizeof rest };
  for (unsigned a = 0; a < 256; a++)
    for (unsigned b = 0; b < 256; b++)
      for (unsigned c = 0; c < R; c++)
        for (unsigned d = 0; d < R; d++) {
          unsigned char t[5] = {(unsigned char)a, (unsigned char)b, rest[c],
                                rest[d], 0};
          size_t want = a == 0 ? 1 : utf8_reference(t);
          CHECK_MSG(durable__utf8_len((const char *)t) == want,
                    "%02x %02x %02x %02x: want %zu", t[0], t[1], t[2], t[3],
                    want);
        }
}

static void test_utf8_cut(void) {
  const char *s = "a\xC3\xA9\xE2\x80\x94\xF0\x9F\x98\x80z";
  /* a | é (2) | — (3) | 😀 (4) | z: every head cut to a boundary */
  static const size_t want[] = {0, 1, 1, 3, 3, 3, 6, 6, 6, 6, 10, 11};
  for (size_t n = 0; n < sizeof want / sizeof want[0]; n++)
    CHECK_MSG(durable__utf8_cut(s, n) == want[n], "n = %zu: got %zu", n,
              durable__utf8_cut(s, n));
  /* bytes that are no UTF-8 are kept as they are */
  CHECK_EQ_INT(durable__utf8_cut("\x80\x80", 2), 2);
  CHECK_EQ_INT(durable__utf8_cut("a\x80\x80\x80\x80", 5), 5);
  CHECK_EQ_INT(durable__utf8_cut("\xC3\xA9\xA9", 3), 3);
}

/* A message cut to fit, at every size, by each cut of error.c: the value's
 * head, a piece that does not fit, the text around; UTF-8 every time. */
static void test_format_cuts(void) {
  char value[400], out[520];
  size_t v = 0;
  while (v + 2 < sizeof value) {
    memcpy(value + v, "\xC3\xA9", 2); /* é */
    v += 2;
  }
  value[v] = '\0';
  for (size_t size = 1; size <= sizeof out; size++) {
    durable__format(out, size, "namespace '%s' is too long", value);
    CHECK_MSG(is_utf8(out, strlen(out)), "size %zu: '%s'", size, out);
    durable__format(out, size, "x\xE2\x80\x94%.*s\xE2\x80\x94%s\xE2\x80\x94",
                    (int)v, value, value);
    CHECK_MSG(is_utf8(out, strlen(out)), "size %zu: '%s'", size, out);
  }
  durable__format(out, 60, "'%s' is too long", value);
  CHECK_CONTAINS(out, "is too long");
  CHECK_CONTAINS(out, "(398 bytes)");
}

/* The tidy copy as its rule says it: every run of white space one space,
 * none at either end, then the longest head that fits, cut between two
 * characters, not ending in a space. */
static void tidy_reference(char *dst, size_t size, const char *src) {
  char all[64];
  size_t n = 0;
  for (const char *p = src; *p; p++) {
    int white = strchr(" \t\r\n", *p) != NULL;
    if (white && (n == 0 || all[n - 1] == ' '))
      continue;
    all[n++] = white ? ' ' : *p;
  }
  if (n > 0 && all[n - 1] == ' ')
    n--;
  if (n > size - 1) {
    n = size - 1;
    while (n > 0 && ((unsigned char)all[n] & 0xC0) == 0x80)
      n--; /* all[n] continues a character: it starts before */
  }
  while (n > 0 && all[n - 1] == ' ')
    n--;
  memcpy(dst, all, n);
  dst[n] = '\0';
}

static void test_one_line_copy_every_text(void) {
  static const char *const alphabet[] = {"a",  " ",           "\t",
                                         "\n", "\xC3\xA9",      /* é */
                                         "\r", "\xE2\x80\x94"}; /* — */
  enum { K = sizeof alphabet / sizeof alphabet[0], LEN = 5 };
  char src[3 * LEN + 1], got[3 * LEN + 2], want[3 * LEN + 2];
  char in_place[3 * LEN + 1];
  for (size_t len = 0; len <= LEN; len++) {
    size_t count = 1;
    for (size_t i = 0; i < len; i++)
      count *= K;
    for (size_t k = 0; k < count; k++) {
      size_t n = 0;
      for (size_t i = 0, v = k; i < len; i++, v /= K) {
        memcpy(src + n, alphabet[v % K], strlen(alphabet[v % K]));
        n += strlen(alphabet[v % K]);
      }
      src[n] = '\0';
      for (size_t size = 1; size <= n + 2; size++) {
        durable__one_line_copy(got, size, src);
        tidy_reference(want, size, src);
        CHECK_EQ_STR(got, want);
        CHECK(is_utf8(got, strlen(got)));
      }
      memcpy(in_place, src, n + 1);
      tidy_reference(want, n + 1, src);
      CHECK_EQ_STR(durable__one_line_copy(in_place, n + 1, in_place), want);
    }
  }
}

/* The one form a time takes as text, stored or shown; it reads back to the
 * same milliseconds (durable__parse_time is the streams layer's: checked
 * there), and a time before 1970 counts its milliseconds forward. */
static void test_iso_time(void) {
  char when[DURABLE_ISO_TIME_MAX];
  CHECK(durable__iso_time(0, when) == 0);
  CHECK_EQ_STR(when, "1970-01-01T00:00:00.000Z");
  CHECK(durable__iso_time(1738326896789, when) == 0);
  CHECK_EQ_STR(when, "2025-01-31T12:34:56.789Z");
  CHECK(durable__iso_time(-1, when) == 0);
  CHECK_EQ_STR(when, "1969-12-31T23:59:59.999Z");
  CHECK(durable__iso_time(253402300799999, when) == 0); /* the last of 9999 */
  CHECK_EQ_STR(when, "9999-12-31T23:59:59.999Z");
  /* the farthest time is written whole or refused whole, never cut */
  if (durable__iso_time(INT64_MAX, when) == 0)
    CHECK(strlen(when) > 5 && strcmp(when + strlen(when) - 5, ".807Z") == 0);
  else
    CHECK_EQ_STR(when, "");
}

static const check_test_t tests[] = {
    {"one_line", test_one_line},
    {"one_line_fputs", test_one_line_fputs},
    {"one_line_copy", test_one_line_copy},
    {"one_line_copy_every_text", test_one_line_copy_every_text},
    {"utf8_len", test_utf8_len},
    {"utf8_cut", test_utf8_cut},
    {"format_cuts", test_format_cuts},
    {"iso_time", test_iso_time},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

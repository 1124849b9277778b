/*
 * text_test.c: the text rules of durable_text.h (src/common/oneline.c).
 *
 * Every log line, error and line of the command's output goes through
 * these, so a slip shows everywhere at once: a log line split in two, a
 * command's error that breaks a script reading its stderr line by line, a
 * message cut in the middle.  The one-line forms are held to their rule on
 * fixed cases and, for the tidy copy, on every short text of a small
 * alphabet at every buffer size, against the rule written the plain way:
 * collapse everything, then cut, then trim.
 */
#include <durable.h>
#include <durable_text.h>

#include "check.h"

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

/* The tidy copy as its rule says it: every run of white space one space,
 * none at either end, then the longest head that fits, not ending in one. */
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
  if (n > size - 1)
    n = size - 1;
  while (n > 0 && all[n - 1] == ' ')
    n--;
  memcpy(dst, all, n);
  dst[n] = '\0';
}

static void test_one_line_copy_every_text(void) {
  static const char alphabet[] = {'a', 'b', ' ', '\t', '\n', '\r'};
  enum { K = sizeof alphabet, LEN = 6 };
  char src[LEN + 1], got[LEN + 2], want[LEN + 2], in_place[LEN + 1];
  for (size_t len = 0; len <= LEN; len++) {
    size_t count = 1;
    for (size_t i = 0; i < len; i++)
      count *= K;
    for (size_t k = 0; k < count; k++) {
      for (size_t i = 0, v = k; i < len; i++, v /= K)
        src[i] = alphabet[v % K];
      src[len] = '\0';
      for (size_t size = 1; size <= len + 2; size++) {
        durable__one_line_copy(got, size, src);
        tidy_reference(want, size, src);
        CHECK_EQ_STR(got, want);
      }
      memcpy(in_place, src, len + 1);
      tidy_reference(want, len + 1, src);
      CHECK_EQ_STR(durable__one_line_copy(in_place, len + 1, in_place), want);
    }
  }
}

static const check_test_t tests[] = {
    {"one_line", test_one_line},
    {"one_line_fputs", test_one_line_fputs},
    {"one_line_copy", test_one_line_copy},
    {"one_line_copy_every_text", test_one_line_copy_every_text},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

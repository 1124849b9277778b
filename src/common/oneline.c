/*
 * oneline.c: a message as one line (durable_text.h).
 *
 * A line break becomes a space: that is the whole rule, and the only thing
 * the in-place and the writing forms do, so that a log line keeps its tabs
 * and a JSON text its spacing.  The tidy copy is for messages written by
 * other libraries, whose lines are indented continuations of one sentence
 * ("connection failed: ...\n\tIs the server running ..."): there a run of
 * white space is one space, and a line that starts or ends with one is
 * trimmed; cut to fit, it is cut between two characters.
 */
#include "durable_text.h"

static int is_break(char c) {
  return c == '\n' || c == '\r';
}

char *durable__one_line(char *s) {
  for (char *p = s; p && *p; p++)
    if (is_break(*p))
      *p = ' ';
  return s;
}

void durable__one_line_fputs(const char *s, FILE *out) {
  for (const char *p = s; *p; p++)
    putc(is_break(*p) ? ' ' : *p, out);
}

char *durable__one_line_copy(char *dst, size_t size, const char *src) {
  size_t n = 0;
  int space = 0; /* white space seen since the last byte written */
  for (const char *p = src; *p; p++) {
    if (*p == ' ' || *p == '\t' || is_break(*p)) {
      space = n > 0; /* none at the start */
      continue;
    }
    /* the space is written with the byte after it: none at the end */
    if (n + (size_t)space + 1 >= size) { /* no room for them and the NUL */
      n = durable__utf8_cut(dst, n);     /* no half a character ... */
      if (n > 0 && dst[n - 1] == ' ')
        n--; /* ... nor the space before the one taken off */
      break;
    }
    if (space)
      dst[n++] = ' ';
    dst[n++] = *p;
    space = 0;
  }
  dst[n] = '\0';
  return dst;
}

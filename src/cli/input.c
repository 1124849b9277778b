/*
 * input.c: what the commands read from standard input (put's content,
 * publish's payload given as `-`).  It reads all of it as bytes and leaves
 * judging them to the command: each refuses a NUL byte or bad JSON with its
 * own message.
 */
#include "cli.h"

#include <stdlib.h>

char *cli_read_stdin(size_t *len) {
  size_t size = 4096, n = 0;
  char *buf = malloc(size);
  while (buf) {
    n += fread(buf + n, 1, size - n - 1, stdin);
    if (ferror(stdin))
      break;
    if (feof(stdin)) {
      buf[n] = '\0';
      *len = n;
      return buf;
    }
    if (size - n - 1 == 0) {
      char *bigger = realloc(buf, size * 2);
      if (bigger == NULL)
        break;
      buf = bigger;
      size *= 2;
    }
  }
  free(buf);
  return NULL;
}

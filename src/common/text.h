/*
 * text.h: the small string helpers every layer uses: a copy that keeps NULL,
 * and a growable array of owned strings.
 */
#ifndef DURABLE_COMMON_TEXT_H
#define DURABLE_COMMON_TEXT_H

#include <stddef.h>

/* A copy of `s` (free() it), NULL for NULL or when memory runs out. */
char *durable__strdup0(const char *s);

/* A growable array of strings it owns. */
typedef struct {
  char **items;
  size_t count, cap;
} durable__strv_t;

/* Append a copy of `s`: 0, or DURABLE_ENOMEM with `v` unchanged. */
int durable__strv_push(durable__strv_t *v, const char *s);
void durable__strv_free(durable__strv_t *v);

#endif

/*
 * text.c: see text.h.
 */
#include "text.h"

#include "durable.h"

#include <stdlib.h>
#include <string.h>

char *durable__strdup0(const char *s) {
  return s ? strdup(s) : NULL;
}

int durable__strv_push(durable__strv_t *v, const char *s) {
  if (v->count == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    char **items = realloc(v->items, cap * sizeof(*items));
    if (items == NULL)
      return DURABLE_ENOMEM;
    v->items = items;
    v->cap = cap;
  }
  char *d = strdup(s);
  if (d == NULL)
    return DURABLE_ENOMEM;
  v->items[v->count++] = d;
  return 0;
}

void durable__strv_free(durable__strv_t *v) {
  for (size_t i = 0; i < v->count; i++)
    free(v->items[i]);
  free(v->items);
  v->items = NULL;
  v->count = v->cap = 0;
}

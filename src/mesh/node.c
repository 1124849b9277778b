/*
 * node.c: node copies and the small growable arrays the store passes
 * between its threads (nodes, grants).
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

/* A node is one allocation: the struct, then its six strings, so that a
 * copy costs one malloc and freeing it one free (a catch-up reads and hands
 * on millions of them). */
durable_node_t *durable__node_pack(const durable__node_text_t text[6],
                                   int64_t version, int64_t created_at,
                                   int64_t updated_at) {
  size_t size = sizeof(durable_node_t);
  for (int i = 0; i < 6; i++)
    if (text[i].s != NULL)
      size += text[i].len + 1;
  durable_node_t *d = malloc(size);
  if (d == NULL)
    return NULL;
  char *at = (char *)(d + 1);
  char **fields[6] = {&d->ns,        &d->id,      &d->path,
                      &d->node_type, &d->content, &d->main_node};
  for (int i = 0; i < 6; i++) {
    if (text[i].s == NULL) {
      *fields[i] = NULL;
      continue;
    }
    memcpy(at, text[i].s, text[i].len);
    at[text[i].len] = '\0';
    *fields[i] = at;
    at += text[i].len + 1;
  }
  d->version = version;
  d->created_at = created_at;
  d->updated_at = updated_at;
  return d;
}

static durable__node_text_t text_of(const char *s) {
  return (durable__node_text_t){s, s ? strlen(s) : 0};
}

durable_node_t *durable_node_dup(const durable_node_t *node) {
  if (node == NULL)
    return NULL;
  durable__node_text_t text[6] = {
      text_of(node->ns),      text_of(node->id),
      text_of(node->path),    text_of(node->node_type),
      text_of(node->content), text_of(node->main_node)};
  return durable__node_pack(text, node->version, node->created_at,
                            node->updated_at);
}

void durable_node_free(durable_node_t *node) {
  free(node); /* its strings are in the same block */
}

int durable__nodes_push(durable__nodes_t *list, durable_node_t *node) {
  if (list->count == list->cap) {
    size_t cap = list->cap ? list->cap * 2 : 16;
    durable_node_t **items = realloc(list->items, cap * sizeof(*items));
    if (items == NULL)
      return DURABLE_ENOMEM;
    list->items = items;
    list->cap = cap;
  }
  list->items[list->count++] = node;
  return 0;
}

void durable__nodes_free(durable__nodes_t *list) {
  for (size_t i = 0; i < list->count; i++)
    durable_node_free(list->items[i]);
  free(list->items);
  list->items = NULL;
  list->count = list->cap = 0;
}

/* ---- grant lists --------------------------------------------------------- */

int durable__grants_push(durable__grants_t *v, const char *principal,
                         const char *prefix, int modes) {
  if (v->count == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    durable__grant_t *items = realloc(v->items, cap * sizeof(*items));
    if (items == NULL)
      return DURABLE_ENOMEM;
    v->items = items;
    v->cap = cap;
  }
  durable__grant_t *g = &v->items[v->count];
  g->principal = strdup(principal ? principal : "");
  g->prefix = strdup(prefix);
  g->modes = modes;
  if (g->principal == NULL || g->prefix == NULL) {
    free(g->principal);
    free(g->prefix);
    return DURABLE_ENOMEM;
  }
  v->count++;
  return 0;
}

void durable__grants_free(durable__grants_t *v) {
  for (size_t i = 0; i < v->count; i++) {
    free(v->items[i].principal);
    free(v->items[i].prefix);
  }
  free(v->items);
  memset(v, 0, sizeof *v);
}

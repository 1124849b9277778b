/*
 * node.c: node copies and the two small growable arrays the store passes
 * between its threads (nodes, strings).
 */
#include "store.h"

#include <stdlib.h>
#include <string.h>

static char *dup_or_null(const char *s, int *failed) {
  if (s == NULL)
    return NULL;
  char *d = strdup(s);
  if (d == NULL)
    *failed = 1;
  return d;
}

durable_node_t *durable_node_dup(const durable_node_t *node) {
  if (node == NULL)
    return NULL;
  durable_node_t *d = calloc(1, sizeof(*d));
  if (d == NULL)
    return NULL;
  int failed = 0;
  d->ns = dup_or_null(node->ns, &failed);
  d->id = dup_or_null(node->id, &failed);
  d->path = dup_or_null(node->path, &failed);
  d->node_type = dup_or_null(node->node_type, &failed);
  d->content = dup_or_null(node->content, &failed);
  d->main_node = dup_or_null(node->main_node, &failed);
  d->version = node->version;
  d->created_at = node->created_at;
  d->updated_at = node->updated_at;
  if (failed) {
    durable_node_free(d);
    return NULL;
  }
  return d;
}

void durable_node_free(durable_node_t *node) {
  if (node == NULL)
    return;
  free(node->ns);
  free(node->id);
  free(node->path);
  free(node->node_type);
  free(node->content);
  free(node->main_node);
  free(node);
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

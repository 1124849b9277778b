/*
 * node.c: node copies and the small growable arrays the store passes
 * between its threads (nodes, grants), and the blocks a page of a stream's
 * items is read into (packed lists, below).
 */
#include "store.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A node is one allocation: the struct, then its six strings, so that a
 * copy costs one malloc and freeing it one free (a catch-up reads and hands
 * on millions of them). */
static size_t node_size(const durable__node_text_t text[6]) {
  size_t size = sizeof(durable_node_t);
  for (int i = 0; i < 6; i++)
    if (text[i].s != NULL)
      size += text[i].len + 1;
  return size;
}

static void node_fill(durable_node_t *d, const durable__node_text_t text[6],
                      int64_t version, int64_t created_at, int64_t updated_at) {
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
}

durable_node_t *durable__node_pack(const durable__node_text_t text[6],
                                   int64_t version, int64_t created_at,
                                   int64_t updated_at) {
  durable_node_t *d = malloc(node_size(text));
  if (d != NULL)
    node_fill(d, text, version, created_at, updated_at);
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

/* ---- packed lists -------------------------------------------------------
 *
 * A page of a stream read from the store is a thousand nodes made on the
 * store's reader thread and freed on the loop thread.  One allocation each
 * cost a fifth of the reader thread's time: glibc hands a block freed by
 * another thread back to its arena under the arena's lock, which the reader
 * was holding to allocate the next (perf: malloc, free and their futex
 * wake-ups).  A list that asks for it (`packed`) keeps its nodes in a few
 * large blocks instead, freed with the list. */

#define BLOCK_SIZE (64 * 1024)

struct durable__node_block_s {
  struct durable__node_block_s *next;
  size_t used, size;
  max_align_t data[]; /* the nodes, each aligned */
};

static size_t aligned(size_t n) {
  size_t a = sizeof(max_align_t);
  return (n + a - 1) / a * a;
}

durable_node_t *durable__nodes_add(durable__nodes_t *list,
                                   const durable__node_text_t text[6],
                                   int64_t version, int64_t created_at,
                                   int64_t updated_at) {
  size_t size = aligned(node_size(text));
  /* a large node is an allocation of its own, packed list or not: a block
   * per such node would waste the rest of it, and make every lookup in
   * durable__nodes_in_block walk a block per item */
  if (!list->packed || size > BLOCK_SIZE / 4) {
    durable_node_t *node =
        durable__node_pack(text, version, created_at, updated_at);
    if (node == NULL || durable__nodes_push(list, node) < 0) {
      durable_node_free(node);
      return NULL;
    }
    return node;
  }
  durable__node_block_t *b = list->blocks;
  if (b == NULL || b->size - b->used < size) {
    b = malloc(sizeof(*b) + BLOCK_SIZE);
    if (b == NULL)
      return NULL;
    b->used = 0;
    b->size = BLOCK_SIZE;
    b->next = list->blocks;
    list->blocks = b;
  }
  durable_node_t *node = (durable_node_t *)((char *)b->data + b->used);
  if (durable__nodes_push(list, node) < 0)
    return NULL;
  node_fill(node, text, version, created_at, updated_at);
  b->used += size;
  return node;
}

int durable__nodes_in_block(const durable__nodes_t *list,
                            const durable_node_t *node) {
  for (const durable__node_block_t *b = list->blocks; b; b = b->next)
    if ((const char *)node >= (const char *)b->data &&
        (const char *)node < (const char *)b->data + b->used)
      return 1;
  return 0;
}

void durable__nodes_drop(durable__nodes_t *list, durable_node_t *node) {
  if (!durable__nodes_in_block(list, node))
    durable_node_free(node);
}

void durable__nodes_free(durable__nodes_t *list) {
  for (size_t i = 0; i < list->count; i++)
    durable__nodes_drop(list, list->items[i]);
  free(list->items);
  while (list->blocks) {
    durable__node_block_t *next = list->blocks->next;
    free(list->blocks);
    list->blocks = next;
  }
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

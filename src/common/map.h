/*
 * map.h: a string-keyed hash map of pointers: the one map of every layer
 * (hubs by address, pending requests by id, node types by name, a
 * PostgreSQL connection's prepared statements and partitions).  Keys are
 * copied; values are borrowed.  Open addressing with linear probing and
 * backward shift deletion, so there are no tombstones to clean up.
 */
#ifndef DURABLE_COMMON_MAP_H
#define DURABLE_COMMON_MAP_H

#include <stddef.h>

typedef struct {
  char **keys;
  void **values;
  size_t cap; /* a power of two, or 0 */
  size_t count;
} durable__map_t;

void *durable__map_get(const durable__map_t *map, const char *key);
/* 0, or DURABLE_ENOMEM.  Replaces the value of an existing key. */
int durable__map_put(durable__map_t *map, const char *key, void *value);
/* The value that was removed, or NULL. */
void *durable__map_del(durable__map_t *map, const char *key);
void durable__map_free(durable__map_t *map);
/* Iterate: for (size_t i = 0; durable__map_next(map, &i, &k, &v);) */
int durable__map_next(const durable__map_t *map, size_t *i, const char **key,
                      void **value);

#endif

/*
 * map.c: see map.h.  FNV-1a hashing; the table doubles at 3/4 full.
 */
#include "map.h"

#include "durable.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

static size_t slot_of(const durable__map_t *map, const char *key) {
  size_t mask = map->cap - 1;
  size_t i = hash(key) & mask;
  while (map->keys[i] && strcmp(map->keys[i], key) != 0)
    i = (i + 1) & mask;
  return i;
}

void *durable__map_get(const durable__map_t *map, const char *key) {
  if (map->cap == 0)
    return NULL;
  size_t i = slot_of(map, key);
  return map->keys[i] ? map->values[i] : NULL;
}

static int grow(durable__map_t *map) {
  size_t cap = map->cap ? map->cap * 2 : 16;
  durable__map_t bigger = {calloc(cap, sizeof(char *)),
                           calloc(cap, sizeof(void *)), cap, 0};
  if (bigger.keys == NULL || bigger.values == NULL) {
    free(bigger.keys);
    free(bigger.values);
    return DURABLE_ENOMEM;
  }
  for (size_t i = 0; i < map->cap; i++) {
    if (map->keys[i] == NULL)
      continue;
    size_t j = slot_of(&bigger, map->keys[i]);
    bigger.keys[j] = map->keys[i];
    bigger.values[j] = map->values[i];
    bigger.count++;
  }
  free(map->keys);
  free(map->values);
  *map = bigger;
  return 0;
}

int durable__map_put(durable__map_t *map, const char *key, void *value) {
  if (map->cap > 0) { /* a key that is there: a new value, nothing to grow */
    size_t i = slot_of(map, key);
    if (map->keys[i] != NULL) {
      map->values[i] = value;
      return 0;
    }
  }
  if ((map->count + 1) * 4 > map->cap * 3 && grow(map) < 0)
    return DURABLE_ENOMEM;
  size_t i = slot_of(map, key);
  if (map->keys[i] == NULL) {
    if ((map->keys[i] = strdup(key)) == NULL)
      return DURABLE_ENOMEM;
    map->count++;
  }
  map->values[i] = value;
  return 0;
}

void *durable__map_del(durable__map_t *map, const char *key) {
  if (map->cap == 0)
    return NULL;
  size_t mask = map->cap - 1;
  size_t i = slot_of(map, key);
  if (map->keys[i] == NULL)
    return NULL;
  void *value = map->values[i];
  free(map->keys[i]);
  map->keys[i] = NULL;
  map->count--;
  /* shift back the entries of the probe run that follows */
  for (size_t j = (i + 1) & mask; map->keys[j]; j = (j + 1) & mask) {
    size_t home = hash(map->keys[j]) & mask;
    /* move j to i when its home is not in the cyclic range (i, j] */
    int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!in_range) {
      map->keys[i] = map->keys[j];
      map->values[i] = map->values[j];
      map->keys[j] = NULL;
      i = j;
    }
  }
  return value;
}

void durable__map_free(durable__map_t *map) {
  for (size_t i = 0; i < map->cap; i++)
    free(map->keys[i]);
  free(map->keys);
  free(map->values);
  memset(map, 0, sizeof *map);
}

int durable__map_next(const durable__map_t *map, size_t *i, const char **key,
                      void **value) {
  for (; *i < map->cap; (*i)++) {
    if (map->keys[*i] == NULL)
      continue;
    if (key)
      *key = map->keys[*i];
    if (value)
      *value = map->values[*i];
    (*i)++;
    return 1;
  }
  return 0;
}

/*
 * map_test.c: the string-keyed map every layer uses (src/common/map.c).
 *
 * The mesh keeps its hubs, pending requests and node types in this map, so
 * a lost entry is a request that is never answered.  Open addressing with
 * linear probing stays correct only while every key sits in the unbroken
 * probe run that starts at its home slot; backward-shift deletion must keep
 * that true without tombstones, including for runs that wrap past the end
 * of the table.  The test therefore checks that invariant over the whole
 * table (slots are observable through durable__map_next's cursor) after
 * every operation of a random sequence run against a plain reference array,
 * with keys chosen to collide in a few slots around the wrap, and then at
 * scale with many keys and growth.
 */
#include <durable.h>

#include "check.h"
#include "map.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The map's hash (FNV-1a), to choose colliding keys.  The test checks that
 * it agrees with where the map really puts a key before relying on it. */
static size_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

static void *val(size_t i) {
  return (void *)(uintptr_t)(i + 1);
}

/* Every key sits in the probe run from its home: no empty slot between its
 * home and its slot (cyclically), and iteration visits `count` keys, each
 * once, each found by get. */
static void check_invariant(const durable__map_t *map) {
  size_t seen = 0;
  const char *key;
  void *value;
  for (size_t i = 0; durable__map_next(map, &i, &key, &value);) {
    size_t slot = i - 1;
    size_t mask = map->cap - 1;
    CHECK_EQ_STR(map->keys[slot], key);
    for (size_t j = fnv1a(key) & mask; j != slot; j = (j + 1) & mask)
      CHECK_MSG(map->keys[j] != NULL,
                "key '%s' at slot %zu, home %zu: slot %zu is empty", key, slot,
                fnv1a(key) & mask, j);
    CHECK(durable__map_get(map, key) == value);
    seen++;
  }
  CHECK_EQ_INT(seen, map->count);
  CHECK_LE_INT(map->count * 4, map->cap * 3);
}

static void test_empty(void) {
  durable__map_t map = {0};
  CHECK(durable__map_get(&map, "a") == NULL);
  CHECK(durable__map_del(&map, "a") == NULL);
  size_t i = 0;
  CHECK_EQ_INT(durable__map_next(&map, &i, NULL, NULL), 0);
  durable__map_free(&map);
  CHECK_EQ_INT(map.cap, 0);
  CHECK_EQ_INT(map.count, 0);
}

static void test_put_get_replace(void) {
  durable__map_t map = {0};
  char key[32];
  strcpy(key, "Space/doc");
  CHECK_OK(durable__map_put(&map, key, val(1)));
  strcpy(key, "Space/xyz"); /* the map copied the key */
  CHECK(durable__map_get(&map, "Space/doc") == val(1));
  CHECK(durable__map_get(&map, "Space/xyz") == NULL);
  CHECK_OK(durable__map_put(&map, "Space/doc", val(2))); /* replace */
  CHECK_EQ_INT(map.count, 1);
  CHECK(durable__map_get(&map, "Space/doc") == val(2));
  CHECK_OK(durable__map_put(&map, "", val(3))); /* the empty key is a key */
  CHECK(durable__map_get(&map, "") == val(3));
  CHECK(durable__map_del(&map, "Space/doc") == val(2));
  CHECK(durable__map_del(&map, "Space/doc") == NULL);
  CHECK(durable__map_get(&map, "Space/doc") == NULL);
  CHECK_EQ_INT(map.count, 1);
  check_invariant(&map);
  durable__map_free(&map);
  /* usable again after free */
  CHECK_OK(durable__map_put(&map, "again", val(4)));
  CHECK(durable__map_get(&map, "again") == val(4));
  durable__map_free(&map);
}

/* A new value for a key that is there never grows the map, so it cannot
 * fail for want of memory: the waker's "look again" marks rely on it. */
static void test_replace_at_the_limit(void) {
  durable__map_t map = {0};
  char key[32];
  size_t i = 0;
  /* fill up to the last entry before the next put would grow it */
  for (; i == 0 || (map.count + 1) * 4 <= map.cap * 3; i++) {
    snprintf(key, sizeof key, "k%zu", i);
    CHECK_OK(durable__map_put(&map, key, val(i)));
  }
  size_t cap = map.cap;
  CHECK_OK(durable__map_put(&map, "k0", val(99)));
  CHECK_EQ_INT(map.cap, cap);
  CHECK(durable__map_get(&map, "k0") == val(99));
  CHECK_EQ_INT(map.count, i);
  check_invariant(&map);
  durable__map_free(&map);
}

/* The hash agrees with the map: a key put alone lands on its home slot. */
static void test_hash_agrees(void) {
  for (int k = 0; k < 50; k++) {
    durable__map_t map = {0};
    char key[16];
    snprintf(key, sizeof key, "k%d", k);
    CHECK_OK(durable__map_put(&map, key, val(0)));
    size_t i = 0;
    CHECK_EQ_INT(durable__map_next(&map, &i, NULL, NULL), 1);
    CHECK_EQ_INT(i - 1, fnv1a(key) & (map.cap - 1));
    durable__map_free(&map);
  }
}

/* Keys whose home slot in a 16-slot table is 13, 14, 15, 0 or 1: runs that
 * collide and wrap around the end. */
#define POOL 24
static char pool[POOL][16];

static void make_pool(void) {
  static const size_t homes[] = {13, 14, 15, 0, 1};
  size_t n = 0;
  /* spread the pool over the five homes, round robin */
  for (unsigned k = 0; n < POOL; k++) {
    char key[16];
    snprintf(key, sizeof key, "c%u", k);
    if ((fnv1a(key) & 15) == homes[n % 5])
      strcpy(pool[n++], key);
  }
}

/* A random walk of puts and deletes with at most 12 keys (so the table
 * stays at 16 slots and the runs keep wrapping), checked against a
 * reference after each step.  Deleting from the middle, the head and the
 * tail of wrapping runs is what backward shift must get right. */
static void test_backward_shift_random(void) {
  make_pool();
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int round = 0; round < 200; round++) {
    durable__map_t map = {0};
    void *ref[POOL] = {0};
    size_t live = 0;
    for (int step = 0; step < 200; step++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t k = (size_t)(seed >> 33) % POOL;
      int do_put = (int)((seed >> 20) & 1);
      /* at 12 keys a put, even a replacing one, may grow the table: stay
       * at 16 slots so the runs keep wrapping */
      if (live >= 12)
        do_put = 0;
      if (do_put) {
        void *v = val((size_t)step);
        CHECK_OK(durable__map_put(&map, pool[k], v));
        if (ref[k] == NULL)
          live++;
        ref[k] = v;
      } else {
        void *got = durable__map_del(&map, pool[k]);
        CHECK(got == ref[k]);
        if (ref[k] != NULL)
          live--;
        ref[k] = NULL;
      }
      CHECK_EQ_INT(map.count, live);
      CHECK_MSG(map.cap == 0 || map.cap == 16, "cap %zu", map.cap);
      for (size_t j = 0; j < POOL; j++)
        CHECK_MSG(durable__map_get(&map, pool[j]) == ref[j],
                  "round %d step %d key '%s'", round, step, pool[j]);
      check_invariant(&map);
    }
    durable__map_free(&map);
  }
}

/* Every single deletion from a full wrapping cluster of 12 keys. */
static void test_backward_shift_each(void) {
  make_pool();
  for (size_t gone = 0; gone < 12; gone++) {
    durable__map_t map = {0};
    for (size_t k = 0; k < 12; k++)
      CHECK_OK(durable__map_put(&map, pool[k], val(k)));
    CHECK_EQ_INT(map.cap, 16);
    check_invariant(&map);
    CHECK(durable__map_del(&map, pool[gone]) == val(gone));
    check_invariant(&map);
    for (size_t k = 0; k < 12; k++)
      CHECK(durable__map_get(&map, pool[k]) == (k == gone ? NULL : val(k)));
    /* and back in */
    CHECK_OK(durable__map_put(&map, pool[gone], val(gone)));
    check_invariant(&map);
    CHECK_EQ_INT(map.count, 12);
    durable__map_free(&map);
  }
}

#define MANY 20000

static void test_many(void) {
  durable__map_t map = {0};
  static unsigned char visited[MANY];
  char key[48];
  for (size_t i = 0; i < MANY; i++) {
    snprintf(key, sizeof key, "Space/node-%zu", i);
    CHECK_OK(durable__map_put(&map, key, val(i)));
  }
  CHECK_EQ_INT(map.count, MANY);
  check_invariant(&map);
  for (size_t i = 0; i < MANY; i++) {
    snprintf(key, sizeof key, "Space/node-%zu", i);
    CHECK(durable__map_get(&map, key) == val(i));
  }
  /* iteration: each key once, with its value */
  const char *k;
  void *v;
  size_t n = 0;
  memset(visited, 0, sizeof visited);
  for (size_t i = 0; durable__map_next(&map, &i, &k, &v);) {
    size_t idx = (size_t)(uintptr_t)v - 1;
    CHECK_LT_INT(idx, MANY);
    CHECK_EQ_INT(visited[idx], 0);
    visited[idx] = 1;
    snprintf(key, sizeof key, "Space/node-%zu", idx);
    CHECK_EQ_STR(k, key);
    n++;
  }
  CHECK_EQ_INT(n, MANY);
  /* delete two of every three, in a scattered order */
  for (size_t i = 0; i < MANY; i++) {
    size_t j = (i * 7919) % MANY;
    if (j % 3 == 0)
      continue;
    snprintf(key, sizeof key, "Space/node-%zu", j);
    CHECK(durable__map_del(&map, key) == val(j));
  }
  check_invariant(&map);
  for (size_t i = 0; i < MANY; i++) {
    snprintf(key, sizeof key, "Space/node-%zu", i);
    CHECK(durable__map_get(&map, key) == (i % 3 == 0 ? val(i) : NULL));
  }
  CHECK_EQ_INT(map.count, (MANY + 2) / 3);
  /* fill again, then empty completely */
  for (size_t i = 0; i < MANY; i++) {
    snprintf(key, sizeof key, "Space/node-%zu", i);
    CHECK_OK(durable__map_put(&map, key, val(i)));
  }
  CHECK_EQ_INT(map.count, MANY);
  for (size_t i = MANY; i-- > 0;) {
    snprintf(key, sizeof key, "Space/node-%zu", i);
    CHECK(durable__map_del(&map, key) == val(i));
  }
  CHECK_EQ_INT(map.count, 0);
  size_t i = 0;
  CHECK_EQ_INT(durable__map_next(&map, &i, NULL, NULL), 0);
  durable__map_free(&map);
}

static const check_test_t tests[] = {
    {"empty", test_empty},
    {"put_get_replace", test_put_get_replace},
    {"hash_agrees", test_hash_agrees},
    {"backward_shift_each", test_backward_shift_each},
    {"backward_shift_random", test_backward_shift_random},
    {"many", test_many},
    {"replace_at_the_limit", test_replace_at_the_limit},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

/*
 * stats.c: what this process did with each stream -- appended, handled,
 * failed, redelivered, dead-lettered, trimmed, batches -- counted where it
 * happens (publish.c, consumer.c, turn.c, dead_letter.c, operator.c) and read
 * by durable_mesh_stream_stats (mesh:stats().streams, the metrics endpoint).
 *
 * The counters live in the streams layer's per-mesh state (install.c), one
 * entry per stream in a hash map keyed "{ns}\n{key}" -- and one per
 * consumer group of it, "{ns}\n{key}\n{group}" (a key has no newline, so
 * the key is unambiguous).  Counting is a map look-up
 * and an add on the loop thread: nothing is written, nothing waits.  An
 * entry also remembers the highest sequence handed to a handler here, which
 * is what tells a redelivery from a first delivery (a retry, a claim again
 * after a lost lease, a replay after a seek all hand an item at or below
 * it).
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The counters are per-mesh state (stream.c): a map "ns\nkey" -> entry. */
static const char stats_key; /* the state's key: its address */

typedef struct {
  char *ns, *key, *group;
  int64_t handed_through; /* the highest sequence handed to a handler here */
  durable_stream_stats_t stats;
} entry_t;

static void entry_free(entry_t *e) {
  if (e) {
    free(e->ns);
    free(e->key);
    free(e->group);
  }
  free(e);
}

static entry_t *entry_of(durable_mesh_t *mesh, const char *ns, const char *key,
                         const char *group) {
  durable__map_t *map = durable__mesh_state(mesh, &stats_key);
  if (map == NULL || ns == NULL || key == NULL)
    return NULL;
  char name[2 * DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 3];
  snprintf(name, sizeof name, "%s\n%s%s%s", ns, key, group ? "\n" : "",
           group ? group : "");
  entry_t *e = durable__map_get(map, name);
  if (e != NULL)
    return e;
  e = calloc(1, sizeof(*e));
  if (e == NULL || (e->ns = strdup(ns)) == NULL ||
      (e->key = strdup(key)) == NULL ||
      (group && (e->group = strdup(group)) == NULL) ||
      durable__map_put(map, name, e) < 0) {
    entry_free(e);
    return NULL; /* out of memory: a count is lost, nothing else */
  }
  e->stats.group = e->group;
  return e;
}

void durable__stream_count(durable_mesh_t *mesh, const char *ns,
                           const char *key, const char *group,
                           durable__count_t which, uint64_t n) {
  entry_t *e = entry_of(mesh, ns, key, group);
  if (e == NULL)
    return;
  durable_stream_stats_t *s = &e->stats;
  switch (which) {
  case DURABLE__COUNT_APPENDED:
    s->appended += n;
    break;
  case DURABLE__COUNT_HANDLED:
    s->handled += n;
    break;
  case DURABLE__COUNT_FAILED:
    s->failed += n;
    break;
  case DURABLE__COUNT_DEAD_LETTERED:
    s->dead_lettered += n;
    break;
  case DURABLE__COUNT_TRIMMED:
    s->trimmed += n;
    break;
  case DURABLE__COUNT_BATCHES:
    s->batches += n;
    break;
  case DURABLE__COUNT_DETACHED:
    s->detached += n;
    break;
  }
}

void durable__stream_handed(durable_mesh_t *mesh, const char *ns,
                            const char *key, const char *group, int64_t first,
                            int64_t last) {
  entry_t *e = entry_of(mesh, ns, key, group);
  if (e == NULL)
    return;
  int64_t again = e->handed_through < last ? e->handed_through : last;
  if (again >= first)
    e->stats.redelivered += (uint64_t)(again - first + 1);
  if (last > e->handed_through)
    e->handed_through = last;
}

void durable__stream_renewed(durable_mesh_t *mesh, const char *ns,
                             const char *key, const char *group) {
  durable__map_t *map = durable__mesh_state(mesh, &stats_key);
  const char *name;
  void *value;
  /* its items from 1 are new, not handed again: the stream's own and,
   * for the stream, every group's */
  for (size_t i = 0; map && durable__map_next(map, &i, &name, &value);) {
    entry_t *e = value;
    if (strcmp(e->ns, ns) == 0 && strcmp(e->key, key) == 0 &&
        (group == NULL || (e->group && strcmp(e->group, group) == 0)))
      e->handed_through = 0;
  }
}

static void stats_free(void *data) {
  durable__map_t *map = data;
  const char *name;
  void *value;
  for (size_t i = 0; durable__map_next(map, &i, &name, &value);) {
    entry_free(value);
  }
  durable__map_free(map);
  free(map);
}

int durable__stream_stats_install(durable_mesh_t *mesh) {
  return durable__mesh_state_add(mesh, &stats_key, sizeof(durable__map_t),
                                 stats_free);
}

void durable_mesh_stream_stats(durable_mesh_t *mesh, durable_stream_stats_cb cb,
                               void *data) {
  durable__map_t *map = mesh ? durable__mesh_state(mesh, &stats_key) : NULL;
  const char *name;
  void *value;
  for (size_t i = 0; map && durable__map_next(map, &i, &name, &value);) {
    entry_t *e = value;
    durable_stream_id_t id = {.ns = e->ns, .key = e->key};
    cb(&id, &e->stats, data);
  }
}

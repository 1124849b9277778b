/*
 * seen.c: what this process has seen of each stream it touched -- the
 * last sequence, the checkpoint, the lease epoch, and on which of the
 * store's servers -- so that a store that went back is noticed rather than
 * believed.
 *
 * A failover to a standby that had not received every commit (asynchronous
 * replication) leaves a primary behind what producers were told and what
 * consumers acknowledged.  Believed, it would give those sequences to other
 * items and hand acknowledged items over again, in silence.  One server
 * never goes back by itself, and a seek or a delete moves a stream back on
 * purpose, so the marks follow every state the stream hub knows, and are
 * compared with one only when the store's server changed in between
 * (durable__store_server_gen): a state read from the new server that is
 * behind them is a loss (stream_hub.c stops the stream for it).
 *
 * One mark per stream this process appended to, claimed or acknowledged,
 * kept until the mesh closes or the stream is deleted: a few dozen bytes
 * each.
 */
#include "stream.h"

#include <stdlib.h>

typedef struct {
  int64_t last, checkpoint, epoch;
  uint64_t gen; /* the store's server when they were seen */
} mark_t;

static const char seen_key; /* the state's key: its address */

static void seen_free(void *data) {
  durable__map_t *marks = data;
  const char *k;
  void *v;
  for (size_t i = 0; durable__map_next(marks, &i, &k, &v);)
    free(v);
  durable__map_free(marks);
  free(marks);
}

int durable__seen_install(durable_mesh_t *mesh) {
  return durable__mesh_state_add(mesh, &seen_key, sizeof(durable__map_t),
                                 seen_free);
}

int durable__seen_check(durable_mesh_t *mesh, const char *path,
                        const durable__stream_state_t *s,
                        durable__stream_state_t *seen) {
  durable__map_t *marks = durable__mesh_state(mesh, &seen_key);
  uint64_t gen = durable__store_server_gen(durable_mesh_store(mesh));
  mark_t *m = marks ? durable__map_get(marks, path) : NULL;
  if (m != NULL && m->gen != gen &&
      (s->last_sequence < m->last || s->checkpoint < m->checkpoint ||
       s->lease_epoch < m->epoch)) {
    seen->seen_last = m->last;
    seen->seen_checkpoint = m->checkpoint;
    seen->seen_epoch = m->epoch;
    return 1; /* the marks stay: the loss is measured against them */
  }
  if (m == NULL && marks != NULL &&
      ((m = malloc(sizeof *m)) == NULL ||
       durable__map_put(marks, path, m) < 0)) {
    free(m); /* without memory, this stream goes unguarded */
    return 0;
  }
  if (m != NULL)
    *m = (mark_t){s->last_sequence, s->checkpoint, s->lease_epoch, gen};
  return 0;
}

void durable__seen_forget(durable_mesh_t *mesh, const char *path) {
  durable__map_t *marks = durable__mesh_state(mesh, &seen_key);
  if (marks != NULL)
    free(durable__map_del(marks, path));
}

/*
 * read_budget.c: how much the stream readers of one mesh may hold at once.
 *
 * Each reader (reader.c: a consumer's, or a plain durable_stream_read)
 * reads a stream in pages and keeps what it read until it is handed over.
 * One reader holds at most two pages; but a host that activates five
 * hundred consumers of streams far behind would hold five hundred times
 * that.  So the readers of a mesh share a budget, its read window
 * (durable_mesh_options_t.read_window; DURABLE__READ_ITEMS items and
 * DURABLE__READ_BYTES bytes by default): a read asks for as many rows as are
 * left of it (a page at most; in bytes, by the mean size of the items read
 * so far), counted from the moment it is sent; what
 * comes back is held until handed over, and what a page did not fill is
 * given back at once.  A reader that would get fewer than
 * DURABLE__READ_MIN rows waits in line, and reads when items are handed
 * over elsewhere -- unless it has nothing it could hand over while an item
 * is asked of it: then it reads
 * DURABLE__READ_MIN rows whatever the budget says, so that
 * every reader moves (the budget is passed by at most that much per
 * reader).
 */
#include "stream.h"

#include <stdlib.h>

typedef struct {
  int64_t items, bytes;           /* reserved or held by the mesh's readers */
  int64_t max_items, max_bytes;   /* the read window */
  int64_t seen_items, seen_bytes; /* every item held so far: the mean size */
  struct durable__queue waiting;  /* durable__read_waiter_t, oldest first */
  int64_t nwaiting;
  int waking;
} budget_t;

static const char budget_key; /* the state's key: its address */

static budget_t *budget_of(durable_mesh_t *mesh) {
  return durable__mesh_state(mesh, &budget_key);
}

/* The mesh is going: whoever still waits is let go of (unlinked), so that
 * its own unlinking touches nothing freed. */
static void budget_free(void *data) {
  budget_t *b = data;
  while (durable__queue_pop(&b->waiting) != NULL)
    ;
  free(b);
}

int durable__read_budget_install(durable_mesh_t *mesh) {
  int rc =
      durable__mesh_state_add(mesh, &budget_key, sizeof(budget_t), budget_free);
  if (rc < 0)
    return rc;
  budget_t *b = budget_of(mesh);
  durable__queue_init(&b->waiting);
  const durable_read_window_t *o = &mesh->read_window;
  b->max_items = o->items ? (int64_t)o->items : DURABLE__READ_ITEMS;
  b->max_bytes = o->bytes ? (int64_t)o->bytes : DURABLE__READ_BYTES;
  return 0;
}

/* The mean size of an item held so far (a guess before the first). */
static int64_t mean_bytes(const budget_t *b) {
  int64_t mean = b->seen_items ? b->seen_bytes / b->seen_items : 512;
  return mean > 0 ? mean : 1;
}

static size_t room(const budget_t *b) {
  if (b->bytes >= b->max_bytes || b->items >= b->max_items)
    return 0;
  int64_t by_bytes = (b->max_bytes - b->bytes) / mean_bytes(b);
  int64_t by_items = b->max_items - b->items;
  int64_t rows = by_bytes < by_items ? by_bytes : by_items;
  /* before the first item no size is known: a few, to learn it */
  if (b->seen_items == 0 && rows > DURABLE__READ_MIN)
    rows = DURABLE__READ_MIN;
  return (size_t)rows;
}

size_t durable__read_budget_rows(durable_mesh_t *mesh, int64_t bytes) {
  budget_t *b = budget_of(mesh);
  int64_t rows = bytes / (b ? mean_bytes(b) : 512);
  return rows > 0 ? (size_t)rows : 0;
}

void durable_mesh_read_stats(durable_mesh_t *mesh, durable_read_stats_t *out) {
  budget_t *b = budget_of(mesh);
  *out = (durable_read_stats_t){0};
  if (b)
    *out = (durable_read_stats_t){(uint64_t)b->items, (uint64_t)b->bytes,
                                  (uint64_t)b->nwaiting};
}

size_t durable__read_budget_take(durable_mesh_t *mesh, size_t want,
                                 int starving) {
  budget_t *b = budget_of(mesh);
  if (b == NULL) /* the mesh is going: its readers read as before */
    return want;
  size_t rows = room(b);
  if (rows > want)
    rows = want;
  if (rows < DURABLE__READ_MIN)
    rows = starving ? (want < DURABLE__READ_MIN ? want : DURABLE__READ_MIN) : 0;
  b->items += (int64_t)rows;
  return rows;
}

void durable__read_budget_give(durable_mesh_t *mesh, int64_t items,
                               int64_t bytes) {
  budget_t *b = budget_of(mesh);
  if (b == NULL)
    return;
  b->items -= items;
  b->bytes -= bytes;
  if (items <= 0 && bytes <= 0)
    return;
  /* room again: the oldest waiting readers read (in a later turn), one for
   * each DURABLE__READ_MIN rows of it */
  if (b->waking)
    return;
  b->waking = 1;
  struct durable__queue *q;
  size_t left = room(b);
  for (; left >= DURABLE__READ_MIN &&
         (q = durable__queue_pop(&b->waiting)) != NULL;
       left -= DURABLE__READ_MIN) {
    durable__read_waiter_t *w =
        DURABLE__QUEUE_DATA(q, durable__read_waiter_t, link);
    b->nwaiting--;
    w->wake(w);
  }
  b->waking = 0;
}

void durable__read_budget_hold(durable_mesh_t *mesh, int64_t bytes) {
  budget_t *b = budget_of(mesh);
  if (b == NULL)
    return;
  b->bytes += bytes;
  b->seen_items++;
  b->seen_bytes += bytes;
}

void durable__read_budget_wait(durable_mesh_t *mesh,
                               durable__read_waiter_t *w) {
  budget_t *b = budget_of(mesh);
  if (b == NULL || !durable__queue_empty(&w->link))
    return;
  durable__queue_insert_tail(&b->waiting, &w->link);
  b->nwaiting++;
}

void durable__read_budget_unwait(durable_mesh_t *mesh,
                                 durable__read_waiter_t *w) {
  budget_t *b = budget_of(mesh);
  if (durable__queue_empty(&w->link))
    return;
  durable__queue_remove(&w->link);
  if (b)
    b->nwaiting--;
}

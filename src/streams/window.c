/*
 * window.c: the publish window of a mesh -- how much it has in flight at
 * once, and the queue of the publishes waiting for room.
 *
 * A producer faster than the store would otherwise have every publish it
 * started in flight at once, each holding a request to its stream hub and
 * a place in that hub's mailbox, and a burst would take the host's memory.
 * So a mesh keeps at most `items` publishes of at most `bytes` in flight
 * (durable_mesh_options_t.publish_window); a publish past that waits, in
 * the order it came, as nothing but its own block (its payload and a small
 * fixed part), and goes once a publish in flight has finished.  Two bounds
 * end a wait, both with DURABLE_EAGAIN, nothing appended, and a message
 * that names the bound and what to do: the bytes waiting (a publish that
 * would pass `waiting_bytes` is refused at once) and the time (once the
 * oldest waited `max_block_ms`, it fails, with every one behind it: none
 * started after a failed one is appended).  The first publish when nothing is
 * in flight always goes, whatever its size.  When the mesh closes, those still
 * waiting fail with DURABLE_ESHUTDOWN.  Once a burst that waited is over -- the
 * window empty for TRIM_DELAY_MS -- the memory it took goes back to the system
 * (malloc_trim; a binding first frees what it holds).
 *
 *   publish --room?--yes--> in flight --finished--> the next waiting go
 *               \--no--> waiting, in order --max_block_ms--> EAGAIN
 *                  \--waiting_bytes passed--> EAGAIN at once
 */
#include "stream.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  durable_mesh_t *mesh;
  durable_publish_window_t limits; /* the defaults filled in */
  struct durable__queue waiting;   /* durable__window_slot_t, oldest first */
  durable_publish_stats_t stats;
  uv_timer_t timer;    /* the oldest waiting publish's max_block_ms */
  int draining;        /* inside go_waiting: a finish there only counts */
  int closed;          /* the mesh is closing: nothing waits any more */
  uint64_t trimmed_at; /* stats.waited when the last burst was over */
  void (*on_over)(void *data); /* durable__window_on_burst_over */
  void *on_over_data;
} window_t;

static const char window_key; /* the state's key: its address */

/* How long the window stays empty before a burst counts as over. */
#define TRIM_DELAY_MS 200

static window_t *window_of(durable_mesh_t *mesh) {
  void **slot = durable__mesh_state(mesh, &window_key);
  return slot ? *slot : NULL;
}

static uint64_t or_default(uint64_t given, uint64_t fallback) {
  return given ? given : fallback;
}

static int has_room(const window_t *w, const durable__window_slot_t *slot) {
  const durable_publish_stats_t *s = &w->stats;
  return s->in_flight == 0 ||
         (s->in_flight < w->limits.items &&
          s->in_flight_bytes + slot->bytes <= w->limits.bytes);
}

static void take_room(window_t *w, durable__window_slot_t *slot) {
  w->stats.in_flight++;
  w->stats.in_flight_bytes += slot->bytes;
}

static durable__window_slot_t *oldest(window_t *w) {
  struct durable__queue *q = durable__queue_head(&w->waiting);
  return q == &w->waiting
             ? NULL
             : DURABLE__QUEUE_DATA(q, durable__window_slot_t, link);
}

static void unqueue(window_t *w, durable__window_slot_t *slot) {
  durable__queue_remove(&slot->link);
  w->stats.waiting--;
  w->stats.waiting_bytes -= slot->bytes;
}

static void on_timer(uv_timer_t *timer);

/* The oldest waiting publish is due max_block_ms after it came. */
static void arm(window_t *w) {
  durable__window_slot_t *slot = oldest(w);
  if (slot == NULL)
    return; /* the timer may wait for a burst to be over: let it */
  uint64_t now = uv_now(durable_mesh_loop(w->mesh));
  uint64_t due = slot->since + w->limits.max_block_ms;
  uv_timer_start(&w->timer, on_timer, due > now ? due - now : 0, 0);
}

/* A burst that waited is over (the timer with nothing waiting): glibc
 * keeps what was freed in its arenas, the store's threads' too, until asked
 * to give it back. */
static void burst_over(window_t *w) {
  if (w->stats.in_flight > 0 || w->stats.waited == w->trimmed_at)
    return;
  w->trimmed_at = w->stats.waited;
  if (w->on_over)
    w->on_over(w->on_over_data);
  else
    malloc_trim(0);
}

/* The oldest waiting publish waited max_block_ms: it fails, and so does
 * every publish waiting behind it -- were they to go later, a publish
 * started after the one that failed would be appended, and one retried
 * would come after it.  With none waiting, a burst is over. */
static void on_timer(uv_timer_t *timer) {
  window_t *w = timer->data;
  durable__window_slot_t *slot = oldest(w);
  if (slot == NULL) {
    burst_over(w);
    return;
  }
  uint64_t now = uv_now(durable_mesh_loop(w->mesh));
  if (now - slot->since < w->limits.max_block_ms) {
    arm(w);
    return;
  }
  char message[500];
  snprintf(message, sizeof message,
           "the oldest publish waiting for room in the publish window "
           "waited %u ms (%u publishes, %llu bytes in flight at most); it "
           "and every publish behind it failed, none appended: the store "
           "takes publishes more slowly than they come; await publishes "
           "before starting more, or raise publish_window.max_block_ms",
           w->limits.max_block_ms, w->limits.items,
           (unsigned long long)w->limits.bytes);
  struct durable__queue expired, *q;
  durable__queue_move(&w->waiting, &expired);
  w->stats.waiting = w->stats.waiting_bytes = 0;
  while ((q = durable__queue_pop(&expired)) != NULL) {
    w->stats.expired++;
    slot = DURABLE__QUEUE_DATA(q, durable__window_slot_t, link);
    slot->fail(slot, DURABLE_EAGAIN, message);
  }
  arm(w);
}

/* Start the oldest waiting publishes for as long as there is room.  A
 * publish that finishes inside its start (refused at once) makes room
 * again: the loop here goes on rather than the call nesting. */
static void go_waiting(window_t *w) {
  if (w->draining)
    return;
  w->draining = 1;
  durable__window_slot_t *slot;
  while (!w->closed && (slot = oldest(w)) != NULL && has_room(w, slot)) {
    unqueue(w, slot);
    take_room(w, slot);
    w->stats.waited++;
    slot->go(slot);
  }
  w->draining = 0;
  arm(w);
}

int durable__window_enter(durable_mesh_t *mesh, durable__window_slot_t *slot,
                          durable_error_t *err) {
  window_t *w = window_of(mesh);
  if (w == NULL || w->closed)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  if (durable__queue_empty(&w->waiting) && has_room(w, slot)) {
    take_room(w, slot);
    return 1;
  }
  if (w->stats.waiting_bytes + slot->bytes > w->limits.waiting_bytes) {
    w->stats.refused++;
    return durable__error(
        err, DURABLE_EAGAIN,
        "the publish window is full: %llu publishes (%llu bytes) in flight "
        "and %llu bytes waiting, at most %llu (publish_window.waiting_bytes); "
        "nothing was appended: await publishes before starting more, or "
        "raise the window",
        (unsigned long long)w->stats.in_flight,
        (unsigned long long)w->stats.in_flight_bytes,
        (unsigned long long)w->stats.waiting_bytes,
        (unsigned long long)w->limits.waiting_bytes);
  }
  slot->since = uv_now(durable_mesh_loop(mesh));
  durable__queue_insert_tail(&w->waiting, &slot->link);
  w->stats.waiting++;
  w->stats.waiting_bytes += slot->bytes;
  if (w->stats.waiting == 1)
    arm(w);
  return 0;
}

void durable__window_leave(durable_mesh_t *mesh, size_t bytes) {
  window_t *w = window_of(mesh);
  if (w == NULL)
    return;
  w->stats.in_flight--;
  w->stats.in_flight_bytes -= bytes;
  go_waiting(w);
  if (w->stats.in_flight == 0 && w->stats.waiting == 0 &&
      w->stats.waited > w->trimmed_at)
    uv_timer_start(&w->timer, on_timer, TRIM_DELAY_MS, 0);
}

void durable__window_on_burst_over(durable_mesh_t *mesh, void (*fn)(void *),
                                   void *data) {
  window_t *w = window_of(mesh);
  if (w) {
    w->on_over = fn;
    w->on_over_data = data;
  }
}

void durable_mesh_publish_stats(durable_mesh_t *mesh,
                                durable_publish_stats_t *out) {
  window_t *w = window_of(mesh);
  *out = w ? w->stats : (durable_publish_stats_t){0};
}

/* ---- the mesh's life ---------------------------------------------------- */

static void on_timer_closed(uv_handle_t *handle) {
  window_t *w = handle->data;
  durable_mesh_t *mesh = w->mesh;
  free(w);
  durable__sched_handle_closed(&mesh->sched);
}

/* The read-issuing hub leaves, last of all: whatever still waits fails. */
static void on_mesh_closing(durable_hub_t *hub, void *data) {
  window_t *w = data;
  (void)hub;
  w->closed = 1;
  durable__window_slot_t *slot;
  while ((slot = oldest(w)) != NULL) {
    unqueue(w, slot);
    slot->fail(slot, DURABLE_ESHUTDOWN, "the mesh is closing");
  }
  void **state = durable__mesh_state(w->mesh, &window_key);
  if (state)
    *state = NULL;
  uv_close((uv_handle_t *)&w->timer, on_timer_closed);
}

int durable__window_install(durable_mesh_t *mesh) {
  int rc = durable__mesh_state_add(mesh, &window_key, sizeof(void *), free);
  if (rc < 0)
    return rc;
  window_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return DURABLE_ENOMEM;
  const durable_publish_window_t *o = &mesh->publish_window;
  w->mesh = mesh;
  w->limits = (durable_publish_window_t){
      .items = (uint32_t)or_default(o->items, DURABLE__DEFAULT_WINDOW_ITEMS),
      .bytes = or_default(o->bytes, DURABLE__DEFAULT_WINDOW_BYTES),
      .waiting_bytes =
          or_default(o->waiting_bytes, DURABLE__DEFAULT_WAITING_BYTES),
      .max_block_ms =
          (uint32_t)or_default(o->max_block_ms, DURABLE__DEFAULT_MAX_BLOCK_MS),
  };
  durable__queue_init(&w->waiting);
  if ((rc = durable__hub_on_dispose(durable__mesh_reads_hub(mesh),
                                    on_mesh_closing, w)) < 0) {
    free(w);
    return rc;
  }
  uv_timer_init(durable_mesh_loop(mesh), &w->timer);
  w->timer.data = w;
  durable__sched_handle_opened(&mesh->sched);
  *(void **)durable__mesh_state(mesh, &window_key) = w;
  return 0;
}

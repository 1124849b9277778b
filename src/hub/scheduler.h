/*
 * scheduler.h: what runs next on a mesh's loop, and when the mesh may go.
 *
 * The bottom of the hub layer: hub.c, request.c and mesh.c sit on it and it
 * names none of them.  It keeps
 *   - the ready list: what has a turn to run (hubs, through the intrusive
 *     durable__ready_t each embeds), served round robin by an idle handle
 *     that is on only while there is something to run;
 *   - the callbacks owed: a callback due to a caller runs on the next tick
 *     rather than inside the call that made it due (libuv's rule: no
 *     callback before the call returns);
 *   - the count of libuv handles the mesh has open (its idle handle, hub and
 *     request timers, the metrics server's), so that a closing mesh is freed
 *     only once the loop has let go of every one.
 * Two callbacks connect it to its owner: `turn` runs one ready item, and
 * `changed` is told whatever a closing mesh waits for (a hub left, a
 * request was answered, a handle closed): the owner decides what it means.
 */
#ifndef DURABLE_HUB_SCHEDULER_H
#define DURABLE_HUB_SCHEDULER_H

#include "durable.h"
#include "queue.h"

#include <uv.h>

/* A link in the ready list, embedded in what has turns (a hub). */
typedef struct durable__ready_s durable__ready_t;
struct durable__ready_s {
  struct durable__queue link;
  int queued;
};

/* A callback owed, run on the next tick. */
typedef struct durable__later_s durable__later_t;
struct durable__later_s {
  struct durable__queue link;
  durable_status_cb cb;
  int status;
  char *message;
  void *data;
};

typedef struct {
  uv_idle_t idle;
  int idle_on;
  int closed; /* durable__sched_close ran: nothing runs on a later tick */
  struct durable__queue ready; /* durable__ready_t, in turn order */
  struct durable__queue later; /* durable__later_t, in the order owed */
  int handles; /* libuv handles open for the owner, the idle one included */
  void (*turn)(durable__ready_t *ready, void *data);
  void (*changed)(void *data);
  void *data;
} durable__sched_t;

/* Set up `s` on `loop` (its idle handle counts as one open handle). */
void durable__sched_init(durable__sched_t *s, uv_loop_t *loop,
                         void (*turn)(durable__ready_t *ready, void *data),
                         void (*changed)(void *data), void *data);

/* Queue `r` at the back of the ready list.  0 when it was queued already
 * (nothing changes), 1 when it is queued now: the caller holds whatever
 * reference keeps `r` alive until its turn. */
int durable__sched_ready(durable__sched_t *s, durable__ready_t *r);

/* Take the front of the ready list without running it (NULL: empty). */
durable__ready_t *durable__sched_pop(durable__sched_t *s);

/* Run `cb(status, message, data)` on the next tick; after
 * durable__sched_close (the owner is being freed), at once. */
void durable__sched_later(durable__sched_t *s, durable_status_cb cb, int status,
                          const char *message, void *data);

/* Run the callbacks owed now, in the order they were owed. */
void durable__sched_run_later(durable__sched_t *s);

/* The owner opened, or closed, a libuv handle of its own. */
void durable__sched_handle_opened(durable__sched_t *s);
void durable__sched_handle_closed(durable__sched_t *s);

/* Tell the owner (its `changed` callback) that something happened that a
 * closing owner may be waiting for. */
void durable__sched_changed(durable__sched_t *s);

/* The owner is going: from now on a callback owed runs at once; those
 * still owed run now, and the idle handle stops and closes
 * (durable__sched_handle_closed follows).  What is on the ready list stays
 * there: the owner drops it first, with durable__sched_pop. */
void durable__sched_close(durable__sched_t *s);

#endif

/*
 * scheduler.c: see scheduler.h.
 *
 * Each idle tick first runs the callbacks owed, then a bounded number of
 * turns, one per ready item, round robin: a handler never runs inside
 * another handler (a message a handler sends to its own hub waits for the
 * next turn), and I/O keeps flowing between ticks.
 */
#include "scheduler.h"

#include "text.h"

#include <stdlib.h>

/* Turns per idle tick: enough to batch, small enough to let I/O in. */
#define TURNS_PER_TICK 256

static void on_idle(uv_idle_t *idle);

static void wake(durable__sched_t *s) {
  if (!s->idle_on && !s->closed) {
    s->idle_on = 1;
    uv_idle_start(&s->idle, on_idle);
  }
}

static void on_idle(uv_idle_t *idle) {
  durable__sched_t *s = idle->data;
  durable__sched_run_later(s);
  for (int turns = 0;
       turns < TURNS_PER_TICK && !durable__queue_empty(&s->ready); turns++)
    s->turn(durable__sched_pop(s), s->data);
  if (durable__queue_empty(&s->ready) && durable__queue_empty(&s->later) &&
      s->idle_on) {
    s->idle_on = 0;
    uv_idle_stop(&s->idle);
  }
}

void durable__sched_init(durable__sched_t *s, uv_loop_t *loop,
                         void (*turn)(durable__ready_t *ready, void *data),
                         void (*changed)(void *data), void *data) {
  *s = (durable__sched_t){.turn = turn, .changed = changed, .data = data};
  durable__queue_init(&s->ready);
  durable__queue_init(&s->later);
  uv_idle_init(loop, &s->idle);
  s->idle.data = s;
  s->handles = 1;
}

int durable__sched_ready(durable__sched_t *s, durable__ready_t *r) {
  if (r->queued)
    return 0;
  r->queued = 1;
  durable__queue_insert_tail(&s->ready, &r->link);
  wake(s);
  return 1;
}

durable__ready_t *durable__sched_pop(durable__sched_t *s) {
  struct durable__queue *q = durable__queue_pop(&s->ready);
  if (q == NULL)
    return NULL;
  durable__ready_t *r = DURABLE__QUEUE_DATA(q, durable__ready_t, link);
  r->queued = 0;
  return r;
}

void durable__sched_later(durable__sched_t *s, durable_status_cb cb, int status,
                          const char *message, void *data) {
  if (s->closed) { /* the owner is being freed: no later tick */
    cb(status, message, data);
    return;
  }
  durable__later_t *l = calloc(1, sizeof(*l));
  if (l == NULL) { /* no memory to defer it: better now than never */
    cb(DURABLE_ENOMEM, "out of memory", data);
    return;
  }
  l->cb = cb;
  l->status = status;
  l->message = durable__strdup0(message);
  l->data = data;
  durable__queue_insert_tail(&s->later, &l->link);
  wake(s);
}

void durable__sched_run_later(durable__sched_t *s) {
  /* those owed now: what their callbacks owe waits for the next tick */
  struct durable__queue owed, *q;
  durable__queue_move(&s->later, &owed);
  while ((q = durable__queue_pop(&owed)) != NULL) {
    durable__later_t *l = DURABLE__QUEUE_DATA(q, durable__later_t, link);
    l->cb(l->status, l->message, l->data);
    free(l->message);
    free(l);
  }
}

void durable__sched_handle_opened(durable__sched_t *s) {
  s->handles++;
}

void durable__sched_handle_closed(durable__sched_t *s) {
  s->handles--;
  s->changed(s->data);
}

void durable__sched_changed(durable__sched_t *s) {
  s->changed(s->data);
}

static void on_idle_closed(uv_handle_t *handle) {
  durable__sched_handle_closed(handle->data);
}

void durable__sched_close(durable__sched_t *s) {
  /* closed first: a callback that owes another while these run has it run
   * at once, not queued where nothing would run it */
  s->closed = 1;
  uv_idle_stop(&s->idle);
  s->idle_on = 0;
  durable__sched_run_later(s);
  uv_close((uv_handle_t *)&s->idle, on_idle_closed);
}

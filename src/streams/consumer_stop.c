/*
 * consumer_stop.c: how a consumer lets go -- its reader closed, its lease
 * released, its stopper told -- whether durable_consumer_stop stopped it or
 * its hub left.  The rest of the consumer (consumer.c) calls these; they
 * call nothing of it back.
 */
#include "consumer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void stop_done(durable__consumer_t *c);

/* The reader goes, and with it what was taken from it ahead of the turn
 * out: a batch being gathered, the item carried over (all read again from
 * the checkpoint next time). */
void durable__consumer_stop_reading(durable__consumer_t *c) {
  durable__pull_close(c->pull);
  c->pull = NULL;
  durable_watch_close(c->orphan_watch);
  c->orphan_watch = NULL;
  durable__consumer_turn_drop(c);
}

/* ---- leaving ------------------------------------------------------------- */

/* A release that did not go out, or failed: nothing is lost, only time. */
static void say_not_released(durable__consumer_t *c, const char *why) {
  durable__stream_name_t n;
  durable_mesh_log(c->mesh, DURABLE_LOG_WARN,
                   "Durable stream consumer %s could not release %s; the next "
                   "claimant takes it over once this address stops answering "
                   "(%s)",
                   durable__consumer_hub_name(c), durable__consumer_name(c, &n),
                   why);
}

/* The same for a release that could not be sent; one refused because the
 * mesh is closing is not news (every lease of a closing process ends so). */
static void say_not_sent(durable__consumer_t *c, const durable_error_t *err) {
  if (err->code != DURABLE_ESHUTDOWN)
    say_not_released(c, err->message[0] ? err->message : "out of memory");
}

static void on_released(const durable_response_t *res, void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  durable__stream_name_t n;
  const durable__stream_ans_t *ans = durable__stream_answer(res);
  if (res->status == 0)
    durable_mesh_log(
        c->mesh, DURABLE_LOG_DEBUG, "Durable stream consumer %s released %s%s",
        durable__consumer_hub_name(c), durable__consumer_name(c, &n),
        ans && ans->ok ? "" : " (it was not its lease any more)");
  else
    say_not_released(c, res->message);
  if (a->stopped)
    stop_done(c);
  durable_hub_unref(c->hub);
  free(a);
}

void durable__consumer_release(durable__consumer_t *c, int64_t epoch) {
  durable__consumer_ask_t *a = calloc(1, sizeof(*a));
  durable_error_t err = {0};
  if (a == NULL || durable__consumer_ask(c, DURABLE__MSG_RELEASE, epoch, 0,
                                         NULL, on_released, a, &err) < 0) {
    free(a);
    say_not_sent(c, &err);
  }
}

/* ---- stopping (durable_consumer_stop) ------------------------------------ */

static void stop_done(durable__consumer_t *c) {
  if (c->flags & DURABLE__CONSUMER_STOP_REPORTED)
    return;
  c->flags |= DURABLE__CONSUMER_STOP_REPORTED;
  if (c->stop_cb)
    c->stop_cb(0, NULL, c->stop_data);
  durable_hub_unref(c->hub); /* the handle's reference: c may be gone now */
}

static void on_stop_later(int status, const char *message, void *data) {
  (void)status;
  (void)message;
  stop_done(data);
}

/* The lease was granted and is not known lost: consuming, or in the
 * backoff after a failed item (which keeps it, to retry from the
 * checkpoint).  A stop lets it go in either; a release whose epoch has
 * gone meanwhile is refused by the stream hub, harmlessly. */
static int holds_lease(const durable__consumer_t *c) {
  return (durable__consumer_consuming(c) ||
          c->state == DURABLE__CONSUMER_BACKOFF) &&
         c->epoch > 0;
}

/* No item is in flight: stop reading and let go of the lease, if held;
 * the stopper hears once the release is answered. */
void durable__consumer_finish_stop(durable__consumer_t *c) {
  int held = holds_lease(c);
  int claiming = c->state == DURABLE__CONSUMER_CLAIMING;
  c->state = DURABLE__CONSUMER_STOPPED;
  c->gen++; /* retire the timers and answers of the last round */
  durable__consumer_stop_reading(c);
  durable__consumer_close_spare(c);
  if (claiming) { /* on_claim lets go of what it gets, then reports */
    c->flags |= DURABLE__CONSUMER_STOP_AFTER_CLAIM;
    return;
  }
  durable__consumer_ask_t *a = held ? calloc(1, sizeof(*a)) : NULL;
  durable_error_t err = {0};
  if (a != NULL) {
    a->stopped = 1;
    if (durable__consumer_ask(c, DURABLE__MSG_RELEASE, c->epoch, 0, NULL,
                              on_released, a, &err) == 0)
      return;
    free(a);
  }
  if (held)
    say_not_sent(c, &err);
  durable__consumer_stop_later(c);
}

void durable_consumer_stop(durable_consumer_handle_t *handle,
                           durable_status_cb cb, void *data) {
  durable__consumer_t *c = &handle->c;
  if (c->flags & DURABLE__CONSUMER_STOPPING)
    return; /* stopped once already */
  c->flags |= DURABLE__CONSUMER_STOPPING;
  c->stop_cb = cb;
  c->stop_data = data;
  if (c->state == DURABLE__CONSUMER_STOPPED) {
    /* the hub left first (its mesh may be closed and gone): nothing is
     * held, nothing to wait for */
    stop_done(c);
    return;
  }
  if (!(c->flags & DURABLE__CONSUMER_TURN_OUT))
    durable__consumer_finish_stop(c);
  /* else turn_done finishes the stop after the turn out */
}

void durable__consumer_on_dispose(durable_hub_t *hub, void *data) {
  durable__consumer_t *c = data;
  (void)hub;
  durable__consumer_unlink(c);
  int held = holds_lease(c);
  c->state = DURABLE__CONSUMER_STOPPED;
  durable__consumer_stop_reading(c);
  durable__consumer_close_spare(c);
  durable__consumer_turn_clear(c);
  /* the item in flight is done (the quiesce waited for its turn): let go */
  if (held)
    durable__consumer_release(c, c->epoch);
}

void durable__consumer_stop_later(durable__consumer_t *c) {
  durable__sched_later(&c->mesh->sched, on_stop_later, 0, NULL, c);
}

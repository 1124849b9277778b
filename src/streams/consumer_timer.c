/*
 * consumer_timer.c: the timers of a leased consumer (consumer.c): a retry
 * after a backoff (and how long that is), a claim again after reclaim_ms, the
 * end of a takeover's hold, the next look at this process's liveness.
 *
 * Each is a message that the hub posts to itself after a delay
 * (durable_hub_post_after), so that it runs as a turn of the hub like any
 * other; its payload is the consumer's generation when it was armed, and a
 * message of an earlier round is retired (durable__consumer_current_gen).
 * When there is no memory for the hub's timer, the consumer's own spare
 * timer, embedded in it, posts the message instead: a retry is late at
 * worst, never lost (a consumer would stall for good).
 */
#include "consumer.h"

#include <stdio.h>
#include <stdlib.h>

/* The spare timer fired: its message goes into the hub's mailbox as a hub
 * timer's does (durable__hub_post_own), or, still without memory, it fires
 * again soon. */
static void on_spare(uv_timer_t *timer) {
  durable__consumer_t *c = timer->data;
  if (c->state == DURABLE__CONSUMER_STOPPED)
    return;
  if (durable__hub_post_own(c->hub, c->spare_type, c->spare_payload) < 0)
    uv_timer_start(timer, on_spare, DURABLE__TIMER_RETRY_MS, 0);
}

static void on_spare_closed(uv_handle_t *handle) {
  durable__consumer_t *c = handle->data;
  durable_mesh_t *mesh = c->mesh;
  c->flags &= ~DURABLE__CONSUMER_SPARE_OPEN;
  durable_hub_unref(c->hub); /* c may be gone now */
  durable__sched_handle_closed(&mesh->sched);
}

void durable__consumer_close_spare(durable__consumer_t *c) {
  if ((c->flags & DURABLE__CONSUMER_SPARE_OPEN) &&
      !uv_is_closing((uv_handle_t *)&c->spare))
    uv_close((uv_handle_t *)&c->spare, on_spare_closed);
}

uint32_t durable__backoff_ms(int attempt, uint32_t min_ms, uint32_t max_ms) {
  uint64_t delay = min_ms;
  /* doubling stops at the cap, which also keeps it from overflowing */
  for (int i = 0; i < attempt && delay < max_ms; i++)
    delay *= 2;
  return delay > max_ms ? max_ms : (uint32_t)delay;
}

void durable__consumer_arm(durable__consumer_t *c, const char *type,
                           uint32_t ms) {
  char payload[32];
  snprintf(payload, sizeof payload, "%llu", (unsigned long long)c->gen);
  /* refused once leaving */
  if (durable_hub_post_after(c->hub, ms, type, payload, NULL) !=
          DURABLE_ENOMEM ||
      c->state == DURABLE__CONSUMER_STOPPED)
    return;
  /* No memory for the hub's timer: the spare one.  It keeps one message: a
   * newer one replaces it (the gen retires it anyway). */
  if ((c->flags & DURABLE__CONSUMER_SPARE_OPEN) &&
      uv_is_closing((uv_handle_t *)&c->spare))
    return;
  if (!(c->flags & DURABLE__CONSUMER_SPARE_OPEN)) {
    uv_timer_init(durable_mesh_loop(c->mesh), &c->spare);
    c->spare.data = c;
    c->flags |= DURABLE__CONSUMER_SPARE_OPEN;
    durable_hub_ref(c->hub);
    durable__sched_handle_opened(&c->mesh->sched);
  }
  c->spare_type = type;
  snprintf(c->spare_payload, sizeof c->spare_payload, "%s", payload);
  uv_timer_start(&c->spare, on_spare, ms, 0);
}

int durable__consumer_current_gen(const durable__consumer_t *c,
                                  const durable_msg_t *msg) {
  return strtoull(msg->payload, NULL, 10) == c->gen;
}

/*
 * hub.c: a hub's life: its mailbox and turns, its run levels, the quiesce
 * of a recycle, its timers.
 *
 * A hub with something to run is on its mesh's ready list (scheduler.h),
 * which gives it one turn at a time: one answer, else one message.  So a
 * handler never runs inside another handler, and a message a handler sends
 * to its own hub waits for the next turn.
 *
 * This file knows the envelopes a mailbox holds, not what they mean:
 * running a message or an answer, and what becomes of those a hub still
 * holds when it dies (requests answered, posts routed again), are its
 * mesh's messaging (request.c, handed over by mesh.c at open; hub.h).  So
 * the hub layer's files stand on each other in one order: the scheduler,
 * this file, request.c, mesh.c.
 *
 * A recycle moves a hub to Quiescing: new requests are refused with
 * ShuttingDown (their senders ask again), posts wait for the next
 * activation, answers to the hub's own requests are still let in.  When no
 * message is in a handler and no request of its own is pending -- or the
 * quiesce budget runs out, which is logged and counted -- the hub runs its
 * dispose actions, leaves the address table and is dead; posts that waited
 * are routed again, which activates a fresh hub.
 */
#include "hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

durable_hub_t *durable__hub_new(durable_mesh_t *mesh, const char *address,
                                durable_run_level_t level) {
  durable_hub_t *hub = calloc(1, sizeof(*hub));
  if (hub == NULL)
    return NULL;
  hub->mesh = mesh;
  hub->address = strdup(address);
  hub->node_type = strdup("");
  hub->level = level;
  hub->refs = 1; /* the table's */
  hub->incarnation = ++mesh->next_incarnation;
  durable__queue_init(&hub->inbox);
  durable__queue_init(&hub->replies);
  durable__queue_init(&hub->deferred);
  durable__queue_init(&hub->handling);
  durable__queue_init(&hub->pending);
  durable__queue_init(&hub->on_dead);
  durable__queue_init(&hub->timers);
  if (hub->address == NULL || hub->node_type == NULL ||
      durable__map_put(&mesh->hubs, address, hub) < 0) {
    free(hub->address);
    free(hub->node_type);
    free(hub);
    return NULL;
  }
  mesh->stats.active_hubs = mesh->hubs.count;
  return hub;
}

void durable_hub_ref(durable_hub_t *hub) {
  hub->refs++;
}

void durable_hub_unref(durable_hub_t *hub) {
  if (--hub->refs > 0)
    return;
  if (hub->data_free)
    hub->data_free(hub->data);
  while (hub->attached) {
    durable__attach_t *a = hub->attached;
    hub->attached = a->next;
    if (a->free_cb)
      a->free_cb(a->data);
    free(a);
  }
  for (size_t i = 0; i < hub->nhandlers; i++)
    free(hub->handlers[i].msg_type);
  free(hub->handlers);
  free(hub->disposes);
  free(hub->address);
  free(hub->node_type);
  free(hub);
}

const char *durable_hub_address(const durable_hub_t *hub) {
  return hub->address;
}
const char *durable_hub_node_type(const durable_hub_t *hub) {
  return hub->node_type;
}
durable_run_level_t durable_hub_run_level(const durable_hub_t *hub) {
  return hub->level;
}

const char *durable_run_level_name(durable_run_level_t level) {
  switch (level) {
  case DURABLE_HUB_STARTING:
    return "Starting";
  case DURABLE_HUB_STARTED:
    return "Started";
  case DURABLE_HUB_QUIESCING:
    return "Quiescing";
  case DURABLE_HUB_SHUTDOWN:
    return "ShutDown";
  case DURABLE_HUB_DEAD:
    return "Dead";
  }
  return "unknown";
}
durable_mesh_t *durable_hub_mesh(durable_hub_t *hub) {
  return hub->mesh;
}
uint64_t durable_hub_incarnation(const durable_hub_t *hub) {
  return hub->incarnation;
}
void *durable_hub_data(const durable_hub_t *hub) {
  return hub->data;
}

void durable_hub_set_data(durable_hub_t *hub, void *data,
                          void (*free_cb)(void *data)) {
  hub->data = data;
  hub->data_free = free_cb;
}

static void cancel_timers(durable_hub_t *hub);
static void close_quiesce_timer(durable_hub_t *hub);

/* ---- envelopes -------------------------------------------------------------
 */

durable__env_t *durable__env_new(durable__env_kind_t kind, const char *type,
                                 const char *payload, const char *sender,
                                 const char *target) {
  durable__env_t *env = calloc(1, sizeof(*env));
  if (env == NULL)
    return NULL;
  env->kind = kind;
  env->type = durable__strdup0(type);
  env->payload = strdup(payload ? payload : "null");
  env->sender = durable__strdup0(sender);
  env->target = durable__strdup0(target);
  if ((type && !env->type) || !env->payload || (sender && !env->sender) ||
      (target && !env->target)) {
    durable__env_free(env);
    return NULL;
  }
  return env;
}

void durable__body_free(durable__body_t *body) {
  if (body != NULL)
    body->free(body);
}

void durable__env_free(durable__env_t *env) {
  if (env == NULL)
    return;
  durable__body_free(env->body);
  free(env->type);
  free(env->payload);
  free(env->sender);
  free(env->target);
  free(env->message);
  free(env);
}

/* ---- the mailbox and turns ------------------------------------------------
 */

static int has_turn(const durable_hub_t *hub) {
  return !durable__queue_empty(&hub->replies) ||
         (!durable__queue_empty(&hub->inbox) &&
          hub->level >= DURABLE_HUB_STARTED &&
          hub->level <= DURABLE_HUB_QUIESCING);
}

/* Put `hub` on the mesh's ready list when it has a turn to run; the list
 * holds a reference until the turn. */
static void make_ready(durable_hub_t *hub) {
  if (has_turn(hub) && durable__sched_ready(&hub->mesh->sched, &hub->ready))
    durable_hub_ref(hub);
}

/* The first envelope of a mailbox, taken out of it; NULL when empty. */
static durable__env_t *pop(struct durable__queue *mailbox) {
  struct durable__queue *q = durable__queue_pop(mailbox);
  return q ? DURABLE__QUEUE_DATA(q, durable__env_t, link) : NULL;
}

void durable__hub_enqueue(durable_hub_t *hub, durable__env_t *env) {
  if (env->kind == ENV_REPLY)
    durable__queue_insert_tail(&hub->replies, &env->link);
  else
    durable__queue_insert_tail(&hub->inbox, &env->link);
  make_ready(hub);
}

/* One turn of `hub`: an answer first (it unblocks work), else a message. */
static void run_turn(durable_hub_t *hub) {
  durable__env_t *env = pop(&hub->replies);
  if (env) {
    hub->mesh->messaging->run_reply(hub, env);
    durable__env_free(env);
    return;
  }
  if (hub->level < DURABLE_HUB_STARTED || hub->level > DURABLE_HUB_QUIESCING)
    return;
  env = pop(&hub->inbox);
  if (env)
    hub->mesh->messaging->run_message(hub, env);
}

void durable__hub_turn(durable__ready_t *ready, void *data) {
  (void)data;
  durable_hub_t *hub = durable__hub_of_ready(ready);
  run_turn(hub);
  make_ready(hub); /* more to do: back of the line */
  durable_hub_unref(hub);
}

/* ---- activation
 * ---------------------------------------------------------------- */

static void run_waiters(struct durable__queue *list, int status,
                        const char *message) {
  /* those waiting now: a callback that waits again waits for the next time */
  struct durable__queue now, *q;
  durable__queue_move(list, &now);
  while ((q = durable__queue_pop(&now)) != NULL) {
    durable__waiter_t *w = DURABLE__QUEUE_DATA(q, durable__waiter_t, link);
    w->cb(status, message, w->data);
    free(w);
  }
}

static void add_waiter(struct durable__queue *list, durable_status_cb cb,
                       void *data) {
  durable__waiter_t *w = calloc(1, sizeof(*w));
  if (w == NULL) { /* cannot wait: say so now rather than never */
    cb(DURABLE_ENOMEM, "out of memory", data);
    return;
  }
  w->cb = cb;
  w->data = data;
  /* at the back, so waiters run in the order they asked */
  durable__queue_insert_tail(list, &w->link);
}

void durable__hub_on_dead(durable_hub_t *hub, durable_status_cb cb,
                          void *data) {
  add_waiter(&hub->on_dead, cb, data);
}

void durable__hub_started(durable_hub_t *hub) {
  hub->level = DURABLE_HUB_STARTED;
  make_ready(hub);
  /* a quiesce may end the hub: keep it through the call */
  durable_hub_ref(hub);
  if (hub->recycle_requested) /* asked for while it was starting */
    durable__hub_start_quiesce(hub);
  durable_hub_unref(hub);
}

/* Take the hub out of the address table (if it is still there) and mark it
 * dead; the table's reference is dropped by the caller. */
static void leave_table(durable_hub_t *hub) {
  durable_mesh_t *mesh = hub->mesh;
  if (durable__map_get(&mesh->hubs, hub->address) == hub) {
    durable__map_del(&mesh->hubs, hub->address);
    mesh->stats.active_hubs = mesh->hubs.count;
    durable__sched_changed(&mesh->sched); /* a closing mesh counts hubs */
  }
}

void durable__hub_fail_activation(durable_hub_t *hub, int status,
                                  const char *message) {
  durable_mesh_t *mesh = hub->mesh;
  hub->level = DURABLE_HUB_DEAD;
  /* what its init steps started ends with it */
  mesh->messaging->fail_pending(
      hub, DURABLE_ESHUTDOWN,
      "the hub's activation failed before the answer came");
  cancel_timers(hub);
  close_quiesce_timer(hub);
  leave_table(hub);
  durable__env_t *env;
  while ((env = pop(&hub->inbox)) != NULL) {
    if (env->kind == ENV_REQUEST)
      mesh->messaging->answer(mesh, env->request_id, status, NULL, NULL,
                              message);
    else
      durable_mesh_log(mesh, DURABLE_LOG_DEBUG,
                       "[Hubs] dropped '%s' for '%s': %s", env->type,
                       hub->address, message);
    durable__env_free(env);
  }
  run_waiters(&hub->on_dead, 0, NULL);
  durable_hub_unref(hub);
}

/* ---- quiesce and shutdown
 * ---------------------------------------------------- */

static void on_timer_closed(uv_handle_t *handle) {
  durable_mesh_t *mesh = handle->data;
  free(handle);
  durable__sched_handle_closed(&mesh->sched);
}

static void close_quiesce_timer(durable_hub_t *hub) {
  if (hub->quiesce_timer == NULL)
    return;
  hub->quiesce_timer->data = hub->mesh;
  uv_close((uv_handle_t *)hub->quiesce_timer, on_timer_closed);
  hub->quiesce_timer = NULL;
}

static void finish(durable_hub_t *hub) {
  durable_mesh_t *mesh = hub->mesh;
  hub->level = DURABLE_HUB_SHUTDOWN;
  close_quiesce_timer(hub);
  mesh->messaging->fail_pending(hub, DURABLE_ESHUTDOWN,
                                "the hub left before the answer came");
  cancel_timers(hub);
  if (hub->type)
    for (size_t i = 0; i < hub->type->ndisposes; i++)
      hub->type->disposes[i].dispose(hub, hub->type->disposes[i].data);
  for (size_t i = 0; i < hub->ndisposes; i++)
    hub->disposes[i].dispose(hub, hub->disposes[i].data);
  /* What is still queued is treated like anything that arrived while
   * quiescing (requests refused, posts deferred): routed while the hub is
   * still in the table, so it cannot reach a fresh activation yet. */
  durable__env_t *env;
  while ((env = pop(&hub->inbox)) != NULL)
    mesh->messaging->route(mesh, env);
  leave_table(hub);
  hub->level = DURABLE_HUB_DEAD;
  if (hub->recycling)
    mesh->stats.recycles++;
  while ((env = pop(&hub->deferred)) != NULL)
    mesh->messaging->route(mesh, env);
  while ((env = pop(&hub->replies)) != NULL)
    durable__env_free(env);
  run_waiters(&hub->on_dead, 0, NULL);
  durable_hub_unref(hub); /* the table's reference */
}

static void finish_turn(int status, const char *message, void *data) {
  durable_hub_t *hub = data;
  (void)status;
  (void)message;
  if (hub->level == DURABLE_HUB_QUIESCING)
    finish(hub);
  durable_hub_unref(hub);
}

/* The shutdown (pending callbacks, dispose actions) runs as a turn of the
 * dispatcher, never inside the call that made it due -- a reply sent from a
 * handler, a raw timer callback, durable_mesh_close. */
static void schedule_finish(durable_hub_t *hub) {
  if (hub->finishing)
    return;
  hub->finishing = 1;
  durable_hub_ref(hub);
  durable__sched_later(&hub->mesh->sched, finish_turn, 0, NULL, hub);
}

void durable__hub_check_quiesced(durable_hub_t *hub) {
  if (hub->level == DURABLE_HUB_QUIESCING && hub->in_flight == 0 &&
      hub->npending == 0)
    schedule_finish(hub);
}

static void on_quiesce_budget(uv_timer_t *timer) {
  durable_hub_t *hub = timer->data;
  durable_mesh_t *mesh = hub->mesh;
  if (hub->finishing)
    return; /* it quiesced in time after all */
  mesh->stats.quiesce_timeouts++;
  if (hub->level == DURABLE_HUB_STARTING) {
    char why[DURABLE_PATH_MAX + 128];
    snprintf(why, sizeof why,
             "the activation of '%s' did not finish within the quiesce budget "
             "of %u ms",
             hub->address, mesh->quiesce_budget_ms);
    durable_mesh_log(mesh, DURABLE_LOG_WARN, "[Hubs] %s; leaving anyway", why);
    durable__hub_fail_activation(hub, DURABLE_ESHUTDOWN, why);
    return;
  }
  durable_mesh_log(mesh, DURABLE_LOG_WARN,
                   "[Hubs] Quiesce budget of %u ms ran out for '%s' with %zu "
                   "message(s) in handlers and %zu request(s) pending; "
                   "leaving anyway",
                   mesh->quiesce_budget_ms, hub->address, hub->in_flight,
                   hub->npending);
  mesh->messaging->abandon_replies(hub);
  schedule_finish(hub);
}

static void arm_budget(durable_hub_t *hub) {
  durable_mesh_t *mesh = hub->mesh;
  if (hub->quiesce_timer)
    return; /* one budget from the first ask */
  hub->quiesce_timer = malloc(sizeof(uv_timer_t));
  if (hub->quiesce_timer) {
    uv_timer_init(mesh->loop, hub->quiesce_timer);
    durable__sched_handle_opened(&mesh->sched);
    hub->quiesce_timer->data = hub;
    uv_timer_start(hub->quiesce_timer, on_quiesce_budget,
                   mesh->quiesce_budget_ms, 0);
  }
}

void durable__hub_start_quiesce(durable_hub_t *hub) {
  if (hub->level == DURABLE_HUB_STARTING) {
    /* the recycle begins once it is started; the budget counts from now,
     * so an activation that never finishes cannot hold a close forever */
    hub->recycle_requested = 1;
    arm_budget(hub);
    return;
  }
  if (hub->level != DURABLE_HUB_STARTED)
    return;
  hub->level = DURABLE_HUB_QUIESCING;
  hub->recycling = 1;
  arm_budget(hub);
  make_ready(hub); /* queued requests get their refusal now */
  durable__hub_check_quiesced(hub);
}

/* ---- timers
 * ------------------------------------------------------------------------ */

static void on_hub_timer_closed(uv_handle_t *handle) {
  durable__hub_timer_t *t = handle->data;
  durable_mesh_t *mesh = t->hub->mesh;
  durable_hub_unref(t->hub);
  free(t->type);
  free(t->payload);
  free(t);
  durable__sched_handle_closed(&mesh->sched);
}

static void drop_timer(durable__hub_timer_t *t) {
  durable__queue_remove(&t->link);
  uv_timer_stop(&t->timer);
  uv_close((uv_handle_t *)&t->timer, on_hub_timer_closed);
}

static void cancel_timers(durable_hub_t *hub) {
  while (!durable__queue_empty(&hub->timers))
    drop_timer(DURABLE__QUEUE_DATA(durable__queue_head(&hub->timers),
                                   durable__hub_timer_t, link));
}

int durable__hub_post_own(durable_hub_t *hub, const char *type,
                          const char *payload) {
  /* the timer only turns into a message; the handler runs in a turn.  A
   * timer armed before a recycle still fires while the hub quiesces: a
   * handler in flight may be waiting for it; a dead hub gets nothing */
  if (hub->level > DURABLE_HUB_QUIESCING)
    return 0;
  durable__env_t *env =
      durable__env_new(ENV_POST, type, payload, hub->address, hub->address);
  if (env == NULL)
    return DURABLE_ENOMEM;
  env->own_timer = 1;
  durable__hub_enqueue(hub, env);
  return 0;
}

static void on_hub_timer(uv_timer_t *timer) {
  durable__hub_timer_t *t = timer->data;
  int rc = durable__hub_post_own(t->hub, t->type, t->payload);
  if (t->every) {
    /* no memory for this one: again soon, then every period as before */
    if (rc < 0)
      uv_timer_start(&t->timer, on_hub_timer, DURABLE__TIMER_RETRY_MS,
                     t->every);
    return;
  }
  if (rc < 0) {
    /* no memory for its message: it fires again soon, rather than never
     * (a consumer's retry is such a message) */
    uv_timer_start(&t->timer, on_hub_timer, DURABLE__TIMER_RETRY_MS, 0);
    return;
  }
  drop_timer(t);
}

static int start_timer(durable_hub_t *hub, uint32_t ms, uint32_t every,
                       const char *type, const char *payload,
                       durable_error_t *err) {
  if (type == NULL || *type == '\0')
    return durable__error(err, DURABLE_EINVAL, "a timer needs a message type");
  if (hub->level >= DURABLE_HUB_QUIESCING)
    return durable__error(err, DURABLE_ESHUTDOWN,
                          "hub '%s' is shutting down and starts no timer",
                          hub->address);
  durable__hub_timer_t *t = calloc(1, sizeof(*t));
  if (t == NULL || (t->type = strdup(type)) == NULL ||
      (t->payload = strdup(payload ? payload : "null")) == NULL) {
    if (t)
      free(t->type);
    free(t);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  t->hub = hub;
  t->every = every;
  durable_hub_ref(hub);
  uv_timer_init(hub->mesh->loop, &t->timer);
  durable__sched_handle_opened(&hub->mesh->sched);
  t->timer.data = t;
  durable__queue_insert_head(&hub->timers, &t->link);
  uv_timer_start(&t->timer, on_hub_timer, ms, every);
  return 0;
}

int durable_hub_post_after(durable_hub_t *hub, uint32_t ms, const char *type,
                           const char *payload, durable_error_t *err) {
  return start_timer(hub, ms, 0, type, payload, err);
}

int durable__hub_post_every(durable_hub_t *hub, uint32_t ms, const char *type,
                            const char *payload, durable_error_t *err) {
  if (ms == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "a repeating timer needs a period above 0 ms");
  return start_timer(hub, ms, ms, type, payload, err);
}

/* ---- per-activation additions
 * ----------------------------------------------------- */

int durable__hub_on(durable_hub_t *hub, const char *msg_type,
                    durable_handler_cb cb, void *data, durable_error_t *err) {
  for (size_t i = 0; i < hub->nhandlers; i++)
    if (strcmp(hub->handlers[i].msg_type, msg_type) == 0)
      return durable__error(err, DURABLE_EEXIST,
                            "hub '%s' already handles '%s'", hub->address,
                            msg_type);
  durable__handler_t *h =
      realloc(hub->handlers, (hub->nhandlers + 1) * sizeof(*h));
  if (h == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  hub->handlers = h;
  if ((h[hub->nhandlers].msg_type = strdup(msg_type)) == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  h[hub->nhandlers].cb = cb;
  h[hub->nhandlers].data = data;
  hub->nhandlers++;
  return 0;
}

void durable__hub_off(durable_hub_t *hub, const char *msg_type, void *data) {
  for (size_t i = 0; i < hub->nhandlers; i++) {
    if (strcmp(hub->handlers[i].msg_type, msg_type) != 0 ||
        hub->handlers[i].data != data)
      continue;
    free(hub->handlers[i].msg_type);
    memmove(&hub->handlers[i], &hub->handlers[i + 1],
            (hub->nhandlers - i - 1) * sizeof(*hub->handlers));
    hub->nhandlers--;
    return;
  }
}

void *durable__hub_handler_data(const durable_hub_t *hub, const char *msg_type,
                                durable_handler_cb cb) {
  for (size_t i = 0; i < hub->nhandlers; i++)
    if (strcmp(hub->handlers[i].msg_type, msg_type) == 0)
      return hub->handlers[i].cb == cb ? hub->handlers[i].data : NULL;
  return NULL;
}

int durable__hub_on_dispose(durable_hub_t *hub, durable_dispose_cb cb,
                            void *data) {
  durable__step_t *d =
      realloc(hub->disposes, (hub->ndisposes + 1) * sizeof(*d));
  if (d == NULL)
    return DURABLE_ENOMEM;
  d[hub->ndisposes].dispose = cb;
  d[hub->ndisposes].init = NULL;
  d[hub->ndisposes].data = data;
  hub->disposes = d;
  hub->ndisposes++;
  return 0;
}

int durable__hub_attach(durable_hub_t *hub, const void *key, void *data,
                        void (*free_cb)(void *data)) {
  durable__attach_t *a = calloc(1, sizeof(*a));
  if (a == NULL)
    return DURABLE_ENOMEM;
  a->key = key;
  a->data = data;
  a->free_cb = free_cb;
  a->next = hub->attached;
  hub->attached = a;
  return 0;
}

void *durable__hub_attached(const durable_hub_t *hub, const void *key) {
  for (durable__attach_t *a = hub->attached; a; a = a->next)
    if (a->key == key)
      return a->data;
  return NULL;
}

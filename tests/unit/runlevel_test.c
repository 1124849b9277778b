/*
 * runlevel_test.c: run levels, recycle and quiesce, timers, the
 * read-issuing hub and mesh reads.
 *
 * What is pinned: a recycle waits for the hub's work in flight (a message
 * in a handler, a request of its own) when it finishes inside the quiesce
 * budget, and that work is answered; while Quiescing the hub refuses new
 * requests (DURABLE_ESHUTDOWN), starts none of its own, still admits the
 * answers it waits for, and keeps posts for its next activation; the next
 * message reaches a fresh activation; a budget that runs out is logged,
 * counted, and the hub dies anyway; dispose steps run; hub timers post to
 * their hub and end with the activation; the read-issuing hub outlives
 * recycles and cannot be recycled; a mesh read reports Present / Absent,
 * and one that meets ShuttingDown re-probes exactly once; closing the mesh
 * with hubs active and requests pending closes clean, and a callback owed
 * by the last hub to leave still runs while the mesh has its store.
 *
 * Each test opens a mesh on its own loop over "sqlite::memory:" and ends by
 * closing it and asserting the loop closes with nothing left on it.
 */
#include <durable_internal.h>

#include "check.h"
#include "hub.h" /* the close-order case reaches the scheduler (src/hub) */
#include "mesh_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixture (tests/support/mesh_fixture.h) --------------------------------
 */

static void fx_open_with(uint32_t quiesce_budget_ms) {
  fx_open_options(
      (durable_mesh_options_t){.quiesce_budget_ms = quiesce_budget_ms});
}

/* A recycle's outcome. */
typedef struct {
  int calls;
  int status;
  int order;
} done_t;

static void on_done(int status, const char *message, void *data) {
  (void)message;
  done_t *d = data;
  d->calls++;
  d->status = status;
  d->order = ++events;
}

static int done_set(void *arg) {
  return ((done_t *)arg)->calls > 0;
}

static void recycle(const char *address, done_t *d) {
  durable_error_t err = {0};
  int rc = durable_mesh_recycle(fx.mesh, address, on_done, d, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
}

static void wait_done(done_t *d, uint64_t ms) {
  CHECK(check_run_until_fn(&fx.loop, done_set, d, ms));
  CHECK_EQ_INT(d->calls, 1);
  CHECK_EQ_CODE(d->status, 0);
}

/* ---- the "Life" NodeType used by most tests
 * ---------------------------------- *
 *
 *   init        counts activations of the type (inits)
 *   dispose x2  record their order and the run level they see
 *   "who"       answers {"inc":INCARNATION}
 *   "slow"      keeps its reply and finishes it after slow_ms (a libuv timer)
 *   "hold"      keeps its reply until the test finishes it (held)
 *   "note"      a post: records the incarnation that handled it
 *   "ask"       sends "slow" to Space/other, answers its own message at once
 *   "arm"       arms a hub timer of `payload` ms posting "tick"
 *   "tick"      counts
 */
static int inits, disposes, dispose_order_ok, dispose_level_ok;
static int slow_ms = 150, slow_entered, slow_finished;
static durable_reply_t *held[4];
static int nheld;
static uint64_t note_inc[8];
static int notes;
static int ticks, tick_ok;
static uint64_t tick_inc;
static call_t ask_inner;                    /* X's own request to Space/other */
static durable_run_level_t ask_inner_level; /* X's level when it was answered */
static int recycle_self_in_init;

static void reset(void) {
  events = inits = disposes = dispose_order_ok = dispose_level_ok = 0;
  slow_ms = 150;
  slow_entered = slow_finished = 0;
  memset(held, 0, sizeof held);
  nheld = notes = ticks = tick_ok = 0;
  tick_inc = 0;
  memset(&ask_inner, 0, sizeof ask_inner);
  ask_inner_level = 0;
  recycle_self_in_init = 0;
}

static void life_init(durable_hub_t *hub, durable_reply_t *done, void *data) {
  (void)data;
  inits++;
  if (recycle_self_in_init) {
    /* a recycle asked while Starting takes effect once Started */
    recycle_self_in_init = 0;
    durable_error_t err = {0};
    CHECK_OK(durable_mesh_recycle(durable_hub_mesh(hub),
                                  durable_hub_address(hub), NULL, NULL, &err));
  }
  durable_reply_ok(done, NULL);
}

static void life_dispose1(durable_hub_t *hub, void *data) {
  (void)data;
  disposes++;
  dispose_order_ok = 1;
  dispose_level_ok = durable_hub_run_level(hub) == DURABLE_HUB_SHUTDOWN;
}

static void life_dispose2(durable_hub_t *hub, void *data) {
  (void)hub;
  (void)data;
  CHECK_EQ_INT(dispose_order_ok, 1); /* the first ran first */
  dispose_order_ok = 2;
}

static void who_handler(durable_hub_t *hub, const durable_msg_t *msg,
                        durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  char out[64];
  snprintf(out, sizeof out, "{\"inc\":%llu}",
           (unsigned long long)durable_hub_incarnation(hub));
  durable_reply_ok(reply, out);
}

typedef struct {
  uv_timer_t timer;
  durable_reply_t *reply;
} later_t;

static void later_closed(uv_handle_t *h) {
  free(h->data);
}

static void later_fire(uv_timer_t *timer) {
  later_t *l = timer->data;
  slow_finished = ++events;
  durable_reply_ok(l->reply, "\"slow done\"");
  uv_close((uv_handle_t *)&l->timer, later_closed);
}

static void slow_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  later_t *l = calloc(1, sizeof *l);
  CHECK(l != NULL);
  l->reply = reply;
  uv_timer_init(durable_mesh_loop(durable_hub_mesh(hub)), &l->timer);
  l->timer.data = l;
  uv_timer_start(&l->timer, later_fire, (uint64_t)slow_ms, 0);
  slow_entered++;
}

static void hold_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)msg;
  (void)data;
  CHECK_LT_INT(nheld, 4);
  held[nheld++] = reply;
}

static void note_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  CHECK_LT_INT(notes, 8);
  note_inc[notes++] = durable_hub_incarnation(hub);
  durable_reply_ok(reply, NULL);
}

static void on_ask_inner(const durable_response_t *res, void *data) {
  ask_inner_level =
      durable_hub_run_level(durable_mesh_find(fx.mesh, "Space/x"));
  on_response(res, data);
}

static void ask_handler(durable_hub_t *hub, const durable_msg_t *msg,
                        durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  durable_error_t err = {0};
  int rc = durable_hub_request(hub, "Space/other", "slow", NULL, 5000,
                               on_ask_inner, &ask_inner, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  durable_reply_ok(reply, NULL);
}

static void arm_handler(durable_hub_t *hub, const durable_msg_t *msg,
                        durable_reply_t *reply, void *data) {
  (void)data;
  durable_error_t err = {0};
  int rc = durable_hub_post_after(hub, (uint32_t)atoi(msg->payload), "tick",
                                  "{\"t\":1}", &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  durable_reply_ok(reply, NULL);
}

/* "every" PAYLOAD: a repeating timer of the hub's own, every PAYLOAD ms */
static void every_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)data;
  durable_error_t err = {0};
  int rc = durable__hub_post_every(hub, (uint32_t)atoi(msg->payload), "tick",
                                   "{\"t\":1}", &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  durable_reply_ok(reply, NULL);
}

static void tick_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)data;
  ticks++;
  tick_inc = durable_hub_incarnation(hub);
  tick_ok = strcmp(msg->sender, durable_hub_address(hub)) == 0 &&
            msg->request_id == 0 && strcmp(msg->payload, "{\"t\":1}") == 0;
  durable_reply_ok(reply, NULL);
}

static void configure_life(void) {
  durable_error_t err = {0};
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Life");
  CHECK(t != NULL);
  CHECK_OK(durable_node_type_on_init(t, life_init, NULL));
  CHECK_OK(durable_node_type_on_dispose(t, life_dispose1, NULL));
  CHECK_OK(durable_node_type_on_dispose(t, life_dispose2, NULL));
  CHECK_OK(durable_node_type_on(t, "who", who_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "slow", slow_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "hold", hold_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "note", note_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "ask", ask_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "arm", arm_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "every", every_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "tick", tick_handler, NULL, &err));
  fx_put("Space/x", "Life");
  fx_put("Space/other", "Life");
}

static uint64_t who(const char *address) {
  call_t c = ask(address, "who", NULL);
  CHECK_EQ_CODE(c.status, 0);
  const char *p = strstr(c.payload, "\"inc\":");
  CHECK(p != NULL);
  return strtoull(p + 6, NULL, 10);
}

static durable_run_level_t level_of(const char *address) {
  durable_hub_t *hub = durable_mesh_find(fx.mesh, address);
  CHECK_MSG(hub != NULL, "no active hub at '%s'", address);
  return durable_hub_run_level(hub);
}

/* ---- recycle waits
 * --------------------------------------------------------------- */

static void test_recycle_waits_for_handler(void) {
  fx_open();
  reset();
  configure_life();
  call_t slow = {0};
  request(fx.client, "Space/x", "slow", NULL, &slow);
  CHECK(check_run_until(&fx.loop, &slow_entered, 2000));
  CHECK_EQ_INT(slow_finished, 0); /* in the handler */
  CHECK_EQ_INT(level_of("Space/x"), DURABLE_HUB_STARTED);
  done_t d = {0};
  recycle("Space/x", &d);
  CHECK_EQ_INT(level_of("Space/x"), DURABLE_HUB_QUIESCING);
  CHECK_EQ_INT(d.calls, 0);
  wait_done(&d, 2000);
  CHECK_GT_INT(slow_finished, 0);
  CHECK_LT_INT(slow_finished, d.order); /* dead only after the handler ended */
  wait_call(&slow);
  CHECK_EQ_CODE(slow.status, 0); /* and its request was answered */
  CHECK_EQ_STR(slow.payload, "\"slow done\"");
  CHECK(durable_mesh_find(fx.mesh, "Space/x") == NULL);
  durable_mesh_stats_t st = stats();
  CHECK_EQ_INT(st.recycles, 1);
  CHECK_EQ_INT(st.quiesce_timeouts, 0);
  CHECK_EQ_INT(disposes, 1);
  fx_close();
}

/* While Quiescing: new requests to it refused, its own new requests refused,
 * the answer it waits for admitted. */
static void test_quiescing_refuses_admits_replies(void) {
  fx_open();
  reset();
  configure_life();
  call_t c = ask("Space/x", "ask", NULL); /* X now waits for Space/other */
  CHECK_EQ_CODE(c.status, 0);
  CHECK_EQ_INT(ask_inner.calls, 0);
  durable_hub_t *x = durable_mesh_find(fx.mesh, "Space/x");
  CHECK(x != NULL);
  durable_hub_ref(x);
  done_t d = {0};
  recycle("Space/x", &d);
  CHECK_EQ_INT(durable_hub_run_level(x), DURABLE_HUB_QUIESCING);

  /* a new request to X: ShuttingDown, ask again */
  call_t refused = ask("Space/x", "who", NULL);
  CHECK_EQ_CODE(refused.status, DURABLE_ESHUTDOWN);
  CHECK_CONTAINS(refused.message, "Space/x");
  CHECK_EQ_INT(d.calls, 0);

  /* X starts nothing new: requests, posts, timers */
  durable_error_t err = {0};
  call_t never = {0};
  CHECK_EQ_CODE(durable_hub_request(x, "Space/other", "who", NULL, 0,
                                    on_response, &never, &err),
                DURABLE_ESHUTDOWN);
  CHECK_EQ_CODE(err.code, DURABLE_ESHUTDOWN);
  CHECK_CONTAINS(err.message, "Space/x");
  CHECK_EQ_CODE(durable_hub_post(x, "Space/other", "note", NULL, &err),
                DURABLE_ESHUTDOWN);
  CHECK_EQ_CODE(durable_hub_post_after(x, 10, "tick", NULL, &err),
                DURABLE_ESHUTDOWN);

  /* the read-issuing hub sends on its behalf */
  call_t on_behalf = {0};
  request(durable__mesh_reads_hub(fx.mesh), "Space/other", "who", NULL,
          &on_behalf);
  wait_call(&on_behalf);
  CHECK_EQ_CODE(on_behalf.status, 0);

  /* the answer X waits for is let in, then X leaves */
  wait_done(&d, 2000);
  CHECK_EQ_INT(ask_inner.calls, 1);
  CHECK_EQ_CODE(ask_inner.status, 0);
  CHECK_EQ_STR(ask_inner.payload, "\"slow done\"");
  CHECK_EQ_INT(ask_inner_level, DURABLE_HUB_QUIESCING);
  CHECK_LT_INT(ask_inner.order, d.order);
  CHECK_EQ_INT(durable_hub_run_level(x), DURABLE_HUB_DEAD);
  durable_hub_unref(x);
  CHECK_EQ_INT(never.calls, 0);
  CHECK_EQ_INT(notes, 0);
  CHECK_EQ_INT(stats().quiesce_timeouts, 0);
  fx_close();
}

static void test_fresh_activation_after_recycle(void) {
  fx_open();
  reset();
  configure_life();
  uint64_t first = who("Space/x");
  CHECK_EQ_INT(inits, 1);
  durable_hub_t *old = durable_mesh_find(fx.mesh, "Space/x");
  durable_hub_ref(old);
  done_t d = {0};
  recycle("Space/x", &d);
  wait_done(&d, 2000);
  CHECK_EQ_INT(durable_hub_run_level(old), DURABLE_HUB_DEAD);
  CHECK_EQ_STR(durable_hub_address(old), "Space/x"); /* readable while held */
  CHECK(durable_mesh_find(fx.mesh, "Space/x") == NULL);
  uint64_t second = who("Space/x");
  CHECK_NE_INT(first, second);
  CHECK_EQ_INT(inits, 2);
  CHECK_EQ_INT(durable_hub_incarnation(durable_mesh_find(fx.mesh, "Space/x")),
               second);
  durable_hub_unref(old);
  durable_mesh_stats_t st = stats();
  CHECK_EQ_INT(st.activations, 2);
  CHECK_EQ_INT(st.recycles, 1);
  /* recycling an address with no active hub: done, later */
  done_t none = {0};
  recycle("Space/never", &none);
  CHECK_EQ_INT(none.calls, 0);
  wait_done(&none, 1000);
  fx_close();
}

static void test_post_while_quiescing_reaches_next(void) {
  fx_open();
  reset();
  configure_life();
  uint64_t first = who("Space/x");
  call_t slow = {0};
  request(fx.client, "Space/x", "slow", NULL, &slow);
  CHECK(check_run_until(&fx.loop, &slow_entered, 2000));
  done_t d = {0};
  recycle("Space/x", &d);
  post(fx.client, "Space/x", "note", NULL);
  post(fx.client, "Space/x", "note", NULL);
  check_run_for(&fx.loop, 30);
  CHECK_EQ_INT(notes, 0); /* not on the leaving activation */
  wait_done(&d, 2000);
  for (int i = 0; i < 100 && notes < 2; i++)
    check_run_for(&fx.loop, 10);
  CHECK_EQ_INT(notes, 2);
  CHECK_NE_INT(note_inc[0], first);
  CHECK_EQ_INT(note_inc[1], note_inc[0]);
  CHECK_EQ_INT(inits, 2);
  wait_call(&slow);
  CHECK_EQ_CODE(slow.status, 0);
  fx_close();
}

/* ---- the budget runs out
 * -------------------------------------------------------- */

static void test_budget_runs_out(void) {
  fx_open_with(100);
  reset();
  configure_life();
  call_t h = {0};
  request(fx.client, "Space/x", "hold", NULL, &h);
  CHECK(check_run_until(&fx.loop, &nheld, 2000));
  uint64_t t0 = uv_now(&fx.loop);
  done_t d = {0};
  recycle("Space/x", &d);
  wait_done(&d, 2000);
  CHECK_GE_INT(uv_now(&fx.loop) - t0, 100);
  CHECK_CONTAINS(fx.log, "Quiesce budget of 100 ms ran out for 'Space/x'");
  durable_mesh_stats_t st = stats();
  CHECK_EQ_INT(st.quiesce_timeouts, 1);
  CHECK_EQ_INT(st.recycles, 1);
  CHECK_EQ_INT(disposes, 1); /* it still died properly */
  CHECK_EQ_INT(dispose_order_ok, 2);
  CHECK(durable_mesh_find(fx.mesh, "Space/x") == NULL);
  /* the request still in its handler was answered ShuttingDown when the
   * budget ran out (ask again), not left to its own timeout */
  wait_call(&h);
  CHECK_EQ_CODE(h.status, DURABLE_ESHUTDOWN);
  CHECK_CONTAINS(h.message, "left before it answered");
  /* the held reply may still be finished: it is dropped, the sender heard
   * exactly once */
  durable_reply_ok(held[0], NULL);
  held[0] = NULL;
  check_run_for(&fx.loop, 20);
  CHECK_EQ_INT(h.calls, 1);
  /* the address lives on in a fresh activation */
  CHECK_EQ_CODE(ask("Space/x", "who", NULL).status, 0);
  CHECK_EQ_INT(inits, 2);
  CHECK_EQ_INT(stats().quiesce_timeouts, 1);
  fx_close();
}

/* ---- dispose steps
 * ------------------------------------------------------------- */

static void test_dispose_steps(void) {
  fx_open();
  reset();
  configure_life();
  who("Space/x");
  CHECK_EQ_INT(disposes, 0);
  done_t d = {0};
  recycle("Space/x", &d);
  wait_done(&d, 2000);
  CHECK_EQ_INT(disposes, 1);
  CHECK_EQ_INT(dispose_order_ok, 2); /* both, in order */
  CHECK_EQ_INT(dispose_level_ok, 1); /* at ShutDown */
  /* a plain hub has none; a closing mesh disposes what is active */
  who("Space/x");
  who("Space/other");
  durable_mesh_close(fx.mesh, on_closed, &fx.closed);
  CHECK(check_run_until(&fx.loop, &fx.closed, 10000));
  CHECK_EQ_INT(disposes, 3);
  CHECK_EQ_INT(fx.client_freed, 1);
  CHECK_LOOP_CLOSES(&fx.loop);
}

/* ---- hub timers
 * ---------------------------------------------------------------- */

static void test_hub_timers(void) {
  fx_open();
  reset();
  configure_life();
  uint64_t inc = who("Space/x");
  CHECK_EQ_CODE(ask("Space/x", "arm", "30").status, 0);
  CHECK_EQ_INT(ticks, 0); /* not before it is due */
  CHECK(check_run_until(&fx.loop, &ticks, 2000));
  CHECK_EQ_INT(ticks, 1);
  CHECK_EQ_INT(tick_ok, 1); /* from the hub itself, a post, its payload */
  CHECK_EQ_INT(tick_inc, inc);
  check_run_for(&fx.loop, 60);
  CHECK_EQ_INT(ticks, 1); /* once */

  /* a timer ends with its activation: it neither ticks on the next one
   * nor activates the address again */
  CHECK_EQ_CODE(ask("Space/x", "arm", "150").status, 0);
  done_t d = {0};
  recycle("Space/x", &d);
  wait_done(&d, 2000);
  uint64_t activations = stats().activations;
  check_run_for(&fx.loop, 250);
  CHECK_EQ_INT(ticks, 1);
  CHECK_EQ_INT(stats().activations, activations);
  CHECK(durable_mesh_find(fx.mesh, "Space/x") == NULL);

  /* misuse */
  durable_error_t err = {0};
  CHECK_EQ_CODE(durable_hub_post_after(fx.client, 10, "", NULL, &err),
                DURABLE_EINVAL);
  /* a client hub's timer posts to it (no handler: logged, no crash) */
  CHECK_OK(durable_hub_post_after(fx.client, 10, "tick", NULL, &err));
  check_run_for(&fx.loop, 40);
  CHECK_EQ_INT(ticks, 1);
  /* a timer pending at close ends with its hub: it does not hold the
   * loop until it is due */
  CHECK_EQ_CODE(ask("Space/x", "arm", "5000").status, 0);
  durable_mesh_close(fx.mesh, on_closed, &fx.closed);
  CHECK(check_run_until(&fx.loop, &fx.closed, 1000));
  CHECK_EQ_INT(fx.client_freed, 1);
  CHECK_LOOP_CLOSES(&fx.loop);
}

/* A repeating timer (durable__hub_post_every, the waker's liveness round)
 * posts again and again with nobody re-arming it, each message from the
 * hub itself, and ends with its activation like a one-shot one. */
static void test_hub_timer_repeats(void) {
  fx_open();
  reset();
  configure_life();
  uint64_t inc = who("Space/x");
  CHECK_EQ_CODE(ask("Space/x", "every", "20").status, 0);
  CHECK_EQ_INT(ticks, 0); /* not before it is due */
  for (int waited = 0; ticks < 3 && waited < 2000; waited += 10)
    check_run_for(&fx.loop, 10);
  CHECK(ticks >= 3);
  CHECK_EQ_INT(tick_ok, 1);
  CHECK_EQ_INT(tick_inc, inc);
  /* ended by the recycle: no tick after it, and no new activation */
  done_t d = {0};
  recycle("Space/x", &d);
  wait_done(&d, 2000);
  int after = ticks;
  uint64_t activations = stats().activations;
  check_run_for(&fx.loop, 100);
  CHECK_EQ_INT(ticks, after);
  CHECK_EQ_INT(stats().activations, activations);
  /* misuse: a period of 0 would spin the loop */
  durable_error_t err = {0};
  CHECK_EQ_CODE(durable__hub_post_every(fx.client, 0, "tick", NULL, &err),
                DURABLE_EINVAL);
  CHECK(strstr(err.message, "period") != NULL);
  /* one pending at close ends with its hub */
  CHECK_EQ_CODE(ask("Space/x", "every", "5000").status, 0);
  durable_mesh_close(fx.mesh, on_closed, &fx.closed);
  CHECK(check_run_until(&fx.loop, &fx.closed, 1000));
  CHECK_LOOP_CLOSES(&fx.loop);
}

/* A handler that waits for its own hub's timer finishes during a recycle:
 * the timer armed before the recycle still fires while the hub quiesces,
 * so the item in flight is answered, not cut off by the budget. */
static durable_reply_t *waiting_reply;
static void wait_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  waiting_reply = reply;
  durable_error_t err = {0};
  CHECK_OK(durable_hub_post_after(hub, 100, "wake", NULL, &err));
}
static void wake_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)msg;
  (void)data;
  if (waiting_reply)
    durable_reply_ok(waiting_reply, "\"woken\"");
  waiting_reply = NULL;
  durable_reply_ok(reply, NULL);
}

static void test_timer_fires_while_quiescing(void) {
  fx_open();
  reset();
  waiting_reply = NULL;
  durable_error_t err = {0};
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Waiter");
  CHECK_OK(durable_node_type_on(t, "wait", wait_handler, NULL, &err));
  CHECK_OK(durable_node_type_on(t, "wake", wake_handler, NULL, &err));
  fx_put("Space/w", "Waiter");
  call_t c = {0};
  request(fx.client, "Space/w", "wait", NULL, &c);
  while (waiting_reply == NULL)
    uv_run(&fx.loop, UV_RUN_ONCE);
  done_t d = {0};
  recycle("Space/w", &d); /* the timer is due in 100 ms, within the budget */
  wait_done(&d, 3000);
  wait_call(&c);
  CHECK_EQ_CODE(c.status, 0);
  CHECK_EQ_STR(c.payload, "\"woken\"");
  CHECK_EQ_INT(stats().quiesce_timeouts, 0);
  fx_close();
}

/* ---- the read-issuing hub
 * -------------------------------------------------------- */

static void test_reads_hub_survives(void) {
  fx_open();
  reset();
  configure_life();
  durable_hub_t *reads = durable__mesh_reads_hub(fx.mesh);
  CHECK(reads != NULL);
  CHECK(strncmp(durable_hub_address(reads), "mesh/reads-", 11) == 0);
  CHECK(durable_mesh_find(fx.mesh, durable_hub_address(reads)) == reads);
  uint64_t inc = durable_hub_incarnation(reads);
  durable_error_t err = {0};
  done_t never = {0};
  CHECK_EQ_CODE(durable_mesh_recycle(fx.mesh, durable_hub_address(reads),
                                     on_done, &never, &err),
                DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, durable_hub_address(reads));
  CHECK_EQ_INT(durable_hub_run_level(reads), DURABLE_HUB_STARTED);
  /* recycle everything else around it */
  who("Space/x");
  who("Space/other");
  done_t a = {0}, b = {0}, c = {0};
  recycle("Space/x", &a);
  recycle("Space/other", &b);
  recycle("client/test", &c);
  wait_done(&a, 2000);
  wait_done(&b, 2000);
  wait_done(&c, 2000);
  CHECK(durable__mesh_reads_hub(fx.mesh) == reads);
  CHECK_EQ_INT(durable_hub_run_level(reads), DURABLE_HUB_STARTED);
  CHECK_EQ_INT(durable_hub_incarnation(reads), inc);
  call_t p = {0};
  request(reads, "Space/x", "who", NULL, &p);
  wait_call(&p);
  CHECK_EQ_CODE(p.status, 0);
  check_run_for(&fx.loop, 20);
  CHECK_EQ_INT(never.calls, 0);
  fx_close();
}

/* ---- mesh reads
 * ------------------------------------------------------------------------ */

typedef struct {
  int calls;
  durable_read_outcome_t outcome;
  int order;
  char path[128];
  char content[256];
  char message[512];
} read_t;

static void on_read(durable_read_outcome_t outcome, const durable_node_t *node,
                    const char *message, void *data) {
  read_t *r = data;
  r->calls++;
  r->outcome = outcome;
  r->order = ++events;
  snprintf(r->path, sizeof r->path, "%s", node ? node->path : "");
  snprintf(r->content, sizeof r->content, "%s", node ? node->content : "");
  snprintf(r->message, sizeof r->message, "%s", message ? message : "");
}

static int read_done(void *arg) {
  return ((read_t *)arg)->calls > 0;
}

static void mesh_read(const char *path, read_t *r) {
  durable_error_t err = {0};
  int rc = durable_mesh_read(fx.mesh, path, on_read, r, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
}

static void wait_read(read_t *r) {
  CHECK(check_run_until_fn(&fx.loop, read_done, r, 5000));
  CHECK_EQ_INT(r->calls, 1);
}

static void test_mesh_read_present_absent(void) {
  fx_open();
  reset();
  configure_life();
  fx_put_content("Space/doc", "Life", "{\"a\":1}");
  read_t r = {0};
  mesh_read("Space/doc", &r);
  wait_read(&r);
  CHECK_EQ_INT(r.outcome, DURABLE_READ_PRESENT);
  CHECK_EQ_STR(r.path, "Space/doc");
  CHECK_EQ_STR(r.content, "{\"a\":1}");
  /* the read activated the node's hub */
  CHECK(durable_mesh_find(fx.mesh, "Space/doc") != NULL);
  CHECK_EQ_INT(inits, 1);
  read_t a = {0};
  mesh_read("Space/none", &a);
  wait_read(&a);
  CHECK_EQ_INT(a.outcome, DURABLE_READ_ABSENT);
  CHECK_EQ_STR(a.path, "");
  durable_error_t err = {0};
  CHECK_EQ_CODE(durable_mesh_read(fx.mesh, "a//b", on_read, &a, &err),
                DURABLE_EINVAL);
  CHECK_EQ_INT(stats().read_reprobes, 0);
  fx_close();
}

static void test_read_reprobes_once(void) {
  fx_open();
  reset();
  configure_life();
  uint64_t first = who("Space/x");
  call_t slow = {0};
  request(fx.client, "Space/x", "slow", NULL, &slow);
  CHECK(check_run_until(&fx.loop, &slow_entered, 2000));
  done_t d = {0};
  recycle("Space/x", &d);
  read_t r = {0};
  mesh_read("Space/x", &r);
  wait_read(&r);
  CHECK_EQ_INT(r.outcome, DURABLE_READ_PRESENT);
  CHECK_EQ_STR(r.path, "Space/x");
  CHECK_EQ_INT(d.calls, 1);
  CHECK_LT_INT(d.order, r.order); /* answered after that activation ended */
  CHECK_EQ_INT(stats().read_reprobes, 1);
  CHECK_EQ_INT(inits, 2); /* from the fresh activation */
  CHECK_NE_INT(durable_hub_incarnation(durable_mesh_find(fx.mesh, "Space/x")),
               first);
  /* a read of a settled hub does not re-probe */
  read_t again = {0};
  mesh_read("Space/x", &again);
  wait_read(&again);
  CHECK_EQ_INT(again.outcome, DURABLE_READ_PRESENT);
  CHECK_EQ_INT(stats().read_reprobes, 1);
  wait_call(&slow);
  fx_close();
}

/* The re-probe is bounded: when the fresh activation is recycling too, the
 * read says Unavailable rather than asking again. */
static void test_read_reprobe_bounded(void) {
  fx_open();
  reset();
  configure_life();
  who("Space/x");
  call_t slow = {0};
  request(fx.client, "Space/x", "slow", NULL, &slow);
  CHECK(check_run_until(&fx.loop, &slow_entered, 2000));
  done_t d = {0};
  recycle("Space/x", &d);
  recycle_self_in_init = 1; /* the next activation recycles itself */
  read_t r = {0};
  mesh_read("Space/x", &r);
  wait_read(&r);
  CHECK_EQ_INT(r.outcome, DURABLE_READ_UNAVAILABLE);
  CHECK_CONTAINS(r.message, "Space/x");
  CHECK_EQ_INT(stats().read_reprobes, 1);
  CHECK_EQ_INT(inits, 2);
  wait_call(&slow);
  fx_close();
}

/* ---- closing
 * ------------------------------------------------------------------------ */

typedef struct {
  uv_timer_t timer;
  durable_reply_t *done;
} step_later_t;

static void step_later_closed(uv_handle_t *h) {
  free(h->data);
}

static void step_later_fire(uv_timer_t *timer) {
  step_later_t *s = timer->data;
  durable_reply_ok(s->done, NULL);
  uv_close((uv_handle_t *)&s->timer, step_later_closed);
}

static void late_init(durable_hub_t *hub, durable_reply_t *done, void *data) {
  (void)data;
  step_later_t *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  s->done = done;
  uv_timer_init(durable_mesh_loop(durable_hub_mesh(hub)), &s->timer);
  s->timer.data = s;
  uv_timer_start(&s->timer, step_later_fire, 80, 0);
}

/* A handler that keeps its reply for ever gives it back on dispose. */
static void release_held(durable_hub_t *hub, void *data) {
  (void)hub;
  (void)data;
  for (int i = 0; i < nheld; i++)
    if (held[i])
      durable_reply_fail(held[i], DURABLE_ESHUTDOWN, "leaving");
  nheld = 0;
}

static void test_close_with_pending(void) {
  fx_open_with(300);
  reset();
  configure_life();
  durable_node_type_t *late = durable_node_type_get(fx.mesh, "LateStart");
  CHECK_OK(durable_node_type_on_init(late, late_init, NULL));
  durable_node_type_t *forever = durable_node_type_get(fx.mesh, "Forever");
  durable_error_t err = {0};
  CHECK_OK(durable_node_type_on(forever, "hold", hold_handler, NULL, &err));
  CHECK_OK(durable_node_type_on_dispose(forever, release_held, NULL));
  fx_put("Space/late", "LateStart");
  fx_put("Space/forever", "Forever");
  who("Space/other");

  call_t in_handler = {0}, starting = {0}, stuck = {0};
  slow_ms = 50;
  request(fx.client, "Space/x", "slow", NULL,
          &in_handler); /* finishes at 50 ms */
  request(fx.client, "Space/forever", "hold", NULL, &stuck); /* never */
  CHECK_EQ_CODE(ask("Space/x", "ask", NULL).status, 0); /* X waits on other */
  check_run_for(&fx.loop, 10);
  request(fx.client, "Space/late", "ping", NULL, &starting); /* in Starting */
  CHECK_EQ_INT(level_of("Space/late"), DURABLE_HUB_STARTING);
  CHECK_GE_INT(stats().active_hubs, 6);

  durable_mesh_close(fx.mesh, on_closed, &fx.closed);
  /* nothing new starts on a closing mesh */
  CHECK_EQ_CODE(
      durable_mesh_client(fx.mesh, "client/new", &(durable_hub_t *){0}, &err),
      DURABLE_ESHUTDOWN);
  read_t r = {0};
  CHECK_EQ_CODE(durable_mesh_read(fx.mesh, "Space/x", on_read, &r, &err),
                DURABLE_ESHUTDOWN);
  CHECK(check_run_until(&fx.loop, &fx.closed, 10000));
  /* every request was answered exactly once */
  CHECK_EQ_INT(in_handler.calls, 1);
  CHECK_EQ_CODE(in_handler.status, 0); /* its handler finished in the budget */
  CHECK_EQ_INT(ask_inner.calls, 1);
  CHECK_EQ_INT(starting.calls, 1);
  CHECK_EQ_CODE(starting.status, DURABLE_ESHUTDOWN); /* refused once Started */
  CHECK_EQ_INT(stuck.calls, 1);
  CHECK_EQ_CODE(stuck.status, DURABLE_ESHUTDOWN);
  CHECK_EQ_INT(disposes, 2); /* Space/x and Space/other */
  CHECK_EQ_INT(fx.client_freed, 1);
  CHECK_LOOP_CLOSES(&fx.loop);
}

/* The read-issuing hub leaves last; what its dispose actions owe (a
 * consumer's stop callback, a reader's last page) runs before the mesh lets
 * its store go, and never after the mesh is freed. */
static int owed_ran, owed_had_store;

static void owed_cb(int status, const char *message, void *data) {
  (void)status;
  (void)message;
  owed_ran++;
  owed_had_store = durable_mesh_store(data) != NULL;
}

static void owe_at_dispose(durable_hub_t *hub, void *data) {
  (void)data;
  durable_mesh_t *mesh = durable_hub_mesh(hub);
  durable__sched_later(&mesh->sched, owed_cb, 0, NULL, mesh);
}

static void test_close_runs_owed_with_store(void) {
  fx_open();
  owed_ran = owed_had_store = 0;
  CHECK_OK(durable__hub_on_dispose(durable__mesh_reads_hub(fx.mesh),
                                   owe_at_dispose, NULL));
  fx_close();
  CHECK_EQ_INT(owed_ran, 1);
  CHECK_EQ_INT(owed_had_store, 1);
}

/* An answer queued for a hub in the same loop pass that its quiesce budget
 * runs out in, on a closing mesh where it is the last hub: the mesh must
 * still free it (ASan's leak check sees the difference). */
typedef struct {
  uv_timer_t timer;
  int closed;
} race_t;

static void race_closed(uv_handle_t *h) {
  ((race_t *)h->data)->closed = 1;
}

static void race_fire(uv_timer_t *timer) {
  /* due in the same pass as the client's budget, and started before it */
  durable_reply_ok(held[0], "\"late\"");
  held[0] = NULL;
  uv_close((uv_handle_t *)timer, race_closed);
}

static void test_close_answer_races_budget(void) {
  fx_open_with(100);
  reset();
  configure_life();
  call_t h = {0};
  request(fx.client, "Space/x", "hold", NULL, &h);
  CHECK(check_run_until(&fx.loop, &nheld, 2000));
  race_t race = {0};
  race.timer.data = &race;
  uv_timer_init(&fx.loop, &race.timer);
  uv_timer_start(&race.timer, race_fire, 100, 0);
  durable_mesh_close(fx.mesh, on_closed, &fx.closed);
  CHECK(check_run_until(&fx.loop, &fx.closed, 5000));
  CHECK_EQ_INT(race.closed, 1);
  CHECK_EQ_INT(h.calls, 1);
  CHECK_EQ_CODE(h.status, DURABLE_ESHUTDOWN);
  CHECK_EQ_INT(fx.client_freed, 1);
  CHECK_LOOP_CLOSES(&fx.loop);
}

/* A recycle's callback never runs inside durable_mesh_recycle (libuv's
 * rule), even for a hub with nothing to wait for. */
static void test_recycle_cb_after_return(void) {
  fx_open();
  reset();
  configure_life();
  who("Space/x");
  done_t d = {0};
  recycle("Space/x", &d);
  CHECK_EQ_INT(d.calls, 0);
  wait_done(&d, 1000);
  fx_close();
}

/* ---- an activation that never finishes, a reply that outlives its mesh ----
 */

static durable_reply_t *stuck_init;
static void stuck_init_step(durable_hub_t *hub, durable_reply_t *done,
                            void *data) {
  (void)hub;
  (void)data;
  stuck_init = done; /* kept, never finished while the mesh lives */
}

static void test_close_with_stuck_activation(void) {
  fx_open_with(100);
  reset();
  stuck_init = NULL;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Stuck");
  CHECK_OK(durable_node_type_on_init(t, stuck_init_step, NULL));
  fx_put("Space/stuck", "Stuck");
  call_t c = {0};
  request(fx.client, "Space/stuck", "anything", NULL, &c);
  CHECK(!check_run_until_fn(&fx.loop, call_done, &c, 200)); /* still starting */
  CHECK(stuck_init != NULL);
  /* the close spends the budget on the activation, then fails it: the
   * queued request hears ShuttingDown, and the close completes */
  fx_close();
  CHECK_EQ_INT(c.calls, 1);
  CHECK_EQ_CODE(c.status, DURABLE_ESHUTDOWN);
  CHECK_CONTAINS(fx.log, "did not finish within the quiesce budget");
  /* finishing the step after the mesh is gone is harmless */
  durable_reply_ok(stuck_init, NULL);
  stuck_init = NULL;
}

static const check_test_t tests[] = {
    {"recycle_waits_for_handler", test_recycle_waits_for_handler},
    {"quiescing_refuses_admits_replies", test_quiescing_refuses_admits_replies},
    {"fresh_activation_after_recycle", test_fresh_activation_after_recycle},
    {"post_while_quiescing_reaches_next",
     test_post_while_quiescing_reaches_next},
    {"budget_runs_out", test_budget_runs_out},
    {"dispose_steps", test_dispose_steps},
    {"hub_timers", test_hub_timers},
    {"hub_timer_repeats", test_hub_timer_repeats},
    {"reads_hub_survives", test_reads_hub_survives},
    {"mesh_read_present_absent", test_mesh_read_present_absent},
    {"read_reprobes_once", test_read_reprobes_once},
    {"read_reprobe_bounded", test_read_reprobe_bounded},
    {"close_with_pending", test_close_with_pending},
    {"close_answer_races_budget", test_close_answer_races_budget},
    {"recycle_cb_after_return", test_recycle_cb_after_return},
    {"close_with_stuck_activation", test_close_with_stuck_activation},
    {"timer_fires_while_quiescing", test_timer_fires_while_quiescing},
    {"close_runs_owed_with_store", test_close_runs_owed_with_store},
};

int main(int argc, char **argv) {
  /* the tests read WARN lines from the log sink */
  if (durable__log_threshold() < DURABLE_LOG_WARN)
    setenv("DURABLE_LOG", "warn", 1);
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

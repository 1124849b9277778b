/*
 * mailbox_test.c: a hub drains its mailbox one message at a time.
 *
 * What is pinned: no handler ever runs inside another (a message a handler
 * posts to its own hub, or to another, waits for a later turn); the
 * messages of one sender to one hub are handled in the order sent; a
 * handler that keeps its reply and finishes later -- from a libuv timer, or
 * from the answer to a request it sent through its own hub -- lets the
 * hub's other messages run meanwhile (no deadlock); and every hub, node or
 * client, configured or not, answers ping.
 *
 * Each test opens a mesh on its own loop over "sqlite::memory:", puts the
 * nodes it needs, and ends by closing the mesh and asserting the loop
 * closes with nothing left on it.
 */
#include <durable_internal.h>

#include "check.h"
#define MESH_FIXTURE_ECHO_LOG 1 /* the mesh's log lines on stderr too */
#include "mesh_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixture (tests/support/mesh_fixture.h) --------------------------------
 */

static void on_handler(durable_node_type_t *t, const char *msg_type,
                       durable_handler_cb cb) {
  durable_error_t err = {0};
  int rc = durable_node_type_on(t, msg_type, cb, NULL, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
}

/* ---- one message at a time -------------------------------------------------
 */

static int depth, max_depth, handled;

/* Enter/leave bracket every handler and response callback of these tests:
 * a turn that starts inside another turn shows as depth 2. */
static void enter(void) {
  if (++depth > max_depth)
    max_depth = depth;
}
static void leave(void) {
  depth--;
}

static void probe_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)data;
  enter();
  int n = atoi(msg->payload);
  const char *self = durable_hub_address(hub);
  const char *other = strcmp(self, "Space/a") == 0 ? "Space/b" : "Space/a";
  if (n > 0) {
    char next[16];
    snprintf(next, sizeof next, "%d", n - 1);
    post(hub, self, "probe", next);
    post(hub, other, "probe", next);
  }
  handled++;
  durable_reply_ok(reply, NULL); /* finishing must not start a turn either */
  leave();
}

static void test_one_at_a_time(void) {
  fx_open();
  depth = max_depth = handled = 0;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Probe");
  on_handler(t, "probe", probe_handler);
  fx_put("Space/a", "Probe");
  fx_put("Space/b", "Probe");
  /* 6 levels, each message posts two: 2^6 - 1 messages in all */
  post(fx.client, "Space/a", "probe", "5");
  post(fx.client, "Space/b", "probe", "5");
  static const int expected = 2 * 63;
  for (int i = 0; i < 500 && handled < expected; i++)
    check_run_for(&fx.loop, 10);
  CHECK_EQ_INT(handled, expected);
  CHECK_EQ_INT(max_depth, 1);
  CHECK_EQ_INT(depth, 0);
  fx_close();
}

/* A message to its own hub waits until the handler that posted it has
 * returned. */
static int first_returned, second_saw_first_returned, second_ran;

static void first_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  enter();
  post(hub, durable_hub_address(hub), "second", NULL);
  CHECK_EQ_INT(second_ran, 0);
  durable_reply_ok(reply, NULL);
  CHECK_EQ_INT(second_ran, 0);
  first_returned = 1;
  leave();
}

static void second_handler(durable_hub_t *hub, const durable_msg_t *msg,
                           durable_reply_t *reply, void *data) {
  (void)data;
  enter();
  second_ran = 1;
  second_saw_first_returned = first_returned;
  CHECK_EQ_STR(msg->sender, durable_hub_address(hub));
  CHECK_EQ_INT(msg->request_id, 0);
  durable_reply_ok(reply, NULL);
  leave();
}

static void test_self_post_later_turn(void) {
  fx_open();
  depth = max_depth = 0;
  first_returned = second_saw_first_returned = second_ran = 0;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Self");
  on_handler(t, "first", first_handler);
  on_handler(t, "second", second_handler);
  fx_put("Space/self", "Self");
  call_t c = {0};
  request(fx.client, "Space/self", "first", NULL, &c);
  wait_call(&c);
  CHECK_EQ_CODE(c.status, 0);
  CHECK(check_run_until(&fx.loop, &second_ran, 5000));
  CHECK_EQ_INT(second_saw_first_returned, 1);
  CHECK_EQ_INT(max_depth, 1);
  fx_close();
}

/* ---- order per sender
 * ---------------------------------------------------------- */

#define N_ORDER 100

static int seen_a[N_ORDER], seen_b[N_ORDER];
static int n_a, n_b;

static void record_handler(durable_hub_t *hub, const durable_msg_t *msg,
                           durable_reply_t *reply, void *data) {
  (void)hub;
  (void)data;
  int v = atoi(msg->payload);
  if (strcmp(msg->sender, "client/test") == 0) {
    CHECK_LT_INT(n_a, N_ORDER);
    seen_a[n_a++] = v;
  } else {
    CHECK_EQ_STR(msg->sender, "client/other");
    CHECK_LT_INT(n_b, N_ORDER);
    seen_b[n_b++] = v;
  }
  durable_reply_ok(reply, msg->payload);
}

static void test_order_per_sender(void) {
  fx_open();
  n_a = n_b = 0;
  events = 0;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Recorder");
  on_handler(t, "rec", record_handler);
  fx_put("Space/rec", "Recorder");
  durable_hub_t *other = NULL;
  durable_error_t err = {0};
  CHECK_OK(durable_mesh_client(fx.mesh, "client/other", &other, &err));
  /* the first messages wait for the activation, the later ones do not:
   * order must hold across both */
  static call_t calls[N_ORDER];
  memset(calls, 0, sizeof calls);
  char p[16];
  for (int i = 0; i < N_ORDER; i++) {
    snprintf(p, sizeof p, "%d", i);
    if (i % 2 == 0)
      request(fx.client, "Space/rec", "rec", p, &calls[i]);
    else
      post(fx.client, "Space/rec", "rec", p);
    post(other, "Space/rec", "rec", p);
    if (i == N_ORDER / 2)
      check_run_for(&fx.loop, 20); /* now it is active */
  }
  for (int i = 0; i < 500 && (n_a < N_ORDER || n_b < N_ORDER); i++)
    check_run_for(&fx.loop, 10);
  CHECK_EQ_INT(n_a, N_ORDER);
  CHECK_EQ_INT(n_b, N_ORDER);
  for (int i = 0; i < N_ORDER; i++) {
    CHECK_EQ_INT(seen_a[i], i);
    CHECK_EQ_INT(seen_b[i], i);
  }
  /* the answers, too, come back in order */
  for (int i = 0; i < N_ORDER; i += 2) {
    CHECK_EQ_INT(calls[i].calls, 1);
    CHECK_EQ_CODE(calls[i].status, 0);
    snprintf(p, sizeof p, "%d", i);
    CHECK_EQ_STR(calls[i].payload, p);
    if (i > 0)
      CHECK_LT_INT(calls[i - 2].order, calls[i].order);
  }
  fx_close();
}

/* ---- a handler that finishes later
 * ------------------------------------------------ */

typedef struct {
  uv_timer_t timer;
  durable_reply_t *reply;
} later_t;

static int slow_in_flight, fast_saw_slow_in_flight;

static void later_closed(uv_handle_t *h) {
  free(h->data);
}

static void later_fire(uv_timer_t *timer) {
  later_t *l = timer->data;
  slow_in_flight = 0;
  durable_reply_ok(l->reply, "\"slow\"");
  uv_close((uv_handle_t *)&l->timer, later_closed);
}

static void slow_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)msg;
  (void)data;
  enter();
  later_t *l = calloc(1, sizeof *l);
  CHECK(l != NULL);
  l->reply = reply;
  uv_timer_init(durable_mesh_loop(durable_hub_mesh(hub)), &l->timer);
  l->timer.data = l;
  uv_timer_start(&l->timer, later_fire, 100, 0);
  slow_in_flight = 1;
  leave();
}

static void fast_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)msg;
  (void)data;
  enter();
  fast_saw_slow_in_flight = slow_in_flight;
  durable_reply_ok(reply, "\"fast\"");
  leave();
}

static void test_finish_later_from_timer(void) {
  fx_open();
  depth = max_depth = events = 0;
  slow_in_flight = fast_saw_slow_in_flight = 0;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Later");
  on_handler(t, "slow", slow_handler);
  on_handler(t, "fast", fast_handler);
  fx_put("Space/later", "Later");
  call_t slow = {0}, fast = {0};
  request(fx.client, "Space/later", "slow", NULL, &slow);
  request(fx.client, "Space/later", "fast", NULL, &fast);
  wait_call(&fast);
  CHECK_EQ_INT(slow.calls, 0); /* still in its handler */
  wait_call(&slow);
  CHECK_EQ_CODE(fast.status, 0);
  CHECK_EQ_STR(fast.payload, "\"fast\"");
  CHECK_EQ_CODE(slow.status, 0);
  CHECK_EQ_STR(slow.payload, "\"slow\"");
  CHECK_LT_INT(fast.order, slow.order);
  CHECK_EQ_INT(fast_saw_slow_in_flight, 1);
  CHECK_EQ_INT(max_depth, 1);
  fx_close();
}

/* The outer handler asks its own hub (the inner handler) and finishes from
 * the answer: in a blocking design this deadlocks. */
static int outer_in_flight, inner_saw_outer_in_flight;

static void on_inner(const durable_response_t *res, void *data) {
  enter();
  durable_reply_t *outer = data;
  CHECK_EQ_CODE(res->status, 0);
  outer_in_flight = 0;
  durable_reply_ok(outer, res->payload);
  leave();
}

static void outer_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)data;
  enter();
  durable_error_t err = {0};
  outer_in_flight = 1;
  int rc = durable_hub_request(hub, durable_hub_address(hub), "inner",
                               msg->payload, 2000, on_inner, reply, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  leave();
}

static void inner_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)data;
  enter();
  inner_saw_outer_in_flight = outer_in_flight;
  CHECK_EQ_STR(msg->sender, durable_hub_address(hub));
  char out[128];
  snprintf(out, sizeof out, "{\"inner\":%s}", msg->payload);
  durable_reply_ok(reply, out);
  leave();
}

static void test_finish_later_from_own_request(void) {
  fx_open();
  depth = max_depth = events = 0;
  outer_in_flight = inner_saw_outer_in_flight = 0;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Chain");
  on_handler(t, "outer", outer_handler);
  on_handler(t, "inner", inner_handler);
  fx_put("Space/chain", "Chain");
  call_t c = {0}, again = {0};
  request(fx.client, "Space/chain", "outer", "7", &c);
  wait_call(&c);
  CHECK_EQ_CODE(c.status, 0);
  CHECK_EQ_STR(c.payload, "{\"inner\":7}");
  CHECK_EQ_INT(inner_saw_outer_in_flight, 1);
  /* and the hub goes on */
  request(fx.client, "Space/chain", "outer", "8", &again);
  wait_call(&again);
  CHECK_EQ_STR(again.payload, "{\"inner\":8}");
  CHECK_EQ_INT(max_depth, 1);
  fx_close();
}

/* ---- ping
 * ------------------------------------------------------------------------ */

static void ping_ok(durable_hub_t *from, const char *to) {
  call_t c = {0};
  request(from, to, "ping", NULL, &c);
  wait_call(&c);
  CHECK_MSG(c.status == 0, "ping %s -> %s: %s", durable_hub_address(from), to,
            c.message);
  CHECK_EQ_STR(c.payload, "\"pong\"");
}

static void test_ping_every_hub(void) {
  fx_open();
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Configured");
  on_handler(t, "x", fast_handler);
  fx_put("Space/plain", "Plain"); /* a NodeType nobody configured */
  fx_put("Space/untyped", NULL);  /* no NodeType at all */
  fx_put("Space/configured", "Configured");
  durable_hub_t *other = NULL;
  durable_error_t err = {0};
  CHECK_OK(durable_mesh_client(fx.mesh, "client/other", &other, &err));

  ping_ok(fx.client, "Space/plain");
  ping_ok(fx.client, "Space/untyped");
  ping_ok(fx.client, "Space/configured");
  ping_ok(fx.client, "client/other");
  ping_ok(other, "client/test");
  ping_ok(fx.client, durable_hub_address(durable__mesh_reads_hub(fx.mesh)));
  ping_ok(durable__mesh_reads_hub(fx.mesh), "client/test");

  durable_hub_t *plain = durable_mesh_find(fx.mesh, "Space/plain");
  CHECK(plain != NULL);
  CHECK_EQ_STR(durable_hub_node_type(plain), "Plain");
  CHECK_EQ_INT(durable_hub_run_level(plain), DURABLE_HUB_STARTED);
  CHECK_EQ_STR(durable_hub_node_type(fx.client), "");
  /* node hubs ping too */
  ping_ok(plain, "client/test");
  ping_ok(plain, "Space/configured");
  ping_ok(plain, "Space/plain");

  /* ping cannot be taken over by a NodeType */
  CHECK_EQ_CODE(durable_node_type_on(t, "ping", fast_handler, NULL, &err),
                DURABLE_EINVAL);
  /* nor can the runtime's own messages, which carry typed bodies */
  CHECK_EQ_CODE(
      durable_node_type_on(t, "durable.append", fast_handler, NULL, &err),
      DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "belong to the runtime");
  CHECK_EQ_CODE(durable_node_type_on(t, "durable.wake:DocumentLog",
                                     fast_handler, NULL, &err),
                DURABLE_EINVAL);
  CHECK_OK(durable_node_type_on(t, "durable_not_reserved", fast_handler, NULL,
                                &err));
  durable_mesh_stats_t st;
  durable_mesh_stats(fx.mesh, &st);
  CHECK_EQ_INT(st.activations, 3);
  fx_close();
}

static const check_test_t tests[] = {
    {"one_at_a_time", test_one_at_a_time},
    {"self_post_later_turn", test_self_post_later_turn},
    {"order_per_sender", test_order_per_sender},
    {"finish_later_from_timer", test_finish_later_from_timer},
    {"finish_later_from_own_request", test_finish_later_from_own_request},
    {"ping_every_hub", test_ping_every_hub},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

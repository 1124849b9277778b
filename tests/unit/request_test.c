/*
 * request_test.c: requests, replies and activation.
 *
 * What is pinned: a request is answered with the handler's payload; a
 * request nobody answers in time ends DURABLE_ETIMEDOUT and the late reply
 * is dropped (the callback runs once); an address with no node gives
 * DURABLE_ENOTFOUND, one that is no valid path is refused at the call with
 * DURABLE_EINVAL (requests, posts, clients, activation, recycle); a handler's
 * failure reaches the sender as DURABLE_EFAILED with its message, and so does a
 * message type with no handler (naming the type); the first message to a node
 * activates its hub, running the NodeType's init steps in order before the
 * message is delivered, and a failing init step fails the requests that waited;
 * a node whose type has no configuration gets a plain hub; a mesh acting as
 * a principal never finds the runtime's own hub.
 *
 * Each test opens a mesh on its own loop over "sqlite::memory:" and ends by
 * closing it and asserting the loop closes with nothing left on it.
 */
#include <durable_internal.h>

#include "check.h"
#include "mesh_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fixture (tests/support/mesh_fixture.h) --------------------------------
 */

static void fx_open_with(uint32_t request_timeout_ms) {
  fx_open_options(
      (durable_mesh_options_t){.request_timeout_ms = request_timeout_ms});
}

static void on_handler(durable_node_type_t *t, const char *msg_type,
                       durable_handler_cb cb, void *data) {
  durable_error_t err = {0};
  int rc = durable_node_type_on(t, msg_type, cb, data, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
}

/* ---- handlers
 * ---------------------------------------------------------------- */

static void echo_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)data;
  char out[512];
  CHECK_EQ_STR(msg->type, "echo");
  CHECK_NE_INT(msg->request_id, 0);
  snprintf(out, sizeof out, "{\"echo\":%s,\"from\":\"%s\",\"at\":\"%s\"}",
           msg->payload, msg->sender, durable_hub_address(hub));
  durable_reply_ok(reply, out);
}

static void null_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)data;
  CHECK_EQ_STR(msg->payload, "null");
  durable_reply_ok(reply, NULL);
}

static durable_reply_t *held;

static void hold_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)msg;
  (void)data;
  CHECK(held == NULL);
  held = reply;
}

static void fail_handler(durable_hub_t *hub, const durable_msg_t *msg,
                         durable_reply_t *reply, void *data) {
  (void)hub;
  (void)data;
  if (strcmp(msg->payload, "\"conflict\"") == 0)
    durable_reply_fail(reply, DURABLE_ECONFLICT, "version moved on");
  else if (strcmp(msg->payload, "\"zero\"") == 0)
    durable_reply_fail(reply, 0, "a code of 0 still fails");
  else
    durable_reply_fail(reply, DURABLE_EFAILED, "bad input: x");
}

/* ---- request and reply
 * ------------------------------------------------------------- */

static void test_reply_with_payload(void) {
  fx_open();
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Echo");
  on_handler(t, "echo", echo_handler, NULL);
  on_handler(t, "nil", null_handler, NULL);
  fx_put("Space/echo", "Echo");
  call_t c = ask("Space/echo", "echo", "{\"n\":[1,2,3]}");
  CHECK_EQ_CODE(c.status, 0);
  CHECK_EQ_STR(c.payload, "{\"echo\":{\"n\":[1,2,3]},\"from\":\"client/test\","
                          "\"at\":\"Space/echo\"}");
  CHECK_EQ_STR(c.message, "");
  /* no payload either way: JSON null */
  c = ask("Space/echo", "nil", NULL);
  CHECK_EQ_CODE(c.status, 0);
  CHECK_EQ_STR(c.payload, "null");
  /* misuse is refused at once, the callback never runs */
  durable_error_t err = {0};
  call_t never = {0};
  CHECK_EQ_CODE(durable_hub_request(fx.client, "Space/echo", "", NULL, 0,
                                    on_response, &never, &err),
                DURABLE_EINVAL);
  CHECK_EQ_CODE(durable_hub_request(fx.client, NULL, "echo", NULL, 0,
                                    on_response, &never, &err),
                DURABLE_EINVAL);
  check_run_for(&fx.loop, 20);
  CHECK_EQ_INT(never.calls, 0);
  fx_close();
}

/* ---- timeout
 * ------------------------------------------------------------------------ */

static void test_timeout_late_reply_dropped(void) {
  fx_open_with(80); /* the mesh's default for requests that give none */
  held = NULL;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Holder");
  on_handler(t, "hold", hold_handler, NULL);
  on_handler(t, "echo", echo_handler, NULL);
  fx_put("Space/hold", "Holder");
  /* activate first, so the timeout measures the handler only */
  CHECK_EQ_CODE(ask("Space/hold", "ping", NULL).status, 0);

  call_t c = {0};
  uint64_t t0 = uv_now(&fx.loop);
  request_timed(fx.client, "Space/hold", "hold", NULL, 50, &c);
  wait_call(&c);
  CHECK_EQ_CODE(c.status, DURABLE_ETIMEDOUT);
  CHECK_CONTAINS(c.message, "50 ms");
  CHECK_GE_INT(c.at - t0, 50);
  CHECK(held != NULL);
  /* the late reply finds nobody waiting: dropped, no second callback */
  durable_reply_ok(held, "\"too late\"");
  held = NULL;
  check_run_for(&fx.loop, 100);
  CHECK_EQ_INT(c.calls, 1);
  CHECK_EQ_CODE(c.status, DURABLE_ETIMEDOUT);

  /* timeout 0 takes the mesh's default (80 ms) */
  call_t d = {0};
  t0 = uv_now(&fx.loop);
  request_timed(fx.client, "Space/hold", "hold", NULL, 0, &d);
  wait_call(&d);
  CHECK_EQ_CODE(d.status, DURABLE_ETIMEDOUT);
  CHECK_CONTAINS(d.message, "80 ms");
  CHECK_GE_INT(d.at - t0, 80);
  durable_reply_fail(held, DURABLE_EFAILED, "late failure");
  held = NULL;
  check_run_for(&fx.loop, 50);
  CHECK_EQ_INT(d.calls, 1);

  /* the hub is none the worse */
  call_t e = ask("Space/hold", "echo", "1");
  CHECK_EQ_CODE(e.status, 0);
  fx_close();
}

/* ---- NotFound
 * -------------------------------------------------------------------------- */

static void test_not_found_no_node(void) {
  fx_open();
  call_t c = ask("Space/none", "ping", NULL);
  CHECK_EQ_CODE(c.status, DURABLE_ENOTFOUND);
  CHECK_CONTAINS(c.message, "Space/none");
  c = ask("Space/none", "anything", "{}");
  CHECK_EQ_CODE(c.status, DURABLE_ENOTFOUND);
  CHECK(durable_mesh_find(fx.mesh, "Space/none") == NULL);
  CHECK_EQ_INT(stats().activations, 0);
  /* a post there is dropped, quietly */
  durable_error_t err = {0};
  CHECK_OK(durable_hub_post(fx.client, "Space/none", "x", NULL, &err));
  check_run_for(&fx.loop, 50);
  CHECK(durable_mesh_find(fx.mesh, "Space/none") == NULL);
  /* a node put later is found: absence is not remembered */
  fx_put("Space/none", "Late");
  CHECK_EQ_CODE(ask("Space/none", "ping", NULL).status, 0);
  CHECK_EQ_INT(stats().activations, 1);
  fx_close();
}

static int bad_client_calls;
static void bad_client_cb(int status, const char *message, void *data) {
  (void)status, (void)message, (void)data;
  bad_client_calls++;
}

/* An address that is no path names no hub: a request, a post, a client, an
 * activation or a recycle there is refused at the call (DURABLE_EINVAL,
 * naming the address and the rule), and nothing is sent or made. */
static void test_invalid_address_refused(void) {
  fx_open();
  static const char *bad[] = {"a//b",       "/Space/x", "Space/x/",  "_Part/x",
                              "Space/../x", "",         "Space/a\\b"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    durable_error_t err = {0};
    call_t c = {0};
    int rc = durable_hub_request(fx.client, bad[i], "ping", NULL, 0,
                                 on_response, &c, &err);
    CHECK_MSG(rc == DURABLE_EINVAL, "request to '%s': %d", bad[i], rc);
    if (bad[i][0])
      CHECK_CONTAINS(err.message, bad[i]);
    CHECK_EQ_CODE(durable_hub_post(fx.client, bad[i], "x", NULL, &err),
                  DURABLE_EINVAL);
    durable_hub_t *hub = NULL;
    CHECK_EQ_CODE(durable_mesh_client(fx.mesh, bad[i], &hub, &err),
                  DURABLE_EINVAL);
    CHECK(hub == NULL);
    CHECK_EQ_CODE(
        durable_mesh_activate(fx.mesh, bad[i], bad_client_cb, NULL, &err),
        DURABLE_EINVAL);
    CHECK_CONTAINS(err.message, "hub address");
    CHECK_EQ_CODE(
        durable_mesh_recycle(fx.mesh, bad[i], bad_client_cb, NULL, &err),
        DURABLE_EINVAL);
    check_run_for(&fx.loop, 5);
    CHECK_EQ_INT(c.calls, 0);
  }
  durable_error_t err = {0};
  durable_hub_t *hub = NULL;
  CHECK_EQ_CODE(durable_mesh_client(fx.mesh, "client/a//b", &hub, &err),
                DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "hub address: path 'client/a//b' is invalid");
  CHECK_CONTAINS(err.message, "empty segment");
  CHECK_EQ_INT(bad_client_calls, 0);
  CHECK_EQ_INT(stats().activations, 0);
  CHECK_EQ_INT(stats().active_hubs, 2); /* the client and the reads hub */
  fx_close();
}

/* ---- Failed
 * ----------------------------------------------------------------------------
 */

static void test_failed_with_message(void) {
  fx_open();
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Failing");
  on_handler(t, "fail", fail_handler, NULL);
  fx_put("Space/fail", "Failing");
  call_t c = ask("Space/fail", "fail", NULL);
  CHECK_EQ_CODE(c.status, DURABLE_EFAILED);
  CHECK_EQ_STR(c.message, "bad input: x");
  CHECK_EQ_STR(c.payload, "");
  c = ask("Space/fail", "fail", "\"conflict\"");
  CHECK_EQ_CODE(c.status, DURABLE_ECONFLICT);
  CHECK_EQ_STR(c.message, "version moved on");
  c = ask("Space/fail", "fail", "\"zero\"");
  CHECK_EQ_CODE(c.status, DURABLE_EFAILED);
  CHECK_EQ_STR(c.message, "a code of 0 still fails");
  /* the hub lives on */
  CHECK_EQ_CODE(ask("Space/fail", "ping", NULL).status, 0);
  CHECK_EQ_INT(stats().activations, 1);
  fx_close();
}

static void test_no_handler(void) {
  fx_open();
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Echo");
  on_handler(t, "echo", echo_handler, NULL);
  fx_put("Space/echo", "Echo");
  call_t c = ask("Space/echo", "frobnicate", NULL);
  CHECK_EQ_CODE(c.status, DURABLE_EFAILED);
  CHECK_CONTAINS(c.message, "'frobnicate'");
  CHECK_CONTAINS(c.message, "Space/echo");
  /* a client hub has no handlers at all */
  c = ask("client/test", "frobnicate", NULL);
  CHECK_EQ_CODE(c.status, DURABLE_EFAILED);
  CHECK_CONTAINS(c.message, "'frobnicate'");
  fx_close();
}

/* ---- activation
 * ------------------------------------------------------------------------ */

static char trace[1024];

static void tr(const char *what) {
  size_t n = strlen(trace);
  snprintf(trace + n, sizeof trace - n, "%s%s", n ? "," : "", what);
}

typedef struct {
  uv_timer_t timer;
  durable_reply_t *done;
} step_later_t;

static void step_later_closed(uv_handle_t *h) {
  free(h->data);
}

static void step_later_fire(uv_timer_t *timer) {
  step_later_t *s = timer->data;
  tr("init1-done");
  durable_reply_ok(s->done, NULL);
  uv_close((uv_handle_t *)&s->timer, step_later_closed);
}

/* The first step finishes later (from a timer), the second at once. */
static void init1(durable_hub_t *hub, durable_reply_t *done, void *data) {
  CHECK_EQ_STR((const char *)data, "one");
  CHECK_EQ_INT(durable_hub_run_level(hub), DURABLE_HUB_STARTING);
  CHECK_EQ_STR(durable_hub_node_type(hub), "Steps");
  tr("init1");
  step_later_t *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  s->done = done;
  uv_timer_init(durable_mesh_loop(durable_hub_mesh(hub)), &s->timer);
  s->timer.data = s;
  uv_timer_start(&s->timer, step_later_fire, 30, 0);
}

static void init2(durable_hub_t *hub, durable_reply_t *done, void *data) {
  CHECK_EQ_STR((const char *)data, "two");
  CHECK_EQ_INT(durable_hub_run_level(hub), DURABLE_HUB_STARTING);
  tr("init2");
  durable_reply_ok(done, NULL);
}

static void hello_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)data;
  CHECK_EQ_INT(durable_hub_run_level(hub), DURABLE_HUB_STARTED);
  tr(msg->payload);
  durable_reply_ok(reply, NULL);
}

static void on_activated(int status, const char *message, void *data) {
  (void)message;
  int *out = data;
  out[0] = 1;
  out[1] = status;
}

static void test_activation_on_first_message(void) {
  fx_open();
  trace[0] = '\0';
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Steps");
  CHECK_OK(durable_node_type_on_init(t, init1, "one"));
  CHECK_OK(durable_node_type_on_init(t, init2, "two"));
  on_handler(t, "hello", hello_handler, NULL);
  fx_put("Space/steps", "Steps");
  fx_put("Space/steps2", "Steps");
  CHECK(durable_mesh_find(fx.mesh, "Space/steps") == NULL);
  CHECK_EQ_INT(stats().activations, 0);

  /* two requests and a post, all sent before the hub exists */
  call_t a = {0}, b = {0};
  durable_error_t err = {0};
  request(fx.client, "Space/steps", "hello", "\"m1\"", &a);
  CHECK_OK(durable_hub_post(fx.client, "Space/steps", "hello", "\"m2\"", &err));
  request(fx.client, "Space/steps", "hello", "\"m3\"", &b);
  durable_hub_t *hub = durable_mesh_find(fx.mesh, "Space/steps");
  CHECK(hub != NULL);
  CHECK_EQ_INT(durable_hub_run_level(hub), DURABLE_HUB_STARTING);
  wait_call(&b);
  CHECK_EQ_CODE(a.status, 0);
  CHECK_EQ_CODE(b.status, 0);
  CHECK_EQ_STR(trace, "init1,init1-done,init2,\"m1\",\"m2\",\"m3\"");
  CHECK_EQ_INT(stats().activations, 1);
  hub = durable_mesh_find(fx.mesh, "Space/steps");
  CHECK(hub != NULL);
  CHECK_EQ_INT(durable_hub_run_level(hub), DURABLE_HUB_STARTED);

  /* the next message reaches the same activation: no init again */
  uint64_t inc = durable_hub_incarnation(hub);
  CHECK_EQ_CODE(ask("Space/steps", "hello", "\"m4\"").status, 0);
  CHECK_EQ_STR(trace, "init1,init1-done,init2,\"m1\",\"m2\",\"m3\",\"m4\"");
  CHECK_EQ_INT(stats().activations, 1);
  CHECK_EQ_INT(
      durable_hub_incarnation(durable_mesh_find(fx.mesh, "Space/steps")), inc);

  /* durable_mesh_activate: cb(0) once Started; ENOTFOUND with no node */
  int act[2] = {0, 1};
  CHECK_OK(
      durable_mesh_activate(fx.mesh, "Space/steps2", on_activated, act, &err));
  CHECK(check_run_until(&fx.loop, &act[0], 5000));
  CHECK_EQ_CODE(act[1], 0);
  CHECK_EQ_INT(
      durable_hub_run_level(durable_mesh_find(fx.mesh, "Space/steps2")),
      DURABLE_HUB_STARTED);
  CHECK_EQ_INT(stats().activations, 2);
  int none[2] = {0, 0};
  CHECK_OK(
      durable_mesh_activate(fx.mesh, "Space/nobody", on_activated, none, &err));
  CHECK(check_run_until(&fx.loop, &none[0], 5000));
  CHECK_EQ_CODE(none[1], DURABLE_ENOTFOUND);
  CHECK_EQ_INT(stats().activations, 2);
  fx_close();
}

static int broken_inits;

static void broken_init(durable_hub_t *hub, durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  broken_inits++;
  durable_reply_fail(done, DURABLE_EFAILED, "config missing");
}

static int never_handled;

static void never_handler(durable_hub_t *hub, const durable_msg_t *msg,
                          durable_reply_t *reply, void *data) {
  (void)hub;
  (void)msg;
  (void)data;
  never_handled++;
  durable_reply_ok(reply, NULL);
}

static void test_failing_init_fails_queued(void) {
  fx_open();
  broken_inits = never_handled = 0;
  durable_node_type_t *t = durable_node_type_get(fx.mesh, "Broken");
  CHECK_OK(durable_node_type_on_init(t, broken_init, NULL));
  on_handler(t, "work", never_handler, NULL);
  fx_put("Space/broken", "Broken");
  call_t a = {0}, b = {0};
  durable_error_t err = {0};
  request(fx.client, "Space/broken", "work", NULL, &a);
  CHECK_OK(durable_hub_post(fx.client, "Space/broken", "work", NULL, &err));
  request(fx.client, "Space/broken", "ping", NULL, &b);
  wait_call(&a);
  wait_call(&b);
  CHECK_EQ_CODE(a.status, DURABLE_EFAILED);
  CHECK_CONTAINS(a.message, "config missing");
  CHECK_CONTAINS(a.message, "Space/broken");
  CHECK_EQ_CODE(b.status, DURABLE_EFAILED);
  CHECK_EQ_INT(never_handled, 0);
  CHECK_EQ_INT(broken_inits, 1);
  CHECK_EQ_INT(stats().activations, 0);
  CHECK(durable_mesh_find(fx.mesh, "Space/broken") == NULL);
  CHECK_CONTAINS(fx.log, "activation of 'Space/broken' failed: config missing");
  /* the next message tries again */
  call_t c = ask("Space/broken", "work", NULL);
  CHECK_EQ_CODE(c.status, DURABLE_EFAILED);
  CHECK_EQ_INT(broken_inits, 2);
  CHECK_EQ_INT(never_handled, 0);
  fx_close();
}

static void test_plain_hub(void) {
  fx_open();
  fx_put("Space/plain", "Unconfigured");
  call_t c = ask("Space/plain", "ping", NULL);
  CHECK_EQ_CODE(c.status, 0);
  CHECK_EQ_STR(c.payload, "\"pong\"");
  durable_hub_t *hub = durable_mesh_find(fx.mesh, "Space/plain");
  CHECK(hub != NULL);
  CHECK_EQ_STR(durable_hub_node_type(hub), "Unconfigured");
  CHECK_EQ_INT(durable_hub_run_level(hub), DURABLE_HUB_STARTED);
  c = ask("Space/plain", "hello", NULL);
  CHECK_EQ_CODE(c.status, DURABLE_EFAILED);
  CHECK_CONTAINS(c.message, "'hello'");
  CHECK_EQ_INT(stats().activations, 1);
  fx_close();
}

/* The runtime's own hub speaks for the runtime, past a principal's read
 * gate: a mesh acting as a principal never finds it. */
static void test_reads_hub_hidden_from_principal(void) {
  fx_open();
  durable_hub_t *reads = durable__mesh_reads_hub(fx.mesh);
  CHECK(durable_mesh_find(fx.mesh, durable_hub_address(reads)) == reads);
  fx_close();
  fx_open_options((durable_mesh_options_t){.principal = "alice"});
  reads = durable__mesh_reads_hub(fx.mesh);
  CHECK(durable_mesh_find(fx.mesh, durable_hub_address(reads)) == NULL);
  fx_close();
}

static const check_test_t tests[] = {
    {"reply_with_payload", test_reply_with_payload},
    {"timeout_late_reply_dropped", test_timeout_late_reply_dropped},
    {"not_found_no_node", test_not_found_no_node},
    {"invalid_address_refused", test_invalid_address_refused},
    {"failed_with_message", test_failed_with_message},
    {"no_handler", test_no_handler},
    {"activation_on_first_message", test_activation_on_first_message},
    {"failing_init_fails_queued", test_failing_init_fails_queued},
    {"plain_hub", test_plain_hub},
    {"reads_hub_hidden_from_principal", test_reads_hub_hidden_from_principal},
};

int main(int argc, char **argv) {
  /* the tests read WARN lines from the log sink */
  if (durable__log_threshold() < DURABLE_LOG_WARN)
    setenv("DURABLE_LOG", "warn", 1);
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

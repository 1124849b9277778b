/*
 * mesh_fixture.h: one mesh on a private loop, for the C tests of hubs,
 * requests and streams.
 *
 * Header-only like check.h (include check.h and <durable.h> first): each
 * test executable gets its own `fx` and its own copies of the helpers, all
 * `static` and marked unused so that a test takes only what it needs.
 *
 *   fx_open / fx_open_options   uv_loop_init, durable_mesh_open over
 *                               "sqlite::memory:" (or options.store) with
 *                               the log sink below, and a client hub
 *                               "client/test"
 *   fx_put / fx_put_content     a node, waited for
 *   fx_close                    close the mesh, check the client hub's
 *                               memory went with it and the loop closes
 *                               with nothing left on it
 *
 * The log sink keeps every line in fx.log (a test reads WARN lines there);
 * a test that defines MESH_FIXTURE_ECHO_LOG before including this file also
 * sees them on stderr.  The request helpers record one answer in a call_t,
 * stamped with uv_now and with `events`, the test's sequence number for
 * "what happened first" across callbacks.
 */
#ifndef DURABLE_TEST_MESH_FIXTURE_H
#define DURABLE_TEST_MESH_FIXTURE_H

#include <durable_internal.h>

#include "check.h"

#include <stdio.h>
#include <string.h>

typedef struct {
  uv_loop_t loop;
  durable_mesh_t *mesh;
  durable_hub_t *client;
  int client_freed; /* the client hub's memory went: nothing kept it */
  char log[1 << 16];
  size_t log_len;
  int closed;
} fx_t;

static fx_t fx;

static void fx_log(durable_log_level_t level, const char *line, void *data) {
  (void)level;
  fx_t *f = data;
#ifdef MESH_FIXTURE_ECHO_LOG
  fprintf(stderr, "  log: %s\n", line);
#endif
  int n =
      snprintf(f->log + f->log_len, sizeof f->log - f->log_len, "%s\n", line);
  if (n > 0 && (size_t)n < sizeof f->log - f->log_len)
    f->log_len += (size_t)n;
}

static void fx_client_freed(void *data) {
  *(int *)data = 1;
}

/* Open with `o` (store and log default to the fixture's). */
CHECK__UNUSED static void fx_open_options(durable_mesh_options_t o) {
  durable_error_t err = {0};
  memset(&fx, 0, sizeof fx);
  CHECK_EQ_INT(uv_loop_init(&fx.loop), 0);
  if (o.store == NULL)
    o.store = "sqlite::memory:";
  o.log = fx_log;
  o.log_data = &fx;
  int rc = durable_mesh_open(&fx.loop, &o, &fx.mesh, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  rc = durable_mesh_client(fx.mesh, "client/test", &fx.client, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  durable_hub_set_data(fx.client, &fx.client_freed, fx_client_freed);
}

CHECK__UNUSED static void fx_open(void) {
  fx_open_options((durable_mesh_options_t){0});
}

static void on_put(const durable_result_t *res, void *data) {
  CHECK_MSG(res->status == 0, "%s", res->message);
  *(int *)data = 1;
}

CHECK__UNUSED static void fx_put_content(const char *path, const char *type,
                                         const char *content) {
  durable_error_t err = {0};
  int done = 0;
  int rc = durable_store_put(durable_mesh_store(fx.mesh), path, type, content,
                             on_put, &done, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
  CHECK(check_run_until(&fx.loop, &done, 5000));
}

CHECK__UNUSED static void fx_put(const char *path, const char *type) {
  fx_put_content(path, type, "{}");
}

static void on_closed(void *data) {
  *(int *)data = 1;
}

CHECK__UNUSED static void fx_close(void) {
  durable_mesh_close(fx.mesh, on_closed, &fx.closed);
  CHECK(check_run_until(&fx.loop, &fx.closed, 10000));
  CHECK_EQ_INT(fx.client_freed, 1);
  fx.client = NULL;
  CHECK_LOOP_CLOSES(&fx.loop);
}

CHECK__UNUSED static durable_mesh_stats_t stats(void) {
  durable_mesh_stats_t st;
  durable_mesh_stats(fx.mesh, &st);
  return st;
}

/* ---- requests and posts ----------------------------------------------------
 */

/* A sequence number for "what happened first" across callbacks. */
static int events;

/* One request's outcome. */
typedef struct {
  int calls;
  int status;
  int order;   /* ++events when answered */
  uint64_t at; /* uv_now when answered */
  char payload[256];
  char message[512];
} call_t;

static void on_response(const durable_response_t *res, void *data) {
  call_t *c = data;
  c->calls++;
  c->status = res->status;
  c->order = ++events;
  c->at = uv_now(&fx.loop);
  snprintf(c->payload, sizeof c->payload, "%s",
           res->payload ? res->payload : "");
  snprintf(c->message, sizeof c->message, "%s",
           res->message ? res->message : "");
}

CHECK__UNUSED static void request_timed(durable_hub_t *from, const char *to,
                                        const char *type, const char *payload,
                                        uint32_t timeout_ms, call_t *c) {
  durable_error_t err = {0};
  int rc = durable_hub_request(from, to, type, payload, timeout_ms, on_response,
                               c, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
}

CHECK__UNUSED static void request(durable_hub_t *from, const char *to,
                                  const char *type, const char *payload,
                                  call_t *c) {
  request_timed(from, to, type, payload, 5000, c);
}

CHECK__UNUSED static void post(durable_hub_t *from, const char *to,
                               const char *type, const char *payload) {
  durable_error_t err = {0};
  int rc = durable_hub_post(from, to, type, payload, &err);
  CHECK_MSG(rc == 0, "%s", err.message);
}

static int call_done(void *arg) {
  return ((call_t *)arg)->calls > 0;
}

CHECK__UNUSED static void wait_call(call_t *c) {
  CHECK(check_run_until_fn(&fx.loop, call_done, c, 5000));
}

/* Send from the client and wait for the answer. */
CHECK__UNUSED static call_t ask(const char *to, const char *type,
                                const char *payload) {
  call_t c = {0};
  request(fx.client, to, type, payload, &c);
  wait_call(&c);
  CHECK_EQ_INT(c.calls, 1);
  return c;
}

#endif /* DURABLE_TEST_MESH_FIXTURE_H */

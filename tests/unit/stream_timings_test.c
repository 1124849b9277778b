/*
 * stream_timings_test.c: a mesh's stream timings (durable_stream_timings.h,
 * src/streams/directory.c): the defaults a 0 takes, the ones given kept,
 * and the rule durable_mesh_open holds them to.
 *
 * A backoff whose minimum is above its maximum is a mistake an embedder can
 * only make by hand, and one the runtime would carry out silently (every
 * backoff the maximum); so durable_mesh_open refuses it with DURABLE_EINVAL
 * and a message that names both options, before it opens anything: the
 * loop is left with nothing on it.  A timing given alone is never held to
 * the other's default.
 */
#include <durable.h>

#include "check.h"
#include "mesh_fixture.h"
#include "stream.h"

#include <durable_stream_timings.h>

#include <string.h>

static durable_stream_options_t backoff(uint32_t min_ms, uint32_t max_ms) {
  return (durable_stream_options_t){.backoff_min_ms = min_ms,
                                    .backoff_max_ms = max_ms};
}

static void test_rule(void) {
  durable_error_t err = {0};
  durable_stream_options_t o = backoff(500, 100);
  CHECK_EQ_CODE(durable__stream_timings_check(&o, &err), DURABLE_EINVAL);
  CHECK_EQ_CODE(err.code, DURABLE_EINVAL);
  CHECK_EQ_STR(err.message, "streams.backoff_min_ms (500) is above "
                            "streams.backoff_max_ms (100)");
  CHECK_EQ_CODE(durable__stream_timings_check(&o, NULL), DURABLE_EINVAL);
  static const uint32_t good[][2] = {
      {0, 0}, {100, 100}, {100, 500}, {120000, 0}, {0, 1}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    o = backoff(good[i][0], good[i][1]);
    CHECK_OK(durable__stream_timings_check(&o, &err));
  }
}

static void test_open_refuses(void) {
  uv_loop_t loop;
  CHECK_EQ_INT(uv_loop_init(&loop), 0);
  durable_mesh_options_t options = {.store = "sqlite::memory:",
                                    .streams = backoff(2000, 1000)};
  static char not_a_mesh;
  durable_mesh_t *mesh = (durable_mesh_t *)&not_a_mesh; /* the open sets it */
  durable_error_t err = {0};
  CHECK_EQ_CODE(durable_mesh_open(&loop, &options, &mesh, &err),
                DURABLE_EINVAL);
  CHECK(mesh == NULL);
  CHECK_CONTAINS(err.message, "streams.backoff_min_ms (2000)");
  CHECK_CONTAINS(err.message, "streams.backoff_max_ms (1000)");
  CHECK_LOOP_CLOSES(&loop); /* nothing was opened */
}

static void test_defaults(void) {
  fx_open();
  durable_stream_options_t o = durable__stream_options(fx.mesh);
  CHECK_EQ_INT(o.holder_probe_ms, DURABLE__DEFAULT_HOLDER_PROBE_MS);
  CHECK_EQ_INT(o.reclaim_ms, DURABLE__DEFAULT_RECLAIM_MS);
  CHECK_EQ_INT(o.backoff_min_ms, DURABLE__DEFAULT_BACKOFF_MIN_MS);
  CHECK_EQ_INT(o.backoff_max_ms, DURABLE__DEFAULT_BACKOFF_MAX_MS);
  CHECK_EQ_INT(o.liveness_ms, DURABLE__DEFAULT_LIVENESS_MS);
  CHECK_LE_INT(DURABLE__DEFAULT_BACKOFF_MIN_MS,
               DURABLE__DEFAULT_BACKOFF_MAX_MS);
  fx_close();
}

static void test_given_kept(void) {
  fx_open_options((durable_mesh_options_t){.streams = {.holder_probe_ms = 11,
                                                       .reclaim_ms = 12,
                                                       .backoff_min_ms = 13,
                                                       .backoff_max_ms = 13,
                                                       .liveness_ms = 15}});
  durable_stream_options_t o = durable__stream_options(fx.mesh);
  CHECK_EQ_INT(o.holder_probe_ms, 11);
  CHECK_EQ_INT(o.reclaim_ms, 12);
  CHECK_EQ_INT(o.backoff_min_ms, 13);
  CHECK_EQ_INT(o.backoff_max_ms, 13);
  CHECK_EQ_INT(o.liveness_ms, 15);
  fx_close();
  /* one alone, above the other's default: kept, not refused */
  fx_open_options((durable_mesh_options_t){.streams = backoff(120000, 0)});
  o = durable__stream_options(fx.mesh);
  CHECK_EQ_INT(o.backoff_min_ms, 120000);
  CHECK_EQ_INT(o.backoff_max_ms, DURABLE__DEFAULT_BACKOFF_MAX_MS);
  fx_close();
}

static const check_test_t tests[] = {
    {"rule", test_rule},
    {"open_refuses", test_open_refuses},
    {"defaults", test_defaults},
    {"given_kept", test_given_kept},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

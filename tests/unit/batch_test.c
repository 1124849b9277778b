/*
 * batch_test.c: batch handlers seen from C, on sqlite::memory: -- a
 * backlog drained in batches of consecutive items, each batch's effects
 * and acknowledgement in one transaction; the bounds (items, bytes,
 * wait_ms); a failure inside a batch stopping at its item, named with
 * durable_reply_fail_at or found by handing the items alone; and the
 * declaration's checks.  The behaviour specs pin the same from Lua, on both
 * stores, and under SIGKILLs.
 */
#include <durable.h>

/* a failure prints the mesh's log */
#define CHECK_CONTEXT() fx.log
#include "check.h"
#include "mesh_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void open_mesh(void) {
  fx_open_options((durable_mesh_options_t){.store = "sqlite::memory:",
                                           .streams = {.backoff_min_ms = 20,
                                                       .backoff_max_ms = 40,
                                                       .reclaim_ms = 500,
                                                       .holder_probe_ms = 300,
                                                       .liveness_ms = 100}});
}

/* ---- publishing ---------------------------------------------------------- */

static int fed, feeding;
static void on_fed(int status, int64_t seq, const char *message, void *data) {
  (void)seq;
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  fed++;
}
static int all_fed(void *arg) {
  (void)arg;
  return fed == feeding;
}

/* Items a..b of T/{key}'s Batch stream, {"v":N,"pad":"..."} with `pad`
 * bytes of padding, all in flight at once. */
static void publish_range(const char *key, int a, int b, int pad) {
  durable_stream_id_t id = {"Batch", key};
  durable_error_t err = {0};
  char *payload = malloc((size_t)pad + 64);
  fed = 0;
  feeding = b - a + 1;
  for (int i = a; i <= b; i++) {
    snprintf(payload, (size_t)pad + 64, "{\"v\":%d,\"pad\":\"%*s\"}", i, pad,
             "");
    CHECK_OK(
        durable_stream_publish(fx.client, &id, payload, on_fed, NULL, &err));
  }
  free(payload);
  CHECK(check_run_until_fn(&fx.loop, all_fed, NULL, 20000));
}

/* ---- the handler --------------------------------------------------------- */

/* What the handler saw: each call's first item and count, in order. */
enum { CALLS_MAX = 4096 };
static struct {
  int64_t first;
  size_t count;
  size_t bytes;
} calls[CALLS_MAX];
static int ncalls;
static int64_t seen_through; /* the highest sequence seen so far */
static int64_t handled_sum;  /* of "v" over the batches acknowledged */
static int64_t poison;       /* the handler fails on this item */
static int poison_named;     /* ... saying so with durable_reply_fail_at */
static int poison_calls;     /* calls that held the poison */
static int with_effect;      /* a node written per batch */

static int64_t value_of(const char *payload) {
  const char *v = strstr(payload, "\"v\":");
  return v ? strtoll(v + 4, NULL, 10) : -1;
}

/* The call being finished; call number `hold_call` (the first, while a
 * backlog is made) is held until stop_holding. */
static int hold_call;
static struct {
  int64_t first, last, sum;
  int call;
  durable_reply_t *done;
} held;

/* Acknowledge the call held, with its effect when with_effect. */
static void release_held(void) {
  durable_reply_t *done = held.done;
  held.done = NULL;
  if (done == NULL)
    return;
  if (!with_effect) {
    handled_sum += held.sum; /* acknowledged: nothing refuses it here */
    durable_reply_ok(done, NULL);
    return;
  }
  char path[64], content[96];
  snprintf(path, sizeof path, "T/fx/_Effect/%lld", (long long)held.first);
  snprintf(content, sizeof content, "{\"last\":%lld,\"sum\":%lld,\"call\":%d}",
           (long long)held.last, (long long)held.sum, held.call);
  durable_write_t w = {
      .kind = DURABLE_WRITE_CREATE, .path = path, .content = content};
  durable_error_t err = {0};
  CHECK_OK(durable_reply_commit(done, NULL, &w, 1, &err));
}

/* The backlog is there: the call held (if it came) goes, and no other is. */
static void stop_holding(void) {
  hold_call = 0;
  release_held();
}

static void batch_handler(durable_hub_t *hub, const durable_item_t *items,
                          size_t count, durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  CHECK(count >= 1);
  CHECK(ncalls < CALLS_MAX);
  size_t bytes = 0;
  int64_t sum = 0;
  for (size_t i = 0; i < count; i++) {
    /* consecutive, in order, payloads as published */
    CHECK_EQ_INT(items[i].sequence, items[0].sequence + (int64_t)i);
    CHECK_EQ_INT(value_of(items[i].payload), items[i].sequence);
    CHECK_EQ_STR(items[i].stream.ns, "Batch");
    bytes += strlen(items[i].payload);
    sum += value_of(items[i].payload);
  }
  calls[ncalls].first = items[0].sequence;
  calls[ncalls].count = count;
  calls[ncalls].bytes = bytes;
  ncalls++;
  if (items[count - 1].sequence > seen_through)
    seen_through = items[count - 1].sequence;
  int64_t last = items[count - 1].sequence;
  if (poison && items[0].sequence <= poison && last >= poison) {
    poison_calls++;
    if (poison_named)
      durable_reply_fail_at(done, poison, DURABLE_EFAILED, "poison");
    else
      durable_reply_fail(done, DURABLE_EFAILED, "poison");
    return;
  }
  held.first = items[0].sequence;
  held.last = last;
  held.sum = sum;
  held.done = done;
  held.call = ncalls;
  if (ncalls == hold_call)
    return; /* finished by stop_holding */
  release_held();
}

static void reset(void) {
  hold_call = 1;
  held.done = NULL;
  ncalls = 0;
  seen_through = handled_sum = poison = 0;
  poison_named = poison_calls = with_effect = 0;
}

/* Hubs of BatchNode consume Batch with batch_handler, and `key` is one
 * (made before its items, whose first append wakes it). */
static void consume(const char *key, durable_batch_t batch, int max_attempts) {
  durable_consumer_t c = {.ns = "Batch",
                          .batch_handler = batch_handler,
                          .batch = batch,
                          .max_attempts = max_attempts};
  durable_error_t err = {0};
  CHECK_MSG(durable_node_type_consume(
                durable_node_type_get(fx.mesh, "BatchNode"), &c, &err) == 0,
            "%s", err.message);
  fx_put(key, "BatchNode");
}

/* ---- reading the store --------------------------------------------------- */

static durable_node_t *got_node;
static int got_status, got_done;
static void on_get(const durable_result_t *res, void *data) {
  (void)data;
  got_status = res->status;
  got_node = res->status == 0 ? durable_node_dup(res->node) : NULL;
  got_done = 1;
}

/* The node's content (malloc'ed), or NULL when there is none. */
static char *content_of(const char *path) {
  durable_error_t err = {0};
  got_done = 0;
  CHECK_OK(durable_store_get(durable_mesh_store(fx.mesh), NULL, path, on_get,
                             NULL, &err));
  CHECK(check_run_until(&fx.loop, &got_done, 5000));
  if (got_node == NULL)
    return NULL;
  char *content = strdup(got_node->content);
  durable_node_free(got_node);
  return content;
}

static int64_t checkpoint_of(const char *key) {
  char path[128];
  snprintf(path, sizeof path, "%s/_DurableStream/Batch", key);
  char *content = content_of(path);
  const char *cp = content ? strstr(content, "\"Checkpoint\":") : NULL;
  int64_t v = cp ? strtoll(cp + 13, NULL, 10) : -1;
  free(content);
  return v;
}

/* Run the loop until the stored checkpoint of `key` reaches `want`
 * (looked at every 10 ms: a look runs the loop itself). */
static void run_until_checkpoint(const char *key, int64_t want) {
  uint64_t deadline = uv_now(&fx.loop) + 20000;
  while (checkpoint_of(key) < want && uv_now(&fx.loop) < deadline)
    check_run_for(&fx.loop, 10);
  CHECK_MSG(checkpoint_of(key) >= want,
            "the checkpoint of %s stayed at %lld, not %lld (%d calls)", key,
            (long long)checkpoint_of(key), (long long)want, ncalls);
}

typedef struct {
  int64_t handled, batches, redelivered;
} counts_t;
static void on_stats(const durable_stream_id_t *id,
                     const durable_stream_stats_t *s, void *data) {
  if (strcmp(id->ns, "Batch") == 0) {
    ((counts_t *)data)->handled += (int64_t)s->handled;
    ((counts_t *)data)->batches += (int64_t)s->batches;
    ((counts_t *)data)->redelivered += (int64_t)s->redelivered;
  }
}

/* ---- the cases ----------------------------------------------------------- */

/* A backlog goes in batches: consecutive, at most `items` each, every item
 * once, the checkpoint at the end, the batches counted. */
static void test_backlog_in_batches(void) {
  open_mesh();
  reset();
  enum { N = 1000 };
  consume("T/backlog", (durable_batch_t){.items = 64}, 0);
  publish_range("T/backlog", 1, N, 0);
  stop_holding();
  run_until_checkpoint("T/backlog", N);
  int64_t next = 1;
  for (int i = 0; i < ncalls; i++) {
    CHECK_EQ_INT(calls[i].first, next); /* no gap, no repeat */
    CHECK_LE_INT(calls[i].count, 64);
    next += (int64_t)calls[i].count;
  }
  CHECK_EQ_INT(next, N + 1);
  CHECK_LE_INT(ncalls, N / 64 + 4); /* batches, not single items */
  CHECK_EQ_INT(handled_sum, (int64_t)N * (N + 1) / 2);
  counts_t n = {0};
  durable_mesh_stream_stats(fx.mesh, on_stats, &n);
  CHECK_EQ_INT(n.handled, N);
  CHECK_EQ_INT(n.batches, ncalls);
  /* the stream node says how many items the last batch covered */
  char *state = content_of("T/backlog/_DurableStream/Batch");
  char want[48];
  snprintf(want, sizeof want, "\"LastBatch\":%zu", calls[ncalls - 1].count);
  CHECK_CONTAINS(state, want);
  free(state);
  fx_close();
}

/* A batch's writes commit with its acknowledgement: one effect per batch,
 * whose sums add up to every item once. */
static void test_effects_per_batch(void) {
  open_mesh();
  reset();
  with_effect = 1;
  enum { N = 300 };
  consume("T/fx", (durable_batch_t){.items = 50}, 0);
  publish_range("T/fx", 1, N, 0);
  stop_holding();
  run_until_checkpoint("T/fx", N);
  int64_t sum = 0;
  for (int i = 0; i < ncalls; i++) {
    char path[64];
    snprintf(path, sizeof path, "T/fx/_Effect/%lld", (long long)calls[i].first);
    char *content = content_of(path);
    CHECK_MSG(content != NULL, "no effect for the batch from %lld",
              (long long)calls[i].first);
    const char *s = strstr(content, "\"sum\":");
    sum += s ? strtoll(s + 6, NULL, 10) : 0;
    free(content);
  }
  CHECK_EQ_INT(sum, (int64_t)N * (N + 1) / 2);
  fx_close();
}

/* A batch whose lease goes while its handler runs writes nothing: an
 * operator's seek fences the holder; its commit is refused, and the batch
 * is handed over again under the new lease, its effect written once. */
static int seek_done;
static void on_seek(int status, int64_t seq, const char *message, void *data) {
  (void)seq;
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  seek_done = 1;
}
static void test_lease_lost_mid_batch(void) {
  open_mesh();
  reset();
  with_effect = 1;
  hold_call = 2;
  enum { N = 200 };
  consume("T/fx", (durable_batch_t){.items = 50}, 0);
  publish_range("T/fx", 1, N, 0);
  while (held.done == NULL || held.call != 2)
    check_run_for(&fx.loop, 5);
  int64_t from = held.first; /* the second call's batch, held */
  CHECK_EQ_INT(checkpoint_of("T/fx"), from - 1);
  durable_stream_id_t id = {"Batch", "T/fx"};
  durable_error_t err = {0};
  seek_done = 0;
  CHECK_OK(durable_stream_seek(fx.mesh, &id, from - 1, on_seek, NULL, &err));
  CHECK(check_run_until(&fx.loop, &seek_done, 5000));
  stop_holding(); /* its commit now meets the new epoch */
  run_until_checkpoint("T/fx", N);
  char path[64];
  snprintf(path, sizeof path, "T/fx/_Effect/%lld", (long long)from);
  char *content = content_of(path);
  CHECK(content != NULL);
  CHECK(strstr(content, "\"call\":2}") == NULL); /* a later call's */
  free(content);
  /* every item's value once over the effects written */
  int64_t sum = 0;
  for (int i = 0; i < ncalls; i++) {
    if (i > 0 && calls[i].first == calls[i - 1].first)
      continue; /* handed again: one effect node per first item */
    snprintf(path, sizeof path, "T/fx/_Effect/%lld", (long long)calls[i].first);
    char *c = content_of(path);
    const char *s = c ? strstr(c, "\"sum\":") : NULL;
    sum += s ? strtoll(s + 6, NULL, 10) : 0;
    free(c);
  }
  CHECK_EQ_INT(sum, (int64_t)N * (N + 1) / 2);
  fx_close();
}

/* `bytes` bounds a batch's payloads; a first item over it goes alone. */
static void test_bytes_bound(void) {
  open_mesh();
  reset();
  consume("T/bytes", (durable_batch_t){.items = 100, .bytes = 500}, 0);
  publish_range("T/bytes", 1, 40, 100); /* about 120 bytes each */
  publish_range("T/bytes", 41, 41, 2000);
  publish_range("T/bytes", 42, 60, 100);
  stop_holding();
  run_until_checkpoint("T/bytes", 60);
  int64_t next = 1;
  for (int i = 0; i < ncalls; i++) {
    CHECK_EQ_INT(calls[i].first, next);
    if (calls[i].count > 1)
      CHECK_LE_INT(calls[i].bytes, 500);
    if (calls[i].first <= 41 && calls[i].first + (int64_t)calls[i].count > 41)
      CHECK_EQ_INT(calls[i].count, 1); /* the large one alone */
    next += (int64_t)calls[i].count;
  }
  CHECK_EQ_INT(next, 61);
  CHECK_LE_INT(ncalls, 20); /* four of the small ones fit a batch */
  fx_close();
}

/* Without wait_ms a batch goes with what is there: the first item of an
 * idle stream alone.  With it, items that come within the wait join. */
static uv_timer_t trickle_timer;
static int trickled;
static void on_trickle(uv_timer_t *t) {
  (void)t;
  publish_range("T/wait", trickled + 1, trickled + 1, 0);
  if (++trickled == 5)
    uv_timer_stop(&trickle_timer);
}
static void test_wait_ms(void) {
  open_mesh();
  reset();
  hold_call = 0;
  consume("T/nowait", (durable_batch_t){.items = 10}, 0);
  publish_range("T/nowait", 1, 1, 0);
  run_until_checkpoint("T/nowait", 1);
  CHECK_EQ_INT(ncalls, 1);
  CHECK_EQ_INT(calls[0].count, 1);
  fx_close();

  open_mesh();
  reset();
  hold_call = 0;
  consume("T/wait", (durable_batch_t){.items = 5, .wait_ms = 10000}, 0);
  trickled = 0;
  uv_timer_init(&fx.loop, &trickle_timer);
  uv_timer_start(&trickle_timer, on_trickle, 30, 30);
  run_until_checkpoint("T/wait", 5);
  CHECK_EQ_INT(ncalls, 1); /* full before the wait was over */
  CHECK_EQ_INT(calls[0].count, 5);
  uv_close((uv_handle_t *)&trickle_timer, NULL);
  fx_close();

  /* a batch that does not fill goes once its wait is over */
  open_mesh();
  reset();
  hold_call = 0;
  consume("T/short", (durable_batch_t){.items = 5, .wait_ms = 200}, 0);
  publish_range("T/short", 1, 2, 0);
  uint64_t t0 = uv_now(&fx.loop);
  run_until_checkpoint("T/short", 2);
  CHECK_EQ_INT(ncalls, 1);
  CHECK_EQ_INT(calls[0].count, 2);
  CHECK_GE_INT(uv_now(&fx.loop) - t0, 150);
  fx_close();
}

/* A poison item among batches: the items before and after it handled once
 * each, in order; it fails alone max_attempts times and goes to the dead
 * letters.  Named: the items before it go again as one batch.  Unnamed:
 * the batch's items alone, each once. */
static void poison_case(int named) {
  open_mesh();
  reset();
  poison = 37;
  poison_named = named;
  enum { N = 100 };
  consume("T/poison", (durable_batch_t){.items = 16}, 3);
  publish_range("T/poison", 1, N, 0);
  stop_holding();
  run_until_checkpoint("T/poison", N);
  /* every good item once, and so its value once in the sum */
  CHECK_EQ_INT(handled_sum, (int64_t)N * (N + 1) / 2 - poison);
  /* the batch that held it, then three times alone */
  CHECK_EQ_INT(poison_calls, 4);
  int alone = 0;
  for (int i = 0; i < ncalls; i++)
    if (calls[i].first == poison && calls[i].count == 1)
      alone++;
  CHECK_EQ_INT(alone, 3);
  /* after the batch that failed: named, the items before the poison as
   * one batch, then the poison alone; unnamed, each of its items alone */
  int f = 0;
  while (f < ncalls && !(calls[f].first <= poison &&
                         calls[f].first + (int64_t)calls[f].count > poison))
    f++;
  CHECK(f + 2 < ncalls);
  int64_t from = calls[f].first, to = from + (int64_t)calls[f].count - 1;
  CHECK_GT_INT(calls[f].count, 1);
  CHECK_LT_INT(from, poison); /* (the held first call ends before it) */
  if (named) {
    CHECK_EQ_INT(calls[f + 1].first, from);
    CHECK_EQ_INT(calls[f + 1].count, poison - from);
    CHECK_EQ_INT(calls[f + 2].first, poison);
    CHECK_EQ_INT(calls[f + 2].count, 1);
  } else {
    for (int i = f + 1; i < ncalls && calls[i].first <= to; i++)
      CHECK_EQ_INT(calls[i].count, 1);
  }
  /* handed again: every item of the failed batch but the poison once (in
   * the batch of those before it, or alone), and the poison three times */
  counts_t n = {0};
  durable_mesh_stream_stats(fx.mesh, on_stats, &n);
  CHECK_EQ_INT(n.redelivered, (int64_t)calls[f].count - 1 + 3);
  char *letter = content_of("T/poison/_DurableStream/Batch.dead/"
                            "_DurableStreamItem/000000000001");
  CHECK_MSG(letter != NULL, "no dead letter");
  CHECK_CONTAINS(letter, "poison");
  free(letter);
  CHECK_CONTAINS(fx.log, "was NOT acknowledged");
  /* order: no call starts past where the acknowledged ones ended */
  int64_t next = 1;
  for (int i = 0; i < ncalls; i++) {
    CHECK_LE_INT(calls[i].first, next);
    int64_t end = calls[i].first + (int64_t)calls[i].count;
    int failed = calls[i].first <= poison && end > poison;
    if (!failed)
      next = end;
    else if (calls[i].count == 1)
      next = poison + 1; /* retried, or dead-lettered */
  }
  fx_close();
}
static void test_poison_named(void) {
  poison_case(1);
}
static void test_poison_unnamed(void) {
  poison_case(0);
}

/* The declaration's checks. */
static void test_checks(void) {
  open_mesh();
  durable_error_t err = {0};
  durable_node_type_t *type = durable_node_type_get(fx.mesh, "BatchNode");
  durable_consumer_t c = {.ns = "Batch", .batch_handler = batch_handler};
  CHECK_EQ_CODE(durable_node_type_consume(type, &c, &err), DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "batch.items is 0");
  c.batch.items = DURABLE_BATCH_ITEMS_MAX + 1;
  CHECK_EQ_CODE(durable_node_type_consume(type, &c, &err), DURABLE_EINVAL);
  c.batch.items = 10;
  c.batch.wait_ms = DURABLE_BATCH_WAIT_MAX_MS + 1;
  CHECK_EQ_CODE(durable_node_type_consume(type, &c, &err), DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "batch.wait_ms");
  c.batch.wait_ms = 0;
  c.handler = (durable_item_handler_cb)(void (*)(void))batch_handler;
  CHECK_EQ_CODE(durable_node_type_consume(type, &c, &err), DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "one of them");
  fx_close();
}

static const check_test_t tests[] = {
    {"backlog_in_batches", test_backlog_in_batches},
    {"effects_per_batch", test_effects_per_batch},
    {"lease_lost_mid_batch", test_lease_lost_mid_batch},
    {"bytes_bound", test_bytes_bound},
    {"wait_ms", test_wait_ms},
    {"poison_named", test_poison_named},
    {"poison_unnamed", test_poison_unnamed},
    {"checks", test_checks},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

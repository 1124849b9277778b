/*
 * stream_test.c: durable streams seen from C: publish, the stream hub's
 * serial chain, the leased consumer on a NodeType, recycle mid-stream, the
 * plain reader.  The behaviour specs (tests/spec/streams_spec.lua) pin the
 * consumer's seven cases from Lua on both stores; this unit keeps the C API
 * honest on its own, on sqlite::memory:.  The mesh, its client hub and its
 * log are tests/support/mesh_fixture.h's, with short stream timings.
 */
#include <durable.h>

#include "check.h"
#include "mesh_fixture.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *store_url = "sqlite::memory:";

static void open_mesh(void) {
  fx_open_options((durable_mesh_options_t){.store = store_url,
                                           .streams = {.backoff_min_ms = 50,
                                                       .backoff_max_ms = 200,
                                                       .reclaim_ms = 500,
                                                       .holder_probe_ms = 300,
                                                       .liveness_ms = 100}});
}

static void close_mesh(void) {
  fx_close();
}

/* publish and wait for the sequence */
static int64_t got_seq;
static int got;
static void on_seq(int status, int64_t seq, const char *message, void *data) {
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  got_seq = seq;
  got = 1;
}

static int64_t publish(const char *ns, const char *key, const char *payload) {
  durable_stream_id_t id = {ns, key};
  durable_error_t err = {0};
  got = 0;
  CHECK_MSG(
      durable_stream_publish(fx.client, &id, payload, on_seq, NULL, &err) == 0,
      "%s", err.message);
  CHECK(check_run_until(&fx.loop, &got, 5000));
  return got_seq;
}

/* the probe handler: records sequences, checks payload == sequence, finishes
 * after 5 ms */
static uint64_t probe_delay_ms = 5;
static int64_t handled[256];
static int nhandled, active, max_active;
typedef struct {
  uv_timer_t t;
  durable_reply_t *done;
} later_t;
static void on_later_closed(uv_handle_t *h) {
  free(h);
}
static void on_later(uv_timer_t *t) {
  later_t *l = (later_t *)t;
  active--;
  durable_reply_ok(l->done, NULL);
  uv_close((uv_handle_t *)t, on_later_closed);
}
static void probe(durable_hub_t *hub, const durable_item_t *item,
                  durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  char want[32];
  snprintf(want, sizeof want, "{\"v\":%lld}", (long long)item->sequence);
  CHECK_EQ_STR(item->payload, want);
  if (++active > max_active)
    max_active = active;
  handled[nhandled++] = item->sequence;
  later_t *l = malloc(sizeof *l);
  l->done = done;
  uv_timer_init(&fx.loop, &l->t);
  uv_timer_start(&l->t, on_later, probe_delay_ms, 0);
}

static int handled_at_least_n;
static int handled_at_least(void *arg) {
  return nhandled >= *(int *)arg;
}

static void publish_range(const char *key, int a, int b) {
  for (int i = a; i <= b; i++) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"v\":%d}", i);
    CHECK_EQ_INT(publish("Probe", key, payload), i);
  }
}

/* ProbeNode consumes the family Probe with `probe`, from a clean count. */
static void probe_consumes(void) {
  nhandled = active = max_active = 0;
  durable_error_t err = {0};
  durable_consumer_t c = {.ns = "Probe", .handler = probe};
  CHECK_OK(durable_node_type_consume(
      durable_node_type_get(fx.mesh, "ProbeNode"), &c, &err));
}

static void test_recycle_mid_stream(void) {
  open_mesh();
  probe_consumes();
  durable_error_t err = {0};
  fx_put("T/probe-recycle", "ProbeNode");
  publish_range("T/probe-recycle", 1, 40);
  handled_at_least_n = 12;
  CHECK(check_run_until_fn(&fx.loop, handled_at_least, &handled_at_least_n,
                           10000));
  CHECK_OK(durable_mesh_recycle(fx.mesh, "T/probe-recycle", NULL, NULL, &err));
  publish_range("T/probe-recycle", 41, 60);
  handled_at_least_n = 60;
  CHECK_MSG(check_run_until_fn(&fx.loop, handled_at_least, &handled_at_least_n,
                               20000),
            "handled %d; log:\n%s", nhandled, fx.log);
  check_run_for(&fx.loop, 300); /* quiet: a repeat would show here */
  CHECK_EQ_INT(nhandled, 60);
  for (int i = 0; i < 60; i++)
    CHECK_EQ_INT(handled[i], i + 1);
  CHECK_EQ_INT(max_active, 1);
  CHECK_CONTAINS(fx.log, "lease granted to T/probe-recycle");
  CHECK_CONTAINS(fx.log, "ORPHANED: T/probe-recycle released the lease");
  close_mesh();
}

/* a plain reader from the middle */
static int64_t read_seqs[64];
static int nread;
static void on_read(durable_reader_t *r, int status, const durable_item_t *item,
                    const char *message, void *data) {
  (void)r;
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  read_seqs[nread++] = item->sequence;
}
static int read_n;
static int read_at_least(void *arg) {
  return nread >= *(int *)arg;
}

static void test_reader_and_stream_hub_recycle(void) {
  open_mesh();
  publish_range("T/plain", 1, 10);
  durable_error_t err = {0};
  CHECK_OK(durable_mesh_recycle(fx.mesh, "T/plain/_DurableStream/Probe", NULL,
                                NULL, &err));
  publish_range("T/plain", 11, 20); /* continues: no gap, no reuse */
  durable_reader_t *r;
  nread = 0;
  durable_stream_id_t id = {"Probe", "T/plain"};
  CHECK_OK(durable_stream_read(fx.mesh, &id, 5, NULL, on_read, NULL, &r, &err));
  read_n = 15;
  CHECK(check_run_until_fn(&fx.loop, read_at_least, &read_n, 5000));
  publish_range("T/plain", 21, 21); /* the live tail */
  read_n = 16;
  CHECK(check_run_until_fn(&fx.loop, read_at_least, &read_n, 5000));
  for (int i = 0; i < 16; i++)
    CHECK_EQ_INT(read_seqs[i], i + 6);
  durable_reader_close(r);
  close_mesh();
}

/* closing the mesh is a graceful leave: the item in flight finishes, the
 * lease is released (the stream shows OrphanedAt), nothing is redelivered */
static durable_node_t *got_node;
static void on_get(const durable_result_t *r, void *data) {
  (void)data;
  CHECK_MSG(r->status == 0, "%s", r->message);
  got_node = durable_node_dup(r->node);
}

/* A mesh on a SQLite file in a fresh folder `dir` (which the caller gives
 * back with remove_file_store), for what a second connection must see. */
static char file_url[128];
static void open_file_mesh(char dir[32]) {
  snprintf(dir, 32, "/tmp/durable-stream-test.XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  snprintf(file_url, sizeof file_url, "sqlite:%s/s.db", dir);
  store_url = file_url;
  open_mesh();
}

static void remove_file_store(const char *dir) {
  store_url = "sqlite::memory:";
  check_remove_dir(dir);
}

static void test_close_releases(void) {
  char dir[32];
  open_file_mesh(dir);
  probe_consumes();
  durable_error_t err = {0};
  fx_put("T/leaver", "ProbeNode");
  publish_range("T/leaver", 1, 5);
  handled_at_least_n = 3;
  CHECK(check_run_until_fn(&fx.loop, handled_at_least, &handled_at_least_n,
                           10000));
  close_mesh(); /* mid-stream */
  CHECK_CONTAINS(fx.log, "ORPHANED: T/leaver released the lease");
  int before = nhandled;

  open_mesh(); /* a later host: nobody consumes here; read the node */
  got_node = NULL;
  CHECK_OK(durable_store_get(durable_mesh_store(fx.mesh), NULL,
                             "T/leaver/_DurableStream/Probe", on_get, NULL,
                             &err));
  while (got_node == NULL)
    uv_run(&fx.loop, UV_RUN_ONCE);
  CHECK_CONTAINS(got_node->content, "\"Subscriber\":null");
  CHECK_CONTAINS(got_node->content, "\"LastSubscriber\":\"T/leaver\"");
  char want[64];
  snprintf(want, sizeof want, "\"Checkpoint\":%d,", before);
  CHECK_CONTAINS(got_node->content, want); /* every handled item acknowledged */
  CHECK(strstr(got_node->content, "\"OrphanedAt\":null") == NULL);
  durable_node_free(got_node);
  close_mesh();
  remove_file_store(dir);
}

/* A holder that is recycling is alive: a claim from elsewhere is refused
 * while its item in flight finishes (no takeover, no second handler), and
 * the release that follows lets the claimant in. */
static void test_recycling_holder_keeps_lease(void) {
  open_mesh();
  probe_delay_ms = 400; /* the item in flight outlasts the claim below */
  probe_consumes();
  durable_error_t err = {0};
  fx_put("T/holder", "ProbeNode");
  publish_range("T/holder", 1, 1);
  CHECK(check_run_until(&fx.loop, &active, 5000)); /* item 1 in its handler */
  CHECK_OK(durable_mesh_recycle(fx.mesh, "T/holder", NULL, NULL, &err));
  call_t claim = {0};
  request(fx.client, "T/holder/_DurableStream/Probe", "durable.claim",
          "{\"Subscriber\":\"client/other\"}", &claim);
  wait_call(&claim);
  CHECK_EQ_CODE(claim.status, 0);
  CHECK_CONTAINS(claim.payload, "\"Granted\":false");
  CHECK(strstr(fx.log, "TOOK OVER") == NULL);
  int one = 1;
  CHECK(check_run_until_fn(&fx.loop, handled_at_least, &one, 5000));
  probe_delay_ms = 5;
  close_mesh();
}

/* T/far's Probe stream, written by hand as held by T/far in the process
 * (store instance) `instance`. */
static void hold_far(const char *instance) {
  char state[512];
  snprintf(state, sizeof state,
           "{\"Namespace\":\"Probe\",\"Key\":\"T/far\",\"LastSequence\":0,"
           "\"Subscriber\":\"T/far\",\"SubscriberInstance\":\"%s\","
           "\"LeaseEpoch\":3,\"Checkpoint\":0}",
           instance);
  fx_put_content("T/far/_DurableStream/Probe", "DurableStream", state);
}

/* A lease held in another process: while that process's store is open --
 * here a second store on the same file, holding its liveness lock -- a
 * claim is refused without any ping; once it is gone, the claim takes the
 * lease over and says from which process. */
static void claim_against(const char *instance, call_t *claim) {
  hold_far(instance);
  memset(claim, 0, sizeof *claim);
  request(fx.client, "T/far/_DurableStream/Probe", "durable.claim",
          "{\"Subscriber\":\"client/near\"}", claim);
  wait_call(claim);
  CHECK_EQ_CODE(claim->status, 0);
}

static void on_other_closed(void *data) {
  *(int *)data = 1;
}

static void test_holder_in_another_process(void) {
  char dir[32];
  open_file_mesh(dir);
  durable_store_t *other = NULL;
  durable_error_t err = {0};
  CHECK_OK(durable_store_open(&fx.loop, file_url, &other, &err));
  char theirs[DURABLE_INSTANCE_MAX];
  snprintf(theirs, sizeof theirs, "%s", durable_store_instance(other));

  call_t claim;
  claim_against(theirs, &claim);
  CHECK_CONTAINS(claim.payload, "\"Granted\":false");
  CHECK_CONTAINS(claim.payload, theirs); /* HolderInstance */
  CHECK(strstr(fx.log, "TOOK OVER") == NULL);

  int closed = 0;
  durable_store_close(other, on_other_closed, &closed);
  CHECK(check_run_until(&fx.loop, &closed, 5000));
  claim_against(theirs, &claim);
  CHECK_CONTAINS(claim.payload, "\"Granted\":true");
  CHECK_CONTAINS(claim.payload, "\"Epoch\":4");
  char took[DURABLE_INSTANCE_MAX + 96];
  snprintf(took, sizeof took,
           "client/near TOOK OVER the lease from T/far of process %s, which "
           "is gone",
           theirs);
  CHECK_CONTAINS(fx.log, took);
  close_mesh();
  remove_file_store(dir);
}

/* A host's own append to a stream whose holder's process is gone: the
 * change feed does not tell the host of its own commits, so the append
 * itself names the stream to the waker, which finds the process gone and
 * wakes the owner here, whose consumer takes the lease over. */
static void test_own_append_to_a_dead_holder(void) {
  char dir[32];
  open_file_mesh(dir);
  probe_consumes();
  durable_error_t err = {0};
  fx_put("T/far", "ProbeNode");
  durable_store_t *other = NULL;
  CHECK_OK(durable_store_open(&fx.loop, file_url, &other, &err));
  hold_far(durable_store_instance(other));
  int closed = 0; /* its process is gone */
  durable_store_close(other, on_other_closed, &closed);
  CHECK(check_run_until(&fx.loop, &closed, 5000));
  CHECK_OK(durable_mesh_start_hosting(fx.mesh, &err)); /* nothing waits yet */
  publish_range("T/far", 1, 2);
  int two = 2;
  CHECK(check_run_until_fn(&fx.loop, handled_at_least, &two, 5000));
  CHECK_EQ_INT(handled[0], 1);
  CHECK_EQ_INT(handled[1], 2);
  CHECK_CONTAINS(fx.log, "TOOK OVER the lease from T/far of process");
  close_mesh();
  remove_file_store(dir);
}

/* A read that fails while an item is in a consumer's handler (the next
 * page, asked for ahead) stops the consumer with that failure once the
 * items read before it are handled: it is never swallowed, which would
 * leave a consumer that neither gets an item nor fails (and so never backs
 * off and claims again). */
static int fed, fed_ok, ahead_handled;
static char ahead_file[160];
static void on_fed(int status, int64_t seq, const char *message, void *data) {
  (void)seq;
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  fed_ok++;
}

static int all_fed(void *arg) {
  (void)arg;
  return fed_ok >= fed;
}

typedef struct {
  uv_timer_t t;
  durable_reply_t *done;
} ahead_later_t;

static void on_ahead_closed(uv_handle_t *h) {
  free(h);
}

static void on_ahead_later(uv_timer_t *t) {
  ahead_later_t *l = (ahead_later_t *)t;
  durable_reply_ok(l->done, NULL);
  uv_close((uv_handle_t *)t, on_ahead_closed);
}

/* Finishes each item on a later loop turn, as real work does; on the first
 * item, the store's item table goes away under the reader. */
static void ahead_handler(durable_hub_t *hub, const durable_item_t *item,
                          durable_reply_t *done, void *data) {
  (void)hub;
  (void)item;
  (void)data;
  if (++ahead_handled == 1) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open(ahead_file, &db), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db,
                              "ALTER TABLE durable_stream_items RENAME "
                              "TO durable_stream_items_gone",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
  }
  ahead_later_t *l = malloc(sizeof *l);
  CHECK(l != NULL);
  l->done = done;
  uv_timer_init(&fx.loop, &l->t);
  uv_timer_start(&l->t, on_ahead_later, 0, 0);
}

static int consumer_failed(void *arg) {
  (void)arg;
  return strstr(fx.log, "was NOT acknowledged") != NULL;
}

static void test_consumer_reports_a_failed_read_ahead(void) {
  char dir[32];
  snprintf(dir, sizeof dir, "/tmp/durable-stream-test.XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  /* relaxed: a thousand acknowledgements in a moment */
  snprintf(file_url, sizeof file_url, "sqlite:%s/s.db?relaxed", dir);
  snprintf(ahead_file, sizeof ahead_file, "%s/s.db", dir);
  store_url = file_url;
  open_mesh();
  durable_error_t err = {0};
  durable_stream_id_t id = {"Probe", "T/ahead"};
  enum { N = 1500 }; /* more than one page of the reader's */
  for (fed = 0; fed < N; fed++) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"v\":%d}", fed + 1);
    CHECK_OK(
        durable_stream_publish(fx.client, &id, payload, on_fed, NULL, &err));
  }
  CHECK(check_run_until_fn(&fx.loop, all_fed, NULL, 20000));
  ahead_handled = 0;
  durable_consumer_t c = {.ns = "Probe", .handler = ahead_handler};
  durable_hub_t *hub = NULL;
  CHECK_OK(durable_mesh_client(fx.mesh, "T/ahead", &hub, &err));
  CHECK_OK(durable_hub_consume(hub, &c, NULL, &err));
  CHECK_MSG(check_run_until_fn(&fx.loop, consumer_failed, NULL, 20000),
            "the consumer stopped with neither an item nor a failure after "
            "%d items",
            ahead_handled);
  CHECK_GE_INT(ahead_handled, 1000); /* what was read was handled first */
  CHECK_LT_INT(ahead_handled, N);    /* the rest could not be read */
  CHECK_CONTAINS(fx.log, "durable_stream_items");
  close_mesh();
  remove_file_store(dir);
}

/* durable_consumer_stop: the item in flight finishes and is acknowledged,
 * nothing after it starts, the lease is released before the callback, and a
 * consumer started later resumes after the checkpoint. */
static int stopped;
static uv_timer_t pause_timer;
static void on_pause(uv_timer_t *t) {
  *(int *)t->data = 1;
}
static void on_stopped(int status, const char *message, void *data) {
  (void)message;
  (void)data;
  CHECK_EQ_CODE(status, 0);
  stopped++;
}

static int stopper_key(durable_hub_t *hub, char *out, size_t size, void *data) {
  (void)hub;
  (void)data;
  snprintf(out, size, "T/stopper");
  return 0;
}

static void test_consumer_stop(void) {
  open_mesh();
  nhandled = active = max_active = 0;
  probe_delay_ms = 20; /* the stop arrives while an item is in flight */
  durable_error_t err = {0};
  publish_range("T/stopper", 1, 10);
  durable_consumer_t c = {.ns = "Probe", .handler = probe};
  durable_hub_t *hub = NULL;
  durable_consumer_handle_t *handle = NULL;
  CHECK_OK(durable_mesh_client(fx.mesh, "T/stopper", &hub, &err));
  CHECK_OK(durable_hub_consume(hub, &c, &handle, &err));
  CHECK(handle != NULL);
  handled_at_least_n = 3;
  CHECK(check_run_until_fn(&fx.loop, handled_at_least, &handled_at_least_n,
                           10000));
  CHECK_EQ_INT(active, 1); /* item 3 is in flight */
  stopped = 0;
  durable_consumer_stop(handle, on_stopped, NULL);
  CHECK_EQ_INT(stopped, 0); /* never from inside the call */
  CHECK(check_run_until(&fx.loop, &stopped, 5000));
  CHECK_EQ_INT(active, 0);
  CHECK_EQ_INT(nhandled, 3);
  /* the lease is free and item 3 acknowledged */
  got_node = NULL;
  CHECK_OK(durable_store_get(durable_mesh_store(fx.mesh), NULL,
                             "T/stopper/_DurableStream/Probe", on_get, NULL,
                             &err));
  while (got_node == NULL)
    uv_run(&fx.loop, UV_RUN_ONCE);
  CHECK_CONTAINS(got_node->content, "\"Subscriber\":null");
  CHECK_CONTAINS(got_node->content, "\"Checkpoint\":3,");
  durable_node_free(got_node);
  /* nothing more is handled by the stopped consumer ... */
  publish_range("T/stopper", 11, 11);
  int paused = 0;
  uv_timer_init(&fx.loop, &pause_timer);
  pause_timer.data = &paused;
  uv_timer_start(&pause_timer, on_pause, 100, 0);
  CHECK(check_run_until(&fx.loop, &paused, 5000));
  uv_close((uv_handle_t *)&pause_timer, NULL);
  CHECK_EQ_INT(nhandled, 3);
  /* ... and a new one resumes after the checkpoint */
  durable_hub_t *next = NULL;
  CHECK_OK(durable_mesh_client(fx.mesh, "T/stopper2", &next, &err));
  c.key_of = stopper_key;
  CHECK_OK(durable_hub_consume(next, &c, NULL, &err));
  handled_at_least_n = 11;
  CHECK(check_run_until_fn(&fx.loop, handled_at_least, &handled_at_least_n,
                           10000));
  for (int i = 0; i < 11; i++)
    CHECK_EQ_INT(handled[i], i + 1);
  probe_delay_ms = 5;
  close_mesh();
}

/* durable_reply_commit from a C handler: each item's write goes in with its
 * acknowledgement; a write the database refuses writes nothing of the item
 * and leaves it unacknowledged (retried after the backoff). */
static int committed;
static char commit_block[64];
static void commit_handler(durable_hub_t *hub, const durable_item_t *item,
                           durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  char path[64], content[48];
  snprintf(path, sizeof path, "T/commit/_Effect/%lld",
           (long long)item->sequence);
  snprintf(content, sizeof content, "{\"seq\":%lld}",
           (long long)item->sequence);
  durable_write_t w[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = path, .content = content},
      {.kind = DURABLE_WRITE_CREATE, .path = commit_block}};
  size_t n = item->sequence == 2 && commit_block[0] ? 2 : 1;
  durable_error_t err = {0};
  CHECK_OK(durable_reply_commit(done, NULL, w, n, &err));
  committed++;
}

static int64_t checkpoint_of(const char *stream_path) {
  durable_error_t err = {0};
  got_node = NULL;
  CHECK_OK(durable_store_get(durable_mesh_store(fx.mesh), NULL, stream_path,
                             on_get, NULL, &err));
  while (got_node == NULL)
    uv_run(&fx.loop, UV_RUN_ONCE);
  const char *cp = strstr(got_node->content, "\"Checkpoint\":");
  int64_t v = cp ? strtoll(cp + 13, NULL, 10) : -1;
  durable_node_free(got_node);
  return v;
}

typedef struct {
  int done, status;
} got_t;
static void on_got(const durable_result_t *r, void *data) {
  got_t *g = data;
  g->status = r->status;
  g->done = 1;
}

static int effect_present(const char *path) {
  durable_error_t err = {0};
  got_t g = {0};
  CHECK_OK(durable_store_get(durable_mesh_store(fx.mesh), NULL, path, on_got,
                             &g, &err));
  CHECK(check_run_until(&fx.loop, &g.done, 5000));
  return g.status == 0;
}

static int commits_at_least(void *arg) {
  return committed >= *(int *)arg;
}

static void test_reply_commit(void) {
  open_mesh();
  committed = 0;
  snprintf(commit_block, sizeof commit_block, "T/commit/_Block");
  fx_put("T/commit/_Block", "");
  durable_error_t err = {0};
  publish_range("T/commit", 1, 3);
  durable_consumer_t c = {.ns = "Probe", .handler = commit_handler};
  durable_hub_t *hub = NULL;
  CHECK_OK(durable_mesh_client(fx.mesh, "T/commit", &hub, &err));
  CHECK_OK(durable_hub_consume(hub, &c, NULL, &err));
  int want = 3; /* item 1, then item 2 twice: refused each time */
  CHECK(check_run_until_fn(&fx.loop, commits_at_least, &want, 10000));
  const char *stream = "T/commit/_DurableStream/Probe";
  CHECK_EQ_INT(checkpoint_of(stream), 1);
  CHECK(effect_present("T/commit/_Effect/1"));
  CHECK(!effect_present("T/commit/_Effect/2")); /* none of item 2's writes */
  CHECK_CONTAINS(fx.log, "was NOT acknowledged");
  /* the blocker gone, item 2 and 3 go in, each with its effect */
  commit_block[0] = '\0';
  int more = committed + 2;
  CHECK(check_run_until_fn(&fx.loop, commits_at_least, &more, 10000));
  for (int i = 0; i < 200 && checkpoint_of(stream) < 3; i++)
    uv_run(&fx.loop, UV_RUN_NOWAIT);
  CHECK_EQ_INT(checkpoint_of(stream), 3);
  CHECK(effect_present("T/commit/_Effect/2"));
  CHECK(effect_present("T/commit/_Effect/3"));
  close_mesh();
}

/* Idempotent publishes from C: durable_stream_publish_with and its id. */
typedef struct {
  int got, status;
  int64_t seq;
} answer_t;
static void on_answer(int status, int64_t seq, const char *message,
                      void *data) {
  answer_t *a = data;
  (void)message;
  a->status = status;
  a->seq = seq;
  a->got = 1;
}
static int both_got(void *arg) {
  answer_t *a = arg;
  return a[0].got && a[1].got;
}
static int64_t last_item;
static int last_item_got;
static void on_last_item(const durable_result_t *res, void *data) {
  (void)data;
  CHECK_EQ_CODE(res->status, 0);
  last_item = res->value;
  last_item_got = 1;
}
static int64_t stored_items(const char *key) {
  durable_stream_id_t id = {"Probe", key};
  char items[DURABLE_PATH_MAX + 32];
  durable_error_t err = {0};
  durable_stream_items_ns(&id, items, sizeof items);
  last_item_got = 0;
  CHECK_OK(durable__store_last_item(durable_mesh_store(fx.mesh), NULL, items,
                                    on_last_item, NULL, &err));
  CHECK(check_run_until(&fx.loop, &last_item_got, 5000));
  return last_item;
}
static int64_t publish_id(const char *key, const char *payload,
                          const char *pid) {
  durable_stream_id_t id = {"Probe", key};
  durable_publish_options_t o = {.id = pid};
  durable_error_t err = {0};
  answer_t a = {0};
  CHECK_MSG(durable_stream_publish_with(fx.client, &id, payload, &o, on_answer,
                                        &a, &err) == 0,
            "%s", err.message);
  CHECK(check_run_until(&fx.loop, &a.got, 5000));
  CHECK_EQ_CODE(a.status, 0);
  return a.seq;
}

/* A stream request as JSON (from a hub that does not speak the typed
 * protocol): what is not JSON, or lacks its field, is refused with EINVAL
 * saying so -- not taken for a lack of memory, which the same parse can
 * also meet (alloc_fault_test's untyped append) -- and a good one works. */
static void test_untyped_requests(void) {
  open_mesh();
  CHECK_EQ_INT(publish("Probe", "T/raw", "{\"a\":0}"), 1); /* the stream */
  const char *to = "T/raw/_DurableStream/Probe";
  call_t c = ask(to, "durable.append", "{\"PayloadJson\": ");
  CHECK_EQ_CODE(c.status, DURABLE_EINVAL);
  CHECK_CONTAINS(c.message, "got a request that is not JSON");
  c = ask(to, "durable.append", "5");
  CHECK_EQ_CODE(c.status, DURABLE_EINVAL);
  CHECK_CONTAINS(c.message, "got an append without PayloadJson");
  c = ask(to, "durable.claim", "{}");
  CHECK_EQ_CODE(c.status, DURABLE_EINVAL);
  CHECK_CONTAINS(c.message, "got a request without Subscriber");
  c = ask(to, "durable.append", "{\"PayloadJson\":\"{\\\"a\\\":1}\"}");
  CHECK_EQ_CODE(c.status, 0);
  CHECK_CONTAINS(c.payload, "\"Sequence\":2");
  CHECK_EQ_INT(stored_items("T/raw"), 2);
  close_mesh();
}

static void test_publish_ids(void) {
  open_mesh();
  const char *key = "T/ids";
  CHECK_EQ_INT(publish_id(key, "{\"v\":1}", "x"), 1);
  CHECK_EQ_INT(publish_id(key, "{\"v\":2}", NULL), 2);
  CHECK_EQ_INT(publish_id(key, "{\"v\":1}", "x"), 1);
  CHECK_EQ_INT(publish("Probe", key, "{\"v\":3}"), 3);
  CHECK_EQ_INT(stored_items(key), 3);
  /* a bad id is refused at the call; the callback never runs */
  durable_stream_id_t id = {"Probe", key};
  durable_publish_options_t bad = {.id = "a/b"};
  durable_error_t err = {0};
  answer_t a[2] = {{0}, {0}};
  CHECK_EQ_CODE(durable_stream_publish_with(fx.client, &id, "{}", &bad,
                                            on_answer, &a[0], &err),
                DURABLE_EINVAL);
  CHECK_CONTAINS(err.message,
                 "publish id 'a/b' is invalid: '/' is not allowed");
  CHECK_EQ_CODE(durable_publish_id_check(NULL, "", &err), DURABLE_EINVAL);
  CHECK_CONTAINS(err.message, "publish id is empty");
  CHECK_EQ_CODE(durable_publish_id_check(&id, "ok-1", &err), 0);
  /* two publishes of one new id at once: one item, one sequence */
  durable_publish_options_t y = {.id = "y"};
  CHECK_OK(durable_stream_publish_with(fx.client, &id, "{\"v\":4}", &y,
                                       on_answer, &a[0], &err));
  CHECK_OK(durable_stream_publish_with(fx.client, &id, "{\"v\":4}", &y,
                                       on_answer, &a[1], &err));
  CHECK(check_run_until_fn(&fx.loop, both_got, a, 5000));
  CHECK_EQ_CODE(a[0].status, 0);
  CHECK_EQ_CODE(a[1].status, 0);
  CHECK_EQ_INT(a[0].seq, 4);
  CHECK_EQ_INT(a[1].seq, 4);
  CHECK_EQ_INT(stored_items(key), 4);
  close_mesh();
}

/* durable_reader_pause / _resume: paused from its callback, a reader hands
 * over nothing more until resumed, then goes on in order. */
static int paused_seen;
static int64_t paused_seqs[64];
static void on_paused_read(durable_reader_t *r, int status,
                           const durable_item_t *item, const char *message,
                           void *data) {
  (void)message;
  (void)data;
  CHECK_EQ_CODE(status, 0);
  paused_seqs[paused_seen++] = item->sequence;
  if (paused_seen == 3)
    durable_reader_pause(r);
}
static int paused_at_least(void *arg) {
  return paused_seen >= *(int *)arg;
}

static void test_reader_pause(void) {
  open_mesh();
  publish_range("T/paused", 1, 10);
  durable_error_t err = {0};
  durable_reader_t *r = NULL;
  durable_stream_id_t id = {"Probe", "T/paused"};
  paused_seen = 0;
  CHECK_OK(durable_stream_read(fx.mesh, &id, 0, NULL, on_paused_read, NULL, &r,
                               &err));
  int three = 3;
  CHECK(check_run_until_fn(&fx.loop, paused_at_least, &three, 5000));
  int paused = 0;
  uv_timer_init(&fx.loop, &pause_timer);
  pause_timer.data = &paused;
  uv_timer_start(&pause_timer, on_pause, 100, 0);
  CHECK(check_run_until(&fx.loop, &paused, 5000));
  uv_close((uv_handle_t *)&pause_timer, NULL);
  CHECK_EQ_INT(paused_seen, 3); /* nothing while paused */
  durable_reader_resume(r);
  int ten = 10;
  CHECK(check_run_until_fn(&fx.loop, paused_at_least, &ten, 5000));
  for (int i = 0; i < 10; i++)
    CHECK_EQ_INT(paused_seqs[i], i + 1);
  durable_reader_close(r);
  close_mesh();
}

/* A reader hands a backlog over item by item, however long it is, on a
 * loop thread with a small stack: an embedder's thread, say.  Each item is
 * one turn of a loop, not a call nested inside the last item's callback
 * (which needed some 2 KB of stack per item of a page, 2 MB a page). */
#define SMALL_STACK_ITEMS 1500
static int small_seen, small_in_order = 1;
static void on_small_read(durable_reader_t *r, int status,
                          const durable_item_t *item, const char *message,
                          void *data) {
  (void)r;
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  if (item->sequence != ++small_seen)
    small_in_order = 0;
}
static int small_read_all(void *arg) {
  (void)arg;
  return small_seen >= SMALL_STACK_ITEMS;
}
static void read_on_small_stack(void *arg) {
  (void)arg;
  durable_error_t err = {0};
  durable_reader_t *r = NULL;
  durable_stream_id_t id = {"Probe", "T/small"};
  CHECK_OK(durable_stream_read(fx.mesh, &id, 0, NULL, on_small_read, NULL, &r,
                               &err));
  CHECK(check_run_until_fn(&fx.loop, small_read_all, NULL, 10000));
  durable_reader_close(r);
}

static void test_reader_small_stack(void) {
  open_mesh();
  publish_range("T/small", 1, SMALL_STACK_ITEMS);
  uv_thread_t t;
  uv_thread_options_t o = {.flags = UV_THREAD_HAS_STACK_SIZE,
                           .stack_size = 512 * 1024};
  CHECK_EQ_INT(uv_thread_create_ex(&t, &o, read_on_small_stack, NULL), 0);
  CHECK_EQ_INT(uv_thread_join(&t), 0);
  CHECK_EQ_INT(small_seen, SMALL_STACK_ITEMS);
  CHECK(small_in_order);
  close_mesh();
}

/* A page of items is read into a few large blocks (node.c), a large item
 * into an allocation of its own: items of either kind, mixed on one page,
 * come back whole and in order. */
#define LARGE_ITEMS 9
static int large_seen, large_ok = 1;
static char *large_payload(int seq) {
  size_t n = seq % 3 == 0 ? 150 * 1024 : 40; /* every third beyond 64 KiB */
  char *p = malloc(n + 16);
  CHECK(p != NULL);
  int at = snprintf(p, n + 16, "\"%d:", seq);
  memset(p + at, 'a' + seq, n - (size_t)at);
  p[n] = '"';
  p[n + 1] = '\0';
  return p;
}
static void on_large_read(durable_reader_t *r, int status,
                          const durable_item_t *item, const char *message,
                          void *data) {
  (void)r;
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  char *want = large_payload((int)item->sequence);
  if (item->sequence != ++large_seen || strcmp(item->payload, want) != 0)
    large_ok = 0;
  free(want);
  /* the node as stored */
  char path[128];
  snprintf(path, sizeof path,
           "T/large/_DurableStream/Probe/_DurableStreamItem/%012lld",
           (long long)item->sequence);
  CHECK_EQ_STR(item->node->path, path);
  CHECK_EQ_STR(item->node->ns,
               "T/large/_DurableStream/Probe/_DurableStreamItem");
  CHECK_EQ_STR(item->node->id, path + strlen(path) - 12);
  CHECK_EQ_STR(item->node->main_node, "T/large");
  CHECK_EQ_STR(item->node->node_type, "DurableStreamItem");
  CHECK(item->node->version > 0 && item->node->created_at > 0);
}
static int large_read_all(void *arg) {
  (void)arg;
  return large_seen >= LARGE_ITEMS;
}

static void test_reader_large_items(void) {
  open_mesh();
  for (int i = 1; i <= LARGE_ITEMS; i++) {
    char *payload = large_payload(i);
    CHECK_EQ_INT(publish("Probe", "T/large", payload), i);
    free(payload);
  }
  durable_error_t err = {0};
  durable_reader_t *r = NULL;
  durable_stream_id_t id = {"Probe", "T/large"};
  CHECK_OK(durable_stream_read(fx.mesh, &id, 0, NULL, on_large_read, NULL, &r,
                               &err));
  CHECK(check_run_until_fn(&fx.loop, large_read_all, NULL, 10000));
  CHECK_EQ_INT(large_seen, LARGE_ITEMS);
  CHECK(large_ok);
  durable_reader_close(r);
  close_mesh();
}

/* A reader closed from inside its callback hands nothing more over, at
 * any item of a page: the first, the middle, the last, the next page's
 * first (ASan and LeakSanitizer in CI see that nothing is used after it is
 * freed, and nothing leaks). */
static int close_at, close_seen;
static void on_closing_read(durable_reader_t *r, int status,
                            const durable_item_t *item, const char *message,
                            void *data) {
  (void)data;
  CHECK_MSG(status == 0, "%s", message);
  close_seen++;
  CHECK_EQ_INT(item->sequence, close_seen);
  if (close_seen == close_at)
    durable_reader_close(r);
}
static int read_to_close(void *arg) {
  (void)arg;
  return close_seen >= close_at;
}
static int read_past_close(void *arg) {
  (void)arg;
  return close_seen > close_at;
}

static void test_reader_closed_in_callback(void) {
  open_mesh();
  publish_range("T/closing", 1, 1100);
  static const int at[] = {1, 500, 1000, 1001};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    close_at = at[i];
    close_seen = 0;
    durable_error_t err = {0};
    durable_reader_t *r = NULL;
    durable_stream_id_t id = {"Probe", "T/closing"};
    CHECK_OK(durable_stream_read(fx.mesh, &id, 0, NULL, on_closing_read, NULL,
                                 &r, &err));
    CHECK(check_run_until_fn(&fx.loop, read_to_close, NULL, 10000));
    /* what would follow the close, given time */
    CHECK(!check_run_until_fn(&fx.loop, read_past_close, NULL, 300));
    CHECK_EQ_INT(close_seen, close_at);
  }
  close_mesh();
}

/* A retention policy's text: what parses, how it is spelled back (the
 * largest unit that divides it), and what is refused with the rule. */
static void test_retention_text(void) {
  static const struct {
    const char *in, *out;
    durable_keep_t keep;
    int64_t value;
  } good[] = {{"all", "all", DURABLE_KEEP_ALL, 0},
              {"0", "0", DURABLE_KEEP_COUNT, 0},
              {"1000", "1000", DURABLE_KEEP_COUNT, 1000},
              {"500ms", "500ms", DURABLE_KEEP_AGE, 500},
              {"90s", "90s", DURABLE_KEEP_AGE, 90000},
              {"120m", "2h", DURABLE_KEEP_AGE, 7200000},
              {"86400000ms", "1d", DURABLE_KEEP_AGE, 86400000},
              {"7d", "7d", DURABLE_KEEP_AGE, 7 * 86400000LL},
              {"36600d", "36600d", DURABLE_KEEP_AGE, 36600 * 86400000LL}};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    durable_retention_t p;
    durable_error_t err = {0};
    CHECK_EQ_INT(durable_retention_parse(good[i].in, &p, &err), 0);
    CHECK_EQ_INT(p.keep, good[i].keep);
    CHECK(p.keep != DURABLE_KEEP_COUNT || p.count == good[i].value);
    CHECK(p.keep != DURABLE_KEEP_AGE || p.age_ms == good[i].value);
    char text[64];
    durable_retention_format(&p, text, sizeof text);
    CHECK_EQ_STR(text, good[i].out);
  }
  durable_retention_t p;
  CHECK_EQ_INT(durable_retention_parse(NULL, &p, NULL), 0);
  CHECK_EQ_INT(p.keep, DURABLE_KEEP_ALL);
  static const char *bad[] = {"",
                              "soon",
                              "-1",
                              "0s",
                              "7 d",
                              "7days",
                              "1.5",
                              "d",
                              "ALL",
                              "99999999999999999d",
                              "9223372036854775807ms",
                              "36601d"}; /* past 100 years */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    durable_error_t err = {0};
    CHECK_EQ_INT(durable_retention_parse(bad[i], &p, &err), DURABLE_EINVAL);
    CHECK(strstr(err.message, "is not a retention policy") != NULL);
  }
}

static const check_test_t tests[] = {
    {"recycle_mid_stream", test_recycle_mid_stream},
    {"reader_and_stream_hub_recycle", test_reader_and_stream_hub_recycle},
    {"close_releases", test_close_releases},
    {"recycling_holder_keeps_lease", test_recycling_holder_keeps_lease},
    {"holder_in_another_process", test_holder_in_another_process},
    {"own_append_to_a_dead_holder", test_own_append_to_a_dead_holder},
    {"consumer_reports_a_failed_read_ahead",
     test_consumer_reports_a_failed_read_ahead},
    {"consumer_stop", test_consumer_stop},
    {"reply_commit", test_reply_commit},
    {"untyped_requests", test_untyped_requests},
    {"publish_ids", test_publish_ids},
    {"reader_pause", test_reader_pause},
    {"reader_small_stack", test_reader_small_stack},
    {"reader_large_items", test_reader_large_items},
    {"reader_closed_in_callback", test_reader_closed_in_callback},
    {"retention_text", test_retention_text},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

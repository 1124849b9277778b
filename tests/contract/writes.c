/*
 * writes.c: the store contract on writes beyond one node: update through a
 * C mutator (alone and fifty at once on one node), batches that commit all
 * or nothing, two stores writing the same nodes in opposite orders (no
 * write fails for a deadlock), and group commit seen as correctness: many
 * puts, and many appends-shaped batches with refusals among them.
 */
#include "contract.h"

static void case_update(void) {
  case_begin("update");
  res_t r = {0};
  int inc = MUT_INCREMENT, nothing = MUT_NOTHING, fail = MUT_FAIL,
      bad = MUT_BAD_JSON, type = MUT_SET_TYPE;
  /* Absent: the mutator sees NULL and creates. */
  CHECK_OK(UPDATE(&r, P("c"), mutate, &inc));
  CHECK_NODE(r.node, P("c"), "", "{\"n\":1}");
  CHECK_OK(UPDATE(&r, P("c"), mutate, &type));
  CHECK_NODE(r.node, P("c"), "Counter", "{\"n\":2}");
  int64_t v = r.node->version;
  /* Type kept when the mutator leaves it. */
  CHECK_OK(UPDATE(&r, P("c"), mutate, &inc));
  CHECK_NODE(r.node, P("c"), "Counter", "{\"n\":3}");
  CHECK_GT_INT(r.node->version, v);
  v = r.node->version;
  /* 0: nothing written, no node. */
  CHECK_OK(UPDATE(&r, P("c"), mutate, &nothing));
  CHECK(r.node == NULL);
  CHECK_OK(UPDATE(&r, P("absent"), mutate, &nothing));
  CHECK(r.node == NULL);
  CHECK_EQ_CODE(GET(&r, NULL, P("absent")), DURABLE_ENOTFOUND);
  /* A negative code fails the write with that code. */
  CHECK_EQ_CODE(UPDATE(&r, P("c"), mutate, &fail), DURABLE_EFAILED);
  /* Content that is not JSON is refused here too. */
  CHECK_EQ_CODE(UPDATE(&r, P("c"), mutate, &bad), DURABLE_EINVAL);
  CHECK_OK(GET(&r, NULL, P("c")));
  CHECK_NODE(r.node, P("c"), "Counter", "{\"n\":3}");
  CHECK_EQ_INT(r.node->version, v);
  res_reset(&r);
  case_end();
}

static void case_update_concurrent(void) {
  enum { N = 50 };
  case_begin("update_concurrent");
  res_t r = {0};
  CHECK_OK(CREATE(&r, P("counter"), "Counter", "{\"n\":0}"));
  static res_t rs[N];
  int inc = MUT_INCREMENT;
  for (int i = 0; i < N; i++) {
    durable_error_t e = {0};
    submitted(durable_store_update(T.store, P("counter"), mutate, &inc, res_cb,
                                   &rs[i], &e),
              &e, "update", P("counter"));
  }
  for (int i = 0; i < N; i++) {
    g_line = __LINE__;
    res_wait(&rs[i]);
    CHECK_OK(rs[i].status);
    CHECK(rs[i].node != NULL);
  }
  /* Each increment saw its own value: all 1..N, once each. */
  int seen[N + 1] = {0};
  for (int i = 0; i < N; i++) {
    int n = -1;
    CHECK_EQ_INT(sscanf(rs[i].node->content, "{\"n\":%d}", &n), 1);
    CHECK(n >= 1 && n <= N);
    CHECK_EQ_INT(seen[n], 0);
    seen[n] = 1;
    res_reset(&rs[i]);
  }
  CHECK_OK(GET(&r, NULL, P("counter")));
  CHECK_EQ_STR(r.node->content, "{\"n\":50}");
  res_reset(&r);
  case_end();
}

/* Two stores (two processes, as far as the database knows) writing the
 * same two nodes in opposite orders, one transaction after the other each,
 * at the same time: on PostgreSQL some pairs deadlock, and the database
 * cancels one of each.  No write may fail for it: a canceled transaction
 * committed nothing and is run again. */
typedef struct {
  durable_store_t *store;
  const char *first, *second;
  int left, failed;
  char message[512];
} cross_t;

static void cross_next(cross_t *x);

static void cross_done(const durable_result_t *result, void *data) {
  cross_t *x = data;
  if (result->status < 0 && x->failed++ == 0)
    snprintf(x->message, sizeof x->message, "%s", result->message);
  cross_next(x);
}

static void cross_next(cross_t *x) {
  if (x->left == 0)
    return;
  x->left--;
  durable_write_t w[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = x->first, .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = x->second, .content = "{}"}};
  durable_error_t e = {0};
  submitted(durable_store_write(x->store, w, 2, cross_done, x, &e), &e, "write",
            x->first);
}

static int cross_over(void *arg) {
  cross_t *x = arg;
  return x[0].left == 0 && x[1].left == 0;
}

static void case_cross_writes(void) {
  case_begin("cross_writes");
  durable_store_t *other = open_store(&T.loop);
  char a[400], b[400];
  /* two partitions: the order must hold across them too */
  snprintf(a, sizeof a, "%s", P("a"));
  snprintf(b, sizeof b, "%sb/cross_writes/b", g_run);
  res_t r = {0};
  CHECK_OK(PUT(&r, a, "T", "{}")); /* rows to lock, partitions made */
  CHECK_OK(PUT(&r, b, "T", "{}"));
  res_reset(&r);
  static cross_t x[2];
  x[0] = (cross_t){.store = T.store, .first = a, .second = b, .left = 100};
  x[1] = (cross_t){.store = other, .first = b, .second = a, .left = 100};
  cross_next(&x[0]);
  cross_next(&x[1]);
  g_line = __LINE__;
  CHECK(check_run_until_fn(&T.loop, cross_over, x, 60000));
  close_store(other); /* runs the last callbacks */
  for (int k = 0; k < 2; k++)
    CHECK_MSG(x[k].failed == 0, "%d writes failed, the first: %s", x[k].failed,
              x[k].message);
  case_end();
}

static void case_batch(void) {
  case_begin("batch");
  res_t r = {0};
  durable_write_t ok[3] = {
      {.kind = DURABLE_WRITE_PUT, .path = P("a"), .content = "{\"i\":1}"},
      {.kind = DURABLE_WRITE_CREATE, .path = P("b"), .content = "{\"i\":2}"},
      {.kind = DURABLE_WRITE_PUT,
       .path = P("c"),
       .node_type = "C",
       .content = "{\"i\":3}"},
  };
  CHECK_OK(WRITE(&r, ok, 3));
  CHECK_NODE(r.node, P("c"), "C", "{\"i\":3}"); /* the last written */
  CHECK_OK(GET(&r, NULL, P("a")));
  CHECK_OK(GET(&r, NULL, P("b")));
  CHECK_OK(GET(&r, NULL, P("c")));

  /* All or nothing: the 3rd write fails, the first two are not written. */
  durable_write_t bad[3] = {
      {.kind = DURABLE_WRITE_PUT, .path = P("x"), .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = P("y"), .content = "{}"},
      {.kind = DURABLE_WRITE_CREATE, .path = P("b"), .content = "{}"},
  };
  CHECK_EQ_CODE(WRITE(&r, bad, 3), DURABLE_EEXIST);
  CHECK_CONTAINS(r.message, P("b")); /* names the write that failed */
  CHECK_EQ_CODE(GET(&r, NULL, P("x")), DURABLE_ENOTFOUND);
  CHECK_EQ_CODE(GET(&r, NULL, P("y")), DURABLE_ENOTFOUND);
  CHECK_OK(GET(&r, NULL, P("b")));
  CHECK_EQ_STR(r.node->content, "{\"i\":2}");

  /* The same with a stale replace, and with a delete of an absent node;
   * an earlier write to an existing node is rolled back too. */
  CHECK_OK(GET(&r, NULL, P("a")));
  int64_t va = r.node->version;
  durable_write_t stale[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = P("a"), .content = "{\"i\":9}"},
      {.kind = DURABLE_WRITE_REPLACE,
       .path = P("c"),
       .content = "{}",
       .expected_version = 1},
  };
  CHECK_EQ_CODE(WRITE(&r, stale, 2), DURABLE_ECONFLICT);
  durable_write_t gone[2] = {
      {.kind = DURABLE_WRITE_DELETE, .path = P("a")},
      {.kind = DURABLE_WRITE_DELETE, .path = P("never")},
  };
  CHECK_EQ_CODE(WRITE(&r, gone, 2), DURABLE_ENOTFOUND);
  CHECK_OK(GET(&r, NULL, P("a")));
  CHECK_EQ_STR(r.node->content, "{\"i\":1}");
  CHECK_EQ_INT(r.node->version, va);

  /* A refusal followed by a write that must read first (a mutator, a
   * delete): on PostgreSQL that read is where the refused write is heard
   * of, before the commit; the same all or nothing. */
  int inc = MUT_INCREMENT;
  durable_write_t then_read[2] = {
      {.kind = DURABLE_WRITE_CREATE, .path = P("b"), .content = "{}"},
      {.kind = DURABLE_WRITE_MUTATE,
       .path = P("m"),
       .mutate = mutate,
       .mutate_arg = &inc},
  };
  CHECK_EQ_CODE(WRITE(&r, then_read, 2), DURABLE_EEXIST);
  CHECK_CONTAINS(r.message, P("b"));
  CHECK_EQ_CODE(GET(&r, NULL, P("m")), DURABLE_ENOTFOUND);
  durable_write_t stale_then_delete[2] = {
      {.kind = DURABLE_WRITE_REPLACE,
       .path = P("c"),
       .content = "{}",
       .expected_version = 1},
      {.kind = DURABLE_WRITE_DELETE, .path = P("a")},
  };
  CHECK_EQ_CODE(WRITE(&r, stale_then_delete, 2), DURABLE_ECONFLICT);
  CHECK_OK(GET(&r, NULL, P("a")));
  CHECK_EQ_INT(r.node->version, va);

  /* Checked before anything is queued: a bad path or bad JSON anywhere. */
  durable_write_t badpath[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = P("z"), .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = P("z//w"), .content = "{}"},
  };
  REFUSED(EINVAL, durable_store_write(T.store, badpath, 2, stray_cb, NULL, &e));
  durable_write_t badjson[3] = {
      {.kind = DURABLE_WRITE_PUT, .path = P("z"), .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = P("w"), .content = "{}"},
      {.kind = DURABLE_WRITE_PUT, .path = P("v"), .content = "{nope"},
  };
  REFUSED(EINVAL, durable_store_write(T.store, badjson, 3, stray_cb, NULL, &e));
  CHECK_EQ_CODE(GET(&r, NULL, P("z")), DURABLE_ENOTFOUND);
  CHECK_EQ_CODE(GET(&r, NULL, P("w")), DURABLE_ENOTFOUND);
  res_reset(&r);
  case_end();
}

/* ---- group commit, seen as correctness ---- */

static void case_group_commit(void) {
  enum { N = 64 };
  case_begin("group_commit");
  static res_t rs[N];
  for (int i = 0; i < N; i++) {
    durable_error_t e = {0};
    char content[32];
    snprintf(content, sizeof(content), "{\"i\":%d}", i);
    const char *p = P("gc/n%02d", i);
    submitted(durable_store_put(T.store, p, "G", content, res_cb, &rs[i], &e),
              &e, "put", p);
  }
  for (int i = 0; i < N; i++) {
    g_line = __LINE__;
    res_wait(&rs[i]);
    CHECK_OK(rs[i].status);
    char content[32];
    snprintf(content, sizeof(content), "{\"i\":%d}", i);
    CHECK_NODE(rs[i].node, P("gc/n%02d", i), "G", content);
    for (int j = 0; j < i; j++)
      CHECK_NE_INT(rs[i].node->version, rs[j].node->version);
  }
  for (int i = 0; i < N; i++)
    res_reset(&rs[i]);
  res_t r = {0};
  char q[400];
  snprintf(q, sizeof(q), "namespace:%s", P("gc"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 100));
  CHECK_EQ_INT(r.count, N);
  CHECK_EQ_INT(r.more, 0);
  res_reset(&r);
  case_end();
}

/* Appends of many streams in one group: each job creates an item (a table
 * of its own) and compare-and-sets its stream row, and jobs beside them
 * update rows through a mutator.  Queued behind a large write, they go as
 * one group, where PostgreSQL sends each kind of write (and the locks) as
 * one statement; every job's outcome must be its own, as when it runs
 * alone.  Once with each order of a job's two writes, then with refusals
 * among them -- a stale compare-and-set, an item that is there already:
 * those two change nothing, the others all they ask. */
enum { GB_STREAMS = 32, GB_MUTATED = 8, GB_BIG = 400 };

typedef struct {
  char stream[GB_STREAMS][400], item[GB_STREAMS][400];
  char counter[GB_MUTATED][400];
  int64_t version[GB_STREAMS];
} gb_t;

/* One wave: the large write, then every append and update at once; `stale`
 * and `taken` name the refused appends (-1: none). */
static void gb_wave(gb_t *g, int wave, int stream_first, int stale, int taken) {
  static durable_write_t big[GB_BIG];
  static char big_path[GB_BIG][400];
  static res_t rs[GB_STREAMS + GB_MUTATED];
  res_t r = {0}, first = {0};
  for (int i = 0; i < GB_STREAMS; i++) {
    snprintf(g->stream[i], sizeof g->stream[i], "%s", P("gb%d/s%02d", wave, i));
    snprintf(g->item[i], sizeof g->item[i], "%s",
             P("gb%d/s%02d/_DurableStreamItem/000000000001", wave, i));
    CHECK_OK(CREATE(&r, g->stream[i], "S", "{\"last\":0}"));
    g->version[i] = r.node->version;
  }
  if (taken >= 0)
    CHECK_OK(CREATE(&r, g->item[taken], "I", "{\"before\":true}"));
  for (int i = 0; i < GB_MUTATED; i++) {
    char content[32];
    snprintf(content, sizeof content, "{\"n\":%d}", 10 * i);
    snprintf(g->counter[i], sizeof g->counter[i], "%s",
             P("gb%d/m%02d", wave, i));
    CHECK_OK(CREATE(&r, g->counter[i], "Counter", content));
  }
  res_reset(&r);
  for (int i = 0; i < GB_BIG; i++) {
    snprintf(big_path[i], sizeof big_path[i], "%s",
             P("gb%d/big/n%03d", wave, i));
    big[i] = (durable_write_t){
        .kind = DURABLE_WRITE_PUT, .path = big_path[i], .content = "{}"};
  }
  durable_error_t e = {0};
  submitted(durable_store_write(T.store, big, GB_BIG, res_cb, &first, &e), &e,
            "write", big_path[0]);
  int inc = MUT_INCREMENT;
  for (int i = 0; i < GB_STREAMS; i++) {
    durable_write_t replace = {.kind = DURABLE_WRITE_REPLACE,
                               .path = g->stream[i],
                               .node_type = "S",
                               .content = "{\"last\":1}",
                               .expected_version =
                                   g->version[i] + (i == stale ? 1000 : 0)};
    durable_write_t create = {
        .kind = DURABLE_WRITE_CREATE, .path = g->item[i], .content = "{}"};
    /* the stream row first, as the stream hub writes an append; or last,
     * so that the job's node (its last write) is the stream row */
    durable_write_t w[2] = {stream_first ? replace : create,
                            stream_first ? create : replace};
    submitted(durable_store_write(T.store, w, 2, res_cb, &rs[i], &e), &e,
              "write", g->stream[i]);
    if (i < GB_MUTATED)
      submitted(durable_store_update(T.store, g->counter[i], mutate, &inc,
                                     res_cb, &rs[GB_STREAMS + i], &e),
                &e, "update", g->counter[i]);
  }
  g_line = __LINE__;
  res_wait(&first);
  CHECK_OK(first.status);
  res_reset(&first);
  for (int i = 0; i < GB_STREAMS + GB_MUTATED; i++) {
    g_line = __LINE__;
    res_wait(&rs[i]);
  }
  for (int i = 0; i < GB_STREAMS; i++) {
    g_line = __LINE__;
    int refused = i == stale || i == taken;
    if (i == stale)
      CHECK_EQ_CODE(rs[i].status, DURABLE_ECONFLICT);
    else if (i == taken)
      CHECK_EQ_CODE(rs[i].status, DURABLE_EEXIST);
    else
      CHECK_OK(rs[i].status);
    CHECK_OK(GET(&r, NULL, g->stream[i]));
    CHECK_NODE(r.node, g->stream[i], "S",
               refused ? "{\"last\":0}" : "{\"last\":1}");
    if (refused) {
      CHECK_EQ_INT(r.node->version, g->version[i]);
    } else {
      CHECK_GT_INT(r.node->version, g->version[i]);
    }
    if (!refused && !stream_first) { /* the job's own outcome */
      CHECK_NODE(rs[i].node, g->stream[i], "S", "{\"last\":1}");
      CHECK_EQ_INT(rs[i].node->version, r.node->version);
    }
    if (i == stale) {
      CHECK_EQ_CODE(GET(&r, NULL, g->item[i]), DURABLE_ENOTFOUND);
    } else {
      CHECK_OK(GET(&r, NULL, g->item[i]));
      CHECK_EQ_STR(r.node->content, i == taken ? "{\"before\":true}" : "{}");
      if (!refused && stream_first) { /* the job's own outcome */
        CHECK_NODE(rs[i].node, g->item[i], "", "{}");
        CHECK_EQ_INT(rs[i].node->version, r.node->version);
      }
    }
  }
  for (int i = 0; i < GB_MUTATED; i++) {
    char content[32];
    snprintf(content, sizeof content, "{\"n\":%d}", 10 * i + 1);
    g_line = __LINE__;
    CHECK_OK(rs[GB_STREAMS + i].status);
    CHECK_NODE(rs[GB_STREAMS + i].node, g->counter[i], "Counter", content);
  }
  for (int i = 0; i < GB_STREAMS + GB_MUTATED; i++)
    res_reset(&rs[i]);
  res_reset(&r);
}

static void case_group_batches(void) {
  static gb_t g;
  case_begin("group_batches");
  gb_wave(&g, 1, 0, -1, -1);
  gb_wave(&g, 2, 1, -1, -1);
  gb_wave(&g, 3, 1, 5, 9);
  case_end();
}

static const contract_case_t cases[] = {
    {"update", case_update},
    {"update_concurrent", case_update_concurrent},
    {"batch", case_batch},
    {"cross_writes", case_cross_writes},
    {"group_commit", case_group_commit},
    {"group_batches", case_group_batches},
};
const contract_table_t contract_writes = {cases,
                                          sizeof cases / sizeof cases[0]};

/*
 * paths.c: the store contract on paths: every call refuses a path that
 * breaks a rule (naming it and the rule) and writes nothing, and a path is
 * data: SQL, quotes and LIKE wildcards in it reach no statement.
 */
#include "contract.h"

static void case_bad_paths(void) {
  case_begin("bad_paths");
  res_t r = {0};
  static char longp[DURABLE_PATH_MAX + 100], longseg[DURABLE_SEGMENT_MAX + 700],
      longpart[DURABLE_PARTITION_MAX + 10];
  snprintf(longp, sizeof(longp), "%s/", T.ns);
  for (size_t i = strlen(longp); i < DURABLE_PATH_MAX + 1; i++)
    longp[i] = (i % 100 == 0) ? '/' : 'a';
  longp[DURABLE_PATH_MAX + 1] = '\0';
  snprintf(longseg, sizeof(longseg), "%s/", T.ns);
  memset(longseg + strlen(longseg), 's', DURABLE_SEGMENT_MAX + 1);
  memset(longpart, 'p', DURABLE_PARTITION_MAX + 1);
  strcpy(longpart + DURABLE_PARTITION_MAX + 1, "/a");

  const char *paths[] = {
      "",        P("a//b"),  P("a/"),   P("./a"),   P("../a"),     P("a\x01"),
      P("a\nb"), P("a\x7f"), P("a\\b"), P("a\xff"), P("\xc0\xaf"), "/a/b",
      "_x/a",    "pg_x/a",   longp,     longseg,    longpart,
  };
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
    const char *p = paths[i];
    REFUSED(EINVAL,
            durable_store_put(T.store, p, "X", "{}", stray_cb, NULL, &e));
    REFUSED(EINVAL,
            durable_store_create(T.store, p, "X", "{}", stray_cb, NULL, &e));
    REFUSED(EINVAL, durable_store_get(T.store, NULL, p, stray_cb, NULL, &e));
    REFUSED(EINVAL, durable_store_delete(T.store, p, stray_cb, NULL, &e));
    REFUSED(EINVAL, durable_store_exists(T.store, NULL, p, stray_cb, NULL, &e));
    int inc = MUT_INCREMENT;
    REFUSED(EINVAL,
            durable_store_update(T.store, p, mutate, &inc, stray_cb, NULL, &e));
    durable_write_t w[2] = {
        {.kind = DURABLE_WRITE_PUT, .path = P("fine"), .content = "{}"},
        {.kind = DURABLE_WRITE_PUT, .path = p, .content = "{}"},
    };
    REFUSED(EINVAL, durable_store_write(T.store, w, 2, stray_cb, NULL, &e));
  }
  /* The message names the path and the rule, like durable_path_check. */
  {
    durable_error_t e;
    memset(&e, 0, sizeof(e));
    CHECK_EQ_CODE(
        durable_store_put(T.store, P("a//b"), "X", "{}", stray_cb, NULL, &e),
        DURABLE_EINVAL);
    CHECK_CONTAINS(e.message, P("a//b"));
  }
  /* Nothing was written. */
  char q[400];
  snprintf(q, sizeof(q), "namespace:%s", T.ns);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  CHECK_EQ_INT(r.count, 0);
  CHECK_EQ_CODE(GET(&r, NULL, P("fine")), DURABLE_ENOTFOUND);
  CHECK_EQ_CODE(GET(&r, NULL, P("a")), DURABLE_ENOTFOUND);
  res_reset(&r);
  case_end();
}

static void case_sql_in_paths(void) {
  case_begin("sql_in_paths");
  res_t r = {0};
  /* A path that is SQL, as an attacker would write it: its first segment
   * is a partition. */
  const char *literal = "x'; DROP TABLE mesh_nodes; --/a";
  char content[128];
  snprintf(content, sizeof(content), "{\"run\":\"%s\"}", g_run);
  /* (Written by earlier runs too: its created_at may be old.) */
  int64_t case_start = g_case_start_ms;
  g_case_start_ms = 0;
  CHECK_OK(PUT(&r, literal, "Evil", content));
  CHECK_NODE(r.node, literal, "Evil", content);
  CHECK_EQ_STR(r.node->ns, "x'; DROP TABLE mesh_nodes; --");
  CHECK_OK(GET(&r, NULL, literal));
  CHECK_NODE(r.node, literal, "Evil", content);
  g_case_start_ms = case_start;
  CHECK_OK(QUERY(&r, NULL, "namespace:x'; DROP TABLE mesh_nodes; --", NULL, 0));
  CHECK_GE_INT(r.count, 1);
  CHECK_OK(QUERY(&r, NULL, "path:x'; DROP TABLE mesh_nodes; --/a", NULL, 0));
  CHECK_EQ_INT(r.count, 1);
  CHECK_EQ_STR(r.nodes[0]->content, content);

  /* Quotes of every kind in namespace, id, type and content. */
  const char *evil[] = {
      "x'; DROP TABLE mesh_nodes; --/a",
      "\"; DELETE FROM durable_grants; --/b",
      "a' OR '1'='1",
      "$$; DROP SCHEMA public CASCADE; $$",
      "%/_/*",
      "); DROP TABLE durable_stream_items; --/_DurableStreamItem/000000000001",
  };
  for (size_t i = 0; i < sizeof(evil) / sizeof(evil[0]); i++) {
    const char *p = P("%s", evil[i]);
    char path[1200];
    snprintf(path, sizeof(path), "%s", p);
    CHECK_OK(PUT(&r, path, "'; DROP TABLE threads; --", "{\"q\":\"'\\\"\"}"));
    CHECK_NODE(r.node, path, "'; DROP TABLE threads; --", "{\"q\":\"'\\\"\"}");
    CHECK_OK(GET(&r, NULL, path));
    CHECK_NODE(r.node, path, "'; DROP TABLE threads; --", "{\"q\":\"'\\\"\"}");
    CHECK_OK(EXISTS(&r, NULL, path));
    CHECK_EQ_INT(r.value, 1);
  }

  /* LIKE wildcards are data too: a_c lists a_c's children only. */
  CHECK_OK(PUT(&r, P("a_c/1"), "", "{}"));
  CHECK_OK(PUT(&r, P("abc/2"), "", "{}"));
  CHECK_OK(PUT(&r, P("a%%c/3"), "", "{}"));
  CHECK_OK(PUT(&r, P("a_c/1/deeper"), "", "{}"));
  char q[600];
  snprintf(q, sizeof(q), "namespace:%s", P("a_c"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  check_ids(&r, (const char *[]){"1"}, 1);
  snprintf(q, sizeof(q), "namespace:%s", P("a%%c"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  check_ids(&r, (const char *[]){"3"}, 1);

  /* The tables are all still there. */
  CHECK_OK(PUT(&r, P("after/doc"), "", "{}"));
  CHECK_OK(PUT(&r, P("after/T/_ThreadMessage/m"), "", "{}"));
  CHECK_OK(PUT(&r,
               item_path(P("after/doc/_DurableStream/L/_DurableStreamItem"), 1),
               "", "{}"));
  CHECK_OK(GET(&r, NULL, P("after/doc")));
  res_reset(&r);
  case_end();
}

static const contract_case_t cases[] = {
    {"bad_paths", case_bad_paths},
    {"sql_in_paths", case_sql_in_paths},
};
const contract_table_t contract_paths = {cases, sizeof cases / sizeof cases[0]};

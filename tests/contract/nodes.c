/*
 * nodes.c: the store contract on one node at a time: get and put (an
 * upsert), create, delete, replace at a version, exists; every field of the
 * node that comes back agrees with what was written (CHECK_NODE).
 */
#include "contract.h"

static void case_get_put(void) {
  case_begin("get_put");
  res_t r = {0};
  CHECK_EQ_CODE(GET(&r, NULL, P("doc")), DURABLE_ENOTFOUND);
  CHECK(r.node == NULL);

  CHECK_OK(PUT(&r, P("doc"), "Doc", "{\"a\":1}"));
  CHECK_NODE(r.node, P("doc"), "Doc", "{\"a\":1}");
  int64_t v = r.node->version;
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_NODE(r.node, P("doc"), "Doc", "{\"a\":1}");
  CHECK_EQ_INT(r.node->version, v);
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_EQ_INT(r.node->version, v);

  /* A satellite: namespace, id and owner split as the header says. */
  CHECK_OK(PUT(&r, P("doc/_DurableStream/Log"), "DurableStream", "{}"));
  CHECK_NODE(r.node, P("doc/_DurableStream/Log"), "DurableStream", "{}");
  CHECK_EQ_STR(r.node->main_node, P("doc"));
  CHECK_EQ_STR(r.node->ns, P("doc/_DurableStream"));
  CHECK_EQ_STR(r.node->id, "Log");

  /* NULL type means "", NULL content means {}. */
  CHECK_OK(PUT(&r, P("defaults"), NULL, NULL));
  CHECK_NODE(r.node, P("defaults"), "", "{}");
  CHECK_OK(GET(&r, NULL, P("defaults")));
  CHECK_NODE(r.node, P("defaults"), "", "{}");

  /* A one-segment path: the namespace is "". */
  CHECK_OK(PUT(&r, g_run, "Root", "{}"));
  CHECK_NODE(r.node, g_run, "Root", "{}");
  CHECK_OK(GET(&r, NULL, g_run));
  CHECK_NODE(r.node, g_run, "Root", "{}");
  res_reset(&r);
  case_end();
}

static void case_put_upsert(void) {
  case_begin("put_upsert");
  res_t r = {0};
  CHECK_OK(PUT(&r, P("doc"), "Doc", "{\"v\":1}"));
  durable_node_t *first = durable_node_dup(r.node);
  sleep_ms(5);
  CHECK_OK(PUT(&r, P("doc"), "Doc2", "{\"v\":2}"));
  CHECK_NODE(r.node, P("doc"), "Doc2", "{\"v\":2}");
  CHECK_GT_INT(r.node->version, first->version);
  CHECK_EQ_INT(r.node->created_at, first->created_at);
  CHECK_GT_INT(r.node->updated_at, first->updated_at);
  int64_t v2 = r.node->version, u2 = r.node->updated_at;
  sleep_ms(5);
  CHECK_OK(PUT(&r, P("doc"), "Doc2", "{\"v\":3}"));
  CHECK_GT_INT(r.node->version, v2);
  CHECK_GT_INT(r.node->updated_at, u2);
  CHECK_EQ_INT(r.node->created_at, first->created_at);
  int64_t v3 = r.node->version;
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_NODE(r.node, P("doc"), "Doc2", "{\"v\":3}");
  CHECK_EQ_INT(r.node->version, v3);
  CHECK_EQ_INT(r.node->created_at, first->created_at);
  /* The same content again is still a write. */
  CHECK_OK(PUT(&r, P("doc"), "Doc2", "{\"v\":3}"));
  CHECK_GT_INT(r.node->version, v3);
  durable_node_free(first);
  res_reset(&r);
  case_end();
}

static void case_create(void) {
  case_begin("create");
  res_t r = {0};
  CHECK_OK(CREATE(&r, P("once"), "Doc", "{\"first\":true}"));
  CHECK_NODE(r.node, P("once"), "Doc", "{\"first\":true}");
  int64_t v = r.node->version;
  CHECK_EQ_CODE(CREATE(&r, P("once"), "Doc", "{\"first\":false}"),
                DURABLE_EEXIST);
  CHECK(r.node == NULL);
  CHECK_CONTAINS(r.message, "exists");
  CHECK_CONTAINS(r.message, P("once"));
  CHECK_OK(GET(&r, NULL, P("once")));
  CHECK_NODE(r.node, P("once"), "Doc", "{\"first\":true}");
  CHECK_EQ_INT(r.node->version, v);
  res_reset(&r);
  case_end();
}

static void case_delete(void) {
  case_begin("delete");
  res_t r = {0};
  CHECK_OK(PUT(&r, P("doc"), "Doc", "{}"));
  int64_t v = r.node->version;
  CHECK_OK(DELETE(&r, P("doc")));
  CHECK(r.node == NULL);
  CHECK_EQ_CODE(GET(&r, NULL, P("doc")), DURABLE_ENOTFOUND);
  CHECK_OK(EXISTS(&r, NULL, P("doc")));
  CHECK_EQ_INT(r.value, 0);
  CHECK_EQ_CODE(DELETE(&r, P("doc")), DURABLE_ENOTFOUND);
  CHECK_EQ_CODE(DELETE(&r, P("never")), DURABLE_ENOTFOUND);
  CHECK_CONTAINS(r.message, P("never"));
  /* Re-created: a version above every earlier one. */
  CHECK_OK(CREATE(&r, P("doc"), "Doc", "{\"again\":1}"));
  CHECK_GT_INT(r.node->version, v);
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_NODE(r.node, P("doc"), "Doc", "{\"again\":1}");
  CHECK_GT_INT(r.node->version, v);
  res_reset(&r);
  case_end();
}

static void case_replace(void) {
  case_begin("replace");
  res_t r = {0};
  CHECK_OK(PUT(&r, P("doc"), "Doc", "{\"v\":1}"));
  int64_t v1 = r.node->version;
  durable_write_t w = {.kind = DURABLE_WRITE_REPLACE,
                       .path = P("doc"),
                       .node_type = "Doc",
                       .content = "{\"v\":2}",
                       .expected_version = v1};
  CHECK_OK(WRITE(&r, &w, 1));
  CHECK_NODE(r.node, P("doc"), "Doc", "{\"v\":2}");
  int64_t v2 = r.node->version;
  CHECK_GT_INT(v2, v1);
  /* Stale: the version it was read at is gone. */
  w.content = "{\"v\":3}";
  w.expected_version = v1;
  CHECK_EQ_CODE(WRITE(&r, &w, 1), DURABLE_ECONFLICT);
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_NODE(r.node, P("doc"), "Doc", "{\"v\":2}");
  CHECK_EQ_INT(r.node->version, v2);
  int64_t created = r.node->created_at;
  /* A new type goes with it; created_at stays, and comes back. */
  w.node_type = "Doc3";
  w.expected_version = v2;
  CHECK_OK(WRITE(&r, &w, 1));
  CHECK_NODE(r.node, P("doc"), "Doc3", "{\"v\":3}");
  CHECK_EQ_INT(r.node->created_at, created);
  CHECK_OK(GET(&r, NULL, P("doc")));
  CHECK_NODE(r.node, P("doc"), "Doc3", "{\"v\":3}");
  CHECK_EQ_INT(r.node->created_at, created);
  v2 = r.node->version;
  /* Absent. */
  w.path = P("absent");
  w.expected_version = v2;
  CHECK_EQ_CODE(WRITE(&r, &w, 1), DURABLE_ENOTFOUND);
  CHECK_EQ_CODE(GET(&r, NULL, P("absent")), DURABLE_ENOTFOUND);
  res_reset(&r);
  case_end();
}

static void case_exists(void) {
  case_begin("exists");
  res_t r = {0};
  CHECK_OK(PUT(&r, P("here"), "X", "{}"));
  CHECK_OK(EXISTS(&r, NULL, P("here")));
  CHECK_EQ_INT(r.value, 1);
  CHECK_OK(EXISTS(&r, NULL, P("here")));
  CHECK_EQ_INT(r.value, 1);
  CHECK_OK(EXISTS(&r, NULL, P("absent")));
  CHECK_EQ_INT(r.value, 0);
  CHECK_OK(EXISTS(&r, NULL, P("here/child")));
  CHECK_EQ_INT(r.value, 0);
  CHECK_OK(DELETE(&r, P("here")));
  CHECK_OK(EXISTS(&r, NULL, P("here")));
  CHECK_EQ_INT(r.value, 0);
  REFUSED(EINVAL,
          durable_store_exists(T.store, NULL, "a//b", stray_cb, NULL, &e));
  res_reset(&r);
  case_end();
}

static const contract_case_t cases[] = {
    {"get_put", case_get_put}, {"put_upsert", case_put_upsert},
    {"create", case_create},   {"delete", case_delete},
    {"replace", case_replace}, {"exists", case_exists},
};
const contract_table_t contract_nodes = {cases, sizeof cases / sizeof cases[0]};

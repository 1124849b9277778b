/*
 * content.c: the store contract on what a node holds: its content comes
 * back byte for byte (a 1 MiB one too), numbers within what every reader
 * decodes exactly, and a write of content that is not JSON or of a type that
 * is no NodeType name is refused whole, writing nothing.
 */
#include "contract.h"

static void case_content_bytes(void) {
  case_begin("content_bytes");
  res_t r = {0};
  const char *contents[] = {
      "{\"$type\":\"X\",\"z\":1,\"a\":\"\xc3\xa9\"}",
      "{ \"b\" : [1, 2.50, 1e3, -0.0] ,\"a\":null,\"a\":true }",
      "{\"s\":\"\\u00e9\\n\\\"q\\\"\\\\\"}",
      "{\n\t\"$type\": \"Y\"\n}",
      "[1,\"two\",{\"three\":3}]",
  };
  for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
    CHECK_OK(PUT(&r, P("c%zu", i), "Bytes", contents[i]));
    CHECK_EQ_STR(r.node->content, contents[i]);
    CHECK_OK(GET(&r, NULL, P("c%zu", i)));
    CHECK_EQ_STR(r.node->content, contents[i]);
  }
  char q[400];
  snprintf(q, sizeof(q), "namespace:%s", T.ns);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  CHECK_EQ_INT(r.count, 5);
  for (size_t i = 0; i < 5; i++)
    CHECK_EQ_STR(r.nodes[i]->content, contents[i]);

  /* A large node (1 MiB string) round-trips too. */
  size_t n = 1 << 20;
  char *big = malloc(n + 16);
  CHECK(big != NULL);
  strcpy(big, "{\"s\":\"");
  memset(big + 6, 'q', n);
  strcpy(big + 6 + n, "\"}");
  CHECK_OK(CREATE(&r, P("big"), "Big", big));
  CHECK_OK(GET(&r, NULL, P("big")));
  CHECK(strcmp(r.node->content, big) == 0);
  free(big);
  res_reset(&r);
  case_end();
}

/* Numbers: kept as written, within what every reader decodes exactly.  An
 * integer must fit 64 bits (jansson and Lua read no bigger one; a reader
 * that got it rounded, or not at all, would stop on it), any other number a
 * double; beyond that a write is refused with jansson's reason. */
static void case_content_numbers(void) {
  case_begin("content_numbers");
  res_t r = {0};
  const char *contents[] = {
      "{\"n\":9223372036854775807}",
      "{\"n\":-9223372036854775808}",
      "{\"n\":0.1000000000000000055511151231257827}",
      "{\"n\":123456789012345678901234567890.5}",
  };
  for (size_t i = 0; i < sizeof(contents) / sizeof(contents[0]); i++) {
    CHECK_OK(PUT(&r, P("n%zu", i), "Numbers", contents[i]));
    CHECK_EQ_STR(r.node->content, contents[i]);
    CHECK_OK(GET(&r, NULL, P("n%zu", i)));
    CHECK_EQ_STR(r.node->content, contents[i]);
  }
  const char *refused[] = {
      "{\"n\":9223372036854775808}",
      "{\"n\":-9223372036854775809}",
      "{\"n\":123456789012345678901234567890}",
      "{\"n\":1e400}",
  };
  for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
    durable_error_t e = {0};
    CHECK_EQ_CODE(durable_store_put(T.store, P("big%zu", i), "Numbers",
                                    refused[i], stray_cb, NULL, &e),
                  DURABLE_EINVAL);
    CHECK_MSG(strstr(e.message, i < 3 ? "too big" : "overflow") != NULL,
              "the refusal says why: %s", e.message);
  }
  CHECK_EQ_CODE(GET(&r, NULL, P("big0")), DURABLE_ENOTFOUND);
  res_reset(&r);
  case_end();
}

static void case_bad_json(void) {
  case_begin("bad_json");
  res_t r = {0};
  const char *bad[] = {"not json", "{\"a\":1",         "",     "{}x",
                       "{'a':1}",  "{\"a\":\"\xff\"}", "{} {}"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    REFUSED(EINVAL, durable_store_put(T.store, P("doc"), "Doc", bad[i],
                                      stray_cb, NULL, &e));
    REFUSED(EINVAL, durable_store_create(T.store, P("doc"), "Doc", bad[i],
                                         stray_cb, NULL, &e));
    durable_write_t w = {.kind = DURABLE_WRITE_REPLACE,
                         .path = P("doc"),
                         .content = bad[i],
                         .expected_version = 1};
    REFUSED(EINVAL, durable_store_write(T.store, &w, 1, stray_cb, NULL, &e));
  }
  CHECK_EQ_CODE(GET(&r, NULL, P("doc")), DURABLE_ENOTFOUND);
  char q[400];
  snprintf(q, sizeof(q), "namespace:%s", T.ns);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  CHECK_EQ_INT(r.count, 0);
  res_reset(&r);
  case_end();
}

/* A written type is a NodeType name (durable_node_type_check) or none:
 * every write that sets one refuses a bad one, and writes nothing. */
static void case_bad_node_types(void) {
  case_begin("bad_node_types");
  res_t r = {0};
  static char longt[DURABLE_NODE_TYPE_MAX + 2];
  memset(longt, 'T', DURABLE_NODE_TYPE_MAX + 1);
  const char *bad[] = {"Doc\nument", "Doc\x01", "\xff", "Doc\xc2\x85", longt};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    REFUSED(EINVAL, durable_store_put(T.store, P("doc"), bad[i], "{}", stray_cb,
                                      NULL, &e));
    REFUSED(EINVAL, durable_store_create(T.store, P("doc"), bad[i], "{}",
                                         stray_cb, NULL, &e));
    durable_write_t w = {.kind = DURABLE_WRITE_REPLACE,
                         .path = P("doc"),
                         .node_type = bad[i],
                         .expected_version = 1};
    REFUSED(EINVAL, durable_store_write(T.store, &w, 1, stray_cb, NULL, &e));
  }
  {
    durable_error_t e = {0};
    durable_store_put(T.store, P("doc"), "Doc\nument", "{}", stray_cb, NULL,
                      &e);
    CHECK_CONTAINS(e.message, P("doc"));
    CHECK_CONTAINS(e.message, "node type 'Doc\\x0aument' is invalid");
  }
  CHECK_EQ_CODE(GET(&r, NULL, P("doc")), DURABLE_ENOTFOUND);
  /* none ("" or NULL) and the longest name are written */
  CHECK_OK(PUT(&r, P("none"), "", "{}"));
  CHECK_OK(PUT(&r, P("long"), longt + 1, "{}"));
  CHECK_EQ_INT(strlen(r.node->node_type), DURABLE_NODE_TYPE_MAX);
  /* a mutator's type is checked on the writer thread: nothing written */
  int inc = MUT_INCREMENT, badtype = MUT_BAD_TYPE;
  CHECK_OK(UPDATE(&r, P("c"), mutate, &inc));
  int64_t v = r.node->version;
  CHECK_EQ_CODE(UPDATE(&r, P("c"), mutate, &badtype), DURABLE_EINVAL);
  CHECK_CONTAINS(r.message, "node type");
  CHECK_EQ_CODE(UPDATE(&r, P("absent"), mutate, &badtype), DURABLE_EINVAL);
  CHECK_EQ_CODE(GET(&r, NULL, P("absent")), DURABLE_ENOTFOUND);
  CHECK_OK(GET(&r, NULL, P("c")));
  CHECK_NODE(r.node, P("c"), "", "{\"n\":1}");
  CHECK_EQ_INT(r.node->version, v);
  res_reset(&r);
  case_end();
}

static const contract_case_t cases[] = {
    {"content_bytes", case_content_bytes},
    {"content_numbers", case_content_numbers},
    {"bad_json", case_bad_json},
    {"bad_node_types", case_bad_node_types},
};
const contract_table_t contract_content = {cases,
                                           sizeof cases / sizeof cases[0]};

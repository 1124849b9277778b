/*
 * access.c: the store contract on grants: a principal reads and writes what
 * its read and write grants cover (an owner and its satellites, prefixes
 * taken segment-wise), denied is never told apart from absent, a denied
 * write refuses its whole transaction, and principal names have rules.
 */
#include "contract.h"

static void case_access(void) {
  case_begin("access");
  res_t r = {0};
  char alice[128], bob[128], carol[128];
  snprintf(alice, sizeof(alice), "alice.%s", g_run);
  snprintf(bob, sizeof(bob), "bob.%s", g_run);
  snprintf(carol, sizeof(carol), "carol.%s", g_run);
  char owner[400], stream[500], items[600], other[400];
  snprintf(owner, sizeof(owner), "%s", P("P/owner"));
  snprintf(stream, sizeof(stream), "%s/_DurableStream/Log", owner);
  snprintf(items, sizeof(items), "%s/_DurableStreamItem", stream);
  snprintf(other, sizeof(other), "%s", P("P/other"));
  CHECK_OK(PUT(&r, owner, "Doc", "{}"));
  CHECK_OK(PUT(&r, stream, "DurableStream", "{}"));
  CHECK_OK(PUT(&r, item_path(items, 1), "DurableStreamItem", "{\"seq\":1}"));
  CHECK_OK(PUT(&r, item_path(items, 2), "DurableStreamItem", "{\"seq\":2}"));
  CHECK_OK(PUT(&r, other, "Doc", "{}"));
  CHECK_OK(PUT(&r, P("Space/doc"), "Doc", "{}"));
  CHECK_OK(PUT(&r, P("Spaces/doc"), "Doc", "{}"));
  CHECK_OK(PUT(&r, P("a_c/x"), "Doc", "{}"));
  CHECK_OK(PUT(&r, P("abc/x"), "Doc", "{}"));

  /* No grant: denied, and denied is not absent. */
  CHECK_EQ_CODE(GET(&r, alice, owner), DURABLE_EACCES);
  CHECK(r.node == NULL);
  CHECK_EQ_CODE(GET(&r, alice, stream), DURABLE_EACCES);
  CHECK_EQ_CODE(GET(&r, alice, item_path(items, 1)), DURABLE_EACCES);
  CHECK_EQ_CODE(EXISTS(&r, alice, owner), DURABLE_EACCES);
  CHECK_EQ_CODE(READ_ITEMS(&r, alice, items, 0, 10), DURABLE_EACCES);
  char q[700];
  snprintf(q, sizeof(q), "namespace:%s", P("P"));
  CHECK_EQ_CODE(QUERY(&r, alice, q, NULL, 0), DURABLE_EACCES);
  /* The platform and NULL read everything. */
  CHECK_OK(GET(&r, NULL, owner));
  CHECK_OK(GET(&r, NULL, item_path(items, 2)));

  /* A grant on the owner covers it, its stream and the stream's items. */
  CHECK_OK(GRANT(&r, alice, owner));
  CHECK_OK(GET(&r, alice, owner));
  CHECK_NODE(r.node, owner, "Doc", "{}");
  CHECK_OK(GET(&r, alice, stream));
  CHECK_OK(GET(&r, alice, item_path(items, 1)));
  CHECK_OK(READ_ITEMS(&r, alice, items, 0, 10));
  check_items(&r, 0, 2);
  CHECK_OK(EXISTS(&r, alice, owner));
  CHECK_EQ_INT(r.value, 1);
  CHECK_EQ_CODE(GET(&r, alice, P("P/owner/_X/y")), DURABLE_ENOTFOUND);
  /* ... but not its siblings. */
  CHECK_EQ_CODE(GET(&r, alice, other), DURABLE_EACCES);
  CHECK_EQ_CODE(EXISTS(&r, alice, other), DURABLE_EACCES);
  /* A listing shows only what the grants cover. */
  CHECK_OK(QUERY(&r, alice, q, NULL, 0));
  check_ids(&r, (const char *[]){"owner"}, 1);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  check_ids(&r, (const char *[]){"other", "owner"}, 2);
  snprintf(q, sizeof(q), "namespace:%s", items);
  CHECK_OK(QUERY(&r, alice, q, NULL, 0));
  CHECK_EQ_INT(r.count, 2);
  /* bob is not alice. */
  CHECK_EQ_CODE(GET(&r, bob, owner), DURABLE_EACCES);

  /* Segment-wise prefixes: Space covers Space/doc, not Spaces/doc. */
  CHECK_OK(GRANT(&r, bob, P("Space")));
  CHECK_OK(GET(&r, bob, P("Space/doc")));
  CHECK_EQ_CODE(GET(&r, bob, P("Spaces/doc")), DURABLE_EACCES);
  /* And a prefix is not a pattern. */
  CHECK_OK(GRANT(&r, carol, P("a_c")));
  CHECK_OK(GET(&r, carol, P("a_c/x")));
  CHECK_EQ_CODE(GET(&r, carol, P("abc/x")), DURABLE_EACCES);

  /* Revoke takes it back. */
  CHECK_OK(REVOKE(&r, alice, owner));
  CHECK_EQ_CODE(GET(&r, alice, owner), DURABLE_EACCES);
  CHECK_EQ_CODE(GET(&r, alice, item_path(items, 1)), DURABLE_EACCES);
  CHECK_EQ_CODE(READ_ITEMS(&r, alice, items, 0, 10), DURABLE_EACCES);
  CHECK_OK(GET(&r, bob, P("Space/doc"))); /* others keep theirs */

  REFUSED(EINVAL, durable_store_grant(T.store, alice, "a//b",
                                      DURABLE_GRANT_READ, stray_cb, NULL, &e));
  /* Denied is not absent, for a node that is not there either: the answer
   * must not tell an ungranted reader what exists. */
  CHECK_EQ_CODE(GET(&r, alice, P("P/absent")), DURABLE_EACCES);
  CHECK_EQ_CODE(EXISTS(&r, alice, P("P/absent")), DURABLE_EACCES);
  res_reset(&r);
  case_end();
}

/* Read and write grants, each on its own; writes refused whole. */
static void case_access_modes(void) {
  case_begin("access_modes");
  res_t r = {0};
  char w[128], v[128];
  snprintf(w, sizeof(w), "writer.%s", g_run);
  snprintf(v, sizeof(v), "viewer.%s", g_run);
  char doc[400], stream[500], items[600], other[400], msg[1200];
  snprintf(doc, sizeof(doc), "%s", P("W/doc"));
  snprintf(stream, sizeof(stream), "%s/_DurableStream/Log", doc);
  snprintf(items, sizeof(items), "%s/_DurableStreamItem", stream);
  snprintf(other, sizeof(other), "%s", P("W/other"));
  CHECK_OK(PUT(&r, doc, "Doc", "{\"v\":0}"));
  CHECK_OK(PUT(&r, other, "Doc", "{\"v\":0}"));
  CHECK_OK(PUT(&r, item_path(items, 1), "DurableStreamItem", "{}"));
  CHECK_OK(PUT(&r, item_path(items, 2), "DurableStreamItem", "{}"));
  durable_write_t put = {.kind = DURABLE_WRITE_PUT,
                         .path = doc,
                         .node_type = "Doc",
                         .content = "{\"v\":1}"};

  /* No grant: the write is refused, naming principal and path, and nothing
   * is written. */
  CHECK_EQ_CODE(WRITE_AS(&r, w, &put, 1), DURABLE_EACCES);
  snprintf(msg, sizeof msg, "principal '%s' may not write '%s'", w, doc);
  CHECK_EQ_STR(r.message, msg);
  CHECK_OK(GET(&r, NULL, doc));
  CHECK_NODE(r.node, doc, "Doc", "{\"v\":0}");
  /* Read alone does not let it write. */
  CHECK_OK(GRANT_M(&r, w, P("W/doc"), DURABLE_GRANT_READ));
  CHECK_OK(GET(&r, w, doc));
  CHECK_EQ_CODE(WRITE_AS(&r, w, &put, 1), DURABLE_EACCES);
  /* Write, added to read: the owner and its satellites, not its sibling. */
  CHECK_OK(GRANT_M(&r, w, P("W/doc"), DURABLE_GRANT_WRITE));
  CHECK_OK(WRITE_AS(&r, w, &put, 1));
  CHECK_NODE(r.node, doc, "Doc", "{\"v\":1}");
  durable_write_t sat = {.kind = DURABLE_WRITE_PUT,
                         .path = stream,
                         .node_type = "DurableStream",
                         .content = "{}"};
  CHECK_OK(WRITE_AS(&r, w, &sat, 1));
  durable_write_t del = {.kind = DURABLE_WRITE_DELETE, .path = stream};
  CHECK_OK(WRITE_AS(&r, w, &del, 1));
  /* One denied write refuses the whole transaction: the allowed one in it
   * is not written either. */
  durable_write_t two[2] = {
      {.kind = DURABLE_WRITE_PUT, .path = doc, .content = "{\"v\":2}"},
      {.kind = DURABLE_WRITE_PUT, .path = other, .content = "{\"v\":2}"}};
  CHECK_EQ_CODE(WRITE_AS(&r, w, two, 2), DURABLE_EACCES);
  snprintf(msg, sizeof msg, "principal '%s' may not write '%s'", w, other);
  CHECK_EQ_STR(r.message, msg);
  CHECK_OK(GET(&r, NULL, doc));
  CHECK_EQ_STR(r.node->content, "{\"v\":1}");
  CHECK_OK(GET(&r, NULL, other));
  CHECK_EQ_STR(r.node->content, "{\"v\":0}");

  /* Write alone: a blind write passes, a read-modify-write (its mutator
   * sees the node) and a read do not. */
  CHECK_OK(GRANT_M(&r, v, P("W/other"), DURABLE_GRANT_WRITE));
  durable_write_t blind = {
      .kind = DURABLE_WRITE_PUT, .path = other, .content = "{\"n\":5}"};
  CHECK_OK(WRITE_AS(&r, v, &blind, 1));
  CHECK_EQ_CODE(GET(&r, v, other), DURABLE_EACCES);
  snprintf(msg, sizeof msg, "principal '%s' may not read '%s'", v, other);
  CHECK_EQ_STR(r.message, msg);
  int inc = 0;
  durable_write_t mut = {.kind = DURABLE_WRITE_MUTATE,
                         .path = other,
                         .mutate = mutate,
                         .mutate_arg = &inc};
  CHECK_EQ_CODE(WRITE_AS(&r, v, &mut, 1), DURABLE_EACCES);
  CHECK_OK(GET(&r, NULL, other));
  CHECK_EQ_STR(r.node->content, "{\"n\":5}");
  CHECK_OK(GRANT_M(&r, v, P("W"), DURABLE_GRANT_READ));
  CHECK_OK(WRITE_AS(&r, v, &mut, 1)); /* read on W, write on W/other */
  CHECK_EQ_STR(r.node->content, "{\"n\":6}");

  /* The last item of a stream is read like its items. */
  CHECK_OK(LAST_ITEM_AS(&r, v, items));
  CHECK_EQ_INT(r.value, 2);
  CHECK_OK(REVOKE(&r, v, P("W")));
  CHECK_EQ_CODE(LAST_ITEM_AS(&r, v, items), DURABLE_EACCES);
  CHECK_EQ_INT(r.value, 0);

  /* The access check: the first mode missing, read before write. */
  CHECK_OK(ACCESS(&r, w, stream, DURABLE_GRANT_ALL));
  CHECK_OK(ACCESS(&r, NULL, stream, DURABLE_GRANT_ALL));
  CHECK_EQ_CODE(ACCESS(&r, v, doc, DURABLE_GRANT_WRITE), DURABLE_EACCES);
  CHECK_EQ_CODE(ACCESS(&r, v, other, DURABLE_GRANT_ALL), DURABLE_EACCES);
  CHECK_CONTAINS(r.message, "may not read");
  CHECK_OK(ACCESS(&r, v, other, DURABLE_GRANT_WRITE));

  /* Revoking one mode keeps the other. */
  CHECK_OK(REVOKE_M(&r, w, P("W/doc"), DURABLE_GRANT_WRITE));
  CHECK_EQ_CODE(WRITE_AS(&r, w, &put, 1), DURABLE_EACCES);
  CHECK_OK(GET(&r, w, doc));

  /* The listing: one line per principal and prefix with its modes. */
  CHECK_OK(GRANT_M(&r, w, P("W/other"), DURABLE_GRANT_ALL));
  CHECK_OK(GRANTS(&r, w));
  snprintf(msg, sizeof msg, "%s %s read;%s %s read,write;", w, P("W/doc"), w,
           P("W/other"));
  CHECK_EQ_STR(r.grants, msg);
  CHECK_OK(GRANTS(&r, NULL));
  snprintf(msg, sizeof msg, "%s %s write;", v, P("W/other"));
  CHECK_CONTAINS(r.grants, msg);
  snprintf(msg, sizeof msg, "%s %s read;", w, P("W/doc"));
  CHECK_CONTAINS(r.grants, msg);
  /* A revoke of everything on a prefix drops it from the listing. */
  CHECK_OK(REVOKE(&r, w, P("W/doc")));
  CHECK_OK(GRANTS(&r, w));
  snprintf(msg, sizeof msg, "%s %s read,write;", w, P("W/other"));
  CHECK_EQ_STR(r.grants, msg);
  res_reset(&r);
  case_end();
}

/* No string is the platform; names have rules. */
static void case_principal_names(void) {
  case_begin("principal_names");
  res_t r = {0};
  CHECK_OK(PUT(&r, P("doc"), "Doc", "{}"));
  char longname[DURABLE_PRINCIPAL_MAX + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *bad[] = {"platform",    "",      "al\nice", "al\x01ice", "\xff",
                       "bob\xc2\x85", longname};
  durable_write_t put = {.kind = DURABLE_WRITE_PUT, .path = P("doc")};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    REFUSED(EINVAL,
            durable_store_get(T.store, bad[i], P("doc"), stray_cb, NULL, &e));
    REFUSED(EINVAL, durable_store_query(T.store, bad[i], "namespace:x", NULL, 0,
                                        stray_cb, NULL, &e));
    REFUSED(EINVAL, durable_store_exists(T.store, bad[i], P("doc"), stray_cb,
                                         NULL, &e));
    REFUSED(EINVAL, durable_store_write_as(T.store, bad[i], &put, 1, stray_cb,
                                           NULL, &e));
    REFUSED(EINVAL,
            durable_store_grant(T.store, bad[i], P("doc"), DURABLE_GRANT_READ,
                                stray_cb, NULL, &e));
    REFUSED(EINVAL, durable__store_last_item(T.store, bad[i], P("doc"),
                                             stray_cb, NULL, &e));
    CHECK_EQ_CODE(durable_principal_check(bad[i], NULL), DURABLE_EINVAL);
  }
  durable_error_t why = {0};
  durable_principal_check("platform", &why);
  CHECK_CONTAINS(why.message, "the platform is no principal");
  CHECK_EQ_CODE(durable_principal_check(NULL, NULL), DURABLE_EINVAL);
  /* Case matters: "Platform" is an ordinary principal, with no rights. */
  CHECK_OK(durable_principal_check("Platform", NULL));
  CHECK_EQ_CODE(GET(&r, "Platform", P("doc")), DURABLE_EACCES);
  CHECK_OK(durable_principal_check("ålice@example.org", NULL));
  longname[DURABLE_PRINCIPAL_MAX] = '\0';
  CHECK_OK(durable_principal_check(longname, NULL));
  /* Modes outside read|write. */
  REFUSED(EINVAL, durable_store_grant(T.store, "alice", P("doc"), 0, stray_cb,
                                      NULL, &e));
  REFUSED(EINVAL, durable_store_grant(T.store, "alice", P("doc"), 4, stray_cb,
                                      NULL, &e));
  REFUSED(EINVAL, durable_store_revoke(T.store, "alice", P("doc"), 4, stray_cb,
                                       NULL, &e));
  REFUSED(EINVAL, durable__store_access(T.store, "alice", P("doc"), 0, stray_cb,
                                        NULL, &e));
  res_reset(&r);
  case_end();
}

static const contract_case_t cases[] = {
    {"access", case_access},
    {"access_modes", case_access_modes},
    {"principal_names", case_principal_names},
};
const contract_table_t contract_access = {cases,
                                          sizeof cases / sizeof cases[0]};

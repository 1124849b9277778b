/*
 * queries.c: the store contract on listings: namespace:NS and path:P with
 * paging, and type:T, the operator's listing across partitions and tables
 * (the bulk item type included), which a principal sees through its grants.
 * For a SQLite file, every node table's type index is checked too.
 */
#include "contract.h"

#include <sqlite3.h>

static int strcmp_ptr(const char **x, const char **y) {
  return strcmp(*x, *y);
}

static void case_query(void) {
  case_begin("query");
  res_t r = {0};
  /* Written out of order; ids compare as bytes ("E" < "a"). */
  const char *order[] = {"d", "b", "E", "a", "c"};
  for (int i = 0; i < 5; i++) {
    char content[32];
    snprintf(content, sizeof(content), "{\"id\":\"%s\"}", order[i]);
    CHECK_OK(PUT(&r, P("list/%s", order[i]), "Item", content));
  }
  /* Not children of list: a grandchild and a sibling namespace. */
  CHECK_OK(PUT(&r, P("list/a/sub"), "Item", "{}"));
  CHECK_OK(PUT(&r, P("list2/a"), "Item", "{}"));
  CHECK_OK(PUT(&r, P("lis"), "Item", "{}"));

  char q[1300];
  snprintf(q, sizeof(q), "namespace:%s", P("list"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 2));
  check_ids(&r, (const char *[]){"E", "a"}, 2);
  CHECK_EQ_INT(r.more, 1);
  CHECK_NODE(r.nodes[1], P("list/a"), "Item", "{\"id\":\"a\"}");
  CHECK_OK(QUERY(&r, NULL, q, "a", 2));
  check_ids(&r, (const char *[]){"b", "c"}, 2);
  CHECK_EQ_INT(r.more, 1);
  CHECK_OK(QUERY(&r, NULL, q, "c", 2));
  check_ids(&r, (const char *[]){"d"}, 1);
  CHECK_EQ_INT(r.more, 0);
  CHECK_OK(QUERY(&r, NULL, q, "d", 2));
  CHECK_EQ_INT(r.count, 0);
  CHECK_EQ_INT(r.more, 0);
  /* `after` need not be an existing id. */
  CHECK_OK(QUERY(&r, NULL, q, "bb", 2));
  check_ids(&r, (const char *[]){"c", "d"}, 2);
  CHECK_EQ_INT(r.more, 0);
  /* Exactly `limit` rows left: no more. */
  CHECK_OK(QUERY(&r, NULL, q, NULL, 5));
  check_ids(&r, (const char *[]){"E", "a", "b", "c", "d"}, 5);
  CHECK_EQ_INT(r.more, 0);
  CHECK_OK(QUERY(&r, NULL, q, "", 0)); /* 0 means 100 */
  check_ids(&r, (const char *[]){"E", "a", "b", "c", "d"}, 5);
  CHECK_EQ_INT(r.more, 0);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 1000));
  CHECK_EQ_INT(r.count, 5);

  /* No implicit parents: "list" itself was never written. */
  snprintf(q, sizeof(q), "namespace:%s", T.ns);
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  check_ids(&r, (const char *[]){"lis"}, 1);
  snprintf(q, sizeof(q), "namespace:%s", P("empty"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  CHECK_EQ_INT(r.count, 0);
  CHECK_EQ_INT(r.more, 0);

  /* path:P */
  snprintf(q, sizeof(q), "path:%s", P("list/b"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  CHECK_EQ_INT(r.count, 1);
  CHECK_NODE(r.nodes[0], P("list/b"), "Item", "{\"id\":\"b\"}");
  snprintf(q, sizeof(q), "path:%s", P("list/zz"));
  CHECK_OK(QUERY(&r, NULL, q, NULL, 0));
  CHECK_EQ_INT(r.count, 0);

  /* Queries that are not queries. */
  REFUSED(EINVAL, durable_store_query(T.store, NULL, "bogus", NULL, 0, stray_cb,
                                      NULL, &e));
  REFUSED(EINVAL, durable_store_query(T.store, NULL, "namespace:a//b", NULL, 0,
                                      stray_cb, NULL, &e));
  REFUSED(EINVAL, durable_store_query(T.store, NULL, "path:a/../b", NULL, 0,
                                      stray_cb, NULL, &e));
  res_reset(&r);
  case_end();
}

/* ---- type:T, the operator's listing across partitions ---- */

static void case_type_query(void) {
  case_begin("type_query");
  res_t r = {0};
  char type[96], q[128], other[96], a[256], b[256], c[256];
  snprintf(type, sizeof type, "Listed_%s", g_run);
  snprintf(q, sizeof q, "type:%s", type);
  snprintf(other, sizeof other, "%sb", g_run); /* a second partition */
  snprintf(a, sizeof a, "%s", P("owner/_DurableStream/Log"));
  snprintf(b, sizeof b, "%s", P("plain"));
  snprintf(c, sizeof c, "%s/x/_DurableStream/Log", other);
  CHECK_OK(PUT(&r, a, type, "{}"));
  CHECK_OK(PUT(&r, b, type, "{}"));
  CHECK_OK(PUT(&r, c, type, "{}"));
  /* another table, sorting first: the merge must order across tables */
  char d[256];
  snprintf(d, sizeof d, "%s", P("a/_DocumentPart/000001"));
  CHECK_OK(PUT(&r, d, type, "{}"));
  CHECK_OK(PUT(&r, P("not-listed"), "Other", "{}"));
  /* every node of the type, in path order, across partitions and tables */
  CHECK_OK(QUERY(&r, NULL, q, NULL, 100));
  CHECK_EQ_INT(r.count, 4);
  const char *want[4] = {a, b, c, d};
  qsort(want, 4, sizeof(*want),
        (int (*)(const void *, const void *))strcmp_ptr);
  for (size_t i = 0; i < 4; i++)
    CHECK_EQ_STR(r.nodes[i]->path, want[i]);
  /* paging by path */
  CHECK_OK(QUERY(&r, NULL, q, NULL, 3));
  CHECK_EQ_INT(r.count, 3);
  CHECK_EQ_INT(r.more, 1);
  char last[256];
  snprintf(last, sizeof last, "%s", r.nodes[2]->path);
  CHECK_OK(QUERY(&r, NULL, q, last, 3));
  CHECK_EQ_INT(r.count, 1);
  CHECK_EQ_INT(r.more, 0);
  CHECK_EQ_STR(r.nodes[0]->path, want[3]);
  /* a principal sees what its grants cover: a satellite follows its owner */
  char who[96];
  snprintf(who, sizeof who, "lister_%s", g_run);
  CHECK_OK(GRANT(&r, who, P("owner")));
  CHECK_OK(QUERY(&r, who, q, NULL, 100));
  CHECK_EQ_INT(r.count, 1);
  CHECK_EQ_STR(r.nodes[0]->path, a);
  /* ... even behind a page it may read nothing of: small pages, the
   * readable row third in path order */
  char who2[96];
  snprintf(who2, sizeof who2, "lister2_%s", g_run);
  CHECK_OK(GRANT(&r, who2, b));
  CHECK_OK(PUT(&r, P("b1"), type, "{}")); /* between a and b: not readable */
  CHECK_OK(PUT(&r, P("b2"), type, "{}"));
  CHECK_OK(PUT(&r, P("b3"), type, "{}"));
  CHECK_OK(QUERY(&r, who2, q, NULL, 1));
  CHECK_EQ_INT(r.count, 1);
  CHECK_EQ_STR(r.nodes[0]->path, b);
  res_reset(&r);
  case_end();
}

/* ---- type:T in every table, the bulk type included ---- */

/* The rows of "type:TYPE" under this case's namespace, in path order: a page
 * from just before it (its paths sort together, after "T.ns/"). */
static size_t type_rows(res_t *r, const char *type) {
  char q[128], after[400];
  snprintf(q, sizeof q, "type:%s", type);
  snprintf(after, sizeof after, "%s/", T.ns);
  CHECK_OK(QUERY(r, NULL, q, after, 1000));
  size_t n = strlen(after), k = 0;
  while (k < r->count && strncmp(r->nodes[k]->path, after, n) == 0)
    k++;
  return k;
}

static void case_type_query_tables(void) {
  case_begin("type_query_tables");
  res_t r = {0};
  char type[96];
  snprintf(type, sizeof type, "Typed_%s", g_run);
  /* one node of the type in each table, durable_stream_items included
   * (whose type index leaves DurableStreamItem out, see schema.h) */
  char items[700];
  snprintf(items, sizeof items, "%s",
           P("s/_DurableStream/Log/_DurableStreamItem"));
  char in_items[700], in_parts[700], in_threads[700], in_main[700];
  snprintf(in_items, sizeof in_items, "%.600s/000000000002/_DurableStream/Log",
           items);
  snprintf(in_parts, sizeof in_parts, "%s", P("d/_DocumentPart/000001"));
  snprintf(in_threads, sizeof in_threads, "%s", P("t/_ThreadMessage/m1"));
  snprintf(in_main, sizeof in_main, "%s", P("m"));
  CHECK_EQ_STR(durable__path_table(in_items), "durable_stream_items");
  CHECK_EQ_STR(durable__path_table(in_parts), "document_parts");
  CHECK_EQ_STR(durable__path_table(in_threads), "threads");
  CHECK_EQ_STR(durable__path_table(in_main), "mesh_nodes");
  const char *typed[4] = {in_items, in_parts, in_threads, in_main};
  for (int i = 0; i < 4; i++)
    CHECK_OK(PUT(&r, typed[i], type, "{}"));
  /* DurableStream nodes (what a host's start lists) in two tables */
  char stream_main[700], stream_items[700];
  snprintf(stream_main, sizeof stream_main, "%s", P("s/_DurableStream/Log"));
  snprintf(stream_items, sizeof stream_items,
           "%.600s/000000000003/_DurableStream/Log", items);
  CHECK_OK(PUT(&r, stream_main, "DurableStream", "{}"));
  CHECK_OK(PUT(&r, stream_items, "DurableStream", "{}"));
  /* items (the bulk type) in durable_stream_items, and one elsewhere */
  for (int s = 1; s <= 3; s++)
    CHECK_OK(PUT(&r, item_path(items, s), "DurableStreamItem", "{}"));
  char loose[700];
  snprintf(loose, sizeof loose, "%s", P("loose"));
  CHECK_OK(PUT(&r, loose, "DurableStreamItem", "{}"));

  qsort(typed, 4, sizeof(*typed),
        (int (*)(const void *, const void *))strcmp_ptr);
  CHECK_EQ_INT(type_rows(&r, type), 4);
  for (size_t i = 0; i < 4; i++)
    CHECK_EQ_STR(r.nodes[i]->path, typed[i]);

  const char *streams[2] = {stream_main, stream_items};
  qsort(streams, 2, sizeof(*streams),
        (int (*)(const void *, const void *))strcmp_ptr);
  CHECK_EQ_INT(type_rows(&r, "DurableStream"), 2);
  for (size_t i = 0; i < 2; i++)
    CHECK_EQ_STR(r.nodes[i]->path, streams[i]);

  /* the bulk type itself is listed too (by a scan) */
  const char *all[4] = {item_path(items, 1), item_path(items, 2),
                        item_path(items, 3), loose};
  char copies[4][700];
  for (int i = 0; i < 4; i++) {
    snprintf(copies[i], sizeof copies[i], "%s", all[i]);
    all[i] = copies[i];
  }
  qsort(all, 4, sizeof(*all), (int (*)(const void *, const void *))strcmp_ptr);
  CHECK_EQ_INT(type_rows(&r, "DurableStreamItem"), 4);
  for (size_t i = 0; i < 4; i++)
    CHECK_EQ_STR(r.nodes[i]->path, all[i]);
  res_reset(&r);
  case_end();

  if (g_sqlite_file[0] == '\0') {
    printf("# (type index check through sqlite3: only for a SQLite file)\n");
    return;
  }
  /* every node table has its type index; the item table's leaves the
   * items out */
  sqlite3 *db = NULL;
  CHECK_EQ_INT(sqlite3_open_v2(g_sqlite_file, &db, SQLITE_OPEN_READONLY, NULL),
               SQLITE_OK);
  const char *tables[4] = {"mesh_nodes", "durable_stream_items",
                           "document_parts", "threads"};
  for (int i = 0; i < 4; i++) {
    sqlite3_stmt *st = NULL;
    CHECK_EQ_INT(sqlite3_prepare_v2(db,
                                    "SELECT sql FROM sqlite_master WHERE "
                                    "type = 'index' AND tbl_name = ?1 AND "
                                    "name = ?1 || '_by_type'",
                                    -1, &st, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(st, 1, tables[i], -1, SQLITE_STATIC);
    CHECK_MSG(sqlite3_step(st) == SQLITE_ROW, "no type index on %s", tables[i]);
    const char *sql = (const char *)sqlite3_column_text(st, 0);
    CHECK_MSG(strstr(sql, "(node_type, path)") != NULL, "%s", sql);
    int partial = strstr(sql, "WHERE node_type <> 'DurableStreamItem'") != 0;
    CHECK_MSG(partial == (i == 1), "%s", sql);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
}

static const contract_case_t cases[] = {
    {"query", case_query},
    {"type_query", case_type_query},
    {"type_query_tables", case_type_query_tables},
};
const contract_table_t contract_queries = {cases,
                                           sizeof cases / sizeof cases[0]};

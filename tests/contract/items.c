/*
 * items.c: the store contract on stream items: read in sequence order from
 * any point, the last item, and placement: an owner, its stream and the
 * stream's items land in the tables their paths say (checked through
 * sqlite3 for a SQLite file) and read back alike from each.
 */
#include "contract.h"

#include <sqlite3.h>

static void case_items(void) {
  case_begin("items");
  res_t r = {0};
  char items[600];
  snprintf(items, sizeof(items), "%s",
           P("doc/_DurableStream/Log/_DurableStreamItem"));
  CHECK_OK(LAST_ITEM(&r, items));
  CHECK_EQ_INT(r.value, 0);
  CHECK_OK(READ_ITEMS(&r, NULL, items, 0, 10));
  CHECK_EQ_INT(r.count, 0);

  const int order[] = {3, 1, 2, 10, 5, 4, 9, 6, 8, 7};
  for (int i = 0; i < 10; i++) {
    char content[32];
    snprintf(content, sizeof(content), "{\"seq\":%d}", order[i]);
    CHECK_OK(PUT(&r, item_path(items, order[i]), "DurableStreamItem", content));
    CHECK_NODE(r.node, item_path(items, order[i]), "DurableStreamItem",
               content);
    CHECK_EQ_STR(r.node->main_node, P("doc"));
  }
  /* A child that is not a sequence is not an item. */
  CHECK_OK(PUT(&r, P("doc/_DurableStream/Log/_DurableStreamItem/x"), "", "{}"));
  /* Another stream's items are not these. */
  CHECK_OK(PUT(&r,
               item_path(P("doc/_DurableStream/Other/_DurableStreamItem"), 50),
               "", "{}"));

  CHECK_OK(READ_ITEMS(&r, NULL, items, 0, 100));
  check_items(&r, 0, 10);
  CHECK_OK(READ_ITEMS(&r, NULL, items, 3, 4));
  check_items(&r, 3, 4);
  CHECK_OK(READ_ITEMS(&r, NULL, items, 9, 100));
  check_items(&r, 9, 1);
  CHECK_OK(READ_ITEMS(&r, NULL, items, 10, 100));
  CHECK_EQ_INT(r.count, 0);
  CHECK_OK(READ_ITEMS(&r, NULL, items, 1000, 100));
  CHECK_EQ_INT(r.count, 0);
  CHECK_OK(LAST_ITEM(&r, items));
  CHECK_EQ_INT(r.value, 10);

  /* Past 12 digits' first few orders of magnitude: still numeric order. */
  CHECK_OK(PUT(&r, item_path(items, 123456789012LL), "", "{}"));
  CHECK_OK(LAST_ITEM(&r, items));
  CHECK_EQ_INT(r.value, 123456789012LL);
  CHECK_OK(READ_ITEMS(&r, NULL, items, 10, 100));
  CHECK_EQ_INT(r.count, 1);
  CHECK_EQ_STR(r.nodes[0]->id, "123456789012");
  /* A deleted last item no longer counts. */
  CHECK_OK(DELETE(&r, item_path(items, 123456789012LL)));
  CHECK_OK(LAST_ITEM(&r, items));
  CHECK_EQ_INT(r.value, 10);

  REFUSED(EINVAL, durable__store_read_items(T.store, NULL, "a//b", 0, 10,
                                            stray_cb, NULL, &e));
  REFUSED(EINVAL, durable__store_last_item(T.store, NULL, "a/../b", stray_cb,
                                           NULL, &e));
  res_reset(&r);
  case_end();
}

/* The SQLite file, opened beside the store: how many rows of `table` hold
 * `path`. */
static int sqlite_rows(const char *table, const char *path) {
  sqlite3 *db = NULL;
  CHECK_EQ_INT(sqlite3_open_v2(g_sqlite_file, &db, SQLITE_OPEN_READONLY, NULL),
               SQLITE_OK);
  char sql[256];
  snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE path = ?1", table);
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  CHECK_MSG(rc == SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
  sqlite3_bind_text(st, 1, path, -1, SQLITE_TRANSIENT);
  CHECK_EQ_INT(sqlite3_step(st), SQLITE_ROW);
  int n = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

static void case_placement(void) {
  case_begin("placement");
  res_t r = {0};
  struct {
    const char *owner_rel, *table;
  } owners[] = {
      {"T/_ThreadMessage/m1", "threads"},
      {"D/_DocumentPart/000001", "document_parts"},
      {"S/doc", "mesh_nodes"},
  };
  char paths[3][3][700];
  for (int i = 0; i < 3; i++) {
    snprintf(paths[i][0], sizeof(paths[i][0]), "%s",
             P("%s", owners[i].owner_rel));
    snprintf(paths[i][1], sizeof(paths[i][1]), "%.600s/_DurableStream/Log",
             paths[i][0]);
    snprintf(paths[i][2], sizeof(paths[i][2]), "%.600s/_DurableStreamItem",
             paths[i][1]);
    CHECK_OK(PUT(&r, paths[i][0], "Owner", "{\"owner\":1}"));
    CHECK_OK(PUT(&r, paths[i][1], "DurableStream", "{\"stream\":1}"));
    for (int s = 1; s <= 3; s++) {
      char content[32];
      snprintf(content, sizeof(content), "{\"seq\":%d}", s);
      CHECK_OK(
          PUT(&r, item_path(paths[i][2], s), "DurableStreamItem", content));
    }
  }
  for (int i = 0; i < 3; i++) {
    CHECK_OK(GET(&r, NULL, paths[i][0]));
    CHECK_NODE(r.node, paths[i][0], "Owner", "{\"owner\":1}");
    CHECK_OK(GET(&r, NULL, paths[i][1]));
    CHECK_NODE(r.node, paths[i][1], "DurableStream", "{\"stream\":1}");
    CHECK_OK(GET(&r, NULL, item_path(paths[i][2], 2)));
    CHECK_NODE(r.node, item_path(paths[i][2], 2), "DurableStreamItem",
               "{\"seq\":2}");
    CHECK_OK(READ_ITEMS(&r, NULL, paths[i][2], 0, 100));
    check_items(&r, 0, 3);
    CHECK_OK(LAST_ITEM(&r, paths[i][2]));
    CHECK_EQ_INT(r.value, 3);
    char q[800];
    snprintf(q, sizeof(q), "namespace:%s", paths[i][2]);
    CHECK_OK(QUERY(&r, NULL, q, "000000000001", 0));
    CHECK_EQ_INT(r.count, 2);
  }
  res_reset(&r);
  case_end();

  if (g_sqlite_file[0] == '\0') {
    printf("# (table check through sqlite3: only for a SQLite file)\n");
    return;
  }
  for (int i = 0; i < 3; i++) {
    g_line = __LINE__;
    CHECK_EQ_INT(sqlite_rows(owners[i].table, paths[i][0]), 1);
    CHECK_EQ_INT(sqlite_rows(durable__path_table(paths[i][1]), paths[i][1]), 1);
    for (int s = 1; s <= 3; s++) {
      const char *item = item_path(paths[i][2], s);
      CHECK_EQ_INT(sqlite_rows("durable_stream_items", item), 1);
      CHECK_EQ_INT(sqlite_rows("mesh_nodes", item), 0);
      CHECK_EQ_INT(sqlite_rows("threads", item), 0);
      CHECK_EQ_INT(sqlite_rows("document_parts", item), 0);
    }
  }
}

static const contract_case_t cases[] = {
    {"items", case_items},
    {"placement", case_placement},
};
const contract_table_t contract_items = {cases, sizeof cases / sizeof cases[0]};

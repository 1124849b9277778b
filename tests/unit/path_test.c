/*
 * path_test.c: the path rules, owners and table placement of durable.h, and
 * the error table.
 *
 * These are pure functions, so the test needs no loop and no store: each
 * invalid kind the header lists is refused with DURABLE_EINVAL and a message
 * that names the path and the rule; the edges of every limit are accepted;
 * placement follows the longest mapped segment that occurs as a *whole*
 * segment, wherever it sits in the path.  NodeType names follow their own
 * rules (durable_node_type_check): one line of printable UTF-8 of 1 to
 * DURABLE_NODE_TYPE_MAX bytes, refused otherwise with the type shown
 * escaped and the rule named.
 */
#include <durable_internal.h>

#include "check.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* A path of `n` bytes: "p/" then 'a' segments of at most 200 bytes. */
static char *long_path(char *buf, size_t n) {
  size_t i = 0;
  buf[i++] = 'p';
  while (i < n) {
    buf[i++] = '/';
    for (size_t k = 0; k < 200 && i < n; k++)
      buf[i++] = 'a';
  }
  /* never end on an empty segment */
  if (buf[n - 1] == '/')
    buf[n - 1] = 'a';
  buf[n] = '\0';
  return buf;
}

static char *repeat(char *buf, char c, size_t n, const char *suffix) {
  memset(buf, c, n);
  strcpy(buf + n, suffix);
  return buf;
}

/* Case-insensitive strstr. */
static int contains_ci(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] &&
           tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n)
      return 1;
  }
  return 0;
}

/* The message names the rule: one of the '|'-separated words occurs. */
static int names_rule(const char *message, const char *words) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", words);
  for (char *w = strtok(buf, "|"); w; w = strtok(NULL, "|"))
    if (contains_ci(message, w))
      return 1;
  return 0;
}

/* `path` is refused: EINVAL, err filled, the message names the path (its
 * first `shown` bytes: control bytes and long paths may be escaped or cut)
 * and the rule (one of `rule_words`). */
static void refused(const char *path, size_t shown, const char *rule_words,
                    int line) {
  durable_error_t err;
  memset(&err, 0, sizeof(err));
  int rc = durable_path_check(path, &err);
  if (rc != DURABLE_EINVAL || err.code != DURABLE_EINVAL) {
    fprintf(stderr, "path_test.c:%d: path \"%.60s\" (%zu bytes)\n", line, path,
            strlen(path));
  }
  CHECK_EQ_CODE(rc, DURABLE_EINVAL);
  CHECK_EQ_CODE(err.code, DURABLE_EINVAL);
  char named[64];
  if (shown > sizeof(named) - 1)
    shown = sizeof(named) - 1;
  snprintf(named, shown + 1, "%s", path);
  if (named[0] != '\0' && strstr(err.message, named) == NULL) {
    fprintf(stderr, "path_test.c:%d: message does not name the path\n", line);
    CHECK_CONTAINS(err.message, named);
  }
  if (!names_rule(err.message, rule_words)) {
    fprintf(stderr, "path_test.c:%d: message \"%s\" names none of \"%s\"\n",
            line, err.message, rule_words);
    CHECK(names_rule(err.message, rule_words));
  }
  /* The check works without a message too. */
  CHECK_EQ_CODE(durable_path_check(path, NULL), DURABLE_EINVAL);
}
#define REFUSED(path, shown, rule) refused(path, shown, rule, __LINE__)

static void accepted(const char *path, int line) {
  durable_error_t err;
  memset(&err, 0, sizeof(err));
  int rc = durable_path_check(path, &err);
  if (rc != 0)
    fprintf(stderr, "path_test.c:%d: \"%.60s\" refused: %s\n", line, path,
            err.message);
  CHECK_OK(rc);
}
#define ACCEPTED(path) accepted(path, __LINE__)

static void test_invalid_kinds(void) {
  static char buf[4096];
  REFUSED("", 0, "empty");
  REFUSED("/a/b", 4, "empty segment");
  REFUSED("a/b/", 4, "empty segment");
  REFUSED("a//b", 4, "empty segment");
  REFUSED("/", 1, "empty");
  REFUSED("a/./b", 5, "'.'|\".\"|dot|. or ..|./..");
  REFUSED("a/../b", 6, "'..'|\"..\"|dot|. or ..|./..");
  REFUSED("./a", 3, "'.'|\".\"|dot|. or ..|./..");
  REFUSED("a/..", 4, "'..'|\"..\"|dot|. or ..|./..");
  REFUSED("a/b\001c", 3, "control");
  REFUSED("a/b\nc", 3, "control");
  REFUSED("a/b\tc", 3, "control");
  REFUSED("a/b\177", 3, "control");
  REFUSED("a\\b/c", 1, "backslash|'\\'|\"\\\"|\\\\");
  REFUSED("a/b\\c", 3, "backslash|'\\'|\"\\\"|\\\\");
  REFUSED("a/\xff", 2, "utf-8|utf8");
  REFUSED("a/\xc0\xaf", 2, "utf-8|utf8");         /* overlong '/' */
  REFUSED("a/\xe2\x82", 2, "utf-8|utf8");         /* truncated */
  REFUSED("a/\xed\xa0\x80", 2, "utf-8|utf8");     /* a surrogate */
  REFUSED("a/\xf4\x90\x80\x80", 2, "utf-8|utf8"); /* above U+10FFFF */
  REFUSED("_x/a", 4, "partition|'_'|\"_\"|underscore");
  REFUSED("_DurableStream/a", 16, "partition|'_'|\"_\"|underscore");
  REFUSED("pg_x/a", 6, "pg_");
  REFUSED("pg_catalog", 10, "pg_");
  REFUSED(repeat(buf, 'p', DURABLE_PARTITION_MAX + 1, "/a"), 16,
          "partition|63|long");
  REFUSED(repeat(buf, 's', DURABLE_SEGMENT_MAX + 1, ""), 16,
          "segment|255|long");
  REFUSED(strcat(strcpy(buf, "P/"),
                 repeat(buf + 1000, 's', DURABLE_SEGMENT_MAX + 1, "/x")),
          16, "segment|255|long");
  REFUSED(long_path(buf, DURABLE_PATH_MAX + 1), 16, "long|1024");
  REFUSED(long_path(buf, 3000), 16, "long|1024");
  /* Leading and trailing spaces are data, but a NULL is not a path. */
  CHECK_EQ_CODE(durable_path_check(NULL, NULL), DURABLE_EINVAL);
}

static void test_valid(void) {
  static char buf[4096];
  ACCEPTED("a");
  ACCEPTED("Space/doc");
  ACCEPTED("Space/doc/_DurableStream/Log");
  ACCEPTED("T/_ThreadMessage/m1/_DurableStream/Log/_DurableStreamItem/"
           "000000000001");
  ACCEPTED("x'; DROP TABLE mesh_nodes; --/a");
  ACCEPTED("a/b c/\"q\"/%/*/?/:/;/'");
  ACCEPTED("a/\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac/\xf0\x9f\x98\x80");
  ACCEPTED("a/.../b");
  ACCEPTED("a/.b/b.");
  ACCEPTED(" a / b ");
  ACCEPTED("pgx/a");
  ACCEPTED("a/pg_x");
  ACCEPTED("a/_x");
  ACCEPTED(repeat(buf, 'p', DURABLE_PARTITION_MAX, "/a"));
  ACCEPTED(strcat(strcpy(buf, "P/"),
                  repeat(buf + 1000, 's', DURABLE_SEGMENT_MAX, "/x")));
  ACCEPTED(long_path(buf, DURABLE_PATH_MAX));
  CHECK_EQ_INT(strlen(buf), DURABLE_PATH_MAX);
}

/* `node_type` is refused: EINVAL, the message names the rule (one of
 * `rule_words`) and shows the type as `shown` (escaped). */
static void type_refused(const char *node_type, const char *shown,
                         const char *rule_words, int line) {
  durable_error_t err;
  memset(&err, 0, sizeof(err));
  int rc = durable_node_type_check(node_type, &err);
  if (rc != DURABLE_EINVAL)
    fprintf(stderr, "path_test.c:%d: node type \"%.60s\" accepted\n", line,
            node_type ? node_type : "(null)");
  CHECK_EQ_CODE(rc, DURABLE_EINVAL);
  CHECK_EQ_CODE(err.code, DURABLE_EINVAL);
  if (shown)
    CHECK_CONTAINS(err.message, shown);
  if (!names_rule(err.message, rule_words)) {
    fprintf(stderr, "path_test.c:%d: message \"%s\" names none of \"%s\"\n",
            line, err.message, rule_words);
    CHECK(names_rule(err.message, rule_words));
  }
  CHECK_EQ_CODE(durable_node_type_check(node_type, NULL), DURABLE_EINVAL);
}
#define TYPE_REFUSED(t, shown, rule) type_refused(t, shown, rule, __LINE__)

static void type_accepted(const char *node_type, int line) {
  durable_error_t err;
  memset(&err, 0, sizeof(err));
  int rc = durable_node_type_check(node_type, &err);
  if (rc != 0)
    fprintf(stderr, "path_test.c:%d: node type \"%.60s\" refused: %s\n", line,
            node_type, err.message);
  CHECK_OK(rc);
}
#define TYPE_ACCEPTED(t) type_accepted(t, __LINE__)

static void test_node_types(void) {
  static char buf[1024];
  TYPE_REFUSED(NULL, NULL, "missing");
  TYPE_REFUSED("", NULL, "empty");
  TYPE_REFUSED("Doc\nument", "'Doc\\x0aument'", "control");
  TYPE_REFUSED("Doc\r", "'Doc\\x0d'", "control");
  TYPE_REFUSED("\tDoc", "'\\x09Doc'", "control");
  TYPE_REFUSED("Doc\177", "'Doc\\x7f'", "control");
  TYPE_REFUSED("Doc\xc2\x85", NULL, "control");   /* U+0085, NEL */
  TYPE_REFUSED("Doc\xc2\x9f", NULL, "control");   /* U+009F */
  TYPE_REFUSED("Doc\xff", "'Doc\\xff'", "utf-8"); /* the message stays UTF-8 */
  TYPE_REFUSED("Doc\xc0\xaf", NULL, "utf-8");     /* overlong */
  TYPE_REFUSED("Doc\xe2\x82", NULL, "utf-8");     /* truncated */
  TYPE_REFUSED("Doc\xed\xa0\x80", NULL, "utf-8"); /* a surrogate */
  TYPE_REFUSED(repeat(buf, 'T', DURABLE_NODE_TYPE_MAX + 1, ""), "TTTT",
               "255|long");
  CHECK_EQ_INT(DURABLE_NODE_TYPE_MAX, 255);
  TYPE_ACCEPTED("Document");
  TYPE_ACCEPTED("DurableStream");
  TYPE_ACCEPTED("my.app/Doc type: v2 (\"x\")");
  TYPE_ACCEPTED("Caf\xc3\xa9 \xe6\x97\xa5\xf0\x9f\x98\x80");
  TYPE_ACCEPTED("\xc2\xa0nbsp"); /* U+00A0 is no control */
  TYPE_ACCEPTED(repeat(buf, 'T', DURABLE_NODE_TYPE_MAX, ""));
}

static void owner_is(const char *path, const char *want) {
  char out[DURABLE_PATH_MAX + 1];
  memset(out, 'x', sizeof(out));
  int n = durable_path_owner(path, out, sizeof(out));
  CHECK_EQ_INT(n, (int)strlen(want));
  CHECK_EQ_STR(out, want);
}

static void test_owner(void) {
  owner_is("Space/doc", "Space/doc");
  owner_is("a", "a");
  owner_is("Space/doc/_DurableStream/Log", "Space/doc");
  owner_is("Space/doc/_DurableStream/Log/_DurableStreamItem/000000000001",
           "Space/doc");
  owner_is("T/_ThreadMessage/m1/_DurableStream/Log/_DurableStreamItem/"
           "000000000001",
           "T");
  owner_is("D/_DocumentPart/000001", "D");
  owner_is("a/b/c_d/_e/f", "a/b/c_d");

  /* The buffer: exactly enough fits; one byte less is refused. */
  char out[16];
  CHECK_EQ_INT(durable_path_owner("Space/doc/_S/x", out, 10), 9);
  CHECK_EQ_STR(out, "Space/doc");
  CHECK_EQ_CODE(durable_path_owner("Space/doc/_S/x", out, 9), DURABLE_EINVAL);
  CHECK_EQ_CODE(durable_path_owner("Space/doc", out, 0), DURABLE_EINVAL);
}

/* "The rules, checked by durable_path_check() and by every call that takes
 * a path": an invalid path has no owner. */
static void test_owner_invalid(void) {
  char out[16];
  CHECK_EQ_CODE(durable_path_owner("a//b", out, sizeof(out)), DURABLE_EINVAL);
  CHECK_EQ_CODE(durable_path_owner("", out, sizeof(out)), DURABLE_EINVAL);
  CHECK_EQ_CODE(durable_path_owner("/_x", out, sizeof(out)), DURABLE_EINVAL);
  CHECK_EQ_CODE(durable_path_owner("a/../_b", out, sizeof(out)),
                DURABLE_EINVAL);
}

static void test_table(void) {
  /* The longest-segment rule: a path lives in the table of the longest
   * mapped segment it holds, wherever that segment is. */
  CHECK_EQ_STR(durable__path_table("T/_ThreadMessage/m1/_DurableStream/Log/"
                                   "_DurableStreamItem/000000000001"),
               "durable_stream_items");
  CHECK_EQ_STR(durable__path_table("D/_DocumentPart/000001/_DurableStream/Log/"
                                   "_DurableStreamItem/000000000001"),
               "durable_stream_items");
  CHECK_EQ_STR(durable__path_table("D/_DocumentPart/000001"), "document_parts");
  CHECK_EQ_STR(durable__path_table("Space/doc"), "mesh_nodes");

  CHECK_EQ_STR(durable__path_table("T/_ThreadMessage/m1"), "threads");
  CHECK_EQ_STR(durable__path_table("S/doc/_DurableStream/Log"), "mesh_nodes");
  CHECK_EQ_STR(durable__path_table("S/doc/_DurableStream/Log/"
                                   "_DurableStreamItem/000000000001"),
               "durable_stream_items");
  CHECK_EQ_STR(durable__path_table("S/a/_DocumentPart"), "document_parts");
  CHECK_EQ_STR(durable__path_table("a"), "mesh_nodes");
  /* Longest wins wherever it sits, not the first nor the last. */
  CHECK_EQ_STR(durable__path_table("D/_DurableStreamItem/1/_DocumentPart/2"),
               "durable_stream_items");
  CHECK_EQ_STR(durable__path_table("T/_ThreadMessage/m1/_DocumentPart/2"),
               "threads");
  CHECK_EQ_STR(durable__path_table("D/_DocumentPart/2/_ThreadMessage/m1"),
               "threads");
  /* Only whole segments count. */
  CHECK_EQ_STR(durable__path_table("S/x_DocumentPart/1"), "mesh_nodes");
  CHECK_EQ_STR(durable__path_table("S/_DocumentPartX/1"), "mesh_nodes");
  CHECK_EQ_STR(durable__path_table("S/_DurableStreamItems/1"), "mesh_nodes");
  CHECK_EQ_STR(durable__path_table("S/_DurableStream/Item"), "mesh_nodes");
  CHECK_EQ_STR(durable__path_table("S/a_ThreadMessage"), "mesh_nodes");
  CHECK_EQ_STR(durable__path_table("S/_threadmessage/1"), "mesh_nodes");
}

static void test_errors(void) {
#define XX(name, value, text)                                                  \
  CHECK_EQ_INT(DURABLE_##name, value);                                         \
  CHECK_LT_INT(DURABLE_##name, 0);                                             \
  CHECK_EQ_STR(durable_err_name(DURABLE_##name), #name);                       \
  CHECK_EQ_STR(durable_strerror(DURABLE_##name), text);
  DURABLE_ERRNO_MAP(XX)
#undef XX
  CHECK_EQ_STR(durable_err_name(DURABLE_EEXIST), "EEXIST");
  CHECK_EQ_STR(durable_strerror(DURABLE_EEXIST), "already exists");
  /* Never NULL, even for codes outside the table. */
  CHECK(durable_strerror(0) != NULL);
  CHECK(durable_err_name(0) != NULL);
  CHECK(durable_strerror(-9999) != NULL);
  CHECK(durable_err_name(-9999) != NULL);
  CHECK(durable_strerror(12345) != NULL);
  CHECK(durable_err_name(12345) != NULL);
  /* Distinct codes. */
  int codes[] = {
#define XX(name, value, text) value,
      DURABLE_ERRNO_MAP(XX)
#undef XX
  };
  size_t n = sizeof(codes) / sizeof(codes[0]);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++)
      CHECK_NE_INT(codes[i], codes[j]);
}

static const check_test_t tests[] = {
    {"invalid_kinds", test_invalid_kinds},
    {"valid", test_valid},
    {"owner", test_owner},
    {"table", test_table},
    {"errors", test_errors},
    {"owner_invalid", test_owner_invalid},
    {"node_types", test_node_types},
};

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0);
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

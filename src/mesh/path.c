/*
 * path.c: the path rules, in one place.
 *
 * A path is `namespace/id`, segments separated by '/'.  The rules are listed
 * with durable_path_check() in durable.h; this file is the only code that
 * decides them, and every entry point that takes a path calls it, so a bad
 * path is refused before anything is queued.  The owner and the placement
 * rules live here too: the owner of a satellite is the path before its first
 * '_' segment; a path is stored in the table of the longest mapped segment
 * it contains (schema.c holds the list).
 *
 * NodeType names have rules of their own (durable_node_type_check): they are
 * names a person reads in logs and plugin files, and the key a hub's
 * configuration is found by, so they are one line of printable UTF-8.
 * Principal names (durable_principal_check) are one such line too: they
 * appear in every denial a log or a user reads.
 */
#include "schema.h"
#include "store.h"

#include "durable_text.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Quote a path or a type for a message: control characters and bytes that
 * are not UTF-8 shown as \xNN, long ones cut, so the message itself stays
 * one readable line of valid UTF-8. */
static const char *shown(const char *path, char *buf, size_t size) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)path; *p;) {
    if (o + 8 >= size) {
      memcpy(buf + o, "...", 4);
      return buf;
    }
    size_t n = durable__utf8_len((const char *)p);
    if (n == 0 || *p < 0x20 || *p == 0x7F) {
      buf[o++] = '\\';
      buf[o++] = 'x';
      buf[o++] = hex[*p >> 4];
      buf[o++] = hex[*p & 15];
      p++;
    } else {
      memcpy(buf + o, p, n);
      o += n;
      p += n;
    }
  }
  buf[o] = '\0';
  return buf;
}

#define REFUSE(...)                                                            \
  durable__error(err, DURABLE_EINVAL, "path '%s' is invalid: " __VA_ARGS__)

int durable_path_check(const char *path, durable_error_t *err) {
  char q[200];
  if (path == NULL)
    return durable__error(err, DURABLE_EINVAL, "path is missing");
  size_t len = strlen(path);
  if (len == 0)
    return durable__error(err, DURABLE_EINVAL, "path is empty");
  if (len > DURABLE_PATH_MAX)
    return REFUSE("longer than %d bytes (%zu)", shown(path, q, sizeof q),
                  DURABLE_PATH_MAX, len);
  const unsigned char *p = (const unsigned char *)path;
  const unsigned char *seg = p;
  int first = 1;
  for (;;) {
    if (*p == '/' || *p == '\0') {
      size_t n = (size_t)(p - seg);
      if (n == 0)
        return REFUSE("empty segment (no leading, trailing or doubled '/')",
                      shown(path, q, sizeof q));
      if ((n == 1 && seg[0] == '.') ||
          (n == 2 && seg[0] == '.' && seg[1] == '.'))
        return REFUSE("segment '%.*s' is not allowed", shown(path, q, sizeof q),
                      (int)n, (const char *)seg);
      if (n > DURABLE_SEGMENT_MAX)
        return REFUSE("a segment is longer than %d bytes",
                      shown(path, q, sizeof q), DURABLE_SEGMENT_MAX);
      if (first) {
        if (seg[0] == '_')
          return REFUSE("the first segment (the partition) must not begin "
                        "with '_'",
                        shown(path, q, sizeof q));
        if (n > DURABLE_PARTITION_MAX)
          return REFUSE("the first segment (the partition) is longer than "
                        "%d bytes",
                        shown(path, q, sizeof q), DURABLE_PARTITION_MAX);
        if (n >= 3 && strncasecmp((const char *)seg, "pg_", 3) == 0)
          return REFUSE("the first segment (the partition) must not begin "
                        "with 'pg_'",
                        shown(path, q, sizeof q));
        /* A partition is a PostgreSQL schema: never one of PostgreSQL's own
         * (information_schema; pg_* above) nor public, where durable keeps
         * its own tables and functions (durable_grants,
         * ensure_partition_schema).  The same rule on every store, so that a
         * path valid on SQLite stays valid on PostgreSQL. */
        if ((n == 6 && strncmp((const char *)seg, "public", 6) == 0) ||
            (n == 18 &&
             strncmp((const char *)seg, "information_schema", 18) == 0))
          return REFUSE("the partition '%.*s' is a schema of PostgreSQL's "
                        "own or of durable's",
                        shown(path, q, sizeof q), (int)n, (const char *)seg);
        first = 0;
      }
      if (*p == '\0')
        break;
      seg = ++p;
      continue;
    }
    if (*p < 0x20 || *p == 0x7F)
      return REFUSE("control character at byte %zu", shown(path, q, sizeof q),
                    (size_t)(p - (const unsigned char *)path));
    if (*p == '\\')
      return REFUSE("'\\' is not allowed", shown(path, q, sizeof q));
    size_t n = durable__utf8_len((const char *)p);
    if (n == 0)
      return REFUSE("not valid UTF-8 at byte %zu", shown(path, q, sizeof q),
                    (size_t)(p - (const unsigned char *)path));
    p += n;
  }
  return 0;
}

/* One segment taken on its own (a publish id): the segment rules of a
 * path, and '/' refused, since it would make two.  `what` names it in the
 * message ("publish id 'a/b' is invalid: '/' is not allowed"). */
#define REFUSE_SEGMENT(...)                                                    \
  durable__error(err, DURABLE_EINVAL, "%s '%s' is invalid: " __VA_ARGS__)

int durable__segment_check(const char *what, const char *segment, size_t max,
                           durable_error_t *err) {
  char q[200];
  if (segment == NULL)
    return durable__error(err, DURABLE_EINVAL, "%s is missing", what);
  size_t len = strlen(segment);
  if (len == 0)
    return durable__error(err, DURABLE_EINVAL, "%s is empty", what);
  const char *s = shown(segment, q, sizeof q);
  if (len > max)
    return REFUSE_SEGMENT("longer than %zu bytes (%zu)", what, s, max, len);
  if (strcmp(segment, ".") == 0 || strcmp(segment, "..") == 0)
    return REFUSE_SEGMENT("'.' and '..' are not allowed", what, s);
  const unsigned char *b = (const unsigned char *)segment;
  for (const unsigned char *p = b; *p;) {
    if (*p == '/')
      return REFUSE_SEGMENT("'/' is not allowed", what, s);
    if (*p == '\\')
      return REFUSE_SEGMENT("'\\' is not allowed", what, s);
    if (*p < 0x20 || *p == 0x7F)
      return REFUSE_SEGMENT("control character at byte %zu", what, s,
                            (size_t)(p - b));
    size_t n = durable__utf8_len((const char *)p);
    if (n == 0)
      return REFUSE_SEGMENT("not valid UTF-8 at byte %zu", what, s,
                            (size_t)(p - b));
    p += n;
  }
  return 0;
}

/* The NodeType rules: see durable_node_type_check() in durable.h. */
#define REFUSE_TYPE(...)                                                       \
  durable__error(err, DURABLE_EINVAL, "node type '%s' is invalid: " __VA_ARGS__)

int durable_node_type_check(const char *node_type, durable_error_t *err) {
  char q[200];
  if (node_type == NULL)
    return durable__error(err, DURABLE_EINVAL, "node type is missing");
  size_t len = strlen(node_type);
  if (len == 0)
    return durable__error(err, DURABLE_EINVAL, "node type is empty");
  if (len > DURABLE_NODE_TYPE_MAX)
    return REFUSE_TYPE("longer than %d bytes (%zu)",
                       shown(node_type, q, sizeof q), DURABLE_NODE_TYPE_MAX,
                       len);
  const unsigned char *s = (const unsigned char *)node_type;
  for (const unsigned char *p = s; *p;) {
    if (*p < 0x20 || *p == 0x7F)
      return REFUSE_TYPE("control character at byte %zu",
                         shown(node_type, q, sizeof q), (size_t)(p - s));
    size_t n = durable__utf8_len((const char *)p);
    if (n == 0)
      return REFUSE_TYPE("not valid UTF-8 at byte %zu",
                         shown(node_type, q, sizeof q), (size_t)(p - s));
    /* U+0080..U+009F (C1 controls) are 0xC2 0x80..0x9F */
    if (n == 2 && p[0] == 0xC2 && p[1] <= 0x9F)
      return REFUSE_TYPE("control character at byte %zu",
                         shown(node_type, q, sizeof q), (size_t)(p - s));
    p += n;
  }
  return 0;
}

/* The principal rules: see durable_principal_check() in durable.h. */
#define REFUSE_PRINCIPAL(...)                                                  \
  durable__error(err, DURABLE_EINVAL, "principal '%s' is invalid: " __VA_ARGS__)

int durable_principal_check(const char *principal, durable_error_t *err) {
  char q[200];
  if (principal == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "principal is missing (the platform is no "
                          "principal: name none to act as it)");
  size_t len = strlen(principal);
  if (len == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "principal is empty (the platform is no principal: "
                          "name none to act as it)");
  if (len > DURABLE_PRINCIPAL_MAX)
    return REFUSE_PRINCIPAL("longer than %d bytes (%zu)",
                            shown(principal, q, sizeof q),
                            DURABLE_PRINCIPAL_MAX, len);
  if (strcmp(principal, "platform") == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "'platform' is not a principal's name: the platform "
                          "is no principal, and acting as it means naming "
                          "none");
  const unsigned char *s = (const unsigned char *)principal;
  for (const unsigned char *p = s; *p;) {
    size_t n = durable__utf8_len((const char *)p);
    if (*p < 0x20 || *p == 0x7F || (n == 2 && p[0] == 0xC2 && p[1] <= 0x9F))
      return REFUSE_PRINCIPAL("control character at byte %zu",
                              shown(principal, q, sizeof q), (size_t)(p - s));
    if (n == 0)
      return REFUSE_PRINCIPAL("not valid UTF-8 at byte %zu",
                              shown(principal, q, sizeof q), (size_t)(p - s));
    p += n;
  }
  return 0;
}

size_t durable__owner_len(const char *path) {
  const char *s = strstr(path, "/_"); /* the first segment beginning with '_' */
  return s ? (size_t)(s - path) : strlen(path);
}

int durable_path_owner(const char *path, char *out, size_t size) {
  if (out == NULL || durable_path_check(path, NULL) < 0)
    return DURABLE_EINVAL;
  size_t n = durable__owner_len(path);
  if (n + 1 > size)
    return DURABLE_EINVAL;
  memcpy(out, path, n);
  out[n] = '\0';
  return (int)n;
}

/* Whether `seg` occurs as a whole segment of `path`. */
static int has_segment(const char *path, const char *seg) {
  size_t n = strlen(seg);
  for (const char *s = path; (s = strstr(s, seg)) != NULL; s++) {
    int starts = s == path || s[-1] == '/';
    int ends = s[n] == '\0' || s[n] == '/';
    if (starts && ends)
      return 1;
  }
  return 0;
}

const char *durable__path_table(const char *path) {
  const char *table = DURABLE__PRIMARY_TABLE;
  size_t best = 0;
  if (path == NULL)
    return table;
  for (size_t i = 0; i < durable__mapping_count; i++) {
    size_t n = strlen(durable__mappings[i].segment);
    if (n > best && has_segment(path, durable__mappings[i].segment)) {
      best = n;
      table = durable__mappings[i].table;
    }
  }
  return table;
}

int durable__path_split(const char *path, char **ns, char **id) {
  const char *slash = strrchr(path, '/');
  *ns = slash ? strndup(path, (size_t)(slash - path)) : strdup("");
  *id = strdup(slash ? slash + 1 : path);
  if (*ns == NULL || *id == NULL) {
    free(*ns);
    free(*id);
    *ns = *id = NULL;
    return DURABLE_ENOMEM;
  }
  return 0;
}

durable__place_t durable__path_place(const char *path, char *partition_buf,
                                     size_t size) {
  durable__place_t place;
  size_t n = strcspn(path, "/");
  if (n >= size)
    n = size - 1; /* checked paths never exceed the partition max */
  memcpy(partition_buf, path, n);
  partition_buf[n] = '\0';
  place.partition = partition_buf;
  place.table = durable__path_table(path);
  return place;
}

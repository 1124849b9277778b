/*
 * group.c: the names of consumer groups -- what a group may be called,
 * where its node lives, how its start is written -- shared by the consumer
 * that declares one, the stream hub that keeps it, and the operator's
 * commands that show and move it.
 *
 * A group is one more leased consumer of a stream, independent of the
 * stream's own and of every other group: its lease, epoch and checkpoint
 * live in a node of their own under the stream node,
 * "{key}/_DurableStream/{ns}/_DurableStreamGroup/{group}", so that a group
 * acknowledging never contends with the stream's appends, and is placed
 * with its stream.  Names are plain words (letters, digits, '.', '_', '-'),
 * because they appear in node paths, message types, metric labels and the
 * dead-letter family {ns}.dead.{group}.
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int name_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
         (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
}

int durable_group_check(const char *group, durable_error_t *err) {
  if (group == NULL || *group == '\0')
    return durable__error(err, DURABLE_EINVAL,
                          "a consumer group needs a name (1 to %d letters, "
                          "digits, '.', '_' or '-')",
                          DURABLE_GROUP_MAX);
  size_t n = strlen(group);
  const char *bad = group;
  while (*bad && name_char(*bad))
    bad++;
  if (n > DURABLE_GROUP_MAX)
    return durable__error(err, DURABLE_EINVAL,
                          "consumer group name '%.64s...' is %zu bytes long: "
                          "at most %d",
                          group, n, DURABLE_GROUP_MAX);
  if (*bad != '\0' || !name_char(*group) || *group == '.' || *group == '_' ||
      *group == '-')
    return durable__error(
        err, DURABLE_EINVAL,
        "consumer group name '%s' may hold only letters, digits, '.', '_' "
        "and '-', and starts with a letter or a digit",
        group);
  return 0;
}

int durable_group_path(const durable_stream_id_t *stream, const char *group,
                       char *out, size_t size) {
  if (durable_group_check(group, NULL) < 0)
    return DURABLE_EINVAL;
  int n = durable_stream_path(stream, out, size);
  if (n < 0)
    return n;
  int m = snprintf(out + n, size - (size_t)n, "/" DURABLE__GROUP_SEGMENT "/%s",
                   group);
  return m < 0 || (size_t)(n + m) >= size ? DURABLE_EINVAL : n + m;
}

int durable_start_parse(const char *text, durable_start_t *out,
                        durable_error_t *err) {
  memset(out, 0, sizeof *out);
  if (text == NULL || strcmp(text, "earliest") == 0)
    return 0;
  if (strcmp(text, "latest") == 0) {
    out->kind = DURABLE_START_LATEST;
    return 0;
  }
  char *end = NULL;
  long long n = (*text >= '0' && *text <= '9') ? strtoll(text, &end, 10) : 0;
  if (n > 0 && *end == '\0') {
    out->kind = DURABLE_START_SEQUENCE;
    out->value = n;
    return 0;
  }
  int64_t ms = durable__parse_time(text);
  if (ms > 0) {
    out->kind = DURABLE_START_TIME;
    out->value = ms;
    return 0;
  }
  return durable__error(err, DURABLE_EINVAL,
                        "'%.64s' is not where a group starts: say earliest, "
                        "latest, a sequence (42) or a UTC time "
                        "(2026-12-05T10:00:00Z)",
                        text);
}

void durable__start_format(const durable_start_t *start, char *out,
                           size_t size) {
  switch (start->kind) {
  case DURABLE_START_LATEST:
    snprintf(out, size, "latest");
    break;
  case DURABLE_START_SEQUENCE:
    snprintf(out, size, "%lld", (long long)start->value);
    break;
  case DURABLE_START_TIME:
    durable__iso_time(start->value, out);
    break;
  default:
    snprintf(out, size, "earliest");
  }
}

int durable__group_split(const char *path, char *stream_path, size_t size,
                         const char **group) {
  const char *seg = strstr(path, "/" DURABLE__GROUP_SEGMENT "/");
  if (seg == NULL ||
      strchr(seg + 1 + strlen(DURABLE__GROUP_SEGMENT) + 1, '/') != NULL)
    return 0;
  snprintf(stream_path, size, "%.*s", (int)(seg - path), path);
  *group = seg + 1 + strlen(DURABLE__GROUP_SEGMENT) + 1;
  return 1;
}

void durable__consumer_msg(char out[DURABLE_PATH_MAX], const char *prefix,
                           const char *ns, const char *group) {
  /* a family has no '/', so "{ns}/{group}" names one group's only */
  snprintf(out, DURABLE_PATH_MAX, "%s%s%s%s", prefix, ns, group ? "/" : "",
           group ? group : "");
}

int64_t durable__detach_idle_ms(const durable_detach_t *d) {
  return d->idle_ms == 0  ? DURABLE_DETACH_IDLE_MS
         : d->idle_ms < 0 ? -1
                          : d->idle_ms;
}

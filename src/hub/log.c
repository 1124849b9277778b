/*
 * log.c: one line per event, level-filtered by DURABLE_LOG.
 *
 * The runtime's sentences ("[DurableStreams] ... TOOK OVER ...") are meant
 * to be grepped, so a line is always one line: a line break in a message
 * becomes a space (durable__one_line, durable_text.h).  The default sink
 * writes to stderr with a UTC timestamp and the level; an application (or a
 * test) may install its own sink in the mesh options and receives the bare
 * message.
 */
#include "hub.h"

#include "clock.h"
#include "durable_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <strings.h>

int durable__log_level_parse(const char *value, durable_log_level_t *out) {
  static const struct {
    const char *name;
    durable_log_level_t level;
  } names[] = {{"error", DURABLE_LOG_ERROR},  {"warn", DURABLE_LOG_WARN},
               {"warning", DURABLE_LOG_WARN}, {"info", DURABLE_LOG_INFO},
               {"debug", DURABLE_LOG_DEBUG},  {"trace", DURABLE_LOG_DEBUG}};
  if (value == NULL || *value == '\0') {
    *out = DURABLE_LOG_INFO;
    return 0;
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcasecmp(value, names[i].name) == 0) {
      *out = names[i].level;
      return 0;
    }
  *out = DURABLE_LOG_INFO;
  return DURABLE_EINVAL;
}

/* A value that is not a level is said once per process (the command refuses
 * it before anything runs; an embedder's process learns it here) and read
 * as the default, info. */
durable_log_level_t durable__log_threshold(void) {
  static int warned;
  const char *v = getenv("DURABLE_LOG");
  durable_log_level_t level;
  if (durable__log_level_parse(v, &level) != 0 && !warned) {
    warned = 1;
    char shown[80];
    durable__format(shown, sizeof shown, "%s", v);
    fprintf(stderr,
            "durable: DURABLE_LOG='%s' is not a level (error, warn, info or "
            "debug, in any case); logging at info\n",
            shown);
  }
  return level;
}

const char *durable_log_level_name(durable_log_level_t level) {
  switch (level) {
  case DURABLE_LOG_ERROR:
    return "error";
  case DURABLE_LOG_WARN:
    return "warn";
  case DURABLE_LOG_INFO:
    return "info";
  case DURABLE_LOG_DEBUG:
    return "debug";
  }
  return "unknown";
}

void durable__log_stderr(durable_log_level_t level, const char *line) {
  char upper[8];
  const char *name = durable_log_level_name(level);
  size_t i = 0;
  for (; name[i] && i < sizeof upper - 1; i++)
    upper[i] = (char)toupper((unsigned char)name[i]);
  upper[i] = '\0';
  char when[DURABLE_ISO_TIME_MAX];
  durable__iso_time(durable__now_ms(), when);
  fprintf(stderr, "%s %-5s %s\n", when, upper, line);
}

void durable__logv(durable_mesh_t *mesh, durable_log_level_t level,
                   const char *fmt, va_list ap) {
  if (level > durable__log_threshold())
    return;
  char line[2048];
  int len = vsnprintf(line, sizeof line, fmt, ap);
  if (len >= (int)sizeof line) /* cut between two characters */
    line[durable__utf8_cut(line, sizeof line - 1)] = '\0';
  durable__one_line(line);
  if (mesh && mesh->log)
    mesh->log(level, line, mesh->log_data);
  else
    durable__log_stderr(level, line);
}

void durable_mesh_log(durable_mesh_t *mesh, durable_log_level_t level,
                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  durable__logv(mesh, level, fmt, ap);
  va_end(ap);
}

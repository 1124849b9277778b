/*
 * postgres_conn.c: one libpq session of the PostgreSQL backend, below
 * everything else in it: opening it (blocking, within our own deadline and
 * with the keepalives that bound how long either end waits for the other),
 * the name it goes by in messages (its URL without the password), and
 * reading libpq's errors (one line; whether the connection is gone).
 *
 * Connecting is bounded by our own CONNECT_TIMEOUT_MS deadline
 * (PQconnectStartParams + poll()), because libpq's connect_timeout applies
 * per address tried, not to the whole attempt.  The worker connections
 * (postgres_store.c) and the LISTEN connection (postgres_feed.c) are both
 * opened here.
 */
#include "postgres.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CONNECT_TIMEOUT_MS 5000
/* How long a machine that vanishes or is cut off keeps its liveness lock
 * at most, and how long any call on a connection can hang
 * (durable__pg_open). */
#define LIVENESS_BOUND_MS 10000
#define STR_(x) #x
#define STR(x) STR_(x)

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *durable__pg_format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return NULL;
  char *s = malloc((size_t)n + 1);
  if (s == NULL)
    return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* libpq's messages span lines ("...failed: X\n\tIs the server running...");
 * ours are one line. */
void durable__pg_one_line(char *dst, size_t size, const char *src) {
  size_t n = 0;
  int space = 0;
  for (; *src && n + 1 < size; src++) {
    if (*src == '\n' || *src == '\r' || *src == '\t' || *src == ' ') {
      space = n > 0;
      continue;
    }
    if (space && n + 2 < size)
      dst[n++] = ' ';
    space = 0;
    dst[n++] = *src;
  }
  dst[n] = '\0';
}

/* The URL or conninfo with any password replaced by "***", for messages. */
char *durable__pg_mask_password(const char *url) {
  size_t len = strlen(url);
  /* each "***" stands for a "password" key or a ':' of at least as many
   * bytes, so twice the length is always enough */
  char *out = malloc(len * 2 + 8);
  if (out == NULL)
    return NULL;
  size_t o = 0, i = 0;
  const char *p = NULL;
  if (strncmp(url, "postgresql://", 13) == 0)
    p = url + 13;
  if (strncmp(url, "postgres://", 11) == 0)
    p = url + 11;
  if (p != NULL) {
    /* URI: user:password@host... and ?password=... */
    size_t auth = (size_t)(p - url);
    size_t end = auth + strcspn(p, "/?");
    size_t at = end, colon = end;
    for (size_t k = auth; k < end; k++)
      if (url[k] == '@')
        at = k;
    for (size_t k = auth; k < at; k++)
      if (url[k] == ':') {
        colon = k;
        break;
      }
    int in_query = 0;
    while (i < len) {
      if (i == colon + 1 && colon < at && at < end) {
        memcpy(out + o, "***", 3);
        o += 3;
        i = at;
        continue;
      }
      if (url[i] == '?')
        in_query = 1;
      if (in_query && (url[i] == '?' || url[i] == '&') &&
          strncmp(url + i + 1, "password=", 9) == 0) {
        memcpy(out + o, url + i, 10);
        o += 10;
        memcpy(out + o, "***", 3);
        o += 3;
        i += 10;
        while (i < len && url[i] != '&' && url[i] != '#')
          i++;
        continue;
      }
      out[o++] = url[i++];
    }
    out[o] = '\0';
    return out;
  }
  /* conninfo: key = value pairs, values bare or 'quoted' with \ escapes */
  while (i < len) {
    while (i < len && (url[i] == ' ' || url[i] == '\t' || url[i] == '\n'))
      out[o++] = url[i++];
    size_t key = i;
    while (i < len && url[i] != '=' && url[i] != ' ' && url[i] != '\t')
      out[o++] = url[i++];
    int is_password = i - key == 8 && strncmp(url + key, "password", 8) == 0;
    while (i < len && (url[i] == ' ' || url[i] == '\t'))
      out[o++] = url[i++];
    if (i < len && url[i] == '=')
      out[o++] = url[i++];
    while (i < len && (url[i] == ' ' || url[i] == '\t'))
      out[o++] = url[i++];
    size_t value = i;
    if (i < len && url[i] == '\'') {
      for (i++; i < len && url[i] != '\''; i++)
        if (url[i] == '\\' && i + 1 < len)
          i++;
      if (i < len)
        i++;
    } else {
      for (; i < len && url[i] != ' ' && url[i] != '\t'; i++)
        if (url[i] == '\\' && i + 1 < len)
          i++;
    }
    if (is_password && i > value) {
      memcpy(out + o, "***", 3);
      o += 3;
    } else {
      memcpy(out + o, url + value, i - value);
      o += i - value;
    }
  }
  out[o] = '\0';
  return out;
}

static void quiet_notices(void *arg, const char *message) {
  /* "schema ... already exists, skipping" and the like are not news. */
  (void)arg;
  (void)message;
}

/* A connection is gone: libpq says so, or the server said it is going away
 * (class 08 connection exceptions, 57P01..57P03 shutdown / cannot connect).
 */
int durable__pg_is_lost(PGconn *pg, const char *sqlstate) {
  if (pg == NULL || PQstatus(pg) != CONNECTION_OK)
    return 1;
  if (sqlstate == NULL)
    return 0;
  return strncmp(sqlstate, "08", 2) == 0 || strcmp(sqlstate, "57P01") == 0 ||
         strcmp(sqlstate, "57P02") == 0 || strcmp(sqlstate, "57P03") == 0;
}

/* Connect, blocking, within CONNECT_TIMEOUT_MS in all.  `url` may be a URI
 * or a conninfo: expand_dbname hands either to libpq as it is.  Keywords
 * before "dbname" are defaults that the URL may override.  On failure
 * returns NULL with the reason in `why`. */
PGconn *durable__pg_open(const char *url, char *why, size_t size) {
  const char *keys[10], *vals[10];
  int n = 0;
  keys[n] = "application_name", vals[n++] = "durable";
  /* Both ends of every connection give up on the other within
   * LIVENESS_BOUND_MS, whatever is in flight (all ignored on unix sockets):
   * an idle connection through keepalives (4 s idle, then 3 probes 2 s
   * apart), one with data unacknowledged -- a query, a commit, NOTIFYs
   * the server is pushing -- through TCP_USER_TIMEOUT.  On the server's
   * side this bounds how long a vanished or cut-off machine keeps its
   * liveness lock (see durable__pg_alive); on ours, how long a call can hang.
   */
  keys[n] = "keepalives_idle", vals[n++] = "4";
  keys[n] = "keepalives_interval", vals[n++] = "2";
  keys[n] = "keepalives_count", vals[n++] = "3";
  keys[n] = "tcp_user_timeout", vals[n++] = STR(LIVENESS_BOUND_MS);
  keys[n] = "options", vals[n++] =
                           "-c tcp_keepalives_idle=4 "
                           "-c tcp_keepalives_interval=2 "
                           "-c tcp_keepalives_count=3 "
                           "-c tcp_user_timeout=" STR(LIVENESS_BOUND_MS);
  keys[n] = "dbname", vals[n++] = url;
  keys[n] = NULL, vals[n] = NULL;

  PGconn *pg = PQconnectStartParams(keys, vals, 1);
  if (pg == NULL) {
    snprintf(why, size, "out of memory");
    return NULL;
  }
  int64_t deadline = mono_ms() + CONNECT_TIMEOUT_MS;
  /* The documented start: behave as if PQconnectPoll said WRITING. */
  PostgresPollingStatusType st = PQstatus(pg) == CONNECTION_BAD
                                     ? PGRES_POLLING_FAILED
                                     : PGRES_POLLING_WRITING;
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED) {
      durable__pg_one_line(why, size, PQerrorMessage(pg));
      if (*why == '\0')
        snprintf(why, size, "connection failed");
      PQfinish(pg);
      return NULL;
    }
    if (st == PGRES_POLLING_READING || st == PGRES_POLLING_WRITING) {
      int64_t left = deadline - mono_ms();
      struct pollfd p = {PQsocket(pg),
                         st == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0};
      int r = left > 0 ? poll(&p, 1, (int)left) : 0;
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0) {
        if (r == 0)
          snprintf(why, size, "timed out after %d s",
                   CONNECT_TIMEOUT_MS / 1000);
        else
          snprintf(why, size, "poll: %s", strerror(errno));
        PQfinish(pg);
        return NULL;
      }
    }
    st = PQconnectPoll(pg);
  }
  PQsetNoticeProcessor(pg, quiet_notices, NULL);
  return pg;
}

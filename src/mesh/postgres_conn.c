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

/* Whether libpq reads `url` as a connection string (a URI or key=value
 * pairs) rather than as a database's name: its own test, so that what we
 * show is what it uses. */
static int connection_string(const char *url) {
  return strncmp(url, "postgresql://", 13) == 0 ||
         strncmp(url, "postgres://", 11) == 0 || strchr(url, '=') != NULL;
}

/* `value` as a conninfo value: bare, or in quotes with ' and \ escaped
 * when it is empty or holds white space, a quote or a backslash. */
static char *put_value(char *o, const char *value) {
  int quote = *value == '\0' || strpbrk(value, " \t\n\r\f\v'\\") != NULL;
  if (quote)
    *o++ = '\'';
  for (const char *p = value; *p; p++) {
    if (quote && (*p == '\'' || *p == '\\'))
      *o++ = '\\';
    *o++ = *p;
  }
  if (quote)
    *o++ = '\'';
  return o;
}

/* An option set to a secret: one libpq itself would never display. */
static int is_secret(const PQconninfoOption *o) {
  return o->dispchar[0] == '*' && o->val[0] != '\0';
}

/* The URL or conninfo with any password replaced by "***", for messages.
 * libpq parses it, either form, as it will to connect.  Without a secret
 * (an option libpq displays as one: password, sslpassword) it shows as it
 * is; with one, as the key=value pairs of what it sets, each secret
 * "***".  One libpq cannot parse (the connect then fails saying why) shows
 * as none of it, since where its password would be is not known. */
char *durable__pg_mask_password(const char *url) {
  if (!connection_string(url))
    return strdup(url);
  char *why = NULL;
  PQconninfoOption *opts = PQconninfoParse(url, &why);
  if (opts == NULL) {
    int nomem = why == NULL; /* libpq's way to say so */
    PQfreemem(why);
    return nomem ? NULL : strdup("(unparsable conninfo)");
  }
  size_t len = 1;
  int secret = 0;
  for (const PQconninfoOption *o = opts; o->keyword; o++)
    if (o->val != NULL) {
      /* the worst case: every byte escaped, and quotes */
      len += strlen(o->keyword) + 2 * strlen(o->val) + 4;
      secret |= is_secret(o);
    }
  char *out = secret ? malloc(len) : strdup(url);
  if (secret && out != NULL) {
    char *p = out;
    for (const PQconninfoOption *o = opts; o->keyword; o++) {
      if (o->val == NULL)
        continue;
      if (p != out)
        *p++ = ' ';
      p += sprintf(p, "%s=", o->keyword);
      if (is_secret(o))
        p += sprintf(p, "***");
      else
        p = put_value(p, o->val);
    }
    *p = '\0';
  }
  PQconninfoFree(opts);
  return out;
}

static void quiet_notices(void *arg, const char *message) {
  /* "schema ... already exists, skipping" and the like are not news. */
  (void)arg;
  (void)message;
}

/* A connection is gone: libpq says so, or the server said it is going away
 * (class 08 connection exceptions, 57P01..57P03 shutdown / cannot connect),
 * or it takes no writes any more (25006: a primary demoted, or a standby
 * reached some other way): it is dropped, and the next connection finds
 * the server that takes writes now. */
int durable__pg_is_lost(PGconn *pg, const char *sqlstate) {
  if (pg == NULL || PQstatus(pg) != CONNECTION_OK)
    return 1;
  if (sqlstate == NULL)
    return 0;
  return strncmp(sqlstate, "08", 2) == 0 || strcmp(sqlstate, "57P01") == 0 ||
         strcmp(sqlstate, "57P02") == 0 || strcmp(sqlstate, "57P03") == 0 ||
         strcmp(sqlstate, "25006") == 0;
}

/* Which server `pg` is on: its system identifier, shared by a primary and
 * the standbys cloned from it, and its timeline, which a promotion starts
 * anew (the first 8 hex digits of the WAL file name of the current
 * position: on PostgreSQL 15 and later the timeline inserted on).  Fails on
 * a server in recovery (a standby): a connection there is of no use to the
 * writer.  `where` is host:port, and how many hosts the URL lists when it
 * lists several. */
int durable__pg_server(PGconn *pg, durable__server_t *out, char *why,
                       size_t size) {
  static const char sql[] =
      "SELECT system_identifier::text, ('x' || substr(pg_walfile_name("
      "pg_current_wal_lsn()), 1, 8))::bit(32)::bigint, "
      "pg_postmaster_start_time()::text FROM pg_control_system()";
  PGresult *res = PQexec(pg, sql);
  int ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1;
  if (ok) {
    snprintf(out->system, sizeof out->system, "%s", PQgetvalue(res, 0, 0));
    out->timeline = (unsigned)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
    snprintf(out->started, sizeof out->started, "%s", PQgetvalue(res, 0, 2));
    const char *host = PQhost(pg), *port = PQport(pg);
    snprintf(out->where, sizeof out->where, "%s:%s", host ? host : "?",
             port ? port : "?");
  } else {
    durable__one_line_copy(why, size, PQerrorMessage(pg));
    if (*why == '\0')
      snprintf(why, size, "cannot tell which server this is");
  }
  PQclear(res);
  return ok ? 0 : -1;
}

/* Connect, blocking, within CONNECT_TIMEOUT_MS in all.  `url` may be a URI
 * or a conninfo: expand_dbname hands either to libpq as it is.  Keywords
 * before "dbname" are defaults that the URL may override.  On failure
 * returns NULL with the reason in `why`. */
static PGconn *open_session(const char *url, const char *host, const char *port,
                            const char *attrs, char *why, size_t size);

PGconn *durable__pg_open(const char *url, char *why, size_t size) {
  return open_session(url, NULL, NULL, "read-write", why, size);
}

PGconn *durable__pg_open_at(const char *url, const char *host, const char *port,
                            char *why, size_t size) {
  return open_session(url, host, port, "read-write", why, size);
}

PGconn *durable__pg_open_reader(const char *url, char *why, size_t size) {
  /* prefer-standby is libpq 14's; before it, any server of the list */
  return open_session(url, NULL, NULL,
                      PQlibVersion() >= 140000 ? "prefer-standby" : "any", why,
                      size);
}

/* `attrs`: the target_session_attrs unless the URL names its own. */
static PGconn *open_session(const char *url, const char *host, const char *port,
                            const char *attrs, char *why, size_t size) {
  const char *keys[16], *vals[16];
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
  /* Every connection of a store that writes goes to a server that takes
   * writes: of a URL that lists a primary and its standbys, the primary,
   * wherever it is now (a URL's own target_session_attrs wins). */
  keys[n] = "target_session_attrs", vals[n++] = attrs;
  keys[n] = "dbname", vals[n++] = url;
  /* after dbname, so that they win over the URL's own (one of its hosts) */
  if (host != NULL)
    keys[n] = "host", vals[n++] = host;
  if (port != NULL)
    keys[n] = "port", vals[n++] = port;
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
      durable__one_line_copy(why, size, PQerrorMessage(pg));
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

/* The i-th item of a libpq comma-separated list (host, port), or the only
 * one when the list has one (libpq's rule for port), into `out`. */
static int list_item(const char *list, int i, char *out, size_t size) {
  if (list == NULL || *list == '\0')
    return 0;
  int n = 0;
  for (const char *p = list; *p; p++)
    n += *p == ',';
  if (n == 0)
    i = 0;
  for (const char *p = list;; p++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (i-- == 0) {
      snprintf(out, size, "%.*s", (int)len, p);
      return 1;
    }
    if (end == NULL)
      return 0;
    p = end;
  }
}

int durable__pg_writable(const char *url, durable__server_t *out, int max,
                         const int *stop) {
  PQconninfoOption *opts = PQconninfoParse(url, NULL);
  const char *hosts = NULL, *ports = NULL;
  for (PQconninfoOption *o = opts; o && o->keyword; o++) {
    if (strcmp(o->keyword, "host") == 0)
      hosts = o->val;
    else if (strcmp(o->keyword, "port") == 0)
      ports = o->val;
  }
  int found = hosts && strchr(hosts, ',') ? 0 : -1;
  char host[256], port[32], why[300];
  for (int i = 0;
       found >= 0 && found < max && !__atomic_load_n(stop, __ATOMIC_ACQUIRE) &&
       list_item(hosts, i, host, sizeof host);
       i++) {
    int has_port = list_item(ports, i, port, sizeof port);
    PGconn *pg =
        durable__pg_open_at(url, host, has_port ? port : NULL, why, sizeof why);
    if (pg != NULL &&
        durable__pg_server(pg, &out[found], why, sizeof why) == 0) {
      int known = 0;
      for (int k = 0; k < found; k++)
        known |= out[k].timeline == out[found].timeline &&
                 strcmp(out[k].system, out[found].system) == 0 &&
                 strcmp(out[k].started, out[found].started) == 0;
      found += !known;
    }
    PQfinish(pg);
  }
  PQconninfoFree(opts);
  return found;
}

/*
 * streams.c: `durable streams [--json]` -- every durable stream in the
 * store as an operator sees it: last, checkpoint, lag, the backlog's age,
 * a failing consumer's attempts and error, dead letters, the lease.
 *
 * It needs only the store (like search), not a mesh: durable_stream_statuses
 * reads every DurableStream node and the failure records in pages, and one
 * item per stream with a lag, never the whole backlog.  --json prints each
 * stream as it comes, one JSON line; the table keeps them all to size its
 * columns first, and keeps each stream to one line.
 */
#include "cli.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- streams ------------------------------------------------------------- */

static const cli_option_t streams_options[] = {
    {"--json", 0},
    {NULL, 0},
};

typedef struct stream_row_s {
  char *stream, *ns, *key, *path;
  int64_t last, checkpoint, lag, epoch;
  char *subscriber, *last_subscriber; /* NULL for null */
  char *instance;                     /* the holder's process, HOST:PID:16hex */
  char process[DURABLE_INSTANCE_MAX]; /* ... as HOST:PID, or "-" */
  char *subscribed_at, *checkpoint_at, *orphaned_at; /* as stored, or NULL */
  /* from durable_stream_statuses: the backlog's age, the dead letters and
   * a failing consumer's attempts and error (times in ms, 0 for none) */
  int64_t oldest_at, dead_letters, failed_at;
  int attempts;
  char *last_error;
} stream_row_t;

typedef struct streams_state_s {
  int json;
  int64_t now; /* ms: what the ages are measured against */
  int nomem;
  stream_row_t *rows; /* the table's, kept to size its columns */
  size_t nrows, cap;
} streams_state_t;

static void row_free(stream_row_t *r) {
  free(r->stream);
  free(r->ns);
  free(r->key);
  free(r->path);
  free(r->subscriber);
  free(r->instance);
  free(r->last_subscriber);
  free(r->subscribed_at);
  free(r->checkpoint_at);
  free(r->orphaned_at);
  free(r->last_error);
}

static char *string_field(json_t *obj, const char *name) {
  const char *v = json_string_value(json_object_get(obj, name));
  return v ? strdup(v) : NULL;
}

static int64_t int_field(json_t *obj, const char *name) {
  json_t *v = json_object_get(obj, name);
  if (json_is_integer(v))
    return json_integer_value(v);
  if (json_is_real(v))
    return (int64_t)json_real_value(v);
  return 0;
}

/* The stream node's content; what it lacks (a node made by hand) is taken
 * from its path "{Key}/_DurableStream/{Namespace}". */
static int row_of(const durable_node_t *node, stream_row_t *r) {
  json_t *j =
      node->content ? json_loads(node->content, JSON_DECODE_ANY, NULL) : NULL;
  memset(r, 0, sizeof *r);
  r->ns = string_field(j, "Namespace");
  r->key = string_field(j, "Key");
  if (r->ns == NULL || r->key == NULL) {
    const char *seg = strstr(node->path, "/_DurableStream/");
    free(r->ns);
    free(r->key);
    r->ns = strdup(seg ? seg + strlen("/_DurableStream/") : node->id);
    r->key = seg ? strndup(node->path, (size_t)(seg - node->path))
                 : strdup(node->ns);
  }
  r->path = strdup(node->path);
  r->last = int_field(j, "LastSequence");
  r->checkpoint = int_field(j, "Checkpoint");
  /* A custom source's items never pass the stream hub, so its checkpoint
   * may be ahead of LastSequence: no lag to show then. */
  r->lag = r->last > r->checkpoint ? r->last - r->checkpoint : 0;
  r->epoch = int_field(j, "LeaseEpoch");
  r->subscriber = string_field(j, "Subscriber");
  r->instance = string_field(j, "SubscriberInstance");
  /* the random tail tells processes apart, not people: leave it to --json */
  const char *tail = r->instance ? strrchr(r->instance, ':') : NULL;
  snprintf(r->process, sizeof r->process, "%.*s",
           tail ? (int)(tail - r->instance) : 1, tail ? r->instance : "-");
  r->last_subscriber = string_field(j, "LastSubscriber");
  r->subscribed_at = string_field(j, "SubscribedAt");
  r->checkpoint_at = string_field(j, "CheckpointAt");
  r->orphaned_at = string_field(j, "OrphanedAt");
  json_decref(j);
  if (r->ns && r->key) {
    size_t n = strlen(r->ns) + strlen(r->key) + 2;
    if ((r->stream = malloc(n)) != NULL)
      snprintf(r->stream, n, "%s@%s", r->ns, r->key);
  }
  if (r->ns == NULL || r->key == NULL || r->path == NULL || r->stream == NULL) {
    row_free(r);
    return DURABLE_ENOMEM;
  }
  return 0;
}

static void json_field(const char *name, const char *value, int first) {
  printf("%s\"%s\":", first ? "{" : ",", name);
  if (value)
    cli_print_string(stdout, value);
  else
    fputs("null", stdout);
}

static int64_t age_ms(int64_t now, const stream_row_t *r) {
  return now > r->oldest_at ? now - r->oldest_at : 0;
}

/* An age for a person: 850ms, 42s, 5m03s, 2h05m, 3d04h; "-" for none. */
static void format_age(char out[32], int64_t now, const stream_row_t *r) {
  int64_t ms = age_ms(now, r), s = ms / 1000;
  if (r->oldest_at == 0)
    snprintf(out, 32, "-");
  else if (ms < 1000)
    snprintf(out, 32, "%" PRId64 "ms", ms);
  else if (s < 60)
    snprintf(out, 32, "%" PRId64 "s", s);
  else if (s < 3600)
    snprintf(out, 32, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
  else if (s < 86400)
    snprintf(out, 32, "%" PRId64 "h%02" PRId64 "m", s / 3600, s / 60 % 60);
  else
    snprintf(out, 32, "%" PRId64 "d%02" PRId64 "h", s / 86400, s / 3600 % 24);
}

static void print_row_json(int64_t now, const stream_row_t *r) {
  json_field("stream", r->stream, 1);
  json_field("namespace", r->ns, 0);
  json_field("key", r->key, 0);
  json_field("path", r->path, 0);
  printf(",\"last\":%" PRId64 ",\"checkpoint\":%" PRId64 ",\"lag\":%" PRId64,
         r->last, r->checkpoint, r->lag);
  json_field("subscriber", r->subscriber, 0);
  json_field("subscriber_instance", r->instance, 0);
  printf(",\"epoch\":%" PRId64, r->epoch);
  json_field("orphaned_at", r->orphaned_at, 0);
  json_field("last_subscriber", r->last_subscriber, 0);
  json_field("subscribed_at", r->subscribed_at, 0);
  json_field("checkpoint_at", r->checkpoint_at, 0);
  fputs(",\"oldest_unacknowledged_at\":", stdout);
  if (r->oldest_at)
    cli_print_time(stdout, r->oldest_at);
  else
    fputs("null", stdout);
  if (r->oldest_at)
    printf(",\"oldest_unacknowledged_age_ms\":%" PRId64, age_ms(now, r));
  else
    fputs(",\"oldest_unacknowledged_age_ms\":null", stdout);
  printf(",\"attempts\":%d", r->attempts);
  json_field("last_error", r->last_error, 0);
  fputs(",\"failed_at\":", stdout);
  if (r->failed_at)
    cli_print_time(stdout, r->failed_at);
  else
    fputs("null", stdout);
  printf(",\"dead_letters\":%" PRId64 "}\n", r->dead_letters);
}

static int digits(int64_t v) {
  char buf[32];
  return snprintf(buf, sizeof buf, "%" PRId64, v);
}

static int width(int w, const char *s) {
  int n = s ? (int)strlen(s) : 1; /* "-" */
  return n > w ? n : w;
}

static void print_table(const streams_state_t *st) {
  int ws = 6, wl = 4, wc = 10, wg = 3, wsub = 10, wp = 7, we = 5, wo = 6,
      wa = 8, wd = 4;
  char age[32];
  for (size_t i = 0; i < st->nrows; i++) {
    const stream_row_t *r = &st->rows[i];
    ws = width(ws, r->stream);
    wsub = width(wsub, r->subscriber);
    wp = width(wp, r->process);
    if (digits(r->last) > wl)
      wl = digits(r->last);
    if (digits(r->checkpoint) > wc)
      wc = digits(r->checkpoint);
    if (digits(r->lag) > wg)
      wg = digits(r->lag);
    if (digits(r->epoch) > we)
      we = digits(r->epoch);
    format_age(age, st->now, r);
    wo = width(wo, age);
    if (digits(r->attempts) > wa)
      wa = digits(r->attempts);
    if (digits(r->dead_letters) > wd)
      wd = digits(r->dead_letters);
  }
  printf("%-*s  %*s  %*s  %*s  %*s  %-*s  %-*s  %*s  %*s  %*s  %-24s  %s\n", ws,
         "STREAM", wl, "LAST", wc, "CHECKPOINT", wg, "LAG", wo, "OLDEST", wsub,
         "SUBSCRIBER", wp, "PROCESS", we, "EPOCH", wa, "ATTEMPTS", wd, "DEAD",
         "ORPHANED_AT", "LAST_ERROR");
  for (size_t i = 0; i < st->nrows; i++) {
    const stream_row_t *r = &st->rows[i];
    format_age(age, st->now, r);
    char attempts[16] = "-";
    if (r->attempts > 0)
      snprintf(attempts, sizeof attempts, "%d", r->attempts);
    printf("%-*s  %*" PRId64 "  %*" PRId64 "  %*" PRId64
           "  %*s  %-*s  %-*s  %*" PRId64 "  %*s  %*" PRId64 "  %-24s  ",
           ws, r->stream, wl, r->last, wc, r->checkpoint, wg, r->lag, wo, age,
           wsub, r->subscriber ? r->subscriber : "-", wp, r->process, we,
           r->epoch, wa, attempts, wd, r->dead_letters,
           r->orphaned_at ? r->orphaned_at : "-");
    /* one line per stream: a handler's error may hold breaks and tabs
     * (--json keeps it as it is) */
    cli_put_one_line(stdout, r->last_error ? r->last_error : "-", "\r\n\t");
    putchar('\n');
  }
}

/* One stream of durable_stream_statuses: printed now (--json), else kept
 * to size the table's columns. */
static void on_status(const durable_stream_status_t *status, void *data) {
  cli_t *cli = data;
  streams_state_t *st = cli->state;
  stream_row_t row;
  if (st->nomem)
    return;
  if (row_of(status->node, &row) < 0)
    goto nomem;
  row.oldest_at = status->oldest_appended_at;
  row.dead_letters = status->dead_letters;
  row.attempts = status->attempts;
  row.failed_at = status->failed_at;
  if (status->last_error &&
      (row.last_error = strdup(status->last_error)) == NULL) {
    row_free(&row);
    goto nomem;
  }
  if (st->json) {
    print_row_json(st->now, &row);
    row_free(&row);
    return;
  }
  if (st->nrows == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 64;
    stream_row_t *rows = realloc(st->rows, cap * sizeof *rows);
    if (rows == NULL) {
      row_free(&row);
      goto nomem;
    }
    st->rows = rows;
    st->cap = cap;
  }
  st->rows[st->nrows++] = row;
  return;
nomem:
  st->nomem = 1;
}

static void on_statuses(int status, const char *message, void *data) {
  cli_t *cli = data;
  streams_state_t *st = cli->state;
  if (status == 0 && st->nomem)
    status = DURABLE_ENOMEM;
  if (status < 0) {
    cli_failed_with(cli, status, message ? message : durable_strerror(status));
    return;
  }
  if (!st->json)
    print_table(st);
  cli_finish(cli, CLI_OK);
}

static int streams_main(cli_t *cli, int argc, char **argv) {
  streams_state_t st;
  int rc;
  (void)argv;

  memset(&st, 0, sizeof st);
  if (argc > 0)
    return cli_usage(cli, "too many arguments");
  st.json = cli->values[0] != NULL;
  if ((rc = cli_open(cli)) != 0)
    return rc;
  cli->state = &st;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  st.now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  durable_error_t err;
  memset(&err, 0, sizeof err);
  rc = durable_stream_statuses(cli->store, cli->principal, NULL, on_status,
                               on_statuses, cli, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  rc = cli_run(cli);
  for (size_t i = 0; i < st.nrows; i++)
    row_free(&st.rows[i]);
  free(st.rows);
  return rc;
}

const cli_command_t cli_streams_command = {
    "streams",
    "[--json]",
    "list durable streams: last, checkpoint, lag, backlog age, failures, lease",
    "Lists every durable stream in the store (every DurableStream node), in\n"
    "path order, one line each: STREAM (NAMESPACE@KEY), LAST (the last\n"
    "sequence appended), CHECKPOINT (the last acknowledged), LAG (LAST -\n"
    "CHECKPOINT; 0 when the checkpoint is ahead, as for a stream read from\n"
    "a custom source), OLDEST (how long ago the oldest unacknowledged item,\n"
    "CHECKPOINT + 1, was appended, or -), SUBSCRIBER (the lease holder, or\n"
    "-), PROCESS (the holder's process as HOST:PID, or -), EPOCH (the lease\n"
    "epoch), ATTEMPTS (how many times in a row the consumer failed on item\n"
    "CHECKPOINT + 1, in whatever host, or - when it is not failing), DEAD\n"
    "(the dead letters stored in NAMESPACE.dead@KEY), ORPHANED_AT (when the\n"
    "last holder left, or -) and LAST_ERROR (the failing item's last\n"
    "error, or -).  It reads the stream nodes, the failure records and one\n"
    "item per stream with a lag: never the whole backlog.  A stream's\n"
    "whole state is its node: durable get @KEY/_DurableStream/NAMESPACE.\n"
    "\n"
    "  --json  JSON lines instead: stream, namespace, key, path, last,\n"
    "          checkpoint, lag, subscriber, subscriber_instance, epoch,\n"
    "          orphaned_at, last_subscriber, subscribed_at, checkpoint_at,\n"
    "          oldest_unacknowledged_at, oldest_unacknowledged_age_ms,\n"
    "          attempts (0 when not failing), last_error, failed_at,\n"
    "          dead_letters (null when unset)",
    streams_options,
    streams_main,
    0,
};

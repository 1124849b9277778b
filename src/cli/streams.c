/*
 * streams.c: `durable streams [--json]` -- every durable stream in the
 * store as an operator sees it: last, checkpoint, lag, the backlog's age,
 * a failing consumer's attempts and error, dead letters, the lease.
 *
 * It needs only the store (like search), not a mesh: durable_stream_statuses
 * reads every DurableStream node and the failure records in pages, and one
 * item per stream with a lag, never the whole backlog, and hands over each
 * stream's durable_stream_status_t, which is what is printed.  --json
 * prints each stream as it comes, one JSON
 * line; the table keeps them all to size its columns first, and keeps each
 * stream to one line.
 */
#include "cli.h"

#include <durable_text.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const cli_option_t streams_options[] = {
    {"--json", 0},
    {"--read-store", 1},
    {NULL, 0},
};

/* A line of the table: what it shows of one stream's status, the strings
 * copied (the status lends them for its callback only, and the table is
 * printed after the last). */
typedef struct stream_row_s {
  char *stream;                           /* NAMESPACE@KEY[#GROUP] */
  char *subscriber;                       /* NULL for none */
  char orphaned_at[DURABLE_ISO_TIME_MAX]; /* "-" for none */
  char *last_error;                       /* NULL for none */
  char process[DURABLE_INSTANCE_MAX]; /* the holder's, as HOST:PID, or "-" */
  int64_t last, checkpoint, lag, epoch, oldest_at, dead_letters;
  int attempts;
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
  free(r->subscriber);
  free(r->last_error);
}

/* "NAMESPACE@KEY" (malloc'ed), with `group` "NAMESPACE@KEY#GROUP", or
 * NULL. */
static char *stream_name(const durable_stream_status_t *status, int group) {
  const char *g = group ? status->group : NULL;
  size_t n = strlen(status->stream.ns) + strlen(status->stream.key) + 3 +
             (g ? strlen(g) : 0);
  char *name = malloc(n);
  if (name)
    snprintf(name, n, "%s@%s%s%s", status->stream.ns, status->stream.key,
             g ? "#" : "", g ? g : "");
  return name;
}

/* A copy of `s` into *out: 0, or -1 when there was no memory (NULL is
 * copied as NULL). */
static int copy_text(char **out, const char *s) {
  *out = s ? strdup(s) : NULL;
  return s && *out == NULL ? -1 : 0;
}

static void json_field(const char *name, const char *value, int first) {
  printf("%s\"%s\":", first ? "{" : ",", name);
  if (value)
    cli_print_string(stdout, value);
  else
    fputs("null", stdout);
}

static int64_t age_ms(int64_t now, int64_t at) {
  return now > at ? now - at : 0;
}

/* An age for a person: 850ms, 42s, 5m03s, 2h05m, 3d04h; "-" for none. */
static void format_age(char out[32], int64_t now, int64_t at) {
  int64_t ms = age_ms(now, at), s = ms / 1000;
  if (at == 0)
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

static void time_field(const char *name, int64_t ms) {
  printf(",\"%s\":", name);
  cli_print_time(stdout, ms);
}

static void print_json(int64_t now, const durable_stream_status_t *s,
                       const char *stream) {
  json_field("stream", stream, 1);
  json_field("namespace", s->stream.ns, 0);
  json_field("key", s->stream.key, 0);
  json_field("group", s->group, 0);
  json_field("path", s->path, 0);
  printf(",\"last\":%" PRId64 ",\"checkpoint\":%" PRId64 ",\"lag\":%" PRId64,
         s->last_sequence, s->checkpoint, s->lag);
  json_field("subscriber", s->subscriber, 0);
  json_field("subscriber_instance", s->subscriber_instance, 0);
  printf(",\"epoch\":%" PRId64, s->lease_epoch);
  time_field("orphaned_at", s->orphaned_at);
  json_field("last_subscriber", s->last_subscriber, 0);
  time_field("subscribed_at", s->subscribed_at);
  time_field("checkpoint_at", s->checkpoint_at);
  fputs(",\"oldest_unacknowledged_at\":", stdout);
  if (s->oldest_appended_at)
    cli_print_time(stdout, s->oldest_appended_at);
  else
    fputs("null", stdout);
  if (s->oldest_appended_at)
    printf(",\"oldest_unacknowledged_age_ms\":%" PRId64,
           age_ms(now, s->oldest_appended_at));
  else
    fputs(",\"oldest_unacknowledged_age_ms\":null", stdout);
  printf(",\"attempts\":%d", s->attempts);
  json_field("last_error", s->last_error, 0);
  fputs(",\"failed_at\":", stdout);
  if (s->failed_at)
    cli_print_time(stdout, s->failed_at);
  else
    fputs("null", stdout);
  printf(",\"dead_letters\":%" PRId64, s->dead_letters);
  if (s->seen_last || s->seen_checkpoint || s->seen_epoch)
    printf(",\"stopped\":{\"seen_last\":%" PRId64
           ",\"seen_checkpoint\":%" PRId64 ",\"seen_epoch\":%" PRId64 "}",
           s->seen_last, s->seen_checkpoint, s->seen_epoch);
  else
    fputs(",\"stopped\":null", stdout);
  if (s->lost_to > 0)
    printf(",\"lost\":{\"from\":%" PRId64 ",\"to\":%" PRId64 "}", s->lost_from,
           s->lost_to);
  else
    fputs(",\"lost\":null", stdout);
  if (s->last_batch > 0)
    printf(",\"last_batch\":%" PRId64, s->last_batch);
  else
    fputs(",\"last_batch\":null", stdout);
  if (s->group) { /* a consumer group's: how it began, whether it pins */
    json_field("start", s->start, 0);
    time_field("detached_at", s->detached_at);
  } else {
    printf(",\"groups\":%d", s->groups);
  }
  fputs("}\n", stdout);
}

static int digits(int64_t v) {
  char buf[32];
  return snprintf(buf, sizeof buf, "%" PRId64, v);
}

static int width(int w, const char *s) {
  int n = s ? (int)strlen(s) : 1; /* "-" */
  return n > w ? n : w;
}

/* The table's last cell: one line per stream, and no tab in a cell, so a
 * handler's error with breaks or tabs prints on its row (--json keeps it as
 * it is).  One byte for one. */
static void put_cell(FILE *out, const char *text) {
  for (const char *p = text; *p; p++)
    fputc(*p == '\n' || *p == '\r' || *p == '\t' ? ' ' : *p, out);
}

/* A consumer group's row names its stream and group, NAMESPACE@KEY#GROUP,
 * in the STREAM column: the columns are the same with groups or without. */
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
    format_age(age, st->now, r->oldest_at);
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
    format_age(age, st->now, r->oldest_at);
    char attempts[16] = "-";
    if (r->attempts > 0)
      snprintf(attempts, sizeof attempts, "%d", r->attempts);
    printf("%-*s  %*" PRId64 "  %*" PRId64 "  %*" PRId64
           "  %*s  %-*s  %-*s  %*" PRId64 "  %*s  %*" PRId64 "  %-24s  ",
           ws, r->stream, wl, r->last, wc, r->checkpoint, wg, r->lag, wo, age,
           wsub, r->subscriber ? r->subscriber : "-", wp, r->process, we,
           r->epoch, wa, attempts, wd, r->dead_letters, r->orphaned_at);
    put_cell(stdout, r->last_error ? r->last_error : "-");
    putchar('\n');
  }
}

/* Keep the table's line for `status` (it takes `stream`): 0, or -1 when
 * there was no memory. */
static int keep_row(streams_state_t *st, const durable_stream_status_t *status,
                    char *stream) {
  stream_row_t row = {.stream = stream,
                      .last = status->last_sequence,
                      .checkpoint = status->checkpoint,
                      .lag = status->lag,
                      .epoch = status->lease_epoch,
                      .oldest_at = status->oldest_appended_at,
                      .dead_letters = status->dead_letters,
                      .attempts = status->attempts};
  if (copy_text(&row.subscriber, status->subscriber) < 0 ||
      copy_text(&row.last_error, status->last_error) < 0) {
    row_free(&row);
    return -1;
  }
  if (status->orphaned_at == 0 ||
      durable__iso_time(status->orphaned_at, row.orphaned_at) < 0)
    snprintf(row.orphaned_at, sizeof row.orphaned_at, "-");
  /* the random tail tells processes apart, not people: leave it to --json */
  const char *instance = status->subscriber_instance;
  const char *tail = instance ? strrchr(instance, ':') : NULL;
  snprintf(row.process, sizeof row.process, "%.*s",
           tail ? (int)(tail - instance) : 1, tail ? instance : "-");
  if (st->nrows == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 64;
    stream_row_t *rows = realloc(st->rows, cap * sizeof *rows);
    if (rows == NULL) {
      row_free(&row);
      return -1;
    }
    st->rows = rows;
    st->cap = cap;
  }
  st->rows[st->nrows++] = row;
  return 0;
}

/* One stream of durable_stream_statuses: printed now (--json), else kept
 * to size the table's columns. */
static void on_status(const durable_stream_status_t *status, void *data) {
  cli_t *cli = data;
  streams_state_t *st = cli->state;
  if (st->nomem)
    return;
  char *stream = stream_name(status, !st->json);
  if (stream == NULL) {
    st->nomem = 1;
    return;
  }
  if (st->json) {
    print_json(st->now, status, stream);
    free(stream);
  } else if (keep_row(st, status, stream) < 0) {
    st->nomem = 1;
  }
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
  cli->read_store_url = cli->values[1];
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
    "[--json] [--read-store URL]",
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
    "error; for a stream stopped because the store went back, what was\n"
    "seen and the seek that goes on; or -).  It reads the stream nodes, the "
    "failure records and one\n"
    "item per stream with a lag: never the whole backlog.  A stream's\n"
    "whole state is its node: durable get @KEY/_DurableStream/NAMESPACE.\n"
    "\n"
    "Each consumer group follows its stream on a line of its own,\n"
    "STREAM NAMESPACE@KEY#GROUP: its CHECKPOINT, its LAG (LAST - its\n"
    "checkpoint, exact), its OLDEST, holder, failures and dead letters\n"
    "(NAMESPACE.dead.GROUP@KEY).  LAST_ERROR of a group behind a\n"
    "trim names the seek that goes on.  A stream consumed only in groups\n"
    "shows no lag of its own.  A group's node is\n"
    "@KEY/_DurableStream/NAMESPACE/_DurableStreamGroup/GROUP.\n"
    "\n"
    "  --json  JSON lines instead: stream, namespace, key, path, last,\n"
    "          checkpoint, lag, subscriber, subscriber_instance, epoch,\n"
    "          orphaned_at, last_subscriber, subscribed_at, checkpoint_at,\n"
    "          oldest_unacknowledged_at, oldest_unacknowledged_age_ms,\n"
    "          attempts (0 when not failing), last_error, failed_at,\n"
    "          dead_letters, last_batch (how many items the last\n"
    "          acknowledgement covered, once a batch handler's covered more\n"
    "          than one; null until then), stopped (seen_last,\n"
    "          seen_checkpoint, seen_epoch while the stream is stopped\n"
    "          because the store went back; else null), lost (from, to: the\n"
    "          sequences a seek accepted as lost; else null), group (null\n"
    "          for the stream's own line), and for a stream: groups (how\n"
    "          many), for a group: start, detached_at (null while it holds\n"
    "          trims back)\n"
    "  --read-store URL  read there instead of the store: a PostgreSQL\n"
    "          standby (nothing is written to it; it answers with what it\n"
    "          has replayed)",
    streams_options,
    streams_main,
    0,
    1,
};

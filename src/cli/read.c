/*
 * read.c: `durable read NAMESPACE KEY` -- a durable stream's items as JSON
 * lines -- and reading a stream to its end, which `durable dead` and
 * `durable requeue` (dead.c) do too.
 *
 * It opens a mesh and a durable_stream_read() reader.  Without --follow it
 * reads what is stored when it starts: it asks whether the stream exists
 * and for its highest stored item, and stops once it has had every item up
 * to it (cli_stream_read_to_end).  With --follow it prints the live tail
 * until SIGINT or SIGTERM (uv_signal_t), then closes and exits 0.  Reading
 * is unleased: it acknowledges nothing and never disturbs a consumer.
 */
#include "cli.h"

#include <durable_text.h>

#include <inttypes.h>
#include <signal.h>
#include <string.h>

static const cli_option_t read_options[] = {
    {"--after", 1},
    {"--follow", 0},
    {"--read-store", 1},
    {NULL, 0},
};

static void print_item(const durable_item_t *item) {
  printf("{\"sequence\":%" PRId64 ",\"appended_at\":", item->sequence);
  cli_print_time(stdout, item->appended_at);
  fputs(",\"payload\":", stdout);
  /* JSON holds no raw line break inside a string: each one is whitespace
   * between tokens, and a space keeps the line one line.  A tab is kept:
   * it breaks no line, and the payload is printed as published. */
  durable__one_line_fputs(item->payload, stdout);
  fputs("}\n", stdout);
}

/* The end of what was stored when the command started. */
static void reached_end(cli_stream_t *s) {
  if (s->at_end)
    s->at_end(s);
  else
    cli_finish(s->cli, CLI_OK);
}

static void on_item(durable_reader_t *reader, int status,
                    const durable_item_t *item, const char *message,
                    void *data) {
  cli_stream_t *s = data;
  (void)reader;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  if (s->each)
    s->each(s, item);
  else
    print_item(item);
  if (s->follow) {
    fflush(stdout); /* a reader behind a pipe sees each item as it comes */
  } else if (item->sequence >= s->until) {
    reached_end(s);
  }
}

static void start_reader(cli_stream_t *s) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  int rc = durable_stream_read(s->cli->mesh, &s->id, s->after, NULL, on_item, s,
                               &s->reader, &err);
  if (rc < 0) {
    s->reader = NULL;
    cli_refused(s->cli, rc, &err);
  }
}

static void on_last_item(const durable_result_t *result, void *data) {
  cli_stream_t *s = data;
  if (result->status < 0) {
    cli_failed_with(s->cli, result->status, result->message);
    return;
  }
  s->until = result->value;
  if (s->until <= s->after) {
    reached_end(s); /* nothing after N: done at once */
    return;
  }
  start_reader(s);
}

static void on_exists(const durable_result_t *result, void *data) {
  cli_stream_t *s = data;
  durable_error_t err;
  if (result->status < 0) {
    cli_failed_with(s->cli, result->status, result->message);
    return;
  }
  if (result->value == 0 && s->missing_is_empty) {
    reached_end(s); /* none stored, as for a dead stream never made */
    return;
  }
  if (result->value == 0) {
    cli_error(s->cli, CLI_FAILED, "no stream %s", s->name);
    cli_finish(s->cli, CLI_FAILED);
    return;
  }
  memset(&err, 0, sizeof err);
  int rc = durable__store_last_item(durable_mesh_read_store(s->cli->mesh),
                                    s->cli->principal, s->items_ns,
                                    on_last_item, s, &err);
  if (rc < 0)
    cli_refused(s->cli, rc, &err);
}

/* Read what is stored when this starts, then stop: the stream's existence,
 * its last item, the items up to it (on_exists, on_last_item, on_item). */
void cli_stream_read_to_end(cli_stream_t *s) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  int rc = durable_store_exists(durable_mesh_read_store(s->cli->mesh),
                                s->cli->principal, s->path, on_exists, s, &err);
  if (rc < 0)
    cli_refused(s->cli, rc, &err);
}

static void on_signal(uv_signal_t *handle, int signum) {
  cli_stream_t *s = handle->data;
  (void)signum;
  cli_finish(s->cli, CLI_OK);
}

static int read_main(cli_t *cli, int argc, char **argv) {
  cli_stream_t s;
  int rc;

  memset(&s, 0, sizeof s);
  if (argc < 2)
    return cli_usage(cli, "expected NAMESPACE and KEY");
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  if (cli->values[0] && cli_parse_sequence(cli->values[0], &s.after) < 0)
    return cli_usage(cli,
                     "--after needs a sequence (a whole number >= 0), "
                     "not '%s'",
                     cli->values[0]);
  s.follow = cli->values[1] != NULL;
  cli->read_store_url = cli->values[2];
  if ((rc = cli_stream_take(cli, &s, argv[0], argv[1])) != 0)
    return rc;

  if ((rc = cli_stream_open(&s, cli)) != 0)
    return rc;
  if (s.follow) {
    /* Until SIGINT or SIGTERM: then the reader closes, the mesh closes, 0. */
    uv_signal_init(&cli->loop, &s.signals[0]);
    uv_signal_init(&cli->loop, &s.signals[1]);
    s.signals[0].data = s.signals[1].data = &s;
    s.signals_open = 1;
    uv_signal_start(&s.signals[0], on_signal, SIGINT);
    uv_signal_start(&s.signals[1], on_signal, SIGTERM);
    start_reader(&s); /* a stream that does not exist yet is waited for */
  } else {
    cli_stream_read_to_end(&s);
  }
  return cli_run(cli);
}

const cli_command_t cli_read_command = {
    "read",
    "NAMESPACE KEY [--after N] [--follow] [--read-store URL]",
    "print a durable stream's items as JSON lines",
    "Prints the items of the durable stream NAMESPACE@KEY after sequence N\n"
    "(default 0), in order, one JSON object per line:\n"
    "  {\"sequence\":1,\"appended_at\":\"2025-01-31T12:34:56.789Z\","
    "\"payload\":{...}}\n"
    "with the payload exactly as published.  Unleased: reading acknowledges\n"
    "nothing and never disturbs a consumer.\n"
    "\n"
    "  --after N  start after sequence N\n"
    "  --follow   keep printing new items until SIGINT or SIGTERM (then exit\n"
    "             0); a stream that does not exist yet is waited for\n"
    "  --read-store URL\n"
    "             read the items there, a PostgreSQL standby, and hear of new\n"
    "             ones from the store: each is printed once the standby has\n"
    "             replayed it, in order, none missed, none twice\n"
    "\n"
    "Without --follow it stops after the last item stored when it started,\n"
    "and fails (exit 1) when the stream does not exist.",
    read_options,
    read_main,
    0,
    1,
};

/*
 * dead.c: a stream's dead letters -- `durable dead NAMESPACE KEY` prints
 * them, `durable requeue NAMESPACE KEY SEQUENCE` appends the payload of
 * one of them to its stream again.
 *
 * A consumer that gives up on an item after max_attempts failures in a row
 * appends a dead letter to the stream {NAMESPACE}.dead@KEY; both commands
 * read that stream to its end as `durable read` does (read.c).  dead
 * prints each letter as read prints an item; requeue looks at each for the
 * latest letter of item SEQUENCE and, at the end, publishes its payload as
 * `durable publish` does.  A dead stream that does not exist holds no dead
 * letter: dead prints nothing, requeue finds none.
 */
#include "cli.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* dead / requeue: NAMESPACE@KEY's dead letters are read from {ns}.dead */
typedef struct {
  cli_stream_t stream; /* first: the reader's callbacks are handed it */
  char origin_ns[DURABLE_PATH_MAX + 1];
  char dead_ns[DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 8];
  int64_t requeue;    /* requeue: the sequence of the item looked for */
  char *requeue_text; /* ... the payload text of its latest dead letter */
  int requeue_unread; /* ... which could not be read when it failed */
  int requeue_found;
} dead_t;

static const cli_option_t dead_options[] = {
    {"--group", 1},
    {NULL, 0},
};

/* NAMESPACE KEY as the dead stream {NAMESPACE}.dead@KEY (d->stream.id) --
 * or with --group GROUP the group's, {NAMESPACE}.dead.{GROUP}@KEY -- with
 * the stream it serves kept in d->origin_ns. */
static int take_dead_stream(cli_t *cli, dead_t *d, char *ns, char *key) {
  durable_stream_id_t origin = {.ns = ns, .key = key};
  const char *group = cli->values[0];
  durable_error_t err;
  memset(&err, 0, sizeof err);
  if (durable_stream_check(&origin, &err) < 0 ||
      (group && durable_group_check(group, &err) < 0))
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  snprintf(d->origin_ns, sizeof d->origin_ns, "%s", ns);
  snprintf(d->dead_ns, sizeof d->dead_ns, "%s.dead%s%s", ns, group ? "." : "",
           group ? group : "");
  d->stream.missing_is_empty = 1;
  return cli_stream_take(cli, &d->stream, d->dead_ns, key);
}

/* Read every dead letter (print them, or look for one to requeue). */
static int dead_letters_run(cli_t *cli, dead_t *d) {
  int rc = cli_stream_open(&d->stream, cli);
  if (rc != 0)
    return rc;
  cli_stream_read_to_end(&d->stream);
  rc = cli_run(cli);
  free(d->requeue_text);
  return rc;
}

static int dead_main(cli_t *cli, int argc, char **argv) {
  dead_t d;
  memset(&d, 0, sizeof d);
  if (argc < 2)
    return cli_usage(cli, "expected NAMESPACE and KEY");
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  int rc = take_dead_stream(cli, &d, argv[0], argv[1]);
  return rc != 0 ? rc : dead_letters_run(cli, &d);
}

const cli_command_t cli_dead_command = {
    "dead",
    "NAMESPACE KEY [--group GROUP]",
    "print a durable stream's dead letters as JSON lines",
    "Prints the dead letters of the durable stream NAMESPACE@KEY: the items\n"
    "its consumer gave up on after max_attempts failures in a row, kept in\n"
    "the stream NAMESPACE.dead@KEY.  One JSON object per line, as `durable\n"
    "read` prints them, whose payload says what failed:\n"
    "  {\"sequence\":1,\"appended_at\":\"...\",\"payload\":{\"Stream\":\n"
    "   \"NS@KEY\",\"Sequence\":7,\"Attempts\":3,\"Reason\":\"...\",\n"
    "   \"PayloadJson\":\"...\",\"AppendedAt\":\"...\"}}\n"
    "PayloadJson is the item's payload text, or null when it could not be\n"
    "read.  No dead letter prints nothing.  `durable requeue` appends one\n"
    "again.\n"
    "\n"
    "  --group GROUP  the dead letters of that consumer group of the stream,\n"
    "                 kept in NAMESPACE.dead.GROUP@KEY (each has \"Group\")",
    dead_options,
    dead_main,
    0,
    1,
};

/* requeue's `each`: remember the payload of the latest dead letter of
 * d->requeue. */
static void requeue_look(cli_stream_t *s, const durable_item_t *item) {
  dead_t *d = (dead_t *)s;
  json_t *letter = json_loads(item->payload, 0, NULL);
  json_t *seq = json_object_get(letter, "Sequence");
  json_t *text = json_object_get(letter, "PayloadJson");
  if (json_is_integer(seq) && json_integer_value(seq) == d->requeue) {
    d->requeue_found = 1;
    free(d->requeue_text);
    d->requeue_text =
        json_is_string(text) ? strdup(json_string_value(text)) : NULL;
    d->requeue_unread = !json_is_string(text);
  }
  json_decref(letter);
}

/* requeue's `at_end`: every dead letter read, append the one asked for to
 * its stream. */
static void requeue_finish(cli_stream_t *s) {
  dead_t *d = (dead_t *)s;
  if (s->reader) {
    durable_reader_close(s->reader);
    s->reader = NULL;
  }
  if (!d->requeue_found) {
    cli_error(s->cli, CLI_FAILED, "%s@%s has no dead letter for item %" PRId64,
              d->origin_ns, s->id.key, d->requeue);
    cli_finish(s->cli, CLI_FAILED);
    return;
  }
  if (d->requeue_unread) {
    cli_error(s->cli, CLI_FAILED,
              "item %" PRId64 " of %s@%s could not be read when it failed: "
              "there is no payload to append again",
              d->requeue, d->origin_ns, s->id.key);
    cli_finish(s->cli, CLI_FAILED);
    return;
  }
  durable_hub_t *hub = NULL;
  durable_error_t err;
  char address[64];
  memset(&err, 0, sizeof err);
  snprintf(address, sizeof address, "cli/requeue-%d", (int)uv_os_getpid());
  durable_stream_id_t origin = {.ns = d->origin_ns, .key = s->id.key};
  int rc = durable_mesh_client(s->cli->mesh, address, &hub, &err);
  if (rc == 0)
    rc = durable_stream_publish(hub, &origin, d->requeue_text,
                                cli_stream_published, s, &err);
  if (rc < 0)
    cli_refused(s->cli, rc, &err);
}

static int requeue_main(cli_t *cli, int argc, char **argv) {
  dead_t d;
  memset(&d, 0, sizeof d);
  if (argc < 3)
    return cli_usage(cli, "expected NAMESPACE, KEY and SEQUENCE");
  if (argc > 3)
    return cli_usage(cli, "too many arguments");
  if (cli_parse_sequence(argv[2], &d.requeue) < 0 || d.requeue == 0)
    return cli_usage(cli,
                     "SEQUENCE must be an item's sequence (a whole number "
                     ">= 1), not '%s'",
                     argv[2]);
  d.stream.each = requeue_look;
  d.stream.at_end = requeue_finish;
  int rc = take_dead_stream(cli, &d, argv[0], argv[1]);
  return rc != 0 ? rc : dead_letters_run(cli, &d);
}

const cli_command_t cli_requeue_command = {
    "requeue",
    "NAMESPACE KEY SEQUENCE [--group GROUP]",
    "append a dead letter's item to its stream again",
    "Appends the payload of item SEQUENCE of NAMESPACE@KEY, as its latest\n"
    "dead letter keeps it (`durable dead`), to NAMESPACE@KEY again, at a new\n"
    "sequence, and prints that sequence: for an item whose handler failed\n"
    "until it was moved aside, once the handler is fixed.  The dead letter\n"
    "stays.  Fails (exit 1) when there is no such dead letter, or when the\n"
    "item's payload could not be read.\n"
    "\n"
    "  --group GROUP  the letter from that consumer group's dead letters\n"
    "                 (NAMESPACE.dead.GROUP@KEY).  The item is appended to\n"
    "                 the stream, so every group of it, and its own\n"
    "                 consumer, gets it again: a stream has no item for one\n"
    "                 group alone.",
    dead_options,
    requeue_main,
    0,
    0,
};

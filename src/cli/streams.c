/*
 * streams.c: the durable stream commands: publish, read, dead, requeue,
 * seek, trim, delete-stream, streams.
 *
 *   publish  opens a mesh (the producer needs hubs: the stream node's hub
 *            assigns the sequence), a client hub "cli/publish-PID", appends,
 *            prints the sequence and closes the mesh.
 *   read     opens a mesh and a durable_stream_read() reader.  Without --follow
 * it first asks for the highest stored item and stops once it has printed it;
 * with --follow it prints the live tail until SIGINT or SIGTERM (uv_signal_t),
 * then closes and exits 0. streams  needs only the store (like search): every
 * DurableStream node, all pages of "type:DurableStream", as a table or JSON
 * lines.
 *
 * Arguments are checked before anything is opened (durable_stream_check
 * gives the spec's messages), so a bad stream id costs nothing and exits 2.
 * The payload is checked by durable_stream_publish itself, synchronously,
 * before anything is written: its refusal (EINVAL) exits 2 with its message.
 *
 * publish and read run on session.c's mesh session (cli_open_mesh): a fresh
 * loop, the mesh on it, a command that ends by closing it -- the reader and
 * the signal handles first, through cli->before_close -- and uv_loop_close
 * proving nothing was left behind.
 */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- publish and read: the stream and the reader ------------------------ */

/* Write `text` on one line: each of the characters `breaks` becomes a
 * space, the rest is written as it is (so the widths of a table stay). */
static void put_one_line(FILE *out, const char *text, const char *breaks) {
  for (const char *p = text; *p; p++)
    fputc(strchr(breaks, *p) ? ' ' : *p, out);
}

typedef struct stream_state_s {
  cli_t *cli;
  durable_reader_t *reader;
  uv_signal_t signals[2];
  int signals_open;
  durable_stream_id_t id;
  char name[DURABLE_PATH_MAX + 80]; /* "NS@KEY" */
  char path[DURABLE_PATH_MAX + 1];
  char items_ns[DURABLE_PATH_MAX + 32];
  int64_t after, until;
  int follow;
  /* dead / requeue: NAMESPACE@KEY's dead letters are read from {ns}.dead */
  int dead;           /* a missing dead stream is no dead letter */
  int64_t requeue;    /* requeue: the original sequence looked for */
  char *requeue_text; /* ... the payload text of its latest dead letter */
  int requeue_unread; /* ... which could not be read when it failed */
  int requeue_found;
  char origin_ns[DURABLE_PATH_MAX + 1];
  char dead_ns[DURABLE_PATH_MAX + 8];
} stream_state_t;

/* cli->before_close: the reader and the signals go before the mesh. */
static void close_handles(cli_t *cli) {
  stream_state_t *s = cli->state;
  if (s->reader) {
    durable_reader_close(s->reader);
    s->reader = NULL;
  }
  if (s->signals_open) {
    s->signals_open = 0;
    uv_close((uv_handle_t *)&s->signals[0], NULL);
    uv_close((uv_handle_t *)&s->signals[1], NULL);
  }
}

/* Open the mesh for the command whose state is `s`. */
static int stream_open(stream_state_t *s, cli_t *cli) {
  s->cli = cli;
  cli->state = s;
  cli->before_close = close_handles;
  return cli_open_mesh(cli);
}

/* NAMESPACE KEY: checked with the spec's messages, paths derived. */
static int take_stream(cli_t *cli, stream_state_t *s, char *ns, char *key) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  s->id.ns = ns;
  s->id.key = key;
  if (durable_stream_check(&s->id, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  if (durable_stream_path(&s->id, s->path, sizeof s->path) < 0 ||
      durable_stream_items_ns(&s->id, s->items_ns, sizeof s->items_ns) < 0)
    return cli_error(cli, CLI_USAGE,
                     "durable stream %s@%s: the key is too "
                     "long",
                     ns, key);
  snprintf(s->name, sizeof s->name, "%s@%s", ns, key);
  return 0;
}

/* ---- publish ------------------------------------------------------------- */

static void published(int status, int64_t sequence, const char *message,
                      void *data) {
  stream_state_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%" PRId64 "\n", sequence);
  cli_finish(s->cli, CLI_OK);
}

static const cli_option_t publish_options[] = {
    {"--id", 1},
    {NULL, 0},
};

static int publish_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  durable_error_t err;
  durable_hub_t *hub = NULL;
  char *owned = NULL;
  const char *payload;
  char address[64];
  int rc;

  memset(&s, 0, sizeof s);
  if (argc < 3)
    return cli_usage(cli, "expected NAMESPACE, KEY and JSON");
  if (argc > 3)
    return cli_usage(cli, "too many arguments");
  if ((rc = take_stream(cli, &s, argv[0], argv[1])) != 0)
    return rc;
  durable_publish_options_t options = {.id = cli->values[0]};
  memset(&err, 0, sizeof err);
  if (options.id && durable_publish_id_check(&s.id, options.id, &err) < 0)
    return cli_usage(cli, "%s", err.message);
  if (strcmp(argv[2], "-") == 0) {
    size_t len;
    payload = owned = cli_read_stdin(&len);
    if (owned == NULL)
      return cli_error(cli, CLI_FAILED,
                       "cannot read the payload from "
                       "standard input");
    if (strlen(owned) != len) {
      free(owned);
      return cli_error(cli, CLI_USAGE,
                       "A durable stream item for %s is not "
                       "JSON: it holds a NUL byte",
                       s.name);
    }
    /* The line break a shell adds after the JSON is not part of it. */
    while (len > 0 && strchr(" \t\r\n", owned[len - 1]))
      owned[--len] = '\0';
  } else {
    payload = argv[2];
  }
  /* refused before anything is opened: a bad payload makes no store */
  if (durable_stream_payload_check(&s.id, payload, &err) < 0) {
    free(owned);
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  }

  if ((rc = stream_open(&s, cli)) != 0) {
    free(owned);
    return rc;
  }
  memset(&err, 0, sizeof err);
  snprintf(address, sizeof address, "cli/publish-%d", (int)uv_os_getpid());
  rc = durable_mesh_client(cli->mesh, address, &hub, &err);
  if (rc == 0)
    rc = durable_stream_publish_with(hub, &s.id, payload, &options, published,
                                     &s, &err);
  free(owned); /* copied by durable_stream_publish */
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_publish_command = {
    "publish",
    "[--id ID] NAMESPACE KEY JSON|-",
    "append to a durable stream, print the sequence",
    "Appends JSON (`-` reads it from standard input, trailing whitespace\n"
    "dropped) to the durable stream NAMESPACE@KEY -- KEY is the owning node's\n"
    "path, NAMESPACE the stream family, e.g. `durable publish DocumentLog\n"
    "Space/doc '{\"text\":\"hi\"}'`.  The stream node is created on first "
    "use.\n"
    "Prints the item's sequence once it is saved.  The payload is kept byte\n"
    "for byte.  A bad stream id or a payload that is empty or not JSON exits "
    "2\n"
    "and writes nothing.\n"
    "\n"
    "  --id ID  an idempotent publish: when the stream already holds an item\n"
    "           published with ID, print that item's sequence and append\n"
    "           nothing.  Retry a publish that failed (exit 1: it may or may\n"
    "           not have been saved) with the same ID, and it is appended\n"
    "           once.  ID is 1 to 128 bytes of one path segment (no '/', no\n"
    "           '\\', no control character, not . or ..); it is remembered\n"
    "           for good (`durable trim` deletes items, never ids).",
    publish_options,
    publish_main,
    0,
};

/* ---- read ---------------------------------------------------------------- */

static const cli_option_t read_options[] = {
    {"--after", 1},
    {"--follow", 0},
    {NULL, 0},
};

static void print_item(const durable_item_t *item) {
  printf("{\"sequence\":%" PRId64 ",\"appended_at\":", item->sequence);
  cli_print_time(stdout, item->appended_at);
  fputs(",\"payload\":", stdout);
  /* JSON holds no raw line break inside a string: each one is whitespace
   * between tokens, and a space keeps the line one line.  A tab is kept:
   * it breaks no line, and the payload is printed as published. */
  put_one_line(stdout, item->payload, "\r\n");
  fputs("}\n", stdout);
}

static void requeue_finish(stream_state_t *s);

/* requeue: remember the payload of the latest dead letter of s->requeue. */
static void requeue_look(stream_state_t *s, const durable_item_t *item) {
  json_t *letter = json_loads(item->payload, 0, NULL);
  json_t *seq = json_object_get(letter, "Sequence");
  json_t *text = json_object_get(letter, "PayloadJson");
  if (json_is_integer(seq) && json_integer_value(seq) == s->requeue) {
    s->requeue_found = 1;
    free(s->requeue_text);
    s->requeue_text =
        json_is_string(text) ? strdup(json_string_value(text)) : NULL;
    s->requeue_unread = !json_is_string(text);
  }
  json_decref(letter);
}

static void on_item(durable_reader_t *reader, int status,
                    const durable_item_t *item, const char *message,
                    void *data) {
  stream_state_t *s = data;
  (void)reader;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  if (s->requeue) {
    requeue_look(s, item);
    if (item->sequence >= s->until)
      requeue_finish(s);
    return;
  }
  print_item(item);
  if (s->follow) {
    fflush(stdout); /* a reader behind a pipe sees each item as it comes */
  } else if (item->sequence >= s->until) {
    cli_finish(s->cli, CLI_OK);
  }
}

static void start_reader(stream_state_t *s) {
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
  stream_state_t *s = data;
  if (result->status < 0) {
    cli_failed_with(s->cli, result->status, result->message);
    return;
  }
  s->until = result->value;
  if (s->until <= s->after) {
    if (s->requeue)
      requeue_finish(s);
    else
      cli_finish(s->cli, CLI_OK); /* nothing after N: done at once */
    return;
  }
  start_reader(s);
}

static void on_exists(const durable_result_t *result, void *data) {
  stream_state_t *s = data;
  durable_error_t err;
  if (result->status < 0) {
    cli_failed_with(s->cli, result->status, result->message);
    return;
  }
  if (result->value == 0 && s->dead && !s->requeue) {
    cli_finish(s->cli, CLI_OK); /* no dead stream: no dead letter */
    return;
  }
  if (result->value == 0 && s->requeue) {
    requeue_finish(s);
    return;
  }
  if (result->value == 0) {
    cli_error(s->cli, CLI_FAILED, "no stream %s", s->name);
    cli_finish(s->cli, CLI_FAILED);
    return;
  }
  memset(&err, 0, sizeof err);
  int rc = durable__store_last_item(durable_mesh_store(s->cli->mesh),
                                    s->cli->principal, s->items_ns,
                                    on_last_item, s, &err);
  if (rc < 0)
    cli_refused(s->cli, rc, &err);
}

/* Read what is stored when this starts, then stop: the stream's existence,
 * its last item, the items up to it (on_exists, on_last_item, on_item). */
static void read_to_end(stream_state_t *s) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  int rc = durable_store_exists(durable_mesh_store(s->cli->mesh),
                                s->cli->principal, s->path, on_exists, s, &err);
  if (rc < 0)
    cli_refused(s->cli, rc, &err);
}

static void on_signal(uv_signal_t *handle, int signum) {
  stream_state_t *s = handle->data;
  (void)signum;
  cli_finish(s->cli, CLI_OK);
}

static int parse_sequence(const char *text, int64_t *out) {
  char *end;
  if (text[0] < '0' || text[0] > '9')
    return -1;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0)
    return -1;
  *out = v;
  return 0;
}

static int read_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  int rc;

  memset(&s, 0, sizeof s);
  if (argc < 2)
    return cli_usage(cli, "expected NAMESPACE and KEY");
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  if (cli->values[0] && parse_sequence(cli->values[0], &s.after) < 0)
    return cli_usage(cli,
                     "--after needs a sequence (a whole number >= 0), "
                     "not '%s'",
                     cli->values[0]);
  s.follow = cli->values[1] != NULL;
  if ((rc = take_stream(cli, &s, argv[0], argv[1])) != 0)
    return rc;

  if ((rc = stream_open(&s, cli)) != 0)
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
    read_to_end(&s);
  }
  return cli_run(cli);
}

const cli_command_t cli_read_command = {
    "read",
    "NAMESPACE KEY [--after N] [--follow]",
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
    "\n"
    "Without --follow it stops after the last item stored when it started,\n"
    "and fails (exit 1) when the stream does not exist.",
    read_options,
    read_main,
    0,
};

/* ---- dead and requeue ---------------------------------------------------- */

/* NAMESPACE KEY as the dead stream {NAMESPACE}.dead@KEY (s->id), with the
 * original kept in s->origin_ns. */
static int take_dead_stream(cli_t *cli, stream_state_t *s, char *ns,
                            char *key) {
  durable_stream_id_t origin = {.ns = ns, .key = key};
  durable_error_t err;
  memset(&err, 0, sizeof err);
  if (durable_stream_check(&origin, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  snprintf(s->origin_ns, sizeof s->origin_ns, "%s", ns);
  snprintf(s->dead_ns, sizeof s->dead_ns, "%s.dead", ns);
  s->dead = 1;
  return take_stream(cli, s, s->dead_ns, key);
}

/* Read every dead letter (print them, or look for one to requeue). */
static int dead_letters_run(cli_t *cli, stream_state_t *s) {
  int rc = stream_open(s, cli);
  if (rc != 0)
    return rc;
  read_to_end(s);
  rc = cli_run(cli);
  free(s->requeue_text);
  return rc;
}

static int dead_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  memset(&s, 0, sizeof s);
  if (argc < 2)
    return cli_usage(cli, "expected NAMESPACE and KEY");
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  int rc = take_dead_stream(cli, &s, argv[0], argv[1]);
  return rc != 0 ? rc : dead_letters_run(cli, &s);
}

const cli_command_t cli_dead_command = {
    "dead",
    "NAMESPACE KEY",
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
    "again.",
    NULL,
    dead_main,
    0,
};

/* Every dead letter read: append the one asked for to its stream. */
static void requeue_finish(stream_state_t *s) {
  if (s->reader) {
    durable_reader_close(s->reader);
    s->reader = NULL;
  }
  if (!s->requeue_found) {
    cli_error(s->cli, CLI_FAILED, "%s@%s has no dead letter for item %" PRId64,
              s->origin_ns, s->id.key, s->requeue);
    cli_finish(s->cli, CLI_FAILED);
    return;
  }
  if (s->requeue_unread) {
    cli_error(s->cli, CLI_FAILED,
              "item %" PRId64 " of %s@%s could not be read when it failed: "
              "there is no payload to append again",
              s->requeue, s->origin_ns, s->id.key);
    cli_finish(s->cli, CLI_FAILED);
    return;
  }
  durable_hub_t *hub = NULL;
  durable_error_t err;
  char address[64];
  memset(&err, 0, sizeof err);
  snprintf(address, sizeof address, "cli/requeue-%d", (int)uv_os_getpid());
  durable_stream_id_t origin = {.ns = s->origin_ns, .key = s->id.key};
  int rc = durable_mesh_client(s->cli->mesh, address, &hub, &err);
  if (rc == 0)
    rc = durable_stream_publish(hub, &origin, s->requeue_text, published, s,
                                &err);
  if (rc < 0)
    cli_refused(s->cli, rc, &err);
}

static int requeue_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  memset(&s, 0, sizeof s);
  if (argc < 3)
    return cli_usage(cli, "expected NAMESPACE, KEY and SEQUENCE");
  if (argc > 3)
    return cli_usage(cli, "too many arguments");
  if (parse_sequence(argv[2], &s.requeue) < 0 || s.requeue == 0)
    return cli_usage(cli,
                     "SEQUENCE must be an item's sequence (a whole number "
                     ">= 1), not '%s'",
                     argv[2]);
  int rc = take_dead_stream(cli, &s, argv[0], argv[1]);
  return rc != 0 ? rc : dead_letters_run(cli, &s);
}

const cli_command_t cli_requeue_command = {
    "requeue",
    "NAMESPACE KEY SEQUENCE",
    "append a dead letter's item to its stream again",
    "Appends the payload of item SEQUENCE of NAMESPACE@KEY, as its latest\n"
    "dead letter keeps it (`durable dead`), to NAMESPACE@KEY again, at a new\n"
    "sequence, and prints that sequence: for an item whose handler failed\n"
    "until it was moved aside, once the handler is fixed.  The dead letter\n"
    "stays.  Fails (exit 1) when there is no such dead letter, or when the\n"
    "item's payload could not be read.",
    NULL,
    requeue_main,
    0,
};

/* ---- seek ---------------------------------------------------------------- */

static const cli_option_t seek_options[] = {
    {"--to", 1},
    {NULL, 0},
};

static void seeked(int status, int64_t was, const char *message, void *data) {
  stream_state_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%s: checkpoint %" PRId64 " (was %" PRId64 ")\n", s->name, s->after,
         was);
  cli_finish(s->cli, CLI_OK);
}

/* NAMESPACE KEY and the sequence of the command's first option (`flag`,
 * at least `min`; NULL: none): checked, the stream taken, the mesh opened.
 * Returns 0 or the exit code. */
static int operator_args(cli_t *cli, int argc, char **argv, stream_state_t *s,
                         const char *flag, const char *what, int64_t min) {
  if (argc < 2)
    return cli_usage(cli, "expected NAMESPACE and KEY");
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  if (flag && cli->values[0] == NULL)
    return cli_usage(cli, "%s N is missing: %s", flag, what);
  if (flag && (parse_sequence(cli->values[0], &s->after) < 0 || s->after < min))
    return cli_usage(cli,
                     "%s needs a sequence (a whole number >= %lld), not '%s'",
                     flag, (long long)min, cli->values[0]);
  int rc = take_stream(cli, s, argv[0], argv[1]);
  return rc != 0 ? rc : stream_open(s, cli);
}

static int seek_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  durable_error_t err;
  memset(&s, 0, sizeof s);
  int rc = operator_args(cli, argc, argv, &s, "--to",
                         "the checkpoint to move to", 0);
  if (rc != 0)
    return rc;
  memset(&err, 0, sizeof err);
  rc = durable_stream_seek(cli->mesh, &s.id, s.after, seeked, &s, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_seek_command = {
    "seek",
    "NAMESPACE KEY --to N",
    "move a durable stream's checkpoint: replay or skip",
    "Sets the acknowledged checkpoint of NAMESPACE@KEY to N (0 to its last\n"
    "sequence): back to replay the items after N, forward to skip them.  The\n"
    "lease is let go with a new epoch, so the consumer holding it, in any\n"
    "process, claims again and resumes after N (the item it had begun may be\n"
    "handed over once more).  Prints the new checkpoint and the one before;\n"
    "the stream's host logs the move.  A stream that does not exist, or N\n"
    "past its last sequence, fails (exit 1).",
    seek_options,
    seek_main,
    0,
};

/* ---- trim ---------------------------------------------------------------- */

static const cli_option_t trim_options[] = {
    {"--through", 1},
    {"--force", 0},
    {NULL, 0},
};

static void trimmed(int status, int64_t deleted, const char *message,
                    void *data) {
  stream_state_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%s: trimmed through %" PRId64 " (%" PRId64 " item%s deleted)\n",
         s->name, s->after, deleted, deleted == 1 ? "" : "s");
  cli_finish(s->cli, CLI_OK);
}

static int trim_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  durable_error_t err;
  memset(&s, 0, sizeof s);
  int rc = operator_args(cli, argc, argv, &s, "--through",
                         "the last item to delete", 1);
  if (rc != 0)
    return rc;
  memset(&err, 0, sizeof err);
  rc = durable_stream_trim(cli->mesh, &s.id, s.after, cli->values[1] != NULL,
                           trimmed, &s, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_trim_command = {
    "trim",
    "NAMESPACE KEY --through N [--force]",
    "delete a durable stream's acknowledged items 1 to N",
    "Deletes the items 1 to N of NAMESPACE@KEY, oldest first, in small\n"
    "transactions that never hold appends up for long, and prints how many\n"
    "went.  N must be acknowledged (at or below the checkpoint); --force\n"
    "trims past it, moving the checkpoint to N first, as `durable seek`\n"
    "does (those items are never handled).  The stream remembers N: a\n"
    "reader asking for a trimmed item fails, saying so, instead of waiting.\n"
    "Publish ids stay, so a retried publish is still answered.  A trim cut\n"
    "off half-way is finished by running it again.\n"
    "\n"
    "  --through N  the last item to delete\n"
    "  --force      also items that are not acknowledged",
    trim_options,
    trim_main,
    0,
};

/* ---- delete-stream ------------------------------------------------------- */

static const cli_option_t delete_options[] = {
    {"--force", 0},
    {NULL, 0},
};

static void stream_deleted(int status, int64_t deleted, const char *message,
                           void *data) {
  stream_state_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%s: deleted (%" PRId64 " item%s)\n", s->name, deleted,
         deleted == 1 ? "" : "s");
  cli_finish(s->cli, CLI_OK);
}

static int delete_main(cli_t *cli, int argc, char **argv) {
  stream_state_t s;
  durable_error_t err;
  memset(&s, 0, sizeof s);
  int rc = operator_args(cli, argc, argv, &s, NULL, NULL, 0);
  if (rc != 0)
    return rc;
  memset(&err, 0, sizeof err);
  rc = durable_stream_delete(cli->mesh, &s.id, cli->values[0] != NULL,
                             stream_deleted, &s, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_delete_stream_command = {
    "delete-stream",
    "NAMESPACE KEY [--force]",
    "delete a durable stream: its node, items and publish ids",
    "Deletes the stream NAMESPACE@KEY: first it is marked as being deleted\n"
    "(publishes to it are refused, saying so), then its items and publish\n"
    "ids go in small transactions, and its node last; prints how many items\n"
    "went.  A later publish starts a new stream at sequence 1.  Refused\n"
    "(exit 1) while a consumer holds the stream, unless --force, which\n"
    "fences that consumer first: its next acknowledgement is refused, and\n"
    "it waits for the stream to exist again.  A delete cut off half-way is\n"
    "finished by running it again.  The dead-letter stream NAMESPACE.dead\n"
    "is a stream of its own and stays.\n"
    "\n"
    "  --force      also while a consumer holds it",
    delete_options,
    delete_main,
    0,
};

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
    put_one_line(stdout, r->last_error ? r->last_error : "-", "\r\n\t");
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

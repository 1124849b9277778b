/*
 * publish.c: `durable publish NAMESPACE KEY JSON|-` -- append one item to a
 * durable stream and print its sequence.
 *
 * It opens a mesh (the producer needs hubs: the stream node's hub assigns
 * the sequence), a client hub "cli/publish-PID", appends, prints the
 * sequence and closes the mesh.  The stream id, the --id and the payload
 * are checked (durable_stream_payload_check, the rule every publish
 * applies) before anything is opened: a refusal exits 2 with its message
 * and writes nothing.  With --id, a store that cannot be reached and a
 * publish it could not take for want of a connection are tried again, for
 * a minute (on_published).
 * `durable requeue` (dead.c) appends through the same answer,
 * cli_stream_published.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

void cli_stream_published(int status, int64_t sequence, const char *message,
                          void *data) {
  cli_stream_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%" PRId64 "\n", sequence);
  cli_finish(s->cli, CLI_OK);
}

static const cli_option_t publish_options[] = {
    {"--id", 1},       {"--print", 0}, {"--id-field", 1},
    {"--no-owner", 0}, {NULL, 0},
};

/* With --id, a publish that failed because the store could not be reached
 * or did not answer (it may or may not have been saved) is sent again with
 * the same id, which appends it at most once: every RETRY_MIN_MS doubling
 * to RETRY_MAX_MS, for RETRY_FOR_MS in all; and a store that cannot be
 * reached at open is tried again as long (session.c).  That rides out a
 * restart or a failover of the database. */
#define RETRY_FOR_MS 60000
#define RETRY_MIN_MS 200
#define RETRY_MAX_MS 5000

typedef struct {
  cli_stream_t s; /* first: cli->state is this */
  durable_hub_t *hub;
  const char *payload;
  durable_publish_options_t options;
  uint64_t started; /* uv_now */
  uint32_t delay;
} publish_t;

static void publish_send(publish_t *p);

static void on_retry(uv_timer_t *timer) {
  publish_send(timer->data);
}

static void on_published(int status, int64_t sequence, const char *message,
                         void *data) {
  publish_t *p = data;
  uv_loop_t *loop = &p->s.cli->loop;
  int again = status == DURABLE_EUNAVAIL || status == DURABLE_ETIMEDOUT;
  if (!again || p->options.id == NULL ||
      uv_now(loop) - p->started + p->delay > RETRY_FOR_MS) {
    cli_stream_published(status, sequence, message, &p->s);
    return;
  }
  fprintf(stderr,
          "durable: publish: %s; sending it again with id %s in %u ms\n",
          message && *message ? message : durable_strerror(status),
          p->options.id, p->delay);
  if (!p->s.timer_open) {
    uv_timer_init(loop, &p->s.timer);
    p->s.timer.data = p;
    p->s.timer_open = 1;
  }
  uv_timer_start(&p->s.timer, on_retry, p->delay, 0);
  p->delay = p->delay * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : p->delay * 2;
}

static void publish_first(cli_stream_t *s) {
  publish_send((publish_t *)s);
}

static void publish_send(publish_t *p) {
  durable_error_t err = {0};
  int rc = durable_stream_publish_with(p->hub, &p->s.id, p->payload,
                                       &p->options, on_published, p, &err);
  if (rc < 0)
    cli_refused(p->s.cli, rc, &err);
}

static int publish_main(cli_t *cli, int argc, char **argv) {
  publish_t p;
  cli_stream_t *s = &p.s;
  durable_error_t err;
  char address[64];
  int rc;

  memset(&p, 0, sizeof p);
  if (argc < 3)
    return cli_usage(cli, "expected NAMESPACE, KEY and JSON");
  if (argc > 3)
    return cli_usage(cli, "too many arguments");
  if ((rc = cli_stream_take(cli, s, argv[0], argv[1])) != 0)
    return rc;
  p.options.id = cli->values[0];
  int print = cli->values[1] != NULL;
  const char *id_field = cli->values[2];
  int load = strcmp(argv[2], "-") == 0;
  if (load && p.options.id)
    return cli_usage(cli, "--id names one item; a load of JSON lines (-) "
                          "takes --id-field NAME");
  if (!load && (print || id_field))
    return cli_usage(cli, "--print and --id-field are for a load of JSON "
                          "lines from standard input (-)");
  if (id_field && *id_field == '\0')
    return cli_usage(cli, "--id-field needs a field name");
  if (load)
    return cli_load(cli, s, id_field, print, cli->values[3] != NULL);
  memset(&err, 0, sizeof err);
  if (p.options.id && durable_publish_id_check(&s->id, p.options.id, &err) < 0)
    return cli_usage(cli, "%s", err.message);
  p.payload = argv[2];
  /* refused before anything is opened: a bad payload makes no store */
  if (durable_stream_payload_check(&s->id, p.payload, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);

  if (p.options.id != NULL)
    cli->open_retry_ms = RETRY_FOR_MS; /* a store away at open, too */
  if ((rc = cli_stream_open(s, cli)) != 0)
    return rc;
  memset(&err, 0, sizeof err);
  snprintf(address, sizeof address, "cli/publish-%d", (int)uv_os_getpid());
  rc = durable_mesh_client(cli->mesh, address, &p.hub, &err);
  if (rc < 0) {
    cli_refused(cli, rc, &err);
    return cli_run(cli);
  }
  p.started = uv_now(&cli->loop);
  p.delay = RETRY_MIN_MS;
  /* the owner is checked here, once (or waived with --no-owner): the
   * library need not look at it again when the publish makes the stream */
  p.options.no_owner = 1;
  cli_stream_owner_check(s, cli->values[3] != NULL, publish_first);
  return cli_run(cli);
}

const cli_command_t cli_publish_command = {
    "publish",
    "[--id ID] [--no-owner] NAMESPACE KEY JSON | NAMESPACE KEY - "
    "[--id-field F] [--print] [--no-owner]",
    "append to a durable stream, print the sequence",
    "Appends JSON to the durable stream NAMESPACE@KEY -- KEY is the owning\n"
    "node's path, NAMESPACE the stream family, e.g. `durable publish\n"
    "DocumentLog Space/doc '{\"text\":\"hi\"}'`.  The stream node is created\n"
    "on first use; the owner node must be there (a stream with none is\n"
    "consumed by no host): a KEY with no node fails, naming it, unless\n"
    "--no-owner.  Prints the item's sequence once it is saved.  The payload\n"
    "is kept byte for byte.  A bad stream id or a payload that is empty or\n"
    "not JSON exits 2 and writes nothing.\n"
    "\n"
    "With `-` it loads JSON lines from standard input: each line that is not\n"
    "blank is one item, appended in order, many in flight; it prints one\n"
    "line at the end (\"N lines: M items appended, ...; sequences A-B\"),\n"
    "and its progress on stderr when that is a terminal.  A bad line stops\n"
    "it (exit 1, naming the line) once the lines before it are appended;\n"
    "none after it is.\n"
    "  --id-field F  each line's field F (a string or an integer) is its\n"
    "           publish id (as --id): a load cut off half-way is finished by\n"
    "           running it again, and appends nothing twice\n"
    "  --print  print each item's sequence, one per line, instead\n"
    "  --no-owner  publish even though no node is at KEY (a stream that a\n"
    "           consumer on another hub reads by its key, or an owner made\n"
    "           later)\n"
    "\n"
    "  --id ID  an idempotent publish: when the stream already holds an item\n"
    "           published with ID, print that item's sequence and append\n"
    "           nothing.  A publish that failed for want of the store (it may\n"
    "           or may not have been saved) is sent again with its ID for up\n"
    "           to a minute, which rides out a restart or a failover of the\n"
    "           database; run again after a failure (exit 1), it is still\n"
    "           appended once.  ID is 1 to 128 bytes of one path segment (no\n"
    "           '/', no '\\', no control character, not . or ..); it is\n"
    "           remembered for good (`durable trim` deletes items, never ids).",
    publish_options,
    publish_main,
    0,
    0,
};

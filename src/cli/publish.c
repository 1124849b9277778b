/*
 * publish.c: `durable publish NAMESPACE KEY JSON|-` -- append one item to a
 * durable stream and print its sequence.
 *
 * It opens a mesh (the producer needs hubs: the stream node's hub assigns
 * the sequence), a client hub "cli/publish-PID", appends, prints the
 * sequence and closes the mesh.  The stream id, the --id and the payload
 * are checked (durable_stream_payload_check, the rule every publish
 * applies) before anything is opened: a refusal exits 2 with its message
 * and writes nothing.  `durable requeue` (dead.c) appends through the same
 * answer, cli_stream_published.
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
    {"--id", 1},
    {NULL, 0},
};

static int publish_main(cli_t *cli, int argc, char **argv) {
  cli_stream_t s;
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
  if ((rc = cli_stream_take(cli, &s, argv[0], argv[1])) != 0)
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

  if ((rc = cli_stream_open(&s, cli)) != 0) {
    free(owned);
    return rc;
  }
  memset(&err, 0, sizeof err);
  snprintf(address, sizeof address, "cli/publish-%d", (int)uv_os_getpid());
  rc = durable_mesh_client(cli->mesh, address, &hub, &err);
  if (rc == 0)
    rc = durable_stream_publish_with(hub, &s.id, payload, &options,
                                     cli_stream_published, &s, &err);
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

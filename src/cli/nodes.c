/*
 * nodes.c: the node commands: put, get, search.
 *
 * Each checks its arguments (paths with durable_path_check, content with
 * jansson) before it opens the store, so bad input is refused with exit 2
 * and costs nothing; then it submits one request (search: one per page) and
 * ends in the request's callback.  Content goes to the store as the text the
 * user gave and comes back as the text the store kept (print.c).
 */
#include "cli.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SEARCH_PAGE 1000

/* ---- put ---------------------------------------------------------------- */

typedef struct put_state_s {
  const char *path;
} put_state_t;

static void put_done(const durable_result_t *result, void *data) {
  cli_t *cli = data;
  put_state_t *state = cli->state;
  if (result->status < 0) {
    cli_failed(cli, result);
    return;
  }
  if (result->node)
    printf("%s version %" PRId64 "\n", result->node->path,
           result->node->version);
  else
    printf("%s\n", state->path);
  cli_finish(cli, CLI_OK);
}

static int put_main(cli_t *cli, int argc, char **argv) {
  durable_error_t err;
  json_error_t jerr;
  put_state_t state;
  char *owned = NULL;
  const char *content = "{}";
  size_t len = 2;
  int rc;

  if (argc < 2)
    return cli_usage(cli, "expected PATH and NODE_TYPE");
  if (argc > 3)
    return cli_usage(cli, "too many arguments");
  if (durable_path_check(argv[0], &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  /* before the store is opened: a refused type must not create the file */
  if (*argv[1] && durable_node_type_check(argv[1], &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  if (argc == 3 && strcmp(argv[2], "-") == 0) {
    content = owned = cli_read_stdin(&len);
    if (owned == NULL)
      return cli_error(cli, CLI_FAILED,
                       "cannot read the content from "
                       "standard input");
    if (strlen(owned) != len) {
      free(owned);
      return cli_error(cli, CLI_USAGE,
                       "content is not JSON: it holds a NUL "
                       "byte");
    }
  } else if (argc == 3) {
    content = argv[2];
    len = strlen(content);
  }
  json_t *parsed = json_loadb(content, len, JSON_DECODE_ANY, &jerr);
  if (parsed == NULL) {
    free(owned);
    return cli_error(cli, CLI_USAGE,
                     "content is not JSON: %s at line %d "
                     "column %d",
                     jerr.text, jerr.line, jerr.column);
  }
  json_decref(parsed);

  if ((rc = cli_open(cli)) != 0) {
    free(owned);
    return rc;
  }
  state.path = argv[0];
  cli->state = &state;
  memset(&err, 0, sizeof err);
  durable_write_t w = {.kind = DURABLE_WRITE_PUT,
                       .path = argv[0],
                       .node_type = argv[1],
                       .content = content};
  rc = durable_store_write_as(cli->store, cli->principal, &w, 1, put_done, cli,
                              &err);
  free(owned); /* the store copied it */
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_put_command = {
    "put",
    "PATH NODE_TYPE [JSON|-]",
    "write a node (create or replace it)",
    "Writes the node at PATH with type NODE_TYPE and JSON content (default "
    "{};\n"
    "`-` reads it from standard input).  The content is kept byte for byte.\n"
    "Prints the path and the node's new version: `Space/doc version 7`.",
    NULL,
    put_main,
    0,
    0,
};

/* ---- get ---------------------------------------------------------------- */

typedef struct get_state_s {
  const char *path;
} get_state_t;

static void get_done(const durable_result_t *result, void *data) {
  cli_t *cli = data;
  get_state_t *state = cli->state;
  if (result->status == DURABLE_ENOTFOUND ||
      (result->status == 0 && result->node == NULL)) {
    cli_error(cli, CLI_FAILED, "no node at '%s'", state->path);
    cli_finish(cli, CLI_FAILED);
    return;
  }
  if (result->status < 0) {
    cli_failed(cli, result);
    return;
  }
  cli_print_node(stdout, result->node, 0);
  cli_finish(cli, CLI_OK);
}

/* get and search: --read-store reads a standby instead of the store. */
static const cli_option_t read_store_options[] = {
    {"--read-store", 1},
    {NULL, 0},
};

static int get_main(cli_t *cli, int argc, char **argv) {
  durable_error_t err;
  get_state_t state;
  int rc;

  if (argc < 1)
    return cli_usage(cli, "expected @PATH");
  if (argc > 1)
    return cli_usage(cli, "too many arguments");
  state.path = argv[0][0] == '@' ? argv[0] + 1 : argv[0];
  if (durable_path_check(state.path, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);

  cli->read_store_url = cli->values[0];
  if ((rc = cli_open(cli)) != 0)
    return rc;
  cli->state = &state;
  memset(&err, 0, sizeof err);
  rc = durable_store_get(cli->store, cli->principal, state.path, get_done, cli,
                         &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_get_command = {
    "get",
    "@PATH [--read-store URL]",
    "print a node as JSON",
    "Prints the node at PATH as one JSON object: path, namespace, id,\n"
    "node_type, main_node, version, created_at, updated_at (ISO-8601 UTC) and\n"
    "content exactly as stored.  Fails (exit 1) when there is no node there.\n"
    "\n"
    "  --read-store URL  read there instead of the store: a PostgreSQL\n"
    "                    standby (nothing is written to it; it answers with\n"
    "                    what it has replayed)",
    read_store_options,
    get_main,
    0,
    1,
};

/* ---- search ------------------------------------------------------------- */

typedef struct search_state_s {
  const char *query;
  char *after; /* the last id printed: where the next page starts */
  int by_type; /* type:T pages by path (every namespace), not by id */
} search_state_t;

static void search_done(const durable_result_t *result, void *data);

static void search_next(cli_t *cli) {
  search_state_t *state = cli->state;
  durable_error_t err;
  memset(&err, 0, sizeof err);
  int rc =
      durable_store_query(cli->store, cli->principal, state->query,
                          state->after, SEARCH_PAGE, search_done, cli, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
}

static void search_done(const durable_result_t *result, void *data) {
  cli_t *cli = data;
  search_state_t *state = cli->state;
  if (result->status < 0) {
    cli_failed(cli, result);
    return;
  }
  for (size_t i = 0; i < result->count; i++)
    cli_print_node(stdout, result->nodes[i], 1);
  if (!result->more || result->count == 0) {
    cli_finish(cli, CLI_OK);
    return;
  }
  const durable_node_t *last = result->nodes[result->count - 1];
  char *after = strdup(state->by_type ? last->path : last->id);
  if (after == NULL) {
    cli_error(cli, CLI_FAILED, "%s", durable_strerror(DURABLE_ENOMEM));
    cli_finish(cli, CLI_FAILED);
    return;
  }
  free(state->after);
  state->after = after;
  search_next(cli);
}

static int search_main(cli_t *cli, int argc, char **argv) {
  durable_error_t err;
  search_state_t state = {NULL, NULL, 0};
  const char *subject;
  int rc;

  if (argc < 1)
    return cli_usage(cli, "expected namespace:NS, path:P or type:T");
  if (argc > 1)
    return cli_usage(cli, "too many arguments");
  if (strncmp(argv[0], "namespace:", 10) == 0) {
    subject = argv[0] + 10; /* "" lists the top level */
  } else if (strncmp(argv[0], "path:", 5) == 0) {
    subject = argv[0] + 5;
    if (*subject == '\0')
      return cli_usage(cli, "path: needs a path");
  } else if (strncmp(argv[0], "type:", 5) == 0) {
    subject = argv[0] + 5;
    if (*subject == '\0')
      return cli_usage(cli, "type: needs a NodeType");
    if (durable_node_type_check(subject, &err) < 0)
      return cli_error(cli, CLI_USAGE, "%s", err.message);
    state.by_type = 1;
  } else {
    return cli_usage(cli, "query '%s' is none of namespace:NS, path:P, type:T",
                     argv[0]);
  }
  if (!state.by_type && *subject && durable_path_check(subject, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);

  cli->read_store_url = cli->values[0];
  if ((rc = cli_open(cli)) != 0)
    return rc;
  state.query = argv[0];
  cli->state = &state;
  search_next(cli);
  rc = cli_run(cli);
  free(state.after);
  return rc;
}

const cli_command_t cli_search_command = {
    "search",
    "namespace:NS|path:P|type:T [--read-store URL]",
    "list nodes as JSON lines, in id order",
    "namespace:NS prints every child of NS (NS may be empty for the top\n"
    "level); path:P prints the node at P if there is one; type:T prints\n"
    "every node of NodeType T in every namespace (it scans: an operator's\n"
    "listing, e.g. type:DurableStream).  One JSON object per line, as\n"
    "`durable get` prints it, in id order (type:T in path order), all pages.\n"
    "\n"
    "  --read-store URL  read there instead of the store: a PostgreSQL\n"
    "                    standby (nothing is written to it; it answers with\n"
    "                    what it has replayed)",
    read_store_options,
    search_main,
    0,
    1,
};

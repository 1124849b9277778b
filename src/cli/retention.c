/*
 * retention.c: `durable retention`, an operator's retention policy for a
 * stream family.
 *
 *   durable retention                        FAMILY<TAB>POLICY per line
 *   durable retention FAMILY                 that family's line
 *   durable retention FAMILY POLICY          set it: all, N, or 7d (...)
 *   durable retention FAMILY --clear         remove it
 *
 * What a policy is, and how hosts apply it, is src/streams/retention.c's;
 * this file checks the arguments (durable_retention_parse's message for a
 * bad policy, exit 2, before anything opens) and prints.  A set policy wins
 * over what the family's consumers declare; cleared, theirs apply again.
 */
#include "cli.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const cli_option_t retention_options[] = {
    {"--clear", 0},
    {NULL, 0},
};

typedef struct {
  cli_t *cli;
  const char *family; /* NULL: every family */
  const char *policy; /* set: its text; NULL with --clear */
  char text[64];      /* ... as durable_retention_format spells it */
} retention_state_t;

static void on_set(int status, const char *message, void *data) {
  retention_state_t *st = data;
  if (status < 0) {
    cli_failed_with(st->cli, status, message);
    return;
  }
  if (st->policy)
    printf("%s: retention %s\n", st->family, st->text);
  else
    printf("%s: retention cleared; its consumers keep what they declare\n",
           st->family);
  cli_finish(st->cli, CLI_OK);
}

static void on_listed(const durable_result_t *res, void *data) {
  retention_state_t *st = data;
  if (res->status < 0) {
    cli_failed(st->cli, res);
    return;
  }
  int found = 0;
  for (size_t i = 0; i < res->count; i++) {
    const durable_node_t *n = res->nodes[i];
    if (st->family && strcmp(n->id, st->family) != 0)
      continue;
    json_t *j = json_loads(n->content ? n->content : "", 0, NULL);
    const char *policy = json_string_value(json_object_get(j, "Policy"));
    printf("%s\t%s\n", n->id, policy ? policy : "(not a policy)");
    json_decref(j);
    found = 1;
  }
  if (st->family && !found)
    printf("%s\t-\n", st->family); /* none set: its consumers' own apply */
  cli_finish(st->cli, CLI_OK);
}

static int retention_main(cli_t *cli, int argc, char **argv) {
  static retention_state_t st;
  durable_error_t err;
  memset(&err, 0, sizeof err);
  int clear = cli->values[0] != NULL;
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  if (clear && argc != 1)
    return cli_usage(cli, "--clear takes a FAMILY and no POLICY");
  st = (retention_state_t){.cli = cli,
                           .family = argc > 0 ? argv[0] : NULL,
                           .policy = argc > 1 ? argv[1] : NULL};
  durable_stream_id_t id = {.ns = st.family, .key = "x"};
  if (st.family && durable_stream_check(&id, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  durable_retention_t policy;
  if (st.policy && durable_retention_parse(st.policy, &policy, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  if (st.policy)
    durable_retention_format(&policy, st.text, sizeof st.text);
  int rc = cli_open_mesh(cli);
  if (rc != 0)
    return rc;
  if (st.policy || clear)
    rc = durable_mesh_set_retention(cli->mesh, st.family, st.policy, on_set,
                                    &st, &err);
  else
    rc = durable_store_query(
        durable_mesh_store(cli->mesh), durable_mesh_principal(cli->mesh),
        "namespace:" DURABLE__RETENTION_NS, NULL, 1000, on_listed, &st, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_retention_command = {
    "retention",
    "[FAMILY [POLICY | --clear]]",
    "how long a stream family keeps acknowledged items",
    "With POLICY, sets how long every stream of FAMILY keeps its\n"
    "acknowledged items, over what the family's consumers declare, in every\n"
    "process (hosts read it back within about 5 s):\n"
    "\n"
    "  all          keep every item (the default)\n"
    "  N            keep the newest N acknowledged items (0: delete each one\n"
    "               once it is acknowledged)\n"
    "  DURATION     keep an acknowledged item that long after its append:\n"
    "               500ms, 30s, 15m, 12h, 7d\n"
    "\n"
    "An unacknowledged item is never deleted.  The host holding a stream\n"
    "deletes what is due in small batches, shortly after the\n"
    "acknowledgements that make it so, as `durable trim` does.  --clear\n"
    "removes the policy: the consumers' own apply again.  Without POLICY,\n"
    "prints FAMILY<TAB>POLICY (- when none is set); without FAMILY, every\n"
    "family's that has one.\n"
    "\n"
    "  --clear      remove FAMILY's policy",
    retention_options,
    retention_main,
    0,
    0,
};

/*
 * operator.c: an operator's acts on one durable stream -- `durable seek`
 * (move its checkpoint: replay or skip), `durable trim` (delete its
 * acknowledged items) and `durable delete-stream` (delete it whole).
 *
 * Each takes NAMESPACE KEY and at most one sequence option (operator_args),
 * opens a mesh, submits the one call of the C API that acts
 * (durable_stream_seek or durable_group_seek, durable_stream_trim or
 * durable_group_trim, durable_stream_delete), prints
 * one line saying what it did and closes the mesh.
 */
#include "cli.h"

#include <inttypes.h>
#include <string.h>

/* ---- seek ---------------------------------------------------------------- */

static const cli_option_t seek_options[] = {
    {"--to", 1},
    {"--group", 1},
    {NULL, 0},
};

static void seeked(int status, int64_t was, const char *message, void *data) {
  cli_stream_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  const char *group = s->cli->values[1];
  printf("%s%s%s: checkpoint %" PRId64 " (was %" PRId64 ")\n", s->name,
         group ? " group " : "", group ? group : "", s->after, was);
  cli_finish(s->cli, CLI_OK);
}

/* NAMESPACE KEY and the sequence of the command's first option (`flag`,
 * at least `min`; NULL: none): checked, the stream taken, the mesh opened.
 * Returns 0 or the exit code. */
static int operator_args(cli_t *cli, int argc, char **argv, cli_stream_t *s,
                         const char *flag, const char *what, int64_t min) {
  if (argc < 2)
    return cli_usage(cli, "expected NAMESPACE and KEY");
  if (argc > 2)
    return cli_usage(cli, "too many arguments");
  if (flag && cli->values[0] == NULL)
    return cli_usage(cli, "%s N is missing: %s", flag, what);
  if (flag &&
      (cli_parse_sequence(cli->values[0], &s->after) < 0 || s->after < min))
    return cli_usage(cli,
                     "%s needs a sequence (a whole number >= %lld), not '%s'",
                     flag, (long long)min, cli->values[0]);
  int rc = cli_stream_take(cli, s, argv[0], argv[1]);
  return rc != 0 ? rc : cli_stream_open(s, cli);
}

static int seek_main(cli_t *cli, int argc, char **argv) {
  cli_stream_t s;
  durable_error_t err;
  memset(&s, 0, sizeof s);
  int rc = operator_args(cli, argc, argv, &s, "--to",
                         "the checkpoint to move to", 0);
  if (rc != 0)
    return rc;
  memset(&err, 0, sizeof err);
  if (cli->values[1]) /* --group */
    rc = durable_group_seek(cli->mesh, &s.id, cli->values[1], s.after, seeked,
                            &s, &err);
  else
    rc = durable_stream_seek(cli->mesh, &s.id, s.after, seeked, &s, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_seek_command = {
    "seek",
    "NAMESPACE KEY --to N [--group GROUP]",
    "move a durable stream's checkpoint: replay or skip",
    "Sets the acknowledged checkpoint of NAMESPACE@KEY to N (0 to its last\n"
    "sequence): back to replay the items after N, forward to skip them.  The\n"
    "lease is let go with a new epoch, so the consumer holding it, in any\n"
    "process, claims again and resumes after N (the item it had begun may be\n"
    "handed over once more).  Prints the new checkpoint and the one before;\n"
    "the stream's host logs the move.  A stream that does not exist, or N\n"
    "past its last sequence, fails (exit 1).\n"
    "\n"
    "  --to N         the checkpoint\n"
    "  --group GROUP  move that consumer group's checkpoint instead (the\n"
    "                 stream's own and the other groups' stay); a group\n"
    "                 behind a trim goes on this way, with N at or past\n"
    "                 the trim",
    seek_options,
    seek_main,
    0,
    0,
};

/* ---- trim ---------------------------------------------------------------- */

static const cli_option_t trim_options[] = {
    {"--through", 1},
    {"--force", 0},
    {"--group", 1},
    {NULL, 0},
};

static void trimmed(int status, int64_t deleted, const char *message,
                    void *data) {
  cli_stream_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  const char *group = s->cli->values[2];
  printf("%s: trimmed through %" PRId64 " (%" PRId64 " item%s deleted)%s%s%s\n",
         s->name, s->after, deleted, deleted == 1 ? "" : "s",
         group ? "; group " : "", group ? group : "",
         group ? " at or past it" : "");
  cli_finish(s->cli, CLI_OK);
}

static int trim_main(cli_t *cli, int argc, char **argv) {
  cli_stream_t s;
  durable_error_t err;
  memset(&s, 0, sizeof s);
  int rc = operator_args(cli, argc, argv, &s, "--through",
                         "the last item to delete", 1);
  if (rc != 0)
    return rc;
  memset(&err, 0, sizeof err);
  if (cli->values[2]) /* --group */
    rc = durable_group_trim(cli->mesh, &s.id, cli->values[2], s.after,
                            cli->values[1] != NULL, trimmed, &s, &err);
  else
    rc = durable_stream_trim(cli->mesh, &s.id, s.after, cli->values[1] != NULL,
                             trimmed, &s, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_trim_command = {
    "trim",
    "NAMESPACE KEY --through N [--force] [--group GROUP]",
    "delete a durable stream's acknowledged items 1 to N",
    "Deletes the items 1 to N of NAMESPACE@KEY, oldest first, in small\n"
    "transactions that never hold appends up for long, and prints how many\n"
    "went.  N must be acknowledged by the stream's consumer and by every\n"
    "consumer group that pins it (a detached group does not); --force trims\n"
    "past them, moving the stream's checkpoint to N first, as `durable\n"
    "seek` does (those items are never handled), and detaching the groups\n"
    "behind.  The stream remembers N: a reader asking for a trimmed item\n"
    "fails, saying so, instead of waiting.  Publish ids stay, so a retried\n"
    "publish is still answered.  A trim cut off half-way is finished by\n"
    "running it again.\n"
    "\n"
    "  --through N    the last item to delete\n"
    "  --force        also items that are not acknowledged\n"
    "  --group GROUP  pass that consumer group: its checkpoint is first moved\n"
    "                 forward to N if it is behind, as `durable seek --group`\n"
    "                 does (it goes on after N), then the trim goes on as\n"
    "                 without it; the move stays if the trim is refused",
    trim_options,
    trim_main,
    0,
    0,
};

/* ---- delete-stream ------------------------------------------------------- */

static const cli_option_t delete_options[] = {
    {"--force", 0},
    {NULL, 0},
};

static void stream_deleted(int status, int64_t deleted, const char *message,
                           void *data) {
  cli_stream_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%s: deleted (%" PRId64 " item%s)\n", s->name, deleted,
         deleted == 1 ? "" : "s");
  cli_finish(s->cli, CLI_OK);
}

static int delete_main(cli_t *cli, int argc, char **argv) {
  cli_stream_t s;
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
    0,
};

/* ---- group delete ------------------------------------------------------ */

static const cli_option_t group_options[] = {
    {"--force", 0},
    {NULL, 0},
};

static void group_deleted(int status, int64_t was, const char *message,
                          void *data) {
  cli_stream_t *s = data;
  if (status < 0) {
    cli_failed_with(s->cli, status, message);
    return;
  }
  printf("%s: group deleted (it had acknowledged up to %" PRId64 ")\n", s->name,
         was);
  cli_finish(s->cli, CLI_OK);
}

static int group_main(cli_t *cli, int argc, char **argv) {
  cli_stream_t s;
  durable_error_t err;
  memset(&s, 0, sizeof s);
  memset(&err, 0, sizeof err);
  if (argc < 1 || strcmp(argv[0], "delete") != 0)
    return cli_usage(cli, "expected delete NAMESPACE KEY GROUP");
  if (argc != 4)
    return cli_usage(cli, "expected delete NAMESPACE KEY GROUP");
  if (durable_group_check(argv[3], &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  int rc = operator_args(cli, 2, argv + 1, &s, NULL, NULL, 0);
  if (rc != 0)
    return rc;
  rc = durable_group_delete(cli->mesh, &s.id, argv[3], cli->values[0] != NULL,
                            group_deleted, &s, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_group_command = {
    "group",
    "delete NAMESPACE KEY GROUP [--force]",
    "delete a consumer group of a durable stream",
    "Deletes the consumer group GROUP of NAMESPACE@KEY: its node (lease,\n"
    "checkpoint) and its failure record.  The stream, its items and the\n"
    "other groups stay; a trim held back by the group goes on.  Refused\n"
    "(exit 1) while a consumer holds the group, unless --force, which\n"
    "fences that consumer first.  A consumer that still declares the group\n"
    "makes it anew at its next claim, at its start: take the declaration\n"
    "away first to be rid of the group.  Its dead letters\n"
    "(NAMESPACE.dead.GROUP@KEY) are a stream of their own and stay.\n"
    "\n"
    "  --force      also while a consumer holds it",
    group_options,
    group_main,
    0,
    0,
};

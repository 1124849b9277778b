/*
 * access.c: the grant commands: grant, revoke, grants.
 *
 *   durable grant PRINCIPAL PREFIX read|write|read,write
 *   durable revoke PRINCIPAL PREFIX [read|write|read,write]
 *   durable grants [PRINCIPAL]
 *
 * Granting is the platform's: run --as a principal (or with
 * $DURABLE_PRINCIPAL set), grant and revoke are refused (exit 1, EACCES)
 * before the store is opened, and grants lists that principal's own grants
 * only.  Each grants line is "PRINCIPAL<TAB>PREFIX<TAB>MODES", MODES
 * spelled as grant takes them, so a line is the arguments that made it.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

int cli_export_principal(cli_t *cli) {
  int rc = cli->principal ? setenv("DURABLE_PRINCIPAL", cli->principal, 1)
                          : unsetenv("DURABLE_PRINCIPAL");
  if (rc != 0)
    return cli_error(cli, CLI_FAILED, "cannot set DURABLE_PRINCIPAL");
  return 0;
}

static void changed(const durable_result_t *result, void *data) {
  cli_t *cli = data;
  if (result->status < 0) {
    cli_failed(cli, result);
    return;
  }
  cli_finish(cli, CLI_OK);
}

/* The platform only: a principal may not give itself (or anyone) rights. */
static int platform_only(cli_t *cli) {
  if (cli->principal == NULL)
    return 0;
  return cli_error(cli, CLI_FAILED,
                   "principal '%s' may not %s: grants are the platform's "
                   "(run without --as and $DURABLE_PRINCIPAL)",
                   cli->principal, cli->command->name);
}

static int grant_or_revoke(cli_t *cli, int argc, char **argv, int add) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  if (argc < (add ? 3 : 2))
    return cli_usage(cli, add ? "expected PRINCIPAL, PREFIX and MODES"
                              : "expected PRINCIPAL and PREFIX");
  if (argc > 3)
    return cli_usage(cli, "too many arguments");
  int modes = 0;
  if (argc == 3 && (modes = durable__grant_modes_parse(argv[2])) < 0)
    return cli_usage(cli, "modes must be read, write or read,write, not '%s'",
                     argv[2]);
  if (durable_principal_check(argv[0], &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  if (durable_path_check(argv[1], &err) < 0)
    return cli_error(cli, CLI_USAGE, "prefix: %s", err.message);
  int rc = platform_only(cli);
  if (rc != 0)
    return rc;
  if ((rc = cli_open(cli)) != 0)
    return rc;
  rc = add ? durable_store_grant(cli->store, argv[0], argv[1], modes, changed,
                                 cli, &err)
           : durable_store_revoke(cli->store, argv[0], argv[1], modes, changed,
                                  cli, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

static int grant_main(cli_t *cli, int argc, char **argv) {
  return grant_or_revoke(cli, argc, argv, 1);
}

static int revoke_main(cli_t *cli, int argc, char **argv) {
  return grant_or_revoke(cli, argc, argv, 0);
}

static void listed(const durable_result_t *result, void *data) {
  cli_t *cli = data;
  if (result->status < 0) {
    cli_failed(cli, result);
    return;
  }
  for (size_t i = 0; i < result->count; i++)
    printf("%s\t%s\t%s\n", result->grants[i].principal,
           result->grants[i].prefix,
           durable_grant_mode_name(result->grants[i].modes));
  cli_finish(cli, CLI_OK);
}

static int grants_main(cli_t *cli, int argc, char **argv) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  if (argc > 1)
    return cli_usage(cli, "too many arguments");
  const char *who = argc == 1 ? argv[0] : NULL;
  if (who && durable_principal_check(who, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  if (cli->principal && who && strcmp(who, cli->principal) != 0)
    return cli_error(cli, CLI_FAILED,
                     "principal '%s' may not list the grants of '%s': only "
                     "its own",
                     cli->principal, who);
  if (cli->principal)
    who = cli->principal;
  int rc = cli_open(cli);
  if (rc != 0)
    return rc;
  rc = durable_store_grants(cli->store, who, listed, cli, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  return cli_run(cli);
}

const cli_command_t cli_grant_command = {
    "grant",
    "PRINCIPAL PREFIX read|write|read,write",
    "let a principal read and/or write under a prefix",
    "Lets PRINCIPAL read (get, search, streams, read) and/or write (put,\n"
    "publish) every node whose owner is PREFIX or lies under it, segment by\n"
    "segment (Space covers Space/doc, not Spaces); a node's satellites (its\n"
    "streams, their items) go with it.  Consuming a stream (durable run\n"
    "--as) needs both.  Adds to what PRINCIPAL had on PREFIX.  The platform's\n"
    "alone: refused when run --as a principal.  'platform' is no principal's\n"
    "name: the platform is who names none.",
    NULL,
    grant_main,
    0,
    0,
};

const cli_command_t cli_revoke_command = {
    "revoke",
    "PRINCIPAL PREFIX [read|write|read,write]",
    "take a principal's grant back",
    "Takes back what PRINCIPAL may do on PREFIX: the modes given, or all of\n"
    "them.  Takes effect for every process on the operations that start\n"
    "after it.  Grants on other prefixes stay.  The platform's alone.",
    NULL,
    revoke_main,
    0,
    0,
};

const cli_command_t cli_grants_command = {
    "grants",
    "[PRINCIPAL]",
    "list grants: principal, prefix, modes",
    "Prints each grant as PRINCIPAL<TAB>PREFIX<TAB>MODES (read, write or\n"
    "read,write), by principal then prefix: every principal's, or\n"
    "PRINCIPAL's.  Run --as a principal, it lists that principal's own.",
    NULL,
    grants_main,
    0,
    1,
};

/*
 * main.c: the `durable` command: options and dispatch.
 *
 *   durable [--store URL] [--as PRINCIPAL] COMMAND [ARGS] [--help]
 *
 * The common options (--store, --as, --help) may stand before or after the
 * command name; a command's own options (cli_command_t.options) after it; `--`
 * ends the options.  What is left is handed to the command as positional
 * arguments.  The commands are a table, so the later ones (run, publish,
 * read, streams) are one entry and one file each.  Exit codes are CLI_OK,
 * CLI_FAILED, CLI_USAGE (cli.h); failures print one line on stderr.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const cli_command_t *const commands[] = {
    &cli_put_command,       &cli_get_command,           &cli_search_command,
    &cli_lua_command,       &cli_publish_command,       &cli_read_command,
    &cli_dead_command,      &cli_requeue_command,       &cli_seek_command,
    &cli_trim_command,      &cli_delete_stream_command, &cli_group_command,
    &cli_retention_command, &cli_streams_command,       &cli_run_command,
    &cli_grant_command,     &cli_revoke_command,        &cli_grants_command,
};
#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static const char main_usage[] =
    "durable [--store URL] [--as PRINCIPAL] COMMAND [ARGS...]";

static const cli_command_t *find_command(const char *name) {
  for (size_t i = 0; i < COMMAND_COUNT; i++)
    if (strcmp(commands[i]->name, name) == 0)
      return commands[i];
  return NULL;
}

static void print_main_help(void) {
  printf("usage: %s\n\n", main_usage);
  printf("Keeps a mesh of saved nodes in a store and prints them as JSON.\n\n");
  printf("Commands:\n");
  for (size_t i = 0; i < COMMAND_COUNT; i++) {
    if (strlen(commands[i]->args) > 26) /* the summary on a line of its own */
      printf("  %-7s %s\n  %-7s %-26s %s\n", commands[i]->name,
             commands[i]->args, "", "", commands[i]->summary);
    else
      printf("  %-7s %-26s %s\n", commands[i]->name, commands[i]->args,
             commands[i]->summary);
  }
  printf("\nOptions, for every command:\n"
         "  --store URL  sqlite:FILE, sqlite::memory:, postgresql://... or a\n"
         "               libpq conninfo; default: $DURABLE_STORE, "
         "else " CLI_DEFAULT_STORE "\n"
         "  --as PRINCIPAL\n"
         "               act as PRINCIPAL: read and write only what its "
         "grants\n"
         "               allow (durable grant); default: $DURABLE_PRINCIPAL, "
         "else\n"
         "               the platform, which may do everything\n"
         "  --help       this help, or a command's with `durable COMMAND "
         "--help`\n"
         "  --version    print the version\n\n"
         "Environment:\n"
         "  DURABLE_STORE      the store when --store is not given\n"
         "  DURABLE_PRINCIPAL  the principal when --as is not given\n"
         "  DURABLE_LOG        error, warn, info (the default) or debug, in "
         "any case;\n"
         "                     anything else is refused\n"
         "  DURABLE_PLUGIN_PATH\n"
         "                     folders (':' between them) where `durable run "
         "NAME`\n"
         "                     looks for NAME.lua before the installed "
         "plugins\n"
         "  DURABLE_LUA_DIR    where lua/durable/ is, instead of beside the "
         "command\n\n"
         "Exit status: 0 success, 1 failure, 2 bad usage; a failure prints "
         "one line on stderr.\n");
}

static void print_command_help(const cli_command_t *command) {
  printf("usage: ");
  cli_print_usage(stdout, command);
  printf("\n%s\n\n%s\n", command->summary, command->help);
  printf("\nOptions:\n"
         "  --store URL  the store; default: $DURABLE_STORE, "
         "else " CLI_DEFAULT_STORE "\n"
         "  --as PRINCIPAL  act as PRINCIPAL; default: $DURABLE_PRINCIPAL, "
         "else the\n"
         "               platform\n"
         "  --help       this help\n"
         "\nExit status: 0 success, 1 failure, 2 bad usage.\n");
}

static int main_usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "durable: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (usage: %s; see durable --help)\n", main_usage);
  return CLI_USAGE;
}

/* "--store=URL" or "--store URL": 1 if argv[*i] is `name`, with *value set
 * (and *i advanced past a separate value); -1 if the value is missing. */
static int take_option(const char *name, int has_value, int argc, char **argv,
                       int *i, const char **value) {
  const char *arg = argv[*i];
  size_t n = strlen(name);
  if (strncmp(arg, name, n) != 0)
    return 0;
  if (arg[n] == '\0') {
    if (!has_value) {
      *value = "";
      return 1;
    }
    if (*i + 1 >= argc)
      return -1;
    *value = argv[++*i];
    return 1;
  }
  if (arg[n] == '=' && has_value) {
    *value = arg + n + 1;
    return 1;
  }
  return 0;
}

static int is_help(const char *arg) {
  return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int main(int argc, char **argv) {
  cli_t cli;
  memset(&cli, 0, sizeof cli);
  const char *store = NULL;
  const char *as = NULL;
  int i = 1;

  /* Common options before the command name. */
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
    int took;
    if (is_help(argv[i])) {
      print_main_help();
      return CLI_OK;
    }
    if (strcmp(argv[i], "--version") == 0 || strcmp(argv[i], "-V") == 0) {
      printf("durable %s\n", durable_version_string());
      return CLI_OK;
    }
    took = take_option("--store", 1, argc, argv, &i, &store);
    if (took == 0)
      took = take_option("--as", 1, argc, argv, &i, &as);
    if (took < 0)
      return main_usage_error("option '%s' needs a value", argv[i]);
    if (took == 0)
      return main_usage_error("unknown option '%s'", argv[i]);
  }
  if (i >= argc)
    return main_usage_error("%s", "no command given");

  const char *name = argv[i++];
  if (strcmp(name, "help") == 0) {
    const cli_command_t *about = i < argc ? find_command(argv[i]) : NULL;
    if (i < argc && about == NULL)
      return main_usage_error("unknown command '%s'", argv[i]);
    if (about)
      print_command_help(about);
    else
      print_main_help();
    return CLI_OK;
  }
  cli.command = find_command(name);
  if (cli.command == NULL)
    return main_usage_error("unknown command '%s'", name);

  /* --help wins over anything else on the line (up to the first positional
   * of a pass-through command: what follows it is the script's). */
  for (int j = i; j < argc && strcmp(argv[j], "--") != 0; j++) {
    if (cli.command->pass_through && (argv[j][0] != '-' || argv[j][1] == '\0'))
      break;
    if (is_help(argv[j])) {
      print_command_help(cli.command);
      return CLI_OK;
    }
  }

  /* Options after the command; positionals are compacted to the front. */
  char **args = argv + i;
  int nargs = 0, options_done = 0;
  for (; i < argc; i++) {
    const char *arg = argv[i];
    if (options_done || arg[0] != '-' || arg[1] == '\0') {
      args[nargs++] = argv[i];
      if (cli.command->pass_through)
        options_done = 1;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = 1;
      continue;
    }
    int took = take_option("--store", 1, argc, argv, &i, &store);
    if (took == 0)
      took = take_option("--as", 1, argc, argv, &i, &as);
    const cli_option_t *opt = cli.command->options;
    for (int k = 0; took == 0 && opt && opt[k].name && k < CLI_MAX_OPTIONS; k++)
      took = take_option(opt[k].name, opt[k].has_value, argc, argv, &i,
                         &cli.values[k]);
    if (took < 0)
      return cli_usage(&cli, "option '%s' needs a value", arg);
    if (took == 0)
      return cli_usage(&cli, "unknown option '%s'", arg);
  }

  if (store != NULL && store[0] == '\0')
    return cli_usage(&cli, "option '--store' needs a URL");
  if (store == NULL || store[0] == '\0')
    store = getenv("DURABLE_STORE");
  if (store == NULL || store[0] == '\0')
    store = CLI_DEFAULT_STORE;
  cli.store_url = store;

  /* The principal: --as, else $DURABLE_PRINCIPAL, else none (the
   * platform).  An empty one is refused, never read as "none": no string
   * given on purpose turns into the platform. */
  const char *from = "--as";
  if (as == NULL && (as = getenv("DURABLE_PRINCIPAL")) != NULL)
    from = "$DURABLE_PRINCIPAL";
  if (as != NULL) {
    durable_error_t err;
    memset(&err, 0, sizeof err);
    if (durable_principal_check(as, &err) < 0)
      return cli_usage(&cli, "%s: %s", from, err.message);
    cli.principal = as;
  }
  /* A log level that is not one is refused, as an unknown option is: read
   * silently as info, DURABLE_LOG=verbose would hide that nothing changed. */
  durable_log_level_t level;
  const char *log = getenv("DURABLE_LOG");
  if (durable__log_level_parse(log, &level) != 0)
    return cli_error(&cli, CLI_USAGE,
                     "$DURABLE_LOG: '%s' is not a level: error, warn, info or "
                     "debug (in any case)",
                     log);
  return cli.command->main(&cli, nargs, args);
}

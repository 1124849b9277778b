/*
 * lua.c: `durable lua SCRIPT [ARGS...]`: run a Lua script with the durable
 * module available.
 *
 * The interpreter lives in bindings/lua/host.c (src/ never includes lua.h);
 * this file only checks the arguments and hands over.  The store chosen
 * with --store (or $DURABLE_STORE, or the default) is exported as
 * DURABLE_STORE, which durable.open takes when it is given no store, so
 * `durable --store URL lua script.lua` means what it says; --as the same
 * way as DURABLE_PRINCIPAL.
 */
#include "cli.h"

#include <durable_lua.h>
#include <stdlib.h>

static int lua_main(cli_t *cli, int argc, char **argv) {
  if (argc < 1)
    return cli_usage(cli, "a script is needed");
  if (cli_check_file(cli, "script", argv[0]) != 0)
    return CLI_FAILED;
  if (setenv("DURABLE_STORE", cli->store_url, 1) != 0)
    return cli_error(cli, CLI_FAILED, "cannot set DURABLE_STORE");
  int rc = cli_export_principal(cli);
  if (rc != 0)
    return rc;
  return durable_lua_run_script(argv[0], argc - 1, argv + 1, NULL) == 0
             ? CLI_OK
             : CLI_FAILED;
}

const cli_command_t cli_lua_command = {
    "lua",
    "SCRIPT [ARGS...]",
    "run a Lua script with the durable module",
    "Runs SCRIPT with Lua 5.4, `require \"durable\"` available (the module is\n"
    "linked into this command), arg[0] = SCRIPT and arg[1..] = ARGS (options\n"
    "after SCRIPT are the script's).  durable.open takes the store from "
    "--store\n"
    "when given none.  $DURABLE_LUA_DIR overrides where lua/durable/ is "
    "found.\n"
    "Exits 1 when the script raises (the error and its traceback on stderr).",
    NULL,
    lua_main,
    1,
    0,
};

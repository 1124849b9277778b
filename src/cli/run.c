/*
 * run.c: `durable run PLUGIN... [--store URL]`: host the plugins' NodeTypes.
 *
 * The host itself is Lua (lua/durable/run.lua, run through the interpreter
 * in bindings/lua/host.c, since src/ never includes lua.h); this file checks
 * the arguments and hands over the store and the plugin files.  A host acts
 * as the platform unless started --as a principal (or with
 * $DURABLE_PRINCIPAL set): then it serves only the streams that principal
 * may read and write.
 */
#include "cli.h"

#include <durable_lua.h>
#include <unistd.h>

static int run_main(cli_t *cli, int argc, char **argv) {
  if (argc < 1)
    return cli_usage(cli, "at least one plugin file is needed");
  for (int i = 0; i < argc; i++)
    if (cli_find_plugin(cli, &argv[i]) != 0)
      return CLI_FAILED;
  int rc = cli_export_principal(cli);
  if (rc != 0)
    return rc;
  char *args[argc + 1];
  args[0] = (char *)cli->store_url;
  for (int i = 0; i < argc; i++)
    args[i + 1] = argv[i];
  rc = durable_lua_run_module("durable.run", argc + 1, args, NULL);
  return rc == 0 ? CLI_OK : CLI_FAILED;
}

const cli_command_t cli_run_command = {
    "run",
    "PLUGIN...",
    "host the plugins' NodeTypes until SIGINT/SIGTERM",
    "Loads each PLUGIN (a Lua file returning { node_types = { ... } }); a\n"
    "broken plugin is refused with its file, line and reason, and nothing\n"
    "starts.  Then hosts their NodeTypes: the owner of every stream with\n"
    "waiting items and no holder is activated and consumes, at start and\n"
    "whenever another process appends (durable publish).  One log line per\n"
    "lease granted or released and per item failure; DURABLE_LOG=debug shows\n"
    "each item.  On SIGINT or SIGTERM it leaves gracefully -- no new item\n"
    "starts, the item in flight finishes and is acknowledged, leases are\n"
    "released -- and exits 0.  A second signal exits at once.\n"
    "\n"
    "Any number of hosts may serve the same NodeTypes on one database: each\n"
    "stream is held by one of them at a time, and the streams of a host that\n"
    "dies are taken over by another: within about a second of a SIGKILL, or\n"
    "once the database notices that a lost machine's connection is gone.",
    NULL,
    run_main,
    0,
};

/*
 * run.c: `durable run PLUGIN... [--store URL]`: host the plugins' NodeTypes.
 *
 * The host itself is Lua (lua/durable/run.lua, run through the interpreter
 * in bindings/lua/host.c, since src/ never includes lua.h); this file checks
 * the arguments and hands over the store and the plugin files.  A host acts
 * as the platform unless started --as a principal (or with
 * $DURABLE_PRINCIPAL set): then it serves only the streams that principal
 * may read and write.  With --metrics HOST:PORT it also serves the
 * Prometheus text format at /metrics (durable_mesh_serve_metrics), handed
 * over as the module's second argument ("" for none); a malformed address
 * exits 2, one that cannot be bound 1, and the host does not start.
 */
#include "cli.h"

#include <durable_lua.h>
#include <unistd.h>

static const cli_option_t run_options[] = {
    {"--metrics", 1},
    {NULL, 0},
};

static int run_main(cli_t *cli, int argc, char **argv) {
  if (argc < 1)
    return cli_usage(cli, "at least one plugin file is needed");
  for (int i = 0; i < argc; i++)
    if (cli_find_plugin(cli, &argv[i]) != 0)
      return CLI_FAILED;
  int rc = cli_export_principal(cli);
  if (rc != 0)
    return rc;
  const char *metrics = cli->values[0];
  if (metrics != NULL && *metrics == '\0')
    return cli_usage(cli, "--metrics needs HOST:PORT (e.g. 127.0.0.1:9464)");
  char *args[argc + 2];
  args[0] = (char *)cli->store_url;
  args[1] = (char *)(metrics ? metrics : "");
  for (int i = 0; i < argc; i++)
    args[i + 2] = argv[i];
  rc = durable_lua_run_module("durable.run", argc + 2, args, NULL);
  return rc == 0 ? CLI_OK : rc == CLI_USAGE ? CLI_USAGE : CLI_FAILED;
}

const cli_command_t cli_run_command = {
    "run",
    "[--metrics HOST:PORT] PLUGIN...",
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
    "once the database notices that a lost machine's connection is gone.\n"
    "\n"
    "  --metrics HOST:PORT  also serve Prometheus metrics at\n"
    "          http://HOST:PORT/metrics (text format 0.0.4): per stream "
    "family\n"
    "          consumed here, durable_stream_lag and\n"
    "          durable_stream_oldest_unacknowledged_age_seconds (read from "
    "the\n"
    "          store at each scrape), durable_streams, "
    "durable_stream_failing,\n"
    "          durable_stream_dead_letters, this process's\n"
    "          durable_stream_{appended,handled,failed,redelivered,\n"
    "          dead_lettered,trimmed,batches}_total, and process_* figures.  "
    "HOST is "
    "an\n"
    "          IPv4 address, [an IPv6 address] or localhost; only it is bound\n"
    "          (port 0: the system picks one, logged).  Nothing is served\n"
    "          without it.  A malformed address exits 2, a port in use 1.",
    run_options,
    run_main,
    0,
    0,
};

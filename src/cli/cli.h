/*
 * cli.h: what the files of the `durable` command share.
 *
 * main.c parses the command line and dispatches through a table of commands;
 * session.c owns the one session a command opens -- a store or a mesh on a
 * fresh loop -- (its close, the exit code and the one line on stderr);
 * input.c reads standard input; print.c writes nodes as JSON; one file per
 * group of commands implements them (nodes.c: put, get, search; streams.c:
 * publish, read, streams; access.c: grant, revoke, grants).  A command
 * validates its arguments first (bad
 * usage costs nothing), then opens the store or the mesh, submits, and runs
 * the loop until its last callback has closed it.
 */
#ifndef DURABLE_CLI_H
#define DURABLE_CLI_H

#include <durable_internal.h>
#include <stdio.h>

/* Exit codes, the same for every command. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

#define CLI_DEFAULT_STORE "sqlite:durable.db"
#define CLI_MAX_OPTIONS 8

typedef struct cli_s cli_t;

/* An option of one command beyond the common ones (--store, --help).  Its
 * value, or "" for a flag that was given, lands in cli->values[index]. */
typedef struct cli_option_s {
  const char *name; /* "--after" */
  int has_value;
} cli_option_t;

typedef struct cli_command_s {
  const char *name;
  const char *args;    /* "PATH NODE_TYPE [JSON|-]" for the usage line */
  const char *summary; /* one line for `durable --help` */
  const char *help;    /* the rest of `durable COMMAND --help` */
  const cli_option_t *options; /* NULL or ended by {NULL, 0} */
  /* Runs with the positional arguments; returns the exit code. */
  int (*main)(cli_t *cli, int argc, char **argv);
  /* Everything after the first positional argument is handed over as is,
   * options included (`durable lua SCRIPT --flag`). */
  int pass_through;
} cli_command_t;

struct cli_s {
  const cli_command_t *command;
  const char *store_url;
  /* --as or $DURABLE_PRINCIPAL, checked; NULL: the platform */
  const char *principal;
  const char *values[CLI_MAX_OPTIONS];
  uv_loop_t loop;
  int loop_ready;
  /* The session: a store (cli_open) or a mesh (cli_open_mesh), never both;
   * each NULL once its close has begun. */
  durable_store_t *store;
  durable_mesh_t *mesh;
  const char *opened; /* "store" or "mesh", for cli_run's messages */
  int closed;         /* the store's or the mesh's close callback ran */
  int exit_code;
  void *state; /* the running command's own */
  /* NULL, or what cli_finish closes before the store or mesh (a reader,
   * signal handles); called on every cli_finish, so it must be idempotent. */
  void (*before_close)(cli_t *cli);
};

/* ---- session.c ---- */

/* Print "durable: COMMAND: MESSAGE" on stderr; returns `code`. */
int cli_error(const cli_t *cli, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A usage error: the reason and the command's usage line, one line on
 * stderr; returns CLI_USAGE. */
int cli_usage(const cli_t *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Write the one-line usage of `command` ("durable get [--store URL] @PATH"). */
void cli_print_usage(FILE *out, const cli_command_t *command);

/* Open cli->store_url on a fresh loop.  Returns 0, or reports the failure
 * (naming the store) and returns CLI_FAILED (CLI_USAGE for a URL of no
 * known kind) with nothing left open. */
int cli_open(cli_t *cli);
/* The same with a mesh over cli->store_url (cli->mesh; its store is
 * durable_mesh_store(cli->mesh)). */
int cli_open_mesh(cli_t *cli);
/* End the command with `code`: cli->before_close, then close the store or
 * the mesh (callbacks may call it, more than once). */
void cli_finish(cli_t *cli, int code);
/* A submit refused: report `err` (or `rc`) and finish.  EINVAL is bad
 * input, so it ends with CLI_USAGE; anything else with CLI_FAILED. */
void cli_refused(cli_t *cli, int rc, const durable_error_t *err);
/* A callback's failure: report the result's message and finish with
 * CLI_FAILED. */
void cli_failed(cli_t *cli, const durable_result_t *result);
/* The same from a status and a message (NULL or "": durable_strerror). */
void cli_failed_with(cli_t *cli, int status, const char *message);
/* Run the loop until the store or mesh is closed and the loop is empty, close
 * the loop, flush stdout; returns the exit code. */
int cli_run(cli_t *cli);

/* ---- input.c ---- */

/* All of stdin, NUL-terminated, malloc'd (the caller frees it); *len is its
 * size.  NULL on a read error or out of memory. */
char *cli_read_stdin(size_t *len);

/* ---- files.c ---- */

/* 0 when `path` is a regular file this process may read; else reports
 * "cannot read WHAT 'PATH': reason" or "WHAT 'PATH' is not a regular file
 * (a FIFO)" and returns CLI_FAILED. */
int cli_check_file(const cli_t *cli, const char *what, const char *path);
/* Resolve a plugin given to `durable run`: a path as it is, or an installed
 * plugin's name (document_log -> .../share/durable/plugins/document_log.lua),
 * replacing *plugin with the file found.  0, or CLI_FAILED after reporting
 * where it looked. */
int cli_find_plugin(const cli_t *cli, char **plugin);

/* ---- print.c ---- */

/* The node as one JSON object and a newline: path, namespace, id,
 * node_type, main_node, version, created_at, updated_at (ISO-8601 UTC with
 * milliseconds), then content spliced in as stored.  With `one_line`, line
 * breaks in the content (only ever whitespace between JSON tokens) become
 * spaces, so that JSON lines stay one line per node. */
void cli_print_node(FILE *out, const durable_node_t *node, int one_line);
/* A JSON string, escaped as cli_print_node escapes (invalid UTF-8 passes). */
void cli_print_string(FILE *out, const char *s);
/* Milliseconds since the epoch as a quoted ISO-8601 UTC time; 0 as null. */
void cli_print_time(FILE *out, int64_t ms);

/* ---- the commands ---- */

extern const cli_command_t cli_put_command;
extern const cli_command_t cli_get_command;
extern const cli_command_t cli_search_command;
extern const cli_command_t cli_lua_command;
extern const cli_command_t cli_publish_command;
extern const cli_command_t cli_read_command;
extern const cli_command_t cli_dead_command;
extern const cli_command_t cli_requeue_command;
extern const cli_command_t cli_seek_command;
extern const cli_command_t cli_trim_command;
extern const cli_command_t cli_delete_stream_command;
extern const cli_command_t cli_retention_command;
extern const cli_command_t cli_streams_command;
extern const cli_command_t cli_run_command;
extern const cli_command_t cli_grant_command;
extern const cli_command_t cli_revoke_command;
extern const cli_command_t cli_grants_command;

/* ---- access.c ---- */

/* Export the principal to a Lua program (durable run, durable lua), which
 * durable.open then takes when it is given none.  0, or the exit code
 * after reporting. */
int cli_export_principal(cli_t *cli);

#endif /* DURABLE_CLI_H */

/*
 * cli.h: what the files of the `durable` command share.
 *
 * main.c parses the command line and dispatches through a table of commands;
 * session.c owns the one session a command opens -- a store or a mesh on a
 * fresh loop -- (its close, the exit code and the one line on stderr);
 * input.c reads standard input; print.c writes nodes as JSON; one file per
 * command or family of commands implements them (nodes.c: put, get,
 * search; publish.c; read.c; dead.c: dead, requeue; operator.c: seek,
 * trim, delete-stream; streams.c: the streams listing; access.c: grant,
 * revoke, grants; ...), and stream.c holds what the commands on one
 * stream share.  A command validates its arguments first (bad usage costs
 * nothing), then opens the store or the mesh, submits, and runs the loop
 * until its last callback has closed it.
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
  /* It only reads: a SQLite file that is not there is refused, never
   * made (`durable get` in the wrong folder). */
  int reads_only;
} cli_command_t;

struct cli_s {
  const cli_command_t *command;
  const char *store_url;
  /* --read-store (get, search, streams, read): a store opened for reading
   * only, a standby: a store session opens it in place of store_url, a
   * mesh session reads its streams there (durable_mesh_options_t) */
  const char *read_store_url;
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
  /* A store that cannot be reached at open (DURABLE_EUNAVAIL) is tried
   * again, every so often, for this long (0: once); `durable publish --id`
   * sets it, since its publish is safe to send again. */
  uint32_t open_retry_ms;
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

/* ---- stream.c: what the commands on one durable stream share ---- */

/* A command on the stream NAMESPACE@KEY (publish, read, dead, requeue,
 * seek, trim, delete-stream): its stream, its mesh session and its reader.
 * A command may wrap it (first member) in a struct of its own. */
typedef struct cli_stream_s cli_stream_t;
struct cli_stream_s {
  cli_t *cli;
  durable_reader_t *reader;
  uv_signal_t signals[2];
  int signals_open;
  uv_timer_t timer; /* a command's own (publish: a retry), while timer_open */
  int timer_open;
  durable_stream_id_t id;
  char name[DURABLE_PATH_MAX + 80]; /* "NS@KEY" */
  char path[DURABLE_PATH_MAX + 1];
  char items_ns[DURABLE_PATH_MAX + 32];
  int64_t after, until;
  int follow;
  /* Reading it to its end (cli_stream_read_to_end): what is done with each
   * item (NULL: printed as `durable read` prints it) and at the end (NULL:
   * finish with CLI_OK); with missing_is_empty a stream that does not exist
   * has no items rather than fail. */
  void (*each)(cli_stream_t *s, const durable_item_t *item);
  void (*at_end)(cli_stream_t *s);
  int missing_is_empty;
};

/* NAMESPACE KEY into s->id (it keeps the pointers), s->name, s->path and
 * s->items_ns: 0, or CLI_USAGE after reporting (durable_stream_check's
 * message, or a key too long for the stream's paths). */
int cli_stream_take(cli_t *cli, cli_stream_t *s, char *ns, char *key);
/* Open the mesh session for `s` (cli->state); its reader and signal
 * handles are closed before the mesh.  0, or the exit code. */
int cli_stream_open(cli_stream_t *s, cli_t *cli);
/* A sequence argument: digits only, a whole number >= 0; 0, or -1. */
int cli_parse_sequence(const char *text, int64_t *out);
/* Before a publish: the stream's owner node must be there -- a stream
 * with none is consumed by no host, and a typo in the key or the family
 * would otherwise be appended to in silence -- unless `anyway` (the
 * publish's --no-owner).  `then(s)` runs once it is, or at once with
 * `anyway`; else the command fails (ENOTFOUND, naming the path).  The
 * mesh is open. */
void cli_stream_owner_check(cli_stream_t *s, int anyway,
                            void (*then)(cli_stream_t *s));

/* ---- publish.c ---- */

/* ---- load.c ---- */

/* `durable publish NS KEY -`: the JSON lines of standard input appended
 * to the stream `s` (taken, not opened); `id_field` names each line's
 * publish id (NULL: none), `print` prints every sequence, `no_owner` loads
 * even with no node at the key.  The exit code. */
int cli_load(cli_t *cli, cli_stream_t *s, const char *id_field, int print,
             int no_owner);

/* A publish's answer (data: the cli_stream_t): print the sequence and
 * finish with CLI_OK, or report the failure. */
void cli_stream_published(int status, int64_t sequence, const char *message,
                          void *data);

/* ---- read.c ---- */

/* Read what `s`'s stream holds when this starts, then stop: whether it
 * exists, its last item, then every item after s->after up to it, each
 * through s->each; at the end s->at_end.  A refusal or failure is reported
 * and finishes the command. */
void cli_stream_read_to_end(cli_stream_t *s);

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
extern const cli_command_t cli_group_command;
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

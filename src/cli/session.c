/*
 * session.c: the life of one command's session, and how a command ends.
 *
 * A command owns a fresh uv loop and one session on it: a store (get, put,
 * search, streams) or a mesh (publish, read: the producer and the reader
 * need hubs).  Both live the same life:
 *
 *   cli_open / ──> submit ──> callback ──> (submit again ...) ──> cli_finish
 *   cli_open_mesh                                                     │
 *                                                                     v
 *   cli_run: uv_run until the close callback has run and   before_close, then
 *            the loop is empty, then uv_loop_close          durable_store_close
 *                                                           or
 * durable_mesh_close
 *
 * The store or mesh keeps handles on the loop while it is open, so uv_run
 * returns only once the last callback has called cli_finish and the close is
 * over; uv_loop_close then proves that nothing was left behind.  Errors
 * print exactly one line, "durable: COMMAND: message", whatever the
 * library's message held (PostgreSQL's are often several lines).
 */
#include "cli.h"

#include <sys/stat.h>

#include <durable_text.h>

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void print_line(const cli_t *cli, const char *message,
                       const char *suffix) {
  char line[1024];
  durable__one_line_copy(line, sizeof line, message);
  if (cli && cli->command)
    fprintf(stderr, "durable: %s: %s%s\n", cli->command->name, line, suffix);
  else
    fprintf(stderr, "durable: %s%s\n", line, suffix);
}

int cli_error(const cli_t *cli, int code, const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  durable__vformat(message, sizeof message, fmt, ap);
  va_end(ap);
  print_line(cli, message, "");
  return code;
}

void cli_print_usage(FILE *out, const cli_command_t *command) {
  fprintf(out, "durable %s [--store URL] [--as PRINCIPAL] %s", command->name,
          command->args);
}

int cli_usage(const cli_t *cli, const char *fmt, ...) {
  char message[1024], usage[256];
  va_list ap;
  va_start(ap, fmt);
  durable__vformat(message, sizeof message, fmt, ap);
  va_end(ap);
  snprintf(usage, sizeof usage, " (usage: durable %s [--store URL] %s)",
           cli->command->name, cli->command->args);
  print_line(cli, message, usage);
  return CLI_USAGE;
}

/* The URL with a password masked, for the rare message that must name the
 * store when the library did not: "postgresql://u:***@h/db",
 * "host=h password=*** dbname=x". */
static void masked(const char *url, char *out, size_t size) {
  snprintf(out, size, "%s", url);
  char *scheme = strstr(out, "://");
  if (scheme) {
    char *at = strchr(scheme + 3, '@');
    char *colon =
        at ? memchr(scheme + 3, ':', (size_t)(at - scheme - 3)) : NULL;
    if (colon && at - colon > 1) {
      size_t tail = strlen(at) + 1;
      if ((size_t)(colon + 4 - out) + tail <= size) {
        memmove(colon + 4, at, tail);
        memcpy(colon + 1, "***", 3);
      }
    }
  }
  char *pw = strstr(out, "password=");
  if (pw) {
    char *value = pw + 9, *end = value + strcspn(value, " ");
    size_t tail = strlen(end) + 1;
    if ((size_t)(value + 3 - out) + tail <= size) {
      memmove(value + 3, end, tail);
      memcpy(value, "***", 3);
    }
  }
}

/* Open a store, or with `mesh` a mesh, over cli->store_url on a fresh loop;
 * one that cannot be reached is tried again for cli->open_retry_ms. */
static int session_open(cli_t *cli, int mesh);

/* A command that only reads, on a SQLite file that is not there: say so
 * rather than make an empty database (the path before any "?"). */
static int refuse_missing_file(cli_t *cli, const char *url) {
  if (url == NULL || strncmp(url, "sqlite:", 7) != 0)
    return 0;
  char path[4096];
  snprintf(path, sizeof path, "%.*s", (int)strcspn(url + 7, "?"), url + 7);
  struct stat st;
  /* (a SQLite URI, "file:...", is refused by the store itself) */
  if (path[0] == '\0' || strcmp(path, ":memory:") == 0 ||
      strncmp(path, "file:", 5) == 0 || stat(path, &st) == 0 || errno != ENOENT)
    return 0;
  return cli_error(cli, CLI_FAILED,
                   "no database at '%s' (nothing was created); --store or "
                   "DURABLE_STORE names one",
                   path);
}

static int session_open_once(cli_t *cli, int mesh, int *unavailable) {
  durable_error_t err;
  /* a store session with --read-store opens only that one, which
   * durable_store_open_read never makes */
  if (cli->command->reads_only && (mesh || cli->read_store_url == NULL) &&
      refuse_missing_file(cli, cli->store_url))
    return CLI_FAILED;
  int rc = uv_loop_init(&cli->loop);
  if (rc != 0)
    return cli_error(cli, CLI_FAILED, "cannot start the event loop: %s",
                     uv_strerror(rc));
  cli->loop_ready = 1;
  cli->opened = mesh ? "mesh" : "store";
  memset(&err, 0, sizeof err);
  if (mesh) {
    durable_mesh_options_t options;
    memset(&options, 0, sizeof options);
    options.store = cli->store_url;
    options.read_store = cli->read_store_url;
    options.principal = cli->principal;
    rc = durable_mesh_open(&cli->loop, &options, &cli->mesh, &err);
    if (rc >= 0 && cli->mesh != NULL)
      return 0;
  } else {
    rc =
        cli->read_store_url
            ? durable_store_open_read(&cli->loop, cli->read_store_url,
                                      &cli->store, &err)
            : durable_store_open(&cli->loop, cli->store_url, &cli->store, &err);
    if (rc >= 0 && cli->store != NULL)
      return 0;
  }
  /* A URL of no known kind is bad usage; a store that fails is a failure. */
  int code = rc == DURABLE_EINVAL ? CLI_USAGE : CLI_FAILED;
  *unavailable = rc == DURABLE_EUNAVAIL;
  cli->store = NULL;
  cli->mesh = NULL;
  if (err.message[0] != '\0') {
    cli_error(cli, code, "%s", err.message);
  } else if (mesh) {
    cli_error(cli, code, "cannot open store: %s", durable_strerror(rc));
  } else {
    char name[512];
    masked(cli->read_store_url ? cli->read_store_url : cli->store_url, name,
           sizeof name);
    cli_error(cli, code, "cannot open store '%s': %s", name,
              durable_strerror(rc));
  }
  /* A refused open leaves nothing on the loop; run it dry to be sure. */
  uv_run(&cli->loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&cli->loop) == 0)
    cli->loop_ready = 0;
  return code;
}

static int session_open(cli_t *cli, int mesh) {
  uint64_t started = uv_hrtime(), delay_ms = 200;
  for (;;) {
    int unavailable = 0;
    int code = session_open_once(cli, mesh, &unavailable);
    uint64_t spent_ms = (uv_hrtime() - started) / 1000000;
    if (code == 0 || !unavailable || spent_ms + delay_ms > cli->open_retry_ms)
      return code;
    fprintf(stderr, "durable: %s: trying again in %u ms\n", cli->command->name,
            (unsigned)delay_ms);
    uv_sleep((unsigned)delay_ms);
    delay_ms = delay_ms * 2 > 5000 ? 5000 : delay_ms * 2;
  }
}

int cli_open(cli_t *cli) {
  return session_open(cli, 0);
}

int cli_open_mesh(cli_t *cli) {
  return session_open(cli, 1);
}

static void session_closed(void *data) {
  cli_t *cli = data;
  cli->closed = 1;
}

void cli_finish(cli_t *cli, int code) {
  durable_store_t *store = cli->store;
  durable_mesh_t *mesh = cli->mesh;
  if (code > cli->exit_code)
    cli->exit_code = code;
  if (cli->before_close)
    cli->before_close(cli);
  /* NULL for both: already closing. */
  cli->store = NULL;
  cli->mesh = NULL;
  if (store)
    durable_store_close(store, session_closed, cli);
  if (mesh)
    durable_mesh_close(mesh, session_closed, cli);
}

void cli_refused(cli_t *cli, int rc, const durable_error_t *err) {
  const char *message =
      err && err->message[0] ? err->message : durable_strerror(rc);
  int code = rc == DURABLE_EINVAL ? CLI_USAGE : CLI_FAILED;
  cli_error(cli, code, "%s", message);
  cli_finish(cli, code);
}

void cli_failed_with(cli_t *cli, int status, const char *message) {
  cli_error(cli, CLI_FAILED, "%s",
            message && message[0] ? message : durable_strerror(status));
  cli_finish(cli, CLI_FAILED);
}

void cli_failed(cli_t *cli, const durable_result_t *result) {
  cli_failed_with(cli, result->status, result->message);
}

int cli_run(cli_t *cli) {
  uv_run(&cli->loop, UV_RUN_DEFAULT);
  if (cli->store != NULL || cli->mesh != NULL) {
    /* The loop emptied while the session was open and no answer came. */
    cli_error(cli, CLI_FAILED,
              "internal error: the %s went idle without "
              "answering",
              cli->opened);
    cli_finish(cli, CLI_FAILED);
    uv_run(&cli->loop, UV_RUN_DEFAULT);
  }
  if (!cli->closed) {
    cli_error(cli, CLI_FAILED,
              "internal error: the %s did not finish "
              "closing",
              cli->opened);
    cli->exit_code = CLI_FAILED;
  } else if (uv_loop_close(&cli->loop) != 0) {
    cli_error(cli, CLI_FAILED,
              "internal error: the %s left handles open "
              "on the loop",
              cli->opened);
    cli->exit_code = CLI_FAILED;
  } else {
    cli->loop_ready = 0;
  }
  if (fflush(stdout) != 0 || ferror(stdout)) {
    cli_error(cli, CLI_FAILED, "cannot write to standard output: %s",
              strerror(errno));
    cli->exit_code = CLI_FAILED;
  }
  return cli->exit_code;
}

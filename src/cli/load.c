/*
 * load.c: `durable publish NAMESPACE KEY -` -- a bulk load: the JSON lines
 * of standard input appended to one stream, in order, many in flight.
 *
 * Standard input is read in chunks (uv_fs_read: a file, a pipe or a
 * terminal alike), split into lines, and each line that is not blank is
 * published as it comes; the mesh's publish window keeps what is in flight
 * bounded, and reading pauses while more than PAUSE_AT publishes are out,
 * so that a file of any size costs a chunk and a window.  The items take
 * the lines' order: one producer, one stream, and every publish goes
 * through the same window and stream hub in the order it was started.
 *
 * With --id-field NAME each line's field NAME (a string, or an integer) is
 * its publish id, so a load cut off half-way is finished by running it
 * again: the lines already appended are answered with their sequences and
 * appended nothing.  A bad line -- not JSON, null, without its id -- stops
 * the load there: what was started before it is waited for, nothing after
 * it is started, and the message names the line.  A publish that fails
 * stops it the same way.
 *
 * It prints, on stdout, a summary line at the end ("N lines: M items
 * appended, sequences A-B"), or with --print every sequence, one per line,
 * in the lines' order; on a terminal it shows its progress on stderr.
 */
#include "cli.h"

#include <jansson.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
/* Reading pauses past this many publishes out, and goes on below half. */
#define PAUSE_AT 4096
#define PROGRESS_MS 500

typedef struct {
  cli_stream_t s; /* first: cli->state is this */
  durable_hub_t *hub;
  const char *id_field; /* --id-field, or NULL */
  int print;            /* --print */
  uv_fs_t req;
  char chunk[CHUNK];
  int reading, eof, stopped, finished;
  char *line; /* the line read so far (it may span chunks) */
  size_t len, cap;
  uint64_t lines;        /* lines read, blank ones too */
  uint64_t out, sent;    /* publishes out now, and started */
  uint64_t items, fresh; /* answered with a sequence; of them, new ones */
  int64_t last_before;   /* the stream's last sequence when the load began */
  int64_t first_seq, last_seq;
  int failed;
  char failure[1024];
  int tty; /* stderr is a terminal: progress there */
  uv_timer_t progress;
  int progress_open;
} load_t;

/* One publish's line, for its answer. */
typedef struct {
  load_t *load;
  uint64_t line;
} sent_t;

static void read_more(load_t *l);

static void progress_clear(load_t *l) {
  if (l->tty && l->progress_open)
    fputs("\r\033[K", stderr);
}

/* Everything started is answered, and nothing more comes: the end. */
static void maybe_end(load_t *l) {
  if (l->finished || l->out > 0 || l->reading || !(l->eof || l->stopped))
    return;
  l->finished = 1;
  progress_clear(l);
  if (l->progress_open) {
    l->progress_open = 0;
    uv_close((uv_handle_t *)&l->progress, NULL);
  }
  if (l->failed) {
    cli_error(l->s.cli, CLI_FAILED, "%s", l->failure);
    cli_finish(l->s.cli, CLI_FAILED);
    return;
  }
  if (!l->print) {
    if (l->items == 0)
      printf("%" PRIu64 " lines: nothing to append\n", l->lines);
    else
      printf(
          "%" PRIu64 " lines: %" PRIu64 " items appended, %" PRIu64
          " answered by their publish ids; sequences %" PRId64 "-%" PRId64 "\n",
          l->lines, l->fresh, l->items - l->fresh, l->first_seq, l->last_seq);
  }
  cli_finish(l->s.cli, CLI_OK);
}

/* Stop at line `line` with `fmt`: nothing more is started. */
static void stop(load_t *l, uint64_t line, const char *fmt, const char *why) {
  if (l->failed)
    return;
  l->failed = 1;
  l->stopped = 1;
  char reason[800];
  snprintf(reason, sizeof reason, fmt, why);
  snprintf(l->failure, sizeof l->failure,
           "line %" PRIu64 ": %.800s; the lines before it were appended, "
           "none after",
           line, reason);
}

static void on_published(int status, int64_t seq, const char *message,
                         void *data) {
  sent_t *sent = data;
  load_t *l = sent->load;
  uint64_t line = sent->line;
  free(sent);
  l->out--;
  if (status < 0) {
    if (!l->failed) {
      l->failed = l->stopped = 1;
      snprintf(l->failure, sizeof l->failure,
               "line %" PRIu64 ": %s; lines after it may have been appended "
               "too (with --id-field, run the load again to finish it)",
               line, message && *message ? message : durable_strerror(status));
    }
  } else {
    l->items++;
    l->fresh += seq > l->last_before;
    if (l->first_seq == 0 || seq < l->first_seq)
      l->first_seq = seq;
    if (seq > l->last_seq)
      l->last_seq = seq;
    if (l->print)
      printf("%" PRId64 "\n", seq);
  }
  if (!l->reading && !l->eof && !l->stopped && l->out <= PAUSE_AT / 2)
    read_more(l);
  maybe_end(l);
}

/* The publish id of a line: its field NAME, a string or an integer. */
static int id_of(load_t *l, uint64_t line, const char *text, char *out,
                 size_t size) {
  json_error_t je;
  json_t *doc = json_loads(text, JSON_DECODE_ANY, &je);
  json_t *v = json_is_object(doc) ? json_object_get(doc, l->id_field) : NULL;
  int ok = 1;
  if (json_is_string(v))
    snprintf(out, size, "%s", json_string_value(v));
  else if (json_is_integer(v))
    snprintf(out, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
  else
    ok = 0;
  json_decref(doc);
  if (!ok)
    stop(l, line,
         "it has no field '%s' that is a string or an integer "
         "(--id-field)",
         l->id_field);
  return ok ? 0 : -1;
}

static void publish_line(load_t *l, char *text) {
  uint64_t line = l->lines;
  durable_error_t err = {0};
  if (strspn(text, " \t\r\n") == strlen(text))
    return; /* a blank line: nothing */
  char id[DURABLE_PATH_MAX + 1];
  durable_publish_options_t options = {0};
  if (l->id_field) {
    if (id_of(l, line, text, id, sizeof id) < 0)
      return;
    if (durable_publish_id_check(&l->s.id, id, &err) < 0) {
      stop(l, line, "%s", err.message);
      return;
    }
    options.id = id;
  }
  sent_t *sent = malloc(sizeof *sent);
  if (sent == NULL) {
    stop(l, line, "%s", "out of memory");
    return;
  }
  *sent = (sent_t){l, line};
  /* a payload that is no JSON, or null, is refused here */
  int rc = durable_stream_publish_with(l->hub, &l->s.id, text, &options,
                                       on_published, sent, &err);
  if (rc < 0) {
    free(sent);
    stop(l, line, "%s", err.message);
    return;
  }
  l->out++;
  l->sent++;
}

/* A complete line (without its line break) in l->line. */
static void take_line(load_t *l) {
  l->lines++;
  if (memchr(l->line, '\0', l->len) != NULL) {
    stop(l, l->lines, "%s", "it holds a NUL byte, which is not JSON");
    return;
  }
  publish_line(l, l->line);
  l->len = 0;
}

static int append(load_t *l, const char *at, size_t n) {
  if (l->len + n + 1 > l->cap) {
    size_t cap = l->cap ? l->cap : 256;
    while (cap < l->len + n + 1)
      cap *= 2;
    char *grown = realloc(l->line, cap);
    if (grown == NULL)
      return -1;
    l->line = grown;
    l->cap = cap;
  }
  memcpy(l->line + l->len, at, n);
  l->len += n;
  l->line[l->len] = '\0';
  return 0;
}

static void on_read(uv_fs_t *req) {
  load_t *l = req->data;
  ssize_t n = req->result;
  uv_fs_req_cleanup(req);
  l->reading = 0;
  if (l->finished)
    return;
  if (n < 0) {
    stop(l, l->lines + 1, "cannot read standard input: %s",
         uv_strerror((int)n));
  } else if (n == 0) {
    l->eof = 1;
    if (l->len > 0 && !l->stopped) /* a last line without its break */
      take_line(l);
  } else {
    const char *at = l->chunk, *end = l->chunk + n;
    while (at < end && !l->stopped) {
      const char *nl = memchr(at, '\n', (size_t)(end - at));
      if (append(l, at, (size_t)((nl ? nl : end) - at)) < 0) {
        stop(l, l->lines + 1, "%s", "out of memory");
        break;
      }
      if (nl == NULL)
        break;
      take_line(l);
      at = nl + 1;
    }
    if (!l->stopped && l->out < PAUSE_AT)
      read_more(l);
  }
  maybe_end(l);
}

static void read_more(load_t *l) {
  uv_buf_t buf = uv_buf_init(l->chunk, sizeof l->chunk);
  l->req.data = l;
  int rc = uv_fs_read(&l->s.cli->loop, &l->req, 0, &buf, 1, -1, on_read);
  if (rc < 0)
    stop(l, l->lines + 1, "cannot read standard input: %s", uv_strerror(rc));
  else
    l->reading = 1;
}

static void on_progress(uv_timer_t *timer) {
  load_t *l = timer->data;
  fprintf(stderr,
          "\r\033[Kdurable: publish: %" PRIu64 " lines read, %" PRIu64
          " items saved",
          l->lines, l->items);
}

/* The stream's last sequence before the load, to tell new items from
 * those answered by their publish ids; then the load begins. */
static void on_last(const durable_result_t *res, void *data) {
  load_t *l = data;
  if (res->status < 0) {
    cli_failed(l->s.cli, res);
    return;
  }
  l->last_before = res->value;
  if (l->tty) {
    uv_timer_init(&l->s.cli->loop, &l->progress);
    l->progress.data = l;
    l->progress_open = 1;
    uv_timer_start(&l->progress, on_progress, PROGRESS_MS, PROGRESS_MS);
  }
  read_more(l);
  maybe_end(l);
}

int cli_load(cli_t *cli, cli_stream_t *s, const char *id_field, int print) {
  load_t *l = calloc(1, sizeof *l);
  if (l == NULL)
    return cli_error(cli, CLI_FAILED, "out of memory");
  l->s = *s;
  l->id_field = id_field;
  l->print = print;
  l->tty = isatty(2);
  int rc = cli_stream_open(&l->s, cli);
  if (rc != 0) {
    free(l);
    return rc;
  }
  char address[64];
  durable_error_t err = {0};
  snprintf(address, sizeof address, "cli/publish-%d", (int)uv_os_getpid());
  rc = durable_mesh_client(cli->mesh, address, &l->hub, &err);
  if (rc == 0)
    rc = durable__store_last_item(durable_mesh_store(cli->mesh), cli->principal,
                                  l->s.items_ns, on_last, l, &err);
  if (rc < 0)
    cli_refused(cli, rc, &err);
  rc = cli_run(cli);
  free(l->line);
  free(l);
  return rc;
}

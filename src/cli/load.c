/*
 * load.c: `durable publish NAMESPACE KEY -` -- a bulk load: the JSON lines
 * of standard input appended to one stream, in order, many in flight.
 *
 * Standard input is read in chunks -- as a libuv stream where it is one
 * (a pipe, a terminal: reading can stop at once), else from the threadpool
 * (uv_fs_read: a file) -- split into lines, and each line that is not
 * blank is published as it comes.  Reading pauses while publishes wait for
 * room in the mesh's publish window (or PAUSE_AT are out), so that a file
 * of any size costs a chunk and a window, and a store that stalls slows
 * the load rather than fill the window's waiting bound.  The items take
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

#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
/* A line longer than this is refused (a file that is no JSON lines). */
#define LINE_MAX_BYTES (64u << 20)
/* Reading pauses past this many publishes out, and goes on below half. */
#define PAUSE_AT 4096
#define PROGRESS_MS 500

typedef struct {
  cli_stream_t s; /* first: cli->state is this */
  durable_hub_t *hub;
  const char *id_field; /* --id-field, or NULL */
  int print;            /* --print */
  /* standard input: a stream (pipe, tty) while `stream`, else a file */
  union {
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tty_t tty;
  } in;
  int stream, in_open, streaming;
  int in_flags; /* fd 0's flags before libuv made it non-blocking */
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
  uint64_t failed_line; /* the first line that failed, of those that did */
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
  if (l->in_open) {
    l->in_open = 0;
    uv_close((uv_handle_t *)&l->in.stream, NULL); /* fd 0 itself stays */
    /* a pipe is shared with whoever reads it after: as it was */
    if (l->in_flags >= 0)
      fcntl(0, F_SETFL, l->in_flags);
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

/* Stop at line `line` with `fmt`: nothing more is started.  Of several
 * failures, the earliest line's is told (a publish that fails after a bad
 * line was found is an earlier line's). */
static void stop(load_t *l, uint64_t line, const char *fmt, const char *why) {
  l->stopped = 1;
  if (l->failed && l->failed_line <= line)
    return;
  l->failed = 1;
  l->failed_line = line;
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
    l->stopped = 1;
    if (!l->failed || line < l->failed_line) {
      l->failed = 1;
      l->failed_line = line;
      snprintf(l->failure, sizeof l->failure,
               "line %" PRIu64 ": %.700s; lines after it may have been "
               "appended (with --id-field, running the load again appends "
               "what is missing, after them)",
               line, message && *message ? message : durable_strerror(status));
    }
  } else {
    l->items++;
    /* new: above all the stream held and this load was told so far (the
     * answers come in the lines' order; a repeated id gets an earlier
     * sequence) */
    l->fresh += seq > l->last_before && seq > l->last_seq;
    if (l->first_seq == 0 || seq < l->first_seq)
      l->first_seq = seq;
    if (seq > l->last_seq)
      l->last_seq = seq;
    if (l->print)
      printf("%" PRId64 "\n", seq);
  }
  read_more(l); /* if it paused */
  maybe_end(l);
}

/* The publish id of a line: its field NAME, a string or an integer. */
static int id_of(load_t *l, uint64_t line, const char *text, char *out,
                 size_t size) {
  json_error_t je;
  json_t *doc = json_loads(text, JSON_DECODE_ANY, &je);
  if (doc == NULL) {
    stop(l, line, "it is not JSON: %s", je.text);
    return -1;
  }
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
  /* the owner was checked before the first line (or waived): the library
   * need not look at it again for the stream this load makes */
  durable_publish_options_t options = {.no_owner = 1};
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
  l->out++; /* before: a failure may be answered inside the call */
  /* a payload that is no JSON, or null, is refused here */
  int rc = durable_stream_publish_with(l->hub, &l->s.id, text, &options,
                                       on_published, sent, &err);
  if (rc < 0) {
    l->out--;
    free(sent);
    stop(l, line, "%s", err.message);
    return;
  }
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
  if (l->len + n > LINE_MAX_BYTES) {
    stop(l, l->lines + 1, "it is longer than %s bytes (is this JSON lines?)",
         "67108864");
    return -1;
  }
  if (l->len + n + 1 > l->cap) {
    size_t cap = l->cap ? l->cap : 256;
    while (cap < l->len + n + 1)
      cap *= 2;
    char *grown = realloc(l->line, cap);
    if (grown == NULL) {
      stop(l, l->lines + 1, "%s", "out of memory");
      return -1;
    }
    l->line = grown;
    l->cap = cap;
  }
  memcpy(l->line + l->len, at, n);
  l->len += n;
  l->line[l->len] = '\0';
  return 0;
}

/* A chunk of standard input: split into lines (the last one may go on in
 * the next chunk); n == 0 is the end. */
static void took(load_t *l, const char *chunk, size_t n) {
  if (n == 0) {
    l->eof = 1;
    if (l->len > 0 && !l->stopped) /* a last line without its break */
      take_line(l);
    return;
  }
  const char *at = chunk, *end = chunk + n;
  while (at < end && !l->stopped) {
    const char *nl = memchr(at, '\n', (size_t)(end - at));
    if (append(l, at, (size_t)((nl ? nl : end) - at)) < 0)
      return;
    if (nl == NULL)
      return;
    take_line(l);
    at = nl + 1;
  }
}

/* Whether to read on: not while publishes wait for room in the window. */
static int wants_more(load_t *l) {
  durable_publish_stats_t ps;
  if (l->eof || l->stopped || l->finished || l->s.cli->mesh == NULL)
    return 0;
  durable_mesh_publish_stats(l->s.cli->mesh, &ps);
  return ps.waiting == 0 && l->out < PAUSE_AT;
}

static void on_read(uv_fs_t *req) {
  load_t *l = req->data;
  ssize_t n = req->result;
  uv_fs_req_cleanup(req);
  l->reading = 0;
  if (l->finished)
    return;
  if (n < 0)
    stop(l, l->lines + 1, "cannot read standard input: %s",
         uv_strerror((int)n));
  else
    took(l, l->chunk, (size_t)n);
  read_more(l);
  maybe_end(l);
}

static void on_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf) {
  load_t *l = handle->data;
  (void)suggested;
  *buf = uv_buf_init(l->chunk, sizeof l->chunk);
}

static void on_stream_read(uv_stream_t *stream, ssize_t n,
                           const uv_buf_t *buf) {
  load_t *l = stream->data;
  if (n == 0 || l->finished)
    return; /* nothing this time (EAGAIN) */
  if (n == UV_EOF)
    took(l, NULL, 0);
  else if (n < 0)
    stop(l, l->lines + 1, "cannot read standard input: %s",
         uv_strerror((int)n));
  else
    took(l, buf->base, (size_t)n);
  read_more(l); /* or pause */
  maybe_end(l);
}

/* Read on if the load wants more, else pause (a stream stops at once; a
 * file's read in flight finishes). */
static void read_more(load_t *l) {
  int more = wants_more(l);
  if (l->stream) {
    if (more && !l->streaming && l->in_open) {
      int rc = uv_read_start(&l->in.stream, on_alloc, on_stream_read);
      if (rc < 0)
        stop(l, l->lines + 1, "cannot read standard input: %s",
             uv_strerror(rc));
      else
        l->streaming = 1;
    } else if (!more && l->streaming) {
      uv_read_stop(&l->in.stream);
      l->streaming = 0;
    }
    return;
  }
  if (!more || l->reading)
    return;
  uv_buf_t buf = uv_buf_init(l->chunk, sizeof l->chunk);
  l->req.data = l;
  int rc = uv_fs_read(&l->s.cli->loop, &l->req, 0, &buf, 1, -1, on_read);
  if (rc < 0)
    stop(l, l->lines + 1, "cannot read standard input: %s", uv_strerror(rc));
  else
    l->reading = 1;
}

/* Standard input as a stream where it is one (a pipe, a terminal). */
static void input_open(load_t *l) {
  uv_loop_t *loop = &l->s.cli->loop;
  uv_handle_type type = uv_guess_handle(0);
  int rc = -1;
  l->in_flags = fcntl(0, F_GETFL);
  if (type == UV_NAMED_PIPE && (rc = uv_pipe_init(loop, &l->in.pipe, 0)) == 0 &&
      (rc = uv_pipe_open(&l->in.pipe, 0)) < 0)
    uv_close((uv_handle_t *)&l->in.pipe, NULL);
  else if (type == UV_TTY)
    rc = uv_tty_init(loop, &l->in.tty, 0, 1);
  if (rc == 0) {
    l->stream = l->in_open = 1;
    l->in.stream.data = l;
  }
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
  input_open(l);
  read_more(l);
  maybe_end(l);
}

/* The owner is there (or --no-owner): where the stream ends, then on. */
static void load_first(cli_stream_t *s) {
  load_t *l = (load_t *)s;
  durable_error_t err = {0};
  if (durable__store_last_item(durable_mesh_store(s->cli->mesh),
                               s->cli->principal, l->s.items_ns, on_last, l,
                               &err) < 0)
    cli_refused(s->cli, err.code, &err);
}

int cli_load(cli_t *cli, cli_stream_t *s, const char *id_field, int print,
             int no_owner) {
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
  if (rc < 0)
    cli_refused(cli, rc, &err);
  else
    cli_stream_owner_check(&l->s, no_owner, load_first);
  rc = cli_run(cli);
  free(l->line);
  free(l);
  return rc;
}

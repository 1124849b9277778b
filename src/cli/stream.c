/*
 * stream.c: what the commands on one durable stream share -- publish
 * (publish.c), read (read.c), dead and requeue (dead.c), seek, trim and
 * delete-stream (operator.c): the stream taken from NAMESPACE KEY, a
 * sequence taken from an argument, and the mesh session they run on; and
 * how a stream command keeps what it prints on one line (the `streams`
 * listing, streams.c, too).
 *
 * Arguments are checked before anything is opened (durable_stream_check
 * gives the messages every front end gives), so a bad stream id costs
 * nothing and exits 2.  Each of them runs on session.c's mesh session
 * (cli_open_mesh): a fresh loop, the mesh on it, a command that ends by
 * closing it -- the reader and the signal handles first, through
 * cli->before_close -- and uv_loop_close proving nothing was left behind.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* cli->before_close: the reader, the signals and the timer go before the
 * mesh. */
static void close_handles(cli_t *cli) {
  cli_stream_t *s = cli->state;
  if (s->reader) {
    durable_reader_close(s->reader);
    s->reader = NULL;
  }
  if (s->signals_open) {
    s->signals_open = 0;
    uv_close((uv_handle_t *)&s->signals[0], NULL);
    uv_close((uv_handle_t *)&s->signals[1], NULL);
  }
  if (s->timer_open) {
    s->timer_open = 0;
    uv_close((uv_handle_t *)&s->timer, NULL);
  }
}

/* Open the mesh for the command whose state is `s`. */
int cli_stream_open(cli_stream_t *s, cli_t *cli) {
  s->cli = cli;
  cli->state = s;
  cli->before_close = close_handles;
  return cli_open_mesh(cli);
}

/* NAMESPACE KEY: checked, paths derived. */
int cli_stream_take(cli_t *cli, cli_stream_t *s, char *ns, char *key) {
  durable_error_t err;
  memset(&err, 0, sizeof err);
  s->id.ns = ns;
  s->id.key = key;
  if (durable_stream_check(&s->id, &err) < 0)
    return cli_error(cli, CLI_USAGE, "%s", err.message);
  if (durable_stream_path(&s->id, s->path, sizeof s->path) < 0 ||
      durable_stream_items_ns(&s->id, s->items_ns, sizeof s->items_ns) < 0)
    return cli_error(cli, CLI_USAGE,
                     "durable stream %s@%s: the key is too "
                     "long",
                     ns, key);
  snprintf(s->name, sizeof s->name, "%s@%s", ns, key);
  return 0;
}

int cli_parse_sequence(const char *text, int64_t *out) {
  char *end;
  if (text[0] < '0' || text[0] > '9')
    return -1;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0)
    return -1;
  *out = v;
  return 0;
}

/* ---- the owner of a stream published to ------------------------------ */

typedef struct {
  cli_stream_t *s;
  void (*then)(cli_stream_t *s);
} owner_check_t;

static void on_owner(const durable_result_t *res, void *data) {
  owner_check_t *o = data;
  cli_stream_t *s = o->s;
  void (*then)(cli_stream_t * s) = o->then;
  free(o);
  if (res->status == DURABLE_EACCES) {
    then(s); /* a principal that may write but not read: the store decides */
  } else if (res->status == DURABLE_EUNAVAIL ||
             res->status == DURABLE_ETIMEDOUT) {
    then(s); /* the store went away: the publish's own retries (--id) wait */
  } else if (res->status < 0) {
    cli_failed(s->cli, res);
  } else if (res->value == 0) {
    cli_error(s->cli, CLI_FAILED,
              "no node at '%s', the owner of %s: no host would consume what "
              "is published there (a typo in the key or the family?); make "
              "the owner first (durable put %s TYPE '{}'), or give "
              "--no-owner to publish anyway",
              s->id.key, s->name, s->id.key);
    cli_finish(s->cli, CLI_FAILED);
  } else {
    then(s);
  }
}

void cli_stream_owner_check(cli_stream_t *s, int anyway,
                            void (*then)(cli_stream_t *s)) {
  owner_check_t *o = anyway ? NULL : malloc(sizeof(*o));
  durable_error_t err = {0};
  if (anyway) {
    then(s);
    return;
  }
  if (o == NULL) {
    cli_failed_with(s->cli, DURABLE_ENOMEM, "out of memory");
    return;
  }
  *o = (owner_check_t){s, then};
  if (durable_store_exists(durable_mesh_store(s->cli->mesh), s->cli->principal,
                           s->id.key, on_owner, o, &err) < 0) {
    free(o);
    cli_refused(s->cli, err.code, &err);
  }
}

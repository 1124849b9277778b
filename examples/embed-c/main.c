/*
 * embed-c: libdurable inside a C application, without Lua.
 *
 * The application owns the libuv loop.  It opens a mesh on it, registers a
 * NodeType "Counter" whose hubs consume the stream family "Ticks" with a C
 * handler that finishes each item later (from a timer, as real I/O would),
 * publishes five items to one counter, waits until they are handled,
 * recycles the counter (its lease is released), reads the items back with a
 * plain reader, and closes everything so the loop ends with no handle left.
 *
 *   cc main.c $(pkg-config --cflags --libs durable) -o embed && ./embed [STORE]
 */
#include <durable.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uv_loop_t loop;
static durable_mesh_t *mesh;
static durable_hub_t *app;
static int handled, published, read_back, closed;

static void die(const char *what, const char *message) {
  fprintf(stderr, "embed: %s: %s\n", what, message);
  exit(1);
}

/* ---- the consumer: finish each item a little later -------------------- */

typedef struct {
  uv_timer_t timer;
  durable_reply_t *done;
} later_t;

static void on_later_closed(uv_handle_t *h) {
  free(h);
}

static void on_later(uv_timer_t *t) {
  later_t *l = (later_t *)t;
  handled++;
  durable_reply_ok(l->done, NULL); /* now the item is acknowledged */
  uv_close((uv_handle_t *)t, on_later_closed);
}

static void on_tick(durable_hub_t *hub, const durable_item_t *item,
                    durable_reply_t *done, void *data) {
  (void)data;
  printf("%s handles item %lld: %s\n", durable_hub_address(hub),
         (long long)item->sequence, item->payload);
  later_t *l = malloc(sizeof *l);
  if (l == NULL) {
    durable_reply_fail(done, DURABLE_ENOMEM, "out of memory");
    return;
  }
  l->done = done;
  uv_timer_init(&loop, &l->timer);
  uv_timer_start(&l->timer, on_later, 10, 0);
}

/* ---- the steps ---------------------------------------------------------- */

static void on_published(int status, int64_t seq, const char *message,
                         void *data) {
  (void)data;
  if (status < 0)
    die("publish", message);
  printf("published sequence %lld\n", (long long)seq);
  published++;
}

static void on_read(durable_reader_t *r, int status, const durable_item_t *item,
                    const char *message, void *data) {
  (void)data;
  if (status < 0)
    die("read", message);
  printf("read back %lld: %s\n", (long long)item->sequence, item->payload);
  if (++read_back == 5)
    durable_reader_close(r);
}

static void on_recycled(int status, const char *message, void *data) {
  (void)data;
  if (status < 0)
    die("recycle", message);
  printf("recycled Demo/counter: its lease is released\n");
}

static void on_put(const durable_result_t *res, void *data) {
  (void)data;
  if (res->status < 0)
    die("put", res->message);
}

static void on_closed(void *data) {
  (void)data;
  closed = 1;
}

static void run_until(int *flag, int want) {
  while (*flag < want && uv_run(&loop, UV_RUN_ONCE)) {
  }
  if (*flag < want)
    die("run", "the loop stopped early");
}

int main(int argc, char **argv) {
  const char *store = argc > 1 ? argv[1] : "sqlite::memory:";
  durable_error_t err = {0};
  /* built against one header, running with whatever library is installed:
   * a different major version may have broken what this program uses */
  if (durable_version() >> 16 != DURABLE_VERSION_MAJOR)
    die("version", "libdurable's major version differs from durable.h's");
  printf("libdurable %s\n", durable_version_string());
  uv_loop_init(&loop);

  durable_mesh_options_t options = {.store = store};
  if (durable_mesh_open(&loop, &options, &mesh, &err) < 0)
    die("open", err.message);
  durable_consumer_t ticks = {.ns = "Ticks", .handler = on_tick};
  if (durable_node_type_consume(durable_node_type_get(mesh, "Counter"), &ticks,
                                &err) < 0)
    die("consume", err.message);

  int put = 0;
  if (durable_store_put(durable_mesh_store(mesh), "Demo/counter", "Counter",
                        "{}", on_put, NULL, &err) < 0)
    die("put", err.message);
  (void)put;
  if (durable_mesh_client(mesh, "client/embed", &app, &err) < 0)
    die("client", err.message);

  durable_stream_id_t stream = {.ns = "Ticks", .key = "Demo/counter"};
  for (int i = 1; i <= 5; i++) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"tick\":%d}", i);
    if (durable_stream_publish(app, &stream, payload, on_published, NULL,
                               &err) < 0)
      die("publish", err.message);
  }
  run_until(&published, 5);
  run_until(&handled, 5); /* the first append woke the counter */

  if (durable_mesh_recycle(mesh, "Demo/counter", on_recycled, NULL, &err) < 0)
    die("recycle", err.message);

  durable_reader_t *reader;
  if (durable_stream_read(mesh, &stream, 0, NULL, on_read, NULL, &reader,
                          &err) < 0)
    die("read", err.message);
  run_until(&read_back, 5);

  durable_mesh_close(mesh, on_closed, NULL);
  run_until(&closed, 1);
  if (uv_loop_close(&loop) != 0)
    die("close", "handles were left on the loop");
  printf("closed cleanly: %d items handled\n", handled);
  return handled == 5 ? 0 : 1;
}

/*
 * startup_bench.c: what a host's start and `durable streams` cost as the
 * items ever stored grow (see tests/bench/README.md).
 *
 * On a store holding STREAMS streams (100) with --small items in all
 * (1,000), every one acknowledged but one item on one stream, it measures
 *
 *   (a) the listing `durable streams` does: every page of
 *       durable_store_query("type:DurableStream"), 1,000 rows a page;
 *   (b) a host's start: durable_mesh_open, a C consumer on the owners'
 *       NodeType, durable_mesh_start_hosting, until the handler of the one
 * waiting item is entered;
 *
 * then fills the other streams up to --items items in all (1,000,000),
 * acknowledged, and measures both again.  Printed: the medians and the
 * ratio big / small of each, which is near 1 when both cost O(streams) and
 * not O(items ever stored).
 *
 * The streams' nodes are written as the runtime writes them: the owners
 * "{P}/o{NNN}" (NodeType BenchOwner), each stream node
 * "{P}/o{NNN}/_DurableStream/Log" with the fields of stream.c's
 * durable__state_encode (Checkpoint = LastSequence: nothing to do), and the
 * items "{stream}/_DurableStreamItem/{seq:012}" with durable__item_encode's
 * {Sequence, PayloadJson, AppendedAt}, in batches of durable_store_write.
 * Before every host start a producer mesh (no consumer, not a host)
 * durable_stream_publish()es one item to the stream {P}/o000, so the stream
 * node that start finds is the runtime's own.
 *
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS).
 */
#include "bench.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STREAMS 100  /* streams in the store */
#define FAMILY "Log" /* their family */
#define OWNER_TYPE "BenchOwner"
#define PAGE 1000 /* page size of the listing (as `durable streams`) */

/* ---- options ------------------------------------------------------------ */

static struct {
  long items; /* the big size */
  long small; /* the small size */
  int reps;
  const char *only; /* NULL, "sqlite" or "postgres" */
} opt = {1000000, 1000, 5, NULL};

static void usage(FILE *f) {
  fprintf(f, "usage: startup_bench [--items N] [--small N] [--reps N] [--keep] "
             "[--only sqlite|postgres]\n"
             "  --items N  items stored in all for the second measurement "
             "(default 1000000)\n"
             "  --small N  items stored in all for the first (default 1000)\n"
             "  --reps N   repetitions of each measurement; medians are "
             "printed (default 5)\n"
             "  --keep     keep the SQLite file / PostgreSQL schema (printed)\n"
             "  --only S   run one store only\n"
             "PostgreSQL runs when DURABLE_TEST_PG holds a libpq URL.\n");
}

/* ---- the loop ----------------------------------------------------------- */

static ctx_t C; /* the loop (and, while a store runs, its store) */

/* ---- the data ----------------------------------------------------------- */

typedef struct {
  const char *url;
  const char *prefix;  /* first path segment: the partition */
  long items[STREAMS]; /* items stored per stream, all acknowledged */
  int64_t hot_last;    /* stream 0: its last sequence */
} target_t;

static void owner_path(const target_t *t, int i, char *out, size_t size) {
  snprintf(out, size, "%s/o%03d", t->prefix, i);
}

static void stream_path(const target_t *t, int i, char *out, size_t size) {
  snprintf(out, size, "%s/o%03d/_DurableStream/" FAMILY, t->prefix, i);
}

/* The content stream.c's durable__state_encode writes for a stream that
 * nobody holds, whose items up to `last` are all acknowledged. */
static void state_content(const target_t *t, int i, long last, char *out,
                          size_t size) {
  char key[128];
  owner_path(t, i, key, sizeof key);
  snprintf(out, size,
           "{\"Namespace\":\"" FAMILY "\",\"Key\":\"%s\",\"LastSequence\":%ld,"
           "\"Subscriber\":null,\"SubscriberInstance\":null,\"LeaseEpoch\":0,"
           "\"SubscribedAt\":null,\"Checkpoint\":%ld,\"CheckpointAt\":null,"
           "\"OrphanedAt\":null,\"LastSubscriber\":null}",
           key, last, last);
}

/* Items (t->items[i], to[i]] of every stream i (fill_items, one stream
 * after the other), then each stream node with LastSequence = Checkpoint =
 * to[i] in one transaction (streams with to[i] < 0 are left alone).
 * Returns items/s. */
static double fill(target_t *t, durable_store_t *store, const long *to) {
  static durable_write_t w[STREAMS];
  static char spaths[STREAMS][192], scontents[STREAMS][512];
  char ns[256];
  long written = 0;
  size_t k = 0;
  double t0 = now_s();
  for (int i = 0; i < STREAMS; i++) {
    if (to[i] < 0)
      continue;
    stream_path(t, i, spaths[k], sizeof spaths[k]);
    snprintf(ns, sizeof ns, "%s/_DurableStreamItem", spaths[k]);
    fill_items(&C, store, ns, t->items[i] + 1, to[i], 1);
    if (to[i] > t->items[i])
      written += to[i] - t->items[i];
    state_content(t, i, to[i], scontents[k], sizeof scontents[k]);
    w[k] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                             .path = spaths[k],
                             .node_type = "DurableStream",
                             .content = scontents[k]};
    k++;
    t->items[i] = to[i];
  }
  write_nodes(&C, store, w, k);
  return (double)written / (now_s() - t0);
}

static void put_owners(target_t *t, durable_store_t *store) {
  static durable_write_t w[STREAMS];
  static char paths[STREAMS][128];
  for (int i = 0; i < STREAMS; i++) {
    owner_path(t, i, paths[i], sizeof paths[i]);
    w[i] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                             .path = paths[i],
                             .node_type = OWNER_TYPE,
                             .content = "{}"};
  }
  write_nodes(&C, store, w, STREAMS);
}

static long total_items(const target_t *t) {
  long n = 0;
  for (int i = 0; i < STREAMS; i++)
    n += t->items[i];
  return n;
}

/* ---- (a) the listing ---------------------------------------------------- */

typedef struct {
  durable_store_t *store;
  const char *prefix;
  char after[512];
  long rows, ours, pages;
  int done;
} listing_t;

static void list_page(listing_t *l);

static void on_list_page(const durable_result_t *r, void *data) {
  listing_t *l = data;
  size_t plen = strlen(l->prefix);
  C.progress++;
  if (r->status < 0)
    die("type query failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  l->pages++;
  for (size_t i = 0; i < r->count; i++) {
    l->rows++;
    if (strncmp(r->nodes[i]->path, l->prefix, plen) == 0 &&
        r->nodes[i]->path[plen] == '/')
      l->ours++;
  }
  if (r->more && r->count > 0) {
    snprintf(l->after, sizeof l->after, "%s", r->nodes[r->count - 1]->path);
    list_page(l);
  } else {
    l->done = 1;
  }
}

static void list_page(listing_t *l) {
  durable_error_t err = {0};
  int rc = durable_store_query(l->store, NULL, "type:DurableStream", l->after,
                               PAGE, on_list_page, l, &err);
  if (rc < 0)
    die("durable_store_query refused: %s (%s)", err.message,
        durable_err_name(rc));
}

/* Seconds for every page of the listing. */
static double listing(const target_t *t, durable_store_t *store) {
  listing_t l = {.store = store, .prefix = t->prefix};
  double t0 = now_s();
  list_page(&l);
  run_until(&C, &l.done, "listing the streams");
  double dt = now_s() - t0;
  if (l.ours != STREAMS)
    die("the listing found %ld streams under %s/, expected %d", l.ours,
        t->prefix, STREAMS);
  return dt;
}

/* ---- (b) a host's start ------------------------------------------------- */

static struct {
  int64_t want; /* the sequence the handler must get */
  int entered;
  double at; /* now_s() at the handler's entry */
  int64_t got;
} host;

static void on_item(durable_hub_t *hub, const durable_item_t *item,
                    durable_reply_t *done, void *data) {
  (void)hub;
  (void)data;
  if (!host.entered) {
    host.at = now_s();
    host.got = item->sequence;
  }
  host.entered++;
  C.progress++;
  durable_reply_ok(done, NULL);
}

static int published;
static int64_t published_seq;
static void on_published(int status, int64_t seq, const char *message,
                         void *data) {
  (void)data;
  C.progress++;
  if (status < 0)
    die("publish failed: %s", message ? message : "");
  published_seq = seq;
  published = 1;
}

/* The meshes' log: warnings and errors only (each start logs its lease). */
static void on_log(durable_log_level_t level, const char *line, void *data) {
  (void)data;
  if (level <= DURABLE_LOG_WARN)
    fprintf(stderr, "%s\n", line);
}

/* A producer (no consumer, not a host) appends one item to stream 0. */
static void publish_one(target_t *t) {
  durable_error_t err = {0};
  durable_mesh_t *mesh = mesh_open(&C, t->url, on_log);
  durable_hub_t *client = NULL;
  if (durable_mesh_client(mesh, "bench/producer", &client, &err) < 0)
    die("durable_mesh_client: %s", err.message);
  char key[128];
  owner_path(t, 0, key, sizeof key);
  durable_stream_id_t id = {.ns = FAMILY, .key = key};
  published = 0;
  if (durable_stream_publish(client, &id, "{\"bench\":1}", on_published, NULL,
                             &err) < 0)
    die("durable_stream_publish: %s", err.message);
  run_until(&C, &published, "publishing");
  mesh_close(&C, mesh);
  t->hot_last = published_seq;
}

static int got_state;
static char state[1024];
static void on_state(const durable_result_t *r, void *data) {
  (void)data;
  C.progress++;
  if (r->status < 0)
    die("reading the stream node: %s", r->message ? r->message : "");
  snprintf(state, sizeof state, "%s", r->node->content);
  got_state = 1;
}

/* Seconds from durable_mesh_open to the entry of the waiting item's
 * handler. */
static double host_start(target_t *t, durable_store_t *store) {
  durable_error_t err = {0};
  publish_one(t);
  memset(&host, 0, sizeof host);
  host.want = t->hot_last;

  double t0 = now_s();
  durable_mesh_t *mesh = mesh_open(&C, t->url, on_log);
  durable_consumer_t c = {.ns = FAMILY, .handler = on_item};
  if (durable_node_type_consume(durable_node_type_get(mesh, OWNER_TYPE), &c,
                                &err) < 0)
    die("durable_node_type_consume: %s", err.message);
  if (durable_mesh_start_hosting(mesh, &err) < 0)
    die("durable_mesh_start_hosting: %s", err.message);
  run_until(&C, &host.entered, "waiting for the host to handle the item");
  double dt = host.at - t0;
  if (host.got != host.want)
    die("the host handled item %" PRId64 ", expected %" PRId64, host.got,
        host.want);
  mesh_close(&C, mesh);

  /* the next start must find the stream acknowledged and unheld */
  char path[192], want[64];
  stream_path(t, 0, path, sizeof path);
  got_state = 0;
  if (durable_store_get(store, NULL, path, on_state, NULL, &err) < 0)
    die("durable_store_get: %s", err.message);
  run_until(&C, &got_state, "reading the stream node");
  snprintf(want, sizeof want, "\"Checkpoint\":%" PRId64 ",", host.want);
  if (strstr(state, want) == NULL || strstr(state, "\"Subscriber\":null") == 0)
    printf("  note: after the host closed, %s is %s\n", path, state);
  return dt;
}

/* ---- one store ---------------------------------------------------------- */

typedef struct {
  double list[64], start[64];
  double list_med, start_med;
  long total;
} figures_t;

static void measure(target_t *t, durable_store_t *store, figures_t *f) {
  for (int r = 0; r < opt.reps; r++) {
    f->list[r] = listing(t, store);
    f->start[r] = host_start(t, store);
  }
  f->list_med = median(f->list, opt.reps);
  f->start_med = median(f->start, opt.reps);
  f->total = total_items(t);
  printf("  %-46s %10.2f ms  %s\n", "(a) listing type:DurableStream, all pages",
         f->list_med * 1e3, runs(f->list, opt.reps, 1e3, "%.1f"));
  printf("  %-46s %10.2f ms  %s\n", "(b) host start to the waiting item",
         f->start_med * 1e3, runs(f->start, opt.reps, 1e3, "%.1f"));
}

static void run_target(target_t *t) {
  figures_t small = {0}, big = {0};
  long to[STREAMS];
  ctx_open(&C, t->url);
  durable_store_t *store = C.store;
  put_owners(t, store);

  long per = opt.small / STREAMS;
  for (int i = 0; i < STREAMS; i++)
    to[i] = per + (i < opt.small % STREAMS ? 1 : 0);
  double rate = fill(t, store, to);
  printf("[1] %d streams, %s items in all (fill %s items/s)\n", STREAMS,
         num((double)total_items(t)), num(rate));
  measure(t, store, &small);

  /* the other streams grow to --items in all; stream 0 keeps its items */
  long rest = opt.items - t->items[0];
  long have = total_items(t) - t->items[0];
  if (rest > have) {
    long add = rest - have;
    to[0] = -1;
    for (int i = 1; i < STREAMS; i++)
      to[i] = t->items[i] + add / (STREAMS - 1) +
              (i - 1 < add % (STREAMS - 1) ? 1 : 0);
    double t0 = now_s();
    rate = fill(t, store, to);
    printf("    filled to %s items in %.1f s (%s items/s)\n",
           num((double)total_items(t)), now_s() - t0, num(rate));
  }
  printf("[2] %d streams, %s items in all\n", STREAMS,
         num((double)total_items(t)));
  measure(t, store, &big);
  ctx_close(&C);

  printf("[3] ratio %s / %s items\n", num((double)big.total),
         num((double)small.total));
  printf("  %-46s %10.2fx  (target: near 1)\n", "(a) listing",
         big.list_med / small.list_med);
  printf("  %-46s %10.2fx  (target: near 1)\n", "(b) host start",
         big.start_med / small.start_med);
}

/* ---- SQLite ------------------------------------------------------------- */

static void run_sqlite(void) {
  const char *dir = tmpdir_make("durable-startup");
  char url[600];
  snprintf(url, sizeof url, "sqlite:%s/store.db", dir);
  printf("\n== SQLite: %s ==\n", url);
  target_t t = {.url = url, .prefix = "Bench"};
  run_target(&t);
  if (tmpdir_keep)
    printf("  kept %s\n", url);
  tmpdir_remove();
}

/* ---- PostgreSQL --------------------------------------------------------- */

static void run_postgres(const char *url) {
  char partition[64];
  fresh_partition("startup", partition, sizeof partition);
  printf("\n== PostgreSQL: partition %s ==\n", partition);
  target_t t = {.url = url, .prefix = partition};
  run_target(&t);
  if (tmpdir_keep) {
    printf("  kept schema %s\n", partition);
    return;
  }
  /* other runs' listings would scan its tables too: drop it */
  PGconn *conn = PQconnectdb(url);
  if (PQstatus(conn) == CONNECTION_OK) {
    char sql[128];
    snprintf(sql, sizeof sql,
             "SET client_min_messages = warning; DROP SCHEMA \"%s\" CASCADE",
             partition);
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
      printf("  note: could not drop schema %s: %s", partition,
             PQerrorMessage(conn));
    PQclear(res);
  }
  PQfinish(conn);
}

int main(int argc, char **argv) {
  bench_name = "startup_bench";
  bench_usage = usage;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--items") == 0)
      opt.items = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--small") == 0)
      opt.small = parse_long(v, a, STREAMS), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), i++;
    else if (strcmp(a, "--keep") == 0)
      tmpdir_keep = 1; /* and the PostgreSQL schema */
    else if (strcmp(a, "--only") == 0)
      opt.only = parse_only(v), i++;
    else
      other_arg(a);
  }
  if (opt.reps > 64)
    opt.reps = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("startup_bench: durable %s, %d streams, %s then %s items, medians "
         "of %d runs\n",
         DURABLE_VERSION_STRING, STREAMS, num((double)opt.small),
         num((double)opt.items), opt.reps);
  run_stores(opt.only, run_sqlite, run_postgres);
  return 0;
}

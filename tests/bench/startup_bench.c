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
 *       NodeType, durable_mesh_host, until the handler of the one waiting
 *       item is entered;
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
 * durable_publish()es one item to the stream {P}/o000, so the stream node
 * that start finds is the runtime's own.
 *
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS).
 */
#include <durable.h>

#include <libpq-fe.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define STREAMS 100       /* streams in the store */
#define FAMILY "Log"      /* their family */
#define OWNER_TYPE "BenchOwner"
#define PAGE 1000         /* page size of the listing (as `durable streams`) */
#define FILL_BATCH 1000   /* writes per durable_store_write while filling */
#define FILL_INFLIGHT 8   /* fill batches in flight */
#define STALL_SECONDS 120 /* no progress for this long: give up */

/* ---- small helpers ------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double s[64];
  if (n <= 0)
    return 0;
  if (n > 64)
    n = 64;
  memcpy(s, v, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* 1234567.8 -> "1,234,568" (in one of a few rotating buffers). */
static const char *num(double x) {
  static char bufs[8][32];
  static int k;
  char *out = bufs[k++ & 7], tmp[32];
  snprintf(tmp, sizeof tmp, "%.0f", x < 0 ? -x : x);
  size_t n = strlen(tmp), o = 0;
  if (x < 0)
    out[o++] = '-';
  for (size_t i = 0; i < n; i++) {
    if (i && (n - i) % 3 == 0)
      out[o++] = ',';
    out[o++] = tmp[i];
  }
  out[o] = 0;
  return out;
}

/* The repetitions in ms, for judging the noise: "(a b c)". */
static const char *runs_ms(const double *v, int n) {
  static char bufs[4][512];
  static int k;
  char *out = bufs[k++ & 3];
  size_t o = 0;
  out[o++] = '(';
  for (int i = 0; i < n && o < 450; i++)
    o += (size_t)snprintf(out + o, 512 - o, "%s%.1f", i ? " " : "",
                          v[i] * 1e3);
  snprintf(out + o, 512 - o, ")");
  return out;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "\nstartup_bench: ");
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

/* durable__iso_time's format: 2024-05-01T12:00:00.000Z */
static void iso_now(char out[32]) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  time_t secs = tv.tv_sec;
  struct tm tm;
  gmtime_r(&secs, &tm);
  size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(out + n, 32 - n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

/* ---- options ------------------------------------------------------------ */

static struct {
  long items; /* the big size */
  long small; /* the small size */
  int reps;
  int keep;
  const char *only; /* NULL, "sqlite" or "postgres" */
} opt = {1000000, 1000, 5, 0, NULL};

static void usage(FILE *f) {
  fprintf(f,
          "usage: startup_bench [--items N] [--small N] [--reps N] [--keep] "
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

static long parse_long(const char *s, const char *name, long min) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (s == NULL || errno || *end || v < min) {
    fprintf(stderr, "startup_bench: %s needs a number >= %ld\n", name, min);
    usage(stderr);
    exit(2);
  }
  return v;
}

/* ---- the loop ----------------------------------------------------------- */

static uv_loop_t loop;
static uv_timer_t watchdog;
static uint64_t progress, seen;
static int idle_ticks;
static const char *waiting_for;

static void watchdog_tick(uv_timer_t *t) {
  (void)t;
  if (progress != seen) {
    seen = progress;
    idle_ticks = 0;
  } else if (++idle_ticks >= STALL_SECONDS) {
    die("no progress for %d s while %s: stalled", STALL_SECONDS, waiting_for);
  }
}

/* Run the loop until *flag; the watchdog keeps uv_run from returning when
 * nothing else is active and turns a hang into a message. */
static void run_until(const int *flag, const char *what) {
  waiting_for = what;
  idle_ticks = 0;
  seen = progress;
  uv_timer_start(&watchdog, watchdog_tick, 1000, 1000);
  while (!*flag)
    uv_run(&loop, UV_RUN_ONCE);
  uv_timer_stop(&watchdog);
}

static void set_flag(void *data) {
  *(int *)data = 1;
}

static durable_store_t *store_open(const char *url) {
  durable_error_t err = {0};
  durable_store_t *store = NULL;
  int rc = durable_store_open(&loop, url, &store, &err);
  if (rc < 0)
    die("cannot open store %s: %s (%s)", url, err.message,
        durable_err_name(rc));
  return store;
}

static void store_close(durable_store_t *store) {
  int closed = 0;
  durable_store_close(store, set_flag, &closed);
  run_until(&closed, "closing the store");
}

/* ---- the data ----------------------------------------------------------- */

typedef struct {
  const char *url;
  const char *prefix; /* first path segment: the partition */
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

/* A batch of writes, with up to FILL_INFLIGHT in flight. */
typedef struct {
  durable_store_t *store;
  int inflight, failed;
} pipe_t;

static void batch_done(const durable_result_t *r) {
  pipe_t *p = r->data;
  progress++;
  if (r->status < 0)
    die("batch write failed: %s (%s)", r->message ? r->message : "",
        durable_err_name(r->status));
  p->inflight--;
}

static void batch_send(pipe_t *p, const durable_write_t *w, size_t n) {
  durable_error_t err = {0};
  while (p->inflight >= FILL_INFLIGHT)
    uv_run(&loop, UV_RUN_ONCE);
  int rc = durable_store_write(p->store, w, n, batch_done, p, &err);
  if (rc < 0)
    die("durable_store_write refused: %s (%s)", err.message,
        durable_err_name(rc));
  p->inflight++;
}

static void pipe_drain(pipe_t *p) {
  waiting_for = "writing";
  uv_timer_start(&watchdog, watchdog_tick, 1000, 1000);
  while (p->inflight > 0)
    uv_run(&loop, UV_RUN_ONCE);
  uv_timer_stop(&watchdog);
}

/* Items (from[i], to[i]] of every stream i, then each stream node with
 * LastSequence = Checkpoint = to[i] (streams with to[i] < 0 are left
 * alone).  Returns items/s. */
static double fill(target_t *t, durable_store_t *store, const long *to) {
  static durable_write_t w[FILL_BATCH];
  static char paths[FILL_BATCH][256];
  static char contents[FILL_BATCH][128];
  pipe_t p = {.store = store};
  char at[32], ns[160];
  long written = 0;
  size_t k = 0;
  iso_now(at);
  double t0 = now_s();
  for (int i = 0; i < STREAMS; i++) {
    if (to[i] < 0)
      continue;
    stream_path(t, i, ns, sizeof ns);
    for (long seq = t->items[i] + 1; seq <= to[i]; seq++) {
      snprintf(paths[k], sizeof paths[k], "%s/_DurableStreamItem/%012ld", ns,
               seq);
      snprintf(contents[k], sizeof contents[k],
               "{\"Sequence\":%ld,\"PayloadJson\":\"{\\\"i\\\":%ld}\","
               "\"AppendedAt\":\"%s\"}",
               seq, seq, at);
      w[k] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                               .path = paths[k],
                               .node_type = "DurableStreamItem",
                               .content = contents[k]};
      written++;
      if (++k == FILL_BATCH) {
        batch_send(&p, w, k); /* copied by the store: buffers free again */
        k = 0;
      }
    }
  }
  if (k > 0)
    batch_send(&p, w, k);
  pipe_drain(&p);
  /* then the stream nodes, in one transaction */
  static char spaths[STREAMS][192], scontents[STREAMS][512];
  k = 0;
  for (int i = 0; i < STREAMS; i++) {
    if (to[i] < 0)
      continue;
    stream_path(t, i, spaths[k], sizeof spaths[k]);
    state_content(t, i, to[i], scontents[k], sizeof scontents[k]);
    w[k] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                             .path = spaths[k],
                             .node_type = "DurableStream",
                             .content = scontents[k]};
    k++;
    t->items[i] = to[i];
  }
  if (k > 0)
    batch_send(&p, w, k);
  pipe_drain(&p);
  return (double)written / (now_s() - t0);
}

static void put_owners(target_t *t, durable_store_t *store) {
  static durable_write_t w[STREAMS];
  static char paths[STREAMS][128];
  pipe_t p = {.store = store};
  for (int i = 0; i < STREAMS; i++) {
    owner_path(t, i, paths[i], sizeof paths[i]);
    w[i] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                             .path = paths[i],
                             .node_type = OWNER_TYPE,
                             .content = "{}"};
  }
  batch_send(&p, w, STREAMS);
  pipe_drain(&p);
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

static void on_list_page(const durable_result_t *r) {
  listing_t *l = r->data;
  size_t plen = strlen(l->prefix);
  progress++;
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
  int rc = durable_store_query(l->store, DURABLE_PLATFORM,
                               "type:DurableStream", l->after, PAGE,
                               on_list_page, l, &err);
  if (rc < 0)
    die("durable_store_query refused: %s (%s)", err.message,
        durable_err_name(rc));
}

/* Seconds for every page of the listing. */
static double listing(const target_t *t, durable_store_t *store) {
  listing_t l = {.store = store, .prefix = t->prefix};
  double t0 = now_s();
  list_page(&l);
  run_until(&l.done, "listing the streams");
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
  progress++;
  durable_reply_ok(done, NULL);
}

static int published;
static int64_t published_seq;
static void on_published(int status, int64_t seq, const char *message,
                         void *data) {
  (void)data;
  progress++;
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

static durable_mesh_t *mesh_open(const char *url) {
  durable_error_t err = {0};
  durable_mesh_options_t o = {.store = url, .log = on_log};
  durable_mesh_t *mesh = NULL;
  int rc = durable_mesh_open(&loop, &o, &mesh, &err);
  if (rc < 0)
    die("durable_mesh_open(%s): %s (%s)", url, err.message,
        durable_err_name(rc));
  return mesh;
}

static void mesh_close(durable_mesh_t *mesh) {
  int closed = 0;
  durable_mesh_close(mesh, set_flag, &closed);
  run_until(&closed, "closing the mesh");
}

/* A producer (no consumer, not a host) appends one item to stream 0. */
static void publish_one(target_t *t) {
  durable_error_t err = {0};
  durable_mesh_t *mesh = mesh_open(t->url);
  durable_hub_t *client = NULL;
  if (durable_mesh_client(mesh, "bench/producer", &client, &err) < 0)
    die("durable_mesh_client: %s", err.message);
  char key[128];
  owner_path(t, 0, key, sizeof key);
  durable_stream_id_t id = {.ns = FAMILY, .key = key};
  published = 0;
  if (durable_publish(client, &id, "{\"bench\":1}", on_published, NULL, &err) <
      0)
    die("durable_publish: %s", err.message);
  run_until(&published, "publishing");
  mesh_close(mesh);
  t->hot_last = published_seq;
}

static int got_state;
static char state[1024];
static void on_state(const durable_result_t *r) {
  progress++;
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
  durable_mesh_t *mesh = mesh_open(t->url);
  durable_consumer_t c = {.ns = FAMILY, .handler = on_item};
  if (durable_node_type_consume(durable_mesh_node_type(mesh, OWNER_TYPE), &c,
                                &err) < 0)
    die("durable_node_type_consume: %s", err.message);
  if (durable_mesh_host(mesh, &err) < 0)
    die("durable_mesh_host: %s", err.message);
  run_until(&host.entered, "waiting for the host to handle the item");
  double dt = host.at - t0;
  if (host.got != host.want)
    die("the host handled item %" PRId64 ", expected %" PRId64, host.got,
        host.want);
  mesh_close(mesh);

  /* the next start must find the stream acknowledged and unheld */
  char path[192], want[64];
  stream_path(t, 0, path, sizeof path);
  got_state = 0;
  if (durable_store_get(store, NULL, path, on_state, NULL, &err) < 0)
    die("durable_store_get: %s", err.message);
  run_until(&got_state, "reading the stream node");
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
         f->list_med * 1e3, runs_ms(f->list, opt.reps));
  printf("  %-46s %10.2f ms  %s\n", "(b) host start to the waiting item",
         f->start_med * 1e3, runs_ms(f->start, opt.reps));
}

static void run_target(target_t *t) {
  figures_t small = {0}, big = {0};
  long to[STREAMS];
  durable_store_t *store = store_open(t->url);
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
  store_close(store);

  printf("[3] ratio %s / %s items\n", num((double)big.total),
         num((double)small.total));
  printf("  %-46s %10.2fx  (target: near 1)\n", "(a) listing",
         big.list_med / small.list_med);
  printf("  %-46s %10.2fx  (target: near 1)\n", "(b) host start",
         big.start_med / small.start_med);
}

/* ---- SQLite ------------------------------------------------------------- */

static char tmpdir[256];

static void rm_rf_dir(const char *dir) {
  static const char *const names[] = {"store.db", "store.db-wal",
                                      "store.db-shm", "store.db-live"};
  char f[600];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(f, sizeof f, "%s/%s", dir, names[i]);
    unlink(f);
  }
  if (rmdir(dir) != 0)
    printf("  note: could not remove %s: %s\n", dir, strerror(errno));
}

static void cleanup_tmpdir(void) {
  if (tmpdir[0] && !opt.keep)
    rm_rf_dir(tmpdir);
  tmpdir[0] = 0;
}

static void run_sqlite(void) {
  const char *base = getenv("TMPDIR");
  snprintf(tmpdir, sizeof tmpdir, "%s/durable-startup.XXXXXX",
           base && *base ? base : "/tmp");
  if (mkdtemp(tmpdir) == NULL)
    die("mkdtemp: %s", strerror(errno));
  atexit(cleanup_tmpdir);
  char url[600];
  snprintf(url, sizeof url, "sqlite:%s/store.db", tmpdir);
  printf("\n== SQLite: %s ==\n", url);
  target_t t = {.url = url, .prefix = "Bench"};
  run_target(&t);
  if (opt.keep)
    printf("  kept %s\n", url);
  cleanup_tmpdir();
}

/* ---- PostgreSQL --------------------------------------------------------- */

static void run_postgres(const char *url) {
  char partition[64];
  /* a fresh partition per run, lower case so that it is its own schema */
  snprintf(partition, sizeof partition, "startup_%lx_%ld",
           (unsigned long)time(NULL), (long)getpid());
  printf("\n== PostgreSQL: partition %s ==\n", partition);
  target_t t = {.url = url, .prefix = partition};
  run_target(&t);
  if (opt.keep) {
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
      opt.keep = 1;
    else if (strcmp(a, "--only") == 0) {
      opt.only = ++i < argc ? argv[i] : "";
      if (strcmp(opt.only, "sqlite") && strcmp(opt.only, "postgres")) {
        fprintf(stderr, "startup_bench: --only takes sqlite or postgres\n");
        return 2;
      }
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "startup_bench: unknown argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (opt.reps > 64)
    opt.reps = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (uv_loop_init(&loop) != 0)
    die("uv_loop_init failed");
  uv_timer_init(&loop, &watchdog);

  printf("startup_bench: durable %s, %d streams, %s then %s items, medians "
         "of %d runs\n",
         DURABLE_VERSION_STRING, STREAMS, num((double)opt.small),
         num((double)opt.items), opt.reps);
  if (opt.only == NULL || strcmp(opt.only, "sqlite") == 0)
    run_sqlite();
  if (opt.only == NULL || strcmp(opt.only, "postgres") == 0) {
    const char *pg = getenv("DURABLE_TEST_PG");
    if (pg && *pg)
      run_postgres(pg);
    else
      printf("\n== PostgreSQL: skipped (set DURABLE_TEST_PG to a libpq URL) "
             "==\n");
  }
  uv_close((uv_handle_t *)&watchdog, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0)
    printf("  note: the loop still had handles at the end\n");
  return 0;
}

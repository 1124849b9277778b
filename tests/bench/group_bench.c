/*
 * group_bench.c: what consumer groups (durable_consumer_t.group) cost the
 * producers of a stream and its consumers, each figure a ratio against
 * the same run without groups and against a plain loop of the same store
 * measured in the same run (see tests/bench/README.md, "group_bench").
 *
 *   [1] one producer awaiting each sequence (--inflight publishes in
 *       flight) into a stream whose 3 groups' consumers are running and
 *       caught up                  vs the same into a stream nobody consumes,
 *       and (for information) with the stream's own consumer running, and
 *       with 3 groups nobody holds (the append's path alone);
 *                                  each vs 1 row/commit
 *   [2] a backlog of --items drained by one group's consumer
 *                                  vs by the stream's own consumer;
 *       and by 3 groups at once: each group's rate and all of them
 *                                  vs the stream's own consumer;
 *                                  each vs 1 row/commit
 *
 * Why: a group keeps its lease and checkpoint in a node of its own under
 * the stream node ({stream}/_DurableStreamGroup/{group}), so that its
 * acknowledgements never contend with the stream's appends, which write the
 * stream node.  [1] checks that an append costs no more with groups than
 * without (target >= 0.9x: a stream consumed in 3 groups against one
 * consumed by its own consumer, and 3 groups nobody holds against no
 * consumer at all), [2] that each group drains at the rate of a
 * stream's single consumer (target about 1.0x), and shows what several
 * groups draining at once share.
 *
 * Every consumer runs on a client hub of this process (durable_hub_consume
 * with a key_of naming the stream's owner, an owner of a NodeType nobody
 * consumes); the 3 groups of a stream share one hub, as the consumers a
 * NodeType declares share its owner's.  The one-row loop runs in slices
 * beside every timed run (beside_start), and the runs of [1] and of [2]
 * take turns in a rotating order, so that each meets the same disk.
 * Checkpoints are read from the nodes: the stream node for its own
 * consumer, each group's node for a group (wait_checkpoints).
 *
 * It prints figures and never asserts on time.  It exits 1 only when an
 * operation fails or stalls (no progress for STALL_SECONDS).
 */
#include "stream_figures.h"

#include <stdlib.h>
#include <string.h>

#define GROUP_COUNT 3 /* the groups of [1] and of [2]'s run of all at once */
static const char *const group_names[GROUP_COUNT] = {"g1", "g2", "g3"};

/* The one-row loop beside [1]'s publishes: SLICE rows after every SLICE
 * items, as stream_bench's one producer does. */
#define SLICE 50
/* ... and beside [2]'s drains: DRAIN_ROWS rows after every DRAIN_EVERY
 * items handled.  An item handler drains at about the loop's rate, so a
 * fifth of the drain's time is enough to follow the disk without making
 * a run of 50,000 items twice as long.  Batch handlers drain 50 times
 * faster: batch_bench's 25 rows after every 1,280 items. */
#define DRAIN_EVERY 50
#define DRAIN_ROWS 10
#define BATCH_EVERY 1280
#define BATCH_ROWS 25

/* ---- options ------------------------------------------------------------ */

static struct {
  const char *only; /* NULL, "sqlite" or "postgres" */
  int reps, reps_given;
  int quick;
  long inflight;    /* [1] publishes in flight */
  long batch;       /* [2] items per batch handler call; 0: an item handler */
  unsigned figures; /* bit k: figure k; 0 = all */
} opt = {NULL, 3, 0, 0, 1, 0, 0};

/* Sizes (--quick makes them small). */
static struct {
  long publishes; /* [1] timed publishes of each run */
  long drain;     /* [2] the backlog */
  long plain1;    /* rows of the header's one-row loop */
} sz = {1000, 50000, 1000};

static void usage(FILE *f) {
  fprintf(f,
          "usage: group_bench [--only sqlite|postgres] [--reps N] [--quick]\n"
          "                   [--publishes N] [--inflight N] [--items N]\n"
          "                   [--batch N] [--figures 1,2]\n"
          "  --publishes N timed publishes of each run of [1] (default 1000)\n"
          "  --inflight N  publishes in flight in [1] (default 1)\n"
          "  --items N     the backlog of [2] (default 50000)\n"
          "  --batch N     [2]'s consumers take up to N items a call (default "
          "0:\n"
          "                one item a call, one acknowledgement each)\n"
          "  --reps N      repetitions; medians are printed (default 3)\n"
          "  --quick       small sizes: a smoke run\n"
          "  --figures L   run only these figures (1-2)\n"
          "PostgreSQL runs when DURABLE_TEST_PG holds a libpq URL.\n");
}

static int want(int fig) {
  return opt.figures ? (opt.figures >> fig) & 1 : 1;
}

/* ---- publishing into one stream ------------------------------------------
 */

typedef struct {
  durable_stream_id_t id;
  long issued, done, total;
  int finished;
} pub_t;

static void pub_issue(pub_t *p);

static void pub_done(int status, int64_t seq, const char *message, void *data) {
  pub_t *p = data;
  (void)seq;
  C.progress++;
  if (status < 0)
    die("durable_stream_publish failed: %s (%s)", message ? message : "",
        durable_err_name(status));
  if (++p->done == p->total)
    p->finished = 1;
  else
    beside_after(p->done);
  pub_issue(p);
}

static void pub_issue(pub_t *p) {
  durable_error_t err = {0};
  while (p->issued < p->total && p->issued - p->done < opt.inflight) {
    char payload[32];
    snprintf(payload, sizeof payload, "{\"i\":%ld}", ++p->issued);
    int rc = durable_stream_publish(client, &p->id, payload, pub_done, p, &err);
    if (rc < 0)
      die("durable_stream_publish refused: %s (%s)", err.message,
          durable_err_name(rc));
  }
}

/* items/s of n publishes to Bench@key, `opt.inflight` in flight, counted
 * when the last sequence is back (the slices beside it taken out). */
static double publish_run(const char *key, long n) {
  pub_t p = {.id = {.ns = "Bench", .key = key}, .total = n};
  double t0 = now_s(), sliced = beside.seconds;
  pub_issue(&p);
  run_until(&C, &p.finished, "publishing");
  return (double)n / (now_s() - t0 - (beside.seconds - sliced));
}

/* ---- consumers that keep up with a producer ------------------------------
 */

/* One consumer of [1]: the stream's own (group NULL) or a group's. */
typedef struct {
  char key[128];
  const char *group;
  char lease_path[400]; /* the node its checkpoint is read from */
  long count;
  int order_ok;
} follower_t;

static struct {
  follower_t f[GROUP_COUNT];
  int n;
  long want;   /* reached once every consumer has handled this many */
  int reached; /* every consumer has */
} fl;

static int follower_key_of(durable_hub_t *hub, char *out, size_t size,
                           void *data) {
  follower_t *f = data;
  (void)hub;
  snprintf(out, size, "%s", f->key);
  return 0;
}

static long followers_min(void) {
  long least = fl.f[0].count;
  for (int i = 1; i < fl.n; i++)
    if (fl.f[i].count < least)
      least = fl.f[i].count;
  return least;
}

static void followers_want(long n) {
  fl.want = n;
  fl.reached = followers_min() >= n;
}

/* Counts, checks the order, and acknowledges at once: what the consumer
 * costs is the runtime's, not the handler's. */
static void follower_handler(durable_hub_t *hub, const durable_item_t *item,
                             durable_reply_t *done, void *data) {
  follower_t *f = data;
  (void)hub;
  C.progress++;
  if (item->sequence != ++f->count)
    f->order_ok = 0;
  durable_reply_ok(done, NULL);
  if (!fl.reached && f->count >= fl.want && followers_min() >= fl.want)
    fl.reached = 1;
}

/* What a run of [1] has running while it publishes: nothing; the
 * stream's own consumer; 3 groups' consumers; or 3 groups whose consumers
 * made them and went (what the append path alone costs with groups: every
 * append looks at them, and nobody acknowledges). */
enum { WITH_NOBODY, WITH_OWN, WITH_GROUPS, WITH_IDLE, KINDS };

/* items/s of n publishes into a fresh stream with `kind` running, the
 * one-row loop in slices beside them (its rows/s into *plain); *lag gets
 * the items the slowest consumer had still to handle when the last
 * sequence came back. */
static double publish_with(int kind, int rep, long n, double *plain,
                           double *lag) {
  char tag[32], hub[64];
  snprintf(tag, sizeof tag, "p%dr%d", kind, rep);
  char(*keys)[128] = owner_keys(tag, 1, "BenchOwner");
  /* one untimed publish makes the stream node (and the group nodes can
   * only be made on a stream that exists) and wakes the owner once */
  publish_run(keys[0], 1);
  durable_error_t err = {0};
  const char *paths[GROUP_COUNT];
  int grouped = kind == WITH_GROUPS || kind == WITH_IDLE;
  fl.n = grouped ? GROUP_COUNT : kind == WITH_OWN ? 1 : 0;
  if (fl.n > 0) {
    durable_hub_t *h;
    durable_stream_id_t id = {.ns = "Bench", .key = keys[0]};
    snprintf(hub, sizeof hub, "client/follow/%s", tag);
    if (durable_mesh_client(M, hub, &h, &err) < 0)
      die("durable_mesh_client: %s", err.message);
    for (int i = 0; i < fl.n; i++) {
      follower_t *f = &fl.f[i];
      *f =
          (follower_t){.group = grouped ? group_names[i] : NULL, .order_ok = 1};
      snprintf(f->key, sizeof f->key, "%s", keys[0]);
      if (f->group == NULL)
        durable_stream_path(&id, f->lease_path, sizeof f->lease_path);
      else if (durable_group_path(&id, f->group, f->lease_path,
                                  sizeof f->lease_path) < 0)
        die("durable_group_path: bad group '%s'", f->group);
      paths[i] = f->lease_path;
      durable_consumer_t cons = {.ns = "Bench",
                                 .key_of = follower_key_of,
                                 .handler = follower_handler,
                                 .data = f,
                                 .group = f->group};
      if (durable_hub_consume(h, &cons, NULL, &err) < 0)
        die("durable_hub_consume: %s", err.message);
    }
    /* caught up before anything is timed: the first item handled (so a
     * group's node was made by its claim) and acknowledged */
    followers_want(1);
    run_until(&C, &fl.reached, "the consumers' first item");
    wait_checkpoints(paths, fl.n, 1);
    if (kind == WITH_IDLE) {
      const char *hubs[1] = {hub};
      recycle_hubs(hubs, 1); /* the groups stay, nobody holds them */
      fl.n = 0;
    }
  }
  beside_start(SLICE, SLICE, 0);
  double rate = publish_run(keys[0], n);
  *plain = beside_stop(NULL);
  *lag = 0;
  if (fl.n > 0) {
    long all = n + 1;
    *lag = (double)(all - followers_min());
    followers_want(all);
    run_until(&C, &fl.reached, "the consumers' last item");
    wait_checkpoints(paths, fl.n, all);
    for (int i = 0; i < fl.n; i++)
      if (!fl.f[i].order_ok || fl.f[i].count != all)
        printf("  WARNING: %s%s%s handled %ld items (of %ld), in order: %s\n",
               keys[0], fl.f[i].group ? " group " : "",
               fl.f[i].group ? fl.f[i].group : "", fl.f[i].count, all,
               fl.f[i].order_ok ? "yes" : "NO");
    const char *hubs[1] = {hub};
    recycle_hubs(hubs, 1); /* the consumers go, their leases released */
  }
  free(keys);
  return rate;
}

static void fig_publish(void) {
  int reps = opt.reps;
  double rate[KINDS][64], plain[KINDS][64], lag[KINDS][64], r_plain[KINDS][64];
  double r_groups[64], r_groups_p[64], r_own[64], r_groups_own[64], r_idle[64];
  static const char *const names[KINDS] = {"no consumer", "its own consumer",
                                           "3 groups", "3 groups, none held"};
  printf("[1] one producer, %ld in flight: %s publishes into one stream with "
         "no consumer,\n    with its own consumer, with %d consumer groups "
         "(running, caught up), and\n    with %d groups nobody holds; %d "
         "runs\n",
         opt.inflight, num((double)sz.publishes), GROUP_COUNT, GROUP_COUNT,
         reps);
  for (int r = 0; r < reps; r++) {
    /* a rotating order: no kind always meets the disk first */
    for (int k = 0; k < KINDS; k++) {
      int kind = (k + r) % KINDS;
      rate[kind][r] =
          publish_with(kind, r, sz.publishes, &plain[kind][r], &lag[kind][r]);
      r_plain[kind][r] = rate[kind][r] / plain[kind][r];
    }
    r_groups[r] = rate[WITH_GROUPS][r] / rate[WITH_NOBODY][r];
    r_groups_p[r] = r_plain[WITH_GROUPS][r] / r_plain[WITH_NOBODY][r];
    r_own[r] = rate[WITH_OWN][r] / rate[WITH_NOBODY][r];
    r_groups_own[r] = rate[WITH_GROUPS][r] / rate[WITH_OWN][r];
    r_idle[r] = rate[WITH_IDLE][r] / rate[WITH_NOBODY][r];
  }
  print_rate(beside.name, plain[WITH_NOBODY], reps, "rows/s");
  for (int kind = WITH_OWN; kind < KINDS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "  ... beside the publishes with %s",
             names[kind]);
    print_rate(label, plain[kind], reps, "rows/s");
  }
  for (int kind = 0; kind < KINDS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "publish, %s", names[kind]);
    print_rate(label, rate[kind], reps, "items/s");
  }
  print_rate("  the stream's consumer behind at the last publish",
             lag[WITH_OWN], reps, "items");
  print_rate("  the slowest group behind at the last publish", lag[WITH_GROUPS],
             reps, "items");
  /* with groups against without: consumed in 3 groups against consumed by
   * the stream's own consumer, and 3 groups nobody holds against none */
  print_ratio("ratio 3 groups / own consumer", r_groups_own, reps, ">= 0.9x");
  print_ratio("ratio 3 groups none held / no consumer", r_idle, reps,
              ">= 0.9x");
  print_ratio("ratio 3 groups / no consumer", r_groups, reps,
              "for information");
  print_ratio("  ... each over the plain loop beside it", r_groups_p, reps,
              "for information");
  print_ratio("ratio own consumer / no consumer", r_own, reps,
              "for information");
  for (int kind = 0; kind < KINDS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "ratio %s / plain 1-row", names[kind]);
    print_ratio(label, r_plain[kind], reps, "no target");
  }
}

/* ---- [2] draining a backlog -----------------------------------------------
 */

typedef struct {
  long left;
  int done;
} published_t;

static void published(int status, int64_t seq, const char *message,
                      void *data) {
  published_t *p = data;
  (void)seq;
  C.progress++;
  if (status < 0)
    die("durable_stream_publish failed: %s (%s)", message ? message : "",
        durable_err_name(status));
  if (--p->left == 0)
    p->done = 1;
}

/* A backlog of `per` items on the stream Bench@key, untimed, as
 * batch_bench writes it: items 1..per-1 as the stream hub writes them,
 * then item `per` by a durable_stream_publish, which makes the stream node
 * with LastSequence `per`. */
static void fill_backlog(const char *key, long per) {
  char items_ns[256], payload[32];
  published_t p = {.left = 1};
  durable_error_t err = {0};
  durable_stream_id_t id = {.ns = "Bench", .key = key};
  durable_stream_items_ns(&id, items_ns, sizeof items_ns);
  fill_items(&C, durable_mesh_store(M), items_ns, 1, per - 1, 1);
  snprintf(payload, sizeof payload, "{\"i\":%ld}", per);
  if (durable_stream_publish(client, &id, payload, published, &p, &err) < 0)
    die("durable_stream_publish refused: %s", err.message);
  run_until(&C, &p.done, "publishing the backlog's last item");
}

/* What drains [2]'s backlog. */
enum { DRAIN_OWN, DRAIN_GROUP, DRAIN_ALL, DRAINS };

/* items/s (all consumers together) of `kind` draining a fresh backlog,
 * with the one-row loop in slices beside it (its rows/s into *plain);
 * each[] gets every consumer's own items/s. */
static double drain_with(int kind, int rep, double *plain, double *each) {
  char tag[32];
  snprintf(tag, sizeof tag, "d%dr%d", kind, rep);
  char(*keys)[128] = owner_keys(tag, 1, "BenchOwner");
  fill_backlog(keys[0], sz.drain);
  int ngroups = kind == DRAIN_ALL ? GROUP_COUNT : kind == DRAIN_GROUP ? 1 : 0;
  if (opt.batch > 0)
    beside_start(BATCH_EVERY, BATCH_ROWS, 0);
  else
    beside_start(DRAIN_EVERY, DRAIN_ROWS, 0);
  double rate = drain_groups(keys, 1, sz.drain, rep, 0, (uint32_t)opt.batch,
                             group_names, ngroups, NULL, each);
  *plain = beside_stop(NULL);
  free(keys);
  return rate;
}

static void fig_drain(void) {
  int reps = opt.reps;
  double rate[DRAINS][64], plain[DRAINS][64], r_plain[DRAINS][64];
  double slowest[64], fastest[64], r_group[64], r_group_p[64], r_slowest[64],
      r_all[64], r_slowest_p[64];
  printf("[2] a backlog of %s items drained by the stream's own consumer, by "
         "one group's,\n    and by %d groups at once (one hub), %s; %d runs\n",
         num((double)sz.drain), GROUP_COUNT,
         opt.batch > 0 ? "batch handlers" : "one item a call", reps);
  for (int r = 0; r < reps; r++) {
    double each[DRAINS][GROUP_COUNT];
    for (int k = 0; k < DRAINS; k++) {
      int kind = (k + r) % DRAINS;
      rate[kind][r] = drain_with(kind, r, &plain[kind][r], each[kind]);
      r_plain[kind][r] = rate[kind][r] / plain[kind][r];
    }
    slowest[r] = fastest[r] = each[DRAIN_ALL][0];
    for (int g = 1; g < GROUP_COUNT; g++) {
      if (each[DRAIN_ALL][g] < slowest[r])
        slowest[r] = each[DRAIN_ALL][g];
      if (each[DRAIN_ALL][g] > fastest[r])
        fastest[r] = each[DRAIN_ALL][g];
    }
    r_group[r] = rate[DRAIN_GROUP][r] / rate[DRAIN_OWN][r];
    r_group_p[r] = r_plain[DRAIN_GROUP][r] / r_plain[DRAIN_OWN][r];
    r_slowest[r] = slowest[r] / rate[DRAIN_OWN][r];
    r_all[r] = rate[DRAIN_ALL][r] / rate[DRAIN_OWN][r];
    r_slowest_p[r] = slowest[r] / plain[DRAIN_ALL][r];
  }
  print_rate(beside.name, plain[DRAIN_OWN], reps, "rows/s");
  print_rate("  ... beside one group's drain", plain[DRAIN_GROUP], reps,
             "rows/s");
  print_rate("  ... beside 3 groups' drains", plain[DRAIN_ALL], reps, "rows/s");
  print_rate("drain, the stream's own consumer", rate[DRAIN_OWN], reps,
             "items/s");
  print_rate("drain, one group", rate[DRAIN_GROUP], reps, "items/s");
  print_rate("drain, 3 groups at once: the slowest group", slowest, reps,
             "items/s");
  print_rate("  ... the fastest group", fastest, reps, "items/s");
  print_rate("  ... all 3 groups together", rate[DRAIN_ALL], reps, "items/s");
  print_ratio("ratio one group / own consumer", r_group, reps, "~1.0x");
  print_ratio("  ... each over the plain loop beside it", r_group_p, reps,
              "~1.0x");
  print_ratio("ratio slowest of 3 groups / own consumer", r_slowest, reps,
              "no target");
  print_ratio("ratio 3 groups together / own consumer", r_all, reps,
              "no target");
  print_ratio("ratio own consumer / plain 1-row", r_plain[DRAIN_OWN], reps,
              "no target");
  print_ratio("ratio one group / plain 1-row", r_plain[DRAIN_GROUP], reps,
              "no target");
  print_ratio("ratio slowest of 3 groups / plain 1-row", r_slowest_p, reps,
              "no target");
  print_ratio("ratio 3 groups together / plain 1-row", r_plain[DRAIN_ALL], reps,
              "no target");
}

/* ---- one store -------------------------------------------------------------
 */

static void run_target(void) {
  memset(&logs, 0, sizeof logs);
  main_open(T->url);
  /* the plain loop's rate, for the header */
  printf("  %-60s %12s rows/s\n", T->plain1_name, num(plain1(sz.plain1)));
  fflush(stdout);
  /* untimed, a warm-up of what every run does (hubs activated, groups
   * made, statements prepared, pages cached): without it the first run
   * measured pays for it (in two runs of [1] at 1,000 publishes its ratio
   * to the plain loop was the lowest of its three on both stores) */
  double ignored_plain, ignored_lag;
  publish_with(WITH_GROUPS, 99, 100, &ignored_plain, &ignored_lag);
  if (want(1))
    fig_publish();
  if (want(2))
    fig_drain();
  main_close();
  printf("  log lines: %ld warnings, %ld errors\n", logs.warn, logs.error);
}

static void run_sqlite(void) {
  target_sqlite("durable-group-bench", run_target);
}

static void run_postgres(const char *url) {
  target_postgres(url, "gbench", run_target);
}

/* ---- main -----------------------------------------------------------------
 */

int main(int argc, char **argv) {
  long items = 0, publishes = 0;
  bench_name = "group_bench";
  bench_usage = usage;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--items") == 0)
      items = parse_long(v, a, 2), i++;
    else if (strcmp(a, "--publishes") == 0)
      publishes = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--inflight") == 0)
      opt.inflight = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--batch") == 0)
      opt.batch = parse_long(v, a, 0), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), opt.reps_given = 1, i++;
    else if (strcmp(a, "--quick") == 0)
      opt.quick = 1;
    else if (strcmp(a, "--figures") == 0 && v)
      opt.figures |= parse_figures(v, 2), i++;
    else if (strcmp(a, "--only") == 0)
      opt.only = parse_only(v), i++;
    else
      other_arg(a);
  }
  if (opt.batch > DURABLE_BATCH_ITEMS_MAX) {
    fprintf(stderr, "group_bench: --batch takes at most %d\n",
            DURABLE_BATCH_ITEMS_MAX);
    return 2;
  }
  if (opt.quick) {
    sz.publishes = 200, sz.drain = 5000, sz.plain1 = 100;
    if (!opt.reps_given)
      opt.reps = 1;
  }
  if (items)
    sz.drain = items;
  if (publishes)
    sz.publishes = publishes;
  if (opt.reps > 64)
    opt.reps = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("group_bench: durable %s, %d consumer groups, medians of %d runs\n",
         DURABLE_VERSION_STRING, GROUP_COUNT, opt.reps);
  run_stores(opt.only, run_sqlite, run_postgres);
  return 0;
}

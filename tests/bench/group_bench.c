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
 *   [3] a host activates --owners dormant owners of a NodeType that
 *       consumes 3 groups of a family none of whose streams exists
 *                                  vs as many of a NodeType with no
 *       consumer (owners/s); and the writes the activation made, counted
 *       from the store's tables: none is the rule (anything: exit 1)
 *
 * Why: a group keeps its lease and checkpoint in a node of its own under
 * the stream node ({stream}/_DurableStreamGroup/{group}), so that its
 * acknowledgements never contend with the stream's appends, which write the
 * stream node.  [1] checks that an append costs no more with groups than
 * without (target >= 0.9x: a stream consumed in 3 groups against one
 * consumed by its own consumer, and 3 groups nobody holds against no
 * consumer at all), [2] that each group drains at the rate of a
 * stream's single consumer (target about 1.0x), and shows what several
 * groups draining at once share.  [3] checks at scale that a consumer makes
 * neither a stream node nor a group node -- only a publish makes a stream,
 * and a group's first claim on one its node -- so that dormant owners
 * cost a host's start no write, and shows what their consumers cost it.
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
 * operation fails or stalls (no progress for STALL_SECONDS), or when [3]
 * finds a write.
 */
#include "stream_figures.h"

#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif

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
  long owners;    /* [3] dormant owners of each run */
} sz = {1000, 50000, 1000, 10000};

static void usage(FILE *f) {
  fprintf(f,
          "usage: group_bench [--only sqlite|postgres] [--reps N] [--quick]\n"
          "                   [--publishes N] [--inflight N] [--items N]\n"
          "                   [--batch N] [--owners N] [--figures 1,2,3]\n"
          "  --publishes N timed publishes of each run of [1] (default 1000)\n"
          "  --inflight N  publishes in flight in [1] (default 1)\n"
          "  --items N     the backlog of [2] (default 50000)\n"
          "  --batch N     [2]'s consumers take up to N items a call (default "
          "0:\n"
          "                one item a call, one acknowledgement each)\n"
          "  --owners N    the dormant owners [3] activates (default 10000)\n"
          "  --reps N      repetitions; medians are printed (default 3)\n"
          "  --quick       small sizes: a smoke run\n"
          "  --figures L   run only these figures (1-3)\n"
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

/* ---- [3] activating dormant owners ----------------------------------------
 */

/* A host's owners of a NodeType that consumes 3 groups of a family none of
 * whose streams exists: a consumer makes no stream node and no group node
 * (only a publish makes a stream, and a group's first claim on a stream
 * that exists its node), so activating them all writes nothing.  [3]
 * counts the writes from the store's own tables, and times the activation
 * against the same owners of a NodeType with no consumer. */
#define QUIET_FAMILY "Hush"
static const char *const quiet_groups[GROUP_COUNT] = {"a", "b", "c"};
enum { QUIET_GROUPS, QUIET_BARE, QUIETS };
static const char *const quiet_types[QUIETS] = {"Quiet", "QuietBare"};
/* the activation is over once the mesh's messages and activations have not
 * moved for this long (after every consumer's look has been answered) */
#define QUIET_MS 250
/* [3]'s untimed warm-up: owners of each kind */
#define QUIET_WARMUP 100

static long quiet_handled; /* items handed to a Hush consumer: none */
static int failures;       /* [3]'s checks that failed: exit 1 at the end */

static void quiet_handler(durable_hub_t *hub, const durable_item_t *item,
                          durable_reply_t *done, void *data) {
  (void)hub, (void)item, (void)data;
  C.progress++;
  quiet_handled++;
  durable_reply_ok(done, NULL);
}

/* The NodeType "Quiet" consumes Hush in the groups a, b, c, each owner its
 * own stream (key_of NULL: the hub's address).  Once per mesh, before the
 * type's first activation. */
static void quiet_declare(void) {
  durable_node_type_t *type = durable_node_type_get(M, quiet_types[0]);
  durable_error_t err = {0};
  if (type == NULL)
    die("durable_node_type_get %s: out of memory", quiet_types[0]);
  for (int g = 0; g < GROUP_COUNT; g++) {
    durable_consumer_t cons = {
        .ns = QUIET_FAMILY, .handler = quiet_handler, .group = quiet_groups[g]};
    if (durable_node_type_consume(type, &cons, &err) < 0)
      die("durable_node_type_consume: %s", err.message);
  }
}

/* The store's rows, read on a connection of its own with SQL (not through
 * the runtime, whose writes are what is counted): every node table
 * (schema.c's list) under a path prefix, and a mark of the whole store's
 * writes (mark_t). */
static const char *const node_tables[] = {"mesh_nodes", "durable_stream_items",
                                          "document_parts", "threads", NULL};

static struct {
  sqlite3 *db;
  PGconn *conn;
  char schema[160]; /* quoted */
} look;

static void look_open(void) {
  if (!T->pg) {
    sq_check(
        NULL,
        sqlite3_open_v2(T->sqlite_file, &look.db, SQLITE_OPEN_READONLY, NULL),
        "open the store file read-only");
    look.schema[0] = 0;
    return;
  }
  look.conn = pg_connect(T->pg_url);
  char *schema =
      PQescapeIdentifier(look.conn, T->partition, strlen(T->partition));
  snprintf(look.schema, sizeof look.schema, "%s.", schema);
  PQfreemem(schema);
}

static void look_close(void) {
  if (look.db)
    sqlite3_close(look.db);
  if (look.conn)
    PQfinish(look.conn);
  memset(&look, 0, sizeof look);
}

/* "SELECT ... FROM t1 ... UNION ALL SELECT ... FROM t2 ...": `each` has
 * two %s, the schema and the table. */
static void union_sql(char *sql, size_t size, const char *each) {
  size_t o = 0;
  for (int t = 0; node_tables[t] && o < size; t++) {
    if (t)
      o += (size_t)snprintf(sql + o, size - o, " UNION ALL ");
    if (o < size)
      o += (size_t)snprintf(sql + o, size - o, each, look.schema,
                            node_tables[t]);
  }
}

typedef struct {
  char *path;
  int64_t version;
} row_t;

/* On SQLite, the newest row of the commit log: the last version written
 * (one per node put, created or updated, anywhere in the file) and the
 * last commit id (one per transaction, a deletes-only one too).  On
 * PostgreSQL, whose versions come from one sequence, the greatest version
 * in the partition's tables and their rows. */
typedef struct {
  int64_t version;
  int64_t other; /* SQLite: the commit id; PostgreSQL: the rows */
} mark_t;

typedef struct {
  row_t *row; /* in path order, bytewise */
  long n, cap;
  mark_t mark;
} snap_t;

static void snap_add(snap_t *s, const char *path, int64_t version) {
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 1024;
    s->row = realloc(s->row, (size_t)s->cap * sizeof *s->row);
  }
  if (s->row == NULL || (s->row[s->n].path = strdup(path)) == NULL)
    die("out of memory");
  s->row[s->n++].version = version;
}

static void snap_free(snap_t *s) {
  for (long i = 0; i < s->n; i++)
    free(s->row[i].path);
  free(s->row);
  memset(s, 0, sizeof *s);
}

/* The store's mark now. */
static mark_t look_mark(void) {
  char sql[2048], parts[1800];
  mark_t m;
  if (!T->pg) {
    sqlite3_stmt *st;
    sq_check(look.db,
             sqlite3_prepare_v2(look.db,
                                "SELECT coalesce(max(version), 0), "
                                "coalesce(max(commit_id), 0) FROM "
                                "durable_commits",
                                -1, &st, NULL),
             "prepare the commit log's mark");
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
      sq_check(look.db, rc, "read the commit log's mark");
    m.version = sqlite3_column_int64(st, 0);
    m.other = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    return m;
  }
  union_sql(parts, sizeof parts,
            "SELECT max(version) AS v, count(*) AS n FROM %s%s");
  snprintf(sql, sizeof sql,
           "SELECT coalesce(max(v), 0), coalesce(sum(n), 0) FROM (%s) m",
           parts);
  PGresult *res = PQexec(look.conn, sql);
  pg_ok(look.conn, res, "read the partition's mark");
  m.version = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
  m.other = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
  PQclear(res);
  return m;
}

static long at_least(int64_t a, int64_t b) {
  return (long)(a > b ? a : b);
}

/* The store's writes since mark `m`, or at least how many: on SQLite, the
 * nodes written and the transactions since, in the whole file; on
 * PostgreSQL, the partition's rows written since (k, versions above m's)
 * and the old rows rewritten or deleted (m's rows less those untouched). */
static long look_since(mark_t m) {
  if (!T->pg) {
    mark_t now = look_mark();
    return at_least(now.version - m.version, now.other - m.other);
  }
  char sql[2048], parts[1800], arg[32];
  union_sql(parts, sizeof parts, "SELECT version FROM %s%s");
  snprintf(sql, sizeof sql,
           "SELECT count(*) FILTER (WHERE version > $1::bigint), count(*) "
           "FROM (%s) w",
           parts);
  snprintf(arg, sizeof arg, "%lld", (long long)m.version);
  const char *params[1] = {arg};
  PGresult *res = PQexecParams(look.conn, sql, 1, NULL, params, NULL, NULL, 0);
  pg_ok(look.conn, res, "count the partition's rows written");
  int64_t k = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
  int64_t rows = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
  PQclear(res);
  return at_least(k, m.other - (rows - k));
}

/* Every row whose path is in [lo, hi), in path order, and the mark. */
static void snap_take(snap_t *s, const char *lo, const char *hi) {
  char sql[2048], parts[1800];
  memset(s, 0, sizeof *s);
  s->mark = look_mark();
  union_sql(parts, sizeof parts,
            T->pg ? "SELECT path, version FROM %s%s WHERE path >= $1 AND "
                    "path < $2"
                  : "SELECT path, version FROM %s%s WHERE path >= ?1 AND "
                    "path < ?2");
  if (!T->pg) {
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "%s ORDER BY 1", parts);
    sq_check(look.db, sqlite3_prepare_v2(look.db, sql, -1, &st, NULL),
             "prepare the prefix's rows");
    sqlite3_bind_text(st, 1, lo, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, hi, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      snap_add(s, (const char *)sqlite3_column_text(st, 0),
               sqlite3_column_int64(st, 1));
    if (rc != SQLITE_DONE)
      sq_check(look.db, rc, "read the prefix's rows");
    sqlite3_finalize(st);
    return;
  }
  snprintf(sql, sizeof sql,
           "SELECT path, version FROM (%s) r ORDER BY path COLLATE \"C\"",
           parts);
  const char *params[2] = {lo, hi};
  PGresult *res = PQexecParams(look.conn, sql, 2, NULL, params, NULL, NULL, 0);
  pg_ok(look.conn, res, "read the prefix's rows");
  for (int i = 0; i < PQntuples(res); i++)
    snap_add(s, PQgetvalue(res, i, 0),
             strtoll(PQgetvalue(res, i, 1), NULL, 10));
  PQclear(res);
}

/* The writes between two snapshots of one prefix: its rows created,
 * changed and deleted, and the whole store's count since before's mark
 * (look_since); the greater of the two.  Anything is a WARNING, and a
 * failure. */
static long writes_between(const snap_t *a, const snap_t *b, const char *when,
                           const char *tag) {
  long created = 0, changed = 0, deleted = 0, i = 0, j = 0;
  const char *first = NULL;
  while (i < a->n || j < b->n) {
    int c = i == a->n   ? 1
            : j == b->n ? -1
                        : strcmp(a->row[i].path, b->row[j].path);
    if (c < 0) {
      deleted++, first = first ? first : a->row[i].path, i++;
    } else if (c > 0) {
      created++, first = first ? first : b->row[j].path, j++;
    } else {
      if (a->row[i].version != b->row[j].version)
        changed++, first = first ? first : b->row[j].path;
      i++, j++;
    }
  }
  long under = created + changed + deleted, store = look_since(a->mark);
  long writes = under > store ? under : store;
  if (writes > 0) {
    failures++;
    printf("  WARNING: %s %s wrote: under %s/%s/ %ld created, %ld changed, "
           "%ld deleted (the first %s); in the whole %s %ld\n",
           tag, when, T->partition, tag, created, changed, deleted,
           first ? first : "-", T->pg ? "partition" : "store", store);
  }
  return writes;
}

/* ---- [3]: waiting -------------------------------------------------------- */

typedef struct {
  long left;
  int done;
} waiting_t;

static void activated(int status, const char *message, void *data) {
  waiting_t *w = data;
  C.progress++;
  if (status < 0)
    die("durable_mesh_activate failed: %s (%s)", message ? message : "",
        durable_err_name(status));
  if (--w->left == 0)
    w->done = 1;
}

static void looked(const durable_result_t *r, void *data) {
  waiting_t *w = data;
  C.progress++;
  if (r->status < 0)
    die("durable_store_exists: %s", r->message ? r->message : "");
  w->done = 1;
}

typedef struct {
  uv_timer_t timer;
  uint64_t messages, activations;
  double since;
  int done;
} quiet_t;

static void quiet_tick(uv_timer_t *t) {
  quiet_t *q = t->data;
  durable_mesh_stats_t s;
  durable_mesh_stats(M, &s);
  if (s.messages != q->messages || s.activations != q->activations) {
    q->messages = s.messages, q->activations = s.activations;
    q->since = now_s();
    C.progress++;
  } else if (now_s() - q->since >= QUIET_MS / 1000.0) {
    q->done = 1;
    uv_timer_stop(t);
  }
}

/* Until the mesh's messages and activations have not moved for QUIET_MS. */
static void wait_quiet(void) {
  quiet_t q = {.since = now_s()};
  durable_mesh_stats_t s;
  durable_mesh_stats(M, &s);
  q.messages = s.messages, q.activations = s.activations;
  uv_timer_init(&C.loop, &q.timer);
  q.timer.data = &q;
  uv_timer_start(&q.timer, quiet_tick, 10, 10);
  run_until(&C, &q.done, "the mesh going quiet");
  uv_close((uv_handle_t *)&q.timer, NULL);
  uv_run(&C.loop, UV_RUN_NOWAIT);
}

/* One run of [3]: n fresh owners of `kind` (written untimed, 1,000 a
 * transaction), all activated at once; owners/s from the first
 * durable_mesh_activate until every hub is Started and a read issued after
 * the last has been answered (the store's one reader answers in order, so
 * every consumer's look for its stream, issued by its init step, has
 * been); then the mesh going quiet, the RSS grown per owner into *bytes,
 * the writes counted, and the owners recycled (their writes counted too).
 * rep < 0: the warm-up. */
static double quiet_run(int kind, int rep, long n, long *writes,
                        long *left_writes, long *activations, double *bytes) {
  char tag[32], lo[200], hi[200];
  if (rep < 0)
    snprintf(tag, sizeof tag, "q%dw", kind);
  else
    snprintf(tag, sizeof tag, "q%dr%d", kind, rep);
  char(*keys)[128] = owner_keys(tag, (int)n, quiet_types[kind]);
  snprintf(lo, sizeof lo, "%s/%s/", T->partition, tag);
  snprintf(hi, sizeof hi, "%s/%s0", T->partition, tag); /* '/' + 1 */
  snap_t before, after, gone;
  snap_take(&before, lo, hi);
  if (before.n != n)
    die("%s: %ld rows under %s, %ld owners written", tag, before.n, lo, n);
  durable_mesh_stats_t s0, s1;
  durable_mesh_stats(M, &s0);
#ifdef __GLIBC__
  malloc_trim(0); /* what earlier runs freed goes back: RSS grows afresh */
#endif
  long rss0 = rss_kib();
  durable_error_t err = {0};
  waiting_t all = {.left = n}, look_done = {0};
  double t0 = now_s();
  for (long i = 0; i < n; i++)
    if (durable_mesh_activate(M, keys[i], activated, &all, &err) < 0)
      die("durable_mesh_activate: %s", err.message);
  run_until(&C, &all.done, "activating the owners");
  if (durable_store_exists(durable_mesh_store(M), NULL, keys[0], looked,
                           &look_done, &err) < 0)
    die("durable_store_exists: %s", err.message);
  run_until(&C, &look_done.done, "the consumers' looks for their streams");
  double rate = (double)n / (now_s() - t0);

  wait_quiet();
  *bytes = (double)(rss_kib() - rss0) * 1024 / (double)n;
  durable_mesh_stats(M, &s1);
  *activations = (long)(s1.activations - s0.activations);
  if (*activations != n) {
    failures++;
    printf("  WARNING: %s: %ld hubs activated for %ld owners\n", tag,
           *activations, n);
  }
  snap_take(&after, lo, hi);
  *writes = writes_between(&before, &after, "activation", tag);
  const char **addresses = calloc((size_t)n, sizeof *addresses);
  if (addresses == NULL)
    die("out of memory");
  for (long i = 0; i < n; i++)
    addresses[i] = keys[i];
  recycle_hubs(addresses, (int)n);
  wait_quiet();
  snap_take(&gone, lo, hi);
  *left_writes = writes_between(&after, &gone, "recycle", tag);
  free(addresses);
  snap_free(&before);
  snap_free(&after);
  snap_free(&gone);
  free(keys);
  return rate;
}

static void fig_quiet(void) {
  int reps = opt.reps;
  double rate[QUIETS][64], writes[QUIETS][64], left[QUIETS][64],
      hubs[QUIETS][64], bytes[QUIETS][64], ratio[64], cost[64], ignored;
  long all_writes = 0, w, lw, act;
  static const char *const names[QUIETS] = {"3 groups", "no consumer"};
  printf("[3] a host activates %s dormant owners of a NodeType consuming %d "
         "groups of a\n    family none of whose streams exists, and as many "
         "of a NodeType with no\n    consumer; %d runs\n",
         num((double)sz.owners), GROUP_COUNT, reps);
  quiet_declare();
  look_open();
  /* untimed, a warm-up of both kinds (statements prepared, pages cached);
   * its writes are counted as well */
  for (int kind = 0; kind < QUIETS; kind++) {
    quiet_run(kind, -1, sz.owners < QUIET_WARMUP ? sz.owners : QUIET_WARMUP, &w,
              &lw, &act, &ignored);
    all_writes += w;
  }
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < QUIETS; k++) {
      int kind = (k + r) % QUIETS;
      rate[kind][r] =
          quiet_run(kind, r, sz.owners, &w, &lw, &act, &bytes[kind][r]);
      writes[kind][r] = (double)w, left[kind][r] = (double)lw;
      hubs[kind][r] = (double)act;
      all_writes += w;
    }
    ratio[r] = rate[QUIET_GROUPS][r] / rate[QUIET_BARE][r];
    cost[r] = (1 / rate[QUIET_GROUPS][r] - 1 / rate[QUIET_BARE][r]) * 1e6;
  }
  look_close();
  for (int kind = 0; kind < QUIETS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "activate, %s (%s)", names[kind],
             quiet_types[kind]);
    print_rate(label, rate[kind], reps, "owners/s");
  }
  print_rate("  ... what 3 dormant group consumers add to an owner", cost, reps,
             "us");
  print_ratio("ratio 3 groups / no consumer", ratio, reps, "for information");
  for (int kind = 0; kind < QUIETS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "memory per active owner, %s", names[kind]);
    print_rate(label, bytes[kind], reps, "bytes");
  }
  for (int kind = 0; kind < QUIETS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "hubs activated, %s", names[kind]);
    print_rate(label, hubs[kind], reps, "hubs");
  }
  for (int kind = 0; kind < QUIETS; kind++) {
    char label[96];
    snprintf(label, sizeof label, "writes during activation, %s", names[kind]);
    print_rate(label, writes[kind], reps, "writes");
    snprintf(label, sizeof label, "  ... as they were recycled, %s",
             names[kind]);
    print_rate(label, left[kind], reps, "writes");
  }
  if (quiet_handled > 0) {
    failures++;
    printf("  WARNING: %ld items handed to a %s consumer\n", quiet_handled,
           QUIET_FAMILY);
  }
  printf("  writes during activation: %ld%s\n", all_writes,
         all_writes ? "   WARNING: dormant owners wrote to the store" : "");
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
  if (want(1) || want(2))
    publish_with(WITH_GROUPS, 99, 100, &ignored_plain, &ignored_lag);
  if (want(1))
    fig_publish();
  if (want(2))
    fig_drain();
  if (want(3))
    fig_quiet();
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
  long items = 0, publishes = 0, owners = 0;
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
    else if (strcmp(a, "--owners") == 0)
      owners = parse_long(v, a, 1), i++;
    else if (strcmp(a, "--batch") == 0)
      opt.batch = parse_long(v, a, 0), i++;
    else if (strcmp(a, "--reps") == 0)
      opt.reps = (int)parse_long(v, a, 1), opt.reps_given = 1, i++;
    else if (strcmp(a, "--quick") == 0)
      opt.quick = 1;
    else if (strcmp(a, "--figures") == 0 && v)
      opt.figures |= parse_figures(v, 3), i++;
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
    sz.publishes = 200, sz.drain = 5000, sz.plain1 = 100, sz.owners = 1000;
    if (!opt.reps_given)
      opt.reps = 1;
  }
  if (items)
    sz.drain = items;
  if (publishes)
    sz.publishes = publishes;
  if (owners)
    sz.owners = owners;
  if (opt.reps > 64)
    opt.reps = 64;
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("group_bench: durable %s, %d consumer groups, medians of %d runs\n",
         DURABLE_VERSION_STRING, GROUP_COUNT, opt.reps);
  run_stores(opt.only, run_sqlite, run_postgres);
  if (failures > 0)
    printf("\ngroup_bench: %d check%s of [3] failed (WARNING above)\n",
           failures, failures == 1 ? "" : "s");
  return failures > 0 ? 1 : 0;
}

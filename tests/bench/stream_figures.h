/*
 * stream_figures.h: what the C benches of durable streams share
 * (stream_figures.c; stream_bench, batch_bench, group_bench), on top of
 * bench.h: the store under test with its plain loops (and the one-row loop
 * in slices beside a durable run), the mesh every figure runs on with its
 * log counts, owner nodes, waiting for the streams' (and consumer groups')
 * checkpoints, letting consumers go, printing a figure, and running a Lua
 * figure in a `durable lua` subprocess.
 *
 * These programs measure one store at a time on one loop, so this keeps
 * that store and that loop in globals (T, C, M, client) rather than pass
 * them to every helper.
 */
#ifndef DURABLE_STREAM_FIGURES_H
#define DURABLE_STREAM_FIGURES_H

#include "bench.h"

/* Streams of the many-stream runs, and namespaces of the plain loop of the
 * same rows (the printed labels say 64). */
#define SPREAD 64

/* ---- the store under test -------------------------------------------------
 */

typedef struct {
  const char *label;     /* "SQLite" / "PostgreSQL" */
  const char *url;       /* store URL */
  const char *partition; /* first path segment of everything written */
  int pg;
  plain_sqlite_t *psq;
  plain_pg_t *ppg;
  const char *plain1_name, *plain100_name, *plain100s_name;
  /* the raw read */
  const char *sqlite_file;
  const char *pg_url;
} target_t;

extern target_t *T;

/* run() with T on a fresh SQLite file in a new temporary folder
 * $TMPDIR/PREFIX.XXXXXX (partition "Bench"), its plain loops on a file
 * beside it; the folder is removed afterwards. */
void target_sqlite(const char *prefix, void (*run)(void));
/* run() with T on the PostgreSQL database at url, under a fresh partition
 * TAG_<time>_<pid>, its plain loops in the schema {partition}_plain. */
void target_postgres(const char *url, const char *tag, void (*run)(void));

/* Rows/s of the plain loops of T, each run under a namespace of its own:
 * n one-row commits; n rows 100 per commit; n rows per_commit per commit
 * spread round-robin over `spread` namespaces (plain_sqlite_spread). */
double plain1(long n);
double plain100(long n);
double plain_spread(long n, int per_commit, int spread);
/* plain_spread(n, 100, SPREAD): the rows of the SPREAD-stream runs. */
double plain100s(long n);

/* The one-row loop in slices beside a durable run: after every `every`
 * items the run pauses on the loop while the plain loop commits `rows`
 * rows.  A shared machine's disk changes pace from one second to the next,
 * by half and more; a plain loop run before the durable one measured
 * another disk, and the ratio of two such runs swung from 0.5x to 0.95x.
 * In slices, both take their turns on the same disk, and the time of the
 * slices (beside.seconds) is taken out of the durable run's. */
extern struct beside_s {
  long every, rows; /* every 0: no slices */
  long next;        /* the item count of the next slice */
  int appends;      /* each slice also runs the append's rows (SQLite) */
  long done;        /* rows of the one-row loop so far */
  double seconds, appends_seconds;
  char name[96]; /* "plain loop, 1 row/commit, R rows after every E items" */
} beside;

/* Start slicing (appends: each slice also runs plain_sqlite_appends, on
 * SQLite). */
void beside_start(long every, long rows, int appends);
/* After the durable run's item `n` (counted from 1; a caller may move it
 * on by many): the slices that are due. */
void beside_after(long n);
/* Stop slicing; the rows/s of the plain loop in its slices (a run too
 * short for one gets one now), and of the appends' loop in *appends. */
double beside_stop(double *appends);

/* ---- the mesh ------------------------------------------------------------ */

extern ctx_t C; /* the loop everything runs on */
extern durable_mesh_t *M;
extern durable_hub_t *client; /* "client/bench", for publishing */
/* Warning and error log lines and "deadlock detected" seen (log_line
 * counts them, and prints the first 20 that DURABLE_LOG lets through). */
extern struct bench_logs_s { long warn, error, deadlock, printed; } logs;

void log_line(durable_log_level_t level, const char *line, void *data);
/* C, a mesh M on url with log_line, and the client hub. */
void main_open(const char *url);
void main_close(void);

/* Owner nodes keys[0..n-1] of NodeType `type`. */
void put_owners(durable_store_t *store, char (*keys)[128], int n,
                const char *type);
/* n keys {partition}/{tag}/o{i} (to free), with their owner nodes of
 * NodeType `type`. */
char (*owner_keys(const char *tag, int n, const char *type))[128];

/* Wait until the node at every paths[i] -- a stream node, or a consumer
 * group's -- says Checkpoint >= want (one after the other, looking again
 * every millisecond). */
void wait_checkpoints(const char *const *paths, int n, long want);
/* durable_mesh_recycle every hub addresses[0..n-1] and wait: their
 * consumers release their leases. */
void recycle_hubs(const char *const *addresses, int n);

/* ---- draining a backlog ---------------------------------------------------
 */

typedef struct drain_s drain_t;
/* One consumer of a drain (a stream's own, or one of its groups'), and
 * its data. */
typedef struct {
  drain_t *d;
  char key[128];  /* the owner: the stream is Bench@key */
  char path[256]; /* the stream node */
  char hub[128];  /* the client hub that consumes it */
  long count, want;
  long calls;   /* handler calls (with a batch handler: the batches) */
  int order_ok; /* every item came as the next sequence */
  int effect;   /* the handler commits one node write with each ack */
  char effect_path[256];
  const char *group; /* NULL: the stream's own consumer; else its group */
  /* where its checkpoint is read: `path`, or the group's node */
  char lease_path[400];
  /* now_s() and beside.seconds when its last item was handled */
  double done_at, done_sliced;
} dstream_t;

/* A consumer's key_of: the dstream_t's key. */
int drain_key_of(durable_hub_t *hub, char *out, size_t size, void *data);

/* items/s of consumers on `n` client hubs draining the backlog of `per`
 * items each on streams Bench@keys[i], from the first durable_hub_consume
 * until every stream node's Checkpoint says all are acknowledged (the
 * slices of the plain loop beside it taken out).  The item handler counts,
 * checks the order, calls beside_after and finishes at once: with `effect`
 * by durable_reply_commit of one put of {key}/_Tally, else
 * durable_reply_ok.  Afterwards the hubs are recycled (their leases
 * released). */
double drain_run(char (*keys)[128], int n, long per, int rep, int effect);
/* drain_run with a batch handler taking up to `batch` items a call (with
 * `effect`, one put per batch); the handler calls of all streams go to
 * *calls (may be NULL). */
double drain_batches(char (*keys)[128], int n, long per, int rep, int effect,
                     uint32_t batch, long *calls);
/* drain_batches by `ngroups` consumer groups groups[0..ngroups-1] of each
 * stream at once, all on the stream's one client hub, each group draining
 * the whole backlog (ngroups 0: the stream's own consumer, which is
 * drain_batches).  Timed until every group's node says Checkpoint >= per;
 * returns the items all of them handled per second.  each[] (may be NULL)
 * gets every consumer's own items/s, stream by stream and group by group,
 * until its last item's handler call. */
double drain_groups(char (*keys)[128], int n, long per, int rep, int effect,
                    uint32_t batch, const char *const *groups, int ngroups,
                    long *calls, double *each);

/* ---- printing ----------------------------------------------------------- */

void print_rate(const char *label, const double *v, int n, const char *unit);
void print_ratio(const char *label, const double *v, int n, const char *target);

/* ---- Lua figures -------------------------------------------------------- */

/* The `durable` command next to this binary (../../durable from
 * tests/bench), or `fallback` when there is none. */
const char *find_durable(const char *fallback);
/* Run `durable lua SCRIPT ARGS...` (args NULL-terminated) and return the
 * number it prints first on stdout (items/s); dies when it fails or prints
 * none.  An alarm bounds a subprocess that hangs. */
double lua_figure(const char *durable, const char *script,
                  const char *const *args);
/* The same, for the first `count` numbers it prints (the first > 0). */
void lua_numbers(const char *durable, const char *script,
                 const char *const *args, double *out_values, int count);

#endif

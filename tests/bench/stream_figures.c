/*
 * stream_figures.c: what the C benches of durable streams share (see
 * stream_figures.h): the store under test and its plain loops, the mesh
 * with its log counts, owners, checkpoints, recycling, printing and the
 * Lua figures' subprocess.
 */
#include "stream_figures.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the store under test -------------------------------------------------
 */

target_t *T;
static long plain_runs; /* a fresh namespace per plain run */

void target_sqlite(const char *prefix, void (*run)(void)) {
  const char *dir = tmpdir_make(prefix);
  char file[600], url[640];
  plain_sqlite_t plain = {0};
  plain_sqlite_start(&plain, dir, file, sizeof file, url, sizeof url);
  target_t t = {.label = "SQLite",
                .url = url,
                .partition = "Bench",
                .psq = &plain,
                .plain1_name = "plain sqlite loop, 1 row/commit",
                .plain100_name = "plain sqlite loop, 100 rows/commit",
                .plain100s_name =
                    "plain sqlite loop, 100 rows/commit over 64 namespaces",
                .sqlite_file = file};
  T = &t;
  plain_runs = 0;
  run();
  T = NULL;
  plain_sqlite_close(&plain);
  tmpdir_remove();
}

void target_postgres(const char *url, const char *tag, void (*run)(void)) {
  char partition[64];
  fresh_partition(tag, partition, sizeof partition);
  plain_pg_t plain = {0};
  plain_pg_start(&plain, url, partition);
  target_t t = {
      .label = "PostgreSQL",
      .url = url,
      .partition = partition,
      .pg = 1,
      .ppg = &plain,
      .plain1_name = "plain libpq loop, 1 row/commit",
      .plain100_name = "plain libpq loop, 100-row INSERT/commit",
      .plain100s_name =
          "plain libpq loop, 100-row INSERT/commit over 64 namespaces",
      .pg_url = url};
  T = &t;
  plain_runs = 0;
  run();
  T = NULL;
  plain_pg_close(&plain);
}

double plain1(long n) {
  char ns[128];
  snprintf(ns, sizeof ns, "plain1/r%ld", plain_runs++);
  return T->pg ? plain_pg_rows(T->ppg, ns, n)
               : plain_sqlite_rows(T->psq, ns, n);
}

double plain100(long n) {
  char ns[128];
  snprintf(ns, sizeof ns, "plain100/r%ld", plain_runs++);
  return T->pg ? plain_pg_batch(T->ppg, ns, n, 100)
               : plain_sqlite_batch(T->psq, ns, n, 100);
}

double plain_spread(long n, int per_commit, int spread) {
  char ns[128];
  snprintf(ns, sizeof ns, "plain%dx%d/r%ld", per_commit, spread, plain_runs++);
  return T->pg ? plain_pg_spread(T->ppg, ns, n, per_commit, spread)
               : plain_sqlite_spread(T->psq, ns, n, per_commit, spread);
}

double plain100s(long n) {
  return plain_spread(n, 100, SPREAD);
}

struct beside_s beside;

void beside_start(long every, long rows, int appends) {
  beside.every = every, beside.rows = rows, beside.next = every;
  beside.done = 0, beside.seconds = 0;
  beside.appends = appends && !T->pg, beside.appends_seconds = 0;
  snprintf(beside.name, sizeof beside.name,
           "plain loop, 1 row/commit, %ld rows after every %ld items", rows,
           every);
}

static void beside_slice(void) {
  double t0 = now_s();
  plain1(beside.rows);
  double t1 = now_s();
  beside.done += beside.rows;
  if (beside.appends) {
    char ns[128];
    snprintf(ns, sizeof ns, "plainappend/r%ld", plain_runs++);
    plain_sqlite_appends(T->psq, ns, beside.rows);
    beside.appends_seconds += now_s() - t1;
  }
  beside.seconds += now_s() - t0;
}

void beside_after(long n) {
  while (beside.every > 0 && n >= beside.next) {
    beside_slice();
    beside.next += beside.every;
  }
}

double beside_stop(double *appends) {
  if (beside.done == 0)
    beside_slice();
  beside.every = 0;
  double appends_seconds = beside.appends ? beside.appends_seconds : 0;
  if (appends)
    *appends = appends_seconds > 0 ? (double)beside.done / appends_seconds : 0;
  return (double)beside.done / (beside.seconds - appends_seconds);
}

/* ---- the mesh ------------------------------------------------------------ */

ctx_t C;
durable_mesh_t *M;
durable_hub_t *client;
struct bench_logs_s logs;

void log_line(durable_log_level_t level, const char *line, void *data) {
  (void)data;
  if (strstr(line, "deadlock detected"))
    logs.deadlock++;
  if (level == DURABLE_LOG_ERROR)
    logs.error++;
  else if (level == DURABLE_LOG_WARN)
    logs.warn++;
  /* warnings and errors (what DURABLE_LOG lets through): the first 20 */
  if (level <= DURABLE_LOG_WARN && level <= durable__log_threshold() &&
      logs.printed++ < 20)
    fprintf(stderr, "  log: %s\n", line);
}

void main_open(const char *url) {
  durable_error_t err = {0};
  ctx_init(&C);
  M = mesh_open(&C, url, log_line);
  C.store = NULL; /* the mesh owns its store */
  if (durable_mesh_client(M, "client/bench", &client, &err) < 0)
    die("durable_mesh_client: %s", err.message);
  durable_hub_ref(client);
}

void main_close(void) {
  durable_hub_unref(client);
  mesh_close(&C, M);
  M = NULL;
  ctx_finish(&C);
}

void put_owners(durable_store_t *store, char (*keys)[128], int n,
                const char *type) {
  durable_write_t *w = calloc((size_t)n, sizeof *w);
  if (w == NULL)
    die("out of memory");
  for (int i = 0; i < n; i++)
    w[i] = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                             .path = keys[i],
                             .node_type = type,
                             .content = "{}"};
  write_nodes(&C, store, w, (size_t)n);
  free(w);
}

char (*owner_keys(const char *tag, int n, const char *type))[128] {
  char(*keys)[128] = calloc((size_t)n, sizeof *keys);
  if (keys == NULL)
    die("out of memory");
  for (int i = 0; i < n; i++)
    snprintf(keys[i], sizeof keys[i], "%s/%s/o%d", T->partition, tag, i);
  put_owners(durable_mesh_store(M), keys, n, type);
  return keys;
}

typedef struct {
  const char *const *paths;
  int n, checked, finished;
  long want;
  uv_timer_t timer;
} checkpoints_t;

static void checkpoint_read(checkpoints_t *k);

static void checkpoint_timer_cb(uv_timer_t *t) {
  checkpoint_read(t->data);
}

static void checkpoint_got(const durable_result_t *r, void *data) {
  checkpoints_t *k = data;
  C.progress++;
  if (r->status < 0)
    die("reading %s: %s", k->paths[k->checked], r->message ? r->message : "");
  const char *cp =
      r->node->content ? strstr(r->node->content, "\"Checkpoint\":") : NULL;
  long checkpoint = cp ? strtol(cp + 13, NULL, 10) : -1;
  if (checkpoint >= k->want && ++k->checked == k->n) {
    k->finished = 1;
    return;
  }
  if (checkpoint >= k->want)
    checkpoint_read(k); /* the next node */
  else                  /* not yet: look again in a millisecond */
    uv_timer_start(&k->timer, checkpoint_timer_cb, 1, 0);
}

/* Read node k->checked (a stream's, or a consumer group's). */
static void checkpoint_read(checkpoints_t *k) {
  durable_error_t err = {0};
  if (durable_store_get(durable_mesh_store(M), NULL, k->paths[k->checked],
                        checkpoint_got, k, &err) < 0)
    die("durable_store_get: %s", err.message);
}

void wait_checkpoints(const char *const *paths, int n, long want) {
  checkpoints_t k = {.paths = paths, .n = n, .want = want};
  if (n <= 0)
    return;
  uv_timer_init(&C.loop, &k.timer);
  k.timer.data = &k;
  checkpoint_read(&k);
  run_until(&C, &k.finished, "waiting for the checkpoints");
  uv_close((uv_handle_t *)&k.timer, NULL);
  uv_run(&C.loop, UV_RUN_NOWAIT);
}

typedef struct {
  long left;
  int done;
} recycle_t;

static void recycled_cb(int status, const char *message, void *data) {
  recycle_t *rc = data;
  C.progress++;
  if (status < 0)
    printf("  note: recycle failed: %s\n", message ? message : "");
  if (--rc->left == 0)
    rc->done = 1;
}

void recycle_hubs(const char *const *addresses, int n) {
  recycle_t rc = {.left = n};
  durable_error_t err = {0};
  if (n <= 0)
    return;
  for (int i = 0; i < n; i++)
    if (durable_mesh_recycle(M, addresses[i], recycled_cb, &rc, &err) < 0)
      die("durable_mesh_recycle: %s", err.message);
  run_until(&C, &rc.done, "recycling the consumers");
}

/* ---- draining a backlog ---------------------------------------------------
 */

struct drain_s {
  long handled, want;
  int all_handled;
};

int drain_key_of(durable_hub_t *hub, char *out, size_t size, void *data) {
  dstream_t *s = data;
  (void)hub;
  snprintf(out, size, "%s", s->key);
  return 0;
}

/* Finish a handler call that took the items up to `last`: with the effect
 * a real consumer writes (one node saying how far it applied, in the
 * acknowledgement's commit), or at once. */
static void drain_reply(dstream_t *s, int64_t last, durable_reply_t *done) {
  if (s->effect) {
    char content[48];
    snprintf(content, sizeof content, "{\"applied\":%lld}", (long long)last);
    durable_write_t w = {.kind = DURABLE_WRITE_PUT,
                         .path = s->effect_path,
                         .node_type = "BenchTally",
                         .content = content};
    durable_error_t err = {0};
    if (durable_reply_commit(done, NULL, &w, 1, &err) < 0)
      die("durable_reply_commit: %s", err.message);
  } else {
    durable_reply_ok(done, NULL);
  }
}

/* After a call that handled k items: done, or the slices due. */
static void drain_handled(dstream_t *s, size_t k) {
  s->calls++;
  if (s->count >= s->want && s->done_at == 0)
    s->done_at = now_s(), s->done_sliced = beside.seconds;
  s->d->handled += (long)k;
  if (s->d->handled >= s->d->want)
    s->d->all_handled = 1;
  else
    beside_after(s->d->handled);
}

static void drain_handler(durable_hub_t *hub, const durable_item_t *item,
                          durable_reply_t *done, void *data) {
  dstream_t *s = data;
  (void)hub;
  C.progress++;
  if (item->sequence != ++s->count)
    s->order_ok = 0;
  drain_reply(s, item->sequence, done);
  drain_handled(s, 1);
}

static void drain_batch_handler(durable_hub_t *hub, const durable_item_t *items,
                                size_t count, durable_reply_t *done,
                                void *data) {
  dstream_t *s = data;
  (void)hub;
  C.progress++;
  for (size_t i = 0; i < count; i++)
    if (items[i].sequence != ++s->count)
      s->order_ok = 0;
  drain_reply(s, items[count - 1].sequence, done);
  drain_handled(s, count);
}

double drain_groups(char (*keys)[128], int n, long per, int rep, int effect,
                    uint32_t batch, const char *const *groups, int ngroups,
                    long *calls, double *each) {
  int g = ngroups > 0 ? ngroups : 1; /* consumers per stream */
  int nc = n * g;
  drain_t d = {.want = per * nc};
  dstream_t *s = calloc((size_t)nc, sizeof *s);
  const char **paths = calloc((size_t)nc, sizeof *paths);
  const char **hubs = calloc((size_t)n, sizeof *hubs);
  if (s == NULL || paths == NULL || hubs == NULL)
    die("out of memory");
  for (int c = 0; c < nc; c++) {
    int i = c / g;
    const char *group = ngroups > 0 ? groups[c % g] : NULL;
    s[c] = (dstream_t){
        .d = &d, .want = per, .order_ok = 1, .effect = effect, .group = group};
    snprintf(s[c].key, sizeof s[c].key, "%s", keys[i]);
    /* each group's effect in a node of its own: they are independent */
    snprintf(s[c].effect_path, sizeof s[c].effect_path, "%s/_Tally%s%s",
             keys[i], group ? "_" : "", group ? group : "");
    durable_stream_id_t id = {.ns = "Bench", .key = s[c].key};
    durable_stream_path(&id, s[c].path, sizeof s[c].path);
    if (group == NULL)
      snprintf(s[c].lease_path, sizeof s[c].lease_path, "%s", s[c].path);
    else if (durable_group_path(&id, group, s[c].lease_path,
                                sizeof s[c].lease_path) < 0)
      die("durable_group_path: bad group '%s'", group);
    /* the stream's own consumer keeps the hub names drain_batches always
     * had; groups get theirs */
    if (ngroups > 0)
      snprintf(s[c].hub, sizeof s[c].hub, "client/drain/r%d_n%d_%d_e%d_b%u_g%d",
               rep, n, i, effect, (unsigned)batch, ngroups);
    else
      snprintf(s[c].hub, sizeof s[c].hub, "client/drain/r%d_n%d_%d_e%d_b%u",
               rep, n, i, effect, (unsigned)batch);
    paths[c] = s[c].lease_path;
    hubs[i] = s[c].hub;
  }
  durable_error_t err = {0};
  double t0 = now_s(), sliced = beside.seconds;
  for (int i = 0; i < n; i++) {
    durable_hub_t *h;
    if (durable_mesh_client(M, hubs[i], &h, &err) < 0)
      die("durable_mesh_client: %s", err.message);
    for (int c = i * g; c < (i + 1) * g; c++) {
      durable_consumer_t cons = {.ns = "Bench",
                                 .key_of = drain_key_of,
                                 .data = &s[c],
                                 .group = s[c].group};
      if (batch > 0) {
        cons.batch_handler = drain_batch_handler;
        cons.batch.items = batch;
      } else {
        cons.handler = drain_handler;
      }
      if (durable_hub_consume(h, &cons, NULL, &err) < 0)
        die("durable_hub_consume: %s", err.message);
    }
  }
  run_until(&C, &d.all_handled, "draining the backlog");
  wait_checkpoints(paths, nc, per);
  double dt = now_s() - t0 - (beside.seconds - sliced);
  long all_calls = 0;
  for (int c = 0; c < nc; c++) {
    all_calls += s[c].calls;
    if (each)
      each[c] =
          s[c].done_at > 0
              ? (double)per / (s[c].done_at - t0 - (s[c].done_sliced - sliced))
              : 0;
    if (!s[c].order_ok || s[c].count != per)
      printf("  WARNING: %s%s%s handled %ld items (of %ld), in order: %s\n",
             s[c].key, s[c].group ? " group " : "",
             s[c].group ? s[c].group : "", s[c].count, per,
             s[c].order_ok ? "yes" : "NO");
  }
  if (calls)
    *calls = all_calls;
  /* the consumers go: their hubs release the leases */
  recycle_hubs(hubs, n);
  free(s);
  free(paths);
  free(hubs);
  return (double)(per * nc) / dt;
}

double drain_batches(char (*keys)[128], int n, long per, int rep, int effect,
                     uint32_t batch, long *calls) {
  return drain_groups(keys, n, per, rep, effect, batch, NULL, 0, calls, NULL);
}

double drain_run(char (*keys)[128], int n, long per, int rep, int effect) {
  return drain_batches(keys, n, per, rep, effect, 0, NULL);
}

/* ---- printing ----------------------------------------------------------- */

void print_rate(const char *label, const double *v, int n, const char *unit) {
  printf("  %-60s %12s %-8s %s\n", label, num(median(v, n)), unit,
         runs(v, n, 1, "%.0f"));
}

void print_ratio(const char *label, const double *v, int n,
                 const char *target) {
  printf("  %-60s %11.2fx          %s  [%s]\n", label, median(v, n),
         runs(v, n, 1, "%.2f"), target);
}

/* ---- Lua figures -------------------------------------------------------- */

const char *find_durable(const char *fallback) {
  static char path[PATH_MAX + 32];
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = 0; /* .../tests/bench -> .../durable */
      snprintf(path, sizeof path, "%s/../../durable", self);
      if (access(path, X_OK) == 0)
        return path;
    }
  }
  return fallback;
}

double lua_figure(const char *durable, const char *script,
                  const char *const *args) {
  double v;
  lua_numbers(durable, script, args, &v, 1);
  return v;
}

void lua_numbers(const char *durable, const char *script,
                 const char *const *args, double *out_values, int count) {
  const char *argv[16];
  int argc = 0;
  argv[argc++] = durable;
  argv[argc++] = "lua";
  argv[argc++] = script;
  for (int i = 0; args[i] && argc < 15; i++)
    argv[argc++] = args[i];
  argv[argc] = NULL;
  int fd[2];
  if (pipe(fd) != 0)
    die("pipe: %s", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0)
    die("fork: %s", strerror(errno));
  if (pid == 0) {
    dup2(fd[1], 1);
    close(fd[0]);
    close(fd[1]);
    alarm(STALL_SECONDS * 5);
    execv(durable, (char *const *)argv);
    fprintf(stderr, "%s: cannot run %s: %s\n", bench_name, durable,
            strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  char out[4096];
  size_t o = 0;
  ssize_t k;
  while (o < sizeof out - 1 &&
         (k = read(fd[0], out + o, sizeof out - 1 - o)) > 0)
    o += (size_t)k;
  out[o] = 0;
  close(fd[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  char *at = out, *end;
  int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  for (int i = 0; ok && i < count; i++, at = end) {
    out_values[i] = strtod(at, &end);
    ok = end != at && (i > 0 || out_values[i] > 0);
  }
  if (!ok)
    die("%s lua %s %s failed (status %d): %s", durable, script,
        args[0] ? args[0] : "", status, out);
}

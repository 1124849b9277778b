/*
 * postgres_pipeline.c: the PostgreSQL backend's queue of statements, and
 * the one round trip that sends it all (durable__pg_drain).
 *
 * Round trips are the cost that matters (a commit's fsync is the other).
 * Inside a transaction nothing is sent until a result is needed: BEGIN, the
 * writes (whose outcomes are deferred, see backend.h), the NOTIFYs of
 * changed() and the COMMIT wait in the connection's queue, and go in one
 * pipeline at the next read (whose result is needed now), flush or commit.
 * A group of puts is one round trip in all; a read for update costs one,
 * carrying whatever was queued before it.  In the pipeline, the writes of
 * one kind into one table go as one statement over arrays (a group of
 * appends to many streams: its locks, its items, its stream rows, its
 * NOTIFYs, a statement each), since the server's cost per statement
 * outweighs its cost per row.  libpq reads results while it sends, so a
 * long pipeline cannot deadlock on full socket buffers.
 *
 * A commit whose answer was lost is reported as such only when nothing the
 * server said proves that it did not happen; otherwise the group is retried
 * on a new connection, as if it had failed earlier.
 *
 * Every answer is read here: a write's outcome, a read's row made a node
 * (for the reads that run at once, too), a failure made a message.
 */
#include "postgres.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Fill `err` from a failed result (or from the connection when `res` is
 * NULL).  `code` 0 picks DURABLE_EUNAVAIL for a lost connection,
 * DURABLE_ECANCELED for a transaction the server rolled back on its own
 * (SQLSTATE class 40), else DURABLE_EIO. */
int durable__pg_error(durable__conn_t *c, const PGresult *res, int code,
                      durable_error_t *err, const char *op,
                      const char *subject) {
  const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
  const char *msg =
      res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
  char line[400];
  snprintf(c->sqlstate, sizeof(c->sqlstate), "%s", state ? state : "");
  if (msg == NULL || *msg == '\0')
    msg = res ? PQresultErrorMessage(res) : "";
  if (*msg == '\0')
    msg = PQerrorMessage(c->pg);
  if (*msg == '\0')
    msg = "unknown error";
  durable__one_line_copy(line, sizeof(line), msg);
  if (code == 0 && state && strncmp(state, "40", 2) == 0)
    code = DURABLE_ECANCELED; /* a deadlock or a serialization failure */
  else if (code == 0 && durable__pg_is_lost(c->pg, state)) {
    code = DURABLE_EUNAVAIL;
    c->broken = 1; /* the next begin reconnects */
  } else if (code == 0) {
    code = DURABLE_EIO;
  }
  const char *sep = subject && *subject ? " " : "";
  if (code == DURABLE_EUNAVAIL)
    return durable__error(err, code, "store '%s' unavailable (%s%s%s): %s",
                          c->name, op, sep, subject ? subject : "", line);
  return durable__error(err, code, "%s%s%s: %s", op, sep,
                        subject ? subject : "", line);
}

/* The last error said the schema or table is not there (dropped behind our
 * back, or a partition created by a transaction that rolled back). */
int durable__pg_missing_relation(const durable__conn_t *c) {
  return strcmp(c->sqlstate, "3F000") == 0 || strcmp(c->sqlstate, "42P01") == 0;
}

void durable__pg_forget_partition(durable__conn_t *c, const char *partition) {
  durable__map_del(&c->partitions, partition);
}

int durable__pg_result_ok(const PGresult *res) {
  ExecStatusType st = PQresultStatus(res);
  return res != NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK);
}

/* Append a step; its strings must live until it is sent (a write's are
 * copied into `buf` by the caller).  The step is zeroed but for `kind`. */
step_t *durable__pg_push_step(durable__conn_t *c, int kind,
                              durable_error_t *err) {
  if (c->queued == c->queue_cap) {
    size_t cap = c->queue_cap ? c->queue_cap * 2 : 64;
    step_t *q = realloc(c->queue, cap * sizeof(*q));
    if (q == NULL) {
      durable__error(err, DURABLE_ENOMEM, "out of memory");
      return NULL;
    }
    c->queue = q;
    c->queue_cap = cap;
  }
  step_t *s = &c->queue[c->queued++];
  memset(s, 0, sizeof(*s));
  s->kind = kind;
  return s;
}

void durable__pg_clear_queue(durable__conn_t *c) {
  for (size_t i = 0; i < c->queued; i++)
    free(c->queue[i].buf);
  c->queued = 0;
}

/* A write's result into its outcome. */
static void take_outcome(const step_t *s, const PGresult *res) {
  durable__outcome_t *o = s->out;
  if (o == NULL)
    return;
  if (s->op == OP_REMOVE) {
    o->status =
        strcmp(PQcmdTuples((PGresult *)res), "0") == 0 ? DURABLE_ENOTFOUND : 0;
    return;
  }
  if (PQntuples(res) != 1) { /* DO NOTHING, or no row to update */
    o->status = s->op == OP_INSERT ? DURABLE_EEXIST : DURABLE_ENOTFOUND;
    return;
  }
  if (s->op == OP_REPLACE && PQgetisnull(res, 0, 0)) {
    o->status = DURABLE_ECONFLICT; /* there, at another version */
    return;
  }
  o->status = 0;
  o->version = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
  o->created_at = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
  o->inserted =
      s->op == OP_UPSERT ? PQgetvalue(res, 0, 2)[0] == 't' : s->op == OP_INSERT;
}

static void row_text(const PGresult *res, int row,
                     durable__node_text_t text[6]) {
  for (int i = 0; i < 6; i++)
    text[i] = (durable__node_text_t){PQgetvalue(res, row, i),
                                     (size_t)PQgetlength(res, row, i)};
}

static int64_t row_int(const PGresult *res, int row, int col) {
  return strtoll(PQgetvalue(res, row, col), NULL, 10);
}

durable_node_t *durable__pg_node_of_row(const PGresult *res, int row) {
  durable__node_text_t text[6];
  row_text(res, row, text);
  return durable__node_pack(text, row_int(res, row, 6), row_int(res, row, 7),
                            row_int(res, row, 8));
}

/* Append every row of `res` to `out` as a node. */
int durable__pg_push_rows(const PGresult *res, durable__nodes_t *out,
                          durable_error_t *err) {
  for (int i = 0, n = PQntuples(res); i < n; i++) {
    durable__node_text_t text[6];
    row_text(res, i, text);
    if (durable__nodes_add(out, text, row_int(res, i, 6), row_int(res, i, 7),
                           row_int(res, i, 8)) == NULL)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  return 0;
}

/* Row `row` of a read's result into its answer (none: ENOTFOUND). */
static void take_got(durable__got_t *got, const PGresult *res, int row) {
  if (row >= PQntuples(res)) {
    got->status = DURABLE_ENOTFOUND;
    return;
  }
  got->node = durable__pg_node_of_row(res, row);
  got->status = got->node ? 0 : DURABLE_ENOMEM;
}

/* Whether a step's answer is still to come: its write's outcome, or its
 * read's. */
static int step_pending(const step_t *s) {
  return (s->out ? s->out->status : s->got->status) == DURABLE__PENDING;
}

/* The step of `n` sent as one many-row statement that row `r` of its result
 * answers: the pending one whose parameters $1, $2 are the row's namespace
 * and id (columns 0 and 1).  Rows come back in practice in the steps'
 * order, so the search starts after the last one found (*at). */
static step_t *step_of_row(step_t *steps, size_t n, size_t *at,
                           const PGresult *res, int r) {
  const char *ns = PQgetvalue(res, r, 0), *id = PQgetvalue(res, r, 1);
  for (size_t k = 0; k < n; k++) {
    step_t *s = &steps[(*at + k) % n];
    if (step_pending(s) && strcmp(s->vals[0], ns) == 0 &&
        strcmp(s->vals[1], id) == 0) {
      *at = (*at + k + 1) % n;
      return s;
    }
  }
  return NULL;
}

/* The outcomes of `n` writes sent as one many-row statement.  An insert
 * with no row met its row (DO NOTHING); an upsert always has one, and a
 * strict replace has one or fails. */
static void take_rows(step_t *steps, size_t n, const PGresult *res) {
  size_t at = 0;
  for (int r = 0, rows = PQntuples(res); r < rows; r++) {
    step_t *s = step_of_row(steps, n, &at, res, r);
    if (s == NULL)
      continue;
    s->out->status = 0;
    s->out->version = strtoll(PQgetvalue(res, r, 2), NULL, 10);
    s->out->created_at = strtoll(PQgetvalue(res, r, 3), NULL, 10);
    s->out->inserted = s->op == OP_UPSERT   ? PQgetvalue(res, r, 4)[0] == 't'
                       : s->op == OP_INSERT ? 1
                                            : 0; /* a replace */
  }
  for (size_t k = 0; k < n; k++)
    if (steps[k].out->status == DURABLE__PENDING)
      steps[k].out->status =
          steps[k].op == OP_INSERT ? DURABLE_EEXIST : DURABLE_EIO;
}

/* The rows a many-row lock read, each into the answer of its step;
 * ENOTFOUND for those it did not find (no row: nothing to lock). */
static void take_locked(step_t *steps, size_t n, const PGresult *res) {
  size_t at = 0;
  for (int r = 0, rows = PQntuples(res); r < rows; r++) {
    step_t *s = step_of_row(steps, n, &at, res, r);
    if (s != NULL)
      take_got(s->got, res, r);
  }
  for (size_t k = 0; k < n; k++)
    if (steps[k].got->status == DURABLE__PENDING)
      steps[k].got->status = DURABLE_ENOTFOUND;
}

/* Rows per many-row statement: a bound on one message's size. */
#define ROWS_MAX 1000
/* Shorter runs of locks, strict replaces and notifications go one
 * statement each.  Their many-row forms are joins and sorts over arrays,
 * planned again for each set of arrays: for the two rows and two
 * namespaces of a consumer's acknowledgement with its effect they cost
 * more than one-row statements (draining with an effect fell from 0.44x to
 * 0.36x the plain loop); at the runs of a group of many streams they cost
 * far less.  (Inserts and upserts, simple scans of their arrays, go many
 * rows at a time from two.) */
#define ROWS_MIN 8

/* A statement as sent: `count` steps from `first`, as one many-row
 * statement when `rows`. */
typedef struct {
  size_t first, count;
  int rows;
} sent_t;

/* How many steps from `first` go as one many-row statement: consecutive
 * steps with the same many-row form (the same operation on one table), up
 * to ROWS_MAX, and for upserts and replaces no row twice (one statement
 * may not update a row twice). */
/* Whether the row of step `s` is in `rows` already; else it is put there.
 * A row is its partition and path (a path names one table).  Out of
 * memory counts as a repeat: the steps then only go one at a time. */
static int row_repeated(durable__map_t *rows, const step_t *s) {
  char key[2 * DURABLE_PATH_MAX + 4];
  snprintf(key, sizeof key, "%s\n%s", s->partition, s->subject);
  return durable__map_get(rows, key) != NULL ||
         durable__map_put(rows, key, MAP_NUMBER(1)) != 0;
}

static size_t run_length(durable__conn_t *c, size_t first) {
  const step_t *s = &c->queue[first];
  size_t j = first + 1;
  if (s->rows[0] == '\0')
    return 1;
  int once = s->op == OP_UPSERT || s->op == OP_REPLACE; /* a row at most */
  durable__map_t rows = {0};
  for (; j < c->queued && j - first < ROWS_MAX; j++) {
    const step_t *t = &c->queue[j];
    if (t->kind != s->kind || strcmp(t->rows, s->rows) != 0)
      break;
    if (once && rows.count == 0) /* the first row, once there is a second */
      row_repeated(&rows, s);
    if (once && row_repeated(&rows, t))
      break;
  }
  durable__map_free(&rows);
  int simple = s->kind == STEP_WRITE && s->op != OP_REPLACE;
  if (!simple && j - first < ROWS_MIN)
    return 1;
  return j - first;
}

/* Put the writes of one many-row form next to each other, so that a group
 * of jobs -- each an insert into one table and a replace in another, say --
 * goes as one statement per form instead of one per write.  Only within a
 * stretch of writes between two other steps (a read for update sees the
 * writes queued before it, and keeps its place), and only when no row is
 * written twice in the stretch: writes of distinct rows commute, and each
 * outcome is its own row's.  The rows the group updates were locked before
 * (write.c), so their writes wait on nobody; an insert may still wait on
 * another transaction's insert of the same new key, now in another order
 * than the jobs', and a deadlock there is cancelled by the server and the
 * group run again, as any deadlock is.  The order within a form, and of
 * the forms by first appearance, is kept. */
static void gather_stretch(step_t *steps, size_t n) {
  durable__map_t rows = {0};
  int distinct = 1;
  for (size_t i = 0; i < n && distinct; i++)
    distinct = !row_repeated(&rows, &steps[i]);
  durable__map_free(&rows);
  step_t *sorted = distinct ? malloc(n * sizeof(*sorted)) : NULL;
  char *taken = sorted ? calloc(n, 1) : NULL;
  if (taken == NULL) { /* as it is, then: only slower */
    free(sorted);
    return;
  }
  size_t out = 0;
  for (size_t i = 0; i < n; i++) {
    if (taken[i])
      continue;
    sorted[out++] = steps[i];
    taken[i] = 1;
    if (steps[i].rows[0] == '\0')
      continue; /* a form of one row: it stays where it is */
    for (size_t j = i + 1; j < n; j++) /* the later steps of its form */
      if (!taken[j] && strcmp(steps[j].rows, steps[i].rows) == 0) {
        sorted[out++] = steps[j];
        taken[j] = 1;
      }
  }
  memcpy(steps, sorted, n * sizeof(*sorted));
  free(sorted);
  free(taken);
}

/* gather_stretch each stretch of three writes or more in the queue. */
static void gather_writes(durable__conn_t *c) {
  size_t a = 0;
  while (a < c->queued) {
    size_t b = a;
    while (b < c->queued && c->queue[b].kind == STEP_WRITE)
      b++;
    if (b - a >= 3)
      gather_stretch(&c->queue[a], b - a);
    a = b > a ? b : a + 1;
  }
}

/* Column `col` of `n` steps as a PostgreSQL array literal: every element
 * quoted, '"' and '\' escaped. */
static char *array_of(const step_t *steps, size_t n, int col) {
  size_t len = 3;
  for (size_t k = 0; k < n; k++) {
    len += 3;
    for (const char *p = steps[k].vals[col]; *p; p++)
      len += 1 + (*p == '"' || *p == '\\');
  }
  char *out = malloc(len), *o = out;
  if (out == NULL)
    return NULL;
  *o++ = '{';
  for (size_t k = 0; k < n; k++) {
    if (k)
      *o++ = ',';
    *o++ = '"';
    for (const char *p = steps[k].vals[col]; *p; p++) {
      if (*p == '"' || *p == '\\')
        *o++ = '\\';
      *o++ = *p;
    }
    *o++ = '"';
  }
  *o++ = '}';
  *o = '\0';
  return out;
}

/* Send one planned statement (no wait). */
static int send_planned(PGconn *pg, step_t *steps, const sent_t *p) {
  const step_t *s = &steps[p->first];
  if (!p->rows)
    return s->sql
               ? PQsendQueryParams(pg, s->sql, 0, NULL, NULL, NULL, NULL, 0)
               : PQsendQueryPrepared(pg, s->name, s->n, s->vals, NULL, NULL, 0);
  /* a column of the steps' parameters per parameter */
  char *arrays[8];
  int ok = 1;
  for (int col = 0; col < s->n; col++)
    if ((arrays[col] = array_of(s, p->count, col)) == NULL)
      ok = 0;
  /* libpq copies the parameters into its buffer at once */
  if (ok)
    ok = PQsendQueryPrepared(pg, s->rows, s->n, (const char *const *)arrays,
                             NULL, NULL, 0);
  for (int col = 0; col < s->n; col++)
    free(arrays[col]);
  return ok;
}

/* ---- a commit that waits ---------------------------------------------
 *
 * A commit can wait without end and without a word: a primary that waits
 * for a synchronous standby which is not there (one promoted from a standby
 * that kept synchronous_standby_names), or a lock.  So the answer to COMMIT
 * is awaited in steps, and once it has taken STALL_MS, the server is asked
 * -- on a connection of its own to the same host -- what this session waits
 * for, and the store is told (c->stall), and told again when it ends. */

#define STALL_MS 5000

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What the server says the session `pid` of `c`'s host waits for. */
static void ask_why(durable__conn_t *c, int64_t waited_ms, char *out,
                    size_t size) {
  char why[300], pid[16];
  snprintf(out, size,
           "%s: a commit has waited %lld s with no answer from %s:%s", c->name,
           (long long)waited_ms / 1000, PQhost(c->pg), PQport(c->pg));
  PGconn *side = durable__pg_open_at(c->url, PQhost(c->pg), PQport(c->pg), why,
                                     sizeof why);
  if (side == NULL)
    return;
  snprintf(pid, sizeof pid, "%d", PQbackendPID(c->pg));
  const char *vals[1] = {pid};
  PGresult *res = PQexecParams(side,
                               "SELECT coalesce(wait_event, ''), "
                               "current_setting('synchronous_standby_names') "
                               "FROM pg_stat_activity WHERE pid = $1",
                               1, NULL, vals, NULL, NULL, 0);
  if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
    const char *event = PQgetvalue(res, 0, 0);
    if (strcmp(event, "SyncRep") == 0)
      snprintf(out, size,
               "%s: a commit has waited %lld s for synchronous replication: "
               "%s:%s waits for a standby named in synchronous_standby_names "
               "= '%s', and none has confirmed it (a primary promoted from a "
               "standby keeps that setting: set it to the standbys it has)",
               c->name, (long long)waited_ms / 1000, PQhost(c->pg),
               PQport(c->pg), PQgetvalue(res, 0, 1));
    else if (*event != '\0')
      snprintf(out, size,
               "%s: a commit has waited %lld s on %s:%s, which says it waits "
               "for %s",
               c->name, (long long)waited_ms / 1000, PQhost(c->pg),
               PQport(c->pg), event);
  }
  PQclear(res);
  PQfinish(side);
}

/* Wait for the answer to COMMIT to be readable, telling the store once it
 * has taken STALL_MS (and when it came after that).  A failure of the
 * socket is left to PQgetResult to report. */
static void await_commit(durable__conn_t *c) {
  int64_t started = now_ms();
  int told = 0;
  while (PQisBusy(c->pg)) {
    struct pollfd p = {PQsocket(c->pg), POLLIN, 0};
    int r = poll(&p, 1, 1000);
    if ((r < 0 && errno != EINTR) || (r > 0 && !PQconsumeInput(c->pg)))
      break;
    int64_t waited = now_ms() - started;
    if (!told && waited >= STALL_MS) {
      char why[1024];
      ask_why(c, waited, why, sizeof why);
      c->stall(c->stall_data, why);
      told = 1;
    }
  }
  if (told)
    c->stall(c->stall_data, NULL);
}

/* Send every queued step in one pipeline and take every result: outcomes
 * into their writes, and the last step's result into *last when it is a
 * read.  The writes of one form are gathered first (gather_writes), and
 * consecutive steps of one many-row form -- inserts, upserts or strict
 * replaces into one table, locks of one table's rows, notifications -- go
 * as one statement.  The first failure decides the error, naming its
 * statement; the statements after it are not run (the pipeline aborts) and
 * an open transaction is spoiled.  Anything unexpected in the protocol gives
 * DURABLE_EUNAVAIL and marks the connection broken: the engine then drops
 * it instead of trusting its state.
 *
 * For a queue that ends with COMMIT: once the server answered COMMIT, the
 * transaction is saved, and that is success even if the connection breaks
 * right after (it is dropped at the next begin).  Otherwise *unknown (may
 * be NULL) tells a failure whose outcome cannot be known -- COMMIT was sent
 * and nothing the server said proves that it did not take effect -- from
 * one that certainly committed nothing. */
int durable__pg_drain(durable__conn_t *c, PGresult **last, int *unknown,
                      durable_error_t *err) {
  PGconn *pg = c->pg;
  size_t count = c->queued, nplan = 0, sent = 0, got = 0;
  PGresult *bad = NULL;
  int broken = 0, rc = 0, committed = 0, refused = 0;
  if (last != NULL)
    *last = NULL;
  if (unknown != NULL)
    *unknown = 0;
  if (count == 0)
    return 0;
  sent_t *plan = malloc(count * sizeof(*plan));
  if (plan == NULL) {
    durable__pg_clear_queue(c);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  gather_writes(c);
  for (size_t i = 0; i < count; nplan++) {
    size_t n = run_length(c, i);
    plan[nplan] = (sent_t){i, n, n > 1};
    i += n;
  }
  size_t bad_at = nplan, commit_at = nplan;
  c->sqlstate[0] = '\0';
  if (c->in_tx)
    c->tx_sent = 1;
  if (!PQenterPipelineMode(pg))
    broken = 1;
  for (; !broken && sent < nplan; sent++) {
    if (c->queue[plan[sent].first].kind == STEP_COMMIT)
      commit_at = sent;
    if (!send_planned(pg, c->queue, &plan[sent]))
      broken = 1;
  }
  if (!broken && !PQpipelineSync(pg))
    broken = 1;
  for (; !broken && got < sent; got++) {
    const sent_t *p = &plan[got];
    step_t *s = &c->queue[p->first];
    /* the server sends the answers only at the sync after COMMIT (or as its
     * buffer fills): a COMMIT that waits holds back the first answer */
    if (got == 0 && commit_at < nplan && c->stall != NULL)
      await_commit(c);
    PGresult *r = PQgetResult(pg);
    if (r == NULL) {
      broken = 1;
      break;
    }
    ExecStatusType st = PQresultStatus(r);
    if (st == PGRES_FATAL_ERROR) {
      for (size_t k = 0; k < p->count; k++)
        if (s[k].got != NULL)
          s[k].got->status = DURABLE_EIO; /* `bad` below says why */
      if (bad == NULL) {
        bad = r;
        bad_at = got;
        r = NULL;
      }
    } else if (durable__pg_result_ok(r)) {
      if (p->rows && s->kind == STEP_WRITE) {
        take_rows(s, p->count, r);
      } else if (p->rows && s->kind == STEP_READ) {
        take_locked(s, p->count, r);
      } else if (p->rows) {
        /* notifications: nothing comes back */
      } else if (s->kind == STEP_WRITE) {
        take_outcome(s, r);
      } else if (s->kind == STEP_COMMIT) {
        /* COMMIT of a failed transaction "succeeds" with the tag ROLLBACK */
        committed = strcmp(PQcmdStatus(r), "COMMIT") == 0;
        refused = !committed;
      } else if (s->kind == STEP_READ && s->got != NULL) {
        take_got(s->got, r, 0);
      } else if (s->kind == STEP_READ && p->first == count - 1 &&
                 last != NULL) {
        *last = r;
        r = NULL;
      }
    } /* else PGRES_PIPELINE_ABORTED: not run, after `bad` */
    PQclear(r);
    /* each statement's results end with a NULL */
    PGresult *x = PQgetResult(pg);
    if (x != NULL) {
      PQclear(x);
      broken = 1;
    }
  }
  if (!broken) {
    PGresult *r = PQgetResult(pg);
    if (r == NULL || PQresultStatus(r) != PGRES_PIPELINE_SYNC)
      broken = 1;
    PQclear(r);
  }
  if (PQpipelineStatus(pg) != PQ_PIPELINE_OFF && !PQexitPipelineMode(pg))
    broken = 1;
  if (broken)
    c->broken = 1;

  if (committed) {
    rc = 0; /* saved: whatever the connection does now */
  } else if (bad != NULL) {
    const step_t *s = &c->queue[plan[bad_at].first];
    rc = durable__pg_error(c, bad, broken ? DURABLE_EUNAVAIL : 0, err, s->what,
                           s->subject);
    if (durable__pg_missing_relation(c) && s->partition)
      durable__pg_forget_partition(c, s->partition);
    if (!broken && s->strict &&
        (strcmp(c->sqlstate, DURABLE__REFUSED_STATE) == 0 ||
         strcmp(c->sqlstate, "23505") == 0))
      rc = DURABLE__STRICT_REFUSED; /* unique_violation: the row is there */
  } else if (broken) {
    const step_t *s = &c->queue[plan[got < nplan ? got : nplan - 1].first];
    rc = durable__pg_error(c, NULL, DURABLE_EUNAVAIL, err, s->what, s->subject);
  } else if (refused) {
    rc = durable__error(err, DURABLE_EIO,
                        "commit: the transaction was rolled back");
  }
  if (rc != 0 && unknown != NULL && commit_at < sent && !refused) {
    /* Proof that COMMIT did not take effect: an error the server sent (it
     * has a SQLSTATE) for a statement before it, or a plain ERROR for the
     * COMMIT itself.  A FATAL one there may come after the commit. */
    const char *state = bad ? PQresultErrorField(bad, PG_DIAG_SQLSTATE) : NULL;
    const char *severity =
        bad ? PQresultErrorField(bad, PG_DIAG_SEVERITY_NONLOCALIZED) : NULL;
    int proof = state != NULL && (bad_at < commit_at ||
                                  (bad_at == commit_at && severity != NULL &&
                                   strcmp(severity, "ERROR") == 0));
    *unknown = !proof;
  }
  PQclear(bad);
  free(plan);
  if (rc != 0 && last != NULL) {
    PQclear(*last);
    *last = NULL;
  }
  durable__pg_clear_queue(c);
  return rc;
}

/* Run a prepared statement now, after whatever is queued, in the same round
 * trip.  Returns the result, or NULL with *rc and `err` set. */
PGresult *durable__pg_run(durable__conn_t *c, const char *name, int n,
                          const char *const *vals, int *rc,
                          durable_error_t *err, const char *op,
                          const char *subject) {
  PGresult *res;
  c->sqlstate[0] = '\0';
  if (c->queued == 0) {
    res = PQexecPrepared(c->pg, name, n, vals, NULL, NULL, 0);
    if (durable__pg_result_ok(res))
      return res;
    *rc = durable__pg_error(c, res, 0, err, op, subject);
    PQclear(res);
    return NULL;
  }
  step_t *s = durable__pg_push_step(c, STEP_READ, err);
  if (s == NULL) {
    *rc = err->code;
    return NULL;
  }
  snprintf(s->name, sizeof(s->name), "%s", name);
  s->n = n;
  for (int i = 0; i < n && i < 8; i++)
    s->vals[i] = vals[i];
  s->what = op;
  s->subject = subject;
  *rc = durable__pg_drain(c, &res, NULL, err);
  if (*rc == 0 && res == NULL)
    *rc = durable__pg_error(c, NULL, DURABLE_EUNAVAIL, err, op, subject);
  return *rc == 0 ? res : NULL;
}

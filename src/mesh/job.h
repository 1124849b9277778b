/*
 * job.h: one unit of store work, carried from the loop thread to a worker
 * thread and back.
 *
 * A public call validates its arguments on the loop thread, copies them into
 * a job and queues it (read.c, write.c, access.c).  A worker runs it against
 * its own database connection: reads one at a time, writes many at a time in
 * one transaction (group commit, write.c).  The finished job goes back to the
 * loop through a uv_async_t, where its change events reach the watches (feed.c)
 * and then its callback runs.  Every field a worker touches is owned by the
 * job, so the threads share nothing but the queues.
 *
 * A write job runs in two steps around the backend's deferred outcomes
 * (backend.h): durable__writes_apply() decides each write and queues its
 * statement; once the outcomes are known (after a flush, or after the
 * commit), durable__writes_settle() turns them into the job's status, its
 * node and its change events.
 */
#ifndef DURABLE_MESH_JOB_H
#define DURABLE_MESH_JOB_H

#include "backend.h"
#include "queue.h"

typedef enum {
  JOB_GET = 1,
  JOB_QUERY, /* children of ns after `after`, at most `limit` */
  JOB_EXISTS,
  JOB_ITEMS, /* read_items: 12-digit ids after `num` */
  JOB_LAST,  /* last_item */
  JOB_WRITE,
  JOB_GRANT,  /* num = 1 add, 0 revoke; limit = the modes */
  JOB_GRANTS, /* the grants of `principal` (NULL: everyone's) */
  JOB_ACCESS, /* may `principal` do `num` (modes) on the owner of `path`? */
  JOB_TYPE,   /* every node of NodeType `id`, path after `after` */
  JOB_ALIVE,  /* is the store opened as instance `id` still open? */
} durable__job_kind_t;

/* The statement a write queued (write.c). */
typedef enum {
  ACT_NONE = 0, /* nothing: not run yet, refused, or a mutator said no */
  ACT_INSERT,
  ACT_UPSERT,
  ACT_UPDATE,
  ACT_REPLACE, /* an update on a version, unread */
  ACT_REMOVE
} durable__action_t;

/* One write of a JOB_WRITE, owned by the job. */
typedef struct {
  /* the request */
  durable_write_kind_t kind;
  char *path, *ns, *id;
  char *owner; /* main_node, worked out once when the write is prepared */
  char *node_type, *content;
  int64_t expected_version;
  durable_mutate_cb mutate;
  void *mutate_arg;
  /* what a run decided (cleared by durable__writes_reset) */
  durable__action_t action;
  char *new_node_type, *new_content; /* a mutator's output */
  int64_t created_at, updated_at;
  durable_node_t *old;    /* the row read for update (a removal's event) */
  durable__outcome_t out; /* the queued statement's outcome */
} durable__write_op_t;

/* A change a write made, for the feed: the node as written (content NULL
 * for a removal, version = the removed row's version). */
typedef struct {
  durable_change_kind_t kind;
  durable_node_t *node;
} durable__event_t;

typedef struct durable__job_s durable__job_t;
typedef struct durable__worker_s durable__worker_t; /* engine.h */

/* What kind of work a job is, for the engine (engine.c), which knows none:
 * the files that make jobs give each its class. */
typedef struct {
  int on_writer; /* runs on the writer (changes something), else a reader */
  int groups;    /* the writer takes a run of queued jobs of this class */
  /* Run `n` jobs (1 unless `groups`) on the worker thread. */
  void (*run)(durable__worker_t *w, durable__job_t **jobs, size_t n);
  /* On the loop, before the job's callback (NULL: nothing). */
  void (*delivered)(durable__job_t *job);
  /* Free what the class keeps in the job (NULL: nothing). */
  void (*free)(durable__job_t *job);
} durable__job_class_t;

/* The classes: read.c, write.c, access.c. */
extern const durable__job_class_t durable__read_class;
extern const durable__job_class_t durable__write_class;
extern const durable__job_class_t durable__grant_class;

struct durable__job_s {
  struct durable__queue link; /* in its worker's queue, then the done list */
  durable_store_t *store;
  durable__job_kind_t kind;
  const durable__job_class_t *cls;

  /* inputs */
  char *principal; /* NULL: the platform (JOB_GRANT*: the grantee) */
  char *path, *ns, *id, *after;
  size_t limit;
  int64_t num;
  durable__write_op_t *writes;
  size_t nwrites;
  durable__remake_cb remake; /* durable__store_write_remade, or NULL */
  int strict; /* this round queues its inserts and replaces strict
                 (backend.h): a job of several writes, on a backend with
                 strict_writes */

  /* outputs */
  int status;
  durable_error_t err;
  size_t failed_write; /* a write job: 1 + the index of the write refused */
  durable_node_t *node;
  durable__nodes_t nodes;
  int more;
  int64_t value;
  durable__event_t *events;
  size_t nevents;
  durable__grants_t grants; /* JOB_GRANTS */
  int settled;              /* write.c: durable__writes_settle ran */
  int unreported; /* write.c: committed, or maybe, and no change reported */

  /* completion: `done` (internal users such as the feed) or `cb` */
  void (*done)(durable__job_t *job);
  durable_done_cb cb;
  void *data;
};

/* engine.c */
durable__job_t *durable__job_new(durable_store_t *store,
                                 durable__job_kind_t kind,
                                 const durable__job_class_t *cls);
/* Set the principal the job acts as (NULL: the platform), checked by the
 * naming rules. */
int durable__job_principal(durable__job_t *job, const char *principal,
                           durable_error_t *err);
/* A new job about node `path` (checked), acting as `principal`; refused
 * while the store closes. */
int durable__job_for_path(durable_store_t *store, durable__job_kind_t kind,
                          const durable__job_class_t *cls,
                          const char *principal, const char *path,
                          durable__job_t **out, durable_error_t *err);
void durable__job_free(durable__job_t *job);
/* Queue a job to the right worker.  Loop thread. */
void durable__job_submit(durable__job_t *job);
/* Queue `job`, whose result goes to cb(data); returns 0. */
int durable__job_start(durable__job_t *job, durable_done_cb cb, void *data);

/* The rows a group's transaction locked before anything else (write.c,
 * lock_in_order), each read as it was locked where the backend reads with
 * the lock: a read for update of such a row is served from here, with no
 * round trip of its own, until a write of that row is queued.  So a group
 * of k read-modify-writes costs one round trip for all its reads on
 * PostgreSQL, not one each. */
typedef struct {
  char part[DURABLE_PARTITION_MAX + 1];
  const char *table;  /* static */
  char *ns, *id;      /* copies of the op's */
  durable__got_t got; /* status DURABLE__PENDING until answered */
  int spent;          /* a write of the row was queued since */
} durable__locked_row_t;

typedef struct {
  durable__locked_row_t *rows; /* sorted by (part, table, ns, id) */
  size_t count;
} durable__locked_t;

/* The locked row at place/ns/id, or NULL. */
durable__locked_row_t *durable__locked_find(durable__locked_t *locked,
                                            durable__place_t place,
                                            const char *ns, const char *id);

/* write.c */
int durable__writes_prepare(durable__job_t *job, const durable_write_t *w,
                            size_t count, durable_error_t *err);
/* Decide every write of `job` in the open transaction and queue its
 * statement.  A write refused by its decision (create of a present node read
 * back, a version conflict, a mutator's refusal, ...) sets job->status and
 * stops the job there.  Returns 0, or a negative code when the transaction
 * itself failed (job->err says why): then it must be rolled back. */
int durable__writes_apply(const durable__backend_t *be, durable__conn_t *conn,
                          durable__job_t *job, durable__locked_t *locked);
/* 1 when the job's outcome could require undoing rows it changed (it could
 * fail after another of its writes succeeded), so the transaction's queue
 * must be flushed and the job settled before the commit. */
int durable__writes_risky(const durable__job_t *job);
/* Add to `out` (distinct) the namespaces the job may have changed: its
 * queued writes whose outcome is not a refusal.  Nothing for a failed job. */
int durable__writes_namespaces(const durable__job_t *job, durable__strv_t *out);
/* Every outcome is known: set the job's status, node and events.  Returns 1
 * when the job failed after changing rows (the transaction must be rolled
 * back to undo them), else 0. */
int durable__writes_settle(durable__job_t *job);
/* Forget what a run of the writes produced (decisions, events, node,
 * status), keeping the writes themselves for a retry; writes_free frees
 * them. */
void durable__writes_reset(durable__job_t *job);
void durable__writes_free(durable__job_t *job);

/* access.c: a job's access check and filtering, on the worker. */
int durable__access_load(const durable__backend_t *be, durable__conn_t *conn,
                         const char *principal, durable__grants_t *grants,
                         durable_error_t *err);
/* 1 when a read grant covers `owner`. */
int durable__access_covers(const durable__grants_t *grants, const char *owner);
/* 0 when the grants give every mode of `modes` on `owner`, else the first
 * mode missing (read before write). */
int durable__access_missing(const durable__grants_t *grants, const char *owner,
                            int modes);
/* 1 when some child of `ns` may be readable. */
int durable__access_reaches(const durable__grants_t *grants, const char *ns);
/* "principal 'P' may not read|write 'PATH'" into `err`; DURABLE_EACCES. */
int durable__access_denied(durable_error_t *err, const char *principal,
                           int mode, const char *path);

/* feed.c: deliver a finished write's events to the watches. */
void durable__feed_dispatch(durable_store_t *store, durable__job_t *job);
void durable__feed_close_all(durable_store_t *store);
void durable__feed_free(durable_store_t *store);

/* Run a read job on a connection (read.c). */
void durable__read_run(const durable__backend_t *be, durable__conn_t *conn,
                       durable__job_t *job);

#endif

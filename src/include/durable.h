/*
 * durable.h: the one public header of libdurable.
 *
 * libdurable keeps a *mesh* of saved nodes in a store (an embedded SQLite file,
 * or one PostgreSQL database shared by many processes) and, on top of it,
 * durable streams.  Everything here is asynchronous in the libuv sense: a call
 * validates its arguments, queues the work and returns at once; the result
 * arrives later in a completion callback on the loop thread.  Nothing blocks
 * the loop.
 *
 * Conventions (the same for every declaration below):
 *
 *  - Errors are negative DURABLE_E* codes from one table (DURABLE_ERRNO_MAP).
 *    A submitting function returns 0 when the work was queued, and then its
 *    callback runs exactly once; it returns a negative code when the arguments
 *    were refused, and then the callback never runs.  Where a message helps,
 *    the caller passes a durable_error_t that is filled with one readable line
 *    naming what was wrong (it may be NULL).
 *  - All functions must be called on the thread that runs the store's loop,
 *    unless a comment says otherwise.  Callbacks run on that thread.
 *  - Strings passed in are copied before the call returns (the caller keeps
 *    ownership).  Results handed to a callback are borrowed: valid until the
 *    callback returns; keep them with durable_node_dup().
 */
#ifndef DURABLE_H
#define DURABLE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DURABLE_VERSION_STRING "0.1.0"

/* ---- errors ------------------------------------------------------------ */

/* One X-macro table generates the codes, durable_strerror() and
 * durable_err_name(), so the three can never disagree. */
#define DURABLE_ERRNO_MAP(XX)                                                 \
  XX(EINVAL, -1, "invalid argument")                                          \
  XX(ENOTFOUND, -2, "not found")                                              \
  XX(EEXIST, -3, "already exists")                                            \
  XX(ECONFLICT, -4, "version conflict")                                       \
  XX(EACCES, -5, "access denied")                                             \
  XX(EUNAVAIL, -6, "store unavailable")                                       \
  XX(EIO, -7, "store error")                                                  \
  XX(ENOMEM, -8, "out of memory")                                             \
  XX(ETIMEDOUT, -9, "timed out")                                              \
  XX(ESHUTDOWN, -10, "shutting down")                                         \
  XX(ECANCELED, -11, "canceled")                                              \
  XX(EFAILED, -12, "failed")

typedef enum {
#define XX(name, value, text) DURABLE_##name = value,
  DURABLE_ERRNO_MAP(XX)
#undef XX
} durable_errno_t;

/* A failure with its message: `code` is a DURABLE_E* value, `message` one
 * line for a person ("path 'a//b' is invalid: empty segment"). */
typedef struct durable_error_s {
  int code;
  char message[512];
} durable_error_t;

/* Static text for a code ("already exists"); never NULL. */
const char *durable_strerror(int code);
/* The code's name ("EEXIST"); never NULL. */
const char *durable_err_name(int code);

/* ---- paths ------------------------------------------------------------- */

/* A path is `namespace/id`: segments separated by '/'.  The rules, checked by
 * durable_path_check() and by every call that takes a path:
 *
 *  - 1 to DURABLE_PATH_MAX bytes of valid UTF-8, 1 to DURABLE_SEGMENT_MAX
 *    bytes per segment;
 *  - no empty segment (so no leading, trailing or doubled '/');
 *  - no segment "." or "..";
 *  - no control character (U+0000..U+001F, U+007F) and no '\';
 *  - the first segment (the partition) does not begin with '_', is at most
 *    DURABLE_PARTITION_MAX bytes and does not begin with "pg_" (PostgreSQL
 *    keeps those schema names for itself).
 *
 * Anything else, quotes and spaces included, is plain data. */
#define DURABLE_PATH_MAX 1024
#define DURABLE_SEGMENT_MAX 255
#define DURABLE_PARTITION_MAX 63

/* 0 when `path` obeys the rules; otherwise DURABLE_EINVAL with a message
 * naming the path and the rule it breaks. */
int durable_path_check(const char *path, durable_error_t *err);

/* The owner (main node) of a path: the part before the first segment that
 * begins with '_' ("Space/doc/_DurableStream/Log" -> "Space/doc"), or the path
 * itself.  Writes at most `size` bytes including the NUL; returns the length
 * or DURABLE_EINVAL. */
int durable_path_owner(const char *path, char *out, size_t size);

/* The table a path is stored in: the longest entry of the satellite mapping
 * list whose segment occurs as a whole segment of the path
 * ("_DurableStreamItem" -> "durable_stream_items", "_DocumentPart" ->
 * "document_parts", "_ThreadMessage" -> "threads"), else "mesh_nodes".
 * Returns a static string. */
const char *durable_path_table(const char *path);

/* ---- nodes ------------------------------------------------------------- */

/* A saved node.  `content` is JSON text kept byte for byte as written.
 * `version` is a store-wide stamp that grows with each write of any node, so
 * a node's version grows with each of its writes, and also across a delete
 * and a re-create.  Times are milliseconds since the Unix epoch (UTC). */
typedef struct durable_node_s {
  char *ns;        /* namespace: the path without its last segment ("" at top) */
  char *id;        /* the last segment */
  char *path;      /* ns + "/" + id, or id when ns is empty */
  char *node_type; /* may be "" */
  char *content;   /* JSON text; NULL in a REMOVED change */
  char *main_node; /* the owner, see durable_path_owner() */
  int64_t version;
  int64_t created_at;
  int64_t updated_at;
} durable_node_t;

/* A deep copy that the caller owns; free it with durable_node_free(). */
durable_node_t *durable_node_dup(const durable_node_t *node);
void durable_node_free(durable_node_t *node);

/* ---- the store ---------------------------------------------------------- */

typedef struct durable_store_s durable_store_t;

/* Open a store on `loop`.  URL forms:
 *   "sqlite:PATH"            a SQLite file (WAL, synchronous=FULL)
 *   "sqlite:PATH?relaxed"    the same with synchronous=NORMAL: a crash of the
 *                            machine may lose the last commits, never corrupt
 *   "sqlite::memory:"        a private in-memory database (tests)
 *   "postgresql://..." or "postgres://..." or any libpq conninfo
 *                            ("host=/tmp dbname=x")
 * Connects before returning (bounded by 5 s) so that a store that cannot be
 * reached is reported here, naming the store.  Returns 0 and sets *out, or a
 * negative code with `err` filled.  The loop must be run for callbacks to
 * arrive; the store keeps handles on it until durable_store_close(). */
int durable_store_open(uv_loop_t *loop, const char *url, durable_store_t **out,
                       durable_error_t *err);

/* Finish every queued request (their callbacks run), stop the store's
 * threads, close its handles and free it.  `cb` (may be NULL) runs on the loop
 * once everything is released; after it the loop has no handle of the store
 * left. */
void durable_store_close(durable_store_t *store, void (*cb)(void *data),
                         void *data);

/* The URL the store was opened with, with any password masked. */
const char *durable_store_name(const durable_store_t *store);

/* The result every store callback receives.  Fields not set by an operation
 * are zero/NULL.  Everything is borrowed for the duration of the callback. */
typedef struct durable_result_s {
  int status;              /* 0, or a negative DURABLE_E* code */
  const char *message;     /* one line when status < 0, else NULL */
  const durable_node_t *node;    /* get; the written node for put/create/update */
  const durable_node_t **nodes;  /* query: `count` nodes in id order */
  size_t count;
  int more;                /* query: more rows follow the last one */
  int64_t value;           /* exists: 0/1; last_sequence: the sequence */
  void *data;              /* the caller's pointer */
} durable_result_t;

typedef void (*durable_done_cb)(const durable_result_t *result);

/* The principal that reads; NULL or DURABLE_PLATFORM reads and writes
 * everything.  Other principals read what their grants cover (see
 * durable_store_grant) and write nothing. */
#define DURABLE_PLATFORM "platform"

/* Get the node at `path`.  status DURABLE_ENOTFOUND when there is none,
 * DURABLE_EACCES when `principal` may not read it. */
int durable_store_get(durable_store_t *store, const char *principal,
                      const char *path, durable_done_cb cb, void *data,
                      durable_error_t *err);

/* Query: "namespace:NS" lists the children of NS, "path:P" the node at P (0
 * or 1 row).  Rows come in id order, at most `limit` (1..1000; 0 means 100),
 * starting after the id `after` (NULL or "" for the first page).  result->more
 * says whether another page follows; pass the last id as `after` to get it.
 * A principal sees the rows its grants cover; a namespace whose owner it may
 * not read at all gives DURABLE_EACCES. */
int durable_store_query(durable_store_t *store, const char *principal,
                        const char *query, const char *after, size_t limit,
                        durable_done_cb cb, void *data, durable_error_t *err);

/* Whether a node exists at `path`, answered by a listing read ("path:P"),
 * never by a point read.  result->value is 1 or 0. */
int durable_store_exists(durable_store_t *store, const char *principal,
                         const char *path, durable_done_cb cb, void *data,
                         durable_error_t *err);

/* The items of a stream in sequence order: the children of `items_ns` whose
 * ids are 12-digit sequences greater than `after`, at most `limit`.  An index
 * range scan: the cost follows the rows returned, not the stream's length. */
int durable_store_read_items(durable_store_t *store, const char *principal,
                             const char *items_ns, int64_t after, size_t limit,
                             durable_done_cb cb, void *data,
                             durable_error_t *err);

/* The highest stored item sequence under `items_ns` (0 when empty), in
 * result->value. */
int durable_store_last_item(durable_store_t *store, const char *items_ns,
                            durable_done_cb cb, void *data,
                            durable_error_t *err);

/* ---- writes ------------------------------------------------------------ */

/* A mutator for an atomic read-modify-write.  It runs on the store's writer
 * thread inside the write transaction (so it must not touch the loop, Lua or
 * anything not thread-safe): `current` is the node or NULL when absent.
 * Return 1 after setting `*content` (and optionally `*node_type`) to
 * malloc'ed strings to write them, 0 to write nothing, or a negative code to
 * fail the write (the transaction's other writes are unaffected).  It may run
 * more than once for one request (when a group commit is retried), so it must
 * depend only on `current` and `arg`. */
typedef int (*durable_mutate_fn)(const durable_node_t *current, char **content,
                                 char **node_type, void *arg);

typedef enum {
  DURABLE_WRITE_PUT = 1,  /* create or replace */
  DURABLE_WRITE_CREATE,   /* write once: DURABLE_EEXIST if present */
  DURABLE_WRITE_REPLACE,  /* replace only if the version is expected_version:
                             DURABLE_ECONFLICT otherwise, DURABLE_ENOTFOUND
                             when absent */
  DURABLE_WRITE_DELETE,   /* DURABLE_ENOTFOUND if absent */
  DURABLE_WRITE_MUTATE    /* read-modify-write with `mutate` */
} durable_write_kind_t;

typedef struct durable_write_s {
  durable_write_kind_t kind;
  const char *path;
  const char *node_type;    /* PUT, CREATE, REPLACE; NULL means "" */
  const char *content;      /* PUT, CREATE, REPLACE: JSON text; NULL means {} */
  int64_t expected_version; /* REPLACE */
  durable_mutate_fn mutate; /* MUTATE */
  void *mutate_arg;         /* MUTATE; must stay valid until the callback */
} durable_write_t;

/* Commit `count` writes in one transaction: all or none.  Paths and JSON are
 * checked before anything is queued.  Writes from many callers that arrive
 * while a commit is in flight share the next transaction (group commit); each
 * callback runs after the commit that holds its writes.  result->node is the
 * last written node (NULL after a delete or a mutator that wrote nothing).
 * A failure names the write that failed. */
int durable_store_write(durable_store_t *store, const durable_write_t *writes,
                        size_t count, durable_done_cb cb, void *data,
                        durable_error_t *err);

/* One-write conveniences over durable_store_write(). */
int durable_store_put(durable_store_t *store, const char *path,
                      const char *node_type, const char *content,
                      durable_done_cb cb, void *data, durable_error_t *err);
int durable_store_create(durable_store_t *store, const char *path,
                         const char *node_type, const char *content,
                         durable_done_cb cb, void *data, durable_error_t *err);
int durable_store_delete(durable_store_t *store, const char *path,
                         durable_done_cb cb, void *data, durable_error_t *err);
int durable_store_update(durable_store_t *store, const char *path,
                         durable_mutate_fn mutate, void *arg,
                         durable_done_cb cb, void *data, durable_error_t *err);

/* ---- access ------------------------------------------------------------ */

/* Let `principal` read every node whose owner is `prefix` or lies under it
 * (segment-wise: "Space" covers "Space/doc", not "Spaces").  Satellites
 * (streams, their items) follow their owner.  revoke takes a grant back. */
int durable_store_grant(durable_store_t *store, const char *principal,
                        const char *prefix, durable_done_cb cb, void *data,
                        durable_error_t *err);
int durable_store_revoke(durable_store_t *store, const char *principal,
                         const char *prefix, durable_done_cb cb, void *data,
                         durable_error_t *err);

/* ---- change feed ------------------------------------------------------- */

typedef enum {
  DURABLE_CHANGE_ADDED = 1,
  DURABLE_CHANGE_UPDATED,
  DURABLE_CHANGE_REMOVED,
  DURABLE_CHANGE_SYNCED /* the initial result is complete (node is NULL) */
} durable_change_kind_t;

typedef struct durable_watch_s durable_watch_t;

/* kind with the node it concerns (borrowed).  For REMOVED the node carries
 * path, ns, id and the version it had; content is NULL.  When the store
 * cannot be read for a while, the watch waits and re-syncs once it can. */
typedef void (*durable_change_cb)(durable_watch_t *watch,
                                  durable_change_kind_t kind,
                                  const durable_node_t *node, void *data);

/* A synced query over the children of namespace `ns`: the watch is registered
 * first, then the current children are read in pages (delivered as ADDED when
 * DURABLE_WATCH_INITIAL is set, silently otherwise), then SYNCED, then every
 * later change after its commit.  Nothing is lost in between; a change may be
 * delivered twice, never skipped.  Commits of other processes arrive too
 * (SQLite: within 100 ms; PostgreSQL: LISTEN/NOTIFY, with a re-sync after a
 * lost connection).  The watch keeps the ids and versions of the children it
 * has seen, so its memory follows the namespace's size. */
#define DURABLE_WATCH_INITIAL 1
int durable_store_watch(durable_store_t *store, const char *ns, int flags,
                        durable_change_cb cb, void *data,
                        durable_watch_t **out, durable_error_t *err);

/* Stop a watch; its callback does not run again after this returns. */
void durable_watch_close(durable_watch_t *watch);

#ifdef __cplusplus
}
#endif
#endif /* DURABLE_H */

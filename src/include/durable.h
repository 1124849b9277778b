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
 *  - Functions are named durable_<type>_<verb> (durable_stream_publish,
 *    durable_reader_close); callback types end in _cb, and every callback
 *    gets the caller's `void *data` as its last argument.
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

/* ---- what libdurable exports ------------------------------------------- */

/* libdurable is built with hidden symbol visibility (-fvisibility=hidden),
 * so that libdurable.so exports only what this header declares: the
 * runtime's internal calls (durable__*, durable_internal.h) stay inside the
 * library, as uv__* stay inside libuv.  DURABLE_EXTERN marks one declaration
 * as exported; DURABLE_API_BEGIN ... DURABLE_API_END mark every declaration
 * between them, which is how this header uses them: everything declared here
 * is public by definition, and a declaration added later cannot be left out
 * of the library by a forgotten mark. */
#if defined(__GNUC__) && __GNUC__ >= 4
#define DURABLE_EXTERN __attribute__((visibility("default")))
#define DURABLE_API_BEGIN _Pragma("GCC visibility push(default)")
#define DURABLE_API_END _Pragma("GCC visibility pop")
#else
#define DURABLE_EXTERN
#define DURABLE_API_BEGIN
#define DURABLE_API_END
#endif

DURABLE_API_BEGIN

/* ---- version ----------------------------------------------------------- */

/* The version this header belongs to (semantic versioning: a MINOR release
 * adds, a MAJOR one may break).  CMake reads the three numbers from here. */
#define DURABLE_VERSION_MAJOR 0
#define DURABLE_VERSION_MINOR 1
#define DURABLE_VERSION_PATCH 0
#define DURABLE_VERSION_STRINGIFY_(x) #x
#define DURABLE_VERSION_STRINGIFY(x) DURABLE_VERSION_STRINGIFY_(x)
#define DURABLE_VERSION_STRING                                                 \
  DURABLE_VERSION_STRINGIFY(DURABLE_VERSION_MAJOR)                             \
  "." DURABLE_VERSION_STRINGIFY(                                               \
      DURABLE_VERSION_MINOR) "." DURABLE_VERSION_STRINGIFY(DURABLE_VERSION_PATCH)
/* One number that orders versions: 0xMMmmpp. */
#define DURABLE_VERSION_HEX                                                    \
  ((DURABLE_VERSION_MAJOR << 16) | (DURABLE_VERSION_MINOR << 8) |              \
   DURABLE_VERSION_PATCH)

/* The version of the library linked at run time, which may differ from the
 * header's: DURABLE_VERSION_HEX and DURABLE_VERSION_STRING of the build. */
unsigned int durable_version(void);
const char *durable_version_string(void);

/* ---- errors ------------------------------------------------------------ */

/* One X-macro table generates the codes, durable_strerror() and
 * durable_err_name(), so the three can never disagree. */
#define DURABLE_ERRNO_MAP(XX)                                                  \
  XX(EINVAL, -1, "invalid argument")                                           \
  XX(ENOTFOUND, -2, "not found")                                               \
  XX(EEXIST, -3, "already exists")                                             \
  XX(ECONFLICT, -4, "version conflict")                                        \
  XX(EACCES, -5, "access denied")                                              \
  XX(EUNAVAIL, -6, "store unavailable")                                        \
  XX(EIO, -7, "store error")                                                   \
  XX(ENOMEM, -8, "out of memory")                                              \
  XX(ETIMEDOUT, -9, "timed out")                                               \
  XX(ESHUTDOWN, -10, "shutting down")                                          \
  XX(ECANCELED, -11, "canceled")                                               \
  XX(EFAILED, -12, "failed")                                                   \
  XX(EAGAIN, -13, "try again later")

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

/* Every enum below has a name function returning static text, never NULL
 * ("unknown" for a value outside the enum): durable_write_kind_name ("put"),
 * durable_change_kind_name ("added"), durable_log_level_name ("info"),
 * durable_run_level_name ("Started"), durable_read_outcome_name
 * ("present").  Log levels are named as DURABLE_LOG takes them. */

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

/* A NodeType name ("Document", "DurableStream"), checked by
 * durable_node_type_check() wherever a type is written or configured:
 *
 *  - 1 to DURABLE_NODE_TYPE_MAX bytes of valid UTF-8;
 *  - no control character (U+0000..U+001F, U+007F..U+009F), so no newline.
 *
 * A node may have no type: a write whose node_type is NULL or "" writes
 * none (so "" passes the writes; it names no configuration). */
#define DURABLE_NODE_TYPE_MAX 255

/* 0 when `node_type` obeys the rules (and is not empty); otherwise
 * DURABLE_EINVAL with a message naming the type and the rule it breaks. */
int durable_node_type_check(const char *node_type, durable_error_t *err);

/* The owner (main node) of a path: the part before the first segment that
 * begins with '_' ("Space/doc/_DurableStream/Log" -> "Space/doc"), or the path
 * itself.  Writes at most `size` bytes including the NUL; returns the length
 * or DURABLE_EINVAL. */
int durable_path_owner(const char *path, char *out, size_t size);

/* ---- nodes ------------------------------------------------------------- */

/* A saved node.  `content` is JSON text kept byte for byte as written.
 * `version` is a store-wide stamp that grows with each write of any node, so
 * a node's version grows with each of its writes, and also across a delete
 * and a re-create.  Times are milliseconds since the Unix epoch (UTC). */
typedef struct durable_node_s {
  char *ns;   /* namespace: the path without its last segment ("" at top) */
  char *id;   /* the last segment */
  char *path; /* ns + "/" + id, or id when ns is empty */
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

/* Open a store for reading only: gets, queries and stream reads, from a
 * server that may be a PostgreSQL standby (of a URL that lists several
 * hosts, a standby where one answers, unless the URL names its own
 * target_session_attrs), or from an existing SQLite file.  Nothing is
 * written, not even a schema or a new file: a store without durable's
 * schema fails here with DURABLE_ENOTFOUND.  It has no change feed, so
 * durable_store_watch, writes and grants are refused (DURABLE_EINVAL).  A
 * standby answers with what it has replayed: a read may miss the newest
 * commits of the primary, never see them out of order. */
int durable_store_open_read(uv_loop_t *loop, const char *url,
                            durable_store_t **out, durable_error_t *err);

/* Finish every queued request (their callbacks run), stop the store's
 * threads, close its handles and free it.  `cb` (may be NULL) runs on the loop
 * once everything is released; after it the loop has no handle of the store
 * left. */
void durable_store_close(durable_store_t *store, void (*cb)(void *data),
                         void *data);

/* The store as messages and logs name it: the URL it was opened with, as
 * it is when it holds no secret; a PostgreSQL URL that holds a password is
 * shown as libpq's key=value pairs with every secret "***" (so it is a name
 * to show, not a URL to connect with). */
const char *durable_store_name(const durable_store_t *store);

/* This open store's process instance, "HOST:PID:16hex" (at most
 * DURABLE_INSTANCE_MAX bytes with its NUL): unique to one
 * durable_store_open, and the name a lease carries for the process that
 * holds it. */
#define DURABLE_INSTANCE_MAX 80
const char *durable_store_instance(const durable_store_t *store);

/* The result every store callback receives.  Fields not set by an operation
 * are zero/NULL.  Everything is borrowed for the duration of the callback. */
typedef struct durable_result_s {
  int status;                 /* 0, or a negative DURABLE_E* code */
  const char *message;        /* one line when status < 0, else NULL */
  const durable_node_t *node; /* get; the written node for put/create/update */
  const durable_node_t **nodes; /* query: `count` nodes in id order */
  size_t count;
  int more;      /* query: more rows follow the last one */
  int64_t value; /* exists: 0/1; last_sequence: the sequence */
  const struct durable_grant_s *grants; /* durable_store_grants: `count`
                                           grants */
} durable_result_t;

typedef void (*durable_done_cb)(const durable_result_t *result, void *data);

/* ---- principals ---------------------------------------------------------
 *
 * Every read and write names the principal it acts for.  NULL is the
 * platform: the runtime itself and whoever holds the store, who reads and
 * writes everything.  There is no name for the platform: it is the absence
 * of a principal, so no string a user types can become it.  Any other
 * principal is a name that reads and writes what its grants cover (see
 * durable_store_grant), and nothing else.  The rules for a name, checked by
 * durable_principal_check() wherever one is taken:
 *
 *  - 1 to DURABLE_PRINCIPAL_MAX bytes of valid UTF-8;
 *  - no control character (U+0000..U+001F, U+007F..U+009F);
 *  - not "platform": that word is refused (DURABLE_EINVAL) rather than
 *    taken as an ordinary principal, so that someone who means the
 *    platform learns at once that the way to be it is to name no principal,
 *    instead of meeting EACCES everywhere later.
 *
 * Satellites (a stream, its items, a document part) follow their owner
 * (durable_path_owner): whoever may read or write the owner may read or
 * write them, and no one else. */
#define DURABLE_PRINCIPAL_MAX 128

/* 0 when `principal` is a principal's name by the rules above; otherwise
 * DURABLE_EINVAL with a message naming it and the rule it breaks.  NULL is
 * not a name (the platform): DURABLE_EINVAL. */
int durable_principal_check(const char *principal, durable_error_t *err);

/* Get the node at `path` as `principal` (NULL: the platform).  status
 * DURABLE_ENOTFOUND when there is none, DURABLE_EACCES ("principal 'alice'
 * may not read 'Space/doc'") when `principal` may not read its owner --
 * whether or not the node exists, so a denial tells nothing.  A principal
 * that breaks the naming rules is refused (DURABLE_EINVAL). */
int durable_store_get(durable_store_t *store, const char *principal,
                      const char *path, durable_done_cb cb, void *data,
                      durable_error_t *err);

/* Query: "namespace:NS" lists the children of NS, "path:P" the node at P (0
 * or 1 row), "type:T" every node of NodeType T in every namespace and
 * partition (an operator's listing, e.g. "type:DurableStream"; it scans).
 * Rows come in id order (for "type:", path order), at most `limit`
 * (1..1000; 0 means 100), starting after the id (path) `after` (NULL or ""
 * for the first page).  result->more
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

/* ---- writes ------------------------------------------------------------ */

/* A mutator for an atomic read-modify-write.  It runs on the store's writer
 * thread inside the write transaction (so it must not touch the loop, Lua or
 * anything not thread-safe): `current` is the node or NULL when absent.
 * Return 1 after setting `*content` (and optionally `*node_type`) to
 * malloc'ed strings to write them, 0 to write nothing, or a negative code to
 * fail the write (the transaction's other writes are unaffected).  It may run
 * more than once for one request (when a group commit is retried), so it must
 * depend only on `current` and `arg`.  (Lua's update_node cannot run on the
 * writer thread, so it is optimistic instead: it reads, runs its function on
 * the loop and writes at the version it read, starting over on a conflict.) */
typedef int (*durable_mutate_cb)(const durable_node_t *current, char **content,
                                 char **node_type, void *arg);

typedef enum {
  DURABLE_WRITE_PUT = 1, /* create or replace */
  DURABLE_WRITE_CREATE,  /* write once: DURABLE_EEXIST if present */
  DURABLE_WRITE_REPLACE, /* replace only if the version is expected_version:
                            DURABLE_ECONFLICT otherwise, DURABLE_ENOTFOUND
                            when absent */
  DURABLE_WRITE_DELETE,  /* DURABLE_ENOTFOUND if absent */
  DURABLE_WRITE_MUTATE   /* read-modify-write with `mutate` */
} durable_write_kind_t;

const char *durable_write_kind_name(durable_write_kind_t kind);

typedef struct durable_write_s {
  durable_write_kind_t kind;
  const char *path;
  const char *node_type;    /* PUT, CREATE, REPLACE; NULL means "" */
  const char *content;      /* PUT, CREATE, REPLACE: JSON text; NULL means {} */
  int64_t expected_version; /* REPLACE */
  durable_mutate_cb mutate; /* MUTATE */
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

/* The same as `principal` (NULL: the platform, as durable_store_write).  A
 * principal needs a write grant covering the owner of every path written
 * (a read-modify-write, DURABLE_WRITE_MUTATE, also a read grant: its
 * mutator sees the node).  The check is made on the writer thread inside
 * the write's own transaction, against the grants as committed then, so a
 * revoke committed by any process before the write holds.  A denied write
 * fails the whole call with DURABLE_EACCES ("principal 'alice' may not
 * write 'Space/doc'") and writes nothing. */
int durable_store_write_as(durable_store_t *store, const char *principal,
                           const durable_write_t *writes, size_t count,
                           durable_done_cb cb, void *data,
                           durable_error_t *err);

/* One-write conveniences over durable_store_write() (the platform). */
int durable_store_put(durable_store_t *store, const char *path,
                      const char *node_type, const char *content,
                      durable_done_cb cb, void *data, durable_error_t *err);
int durable_store_create(durable_store_t *store, const char *path,
                         const char *node_type, const char *content,
                         durable_done_cb cb, void *data, durable_error_t *err);
int durable_store_delete(durable_store_t *store, const char *path,
                         durable_done_cb cb, void *data, durable_error_t *err);
int durable_store_update(durable_store_t *store, const char *path,
                         durable_mutate_cb mutate, void *arg,
                         durable_done_cb cb, void *data, durable_error_t *err);

/* ---- access ------------------------------------------------------------ */

/* What a grant lets its principal do; a grant holds one or both. */
typedef enum {
  DURABLE_GRANT_READ = 1,  /* get, query, exists, read a stream */
  DURABLE_GRANT_WRITE = 2, /* put, create, replace, delete; publish */
  DURABLE_GRANT_ALL = 3    /* both: also what consuming a stream needs */
} durable_grant_mode_t;

/* "read", "write", "read,write" (the CLI's and Lua's spelling); "unknown"
 * for anything else. */
const char *durable_grant_mode_name(int modes);

/* One grant as durable_store_grants() lists it (borrowed). */
typedef struct durable_grant_s {
  const char *principal;
  const char *prefix;
  int modes; /* DURABLE_GRANT_READ | DURABLE_GRANT_WRITE */
} durable_grant_t;

/* Let `principal` read and/or write (`modes`, DURABLE_GRANT_*) every node
 * whose owner is `prefix` or lies under it (segment-wise: "Space" covers
 * "Space/doc", not "Spaces").  Satellites (streams, their items) follow
 * their owner.  Granting adds to what the principal had on that prefix;
 * revoke takes `modes` back (0: everything on that prefix).  Both are the
 * platform's: the store has no acting principal, and a mesh acting as a
 * principal refuses them (see durable_mesh_options_t.principal).  They take
 * effect for every process on the operations that start after they
 * committed.  DURABLE_EINVAL for a principal that breaks the naming rules,
 * a prefix that is not a path, or modes outside DURABLE_GRANT_ALL. */
int durable_store_grant(durable_store_t *store, const char *principal,
                        const char *prefix, int modes, durable_done_cb cb,
                        void *data, durable_error_t *err);
int durable_store_revoke(durable_store_t *store, const char *principal,
                         const char *prefix, int modes, durable_done_cb cb,
                         void *data, durable_error_t *err);

/* The grants of `principal` (NULL: of every principal), in result->grants
 * (result->count of them), ordered by principal, then prefix. */
int durable_store_grants(durable_store_t *store, const char *principal,
                         durable_done_cb cb, void *data, durable_error_t *err);

/* ---- change feed ------------------------------------------------------- */

typedef enum {
  DURABLE_CHANGE_ADDED = 1,
  DURABLE_CHANGE_UPDATED,
  DURABLE_CHANGE_REMOVED,
  DURABLE_CHANGE_SYNCED /* the initial result is complete (node is NULL) */
} durable_change_kind_t;

const char *durable_change_kind_name(durable_change_kind_t kind);

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
 * (SQLite: within milliseconds, through a doorbell heard by inotify; within
 * about a second should a ring be missed, and within 100 ms where inotify
 * cannot be used; PostgreSQL: LISTEN/NOTIFY, with a re-sync after a lost
 * connection).  The watch keeps the ids and versions of the children it
 * has seen, so its memory follows the namespace's size. */
#define DURABLE_WATCH_INITIAL 1
int durable_store_watch(durable_store_t *store, const char *ns, int flags,
                        durable_change_cb cb, void *data, durable_watch_t **out,
                        durable_error_t *err);

/* Stop a watch; its callback does not run again after this returns. */
void durable_watch_close(durable_watch_t *watch);

/* ---- logging ------------------------------------------------------------ */

typedef enum {
  DURABLE_LOG_ERROR = 1,
  DURABLE_LOG_WARN,
  DURABLE_LOG_INFO,
  DURABLE_LOG_DEBUG
} durable_log_level_t;

const char *durable_log_level_name(durable_log_level_t level);

/* A log sink receives one finished line (no newline) at a time. */
typedef void (*durable_log_cb)(durable_log_level_t level, const char *line,
                               void *data);

/* ---- the mesh and its hubs ---------------------------------------------- */

/* A mesh hosts hubs over a store on one libuv loop.  A hub is an address
 * (a node path, or a client address that is no node) with a mailbox that it
 * drains one message at a time, each message a turn on the loop.  A handler
 * may finish its message later, through its durable_reply_t; other messages
 * of the same hub run meanwhile, which is how a handler reads and writes
 * through its own hub without deadlock.  Nothing runs a handler from inside
 * another handler or from a raw libuv callback: every event becomes a
 * message in a mailbox first.
 *
 *   Starting --init steps--> Started --recycle--> Quiescing --(pending
 *   requests done, or the quiesce budget spent)--> ShutDown --dispose
 *   steps--> Dead; the next message to the address activates a fresh hub.
 */
typedef struct durable_mesh_s durable_mesh_t;
typedef struct durable_hub_s durable_hub_t;
typedef struct durable_node_type_s durable_node_type_t;
typedef struct durable_reply_s durable_reply_t;

typedef enum {
  DURABLE_HUB_STARTING = 1,
  DURABLE_HUB_STARTED,
  DURABLE_HUB_QUIESCING,
  DURABLE_HUB_SHUTDOWN,
  DURABLE_HUB_DEAD
} durable_run_level_t;

const char *durable_run_level_name(durable_run_level_t level);

/* The timings of durable streams, given at open in durable_mesh_options_t
 * (0 fields keep the defaults named here). */
typedef struct durable_stream_options_s {
  uint32_t
      holder_probe_ms; /* a claim waits this long for the holder's ping: 5000 */
  uint32_t reclaim_ms; /* a refused consumer claims again after: 30000 */
  uint32_t backoff_min_ms; /* a failed consumer starts over after: 1000, */
  uint32_t backoff_max_ms; /*   doubling up to: 60000 */
  uint32_t liveness_ms;    /* a host asks whether the other processes holding
                              streams with waiting items are alive: 1000 */
} durable_stream_options_t;

/* A mesh's publish window (durable_mesh_options_t.publish_window): how many
 * publishes (durable_stream_publish*) it has in flight at once.  Below it
 * nothing changes; at it a publish waits, in the order it came, and goes
 * once one in flight has finished; its callback runs as usual.  A waiting
 * publish costs its payload and a small fixed part.  A publish that would
 * take the bytes waiting past waiting_bytes is refused at once, and one that
 * waited max_block_ms fails, and every one waiting behind it (so that none
 * started after it is appended): both with DURABLE_EAGAIN, nothing appended.
 * The first publish while none is in flight always goes.  0 takes the
 * default. */
typedef struct durable_publish_window_s {
  uint32_t items;         /* publishes in flight at most: 1024 */
  uint64_t bytes;         /* their bytes (payload, names, ~100 more): 16 MiB */
  uint64_t waiting_bytes; /* the bytes of those waiting at most: 64 MiB */
  uint32_t max_block_ms;  /* how long a publish may wait: 60000 */
} durable_publish_window_t;

/* What the stream readers of a mesh (its consumers and durable_stream_read
 * readers) may hold at once, read ahead and not handed over yet
 * (durable_mesh_options_t.read_window).  A read asks for what is left (a
 * page of 1,000 at most); a reader refused waits until items are handed
 * over elsewhere, except one that has nothing it could hand over while an
 * item is asked of it, which reads 16 anyway.  Each reader also holds two pages
 * and 4 MiB at most.  0 takes the default. */
typedef struct durable_read_window_s {
  uint32_t items; /* items held by all the readers: 65536 */
  uint64_t bytes; /* their bytes: 64 MiB */
} durable_read_window_t;

typedef struct durable_mesh_options_s {
  const char *store; /* store URL, see durable_store_open() */
  /* The principal the mesh acts as (see "principals" above); NULL: the
   * platform.  Everything the mesh does on a caller's behalf is then
   * checked against its grants: node reads, queries and writes (hubs' and
   * handlers' too), mesh reads, publishing (write on the stream's owner),
   * reading a stream (read on its owner) and consuming one (read and
   * write).  The runtime's own work for it -- a stream hub appending what
   * was published, activating a hub -- stays the platform's.  C code that
   * holds the store itself (durable_mesh_store) speaks for the platform. */
  const char *principal;
  uint32_t quiesce_budget_ms;  /* how long a recycle waits; 0: 2000 */
  uint32_t request_timeout_ms; /* for requests that give none; 0: 30000 */
  durable_log_cb log;          /* NULL: stderr, filtered by DURABLE_LOG */
  void *log_data;
  durable_stream_options_t streams; /* stream timings; zeros: defaults */
  /* A store URL that unleased stream readers (durable_stream_read) read
   * from, opened with durable_store_open_read: a PostgreSQL standby, to
   * take reads off the primary.  The live tail still comes from `store`'s
   * change feed (a standby has none): an append heard there is read from
   * here once this server has replayed it, so a reader keeps its order,
   * no gap, no duplicate.  Consumers, hubs and every node read stay on
   * `store`.  NULL: `store` serves every read. */
  const char *read_store;
  durable_publish_window_t publish_window; /* zeros: the defaults */
  durable_read_window_t read_window;       /* zeros: the defaults */
} durable_mesh_options_t;

/* Open a mesh on `loop` over the store `options->store`.  Returns 0 and sets
 * *out, or a negative code with `err` filled (an unreachable store is
 * reported here). */
int durable_mesh_open(uv_loop_t *loop, const durable_mesh_options_t *options,
                      durable_mesh_t **out, durable_error_t *err);

/* Recycle every hub, close the store and free the mesh; `cb` (may be NULL)
 * runs once everything is released and the loop holds nothing of the mesh.
 * Requests still pending are answered DURABLE_ESHUTDOWN. */
void durable_mesh_close(durable_mesh_t *mesh, void (*cb)(void *data),
                        void *data);

durable_store_t *durable_mesh_store(durable_mesh_t *mesh);
/* The store unleased readers read from: the read store when the mesh has
 * one (durable_mesh_options_t.read_store), else the store.  For a read
 * that may lag the primary: an operator's listing, a report. */
durable_store_t *durable_mesh_read_store(durable_mesh_t *mesh);
/* The principal the mesh acts as, or NULL for the platform. */
const char *durable_mesh_principal(const durable_mesh_t *mesh);
uv_loop_t *durable_mesh_loop(durable_mesh_t *mesh);

/* Write one line to the mesh's log sink at `level` (printf-style). */
void durable_mesh_log(durable_mesh_t *mesh, durable_log_level_t level,
                      const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

typedef struct durable_mesh_stats_s {
  uint64_t activations;      /* hubs built for node addresses */
  uint64_t recycles;         /* hubs that reached Dead through a recycle */
  uint64_t quiesce_timeouts; /* recycles whose budget ran out */
  uint64_t messages;         /* messages handled */
  uint64_t read_reprobes; /* mesh reads that met ShuttingDown and asked again */
  size_t active_hubs;
} durable_mesh_stats_t;

void durable_mesh_stats(const durable_mesh_t *mesh, durable_mesh_stats_t *out);

/* The publish window now (durable_publish_window_t) and since the open. */
typedef struct durable_publish_stats_s {
  uint64_t in_flight, in_flight_bytes; /* publishes sent, not answered */
  uint64_t waiting, waiting_bytes;     /* publishes waiting for room */
  uint64_t waited;                     /* publishes that waited, then went */
  uint64_t refused; /* refused at once: waiting_bytes would be passed */
  uint64_t expired; /* failed after waiting max_block_ms */
} durable_publish_stats_t;

void durable_mesh_publish_stats(durable_mesh_t *mesh,
                                durable_publish_stats_t *out);

/* The read window now: items and bytes its readers hold (and ask for),
 * and the readers waiting for room. */
typedef struct durable_read_stats_s {
  uint64_t held, held_bytes, waiting;
} durable_read_stats_t;

void durable_mesh_read_stats(durable_mesh_t *mesh, durable_read_stats_t *out);

/* ---- messages, requests, replies ---------------------------------------- */

/* A message as a handler sees it (borrowed for the handler's turn). */
typedef struct durable_msg_s {
  const char *type;    /* e.g. "ping" or an application's name */
  const char *payload; /* JSON text; "null" when none was given */
  const char *sender;  /* the sending hub's address */
  uint64_t request_id; /* 0 for a post: nobody awaits a reply */
} durable_msg_t;

/* The answer to a request.  status: 0, or
 *   DURABLE_ENOTFOUND  no node at that address
 *   DURABLE_ESHUTDOWN  the hub is recycling (ask again), or the sender is
 *   DURABLE_EFAILED    the handler failed; `message` says why
 *   DURABLE_ETIMEDOUT  no answer within the timeout
 *   or a store error while activating (DURABLE_EUNAVAIL, DURABLE_EIO). */
typedef struct durable_response_s {
  int status;
  const char *payload; /* JSON text when status is 0 */
  const char *message; /* one line when status < 0 */
} durable_response_t;

typedef void (*durable_response_cb)(const durable_response_t *response,
                                    void *data);

/* Send a request from `from` to the hub at `to` (activated if need be).
 * `payload` is JSON text (NULL: null).  `cb` runs once, as a turn of `from`.
 * timeout_ms 0 takes the mesh's default.  Returns DURABLE_ESHUTDOWN at once
 * when `from` is quiescing or dead: a leaving hub starts nothing new. */
int durable_hub_request(durable_hub_t *from, const char *to, const char *type,
                        const char *payload, uint32_t timeout_ms,
                        durable_response_cb cb, void *data,
                        durable_error_t *err);

/* Send a message nobody awaits.  A post to a hub that is recycling waits and
 * reaches its next activation; a post to an address with no node is
 * dropped (logged at debug level). */
int durable_hub_post(durable_hub_t *from, const char *to, const char *type,
                     const char *payload, durable_error_t *err);

/* Finish the message a handler was given: exactly one of these, once, now or
 * later (from any turn on the loop thread).  Until then the message counts
 * as pending in its hub and a recycle waits for it.  `payload` is JSON text
 * (NULL: null).  For a post the payload is dropped and a failure is logged.
 * The reply is freed by the call. */
void durable_reply_ok(durable_reply_t *reply, const char *payload);
void durable_reply_fail(durable_reply_t *reply, int code, const char *message);

/* Finish the message with `writes` committed in one transaction, all or
 * none: put, create, replace and delete writes (a mutator would have to
 * outlive the handler: read the node, then replace it at the version read).
 *
 *  - For a stream item (durable_item_handler_cb's `done`) the writes are the
 *    item's effects: they commit in the SAME transaction as its
 *    acknowledgement, and only while this consumer still holds the lease.
 *    Lost lease: nothing is written and the consumer claims again.  A write
 *    the database refuses (a replace whose version moved, a create of a
 *    present node): nothing is written, the item is not acknowledged, and
 *    it is handed again after the backoff -- so its handler reads again.
 *    That is exactly once for effects inside the mesh, and one commit per
 *    item.
 *  - For a message: the writes commit, then the sender gets `payload` (JSON
 *    text, NULL: null), or the write's failure.
 *
 * Returns 0 (the reply is finished, now or once written), or a negative
 * code when the writes are refused as arguments (`err` says which and why);
 * then the reply is NOT finished and the handler still owns it. */
int durable_reply_commit(durable_reply_t *reply, const char *payload,
                         const durable_write_t *writes, size_t count,
                         durable_error_t *err);

/* ---- node types -----------------------------------------------------------
 */

typedef void (*durable_handler_cb)(durable_hub_t *hub, const durable_msg_t *msg,
                                   durable_reply_t *reply, void *data);
/* An initialisation step: finish `done` (durable_reply_ok, or _fail to
 * refuse the activation: queued requests then get the failure). */
typedef void (*durable_step_cb)(durable_hub_t *hub, durable_reply_t *done,
                                void *data);
/* A dispose action: runs once the hub has quiesced, before it is dead. */
typedef void (*durable_dispose_cb)(durable_hub_t *hub, void *data);

/* The configuration of NodeType `name`, made on first use.  Hubs of nodes
 * whose type has none are plain hubs (they answer ping).  Configure before
 * the first activation of that type. */
durable_node_type_t *durable_node_type_get(durable_mesh_t *mesh,
                                           const char *name);

/* Handle messages of `type` ("ping" is built in and cannot be replaced;
 * names beginning with "durable." belong to the runtime: DURABLE_EINVAL). */
int durable_node_type_on(durable_node_type_t *type, const char *msg_type,
                         durable_handler_cb cb, void *data,
                         durable_error_t *err);
int durable_node_type_on_init(durable_node_type_t *type, durable_step_cb cb,
                              void *data);
int durable_node_type_on_dispose(durable_node_type_t *type,
                                 durable_dispose_cb cb, void *data);

/* ---- hubs ------------------------------------------------------------------
 */

/* The client hub at `address` (made if need be; an address that is no
 * node, e.g. "client/app").  Client hubs live until recycled or the mesh
 * closes.  The pointer is borrowed: hold it with durable_hub_ref() past the
 * current turn. */
int durable_mesh_client(durable_mesh_t *mesh, const char *address,
                        durable_hub_t **out, durable_error_t *err);

/* The active hub at `address`, or NULL (borrowed).  The runtime's own hub,
 * which issues its reads, is never found on a mesh acting as a principal. */
durable_hub_t *durable_mesh_find(durable_mesh_t *mesh, const char *address);

typedef void (*durable_status_cb)(int status, const char *message, void *data);

/* Activate the hub of the node at `address`: cb(0) once it is Started,
 * cb(DURABLE_ENOTFOUND) when there is no node.  A mesh acting as a
 * principal needs read on the node's owner: cb(DURABLE_EACCES) otherwise,
 * whether or not a node is there, and nothing is activated. */
int durable_mesh_activate(durable_mesh_t *mesh, const char *address,
                          durable_status_cb cb, void *data,
                          durable_error_t *err);

/* Recycle the hub at `address`: cb(0) once it is dead (at once when none is
 * active). */
int durable_mesh_recycle(durable_mesh_t *mesh, const char *address,
                         durable_status_cb cb, void *data,
                         durable_error_t *err);

/* A mesh read of a node: its hub is activated (so its consumers start), then
 * the node is read.  A hub answering ShuttingDown is never taken for an
 * absent node: the read waits for that activation to end and probes exactly
 * once more, then reports UNAVAILABLE if it still cannot tell. */
typedef enum {
  DURABLE_READ_PRESENT = 1,
  DURABLE_READ_ABSENT,
  DURABLE_READ_UNAVAILABLE,
  DURABLE_READ_DENIED /* the mesh's principal may not read it (checked
                         before anything is activated) */
} durable_read_outcome_t;

const char *durable_read_outcome_name(durable_read_outcome_t outcome);

typedef void (*durable_read_cb)(durable_read_outcome_t outcome,
                                const durable_node_t *node, const char *message,
                                void *data);

int durable_mesh_read(durable_mesh_t *mesh, const char *path,
                      durable_read_cb cb, void *data, durable_error_t *err);

/* Keep a hub's memory past the current turn; durable_hub_unref lets it go.
 * A dead hub stays readable (address, run level) while referenced. */
void durable_hub_ref(durable_hub_t *hub);
void durable_hub_unref(durable_hub_t *hub);

const char *durable_hub_address(const durable_hub_t *hub);
const char *durable_hub_node_type(const durable_hub_t *hub); /* "" client */
durable_run_level_t durable_hub_run_level(const durable_hub_t *hub);
durable_mesh_t *durable_hub_mesh(durable_hub_t *hub);
/* A number that differs for each activation of an address. */
uint64_t durable_hub_incarnation(const durable_hub_t *hub);

/* One pointer for the application (or a binding) per hub activation;
 * `free_cb` (may be NULL) runs when the hub is freed. */
void durable_hub_set_data(durable_hub_t *hub, void *data,
                          void (*free_cb)(void *data));
void *durable_hub_data(const durable_hub_t *hub);

/* Post `type`/`payload` to the hub itself after `ms` milliseconds (a timer
 * never runs a handler directly).  A timer armed before a recycle still
 * fires while the hub quiesces (a handler in flight may wait for it); no
 * new timer starts then, and timers end when the hub is dead. */
int durable_hub_post_after(durable_hub_t *hub, uint32_t ms, const char *type,
                           const char *payload, durable_error_t *err);

/* ---- durable streams ------------------------------------------------------
 */

/* A durable stream is saved nodes, satellites of its owner `key`:
 *
 *   {key}/_DurableStream/{ns}                                  DurableStream
 *   {key}/_DurableStream/{ns}/_DurableStreamItem/000000000001 DurableStreamItem
 *
 * The stream node carries LastSequence, the lease (Subscriber, LeaseEpoch,
 * SubscribedAt), the acknowledged Checkpoint (CheckpointAt) and the orphan
 * stamp (OrphanedAt, LastSubscriber); each item is a write-once node
 * {Sequence, PayloadJson, AppendedAt} whose id is its 12-digit sequence.
 * The stream node's hub runs every append, claim, ack and release of the
 * stream through one serial chain; appends and acks waiting in it together
 * share one store transaction. */
typedef struct durable_stream_id_s {
  const char *ns;  /* the family, e.g. "DocumentLog": non-empty, no '/' */
  const char *key; /* the owner's path */
} durable_stream_id_t;

/* 0, or DURABLE_EINVAL with a message naming the rule ("A durable stream needs
 * a non-empty Namespace without '/' (was '...')", "Durable stream '...' needs
 * the owning node's path as Key."), or the path rule the key breaks. */
int durable_stream_check(const durable_stream_id_t *id, durable_error_t *err);

/* "{key}/_DurableStream/{ns}" and its items namespace; DURABLE_EINVAL when
 * `size` is too small. */
int durable_stream_path(const durable_stream_id_t *id, char *out, size_t size);
int durable_stream_items_ns(const durable_stream_id_t *id, char *out,
                            size_t size);

/* One item as a consumer or reader sees it (borrowed for the callback). */
typedef struct durable_item_s {
  durable_stream_id_t stream;
  int64_t sequence;    /* from 1, contiguous per stream */
  const char *payload; /* JSON text exactly as produced */
  int64_t appended_at; /* ms since the epoch; 0 when the source has none */
  const durable_node_t *node; /* the node the item was read from */
} durable_item_t;

/* Append `payload` (JSON text, kept byte for byte) to the stream, on behalf
 * of `hub` (the request goes out from the read-issuing hub, so a quiescing
 * hub may publish).  The stream node is made on first use, once per stream
 * per process.  `cb` gets the sequence once the item is saved, or a failure
 * ("Appending to durable stream NS@KEY failed: ...").  A hub of a mesh
 * acting as a principal needs write on the key's owner: checked before
 * anything is made or sent, else DURABLE_EACCES ("... failed: principal
 * 'alice' may not write 'Space/doc'") and nothing is appended. */
typedef void (*durable_sequence_cb)(int status, int64_t sequence,
                                    const char *message, void *data);
int durable_stream_publish(durable_hub_t *hub, const durable_stream_id_t *id,
                           const char *payload, durable_sequence_cb cb,
                           void *data, durable_error_t *err);

/* An operator's replay or skip: set the acknowledged checkpoint of the
 * stream to `sequence` (0 to its last sequence), with a new lease epoch and
 * the lease let go, so that its holder -- in whatever process -- is fenced,
 * claims again and resumes after `sequence` (the item it has begun may be
 * handed over once more).  Logged by the stream's hub ("checkpoint moved
 * from A to N by ...").  `cb` gets the checkpoint it was at, or a failure
 * ("Moving the checkpoint of durable stream NS@KEY failed: ..."; a stream
 * that does not exist is DURABLE_ENOTFOUND, a sequence past its last
 * DURABLE_EINVAL).  A mesh acting as a principal needs write on the key's
 * owner. */
int durable_stream_seek(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t sequence, durable_sequence_cb cb, void *data,
                        durable_error_t *err);

/* The same for consumer group `group` of the stream: its checkpoint set to
 * `sequence`, its lease let go ("... group G: checkpoint moved ..."); a
 * group that does not exist is DURABLE_ENOTFOUND, a sequence below what was
 * trimmed DURABLE_EINVAL.  This is how a group behind a trim goes on. */
int durable_group_seek(durable_mesh_t *mesh, const durable_stream_id_t *id,
                       const char *group, int64_t sequence,
                       durable_sequence_cb cb, void *data,
                       durable_error_t *err);
/* Delete consumer group `group` of the stream (its node and failure record):
 * refused (DURABLE_ECONFLICT) while a consumer holds it, unless `force`,
 * which fences that consumer first.  A consumer that still declares the
 * group makes it anew at its next claim, at its start.  `cb` gets the
 * checkpoint the group had. */
int durable_group_delete(durable_mesh_t *mesh, const durable_stream_id_t *id,
                         const char *group, int force, durable_sequence_cb cb,
                         void *data, durable_error_t *err);

/* An operator's trim: delete the stream's items 1 .. `through`, which must
 * be acknowledged (through <= the checkpoint) unless `force`, which first
 * moves the checkpoint to `through` as durable_stream_seek does.  The
 * stream node records TrimmedThrough before any item goes, so a reader
 * asking for a trimmed item fails with DURABLE_ENOTFOUND ("... items up to
 * N were trimmed ...") instead of waiting; the items are deleted oldest
 * first in small transactions that never hold appends up for long (a trim
 * cut off half-way is finished by trimming again).  Publish ids stay.  `cb`
 * gets the number of items deleted, or a failure ("Trimming durable stream
 * NS@KEY failed after K item(s): ...").  A mesh acting as a principal needs
 * write on the key's owner. */
int durable_stream_trim(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t through, int force, durable_sequence_cb cb,
                        void *data, durable_error_t *err);

/* A trim that passes consumer group `group` knowingly: the group's
 * checkpoint is first moved forward to `through` when it is behind, as
 * durable_group_seek does (its holder fenced; it goes on after `through`;
 * a group at or past it is left as it is), then the stream is trimmed as
 * durable_stream_trim does -- still held back by every other consumer that
 * has not acknowledged `through`, unless `force`.  The group's move stays
 * when the trim is then refused.  A group that does not exist is
 * DURABLE_ENOTFOUND.  `cb` gets the number of items deleted. */
int durable_group_trim(durable_mesh_t *mesh, const durable_stream_id_t *id,
                       const char *group, int64_t through, int force,
                       durable_sequence_cb cb, void *data,
                       durable_error_t *err);

/* An operator's delete: the stream node, all its items and its publish ids
 * go.  Refused with DURABLE_ECONFLICT while a consumer holds the stream
 * ("... is held by HUB (process P) ..."), unless `force`, which lets the
 * lease go under a new epoch first, so that the holder -- in whatever
 * process -- is fenced: its next acknowledgement is refused and it waits,
 * dormant, for the stream to exist again.  The stream is first marked
 * DeletingAt (from then on appends, claims, seeks and trims are refused
 * with DURABLE_ENOTFOUND, "... is being deleted ..."), then its items and
 * ids are deleted in small transactions, and the node last; a delete cut
 * off half-way is finished by deleting again.  A later publish makes a new
 * stream, from sequence 1, and a publish id used before is new again.
 * The dead-letter stream {ns}.dead is a stream of its own and stays.  `cb`
 * gets the number of items deleted, or a failure ("Deleting durable stream
 * NS@KEY failed after K item(s): ...").  A mesh acting as a principal
 * needs write on the key's owner. */
int durable_stream_delete(durable_mesh_t *mesh, const durable_stream_id_t *id,
                          int force, durable_sequence_cb cb, void *data,
                          durable_error_t *err);

/* ---- seeing streams: status, counters, metrics ------------------------- */

/* One stored stream as an operator sees it (durable_stream_statuses).
 * Strings and `node` are borrowed for the callback; times are ms since the
 * epoch, 0 for none. */
typedef struct durable_stream_status_s {
  durable_stream_id_t stream;
  const char *path;           /* the stream node's path */
  const durable_node_t *node; /* the stream node itself */
  int64_t last_sequence, checkpoint;
  int64_t lag; /* last - checkpoint, less sequences lost (lost_from ..
                  lost_to); 0 when the checkpoint is ahead (a stream read
                  from a custom source) */
  int64_t lease_epoch, trimmed_through;
  const char *subscriber;          /* the lease holder, NULL for none */
  const char *subscriber_instance; /* ... its process, HOST:PID:16hex */
  int64_t orphaned_at;
  /* when item checkpoint + 1 was appended: the age of the backlog; 0 when
   * the lag is 0 or that item is not a stored item (a custom source) */
  int64_t oldest_appended_at;
  /* the items of the dead-letter stream {ns}.dead of the same key (its
   * LastSequence less its TrimmedThrough); 0 when there is none */
  int64_t dead_letters;
  /* The consumer is failing on item checkpoint + 1: it failed `attempts`
   * times in a row (in whatever process), last at `failed_at`, with
   * `last_error`.  0 and NULL when it is not (the failing consumer records
   * this; an item that then succeeds or is dead-lettered clears it). */
  int attempts;
  const char *last_error;
  int64_t failed_at;
  /* The lease's history: the last holder (NULL for none; it stays after
   * the lease is let go, when `subscriber` is NULL), when the lease was
   * last granted, and when the checkpoint last moved. */
  const char *last_subscriber;
  int64_t subscribed_at, checkpoint_at;
  /* how many items the last acknowledgement covered, once one covered
   * more than one (a batch handler's: LastBatch); 0 until then */
  int64_t last_batch;
  /* Stopped because the store went back (a failover to a standby that had
   * not received every commit): what a process had seen of the stream --
   * its last sequence, checkpoint and epoch -- while nothing is appended or
   * handed over; `last_error` then says so and names the seek that goes
   * on.  All 0 otherwise.  And once a seek went on past such a loss, the
   * sequences lost_from .. lost_to that are never there (0, 0: none). */
  int64_t seen_last, seen_checkpoint, seen_epoch;
  int64_t lost_from, lost_to;
  /* A consumer group's status (it follows its stream's): the group's name,
   * and the lease, checkpoint, lag, oldest item, failure and dead letters
   * ({ns}.dead.{group}) are the group's; `path` and `node` its node's; the
   * start it was made with, and when it was detached (0: it pins the
   * stream's trim).  NULL and 0 for the stream's own status, where
   * `groups` counts its groups -- a stream consumed only in groups (never
   * claimed on its own) shows no lag of its own. */
  const char *group;
  const char *start;
  int64_t detached_at;
  int groups;
} durable_stream_status_t;

typedef void (*durable_stream_status_cb)(const durable_stream_status_t *status,
                                         void *data);
/* List every stored stream (every DurableStream node, as `principal` may
 * read them; NULL: the platform) whose family `want(ns, data)` accepts
 * (NULL: every one), in path order, each followed by its consumer groups:
 * `each` once per stream and once per group, then `done`
 * once, with 0 or a failure (after which `each` runs no more).  It reads
 * the stream nodes and the failure records in pages and, per stream with a
 * lag, its oldest unacknowledged item: O(streams), never O(items).  Nothing
 * is held: the store answers on the loop.  Returns 0, or a negative code
 * with `err` (then no callback runs). */
int durable_stream_statuses(durable_store_t *store, const char *principal,
                            int (*want)(const char *ns, void *data),
                            durable_stream_status_cb each,
                            durable_status_cb done, void *data,
                            durable_error_t *err);

/* What this process did with one stream since its mesh opened. */
typedef struct durable_stream_stats_s {
  uint64_t appended;      /* items this process appended to it */
  uint64_t handled;       /* items its consumer here handled and acknowledged */
  uint64_t failed;        /* handler failures (an unreadable item, refused
                             effects too): each counts */
  uint64_t redelivered;   /* items handed to a handler here again, after
                             they had been handed here before (a retry, a
                             claim again, a replay) */
  uint64_t dead_lettered; /* items moved to its dead letters (max_attempts) */
  uint64_t trimmed;       /* items a trim made here deleted */
  uint64_t batches;       /* acknowledgements of a batch handler's calls
                             here: `handled` / `batches` is the mean batch */
  /* NULL: the counts of the stream's own consumer (and its producers,
   * trims); a name: those of that consumer group's consumer, counted
   * apart (each group handles every item once) */
  const char *group;
  uint64_t detached; /* a group's: times a trim here detached it */
} durable_stream_stats_t;

typedef void (*durable_stream_stats_cb)(const durable_stream_id_t *stream,
                                        const durable_stream_stats_t *stats,
                                        void *data);
/* Call `cb` once for every stream this mesh has counted something for (in
 * no particular order; `stream` and `stats` are borrowed for the call).
 * It must not publish, consume or close from `cb`. */
void durable_mesh_stream_stats(durable_mesh_t *mesh, durable_stream_stats_cb cb,
                               void *data);

/* Serve the Prometheus text format (0.0.4) at http://ADDRESS/metrics, on
 * the mesh's loop, until the mesh closes: per family this process consumes,
 * the lag and the oldest unacknowledged item's age over its stored streams
 * (read at each scrape with durable_stream_statuses), the counters of
 * durable_mesh_stream_stats summed per family, and the process's figures.
 * `address` is "IPV4:PORT", "[IPV6]:PORT" or "localhost:PORT" (port 0:
 * one the system picks; the log says which, at info).  Only that address
 * is bound.  Returns 0, or DURABLE_EINVAL for an address that is not one
 * of those, DURABLE_EEXIST when the mesh serves already, DURABLE_EIO when
 * it cannot be bound (in use: the message says so). */
int durable_mesh_serve_metrics(durable_mesh_t *mesh, const char *address,
                               durable_error_t *err);

/* Idempotent publishing.  A publish may carry an id of the producer's
 * choosing (an order number, a UUID, "import-42:7"): the stream remembers
 * each id it appended, in a write-once node
 * "{key}/_DurableStream/{ns}/_DurableStreamId/{id}" with content
 * {"Sequence":N}, created in the same transaction as the item.  A publish
 * whose id the stream already holds completes with the sequence that id got
 * the first time and appends nothing: a retry after a failure or a cut
 * connection (which may or may not have committed) is safe, from this
 * process or any other, on both stores -- the node table's primary key
 * decides, not a cache.  Ids are per stream; one publish id names one item.
 * An id is remembered as long as its node exists: a trim deletes items,
 * never ids (durable_stream_trim), so a retried publish of a trimmed item
 * is still answered with its sequence; deleting the stream removes its ids
 * (durable_stream_delete).
 *
 * An id is one path segment of 1 to DURABLE_PUBLISH_ID_MAX bytes: valid
 * UTF-8, no '/', no backslash, no control character, not "." or "..", and its
 * node's path must fit DURABLE_PATH_MAX.  Appends without an id cost what
 * they did. */
#define DURABLE_PUBLISH_ID_MAX 128

/* 0 when `id` obeys the rules above -- with `stream` (may be NULL: the id
 * alone), also the length of its node's path in that stream, whose own
 * check comes first; otherwise DURABLE_EINVAL with a message naming the id
 * and the rule ("publish id 'a/b' is invalid: '/' is not allowed"). */
int durable_publish_id_check(const durable_stream_id_t *stream, const char *id,
                             durable_error_t *err);

/* 0 when `payload` is one for `stream` by the rule every publish applies
 * (JSON text that jansson reads, integers within 64 bits, not empty and
 * not null; see doc/design.md, "What a payload is"); otherwise DURABLE_EINVAL
 * with a message naming the rule ("A durable stream item for NS@KEY needs a
 * payload.", "... is not JSON: ..."), the stream's own check first.  So a
 * payload can be refused before anything is opened. */
int durable_stream_payload_check(const durable_stream_id_t *stream,
                                 const char *payload, durable_error_t *err);

/* What a publish may say beyond its payload; zero it, then set fields
 * (more may be added; zero keeps today's meaning). */
typedef struct durable_publish_options_s {
  const char *id; /* the publish id (see above), or NULL: none */
  /* A publish that makes a stream whose owner (the key) has no node logs
   * a WARN (no host consumes such a stream until one is put there: a typo
   * in the key or the family?); set, the caller says it means it -- a
   * stream read by its key alone (durable_hub_consume), an owner made
   * later -- and nothing is said. */
  int no_owner;
} durable_publish_options_t;

/* durable_stream_publish with `options` (NULL: none).  A publish id that
 * breaks the rules, or whose node's path would be too long for the stream,
 * is refused here with DURABLE_EINVAL, before anything is written; `cb`
 * then never runs.  A duplicate completes with status 0 and the first
 * sequence. */
int durable_stream_publish_with(durable_hub_t *hub,
                                const durable_stream_id_t *id,
                                const char *payload,
                                const durable_publish_options_t *options,
                                durable_sequence_cb cb, void *data,
                                durable_error_t *err);

/* An append to another stream, made by a stream item's handler as one of
 * its effects. */
typedef struct durable_publish_s {
  durable_stream_id_t stream;
  const char *payload; /* JSON text */
} durable_publish_t;

/* durable_reply_commit, and with it appends to other streams (a stream
 * item's handler only: DURABLE_EINVAL for a message).  Each append is
 * recorded in the same transaction as the item's acknowledgement (an outbox
 * node, {stream's key}/_DurableOutbox/{id}), then appended with that id as
 * its publish id and the outbox node removed.  An append recorded but not
 * yet made when its process dies is made by the next holder of the
 * consumer when it claims again; the id keeps it to one item. */
int durable_reply_commit_with(durable_reply_t *reply, const char *payload,
                              const durable_write_t *writes, size_t count,
                              const durable_publish_t *publishes,
                              size_t npublishes, durable_error_t *err);

/* Where a stream's items are read from.  The default (a NULL source) is the
 * stream's own item nodes.  A custom source names a namespace whose children
 * are the items, a node -> sequence function (1-based, contiguous; <= 0 for
 * "not an item") and a node -> payload function (a malloc'ed JSON text, or
 * a negative code with `err` filled: the reader stops at that item).  The
 * lease and checkpoint still live on the stream node. */
typedef struct durable_source_s {
  const char *items_ns;
  int64_t (*sequence_of)(const durable_node_t *node, void *data);
  int (*payload_of)(const durable_node_t *node, char **payload,
                    durable_error_t *err, void *data);
  void *data;
} durable_source_t;

/* A document's `{doc}/_DocumentPart/{index:D6}` children as a source:
 * sequence = index + 1, payload = the part's content; ids that are not
 * exactly six digits are not items.  `items_ns` must have room for the
 * path. */
int durable_source_document_parts(const char *doc_path, char *items_ns,
                                  size_t size, durable_source_t *out);

/* A plain, unleased reader: every item after `after`, in order, gap-free
 * (an item ahead of a missing one waits for it, a duplicate is dropped),
 * the backlog then the live tail, until closed.  No acknowledgement.
 * `cb` gets status 0 and an item, or a failure (an unreadable payload: the
 * reader stops there).  Every read is made as the mesh's principal: one
 * that may not read the items' owner gets DURABLE_EACCES at the first read,
 * and no item. */
typedef struct durable_reader_s durable_reader_t;
typedef void (*durable_reader_cb)(durable_reader_t *reader, int status,
                                  const durable_item_t *item,
                                  const char *message, void *data);
int durable_stream_read(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t after, const durable_source_t *source,
                        durable_reader_cb cb, void *data,
                        durable_reader_t **out, durable_error_t *err);
/* No callback runs after this returns. */
void durable_reader_close(durable_reader_t *reader);

/* Flow control, as uv_read_stop / uv_read_start: after pause, at most the
 * item already asked for arrives, and no other until resume (a reader that
 * hands its items to a queue keeps the queue bounded this way). */
void durable_reader_pause(durable_reader_t *reader);
void durable_reader_resume(durable_reader_t *reader);

/* Retention: how long a stream family keeps its acknowledged items.  An
 * unacknowledged item is never deleted.  The text of a policy, the same
 * everywhere (C, Lua, `durable retention`):
 *   "all"       keep every item (the default: a zeroed struct)
 *   "N"         keep the newest N acknowledged items; "0" deletes each one
 *               once it is acknowledged
 *   "DURATION"  keep an acknowledged item that long after its append:
 *               "500ms", "30s", "15m", "12h", "7d"
 * Items go in small batches, shortly after they become due (within about
 * a quarter second of the acknowledgement that makes them so), through the
 * same trim as durable_stream_trim: a reader asking for one is told it was
 * trimmed. */
typedef enum {
  DURABLE_KEEP_ALL = 0,
  DURABLE_KEEP_COUNT, /* `count` acknowledged items */
  DURABLE_KEEP_AGE    /* acknowledged items for `age_ms` after their append */
} durable_keep_t;
typedef struct durable_retention_s {
  durable_keep_t keep;
  int64_t count;
  int64_t age_ms;
} durable_retention_t;
/* Parse a policy's text (NULL: "all"); DURABLE_EINVAL with a message naming
 * it and what a policy is. */
int durable_retention_parse(const char *text, durable_retention_t *out,
                            durable_error_t *err);
/* Its text ("all", "1000", "7d"; the largest unit that divides it). */
void durable_retention_format(const durable_retention_t *policy, char *out,
                              size_t size);
/* An operator's policy for the whole family, over what its consumers
 * declare, in every process (read back within about 5 s): stored as the
 * node DurableRetention/{family} {"Policy":"7d"}.  `policy` NULL removes
 * it (the consumers' own apply again).  `cb` gets 0 once it is stored.  A
 * mesh acting as a principal needs write on DurableRetention/{family}. */
int durable_mesh_set_retention(durable_mesh_t *mesh, const char *family,
                               const char *policy, durable_status_cb cb,
                               void *data, durable_error_t *err);

/* A leased consumer: the hub holding it claims the stream, handles each item
 * after the acknowledged checkpoint in order, one at a time (or in batches:
 * durable_batch_handler_cb), as a turn of the hub, acknowledges it after
 * `handler` finishes `done`, and releases
 * the lease when the hub leaves (after the item in flight).  Dormant until
 * the stream exists.  A failure stops at the item, is logged ("... was NOT
 * acknowledged ..."), and the consumer starts over from the claim after a
 * backoff.  In a mesh acting as a principal, each claim first needs read
 * and write on the key's owner; a denial is such a failure ("principal
 * 'alice' may not write 'Space/doc'"): nothing is claimed. */
typedef void (*durable_item_handler_cb)(durable_hub_t *hub,
                                        const durable_item_t *item,
                                        durable_reply_t *done, void *data);

/* A batch handler: `count` (>= 1) consecutive items of the stream, in
 * order, with no gap (items[i].sequence == items[0].sequence + i), borrowed
 * for the call.  `done` is finished as for one item, and covers them all:
 * durable_reply_ok or durable_reply_commit(_with) acknowledges the batch's
 * last item, with the writes and appends, in ONE transaction under the
 * lease -- a lost lease writes nothing, a process killed before the commit
 * hands the whole batch over again, its effects never written.
 * durable_reply_fail, or durable_reply_fail_at naming the item that
 * failed, writes nothing of the batch; then the failure stops at the item,
 * not at the batch: the items before the named one are handed again (in
 * batches, as the bounds allow) and acknowledged without it, and the named one
 * is handed alone and gets what one failing item gets (the backoff,
 * max_attempts, the dead letters).  A failure that names no item (or one
 * outside the batch) hands the batch's items over one at a time to find it.
 * Batches resume after the failing item. */
typedef void (*durable_batch_handler_cb)(durable_hub_t *hub,
                                         const durable_item_t *items,
                                         size_t count, durable_reply_t *done,
                                         void *data);

/* How a batch is formed: from the items already read after the checkpoint,
 * up to `items` of them and `bytes` of payload (a first item larger than
 * `bytes` goes alone); with nothing more read, the batch goes as it is,
 * unless `wait_ms` asks to wait that long for more (while it waits, items
 * that arrive join it until it is full).  Zero `bytes` is no byte bound. */
typedef struct durable_batch_s {
  uint32_t items; /* 1 to DURABLE_BATCH_ITEMS_MAX */
  size_t bytes;
  uint32_t wait_ms; /* at most DURABLE_BATCH_WAIT_MAX_MS */
} durable_batch_t;
#define DURABLE_BATCH_ITEMS_MAX 10000
#define DURABLE_BATCH_WAIT_MAX_MS 60000

/* Fail a batch handler's `done` at item `sequence` (see
 * durable_batch_handler_cb).  For any other reply it is durable_reply_fail
 * (the sequence is not used). */
void durable_reply_fail_at(durable_reply_t *reply, int64_t sequence, int code,
                           const char *message);

/* Consumer groups.  A consumer that names a group is one of several
 * independent consumers of the stream: the group has its own lease, epoch,
 * checkpoint, failure record and dead letters ({ns}.dead.{group}), saved in
 * the node {stream path}/_DurableStreamGroup/{group} (durable_group_path),
 * which the group's first claim on an existing stream makes.  A group name
 * is 1 to DURABLE_GROUP_MAX bytes of letters, digits, '.', '_' and '-',
 * starting with a letter or a digit. */
#define DURABLE_GROUP_MAX 64
#define DURABLE__GROUP_SEGMENT "_DurableStreamGroup"
/* 0, or DURABLE_EINVAL with a message naming the name and the rule. */
int durable_group_check(const char *group, durable_error_t *err);
/* "{stream path}/_DurableStreamGroup/{group}"; its length, or DURABLE_EINVAL
 * for a group or stream that breaks the rules, or a path too long. */
int durable_group_path(const durable_stream_id_t *stream, const char *group,
                       char *out, size_t size);

/* Where a new group starts, chosen when the group is first made and never
 * changed afterwards (durable seek moves it). */
typedef enum {
  DURABLE_START_EARLIEST = 0, /* the oldest item kept (the default) */
  DURABLE_START_LATEST,       /* what is appended after the group is made */
  DURABLE_START_SEQUENCE,     /* item `value` (its first item if trimmed) */
  DURABLE_START_TIME          /* the first item appended at or after `value`
                                 (ms since the epoch) */
} durable_start_kind_t;
typedef struct durable_start_s {
  durable_start_kind_t kind;
  int64_t value;
} durable_start_t;
/* "earliest", "latest", a sequence ("42") or an ISO-8601 UTC time
 * ("2026-12-05T10:00:00Z"); DURABLE_EINVAL with a message naming it. */
int durable_start_parse(const char *text, durable_start_t *out,
                        durable_error_t *err);

/* When a group stops holding a trim back (it is then detached: logged,
 * counted, its checkpoint kept; it pins again once it is claimed and is not
 * behind the trim).  `idle_ms`: no holder and no acknowledgement for this
 * long while items wait for it (0: DURABLE_DETACH_IDLE_MS; negative: never).
 * `items`: more than this many items behind (0: no bound).  `age_ms`: its
 * oldest unacknowledged item older than this (0: no bound). */
#define DURABLE_DETACH_IDLE_MS (7 * 24 * 3600 * 1000LL)
typedef struct durable_detach_s {
  int64_t idle_ms;
  int64_t items;
  int64_t age_ms;
} durable_detach_t;

typedef struct durable_consumer_s {
  const char *ns; /* the stream family */
  /* the owner whose stream this hub consumes, written into `out`; NULL:
   * the hub's own address */
  int (*key_of)(durable_hub_t *hub, char *out, size_t size, void *data);
  /* where the items are; NULL: the stream's own items */
  int (*source_of)(durable_hub_t *hub, durable_source_t *out, void *data);
  durable_item_handler_cb handler;
  void *data;
  /* 0: an item that fails is retried, never skipped (the default).  N > 0:
   * once the same item has failed N times in a row here, it is moved to the
   * dead-letter stream {ns}.dead of the same owner -- its payload text,
   * the reason, the count -- in one transaction with its acknowledgement,
   * and the stream goes on (a WARN line names both). */
  int max_attempts;
  /* how long acknowledged items are kept (zeroed: all of them); an
   * operator's policy for the family wins (durable_mesh_set_retention).  A
   * consumer with a source keeps everything: its items are the source's. */
  durable_retention_t retention;
  /* Batches (set `batch_handler` INSTEAD of `handler`, and `batch.items`):
   * up to that many consecutive items per call, acknowledged together (see
   * durable_batch_handler_cb).  Without it, one item per call, the next
   * handed over only once its acknowledgement is saved. */
  durable_batch_handler_cb batch_handler;
  durable_batch_t batch;
  /* NULL: the stream's own consumer (its lease on the stream node).  A
   * name: that consumer group's (durable_group_check), which starts at
   * `start` when it is first made and detaches past `detach`. */
  const char *group;
  durable_start_t start;
  durable_detach_t detach;
} durable_consumer_t;

/* Every hub of NodeType `type` consumes (several families per type are
 * fine; the struct is copied, `data` is borrowed for the mesh's life). */
int durable_node_type_consume(durable_node_type_t *type,
                              const durable_consumer_t *consumer,
                              durable_error_t *err);
/* Make this process a host of its NodeTypes' consumers: the owner of every
 * stream with unacknowledged items and no holder, whose NodeType consumes
 * that family here, is activated (so its consumer claims) now, and again
 * whenever another process appends to a stream (the change feed tells).
 * Within one process a stream wakes its owner without this. */
int durable_mesh_start_hosting(durable_mesh_t *mesh, durable_error_t *err);

/* This hub consumes, for as long as it is active (a client hub, say), or
 * until stopped.  With `out` (may be NULL) the caller gets a handle to stop
 * it with; the handle keeps the consumer's memory (and the hub's) until
 * durable_consumer_stop, which must then be called exactly once, also after
 * the hub has left. */
typedef struct durable_consumer_handle_s durable_consumer_handle_t;
int durable_hub_consume(durable_hub_t *hub, const durable_consumer_t *consumer,
                        durable_consumer_handle_t **out, durable_error_t *err);

/* Stop consuming: the item in flight finishes and is acknowledged as usual,
 * nothing new starts, a claim still out is answered, the lease is released,
 * and then `cb` (may be NULL) runs with status 0, on a later turn, and the
 * handle is gone.  The hub itself stays.  After the hub has left (recycled,
 * or its mesh closed) nothing is held: `cb` runs before this returns. */
void durable_consumer_stop(durable_consumer_handle_t *handle,
                           durable_status_cb cb, void *data);

DURABLE_API_END

#ifdef __cplusplus
}
#endif
#endif /* DURABLE_H */

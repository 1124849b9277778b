/*
 * store.h: the parts of the store that its backends and the layers above
 * call beyond durable.h.  engine.h is the inside: the engine (jobs, worker
 * threads) that the reads, the writes, the grants and the feed sit on.
 */
#ifndef DURABLE_MESH_STORE_H
#define DURABLE_MESH_STORE_H

#include "backend.h"

/* The loop the store runs on (for a backend's watch source). */
uv_loop_t *durable__store_loop(durable_store_t *store);

/* Another process committed a change under `ns` (NULL: it may have changed
 * anything; re-sync every watch).  Loop thread only. */
void durable__store_changed_elsewhere(durable_store_t *store, const char *ns);

/* One hook hears every "another process changed `ns`" (NULL: anything may
 * have changed) before the watches do: the streams layer wakes owners
 * from it.  Loop thread only; one hook per store. */
void durable__store_on_foreign(durable_store_t *store,
                               void (*fn)(void *data, const char *ns),
                               void *data);

/* The session that holds this store's liveness lock was lost (PostgreSQL:
 * the LISTEN connection dropped; the server let the lock go with it): for
 * as long as it takes to reconnect, other processes see this one as gone
 * and may take its leases over.  One hook per store (the streams layer:
 * every consumer claims again before its next item); NULL removes it.
 * Loop thread only. */
void durable__store_on_session_lost(durable_store_t *store,
                                    void (*fn)(void *data), void *data);
void durable__store_session_lost(durable_store_t *store);

/* The session holding the liveness lock answered a question asked at
 * `asked_ns` (uv_hrtime()): the lock was held then, so the process may act
 * as alive until asked_ns + fence_ms.  durable__store_live_lost forgets
 * every confirmation (the session is gone).  durable__store_live_wanted:
 * 1 while somebody asked durable__store_live lately, so that the watch
 * keeps asking.  Loop thread only. */
void durable__store_live_confirmed(durable_store_t *store, uint64_t asked_ns);
/* The clock of those times: CLOCK_BOOTTIME in ns, which goes on while the
 * machine sleeps (uv_hrtime's CLOCK_MONOTONIC stops: a host woken from a
 * suspend would trust a lock the server dropped meanwhile). */
uint64_t durable__fence_clock(void);
/* One hook hears a confirmation that ends a time without one (the
 * streams layer: consumers waiting in durable__store_live go on); NULL
 * removes it.  Loop thread only. */
void durable__store_on_live(durable_store_t *store, void (*fn)(void *data),
                            void *data);
void durable__store_live_lost(durable_store_t *store);
int durable__store_live_wanted(durable_store_t *store);

/* ---- the server (server.c) ---------------------------------------------
 *
 * Where a store is served by one of several servers (backend.h's
 * server_of), every connection of a process is on the one its watch is on,
 * so that liveness is asked of the server that holds the lock, and no write
 * goes to a server the process does not follow. */

/* The watch's connection (made again) is on `s` (loop thread): it is the
 * store's server from now on.  The on_server hook hears of it; when it is
 * another than before, every worker connection is made again before its
 * next job. */
void durable__store_server_followed(durable_store_t *store,
                                    const durable__server_t *s);
/* A worker's connection is on `s` (any thread): 0 when that is the store's
 * server, or none is known yet (then it is); else DURABLE_EUNAVAIL, naming
 * both, and the watch is asked to look again at once (watch_nudge).
 * `*gen` gets the generation, for durable__store_server_gen. */
int durable__store_server_check(durable_store_t *store,
                                const durable__server_t *s, uint64_t *gen,
                                durable_error_t *err);
/* 1 for a few seconds after the watch reconnected (any thread): another
 * process's liveness lock found missing then may only not be taken again
 * yet (server.c). */
int durable__store_settling(durable_store_t *store);
/* How many times the store's server changed (any thread): what was read
 * under an older generation may be from a server that is not followed any
 * more -- cached states and versions are read again. */
uint64_t durable__store_server_gen(durable_store_t *store);
/* One hook hears each (re)connect of the watch: the server followed, as
 * "host:port (timeline N)", and the one before it -- NULL the first time,
 * `now` itself (the same pointer) when it did not change.  Loop thread
 * only. */
void durable__store_on_server(durable_store_t *store,
                              void (*fn)(void *data, const char *now,
                                         const char *was),
                              void *data);
/* More than one server of the store takes writes (`servers` names them;
 * NULL: only one does again).  While so, every worker connection is
 * refused, naming them, so that nothing is written to either; the on_split
 * hook hears each change.  Loop thread. */
void durable__store_split(durable_store_t *store, const char *servers);
/* 0, or DURABLE_EUNAVAIL naming the servers while the store is split (any
 * thread). */
int durable__store_split_refusal(durable_store_t *store, durable_error_t *err);
void durable__store_on_split(durable_store_t *store,
                             void (*fn)(void *data, const char *servers),
                             void *data);
/* A commit waits long (any thread; `store` is the durable_store_t):
 * `why`, NULL once it ended.  The on_stall hook hears it on the loop. */
void durable__store_stalled(void *store, const char *why);
void durable__store_on_stall(durable_store_t *store,
                             void (*fn)(void *data, const char *why),
                             void *data);
/* On the loop: what the workers left for it -- a nudge for the watch, a
 * commit's stall for the on_stall hook. */
void durable__store_server_news(durable_store_t *store);

/* For a watch source that sees every commit id (SQLite): 1 when every commit
 * id in (after, upto] was made by this store itself, so nothing foreign
 * happened in that range.  Also forgets own ids at or below `upto`.  Loop
 * thread only. */
int durable__store_commits_all_own(durable_store_t *store, int64_t after,
                                   int64_t upto);

/* The liveness key of an instance "HOST:PID:16hex": its 16 hex digits,
 * below 2^62 (a positive bigint for PostgreSQL's advisory locks, a byte
 * offset for an OFD lock).  DURABLE_EINVAL for anything else. */
int durable__instance_key(const char *instance, uint64_t *key);
/* A new instance name for this process (fence.c). */
void durable__instance_make(char *out, size_t size);

/* In the callback of a durable_store_write that succeeded: the version
 * its write `i` wrote (0 when it wrote nothing).  Only for results the store
 * hands to callbacks. */
int64_t durable__written_version(const durable_result_t *res, size_t i);

/* In the callback of a durable_store_write that failed: 1 + the index of the
 * write the store refused (its status is res->status), or 0 when the failure
 * was not one write's (the store, the connection). */
size_t durable__failed_write(const durable_result_t *res);

/* Writes kept past the call that gave them -- an item's effects, held until
 * its acknowledgement is written with them: a copy in one allocation
 * (free() it), checked as durable_store_write checks, mutators refused. */
typedef struct durable__write_set_s {
  size_t count;
  durable_write_t writes[];
} durable__write_set_t;
durable__write_set_t *durable__write_set_new(const durable_write_t *writes,
                                             size_t count,
                                             durable_error_t *err);

/* In the callback of a read that listed nodes: node `i` of res->nodes for
 * the caller to keep and free.  Taken from the list (res->nodes[i] reads
 * NULL after), or, from a page of items packed in blocks (backend.h), a
 * copy; NULL when out of memory. */
durable_node_t *durable__result_take(const durable_result_t *res, size_t i);

/* json_check.c, beside durable__json_valid (durable_internal.h): 0 when
 * `text` is JSON; else -1 with `je` filled by jansson, to say what
 * is wrong and where (an integer beyond 64 bits: "too big integer"). */
struct json_error_t;
int durable__json_check(const char *text, struct json_error_t *je);
/* The tree of `text` (any one JSON value), or NULL with *code set:
 * DURABLE_EINVAL when `text` is no JSON, DURABLE_ENOMEM when it is and
 * jansson had no memory for the tree.  jansson's own error tells those two
 * apart only now and then; a decoder that took the one for the other would
 * read a stream node it could not decode for want of memory as an empty
 * one. */
struct json_t;
struct json_t *durable__json_tree(const char *text, int *code);
/* 1 when `text` is JSON's null, white space around it allowed: what is no
 * durable stream payload (publish.c, and a handler's appends). */
int durable__json_is_null(const char *text);

/* path.c: `segment` as one path segment of 1 to `max` bytes (the segment
 * rules of durable_path_check, and no '/'); DURABLE_EINVAL with a message
 * naming `what`, the segment and the rule. */
int durable__segment_check(const char *what, const char *segment, size_t max,
                           durable_error_t *err);

/* The length of the owner prefix of a checked path (durable_path_owner
 * without the check, for paths checked when they entered). */
size_t durable__owner_len(const char *path);

/* Split a checked path into namespace and id (malloc'ed). */
int durable__path_split(const char *path, char **ns, char **id);

/* The place of a path: partition and table (pointers into static storage
 * or into `partition_buf`). */
durable__place_t durable__path_place(const char *path, char *partition_buf,
                                     size_t size);

/* For the backends and the mesh files. */
int durable__store_closing(durable_store_t *store);
/* 0 for a store that writes; for one opened with durable_store_open_read,
 * DURABLE_EINVAL: "`what` refused: store '...' is opened for reading
 * only". */
int durable__store_refuse_readonly(durable_store_t *store, const char *what,
                                   durable_error_t *err);
#endif /* DURABLE_MESH_STORE_H */

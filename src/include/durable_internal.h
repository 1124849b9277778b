/*
 * durable_internal.h: what the runtime's own front ends use of libdurable
 * beyond durable.h.
 *
 * The `durable` command, the Lua binding, the tests and the benches need a
 * few calls that an embedder should not build on: the table a path lands
 * in, the stream-specific store reads behind `durable streams` and the
 * readers, the liveness of another process's store, the log threshold and
 * the read-issuing hub.  They live here, under the internal prefix
 * `durable__`, so that durable.h is only what libdurable promises to keep.
 * This header is not installed.
 */
#ifndef DURABLE_INTERNAL_H
#define DURABLE_INTERNAL_H

#include <durable.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* vsnprintf into `out` that keeps a message's reason: when the message would
 * be cut, it is formatted again with each %s argument longer than size / 8
 * bytes shortened to its head, "..." and its length (error.c).  Every
 * durable_error_t message goes through it; so do the command's lines. */
void durable__vformat(char *out, size_t size, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));
void durable__format(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 when `text` is one JSON value, as jansson's json_loads(JSON_DECODE_ANY)
 * would parse it (src/mesh/json_check.c says exactly what that is); 0
 * otherwise.  Allocates nothing.  The Lua binding decodes such text into
 * Lua values without building a jansson tree first. */
int durable__json_valid(const char *text);
/* strtod of the JSON number at `s` (its grammar checked), read as jansson
 * reads it whatever the C locale's decimal point (errno as strtod sets
 * it). */
double durable__json_strtod(const char *s);

/* The table a path is stored in: the longest entry of the satellite mapping
 * list whose segment occurs as a whole segment of the path
 * ("_DurableStreamItem" -> "durable_stream_items", "_DocumentPart" ->
 * "document_parts", "_ThreadMessage" -> "threads"), else "mesh_nodes".
 * Returns a static string. */
const char *durable__path_table(const char *path);

/* Where operators' retention policies are kept (durable_mesh_set_retention):
 * one node per family, {DURABLE__RETENTION_NS}/{family} {"Policy":"7d"}. */
#define DURABLE__RETENTION_NS "DurableRetention"

/* The items of a stream in sequence order: the children of `items_ns` whose
 * ids are 12-digit sequences greater than `after`, at most `limit`.  An index
 * range scan: the cost follows the rows returned, not the stream's length. */
int durable__store_read_items(durable_store_t *store, const char *principal,
                              const char *items_ns, int64_t after, size_t limit,
                              durable_done_cb cb, void *data,
                              durable_error_t *err);

/* A durable_store_watch flag: a watch that never reads.  Its callback gets
 * this process's changes under the namespace as they commit (unfiltered,
 * ADDED/UPDATED/REMOVED with the node), and UPDATED with a NULL node each
 * time another process changed the namespace or anything may have changed
 * (a reconnect): "look again yourself".  For a follower that reads what it
 * needs on its own (a stream's reader reads the items after its cursor),
 * where a watch's re-read of the namespace would be a round trip spent on
 * nothing. */
#define DURABLE__WATCH_SIGNAL 0x100

/* The highest stored item sequence under `items_ns` (0 when empty), in
 * result->value, as `principal` (NULL: the platform; a principal needs read
 * on the owner, else DURABLE_EACCES, so a sequence never tells what a
 * reader may not read). */
int durable__store_last_item(durable_store_t *store, const char *principal,
                             const char *items_ns, durable_done_cb cb,
                             void *data, durable_error_t *err);

/* Once a burst of publishes that waited for room in the publish window is
 * over, the process gives the memory it took back to the system
 * (malloc_trim).  A binding that keeps garbage of its own (Lua's) has `fn`
 * run instead, to free that first and then call malloc_trim(0). */
void durable__window_on_burst_over(durable_mesh_t *mesh, void (*fn)(void *),
                                   void *data);

/* Whether `principal` may do `modes` (DURABLE_GRANT_*) on the owner of
 * `path`: status 0, or DURABLE_EACCES with "principal 'alice' may not
 * write 'Space/doc'" (the first missing mode, read before write).  Read
 * from the grants as committed, by any process.  For the operations the
 * runtime performs for a principal as the platform (a stream hub's append,
 * claim), checked before the request is sent.  NULL (the platform) may do
 * everything: the callback still runs, with 0. */
int durable__store_access(durable_store_t *store, const char *principal,
                          const char *path, int modes, durable_done_cb cb,
                          void *data, durable_error_t *err);

/* As durable_store_write_as, where the first write is a
 * DURABLE_WRITE_MUTATE whose mutator decides the others: each time it has
 * run and written, remake(its mutate_arg, i, &path, &content) makes write
 * i (1 .. count-1) anew, malloc'ed, on the writer thread, under the first
 * row's lock; or returns 1 (at i = 1) to keep them all as they are.  A path
 * must keep its owner.  Returns 0, 1, or a code that fails the write.  So a
 * decision that depends on the row (a stream's next sequence) is made where it
 * cannot be overtaken. */
typedef int (*durable__remake_cb)(void *arg, size_t i, char **path,
                                  char **content);
int durable__store_write_remade(durable_store_t *store, const char *principal,
                                const durable_write_t *writes, size_t count,
                                durable__remake_cb remake, durable_done_cb cb,
                                void *data, durable_error_t *err);

/* "read", "write", "read,write" (either order) as DURABLE_GRANT_* modes,
 * or DURABLE_EINVAL: the spelling the CLI and Lua take. */
int durable__grant_modes_parse(const char *text);

/* Whether the store opened as `instance` -- by this process or any other --
 * is still open: result->value 1 alive, 0 gone.  The database itself
 * answers: every open store holds a lock that it releases when the process
 * dies (PostgreSQL: a session advisory lock on the store's LISTEN
 * connection; SQLite: an OFD lock in the file FILE-live), so a process that
 * is busy, however long, is alive, and a killed one is gone at once.  An
 * instance that is not "HOST:PID:16hex" fails with DURABLE_EINVAL. */
int durable__store_alive(durable_store_t *store, const char *instance,
                         durable_done_cb cb, void *data, durable_error_t *err);

/* Fencing: 1 when this process can be sure that it still holds its
 * liveness lock -- a store whose lock goes only with the process (SQLite)
 * always can; on PostgreSQL, the lock's session answered within the last
 * fence_ms (durable__store_fence_ms).  0 otherwise, and the store asks the
 * session again at once: a consumer hands no item over while this is 0.
 * Loop thread only. */
int durable__store_live(durable_store_t *store);
/* How long a confirmation counts (0: forever), which is also how long a
 * takeover from a process that is gone waits before its first item: by
 * then that process, if it still runs cut off, has stopped handing items
 * over. */
uint32_t durable__store_fence_ms(durable_store_t *store);

/* The level below which lines are dropped: from the environment variable
 * DURABLE_LOG (error, warn, info, debug; info by default). */
durable_log_level_t durable__log_threshold(void);
/* A DURABLE_LOG value as a level, in any case (error, warn or warning, info,
 * debug or trace; NULL or "" is info).  0, or DURABLE_EINVAL with *out info. */
int durable__log_level_parse(const char *value, durable_log_level_t *out);

/* The process-level read-issuing hub: never recycled, for requests sent on
 * behalf of a hub that is quiescing. */
durable_hub_t *durable__mesh_reads_hub(durable_mesh_t *mesh);

/* Write `line` to stderr as the default sink does: a UTC time, the level
 * and the line. */
void durable__log_stderr(durable_log_level_t level, const char *line);

#ifdef __cplusplus
}
#endif
#endif /* DURABLE_INTERNAL_H */

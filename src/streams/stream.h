/*
 * stream.h: what the files of the streams layer share: stream identities and
 * paths, the stream node's state and the item node's content as C structs
 * (stream.c encodes and decodes them), and the entry points of the stream
 * hub, the reader and the consumer.
 */
#ifndef DURABLE_STREAMS_STREAM_H
#define DURABLE_STREAMS_STREAM_H

#include "durable_text.h"
#include "hub.h"

#define DURABLE__STREAM_SEGMENT "_DurableStream"
#define DURABLE__ITEM_SEGMENT "_DurableStreamItem"
#define DURABLE__STREAM_TYPE "DurableStream"
#define DURABLE__ITEM_TYPE "DurableStreamItem"
#define DURABLE__ID_SEGMENT "_DurableStreamId"
#define DURABLE__ID_TYPE "DurableStreamId"
#define DURABLE__GROUP_TYPE "DurableStreamGroup"

/* The stream node's content (DurableStreamState).  Times are ms since the
 * epoch, 0 for null; strings NULL for null. */
typedef struct {
  char *ns, *key;
  int64_t last_sequence;
  char *subscriber;
  char *subscriber_instance; /* the holder's process (store instance) */
  int64_t lease_epoch;
  int64_t subscribed_at;
  int64_t checkpoint;
  int64_t checkpoint_at;
  int64_t orphaned_at;
  char *last_subscriber;
  /* items 1 .. trimmed_through were deleted (durable_stream_trim): a reader
   * asking for one gets an answer, not a wait; 0, and not written, when
   * nothing was trimmed */
  int64_t trimmed_through;
  /* the items the last acknowledgement covered, once one covered more than
   * one (a batch handler's); 0, and not written, until then */
  int64_t last_batch;
  /* when durable_stream_delete began deleting it (ms): nothing is appended,
   * claimed, sought or trimmed any more, and the node goes last; 0, and
   * not written, otherwise */
  int64_t deleting_at;
  /* a takeover from a process that is gone: no holder hands an item over
   * before this (ms), so that the old one, if it still runs cut off, has
   * stopped (its fence) -- also a holder after the taker, should the taker
   * let go sooner; 0, and not written, before any takeover */
  int64_t hold_until;
  /* The store went back (a failover to a standby that had not received
   * everything): what a process had seen of this stream before -- its last
   * sequence, checkpoint and epoch -- while the stream is stopped for it,
   * all 0 (and not written) otherwise; the stream node's SeenLastSequence,
   * SeenCheckpoint, SeenLeaseEpoch.  And once an operator's seek went on
   * past it, the sequences lost_from .. lost_to that will never be there
   * (LostFrom, LostTo; 0 and not written before any loss). */
  int64_t seen_last, seen_checkpoint, seen_epoch;
  int64_t lost_from, lost_to;
  /* A consumer group's node (DurableStreamGroup, group.c) has the same
   * lease fields, LastSequence always 0, and these: its name (NULL on a
   * stream node), the start it was made with, when; the detach bounds its
   * last holder declared (durable_detach_t, idle -1: never); and when it
   * was detached (0: it pins the stream's trim). */
  char *group;
  char *start;
  int64_t created_at;
  int64_t detach_idle_ms, detach_items, detach_age_ms;
  int64_t detached_at;
} durable__stream_state_t;

/* The stream is stopped because the store went back (seen.c). */
static inline int durable__state_behind(const durable__stream_state_t *s) {
  return s->seen_last > 0 || s->seen_checkpoint > 0 || s->seen_epoch > 0;
}

/* An acknowledgement through `seq` at `now` (ms) moves the checkpoint of
 * `s`, and says how many items it covered once one covered more than one
 * (LastBatch: a batch handler's). */
static inline void durable__state_acked(durable__stream_state_t *s, int64_t seq,
                                        int64_t now) {
  if (seq - s->checkpoint > 1 || s->last_batch > 0)
    s->last_batch = seq - s->checkpoint;
  s->checkpoint = seq;
  s->checkpoint_at = now;
}

/* group.c: a group's start as text ("earliest", "latest", "42", an ISO
 * time; `size` at least 32); whether `path` is a group node's, and then
 * its stream's path and (borrowed from `path`) its name; a consumer's
 * message type "{prefix}{ns}" or "{prefix}{ns}/{group}"; the idle bound of
 * `d` in ms (-1: never). */
void durable__start_format(const durable_start_t *start, char *out,
                           size_t size);
int durable__group_split(const char *path, char *stream_path, size_t size,
                         const char **group);
void durable__consumer_msg(char out[DURABLE_PATH_MAX], const char *prefix,
                           const char *ns, const char *group);
int64_t durable__detach_idle_ms(const durable_detach_t *d);

/* "{ns}@{key}", for logs only (never parsed). */
typedef struct {
  char text[DURABLE_PATH_MAX + 80];
} durable__stream_name_t;
durable__stream_name_t durable__stream_name(const durable_stream_id_t *id);

/* Parse a stream node's content; a node without content (made by hand)
 * gives the state derived from its path.  0; DURABLE_EINVAL for a node
 * that is no stream (neither its content nor its path names one);
 * DURABLE_ENOMEM, never taken for an empty state. */
int durable__state_decode(const char *content, const char *stream_path,
                          durable__stream_state_t *out);
/* JSON text in the stream node's fixed field order (stream.c; malloc'ed),
 * or NULL. */
char *durable__state_encode(const durable__stream_state_t *s);
int durable__state_copy(const durable__stream_state_t *from,
                        durable__stream_state_t *to);
void durable__state_free(durable__stream_state_t *s);
int durable__str_set(char **field, const char *value); /* NULL clears */
/* A write's check that writes nothing (the body of a durable_mutate_cb, on
 * the writer thread): the state stored in `current` handed to `holds`.
 * 0 when it holds, DURABLE_ECONFLICT when not, DURABLE_ENOTFOUND when the
 * node is gone, or the decode's failure. */
int durable__state_holds(const durable_node_t *current,
                         int (*holds)(const durable__stream_state_t *stored,
                                      const void *arg),
                         const void *arg);

/* A handler's message (NULL: "") as a JSON string for a stored record: it
 * need not be UTF-8, and one that is not is kept with each byte above 0x7F
 * written '?'.  NULL when out of memory. */
struct json_t *durable__json_message(const char *message);

/* An item node's content {Sequence, PayloadJson, AppendedAt} (malloc'ed). */
char *durable__item_encode(int64_t sequence, const char *payload,
                           int64_t appended_at);
/* The payload text and time of an item node; DURABLE_EINVAL with a message
 * naming the item when it carries no item content. */
int durable__item_decode(const durable_node_t *node, char **payload,
                         int64_t *appended_at, durable_error_t *err);

/* publish_id.c: a publish id's node, "{stream_path}/_DurableStreamId/{id}"
 * (DURABLE_EINVAL, with a message naming id and stream, when it is longer
 * than DURABLE_PATH_MAX); its content {"Sequence":N} (malloc'ed), and the
 * sequence read back from it (0 when it holds none, DURABLE_ENOMEM when
 * there was no memory to read it). */
int durable__publish_id_path(const char *stream_path, const char *id, char *out,
                             size_t size, durable_error_t *err);
char *durable__publish_id_encode(int64_t sequence);
int64_t durable__publish_id_sequence(const char *content);

/* "000000000042"; sequence_of gives 0 for anything that is not 12 digits
 * with a value above 0. */
void durable__item_id(int64_t sequence, char out[13]);
int64_t durable__item_sequence(const char *id);

/* ISO-8601 UTC with milliseconds (durable__iso_time writes it,
 * durable_text.h) back to milliseconds; 0 for null or not a time. */
int64_t durable__parse_time(const char *text);

/* Per-mesh state of a unit of this layer (stream.c): a zeroed block of
 * `size` bytes kept under `key` on the read-issuing hub, which lives exactly
 * as long as the mesh; `release` frees it, block and all, when that hub
 * goes (it may not touch the mesh).  0 or DURABLE_ENOMEM.  The block is
 * found again with durable__mesh_state (NULL once it is gone). */
int durable__mesh_state_add(durable_mesh_t *mesh, const void *key, size_t size,
                            void (*release)(void *state));
void *durable__mesh_state(durable_mesh_t *mesh, const void *key);

/* window.c: the publish window (see there).  A publish takes a slot: its
 * `bytes` (the publish's own block), and what to do when, having waited,
 * it may go, or must fail (max_block_ms passed: DURABLE_EAGAIN; the mesh
 * closing: DURABLE_ESHUTDOWN, with a message).  durable__window_enter:
 * 1 when it goes now (in flight: the caller starts it), 0 when it waits,
 * else DURABLE_EAGAIN (the waiting bytes would pass their bound) or
 * DURABLE_ESHUTDOWN, with `err`.  durable__window_leave: a publish in flight
 * finished; those waiting go while there is room. */
#define DURABLE__DEFAULT_WINDOW_ITEMS 1024u
#define DURABLE__DEFAULT_WINDOW_BYTES (16u << 20)
#define DURABLE__DEFAULT_WAITING_BYTES (64u << 20)
#define DURABLE__DEFAULT_MAX_BLOCK_MS 60000u
typedef struct durable__window_slot_s durable__window_slot_t;
struct durable__window_slot_s {
  struct durable__queue link;
  size_t bytes;
  uint64_t since; /* uv_now when it began to wait */
  void (*go)(durable__window_slot_t *slot);
  void (*fail)(durable__window_slot_t *slot, int status, const char *message);
};
int durable__window_install(durable_mesh_t *mesh);
/* publish.c: the lanes that keep each stream's publishes in order. */
int durable__publish_install(durable_mesh_t *mesh);
int durable__window_enter(durable_mesh_t *mesh, durable__window_slot_t *slot,
                          durable_error_t *err);
void durable__window_leave(durable_mesh_t *mesh, size_t bytes);

/* read_budget.c: what the stream readers of a mesh may hold (see there).
 * durable__read_budget_take: rows to ask for, of `want` (0: wait, with
 * durable__read_budget_wait; a reader that has nothing it could hand over
 * while an item is asked of it is `starving`, and gets DURABLE__READ_MIN
 * anyway); they count as held from now.  durable__read_budget_give: items and
 * bytes no longer held (what a page did not fill, what was handed over or
 * dropped); the readers waiting are woken while there is room.
 * durable__read_budget_hold: the bytes of one item a page brought.  A waiter's
 * link is set up with durable__queue_init; durable__read_budget_unwait takes it
 * out of line (a reader that closes). */
#define DURABLE__READ_ITEMS 65536
#define DURABLE__READ_BYTES (64 << 20)
#define DURABLE__READ_MIN 16
typedef struct durable__read_waiter_s durable__read_waiter_t;
struct durable__read_waiter_s {
  struct durable__queue link;
  void (*wake)(durable__read_waiter_t *w);
};
int durable__read_budget_install(durable_mesh_t *mesh);
size_t durable__read_budget_take(durable_mesh_t *mesh, size_t want,
                                 int starving);
void durable__read_budget_give(durable_mesh_t *mesh, int64_t items,
                               int64_t bytes);
void durable__read_budget_hold(durable_mesh_t *mesh, int64_t bytes);
/* How many items fit in `bytes`, by the mean size of those held so far. */
size_t durable__read_budget_rows(durable_mesh_t *mesh, int64_t bytes);
void durable__read_budget_wait(durable_mesh_t *mesh, durable__read_waiter_t *w);
void durable__read_budget_unwait(durable_mesh_t *mesh,
                                 durable__read_waiter_t *w);

/* The per-mesh state each unit adds at install (install.c calls them). */
int durable__directory_install(durable_mesh_t *mesh);
int durable__consumers_install(durable_mesh_t *mesh);
int durable__stream_stats_install(durable_mesh_t *mesh);
int durable__metrics_install(durable_mesh_t *mesh);

/* seen.c: what this process saw of each stream.  durable__seen_check
 * takes the state of the stream at `path` as just read or written: 1 when
 * it is behind what this process saw of it on an earlier server of the
 * store (`seen`'s seen_last, seen_checkpoint and seen_epoch get what it
 * saw), else 0, and it is what this process has seen from now on. */
int durable__seen_install(durable_mesh_t *mesh);
int durable__seen_check(durable_mesh_t *mesh, const char *path,
                        const durable__stream_state_t *s,
                        durable__stream_state_t *seen);
void durable__seen_forget(durable_mesh_t *mesh, const char *path);

/* directory.c: the mesh's stream settings (defaults filled in). */
durable_stream_options_t durable__stream_options(durable_mesh_t *mesh);
/* consumers.c: the store lost its liveness session: every consumer holding
 * a lease claims again before its next item (the one in flight finishes). */
void durable__consumers_session_lost(durable_mesh_t *mesh);
/* consumers.c: the store confirmed this process's liveness again: every
 * consumer that stopped for want of it (wait_for_liveness) goes on; with
 * `reconnected` (the store's watch connected again), every one in a backoff
 * for the store's failure claims now. */
void durable__consumers_live(durable_mesh_t *mesh, int reconnected);
/* The lease of ns@key (of its consumer group `group`; NULL: its own) was
 * let go behind its holder (a seek, a forced
 * trim): a consumer of this process holding it claims again, after the
 * item in flight, and resumes from the checkpoint stored; with
 * `claiming`, also one whose claim is out now (its grant may predate the
 * change: the stream hub of this process says so, a waker's look does
 * not). */
void durable__consumers_lease_gone(durable_mesh_t *mesh, const char *ns,
                                   const char *key, const char *group,
                                   int claiming);

/* stats.c: this process's counters per stream (durable_mesh_stream_stats),
 * kept as per-mesh state. */
typedef enum {
  DURABLE__COUNT_APPENDED,
  DURABLE__COUNT_HANDLED,
  DURABLE__COUNT_FAILED,
  DURABLE__COUNT_DEAD_LETTERED,
  DURABLE__COUNT_TRIMMED,
  DURABLE__COUNT_BATCHES,
  DURABLE__COUNT_DETACHED
} durable__count_t;
/* Counts are the stream's own, or with `group` its consumer group's. */
void durable__stream_count(durable_mesh_t *mesh, const char *ns,
                           const char *key, const char *group,
                           durable__count_t which, uint64_t n);
/* The stream was deleted (`group` NULL: it and every group), or the group
 * was: its next items are new, not handed again. */
void durable__stream_renewed(durable_mesh_t *mesh, const char *ns,
                             const char *key, const char *group);
/* Items `first` to `last` are handed to a handler (one turn): each is a
 * redelivery when one at or beyond it was handed here before. */
void durable__stream_handed(durable_mesh_t *mesh, const char *ns,
                            const char *key, const char *group, int64_t first,
                            int64_t last);

/* failure.c: a failing consumer's record, the satellite node
 * "{stream_path}/_DurableStreamFailure" {Sequence, Attempts, Error,
 * FailedAt}: written once per failure of an item, deleted once it is
 * acknowledged or dead-lettered, read by durable_stream_statuses. */
#define DURABLE__FAILURE_SEGMENT "_DurableStreamFailure"
#define DURABLE__FAILURE_TYPE "DurableStreamFailure"
typedef struct {
  int64_t sequence;
  int attempts;
  char *error;
  int64_t failed_at;
} durable__failure_t;
/* Parse a record's content (0, or DURABLE_EINVAL for one that is not). */
int durable__failure_decode(const char *content, durable__failure_t *out);
void durable__failure_free(durable__failure_t *f);
/* Record that item `sequence` of the stream at `stream_path` failed with
 * `error`, in one read-modify-write: Attempts one more than the record's
 * when it names the same item, else 1.  done(attempts) with the count
 * recorded, or done(negative code) when the store failed. */
int durable__failure_record(durable_store_t *store, const char *stream_path,
                            int64_t sequence, const char *error,
                            void (*done)(int attempts, void *data), void *data,
                            durable_error_t *err);
/* Delete the record (none there is fine; nothing waits for it). */
void durable__failure_clear(durable_store_t *store, const char *stream_path);
/* A handler's message cut to `max` bytes at a character's boundary
 * (ending "...") into `buf`, or `why` itself when it fits: a retried
 * item's log line stays short, the whole message is in its record. */
const char *durable__failure_cut(const char *why, size_t max, char *buf,
                                 size_t size);
/* Without max_attempts a failing item is retried for ever: every
 * DURABLE__WAYS_OUT_EVERY failures in a row (`times`), one line of the
 * consumer `hub` of stream `name` says how it ends (fix, seek, the dead
 * letters). */
#define DURABLE__WAYS_OUT_EVERY 10
void durable__failure_ways_out(durable_mesh_t *mesh, const char *hub,
                               const char *name, const char *ns,
                               const char *key, const char *group, int64_t seq,
                               int times);

/* directory.c: the producer's directory of ensured streams. */
int durable__directory_has(durable_mesh_t *mesh, const char *stream_path);
void durable__directory_mark(durable_mesh_t *mesh, const char *stream_path);
void durable__directory_forget(durable_mesh_t *mesh, const char *stream_path);

/* directory.c: which NodeTypes consume which families here. */
int durable__consumed_add(durable_mesh_t *mesh, const char *type,
                          const char *family);
int durable__consumed_has(durable_mesh_t *mesh, const char *type,
                          const char *family);
/* directory.c: a family is consumed here in some consumer group (the
 * waker then looks at the groups of its streams too). */
int durable__grouped_add(durable_mesh_t *mesh, const char *family);
int durable__grouped_has(durable_mesh_t *mesh, const char *family);
/* directory.c: every family a NodeType consumes here (a family twice when
 * two do); consumers.c: the family of every consumer running here (those of
 * hub:consume too). */
void durable__consumed_families(durable_mesh_t *mesh,
                                void (*cb)(const char *family, void *data),
                                void *data);
void durable__consumers_families(durable_mesh_t *mesh,
                                 void (*cb)(const char *family, void *data),
                                 void *data);

/* wake.c: activate the owner of stream `id` and post it the wake of the
 * stream's family, for its consumer group `group` (NULL: the stream's own
 * consumer; every consumer of the family there hears it, and one waiting
 * for the stream to exist claims), logging what went wrong.  `cb` (may be NULL)
 * is told how it went, unless the call itself fails (a negative code; nothing
 * comes): DURABLE_ESHUTDOWN, said nowhere, while the mesh closes. */
typedef enum {
  DURABLE__WAKE_SENT,        /* posted: its consumer claims */
  DURABLE__WAKE_NO_CONSUMER, /* its NodeType consumes no such stream here */
  DURABLE__WAKE_ABSENT,      /* no node at the owner's path */
  DURABLE__WAKE_UNAVAILABLE, /* the owner could not be read: try again */
  DURABLE__WAKE_POST_FAILED, /* read, but the post failed (said in the log) */
  DURABLE__WAKE_LEAVING      /* the mesh closes: the next process wakes it */
} durable__wake_outcome_t;
typedef void (*durable__wake_cb)(durable__wake_outcome_t outcome, void *data);
int durable__wake_owner(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        const char *group, durable__wake_cb cb, void *data);
/* The wake's message type, "durable.wake:FAMILY" (protocol.h's prefix). */
void durable__wake_type(char out[DURABLE_PATH_MAX], const char *family);

/* The group node at `group_path` is `s` as stored at `version` (NULL:
 * deleted), as this process wrote or heard it: the stream's hub here, if
 * active, wakes its owner for it as needed (stream_hub_group.c's
 * durable__stream_group_seen, which stream_hub.c hands directory.c so that
 * the waker, below the stream hubs, reaches it). */
typedef void (*durable__group_seen_fn)(durable_mesh_t *mesh,
                                       const char *group_path,
                                       const durable__stream_state_t *s,
                                       int64_t version);
void durable__groups_on_seen(durable_mesh_t *mesh, durable__group_seen_fn fn);
void durable__group_seen(durable_mesh_t *mesh, const char *group_path,
                         const durable__stream_state_t *s, int64_t version);
void durable__stream_group_seen(durable_mesh_t *mesh, const char *group_path,
                                const durable__stream_state_t *s,
                                int64_t version);

/* waker.c: a stream with waiting items whose lease names another process
 * `instance`: a host asks every liveness_ms whether that process is alive,
 * and wakes the owner once it is gone.  Nothing when this mesh hosts
 * nothing (durable_mesh_start_hosting). */
void durable__waker_suspect(durable_mesh_t *mesh, const char *stream_path,
                            const char *instance);

/* stream_hub.c: the DurableStream NodeType's configuration. */
int durable__stream_hub_install(durable_mesh_t *mesh);

/* reader.c: a pull reader under the consumer and durable_stream_read. */
typedef struct durable__pull_s durable__pull_t;
typedef void (*durable__pull_cb)(durable__pull_t *pull, int status,
                                 const durable_item_t *item,
                                 const char *message, void *data);
/* Reads go to `from`: the mesh's store, or its read store (then the
 * reader waits for the read store to have what the store's feed
 * announced). */
durable__pull_t *durable__pull_new(durable_mesh_t *mesh,
                                   const durable_stream_id_t *id, int64_t after,
                                   const durable_source_t *source,
                                   durable_store_t *from, durable_error_t *err);
/* Ask for the next item: `cb` runs once, when it is there (maybe much
 * later), or with a failure: `item` NULL for a read that failed, else the
 * item that could not be read (sequence and node; payload NULL).  One
 * request at a time. */
void durable__pull_next(durable__pull_t *pull, durable__pull_cb cb, void *data);
/* 1 when the next item is read already, so that durable__pull_next would
 * hand it over at once (a batch takes what is there: consumer.c). */
int durable__pull_ready(durable__pull_t *pull);
/* Take back the request of durable__pull_next: its callback does not run
 * (the item stays for the next request). */
void durable__pull_cancel(durable__pull_t *pull);
/* No callback runs after this. */
void durable__pull_close(durable__pull_t *pull);

/* ---- retention.c: how long acknowledged items are kept ---------------- */

/* operator.c: durable_stream_trim for retention's sweep (never forced;
 * the stream's hub logs it at debug, not as an operator's act). */
int durable__stream_sweep(durable_mesh_t *mesh, const durable_stream_id_t *id,
                          int64_t through, durable_sequence_cb cb, void *data,
                          durable_error_t *err);
/* retention.c: `fn` hears that an operator's retention policy changed here
 * (consumers.c: every consumer looks at what is due now, an idle stream
 * too).  One per mesh; 0 or DURABLE_ENOMEM. */
int durable__retention_on_change(durable_mesh_t *mesh,
                                 void (*fn)(durable_mesh_t *mesh));

/* DURABLE_EINVAL, saying why, for a policy that is not one. */
int durable__retention_check(const durable_retention_t *policy,
                             durable_error_t *err);
/* The policy in force for `family`: an operator's, set for the family in
 * the store (durable_mesh_set_retention), else `declared`. */
durable_retention_t
durable__retention_in_force(durable_mesh_t *mesh, const char *family,
                            const durable_retention_t *declared);

/* A consumer's sweep of its stream: `msg` is the hub message that makes it
 * run (the consumer calls durable__sweep_run for it); acked() after each
 * acknowledgement.  NULL is no sweep (all three do nothing). */
typedef struct durable__sweep_s durable__sweep_t;
durable__sweep_t *durable__sweep_new(durable_hub_t *hub, const char *msg,
                                     const durable_stream_id_t *id,
                                     const durable_retention_t *declared);
void durable__sweep_acked(durable__sweep_t *sweep, int64_t checkpoint);
/* A lease granted, resuming after `checkpoint`: what it knew is forgotten
 * (the stream may be a new one, deleted and made anew). */
void durable__sweep_claimed(durable__sweep_t *sweep, int64_t checkpoint);
/* The sweep's message came, with its payload. */
void durable__sweep_run(durable__sweep_t *sweep, const char *timer);
/* A run in flight finishes on its own first. */
void durable__sweep_free(durable__sweep_t *sweep);

/* ---- outbox.c: appends made as an item's effects ---------------------- */

typedef struct durable__outbox_s durable__outbox_t;
/* The writes of `commit` plus an outbox node per append (a new set; NULL
 * with `err` for a bad append); `*box` the appends to make once they have
 * committed. */
durable__write_set_t *durable__outbox_writes(durable_hub_t *hub,
                                             const char *owner,
                                             const durable__commit_t *commit,
                                             durable__outbox_t **box,
                                             durable_error_t *err);
/* Make the appends of `box` in order, each with its id, removing its node;
 * then done(0) or done(the failure) at the first one that fails (it stays,
 * for the next claim).  Takes `box`; NULL is nothing to make. */
void durable__outbox_send(durable__outbox_t *box,
                          void (*done)(int status, const char *message,
                                       void *data),
                          void *data);
void durable__outbox_free(durable__outbox_t *box);
/* done(0) when the mesh's principal may append to every stream of `box`
 * (the platform may), else done(EACCES, why) at the first it may not. */
void durable__outbox_check(durable__outbox_t *box,
                           void (*done)(int status, const char *message,
                                        void *data),
                           void *data);
/* Make what an earlier holder left in the outbox of `owner` (the consumed
 * stream's key: the claim checked write on it). */
int durable__outbox_resume(durable_mesh_t *mesh, const char *owner,
                           void (*done)(int status, const char *message,
                                        void *data),
                           void *data, durable_error_t *err);

#endif

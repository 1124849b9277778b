/*
 * stream_hub.h: what the files of a stream node's hub share -- the hub
 * (durable__shub_t), an operation of its serial chain (durable__shub_op_t),
 * and what each file does for the others.
 *
 * stream_hub.c takes the requests and runs the chain; an operator's acts
 * and the lookup of stored publish ids run in its turns, and what every
 * operation needs, whichever file runs it, lies below them all, so that the
 * arrows between the files point one way (tests/house/circles.sh: no two
 * files call each other):
 *
 *   stream_hub.c           the requests; the chain's engine; appends and
 *     |   |   |            acks in batches, claims, releases
 *     |   |   v
 *     |   |  stream_hub_ids.c       publish ids found stored
 *     |   v
 *     |  stream_hub_operator.c      an operator's seek, trim and delete
 *     v
 *   stream_hub_group.c     consumer groups: a group's node's hub, a group
 *     |                    made, the groups a stream's hub wakes owners for
 *     v
 *   stream_hub_op.c        an operation's end: answered, failed, decided
 *     |                    again; the owner woken
 *     v
 *   stream_hub_write.c     the decision written: a compare-and-set on the
 *                          stream node
 *
 * (each file may call any below it)
 *
 * The end of an operation starts the next one's turn: the files below
 * stream_hub.c reach its engine through sh->pump, which it sets.
 */
#ifndef DURABLE_STREAMS_STREAM_HUB_H
#define DURABLE_STREAMS_STREAM_HUB_H

#include "protocol.h"
#include "queue.h"
#include "stream.h"

typedef struct durable__shub_op_s durable__shub_op_t;
struct durable__shub_op_s {
  struct durable__queue link; /* in its hub's chain (sh->ops) */
  durable__stream_op_t kind;
  durable_reply_t *reply;
  durable__stream_req_t *req; /* what was asked (protocol.h) */
  int typed;                  /* asked with a typed body: answer in kind */
  int attempts;
  /* an ack in a batch: refused (fenced), and why */
  int refused;
  char *reason;
  /* an append in a batch: the sequence it is answered with (its item's, or
   * for a repeated publish id the first append's) */
  int64_t seq;
  /* an append whose publish id was found stored: its sequence (0: not) */
  int64_t known;
};

/* What a stream hub only remembers, as bits of sh->flags (its counters
 * stay counters).
 *
 * The chain is in one of three states:
 *
 *   idle     DURABLE__SHUB_BUSY clear: nothing runs; a request that comes
 *            runs at once
 *   a turn   DURABLE__SHUB_BUSY: the head runs -- the node read first
 *            unless DURABLE__SHUB_HAVE_STATE, then whatever it waits for:
 *            the next sequence derived, a claim's holder probed
 *            (sh->holder), its decision written, a batch's publish ids
 *            looked up (sh->looking) -- until the turn ends
 *            (durable__shub_go_on); requests that come meanwhile queue
 *   left     DURABLE__SHUB_DEAD: the hub was disposed; what is queued is
 *            failed without being run
 *
 * The owner is woken once per orphan period: not yet, then
 * DURABLE__SHUB_WAKING while the wake is out, then DURABLE__SHUB_WOKEN
 * once it went (cleared again by a new lease or orphan period). */
enum {
  /* sh->state is the stream node as last read or written (else the next
   * turn reads it first) */
  DURABLE__SHUB_HAVE_STATE = 1 << 0,
  DURABLE__SHUB_BUSY = 1 << 1, /* the head's turn is on */
  DURABLE__SHUB_DEAD = 1 << 2, /* the hub left: nothing queued runs */
  DURABLE__SHUB_WAKING = 1 << 3,
  DURABLE__SHUB_WOKEN = 1 << 4,
  /* the batch in flight has appends with a publish id */
  DURABLE__SHUB_WITH_IDS = 1 << 5,
  /* the trim in flight goes past the checkpoint: it moves the checkpoint
   * and lets the lease go */
  DURABLE__SHUB_TRIM_FORCED = 1 << 6,
  /* a group's hub: sh->parent was read in this turn */
  DURABLE__SHUB_PARENT_READ = 1 << 7,
  /* a stream's hub: sh->groups was listed (in this activation), or the
   * listing is out */
  DURABLE__SHUB_GROUPS_LISTED = 1 << 8,
  DURABLE__SHUB_GROUPS_LISTING = 1 << 9,
  /* the claim in flight is its holder's claim again */
  DURABLE__SHUB_REGRANT = 1 << 10
};

/* What a stream's hub knows of one of the stream's consumer groups, as last
 * listed, written by this process's group hubs, or heard from others (the
 * waker): enough to wake the owner for it once per orphan period. */
typedef struct {
  durable__stream_state_t state;
  int64_t version;
  unsigned flags;    /* DURABLE__SHUB_WAKING, DURABLE__SHUB_WOKEN */
  int64_t oldest_at; /* a trim's: its oldest unacknowledged item's time */
  char *detaching;   /* the trim in flight detaches it, saying this */
} durable__shub_group_t;

typedef struct durable__shub_s durable__shub_t;
struct durable__shub_s {
  durable_hub_t *hub;
  durable_mesh_t *mesh;
  char *path;
  char items_ns[DURABLE_PATH_MAX + 32];
  unsigned flags; /* DURABLE__SHUB_* */
  durable__stream_state_t state;
  int64_t next_seq; /* 0: derive again */
  /* the stream node's version that `state` is: the next write replaces the
   * node at that version, unread (0: not known, so read-modify-write) */
  int64_t version;
  uint64_t contended_until; /* uv_now: another process writes here too */
  uint64_t server_gen;      /* the store's server when `state` was known */
  /* the serial chain (durable__shub_op_t), first in first out: its first
   * operation is the head, whose turn it is (durable__shub_head) */
  struct durable__queue ops;
  char *holder;          /* a claim's probe in flight: the holder probed */
  char *holder_instance; /* ... when it is in another process: which */
  size_t batch;    /* operations in the transaction in flight (the head's) */
  size_t appends;  /* ... of which appends that make an item */
  size_t looking;  /* publish ids being read after the batch hit one */
  int failed_code; /* ... and what the batch failed with */
  char failed_message[256];
  size_t failed_write; /* the last write's refused write: 1 + its index */
  /* an operator's act in flight: the checkpoint a seek moves from, the
   * TrimmedThrough a trim raises, the DeletingAt a delete's last step
   * removes the node at */
  int64_t op_was;
  int op_resumed; /* ... and the seek lets a stream stopped go on (2: past
                     lost sequences) */
  /* stream_hub.c's engine: runs the head once its turn comes (see
   * durable__shub_go_on); `run` goes on with the head's turn, its state
   * known */
  void (*pump)(durable__shub_t *sh);
  void (*run)(durable__shub_t *sh);
  /* A consumer group's hub (stream_hub_group.c): the group's name, its
   * stream's path, and the stream node as read in this turn; NULL for a
   * stream's own hub */
  char *group;
  char *stream_path;
  durable__stream_state_t parent;
  const char *node_type; /* DurableStream or DurableStreamGroup */
  /* a stream's hub: its groups, as far as this process knows */
  durable__shub_group_t *groups;
  size_t ngroups;
};

/* The chain's head (NULL: the chain is empty). */
static inline durable__shub_op_t *
durable__shub_head(const durable__shub_t *sh) {
  return durable__queue_empty(&sh->ops)
             ? NULL
             : DURABLE__QUEUE_DATA(durable__queue_head(&sh->ops),
                                   durable__shub_op_t, link);
}

/* The operation after `op` on the chain (NULL: `op` is the last).  A batch
 * is the head and those after it, walked with this. */
static inline durable__shub_op_t *
durable__shub_after(const durable__shub_t *sh, const durable__shub_op_t *op) {
  return op->link.next == &sh->ops
             ? NULL
             : DURABLE__QUEUE_DATA(op->link.next, durable__shub_op_t, link);
}

/* ---- stream_hub_ids.c: publish ids found stored ------------------------- */

/* The batch of the first `n` operations failed with `res` on a node that
 * exists (DURABLE_EEXIST): read the node of each publish id in it, answer
 * the appends whose id is stored with the sequence it names, and decide the
 * rest again.  The head's turn ends there. */
void durable__shub_read_ids(durable__shub_t *sh, size_t n,
                            const durable_result_t *res);

/* ---- stream_hub_operator.c: an operator's acts -------------------------- */

/* The head is an operator's seek, trim or delete (protocol.h): run it. */
void durable__shub_seek(durable__shub_t *sh);
void durable__shub_trim(durable__shub_t *sh);
void durable__shub_delete(durable__shub_t *sh);

/* ---- stream_hub_group.c: consumer groups -------------------------------- */

/* A group's hub, at the head's turn: a claim, seek or delete needs the
 * stream as stored now -- read it (sh->parent) and go on with the turn
 * (sh->run), or fail the head when the stream is not there.  1 when it took
 * the turn over. */
int durable__shub_group_needs_parent(durable__shub_t *sh);
/* A stream's hub, at the head's turn: a durable.group request (a group's
 * first claim found none) -- make the group's node, at the request's start,
 * and answer. */
void durable__shub_group_create(durable__shub_t *sh);
/* A group's claim on a stream being deleted, or behind what was trimmed:
 * refused, saying why and what to do.  1 when refused. */
int durable__shub_group_refuse(durable__shub_t *sh);
/* A group's lease changed here (granted, acknowledged, let go): the
 * stream's hub of this process hears it; let go with items waiting, the
 * owner is woken. */
void durable__shub_group_changed(durable__shub_t *sh, int let_go);
/* A group's operator delete (Epoch 1: force). */
void durable__shub_group_delete(durable__shub_t *sh);
/* A stream's hub appended: the owner is woken for each group nobody holds
 * that now has items waiting (the groups listed once per activation). */
void durable__shub_groups_appended(durable__shub_t *sh);
/* Read every group of the stream afresh into sh->groups -- with `oldest`,
 * and the oldest unacknowledged item's time of each that bounds its age --
 * then `then(sh, status)` (a trim decides on them). */
void durable__shub_groups_read(durable__shub_t *sh, int oldest,
                               void (*then)(durable__shub_t *sh, int status,
                                            const char *message));
void durable__shub_groups_free(durable__shub_t *sh);

/* ---- stream_hub_op.c: an operation's end -------------------------------- */

/* The stream hub of `hub` (NULL: not one), attached under this key. */
extern const char durable__shub_key;
durable__shub_t *durable__shub_of(durable_hub_t *hub);

void durable__shub_op_free(durable__shub_op_t *op);
/* The head off the chain (NULL: none). */
durable__shub_op_t *durable__shub_pop(durable__shub_t *sh);
/* The hub's stream, borrowed from its state. */
durable_stream_id_t durable__shub_id(const durable__shub_t *sh);

/* Answer `op` with `ans` (taken; NULL: out of memory), in the form it was
 * asked in. */
void durable__shub_answer(durable__shub_op_t *op, durable__stream_ans_t *ans);
/* An answer of ok / not ok (ack, release). */
void durable__shub_answer_ok(durable__shub_op_t *op, int ok,
                             const char *reason);
/* Answer an append with `seq`. */
void durable__shub_answer_seq(durable__shub_op_t *op, int64_t seq);

/* The head's turn is over (it stays on the chain, or left it already): the
 * next turn begins. */
void durable__shub_go_on(durable__shub_t *sh);
/* The head operation is over, answered by the caller: off the chain, and
 * the next turn begins. */
void durable__shub_next(durable__shub_t *sh);
/* The head fails with `code` and `message`. */
void durable__shub_fail(durable__shub_t *sh, int code, const char *message);
/* A compare-and-set lost, or the store refused: read again and decide again
 * (bounded), else fail the head with `code` and `message`. */
void durable__shub_retry(durable__shub_t *sh, int code, const char *message);
/* The stored tail or checkpoint may have moved since this hub read them
 * (another process appends and acknowledges): a request `beyond` them is
 * decided again on the stored state before it is refused.  1 when it is
 * (the head's turn is over), 0 to go on deciding. */
int durable__shub_read_again_first(durable__shub_t *sh, int beyond);
/* A stream being deleted (durable_stream_delete) takes no append, claim,
 * seek or trim: refused with ENOTFOUND, saying it cannot be `what`, after
 * one read again -- it may be gone by now, and then a producer makes a new
 * one.  1 when refused or read again (the head's turn is over). */
int durable__shub_refuse_deleting(durable__shub_t *sh, const char *what);
/* A stream stopped because the store went back (seen.c) takes no append
 * and no claim until an operator's seek: refused with DURABLE_EIO, naming
 * what was seen, what is stored and the seek that goes on.  1 when refused
 * (the head's turn is over).  durable__shub_behind_says writes that
 * sentence (`what`: "appended to", "claimed", NULL for the log). */
int durable__shub_refuse_behind(durable__shub_t *sh, const char *what);
void durable__shub_behind_says(durable__shub_t *sh, const char *what, char *out,
                               size_t size);
/* A lease write (claim, ack, release, an operator's act) came back: 1 when
 * it was saved.  A lost compare-and-set -- and with `retry_absent` (a
 * claim) a stream node that vanished -- is decided again on a fresh read;
 * any other failure fails the operation. */
int durable__shub_lease_saved(durable__shub_t *sh, const durable_result_t *res,
                              int retry_absent);

/* Delete the hub's node, in one transaction with `check`: a mutator that
 * writes nothing and refuses (DURABLE_ECONFLICT) unless the node is still
 * as the operation decided (its argument is &sh->op_was).  `then` hears how
 * it went, with `sh` as its data, and drops the hub's reference. */
void durable__shub_delete_node(durable__shub_t *sh, durable_mutate_cb check,
                               durable_done_cb then);

/* Activate the owner and post it a wake (wake.c), once per orphan period:
 * items wait that nobody holds. */
void durable__shub_wake_owner(durable__shub_t *sh);

/* ---- stream_hub_write.c: an operation's decision written --------------- */

/* What an operation decided on, and so what it may change.  An append
 * decided on LastSequence and changes only that; a claim, ack or release
 * decided on the lease (holder, process, epoch, checkpoint) and changes only
 * the lease's fields.  So an append and an ack made at once by two
 * processes -- a producer and the holder -- both go through.  A batch of
 * this process's appends and acks decides on both. */
typedef enum {
  DURABLE__PART_TAIL = 1,
  DURABLE__PART_LEASE = 2
} durable__shub_part_t;

/* An extra write of a batch: an item, or the node of its publish id
 * (`id_path`), for the sequence `seq` as decided on the cached state. */
typedef struct {
  int64_t seq;         /* 0 ends the list */
  const char *payload; /* an item's: the op's, alive until it is answered */
  int64_t appended_at; /* an item's */
  char *id_path;       /* an id node's, owned */
} durable__batch_write_t;

/* A batch's list of extra writes (ends at seq 0), with its id paths. */
void durable__batch_writes_free(durable__batch_write_t *made);

/* What the hub knows of its node is no longer to be trusted: read it again
 * (and its version), and derive the next sequence again. */
void durable__shub_forget_state(durable__shub_t *sh);

typedef void (*durable__shub_written_fn)(durable__shub_t *sh,
                                         const durable_result_t *res);

/* Write the decision `next` (made on the cached state) into the stream node,
 * changing only `part` (durable__shub_part_t bits), then `extra` writes
 * (items, effects) in the same transaction, checked as the principal `as`
 * (NULL: the platform); `made` (taken; NULL for none) are the batch's items
 * and ids, made again at later sequences should another process's appends
 * be in the way.  `then` hears how it went, with `sh->state` what is stored
 * now when that is known.  Takes `next`. */
void durable__shub_write_state(durable__shub_t *sh, int part,
                               durable__stream_state_t *next,
                               durable_write_t *extra, size_t nextra,
                               durable__batch_write_t *made, const char *as,
                               durable__shub_written_fn then);

#endif

/*
 * stream_hub.c: the hub of a stream node, which orders everything that
 * happens to its stream.
 *
 * Append, claim, ack and release arrive as requests and go into one serial
 * chain per activation: one operation finishes -- store write, and for a
 * claim the ping of the holder -- before the next starts.  That is what
 * makes sequences contiguous and the lease exclusive within a process.
 * Across processes each operation is a compare-and-set on the stream node:
 * the part of the state it decided on -- LastSequence for an append, the
 * lease for a claim, ack or release -- must not have moved since it was
 * read, checked in the write transaction itself.  So two stream hubs in two
 * processes cannot both win (the loser re-reads and decides again), while a
 * producer's append in one process and the holder's ack in another do not
 * get in each other's way.
 *
 *   request --> chain: [append ack append append] [claim] [release] ...
 *                        one transaction            ping holder if held
 *                        items, LastSequence and    then write the lease
 *                        Checkpoint
 *
 * Appends and acknowledgements waiting in the chain together go into one
 * transaction: the items, the new LastSequence and the new Checkpoint, all
 * or nothing -- so a consumer keeping up with a producer shares its
 * commits.  The stream node is replaced at the version the hub last saw
 * (no read, no decode); after another process's write was in the way, it
 * is read and changed under the row's lock instead, for a while -- and
 * there an append that finds the tail moved takes the sequences after it,
 * its items made again on the writer thread (remake_write), rather than
 * losing again to the producers that keep the lock busy.  The next
 * sequence is re-derived after a recycle or a failure from both LastSequence
 * and the highest stored item, so an item left above LastSequence (made by
 * hand, or by another writer) is never handed out twice.
 *
 * An append with a publish id also creates the id's write-once node
 * (publish_id.c) in the batch's transaction.  An id twice in one batch is
 * one item: the later append is answered with the earlier one's sequence.
 * An id already stored fails the whole transaction on the node's key
 * (DURABLE_EEXIST); the hub then reads the batch's ids, answers those it
 * finds with the sequence they got the first time, takes them off the
 * chain, and decides the rest again -- so a duplicate from another process,
 * or one that raced its first attempt here, appends nothing and loses no
 * other append.  Appends without an id write what they always did.
 *
 * An append to a stream nobody holds, and a release that leaves
 * unacknowledged items, wake the owner: a mesh read of the owner (which
 * activates it, so its consumer starts) then a wake message, at most once
 * per orphan period.
 */
#include "lease.h"
#include "protocol.h"
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define APPEND_BATCH 256
/* After another process's write was found in the way, the state is decided
 * under the row's lock (read-modify-write) for this long, rather than
 * replaced at a cached version that keeps going stale. */
#define CONTENDED_MS 1000
/* Compare-and-set retries before an operation is reported failed. */
#define MAX_ATTEMPTS 8
/* ... and for an append that lost its sequences to another process's
 * append: it goes on after the tail it just read, so each attempt costs one
 * transaction, and producers of several processes on one stream take turns
 * (the stream's row lock orders them).  Bounded only against a livelock. */
#define MAX_CONTENDED 256

typedef struct op_s op_t;
struct op_s {
  op_t *next;
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

typedef struct {
  durable_hub_t *hub;
  durable_mesh_t *mesh;
  char *path;
  char items_ns[DURABLE_PATH_MAX + 32];
  durable__stream_state_t state;
  int have_state;
  int64_t next_seq; /* 0: derive again */
  /* the stream node's version that `state` is: the next write replaces the
   * node at that version, unread (0: not known, so read-modify-write) */
  int64_t version;
  uint64_t contended_until; /* uv_now: another process writes here too */
  op_t *head, *tail;
  int busy;
  int dead; /* the hub left: queued operations are not run any more */
  int waking, woken;
  char *holder;          /* a claim's probe in flight: the holder probed */
  char *holder_instance; /* ... when it is in another process: which */
  size_t batch;    /* operations in the transaction in flight (the head's) */
  size_t appends;  /* ... of which appends that make an item */
  int with_ids;    /* ... of which some carry a publish id */
  size_t looking;  /* publish ids being read after the batch hit one */
  int failed_code; /* ... and what the batch failed with */
  char failed_message[256];
  size_t failed_write; /* the last write's refused write: 1 + its index */
  /* an operator's seek or trim in flight: the checkpoint (seek) or
   * TrimmedThrough (trim) it moves from; the trim moves the checkpoint */
  int64_t op_was;
  int op_forced;
} shub_t;

static const char shub_key;

/* ---- the chain
 * ---------------------------------------------------------------- */

static void pump(shub_t *sh);

static void op_free(op_t *op) {
  durable__body_free(op->req ? &op->req->base : NULL);
  free(op->reason);
  free(op);
}

static op_t *pop(shub_t *sh) {
  op_t *op = sh->head;
  if (op) {
    sh->head = op->next;
    if (sh->head == NULL)
      sh->tail = NULL;
  }
  return op;
}

static durable_stream_id_t id_of(const shub_t *sh) {
  return (durable_stream_id_t){.ns = sh->state.ns, .key = sh->state.key};
}

/* Answer `op` with `ans` (taken; NULL: out of memory), in the form it was
 * asked in. */
static void answer(op_t *op, durable__stream_ans_t *ans) {
  if (ans == NULL) {
    durable_reply_fail(op->reply, DURABLE_ENOMEM, "out of memory");
  } else if (op->typed) {
    durable__reply_body(op->reply, &ans->base);
  } else {
    char *text = durable__stream_ans_json(op->kind, ans);
    if (text)
      durable_reply_ok(op->reply, text);
    else
      durable_reply_fail(op->reply, DURABLE_ENOMEM, "out of memory");
    free(text);
    durable__body_free(&ans->base);
  }
  op->reply = NULL;
}

/* An answer of ok / not ok (ack, release). */
static void answer_ok(op_t *op, int ok, const char *reason) {
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = ok;
    if (durable__stream_ans_set(&ans->reason, reason) < 0) {
      durable__body_free(&ans->base);
      ans = NULL;
    }
  }
  answer(op, ans);
}

/* The head operation is over: answered by the caller. */
static void next_op(shub_t *sh) {
  op_free(pop(sh));
  sh->busy = 0;
  pump(sh);
}

static void fail_head(shub_t *sh, int code, const char *message) {
  durable_reply_fail(sh->head->reply, code, message);
  next_op(sh);
}

/* What the hub knows of its node is no longer to be trusted: read it again
 * (and its version), and derive the next sequence again. */
static void forget_state(shub_t *sh) {
  sh->have_state = 0;
  sh->version = 0;
  sh->next_seq = 0;
}

/* A compare-and-set lost, or the store refused: read again and decide again
 * (bounded), else fail the head. */
static void retry_head(shub_t *sh, int code, const char *message) {
  forget_state(sh);
  if (++sh->head->attempts >= MAX_ATTEMPTS) {
    fail_head(sh, code, message);
    return;
  }
  sh->busy = 0;
  pump(sh);
}

/* The stored tail or checkpoint may have moved since this hub read them
 * (another process appends and acknowledges): a request beyond them is
 * decided again on the stored state before it is refused. */
static int read_again_first(shub_t *sh, int beyond) {
  if (!beyond || sh->head->attempts > 0)
    return 0;
  retry_head(sh, DURABLE_EINVAL, "read again");
  return 1;
}

/* A stream being deleted (durable_stream_delete) takes no append, claim,
 * seek or trim: refused with ENOTFOUND, after one read again -- it may be
 * gone by now, and then a producer makes a new one. */
static int refuse_deleting(shub_t *sh, const char *what) {
  if (sh->state.deleting_at == 0)
    return 0;
  if (read_again_first(sh, 1))
    return 1;
  durable_stream_id_t id = id_of(sh);
  char message[sizeof(durable__stream_name_t) + 160];
  snprintf(message, sizeof message,
           "durable stream %s is being deleted (durable delete-stream): it "
           "cannot be %s until that has finished",
           durable__stream_name(&id).text, what);
  fail_head(sh, DURABLE_ENOTFOUND, message);
  return 1;
}

/* ---- writes of the state
 * ---------------------------------------------------------- */

typedef void (*written_fn)(shub_t *sh, const durable_result_t *res);

/* What an operation decided on, and so what it may change.  An append
 * decided on LastSequence and changes only that; a claim, ack or release
 * decided on the lease (holder, process, epoch, checkpoint) and changes only
 * the lease's fields.  So an append and an ack made at once by two
 * processes -- a producer and the holder -- both go through.  A batch of
 * this process's appends and acks decides on both. */
typedef enum { PART_TAIL = 1, PART_LEASE = 2 } part_t;

typedef struct {
  shub_t *sh;
  written_fn then;
  int part;                     /* part_t bits */
  durable__stream_state_t base; /* the state the decision was made on */
  durable__stream_state_t next; /* the decision */
  const char *path;
  /* set by the mutator: the state as stored now -- the one written, or on
   * a lost compare-and-set the one that won */
  durable__stream_state_t seen;
  int have_seen;
  int replace; /* written as a replace at sh->version, not by the mutator */
  /* a batch's appends, made again by the mutator's decision (remake) */
  struct batch_write_s *made; /* one per extra write, or NULL */
  const char *items_ns;
  int64_t shift;   /* the mutator's: sequences this much later than decided */
  int64_t made_at; /* the shift the store's writes were last made at */
  int remade;      /* ... and this run changed it: make them again */
  int went_back;   /* the mutator's: the stored tail is behind the decision
                      (deleted and made anew): decide from scratch */
} write_ctx_t;

/* An extra write of a batch: an item, or the node of its publish id
 * (`id_path`), for the sequence `seq` as decided on the cached state. */
typedef struct batch_write_s {
  int64_t seq;         /* 0 ends the list */
  const char *payload; /* an item's: the op's, alive until it is answered */
  int64_t appended_at; /* an item's */
  char *id_path;       /* an id node's, owned */
} batch_write_t;

/* A batch's list of extra writes (ends at seq 0), with its id paths. */
static void made_free(batch_write_t *made) {
  for (size_t i = 0; made && made[i].seq != 0; i++)
    free(made[i].id_path);
  free(made);
}

static int same_str(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

/* The compare-and-set, as a mutator (writer thread: touches only `arg`
 * and what it allocates): refused with DURABLE_ECONFLICT when the part
 * decided on moved since it was read, else the stored state with that part
 * replaced by the decision. */
static int mutate_state(const durable_node_t *current, char **content,
                        char **node_type, void *arg) {
  write_ctx_t *w = arg;
  const durable__stream_state_t *base = &w->base, *next = &w->next;
  durable__stream_state_t cur;
  if (current == NULL)
    return DURABLE_ENOTFOUND;
  int decoded = durable__state_decode(current->content, w->path, &cur);
  if (decoded < 0)
    return decoded;
  int tail_moved =
      (w->part & PART_TAIL) && cur.last_sequence != base->last_sequence;
  int lease_moved =
      (w->part & PART_LEASE) &&
      (!same_str(cur.subscriber, base->subscriber) ||
       !same_str(cur.subscriber_instance, base->subscriber_instance) ||
       cur.lease_epoch != base->lease_epoch ||
       cur.checkpoint != base->checkpoint);
  /* Another process appended since the decision: a batch whose items are
   * made here (remake) takes the sequences after its tail instead, decided
   * under the row's lock, so that it cannot be overtaken again.  A tail
   * behind the decision is a stream deleted and made anew: no shift can
   * mend that, the sequence is derived again. */
  w->shift = 0;
  w->went_back =
      (w->part & PART_TAIL) && cur.last_sequence < base->last_sequence;
  if (tail_moved && w->made && !w->went_back) {
    /* the first item right after the stored tail: the decision's own
     * first sequence may be further off than the tail it read (derived
     * from a newer last item), and must not leave a gap; never back, onto
     * items stored above the tail (made by hand) that it knew of */
    int64_t shift = cur.last_sequence + 1 - w->made[0].seq;
    w->shift = shift > 0 ? shift : 0;
    tail_moved = 0;
  }
  /* the items stand as last made, unless the shift changed (remake_write;
   * until it has made them all, they are at no shift) */
  w->remade = w->shift != w->made_at;
  if (w->remade)
    w->made_at = INT64_MIN;
  /* a stream being deleted takes no append and no new lease (a claim's,
   * seek's or trim's decision made before it began is refused) */
  int deleting_began = cur.deleting_at != base->deleting_at;
  int moved = tail_moved || lease_moved || deleting_began;
  int rc = moved ? DURABLE_ECONFLICT : 1;
  if (!moved && (w->part & PART_TAIL))
    cur.last_sequence = next->last_sequence + w->shift;
  if (!moved && (w->part & PART_LEASE)) {
    if (durable__str_set(&cur.subscriber, next->subscriber) < 0 ||
        durable__str_set(&cur.subscriber_instance, next->subscriber_instance) <
            0 ||
        durable__str_set(&cur.last_subscriber, next->last_subscriber) < 0)
      rc = DURABLE_ENOMEM;
    cur.lease_epoch = next->lease_epoch;
    cur.subscribed_at = next->subscribed_at;
    cur.checkpoint = next->checkpoint;
    cur.checkpoint_at = next->checkpoint_at;
    cur.orphaned_at = next->orphaned_at;
    /* only ever raised (by a trim): a decision made on a state read
     * before a trim must not lower it */
    if (next->trimmed_through > cur.trimmed_through)
      cur.trimmed_through = next->trimmed_through;
    cur.deleting_at = next->deleting_at;   /* only a delete sets it */
    if (next->hold_until > cur.hold_until) /* only ever moved later */
      cur.hold_until = next->hold_until;
  }
  if (rc == 1) {
    *content = durable__state_encode(&cur);
    *node_type = strdup(DURABLE__STREAM_TYPE);
    if (*content == NULL || *node_type == NULL)
      rc = DURABLE_ENOMEM;
  }
  /* a group that is run again calls the mutator again: keep the last */
  durable__state_free(&w->seen);
  w->have_seen = rc == 1 || rc == DURABLE_ECONFLICT;
  if (w->have_seen)
    w->seen = cur; /* taken */
  else
    durable__state_free(&cur);
  return rc;
}

static void write_ctx_free(write_ctx_t *w) {
  made_free(w->made);
  durable__state_free(&w->base);
  durable__state_free(&w->next);
  durable__state_free(&w->seen);
  free(w);
}

static void on_written(const durable_result_t *res, void *data) {
  write_ctx_t *w = data;
  shub_t *sh = w->sh;
  durable__stream_state_t *stored = NULL;
  if (res->status == 0) {
    /* written: the decision (a replace) or what the mutator stored */
    stored = w->replace ? &w->next : w->have_seen ? &w->seen : NULL;
    sh->version = durable__written_version(res, 0);
    if (w->shift != 0 && !w->replace) {
      /* the mutator took later sequences (remake_write): so do the
       * answers of the batch's appends */
      op_t *op = sh->head;
      for (size_t i = 0; op && i < sh->batch; i++, op = op->next)
        if (op->kind == DURABLE__OP_APPEND)
          op->seq += w->shift;
    }
  } else if (res->status == DURABLE_ECONFLICT && w->went_back) {
    forget_state(sh); /* a new stream: read it, derive its next sequence */
  } else if (res->status == DURABLE_ECONFLICT && w->have_seen) {
    /* the mutator read the row under its lock and found another process's
     * write in the way: the retry decides on that without reading again */
    stored = &w->seen;
    sh->version = 0;
  } else if (w->replace && (res->status == DURABLE_ECONFLICT ||
                            res->status == DURABLE_EEXIST)) {
    /* the cached state went stale: decide under the lock from now on; the
     * mutator compares only the part decided on */
    sh->version = 0;
    sh->contended_until = uv_now(durable_mesh_loop(sh->mesh)) + CONTENDED_MS;
  } else {
    sh->have_state = 0;
    sh->version = 0;
  }
  sh->failed_write = res->status < 0 ? durable__failed_write(res) : 0;
  if (sh->failed_write > 1 && w->have_seen && !w->replace) {
    /* the stream node's write went through and was rolled back with the
     * item or effect refused after it: what the mutator saw is what is
     * stored, not what it wrote */
    durable__state_free(&w->seen);
    if (durable__state_copy(&w->base, &w->seen) == 0)
      stored = &w->seen;
    else
      stored = NULL, sh->have_state = 0;
  }
  if (stored) {
    durable__state_free(&sh->state);
    sh->state = *stored;
    memset(stored, 0, sizeof *stored);
    sh->have_state = 1;
  }
  w->then(sh, res);
  durable_hub_unref(sh->hub);
  write_ctx_free(w);
}

/* Extra write `i` of a batch, made on the mutator's decision (writer
 * thread: touches only `arg`, the payloads it borrows, and what it
 * allocates). */
static int remake_write(void *arg, size_t i, char **path, char **content) {
  write_ctx_t *w = arg;
  if (!w->remade)
    return 1; /* made at this shift already */
  const batch_write_t *b = &w->made[i - 1];
  int64_t seq = b->seq + w->shift;
  if (b->id_path) {
    *path = strdup(b->id_path);
    *content = durable__publish_id_encode(seq);
  } else {
    char id[13];
    durable__item_id(seq, id);
    size_t n = strlen(w->items_ns) + 1 + strlen(id) + 1;
    if ((*path = malloc(n)) != NULL)
      snprintf(*path, n, "%s/%s", w->items_ns, id);
    *content = durable__item_encode(seq, b->payload, b->appended_at);
  }
  if (b[1].seq == 0 && *path && *content)
    w->made_at = w->shift; /* the last one: all made at this shift */
  return 0;
}

/* Write the decision `next` (made on the cached state) into the stream node,
 * changing only `part`, then `extra` writes (items) in the same
 * transaction.  The stream node comes first: a compare-and-set lost to
 * another process is refused before any item is tried.  Takes `next`. */
static void write_state(shub_t *sh, int part, durable__stream_state_t *next,
                        durable_write_t *extra, size_t nextra,
                        batch_write_t *made, const char *as, written_fn then) {
  write_ctx_t *w = calloc(1, sizeof(*w));
  if (w) {
    w->made = made; /* taken */
    w->items_ns = sh->items_ns;
  } else {
    made_free(made);
  }
  durable_write_t *writes = calloc(nextra + 1, sizeof(*writes));
  durable_error_t err = {0};
  int rc = DURABLE_ENOMEM;
  if (w)
    w->next = *next; /* taken */
  else
    durable__state_free(next);
  if (w && writes && durable__state_copy(&sh->state, &w->base) == 0) {
    for (size_t i = 0; i < nextra; i++)
      writes[i + 1] = extra[i];
    w->sh = sh;
    w->then = then;
    w->part = part;
    w->path = sh->path;
    /* Known at its version and nobody else writing: the whole new state,
     * checked against the version by the database (no read, no decode on
     * the writer).  Else read-modify-write of the part decided on. */
    char *content = NULL;
    w->replace = sh->version > 0 &&
                 uv_now(durable_mesh_loop(sh->mesh)) >= sh->contended_until &&
                 (content = durable__state_encode(&w->next)) != NULL;
    if (w->replace)
      writes[0] = (durable_write_t){.kind = DURABLE_WRITE_REPLACE,
                                    .path = sh->path,
                                    .node_type = DURABLE__STREAM_TYPE,
                                    .content = content,
                                    .expected_version = sh->version};
    else
      writes[0] = (durable_write_t){.kind = DURABLE_WRITE_MUTATE,
                                    .path = sh->path,
                                    .mutate = mutate_state,
                                    .mutate_arg = w};
    durable_hub_ref(sh->hub);
    rc = durable__store_write_remade(
        durable_mesh_store(sh->mesh), as, writes, nextra + 1,
        !w->replace && w->made ? remake_write : NULL, on_written, w, &err);
    free(content);
    if (rc < 0)
      durable_hub_unref(sh->hub);
  }
  free(writes);
  if (rc < 0) {
    sh->failed_write = 0;
    if (w)
      write_ctx_free(w);
    durable_result_t res = {.status = rc,
                            .message =
                                err.message[0] ? err.message : "out of memory"};
    then(sh, &res);
  }
}

static int64_t now_ms(void) {
  return durable__now_ms();
}

/* This process, as a lease names it. */
static const char *here(const shub_t *sh) {
  return durable_store_instance(durable_mesh_store(sh->mesh));
}

/* Held by another process with items waiting: should that process die,
 * this host's waker must know the stream (the change feed tells only of
 * other processes' commits, not of this one's appends). */
static void suspect_if_elsewhere(shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  if (durable__lease_where(s, here(sh)) == DURABLE__LEASE_ELSEWHERE &&
      durable__lease_waiting(s))
    durable__waker_suspect(sh->mesh, sh->path, s->subscriber_instance);
}

static void forget_holder(shub_t *sh) {
  free(sh->holder);
  free(sh->holder_instance);
  sh->holder = sh->holder_instance = NULL;
}

/* ---- wake the owner
 * -------------------------------------------------------------------- */

static void on_woken(durable__wake_outcome_t outcome, void *data) {
  shub_t *sh = data;
  sh->waking = 0;
  /* once per orphan period; an owner that could not be read is tried
   * again at the next append */
  if (outcome != DURABLE__WAKE_UNAVAILABLE && outcome != DURABLE__WAKE_LEAVING)
    sh->woken = 1;
  durable_hub_unref(sh->hub);
}

static void wake_owner(shub_t *sh) {
  if (sh->waking || sh->woken)
    return; /* once per orphan period */
  if (sh->mesh->closing)
    return; /* the next host to start wakes it */
  sh->waking = 1;
  durable_hub_ref(sh->hub);
  durable_stream_id_t id = id_of(sh);
  if (durable__wake_owner(sh->mesh, &id, on_woken, sh) < 0) {
    sh->waking = 0;
    durable_hub_unref(sh->hub);
  }
}

/* ---- append
 * ------------------------------------------------------------------------------
 */

static int fenced(shub_t *sh, const op_t *op);

/* An ack's decision on the cached state: 1 when it moves the checkpoint, 0
 * when there is nothing to write (a repeat: accepted; fenced: refused,
 * `reason` set). */
static int decide_ack(shub_t *sh, op_t *op) {
  const durable__stream_state_t *s = &sh->state;
  free(op->reason);
  op->reason = NULL;
  op->refused = fenced(sh, op);
  if (op->refused) {
    char reason[2 * DURABLE_PATH_MAX + 2 * DURABLE_INSTANCE_MAX + 160];
    snprintf(reason, sizeof reason,
             "fenced: the lease is held by %s (process %s) at epoch %lld, "
             "not by %s (process %s) at epoch %lld",
             s->subscriber ? s->subscriber : "nobody",
             s->subscriber_instance ? s->subscriber_instance : "-",
             (long long)s->lease_epoch, op->req->subscriber, here(sh),
             (long long)op->req->epoch);
    op->reason = strdup(reason); /* NULL: refused without the why */
    return 0;
  }
  return op->req->sequence > s->checkpoint;
}

/* Answer an append with `seq`. */
static void answer_seq(op_t *op, int64_t seq) {
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans == NULL) {
    /* the item is saved: a bare "out of memory" would tell the producer
     * that it was not (the store's wording for this, write.c) */
    char message[96];
    snprintf(message, sizeof message,
             "out of memory after writing: the item was appended as "
             "sequence %lld",
             (long long)seq);
    durable_reply_fail(op->reply, DURABLE_ENOMEM, message);
    op->reply = NULL;
    return;
  }
  ans->sequence = seq;
  answer(op, ans);
}

/* Answer the `n` operations of a batch at the head of the chain, and take
 * them off it: appends with the sequences run_batch gave them, acks as
 * decide_ack decided. */
static void answer_batch(shub_t *sh, size_t n) {
  for (size_t i = 0; i < n; i++) {
    op_t *op = pop(sh);
    if (op->kind == DURABLE__OP_APPEND) {
      answer_seq(op, op->seq);
    } else {
      answer_ok(op, !op->refused, op->reason);
    }
    op_free(op);
  }
}

/* ---- publish ids found stored
 * ---------------------------------------------------------------------- */

typedef struct {
  shub_t *sh;
  op_t *op;
} id_read_t;

/* Every id read is back: the appends whose id was found are answered with
 * the sequence it names and leave the chain (they are among the first ops:
 * nothing leaves the front while the hub is busy); the rest is decided
 * again from a fresh state. */
static void ids_read(shub_t *sh, size_t n) {
  size_t found = 0;
  op_t **link = &sh->head, *last = NULL;
  for (size_t i = 0; i < n && *link; i++) {
    op_t *op = *link;
    if (op->kind == DURABLE__OP_APPEND && op->known > 0) {
      *link = op->next;
      answer_seq(op, op->known);
      op_free(op);
      found++;
    } else {
      last = op;
      link = &op->next;
    }
  }
  if (*link == NULL)
    sh->tail = last;
  if (found == 0) {
    /* not an id: an item in the way, say */
    retry_head(sh, sh->failed_code, sh->failed_message);
    return;
  }
  forget_state(sh);
  sh->busy = 0;
  pump(sh);
}

static void on_id_read(const durable_result_t *res, void *data) {
  id_read_t *r = data;
  shub_t *sh = r->sh;
  if (res->status == 0) /* 0: not known, also for want of memory */
    r->op->known = durable__publish_id_sequence(res->node->content);
  if (r->op->known < 0)
    r->op->known = 0;
  free(r);
  if (--sh->looking == 0)
    ids_read(sh, sh->batch);
  durable_hub_unref(sh->hub);
}

/* The batch of `n` ops failed on a node that exists: read the node of each
 * publish id in it, then ids_read. */
static void read_ids(shub_t *sh, size_t n, const durable_result_t *res) {
  sh->failed_code = res->status;
  snprintf(sh->failed_message, sizeof sh->failed_message, "%s",
           res->message ? res->message : durable_strerror(res->status));
  sh->batch = n;
  sh->looking = 1; /* held until every read is out */
  op_t *op = sh->head;
  for (size_t i = 0; i < n && op; i++, op = op->next) {
    op->known = 0;
    if (op->kind != DURABLE__OP_APPEND || op->req->id == NULL)
      continue;
    char path[DURABLE_PATH_MAX + 1];
    id_read_t *r = calloc(1, sizeof(*r));
    durable_error_t err = {0};
    if (r == NULL || durable__publish_id_path(sh->path, op->req->id, path,
                                              sizeof path, NULL) < 0) {
      free(r);
      continue;
    }
    *r = (id_read_t){.sh = sh, .op = op};
    sh->looking++;
    durable_hub_ref(sh->hub);
    if (durable_store_get(durable_mesh_store(sh->mesh), NULL, path, on_id_read,
                          r, &err) < 0) {
      sh->looking--;
      durable_hub_unref(sh->hub);
      free(r);
    }
  }
  if (--sh->looking == 0)
    ids_read(sh, n); /* no read went out: found nothing */
}

/* The batch run_batch wrote came back. */
static void batch_written(shub_t *sh, const durable_result_t *res) {
  /* the batch written, not the operations in the chain now: more may have
   * queued behind it while the transaction was in flight */
  size_t n = sh->batch, appends = sh->appends;
  int with_ids = sh->with_ids;
  sh->batch = sh->appends = 0;
  sh->with_ids = 0;
  if (res->status == DURABLE_ECONFLICT && sh->have_state) {
    /* another process wrote first: decide again on what won, read under
     * the row lock (run_batch goes on after its tail) */
    if (++sh->head->attempts >= MAX_CONTENDED) {
      fail_head(sh, res->status, res->message);
      return;
    }
    sh->busy = 0;
    pump(sh);
    return;
  }
  if (res->status == DURABLE_EEXIST && with_ids) {
    /* a publish id stored already, maybe */
    read_ids(sh, n, res);
    return;
  }
  if (res->status == DURABLE_ECONFLICT || res->status == DURABLE_EEXIST) {
    /* an item is in the way (made by hand, say): derive the sequence again
     * from both LastSequence and the highest stored item */
    retry_head(sh, res->status, res->message);
    return;
  }
  if (res->status < 0) {
    durable_stream_id_t id = id_of(sh);
    durable_mesh_log(sh->mesh, DURABLE_LOG_WARN,
                     "Durable stream %s: %s failed: %s",
                     durable__stream_name(&id).text,
                     appends ? "append" : "acknowledgement", res->message);
    forget_state(sh);
    for (size_t i = 0; i < n; i++) {
      op_t *op = pop(sh);
      durable_reply_fail(op->reply, res->status, res->message);
      op_free(op);
    }
    sh->busy = 0;
    pump(sh);
    return;
  }
  answer_batch(sh, n);
  if (appends) {
    sh->next_seq = sh->state.last_sequence + 1;
    if (sh->state.subscriber == NULL)
      wake_owner(sh);
    else
      suspect_if_elsewhere(sh);
  }
  sh->busy = 0;
  pump(sh);
}

static void derive_next(shub_t *sh);

/* An acknowledgement with the item's effects came back.  A refused effect
 * (a replace whose version moved, a create of a present node) fails this
 * item alone: nothing of it was written, and its consumer hands it again.
 * Anything else is what any lease write meets (batch_written). */
static void commit_written(shub_t *sh, const durable_result_t *res) {
  if (res->status < 0 && sh->failed_write > 1) {
    sh->batch = sh->appends = 0;
    fail_head(sh, res->status, res->message);
    return;
  }
  batch_written(sh, res);
}

/* An acknowledgement that carries its item's effects (durable_reply_commit):
 * one transaction of its own, the stream node's new Checkpoint first -- a
 * compare-and-set on the lease, so a consumer that lost its lease writes
 * nothing -- then the effects.  Never batched with other operations: an
 * effect the database refuses must fail this item alone.  A repeat of an
 * acknowledgement already written writes nothing again (its effects went
 * with the first). */
static void run_commit(shub_t *sh) {
  op_t *op = sh->head;
  durable__stream_state_t next;
  if (!decide_ack(sh, op) && !op->refused) {
    /* a repeat: acknowledged already, and its effects went with that --
     * refused, so that its consumer makes nothing of them again */
    op->refused = 1;
    op->reason = strdup("already acknowledged: its effects are not written "
                        "again");
  }
  if (op->refused) {
    answer_batch(sh, 1); /* refused (fenced, or a repeat) */
    sh->busy = 0;
    pump(sh);
    return;
  }
  if (durable__state_copy(&sh->state, &next) < 0) {
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  next.checkpoint = op->req->sequence;
  next.checkpoint_at = now_ms();
  sh->batch = 1;
  sh->appends = 0;
  sh->with_ids = 0;
  /* the effects are the consumer's writes: checked as its mesh's
   * principal, in the transaction (the claim already needed write on the
   * stream's owner, so the checkpoint passes the same check) */
  write_state(sh, PART_LEASE, &next, op->req->effects->writes,
              op->req->effects->count, NULL, durable_mesh_principal(sh->mesh),
              commit_written);
}

/* The appends and acknowledgements at the head of the chain, in one
 * transaction: the items, and the stream node with the new LastSequence
 * and the new Checkpoint.  A consumer's ack that waits behind a producer's
 * appends so shares their commit instead of taking one of its own. */
static void run_batch(shub_t *sh) {
  size_t n = 0, appends = 0, ids = 0;
  int deleting = sh->state.deleting_at != 0;
  if (deleting && sh->head->kind == DURABLE__OP_APPEND &&
      refuse_deleting(sh, "appended to"))
    return;
  for (op_t *op = sh->head;
       op && (op->kind == DURABLE__OP_APPEND || op->kind == DURABLE__OP_ACK) &&
       n < APPEND_BATCH;
       op = op->next) {
    if (deleting && op->kind == DURABLE__OP_APPEND)
      break; /* refused when it comes to the head */
    if (op->kind == DURABLE__OP_ACK && op->req->effects) {
      if (n == 0) {
        run_commit(sh); /* alone */
        return;
      }
      break; /* the batch ends before it */
    }
    n++;
    appends += op->kind == DURABLE__OP_APPEND;
    ids += op->kind == DURABLE__OP_APPEND && op->req->id != NULL;
  }
  if (appends && sh->next_seq == 0) {
    derive_next(sh); /* then back here */
    return;
  }
  /* a state read since (another process's appends) may be ahead of it */
  if (appends && sh->next_seq <= sh->state.last_sequence)
    sh->next_seq = sh->state.last_sequence + 1;
  durable__stream_state_t next;
  if (durable__state_copy(&sh->state, &next) < 0) {
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  /* an item per append, and an id node per publish id */
  size_t cap = appends + ids + 1;
  durable_write_t *items = calloc(cap, sizeof(*items));
  char(*paths)[DURABLE_PATH_MAX + 48] = calloc(cap, sizeof(*paths));
  char **contents = calloc(cap, sizeof(char *));
  op_t **with_id = ids ? calloc(ids, sizeof(op_t *)) : NULL;
  batch_write_t *made = calloc(cap + 1, sizeof(*made));
  int ok = items && paths && contents && (ids == 0 || with_id) && made;
  int part = appends ? PART_TAIL : 0;
  int64_t now = now_ms();
  size_t k = 0, w = 0, nid = 0;
  op_t *op = sh->head;
  for (size_t i = 0; ok && i < n; i++, op = op->next) {
    if (op->kind == DURABLE__OP_ACK) {
      if (decide_ack(sh, op) && op->req->sequence > next.checkpoint) {
        next.checkpoint = op->req->sequence;
        next.checkpoint_at = now;
        part |= PART_LEASE;
      }
      continue;
    }
    const char *pid = op->req->id;
    op_t *first = NULL;
    for (size_t j = 0; pid && j < nid && !first; j++)
      if (strcmp(with_id[j]->req->id, pid) == 0)
        first = with_id[j];
    if (first) { /* the same id earlier in this batch: one item */
      op->seq = first->seq;
      continue;
    }
    char id[13];
    op->seq = sh->next_seq + (int64_t)k;
    durable__item_id(op->seq, id);
    snprintf(paths[w], sizeof paths[w], "%s/%s", sh->items_ns, id);
    contents[w] = durable__item_encode(op->seq, op->req->payload, now);
    ok = contents[w] != NULL;
    items[w] = (durable_write_t){.kind = DURABLE_WRITE_CREATE,
                                 .path = paths[w],
                                 .node_type = DURABLE__ITEM_TYPE,
                                 .content = contents[w]};
    made[w] = (batch_write_t){
        .seq = op->seq, .payload = op->req->payload, .appended_at = now};
    w++;
    k++;
    if (ok && pid) {
      with_id[nid++] = op;
      ok = durable__publish_id_path(sh->path, pid, paths[w], sizeof paths[w],
                                    NULL) >= 0 &&
           (contents[w] = durable__publish_id_encode(op->seq)) != NULL;
      items[w] = (durable_write_t){.kind = DURABLE_WRITE_CREATE,
                                   .path = paths[w],
                                   .node_type = DURABLE__ID_TYPE,
                                   .content = contents[w]};
      made[w] = (batch_write_t){.seq = op->seq, .id_path = strdup(paths[w])};
      ok = ok && made[w].id_path != NULL;
      w++;
    }
  }
  if (!ok) {
    durable__state_free(&next);
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
  } else if (part == 0) {
    /* acks only, and none moves the checkpoint: answered, nothing
     * written */
    durable__state_free(&next);
    answer_batch(sh, n);
    sh->busy = 0;
    pump(sh);
  } else {
    if (k)
      next.last_sequence = sh->next_seq + (int64_t)k - 1;
    sh->batch = n;
    sh->appends = k;
    sh->with_ids = nid > 0;
    write_state(sh, part, &next, items, w, k ? made : NULL, NULL,
                batch_written);
    if (k)
      made = NULL; /* taken */
  }
  made_free(made);
  for (size_t i = 0; contents && i < cap; i++)
    free(contents[i]);
  free(contents);
  free(paths);
  free(items);
  free(with_id);
}

/* ---- claim
 * ---------------------------------------------------------------------------------
 */

/* A lease write (claim, ack, release) came back: 1 when it was saved.  A
 * lost compare-and-set -- and for a claim a stream node that vanished -- is
 * decided again on a fresh read; any other failure fails the operation. */
static int lease_saved(shub_t *sh, const durable_result_t *res,
                       int retry_absent) {
  if (res->status == DURABLE_ECONFLICT ||
      (retry_absent && res->status == DURABLE_ENOTFOUND))
    retry_head(sh, res->status, res->message);
  else if (res->status < 0)
    fail_head(sh, res->status, res->message);
  return res->status >= 0;
}

static void granted(shub_t *sh, const durable_result_t *res) {
  if (res->status < 0)
    forget_holder(sh); /* before a retry probes a holder again */
  if (!lease_saved(sh, res, 1))
    return;
  const durable__stream_state_t *s = &sh->state;
  durable__lease_log_granted(sh->mesh, s, sh->holder, sh->holder_instance,
                             durable__stream_options(sh->mesh).holder_probe_ms);
  sh->woken = 0; /* a new lease period */
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = 1;
    ans->epoch = s->lease_epoch;
    ans->checkpoint = s->checkpoint;
    ans->took_over_from = sh->holder; /* taken */
    sh->holder = NULL;
    /* the hold of a takeover, this one's or an earlier holder's */
    int64_t now = now_ms();
    if (s->hold_until > now)
      ans->hold_ms = (uint32_t)(s->hold_until - now);
  }
  forget_holder(sh);
  answer(sh->head, ans);
  next_op(sh);
}

static void grant(shub_t *sh) {
  durable__stream_state_t next;
  if (durable__state_copy(&sh->state, &next) < 0 ||
      durable__str_set(&next.subscriber, sh->head->req->subscriber) < 0 ||
      durable__str_set(&next.subscriber_instance, here(sh)) < 0) {
    durable__state_free(&next); /* the copy, when it was made */
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  next.lease_epoch++;
  next.subscribed_at = now_ms();
  next.orphaned_at = 0;
  /* taken over from a process that is gone: the hold is written with the
   * lease, so that it binds whoever holds the stream next, too (a wall
   * clock: hosts' clocks are assumed to agree within a fraction of it) */
  uint32_t fence = durable__store_fence_ms(durable_mesh_store(sh->mesh));
  if (sh->holder_instance && fence > 0)
    next.hold_until = next.subscribed_at + fence;
  write_state(sh, PART_LEASE, &next, NULL, 0, NULL, NULL, granted);
}

/* The holder is alive: refused, nothing written. */
static void refuse(shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  suspect_if_elsewhere(sh);
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->epoch = s->lease_epoch;
    ans->checkpoint = s->checkpoint;
    ans->holder = sh->holder; /* taken */
    sh->holder = NULL;
    if (durable__stream_ans_set(&ans->holder_instance, s->subscriber_instance) <
        0) {
      durable__body_free(&ans->base);
      ans = NULL;
    }
  }
  forget_holder(sh);
  answer(sh->head, ans);
  next_op(sh);
}

static void on_holder_ping(const durable_response_t *res, void *data) {
  shub_t *sh = data;
  /* a holder that is recycling is alive: its item in flight finishes and
   * its release is the orphan event the claimant waits for */
  if (res->status == 0 || res->status == DURABLE_ESHUTDOWN)
    refuse(sh);
  else
    grant(sh); /* unreachable within the budget: taken over */
  durable_hub_unref(sh->hub);
}

static void on_holder_alive(const durable_result_t *res, void *data) {
  shub_t *sh = data;
  if (res->status == 0 && res->value == 0) {
    grant(sh); /* its process is gone: taken over */
  } else {
    if (res->status < 0) {
      /* cannot tell: leave it the lease; the claimant tries again later */
      durable_stream_id_t id = id_of(sh);
      durable_mesh_log(sh->mesh, DURABLE_LOG_WARN,
                       "[DurableStreams] %s: could not tell whether process "
                       "%s, which holds the lease, is alive (%s); leaving it "
                       "the lease",
                       durable__stream_name(&id).text, sh->holder_instance,
                       res->message);
    }
    refuse(sh);
  }
  durable_hub_unref(sh->hub);
}

/* A claim.  The lease is free, or the claimant's already: granted.  Held
 * by a hub of this process: is it alive?  Pinging it answers (reaching a
 * node address activates its hub, so a node that holds a lease always
 * answers).  Held in another process: is that process alive?  The
 * database answers (durable__store_alive), however busy the process is, so
 * a live holder keeps its lease through a handler of any length. */
static void run_claim(shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  if (refuse_deleting(sh, "claimed"))
    return;
  durable__claim_t meets =
      durable__lease_claim(s, sh->head->req->subscriber, here(sh));
  if (meets == DURABLE__CLAIM_GRANT) {
    grant(sh);
    return;
  }
  const char *holder = s->subscriber;
  int local = meets == DURABLE__CLAIM_PING_HOLDER;
  sh->holder = strdup(holder);
  if (!local)
    sh->holder_instance = strdup(s->subscriber_instance);
  if (sh->holder == NULL || (!local && sh->holder_instance == NULL)) {
    forget_holder(sh);
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  int rc = local ? durable_hub_request(
                       durable__mesh_reads_hub(sh->mesh), holder, "ping", NULL,
                       durable__stream_options(sh->mesh).holder_probe_ms,
                       on_holder_ping, sh, &err)
                 : durable__store_alive(durable_mesh_store(sh->mesh),
                                        sh->holder_instance, on_holder_alive,
                                        sh, &err);
  if (rc < 0) {
    durable_hub_unref(sh->hub);
    if (local)
      grant(sh); /* cannot be reached at all */
    else
      fail_head(sh, rc, err.message);
  }
}

/* ---- ack and release
 * ------------------------------------------------------------------------ */

/* Acks and releases come from hubs of this process (the stream hub lives
 * where its requests come from): the lease must be theirs, here. */
static int fenced(shub_t *sh, const op_t *op) {
  return durable__lease_fenced(&sh->state, op->req->subscriber, op->req->epoch,
                               here(sh));
}

static void released(shub_t *sh, const durable_result_t *res) {
  if (!lease_saved(sh, res, 0))
    return;
  durable__lease_log_released(sh->mesh, &sh->state);
  answer_ok(sh->head, 1, NULL);
  sh->woken = 0; /* a new orphan period */
  if (durable__lease_waiting(&sh->state))
    wake_owner(sh);
  next_op(sh);
}

static void run_release(shub_t *sh) {
  op_t *op = sh->head;
  if (fenced(sh, op)) { /* a stale release is ignored */
    answer_ok(op, 0, NULL);
    next_op(sh);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(&sh->state, &next) < 0 ||
      durable__str_set(&next.last_subscriber, op->req->subscriber) < 0) {
    durable__state_free(&next); /* the copy, when it was made */
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  durable__str_set(&next.subscriber, NULL);
  durable__str_set(&next.subscriber_instance, NULL);
  next.orphaned_at = now_ms();
  write_state(sh, PART_LEASE, &next, NULL, 0, NULL, NULL, released);
}

/* ---- an operator's seek and trim (operator.c)
 * ---------------------------------------------------- */

/* `next` (a copy of the state) with the checkpoint at `checkpoint` and the
 * lease let go under a new epoch: the holder, wherever it is, is fenced. */
static int let_go(const durable__stream_state_t *s,
                  durable__stream_state_t *next, int64_t checkpoint) {
  if (s->subscriber &&
      durable__str_set(&next->last_subscriber, s->subscriber) < 0)
    return DURABLE_ENOMEM;
  durable__str_set(&next->subscriber, NULL);
  durable__str_set(&next->subscriber_instance, NULL);
  next->lease_epoch = s->lease_epoch + 1;
  next->checkpoint = checkpoint;
  next->checkpoint_at = now_ms();
  next->orphaned_at = now_ms();
  return 0;
}

/* The lease was let go: a holder in this process claims again at once; one
 * elsewhere when its waker sees the stream unheld (or at its next ack);
 * the owner is woken for items waiting. */
static void after_let_go(shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  sh->woken = 0; /* a new orphan period */
  durable__consumers_lease_gone(sh->mesh, s->ns, s->key, 1);
  if (durable__lease_waiting(s))
    wake_owner(sh);
}

/* Answer an operator's request: done, and what it was before. */
static void answer_was(op_t *op, int64_t was) {
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = 1;
    ans->checkpoint = was;
  }
  answer(op, ans);
}

static void seeked(shub_t *sh, const durable_result_t *res) {
  int64_t was = sh->op_was;
  if (!lease_saved(sh, res, 0))
    return;
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = id_of(sh);
  durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                   "[DurableStreams] %s: checkpoint moved from %lld to %lld by "
                   "%s; the lease is free (epoch %lld), and the next holder "
                   "resumes after %lld",
                   durable__stream_name(&id).text, (long long)was,
                   (long long)s->checkpoint, sh->head->req->subscriber,
                   (long long)s->lease_epoch, (long long)s->checkpoint);
  answer_was(sh->head, was);
  after_let_go(sh);
  next_op(sh);
}

/* Seek: the checkpoint set to the request's sequence (back: replay;
 * forward: skip), the lease let go. */
static void run_seek(shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  int64_t to = sh->head->req->sequence;
  if (refuse_deleting(sh, "sought") ||
      read_again_first(sh, to > s->last_sequence))
    return;
  if (to < 0 || to > s->last_sequence || to < s->trimmed_through) {
    durable_stream_id_t id = id_of(sh);
    char message[sizeof(durable__stream_name_t) + 200];
    if (to < s->trimmed_through)
      snprintf(message, sizeof message,
               "cannot move the checkpoint of %s to %lld: items up to %lld "
               "were trimmed",
               durable__stream_name(&id).text, (long long)to,
               (long long)s->trimmed_through);
    else
      snprintf(message, sizeof message,
               "cannot move the checkpoint of %s to %lld: its items are 1 to "
               "%lld",
               durable__stream_name(&id).text, (long long)to,
               (long long)s->last_sequence);
    fail_head(sh, DURABLE_EINVAL, message);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(s, &next) < 0) {
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  if (let_go(s, &next, to) < 0) {
    durable__state_free(&next);
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  sh->op_was = s->checkpoint;
  write_state(sh, PART_LEASE, &next, NULL, 0, NULL, NULL, seeked);
}

static void trimmed(shub_t *sh, const durable_result_t *res) {
  int64_t was = sh->op_was;
  int forced = sh->op_forced;
  if (!lease_saved(sh, res, 0))
    return;
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = id_of(sh);
  /* retention's trims (Epoch 2) come every few hundred ms on a busy
   * stream: the operator's own are the news */
  durable_mesh_log(
      sh->mesh,
      sh->head->req->epoch == 2 ? DURABLE_LOG_DEBUG : DURABLE_LOG_INFO,
      "[DurableStreams] %s: items up to %lld trimmed by %s "
      "(checkpoint %lld%s)",
      durable__stream_name(&id).text, (long long)s->trimmed_through,
      sh->head->req->subscriber, (long long)s->checkpoint,
      forced ? ", moved there with the trim: the lease is free" : "");
  answer_was(sh->head, was);
  if (forced)
    after_let_go(sh);
  next_op(sh);
}

/* Trim: record that items 1 .. N go (TrimmedThrough), so that a reader
 * asking for one hears so instead of waiting; the asker deletes them after.
 * Never past the checkpoint, unless forced (Epoch 1): then the checkpoint
 * moves to N as by a seek. */
static void run_trim(shub_t *sh) {
  op_t *op = sh->head;
  const durable__stream_state_t *s = &sh->state;
  int64_t to = op->req->sequence;
  int force = op->req->epoch == 1; /* 2: retention's, never forced */
  if (refuse_deleting(sh, "trimmed") ||
      read_again_first(sh, to > s->last_sequence || to > s->checkpoint))
    return;
  durable_stream_id_t id = id_of(sh);
  char message[sizeof(durable__stream_name_t) + 240];
  if (to < 1 || to > s->last_sequence) {
    snprintf(message, sizeof message,
             "cannot trim %s through %lld: its items are 1 to %lld",
             durable__stream_name(&id).text, (long long)to,
             (long long)s->last_sequence);
    fail_head(sh, DURABLE_EINVAL, message);
    return;
  }
  if (to > s->checkpoint && !force) {
    snprintf(message, sizeof message,
             "cannot trim %s through %lld: item %lld is not acknowledged "
             "(checkpoint %lld); trimming past the checkpoint needs force",
             durable__stream_name(&id).text, (long long)to,
             (long long)(s->checkpoint + 1), (long long)s->checkpoint);
    fail_head(sh, DURABLE_EINVAL, message);
    return;
  }
  if (to <= s->trimmed_through && to <= s->checkpoint) {
    /* recorded already: the deletes go on */
    answer_was(op, s->trimmed_through);
    next_op(sh);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(s, &next) < 0) {
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  sh->op_forced = to > s->checkpoint;
  if (sh->op_forced && let_go(s, &next, to) < 0) { /* forced: skip to it */
    durable__state_free(&next);
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  if (to > next.trimmed_through)
    next.trimmed_through = to;
  sh->op_was = s->trimmed_through;
  write_state(sh, PART_LEASE, &next, NULL, 0, NULL, NULL, trimmed);
}

/* Delete, in two requests.  The first marks the stream DeletingAt and lets
 * the lease go with a new epoch (the holder is fenced: its next ack is
 * refused, and its claim again finds the stream being deleted) -- refused
 * while it is held, unless forced; from then on nothing is appended or
 * claimed.  The asker deletes the items and publish ids (operator.c), then
 * asks again (Sequence 1), and the node itself goes: the next publish
 * makes a new stream, from sequence 1. */
static void delete_marked(shub_t *sh, const durable_result_t *res) {
  if (!lease_saved(sh, res, 0))
    return;
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = id_of(sh);
  durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                   "[DurableStreams] %s: being deleted by %s, with its items "
                   "1 to %lld; the lease is free (epoch %lld)",
                   durable__stream_name(&id).text, sh->head->req->subscriber,
                   (long long)s->last_sequence, (long long)s->lease_epoch);
  answer_was(sh->head, s->last_sequence);
  sh->woken = 0; /* the stream's next life wakes its owner afresh */
  durable__consumers_lease_gone(sh->mesh, s->ns, s->key, 1);
  next_op(sh);
}

/* The last step's check, in the delete's transaction (writer thread):
 * the node is still the one marked DeletingAt at `arg`, not a new stream
 * made after another delete finished; it writes nothing itself. */
static int still_deleting(const durable_node_t *current, char **content,
                          char **node_type, void *arg) {
  (void)content;
  (void)node_type;
  const int64_t *marked = arg;
  durable__stream_state_t cur;
  if (current == NULL)
    return DURABLE_ENOTFOUND;
  int rc = durable__state_decode(current->content, current->path, &cur);
  if (rc < 0)
    return rc;
  int same = cur.deleting_at != 0 && cur.deleting_at == *marked;
  durable__state_free(&cur);
  return same ? 0 : DURABLE_ECONFLICT;
}

static void on_node_deleted(const durable_result_t *res, void *data) {
  shub_t *sh = data;
  if (res->status == DURABLE_ECONFLICT) {
    durable_stream_id_t id = id_of(sh);
    char message[sizeof(durable__stream_name_t) + 160];
    snprintf(message, sizeof message,
             "durable stream %s was made anew while this delete ran (another "
             "delete finished first): it stays",
             durable__stream_name(&id).text);
    forget_state(sh);
    fail_head(sh, DURABLE_ECONFLICT, message);
  } else if (res->status < 0 && res->status != DURABLE_ENOTFOUND) {
    fail_head(sh, res->status, res->message);
  } else {
    durable_stream_id_t id = id_of(sh);
    durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                     "[DurableStreams] %s: deleted by %s; a publish makes it "
                     "anew, from sequence 1",
                     durable__stream_name(&id).text, sh->head->req->subscriber);
    answer_was(sh->head, sh->state.last_sequence);
    forget_state(sh);
    sh->woken = 0;
    durable__directory_forget(sh->mesh, sh->path);
    next_op(sh);
  }
  durable_hub_unref(sh->hub);
}

static void run_delete(shub_t *sh) {
  op_t *op = sh->head;
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = id_of(sh);
  char message[sizeof(durable__stream_name_t) + DURABLE_PATH_MAX + 200];
  if (op->req->sequence != 0 && op->req->sequence != 1) {
    fail_head(sh, DURABLE_EINVAL,
              "durable.delete's Sequence is its step: 0 marks the stream, 1 "
              "removes its node");
    return;
  }
  if (op->req->sequence == 1 && !op->typed) {
    /* only the runtime's delete knows the items and ids are gone */
    fail_head(sh, DURABLE_EINVAL,
              "durable.delete's last step is the runtime's "
              "(durable_stream_delete)");
    return;
  }
  if (op->req->sequence == 1) { /* the items are gone: the node goes */
    if (s->deleting_at == 0) {
      snprintf(message, sizeof message,
               "durable stream %s is not being deleted",
               durable__stream_name(&id).text);
      fail_head(sh, DURABLE_EINVAL, message);
      return;
    }
    sh->op_was = s->deleting_at; /* still_deleting's, until it answers */
    durable_write_t del[2] = {{.kind = DURABLE_WRITE_MUTATE,
                               .path = sh->path,
                               .mutate = still_deleting,
                               .mutate_arg = &sh->op_was},
                              {.kind = DURABLE_WRITE_DELETE, .path = sh->path}};
    durable_error_t err = {0};
    durable_hub_ref(sh->hub);
    if (durable_store_write(durable_mesh_store(sh->mesh), del, 2,
                            on_node_deleted, sh, &err) < 0) {
      durable_hub_unref(sh->hub);
      fail_head(sh, err.code, err.message);
    }
    return;
  }
  if (s->deleting_at) { /* begun already: the deletes go on */
    /* ... on the stored state, not one cached before another delete
     * finished and a publish made the stream anew */
    if (read_again_first(sh, 1))
      return;
    answer_was(op, s->last_sequence);
    next_op(sh);
    return;
  }
  if (s->subscriber && op->req->epoch == 0) {
    if (read_again_first(sh, 1)) /* it may have been released meanwhile */
      return;
    snprintf(message, sizeof message,
             "durable stream %s is held by %s%s%s%s: deleting it under its "
             "consumer needs force, which fences the consumer first",
             durable__stream_name(&id).text, s->subscriber,
             s->subscriber_instance ? " (process " : "",
             s->subscriber_instance ? s->subscriber_instance : "",
             s->subscriber_instance ? ")" : "");
    fail_head(sh, DURABLE_ECONFLICT, message);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(s, &next) < 0 ||
      let_go(s, &next, s->checkpoint) < 0) {
    durable__state_free(&next);
    fail_head(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  next.deleting_at = now_ms();
  write_state(sh, PART_LEASE, &next, NULL, 0, NULL, NULL, delete_marked);
}

/* ---- loading the state
 * --------------------------------------------------------------------- */

static void run_head(shub_t *sh) {
  switch (sh->head->kind) {
  case DURABLE__OP_APPEND:
  case DURABLE__OP_ACK:
    run_batch(sh); /* with the appends and acks queued behind */
    break;
  case DURABLE__OP_CLAIM:
    run_claim(sh);
    break;
  case DURABLE__OP_RELEASE:
    run_release(sh);
    break;
  case DURABLE__OP_SEEK:
    run_seek(sh);
    break;
  case DURABLE__OP_TRIM:
    run_trim(sh);
    break;
  case DURABLE__OP_DELETE:
    run_delete(sh);
    break;
  }
}

static void on_last_item(const durable_result_t *res, void *data) {
  shub_t *sh = data;
  if (res->status < 0) {
    retry_head(sh, res->status, res->message);
  } else {
    int64_t last = sh->state.last_sequence;
    sh->next_seq = (res->value > last ? res->value : last) + 1;
    run_head(sh);
  }
  durable_hub_unref(sh->hub);
}

static void derive_next(shub_t *sh) {
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  if (durable__store_last_item(durable_mesh_store(sh->mesh), NULL, sh->items_ns,
                               on_last_item, sh, &err) < 0) {
    durable_hub_unref(sh->hub);
    retry_head(sh, err.code, err.message);
  }
}

static void on_state_read(const durable_result_t *res, void *data) {
  shub_t *sh = data;
  if (res->status == DURABLE_ENOTFOUND) {
    /* never made, or deleted: a producer ensures it and asks again */
    durable_stream_id_t id = id_of(sh);
    char message[sizeof(durable__stream_name_t) + 64];
    snprintf(message, sizeof message, "durable stream %s does not exist",
             durable__stream_name(&id).text);
    sh->woken = 0; /* when it is made (again), its owner is woken afresh */
    fail_head(sh, DURABLE_ENOTFOUND, message);
  } else if (res->status < 0) {
    retry_head(sh, res->status, res->message);
  } else {
    durable__state_free(&sh->state);
    if (durable__state_decode(res->node->content, sh->path, &sh->state) < 0) {
      fail_head(sh, DURABLE_ENOMEM, "out of memory");
    } else {
      sh->have_state = 1;
      sh->version = res->node->version;
      run_head(sh); /* a batch with appends derives its sequence first */
    }
  }
  durable_hub_unref(sh->hub);
}

static void pump(shub_t *sh) {
  if (sh->busy)
    return;
  while (sh->dead && sh->head) {
    /* Left (its quiesce budget ran out): what was queued never ran and was
     * answered ShuttingDown already; running it now would duplicate what a
     * producer resends to the next activation. */
    op_t *op = pop(sh);
    durable_reply_fail(op->reply, DURABLE_ESHUTDOWN, "the stream hub left");
    op_free(op);
  }
  if (sh->head == NULL)
    return;
  sh->busy = 1;
  if (!sh->have_state) {
    durable_error_t err = {0};
    durable_hub_ref(sh->hub);
    if (durable_store_get(durable_mesh_store(sh->mesh), NULL, sh->path,
                          on_state_read, sh, &err) < 0) {
      durable_hub_unref(sh->hub);
      fail_head(sh, err.code, err.message);
    }
  } else {
    run_head(sh);
  }
}

/* ---- requests
 * ----------------------------------------------------------------------------
 */

static void on_request(durable_hub_t *hub, const durable_msg_t *msg,
                       durable_reply_t *reply, void *data) {
  durable__stream_op_t kind = (durable__stream_op_t)(intptr_t)data;
  shub_t *sh = durable__hub_attached(hub, &shub_key);
  /* a typed body from this process's producers and consumers, else JSON */
  durable__stream_req_t *req = (durable__stream_req_t *)durable__msg_take(msg);
  int typed = req != NULL;
  const char *bad = NULL;
  const char *principal = durable_mesh_principal(durable_hub_mesh(hub));
  if (!typed && principal != NULL) {
    /* The runtime's own requests are typed and were checked where they
     * were made (publish.c, consumer.c); a JSON one comes from user code,
     * and the stream hub acts as the platform: a principal must not reach
     * it that way. */
    char message[DURABLE_PATH_MAX + 256];
    snprintf(message, sizeof message,
             "principal '%s' may not send '%s' to '%s': the stream protocol "
             "is the runtime's (publish and consume instead)",
             principal, msg->type, durable_hub_address(hub));
    durable_reply_fail(reply, DURABLE_EACCES, message);
    return;
  }
  if (!typed)
    req = durable__stream_req_parse(kind, msg->payload, &bad);
  else if (kind == DURABLE__OP_APPEND && req->payload == NULL)
    bad = "got an append without PayloadJson";
  else if (kind != DURABLE__OP_APPEND && req->subscriber == NULL)
    bad = "got a request without Subscriber";
  /* a publish id from JSON has not been checked yet (a typed one has) */
  durable_error_t id_err = {0};
  char id_path[DURABLE_PATH_MAX + 1];
  if (bad == NULL && kind == DURABLE__OP_APPEND && req->id &&
      (durable_publish_id_check(NULL, req->id, &id_err) < 0 ||
       durable__publish_id_path(durable_hub_address(hub), req->id, id_path,
                                sizeof id_path, &id_err) < 0)) {
    durable_reply_fail(reply, DURABLE_EINVAL, id_err.message);
    durable__body_free(&req->base);
    return;
  }
  op_t *op = bad ? NULL : calloc(1, sizeof(*op));
  if (sh == NULL)
    bad = "is not a durable stream hub";
  else if (bad == NULL && op == NULL)
    bad = "is out of memory";
  if (bad) {
    char message[DURABLE_PATH_MAX + 96];
    snprintf(message, sizeof message, "%s %s", durable_hub_address(hub), bad);
    /* a request that could not be copied is no bad request */
    durable_reply_fail(
        reply, strstr(bad, "out of memory") ? DURABLE_ENOMEM : DURABLE_EINVAL,
        message);
    durable__body_free(req ? &req->base : NULL);
    free(op);
    return;
  }
  op->kind = kind;
  op->reply = reply;
  op->req = req;
  op->typed = typed;
  if (sh->tail)
    sh->tail->next = op;
  else
    sh->head = op;
  sh->tail = op;
  pump(sh);
}

static void shub_free(void *data) {
  shub_t *sh = data;
  while (sh->head)
    op_free(pop(sh)); /* replies ended with the hub */
  durable__state_free(&sh->state);
  forget_holder(sh);
  free(sh->path);
  free(sh);
}

static void stream_hub_init(durable_hub_t *hub, durable_reply_t *done,
                            void *data) {
  (void)data;
  shub_t *sh = calloc(1, sizeof(*sh));
  if (sh == NULL || (sh->path = strdup(durable_hub_address(hub))) == NULL) {
    free(sh);
    durable_reply_fail(done, DURABLE_ENOMEM, "out of memory");
    return;
  }
  sh->hub = hub; /* not a reference: sh lives inside the hub */
  sh->mesh = durable_hub_mesh(hub);
  snprintf(sh->items_ns, sizeof sh->items_ns, "%s/" DURABLE__ITEM_SEGMENT,
           sh->path);
  if (durable__hub_attach(hub, &shub_key, sh, shub_free) < 0) {
    shub_free(sh);
    durable_reply_fail(done, DURABLE_ENOMEM, "out of memory");
    return;
  }
  durable_reply_ok(done, NULL);
}

static void stream_hub_dispose(durable_hub_t *hub, void *data) {
  (void)data;
  shub_t *sh = durable__hub_attached(hub, &shub_key);
  if (sh)
    sh->dead = 1;
}

int durable__stream_hub_install(durable_mesh_t *mesh) {
  durable_node_type_t *t = durable_node_type_get(mesh, DURABLE__STREAM_TYPE);
  if (t == NULL)
    return DURABLE_ENOMEM;
  /* a closing mesh stops stream hubs after the consumers, whose releases
   * they still have to take */
  t->late = 1;
  int rc = durable_node_type_on_init(t, stream_hub_init, NULL);
  if (rc == 0)
    rc = durable_node_type_on_dispose(t, stream_hub_dispose, NULL);
  static const struct {
    const char *type;
    durable__stream_op_t kind;
  } ops[] = {{DURABLE__MSG_APPEND, DURABLE__OP_APPEND},
             {DURABLE__MSG_CLAIM, DURABLE__OP_CLAIM},
             {DURABLE__MSG_ACK, DURABLE__OP_ACK},
             {DURABLE__MSG_RELEASE, DURABLE__OP_RELEASE},
             {DURABLE__MSG_SEEK, DURABLE__OP_SEEK},
             {DURABLE__MSG_TRIM, DURABLE__OP_TRIM},
             {DURABLE__MSG_DELETE, DURABLE__OP_DELETE}};
  for (size_t i = 0; rc == 0 && i < sizeof ops / sizeof ops[0]; i++)
    rc = durable__node_type_on(t, ops[i].type, on_request,
                               (void *)(intptr_t)ops[i].kind, NULL);
  return rc;
}

/*
 * consumer.h: what the files of the leased consumer share: the consumer
 * itself, the request it sends the stream hub, and the entry points between
 * its files.
 *
 * consumers.c declares consumers and keeps each mesh's list of them;
 * consumer.c is one consumer, from its start to its stop (its states, its
 * claim, its items, its failures); consumer_stop.c lets it go (its reader,
 * its lease, its stopper); consumer_timer.c arms its timers;
 * dead_letter.c moves an item that failed max_attempts times to the dead
 * letters; turn.c makes and runs a turn (an item, or a batch: the handler,
 * the acknowledgement with the effects, the appends made after it).  Each file
 * calls only those after it in that list, so that no two call each other
 * (tests/house/circles.sh): a lower one answers through a callback that it
 * is handed.
 */
#ifndef DURABLE_STREAMS_CONSUMER_H
#define DURABLE_STREAMS_CONSUMER_H

#include "protocol.h"
#include "queue.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a consumer is doing: one state at a time (the diagram at the top of
 * consumer.c says how one leads to another). */
typedef enum {
  DURABLE__CONSUMER_STARTING = 1, /* asking whether its stream exists */
  DURABLE__CONSUMER_DORMANT,      /* no stream: waiting for a wake */
  DURABLE__CONSUMER_CLAIMING,     /* its claim (or the access check) is out */
  DURABLE__CONSUMER_WAITING,      /* another holds the lease: waiting */
  DURABLE__CONSUMER_CONSUMING,    /* the lease held: handing items over */
  /* the lease held, but no item is handed over until msg_fence says so: */
  DURABLE__CONSUMER_CONSUMING_HELD,   /*   a takeover's hold (hold_until) */
  DURABLE__CONSUMER_CONSUMING_FENCED, /*   this process's liveness is not
                                           confirmed (item fenced_seq) */
  DURABLE__CONSUMER_BACKOFF, /* after a failure: claims again after a delay */
  DURABLE__CONSUMER_STOPPED  /* stopped, or its hub left */
} durable__consumer_state_t;

/* What a consumer remembers, whatever it is doing: bits of its `flags`, as
 * libuv keeps a handle's. */
enum {
  /* it reads a source (durable_consumer_t.source_of), not its own items */
  DURABLE__CONSUMER_HAS_SOURCE = 1u << 0,
  /* a wake came while starting or claiming: look again after */
  DURABLE__CONSUMER_WAKE_PENDING = 1u << 1,
  /* the lease was let go behind it while its claim was out */
  DURABLE__CONSUMER_LEASE_DOUBT = 1u << 2,
  /* a claim found the stream gone, and that was logged */
  DURABLE__CONSUMER_GONE_SAID = 1u << 3,
  /* CONSUMING_FENCED longer than the fence, and that was logged */
  DURABLE__CONSUMER_FENCE_LOGGED = 1u << 4,
  /* the turn in flight found this process's liveness unconfirmed */
  DURABLE__CONSUMER_TURN_FENCED = 1u << 5,
  /* the turn's item was handled, its acknowledgement failed */
  DURABLE__CONSUMER_TURN_ACK_FAILED = 1u << 6,
  /* the lease may have gone during the turn: claim again after it */
  DURABLE__CONSUMER_RECLAIM_AFTER_TURN = 1u << 7,
  /* a box of appends is being made (turn.c) */
  DURABLE__CONSUMER_OUTQ_SENDING = 1u << 8,
  /* an append failed: none is made until the next claim */
  DURABLE__CONSUMER_OUTQ_BLOCKED = 1u << 9,
  /* durable_consumer_stop was called */
  DURABLE__CONSUMER_STOPPING = 1u << 10,
  /* stopped while a claim was out: report after its answer */
  DURABLE__CONSUMER_STOP_AFTER_CLAIM = 1u << 11,
  /* the stopper was told */
  DURABLE__CONSUMER_STOP_REPORTED = 1u << 12,
  /* the spare timer is open, holding a reference to the hub */
  DURABLE__CONSUMER_SPARE_OPEN = 1u << 13,
  /* a turn is out: its items are being handled (turn.c) */
  DURABLE__CONSUMER_TURN_OUT = 1u << 14,
  /* a batch is being gathered: its first items are taken, more may join
   * until the batch is full or its wait_ms is over */
  DURABLE__CONSUMER_GATHERING = 1u << 15,
  /* in a backoff for a failure that was not the item's own (the store, a
   * claim): the store's reconnect (durable__consumer_live) ends it */
  DURABLE__CONSUMER_STORE_BACKOFF = 1u << 16,
  /* a group's consumer: its claim found no group, and the stream's hub
   * made it (once per round: a claim that finds none again is gone) */
  DURABLE__CONSUMER_GROUP_MADE = 1u << 17
};

/* One item of the turn: taken from the reader, kept until the turn is
 * done. */
typedef struct {
  int64_t seq;
  durable_node_t *node;
  char *payload;
  int64_t appended_at;
} durable__turn_item_t;

typedef struct durable__consumer_s durable__consumer_t;

struct durable__consumer_s {
  durable_hub_t *hub; /* not a reference: the consumer lives inside the hub */
  durable_mesh_t *mesh;
  durable_consumer_t cfg; /* cfg.group is `group` */
  char *ns, *key, *group;
  /* what it is known by, in one block, `names` (consumer_names.c): */
  char *names;
  const char *path; /* the stream node's */
  /* the node its lease lives on: the stream node, or its group's
   * ({path}/_DurableStreamGroup/{group}); that node's namespace and id */
  const char *lease_path, *lease_ns, *lease_id;
  /* the message types of its hub that reach it */
  const char *msg_turn, *msg_wake, *msg_retry, *msg_reclaim, *msg_gather,
      *msg_fence, *msg_sweep;
  /* the other consumers of its family on its hub, which hear the same wake
   * (the first of them handles the family's wake message for all) */
  struct durable__queue siblings;
  durable_source_t source; /* with DURABLE__CONSUMER_HAS_SOURCE */
  char *source_ns;
  durable__consumer_state_t state;
  unsigned flags; /* DURABLE__CONSUMER_HAS_SOURCE, ... */
  uint64_t gen;
  int64_t epoch, checkpoint;
  int attempt;
  durable__pull_t *pull;
  durable_watch_t *orphan_watch;
  /* the items of the turn (out, or a batch being gathered): consecutive,
   * turn[0] the first; one at a time without a batch handler */
  durable__turn_item_t *turn;
  size_t nturn, turn_cap, turn_bytes;
  /* an item taken from the reader that would have made the batch gathered
   * larger than its bytes: the first of the next one */
  durable__turn_item_t carry;
  /* the item the turn's failure named (durable_reply_fail_at), 0: none */
  int64_t turn_failed_at;
  /* the lease epoch the turn was handed over under: its ack carries it, so
   * that a turn of an earlier round is fenced after any grant since */
  int64_t turn_epoch;
  uint64_t gather_until; /* uv_now: a batch waits for more until then */
  /* items handed over one at a time, a batch having failed on them: a
   * batch never reaches into this range (0, 0: none) */
  int64_t alone_from, alone_to;
  /* durable_consumer_stop: the embedder's callback once the item in flight
   * is done and the lease let go */
  durable_status_cb stop_cb;
  void *stop_data;
  /* appends of acknowledged items, made one box at a time, in order; after
   * a failure none is made until the next claim has made what is left
   * (turn.c); append_failed is consumer.c's word on that failure */
  struct durable__queue outq; /* of turn.c's boxes, oldest first */
  void (*append_failed)(durable__consumer_t *c, int status,
                        const char *message);
  /* consumer.c's word on a turn (turn.c): it came back with `res` (`gen`:
   * the round it was sent in), or none could be made -- item `seq` could
   * not be read (items_fault), or a read or the memory failed */
  void (*turn_back)(durable__consumer_t *c, const durable_response_t *res,
                    uint64_t gen);
  void (*no_turn)(durable__consumer_t *c, int64_t seq, int items_fault,
                  const char *why);
  /* in the mesh's list (consumers.c), for what reaches every consumer (a
   * loss of the store's session, ...); linked to itself when on none */
  struct durable__queue link;
  int64_t fenced_seq;  /* CONSUMING_FENCED: the item not handed over */
  uint64_t hold_until; /* uv_hrtime(): no item before (a takeover's hold) */
  char *held_by;       /* the holder last logged as holding the lease */
  /* the item that failed last, and how many times in a row (max_attempts) */
  int64_t failed_seq;
  int failed_times;
  durable__sweep_t *sweep; /* retention.c: NULL with a source */
  /* the timer of last resort (arm): embedded, so that waiting needs no
   * memory; open with DURABLE__CONSUMER_SPARE_OPEN */
  uv_timer_t spare;
  const char *spare_type; /* one of the msg_* above */
  char spare_payload[32];
};

/* The lease is granted to it in this round: consuming, held or fenced. */
static inline int durable__consumer_consuming(const durable__consumer_t *c) {
  return c->state == DURABLE__CONSUMER_CONSUMING ||
         c->state == DURABLE__CONSUMER_CONSUMING_HELD ||
         c->state == DURABLE__CONSUMER_CONSUMING_FENCED;
}

static inline durable_stream_id_t
durable__consumer_id(const durable__consumer_t *c) {
  return (durable_stream_id_t){.ns = c->ns, .key = c->key};
}

/* "{ns}@{key}" of the consumed stream, and " group {group}" for a
 * group's consumer, for logs. */
static inline const char *durable__consumer_name(const durable__consumer_t *c,
                                                 durable__stream_name_t *buf) {
  durable_stream_id_t id = durable__consumer_id(c);
  *buf = durable__stream_name(&id);
  if (c->group) {
    size_t n = strlen(buf->text);
    snprintf(buf->text + n, sizeof buf->text - n, " group %s", c->group);
  }
  return buf->text;
}

static inline const char *
durable__consumer_hub_name(const durable__consumer_t *c) {
  return durable_hub_address(c->hub);
}

/* Batches: a batch handler was given. */
static inline int durable__consumer_batches(const durable__consumer_t *c) {
  return c->cfg.batch_handler != NULL;
}

/* "item 7" or "items 7..12" of the turn, for logs. */
static inline void durable__consumer_turn_items(const durable__consumer_t *c,
                                                char *out, size_t size) {
  if (c->nturn > 1)
    snprintf(out, size, "items %lld..%lld", (long long)c->turn[0].seq,
             (long long)c->turn[c->nturn - 1].seq);
  else
    snprintf(out, size, "item %lld",
             (long long)(c->nturn ? c->turn[0].seq : 0));
}

/* Stopped, or its hub is leaving: nothing new starts. */
static inline int durable__consumer_leaving(const durable__consumer_t *c) {
  return c->state == DURABLE__CONSUMER_STOPPED ||
         durable_hub_run_level(c->hub) >= DURABLE_HUB_QUIESCING;
}

/* A request from the read-issuing hub whose answer comes back to `c` if the
 * consumer is still in the round `gen`. */
typedef struct {
  durable__consumer_t *c;
  uint64_t gen;
  int64_t seq;
  durable_reply_t *turn;         /* an ack's turn */
  durable__outbox_t *outbox;     /* an ack's appends, made once it is written */
  durable__write_set_t *effects; /* held while the appends are checked */
  int stopped; /* a release that durable_consumer_stop waits for */
} durable__consumer_ask_t;

/* Ask the stream hub `type` (protocol.h) as this consumer's hub, with its
 * lease `epoch` and the item `seq` where they matter, carrying `effects`
 * (taken, also on failure) for an ack.  Claim, ack and release go out from
 * the read-issuing hub, naming this hub as subscriber, because a quiescing
 * hub sends no new requests. */
static inline int
durable__consumer_ask(durable__consumer_t *c, const char *type, int64_t epoch,
                      int64_t seq, durable__write_set_t *effects,
                      durable_response_cb cb, durable__consumer_ask_t *a,
                      durable_error_t *err) {
  durable__stream_req_t *req =
      durable__stream_req_new(NULL, durable__consumer_hub_name(c), epoch, seq);
  if (req == NULL) {
    free(effects);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  req->effects = effects;
  req->start = c->cfg.start; /* a group's claim: where it starts if new */
  req->detach = c->cfg.detach;
  a->c = c;
  durable_hub_ref(c->hub);
  int rc =
      durable__hub_request_body(durable__mesh_reads_hub(c->mesh), c->lease_path,
                                type, &req->base, 0, cb, a, err);
  if (rc < 0)
    durable_hub_unref(c->hub);
  return rc;
}

/* The consumer leaves the mesh's list (consumers.c), touching only its
 * neighbours: the list itself may be gone (it took every consumer off
 * first), and a consumer on no list stays so. */
static inline void durable__consumer_unlink(durable__consumer_t *c) {
  durable__queue_remove(&c->link);
}

/* ---- consumer_names.c: what it is known by ----------------------------- */

/* Its path, lease path and namespace and message types (from its ns, key
 * and group), made into c->names: 0, or DURABLE_EINVAL for a group whose
 * path is too long, DURABLE_ENOMEM. */
int durable__consumer_names(durable__consumer_t *c, durable_error_t *err);

/* ---- consumer.c: one consumer ----------------------------------------- */

/* A consumer of `cfg` on `hub`, attached to it, its messages handled, not
 * started: 0 and *out, or a failure (with nothing left to undo). */
int durable__consumer_new(durable_hub_t *hub, const durable_consumer_t *cfg,
                          durable__consumer_t **out, durable_error_t *err);
/* Look for the stream, and claim it if it is there. */
void durable__consumer_start(durable__consumer_t *c);
/* The lease may have gone behind it (durable__consumers_lease_gone); also
 * while its claim is out when `claiming`. */
void durable__consumer_lease_gone(durable__consumer_t *c, int claiming);
/* This process's liveness is confirmed again (durable__consumers_live);
 * `reconnected`: the store's watch connected again, so a backoff for the
 * store's failure ends now. */
void durable__consumer_live(durable__consumer_t *c, int reconnected);
/* An operator's retention policy changed: look at what is due now. */
void durable__consumer_retention_changed(durable__consumer_t *c);

/* ---- consumer_stop.c: letting go -------------------------------------- */

/* The embedder's handle is the consumer itself. */
struct durable_consumer_handle_s {
  durable__consumer_t c;
};

/* The reader goes, and with it what was taken from it ahead of the turn
 * out (read again from the checkpoint next time). */
void durable__consumer_stop_reading(durable__consumer_t *c);
/* Release the lease granted at `epoch` (a failure to is logged). */
void durable__consumer_release(durable__consumer_t *c, int64_t epoch);
/* No item is in flight: stop, let the lease go, tell the stopper after. */
void durable__consumer_finish_stop(durable__consumer_t *c);
/* Tell the stopper on a later turn (nothing was held). */
void durable__consumer_stop_later(durable__consumer_t *c);
/* The hub's dispose: stopped, and a lease held let go. */
void durable__consumer_on_dispose(durable_hub_t *hub, void *data);

/* ---- consumer_timer.c: the consumer's timers -------------------------- */

/* The delay before claiming again after the `attempt`-th failure in a row
 * (0: the first): min_ms doubling up to max_ms. */
uint32_t durable__backoff_ms(int attempt, uint32_t min_ms, uint32_t max_ms);
/* Post the consumer's hub `type` after `ms`, with the generation now as
 * its payload; late at worst, never lost (the spare timer). */
void durable__consumer_arm(durable__consumer_t *c, const char *type,
                           uint32_t ms);
/* The message of a timer armed in the round now (not an earlier one's). */
int durable__consumer_current_gen(const durable__consumer_t *c,
                                  const durable_msg_t *msg);
/* Close the spare timer, if open (stopping: nothing is armed any more). */
void durable__consumer_close_spare(durable__consumer_t *c);

/* ---- dead_letter.c: the dead letters of max_attempts ------------------ */

/* DURABLE_EINVAL, saying why, when the dead-letter stream of `c`'s stream
 * could not be made (its longer name may pass a limit the stream's own does
 * not); 0 without max_attempts. */
int durable__dead_letters_check(const durable__consumer_t *c,
                                durable_error_t *err);

typedef enum {
  DURABLE__LETTER_MOVED,   /* acknowledged, the letter written */
  DURABLE__LETTER_REFUSED, /* the lease is not the consumer's any more */
  DURABLE__LETTER_FAILED   /* not made, not sent, or failed: `why` */
} durable__letter_outcome_t;
typedef void (*durable__letter_cb)(durable__consumer_t *c, int64_t seq,
                                   durable__letter_outcome_t outcome,
                                   const char *why);

/* Item `seq` failed max_attempts times: acknowledge it and write its letter
 * in the same transaction, in a new round.  `done` hears at once that it
 * could not be made or sent, or later the answer, if the consumer is still
 * consuming in that round. */
void durable__dead_letter(durable__consumer_t *c, int64_t seq, const char *why,
                          const char *payload, int64_t appended_at,
                          durable__letter_cb done);

/* ---- turn.c: a turn -------------------------------------------------- */

/* The next turn, once the reader has its items: the item carried over
 * first, then what is read already, up to the batch's bounds (one item
 * without a batch handler); sent to the hub itself, and c->turn_back hears
 * how it went.  Nothing while leaving, without a reader, or while a turn
 * is out (one of an earlier round: its return calls this again). */
void durable__consumer_next_turn(durable__consumer_t *c);
/* The handler of msg_gather: a batch's wait_ms is over, it goes. */
void durable__consumer_gathered(durable_hub_t *hub, const durable_msg_t *msg,
                                durable_reply_t *reply, void *data);
/* The handler of the consumer's turn message (msg_turn): hand the turn's
 * items to the user's handler, and acknowledge the last once the handler
 * is done; the turn is answered after the acknowledgement. */
void durable__consumer_turn(durable_hub_t *hub, const durable_msg_t *msg,
                            durable_reply_t *reply, void *data);
/* The turn's items go (it is done). */
void durable__consumer_turn_clear(durable__consumer_t *c);
/* What was taken from the reader ahead of a turn out goes (a batch being
 * gathered, the item carried over): the reader is closed, and reads them
 * again from the checkpoint. */
void durable__consumer_turn_drop(durable__consumer_t *c);
/* Make the appends of `box` (taken; NULL is none) after those before it. */
void durable__consumer_append(durable__consumer_t *c, durable__outbox_t *box);
/* Forget the appends not made yet (their nodes stay: the next claim). */
void durable__consumer_appends_drop(durable__consumer_t *c);

#endif

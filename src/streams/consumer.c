/*
 * consumer.c: the leased consumer, one per stream family (and consumer
 * group) per hub activation, as one state machine: c->state says what it
 * is doing, c->flags what it remembers meanwhile (consumer.h names both).
 *
 *   STARTING  --the stream exists---------------------------> CLAIMING
 *             --no stream-----------------------------------> DORMANT
 *   DORMANT   --wake; reclaim timer (armed after a delete)--> CLAIMING
 *   CLAIMING  --granted-------------------------------------> CONSUMING
 *             --granted within a takeover's hold------------> CONSUMING_HELD
 *             --granted, but let go behind it meanwhile-----> CLAIMING
 *             --held by another-----------------------------> WAITING
 *             --the stream is gone (deleted)----------------> DORMANT
 *      (a wake while STARTING or CLAIMING: CLAIMING again at once rather
 *      than DORMANT or WAITING)
 *   WAITING   --orphan event; wake; reclaim timer-----------> CLAIMING
 *   CONSUMING_HELD  --the hold is over----------------------> CONSUMING
 *   CONSUMING: the outbox first, then the next item after the checkpoint
 *      -- or, for a batch handler, the next items read already, up to its
 *      bounds -- handed over in a turn (turn.c: a request the hub sends
 *      itself, which runs the user's handler and acknowledges the turn's
 *      last item); its answer says how it went:
 *             --acknowledged: the next turn (never before)
 *             --the acknowledgement fenced------------------> CLAIMING
 *             --this process's liveness not confirmed-------> CONSUMING_FENCED
 *             --an item failed ("... was NOT acknowledged ...")--> BACKOFF
 *             --an item failed max_attempts times: to the dead letters
 *               (dead_letter.c), then the next turn
 *             --a batch failed: nothing of it written; its items again
 *               from the checkpoint, the one that failed alone (batch_failed)
 *   CONSUMING_FENCED  --the liveness confirmed--------------> CONSUMING
 *   CONSUMING, _HELD, _FENCED  --the lease let go behind it, the store's
 *      session lost: after the item in flight---------------> CLAIMING
 *   STARTING, CLAIMING, CONSUMING, _HELD, _FENCED  --a failure (a read,
 *      a claim, the store, an append)-----------------------> BACKOFF
 *   BACKOFF   --retry timer (1 s doubling to 60 s)----------> CLAIMING
 *   any       --durable_consumer_stop, or the hub leaves----> STOPPED
 *      (no new item starts; the item in flight finishes -- the recycle's
 *      quiesce waits for its turn like any pending request -- and then the
 *      lease is released; a claim still out is released when it answers)
 *
 * The consumer never creates a stream: it looks with an existence query (a
 * listing read) and otherwise waits for the wake that a producer's append
 * causes.  A consumer of a consumer group (c->group) is the same machine on
 * the group's node (c->lease_path): its claim, acks and release go there,
 * its failure record and dead letters are the group's; a claim that finds
 * no group asks the stream's hub to make it (make_group), once per round,
 * and a stream that is not there leaves it dormant.  The family's wake
 * reaches every consumer of the family on the hub; its payload names whose
 * lease is free (woken).  Claim, ack and release go out from the read-issuing
 * hub, naming this hub as subscriber, because a quiescing hub sends no new
 * requests. Timers post messages to the hub; a generation number retires the
 * messages and answers of an earlier round.
 *
 * A mesh acting as a principal consumes only what it may read and write:
 * the stream hub grants leases as the platform, so each claim first asks
 * the store whether the principal holds read and write on the stream's
 * owner.  A denial is a failure like any other (logged with its reason,
 * claimed again after the backoff, so a grant made meanwhile is picked
 * up); nothing is claimed or handed over.
 *
 * This file is one consumer, from its start to its stop.  The item's turn
 * and its acknowledgement are turn.c's, the dead letters dead_letter.c's,
 * the timers consumer_timer.c's, and consumers.c declares consumers and
 * keeps the mesh's list of them (consumer.h).
 */
#include "consumer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A claim or a release (durable__consumer_ask: no effects). */
static int ask(durable__consumer_t *c, const char *type, int64_t epoch,
               int64_t seq, durable_response_cb cb, durable__consumer_ask_t *a,
               durable_error_t *err) {
  return durable__consumer_ask(c, type, epoch, seq, NULL, cb, a, err);
}

static void claim(durable__consumer_t *c);
static void make_group(durable__consumer_t *c);
static void send_claim(durable__consumer_t *c, durable__consumer_ask_t *a);
static void claim_again(durable__consumer_t *c);
static void start_pulling(durable__consumer_t *c);

/* ---- failures ------------------------------------------------------------ */

/* An acknowledgement was refused: another holder has the lease now (or it
 * was let go).  Said, and claimed again. */
static void lease_lost(durable__consumer_t *c) {
  durable__stream_name_t n;
  durable_mesh_log(c->mesh, DURABLE_LOG_WARN,
                   "Durable stream consumer %s lost the lease of %s; "
                   "claiming again",
                   durable__consumer_hub_name(c),
                   durable__consumer_name(c, &n));
  durable__consumer_stop_reading(c);
  claim(c);
}

/* A handler's message in a retried item's line: what the turn's failure
 * says after the stream and item the line names already ("... item 7
 * failed " dropped: "(EFAILED): plugin.lua:12: boom"), cut to WHY_MAX
 * bytes (failure.c) -- the line stays about 200 characters with a short
 * message, and never runs on with a traceback; the whole
 * message is in the failure record, which `durable streams` shows. */
#define WHY_MAX 160

static const char *handler_said(const char *why, char *buf, size_t size) {
  const char *own = strstr(why, " failed (");
  if (strncmp(why, "Durable stream ", 15) != 0 || own == NULL)
    return why; /* the runtime's own words (an item it could not read) */
  return durable__failure_cut(own + 8, WHY_MAX, buf, size);
}

/* A backoff after a failure at item `seq` (0: none), the `attempts`-th in a
 * row of that item when it is the item's own failure (0: another's). */
static void backoff(durable__consumer_t *c, int64_t seq, int attempts,
                    const char *why) {
  durable_stream_options_t o = durable__stream_options(c->mesh);
  uint64_t delay =
      durable__backoff_ms(c->attempt, o.backoff_min_ms, o.backoff_max_ms);
  c->attempt++;
  c->flags &= ~DURABLE__CONSUMER_STORE_BACKOFF;
  durable__stream_name_t n;
  char at[64] = "", shorter[WHY_MAX + 8];
  if (seq > 0 && attempts > 0)
    snprintf(at, sizeof at, " at item %lld, attempt %d", (long long)seq,
             attempts);
  else if (seq > 0)
    snprintf(at, sizeof at, " at item %lld", (long long)seq);
  const char *hub = durable__consumer_hub_name(c);
  const char *name = durable__consumer_name(c, &n);
  /* a handler's message is shortened; another failure's (the store's, a
   * denial) says all of what went wrong */
  if (attempts > 0 && why)
    why = handler_said(why, shorter, sizeof shorter);
  durable_mesh_log(c->mesh, DURABLE_LOG_ERROR,
                   "Durable stream consumer %s stopped on %s%s (%s); the item "
                   "was NOT acknowledged and is retried from the checkpoint "
                   "in %llu ms",
                   hub, name, at, why, (unsigned long long)delay);
  c->state = DURABLE__CONSUMER_BACKOFF;
  c->gen++;
  durable__consumer_arm(c, c->msg_retry, (uint32_t)delay);
}

/* Acknowledged through `seq`: the checkpoint, and the end of the items
 * handed over alone once they are all passed. */
static void passed(durable__consumer_t *c, int64_t seq) {
  c->checkpoint = seq;
  if (c->alone_to > 0 && seq >= c->alone_to)
    c->alone_from = c->alone_to = 0;
}

/* The items through `seq` were acknowledged: passed, and the failure that
 * was being retried, if it was among them, is over. */
static void acked(durable__consumer_t *c, int64_t seq) {
  passed(c, seq);
  c->attempt = 0; /* the next failure's backoff starts short again */
  if (c->failed_seq > 0 && seq >= c->failed_seq) {
    /* a record another process left for an item this one handled names an
     * item at or below the checkpoint, which is never shown, and which only
     * a seek or a delete -- both clear it -- could hand over again */
    c->failed_seq = c->failed_times = 0;
    durable__failure_clear(durable_mesh_store(c->mesh), c->lease_path);
  }
  durable__sweep_acked(c->sweep, seq);
}

/* The dead letter of item `seq` (dead_letter.c): moved, the item is done;
 * the lease gone meanwhile, claim again; not moved, try again after the
 * backoff. */
static void on_dead_lettered(durable__consumer_t *c, int64_t seq,
                             durable__letter_outcome_t outcome,
                             const char *why) {
  if (outcome == DURABLE__LETTER_FAILED) {
    backoff(c, seq, 0, why);
  } else if (outcome == DURABLE__LETTER_MOVED) {
    acked(c, seq);
    start_pulling(c);
  } else {
    lease_lost(c);
  }
}

/* Item `seq` failed by its own fault -- its handler failed, its effects
 * were refused, its payload could not be read -- so the item is there, and
 * it counts: once it has failed max_attempts times in a row, it is moved to
 * the dead letters; else back off and retry.  `payload` is the item's text
 * when it was read (NULL: it could not be). */
static void after_failure_counted(durable__consumer_t *c, int64_t seq,
                                  const char *why, const char *payload,
                                  int64_t appended_at) {
  if (c->cfg.max_attempts > 0 && durable__consumer_consuming(c) &&
      c->failed_times >= c->cfg.max_attempts) {
    durable__dead_letter(c, seq, why, payload, appended_at, on_dead_lettered);
    return;
  }
  backoff(c, seq, c->failed_times, why);
  if (c->cfg.max_attempts <= 0) {
    durable__stream_name_t n;
    durable__failure_ways_out(c->mesh, durable__consumer_hub_name(c),
                              durable__consumer_name(c, &n), c->ns, c->key,
                              c->group, seq, c->failed_times);
  }
}

/* A failed item's record on its way to the store (failure.c). */
typedef struct {
  durable__consumer_t *c;
  uint64_t gen;
  int64_t seq, appended_at;
  char *why, *payload;
} recording_t;

static void on_failure_recorded(int attempts, void *data) {
  recording_t *r = data;
  durable__consumer_t *c = r->c;
  if (durable__consumer_consuming(c) && r->gen == c->gen &&
      !durable__consumer_leaving(c)) {
    /* the stored count: this process's failures and any earlier one's */
    if (attempts > c->failed_times)
      c->failed_times = attempts;
    after_failure_counted(c, r->seq, r->why, r->payload, r->appended_at);
  }
  durable_hub_unref(c->hub);
  free(r->why);
  free(r->payload);
  free(r);
}

static void fail_item(durable__consumer_t *c, int64_t seq, const char *why,
                      const char *payload, int64_t appended_at) {
  durable__consumer_stop_reading(c);
  if (durable__consumer_leaving(c))
    return;
  durable__stream_count(c->mesh, c->ns, c->key, c->group, DURABLE__COUNT_FAILED,
                        1);
  if (seq == c->failed_seq) {
    c->failed_times++;
  } else {
    c->failed_seq = seq;
    c->failed_times = 1;
  }
  if (!durable__consumer_consuming(c)) {
    backoff(c, seq, c->failed_times, why);
    return;
  }
  /* record it for `durable streams` and for a later process's count, and
   * decide once it is stored (the count in memory if the store fails) */
  recording_t *r = calloc(1, sizeof(*r));
  durable_error_t err = {0};
  if (r != NULL) {
    *r = (recording_t){.c = c,
                       .gen = ++c->gen, /* retire what the round has out */
                       .seq = seq,
                       .appended_at = appended_at,
                       .why = strdup(why ? why : ""),
                       .payload = payload ? strdup(payload) : NULL};
    durable_hub_ref(c->hub);
    if (r->why != NULL && (payload == NULL || r->payload != NULL) &&
        durable__failure_record(durable_mesh_store(c->mesh), c->lease_path, seq,
                                why, on_failure_recorded, r, &err) == 0)
      return;
    durable_hub_unref(c->hub);
    free(r->why);
    free(r->payload);
    free(r);
  }
  after_failure_counted(c, seq, why, payload, appended_at);
}

/* A failure that is not an item's own (a read, a claim, the store, an
 * append of an earlier item), at `seq` (0: no item) for the log: retried
 * after the backoff, never counted against the item. */
static void failure(durable__consumer_t *c, int64_t seq, const char *why) {
  durable__consumer_stop_reading(c);
  if (durable__consumer_leaving(c))
    return;
  backoff(c, seq, 0, why);
  c->flags |= DURABLE__CONSUMER_STORE_BACKOFF;
}

/* No turn could be made (turn.c): item `seq` could not be read (its own
 * fault: counted), or a read or the memory failed (`seq` for the log). */
static void on_no_turn(durable__consumer_t *c, int64_t seq, int items_fault,
                       const char *why) {
  if (items_fault)
    fail_item(c, seq, why, NULL, 0);
  else
    failure(c, seq, why);
}

/* An append of an acknowledged item failed (turn.c): what is left goes out
 * after the next claim, and, consuming, the consumer backs off to make
 * that claim. */
static void on_append_failed(durable__consumer_t *c, int status,
                             const char *message) {
  if (durable__consumer_consuming(c)) {
    char m[1024];
    snprintf(m, sizeof m, "an append of an acknowledged item failed: %s",
             message ? message : durable_strerror(status));
    failure(c, 0, m);
  }
}

/* The store cannot confirm that this process still holds its liveness lock
 * (its session has not answered within fence_ms: nobody asked for a while,
 * or a cut network, a paused process, a server gone): another process may
 * have taken the lease over.  Item `seq` is not handed over.  The store
 * has asked the session again: its answer (durable__consumers_live) proves
 * the lock held all along, and the consumer reads on from its checkpoint;
 * the session's loss instead makes it claim again, which verifies the
 * lease in the database (durable__consumers_session_lost).  A wait longer
 * than the fence is logged (on_fence). */
static void wait_for_liveness(durable__consumer_t *c, int64_t seq) {
  durable__consumer_stop_reading(c);
  c->gen++; /* retire what the last round has out */
  if (durable__store_live(durable_mesh_store(c->mesh))) {
    start_pulling(c); /* answered while the turn came back */
    return;
  }
  c->state = DURABLE__CONSUMER_CONSUMING_FENCED;
  c->fenced_seq = seq;
  durable__consumer_arm(c, c->msg_fence,
                        durable__store_fence_ms(durable_mesh_store(c->mesh)));
}

/* What a turn that came back was, once its items are gone. */
typedef struct {
  int64_t first, last;
  size_t count;
  int64_t failed_at; /* the item its failure named, 0: none */
  int ack_failed;    /* handled, the acknowledgement failed */
  char *payload;     /* one item's: what a dead letter would carry */
  int64_t appended_at;
} outcome_t;

static void turn_done(durable__consumer_t *c, const durable_response_t *res,
                      uint64_t gen, const outcome_t *t);

/* A turn came back (turn.c): what it was, and then what follows. */
static void on_turn_back(durable__consumer_t *c, const durable_response_t *res,
                         uint64_t gen) {
  outcome_t t = {.first = c->nturn ? c->turn[0].seq : 0,
                 .last = c->nturn ? c->turn[c->nturn - 1].seq : 0,
                 .count = c->nturn,
                 .failed_at = c->turn_failed_at,
                 .ack_failed =
                     (c->flags & DURABLE__CONSUMER_TURN_ACK_FAILED) != 0};
  if (c->nturn == 1) {
    t.payload = c->turn[0].payload;
    t.appended_at = c->turn[0].appended_at;
    c->turn[0].payload = NULL;
  }
  c->flags &= ~DURABLE__CONSUMER_TURN_ACK_FAILED;
  c->turn_failed_at = 0;
  durable__consumer_turn_clear(c);
  turn_done(c, res, gen, &t);
  free(t.payload);
}

/* A batch failed: nothing of it was written.  The failure stops at the
 * item, not at the batch: the item it named is handed over alone (the
 * items before it again as a batch first), or, with none named, each of
 * the batch's items alone until they are passed, which finds it.  Either
 * way the one that fails alone gets what one failing item gets (fail_item:
 * the backoff, max_attempts, the dead letters).  Counted as one failure,
 * never against an item: that is the lone hand-over's to do. */
static void batch_failed(durable__consumer_t *c, const outcome_t *t,
                         const char *why) {
  durable__stream_name_t n;
  durable__stream_count(c->mesh, c->ns, c->key, c->group, DURABLE__COUNT_FAILED,
                        1);
  int64_t from = t->failed_at ? t->failed_at : t->first;
  int64_t to = t->failed_at ? t->failed_at : t->last;
  if (c->alone_to > to) /* a range found before, not passed yet */
    to = c->alone_to;
  c->alone_from = from;
  c->alone_to = to;
  char next[160];
  if (t->failed_at > t->first + 1)
    snprintf(next, sizeof next,
             "items %lld..%lld are handed again, then item %lld alone",
             (long long)t->first, (long long)t->failed_at - 1,
             (long long)t->failed_at);
  else if (t->failed_at > t->first)
    snprintf(next, sizeof next,
             "item %lld is handed again, then item %lld alone",
             (long long)t->first, (long long)t->failed_at);
  else if (t->failed_at)
    snprintf(next, sizeof next, "item %lld is handed again alone",
             (long long)t->failed_at);
  else
    snprintf(next, sizeof next,
             "its items are handed again one at a time to find the failing "
             "one");
  durable_mesh_log(c->mesh, DURABLE_LOG_WARN,
                   "Durable stream consumer %s: a batch of %s (items "
                   "%lld..%lld) failed and was NOT acknowledged; %s (%s)",
                   durable__consumer_hub_name(c), durable__consumer_name(c, &n),
                   (long long)t->first, (long long)t->last, next, why);
  c->gen++; /* retire what the round has out */
  durable__consumer_stop_reading(c);
  start_pulling(c);
}

static void turn_done(durable__consumer_t *c, const durable_response_t *res,
                      uint64_t gen, const outcome_t *t) {
  if (c->flags & DURABLE__CONSUMER_STOPPING) {
    durable__consumer_finish_stop(
        c); /* the items in flight are done: now let go */
    return;
  }
  int reclaim = (c->flags & DURABLE__CONSUMER_RECLAIM_AFTER_TURN) != 0;
  int fenced = (c->flags & DURABLE__CONSUMER_TURN_FENCED) != 0;
  c->flags &=
      ~(DURABLE__CONSUMER_RECLAIM_AFTER_TURN | DURABLE__CONSUMER_TURN_FENCED);
  if (!durable__consumer_consuming(c))
    return;
  int earlier = gen != c->gen;
  if (earlier && durable__consumer_leaving(c))
    return;
  int moved = res->status == 0 && (!earlier || t->last > c->checkpoint);
  if (moved)
    acked(c, t->last);
  if (reclaim) {
    /* the session was lost meanwhile: verify the lease in the database
     * first, whatever the turn did (a fenced one handed nothing over; an
     * acknowledged one had the lease still) */
    c->gen++;
    durable__consumer_stop_reading(c);
    claim(c);
  } else if (earlier) {
    /* a turn of an earlier round (an append failed meanwhile, and the
     * backoff led to a claim again), back after this round began, whose
     * turns waited for it (turn.c).  It acked under its own epoch, so
     * before the new grant if at all; should the grant's checkpoint not
     * have had it, this round reads again after it.  Then its turns go on */
    if (c->pull != NULL && moved) {
      durable__consumer_stop_reading(c);
      start_pulling(c);
    } else if (c->pull != NULL) {
      durable__consumer_next_turn(c);
    }
  } else if (fenced) {
    wait_for_liveness(c, t->first);
  } else if (res->status == 0) {
    if (c->pull == NULL) /* a read failed behind the batch: meet it again */
      start_pulling(c);
    else
      durable__consumer_next_turn(c);
  } else if (res->status == DURABLE_ECONFLICT) {
    lease_lost(c);
  } else if (res->status == DURABLE_ESHUTDOWN && durable__consumer_leaving(c)) {
    durable__consumer_stop_reading(
        c);                   /* the hub is leaving: the release follows */
  } else if (t->ack_failed) { /* the store's fault, not the item's */
    durable__consumer_stop_reading(c);
    backoff(c, t->first, 0, res->message);
    c->flags |= DURABLE__CONSUMER_STORE_BACKOFF;
  } else if (t->count > 1) {
    batch_failed(c, t, res->message);
  } else {
    fail_item(c, t->first, res->message, t->payload, t->appended_at);
  }
}

/* ---- claiming ------------------------------------------------------------ */

static void on_orphan_signal(durable_watch_t *w, durable_change_kind_t kind,
                             const durable_node_t *node, void *data) {
  durable__consumer_t *c = data;
  (void)w;
  if (c->state != DURABLE__CONSUMER_WAITING || kind == DURABLE_CHANGE_REMOVED ||
      node == NULL || strcmp(node->id, c->lease_id) != 0)
    return;
  durable__stream_state_t s;
  if (durable__state_decode(node->content, node->path, &s) < 0)
    return;
  int free_now = s.subscriber == NULL;
  durable__state_free(&s);
  if (free_now)
    claim(c); /* the orphan event */
}

/* Read the items after the checkpoint: the lease is held. */
static void start_pulling(durable__consumer_t *c) {
  durable_error_t err = {0};
  c->pull = durable__pull_new(
      c->mesh, &(durable_stream_id_t){c->ns, c->key}, c->checkpoint,
      (c->flags & DURABLE__CONSUMER_HAS_SOURCE) ? &c->source : NULL,
      durable_mesh_store(c->mesh), &err);
  if (c->pull == NULL)
    failure(c, c->checkpoint + 1, err.message);
  else
    durable__consumer_next_turn(c);
}

typedef struct {
  durable__consumer_t *c;
  uint64_t gen;
} resume_t;

/* The outbox is empty (or could not be emptied now: logged, and the next
 * claim tries again): on to the items, if still the same round. */
static void on_outbox_resumed(int status, const char *message, void *data) {
  resume_t *r = data;
  durable__consumer_t *c = r->c;
  (void)status;
  (void)message;
  if (durable__consumer_consuming(c) && r->gen == c->gen && c->pull == NULL)
    start_pulling(c);
  durable_hub_unref(c->hub);
  free(r);
}

/* The lease is held: first the appends an earlier holder committed but did
 * not get to make (this one's too, after a failure), then the items. */
static void begin_consuming(durable__consumer_t *c) {
  c->flags &= ~DURABLE__CONSUMER_OUTQ_BLOCKED;
  durable__sweep_claimed(c->sweep, c->checkpoint); /* what is due now */
  resume_t *r = malloc(sizeof(*r));
  durable_error_t err = {0};
  if (r) {
    *r = (resume_t){.c = c, .gen = c->gen};
    durable_hub_ref(c->hub);
  }
  if (r == NULL ||
      durable__outbox_resume(c->mesh, c->key, on_outbox_resumed, r, &err) < 0) {
    if (r)
      durable_hub_unref(c->hub);
    free(r);
    start_pulling(c);
  }
}

/* ---- the claim's answer: one function per outcome, on_claim picks it */

/* The hub left (or the consumer was stopped) while the claim was out, or a
 * newer round began: give a lease it got back, and only then tell the
 * stopper.  `ans` is the grant, or NULL. */
static void claim_stale(durable__consumer_t *c,
                        const durable__stream_ans_t *ans) {
  int report = (c->flags & DURABLE__CONSUMER_STOP_AFTER_CLAIM) &&
               c->state == DURABLE__CONSUMER_STOPPED;
  c->flags &= ~DURABLE__CONSUMER_STOP_AFTER_CLAIM;
  if (ans && report) {
    c->state = DURABLE__CONSUMER_CONSUMING;
    c->epoch = ans->epoch;
    durable__consumer_finish_stop(c); /* releases, then reports */
  } else if (ans) {
    durable__consumer_release(c, ans->epoch);
  } else if (report) {
    durable__consumer_stop_later(c);
  }
}

/* The stream is gone: deleted (or being deleted, durable_stream_delete).
 * As at a start on a stream that is not there, wait for the wake of its
 * next publish -- which goes to the owner: a consumer on another hub looks
 * again every reclaim_ms too (said once, the repeats at debug). */
static void claim_gone(durable__consumer_t *c, const char *message) {
  durable__stream_renewed(c->mesh, c->ns, c->key, c->group);
  durable_mesh_log(c->mesh,
                   (c->flags & DURABLE__CONSUMER_GONE_SAID) ? DURABLE_LOG_DEBUG
                                                            : DURABLE_LOG_INFO,
                   "Durable stream consumer %s: %s — dormant until a wake",
                   durable__consumer_hub_name(c), message);
  c->flags |= DURABLE__CONSUMER_GONE_SAID;
  c->state = DURABLE__CONSUMER_DORMANT;
  if (c->flags & DURABLE__CONSUMER_WAKE_PENDING) {
    c->flags &= ~DURABLE__CONSUMER_WAKE_PENDING;
    claim(c);
  } else {
    durable__consumer_arm(c, c->msg_reclaim,
                          durable__stream_options(c->mesh).reclaim_ms);
  }
}

/* A takeover's hold of `hold_ms` from `now` (uv_hrtime()): no item is
 * handed over before it ends, nor before an earlier hold's end. */
static void extend_hold(durable__consumer_t *c, uint64_t now,
                        uint32_t hold_ms) {
  uint64_t until = now + (uint64_t)hold_ms * 1000000u;
  if (until > c->hold_until)
    c->hold_until = until;
}

/* Granted, but let go behind it while the claim was out (a seek): ask
 * again, so that it resumes from the checkpoint stored now. */
static void claim_doubted(durable__consumer_t *c,
                          const durable__stream_ans_t *ans) {
  c->flags &= ~DURABLE__CONSUMER_LEASE_DOUBT;
  c->state = DURABLE__CONSUMER_CONSUMING;
  c->epoch = ans->epoch;
  if (ans->hold_ms > 0) /* a takeover's hold outlives the claim again */
    extend_hold(c, uv_hrtime(), ans->hold_ms);
  claim_again(c);
}

/* Granted: consume from the checkpoint, once a takeover's hold is over. */
static void claim_granted(durable__consumer_t *c,
                          const durable__stream_ans_t *ans) {
  durable__stream_name_t n;
  c->flags &= ~DURABLE__CONSUMER_WAKE_PENDING;
  c->epoch = ans->epoch;
  c->checkpoint = ans->checkpoint;
  const char *took = ans->took_over_from;
  char takeover[DURABLE_PATH_MAX + 32] = "";
  if (took)
    snprintf(takeover, sizeof takeover, ", taken over from %s", took);
  /* the stream hub logs the grant at info: one line per lease */
  durable_mesh_log(c->mesh, DURABLE_LOG_DEBUG,
                   "Durable stream consumer %s holds %s (epoch %lld%s); "
                   "resuming after acknowledged sequence %lld",
                   durable__consumer_hub_name(c), durable__consumer_name(c, &n),
                   (long long)ans->epoch, takeover, (long long)ans->checkpoint);
  c->state = DURABLE__CONSUMER_CONSUMING;
  free(c->held_by); /* a holder after this one is news again */
  c->held_by = NULL;
  c->flags &= ~DURABLE__CONSUMER_GONE_SAID;
  /* a new lease may resume below what failed (a seek back) or on a new
   * stream (deleted and made anew): the count of a failing item is the
   * stored record's from here (fail_item), not this memory's */
  c->failed_seq = c->failed_times = 0;
  uint64_t now = uv_hrtime();
  if (ans->hold_ms > 0) {
    /* taken over from a process that is gone to the database, but that
     * may still run, cut off: it stops handing items over within the
     * fence, so the first item waits as long (a claim again meanwhile
     * does not shorten that, nor does the taker letting go: the stream
     * node keeps the hold for whoever holds it next) */
    durable_mesh_log(
        c->mesh, DURABLE_LOG_INFO,
        "Durable stream consumer %s holds %s, %s a process "
        "that is gone; its first item waits %u ms, until that "
        "process, if it still runs cut off, has stopped "
        "handing items over",
        durable__consumer_hub_name(c), durable__consumer_name(c, &n),
        took ? "taken over from" : "within the hold of a takeover from",
        ans->hold_ms);
    extend_hold(c, now, ans->hold_ms);
  }
  if (now < c->hold_until) {
    c->state = DURABLE__CONSUMER_CONSUMING_HELD;
    durable__consumer_arm(c, c->msg_fence,
                          (uint32_t)((c->hold_until - now) / 1000000u + 1));
  } else {
    begin_consuming(c);
  }
}

/* Refused: another holds the lease.  Wait for it to be let go (the orphan
 * event, a wake, the reclaim timer).  `ans` may be NULL (an answer that
 * says no more). */
static void claim_refused(durable__consumer_t *c,
                          const durable__stream_ans_t *ans) {
  durable__stream_name_t n;
  const char *holder = ans ? ans->holder : NULL;
  const char *holder_instance = ans ? ans->holder_instance : NULL;
  /* said once per holder: every reclaim_ms again would fill the log of
   * two hosts that share streams (the repeats are at debug) */
  char who[2 * DURABLE_PATH_MAX + 16];
  snprintf(who, sizeof who, "%s%s%s%s", holder ? holder : "another",
           holder_instance ? " (process " : "",
           holder_instance ? holder_instance : "", holder_instance ? ")" : "");
  int said = c->held_by != NULL && strcmp(c->held_by, who) == 0;
  if (!said) {
    free(c->held_by);
    c->held_by = strdup(who);
  }
  durable_mesh_log(c->mesh, said ? DURABLE_LOG_DEBUG : DURABLE_LOG_INFO,
                   "Durable stream consumer %s: %s is held by %s; "
                   "waiting for it to be released",
                   durable__consumer_hub_name(c), durable__consumer_name(c, &n),
                   who);
  c->state = DURABLE__CONSUMER_WAITING;
  /* released meanwhile? ask again at once */
  if (c->flags & DURABLE__CONSUMER_WAKE_PENDING) {
    c->flags &= ~DURABLE__CONSUMER_WAKE_PENDING;
    claim(c);
    return;
  }
  durable_error_t err = {0};
  if (durable_store_watch(durable_mesh_store(c->mesh), c->lease_ns, 0,
                          on_orphan_signal, c, &c->orphan_watch, &err) < 0)
    c->orphan_watch = NULL; /* the wake and the timer still come */
  durable__consumer_arm(c, c->msg_reclaim,
                        durable__stream_options(c->mesh).reclaim_ms);
}

/* The stream's hub made the group (or found it made): claim it; the
 * stream is gone: dormant. */
static void on_group_made(const durable_response_t *res, void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  uint64_t gen = a->gen;
  free(a);
  if (c->state != DURABLE__CONSUMER_CLAIMING || gen != c->gen ||
      durable__consumer_leaving(c))
    claim_stale(c, NULL);
  else if (res->status == DURABLE_ENOTFOUND)
    claim_gone(c, res->message);
  else if (res->status < 0)
    failure(c, 0, res->message); /* backs off */
  else if ((a = calloc(1, sizeof(*a))) == NULL)
    failure(c, 0, "out of memory");
  else {
    a->gen = c->gen;
    send_claim(c, a); /* in the same round */
  }
  durable_hub_unref(c->hub);
}

static void make_group(durable__consumer_t *c) {
  durable__consumer_ask_t *a = calloc(1, sizeof(*a));
  durable__stream_req_t *req =
      durable__stream_req_new(NULL, durable__consumer_hub_name(c), 0, 0);
  durable_error_t err = {0};
  c->flags |= DURABLE__CONSUMER_GROUP_MADE;
  if (a == NULL || req == NULL || (req->group = strdup(c->group)) == NULL) {
    free(a);
    durable__body_free(req ? &req->base : NULL);
    failure(c, 0, "out of memory");
    return;
  }
  req->start = c->cfg.start;
  req->detach = c->cfg.detach;
  a->c = c;
  a->gen = c->gen;
  durable_hub_ref(c->hub);
  if (durable__hub_request_body(durable__mesh_reads_hub(c->mesh), c->path,
                                DURABLE__MSG_GROUP, &req->base, 0,
                                on_group_made, a, &err) < 0) {
    durable_hub_unref(c->hub);
    free(a);
    failure(c, 0, err.message);
  }
}

/* The claim answered: too late for this round, the stream gone, the claim
 * failed, granted (in doubt, or not), or refused. */
static void on_claim(const durable_response_t *res, void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  uint64_t gen = a->gen;
  free(a);
  const durable__stream_ans_t *ans = durable__stream_answer(res);
  int granted = ans && ans->ok;
  if (c->state == DURABLE__CONSUMER_STOPPED || gen != c->gen)
    claim_stale(c, granted ? ans : NULL);
  else if (res->status == DURABLE_ENOTFOUND && c->group &&
           !(c->flags & DURABLE__CONSUMER_GROUP_MADE))
    make_group(c); /* a group's first claim: the stream's hub makes it */
  else if (res->status == DURABLE_ENOTFOUND)
    claim_gone(c, res->message);
  else if (res->status < 0)
    failure(c, 0, res->message); /* backs off */
  else if (granted && (c->flags & DURABLE__CONSUMER_LEASE_DOUBT))
    claim_doubted(c, ans);
  else if (granted)
    claim_granted(c, ans);
  else
    claim_refused(c, ans);
  durable_hub_unref(c->hub);
}

static void send_claim(durable__consumer_t *c, durable__consumer_ask_t *a) {
  durable_error_t err = {0};
  if (ask(c, DURABLE__MSG_CLAIM, 0, 0, on_claim, a, &err) < 0) {
    free(a);
    failure(c, 0, err.message);
  }
}

/* The principal's right to consume, asked before its claim. */
static void on_claim_allowed(const durable_result_t *res, void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  if (c->state != DURABLE__CONSUMER_CLAIMING || a->gen != c->gen ||
      durable__consumer_leaving(c)) {
    free(a); /* stopped, or a newer round began meanwhile */
    if ((c->flags & DURABLE__CONSUMER_STOP_AFTER_CLAIM) &&
        c->state == DURABLE__CONSUMER_STOPPED) {
      /* stopped while only the access check was out: nothing was claimed */
      c->flags &= ~DURABLE__CONSUMER_STOP_AFTER_CLAIM;
      durable__consumer_stop_later(c);
    }
  } else if (res->status < 0) {
    free(a);
    failure(c, 0, res->message);
  } else
    send_claim(c, a);
  durable_hub_unref(c->hub);
}

static void claim(durable__consumer_t *c) {
  if (durable__consumer_leaving(c))
    return;
  durable__consumer_stop_reading(c);
  c->flags &= ~(DURABLE__CONSUMER_FENCE_LOGGED | DURABLE__CONSUMER_GROUP_MADE);
  c->state = DURABLE__CONSUMER_CLAIMING;
  c->gen++;
  durable__consumer_ask_t *a = calloc(1, sizeof(*a));
  durable_error_t err = {0};
  if (a == NULL) {
    failure(c, 0, "out of memory");
    return;
  }
  a->gen = c->gen;
  const char *principal = durable_mesh_principal(c->mesh);
  if (principal == NULL) {
    send_claim(c, a);
    return;
  }
  a->c = c;
  durable_hub_ref(c->hub);
  if (durable__store_access(durable_mesh_store(c->mesh), principal, c->key,
                            DURABLE_GRANT_ALL, on_claim_allowed, a, &err) < 0) {
    durable_hub_unref(c->hub);
    free(a);
    failure(c, 0, err.message);
  }
}

/* ---- start, wake, timers ------------------------------------------------- */

static void on_exists(const durable_result_t *res, void *data) {
  durable__consumer_t *c = data;
  durable__stream_name_t n;
  if (c->state == DURABLE__CONSUMER_STARTING) {
    if (res->status < 0) {
      failure(c, 0, res->message);
    } else if (res->value) {
      durable_mesh_log(c->mesh, DURABLE_LOG_DEBUG,
                       "Durable stream consumer %s: %s exists — claiming",
                       durable__consumer_hub_name(c),
                       durable__consumer_name(c, &n));
      claim(c);
    } else if (c->flags & DURABLE__CONSUMER_WAKE_PENDING) {
      /* the stream appeared after we looked */
      c->flags &= ~DURABLE__CONSUMER_WAKE_PENDING;
      claim(c);
    } else {
      durable_mesh_log(
          c->mesh, DURABLE_LOG_DEBUG,
          "Durable stream consumer %s: %s does not exist — dormant "
          "until a wake",
          durable__consumer_hub_name(c), durable__consumer_name(c, &n));
      c->state = DURABLE__CONSUMER_DORMANT;
    }
  }
  durable_hub_unref(c->hub);
}

void durable__consumer_start(durable__consumer_t *c) {
  durable__stream_name_t n;
  durable_mesh_log(
      c->mesh, DURABLE_LOG_DEBUG, "Durable stream consumer %s starting on %s",
      durable__consumer_hub_name(c), durable__consumer_name(c, &n));
  c->state = DURABLE__CONSUMER_STARTING;
  durable_error_t err = {0};
  durable_hub_ref(c->hub);
  /* a listing read, never a point read, and never a create */
  if (durable_store_exists(durable_mesh_store(c->mesh),
                           durable_mesh_principal(c->mesh), c->path, on_exists,
                           c, &err) < 0) {
    durable_hub_unref(c->hub);
    failure(c, 0, err.message);
  }
}

/* Verify the lease in the database (a claim) before the next item: after
 * the item in flight, if one is. */
static void claim_again(durable__consumer_t *c) {
  if (c->state == DURABLE__CONSUMER_CLAIMING) {
    /* the grant on its way may predate the change */
    c->flags |= DURABLE__CONSUMER_LEASE_DOUBT;
    return;
  }
  if (!durable__consumer_consuming(c) || durable__consumer_leaving(c))
    return;
  if (c->flags & DURABLE__CONSUMER_TURN_OUT) {
    c->flags |= DURABLE__CONSUMER_RECLAIM_AFTER_TURN;
    return;
  }
  c->gen++; /* retire what the last round has out */
  durable__consumer_stop_reading(c);
  claim(c);
}

void durable__consumer_lease_gone(durable__consumer_t *c, int claiming) {
  if (claiming || c->state != DURABLE__CONSUMER_CLAIMING)
    claim_again(c);
}

/* Whether a wake's payload -- null: the stream's own lease; "name": that
 * group's -- is for `c`. */
static int wake_is_mine(const durable__consumer_t *c, const char *payload) {
  if (c->group == NULL)
    return payload == NULL || strcmp(payload, "null") == 0;
  size_t n = strlen(c->group);
  return payload && payload[0] == '"' &&
         strncmp(payload + 1, c->group, n) == 0 && payload[n + 1] == '"' &&
         payload[n + 2] == '\0';
}

/* A wake: the lease it names is free with items waiting -- or, for
 * another consumer of the family, at least that the stream exists. */
static void woken(durable__consumer_t *c, const char *payload) {
  if (!wake_is_mine(c, payload)) {
    if (c->state == DURABLE__CONSUMER_DORMANT)
      claim(c); /* its stream exists now: its group is made at its claim */
    else if (c->state == DURABLE__CONSUMER_STARTING)
      c->flags |= DURABLE__CONSUMER_WAKE_PENDING;
  } else if (c->state == DURABLE__CONSUMER_DORMANT ||
             c->state == DURABLE__CONSUMER_WAITING) {
    claim(c);
  } else if (c->state == DURABLE__CONSUMER_STARTING ||
             c->state == DURABLE__CONSUMER_CLAIMING) {
    /* its existence check or claim may predate it */
    c->flags |= DURABLE__CONSUMER_WAKE_PENDING;
  } else if (durable__consumer_consuming(c)) {
    /* owners are woken for leases nobody holds: the one this consumer
     * holds was let go behind it (an operator's seek, in another process) */
    claim_again(c);
  }
}

/* The family's wake reaches every consumer of the family on the hub: the
 * first registered it, the others are its siblings. */
static void on_wake(durable_hub_t *hub, const durable_msg_t *msg,
                    durable_reply_t *reply, void *data) {
  durable__consumer_t *first = data;
  struct durable__queue *q, *next;
  (void)hub;
  woken(first, msg->payload);
  DURABLE__QUEUE_FOREACH_SAFE(q, next, &first->siblings) {
    woken(DURABLE__QUEUE_DATA(q, durable__consumer_t, siblings), msg->payload);
  }
  durable_reply_ok(reply, NULL);
}

static int join_wake(durable__consumer_t *c, durable_error_t *err) {
  durable__consumer_t *first =
      durable__hub_handler_data(c->hub, c->msg_wake, on_wake);
  if (first == NULL)
    return durable__hub_on(c->hub, c->msg_wake, on_wake, c, err);
  durable__queue_insert_tail(&first->siblings, &c->siblings);
  return 0;
}

static void on_retry(durable_hub_t *hub, const durable_msg_t *msg,
                     durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  (void)hub;
  if (c->state == DURABLE__CONSUMER_BACKOFF &&
      durable__consumer_current_gen(c, msg))
    claim(c);
  durable_reply_ok(reply, NULL);
}

/* Retention's sweep (retention.c), in any state but stopped: it deletes
 * only what this consumer saw acknowledged, and a trim never passes the
 * stored checkpoint, so neither a backoff nor a lost lease matters. */
static void on_sweep(durable_hub_t *hub, const durable_msg_t *msg,
                     durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  (void)hub;
  if (c->state != DURABLE__CONSUMER_STOPPED)
    durable__sweep_run(c->sweep, msg->payload);
  durable_reply_ok(reply, NULL);
}

static void on_reclaim(durable_hub_t *hub, const durable_msg_t *msg,
                       durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  (void)hub;
  /* dormant: armed only when a claim found the stream deleted */
  if ((c->state == DURABLE__CONSUMER_WAITING ||
       c->state == DURABLE__CONSUMER_DORMANT) &&
      durable__consumer_current_gen(c, msg))
    claim(c);
  durable_reply_ok(reply, NULL);
}

/* The session answered: the lock was held all along; read on from the
 * checkpoint. */
static void fence_over(durable__consumer_t *c) {
  if (c->flags & DURABLE__CONSUMER_FENCE_LOGGED) {
    durable__stream_name_t n;
    durable_mesh_log(c->mesh, DURABLE_LOG_INFO,
                     "Durable stream consumer %s: this process's liveness is "
                     "confirmed again; %s goes on",
                     durable__consumer_hub_name(c),
                     durable__consumer_name(c, &n));
  }
  c->state = DURABLE__CONSUMER_CONSUMING;
  c->flags &= ~DURABLE__CONSUMER_FENCE_LOGGED;
  start_pulling(c);
}

/* A takeover's hold is over, or it is time to look at the liveness again
 * (wait_for_liveness). */
static void on_fence(durable_hub_t *hub, const durable_msg_t *msg,
                     durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  (void)hub;
  durable_reply_ok(reply, NULL);
  if (!durable__consumer_consuming(c) ||
      !durable__consumer_current_gen(c, msg) || durable__consumer_leaving(c))
    return;
  if (c->state == DURABLE__CONSUMER_CONSUMING_HELD) {
    c->state = DURABLE__CONSUMER_CONSUMING;
    begin_consuming(c);
  } else if (c->state == DURABLE__CONSUMER_CONSUMING_FENCED &&
             durable__store_live(durable_mesh_store(c->mesh))) {
    fence_over(c);
  } else if (c->state == DURABLE__CONSUMER_CONSUMING_FENCED) {
    durable__stream_name_t n;
    durable__consumer_arm(c, c->msg_fence,
                          durable__store_fence_ms(durable_mesh_store(c->mesh)));
    if (c->flags & DURABLE__CONSUMER_FENCE_LOGGED)
      return;
    c->flags |= DURABLE__CONSUMER_FENCE_LOGGED;
    durable_mesh_log(c->mesh, DURABLE_LOG_WARN,
                     "Durable stream consumer %s: this process's liveness in "
                     "the store is not confirmed (no answer within %u ms); "
                     "item %lld of %s is not handed over until it is",
                     durable__consumer_hub_name(c),
                     durable__store_fence_ms(durable_mesh_store(c->mesh)),
                     (long long)c->fenced_seq, durable__consumer_name(c, &n));
  }
}

void durable__consumer_live(durable__consumer_t *c, int reconnected) {
  if (durable__consumer_leaving(c))
    return;
  if (!reconnected && c->state == DURABLE__CONSUMER_CONSUMING_FENCED)
    fence_over(c); /* a reconnect confirms nothing by itself */
  else if (reconnected && c->state == DURABLE__CONSUMER_BACKOFF &&
           (c->flags & DURABLE__CONSUMER_STORE_BACKOFF)) {
    c->attempt = 0; /* the store is back: no reason to wait longer */
    c->gen++;
    durable__consumer_arm(c, c->msg_retry, 0);
  }
}

static void consumer_free(void *data) {
  durable__consumer_t *c = data;
  durable__consumer_unlink(c);
  durable__sweep_free(c->sweep);
  durable__consumer_appends_drop(c);
  durable__consumer_stop_reading(c);
  durable__consumer_turn_clear(c);
  free(c->turn);
  free(c->names);
  free(c->source_ns);
  free(c->ns);
  free(c->group);
  durable__queue_remove(&c->siblings);
  free(c->key);
  free(c->held_by);
  free(c);
}

/* An operator's retention policy changed here (retention.c): a consumer
 * holding its lease looks at what is due now, an idle stream too. */
void durable__consumer_retention_changed(durable__consumer_t *c) {
  if (durable__consumer_consuming(c))
    durable__sweep_acked(c->sweep, c->checkpoint);
}

/* ---- making one (consumers.c declares it) -------------------------------- */

int durable__consumer_new(durable_hub_t *hub, const durable_consumer_t *cfg,
                          durable__consumer_t **out, durable_error_t *err) {
  /* allocated as the handle, so that durable_hub_consume can hand it out */
  durable_consumer_handle_t *h = calloc(1, sizeof(*h));
  durable__consumer_t *c = h ? &h->c : NULL;
  if (c == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  /* before anything can fail: consumer_free leaves the mesh's list and
   * drops the appends */
  durable__queue_init(&c->link);
  durable__queue_init(&c->outq);
  durable__queue_init(&c->siblings);
  c->hub = hub;
  c->mesh = durable_hub_mesh(hub);
  c->cfg = *cfg;
  c->append_failed = on_append_failed;
  c->turn_back = on_turn_back;
  c->no_turn = on_no_turn;
  char key[DURABLE_PATH_MAX + 1];
  int rc = 0;
  if (cfg->key_of)
    rc = cfg->key_of(hub, key, sizeof key, cfg->data);
  else
    snprintf(key, sizeof key, "%s", durable_hub_address(hub));
  c->ns = strdup(cfg->ns);
  c->key = strdup(key);
  c->cfg.group = c->group = cfg->group ? strdup(cfg->group) : NULL;
  if (c->ns == NULL || c->key == NULL || (cfg->group && c->group == NULL))
    rc = DURABLE_ENOMEM;
  durable_stream_id_t id = {.ns = c->ns, .key = c->key};
  if (rc < 0) {
    durable__error(err, rc, "the consumer of '%s' at hub '%s' has no key",
                   cfg->ns, durable_hub_address(hub));
  } else if ((rc = durable_stream_check(&id, err)) == 0 &&
             (rc = durable__dead_letters_check(c, err)) == 0 &&
             (rc = durable__consumer_names(c, err)) == 0) {
    c->lease_id = c->group ? c->group : c->ns;
    if (cfg->source_of) {
      rc = cfg->source_of(hub, &c->source, cfg->data);
      if (rc < 0)
        durable__error(err, rc,
                       "the consumer of '%s' at hub '%s' has no source",
                       cfg->ns, durable_hub_address(hub));
      if (rc == 0)
        c->flags |= DURABLE__CONSUMER_HAS_SOURCE;
      /* every claim reads from the source again: keep its namespace here,
       * not wherever source_of happened to write it */
      if ((c->flags & DURABLE__CONSUMER_HAS_SOURCE) &&
          c->source.items_ns != NULL) {
        if ((c->source_ns = strdup(c->source.items_ns)) == NULL)
          rc = durable__error(err, DURABLE_ENOMEM, "out of memory");
        c->source.items_ns = c->source_ns;
      }
      if (rc > 0)
        rc = 0;
    }
  }
  if (rc < 0) {
    consumer_free(c);
    return rc;
  }
  if (!(c->flags & DURABLE__CONSUMER_HAS_SOURCE) &&
      (c->sweep = durable__sweep_new(hub, c->msg_sweep, &id,
                                     &cfg->retention)) == NULL) {
    consumer_free(c);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  if ((rc = durable__hub_attach(hub, c, c, consumer_free)) < 0) {
    consumer_free(c);
    return durable__error(err, rc, "out of memory");
  }
  durable_handler_cb turn = durable__consumer_turn; /* turn.c */
  if ((rc = durable__hub_on(hub, c->msg_turn, turn, c, err)) < 0 ||
      (rc = join_wake(c, err)) < 0 ||
      (rc = durable__hub_on(hub, c->msg_retry, on_retry, c, err)) < 0 ||
      (rc = durable__hub_on(hub, c->msg_reclaim, on_reclaim, c, err)) < 0 ||
      (rc = durable__hub_on(hub, c->msg_fence, on_fence, c, err)) < 0 ||
      (rc = durable__hub_on(hub, c->msg_sweep, on_sweep, c, err)) < 0 ||
      (rc = durable__hub_on(hub, c->msg_gather, durable__consumer_gathered, c,
                            err)) < 0 ||
      (rc = durable__hub_on_dispose(hub, durable__consumer_on_dispose, c)) <
          0) {
    /* the handlers made go again, so that the hub may consume the family
     * later (a second consumer would be refused: "already handles");
     * `c` stays attached, stopped, and goes with the hub */
    const char *types[] = {c->msg_turn,    c->msg_wake,  c->msg_retry,
                           c->msg_reclaim, c->msg_fence, c->msg_sweep,
                           c->msg_gather};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
      durable__hub_off(hub, types[i], c);
    durable__queue_remove(&c->siblings);
    c->state = DURABLE__CONSUMER_STOPPED;
    if (rc == DURABLE_ENOMEM)
      durable__error(err, rc, "out of memory");
    return rc;
  }
  *out = c;
  return 0;
}

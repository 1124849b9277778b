/*
 * stream_hub.c: the hub of a stream node, which orders everything that
 * happens to its stream.
 *
 * Append, claim, ack and release arrive as requests and go into one serial
 * chain per activation: one operation finishes -- store write, and for a
 * claim the ping of the holder -- before the next starts.  That is what
 * makes sequences contiguous and the lease exclusive within a process.  An
 * operator's seek, trim and delete are operations of the same chain
 * (stream_hub_operator.c).
 * Across processes each operation writes its decision as a compare-and-set
 * on the stream node (stream_hub_write.c): the part of the state it decided
 * on must not have moved since it was read, else it reads again and decides
 * again.
 *
 *   request --> chain: [append ack append append] [claim] [release] ...
 *                        one transaction            ping holder if held
 *                        items, LastSequence and    then write the lease
 *                        Checkpoint
 *
 * Appends and acknowledgements waiting in the chain together go into one
 * transaction: the items, the new LastSequence and the new Checkpoint, all
 * or nothing -- so a consumer keeping up with a producer shares its
 * commits.  An append that finds the tail moved by another process's
 * appends takes the sequences after it (stream_hub_write.c).  The next
 * sequence is re-derived after a recycle or a failure from both LastSequence
 * and the highest stored item, so an item left above LastSequence (made by
 * hand, or by another writer) is never handed out twice.
 *
 * An append with a publish id also creates the id's write-once node
 * (publish_id.c) in the batch's transaction.  An id twice in one batch is
 * one item: the later append is answered with the earlier one's sequence.
 * An id already stored fails the whole transaction on the node's key
 * (DURABLE_EEXIST); the hub then looks the batch's ids up, answers those it
 * finds with the sequence they got the first time, and decides the rest
 * again (stream_hub_ids.c).  Appends without an id write what they always
 * did.
 *
 * An append to a stream nobody holds, and a release that leaves
 * unacknowledged items, wake the owner: a mesh read of the owner (which
 * activates it, so its consumer starts) then a wake message, at most once
 * per orphan period.
 */
#include "lease.h"
#include "stream_hub.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define APPEND_BATCH 256
/* Compare-and-set retries of an append that lost its sequences to another
 * process's append (other operations: stream_hub_op.c's MAX_ATTEMPTS): it
 * goes on after the tail it just read, so each attempt costs one
 * transaction, and producers of several processes on one stream take turns
 * (the stream's row lock orders them).  Bounded only against a livelock. */
#define MAX_CONTENDED 256

static void pump(durable__shub_t *sh);

/* ---- the lease, as this process sees it
 * ---------------------------------------------------------------- */

/* This process, as a lease names it. */
static const char *here(const durable__shub_t *sh) {
  return durable_store_instance(durable_mesh_store(sh->mesh));
}

/* Held by another process with items waiting: should that process die,
 * this host's waker must know the stream (the change feed tells only of
 * other processes' commits, not of this one's appends). */
static void suspect_if_elsewhere(durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  if (durable__lease_where(s, here(sh)) == DURABLE__LEASE_ELSEWHERE &&
      durable__lease_waiting(s))
    durable__waker_suspect(sh->mesh, sh->path, s->subscriber_instance);
}

static void forget_holder(durable__shub_t *sh) {
  free(sh->holder);
  free(sh->holder_instance);
  sh->holder = sh->holder_instance = NULL;
}

/* ---- append
 * ------------------------------------------------------------------------------
 */

static int fenced(durable__shub_t *sh, const durable__shub_op_t *op);

/* An ack's decision on the cached state: 1 when it moves the checkpoint, 0
 * when there is nothing to write (a repeat: accepted; fenced: refused,
 * `reason` set). */
static int decide_ack(durable__shub_t *sh, durable__shub_op_t *op) {
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

/* Answer the `n` operations of a batch at the head of the chain, and take
 * them off it: appends with the sequences run_batch gave them, acks as
 * decide_ack decided. */
static void answer_batch(durable__shub_t *sh, size_t n) {
  for (size_t i = 0; i < n; i++) {
    durable__shub_op_t *op = durable__shub_pop(sh);
    if (op->kind == DURABLE__OP_APPEND) {
      durable__shub_answer_seq(op, op->seq);
    } else {
      durable__shub_answer_ok(op, !op->refused, op->reason);
    }
    durable__shub_op_free(op);
  }
}

/* The batch run_batch wrote came back. */
static void batch_written(durable__shub_t *sh, const durable_result_t *res) {
  /* the batch written, not the operations in the chain now: more may have
   * queued behind it while the transaction was in flight */
  size_t n = sh->batch, appends = sh->appends;
  int with_ids = (sh->flags & DURABLE__SHUB_WITH_IDS) != 0;
  sh->batch = sh->appends = 0;
  sh->flags &= ~DURABLE__SHUB_WITH_IDS;
  if (res->status == DURABLE_ECONFLICT &&
      (sh->flags & DURABLE__SHUB_HAVE_STATE)) {
    /* another process wrote first: decide again on what won, read under
     * the row lock (run_batch goes on after its tail) */
    if (++durable__shub_head(sh)->attempts >= MAX_CONTENDED) {
      durable__shub_fail(sh, res->status, res->message);
      return;
    }
    durable__shub_go_on(sh);
    return;
  }
  if (res->status == DURABLE_EEXIST && with_ids) {
    /* a publish id stored already, maybe */
    durable__shub_read_ids(sh, n, res);
    return;
  }
  if (res->status == DURABLE_ECONFLICT || res->status == DURABLE_EEXIST) {
    /* an item is in the way (made by hand, say): derive the sequence again
     * from both LastSequence and the highest stored item */
    durable__shub_retry(sh, res->status, res->message);
    return;
  }
  if (res->status < 0) {
    durable_stream_id_t id = durable__shub_id(sh);
    durable_mesh_log(sh->mesh, DURABLE_LOG_WARN,
                     "Durable stream %s: %s failed: %s",
                     durable__stream_name(&id).text,
                     appends ? "append" : "acknowledgement", res->message);
    durable__shub_forget_state(sh);
    for (size_t i = 0; i < n; i++) {
      durable__shub_op_t *op = durable__shub_pop(sh);
      durable_reply_fail(op->reply, res->status, res->message);
      durable__shub_op_free(op);
    }
    durable__shub_go_on(sh);
    return;
  }
  answer_batch(sh, n);
  if (appends) {
    sh->next_seq = sh->state.last_sequence + 1;
    if (sh->state.subscriber == NULL)
      durable__shub_wake_owner(sh);
    else
      suspect_if_elsewhere(sh);
    durable__shub_groups_appended(sh);
  }
  durable__shub_go_on(sh);
}

static void derive_next(durable__shub_t *sh);

/* An acknowledgement with the item's effects came back.  A refused effect
 * (a replace whose version moved, a create of a present node) fails this
 * item alone: nothing of it was written, and its consumer hands it again.
 * Anything else is what any lease write meets (batch_written). */
static void commit_written(durable__shub_t *sh, const durable_result_t *res) {
  if (res->status < 0 && sh->failed_write > 1) {
    sh->batch = sh->appends = 0;
    durable__shub_fail(sh, res->status, res->message);
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
static void run_commit(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
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
    durable__shub_go_on(sh);
    return;
  }
  if (durable__state_copy(&sh->state, &next) < 0) {
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  durable__state_acked(&next, op->req->sequence, durable__now_ms());
  sh->batch = 1;
  sh->appends = 0;
  sh->flags &= ~DURABLE__SHUB_WITH_IDS;
  /* the effects are the consumer's writes: checked as its mesh's
   * principal, in the transaction (the claim already needed write on the
   * stream's owner, so the checkpoint passes the same check) */
  durable__shub_write_state(sh, DURABLE__PART_LEASE, &next,
                            op->req->effects->writes, op->req->effects->count,
                            NULL, durable_mesh_principal(sh->mesh),
                            commit_written);
}

/* The appends and acknowledgements at the head of the chain, in one
 * transaction: the items, and the stream node with the new LastSequence
 * and the new Checkpoint.  A consumer's ack that waits behind a producer's
 * appends so shares their commit instead of taking one of its own. */
static void run_batch(durable__shub_t *sh) {
  size_t n = 0, appends = 0, ids = 0;
  /* appends wait at the head while deleting or stopped: refused there */
  int deleting =
      sh->state.deleting_at != 0 || durable__state_behind(&sh->state);
  if (deleting && durable__shub_head(sh)->kind == DURABLE__OP_APPEND &&
      (durable__shub_refuse_deleting(sh, "appended to") ||
       durable__shub_refuse_behind(sh, "appended to")))
    return;
  for (durable__shub_op_t *op = durable__shub_head(sh);
       op && (op->kind == DURABLE__OP_APPEND || op->kind == DURABLE__OP_ACK) &&
       n < APPEND_BATCH;
       op = durable__shub_after(sh, op)) {
    if ((deleting || sh->group) && op->kind == DURABLE__OP_APPEND)
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
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  /* an item per append, and an id node per publish id */
  size_t cap = appends + ids + 1;
  durable_write_t *items = calloc(cap, sizeof(*items));
  char(*paths)[DURABLE_PATH_MAX + 48] = calloc(cap, sizeof(*paths));
  char **contents = calloc(cap, sizeof(char *));
  durable__shub_op_t **with_id =
      ids ? calloc(ids, sizeof(durable__shub_op_t *)) : NULL;
  durable__batch_write_t *made = calloc(cap + 1, sizeof(*made));
  int ok = items && paths && contents && (ids == 0 || with_id) && made;
  int part = appends ? DURABLE__PART_TAIL : 0;
  int64_t now = durable__now_ms();
  size_t k = 0, w = 0, nid = 0;
  durable__shub_op_t *op = durable__shub_head(sh);
  for (size_t i = 0; ok && i < n; i++, op = durable__shub_after(sh, op)) {
    if (op->kind == DURABLE__OP_ACK) {
      if (decide_ack(sh, op) && op->req->sequence > next.checkpoint) {
        durable__state_acked(&next, op->req->sequence, now);
        part |= DURABLE__PART_LEASE;
      }
      continue;
    }
    const char *pid = op->req->id;
    durable__shub_op_t *first = NULL;
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
    made[w] = (durable__batch_write_t){
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
      made[w] =
          (durable__batch_write_t){.seq = op->seq, .id_path = strdup(paths[w])};
      ok = ok && made[w].id_path != NULL;
      w++;
    }
  }
  if (!ok) {
    durable__state_free(&next);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
  } else if (part == 0) {
    /* acks only, and none moves the checkpoint: answered, nothing
     * written */
    durable__state_free(&next);
    answer_batch(sh, n);
    durable__shub_go_on(sh);
  } else {
    if (k)
      next.last_sequence = sh->next_seq + (int64_t)k - 1;
    sh->batch = n;
    sh->appends = k;
    if (nid > 0)
      sh->flags |= DURABLE__SHUB_WITH_IDS;
    else
      sh->flags &= ~DURABLE__SHUB_WITH_IDS;
    durable__shub_write_state(sh, part, &next, items, w, k ? made : NULL, NULL,
                              batch_written);
    if (k)
      made = NULL; /* taken */
  }
  durable__batch_writes_free(made);
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

static void granted(durable__shub_t *sh, const durable_result_t *res) {
  if (res->status < 0)
    forget_holder(sh); /* before a retry probes a holder again */
  if (!durable__shub_lease_saved(sh, res, 1))
    return;
  const durable__stream_state_t *s = &sh->state;
  durable__lease_log_granted(sh->mesh, s, sh->holder, sh->holder_instance,
                             durable__stream_options(sh->mesh).holder_probe_ms,
                             (sh->flags & DURABLE__SHUB_REGRANT) != 0);
  sh->flags &= ~DURABLE__SHUB_WOKEN; /* a new lease period */
  if (sh->group)
    durable__shub_group_changed(sh, 0);
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = 1;
    ans->epoch = s->lease_epoch;
    ans->checkpoint = s->checkpoint;
    ans->took_over_from = sh->holder; /* taken */
    sh->holder = NULL;
    /* the hold of a takeover, this one's or an earlier holder's */
    int64_t now = durable__now_ms();
    if (s->hold_until > now)
      ans->hold_ms = (uint32_t)(s->hold_until - now);
  }
  forget_holder(sh);
  durable__shub_answer(durable__shub_head(sh), ans);
  durable__shub_next(sh);
}

static void grant(durable__shub_t *sh) {
  durable__stream_state_t next;
  if (durable__state_copy(&sh->state, &next) < 0 ||
      durable__str_set(&next.subscriber,
                       durable__shub_head(sh)->req->subscriber) < 0 ||
      durable__str_set(&next.subscriber_instance, here(sh)) < 0) {
    durable__state_free(&next); /* the copy, when it was made */
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  next.lease_epoch++;
  next.subscribed_at = durable__now_ms();
  next.orphaned_at = 0;
  if (sh->group) { /* the holder's declaration; claimed, it pins again */
    const durable__stream_req_t *req = durable__shub_head(sh)->req;
    next.detach_idle_ms = durable__detach_idle_ms(&req->detach);
    next.detach_items = req->detach.items;
    next.detach_age_ms = req->detach.age_ms;
    next.detached_at = 0;
  }
  /* taken over from a process that is gone: the hold is written with the
   * lease, so that it binds whoever holds the stream next, too (a wall
   * clock: hosts' clocks are assumed to agree within a fraction of it) */
  uint32_t fence = durable__store_fence_ms(durable_mesh_store(sh->mesh));
  if (sh->holder_instance && fence > 0)
    next.hold_until = next.subscribed_at + fence;
  durable__shub_write_state(sh, DURABLE__PART_LEASE, &next, NULL, 0, NULL, NULL,
                            granted);
}

/* The holder is alive: refused, nothing written. */
static void refuse(durable__shub_t *sh) {
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
  durable__shub_answer(durable__shub_head(sh), ans);
  durable__shub_next(sh);
}

static void on_holder_ping(const durable_response_t *res, void *data) {
  durable__shub_t *sh = data;
  /* a holder that is recycling is alive: its item in flight finishes and
   * its release is the orphan event the claimant waits for */
  if (res->status == 0 || res->status == DURABLE_ESHUTDOWN)
    refuse(sh);
  else
    grant(sh); /* unreachable within the budget: taken over */
  durable_hub_unref(sh->hub);
}

static void on_holder_alive(const durable_result_t *res, void *data) {
  durable__shub_t *sh = data;
  if (res->status == 0 && res->value == 0) {
    grant(sh); /* its process is gone: taken over */
  } else {
    if (res->status < 0) {
      /* cannot tell: leave it the lease; the claimant tries again later */
      durable_stream_id_t id = durable__shub_id(sh);
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
static void run_claim(durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  if (durable__shub_refuse_deleting(sh, "claimed") ||
      durable__shub_refuse_behind(sh, "claimed") ||
      (sh->group && durable__shub_group_refuse(sh)))
    return;
  durable__claim_t meets = durable__lease_claim(
      s, durable__shub_head(sh)->req->subscriber, here(sh));
  if (meets == DURABLE__CLAIM_GRANT) {
    /* its holder claiming again (after a failure's backoff): no news */
    if (s->subscriber &&
        strcmp(s->subscriber, durable__shub_head(sh)->req->subscriber) == 0)
      sh->flags |= DURABLE__SHUB_REGRANT;
    else
      sh->flags &= ~DURABLE__SHUB_REGRANT;
    grant(sh);
    return;
  }
  sh->flags &= ~DURABLE__SHUB_REGRANT;
  int local = meets == DURABLE__CLAIM_PING_HOLDER;
  /* held by another process as this hub last knew it: that process's
   * release never passed through here -- read the lease as stored first */
  if (!local && durable__shub_read_again_first(sh, 1))
    return;
  const char *holder = s->subscriber;
  sh->holder = strdup(holder);
  if (!local)
    sh->holder_instance = strdup(s->subscriber_instance);
  if (sh->holder == NULL || (!local && sh->holder_instance == NULL)) {
    forget_holder(sh);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
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
      durable__shub_fail(sh, rc, err.message);
  }
}

/* ---- ack and release
 * ------------------------------------------------------------------------ */

/* Acks and releases come from hubs of this process (the stream hub lives
 * where its requests come from): the lease must be theirs, here. */
static int fenced(durable__shub_t *sh, const durable__shub_op_t *op) {
  return durable__lease_fenced(&sh->state, op->req->subscriber, op->req->epoch,
                               here(sh));
}

static void released(durable__shub_t *sh, const durable_result_t *res) {
  if (!durable__shub_lease_saved(sh, res, 0))
    return;
  durable__lease_log_released(sh->mesh, &sh->state);
  durable__shub_answer_ok(durable__shub_head(sh), 1, NULL);
  sh->flags &= ~DURABLE__SHUB_WOKEN; /* a new orphan period */
  if (sh->group)
    durable__shub_group_changed(sh, 1);
  else if (durable__lease_waiting(&sh->state))
    durable__shub_wake_owner(sh);
  durable__shub_next(sh);
}

static void run_release(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  if (fenced(sh, op)) { /* a stale release is ignored */
    durable__shub_answer_ok(op, 0, NULL);
    durable__shub_next(sh);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(&sh->state, &next) < 0 ||
      durable__str_set(&next.last_subscriber, op->req->subscriber) < 0) {
    durable__state_free(&next); /* the copy, when it was made */
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  durable__str_set(&next.subscriber, NULL);
  durable__str_set(&next.subscriber_instance, NULL);
  next.orphaned_at = durable__now_ms();
  durable__shub_write_state(sh, DURABLE__PART_LEASE, &next, NULL, 0, NULL, NULL,
                            released);
}

/* ---- the chain's engine
 * --------------------------------------------------------------------- */

/* The head's turn, its state known. */
static void run_head(durable__shub_t *sh) {
  durable__stream_op_t kind = durable__shub_head(sh)->kind;
  if (durable__shub_group_needs_parent(sh))
    return; /* back here with the stream read */
  if (sh->group && (kind == DURABLE__OP_APPEND || kind == DURABLE__OP_TRIM ||
                    kind == DURABLE__OP_GROUP)) {
    char message[DURABLE_PATH_MAX + 96];
    snprintf(message, sizeof message,
             "%s is a consumer group: %s the stream %s instead", sh->path,
             kind == DURABLE__OP_APPEND ? "append to"
             : kind == DURABLE__OP_TRIM ? "trim"
                                        : "make groups of",
             sh->stream_path);
    durable__shub_fail(sh, DURABLE_EINVAL, message);
    return;
  }
  if (sh->group && kind == DURABLE__OP_DELETE) {
    durable__shub_group_delete(sh);
    return;
  }
  switch (kind) {
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
    durable__shub_seek(sh);
    break;
  case DURABLE__OP_TRIM:
    durable__shub_trim(sh);
    break;
  case DURABLE__OP_DELETE:
    durable__shub_delete(sh);
    break;
  case DURABLE__OP_GROUP:
    durable__shub_group_create(sh);
    break;
  }
}

static void on_last_item(const durable_result_t *res, void *data) {
  durable__shub_t *sh = data;
  if (res->status < 0) {
    durable__shub_retry(sh, res->status, res->message);
  } else {
    int64_t last = sh->state.last_sequence;
    sh->next_seq = (res->value > last ? res->value : last) + 1;
    run_head(sh);
  }
  durable_hub_unref(sh->hub);
}

static void derive_next(durable__shub_t *sh) {
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  if (durable__store_last_item(durable_mesh_store(sh->mesh), NULL, sh->items_ns,
                               on_last_item, sh, &err) < 0) {
    durable_hub_unref(sh->hub);
    durable__shub_retry(sh, err.code, err.message);
  }
}

/* The stop is written (or lost to another process's write: read again). */
static void stopped_behind(durable__shub_t *sh, const durable_result_t *res) {
  if (res->status < 0) {
    durable__shub_retry(sh, res->status, res->message);
    return;
  }
  /* what this process saw is in the store now: from here on it follows
   * the store, so that the seek that lets the stream go on (to any
   * checkpoint) is not taken for another loss */
  durable__seen_forget(sh->mesh, sh->path);
  char line[sizeof(durable__stream_name_t) * 2 + 600];
  durable__shub_behind_says(sh, NULL, line, sizeof line);
  durable_mesh_log(sh->mesh, DURABLE_LOG_ERROR, "[DurableStreams] %s", line);
  run_head(sh); /* refused, or an operator's seek */
}

static int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* The state just read is behind what this process saw of the stream on an
 * earlier server of the store (seen.c): stop the stream in the store, so
 * that no process appends to it or hands it over until an operator has
 * looked, and let its lease go under a new epoch, so that a holder granted
 * meanwhile is fenced.  A stream stopped already gets what this process saw
 * beyond what the stop says.  1 when the write is on its way. */
static int stop_if_behind(durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  durable__stream_state_t next, seen = {0};
  if (!durable__seen_check(sh->mesh, sh->path, s, &seen))
    return 0;
  seen.seen_last = max64(seen.seen_last, s->seen_last);
  seen.seen_checkpoint = max64(seen.seen_checkpoint, s->seen_checkpoint);
  seen.seen_epoch = max64(seen.seen_epoch, s->seen_epoch);
  if ((seen.seen_last == s->seen_last &&
       seen.seen_checkpoint == s->seen_checkpoint &&
       seen.seen_epoch == s->seen_epoch) ||
      durable__state_copy(s, &next) < 0) {
    durable__seen_forget(sh->mesh, sh->path); /* nothing to add */
    return 0;
  }
  next.seen_last = seen.seen_last;
  next.seen_checkpoint = seen.seen_checkpoint;
  next.seen_epoch = seen.seen_epoch;
  if (!durable__state_behind(s)) { /* the stop itself */
    if (s->subscriber &&
        durable__str_set(&next.last_subscriber, s->subscriber) < 0) {
      durable__state_free(&next);
      return 0;
    }
    durable__str_set(&next.subscriber, NULL);
    durable__str_set(&next.subscriber_instance, NULL);
    next.lease_epoch = s->lease_epoch + 1;
    next.orphaned_at = durable__now_ms();
  }
  durable__shub_write_state(sh, DURABLE__PART_TAIL | DURABLE__PART_LEASE, &next,
                            NULL, 0, NULL, NULL, stopped_behind);
  return 1;
}

static void on_state_read(const durable_result_t *res, void *data) {
  durable__shub_t *sh = data;
  if (res->status == DURABLE_ENOTFOUND && sh->group) {
    char message[DURABLE_PATH_MAX + 96];
    snprintf(message, sizeof message, "consumer group %s of %s does not exist",
             sh->group, sh->stream_path);
    durable__shub_fail(sh, DURABLE_ENOTFOUND, message);
  } else if (res->status == DURABLE_ENOTFOUND) {
    /* never made, or deleted: a producer ensures it and asks again */
    durable_stream_id_t id = durable__shub_id(sh);
    char message[sizeof(durable__stream_name_t) + 64];
    snprintf(message, sizeof message, "durable stream %s does not exist",
             durable__stream_name(&id).text);
    /* when it is made (again), its owner is woken afresh */
    sh->flags &= ~DURABLE__SHUB_WOKEN;
    durable__seen_forget(sh->mesh, sh->path);
    durable__shub_fail(sh, DURABLE_ENOTFOUND, message);
  } else if (res->status < 0) {
    durable__shub_retry(sh, res->status, res->message);
  } else {
    durable__state_free(&sh->state);
    if (durable__state_decode(res->node->content, sh->path, &sh->state) < 0) {
      durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    } else {
      sh->flags |= DURABLE__SHUB_HAVE_STATE;
      sh->version = res->node->version;
      if (!stop_if_behind(sh))
        run_head(sh); /* a batch with appends derives its sequence first */
    }
  }
  durable_hub_unref(sh->hub);
}

static void pump(durable__shub_t *sh) {
  if (sh->flags & DURABLE__SHUB_BUSY)
    return;
  while ((sh->flags & DURABLE__SHUB_DEAD) && !durable__queue_empty(&sh->ops)) {
    /* Left (its quiesce budget ran out): what was queued never ran and was
     * answered ShuttingDown already; running it now would duplicate what a
     * producer resends to the next activation. */
    durable__shub_op_t *op = durable__shub_pop(sh);
    durable_reply_fail(op->reply, DURABLE_ESHUTDOWN, "the stream hub left");
    durable__shub_op_free(op);
  }
  if (durable__queue_empty(&sh->ops))
    return;
  sh->flags |= DURABLE__SHUB_BUSY;
  /* a state read from a server the store no longer follows (a failover)
   * is not the stored one: read it again */
  uint64_t gen = durable__store_server_gen(durable_mesh_store(sh->mesh));
  if (gen != sh->server_gen) {
    durable__shub_forget_state(sh);
    sh->server_gen = gen;
  }
  if (!(sh->flags & DURABLE__SHUB_HAVE_STATE)) {
    durable_error_t err = {0};
    durable_hub_ref(sh->hub);
    if (durable_store_get(durable_mesh_store(sh->mesh), NULL, sh->path,
                          on_state_read, sh, &err) < 0) {
      durable_hub_unref(sh->hub);
      durable__shub_fail(sh, err.code, err.message);
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
  durable__shub_t *sh = durable__shub_of(hub);
  /* a typed body from this process's producers and consumers, else JSON */
  durable__stream_req_t *req = (durable__stream_req_t *)durable__msg_take(msg);
  int typed = req != NULL;
  const char *bad = NULL;
  const char *principal = durable_mesh_principal(durable_hub_mesh(hub));
  if (!typed && principal != NULL) {
    /* The runtime's own requests are typed and were checked where they
     * were made (publish.c, the consumer's files); a JSON one comes from
     * user code, and the stream hub acts as the platform: a principal must
     * not reach it that way. */
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
  else if (kind == DURABLE__OP_GROUP && req->group == NULL)
    bad = "got a group request without Group";
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
  durable__shub_op_t *op = bad ? NULL : calloc(1, sizeof(*op));
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
  durable__queue_insert_tail(&sh->ops, &op->link);
  pump(sh);
}

static void shub_free(void *data) {
  durable__shub_t *sh = data;
  while (!durable__queue_empty(&sh->ops)) /* their replies ended with the hub */
    durable__shub_op_free(durable__shub_pop(sh));
  durable__state_free(&sh->state);
  durable__state_free(&sh->parent);
  durable__shub_groups_free(sh);
  forget_holder(sh);
  free(sh->path);
  free(sh->group);
  free(sh->stream_path);
  free(sh);
}

/* The hub of a stream node, or with `data` set of a consumer group's node
 * (stream_hub_group.c), whose stream is the path above it. */
static void stream_hub_init(durable_hub_t *hub, durable_reply_t *done,
                            void *data) {
  durable__shub_t *sh = calloc(1, sizeof(*sh));
  if (sh)
    durable__queue_init(&sh->ops); /* before shub_free can see it */
  if (sh == NULL || (sh->path = strdup(durable_hub_address(hub))) == NULL) {
    free(sh);
    durable_reply_fail(done, DURABLE_ENOMEM, "out of memory");
    return;
  }
  sh->hub = hub; /* not a reference: sh lives inside the hub */
  sh->mesh = durable_hub_mesh(hub);
  sh->pump = pump;
  sh->run = run_head;
  sh->node_type = data ? DURABLE__GROUP_TYPE : DURABLE__STREAM_TYPE;
  char stream_path[DURABLE_PATH_MAX + 1];
  const char *group = NULL;
  if (data && (!durable__group_split(sh->path, stream_path, sizeof stream_path,
                                     &group) ||
               (sh->group = strdup(group)) == NULL ||
               (sh->stream_path = strdup(stream_path)) == NULL)) {
    int bad = group == NULL;
    shub_free(sh);
    durable_reply_fail(done, bad ? DURABLE_EINVAL : DURABLE_ENOMEM,
                       bad ? "a consumer group's node is "
                             "{stream}/" DURABLE__GROUP_SEGMENT "/{group}"
                           : "out of memory");
    return;
  }
  snprintf(sh->items_ns, sizeof sh->items_ns, "%s/" DURABLE__ITEM_SEGMENT,
           sh->stream_path ? sh->stream_path : sh->path);
  if (durable__hub_attach(hub, &durable__shub_key, sh, shub_free) < 0) {
    shub_free(sh);
    durable_reply_fail(done, DURABLE_ENOMEM, "out of memory");
    return;
  }
  durable_reply_ok(done, NULL);
}

static void stream_hub_dispose(durable_hub_t *hub, void *data) {
  (void)data;
  durable__shub_t *sh = durable__shub_of(hub);
  if (sh)
    sh->flags |= DURABLE__SHUB_DEAD;
}

/* The NodeType `name` runs stream hubs (`group`: a consumer group's). */
static int install_type(durable_mesh_t *mesh, const char *name, int group) {
  durable_node_type_t *t = durable_node_type_get(mesh, name);
  if (t == NULL)
    return DURABLE_ENOMEM;
  /* a closing mesh stops stream hubs after the consumers, whose releases
   * they still have to take */
  t->late = 1;
  int rc = durable_node_type_on_init(t, stream_hub_init,
                                     group ? (void *)&durable__shub_key : NULL);
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
             {DURABLE__MSG_DELETE, DURABLE__OP_DELETE},
             {DURABLE__MSG_GROUP, DURABLE__OP_GROUP}};
  for (size_t i = 0; rc == 0 && i < sizeof ops / sizeof ops[0]; i++)
    rc = durable__node_type_on(t, ops[i].type, on_request,
                               (void *)(intptr_t)ops[i].kind, NULL);
  return rc;
}

int durable__stream_hub_install(durable_mesh_t *mesh) {
  durable__groups_on_seen(mesh, durable__stream_group_seen);
  int rc = install_type(mesh, DURABLE__STREAM_TYPE, 0);
  return rc < 0 ? rc : install_type(mesh, DURABLE__GROUP_TYPE, 1);
}

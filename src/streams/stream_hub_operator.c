/*
 * stream_hub_operator.c: the stream hub's side of an operator's acts on a
 * stream -- seek, trim and delete, which operator.c asks for.
 *
 * Each is an operation of the hub's chain, run in its turn like a claim
 * (stream_hub.c), decided on the stored state -- a request beyond the tail
 * or checkpoint this hub last read is decided again on a fresh read before
 * it is refused -- and written as a compare-and-set on the lease's part of
 * the stream node (stream_hub_write.c).  A stream being deleted takes no
 * seek or trim.
 *
 *   seek    the checkpoint set to N (back: replay; forward: skip), the
 *           lease let go under a new epoch.
 *   trim    TrimmedThrough raised to N, so that a reader asking for one of
 *           items 1 .. N hears so instead of waiting; the asker deletes
 *           them after.  Never past the checkpoint, unless forced: then the
 *           checkpoint moves to N as by a seek.
 *   delete  two requests: the first marks the stream DeletingAt and lets
 *           the lease go under a new epoch (refused while it is held,
 *           unless forced); the asker deletes the items and publish ids,
 *           then asks again, and the node goes -- unless it was made anew
 *           meanwhile.
 *
 * A lease let go fences its holder wherever it runs: a holder in this
 * process hears so at once and claims again, one elsewhere when its waker
 * sees the stream unheld; the owner is woken for items waiting.  Each act
 * is logged, and answered with what it found: the checkpoint a seek moved
 * from, the TrimmedThrough a trim raised, a delete's last sequence.
 */
#include "lease.h"
#include "stream_hub.h"

#include <stdio.h>

/* ---- the lease let go --------------------------------------------------- */

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
  next->checkpoint_at = durable__now_ms();
  next->orphaned_at = durable__now_ms();
  return 0;
}

/* The lease was let go: a holder in this process claims again at once; one
 * elsewhere when its waker sees the stream unheld (or at its next ack);
 * the owner is woken for items waiting. */
static void after_let_go(durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  sh->flags &= ~DURABLE__SHUB_WOKEN; /* a new orphan period */
  durable__consumers_lease_gone(sh->mesh, s->ns, s->key, 1);
  if (durable__lease_waiting(s))
    durable__shub_wake_owner(sh);
}

/* Answer an operator's request: done, and what it was before. */
static void answer_was(durable__shub_op_t *op, int64_t was) {
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = 1;
    ans->checkpoint = was;
  }
  durable__shub_answer(op, ans);
}

/* ---- seek --------------------------------------------------------------- */

static void seeked(durable__shub_t *sh, const durable_result_t *res) {
  int64_t was = sh->op_was;
  if (!durable__shub_lease_saved(sh, res, 0))
    return;
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = durable__shub_id(sh);
  char lost[96] = "no item was lost, only acknowledgements";
  if (sh->op_resumed > 1)
    snprintf(lost, sizeof lost,
             "sequences %lld-%lld are lost and never handed out again",
             (long long)s->lost_from, (long long)s->lost_to);
  if (sh->op_resumed)
    durable_mesh_log(sh->mesh, DURABLE_LOG_WARN,
                     "[DurableStreams] %s goes on after the store went back "
                     "(a seek by %s): %s",
                     durable__stream_name(&id).text, op->req->subscriber, lost);
  durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                   "[DurableStreams] %s: checkpoint moved from %lld to %lld by "
                   "%s; the lease is free (epoch %lld), and the next holder "
                   "resumes after %lld",
                   durable__stream_name(&id).text, (long long)was,
                   (long long)s->checkpoint, op->req->subscriber,
                   (long long)s->lease_epoch, (long long)s->checkpoint);
  answer_was(op, was);
  after_let_go(sh);
  durable__shub_next(sh);
}

/* The seek that lets a stream stopped because the store went back (seen.c)
 * go on: the tail raised to what was seen, so that no sequence a producer
 * was told is handed out again (those the store lost are recorded as lost,
 * and readers pass over them), and the epoch above any seen, so that a
 * holder from before the loss is fenced. */
static void resume(const durable__stream_state_t *s,
                   durable__stream_state_t *next) {
  if (s->seen_last > s->last_sequence) {
    next->lost_from = s->last_sequence + 1;
    next->lost_to = s->seen_last;
    next->last_sequence = s->seen_last;
  }
  if (s->seen_epoch >= next->lease_epoch)
    next->lease_epoch = s->seen_epoch + 1;
  next->seen_last = next->seen_checkpoint = next->seen_epoch = 0;
}

/* Seek: the checkpoint set to the request's sequence (back: replay;
 * forward: skip), the lease let go; on a stream stopped because the store
 * went back, the operator's act that lets it go on (resume). */
void durable__shub_seek(durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  int64_t to = durable__shub_head(sh)->req->sequence;
  int64_t last =
      s->seen_last > s->last_sequence ? s->seen_last : s->last_sequence;
  if (durable__shub_refuse_deleting(sh, "sought") ||
      durable__shub_read_again_first(sh, to > last))
    return;
  if (to < 0 || to > last || to < s->trimmed_through) {
    durable_stream_id_t id = durable__shub_id(sh);
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
               durable__stream_name(&id).text, (long long)to, (long long)last);
    durable__shub_fail(sh, DURABLE_EINVAL, message);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(s, &next) < 0) {
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  if (let_go(s, &next, to) < 0) {
    durable__state_free(&next);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  sh->op_was = s->checkpoint;
  /* 2: sequences told to producers were lost, 1: only acknowledgements */
  sh->op_resumed = !durable__state_behind(s)         ? 0
                   : s->seen_last > s->last_sequence ? 2
                                                     : 1;
  if (sh->op_resumed)
    resume(s, &next);
  /* a resume raises the tail too: decided on it */
  durable__shub_write_state(
      sh, DURABLE__PART_LEASE | (sh->op_resumed ? DURABLE__PART_TAIL : 0),
      &next, NULL, 0, NULL, NULL, seeked);
}

/* ---- trim --------------------------------------------------------------- */

static void trimmed(durable__shub_t *sh, const durable_result_t *res) {
  int64_t was = sh->op_was;
  int forced = (sh->flags & DURABLE__SHUB_TRIM_FORCED) != 0;
  if (!durable__shub_lease_saved(sh, res, 0))
    return;
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = durable__shub_id(sh);
  /* retention's trims (Epoch 2) come every few hundred ms on a busy
   * stream: the operator's own are the news */
  durable_mesh_log(
      sh->mesh, op->req->epoch == 2 ? DURABLE_LOG_DEBUG : DURABLE_LOG_INFO,
      "[DurableStreams] %s: items up to %lld trimmed by %s "
      "(checkpoint %lld%s)",
      durable__stream_name(&id).text, (long long)s->trimmed_through,
      op->req->subscriber, (long long)s->checkpoint,
      forced ? ", moved there with the trim: the lease is free" : "");
  answer_was(op, was);
  if (forced)
    after_let_go(sh);
  durable__shub_next(sh);
}

/* Trim: record that items 1 .. N go (TrimmedThrough), so that a reader
 * asking for one hears so instead of waiting; the asker deletes them after.
 * Never past the checkpoint, unless forced (Epoch 1): then the checkpoint
 * moves to N as by a seek. */
void durable__shub_trim(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  int64_t to = op->req->sequence;
  int force = op->req->epoch == 1; /* 2: retention's, never forced */
  if (durable__shub_refuse_deleting(sh, "trimmed") ||
      durable__shub_read_again_first(sh, to > s->last_sequence ||
                                             to > s->checkpoint))
    return;
  durable_stream_id_t id = durable__shub_id(sh);
  char message[sizeof(durable__stream_name_t) + 240];
  if (to < 1 || to > s->last_sequence) {
    snprintf(message, sizeof message,
             "cannot trim %s through %lld: its items are 1 to %lld",
             durable__stream_name(&id).text, (long long)to,
             (long long)s->last_sequence);
    durable__shub_fail(sh, DURABLE_EINVAL, message);
    return;
  }
  if (to > s->checkpoint && !force) {
    snprintf(message, sizeof message,
             "cannot trim %s through %lld: item %lld is not acknowledged "
             "(checkpoint %lld); trimming past the checkpoint needs force",
             durable__stream_name(&id).text, (long long)to,
             (long long)(s->checkpoint + 1), (long long)s->checkpoint);
    durable__shub_fail(sh, DURABLE_EINVAL, message);
    return;
  }
  if (to <= s->trimmed_through && to <= s->checkpoint) {
    /* recorded already: the deletes go on */
    answer_was(op, s->trimmed_through);
    durable__shub_next(sh);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(s, &next) < 0) {
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  int forced = to > s->checkpoint; /* forced: skip to it */
  if (forced)
    sh->flags |= DURABLE__SHUB_TRIM_FORCED;
  else
    sh->flags &= ~DURABLE__SHUB_TRIM_FORCED;
  if (forced && let_go(s, &next, to) < 0) {
    durable__state_free(&next);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  if (to > next.trimmed_through)
    next.trimmed_through = to;
  sh->op_was = s->trimmed_through;
  durable__shub_write_state(sh, DURABLE__PART_LEASE, &next, NULL, 0, NULL, NULL,
                            trimmed);
}

/* ---- delete ------------------------------------------------------------- */

/* Delete, in two requests.  The first marks the stream DeletingAt and lets
 * the lease go with a new epoch (the holder is fenced: its next ack is
 * refused, and its claim again finds the stream being deleted) -- refused
 * while it is held, unless forced; from then on nothing is appended or
 * claimed.  The asker deletes the items and publish ids (operator.c), then
 * asks again (Sequence 1), and the node itself goes: the next publish
 * makes a new stream, from sequence 1. */
static void delete_marked(durable__shub_t *sh, const durable_result_t *res) {
  if (!durable__shub_lease_saved(sh, res, 0))
    return;
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = durable__shub_id(sh);
  durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                   "[DurableStreams] %s: being deleted by %s, with its items "
                   "1 to %lld; the lease is free (epoch %lld)",
                   durable__stream_name(&id).text, op->req->subscriber,
                   (long long)s->last_sequence, (long long)s->lease_epoch);
  answer_was(op, s->last_sequence);
  /* the stream's next life wakes its owner afresh */
  sh->flags &= ~DURABLE__SHUB_WOKEN;
  durable__consumers_lease_gone(sh->mesh, s->ns, s->key, 1);
  durable__shub_next(sh);
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
  durable__shub_t *sh = data;
  if (res->status == DURABLE_ECONFLICT) {
    durable_stream_id_t id = durable__shub_id(sh);
    char message[sizeof(durable__stream_name_t) + 160];
    snprintf(message, sizeof message,
             "durable stream %s was made anew while this delete ran (another "
             "delete finished first): it stays",
             durable__stream_name(&id).text);
    durable__shub_forget_state(sh);
    durable__shub_fail(sh, DURABLE_ECONFLICT, message);
  } else if (res->status < 0 && res->status != DURABLE_ENOTFOUND) {
    durable__shub_fail(sh, res->status, res->message);
  } else {
    durable__shub_op_t *op = durable__shub_head(sh);
    durable_stream_id_t id = durable__shub_id(sh);
    durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                     "[DurableStreams] %s: deleted by %s; a publish makes it "
                     "anew, from sequence 1",
                     durable__stream_name(&id).text, op->req->subscriber);
    answer_was(op, sh->state.last_sequence);
    durable__shub_forget_state(sh);
    sh->flags &= ~DURABLE__SHUB_WOKEN;
    durable__directory_forget(sh->mesh, sh->path);
    durable__shub_next(sh);
  }
  durable_hub_unref(sh->hub);
}

void durable__shub_delete(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = durable__shub_id(sh);
  char message[sizeof(durable__stream_name_t) + DURABLE_PATH_MAX + 200];
  if (op->req->sequence != 0 && op->req->sequence != 1) {
    durable__shub_fail(
        sh, DURABLE_EINVAL,
        "durable.delete's Sequence is its step: 0 marks the stream, 1 "
        "removes its node");
    return;
  }
  if (op->req->sequence == 1 && !op->typed) {
    /* only the runtime's delete knows the items and ids are gone */
    durable__shub_fail(sh, DURABLE_EINVAL,
                       "durable.delete's last step is the runtime's "
                       "(durable_stream_delete)");
    return;
  }
  if (op->req->sequence == 1) { /* the items are gone: the node goes */
    if (s->deleting_at == 0) {
      snprintf(message, sizeof message,
               "durable stream %s is not being deleted",
               durable__stream_name(&id).text);
      durable__shub_fail(sh, DURABLE_EINVAL, message);
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
      durable__shub_fail(sh, err.code, err.message);
    }
    return;
  }
  if (s->deleting_at) { /* begun already: the deletes go on */
    /* ... on the stored state, not one cached before another delete
     * finished and a publish made the stream anew */
    if (durable__shub_read_again_first(sh, 1))
      return;
    answer_was(op, s->last_sequence);
    durable__shub_next(sh);
    return;
  }
  if (s->subscriber && op->req->epoch == 0) {
    /* it may have been released meanwhile */
    if (durable__shub_read_again_first(sh, 1))
      return;
    snprintf(message, sizeof message,
             "durable stream %s is held by %s%s%s%s: deleting it under its "
             "consumer needs force, which fences the consumer first",
             durable__stream_name(&id).text, s->subscriber,
             s->subscriber_instance ? " (process " : "",
             s->subscriber_instance ? s->subscriber_instance : "",
             s->subscriber_instance ? ")" : "");
    durable__shub_fail(sh, DURABLE_ECONFLICT, message);
    return;
  }
  durable__stream_state_t next;
  if (durable__state_copy(s, &next) < 0 ||
      let_go(s, &next, s->checkpoint) < 0) {
    durable__state_free(&next);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  next.deleting_at = durable__now_ms();
  durable__shub_write_state(sh, DURABLE__PART_LEASE, &next, NULL, 0, NULL, NULL,
                            delete_marked);
}

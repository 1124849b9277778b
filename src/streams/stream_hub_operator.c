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
 *           lease let go under a new epoch.  A group trim's seek (Epoch 1)
 *           only ever moves forward: at or past N, nothing is written.
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
#include <stdlib.h>
#include <string.h>

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
  durable__consumers_lease_gone(sh->mesh, s->ns, s->key, sh->group, 1);
  if (sh->group)
    durable__shub_group_changed(sh, 1);
  else if (durable__lease_waiting(s))
    durable__shub_wake_owner(sh);
}

/* Answer an operator's request of `sh`: done, and what it was before (and,
 * for a trim, how far the stream is trimmed now: a sweep goes only as far
 * as every consumer allows). */
static void answer_was(durable__shub_t *sh, durable__shub_op_t *op,
                       int64_t was) {
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = 1;
    ans->checkpoint = was;
    ans->sequence = sh->state.trimmed_through;
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
                   "[DurableStreams] %s%s%s: checkpoint moved from %lld to "
                   "%lld by %s; the lease is free (epoch %lld), and the next "
                   "holder resumes after %lld",
                   durable__stream_name(&id).text, sh->group ? " group " : "",
                   sh->group ? sh->group : "", (long long)was,
                   (long long)s->checkpoint, op->req->subscriber,
                   (long long)s->lease_epoch, (long long)s->checkpoint);
  answer_was(sh, op, was);
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
  /* a group's items are its stream's (read in this turn) */
  const durable__stream_state_t *tail = sh->group ? &sh->parent : s;
  int64_t to = durable__shub_head(sh)->req->sequence;
  int64_t last = tail->seen_last > tail->last_sequence ? tail->seen_last
                                                       : tail->last_sequence;
  if (durable__shub_refuse_deleting(sh, "sought") ||
      durable__shub_read_again_first(sh, to > last))
    return;
  if (durable__shub_head(sh)->req->epoch == 1 && to <= s->checkpoint) {
    /* a group trim's: the group acknowledged N already, and stays -- as
     * stored, not as last read here (another process may have sought it
     * back) */
    if (durable__shub_read_again_first(sh, 1))
      return;
    answer_was(sh, durable__shub_head(sh), s->checkpoint);
    durable__shub_next(sh);
    return;
  }
  if (to < 0 || to > last || to < tail->trimmed_through) {
    durable_stream_id_t id = durable__shub_id(sh);
    char message[sizeof(durable__stream_name_t) + DURABLE_GROUP_MAX + 240];
    char of[DURABLE_GROUP_MAX + 32] = "";
    if (sh->group)
      snprintf(of, sizeof of, " (group %s)", sh->group);
    if (to < tail->trimmed_through)
      snprintf(message, sizeof message,
               "cannot move the checkpoint of %s%s to %lld: items up to %lld "
               "were trimmed",
               durable__stream_name(&id).text, of, (long long)to,
               (long long)tail->trimmed_through);
    else
      snprintf(message, sizeof message,
               "cannot move the checkpoint of %s%s to %lld: its items are 1 "
               "to %lld",
               durable__stream_name(&id).text, of, (long long)to,
               (long long)last);
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

static void detaching_clear(durable__shub_t *sh);
static void detaching_said(durable__shub_t *sh);

static void trimmed(durable__shub_t *sh, const durable_result_t *res) {
  int64_t was = sh->op_was;
  int forced = (sh->flags & DURABLE__SHUB_TRIM_FORCED) != 0;
  /* a detach lost to the group's own write (it acknowledged, was
   * claimed) fails the trim: it is decided again on a fresh read */
  if (res->status < 0)
    detaching_clear(sh);
  if (!durable__shub_lease_saved(sh, res, 0))
    return;
  detaching_said(sh);
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
  answer_was(sh, op, was);
  if (forced)
    after_let_go(sh);
  durable__shub_next(sh);
}

/* ---- what holds a trim back --------------------------------------------- */

/* The stream's own checkpoint pins the stream -- items wait for a consumer
 * that has not come yet -- unless the stream has consumer groups and was
 * never claimed on its own: then it is consumed only in groups, and they
 * pin it. */
static int own_pins(const durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  return s->lease_epoch > 0 || s->checkpoint > 0 || sh->ngroups == 0;
}

/* Why group `g` (its oldest unacknowledged item appended at `oldest_at`,
 * 0: not known) of a stream whose last item is `last` stops pinning now
 * (its declared bounds), in `why`; 0 while it pins. */
static int detach_due(const durable__stream_state_t *g, int64_t oldest_at,
                      int64_t last, int64_t now, char *why, size_t size) {
  int64_t lag = last - g->checkpoint;
  int64_t active = g->checkpoint_at;
  if (g->orphaned_at > active)
    active = g->orphaned_at;
  if (g->subscribed_at > active)
    active = g->subscribed_at;
  if (g->created_at > active)
    active = g->created_at;
  if (lag <= 0 || g->detached_at)
    return 0;
  if (g->detach_items > 0 && lag > g->detach_items) {
    snprintf(why, size, "%lld items behind, more than its bound of %lld",
             (long long)lag, (long long)g->detach_items);
    return 1;
  }
  if (g->detach_age_ms > 0 && oldest_at > 0 &&
      now - oldest_at > g->detach_age_ms) {
    snprintf(why, size,
             "its oldest unacknowledged item is %lld s old, more than its "
             "bound of %lld s",
             (long long)((now - oldest_at) / 1000),
             (long long)(g->detach_age_ms / 1000));
    return 1;
  }
  if (g->subscriber == NULL && g->detach_idle_ms > 0 &&
      now - active > g->detach_idle_ms) {
    snprintf(why, size,
             "idle (no holder, no acknowledgement) for %lld s with %lld "
             "items waiting, more than its bound of %lld s",
             (long long)((now - active) / 1000), (long long)lag,
             (long long)(g->detach_idle_ms / 1000));
    return 1;
  }
  return 0;
}

/* Forget what the trim decided to detach (it wrote nothing, or failed). */
static void detaching_clear(durable__shub_t *sh) {
  for (size_t i = 0; i < sh->ngroups; i++) {
    free(sh->groups[i].detaching);
    sh->groups[i].detaching = NULL;
  }
}

/* The trim's writes that detach the groups it decided to, each a replace
 * at the version listed (one that moved since fails the trim, which is
 * decided again); their contents into `contents` (freed by the caller).
 * The count, or -1 when out of memory. */
static int detach_writes(durable__shub_t *sh, durable_write_t *writes,
                         char **contents, char (*paths)[DURABLE_PATH_MAX + 1]) {
  int n = 0;
  int64_t now = durable__now_ms();
  for (size_t i = 0; i < sh->ngroups; i++) {
    durable__shub_group_t *g = &sh->groups[i];
    durable__stream_state_t next;
    if (g->detaching == NULL)
      continue;
    if (durable__state_copy(&g->state, &next) < 0)
      return -1;
    next.detached_at = now;
    contents[n] = durable__state_encode(&next);
    durable__state_free(&next);
    if (contents[n] == NULL)
      return -1;
    snprintf(paths[n], sizeof paths[n], "%s/" DURABLE__GROUP_SEGMENT "/%s",
             sh->path, g->state.group);
    writes[n] = (durable_write_t){.kind = DURABLE_WRITE_REPLACE,
                                  .path = paths[n],
                                  .node_type = DURABLE__GROUP_TYPE,
                                  .content = contents[n],
                                  .expected_version = g->version};
    n++;
  }
  return n;
}

/* The trim is written: the groups it detached are said. */
static void detaching_said(durable__shub_t *sh) {
  for (size_t i = 0; i < sh->ngroups; i++) {
    durable__shub_group_t *g = &sh->groups[i];
    if (g->detaching == NULL)
      continue;
    durable_mesh_log(sh->mesh, DURABLE_LOG_WARN,
                     "[DurableStreams] %s@%s group %s DETACHED: %s; it no "
                     "longer holds trims back and keeps its checkpoint %lld "
                     "(claimed again before a trim passes it, it pins "
                     "again; behind a trim it stops with what to do)",
                     g->state.ns, g->state.key, g->state.group, g->detaching,
                     (long long)g->state.checkpoint);
    g->state.detached_at = durable__now_ms();
    g->version = 0; /* written: the next listing has its version */
    durable__stream_count(sh->mesh, g->state.ns, g->state.key, g->state.group,
                          DURABLE__COUNT_DETACHED, 1);
  }
  detaching_clear(sh);
}

/* The highest sequence a trim may reach without passing what a consumer
 * has not acknowledged: the stream's own checkpoint (once it had a
 * consumer) and every attached group's; the last sequence when nothing
 * pins.  `who` names what holds it there.  The groups past their detach
 * bounds -- and with `passing`, those a forced trim through it goes past
 * -- do not pin: the trim detaches them in its transaction (`detaching`). */
static int64_t trim_pin(durable__shub_t *sh, int64_t passing, char *who,
                        size_t size) {
  const durable__stream_state_t *s = &sh->state;
  int64_t pin = INT64_MAX, now = durable__now_ms();
  snprintf(who, size, "nothing");
  if (own_pins(sh)) {
    pin = s->checkpoint;
    snprintf(who, size, "checkpoint %lld", (long long)s->checkpoint);
  }
  for (size_t i = 0; i < sh->ngroups; i++) {
    durable__shub_group_t *g = &sh->groups[i];
    char why[200];
    if (g->state.detached_at)
      continue;
    if (detach_due(&g->state, g->oldest_at, s->last_sequence, now, why,
                   sizeof why) ||
        (passing > g->state.checkpoint &&
         snprintf(why, sizeof why, "a forced trim through %lld passed it",
                  (long long)passing) > 0)) {
      char *d = strdup(why);
      if (d != NULL) { /* (no memory to say why: it pins this time) */
        free(g->detaching);
        g->detaching = d;
        continue;
      }
    }
    if (g->state.checkpoint < pin) {
      pin = g->state.checkpoint;
      snprintf(who, size, "group %s's checkpoint %lld", g->state.group,
               (long long)pin);
    }
  }
  return pin == INT64_MAX ? s->last_sequence : pin;
}

/* The groups read for this turn (a trim, a delete): on with it. */
static void read_groups_then_run(durable__shub_t *sh, int status,
                                 const char *message) {
  if (status < 0) {
    durable__shub_retry(sh, status, message);
    return;
  }
  sh->flags |= DURABLE__SHUB_PARENT_READ; /* read for this turn */
  sh->run(sh);
}

/* Trim: record that items 1 .. N go (TrimmedThrough), so that a reader
 * asking for one hears so instead of waiting; the asker deletes them after.
 * Never past what a consumer has not acknowledged -- the stream's own
 * checkpoint and each attached group's (read afresh) -- unless forced
 * (Epoch 1): then the stream's own checkpoint moves to N as by a seek, and
 * the groups behind are detached.  Retention's sweep (Epoch 2) trims as far
 * as they allow. */
void durable__shub_trim(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  int64_t to = op->req->sequence;
  int force = op->req->epoch == 1; /* 2: retention's, never forced */
  if (!(sh->flags & DURABLE__SHUB_PARENT_READ)) {
    durable__shub_groups_read(sh, 1, read_groups_then_run);
    return;
  }
  char who[DURABLE_GROUP_MAX + 80];
  int64_t pin = trim_pin(sh, force ? to : 0, who, sizeof who);
  if (op->req->epoch == 2 && to > pin)
    to = pin; /* as far as every consumer allows */
  if (durable__shub_refuse_deleting(sh, "trimmed") ||
      durable__shub_read_again_first(sh, to > s->last_sequence || to > pin)) {
    detaching_clear(sh);
    return;
  }
  durable_stream_id_t id = durable__shub_id(sh);
  char message[sizeof(durable__stream_name_t) + sizeof who + 240];
  int forced = own_pins(sh) && to > s->checkpoint; /* forced: skip to it */
  if (to < 1 || to > s->last_sequence) {
    snprintf(message, sizeof message,
             "cannot trim %s through %lld: its items are 1 to %lld",
             durable__stream_name(&id).text, (long long)to,
             (long long)s->last_sequence);
    detaching_clear(sh);
    durable__shub_fail(sh, DURABLE_EINVAL, message);
    return;
  }
  if (to > pin && !force) {
    snprintf(message, sizeof message,
             "cannot trim %s through %lld: item %lld is not acknowledged "
             "(%s); trimming past the checkpoint needs force",
             durable__stream_name(&id).text, (long long)to,
             (long long)(pin + 1), who);
    detaching_clear(sh);
    durable__shub_fail(sh, DURABLE_EINVAL, message);
    return;
  }
  if (to <= s->trimmed_through && !forced) {
    /* recorded already (or, for retention, nothing more is due): the
     * deletes go on; nothing is detached for a trim that moves nothing */
    detaching_clear(sh);
    answer_was(sh, op, s->trimmed_through);
    durable__shub_next(sh);
    return;
  }
  durable__stream_state_t next;
  durable_write_t *writes = calloc(sh->ngroups + 1, sizeof(*writes));
  char **contents = calloc(sh->ngroups + 1, sizeof(char *));
  char(*paths)[DURABLE_PATH_MAX + 1] = calloc(sh->ngroups + 1, sizeof(*paths));
  int n = writes && contents && paths
              ? detach_writes(sh, writes, contents, paths)
              : -1;
  if (n < 0 || durable__state_copy(s, &next) < 0) {
    n = n < 0 ? 0 : n;
    detaching_clear(sh);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
  } else if (forced && let_go(s, &next, to) < 0) {
    durable__state_free(&next);
    detaching_clear(sh);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
  } else {
    if (forced)
      sh->flags |= DURABLE__SHUB_TRIM_FORCED;
    else
      sh->flags &= ~DURABLE__SHUB_TRIM_FORCED;
    if (to > next.trimmed_through)
      next.trimmed_through = to;
    sh->op_was = s->trimmed_through;
    /* the groups detached in the same transaction: all or nothing */
    durable__shub_write_state(sh, DURABLE__PART_LEASE, &next, writes, (size_t)n,
                              NULL, NULL, trimmed);
  }
  for (int k = 0; contents && k < n; k++)
    free(contents[k]);
  free(contents);
  free(paths);
  free(writes);
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
  answer_was(sh, op, s->last_sequence);
  /* the stream's next life wakes its owner afresh; its consumers, of every
   * group, claim again and find it being deleted */
  sh->flags &= ~DURABLE__SHUB_WOKEN;
  durable__consumers_lease_gone(sh->mesh, s->ns, s->key, NULL, 1);
  for (size_t i = 0; i < sh->ngroups; i++)
    durable__consumers_lease_gone(sh->mesh, s->ns, s->key,
                                  sh->groups[i].state.group, 1);
  durable__shub_groups_free(sh);
  sh->flags &= ~DURABLE__SHUB_GROUPS_LISTED;
  durable__shub_next(sh);
}

/* The last step's check, in the delete's transaction (writer thread):
 * the node is still the one marked DeletingAt at `arg`, not a new stream
 * made after another delete finished; it writes nothing itself. */
static int marked_holds(const durable__stream_state_t *cur, const void *arg) {
  return cur->deleting_at != 0 && cur->deleting_at == *(const int64_t *)arg;
}

static int still_deleting(const durable_node_t *current, char **content,
                          char **node_type, void *arg) {
  (void)content;
  (void)node_type;
  return durable__state_holds(current, marked_holds, arg);
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
    answer_was(sh, op, sh->state.last_sequence);
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
    durable__shub_delete_node(sh, still_deleting, on_node_deleted);
    return;
  }
  if (s->deleting_at) { /* begun already: the deletes go on */
    /* ... on the stored state, not one cached before another delete
     * finished and a publish made the stream anew */
    if (durable__shub_read_again_first(sh, 1))
      return;
    answer_was(sh, op, s->last_sequence);
    durable__shub_next(sh);
    return;
  }
  if (!(sh->flags & DURABLE__SHUB_PARENT_READ)) {
    durable__shub_groups_read(sh, 0, read_groups_then_run); /* its groups too */
    return;
  }
  /* the stream's own holder, or a group's: refused unless forced */
  const durable__stream_state_t *held = s->subscriber ? s : NULL;
  for (size_t i = 0; held == NULL && i < sh->ngroups; i++)
    if (sh->groups[i].state.subscriber)
      held = &sh->groups[i].state;
  if (held && op->req->epoch == 0) {
    /* it may have been released meanwhile */
    if (durable__shub_read_again_first(sh, 1))
      return;
    char group[DURABLE_GROUP_MAX + 16] = "";
    if (held->group)
      snprintf(group, sizeof group, " (group %s)", held->group);
    snprintf(message, sizeof message,
             "durable stream %s is held by %s%s%s%s%s: deleting it under its "
             "consumer needs force, which fences the consumer first",
             durable__stream_name(&id).text, held->subscriber,
             held->subscriber_instance ? " (process " : "",
             held->subscriber_instance ? held->subscriber_instance : "",
             held->subscriber_instance ? ")" : "", group);
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
  /* every group's lease let go in the same transaction (a new epoch, at
   * the version listed: one that moved meanwhile fails it, and it is
   * decided again), so that a holder anywhere, and a claim decided before
   * the mark, is fenced and, claiming again, finds the stream being
   * deleted */
  size_t n = 0;
  durable_write_t *extra = calloc(sh->ngroups + 1, sizeof(*extra));
  char **contents = calloc(sh->ngroups + 1, sizeof(char *));
  char(*paths)[DURABLE_PATH_MAX + 1] = calloc(sh->ngroups + 1, sizeof(*paths));
  int ok = extra && contents && paths;
  for (size_t i = 0; ok && i < sh->ngroups; i++) {
    /* held or not: a new epoch fences a claim decided before the mark */
    const durable__stream_state_t *g = &sh->groups[i].state;
    durable__stream_state_t gone;
    ok = durable__state_copy(g, &gone) == 0;
    if (ok && let_go(g, &gone, g->checkpoint) == 0)
      contents[n] = durable__state_encode(&gone);
    if (ok)
      durable__state_free(&gone);
    ok = ok && contents[n] != NULL;
    snprintf(paths[n], sizeof paths[n], "%s/" DURABLE__GROUP_SEGMENT "/%s",
             sh->path, g->group);
    extra[n] = (durable_write_t){.kind = DURABLE_WRITE_REPLACE,
                                 .path = paths[n],
                                 .node_type = DURABLE__GROUP_TYPE,
                                 .content = contents[n],
                                 .expected_version = sh->groups[i].version};
    n++;
  }
  if (!ok) {
    durable__state_free(&next);
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
  } else {
    durable__shub_write_state(sh, DURABLE__PART_LEASE, &next, extra, n, NULL,
                              NULL, delete_marked);
  }
  for (size_t i = 0; contents && i < n; i++)
    free(contents[i]);
  free(contents);
  free(paths);
  free(extra);
}

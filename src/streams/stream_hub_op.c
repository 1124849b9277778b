/*
 * stream_hub_op.c: how an operation of a stream hub's chain ends, whichever
 * file runs it -- answered in the form it was asked in, failed, or decided
 * again on a fresh read -- and the turn passes to the next one.
 *
 * An operation is answered once: a typed request (this process's producers
 * and consumers) with a typed body, a JSON one in JSON.  A compare-and-set
 * lost, or a request beyond the tail or checkpoint this hub last read (the
 * stored ones may have moved: another process appends and acknowledges),
 * makes the hub read its node again and decide again, a bounded number of
 * times, before the operation fails.  After an operation that leaves items
 * nobody holds, the owner is woken, once per orphan period.
 *
 * The chain's engine is stream_hub.c's, which calls this file: the end of a
 * turn reaches it through sh->pump, not by name, so that the arrows between
 * the files point one way.
 */
#include "stream_hub.h"

#include <stdio.h>
#include <stdlib.h>

/* Compare-and-set retries before an operation is reported failed. */
#define MAX_ATTEMPTS 8

const char durable__shub_key;

durable__shub_t *durable__shub_of(durable_hub_t *hub) {
  return durable__hub_attached(hub, &durable__shub_key);
}

void durable__shub_op_free(durable__shub_op_t *op) {
  durable__body_free(op->req ? &op->req->base : NULL);
  free(op->reason);
  free(op);
}

durable__shub_op_t *durable__shub_pop(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  if (op)
    durable__queue_remove(&op->link);
  return op;
}

durable_stream_id_t durable__shub_id(const durable__shub_t *sh) {
  return (durable_stream_id_t){.ns = sh->state.ns, .key = sh->state.key};
}

/* ---- answers ------------------------------------------------------------ */

void durable__shub_answer(durable__shub_op_t *op, durable__stream_ans_t *ans) {
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

void durable__shub_answer_ok(durable__shub_op_t *op, int ok,
                             const char *reason) {
  durable__stream_ans_t *ans = durable__stream_ans_new();
  if (ans) {
    ans->ok = ok;
    if (durable__stream_ans_set(&ans->reason, reason) < 0) {
      durable__body_free(&ans->base);
      ans = NULL;
    }
  }
  durable__shub_answer(op, ans);
}

void durable__shub_answer_seq(durable__shub_op_t *op, int64_t seq) {
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
  durable__shub_answer(op, ans);
}

/* ---- the end of a turn -------------------------------------------------- */

void durable__shub_go_on(durable__shub_t *sh) {
  sh->flags &= ~(DURABLE__SHUB_BUSY | DURABLE__SHUB_PARENT_READ);
  sh->pump(sh);
}

void durable__shub_next(durable__shub_t *sh) {
  durable__shub_op_free(durable__shub_pop(sh));
  durable__shub_go_on(sh);
}

void durable__shub_fail(durable__shub_t *sh, int code, const char *message) {
  durable_reply_fail(durable__shub_head(sh)->reply, code, message);
  durable__shub_next(sh);
}

void durable__shub_retry(durable__shub_t *sh, int code, const char *message) {
  durable__shub_forget_state(sh);
  if (++durable__shub_head(sh)->attempts >= MAX_ATTEMPTS) {
    durable__shub_fail(sh, code, message);
    return;
  }
  durable__shub_go_on(sh);
}

int durable__shub_read_again_first(durable__shub_t *sh, int beyond) {
  if (!beyond || durable__shub_head(sh)->attempts > 0)
    return 0;
  durable__shub_retry(sh, DURABLE_EINVAL, "read again");
  return 1;
}

int durable__shub_refuse_deleting(durable__shub_t *sh, const char *what) {
  if (sh->state.deleting_at == 0)
    return 0;
  if (durable__shub_read_again_first(sh, 1))
    return 1;
  durable_stream_id_t id = durable__shub_id(sh);
  char message[sizeof(durable__stream_name_t) + 160];
  snprintf(message, sizeof message,
           "durable stream %s is being deleted (durable delete-stream): it "
           "cannot be %s until that has finished",
           durable__stream_name(&id).text, what);
  durable__shub_fail(sh, DURABLE_ENOTFOUND, message);
  return 1;
}

void durable__shub_behind_says(durable__shub_t *sh, const char *what, char *out,
                               size_t size) {
  const durable__stream_state_t *s = &sh->state;
  durable_stream_id_t id = durable__shub_id(sh);
  int64_t last =
      s->seen_last > s->last_sequence ? s->seen_last : s->last_sequence;
  int64_t to =
      s->seen_checkpoint > s->checkpoint ? s->seen_checkpoint : s->checkpoint;
  char lost[96] = "", acked[120] = "";
  if (s->seen_last > s->last_sequence)
    snprintf(lost, sizeof lost, "; sequences %lld-%lld were told to producers",
             (long long)s->last_sequence + 1, (long long)s->seen_last);
  if (s->seen_checkpoint > s->checkpoint)
    snprintf(acked, sizeof acked,
             "; items %lld-%lld were acknowledged, the store says %lld",
             (long long)s->checkpoint + 1, (long long)s->seen_checkpoint,
             (long long)s->checkpoint);
  snprintf(out, size,
           "durable stream %s is stopped: the store is behind what a process "
           "saw of it (a failover to a standby that had not received every "
           "commit?): last sequence %lld seen, %lld stored%s%s%s%s; once you "
           "have looked, `durable seek %s %s --to %lld` goes on after the "
           "last item acknowledged (the sequences lost are never handed out "
           "again)",
           durable__stream_name(&id).text, (long long)s->seen_last,
           (long long)s->last_sequence, lost, acked,
           what ? "; it cannot be " : "", what ? what : "", id.ns, id.key,
           (long long)(to < last ? to : last));
}

int durable__shub_refuse_behind(durable__shub_t *sh, const char *what) {
  if (!durable__state_behind(&sh->state))
    return 0;
  if (durable__shub_read_again_first(sh, 1))
    return 1; /* an operator's seek elsewhere may have let it go on */
  char message[sizeof(durable__stream_name_t) * 2 + 600];
  durable__shub_behind_says(sh, what, message, sizeof message);
  durable__shub_fail(sh, DURABLE_EIO, message);
  return 1;
}

int durable__shub_lease_saved(durable__shub_t *sh, const durable_result_t *res,
                              int retry_absent) {
  if (res->status == DURABLE_ECONFLICT ||
      (retry_absent && res->status == DURABLE_ENOTFOUND))
    durable__shub_retry(sh, res->status, res->message);
  else if (res->status < 0)
    durable__shub_fail(sh, res->status, res->message);
  return res->status >= 0;
}

void durable__shub_delete_node(durable__shub_t *sh, durable_mutate_cb check,
                               durable_done_cb then) {
  durable_write_t del[2] = {{.kind = DURABLE_WRITE_MUTATE,
                             .path = sh->path,
                             .mutate = check,
                             .mutate_arg = &sh->op_was},
                            {.kind = DURABLE_WRITE_DELETE, .path = sh->path}};
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  if (durable_store_write(durable_mesh_store(sh->mesh), del, 2, then, sh,
                          &err) < 0) {
    durable_hub_unref(sh->hub);
    durable__shub_fail(sh, err.code, err.message);
  }
}

/* ---- wake the owner ----------------------------------------------------- */

static void on_woken(durable__wake_outcome_t outcome, void *data) {
  durable__shub_t *sh = data;
  sh->flags &= ~DURABLE__SHUB_WAKING;
  /* once per orphan period; an owner that could not be read is tried
   * again at the next append */
  if (outcome != DURABLE__WAKE_UNAVAILABLE && outcome != DURABLE__WAKE_LEAVING)
    sh->flags |= DURABLE__SHUB_WOKEN;
  durable_hub_unref(sh->hub);
}

void durable__shub_wake_owner(durable__shub_t *sh) {
  if (sh->flags & (DURABLE__SHUB_WAKING | DURABLE__SHUB_WOKEN))
    return; /* once per orphan period */
  if (sh->mesh->closing)
    return; /* the next host to start wakes it */
  sh->flags |= DURABLE__SHUB_WAKING;
  durable_hub_ref(sh->hub);
  durable_stream_id_t id = durable__shub_id(sh);
  if (durable__wake_owner(sh->mesh, &id, sh->group, on_woken, sh) < 0) {
    sh->flags &= ~DURABLE__SHUB_WAKING;
    durable_hub_unref(sh->hub);
  }
}

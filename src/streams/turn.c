/*
 * turn.c: one item's turn in the leased consumer (consumer.c), and the
 * appends that follow its acknowledgement.
 *
 * The consumer hands an item over by sending its own hub a request, the
 * turn: its handler (here) runs the user's handler on the hub's loop, so
 * that the recycle's quiesce waits for the item like any pending request.
 * When the handler is done, its effects -- its writes, and an outbox node
 * per append it recorded -- are committed with the acknowledgement, which
 * goes out from the read-issuing hub under the lease; only then is the turn
 * answered, and the answer (consumer.c's on_turn_done) says how it went.
 * The appends are made once committed, one box at a time and in order;
 * after a failure none is made until the next claim has made what is left
 * (outbox.c), and the consumer hears of it through c->append_failed.
 */
#include "consumer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the appends of acknowledged items ----------------------------------- */

/* A box of appends waiting on c->outq for the boxes before it. */
typedef struct {
  struct durable__queue link; /* in c->outq */
  durable__outbox_t *box;
} outq_t;

static void outq_next(durable__consumer_t *c);

void durable__consumer_appends_drop(durable__consumer_t *c) {
  struct durable__queue *l;
  while ((l = durable__queue_pop(&c->outq)) != NULL) {
    outq_t *q = DURABLE__QUEUE_DATA(l, outq_t, link);
    durable__outbox_free(q->box); /* its nodes stay: the next claim */
    free(q);
  }
}

static void on_box_sent(int status, const char *message, void *data) {
  durable__consumer_t *c = data;
  c->flags &= ~DURABLE__CONSUMER_OUTQ_SENDING;
  if (status < 0) {
    /* what is left goes out, in order, after the next claim */
    c->flags |= DURABLE__CONSUMER_OUTQ_BLOCKED;
    durable__consumer_appends_drop(c);
    c->append_failed(c, status, message);
  } else {
    outq_next(c);
  }
  durable_hub_unref(c->hub);
}

static void outq_next(durable__consumer_t *c) {
  if (c->flags & DURABLE__CONSUMER_OUTQ_SENDING)
    return;
  struct durable__queue *l = durable__queue_pop(&c->outq);
  if (l == NULL)
    return;
  outq_t *q = DURABLE__QUEUE_DATA(l, outq_t, link);
  c->flags |= DURABLE__CONSUMER_OUTQ_SENDING;
  durable_hub_ref(c->hub);
  durable__outbox_t *box = q->box;
  free(q);
  durable__outbox_send(box, on_box_sent, c);
}

void durable__consumer_append(durable__consumer_t *c, durable__outbox_t *box) {
  if (box == NULL)
    return;
  outq_t *q =
      (c->flags & DURABLE__CONSUMER_OUTQ_BLOCKED) ? NULL : malloc(sizeof(*q));
  if (q == NULL) { /* blocked (or no memory): the next claim makes them */
    durable__outbox_free(box);
    return;
  }
  q->box = box;
  durable__queue_insert_tail(&c->outq, &q->link);
  outq_next(c);
}

/* ---- the acknowledgement ------------------------------------------------- */

static int effects_refused(int code) {
  return code == DURABLE_EEXIST || code == DURABLE_ENOTFOUND ||
         code == DURABLE_EACCES || code == DURABLE_EINVAL;
}

static void on_ack(const durable_response_t *res, void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  durable__stream_name_t n;
  if (res->status < 0) {
    char m[1024];
    snprintf(m, sizeof m, "the acknowledgement of item %lld failed: %s",
             (long long)a->seq, res->message);
    /* effects the store refused for what they are count against the item
     * (a create of a present node, a write the principal may not make);
     * the store's own failures do not (a lost connection, a conflict with
     * another writer that a retry decides anew) */
    if (effects_refused(res->status))
      c->flags &= ~DURABLE__CONSUMER_TURN_ACK_FAILED;
    else
      c->flags |= DURABLE__CONSUMER_TURN_ACK_FAILED;
    durable_reply_fail(a->turn, DURABLE_EFAILED, m);
  } else {
    const durable__stream_ans_t *ans = durable__stream_answer(res);
    if (ans && ans->ok) {
      /* committed: now the appends it recorded (in order, each once) */
      durable__consumer_append(c, a->outbox);
      a->outbox = NULL;
      durable__stream_count(c->mesh, c->ns, c->key, DURABLE__COUNT_HANDLED, 1);
      durable_reply_ok(a->turn, NULL);
    } else {
      char m[2048];
      snprintf(m, sizeof m,
               "Durable stream %s: the acknowledgement of item %lld was "
               "refused — %s",
               durable__consumer_name(c, &n), (long long)a->seq,
               ans && ans->reason ? ans->reason : "no answer");
      durable_reply_fail(a->turn, DURABLE_ECONFLICT, m); /* fenced */
    }
  }
  durable__outbox_free(a->outbox); /* not written: nothing to make */
  durable_hub_unref(c->hub);
  free(a);
}

static void send_ack(durable__consumer_t *c, durable__consumer_ask_t *a,
                     durable__write_set_t *effects);
static void on_appends_allowed(int status, const char *message, void *data);

static void on_handler_done(durable_hub_t *hub, int status, const char *payload,
                            const char *message, durable__commit_t *commit,
                            void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  (void)hub;
  (void)payload;
  durable__stream_name_t n;
  if (status < 0) {
    char m[2048];
    /* the turn fails EFAILED whatever the handler said (ECONFLICT there
     * means a lost lease); the handler's own code stays in the message */
    snprintf(m, sizeof m, "Durable stream %s item %lld failed (%s): %s",
             durable__consumer_name(c, &n), (long long)a->seq,
             durable_err_name(status),
             message ? message : durable_strerror(status));
    durable_reply_fail(a->turn, DURABLE_EFAILED, m);
    durable__commit_free(commit);
    free(a);
    return;
  }
  /* the item's effects: its writes, and an outbox node per append */
  durable_error_t err = {0};
  durable__write_set_t *effects = NULL;
  if (commit && commit->npublishes > 0) {
    effects = durable__outbox_writes(hub, c->key, commit, &a->outbox, &err);
    if (effects == NULL) {
      char m[2048];
      snprintf(m, sizeof m, "Durable stream %s item %lld: %s",
               durable__consumer_name(c, &n), (long long)a->seq, err.message);
      durable__commit_free(commit);
      durable_reply_fail(a->turn, DURABLE_EFAILED, m);
      free(a);
      return;
    }
  } else if (commit) {
    effects = commit->writes;
    commit->writes = NULL;
  }
  durable__commit_free(commit);
  if (a->outbox && durable_mesh_principal(c->mesh) != NULL) {
    /* the appends are made after the commit: may the principal make them?
     * asked first, so that a refusal fails the item, not the append */
    a->effects = effects;
    durable__outbox_check(a->outbox, on_appends_allowed, a);
    return;
  }
  send_ack(c, a, effects);
}

/* done: acknowledge from the read-issuing hub (this hub may be quiescing),
 * with the item's effects if it has any, and only then answer the turn */
static void send_ack(durable__consumer_t *c, durable__consumer_ask_t *a,
                     durable__write_set_t *effects) {
  durable_error_t err = {0};
  if (durable__consumer_ask(c, DURABLE__MSG_ACK, c->epoch, a->seq, effects,
                            on_ack, a, &err) < 0) {
    durable_reply_fail(a->turn, DURABLE_EFAILED, err.message);
    durable__outbox_free(a->outbox);
    free(a);
  }
}

static void on_appends_allowed(int status, const char *message, void *data) {
  durable__consumer_ask_t *a = data;
  durable__write_set_t *effects = a->effects;
  a->effects = NULL;
  if (status < 0) {
    char m[2048];
    durable__stream_name_t n;
    snprintf(m, sizeof m, "Durable stream %s item %lld: %s",
             durable__consumer_name(a->c, &n), (long long)a->seq, message);
    free(effects);
    durable__outbox_free(a->outbox);
    durable_reply_fail(a->turn, DURABLE_EFAILED, m);
    free(a);
    return;
  }
  send_ack(a->c, a, effects);
}

/* ---- the turn (runs as a message of the hub) ----------------------------- */

void durable__consumer_turn(durable_hub_t *hub, const durable_msg_t *msg,
                            durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  long long seq = 0; /* the turn on_pulled sent itself */
  if (sscanf(msg->payload, "{\"Sequence\":%lld}", &seq) != 1)
    seq = 0;
  if (c->turn_node == NULL || seq != c->turn_seq) {
    char m[DURABLE_PATH_MAX + 80];
    snprintf(m, sizeof m,
             "durable stream turn %s#%lld arrived without its item", c->ns,
             (long long)seq);
    durable_reply_fail(reply, DURABLE_EFAILED, m);
    return;
  }
  if (!durable__store_live(durable_mesh_store(c->mesh))) {
    /* cut off from the store, maybe: another process may hold the lease by
     * now, so this item is not handed over (on_turn_done waits) */
    c->flags |= DURABLE__CONSUMER_TURN_FENCED;
    durable_reply_fail(reply, DURABLE_EUNAVAIL, "liveness not confirmed");
    return;
  }
  durable__consumer_ask_t *a = calloc(1, sizeof(*a));
  durable_reply_t *done =
      a ? durable__reply_callback(hub, on_handler_done, a) : NULL;
  if (done == NULL) {
    free(a);
    durable_reply_fail(reply, DURABLE_ENOMEM, "out of memory");
    return;
  }
  a->c = c;
  a->seq = seq;
  a->turn = reply;
  durable_item_t item = {.stream = durable__consumer_id(c),
                         .sequence = seq,
                         .payload = c->turn_payload,
                         .appended_at = c->turn_appended_at,
                         .node = c->turn_node};
  durable_mesh_log(c->mesh, DURABLE_LOG_DEBUG,
                   "Durable stream consumer %s: item %lld of %s",
                   durable__consumer_hub_name(c), (long long)seq, c->ns);
  durable__stream_handed(c->mesh, c->ns, c->key, seq);
  c->cfg.handler(hub, &item, done, c->cfg.data);
}

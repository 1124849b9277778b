/*
 * turn.c: one turn of the leased consumer (consumer.c) -- an item, or a
 * batch of consecutive items for a batch handler -- and the appends that
 * follow its acknowledgement.
 *
 * The consumer hands items over by sending its own hub a request, the
 * turn: its handler (here) runs the user's handler on the hub's loop, so
 * that the recycle's quiesce waits for the items like any pending request.
 * When the handler is done, its effects -- its writes, and an outbox node
 * per append it recorded -- are committed with the acknowledgement of the
 * turn's last item, in one transaction, which goes out from the
 * read-issuing hub under the lease; only then is the turn answered, and
 * the answer (consumer.c's on_turn_done) says how it went.  A batch's
 * failure may name its item (durable_reply_fail_at): c->turn_failed_at.
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
  char items[64];
  durable__consumer_turn_items(c, items, sizeof items);
  if (res->status < 0) {
    char m[1024];
    snprintf(m, sizeof m, "the acknowledgement of %s failed: %s", items,
             res->message);
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
      durable__stream_count(c->mesh, c->ns, c->key, c->group,
                            DURABLE__COUNT_HANDLED, c->nturn);
      if (durable__consumer_batches(c))
        durable__stream_count(c->mesh, c->ns, c->key, c->group,
                              DURABLE__COUNT_BATCHES, 1);
      durable_reply_ok(a->turn, NULL);
    } else {
      char m[2048];
      snprintf(m, sizeof m,
               "Durable stream %s: the acknowledgement of %s was refused — %s",
               durable__consumer_name(c, &n), items,
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
  char items[64];
  durable__consumer_turn_items(c, items, sizeof items);
  if (status < 0) {
    char m[2048], at[64] = "";
    /* a batch's failure may name its item (durable_reply_fail_at) */
    int64_t failed_at = payload ? strtoll(payload, NULL, 10) : 0;
    c->turn_failed_at = 0;
    if (c->nturn > 1 && failed_at >= c->turn[0].seq &&
        failed_at <= c->turn[c->nturn - 1].seq) {
      c->turn_failed_at = failed_at;
      snprintf(at, sizeof at, " at item %lld", (long long)failed_at);
    }
    /* the turn fails EFAILED whatever the handler said (ECONFLICT there
     * means a lost lease); the handler's own code stays in the message */
    snprintf(m, sizeof m, "Durable stream %s %s failed%s (%s): %s",
             durable__consumer_name(c, &n), items, at, durable_err_name(status),
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
      snprintf(m, sizeof m, "Durable stream %s %s: %s",
               durable__consumer_name(c, &n), items, err.message);
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
  if (durable__consumer_ask(c, DURABLE__MSG_ACK, c->turn_epoch, a->seq, effects,
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
    char m[2048], items[64];
    durable__stream_name_t n;
    durable__consumer_turn_items(a->c, items, sizeof items);
    snprintf(m, sizeof m, "Durable stream %s %s: %s",
             durable__consumer_name(a->c, &n), items, message);
    free(effects);
    durable__outbox_free(a->outbox);
    durable_reply_fail(a->turn, DURABLE_EFAILED, m);
    free(a);
    return;
  }
  send_ack(a->c, a, effects);
}

/* ---- making a turn ------------------------------------------------------- */

/* A turn lasts as long as its handler: no timeout of its own. */
#define TURN_TIMEOUT_MS (24u * 3600u * 1000u)

static void on_pulled(durable__pull_t *pull, int status,
                      const durable_item_t *item, const char *message,
                      void *data);

static void turn_item_free(durable__turn_item_t *t) {
  durable_node_free(t->node);
  free(t->payload);
  *t = (durable__turn_item_t){0};
}

void durable__consumer_turn_clear(durable__consumer_t *c) {
  for (size_t i = 0; i < c->nturn; i++)
    turn_item_free(&c->turn[i]);
  c->nturn = 0;
  c->turn_bytes = 0;
  c->flags &= ~(DURABLE__CONSUMER_TURN_OUT | DURABLE__CONSUMER_GATHERING);
}

void durable__consumer_turn_drop(durable__consumer_t *c) {
  turn_item_free(&c->carry);
  if (!(c->flags & DURABLE__CONSUMER_TURN_OUT))
    durable__consumer_turn_clear(c);
}

static void on_turn_back(const durable_response_t *res, void *data) {
  durable__consumer_ask_t *a = data;
  durable__consumer_t *c = a->c;
  uint64_t gen = a->gen;
  free(a);
  c->turn_back(c, res, gen);
}

/* Hand the turn's items over: a request to itself, so that the handler
 * runs as a turn of this hub and the recycle's quiesce waits for it like
 * any pending request. */
static void send_turn(durable__consumer_t *c) {
  c->flags &= ~DURABLE__CONSUMER_GATHERING;
  c->flags |= DURABLE__CONSUMER_TURN_OUT;
  c->turn_epoch = c->epoch;
  int64_t first = c->turn[0].seq;
  durable__consumer_ask_t *a = calloc(1, sizeof(*a));
  char payload[48];
  snprintf(payload, sizeof payload, "{\"Sequence\":%lld}", (long long)first);
  durable_error_t err = {0};
  if (a != NULL) {
    a->c = c;
    a->gen = c->gen;
    a->seq = c->turn[c->nturn - 1].seq;
    if (durable_hub_request(c->hub, durable_hub_address(c->hub), c->msg_turn,
                            payload, TURN_TIMEOUT_MS, on_turn_back, a,
                            &err) == 0)
      return;
  }
  const char *why = a ? err.message : "out of memory";
  free(a);
  durable__consumer_turn_clear(c);
  if (!durable__consumer_leaving(c))
    c->no_turn(c, first, 0, why);
}

/* May one more item join the batch being gathered?  Not without a batch
 * handler, not past its bounds, and never into (or from) the items handed
 * over alone. */
static int batch_open(const durable__consumer_t *c) {
  if (!durable__consumer_batches(c) || c->nturn == 0)
    return 0;
  int64_t first = c->turn[0].seq, next = c->turn[c->nturn - 1].seq + 1;
  if (c->alone_to > 0 && ((first >= c->alone_from && first <= c->alone_to) ||
                          (next >= c->alone_from && next <= c->alone_to)))
    return 0;
  if (c->nturn >= c->cfg.batch.items)
    return 0;
  return c->cfg.batch.bytes == 0 || c->turn_bytes < c->cfg.batch.bytes;
}

/* Take a copy of `item` into `t`: 0, or DURABLE_ENOMEM with nothing kept. */
static int take(durable__turn_item_t *t, const durable_item_t *item) {
  *t = (durable__turn_item_t){.seq = item->sequence,
                              .node = durable_node_dup(item->node),
                              .payload = strdup(item->payload),
                              .appended_at = item->appended_at};
  if (t->node != NULL && t->payload != NULL)
    return 0;
  turn_item_free(t);
  return DURABLE_ENOMEM;
}

/* Add an item to the turn being made (taken: `t` is emptied). */
static int turn_add(durable__consumer_t *c, durable__turn_item_t *t) {
  if (c->nturn == c->turn_cap) {
    size_t cap = c->turn_cap ? c->turn_cap * 2 : 1;
    durable__turn_item_t *more = realloc(c->turn, cap * sizeof(*more));
    if (more == NULL)
      return DURABLE_ENOMEM;
    c->turn = more;
    c->turn_cap = cap;
  }
  c->turn_bytes += strlen(t->payload);
  c->turn[c->nturn++] = *t;
  *t = (durable__turn_item_t){0};
  return 0;
}

/* A batch is formed from what is read already; with nothing more there it
 * goes as it is, unless wait_ms asks to wait for more (from the batch's
 * first item on: a timer, msg_gather, ends the wait). */
static void gather_more(durable__consumer_t *c) {
  if (batch_open(c)) {
    if (durable__pull_ready(c->pull)) {
      durable__pull_next(c->pull, on_pulled, c); /* at once */
      return;
    }
    uint32_t wait_ms = c->cfg.batch.wait_ms;
    uint64_t now = uv_now(durable_mesh_loop(c->mesh));
    if (wait_ms > 0 && !(c->flags & DURABLE__CONSUMER_GATHERING)) {
      c->flags |= DURABLE__CONSUMER_GATHERING;
      c->gather_until = now + wait_ms;
      durable__consumer_arm(c, c->msg_gather, wait_ms);
    }
    if ((c->flags & DURABLE__CONSUMER_GATHERING) && now < c->gather_until) {
      durable__pull_next(c->pull, on_pulled, c); /* when one comes */
      return;
    }
  }
  send_turn(c);
}

static void on_pulled(durable__pull_t *pull, int status,
                      const durable_item_t *item, const char *message,
                      void *data) {
  durable__consumer_t *c = data;
  (void)pull;
  if (status < 0 && c->nturn > 0) {
    /* behind a batch being gathered: the batch goes as it is, and the
     * failure is met again, from the checkpoint, after it */
    durable__pull_close(c->pull);
    c->pull = NULL;
    send_turn(c);
    return;
  }
  if (status < 0 && item != NULL && status != DURABLE_ENOMEM)
    c->no_turn(c, item->sequence, 1, message); /* it cannot be read */
  else if (status < 0) /* the read failed, or had no memory: not the item's */
    c->no_turn(c, c->checkpoint + 1, 0, message);
  if (status < 0)
    return;
  if (durable__consumer_leaving(c)) {
    durable__consumer_turn_clear(c); /* an item boundary: nothing new starts */
    return;
  }
  durable__turn_item_t t;
  if (take(&t, item) < 0) {
    durable__consumer_turn_clear(c);
    c->no_turn(c, item->sequence, 0, "out of memory");
    return;
  }
  if (c->nturn > 0 && c->cfg.batch.bytes > 0 &&
      c->turn_bytes + strlen(t.payload) > c->cfg.batch.bytes) {
    c->carry = t; /* too large to join: it opens the next batch */
    send_turn(c);
    return;
  }
  if (turn_add(c, &t) < 0) {
    turn_item_free(&t);
    durable__consumer_turn_clear(c);
    c->no_turn(c, item->sequence, 0, "out of memory");
    return;
  }
  gather_more(c);
}

void durable__consumer_next_turn(durable__consumer_t *c) {
  /* one turn at a time, also across rounds: one out of an earlier round
   * starts this one's when it comes back (consumer.c) */
  if (durable__consumer_leaving(c) || c->pull == NULL ||
      (c->flags & DURABLE__CONSUMER_TURN_OUT))
    return;
  if (c->carry.node != NULL) {
    if (turn_add(c, &c->carry) < 0) {
      c->no_turn(c, c->carry.seq, 0, "out of memory");
      return;
    }
    gather_more(c);
    return;
  }
  durable__pull_next(c->pull, on_pulled, c);
}

/* The wait_ms of a batch being gathered is over: it goes as it is (a timer
 * armed for an earlier batch waits again for this one's end). */
void durable__consumer_gathered(durable_hub_t *hub, const durable_msg_t *msg,
                                durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  (void)hub;
  durable_reply_ok(reply, NULL);
  if (!(c->flags & DURABLE__CONSUMER_GATHERING) ||
      !durable__consumer_current_gen(c, msg) || durable__consumer_leaving(c))
    return;
  uint64_t now = uv_now(durable_mesh_loop(c->mesh));
  if (now < c->gather_until) {
    durable__consumer_arm(c, c->msg_gather, (uint32_t)(c->gather_until - now));
    return;
  }
  durable__pull_cancel(c->pull);
  send_turn(c);
}

/* ---- the turn (runs as a message of the hub) ----------------------------- */

void durable__consumer_turn(durable_hub_t *hub, const durable_msg_t *msg,
                            durable_reply_t *reply, void *data) {
  durable__consumer_t *c = data;
  long long seq = 0; /* the turn consumer.c sent itself: its first item */
  if (sscanf(msg->payload, "{\"Sequence\":%lld}", &seq) != 1)
    seq = 0;
  if (!(c->flags & DURABLE__CONSUMER_TURN_OUT) || c->nturn == 0 ||
      seq != c->turn[0].seq) {
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
  durable_item_t one,
      *items = c->nturn == 1 ? &one : calloc(c->nturn, sizeof(*items));
  durable_reply_t *done =
      a && items ? durable__reply_callback(hub, on_handler_done, a) : NULL;
  if (done == NULL) {
    free(a);
    if (items != &one)
      free(items);
    durable_reply_fail(reply, DURABLE_ENOMEM, "out of memory");
    return;
  }
  a->c = c;
  a->seq = c->turn[c->nturn - 1].seq; /* acknowledged: the last */
  a->turn = reply;
  c->turn_failed_at = 0;
  for (size_t i = 0; i < c->nturn; i++) {
    const durable__turn_item_t *t = &c->turn[i];
    items[i] = (durable_item_t){.stream = durable__consumer_id(c),
                                .sequence = t->seq,
                                .payload = t->payload,
                                .appended_at = t->appended_at,
                                .node = t->node};
  }
  durable__stream_handed(c->mesh, c->ns, c->key, c->group, items[0].sequence,
                         items[c->nturn - 1].sequence);
  char what[64];
  durable__consumer_turn_items(c, what, sizeof what);
  durable_mesh_log(c->mesh, DURABLE_LOG_DEBUG,
                   "Durable stream consumer %s: %s of %s",
                   durable__consumer_hub_name(c), what, c->ns);
  if (durable__consumer_batches(c))
    c->cfg.batch_handler(hub, items, c->nturn, done, c->cfg.data);
  else
    c->cfg.handler(hub, items, done, c->cfg.data);
  if (items != &one)
    free(items);
}

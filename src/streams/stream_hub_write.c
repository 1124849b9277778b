/*
 * stream_hub_write.c: an operation of a stream hub writes its decision into
 * the stream node, as a compare-and-set.
 *
 * Across processes each operation of the chain (stream_hub.c) is a
 * compare-and-set on the stream node: the part of the state it decided on
 * -- LastSequence for an append, the lease for a claim, ack or release --
 * must not have moved since it was read, checked in the write transaction
 * itself.  So two stream hubs in two processes cannot both win (the loser
 * re-reads and decides again), while a producer's append in one process
 * and the holder's ack in another do not get in each other's way.
 *
 * The stream node is replaced at the version the hub last saw (no read, no
 * decode); after another process's write was in the way, it is read and
 * changed under the row's lock instead (mutate_state), for a while -- and
 * there an append that finds the tail moved takes the sequences after it,
 * its items made again on the writer thread (remake_write), rather than
 * losing again to the producers that keep the lock busy.  The stream node
 * comes first in the transaction, the batch's items and ids after it.
 */
#include "stream_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* After another process's write was found in the way, the state is decided
 * under the row's lock (read-modify-write) for this long, rather than
 * replaced at a cached version that keeps going stale. */
#define CONTENDED_MS 1000

typedef struct {
  durable__shub_t *sh;
  durable__shub_written_fn then;
  int part;                     /* durable__shub_part_t bits */
  durable__stream_state_t base; /* the state the decision was made on */
  durable__stream_state_t next; /* the decision */
  const char *path;
  const char *node_type;
  /* set by the mutator: the state as stored now -- the one written, or on
   * a lost compare-and-set the one that won */
  durable__stream_state_t seen;
  int have_seen;
  int replace; /* written as a replace at sh->version, not by the mutator */
  /* a batch's appends, made again by the mutator's decision (remake) */
  durable__batch_write_t *made; /* one per extra write, or NULL */
  const char *items_ns;
  int64_t shift;   /* the mutator's: sequences this much later than decided */
  int64_t made_at; /* the shift the store's writes were last made at */
  int remade;      /* ... and this run changed it: make them again */
  int went_back;   /* the mutator's: the stored tail is behind the decision
                      (deleted and made anew): decide from scratch */
} write_ctx_t;

void durable__batch_writes_free(durable__batch_write_t *made) {
  for (size_t i = 0; made && made[i].seq != 0; i++)
    free(made[i].id_path);
  free(made);
}

void durable__shub_forget_state(durable__shub_t *sh) {
  sh->flags &= ~DURABLE__SHUB_HAVE_STATE;
  sh->version = 0;
  sh->next_seq = 0;
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
  int tail_moved = (w->part & DURABLE__PART_TAIL) &&
                   cur.last_sequence != base->last_sequence;
  int lease_moved =
      (w->part & DURABLE__PART_LEASE) &&
      (!same_str(cur.subscriber, base->subscriber) ||
       !same_str(cur.subscriber_instance, base->subscriber_instance) ||
       cur.lease_epoch != base->lease_epoch ||
       cur.checkpoint != base->checkpoint ||
       cur.detached_at != base->detached_at); /* a group's: a trim's */
  /* Another process appended since the decision: a batch whose items are
   * made here (remake) takes the sequences after its tail instead, decided
   * under the row's lock, so that it cannot be overtaken again.  A tail
   * behind the decision is a stream deleted and made anew: no shift can
   * mend that, the sequence is derived again. */
  w->shift = 0;
  w->went_back =
      (w->part & DURABLE__PART_TAIL) && cur.last_sequence < base->last_sequence;
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
  /* nor does a stream stopped because the store went back (seen.c): an
   * append or claim decided before the stop is decided again */
  int stop_began = durable__state_behind(&cur) && !durable__state_behind(base);
  int moved = tail_moved || lease_moved || deleting_began || stop_began;
  int rc = moved ? DURABLE_ECONFLICT : 1;
  if (!moved && (w->part & DURABLE__PART_TAIL))
    cur.last_sequence = next->last_sequence + w->shift;
  if (!moved && (w->part & DURABLE__PART_LEASE)) {
    if (durable__str_set(&cur.subscriber, next->subscriber) < 0 ||
        durable__str_set(&cur.subscriber_instance, next->subscriber_instance) <
            0 ||
        durable__str_set(&cur.last_subscriber, next->last_subscriber) < 0)
      rc = DURABLE_ENOMEM;
    cur.lease_epoch = next->lease_epoch;
    cur.subscribed_at = next->subscribed_at;
    cur.checkpoint = next->checkpoint;
    cur.checkpoint_at = next->checkpoint_at;
    cur.last_batch = next->last_batch;
    cur.orphaned_at = next->orphaned_at;
    /* only ever raised (by a trim): a decision made on a state read
     * before a trim must not lower it */
    if (next->trimmed_through > cur.trimmed_through)
      cur.trimmed_through = next->trimmed_through;
    cur.deleting_at = next->deleting_at;   /* only a delete sets it */
    if (next->hold_until > cur.hold_until) /* only ever moved later */
      cur.hold_until = next->hold_until;
    /* stopped when the store went back (seen.c), and what an operator's
     * seek then accepted as lost: only the decisions that change them (the
     * stop, what another process saw added to it, the resume) write them */
    if (next->seen_last != base->seen_last ||
        next->seen_checkpoint != base->seen_checkpoint ||
        next->seen_epoch != base->seen_epoch) {
      cur.seen_last = next->seen_last;
      cur.seen_checkpoint = next->seen_checkpoint;
      cur.seen_epoch = next->seen_epoch;
    }
    if (next->lost_to != base->lost_to) {
      cur.lost_from = next->lost_from;
      cur.lost_to = next->lost_to;
    }
    /* a group's: its holder's bounds, and whether it pins (only the
     * decisions that change them write them: a trim may detach it) */
    if (next->detached_at != base->detached_at)
      cur.detached_at = next->detached_at;
    cur.detach_idle_ms = next->detach_idle_ms;
    cur.detach_items = next->detach_items;
    cur.detach_age_ms = next->detach_age_ms;
  }
  if (rc == 1) {
    *content = durable__state_encode(&cur);
    *node_type = strdup(w->node_type);
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
  durable__batch_writes_free(w->made);
  durable__state_free(&w->base);
  durable__state_free(&w->next);
  durable__state_free(&w->seen);
  free(w);
}

static void on_written(const durable_result_t *res, void *data) {
  write_ctx_t *w = data;
  durable__shub_t *sh = w->sh;
  durable__stream_state_t *stored = NULL;
  if (res->status == 0) {
    /* written: the decision (a replace) or what the mutator stored */
    stored = w->replace ? &w->next : w->have_seen ? &w->seen : NULL;
    sh->version = durable__written_version(res, 0);
    if (w->shift != 0 && !w->replace) {
      /* the mutator took later sequences (remake_write): so do the
       * answers of the batch's appends */
      durable__shub_op_t *op = durable__shub_head(sh);
      for (size_t i = 0; op && i < sh->batch;
           i++, op = durable__shub_after(sh, op))
        if (op->kind == DURABLE__OP_APPEND)
          op->seq += w->shift;
    }
  } else if (res->status == DURABLE_ECONFLICT && w->went_back) {
    durable__shub_forget_state(
        sh); /* a new stream: read it, derive its next sequence */
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
    sh->flags &= ~DURABLE__SHUB_HAVE_STATE;
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
    else {
      stored = NULL;
      sh->flags &= ~DURABLE__SHUB_HAVE_STATE;
    }
  }
  if (stored) {
    durable__state_free(&sh->state);
    sh->state = *stored;
    memset(stored, 0, sizeof *stored);
    sh->flags |= DURABLE__SHUB_HAVE_STATE;
    /* what this process saw follows what it wrote (seen.c); a stored state
     * behind that is read again, which stops the stream */
    durable__stream_state_t seen = {0};
    if (!durable__state_behind(&sh->state) &&
        durable__seen_check(sh->mesh, sh->path, &sh->state, &seen))
      sh->flags &= ~DURABLE__SHUB_HAVE_STATE;
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
  const durable__batch_write_t *b = &w->made[i - 1];
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
void durable__shub_write_state(durable__shub_t *sh, int part,
                               durable__stream_state_t *next,
                               durable_write_t *extra, size_t nextra,
                               durable__batch_write_t *made, const char *as,
                               durable__shub_written_fn then) {
  write_ctx_t *w = calloc(1, sizeof(*w));
  if (w) {
    w->made = made; /* taken */
    w->items_ns = sh->items_ns;
  } else {
    durable__batch_writes_free(made);
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
    w->node_type = sh->node_type;
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
                                    .node_type = sh->node_type,
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

/*
 * stream_hub_ids.c: a batch of a stream hub that hit a publish id already
 * stored -- which appends were sent before, and with which sequence.
 *
 * An append with a publish id creates the id's write-once node (publish_id.c)
 * in its batch's transaction (stream_hub.c).  An id already stored fails the
 * whole transaction on the node's key (DURABLE_EEXIST), without saying
 * whose.  The hub then reads the node of each publish id in the batch,
 * answers the appends whose id it finds with the sequence they got the first
 * time, takes them off the chain, and decides the rest again -- so a
 * duplicate from another process, or one that raced its first attempt here,
 * appends nothing and loses no other append.  A batch in which no id is
 * found failed on something else (an item in the way, say): it is decided
 * again as any write the store refused.
 */
#include "stream_hub.h"

#include <stdio.h>
#include <stdlib.h>

/* One id's read: the append it is for. */
typedef struct {
  durable__shub_t *sh;
  durable__shub_op_t *op;
} id_read_t;

/* Every id read is back: the appends whose id was found are answered with
 * the sequence it names and leave the chain (they are among the first ops:
 * nothing leaves the front while the hub is busy); the rest is decided
 * again from a fresh state. */
static void ids_read(durable__shub_t *sh, size_t n) {
  size_t found = 0;
  durable__shub_op_t *op = durable__shub_head(sh), *after;
  for (size_t i = 0; i < n && op; i++, op = after) {
    after = durable__shub_after(sh, op); /* before op may go */
    if (op->kind == DURABLE__OP_APPEND && op->known > 0) {
      durable__queue_remove(&op->link);
      durable__shub_answer_seq(op, op->known);
      durable__shub_op_free(op);
      found++;
    }
  }
  if (found == 0) {
    /* not an id: an item in the way, say */
    durable__shub_retry(sh, sh->failed_code, sh->failed_message);
    return;
  }
  durable__shub_forget_state(sh);
  durable__shub_go_on(sh);
}

static void on_id_read(const durable_result_t *res, void *data) {
  id_read_t *r = data;
  durable__shub_t *sh = r->sh;
  if (res->status == 0) /* 0: not known, also for want of memory */
    r->op->known = durable__publish_id_sequence(res->node->content);
  if (r->op->known < 0)
    r->op->known = 0;
  free(r);
  if (--sh->looking == 0)
    ids_read(sh, sh->batch);
  durable_hub_unref(sh->hub);
}

void durable__shub_read_ids(durable__shub_t *sh, size_t n,
                            const durable_result_t *res) {
  sh->failed_code = res->status;
  snprintf(sh->failed_message, sizeof sh->failed_message, "%s",
           res->message ? res->message : durable_strerror(res->status));
  sh->batch = n;
  sh->looking = 1; /* held until every read is out */
  durable__shub_op_t *op = durable__shub_head(sh);
  for (size_t i = 0; i < n && op; i++, op = durable__shub_after(sh, op)) {
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

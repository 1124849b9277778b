/*
 * protocol.h: the messages of durable streams between the hubs of one
 * process, in one place: their names and their shapes.
 *
 * A producer's append and a consumer's claim, ack and release go to the
 * stream node's hub as requests; the owner is woken, and a consumer hands
 * itself an item, as messages to a hub.  Within a process these carry typed
 * bodies (durable__body_t, hub.h): nothing is encoded or parsed on the way,
 * which on the hot path cost more than the store's own work.  The stream
 * hub also takes the same requests as JSON -- from Lua, from a test that
 * plays a consumer -- and then answers in JSON:
 *
 *   durable.append   {PayloadJson [, Id]}            -> {Sequence}
 *   durable.claim    {Subscriber}                    -> {Granted, Epoch,
 *                     Checkpoint, Holder, HolderInstance, TookOverFrom}
 *   durable.ack      {Subscriber, Epoch, Sequence}   -> {Accepted, Reason}
 *                    (typed only: with the item's effects to commit)
 *   durable.release  {Subscriber, Epoch}             -> {Released}
 *   durable.seek     {Subscriber, Sequence [, Epoch]} -> {Moved, Was}
 *                    (an operator's: the checkpoint set to Sequence, the
 *                    lease let go; Subscriber names who asked; Epoch 1 =
 *                    a group trim's, forward only: a checkpoint at or
 *                    past Sequence stays, answered Moved with Was)
 *   durable.trim     {Subscriber, Sequence, Epoch}   -> {Trimmed, Was}
 *                    (an operator's: TrimmedThrough set to Sequence, the
 *                    items deleted after by the asker; Epoch 1 = force,
 *                    past the checkpoint, which then moves as by a seek;
 *                    Epoch 2 = retention's sweep, logged at debug)
 *   durable.delete   {Subscriber, Sequence, Epoch}   -> {Deleted, Was}
 *                    (an operator's: Sequence 0 marks the stream Deleting,
 *                    letting the lease go -- refused while it is held
 *                    unless Epoch 1 = force -- and the asker deletes its
 *                    items and ids; Sequence 1 then removes the node --
 *                    typed only, the runtime's own -- Was is the last
 *                    sequence)
 *
 *   durable.group    {Subscriber, Group [, Start]}   -> {Made, Was}
 *                    (a consumer group's first claim found no group: the
 *                    stream's hub makes its node, starting at Start; Was
 *                    is its checkpoint, 0 when it was there already)
 *
 * A consumer group's node (group.c) has a hub of the same kind, which takes
 * claim, ack, release and seek for the group's lease, and delete for the
 * group itself (refused while held unless Epoch 1 = force).
 *
 * An append's Id is its publish id (durable_publish_id_check): an id the
 * stream already holds is answered with the sequence it got then, and
 * nothing is appended.
 *
 * The names under "durable." belong to the runtime: a NodeType's handler
 * cannot take one (durable_node_type_on refuses it).
 */
#ifndef DURABLE_STREAMS_PROTOCOL_H
#define DURABLE_STREAMS_PROTOCOL_H

#include "hub.h"

#define DURABLE__MSG_APPEND "durable.append"
#define DURABLE__MSG_CLAIM "durable.claim"
#define DURABLE__MSG_ACK "durable.ack"
#define DURABLE__MSG_RELEASE "durable.release"
#define DURABLE__MSG_SEEK "durable.seek"
#define DURABLE__MSG_TRIM "durable.trim"
#define DURABLE__MSG_DELETE "durable.delete"
#define DURABLE__MSG_GROUP "durable.group"
/* per family: "durable.wake:DocumentLog", ... */
#define DURABLE__MSG_WAKE "durable.wake:"
#define DURABLE__MSG_TURN "durable.turn:"
#define DURABLE__MSG_RETRY "durable.retry:"
#define DURABLE__MSG_RECLAIM "durable.reclaim:"
#define DURABLE__MSG_FENCE "durable.fence:"
#define DURABLE__MSG_SWEEP "durable.sweep:"
#define DURABLE__MSG_GATHER "durable.gather:"

typedef enum {
  DURABLE__OP_APPEND = 1,
  DURABLE__OP_CLAIM,
  DURABLE__OP_ACK,
  DURABLE__OP_RELEASE,
  DURABLE__OP_SEEK,
  DURABLE__OP_TRIM,
  DURABLE__OP_DELETE,
  DURABLE__OP_GROUP
} durable__stream_op_t;

/* A request to a stream hub.  Strings are owned (malloc'ed). */
typedef struct {
  durable__body_t base;
  char *payload;    /* append: the item's JSON text */
  char *id;         /* append: its publish id, or NULL */
  char *subscriber; /* claim, ack, release: the consumer's hub address */
  int64_t epoch;    /* ack, release: the lease it holds */
  int64_t sequence; /* ack: the item done */
  /* ack: the item's effects (durable_reply_commit), written in the ack's
   * transaction and only under the lease; NULL for none */
  durable__write_set_t *effects;
  /* group (to the stream's hub): the consumer group to make, where it
   * starts (JSON: Group, Start, the text durable_start_parse reads); claim
   * (to the group's hub): the detach bounds its consumer declares (typed
   * only) */
  char *group;
  durable_start_t start;
  durable_detach_t detach;
} durable__stream_req_t;

/* A stream hub's answer.  Strings are owned; NULL for none. */
typedef struct {
  durable__body_t base;
  int ok;                /* claim: granted; ack: accepted; release: done */
  int64_t sequence;      /* append; trim: how far it is trimmed now */
  int64_t epoch;         /* claim: the lease's epoch */
  int64_t checkpoint;    /* claim: resume after this; seek: what it was;
                            trim: TrimmedThrough before */
  char *holder;          /* claim refused: who holds it */
  char *holder_instance; /*   ... in which process */
  char *took_over_from;  /* claim granted by a takeover: from whom */
  uint32_t hold_ms;      /*   ... of a process that is gone: hand nothing
                            over for this long (durable__store_fence_ms) */
  char *reason;          /* ack refused: why (fenced) */
} durable__stream_ans_t;

/* New bodies, or NULL when out of memory; strings are copied (NULL kept). */
durable__stream_req_t *durable__stream_req_new(const char *payload,
                                               const char *subscriber,
                                               int64_t epoch, int64_t sequence);
/* An append of `payload` with the publish id `id` (NULL: none). */
durable__stream_req_t *durable__stream_append_new(const char *payload,
                                                  const char *id);
durable__stream_ans_t *durable__stream_ans_new(void);
/* Copy `s` into a string field of an answer (NULL clears). */
int durable__stream_ans_set(char **field, const char *s);

/* The stream hub's answer in a response that succeeded, borrowed for the
 * response callback; NULL for a failure (or an answer that came in JSON). */
const durable__stream_ans_t *
durable__stream_answer(const durable_response_t *res);

/* The JSON forms above.  From JSON: a request, or NULL with `why` set to
 * what is missing.  To JSON: the answer to an `op` (malloc'ed), or NULL. */
durable__stream_req_t *durable__stream_req_parse(durable__stream_op_t op,
                                                 const char *json,
                                                 const char **why);
char *durable__stream_ans_json(durable__stream_op_t op,
                               const durable__stream_ans_t *ans);

#endif

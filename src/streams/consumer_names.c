/*
 * consumer_names.c: what a consumer is known by -- its stream node's path,
 * the node its lease lives on (the stream node, or its group's) with that
 * node's namespace, and the message types of its hub that reach it (a
 * turn, a retry, a reclaim, a fence, a sweep, a batch gathered, and its
 * family's wake).
 *
 * All of them are made once, when the consumer is, and kept in one block
 * of exactly their size: a host holds a consumer for every owner of a
 * NodeType that consumes a family (and one per group), dormant or not, so
 * ten buffers of the longest path each (some 12 KB) would make a host of
 * 10,000 owners with three groups hold over 400 MB for names alone.
 */
#include "consumer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
  NAME_PATH,
  NAME_LEASE_PATH,
  NAME_LEASE_NS,
  NAME_TURN,
  NAME_WAKE,
  NAME_RETRY,
  NAME_RECLAIM,
  NAME_FENCE,
  NAME_SWEEP,
  NAME_GATHER,
  NAMES
};

int durable__consumer_names(durable__consumer_t *c, durable_error_t *err) {
  char made[NAMES][DURABLE_PATH_MAX + 1];
  durable_stream_id_t id = {.ns = c->ns, .key = c->key};
  durable_stream_path(&id, made[NAME_PATH], sizeof made[NAME_PATH]);
  if (c->group == NULL)
    snprintf(made[NAME_LEASE_PATH], sizeof made[NAME_LEASE_PATH], "%s",
             made[NAME_PATH]);
  else if (durable_group_path(&id, c->group, made[NAME_LEASE_PATH],
                              sizeof made[NAME_LEASE_PATH]) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "consumer group %s of %s@%s makes a path longer "
                          "than %d bytes",
                          c->group, c->ns, c->key, DURABLE_PATH_MAX);
  const char *lease_path = made[NAME_LEASE_PATH];
  snprintf(made[NAME_LEASE_NS], sizeof made[NAME_LEASE_NS], "%.*s",
           (int)(strrchr(lease_path, '/') - lease_path), lease_path);
  /* one wake per family (wake_all); the rest are this consumer's own */
  durable__wake_type(made[NAME_WAKE], c->ns);
  durable__consumer_msg(made[NAME_TURN], DURABLE__MSG_TURN, c->ns, c->group);
  durable__consumer_msg(made[NAME_RETRY], DURABLE__MSG_RETRY, c->ns, c->group);
  durable__consumer_msg(made[NAME_RECLAIM], DURABLE__MSG_RECLAIM, c->ns,
                        c->group);
  durable__consumer_msg(made[NAME_FENCE], DURABLE__MSG_FENCE, c->ns, c->group);
  durable__consumer_msg(made[NAME_SWEEP], DURABLE__MSG_SWEEP, c->ns, c->group);
  durable__consumer_msg(made[NAME_GATHER], DURABLE__MSG_GATHER, c->ns,
                        c->group);

  size_t size = 0;
  for (int i = 0; i < NAMES; i++)
    size += strlen(made[i]) + 1;
  char *block = malloc(size), *at = block;
  if (block == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  const char *kept[NAMES];
  for (int i = 0; i < NAMES; i++) {
    size_t n = strlen(made[i]) + 1;
    memcpy(at, made[i], n);
    kept[i] = at;
    at += n;
  }
  free(c->names);
  c->names = block;
  c->path = kept[NAME_PATH];
  c->lease_path = kept[NAME_LEASE_PATH];
  c->lease_ns = kept[NAME_LEASE_NS];
  c->msg_turn = kept[NAME_TURN];
  c->msg_wake = kept[NAME_WAKE];
  c->msg_retry = kept[NAME_RETRY];
  c->msg_reclaim = kept[NAME_RECLAIM];
  c->msg_fence = kept[NAME_FENCE];
  c->msg_sweep = kept[NAME_SWEEP];
  c->msg_gather = kept[NAME_GATHER];
  return 0;
}

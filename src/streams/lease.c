/*
 * lease.c: see lease.h.
 */
#include "lease.h"

#include <string.h>

durable__lease_where_t durable__lease_where(const durable__stream_state_t *s,
                                            const char *here) {
  if (s->subscriber == NULL)
    return DURABLE__LEASE_FREE;
  if (s->subscriber_instance == NULL ||
      strcmp(s->subscriber_instance, here) == 0)
    return DURABLE__LEASE_HERE;
  return DURABLE__LEASE_ELSEWHERE;
}

int durable__lease_waiting(const durable__stream_state_t *s) {
  return s->last_sequence > s->checkpoint;
}

durable__claim_t durable__lease_claim(const durable__stream_state_t *s,
                                      const char *claimant, const char *here) {
  switch (durable__lease_where(s, here)) {
  case DURABLE__LEASE_FREE:
    return DURABLE__CLAIM_GRANT;
  case DURABLE__LEASE_HERE:
    return strcmp(s->subscriber, claimant) == 0 ? DURABLE__CLAIM_GRANT
                                                : DURABLE__CLAIM_PING_HOLDER;
  case DURABLE__LEASE_ELSEWHERE:
    break;
  }
  return DURABLE__CLAIM_ASK_PROCESS;
}

int durable__lease_fenced(const durable__stream_state_t *s,
                          const char *subscriber, int64_t epoch,
                          const char *here) {
  return durable__lease_where(s, here) != DURABLE__LEASE_HERE ||
         strcmp(s->subscriber, subscriber) != 0 || s->lease_epoch != epoch;
}

int durable__lease_unheld(const durable__stream_state_t *s, const char *here,
                          const char *gone, int at_start) {
  switch (durable__lease_where(s, here)) {
  case DURABLE__LEASE_FREE:
    return 1;
  case DURABLE__LEASE_ELSEWHERE:
    return gone != NULL && strcmp(s->subscriber_instance, gone) == 0;
  case DURABLE__LEASE_HERE:
    break;
  }
  return at_start && s->subscriber_instance == NULL &&
         strcmp(s->subscriber, s->key) == 0;
}

/* "ns@key", or "ns@key group G" for a consumer group's lease; and the
 * stream's last sequence, which only a stream node's state knows. */
static durable__stream_name_t lease_name(const durable__stream_state_t *s) {
  durable_stream_id_t id = {s->ns, s->key};
  durable__stream_name_t name = durable__stream_name(&id);
  size_t n = strlen(name.text);
  if (s->group)
    snprintf(name.text + n, sizeof name.text - n, " group %s", s->group);
  return name;
}

static const char *of_last(const durable__stream_state_t *s, const char *sep,
                           char *out, size_t size) {
  if (s->group)
    *out = '\0';
  else
    snprintf(out, size, "%s%lld", sep, (long long)s->last_sequence);
  return out;
}

void durable__lease_log_granted(durable_mesh_t *mesh,
                                const durable__stream_state_t *s,
                                const char *from, const char *from_instance,
                                uint32_t probe_ms, int again) {
  durable__stream_name_t name = lease_name(s);
  char last[40];
  if (from && from_instance)
    durable_mesh_log(
        mesh, DURABLE_LOG_WARN,
        "[DurableStreams] %s: %s TOOK OVER the lease from %s of process %s, "
        "which is gone; resuming after acknowledged sequence %lld (epoch "
        "%lld)",
        name.text, s->subscriber, from, from_instance, (long long)s->checkpoint,
        (long long)s->lease_epoch);
  else if (from)
    durable_mesh_log(
        mesh, DURABLE_LOG_WARN,
        "[DurableStreams] %s: %s TOOK OVER the lease from %s, which "
        "did not answer within %u ms; resuming after acknowledged "
        "sequence %lld (epoch %lld)",
        name.text, s->subscriber, from, probe_ms, (long long)s->checkpoint,
        (long long)s->lease_epoch);
  else
    durable_mesh_log(mesh, again ? DURABLE_LOG_DEBUG : DURABLE_LOG_INFO,
                     "[DurableStreams] %s: lease granted to %s (epoch %lld, "
                     "checkpoint %lld%s)",
                     name.text, s->subscriber, (long long)s->lease_epoch,
                     (long long)s->checkpoint,
                     of_last(s, ", last ", last, sizeof last));
}

void durable__lease_log_released(durable_mesh_t *mesh,
                                 const durable__stream_state_t *s) {
  char last[40];
  durable_mesh_log(mesh, DURABLE_LOG_INFO,
                   "[DurableStreams] %s ORPHANED: %s released the lease at "
                   "checkpoint %lld%s",
                   lease_name(s).text, s->last_subscriber,
                   (long long)s->checkpoint,
                   of_last(s, " of ", last, sizeof last));
}

/*
 * lease.h: the lease rules of a stream, decided on its stored state, and
 * the log sentences that announce them.
 *
 * A stream node names its holder (Subscriber), the holder's process
 * (SubscriberInstance: the store instance of the process that claimed) and
 * the lease's epoch.  Who holds it, as this process sees it, is one of three
 * answers, and every part of the runtime asks this unit rather than reading
 * the fields: the stream hub deciding a claim or fencing an ack, the waker
 * deciding whether a stream needs its owner woken.  A lease written before
 * leases named their process counts as this process's (what one host per
 * store did).
 */
#ifndef DURABLE_STREAMS_LEASE_H
#define DURABLE_STREAMS_LEASE_H

#include "stream.h"

typedef enum {
  DURABLE__LEASE_FREE,     /* nobody holds it */
  DURABLE__LEASE_HERE,     /* a hub of this process (or a lease naming none) */
  DURABLE__LEASE_ELSEWHERE /* a hub of another process */
} durable__lease_where_t;

/* Where the lease of `s` is held; `here` is this process's store instance. */
durable__lease_where_t durable__lease_where(const durable__stream_state_t *s,
                                            const char *here);

/* Items were appended that nobody acknowledged. */
int durable__lease_waiting(const durable__stream_state_t *s);

/* What a claim by `claimant` meets. */
typedef enum {
  DURABLE__CLAIM_GRANT,       /* free, or the claimant's own already */
  DURABLE__CLAIM_PING_HOLDER, /* held by another hub here: is it alive? */
  DURABLE__CLAIM_ASK_PROCESS  /* held in another process: is that alive? */
} durable__claim_t;
durable__claim_t durable__lease_claim(const durable__stream_state_t *s,
                                      const char *claimant, const char *here);

/* An ack or release from `subscriber` at `epoch` in this process is fenced:
 * the lease is not (or no longer) that one. */
int durable__lease_fenced(const durable__stream_state_t *s,
                          const char *subscriber, int64_t epoch,
                          const char *here);

/* Nobody holds `s` as far as waking its owner goes: free; held by the
 * process `gone` (just found dead, may be NULL); or, at a host's start
 * (`at_start`), a lease naming no process taken by the owner's own address,
 * which the owner activated here claims again as the same subscriber. */
int durable__lease_unheld(const durable__stream_state_t *s, const char *here,
                          const char *gone, int at_start);

/* The sentences.  A grant: a takeover from `from` (NULL: a plain grant) of
 * the process `from_instance` that is gone, or that did not answer within
 * `probe_ms`; `again`: granted to the holder it was held by already (a
 * claim again after a failure), which is no news (debug).  A release: the
 * checkpoint the lease was let go at. */
void durable__lease_log_granted(durable_mesh_t *mesh,
                                const durable__stream_state_t *s,
                                const char *from, const char *from_instance,
                                uint32_t probe_ms, int again);
void durable__lease_log_released(durable_mesh_t *mesh,
                                 const durable__stream_state_t *s);

#endif

/*
 * fence.c: this process as the database sees it: its instance name, and for
 * how long it may act as alive (fencing).
 *
 * A store's instance, "HOST:PID:16hex", names the process in every lease it
 * takes.  On PostgreSQL the process holds an advisory lock keyed by the hex
 * part for as long as its session lives, and other processes ask the
 * database whether that lock is held (durable__store_alive) rather than
 * trust a heartbeat.  A process cut off from the database cannot know that
 * its lock was dropped, so it acts as alive only for fence_ms after the
 * session last answered (durable__store_live): its consumers stop handing
 * out items after that, before another process may take the leases over.
 */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* "HOST:PID:16hex".  The host and pid tell an operator which process holds
 * a lease; the random part makes the instance unique (a pid is reused) and
 * is its liveness key.  Its top two bits are cleared here, so that the key
 * is the whole hex part. */
void durable__instance_make(char *out, size_t size) {
  unsigned char r[8] = {0};
  uv_random(NULL, NULL, r, sizeof r, 0, NULL);
  r[0] &= 0x3f;
  char host[UV_MAXHOSTNAMESIZE] = "localhost";
  size_t hlen = sizeof host;
  if (uv_os_gethostname(host, &hlen) != 0)
    snprintf(host, sizeof host, "localhost");
  for (char *h = host; *h; h++)
    if (*h == ':' || *h == '\n' || *h == '/')
      *h = '-';
  snprintf(out, size, "%.48s:%d:%02x%02x%02x%02x%02x%02x%02x%02x", host,
           (int)uv_os_getpid(), r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

int durable__instance_key(const char *instance, uint64_t *key) {
  const char *hex = instance ? strrchr(instance, ':') : NULL;
  if (hex == NULL || strlen(hex + 1) != 16 ||
      strspn(hex + 1, "0123456789abcdef") != 16)
    return DURABLE_EINVAL;
  *key = strtoull(hex + 1, NULL, 16) & ((UINT64_C(1) << 62) - 1);
  return 0;
}

/* ---- fencing ------------------------------------------------------------- */

uint64_t durable__fence_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint32_t durable__store_fence_ms(durable_store_t *store) {
  return store->be->watch_beat && store->src ? store->be->fence_ms : 0;
}

int durable__store_live(durable_store_t *store) {
  uint32_t fence = durable__store_fence_ms(store);
  if (fence == 0)
    return 1;
  uint64_t now = durable__fence_clock();
  store->live_asked = now;
  if (now < store->live_until)
    return 1;
  store->be->watch_beat(store->src);
  return 0;
}

void durable__store_live_confirmed(durable_store_t *store, uint64_t asked_ns) {
  uint64_t until = asked_ns + (uint64_t)store->be->fence_ms * 1000000u;
  int lapsed = durable__fence_clock() >= store->live_until;
  if (until > store->live_until)
    store->live_until = until;
  if (lapsed && durable__fence_clock() < store->live_until && store->on_live)
    store->on_live(store->on_live_data);
}

void durable__store_on_live(durable_store_t *store, void (*fn)(void *data),
                            void *data) {
  store->on_live = fn;
  store->on_live_data = data;
}

void durable__store_live_lost(durable_store_t *store) {
  store->live_until = 0;
  uv_mutex_lock(&store->lock); /* for durable__store_settling */
  store->server_lost = durable__fence_clock();
  uv_mutex_unlock(&store->lock);
}

int durable__store_live_wanted(durable_store_t *store) {
  uint64_t recent = 2 * (uint64_t)store->be->fence_ms * 1000000u;
  return store->live_asked != 0 &&
         durable__fence_clock() - store->live_asked < recent;
}

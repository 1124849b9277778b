/*
 * waker.c: a host activates the owners whose streams have work.
 *
 * In one process the stream hub wakes an owner itself (stream_hub.c).  When
 * the append comes from another process -- `durable publish` beside a
 * `durable run` on one SQLite file, or producers on PostgreSQL -- it is the
 * change feed that tells this process: each "namespace {key}/_DurableStream
 * changed elsewhere" makes the host look at that owner's streams, and a
 * stream with unacknowledged items and no holder, whose owner's NodeType
 * consumes that family here, gets its owner activated (a mesh read, so the
 * consumer starts and claims) and woken.  At start the host does the same
 * for every stream, so items appended while no host ran are consumed.
 * Several hosts may act on one stream: the lease lets exactly one win.
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEGMENT_SUFFIX "/" DURABLE__STREAM_SEGMENT

typedef struct {
  durable_mesh_t *mesh;
  char *family;
  char *key;
} wake_t;

static void wake_free(wake_t *w) {
  free(w->family);
  free(w->key);
  free(w);
}

static void on_owner_active(durable_read_outcome_t outcome,
                            const durable_node_t *node, const char *message,
                            void *data) {
  wake_t *w = data;
  (void)node;
  if (outcome == DURABLE_READ_PRESENT) {
    /* a consumer that was up already, dormant or waiting for the lease,
     * needs the nudge; a fresh one is claiming anyway */
    char type[DURABLE_PATH_MAX];
    snprintf(type, sizeof type, "durable.wake:%s", w->family);
    durable_hub_t *owner = durable_mesh_find(w->mesh, w->key);
    if (owner && durable__hub_handles(owner, type))
      durable_hub_post(durable_mesh_reads_hub(w->mesh), w->key, type, "null",
                       NULL);
  } else if (!w->mesh->closing) {
    durable_mesh_log(w->mesh, DURABLE_LOG_WARN,
                     "[DurableStreams] %s@%s: items are waiting but the owner "
                     "%s could not be woken (%s)",
                     w->family, w->key, w->key, message ? message : "absent");
  }
  wake_free(w);
}

static void on_owner_read(const durable_result_t *res) {
  wake_t *w = res->data;
  if (res->status == 0 &&
      durable__consumed_has(w->mesh, res->node->node_type, w->family)) {
    durable_error_t err = {0};
    if (durable_mesh_read(w->mesh, w->key, on_owner_active, w, &err) == 0)
      return;
  }
  wake_free(w); /* absent, or no consumer of that family here */
}

/* A stream node: wake its owner if it has work nobody holds.  At the
 * host's start, a stream still held by its owner's own address counts as
 * unheld: the process that held it is gone without releasing (a crash, a
 * second signal), and the owner activated here re-claims it as the same
 * subscriber.  (One host per store: see the README's limits.) */
static void consider(durable_mesh_t *mesh, const durable_node_t *node,
                     int at_start) {
  durable__stream_state_t s;
  if (mesh->closing || durable__state_decode(node->content, node->path, &s) < 0)
    return;
  int unheld =
      s.subscriber == NULL || (at_start && strcmp(s.subscriber, s.key) == 0);
  int waiting = s.last_sequence > s.checkpoint && unheld;
  if (waiting) {
    wake_t *w = calloc(1, sizeof(*w));
    durable_error_t err = {0};
    if (w && (w->family = strdup(s.ns)) && (w->key = strdup(s.key))) {
      w->mesh = mesh;
      /* read the owner first: only a NodeType served here is activated */
      if (durable_store_get(durable_mesh_store(mesh), NULL, s.key,
                            on_owner_read, w, &err) < 0)
        wake_free(w);
    } else if (w) {
      wake_free(w);
    }
  }
  durable__state_free(&s);
}

typedef struct {
  durable_mesh_t *mesh;
  char *query;
  int at_start;
} scan_t;

static void scan_page(scan_t *sc, const char *after);

static void on_page(const durable_result_t *res) {
  scan_t *sc = res->data;
  if (res->status == 0) {
    for (size_t i = 0; i < res->count; i++)
      if (strcmp(res->nodes[i]->node_type, DURABLE__STREAM_TYPE) == 0)
        consider(sc->mesh, res->nodes[i], sc->at_start);
    if (res->more && res->count > 0 && !sc->mesh->closing) {
      scan_page(sc, res->nodes[res->count - 1]->path + 0);
      return;
    }
  }
  free(sc->query);
  free(sc);
}

static void scan_page(scan_t *sc, const char *after) {
  durable_error_t err = {0};
  /* "type:" pages by path, "namespace:" by id */
  const char *cursor = after;
  if (after && strncmp(sc->query, "namespace:", 10) == 0) {
    const char *slash = strrchr(after, '/');
    cursor = slash ? slash + 1 : after;
  }
  if (durable_store_query(durable_mesh_store(sc->mesh), NULL, sc->query, cursor,
                          200, on_page, sc, &err) < 0) {
    free(sc->query);
    free(sc);
  }
}

static void scan(durable_mesh_t *mesh, const char *query, int at_start) {
  scan_t *sc = calloc(1, sizeof(*sc));
  if (sc == NULL || (sc->query = strdup(query)) == NULL) {
    free(sc);
    return;
  }
  sc->mesh = mesh;
  sc->at_start = at_start;
  scan_page(sc, NULL);
}

static void on_foreign(void *data, const char *ns) {
  durable_mesh_t *mesh = data;
  if (ns == NULL) { /* it may have missed anything: look at every stream */
    scan(mesh, "type:" DURABLE__STREAM_TYPE, 0);
    return;
  }
  size_t n = strlen(ns), k = strlen(SEGMENT_SUFFIX);
  if (n > k && strcmp(ns + n - k, SEGMENT_SUFFIX) == 0) {
    char query[DURABLE_PATH_MAX + 16];
    snprintf(query, sizeof query, "namespace:%s", ns);
    scan(mesh, query, 0);
  }
}

int durable_mesh_host(durable_mesh_t *mesh, durable_error_t *err) {
  if (mesh == NULL)
    return durable__error(err, DURABLE_EINVAL, "no mesh");
  durable__store_on_foreign(durable_mesh_store(mesh), on_foreign, mesh);
  scan(mesh, "type:" DURABLE__STREAM_TYPE, 1);
  return 0;
}

/*
 * wake.c: waking a stream's owner, the one way it is done.
 *
 * A stream with items nobody holds needs its owner's consumer to claim it.
 * The stream hub of this process sees that at an append or a release; the
 * waker sees it when another process's commit or a holder's death is heard.
 * Both come here: a mesh read of the owner activates its hub (so a consumer
 * it declares starts and claims), then the owner is posted the wake of the
 * stream's family ("durable.wake:FAMILY"), the nudge a consumer that was up
 * already -- dormant, or waiting for the lease -- needs.  An owner whose
 * NodeType consumes no such stream in this process is not posted anything.
 * The log sentences name the stream and what failed ("items are waiting but
 * the owner ...
 * could not be woken (...)", "... waking the owner ... failed").
 */
#include "protocol.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void durable__wake_type(char out[DURABLE_PATH_MAX], const char *family) {
  snprintf(out, DURABLE_PATH_MAX, DURABLE__MSG_WAKE "%s", family);
}

typedef struct {
  durable_mesh_t *mesh;
  durable_stream_id_t id; /* strings after the struct */
  const char *group;      /* ... NULL: the stream's own consumer */
  durable__wake_cb cb;
  void *data;
} wake_t;

static void done(wake_t *w, durable__wake_outcome_t outcome) {
  if (w->cb)
    w->cb(outcome, w->data);
  free(w);
}

static void on_owner_read(durable_read_outcome_t outcome,
                          const durable_node_t *node, const char *message,
                          void *data) {
  wake_t *w = data;
  durable_mesh_t *mesh = w->mesh;
  (void)node;
  if (mesh->closing) { /* the next process to serve the owner wakes it */
    done(w, DURABLE__WAKE_LEAVING);
    return;
  }
  durable__stream_name_t name = durable__stream_name(&w->id);
  if (outcome != DURABLE_READ_PRESENT) {
    durable_mesh_log(mesh, DURABLE_LOG_WARN,
                     "[DurableStreams] %s: items are waiting but the owner %s "
                     "could not be woken (%s%s%s)",
                     name.text, w->id.key,
                     outcome == DURABLE_READ_ABSENT ? "Absent" : "Unavailable",
                     message ? ": " : "", message ? message : "");
    done(w, outcome == DURABLE_READ_ABSENT ? DURABLE__WAKE_ABSENT
                                           : DURABLE__WAKE_UNAVAILABLE);
    return;
  }
  char type[DURABLE_PATH_MAX];
  durable__wake_type(type, w->id.ns);
  /* the read activated the owner; should it have gone again since, the post
   * activates it afresh */
  durable_hub_t *owner = durable_mesh_find(mesh, w->id.key);
  if (owner != NULL && !durable__hub_handles(owner, type)) {
    durable_mesh_log(mesh, DURABLE_LOG_DEBUG,
                     "[DurableStreams] %s: the owner %s (%s) has no consumer "
                     "of %s in this process",
                     name.text, w->id.key, durable_hub_node_type(owner),
                     w->id.ns);
    done(w, DURABLE__WAKE_NO_CONSUMER);
    return;
  }
  durable_error_t err = {0};
  /* the payload names whose lease is free: the group's consumer, or with
   * null the stream's own (every consumer of the family on the owner
   * hears it: one that waits for its stream to exist claims) */
  char payload[DURABLE_GROUP_MAX + 3] = "null";
  if (w->group)
    snprintf(payload, sizeof payload, "\"%s\"", w->group);
  if (durable_hub_post(durable__mesh_reads_hub(mesh), w->id.key, type, payload,
                       &err) < 0) {
    durable_mesh_log(mesh, DURABLE_LOG_WARN,
                     "[DurableStreams] %s: items are waiting but waking the "
                     "owner %s failed (%s)",
                     name.text, w->id.key, err.message);
    done(w, DURABLE__WAKE_POST_FAILED);
    return;
  }
  done(w, DURABLE__WAKE_SENT);
}

int durable__wake_owner(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        const char *group, durable__wake_cb cb, void *data) {
  if (mesh->closing) /* the next process to serve the owner wakes it */
    return DURABLE_ESHUTDOWN;
  size_t ns = strlen(id->ns) + 1, key = strlen(id->key) + 1;
  size_t g = group ? strlen(group) + 1 : 0;
  wake_t *w = malloc(sizeof(*w) + ns + key + g);
  durable_error_t err = {0};
  int rc = DURABLE_ENOMEM;
  if (w != NULL) {
    char *text = (char *)(w + 1);
    memcpy(text, id->ns, ns);
    memcpy(text + ns, id->key, key);
    if (group)
      memcpy(text + ns + key, group, g);
    *w = (wake_t){
        mesh, {text, text + ns}, group ? text + ns + key : NULL, cb, data};
    rc = durable_mesh_read(mesh, id->key, on_owner_read, w, &err);
    if (rc == 0)
      return 0;
    free(w);
  }
  durable_mesh_log(mesh, DURABLE_LOG_WARN,
                   "[DurableStreams] %s: items are waiting but waking the "
                   "owner %s failed (%s)",
                   durable__stream_name(id).text, id->key,
                   rc == DURABLE_ENOMEM ? "out of memory" : err.message);
  return rc;
}

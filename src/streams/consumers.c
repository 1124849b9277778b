/*
 * consumers.c: the consumers of a mesh: how they are declared, the list the
 * mesh keeps of them, and what reaches all of them at once.
 *
 * A consumer is declared on a NodeType (durable_node_type_consume: every
 * activation of a hub of that type starts one) or on a started hub
 * (durable_hub_consume); either way it joins its mesh's list, per-mesh state
 * kept here (install.c installs it), and leaves it when its hub disposes or
 * frees it.  Through the list, this process's events reach every consumer:
 * the store lost the session that says this process is alive (its leases
 * may be taken over meanwhile, so each consumer holding one claims again
 * before it hands out another item), the store confirmed that liveness
 * again, a lease was let go behind its holder (a seek, a forced trim), an
 * operator changed a retention policy; and the families consumed here are
 * listed for the metrics.  What each consumer then does is consumer.c's.
 */
#include "consumer.h"

#include <stdlib.h>
#include <string.h>

/* ---- the mesh's list ----------------------------------------------------- */

/* The mesh's consumers, a list kept as per-mesh state (stream.c), set up
 * where the state is made (durable__consumers_install). */
typedef struct {
  struct durable__queue all; /* of durable__consumer_t.link, newest first */
} consumers_t;

static const char consumers_key; /* the state's key: its address */

/* The mesh's list (NULL once the mesh's state is gone). */
static struct durable__queue *consumers_of(durable_mesh_t *mesh) {
  consumers_t *list = durable__mesh_state(mesh, &consumers_key);
  return list ? &list->all : NULL;
}

static durable__consumer_t *consumer_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, durable__consumer_t, link);
}

/* The list's owner goes: take every consumer left off it, each then linked
 * to itself, so that its own durable__consumer_unlink later does nothing
 * (the mesh is not to be touched: this may run after it closed, when Lua
 * lets go of the read-issuing hub). */
static void consumers_free(void *data) {
  consumers_t *list = data;
  while (durable__queue_pop(&list->all) != NULL)
    ;
  free(list);
}

/* An operator's retention policy changed here (retention.c). */
static void on_retention_changed(durable_mesh_t *mesh) {
  struct durable__queue *all = consumers_of(mesh), *q;
  if (all == NULL)
    return;
  DURABLE__QUEUE_FOREACH(q, all) {
    durable__consumer_retention_changed(consumer_of(q));
  }
}

/* The list is set up here, as soon as its zeroed state is made (a zeroed
 * head is not an empty list): install runs inside durable_mesh_open, before
 * the mesh is handed out, so no consumer can join or walk it earlier. */
int durable__consumers_install(durable_mesh_t *mesh) {
  int rc = durable__mesh_state_add(mesh, &consumers_key, sizeof(consumers_t),
                                   consumers_free);
  if (rc < 0)
    return rc;
  durable__queue_init(consumers_of(mesh));
  return durable__retention_on_change(mesh, on_retention_changed);
}

/* (a consumer leaves the list itself: durable__consumer_unlink) */
static void list_link(durable__consumer_t *c) {
  struct durable__queue *all = consumers_of(c->mesh);
  if (all != NULL)
    durable__queue_insert_head(all, &c->link);
}

/* ---- what reaches every consumer ----------------------------------------- */

static int same_group(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

void durable__consumers_lease_gone(durable_mesh_t *mesh, const char *ns,
                                   const char *key, const char *group,
                                   int claiming) {
  struct durable__queue *all = consumers_of(mesh), *q, *next;
  if (all == NULL)
    return;
  /* the next taken first: a claim may not unlink, but be safe */
  DURABLE__QUEUE_FOREACH_SAFE(q, next, all) {
    durable__consumer_t *c = consumer_of(q);
    if (strcmp(c->ns, ns) == 0 && strcmp(c->key, key) == 0 &&
        same_group(c->cfg.group, group))
      durable__consumer_lease_gone(c, claiming);
  }
}

void durable__consumers_families(durable_mesh_t *mesh,
                                 void (*cb)(const char *family, void *data),
                                 void *data) {
  struct durable__queue *all = consumers_of(mesh), *q;
  if (all == NULL)
    return;
  DURABLE__QUEUE_FOREACH(q, all) {
    cb(consumer_of(q)->ns, data);
  }
}

void durable__consumers_live(durable_mesh_t *mesh, int reconnected) {
  struct durable__queue *all = consumers_of(mesh), *q;
  if (all == NULL)
    return;
  DURABLE__QUEUE_FOREACH(q, all) {
    durable__consumer_live(consumer_of(q), reconnected);
  }
}

/* Another process may take this one's leases over while the store is
 * reconnecting: a consumer that holds one claims again before it hands out
 * another item, as when its lease is let go behind it (the stream hub
 * grants it back if nobody took it, else the consumer waits for it like any
 * refused one).  The item in flight finishes first; its acknowledgement is
 * fenced if the lease went. */
void durable__consumers_session_lost(durable_mesh_t *mesh) {
  struct durable__queue *all = consumers_of(mesh), *q;
  if (all == NULL)
    return;
  DURABLE__QUEUE_FOREACH(q, all) {
    durable__consumer_lease_gone(consumer_of(q), 0);
  }
}

/* ---- declaring ----------------------------------------------------------- */

/* A consumer of `cfg` on `hub`, in the mesh's list, started. */
static int declare(durable_hub_t *hub, const durable_consumer_t *cfg,
                   durable__consumer_t **out, durable_error_t *err) {
  durable__consumer_t *c = NULL;
  int rc = durable__consumer_new(hub, cfg, &c, err);
  if (rc < 0)
    return rc;
  if (out)
    *out = c;
  list_link(c);
  durable__consumer_start(c);
  return 0;
}

static void consumer_init(durable_hub_t *hub, durable_reply_t *done,
                          void *data) {
  durable_error_t err = {0};
  if (declare(hub, data, NULL, &err) < 0)
    durable_reply_fail(done, err.code, err.message);
  else
    durable_reply_ok(done, NULL);
}

static int check_consumer(const durable_consumer_t *cfg, durable_error_t *err) {
  if (cfg == NULL || (cfg->handler == NULL) == (cfg->batch_handler == NULL))
    return durable__error(err, DURABLE_EINVAL,
                          "a consumer needs a handler or a batch handler "
                          "(one of them)");
  if (cfg->batch_handler &&
      (cfg->batch.items < 1 || cfg->batch.items > DURABLE_BATCH_ITEMS_MAX))
    return durable__error(err, DURABLE_EINVAL,
                          "batch.items is %u: a batch handler takes 1 to %d "
                          "items a call",
                          cfg->batch.items, DURABLE_BATCH_ITEMS_MAX);
  if (cfg->batch_handler && cfg->batch.wait_ms > DURABLE_BATCH_WAIT_MAX_MS)
    return durable__error(err, DURABLE_EINVAL,
                          "batch.wait_ms is %u: a batch waits at most %d ms "
                          "for more items",
                          cfg->batch.wait_ms, DURABLE_BATCH_WAIT_MAX_MS);
  if (cfg->max_attempts < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "max_attempts is %d: 0 retries an item for ever, "
                          "N > 0 moves it to the dead letters after N failures",
                          cfg->max_attempts);
  if (cfg->group && durable_group_check(cfg->group, err) < 0)
    return DURABLE_EINVAL;
  if (cfg->start.kind < DURABLE_START_EARLIEST ||
      cfg->start.kind > DURABLE_START_TIME ||
      (cfg->start.kind >= DURABLE_START_SEQUENCE && cfg->start.value < 1))
    return durable__error(err, DURABLE_EINVAL,
                          "start is not one: earliest, latest, a sequence "
                          "from 1, or a time after the epoch");
  if (cfg->start.kind != DURABLE_START_EARLIEST && cfg->group == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "start is a consumer group's: the stream's own "
                          "consumer starts after its checkpoint");
  if (cfg->detach.items < 0 || cfg->detach.age_ms < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "detach.items and detach.age_ms are 0 (no bound) "
                          "or more");
  int rc = durable__retention_check(&cfg->retention, err);
  durable_stream_id_t probe = {.ns = cfg->ns, .key = "x"};
  return rc < 0 ? rc : durable_stream_check(&probe, err);
}

int durable_node_type_consume(durable_node_type_t *type,
                              const durable_consumer_t *consumer,
                              durable_error_t *err) {
  int rc = check_consumer(consumer, err);
  if (rc < 0)
    return rc;
  if (type == NULL)
    return durable__error(err, DURABLE_EINVAL, "no node type");
  /* the configuration lives as long as the mesh: keep a copy with it */
  durable_consumer_t *copy = malloc(sizeof(*copy));
  char *ns = strdup(consumer->ns);
  char *group = consumer->group ? strdup(consumer->group) : NULL;
  if (copy == NULL || ns == NULL || (consumer->group && group == NULL)) {
    free(copy);
    free(ns);
    free(group);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  *copy = *consumer;
  copy->ns = ns;
  copy->group = group;
  rc = durable_node_type_on_init(type, consumer_init, copy);
  if (rc == 0)
    rc = durable__node_type_keep(type, copy, ns);
  if (rc == 0 && group)
    rc = durable__node_type_keep(type, NULL, group);
  if (rc == 0)
    rc = durable__consumed_add(type->mesh, type->name, ns);
  if (rc == 0 && group)
    rc = durable__grouped_add(type->mesh, ns);
  return rc < 0 ? durable__error(err, rc, "out of memory") : 0;
}

int durable_hub_consume(durable_hub_t *hub, const durable_consumer_t *consumer,
                        durable_consumer_handle_t **out, durable_error_t *err) {
  int rc = check_consumer(consumer, err);
  if (rc < 0)
    return rc;
  if (durable_hub_run_level(hub) != DURABLE_HUB_STARTED)
    return durable__error(err, DURABLE_ESHUTDOWN,
                          "hub '%s' is not started and cannot consume",
                          durable_hub_address(hub));
  durable__consumer_t *c = NULL;
  if (consumer->group &&
      durable__grouped_add(durable_hub_mesh(hub), consumer->ns) < 0)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  if ((rc = declare(hub, consumer, out ? &c : NULL, err)) < 0)
    return rc;
  if (out) {
    durable_hub_ref(hub); /* the handle keeps the consumer's memory */
    /* the handle is the consumer (durable__consumer_new allocates it so) */
    *out = (durable_consumer_handle_t *)c;
  }
  return 0;
}

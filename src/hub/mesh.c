/*
 * mesh.c: a mesh: its store, its tables of hubs and node types, activation,
 * the read-issuing hub, mesh reads, and closing.
 *
 * Activation: a message for a node address with no active hub makes a hub
 * in Starting that holds the message, reads the node from the store, finds
 * the node type's configuration, runs its initialisation steps in order and
 * only then starts delivering.  No node: queued requests are answered
 * NotFound.  A node type with no configuration gives a plain hub (it answers
 * ping, so the address is reachable).
 *
 * The read-issuing hub (`mesh/reads-INSTANCE`) is a client hub that is never
 * recycled: requests that must go out on behalf of a quiescing hub are sent
 * from it, and mesh reads are issued by it.
 */
#include "hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_QUIESCE_MS 2000
#define DEFAULT_REQUEST_TIMEOUT_MS 30000

static void on_changed(void *data);

durable_store_t *durable_mesh_store(durable_mesh_t *mesh) {
  return mesh->store;
}

durable_store_t *durable_mesh_read_store(durable_mesh_t *mesh) {
  return mesh->read_store ? mesh->read_store : mesh->store;
}
uv_loop_t *durable_mesh_loop(durable_mesh_t *mesh) {
  return mesh->loop;
}
const char *durable_mesh_principal(const durable_mesh_t *mesh) {
  return mesh->principal;
}

void durable_mesh_stats(const durable_mesh_t *mesh, durable_mesh_stats_t *out) {
  *out = mesh->stats;
  out->active_hubs = mesh->hubs.count;
}

/* ---- node types
 * ---------------------------------------------------------------- */

durable_node_type_t *durable_node_type_get(durable_mesh_t *mesh,
                                           const char *name) {
  if (durable_node_type_check(name, NULL) < 0)
    return NULL; /* no configuration can be found by that name */
  durable_node_type_t *t = durable__map_get(&mesh->types, name);
  if (t)
    return t;
  t = calloc(1, sizeof(*t));
  if (t)
    t->mesh = mesh;
  if (t == NULL || (t->name = strdup(name)) == NULL ||
      durable__map_put(&mesh->types, name, t) < 0) {
    if (t)
      free(t->name);
    free(t);
    return NULL;
  }
  return t;
}

int durable_node_type_on(durable_node_type_t *type, const char *msg_type,
                         durable_handler_cb cb, void *data,
                         durable_error_t *err) {
  if (type != NULL && msg_type != NULL &&
      strncmp(msg_type, DURABLE__RESERVED_PREFIX,
              sizeof DURABLE__RESERVED_PREFIX - 1) == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "message types beginning with '%s' belong to the "
                          "runtime and cannot be handled by NodeType '%s' "
                          "(was '%s')",
                          DURABLE__RESERVED_PREFIX, type->name, msg_type);
  return durable__node_type_on(type, msg_type, cb, data, err);
}

int durable__node_type_on(durable_node_type_t *type, const char *msg_type,
                          durable_handler_cb cb, void *data,
                          durable_error_t *err) {
  if (type == NULL || msg_type == NULL || *msg_type == '\0' || cb == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "a handler needs a node type, a message type and a "
                          "function");
  if (strcmp(msg_type, "ping") == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "'ping' is answered by every hub and cannot be "
                          "handled by NodeType '%s'",
                          type->name);
  for (size_t i = 0; i < type->nhandlers; i++)
    if (strcmp(type->handlers[i].msg_type, msg_type) == 0)
      return durable__error(err, DURABLE_EEXIST,
                            "NodeType '%s' already handles '%s'", type->name,
                            msg_type);
  durable__handler_t *h =
      realloc(type->handlers, (type->nhandlers + 1) * sizeof(*h));
  if (h == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  type->handlers = h;
  h[type->nhandlers].msg_type = strdup(msg_type);
  if (h[type->nhandlers].msg_type == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  h[type->nhandlers].cb = cb;
  h[type->nhandlers].data = data;
  type->nhandlers++;
  return 0;
}

static int add_step(durable__step_t **steps, size_t *n, durable__step_t step) {
  durable__step_t *s = realloc(*steps, (*n + 1) * sizeof(*s));
  if (s == NULL)
    return DURABLE_ENOMEM;
  s[*n] = step;
  *steps = s;
  (*n)++;
  return 0;
}

int durable_node_type_on_init(durable_node_type_t *type, durable_step_cb cb,
                              void *data) {
  if (type == NULL || cb == NULL)
    return DURABLE_EINVAL;
  return add_step(&type->inits, &type->ninits,
                  (durable__step_t){.init = cb, .data = data});
}

int durable_node_type_on_dispose(durable_node_type_t *type,
                                 durable_dispose_cb cb, void *data) {
  if (type == NULL || cb == NULL)
    return DURABLE_EINVAL;
  return add_step(&type->disposes, &type->ndisposes,
                  (durable__step_t){.dispose = cb, .data = data});
}

int durable__node_type_keep(durable_node_type_t *type, void *a, void *b) {
  void **k = realloc(type->kept, (type->nkept + 2) * sizeof(*k));
  if (k == NULL)
    return DURABLE_ENOMEM;
  k[type->nkept++] = a;
  k[type->nkept++] = b;
  type->kept = k;
  return 0;
}

static void node_type_free(durable_node_type_t *t) {
  for (size_t i = 0; i < t->nkept; i++)
    free(t->kept[i]);
  free(t->kept);
  for (size_t i = 0; i < t->nhandlers; i++)
    free(t->handlers[i].msg_type);
  free(t->handlers);
  free(t->inits);
  free(t->disposes);
  free(t->name);
  free(t);
}

/* ---- activation
 * ------------------------------------------------------------------ */

static void next_init_step(durable_hub_t *hub);

static void on_init_step(durable_hub_t *hub, int status, const char *message) {
  if (status < 0) {
    /* The activation fails EFAILED whatever code the step gave: the codes
     * of an activation mean something to its callers (ENOTFOUND: no node;
     * ESHUTDOWN: recycling, ask again), and a step re-raising the code of a
     * read it awaited must not pass for those.  The step's code stays in
     * the message. */
    char why[1024];
    if (status == DURABLE_EFAILED)
      snprintf(why, sizeof why, "activation of '%s' failed: %s", hub->address,
               message ? message : durable_strerror(status));
    else
      snprintf(why, sizeof why, "activation of '%s' failed (%s): %s",
               hub->address, durable_err_name(status),
               message ? message : durable_strerror(status));
    durable_mesh_log(hub->mesh, DURABLE_LOG_WARN, "[Hubs] %s", why);
    durable__hub_fail_activation(hub, DURABLE_EFAILED, why);
    return;
  }
  hub->init_step++;
  next_init_step(hub);
}

static void next_init_step(durable_hub_t *hub) {
  if (hub->level != DURABLE_HUB_STARTING)
    return;
  if (hub->type == NULL || hub->init_step >= hub->type->ninits) {
    hub->mesh->stats.activations++;
    durable_mesh_log(hub->mesh, DURABLE_LOG_DEBUG, "[Hubs] activated '%s' (%s)",
                     hub->address, *hub->node_type ? hub->node_type : "plain");
    durable__hub_started(hub);
    return;
  }
  durable__step_t *step = &hub->type->inits[hub->init_step];
  durable_reply_t *done = durable__step_reply(hub, on_init_step);
  if (done == NULL) {
    durable__hub_fail_activation(hub, DURABLE_ENOMEM, "out of memory");
    return;
  }
  step->init(hub, done, step->data);
}

static void on_node_read(const durable_result_t *res, void *data) {
  durable_hub_t *hub = data;
  if (res->status < 0) {
    durable__hub_fail_activation(hub, res->status, res->message);
  } else {
    char *type = strdup(res->node->node_type);
    if (type == NULL) {
      durable__hub_fail_activation(hub, DURABLE_ENOMEM, "out of memory");
    } else {
      free(hub->node_type);
      hub->node_type = type;
      hub->type = *type ? durable__map_get(&hub->mesh->types, type) : NULL;
      hub->type_known = 1;
      durable__mesh_close_started(hub);
      next_init_step(hub);
    }
  }
  durable_hub_unref(hub); /* the read's reference */
}

void durable__mesh_activate(durable_mesh_t *mesh, durable_hub_t *hub) {
  durable_error_t err = {0};
  durable_hub_ref(hub);
  int rc = durable_store_get(mesh->store, NULL, hub->address, on_node_read, hub,
                             &err);
  if (rc < 0) {
    durable__hub_fail_activation(hub, rc, err.message);
    durable_hub_unref(hub);
  }
}

/* ---- hubs
 * ------------------------------------------------------------------------ */

/* Every hub's address is a path (clients' too), so that no hub can be
 * reached by two spellings and none by a name no node could have. */
static int address_check(const char *address, durable_error_t *err) {
  durable_error_t why = {0};
  if (durable_path_check(address, &why) < 0)
    return durable__error(err, DURABLE_EINVAL, "hub address: %s", why.message);
  return 0;
}

int durable_mesh_client(durable_mesh_t *mesh, const char *address,
                        durable_hub_t **out, durable_error_t *err) {
  *out = NULL;
  if (address == NULL || *address == '\0')
    return durable__error(err, DURABLE_EINVAL, "a client hub needs an address");
  int rc = address_check(address, err);
  if (rc < 0)
    return rc;
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  durable_hub_t *hub = durable__map_get(&mesh->hubs, address);
  if (hub) {
    if (!hub->is_client)
      return durable__error(err, DURABLE_EEXIST,
                            "'%s' is the address of an active node hub",
                            address);
    if (hub->level > DURABLE_HUB_STARTED)
      return durable__error(err, DURABLE_ESHUTDOWN,
                            "client hub '%s' is shutting down", address);
    *out = hub;
    return 0;
  }
  hub = durable__hub_new(mesh, address, DURABLE_HUB_STARTED);
  if (hub == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  hub->is_client = 1;
  *out = hub;
  return 0;
}

durable_hub_t *durable__mesh_reads_hub(durable_mesh_t *mesh) {
  return mesh->reads;
}

durable_hub_t *durable_mesh_find(durable_mesh_t *mesh, const char *address) {
  durable_hub_t *hub = address ? durable__map_get(&mesh->hubs, address) : NULL;
  /* the runtime's own hub speaks for the runtime: a principal's messages
   * from it would pass the gate of what the principal may read */
  return hub == mesh->reads && mesh->principal ? NULL : hub;
}

typedef struct {
  durable_status_cb cb;
  void *data;
} status_req_t;

static void on_activate_ping(const durable_response_t *res, void *data) {
  status_req_t *r = data;
  r->cb(res->status, res->message, r->data);
  free(r);
}

/* A ping activates and proves the hub is Started. */
static int activate_ping(durable_mesh_t *mesh, const char *address,
                         status_req_t *r, durable_error_t *err) {
  return durable_hub_request(mesh->reads, address, "ping", NULL, 0,
                             on_activate_ping, r, err);
}

typedef struct {
  status_req_t *r;
  durable_mesh_t *mesh;
  char address[];
} allowed_req_t;

/* A principal's activation: its right to read the node is asked first, so
 * that a denied one learns nothing of the node -- neither whether it is
 * there nor its type -- and runs none of its consumers. */
static void on_activate_allowed(const durable_result_t *res, void *data) {
  allowed_req_t *a = data;
  status_req_t *r = a->r;
  durable_error_t err = {0};
  int rc = res->status;
  const char *message = res->message;
  if (rc == 0 && a->mesh->closing) {
    rc = DURABLE_ESHUTDOWN;
    message = "the mesh is closing";
  } else if (rc == 0 &&
             (rc = activate_ping(a->mesh, a->address, r, &err)) < 0) {
    message = err.message;
  }
  if (rc < 0) {
    r->cb(rc, message, r->data);
    free(r);
  }
  free(a);
}

int durable_mesh_activate(durable_mesh_t *mesh, const char *address,
                          durable_status_cb cb, void *data,
                          durable_error_t *err) {
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "callback is missing");
  int rc = address_check(address, err);
  if (rc < 0)
    return rc;
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  status_req_t *r = malloc(sizeof(*r));
  if (r == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  r->cb = cb;
  r->data = data;
  if (mesh->principal == NULL) {
    rc = activate_ping(mesh, address, r, err);
    if (rc < 0)
      free(r);
    return rc;
  }
  size_t len = strlen(address) + 1;
  allowed_req_t *a = malloc(sizeof(*a) + len);
  if (a == NULL) {
    free(r);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  a->r = r;
  a->mesh = mesh;
  memcpy(a->address, address, len);
  rc = durable__store_access(mesh->store, mesh->principal, address,
                             DURABLE_GRANT_READ, on_activate_allowed, a, err);
  if (rc < 0) {
    free(a);
    free(r);
  }
  return rc;
}

static int in_phase(const durable_mesh_t *mesh, const durable_hub_t *hub);

/* A hub activated while the mesh closes leaves once started, unless its
 * phase has not come yet (a stream hub that must still take a release). */
void durable__mesh_close_started(durable_hub_t *hub) {
  durable_mesh_t *mesh = hub->mesh;
  if (mesh->closing && in_phase(mesh, hub))
    durable__hub_start_quiesce(hub);
}

int durable_mesh_recycle(durable_mesh_t *mesh, const char *address,
                         durable_status_cb cb, void *data,
                         durable_error_t *err) {
  int rc = address_check(address, err);
  if (rc < 0)
    return rc;
  if (mesh->sched.closed)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closed");
  durable_hub_t *hub = durable__map_get(&mesh->hubs, address);
  if (hub == NULL) {
    if (cb)
      durable__sched_later(&mesh->sched, cb, 0, NULL, data);
    return 0;
  }
  if (hub->is_reads && !mesh->closing)
    return durable__error(err, DURABLE_EINVAL,
                          "the read-issuing hub '%s' is never recycled",
                          address);
  /* the hub never dies inside this call (its shutdown is a later turn), so
   * the callback cannot run before the call returns */
  if (cb)
    durable__hub_on_dead(hub, cb, data);
  durable__hub_start_quiesce(hub);
  return 0;
}

/* ---- mesh reads
 * -------------------------------------------------------------------- */

typedef struct {
  durable_mesh_t *mesh;
  char *path;
  durable_read_cb cb;
  void *data;
  int reprobed;
} read_req_t;

static void read_end(read_req_t *r, durable_read_outcome_t outcome,
                     const durable_node_t *node, const char *message) {
  r->cb(outcome, node, message, r->data);
  free(r->path);
  free(r);
}

static void on_read_node(const durable_result_t *res, void *data) {
  read_req_t *r = data;
  if (res->status == 0)
    read_end(r, DURABLE_READ_PRESENT, res->node, NULL);
  else if (res->status == DURABLE_ENOTFOUND)
    read_end(r, DURABLE_READ_ABSENT, NULL, res->message);
  else if (res->status == DURABLE_EACCES)
    read_end(r, DURABLE_READ_DENIED, NULL, res->message);
  else
    read_end(r, DURABLE_READ_UNAVAILABLE, NULL, res->message);
}

static void probe(read_req_t *r);

static void reprobe(int status, const char *message, void *data) {
  (void)status;
  (void)message;
  probe(data);
}

static void on_probe(const durable_response_t *res, void *data) {
  read_req_t *r = data;
  durable_mesh_t *mesh = r->mesh;
  if (res->status == 0) {
    durable_error_t err = {0};
    if (durable_store_get(mesh->store, mesh->principal, r->path, on_read_node,
                          r, &err) < 0)
      read_end(r, DURABLE_READ_UNAVAILABLE, NULL, err.message);
  } else if (res->status == DURABLE_ENOTFOUND) {
    read_end(r, DURABLE_READ_ABSENT, NULL, res->message);
  } else if (res->status == DURABLE_ESHUTDOWN && !r->reprobed &&
             !mesh->closing) {
    /* recycling is not absence: wait for that activation to end, then ask
     * the fresh one, once */
    r->reprobed = 1;
    mesh->stats.read_reprobes++;
    durable_hub_t *hub = durable__map_get(&mesh->hubs, r->path);
    if (hub && hub->level >= DURABLE_HUB_QUIESCING)
      durable__hub_on_dead(hub, reprobe, r);
    else
      durable__sched_later(&mesh->sched, reprobe, 0, NULL, r);
  } else if (res->status == DURABLE_ESHUTDOWN) {
    char message[DURABLE_PATH_MAX + 64];
    snprintf(message, sizeof message, "address '%s' is recycling", r->path);
    read_end(r, DURABLE_READ_UNAVAILABLE, NULL, message);
  } else {
    read_end(r, DURABLE_READ_UNAVAILABLE, NULL, res->message);
  }
}

static int send_probe(read_req_t *r, durable_error_t *err) {
  return durable_hub_request(r->mesh->reads, r->path, "ping", NULL, 0, on_probe,
                             r, err);
}

static void probe(read_req_t *r) {
  durable_error_t err = {0};
  if (send_probe(r, &err) < 0)
    read_end(r, DURABLE_READ_UNAVAILABLE, NULL, err.message);
}

/* A principal's mesh read: its right to read is checked before the probe,
 * so that a denied read activates nothing (activation runs consumers). */
static void on_read_allowed(const durable_result_t *res, void *data) {
  read_req_t *r = data;
  if (res->status == DURABLE_EACCES)
    read_end(r, DURABLE_READ_DENIED, NULL, res->message);
  else if (res->status < 0)
    read_end(r, DURABLE_READ_UNAVAILABLE, NULL, res->message);
  else if (r->mesh->closing)
    read_end(r, DURABLE_READ_UNAVAILABLE, NULL, "the mesh is closing");
  else
    probe(r);
}

const char *durable_read_outcome_name(durable_read_outcome_t outcome) {
  switch (outcome) {
  case DURABLE_READ_PRESENT:
    return "present";
  case DURABLE_READ_ABSENT:
    return "absent";
  case DURABLE_READ_UNAVAILABLE:
    return "unavailable";
  case DURABLE_READ_DENIED:
    return "denied";
  }
  return "unknown";
}

int durable_mesh_read(durable_mesh_t *mesh, const char *path,
                      durable_read_cb cb, void *data, durable_error_t *err) {
  int rc = durable_path_check(path, err);
  if (rc < 0)
    return rc;
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "callback is missing");
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  read_req_t *r = calloc(1, sizeof(*r));
  if (r == NULL || (r->path = strdup(path)) == NULL) {
    free(r);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  r->mesh = mesh;
  r->cb = cb;
  r->data = data;
  if (mesh->principal != NULL)
    rc = durable__store_access(mesh->store, mesh->principal, path,
                               DURABLE_GRANT_READ, on_read_allowed, r, err);
  else
    rc = send_probe(r, err);
  if (rc < 0) { /* refused now: no callback */
    free(r->path);
    free(r);
  }
  return rc;
}

/* ---- open and close
 * ------------------------------------------------------------------ */

int durable__mesh_open(uv_loop_t *loop, const durable_mesh_options_t *options,
                       int (*const installs[])(durable_mesh_t *mesh),
                       durable_mesh_t **out, durable_error_t *err) {
  *out = NULL;
  if (loop == NULL || options == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "a mesh needs a loop and options");
  durable_mesh_t *mesh = calloc(1, sizeof(*mesh));
  if (mesh == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  durable__queue_init(&mesh->replies);
  mesh->loop = loop;
  mesh->quiesce_budget_ms = options->quiesce_budget_ms
                                ? options->quiesce_budget_ms
                                : DEFAULT_QUIESCE_MS;
  mesh->request_timeout_ms = options->request_timeout_ms
                                 ? options->request_timeout_ms
                                 : DEFAULT_REQUEST_TIMEOUT_MS;
  mesh->log = options->log;
  mesh->log_data = options->log_data;
  mesh->stream_options = options->streams;
  mesh->publish_window = options->publish_window;
  mesh->read_window = options->read_window;
  int rc;
  if (options->principal != NULL &&
      ((rc = durable_principal_check(options->principal, err)) < 0 ||
       (mesh->principal = strdup(options->principal)) == NULL)) {
    free(mesh);
    return rc < 0 ? rc : durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  rc = durable_store_open(loop, options->store, &mesh->store, err);
  if (rc == 0 && options->read_store != NULL &&
      (rc = durable_store_open_read(loop, options->read_store,
                                    &mesh->read_store, err)) < 0)
    durable_store_close(mesh->store, NULL, NULL); /* the loop lets it go */
  if (rc < 0) {
    free(mesh->principal);
    free(mesh);
    return rc;
  }
  mesh->stores_open = mesh->read_store ? 2 : 1;
  durable__sched_init(&mesh->sched, loop, durable__hub_turn, on_changed, mesh);
  mesh->messaging = &durable__messaging;
  mesh->activate = durable__mesh_activate;
  char address[96];
  unsigned char r[6] = {0};
  uv_random(NULL, NULL, r, sizeof r, 0, NULL);
  snprintf(address, sizeof address, "mesh/reads-%d-%02x%02x%02x%02x%02x%02x",
           (int)uv_os_getpid(), r[0], r[1], r[2], r[3], r[4], r[5]);
  mesh->reads = durable__hub_new(mesh, address, DURABLE_HUB_STARTED);
  if (mesh->reads == NULL) {
    durable__error(err, DURABLE_ENOMEM, "out of memory");
    durable_mesh_close(mesh, NULL, NULL);
    return DURABLE_ENOMEM;
  }
  mesh->reads->is_client = mesh->reads->is_reads = 1;
  durable_hub_ref(mesh->reads); /* the mesh's own: mesh->reads stays valid */
  for (size_t i = 0; installs && installs[i]; i++) {
    if ((rc = installs[i](mesh)) < 0) {
      durable__error(err, rc, "cannot set up the mesh: %s",
                     durable_strerror(rc));
      durable_mesh_close(mesh, NULL, NULL);
      return rc;
    }
  }
  *out = mesh;
  return 0;
}

static void free_mesh(durable_mesh_t *mesh) {
  void (*cb)(void *) = mesh->close_cb;
  void *data = mesh->close_data;
  durable__detach_replies(mesh);
  if (mesh->reads)
    durable_hub_unref(mesh->reads);
  const char *key;
  void *value;
  for (size_t i = 0; durable__map_next(&mesh->types, &i, &key, &value);)
    node_type_free(value);
  durable__map_free(&mesh->types);
  durable__map_free(&mesh->hubs);
  durable__map_free(&mesh->pending);
  free(mesh->principal);
  free(mesh);
  if (cb)
    cb(data);
}

static void maybe_free(durable_mesh_t *mesh) {
  if (mesh->closing && mesh->stores_open == 0 && mesh->sched.handles == 0)
    free_mesh(mesh);
}

static void on_store_closed(void *data) {
  durable_mesh_t *mesh = data;
  mesh->stores_open--;
  maybe_free(mesh);
}

/* The hubs the close stops now, in its current phase. */
static int in_phase(const durable_mesh_t *mesh, const durable_hub_t *hub) {
  if (hub->is_reads)
    return mesh->close_phase >= 3;
  if (hub->type && hub->type->late)
    return mesh->close_phase >= 2;
  return 1;
}

/* Quiesce every hub of the current phase (collected first: recycling
 * edits the table); a hub still reading its node is told once it knows its
 * type (durable__mesh_close_started). */
static void quiesce_phase(durable_mesh_t *mesh) {
  size_t n = mesh->hubs.count, k = 0;
  durable_hub_t **all = calloc(n ? n : 1, sizeof(*all));
  const char *key;
  void *value;
  /* No memory for the list: one hub per walk of the table, each walk
   * starting over, until none is left to tell (each one told is no longer
   * Started, or has its recycle requested), so the close still ends. */
  for (size_t i = 0;
       !all && durable__map_next(&mesh->hubs, &i, &key, &value);) {
    durable_hub_t *hub = value;
    if (in_phase(mesh, hub) && (hub->level == DURABLE_HUB_STARTED ||
                                (hub->level == DURABLE_HUB_STARTING &&
                                 hub->type_known && !hub->recycle_requested))) {
      durable_hub_ref(hub);
      durable__hub_start_quiesce(hub);
      durable_hub_unref(hub);
      i = 0;
    }
  }
  for (size_t i = 0; all && durable__map_next(&mesh->hubs, &i, &key, &value);)
    if (k < n) {
      all[k++] = value;
      durable_hub_ref(value);
    }
  for (size_t i = 0; i < k; i++) {
    durable_hub_t *hub = all[i];
    if (hub->level == DURABLE_HUB_STARTED && in_phase(mesh, hub))
      durable__hub_start_quiesce(hub);
    else if (hub->level == DURABLE_HUB_STARTING && hub->type_known &&
             in_phase(mesh, hub))
      durable__hub_start_quiesce(hub);
    durable_hub_unref(hub);
  }
  free(all);
}

static void finish_close(durable_mesh_t *mesh) {
  /* every hub is gone: owed callbacks run while the store is still there
   * (a consumer's stop callback, a reader's last page may still use it).
   * A dead hub left on the ready list (an answer queued in the pass its
   * budget ran out in) has nothing to run: drop the list's references,
   * which nothing would release once the scheduler closes.  Then the idle
   * handle goes, and the store closes (its queued work finishes first). */
  durable__sched_run_later(&mesh->sched);
  durable__ready_t *r;
  while ((r = durable__sched_pop(&mesh->sched)) != NULL)
    durable_hub_unref(durable__hub_of_ready(r));
  durable_store_t *store = mesh->store, *read_store = mesh->read_store;
  mesh->store = mesh->read_store = NULL;
  durable__sched_close(&mesh->sched);
  durable_store_close(store, on_store_closed, mesh);
  if (read_store)
    durable_store_close(read_store, on_store_closed, mesh);
}

/* The close goes in three phases, so that what leaves first can still be
 * served by what leaves after it:
 *   1. the application's hubs (their dispose actions may send requests --
 *      a consumer releases its lease -- from the read-issuing hub);
 *   2. once they are gone and those requests are answered, the late hubs
 *      (node types marked late: the stream hubs that answered them);
 *   3. the read-issuing hub itself; then the store closes. */
static void close_step(durable_mesh_t *mesh) {
  if (!mesh->closing || mesh->store == NULL || mesh->stepping)
    return;
  mesh->stepping = 1;
  for (;;) {
    int left[4] = {0};
    const char *key;
    void *value;
    for (size_t i = 0; durable__map_next(&mesh->hubs, &i, &key, &value);) {
      durable_hub_t *hub = value;
      left[hub->is_reads ? 3 : hub->type && hub->type->late ? 2 : 1]++;
    }
    int phase = left[1]                                ? 1
                : mesh->reads && mesh->reads->npending ? 1
                : left[2]                              ? 2
                : left[3]                              ? 3
                                                       : 4;
    if (phase == 4) {
      mesh->stepping = 0;
      finish_close(mesh);
      return;
    }
    if (phase <= mesh->close_phase)
      break; /* waiting for this phase */
    mesh->close_phase = phase;
    quiesce_phase(mesh);
  }
  mesh->stepping = 0;
}

/* The scheduler's word that something a close waits for happened: a hub
 * left, a request of the read-issuing hub was answered, a handle closed. */
static void on_changed(void *data) {
  durable_mesh_t *mesh = data;
  close_step(mesh);
  maybe_free(mesh);
}

void durable_mesh_close(durable_mesh_t *mesh, void (*cb)(void *data),
                        void *data) {
  if (mesh == NULL || mesh->closing)
    return;
  mesh->closing = 1;
  mesh->close_cb = cb;
  mesh->close_data = data;
  mesh->close_phase = 1;
  quiesce_phase(mesh);
  close_step(mesh);
}

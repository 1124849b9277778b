/*
 * hub.h: the hub layer's shared structures (mesh.c, hub.c, request.c,
 * log.c; scheduler.h is below them all).  Nothing here is public; durable.h is.
 *
 * Ownership: the mesh's `hubs` table holds one reference to each active hub;
 * the ready list, pending requests, replies not yet sent and timers hold one
 * each.  A hub is freed when its last reference goes, which may be after it
 * is dead.
 */
#ifndef DURABLE_HUB_HUB_H
#define DURABLE_HUB_HUB_H

#include "durable_internal.h"
#include "map.h"
#include "queue.h"
#include "scheduler.h"
#include "store.h" /* the store below */
#include "text.h"

#include <stdarg.h>
#include <stddef.h>

typedef enum { ENV_POST = 1, ENV_REQUEST, ENV_REPLY } durable__env_kind_t;

/* A typed body: what the runtime's own messages between the hubs of one
 * process carry instead of JSON text (src/streams/protocol.h declares the
 * stream's).  A struct of the layer above embeds it first; `free` releases
 * the whole struct.  Messages never leave the process, so nothing is ever
 * encoded; a message that also has to be readable from Lua or JSON keeps
 * its JSON form beside (the stream hub takes both). */
typedef struct durable__body_s durable__body_t;
struct durable__body_s {
  void (*free)(durable__body_t *body);
};

/* A message in a mailbox. */
typedef struct durable__env_s durable__env_t;
struct durable__env_s {
  struct durable__queue link; /* in a mailbox */
  durable__env_kind_t kind;
  char *type, *payload, *sender, *target;
  durable__body_t *body; /* a typed body, or NULL: JSON `payload` only */
  uint64_t request_id;
  int own_timer; /* a post from the hub's own timer: runs while quiescing */
  int status;    /* ENV_REPLY */
  char *message; /* ENV_REPLY failure */
};

/* An outgoing request waiting for its answer. */
typedef struct durable__pending_s durable__pending_t;
struct durable__pending_s {
  struct durable__queue link; /* in its hub's list */
  uint64_t id;
  char key[24]; /* id as text: the mesh table's key */
  durable_hub_t *hub;
  durable_response_cb cb;
  void *data;
  uv_timer_t timer;
  int lost; /* an answer came that there was no memory to deliver */
};

typedef struct durable__waiter_s durable__waiter_t;
struct durable__waiter_s {
  struct durable__queue link;
  durable_status_cb cb;
  void *data;
};

typedef struct durable__hub_timer_s durable__hub_timer_t;
struct durable__hub_timer_s {
  struct durable__queue link; /* in its hub's list */
  uv_timer_t timer;
  durable_hub_t *hub;
  char *type, *payload;
  uint32_t every; /* ms between messages; 0: one message, then gone */
};

typedef struct {
  char *msg_type;
  durable_handler_cb cb;
  void *data;
} durable__handler_t;

typedef struct {
  durable_step_cb init;
  durable_dispose_cb dispose;
  void *data;
} durable__step_t;

/* Something a layer above keeps on one activation (streams keep their
 * consumers here), freed with the hub. */
typedef struct durable__attach_s durable__attach_t;
struct durable__attach_s {
  durable__attach_t *next;
  const void *key;
  void *data;
  void (*free_cb)(void *data);
};

struct durable_node_type_s {
  durable_mesh_t *mesh;
  char *name;
  durable__handler_t *handlers;
  size_t nhandlers;
  durable__step_t *inits, *disposes;
  size_t ninits, ndisposes;
  int late;    /* a mesh's close stops these after the others (stream hubs) */
  void **kept; /* memory a layer above gave the type to free with it */
  size_t nkept;
};

struct durable_hub_s {
  durable_mesh_t *mesh;
  char *address;
  char *node_type;           /* "" for a client hub */
  durable_node_type_t *type; /* NULL: a plain hub */
  uint64_t incarnation;
  durable_run_level_t level;
  int refs;
  int is_client, is_reads;
  int recycle_requested; /* asked while Starting */
  int recycling;         /* counts in stats.recycles */
  int finishing;         /* the shutdown is queued as a turn */
  int type_known;        /* its node was read (Starting) */

  /* mailboxes of durable__env_t, first in first out */
  struct durable__queue inbox;    /* requests and posts */
  struct durable__queue replies;  /* answers to our requests */
  struct durable__queue deferred; /* posts that wait for the next activation */
  durable__ready_t ready;         /* in the mesh's ready list (scheduler.h) */

  size_t in_flight; /* messages handed to handlers, not finished yet */
  struct durable__queue handling; /* their reply handles (request.c) */
  struct durable__queue pending;  /* durable__pending_t: our requests
                                     awaiting answers */
  size_t npending;
  size_t init_step;
  uv_timer_t *quiesce_timer;
  struct durable__queue on_dead; /* durable__waiter_t */
  struct durable__queue timers;  /* durable__hub_timer_t */

  void *data;
  void (*data_free)(void *data);

  /* what a layer above added to this activation alone */
  durable__handler_t *handlers;
  size_t nhandlers;
  durable__step_t *disposes;
  size_t ndisposes;
  durable__attach_t *attached;
};

/* What the messages a hub holds mean (request.c): running one in a turn,
 * and what becomes of those a hub still holds when it dies.  hub.c reaches
 * them through its mesh (mesh.c hands over request.c's at open), so that
 * it names nothing above it. */
typedef struct {
  void (*run_message)(durable_hub_t *hub, durable__env_t *env);
  void (*run_reply)(durable_hub_t *hub, durable__env_t *env);
  void (*route)(durable_mesh_t *mesh, durable__env_t *env);
  void (*answer)(durable_mesh_t *mesh, uint64_t id, int status,
                 const char *payload, durable__body_t *body,
                 const char *message);
  void (*fail_pending)(durable_hub_t *hub, int status, const char *message);
  void (*abandon_replies)(durable_hub_t *hub);
} durable__messaging_t;

struct durable_mesh_s {
  uv_loop_t *loop;
  durable_store_t *store;
  /* durable_mesh_options_t.read_store, opened for reading (NULL: none):
   * where unleased stream readers read */
  durable_store_t *read_store;
  char *principal; /* NULL: the platform */
  uint32_t quiesce_budget_ms;
  uint32_t request_timeout_ms;
  durable_log_cb log;
  void *log_data;
  durable_stream_options_t stream_options; /* as given; the streams layer
                                              fills in its defaults */
  durable_publish_window_t publish_window; /* as given: the same */
  durable_read_window_t read_window;       /* as given: the same */

  durable__map_t hubs;    /* address -> hub */
  durable__map_t pending; /* request id -> pending */
  durable__map_t types;   /* name -> node type */
  durable__sched_t sched; /* turns, callbacks owed, open handles */
  const durable__messaging_t *messaging; /* request.c's, for hub.c */
  /* a hub made for an address with no active one reads its node and
   * starts (mesh.c's durable__mesh_activate, for request.c's routing) */
  void (*activate)(durable_mesh_t *mesh, durable_hub_t *hub);
  uint64_t next_request_id;
  uint64_t next_incarnation;
  durable_hub_t *reads;
  durable_mesh_stats_t stats;

  struct durable__queue replies; /* every reply not finished yet */
  int closing;
  int close_phase; /* see close_step in mesh.c */
  int stepping;
  int stores_open; /* the store, and the read store if any, until closed */
  void (*close_cb)(void *data);
  void *close_data;
};

/* hub.c */
durable_hub_t *durable__hub_new(durable_mesh_t *mesh, const char *address,
                                durable_run_level_t level);
void durable__hub_enqueue(durable_hub_t *hub, durable__env_t *env);
void durable__hub_start_quiesce(durable_hub_t *hub);
void durable__hub_check_quiesced(durable_hub_t *hub);
void durable__hub_started(durable_hub_t *hub);
void durable__hub_fail_activation(durable_hub_t *hub, int status,
                                  const char *message);
void durable__hub_on_dead(durable_hub_t *hub, durable_status_cb cb, void *data);
/* The mesh's scheduler runs a ready hub's turn with this (mesh.c sets it). */
void durable__hub_turn(durable__ready_t *ready, void *data);
/* The hub whose ready-list link `ready` is. */
static inline durable_hub_t *durable__hub_of_ready(durable__ready_t *ready) {
  return (durable_hub_t *)((char *)ready - offsetof(durable_hub_t, ready));
}

/* Per-activation additions, for the layers above (streams): a handler of
 * this hub alone (looked up before the node type's), a dispose action of
 * this hub alone (run after the node type's), and keyed attachments. */
/* The runtime's own message types (durable.append, durable.wake:NS, ...):
 * durable_node_type_on refuses them; the runtime registers them with
 * durable__node_type_on. */
#define DURABLE__RESERVED_PREFIX "durable."
int durable__node_type_on(durable_node_type_t *type, const char *msg_type,
                          durable_handler_cb cb, void *data,
                          durable_error_t *err);
int durable__hub_on(durable_hub_t *hub, const char *msg_type,
                    durable_handler_cb cb, void *data, durable_error_t *err);
/* How soon a message of a hub's own timer (durable_hub_post_after) is
 * tried again when there was no memory to deliver it: such a message is
 * never dropped for want of memory while its hub lives. */
#define DURABLE__TIMER_RETRY_MS 50
/* What a timer of the hub's own posts when it fires: the message `type`
 * (`payload`) in its mailbox, marked as the hub's own so that it runs while
 * the hub quiesces; nothing once the hub is dead.  0, or DURABLE_ENOMEM
 * (the caller tries again after DURABLE__TIMER_RETRY_MS). */
int durable__hub_post_own(durable_hub_t *hub, const char *type,
                          const char *payload);
/* A timer of the hub's own that posts `type` (`payload`) every `ms` for as
 * long as the hub lives, cancelled as durable_hub_post_after's are.  What
 * must not stop ticking uses it (the waker's liveness round): it allocates
 * once, here, where a handler that re-armed itself with post_after would
 * lose its tick for good to the first allocation that failed. */
int durable__hub_post_every(durable_hub_t *hub, uint32_t ms, const char *type,
                            const char *payload, durable_error_t *err);
/* Undo a durable__hub_on of `msg_type` with `data` (a setup that failed
 * half-way leaves the hub as it was). */
void durable__hub_off(durable_hub_t *hub, const char *msg_type, void *data);
/* The data of this activation's handler of `msg_type` when that handler is
 * `cb`, else NULL (several runtime units sharing one message). */
void *durable__hub_handler_data(const durable_hub_t *hub, const char *msg_type,
                                durable_handler_cb cb);
int durable__hub_on_dispose(durable_hub_t *hub, durable_dispose_cb cb,
                            void *data);
/* Free `a` and `b` (either may be NULL) when the node type is freed. */
int durable__node_type_keep(durable_node_type_t *type, void *a, void *b);
int durable__hub_attach(durable_hub_t *hub, const void *key, void *data,
                        void (*free_cb)(void *data));
void *durable__hub_attached(const durable_hub_t *hub, const void *key);

/* Envelopes (hub.c). */
durable__env_t *durable__env_new(durable__env_kind_t kind, const char *type,
                                 const char *payload, const char *sender,
                                 const char *target);
void durable__env_free(durable__env_t *env);
void durable__body_free(durable__body_t *body); /* NULL is fine */

/* request.c */
/* Its messaging, which mesh.c hands to hub.c (durable_mesh_s.messaging). */
extern const durable__messaging_t durable__messaging;
/* Route a request or post to its target (activating it); takes env. */
void durable__route(durable_mesh_t *mesh, durable__env_t *env);
/* Answer request `id` (from the hub at `sender`): queued as a turn of the
 * requester.  Unknown ids (answered already, timed out) are dropped.
 * Takes `body` (may be NULL). */
void durable__answer(durable_mesh_t *mesh, uint64_t id, int status,
                     const char *payload, durable__body_t *body,
                     const char *message);

/* Typed messages (see durable__body_t).  A request with a body instead of
 * JSON; it takes `body`, also when it fails.  Its handler takes the body
 * with durable__msg_take (NULL for a JSON message), and answers with one
 * through durable__reply_body; the requester reads it, borrowed for its
 * callback, with durable__response_body (NULL for a JSON answer). */
int durable__hub_request_body(durable_hub_t *from, const char *to,
                              const char *type, durable__body_t *body,
                              uint32_t timeout_ms, durable_response_cb cb,
                              void *data, durable_error_t *err);
durable__body_t *durable__msg_take(const durable_msg_t *msg);
void durable__reply_body(durable_reply_t *reply, durable__body_t *body);
const durable__body_t *durable__response_body(const durable_response_t *res);
/* Run one reply envelope as a turn of its hub. */
void durable__run_reply(durable_hub_t *hub, durable__env_t *env);
/* Whether `hub` has a handler for messages of `type`. */
int durable__hub_handles(durable_hub_t *hub, const char *type);
/* Run one inbox envelope as a turn of its hub. */
void durable__run_message(durable_hub_t *hub, durable__env_t *env);
/* Answer every request `hub` is still waiting for with `status`. */
void durable__fail_pending(durable_hub_t *hub, int status, const char *message);
/* The mesh is being freed: replies still out become inert (finishing one
 * later only frees it) and let go of their hubs. */
void durable__detach_replies(durable_mesh_t *mesh);
/* The budget ran out: answer the requests still in handlers with
 * ShuttingDown now (a late reply is then dropped). */
void durable__abandon_replies(durable_hub_t *hub);
/* What a handler finished with through durable_reply_commit_with: its
 * writes (NULL: none) and its appends to other streams, copied (strings
 * after the array).  durable__commit_free frees both. */
typedef struct durable__commit_s {
  durable__write_set_t *writes;
  size_t npublishes;
  durable_publish_t publishes[];
} durable__commit_t;
void durable__commit_free(durable__commit_t *commit);

/* A completion handle that calls `fn` when finished: for work a layer
 * above hands to a handler (a consumer's item).  It counts as a message in
 * a handler, so a recycle waits for it.  `commit` is what the handler
 * committed (durable_reply_commit_with), NULL for none; `fn` owns it.  A
 * failure's `payload` is the sequence durable_reply_fail_at named, as
 * decimal text, or NULL. */
typedef void (*durable__reply_fn)(durable_hub_t *hub, int status,
                                  const char *payload, const char *message,
                                  durable__commit_t *commit, void *data);
durable_reply_t *durable__reply_callback(durable_hub_t *hub,
                                         durable__reply_fn fn, void *data);
/* An init step's completion handle. */
durable_reply_t *durable__step_reply(durable_hub_t *hub,
                                     void (*done)(durable_hub_t *hub,
                                                  int status,
                                                  const char *message));

/* durable_mesh_open, below what the layers above add to every mesh:
 * `installs` (NULL-terminated, may be NULL) run on the new mesh before it
 * is handed out, and a failure closes it.  The public durable_mesh_open is
 * the streams layer's (install.c), which passes its own: the arrow points
 * down, and the hub layer names nothing above it. */
int durable__mesh_open(uv_loop_t *loop, const durable_mesh_options_t *options,
                       int (*const installs[])(durable_mesh_t *mesh),
                       durable_mesh_t **out, durable_error_t *err);

/* mesh.c */
void durable__mesh_close_started(durable_hub_t *hub);
void durable__mesh_activate(durable_mesh_t *mesh, durable_hub_t *hub);
void durable__logv(durable_mesh_t *mesh, durable_log_level_t level,
                   const char *fmt, va_list ap);

#endif

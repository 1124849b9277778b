/*
 * lcore.h: what the files of the `durable.core` Lua module share.
 *
 * bindings/lua/ is the only C in the tree that includes lua.h.  It is a thin
 * layer over the C API: durable.h, plus the few front-end calls of
 * durable_internal.h (the log threshold and line, the read-issuing hub); the
 * one other src/ header included here is src/common/queue.h, the runtime's
 * list (header-only: it links nothing in).  One file per concept, luv-style:
 *
 *   state.c  what the others stand on: per-state bookkeeping, counted
 *            registry references, the one protected call into Lua
 *            (traceback + instruction budget)
 *   core.c   the module: luaopen_durable_core opens every file's part
 *   json.c   Lua values <-> jansson ("$type" first, then sorted keys)
 *   turns.c  requests (a Lua function called once), the queue that
 *            delivers their results at a safe point, the mesh's log
 *   mesh.c   the mesh userdata: its own uv loop, store operations, node type
 *            configuration, activation and recycle, running the loop
 *   hub.c    the hub userdata (requests, posts, timers) and the reply
 *            userdata a handler finishes its message with
 *   streams.c  durable streams: publish, consumers, the operator's calls
 *            (seek, trim, delete, retention), stream id checks
 *   reader.c the plain reader (read_durable) and its subscription
 *            userdata; an item as Lua sees it
 *   source.c a durable.source as the C reader's durable_source_t
 *   host.c   the `durable lua SCRIPT` command's interpreter (durable_lua.h)
 *
 * The mesh and hub primitives that take callbacks are registered as
 * "_name" methods; luaopen_durable_core moves every one of them into
 * core.primitives.mesh / .hub, so user objects never carry them.
 *
 * The userdata *is* the C object: a mesh's struct lives in its userdata
 * memory, which Lua frees only after __gc has run.  C callbacks that must
 * reach Lua later hold a registry reference, taken and released only through
 * dlua_ref()/dlua_unref() so that core.refs() can prove none leaks.
 *
 * Threads and turns: all of this runs on the thread that runs Lua, which is
 * the loop thread of every mesh (each mesh owns its loop).  Lua is entered
 * from C only through dlua_pcall(), at two kinds of places:
 *
 *   - turns of the runtime: message handlers, init steps, dispose actions,
 *     response callbacks (a response is queued as a turn of the requesting
 *     hub by src/hub/), consumer handlers and their key_of / source_of;
 *   - the binding's own safe point, right after uv_run() of the mesh's loop
 *     has returned (turns.c: dlua_post / dlua_drain): completions of the store
 *     (get, query, write), of activate / recycle / read, of publish, and
 *     the items and failures of a reader (read_durable).  Their C callbacks
 *     run inside libuv callbacks of the store (its uv_async, its watch), so
 *     they only copy what they got (status, message, nodes dup'ed, the
 *     item's text) into the mesh's FIFO queue; the queue is delivered, in
 *     order, one dlua_pcall per event, when no libuv or runtime code is on
 *     the C stack (Neovim's rule: callbacks enqueue, the loop's owner runs
 *     them).
 *
 * The sequence_of / payload_of functions of a durable.source run in turns
 * of the runtime too: the C reader hands a custom source's page to them in
 * a turn of the mesh, never inside the store's callback
 * (src/streams/reader.c).  One kind of Lua still runs where C calls it,
 * because C needs it at once: a log function, called where the line is
 * made; it must be a plain function of its arguments and must not use the
 * mesh.
 */
#ifndef DURABLE_LUA_LCORE_H
#define DURABLE_LUA_LCORE_H

#include <durable_internal.h>
#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>

#include "queue.h"

#define DLUA_MESH_MT "durable.mesh"
#define DLUA_HUB_MT "durable.hub"
#define DLUA_REPLY_MT "durable.reply"

/* Instructions between two looks of the count hook: the budget is checked
 * at this granularity (and never coarser than the budget itself). */
#define DLUA_HOOK_GRAIN 1000
/* The default instruction budget of one entry into Lua from C. */
#define DLUA_DEFAULT_BUDGET 100000000LL

/* Per lua_State bookkeeping, one userdata anchored in the registry. */
typedef struct dlua_state_s {
  long refs;        /* registry references taken through dlua_ref */
  int depth;        /* entries into Lua from C in progress (nesting) */
  long long budget; /* the outermost entry's budget; 0: none */
  long long used;   /* instructions counted against it */
  int ran_away;     /* the budget was exceeded in this entry */
  int meshes;       /* meshes open (not yet closed) */
  lua_State *main;  /* the main thread: where C enters Lua */
} dlua_state_t;

typedef struct dlua_fn_s dlua_fn_t;

/* Something a raw callback of the store handed to the binding, waiting for
 * the mesh's next safe point (see turns.c).  deliver() runs it and frees it;
 * with L == NULL no Lua may run (the mesh is being finalized): it only
 * releases what it holds. */
typedef struct dlua_event_s dlua_event_t;
struct dlua_event_s {
  struct durable__queue link; /* in the mesh's `events` */
  void (*deliver)(dlua_event_t *ev, lua_State *L);
};
typedef struct dlua_reply_s dlua_reply_t;

/* A Lua function held by the mesh for as long as it is open: a handler, an
 * init step, a dispose action. */
struct dlua_fn_s {
  dlua_fn_t *next;
  struct dlua_mesh_s *m;
  int ref;
  char *node_type;
  char *msg_type; /* handlers; "init" / "dispose" for steps */
};

/* The mesh userdata. */
typedef struct dlua_mesh_s {
  durable_mesh_t *mesh; /* NULL before open and once freed */
  uv_loop_t loop;
  uv_timer_t step_timer;
  int loop_ready; /* loop and step timer initialised */
  dlua_state_t *S;
  int closing;      /* durable_mesh_close called */
  int closed;       /* its callback ran: the mesh is freed */
  int running;      /* inside uv_run */
  int finalizing;   /* closed from __gc: no Lua is called any more */
  long long budget; /* instruction budget per entry; 0: none */
  int log_ref;      /* the log function, or LUA_NOREF */
  int in_log;       /* a log line is being delivered (no recursion) */
  dlua_fn_t *fns;   /* functions to release when the mesh is freed */
  /* reply userdata not finished yet (dlua_reply_t) */
  struct durable__queue replies;
  struct dlua_dropped_s *dropped; /* replies collected unfinished: failed
                                     at the next safe point */
  struct dlua_streams_s *streams; /* consumers, their sources (streams.c) */
  /* readers open (reader.c's dlua_sub_t), newest first; set up at the
   * first reader (reader.c: mesh.c only zeroes it) */
  struct durable__queue readers;
  /* dlua_event_t, first in first out: delivered after uv_run */
  struct durable__queue events;
  int draining; /* the queue is being delivered */
  /* a burst of publishes is over: Lua collects, then malloc_trim (mesh.c) */
  dlua_event_t burst_over;
  int burst_over_posted;
  char store_name[256];
} dlua_mesh_t;

/* The hub userdata: a reference on a C hub (durable_hub_ref). Its uservalue
 * is the mesh userdata, so a mesh outlives the hubs that Lua holds. */
typedef struct dlua_hub_s {
  durable_hub_t *hub; /* NULL once released */
  dlua_mesh_t *m;
} dlua_hub_t;

/* The reply userdata: how a handler (or init step) finishes its message,
 * now or later.  Unfinished ones are listed in their mesh so that a reply
 * never outlives the mesh it belongs to. */
struct dlua_reply_s {
  durable_reply_t *reply; /* NULL once finished or detached */
  durable_hub_t *hub;     /* its hub (a reference) while unfinished */
  dlua_mesh_t *m;
  struct durable__queue link; /* in m->replies while unfinished */
};

/* ---- state.c ---- */
void dlua_open_state(lua_State *L); /* stack: module -> module */
dlua_state_t *dlua_state(lua_State *L);
/* luaL_ref on the registry (pops the value), counted. */
int dlua_ref(lua_State *L, dlua_state_t *S);
/* Release *ref (if any) and set it to LUA_NOREF. */
void dlua_unref(lua_State *L, dlua_state_t *S, int *ref);
/* The one way C calls Lua.  stack: fn args... -> results... (or one error
 * message on failure).  Runs under the instruction budget `budget` when it
 * is the outermost entry; nested entries share the outer one's budget.  On
 * failure the message is a plain string (no traceback) and the traceback is
 * kept for dlua_traceback().  Returns the lua_pcall status. */
int dlua_pcall(lua_State *L, dlua_state_t *S, long long budget, int nargs,
               int nresults);
/* The traceback of the last failed dlua_pcall (borrowed; "" if none). */
const char *dlua_traceback(lua_State *L);
/* Push nil, "message", "ECODE" and return 3: the luv convention for an
 * operational failure. */
int dlua_fail(lua_State *L, int code, const char *message);
/* Names taken from Lua -- paths, namespaces, keys, node types, hub
 * addresses, message types, queries -- go to C as C strings, where a NUL
 * byte would end them early ("Space/a\0/../x" would name "Space/a").  Every
 * such argument is taken through these, which refuse a string with a NUL.
 *
 * dlua_text: the string at `idx` (a string or a number, like
 * lua_tolstring), or NULL with `why` set to a line naming `what` when it
 * is none or holds a NUL.  Never raises (for callers with malloc'ed memory
 * in hand). */
const char *dlua_text(lua_State *L, int idx, const char *what, char *why,
                      size_t size);
/* The string at `idx`, or raise: a bad argument when it is no string, "WHAT
 * must not contain a NUL byte (was \"Space/a\\0/...\")" when it has one. */
const char *dlua_check_text(lua_State *L, int idx, const char *what);
/* Like dlua_check_text, but nil or none gives `def`. */
const char *dlua_opt_text(lua_State *L, int idx, const char *what,
                          const char *def);
/* 1 when the string at `idx` holds a NUL byte, with `why` naming `what`. */
int dlua_has_nul(lua_State *L, int idx, const char *what, char *why,
                 size_t size);

/* Push the table at registry[key], creating it first if there is none; a
 * new one gets a metatable {__mode = mode} when `mode` is not NULL.
 * stack: -> table */
void dlua_registry_table(lua_State *L, const void *key, const char *mode);
/* The lua_State C may enter Lua on for `m`, or NULL when it must not (the
 * mesh is being finalized). */
lua_State *dlua_mesh_lua(dlua_mesh_t *m);

/* A pending C request whose completion calls a Lua function once.  Its
 * result is copied into it and it waits in the mesh's queue (its `ev`)
 * until the next safe point; see dlua_req_settle_*(). */
typedef enum {
  DLUA_RES_FAILED = 1, /* (false, message, code) */
  DLUA_RES_TRUE,       /* (true, true) */
  DLUA_RES_INTEGER,    /* (true, integer) */
  DLUA_RES_NODE,       /* (true, node | nil) */
  DLUA_RES_NODES,      /* (true, { nodes }, more) */
  DLUA_RES_JSON        /* (true, the value of JSON `text`) */
} dlua_res_kind_t;

typedef struct dlua_req_s {
  dlua_event_t ev;
  dlua_mesh_t *m;
  int cb_ref;
  dlua_res_kind_t kind;
  int status;             /* FAILED: the DURABLE_E* code */
  char *message;          /* FAILED: malloc'ed, or NULL for durable_strerror */
  long long value;        /* INTEGER */
  durable_node_t *node;   /* NODE: a copy, or NULL */
  durable_node_t **nodes; /* NODES: copies */
  size_t count;
  int more;
  char *text; /* JSON: malloc'ed */
} dlua_req_t;

/* Hold the function at `idx` (raises unless it is a function). */
dlua_req_t *dlua_req_new(lua_State *L, dlua_mesh_t *m, int idx);
/* Release the request (its reference) without calling it. */
void dlua_req_free(dlua_req_t *r);
/* Push the request's function and return the lua_State to call it on; or
 * release the request and return NULL when no Lua may run. */
lua_State *dlua_req_begin(dlua_req_t *r);
/* stack: fn args... (nargs) -- call it, release the request, log a failure. */
void dlua_req_call(dlua_req_t *r, lua_State *L, int nargs);
/* stack: fn -- call it with false, message (NULL: durable_strerror), "ECODE"
 * and release the request: a completion that failed. */
void dlua_req_call_failed(dlua_req_t *r, lua_State *L, int status,
                          const char *message);
/* Copy a result into `r` and queue it for the next safe point of its mesh
 * (called from C callbacks: never raises, never enters Lua).  A copy that
 * cannot be made for want of memory settles `r` failed with ENOMEM. */
void dlua_req_settle_failed(dlua_req_t *r, int status, const char *message);
void dlua_req_settle_true(dlua_req_t *r);
/* A durable_status_cb whose data is a dlua_req_t: settled true, or failed. */
void dlua_req_on_status(int status, const char *message, void *data);
void dlua_req_settle_integer(dlua_req_t *r, long long value);
void dlua_req_settle_node(dlua_req_t *r, const durable_node_t *node);
void dlua_req_settle_nodes(dlua_req_t *r, const durable_node_t **nodes,
                           size_t count, int more);
/* Takes `text` (malloc'ed JSON; NULL settles ENOMEM). */
void dlua_req_settle_json(dlua_req_t *r, char *text);
/* Queue `ev` on `m`: delivered, in the order queued, at the mesh's next safe
 * point (after its uv_run returns, or while it closes). */
void dlua_post(dlua_mesh_t *m, dlua_event_t *ev);
/* The Lua result of submitting `r`: rc >= 0 pushes true (the request now
 * owns `r`); otherwise `r` is freed, DURABLE_EINVAL raises "WHAT: message"
 * ("message" when `what` is NULL), anything else returns nil, message,
 * code.  Returns the number of results, for `return`. */
int dlua_req_submitted(lua_State *L, dlua_req_t *r, int rc,
                       const durable_error_t *err, const char *what);

/* ---- json.c ---- */
/* The value at `idx` as a new jansson value, or NULL with `err` set to a
 * line naming what could not be encoded.  Never raises. */
json_t *dlua_to_json(lua_State *L, int idx, char *err, size_t errlen);
/* The value at `idx` as compact JSON text (malloc'ed), or NULL with `err`
 * set.  A durable.json(text) value at the top is passed through as given. */
char *dlua_encode(lua_State *L, int idx, char *err, size_t errlen);
/* Push the Lua value of `json` (borrowed). */
void dlua_push_json(lua_State *L, const json_t *json);
/* Push the Lua value of JSON `text`; returns 0, or -1 with nothing pushed
 * and `err` set. */
int dlua_decode(lua_State *L, const char *text, char *err, size_t errlen);
/* Push the node as a table (path, namespace, id, node_type, main_node,
 * version, created_at, updated_at, content decoded, raw = content text). */
void dlua_push_node(lua_State *L, const durable_node_t *node);
/* Push durable.null. */
void dlua_push_null(lua_State *L);
void dlua_open_json(lua_State *L); /* stack: module -> module */

/* ---- turns.c: the queue, and the mesh as the other files see it ---- */
dlua_mesh_t *dlua_to_mesh(lua_State *L, int idx);    /* open or closed */
dlua_mesh_t *dlua_check_mesh(lua_State *L, int idx); /* open, usable */
/* Push the mesh userdata of `m` (from the weak registry table); 0 if it is
 * gone (being collected). */
int dlua_push_mesh(lua_State *L, dlua_mesh_t *m);
/* Log one line through the mesh's sink. */
void dlua_mesh_log(dlua_mesh_t *m, durable_log_level_t level, const char *fmt,
                   ...) __attribute__((format(printf, 3, 4)));
/* Raise when Lua is inside a callback from C or the loop is running. */
void dlua_check_may_run(lua_State *L, dlua_mesh_t *m, const char *what);
/* The C mesh's log sink when Lua gave a log function (data: the mesh). */
void dlua_log_sink(durable_log_level_t level, const char *line, void *data);
/* Deliver every queued result, in order (only release them when no Lua may
 * run). */
void dlua_drain(dlua_mesh_t *m);
/* Make the mesh userdata on the stack's top the one dlua_push_mesh finds. */
void dlua_mesh_register(lua_State *L, dlua_mesh_t *m);
void dlua_open_turns(lua_State *L); /* stack unchanged */

/* ---- mesh.c ---- */
void dlua_open_mesh(lua_State *L); /* stack: module -> module */

/* ---- hub.c ---- */
/* Push the hub userdata for `hub` (one per activation, cached weakly);
 * returns 0 if the mesh userdata is gone. */
int dlua_push_hub(lua_State *L, dlua_mesh_t *m, durable_hub_t *hub);
/* Push a reply userdata that owns `reply` (a message of `hub`). */
dlua_reply_t *dlua_push_reply(lua_State *L, dlua_mesh_t *m, durable_hub_t *hub,
                              durable_reply_t *reply);
void dlua_reply_finish(dlua_reply_t *r, int code, const char *payload,
                       const char *message);
/* Fail the replies whose userdata was collected unfinished.  Called only
 * where no runtime code is on the stack (before and after a loop step, at
 * close): a __gc may run inside any allocation, even in the middle of the
 * runtime's own work, so it only queues them. */
void dlua_replies_flush_dropped(dlua_mesh_t *m);
/* Fail the unfinished replies whose hub is dead (while closing: the mesh
 * must not be freed with replies Lua could still finish). */
void dlua_replies_fail_dead(dlua_mesh_t *m);
/* Fail every unfinished reply of `m` (when no Lua can finish them). */
void dlua_replies_fail_all(dlua_mesh_t *m, int code, const char *message);
/* Forget every unfinished reply of `m` (its mesh is freed). */
void dlua_replies_detach(dlua_mesh_t *m);
void dlua_open_hub(lua_State *L); /* stack: module -> module */

/* ---- the stream a call names (streams.c, reader.c) ---- */
/* The stream a call names at 2 (namespace) and 3 (key); raises on a name
 * that is no string or holds a NUL.  Inline: streams.c and reader.c both
 * take it, and reader.c calls nothing of streams.c (which calls it). */
static inline durable_stream_id_t dlua_check_stream(lua_State *L) {
  return (durable_stream_id_t){.ns = dlua_check_text(L, 2, "stream namespace"),
                               .key = dlua_check_text(L, 3, "stream key")};
}

/* ---- source.c ---- */
/* A source for the C reader: a document's parts, or Lua functions. */
typedef struct dlua_src_s dlua_src_t;
struct dlua_src_s {
  struct durable__queue link; /* in the mesh's list, while bound to a hub */
  dlua_mesh_t *m;
  durable_hub_t *hub; /* its hub activation (a reference), or NULL */
  int seq_ref, payload_ref;
  char items_ns[DURABLE_PATH_MAX + 1];
  durable_source_t source;
};
/* A source from the table at `idx` ({ items_namespace=, sequence_of=,
 * payload_of= } or { document= }), or NULL with `err` set.  Never raises. */
dlua_src_t *dlua_src_new(lua_State *L, int idx, dlua_mesh_t *m, char *err,
                         size_t errlen);
/* Release its references, and its hub's when it is bound to one; NULL is
 * nothing. */
void dlua_src_free(dlua_src_t *s);

/* ---- reader.c ---- */
/* Push the item as a table (payload decoded, sequence, raw, stream,
 * appended_at, path); -1 with nothing pushed when its payload is not JSON
 * (`err` says why). */
int dlua_push_item(lua_State *L, const durable_item_t *item, char *err,
                   size_t errlen);
/* Close every reader of `m`: no item is delivered after this. */
void dlua_readers_close(dlua_mesh_t *m);
/* Hub._read and the subscription's metatable. stack: module -> module */
void dlua_open_reader(lua_State *L);

/* ---- streams.c ---- */
/* Let go of what belonged to hub activations that are now dead (sources,
 * a hub's consumers).  After each loop step. */
void dlua_streams_sweep(dlua_mesh_t *m);
/* Close every reader (before the C mesh closes: they watch its store). */
void dlua_streams_closing(dlua_mesh_t *m);
/* Release everything (the C mesh is gone). */
void dlua_streams_release(dlua_mesh_t *m);
/* The module's stream functions, the Mesh and Hub stream methods (and
 * reader.c's).  stack: module -> module */
void dlua_open_streams(lua_State *L);
void dlua_open_run(lua_State *L); /* stack: module -> module (run.c) */

/* The one symbol core.so exports (it is built with hidden visibility and a
 * version script, core.map): what `require "durable.core"` looks up. */
__attribute__((visibility("default"))) int luaopen_durable_core(lua_State *L);

/* The DURABLE_E* code named `name` ("ECONFLICT"), or 0 for NULL and for a
 * name the runtime does not have. */
int dlua_code_named(const char *name);

/* Writes read from a Lua array of { kind=, path=, node_type=, content=,
 * expected_version= } (json.c): the strings stay anchored on the Lua stack,
 * so submit them before the stack is popped; free with dlua_writes_free. */
typedef struct {
  durable_write_t *writes;
  char **texts; /* the encoded contents */
  size_t count;
} dlua_writes_t;
/* 0, or -1 with `why` saying which write is wrong and how (nothing kept). */
int dlua_writes_read(lua_State *L, int idx, dlua_writes_t *out, char *why,
                     size_t whylen);
void dlua_writes_free(dlua_writes_t *w);

#endif

/*
 * publish.c: the producer.
 *
 * "Ensure before you route": the stream node is created before the first
 * append of this process (an idempotent create: "already exists" is
 * success), remembered in the mesh's directory, and only then is the append
 * sent to the stream node's hub.  A refusal makes the producer forget,
 * ensure and resend once.  Only producers create streams; consumers never
 * do.  Requests go out from the read-issuing hub, so a hub that is
 * quiescing can still publish.
 *
 * The stream hub appends as the platform, for whoever asked; so a mesh
 * acting as a principal has its right checked here, before the stream node
 * is made or the append sent: write on the stream's owner (its key).  A
 * denial fails the publish with DURABLE_EACCES and writes nothing.
 *
 * A publish with an id (durable_stream_publish_with) first reads the id's
 * node: present, the publish is answered with the sequence it names and
 * nothing is sent.  That read is off the stream hub's chain, so producers
 * without ids never wait for it.  It is only the common case made cheap:
 * a duplicate that gets past it (a retry racing its first attempt, another
 * process) loses on the id node's key in the stream hub's transaction,
 * which then answers the first sequence (stream_hub_ids.c).
 *
 * Every publish takes its place in the mesh's publish window (window.c)
 * before anything else: it may wait there for room.  So a publish is one
 * block -- the struct, then its strings -- whose size is what the window
 * counts.
 *
 * The publishes of one stream go to its hub in the order they were
 * started, whatever their way there: a first one that makes the stream
 * node, an id read that answers later than the one after it.  So each
 * stream has a lane here: the publishes started and not sent yet, in
 * order; one is sent when it is ready (its id read, the stream node made)
 * and every one before it has been sent.  The stream hub's mailbox keeps
 * that order from there on.
 *
 *   publish --> lane: [p1 (id read...)] [p2 ready] [p3 ready] --> stream hub
 *                      the head goes first; p2 waits for p1
 */
#include "protocol.h"
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct lane_s lane_t;

typedef struct {
  durable__window_slot_t slot; /* first: the window hands it back */
  durable_mesh_t *mesh;
  lane_t *lane;               /* its stream's, until it is sent */
  struct durable__queue link; /* in lane->waiting */
  uint64_t order;             /* when it was started: the lane's order */
  int ready;                  /* its id read (or none): it may be sent */
  int no_owner; /* no warning for a stream it makes with no owner */
  char *ns, *key, *path, *payload; /* in the same block, after the struct */
  char *publish_id;                /* NULL: none */
  char *id_path;                   /* ... its node */
  durable_sequence_cb cb;
  void *data;
  int resent;
} publish_t;

/* ---- lanes: the order of one stream's publishes -------------------------- */

struct lane_s {
  durable_mesh_t *mesh;
  struct durable__queue waiting; /* publish_t not sent yet, in order */
  int ensuring;                  /* the stream node's create is out */
  int pumping;                   /* inside pump: it is not freed there */
  char path[];
};

typedef struct {
  durable__map_t lanes; /* stream path -> lane_t */
  uint64_t started;     /* publishes started: the next order */
} lanes_t;

static const char lanes_key; /* the state's key: its address */

static void lanes_free(void *data) {
  lanes_t *l = data;
  const char *key;
  void *value;
  for (size_t i = 0; durable__map_next(&l->lanes, &i, &key, &value);) {
    lane_t *lane = value;
    while (durable__queue_pop(&lane->waiting) != NULL)
      ; /* publishes let go of (the mesh answered them) */
    free(lane);
  }
  durable__map_free(&l->lanes);
  free(l);
}

int durable__publish_install(durable_mesh_t *mesh) {
  return durable__mesh_state_add(mesh, &lanes_key, sizeof(lanes_t), lanes_free);
}

/* A lane with nothing in it and nothing out goes. */
static void lane_maybe_free(lane_t *lane) {
  if (!durable__queue_empty(&lane->waiting) || lane->ensuring || lane->pumping)
    return;
  lanes_t *l = durable__mesh_state(lane->mesh, &lanes_key);
  if (l)
    durable__map_del(&l->lanes, lane->path);
  free(lane);
}

/* Take p out of its lane (sent, or answered before). */
static void pump(lane_t *lane);

/* Take p out of its lane (answered before it was sent: an id the stream
 * held, a failure); those behind it may go now. */
static void lane_leave(publish_t *p) {
  lane_t *lane = p->lane;
  if (lane == NULL)
    return;
  durable__queue_remove(&p->link);
  p->lane = NULL;
  pump(lane); /* frees the lane when nothing is left in it */
}

/* Put p in its stream's lane, in the order it was started (a publish sent
 * again goes back to its place).  0, or DURABLE_ENOMEM. */
static int lane_join(publish_t *p) {
  lanes_t *l = durable__mesh_state(p->mesh, &lanes_key);
  if (l == NULL)
    return DURABLE_ESHUTDOWN;
  lane_t *lane = durable__map_get(&l->lanes, p->path);
  if (lane == NULL) {
    size_t n = strlen(p->path) + 1;
    if ((lane = calloc(1, sizeof(*lane) + n)) == NULL)
      return DURABLE_ENOMEM;
    lane->mesh = p->mesh;
    durable__queue_init(&lane->waiting);
    memcpy(lane->path, p->path, n);
    if (durable__map_put(&l->lanes, lane->path, lane) < 0) {
      free(lane);
      return DURABLE_ENOMEM;
    }
  }
  if (p->order == 0)
    p->order = ++l->started;
  struct durable__queue *q = lane->waiting.prev; /* from the tail back */
  while (q != &lane->waiting &&
         DURABLE__QUEUE_DATA(q, publish_t, link)->order > p->order)
    q = q->prev;
  durable__queue_insert_head(q, &p->link); /* after q */
  p->lane = lane;
  return 0;
}

/* The callback, once; then the publish is freed, and when it was in
 * flight its room goes to those waiting. */
static void answer(publish_t *p, int in_flight, int status, int64_t seq,
                   const char *why) {
  durable_mesh_t *mesh = p->mesh;
  size_t bytes = p->slot.bytes;
  if (status < 0) {
    durable_stream_id_t id = {.ns = p->ns, .key = p->key};
    char message[DURABLE_PATH_MAX + 1024];
    snprintf(
        message, sizeof message, "Appending to durable stream %s failed: %s",
        durable__stream_name(&id).text, why ? why : durable_strerror(status));
    p->cb(status, 0, message, p->data);
  } else {
    p->cb(0, seq, NULL, p->data);
  }
  lane_leave(p); /* after: those behind it are answered after it */
  free(p);
  if (in_flight)
    durable__window_leave(mesh, bytes);
}

static void finish(publish_t *p, int status, int64_t seq, const char *why) {
  answer(p, 1, status, seq, why);
}

/* Ready: in its lane, sent once the publishes before it are. */
static void ready(publish_t *p) {
  p->ready = 1;
  pump(p->lane);
}

static void on_appended(const durable_response_t *res, void *data) {
  publish_t *p = data;
  if (res->status == 0) {
    const durable__stream_ans_t *ans = durable__stream_answer(res);
    int64_t seq = ans ? ans->sequence : 0;
    if (seq > 0)
      durable__stream_count(p->mesh, p->ns, p->key, NULL,
                            DURABLE__COUNT_APPENDED, 1);
    if (seq > 0)
      finish(p, 0, seq, NULL);
    else
      finish(p, DURABLE_EIO, 0, "the stream hub gave no sequence");
    return;
  }
  int refused =
      res->status == DURABLE_ENOTFOUND || res->status == DURABLE_ESHUTDOWN;
  if (refused && !p->resent) {
    durable_stream_id_t id = {.ns = p->ns, .key = p->key};
    durable_mesh_log(
        p->mesh, DURABLE_LOG_WARN,
        "[DurableStreams] %s: the stream node refused " DURABLE__MSG_APPEND
        " (%s); ensuring it exists and resending once",
        durable__stream_name(&id).text, res->message);
    p->resent = 1;
    durable__directory_forget(p->mesh, p->path);
    int rc = lane_join(p); /* back to its place: before what came after it */
    if (rc < 0)
      finish(p, rc, 0, durable_strerror(rc));
    else
      ready(p);
    return;
  }
  finish(p, res->status, 0, res->message);
}

static void send_append(publish_t *p) {
  durable__stream_req_t *req =
      durable__stream_append_new(p->payload, p->publish_id);
  durable_error_t err = {0};
  int rc = req ? durable__hub_request_body(durable__mesh_reads_hub(p->mesh),
                                           p->path, DURABLE__MSG_APPEND,
                                           &req->base, 0, on_appended, p, &err)
               : durable__error(&err, DURABLE_ENOMEM, "out of memory");
  if (rc < 0)
    finish(p, rc, 0, err.message);
}

/* The stream node could not be made: every publish ready to go fails
 * with why (one not ready yet tries again when it is). */
static void fail_ready(lane_t *lane, int status, const char *why) {
  /* those ready now, taken aside first: answering one may start others
   * (room in the window, a callback that publishes), which join the lane
   * and are not this failure's */
  struct durable__queue failing, *q, *next;
  durable__queue_init(&failing);
  DURABLE__QUEUE_FOREACH_SAFE(q, next, &lane->waiting) {
    publish_t *p = DURABLE__QUEUE_DATA(q, publish_t, link);
    if (p->ready) {
      durable__queue_remove(&p->link);
      durable__queue_insert_tail(&failing, &p->link);
      p->lane = NULL;
    }
  }
  lane->pumping = 1;
  while ((q = durable__queue_pop(&failing)) != NULL)
    finish(DURABLE__QUEUE_DATA(q, publish_t, link), status, 0, why);
  lane->pumping = 0;
  pump(lane);
}

/* A stream just made whose owner has no node: consumed by no host (a
 * typo in the key or the family?).  Said once, as the stream is made; the
 * publish goes on -- a consumer on another hub (hub:consume) reads a
 * stream by its key alone, and an owner may be made later. */
typedef struct {
  durable_mesh_t *mesh;
  char name[sizeof(durable__stream_name_t)];
  char key[DURABLE_PATH_MAX + 1];
} owner_look_t;

static void on_owner(const durable_result_t *res, void *data) {
  owner_look_t *o = data;
  if (res->status == 0 && res->value == 0) /* (the mesh outlives the answer) */
    durable_mesh_log(o->mesh, DURABLE_LOG_WARN,
                     "[DurableStreams] %s: made, but there is no node at %s, "
                     "its owner: no host consumes it until one is put there "
                     "(a consumer that reads it by its key aside)",
                     o->name, o->key);
  free(o);
}

static void look_at_owner(durable_mesh_t *mesh, const publish_t *p) {
  if (mesh->closing)
    return; /* its store may be on its way out (the stream is made) */
  owner_look_t *o = malloc(sizeof(*o));
  if (o == NULL)
    return; /* a warning lost, nothing else */
  durable_stream_id_t id = {.ns = p->ns, .key = p->key};
  o->mesh = mesh;
  snprintf(o->name, sizeof o->name, "%s", durable__stream_name(&id).text);
  snprintf(o->key, sizeof o->key, "%s", p->key);
  if (durable_store_exists(durable_mesh_store(mesh),
                           durable_mesh_principal(mesh), p->key, on_owner, o,
                           NULL) < 0)
    free(o);
}

static void on_ensured(const durable_result_t *res, void *data) {
  lane_t *lane = data;
  lane->ensuring = 0;
  if (res->status < 0 && res->status != DURABLE_EEXIST) {
    fail_ready(lane, res->status, res->message);
    return;
  }
  struct durable__queue *q = durable__queue_head(&lane->waiting);
  publish_t *head =
      q != &lane->waiting ? DURABLE__QUEUE_DATA(q, publish_t, link) : NULL;
  if (res->status == 0 && head && !head->no_owner) /* made now */
    look_at_owner(lane->mesh, head);
  durable__directory_mark(lane->mesh, lane->path);
  pump(lane);
}

/* Make the stream node (an idempotent create: "already exists" is
 * success), once for all the lane's publishes. */
static void ensure(lane_t *lane, const publish_t *p) {
  durable__stream_state_t s = {.ns = p->ns, .key = p->key};
  char *content = durable__state_encode(&s);
  durable_error_t err = {0};
  int rc = content ? durable_store_create(durable_mesh_store(lane->mesh),
                                          lane->path, DURABLE__STREAM_TYPE,
                                          content, on_ensured, lane, &err)
                   : durable__error(&err, DURABLE_ENOMEM, "out of memory");
  free(content);
  if (rc < 0)
    fail_ready(lane, rc, err.message);
  else
    lane->ensuring = 1;
}

/* Send the lane's publishes from its head while they are ready, once the
 * stream node is known to be there. */
static void pump(lane_t *lane) {
  if (lane->pumping || lane->ensuring)
    return;
  struct durable__queue *q = durable__queue_head(&lane->waiting);
  if (q == &lane->waiting) {
    lane_maybe_free(lane);
    return;
  }
  publish_t *head = DURABLE__QUEUE_DATA(q, publish_t, link);
  if (!head->ready)
    return;
  if (!durable__directory_has(lane->mesh, lane->path)) {
    ensure(lane, head);
    return;
  }
  lane->pumping = 1;
  while ((q = durable__queue_head(&lane->waiting)) != &lane->waiting) {
    publish_t *p = DURABLE__QUEUE_DATA(q, publish_t, link);
    if (!p->ready)
      break;
    durable__queue_remove(&p->link);
    p->lane = NULL;
    send_append(p);
  }
  lane->pumping = 0;
  lane_maybe_free(lane);
}

/* The id's node, read before anything is sent: present, that is the
 * answer; absent (or unreadable: the stream hub's write decides then), the
 * append goes out. */
static void on_id_read(const durable_result_t *res, void *data) {
  publish_t *p = data;
  int64_t seq =
      res->status == 0 ? durable__publish_id_sequence(res->node->content) : 0;
  if (seq == DURABLE_ENOMEM)
    finish(p, DURABLE_ENOMEM, 0, "out of memory reading its publish id");
  else if (res->status == 0 && seq <= 0)
    finish(p, DURABLE_EIO, 0, "the node of its publish id holds no Sequence");
  else if (seq > 0)
    finish(p, 0, seq, NULL);
  else
    ready(p);
}

/* Its place in the lane, the id lookup (with an id), then the stream node
 * and the append. */
static void start(publish_t *p) {
  int rc = lane_join(p);
  if (rc < 0) {
    finish(p, rc, 0, durable_strerror(rc));
    return;
  }
  durable_error_t err = {0};
  if (p->id_path == NULL ||
      durable_store_get(durable_mesh_store(p->mesh),
                        durable_mesh_principal(p->mesh), p->id_path, on_id_read,
                        p, &err) < 0)
    ready(p);
}

static void on_allowed(const durable_result_t *res, void *data) {
  publish_t *p = data;
  if (res->status < 0)
    finish(p, res->status, 0, res->message);
  else if (p->mesh->closing)
    finish(p, DURABLE_ESHUTDOWN, 0, "the mesh is closing");
  else
    start(p);
}

int durable_stream_publish(durable_hub_t *hub, const durable_stream_id_t *id,
                           const char *payload, durable_sequence_cb cb,
                           void *data, durable_error_t *err) {
  return durable_stream_publish_with(hub, id, payload, NULL, cb, data, err);
}

/* No text, only white space, or JSON's null: "... needs a payload.", since
 * an item carries a JSON value other than null (a null payload is refused
 * by the Lua and the C faces alike, and so by `durable publish`). */
static int is_no_payload(const char *payload) {
  return payload == NULL || strspn(payload, " \t\r\n") == strlen(payload) ||
         durable__json_is_null(payload);
}

/* The payload rule, for a stream already checked. */
static int payload_check(const durable_stream_id_t *id, const char *payload,
                         durable_error_t *err) {
  durable__stream_name_t name = durable__stream_name(id);
  if (is_no_payload(payload))
    return durable__error(err, DURABLE_EINVAL,
                          "A durable stream item for %s needs a payload.",
                          name.text);
  json_error_t je;
  if (durable__json_check(payload, &je) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "A durable stream item for %s is not JSON: %s at "
                          "line %d column %d",
                          name.text, je.text, je.line, je.column);
  return 0;
}

int durable_stream_payload_check(const durable_stream_id_t *id,
                                 const char *payload, durable_error_t *err) {
  int rc = durable_stream_check(id, err);
  return rc < 0 ? rc : payload_check(id, payload, err);
}

/* It waited in the window, and may not go: never sent. */
static void on_window_failed(durable__window_slot_t *slot, int status,
                             const char *message) {
  answer((publish_t *)slot, 0, status, 0, message);
}

/* In flight: the principal's right first, then the publish.  A check
 * that cannot be asked is the caller's to report (< 0, `err`). */
static int begin(publish_t *p, durable_error_t *err) {
  const char *principal = durable_mesh_principal(p->mesh);
  if (principal == NULL) {
    start(p);
    return 0;
  }
  return durable__store_access(durable_mesh_store(p->mesh), principal, p->key,
                               DURABLE_GRANT_WRITE, on_allowed, p, err);
}

static void on_window_go(durable__window_slot_t *slot) {
  publish_t *p = (publish_t *)slot;
  durable_error_t err = {0};
  int rc = begin(p, &err);
  if (rc < 0)
    finish(p, rc, 0, err.message);
}

/* Copy `text` (NULL: none) to *at, advancing it. */
static char *put_text(char **at, const char *text) {
  if (text == NULL)
    return NULL;
  size_t n = strlen(text) + 1;
  char *out = memcpy(*at, text, n);
  *at += n;
  return out;
}

int durable_stream_publish_with(durable_hub_t *hub,
                                const durable_stream_id_t *id,
                                const char *payload,
                                const durable_publish_options_t *options,
                                durable_sequence_cb cb, void *data,
                                durable_error_t *err) {
  int rc = durable_stream_check(id, err);
  if (rc < 0)
    return rc;
  const char *publish_id = options ? options->id : NULL;
  if (publish_id && (rc = durable_publish_id_check(id, publish_id, err)) < 0)
    return rc;
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "callback is missing");
  if ((rc = payload_check(id, payload, err)) < 0) /* the stream checked above */
    return rc;
  durable_mesh_t *mesh = durable_hub_mesh(hub);
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  char path[DURABLE_PATH_MAX + 1], id_path[DURABLE_PATH_MAX + 1];
  durable_stream_path(id, path, sizeof path);
  if (publish_id)
    durable__publish_id_path(path, publish_id, id_path, sizeof id_path, NULL);
  size_t size = sizeof(publish_t) + strlen(id->ns) + strlen(id->key) +
                strlen(path) + strlen(payload) + 4 +
                (publish_id ? strlen(publish_id) + strlen(id_path) + 2 : 0);
  publish_t *p = malloc(size);
  if (p == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  char *at = (char *)(p + 1);
  *p = (publish_t){.mesh = mesh,
                   .cb = cb,
                   .data = data,
                   .no_owner = options && options->no_owner};
  p->ns = put_text(&at, id->ns);
  p->key = put_text(&at, id->key);
  p->path = put_text(&at, path);
  p->payload = put_text(&at, payload);
  p->publish_id = put_text(&at, publish_id);
  p->id_path = publish_id ? put_text(&at, id_path) : NULL;
  p->slot.bytes = size;
  p->slot.go = on_window_go;
  p->slot.fail = on_window_failed;
  rc = durable__window_enter(mesh, &p->slot, err);
  if (rc == 1 && (rc = begin(p, err)) < 0)
    durable__window_leave(mesh, size); /* refused: never in flight */
  if (rc < 0)
    free(p);
  return rc < 0 ? rc : 0;
}

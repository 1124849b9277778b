/*
 * outbox.c: the appends to other streams that a stream item's handler makes
 * as effects, committed with the item's acknowledgement
 * (durable_reply_commit_with).
 *
 * An append cannot join the acknowledgement's transaction itself: its
 * sequence is for its own stream's hub to give.  So the transaction records
 * it -- a write-once outbox node {stream's owner}/_DurableOutbox/{id} naming
 * the stream, the payload and the id -- and once that has committed, the
 * append is made with the id as its publish id, and the node removed.  A
 * process that dies in between leaves the node behind; the next claim of a
 * stream of that owner makes the append before it handles anything (the
 * publish id keeps it to one item, however often it is tried).  Ids begin
 * with the time and a counter, so pending appends go out in the order they
 * were committed.
 *
 *   item handled --> [ ack + effects + outbox nodes ] --> append(id) --> rm
 *                          one transaction                  (idempotent)
 */
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OUTBOX_SEGMENT "_DurableOutbox"
#define OUTBOX_TYPE "DurableOutbox"

typedef struct {
  char *path; /* the outbox node */
  char *ns, *key, *payload, *id;
} entry_t;

struct durable__outbox_s {
  durable_mesh_t *mesh;
  size_t count, next;
  void (*done)(int status, const char *message, void *data);
  void *data;
  entry_t entries[];
};

static void entry_clear(entry_t *e) {
  free(e->path);
  free(e->ns);
  free(e->key);
  free(e->payload);
  free(e->id);
}

void durable__outbox_free(durable__outbox_t *box) {
  if (box == NULL)
    return;
  for (size_t i = 0; i < box->count; i++)
    entry_clear(&box->entries[i]);
  free(box);
}

static durable__outbox_t *box_new(durable_mesh_t *mesh, size_t count) {
  durable__outbox_t *box =
      calloc(1, sizeof(*box) + count * sizeof(box->entries[0]));
  if (box) {
    box->mesh = mesh;
    box->count = count;
  }
  return box;
}

/* "{ms:013}-{counter:08}-{random:08x}": ordered by commit, unique. */
static void new_id(char *out, size_t size) {
  static uint32_t counter;
  static int seeded;
  if (!seeded) {
    srandom((unsigned)time(NULL) ^ (unsigned)(uintptr_t)&counter);
    seeded = 1;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  long long ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  snprintf(out, size, "%013lld-%08x-%08lx", ms, (unsigned)++counter,
           (unsigned long)(random() & 0xffffffffUL));
}

static char *entry_json(const entry_t *e) {
  json_t *o = json_pack("{s:s, s:s, s:s, s:s}", "Namespace", e->ns, "Key",
                        e->key, "Id", e->id, "PayloadJson", e->payload);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

durable__write_set_t *durable__outbox_writes(durable_hub_t *hub,
                                             const char *owner,
                                             const durable__commit_t *commit,
                                             durable__outbox_t **out,
                                             durable_error_t *err) {
  *out = NULL;
  size_t nw = commit->writes ? commit->writes->count : 0;
  size_t np = commit->npublishes;
  for (size_t i = 0; i < np; i++) {
    durable_error_t why = {0};
    if (durable_stream_check(&commit->publishes[i].stream, &why) < 0) {
      durable__error(err, DURABLE_EINVAL, "append %zu: %s", i + 1, why.message);
      return NULL;
    }
  }
  durable__outbox_t *box = box_new(durable_hub_mesh(hub), np);
  durable_write_t *w = calloc(nw + np + 1, sizeof(*w));
  char **texts = calloc(np + 1, sizeof(char *));
  durable__write_set_t *set = NULL;
  int ok = box && w && texts;
  for (size_t i = 0; ok && i < nw; i++)
    w[i] = commit->writes->writes[i];
  for (size_t i = 0; ok && i < np; i++) {
    const durable_publish_t *p = &commit->publishes[i];
    entry_t *e = &box->entries[i];
    char id[48], path[DURABLE_PATH_MAX + 1];
    new_id(id, sizeof id);
    int n = snprintf(path, sizeof path, "%s/" OUTBOX_SEGMENT "/%s", owner, id);
    if (n < 0 || (size_t)n >= sizeof path) {
      durable__error(err, DURABLE_EINVAL,
                     "the outbox of '%s' would have too long a path", owner);
      ok = 0;
      break;
    }
    e->path = strdup(path);
    e->ns = strdup(p->stream.ns);
    e->key = strdup(p->stream.key);
    e->payload = strdup(p->payload);
    e->id = strdup(id);
    ok = e->path && e->ns && e->key && e->payload && e->id &&
         (texts[i] = entry_json(e)) != NULL;
    w[nw + i] = (durable_write_t){.kind = DURABLE_WRITE_CREATE,
                                  .path = e->path,
                                  .node_type = OUTBOX_TYPE,
                                  .content = texts[i]};
  }
  if (ok)
    set = durable__write_set_new(w, nw + np, err);
  else if (err && err->code == 0)
    durable__error(err, DURABLE_ENOMEM, "out of memory");
  for (size_t i = 0; texts && i < np; i++)
    free(texts[i]);
  free(texts);
  free(w);
  if (set == NULL) {
    durable__outbox_free(box);
    return NULL;
  }
  *out = box;
  return set;
}

/* ---- may the principal append there?
 * -------------------------------------------------------------------- */

typedef struct {
  durable__outbox_t *box;
  size_t i;
  void (*done)(int status, const char *message, void *data);
  void *data;
} check_t;

static void check_next(check_t *k);

static void on_checked(const durable_result_t *res, void *data) {
  check_t *k = data;
  if (res->status < 0) {
    k->done(res->status, res->message, k->data);
    free(k);
    return;
  }
  k->i++;
  check_next(k);
}

static void check_next(check_t *k) {
  durable__outbox_t *box = k->box;
  const char *principal = durable_mesh_principal(box->mesh);
  durable_error_t err = {0};
  while (k->i < box->count) {
    if (durable__store_access(durable_mesh_store(box->mesh), principal,
                              box->entries[k->i].key, DURABLE_GRANT_WRITE,
                              on_checked, k, &err) == 0)
      return;
    k->done(err.code ? err.code : DURABLE_EINVAL, err.message, k->data);
    free(k);
    return;
  }
  k->done(0, NULL, k->data);
  free(k);
}

void durable__outbox_check(durable__outbox_t *box,
                           void (*done)(int status, const char *message,
                                        void *data),
                           void *data) {
  if (box == NULL || durable_mesh_principal(box->mesh) == NULL) {
    done(0, NULL, data); /* the platform may */
    return;
  }
  check_t *k = malloc(sizeof(*k));
  if (k == NULL) {
    done(DURABLE_ENOMEM, "out of memory", data);
    return;
  }
  *k = (check_t){.box = box, .done = done, .data = data};
  check_next(k);
}

/* ---- sending
 * -------------------------------------------------------------------- */

static void send_next(durable__outbox_t *box);

static void finish(durable__outbox_t *box, int status, const char *message) {
  if (box->done)
    box->done(status, message, box->data);
  durable__outbox_free(box);
}

static void on_removed(const durable_result_t *res, void *data) {
  durable__outbox_t *box = data;
  entry_t *e = &box->entries[box->next];
  if (res->status < 0 && res->status != DURABLE_ENOTFOUND)
    /* appended all the same: a later claim tries again, and the id keeps
     * it to one item */
    durable_mesh_log(box->mesh, DURABLE_LOG_WARN,
                     "Durable stream outbox: could not remove %s: %s", e->path,
                     res->message);
  box->next++;
  send_next(box);
}

static void on_sent(int status, int64_t sequence, const char *message,
                    void *data) {
  durable__outbox_t *box = data;
  entry_t *e = &box->entries[box->next];
  (void)sequence;
  if (status == DURABLE_EACCES || status == DURABLE_EINVAL) {
    /* it never will be made: say so, keep the node, go on with the rest */
    durable_mesh_log(box->mesh, DURABLE_LOG_ERROR,
                     "Durable stream outbox: the append %s to %s@%s is "
                     "refused (%s); its node %s is left for an operator",
                     e->id, e->ns, e->key, message, e->path);
    box->next++;
    send_next(box);
    return;
  }
  if (status < 0) {
    durable_mesh_log(box->mesh, DURABLE_LOG_WARN,
                     "Durable stream outbox: the append %s to %s@%s is not "
                     "made yet (%s); the next claim tries again",
                     e->id, e->ns, e->key, message);
    finish(box, status, message);
    return;
  }
  durable_write_t rm = {.kind = DURABLE_WRITE_DELETE, .path = e->path};
  durable_error_t err = {0};
  if (durable_store_write_as(durable_mesh_store(box->mesh),
                             durable_mesh_principal(box->mesh), &rm, 1,
                             on_removed, box, &err) < 0) {
    box->next++;
    send_next(box);
  }
}

/* One at a time, in order: an append waits for the one before it. */
static void send_next(durable__outbox_t *box) {
  if (box->next >= box->count) {
    finish(box, 0, NULL);
    return;
  }
  entry_t *e = &box->entries[box->next];
  durable_stream_id_t id = {.ns = e->ns, .key = e->key};
  durable_publish_options_t o = {.id = e->id};
  durable_error_t err = {0};
  if (durable_stream_publish_with(durable__mesh_reads_hub(box->mesh), &id,
                                  e->payload, &o, on_sent, box, &err) < 0)
    on_sent(err.code ? err.code : DURABLE_EINVAL, 0, err.message, box);
}

void durable__outbox_send(durable__outbox_t *box,
                          void (*done)(int status, const char *message,
                                       void *data),
                          void *data) {
  if (box == NULL) {
    if (done)
      done(0, NULL, data);
    return;
  }
  box->done = done;
  box->data = data;
  send_next(box);
}

/* ---- what an earlier holder left
 * ------------------------------------------------------------------ */

typedef struct {
  durable_mesh_t *mesh;
  void (*done)(int status, const char *message, void *data);
  void *data;
} resume_t;

/* 0, DURABLE_EINVAL for a node that is no entry (made by hand), or
 * DURABLE_ENOMEM. */
static int entry_from(entry_t *e, const durable_node_t *node) {
  int rc = 0;
  json_t *o = durable__json_tree(node->content, &rc);
  /* json_object_get, not json_unpack: unpacking an object allocates, and
   * its failure would read as a node that is no entry */
  const char *ns = json_string_value(json_object_get(o, "Namespace"));
  const char *key = json_string_value(json_object_get(o, "Key"));
  const char *id = json_string_value(json_object_get(o, "Id"));
  const char *payload = json_string_value(json_object_get(o, "PayloadJson"));
  if (o != NULL)
    rc = ns && key && id && payload ? 0 : DURABLE_EINVAL;
  if (rc == 0) {
    e->path = strdup(node->path);
    e->ns = strdup(ns);
    e->key = strdup(key);
    e->id = strdup(id);
    e->payload = strdup(payload);
    if (!e->path || !e->ns || !e->key || !e->id || !e->payload) {
      entry_clear(e);
      memset(e, 0, sizeof *e);
      rc = DURABLE_ENOMEM;
    }
  }
  json_decref(o);
  return rc;
}

static void on_listed(const durable_result_t *res, void *data) {
  resume_t *r = data;
  durable_mesh_t *mesh = r->mesh;
  void (*done)(int, const char *, void *) = r->done;
  void *done_data = r->data;
  free(r);
  if (res->status < 0 || res->count == 0) {
    /* nothing left (or unreadable now: the next claim looks again) */
    done(res->status == DURABLE_ENOTFOUND ? 0 : res->status, res->message,
         done_data);
    return;
  }
  durable__outbox_t *box = box_new(mesh, res->count);
  size_t k = 0;
  int rc = box ? 0 : DURABLE_ENOMEM;
  for (size_t i = 0; rc != DURABLE_ENOMEM && i < res->count; i++) {
    rc = entry_from(&box->entries[k], res->nodes[i]);
    if (rc == 0)
      k++;
    else if (rc == DURABLE_EINVAL)
      durable_mesh_log(mesh, DURABLE_LOG_WARN,
                       "Durable stream outbox: %s is not an outbox entry; "
                       "left as it is",
                       res->nodes[i]->path);
  }
  if (box)
    box->count = k;
  if (rc == DURABLE_ENOMEM) {
    /* none sent, rather than some without one before them: the next claim
     * looks again */
    durable__outbox_free(box);
    done(DURABLE_ENOMEM, "out of memory", done_data);
    return;
  }
  durable_mesh_log(mesh, DURABLE_LOG_INFO,
                   "Durable stream outbox: making %zu append(s) an earlier "
                   "holder committed but had not made",
                   k);
  durable__outbox_send(box, done, done_data);
}

int durable__outbox_resume(durable_mesh_t *mesh, const char *owner,
                           void (*done)(int status, const char *message,
                                        void *data),
                           void *data, durable_error_t *err) {
  char query[DURABLE_PATH_MAX + 64];
  int n = snprintf(query, sizeof query, "namespace:%s/" OUTBOX_SEGMENT, owner);
  if (n < 0 || (size_t)n >= sizeof query)
    return durable__error(err, DURABLE_EINVAL, "owner path too long");
  resume_t *r = malloc(sizeof(*r));
  if (r == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  *r = (resume_t){.mesh = mesh, .done = done, .data = data};
  /* a page of 1000 is plenty: each claim sends what it finds */
  int rc = durable_store_query(durable_mesh_store(mesh),
                               durable_mesh_principal(mesh), query, NULL, 1000,
                               on_listed, r, err);
  if (rc < 0)
    free(r);
  return rc;
}

/*
 * feed.c: the change feed and synced queries.
 *
 * A watch follows the children of one namespace.  It is registered before
 * its first read, so nothing committed after the registration can slip by:
 *
 *     watch()  -> registered -> read pages ... -> SYNCED -> live changes
 *                    |  in-process commits while reading are buffered,
 *                    |  then replayed after the last page
 *
 * The watch remembers each child's version (a JSON object id -> version:
 * jansson's hash table).  A change whose version it has already seen is a
 * duplicate and is dropped, which is what makes every source of changes
 * safe to repeat: this process's commits arrive exactly (write.c records
 * them), other processes' commits arrive as "namespace NS changed" from the
 * backend's watch source (SQLite polling, PostgreSQL NOTIFY), and such a
 * signal -- or "anything may have changed" after a reconnect -- makes the
 * watch re-read its namespace and diff it against what it knows.  Versions
 * are store-wide and grow with every write, also across a delete and a
 * re-create, so a stale removal can never hide a newer node.
 *
 * A signal watch (DURABLE__WATCH_SIGNAL) skips all of that: no reads, no
 * versions; it hears this process's commits as they are and "changed
 * elsewhere" as a NULL node, and reads what it needs itself.
 */
#include "engine.h"
#include "queue.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 500

typedef enum { W_READING_INITIAL, W_LIVE, W_READING_RESYNC } wstate_t;

struct durable_watch_s {
  durable_store_t *store;
  struct durable__queue link; /* in the feed's list, newest first */
  char *ns;
  int flags;
  durable_change_cb cb;
  void *data;
  json_t *known; /* id -> version */
  json_t *seen;  /* during a re-sync: ids the re-read found */
  wstate_t state;
  int resync_pending; /* a signal arrived while reading */
  int job_in_flight;
  int closed;
  int busy;   /* inside its callback */
  int linked; /* in the feed's list */
  durable__event_t *buffer;
  size_t nbuf;
};

struct durable__feed_s {
  struct durable__queue watches;
  int dispatching; /* closed watches stay listed until it ends */
  void (*foreign)(void *data, const char *ns);
  void *foreign_data;
  void (*session_lost)(void *data);
  void *session_lost_data;
};
typedef durable__feed_t feed_t;

/* The store's feed, made at its first use (NULL when memory ran out). */
static feed_t *feed_of(durable_store_t *store) {
  if (store->feed == NULL && (store->feed = calloc(1, sizeof(feed_t))) != NULL)
    durable__queue_init(&store->feed->watches);
  return store->feed;
}

static durable_watch_t *watch_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, durable_watch_t, link);
}

static void unlink_watch(durable_watch_t *w) {
  if (w->linked)
    durable__queue_remove(&w->link);
  w->linked = 0;
}

static void free_buffer(durable_watch_t *w) {
  for (size_t i = 0; i < w->nbuf; i++)
    durable_node_free(w->buffer[i].node);
  free(w->buffer);
  w->buffer = NULL;
  w->nbuf = 0;
}

static void free_watch(durable_watch_t *w) {
  free_buffer(w);
  json_decref(w->known);
  json_decref(w->seen);
  free(w->ns);
  free(w);
}

/* A closed watch goes once nothing holds it any more: its callback has
 * returned, its read in flight has come back, and the feed's list no longer
 * has it.  A callback may close its own watch or any other. */
static void maybe_free(durable_watch_t *w) {
  if (w->closed && w->busy == 0 && !w->job_in_flight && !w->linked)
    free_watch(w);
}

/* Call the watch's callback.  Returns 0 when the callback closed the watch:
 * the caller must not touch it again. */
static int emit(durable_watch_t *w, durable_change_kind_t kind,
                const durable_node_t *node) {
  w->busy++;
  w->cb(w, kind, node, w->data);
  w->busy--;
  if (!w->closed)
    return 1;
  maybe_free(w);
  return 0;
}

/* Pass one change through the version filter, and on to the callback when
 * `to_cb`.  Returns 0 when the callback closed the watch (see emit). */
static int apply(durable_watch_t *w, durable_change_kind_t kind,
                 const durable_node_t *node, int to_cb) {
  json_t *known = json_object_get(w->known, node->id);
  int64_t have = known ? json_integer_value(known) : 0;
  if (kind == DURABLE_CHANGE_REMOVED) {
    if (known == NULL || have > node->version)
      return 1; /* stale */
    json_object_del(w->known, node->id);
  } else {
    if (known && have >= node->version)
      return 1; /* seen */
    json_object_set_new(w->known, node->id, json_integer(node->version));
    kind = known ? DURABLE_CHANGE_UPDATED : DURABLE_CHANGE_ADDED;
  }
  return to_cb ? emit(w, kind, node) : 1;
}

static void read_page(durable_watch_t *w, const char *after);

/* Returns 0 when the watch was closed (see emit). */
static int replay_buffer(durable_watch_t *w) {
  size_t n = w->nbuf;
  durable__event_t *buf = w->buffer;
  w->buffer = NULL;
  w->nbuf = 0;
  int open = 1;
  for (size_t i = 0; i < n && open; i++)
    open = apply(w, buf[i].kind, buf[i].node, 1);
  for (size_t k = 0; k < n; k++)
    durable_node_free(buf[k].node);
  free(buf);
  return open;
}

static void start_resync(durable_watch_t *w) {
  w->resync_pending = 0;
  w->state = W_READING_RESYNC;
  json_decref(w->seen);
  w->seen = json_object();
  read_page(w, "");
}

/* The last page of a read is in: finish the initial sync or the re-sync. */
static void read_done(durable_watch_t *w) {
  if (w->state == W_READING_INITIAL) {
    w->state = W_LIVE;
    if (!emit(w, DURABLE_CHANGE_SYNCED, NULL))
      return;
  } else {
    /* children known before but not found now were removed elsewhere */
    const char *id;
    json_t *v;
    void *tmp;
    w->state = W_LIVE;
    json_object_foreach_safe(w->known, tmp, id, v) {
      if (json_object_get(w->seen, id))
        continue;
      /* copy the id: apply() deletes the key it points into */
      char path[DURABLE_PATH_MAX + 1], gone_id[DURABLE_SEGMENT_MAX + 1];
      snprintf(gone_id, sizeof gone_id, "%s", id);
      snprintf(path, sizeof path, "%s%s%s", w->ns, *w->ns ? "/" : "", id);
      durable_node_t gone = {.ns = w->ns,
                             .id = gone_id,
                             .path = path,
                             .node_type = "",
                             .main_node = "",
                             .version = json_integer_value(v)};
      if (!apply(w, DURABLE_CHANGE_REMOVED, &gone, 1))
        return;
    }
    json_decref(w->seen);
    w->seen = NULL;
  }
  if (replay_buffer(w) && w->resync_pending)
    start_resync(w);
}

static void on_page(durable__job_t *job) {
  durable_watch_t *w = job->data;
  w->job_in_flight = 0;
  if (w->closed) {
    maybe_free(w);
    durable__job_free(job);
    return;
  }
  if (job->status < 0) {
    /* The store is unreachable: stay as we are and re-read on the next
     * signal (a backend signals "anything changed" after it reconnects). */
    w->resync_pending = 1;
    if (w->state == W_READING_RESYNC)
      w->state = W_LIVE;
    durable__job_free(job);
    return;
  }
  int to_cb =
      w->state == W_READING_RESYNC || (w->flags & DURABLE_WATCH_INITIAL);
  for (size_t i = 0; i < job->nodes.count; i++) {
    durable_node_t *node = job->nodes.items[i];
    if (w->seen)
      json_object_set_new(w->seen, node->id, json_true());
    if (!apply(w, DURABLE_CHANGE_ADDED, node, to_cb)) {
      durable__job_free(job);
      return;
    }
  }
  if (job->more && job->nodes.count > 0)
    read_page(w, job->nodes.items[job->nodes.count - 1]->id);
  else
    read_done(w);
  durable__job_free(job);
}

static void read_page(durable_watch_t *w, const char *after) {
  durable__job_t *job =
      durable__job_new(w->store, JOB_QUERY, &durable__read_class);
  if (job == NULL || (job->ns = strdup(w->ns)) == NULL ||
      (job->after = strdup(after)) == NULL) {
    durable__job_free(job);
    w->resync_pending = 1; /* out of memory: try again on the next signal */
    return;
  }
  job->limit = PAGE;
  job->done = on_page;
  job->data = w;
  w->job_in_flight = 1;
  durable__job_submit(job);
}

/* ---- entry points -------------------------------------------------------- */

const char *durable_change_kind_name(durable_change_kind_t kind) {
  switch (kind) {
  case DURABLE_CHANGE_ADDED:
    return "added";
  case DURABLE_CHANGE_UPDATED:
    return "updated";
  case DURABLE_CHANGE_REMOVED:
    return "removed";
  case DURABLE_CHANGE_SYNCED:
    return "synced";
  }
  return "unknown";
}

int durable_store_watch(durable_store_t *store, const char *ns, int flags,
                        durable_change_cb cb, void *data, durable_watch_t **out,
                        durable_error_t *err) {
  *out = NULL;
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "watch has no callback");
  if (ns == NULL)
    return durable__error(err, DURABLE_EINVAL, "namespace is missing");
  int rc = *ns ? durable_path_check(ns, err) : 0;
  if (rc < 0)
    return rc;
  /* no feed: LISTEN and the commit log's watch need the primary */
  if ((rc = durable__store_refuse_readonly(store, "a watch", err)) < 0)
    return rc;
  if (durable__store_closing(store))
    return durable__error(err, DURABLE_ESHUTDOWN, "%s is closing",
                          durable_store_name(store));
  feed_t *feed = feed_of(store);
  durable_watch_t *w = calloc(1, sizeof(*w));
  if (feed == NULL || w == NULL || (w->ns = strdup(ns)) == NULL ||
      (w->known = json_object()) == NULL) {
    if (w)
      free_watch(w);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  w->store = store;
  w->flags = flags;
  w->cb = cb;
  w->data = data;
  w->state = flags & DURABLE__WATCH_SIGNAL ? W_LIVE : W_READING_INITIAL;
  durable__queue_insert_head(&feed->watches, &w->link);
  w->linked = 1;
  if (!(flags & DURABLE__WATCH_SIGNAL))
    read_page(w, "");
  *out = w;
  return 0;
}

void durable_watch_close(durable_watch_t *w) {
  if (w == NULL || w->closed)
    return;
  w->closed = 1;
  if (!feed_of(w->store)->dispatching)
    unlink_watch(w);
  maybe_free(w);
}

void durable__feed_close_all(durable_store_t *store) {
  feed_t *feed = feed_of(store);
  struct durable__queue *q, *next;
  if (feed == NULL)
    return;
  DURABLE__QUEUE_FOREACH_SAFE(q, next, &feed->watches) {
    durable_watch_close(watch_of(q));
  }
}

void durable__feed_free(durable_store_t *store) {
  free(store->feed);
  store->feed = NULL;
}

/* A callback may close any watch while the list is walked: closed watches
 * stay listed until the outermost walk ends, and go then. */
static void dispatch_end(feed_t *feed) {
  struct durable__queue *q, *next;
  if (--feed->dispatching == 0)
    DURABLE__QUEUE_FOREACH_SAFE(q, next, &feed->watches) {
      durable_watch_t *w = watch_of(q);
      if (w->closed) {
        unlink_watch(w);
        maybe_free(w);
      }
    }
}

void durable__feed_dispatch(durable_store_t *store, durable__job_t *job) {
  feed_t *feed = feed_of(store);
  if (feed == NULL)
    return;
  for (size_t i = 0; i < job->nevents; i++) {
    durable__event_t *ev = &job->events[i];
    feed->dispatching++; /* a callback may close any watch: keep the list */
    struct durable__queue *q;
    DURABLE__QUEUE_FOREACH(q, &feed->watches) {
      durable_watch_t *w = watch_of(q);
      if (w->closed || strcmp(w->ns, ev->node->ns) != 0)
        continue;
      if (w->flags & DURABLE__WATCH_SIGNAL) {
        emit(w, ev->kind, ev->node);
      } else if (w->state != W_LIVE) {
        durable__event_t *b = realloc(w->buffer, (w->nbuf + 1) * sizeof(*b));
        durable_node_t *copy = b ? durable_node_dup(ev->node) : NULL;
        if (b)
          w->buffer = b;
        if (copy == NULL) { /* cannot buffer: re-read instead */
          w->resync_pending = 1;
          continue;
        }
        w->buffer[w->nbuf].kind = ev->kind;
        w->buffer[w->nbuf++].node = copy;
      } else {
        apply(w, ev->kind, ev->node, 1);
      }
    }
    dispatch_end(feed);
  }
}

void durable__store_on_foreign(durable_store_t *store,
                               void (*fn)(void *data, const char *ns),
                               void *data) {
  feed_t *feed = feed_of(store);
  if (feed == NULL)
    return;
  feed->foreign = fn;
  feed->foreign_data = data;
}

void durable__store_on_session_lost(durable_store_t *store,
                                    void (*fn)(void *data), void *data) {
  feed_t *feed = feed_of(store);
  if (feed == NULL)
    return;
  feed->session_lost = fn;
  feed->session_lost_data = data;
}

void durable__store_session_lost(durable_store_t *store) {
  feed_t *feed = feed_of(store);
  if (feed && feed->session_lost)
    feed->session_lost(feed->session_lost_data);
}

void durable__store_changed_elsewhere(durable_store_t *store, const char *ns) {
  feed_t *feed = feed_of(store);
  if (feed == NULL)
    return;
  if (feed->foreign)
    feed->foreign(feed->foreign_data, ns);
  feed->dispatching++;
  struct durable__queue *q;
  DURABLE__QUEUE_FOREACH(q, &feed->watches) {
    durable_watch_t *w = watch_of(q);
    if (w->closed || (ns && strcmp(ns, w->ns) != 0))
      continue;
    if (w->flags & DURABLE__WATCH_SIGNAL)
      emit(w, DURABLE_CHANGE_UPDATED, NULL);
    else if (w->job_in_flight)
      w->resync_pending = 1; /* re-read once the current read ends */
    else if (w->state == W_READING_INITIAL)
      read_page(w, ""); /* an initial read that failed: start it over */
    else
      start_resync(w);
  }
  dispatch_end(feed);
}

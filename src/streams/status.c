/*
 * status.c: every stored stream as an operator sees it -- its state, the
 * age of its oldest unacknowledged item, its dead-letter count and whether
 * its consumer is failing (durable_stream_statuses).  One piece of code for
 * `durable streams` (a process of its own, with only the store) and for
 * the metrics a host serves (metrics.c).
 *
 *   "type:DurableStream" in pages           the stream nodes, kept
 *   "type:DurableStreamGroup" in pages      their consumer groups, each kept
 *                                           after its stream
 *   "type:DurableStreamFailure" in pages    the failing consumers' records
 *   per stream with a lag: item checkpoint + 1 (one range read of 1 row)
 *   then each(status) per stream in path order, done(0)
 *
 * So a listing costs O(streams), never O(items).  The dead-letter count
 * comes from the listing itself: the dead-letter stream {ns}.dead of a key
 * is the stream node at the path "{stream path}.dead", whose stored items
 * are its LastSequence less its TrimmedThrough.  A failure record counts
 * only while it names item checkpoint + 1: one left behind names an item
 * already passed (failure.c).  A consumer group is shown as its stream
 * is, from its own node: its lag is the stream's last sequence less the
 * group's checkpoint, its failure record under its node, its dead letters
 * the stream {ns}.dead.{group}.
 */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

#define PAGE 1000

typedef struct {
  durable_node_t *node;
  durable__stream_state_t state;
  int64_t oldest_appended_at;
  durable__failure_t failure; /* sequence 0: none */
  /* a stream's: its first group and how many; a group's: its stream, the
   * next group of that stream (row indexes + 1, 0: none) */
  size_t stream, first_group, next_group;
  int groups;
} row_t;

typedef struct {
  durable_store_t *store;
  char *principal;
  int (*want)(const char *ns, void *data);
  durable_stream_status_cb each;
  durable_status_cb done;
  void *data;
  row_t *rows;
  size_t nrows, cap;
  durable__map_t by_path; /* stream path -> row index + 1 */
  char *after;            /* the last path of the page before */
  int phase;              /* reading 0: streams, 1: groups, 2: failures */
  size_t next;            /* the next row whose oldest item to read */
} listing_t;

/* The items after the checkpoint of `s` in the stream `of` (itself, or a
 * group's stream): last - checkpoint, less the sequences lost when the
 * store went back (they never come); 0 when the checkpoint is ahead (a
 * stream read from a custom source). */
static int64_t lag_of(const durable__stream_state_t *s,
                      const durable__stream_state_t *of) {
  if (of->last_sequence <= s->checkpoint)
    return 0;
  int64_t lag = of->last_sequence - s->checkpoint;
  int64_t from =
      of->lost_from > s->checkpoint ? of->lost_from : s->checkpoint + 1;
  if (of->lost_to >= from)
    lag -= of->lost_to - from + 1;
  return lag;
}

static void listing_free(listing_t *l) {
  for (size_t i = 0; i < l->nrows; i++) {
    durable_node_free(l->rows[i].node);
    durable__state_free(&l->rows[i].state);
    durable__failure_free(&l->rows[i].failure);
  }
  free(l->rows);
  durable__map_free(&l->by_path);
  free(l->principal);
  free(l->after);
  free(l);
}

static void finish(listing_t *l, int status, const char *message) {
  l->done(status, message, l->data);
  listing_free(l);
}

static int wanted(const listing_t *l, const row_t *r) {
  return l->want == NULL || l->want(r->state.ns, l->data);
}

static row_t *row_at(listing_t *l, const char *path) {
  size_t i = (size_t)(uintptr_t)durable__map_get(&l->by_path, path);
  return i ? &l->rows[i - 1] : NULL;
}

/* The last sequence of the stream a row's items are: its own, or its
 * stream's for a group. */
static const durable__stream_state_t *stream_of(const listing_t *l,
                                                const row_t *r) {
  return r->stream ? &l->rows[r->stream - 1].state : &r->state;
}

/* A stream consumed only in groups has no consumer of its own to be
 * behind: no lag, no oldest item of its own. */
static int own_idle(const row_t *r) {
  return r->stream == 0 && r->groups > 0 && r->state.lease_epoch == 0 &&
         r->state.checkpoint == 0;
}

static void emit_row(listing_t *l, row_t *r) {
  char dead[DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 8];
  const durable__stream_state_t *s = &r->state;
  const durable__stream_state_t *of = stream_of(l, r);
  durable_stream_status_t st = {
      .stream = {.ns = s->ns, .key = s->key},
      .path = r->node->path,
      .node = r->node,
      .last_sequence = of->last_sequence,
      .checkpoint = s->checkpoint,
      .lag = own_idle(r) ? 0 : lag_of(s, of),
      .lease_epoch = s->lease_epoch,
      .trimmed_through = of->trimmed_through,
      .subscriber = s->subscriber,
      .subscriber_instance = s->subscriber_instance,
      .orphaned_at = s->orphaned_at,
      .oldest_appended_at = own_idle(r) ? 0 : r->oldest_appended_at,
      .last_subscriber = s->last_subscriber,
      .subscribed_at = s->subscribed_at,
      .checkpoint_at = s->checkpoint_at,
      .last_batch = s->last_batch,
      .seen_last = s->seen_last,
      .seen_checkpoint = s->seen_checkpoint,
      .seen_epoch = s->seen_epoch,
      .lost_from = of->lost_from,
      .lost_to = of->lost_to,
      .group = s->group,
      .start = s->start,
      .detached_at = s->detached_at,
      .groups = r->groups,
  };
  if (s->group)
    snprintf(dead, sizeof dead, "%s.dead.%s", l->rows[r->stream - 1].node->path,
             s->group);
  else
    snprintf(dead, sizeof dead, "%s.dead", r->node->path);
  const row_t *d = row_at(l, dead);
  if (d && d->state.last_sequence > d->state.trimmed_through)
    st.dead_letters = d->state.last_sequence - d->state.trimmed_through;
  if (st.lag > 0 && r->failure.sequence == s->checkpoint + 1) {
    st.attempts = r->failure.attempts;
    st.last_error = r->failure.error;
    st.failed_at = r->failure.failed_at;
  }
  char stopped[DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 400];
  if (durable__state_behind(s)) {
    snprintf(stopped, sizeof stopped,
             "stopped: the store went back (last %lld, checkpoint %lld "
             "were seen); durable seek %s %s%s%s --to %lld goes on",
             (long long)s->seen_last, (long long)s->seen_checkpoint, s->ns,
             s->key, s->group ? " --group " : "", s->group ? s->group : "",
             (long long)(s->seen_checkpoint > s->checkpoint ? s->seen_checkpoint
                                                            : s->checkpoint));
    st.last_error = stopped;
  } else if (s->group && of->trimmed_through > s->checkpoint) {
    snprintf(stopped, sizeof stopped,
             "behind the trim: items up to %lld were trimmed; durable seek "
             "%s %s --group %s --to %lld goes on",
             (long long)of->trimmed_through, s->ns, s->key, s->group,
             (long long)of->trimmed_through);
    st.last_error = stopped;
  }
  l->each(&st, l->data);
}

static void emit(listing_t *l) {
  for (size_t i = 0; i < l->nrows; i++) {
    row_t *r = &l->rows[i];
    if (r->stream || !wanted(l, r))
      continue; /* a group comes after its stream */
    emit_row(l, r);
    for (size_t g = r->first_group; g; g = l->rows[g - 1].next_group)
      emit_row(l, &l->rows[g - 1]);
  }
  finish(l, 0, NULL);
}

/* ---- the oldest unacknowledged item of each stream with a lag ---------- */

static void read_oldest(listing_t *l);

static void on_oldest(const durable_result_t *res, void *data) {
  listing_t *l = data;
  row_t *r = &l->rows[l->next++];
  if (res->status < 0 && res->status != DURABLE_ENOTFOUND) {
    finish(l, res->status, res->message);
    return;
  }
  char *payload = NULL;
  int64_t at = 0;
  durable_error_t err = {0};
  if (res->status == 0 && res->count > 0 &&
      durable__item_decode(res->nodes[0], &payload, &at, &err) == 0)
    r->oldest_appended_at = at;
  free(payload);
  read_oldest(l);
}

static void read_oldest(listing_t *l) {
  while (l->next < l->nrows) {
    row_t *r = &l->rows[l->next];
    const durable__stream_state_t *s = &r->state;
    if (wanted(l, r) && stream_of(l, r)->last_sequence > s->checkpoint &&
        !own_idle(r)) {
      char items_ns[DURABLE_PATH_MAX + 32];
      durable_stream_id_t id = {.ns = s->ns, .key = s->key};
      durable_error_t err = {0};
      int rc = durable_stream_items_ns(&id, items_ns, sizeof items_ns);
      if (rc >= 0) /* the length */
        rc = durable__store_read_items(l->store, l->principal, items_ns,
                                       s->checkpoint, 1, on_oldest, l, &err);
      if (rc == 0)
        return;
      if (rc != DURABLE_EINVAL) {
        finish(l, rc, err.message);
        return;
      }
    }
    l->next++;
  }
  emit(l);
}

/* ---- the pages of stream nodes, then of failure records ---------------- */

static void next_page(listing_t *l);

static int keep_stream(listing_t *l, const durable_node_t *node) {
  if (l->nrows == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    row_t *rows = realloc(l->rows, cap * sizeof *rows);
    if (rows == NULL)
      return DURABLE_ENOMEM;
    l->rows = rows;
    l->cap = cap;
  }
  row_t *r = &l->rows[l->nrows];
  memset(r, 0, sizeof *r);
  if ((r->node = durable_node_dup(node)) == NULL)
    return DURABLE_ENOMEM;
  int rc = durable__state_decode(node->content, node->path, &r->state);
  if (rc < 0 || r->state.ns == NULL || r->state.key == NULL) {
    /* a DurableStream node that is no stream (made by hand, anywhere, by
     * whoever may write there): not listed, and never in the way; one
     * there was no memory to read fails the listing, never shortens it */
    durable_node_free(r->node);
    durable__state_free(&r->state);
    return rc == DURABLE_ENOMEM ? rc : 0;
  }
  row_t *stream = NULL;
  if (r->state.group) { /* after its stream, which must be listed */
    char stream_path[DURABLE_PATH_MAX + 1];
    const char *name;
    if (durable__group_split(node->path, stream_path, sizeof stream_path,
                             &name))
      stream = row_at(l, stream_path);
    if (stream == NULL || stream->stream) {
      durable_node_free(r->node);
      durable__state_free(&r->state);
      return 0;
    }
  }
  if (durable__map_put(&l->by_path, node->path,
                       (void *)(uintptr_t)(l->nrows + 1)) < 0) {
    durable_node_free(r->node);
    durable__state_free(&r->state);
    return DURABLE_ENOMEM;
  }
  if (stream) { /* linked at the end of its stream's groups, in path order */
    r->stream = (size_t)(stream - l->rows) + 1;
    size_t *at = &stream->first_group;
    while (*at)
      at = &l->rows[*at - 1].next_group;
    *at = l->nrows + 1;
    stream->groups++;
  }
  l->nrows++;
  return 0;
}

/* 0, or DURABLE_ENOMEM (a record it could not read fails the listing: a
 * failing consumer would look healthy). */
static int keep_failure(listing_t *l, const durable_node_t *node) {
  /* "{stream path}/_DurableStreamFailure": the stream is its namespace */
  row_t *r = row_at(l, node->ns);
  if (r == NULL || strcmp(node->id, DURABLE__FAILURE_SEGMENT) != 0)
    return 0;
  durable__failure_free(&r->failure);
  int rc = durable__failure_decode(node->content, &r->failure);
  if (rc < 0)
    durable__failure_free(&r->failure);
  return rc == DURABLE_ENOMEM ? rc : 0;
}

static void on_page(const durable_result_t *res, void *data) {
  listing_t *l = data;
  if (res->status < 0) {
    finish(l, res->status, res->message);
    return;
  }
  for (size_t i = 0; i < res->count; i++) {
    if ((l->phase == 2 ? keep_failure(l, res->nodes[i])
                       : keep_stream(l, res->nodes[i])) < 0) {
      finish(l, DURABLE_ENOMEM, "out of memory");
      return;
    }
  }
  free(l->after);
  l->after = NULL;
  if (res->more && res->count > 0) {
    if ((l->after = strdup(res->nodes[res->count - 1]->path)) == NULL) {
      finish(l, DURABLE_ENOMEM, "out of memory");
      return;
    }
  } else if (l->phase < 2) {
    l->phase++; /* the streams, then their groups, then the failures */
  } else {
    read_oldest(l);
    return;
  }
  next_page(l);
}

static void next_page(listing_t *l) {
  durable_error_t err = {0};
  static const char *const queries[] = {"type:" DURABLE__STREAM_TYPE,
                                        "type:" DURABLE__GROUP_TYPE,
                                        "type:" DURABLE__FAILURE_TYPE};
  int rc = durable_store_query(l->store, l->principal, queries[l->phase],
                               l->after, PAGE, on_page, l, &err);
  if (rc < 0)
    finish(l, rc, err.message);
}

int durable_stream_statuses(durable_store_t *store, const char *principal,
                            int (*want)(const char *ns, void *data),
                            durable_stream_status_cb each,
                            durable_status_cb done, void *data,
                            durable_error_t *err) {
  if (store == NULL || each == NULL || done == NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "durable_stream_statuses needs a store, each and "
                          "done");
  listing_t *l = calloc(1, sizeof(*l));
  if (l == NULL || (principal && (l->principal = strdup(principal)) == NULL)) {
    free(l);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  *l = (listing_t){.store = store,
                   .principal = l->principal,
                   .want = want,
                   .each = each,
                   .done = done,
                   .data = data};
  /* the first page's failure is the call's, as for durable_store_query */
  int rc = durable_store_query(store, principal, "type:" DURABLE__STREAM_TYPE,
                               NULL, PAGE, on_page, l, err);
  if (rc < 0)
    listing_free(l);
  return rc;
}

/*
 * stream_hub_group.c: consumer groups in the stream hubs.
 *
 * A group's node ({stream}/_DurableStreamGroup/{group}, group.c) has a hub
 * of the same kind as a stream node's: one serial chain that decides the
 * group's claims, acks, releases and seeks on its stored lease and writes
 * them as a compare-and-set (stream_hub.c, stream_hub_write.c), so a group
 * is a stream consumer in full -- lease, epoch, holder probe, takeover,
 * hold, checkpoint -- while its acknowledgements never touch the stream
 * node that every append writes.  What a group's hub needs beyond that is
 * here:
 *
 *   - the stream as stored now, read at a claim, a seek and a delete: a
 *     group of a stream that is not there (or being deleted) is not
 *     claimed, and a group behind what was trimmed is refused, with what
 *     the operator can do, rather than jump silently;
 *   - the group made when its consumer's first claim finds none: the
 *     consumer asks the stream's hub (durable.group), which makes the node
 *     in the stream's own chain, at the start the consumer declares (the
 *     oldest item kept, the latest -- exactly the last appended before it --
 *     a sequence, a time); a stream that does not exist has no hub to ask,
 *     so a dormant owner stays dormant;
 *   - the owner woken for the group: the group's hub does it when it lets a
 *     lease go with items waiting; the stream's hub when an append leaves
 *     items waiting for a group nobody holds.  The stream's hub lists the
 *     groups once per activation and hears every change this process makes
 *     (durable__shub_group_changed) or hears of (the waker's
 *     durable__stream_group_seen), so it wakes once per orphan period, as
 *     for the stream's own lease.
 *
 * A trim and a stream's delete read every group afresh
 * (durable__shub_groups_read): a trim deletes only what each group that
 * pins the stream acknowledged, a delete fences every group's holder
 * (stream_hub_operator.c).
 */
#include "lease.h"
#include "stream_hub.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Groups listed per stream: enough for any real fan-out, and a bound on
 * what one listing costs. */
#define GROUPS_MAX 1000
/* a group's bit while a listing runs: not seen again, it was deleted */
#define GROUP_UNSEEN (1u << 30)

static const char *here(const durable__shub_t *sh) {
  return durable_store_instance(durable_mesh_store(sh->mesh));
}

/* ---- the stream, read for a group's turn -------------------------------- */

static void on_parent(const durable_result_t *res, void *data) {
  durable__shub_t *sh = data;
  durable__stream_state_t parent;
  if (res->status == DURABLE_ENOTFOUND) {
    char message[DURABLE_PATH_MAX + 64];
    snprintf(message, sizeof message, "durable stream %s does not exist",
             sh->stream_path);
    durable__shub_fail(sh, DURABLE_ENOTFOUND, message);
  } else if (res->status < 0) {
    durable__shub_retry(sh, res->status, res->message);
  } else if (durable__state_decode(res->node->content, sh->stream_path,
                                   &parent) < 0) {
    durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
  } else {
    durable__state_free(&sh->parent);
    sh->parent = parent;
    sh->flags |= DURABLE__SHUB_PARENT_READ;
    sh->run(sh);
  }
  durable_hub_unref(sh->hub);
}

static void read_parent(durable__shub_t *sh) {
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  if (durable_store_get(durable_mesh_store(sh->mesh), NULL, sh->stream_path,
                        on_parent, sh, &err) < 0) {
    durable_hub_unref(sh->hub);
    durable__shub_fail(sh, err.code, err.message);
  }
}

int durable__shub_group_needs_parent(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  if (sh->group == NULL || (sh->flags & DURABLE__SHUB_PARENT_READ) ||
      (op->kind != DURABLE__OP_CLAIM && op->kind != DURABLE__OP_SEEK &&
       op->kind != DURABLE__OP_DELETE))
    return 0;
  read_parent(sh);
  return 1;
}

int durable__shub_group_refuse(durable__shub_t *sh) {
  const durable__stream_state_t *p = &sh->parent, *s = &sh->state;
  char message[3 * DURABLE_PATH_MAX + 400];
  if (p->deleting_at) {
    snprintf(message, sizeof message,
             "durable stream %s is being deleted (durable delete-stream): "
             "group %s cannot be claimed until that has finished",
             sh->stream_path, sh->group);
    durable__shub_fail(sh, DURABLE_ENOTFOUND, message);
    return 1;
  }
  if (p->trimmed_through > s->checkpoint) {
    snprintf(message, sizeof message,
             "consumer group %s of %s@%s is behind the trim: items up to "
             "%lld were trimmed, and the group acknowledged only up to %lld; "
             "nothing is skipped silently: `durable seek %s %s --group %s "
             "--to %lld` goes on after the trim (items %lld-%lld are then "
             "never handed to this group), or `durable group delete %s %s "
             "%s` starts it anew",
             sh->group, s->ns, s->key, (long long)p->trimmed_through,
             (long long)s->checkpoint, s->ns, s->key, sh->group,
             (long long)p->trimmed_through, (long long)s->checkpoint + 1,
             (long long)p->trimmed_through, s->ns, s->key, sh->group);
    durable__shub_fail(sh, DURABLE_EIO, message);
    return 1;
  }
  return 0;
}

/* ---- making a group at its first claim ---------------------------------- */

/* In the stream's hub (durable.group): the group's node made, starting
 * where its consumer declares -- decided in the stream's chain, so that
 * "latest" is exactly the last item appended before it. */

typedef struct {
  durable__shub_t *sh;
  int64_t lo, hi; /* the first item at or after the time is in lo .. hi */
  int64_t at;     /* the time */
} seek_time_t;

static void make_group(durable__shub_t *sh, int64_t checkpoint);

/* The start's time: halve lo .. hi (the stream's items, appended in order)
 * until the first one appended at or after it is found; an item missing
 * (lost, deleted) counts as before it. */
static void time_step(seek_time_t *st);

static void on_time_item(const durable_result_t *res, void *data) {
  seek_time_t *st = data;
  durable__shub_t *sh = st->sh;
  int64_t mid = st->lo + (st->hi - st->lo) / 2;
  char *payload = NULL;
  int64_t at = 0;
  if (res->status < 0 && res->status != DURABLE_ENOTFOUND) {
    durable__shub_retry(sh, res->status, res->message);
    free(st);
  } else {
    if (res->status == 0 &&
        durable__item_decode(res->node, &payload, &at, NULL) == 0 &&
        at >= st->at)
      st->hi = mid;
    else
      st->lo = mid + 1;
    free(payload);
    time_step(st);
  }
  durable_hub_unref(sh->hub);
}

static void time_step(seek_time_t *st) {
  durable__shub_t *sh = st->sh;
  if (st->lo >= st->hi) {
    make_group(sh, st->lo - 1);
    free(st);
    return;
  }
  int64_t mid = st->lo + (st->hi - st->lo) / 2;
  char path[DURABLE_PATH_MAX + 48], id[13];
  durable__item_id(mid, id);
  snprintf(path, sizeof path, "%s/%s", sh->items_ns, id);
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  if (durable_store_get(durable_mesh_store(sh->mesh), NULL, path, on_time_item,
                        st, &err) < 0) {
    durable_hub_unref(sh->hub);
    free(st);
    durable__shub_fail(sh, err.code, err.message);
  }
}

/* What the group's node was made with, kept for the answer; and what the
 * stream was when it was decided, checked in the same transaction. */
typedef struct {
  durable__shub_t *sh;
  durable__stream_state_t g;
  char path[DURABLE_PATH_MAX + 1];
  int64_t trimmed_through, last_sequence; /* -1: not decided on */
} making_t;

/* In the making's transaction (writer thread): the stream is as decided
 * -- not being deleted, trimmed as far, and for "latest" its last item the
 * same -- else DURABLE_ECONFLICT and it is decided again; writes nothing. */
static int stream_holds(const durable__stream_state_t *cur, const void *arg) {
  const making_t *m = arg;
  return cur->deleting_at == 0 && cur->trimmed_through == m->trimmed_through &&
         (m->last_sequence < 0 || cur->last_sequence == m->last_sequence);
}

static int stream_as_decided(const durable_node_t *current, char **content,
                             char **node_type, void *arg) {
  (void)content;
  (void)node_type;
  return durable__state_holds(current, stream_holds, arg);
}

static void on_group_made(const durable_result_t *res, void *data) {
  making_t *m = data;
  durable__shub_t *sh = m->sh;
  durable__shub_op_t *op = durable__shub_head(sh);
  if (res->status == DURABLE_ECONFLICT || res->status == DURABLE_ENOTFOUND) {
    /* the stream moved since it was read (another process): again */
    durable__shub_retry(sh, res->status, res->message);
  } else if (res->status < 0 && res->status != DURABLE_EEXIST) {
    durable__shub_fail(sh, res->status, res->message);
  } else {
    durable__stream_ans_t *ans = durable__stream_ans_new();
    if (res->status == 0) {
      durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                       "[DurableStreams] %s@%s: consumer group %s made by "
                       "%s, starting after item %lld (start %s)",
                       m->g.ns, m->g.key, m->g.group, op->req->subscriber,
                       (long long)m->g.checkpoint, m->g.start);
      durable__stream_group_seen(sh->mesh, m->path, &m->g,
                                 durable__written_version(res, 1));
    }
    if (ans) {
      ans->ok = 1; /* made, or there already (made by another) */
      ans->checkpoint = res->status == 0 ? m->g.checkpoint : 0;
    }
    durable__shub_answer(op, ans);
    durable__shub_next(sh);
  }
  durable_hub_unref(sh->hub);
  durable__state_free(&m->g);
  free(m);
}

static void make_group(durable__shub_t *sh, int64_t checkpoint) {
  durable__shub_op_t *op = durable__shub_head(sh);
  char start[32];
  durable__start_format(&op->req->start, start, sizeof start);
  making_t *m = calloc(1, sizeof(*m));
  durable_stream_id_t id = durable__shub_id(sh);
  char *content = NULL;
  int rc = DURABLE_ENOMEM;
  if (m) {
    m->trimmed_through = sh->state.trimmed_through;
    m->last_sequence = op->req->start.kind == DURABLE_START_LATEST
                           ? sh->state.last_sequence
                           : -1;
  }
  if (m && durable__str_set(&m->g.ns, sh->state.ns) == 0 &&
      durable__str_set(&m->g.key, sh->state.key) == 0 &&
      durable__str_set(&m->g.group, op->req->group) == 0 &&
      durable__str_set(&m->g.start, start) == 0) {
    m->sh = sh;
    m->g.checkpoint = checkpoint < 0 ? 0 : checkpoint;
    m->g.created_at = durable__now_ms();
    m->g.detach_idle_ms = durable__detach_idle_ms(&op->req->detach);
    m->g.detach_items = op->req->detach.items;
    m->g.detach_age_ms = op->req->detach.age_ms;
    rc = durable_group_path(&id, op->req->group, m->path, sizeof m->path);
    if (rc >= 0)
      rc = (content = durable__state_encode(&m->g)) ? 0 : DURABLE_ENOMEM;
  }
  durable_write_t w[2] = {{.kind = DURABLE_WRITE_MUTATE,
                           .path = sh->path,
                           .mutate = stream_as_decided,
                           .mutate_arg = m},
                          {.kind = DURABLE_WRITE_CREATE,
                           .path = m ? m->path : NULL,
                           .node_type = DURABLE__GROUP_TYPE,
                           .content = content}};
  durable_error_t err = {0};
  durable_hub_ref(sh->hub);
  if (rc == 0)
    rc = durable_store_write(durable_mesh_store(sh->mesh), w, 2, on_group_made,
                             m, &err);
  free(content);
  if (rc < 0) {
    durable_hub_unref(sh->hub);
    if (m)
      durable__state_free(&m->g);
    free(m);
    durable__shub_fail(sh, rc,
                       err.message[0]         ? err.message
                       : rc == DURABLE_EINVAL ? "the group's path is too long"
                                              : "out of memory");
  }
}

void durable__shub_group_create(durable__shub_t *sh) {
  const durable__stream_state_t *s = &sh->state;
  const durable_start_t *start = &durable__shub_head(sh)->req->start;
  /* decided on the stream as stored (another process may have trimmed,
   * appended or begun to delete it), and checked again as it is written */
  if (durable__shub_read_again_first(sh, 1) ||
      durable__shub_refuse_deleting(sh, "given a consumer group") ||
      durable__shub_refuse_behind(sh, "given a consumer group"))
    return;
  switch (start->kind) {
  case DURABLE_START_LATEST:
    make_group(sh, s->last_sequence);
    break;
  case DURABLE_START_SEQUENCE: /* item N first: after N - 1, trimmed or not */
    make_group(sh, start->value - 1 > s->trimmed_through ? start->value - 1
                                                         : s->trimmed_through);
    break;
  case DURABLE_START_TIME: {
    seek_time_t *st = malloc(sizeof(*st));
    if (st == NULL) {
      durable__shub_fail(sh, DURABLE_ENOMEM, "out of memory");
      return;
    }
    *st = (seek_time_t){sh, s->trimmed_through + 1, s->last_sequence + 1,
                        start->value};
    time_step(st);
    break;
  }
  default:
    make_group(sh, s->trimmed_through);
  }
}

/* ---- what the stream's hub knows of its groups -------------------------- */

static durable__shub_group_t *group_find(durable__shub_t *sh,
                                         const char *name) {
  for (size_t i = 0; i < sh->ngroups; i++)
    if (strcmp(sh->groups[i].state.group, name) == 0)
      return &sh->groups[i];
  return NULL;
}

void durable__shub_groups_free(durable__shub_t *sh) {
  for (size_t i = 0; i < sh->ngroups; i++) {
    durable__state_free(&sh->groups[i].state);
    free(sh->groups[i].detaching);
  }
  free(sh->groups);
  sh->groups = NULL;
  sh->ngroups = 0;
}

/* Take `s` (a group's state, stored at `version`) as what is known of its
 * group: a new lease or orphan period wakes afresh.  0 or DURABLE_ENOMEM. */
static int group_put(durable__shub_t *sh, const durable__stream_state_t *s,
                     int64_t version) {
  durable__shub_group_t *g = group_find(sh, s->group);
  if (g == NULL) {
    if (sh->ngroups >= GROUPS_MAX)
      return 0;
    g = realloc(sh->groups, (sh->ngroups + 1) * sizeof(*g));
    if (g == NULL)
      return DURABLE_ENOMEM;
    sh->groups = g;
    g = &sh->groups[sh->ngroups];
    memset(g, 0, sizeof *g);
    if (durable__state_copy(s, &g->state) < 0)
      return DURABLE_ENOMEM;
    sh->ngroups++;
  } else {
    durable__stream_state_t copy;
    /* a state older than the one known (a listing that was out while this
     * process wrote the group) is no news */
    if (version > 0 && g->version > version) {
      g->flags &= ~GROUP_UNSEEN;
      return 0;
    }
    if (durable__state_copy(s, &copy) < 0)
      return DURABLE_ENOMEM;
    if (copy.lease_epoch != g->state.lease_epoch ||
        (copy.subscriber == NULL) != (g->state.subscriber == NULL))
      g->flags &= ~DURABLE__SHUB_WOKEN; /* a new lease or orphan period */
    durable__state_free(&g->state);
    g->state = copy;
  }
  g->version = version;
  g->flags &= ~GROUP_UNSEEN;
  return 0;
}

static void group_forget(durable__shub_t *sh, const char *name) {
  durable__shub_group_t *g = group_find(sh, name);
  if (g == NULL)
    return;
  durable__state_free(&g->state);
  free(g->detaching);
  *g = sh->groups[--sh->ngroups];
}

typedef struct {
  durable__shub_t *sh;
  char *name;
} group_wake_t;

static void on_group_woken(durable__wake_outcome_t outcome, void *data) {
  group_wake_t *w = data;
  durable__shub_group_t *g = group_find(w->sh, w->name);
  if (g) {
    g->flags &= ~DURABLE__SHUB_WAKING;
    if (outcome != DURABLE__WAKE_UNAVAILABLE &&
        outcome != DURABLE__WAKE_LEAVING)
      g->flags |= DURABLE__SHUB_WOKEN;
  }
  durable_hub_unref(w->sh->hub);
  free(w->name);
  free(w);
}

/* Wake the owner for group `g` if items wait for it and nobody holds it,
 * once per orphan period; held in another process, the waker keeps an eye
 * on that process. */
static void group_wake_if_waiting(durable__shub_t *sh,
                                  durable__shub_group_t *g) {
  const durable__stream_state_t *s = &g->state;
  if (sh->state.last_sequence <= s->checkpoint || sh->mesh->closing)
    return;
  durable__lease_where_t where = durable__lease_where(s, here(sh));
  if (where == DURABLE__LEASE_ELSEWHERE) {
    char path[DURABLE_PATH_MAX + 1];
    snprintf(path, sizeof path, "%s/" DURABLE__GROUP_SEGMENT "/%s", sh->path,
             s->group);
    durable__waker_suspect(sh->mesh, path, s->subscriber_instance);
    return;
  }
  if (where != DURABLE__LEASE_FREE ||
      (g->flags & (DURABLE__SHUB_WAKING | DURABLE__SHUB_WOKEN)) ||
      sh->mesh->closing)
    return;
  group_wake_t *w = malloc(sizeof(*w));
  if (w == NULL || (w->name = strdup(s->group)) == NULL) {
    free(w);
    return; /* the next append tries again */
  }
  w->sh = sh;
  g->flags |= DURABLE__SHUB_WAKING;
  durable_hub_ref(sh->hub);
  durable_stream_id_t id = durable__shub_id(sh);
  if (durable__wake_owner(sh->mesh, &id, s->group, on_group_woken, w) < 0) {
    g->flags &= ~DURABLE__SHUB_WAKING;
    durable_hub_unref(sh->hub);
    free(w->name);
    free(w);
  }
}

/* A listing of the stream's groups: each page taken in, then (with
 * `oldest`) the oldest unacknowledged item of each group with an age bound
 * read, then `then`. */
typedef struct {
  durable__shub_t *sh;
  void (*then)(durable__shub_t *sh, int status, const char *message);
  int oldest;
  size_t next; /* the group whose oldest item is read next */
  char name[DURABLE_GROUP_MAX + 1]; /* ... its name (it may move meanwhile) */
  char ns[DURABLE_PATH_MAX + 1];
} listing_t;

static void read_oldest(listing_t *l);

static void on_oldest(const durable_result_t *res, void *data) {
  listing_t *l = data;
  durable__shub_t *sh = l->sh;
  char *payload = NULL;
  int64_t at = 0;
  durable__shub_group_t *g = group_find(sh, l->name);
  if (g && res->status == 0 && res->count > 0 &&
      durable__item_decode(res->nodes[0], &payload, &at, NULL) == 0)
    g->oldest_at = at;
  free(payload);
  /* (a group deleted meanwhile moves the last one into its place: that one
   * may go unread, and then is not detached for its age this time) */
  l->next++;
  read_oldest(l); /* one that could not be read is not detached for age */
  durable_hub_unref(sh->hub);
}

/* The oldest unacknowledged item of each group that bounds its age (one
 * range read of one row each), then `then`. */
static void read_oldest(listing_t *l) {
  durable__shub_t *sh = l->sh;
  for (; l->next < sh->ngroups; l->next++) {
    durable__shub_group_t *g = &sh->groups[l->next];
    g->oldest_at = 0;
    if (g->state.detach_age_ms <= 0 || g->state.detached_at ||
        sh->state.last_sequence <= g->state.checkpoint)
      continue;
    snprintf(l->name, sizeof l->name, "%s", g->state.group);
    durable_hub_ref(sh->hub);
    if (durable__store_read_items(durable_mesh_store(sh->mesh), NULL,
                                  sh->items_ns, g->state.checkpoint, 1,
                                  on_oldest, l, NULL) == 0)
      return;
    durable_hub_unref(sh->hub);
  }
  l->then(sh, 0, NULL);
  free(l);
}

static void list_page(listing_t *l, const char *after);

static void on_groups_page(const durable_result_t *res, void *data) {
  listing_t *l = data;
  durable__shub_t *sh = l->sh;
  int rc = res->status;
  for (size_t i = 0; rc == 0 && i < res->count; i++) {
    const durable_node_t *n = res->nodes[i];
    durable__stream_state_t s;
    if (strcmp(n->node_type, DURABLE__GROUP_TYPE) != 0 ||
        durable__state_decode(n->content, n->path, &s) < 0)
      continue; /* not a group (made by hand) */
    if (s.group != NULL)
      rc = group_put(sh, &s, n->version);
    durable__state_free(&s);
  }
  if (rc == 0 && res->more && res->count > 0 && sh->ngroups < GROUPS_MAX) {
    list_page(l, res->nodes[res->count - 1]->id);
  } else {
    /* those not seen again were deleted (a listing that failed keeps
     * them) */
    for (size_t i = sh->ngroups; i-- > 0;)
      if (rc == 0 && (sh->groups[i].flags & GROUP_UNSEEN))
        group_forget(sh, sh->groups[i].state.group);
      else
        sh->groups[i].flags &= ~GROUP_UNSEEN;
    if (rc == 0 && l->oldest) {
      read_oldest(l);
    } else {
      l->then(sh, rc, res->message);
      free(l);
    }
  }
  durable_hub_unref(sh->hub);
}

static void list_page(listing_t *l, const char *after) {
  durable_error_t err = {0};
  durable_hub_ref(l->sh->hub);
  if (durable_store_query(durable_mesh_store(l->sh->mesh), NULL, l->ns, after,
                          200, on_groups_page, l, &err) < 0) {
    durable_hub_unref(l->sh->hub);
    l->then(l->sh, err.code, err.message);
    free(l);
  }
}

void durable__shub_groups_read(durable__shub_t *sh, int oldest,
                               void (*then)(durable__shub_t *sh, int status,
                                            const char *message)) {
  listing_t *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    then(sh, DURABLE_ENOMEM, "out of memory");
    return;
  }
  l->sh = sh;
  l->then = then;
  l->oldest = oldest;
  snprintf(l->ns, sizeof l->ns, "namespace:%s/" DURABLE__GROUP_SEGMENT,
           sh->path);
  for (size_t i = 0; i < sh->ngroups; i++)
    sh->groups[i].flags |= GROUP_UNSEEN;
  list_page(l, NULL);
}

static void wake_groups(durable__shub_t *sh) {
  /* a closing mesh's store may be gone already: the next host wakes them */
  if (sh->mesh->closing || (sh->flags & DURABLE__SHUB_DEAD))
    return;
  for (size_t i = 0; i < sh->ngroups; i++)
    group_wake_if_waiting(sh, &sh->groups[i]);
}

static void on_listed(durable__shub_t *sh, int status, const char *message) {
  (void)message;
  sh->flags &= ~DURABLE__SHUB_GROUPS_LISTING;
  if (status < 0)
    return; /* the next append lists again */
  sh->flags |= DURABLE__SHUB_GROUPS_LISTED;
  wake_groups(sh);
}

void durable__shub_groups_appended(durable__shub_t *sh) {
  if (sh->flags & DURABLE__SHUB_GROUPS_LISTING)
    return; /* its answer wakes them */
  if (!(sh->flags & DURABLE__SHUB_GROUPS_LISTED)) {
    sh->flags |= DURABLE__SHUB_GROUPS_LISTING;
    durable__shub_groups_read(sh, 0, on_listed);
    return;
  }
  wake_groups(sh);
}

/* ---- a group's changes, heard by its stream's hub ----------------------- */

void durable__stream_group_seen(durable_mesh_t *mesh, const char *group_path,
                                const durable__stream_state_t *s,
                                int64_t version) {
  char stream_path[DURABLE_PATH_MAX + 1];
  const char *name;
  if (!durable__group_split(group_path, stream_path, sizeof stream_path, &name))
    return;
  if (mesh->closing)
    return;
  durable_hub_t *hub = durable_mesh_find(mesh, stream_path);
  durable__shub_t *sh = hub ? durable__shub_of(hub) : NULL;
  if (sh == NULL || sh->group != NULL ||
      !(sh->flags &
        (DURABLE__SHUB_GROUPS_LISTED | DURABLE__SHUB_GROUPS_LISTING)))
    return; /* not active here, or it lists them when it needs them */
  if (s == NULL) {
    group_forget(sh, name);
    return;
  }
  if (group_put(sh, s, version) < 0) {
    sh->flags &= ~DURABLE__SHUB_GROUPS_LISTED; /* list again */
    return;
  }
  durable__shub_group_t *g = group_find(sh, name);
  if (g && (sh->flags & DURABLE__SHUB_HAVE_STATE))
    group_wake_if_waiting(sh, g);
}

/* Let go with items waiting: wake the owner for the group (the stream's
 * tail read afresh: this hub knows only its own node). */
static void on_tail(const durable_result_t *res, void *data) {
  durable__shub_t *sh = data;
  durable__stream_state_t p;
  if (res->status == 0 && !sh->mesh->closing &&
      durable__state_decode(res->node->content, sh->stream_path, &p) == 0) {
    if (p.last_sequence > sh->state.checkpoint && sh->state.subscriber == NULL)
      durable__shub_wake_owner(sh);
    durable__state_free(&p);
  }
  durable_hub_unref(sh->hub);
}

void durable__shub_group_changed(durable__shub_t *sh, int let_go) {
  durable__stream_group_seen(sh->mesh, sh->path, &sh->state, sh->version);
  if (!let_go || sh->mesh->closing)
    return;
  durable_hub_ref(sh->hub);
  if (durable_store_get(durable_mesh_store(sh->mesh), NULL, sh->stream_path,
                        on_tail, sh, NULL) < 0)
    durable_hub_unref(sh->hub);
}

/* ---- an operator's delete of a group ------------------------------------ */

/* In the delete's transaction (writer thread): the group's lease is still
 * the one decided on (`arg`: its epoch), so that a claim granted meanwhile
 * is not deleted under its holder; writes nothing itself. */
static int lease_holds(const durable__stream_state_t *cur, const void *arg) {
  return cur->lease_epoch == *(const int64_t *)arg;
}

static int still_as_decided(const durable_node_t *current, char **content,
                            char **node_type, void *arg) {
  (void)content;
  (void)node_type;
  return durable__state_holds(current, lease_holds, arg);
}

static void on_group_deleted(const durable_result_t *res, void *data) {
  durable__shub_t *sh = data;
  if (res->status == DURABLE_ECONFLICT) {
    durable__shub_retry(sh, res->status,
                        "the group's lease changed while it was deleted");
  } else if (res->status < 0) {
    durable__shub_fail(sh, res->status, res->message);
  } else {
    durable__shub_op_t *op = durable__shub_head(sh);
    const durable__stream_state_t *s = &sh->state;
    durable_mesh_log(sh->mesh, DURABLE_LOG_INFO,
                     "[DurableStreams] %s@%s: consumer group %s deleted by "
                     "%s (it had acknowledged up to %lld%s)",
                     s->ns, s->key, sh->group, op->req->subscriber,
                     (long long)s->checkpoint,
                     s->subscriber ? "; its holder is fenced" : "");
    durable__failure_clear(durable_mesh_store(sh->mesh), sh->path);
    durable__stream_group_seen(sh->mesh, sh->path, NULL, 0);
    durable__consumers_lease_gone(sh->mesh, s->ns, s->key, sh->group, 1);
    durable__stream_ans_t *ans = durable__stream_ans_new();
    if (ans) {
      ans->ok = 1;
      ans->checkpoint = s->checkpoint;
    }
    durable__shub_answer(op, ans);
    durable__shub_forget_state(sh);
    durable__shub_next(sh);
  }
  durable_hub_unref(sh->hub);
}

void durable__shub_group_delete(durable__shub_t *sh) {
  durable__shub_op_t *op = durable__shub_head(sh);
  const durable__stream_state_t *s = &sh->state;
  if (s->subscriber && op->req->epoch != 1) {
    if (durable__shub_read_again_first(sh, 1))
      return; /* it may have been released meanwhile */
    char message[3 * DURABLE_PATH_MAX + 200];
    snprintf(message, sizeof message,
             "consumer group %s of %s@%s is held by %s%s%s%s: deleting it "
             "under its consumer needs --force, which fences the consumer "
             "first",
             sh->group, s->ns, s->key, s->subscriber,
             s->subscriber_instance ? " (process " : "",
             s->subscriber_instance ? s->subscriber_instance : "",
             s->subscriber_instance ? ")" : "");
    durable__shub_fail(sh, DURABLE_ECONFLICT, message);
    return;
  }
  sh->op_was = s->lease_epoch; /* still_as_decided's, until it answers */
  durable__shub_delete_node(sh, still_as_decided, on_group_deleted);
}

/*
 * waker.c: a host activates the owners whose streams have work.
 *
 * In one process the stream hub wakes an owner itself (stream_hub_op.c).  When
 * the append comes from another process -- `durable publish` beside a
 * `durable run` on one SQLite file, or producers on PostgreSQL -- it is the
 * change feed that tells this process: each "namespace {key}/_DurableStream
 * changed elsewhere" makes the host look at that owner's streams, and a
 * stream with unacknowledged items and no holder, whose owner's NodeType
 * consumes that family here, gets its owner activated (a mesh read, so the
 * consumer starts and claims) and woken.  At start the host does the same
 * for every stream, so items appended while no host ran are consumed.
 * Several hosts may act on one stream: the lease lets exactly one win.
 *
 * A stream held by another process is that process's business while it
 * lives.  When it dies -- killed, its machine lost -- its leases stay
 * written, and nothing appended wakes anyone, since the streams look held.
 * So the host keeps the streams with waiting items that it saw held by
 * other processes (the suspects), and every liveness_ms asks the database
 * whether each of those processes is alive (durable__store_alive: a lock the
 * database drops with the process, not a heartbeat, so a slow handler never
 * looks dead).  A process found gone makes its streams unheld here: their
 * owners are woken, and the claim takes the lease over (the stream hub asks
 * the database once more before it does).  This process's own appends and
 * refused claims name suspects too (durable__waker_suspect): the change
 * feed tells only of other processes' commits.
 */
#include "lease.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEGMENT_SUFFIX "/" DURABLE__STREAM_SEGMENT
#define GROUP_SUFFIX "/" DURABLE__GROUP_SEGMENT

typedef struct {
  durable_mesh_t *mesh;
  char *family;
  char *key;
  char *group;     /* NULL: the stream's own lease */
  char *path;      /* the lease's node */
  int64_t waiting; /* its items waiting */
} wake_t;

static void wake_free(wake_t *w) {
  free(w->family);
  free(w->key);
  free(w->group);
  free(w->path);
  free(w);
}

static void look_lost(durable_mesh_t *mesh, int code, int at_start);
static void say_unwoken(wake_t *w, const char *reason);

/* A wake that could not be made (the owner unreadable, its post failed):
 * the next round looks again. */
static void on_woken(durable__wake_outcome_t outcome, void *data) {
  if (outcome == DURABLE__WAKE_UNAVAILABLE ||
      outcome == DURABLE__WAKE_POST_FAILED)
    look_lost(data, DURABLE_EUNAVAIL, 0);
}

static void on_owner_read(const durable_result_t *res, void *data) {
  wake_t *w = data;
  char reason[DURABLE_PATH_MAX * 2 + 160];
  if (w->mesh->closing) { /* the next host to start looks again */
    wake_free(w);
    return;
  }
  if (res->status == 0 &&
      durable__consumed_has(w->mesh, res->node->node_type, w->family)) {
    say_unwoken(w, NULL);
    durable_stream_id_t id = {w->family, w->key};
    int rc = durable__wake_owner(w->mesh, &id, w->group, on_woken, w->mesh);
    if (rc < 0)
      look_lost(w->mesh, rc, 0);
  } else if (res->status == DURABLE_ENOTFOUND) {
    snprintf(reason, sizeof reason,
             "there is no node at %s, its owner (put one there, of a "
             "NodeType whose plugin consumes %s)",
             w->key, w->family);
    say_unwoken(w, reason);
  } else if (res->status == 0) {
    snprintf(reason, sizeof reason,
             "its owner %s is a node of %s%s, and no plugin of this host "
             "declares a consumer of %s for it",
             w->key, *res->node->node_type ? "NodeType " : "no NodeType",
             res->node->node_type, w->family);
    say_unwoken(w, reason);
  } else {
    look_lost(w->mesh, res->status, 0); /* unreadable now */
  }
  wake_free(w);
}

/* ---- the suspects
 * --------------------------------------------------------------- */

#define LIVENESS_MSG "durable.liveness"

typedef struct {
  durable_mesh_t *mesh;
  durable__map_t suspects; /* stream path -> holder instance (malloc'ed) */
  int asking;              /* liveness answers still to come */
  /* namespaces with a look in flight -> SCAN_AGAIN when another change
   * came meanwhile: one look at a time per namespace, however many commits
   * the feed reports (on a slow link, one read per commit would queue up
   * without end) */
  durable__map_t looking;
  /* lease path -> why this host cannot wake the owner of the items waiting
   * there (malloc'ed), as last said: said again only when it changes */
  durable__map_t told;
  /* a look that did not finish (no memory for it, a read that failed): the
   * next liveness round looks at every stream, so that nothing waits for a
   * change that may never come -- as the host's start does when that was
   * the look lost (`missed_start`); one such look at a time (`rescanning`) */
  int missed, missed_start, rescanning;
} waker_t;

static char scan_once, scan_again; /* the values of `looking` */

static const char waker_key;

static waker_t *waker_of(durable_mesh_t *mesh) {
  return durable__hub_attached(durable__mesh_reads_hub(mesh), &waker_key);
}

/* A look at streams was lost for `code`: the next round looks again (see
 * `missed`), unless looking again cannot help (the principal may not read
 * there, a path or query that is wrong). */
static void look_lost(durable_mesh_t *mesh, int code, int at_start) {
  waker_t *wk = waker_of(mesh);
  if (wk == NULL || mesh->closing || code == DURABLE_EACCES ||
      code == DURABLE_EINVAL)
    return;
  wk->missed = 1;
  wk->missed_start |= at_start;
}

static void suspect_del(waker_t *wk, const char *path) {
  free(durable__map_del(&wk->suspects, path));
}

static void suspect_put(waker_t *wk, const char *path, const char *instance) {
  const char *known = durable__map_get(&wk->suspects, path);
  if (known && strcmp(known, instance) == 0)
    return;
  char *copy = strdup(instance);
  suspect_del(wk, path);
  if (copy == NULL || durable__map_put(&wk->suspects, path, copy) < 0) {
    free(copy); /* forgotten: the next round finds it again */
    look_lost(wk->mesh, DURABLE_ENOMEM, 0);
  }
}

static void waker_free(void *data) {
  waker_t *wk = data;
  const char *k;
  void *v;
  for (size_t i = 0; durable__map_next(&wk->suspects, &i, &k, &v);)
    free(v);
  durable__map_free(&wk->suspects);
  for (size_t i = 0; durable__map_next(&wk->told, &i, &k, &v);)
    free(v);
  durable__map_free(&wk->told);
  durable__map_free(&wk->looking);
  free(wk);
}

/* Items wait at `w` that this host cannot have consumed, for `reason`
 * (NULL: it can, again): said at info once per lease node and reason --
 * at the start, and when the reason changes -- so that a stream whose
 * owner is missing, or whose type no plugin here consumes, is not a
 * silent backlog. */
static void say_unwoken(wake_t *w, const char *reason) {
  waker_t *wk = waker_of(w->mesh);
  if (wk == NULL)
    return;
  char *said = durable__map_get(&wk->told, w->path);
  if (reason == NULL || (said && strcmp(said, reason) == 0)) {
    if (reason == NULL)
      free(durable__map_del(&wk->told, w->path));
    return;
  }
  char *copy = strdup(reason);
  if (copy == NULL)
    return;
  free(durable__map_del(&wk->told, w->path));
  if (durable__map_put(&wk->told, w->path, copy) < 0)
    free(copy);
  durable_mesh_log(w->mesh, DURABLE_LOG_INFO,
                   "[DurableStreams] %s@%s%s%s: %lld item%s waiting, but this "
                   "host cannot have them consumed: %s",
                   w->family, w->key, w->group ? " group " : "",
                   w->group ? w->group : "", (long long)w->waiting,
                   w->waiting == 1 ? "" : "s", reason);
}

void durable__waker_suspect(durable_mesh_t *mesh, const char *stream_path,
                            const char *instance) {
  waker_t *wk = waker_of(mesh);
  if (wk && !mesh->closing)
    suspect_put(wk, stream_path, instance);
}

/* ---- looking at one stream
 * ------------------------------------------------------ */

/* The items waiting for the lease `s` of a stream whose last is `last`. */
static int64_t backlog(const durable__stream_state_t *s, int64_t last) {
  return last > s->checkpoint ? last - s->checkpoint : 0;
}

static void consider_groups(durable_mesh_t *mesh,
                            const durable__stream_state_t *stream,
                            const char *stream_path, int at_start,
                            const char *gone);

/* The lease `s` (of the node at `path`: a stream's own, or a consumer
 * group's) with `waiting` items: wake the owner if nobody holds it. */
static void consider_lease(durable_mesh_t *mesh, const char *path,
                           const durable__stream_state_t *s, int64_t waiting,
                           int at_start, const char *gone) {
  waker_t *wk = waker_of(mesh);
  const char *here = durable_store_instance(durable_mesh_store(mesh));
  durable__lease_where_t where = durable__lease_where(s, here);
  int unheld = durable__lease_unheld(s, here, gone, at_start);
  /* nobody holds it as stored: a consumer here that thinks it does was let
   * go behind its back (an operator's seek or trim in another process) and
   * claims again before its next item, items waiting or not */
  if (where == DURABLE__LEASE_FREE)
    durable__consumers_lease_gone(mesh, s->ns, s->key, s->group, 0);
  if (waiting && where == DURABLE__LEASE_ELSEWHERE && !unheld)
    suspect_put(wk, path, s->subscriber_instance);
  else
    suspect_del(wk, path);
  if (waiting && unheld) {
    wake_t *w = calloc(1, sizeof(*w));
    durable_error_t err = {0};
    if (w && (w->family = strdup(s->ns)) && (w->key = strdup(s->key)) &&
        (w->path = strdup(path)) &&
        (s->group == NULL || (w->group = strdup(s->group)))) {
      w->waiting = waiting;
      w->mesh = mesh;
      /* read the owner first: only a NodeType served here is activated */
      if (durable_store_get(durable_mesh_store(mesh),
                            durable_mesh_principal(mesh), s->key, on_owner_read,
                            w, &err) < 0) {
        wake_free(w);
        look_lost(mesh, err.code, at_start); /* not for a Key that is no path */
      }
    } else {
      if (w)
        wake_free(w);
      look_lost(mesh, DURABLE_ENOMEM, at_start);
    }
  }
}

/* A stream node, or a consumer group's (its stream read first: whether
 * items wait for the group is the stream's tail against its checkpoint):
 * wake its owner if it has work nobody holds -- nobody, or the process
 * `gone` (just found dead; may be NULL).  Held by another process that may
 * be alive: a suspect, looked after by the liveness round below.  At the
 * host's start, a lease written before leases named their process, by the
 * owner's own address, counts as unheld: the owner activated here re-claims
 * it as the same subscriber (what one host per store did).  A stream whose
 * family some consumer here reads in a group has its groups looked at too;
 * a stream nobody ever consumed on its own (no lease yet) wakes its owner
 * only while it has no group, so that its consumers waiting for the
 * stream to exist make theirs. */
static void consider_group_node(durable_mesh_t *mesh,
                                const durable_node_t *node, int at_start,
                                const char *gone);

static void consider(durable_mesh_t *mesh, const durable_node_t *node,
                     int at_start, const char *gone) {
  durable__stream_state_t s;
  waker_t *wk = waker_of(mesh);
  if (mesh->closing || wk == NULL)
    return;
  if (strcmp(node->node_type, DURABLE__GROUP_TYPE) == 0) {
    consider_group_node(mesh, node, at_start, gone);
    return;
  }
  int rc = durable__state_decode(node->content, node->path, &s);
  if (rc < 0) { /* no stream (made by hand), or no memory to read it */
    look_lost(mesh, rc, at_start);
    return;
  }
  if (durable__grouped_has(mesh, s.ns) && s.lease_epoch == 0) {
    /* groups may hold it: they decide, and their absence wakes */
    consider_groups(mesh, &s, node->path, at_start, gone);
  } else {
    consider_lease(mesh, node->path, &s, backlog(&s, s.last_sequence), at_start,
                   gone);
    if (durable__grouped_has(mesh, s.ns))
      consider_groups(mesh, &s, node->path, at_start, gone);
  }
  durable__state_free(&s);
}

/* ---- the groups of a stream ------------------------------------------------
 */

/* A look at the groups of one stream (its state kept for the answer). */
typedef struct {
  durable_mesh_t *mesh;
  durable__stream_state_t stream;
  char *path; /* the stream's */
  char *gone;
  int at_start;
  int groups; /* how many the listing found */
} groups_look_t;

static void groups_look_free(groups_look_t *g) {
  durable__state_free(&g->stream);
  free(g->path);
  free(g->gone);
  free(g);
}

static void one_group(durable_mesh_t *mesh,
                      const durable__stream_state_t *stream,
                      const durable_node_t *node, int at_start,
                      const char *gone) {
  durable__stream_state_t g;
  int rc = durable__state_decode(node->content, node->path, &g);
  if (rc < 0 || g.group == NULL) {
    if (rc == 0)
      durable__state_free(&g);
    else
      look_lost(mesh, rc, at_start);
    return;
  }
  durable__group_seen(mesh, node->path, &g, node->version);
  consider_lease(mesh, node->path, &g, backlog(&g, stream->last_sequence),
                 at_start, gone);
  durable__state_free(&g);
}

static void on_groups(const durable_result_t *res, void *data) {
  groups_look_t *g = data;
  if (res->status < 0) {
    look_lost(g->mesh, res->status, g->at_start);
  } else if (!g->mesh->closing) {
    for (size_t i = 0; i < res->count; i++)
      if (strcmp(res->nodes[i]->node_type, DURABLE__GROUP_TYPE) == 0) {
        g->groups++;
        one_group(g->mesh, &g->stream, res->nodes[i], g->at_start, g->gone);
      }
    /* a stream with no group yet, never consumed on its own: its owner's
     * consumers make their groups once they claim */
    if (g->groups == 0 && g->stream.lease_epoch == 0)
      consider_lease(g->mesh, g->path, &g->stream,
                     backlog(&g->stream, g->stream.last_sequence), g->at_start,
                     g->gone);
  }
  durable_hub_unref(durable__mesh_reads_hub(g->mesh));
  groups_look_free(g);
}

static void consider_groups(durable_mesh_t *mesh,
                            const durable__stream_state_t *stream,
                            const char *stream_path, int at_start,
                            const char *gone) {
  groups_look_t *g = calloc(1, sizeof(*g));
  char query[DURABLE_PATH_MAX + 48];
  if (g == NULL || durable__state_copy(stream, &g->stream) < 0 ||
      (g->path = strdup(stream_path)) == NULL ||
      (gone && (g->gone = strdup(gone)) == NULL)) {
    if (g)
      groups_look_free(g);
    look_lost(mesh, DURABLE_ENOMEM, at_start);
    return;
  }
  g->mesh = mesh;
  g->at_start = at_start;
  snprintf(query, sizeof query, "namespace:%s/" DURABLE__GROUP_SEGMENT,
           stream_path);
  durable_error_t err = {0};
  durable_hub_ref(durable__mesh_reads_hub(mesh));
  /* a stream's groups are few: one page (the stream hub lists more) */
  if (durable_store_query(durable_mesh_store(mesh),
                          durable_mesh_principal(mesh), query, NULL, 1000,
                          on_groups, g, &err) < 0) {
    durable_hub_unref(durable__mesh_reads_hub(mesh));
    groups_look_free(g);
    look_lost(mesh, err.code, at_start);
  }
}

/* A group node alone (another process changed it, or its holder's process
 * is gone): its stream read first. */
typedef struct {
  durable_mesh_t *mesh;
  durable_node_t *node;
  char *gone;
  int at_start;
} group_look_t;

static void on_group_stream(const durable_result_t *res, void *data) {
  group_look_t *g = data;
  durable__stream_state_t s;
  if (res->status == 0 && !g->mesh->closing &&
      durable__state_decode(res->node->content, res->node->path, &s) == 0) {
    one_group(g->mesh, &s, g->node, g->at_start, g->gone);
    durable__state_free(&s);
  } else if (res->status < 0 && res->status != DURABLE_ENOTFOUND) {
    look_lost(g->mesh, res->status, g->at_start);
  }
  durable_hub_unref(durable__mesh_reads_hub(g->mesh));
  durable_node_free(g->node);
  free(g->gone);
  free(g);
}

static void consider_group_node(durable_mesh_t *mesh,
                                const durable_node_t *node, int at_start,
                                const char *gone) {
  char stream_path[DURABLE_PATH_MAX + 1];
  const char *name;
  if (!durable__group_split(node->path, stream_path, sizeof stream_path, &name))
    return;
  group_look_t *g = calloc(1, sizeof(*g));
  if (g == NULL || (g->node = durable_node_dup(node)) == NULL ||
      (gone && (g->gone = strdup(gone)) == NULL)) {
    if (g) {
      durable_node_free(g->node);
      free(g);
    }
    look_lost(mesh, DURABLE_ENOMEM, at_start);
    return;
  }
  g->mesh = mesh;
  g->at_start = at_start;
  durable_error_t err = {0};
  durable_hub_ref(durable__mesh_reads_hub(mesh));
  if (durable_store_get(durable_mesh_store(mesh), durable_mesh_principal(mesh),
                        stream_path, on_group_stream, g, &err) < 0) {
    durable_hub_unref(durable__mesh_reads_hub(mesh));
    durable_node_free(g->node);
    free(g->gone);
    free(g);
    look_lost(mesh, err.code, at_start);
  }
}

/* A stream of a process found gone, read again. */
typedef struct {
  durable_mesh_t *mesh;
  char *path, *gone;
} reread_t;

static void on_stream_read(const durable_result_t *res, void *data) {
  reread_t *r = data;
  if (res->status == 0)
    consider(r->mesh, res->node, 0, r->gone);
  else /* ask again on the next round */
    durable__waker_suspect(r->mesh, r->path, r->gone);
  durable_hub_unref(durable__mesh_reads_hub(r->mesh));
  free(r->path);
  free(r->gone);
  free(r);
}

/* ---- the liveness round
 * --------------------------------------------------------- */

typedef struct {
  waker_t *wk;
  char *instance;
} ask_t;

static void on_alive(const durable_result_t *res, void *data) {
  ask_t *a = data;
  waker_t *wk = a->wk;
  durable_mesh_t *mesh = wk->mesh;
  wk->asking--;
  if (res->status == 0 && res->value == 0 && !mesh->closing) {
    durable_mesh_log(mesh, DURABLE_LOG_INFO,
                     "[DurableStreams] process %s is gone: taking over the "
                     "streams with waiting items it held",
                     a->instance);
    /* read each of its streams again: consider() finds them unheld now (a
     * stream that changes meanwhile comes back as a suspect, and the next
     * round finds the process gone again) */
    durable__strv_t paths = {0};
    const char *k;
    void *v;
    for (size_t i = 0; durable__map_next(&wk->suspects, &i, &k, &v);)
      if (strcmp(v, a->instance) == 0)
        durable__strv_push(&paths, k);
    for (size_t i = 0; i < paths.count; i++) {
      reread_t *r = calloc(1, sizeof(*r));
      if (r == NULL || (r->path = strdup(paths.items[i])) == NULL ||
          (r->gone = strdup(a->instance)) == NULL) {
        if (r)
          free(r->path);
        free(r);
        continue; /* still a suspect: the next round */
      }
      r->mesh = mesh;
      suspect_del(wk, r->path);
      durable_hub_ref(durable__mesh_reads_hub(mesh));
      if (durable_store_get(durable_mesh_store(mesh),
                            durable_mesh_principal(mesh), r->path,
                            on_stream_read, r, NULL) < 0) {
        durable_hub_unref(durable__mesh_reads_hub(mesh));
        durable__waker_suspect(mesh, r->path, r->gone);
        free(r->path);
        free(r->gone);
        free(r);
      }
    }
    durable__strv_free(&paths);
  }
  durable_hub_unref(durable__mesh_reads_hub(mesh));
  free(a->instance);
  free(a);
}

static void scan_as(durable_mesh_t *mesh, const char *query, const char *ns,
                    int at_start, int rescan);

/* Every liveness_ms, on the read-issuing hub: ask about each process that
 * holds a suspect, once per round; after a look that was lost, look at
 * every stream. */
static void on_tick(durable_hub_t *hub, const durable_msg_t *msg,
                    durable_reply_t *reply, void *data) {
  waker_t *wk = data;
  durable_mesh_t *mesh = wk->mesh;
  (void)msg;
  durable_reply_ok(reply, NULL);
  if (mesh->closing)
    return; /* no new round: the mesh is leaving */
  if (wk->missed && !wk->rescanning) {
    /* a look was lost: every stream */
    int at_start = wk->missed_start;
    wk->missed = wk->missed_start = 0;
    wk->rescanning = 1;
    scan_as(mesh, "type:" DURABLE__STREAM_TYPE, NULL, at_start, 1);
  }
  if (wk->asking == 0) {
    durable__map_t asked = {0};
    const char *k;
    void *v;
    static char present;
    for (size_t i = 0; durable__map_next(&wk->suspects, &i, &k, &v);) {
      if (durable__map_get(&asked, v) != NULL ||
          durable__map_put(&asked, v, &present) < 0)
        continue;
      ask_t *a = calloc(1, sizeof(*a));
      if (a == NULL || (a->instance = strdup(v)) == NULL) {
        free(a);
        continue;
      }
      a->wk = wk;
      durable_hub_ref(hub);
      if (durable__store_alive(durable_mesh_store(mesh), a->instance, on_alive,
                               a, NULL) < 0) {
        durable_hub_unref(hub);
        free(a->instance);
        free(a);
        continue;
      }
      wk->asking++;
    }
    durable__map_free(&asked);
  }
}

typedef struct {
  durable_mesh_t *mesh;
  char *query;
  char *ns; /* a namespace's look: its key in waker_t.looking (a copy) */
  int at_start;
  int rescan; /* the look at every stream after one lost */
} scan_t;

static void scan_page(scan_t *sc, const char *after);

static void scan_free(scan_t *sc) {
  waker_t *wk = waker_of(sc->mesh);
  if (sc->ns && wk)
    durable__map_del(&wk->looking, sc->ns);
  if (sc->rescan && wk)
    wk->rescanning = 0;
  free(sc->ns);
  free(sc->query);
  free(sc);
}

/* A look is over: another change of its namespace came meanwhile? Look
 * once more, else let the namespace go. */
static void scan_end(scan_t *sc) {
  waker_t *wk = waker_of(sc->mesh);
  if (sc->ns && wk && !sc->mesh->closing &&
      durable__map_get(&wk->looking, sc->ns) == &scan_again) {
    durable__map_put(&wk->looking, sc->ns, &scan_once);
    scan_page(sc, NULL);
    return;
  }
  scan_free(sc);
}

static void on_page(const durable_result_t *res, void *data) {
  scan_t *sc = data;
  if (res->status < 0)
    look_lost(sc->mesh, res->status, sc->at_start);
  if (res->status == 0) {
    for (size_t i = 0; i < res->count; i++)
      if (strcmp(res->nodes[i]->node_type, DURABLE__STREAM_TYPE) == 0 ||
          strcmp(res->nodes[i]->node_type, DURABLE__GROUP_TYPE) == 0)
        consider(sc->mesh, res->nodes[i], sc->at_start, NULL);
    if (res->more && res->count > 0 && !sc->mesh->closing) {
      scan_page(sc, res->nodes[res->count - 1]->path + 0);
      return;
    }
  }
  scan_end(sc);
}

static void scan_page(scan_t *sc, const char *after) {
  durable_error_t err = {0};
  /* "type:" pages by path, "namespace:" by id */
  const char *cursor = after;
  if (after && strncmp(sc->query, "namespace:", 10) == 0) {
    const char *slash = strrchr(after, '/');
    cursor = slash ? slash + 1 : after;
  }
  /* as the mesh's principal: a host acting as one wakes only the streams
   * it may read (the others' consumers would be refused their claim) */
  if (durable_store_query(durable_mesh_store(sc->mesh),
                          durable_mesh_principal(sc->mesh), sc->query, cursor,
                          200, on_page, sc, &err) < 0) {
    look_lost(sc->mesh, err.code, sc->at_start);
    scan_free(sc);
  }
}

/* Look at the streams `query` finds; `ns` (or NULL) names the namespace
 * the look is for, which is then looked at once at a time; `rescan`: the
 * liveness round's look after one lost (wk->rescanning until it ends). */
static void scan_as(durable_mesh_t *mesh, const char *query, const char *ns,
                    int at_start, int rescan) {
  waker_t *wk = waker_of(mesh);
  if (ns && wk) {
    void *looking = durable__map_get(&wk->looking, ns);
    if (looking) {
      durable__map_put(&wk->looking, ns, &scan_again);
      return; /* the look in flight looks again when it ends */
    }
  }
  scan_t *sc = calloc(1, sizeof(*sc));
  if (sc == NULL || (sc->query = strdup(query)) == NULL) {
    free(sc);
    if (rescan && wk)
      wk->rescanning = 0;
    look_lost(mesh, DURABLE_ENOMEM, at_start);
    return;
  }
  sc->mesh = mesh;
  sc->at_start = at_start;
  sc->rescan = rescan;
  if (ns && wk && (sc->ns = strdup(ns)) != NULL &&
      durable__map_put(&wk->looking, ns, &scan_once) < 0) {
    free(sc->ns); /* looked at all the same, only not once at a time */
    sc->ns = NULL;
  }
  scan_page(sc, NULL);
}

static void scan(durable_mesh_t *mesh, const char *query, const char *ns,
                 int at_start) {
  scan_as(mesh, query, ns, at_start, 0);
}

static void on_foreign(void *data, const char *ns) {
  durable_mesh_t *mesh = data;
  if (mesh->closing)
    return;         /* its store may be on its way out already */
  if (ns == NULL) { /* it may have missed anything: look at every stream */
    scan(mesh, "type:" DURABLE__STREAM_TYPE, NULL, 0);
    return;
  }
  size_t n = strlen(ns), k = strlen(SEGMENT_SUFFIX), kg = strlen(GROUP_SUFFIX);
  if ((n > k && strcmp(ns + n - k, SEGMENT_SUFFIX) == 0) ||
      (n > kg && strcmp(ns + n - kg, GROUP_SUFFIX) == 0)) {
    char query[DURABLE_PATH_MAX + 16];
    snprintf(query, sizeof query, "namespace:%s", ns);
    scan(mesh, query, ns, 0);
  }
}

int durable_mesh_start_hosting(durable_mesh_t *mesh, durable_error_t *err) {
  if (mesh == NULL)
    return durable__error(err, DURABLE_EINVAL, "no mesh");
  durable_hub_t *reads = durable__mesh_reads_hub(mesh);
  if (waker_of(mesh) == NULL) {
    waker_t *wk = calloc(1, sizeof(*wk));
    if (wk == NULL)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    wk->mesh = mesh;
    if (durable__hub_attach(reads, &waker_key, wk, waker_free) < 0) {
      waker_free(wk);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
    int rc = durable__hub_on(reads, LIVENESS_MSG, on_tick, wk, err);
    if (rc == 0) /* repeating: no tick is lost to a failed re-arm */
      rc = durable__hub_post_every(reads,
                                   durable__stream_options(mesh).liveness_ms,
                                   LIVENESS_MSG, "null", err);
    if (rc < 0)
      return rc;
  }
  durable__store_on_foreign(durable_mesh_store(mesh), on_foreign, mesh);
  scan(mesh, "type:" DURABLE__STREAM_TYPE, NULL, 1);
  return 0;
}

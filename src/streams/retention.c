/*
 * retention.c: how long a stream family keeps its acknowledged items, and
 * the sweep that deletes the rest.
 *
 * A policy is one short text, the same in C, Lua, the CLI and the store:
 *
 *   all       keep every item (the default: a stream keeps its items
 *             unless told otherwise)
 *   N         keep the newest N acknowledged items (0: delete each one
 *             once it is acknowledged)
 *   DURATION  keep an acknowledged item for that long after it was
 *             appended: 500ms, 30s, 15m, 12h, 7d
 *
 * It is declared with the consumer (durable_consumer_t.retention, Lua
 * `retention = "7d"`), and an operator may set one for a whole family
 * (durable_mesh_set_retention, `durable retention FAMILY POLICY`): a node
 * DurableRetention/{family} {"Policy": "7d"}, which every process reads
 * back at most every RETENTION_REFRESH_MS and which wins over what
 * consumers declare.  Read as the platform: it is the runtime's setting,
 * not a principal's data.
 *
 * The sweep runs beside the consumer that holds the stream: the holder
 * knows the checkpoint, and only acknowledged items ever go.  It is a trim
 * (operator.c: TrimmedThrough recorded first, then deletes of 500 items a
 * transaction), so it never holds appends up for long and a reader asking
 * for a swept item is told so.  It runs after acknowledgements, at most
 * once every SWEEP_GAP_MS, so that a busy stream pays a few transactions
 * per thousand items, not one per item; a duration also re-arms it for the
 * time the oldest kept item ages out.  A consumer with a source never
 * sweeps: its items are the source's nodes.
 */
#include "protocol.h"
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETENTION_NS DURABLE__RETENTION_NS
#define RETENTION_TYPE "DurableRetention"
#define RETENTION_REFRESH_MS 5000
#define SWEEP_GAP_MS 250
#define SWEEP_PAGE 500
/* A duration longer than this is no duration (and would overflow the
 * clock's arithmetic): keep "all" instead. */
#define MAX_AGE_MS (100LL * 366 * 24 * 3600 * 1000)

/* ---- the text of a policy -------------------------------------------- */

static const struct {
  const char *suffix;
  int64_t ms;
} units[] = {{"ms", 1},
             {"s", 1000},
             {"m", 60 * 1000},
             {"h", 3600 * 1000},
             {"d", 24 * 3600 * 1000}};

int durable_retention_parse(const char *text, durable_retention_t *out,
                            durable_error_t *err) {
  memset(out, 0, sizeof *out);
  if (text == NULL || strcmp(text, "all") == 0)
    return 0;
  char *end = NULL;
  long long n = (*text >= '0' && *text <= '9') ? strtoll(text, &end, 10) : -1;
  if (n >= 0 && end != text && *end == '\0' && n < INT64_MAX) {
    out->keep = DURABLE_KEEP_COUNT;
    out->count = n;
    return 0;
  }
  for (size_t i = 0; n > 0 && i < sizeof units / sizeof units[0]; i++)
    if (strcmp(end, units[i].suffix) == 0 && n <= MAX_AGE_MS / units[i].ms) {
      out->keep = DURABLE_KEEP_AGE;
      out->age_ms = n * units[i].ms;
      return 0;
    }
  return durable__error(err, DURABLE_EINVAL,
                        "'%.64s%s' is not a retention policy: say all, a "
                        "number of acknowledged items to keep (0: none), or "
                        "how long to keep them (500ms, 30s, 15m, 12h, 7d; "
                        "at most 100 years)",
                        text, strlen(text) > 64 ? "..." : "");
}

void durable_retention_format(const durable_retention_t *policy, char *out,
                              size_t size) {
  if (policy->keep == DURABLE_KEEP_COUNT) {
    snprintf(out, size, "%lld", (long long)policy->count);
  } else if (policy->keep == DURABLE_KEEP_AGE) {
    size_t i = sizeof units / sizeof units[0];
    while (--i > 0 && policy->age_ms % units[i].ms != 0)
      ;
    snprintf(out, size, "%lld%s", (long long)(policy->age_ms / units[i].ms),
             units[i].suffix);
  } else {
    snprintf(out, size, "all");
  }
}

int durable__retention_check(const durable_retention_t *policy,
                             durable_error_t *err) {
  int ok = policy->keep == DURABLE_KEEP_ALL ||
           (policy->keep == DURABLE_KEEP_COUNT && policy->count >= 0) ||
           (policy->keep == DURABLE_KEEP_AGE && policy->age_ms > 0);
  return ok ? 0
            : durable__error(err, DURABLE_EINVAL,
                             "a retention policy keeps all, N >= 0 items, or "
                             "for a duration > 0 (durable_retention_parse)");
}

/* ---- the operators' policies, per family ----------------------------- */

typedef struct {
  durable_mesh_t *mesh;
  durable_hub_t *reads;    /* the read-issuing hub, which holds this */
  durable__map_t policies; /* family -> durable_retention_t (malloc'ed) */
  uint64_t read_at;        /* uv_now of the last read; 0: never */
  int reading;
  void (*on_change)(durable_mesh_t *mesh); /* durable__retention_on_change */
} overrides_t;

static const char overrides_key;

static void policies_clear(durable__map_t *map) {
  const char *k;
  void *v;
  for (size_t i = 0; durable__map_next(map, &i, &k, &v);)
    free(v);
  durable__map_free(map);
  memset(map, 0, sizeof *map);
}

static void overrides_free(void *data) {
  overrides_t *o = data;
  policies_clear(&o->policies);
  free(o);
}

static overrides_t *overrides_of(durable_mesh_t *mesh) {
  durable_hub_t *reads = durable__mesh_reads_hub(mesh);
  overrides_t *o = durable__hub_attached(reads, &overrides_key);
  if (o == NULL && (o = calloc(1, sizeof(*o))) != NULL) {
    o->mesh = mesh;
    o->reads = reads;
    if (durable__hub_attach(reads, &overrides_key, o, overrides_free) < 0) {
      free(o);
      o = NULL;
    }
  }
  return o;
}

/* Set (policy) or forget (NULL) the operators' policy of `family` here;
 * DURABLE_ENOMEM when it could not be set. */
static int override_put(overrides_t *o, const char *family,
                        const durable_retention_t *policy) {
  free(durable__map_del(&o->policies, family));
  if (policy == NULL)
    return 0;
  durable_retention_t *copy = malloc(sizeof(*copy));
  if (copy == NULL)
    return DURABLE_ENOMEM;
  *copy = *policy;
  if (durable__map_put(&o->policies, family, copy) < 0) {
    free(copy);
    return DURABLE_ENOMEM;
  }
  return 0;
}

/* The policy a node holds; 0, DURABLE_EINVAL for content that is not one
 * (made by hand), or DURABLE_ENOMEM. */
static int node_policy(const durable_node_t *node, durable_retention_t *out) {
  int rc = DURABLE_EINVAL;
  json_t *j = durable__json_tree(node->content, &rc);
  const char *text = json_string_value(json_object_get(j, "Policy"));
  if (j != NULL)
    rc = text ? durable_retention_parse(text, out, NULL) : DURABLE_EINVAL;
  json_decref(j);
  return rc;
}

static void on_overrides(const durable_result_t *res, void *data) {
  overrides_t *o = data;
  o->reading = 0;
  if (res->status == 0 && !o->mesh->closing) {
    durable__map_t old = o->policies;
    memset(&o->policies, 0, sizeof o->policies);
    int changed = 0;
    int short_of_memory = 0;
    for (size_t i = 0; i < res->count && !short_of_memory; i++) {
      durable_retention_t p;
      int rc = node_policy(res->nodes[i], &p);
      short_of_memory = rc == DURABLE_ENOMEM;
      if (rc < 0)
        continue;
      const durable_retention_t *was =
          durable__map_get(&old, res->nodes[i]->id);
      changed |= was == NULL || was->keep != p.keep || was->count != p.count ||
                 was->age_ms != p.age_ms;
      short_of_memory = override_put(o, res->nodes[i]->id, &p) < 0;
    }
    if (short_of_memory) {
      /* an operator's policy it could not read is not gone: the last
       * round's hold until the next read (a consumer's own policy might
       * trim what the operator keeps) */
      policies_clear(&o->policies);
      o->policies = old;
    } else {
      changed |= o->policies.count != old.count;
      policies_clear(&old);
      /* an idle stream, too, sweeps what a new policy makes due */
      if (changed && o->on_change)
        o->on_change(o->mesh);
    }
  }
  durable_hub_unref(o->reads);
}

int durable__retention_on_change(durable_mesh_t *mesh,
                                 void (*fn)(durable_mesh_t *mesh)) {
  overrides_t *o = overrides_of(mesh);
  if (o == NULL)
    return DURABLE_ENOMEM;
  o->on_change = fn;
  return 0;
}

durable_retention_t
durable__retention_in_force(durable_mesh_t *mesh, const char *family,
                            const durable_retention_t *declared) {
  overrides_t *o = mesh->closing ? NULL : overrides_of(mesh);
  if (o == NULL)
    return *declared;
  uint64_t now = uv_now(durable_mesh_loop(mesh));
  if (!o->reading &&
      (o->read_at == 0 || now - o->read_at >= RETENTION_REFRESH_MS)) {
    durable_error_t err = {0};
    o->read_at = now;
    o->reading = 1;
    durable_hub_ref(o->reads);
    if (durable_store_query(durable_mesh_store(mesh), NULL,
                            "namespace:" RETENTION_NS, NULL, 1000, on_overrides,
                            o, &err) < 0) {
      o->reading = 0; /* asked again after the next refresh period */
      durable_hub_unref(o->reads);
    }
  }
  const durable_retention_t *p = durable__map_get(&o->policies, family);
  return p ? *p : *declared;
}

typedef struct {
  durable_mesh_t *mesh;
  char *family;
  durable_retention_t policy;
  int clear;
  durable_status_cb cb;
  void *data;
} setting_t;

static void on_set(const durable_result_t *res, void *data) {
  setting_t *s = data;
  int status = res->status == DURABLE_ENOTFOUND && s->clear ? 0 : res->status;
  if (status == 0 && !s->mesh->closing) {
    overrides_t *o = overrides_of(s->mesh);
    if (o)
      override_put(o, s->family, s->clear ? NULL : &s->policy);
    if (o && o->on_change)
      o->on_change(s->mesh);
  }
  s->cb(status, status < 0 ? res->message : NULL, s->data);
  free(s->family);
  free(s);
}

int durable_mesh_set_retention(durable_mesh_t *mesh, const char *family,
                               const char *policy, durable_status_cb cb,
                               void *data, durable_error_t *err) {
  /* a family is a stream namespace: the same rules */
  durable_stream_id_t id = {.ns = family, .key = RETENTION_NS};
  char path[DURABLE_PATH_MAX + 1];
  durable_retention_t p;
  int rc = durable_stream_check(&id, err);
  if (rc == 0 && cb == NULL)
    rc = durable__error(err, DURABLE_EINVAL, "callback is missing");
  if (rc == 0 && policy)
    rc = durable_retention_parse(policy, &p, err);
  if (rc == 0 && (size_t)snprintf(path, sizeof path, RETENTION_NS "/%s",
                                  family) >= sizeof path)
    rc = durable__error(err, DURABLE_EINVAL, "the family '%s' is too long",
                        family);
  if (rc == 0)
    rc = durable_path_check(path, err);
  if (rc < 0)
    return rc;
  if (mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closing");
  setting_t *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->family = strdup(family)) == NULL) {
    free(s);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  s->mesh = mesh;
  s->clear = policy == NULL;
  s->cb = cb;
  s->data = data;
  char text[64], *content = NULL;
  durable_write_t w = {.kind = DURABLE_WRITE_DELETE, .path = path};
  if (policy) {
    s->policy = p;
    durable_retention_format(&p, text, sizeof text);
    json_t *j = json_pack("{s:s}", "Policy", text);
    content = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    w = (durable_write_t){.kind = DURABLE_WRITE_PUT,
                          .path = path,
                          .node_type = RETENTION_TYPE,
                          .content = content};
  }
  rc = policy && content == NULL
           ? durable__error(err, DURABLE_ENOMEM, "out of memory")
           : durable_store_write_as(durable_mesh_store(mesh),
                                    durable_mesh_principal(mesh), &w, 1, on_set,
                                    s, err);
  free(content);
  if (rc < 0) {
    free(s->family);
    free(s);
  }
  return rc;
}

/* ---- the sweep -------------------------------------------------------- */

struct durable__sweep_s {
  durable_mesh_t *mesh;
  durable_hub_t *hub; /* the consumer's: where its timer message goes */
  char *msg;          /* ... that message (durable.sweep:{family}) */
  char *ns, *key;
  char items_ns[DURABLE_PATH_MAX + 32];
  durable_retention_t declared;
  int64_t checkpoint; /* acknowledged, as the consumer last said */
  int64_t trimmed;    /* swept through here in this lease (0: not known) */
  int64_t through;    /* the trim in flight: through this */
  uint64_t lease;     /* counts the consumer's leases: a run of an earlier
                         one does not speak for this one */
  uint64_t run_lease; /* the lease of the run in flight */
  uint64_t last_run;  /* uv_now when the last run began */
  uint64_t due_ms;    /* a duration's: the next item ages out in this long */
  /* the timer armed: its number (the message's payload; an older one that
   * fires is ignored) and when it fires (uv_now) */
  uint64_t timer, timer_at;
  int armed, running, again, orphaned;
};

durable__sweep_t *durable__sweep_new(durable_hub_t *hub, const char *msg,
                                     const durable_stream_id_t *id,
                                     const durable_retention_t *declared) {
  durable__sweep_t *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->msg = strdup(msg)) == NULL ||
      (s->ns = strdup(id->ns)) == NULL || (s->key = strdup(id->key)) == NULL) {
    if (s) {
      free(s->msg);
      free(s->ns);
    }
    free(s);
    return NULL;
  }
  s->hub = hub;
  s->mesh = durable_hub_mesh(hub);
  s->declared = *declared;
  durable_stream_items_ns(id, s->items_ns, sizeof s->items_ns);
  return s;
}

static void sweep_free(durable__sweep_t *s) {
  free(s->msg);
  free(s->ns);
  free(s->key);
  free(s);
}

void durable__sweep_free(durable__sweep_t *s) {
  if (s == NULL)
    return;
  if (s->running)
    s->orphaned = 1; /* its read or trim still answers: freed then */
  else
    sweep_free(s);
}

/* A run at least `after_ms` from now, and not sooner than SWEEP_GAP_MS
 * after the last one began; a timer armed for later is replaced (a
 * duration's far-off timer must not keep a sooner run waiting). */
static void schedule(durable__sweep_t *s, uint64_t after_ms) {
  if (s->running) {
    s->again = 1;
    return;
  }
  if (s->mesh->closing)
    return;
  uint64_t now = uv_now(durable_mesh_loop(s->mesh));
  uint64_t gap =
      s->last_run + SWEEP_GAP_MS > now ? s->last_run + SWEEP_GAP_MS - now : 0;
  uint64_t ms = after_ms > gap ? after_ms : gap;
  if (ms > UINT32_MAX)
    ms = UINT32_MAX;
  if (s->armed && s->timer_at <= now + ms)
    return; /* one comes sooner already */
  char payload[24];
  snprintf(payload, sizeof payload, "%llu", (unsigned long long)++s->timer);
  s->armed =
      durable_hub_post_after(s->hub, (uint32_t)ms, s->msg, payload, NULL) == 0;
  s->timer_at = now + ms;
}

static durable_retention_t in_force(durable__sweep_t *s) {
  return durable__retention_in_force(s->mesh, s->ns, &s->declared);
}

void durable__sweep_acked(durable__sweep_t *s, int64_t checkpoint) {
  if (s == NULL)
    return;
  s->checkpoint = checkpoint;
  if (in_force(s).keep != DURABLE_KEEP_ALL)
    schedule(s, 0);
}

void durable__sweep_claimed(durable__sweep_t *s, int64_t checkpoint) {
  if (s == NULL)
    return;
  /* a new lease may be on a new stream (deleted and made anew), or one
   * trimmed by others meanwhile: what this sweep knew is no longer so */
  s->lease++;
  s->trimmed = 0;
  durable__sweep_acked(s, checkpoint);
}

/* A run is over: the next one if more came meanwhile, or when the oldest
 * kept item ages out. */
static void run_over(durable__sweep_t *s) {
  s->running = 0;
  if (s->orphaned) {
    sweep_free(s);
  } else if (s->again) {
    s->again = 0;
    schedule(s, 0);
  } else if (s->due_ms) {
    schedule(s, s->due_ms);
  }
}

static void on_swept(int status, int64_t deleted, const char *message,
                     void *data) {
  durable__sweep_t *s = data;
  if (status == 0 && s->run_lease == s->lease) {
    s->trimmed = s->through;
  } else if (status < 0 && !s->orphaned) {
    /* refused: a seek back (the checkpoint it knew is gone), a delete, a
     * lost connection; the next acknowledgement tries again */
    durable_mesh_log(s->mesh,
                     status == DURABLE_EINVAL || status == DURABLE_ENOTFOUND ||
                             status == DURABLE_ESHUTDOWN
                         ? DURABLE_LOG_DEBUG
                         : DURABLE_LOG_WARN,
                     "[DurableStreams] %s",
                     message ? message : durable_strerror(status));
  }
  if (status == 0 && deleted > 0 && !s->orphaned) {
    durable_stream_id_t id = {.ns = s->ns, .key = s->key};
    char policy[64];
    durable_retention_t p = in_force(s);
    durable_retention_format(&p, policy, sizeof policy);
    durable_mesh_log(s->mesh, DURABLE_LOG_DEBUG,
                     "[DurableStreams] %s: retention %s deleted %lld "
                     "acknowledged item(s), through %lld",
                     durable__stream_name(&id).text, policy, (long long)deleted,
                     (long long)s->through);
  }
  run_over(s);
}

static void trim(durable__sweep_t *s, int64_t through) {
  durable_stream_id_t id = {.ns = s->ns, .key = s->key};
  durable_error_t err = {0};
  s->through = through;
  if (durable__stream_sweep(s->mesh, &id, through, on_swept, s, &err) < 0)
    on_swept(err.code, 0, err.message, s);
}

/* A duration: the acknowledged items appended before the cutoff go, from
 * the oldest up to the first one that is younger. */
static void on_oldest(const durable_result_t *res, void *data) {
  durable__sweep_t *s = data;
  if (s->orphaned || res->status < 0) {
    run_over(s);
    return;
  }
  durable_retention_t p = in_force(s);
  int64_t now = durable__now_ms(), through = 0;
  size_t i = 0;
  for (; p.keep == DURABLE_KEEP_AGE && i < res->count; i++) {
    const durable_node_t *n = res->nodes[i];
    int64_t seq = durable__item_sequence(n->id);
    if (seq > s->checkpoint)
      break; /* the next acknowledgement schedules a run */
    int64_t age = now - n->created_at;
    if (age < p.age_ms) {
      s->due_ms = (uint64_t)(p.age_ms - age);
      break;
    }
    through = seq;
  }
  if (i == res->count && res->count == SWEEP_PAGE)
    s->again = 1; /* a whole page aged out: read on after this trim */
  if (through > s->trimmed)
    trim(s, through);
  else
    run_over(s);
}

void durable__sweep_run(durable__sweep_t *s, const char *timer) {
  if (s == NULL || strtoull(timer ? timer : "", NULL, 10) != s->timer)
    return; /* an older timer, replaced by a sooner one */
  s->armed = 0;
  if (s->running) {
    s->again = 1;
    return;
  }
  durable_retention_t p = in_force(s);
  if (p.keep == DURABLE_KEEP_ALL || s->mesh->closing)
    return;
  s->last_run = uv_now(durable_mesh_loop(s->mesh));
  s->due_ms = 0;
  s->running = 1;
  s->run_lease = s->lease;
  if (p.keep == DURABLE_KEEP_COUNT) {
    int64_t through = s->checkpoint - p.count;
    if (through > s->trimmed)
      trim(s, through);
    else
      run_over(s);
    return;
  }
  durable_error_t err = {0};
  if (durable__store_read_items(durable_mesh_store(s->mesh),
                                durable_mesh_principal(s->mesh), s->items_ns,
                                s->trimmed, SWEEP_PAGE, on_oldest, s, &err) < 0)
    run_over(s);
}

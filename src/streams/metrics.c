/*
 * metrics.c: the Prometheus endpoint of a host (durable_mesh_serve_metrics,
 * `durable run --metrics HOST:PORT`): GET /metrics answers the text
 * exposition format 0.0.4.
 *
 * HTTP is libmicrohttpd's, run on the mesh's libuv loop, so that a scrape
 * reads the mesh's state on the thread that owns it and nothing needs a
 * lock:
 *
 *   MHD daemon, MHD_USE_EPOLL (no thread of its own)
 *     its epoll fd  --uv_poll_t readable-->  MHD_run
 *     MHD_get_timeout                   -->  uv_timer_t  --> MHD_run
 *   GET /metrics: suspend the connection, durable_stream_statuses (the
 *     store answers on the loop), write the text, resume it; MHD_run then
 *     calls the handler again, which queues the answer
 *
 * The listening socket is made here, bound to the address given and only
 * that, so that a port in use is reported as such, before the host starts.
 * The gauges are read from the store at each scrape (over the families this
 * process consumes: stored state, whichever host holds the streams); the
 * counters are this process's (stats.c), summed per family when the store
 * has answered, so that a scrape's counters are never older than its gauges
 * (an item seen acknowledged is an item counted); a stream's key is never a
 * label (one series per owner would be unbounded).  A consumer group's
 * figures are a series of their own, labelled family and group (a group
 * is a name a plugin declares: their number is bounded).  The server
 * closes with the mesh: when its read-issuing hub is disposed, the daemon
 * stops and its two libuv handles close, counted among the mesh's handles,
 * so that the loop is empty once the mesh is freed.
 */
#include "queue.h"
#include "stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct scrape_s scrape_t;

typedef struct {
  durable_mesh_t *mesh;
  struct MHD_Daemon *daemon;
  uv_poll_t poll;
  uv_timer_t timer;
  int handles_open;
  struct durable__queue scrapes; /* in flight, newest first */
  double started; /* the process's start, seconds since the epoch */
} metrics_t;

/* One family's figures in one scrape. */
typedef struct {
  int64_t streams, lag, failing, dead_letters;
  double oldest_age; /* seconds */
  durable_stream_stats_t counts;
} family_t;

struct scrape_s {
  metrics_t *m;                /* NULL once the server closed */
  struct MHD_Connection *conn; /* NULL once MHD is done with it */
  struct durable__queue link;  /* in m->scrapes while m is set */
  durable__map_t families;     /* name -> family_t */
  int64_t now;
  int reading;  /* durable_stream_statuses is out */
  int answered; /* `text`/`status` are set: the handler may queue them */
  unsigned status;
  char *text;
  size_t size;
};

/* ---- the text --------------------------------------------------------- */

static family_t *family_of(scrape_t *s, const char *name) {
  family_t *f = durable__map_get(&s->families, name);
  if (f == NULL && (f = calloc(1, sizeof(*f))) != NULL &&
      durable__map_put(&s->families, name, f) < 0) {
    free(f);
    f = NULL;
  }
  return f;
}

static void add_family(const char *name, void *data) {
  family_of(data, name);
}

static int want(const char *ns, void *data) {
  scrape_t *s = data;
  return durable__map_get(&s->families, ns) != NULL;
}

/* The figures of family `ns` (one of this scrape's), or of its consumer
 * group `group` there: "{ns}/{group}" (a family has no '/'); NULL for a
 * family not served here. */
static family_t *figures_of(scrape_t *s, const char *ns, const char *group) {
  if (durable__map_get(&s->families, ns) == NULL)
    return NULL;
  if (group == NULL)
    return durable__map_get(&s->families, ns);
  char name[DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 2];
  snprintf(name, sizeof name, "%s/%s", ns, group);
  return family_of(s, name);
}

static void on_status(const durable_stream_status_t *st, void *data) {
  scrape_t *s = data;
  family_t *f = figures_of(s, st->stream.ns, st->group);
  if (f == NULL)
    return;
  f->streams++;
  f->lag += st->lag;
  f->dead_letters += st->dead_letters;
  if (st->attempts > 0)
    f->failing++;
  if (st->oldest_appended_at > 0 && s->now > st->oldest_appended_at) {
    double age = (double)(s->now - st->oldest_appended_at) / 1000.0;
    if (age > f->oldest_age)
      f->oldest_age = age;
  }
}

/* The counters of a family whose gauges were read (one first counted while
 * the store answered waits for the next scrape). */
static void on_counted(const durable_stream_id_t *id,
                       const durable_stream_stats_t *c, void *data) {
  scrape_t *s = data;
  family_t *f = figures_of(s, id->ns, c->group);
  if (f == NULL)
    return;
  f->counts.appended += c->appended;
  f->counts.handled += c->handled;
  f->counts.failed += c->failed;
  f->counts.redelivered += c->redelivered;
  f->counts.dead_lettered += c->dead_lettered;
  f->counts.trimmed += c->trimmed;
  f->counts.batches += c->batches;
  f->counts.detached += c->detached;
}

static void add_counted_family(const durable_stream_id_t *id,
                               const durable_stream_stats_t *c, void *data) {
  (void)c;
  family_of(data, id->ns);
}

/* A label value, escaped as the format wants (\\, \", \n). */
static void put_label(FILE *out, const char *v) {
  for (; *v; v++) {
    if (*v == '\\' || *v == '"')
      fprintf(out, "\\%c", *v);
    else if (*v == '\n')
      fputs("\\n", out);
    else
      fputc(*v, out);
  }
}

typedef enum { V_INT, V_UINT, V_SECONDS } kind_t;

/* One metric over every family: HELP, TYPE and a line per family. */
static void put_family_metric(FILE *out, scrape_t *s, const char *name,
                              const char *type, const char *help, size_t offset,
                              kind_t kind) {
  fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  const char *family;
  void *value;
  for (size_t i = 0; durable__map_next(&s->families, &i, &family, &value);) {
    const char *field = (const char *)value + offset;
    const char *group = strchr(family, '/'); /* a consumer group's */
    fprintf(out, "%s{family=\"", name);
    if (group) {
      char ns[DURABLE_PATH_MAX + 1];
      snprintf(ns, sizeof ns, "%.*s", (int)(group - family), family);
      put_label(out, ns);
      fputs("\",group=\"", out);
      put_label(out, group + 1);
    } else {
      put_label(out, family);
    }
    if (kind == V_INT)
      fprintf(out, "\"} %lld\n", (long long)*(const int64_t *)field);
    else if (kind == V_UINT)
      fprintf(out, "\"} %llu\n", (unsigned long long)*(const uint64_t *)field);
    else
      fprintf(out, "\"} %.3f\n", *(const double *)field);
  }
}

static void put_one(FILE *out, const char *name, const char *type,
                    const char *help, double v) {
  fprintf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
          name, v);
}

#define FAMILY(field) offsetof(family_t, field)
#define COUNT(field)                                                           \
  (offsetof(family_t, counts) + offsetof(durable_stream_stats_t, field))

static void put_text(scrape_t *s, FILE *out) {
  put_family_metric(out, s, "durable_stream_lag", "gauge",
                    "Items appended and not yet acknowledged, summed over "
                    "the family's stored streams.",
                    FAMILY(lag), V_INT);
  put_family_metric(out, s, "durable_stream_oldest_unacknowledged_age_seconds",
                    "gauge",
                    "Age of the oldest unacknowledged item over the "
                    "family's stored streams (0 when none waits).",
                    FAMILY(oldest_age), V_SECONDS);
  put_family_metric(out, s, "durable_streams", "gauge",
                    "Stored streams of the family.", FAMILY(streams), V_INT);
  put_family_metric(out, s, "durable_stream_failing", "gauge",
                    "Streams of the family whose consumer is failing on its "
                    "next item.",
                    FAMILY(failing), V_INT);
  put_family_metric(out, s, "durable_stream_dead_letters", "gauge",
                    "Items stored in the family's dead-letter streams.",
                    FAMILY(dead_letters), V_INT);
  put_family_metric(out, s, "durable_stream_appended_total", "counter",
                    "Items this process appended.", COUNT(appended), V_UINT);
  put_family_metric(out, s, "durable_stream_handled_total", "counter",
                    "Items this process handled and acknowledged.",
                    COUNT(handled), V_UINT);
  put_family_metric(out, s, "durable_stream_failed_total", "counter",
                    "Handler failures in this process.", COUNT(failed), V_UINT);
  put_family_metric(out, s, "durable_stream_redelivered_total", "counter",
                    "Items handed to a handler again in this process.",
                    COUNT(redelivered), V_UINT);
  put_family_metric(out, s, "durable_stream_dead_lettered_total", "counter",
                    "Items this process moved to the dead letters.",
                    COUNT(dead_lettered), V_UINT);
  put_family_metric(out, s, "durable_stream_trimmed_total", "counter",
                    "Items trims made by this process deleted.", COUNT(trimmed),
                    V_UINT);
  put_family_metric(out, s, "durable_stream_batches_total", "counter",
                    "Batches a batch handler of this process handled and "
                    "acknowledged.",
                    COUNT(batches), V_UINT);
  put_family_metric(out, s, "durable_stream_detached_total", "counter",
                    "Consumer groups a trim of this process detached (they "
                    "stopped holding trims back).",
                    COUNT(detached), V_UINT);
  durable_mesh_stats_t ms;
  durable_mesh_stats(s->m->mesh, &ms);
  put_one(out, "durable_active_hubs", "gauge", "Hubs active in this mesh.",
          (double)ms.active_hubs);
  put_one(out, "durable_hub_activations_total", "counter",
          "Hubs built for node addresses.", (double)ms.activations);
  put_one(out, "durable_hub_messages_total", "counter", "Messages handled.",
          (double)ms.messages);
  durable_publish_stats_t ps;
  durable_mesh_publish_stats(s->m->mesh, &ps);
  put_one(out, "durable_publish_in_flight", "gauge",
          "Publishes sent and not answered yet (the publish window).",
          (double)ps.in_flight);
  put_one(out, "durable_publish_waiting", "gauge",
          "Publishes waiting for room in the publish window.",
          (double)ps.waiting);
  put_one(out, "durable_publish_waiting_bytes", "gauge",
          "Bytes of the publishes waiting for room.", (double)ps.waiting_bytes);
  put_one(out, "durable_publish_waited_total", "counter",
          "Publishes that waited for room, then went.", (double)ps.waited);
  put_one(out, "durable_publish_refused_total", "counter",
          "Publishes refused (EAGAIN): the waiting bytes would have passed "
          "publish_window.waiting_bytes, or one waited max_block_ms.",
          (double)(ps.refused + ps.expired));
  size_t rss = 0;
  uv_rusage_t ru;
  if (uv_resident_set_memory(&rss) == 0)
    put_one(out, "process_resident_memory_bytes", "gauge",
            "Resident memory size in bytes.", (double)rss);
  if (uv_getrusage(&ru) == 0)
    put_one(out, "process_cpu_seconds_total", "counter",
            "Total user and system CPU time spent in seconds.",
            (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
  put_one(out, "process_start_time_seconds", "gauge",
          "Start time of the process since unix epoch in seconds.",
          s->m->started);
}

/* ---- a scrape --------------------------------------------------------- */

static void scrape_free(scrape_t *s) {
  const char *name;
  void *value;
  for (size_t i = 0; durable__map_next(&s->families, &i, &name, &value);)
    free(value);
  durable__map_free(&s->families);
  free(s->text);
  free(s);
}

static void unlink_scrape(scrape_t *s) {
  if (s->m == NULL)
    return;
  durable__queue_remove(&s->link);
  s->m = NULL;
}

static void run_daemon(metrics_t *m);

static void answer(scrape_t *s, unsigned status, const char *text) {
  if (text != NULL) {
    s->text = strdup(text);
    s->size = s->text ? strlen(s->text) : 0;
  }
  s->status = s->text ? status : MHD_HTTP_INTERNAL_SERVER_ERROR;
  s->answered = 1;
  if (s->conn == NULL)
    return;
  /* MHD_run calls the handler again, which queues the answer: now, rather
   * than when the daemon's epoll fd next wakes the loop */
  MHD_resume_connection(s->conn);
  if (s->m && s->m->daemon)
    run_daemon(s->m);
}

static void on_statuses(int status, const char *message, void *data) {
  scrape_t *s = data;
  s->reading = 0;
  if (s->m == NULL || s->conn == NULL) { /* closed, or the client left */
    if (s->conn == NULL)
      scrape_free(s);
    return;
  }
  if (status < 0) {
    char line[1024];
    snprintf(line, sizeof line, "reading the streams failed: %s\n",
             message ? message : durable_strerror(status));
    answer(s, MHD_HTTP_SERVICE_UNAVAILABLE, line);
    return;
  }
  /* the counters now, not when the scrape came: read after the gauges,
   * they are never behind them (a failing item's gauge with its failure
   * counted, a lag of 0 with every handled item counted) */
  durable_mesh_stream_stats(s->m->mesh, on_counted, s);
  FILE *out = open_memstream(&s->text, &s->size);
  if (out != NULL) {
    put_text(s, out);
    if (fclose(out) != 0) {
      free(s->text);
      s->text = NULL;
    }
  }
  answer(s, MHD_HTTP_OK, NULL);
}

static enum MHD_Result queue_text(struct MHD_Connection *conn, unsigned status,
                                  const char *text, size_t size) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      size, (void *)text, MHD_RESPMEM_MUST_COPY);
  if (r == NULL)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          status == MHD_HTTP_OK ? CONTENT_TYPE
                                                : "text/plain; charset=utf-8");
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  metrics_t *m = cls;
  scrape_t *s = *con_cls;
  (void)version;
  (void)upload;
  if (s != NULL) { /* resumed: the answer is there */
    *upload_size = 0;
    if (!s->answered)
      return MHD_YES;
    return queue_text(conn, s->status, s->text ? s->text : "", s->size);
  }
  /* HEAD as GET: MHD sends the headers alone */
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    static const char text[] = "only GET (and HEAD) is served here\n";
    return queue_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, sizeof text - 1);
  }
  if (strcmp(url, "/metrics") != 0) {
    static const char text[] = "not found: the metrics are at /metrics\n";
    return queue_text(conn, MHD_HTTP_NOT_FOUND, text, sizeof text - 1);
  }
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return MHD_NO;
  s->m = m;
  s->conn = conn;
  s->now = now_ms();
  durable__queue_insert_head(&m->scrapes, &s->link);
  *con_cls = s;
  /* the families this process consumes, then the counters' families: the
   * gauges are read for each of them */
  durable__consumed_families(m->mesh, add_family, s);
  durable__consumers_families(m->mesh, add_family, s);
  durable_mesh_stream_stats(m->mesh, add_counted_family, s);
  durable_error_t err = {0};
  s->reading = 1;
  if (durable_stream_statuses(durable_mesh_store(m->mesh),
                              durable_mesh_principal(m->mesh), want, on_status,
                              on_statuses, s, &err) < 0) {
    s->reading = 0;
    char line[1024];
    snprintf(line, sizeof line, "reading the streams failed: %s\n",
             err.message);
    s->text = strdup(line);
    s->size = s->text ? strlen(s->text) : 0;
    s->status = MHD_HTTP_SERVICE_UNAVAILABLE;
    s->answered = 1;
    return queue_text(conn, s->status, s->text ? s->text : "", s->size);
  }
  MHD_suspend_connection(conn);
  return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode code) {
  scrape_t *s = *con_cls;
  (void)cls;
  (void)conn;
  (void)code;
  if (s == NULL)
    return;
  *con_cls = NULL;
  s->conn = NULL;
  unlink_scrape(s);
  if (!s->reading)
    scrape_free(s);
  /* else on_statuses frees it when the store answers */
}

/* ---- on the loop ------------------------------------------------------ */

static void on_timer(uv_timer_t *t);

/* Let MHD do what is ready, then wake it again when its next timeout is
 * due (connections it must time out, data it holds already). */
static void run_daemon(metrics_t *m) {
  MHD_run(m->daemon);
  MHD_UNSIGNED_LONG_LONG ms = 0;
  if (MHD_get_timeout(m->daemon, &ms) == MHD_YES)
    uv_timer_start(&m->timer, on_timer, ms > 60000 ? 60000 : ms, 0);
  else
    uv_timer_stop(&m->timer);
}

static void on_timer(uv_timer_t *t) {
  run_daemon(t->data);
}

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  run_daemon(p->data);
}

static void on_handle_closed(uv_handle_t *h) {
  metrics_t *m = h->data;
  durable_mesh_t *mesh = m->mesh;
  if (--m->handles_open == 0)
    free(m);
  durable__sched_handle_closed(&mesh->sched);
}

/* Where the mesh keeps its metrics server, per-mesh state (stream.c):
 * NULL once the mesh's state is gone. */
static const char metrics_key; /* the state's key: its address */

static void **metrics_slot(durable_mesh_t *mesh) {
  return durable__mesh_state(mesh, &metrics_key);
}

int durable__metrics_install(durable_mesh_t *mesh) {
  return durable__mesh_state_add(mesh, &metrics_key, sizeof(void *), free);
}

/* The mesh closes (its read-issuing hub leaves): stop serving.  A scrape
 * still reading is let go of: its answer frees it. */
static void on_mesh_closing(durable_hub_t *hub, void *data) {
  metrics_t *m = data;
  (void)hub;
  void **slot = metrics_slot(m->mesh);
  if (slot)
    *slot = NULL;
  struct durable__queue *q, *next;
  DURABLE__QUEUE_FOREACH_SAFE(q, next, &m->scrapes) {
    scrape_t *s = DURABLE__QUEUE_DATA(q, scrape_t, link);
    durable__queue_remove(&s->link);
    s->m = NULL;
    /* resumed so that MHD may close it: a scrape in flight as the host
     * leaves gets its connection closed, not an answer */
    if (s->conn && !s->answered)
      answer(s, MHD_HTTP_SERVICE_UNAVAILABLE, "the host is leaving\n");
  }
  /* the poll handle leaves the loop's epoll set now; then MHD closes its
   * epoll fd and the listening socket */
  uv_close((uv_handle_t *)&m->poll, on_handle_closed);
  uv_close((uv_handle_t *)&m->timer, on_handle_closed);
  MHD_stop_daemon(m->daemon);
  m->daemon = NULL;
}

/* ---- starting --------------------------------------------------------- */

/* "IPV4:PORT", "[IPV6]:PORT", "localhost:PORT". */
static int parse_address(const char *address, struct sockaddr_storage *out,
                         durable_error_t *err) {
  const char *colon = address ? strrchr(address, ':') : NULL;
  char host[64];
  char *end = NULL;
  long port = colon && colon[1] >= '0' && colon[1] <= '9'
                  ? strtol(colon + 1, &end, 10)
                  : -1; /* digits only: no sign, no space */
  size_t n = colon ? (size_t)(colon - address) : 0;
  if (colon == NULL || port < 0 || *end != '\0' || port > 65535 || n == 0 ||
      n >= sizeof host)
    return durable__error(err, DURABLE_EINVAL,
                          "metrics address '%s' is not HOST:PORT (an IPv4 "
                          "address, [an IPv6 address] or localhost, and a "
                          "port 0-65535)",
                          address ? address : "");
  memcpy(host, address, n);
  host[n] = '\0';
  memset(out, 0, sizeof *out);
  if (strcmp(host, "localhost") == 0)
    snprintf(host, sizeof host, "127.0.0.1");
  if (host[0] == '[' && host[n - 1] == ']') {
    host[n - 1] = '\0';
    if (uv_ip6_addr(host + 1, (int)port, (struct sockaddr_in6 *)out) == 0)
      return 0;
  } else if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)out) == 0) {
    return 0;
  }
  return durable__error(err, DURABLE_EINVAL,
                        "metrics address '%s': '%s' is not an IP address "
                        "(give an IPv4 address, [an IPv6 address] or "
                        "localhost)",
                        address, host);
}

static int listen_on(const char *address, const struct sockaddr_storage *sa,
                     char *bound, size_t size, durable_error_t *err) {
  socklen_t len = sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                            : sizeof(struct sockaddr_in);
  int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd >= 0)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd >= 0 && sa->ss_family == AF_INET6)
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (fd < 0 || bind(fd, (const struct sockaddr *)sa, len) != 0 ||
      listen(fd, 64) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return durable__error(
        err, DURABLE_EIO, "cannot serve metrics on %s: %s%s", address,
        strerror(e), e == EADDRINUSE ? " (another process listens there)" : "");
  }
  struct sockaddr_storage got;
  socklen_t got_len = sizeof got;
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (getsockname(fd, (struct sockaddr *)&got, &got_len) == 0) {
    if (got.ss_family == AF_INET6) {
      struct sockaddr_in6 *a = (struct sockaddr_in6 *)&got;
      inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
      port = ntohs(a->sin6_port);
      snprintf(bound, size, "[%s]:%d", ip, port);
    } else {
      struct sockaddr_in *a = (struct sockaddr_in *)&got;
      inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
      port = ntohs(a->sin_port);
      snprintf(bound, size, "%s:%d", ip, port);
    }
  }
  return fd;
}

/* The process's start from /proc (what Prometheus's own clients report);
 * now when it cannot be read. */
static double process_start(void) {
  double now = (double)now_ms() / 1000.0;
  FILE *f = fopen("/proc/self/stat", "r");
  char buf[2048];
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the name may hold spaces */
  unsigned long long start = 0;
  for (int field = 2; p && *p && field < 22; p++)
    if (*p == ' ' && ++field == 22)
      start = strtoull(p + 1, NULL, 10);
  long hz = sysconf(_SC_CLK_TCK);
  unsigned long long btime = 0;
  if ((f = fopen("/proc/stat", "r")) != NULL) {
    while (fgets(buf, sizeof buf, f))
      if (sscanf(buf, "btime %llu", &btime) == 1)
        break;
    fclose(f);
  }
  if (start == 0 || btime == 0 || hz <= 0)
    return now;
  return (double)btime + (double)start / (double)hz;
}

int durable_mesh_serve_metrics(durable_mesh_t *mesh, const char *address,
                               durable_error_t *err) {
  struct sockaddr_storage sa;
  int rc = parse_address(address, &sa, err);
  if (rc < 0)
    return rc;
  void **slot = mesh ? metrics_slot(mesh) : NULL;
  if (slot == NULL || mesh->closing)
    return durable__error(err, DURABLE_ESHUTDOWN, "the mesh is closed");
  if (*slot != NULL)
    return durable__error(err, DURABLE_EEXIST,
                          "this mesh serves its metrics already");
  char bound[INET6_ADDRSTRLEN + 16] = "";
  int fd = listen_on(address, &sa, bound, sizeof bound, err);
  if (fd < 0)
    return fd;
  metrics_t *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    close(fd);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  m->mesh = mesh;
  m->started = process_start();
  durable__queue_init(&m->scrapes);
  m->daemon = MHD_start_daemon(
      MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_request, m,
      MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_NOTIFY_COMPLETED,
      on_completed, m, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30,
      /* a scraper needs a few; many would take the store's descriptors */
      MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)16, MHD_OPTION_END);
  const union MHD_DaemonInfo *info =
      m->daemon ? MHD_get_daemon_info(m->daemon, MHD_DAEMON_INFO_EPOLL_FD)
                : NULL;
  if (info == NULL || uv_poll_init(mesh->loop, &m->poll, info->epoll_fd) != 0 ||
      durable__hub_on_dispose(durable__mesh_reads_hub(mesh), on_mesh_closing,
                              m) < 0) {
    if (m->daemon)
      MHD_stop_daemon(m->daemon); /* closes the socket */
    else
      close(fd);
    free(m);
    return durable__error(err, DURABLE_EIO,
                          "cannot serve metrics on %s: the HTTP server did "
                          "not start",
                          address);
  }
  uv_timer_init(mesh->loop, &m->timer);
  m->poll.data = m->timer.data = m;
  m->handles_open = 2;
  durable__sched_handle_opened(&mesh->sched); /* the poll */
  durable__sched_handle_opened(&mesh->sched); /* the timer */
  uv_poll_start(&m->poll, UV_READABLE, on_poll);
  *slot = m;
  durable_mesh_log(mesh, DURABLE_LOG_INFO,
                   "durable: serving metrics at http://%s/metrics", bound);
  return 0;
}

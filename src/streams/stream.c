/*
 * stream.c: stream identities and paths, and the two node contents of a
 * stream (the stream node's state, an item's content) in JSON.
 *
 * The state's field names and order are fixed (doc/design.md, "The stream
 * as nodes"), so `durable get` shows an operator the same fields in the
 * same order on every stream: Namespace, Key, LastSequence, the lease
 * (Subscriber, the hub address, and SubscriberInstance, the process that
 * holds it; LeaseEpoch, SubscribedAt), Checkpoint, CheckpointAt,
 * OrphanedAt, LastSubscriber, then the fields that appear only once they
 * apply.  An item keeps its payload
 * as a JSON string (PayloadJson) so the text stays exactly as produced --
 * key order, "$type" first, number spellings -- whatever the store does with
 * JSON.
 */
#include "stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int durable_stream_check(const durable_stream_id_t *id, durable_error_t *err) {
  const char *ns = id ? id->ns : NULL;
  int blank = ns == NULL || strspn(ns, " \t\r\n") == strlen(ns);
  if (blank || strchr(ns, '/') != NULL)
    return durable__error(err, DURABLE_EINVAL,
                          "A durable stream needs a non-empty Namespace "
                          "without '/' (was '%s').",
                          ns ? ns : "");
  const char *key = id->key;
  if (key == NULL || strspn(key, " \t\r\n") == strlen(key))
    return durable__error(err, DURABLE_EINVAL,
                          "Durable stream '%s' needs the owning node's path "
                          "as Key.",
                          ns);
  char path[DURABLE_PATH_MAX + 1];
  if (durable_stream_path(id, path, sizeof path) < 0)
    return durable__error(err, DURABLE_EINVAL,
                          "Durable stream '%s' of key '%s' is too long: "
                          "the key and the namespace (%zu and %zu bytes) "
                          "make a path longer than %d bytes",
                          ns, key, strlen(key), strlen(ns), DURABLE_PATH_MAX);
  /* the items' paths are the longest: check the rules on one of them */
  char items[DURABLE_PATH_MAX + 40];
  snprintf(items, sizeof items, "%s/" DURABLE__ITEM_SEGMENT "/000000000001",
           path);
  return durable_path_check(items, err);
}

int durable_stream_path(const durable_stream_id_t *id, char *out, size_t size) {
  size_t klen = strlen(id->key);
  while (klen > 0 && id->key[klen - 1] == '/')
    klen--; /* trailing '/' trimmed */
  int n = snprintf(out, size, "%.*s/" DURABLE__STREAM_SEGMENT "/%s", (int)klen,
                   id->key, id->ns);
  return n < 0 || (size_t)n >= size ? DURABLE_EINVAL : n;
}

int durable_stream_items_ns(const durable_stream_id_t *id, char *out,
                            size_t size) {
  int n = durable_stream_path(id, out, size);
  if (n < 0)
    return n;
  int m = snprintf(out + n, size - (size_t)n, "/" DURABLE__ITEM_SEGMENT);
  return m < 0 || (size_t)(n + m) >= size ? DURABLE_EINVAL : n + m;
}

durable__stream_name_t durable__stream_name(const durable_stream_id_t *id) {
  durable__stream_name_t name;
  snprintf(name.text, sizeof name.text, "%s@%s", id->ns, id->key);
  return name;
}

/* ---- times and ids ----------------------------------------------------------
 */

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian), without timegm. */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int digits_at(const char *s, int n, int *out) {
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" exactly (what durable__iso_time writes), in
 * ms, without strptime and timegm (every item read carries one); -1 for
 * anything else. */
static int64_t parse_iso_exact(const char *s, size_t n) {
  int y, mo, d, h, mi, se, ms;
  if (n != 24 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
      s[16] != ':' || s[19] != '.' || s[23] != 'Z' || digits_at(s, 4, &y) ||
      digits_at(s + 5, 2, &mo) || digits_at(s + 8, 2, &d) ||
      digits_at(s + 11, 2, &h) || digits_at(s + 14, 2, &mi) ||
      digits_at(s + 17, 2, &se) || digits_at(s + 20, 3, &ms) || mo < 1 ||
      mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
    return -1;
  return ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60000 +
         (int64_t)se * 1000 + ms;
}

int64_t durable__parse_time(const char *text) {
  if (text == NULL)
    return 0;
  int64_t exact = parse_iso_exact(text, strlen(text));
  if (exact >= 0)
    return exact;
  struct tm tm = {0};
  int ms = 0;
  char *rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == NULL)
    return 0;
  if (*rest == '.') {
    int digits = 0;
    for (rest++; *rest >= '0' && *rest <= '9'; rest++, digits++)
      if (digits < 3)
        ms = ms * 10 + (*rest - '0');
    for (; digits < 3; digits++)
      ms *= 10;
  }
  return (int64_t)timegm(&tm) * 1000 + ms;
}

void durable__item_id(int64_t sequence, char out[13]) {
  snprintf(out, 13, "%012lld", (long long)sequence);
}

int64_t durable__item_sequence(const char *id) {
  if (id == NULL || strlen(id) != 12 || strspn(id, "0123456789") != 12)
    return 0;
  return strtoll(id, NULL, 10);
}

/* ---- the stream node's state
 * ---------------------------------------------------- */

int durable__str_set(char **field, const char *value) {
  char *copy = NULL;
  if (value && (copy = strdup(value)) == NULL)
    return DURABLE_ENOMEM;
  free(*field);
  *field = copy;
  return 0;
}

json_t *durable__json_message(const char *message) {
  json_t *text = json_string(message ? message : "");
  if (text != NULL)
    return text;
  char *ascii = strdup(message ? message : "");
  for (char *q = ascii; q && *q; q++)
    if ((unsigned char)*q >= 0x80)
      *q = '?';
  text = json_string(ascii ? ascii : "");
  free(ascii);
  return text;
}

void durable__state_free(durable__stream_state_t *s) {
  free(s->ns);
  free(s->key);
  free(s->subscriber);
  free(s->subscriber_instance);
  free(s->last_subscriber);
  free(s->group);
  free(s->start);
  memset(s, 0, sizeof *s);
}

int durable__state_holds(const durable_node_t *current,
                         int (*holds)(const durable__stream_state_t *stored,
                                      const void *arg),
                         const void *arg) {
  durable__stream_state_t stored;
  if (current == NULL)
    return DURABLE_ENOTFOUND;
  int rc = durable__state_decode(current->content, current->path, &stored);
  if (rc < 0)
    return rc;
  int same = holds(&stored, arg);
  durable__state_free(&stored);
  return same ? 0 : DURABLE_ECONFLICT;
}

int durable__state_copy(const durable__stream_state_t *from,
                        durable__stream_state_t *to) {
  *to = *from;
  to->ns = to->key = to->subscriber = to->subscriber_instance =
      to->last_subscriber = to->group = to->start = NULL;
  if (durable__str_set(&to->ns, from->ns) < 0 ||
      durable__str_set(&to->group, from->group) < 0 ||
      durable__str_set(&to->start, from->start) < 0 ||
      durable__str_set(&to->key, from->key) < 0 ||
      durable__str_set(&to->subscriber, from->subscriber) < 0 ||
      durable__str_set(&to->subscriber_instance, from->subscriber_instance) <
          0 ||
      durable__str_set(&to->last_subscriber, from->last_subscriber) < 0) {
    durable__state_free(to);
    return DURABLE_ENOMEM;
  }
  return 0;
}

static int64_t int_of(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  return json_is_integer(v) ? json_integer_value(v) : 0;
}

static const char *str_of(json_t *obj, const char *key) {
  return json_string_value(json_object_get(obj, key));
}

int durable__state_decode(const char *content, const char *stream_path,
                          durable__stream_state_t *out) {
  memset(out, 0, sizeof *out);
  int rc = 0;
  json_t *j = content ? durable__json_tree(content, &rc) : NULL;
  if (j == NULL && rc == DURABLE_ENOMEM)
    return rc; /* a state it could not read is no empty one */
  rc = 0;
  const char *ns = j ? str_of(j, "Namespace") : NULL;
  const char *key = j ? str_of(j, "Key") : NULL;
  if (ns == NULL || key == NULL || *ns == '\0' || *key == '\0') {
    /* no content: Namespace = node id, Key = namespace without the segment
     * (a group's: Namespace the stream's id, Group its own) */
    const char *seg = strstr(stream_path, "/" DURABLE__STREAM_SEGMENT "/");
    if (seg == NULL) { /* no stream: a node of the type made by hand */
      json_decref(j);
      return DURABLE_EINVAL;
    }
    out->key = strndup(stream_path, (size_t)(seg - stream_path));
    const char *id = seg + strlen("/" DURABLE__STREAM_SEGMENT "/");
    const char *gseg = strstr(id, "/" DURABLE__GROUP_SEGMENT "/");
    out->ns = gseg ? strndup(id, (size_t)(gseg - id)) : strdup(id);
    if (gseg &&
        durable__str_set(&out->group,
                         gseg + strlen("/" DURABLE__GROUP_SEGMENT "/")) < 0)
      rc = DURABLE_ENOMEM;
  } else {
    out->ns = strdup(ns);
    out->key = strdup(key);
  }
  if (out->ns == NULL || out->key == NULL)
    rc = DURABLE_ENOMEM;
  if (j && rc == 0) {
    out->last_sequence = int_of(j, "LastSequence");
    out->lease_epoch = int_of(j, "LeaseEpoch");
    out->checkpoint = int_of(j, "Checkpoint");
    out->subscribed_at = durable__parse_time(str_of(j, "SubscribedAt"));
    out->checkpoint_at = durable__parse_time(str_of(j, "CheckpointAt"));
    out->orphaned_at = durable__parse_time(str_of(j, "OrphanedAt"));
    out->trimmed_through = int_of(j, "TrimmedThrough");
    out->last_batch = int_of(j, "LastBatch");
    out->deleting_at = durable__parse_time(str_of(j, "DeletingAt"));
    out->hold_until = durable__parse_time(str_of(j, "HoldUntil"));
    out->seen_last = int_of(j, "SeenLastSequence");
    out->seen_checkpoint = int_of(j, "SeenCheckpoint");
    out->seen_epoch = int_of(j, "SeenLeaseEpoch");
    out->lost_from = int_of(j, "LostFrom");
    out->lost_to = int_of(j, "LostTo");
    out->created_at = durable__parse_time(str_of(j, "CreatedAt"));
    out->detach_idle_ms = int_of(j, "DetachIdleMs");
    out->detach_items = int_of(j, "DetachItems");
    out->detach_age_ms = int_of(j, "DetachAgeMs");
    out->detached_at = durable__parse_time(str_of(j, "DetachedAt"));
    if ((str_of(j, "Group") &&
         durable__str_set(&out->group, str_of(j, "Group")) < 0) ||
        durable__str_set(&out->start, str_of(j, "Start")) < 0 ||
        durable__str_set(&out->subscriber, str_of(j, "Subscriber")) < 0 ||
        durable__str_set(&out->subscriber_instance,
                         str_of(j, "SubscriberInstance")) < 0 ||
        durable__str_set(&out->last_subscriber, str_of(j, "LastSubscriber")) <
            0)
      rc = DURABLE_ENOMEM;
  }
  json_decref(j);
  if (rc < 0)
    durable__state_free(out);
  return rc;
}

/* Text built by hand in the bytes jansson's compact, order-preserving dump
 * gives (see the item's content below for why).  A failed allocation makes
 * the buffer fail for good: the text's writer checks once, at the end. */
typedef struct {
  char *p;
  size_t len, cap;
  int failed;
} text_buf_t;

static void buf_put(text_buf_t *b, const char *s, size_t n) {
  if (b->failed)
    return;
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      b->failed = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

#define BUF_LIT(b, lit) buf_put((b), (lit), sizeof(lit) - 1)

/* `s` as a JSON string, or null. */
static void buf_put_str(text_buf_t *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  if (s == NULL) {
    BUF_LIT(b, "null");
    return;
  }
  BUF_LIT(b, "\"");
  const char *run = s;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c != '"' && c != '\\')
      continue;
    buf_put(b, run, (size_t)(s - run));
    char esc[6] = {'\\', 0};
    size_t n = 2;
    switch (c) {
    case '"':
      esc[1] = '"';
      break;
    case '\\':
      esc[1] = '\\';
      break;
    case '\b':
      esc[1] = 'b';
      break;
    case '\f':
      esc[1] = 'f';
      break;
    case '\n':
      esc[1] = 'n';
      break;
    case '\r':
      esc[1] = 'r';
      break;
    case '\t':
      esc[1] = 't';
      break;
    default:
      memcpy(esc + 1, "u00", 3);
      esc[4] = hex[c >> 4];
      esc[5] = hex[c & 15];
      n = 6;
    }
    buf_put(b, esc, n);
    run = s + 1;
  }
  buf_put(b, run, (size_t)(s - run));
  BUF_LIT(b, "\"");
}

static void buf_put_time(text_buf_t *b, int64_t ms) {
  char when[32];
  if (ms == 0) {
    BUF_LIT(b, "null");
    return;
  }
  durable__iso_time(ms, when);
  buf_put_str(b, when);
}

static void buf_put_int(text_buf_t *b, int64_t v) {
  char n[24];
  buf_put(b, n, (size_t)snprintf(n, sizeof n, "%lld", (long long)v));
}

/* The text, NUL-terminated (malloc'ed), or NULL when out of memory. */
static char *buf_end(text_buf_t *b) {
  buf_put(b, "", 1);
  if (b->failed) {
    free(b->p);
    return NULL;
  }
  return b->p;
}

/* Written on every append and acknowledgement, so by hand too. */
char *durable__state_encode(const durable__stream_state_t *s) {
  text_buf_t b = {0};
  BUF_LIT(&b, "{\"Namespace\":");
  buf_put_str(&b, s->ns);
  BUF_LIT(&b, ",\"Key\":");
  buf_put_str(&b, s->key);
  if (s->group) {
    BUF_LIT(&b, ",\"Group\":");
    buf_put_str(&b, s->group);
    BUF_LIT(&b, ",\"Start\":");
    buf_put_str(&b, s->start);
    BUF_LIT(&b, ",\"CreatedAt\":");
    buf_put_time(&b, s->created_at);
    BUF_LIT(&b, ",\"DetachIdleMs\":");
    buf_put_int(&b, s->detach_idle_ms);
    BUF_LIT(&b, ",\"DetachItems\":");
    buf_put_int(&b, s->detach_items);
    BUF_LIT(&b, ",\"DetachAgeMs\":");
    buf_put_int(&b, s->detach_age_ms);
    BUF_LIT(&b, ",\"DetachedAt\":");
    buf_put_time(&b, s->detached_at);
  }
  BUF_LIT(&b, ",\"LastSequence\":");
  buf_put_int(&b, s->last_sequence);
  BUF_LIT(&b, ",\"Subscriber\":");
  buf_put_str(&b, s->subscriber);
  BUF_LIT(&b, ",\"SubscriberInstance\":");
  buf_put_str(&b, s->subscriber_instance);
  BUF_LIT(&b, ",\"LeaseEpoch\":");
  buf_put_int(&b, s->lease_epoch);
  BUF_LIT(&b, ",\"SubscribedAt\":");
  buf_put_time(&b, s->subscribed_at);
  BUF_LIT(&b, ",\"Checkpoint\":");
  buf_put_int(&b, s->checkpoint);
  BUF_LIT(&b, ",\"CheckpointAt\":");
  buf_put_time(&b, s->checkpoint_at);
  BUF_LIT(&b, ",\"OrphanedAt\":");
  buf_put_time(&b, s->orphaned_at);
  BUF_LIT(&b, ",\"LastSubscriber\":");
  buf_put_str(&b, s->last_subscriber);
  if (s->trimmed_through > 0) { /* only once trimmed: base fields till then */
    BUF_LIT(&b, ",\"TrimmedThrough\":");
    buf_put_int(&b, s->trimmed_through);
  }
  if (s->last_batch > 0) { /* only once a batch was acknowledged */
    BUF_LIT(&b, ",\"LastBatch\":");
    buf_put_int(&b, s->last_batch);
  }
  if (s->hold_until > 0) {
    BUF_LIT(&b, ",\"HoldUntil\":");
    buf_put_time(&b, s->hold_until);
  }
  if (s->deleting_at > 0) {
    BUF_LIT(&b, ",\"DeletingAt\":");
    buf_put_time(&b, s->deleting_at);
  }
  if (s->seen_last > 0 || s->seen_checkpoint > 0 || s->seen_epoch > 0) {
    BUF_LIT(&b, ",\"SeenLastSequence\":");
    buf_put_int(&b, s->seen_last);
    BUF_LIT(&b, ",\"SeenCheckpoint\":");
    buf_put_int(&b, s->seen_checkpoint);
    BUF_LIT(&b, ",\"SeenLeaseEpoch\":");
    buf_put_int(&b, s->seen_epoch);
  }
  if (s->lost_to > 0) {
    BUF_LIT(&b, ",\"LostFrom\":");
    buf_put_int(&b, s->lost_from);
    BUF_LIT(&b, ",\"LostTo\":");
    buf_put_int(&b, s->lost_to);
  }
  BUF_LIT(&b, "}");
  return buf_end(&b);
}

/* ---- items
 * ---------------------------------------------------------------------- */

/* The item's content is written here, not by jansson, in one fixed layout
 *
 *   {"Sequence":42,"PayloadJson":"<payload, escaped>","AppendedAt":"<time>"}
 *
 * (the bytes jansson's compact, order-preserving dump gives), so that a
 * reader can take the payload and the time out of it with one scan and no
 * JSON tree: the catch-up of a long stream does that millions of times.
 * Content in any other layout -- an item made by hand -- is parsed with
 * jansson as before.  Escaping follows jansson's: the two characters '"'
 * and '\\', the short escapes for \b \f \n \r \t, \u00XX for the other
 * control characters, everything else as it is (the payload is valid UTF-8:
 * a publish parsed it). */
char *durable__item_encode(int64_t sequence, const char *payload,
                           int64_t appended_at) {
  text_buf_t b = {0};
  BUF_LIT(&b, "{\"Sequence\":");
  buf_put_int(&b, sequence);
  BUF_LIT(&b, ",\"PayloadJson\":");
  buf_put_str(&b, payload);
  BUF_LIT(&b, ",\"AppendedAt\":");
  buf_put_time(&b, appended_at);
  BUF_LIT(&b, "}");
  return buf_end(&b);
}

/* The fixed layout of durable__item_encode: 1 with *payload (malloc'ed)
 * and *appended_at set, 0 when the content is in another layout (or uses an
 * escape this scan leaves to jansson), a negative code when out of memory. */
static int item_scan(const char *content, char **payload,
                     int64_t *appended_at) {
  static const char seq_key[] = "{\"Sequence\":";
  static const char payload_key[] = ",\"PayloadJson\":\"";
  static const char at_key[] = "\",\"AppendedAt\":";
  const char *s = content;
  if (strncmp(s, seq_key, sizeof seq_key - 1) != 0)
    return 0;
  s += sizeof seq_key - 1;
  if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
    return 0; /* not a JSON number: jansson says so */
  while (*s >= '0' && *s <= '9')
    s++;
  if (strncmp(s, payload_key, sizeof payload_key - 1) != 0)
    return 0;
  s += sizeof payload_key - 1;
  /* the payload: unescaped into a copy no longer than the escaped text */
  const char *end = s;
  while (*end && *end != '"' && (unsigned char)*end >= 0x20)
    end += *end == '\\' && end[1] ? 2 : 1;
  if (*end != '"')
    return 0; /* unterminated, or a raw control character: jansson's */
  char *out = malloc((size_t)(end - s) + 1), *o = out;
  if (out == NULL)
    return DURABLE_ENOMEM;
  for (; s < end; s++) {
    if (*s != '\\') {
      *o++ = *s;
      continue;
    }
    char c = *++s;
    switch (c) {
    case '"':
    case '\\':
    case '/':
      *o++ = c;
      break;
    case 'b':
      *o++ = '\b';
      break;
    case 'f':
      *o++ = '\f';
      break;
    case 'n':
      *o++ = '\n';
      break;
    case 'r':
      *o++ = '\r';
      break;
    case 't':
      *o++ = '\t';
      break;
    default: /* \u: left to jansson */
      free(out);
      return 0;
    }
  }
  *o = '\0';
  if (!durable__json_valid(out))
    goto other; /* jansson says what is wrong with it */
  int64_t at = 0;
  if (strncmp(end, at_key, sizeof at_key - 1) != 0)
    goto other;
  s = end + sizeof at_key - 1;
  if (strcmp(s, "null}") != 0) {
    const char *close = *s == '"' ? strchr(s + 1, '"') : NULL;
    char when[32];
    if (close == NULL || strcmp(close, "\"}") != 0 ||
        (size_t)(close - s - 1) >= sizeof when)
      goto other;
    memcpy(when, s + 1, (size_t)(close - s - 1));
    when[close - s - 1] = '\0';
    at = durable__parse_time(when); /* as jansson's path would read it */
  }
  *payload = out;
  *appended_at = at;
  return 1;
other:
  free(out);
  return 0;
}

int durable__item_decode(const durable_node_t *node, char **payload,
                         int64_t *appended_at, durable_error_t *err) {
  json_error_t je;
  int64_t at = 0;
  *payload = NULL;
  /* the runtime's own layout first: one scan, no tree */
  int rc = node->content ? item_scan(node->content, payload, &at) : 0;
  if (rc != 0) {
    if (rc > 0 && appended_at)
      *appended_at = at;
    return rc < 0 ? rc : 0;
  }
  int code = 0;
  json_t *j = durable__json_tree(node->content, &code);
  if (j == NULL && code == DURABLE_ENOMEM)
    return durable__error(err, code, "out of memory reading item %s",
                          node->path);
  const char *text = j ? str_of(j, "PayloadJson") : NULL;
  if (text == NULL) {
    json_decref(j);
    return durable__error(err, DURABLE_EINVAL,
                          "%s carries no DurableStreamItemContent", node->path);
  }
  /* the payload itself must be JSON for a consumer to read it */
  if (durable__json_check(text, &je) < 0) {
    int rc = durable__error(err, DURABLE_EINVAL,
                            "Durable stream item %s could not be read as "
                            "JSON: %s",
                            node->path, je.text);
    json_decref(j);
    return rc;
  }
  *payload = strdup(text);
  if (appended_at)
    *appended_at = durable__parse_time(str_of(j, "AppendedAt"));
  json_decref(j);
  return *payload ? 0 : DURABLE_ENOMEM;
}

/* ---- per-mesh state ---------------------------------------------------------
 */

int durable__mesh_state_add(durable_mesh_t *mesh, const void *key, size_t size,
                            void (*release)(void *state)) {
  void *state = calloc(1, size);
  if (state == NULL || durable__hub_attach(durable__mesh_reads_hub(mesh), key,
                                           state, release) < 0) {
    free(state);
    return DURABLE_ENOMEM;
  }
  return 0;
}

void *durable__mesh_state(durable_mesh_t *mesh, const void *key) {
  return durable__hub_attached(durable__mesh_reads_hub(mesh), key);
}

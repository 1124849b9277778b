/*
 * dead_letter.c: the dead letters of a leased consumer (consumer.c) with
 * max_attempts.
 *
 * An item that failed max_attempts times in a row is acknowledged, and in
 * the same transaction its letter is recorded for {ns}.dead@{key}, the
 * dead-letter stream of the same owner: an outbox node, appended once
 * committed, as a handler's tx:publish_durable is.  The letter names the
 * stream, the sequence, the attempts, the reason, the payload text (null
 * when it could not be read) and when the item was appended.  The
 * acknowledgement is a request of its own (dead_t), fenced like any other:
 * with the lease lost meanwhile nothing is written.  What the consumer does
 * next -- resume after the item, back off, claim again -- is its own
 * (consumer.c), told through the callback it hands over.
 */
#include "consumer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The dead-letter stream of `c`'s stream: {ns}.dead, of the same owner;
 * a consumer group's, {ns}.dead.{group}. */
#define DEAD_SUFFIX ".dead"

static void dead_family(const durable__consumer_t *c, char *out, size_t size) {
  snprintf(out, size, "%s" DEAD_SUFFIX "%s%s", c->ns, c->group ? "." : "",
           c->group ? c->group : "");
}

typedef struct {
  durable__consumer_ask_t base; /* seq, gen, outbox */
  char *why;
  int attempts;
  durable__letter_cb done;
} dead_t;

static void on_dead_letter_acked(const durable_response_t *res, void *data) {
  dead_t *d = data;
  durable__consumer_t *c = d->base.c;
  durable__stream_name_t n;
  const durable__stream_ans_t *ans =
      res->status < 0 ? NULL : durable__stream_answer(res);
  int current = durable__consumer_consuming(c) && d->base.gen == c->gen &&
                !durable__consumer_leaving(c);
  if (ans && ans->ok) {
    /* committed: the letter's append, and the line, whatever came since (a
     * stop waits for neither; the append goes out before its release) */
    durable__consumer_append(c, d->base.outbox);
    d->base.outbox = NULL;
    durable__stream_count(c->mesh, c->ns, c->key, c->group,
                          DURABLE__COUNT_DEAD_LETTERED, 1);
    char group[DURABLE_GROUP_MAX + 16] = "";
    if (c->group)
      snprintf(group, sizeof group, " --group %s", c->group);
    durable_mesh_log(c->mesh, DURABLE_LOG_WARN,
                     "Durable stream consumer %s: item %lld of %s failed "
                     "%d times (%s); moved to the dead letters %s" DEAD_SUFFIX
                     "%s%s@%s and acknowledged; `durable dead %s %s%s` shows "
                     "it, `durable requeue %s %s %lld%s` appends it again",
                     durable__consumer_hub_name(c), (long long)d->base.seq,
                     durable__consumer_name(c, &n), d->attempts, d->why, c->ns,
                     c->group ? "." : "", c->group ? c->group : "", c->key,
                     c->ns, c->key, group, c->ns, c->key,
                     (long long)d->base.seq, group);
  }
  if (current) {
    if (res->status < 0) {
      char m[2048];
      snprintf(m, sizeof m, "moving it to the dead letters failed: %s",
               res->message ? res->message : durable_strerror(res->status));
      /* tried again after the backoff */
      d->done(c, d->base.seq, DURABLE__LETTER_FAILED, m);
    } else if (ans && ans->ok) {
      d->done(c, d->base.seq, DURABLE__LETTER_MOVED, NULL);
    } else {
      d->done(c, d->base.seq, DURABLE__LETTER_REFUSED, NULL);
    }
  }
  durable__outbox_free(d->base.outbox); /* not written: nothing to make */
  durable_hub_unref(c->hub);
  free(d->why);
  free(d);
}

void durable__dead_letter(durable__consumer_t *c, int64_t seq, const char *why,
                          const char *payload, int64_t appended_at,
                          durable__letter_cb done) {
  char dead_ns[DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 8], when[32] = "";
  dead_family(c, dead_ns, sizeof dead_ns);
  if (appended_at > 0)
    durable__iso_time(appended_at, when);
  durable_stream_id_t id = durable__consumer_id(c);
  json_t *reason = durable__json_message(why);
  json_t *letter =
      json_pack("{s:s, s:I, s:i, s:o, s:o, s:o}", "Stream",
                durable__stream_name(&id).text, "Sequence", (json_int_t)seq,
                "Attempts", c->failed_times, "Reason", reason, "PayloadJson",
                payload ? json_string(payload) : json_null(), "AppendedAt",
                *when ? json_string(when) : json_null());
  if (letter && c->group)
    json_object_set_new(letter, "Group", json_string(c->group));
  char *text =
      letter ? json_dumps(letter, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(letter);
  dead_t *d = calloc(1, sizeof(*d));
  durable__commit_t *commit =
      calloc(1, sizeof(*commit) + sizeof(durable_publish_t));
  durable_error_t err = {0};
  durable__write_set_t *effects = NULL;
  if (text && d && commit && (d->why = strdup(why ? why : "")) != NULL) {
    commit->npublishes = 1;
    commit->publishes[0] = (durable_publish_t){
        .stream = {.ns = dead_ns, .key = c->key}, .payload = text};
    effects =
        durable__outbox_writes(c->hub, c->key, commit, &d->base.outbox, &err);
  } else {
    durable__error(&err, DURABLE_ENOMEM,
                   text ? "out of memory"
                        : "the letter could not be made (a payload or a "
                          "reason that is not UTF-8?)");
  }
  durable__commit_free(commit);
  free(text);
  if (effects == NULL) {
    char m[2048];
    snprintf(m, sizeof m, "%s; moving it to the dead letters failed: %s",
             why ? why : "", err.message);
    if (d)
      free(d->why);
    free(d);
    done(c, seq, DURABLE__LETTER_FAILED, m);
    return;
  }
  c->gen++; /* retire what the last round has out */
  d->base.gen = c->gen;
  d->base.seq = seq;
  d->attempts = c->failed_times;
  d->done = done;
  if (durable__consumer_ask(c, DURABLE__MSG_ACK, c->epoch, seq, effects,
                            on_dead_letter_acked, &d->base, &err) < 0) {
    char m[2048];
    snprintf(m, sizeof m, "%s; moving it to the dead letters failed: %s",
             d->why, err.message);
    durable__outbox_free(d->base.outbox);
    free(d->why);
    free(d);
    done(c, seq, DURABLE__LETTER_FAILED, m);
  }
}

int durable__dead_letters_check(const durable__consumer_t *c,
                                durable_error_t *err) {
  if (c->cfg.max_attempts <= 0)
    return 0;
  char dead_ns[DURABLE_PATH_MAX + DURABLE_GROUP_MAX + 8];
  dead_family(c, dead_ns, sizeof dead_ns);
  durable_stream_id_t dead = {.ns = dead_ns, .key = c->key};
  durable_error_t why = {0};
  if (durable_stream_check(&dead, &why) == 0)
    return 0;
  return durable__error(err, DURABLE_EINVAL,
                        "the consumer of '%s' at hub '%s' cannot keep dead "
                        "letters (max_attempts): %s",
                        c->ns, durable_hub_address(c->hub), why.message);
}

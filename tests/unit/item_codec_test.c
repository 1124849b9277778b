/*
 * item_codec_test.c: an item node's content and a stream node's state,
 * written and read without a JSON tree (src/streams/stream.c).
 *
 * The runtime writes {"Sequence":N,"PayloadJson":"...","AppendedAt":...}
 * itself and reads it back with one scan and a syntax check, because a
 * catch-up does that for every item.  What must hold, and what this pins:
 * the bytes written are the ones jansson's compact dump gives (so `durable
 * get` shows what it always showed); whatever is written reads back as the
 * same payload text and time; content in another layout (made by hand)
 * still reads through jansson; and a payload is refused exactly when
 * jansson refuses it, in either layout.
 */
#include <durable.h>

#include "check.h"
#include "store.h"
#include "stream.h"

#include <jansson.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Payloads that are JSON, chosen for what the escaping and the scan must
 * get right. */
static const char *const valid[] = {
    "{\"$type\":\"DocumentLogAppend\",\"text\":\"Hello. \",\"offset\":-1}",
    "{\"i\":1}",
    "\"a \\\"quoted\\\" \\\\ string\"",
    "[1,2.5,-3e7,0,-0.0,1E+2,true,false,null]",
    "{\"nested\":{\"a\":[{\"b\":[]},{}]}}",
    "  {\"spaced\" : [ 1 , 2 ]\t}\n",
    "\"\\u00e9 \\ud83d\\ude00 \\/ \\b\\f\\n\\r\\t\"",
    "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
    "{\"ctl\":\"\\u0001\\u001f\"}",
    "9223372036854775807",
    "-9223372036854775808",
    "12345678901234567890123.5",
    "1e308",
    "\"\"",
    "null",
};

/* Texts jansson refuses: each must be refused by the fast path too. */
static const char *const invalid[] = {
    "{oops",
    "{\"a\":1,}",
    "[1 2]",
    "01",
    "1.",
    "-",
    "1e",
    "1e400",
    "9223372036854775808",
    "-9223372036854775809",
    "{\"i\":12345678901234567890123}",
    "tru",
    "\"unterminated",
    "\"bad escape \\x\"",
    "\"nul \\u0000 inside\"",
    "\"lone \\udc00 low\"",
    "\"lone \\ud800 high\"",
    "\"overlong \xc0\xaf\"",
    "\"surrogate \xed\xa0\x80\"",
    "\"truncated \xe2\x82\"",
    "{\"a\" 1}",
    "{1:2}",
    "[] []",
    "",
};

/* What jansson writes for the same item: the old encoder. */
static char *jansson_item(int64_t seq, const char *payload, int64_t at) {
  json_t *j = json_object();
  json_object_set_new(j, "Sequence", json_integer(seq));
  json_object_set_new(j, "PayloadJson", json_string(payload));
  if (at) {
    char when[32];
    durable__iso_time(at, when);
    json_object_set_new(j, "AppendedAt", json_string(when));
  } else {
    json_object_set_new(j, "AppendedAt", json_null());
  }
  char *text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(j);
  return text;
}

static int jansson_accepts(const char *text) {
  json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
  json_decref(j);
  return j != NULL;
}

static int decode(const char *content, char **payload, int64_t *at) {
  durable_node_t node = {.path = "S/_DurableStream/L/_DurableStreamItem/x",
                         .content = (char *)content};
  durable_error_t err = {0};
  return durable__item_decode(&node, payload, at, &err);
}

static void test_encode_is_jansson_dump(void) {
  int64_t at = 1764547200123; /* 2025-12-01T00:00:00.123Z */
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    char *ours = durable__item_encode((int64_t)i + 1, valid[i], at);
    char *theirs = jansson_item((int64_t)i + 1, valid[i], at);
    CHECK_EQ_STR(ours, theirs);
    free(ours);
    free(theirs);
  }
  /* every control character, and the ones escaped by name */
  char all[40];
  for (int c = 1; c < 32; c++)
    all[c - 1] = (char)c;
  memcpy(all + 31, "\"\\/\x7f", 5);
  char *ours = durable__item_encode(7, all, 0);
  char *theirs = jansson_item(7, all, 0);
  CHECK_EQ_STR(ours, theirs);
  free(ours);
  free(theirs);
}

static void test_round_trip(void) {
  int64_t times[] = {0, 1, 951782400000 /* a leap day */, 1764547200123,
                     4102444799999};
  for (size_t t = 0; t < sizeof times / sizeof times[0]; t++)
    for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
      char *content = durable__item_encode(42, valid[i], times[t]);
      char *payload = NULL;
      int64_t at = -1;
      CHECK_OK(decode(content, &payload, &at));
      CHECK_EQ_STR(payload, valid[i]);
      CHECK_EQ_INT(at, times[t]);
      free(payload);
      free(content);
    }
}

/* The same rule in both layouts: the runtime's own, and another key order
 * (as a hand-made item, or a store that reorders JSON, may give). */
static void test_refuses_what_jansson_refuses(void) {
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    CHECK_MSG(!jansson_accepts(invalid[i]), "jansson takes '%s'", invalid[i]);
    char *content = durable__item_encode(3, invalid[i], 0);
    char *payload = NULL;
    int64_t at = 0;
    int rc = decode(content, &payload, &at);
    CHECK_MSG(rc == DURABLE_EINVAL && payload == NULL, "'%s' was taken",
              invalid[i]);
    free(content);
  }
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++)
    CHECK_MSG(jansson_accepts(valid[i]), "jansson refuses '%s'", valid[i]);
}

/* Nesting: jansson counts every value; 2048 levels are JSON, 2049 not. */
static void test_depth_as_jansson(void) {
  enum { DEEP = 2048 };
  char *text = malloc(2 * DEEP + 8);
  CHECK(text != NULL);
  for (int levels = DEEP - 1; levels <= DEEP; levels++) {
    /* `levels` arrays around a number: levels + 1 values deep */
    size_t n = 0;
    for (int i = 0; i < levels; i++)
      text[n++] = '[';
    text[n++] = '1';
    for (int i = 0; i < levels; i++)
      text[n++] = ']';
    text[n] = '\0';
    CHECK_EQ_INT(durable__json_valid(text), jansson_accepts(text));
    CHECK_EQ_INT(durable__json_valid(text), levels < DEEP);
  }
  free(text);
}

static void test_other_layouts(void) {
  char *payload = NULL;
  int64_t at = 0;
  /* keys in another order, a \u escape the scan leaves to jansson */
  CHECK_OK(decode("{\"AppendedAt\":\"2026-12-01T10:00:00.250Z\","
                  "\"PayloadJson\":\"{\\\"t\\\":\\\"\\u00e9\\\"}\","
                  "\"Sequence\":5}",
                  &payload, &at));
  CHECK_EQ_STR(payload, "{\"t\":\"\xc3\xa9\"}");
  CHECK_EQ_INT(at, 1796119200250);
  free(payload);
  payload = NULL;
  /* the runtime's layout with a time written otherwise */
  CHECK_OK(decode("{\"Sequence\":1,\"PayloadJson\":\"1\",\"AppendedAt\":"
                  "\"2026-12-01T10:00:00Z\"}",
                  &payload, &at));
  CHECK_EQ_STR(payload, "1");
  CHECK_EQ_INT(at, 1796119200000);
  free(payload);
  payload = NULL;
  /* the runtime's layout, but not JSON: a raw line feed in the string, a
   * sequence with a leading zero -- jansson's answer, not the scan's */
  CHECK_EQ_CODE(
      decode("{\"Sequence\":1,\"PayloadJson\":\"\n1\",\"AppendedAt\":null}",
             &payload, &at),
      DURABLE_EINVAL);
  CHECK_EQ_CODE(
      decode("{\"Sequence\":01,\"PayloadJson\":\"1\",\"AppendedAt\":null}",
             &payload, &at),
      DURABLE_EINVAL);
  /* no payload at all, and no JSON at all */
  CHECK_EQ_CODE(decode("{\"Sequence\":1}", &payload, &at), DURABLE_EINVAL);
  CHECK_EQ_CODE(decode("not json", &payload, &at), DURABLE_EINVAL);
  CHECK(payload == NULL);
}

/* What jansson writes for a stream node's state: the old encoder. */
static json_t *time_json(int64_t ms) {
  char when[32];
  if (ms == 0)
    return json_null();
  durable__iso_time(ms, when);
  return json_string(when);
}

static json_t *str_json(const char *s) {
  return s ? json_string(s) : json_null();
}

static char *jansson_state(const durable__stream_state_t *s) {
  json_t *j = json_object();
  json_object_set_new(j, "Namespace", json_string(s->ns));
  json_object_set_new(j, "Key", json_string(s->key));
  json_object_set_new(j, "LastSequence", json_integer(s->last_sequence));
  json_object_set_new(j, "Subscriber", str_json(s->subscriber));
  json_object_set_new(j, "SubscriberInstance",
                      str_json(s->subscriber_instance));
  json_object_set_new(j, "LeaseEpoch", json_integer(s->lease_epoch));
  json_object_set_new(j, "SubscribedAt", time_json(s->subscribed_at));
  json_object_set_new(j, "Checkpoint", json_integer(s->checkpoint));
  json_object_set_new(j, "CheckpointAt", time_json(s->checkpoint_at));
  json_object_set_new(j, "OrphanedAt", time_json(s->orphaned_at));
  json_object_set_new(j, "LastSubscriber", str_json(s->last_subscriber));
  if (s->trimmed_through > 0)
    json_object_set_new(j, "TrimmedThrough", json_integer(s->trimmed_through));
  char *text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
  json_decref(j);
  return text;
}

/* The stream node's state, written on every append and acknowledgement,
 * is also written by hand: the same bytes, and it decodes back. */
static void test_state_is_jansson_dump(void) {
  durable__stream_state_t states[] = {
      {.ns = "DocumentLog", .key = "Space/doc"},
      {.ns = "Log",
       .key = "Space/a \"quoted\" caf\xc3\xa9 \\ key",
       .last_sequence = 9223372036854775807LL,
       .subscriber = "client/x",
       .subscriber_instance = "host:42:00000000deadbeef",
       .lease_epoch = 7,
       .subscribed_at = 1796119200250,
       .checkpoint = -1,
       .checkpoint_at = 1,
       .orphaned_at = 951782400000,
       .last_subscriber = "Space/\t\x01old",
       .trimmed_through = 12},
  };
  for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
    char *ours = durable__state_encode(&states[i]);
    char *theirs = jansson_state(&states[i]);
    CHECK_EQ_STR(ours, theirs);
    durable__stream_state_t back = {0};
    CHECK_OK(durable__state_decode(ours, "Space/doc/_DurableStream/DocumentLog",
                                   &back));
    CHECK_EQ_STR(back.key, states[i].key);
    CHECK_EQ_INT(back.last_sequence, states[i].last_sequence);
    CHECK_EQ_INT(back.orphaned_at, states[i].orphaned_at);
    CHECK(states[i].subscriber == NULL
              ? back.subscriber == NULL
              : strcmp(back.subscriber, states[i].subscriber) == 0);
    CHECK_EQ_INT(back.trimmed_through, states[i].trimmed_through);
    durable__state_free(&back);
    free(ours);
    free(theirs);
  }
}

/* Numbers read the same whatever the C locale's decimal point: an embedder
 * or a Lua script may set LC_NUMERIC to a locale with a comma, where a
 * plain strtod stops at the '.'.  The check refuses and the reader reads
 * what jansson does (jansson puts the locale's point in place of '.').
 * The locale is made for the test with localedef (Debian's `locales`);
 * without it the case is skipped. */
static void test_numbers_in_a_comma_locale(void) {
  char dir[] = "/tmp/durable-locale.XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
  int made = system(cmd) == 0;
  setenv("LOCPATH", dir, 1);
  int set = made && setlocale(LC_NUMERIC, "de_DE.UTF-8") != NULL;
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  (void)system(cmd); /* the loaded locale stays mapped */
  if (!set)
    exit(77); /* no localedef or no de_DE source here */
  CHECK_EQ_STR(localeconv()->decimal_point, ",");

  char zeros[600];
  snprintf(zeros, sizeof zeros, "0.%0250d1", 0);
  char longest[700]; /* past any short copy */
  snprintf(longest, sizeof longest, "1%0550d.25e-540", 0);
  char halfway[700]; /* 2^53 + 1 and a little: rounds up, not to even */
  snprintf(halfway, sizeof halfway, "9007199254740993.%0500d1", 0);
  const char *numbers[] = {"1.5",   "-0.25e3", "1.5e300", "2.5E-300", zeros,
                           longest, halfway,   "1e-400",  "-0.0e5"};
  for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
    json_t *j = json_loads(numbers[i], JSON_DECODE_ANY, NULL);
    CHECK_MSG(j != NULL && durable__json_valid(numbers[i]), "'%.40s'",
              numbers[i]);
    double ours = durable__json_strtod(numbers[i]);
    double theirs = json_real_value(j);
    CHECK_MSG(memcmp(&ours, &theirs, sizeof ours) == 0,
              "'%.40s': %.17g, jansson %.17g", numbers[i], ours, theirs);
    json_decref(j);
  }
  /* beyond a double: refused by both, not read as 1 (strtod's "1") */
  for (const char *const *t =
           (const char *const[]){"1.5e400", "-9.9e999", NULL};
       *t; t++) {
    CHECK_MSG(!jansson_accepts(*t), "jansson takes '%s'", *t);
    CHECK_MSG(!durable__json_valid(*t), "'%s' was taken", *t);
  }
  setlocale(LC_NUMERIC, "C");
}

static const check_test_t tests[] = {
    {"state_is_jansson_dump", test_state_is_jansson_dump},
    {"encode_is_jansson_dump", test_encode_is_jansson_dump},
    {"round_trip", test_round_trip},
    {"refuses_what_jansson_refuses", test_refuses_what_jansson_refuses},
    {"other_layouts", test_other_layouts},
    {"depth_as_jansson", test_depth_as_jansson},
    {"numbers_in_a_comma_locale", test_numbers_in_a_comma_locale},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

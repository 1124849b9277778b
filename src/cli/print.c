/*
 * print.c: a node as one JSON object.
 *
 * The fields around the content are written here; the content is spliced in
 * as the store keeps it, never decoded and encoded again, so its key order
 * ("$type" first) and its number spellings reach the reader untouched.  The
 * strings are escaped by hand rather than through jansson, because jansson
 * refuses invalid UTF-8 and a printer must print whatever is stored.
 */
#include "cli.h"

#include <durable_text.h>

#include <inttypes.h>
#include <string.h>

static void put_string(FILE *out, const char *s) {
  static const char hex[] = "0123456789abcdef";
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    switch (*p) {
    case '"':
      fputs("\\\"", out);
      break;
    case '\\':
      fputs("\\\\", out);
      break;
    case '\n':
      fputs("\\n", out);
      break;
    case '\r':
      fputs("\\r", out);
      break;
    case '\t':
      fputs("\\t", out);
      break;
    case '\b':
      fputs("\\b", out);
      break;
    case '\f':
      fputs("\\f", out);
      break;
    default:
      if (*p < 0x20) {
        fputs("\\u00", out);
        fputc(hex[*p >> 4], out);
        fputc(hex[*p & 15], out);
      } else {
        fputc(*p, out);
      }
    }
  }
  fputc('"', out);
}

static void put_time(FILE *out, int64_t ms) {
  char when[DURABLE_ISO_TIME_MAX];
  if (durable__iso_time(ms, when) < 0)
    fputs("null", out);
  else
    fprintf(out, "\"%s\"", when);
}

void cli_print_node(FILE *out, const durable_node_t *node, int one_line) {
  fputs("{\"path\":", out);
  put_string(out, node->path);
  fputs(",\"namespace\":", out);
  put_string(out, node->ns);
  fputs(",\"id\":", out);
  put_string(out, node->id);
  fputs(",\"node_type\":", out);
  put_string(out, node->node_type);
  fputs(",\"main_node\":", out);
  put_string(out, node->main_node);
  fprintf(out, ",\"version\":%" PRId64 ",\"created_at\":", node->version);
  put_time(out, node->created_at);
  fputs(",\"updated_at\":", out);
  put_time(out, node->updated_at);
  fputs(",\"content\":", out);
  const char *content = node->content;
  if (content == NULL || content[strspn(content, " \t\r\n")] == '\0') {
    fputs("null", out);
  } else if (!one_line) {
    fputs(content, out);
  } else {
    /* Valid JSON holds no raw line break inside a string, so each one is
     * whitespace between tokens and a space means the same. */
    durable__one_line_fputs(content, out);
  }
  fputs("}\n", out);
}

void cli_print_string(FILE *out, const char *s) {
  put_string(out, s);
}

void cli_print_time(FILE *out, int64_t ms) {
  if (ms == 0)
    fputs("null", out);
  else
    put_time(out, ms);
}

/*
 * error.c: the error table's texts and the one helper that fills a
 * durable_error_t.  Codes, names and texts all come from DURABLE_ERRNO_MAP in
 * durable.h, so adding an error is one line there.
 *
 * A message must keep its reason.  Messages quote what they refuse -- a
 * 2,000-byte namespace, a key, a path -- and a plain vsnprintf into the 512
 * bytes of durable_error_t.message cut such a message inside the quoted value,
 * before "is too long" was ever written.  So a message that would not fit is
 * formatted again with every long string argument shortened (its head, "...",
 * and its length), which keeps the text around the values -- the reason --
 * whole.  durable__format does that for any buffer; the command uses it too.
 * Wherever it cuts -- a value's head, a piece that does not fit, the text
 * around -- it cuts between two characters, so a message of UTF-8 stays
 * UTF-8.
 */
#include "error.h"

#include "durable_text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *durable_strerror(int code) {
  switch (code) {
#define XX(name, value, text)                                                  \
  case value:                                                                  \
    return text;
    DURABLE_ERRNO_MAP(XX)
#undef XX
  case 0:
    return "success";
  }
  return "unknown error";
}

const char *durable_err_name(int code) {
  switch (code) {
#define XX(name, value, text)                                                  \
  case value:                                                                  \
    return #name;
    DURABLE_ERRNO_MAP(XX)
#undef XX
  case 0:
    return "OK";
  }
  return "EUNKNOWN";
}

/* `s` shortened to about `keep` bytes, cut at a UTF-8 boundary, with its
 * length: "aaaa...(2000 bytes)".  Returns `buf`. */
static const char *shortened(const char *s, size_t keep, char *buf,
                             size_t size) {
  size_t len = strlen(s), n = keep < size - 32 ? keep : size - 32;
  if (len <= n)
    return s;
  n = durable__utf8_cut(s, n);
  snprintf(buf, size, "%.*s...(%zu bytes)", (int)n, s, len);
  return buf;
}

/* One pass over `fmt`, each conversion formatted on its own with the same
 * specification, %s arguments longer than `keep` shortened.  The formats are
 * the library's own (checked by the compiler's format attribute), so only
 * the conversions C99 printf knows occur. */
static void format_short(char *out, size_t size, size_t keep, const char *fmt,
                         va_list ap) {
  size_t o = 0;
  for (const char *f = fmt; *f && o + 1 < size;) {
    if (*f != '%') { /* a character of the text around: whole, or stop */
      size_t n = durable__utf8_len(f);
      if (n == 0)
        n = 1; /* not UTF-8: a byte is all there is to keep whole */
      if (o + n >= size)
        break;
      memcpy(out + o, f, n);
      o += n;
      f += n;
      continue;
    }
    const char *start = f++;
    if (*f == '%') {
      out[o++] = '%';
      f++;
      continue;
    }
    int star_width = 0, star_prec = 0;
    f += strspn(f, "-+ #0");
    if (*f == '*') {
      star_width = 1;
      f++;
    }
    f += strspn(f, "0123456789");
    if (*f == '.') {
      f++;
      if (*f == '*') {
        star_prec = 1;
        f++;
      }
      f += strspn(f, "0123456789");
    }
    char len[3] = "";
    size_t ln = strspn(f, "hljztL");
    if (ln > 2)
      ln = 2;
    memcpy(len, f, ln);
    f += ln;
    char conv = *f ? *f++ : '\0';
    char spec[32];
    size_t sl = (size_t)(f - start);
    if (sl >= sizeof spec || conv == '\0')
      break; /* not a format this file writes */
    memcpy(spec, start, sl);
    spec[sl] = '\0';
    int width = star_width ? va_arg(ap, int) : 0;
    int prec = star_prec ? va_arg(ap, int) : 0;
    char piece[600];
    piece[0] = '\0';
#define PIECE(value)                                                           \
  do {                                                                         \
    if (star_width && star_prec)                                               \
      snprintf(piece, sizeof piece, spec, width, prec, value);                 \
    else if (star_width)                                                       \
      snprintf(piece, sizeof piece, spec, width, value);                       \
    else if (star_prec)                                                        \
      snprintf(piece, sizeof piece, spec, prec, value);                        \
    else                                                                       \
      snprintf(piece, sizeof piece, spec, value);                              \
  } while (0)
    switch (conv) {
    case 's': {
      const char *v = va_arg(ap, const char *);
      char buf[300];
      if (v != NULL && (!star_prec || prec < 0)) { /* negative: all of it */
        v = shortened(v, keep, buf, sizeof buf);
        if (star_prec)
          prec = (int)strlen(v);
      } else if (v != NULL) { /* %.*s: its first prec bytes */
        size_t len = strnlen(v, (size_t)prec);
        size_t n = keep < sizeof buf - 32 ? keep : sizeof buf - 32;
        if (len > n) {
          n = durable__utf8_cut(v, n);
          snprintf(buf, sizeof buf, "%.*s...(%zu bytes)", (int)n, v, len);
          v = buf;
          prec = (int)strlen(buf);
        }
      }
      PIECE(v);
      break;
    }
    case 'c':
      PIECE(va_arg(ap, int));
      break;
    case 'p':
      PIECE(va_arg(ap, void *));
      break;
    case 'f':
    case 'e':
    case 'g':
    case 'F':
    case 'E':
    case 'G':
      PIECE(va_arg(ap, double));
      break;
    default: /* d i u x X o, with their length */
      if (strcmp(len, "ll") == 0 || strcmp(len, "j") == 0)
        PIECE(va_arg(ap, long long));
      else if (strcmp(len, "l") == 0 || strcmp(len, "z") == 0 ||
               strcmp(len, "t") == 0)
        PIECE(va_arg(ap, long));
      else
        PIECE(va_arg(ap, int));
      break;
    }
#undef PIECE
    size_t n = strlen(piece);
    int cut = n > size - 1 - o;
    if (cut)
      n = durable__utf8_cut(piece, size - 1 - o);
    memcpy(out + o, piece, n);
    o += n;
    if (cut)
      break; /* nothing after a piece that did not fit */
  }
  out[o] = '\0';
}

void durable__vformat(char *out, size_t size, const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(out, size, fmt, ap);
  if (n >= 0 && (size_t)n >= size) /* cut: keep the reason, shorten values */
    format_short(out, size, size / 8, fmt, again);
  va_end(again);
}

void durable__format(char *out, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  durable__vformat(out, size, fmt, ap);
  va_end(ap);
}

int durable__error(durable_error_t *err, int code, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    durable__vformat(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    err->code = code;
  }
  return code;
}

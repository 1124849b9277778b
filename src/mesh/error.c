/*
 * error.c: the error table's texts and the one helper that fills a
 * durable_error_t.  Codes, names and texts all come from DURABLE_ERRNO_MAP in
 * durable.h, so adding an error is one line there.
 */
#include "store.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

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

int durable__error(durable_error_t *err, int code, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    err->code = code;
  }
  return code;
}

int64_t durable__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * clock.c: see clock.h.
 */
#include "clock.h"
#include "durable_text.h"

#include <stdio.h>
#include <time.h>

int64_t durable__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int durable__iso_time(int64_t ms, char out[DURABLE_ISO_TIME_MAX]) {
  int64_t secs = ms / 1000, frac = ms % 1000;
  if (frac < 0) { /* before 1970: the second before, and what is left */
    frac += 1000;
    secs -= 1;
  }
  time_t t = (time_t)secs;
  struct tm tm;
  size_t n = gmtime_r(&t, &tm) == NULL ? 0
                                       : strftime(out, DURABLE_ISO_TIME_MAX - 5,
                                                  "%Y-%m-%dT%H:%M:%S", &tm);
  if (n == 0) { /* a year the C library cannot say in the room there is */
    out[0] = '\0';
    return -1;
  }
  snprintf(out + n, DURABLE_ISO_TIME_MAX - n, ".%03dZ", (int)frac);
  return 0;
}

/*
 * error.h: the one error convention of the C code.  Every internal function
 * that can fail returns 0 or a negative DURABLE_E* code and, where it has a
 * durable_error_t, fills it with durable__error: the code and a sentence
 * that names what was wrong.  The message is formatted by durable__vformat
 * (durable_internal.h), which shortens long quoted values rather than cut the
 * reason off.
 */
#ifndef DURABLE_COMMON_ERROR_H
#define DURABLE_COMMON_ERROR_H

#include "durable_internal.h"

/* Fill `err` (may be NULL) and return `code`. */
int durable__error(durable_error_t *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif

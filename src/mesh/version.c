/*
 * version.c: the version of the library linked at run time.
 *
 * The macros in durable.h say which header a program was compiled against;
 * these calls say which library it runs with, so that a program (or the
 * Lua module) can refuse or report a mismatch, as uv_version() does.
 */
#include "durable.h"

unsigned int durable_version(void) {
  return DURABLE_VERSION_HEX;
}

const char *durable_version_string(void) {
  return DURABLE_VERSION_STRING;
}

/*
 * names_test.c: the version calls and the name of every public enum.
 *
 * A program compares the header it was built with against the library it
 * runs with, and logs enums by name; both are promises of durable.h.  The
 * test holds the runtime's version to the header's macros, and each name
 * function to the names doc/ and DURABLE_LOG use, with "unknown" (never
 * NULL) for a value outside its enum.
 */
#include <durable.h>

#include "check.h"

#include <stdio.h>
#include <string.h>

static void test_version(void) {
  CHECK_EQ_INT(durable_version(), DURABLE_VERSION_HEX);
  CHECK_EQ_STR(durable_version_string(), DURABLE_VERSION_STRING);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", DURABLE_VERSION_MAJOR,
           DURABLE_VERSION_MINOR, DURABLE_VERSION_PATCH);
  CHECK_EQ_STR(DURABLE_VERSION_STRING, want);
  CHECK_EQ_INT(DURABLE_VERSION_HEX, DURABLE_VERSION_MAJOR * 65536 +
                                        DURABLE_VERSION_MINOR * 256 +
                                        DURABLE_VERSION_PATCH);
}

static void test_enum_names(void) {
  CHECK_EQ_STR(durable_log_level_name(DURABLE_LOG_ERROR), "error");
  CHECK_EQ_STR(durable_log_level_name(DURABLE_LOG_WARN), "warn");
  CHECK_EQ_STR(durable_log_level_name(DURABLE_LOG_INFO), "info");
  CHECK_EQ_STR(durable_log_level_name(DURABLE_LOG_DEBUG), "debug");
  CHECK_EQ_STR(durable_log_level_name((durable_log_level_t)0), "unknown");

  CHECK_EQ_STR(durable_run_level_name(DURABLE_HUB_STARTING), "Starting");
  CHECK_EQ_STR(durable_run_level_name(DURABLE_HUB_STARTED), "Started");
  CHECK_EQ_STR(durable_run_level_name(DURABLE_HUB_QUIESCING), "Quiescing");
  CHECK_EQ_STR(durable_run_level_name(DURABLE_HUB_SHUTDOWN), "ShutDown");
  CHECK_EQ_STR(durable_run_level_name(DURABLE_HUB_DEAD), "Dead");
  CHECK_EQ_STR(durable_run_level_name((durable_run_level_t)99), "unknown");

  CHECK_EQ_STR(durable_change_kind_name(DURABLE_CHANGE_ADDED), "added");
  CHECK_EQ_STR(durable_change_kind_name(DURABLE_CHANGE_UPDATED), "updated");
  CHECK_EQ_STR(durable_change_kind_name(DURABLE_CHANGE_REMOVED), "removed");
  CHECK_EQ_STR(durable_change_kind_name(DURABLE_CHANGE_SYNCED), "synced");
  CHECK_EQ_STR(durable_change_kind_name((durable_change_kind_t)0), "unknown");

  CHECK_EQ_STR(durable_write_kind_name(DURABLE_WRITE_PUT), "put");
  CHECK_EQ_STR(durable_write_kind_name(DURABLE_WRITE_CREATE), "create");
  CHECK_EQ_STR(durable_write_kind_name(DURABLE_WRITE_REPLACE), "replace");
  CHECK_EQ_STR(durable_write_kind_name(DURABLE_WRITE_DELETE), "delete");
  CHECK_EQ_STR(durable_write_kind_name(DURABLE_WRITE_MUTATE), "mutate");
  CHECK_EQ_STR(durable_write_kind_name((durable_write_kind_t)0), "unknown");

  CHECK_EQ_STR(durable_read_outcome_name(DURABLE_READ_PRESENT), "present");
  CHECK_EQ_STR(durable_read_outcome_name(DURABLE_READ_ABSENT), "absent");
  CHECK_EQ_STR(durable_read_outcome_name(DURABLE_READ_UNAVAILABLE),
               "unavailable");
  CHECK_EQ_STR(durable_read_outcome_name((durable_read_outcome_t)0), "unknown");

  CHECK_EQ_STR(durable_err_name(DURABLE_ECONFLICT), "ECONFLICT");
  CHECK_EQ_STR(durable_strerror(DURABLE_ECONFLICT), "version conflict");
}

static const check_test_t tests[] = {
    {"version", test_version},
    {"enum_names", test_enum_names},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

/*
 * contract.h: what the files of the store contract share.
 *
 * The contract is the one suite every store passes, unchanged: one
 * executable, store_contract (runner.c: its command line, one process per
 * case), whose cases live in one file per concept, each exporting its table
 * of cases (contract_NAME below; tests/CMakeLists.txt registers every case
 * on every store with ctest).  fixture.c holds what cases of several files
 * use: the case's loop and store, synchronous forms of each store call that
 * keep the result, the checks of a refused call and of a node's fields, the
 * C mutator, and stream item paths.  A helper that one file alone uses stays
 * in that file.
 *
 * Each case opens the store on its own uv loop (case_begin), runs the loop
 * until its callbacks ran, closes the store and asserts that uv_loop_close()
 * returns 0 (case_end).  Stores keep data between runs (PostgreSQL, a file),
 * so every path lives under a partition unique to this run (g_run,
 * "ct<time>_<pid>"), with one namespace per case under it (T.ns; P() makes
 * paths there).  The only fixed path is the SQL-bearing one of paths.c,
 * written with put (an upsert) so that a second run is fine too.
 *
 * What the API cannot show (the table a row is in) is checked through
 * round-trips, and for the SQLite file variant also by opening the file with
 * sqlite3 after the store is closed (g_sqlite_file).
 */
#ifndef DURABLE_TEST_CONTRACT_H
#define DURABLE_TEST_CONTRACT_H

#include <durable_internal.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A failed check inside a helper names the case line that called the helper
 * (" (from nodes.c:42)"), printed by check.h through CHECK_CONTEXT.  The
 * helper macros below record it, and so does a case that calls a helper
 * itself, with `g_line = __LINE__` as when the contract was one file: g_line
 * is a macro that records the file as well, so that the case bodies moved
 * unchanged.  (Never read g_line: read g_case_file and g_case_line.) */
extern const char *g_case_file;
extern int g_case_line;
#define g_line g_case_file = __FILE__, g_case_line
const char *contract_check_context(void);
#define CHECK_CONTEXT() contract_check_context()
#include "check.h"

#define WAIT_MS 20000 /* one callback */

/* ---- the run: set by the runner before any case runs -------------------- */

extern const char *g_url;
extern char g_run[64];          /* the run's partition */
extern char g_sqlite_file[512]; /* the file of a "sqlite:FILE" URL, or "" */
extern int g_memory;            /* g_url is "sqlite::memory:" */
extern int64_t g_case_start_ms; /* when the case's process started */

/* ---- the cases ----------------------------------------------------------- */

typedef struct {
  const char *name;
  void (*fn)(void);
} contract_case_t;

/* A concept file's cases.  Each file keeps them in one table,
 *   static const contract_case_t cases[] = {{"name", case_name}, ...};
 * (tests/CMakeLists.txt reads the names from it at configure time: keep that
 * shape) and exports it as contract_FILE = {cases, count}, which runner.c
 * lists. */
typedef struct {
  const contract_case_t *cases;
  size_t count;
} contract_table_t;

extern const contract_table_t contract_lifecycle, contract_nodes,
    contract_writes, contract_content, contract_paths, contract_queries,
    contract_items, contract_feed, contract_access;

/* A case that does not apply to this store ends its process with 77, which
 * the runner reports as skipped. */
#define SKIP(...)                                                              \
  do {                                                                         \
    printf("# SKIP ");                                                         \
    printf(__VA_ARGS__);                                                       \
    printf("\n");                                                              \
    fflush(stdout);                                                            \
    exit(77);                                                                  \
  } while (0)

/* ---- the case's loop and store ----------------------------------------- */

typedef struct {
  uv_loop_t loop;
  durable_store_t *store;
  char ns[256]; /* g_run "/" case name */
} contract_state_t;

extern contract_state_t T;
extern int g_stray_calls; /* callbacks of refused submissions: must stay 0 */

int64_t now_ms(void);
void sleep_ms(int ms);
/* "T.ns/suffix" in a static ring of buffers (enough for one statement). */
const char *P(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A store on g_url, on `loop`; a refusal fails the case. */
durable_store_t *open_store(uv_loop_t *loop);
void closed_cb(void *data); /* ++*(int *)data */
/* Close `store`, running T.loop until it closed. */
void close_store(durable_store_t *store);
/* T.loop, T.ns for case `name`, and T.store on them. */
void case_begin(const char *name);
/* Close T.store; nothing stray ran and nothing is left on T.loop. */
void case_end(void);

/* ---- results ------------------------------------------------------------ */

/* A result kept past its callback: nodes are deep copies. */
typedef struct {
  int calls;
  int status;
  char message[512];
  durable_node_t *node;
  durable_node_t **nodes;
  size_t count;
  int more;
  int64_t value;
  char grants[4096]; /* a grants listing: "principal prefix modes;" each */
} res_t;

void res_reset(res_t *r);
void res_cb(const durable_result_t *result, void *data);
void res_wait(res_t *r);
void submitted(int rc, const durable_error_t *e, const char *what,
               const char *arg);

/* Synchronous forms of each operation: submit, run the loop until the
 * callback ran, return its status; `r` keeps the result.  The macros record
 * the calling line for failure messages. */
int get_(res_t *r, const char *principal, const char *path);
int write_(res_t *r, const char *principal, const durable_write_t *w, size_t n);
int put_(res_t *r, const char *path, const char *type, const char *content);
int create_(res_t *r, const char *path, const char *type, const char *content);
int delete_(res_t *r, const char *path);
int update_(res_t *r, const char *path, durable_mutate_cb fn, void *arg);
int query_(res_t *r, const char *principal, const char *query,
           const char *after, size_t limit);
int exists_(res_t *r, const char *principal, const char *path);
int read_items_(res_t *r, const char *principal, const char *ns, int64_t after,
                size_t limit);
int last_item_(res_t *r, const char *principal, const char *ns);
int grant_(res_t *r, int revoke, const char *principal, const char *prefix,
           int modes);
int grants_(res_t *r, const char *principal);
int access_(res_t *r, const char *principal, const char *path, int modes);
int alive_(res_t *r, durable_store_t *store, const char *instance);

#define GET(r, principal, path) (g_line = __LINE__, get_(r, principal, path))
#define WRITE(r, w, n) (g_line = __LINE__, write_(r, NULL, w, n))
#define WRITE_AS(r, principal, w, n)                                           \
  (g_line = __LINE__, write_(r, principal, w, n))
#define PUT(r, path, type, content)                                            \
  (g_line = __LINE__, put_(r, path, type, content))
#define CREATE(r, path, type, content)                                         \
  (g_line = __LINE__, create_(r, path, type, content))
#define DELETE(r, path) (g_line = __LINE__, delete_(r, path))
#define UPDATE(r, path, fn, arg) (g_line = __LINE__, update_(r, path, fn, arg))
#define QUERY(r, principal, query, after, limit)                               \
  (g_line = __LINE__, query_(r, principal, query, after, limit))
#define EXISTS(r, principal, path)                                             \
  (g_line = __LINE__, exists_(r, principal, path))
#define READ_ITEMS(r, principal, ns, after, limit)                             \
  (g_line = __LINE__, read_items_(r, principal, ns, after, limit))
#define LAST_ITEM(r, ns) (g_line = __LINE__, last_item_(r, NULL, ns))
#define LAST_ITEM_AS(r, principal, ns)                                         \
  (g_line = __LINE__, last_item_(r, principal, ns))
#define GRANT(r, principal, prefix)                                            \
  (g_line = __LINE__, grant_(r, 0, principal, prefix, DURABLE_GRANT_READ))
#define REVOKE(r, principal, prefix)                                           \
  (g_line = __LINE__, grant_(r, 1, principal, prefix, 0))
#define GRANT_M(r, principal, prefix, modes)                                   \
  (g_line = __LINE__, grant_(r, 0, principal, prefix, modes))
#define REVOKE_M(r, principal, prefix, modes)                                  \
  (g_line = __LINE__, grant_(r, 1, principal, prefix, modes))
#define GRANTS(r, principal) (g_line = __LINE__, grants_(r, principal))
#define ACCESS(r, principal, path, modes)                                      \
  (g_line = __LINE__, access_(r, principal, path, modes))
#define ALIVE(r, store, instance)                                              \
  (g_line = __LINE__, alive_(r, store, instance))

/* Refused submissions: the code comes back at once, `err` says why, and the
 * callback never runs (stray_cb counts it if it does). */
void stray_cb(const durable_result_t *result, void *data);
void refused_(int rc, const durable_error_t *e, int want, const char *what);

/* REFUSED(EINVAL, durable_store_put(T.store, ..., stray_cb, NULL, &e)): the
 * call is made with a durable_error_t named `e` in scope. */
#define REFUSED(want, call)                                                    \
  do {                                                                         \
    g_line = __LINE__;                                                         \
    durable_error_t e;                                                         \
    memset(&e, 0, sizeof(e));                                                  \
    refused_((call), &e, DURABLE_##want, #call);                               \
  } while (0)

/* ---- node checks -------------------------------------------------------- */

/* Every field of `n` agrees with its path, type and content. */
void check_node_(const durable_node_t *n, const char *path, const char *type,
                 const char *content);

#define CHECK_NODE(n, path, type, content)                                     \
  (g_line = __LINE__, check_node_(n, path, type, content))

/* ---- the C mutator (its mode, a MUT_*, is the argument) ---- */

enum {
  MUT_INCREMENT,
  MUT_NOTHING,
  MUT_FAIL,
  MUT_BAD_JSON,
  MUT_SET_TYPE,
  MUT_BAD_TYPE
};

char *dupstr(const char *s);

/* {"n":K} -> {"n":K+1}; absent -> {"n":1}.  Runs on the writer thread. */
int mutate(const durable_node_t *current, char **content, char **node_type,
           void *arg);

/* ---- ids and stream items ---- */
void check_ids(const res_t *r, const char *const *ids, size_t n);

/* The path of item `seq` under `items_ns` (a ring of buffers). */
const char *item_path(const char *items_ns, int64_t seq);

/* The rows are items (after, after+count] in order, with their content. */
void check_items(const res_t *r, int64_t after, size_t count);

#endif /* DURABLE_TEST_CONTRACT_H */

/*
 * sqlite_store.c: the SQLite backend (durable__sqlite_backend).
 *
 * Everything a store does that is not SQL lives above backend.h; this file
 * keeps SQLite's SQL and I/O only.  A connection is one sqlite3 handle opened
 * SQLITE_OPEN_NOMUTEX: the engine gives each worker thread its own, and the
 * watch source below keeps one more, so no handle is ever used by two threads
 * at once and SQLite's per-connection mutex would only cost time.  Every
 * statement is prepared once per connection and kept, keyed by (table,
 * operation); the node tables come from durable__tables(), the only names
 * ever put into SQL text, so nothing taken from a path reaches it.
 *
 * Three facts of SQLite shape the rest:
 *
 *  - One writer at a time per file, across processes.  A write transaction is
 *    BEGIN IMMEDIATE: it takes the write lock first, so the read-for-update
 *    inside it sees the latest commit of every process and can never be
 *    refused at upgrade time (SQLITE_BUSY_SNAPSHOT).  The lock is waited for
 *    up to BUSY_TIMEOUT_MS so that two processes writing one file both
 *    succeed; longer is reported as "locked".
 *  - No row locks: the write lock already serialises, so `for_update` is
 *    nothing more than a read here.
 *  - No notifications between processes.  Instead every write transaction
 *    takes a commit id (one more than the greatest so far) and logs, per
 *    namespace it changed, a row (commit id, namespace) in durable_commits;
 *    after COMMIT it rings a doorbell -- when another store holds its
 *    liveness lock in FILE-live, so a lone process pays nothing -- a
 *    one-byte write to FILE-live, which
 *    the watches of every process hear through inotify (uv_fs_event on
 *    FILE-live).  A watch then checks PRAGMA data_version (which moves
 *    only when another connection committed), and only when it moved reads
 *    which namespaces were logged after the commit id it last saw.  A slow
 *    timer checks too, for a missed ring (a fast one where inotify is not to
 *    be had).  The log keeps the last LOG_KEEP commits; a watch that fell
 *    further behind re-syncs everything.
 *
 * Versions come from the same log: each row also carries the last version
 * its transaction wrote, so a transaction reads the newest row once (a seek
 * to the right edge of the log's key), counts on from there -- one more per
 * write, across processes and across a delete and a re-create -- and writes
 * one row of its own beside the nodes, instead of a counter per write.
 * SQLite runs each write at once: an outcome is known when the call returns
 * and flush has nothing to do.  A put is an insert that, meeting its row,
 * becomes an update; a create is the insert alone.
 *
 * The partition of a place is not used: on SQLite a partition is just the
 * first segment of `namespace`, already part of every key, and all
 * partitions share the same tables.
 */
#include "backend.h"
#include "schema.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Long enough for another process's group commit to finish (they are
 * milliseconds), short enough that a wedged writer is reported. */
#define BUSY_TIMEOUT_MS 10000
/* The watch hears other processes' commits through the doorbell (see
 * "watching other processes"), at once.  Its timer only catches a ring that
 * was missed: a writer that could not open FILE-live, an overflowing inotify
 * queue, FILE-live removed under us, a check that failed and must be
 * retried.  Those are rare, so a second is enough, and an idle process
 * wakes once a second instead of 25 times. */
#define WATCH_FALLBACK_MS 1000
/* Without a doorbell (uv_fs_event would not start, e.g. out of inotify
 * watches) the timer is all there is: a foreign commit is noticed within
 * about this plus one poll, well inside the 100 ms promised by durable.h. */
#define WATCH_PERIOD_MS 40
#define MEMORY_NAME ":memory:"
#define MAX_ID_WIDTH 64
/* The log keeps the last LOG_KEEP commits, pruned every LOG_PRUNE. */
#define LOG_KEEP 16384
#define LOG_PRUNE 256

#define NODE_COLUMNS                                                           \
  "namespace, id, path, node_type, content, main_node, version, "              \
  "created_at, updated_at"

/* Statements of each node table, prepared lazily per connection. */
enum {
  OP_GET,
  OP_LIST,
  OP_MAX_ID,
  OP_INSERT,
  OP_UPDATE,
  OP_REFRESH,
  OP_REMOVE,
  OP_RETYPE,
  OP_REPLACE,
  OP_READ_BACK,
  OP_LIST_TYPE,
  OP_LIST_TYPE_SKIP,
  OP_COUNT
};

static const char *const op_sql[OP_COUNT] = {
    [OP_GET] = "SELECT " NODE_COLUMNS " FROM %s "
               "WHERE namespace = ?1 AND id = ?2",
    [OP_LIST] = "SELECT " NODE_COLUMNS " FROM %s "
                "WHERE namespace = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
    /* BETWEEN on the key keeps it a primary-key range scan read backwards;
     * length and GLOB then drop the few ids in that range that are not
     * exactly `width` digits (e.g. "12a" or "1234" for width 3). */
    [OP_MAX_ID] = "SELECT id FROM %s WHERE namespace = ?1 "
                  "AND id BETWEEN ?2 AND ?3 AND length(id) = ?4 "
                  "AND id NOT GLOB '*[^0-9]*' ORDER BY id DESC LIMIT 1",
    /* DO NOTHING touches only the key conflict: EEXIST without an error,
     * so the transaction stays usable. */
    [OP_INSERT] = "INSERT INTO %s (" NODE_COLUMNS ") VALUES "
                  "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT DO NOTHING",
    /* path and main_node follow from the key and never change; node_type
     * is set apart (OP_RETYPE), only when it changes: a column an UPDATE
     * names is an index entry SQLite rewrites, and the type index would
     * otherwise cost every acknowledgement a page.  ?3, ?4, ?6 are unused
     * slots, so every write takes the same bindings. */
    [OP_UPDATE] = "UPDATE %s SET content = ?5, version = ?7, "
                  "created_at = ?8, updated_at = ?9 "
                  "WHERE namespace = ?1 AND id = ?2",
    /* the update half of a put: everything but created_at, which it reads
     * back */
    [OP_REFRESH] = "UPDATE %s SET content = ?5, version = ?7, "
                   "updated_at = ?9 "
                   "WHERE namespace = ?1 AND id = ?2",
    [OP_RETYPE] = "UPDATE %s SET node_type = ?4 "
                  "WHERE namespace = ?1 AND id = ?2 AND node_type <> ?4",
    /* a compare-and-set on the version (?8 carries the expected one) */
    [OP_REPLACE] = "UPDATE %s SET content = ?5, version = ?7, "
                   "updated_at = ?9 WHERE namespace = ?1 AND id = ?2 "
                   "AND version = ?8",
    /* after a refresh or a replace: what it kept, on the page it wrote */
    [OP_READ_BACK] = "SELECT created_at, node_type = ?4 FROM %s "
                     "WHERE namespace = ?1 AND id = ?2",
    [OP_REMOVE] = "DELETE FROM %s WHERE namespace = ?1 AND id = ?2",
    /* served by the type index {table}_by_type (schema.h) */
    [OP_LIST_TYPE] =
        "SELECT " NODE_COLUMNS " FROM %s "
        "WHERE node_type = ?1 AND path > ?2 ORDER BY path LIMIT ?3",
    /* the same in a table whose type index leaves its bulk type out (the
     * second %s): SQLite uses a partial index only for a query that carries
     * its WHERE term literally; never asked for the bulk type itself */
    [OP_LIST_TYPE_SKIP] =
        "SELECT " NODE_COLUMNS " FROM %s "
        "WHERE node_type = ?1 AND node_type <> '%s' AND path > ?2 "
        "ORDER BY path LIMIT ?3",
};

/* Statements that are not per table. */
enum {
  S_BEGIN,
  S_COMMIT,
  S_ROLLBACK,
  S_LAST_COMMIT,
  S_LOG,
  S_PRUNE,
  S_GRANTS_OF,
  S_GRANTS_ALL,
  S_GRANT_ADD,
  S_GRANT_CLEAR,
  S_GRANT_DROP,
  S_DATA_VERSION,
  S_READ_BEGIN,
  S_COUNTER,
  S_CHANGED_SINCE,
  S_COUNT
};

static const char *const misc_sql[S_COUNT] = {
    [S_BEGIN] = "BEGIN IMMEDIATE",
    [S_COMMIT] = "COMMIT",
    [S_ROLLBACK] = "ROLLBACK",
    /* the newest row of the log: a seek to the right edge of its key */
    [S_LAST_COMMIT] = "SELECT commit_id, version FROM durable_commits "
                      "ORDER BY commit_id DESC LIMIT 1",
    [S_LOG] = "INSERT OR IGNORE INTO durable_commits (commit_id, namespace, "
              "version) VALUES (?1, ?2, ?3)",
    [S_PRUNE] = "DELETE FROM durable_commits WHERE commit_id <= ?1",
    [S_GRANTS_OF] = "SELECT principal, prefix, modes FROM durable_grants "
                    "WHERE principal = ?1 AND modes <> 0 ORDER BY prefix",
    [S_GRANTS_ALL] = "SELECT principal, prefix, modes FROM durable_grants "
                     "WHERE modes <> 0 ORDER BY principal, prefix",
    [S_GRANT_ADD] = "INSERT INTO durable_grants (principal, prefix, modes) "
                    "VALUES (?1, ?2, ?3) ON CONFLICT (principal, prefix) DO "
                    "UPDATE SET modes = durable_grants.modes | excluded.modes",
    [S_GRANT_CLEAR] = "UPDATE durable_grants SET modes = modes & ~?3 "
                      "WHERE principal = ?1 AND prefix = ?2",
    [S_GRANT_DROP] = "DELETE FROM durable_grants "
                     "WHERE principal = ?1 AND prefix = ?2 AND modes = 0",
    [S_DATA_VERSION] = "PRAGMA data_version",
    [S_READ_BEGIN] = "BEGIN",
    /* the newest and the oldest commit in the log (0 when empty) */
    /* two subqueries: SQLite answers a lone max() or min() with one seek
     * to an edge of the key, but both in one SELECT with a scan of the log
     * (up to LOG_KEEP commits), and a watch runs this after every commit
     * of another connection */
    [S_COUNTER] =
        "SELECT coalesce((SELECT max(commit_id) FROM durable_commits), 0), "
        "coalesce((SELECT min(commit_id) FROM durable_commits), 0)",
    /* a range of the log's key */
    [S_CHANGED_SINCE] = "SELECT DISTINCT namespace FROM durable_commits "
                        "WHERE commit_id > ?1",
};

struct durable__conn_s {
  sqlite3 *db;
  char *file;     /* for messages; MEMORY_NAME for the in-memory store */
  size_t ntables; /* entries of durable__tables() */
  sqlite3_stmt **table_stmts; /* ntables * OP_COUNT, NULL until first use */
  sqlite3_stmt *stmts[S_COUNT];
  int64_t commit_id; /* of the open write transaction; 0 until taken */
  int64_t version;   /* the last version it took (or found) */
  int bell_fd;       /* FILE-live, to ring the doorbell; BELL_* until open */
  uint64_t bell_key; /* the liveness key of the store writing (0: unknown) */
};

/* bell_fd before it is opened, and when it never will be (the in-memory
 * store, or FILE-live could not be opened: the watches' timer covers it). */
#define BELL_UNOPENED (-1)
#define BELL_NONE (-2)

/* ---- URLs ------------------------------------------------------------- */

typedef struct {
  char *file; /* malloc'ed */
  int relaxed;
  int memory;
} url_parts;

static int parse_url(const char *url, url_parts *p, durable_error_t *err) {
  static const char scheme[] = "sqlite:";
  memset(p, 0, sizeof(*p));
  if (url == NULL || strncmp(url, scheme, sizeof(scheme) - 1) != 0)
    return durable__error(err, DURABLE_EINVAL,
                          "store '%s' is not a sqlite: URL", url ? url : "");
  const char *file = url + sizeof(scheme) - 1;
  const char *query = strchr(file, '?');
  size_t len = query ? (size_t)(query - file) : strlen(file);
  if (len == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "store '%s' names no file (sqlite:PATH)", url);
  if (query != NULL) {
    if (strcmp(query + 1, "relaxed") != 0)
      return durable__error(err, DURABLE_EINVAL,
                            "store '%s': unknown option '%s' (known: relaxed)",
                            url, query + 1);
    p->relaxed = 1;
  }
  /* SQLite reads a name that begins with "file:" as a URI (Debian builds it
   * with SQLITE_USE_URI): "file:d/x.db" would open d/x.db, its -live file
   * would not be beside it, and its options would go unchecked.  A store URL
   * names a file; one whose name begins so is written ./file:... */
  if (len >= 5 && strncmp(file, "file:", 5) == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "store '%s': SQLite URIs are not taken (SQLite "
                          "would read '%.*s' as one); sqlite:PATH names a "
                          "file: for a file of that name write sqlite:./%.*s",
                          url, (int)len, file, (int)len, file);
  p->file = malloc(len + 1);
  if (p->file == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  memcpy(p->file, file, len);
  p->file[len] = '\0';
  p->memory = strcmp(p->file, MEMORY_NAME) == 0;
  return 0;
}

/* Decided without allocating, as parse_url reads the file part: an answer
 * lost to a failed allocation would give an in-memory store a second
 * connection, that is a second, empty database for its reads. */
static int single_connection(const char *url) {
  static const char scheme[] = "sqlite:";
  if (url == NULL || strncmp(url, scheme, sizeof(scheme) - 1) != 0)
    return 0;
  const char *file = url + sizeof(scheme) - 1;
  size_t len = strcspn(file, "?");
  return len == sizeof(MEMORY_NAME) - 1 && strncmp(file, MEMORY_NAME, len) == 0;
}

/* ---- errors ----------------------------------------------------------- */

/* SQLite messages are one line in practice; make sure of it. */
static int one_line(durable_error_t *err, int code) {
  if (err != NULL)
    for (char *s = err->message; *s; s++)
      if (*s == '\n' || *s == '\r')
        *s = ' ';
  return code;
}

/* A failed statement `rc` during `what`, as a DURABLE_E* code. */
static int sql_fail(durable__conn_t *c, int rc, const char *what,
                    durable_error_t *err) {
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return durable__error(err, DURABLE_EIO,
                          "SQLite '%s': %s: database is locked (another "
                          "connection held it for more than %d s)",
                          c->file, what, BUSY_TIMEOUT_MS / 1000);
  case SQLITE_NOMEM:
    return durable__error(err, DURABLE_ENOMEM, "SQLite '%s': %s: out of memory",
                          c->file, what);
  case SQLITE_CANTOPEN:
    /* the file or its -wal/-shm went away: reconnecting says why */
    durable__error(err, DURABLE_EUNAVAIL, "SQLite '%s': %s: %s", c->file, what,
                   sqlite3_errmsg(c->db));
    return one_line(err, DURABLE_EUNAVAIL);
  default:
    durable__error(err, DURABLE_EIO, "SQLite '%s': %s: %s", c->file, what,
                   sqlite3_errmsg(c->db));
    return one_line(err, DURABLE_EIO);
  }
}

/* ---- statements ------------------------------------------------------- */

static int prepare(durable__conn_t *c, const char *sql, sqlite3_stmt **out,
                   durable_error_t *err) {
  int rc =
      sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);
  if (rc != SQLITE_OK) {
    *out = NULL;
    return sql_fail(c, rc, "prepare", err);
  }
  return 0;
}

static sqlite3_stmt *misc_stmt(durable__conn_t *c, int which,
                               durable_error_t *err) {
  if (c->stmts[which] == NULL &&
      prepare(c, misc_sql[which], &c->stmts[which], err) != 0)
    return NULL;
  return c->stmts[which];
}

/* The statement `op` of the table `place` names.  The table must be one of
 * durable__tables(): it is pasted into SQL text. */
static sqlite3_stmt *table_stmt(durable__conn_t *c, durable__place_t place,
                                int op, durable_error_t *err) {
  const char *const *tables = durable__tables();
  size_t t;
  for (t = 0; t < c->ntables; t++)
    if (place.table == tables[t] ||
        (place.table != NULL && strcmp(place.table, tables[t]) == 0))
      break;
  if (t == c->ntables) {
    durable__error(err, DURABLE_EINVAL, "unknown node table '%s'",
                   place.table ? place.table : "(null)");
    return NULL;
  }
  sqlite3_stmt **slot = &c->table_stmts[t * OP_COUNT + (size_t)op];
  if (*slot == NULL) {
    char sql[512];
    const char *bulk = durable__bulk_type(tables[t]);
    /* only OP_LIST_TYPE_SKIP has a second %s; the others ignore it */
    snprintf(sql, sizeof(sql), op_sql[op], tables[t], bulk ? bulk : "");
    if (prepare(c, sql, slot, err) != 0)
      return NULL;
  }
  return *slot;
}

/* Bindings are SQLITE_STATIC: every caller resets and clears the statement
 * before returning, so SQLite never keeps a pointer past the call. */
static void bind_text(sqlite3_stmt *st, int i, const char *s) {
  sqlite3_bind_text(st, i, s ? s : "", -1, SQLITE_STATIC);
}

static void done_with(sqlite3_stmt *st) {
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
}

/* Step a statement that returns no row to the end. */
static int run(durable__conn_t *c, sqlite3_stmt *st, const char *what,
               durable_error_t *err) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
  }
  done_with(st);
  return rc == SQLITE_DONE ? 0 : sql_fail(c, rc, what, err);
}

/* The six text columns of the current row of a statement selecting
 * NODE_COLUMNS; -1 when one reads NULL (every column is NOT NULL: out of
 * memory). */
static int row_text(sqlite3_stmt *st, durable__node_text_t text[6]) {
  for (int i = 0; i < 6; i++) {
    text[i].s = (const char *)sqlite3_column_text(st, i);
    text[i].len = (size_t)sqlite3_column_bytes(st, i);
    if (text[i].s == NULL)
      return -1;
  }
  return 0;
}

/* The node in that row; NULL only when out of memory. */
static durable_node_t *row_node(sqlite3_stmt *st) {
  durable__node_text_t text[6];
  if (row_text(st, text) < 0)
    return NULL;
  return durable__node_pack(text, sqlite3_column_int64(st, 6),
                            sqlite3_column_int64(st, 7),
                            sqlite3_column_int64(st, 8));
}

/* The open transaction's commit id and the last version so far, read at
 * their first use: one more than the newest in the log, and the version it
 * wrote last.  The write lock (BEGIN IMMEDIATE) keeps them ours. */
static int take_commit_id(durable__conn_t *c, durable_error_t *err) {
  if (c->commit_id != 0)
    return 0;
  sqlite3_stmt *st = misc_stmt(c, S_LAST_COMMIT, err);
  if (st == NULL)
    return err->code;
  int rc = sqlite3_step(st);
  c->commit_id = 1;
  c->version = 0;
  if (rc == SQLITE_ROW) {
    c->commit_id = sqlite3_column_int64(st, 0) + 1;
    c->version = sqlite3_column_int64(st, 1);
    rc = SQLITE_DONE;
  }
  done_with(st);
  if (rc != SQLITE_DONE) {
    c->commit_id = 0;
    return sql_fail(c, rc, "read the commit log", err);
  }
  return 0;
}

/* The version of the transaction's next write. */
static int take_version(durable__conn_t *c, int64_t *version,
                        durable_error_t *err) {
  int rc = take_commit_id(c, err);
  if (rc != 0)
    return rc;
  *version = ++c->version;
  return 0;
}

/* The newest commit id in the log and the oldest, outside any write. */
static int read_counter(durable__conn_t *c, int64_t *newest, int64_t *oldest,
                        durable_error_t *err) {
  sqlite3_stmt *st = misc_stmt(c, S_COUNTER, err);
  if (st == NULL)
    return err->code;
  int rc = sqlite3_step(st);
  *newest = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  *oldest = rc == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
  done_with(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE
             ? 0
             : sql_fail(c, rc, "read commit log", err);
}

/* ---- connections ------------------------------------------------------ */

static void close_conn(durable__conn_t *c) {
  if (c == NULL)
    return;
  if (c->table_stmts != NULL)
    for (size_t i = 0; i < c->ntables * OP_COUNT; i++)
      sqlite3_finalize(c->table_stmts[i]);
  for (int i = 0; i < S_COUNT; i++)
    sqlite3_finalize(c->stmts[i]);
  if (c->bell_fd >= 0)
    close(c->bell_fd); /* holds no lock (OFD locks are per descriptor) */
  /* close_v2: a statement left behind must not leak the handle */
  sqlite3_close_v2(c->db);
  free(c->table_stmts);
  free(c->file);
  free(c);
}

static int journal_mode_cb(void *arg, int ncols, char **values, char **names) {
  (void)names;
  if (ncols > 0 && values[0] != NULL)
    snprintf((char *)arg, 16, "%s", values[0]);
  return 0;
}

/* What in the file system keeps SQLite from opening `file` for writing: the
 * file itself, or its directory, where the file or the -wal and -shm files
 * WAL keeps beside it must be created.  NULL when nothing is seen.  SQLite's
 * own errno is of its last attempt, often a misleading ENOENT. */
static const char *fs_problem(const char *file, char *buf, size_t size) {
  struct stat st;
  if (stat(file, &st) == 0) {
    if (access(file, R_OK | W_OK) != 0)
      return strerror(errno);
  } else if (errno != ENOENT) {
    return strerror(errno);
  }
  const char *slash = strrchr(file, '/');
  char dir[1024];
  if (slash == NULL)
    snprintf(dir, sizeof(dir), ".");
  else
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash == file ? 1 : slash - file),
             file);
  if (stat(dir, &st) != 0)
    snprintf(buf, size, "directory '%s': %s", dir, strerror(errno));
  else if (!S_ISDIR(st.st_mode))
    snprintf(buf, size, "'%s' is not a directory", dir);
  else if (access(dir, W_OK | X_OK) != 0)
    snprintf(buf, size, "directory '%s' is not writable: %s", dir,
             strerror(errno));
  else
    return NULL;
  return buf;
}

/* A failure while opening: the store cannot be used at all (EUNAVAIL), named
 * by its file, with SQLite's reason and the OS's when there is one. */
static int open_fail(durable__conn_t *c, int rc, const char *what,
                     durable_error_t *err) {
  int code = (rc & 0xff) == SQLITE_NOMEM ? DURABLE_ENOMEM : DURABLE_EUNAVAIL;
  const char *reason = c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
  int sys = c->db ? sqlite3_system_errno(c->db) : 0;
  char why[1200];
  const char *fs = NULL;
  if ((rc & 0xff) == SQLITE_CANTOPEN || (rc & 0xff) == SQLITE_READONLY)
    fs = fs_problem(c->file, why, sizeof(why));
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
    durable__error(err, code,
                   "cannot open SQLite file '%s': %s: database is locked "
                   "(another connection held it for more than %d s)",
                   c->file, what, BUSY_TIMEOUT_MS / 1000);
  else if (fs != NULL)
    durable__error(err, code, "cannot open SQLite file '%s': %s: %s (%s)",
                   c->file, what, reason, fs);
  else if (sys != 0)
    durable__error(err, code, "cannot open SQLite file '%s': %s: %s (%s)",
                   c->file, what, reason, strerror(sys));
  else
    durable__error(err, code, "cannot open SQLite file '%s': %s: %s", c->file,
                   what, reason);
  return one_line(err, code);
}

/* Whether `sql` (a probe of the schema) returns a row: SQLITE_ROW,
 * SQLITE_DONE, or SQLite's error. */
static int probe(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc != SQLITE_OK)
    return rc;
  rc = sqlite3_step(st);
  sqlite3_finalize(st);
  return rc;
}

/* A file made before grants had modes: its grants were read grants. */
static int migrate_grants(durable__conn_t *c) {
  int rc = probe(c->db, "SELECT 1 FROM pragma_table_info('durable_grants') "
                        "WHERE name = 'modes'");
  if (rc == SQLITE_ROW)
    return SQLITE_OK;
  if (rc != SQLITE_DONE)
    return rc;
  return sqlite3_exec(c->db,
                      "ALTER TABLE durable_grants ADD COLUMN modes INTEGER "
                      "NOT NULL DEFAULT 1",
                      NULL, NULL, NULL);
}

/* A file written before the commit log kept its counters in durable_meta
 * ('version' per write, 'commit' per transaction) and the last commit of
 * each namespace in durable_changes.  Start the log where both stood, so
 * that versions keep growing and no watch takes new ids for old ones, and
 * drop the old tables.  Inside the bootstrap transaction. */
static int migrate(durable__conn_t *c) {
  int grants = migrate_grants(c);
  if (grants != SQLITE_OK)
    return grants;
  static const char sql[] =
      "INSERT INTO durable_commits (commit_id, namespace, version) SELECT "
      "coalesce((SELECT value FROM durable_meta WHERE key = 'commit'), 0) "
      "+ 1, '', coalesce((SELECT value FROM durable_meta WHERE key = "
      "'version'), 0) WHERE NOT EXISTS (SELECT 1 FROM durable_commits);"
      "DROP TABLE durable_meta;"
      "DROP TABLE IF EXISTS durable_changes;";
  int rc = probe(c->db, "SELECT 1 FROM sqlite_master WHERE type = 'table' "
                        "AND name = 'durable_meta'");
  if (rc == SQLITE_DONE)
    return SQLITE_OK; /* nothing to migrate */
  if (rc != SQLITE_ROW)
    return rc;
  return sqlite3_exec(c->db, sql, NULL, NULL, NULL);
}

/* ---- whose file it is ------------------------------------------------- */

static void live_path(const char *file, char *out, size_t size);

/* PRAGMA application_id marks a file as durable's (the header's offset 68,
 * as Fossil and GeoPackage mark theirs): "dura". */
#define APPLICATION_ID 0x64757261
#define APPLICATION_ID_SET "PRAGMA application_id = 1685418593"

/* What the store's name leads to, before SQLite opens (and maybe creates)
 * it.  Through a symbolic link, durable -- often run as root -- would create
 * or write a file somebody else chose: a link to nothing is refused (SQLite
 * would create its target), and so is one that Linux's
 * fs.protected_symlinks would not follow: in a sticky, world-writable
 * folder, owned neither by whoever follows it nor by the folder's owner
 * (applied here even where the sysctl is off).  A FIFO, a directory or a
 * device is not a database. */
static int check_file(const char *file, durable_error_t *err) {
  struct stat link, target;
  int linked = lstat(file, &link) == 0 && S_ISLNK(link.st_mode);
  if (stat(file, &target) != 0) {
    if (linked)
      return durable__error(err, DURABLE_EINVAL,
                            "SQLite file '%s' is a symbolic link to nothing; "
                            "durable does not create a database through a "
                            "link",
                            file);
    return 0; /* a new file: SQLite makes it */
  }
  if (!S_ISREG(target.st_mode))
    return durable__error(err, DURABLE_EINVAL,
                          "SQLite file '%s' is not a regular file (%s)", file,
                          S_ISDIR(target.st_mode)    ? "a directory"
                          : S_ISFIFO(target.st_mode) ? "a FIFO"
                          : S_ISSOCK(target.st_mode) ? "a socket"
                                                     : "a device");
  if (linked && link.st_uid != geteuid()) {
    /* the kernel's rule: a link in a sticky, world-writable folder (/tmp)
     * is followed only when it is the follower's or the folder's owner's */
    char dir[4096];
    const char *slash = strrchr(file, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) : 1,
             slash ? (slash == file ? "/" : file) : ".");
    struct stat d;
    int planted = stat(dir, &d) == 0 && (d.st_mode & S_ISVTX) &&
                  (d.st_mode & S_IWOTH) && link.st_uid != d.st_uid;
    if (planted)
      return durable__error(
          err, DURABLE_EACCES,
          "SQLite file '%s' is a symbolic link owned by uid %ld in a "
          "sticky, world-writable folder; refused, as protected_symlinks "
          "refuses such links",
          file, (long)link.st_uid);
  }
  return 0;
}

/* The files beside the database that durable and SQLite create and write
 * (FILE-live: the liveness locks and the doorbell; SQLite's -wal, -shm,
 * -journal): a symbolic link planted there would have them create or write
 * its target, so one is refused before anything is opened.  (FILE-live is
 * also opened O_NOFOLLOW, for a link planted later.) */
static int check_beside(const char *file, durable_error_t *err) {
  static const char *const suffixes[] = {"-wal", "-shm", "-journal"};
  char path[4096];
  struct stat st;
  live_path(file, path, sizeof path);
  if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return durable__error(err, DURABLE_EACCES,
                          "SQLite file '%s': its liveness file '%s' is %s; "
                          "refused, nothing written",
                          file, path,
                          S_ISLNK(st.st_mode) ? "a symbolic link"
                                              : "not a regular file");
  for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
    snprintf(path, sizeof path, "%s%s", file, suffixes[i]);
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
      return durable__error(err, DURABLE_EACCES,
                            "SQLite file '%s': '%s' is a symbolic link; "
                            "refused, nothing written",
                            file, path);
  }
  return 0;
}

static int int_of(sqlite3 *db, const char *sql, int64_t *out) {
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    *out = sqlite3_column_int64(st, 0);
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  return rc;
}

/* Only an empty file or durable's own becomes a store: a `durable get` on
 * somebody's database must not add durable's tables to it.  durable's own is
 * marked (APPLICATION_ID); a file of an earlier durable, unmarked, is known
 * by its node table and marked now.  *adopt: mark it in the bootstrap. */
static int check_owner(durable__conn_t *c, int *adopt, durable_error_t *err) {
  int64_t id = 0, tables = 0, nodes = 0;
  int rc = int_of(c->db, "PRAGMA application_id", &id);
  if (rc == SQLITE_OK)
    rc = int_of(c->db,
                "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE "
                "'sqlite\\_%' ESCAPE '\\'",
                &tables);
  if (rc == SQLITE_OK)
    rc = int_of(c->db,
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                "AND name = '" DURABLE__PRIMARY_TABLE "'",
                &nodes);
  if (rc != SQLITE_OK)
    return open_fail(c, rc, "read its header", err);
  if (id == APPLICATION_ID)
    return 0;
  if (id != 0)
    return durable__error(err, DURABLE_EINVAL,
                          "SQLite file '%s' belongs to another application "
                          "(application_id %lld, durable's is %d); refused, "
                          "nothing written",
                          c->file, (long long)id, APPLICATION_ID);
  if (tables > 0 && nodes == 0)
    return durable__error(err, DURABLE_EINVAL,
                          "SQLite file '%s' is not a durable store: it holds "
                          "%lld other table%s or index%s and no durable mark; "
                          "durable makes its tables only in an empty file or "
                          "its own; refused, nothing written",
                          c->file, (long long)tables, tables == 1 ? "" : "s",
                          tables == 1 ? "" : "es");
  *adopt = 1;
  return 0;
}

/* Open a connection.  `bootstrap` sets the journal and creates the schema:
 * done by every engine connection (so a read-only file is refused at
 * connect, by that write), not by the watch's, which only reads and must not
 * queue behind a writer on the loop thread. */
static int open_conn(const char *url, int bootstrap, durable__conn_t **out,
                     durable_error_t *err) {
  url_parts p;
  int rc = parse_url(url, &p, err);
  if (rc != 0)
    return rc;

  durable__conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    free(p.file);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }
  c->file = p.file;
  c->bell_fd = p.memory ? BELL_NONE : BELL_UNOPENED;
  for (const char *const *t = durable__tables(); *t; t++)
    c->ntables++;
  c->table_stmts = calloc(c->ntables * OP_COUNT, sizeof(*c->table_stmts));
  if (c->table_stmts == NULL) {
    close_conn(c);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }

  if (!p.memory && ((rc = check_file(c->file, err)) < 0 ||
                    (rc = check_beside(c->file, err)) < 0)) {
    close_conn(c);
    return rc;
  }
  rc = sqlite3_open_v2(
      c->file, &c->db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    rc = open_fail(c, rc, "open", err);
    close_conn(c);
    return rc;
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
  /* Statement journals in memory, in small pieces.  Every write statement
   * inside a group's transaction keeps one (WAL has no rollback journal to
   * undo a statement with); by default it is a 64 KiB buffer malloc'd and
   * freed per statement, which on a worker thread made glibc trim its arena
   * and fault the pages back each time -- a third of the writer's CPU while
   * a consumer drained (madvise and its TLB shoot-downs, in perf).  No
   * statement here journals more than a batch's pages; a failure here costs
   * only that speed. */
  sqlite3_exec(c->db, "PRAGMA temp_store=MEMORY", NULL, NULL, NULL);

  /* READWRITE falls back to read-only without a word when the file is not
   * writable; refuse that here rather than at the first write. */
  if (sqlite3_db_readonly(c->db, "main") == 1) {
    durable__error(err, DURABLE_EUNAVAIL,
                   "cannot open SQLite file '%s' for writing: the file is "
                   "read-only",
                   c->file);
    close_conn(c);
    return DURABLE_EUNAVAIL;
  }

  /* Whose file it is, before anything writes to it (the WAL switch writes
   * its header): durable's own, an empty one, or refused. */
  int adopt = 0;
  if (bootstrap && (rc = check_owner(c, &adopt, err)) < 0) {
    close_conn(c);
    return rc;
  }

  if (bootstrap) {
    char mode[16] = "";
    if (!p.memory) {
      /* WAL is a property of the file: readers never wait for the writer,
       * and commits are one append + (with FULL) one fsync. */
      /* Switching a new file to WAL takes an exclusive lock, and SQLite
       * answers SQLITE_BUSY at once (no busy handler) when another process
       * is bootstrapping the same file: wait for it, as the busy timeout
       * would. */
      for (int waited = 0;; waited += 10) {
        rc = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL", journal_mode_cb,
                          mode, NULL);
        if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) ||
            waited >= BUSY_TIMEOUT_MS)
          break;
        uv_sleep(10);
      }
      if (rc != SQLITE_OK)
        goto fail_journal;
      if (strcmp(mode, "wal") != 0) {
        durable__error(err, DURABLE_EUNAVAIL,
                       "cannot open SQLite file '%s': WAL journal refused "
                       "(journal_mode is '%s')",
                       c->file, mode);
        close_conn(c);
        return DURABLE_EUNAVAIL;
      }
    }
    rc = sqlite3_exec(c->db,
                      p.relaxed ? "PRAGMA synchronous=NORMAL"
                                : "PRAGMA synchronous=FULL",
                      NULL, NULL, NULL);
    if (rc != SQLITE_OK)
      goto fail_sync;

    char *script = durable__schema_script(DURABLE__SQLITE);
    if (script == NULL) {
      close_conn(c);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
    /* One transaction, so a second process bootstrapping at the same time
     * waits for the first instead of interleaving with it; also the write
     * that proves the file writable. */
    rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
      rc = sqlite3_exec(c->db, script, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
      rc = migrate(c);
    if (rc == SQLITE_OK && adopt)
      rc = sqlite3_exec(c->db, APPLICATION_ID_SET, NULL, NULL, NULL);
    if (rc == SQLITE_OK)
      rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
    free(script);
    if (rc != SQLITE_OK) {
      rc = open_fail(c, rc, "create schema", err);
      if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
      close_conn(c);
      return rc;
    }
  }
  *out = c;
  return 0;

fail_journal:
  rc = open_fail(c, rc, "set WAL journal", err);
  close_conn(c);
  return rc;
fail_sync:
  rc = open_fail(c, rc, "set synchronous", err);
  close_conn(c);
  return rc;
}

static int connect_(const char *url, durable__conn_t **out,
                    durable_error_t *err) {
  return open_conn(url, 1, out, err);
}

static void disconnect(durable__conn_t *conn) {
  close_conn(conn);
}

/* ---- transactions ----------------------------------------------------- */

static int begin(durable__conn_t *c, durable_error_t *err) {
  /* A transaction left open by an earlier failure would refuse every later
   * BEGIN; end it rather than wedge the connection. */
  if (!sqlite3_get_autocommit(c->db))
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
  c->commit_id = c->version = 0;
  sqlite3_stmt *st = misc_stmt(c, S_BEGIN, err);
  return st ? run(c, st, "begin", err) : err->code;
}

static void rollback(durable__conn_t *c);
static void live_path(const char *file, char *out, size_t size);

/* 1 when a store other than the one of liveness key `own` holds its lock in
 * FILE-live (open on `fd`): another process, or a second store of this one.
 * Two F_OFD_GETLK, beside and past our own byte; 1 when unsure. */
static int others_alive(int fd, uint64_t own) {
  struct flock below = {.l_type = F_RDLCK,
                        .l_whence = SEEK_SET,
                        .l_start = 0,
                        .l_len = (off_t)own};
  struct flock above = {.l_type = F_RDLCK,
                        .l_whence = SEEK_SET,
                        .l_start = (off_t)own + 1,
                        .l_len = 0};
  if (own == 0)
    return 1;
  if (fcntl(fd, F_OFD_GETLK, &below) != 0 || below.l_type != F_UNLCK)
    return 1;
  return fcntl(fd, F_OFD_GETLK, &above) != 0 || above.l_type != F_UNLCK;
}

/* The doorbell (see "watching other processes"): one byte written to
 * FILE-live after a commit that logged changes, which every watch on the
 * file hears through inotify.  The byte means nothing (FILE-live is read for
 * its locks only, and writing does not touch them); the write is what rings.
 * It must come after COMMIT: the writes to -wal are heard too, but they come
 * before the commit can be seen (SQLite publishes it in the -shm index,
 * through memory, after them and after the fsync), so a check run on those
 * would find nothing.  One pwrite per commit, beside the commit's fsync. */
static void ring(durable__conn_t *c) {
  if (c->bell_fd == BELL_NONE)
    return;
  if (c->bell_fd == BELL_UNOPENED) {
    char path[4096];
    live_path(c->file, path, sizeof path);
    c->bell_fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (c->bell_fd < 0) {
      c->bell_fd = BELL_NONE; /* the watches' timer will notice instead */
      return;
    }
  }
  if (!others_alive(c->bell_fd, c->bell_key))
    return; /* nobody else to tell: a lone process pays nothing */
  if (pwrite(c->bell_fd, "", 1, 0) != 1) {
    /* nothing to do: the watches' timer will notice instead */
  }
}

static int commit(durable__conn_t *c, int *unknown, durable_error_t *err) {
  sqlite3_stmt *st = misc_stmt(c, S_COMMIT, err);
  int rc = st ? run(c, st, "commit", err) : err->code;
  /* Ring also when COMMIT failed: it may have committed, and a check that
   * finds nothing costs nothing. */
  if (c->commit_id != 0)
    ring(c);
  /* Whether a failed COMMIT left anything on disk is not ours to know. */
  *unknown = rc != 0 && st != NULL;
  if (rc != 0)
    rollback(c);
  return rc;
}

static void rollback(durable__conn_t *c) {
  /* SQLite may already have rolled back by itself (e.g. after SQLITE_FULL);
   * a ROLLBACK then would only fail. */
  if (sqlite3_get_autocommit(c->db))
    return;
  durable_error_t ignored;
  sqlite3_stmt *st = misc_stmt(c, S_ROLLBACK, &ignored);
  if (st == NULL || run(c, st, "rollback", &ignored) != 0)
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ---- reads ------------------------------------------------------------ */

static int get(durable__conn_t *c, durable__place_t place, const char *ns,
               const char *id, int for_update, durable_node_t **out,
               durable_error_t *err) {
  (void)for_update; /* BEGIN IMMEDIATE already holds the only write lock */
  *out = NULL;
  sqlite3_stmt *st = table_stmt(c, place, OP_GET, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, id);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    durable_node_t *node = row_node(st);
    done_with(st);
    if (node == NULL)
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    *out = node;
    return 0;
  }
  done_with(st);
  if (rc == SQLITE_DONE)
    return durable__error(err, DURABLE_ENOTFOUND, "'%s%s%s' not found",
                          ns ? ns : "", ns && *ns ? "/" : "", id ? id : "");
  return sql_fail(c, rc, "get", err);
}

/* Step a bound statement to its end, appending each row's node to `out`. */
static int collect_rows(durable__conn_t *c, sqlite3_stmt *st,
                        durable__nodes_t *out, const char *what,
                        durable_error_t *err) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    durable__node_text_t text[6];
    if (row_text(st, text) < 0 ||
        durable__nodes_add(out, text, sqlite3_column_int64(st, 6),
                           sqlite3_column_int64(st, 7),
                           sqlite3_column_int64(st, 8)) == NULL) {
      done_with(st);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  }
  done_with(st);
  return rc == SQLITE_DONE ? 0 : sql_fail(c, rc, what, err);
}

static int list(durable__conn_t *c, durable__place_t place, const char *ns,
                const char *after, size_t limit, durable__nodes_t *out,
                durable_error_t *err) {
  if (limit == 0)
    return 0;
  sqlite3_stmt *st = table_stmt(c, place, OP_LIST, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, after);
  sqlite3_bind_int64(st, 3, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
  return collect_rows(c, st, out, "list", err);
}

static int partitions(durable__conn_t *c, durable__strv_t *out,
                      durable_error_t *err) {
  (void)c;
  /* one set of tables holds every partition */
  if (durable__strv_push(out, "") < 0)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return 0;
}

static int list_type(durable__conn_t *c, durable__place_t place,
                     const char *node_type, const char *after, size_t limit,
                     durable__nodes_t *out, durable_error_t *err) {
  if (limit == 0)
    return 0;
  int op = durable__type_query_skips_bulk(place.table, node_type)
               ? OP_LIST_TYPE_SKIP
               : OP_LIST_TYPE;
  sqlite3_stmt *st = table_stmt(c, place, op, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, node_type);
  bind_text(st, 2, after);
  sqlite3_bind_int64(st, 3, limit > INT64_MAX ? INT64_MAX : (int64_t)limit);
  return collect_rows(c, st, out, "list by type", err);
}

static int max_id(durable__conn_t *c, durable__place_t place, const char *ns,
                  int width, char **out, durable_error_t *err) {
  *out = NULL;
  if (width < 1 || width > MAX_ID_WIDTH)
    return durable__error(err, DURABLE_EINVAL, "id width %d out of range",
                          width);
  char low[MAX_ID_WIDTH + 1], high[MAX_ID_WIDTH + 1];
  memset(low, '0', (size_t)width);
  memset(high, '9', (size_t)width);
  low[width] = high[width] = '\0';
  sqlite3_stmt *st = table_stmt(c, place, OP_MAX_ID, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, low);
  bind_text(st, 3, high);
  sqlite3_bind_int(st, 4, width);
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *out = strdup(sqlite3_column_text(st, 0)
                      ? (const char *)sqlite3_column_text(st, 0)
                      : "");
  else if (rc == SQLITE_DONE)
    *out = strdup("");
  done_with(st);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE)
    return sql_fail(c, rc, "max id", err);
  if (*out == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  return 0;
}

/* ---- writes ----------------------------------------------------------- */

static void bind_node(sqlite3_stmt *st, const durable_node_t *node,
                      int64_t version) {
  bind_text(st, 1, node->ns);
  bind_text(st, 2, node->id);
  bind_text(st, 3, node->path);
  bind_text(st, 4, node->node_type);
  bind_text(st, 5, node->content ? node->content : "{}");
  bind_text(st, 6, node->main_node);
  sqlite3_bind_int64(st, 7, version);
  sqlite3_bind_int64(st, 8, node->created_at);
  sqlite3_bind_int64(st, 9, node->updated_at);
}

/* Write `node` with statement `op` under `version`. */
/* Statement `op` of the node's table with its key and type bound (?1, ?2,
 * ?4: the slots of every node write). */
static sqlite3_stmt *key_type_stmt(durable__conn_t *c, durable__place_t place,
                                   int op, const durable_node_t *node,
                                   durable_error_t *err) {
  sqlite3_stmt *st = table_stmt(c, place, op, err);
  if (st != NULL) {
    bind_text(st, 1, node->ns);
    bind_text(st, 2, node->id);
    bind_text(st, 4, node->node_type);
  }
  return st;
}

static int write_node(durable__conn_t *c, durable__place_t place, int op,
                      const durable_node_t *node, int64_t version,
                      durable__outcome_t *out, durable_error_t *err) {
  sqlite3_stmt *st = table_stmt(c, place, op, err);
  if (st == NULL)
    return err->code;
  bind_node(st, node, version);
  int64_t created_at = node->created_at;
  int rc = run(c, st, op == OP_INSERT ? "insert" : "update", err);
  if (rc != 0)
    return rc;
  if (sqlite3_changes(c->db) == 0) {
    out->status = op == OP_INSERT ? DURABLE_EEXIST : DURABLE_ENOTFOUND;
    return 0;
  }
  int same_type = 0;
  if (op == OP_REFRESH || op == OP_REPLACE) {
    /* An UPDATE ... RETURNING builds a temporary table for its one row
     * each time; a read of the row just written is cheaper, and says
     * whether the type changed too. */
    sqlite3_stmt *back = key_type_stmt(c, place, OP_READ_BACK, node, err);
    if (back == NULL)
      return err->code;
    rc = sqlite3_step(back);
    if (rc == SQLITE_ROW) {
      created_at = sqlite3_column_int64(back, 0);
      same_type = sqlite3_column_int(back, 1) == 1;
    }
    done_with(back);
    if (rc == SQLITE_DONE) /* inside our own write transaction: never */
      return durable__error(err, DURABLE_EIO,
                            "update of '%s': the row was gone right after",
                            node->path);
    if (rc != SQLITE_ROW)
      return sql_fail(c, rc, "update", err);
  }
  if (op != OP_INSERT && !same_type) {
    sqlite3_stmt *retype = key_type_stmt(c, place, OP_RETYPE, node, err);
    if (retype == NULL)
      return err->code;
    if ((rc = run(c, retype, "update", err)) != 0)
      return rc;
  }
  out->status = 0;
  out->version = version;
  out->created_at = created_at;
  return 0;
}

static int insert(durable__conn_t *c, durable__place_t place,
                  const durable_node_t *node, durable__outcome_t *out,
                  durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  if (rc == 0)
    rc = write_node(c, place, OP_INSERT, node, version, out, err);
  if (rc == 0 && out->status != 0)
    c->version--; /* unused: give it back */
  return rc;
}

/* An insert, or when the row is there an update under the same version
 * that keeps its created_at.  No race: the write lock is ours. */
static int upsert(durable__conn_t *c, durable__place_t place,
                  const durable_node_t *node, durable__outcome_t *out,
                  durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  if (rc == 0)
    rc = write_node(c, place, OP_INSERT, node, version, out, err);
  out->inserted = rc == 0 && out->status == 0;
  if (rc != 0 || out->inserted)
    return rc;
  return write_node(c, place, OP_REFRESH, node, version, out, err);
}

static int update(durable__conn_t *c, durable__place_t place,
                  const durable_node_t *node, durable__outcome_t *out,
                  durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  return rc ? rc : write_node(c, place, OP_UPDATE, node, version, out, err);
}

static int replace(durable__conn_t *c, durable__place_t place,
                   const durable_node_t *node, int64_t expected,
                   durable__outcome_t *out, durable_error_t *err) {
  int64_t version;
  int rc = take_version(c, &version, err);
  if (rc != 0)
    return rc;
  durable_node_t on = *node;
  on.created_at = expected; /* ?8: see OP_REPLACE */
  rc = write_node(c, place, OP_REPLACE, &on, version, out, err);
  if (rc != 0 || out->status == 0)
    return rc;
  c->version--; /* unused: give it back */
  /* refused: at another version, or absent? */
  durable_node_t *cur = NULL;
  rc = get(c, place, node->ns, node->id, 0, &cur, err);
  out->status = rc == 0 ? DURABLE_ECONFLICT : DURABLE_ENOTFOUND;
  durable_node_free(cur);
  if (rc == DURABLE_ENOTFOUND) {
    memset(err, 0, sizeof *err);
    rc = 0;
  }
  return rc;
}

static int remove_(durable__conn_t *c, durable__place_t place, const char *ns,
                   const char *id, durable__outcome_t *out,
                   durable_error_t *err) {
  sqlite3_stmt *st = table_stmt(c, place, OP_REMOVE, err);
  if (st == NULL)
    return err->code;
  bind_text(st, 1, ns);
  bind_text(st, 2, id);
  int rc = run(c, st, "remove", err);
  if (rc != 0)
    return rc;
  out->status = sqlite3_changes(c->db) == 0 ? DURABLE_ENOTFOUND : 0;
  return 0;
}

static int flush(durable__conn_t *c, durable_error_t *err) {
  (void)c;
  (void)err;
  return 0; /* every statement ran when it was called */
}

/* The transaction's commit id, logged beside each namespace it changed
 * with its last version: a watch in another process reads "namespaces
 * logged after my last id", the next transaction counts on from the
 * version.
 * `instance` is not needed: the store knows its own commit ids
 * (durable__store_commits_all_own).  Every LOG_PRUNE commits the log loses
 * what is older than LOG_KEEP commits. */
static int changed(durable__conn_t *c, const durable__strv_t *namespaces,
                   const char *instance, int64_t *commit_id,
                   durable_error_t *err) {
  if (c->bell_key == 0 && instance != NULL)
    durable__instance_key(instance, &c->bell_key); /* for ring */
  *commit_id = 0;
  if (namespaces == NULL || namespaces->count == 0)
    return 0;
  /* a transaction of removals only has taken no id yet */
  int rc = take_commit_id(c, err);
  if (rc != 0)
    return rc;
  int64_t id = c->commit_id;
  sqlite3_stmt *st = misc_stmt(c, S_LOG, err);
  if (st == NULL)
    return err->code;
  for (size_t i = 0; i < namespaces->count; i++) {
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, namespaces->items[i]);
    sqlite3_bind_int64(st, 3, c->version);
    rc = run(c, st, "log change", err);
    if (rc != 0)
      return rc;
  }
  if (id % LOG_PRUNE == 0 && id > LOG_KEEP) {
    st = misc_stmt(c, S_PRUNE, err);
    if (st == NULL)
      return err->code;
    sqlite3_bind_int64(st, 1, id - LOG_KEEP);
    rc = run(c, st, "prune the commit log", err);
    if (rc != 0)
      return rc;
  }
  *commit_id = id;
  return 0;
}

/* ---- liveness -----------------------------------------------------------
 *
 * Each open store (its watch source) holds an OFD write lock on one byte of
 * FILE-live, at the offset of its liveness key; the kernel lets it go when
 * the store closes or the process dies, however it dies.  Another process
 * asks with F_OFD_GETLK, which takes nothing.  OFD locks, unlike classic
 * POSIX record locks, belong to the open file, not to the process: two
 * stores opened on one file in one process see each other's lock, and
 * closing one file does not drop a lock held through another.
 */
#ifndef F_OFD_SETLK
/* Classic record locks would not do: closing any descriptor of FILE-live
 * drops all of a process's locks on it, so asking would end our own. */
#error "liveness on SQLite needs open file description locks (Linux 3.15+)"
#endif

/* Beside the database file itself, whatever name it was opened by (a
 * symbolic link, a relative path): every process must find the same one. */
static void live_path(const char *file, char *out, size_t size) {
  char *real = realpath(file, NULL);
  snprintf(out, size, "%s-live", real ? real : file);
  free(real);
}

static int live_hold(const char *file, uint64_t key, int *fd_out,
                     durable_error_t *err) {
  char path[4096];
  live_path(file, path, sizeof path);
  /* never through a link (check_beside refused one already there) */
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
    errno = EINVAL;
  }
  struct flock fl = {.l_type = F_WRLCK,
                     .l_whence = SEEK_SET,
                     .l_start = (off_t)key,
                     .l_len = 1};
  if (fd < 0 || fcntl(fd, F_OFD_SETLK, &fl) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    return durable__error(err, DURABLE_EIO,
                          "SQLite '%s': cannot hold the liveness lock in "
                          "'%s': %s",
                          file, path, strerror(e));
  }
  *fd_out = fd;
  return 0;
}

static int alive(durable__conn_t *c, uint64_t key, int *out,
                 durable_error_t *err) {
  char path[4096];
  live_path(c->file, path, sizeof path);
  *out = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) /* no store ever held a lock here */
    return errno == ENOENT ? 0
                           : durable__error(err, DURABLE_EIO,
                                            "SQLite '%s': cannot read '%s': %s",
                                            c->file, path, strerror(errno));
  struct flock fl = {.l_type = F_RDLCK,
                     .l_whence = SEEK_SET,
                     .l_start = (off_t)key,
                     .l_len = 1};
  int rc = fcntl(fd, F_OFD_GETLK, &fl);
  int e = errno;
  close(fd);
  if (rc != 0)
    return durable__error(err, DURABLE_EIO,
                          "SQLite '%s': cannot look at the locks of '%s': %s",
                          c->file, path, strerror(e));
  *out = fl.l_type != F_UNLCK;
  return 0;
}

/* ---- grants ----------------------------------------------------------- */

static int grants_of(durable__conn_t *c, const char *principal,
                     durable__grants_t *out, durable_error_t *err) {
  sqlite3_stmt *st = misc_stmt(c, principal ? S_GRANTS_OF : S_GRANTS_ALL, err);
  if (st == NULL)
    return err->code;
  if (principal)
    bind_text(st, 1, principal);
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *who = (const char *)sqlite3_column_text(st, 0);
    const char *prefix = (const char *)sqlite3_column_text(st, 1);
    if (who == NULL || prefix == NULL ||
        durable__grants_push(out, who, prefix, sqlite3_column_int(st, 2)) !=
            0) {
      done_with(st);
      return durable__error(err, DURABLE_ENOMEM, "out of memory");
    }
  }
  done_with(st);
  return rc == SQLITE_DONE ? 0 : sql_fail(c, rc, "read grants", err);
}

static int grant(durable__conn_t *c, const char *principal, const char *prefix,
                 int modes, int add, durable_error_t *err) {
  int steps[2] = {add ? S_GRANT_ADD : S_GRANT_CLEAR, add ? -1 : S_GRANT_DROP};
  for (int i = 0; i < 2 && steps[i] >= 0; i++) {
    sqlite3_stmt *st = misc_stmt(c, steps[i], err);
    if (st == NULL)
      return err->code;
    bind_text(st, 1, principal);
    bind_text(st, 2, prefix);
    if (steps[i] != S_GRANT_DROP)
      sqlite3_bind_int(st, 3, modes);
    int rc = run(c, st, add ? "grant" : "revoke", err);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* ---- watching other processes ----------------------------------------- */

/*
 * SQLite tells no one of a commit, so every writer rings a doorbell after
 * its commit (ring, above) when another store is there to hear it: it
 * writes a byte to FILE-live.  Each watch has a uv_fs_event on FILE-live
 * (inotify; the watch made the file before, to hold its liveness lock in
 * it; when the file is removed or replaced by hand, the watch moves to the
 * new one if it is there at that moment, else only the timer is left) and
 * answers an event by checking, on libuv's thread pool, on the watch's own
 * connection:
 *
 *   writer (any process): COMMIT; pwrite FILE-live
 *   loop: bell_cb --.
 *   loop: timer_cb -+-> check --uv_queue_work--> pool: poll_work
 *                                                 PRAGMA data_version
 *                                                 (moved?) BEGIN; counter;
 *                                                 namespaces > last;
 *                                                 COMMIT  (one snapshot)
 *   loop: after_poll <-------------------------------'
 *         commits (last, current] all ours?  no -> changed_elsewhere(ns)...
 *         last = current; asked again meanwhile?  -> check
 *
 * One check runs at a time (in_flight): an event while one runs sets
 * `pending`, and after_poll starts one more check for any number of them,
 * since that check sees every commit made before it.  So a burst of events
 * is at most one check running and one waiting.  The -wal is not watched:
 * it is written before the commit can be seen (see ring).
 *
 * The timer stays as the fallback, every WATCH_FALLBACK_MS; when the
 * uv_fs_event cannot start, it polls every WATCH_PERIOD_MS instead, as it
 * did before the doorbell.
 *
 * data_version moves only for commits of *other* connections, which includes
 * this process's writer (whose rings we hear too); the counter is read only
 * when it moved, and durable__store_commits_all_own() tells our own commits
 * apart, so a process alone on its file never re-reads any namespace.
 */
struct durable__watch_src_s {
  durable_store_t *store;
  durable__conn_t *conn;
  int live_fd; /* holds this store's liveness lock (see below) */
  uv_timer_t timer;
  uv_fs_event_t bell; /* the doorbell; initialised when bell_path is set */
  char *bell_path;    /* FILE-live, watched */
  int handles;        /* initialised, not yet closed: freed at 0 */
  uv_work_t work;
  int in_flight; /* a poll is queued or running: it owns conn */
  int pending;   /* asked for a check while one ran: one more after it */
  int stopping;
  int64_t last;         /* the commit id seen; written on the loop only */
  int64_t data_version; /* touched by the poll only (after start) */
  /* the poll's answer, read by after_poll */
  int poll_rc;
  int64_t current;
  int gap; /* the log was pruned past `last` */
  durable__strv_t namespaces;
  durable_error_t err;
  void (*done)(void *data);
  void *done_data;
};

static int read_data_version(durable__conn_t *c, int64_t *out,
                             durable_error_t *err) {
  sqlite3_stmt *st = misc_stmt(c, S_DATA_VERSION, err);
  if (st == NULL)
    return err->code;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *out = sqlite3_column_int64(st, 0);
  done_with(st);
  return rc == SQLITE_ROW ? 0 : sql_fail(c, rc, "read data_version", err);
}

/* The newest commit id and the namespaces changed after `last`, from one
 * snapshot so that the two agree.  *gap = 1 when the log no longer reaches
 * back to `last` (pruned): some namespaces may be missing. */
static int read_changes(durable__conn_t *c, int64_t last, int64_t *current,
                        durable__strv_t *namespaces, int *gap,
                        durable_error_t *err) {
  sqlite3_stmt *b = misc_stmt(c, S_READ_BEGIN, err);
  sqlite3_stmt *q = misc_stmt(c, S_CHANGED_SINCE, err);
  if (b == NULL || q == NULL)
    return err->code;
  int rc = run(c, b, "begin read", err);
  if (rc != 0)
    return rc;
  int64_t oldest = 0;
  rc = read_counter(c, current, &oldest, err);
  *gap = rc == 0 && *current > last && oldest > last + 1;
  if (rc == 0 && *current > last && !*gap) {
    sqlite3_bind_int64(q, 1, last);
    int step;
    while ((step = sqlite3_step(q)) == SQLITE_ROW) {
      const char *ns = (const char *)sqlite3_column_text(q, 0);
      if (ns == NULL || durable__strv_push(namespaces, ns) != 0) {
        step = SQLITE_NOMEM;
        break;
      }
    }
    done_with(q);
    if (step != SQLITE_DONE)
      rc = step == SQLITE_NOMEM
               ? durable__error(err, DURABLE_ENOMEM, "out of memory")
               : sql_fail(c, step, "read changes", err);
  }
  rollback(c); /* a read: nothing to keep */
  return rc;
}

static void reset_namespaces(durable__watch_src_t *w) {
  durable__strv_free(&w->namespaces);
  memset(&w->namespaces, 0, sizeof(w->namespaces));
}

/* Thread pool.  Touches only conn, data_version and the answer fields; the
 * loop thread leaves them alone while in_flight is set. */
static void poll_work(uv_work_t *req) {
  durable__watch_src_t *w = req->data;
  int64_t version = 0;
  w->current = w->last;
  w->gap = 0;
  w->poll_rc = read_data_version(w->conn, &version, &w->err);
  if (w->poll_rc != 0 || version == w->data_version)
    return;
  w->poll_rc = read_changes(w->conn, w->last, &w->current, &w->namespaces,
                            &w->gap, &w->err);
  /* Remember the version only once its changes are read: a failed read is
   * retried on the next tick instead of being skipped. */
  if (w->poll_rc == 0)
    w->data_version = version;
}

/* Once for each handle: `w` goes with the last of them. */
static void watch_closed(uv_handle_t *handle) {
  durable__watch_src_t *w = handle->data;
  if (--w->handles > 0)
    return;
  close(w->live_fd); /* lets the liveness lock go */
  close_conn(w->conn);
  reset_namespaces(w);
  free(w->bell_path);
  if (w->done != NULL)
    w->done(w->done_data);
  free(w);
}

static void close_handles(durable__watch_src_t *w) {
  uv_close((uv_handle_t *)&w->timer, watch_closed);
  if (w->bell_path != NULL)
    uv_close((uv_handle_t *)&w->bell, watch_closed);
}

static void check(durable__watch_src_t *w);

static void after_poll(uv_work_t *req, int status) {
  durable__watch_src_t *w = req->data;
  w->in_flight = 0;
  if (w->stopping) {
    reset_namespaces(w);
    close_handles(w);
    return;
  }
  /* A failed poll did not move `last`: the next one covers the same range,
   * so nothing is missed and nothing needs reporting here. */
  if (status == 0 && w->poll_rc == 0 && w->current != w->last) {
    if (w->current < w->last || w->gap) {
      /* the ids went back (the file was replaced under us), or the log lost
       * what we had not read yet: anything may have changed */
      durable__store_commits_all_own(w->store, w->last, w->current);
      durable__store_changed_elsewhere(w->store, NULL);
    } else if (!durable__store_commits_all_own(w->store, w->last, w->current)) {
      /* Every namespace changed in the range, ours included: telling a
       * watch about its own commit again is a harmless duplicate. */
      for (size_t i = 0; i < w->namespaces.count && !w->stopping; i++)
        durable__store_changed_elsewhere(w->store, w->namespaces.items[i]);
    }
    w->last = w->current;
  }
  /* If a callback above stopped the watch, watch_stop already closed the
   * handles (in_flight was 0); `w` lives until watch_closed runs, and
   * check does nothing. */
  reset_namespaces(w);
  if (w->pending)
    check(w);
}

/* Check now, or once the check running now is done. */
static void check(durable__watch_src_t *w) {
  if (w->stopping)
    return;
  if (w->in_flight) {
    w->pending = 1;
    return;
  }
  w->pending = 0;
  w->in_flight = 1;
  w->work.data = w;
  if (uv_queue_work(w->timer.loop, &w->work, poll_work, after_poll) != 0)
    w->in_flight = 0; /* the next ring or tick tries again */
}

static void timer_cb(uv_timer_t *timer) {
  check(timer->data);
}

static void bell_cb(uv_fs_event_t *handle, const char *filename, int events,
                    int status) {
  durable__watch_src_t *w = handle->data;
  (void)filename;
  if (status == 0 && (events & UV_RENAME)) {
    /* FILE-live was removed or replaced (by hand): listen to the new one;
     * until it is there, the timer catches commits */
    uv_fs_event_stop(&w->bell);
    uv_fs_event_start(&w->bell, bell_cb, w->bell_path, 0);
  }
  check(w);
}

/* The doorbell: a uv_fs_event on FILE-live itself, not its folder, so the
 * writes of -wal and of unrelated files there wake nobody.  0 when it
 * listens; otherwise the timer must poll.  The handle, once initialised, is
 * the watch's to close either way. */
static int bell_start(durable__watch_src_t *w, uv_loop_t *loop) {
  char path[4096];
  live_path(w->conn->file, path, sizeof path);
  w->bell_path = strdup(path);
  if (w->bell_path == NULL)
    return UV_ENOMEM;
  int rc = uv_fs_event_init(loop, &w->bell);
  if (rc != 0) {
    free(w->bell_path);
    w->bell_path = NULL;
    return rc;
  }
  w->bell.data = w;
  w->handles++;
  return uv_fs_event_start(&w->bell, bell_cb, path, 0);
}

static int watch_start(durable_store_t *store, const char *url,
                       const char *instance, durable__watch_src_t **out,
                       durable_error_t *err) {
  *out = NULL;
  /* A private in-memory database has no other process to hear. */
  if (single_connection(url))
    return 0;

  uint64_t key;
  if (durable__instance_key(instance, &key) < 0)
    return durable__error(err, DURABLE_EINVAL, "bad instance '%s'", instance);
  durable__watch_src_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  w->store = store;
  w->live_fd = -1;
  int rc = open_conn(url, 0, &w->conn, err);
  if (rc == 0)
    rc = live_hold(w->conn->file, key, &w->live_fd, err);
  /* The starting point is read here, on the loop thread, rather than in the
   * first poll: a commit made between watch_start and that poll would
   * otherwise count as already seen.  It is two reads of a WAL file, which
   * never wait for a writer. */
  if (rc == 0)
    rc = read_data_version(w->conn, &w->data_version, err);
  int64_t oldest;
  if (rc == 0)
    rc = read_counter(w->conn, &w->last, &oldest, err);
  if (rc != 0) {
    if (w->live_fd >= 0)
      close(w->live_fd);
    close_conn(w->conn);
    free(w);
    return rc;
  }
  uv_loop_t *loop = durable__store_loop(store);
  rc = uv_timer_init(loop, &w->timer);
  if (rc == 0) {
    w->timer.data = w;
    w->handles = 1;
    /* No doorbell (out of inotify watches, say): poll as often as before
     * it, quietly -- nothing is wrong, only slower. */
    uint64_t period =
        bell_start(w, loop) == 0 ? WATCH_FALLBACK_MS : WATCH_PERIOD_MS;
    rc = uv_timer_start(&w->timer, timer_cb, period, period);
    if (rc != 0) {
      /* the handles are initialised: they must be closed, not just freed */
      w->done = NULL;
      close_handles(w);
    }
  } else {
    close(w->live_fd);
    close_conn(w->conn);
    free(w);
  }
  if (rc != 0)
    return durable__error(err, DURABLE_EIO, "cannot start the watch timer: %s",
                          uv_strerror(rc));
  *out = w;
  return 0;
}

static void watch_stop(durable__watch_src_t *w, void (*done)(void *data),
                       void *data) {
  if (w == NULL) { /* nothing was started (an in-memory store) */
    if (done != NULL)
      done(data);
    return;
  }
  if (w->stopping)
    return;
  w->stopping = 1;
  w->done = done;
  w->done_data = data;
  uv_timer_stop(&w->timer);
  if (w->bell_path != NULL)
    uv_fs_event_stop(&w->bell);
  if (w->in_flight) {
    /* after_poll runs either way (UV_ECANCELED if it had not started) and
     * closes the handles; the connection is not closed under a running
     * poll */
    uv_cancel((uv_req_t *)&w->work);
    return;
  }
  close_handles(w);
}

const durable__backend_t durable__sqlite_backend = {
    .name = "sqlite",
    .connect = connect_,
    .disconnect = disconnect,
    .single_connection = single_connection,
    .begin = begin,
    .commit = commit,
    .rollback = rollback,
    .get = get,
    .list = list,
    .max_id = max_id,
    .partitions = partitions,
    .list_type = list_type,
    .insert = insert,
    .upsert = upsert,
    .update = update,
    .replace = replace,
    .remove = remove_,
    .flush = flush,
    .changed = changed,
    .grants_of = grants_of,
    .grant = grant,
    .alive = alive,
    .watch_start = watch_start,
    .watch_stop = watch_stop,
};

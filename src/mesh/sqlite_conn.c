/*
 * sqlite_conn.c: a connection to a SQLite store file, for the backend
 * (sqlite_store.c) and its watch (sqlite_watch.c).
 *
 * A connection is one sqlite3 handle opened SQLITE_OPEN_NOMUTEX: the engine
 * gives each worker thread its own, and the watch source keeps one more, so
 * no handle is ever used by two threads at once and SQLite's per-connection
 * mutex would only cost time.  Opening one is most of this file, because a
 * store URL names a file that may be anything: it is taken only when it is
 * durable's own or empty (never somebody's database, never through a
 * planted symbolic link), in WAL mode, writable, with the schema made or
 * migrated in one transaction that a second process opening the same file
 * waits for.  Every statement is prepared once per connection and kept; the
 * ones that are not per node table are here (misc_sql), for both files
 * above.
 *
 * A statement waits for another process's write lock up to BUSY_TIMEOUT_MS,
 * so that two processes writing one file both succeed; longer is reported
 * as "locked".  It waits in short naps (busy_wait), not in SQLite's
 * millisecond sleeps.
 */
#include "durable_text.h"
#include "schema.h"
#include "sqlite.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Long enough for another process's group commit to finish (they are
 * milliseconds), short enough that a wedged writer is reported. */
#define BUSY_TIMEOUT_MS 10000
/* busy_wait: naps of BUSY_NAP_US for the first BUSY_QUICK_US of a wait,
 * then sleeps of BUSY_SLEEP_US. */
#define BUSY_NAP_US 25
#define BUSY_QUICK_US 500
#define BUSY_SLEEP_US 1000
#define MEMORY_NAME ":memory:"

/* The SQL of the statements that are not per table (sqlite.h); the node
 * tables' are op_sql in sqlite_store.c. */
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
     * (up to LOG_KEEP commits, sqlite_watch.c), and a watch runs this after
     * every commit of another connection */
    [S_COUNTER] =
        "SELECT coalesce((SELECT max(commit_id) FROM durable_commits), 0), "
        "coalesce((SELECT min(commit_id) FROM durable_commits), 0)",
    /* a range of the log's key */
    [S_CHANGED_SINCE] = "SELECT DISTINCT namespace FROM durable_commits "
                        "WHERE commit_id > ?1",
};

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
int durable__sqlite_single_connection(const char *url) {
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
    durable__one_line(err->message);
  return code;
}

/* A failed statement `rc` during `what`, as a DURABLE_E* code. */
int durable__sqlite_fail(durable__conn_t *c, int rc, const char *what,
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

/* ---- waiting for a lock ------------------------------------------------ */

/* SQLite's busy handler: another connection holds the lock `c` needs --
 * mostly the write lock, held by another process (or this one's
 * checkpointer) through a commit, its fsync included: a fraction of a
 * millisecond.  sqlite3_busy_timeout would sleep 1, 2, 5, 10, 15... ms
 * between tries, so a writer that met a commit under way slept on for
 * milliseconds after its end, and two processes at 1,000 items/s on one
 * file waited 3-20 ms an item at the median.  Here the first try yields,
 * the next ones nap BUSY_NAP_US while the wait is young, and a wait past
 * BUSY_QUICK_US (a disk slower than a commit should take) sleeps
 * BUSY_SLEEP_US at a time, SQLite's first step, rather than wake so
 * often for long.  After BUSY_TIMEOUT_MS in all the statement fails
 * SQLITE_BUSY ("locked", durable__sqlite_fail). */
static int busy_wait(void *arg, int count) {
  durable__conn_t *c = arg;
  uint64_t now = uv_hrtime();
  if (count == 0) {
    c->busy_since = now;
    sched_yield();
    return 1;
  }
  uint64_t waited_us = (now - c->busy_since) / 1000u;
  if (waited_us >= (uint64_t)BUSY_TIMEOUT_MS * 1000u)
    return 0;
  usleep(waited_us < BUSY_QUICK_US ? BUSY_NAP_US : BUSY_SLEEP_US);
  return 1;
}

/* ---- statements ------------------------------------------------------- */

int durable__sqlite_prepare(durable__conn_t *c, const char *sql,
                            sqlite3_stmt **out, durable_error_t *err) {
  int rc =
      sqlite3_prepare_v3(c->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);
  if (rc != SQLITE_OK) {
    *out = NULL;
    return durable__sqlite_fail(c, rc, "prepare", err);
  }
  return 0;
}

sqlite3_stmt *durable__sqlite_stmt(durable__conn_t *c, int which,
                                   durable_error_t *err) {
  if (c->stmts[which] == NULL &&
      durable__sqlite_prepare(c, misc_sql[which], &c->stmts[which], err) != 0)
    return NULL;
  return c->stmts[which];
}

/* Step a statement that returns no row to the end. */
int durable__sqlite_run(durable__conn_t *c, sqlite3_stmt *st, const char *what,
                        durable_error_t *err) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
  }
  done_with(st);
  return rc == SQLITE_DONE ? 0 : durable__sqlite_fail(c, rc, what, err);
}

void durable__sqlite_rollback(durable__conn_t *c) {
  /* SQLite may already have rolled back by itself (e.g. after SQLITE_FULL);
   * a ROLLBACK then would only fail. */
  if (sqlite3_get_autocommit(c->db))
    return;
  durable_error_t ignored;
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_ROLLBACK, &ignored);
  if (st == NULL || durable__sqlite_run(c, st, "rollback", &ignored) != 0)
    sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

/* ---- connections ------------------------------------------------------ */

void durable__sqlite_close(durable__conn_t *c) {
  if (c == NULL)
    return;
  if (c->table_stmts != NULL)
    for (size_t i = 0; i < c->ntables * OP_COUNT; i++)
      sqlite3_finalize(c->table_stmts[i]);
  for (int i = 0; i < S_COUNT; i++)
    sqlite3_finalize(c->stmts[i]);
  durable__sqlite_checkpoints_stop(c);
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

/* FILE-live, the liveness locks and the doorbell (sqlite_watch.c): beside
 * the database file itself, whatever name it was opened by (a symbolic
 * link, a relative path), since every process must find the same one. */
void durable__sqlite_live_path(const char *file, char *out, size_t size) {
  char *real = realpath(file, NULL);
  snprintf(out, size, "%s-live", real ? real : file);
  free(real);
}

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
  durable__sqlite_live_path(file, path, sizeof path);
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
 * by its node table and marked now.  read_marks reads those: the mark, the
 * tables and indexes that are not SQLite's own, and whether the node table
 * is one.  check_owner: *adopt to mark it in the bootstrap. */
static int read_marks(durable__conn_t *c, int64_t *id, int64_t *tables,
                      int64_t *nodes, durable_error_t *err) {
  int rc = int_of(c->db, "PRAGMA application_id", id);
  if (rc == SQLITE_OK)
    rc = int_of(c->db,
                "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE "
                "'sqlite\\_%' ESCAPE '\\'",
                tables);
  if (rc == SQLITE_OK)
    rc = int_of(c->db,
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                "AND name = '" DURABLE__PRIMARY_TABLE "'",
                nodes);
  return rc == SQLITE_OK ? 0 : open_fail(c, rc, "read its header", err);
}

static int check_owner(durable__conn_t *c, int *adopt, durable_error_t *err) {
  int64_t id = 0, tables = 0, nodes = 0;
  int rc = read_marks(c, &id, &tables, &nodes, err);
  if (rc < 0)
    return rc;
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

/* How a store opened for reading opens its file: read-write even to read,
 * since a reader of a WAL file writes its index (-shm), but never creating
 * the file.  A file this user may not write is read only where its -wal and
 * -shm are there already: a reader that made them would leave them to this
 * user, and the store's owner could write it no more. */
static int read_flags(const char *file, int *flags, durable_error_t *err) {
  char side[4096];
  if (access(file, F_OK) != 0)
    return durable__error(err, DURABLE_ENOTFOUND, "no SQLite file at '%s'",
                          file);
  if (access(file, W_OK) == 0) {
    *flags = SQLITE_OPEN_READWRITE;
    return 0;
  }
  const char *suffixes[] = {"-wal", "-shm"};
  for (int i = 0; i < 2; i++) {
    snprintf(side, sizeof side, "%s%s", file, suffixes[i]);
    if (access(side, F_OK) != 0)
      return durable__error(
          err, DURABLE_EACCES,
          "SQLite file '%s' is not writable by this user and has no %s: "
          "reading it would leave that file to this user, and the store's "
          "owner could not write the store any more; read it as its owner, "
          "or while a process of the owner has it open",
          file, suffixes[i]);
  }
  *flags = SQLITE_OPEN_READONLY;
  return 0;
}

/* A store opened for reading finds a durable file there: nothing is
 * made for it. */
static int check_durable(durable__conn_t *c, durable_error_t *err) {
  int64_t id = 0, tables = 0, nodes = 0;
  int rc = read_marks(c, &id, &tables, &nodes, err);
  if (rc < 0)
    return rc;
  /* a file of before the mark has the node table */
  if (id != APPLICATION_ID && (id != 0 || nodes == 0))
    return durable__error(err, DURABLE_ENOTFOUND,
                          "SQLite file '%s' is no durable store (nothing "
                          "written there yet)",
                          c->file);
  return 0;
}

/* Open a connection (`how`: sqlite.h).  Bootstrap sets the journal and
 * creates the schema: done by every engine connection of a store that
 * writes (so a read-only file is refused at connect, by that write), not by
 * the watch's, which only reads and must not queue behind a writer on the
 * loop thread. */
int durable__sqlite_open(const char *url, durable__sqlite_open_t how,
                         durable__conn_t **out, durable_error_t *err) {
  int bootstrap = how == DURABLE__SQLITE_BOOTSTRAP;
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
    durable__sqlite_close(c);
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  }

  if (!p.memory && ((rc = check_file(c->file, err)) < 0 ||
                    (rc = check_beside(c->file, err)) < 0)) {
    durable__sqlite_close(c);
    return rc;
  }
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (how == DURABLE__SQLITE_READ && !p.memory &&
      (rc = read_flags(c->file, &flags, err)) < 0) {
    durable__sqlite_close(c);
    return rc;
  }
  rc = sqlite3_open_v2(c->file, &c->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    rc = open_fail(c, rc, "open", err);
    durable__sqlite_close(c);
    return rc;
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_handler(c->db, busy_wait, c);
  /* Statement journals in memory, in small pieces.  Every write statement
   * inside a group's transaction keeps one (WAL has no rollback journal to
   * undo a statement with); by default it is a 64 KiB buffer malloc'd and
   * freed per statement, which on a worker thread made glibc trim its arena
   * and fault the pages back each time -- a third of the writer's CPU while
   * a consumer drained (madvise and its TLB shoot-downs, in perf).  No
   * statement here journals more than a batch's pages; a failure here costs
   * only that speed. */
  sqlite3_exec(c->db, "PRAGMA temp_store=MEMORY", NULL, NULL, NULL);

  if (how == DURABLE__SQLITE_READ) {
    if ((rc = check_durable(c, err)) < 0) {
      durable__sqlite_close(c);
      return rc;
    }
    *out = c;
    return 0;
  }

  /* READWRITE falls back to read-only without a word when the file is not
   * writable; refuse that here rather than at the first write. */
  if (sqlite3_db_readonly(c->db, "main") == 1) {
    durable__error(err, DURABLE_EUNAVAIL,
                   "cannot open SQLite file '%s' for writing: the file is "
                   "read-only",
                   c->file);
    durable__sqlite_close(c);
    return DURABLE_EUNAVAIL;
  }

  /* Whose file it is, before anything writes to it (the WAL switch writes
   * its header): durable's own, an empty one, or refused. */
  int adopt = 0;
  if (bootstrap && (rc = check_owner(c, &adopt, err)) < 0) {
    durable__sqlite_close(c);
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
        durable__sqlite_close(c);
        return DURABLE_EUNAVAIL;
      }
    }
    rc = sqlite3_exec(c->db,
                      p.relaxed ? "PRAGMA synchronous=NORMAL"
                                : "PRAGMA synchronous=FULL",
                      NULL, NULL, NULL);
    if (rc != SQLITE_OK)
      goto fail_sync;
    if (!p.memory)
      durable__sqlite_checkpoints_apart(c);

    char *script = durable__schema_script(DURABLE__SQLITE);
    if (script == NULL) {
      durable__sqlite_close(c);
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
      durable__sqlite_close(c);
      return rc;
    }
  }
  *out = c;
  return 0;

fail_journal:
  rc = open_fail(c, rc, "set WAL journal", err);
  durable__sqlite_close(c);
  return rc;
fail_sync:
  rc = open_fail(c, rc, "set synchronous", err);
  durable__sqlite_close(c);
  return rc;
}

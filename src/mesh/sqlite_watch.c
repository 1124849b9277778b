/*
 * sqlite_watch.c: how a SQLite store hears of other processes' commits to
 * its file, and knows whether another store of it is still open.
 *
 * SQLite tells no one of a commit.  So every write transaction takes a
 * commit id (one more than the greatest so far) and logs, per namespace it
 * changed, a row (commit id, namespace) in durable_commits: the commit log,
 * also where versions are counted from (sqlite_store.c).  After COMMIT the
 * writer rings a doorbell -- when another store holds its liveness lock in
 * FILE-live, so a lone process pays nothing -- a one-byte write to
 * FILE-live, which the watches of every process hear through inotify
 * (uv_fs_event on FILE-live).  A watch then checks PRAGMA data_version
 * (which moves only when another connection committed), and only when it
 * moved reads which namespaces were logged after the commit id it last saw.
 * A slow timer checks too, for a missed ring (a fast one where inotify is
 * not to be had).  The log keeps the last LOG_KEEP commits; a watch that
 * fell further behind re-syncs everything.
 *
 * The liveness locks are in FILE-live too: each open store holds one byte
 * of it, which any process can ask about (durable__store_alive).
 */
#include "sqlite.h"
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
/* The log keeps the last LOG_KEEP commits, pruned every LOG_PRUNE. */
#define LOG_KEEP 16384
#define LOG_PRUNE 256

/* ---- the commit log --------------------------------------------------- */

/* The open transaction's commit id and the last version so far, read at
 * their first use: one more than the newest in the log, and the version it
 * wrote last.  The write lock (BEGIN IMMEDIATE) keeps them ours. */
int durable__sqlite_take_commit_id(durable__conn_t *c, durable_error_t *err) {
  if (c->commit_id != 0)
    return 0;
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_LAST_COMMIT, err);
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
    return durable__sqlite_fail(c, rc, "read the commit log", err);
  }
  return 0;
}

/* The transaction's commit id, logged beside each namespace it changed
 * with its last version: a watch in another process reads "namespaces
 * logged after my last id", the next transaction counts on from the
 * version.
 * `instance` is not needed: the store knows its own commit ids
 * (durable__store_commits_all_own).  Every LOG_PRUNE commits the log loses
 * what is older than LOG_KEEP commits. */
int durable__sqlite_changed(durable__conn_t *c,
                            const durable__strv_t *namespaces,
                            const char *instance, int64_t *commit_id,
                            durable_error_t *err) {
  if (c->bell_key == 0 && instance != NULL) /* for durable__sqlite_ring */
    durable__instance_key(instance, &c->bell_key);
  *commit_id = 0;
  if (namespaces == NULL || namespaces->count == 0)
    return 0;
  /* a transaction of removals only has taken no id yet */
  int rc = durable__sqlite_take_commit_id(c, err);
  if (rc != 0)
    return rc;
  int64_t id = c->commit_id;
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_LOG, err);
  if (st == NULL)
    return err->code;
  for (size_t i = 0; i < namespaces->count; i++) {
    sqlite3_bind_int64(st, 1, id);
    bind_text(st, 2, namespaces->items[i]);
    sqlite3_bind_int64(st, 3, c->version);
    rc = durable__sqlite_run(c, st, "log change", err);
    if (rc != 0)
      return rc;
  }
  if (id % LOG_PRUNE == 0 && id > LOG_KEEP) {
    st = durable__sqlite_stmt(c, S_PRUNE, err);
    if (st == NULL)
      return err->code;
    sqlite3_bind_int64(st, 1, id - LOG_KEEP);
    rc = durable__sqlite_run(c, st, "prune the commit log", err);
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

static int live_hold(const char *file, uint64_t key, int *fd_out,
                     durable_error_t *err) {
  char path[4096];
  durable__sqlite_live_path(file, path, sizeof path);
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

int durable__sqlite_alive(durable__conn_t *c, uint64_t key, int *out,
                          durable_error_t *err) {
  char path[4096];
  durable__sqlite_live_path(c->file, path, sizeof path);
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

/* ---- the doorbell ----------------------------------------------------- */

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
void durable__sqlite_ring(durable__conn_t *c) {
  if (c->bell_fd == BELL_NONE)
    return;
  if (c->bell_fd == BELL_UNOPENED) {
    char path[4096];
    durable__sqlite_live_path(c->file, path, sizeof path);
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

/* ---- watching other processes ----------------------------------------- */

/*
 * SQLite tells no one of a commit, so every writer rings a doorbell after
 * its commit (durable__sqlite_ring, above) when another store is there to
 * hear it: it writes a byte to FILE-live.  Each watch has a uv_fs_event on
 * FILE-live (inotify; the watch made the file before, to hold its liveness
 * lock in it; when the file is removed or replaced by hand, the watch moves
 * to the new one if it is there at that moment, else only the timer is left)
 * and answers an event by checking, on libuv's thread pool, on the watch's
 * own connection:
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
 * it is written before the commit can be seen (see durable__sqlite_ring).
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
  int live_fd; /* holds this store's liveness lock (see "liveness") */
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
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_DATA_VERSION, err);
  if (st == NULL)
    return err->code;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    *out = sqlite3_column_int64(st, 0);
  done_with(st);
  return rc == SQLITE_ROW
             ? 0
             : durable__sqlite_fail(c, rc, "read data_version", err);
}

/* The newest commit id in the log and the oldest, outside any write. */
static int read_counter(durable__conn_t *c, int64_t *newest, int64_t *oldest,
                        durable_error_t *err) {
  sqlite3_stmt *st = durable__sqlite_stmt(c, S_COUNTER, err);
  if (st == NULL)
    return err->code;
  int rc = sqlite3_step(st);
  *newest = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  *oldest = rc == SQLITE_ROW ? sqlite3_column_int64(st, 1) : 0;
  done_with(st);
  return rc == SQLITE_ROW || rc == SQLITE_DONE
             ? 0
             : durable__sqlite_fail(c, rc, "read commit log", err);
}

/* The newest commit id and the namespaces changed after `last`, from one
 * snapshot so that the two agree.  *gap = 1 when the log no longer reaches
 * back to `last` (pruned): some namespaces may be missing. */
static int read_changes(durable__conn_t *c, int64_t last, int64_t *current,
                        durable__strv_t *namespaces, int *gap,
                        durable_error_t *err) {
  sqlite3_stmt *b = durable__sqlite_stmt(c, S_READ_BEGIN, err);
  sqlite3_stmt *q = durable__sqlite_stmt(c, S_CHANGED_SINCE, err);
  if (b == NULL || q == NULL)
    return err->code;
  int rc = durable__sqlite_run(c, b, "begin read", err);
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
               : durable__sqlite_fail(c, step, "read changes", err);
  }
  durable__sqlite_rollback(c); /* a read: nothing to keep */
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
  durable__sqlite_close(w->conn);
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
  durable__sqlite_live_path(w->conn->file, path, sizeof path);
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

int durable__sqlite_watch_start(durable_store_t *store, const char *url,
                                const char *instance,
                                durable__watch_src_t **out,
                                durable_error_t *err) {
  *out = NULL;
  /* A private in-memory database has no other process to hear. */
  if (durable__sqlite_single_connection(url))
    return 0;

  uint64_t key;
  if (durable__instance_key(instance, &key) < 0)
    return durable__error(err, DURABLE_EINVAL, "bad instance '%s'", instance);
  durable__watch_src_t *w = calloc(1, sizeof(*w));
  if (w == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  w->store = store;
  w->live_fd = -1;
  int rc = durable__sqlite_open(url, DURABLE__SQLITE_WATCH, &w->conn, err);
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
    durable__sqlite_close(w->conn);
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
    durable__sqlite_close(w->conn);
    free(w);
  }
  if (rc != 0)
    return durable__error(err, DURABLE_EIO, "cannot start the watch timer: %s",
                          uv_strerror(rc));
  *out = w;
  return 0;
}

void durable__sqlite_watch_stop(durable__watch_src_t *w,
                                void (*done)(void *data), void *data) {
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

/*
 * sqlite_checkpoint.c: the WAL checkpoints of a SQLite store, off the
 * writer's commit path.
 *
 * In WAL mode a commit appends its pages to FILE-wal; a checkpoint copies
 * them into the database file and syncs it, and the first writer after a
 * checkpoint that copied everything starts the WAL over from its
 * beginning.  SQLite's default (wal_autocheckpoint) runs the checkpoint
 * inside the COMMIT that left 1,000 pages in the WAL, on the connection
 * that committed: here the store's writer thread, which then commits
 * nothing else for the 5-15 ms the copy and the sync take.  At 1,000
 * items/s that was a stall every 150 ms, and most of the tail of the
 * publish -> handler latency.
 *
 * So an engine connection hands its checkpoints to a thread of its own
 * with a connection of its own, started at the first need and niced (on
 * two cores its copy of megabytes otherwise delayed the threads that
 * answer items): after a commit that leaves CKPT_FRAMES or more in the
 * WAL, the writer only asks (a flag and a signal under a mutex).  The
 * checkpointer runs PASSIVE checkpoints, which neither wait for a writer nor
 * hold one off.  One copies what was committed when it started; the WAL starts
 * over only once a checkpoint has copied all of it before the next writer
 * begins, which a steady writer may never allow.  So while it lags, the
 * checkpointer catches up with a few more passive rounds (each copies only what
 * came meanwhile), and once the WAL holds CKPT_RESTART_FRAMES it ends with a
 * RESTART checkpoint: that one waits for a gap between two commits and holds
 * the writer off while it copies the little left and syncs, so that the WAL
 * starts over.  When the checkpointer cannot be had (no thread, no
 * connection) or falls far behind (CKPT_INLINE_FRAMES), the writer
 * checkpoints as SQLite would: the WAL stays bounded either way.
 */
#include "sqlite.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Pages in the WAL after a commit that ask for a checkpoint: SQLite's own
 * default (4 MB of 4 KiB pages). */
#define CKPT_FRAMES 1000
/* Pages more in the WAL, when it did not start over since the last round,
 * that ask for the next. */
#define CKPT_STEP 1000
/* Passive passes after the first, while commits come meanwhile. */
#define CATCH_UP_ROUNDS 2
/* A RESTART checkpoint waits for the writer's commit and for readers of
 * older snapshots at most about this long (and then holds the writer off
 * while it copies): 20 naps of 100 µs. */
#define RESTART_NAPS 20
#define NAP_US 100
/* Pages in the WAL past which a round ends by restarting it. */
#define CKPT_RESTART_FRAMES 4000
/* Pages in the WAL past which the writer checkpoints itself. */
#define CKPT_INLINE_FRAMES 20000
/* The checkpointer's nice value (Linux sets it per thread). */
#define CKPT_NICE 10

struct durable__ckpt_s {
  uv_thread_t thread;
  uv_mutex_t lock;
  uv_cond_t wake;
  int asked;    /* under lock: a commit asked since the last round began */
  int stopping; /* under lock */
  int seen;     /* under lock: pages in the WAL after the last round */
  char *file;
  sqlite3 *db; /* the thread's own connection */
};

/* A checkpoint on the checkpointer's connection: how many frames the WAL
 * holds, and whether all of them are in the database file now. */
static int round_of(sqlite3 *db, int mode, int *frames) {
  int log = 0, copied = 0;
  int rc = sqlite3_wal_checkpoint_v2(db, "main", mode, &log, &copied);
  *frames = log;
  return rc == SQLITE_OK && log >= 0 && copied >= log;
}

/* One round: pages in the WAL after it.  A pass copies what was committed
 * when it began, so each pass after the first copies what came during the
 * one before, until one finds nothing new: the next writer can then start
 * the WAL over. */
static int checkpoint(sqlite3 *db) {
  int frames = 0, before = -1;
  for (int i = 0; i <= CATCH_UP_ROUNDS; i++) {
    if (!round_of(db, SQLITE_CHECKPOINT_PASSIVE, &frames))
      break;
    if (frames <= before) /* nothing new, or the WAL started over */
      return frames;
    before = frames;
  }
  if (frames >= CKPT_RESTART_FRAMES)
    round_of(db, SQLITE_CHECKPOINT_RESTART, &frames);
  return frames;
}

/* The checkpointer's busy handler: only a RESTART waits (a passive
 * checkpoint never does), and not for long, since meanwhile it may hold
 * the writer off; given up, it is tried again a round later. */
static int nap(void *arg, int count) {
  (void)arg;
  if (count >= RESTART_NAPS)
    return 0;
  if (count == 0)
    sched_yield(); /* first a yield: the writer's commit may be ending */
  else
    usleep(NAP_US);
  return 1;
}

static void ckpt_main(void *arg) {
  durable__ckpt_t *k = arg;
  /* the copy can wait: the threads that answer items come first */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), CKPT_NICE);
  uv_mutex_lock(&k->lock);
  for (;;) {
    while (!k->asked && !k->stopping)
      uv_cond_wait(&k->wake, &k->lock);
    if (k->stopping)
      break;
    k->asked = 0;
    uv_mutex_unlock(&k->lock);
    int frames = checkpoint(k->db);
    uv_mutex_lock(&k->lock);
    k->seen = frames;
  }
  uv_mutex_unlock(&k->lock);
}

/* The checkpointer of `c`, started now; NULL when it cannot be. */
static durable__ckpt_t *ckpt_start(durable__conn_t *c) {
  durable__ckpt_t *k = calloc(1, sizeof(*k));
  if (k == NULL)
    return NULL;
  k->file = strdup(c->file);
  if (k->file == NULL ||
      sqlite3_open_v2(k->file, &k->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                      NULL) != SQLITE_OK)
    goto fail;
  sqlite3_busy_handler(k->db, nap, NULL);
  /* a connection knows its file is in WAL mode once it has read it: until
   * then a checkpoint does nothing */
  if (sqlite3_exec(k->db, "SELECT count(*) FROM sqlite_master", NULL, NULL,
                   NULL) != SQLITE_OK)
    goto fail;
  if (uv_mutex_init(&k->lock) != 0)
    goto fail;
  if (uv_cond_init(&k->wake) != 0) {
    uv_mutex_destroy(&k->lock);
    goto fail;
  }
  if (uv_thread_create(&k->thread, ckpt_main, k) != 0) {
    uv_cond_destroy(&k->wake);
    uv_mutex_destroy(&k->lock);
    goto fail;
  }
  return k;
fail:
  sqlite3_close_v2(k->db);
  free(k->file);
  free(k);
  return NULL;
}

/* After each commit of `c` (sqlite3_wal_hook), on the committing thread. */
static int on_commit(void *arg, sqlite3 *db, const char *name, int frames) {
  durable__conn_t *c = arg;
  if (frames < CKPT_FRAMES)
    return SQLITE_OK;
  if (c->ckpt == NULL && !c->ckpt_none) {
    c->ckpt = ckpt_start(c);
    c->ckpt_none = c->ckpt == NULL;
  }
  if (c->ckpt == NULL || frames >= CKPT_INLINE_FRAMES) {
    /* SQLite's own way, as a last resort */
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return SQLITE_OK;
  }
  durable__ckpt_t *k = c->ckpt;
  uv_mutex_lock(&k->lock);
  /* the WAL started over since the last round, or grew by CKPT_STEP */
  if (!k->asked && (frames < k->seen || frames >= k->seen + CKPT_STEP)) {
    k->asked = 1;
    uv_cond_signal(&k->wake);
  }
  uv_mutex_unlock(&k->lock);
  return SQLITE_OK;
}

void durable__sqlite_checkpoints_apart(durable__conn_t *c) {
  /* replaces SQLite's automatic checkpoint, which is a WAL hook too */
  sqlite3_wal_hook(c->db, on_commit, c);
}

void durable__sqlite_checkpoints_stop(durable__conn_t *c) {
  durable__ckpt_t *k = c->ckpt;
  if (k == NULL)
    return;
  c->ckpt = NULL;
  uv_mutex_lock(&k->lock);
  k->stopping = 1;
  uv_cond_signal(&k->wake);
  uv_mutex_unlock(&k->lock);
  uv_thread_join(&k->thread);
  uv_cond_destroy(&k->wake);
  uv_mutex_destroy(&k->lock);
  sqlite3_close_v2(k->db);
  free(k->file);
  free(k);
}

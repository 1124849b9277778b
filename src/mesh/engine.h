/*
 * engine.h: the store's engine (engine.c) and the store itself, as the files
 * of the mesh layer that sit on it see them: the reads (read.c), the writes
 * (write.c), the grants (access.c), the change feed (feed.c) and the store's
 * open and close (store.c).  Nothing above the mesh layer includes it.
 */
#ifndef DURABLE_MESH_ENGINE_H
#define DURABLE_MESH_ENGINE_H

#include "job.h"
#include "store.h"

/* One worker thread and its blocking connection. */
struct durable__worker_s {
  durable_store_t *store;
  uv_thread_t thread;
  struct durable__queue jobs; /* its queue, oldest first, under store->lock */
  uv_cond_t wake;
  durable__conn_t *conn;
  uint64_t server_gen; /* the store's server_gen when `conn` was checked */
  int running;         /* under store->lock */
  int sleeping;        /* under store->lock: waiting on `wake` */
  int queued;          /* atomic: 1 once a job is queued, 0 when the queue is
                          taken; read without the lock while spinning */
  int started;
};

typedef struct durable__feed_s durable__feed_t; /* feed.c */

struct durable_store_s {
  /* what the engine runs on */
  uv_loop_t *loop;
  const durable__backend_t *be;
  char *url;
  char *name; /* the URL without its password: for messages */
  char instance[DURABLE_INSTANCE_MAX];
  int single; /* one connection: the writer also reads */
  /* durable_store_open_read: reads only -- no write, grant, liveness
   * question or watch, no feed; a server in recovery is welcome */
  int readonly;

  /* the engine's (engine.c) */
  uv_mutex_t lock; /* queues, done list, own commits, stopping */
  durable__worker_t writer, reader;
  int stopping;
  struct durable__queue done; /* finished jobs, oldest first */
  uv_async_t async;
  int async_open;
  void (*stopped)(durable_store_t *store); /* durable__engine_stop's */
  int64_t *own_commits; /* sorted commit ids this store made */
  size_t own_count, own_cap;

  /* the store's (store.c) and its feed's (feed.c) */
  durable__watch_src_t *src;
  durable__feed_t *feed;
  /* fencing (durable__store_live), durable__fence_clock() ns: the lock is
   * known held until live_until; somebody asked at live_asked */
  uint64_t live_until, live_asked;
  void (*on_live)(void *data);
  void *on_live_data;
  void (*close_cb)(void *data);
  void *close_data;
  int closing;

  /* the server every connection must be on (server.c), under `lock`:
   * `server_gen` counts the times it changed; `nudge` (atomic) asks the
   * loop to hurry the watch to a server a connection found */
  durable__server_t server;
  uint64_t server_gen;
  uint64_t server_back;    /* durable__fence_clock() of the last reconnect */
  uint64_t server_lost;    /* ... and of the last loss of the watch's session */
  unsigned watch_followed; /* the watch's connects so far */
  char *split; /* several servers take writes, named: no connection is used */
  char *stall; /* why a commit waits long (NULL: none), for the loop */
  int stall_news; /* atomic: stall changed since the loop last heard */
  void (*on_stall)(void *data, const char *why);
  void *on_stall_data;
  void (*on_split)(void *data, const char *servers);
  void *on_split_data;
  int nudge;
  void (*on_server)(void *data, const char *now, const char *was);
  void *on_server_data;
};

/* Start the worker threads and the way back to the loop (the writer's
 * connection is open already).  On failure the caller closes the store
 * (durable_store_close, which stops what started), or frees it when
 * async_open is still 0. */
int durable__engine_start(durable_store_t *store, durable_error_t *err);
/* Let the workers finish what is queued and end; `stopped` runs on the
 * loop once both are joined. */
void durable__engine_stop(durable_store_t *store,
                          void (*stopped)(durable_store_t *store));

/* For a job class's run(): the worker's connection, opened again if it was
 * dropped (0, or the backend's error); and dropping it after
 * DURABLE_EUNAVAIL. */
int durable__worker_connect(durable__worker_t *w, durable_error_t *err);
void durable__worker_disconnect(durable__worker_t *w);
/* Set a job's status and error from `err`. */
void durable__job_fail(durable__job_t *job, const durable_error_t *err);

/* A commit made by this store, for durable__store_commits_all_own. */
void durable__store_own_commit(durable_store_t *store, int64_t id);

#endif

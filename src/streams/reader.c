/*
 * reader.c: reading a stream in order: the pull reader under the consumer,
 * and durable_stream_read() over it.
 *
 * The reader keeps a cursor (`next`, the sequence it releases next) and a
 * small sorted reorder buffer.  It reads the backlog by range in pages --
 * for the stream's own items an index range scan from the cursor, so a
 * catch-up costs what follows the checkpoint, never the whole stream, and
 * memory stays one page -- and follows the live tail by reading again when
 * a change signal says the stream moved: a new item row (for the stream's
 * own items: a signal watch, which costs no read) or a change of the items
 * namespace (for a custom source).
 * A signal that comes while no item is asked for (the consumer's handler
 * runs, a plain reader is paused) reads ahead all the same while less than
 * a page waits, so that at most two pages are held and the next item is
 * there when it is asked for (a read that fails meanwhile is reported when
 * the items before it are handed over).
 * A signal may be lost or repeated: the cursor makes a repeat harmless (an
 * item below it is a duplicate and is dropped) and the next read after any
 * later signal finds what a lost one announced.  An item ahead of a missing
 * one waits for it, unless the stream node says it was trimmed (the reader
 * fails) or lost when the store went back (passed over); an item whose
 * payload cannot be read stops the reader there, never skipped.
 *
 *   store  --range read after cursor-->  buffer  --next in sequence-->  cb
 *   watch  --"the stream moved"-------->  read again
 *
 * A plain reader of a mesh with a read store (a standby) reads there, and
 * still hears the tail from the store's feed: a signal may then come before
 * the read store has replayed what it announced.  So such a reader keeps a
 * `target`, the highest sequence the store is known to hold -- a signal's
 * own, or for another process's append (a signal without one) the store's
 * highest item, asked there, as it is once when the reader starts -- and
 * while a read ends short of it, reads again after a wait that doubles
 * from POLL_MIN_MS to POLL_MAX_MS while it makes progress.  After
 * POLL_SLOW_AFTER_MS without progress (the standby's replay paused, or far
 * behind) it says so once and reads again every POLL_SLOW_MS until it has
 * caught up.  A read the read store fails for a while (a standby
 * restarting, a query cancelled by its replay: EUNAVAIL, ECANCELED,
 * ETIMEDOUT) is made again the same way, never the end of the reader.  The
 * cursor keeps order, gaps and duplicates as for any reader.
 *
 * What a reader holds is bounded: two pages, and PULL_BYTES, of its own;
 * and what the readers of a mesh hold together, by the mesh's read budget
 * (read_budget.c), which a read asks for its rows before it is sent.  A
 * reader refused rows waits in line and reads once items are handed over
 * elsewhere; one that has nothing it could hand over while an item is
 * asked of it reads a few rows anyway.
 *
 * Every read is made as the mesh's principal, so a reader of a stream whose
 * owner (or, for a custom source, whose items' owner) it may not read
 * stops at its first read with DURABLE_EACCES, having handed over nothing.
 */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Items per read.  The next page of the stream's own items is asked for as
 * soon as fewer than a page wait (read-ahead), so the store reads while the
 * loop hands items over; at most two pages are held. */
#define PAGE 1000
/* A reader reads ahead no further once it holds this many bytes. */
#define PULL_BYTES (4 << 20)
/* A custom source is re-listed from the start of its namespace on each
 * signal; items further ahead than this wait for a later round. */
#define AHEAD_MAX 4096
/* A read store's reader: how soon it reads again when the store held less
 * than announced, and for how long without progress (see above). */
#define POLL_MIN_MS 1
#define POLL_MAX_MS 100
#define POLL_SLOW_AFTER_MS 10000
#define POLL_SLOW_MS 1000

typedef struct {
  int64_t seq;
  durable_node_t *node;
  size_t bytes; /* what the node takes, as the read budget counts it */
} slot_t;

struct durable__pull_s {
  durable_mesh_t *mesh;
  char *ns, *key, *stream_path, *items_ns;
  durable_source_t source;
  int custom;
  int64_t next;      /* the sequence released next */
  int64_t read_upto; /* own items: the highest sequence read so far */
  char *round_after; /* custom source: the id cursor of the current round */
  slot_t *buf;       /* buf[first .. nbuf) wait, in sequence order */
  size_t first, nbuf, cap;
  int reading, dirty, more, started;
  /* own items: the highest sequence a signal announced, and whether a
   * signal said only "changed elsewhere" (no sequence) since the last read
   * began; a page that reached `heard` leaves nothing to read again for
   * this process's own commits (a batch of N items is N signals) */
  int64_t heard;
  int heard_blind;
  /* custom source: a round must start over from the first id when items
   * were skipped as too far ahead, or a signal came during the round (an
   * id sorting before the round's cursor may have been added) */
  int round_again;
  durable_watch_t *watch;
  durable__pull_cb cb;
  void *cb_data;
  int closed, failed;
  int busy; /* inside a turn that hands items over: a close waits for it */
  int delivering; /* inside deliver_all: a callback's next ask joins it */
  /* own items: the stream node read to see whether the item at the cursor
   * was trimmed (a gap there, or nothing at all at the first read), once
   * per cursor position */
  int checking;
  int64_t trim_checked;
  /* custom source: its functions (Lua's, maybe) run in a turn of the mesh,
   * never inside the store's callback; a signal's turn is owed */
  int signal_owed;
  /* a read that failed while no callback waited (a read ahead): reported
   * once the items read before it are handed over */
  int read_status;
  char read_message[sizeof(((durable_error_t *)0)->message)];
  /* where reads go: the mesh's read store for a plain reader, else its
   * store; `lagging` when that is not where the signals come from */
  durable_store_t *from;
  int lagging;
  int64_t target;        /* lagging: the highest sequence known stored */
  int asking, ask_again; /* lagging: the store's highest item, asked */
  uv_timer_t poll;       /* lagging: the next read when one fell short */
  int poll_open;
  uint32_t poll_ms;
  uint64_t progress_at; /* uv_now of the last read that brought an item */
  int slow_said;        /* the slow polling was logged (until progress) */
  /* the read budget's: rows asked by the read in flight, bytes held, the
   * place in line for rows, and the turn owed once there is room */
  size_t asked;
  int64_t held_bytes;
  durable__read_waiter_t waiter;
  int room_owed;
};

/* What a node takes, as the read budget counts it: its strings, about. */
static size_t node_bytes(const durable_node_t *n) {
  return sizeof(*n) + 64 + 2 * strlen(n->path) + strlen(n->ns) +
         (n->content ? strlen(n->content) : 0);
}

/* The slot buf[i] leaves the buffer (handed over, passed, or the reader
 * closes): its node freed, its place in the budget given back. */
static void slot_free(durable__pull_t *p, size_t i) {
  durable_node_free(p->buf[i].node);
  p->held_bytes -= (int64_t)p->buf[i].bytes;
  durable__read_budget_give(p->mesh, 1, (int64_t)p->buf[i].bytes);
}

static void pull_free(durable__pull_t *p) {
  durable__read_budget_unwait(p->mesh, &p->waiter);
  for (size_t i = p->first; i < p->nbuf; i++)
    slot_free(p, i);
  free(p->buf);
  free(p->ns);
  free(p->key);
  free(p->stream_path);
  free(p->items_ns);
  free(p->round_after);
  free(p);
}

/* Insert in sequence order (takes `copy`); a second copy of a sequence
 * replaces the first.  1 when it took a new place, 0 when it replaced. */
static int buffer_put(durable__pull_t *p, int64_t seq, durable_node_t *copy) {
  size_t bytes = node_bytes(copy);
  p->held_bytes += (int64_t)bytes;
  durable__read_budget_hold(p->mesh, (int64_t)bytes);
  durable__read_budget_take(p->mesh, 1, 1); /* it is held from now */
  if (p->first > 0) { /* what was handed over leaves, once per page */
    memmove(p->buf, p->buf + p->first, (p->nbuf - p->first) * sizeof(*p->buf));
    p->nbuf -= p->first;
    p->first = 0;
  }
  size_t lo = 0, hi = p->nbuf;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (p->buf[mid].seq < seq)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < p->nbuf && p->buf[lo].seq == seq) {
    slot_free(p, lo);
    p->buf[lo] = (slot_t){seq, copy, bytes};
    return 0;
  }
  if (p->nbuf == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    slot_t *b = realloc(p->buf, cap * sizeof(*b));
    if (b == NULL) {
      durable_node_free(copy);
      p->held_bytes -= (int64_t)bytes;
      durable__read_budget_give(p->mesh, 1, (int64_t)bytes);
      return DURABLE_ENOMEM;
    }
    p->buf = b;
    p->cap = cap;
  }
  memmove(&p->buf[lo + 1], &p->buf[lo], (p->nbuf - lo) * sizeof(*p->buf));
  p->buf[lo] = (slot_t){seq, copy, bytes};
  p->nbuf++;
  return 1;
}

static void read_more(durable__pull_t *p);
static void asked_back(durable__pull_t *p);

/* Keep the first failure of a read for try_deliver to report. */
static void read_failed(durable__pull_t *p, int status, const char *message) {
  if (p->read_status == 0) {
    p->read_status = status;
    snprintf(p->read_message, sizeof p->read_message, "%s",
             message ? message : durable_strerror(status));
  }
}

/* A failure: of a read (`bad` NULL), or of the item `bad` that could not
 * be read (handed along, payload NULL, so that the consumer knows which). */
static void deliver_error(durable__pull_t *p, int status, const char *message,
                          const durable_item_t *bad) {
  durable__pull_cb cb = p->cb;
  p->cb = NULL;
  p->failed = 1;
  if (cb)
    cb(p, status, bad, message, p->cb_data);
}

static int check_trimmed(durable__pull_t *p);
static void maybe_free(durable__pull_t *p);
static void poll_after_page(durable__pull_t *p, int progressed);
static void poll_later(durable__pull_t *p, const char *why);

/* Release the next item if it is there; else read when there is reason to.
 * 1 when an item was handed over (the callback may have asked for the next
 * one already). */
static int deliver_one(durable__pull_t *p) {
  if (p->closed || p->failed || p->cb == NULL)
    return 0;
  /* drop what the cursor has passed (duplicates) */
  while (p->first < p->nbuf && p->buf[p->first].seq < p->next)
    slot_free(p, p->first++);
  size_t waiting = p->nbuf - p->first;
  if (!p->custom && p->more && !p->reading && !p->read_status && waiting > 0 &&
      waiting < PAGE)
    read_more(p); /* ahead, while these are handed over */
  if (waiting > 0 && p->buf[p->first].seq > p->next && !p->reading &&
      check_trimmed(p))
    return 0; /* a gap at the cursor: its answer delivers */
  if (waiting > 0 && p->buf[p->first].seq == p->next) {
    durable_node_t *node = p->buf[p->first].node;
    p->buf[p->first].node = NULL; /* freed below, after its callback */
    slot_free(p, p->first++);
    char *payload = NULL;
    int64_t appended_at = 0;
    durable_error_t err = {0};
    int rc = p->custom
                 ? p->source.payload_of(node, &payload, &err, p->source.data)
                 : durable__item_decode(node, &payload, &appended_at, &err);
    if (rc < 0 || payload == NULL) {
      char message[DURABLE_PATH_MAX + 600];
      snprintf(message, sizeof message,
               "Durable stream item %s could not be read: %s", node->path,
               err.message[0] ? err.message : durable_strerror(rc));
      free(payload);
      durable_item_t bad = {.stream = {.ns = p->ns, .key = p->key},
                            .sequence = p->next,
                            .node = node};
      deliver_error(p, rc < 0 ? rc : DURABLE_EINVAL, message, &bad);
      durable_node_free(node);
      return 0;
    }
    durable_item_t item = {.stream = {.ns = p->ns, .key = p->key},
                           .sequence = p->next,
                           .payload = payload,
                           .appended_at = appended_at,
                           .node = node};
    p->next++;
    durable__pull_cb cb = p->cb;
    p->cb = NULL;
    cb(p, 0, &item, NULL, p->cb_data);
    durable_node_free(node);
    free(payload);
    return 1;
  }
  if (p->read_status == 0 && !p->reading &&
      (p->more || p->dirty || !p->started))
    read_more(p);
  if (p->read_status != 0 && !p->reading) { /* nothing left before it */
    /* the callback may close the pull, and read the message after */
    char message[sizeof p->read_message];
    memcpy(message, p->read_message, sizeof message);
    deliver_error(p, p->read_status, message, NULL);
  }
  return 0;
}

/* Hand items over for as long as the callback asks for the next one.  A
 * callback that asks from inside itself (durable__pull_next, as
 * durable_stream_read's does) only sets `cb`, and this loop goes on: a
 * page of a thousand items is a thousand turns of it, not a thousand
 * nested calls on the loop thread's stack (a frame of some 2 KB each).
 * A callback may close the pull: the caller frees it after (maybe_free). */
static void deliver_all(durable__pull_t *p) {
  if (p->delivering)
    return;
  p->delivering = 1;
  p->busy++;
  while (deliver_one(p))
    ;
  p->delivering = 0;
  p->busy--;
}

static void try_deliver(durable__pull_t *p) {
  deliver_all(p);
  maybe_free(p);
}

/* A page of a custom source, kept for a turn of the mesh: its nodes (taken
 * from the result) are handed to the source's functions there, not inside
 * the store's callback, because those may be Lua's. */
typedef struct {
  durable__pull_t *p;
  int status;
  int more;
  size_t count;
  char message[sizeof(((durable_error_t *)0)->message)];
  durable_node_t *nodes[];
} page_t;

static void maybe_free(durable__pull_t *p) {
  if (p->closed && !p->reading && !p->signal_owed && !p->busy && !p->checking &&
      !p->asking && !p->poll_open && !p->room_owed)
    pull_free(p);
}

static void on_stream_node(const durable_result_t *res, void *data) {
  durable__pull_t *p = data;
  p->checking = 0;
  if (p->closed) {
    maybe_free(p);
    return;
  }
  durable__stream_state_t s;
  if (res->status == 0 &&
      durable__state_decode(res->node->content, p->stream_path, &s) == 0) {
    if (s.trimmed_through >= p->next) {
      char message[sizeof p->read_message];
      durable_stream_id_t id = {.ns = p->ns, .key = p->key};
      snprintf(
          message, sizeof message,
          "Durable stream %.300s: items up to %lld were trimmed, so item %lld "
          "is not there; read after %lld or later",
          durable__stream_name(&id).text, (long long)s.trimmed_through,
          (long long)p->next, (long long)s.trimmed_through);
      read_failed(p, DURABLE_ENOTFOUND, message);
    } else if (s.lost_from <= p->next && p->next <= s.lost_to) {
      /* lost when the store went back, and an operator went on past them
       * (stream_hub_operator.c's resume): they never come */
      p->next = s.lost_to + 1;
    }
    durable__state_free(&s);
  }
  try_deliver(p);
}

/* Was the item at the cursor trimmed?  Asked when the next item in the
 * buffer is past the cursor (a gap right there), or the very first read
 * found nothing: a trimmed item never comes, and waiting for it would be
 * silence.  Returns 1 when the answer is on its way (it delivers), else 0. */
static int check_trimmed(durable__pull_t *p) {
  durable_error_t err = {0};
  if (p->custom || p->checking || p->trim_checked == p->next)
    return 0;
  p->trim_checked = p->next;
  p->checking = 1;
  if (durable_store_get(p->from, durable_mesh_principal(p->mesh),
                        p->stream_path, on_stream_node, p, &err) < 0) {
    p->checking = 0; /* asked again at the next gap */
    p->trim_checked = 0;
    return 0;
  }
  return 1;
}

/* What a read brought: `res` for the stream's own items (its nodes are
 * taken), or `page` (nodes already taken) for a custom source. */
static void page_arrived(durable__pull_t *p, const durable_result_t *res,
                         page_t *page) {
  int status = res ? res->status : page->status;
  size_t count = res ? res->count : page->count;
  int first_read = !p->started;
  int64_t upto_before = p->read_upto;
  p->started = 1;
  asked_back(p); /* what it keeps is held item by item (buffer_put) */
  if (status < 0 && p->lagging &&
      (status == DURABLE_EUNAVAIL || status == DURABLE_ECANCELED ||
       status == DURABLE_ETIMEDOUT)) {
    p->dirty = 1; /* the read store is away a while: read it again */
    const char *message = res ? res->message : page->message;
    poll_later(p, message && *message ? message : durable_strerror(status));
    return;
  }
  if (status < 0) {
    read_failed(p, status, res ? res->message : page->message);
    deliver_all(p); /* the items before it first, if one waits */
    return;
  }
  for (size_t i = 0; i < count; i++) {
    const durable_node_t *node = res ? res->nodes[i] : page->nodes[i];
    int64_t seq = p->custom ? p->source.sequence_of(node, p->source.data)
                            : durable__item_sequence(node->id);
    if (!p->custom && seq > p->read_upto) {
      p->read_upto = seq;
      p->trim_checked = 0; /* a gap after these may be a new trim */
    }
    if (p->custom && seq >= p->next + AHEAD_MAX) {
      p->round_again = 1;
      continue;
    }
    if (seq < p->next)
      continue;
    /* the page's node is ours to keep, no copy per item (a custom source's
     * round still reads its last id below) */
    durable_node_t *mine =
        res ? durable__result_take(res, i) : durable_node_dup(node);
    if (mine == NULL || buffer_put(p, seq, mine) < 0) {
      read_failed(p, DURABLE_ENOMEM, "out of memory");
      deliver_all(p); /* what is buffered first */
      return;
    }
  }
  p->more = res ? res->more : page->more;
  if (!p->custom && p->dirty && !p->heard_blind && p->read_upto >= p->heard)
    p->dirty = 0; /* every item announced meanwhile came with this page */
  if (p->lagging)
    poll_after_page(p, p->read_upto > upto_before);
  if (first_read && p->first == p->nbuf && check_trimmed(p))
    return; /* its answer delivers */
  if (p->custom) {
    free(p->round_after);
    p->round_after = page->more && count
                         ? strdup(page->nodes[count - 1]->id)
                         : NULL; /* the round is over: the next starts at "" */
    if (p->round_after == NULL && p->round_again) {
      p->round_again = 0;
      p->dirty = 1; /* look again from the first id */
    }
  }
  deliver_all(p);
}

static void on_page_turn(int status, const char *message, void *data) {
  page_t *page = data;
  durable__pull_t *p = page->p;
  (void)status;
  (void)message;
  p->reading = 0;
  p->busy++; /* its callback may close the pull */
  if (!p->closed)
    page_arrived(p, NULL, page);
  else
    asked_back(p);
  p->busy--;
  for (size_t i = 0; i < page->count; i++)
    durable_node_free(page->nodes[i]);
  free(page);
  maybe_free(p);
}

static void on_page(const durable_result_t *res, void *data) {
  durable__pull_t *p = data;
  if (p->closed) {
    p->reading = 0;
    asked_back(p);
    maybe_free(p);
    return;
  }
  if (!p->custom) {
    p->reading = 0;
    page_arrived(p, res, NULL);
    maybe_free(p); /* closed by a callback meanwhile */
    return;
  }
  /* still reading until the turn: a close waits for it */
  page_t *page = calloc(1, sizeof(*page) + res->count * sizeof(page->nodes[0]));
  if (page == NULL) {
    p->reading = 0;
    asked_back(p);
    read_failed(p, DURABLE_ENOMEM, "out of memory");
    return;
  }
  page->p = p;
  page->status = res->status;
  page->more = res->more;
  if (res->status < 0) {
    snprintf(page->message, sizeof page->message, "%s",
             res->message ? res->message : "");
  } else {
    page->count = res->count;
    for (size_t i = 0; i < res->count; i++)
      page->nodes[i] = durable__result_take(res, i);
  }
  durable__sched_later(&p->mesh->sched, on_page_turn, 0, NULL, page);
}

/* Go on when no read is out: hand items over if one is asked for, else
 * read ahead while less than a page waits (while the last item is being
 * handled). */
static void read_on(durable__pull_t *p) {
  if (p->reading)
    return;
  if (p->cb != NULL)
    deliver_all(p);
  else if (!p->failed && !p->read_status && p->nbuf - p->first < PAGE)
    read_more(p);
}

/* The rows the read in flight asked of the budget go back: the page came
 * (what it keeps is held item by item), failed, or is not wanted. */
static void asked_back(durable__pull_t *p) {
  durable__read_budget_give(p->mesh, (int64_t)p->asked, 0);
  p->asked = 0;
}

static void on_room_turn(int status, const char *message, void *data) {
  durable__pull_t *p = data;
  (void)status;
  (void)message;
  p->room_owed = 0;
  if (!p->closed)
    read_on(p);
  maybe_free(p);
}

/* The read budget has room again: read, in a turn of the mesh (never
 * inside another reader's hand-over). */
static void on_room(durable__read_waiter_t *w) {
  durable__pull_t *p = DURABLE__QUEUE_DATA(w, durable__pull_t, waiter);
  if (p->room_owed)
    return;
  p->room_owed = 1;
  durable__sched_later(&p->mesh->sched, on_room_turn, 0, NULL, p);
}

static void read_more(durable__pull_t *p) {
  durable_store_t *store = p->from;
  durable_error_t err = {0};
  int rc;
  /* starving: an item is asked for and none is here; or, for a custom
   * source, which lists by id and may hold many ahead of a gap that a
   * later read fills, the one at the cursor is not here (within its own
   * PULL_BYTES).  A stream's own items are read after the highest read:
   * reading on never fills a gap there (check_trimmed answers it) */
  int starving =
      p->cb != NULL &&
      (p->first == p->nbuf || (p->custom && p->buf[p->first].seq != p->next &&
                               p->held_bytes < PULL_BYTES));
  /* its own bound: what fits below PULL_BYTES, a page at most */
  size_t want = 0;
  if (p->held_bytes < PULL_BYTES)
    want = durable__read_budget_rows(p->mesh, PULL_BYTES - p->held_bytes);
  if (want > PAGE)
    want = PAGE;
  if (want == 0 && !starving)
    return; /* read again as these are handed over */
  size_t rows = durable__read_budget_take(
      p->mesh, want ? want : DURABLE__READ_MIN, starving);
  if (rows == 0) {
    durable__read_budget_wait(p->mesh, &p->waiter);
    return;
  }
  p->asked = rows;
  p->reading = 1;
  p->dirty = 0;
  p->heard_blind = 0;
  if (p->custom) {
    char query[DURABLE_PATH_MAX + 16];
    snprintf(query, sizeof query, "namespace:%s", p->items_ns);
    rc = durable_store_query(store, durable_mesh_principal(p->mesh), query,
                             p->round_after, rows, on_page, p, &err);
  } else {
    int64_t after = p->next - 1 > p->read_upto ? p->next - 1 : p->read_upto;
    rc = durable__store_read_items(store, durable_mesh_principal(p->mesh),
                                   p->items_ns, after, rows, on_page, p, &err);
  }
  if (rc < 0) { /* try_deliver reports it, never from inside a read */
    p->reading = 0;
    asked_back(p);
    read_failed(p, rc, err.message);
  }
}

/* Read again: now if an item is asked for, else ahead while less than a
 * page waits. */
static void read_again(durable__pull_t *p) {
  p->dirty = 1;
  read_on(p);
  maybe_free(p); /* a callback may have closed it */
}

/* ---- a read store's reader (see the top) ---- */

static void on_poll(uv_timer_t *timer) {
  durable__pull_t *p = timer->data;
  if (!p->closed)
    read_again(p);
}

static void on_poll_closed(uv_handle_t *handle) {
  durable__pull_t *p = handle->data;
  durable_mesh_t *mesh = p->mesh;
  p->poll_open = 0;
  maybe_free(p);
  durable__sched_handle_closed(&mesh->sched);
}

/* Read again after the current wait, which doubles up to POLL_MAX_MS, and
 * is POLL_SLOW_MS once POLL_SLOW_AFTER_MS passed without progress: said
 * once, with `why`. */
static void poll_later(durable__pull_t *p, const char *why) {
  uint64_t now = uv_now(durable_mesh_loop(p->mesh));
  uint64_t delay = p->poll_ms;
  p->poll_ms = p->poll_ms * 2 > POLL_MAX_MS ? POLL_MAX_MS : p->poll_ms * 2;
  if (now - p->progress_at > POLL_SLOW_AFTER_MS) {
    delay = POLL_SLOW_MS;
    if (!p->slow_said) {
      p->slow_said = 1;
      durable_stream_id_t id = {.ns = p->ns, .key = p->key};
      durable_mesh_log(p->mesh, DURABLE_LOG_WARN,
                       "[DurableStreams] a reader of %s on the read store has "
                       "had nothing new for %d s: %s; reading again every "
                       "%d ms",
                       durable__stream_name(&id).text,
                       POLL_SLOW_AFTER_MS / 1000, why, POLL_SLOW_MS);
    }
  }
  uv_timer_start(&p->poll, on_poll, delay, 0);
}

/* A page came: read again soon while the store holds less than `target`. */
static void poll_after_page(durable__pull_t *p, int progressed) {
  if (progressed) {
    p->progress_at = uv_now(durable_mesh_loop(p->mesh));
    p->poll_ms = POLL_MIN_MS;
    p->slow_said = 0;
  }
  if (p->more || p->read_upto >= p->target || p->closed)
    return;
  char why[160];
  snprintf(why, sizeof why,
           "the store holds sequence %lld, the read store only %lld "
           "(replay paused, or far behind?)",
           (long long)p->target, (long long)p->read_upto);
  poll_later(p, why);
}

/* The target rose.  A reader that had caught up begins a new wait, from
 * the shortest delay; one still waiting keeps its own. */
static void target_rose(durable__pull_t *p, int64_t seq) {
  if (seq <= p->target)
    return;
  if (p->read_upto >= p->target) {
    p->progress_at = uv_now(durable_mesh_loop(p->mesh));
    p->poll_ms = POLL_MIN_MS;
  }
  p->target = seq;
}

static void ask_target(durable__pull_t *p);

static void on_target(const durable_result_t *res, void *data) {
  durable__pull_t *p = data;
  p->asking = 0;
  if (p->closed) {
    maybe_free(p);
    return;
  }
  /* a store that cannot answer now leaves the target as it was: the
   * signals go on, and so do the reads they start */
  if (res->status == 0 && res->value > p->read_upto) {
    target_rose(p, res->value);
    p->busy++; /* a callback may close it: freed below, not there */
    read_again(p);
    p->busy--;
  }
  if (p->ask_again && !p->closed) {
    p->ask_again = 0;
    ask_target(p);
  }
  maybe_free(p);
}

/* Ask the store (not the read store) for the highest item; one question
 * at a time, another after it when a signal came meanwhile. */
static void ask_target(durable__pull_t *p) {
  durable_error_t err = {0};
  if (p->asking) {
    p->ask_again = 1;
    return;
  }
  p->asking = 1;
  if (durable__store_last_item(durable_mesh_store(p->mesh),
                               durable_mesh_principal(p->mesh), p->items_ns,
                               on_target, p, &err) < 0)
    p->asking = 0;
}

/* The change feed says something moved. */
static void on_signal_turn(int status, const char *message, void *data) {
  durable__pull_t *p = data;
  (void)status;
  (void)message;
  p->signal_owed = 0;
  if (!p->closed && !p->reading && p->cb != NULL)
    deliver_all(p);
  maybe_free(p);
}

static void on_signal(durable_watch_t *w, durable_change_kind_t kind,
                      const durable_node_t *node, void *data) {
  durable__pull_t *p = data;
  (void)w;
  if (kind == DURABLE_CHANGE_REMOVED)
    return;
  /* own items: a signal watch of the items namespace, which hears this
   * process's item rows as they commit (only a new one counts) and
   * "changed elsewhere" as NULL */
  if (!p->custom && node != NULL) {
    int64_t seq = durable__item_sequence(node->id);
    if (seq <= p->read_upto)
      return;
    if (seq > p->heard)
      p->heard = seq;
    if (p->lagging)
      target_rose(p, seq);
  } else if (!p->custom) {
    p->heard_blind = 1;
    if (p->lagging)
      ask_target(p); /* another process appended: up to where? */
  }
  if (p->custom && p->round_after != NULL)
    p->round_again = 1;
  p->dirty = 1;    /* read again: now if an item is asked for, else then */
  if (p->custom) { /* a source's functions may run: in a turn */
    if (!p->signal_owed) {
      p->signal_owed = 1;
      durable__sched_later(&p->mesh->sched, on_signal_turn, 0, NULL, p);
    }
    return;
  }
  read_again(p);
}

durable__pull_t *durable__pull_new(durable_mesh_t *mesh,
                                   const durable_stream_id_t *id, int64_t after,
                                   const durable_source_t *source,
                                   durable_store_t *from,
                                   durable_error_t *err) {
  char path[DURABLE_PATH_MAX + 1], items[DURABLE_PATH_MAX + 32];
  if (durable_stream_check(id, err) < 0)
    return NULL;
  durable_stream_path(id, path, sizeof path);
  durable_stream_items_ns(id, items, sizeof items);
  if (source && (source->items_ns == NULL || source->sequence_of == NULL ||
                 source->payload_of == NULL)) {
    durable__error(err, DURABLE_EINVAL,
                   "a durable stream source needs items_ns, sequence_of and "
                   "payload_of");
    return NULL;
  }
  if (source && durable_path_check(source->items_ns, err) < 0)
    return NULL;
  durable__pull_t *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    durable__error(err, DURABLE_ENOMEM, "out of memory");
    return NULL;
  }
  p->mesh = mesh;
  p->from = from;
  durable__queue_init(&p->waiter.link);
  p->waiter.wake = on_room;
  p->next = after + 1;
  p->read_upto = after;
  p->custom = source != NULL;
  if (source)
    p->source = *source;
  p->ns = strdup(id->ns);
  p->key = strdup(id->key);
  p->stream_path = strdup(path);
  p->items_ns = strdup(source ? source->items_ns : items);
  if (!p->ns || !p->key || !p->stream_path || !p->items_ns) {
    pull_free(p);
    durable__error(err, DURABLE_ENOMEM, "out of memory");
    return NULL;
  }
  /* the watch first, so nothing committed from here on goes unnoticed.  Own
   * items: a signal of their namespace, with no reads of its own (the next
   * read after the cursor is the only one needed); a custom source: a watch
   * of its namespace (ids are not sequences there) */
  if (durable_store_watch(durable_mesh_store(mesh), p->items_ns,
                          p->custom ? 0 : DURABLE__WATCH_SIGNAL, on_signal, p,
                          &p->watch, err) < 0) {
    pull_free(p);
    return NULL;
  }
  /* a custom source is listed by namespace, not by sequence: it has no
   * target to wait for, so it reads where its signals come from */
  if (from != durable_mesh_store(mesh) && !p->custom) {
    p->lagging = 1;
    uv_timer_init(durable_mesh_loop(mesh), &p->poll);
    p->poll.data = p;
    p->poll_open = 1;
    durable__sched_handle_opened(&mesh->sched);
    p->progress_at = uv_now(durable_mesh_loop(mesh));
    p->poll_ms = POLL_MIN_MS;
    ask_target(p); /* what the store held when the reader began */
  } else {
    p->from = durable_mesh_store(mesh);
  }
  return p;
}

void durable__pull_next(durable__pull_t *p, durable__pull_cb cb, void *data) {
  p->cb = cb;
  p->cb_data = data;
  try_deliver(p);
}

int durable__pull_ready(durable__pull_t *p) {
  if (p->closed || p->failed)
    return 0;
  while (p->first < p->nbuf && p->buf[p->first].seq < p->next)
    slot_free(p, p->first++); /* passed: duplicates */
  return p->first < p->nbuf && p->buf[p->first].seq == p->next;
}

void durable__pull_cancel(durable__pull_t *p) {
  if (p != NULL)
    p->cb = NULL;
}

void durable__pull_close(durable__pull_t *p) {
  if (p == NULL || p->closed)
    return;
  p->closed = 1;
  p->cb = NULL;
  durable_watch_close(p->watch);
  p->watch = NULL;
  if (p->poll_open && !uv_is_closing((uv_handle_t *)&p->poll))
    uv_close((uv_handle_t *)&p->poll, on_poll_closed);
  maybe_free(p);
}

/* ---- durable_stream_read: the plain, unleased reader
 * ------------------------------------ */

struct durable_reader_s {
  durable__pull_t *pull;
  durable_reader_cb cb;
  void *data;
  int closed;
  int in_cb;
  int paused; /* durable_reader_pause: no next item is asked for */
  int asked;  /* the next item is asked for (one request at a time) */
};

static void on_pulled(durable__pull_t *pull, int status,
                      const durable_item_t *item, const char *message,
                      void *data);

static void ask_next(durable_reader_t *r) {
  if (r->asked || r->paused || r->closed)
    return;
  r->asked = 1;
  durable__pull_next(r->pull, on_pulled, r);
}

static void on_pulled(durable__pull_t *pull, int status,
                      const durable_item_t *item, const char *message,
                      void *data) {
  durable_reader_t *r = data;
  (void)pull;
  r->asked = 0;
  r->in_cb++;
  r->cb(r, status, status < 0 ? NULL : item, message, r->data);
  r->in_cb--;
  if (r->closed) {
    if (r->in_cb == 0)
      free(r);
    return;
  }
  if (status == 0)
    ask_next(r);
}

void durable_reader_pause(durable_reader_t *reader) {
  if (reader)
    reader->paused = 1;
}

void durable_reader_resume(durable_reader_t *reader) {
  if (reader == NULL || !reader->paused)
    return;
  reader->paused = 0;
  if (reader->in_cb == 0) /* else on_pulled asks once the callback returns */
    ask_next(reader);
}

int durable_stream_read(durable_mesh_t *mesh, const durable_stream_id_t *id,
                        int64_t after, const durable_source_t *source,
                        durable_reader_cb cb, void *data,
                        durable_reader_t **out, durable_error_t *err) {
  *out = NULL;
  if (cb == NULL)
    return durable__error(err, DURABLE_EINVAL, "callback is missing");
  if (after < 0)
    return durable__error(err, DURABLE_EINVAL, "sequence %lld is negative",
                          (long long)after);
  durable_reader_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return durable__error(err, DURABLE_ENOMEM, "out of memory");
  durable_error_t e = {0};
  r->pull = durable__pull_new(mesh, id, after, source,
                              durable_mesh_read_store(mesh), &e);
  if (r->pull == NULL) {
    free(r);
    return durable__error(err, e.code, "%s", e.message);
  }
  r->cb = cb;
  r->data = data;
  *out = r;
  ask_next(r);
  return 0;
}

void durable_reader_close(durable_reader_t *r) {
  if (r == NULL || r->closed)
    return;
  r->closed = 1;
  durable__pull_close(r->pull);
  if (r->in_cb == 0)
    free(r);
}

/*
 * queue.h: the one linked list of every layer, in libuv's shape: an
 * intrusive, circular, doubly linked list.  An element embeds a
 * `struct durable__queue` link and is found again from it with
 * DURABLE__QUEUE_DATA; the list's head is a link too, a sentinel that is
 * never an element:
 *
 *     head <-> a <-> b <-> c <-> (head)
 *
 * So inserting at either end and removing from anywhere take O(1) with no
 * allocation and no NULL cases (no head or tail pointer to fix up), and an
 * element needs no pointer back to the list it is on.  Mailboxes, ready
 * lists, timers, pending requests and watches are such lists; a queue here
 * is only the list, its order whatever the caller inserted.
 *
 * The rules that keep it so:
 *   - a head is set up with durable__queue_init before its first use: a
 *     zeroed head is not an empty queue.  An element's link needs nothing
 *     before it is inserted.
 *   - links point at each other, so a struct that holds a head or a linked
 *     element must not be copied or moved in memory while it is linked.
 *   - durable__queue_remove leaves the element linked to itself: removing
 *     it again does nothing, and durable__queue_empty(&element->link) says
 *     it is on no queue.
 *   - DURABLE__QUEUE_FOREACH reads the next link after the body, so the body
 *     must not remove the element it is at (a removed element points at
 *     itself: the walk would never end).  A walk whose body may remove or
 *     free the current element uses DURABLE__QUEUE_FOREACH_SAFE, which takes
 *     the next link first; a walk whose body may change the list in other
 *     ways (callbacks that add or remove anything) moves the list aside
 *     first (durable__queue_move) and pops from its copy, or keeps the
 *     elements listed until the walk ends.
 *   - nothing here locks: a queue shared between threads is used under its
 *     owner's lock.
 */
#ifndef DURABLE_COMMON_QUEUE_H
#define DURABLE_COMMON_QUEUE_H

#include <stddef.h>

struct durable__queue {
  struct durable__queue *next;
  struct durable__queue *prev;
};

/* The element of type `type` whose member `field` is the link `q`. */
#define DURABLE__QUEUE_DATA(q, type, field)                                    \
  ((type *)(((char *)(q)) - offsetof(type, field)))

/* Walk the links of the queue at `h` from first to last into `q`. */
#define DURABLE__QUEUE_FOREACH(q, h)                                           \
  for ((q) = (h)->next; (q) != (h); (q) = (q)->next)

/* The same walk, with `n` the link after `q` taken before the body runs:
 * the body may remove (and free) the element at `q`, not the one at `n`. */
#define DURABLE__QUEUE_FOREACH_SAFE(q, n, h)                                   \
  for ((q) = (h)->next, (n) = (q)->next; (q) != (h); (q) = (n), (n) = (q)->next)

static inline void durable__queue_init(struct durable__queue *q) {
  q->next = q;
  q->prev = q;
}

/* 1 when the queue at `q` has no element (for an element's link: when it
 * is on no queue, having been removed). */
static inline int durable__queue_empty(const struct durable__queue *q) {
  return q == q->next;
}

/* The first element's link; `h` itself when the queue is empty. */
static inline struct durable__queue *
durable__queue_head(const struct durable__queue *h) {
  return h->next;
}

static inline void durable__queue_insert_head(struct durable__queue *h,
                                              struct durable__queue *q) {
  q->next = h->next;
  q->prev = h;
  q->next->prev = q;
  h->next = q;
}

static inline void durable__queue_insert_tail(struct durable__queue *h,
                                              struct durable__queue *q) {
  q->next = h;
  q->prev = h->prev;
  q->prev->next = q;
  h->prev = q;
}

/* Take `q` out of its queue; it is left linked to itself. */
static inline void durable__queue_remove(struct durable__queue *q) {
  q->prev->next = q->next;
  q->next->prev = q->prev;
  durable__queue_init(q);
}

/* Remove the first element and return its link; NULL when empty. */
static inline struct durable__queue *
durable__queue_pop(struct durable__queue *h) {
  struct durable__queue *q = h->next;
  if (q == h)
    return NULL;
  durable__queue_remove(q);
  return q;
}

/* Move every element of the queue at `h`, in order, to `n` (whatever `n`
 * held is forgotten, not unlinked); `h` is left empty. */
static inline void durable__queue_move(struct durable__queue *h,
                                       struct durable__queue *n) {
  if (durable__queue_empty(h)) {
    durable__queue_init(n);
    return;
  }
  n->next = h->next;
  n->prev = h->prev;
  n->next->prev = n;
  n->prev->next = n;
  durable__queue_init(h);
}

#endif

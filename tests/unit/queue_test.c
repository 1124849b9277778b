/*
 * queue_test.c: the intrusive list every layer keeps its lists in
 * (src/common/queue.h).
 *
 * A hub's mailbox, the mesh's ready list, a hub's timers and requests and
 * the store's watches are all this list, so a broken link is a message
 * never run or a hub freed while still listed.  The test checks the whole
 * ring after every operation -- each link's prev and next agree both ways
 * round, and the elements are the ones a plain reference array says, in
 * its order -- through each operation alone, the walks the runtime relies
 * on (removing the current element, moving the list aside while callbacks
 * add to it), and a long random sequence of every operation.
 */
#include <durable.h>

#include "check.h"
#include "queue.h"

#include <stdint.h>
#include <stdlib.h>

/* The link is not the first member, so that DURABLE__QUEUE_DATA has an
 * offset to take off. */
typedef struct {
  int value;
  char pad[13];
  struct durable__queue link;
} item_t;

#define N 64

static item_t items[N];

static item_t *item_of(struct durable__queue *q) {
  return DURABLE__QUEUE_DATA(q, item_t, link);
}

/* The ring at `h` is sound and holds the values `want[0..n)` in order. */
static void check_ring(const struct durable__queue *h, const int *want,
                       size_t n) {
  size_t count = 0;
  const struct durable__queue *q = h;
  do {
    CHECK(q->next != NULL && q->prev != NULL);
    CHECK(q->next->prev == q);
    CHECK(q->prev->next == q);
    q = q->next;
    if (q != h) {
      CHECK_LT_INT(count, n);
      CHECK_EQ_INT(item_of((struct durable__queue *)q)->value, want[count]);
      count++;
    }
  } while (q != h);
  CHECK_EQ_INT(count, n);
  CHECK_EQ_INT(durable__queue_empty(h), n == 0);
  /* backwards too: the prev links alone give the same order */
  q = h->prev;
  for (size_t i = n; i-- > 0; q = q->prev)
    CHECK_EQ_INT(item_of((struct durable__queue *)q)->value, want[i]);
  CHECK(q == h);
}

static void setup(void) {
  for (int i = 0; i < N; i++) {
    items[i].value = i;
    items[i].link.next = items[i].link.prev = NULL; /* never initialised */
  }
}

static void test_empty(void) {
  struct durable__queue h, moved;
  durable__queue_init(&h);
  check_ring(&h, NULL, 0);
  CHECK(durable__queue_head(&h) == &h);
  CHECK(durable__queue_pop(&h) == NULL);
  struct durable__queue *q;
  int walked = 0;
  DURABLE__QUEUE_FOREACH(q, &h) {
    walked++;
  }
  CHECK_EQ_INT(walked, 0);
  moved.next = moved.prev = NULL;
  durable__queue_move(&h, &moved); /* an empty move still sets `moved` up */
  check_ring(&h, NULL, 0);
  check_ring(&moved, NULL, 0);
}

static void test_data(void) {
  setup();
  CHECK(item_of(&items[3].link) == &items[3]);
  CHECK_EQ_INT(item_of(&items[3].link)->value, 3);
}

static void test_insert_tail_fifo(void) {
  struct durable__queue h;
  int want[] = {0, 1, 2, 3};
  setup();
  durable__queue_init(&h);
  for (int i = 0; i < 4; i++) {
    durable__queue_insert_tail(&h, &items[i].link);
    check_ring(&h, want, (size_t)i + 1);
  }
  CHECK(durable__queue_head(&h) == &items[0].link);
  for (int i = 0; i < 4; i++) {
    struct durable__queue *q = durable__queue_pop(&h);
    CHECK(q == &items[i].link);
    CHECK(durable__queue_empty(q)); /* popped: on no queue */
    check_ring(&h, want + i + 1, (size_t)(3 - i));
  }
  CHECK(durable__queue_pop(&h) == NULL);
}

static void test_insert_head_lifo(void) {
  struct durable__queue h;
  int want[] = {3, 2, 1, 0};
  setup();
  durable__queue_init(&h);
  for (int i = 0; i < 4; i++) {
    durable__queue_insert_head(&h, &items[i].link);
    check_ring(&h, want + 3 - i, (size_t)i + 1);
  }
  struct durable__queue *q;
  int seen = 0;
  DURABLE__QUEUE_FOREACH(q, &h) {
    CHECK_EQ_INT(item_of(q)->value, want[seen]);
    seen++;
  }
  CHECK_EQ_INT(seen, 4);
}

static void test_remove(void) {
  struct durable__queue h;
  setup();
  durable__queue_init(&h);
  for (int i = 0; i < 5; i++)
    durable__queue_insert_tail(&h, &items[i].link);
  durable__queue_remove(&items[2].link); /* the middle */
  check_ring(&h, (int[]){0, 1, 3, 4}, 4);
  durable__queue_remove(&items[0].link); /* the first */
  check_ring(&h, (int[]){1, 3, 4}, 3);
  durable__queue_remove(&items[4].link); /* the last */
  check_ring(&h, (int[]){1, 3}, 2);
  /* a removed element points at itself: removing it again does nothing */
  CHECK(durable__queue_empty(&items[2].link));
  durable__queue_remove(&items[2].link);
  check_ring(&h, (int[]){1, 3}, 2);
  check_ring(&items[2].link, NULL, 0);
  /* and it can be inserted again */
  durable__queue_insert_head(&h, &items[2].link);
  check_ring(&h, (int[]){2, 1, 3}, 3);
  durable__queue_remove(&items[1].link);
  durable__queue_remove(&items[2].link);
  durable__queue_remove(&items[3].link);
  check_ring(&h, NULL, 0);
}

/* The walk of a list whose body unlinks (and would free) the element it is
 * at: the next link is taken first. */
static void test_foreach_safe(void) {
  struct durable__queue h, *q, *n;
  setup();
  durable__queue_init(&h);
  for (int i = 0; i < 10; i++)
    durable__queue_insert_tail(&h, &items[i].link);
  int seen = 0;
  DURABLE__QUEUE_FOREACH_SAFE(q, n, &h) {
    CHECK_EQ_INT(item_of(q)->value, seen);
    seen++;
    if (item_of(q)->value % 2 == 0) {
      durable__queue_remove(q);
      q->next = q->prev = NULL; /* as good as freed */
    }
  }
  CHECK_EQ_INT(seen, 10);
  check_ring(&h, (int[]){1, 3, 5, 7, 9}, 5);
  DURABLE__QUEUE_FOREACH_SAFE(q, n, &h) {
    durable__queue_remove(q);
  }
  check_ring(&h, NULL, 0);
}

/* The walk whose callbacks may add to the list: the list is moved aside
 * first, so what they add waits for the next walk, and popping from the
 * copy stays sound whatever they do to the original. */
static void test_move_aside(void) {
  struct durable__queue h, aside;
  setup();
  durable__queue_init(&h);
  for (int i = 0; i < 4; i++)
    durable__queue_insert_tail(&h, &items[i].link);
  durable__queue_move(&h, &aside);
  check_ring(&h, NULL, 0);
  check_ring(&aside, (int[]){0, 1, 2, 3}, 4);
  struct durable__queue *q;
  int seen = 0, added = 10;
  while ((q = durable__queue_pop(&aside)) != NULL) {
    CHECK_EQ_INT(item_of(q)->value, seen);
    seen++;
    durable__queue_insert_tail(&h, &items[added++].link); /* a "callback" */
  }
  CHECK_EQ_INT(seen, 4);
  check_ring(&aside, NULL, 0);
  check_ring(&h, (int[]){10, 11, 12, 13}, 4);
  /* a move into a head that held something forgets it, unlinking nothing */
  durable__queue_init(&aside);
  durable__queue_insert_tail(&aside, &items[20].link);
  durable__queue_move(&h, &aside);
  check_ring(&aside, (int[]){10, 11, 12, 13}, 4);
  check_ring(&h, NULL, 0);
}

/* Every operation at random, on two queues, against reference arrays. */
static void test_random(void) {
  struct durable__queue h[2];
  int ref[2][N];
  size_t len[2] = {0, 0};
  int where[N]; /* which queue an item is on, or -1 */
  setup();
  durable__queue_init(&h[0]);
  durable__queue_init(&h[1]);
  for (int i = 0; i < N; i++)
    where[i] = -1;
  srand(12345);
  for (int step = 0; step < 20000; step++) {
    int k = rand() % 2;
    int i = rand() % N;
    switch (rand() % 5) {
    case 0: /* insert at the head */
      if (where[i] >= 0)
        break;
      durable__queue_insert_head(&h[k], &items[i].link);
      for (size_t j = len[k]; j > 0; j--)
        ref[k][j] = ref[k][j - 1];
      ref[k][0] = i;
      len[k]++;
      where[i] = k;
      break;
    case 1: /* insert at the tail */
      if (where[i] >= 0)
        break;
      durable__queue_insert_tail(&h[k], &items[i].link);
      ref[k][len[k]++] = i;
      where[i] = k;
      break;
    case 2: /* remove from anywhere */
      if (where[i] < 0)
        break;
      durable__queue_remove(&items[i].link);
      k = where[i];
      for (size_t j = 0; j < len[k]; j++)
        if (ref[k][j] == i) {
          for (; j + 1 < len[k]; j++)
            ref[k][j] = ref[k][j + 1];
          break;
        }
      len[k]--;
      where[i] = -1;
      break;
    case 3: { /* pop */
      struct durable__queue *q = durable__queue_pop(&h[k]);
      CHECK_EQ_INT(q == NULL, len[k] == 0);
      if (q == NULL)
        break;
      CHECK_EQ_INT(item_of(q)->value, ref[k][0]);
      where[ref[k][0]] = -1;
      for (size_t j = 0; j + 1 < len[k]; j++)
        ref[k][j] = ref[k][j + 1];
      len[k]--;
      break;
    }
    case 4: /* move one queue onto the other (now and then) */
      if (rand() % 8 != 0 || len[1 - k] != 0)
        break;
      durable__queue_move(&h[k], &h[1 - k]);
      for (size_t j = 0; j < len[k]; j++) {
        ref[1 - k][j] = ref[k][j];
        where[ref[k][j]] = 1 - k;
      }
      len[1 - k] = len[k];
      len[k] = 0;
      break;
    }
    check_ring(&h[0], ref[0], len[0]);
    check_ring(&h[1], ref[1], len[1]);
  }
}

static const check_test_t tests[] = {
    {"empty", test_empty},
    {"data", test_data},
    {"insert_tail_fifo", test_insert_tail_fifo},
    {"insert_head_lifo", test_insert_head_lifo},
    {"remove", test_remove},
    {"foreach_safe", test_foreach_safe},
    {"move_aside", test_move_aside},
    {"random", test_random},
};

int main(int argc, char **argv) {
  return check_main(tests, sizeof tests / sizeof tests[0], argc, argv);
}

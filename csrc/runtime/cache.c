/* Executable cache: fingerprint -> executable, bounded, least recently used
 * entries evicted first. A chained hash table plus an intrusive LRU list. */
#include <pthread.h>
#include <string.h>

#include "tpu/runtime.h"

typedef struct entry_s {
  tpu_hash128_t key;
  tpu_executable_t* exe;
  struct entry_s* chain;
  struct entry_s *prev, *next; /* LRU: head is most recent */
} entry_t;

struct tpu_cache_s {
  tpu_allocator_t allocator;
  pthread_mutex_t mu;
  entry_t** buckets;
  int64_t n_buckets;
  entry_t *head, *tail;
  int64_t capacity;
  tpu_cache_stats_t stats;
};

static inline bool key_eq(tpu_hash128_t a, tpu_hash128_t b) {
  return a.lo == b.lo && a.hi == b.hi;
}

tpu_status_t tpu_cache_create(tpu_allocator_t a, int64_t capacity,
                              tpu_cache_t** out) {
  *out = NULL;
  if (capacity < 1) capacity = 1;
  tpu_cache_t* c;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*c), "executable cache", (void**)&c));
  c->allocator = a;
  c->capacity = capacity;
  c->n_buckets = 1024;
  tpu_status_t st = tpu_alloc_zeroed(a, sizeof(entry_t*) * (size_t)c->n_buckets,
                                     "executable cache", (void**)&c->buckets);
  if (st) {
    tpu_free(a, c);
    return st;
  }
  pthread_mutex_init(&c->mu, NULL);
  *out = c;
  return NULL;
}

static void unlink_lru(tpu_cache_t* c, entry_t* e) {
  if (e->prev) e->prev->next = e->next; else c->head = e->next;
  if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
  e->prev = e->next = NULL;
}

static void push_front(tpu_cache_t* c, entry_t* e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head) c->head->prev = e;
  c->head = e;
  if (!c->tail) c->tail = e;
}

static void remove_entry(tpu_cache_t* c, entry_t* e) {
  entry_t** p = &c->buckets[e->key.lo & (uint64_t)(c->n_buckets - 1)];
  while (*p != e) p = &(*p)->chain;
  *p = e->chain;
  unlink_lru(c, e);
  tpu_executable_release(e->exe);
  tpu_free(c->allocator, e);
  c->stats.entries--;
}

void tpu_cache_clear(tpu_cache_t* c) {
  pthread_mutex_lock(&c->mu);
  while (c->head) remove_entry(c, c->head);
  pthread_mutex_unlock(&c->mu);
}

void tpu_cache_destroy(tpu_cache_t* c) {
  if (!c) return;
  tpu_cache_clear(c);
  pthread_mutex_destroy(&c->mu);
  tpu_free(c->allocator, c->buckets);
  tpu_free(c->allocator, c);
}

tpu_executable_t* tpu_cache_lookup(tpu_cache_t* c, tpu_hash128_t key) {
  pthread_mutex_lock(&c->mu);
  entry_t* e = c->buckets[key.lo & (uint64_t)(c->n_buckets - 1)];
  while (e && !key_eq(e->key, key)) e = e->chain;
  tpu_executable_t* exe = NULL;
  if (e) {
    c->stats.hits++;
    if (c->head != e) {
      unlink_lru(c, e);
      push_front(c, e);
    }
    exe = e->exe;
    tpu_executable_retain(exe);
  } else {
    c->stats.misses++;
  }
  pthread_mutex_unlock(&c->mu);
  return exe;
}

static void evict_to(tpu_cache_t* c, int64_t n) {
  while ((int64_t)c->stats.entries > n && c->tail) {
    remove_entry(c, c->tail);
    c->stats.evictions++;
  }
}

tpu_status_t tpu_cache_insert(tpu_cache_t* c, tpu_hash128_t key,
                              tpu_executable_t* exe) {
  entry_t* e = tpu_alloc(c->allocator, sizeof(*e));
  if (!e) return TPU_STATUS(RESOURCE_EXHAUSTED, "executable cache: host out of memory");
  memset(e, 0, sizeof(*e));
  e->key = key;
  e->exe = exe;
  tpu_executable_retain(exe);
  pthread_mutex_lock(&c->mu);
  /* a racing insert of the same key replaces the older one */
  entry_t* old = c->buckets[key.lo & (uint64_t)(c->n_buckets - 1)];
  while (old && !key_eq(old->key, key)) old = old->chain;
  if (old) remove_entry(c, old);
  evict_to(c, c->capacity - 1);
  entry_t** b = &c->buckets[key.lo & (uint64_t)(c->n_buckets - 1)];
  e->chain = *b;
  *b = e;
  push_front(c, e);
  c->stats.entries++;
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

void tpu_cache_stats(tpu_cache_t* c, tpu_cache_stats_t* out) {
  pthread_mutex_lock(&c->mu);
  *out = c->stats;
  out->capacity = (uint64_t)c->capacity;
  pthread_mutex_unlock(&c->mu);
}

void tpu_cache_set_capacity(tpu_cache_t* c, int64_t capacity) {
  if (capacity < 1) capacity = 1;
  pthread_mutex_lock(&c->mu);
  c->capacity = capacity;
  evict_to(c, capacity);
  pthread_mutex_unlock(&c->mu);
}

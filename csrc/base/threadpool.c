/* Worker pool: a generation counter wakes helpers; tasks are claimed with an
 * atomic counter; the caller waits until every helper has left the batch. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "tpu/threadpool.h"

struct tpu_pool_s {
  tpu_allocator_t allocator;
  int n_threads;
  pthread_t* threads;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  pthread_cond_t done;
  uint64_t generation; /* guarded by mu */
  int active;          /* helpers still inside the current batch */
  bool stopping;
  /* the current batch */
  tpu_pool_fn_t fn;
  void* ctx;
  int64_t n_tasks;
  atomic_int_fast64_t next;
};

typedef struct {
  tpu_pool_t* pool;
  int index;
} helper_arg_t;

static void run_tasks(tpu_pool_t* p, int thread) {
  for (;;) {
    int64_t t = atomic_fetch_add(&p->next, 1);
    if (t >= p->n_tasks) break;
    p->fn(p->ctx, t, thread);
  }
}

static void* helper_main(void* arg) {
  helper_arg_t a = *(helper_arg_t*)arg;
  free(arg);
  tpu_pool_t* p = a.pool;
  (void)tpu_fpenv_enter(); /* helpers only ever run kernels */
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stopping && p->generation == seen)
      pthread_cond_wait(&p->wake, &p->mu);
    if (p->stopping) break;
    seen = p->generation;
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, a.index);
    pthread_mutex_lock(&p->mu);
    if (--p->active == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

tpu_status_t tpu_pool_create(tpu_allocator_t a, int n_threads,
                             tpu_pool_t** out) {
  *out = NULL;
  if (n_threads < 1) n_threads = 1;
  if (n_threads > 256) n_threads = 256;
  tpu_pool_t* p;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*p), "thread pool", (void**)&p));
  p->allocator = a;
  p->n_threads = n_threads;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->next, 0);
  if (n_threads > 1) {
    tpu_status_t st = tpu_alloc_zeroed(a, sizeof(pthread_t) * (size_t)(n_threads - 1),
                                       "thread pool", (void**)&p->threads);
    if (st) {
      tpu_pool_destroy(p);
      return st;
    }
    for (int i = 1; i < n_threads; i++) {
      helper_arg_t* arg = malloc(sizeof(*arg));
      if (!arg) {
        p->n_threads = i;
        tpu_pool_destroy(p);
        return TPU_STATUS(RESOURCE_EXHAUSTED, "cannot start pool thread");
      }
      arg->pool = p;
      arg->index = i;
      if (pthread_create(&p->threads[i - 1], NULL, helper_main, arg) != 0) {
        free(arg);
        p->n_threads = i;
        tpu_pool_destroy(p);
        return TPU_STATUS(RESOURCE_EXHAUSTED,
                          "cannot start pool thread %d of %d", i, n_threads);
      }
    }
  }
  *out = p;
  return NULL;
}

void tpu_pool_destroy(tpu_pool_t* p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stopping = true;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i - 1], NULL);
  tpu_free(p->allocator, p->threads);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  tpu_free(p->allocator, p);
}

int tpu_pool_size(const tpu_pool_t* p) { return p->n_threads; }

void tpu_pool_run(tpu_pool_t* p, int64_t n_tasks, tpu_pool_fn_t fn,
                  void* ctx) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || p->n_threads == 1) {
    for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->n_tasks = n_tasks;
  atomic_store(&p->next, 0);
  p->active = p->n_threads - 1;
  p->generation++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_tasks(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

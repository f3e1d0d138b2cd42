/* A fixed-size worker pool for kernels. The calling thread takes part, so a
 * pool of n threads runs n-1 helper threads. Helper threads run with the
 * kernel floating-point environment (subnormals flushed).
 *
 * Work is split into tasks by index; results must not depend on which thread
 * runs a task, which keeps every kernel bitwise identical for any thread
 * count. */
#ifndef TPU_THREADPOOL_H_
#define TPU_THREADPOOL_H_

#include "tpu/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_pool_s tpu_pool_t;

/* fn(ctx, task, thread) for every task in [0, n_tasks); thread is in
 * [0, tpu_pool_size(pool)) and identifies per-thread scratch. */
typedef void (*tpu_pool_fn_t)(void* ctx, int64_t task, int thread);

/* Creates a pool of n_threads (>= 1) total threads. */
TPU_MUST_USE tpu_status_t tpu_pool_create(tpu_allocator_t a, int n_threads,
                                          tpu_pool_t** out);
void tpu_pool_destroy(tpu_pool_t* pool);
int tpu_pool_size(const tpu_pool_t* pool);

/* Runs all tasks and returns when they are done. Not reentrant: one caller at
 * a time (the device stream owns its pool). n_tasks == 1 runs inline. */
void tpu_pool_run(tpu_pool_t* pool, int64_t n_tasks, tpu_pool_fn_t fn,
                  void* ctx);

#ifdef __cplusplus
}
#endif
#endif

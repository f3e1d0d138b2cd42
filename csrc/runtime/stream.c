/* Streams: an in-order queue of work run by one worker thread per stream.
 *
 * Ordering: every item gets a sequence number at enqueue; the worker runs
 * items in that order and publishes `completed`. A buffer remembers the
 * sequence numbers of the last item that used it and the last that wrote
 * it, which is all a host read or write needs to wait for.
 *
 * Errors: an item that fails poisons its outputs and records the first
 * error (annotated with the item's site); the next synchronization returns
 * it and clears it, so the stream stays usable.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/runtime.h"

typedef enum item_kind_e {
  ITEM_EXEC = 0,
  ITEM_WRITE,
  ITEM_EVENT,
  ITEM_COUNT
} item_kind_t;

struct tpu_event_s {
  tpu_allocator_t allocator;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool recorded;
  bool done;
  uint64_t time_ns;
};

typedef struct item_s {
  item_kind_t kind;
  uint64_t seq;
  struct item_s* next;
  /* exec */
  tpu_executable_t* exe;
  tpu_arg_t* args;
  tpu_arg_t* outs;
  char* site;
  /* write */
  tpu_buffer_t* dst;
  int64_t offset;
  int64_t dims[TPU_MAX_RANK];
  int64_t dst_strides[TPU_MAX_RANK];
  int64_t src_strides[TPU_MAX_RANK];
  tpu_view_t src;
  void* snapshot;
  /* event */
  tpu_event_t* event;
} item_t;

struct tpu_stream_s {
  tpu_device_t* device;
  tpu_allocator_t allocator;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* worker waits for items */
  pthread_cond_t done_cv; /* hosts wait for completion */
  pthread_mutex_t exec_mu; /* serialises synchronous execution */
  item_t *head, *tail;
  uint64_t enqueued;  /* guarded by mu */
  uint64_t completed; /* written under mu, read atomically */
  tpu_status_t error; /* first pending error, guarded by mu */
  uint64_t error_seq; /* its work item */
  uint64_t last_error_seq; /* of the error the last synchronize returned */
  bool synchronous;
  bool inline_busy;   /* an execution runs on an enqueueing thread */
  double inline_flops_max;
  uint64_t inlined;   /* guarded by mu */
  bool stopping;
  bool worker_waiting; /* blocked on work_cv: enqueue must signal */
  bool has_worker;
  pthread_t worker;
};

/* --------------------------------------------------------------- items */

static void item_free(tpu_stream_t* s, item_t* it) {
  if (it->exe) {
    for (int32_t i = 0; i < it->exe->n_params; i++) tpu_buffer_release(it->args[i].buffer);
    for (int32_t j = 0; j < it->exe->n_outputs; j++) tpu_buffer_release(it->outs[j].buffer);
    tpu_executable_release(it->exe);
  }
  tpu_buffer_release(it->dst);
  tpu_free(s->allocator, it->args);
  tpu_free(s->allocator, it->site);
  tpu_free(s->allocator, it->snapshot);
  tpu_free(s->allocator, it);
}

static void poison_outputs(tpu_stream_t* s, tpu_executable_t* exe, const tpu_arg_t* outs) {
  for (int32_t j = 0; j < exe->n_outputs; j++) {
    tpu_output_meta_t* m = &exe->outputs[j];
    tpu_view_t v = {NULL, m->dtype, m->shape.rank, m->shape.dims, m->strides};
    s->device->vtable->poison(s->device, outs[j].buffer, outs[j].byte_offset, &v);
  }
}

static tpu_status_t run_exec(tpu_stream_t* s, tpu_executable_t* exe, const tpu_arg_t* args,
                             const tpu_arg_t* outs, const char* site) {
  tpu_device_t* dev = s->device;
  tpu_status_t st = dev->vtable->execute(dev, exe, args, outs);
  if (st) {
    poison_outputs(s, exe, outs);
    st = tpu_status_annotate(st, "%s", site ? site : "tpu op");
  }
  return st;
}

/* Runs one item. Returns its error (owned) or NULL. */
static tpu_status_t run_item(tpu_stream_t* s, item_t* it) {
  tpu_device_t* dev = s->device;
  switch (it->kind) {
    case ITEM_EXEC:
      return run_exec(s, it->exe, it->args, it->outs, it->site);
    case ITEM_WRITE:
      return dev->vtable->write(dev, it->dst, it->offset, it->dst_strides, &it->src);
    case ITEM_EVENT: {
      tpu_event_t* e = it->event;
      pthread_mutex_lock(&e->mu);
      e->time_ns = tpu_now_ns();
      e->done = true;
      pthread_cond_broadcast(&e->cv);
      pthread_mutex_unlock(&e->mu);
      return NULL;
    }
    default:
      return TPU_STATUS(INTERNAL, "unknown stream item");
  }
}

/* With mu held: keeps the first error (owned) for the next synchronization
 * and publishes the completion of work item seq. */
static void complete_locked(tpu_stream_t* s, uint64_t seq, tpu_status_t st) {
  if (st) {
    if (!s->error) {
      s->error = st;
      s->error_seq = seq;
    } else {
      tpu_status_free(st);
    }
  }
  __atomic_store_n(&s->completed, seq, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&s->done_cv);
}

static void finish_item(tpu_stream_t* s, item_t* it, tpu_status_t st) {
  /* release the item's buffers before publishing completion, so memory a
   * waiter sees as freed is really free */
  uint64_t seq = it->seq;
  item_free(s, it);
  pthread_mutex_lock(&s->mu);
  complete_locked(s, seq, st);
  pthread_mutex_unlock(&s->mu);
}

static void* worker_main(void* arg) {
  tpu_stream_t* s = arg;
  (void)tpu_fpenv_enter(); /* the worker only runs kernels */
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (!s->head && !s->stopping) {
      /* eager code enqueues ops microseconds apart: look for new work for a
       * moment before sleeping, so most enqueues need no wake-up call */
      pthread_mutex_unlock(&s->mu);
      for (int spin = 0; spin < 4000; spin++) {
        if (__atomic_load_n(&s->head, __ATOMIC_ACQUIRE) ||
            __atomic_load_n(&s->stopping, __ATOMIC_ACQUIRE))
          break;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      pthread_mutex_lock(&s->mu);
    }
    while ((!s->head || s->inline_busy) && !s->stopping) {
      s->worker_waiting = true;
      pthread_cond_wait(&s->work_cv, &s->mu);
      s->worker_waiting = false;
    }
    if (!s->head && s->stopping) break;
    if (s->inline_busy) { /* stopping: let the inline execution finish */
      pthread_cond_wait(&s->done_cv, &s->mu);
      continue;
    }
    item_t* it = s->head;
    __atomic_store_n(&s->head, it->next, __ATOMIC_RELEASE);
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->mu);
    tpu_status_t st = run_item(s, it);
    finish_item(s, it, st);
    pthread_mutex_lock(&s->mu);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static void mark_buffers(tpu_executable_t* exe, const tpu_arg_t* args, const tpu_arg_t* outs,
                         uint64_t seq);

/* Publishes an item. In synchronous mode runs it now and returns its error;
 * otherwise hands it to the worker. */
static tpu_status_t submit(tpu_stream_t* s, item_t* it) {
  pthread_mutex_lock(&s->mu);
  it->seq = ++s->enqueued;
  if (it->exe) mark_buffers(it->exe, it->args, it->outs, it->seq);
  if (it->dst) {
    __atomic_store_n(&it->dst->last_use_seq, it->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&it->dst->last_write_seq, it->seq, __ATOMIC_RELAXED);
  }
  if (!s->synchronous) {
    if (s->tail) s->tail->next = it;
    else __atomic_store_n(&s->head, it, __ATOMIC_RELEASE);
    s->tail = it;
    if (s->worker_waiting) pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
  }
  pthread_mutex_unlock(&s->mu);
  /* synchronous: items run in sequence order on the calling threads */
  pthread_mutex_lock(&s->exec_mu);
  tpu_fpenv_t env = tpu_fpenv_enter();
  tpu_status_t st = run_item(s, it);
  tpu_fpenv_leave(env);
  tpu_status_t copy = NULL;
  if (st) copy = tpu_status_make(tpu_status_code(st), tpu_status_file(st),
                                 tpu_status_line(st), "%s", tpu_status_message(st));
  pthread_mutex_unlock(&s->exec_mu);
  uint64_t seq = it->seq;
  tpu_status_free(st);
  item_free(s, it);
  pthread_mutex_lock(&s->mu);
  if (__atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) < seq)
    __atomic_store_n(&s->completed, seq, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&s->done_cv);
  pthread_mutex_unlock(&s->mu);
  return copy;
}

static tpu_status_t new_item(tpu_stream_t* s, item_kind_t kind, item_t** out) {
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(s->allocator, sizeof(item_t), "stream item", (void**)out));
  (*out)->kind = kind;
  return NULL;
}

/* ------------------------------------------------------------- streams */

tpu_status_t tpu_stream_create(tpu_device_t* dev, const tpu_stream_options_t* o,
                               tpu_stream_t** out) {
  *out = NULL;
  tpu_stream_t* s;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(dev->allocator, sizeof(*s), "stream", (void**)&s));
  s->device = dev;
  s->allocator = dev->allocator;
  s->synchronous = o && o->synchronous;
  s->inline_flops_max = o ? o->inline_flops_max : 0;
  pthread_mutex_init(&s->mu, NULL);
  pthread_mutex_init(&s->exec_mu, NULL);
  pthread_cond_init(&s->work_cv, NULL);
  pthread_cond_init(&s->done_cv, NULL);
  if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->exec_mu);
    pthread_cond_destroy(&s->work_cv);
    pthread_cond_destroy(&s->done_cv);
    tpu_free(dev->allocator, s);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "cannot start the stream worker thread");
  }
  s->has_worker = true;
  tpu_device_retain(dev);
  *out = s;
  return NULL;
}

static void wait_seq(tpu_stream_t* s, uint64_t seq) {
  if (__atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) >= seq) return;
  pthread_mutex_lock(&s->mu);
  while (__atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) < seq)
    pthread_cond_wait(&s->done_cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

static void drain(tpu_stream_t* s) {
  pthread_mutex_lock(&s->mu);
  uint64_t target = s->enqueued;
  pthread_mutex_unlock(&s->mu);
  wait_seq(s, target);
}

void tpu_stream_destroy(tpu_stream_t* s) {
  if (!s) return;
  drain(s);
  pthread_mutex_lock(&s->mu);
  __atomic_store_n(&s->stopping, true, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  if (s->has_worker) pthread_join(s->worker, NULL);
  tpu_status_free(s->error);
  pthread_mutex_destroy(&s->mu);
  pthread_mutex_destroy(&s->exec_mu);
  pthread_cond_destroy(&s->work_cv);
  pthread_cond_destroy(&s->done_cv);
  tpu_device_t* dev = s->device;
  tpu_free(s->allocator, s);
  tpu_device_release(dev);
}

void tpu_stream_set_synchronous(tpu_stream_t* s, bool synchronous) {
  drain(s);
  pthread_mutex_lock(&s->mu);
  s->synchronous = synchronous;
  pthread_mutex_unlock(&s->mu);
}

bool tpu_stream_is_synchronous(const tpu_stream_t* s) { return s->synchronous; }

static void mark_buffers(tpu_executable_t* exe, const tpu_arg_t* args, const tpu_arg_t* outs,
                         uint64_t seq) {
  for (int32_t i = 0; i < exe->n_params; i++) {
    tpu_buffer_t* b = args[i].buffer;
    if (b) __atomic_store_n(&b->last_use_seq, seq, __ATOMIC_RELAXED);
  }
  for (int32_t j = 0; j < exe->n_outputs; j++) {
    tpu_buffer_t* b = outs[j].buffer;
    __atomic_store_n(&b->last_use_seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&b->last_write_seq, seq, __ATOMIC_RELAXED);
  }
}

/* Runs a small execution on the calling thread when nothing is queued or
 * running: it takes the next sequence number, so order is as if the worker
 * had run it, and its error is recorded for the next synchronization like
 * any asynchronous error. The caller's references keep the buffers alive
 * for the duration, so nothing is retained. Returns false (doing nothing)
 * when the stream is busy. */
static bool try_inline(tpu_stream_t* s, tpu_executable_t* exe, const tpu_arg_t* args,
                       const tpu_arg_t* outs, const char* site) {
  pthread_mutex_lock(&s->mu);
  if (s->head || s->inline_busy || s->stopping ||
      __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) != s->enqueued) {
    pthread_mutex_unlock(&s->mu);
    return false;
  }
  uint64_t seq = ++s->enqueued;
  s->inline_busy = true;
  s->inlined++;
  mark_buffers(exe, args, outs, seq);
  pthread_mutex_unlock(&s->mu);
  __atomic_add_fetch(&exe->stats.runs, 1, __ATOMIC_RELAXED);
  tpu_fpenv_t env = tpu_fpenv_enter();
  tpu_status_t st = run_exec(s, exe, args, outs, site);
  tpu_fpenv_leave(env);
  pthread_mutex_lock(&s->mu);
  s->inline_busy = false;
  complete_locked(s, seq, st);
  if (s->head && s->worker_waiting) pthread_cond_signal(&s->work_cv);
  pthread_mutex_unlock(&s->mu);
  return true;
}

tpu_status_t tpu_stream_enqueue(tpu_stream_t* s, tpu_executable_t* exe,
                                const tpu_arg_t* args, const tpu_arg_t* outs,
                                const char* site) {
  for (int32_t i = 0; i < exe->n_params; i++) {
    if (exe->param_kinds[i] == TPU_PARAM_BUFFER && !args[i].buffer)
      return TPU_STATUS(INVALID_ARGUMENT, "%s: parameter %d needs a buffer",
                        site ? site : "execute", i);
  }
  for (int32_t j = 0; j < exe->n_outputs; j++)
    if (!outs[j].buffer)
      return TPU_STATUS(INVALID_ARGUMENT, "%s: output %d needs a buffer",
                        site ? site : "execute", j);
  if (!s->synchronous && exe->stats.flops <= s->inline_flops_max && try_inline(s, exe, args, outs, site))
    return NULL;
  item_t* it;
  TPU_RETURN_IF_ERROR(new_item(s, ITEM_EXEC, &it));
  size_t n = (size_t)(exe->n_params + exe->n_outputs);
  tpu_status_t st = tpu_alloc_zeroed(s->allocator, sizeof(tpu_arg_t) * (n ? n : 1),
                                     "stream item", (void**)&it->args);
  if (!st && site) {
    size_t len = strlen(site);
    it->site = tpu_alloc(s->allocator, len + 1);
    if (!it->site) st = TPU_STATUS(RESOURCE_EXHAUSTED, "stream item: host out of memory");
    else memcpy(it->site, site, len + 1);
  }
  if (st) {
    item_free(s, it);
    return st;
  }
  it->outs = it->args + exe->n_params;
  memcpy(it->args, args, sizeof(tpu_arg_t) * (size_t)exe->n_params);
  memcpy(it->outs, outs, sizeof(tpu_arg_t) * (size_t)exe->n_outputs);
  for (int32_t i = 0; i < exe->n_params; i++) tpu_buffer_retain(it->args[i].buffer);
  for (int32_t j = 0; j < exe->n_outputs; j++) tpu_buffer_retain(it->outs[j].buffer);
  tpu_executable_retain(exe);
  it->exe = exe;
  __atomic_add_fetch(&exe->stats.runs, 1, __ATOMIC_RELAXED);
  return submit(s, it);
}

static bool buffer_idle(tpu_stream_t* s, tpu_buffer_t* b) {
  return __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE) >=
         __atomic_load_n(&b->last_use_seq, __ATOMIC_RELAXED);
}

tpu_status_t tpu_stream_write(tpu_stream_t* s, tpu_buffer_t* dst,
                              int64_t offset, const int64_t* dst_strides,
                              const tpu_view_t* src) {
  if (src->rank < 0 || src->rank > TPU_MAX_RANK)
    return TPU_STATUS(INVALID_ARGUMENT, "copy to tpu: rank %d unsupported", src->rank);
  int64_t numel = 1;
  for (int32_t i = 0; i < src->rank; i++) numel *= src->dims[i];
  size_t bytes = (size_t)numel * (size_t)tpu_dtype_size(src->dtype);
  __atomic_add_fetch(&s->device->stats.bytes_h2d, (uint64_t)bytes, __ATOMIC_RELAXED);
  if (buffer_idle(s, dst)) {
    /* nothing queued touches dst: copy now, ordered before later work */
    return s->device->vtable->write(s->device, dst, offset, dst_strides, src);
  }
  /* snapshot the source so the caller may reuse it immediately */
  item_t* it;
  TPU_RETURN_IF_ERROR(new_item(s, ITEM_WRITE, &it));
  it->snapshot = tpu_alloc(s->allocator, bytes ? bytes : 1);
  if (!it->snapshot) {
    item_free(s, it);
    return TPU_STATUS(RESOURCE_EXHAUSTED,
                      "copy to tpu: cannot stage %zu bytes in host memory", bytes);
  }
  memcpy(it->dims, src->dims, sizeof(int64_t) * (size_t)src->rank);
  memcpy(it->dst_strides, dst_strides, sizeof(int64_t) * (size_t)src->rank);
  tpu_shape_t sh = {.rank = src->rank};
  memcpy(sh.dims, src->dims, sizeof(int64_t) * (size_t)src->rank);
  tpu_shape_contiguous_strides(&sh, it->src_strides);
  /* gather the strided source into the contiguous snapshot */
  tpu_view_t snap = {it->snapshot, src->dtype, src->rank, it->dims, it->src_strides};
  {
    int32_t es = tpu_dtype_size(src->dtype);
    int64_t idx[TPU_MAX_RANK] = {0};
    char* out = it->snapshot;
    for (int64_t e = 0; e < numel; e++) {
      int64_t off = 0;
      for (int32_t d = 0; d < src->rank; d++) off += idx[d] * src->strides[d];
      memcpy(out + e * es, (const char*)src->data + off * es, (size_t)es);
      for (int32_t d = src->rank - 1; d >= 0; d--) {
        if (++idx[d] < src->dims[d]) break;
        idx[d] = 0;
      }
    }
  }
  it->src = snap;
  it->dst = dst;
  it->offset = offset;
  tpu_buffer_retain(dst);
  return submit(s, it);
}

/* A pending error surfaces at the next host synchronization of any kind
 * (as CUDA's sticky errors do); taking it clears it. */
static tpu_status_t take_error(tpu_stream_t* s) {
  pthread_mutex_lock(&s->mu);
  tpu_status_t st = s->error;
  if (st) {
    s->last_error_seq = s->error_seq;
    s->error = NULL;
    s->error_seq = 0;
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

tpu_status_t tpu_stream_wait_buffer(tpu_stream_t* s, tpu_buffer_t* buf) {
  wait_seq(s, __atomic_load_n(&buf->last_write_seq, __ATOMIC_RELAXED));
  return take_error(s);
}

tpu_status_t tpu_stream_read(tpu_stream_t* s, tpu_buffer_t* src, int64_t offset,
                             const int64_t* src_strides, const tpu_view_t* dst) {
  TPU_RETURN_IF_ERROR(tpu_stream_wait_buffer(s, src));
  int64_t numel = 1;
  for (int32_t i = 0; i < dst->rank; i++) numel *= dst->dims[i];
  __atomic_add_fetch(&s->device->stats.bytes_d2h,
                     (uint64_t)numel * (uint64_t)tpu_dtype_size(dst->dtype), __ATOMIC_RELAXED);
  return s->device->vtable->read(s->device, src, offset, src_strides, dst);
}

tpu_status_t tpu_stream_synchronize(tpu_stream_t* s) {
  drain(s);
  pthread_mutex_lock(&s->mu);
  tpu_status_t st = s->error;
  s->last_error_seq = st ? s->error_seq : 0;
  s->error = NULL;
  s->error_seq = 0;
  pthread_mutex_unlock(&s->mu);
  return st;
}

uint64_t tpu_stream_last_error_seq(tpu_stream_t* s) {
  pthread_mutex_lock(&s->mu);
  uint64_t v = s->last_error_seq;
  pthread_mutex_unlock(&s->mu);
  return v;
}

uint64_t tpu_stream_enqueued(tpu_stream_t* s) {
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->enqueued;
  pthread_mutex_unlock(&s->mu);
  return n;
}

uint64_t tpu_stream_inlined(tpu_stream_t* s) {
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->inlined;
  pthread_mutex_unlock(&s->mu);
  return n;
}

uint64_t tpu_stream_completed(tpu_stream_t* s) {
  return __atomic_load_n(&s->completed, __ATOMIC_ACQUIRE);
}

bool tpu_stream_has_error(tpu_stream_t* s) {
  pthread_mutex_lock(&s->mu);
  bool e = s->error != NULL;
  pthread_mutex_unlock(&s->mu);
  return e;
}

/* --------------------------------------------------------------- events */

tpu_status_t tpu_event_create(tpu_allocator_t a, tpu_event_t** out) {
  *out = NULL;
  tpu_event_t* e;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*e), "event", (void**)&e));
  e->allocator = a;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  *out = e;
  return NULL;
}

void tpu_event_destroy(tpu_event_t* e) {
  if (!e) return;
  tpu_event_wait(e); /* a queued record still points at e */
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  tpu_free(e->allocator, e);
}

tpu_status_t tpu_stream_record_event(tpu_stream_t* s, tpu_event_t* e) {
  tpu_event_wait(e); /* re-recording waits for the previous record */
  pthread_mutex_lock(&e->mu);
  e->recorded = true;
  e->done = false;
  pthread_mutex_unlock(&e->mu);
  item_t* it;
  TPU_RETURN_IF_ERROR(new_item(s, ITEM_EVENT, &it));
  it->event = e;
  return submit(s, it);
}

bool tpu_event_query(tpu_event_t* e) {
  pthread_mutex_lock(&e->mu);
  bool d = !e->recorded || e->done;
  pthread_mutex_unlock(&e->mu);
  return d;
}

void tpu_event_wait(tpu_event_t* e) {
  pthread_mutex_lock(&e->mu);
  while (e->recorded && !e->done) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
}

tpu_status_t tpu_event_elapsed_ms(tpu_event_t* start, tpu_event_t* end,
                                  double* out) {
  *out = 0;
  tpu_event_wait(start);
  tpu_event_wait(end);
  if (!start->recorded || !end->recorded)
    return TPU_STATUS(FAILED_PRECONDITION,
                      "elapsed_time: both events must be recorded first");
  *out = ((double)end->time_ns - (double)start->time_ns) / 1e6;
  return NULL;
}

/* The runtime: devices, buffers, executables, streams, events and the
 * executable cache.
 *
 * Devices are vtables: a ref-counted base struct at offset 0 plus a const
 * vtable. The vTPU (vtpu/) and a null device that runs nothing (for tests)
 * implement it; a PJRT device will be a third.
 *
 * Asynchrony is explicit: work is enqueued on a stream and runs in order on
 * the stream's worker thread. Each work item retains the buffers it touches,
 * so memory freed by the user while queued work still uses it is released
 * only after that work completes (stream-ordered frees).
 */
#ifndef TPU_RUNTIME_H_
#define TPU_RUNTIME_H_

#include "tpu/base.h"
#include "tpu/compiler.h"
#include "tpu/dtype.h"
#include "tpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_device_s tpu_device_t;
typedef struct tpu_buffer_s tpu_buffer_t;
typedef struct tpu_executable_s tpu_executable_t;
typedef struct tpu_stream_s tpu_stream_t;
typedef struct tpu_event_s tpu_event_t;

/* A rank-0 runtime operand passed by value. Which member is read depends on
 * the parameter's element type: floats read f, unsigned u, the rest i. */
typedef union tpu_scalar_u {
  int64_t i;
  uint64_t u;
  double f;
} tpu_scalar_t;

/* Binding of one executable parameter: a buffer and a byte offset for
 * buffer parameters, a value for scalar parameters. */
typedef struct tpu_arg_s {
  tpu_buffer_t* buffer;
  int64_t byte_offset;
  tpu_scalar_t scalar;
} tpu_arg_t;

/* A strided view of host or device memory (strides in elements). */
typedef struct tpu_view_s {
  void* data;
  tpu_dtype_t dtype;
  int32_t rank;
  const int64_t* dims;
  const int64_t* strides;
} tpu_view_t;

/* ---------------------------------------------------------------- base */

typedef struct tpu_device_vtable_s {
  void (*destroy)(tpu_device_t* dev);
  /* Allocates a buffer of dense bytes accounted as padded bytes. */
  tpu_status_t (*buffer_allocate)(tpu_device_t* dev, uint64_t dense_bytes,
                                  uint64_t padded_bytes, uint64_t tag,
                                  tpu_buffer_t** out);
  /* Releases the memory of a buffer whose last reference is gone. */
  void (*buffer_release)(tpu_device_t* dev, tpu_buffer_t* buf);
  /* Builds a device executable from a compiled graph. */
  tpu_status_t (*executable_create)(tpu_device_t* dev, const tpu_compiled_t* c,
                                    tpu_precision_t precision,
                                    tpu_executable_t** out);
  void (*executable_destroy)(tpu_device_t* dev, tpu_executable_t* exe);
  /* Runs an executable now, on the calling thread (the stream's worker).
   * args has one entry per parameter, outs one per output. */
  tpu_status_t (*execute)(tpu_device_t* dev, tpu_executable_t* exe,
                          const tpu_arg_t* args, const tpu_arg_t* outs);
  /* Copies between host memory and a buffer now (strided on both sides;
   * shapes equal). */
  tpu_status_t (*write)(tpu_device_t* dev, tpu_buffer_t* dst, int64_t offset,
                        const int64_t* dst_strides, const tpu_view_t* src);
  tpu_status_t (*read)(tpu_device_t* dev, tpu_buffer_t* src, int64_t offset,
                       const int64_t* src_strides, const tpu_view_t* dst);
  /* Fills output buffers of failed work with a poison value (NaN/-1). */
  void (*poison)(tpu_device_t* dev, tpu_buffer_t* buf, int64_t offset,
                 const tpu_view_t* view);
} tpu_device_vtable_t;

typedef struct tpu_device_stats_s {
  uint64_t executions;
  uint64_t kernels_run;
  uint64_t bytes_h2d;
  uint64_t bytes_d2h;
} tpu_device_stats_t;

struct tpu_device_s {
  int64_t refcount; /* atomic */
  const tpu_device_vtable_t* vtable;
  tpu_allocator_t allocator;
  char name[64];
  tpu_device_stats_t stats; /* updated atomically */
};

void tpu_device_retain(tpu_device_t* dev);
void tpu_device_release(tpu_device_t* dev);

/* A device that runs nothing: buffers are host memory, execution succeeds
 * without computing. For runtime tests. */
TPU_MUST_USE tpu_status_t tpu_null_device_create(tpu_allocator_t a,
                                                 tpu_device_t** out);

/* -------------------------------------------------------------- buffers */

struct tpu_buffer_s {
  int64_t refcount;         /* atomic */
  tpu_device_t* device;     /* retained */
  void* data;               /* host-addressable memory (vTPU), or NULL */
  uint64_t dense_bytes;
  uint64_t padded_bytes;
  uint64_t last_use_seq;    /* stream sequence of the last work using it */
  uint64_t last_write_seq;  /* ... of the last work writing it */
};

/* Allocates a buffer (refcount 1). RESOURCE_EXHAUSTED on out of memory with
 * the device's message. */
TPU_MUST_USE tpu_status_t tpu_buffer_allocate(tpu_device_t* dev,
                                              uint64_t dense_bytes,
                                              uint64_t padded_bytes,
                                              uint64_t tag,
                                              tpu_buffer_t** out);
/* Thread-safe; the memory is released when the count reaches zero, which
 * may happen on any thread (e.g. a DLPack deleter without the GIL). */
void tpu_buffer_retain(tpu_buffer_t* buf);
void tpu_buffer_release(tpu_buffer_t* buf);

/* ---------------------------------------------------------- executables */

typedef struct tpu_output_meta_s {
  tpu_dtype_t dtype;
  tpu_shape_t shape;
  int64_t strides[TPU_MAX_RANK];
  int32_t alias; /* parameter the output is written into, or -1 */
} tpu_output_meta_t;

typedef struct tpu_exe_stats_s {
  uint64_t runs;
  uint64_t compile_ns;
  int64_t temp_bytes;
  int64_t temp_bytes_saved;
  int32_t n_kernels;
  double flops;           /* per run */
  double bytes_accessed;  /* per run */
} tpu_exe_stats_t;

struct tpu_executable_s {
  int64_t refcount; /* atomic */
  tpu_device_t* device;
  tpu_hash128_t key;
  tpu_precision_t precision;
  int32_t n_params;
  int32_t n_outputs;
  tpu_param_kind_t* param_kinds;
  tpu_dtype_t* param_dtypes;
  tpu_output_meta_t* outputs;
  tpu_exe_stats_t stats;
  char* text; /* the compiled graph as text (for dumps), may be NULL */
  /* Front-end data kept with the executable (e.g. how to bind aten
   * arguments); freed with it. */
  void* user_data;
  void (*user_data_free)(void* user_data);
};

/* Compiles a graph for a device (passes, fusion, planning, codegen). The
 * graph is not kept. */
TPU_MUST_USE tpu_status_t tpu_executable_compile(
    tpu_device_t* dev, const tpu_graph_t* graph, tpu_precision_t precision,
    const tpu_compile_options_t* options, tpu_executable_t** out);
void tpu_executable_retain(tpu_executable_t* exe);
void tpu_executable_release(tpu_executable_t* exe);

/* ------------------------------------------------------ executable cache */

typedef struct tpu_cache_s tpu_cache_t;
typedef struct tpu_cache_stats_s {
  uint64_t hits, misses, evictions, entries, capacity;
} tpu_cache_stats_t;

TPU_MUST_USE tpu_status_t tpu_cache_create(tpu_allocator_t a, int64_t capacity,
                                           tpu_cache_t** out);
void tpu_cache_destroy(tpu_cache_t* c);
/* Returns a retained executable or NULL; counts a hit or a miss. */
tpu_executable_t* tpu_cache_lookup(tpu_cache_t* c, tpu_hash128_t key);
/* Inserts (retains) exe under key, evicting the least recently used entry
 * when full. */
TPU_MUST_USE tpu_status_t tpu_cache_insert(tpu_cache_t* c, tpu_hash128_t key,
                                           tpu_executable_t* exe);
void tpu_cache_stats(tpu_cache_t* c, tpu_cache_stats_t* out);
void tpu_cache_clear(tpu_cache_t* c);
void tpu_cache_set_capacity(tpu_cache_t* c, int64_t capacity);

/* -------------------------------------------------------------- streams */

typedef struct tpu_stream_options_s {
  bool synchronous; /* run work at enqueue on the caller's thread */
  /* Asynchronous streams run an execution on the enqueueing thread instead
   * of handing it to the worker when the stream is idle and the work is at
   * most this many estimated flops (exe->stats.flops): the hand-off costs
   * more than such a kernel. Order and error reporting are unchanged (an
   * error still surfaces at the next synchronization). 0 = never. */
  double inline_flops_max;
} tpu_stream_options_t;

TPU_MUST_USE tpu_status_t tpu_stream_create(tpu_device_t* dev,
                                            const tpu_stream_options_t* o,
                                            tpu_stream_t** out);
/* Waits for queued work, then stops the worker. */
void tpu_stream_destroy(tpu_stream_t* s);
void tpu_stream_set_synchronous(tpu_stream_t* s, bool synchronous);
bool tpu_stream_is_synchronous(const tpu_stream_t* s);

/* Enqueues one execution. args: n_params entries; outs: n_outputs entries
 * (buffer + byte offset). Buffers are retained until the work completes.
 * site names the op and where it was enqueued, for error messages (copied).
 * In synchronous mode the work runs before this returns and its error is
 * returned directly. */
TPU_MUST_USE tpu_status_t tpu_stream_enqueue(tpu_stream_t* s,
                                             tpu_executable_t* exe,
                                             const tpu_arg_t* args,
                                             const tpu_arg_t* outs,
                                             const char* site);

/* Host to device: the source is copied (snapshotted) before this returns,
 * so the caller may overwrite it at once. */
TPU_MUST_USE tpu_status_t tpu_stream_write(tpu_stream_t* s, tpu_buffer_t* dst,
                                           int64_t offset,
                                           const int64_t* dst_strides,
                                           const tpu_view_t* src);
/* Device to host: waits for pending writes to src, then copies; a pending
 * error of earlier work is returned instead (and cleared). */
TPU_MUST_USE tpu_status_t tpu_stream_read(tpu_stream_t* s, tpu_buffer_t* src,
                                          int64_t offset,
                                          const int64_t* src_strides,
                                          const tpu_view_t* dst);
/* Waits until work that writes buf has completed (not other work), then
 * returns (and clears) any pending error of earlier work. */
TPU_MUST_USE tpu_status_t tpu_stream_wait_buffer(tpu_stream_t* s,
                                                 tpu_buffer_t* buf);
/* Waits for all queued work; returns (and clears) the first error any of it
 * raised since the last synchronization. */
TPU_MUST_USE tpu_status_t tpu_stream_synchronize(tpu_stream_t* s);
/* The sequence number of the work whose error the last synchronize
 * returned (0 if none); the n-th enqueued item has sequence number n. */
uint64_t tpu_stream_last_error_seq(tpu_stream_t* s);
/* Number of work items enqueued / completed so far, and of executions run
 * inline on the enqueueing thread. */
uint64_t tpu_stream_enqueued(tpu_stream_t* s);
uint64_t tpu_stream_inlined(tpu_stream_t* s);
uint64_t tpu_stream_completed(tpu_stream_t* s);
/* True if an error is pending (will be raised at the next sync). */
bool tpu_stream_has_error(tpu_stream_t* s);

/* --------------------------------------------------------------- events */

TPU_MUST_USE tpu_status_t tpu_event_create(tpu_allocator_t a,
                                           tpu_event_t** out);
void tpu_event_destroy(tpu_event_t* e);
/* Records the event after the work enqueued so far. */
TPU_MUST_USE tpu_status_t tpu_stream_record_event(tpu_stream_t* s,
                                                  tpu_event_t* e);
bool tpu_event_query(tpu_event_t* e);
void tpu_event_wait(tpu_event_t* e);
/* Milliseconds between two completed events; FAILED_PRECONDITION if either
 * has not completed. */
TPU_MUST_USE tpu_status_t tpu_event_elapsed_ms(tpu_event_t* start,
                                               tpu_event_t* end, double* out);

#ifdef __cplusplus
}
#endif
#endif

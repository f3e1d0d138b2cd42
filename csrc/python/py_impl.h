/* Shared state and helpers of the torchtpu._C extension (CPython API, C). */
#ifndef TPU_PY_IMPL_H_
#define TPU_PY_IMPL_H_

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "tpu/base.h"
#include "tpu/runtime.h"
#include "tpu/vtpu.h"

typedef struct tpu_py_stats_s {
  uint64_t dispatches;     /* calls through an Op handle */
  uint64_t lowerings;      /* calls of a Python lowering (cache misses) */
  uint64_t compiles;       /* executables compiled */
  uint64_t compile_ns;     /* time in lowering + compiling */
  uint64_t executions;     /* executables enqueued */
  uint64_t h2d_bytes, d2h_bytes;
  uint64_t tensors_created;
  uint64_t syncs;          /* host waits on device work */
  uint64_t syncs_read;     /* ... to read a tensor (.cpu(), .item(), print) */
  uint64_t syncs_all;      /* ... for everything (torch.tpu.synchronize) */
  uint64_t syncs_wait;     /* ... for one tensor's pending writes */
  /* dispatch stage timers (ns), with TORCHTPU_PROFILE_DISPATCH=1 */
  uint64_t t_flatten, t_lookup, t_bind, t_alloc, t_enqueue, t_result, t_calls;
} tpu_py_stats_t;

typedef struct tpu_py_state_s {
  bool initialized;
  tpu_device_t* device;
  tpu_stream_t* stream;
  tpu_cache_t* cache;
  PyObject* from_dlpack;                 /* torch._C._from_dlpack */
  PyObject* torch_dtypes[TPU_DTYPE_COUNT];
  PyObject* oom_error;                   /* torch.tpu.OutOfMemoryError */
  PyObject* rng_next;                    /* rng_next(n) -> (seed, offset) */
  PyObject* package_dir;                 /* torchtpu's own source dir (str) */
  PyTypeObject* tensor_type;             /* torch._C.TensorBase */
  uintptr_t hbm_lo, hbm_hi;              /* the vTPU HBM reservation */
  PyObject* str_dtype, *str_shape, *str_stride, *str_data_ptr,
      *str_storage_offset, *str_is_cpu, *str_get_device, *str_item;
  tpu_py_stats_t stats;
  int32_t precision;                     /* override, or -1: follow torch */
  uint64_t config_hash;                  /* chip and compile flags, in every key */
  bool debug_checks;                     /* NaN/Inf checks after each op (debug eager) */
  bool profile;                          /* time dispatch stages */
} tpu_py_state_t;

extern tpu_py_state_t tpu_py;

/* Raises a Python exception for status (and frees it); returns NULL. */
PyObject* tpu_py_raise(tpu_status_t st);
/* Same for an error of asynchronous work returned at a synchronization:
 * names where the failing op was enqueued. */
PyObject* tpu_py_raise_async(tpu_status_t st);
/* Remembers where (Python code and offset) the work just enqueued came
 * from. */
void tpu_py_note_site(void);
/* Same, for int-returning paths: returns -1. */
int tpu_py_raise_int(tpu_status_t st);
/* Requires init() to have run; sets RuntimeError otherwise. */
int tpu_py_check_init(void);

/* Metadata of a torch.Tensor argument. */
typedef struct tpu_py_tensor_s {
  PyObject* obj;          /* borrowed */
  bool is_cpu;
  tpu_dtype_t dtype;
  int32_t rank;
  int64_t dims[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK];
  int64_t storage_offset;
  uintptr_t data_ptr;
} tpu_py_tensor_t;

/* Reads a tensor's metadata; -1 with a Python error for unsupported dtype or
 * rank. */
int tpu_py_tensor_read(PyObject* t, tpu_py_tensor_t* out);
/* dtype code of a torch.dtype object, or -1 (no error set). */
int tpu_py_dtype_code(PyObject* torch_dtype);

/* The buffer behind a tpu tensor and the byte offset of its first element.
 * Returns a borrowed buffer or NULL with a Python error. */
tpu_buffer_t* tpu_py_tensor_buffer(const tpu_py_tensor_t* t, int64_t* byte_offset);

/* Allocates HBM and returns a new tpu tensor of the given layout (new ref),
 * or NULL with a Python error. out_buffer (optional) is borrowed. */
PyObject* tpu_py_new_tensor(tpu_dtype_t dtype, int32_t rank,
                            const int64_t* dims, const int64_t* strides,
                            tpu_buffer_t** out_buffer);

/* The precision matmul-like ops use now, or -1 with a Python error. */
int tpu_py_effective_precision(void);

/* Stage timer for TORCHTPU_PROFILE_DISPATCH: adds the time since *t to
 * counter and restarts the clock. */
static inline void tpu_py_prof(uint64_t* t, uint64_t* counter) {
  if (!tpu_py.profile) return;
  uint64_t now = tpu_now_ns();
  *counter += now - *t;
  *t = now;
}

/* Module pieces. */
int tpu_py_graph_register(PyObject* module);
int tpu_py_dispatch_register(PyObject* module);
extern PyTypeObject TpuGraph_Type;
extern PyTypeObject TpuExecutable_Type;
tpu_graph_t* tpu_py_graph_get(PyObject* obj); /* borrowed, NULL + error */
PyObject* tpu_py_executable_wrap(tpu_executable_t* exe); /* steals exe */
tpu_executable_t* tpu_py_executable_get(PyObject* obj);

/* Binds arguments and enqueues exe; returns a list of the output tensors
 * (new tensors or the aliased inputs). */
PyObject* tpu_py_run(tpu_executable_t* exe, PyObject* const* params,
                     Py_ssize_t n_params, const char* site);
/* Same, with tensor metadata already read (metas[i] for buffer parameters,
 * NULL entries are read from params[i]). */
PyObject* tpu_py_run_ex(tpu_executable_t* exe, PyObject* const* params,
                        const tpu_py_tensor_t* const* metas, Py_ssize_t n_params,
                        const char* site);

#endif

/* torchtpu._C: the CPython extension module (C, no libtorch). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "py_impl.h"

tpu_py_state_t tpu_py;

extern PyMethodDef tpu_py_tensor_methods[];
extern PyMethodDef tpu_py_graph_methods[];

/* ------------------------------------------------------------- errors */

PyObject* tpu_py_raise(tpu_status_t st) {
  if (!st) {
    PyErr_SetString(PyExc_SystemError, "torchtpu: error raised without a status");
    return NULL;
  }
  PyObject* type = PyExc_RuntimeError;
  switch (tpu_status_code(st)) {
    case TPU_STATUS_RESOURCE_EXHAUSTED:
      type = tpu_py.oom_error ? tpu_py.oom_error : PyExc_MemoryError;
      break;
    case TPU_STATUS_UNIMPLEMENTED: type = PyExc_NotImplementedError; break;
    case TPU_STATUS_OUT_OF_RANGE: type = PyExc_IndexError; break;
    case TPU_STATUS_NOT_FOUND: type = PyExc_RuntimeError; break;
    default: break;
  }
  PyErr_SetString(type, tpu_status_message(st));
  tpu_status_free(st);
  return NULL;
}

/* Enqueue sites of recent work: the innermost Python frame's code object
 * and instruction offset, kept for the last SITE_RING items. */
#define SITE_RING 4096
static struct {
  uint64_t seq;
  PyObject* code;
  int lasti;
} g_sites[SITE_RING];

/* True if code belongs to torchtpu itself (its Python kernels), whose frames
 * are skipped so the site names the user's code. */
static bool own_code(PyCodeObject* code) {
  if (!tpu_py.package_dir) return false;
  return PyUnicode_Tailmatch(code->co_filename, tpu_py.package_dir, 0, PY_SSIZE_T_MAX, -1) == 1;
}

/* Executions estimated at up to this many flops run on the Python thread
 * when the stream is idle (measured in bench/eager_overhead.py: the hand-off
 * to the worker costs several microseconds, more than such kernels). */
#define TPU_PY_INLINE_FLOPS_DEFAULT 65536.0

void tpu_py_note_site(void) {
  PyFrameObject* f = PyEval_GetFrame(); /* borrowed */
  if (!f) return;
  Py_INCREF(f);
  for (int depth = 0; depth < 16; depth++) {
    PyCodeObject* c = PyFrame_GetCode(f);
    bool own = own_code(c);
    Py_DECREF(c);
    PyFrameObject* back = own ? PyFrame_GetBack(f) : NULL; /* new reference */
    if (!back) break;
    Py_DECREF(f);
    f = back;
  }
  uint64_t seq = tpu_stream_enqueued(tpu_py.stream);
  size_t i = (size_t)(seq % SITE_RING);
  PyObject* code = (PyObject*)PyFrame_GetCode(f); /* new reference */
  Py_XSETREF(g_sites[i].code, code);
  g_sites[i].seq = seq;
  g_sites[i].lasti = PyFrame_GetLasti(f);
  Py_DECREF(f);
}

static PyObject* py_set_package_dir(PyObject* self, PyObject* arg) {
  (void)self;
  if (!PyUnicode_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "package dir must be a str");
    return NULL;
  }
  Py_INCREF(arg);
  Py_XSETREF(tpu_py.package_dir, arg);
  Py_RETURN_NONE;
}

PyObject* tpu_py_raise_async(tpu_status_t st) {
  uint64_t seq = tpu_stream_last_error_seq(tpu_py.stream);
  size_t i = (size_t)(seq % SITE_RING);
  if (seq && g_sites[i].seq == seq && g_sites[i].code) {
    PyCodeObject* code = (PyCodeObject*)g_sites[i].code;
    int line = PyCode_Addr2Line(code, g_sites[i].lasti);
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* fn = PyUnicode_AsUTF8(code->co_name);
    if (file && fn) {
      st = tpu_status_annotate(st, "error in asynchronous tpu work enqueued at %s:%d in %s; "
                               "rerun with TPU_LAUNCH_BLOCKING=1 for a traceback at the op",
                               file, line, fn);
    }
    PyErr_Clear();
  }
  return tpu_py_raise(st);
}

int tpu_py_raise_int(tpu_status_t st) {
  tpu_py_raise(st);
  return -1;
}

int tpu_py_check_init(void) {
  if (TPU_LIKELY(tpu_py.initialized)) return 0;
  PyErr_SetString(PyExc_RuntimeError, "torchtpu._C.init() has not been called; import torchtpu");
  return -1;
}

/* --------------------------------------------------------------- init */

/* init(chip, blas_path, n_threads, from_dlpack, dtypes, oom_error,
 *      synchronous, cache_capacity, hbm_capacity, host_limit) */
static PyObject* py_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  (void)self;
  static char* kwlist[] = {"chip", "blas_path", "n_threads", "from_dlpack", "dtypes",
                           "oom_error", "synchronous", "cache_capacity", "hbm_capacity",
                           "host_limit", NULL};
  const char* chip = NULL;
  const char* blas = NULL;
  int n_threads = 0, synchronous = 0;
  long long cache_capacity = 4096;
  unsigned long long hbm_capacity = 0, host_limit = 0;
  PyObject *from_dlpack, *dtypes, *oom;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "zziOOO|pLKK", kwlist, &chip, &blas,
                                   &n_threads, &from_dlpack, &dtypes, &oom, &synchronous,
                                   &cache_capacity, &hbm_capacity, &host_limit))
    return NULL;
  if (tpu_py.initialized) {
    PyErr_SetString(PyExc_RuntimeError, "torchtpu._C.init() called twice");
    return NULL;
  }
  PyObject* seq = PySequence_Fast(dtypes, "dtypes must be a sequence");
  if (!seq) return NULL;
  if (PySequence_Fast_GET_SIZE(seq) != TPU_DTYPE_COUNT) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "dtypes must list %d torch dtypes", TPU_DTYPE_COUNT);
    return NULL;
  }
  for (int i = 0; i < TPU_DTYPE_COUNT; i++) {
    tpu_py.torch_dtypes[i] = PySequence_Fast_GET_ITEM(seq, i);
    Py_INCREF(tpu_py.torch_dtypes[i]);
  }
  Py_DECREF(seq);
  if (blas) {
    tpu_status_t st = tpu_blas_load(blas);
    if (st) {
      /* fall back to the reference GEMM; the Python layer reports it */
      tpu_status_free(st);
    }
  }
  tpu_vtpu_options_t o;
  memset(&o, 0, sizeof(o));
  o.chip = chip;
  o.n_threads = n_threads;
  o.hbm_capacity = hbm_capacity;
  o.host_limit = host_limit;
  tpu_status_t st = tpu_vtpu_device_create(tpu_allocator_system(), &o, &tpu_py.device);
  if (st) return tpu_py_raise(st);
  {
    tpu_hbm_t* hbm = tpu_vtpu_device_hbm(tpu_py.device);
    tpu_py.hbm_lo = (uintptr_t)tpu_hbm_base(hbm);
    tpu_py.hbm_hi = tpu_py.hbm_lo + (uintptr_t)tpu_hbm_reserved_bytes(hbm);
  }
  if (!tpu_py.tensor_type) {
    PyObject* tc = PyImport_ImportModule("torch._C");
    PyObject* tb = tc ? PyObject_GetAttrString(tc, "TensorBase") : NULL;
    Py_XDECREF(tc);
    if (!tb || !PyType_Check(tb)) {
      Py_XDECREF(tb);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ImportError, "torch._C.TensorBase not found");
      return NULL;
    }
    tpu_py.tensor_type = (PyTypeObject*)tb;
  }
  tpu_stream_options_t so = {.synchronous = synchronous != 0,
                            .inline_flops_max = TPU_PY_INLINE_FLOPS_DEFAULT};
  const char* inl = getenv("TORCHTPU_INLINE_FLOPS");
  if (inl && *inl) so.inline_flops_max = strtod(inl, NULL);
  st = tpu_stream_create(tpu_py.device, &so, &tpu_py.stream);
  if (!st) st = tpu_cache_create(tpu_allocator_system(), cache_capacity, &tpu_py.cache);
  if (st) {
    tpu_stream_destroy(tpu_py.stream);
    tpu_py.stream = NULL;
    tpu_device_release(tpu_py.device);
    tpu_py.device = NULL;
    return tpu_py_raise(st);
  }
  Py_INCREF(from_dlpack);
  tpu_py.from_dlpack = from_dlpack;
  Py_INCREF(oom);
  tpu_py.oom_error = oom;
  tpu_py.precision = -1;
  {
    const char* e = getenv("TORCHTPU_PROFILE_DISPATCH");
    tpu_py.profile = e && *e && *e != '0';
  }
  {
    /* programs depend on the chip and on the compiler flags */
    tpu_compile_options_t co;
    tpu_compile_options_from_env(&co);
    tpu_hasher_t h;
    tpu_hasher_init(&h, 0x636667);
    const char* cn = tpu_vtpu_device_chip(tpu_py.device)->name;
    tpu_hasher_add_bytes(&h, cn, strlen(cn));
    tpu_hasher_add_u64(&h, ((uint64_t)co.fuse << 2) | ((uint64_t)co.verify_each_pass << 1) |
                               (uint64_t)co.dump);
    tpu_py.config_hash = tpu_hasher_finish(&h).lo;
  }
  tpu_py.initialized = true;
  Py_RETURN_NONE;
}

/* --------------------------------------------------------- device info */

static PyObject* py_device_info(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  const tpu_chip_spec_t* c = tpu_vtpu_device_chip(tpu_py.device);
  return Py_BuildValue(
      "{s:s,s:s,s:i,s:i,s:d,s:d,s:K,s:d,s:K,s:d,s:s,s:i,s:i,s:s,s:s,s:i}", "name", tpu_py.device->name, "chip", c->name,
      "tensorcores", c->tensorcores, "mxu_dim", c->mxu_dim, "peak_bf16_flops",
      c->peak_bf16_flops, "peak_int8_ops", c->peak_int8_ops, "hbm_bytes",
      (unsigned long long)c->hbm_bytes, "hbm_bandwidth", c->hbm_bandwidth, "vmem_bytes",
      (unsigned long long)c->vmem_bytes, "ici_bandwidth", c->ici_bandwidth, "ici_topology",
      c->ici_topology, "pod_chips", c->pod_chips, "host_threads",
      tpu_vtpu_device_threads(tpu_py.device), "blas", tpu_blas_name(), "blas_core",
      tpu_blas_core(), "flush_denormals", (int)tpu_fpenv_flushes());
}

static PyObject* py_chips(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  PyObject* l = PyList_New(0);
  for (int32_t i = 0; l && i < tpu_chip_spec_count(); i++) {
    PyObject* s = PyUnicode_FromString(tpu_chip_spec_at(i)->name);
    if (!s || PyList_Append(l, s) < 0) {
      Py_XDECREF(s);
      Py_DECREF(l);
      return NULL;
    }
    Py_DECREF(s);
  }
  return l;
}

/* ------------------------------------------------------------- memory */

static PyObject* py_memory_stats(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_hbm_stats_t s;
  tpu_hbm_stats(tpu_vtpu_device_hbm(tpu_py.device), &s);
  return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsK}", "capacity", (unsigned long long)s.capacity,
                       "allocated", (unsigned long long)s.allocated, "allocated_dense",
                       (unsigned long long)s.allocated_dense, "peak", (unsigned long long)s.peak,
                       "peak_dense", (unsigned long long)s.peak_dense, "committed",
                       (unsigned long long)s.committed, "largest_free",
                       (unsigned long long)s.largest_free, "free", (unsigned long long)s.free_bytes,
                       "live", (unsigned long long)s.n_live, "allocs",
                       (unsigned long long)s.n_allocs, "frees", (unsigned long long)s.n_frees,
                       "failed", (unsigned long long)s.n_failed);
}

static PyObject* py_reset_peak(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_hbm_reset_peak(tpu_vtpu_device_hbm(tpu_py.device));
  Py_RETURN_NONE;
}

static PyObject* py_empty_cache(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_stream_synchronize(tpu_py.stream);
  tpu_hbm_trim(tpu_vtpu_device_hbm(tpu_py.device));
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise_async(st);
  Py_RETURN_NONE;
}

static PyObject* py_largest_live(PyObject* self, PyObject* arg) {
  (void)self;
  if (tpu_py_check_init() < 0) return NULL;
  long n = PyLong_AsLong(arg);
  if (n < 0 || n > 1024) n = 10;
  tpu_hbm_block_info_t info[1024];
  int32_t k = tpu_hbm_largest_live(tpu_vtpu_device_hbm(tpu_py.device), info, (int32_t)n);
  PyObject* l = PyList_New(k);
  for (int32_t i = 0; l && i < k; i++)
    PyList_SET_ITEM(l, i, Py_BuildValue("(KKK)", (unsigned long long)info[i].dense_bytes,
                                        (unsigned long long)info[i].padded_bytes,
                                        (unsigned long long)info[i].tag));
  return l;
}

/* ------------------------------------------------------ sync and modes */

static PyObject* py_synchronize(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_stream_synchronize(tpu_py.stream);
  Py_END_ALLOW_THREADS
  tpu_py.stats.syncs++;
  tpu_py.stats.syncs_all++;
  if (st) return tpu_py_raise_async(st);
  Py_RETURN_NONE;
}

static PyObject* py_set_synchronous(PyObject* self, PyObject* arg) {
  (void)self;
  if (tpu_py_check_init() < 0) return NULL;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  Py_BEGIN_ALLOW_THREADS
  tpu_stream_set_synchronous(tpu_py.stream, on != 0);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject* py_is_synchronous(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  return PyBool_FromLong(tpu_stream_is_synchronous(tpu_py.stream));
}

/* set_precision(p): -1 follows torch.get_float32_matmul_precision(). */
static PyObject* py_set_precision(PyObject* self, PyObject* arg) {
  (void)self;
  long p = PyLong_AsLong(arg);
  if (p == -1 && PyErr_Occurred()) return NULL;
  if (p < -1 || p >= TPU_PRECISION_COUNT) {
    PyErr_SetString(PyExc_ValueError, "precision must be DEFAULT (0), HIGH (1) or HIGHEST (2)");
    return NULL;
  }
  tpu_py.precision = (int32_t)p;
  Py_RETURN_NONE;
}

int tpu_py_effective_precision(void) {
  if (tpu_py.precision >= 0) return tpu_py.precision;
  /* PyTorch's own setting: "highest" -> HIGHEST, "high" -> HIGH,
   * "medium" -> DEFAULT */
  static PyObject* getter = NULL;
  if (!getter) {
    PyObject* torch = PyImport_ImportModule("torch");
    if (!torch) return -1;
    getter = PyObject_GetAttrString(torch, "get_float32_matmul_precision");
    Py_DECREF(torch);
    if (!getter) return -1;
  }
  PyObject* r = PyObject_CallNoArgs(getter);
  if (!r) return -1;
  const char* s = PyUnicode_AsUTF8(r);
  int p = TPU_PRECISION_HIGHEST;
  if (s && strcmp(s, "high") == 0) p = TPU_PRECISION_HIGH;
  else if (s && strcmp(s, "medium") == 0) p = TPU_PRECISION_DEFAULT;
  Py_DECREF(r);
  return p;
}

static PyObject* py_get_precision(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  int p = tpu_py_effective_precision();
  if (p < 0) return NULL;
  return PyLong_FromLong(p);
}

static PyObject* py_set_debug_checks(PyObject* self, PyObject* arg) {
  (void)self;
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  tpu_py.debug_checks = on != 0;
  Py_RETURN_NONE;
}

static PyObject* py_set_rng_source(PyObject* self, PyObject* fn) {
  (void)self;
  Py_INCREF(fn);
  Py_XSETREF(tpu_py.rng_next, fn);
  Py_RETURN_NONE;
}

static PyObject* py_stream_idle(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  return PyBool_FromLong(tpu_stream_completed(tpu_py.stream) >= tpu_stream_enqueued(tpu_py.stream));
}

/* -------------------------------------------------------------- stats */

static PyObject* py_stats(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_cache_stats_t cs;
  tpu_cache_stats(tpu_py.cache, &cs);
  tpu_py_stats_t* s = &tpu_py.stats;
  tpu_device_stats_t* d = &tpu_py.device->stats;
  return Py_BuildValue(
      "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "dispatches", (unsigned long long)s->dispatches,
      "lowerings", (unsigned long long)s->lowerings, "compiles", (unsigned long long)s->compiles,
      "compile_ns", (unsigned long long)s->compile_ns, "executions",
      (unsigned long long)s->executions, "h2d_bytes", (unsigned long long)s->h2d_bytes,
      "d2h_bytes", (unsigned long long)s->d2h_bytes, "tensors_created",
      (unsigned long long)s->tensors_created, "syncs", (unsigned long long)s->syncs,
      "cache_hits", (unsigned long long)cs.hits, "cache_misses", (unsigned long long)cs.misses,
      "cache_evictions", (unsigned long long)cs.evictions, "cache_entries",
      (unsigned long long)cs.entries, "cache_capacity", (unsigned long long)cs.capacity,
      "device_executions", (unsigned long long)d->executions, "kernels_run",
      (unsigned long long)d->kernels_run, "enqueued",
      (unsigned long long)tpu_stream_enqueued(tpu_py.stream), "inline_executions",
      (unsigned long long)tpu_stream_inlined(tpu_py.stream));
}

static PyObject* py_sync_stats(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  tpu_py_stats_t* s = &tpu_py.stats;
  return Py_BuildValue("{s:K,s:K,s:K}", "read tensor (.cpu/.item/print)",
                       (unsigned long long)s->syncs_read, "torch.tpu.synchronize",
                       (unsigned long long)s->syncs_all, "wait for a tensor",
                       (unsigned long long)s->syncs_wait);
}

static PyObject* py_dispatch_profile(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  tpu_py_stats_t* s = &tpu_py.stats;
  double n = s->t_calls ? (double)s->t_calls : 1.0;
  return Py_BuildValue("{s:K,s:d,s:d,s:d,s:d,s:d,s:d}", "calls", (unsigned long long)s->t_calls,
                       "flatten_and_fingerprint_us", s->t_flatten / n / 1e3,
                       "cache_lookup_us", s->t_lookup / n / 1e3, "bind_us", s->t_bind / n / 1e3,
                       "outputs_us", s->t_alloc / n / 1e3, "enqueue_us", s->t_enqueue / n / 1e3,
                       "result_us", s->t_result / n / 1e3);
}

static PyObject* py_reset_stats(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  memset(&tpu_py.stats, 0, sizeof(tpu_py.stats));
  Py_RETURN_NONE;
}

static PyObject* py_cache_clear(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_cache_clear(tpu_py.cache);
  Py_RETURN_NONE;
}

static PyObject* py_cache_set_capacity(PyObject* self, PyObject* arg) {
  (void)self;
  if (tpu_py_check_init() < 0) return NULL;
  long long n = PyLong_AsLongLong(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
  tpu_cache_set_capacity(tpu_py.cache, n);
  Py_RETURN_NONE;
}

/* -------------------------------------------------------------- events */

static void event_capsule_free(PyObject* cap) {
  tpu_event_destroy(PyCapsule_GetPointer(cap, "tpu_event"));
}

static PyObject* py_event_new(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  tpu_event_t* e;
  tpu_status_t st = tpu_event_create(tpu_allocator_system(), &e);
  if (st) return tpu_py_raise(st);
  return PyCapsule_New(e, "tpu_event", event_capsule_free);
}

static tpu_event_t* event_get(PyObject* cap) {
  return PyCapsule_GetPointer(cap, "tpu_event");
}

static PyObject* py_event_record(PyObject* self, PyObject* cap) {
  (void)self;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_event_t* e = event_get(cap);
  if (!e) return NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_stream_record_event(tpu_py.stream, e);
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise(st);
  Py_RETURN_NONE;
}

static PyObject* py_event_query(PyObject* self, PyObject* cap) {
  (void)self;
  tpu_event_t* e = event_get(cap);
  if (!e) return NULL;
  return PyBool_FromLong(tpu_event_query(e));
}

static PyObject* py_event_wait(PyObject* self, PyObject* cap) {
  (void)self;
  tpu_event_t* e = event_get(cap);
  if (!e) return NULL;
  Py_BEGIN_ALLOW_THREADS
  tpu_event_wait(e);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject* py_event_elapsed(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *a, *b;
  if (!PyArg_ParseTuple(args, "OO", &a, &b)) return NULL;
  tpu_event_t* ea = event_get(a);
  tpu_event_t* eb = event_get(b);
  if (!ea || !eb) return NULL;
  double ms = 0;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_event_elapsed_ms(ea, eb, &ms);
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise(st);
  return PyFloat_FromDouble(ms);
}

/* -------------------------------------------------------------- module */

static PyMethodDef module_methods[] = {
    {"init", (PyCFunction)(void (*)(void))py_init, METH_VARARGS | METH_KEYWORDS,
     "init(chip, blas_path, n_threads, from_dlpack, dtypes, oom_error, ...)"},
    {"device_info", py_device_info, METH_NOARGS, "chip facts of the vTPU"},
    {"chips", py_chips, METH_NOARGS, "known chip names"},
    {"memory_stats", py_memory_stats, METH_NOARGS, "HBM statistics"},
    {"reset_peak_memory_stats", py_reset_peak, METH_NOARGS, "reset HBM peaks"},
    {"empty_cache", py_empty_cache, METH_NOARGS, "release cached host pages"},
    {"largest_live", py_largest_live, METH_O, "largest live allocations"},
    {"synchronize", py_synchronize, METH_NOARGS, "wait for all queued work"},
    {"set_synchronous", py_set_synchronous, METH_O, "debug eager on/off"},
    {"is_synchronous", py_is_synchronous, METH_NOARGS, "debug eager?"},
    {"set_precision", py_set_precision, METH_O, "matmul precision for new ops"},
    {"get_precision", py_get_precision, METH_NOARGS, "effective matmul precision"},
    {"stream_idle", py_stream_idle, METH_NOARGS, "all queued work done?"},
    {"set_rng_source", py_set_rng_source, METH_O, "rng_next(n) -> (seed, offset)"},
    {"set_debug_checks", py_set_debug_checks, METH_O, "NaN/Inf checks in debug eager"},
    {"set_package_dir", py_set_package_dir, METH_O, "frames to skip in enqueue sites"},
    {"stats", py_stats, METH_NOARGS, "dispatch/compile/cache counters"},
    {"reset_stats", py_reset_stats, METH_NOARGS, "zero the counters"},
    {"sync_stats", py_sync_stats, METH_NOARGS, "host synchronizations by cause"},
    {"dispatch_profile", py_dispatch_profile, METH_NOARGS,
     "mean us per dispatch stage (TORCHTPU_PROFILE_DISPATCH=1)"},
    {"cache_clear", py_cache_clear, METH_NOARGS, "drop cached executables"},
    {"cache_set_capacity", py_cache_set_capacity, METH_O, "bound the executable cache"},
    {"event_new", py_event_new, METH_NOARGS, "new event"},
    {"event_record", py_event_record, METH_O, "record event on the stream"},
    {"event_query", py_event_query, METH_O, "event done?"},
    {"event_wait", py_event_wait, METH_O, "wait for event"},
    {"event_elapsed", py_event_elapsed, METH_VARARGS, "ms between events"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "torchtpu._C", "torchtpu's C core (virtual TPU runtime).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

static int add_methods(PyObject* m, PyMethodDef* defs) {
  for (PyMethodDef* d = defs; d->ml_name; d++) {
    PyObject* f = PyCFunction_NewEx(d, NULL, PyModule_GetNameObject(m));
    if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
      Py_XDECREF(f);
      return -1;
    }
  }
  return 0;
}

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (add_methods(m, module_methods) < 0 || add_methods(m, tpu_py_tensor_methods) < 0 ||
      add_methods(m, tpu_py_graph_methods) < 0 || tpu_py_graph_register(m) < 0 ||
      tpu_py_dispatch_register(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  tpu_py.str_dtype = PyUnicode_InternFromString("dtype");
  tpu_py.str_shape = PyUnicode_InternFromString("shape");
  tpu_py.str_stride = PyUnicode_InternFromString("stride");
  tpu_py.str_data_ptr = PyUnicode_InternFromString("data_ptr");
  tpu_py.str_storage_offset = PyUnicode_InternFromString("storage_offset");
  tpu_py.str_is_cpu = PyUnicode_InternFromString("is_cpu");
  tpu_py.str_get_device = PyUnicode_InternFromString("get_device");
  tpu_py.str_item = PyUnicode_InternFromString("item");
  PyModule_AddIntConstant(m, "PRECISION_DEFAULT", TPU_PRECISION_DEFAULT);
  PyModule_AddIntConstant(m, "PRECISION_HIGH", TPU_PRECISION_HIGH);
  PyModule_AddIntConstant(m, "PRECISION_HIGHEST", TPU_PRECISION_HIGHEST);
  PyModule_AddIntConstant(m, "MAX_RANK", TPU_MAX_RANK);
  PyModule_AddIntConstant(m, "VPU_CHUNK", 1024);
  PyObject* names = PyList_New(TPU_DTYPE_COUNT);
  for (int i = 0; names && i < TPU_DTYPE_COUNT; i++)
    PyList_SET_ITEM(names, i, PyUnicode_FromString(tpu_dtype_info((tpu_dtype_t)i)->name));
  PyModule_AddObject(m, "dtype_names", names);
  PyObject* ops = PyList_New(TPU_OP_COUNT);
  for (int i = 0; ops && i < TPU_OP_COUNT; i++)
    PyList_SET_ITEM(ops, i, PyUnicode_FromString(tpu_op_info((tpu_opcode_t)i)->name));
  PyModule_AddObject(m, "ir_ops", ops);
  return m;
}

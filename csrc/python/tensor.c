/* Tensors: torch.Tensor metadata, HBM-backed tensors made through DLPack,
 * and host <-> device copies.
 *
 * A tpu tensor's storage is a vTPU buffer. PyTorch sees it through a DLPack
 * capsule on kDLExtDev (PrivateUse1); the capsule's deleter drops our
 * reference, possibly on another thread and without the GIL. We find the
 * buffer of a tensor again from its storage's base address.
 */
#include <pthread.h>
#include <string.h>

#include "dlpack.h"
#include "py_impl.h"

/* ---------------------------------------------------- the buffer map */

typedef struct {
  uintptr_t key;
  tpu_buffer_t* buf;
} slot_t;

static struct {
  pthread_mutex_t mu;
  slot_t* slots;
  size_t cap, used, tombstones;
} g_map = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 0};

#define TOMB ((uintptr_t)1)

static inline size_t hash_ptr(uintptr_t p) {
  uint64_t x = (uint64_t)p >> 6;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ull;
  return (size_t)(x ^ (x >> 29));
}

static int map_rehash(size_t cap) {
  slot_t* ns = calloc(cap, sizeof(slot_t));
  if (!ns) return -1;
  for (size_t i = 0; i < g_map.cap; i++) {
    uintptr_t k = g_map.slots[i].key;
    if (k == 0 || k == TOMB) continue;
    size_t j = hash_ptr(k) & (cap - 1);
    while (ns[j].key) j = (j + 1) & (cap - 1);
    ns[j] = g_map.slots[i];
  }
  free(g_map.slots);
  g_map.slots = ns;
  g_map.cap = cap;
  g_map.tombstones = 0;
  return 0;
}

static int map_insert(uintptr_t key, tpu_buffer_t* buf) {
  pthread_mutex_lock(&g_map.mu);
  if ((g_map.used + g_map.tombstones + 1) * 2 > g_map.cap) {
    size_t cap = g_map.cap ? g_map.cap : 1024;
    while ((g_map.used + 1) * 2 > cap / 2) cap *= 2;
    if (map_rehash(cap) != 0) {
      pthread_mutex_unlock(&g_map.mu);
      return -1;
    }
  }
  size_t j = hash_ptr(key) & (g_map.cap - 1);
  while (g_map.slots[j].key != 0 && g_map.slots[j].key != TOMB) j = (j + 1) & (g_map.cap - 1);
  if (g_map.slots[j].key == TOMB) g_map.tombstones--;
  g_map.slots[j].key = key;
  g_map.slots[j].buf = buf;
  g_map.used++;
  pthread_mutex_unlock(&g_map.mu);
  return 0;
}

static void map_remove(uintptr_t key, tpu_buffer_t* buf) {
  pthread_mutex_lock(&g_map.mu);
  if (g_map.cap) {
    size_t j = hash_ptr(key) & (g_map.cap - 1);
    while (g_map.slots[j].key != 0) {
      if (g_map.slots[j].key == key && g_map.slots[j].buf == buf) {
        g_map.slots[j].key = TOMB;
        g_map.slots[j].buf = NULL;
        g_map.used--;
        g_map.tombstones++;
        break;
      }
      j = (j + 1) & (g_map.cap - 1);
    }
  }
  pthread_mutex_unlock(&g_map.mu);
}

static tpu_buffer_t* map_find(uintptr_t key) {
  tpu_buffer_t* r = NULL;
  pthread_mutex_lock(&g_map.mu);
  if (g_map.cap) {
    size_t j = hash_ptr(key) & (g_map.cap - 1);
    while (g_map.slots[j].key != 0) {
      if (g_map.slots[j].key == key) {
        r = g_map.slots[j].buf;
        break;
      }
      j = (j + 1) & (g_map.cap - 1);
    }
  }
  pthread_mutex_unlock(&g_map.mu);
  return r;
}

/* ------------------------------------------------------ tensor reading */

int tpu_py_dtype_code(PyObject* dt) {
  for (int i = 0; i < TPU_DTYPE_COUNT; i++)
    if (tpu_py.torch_dtypes[i] == dt) return i;
  return -1;
}

static int read_int_tuple(PyObject* seq, int64_t* out, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    PyObject* o = PyTuple_GET_ITEM(seq, i);
    out[i] = PyLong_AsLongLong(o);
    if (out[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

int tpu_py_tensor_read(PyObject* t, tpu_py_tensor_t* out) {
  out->obj = t;
  PyObject* dt = PyObject_GetAttr(t, tpu_py.str_dtype);
  if (!dt) return -1;
  int code = tpu_py_dtype_code(dt);
  if (code < 0) {
    PyObject* r = PyObject_Repr(dt);
    PyErr_Format(PyExc_TypeError, "dtype %s is not supported on tpu",
                 r ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    Py_DECREF(dt);
    return -1;
  }
  Py_DECREF(dt);
  out->dtype = (tpu_dtype_t)code;
  PyObject* shape = PyObject_GetAttr(t, tpu_py.str_shape);
  if (!shape) return -1;
  Py_ssize_t rank = PyTuple_Size(shape);
  if (rank < 0 || rank > TPU_MAX_RANK) {
    Py_DECREF(shape);
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_NotImplementedError,
                   "tensors with %zd dimensions are not supported on tpu (at most %d)",
                   rank, TPU_MAX_RANK);
    return -1;
  }
  out->rank = (int32_t)rank;
  int rc = read_int_tuple(shape, out->dims, out->rank);
  Py_DECREF(shape);
  if (rc) return -1;
  PyObject* st = PyObject_CallMethodNoArgs(t, tpu_py.str_stride);
  if (!st) return -1;
  rc = read_int_tuple(st, out->strides, out->rank);
  Py_DECREF(st);
  if (rc) return -1;
  PyObject* off = PyObject_CallMethodNoArgs(t, tpu_py.str_storage_offset);
  if (!off) return -1;
  out->storage_offset = PyLong_AsLongLong(off);
  Py_DECREF(off);
  PyObject* ptr = PyObject_CallMethodNoArgs(t, tpu_py.str_data_ptr);
  if (!ptr) return -1;
  out->data_ptr = (uintptr_t)PyLong_AsUnsignedLongLong(ptr);
  Py_DECREF(ptr);
  if (PyErr_Occurred()) return -1;
  if (out->data_ptr) {
    /* nothing but tpu storage lies in the HBM reservation */
    out->is_cpu = !(out->data_ptr >= tpu_py.hbm_lo && out->data_ptr < tpu_py.hbm_hi);
  } else {
    PyObject* cpu = PyObject_GetAttr(t, tpu_py.str_is_cpu);
    if (!cpu) return -1;
    out->is_cpu = cpu == Py_True;
    Py_DECREF(cpu);
  }
  return 0;
}

/* Tensors without elements may carry no data pointer at all; kernels never
 * touch them, so they bind to one shared, empty buffer. */
static tpu_buffer_t* empty_buffer(void) {
  static tpu_buffer_t* buf = NULL;
  if (!buf) {
    tpu_status_t st = tpu_buffer_allocate(tpu_py.device, 0, 0, 0, &buf);
    if (st) {
      tpu_py_raise(st);
      return NULL;
    }
  }
  return buf;
}

tpu_buffer_t* tpu_py_tensor_buffer(const tpu_py_tensor_t* t, int64_t* byte_offset) {
  for (int32_t i = 0; i < t->rank; i++) {
    if (t->dims[i] == 0) {
      *byte_offset = 0;
      return empty_buffer();
    }
  }
  int64_t off = t->storage_offset * tpu_dtype_size(t->dtype);
  uintptr_t base = t->data_ptr - (uintptr_t)off;
  tpu_buffer_t* b = map_find(base);
  if (!b) {
    PyErr_SetString(PyExc_RuntimeError,
                    "tensor on tpu has storage that torchtpu did not allocate; "
                    "create tpu tensors with torch factories or .to('tpu')");
    return NULL;
  }
  *byte_offset = off;
  return b;
}

/* ---------------------------------------------------- tensor creation */

typedef struct {
  tpu_dl_managed_t managed;
  tpu_buffer_t* buffer;
  int64_t shape[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK];
} managed_t;

static void managed_delete(tpu_dl_managed_t* m) {
  managed_t* mt = (managed_t*)m;
  map_remove((uintptr_t)mt->buffer->data, mt->buffer);
  tpu_buffer_release(mt->buffer);
  free(mt);
}

static void capsule_destructor(PyObject* cap) {
  /* still named "dltensor": PyTorch never took it */
  if (PyCapsule_IsValid(cap, "dltensor")) {
    tpu_dl_managed_t* m = PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
  }
}

PyObject* tpu_py_new_tensor(tpu_dtype_t dtype, int32_t rank, const int64_t* dims,
                            const int64_t* strides, tpu_buffer_t** out_buffer) {
  if (tpu_py_check_init() < 0) return NULL;
  tpu_shape_t sh;
  tpu_status_t st = tpu_shape_make(rank, dims, &sh);
  if (st) return tpu_py_raise(st);
  int64_t numel = tpu_shape_numel(&sh);
  int64_t extent = numel ? 1 : 0;
  bool contiguous = true;
  int64_t cs[TPU_MAX_RANK];
  tpu_shape_contiguous_strides(&sh, cs);
  for (int32_t i = 0; i < rank && numel; i++) {
    if (strides[i] < 0) {
      PyErr_SetString(PyExc_RuntimeError, "negative strides are not supported on tpu");
      return NULL;
    }
    extent += (dims[i] - 1) * strides[i];
    if (dims[i] != 1 && strides[i] != cs[i]) contiguous = false;
  }
  int32_t es = tpu_dtype_size(dtype);
  if (extent > INT64_MAX / 16) {
    PyErr_Format(PyExc_RuntimeError, "tensor too large for tpu: %lld elements", (long long)extent);
    return NULL;
  }
  uint64_t dense = (uint64_t)(extent * es);
  int64_t padded;
  if (contiguous) {
    padded = tpu_tpu_padded_bytes(dtype, &sh);
  } else {
    tpu_shape_t flat = {.rank = 1, .dims = {extent}};
    padded = tpu_tpu_padded_bytes(dtype, &flat);
  }
  if (padded < 0) {
    PyErr_SetString(PyExc_RuntimeError, "tensor size overflows");
    return NULL;
  }
  tpu_buffer_t* buf = NULL;
  st = tpu_buffer_allocate(tpu_py.device, dense, (uint64_t)padded, (uint64_t)numel, &buf);
  if (st) return tpu_py_raise(st);
  managed_t* mt = calloc(1, sizeof(*mt));
  if (!mt || map_insert((uintptr_t)buf->data, buf) != 0) {
    free(mt);
    tpu_buffer_release(buf);
    return PyErr_NoMemory();
  }
  mt->buffer = buf;
  memcpy(mt->shape, dims, sizeof(int64_t) * (size_t)rank);
  memcpy(mt->strides, strides, sizeof(int64_t) * (size_t)rank);
  const tpu_dtype_info_t* info = tpu_dtype_info(dtype);
  mt->managed.dl_tensor.data = buf->data;
  mt->managed.dl_tensor.device.device_type = TPU_DLPACK_EXT_DEV;
  mt->managed.dl_tensor.device.device_id = 0;
  mt->managed.dl_tensor.ndim = rank;
  mt->managed.dl_tensor.dtype.code = info->dlpack_code;
  mt->managed.dl_tensor.dtype.bits = info->dlpack_bits;
  mt->managed.dl_tensor.dtype.lanes = 1;
  mt->managed.dl_tensor.shape = mt->shape;
  mt->managed.dl_tensor.strides = mt->strides;
  mt->managed.dl_tensor.byte_offset = 0;
  mt->managed.manager_ctx = mt;
  mt->managed.deleter = managed_delete;
  PyObject* cap = PyCapsule_New(&mt->managed, "dltensor", capsule_destructor);
  if (!cap) {
    managed_delete(&mt->managed);
    return NULL;
  }
  PyObject* t = PyObject_CallOneArg(tpu_py.from_dlpack, cap);
  Py_DECREF(cap);
  if (!t) return NULL;
  tpu_py.stats.tensors_created++;
  if (out_buffer) *out_buffer = buf;
  return t;
}

/* ------------------------------------------------------------- copies */

static tpu_view_t host_view(const tpu_py_tensor_t* t) {
  tpu_view_t v = {(void*)t->data_ptr, t->dtype, t->rank, t->dims, t->strides};
  return v;
}

static int same_layout_check(const tpu_py_tensor_t* a, const tpu_py_tensor_t* b,
                             const char* what) {
  if (a->dtype != b->dtype || a->rank != b->rank) {
    PyErr_Format(PyExc_RuntimeError, "%s: dtype/rank mismatch", what);
    return -1;
  }
  for (int32_t i = 0; i < a->rank; i++) {
    if (a->dims[i] != b->dims[i]) {
      PyErr_Format(PyExc_RuntimeError, "%s: shape mismatch at dim %d", what, i);
      return -1;
    }
  }
  return 0;
}

/* copy_h2d(dst_tpu, src_cpu): same dtype and shape; src may be strided or
 * expanded. The source is read before this returns. */
static PyObject* py_copy_h2d(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *dst, *src;
  if (!PyArg_ParseTuple(args, "OO", &dst, &src)) return NULL;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_py_tensor_t d, s;
  if (tpu_py_tensor_read(dst, &d) < 0 || tpu_py_tensor_read(src, &s) < 0) return NULL;
  if (same_layout_check(&d, &s, "copy to tpu") < 0) return NULL;
  if (!s.data_ptr) {
    int64_t n = 1;
    for (int32_t i = 0; i < s.rank; i++) n *= s.dims[i];
    if (n) {
      PyErr_SetString(PyExc_RuntimeError,
                      "copy to tpu: the source tensor has no data (an efficient zero "
                      "tensor or a meta tensor); materialize it first");
      return NULL;
    }
    Py_RETURN_NONE;
  }
  int64_t off;
  tpu_buffer_t* b = tpu_py_tensor_buffer(&d, &off);
  if (!b) return NULL;
  tpu_view_t v = host_view(&s);
  tpu_status_t st = tpu_stream_write(tpu_py.stream, b, off, d.strides, &v);
  if (st) return tpu_py_raise(st);
  int64_t n = 1;
  for (int32_t i = 0; i < s.rank; i++) n *= s.dims[i];
  tpu_py.stats.h2d_bytes += (uint64_t)(n * tpu_dtype_size(s.dtype));
  Py_RETURN_NONE;
}

/* copy_d2h(dst_cpu, src_tpu): waits for pending writes to src. */
static PyObject* py_copy_d2h(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *dst, *src;
  if (!PyArg_ParseTuple(args, "OO", &dst, &src)) return NULL;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_py_tensor_t d, s;
  if (tpu_py_tensor_read(dst, &d) < 0 || tpu_py_tensor_read(src, &s) < 0) return NULL;
  if (same_layout_check(&d, &s, "copy from tpu") < 0) return NULL;
  if (!d.data_ptr) {
    int64_t n = 1;
    for (int32_t i = 0; i < d.rank; i++) n *= d.dims[i];
    if (n) {
      PyErr_SetString(PyExc_RuntimeError, "copy from tpu: the destination has no data");
      return NULL;
    }
    Py_RETURN_NONE;
  }
  int64_t off;
  tpu_buffer_t* b = tpu_py_tensor_buffer(&s, &off);
  if (!b) return NULL;
  tpu_view_t v = host_view(&d);
  tpu_status_t st;
  tpu_buffer_retain(b);
  Py_BEGIN_ALLOW_THREADS
  st = tpu_stream_read(tpu_py.stream, b, off, s.strides, &v);
  Py_END_ALLOW_THREADS
  tpu_buffer_release(b);
  if (st) return tpu_py_raise_async(st);
  int64_t n = 1;
  for (int32_t i = 0; i < s.rank; i++) n *= s.dims[i];
  tpu_py.stats.d2h_bytes += (uint64_t)(n * tpu_dtype_size(s.dtype));
  tpu_py.stats.syncs++;
  tpu_py.stats.syncs_read++;
  Py_RETURN_NONE;
}

/* empty(shape, strides, dtype_code) -> tensor */
static PyObject* py_empty(PyObject* self, PyObject* args) {
  (void)self;
  PyObject *shape, *strides;
  int dtype;
  if (!PyArg_ParseTuple(args, "OOi", &shape, &strides, &dtype)) return NULL;
  if (!tpu_dtype_valid(dtype)) {
    PyErr_SetString(PyExc_ValueError, "invalid dtype code");
    return NULL;
  }
  PyObject* sh = PySequence_Tuple(shape);
  if (!sh) return NULL;
  Py_ssize_t rank = PyTuple_GET_SIZE(sh);
  if (rank > TPU_MAX_RANK) {
    Py_DECREF(sh);
    PyErr_Format(PyExc_NotImplementedError,
                 "tensors with %zd dimensions are not supported on tpu (at most %d)",
                 rank, TPU_MAX_RANK);
    return NULL;
  }
  int64_t dims[TPU_MAX_RANK], st[TPU_MAX_RANK];
  int rc = read_int_tuple(sh, dims, (int32_t)rank);
  Py_DECREF(sh);
  if (rc) return NULL;
  for (Py_ssize_t i = 0; i < rank; i++) {
    if (dims[i] < 0) {
      PyErr_Format(PyExc_RuntimeError,
                   "Trying to create tensor with negative dimension %lld: [%lld]",
                   (long long)dims[i], (long long)dims[i]);
      return NULL;
    }
  }
  if (strides == Py_None) {
    tpu_shape_t s = {.rank = (int32_t)rank};
    memcpy(s.dims, dims, sizeof(int64_t) * (size_t)rank);
    tpu_shape_contiguous_strides(&s, st);
  } else {
    PyObject* stt = PySequence_Tuple(strides);
    if (!stt) return NULL;
    if (PyTuple_GET_SIZE(stt) != rank) {
      Py_DECREF(stt);
      PyErr_SetString(PyExc_RuntimeError, "empty_strided: strides and size differ in length");
      return NULL;
    }
    rc = read_int_tuple(stt, st, (int32_t)rank);
    Py_DECREF(stt);
    if (rc) return NULL;
  }
  return tpu_py_new_tensor((tpu_dtype_t)dtype, (int32_t)rank, dims, st, NULL);
}

/* buffer_info(tensor) -> (base address, byte offset, dense bytes, padded
 * bytes) of a tpu tensor's storage. */
static PyObject* py_buffer_info(PyObject* self, PyObject* arg) {
  (void)self;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_py_tensor_t t;
  if (tpu_py_tensor_read(arg, &t) < 0) return NULL;
  int64_t off;
  tpu_buffer_t* b = tpu_py_tensor_buffer(&t, &off);
  if (!b) return NULL;
  return Py_BuildValue("(KLKK)", (unsigned long long)(uintptr_t)b->data, (long long)off,
                       (unsigned long long)b->dense_bytes, (unsigned long long)b->padded_bytes);
}

/* wait_tensor(tensor): waits until pending writes to its storage finish. */
static PyObject* py_wait_tensor(PyObject* self, PyObject* arg) {
  (void)self;
  if (tpu_py_check_init() < 0) return NULL;
  tpu_py_tensor_t t;
  if (tpu_py_tensor_read(arg, &t) < 0) return NULL;
  int64_t off;
  tpu_buffer_t* b = tpu_py_tensor_buffer(&t, &off);
  if (!b) return NULL;
  tpu_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = tpu_stream_wait_buffer(tpu_py.stream, b);
  Py_END_ALLOW_THREADS
  if (st) return tpu_py_raise_async(st);
  tpu_py.stats.syncs++;
  tpu_py.stats.syncs_wait++;
  Py_RETURN_NONE;
}

PyMethodDef tpu_py_tensor_methods[] = {
    {"copy_h2d", py_copy_h2d, METH_VARARGS, "copy_h2d(dst_tpu, src_cpu)"},
    {"copy_d2h", py_copy_d2h, METH_VARARGS, "copy_d2h(dst_cpu, src_tpu)"},
    {"empty", py_empty, METH_VARARGS, "empty(shape, strides|None, dtype_code) -> tpu tensor"},
    {"buffer_info", py_buffer_info, METH_O, "buffer_info(t) -> (base, offset, dense, padded)"},
    {"wait_tensor", py_wait_tensor, METH_O, "wait for pending writes to t"},
    {NULL, NULL, 0, NULL},
};

/* Device, buffer and executable base objects, and the null device. */
#include <stdlib.h>
#include <string.h>

#include "runtime_impl.h"

static inline int64_t ref_inc(int64_t* r) {
  return __atomic_add_fetch(r, 1, __ATOMIC_RELAXED);
}
static inline int64_t ref_dec(int64_t* r) {
  return __atomic_sub_fetch(r, 1, __ATOMIC_ACQ_REL);
}

void tpu_device_retain(tpu_device_t* dev) {
  if (dev) ref_inc(&dev->refcount);
}

void tpu_device_release(tpu_device_t* dev) {
  if (dev && ref_dec(&dev->refcount) == 0) dev->vtable->destroy(dev);
}

/* -------------------------------------------------------------- buffers */

tpu_status_t tpu_buffer_allocate(tpu_device_t* dev, uint64_t dense_bytes,
                                 uint64_t padded_bytes, uint64_t tag,
                                 tpu_buffer_t** out) {
  *out = NULL;
  if (padded_bytes < dense_bytes) padded_bytes = dense_bytes;
  tpu_buffer_t* b = NULL;
  TPU_RETURN_IF_ERROR(dev->vtable->buffer_allocate(dev, dense_bytes, padded_bytes, tag, &b));
  b->refcount = 1;
  b->device = dev;
  b->dense_bytes = dense_bytes;
  b->padded_bytes = padded_bytes;
  b->last_use_seq = 0;
  b->last_write_seq = 0;
  tpu_device_retain(dev);
  *out = b;
  return NULL;
}

void tpu_buffer_retain(tpu_buffer_t* b) {
  if (b) ref_inc(&b->refcount);
}

void tpu_buffer_release(tpu_buffer_t* b) {
  if (!b || ref_dec(&b->refcount) != 0) return;
  tpu_device_t* dev = b->device;
  dev->vtable->buffer_release(dev, b);
  tpu_device_release(dev);
}

/* ---------------------------------------------------------- executables */

tpu_status_t tpu_executable_compile(tpu_device_t* dev, const tpu_graph_t* graph,
                                    tpu_precision_t precision,
                                    const tpu_compile_options_t* options,
                                    tpu_executable_t** out) {
  *out = NULL;
  if ((unsigned)precision >= TPU_PRECISION_COUNT)
    return TPU_STATUS(INVALID_ARGUMENT, "invalid precision %d", (int)precision);
  tpu_compiled_t* c = NULL;
  TPU_RETURN_IF_ERROR(tpu_compile(graph, options, &c));
  tpu_executable_t* exe = NULL;
  tpu_status_t st = dev->vtable->executable_create(dev, c, precision, &exe);
  if (!st) {
    exe->refcount = 1;
    exe->device = dev;
    exe->precision = precision;
    exe->stats.compile_ns = c->compile_ns;
    exe->stats.temp_bytes = c->temp_bytes;
    exe->stats.temp_bytes_saved = c->temp_bytes_unplanned - c->temp_bytes;
    exe->stats.n_kernels = c->n_kernels;
    tpu_device_retain(dev);
    *out = exe;
  }
  tpu_compiled_destroy(c);
  return st;
}

void tpu_executable_retain(tpu_executable_t* exe) {
  if (exe) ref_inc(&exe->refcount);
}

void tpu_executable_release(tpu_executable_t* exe) {
  if (!exe || ref_dec(&exe->refcount) != 0) return;
  if (exe->user_data_free) exe->user_data_free(exe->user_data);
  tpu_device_t* dev = exe->device;
  dev->vtable->executable_destroy(dev, exe);
  tpu_device_release(dev);
}

/* Fills the common part of an executable from a compiled graph; backends
 * call this from executable_create. */
tpu_status_t tpu_executable_init_common(tpu_allocator_t a,
                                        const tpu_compiled_t* c,
                                        tpu_executable_t* exe) {
  const tpu_graph_t* g = c->graph;
  exe->n_params = tpu_graph_param_count(g);
  exe->n_outputs = tpu_graph_output_count(g);
  size_t np = (size_t)(exe->n_params ? exe->n_params : 1);
  size_t no = (size_t)(exe->n_outputs ? exe->n_outputs : 1);
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(tpu_param_kind_t) * np, "executable", (void**)&exe->param_kinds));
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(tpu_dtype_t) * np, "executable", (void**)&exe->param_dtypes));
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(tpu_output_meta_t) * no, "executable", (void**)&exe->outputs));
  for (int32_t i = 0; i < exe->n_params; i++) {
    tpu_value_t p = tpu_graph_param(g, i);
    exe->param_kinds[i] = tpu_graph_param_kind(g, p);
    exe->param_dtypes[i] = tpu_graph_node_dtype(g, p);
  }
  for (int32_t j = 0; j < exe->n_outputs; j++) {
    tpu_value_t v = tpu_graph_output(g, j);
    tpu_output_meta_t* m = &exe->outputs[j];
    m->dtype = tpu_graph_node_dtype(g, v);
    m->shape = *tpu_graph_node_shape(g, v);
    memcpy(m->strides, tpu_graph_output_strides(g, j), sizeof(int64_t) * (size_t)m->shape.rank);
    m->alias = tpu_graph_output_alias(g, j);
  }
  return NULL;
}

void tpu_executable_deinit_common(tpu_allocator_t a, tpu_executable_t* exe) {
  tpu_free(a, exe->param_kinds);
  tpu_free(a, exe->param_dtypes);
  tpu_free(a, exe->outputs);
  tpu_free(a, exe->text);
}

/* ------------------------------------------------------------ null device */

typedef struct null_buffer_s {
  tpu_buffer_t base;
} null_buffer_t;

static void null_destroy(tpu_device_t* dev) { tpu_free(dev->allocator, dev); }

static tpu_status_t null_buffer_allocate(tpu_device_t* dev, uint64_t dense,
                                         uint64_t padded, uint64_t tag,
                                         tpu_buffer_t** out) {
  (void)padded;
  (void)tag;
  null_buffer_t* b;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(dev->allocator, sizeof(*b), "buffer", (void**)&b));
  b->base.data = tpu_alloc(dev->allocator, dense ? dense : 1);
  if (!b->base.data) {
    tpu_free(dev->allocator, b);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "null device: host out of memory");
  }
  *out = &b->base;
  return NULL;
}

static void null_buffer_release(tpu_device_t* dev, tpu_buffer_t* b) {
  tpu_free(dev->allocator, b->data);
  tpu_free(dev->allocator, b);
}

static tpu_status_t null_executable_create(tpu_device_t* dev,
                                           const tpu_compiled_t* c,
                                           tpu_precision_t p,
                                           tpu_executable_t** out) {
  (void)p;
  tpu_executable_t* exe;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(dev->allocator, sizeof(*exe), "executable", (void**)&exe));
  tpu_status_t st = tpu_executable_init_common(dev->allocator, c, exe);
  if (st) {
    tpu_executable_deinit_common(dev->allocator, exe);
    tpu_free(dev->allocator, exe);
    return st;
  }
  *out = exe;
  return NULL;
}

static void null_executable_destroy(tpu_device_t* dev, tpu_executable_t* exe) {
  tpu_executable_deinit_common(dev->allocator, exe);
  tpu_free(dev->allocator, exe);
}

static tpu_status_t null_execute(tpu_device_t* dev, tpu_executable_t* exe,
                                 const tpu_arg_t* args, const tpu_arg_t* outs) {
  (void)dev;
  (void)exe;
  (void)args;
  (void)outs;
  return NULL;
}

static tpu_status_t null_write(tpu_device_t* dev, tpu_buffer_t* dst,
                               int64_t offset, const int64_t* dst_strides,
                               const tpu_view_t* src) {
  (void)dev; (void)dst; (void)offset; (void)dst_strides; (void)src;
  return NULL;
}

static tpu_status_t null_read(tpu_device_t* dev, tpu_buffer_t* src,
                              int64_t offset, const int64_t* src_strides,
                              const tpu_view_t* dst) {
  (void)dev; (void)src; (void)offset; (void)src_strides; (void)dst;
  return NULL;
}

static void null_poison(tpu_device_t* dev, tpu_buffer_t* buf, int64_t offset,
                        const tpu_view_t* view) {
  (void)dev; (void)buf; (void)offset; (void)view;
}

static const tpu_device_vtable_t kNullVtable = {
    null_destroy,        null_buffer_allocate,    null_buffer_release,
    null_executable_create, null_executable_destroy, null_execute,
    null_write,          null_read,               null_poison,
};

tpu_status_t tpu_null_device_create(tpu_allocator_t a, tpu_device_t** out) {
  *out = NULL;
  tpu_device_t* dev;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*dev), "device", (void**)&dev));
  dev->refcount = 1;
  dev->vtable = &kNullVtable;
  dev->allocator = a;
  strcpy(dev->name, "null");
  *out = dev;
  return NULL;
}

/* The vTPU device: HBM-backed buffers, executables built by codegen, and
 * execution of their kernels on the device's thread pool. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vtpu_impl.h"

static const tpu_device_vtable_t kVtpuVtable;

bool tpu_device_is_vtpu(const tpu_device_t* dev) {
  return dev && dev->vtable == &kVtpuVtable;
}

static tpu_vtpu_device_t* as_vtpu(tpu_device_t* d) { return (tpu_vtpu_device_t*)d; }

static void vtpu_destroy(tpu_device_t* d) {
  tpu_vtpu_device_t* dev = as_vtpu(d);
  tpu_pool_destroy(dev->pool);
  tpu_hbm_destroy(dev->hbm);
  free(dev->temp);
  free(dev->regs);
  free(dev->dot_scratch);
  pthread_mutex_destroy(&dev->scratch_mu);
  tpu_free(d->allocator, dev);
}

static tpu_status_t vtpu_buffer_allocate(tpu_device_t* d, uint64_t dense,
                                         uint64_t padded, uint64_t tag,
                                         tpu_buffer_t** out) {
  tpu_vtpu_device_t* dev = as_vtpu(d);
  tpu_vtpu_buffer_t* b;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(d->allocator, sizeof(*b), "buffer", (void**)&b));
  void* p = NULL;
  tpu_status_t st = tpu_hbm_alloc(dev->hbm, dense, padded, tag, &p);
  if (st) {
    tpu_free(d->allocator, b);
    return st;
  }
  b->base.data = p;
  *out = &b->base;
  return NULL;
}

static void vtpu_buffer_release(tpu_device_t* d, tpu_buffer_t* b) {
  tpu_hbm_free(as_vtpu(d)->hbm, b->data);
  tpu_free(d->allocator, b);
}

static void vtpu_executable_destroy(tpu_device_t* d, tpu_executable_t* e) {
  tpu_vtpu_executable_t* exe = (tpu_vtpu_executable_t*)e;
  for (int32_t i = 0; i < exe->n_kernels; i++)
    tpu_vtpu_program_free(d->allocator, &exe->kernels[i].prog);
  tpu_free(d->allocator, exe->kernels);
  tpu_free(d->allocator, exe->constants);
  tpu_free(d->allocator, exe->constant_offset);
  tpu_executable_deinit_common(d->allocator, e);
  tpu_free(d->allocator, exe);
}

static tpu_status_t vtpu_executable_create(tpu_device_t* d,
                                           const tpu_compiled_t* c,
                                           tpu_precision_t precision,
                                           tpu_executable_t** out) {
  tpu_vtpu_executable_t* exe;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(d->allocator, sizeof(*exe), "executable", (void**)&exe));
  exe->base.precision = precision;
  tpu_status_t st = tpu_executable_init_common(d->allocator, c, &exe->base);
  if (!st) st = tpu_vtpu_codegen(as_vtpu(d), c, exe);
  if (!st) {
    char* text = NULL;
    tpu_status_t pst = tpu_graph_print(c->graph, &text);
    if (pst) {
      tpu_status_free(pst);
    } else {
      /* keep the text with the device allocator */
      size_t n = strlen(text);
      exe->base.text = tpu_alloc(d->allocator, n + 1);
      if (exe->base.text) memcpy(exe->base.text, text, n + 1);
      tpu_graph_free_text(c->graph, text);
    }
  }
  if (st) {
    vtpu_executable_destroy(d, &exe->base);
    return st;
  }
  *out = &exe->base;
  return NULL;
}

static tpu_status_t ensure(void** p, int64_t* cap, int64_t need) {
  if (need <= *cap) return NULL;
  void* q = realloc(*p, (size_t)need);
  if (!q)
    return TPU_STATUS(RESOURCE_EXHAUSTED, "vTPU: cannot allocate %lld bytes of kernel scratch",
                      (long long)need);
  *p = q;
  *cap = need;
  return NULL;
}

static tpu_status_t vtpu_execute(tpu_device_t* d, tpu_executable_t* e,
                                 const tpu_arg_t* args, const tpu_arg_t* outs) {
  tpu_vtpu_device_t* dev = as_vtpu(d);
  tpu_vtpu_executable_t* exe = (tpu_vtpu_executable_t*)e;
  pthread_mutex_lock(&dev->scratch_mu);
  tpu_status_t st = ensure(&dev->temp, &dev->temp_cap, exe->temp_bytes + 64);
  int64_t per_thread = (int64_t)(exe->max_regs + 1) * TPU_VPU_CHUNK * 8;
  if (!st && per_thread > dev->regs_cap) {
    /* registers are laid out per thread at a stride of regs_cap */
    void* q = realloc(dev->regs, (size_t)per_thread * (size_t)tpu_pool_size(dev->pool));
    if (!q) {
      st = TPU_STATUS(RESOURCE_EXHAUSTED, "vTPU: cannot allocate VPU registers");
    } else {
      dev->regs = q;
      dev->regs_cap = per_thread;
    }
  }
  tpu_exec_ctx_t x;
  memset(&x, 0, sizeof(x));
  x.dev = dev;
  x.exe = exe;
  x.args = args;
  x.outs = outs;
  x.temp = dev->temp;
  for (int32_t i = 0; !st && i < exe->n_kernels; i++) {
    const tpu_vkernel_t* k = &exe->kernels[i];
    switch (k->kind) {
      case TPU_KERNEL_LOOP: st = tpu_vtpu_run_loop(&x, k); break;
      case TPU_KERNEL_REDUCE: st = tpu_vtpu_run_reduce(&x, k); break;
      case TPU_KERNEL_DOT: st = tpu_vtpu_run_dot(&x, k); break;
      case TPU_KERNEL_ARRAY: st = tpu_vtpu_run_array(&x, k); break;
      default: st = TPU_STATUS(INTERNAL, "unknown kernel"); break;
    }
    __atomic_add_fetch(&d->stats.kernels_run, 1, __ATOMIC_RELAXED);
    if (!st && __atomic_load_n(&x.bad, __ATOMIC_ACQUIRE))
      st = TPU_STATUS(OUT_OF_RANGE, "index %lld is out of bounds for dimension %d with size %lld",
                      (long long)x.bad_index, x.bad_dim, (long long)x.bad_size);
  }
  pthread_mutex_unlock(&dev->scratch_mu);
  __atomic_add_fetch(&d->stats.executions, 1, __ATOMIC_RELAXED);
  return st;
}

static tpu_status_t vtpu_write(tpu_device_t* d, tpu_buffer_t* dst, int64_t offset,
                               const int64_t* dst_strides, const tpu_view_t* src) {
  (void)d;
  tpu_fpenv_t env = tpu_fpenv_enter();
  tpu_vtpu_copy_strided((char*)dst->data + offset, src->dtype, dst_strides, src->data,
                        src->dtype, src->strides, src->rank, src->dims);
  tpu_fpenv_leave(env);
  return NULL;
}

static tpu_status_t vtpu_read(tpu_device_t* d, tpu_buffer_t* src, int64_t offset,
                              const int64_t* src_strides, const tpu_view_t* dst) {
  (void)d;
  tpu_vtpu_copy_strided(dst->data, dst->dtype, dst->strides, (const char*)src->data + offset,
                        dst->dtype, src_strides, dst->rank, dst->dims);
  return NULL;
}

static void vtpu_poison(tpu_device_t* d, tpu_buffer_t* buf, int64_t offset,
                        const tpu_view_t* view) {
  (void)d;
  /* broadcast one poison element over the view */
  union {
    float f;
    double dd;
    uint16_t h;
    uint8_t b[16];
  } v;
  memset(&v, 0xff, sizeof(v));
  int64_t zero[TPU_MAX_RANK] = {0};
  switch (view->dtype) {
    case TPU_DTYPE_F32: v.f = NAN; break;
    case TPU_DTYPE_F64: v.dd = NAN; break;
    case TPU_DTYPE_BF16: v.h = 0x7fc0; break;
    case TPU_DTYPE_F16: v.h = 0x7e00; break;
    case TPU_DTYPE_PRED: v.b[0] = 1; break;
    default: break;
  }
  tpu_vtpu_copy_strided((char*)buf->data + offset, view->dtype, view->strides, &v,
                        view->dtype, zero, view->rank, view->dims);
}

static const tpu_device_vtable_t kVtpuVtable = {
    vtpu_destroy,           vtpu_buffer_allocate,    vtpu_buffer_release,
    vtpu_executable_create, vtpu_executable_destroy, vtpu_execute,
    vtpu_write,             vtpu_read,               vtpu_poison,
};

tpu_status_t tpu_vtpu_device_create(tpu_allocator_t a, const tpu_vtpu_options_t* o,
                                    tpu_device_t** out) {
  *out = NULL;
  const tpu_chip_spec_t* chip;
  TPU_RETURN_IF_ERROR(tpu_chip_spec_find(o && o->chip ? o->chip : "v5e", &chip));
  tpu_vtpu_device_t* dev;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*dev), "vTPU device", (void**)&dev));
  dev->base.refcount = 1;
  dev->base.vtable = &kVtpuVtable;
  dev->base.allocator = a;
  snprintf(dev->base.name, sizeof dev->base.name, "vTPU %s", chip->name);
  dev->chip = chip;
  pthread_mutex_init(&dev->scratch_mu, NULL);
  tpu_hbm_options_t ho;
  memset(&ho, 0, sizeof(ho));
  ho.capacity = o ? o->hbm_capacity : 0;
  ho.host_limit = o ? o->host_limit : 0;
  /* keep freed pages committed for reuse: eager code frees and allocates
   * same-sized tensors on every op, and asynchronous execution keeps a
   * whole queue of intermediates alive at once. bench/elementwise_chain.py
   * (20 ops on 16 MiB tensors): 256 MiB of cache re-faults pages on every
   * chain (2.3x slower than with 1 GiB). An eighth of physical memory,
   * between 256 MiB and 4 GiB; TORCHTPU_HBM_CACHE_MB overrides. */
  {
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t c = phys / 8;
    if (c < (256ull << 20)) c = 256ull << 20;
    if (c > (4ull << 30)) c = 4ull << 30;
    const char* e = getenv("TORCHTPU_HBM_CACHE_MB");
    if (e && *e) c = strtoull(e, NULL, 10) << 20;
    ho.cache_bytes = c;
  }
  tpu_status_t st = tpu_hbm_create(a, chip, &ho, &dev->hbm);
  int32_t threads = o && o->n_threads > 0 ? o->n_threads : (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  if (!st) st = tpu_pool_create(a, threads, &dev->pool);
  if (st) {
    vtpu_destroy(&dev->base);
    return st;
  }
  *out = &dev->base;
  return NULL;
}

tpu_hbm_t* tpu_vtpu_device_hbm(tpu_device_t* d) { return as_vtpu(d)->hbm; }
const tpu_chip_spec_t* tpu_vtpu_device_chip(tpu_device_t* d) { return as_vtpu(d)->chip; }
int32_t tpu_vtpu_device_threads(tpu_device_t* d) { return tpu_pool_size(as_vtpu(d)->pool); }

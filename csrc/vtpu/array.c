/* Whole-array kernels: pad, scatter, sort, cumulative, reduce_window,
 * convolution. Operands are first brought into dense arrays of their compute
 * type (f32 for f32/bf16/f16, f64, i32, i64), results are computed densely
 * and stored with rounding to the result dtype. Orders of accumulation are
 * fixed by the shapes, never by threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vtpu_impl.h"

/* The dtype that holds a compute type exactly. */
static tpu_dtype_t ct_dtype(tpu_ct_t ct) {
  switch (ct) {
    case TPU_CT_F32: return TPU_DTYPE_F32;
    case TPU_CT_F64: return TPU_DTYPE_F64;
    case TPU_CT_I32: return TPU_DTYPE_S32;
    default: return TPU_DTYPE_S64;
  }
}

static size_t ct_size(tpu_ct_t ct) {
  return ct == TPU_CT_F32 || ct == TPU_CT_I32 ? 4 : 8;
}

static int64_t numel_of(const int64_t* dims, int32_t rank) {
  int64_t n = 1;
  for (int32_t i = 0; i < rank; i++) n *= dims[i];
  return n;
}

/* Dense copy of operand i in compute type ct (caller frees). */
static tpu_status_t load_dense(tpu_exec_ctx_t* x, const tpu_vkernel_t* k, int32_t i,
                               tpu_ct_t ct, void** out) {
  *out = NULL;
  int32_t r = k->opnd_rank[i];
  int64_t n = numel_of(k->opnd_dims[i], r);
  void* p = malloc(ct_size(ct) * (size_t)(n ? n : 1));
  if (!p) return TPU_STATUS(RESOURCE_EXHAUSTED, "%s: host out of memory for an operand",
                            tpu_op_info(k->op)->name);
  const tpu_access_t* a = &k->opnd[i];
  int64_t cs[TPU_MAX_RANK];
  tpu_shape_t sh = {.rank = r};
  memcpy(sh.dims, k->opnd_dims[i], sizeof(int64_t) * (size_t)r);
  tpu_shape_contiguous_strides(&sh, cs);
  const char* base = tpu_vtpu_access_base(x, a);
  tpu_vtpu_copy_strided(p, ct_dtype(ct), cs, base + a->elem_offset * tpu_dtype_size(a->dtype),
                        a->dtype, a->strides, r, k->opnd_dims[i]);
  *out = p;
  return NULL;
}

/* The value of a rank-0 operand (by value or in memory) as double/int64. */
static void scalar_operand(tpu_exec_ctx_t* x, const tpu_vkernel_t* k, int32_t i, tpu_ct_t ct,
                           void* out) {
  const tpu_access_t* a = &k->opnd[i];
  if (k->scalar_param[i] >= 0) {
    tpu_scalar_t s = x->args[k->scalar_param[i]].scalar;
    tpu_dtype_t pd = x->exe->base.param_dtypes[k->scalar_param[i]];
    double f = tpu_dtype_is_float(pd) ? s.f : (double)s.i;
    int64_t iv = tpu_dtype_is_float(pd) ? (int64_t)s.f : s.i;
    switch (ct) {
      case TPU_CT_F32: *(float*)out = (float)f; break;
      case TPU_CT_F64: *(double*)out = f; break;
      case TPU_CT_I32: *(int32_t*)out = (int32_t)iv; break;
      default: *(int64_t*)out = iv; break;
    }
    return;
  }
  const char* base = tpu_vtpu_access_base(x, a);
  int64_t zero[1] = {0}, one[1] = {1};
  tpu_vtpu_copy_strided(out, ct_dtype(ct), one, base + a->elem_offset * tpu_dtype_size(a->dtype),
                        a->dtype, zero, 0, one);
}

static void store_dense(tpu_exec_ctx_t* x, const tpu_vkernel_t* k, const void* src,
                        tpu_ct_t ct) {
  int64_t cs[TPU_MAX_RANK];
  tpu_shape_t sh = {.rank = k->out_rank};
  memcpy(sh.dims, k->out_dims, sizeof(int64_t) * (size_t)k->out_rank);
  tpu_shape_contiguous_strides(&sh, cs);
  char* base = tpu_vtpu_access_base(x, &k->store);
  tpu_vtpu_copy_strided(base + k->store.elem_offset * tpu_dtype_size(k->out_dtype),
                        k->out_dtype, k->store.strides, src, ct_dtype(ct), cs, k->out_rank,
                        k->out_dims);
}

/* Element access on dense compute-type arrays. */
static inline double getd(const void* p, tpu_ct_t ct, int64_t i) {
  switch (ct) {
    case TPU_CT_F32: return ((const float*)p)[i];
    case TPU_CT_F64: return ((const double*)p)[i];
    case TPU_CT_I32: return ((const int32_t*)p)[i];
    default: return (double)((const int64_t*)p)[i];
  }
}

static inline int64_t geti(const void* p, tpu_ct_t ct, int64_t i) {
  switch (ct) {
    case TPU_CT_I32: return ((const int32_t*)p)[i];
    case TPU_CT_I64: return ((const int64_t*)p)[i];
    case TPU_CT_F32: return (int64_t)((const float*)p)[i];
    default: return (int64_t)((const double*)p)[i];
  }
}

/* Advances the row-major multi-index idx over dims. */
static inline void next_index(int64_t* idx, const int64_t* dims, int32_t rank) {
  for (int32_t d = rank - 1; d >= 0; d--) {
    if (++idx[d] < dims[d]) break;
    idx[d] = 0;
  }
}

static inline void copy_elem(void* dst, int64_t di, const void* src, int64_t si, size_t es) {
  memcpy((char*)dst + (size_t)di * es, (const char*)src + (size_t)si * es, es);
}

/* ---------------------------------------------------------------- pad */

static tpu_status_t run_pad(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_ct_t ct = tpu_vtpu_compute_type(k->out_dtype);
  size_t es = ct_size(ct);
  int32_t r = k->out_rank;
  int64_t n_out = numel_of(k->out_dims, r);
  void* in = NULL;
  TPU_RETURN_IF_ERROR(load_dense(x, k, 0, ct, &in));
  char* out = malloc(es * (size_t)(n_out ? n_out : 1));
  if (!out) {
    free(in);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "pad: host out of memory");
  }
  char value[8];
  scalar_operand(x, k, 1, ct, value);
  for (int64_t i = 0; i < n_out; i++) memcpy(out + (size_t)i * es, value, es);
  const int64_t* lo = k->ints;
  const int64_t* in_ = k->ints + 2 * r;
  int64_t ocs[TPU_MAX_RANK];
  tpu_shape_t os = {.rank = r};
  memcpy(os.dims, k->out_dims, sizeof(int64_t) * (size_t)r);
  tpu_shape_contiguous_strides(&os, ocs);
  int64_t n_in = numel_of(k->opnd_dims[0], r);
  int64_t idx[TPU_MAX_RANK] = {0};
  for (int64_t e = 0; e < n_in; e++) {
    int64_t off = 0;
    bool inside = true;
    for (int32_t d = 0; d < r; d++) {
      int64_t p = lo[d] + idx[d] * (in_[d] + 1);
      if (p < 0 || p >= k->out_dims[d]) {
        inside = false;
        break;
      }
      off += p * ocs[d];
    }
    if (inside) copy_elem(out, off, in, e, es);
    next_index(idx, k->opnd_dims[0], r);
  }
  store_dense(x, k, out, ct);
  free(in);
  free(out);
  return NULL;
}

/* ------------------------------------------------------------ scatter */

static tpu_status_t run_scatter(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_ct_t ct = tpu_vtpu_compute_type(k->out_dtype);
  size_t es = ct_size(ct);
  int32_t r = k->out_rank;
  int32_t dim = (int32_t)k->ints[0];
  void *op = NULL, *ix = NULL, *up = NULL;
  tpu_ct_t ict = tpu_vtpu_compute_type(k->opnd[1].dtype);
  tpu_status_t st = load_dense(x, k, 0, ct, &op);
  if (!st) st = load_dense(x, k, 1, ict, &ix);
  if (!st) st = load_dense(x, k, 2, ct, &up);
  if (st) {
    free(op);
    free(ix);
    free(up);
    return st;
  }
  int64_t ocs[TPU_MAX_RANK];
  tpu_shape_t os = {.rank = r};
  memcpy(os.dims, k->out_dims, sizeof(int64_t) * (size_t)r);
  tpu_shape_contiguous_strides(&os, ocs);
  int64_t n_up = numel_of(k->opnd_dims[1], r);
  int64_t idx[TPU_MAX_RANK] = {0};
  /* a bf16/f16 result rounds after every add/mul, like a CPU scalar_t += */
  bool narrow = k->out_dtype == TPU_DTYPE_BF16 || k->out_dtype == TPU_DTYPE_F16;
  /* updates apply in row-major order of the index tensor: deterministic */
  for (int64_t e = 0; e < n_up; e++) {
    int64_t t = geti(ix, ict, e);
    if (t < 0 || t >= k->out_dims[dim]) {
      tpu_vtpu_note_bad_index(x, t, k->out_dims[dim], dim);
    } else {
      int64_t off = 0;
      for (int32_t d = 0; d < r; d++) off += (d == dim ? t : idx[d]) * ocs[d];
      switch (ct) {
#define APPLY(T)                                                          \
  {                                                                       \
    T* o = (T*)op + off;                                                  \
    T u = ((const T*)up)[e];                                              \
    switch (k->akind) {                                                   \
      case TPU_SCATTER_ADD: *o = (T)(*o + u); break;                      \
      case TPU_SCATTER_MUL: *o = (T)(*o * u); break;                      \
      case TPU_SCATTER_MAX: *o = (*o > u || *o != *o) ? *o : u; break;    \
      case TPU_SCATTER_MIN: *o = (*o < u || *o != *o) ? *o : u; break;    \
      default: *o = u; break;                                             \
    }                                                                     \
    break;                                                                \
  }
        case TPU_CT_F32:
          if (narrow && (k->akind == TPU_SCATTER_ADD || k->akind == TPU_SCATTER_MUL)) {
            float* o = (float*)op + off;
            float u = ((const float*)up)[e];
            float v = k->akind == TPU_SCATTER_ADD ? *o + u : *o * u;
            *o = k->out_dtype == TPU_DTYPE_BF16 ? tpu_round_bf16(v)
                                                : tpu_f16_to_f32(tpu_f32_to_f16(v));
            break;
          }
          APPLY(float)
        case TPU_CT_F64: APPLY(double)
        case TPU_CT_I32: APPLY(int32_t)
        default: APPLY(int64_t)
#undef APPLY
      }
    }
    next_index(idx, k->opnd_dims[1], r);
  }
  (void)es;
  store_dense(x, k, op, ct);
  free(op);
  free(ix);
  free(up);
  return NULL;
}

/* --------------------------------------------------------------- sort */

typedef struct {
  const void* vals;
  tpu_ct_t ct;
  bool descending;
} sort_ctx_t;

/* a sorts before b? NaN is the largest value; ties keep index order. */
static inline bool before(const sort_ctx_t* s, int64_t a, int64_t b) {
  if (s->ct == TPU_CT_F32 || s->ct == TPU_CT_F64) {
    double x = getd(s->vals, s->ct, a), y = getd(s->vals, s->ct, b);
    bool xn = x != x, yn = y != y;
    if (s->descending) {
      if (xn || yn) return xn && !yn;
      return x > y;
    }
    if (xn || yn) return !xn && yn;
    return x < y;
  }
  int64_t x = geti(s->vals, s->ct, a), y = geti(s->vals, s->ct, b);
  return s->descending ? x > y : x < y;
}

/* Stable merge sort of index array idx[0..n) by the values. */
static void merge_sort(const sort_ctx_t* s, int64_t* idx, int64_t* tmp, int64_t n) {
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n;
      int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) tmp[o++] = before(s, idx[j], idx[i]) ? idx[j++] : idx[i++];
      while (i < mid) tmp[o++] = idx[i++];
      while (j < hi) tmp[o++] = idx[j++];
    }
    memcpy(idx, tmp, sizeof(int64_t) * (size_t)n);
  }
}

typedef struct {
  const tpu_vkernel_t* k;
  const void* vals;
  tpu_ct_t ct;
  int64_t* out;
  int64_t len, inner, outer;
} sort_job_t;

static void sort_task(void* ctx, int64_t task, int thread) {
  (void)thread;
  sort_job_t* j = ctx;
  int64_t o = task / j->inner, in = task % j->inner;
  int64_t base = o * j->len * j->inner + in;
  int64_t* idx = malloc(sizeof(int64_t) * (size_t)(2 * j->len + 1));
  const void* vals = j->vals;
  void* slice = malloc(8 * (size_t)(j->len + 1));
  if (!idx || !slice) {
    free(idx);
    free(slice);
    return; /* the caller checks for allocation before starting */
  }
  size_t es = ct_size(j->ct);
  for (int64_t i = 0; i < j->len; i++) {
    idx[i] = i;
    memcpy((char*)slice + (size_t)i * es, (const char*)vals + (size_t)(base + i * j->inner) * es, es);
  }
  sort_ctx_t s = {slice, j->ct, j->k->akind != 0};
  merge_sort(&s, idx, idx + j->len, j->len);
  for (int64_t i = 0; i < j->len; i++) j->out[base + i * j->inner] = idx[i];
  free(idx);
  free(slice);
}

static tpu_status_t run_sort(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_ct_t ct = tpu_vtpu_compute_type(k->opnd[0].dtype);
  int32_t r = k->opnd_rank[0];
  int32_t dim = (int32_t)k->ints[0];
  void* vals = NULL;
  TPU_RETURN_IF_ERROR(load_dense(x, k, 0, ct, &vals));
  int64_t n = numel_of(k->opnd_dims[0], r);
  int64_t* out = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  if (!out) {
    free(vals);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "sort: host out of memory");
  }
  sort_job_t j = {k, vals, ct, out, r ? k->opnd_dims[0][dim] : 1, 1, 1};
  for (int32_t d = dim + 1; d < r; d++) j.inner *= k->opnd_dims[0][d];
  for (int32_t d = 0; d < dim; d++) j.outer *= k->opnd_dims[0][d];
  if (n) tpu_pool_run(x->dev->pool, j.outer * j.inner, sort_task, &j);
  store_dense(x, k, out, TPU_CT_I64);
  free(vals);
  free(out);
  return NULL;
}

/* --------------------------------------------------------- cumulative */

static tpu_status_t run_cumulative(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_ct_t ct = tpu_vtpu_compute_type(k->out_dtype);
  int32_t r = k->out_rank;
  int32_t dim = (int32_t)k->ints[0];
  void* v = NULL;
  TPU_RETURN_IF_ERROR(load_dense(x, k, 0, ct, &v));
  int64_t len = r ? k->out_dims[dim] : 1, inner = 1, outer = 1;
  for (int32_t d = dim + 1; d < r; d++) inner *= k->out_dims[d];
  for (int32_t d = 0; d < dim; d++) outer *= k->out_dims[d];
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      for (int64_t i = 1; i < len; i++) {
        int64_t p = base + (i - 1) * inner, q = base + i * inner;
        switch (ct) {
#define SCAN(T)                                                                  \
  {                                                                              \
    T* a = (T*)v;                                                                \
    switch (k->akind) {                                                          \
      case TPU_REDUCE_SUM: a[q] = (T)(a[p] + a[q]); break;                       \
      case TPU_REDUCE_PROD: a[q] = (T)(a[p] * a[q]); break;                      \
      case TPU_REDUCE_MAX: a[q] = (a[p] > a[q] || a[p] != a[p]) ? a[p] : a[q]; break; \
      default: a[q] = (a[p] < a[q] || a[p] != a[p]) ? a[p] : a[q]; break;       \
    }                                                                            \
    break;                                                                       \
  }
          case TPU_CT_F32: SCAN(float)
          case TPU_CT_F64: SCAN(double)
          case TPU_CT_I32: SCAN(int32_t)
          default: SCAN(int64_t)
#undef SCAN
        }
      }
    }
  }
  store_dense(x, k, v, ct);
  free(v);
  return NULL;
}

/* ------------------------------------------------------ reduce_window */

static tpu_status_t run_reduce_window(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_ct_t ct = tpu_vtpu_compute_type(k->opnd[0].dtype);
  int32_t r = k->opnd_rank[0];
  const int64_t *w = k->ints, *s = w + r, *lo = s + r, *dl = lo + 2 * r;
  void* in = NULL;
  TPU_RETURN_IF_ERROR(load_dense(x, k, 0, ct, &in));
  bool arg = k->akind == TPU_REDUCE_ARGMAX || k->akind == TPU_REDUCE_ARGMIN;
  tpu_ct_t oct = arg ? TPU_CT_I64 : ct;
  int64_t n_out = numel_of(k->out_dims, r);
  void* out = malloc(ct_size(oct) * (size_t)(n_out ? n_out : 1));
  if (!out) {
    free(in);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "reduce_window: host out of memory");
  }
  int64_t ics[TPU_MAX_RANK];
  tpu_shape_t is = {.rank = r};
  memcpy(is.dims, k->opnd_dims[0], sizeof(int64_t) * (size_t)r);
  tpu_shape_contiguous_strides(&is, ics);
  int64_t wn = numel_of(w, r);
  int64_t oidx[TPU_MAX_RANK] = {0};
  for (int64_t e = 0; e < n_out; e++) {
    double best = 0;
    int64_t best_i = -1, acc_i = 0;
    double acc = k->akind == TPU_REDUCE_PROD ? 1.0 : 0.0;
    bool have = false;
    int64_t widx[TPU_MAX_RANK] = {0};
    for (int64_t q = 0; q < wn; q++) {
      int64_t off = 0;
      bool inside = true;
      for (int32_t d = 0; d < r; d++) {
        int64_t p = oidx[d] * s[d] - lo[d] + widx[d] * dl[d];
        if (p < 0 || p >= k->opnd_dims[0][d]) {
          inside = false;
          break;
        }
        off += p * ics[d];
      }
      if (inside) {
        if (ct == TPU_CT_I32 || ct == TPU_CT_I64) {
          int64_t v = geti(in, ct, off);
          switch (k->akind) {
            case TPU_REDUCE_SUM: acc_i += v; break;
            case TPU_REDUCE_PROD: acc_i = have ? acc_i * v : v; break;
            case TPU_REDUCE_MAX: case TPU_REDUCE_ARGMAX:
              if (!have || v > (int64_t)best) { best = (double)v; best_i = q; acc_i = v; }
              break;
            default:
              if (!have || v < (int64_t)best) { best = (double)v; best_i = q; acc_i = v; }
              break;
          }
        } else {
          double v = getd(in, ct, off);
          switch (k->akind) {
            case TPU_REDUCE_SUM: acc += v; break;
            case TPU_REDUCE_PROD: acc *= v; break;
            case TPU_REDUCE_MAX: case TPU_REDUCE_ARGMAX:
              if (!have || v > best || (v != v && best == best)) { best = v; best_i = q; }
              break;
            default:
              if (!have || v < best || (v != v && best == best)) { best = v; best_i = q; }
              break;
          }
        }
        have = true;
      }
      next_index(widx, w, r);
    }
    switch (oct) {
      case TPU_CT_I64:
        ((int64_t*)out)[e] = arg ? best_i
                             : (k->akind == TPU_REDUCE_SUM || k->akind == TPU_REDUCE_PROD)
                                 ? acc_i
                                 : (have ? acc_i : (k->akind == TPU_REDUCE_MAX ? INT64_MIN : INT64_MAX));
        break;
      case TPU_CT_I32:
        ((int32_t*)out)[e] = (int32_t)((k->akind == TPU_REDUCE_SUM || k->akind == TPU_REDUCE_PROD)
                                           ? acc_i
                                           : (have ? acc_i : (k->akind == TPU_REDUCE_MAX ? INT32_MIN : INT32_MAX)));
        break;
      default: {
        double res = (k->akind == TPU_REDUCE_SUM || k->akind == TPU_REDUCE_PROD)
                         ? acc
                         : (have ? best : (k->akind == TPU_REDUCE_MAX ? -INFINITY : INFINITY));
        if (oct == TPU_CT_F32) ((float*)out)[e] = (float)res;
        else ((double*)out)[e] = res;
        break;
      }
    }
    next_index(oidx, k->out_dims, r);
  }
  store_dense(x, k, out, oct);
  free(in);
  free(out);
  return NULL;
}

/* -------------------------------------------------------- convolution */

static tpu_status_t run_convolution(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_dtype_t dt = k->opnd[0].dtype;
  tpu_ct_t ct = tpu_vtpu_compute_type(dt);
  if (ct != TPU_CT_F32 && ct != TPU_CT_F64)
    return TPU_STATUS(UNIMPLEMENTED, "convolution of %s is not supported on tpu",
                      tpu_dtype_info(dt)->name);
  int32_t ns = (int32_t)k->ints[0];
  const int64_t *st = k->ints + 1, *lo = st + ns, *ld = lo + 2 * ns, *rd = ld + ns;
  int64_t groups = k->ints[1 + 5 * ns];
  const int64_t* ind = k->opnd_dims[0];
  const int64_t* wd = k->opnd_dims[1];
  int64_t N = ind[0], C = ind[1], O = wd[0], Cg = wd[1], Og = O / groups;
  int64_t K = 1, P = 1, S = 1;
  for (int32_t d = 0; d < ns; d++) {
    K *= wd[2 + d];
    P *= k->out_dims[2 + d];
    S *= ind[2 + d];
  }
  void *in = NULL, *w = NULL;
  tpu_status_t err = load_dense(x, k, 0, ct, &in);
  if (!err) err = load_dense(x, k, 1, ct, &w);
  size_t es = ct_size(ct);
  void* col = err ? NULL : malloc(es * (size_t)(Cg * K * P + 1));
  void* out = err ? NULL : malloc(es * (size_t)(N * O * P + 1));
  if (!err && (!col || !out))
    err = TPU_STATUS(RESOURCE_EXHAUSTED, "convolution: host out of memory for im2col (%lld bytes)",
                     (long long)(es * (size_t)(Cg * K * P)));
  for (int64_t n = 0; !err && n < N; n++) {
    for (int64_t g = 0; !err && g < groups; g++) {
      /* im2col: col[(c, kpos), p] */
      for (int64_t c = 0; c < Cg; c++) {
        int64_t kidx[TPU_MAX_RANK] = {0};
        for (int64_t kp = 0; kp < K; kp++) {
          int64_t pidx[TPU_MAX_RANK] = {0};
          int64_t row = (c * K + kp) * P;
          for (int64_t p = 0; p < P; p++) {
            int64_t off = 0;
            bool inside = true;
            for (int32_t d = 0; d < ns; d++) {
              int64_t pos = pidx[d] * st[d] - lo[d] + kidx[d] * rd[d];
              if (pos < 0 || pos % ld[d] != 0) {
                inside = false;
                break;
              }
              pos /= ld[d];
              if (pos >= ind[2 + d]) {
                inside = false;
                break;
              }
              off = off * ind[2 + d] + pos;
            }
            int64_t src = ((n * C) + g * Cg + c) * S + off;
            if (ct == TPU_CT_F32)
              ((float*)col)[row + p] = inside ? ((const float*)in)[src] : 0.0f;
            else
              ((double*)col)[row + p] = inside ? ((const double*)in)[src] : 0.0;
            next_index(pidx, k->out_dims + 2, ns);
          }
          next_index(kidx, wd + 2, ns);
        }
      }
      /* out[n, g*Og:(g+1)*Og, :] = W_g[Og, Cg*K] @ col[Cg*K, P] */
      if (ct == TPU_CT_F32) {
        err = tpu_vtpu_matmul_f32(x->dev, x->exe->base.precision, 1, Og, P, Cg * K,
                                  (const float*)w + g * Og * Cg * K, col,
                                  (float*)out + (n * O + g * Og) * P, dt == TPU_DTYPE_BF16);
      } else {
        tpu_vtpu_dgemm(Og, P, Cg * K, (const double*)w + g * Og * Cg * K, col,
                       (double*)out + (n * O + g * Og) * P);
      }
    }
  }
  if (!err) store_dense(x, k, out, ct);
  free(in);
  free(w);
  free(col);
  free(out);
  return err;
}

tpu_status_t tpu_vtpu_run_array(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  switch (k->op) {
    case TPU_OP_PAD: return run_pad(x, k);
    case TPU_OP_SCATTER: return run_scatter(x, k);
    case TPU_OP_SORT: return run_sort(x, k);
    case TPU_OP_CUMULATIVE: return run_cumulative(x, k);
    case TPU_OP_REDUCE_WINDOW: return run_reduce_window(x, k);
    case TPU_OP_CONVOLUTION: return run_convolution(x, k);
    default: return TPU_STATUS(INTERNAL, "no array kernel for %s", tpu_op_info(k->op)->name);
  }
}

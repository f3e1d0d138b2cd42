/* dot_general on the vTPU: the MXU modelled with a host BLAS.
 *
 * Precision (StableHLO precision_config) decides what the products see:
 *   DEFAULT  f32 inputs rounded to bf16 (round to nearest even), products
 *            accumulated in f32 — one bf16 pass, as the MXU does;
 *   HIGH     each f32 input split into hi = bf16(x) and lo = bf16(x - hi);
 *            C = lo*hi' + hi*lo' + hi*hi' (three bf16 passes);
 *   HIGHEST  IEEE f32 (a TPU uses six bf16 passes; we compute exact f32).
 * bf16 operands are exact in every mode. f16 operands are treated as the f32
 * values they hold. f64 runs in f64 (not native on a TPU).
 *
 * The BLAS runs single-threaded inside our pool threads: the output is split
 * into column blocks whose results do not depend on the split, so results
 * are bitwise identical for any thread count, and the kernels' flush-to-zero
 * environment applies to the BLAS too.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vtpu_impl.h"

/* ------------------------------------------------------------ the BLAS */

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float*, int,
                         const float*, int, float, float*, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double*,
                         int, const double*, int, double, double*, int);
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

static struct {
  pthread_mutex_t mu;
  void* handle;
  sgemm_fn sgemm;
  dgemm_fn dgemm;
  char name[256];
  char core[64];
} g_blas = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, NULL, "built-in reference GEMM", ""};

tpu_status_t tpu_blas_load(const char* path) {
  pthread_mutex_lock(&g_blas.mu);
  if (g_blas.handle) {
    pthread_mutex_unlock(&g_blas.mu);
    return NULL;
  }
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    tpu_status_t st = TPU_STATUS(NOT_FOUND, "cannot load BLAS '%s': %s", path, dlerror());
    pthread_mutex_unlock(&g_blas.mu);
    return st;
  }
  static const char* const prefixes[] = {"scipy_", "", "scipy_openblas_"};
  sgemm_fn s = NULL;
  dgemm_fn d = NULL;
  const char* prefix = "";
  for (size_t i = 0; i < TPU_ARRAY_SIZE(prefixes) && !s; i++) {
    char sym[96];
    snprintf(sym, sizeof sym, "%scblas_sgemm", prefixes[i]);
    s = (sgemm_fn)dlsym(h, sym);
    snprintf(sym, sizeof sym, "%scblas_dgemm", prefixes[i]);
    d = (dgemm_fn)dlsym(h, sym);
    prefix = prefixes[i];
  }
  if (!s || !d) {
    dlclose(h);
    pthread_mutex_unlock(&g_blas.mu);
    return TPU_STATUS(NOT_FOUND, "'%s' has no cblas_sgemm/cblas_dgemm", path);
  }
  /* our pool provides the parallelism (and the FP environment) */
  char sym[96];
  snprintf(sym, sizeof sym, "%sopenblas_set_num_threads", prefix);
  void (*set_threads)(int) = (void (*)(int))dlsym(h, sym);
  if (set_threads) set_threads(1);
  snprintf(sym, sizeof sym, "%sopenblas_get_corename", prefix);
  const char* (*corename)(void) = (const char* (*)(void))dlsym(h, sym);
  if (corename) snprintf(g_blas.core, sizeof g_blas.core, "%s", corename());
  g_blas.handle = h;
  g_blas.sgemm = s;
  g_blas.dgemm = d;
  snprintf(g_blas.name, sizeof g_blas.name, "%s", path);
  pthread_mutex_unlock(&g_blas.mu);
  return NULL;
}

const char* tpu_blas_name(void) { return g_blas.name; }
const char* tpu_blas_core(void) { return g_blas.core; }

/* Reference GEMM for hosts without a BLAS (and for tests): row-major,
 * C = alpha * op(A) op(B) + beta * C, k accumulated in order. */
#define REF_GEMM(NAME, T)                                                        \
  static void NAME(int ta, int tb, int m, int n, int k, T alpha, const T* a,     \
                   int lda, const T* b, int ldb, T beta, T* c, int ldc) {        \
    for (int i = 0; i < m; i++) {                                                \
      for (int j = 0; j < n; j++) {                                              \
        T s = 0;                                                                 \
        for (int p = 0; p < k; p++) {                                            \
          T x = ta == TRANS ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];   \
          T y = tb == TRANS ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];   \
          s += x * y;                                                            \
        }                                                                        \
        T* o = &c[(size_t)i * ldc + j];                                          \
        *o = alpha * s + (beta == 0 ? 0 : beta * *o);                            \
      }                                                                          \
    }                                                                            \
  }
REF_GEMM(ref_sgemm, float)
REF_GEMM(ref_dgemm, double)

static void sgemm(int ta, int tb, int m, int n, int k, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (g_blas.sgemm)
    g_blas.sgemm(ROW_MAJOR, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
  else
    ref_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

static void dgemm(int ta, int tb, int m, int n, int k, const double* a, int lda,
                  const double* b, int ldb, double beta, double* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (g_blas.dgemm)
    g_blas.dgemm(ROW_MAJOR, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
  else
    ref_dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

void tpu_vtpu_dgemm(int64_t M, int64_t N, int64_t K, const double* a, const double* b,
                    double* c) {
  dgemm(NO_TRANS, NO_TRANS, (int)M, (int)N, (int)K, a, (int)K, b, (int)N, 0.0, c, (int)N);
}

/* ---------------------------------------------------------- the kernel */

static int64_t prod(const int64_t* d, int32_t n) {
  int64_t p = 1;
  for (int32_t i = 0; i < n; i++) p *= d[i];
  return p;
}

/* Copies a [batch, rows, cols] view (given as dims/strides over its own
 * groups) into a contiguous f32/f64 matrix stack, applying the precision
 * split: part 0 = value (or hi), part 1 = lo. */
static void pack(const void* base, tpu_dtype_t dt, const int64_t* dims,
                 const int64_t* strides, int32_t rank, void* out,
                 tpu_dtype_t out_dt) {
  int64_t cs[TPU_MAX_RANK];
  tpu_shape_t sh = {.rank = rank};
  memcpy(sh.dims, dims, sizeof(int64_t) * (size_t)rank);
  tpu_shape_contiguous_strides(&sh, cs);
  tpu_vtpu_copy_strided(out, out_dt, cs, base, dt, strides, rank, dims);
}

static void round_bf16_inplace(float* p, int64_t n) {
  for (int64_t i = 0; i < n; i++) p[i] = tpu_round_bf16(p[i]);
}

typedef struct {
  const tpu_vkernel_t* k;
  int64_t B, M, N, K;
  int64_t n_blocks, block;
  tpu_precision_t precision;
  /* packed operands (contiguous per batch) */
  const float *a_hi, *a_lo, *b_hi, *b_lo;
  const double *ad, *bd;
  float* c;
  double* cd;
  bool f64;
} dot_job_t;

static void dot_task(void* ctx, int64_t task, int thread) {
  (void)thread;
  dot_job_t* j = ctx;
  int64_t b = task / j->n_blocks, blk = task % j->n_blocks;
  int64_t n0 = blk * j->block, n1 = n0 + j->block < j->N ? n0 + j->block : j->N;
  int n = (int)(n1 - n0), m = (int)j->M, kk = (int)j->K, N = (int)j->N;
  size_t ao = (size_t)(b * j->M * j->K), bo = (size_t)(b * j->K * j->N) + (size_t)n0;
  size_t co = (size_t)(b * j->M * j->N) + (size_t)n0;
  if (j->f64) {
    dgemm(NO_TRANS, NO_TRANS, m, n, kk, j->ad + ao, kk, j->bd + bo, N, 0.0, j->cd + co, N);
    return;
  }
  if (j->precision == TPU_PRECISION_HIGH) {
    /* small terms first */
    sgemm(NO_TRANS, NO_TRANS, m, n, kk, j->a_lo + ao, kk, j->b_hi + bo, N, 0.0f, j->c + co, N);
    sgemm(NO_TRANS, NO_TRANS, m, n, kk, j->a_hi + ao, kk, j->b_lo + bo, N, 1.0f, j->c + co, N);
    sgemm(NO_TRANS, NO_TRANS, m, n, kk, j->a_hi + ao, kk, j->b_hi + bo, N, 1.0f, j->c + co, N);
    return;
  }
  sgemm(NO_TRANS, NO_TRANS, m, n, kk, j->a_hi + ao, kk, j->b_hi + bo, N, 0.0f, j->c + co, N);
}

static tpu_status_t scratch(tpu_vtpu_device_t* dev, int64_t bytes, void** out) {
  if (bytes > dev->dot_cap) {
    void* p = realloc(dev->dot_scratch, (size_t)bytes);
    if (!p)
      return TPU_STATUS(RESOURCE_EXHAUSTED,
                        "dot_general: cannot allocate %lld bytes of host scratch",
                        (long long)bytes);
    dev->dot_scratch = p;
    dev->dot_cap = bytes;
  }
  *out = dev->dot_scratch;
  return NULL;
}

static void int_dot(const tpu_vkernel_t* k, const int64_t* a, const int64_t* b,
                    int64_t* c, int64_t B, int64_t M, int64_t N, int64_t K) {
  (void)k;
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        uint64_t s = 0;
        for (int64_t p = 0; p < K; p++)
          s += (uint64_t)a[(bb * M + i) * K + p] * (uint64_t)b[(bb * K + p) * N + j];
        c[(bb * M + i) * N + j] = (int64_t)s;
      }
}

/* C[B][M][N] = A[B][M][K] @ B[B][K][N] (contiguous f32) at a precision,
 * on the device's pool. Used by convolution. */
tpu_status_t tpu_vtpu_matmul_f32(tpu_vtpu_device_t* dev, tpu_precision_t prec, int64_t B,
                                 int64_t M, int64_t N, int64_t K, const float* a,
                                 const float* b, float* c, bool inputs_are_bf16) {
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    return TPU_STATUS(UNIMPLEMENTED, "matmul: a dimension exceeds 2^31");
  int64_t na = B * M * K, nb = B * K * N;
  bool split = prec == TPU_PRECISION_HIGH && !inputs_are_bf16;
  bool round = prec == TPU_PRECISION_DEFAULT && !inputs_are_bf16;
  float* buf = NULL;
  if (split || round) {
    buf = malloc(sizeof(float) * (size_t)(2 * (na + nb)));
    if (!buf) return TPU_STATUS(RESOURCE_EXHAUSTED, "matmul: host out of memory for operands");
  }
  dot_job_t j;
  memset(&j, 0, sizeof(j));
  j.B = B; j.M = M; j.N = N; j.K = K;
  j.precision = prec;
  j.a_hi = a;
  j.b_hi = b;
  if (round) {
    float* ah = buf;
    float* bh = buf + na;
    for (int64_t i = 0; i < na; i++) ah[i] = tpu_round_bf16(a[i]);
    for (int64_t i = 0; i < nb; i++) bh[i] = tpu_round_bf16(b[i]);
    j.a_hi = ah;
    j.b_hi = bh;
  } else if (split) {
    float* ah = buf;
    float* bh = ah + na;
    float* al = bh + nb;
    float* bl = al + na;
    for (int64_t i = 0; i < na; i++) {
      ah[i] = tpu_round_bf16(a[i]);
      al[i] = tpu_round_bf16(a[i] - ah[i]);
    }
    for (int64_t i = 0; i < nb; i++) {
      bh[i] = tpu_round_bf16(b[i]);
      bl[i] = tpu_round_bf16(b[i] - bh[i]);
    }
    j.a_hi = ah; j.b_hi = bh; j.a_lo = al; j.b_lo = bl;
  }
  if (!split) j.precision = TPU_PRECISION_HIGHEST; /* operands already prepared */
  j.c = c;
  double work = (double)M * (double)N * (double)K;
  j.block = work > 262144.0 && N > 256 ? 256 : N;
  j.n_blocks = (N + j.block - 1) / j.block;
  tpu_pool_run(dev->pool, B * j.n_blocks, dot_task, &j);
  free(buf);
  return NULL;
}

tpu_status_t tpu_vtpu_run_dot(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  tpu_vtpu_device_t* dev = x->dev;
  int64_t B = prod(k->lhs_dims, k->nb);
  int64_t M = prod(k->lhs_dims + k->nb, k->nm);
  int64_t K = prod(k->lhs_dims + k->nb + k->nm, k->nk);
  int64_t N = prod(k->rhs_dims + k->nb + k->nk, k->nn);
  int32_t lr = k->nb + k->nm + k->nk, rr = k->nb + k->nk + k->nn, orank = k->nb + k->nm + k->nn;
  if (B * M * N == 0) return NULL;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
    return TPU_STATUS(UNIMPLEMENTED, "dot_general: a dimension exceeds 2^31");
  tpu_dtype_t at = k->lhs.dtype;
  const void* abase = (const char*)tpu_vtpu_access_base(x, &k->lhs) + k->lhs.elem_offset * tpu_dtype_size(at);
  const void* bbase = (const char*)tpu_vtpu_access_base(x, &k->rhs) + k->rhs.elem_offset * tpu_dtype_size(at);
  char* obase = (char*)tpu_vtpu_access_base(x, &k->store) + k->store.elem_offset * tpu_dtype_size(k->out_dtype);
  int64_t na = B * M * K, nbb = B * K * N, nc = B * M * N;
  tpu_ct_t ct = tpu_vtpu_compute_type(at);
  int64_t cs[TPU_MAX_RANK];
  tpu_shape_t osh = {.rank = orank};
  memcpy(osh.dims, k->out_dims, sizeof(int64_t) * (size_t)orank);
  tpu_shape_contiguous_strides(&osh, cs);

  if (ct == TPU_CT_I32 || ct == TPU_CT_I64) {
    void* s = NULL;
    TPU_RETURN_IF_ERROR(scratch(dev, 8 * (na + nbb + nc), &s));
    int64_t* a = s;
    int64_t* b = a + na;
    int64_t* c = b + nbb;
    pack(abase, at, k->lhs_dims, k->lhs.strides, lr, a, TPU_DTYPE_S64);
    pack(bbase, at, k->rhs_dims, k->rhs.strides, rr, b, TPU_DTYPE_S64);
    int_dot(k, a, b, c, B, M, N, K);
    tpu_vtpu_copy_strided(obase, k->out_dtype, k->store.strides, c, TPU_DTYPE_S64, cs, orank, k->out_dims);
    return NULL;
  }
  bool f64 = ct == TPU_CT_F64;
  tpu_precision_t prec = x->exe->base.precision;
  bool split = !f64 && prec == TPU_PRECISION_HIGH && at != TPU_DTYPE_BF16;
  int64_t es = f64 ? 8 : 4;
  int64_t parts = split ? 2 : 1;
  void* s = NULL;
  TPU_RETURN_IF_ERROR(scratch(dev, es * (parts * (na + nbb) + nc), &s));
  char* p = s;
  dot_job_t j;
  memset(&j, 0, sizeof(j));
  j.k = k;
  j.B = B; j.M = M; j.N = N; j.K = K;
  j.precision = prec;
  j.f64 = f64;
  if (f64) {
    double* a = (double*)p;
    double* b = a + na;
    pack(abase, at, k->lhs_dims, k->lhs.strides, lr, a, TPU_DTYPE_F64);
    pack(bbase, at, k->rhs_dims, k->rhs.strides, rr, b, TPU_DTYPE_F64);
    j.ad = a;
    j.bd = b;
    j.cd = b + nbb;
  } else {
    float* a = (float*)p;
    float* b = a + na;
    pack(abase, at, k->lhs_dims, k->lhs.strides, lr, a, TPU_DTYPE_F32);
    pack(bbase, at, k->rhs_dims, k->rhs.strides, rr, b, TPU_DTYPE_F32);
    float* next = b + nbb;
    if (at != TPU_DTYPE_BF16 && prec == TPU_PRECISION_DEFAULT) {
      round_bf16_inplace(a, na);
      round_bf16_inplace(b, nbb);
    } else if (split) {
      float* alo = next;
      float* blo = alo + na;
      next = blo + nbb;
      for (int64_t i = 0; i < na; i++) {
        float hi = tpu_round_bf16(a[i]);
        alo[i] = tpu_round_bf16(a[i] - hi);
        a[i] = hi;
      }
      for (int64_t i = 0; i < nbb; i++) {
        float hi = tpu_round_bf16(b[i]);
        blo[i] = tpu_round_bf16(b[i] - hi);
        b[i] = hi;
      }
      j.a_lo = alo;
      j.b_lo = blo;
    }
    j.a_hi = a;
    j.b_hi = b;
    j.c = next;
  }
  /* column blocks of a fixed width (never derived from the thread count),
   * so results do not depend on how many threads run them */
  double work = (double)M * (double)N * (double)K;
  j.block = work > 262144.0 && N > 256 ? 256 : N;
  j.n_blocks = (N + j.block - 1) / j.block;
  tpu_pool_run(dev->pool, B * j.n_blocks, dot_task, &j);
  if (f64)
    tpu_vtpu_copy_strided(obase, k->out_dtype, k->store.strides, j.cd, TPU_DTYPE_F64, cs, orank, k->out_dims);
  else
    tpu_vtpu_copy_strided(obase, k->out_dtype, k->store.strides, j.c, TPU_DTYPE_F32, cs, orank, k->out_dims);
  return NULL;
}

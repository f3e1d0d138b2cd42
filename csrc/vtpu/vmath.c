/* Vector math kernels: the block drivers, instantiated once for the portable
 * path and once for the AVX-512 path, run-time dispatch, and the float64
 * loops. The per-element math lives in vmath_impl.h. */
#include "tpu/vmath.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/base.h"
#include "vtpu/vmath_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define VM_HAVE_AVX512 1
#define VM_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#include <immintrin.h>
#else
#define VM_HAVE_AVX512 0
#endif

/* ---------------------------------------------------------- block kernels
 *
 * Kernels work on blocks of VM_BLOCK elements copied into aligned locals:
 * the inner loops then have a constant trip count and provably distinct
 * input and output, so they vectorize without run-time alias checks, y == x
 * works (a block is read before it is written), and the tail goes through
 * the very same code (zero-padded), so it cannot round differently. */
#define VM_BLOCK 64
#define VM_ALIGNED __attribute__((aligned(64)))

/* Each kernel has one block function per path (identical bodies, except
 * sqrt's square-root primitive below) so the driver can name its own. */
#define VM_DEFINE_MAP1(NAME, FN)                                         \
  VM_INLINE void vm_##NAME##_block_portable(const float* restrict in,    \
                                            float* restrict out) {       \
    for (int j = 0; j < VM_BLOCK; j++) out[j] = FN(in[j]);               \
  }                                                                      \
  VM_INLINE void vm_##NAME##_block_avx512(const float* restrict in,      \
                                          float* restrict out) {         \
    for (int j = 0; j < VM_BLOCK; j++) out[j] = FN(in[j]);               \
  }
#define VM_DEFINE_MAP2(NAME, FN)                                          \
  VM_INLINE void vm_##NAME##_block_portable(const float* restrict a,      \
                                            const float* restrict b,      \
                                            float* restrict out) {        \
    for (int j = 0; j < VM_BLOCK; j++) out[j] = FN(a[j], b[j]);           \
  }                                                                       \
  VM_INLINE void vm_##NAME##_block_avx512(const float* restrict a,        \
                                          const float* restrict b,        \
                                          float* restrict out) {          \
    for (int j = 0; j < VM_BLOCK; j++) out[j] = FN(a[j], b[j]);           \
  }

VM_DEFINE_MAP1(exp, vm_exp1)
VM_DEFINE_MAP1(expm1, vm_expm1_1)
VM_DEFINE_MAP1(log, vm_log1)
VM_DEFINE_MAP1(log1p, vm_log1p1)
VM_DEFINE_MAP1(tanh, vm_tanh1)
VM_DEFINE_MAP1(logistic, vm_logistic1)
VM_DEFINE_MAP1(erf, vm_erf1)
VM_DEFINE_MAP2(pow, vm_pow1)
VM_DEFINE_MAP2(atan2, vm_atan2_1)

/* sin and cos: Cody-Waite reduction for every lane, then Payne-Hanek only
 * when the block holds some |x| >= VM_TRIG_HUGE (the choice per lane does
 * not depend on the block, so results do not either). */
VM_INLINE void vm_trig_block(const float* restrict in, float* restrict out,
                             uint32_t is_cos) {
  float r[VM_BLOCK] VM_ALIGNED, r_lo[VM_BLOCK] VM_ALIGNED;
  uint32_t q[VM_BLOCK] VM_ALIGNED;
  uint32_t any_huge = 0;
  for (int j = 0; j < VM_BLOCK; j++) {
    float ax = vm_abs(in[j]);
    vm_trig_reduce_cw(ax, &r[j], &r_lo[j], &q[j]);
    any_huge |= ax >= VM_TRIG_HUGE;
  }
  if (any_huge) {
    for (int j = 0; j < VM_BLOCK; j++) {
      float ax = vm_abs(in[j]), rh, rl;
      uint32_t qh;
      vm_trig_reduce_ph(ax, &rh, &rl, &qh);
      uint32_t huge = ax >= VM_TRIG_HUGE;
      r[j] = huge ? rh : r[j];
      r_lo[j] = huge ? rl : r_lo[j];
      q[j] = huge ? qh : q[j];
    }
  }
  for (int j = 0; j < VM_BLOCK; j++)
    out[j] = vm_trig_finish(in[j], r[j], r_lo[j], q[j], is_cos);
}
#define VM_DEFINE_TRIG(NAME, IS_COS, SUFFIX)                        \
  VM_INLINE void vm_##NAME##_block_##SUFFIX(const float* restrict in, \
                                            float* restrict out) {    \
    vm_trig_block(in, out, IS_COS);                                   \
  }
VM_DEFINE_TRIG(sin, 0, portable)
VM_DEFINE_TRIG(sin, 0, avx512)
VM_DEFINE_TRIG(cos, 1, portable)
VM_DEFINE_TRIG(cos, 1, avx512)

/* sqrt and rsqrt. Under the default -fmath-errno GCC treats sqrtf as able
 * to set errno, and an optimize attribute cannot undo that for a builtin, so
 * the loop would not vectorize; the AVX-512 block therefore issues vsqrtps
 * itself. sqrtss and vsqrtps are the same IEEE operation under the same
 * MXCSR, so this does not break bit identity. */
VM_INLINE void vm_sqrt_raw_portable(const float* restrict in,
                                    float* restrict out) {
  for (int j = 0; j < VM_BLOCK; j++) out[j] = __builtin_sqrtf(in[j]);
}
#if VM_HAVE_AVX512
VM_TARGET_AVX512 VM_INLINE void vm_sqrt_raw_avx512(const float* restrict in,
                                                   float* restrict out) {
  for (int j = 0; j < VM_BLOCK; j += 16)
    _mm512_storeu_ps(out + j, _mm512_sqrt_ps(_mm512_loadu_ps(in + j)));
}
#endif
#define VM_DEFINE_SQRT(SUFFIX, ATTR)                                       \
  ATTR VM_INLINE void vm_sqrt_block_##SUFFIX(const float* restrict in,     \
                                             float* restrict out) {        \
    float s[VM_BLOCK] VM_ALIGNED;                                          \
    vm_sqrt_raw_##SUFFIX(in, s);                                           \
    for (int j = 0; j < VM_BLOCK; j++) out[j] = vm_canon(s[j]);            \
  }                                                                        \
  ATTR VM_INLINE void vm_rsqrt_block_##SUFFIX(const float* restrict in,    \
                                              float* restrict out) {       \
    float s[VM_BLOCK] VM_ALIGNED;                                          \
    vm_sqrt_raw_##SUFFIX(in, s);                                           \
    for (int j = 0; j < VM_BLOCK; j++) out[j] = vm_canon(1.0f / s[j]);     \
  }
VM_DEFINE_SQRT(portable, )
#if VM_HAVE_AVX512
VM_DEFINE_SQRT(avx512, VM_TARGET_AVX512)
#endif

/* ---------------------------------------------------------------- drivers */

#define VM_DRIVER1(NAME, SUFFIX, ATTR)                                     \
  ATTR VM_OPT __attribute__((noinline)) static void vm_##NAME##_##SUFFIX(  \
      const float* x, float* y, int64_t n) {                               \
    float in[VM_BLOCK] VM_ALIGNED, out[VM_BLOCK] VM_ALIGNED;               \
    for (int64_t i = 0; i < n; i += VM_BLOCK) {                            \
      int64_t m = n - i;                                                   \
      if (m >= VM_BLOCK) {                                                 \
        memcpy(in, x + i, sizeof in);                                      \
      } else {                                                             \
        memset(in, 0, sizeof in);                                          \
        memcpy(in, x + i, (size_t)m * sizeof(float));                      \
      }                                                                    \
      vm_##NAME##_block_##SUFFIX(in, out);                                 \
      if (m >= VM_BLOCK)                                                   \
        memcpy(y + i, out, sizeof out);                                    \
      else                                                                 \
        memcpy(y + i, out, (size_t)m * sizeof(float));                     \
    }                                                                      \
  }

#define VM_DRIVER2(NAME, SUFFIX, ATTR)                                     \
  ATTR VM_OPT __attribute__((noinline)) static void vm_##NAME##_##SUFFIX(  \
      const float* a, const float* b, float* y, int64_t n) {               \
    float ina[VM_BLOCK] VM_ALIGNED, inb[VM_BLOCK] VM_ALIGNED;              \
    float out[VM_BLOCK] VM_ALIGNED;                                        \
    for (int64_t i = 0; i < n; i += VM_BLOCK) {                            \
      int64_t m = n - i;                                                   \
      if (m >= VM_BLOCK) {                                                 \
        memcpy(ina, a + i, sizeof ina);                                    \
        memcpy(inb, b + i, sizeof inb);                                    \
      } else {                                                             \
        memset(ina, 0, sizeof ina);                                        \
        memset(inb, 0, sizeof inb);                                        \
        memcpy(ina, a + i, (size_t)m * sizeof(float));                     \
        memcpy(inb, b + i, (size_t)m * sizeof(float));                     \
      }                                                                    \
      vm_##NAME##_block_##SUFFIX(ina, inb, out);                           \
      if (m >= VM_BLOCK)                                                   \
        memcpy(y + i, out, sizeof out);                                    \
      else                                                                 \
        memcpy(y + i, out, (size_t)m * sizeof(float));                     \
    }                                                                      \
  }

/* One list drives the drivers of both paths, the dispatch table and the
 * public entry points, so they cannot drift apart. */
#define VM_UNARY_LIST(X) \
  X(exp) X(expm1) X(log) X(log1p) X(tanh) X(logistic) X(sin) X(cos) X(erf) \
  X(sqrt) X(rsqrt)
#define VM_BINARY_LIST(X) X(pow) X(atan2)

#define VM_PORTABLE_ATTR
#define VM_P1(NAME) VM_DRIVER1(NAME, portable, VM_PORTABLE_ATTR)
#define VM_P2(NAME) VM_DRIVER2(NAME, portable, VM_PORTABLE_ATTR)
VM_UNARY_LIST(VM_P1)
VM_BINARY_LIST(VM_P2)

#if VM_HAVE_AVX512
#define VM_V1(NAME) VM_DRIVER1(NAME, avx512, VM_TARGET_AVX512)
#define VM_V2(NAME) VM_DRIVER2(NAME, avx512, VM_TARGET_AVX512)
VM_UNARY_LIST(VM_V1)
VM_BINARY_LIST(VM_V2)
#endif

/* --------------------------------------------------------------- dispatch */

typedef void (*vm_unary_fn)(const float*, float*, int64_t);
typedef void (*vm_binary_fn)(const float*, const float*, float*, int64_t);

typedef struct vm_table_s {
  const char* isa;
#define VM_FIELD1(NAME) vm_unary_fn NAME;
#define VM_FIELD2(NAME) vm_binary_fn NAME;
  VM_UNARY_LIST(VM_FIELD1)
  VM_BINARY_LIST(VM_FIELD2)
} vm_table_t;

#define VM_ENTRY_PORTABLE(NAME) .NAME = vm_##NAME##_portable,
static const vm_table_t vm_table_portable = {
    .isa = "portable",
    VM_UNARY_LIST(VM_ENTRY_PORTABLE) VM_BINARY_LIST(VM_ENTRY_PORTABLE)};

#if VM_HAVE_AVX512
#define VM_ENTRY_AVX512(NAME) .NAME = vm_##NAME##_avx512,
static const vm_table_t vm_table_avx512 = {
    .isa = "avx512",
    VM_UNARY_LIST(VM_ENTRY_AVX512) VM_BINARY_LIST(VM_ENTRY_AVX512)};
#endif

/* The active table; NULL until first use. Relaxed ordering is enough: the
 * tables are constant and either one gives the same results. */
static _Atomic(const vm_table_t*) vm_active;

/* What the CPU and TORCHTPU_ISA allow, computed once. */
static const vm_table_t* vm_auto_table(void) {
  static _Atomic(const vm_table_t*) cached;
  const vm_table_t* t = atomic_load_explicit(&cached, memory_order_relaxed);
  if (t) return t;
  t = &vm_table_portable;
#if VM_HAVE_AVX512
  tpu_cpu_features_t f = tpu_cpu_features();
  /* The target attribute lets GCC use DQ/BW/VL instructions too (masked
   * 64-bit conversions, mask moves), so all four are required. */
  bool ok = f.avx512f && f.avx512bw && f.avx512vl && f.fma &&
            __builtin_cpu_supports("avx512dq");
  const char* env = getenv("TORCHTPU_ISA");
  if (env && strcmp(env, "portable") == 0) ok = false;
  if (ok) t = &vm_table_avx512;
#endif
  atomic_store_explicit(&cached, t, memory_order_relaxed);
  return t;
}

static inline const vm_table_t* vm_table(void) {
  const vm_table_t* t = atomic_load_explicit(&vm_active, memory_order_relaxed);
  if (TPU_LIKELY(t != NULL)) return t;
  t = vm_auto_table();
  /* Keep a table that set_portable stored meanwhile. */
  const vm_table_t* expected = NULL;
  if (!atomic_compare_exchange_strong_explicit(&vm_active, &expected, t,
                                               memory_order_relaxed,
                                               memory_order_relaxed))
    t = expected;
  return t;
}

void tpu_vmath_set_portable(bool force) {
  atomic_store_explicit(&vm_active,
                        force ? &vm_table_portable : vm_auto_table(),
                        memory_order_relaxed);
}

bool tpu_vmath_is_vectorized(void) {
  return vm_table() != &vm_table_portable;
}

const char* tpu_vmath_isa(void) { return vm_table()->isa; }

/* ------------------------------------------------------ float32 entries */

#define VM_PUBLIC1(NAME)                                                \
  void tpu_vmath_##NAME##_f32(const float* x, float* y, int64_t n) {   \
    if (n > 0) vm_table()->NAME(x, y, n);                               \
  }
#define VM_PUBLIC2(NAME)                                                \
  void tpu_vmath_##NAME##_f32(const float* a, const float* b, float* y, \
                              int64_t n) {                              \
    if (n > 0) vm_table()->NAME(a, b, y, n);                            \
  }
VM_UNARY_LIST(VM_PUBLIC1)
VM_BINARY_LIST(VM_PUBLIC2)

/* ------------------------------------------------------ float64 entries */

static double vm_logistic_d(double x) {
  /* No cancellation on either side, as in the float32 version. */
  double e = exp(-fabs(x));
  return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}
static double vm_rsqrt_d(double x) { return 1.0 / sqrt(x); }

#define VM_F64_UNARY(NAME, FN)                                           \
  void tpu_vmath_##NAME##_f64(const double* x, double* y, int64_t n) {  \
    for (int64_t i = 0; i < n; i++) y[i] = FN(x[i]);                     \
  }
VM_F64_UNARY(exp, exp)
VM_F64_UNARY(expm1, expm1)
VM_F64_UNARY(log, log)
VM_F64_UNARY(log1p, log1p)
VM_F64_UNARY(tanh, tanh)
VM_F64_UNARY(logistic, vm_logistic_d)
VM_F64_UNARY(sin, sin)
VM_F64_UNARY(cos, cos)
VM_F64_UNARY(erf, erf)
VM_F64_UNARY(sqrt, sqrt)
VM_F64_UNARY(rsqrt, vm_rsqrt_d)

void tpu_vmath_pow_f64(const double* x, const double* e, double* y,
                       int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = pow(x[i], e[i]);
}

void tpu_vmath_atan2_f64(const double* y_, const double* x, double* out,
                         int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = atan2(y_[i], x[i]);
}

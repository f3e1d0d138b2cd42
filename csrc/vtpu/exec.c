/* The VPU interpreter: runs LOOP and REDUCE kernels chunk by chunk.
 *
 * Results never depend on how work is split across threads: LOOP chunks are
 * independent, and reductions combine partial results in a fixed order
 * decided by the shape alone (fixed lane count, fixed segment size, pairwise
 * combination of segments).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/vmath.h"
#include "vtpu_impl.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define CHUNK TPU_VPU_CHUNK
#define TASK_CHUNKS 32  /* chunks per LOOP task */
#define SEG_CHUNKS 64   /* chunks per reduction segment */

/* ------------------------------------------------------------ helpers */

void* tpu_vtpu_access_base(const tpu_exec_ctx_t* x, const tpu_access_t* a) {
  switch (a->where) {
    case TPU_LOC_PARAM: {
      const tpu_arg_t* arg = &x->args[a->index];
      return (char*)arg->buffer->data + arg->byte_offset;
    }
    case TPU_LOC_OUTPUT: {
      const tpu_arg_t* arg = &x->outs[a->index];
      return (char*)arg->buffer->data + arg->byte_offset;
    }
    case TPU_LOC_TEMP:
      return x->temp + a->byte_offset;
    case TPU_LOC_CONSTANT:
      return (void*)a->constant;
    default:
      return NULL;
  }
}

static inline float bf16_to_f32(uint16_t h) { return tpu_bf16_to_f32(h); }

/* Reads n elements (stride st, elements) of dtype d into a register of the
 * dtype's compute type, at position pos. */
static void load_run(void* reg, int64_t pos, const char* base, tpu_dtype_t d,
                     int64_t st, int64_t n) {
#define LOAD_CASE(T, RT, CONV)                                        \
  {                                                                   \
    const T* p = (const T*)base;                                      \
    RT* r = (RT*)reg + pos;                                           \
    if (st == 1) {                                                    \
      for (int64_t i = 0; i < n; i++) r[i] = CONV(p[i]);              \
    } else if (st == 0) {                                             \
      RT v = CONV(p[0]);                                              \
      for (int64_t i = 0; i < n; i++) r[i] = v;                       \
    } else {                                                          \
      for (int64_t i = 0; i < n; i++) r[i] = CONV(p[i * st]);         \
    }                                                                 \
    return;                                                           \
  }
#define ID(x) (x)
#define F16(x) tpu_f16_to_f32(x)
#define PRED(x) ((int32_t)((x) != 0))
  switch (d) {
    case TPU_DTYPE_F32: LOAD_CASE(float, float, ID)
    case TPU_DTYPE_BF16: LOAD_CASE(uint16_t, float, bf16_to_f32)
    case TPU_DTYPE_F16: LOAD_CASE(uint16_t, float, F16)
    case TPU_DTYPE_F64: LOAD_CASE(double, double, ID)
    case TPU_DTYPE_PRED: LOAD_CASE(uint8_t, int32_t, PRED)
    case TPU_DTYPE_S8: LOAD_CASE(int8_t, int32_t, ID)
    case TPU_DTYPE_U8: LOAD_CASE(uint8_t, int32_t, ID)
    case TPU_DTYPE_S16: LOAD_CASE(int16_t, int32_t, ID)
    case TPU_DTYPE_U16: LOAD_CASE(uint16_t, int32_t, ID)
    case TPU_DTYPE_S32: LOAD_CASE(int32_t, int32_t, ID)
    case TPU_DTYPE_U32: LOAD_CASE(uint32_t, int64_t, ID)
    case TPU_DTYPE_S64: LOAD_CASE(int64_t, int64_t, ID)
    case TPU_DTYPE_U64: LOAD_CASE(uint64_t, int64_t, (int64_t))
    default: return;
  }
#undef LOAD_CASE
}

/* Writes n elements from a register (compute type of d) to memory,
 * rounding or wrapping into d. */
static void store_run(char* base, tpu_dtype_t d, int64_t st, const void* reg,
                      int64_t pos, int64_t n) {
#define STORE_CASE(T, RT, CONV)                                  \
  {                                                              \
    T* p = (T*)base;                                             \
    const RT* r = (const RT*)reg + pos;                          \
    if (st == 1) {                                               \
      for (int64_t i = 0; i < n; i++) p[i] = CONV(r[i]);         \
    } else {                                                     \
      for (int64_t i = 0; i < n; i++) p[i * st] = CONV(r[i]);    \
    }                                                            \
    return;                                                      \
  }
#define TOBF16(x) tpu_f32_to_bf16(x)
#define TOF16(x) tpu_f32_to_f16(x)
#define TOPRED(x) ((uint8_t)((x) != 0))
  switch (d) {
    case TPU_DTYPE_F32: STORE_CASE(float, float, ID)
    case TPU_DTYPE_BF16: STORE_CASE(uint16_t, float, TOBF16)
    case TPU_DTYPE_F16: STORE_CASE(uint16_t, float, TOF16)
    case TPU_DTYPE_F64: STORE_CASE(double, double, ID)
    case TPU_DTYPE_PRED: STORE_CASE(uint8_t, int32_t, TOPRED)
    case TPU_DTYPE_S8: STORE_CASE(int8_t, int32_t, (int8_t))
    case TPU_DTYPE_U8: STORE_CASE(uint8_t, int32_t, (uint8_t))
    case TPU_DTYPE_S16: STORE_CASE(int16_t, int32_t, (int16_t))
    case TPU_DTYPE_U16: STORE_CASE(uint16_t, int32_t, (uint16_t))
    case TPU_DTYPE_S32: STORE_CASE(int32_t, int32_t, ID)
    case TPU_DTYPE_U32: STORE_CASE(uint32_t, int64_t, (uint32_t))
    case TPU_DTYPE_S64: STORE_CASE(int64_t, int64_t, ID)
    case TPU_DTYPE_U64: STORE_CASE(uint64_t, int64_t, (uint64_t))
    default: return;
  }
#undef STORE_CASE
}

/* Writes n contiguous f32 values with non-temporal stores: for outputs
 * larger than the caches, the next kernel reads them from memory anyway,
 * and skipping the read-for-ownership saves a quarter of the traffic of a
 * binary op. Returns false when the alignment does not allow it. */
static bool store_f32_stream(float* p, const float* r, int64_t n) {
#if defined(__x86_64__)
  if (((uintptr_t)p & 15) != 0 || (n & 3) != 0) return false;
  for (int64_t i = 0; i < n; i += 4) _mm_stream_ps(p + i, _mm_loadu_ps(r + i));
  return true;
#else
  (void)p;
  (void)r;
  (void)n;
  return false;
#endif
}

/* Iterates the row runs of linear range [start, start+len) of an iteration
 * space; calls fn(ctx, idx (multi-index of the run start), pos, n). */
typedef struct {
  int32_t rank;
  const int64_t* dims;
} space_t;

static void unravel(const space_t* sp, int64_t lin, int64_t* idx) {
  for (int32_t k = sp->rank - 1; k >= 0; k--) {
    idx[k] = lin % sp->dims[k];
    lin /= sp->dims[k];
  }
}

static inline int64_t dot_idx(const int64_t* idx, const int64_t* strides,
                              int32_t n) {
  int64_t s = 0;
  for (int32_t k = 0; k < n; k++) s += idx[k] * strides[k];
  return s;
}

/* Loads accessor a over [start, start+len) into reg. */
static void gather(const tpu_exec_ctx_t* x, const space_t* sp,
                   const tpu_access_t* a, int64_t start, int64_t len,
                   void* reg) {
  const char* base = tpu_vtpu_access_base(x, a);
  int32_t es = tpu_dtype_size(a->dtype);
  if (sp->rank == 0) {
    load_run(reg, 0, base + a->elem_offset * es, a->dtype, 0, len);
    return;
  }
  int64_t idx[TPU_MAX_RANK];
  unravel(sp, start, idx);
  int32_t inner = sp->rank - 1;
  int64_t pos = 0;
  while (pos < len) {
    int64_t n = sp->dims[inner] - idx[inner];
    if (n > len - pos) n = len - pos;
    int64_t off = a->elem_offset + dot_idx(idx, a->strides, sp->rank);
    load_run(reg, pos, base + off * es, a->dtype, a->strides[inner], n);
    pos += n;
    idx[inner] += n;
    for (int32_t k = inner; k > 0 && idx[k] >= sp->dims[k]; k--) {
      idx[k] = 0;
      idx[k - 1]++;
    }
  }
}

static void scatter_ex(const tpu_exec_ctx_t* x, const space_t* sp,
                       const tpu_access_t* a, int64_t start, int64_t len,
                       const void* reg, bool stream) {
  char* base = tpu_vtpu_access_base(x, a);
  int32_t es = tpu_dtype_size(a->dtype);
  if (sp->rank == 0) {
    store_run(base + a->elem_offset * es, a->dtype, 1, reg, 0, 1);
    return;
  }
  int64_t idx[TPU_MAX_RANK];
  unravel(sp, start, idx);
  int32_t inner = sp->rank - 1;
  int64_t pos = 0;
  while (pos < len) {
    int64_t n = sp->dims[inner] - idx[inner];
    if (n > len - pos) n = len - pos;
    int64_t off = a->elem_offset + dot_idx(idx, a->strides, sp->rank);
    if (!(stream && a->dtype == TPU_DTYPE_F32 && a->strides[inner] == 1 &&
          store_f32_stream((float*)(base + off * es), (const float*)reg + pos, n)))
      store_run(base + off * es, a->dtype, a->strides[inner], reg, pos, n);
    pos += n;
    idx[inner] += n;
    for (int32_t k = inner; k > 0 && idx[k] >= sp->dims[k]; k--) {
      idx[k] = 0;
      idx[k - 1]++;
    }
  }
}

static void scatter(const tpu_exec_ctx_t* x, const space_t* sp,
                    const tpu_access_t* a, int64_t start, int64_t len,
                    const void* reg) {
  scatter_ex(x, sp, a, start, len, reg, false);
}

/* Affine index values (iota, rng counters) over [start, start+len). */
static void affine_run(const space_t* sp, const tpu_access_t* a, int64_t start,
                       int64_t len, int64_t* out) {
  if (sp->rank == 0) {
    for (int64_t i = 0; i < len; i++) out[i] = a->elem_offset;
    return;
  }
  int64_t idx[TPU_MAX_RANK];
  unravel(sp, start, idx);
  int32_t inner = sp->rank - 1;
  int64_t pos = 0;
  while (pos < len) {
    int64_t n = sp->dims[inner] - idx[inner];
    if (n > len - pos) n = len - pos;
    int64_t v = a->elem_offset + dot_idx(idx, a->strides, sp->rank);
    int64_t s = a->strides[inner];
    for (int64_t i = 0; i < n; i++) out[pos + i] = v + i * s;
    pos += n;
    idx[inner] += n;
    for (int32_t k = inner; k > 0 && idx[k] >= sp->dims[k]; k--) {
      idx[k] = 0;
      idx[k - 1]++;
    }
  }
}

/* ------------------------------------------------------- element ops */

static inline float f32_max(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float f32_min(float a, float b) { return (a < b || a != a) ? a : b; }
static inline double f64_max(double a, double b) { return (a > b || a != a) ? a : b; }
static inline double f64_min(double a, double b) { return (a < b || a != a) ? a : b; }

/* Narrowing of an integer register to a smaller type. */
static inline int32_t wrap_i32(int32_t v, tpu_dtype_t d) {
  switch (d) {
    case TPU_DTYPE_S8: return (int8_t)v;
    case TPU_DTYPE_U8: return (uint8_t)v;
    case TPU_DTYPE_S16: return (int16_t)v;
    case TPU_DTYPE_U16: return (uint16_t)v;
    case TPU_DTYPE_PRED: return v != 0;
    default: return v;
  }
}

static inline int64_t f64_to_i64(double v) {
  /* x86 semantics for out-of-range and NaN: the "integer indefinite" */
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return INT64_MIN;
  return (int64_t)v;
}

/* Inverse error function: a rational first guess refined by Newton steps
 * on erf (double precision, so float results are correctly rounded in
 * practice). */
static double erfinv_d(double y) {
  if (y <= -1.0) return y == -1.0 ? -INFINITY : NAN;
  if (y >= 1.0) return y == 1.0 ? INFINITY : NAN;
  if (y != y) return y;
  double w = -log((1.0 - y) * (1.0 + y)), x;
  if (w < 5.0) {
    w -= 2.5;
    double p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
    x = p * y;
  } else {
    w = sqrt(w) - 3.0;
    double p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
    x = p * y;
  }
  for (int i = 0; i < 3; i++) {
    double err = erf(x) - y;
    x -= err / (1.1283791670955126 * exp(-x * x));
  }
  return x;
}

/* digamma: recurrence up to x >= 6, then the asymptotic series. */
static double digamma_d(double x) {
  if (x != x || x == INFINITY) return x;
  if (x == -INFINITY) return NAN;
  if (x <= 0 && floor(x) == x) return x == 0 ? (signbit(x) ? INFINITY : -INFINITY) : NAN;
  double result = 0;
  if (x < 0) {
    /* reflection: psi(1-x) - psi(x) = pi cot(pi x) */
    result = -3.14159265358979323846 / tan(3.14159265358979323846 * x);
    x = 1 - x;
  }
  while (x < 6) {
    result -= 1 / x;
    x += 1;
  }
  double f = 1 / (x * x);
  double t = f * (-1.0 / 12 + f * (1.0 / 120 + f * (-1.0 / 252 + f * (1.0 / 240 + f * (-1.0 / 132)))));
  return result + log(x) - 0.5 / x + t;
}

static double lgamma_d(double x) {
  int sign;
  return lgamma_r(x, &sign);
}

/* Scalar math for ops with no vector kernel: evaluated in double and
 * rounded once, identical on every code path. */
static double chlo_d(uint16_t op, double x) {
  switch (op) {
    case TPU_OP_TAN: return tan(x);
    case TPU_OP_ATAN: return atan(x);
    case TPU_OP_ASIN: return asin(x);
    case TPU_OP_ACOS: return acos(x);
    case TPU_OP_SINH: return sinh(x);
    case TPU_OP_COSH: return cosh(x);
    case TPU_OP_ASINH: return asinh(x);
    case TPU_OP_ACOSH: return acosh(x);
    case TPU_OP_ATANH: return atanh(x);
    case TPU_OP_ERF_INV: return erfinv_d(x);
    case TPU_OP_LGAMMA: return lgamma_d(x);
    case TPU_OP_DIGAMMA: return digamma_d(x);
    case TPU_OP_CBRT: return cbrt(x);
    case TPU_OP_LOG2: return log2(x);
    case TPU_OP_LOG10: return log10(x);
    case TPU_OP_ROUND_AFZ: return round(x);
    default: return NAN;
  }
}

static void run_unary_f32(uint16_t op, const float* a, float* r, int64_t n,
                          int32_t* ri) {
  switch (op) {
    case TPU_OP_NEGATE: for (int64_t i = 0; i < n; i++) r[i] = -a[i]; break;
    case TPU_OP_ABS: for (int64_t i = 0; i < n; i++) r[i] = fabsf(a[i]); break;
    case TPU_OP_SIGN:
      for (int64_t i = 0; i < n; i++)
        r[i] = a[i] > 0 ? 1.0f : a[i] < 0 ? -1.0f : a[i]; /* keeps ±0, NaN */
      break;
    case TPU_OP_EXP: tpu_vmath_exp_f32(a, r, n); break;
    case TPU_OP_EXPM1: tpu_vmath_expm1_f32(a, r, n); break;
    case TPU_OP_LOG: tpu_vmath_log_f32(a, r, n); break;
    case TPU_OP_LOG1P: tpu_vmath_log1p_f32(a, r, n); break;
    case TPU_OP_SQRT: tpu_vmath_sqrt_f32(a, r, n); break;
    case TPU_OP_RSQRT: tpu_vmath_rsqrt_f32(a, r, n); break;
    case TPU_OP_TANH: tpu_vmath_tanh_f32(a, r, n); break;
    case TPU_OP_LOGISTIC: tpu_vmath_logistic_f32(a, r, n); break;
    case TPU_OP_SIN: tpu_vmath_sin_f32(a, r, n); break;
    case TPU_OP_COS: tpu_vmath_cos_f32(a, r, n); break;
    case TPU_OP_ERF: tpu_vmath_erf_f32(a, r, n); break;
    case TPU_OP_FLOOR: for (int64_t i = 0; i < n; i++) r[i] = floorf(a[i]); break;
    case TPU_OP_CEIL: for (int64_t i = 0; i < n; i++) r[i] = ceilf(a[i]); break;
    case TPU_OP_ROUND_EVEN: for (int64_t i = 0; i < n; i++) r[i] = nearbyintf(a[i]); break;
    case TPU_OP_IS_FINITE: for (int64_t i = 0; i < n; i++) ri[i] = isfinite(a[i]) ? 1 : 0; break;
    default: for (int64_t i = 0; i < n; i++) r[i] = (float)chlo_d(op, (double)a[i]); break;
  }
}

static void run_unary_f64(uint16_t op, const double* a, double* r, int64_t n,
                          int32_t* ri) {
  for (int64_t i = 0; i < n; i++) {
    double x = a[i], y = 0;
    switch (op) {
      case TPU_OP_NEGATE: y = -x; break;
      case TPU_OP_ABS: y = fabs(x); break;
      case TPU_OP_SIGN: y = x > 0 ? 1.0 : x < 0 ? -1.0 : x; break;
      case TPU_OP_EXP: y = exp(x); break;
      case TPU_OP_EXPM1: y = expm1(x); break;
      case TPU_OP_LOG: y = log(x); break;
      case TPU_OP_LOG1P: y = log1p(x); break;
      case TPU_OP_SQRT: y = sqrt(x); break;
      case TPU_OP_RSQRT: y = 1.0 / sqrt(x); break;
      case TPU_OP_TANH: y = tanh(x); break;
      case TPU_OP_LOGISTIC: y = 1.0 / (1.0 + exp(-x)); break;
      case TPU_OP_SIN: y = sin(x); break;
      case TPU_OP_COS: y = cos(x); break;
      case TPU_OP_ERF: y = erf(x); break;
      case TPU_OP_FLOOR: y = floor(x); break;
      case TPU_OP_CEIL: y = ceil(x); break;
      case TPU_OP_ROUND_EVEN: y = nearbyint(x); break;
      case TPU_OP_IS_FINITE: ri[i] = isfinite(x) ? 1 : 0; continue;
      default: y = chlo_d(op, x); break;
    }
    r[i] = y;
  }
}

#define INT_UNARY(T)                                                        \
  static void run_unary_##T(uint16_t op, tpu_dtype_t d, const T* a, T* r,   \
                            int64_t n) {                                    \
    for (int64_t i = 0; i < n; i++) {                                       \
      T x = a[i];                                                           \
      switch (op) {                                                         \
        case TPU_OP_NEGATE: r[i] = (T)(0 - (uint64_t)x); break;             \
        case TPU_OP_ABS: r[i] = x < 0 ? (T)(0 - (uint64_t)x) : x; break;    \
        case TPU_OP_SIGN: r[i] = (T)((x > 0) - (x < 0)); break;             \
        case TPU_OP_NOT: r[i] = d == TPU_DTYPE_PRED ? (T)(x == 0) : (T)~x; break; \
        case TPU_OP_POPCNT: r[i] = (T)__builtin_popcountll((uint64_t)x &                \
            (tpu_dtype_size(d) >= 8 ? ~0ull : ((1ull << (8 * tpu_dtype_size(d))) - 1))); break; \
        default: r[i] = x; break;                                           \
      }                                                                     \
    }                                                                       \
  }
INT_UNARY(int32_t)
INT_UNARY(int64_t)

static void run_binary_f32(uint16_t op, const float* a, const float* b,
                           float* r, int64_t n) {
  switch (op) {
    case TPU_OP_ADD: for (int64_t i = 0; i < n; i++) r[i] = a[i] + b[i]; break;
    case TPU_OP_SUBTRACT: for (int64_t i = 0; i < n; i++) r[i] = a[i] - b[i]; break;
    case TPU_OP_MULTIPLY: for (int64_t i = 0; i < n; i++) r[i] = a[i] * b[i]; break;
    case TPU_OP_DIVIDE: for (int64_t i = 0; i < n; i++) r[i] = a[i] / b[i]; break;
    case TPU_OP_REMAINDER: for (int64_t i = 0; i < n; i++) r[i] = fmodf(a[i], b[i]); break;
    case TPU_OP_POWER: tpu_vmath_pow_f32(a, b, r, n); break;
    case TPU_OP_MAXIMUM: for (int64_t i = 0; i < n; i++) r[i] = f32_max(a[i], b[i]); break;
    case TPU_OP_MINIMUM: for (int64_t i = 0; i < n; i++) r[i] = f32_min(a[i], b[i]); break;
    case TPU_OP_ATAN2: tpu_vmath_atan2_f32(a, b, r, n); break;
    default: break;
  }
}

static void run_binary_f64(uint16_t op, const double* a, const double* b,
                           double* r, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double x = a[i], y = b[i], z = 0;
    switch (op) {
      case TPU_OP_ADD: z = x + y; break;
      case TPU_OP_SUBTRACT: z = x - y; break;
      case TPU_OP_MULTIPLY: z = x * y; break;
      case TPU_OP_DIVIDE: z = x / y; break;
      case TPU_OP_REMAINDER: z = fmod(x, y); break;
      case TPU_OP_POWER: z = pow(x, y); break;
      case TPU_OP_MAXIMUM: z = f64_max(x, y); break;
      case TPU_OP_MINIMUM: z = f64_min(x, y); break;
      case TPU_OP_ATAN2: z = atan2(x, y); break;
      default: break;
    }
    r[i] = z;
  }
}

#define INT_BINARY(T, UT, BITS)                                                 \
  static inline T ipow_##T(T base, T e) {                                       \
    if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;      \
    UT result = 1, b = (UT)base;                                                \
    while (e) {                                                                 \
      if (e & 1) result *= b;                                                   \
      b *= b;                                                                   \
      e >>= 1;                                                                  \
    }                                                                           \
    return (T)result;                                                           \
  }                                                                             \
  static void run_binary_##T(uint16_t op, const T* a, const T* b, T* r,         \
                             int64_t n) {                                       \
    for (int64_t i = 0; i < n; i++) {                                           \
      T x = a[i], y = b[i];                                                     \
      T z = 0;                                                                  \
      switch (op) {                                                             \
        case TPU_OP_ADD: z = (T)((UT)x + (UT)y); break;                         \
        case TPU_OP_SUBTRACT: z = (T)((UT)x - (UT)y); break;                    \
        case TPU_OP_MULTIPLY: z = (T)((UT)x * (UT)y); break;                    \
        case TPU_OP_DIVIDE:                                                     \
          z = y == 0 ? (T)-1 : (y == -1 ? (T)(0 - (UT)x) : (T)(x / y));         \
          break;                                                                \
        case TPU_OP_REMAINDER: z = (y == 0) ? x : (y == -1 ? 0 : (T)(x % y)); break; \
        case TPU_OP_POWER: z = ipow_##T(x, y); break;                           \
        case TPU_OP_MAXIMUM: z = x > y ? x : y; break;                          \
        case TPU_OP_MINIMUM: z = x < y ? x : y; break;                          \
        case TPU_OP_AND: z = x & y; break;                                      \
        case TPU_OP_OR: z = x | y; break;                                       \
        case TPU_OP_XOR: z = x ^ y; break;                                      \
        case TPU_OP_SHIFT_LEFT:                                                 \
          z = (y < 0 || y >= BITS) ? 0 : (T)((UT)x << y);                       \
          break;                                                                \
        case TPU_OP_SHIFT_RIGHT_ARITHMETIC:                                     \
          z = (y < 0 || y >= BITS) ? (x < 0 ? -1 : 0) : (T)(x >> y);            \
          break;                                                                \
        case TPU_OP_SHIFT_RIGHT_LOGICAL:                                        \
          z = (y < 0 || y >= BITS) ? 0 : (T)((UT)x >> y);                       \
          break;                                                                \
        default: break;                                                         \
      }                                                                         \
      r[i] = z;                                                                 \
    }                                                                           \
  }
INT_BINARY(int32_t, uint32_t, 32)
INT_BINARY(int64_t, uint64_t, 64)

#define COMPARE_LOOP(T)                                                    \
  static void compare_##T(int16_t dir, const T* a, const T* b, int32_t* r, \
                          int64_t n) {                                     \
    switch (dir) {                                                         \
      case TPU_CMP_EQ: for (int64_t i = 0; i < n; i++) r[i] = a[i] == b[i]; break; \
      case TPU_CMP_NE: for (int64_t i = 0; i < n; i++) r[i] = a[i] != b[i]; break; \
      case TPU_CMP_LT: for (int64_t i = 0; i < n; i++) r[i] = a[i] < b[i]; break;  \
      case TPU_CMP_LE: for (int64_t i = 0; i < n; i++) r[i] = a[i] <= b[i]; break; \
      case TPU_CMP_GT: for (int64_t i = 0; i < n; i++) r[i] = a[i] > b[i]; break;  \
      case TPU_CMP_GE: for (int64_t i = 0; i < n; i++) r[i] = a[i] >= b[i]; break; \
      default: break;                                                      \
    }                                                                      \
  }
COMPARE_LOOP(float)
COMPARE_LOOP(double)
COMPARE_LOOP(int32_t)
COMPARE_LOOP(int64_t)

/* Unsigned 32/64-bit values live in i64 registers; comparisons of u64 must
 * compare as unsigned. */
static void compare_u64(int16_t dir, const int64_t* a, const int64_t* b,
                        int32_t* r, int64_t n) {
  compare_int64_t(dir, (const int64_t*)a, (const int64_t*)b, r, n);
  if (dir == TPU_CMP_EQ || dir == TPU_CMP_NE) return;
  for (int64_t i = 0; i < n; i++) {
    uint64_t x = (uint64_t)a[i], y = (uint64_t)b[i];
    switch (dir) {
      case TPU_CMP_LT: r[i] = x < y; break;
      case TPU_CMP_LE: r[i] = x <= y; break;
      case TPU_CMP_GT: r[i] = x > y; break;
      case TPU_CMP_GE: r[i] = x >= y; break;
      default: break;
    }
  }
}

/* Converts a register between compute types, landing in dtype dd. */
static void convert_reg(const void* src, tpu_ct_t sct, tpu_dtype_t sd,
                        void* dst, tpu_ct_t dct, tpu_dtype_t dd, int64_t n) {
  (void)sd;
  switch (dct) {
    case TPU_CT_F32: {
      float* r = dst;
      if (sct == TPU_CT_F32) memcpy(r, src, sizeof(float) * (size_t)n);
      else if (sct == TPU_CT_F64) for (int64_t i = 0; i < n; i++) r[i] = (float)((const double*)src)[i];
      else if (sct == TPU_CT_I32) for (int64_t i = 0; i < n; i++) r[i] = (float)((const int32_t*)src)[i];
      else if (sd == TPU_DTYPE_U64) for (int64_t i = 0; i < n; i++) r[i] = (float)(uint64_t)((const int64_t*)src)[i];
      else for (int64_t i = 0; i < n; i++) r[i] = (float)((const int64_t*)src)[i];
      if (dd == TPU_DTYPE_BF16) for (int64_t i = 0; i < n; i++) r[i] = tpu_round_bf16(r[i]);
      else if (dd == TPU_DTYPE_F16) for (int64_t i = 0; i < n; i++) r[i] = tpu_f16_to_f32(tpu_f32_to_f16(r[i]));
      return;
    }
    case TPU_CT_F64: {
      double* r = dst;
      if (sct == TPU_CT_F32) for (int64_t i = 0; i < n; i++) r[i] = ((const float*)src)[i];
      else if (sct == TPU_CT_F64) memcpy(r, src, sizeof(double) * (size_t)n);
      else if (sct == TPU_CT_I32) for (int64_t i = 0; i < n; i++) r[i] = ((const int32_t*)src)[i];
      else if (sd == TPU_DTYPE_U64) for (int64_t i = 0; i < n; i++) r[i] = (double)(uint64_t)((const int64_t*)src)[i];
      else for (int64_t i = 0; i < n; i++) r[i] = (double)((const int64_t*)src)[i];
      return;
    }
    case TPU_CT_I32: {
      int32_t* r = dst;
      if (dd == TPU_DTYPE_PRED) {
        if (sct == TPU_CT_F32) for (int64_t i = 0; i < n; i++) r[i] = ((const float*)src)[i] != 0;
        else if (sct == TPU_CT_F64) for (int64_t i = 0; i < n; i++) r[i] = ((const double*)src)[i] != 0;
        else if (sct == TPU_CT_I32) for (int64_t i = 0; i < n; i++) r[i] = ((const int32_t*)src)[i] != 0;
        else for (int64_t i = 0; i < n; i++) r[i] = ((const int64_t*)src)[i] != 0;
        return;
      }
      if (sct == TPU_CT_F32) for (int64_t i = 0; i < n; i++) r[i] = (int32_t)f64_to_i64(((const float*)src)[i]);
      else if (sct == TPU_CT_F64) for (int64_t i = 0; i < n; i++) r[i] = (int32_t)f64_to_i64(((const double*)src)[i]);
      else if (sct == TPU_CT_I32) memcpy(r, src, sizeof(int32_t) * (size_t)n);
      else for (int64_t i = 0; i < n; i++) r[i] = (int32_t)((const int64_t*)src)[i];
      if (dd == TPU_DTYPE_S32 && (sct == TPU_CT_F32 || sct == TPU_CT_F64)) {
        /* float -> int32 out of range gives INT32_MIN, as cvttss2si does */
        for (int64_t i = 0; i < n; i++) {
          double v = sct == TPU_CT_F32 ? ((const float*)src)[i] : ((const double*)src)[i];
          if (!(v > -2147483649.0 && v < 2147483648.0)) r[i] = INT32_MIN;
        }
      }
      for (int64_t i = 0; i < n; i++) r[i] = wrap_i32(r[i], dd);
      return;
    }
    case TPU_CT_I64: {
      int64_t* r = dst;
      if (sct == TPU_CT_F32) for (int64_t i = 0; i < n; i++) r[i] = f64_to_i64(((const float*)src)[i]);
      else if (sct == TPU_CT_F64) for (int64_t i = 0; i < n; i++) r[i] = f64_to_i64(((const double*)src)[i]);
      else if (sct == TPU_CT_I32) for (int64_t i = 0; i < n; i++) r[i] = ((const int32_t*)src)[i];
      else memcpy(r, src, sizeof(int64_t) * (size_t)n);
      if (dd == TPU_DTYPE_U32) for (int64_t i = 0; i < n; i++) r[i] = (uint32_t)r[i];
      return;
    }
    default:
      return;
  }
}

static void narrow_reg(void* reg, tpu_ct_t ct, tpu_dtype_t d, int64_t n) {
  if (ct == TPU_CT_F32) {
    float* r = reg;
    if (d == TPU_DTYPE_BF16) for (int64_t i = 0; i < n; i++) r[i] = tpu_round_bf16(r[i]);
    else if (d == TPU_DTYPE_F16) for (int64_t i = 0; i < n; i++) r[i] = tpu_f16_to_f32(tpu_f32_to_f16(r[i]));
  } else if (ct == TPU_CT_I32) {
    int32_t* r = reg;
    for (int64_t i = 0; i < n; i++) r[i] = wrap_i32(r[i], d);
  } else if (ct == TPU_CT_I64 && d == TPU_DTYPE_U32) {
    int64_t* r = reg;
    for (int64_t i = 0; i < n; i++) r[i] = (uint32_t)r[i];
  }
}

static void fill_scalar(void* reg, tpu_ct_t ct, tpu_dtype_t pd,
                        tpu_scalar_t s, int64_t n) {
  /* the scalar arrives as f (floats), u (unsigned) or i (the rest) */
  double f;
  int64_t iv;
  if (tpu_dtype_is_float(pd)) {
    f = s.f;
    iv = f64_to_i64(f);
  } else if (pd == TPU_DTYPE_U64 || pd == TPU_DTYPE_U32) {
    iv = (int64_t)s.u;
    f = (double)s.u;
  } else {
    iv = s.i;
    f = (double)s.i;
  }
  switch (ct) {
    case TPU_CT_F32: {
      float v = (float)f;
      if (pd == TPU_DTYPE_BF16) v = tpu_round_bf16(v);
      else if (pd == TPU_DTYPE_F16) v = tpu_f16_to_f32(tpu_f32_to_f16(v));
      for (int64_t i = 0; i < n; i++) ((float*)reg)[i] = v;
      break;
    }
    case TPU_CT_F64: for (int64_t i = 0; i < n; i++) ((double*)reg)[i] = f; break;
    case TPU_CT_I32: {
      int32_t v = wrap_i32((int32_t)iv, pd);
      for (int64_t i = 0; i < n; i++) ((int32_t*)reg)[i] = v;
      break;
    }
    case TPU_CT_I64: for (int64_t i = 0; i < n; i++) ((int64_t*)reg)[i] = iv; break;
    default: break;
  }
}

static void rng_run(const tpu_vinstr_t* in, const int64_t* counters,
                    uint64_t seed, uint64_t offset, void* reg, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t w[4];
    tpu_vtpu_philox(seed, offset + (uint64_t)counters[i], w);
    if (in->kind == TPU_RNG_BITS) {
      if (in->ct == TPU_CT_I64)
        ((int64_t*)reg)[i] = (int64_t)(((uint64_t)w[1] << 32) | w[0]);
      continue;
    }
    if (in->ct == TPU_CT_F64) {
      double u1 = (double)((((uint64_t)w[0] << 32) | w[1]) >> 11) * 0x1p-53;
      if (in->kind == TPU_RNG_UNIFORM) {
        ((double*)reg)[i] = u1;
      } else {
        double u2 = (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * 0x1p-53;
        ((double*)reg)[i] = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
      }
    } else {
      float u1 = (float)(w[0] >> 8) * 0x1p-24f;
      if (in->kind == TPU_RNG_UNIFORM) {
        ((float*)reg)[i] = u1;
      } else {
        double a = (double)(w[0] >> 8) * 0x1p-24, b = (double)(w[1] >> 8) * 0x1p-24;
        ((float*)reg)[i] = (float)(sqrt(-2.0 * log(1.0 - a)) * cos(6.283185307179586 * b));
      }
    }
  }
}

void tpu_vtpu_note_bad_index(tpu_exec_ctx_t* x, int64_t index, int64_t size, int32_t dim) {
  int32_t expected = 0;
  if (__atomic_compare_exchange_n(&x->bad, &expected, 1, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    x->bad_index = index;
    x->bad_size = size;
    x->bad_dim = dim;
  }
}

/* Loads operand elements at affine(acc) + index * stride; an index outside
 * [0, size) yields a poison value and is reported (never clamped). */
static void gather_run(tpu_exec_ctx_t* x, const space_t* sp, const tpu_access_t* a,
                       int64_t start, int64_t len, const void* idx_reg, tpu_ct_t ict,
                       void* out, int64_t* scratch) {
  affine_run(sp, a, start, len, scratch);
  const char* base = tpu_vtpu_access_base(x, a);
  int32_t es = tpu_dtype_size(a->dtype);
  for (int64_t i = 0; i < len; i++) {
    int64_t ix = ict == TPU_CT_I64 ? ((const int64_t*)idx_reg)[i] : ((const int32_t*)idx_reg)[i];
    if (TPU_UNLIKELY(ix < 0 || ix >= a->gather_size)) {
      tpu_vtpu_note_bad_index(x, ix, a->gather_size, a->gather_dim);
      ix = -1; /* marks poison below */
    }
    scratch[i] = ix < 0 ? INT64_MIN : scratch[i] + ix * a->gather_stride;
  }
  for (int64_t i = 0; i < len; i++) {
    if (scratch[i] == INT64_MIN) {
      /* poison: NaN for floats, -1 for integers */
      union { float f; double d; int32_t i32; int64_t i64; uint16_t h; uint8_t b; } p;
      switch (a->dtype) {
        case TPU_DTYPE_F32: case TPU_DTYPE_BF16: case TPU_DTYPE_F16: ((float*)out)[i] = NAN; break;
        case TPU_DTYPE_F64: ((double*)out)[i] = NAN; break;
        case TPU_DTYPE_S64: case TPU_DTYPE_U32: case TPU_DTYPE_U64: ((int64_t*)out)[i] = -1; break;
        default: ((int32_t*)out)[i] = -1; break;
      }
      (void)p;
      continue;
    }
    load_run(out, i, base + scratch[i] * es, a->dtype, 0, 1);
  }
}

/* --------------------------------------------------------- the program */

static inline void* reg_at(char* regs, int32_t r) {
  return regs + (size_t)r * CHUNK * 8;
}

#define RP_MAX 64

/* The address of a load's chunk when it is one stride-1 run whose dtype is
 * its own compute type (f32, f64, s32, s64), or NULL. */
static void* direct_run(const tpu_exec_ctx_t* x, const space_t* sp, const tpu_access_t* a,
                        int64_t start, int64_t len) {
  tpu_dtype_t d = a->dtype;
  if (d != TPU_DTYPE_F32 && d != TPU_DTYPE_F64 && d != TPU_DTYPE_S32 && d != TPU_DTYPE_S64)
    return NULL;
  if (sp->rank == 0) return NULL;
  int64_t idx[TPU_MAX_RANK];
  unravel(sp, start, idx);
  int32_t inner = sp->rank - 1;
  if (sp->dims[inner] - idx[inner] < len || (a->strides[inner] != 1 && len > 1)) return NULL;
  char* base = tpu_vtpu_access_base(x, a);
  if (!base) return NULL;
  int64_t off = a->elem_offset + dot_idx(idx, a->strides, sp->rank);
  return base + off * tpu_dtype_size(d);
}

/* Runs prog over [start, start+len) of its space; returns the result
 * register. */
static void* run_chunk(tpu_exec_ctx_t* x, const tpu_vprogram_t* prog,
                       int64_t start, int64_t len, char* regs,
                       int64_t* scratch_idx) {
  space_t sp = {prog->rank, prog->dims};
  /* Register pointers: a register normally lives in regs, but a load whose
   * chunk is one contiguous run already in the compute type is read where
   * it lies (no copy); the next write to that register moves it back. */
  void* rp_small[RP_MAX];
  void** rp = prog->n_regs <= RP_MAX ? rp_small : NULL;
  if (rp)
    for (int32_t i = 0; i < prog->n_regs; i++) rp[i] = reg_at(regs, i);
#define RP(i) (rp ? rp[(i)] : reg_at(regs, (i)))
  for (int32_t pc = 0; pc < prog->n_code; pc++) {
    const tpu_vinstr_t* in = &prog->code[pc];
    void* r = reg_at(regs, in->dst);
    if (in->vop == TPU_VOP_LOAD && rp) {
      void* direct = direct_run(x, &sp, &prog->acc[in->acc], start, len);
      if (direct) {
        rp[in->dst] = direct;
        continue;
      }
    }
    switch (in->vop) {
      case TPU_VOP_LOAD:
        gather(x, &sp, &prog->acc[in->acc], start, len, r);
        break;
      case TPU_VOP_SCALAR:
        fill_scalar(r, (tpu_ct_t)in->ct, x->exe->base.param_dtypes[in->acc],
                    x->args[in->acc].scalar, len);
        break;
      case TPU_VOP_IOTA: {
        affine_run(&sp, &prog->acc[in->acc], start, len, scratch_idx);
        tpu_ct_t ct = (tpu_ct_t)in->ct;
        for (int64_t i = 0; i < len; i++) {
          int64_t v = scratch_idx[i];
          if (ct == TPU_CT_F32) ((float*)r)[i] = (float)v;
          else if (ct == TPU_CT_F64) ((double*)r)[i] = (double)v;
          else if (ct == TPU_CT_I32) ((int32_t*)r)[i] = (int32_t)v;
          else ((int64_t*)r)[i] = v;
        }
        break;
      }
      case TPU_VOP_RNG:
        affine_run(&sp, &prog->acc[in->acc], start, len, scratch_idx);
        rng_run(in, scratch_idx, x->args[in->a].scalar.u, x->args[in->acc2].scalar.u, r, len);
        break;
      case TPU_VOP_UNARY: {
        const void* a = RP(in->a);
        switch ((tpu_ct_t)in->src_ct) {
          case TPU_CT_F32: run_unary_f32(in->op, a, r, len, r); break;
          case TPU_CT_F64:
            if (in->op == TPU_OP_IS_FINITE) {
              /* result is i32 in the same register slot: go through a copy */
              const double* d = a;
              int32_t* ri = r;
              for (int64_t i = 0; i < len; i++) ri[i] = isfinite(d[i]) ? 1 : 0;
            } else {
              run_unary_f64(in->op, a, r, len, r);
            }
            break;
          case TPU_CT_I32: run_unary_int32_t(in->op, (tpu_dtype_t)in->src_dtype, a, r, len); break;
          case TPU_CT_I64: run_unary_int64_t(in->op, (tpu_dtype_t)in->src_dtype, a, r, len); break;
          default: break;
        }
        break;
      }
      case TPU_VOP_BINARY: {
        const void* a = RP(in->a);
        const void* b = RP(in->b);
        if (in->op == TPU_OP_COMPARE) {
          switch ((tpu_ct_t)in->src_ct) {
            case TPU_CT_F32: compare_float(in->kind, a, b, r, len); break;
            case TPU_CT_F64: compare_double(in->kind, a, b, r, len); break;
            case TPU_CT_I32: compare_int32_t(in->kind, a, b, r, len); break;
            case TPU_CT_I64:
              if (in->src_dtype == TPU_DTYPE_U64) compare_u64(in->kind, a, b, r, len);
              else compare_int64_t(in->kind, a, b, r, len);
              break;
            default: break;
          }
          break;
        }
        switch ((tpu_ct_t)in->ct) {
          case TPU_CT_F32: run_binary_f32(in->op, a, b, r, len); break;
          case TPU_CT_F64: run_binary_f64(in->op, a, b, r, len); break;
          case TPU_CT_I32: run_binary_int32_t(in->op, a, b, r, len); break;
          case TPU_CT_I64: run_binary_int64_t(in->op, a, b, r, len); break;
          default: break;
        }
        break;
      }
      case TPU_VOP_SELECT: {
        const int32_t* p = RP(in->a);
        size_t es = in->ct == TPU_CT_F32 || in->ct == TPU_CT_I32 ? 4 : 8;
        const char* t = RP(in->b);
        const char* f = RP(in->c);
        char* o = r;
        if (es == 4) {
          const uint32_t* tt = (const uint32_t*)t;
          const uint32_t* ff = (const uint32_t*)f;
          uint32_t* oo = (uint32_t*)o;
          for (int64_t i = 0; i < len; i++) oo[i] = p[i] ? tt[i] : ff[i];
        } else {
          const uint64_t* tt = (const uint64_t*)t;
          const uint64_t* ff = (const uint64_t*)f;
          uint64_t* oo = (uint64_t*)o;
          for (int64_t i = 0; i < len; i++) oo[i] = p[i] ? tt[i] : ff[i];
        }
        break;
      }
      case TPU_VOP_CLAMP: {
        const void* lo = RP(in->a);
        const void* v = RP(in->b);
        const void* hi = RP(in->c);
        switch ((tpu_ct_t)in->ct) {
          case TPU_CT_F32:
            for (int64_t i = 0; i < len; i++)
              ((float*)r)[i] = f32_min(f32_max(((const float*)v)[i], ((const float*)lo)[i]), ((const float*)hi)[i]);
            break;
          case TPU_CT_F64:
            for (int64_t i = 0; i < len; i++)
              ((double*)r)[i] = f64_min(f64_max(((const double*)v)[i], ((const double*)lo)[i]), ((const double*)hi)[i]);
            break;
          case TPU_CT_I32:
            for (int64_t i = 0; i < len; i++) {
              int32_t q = ((const int32_t*)v)[i], l = ((const int32_t*)lo)[i], h = ((const int32_t*)hi)[i];
              q = q < l ? l : q;
              ((int32_t*)r)[i] = q > h ? h : q;
            }
            break;
          case TPU_CT_I64:
            for (int64_t i = 0; i < len; i++) {
              int64_t q = ((const int64_t*)v)[i], l = ((const int64_t*)lo)[i], h = ((const int64_t*)hi)[i];
              q = q < l ? l : q;
              ((int64_t*)r)[i] = q > h ? h : q;
            }
            break;
          default: break;
        }
        break;
      }
      case TPU_VOP_CONVERT:
        convert_reg(RP(in->a), (tpu_ct_t)in->src_ct, (tpu_dtype_t)in->src_dtype,
                    r, (tpu_ct_t)in->ct, (tpu_dtype_t)in->dtype, len);
        break;
      case TPU_VOP_GATHER:
        gather_run(x, &sp, &prog->acc[in->acc], start, len, RP(in->a),
                   (tpu_ct_t)in->src_ct, r, scratch_idx);
        break;
      case TPU_VOP_NARROW:
        if (RP(in->a) != r)
          memcpy(r, RP(in->a), (size_t)len * (in->ct == TPU_CT_F32 || in->ct == TPU_CT_I32 ? 4 : 8));
        narrow_reg(r, (tpu_ct_t)in->ct, (tpu_dtype_t)in->dtype, len);
        break;
      default:
        break;
    }
    if (rp) rp[in->dst] = r;
  }
  return RP(prog->result);
#undef RP
}

/* Per-thread scratch: registers and an index buffer. */
static char* thread_regs(const tpu_exec_ctx_t* x, int thread) {
  return (char*)x->dev->regs + (size_t)thread * (size_t)x->dev->regs_cap;
}

/* The index scratch after a thread's registers (CHUNK int64s). */
static int64_t* thread_scratch(const tpu_exec_ctx_t* x, char* regs) {
  return (int64_t*)(regs + (size_t)x->exe->max_regs * CHUNK * 8);
}

/* ---------------------------------------------------------------- LOOP */

typedef struct {
  tpu_exec_ctx_t* x;
  const tpu_vkernel_t* k;
  int64_t n_chunks;
  bool stream; /* non-temporal stores: the output exceeds the caches */
} loop_task_t;

static void loop_task(void* ctx, int64_t task, int thread) {
  loop_task_t* t = ctx;
  const tpu_vprogram_t* p = &t->k->prog;
  char* regs = thread_regs(t->x, thread);
  int64_t* idx = thread_scratch(t->x, regs);
  space_t sp = {p->rank, p->dims};
  int64_t c0 = task * TASK_CHUNKS, c1 = c0 + TASK_CHUNKS;
  if (c1 > t->n_chunks) c1 = t->n_chunks;
  for (int64_t c = c0; c < c1; c++) {
    int64_t start = c * CHUNK;
    int64_t len = p->numel - start < CHUNK ? p->numel - start : CHUNK;
    void* res = run_chunk(t->x, p, start, len, regs, idx);
    scatter_ex(t->x, &sp, &t->k->store, start, len, res, t->stream);
  }
#if defined(__x86_64__)
  if (t->stream) _mm_sfence(); /* order the streaming stores before completion */
#endif
}

tpu_status_t tpu_vtpu_run_loop(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  if (k->prog.numel == 0) return NULL;
  loop_task_t t = {x, k, (k->prog.numel + CHUNK - 1) / CHUNK,
                   k->prog.numel * tpu_dtype_size(k->store.dtype) >= TPU_VPU_STREAM_BYTES};
  int64_t n_tasks = (t.n_chunks + TASK_CHUNKS - 1) / TASK_CHUNKS;
  tpu_pool_run(x->dev->pool, n_tasks, loop_task, &t);
  return NULL;
}

/* -------------------------------------------------------------- REDUCE */

typedef union {
  float f;
  double d;
  int32_t i;
  int64_t l;
} acc_t;

static acc_t reduce_init(tpu_reduce_kind_t kind, tpu_ct_t ct) {
  acc_t a;
  memset(&a, 0, sizeof(a));
  switch (kind) {
    case TPU_REDUCE_SUM: case TPU_REDUCE_OR: break;
    case TPU_REDUCE_PROD: case TPU_REDUCE_AND:
      if (ct == TPU_CT_F32) a.f = 1; else if (ct == TPU_CT_F64) a.d = 1;
      else if (ct == TPU_CT_I32) a.i = 1; else a.l = 1;
      break;
    case TPU_REDUCE_MAX:
      if (ct == TPU_CT_F32) a.f = -INFINITY; else if (ct == TPU_CT_F64) a.d = -INFINITY;
      else if (ct == TPU_CT_I32) a.i = INT32_MIN; else a.l = INT64_MIN;
      break;
    case TPU_REDUCE_MIN:
      if (ct == TPU_CT_F32) a.f = INFINITY; else if (ct == TPU_CT_F64) a.d = INFINITY;
      else if (ct == TPU_CT_I32) a.i = INT32_MAX; else a.l = INT64_MAX;
      break;
    default: break;
  }
  return a;
}

static inline acc_t combine(tpu_reduce_kind_t kind, tpu_ct_t ct, acc_t a, acc_t b) {
  acc_t r;
#define COMB(F, T)                                                       \
  switch (kind) {                                                        \
    case TPU_REDUCE_SUM: r.F = (T)(a.F + b.F); break;                    \
    case TPU_REDUCE_PROD: r.F = (T)(a.F * b.F); break;                   \
    case TPU_REDUCE_MAX: r.F = (a.F > b.F || a.F != a.F) ? a.F : b.F; break; \
    case TPU_REDUCE_MIN: r.F = (a.F < b.F || a.F != a.F) ? a.F : b.F; break; \
    case TPU_REDUCE_AND: r.F = (T)(a.F && b.F); break;                   \
    case TPU_REDUCE_OR: r.F = (T)(a.F || b.F); break;                    \
    default: r.F = a.F; break;                                           \
  }
  switch (ct) {
    case TPU_CT_F32: COMB(f, float) break;
    case TPU_CT_F64: COMB(d, double) break;
    case TPU_CT_I32: {
      /* integer sums wrap (two's complement), like every integer add */
      if (kind == TPU_REDUCE_SUM) { r.i = (int32_t)((uint32_t)a.i + (uint32_t)b.i); break; }
      if (kind == TPU_REDUCE_PROD) { r.i = (int32_t)((uint32_t)a.i * (uint32_t)b.i); break; }
      COMB(i, int32_t) break;
    }
    case TPU_CT_I64: {
      if (kind == TPU_REDUCE_SUM) { r.l = (int64_t)((uint64_t)a.l + (uint64_t)b.l); break; }
      if (kind == TPU_REDUCE_PROD) { r.l = (int64_t)((uint64_t)a.l * (uint64_t)b.l); break; }
      COMB(l, int64_t) break;
    }
    default: r = a; break;
  }
#undef COMB
  return r;
}

/* Reduces a register of n values with 16 fixed lanes and a pairwise fold:
 * the order depends on n only. */
static acc_t reduce_reg(tpu_reduce_kind_t kind, tpu_ct_t ct, const void* reg,
                        int64_t n) {
  acc_t lanes[16];
  acc_t init = reduce_init(kind, ct);
  for (int l = 0; l < 16; l++) lanes[l] = init;
  if (ct == TPU_CT_F32 && kind == TPU_REDUCE_SUM) {
    /* the hot case, written so that it vectorizes */
    float s[16] = {0};
    const float* v = reg;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int l = 0; l < 16; l++) s[l] += v[i + l];
    for (int l = 0; i + l < n; l++) s[l] += v[i + l];
    for (int w = 8; w >= 1; w /= 2)
      for (int l = 0; l < w; l++) s[l] += s[l + w];
    acc_t r;
    r.f = s[0];
    return r;
  }
  for (int64_t i = 0; i < n; i++) {
    acc_t e;
    switch (ct) {
      case TPU_CT_F32: e.f = ((const float*)reg)[i]; break;
      case TPU_CT_F64: e.d = ((const double*)reg)[i]; break;
      case TPU_CT_I32: e.i = ((const int32_t*)reg)[i]; break;
      default: e.l = ((const int64_t*)reg)[i]; break;
    }
    lanes[i & 15] = combine(kind, ct, lanes[i & 15], e);
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) lanes[l] = combine(kind, ct, lanes[l], lanes[l + w]);
  return lanes[0];
}

/* Pairwise accumulation of a stream of partials (a binary counter of
 * levels) so the rounding error grows with log(n), in a fixed order. */
typedef struct {
  acc_t level[64];
  uint64_t count;
} cascade_t;

static void cascade_push(cascade_t* c, tpu_reduce_kind_t kind, tpu_ct_t ct, acc_t v) {
  int lvl = 0;
  uint64_t n = c->count;
  while (n & 1) {
    v = combine(kind, ct, c->level[lvl], v);
    n >>= 1;
    lvl++;
  }
  c->level[lvl] = v;
  c->count++;
}

static acc_t cascade_finish(cascade_t* c, tpu_reduce_kind_t kind, tpu_ct_t ct) {
  acc_t r = reduce_init(kind, ct);
  bool have = false;
  for (int lvl = 0; lvl < 64; lvl++) {
    if (!((c->count >> lvl) & 1)) continue;
    r = have ? combine(kind, ct, c->level[lvl], r) : c->level[lvl];
    have = true;
  }
  return r;
}

static void acc_to_reg(acc_t a, tpu_ct_t ct, void* reg) {
  switch (ct) {
    case TPU_CT_F32: *(float*)reg = a.f; break;
    case TPU_CT_F64: *(double*)reg = a.d; break;
    case TPU_CT_I32: *(int32_t*)reg = a.i; break;
    default: *(int64_t*)reg = a.l; break;
  }
}

typedef struct {
  tpu_exec_ctx_t* x;
  const tpu_vkernel_t* k;
  int64_t n_segs;   /* segments per output (row) */
  acc_t* partials;  /* [kept][n_segs] */
  int64_t out_per_task;
} reduce_task_t;

/* Row reduction: one task = one segment of one output, or a block of whole
 * outputs when outputs are many. */
static void row_task(void* ctx, int64_t task, int thread) {
  reduce_task_t* t = ctx;
  const tpu_vkernel_t* k = t->k;
  const tpu_vprogram_t* p = &k->prog;
  tpu_ct_t ct = p->result_ct;
  char* regs = thread_regs(t->x, thread);
  int64_t* idx = thread_scratch(t->x, regs);
  int64_t seg_len = (int64_t)SEG_CHUNKS * CHUNK;
  int64_t o0, o1, s0, s1;
  if (t->n_segs > 1) {
    o0 = task / t->n_segs;
    o1 = o0 + 1;
    s0 = task % t->n_segs;
    s1 = s0 + 1;
  } else {
    o0 = task * t->out_per_task;
    o1 = o0 + t->out_per_task;
    if (o1 > k->kept) o1 = k->kept;
    s0 = 0;
    s1 = 1;
  }
  for (int64_t o = o0; o < o1; o++) {
    for (int64_t s = s0; s < s1; s++) {
      int64_t r0 = s * seg_len, r1 = r0 + seg_len;
      if (r1 > k->reduced || t->n_segs == 1) r1 = k->reduced;
      cascade_t cas;
      cas.count = 0;
      for (int64_t r = r0; r < r1; r += CHUNK) {
        int64_t len = r1 - r < CHUNK ? r1 - r : CHUNK;
        void* res = run_chunk(t->x, p, o * k->reduced + r, len, regs, idx);
        cascade_push(&cas, k->reduce, ct, reduce_reg(k->reduce, ct, res, len));
      }
      t->partials[o * t->n_segs + s] =
          cas.count ? cascade_finish(&cas, k->reduce, ct) : reduce_init(k->reduce, ct);
    }
  }
}

/* Column reduction: one task = a block of up to CHUNK consecutive outputs,
 * reduced over all rows with a cascade of 32-row blocks. */
static void col_task(void* ctx, int64_t task, int thread) {
  reduce_task_t* t = ctx;
  const tpu_vkernel_t* k = t->k;
  const tpu_vprogram_t* p = &k->prog;
  tpu_ct_t ct = p->result_ct;
  char* regs = thread_regs(t->x, thread);
  int64_t* idx = thread_scratch(t->x, regs);
  acc_t* outp = t->partials;
  int64_t o0 = task * CHUNK;
  int64_t len = k->kept - o0 < CHUNK ? k->kept - o0 : CHUNK;
  /* levels of the cascade live in the partials scratch after the outputs */
  enum { BLOCK = 32 };
  acc_t* block = outp + k->kept + (size_t)thread * CHUNK * 66;
  acc_t* levels = block + CHUNK; /* 64 levels x CHUNK */
  uint64_t count = 0;
  acc_t init = reduce_init(k->reduce, ct);
  for (int64_t r0 = 0; r0 < k->reduced; r0 += BLOCK) {
    int64_t r1 = r0 + BLOCK < k->reduced ? r0 + BLOCK : k->reduced;
    for (int64_t i = 0; i < len; i++) block[i] = init;
    for (int64_t r = r0; r < r1; r++) {
      const void* res = run_chunk(t->x, p, r * k->kept + o0, len, regs, idx);
      for (int64_t i = 0; i < len; i++) {
        acc_t e;
        switch (ct) {
          case TPU_CT_F32: e.f = ((const float*)res)[i]; break;
          case TPU_CT_F64: e.d = ((const double*)res)[i]; break;
          case TPU_CT_I32: e.i = ((const int32_t*)res)[i]; break;
          default: e.l = ((const int64_t*)res)[i]; break;
        }
        block[i] = combine(k->reduce, ct, block[i], e);
      }
    }
    /* push the block into the cascade */
    int lvl = 0;
    uint64_t n = count;
    while (n & 1) {
      acc_t* L = levels + (size_t)lvl * CHUNK;
      for (int64_t i = 0; i < len; i++) block[i] = combine(k->reduce, ct, L[i], block[i]);
      n >>= 1;
      lvl++;
    }
    memcpy(levels + (size_t)lvl * CHUNK, block, sizeof(acc_t) * (size_t)len);
    count++;
  }
  for (int64_t i = 0; i < len; i++) outp[o0 + i] = init;
  bool have = false;
  for (int lvl = 0; lvl < 64; lvl++) {
    if (!((count >> lvl) & 1)) continue;
    acc_t* L = levels + (size_t)lvl * CHUNK;
    for (int64_t i = 0; i < len; i++)
      outp[o0 + i] = have ? combine(k->reduce, ct, L[i], outp[o0 + i]) : L[i];
    have = true;
  }
}

/* ------------------------------------------------------- ARGMAX/ARGMIN */

/* Is value v (index i) better than the best so far? The first occurrence
 * wins ties; NaN is the extreme value in both directions, as in PyTorch. */
static inline bool arg_better(bool is_max, double v, double best) {
  if (v != v) return best == best;
  if (best != best) return false;
  return is_max ? v > best : v < best;
}

static inline double reg_get(const void* reg, tpu_ct_t ct, int64_t i) {
  switch (ct) {
    case TPU_CT_F32: return ((const float*)reg)[i];
    case TPU_CT_F64: return ((const double*)reg)[i];
    case TPU_CT_I32: return ((const int32_t*)reg)[i];
    default: return (double)((const int64_t*)reg)[i];
  }
}

typedef struct {
  tpu_exec_ctx_t* x;
  const tpu_vkernel_t* k;
  double* best;
  int64_t* idx;
} arg_task_t;

/* Row: one task per output; column: one task per block of outputs. The
 * scan is sequential over the reduced index, so the result is the first
 * extreme whatever the thread count. int64 values beyond 2^53 compare as
 * doubles (documented limitation). */
static void arg_row_task(void* ctx, int64_t o, int thread) {
  arg_task_t* t = ctx;
  const tpu_vkernel_t* k = t->k;
  const tpu_vprogram_t* p = &k->prog;
  char* regs = thread_regs(t->x, thread);
  int64_t* scratch = thread_scratch(t->x, regs);
  bool is_max = k->reduce == TPU_REDUCE_ARGMAX;
  double best = 0;
  int64_t bi = 0;
  for (int64_t r = 0; r < k->reduced; r += CHUNK) {
    int64_t len = k->reduced - r < CHUNK ? k->reduced - r : CHUNK;
    const void* res = run_chunk(t->x, p, o * k->reduced + r, len, regs, scratch);
    for (int64_t i = 0; i < len; i++) {
      double v = reg_get(res, p->result_ct, i);
      if ((r == 0 && i == 0) || arg_better(is_max, v, best)) {
        best = v;
        bi = r + i;
      }
    }
  }
  t->idx[o] = bi;
}

static void arg_col_task(void* ctx, int64_t task, int thread) {
  arg_task_t* t = ctx;
  const tpu_vkernel_t* k = t->k;
  const tpu_vprogram_t* p = &k->prog;
  char* regs = thread_regs(t->x, thread);
  int64_t* scratch = thread_scratch(t->x, regs);
  bool is_max = k->reduce == TPU_REDUCE_ARGMAX;
  int64_t o0 = task * CHUNK;
  int64_t len = k->kept - o0 < CHUNK ? k->kept - o0 : CHUNK;
  for (int64_t r = 0; r < k->reduced; r++) {
    const void* res = run_chunk(t->x, p, r * k->kept + o0, len, regs, scratch);
    for (int64_t i = 0; i < len; i++) {
      double v = reg_get(res, p->result_ct, i);
      if (r == 0 || arg_better(is_max, v, t->best[o0 + i])) {
        t->best[o0 + i] = v;
        t->idx[o0 + i] = r;
      }
    }
  }
}

static tpu_status_t run_reduce_arg(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  if (k->reduced == 0)
    return TPU_STATUS(INVALID_ARGUMENT, "argmax/argmin over an empty dimension");
  arg_task_t t = {x, k, malloc(sizeof(double) * (size_t)k->kept),
                  malloc(sizeof(int64_t) * (size_t)k->kept)};
  if (!t.best || !t.idx) {
    free(t.best);
    free(t.idx);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "argmax: host out of memory");
  }
  if (k->row) tpu_pool_run(x->dev->pool, k->kept, arg_row_task, &t);
  else tpu_pool_run(x->dev->pool, (k->kept + CHUNK - 1) / CHUNK, arg_col_task, &t);
  space_t sp = {k->kept_rank, k->row ? k->prog.dims : k->prog.dims + (k->prog.rank - k->kept_rank)};
  tpu_access_t store = k->store;
  if (!k->row)
    memmove(store.strides, store.strides + (k->prog.rank - k->kept_rank),
            sizeof(int64_t) * (size_t)k->kept_rank);
  for (int64_t o0 = 0; o0 < k->kept; o0 += CHUNK) {
    int64_t len = k->kept - o0 < CHUNK ? k->kept - o0 : CHUNK;
    scatter(x, &sp, &store, o0, len, t.idx + o0);
  }
  free(t.best);
  free(t.idx);
  return NULL;
}

tpu_status_t tpu_vtpu_run_reduce(tpu_exec_ctx_t* x, const tpu_vkernel_t* k) {
  if (k->kept == 0) return NULL;
  if (k->reduce == TPU_REDUCE_ARGMAX || k->reduce == TPU_REDUCE_ARGMIN) return run_reduce_arg(x, k);
  tpu_ct_t ct = k->prog.result_ct;
  int nthreads = tpu_pool_size(x->dev->pool);
  reduce_task_t t = {x, k, 1, NULL, 1};
  int64_t seg_len = (int64_t)SEG_CHUNKS * CHUNK;
  size_t n_acc;
  int64_t n_tasks;
  if (k->row || k->reduced == 0) {
    t.n_segs = k->reduced > seg_len ? (k->reduced + seg_len - 1) / seg_len : 1;
    if (t.n_segs > 1) {
      n_tasks = k->kept * t.n_segs;
    } else {
      /* about 64K elements of work per task */
      int64_t per = k->reduced > 0 ? (65536 + k->reduced - 1) / k->reduced : k->kept;
      if (per < 1) per = 1;
      t.out_per_task = per;
      n_tasks = (k->kept + per - 1) / per;
    }
    n_acc = (size_t)(k->kept * t.n_segs);
  } else {
    n_tasks = (k->kept + CHUNK - 1) / CHUNK;
    n_acc = (size_t)k->kept + (size_t)nthreads * CHUNK * 66;
  }
  t.partials = malloc(sizeof(acc_t) * (n_acc ? n_acc : 1));
  if (!t.partials)
    return TPU_STATUS(RESOURCE_EXHAUSTED, "reduce: host out of memory for %zu partials", n_acc);
  if (k->reduced == 0) {
    acc_t init = reduce_init(k->reduce, ct);
    for (int64_t o = 0; o < k->kept; o++) t.partials[o] = init;
  } else {
    tpu_pool_run(x->dev->pool, n_tasks, (k->row) ? row_task : col_task, &t);
  }
  /* combine segments pairwise in a fixed order, then store */
  char* regs = thread_regs(x, 0);
  space_t sp = {k->kept_rank, k->row ? k->prog.dims : k->prog.dims + (k->prog.rank - k->kept_rank)};
  tpu_access_t store = k->store;
  if (!k->row) {
    /* the store's kept strides follow the reduced dims */
    memmove(store.strides, store.strides + (k->prog.rank - k->kept_rank),
            sizeof(int64_t) * (size_t)k->kept_rank);
  }
  for (int64_t o0 = 0; o0 < k->kept; o0 += CHUNK) {
    int64_t len = k->kept - o0 < CHUNK ? k->kept - o0 : CHUNK;
    for (int64_t i = 0; i < len; i++) {
      int64_t o = o0 + i;
      acc_t r;
      if (k->row && t.n_segs > 1) {
        cascade_t cas;
        cas.count = 0;
        for (int64_t s = 0; s < t.n_segs; s++) cascade_push(&cas, k->reduce, ct, t.partials[o * t.n_segs + s]);
        r = cascade_finish(&cas, k->reduce, ct);
      } else {
        r = t.partials[o];
      }
      size_t es = ct == TPU_CT_F32 || ct == TPU_CT_I32 ? 4 : 8;
      acc_to_reg(r, ct, regs + (size_t)i * es);
    }
    scatter(x, &sp, &store, o0, len, regs);
  }
  free(t.partials);
  return NULL;
}

/* ------------------------------------------------------- strided copies */

void tpu_vtpu_copy_strided(void* dst, tpu_dtype_t dst_dtype,
                           const int64_t* dst_strides, const void* src,
                           tpu_dtype_t src_dtype, const int64_t* src_strides,
                           int32_t rank, const int64_t* dims) {
  int64_t numel = 1;
  for (int32_t k = 0; k < rank; k++) numel *= dims[k];
  if (numel == 0) return;
  int32_t des = tpu_dtype_size(dst_dtype), ses = tpu_dtype_size(src_dtype);
  bool same = dst_dtype == src_dtype;
  if (rank == 0) {
    if (same) {
      memcpy(dst, src, (size_t)des);
      return;
    }
  }
  /* coalesce dims both sides walk contiguously */
  int64_t d[TPU_MAX_RANK], ds[TPU_MAX_RANK], ss[TPU_MAX_RANK];
  int32_t r = 0;
  for (int32_t k = 0; k < rank; k++) {
    if (dims[k] == 1) continue;
    d[r] = dims[k];
    ds[r] = dst_strides[k];
    ss[r] = src_strides[k];
    r++;
  }
  for (int32_t k = r - 2; k >= 0; k--) {
    if (ds[k] == ds[k + 1] * d[k + 1] && ss[k] == ss[k + 1] * d[k + 1]) {
      d[k] *= d[k + 1];
      ds[k] = ds[k + 1];
      ss[k] = ss[k + 1];
      for (int32_t j = k + 1; j < r - 1; j++) {
        d[j] = d[j + 1];
        ds[j] = ds[j + 1];
        ss[j] = ss[j + 1];
      }
      r--;
    }
  }
  if (r == 0) {
    d[0] = 1;
    ds[0] = ss[0] = 1;
    r = 1;
  }
  int64_t idx[TPU_MAX_RANK] = {0};
  int64_t inner = d[r - 1], rows = numel / inner;
  union {
    float f[CHUNK];
    double dd[CHUNK];
    int32_t i[CHUNK];
    int64_t l[CHUNK];
  } buf;
  for (int64_t row = 0; row < rows; row++) {
    int64_t so = 0, dof = 0;
    for (int32_t k = 0; k < r - 1; k++) {
      so += idx[k] * ss[k];
      dof += idx[k] * ds[k];
    }
    const char* sp = (const char*)src + so * ses;
    char* dp = (char*)dst + dof * des;
    if (same && ss[r - 1] == 1 && ds[r - 1] == 1) {
      memcpy(dp, sp, (size_t)(inner * des));
    } else if (same) {
      for (int64_t i = 0; i < inner; i++)
        memcpy(dp + i * ds[r - 1] * des, sp + i * ss[r - 1] * ses, (size_t)des);
    } else {
      tpu_ct_t sct = tpu_vtpu_compute_type(src_dtype), dct = tpu_vtpu_compute_type(dst_dtype);
      for (int64_t i0 = 0; i0 < inner; i0 += CHUNK) {
        int64_t n = inner - i0 < CHUNK ? inner - i0 : CHUNK;
        union {
          float f[CHUNK];
          double dd[CHUNK];
          int32_t i[CHUNK];
          int64_t l[CHUNK];
        } tmp;
        load_run(&buf, 0, sp + i0 * ss[r - 1] * ses, src_dtype, ss[r - 1], n);
        convert_reg(&buf, sct, src_dtype, &tmp, dct, dst_dtype, n);
        store_run(dp + i0 * ds[r - 1] * des, dst_dtype, ds[r - 1], &tmp, 0, n);
      }
    }
    for (int32_t k = r - 2; k >= 0; k--) {
      if (++idx[k] < d[k]) break;
      idx[k] = 0;
    }
  }
}

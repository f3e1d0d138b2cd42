/* Tests for the vector math library (csrc/vtpu/vmath.c).
 *
 * - accuracy: a sweep over every STRIDE-th float bit pattern (97 unless
 *   TPU_VMATH_TEST_STRIDE says otherwise; 1 is exhaustive), special values
 *   and random samples, against libm's double result rounded to float; the
 *   max ulp per function is printed;
 * - bit identity of the portable and AVX-512 paths on the same inputs, in
 *   the default environment and under tpu_fpenv_enter() (FTZ/DAZ);
 * - C99 special values exactly, canonical NaNs, in-place use, tails;
 * - dispatch (set_portable, TORCHTPU_ISA).
 * Timings are printed (never checked) in builds without AddressSanitizer. */
#include <math.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tpu/vmath.h"

/* ------------------------------------------------------------- helpers */

static uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

#define QNAN_BITS 0x7fc00000u

/* Distance in representable floats between a and b (0 when both are NaN;
 * huge when only one is). The order is -inf ... -0 = +0 ... +inf, so a
 * signed-zero mismatch counts 0 here and is checked separately. */
static int64_t ulp_dist(float a, float b) {
  if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : INT64_MAX;
  uint32_t ua = f2u(a), ub = f2u(b);
  int64_t oa = (ua >> 31) ? -(int64_t)(ua & 0x7fffffffu) : (int64_t)ua;
  int64_t ob = (ub >> 31) ? -(int64_t)(ub & 0x7fffffffu) : (int64_t)ub;
  return oa > ob ? oa - ob : ob - oa;
}

/* xorshift64*: deterministic random samples. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545f4914f6cdd1dull;
}
static float rng_uniform(float lo, float hi) {
  double u = (double)(rng_next() >> 11) * 0x1p-53;
  return (float)(lo + (hi - lo) * u);
}
static float rng_bits(void) { return u2f((uint32_t)(rng_next() >> 32)); }

static bool have_avx512(void) {
  tpu_vmath_set_portable(false);
  return tpu_vmath_is_vectorized();
}

/* ------------------------------------------------------------- functions */

typedef void (*unary_fn)(const float*, float*, int64_t);
typedef void (*binary_fn)(const float*, const float*, float*, int64_t);

static double ref_logistic(double x) { return 1.0 / (1.0 + exp(-x)); }
/* rsqrt is specified as 1.0f / sqrtf(x) (two float roundings). */
static double ref_rsqrt(double x) { return 1.0f / sqrtf((float)x); }

typedef struct unary_case_s {
  const char* name;
  unary_fn fn;
  double (*ref)(double);
  int64_t bound; /* ulp */
} unary_case_t;

static const unary_case_t unary_cases[] = {
    {"exp", tpu_vmath_exp_f32, exp, 2},
    {"expm1", tpu_vmath_expm1_f32, expm1, 2},
    {"log", tpu_vmath_log_f32, log, 2},
    {"log1p", tpu_vmath_log1p_f32, log1p, 2},
    {"tanh", tpu_vmath_tanh_f32, tanh, 3},
    {"logistic", tpu_vmath_logistic_f32, ref_logistic, 3},
    {"sin", tpu_vmath_sin_f32, sin, 2},
    {"cos", tpu_vmath_cos_f32, cos, 2},
    {"erf", tpu_vmath_erf_f32, erf, 3},
    {"sqrt", tpu_vmath_sqrt_f32, sqrt, 0},
    {"rsqrt", tpu_vmath_rsqrt_f32, ref_rsqrt, 0},
};
#define N_UNARY ((int)TPU_ARRAY_SIZE(unary_cases))

typedef struct binary_case_s {
  const char* name;
  binary_fn fn;
  double (*ref)(double, double);
  int64_t bound;
} binary_case_t;

static const binary_case_t binary_cases[] = {
    {"pow", tpu_vmath_pow_f32, pow, 4},
    {"atan2", tpu_vmath_atan2_f32, atan2, 3},
};
#define N_BINARY ((int)TPU_ARRAY_SIZE(binary_cases))

/* Per-function accuracy and identity bookkeeping. */
typedef struct stats_s {
  int64_t max_ulp;
  float worst_x, worst_y;
  int64_t checked;
  int64_t bad_nan;       /* NaN result that is not the canonical NaN */
  int64_t bad_zero_sign; /* zero of the wrong sign */
  int64_t mismatches;    /* portable != avx512, default environment */
  int64_t mismatches_ftz;
} stats_t;

static stats_t unary_stats[N_UNARY];
static stats_t binary_stats[N_BINARY];

static void note_result(stats_t* st, float x, float y, float got,
                        double ref_d) {
  float ref = (float)ref_d;
  int64_t d = ulp_dist(got, ref);
  st->checked++;
  if (d > st->max_ulp) {
    st->max_ulp = d;
    st->worst_x = x;
    st->worst_y = y;
  }
  if (isnan(got) && f2u(got) != QNAN_BITS) st->bad_nan++;
  if (got == 0.0f && ref == 0.0f && signbit(got) != signbit(ref))
    st->bad_zero_sign++;
}

/* Runs fn on the portable and (if present) AVX-512 paths, in the default
 * environment and under tpu_fpenv_enter(), and counts differing bits.
 * Leaves the default-environment AVX-512 (or portable) result in out. */
static float* scratch_p;
static float* scratch_v;

static int64_t count_diff(const float* a, const float* b, int64_t n) {
  int64_t d = 0;
  for (int64_t i = 0; i < n; i++) d += f2u(a[i]) != f2u(b[i]);
  return d;
}

static void run_unary_both(const unary_case_t* c, stats_t* st,
                           const float* x, float* out, int64_t n,
                           bool avx512) {
  tpu_vmath_set_portable(true);
  c->fn(x, scratch_p, n);
  tpu_vmath_set_portable(false);
  c->fn(x, out, n);
  if (avx512) st->mismatches += count_diff(scratch_p, out, n);

  tpu_fpenv_t env = tpu_fpenv_enter();
  tpu_vmath_set_portable(true);
  c->fn(x, scratch_p, n);
  tpu_vmath_set_portable(false);
  c->fn(x, scratch_v, n);
  tpu_fpenv_leave(env);
  if (avx512) st->mismatches_ftz += count_diff(scratch_p, scratch_v, n);
}

static void run_binary_both(const binary_case_t* c, stats_t* st,
                            const float* a, const float* b, float* out,
                            int64_t n, bool avx512) {
  tpu_vmath_set_portable(true);
  c->fn(a, b, scratch_p, n);
  tpu_vmath_set_portable(false);
  c->fn(a, b, out, n);
  if (avx512) st->mismatches += count_diff(scratch_p, out, n);

  tpu_fpenv_t env = tpu_fpenv_enter();
  tpu_vmath_set_portable(true);
  c->fn(a, b, scratch_p, n);
  tpu_vmath_set_portable(false);
  c->fn(a, b, scratch_v, n);
  tpu_fpenv_leave(env);
  if (avx512) st->mismatches_ftz += count_diff(scratch_p, scratch_v, n);
}

#define CHUNK 65536

/* Interesting float32 inputs: zeros, infinities, NaN payloads, subnormal
 * and normal limits, range-reduction and branch thresholds, near-multiples
 * of pi/2. */
static const uint32_t special_bits[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
    0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fc12345u, 0xffffffffu,
    0x7fffffffu, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu,
    0x00800000u, 0x80800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u,
    0xbf800000u, 0x3f7fffffu, 0x3f800001u, 0xbf7fffffu, 0xbf800001u,
    0x33800000u, 0xb3800000u, 0x4b800000u, 0x4b7fffffu, 0x5a800000u,
    0x3f3504f3u, 0x3f3504f4u, 0x3fb504f3u, 0x3e95f61au, 0xbe95f61au,
};
static const float special_values[] = {
    88.72283f,  88.7228394f, 88.8f,       89.0f,      -87.33654f, -88.0f,
    -103.9721f, -103.98f,    -104.0f,     -30.0f,     0.625f,     -0.625f,
    1.0f,       4.0f,        3.92f,       -3.92f,     9.02f,      0.5f,
    2.0f,       -2.0f,       0.35f,       -0.35f,     0.3466f,    0.41421f,
    -0.29289f,  1.5707964f,  3.1415927f,  4.712389f,  6.2831855f, 102940.41f,
    16777216.f, 16777215.f,  8.25e5f,     1e4f,       -1e4f,      1e6f,
    1e20f,      -1e30f,      3e38f,       22.0f,      -22.0f,     0.1f,
};

static int64_t fill_specials(float* x) {
  int64_t n = 0;
  for (size_t i = 0; i < TPU_ARRAY_SIZE(special_bits); i++)
    x[n++] = u2f(special_bits[i]);
  for (size_t i = 0; i < TPU_ARRAY_SIZE(special_values); i++) {
    x[n++] = special_values[i];
    x[n++] = -special_values[i];
    x[n++] = nextafterf(special_values[i], INFINITY);
    x[n++] = nextafterf(special_values[i], -INFINITY);
  }
  /* Floats close to multiples of pi/2 (hard cases for the reduction). */
  for (int k = 1; k < 200; k++) {
    float v = (float)(k * M_PI_2);
    x[n++] = v;
    x[n++] = nextafterf(v, 0.0f);
    x[n++] = -nextafterf(v, INFINITY);
  }
  return n;
}

static void check_unary_chunk(int fi, const float* x, int64_t n,
                              bool avx512) {
  static float out[CHUNK];
  const unary_case_t* c = &unary_cases[fi];
  stats_t* st = &unary_stats[fi];
  run_unary_both(c, st, x, out, n, avx512);
  for (int64_t i = 0; i < n; i++)
    note_result(st, x[i], 0.0f, out[i], c->ref((double)x[i]));
}

static void check_binary_chunk(int fi, const float* a, const float* b,
                               int64_t n, bool avx512) {
  static float out[CHUNK];
  const binary_case_t* c = &binary_cases[fi];
  stats_t* st = &binary_stats[fi];
  run_binary_both(c, st, a, b, out, n, avx512);
  for (int64_t i = 0; i < n; i++)
    note_result(st, a[i], b[i], out[i], c->ref((double)a[i], (double)b[i]));
}

static int64_t sweep_stride(void) {
  const char* s = getenv("TPU_VMATH_TEST_STRIDE");
  long v = s ? strtol(s, NULL, 10) : 97;
  return v >= 1 ? v : 97;
}

/* --------------------------------------------------------------- tests */

TEST(test_dispatch) {
  bool avx = have_avx512();
  CHECK(strcmp(tpu_vmath_isa(), avx ? "avx512" : "portable") == 0);
  tpu_vmath_set_portable(true);
  CHECK(!tpu_vmath_is_vectorized());
  CHECK(strcmp(tpu_vmath_isa(), "portable") == 0);
  tpu_vmath_set_portable(false);
  CHECK_EQ(tpu_vmath_is_vectorized(), avx);
  const char* env = getenv("TORCHTPU_ISA");
  bool env_portable = env && strcmp(env, "portable") == 0;
  if (env_portable) CHECK(!avx);
#if defined(__x86_64__) && defined(__GNUC__)
  tpu_cpu_features_t f = tpu_cpu_features();
  /* A capable CPU must get the vector path unless the env forbids it. */
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma &&
      __builtin_cpu_supports("avx512dq") && !env_portable)
    CHECK(avx);
#endif
  if (!avx)
    fprintf(stderr,
            "  note: %s: portable == avx512 identity checks are skipped\n",
            env_portable ? "TORCHTPU_ISA=portable" : "no AVX-512 on this CPU");
}

/* TORCHTPU_ISA=portable is read once, at first use: check it in a child
 * process whose vmath state is fresh. */
TEST(test_env_override) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("TORCHTPU_ISA", "portable", 1);
    int ok = strcmp(tpu_vmath_isa(), "portable") == 0;
    tpu_vmath_set_portable(false); /* back to auto: still honours the env */
    ok = ok && !tpu_vmath_is_vectorized();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(test_unary_sweep) {
  bool avx = have_avx512();
  int64_t stride = sweep_stride();
  static float x[CHUNK];
  int64_t n = 0;
  for (uint64_t b = 0; b <= 0xffffffffull; b += (uint64_t)stride) {
    x[n++] = u2f((uint32_t)b);
    if (n == CHUNK || b + (uint64_t)stride > 0xffffffffull) {
      for (int fi = 0; fi < N_UNARY; fi++) check_unary_chunk(fi, x, n, avx);
      n = 0;
    }
  }
  /* Specials and random samples: typical ML ranges and random bits. */
  n = fill_specials(x);
  for (int fi = 0; fi < N_UNARY; fi++) check_unary_chunk(fi, x, n, avx);
  for (int rep = 0; rep < 8; rep++) {
    for (int64_t i = 0; i < CHUNK; i++) {
      switch (i & 3) {
        case 0: x[i] = rng_uniform(-10.0f, 10.0f); break;
        case 1: x[i] = rng_uniform(-1.0f, 1.0f); break;
        case 2: x[i] = rng_uniform(-100.0f, 100.0f); break;
        default: x[i] = rng_bits(); break;
      }
    }
    for (int fi = 0; fi < N_UNARY; fi++)
      check_unary_chunk(fi, x, CHUNK, avx);
  }
  fprintf(stderr, "  %-9s %8s %12s %10s %10s  %s\n", "function", "max ulp",
          "inputs", "mism.", "mism.ftz", "worst x");
  for (int fi = 0; fi < N_UNARY; fi++) {
    stats_t* st = &unary_stats[fi];
    fprintf(stderr, "  %-9s %8" PRId64 " %12" PRId64 " %10" PRId64
            " %10" PRId64 "  %a\n",
            unary_cases[fi].name, st->max_ulp, st->checked, st->mismatches,
            st->mismatches_ftz, (double)st->worst_x);
    CHECK(st->max_ulp <= unary_cases[fi].bound);
    CHECK_EQ(st->bad_nan, 0);
    CHECK_EQ(st->bad_zero_sign, 0);
    CHECK_EQ(st->mismatches, 0);
    CHECK_EQ(st->mismatches_ftz, 0);
  }
}

/* pow and atan2: random pairs over typical and full ranges, pairs of
 * special values, and negative bases with integer exponents. */
TEST(test_binary_sweep) {
  bool avx = have_avx512();
  static float a[CHUNK], b[CHUNK];
  float sp[1024];
  int64_t ns = fill_specials(sp);
  static const float ints[] = {0.0f, 1.0f, 2.0f, 3.0f, -1.0f, -2.0f, -3.0f,
                               0.5f, -0.5f, 1.5f, 127.0f, -127.0f, 16777217.f,
                               8388609.0f, -8388609.0f, 1e10f};
  int64_t nsel = (int64_t)TPU_ARRAY_SIZE(ints);
  for (int fi = 0; fi < N_BINARY; fi++) {
    /* every special paired with every special */
    int64_t n = 0;
    for (int64_t i = 0; i < ns; i++) {
      for (int64_t j = 0; j < ns; j++) {
        a[n] = sp[i];
        b[n] = sp[j];
        if (++n == CHUNK) {
          check_binary_chunk(fi, a, b, n, avx);
          n = 0;
        }
      }
    }
    if (n) check_binary_chunk(fi, a, b, n, avx);
    for (int rep = 0; rep < 48; rep++) {
      for (int64_t i = 0; i < CHUNK; i++) {
        switch (i & 3) {
          case 0: /* typical pow: base in (0, 10], exponent in [-20, 20] */
            a[i] = rng_uniform(0.0f, 10.0f);
            b[i] = rng_uniform(-20.0f, 20.0f);
            break;
          case 1: /* bases near 1, large exponents */
            a[i] = rng_uniform(0.9f, 1.1f);
            b[i] = rng_uniform(-800.0f, 800.0f);
            break;
          case 2: /* negative bases, integer exponents */
            a[i] = rng_uniform(-10.0f, 0.0f);
            b[i] = ints[rng_next() % (uint64_t)nsel] +
                   (float)(int)(rng_next() % 41) - 20.0f;
            break;
          default:
            a[i] = rng_bits();
            b[i] = rng_bits();
            break;
        }
      }
      check_binary_chunk(fi, a, b, CHUNK, avx);
    }
  }
  for (int fi = 0; fi < N_BINARY; fi++) {
    stats_t* st = &binary_stats[fi];
    fprintf(stderr, "  %-9s max ulp %" PRId64 " over %" PRId64
            " pairs, mismatches %" PRId64 "/%" PRId64 " (worst %a, %a)\n",
            binary_cases[fi].name, st->max_ulp, st->checked, st->mismatches,
            st->mismatches_ftz, (double)st->worst_x, (double)st->worst_y);
    CHECK(st->max_ulp <= binary_cases[fi].bound);
    CHECK_EQ(st->bad_nan, 0);
    CHECK_EQ(st->bad_zero_sign, 0);
    CHECK_EQ(st->mismatches, 0);
    CHECK_EQ(st->mismatches_ftz, 0);
  }
}

/* Exact C99 Annex F values, on both paths. */
typedef struct special_case_s {
  const char* fn;
  float x, y; /* y only for pow/atan2 */
  float want; /* NaN means the canonical NaN */
} special_case_t;

static float call1(const char* fn, float x) {
  float y = 0.0f;
  for (int i = 0; i < N_UNARY; i++)
    if (strcmp(unary_cases[i].name, fn) == 0) unary_cases[i].fn(&x, &y, 1);
  return y;
}
static float call2(const char* fn, float a, float b) {
  float y = 0.0f;
  for (int i = 0; i < N_BINARY; i++)
    if (strcmp(binary_cases[i].name, fn) == 0)
      binary_cases[i].fn(&a, &b, &y, 1);
  return y;
}

TEST(test_special_values) {
  const float inf = INFINITY, nan = NAN;
  const float pi = 3.14159265f, pi2 = 1.57079633f, pi4 = 0.785398163f;
  const special_case_t cases[] = {
      {"exp", -inf, 0, 0.0f},         {"exp", inf, 0, inf},
      {"exp", 0.0f, 0, 1.0f},         {"exp", -0.0f, 0, 1.0f},
      {"exp", 100.0f, 0, inf},        {"exp", -200.0f, 0, 0.0f},
      {"exp", nan, 0, nan},           {"expm1", -inf, 0, -1.0f},
      {"expm1", inf, 0, inf},         {"expm1", -0.0f, 0, -0.0f},
      {"expm1", 0.0f, 0, 0.0f},       {"expm1", 100.0f, 0, inf},
      {"log", 0.0f, 0, -inf},         {"log", -0.0f, 0, -inf},
      {"log", 1.0f, 0, 0.0f},         {"log", -1.0f, 0, nan},
      {"log", inf, 0, inf},           {"log", -inf, 0, nan},
      {"log1p", -1.0f, 0, -inf},      {"log1p", -2.0f, 0, nan},
      {"log1p", -0.0f, 0, -0.0f},     {"log1p", 0.0f, 0, 0.0f},
      {"log1p", inf, 0, inf},         {"tanh", inf, 0, 1.0f},
      {"tanh", -inf, 0, -1.0f},       {"tanh", -0.0f, 0, -0.0f},
      {"tanh", 20.0f, 0, 1.0f},       {"logistic", -inf, 0, 0.0f},
      {"logistic", inf, 0, 1.0f},     {"logistic", 0.0f, 0, 0.5f},
      {"logistic", -0.0f, 0, 0.5f},   {"sin", -0.0f, 0, -0.0f},
      {"sin", inf, 0, nan},           {"sin", -inf, 0, nan},
      {"cos", inf, 0, nan},           {"cos", 0.0f, 0, 1.0f},
      {"cos", -0.0f, 0, 1.0f},        {"erf", inf, 0, 1.0f},
      {"erf", -inf, 0, -1.0f},        {"erf", -0.0f, 0, -0.0f},
      {"sqrt", -0.0f, 0, -0.0f},      {"sqrt", -1.0f, 0, nan},
      {"sqrt", inf, 0, inf},          {"sqrt", 4.0f, 0, 2.0f},
      {"rsqrt", 0.0f, 0, inf},        {"rsqrt", -0.0f, 0, -inf},
      {"rsqrt", inf, 0, 0.0f},        {"rsqrt", -4.0f, 0, nan},
      {"pow", nan, 0.0f, 1.0f},       {"pow", nan, -0.0f, 1.0f},
      {"pow", 1.0f, nan, 1.0f},       {"pow", 1.0f, inf, 1.0f},
      {"pow", -1.0f, inf, 1.0f},      {"pow", -1.0f, -inf, 1.0f},
      {"pow", -2.0f, 3.0f, -8.0f},    {"pow", -2.0f, 2.0f, 4.0f},
      {"pow", -2.0f, -1.0f, -0.5f},   {"pow", -2.0f, 0.5f, nan},
      {"pow", 0.0f, -1.0f, inf},      {"pow", -0.0f, -1.0f, -inf},
      {"pow", -0.0f, -2.0f, inf},     {"pow", -0.0f, -0.5f, inf},
      {"pow", 0.0f, 3.0f, 0.0f},      {"pow", -0.0f, 3.0f, -0.0f},
      {"pow", -0.0f, 2.0f, 0.0f},     {"pow", -0.0f, 0.5f, 0.0f},
      {"pow", 0.5f, -inf, inf},       {"pow", 2.0f, -inf, 0.0f},
      {"pow", 0.5f, inf, 0.0f},       {"pow", 2.0f, inf, inf},
      {"pow", -inf, -3.0f, -0.0f},    {"pow", -inf, -2.0f, 0.0f},
      {"pow", -inf, 3.0f, -inf},      {"pow", -inf, 2.0f, inf},
      {"pow", -inf, 0.5f, inf},       {"pow", inf, -1.0f, 0.0f},
      {"pow", inf, 0.5f, inf},        {"pow", 2.0f, 10.0f, 1024.0f},
      {"pow", 2.0f, 128.0f, inf},     {"pow", 2.0f, -151.0f, 0.0f},
      {"pow", nan, 1.0f, nan},        {"pow", 2.0f, nan, nan},
      {"pow", -8.0f, 1.0f / 3, nan},  {"pow", -1.0f, 3e10f, 1.0f},
      {"atan2", 0.0f, 0.0f, 0.0f},    {"atan2", -0.0f, 0.0f, -0.0f},
      {"atan2", 0.0f, -0.0f, pi},     {"atan2", -0.0f, -0.0f, -pi},
      {"atan2", 0.0f, -1.0f, pi},     {"atan2", -0.0f, -1.0f, -pi},
      {"atan2", 0.0f, 1.0f, 0.0f},    {"atan2", -0.0f, 1.0f, -0.0f},
      {"atan2", 1.0f, 0.0f, pi2},     {"atan2", -1.0f, -0.0f, -pi2},
      {"atan2", inf, 1.0f, pi2},      {"atan2", -inf, 1.0f, -pi2},
      {"atan2", inf, inf, pi4},       {"atan2", -inf, inf, -pi4},
      {"atan2", inf, -inf, 3 * pi4},  {"atan2", -inf, -inf, -3 * pi4},
      {"atan2", 1.0f, inf, 0.0f},     {"atan2", -1.0f, inf, -0.0f},
      {"atan2", 1.0f, -inf, pi},      {"atan2", -1.0f, -inf, -pi},
      {"atan2", nan, 1.0f, nan},      {"atan2", 0.0f, nan, nan},
      {"atan2", 1.0f, 1.0f, pi4},
  };
  bool avx = have_avx512();
  for (int path = 0; path < (avx ? 2 : 1); path++) {
    tpu_vmath_set_portable(path == 0);
    for (size_t i = 0; i < TPU_ARRAY_SIZE(cases); i++) {
      const special_case_t* c = &cases[i];
      bool binary = strcmp(c->fn, "pow") == 0 || strcmp(c->fn, "atan2") == 0;
      float got = binary ? call2(c->fn, c->x, c->y) : call1(c->fn, c->x);
      uint32_t want = isnan(c->want) ? QNAN_BITS : f2u(c->want);
      if (f2u(got) != want) {
        fprintf(stderr, "  %s(%a%s%a) = %a (0x%08x), want %a (0x%08x) [%s]\n",
                c->fn, (double)c->x, binary ? ", " : "",
                binary ? (double)c->y : 0.0, (double)got, f2u(got),
                (double)c->want, want, tpu_vmath_isa());
      }
      CHECK_EQ(f2u(got), want);
    }
  }
  tpu_vmath_set_portable(false);
}

/* In-place use (y == x, out == either input) and tails of every length
 * give the same bits as a separate output. */
TEST(test_aliasing_and_tails) {
  enum { N = 300 };
  float x[N], e[N], ref[N], buf[N];
  for (int i = 0; i < N; i++) {
    x[i] = rng_uniform(-5.0f, 5.0f);
    e[i] = rng_uniform(-3.0f, 3.0f);
  }
  x[7] = 1e30f; /* puts sin/cos's first block on the Payne-Hanek path */
  bool avx = have_avx512();
  for (int path = 0; path < (avx ? 2 : 1); path++) {
    tpu_vmath_set_portable(path == 0);
    for (int fi = 0; fi < N_UNARY; fi++) {
      unary_fn fn = unary_cases[fi].fn;
      fn(x, ref, N);
      memcpy(buf, x, sizeof buf);
      fn(buf, buf, N);
      CHECK_EQ(count_diff(buf, ref, N), 0);
      /* every length and offset near a block boundary */
      for (int off = 0; off < 3; off++) {
        for (int n = 0; n <= 130; n += (n < 70 ? 1 : 13)) {
          float out[N];
          for (int i = 0; i < N; i++) out[i] = -7.0f;
          fn(x + off, out, n);
          CHECK_EQ(count_diff(out, ref + off, n), 0);
          CHECK_EQ(f2u(out[n]), f2u(-7.0f)); /* nothing written past n */
        }
      }
    }
    for (int fi = 0; fi < N_BINARY; fi++) {
      binary_fn fn = binary_cases[fi].fn;
      float xa[N];
      for (int i = 0; i < N; i++) xa[i] = fabsf(x[i]);
      fn(xa, e, ref, N);
      memcpy(buf, xa, sizeof buf);
      fn(buf, e, buf, N);
      CHECK_EQ(count_diff(buf, ref, N), 0);
      memcpy(buf, e, sizeof buf);
      fn(xa, buf, buf, N);
      CHECK_EQ(count_diff(buf, ref, N), 0);
      float out[N];
      out[37] = -7.0f;
      fn(xa, e, out, 37);
      CHECK_EQ(count_diff(out, ref, 37), 0);
      CHECK_EQ(f2u(out[37]), f2u(-7.0f));
    }
  }
  tpu_vmath_set_portable(false);
  float dummy = 3.0f;
  tpu_vmath_exp_f32(&dummy, &dummy, 0); /* n <= 0 is a no-op */
  tpu_vmath_exp_f32(&dummy, &dummy, -5);
  CHECK(dummy == 3.0f);
}

TEST(test_f64) {
  const double x[] = {-3.0, -0.5, -0.0, 0.0, 0.25, 1.0, 2.5, 40.0};
  enum { N = 8 };
  double y[N], z[N];
  tpu_vmath_exp_f64(x, y, N);
  for (int i = 0; i < N; i++) CHECK(y[i] == exp(x[i]));
  tpu_vmath_logistic_f64(x, y, N);
  for (int i = 0; i < N; i++)
    CHECK(fabs(y[i] - 1.0 / (1.0 + exp(-x[i]))) <= 1e-15);
  tpu_vmath_logistic_f64((const double[]){-800.0, 800.0}, z, 2);
  CHECK(z[0] == 0.0 && z[1] == 1.0);
  tpu_vmath_rsqrt_f64(x, y, N);
  CHECK(y[7] == 1.0 / sqrt(40.0));
  CHECK(isnan(y[0]));
  tpu_vmath_pow_f64(x, x, y, N);
  CHECK(y[6] == pow(2.5, 2.5));
  tpu_vmath_atan2_f64(x, x, y, N);
  CHECK(y[0] == atan2(-3.0, -3.0));
  memcpy(z, x, sizeof z);
  tpu_vmath_sin_f64(z, z, N); /* in place */
  for (int i = 0; i < N; i++) CHECK(z[i] == sin(x[i]));
  tpu_vmath_expm1_f64(x, y, N);
  CHECK(y[4] == expm1(0.25));
  tpu_vmath_log_f64(x + 4, y, 4);
  CHECK(y[1] == 0.0);
  tpu_vmath_log1p_f64(x, y, N);
  CHECK(y[5] == log1p(1.0));
  tpu_vmath_tanh_f64(x, y, N);
  CHECK(y[0] == tanh(-3.0));
  tpu_vmath_cos_f64(x, y, N);
  CHECK(y[3] == 1.0);
  tpu_vmath_erf_f64(x, y, N);
  CHECK(y[6] == erf(2.5));
  tpu_vmath_sqrt_f64(x, y, N);
  CHECK(y[6] == sqrt(2.5));
}

/* ----------------------------------------------------------- timings */

#ifndef __SANITIZE_ADDRESS__
static double gelems(void (*body)(const float*, float*, int64_t),
                     const float* x, float* y, int64_t n) {
  body(x, y, n); /* warm up */
  int reps = 0;
  uint64_t t0 = tpu_now_ns(), t1;
  do {
    body(x, y, n);
    reps++;
    t1 = tpu_now_ns();
  } while (t1 - t0 < 100000000ull);
  return (double)n * reps / (double)(t1 - t0);
}

#define LIBM_LOOP(NAME, FN)                                           \
  static void libm_##NAME(const float* x, float* y, int64_t n) {      \
    for (int64_t i = 0; i < n; i++) y[i] = FN(x[i]);                  \
  }
LIBM_LOOP(exp, expf)
LIBM_LOOP(tanh, tanhf)
LIBM_LOOP(log, logf)
LIBM_LOOP(erf, erff)

static unary_fn timed_fn;
static void run_portable(const float* x, float* y, int64_t n) {
  tpu_vmath_set_portable(true);
  timed_fn(x, y, n);
}
static void run_auto(const float* x, float* y, int64_t n) {
  tpu_vmath_set_portable(false);
  timed_fn(x, y, n);
}
#endif

TEST(test_print_speed) {
#ifndef __SANITIZE_ADDRESS__
  enum { N = 1 << 14 };
  static float x[N], y[N];
  struct {
    const char* name;
    unary_fn fn;
    void (*libm)(const float*, float*, int64_t);
    float lo, hi;
  } rows[] = {
      {"exp", tpu_vmath_exp_f32, libm_exp, -80.0f, 80.0f},
      {"tanh", tpu_vmath_tanh_f32, libm_tanh, -5.0f, 5.0f},
      {"log", tpu_vmath_log_f32, libm_log, 1e-3f, 1e3f},
      {"erf", tpu_vmath_erf_f32, libm_erf, -3.0f, 3.0f},
  };
  fprintf(stderr, "  Gelem/s (float32, %d elements): %s path available\n", N,
          have_avx512() ? "avx512" : "no avx512");
  for (size_t r = 0; r < TPU_ARRAY_SIZE(rows); r++) {
    for (int i = 0; i < N; i++) x[i] = rng_uniform(rows[r].lo, rows[r].hi);
    timed_fn = rows[r].fn;
    double g_port = gelems(run_portable, x, y, N);
    double g_auto = gelems(run_auto, x, y, N);
    double g_libm = gelems(rows[r].libm, x, y, N);
    fprintf(stderr,
            "  %-5s libm %.3f  portable %.3f  %s %.3f  (%.1fx libm)\n",
            rows[r].name, g_libm, g_port, tpu_vmath_isa(), g_auto,
            g_auto / g_libm);
  }
  tpu_vmath_set_portable(false);
#else
  fprintf(stderr, "  (timings skipped under AddressSanitizer)\n");
#endif
  CHECK(true);
}

int main(void) {
  scratch_p = malloc(sizeof(float) * CHUNK);
  scratch_v = malloc(sizeof(float) * CHUNK);
  if (!scratch_p || !scratch_v) return 1;
  RUN(test_env_override);
  RUN(test_dispatch);
  RUN(test_special_values);
  RUN(test_aliasing_and_tails);
  RUN(test_f64);
  RUN(test_unary_sweep);
  RUN(test_binary_sweep);
  RUN(test_print_speed);
  free(scratch_p);
  free(scratch_v);
  return harness_report();
}

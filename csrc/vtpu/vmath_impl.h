/* Private to vmath.c: the per-element float32 math, written once and inlined
 * into both the portable and the AVX-512 kernels.
 *
 * Why the two paths agree bit for bit: every function here uses only IEEE
 * basic operations (+ - * /, float<->double and int->float conversions,
 * comparisons), integer bit manipulation, fused multiply-add through
 * __builtin_fma(f) (a correctly rounded libm call in the portable path, a
 * vfmadd instruction in the AVX-512 path: one rounding either way) and
 * value selects written as ?: with both arms already computed. Each of these
 * gives one IEEE-defined result whatever instruction computes it, and
 * scalar and vector x86 instructions honour the same MXCSR flush-to-zero and
 * denormals-are-zero bits. What could break it is the compiler fusing a*b+c
 * on its own in one path only, so contraction is switched off (VM_OPT), and
 * NaN payloads, which x86 propagates from whichever operand comes first, so
 * every NaN result is replaced by one canonical NaN.
 *
 * Coefficients are minimax fits derived for this library (Remez exchange on
 * the stated interval, then greedy rounding to float with refitting).
 * Nothing here may call libm except through VM_FMA / VM_FMAD. (sqrt, the
 * other correctly rounded primitive, is used in vmath.c.)
 */
#ifndef TPU_VTPU_VMATH_IMPL_H_
#define TPU_VTPU_VMATH_IMPL_H_

#include <stdint.h>
#include <string.h>

#if defined(__clang__)
/* clang contracts a*b+c within one expression by default. */
#pragma STDC FP_CONTRACT OFF
#endif

/* fp-contract=off: no implicit fusing (the portable and vector paths would
 * fuse different expressions). no-trapping-math: lets the if-converter
 * evaluate both arms of a select after GCC has sunk code into one arm
 * (values are unchanged; only exception flags, which nobody reads, may
 * differ). tree-vectorize with the dynamic cost model: the kernels vectorize
 * at -O2 too (GCC 12's -O2 default, the very-cheap model, gives up on loops
 * of this size). */
#if defined(__GNUC__) && !defined(__clang__)
#define VM_OPT                                                   \
  __attribute__((optimize("fp-contract=off", "no-trapping-math", \
                          "tree-vectorize", "vect-cost-model=dynamic")))
#else
#define VM_OPT
#endif

#define VM_INLINE static inline __attribute__((always_inline)) VM_OPT

#define VM_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#define VM_FMAD(a, b, c) __builtin_fma((a), (b), (c))

/* ------------------------------------------------------------- bit casts */

VM_INLINE uint32_t vm_f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
VM_INLINE float vm_u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
VM_INLINE uint64_t vm_d2u(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
VM_INLINE double vm_u2d(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

#define VM_QNAN_BITS 0x7fc00000u
#define VM_SIGN_BITS 0x80000000u

/* Any NaN becomes the canonical quiet NaN. */
VM_INLINE float vm_canon(float r) {
  return r != r ? vm_u2f(VM_QNAN_BITS) : r;
}

/* |v| with the sign of s. */
VM_INLINE float vm_copysign(float v, float s) {
  return vm_u2f((vm_f2u(v) & ~VM_SIGN_BITS) | (vm_f2u(s) & VM_SIGN_BITS));
}

VM_INLINE float vm_abs(float x) { return vm_u2f(vm_f2u(x) & ~VM_SIGN_BITS); }

/* Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to
 * the nearest integer, and leaves that integer in the low mantissa bits. */
#define VM_ROUND_MAGIC 0x1.8p23f
#define VM_ROUND_MAGIC_D 0x1.8p52

/* ----------------------------------------------------------------- exp */

#define VM_LOG2E 0x1.715476p+0f
#define VM_LN2_HI 0x1.62e430p-1f  /* float(ln 2) */
#define VM_LN2_LO -0x1.05c610p-29f /* ln 2 - VM_LN2_HI */

/* p * 2^k for k in [-252, 254], in two steps so neither scale factor
 * overflows or is subnormal; the second product rounds once, which gives
 * the correctly rounded overflow to inf and gradual underflow. */
VM_INLINE float vm_ldexp(float p, int32_t k) {
  int32_t k1 = k >> 1;
  int32_t k2 = k - k1;
  float s1 = vm_u2f((uint32_t)(k1 + 127) << 23);
  float s2 = vm_u2f((uint32_t)(k2 + 127) << 23);
  return (p * s1) * s2;
}

/* Splits x = k ln2 + r with |r| <= ln2/2 (+ 2^-18). x must be within
 * [-104, 104] or NaN. r_hi = x - k*VM_LN2_HI is exact (both are multiples of
 * 2^-25 and |r_hi| < 0.35), so r carries one rounding. */
VM_INLINE float vm_exp_reduce(float x, int32_t* k) {
  float t = VM_FMA(x, VM_LOG2E, VM_ROUND_MAGIC);
  float kf = t - VM_ROUND_MAGIC;
  *k = (int32_t)(vm_f2u(t) - vm_f2u(VM_ROUND_MAGIC));
  float r = VM_FMA(-kf, VM_LN2_HI, x);
  return VM_FMA(-kf, VM_LN2_LO, r);
}

/* exp(x) for x in [-104, 89] or NaN (the caller clamps). Polynomial:
 * exp(r) = 1 + r + r^2 q(r), |r| <= 0.3467, weighted error 2^-28.2. */
VM_INLINE float vm_exp_core(float x) {
  int32_t k;
  float r = vm_exp_reduce(x, &k);
  float q = 0x1.6ac502p-10f;
  q = VM_FMA(q, r, 0x1.123dcap-7f);
  q = VM_FMA(q, r, 0x1.555858p-5f);
  q = VM_FMA(q, r, 0x1.55548cp-3f);
  q = VM_FMA(q, r, 0x1.fffffcp-2f);
  float p = 1.0f + VM_FMA(r * r, q, r);
  return vm_ldexp(p, k);
}

VM_INLINE float vm_exp1(float x) {
  /* exp(89) overflows and exp(-104) < 2^-150 rounds to zero, so clamping
   * there keeps the results (inf and 0) and k small. NaN passes both. */
  float xc = x > 89.0f ? 89.0f : x;
  xc = xc < -104.0f ? -104.0f : xc;
  return vm_canon(vm_exp_core(xc));
}

/* --------------------------------------------------------------- expm1 */

/* expm1(x) = 2^k (1 + em) - 1 with em = expm1(r) = r + r^2 q(r), q of
 * degree 5 (relative error 2^-29 on |r| <= 0.3467). The last step is
 * 2 * fma(s, em, s - 0.5) with s = 2^(k-1): s - 0.5 is exact for the k where
 * the -1 matters and the fma rounds once. */
VM_INLINE float vm_expm1_1(float x) {
  /* Below -30 the result is -1.0f; above 88.8 it is inf (2^128 overflows). */
  float xc = x > 88.8f ? 88.8f : x;
  xc = xc < -30.0f ? -30.0f : xc;
  int32_t k;
  float r = vm_exp_reduce(xc, &k);
  float q = 0x1.b39090p-13f;
  q = VM_FMA(q, r, 0x1.6d0f3cp-10f);
  q = VM_FMA(q, r, 0x1.11052cp-7f);
  q = VM_FMA(q, r, 0x1.555522p-5f);
  q = VM_FMA(q, r, 0x1.55555cp-3f);
  q = VM_FMA(q, r, 0x1p-1f);
  float em = VM_FMA(r * r, q, r);
  float s = vm_u2f((uint32_t)(k - 1 + 127) << 23);
  float big = 2.0f * VM_FMA(s, em, s - 0.5f);
  /* k == 0: em itself, so tiny x (also subnormal x) comes back exactly. */
  float res = k == 0 ? em : big;
  res = x == 0.0f ? x : res; /* expm1(-0) = -0 */
  return vm_canon(res);
}

/* ----------------------------------------------------------- log, log1p */

#define VM_SQRT_HALF_BITS 0x3f3504f3u

/* log1p(f) - f for f in [sqrt(1/2) - 1, sqrt(2) - 1] as f^2 q(f), q of
 * degree 8 (relative error of the sum 2^-27.8). */
VM_INLINE float vm_log1p_q(float f) {
  float q = -0x1.3a4738p-4f;
  q = VM_FMA(q, f, 0x1.090924p-3f);
  q = VM_FMA(q, f, -0x1.0f2e7ap-3f);
  q = VM_FMA(q, f, 0x1.2254a8p-3f);
  q = VM_FMA(q, f, -0x1.5424f8p-3f);
  q = VM_FMA(q, f, 0x1.99a544p-3f);
  q = VM_FMA(q, f, -0x1.000438p-2f);
  q = VM_FMA(q, f, 0x1.55554ep-2f);
  q = VM_FMA(q, f, -0x1.fffff8p-2f);
  return q;
}

/* Writes u = 2^e * m with m in [sqrt(1/2), sqrt(2)), u positive normal;
 * returns m. Garbage (but no UB) for other bit patterns. */
VM_INLINE float vm_frexp_sqrt2(uint32_t iu, int32_t* e) {
  uint32_t t = iu - VM_SQRT_HALF_BITS;
  int32_t ee = (int32_t)t >> 23;
  *e = ee;
  return vm_u2f(iu - ((uint32_t)ee << 23));
}

/* e*ln2 + log1p(f) + c, with c a small correction (< 2^-23 |result|). */
VM_INLINE float vm_log_finish(int32_t e, float f, float c) {
  float ef = (float)e;
  float lo = VM_FMA(ef, VM_LN2_LO, c) + f;
  float r = VM_FMA(f * f, vm_log1p_q(f), lo);
  return VM_FMA(ef, VM_LN2_HI, r);
}

VM_INLINE float vm_log1(float x) {
  /* Subnormals are scaled into the normal range first (under DAZ they
   * compare equal to zero and take the log(0) branch in both paths). */
  uint32_t ix = vm_f2u(x);
  float xs = x * 0x1p23f;
  uint32_t sub = ix < 0x00800000u;
  uint32_t iu = sub ? vm_f2u(xs) : ix;
  int32_t e;
  float m = vm_frexp_sqrt2(iu, &e);
  e = sub ? e - 23 : e;
  float res = vm_log_finish(e, m - 1.0f, 0.0f);
  res = x == __builtin_inff() ? x : res;
  res = x == 0.0f ? -__builtin_inff() : res;
  res = x >= 0.0f ? res : vm_u2f(VM_QNAN_BITS); /* x < 0 or NaN */
  return vm_canon(res);
}

VM_INLINE float vm_log1p1(float x) {
  /* u = 1 + x rounded, err = (1 + x) - u exactly (Fast2Sum, larger operand
   * first). When u is near 1 (e == 0) f = x is exact and no correction is
   * needed; otherwise f = m - 1 is exact and log1p(x) = log(u) + err/u. */
  float u = 1.0f + x;
  float ax = vm_abs(x);
  float err = ax <= 1.0f ? x - (u - 1.0f) : 1.0f - (u - x);
  int32_t e;
  float m = vm_frexp_sqrt2(vm_f2u(u), &e);
  float c = err / u;
  float f = e == 0 ? x : m - 1.0f;
  c = e == 0 ? 0.0f : c;
  float res = vm_log_finish(e, f, c);
  res = x == __builtin_inff() ? x : res;
  res = x == 0.0f ? x : res; /* log1p(-0) = -0 */
  res = x == -1.0f ? -__builtin_inff() : res;
  res = x >= -1.0f ? res : vm_u2f(VM_QNAN_BITS); /* x < -1 or NaN */
  return vm_canon(res);
}

/* ---------------------------------------------------------------- tanh */

VM_INLINE float vm_tanh1(float x) {
  float ax = vm_abs(x);
  /* |x| < 0.625: tanh(x) = x + x^3 P(x^2), P of degree 5 (2^-32.4). */
  float u = ax * ax;
  float p = 0x1.1a2816p-9f;
  p = VM_FMA(p, u, -0x1.0c5ed0p-7f);
  p = VM_FMA(p, u, 0x1.63a550p-6f);
  p = VM_FMA(p, u, -0x1.b9f188p-5f);
  p = VM_FMA(p, u, 0x1.11107ap-3f);
  p = VM_FMA(p, u, -0x1.555554p-2f);
  float small = VM_FMA(ax * u, p, ax);
  /* Otherwise 1 - 2 / (exp(2|x|) + 1); past |x| = 9.02 that is 1.0f. */
  float ac = ax < 10.0f ? ax : 10.0f;
  float e = vm_exp_core(2.0f * ac);
  float big = 1.0f - 2.0f / (e + 1.0f);
  float res = vm_copysign(ax < 0.625f ? small : big, x);
  return x != x ? vm_u2f(VM_QNAN_BITS) : res;
}

/* ------------------------------------------------------------ logistic */

VM_INLINE float vm_logistic1(float x) {
  /* With e = exp(-|x|) in (0, 1]: 1/(1+e) for x >= 0, e/(1+e) for x < 0;
   * no cancellation either way. */
  float ax = vm_abs(x);
  float ac = ax < 104.0f ? ax : 104.0f;
  float e = vm_exp_core(-ac);
  float num = x >= 0.0f ? 1.0f : e;
  float res = num / (1.0f + e);
  return x != x ? vm_u2f(VM_QNAN_BITS) : res;
}

/* ----------------------------------------------------------------- erf */

VM_INLINE float vm_erf1(float x) {
  float ax = vm_abs(x);
  float ac = ax < 4.0f ? ax : 4.0f; /* erf(x) rounds to 1 from 3.92 on */
  float u = ac * ac;
  /* |x| < 1: erf(x) = x + x P(x^2), P(u) = erf(sqrt u)/sqrt u - 1 of
   * degree 6 (2^-29.4 relative); leaving the leading 1 out of P keeps the
   * rounding error of 2/sqrt(pi) out of the result. */
  float p = 0x1.4771fep-14f;
  p = VM_FMA(p, u, -0x1.a3515ep-11f);
  p = VM_FMA(p, u, 0x1.53f224p-8f);
  p = VM_FMA(p, u, -0x1.b7f71ap-6f);
  p = VM_FMA(p, u, 0x1.ce2ce6p-4f);
  p = VM_FMA(p, u, -0x1.81273ep-2f);
  p = VM_FMA(p, u, 0x1.06eba8p-3f);
  float small = VM_FMA(ac, p, ac);
  /* 1 <= |x| <= 4: erf(x) = 1 - exp(-x^2) g(x), g(x) = erfc(x) exp(x^2) of
   * degree 8 in t = x - 2.5 (absolute error of the product 2^-28.6). */
  float t = ac - 2.5f;
  float g = 0x1.c04db2p-14f;
  g = VM_FMA(g, t, 0x1.d86f88p-13f);
  g = VM_FMA(g, t, 0x1.1d11d6p-11f);
  g = VM_FMA(g, t, -0x1.5a7422p-11f);
  g = VM_FMA(g, t, 0x1.2dcb38p-9f);
  g = VM_FMA(g, t, -0x1.0a7b5cp-7f);
  g = VM_FMA(g, t, 0x1.983344p-6f);
  g = VM_FMA(g, t, -0x1.308170p-4f);
  g = VM_FMA(g, t, 0x1.afbbe6p-3f);
  float e = vm_exp_core(-u);
  float big = VM_FMA(-e, g, 1.0f);
  float res = vm_copysign(ax < 1.0f ? small : big, x);
  return x != x ? vm_u2f(VM_QNAN_BITS) : res;
}

/* ------------------------------------------------------------ sin, cos */

/* Range reduction |x| = k pi/2 + r, |r| <= pi/4, r = r_hi + r_lo.
 *
 * Below VM_TRIG_HUGE: Cody-Waite in double. k*PIO2_D1 and the first
 * subtraction are exact (53-bit multiples of 2^-52 below 1 in magnitude),
 * the second step adds one double rounding, so r is good to ~2^-52
 * relative for every float there.
 * From VM_TRIG_HUGE up (k no longer fits the magic-number rounding soon):
 * Payne-Hanek with integers, exact to 2^-70 for every finite float.
 * Only blocks that contain such an |x| pay for it. */
#define VM_TRIG_HUGE 0x1p24f
#define VM_2_OVER_PI_D 0x1.45f306dc9c883p-1
#define VM_PIO2_D1 0x1.921fb54442d18p+0
#define VM_PIO2_D2 0x1.1a62633145c07p-54
#define VM_PIO2_2M64_D 0x1.921fb54442d18p-64 /* pi/2 * 2^-64 */

/* Bits of 2/pi after 32 zero bits: word i holds bits 32i..32i+31 of
 * 2^-32 * 2/pi after the binary point. */
static const uint32_t vm_two_over_pi_bits[8] = {
    0x00000000u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u,
    0xf534ddc0u, 0xdb629599u, 0x3c439041u, 0xfe5163abu,
};

VM_INLINE void vm_trig_reduce_cw(float ax, float* r_hi, float* r_lo,
                                 uint32_t* q) {
  double ad = (double)ax;
  double t = VM_FMAD(ad, VM_2_OVER_PI_D, VM_ROUND_MAGIC_D);
  double kd = t - VM_ROUND_MAGIC_D;
  *q = (uint32_t)vm_d2u(t) & 3u;
  double rd = VM_FMAD(-kd, VM_PIO2_D1, ad);
  rd = VM_FMAD(-kd, VM_PIO2_D2, rd);
  float rf = (float)rd;
  *r_hi = rf;
  *r_lo = (float)(rd - (double)rf);
}

/* 32 bits of the 64-bit pair (a:b) starting s bits into a, s in [0, 31]. */
VM_INLINE uint32_t vm_funnel32(uint32_t a, uint32_t b, uint32_t s) {
  uint64_t ab = ((uint64_t)a << 32) | b;
  return (uint32_t)(ab >> (32u - s));
}

/* Payne-Hanek for ax >= 1 (any finite float; other lanes get garbage but no
 * UB). ax = M 2^E, M the 24-bit integer mantissa. Bits of 2/pi of weight
 * 2^-(E-1) and above only add multiples of 4 to ax * 2/pi, so a 96-bit
 * window W starting there gives ax*2/pi mod 4 = M*W / 2^94: bits 95..94 of
 * the 120-bit product are the quadrant, bits 93..30 the fraction. */
VM_INLINE void vm_trig_reduce_ph(float ax, float* r_hi, float* r_lo,
                                 uint32_t* q) {
  uint32_t ix = vm_f2u(ax);
  uint32_t be = ix >> 23;
  be = be < 127u ? 127u : be;
  be = be > 254u ? 254u : be;
  uint32_t m = (ix & 0x007fffffu) | 0x00800000u;
  uint32_t k0 = be - 120u; /* first window bit in the zero-padded table */
  uint32_t j = k0 >> 5, s = k0 & 31u;
  const uint32_t* tb = vm_two_over_pi_bits;
  uint32_t w0 = vm_funnel32(tb[j], tb[j + 1], s);
  uint32_t w1 = vm_funnel32(tb[j + 1], tb[j + 2], s);
  uint32_t w2 = vm_funnel32(tb[j + 2], tb[j + 3], s);
  uint64_t p0 = (uint64_t)m * w0, p1 = (uint64_t)m * w1;
  uint64_t p2 = (uint64_t)m * w2;
  uint64_t lo = p2 + (p1 << 32);
  uint64_t hi = p0 + (p1 >> 32) + (uint64_t)(lo < p2);
  uint64_t frac = (hi << 34) | (lo >> 30);
  /* Round to the nearest quadrant: a fraction >= 1/2 is taken as negative
   * (two's complement) with the quadrant one up. */
  *q = ((uint32_t)(hi >> 30) + (uint32_t)(frac >> 63)) & 3u;
  double rd = (double)(int64_t)frac * VM_PIO2_2M64_D;
  float rf = (float)rd;
  *r_hi = rf;
  *r_lo = (float)(rd - (double)rf);
}

/* sin(r_hi + r_lo) for |r| <= pi/4: r + r^3 S(r^2), S of degree 3
 * (2^-32.5 relative); r_lo enters as the first-order term. */
VM_INLINE float vm_sin_poly(float r, float r_lo) {
  float u = r * r;
  float p = 0x1.7c2c4ep-19f;
  p = VM_FMA(p, u, -0x1.a05954p-13f);
  p = VM_FMA(p, u, 0x1.111174p-7f);
  p = VM_FMA(p, u, -0x1.555556p-3f);
  return r + VM_FMA(r * u, p, r_lo);
}

/* cos(r_hi + r_lo) for |r| <= pi/4: 1 + r^2 C(r^2), C of degree 3
 * (2^-33 relative); -r*r_lo is the first-order term of r_lo. */
VM_INLINE float vm_cos_poly(float r, float r_lo) {
  float u = r * r;
  float p = 0x1.99e80cp-16f;
  p = VM_FMA(p, u, -0x1.6c0c28p-10f);
  p = VM_FMA(p, u, 0x1.55554ap-5f);
  p = VM_FMA(p, u, -0x1p-1f);
  return 1.0f + VM_FMA(u, p, -(r * r_lo));
}

/* sin(x) (is_cos = 0) or cos(x) (is_cos = 1) from x and its reduction. */
VM_INLINE float vm_trig_finish(float x, float r, float r_lo, uint32_t q,
                               uint32_t is_cos) {
  float s = vm_sin_poly(r, r_lo);
  float c = vm_cos_poly(r, r_lo);
  uint32_t qq = q + is_cos;
  float v = (qq & 1u) ? c : s;
  uint32_t sign = ((qq & 2u) << 30) ^ (is_cos ? 0u : vm_f2u(x) & VM_SIGN_BITS);
  float res = vm_u2f(vm_f2u(v) ^ sign);
  /* sin, cos of inf and NaN are NaN. */
  return vm_abs(x) < __builtin_inff() ? res : vm_u2f(VM_QNAN_BITS);
}

/* ----------------------------------------------------------------- pow */

#define VM_LN2_HI_D 0x1.62e42fefa39efp-1
#define VM_LN2_LO_D 0x1.abc9e3b39803fp-56
#define VM_LOG2E_D 0x1.71547652b82fep+0

/* ln(a) in double for a positive finite normal double (a float's value):
 * a = 2^e m, m in [sqrt(1/2), sqrt(2)), s = (m-1)/(m+1),
 * ln m = 2s + s^3 R(s^2), R of degree 5 (2^-50.8 relative). */
VM_INLINE double vm_ln_d(double a) {
  uint64_t ia = vm_d2u(a);
  uint64_t t = ia - 0x3fe6a09e667f3bcdull;
  int64_t e = (int64_t)t >> 52;
  double m = vm_u2d(ia - ((uint64_t)e << 52));
  double f = m - 1.0;
  double s = f / (2.0 + f);
  double v = s * s;
  double r = 0x1.5a281ee824f8fp-3;
  r = VM_FMAD(r, v, 0x1.73058e31c803cp-3);
  r = VM_FMAD(r, v, 0x1.c723c5a5f5cc0p-3);
  r = VM_FMAD(r, v, 0x1.24923ed49be61p-2);
  r = VM_FMAD(r, v, 0x1.999999a78ca6ep-2);
  r = VM_FMAD(r, v, 0x1.5555555551cb6p-1);
  double lnm = VM_FMAD(s * v, r, 2.0 * s);
  double ed = (double)e;
  return VM_FMAD(ed, VM_LN2_HI_D, VM_FMAD(ed, VM_LN2_LO_D, lnm));
}

/* exp(t) in double for t in [-200, 200] or NaN: exp(r) = 1 + r + r^2 q(r),
 * q of degree 7 (2^-45.6 relative). */
VM_INLINE double vm_exp_d(double t) {
  double tt = VM_FMAD(t, VM_LOG2E_D, VM_ROUND_MAGIC_D);
  double kd = tt - VM_ROUND_MAGIC_D;
  uint64_t k = vm_d2u(tt) - vm_d2u(VM_ROUND_MAGIC_D);
  double r = VM_FMAD(-kd, VM_LN2_HI_D, t);
  r = VM_FMAD(-kd, VM_LN2_LO_D, r);
  double q = 0x1.71028993550efp-19;
  q = VM_FMAD(q, r, 0x1.a16e826dca482p-16);
  q = VM_FMAD(q, r, 0x1.a01b7401d0aadp-13);
  q = VM_FMAD(q, r, 0x1.6c163bb985347p-10);
  q = VM_FMAD(q, r, 0x1.1111108dd81cfp-7);
  q = VM_FMAD(q, r, 0x1.5555557e04b23p-5);
  q = VM_FMAD(q, r, 0x1.555555558a19ep-3);
  q = VM_FMAD(q, r, 0x1.fffffffff134dp-2);
  double p = 1.0 + VM_FMAD(r * r, q, r);
  return p * vm_u2d((k + 1023u) << 52);
}

/* pow(x, y) = exp(y ln|x|) in double (ln|x| good to 2^-50, so y ln|x| keeps
 * ~2^-45 absolute wherever the float result is finite and nonzero), rounded
 * once to float; then the C99 sign and special-value rules. */
VM_INLINE float vm_pow1(float x, float y) {
  float ax = vm_abs(x), ay = vm_abs(y);
  double ln = vm_ln_d((double)ax);
  ln = ax == 0.0f ? -__builtin_inf() : ln;
  ln = ax == __builtin_inff() ? __builtin_inf() : ln;
  ln = ax != ax ? (double)ax : ln;
  double t = (double)y * ln;
  t = t > 200.0 ? 200.0 : t; /* NaN passes */
  t = t < -200.0 ? -200.0 : t;
  float res = (float)vm_exp_d(t);
  /* y's integer-ness from its bits: |y| >= 2^24 (and inf) is an even
   * integer, |y| < 1 is not an integer unless 0. */
  uint32_t uy = vm_f2u(ay);
  int32_t ey = (int32_t)(uy >> 23) - 127;
  uint32_t sh = (uint32_t)(ey < 0 ? 0 : ey > 23 ? 23 : ey);
  uint32_t frac_mask = 0x007fffffu >> sh;
  uint32_t y_int = ey < 0 ? uy == 0u : ey > 23 ? 1u : (uy & frac_mask) == 0u;
  uint32_t y_odd =
      (ey >= 0 && ey <= 23 && y_int) ? (uy >> (23u - sh)) & 1u : 0u;
  uint32_t x_neg = vm_f2u(x) >> 31;
  res = (x_neg && y_odd) ? -res : res;
  /* Negative finite x to a non-integer finite power. */
  uint32_t bad = x_neg && !y_int && ax != 0.0f && ax < __builtin_inff();
  res = bad ? vm_u2f(VM_QNAN_BITS) : res;
  res = vm_canon(res);
  res = (x == 1.0f || (x == -1.0f && ay == __builtin_inff())) ? 1.0f : res;
  res = y == 0.0f ? 1.0f : res;
  return res;
}

/* --------------------------------------------------------------- atan2 */

#define VM_PIO4_HI 0x1.921fb6p-1f   /* float(pi/4) */
#define VM_PIO4_LO -0x1.777a5cp-26f /* pi/4 - VM_PIO4_HI */

VM_INLINE float vm_atan2_1(float y, float x) {
  float ay = vm_abs(y), ax = vm_abs(x);
  uint32_t both_inf = ax == __builtin_inff() && ay == __builtin_inff();
  /* q = min/max in [0, 1] (0/0 -> 0, inf/inf -> 1). */
  uint32_t swap = ay > ax;
  float num = swap ? ax : ay, den = swap ? ay : ax;
  float q = num / den;
  q = both_inf ? 1.0f : q;
  q = num == 0.0f ? 0.0f : q;
  /* atan(q) = a0 + atan(w): w = q, a0 = 0 up to tan(pi/8); above that
   * w = (num - den) / (num + den) = (q - 1) / (q + 1) (computed without q's
   * rounding) and a0 = pi/4. atan(w) = w + w^3 A(w^2), |w| <= tan(pi/8),
   * A of degree 4 (2^-30.4 relative). */
  uint32_t upper = q > 0x1.a8279ap-2f;
  /* num + den could overflow; scaling both by 1/4 is exact up there (when t
   * is used, num > den / 3 is far from the subnormals). */
  float sc = den > 0x1p125f ? 0x1p-2f : 1.0f;
  float ns = num * sc, ds = den * sc;
  float t = (ns - ds) / (ns + ds);
  t = both_inf ? 0.0f : t;
  float w = upper ? t : q;
  float u = w * w;
  float a = -0x1.f2e5a8p-5f;
  a = VM_FMA(a, u, 0x1.b22456p-4f);
  a = VM_FMA(a, u, -0x1.23b9a2p-3f);
  a = VM_FMA(a, u, 0x1.9991e2p-3f);
  a = VM_FMA(a, u, -0x1.55554ap-2f);
  float p = VM_FMA(w * u, a, w);
  /* atan2 = K + s atan(w), K a multiple of pi/4:
   *   x >= 0, |y| <= |x|:  a0 + atan(w)
   *   x >= 0, |y| > |x|:   pi/2 - a0 - atan(w)
   *   x < 0,  |y| <= |x|:  pi - a0 - atan(w)
   *   x < 0,  |y| > |x|:   pi/2 + a0 + atan(w)
   * and the sign of y at the end. */
  uint32_t x_neg = vm_f2u(x) >> 31;
  uint32_t n4 = swap ? (x_neg ? 2u + upper : 2u - upper)
                     : (x_neg ? 4u - upper : upper);
  /* K = n4 pi/4 as k_hi + k_lo (computed, not looked up: GCC turns a chain
   * of constant selects into a table load that does not vectorize). The
   * fma gives k_hi's rounding error exactly. */
  float nf = (float)n4;
  float k_hi = nf * VM_PIO4_HI;
  float k_lo = VM_FMA(nf, VM_PIO4_LO, VM_FMA(nf, VM_PIO4_HI, -k_hi));
  float sp = (swap != x_neg) ? -p : p;
  float v = k_hi + (k_lo + sp);
  float res = vm_copysign(v, y);
  return (x != x || y != y) ? vm_u2f(VM_QNAN_BITS) : res;
}

#endif /* TPU_VTPU_VMATH_IMPL_H_ */

/* torchtpu vector math: elementwise transcendental kernels for the vTPU.
 *
 * Every function maps n elements of x to y. y may be exactly x (in-place);
 * any other overlap between inputs and output is not allowed. n <= 0 does
 * nothing. The functions never fail and never allocate; they are thread-safe
 * and re-entrant.
 *
 * float32: the library's own range reductions and polynomials. Two code paths
 * are compiled from one source body: a portable one (plain C) and, on x86-64,
 * an AVX-512 one picked at run time. The two give bit-identical results for
 * every input, in the default floating-point environment and under
 * tpu_fpenv_enter() (flush-to-zero), so a model computes the same numbers on
 * every host. Guaranteed error against the correctly rounded result (in
 * brackets: the maximum measured, exhaustively over all 2^32 inputs for the
 * unary functions, over 26M random pairs for the binary ones):
 *   exp, expm1, log, log1p, sin, cos    <= 2 ulp  [1]
 *   tanh, erf                           <= 3 ulp  [1]
 *   logistic                            <= 3 ulp  [2]
 *   atan2                               <= 3 ulp  [2]
 *   pow                                 <= 4 ulp  [1]  (computed in double)
 *   sqrt                                correctly rounded
 *   rsqrt = 1.0f / sqrtf(x)             exactly that: two roundings, at most
 *                                       1.49 ulp from the true 1/sqrt(x)
 * sin and cos keep their bound for every finite x (integer Payne-Hanek range
 * reduction from |x| >= 2^24 on).
 * Subnormal inputs and results are handled (and the bounds hold there, in
 * ulps of the subnormal spacing) in the default environment.
 * Special values follow C99 Annex F (exp(-inf) = 0, log(0) = -inf,
 * log(x < 0) = NaN, tanh(+-inf) = +-1, pow(x, 0) = 1, pow(1, y) = 1, atan2's
 * signed zeros and infinities, ...). Every NaN result is the canonical quiet
 * NaN 0x7fc00000 (positive, zero payload), whatever NaN came in; the C99
 * cases where a NaN input gives a number (pow(NaN, 0) = 1, pow(1, NaN) = 1)
 * are kept. Overflow gives +-inf and underflow a subnormal or zero (zero
 * under tpu_fpenv_enter()).
 *
 * float64: float64 is not native on a TPU, so these loop over the C library
 * (correct, not fast) and make no bit-identity promise across hosts.
 */
#ifndef TPU_VMATH_H_
#define TPU_VMATH_H_

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- float32 */

void tpu_vmath_exp_f32(const float* x, float* y, int64_t n);
void tpu_vmath_expm1_f32(const float* x, float* y, int64_t n);
void tpu_vmath_log_f32(const float* x, float* y, int64_t n);
void tpu_vmath_log1p_f32(const float* x, float* y, int64_t n);
void tpu_vmath_tanh_f32(const float* x, float* y, int64_t n);
/* logistic(x) = 1 / (1 + exp(-x)), the sigmoid. */
void tpu_vmath_logistic_f32(const float* x, float* y, int64_t n);
void tpu_vmath_sin_f32(const float* x, float* y, int64_t n);
void tpu_vmath_cos_f32(const float* x, float* y, int64_t n);
void tpu_vmath_erf_f32(const float* x, float* y, int64_t n);
void tpu_vmath_sqrt_f32(const float* x, float* y, int64_t n);
/* rsqrt(x) = 1.0f / sqrtf(x): two IEEE roundings, not a correctly rounded
 * reciprocal square root (the same numbers as PyTorch's CPU rsqrt). */
void tpu_vmath_rsqrt_f32(const float* x, float* y, int64_t n);
/* y[i] = pow(x[i], e[i]). out may be exactly x or exactly e. */
void tpu_vmath_pow_f32(const float* x, const float* e, float* y, int64_t n);
/* out[i] = atan2(y_[i], x[i]). out may be exactly y_ or exactly x. */
void tpu_vmath_atan2_f32(const float* y_, const float* x, float* out,
                         int64_t n);

/* ------------------------------------------------------------- float64 */

void tpu_vmath_exp_f64(const double* x, double* y, int64_t n);
void tpu_vmath_expm1_f64(const double* x, double* y, int64_t n);
void tpu_vmath_log_f64(const double* x, double* y, int64_t n);
void tpu_vmath_log1p_f64(const double* x, double* y, int64_t n);
void tpu_vmath_tanh_f64(const double* x, double* y, int64_t n);
void tpu_vmath_logistic_f64(const double* x, double* y, int64_t n);
void tpu_vmath_sin_f64(const double* x, double* y, int64_t n);
void tpu_vmath_cos_f64(const double* x, double* y, int64_t n);
void tpu_vmath_erf_f64(const double* x, double* y, int64_t n);
void tpu_vmath_sqrt_f64(const double* x, double* y, int64_t n);
void tpu_vmath_rsqrt_f64(const double* x, double* y, int64_t n);
void tpu_vmath_pow_f64(const double* x, const double* e, double* y,
                       int64_t n);
void tpu_vmath_atan2_f64(const double* y_, const double* x, double* out,
                         int64_t n);

/* ------------------------------------------------------------ dispatch */

/* The float32 path is chosen once, on first use: AVX-512 when the CPU has
 * AVX-512 F/DQ/BW/VL and FMA, unless the environment variable TORCHTPU_ISA
 * is "portable" (read once). tpu_vmath_set_portable(true) forces the portable
 * path; (false) goes back to that automatic choice. Results do not depend on
 * the path, so switching is safe at any time, even while other threads run
 * kernels (they may finish a call on the old path). */
void tpu_vmath_set_portable(bool force);

/* True when the AVX-512 path is the active one. */
bool tpu_vmath_is_vectorized(void);

/* "avx512" or "portable": the active float32 path. Static string. */
const char* tpu_vmath_isa(void);

#ifdef __cplusplus
}
#endif

#endif /* TPU_VMATH_H_ */

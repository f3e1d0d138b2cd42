/* Clock, hashing, CPU feature detection, floating-point environment. */
#include <string.h>
#include <time.h>

#include "tpu/base.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <xmmintrin.h>
#endif

uint64_t tpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ hashing */
/* A 128-bit hash built from two independent 64-bit multiply-xorshift lanes.
 * Not cryptographic: fingerprints only need a negligible accidental
 * collision rate between programs of one process. */

static inline uint64_t rotl64(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

void tpu_hasher_init(tpu_hasher_t* h, uint64_t seed) {
  h->a = 0x9e3779b97f4a7c15ull ^ seed;
  h->b = 0x6a09e667f3bcc909ull ^ rotl64(seed, 29);
  h->n = 0;
}

void tpu_hasher_add_u64(tpu_hasher_t* h, uint64_t v) {
  h->a = rotl64(h->a ^ mix64(v + 0x632be59bd9b4e019ull), 27) * 5 + 0x52dce729;
  h->b = rotl64(h->b ^ mix64(v ^ 0x85ebca77c2b2ae63ull), 31) * 9 + 0x38495ab5;
  h->n++;
}

void tpu_hasher_add_bytes(tpu_hasher_t* h, const void* data, size_t n) {
  const unsigned char* p = data;
  tpu_hasher_add_u64(h, (uint64_t)n);
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    tpu_hasher_add_u64(h, v);
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    memcpy(&v, p, n);
    tpu_hasher_add_u64(h, v ^ ((uint64_t)n << 56));
  }
}

tpu_hash128_t tpu_hasher_finish(const tpu_hasher_t* h) {
  tpu_hash128_t r;
  r.lo = mix64(h->a ^ rotl64(h->b, 17) ^ h->n);
  r.hi = mix64(h->b ^ rotl64(h->a, 41) ^ (h->n * 0x9e3779b97f4a7c15ull));
  return r;
}

/* ------------------------------------------------------- CPU features */

tpu_cpu_features_t tpu_cpu_features(void) {
  tpu_cpu_features_t f;
  memset(&f, 0, sizeof(f));
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = (a >> 5) & 1;
#endif
  return f;
}

/* ------------------------------------------------- floating-point env */

tpu_fpenv_t tpu_fpenv_enter(void) {
  tpu_fpenv_t env = {0};
#if defined(__x86_64__) || defined(__i386__)
  unsigned csr = _mm_getcsr();
  env.saved = csr;
  /* FTZ (bit 15) flushes subnormal results, DAZ (bit 6) subnormal inputs. */
  _mm_setcsr(csr | 0x8040u);
#elif defined(__aarch64__)
  uint64_t fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  env.saved = fpcr;
  __asm__ __volatile__("msr fpcr, %0" ::"r"(fpcr | (1ull << 24)));
#endif
  return env;
}

void tpu_fpenv_leave(tpu_fpenv_t env) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr((unsigned)env.saved);
#elif defined(__aarch64__)
  __asm__ __volatile__("msr fpcr, %0" ::"r"(env.saved));
#else
  (void)env;
#endif
}

bool tpu_fpenv_flushes(void) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

/* torchtpu C core: status codes, host allocator injection, common macros.
 *
 * Every fallible function returns tpu_status_t. NULL means OK; anything else
 * is an owned status object the caller must either return upward or release
 * with tpu_status_free(). Codes follow the absl / PJRT numbering so errors
 * from a PJRT plugin map 1:1.
 */
#ifndef TPU_BASE_H_
#define TPU_BASE_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TPU_MUST_USE __attribute__((warn_unused_result))
#define TPU_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define TPU_LIKELY(x) __builtin_expect(!!(x), 1)
#define TPU_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TPU_MUST_USE
#define TPU_PRINTF(f, a)
#define TPU_LIKELY(x) (x)
#define TPU_UNLIKELY(x) (x)
#endif

/* ------------------------------------------------------------------ status */

typedef enum tpu_status_code_e {
  TPU_STATUS_OK = 0,
  TPU_STATUS_CANCELLED = 1,
  TPU_STATUS_UNKNOWN = 2,
  TPU_STATUS_INVALID_ARGUMENT = 3,
  TPU_STATUS_DEADLINE_EXCEEDED = 4,
  TPU_STATUS_NOT_FOUND = 5,
  TPU_STATUS_ALREADY_EXISTS = 6,
  TPU_STATUS_PERMISSION_DENIED = 7,
  TPU_STATUS_RESOURCE_EXHAUSTED = 8,
  TPU_STATUS_FAILED_PRECONDITION = 9,
  TPU_STATUS_ABORTED = 10,
  TPU_STATUS_OUT_OF_RANGE = 11,
  TPU_STATUS_UNIMPLEMENTED = 12,
  TPU_STATUS_INTERNAL = 13,
  TPU_STATUS_UNAVAILABLE = 14,
  TPU_STATUS_DATA_LOSS = 15,
  TPU_STATUS_UNAUTHENTICATED = 16,
  TPU_STATUS_COUNT
} tpu_status_code_t;

typedef struct tpu_status_s* tpu_status_t;

/* Creates a status with a printf-style message prefixed by nothing; file and
 * line are kept separately (tpu_status_location). Never fails: when the host
 * is out of memory a static status with code RESOURCE_EXHAUSTED is returned
 * (tpu_status_free ignores it). code must not be TPU_STATUS_OK. */
TPU_MUST_USE tpu_status_t tpu_status_make(tpu_status_code_t code,
                                          const char* file, int line,
                                          const char* fmt, ...)
    TPU_PRINTF(4, 5);
TPU_MUST_USE tpu_status_t tpu_status_makev(tpu_status_code_t code,
                                           const char* file, int line,
                                           const char* fmt, va_list ap);

/* Prepends "context: " to the message of status and returns it (ownership
 * passes through). A NULL status is returned unchanged. */
TPU_MUST_USE tpu_status_t tpu_status_annotate(tpu_status_t status,
                                              const char* fmt, ...)
    TPU_PRINTF(2, 3);

/* Accessors lend; the returned string lives as long as the status. */
tpu_status_code_t tpu_status_code(tpu_status_t status);
const char* tpu_status_message(tpu_status_t status);
const char* tpu_status_file(tpu_status_t status);
int tpu_status_line(tpu_status_t status);
const char* tpu_status_code_name(tpu_status_code_t code);

/* Releases a status; NULL is allowed. */
void tpu_status_free(tpu_status_t status);

/* Frees the status and returns its code (for tests and for ignoring). */
tpu_status_code_t tpu_status_consume(tpu_status_t status);

#define TPU_STATUS(code, ...) \
  tpu_status_make(TPU_STATUS_##code, __FILE__, __LINE__, __VA_ARGS__)

#define TPU_RETURN_IF_ERROR(expr)             \
  do {                                        \
    tpu_status_t tpu_status_tmp_ = (expr);    \
    if (TPU_UNLIKELY(tpu_status_tmp_ != NULL)) \
      return tpu_status_tmp_;                 \
  } while (0)

/* Like TPU_RETURN_IF_ERROR but prepends a context message. */
#define TPU_RETURN_IF_ERROR_CTX(expr, ...)                         \
  do {                                                             \
    tpu_status_t tpu_status_tmp_ = (expr);                         \
    if (TPU_UNLIKELY(tpu_status_tmp_ != NULL))                     \
      return tpu_status_annotate(tpu_status_tmp_, __VA_ARGS__);    \
  } while (0)

/* ---------------------------------------------------- internal invariants */

/* Internal invariants only (never user input): prints file and line and
 * aborts. */
void tpu_assert_fail(const char* expr, const char* file, int line);
#define TPU_ASSERT(x) \
  ((x) ? (void)0 : tpu_assert_fail(#x, __FILE__, __LINE__))

/* Defensive checks in the style of SQLite's ALWAYS()/NEVER(): in release
 * builds they evaluate to the condition so the caller can return an error;
 * with TPU_DEBUG_INVARIANTS they also count the surprise so tests can see it. */
extern volatile uint64_t tpu_invariant_surprises;
static inline bool tpu_always_(bool x) {
  if (!x) tpu_invariant_surprises++;
  return x;
}
#define TPU_ALWAYS(x) tpu_always_(!!(x))
#define TPU_NEVER(x) (!tpu_always_(!(x)))

/* ------------------------------------------------------- host allocators */

/* A host allocator. Objects that allocate take one and keep it for destroy,
 * which is what makes fault-injection tests possible. All three functions
 * must be thread-safe if the object using them is. alloc returns NULL on
 * failure; free accepts NULL. */
typedef struct tpu_allocator_s {
  void* self;
  void* (*alloc)(void* self, size_t size);
  void* (*realloc)(void* self, void* ptr, size_t size);
  void (*free)(void* self, void* ptr);
} tpu_allocator_t;

/* The process allocator (malloc/realloc/free). */
tpu_allocator_t tpu_allocator_system(void);

static inline void* tpu_alloc(tpu_allocator_t a, size_t n) {
  return a.alloc(a.self, n);
}
static inline void* tpu_realloc(tpu_allocator_t a, void* p, size_t n) {
  return a.realloc(a.self, p, n);
}
static inline void tpu_free(tpu_allocator_t a, void* p) { a.free(a.self, p); }

/* Allocates zeroed memory or returns RESOURCE_EXHAUSTED naming what. */
TPU_MUST_USE tpu_status_t tpu_alloc_zeroed(tpu_allocator_t a, size_t n,
                                           const char* what, void** out);

/* A fault-injecting allocator for tests: fails the n-th allocation (counting
 * from 1) and every one after it when sticky. Wraps the system allocator. */
typedef struct tpu_fault_allocator_s {
  uint64_t count;      /* allocations attempted so far */
  uint64_t fail_at;    /* 0 = never fail */
  bool sticky;
  uint64_t live;       /* allocations not yet freed */
} tpu_fault_allocator_t;
tpu_allocator_t tpu_fault_allocator(tpu_fault_allocator_t* state);

/* ----------------------------------------------------------------- misc */

#define TPU_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TPU_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TPU_MAX(a, b) ((a) > (b) ? (a) : (b))

static inline uint64_t tpu_align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

/* Checked arithmetic for sizes derived from user shapes. */
static inline bool tpu_mul_overflow_i64(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
static inline bool tpu_add_overflow_i64(int64_t a, int64_t b, int64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

/* Monotonic clock in nanoseconds. */
uint64_t tpu_now_ns(void);

/* 128-bit structural hash (used by fingerprints). */
typedef struct tpu_hash128_s {
  uint64_t lo, hi;
} tpu_hash128_t;

typedef struct tpu_hasher_s {
  uint64_t a, b;
  uint64_t n;
} tpu_hasher_t;

void tpu_hasher_init(tpu_hasher_t* h, uint64_t seed);
void tpu_hasher_add_bytes(tpu_hasher_t* h, const void* data, size_t n);
void tpu_hasher_add_u64(tpu_hasher_t* h, uint64_t v);
tpu_hash128_t tpu_hasher_finish(const tpu_hasher_t* h);

/* Run-time CPU features. */
typedef struct tpu_cpu_features_s {
  bool avx2, fma, avx512f, avx512bw, avx512vl, avx512_bf16;
} tpu_cpu_features_t;
tpu_cpu_features_t tpu_cpu_features(void);

/* Floating-point environment for kernels: subnormal inputs and results are
 * flushed to zero while kernels run (as on a TPU). tpu_fpenv_enter returns the
 * previous state, tpu_fpenv_leave restores it. On architectures without
 * flush-to-zero control both are no-ops and tpu_fpenv_flushes() is false. */
typedef struct tpu_fpenv_s {
  uint64_t saved;
} tpu_fpenv_t;
tpu_fpenv_t tpu_fpenv_enter(void);
void tpu_fpenv_leave(tpu_fpenv_t env);
bool tpu_fpenv_flushes(void);

#ifdef __cplusplus
}
#endif

#endif /* TPU_BASE_H_ */

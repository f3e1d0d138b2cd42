/* A tiny dependency-free test harness (one binary per test file).
 *
 *   TEST(name) { CHECK(x); CHECK_EQ(a, b); CHECK_OK(status); }
 *   int main(void) { RUN(name); ...; return harness_report(); }
 *
 * A failing CHECK prints file, line and the expression and the test goes on;
 * the binary exits non-zero if any check failed. */
#ifndef TPU_TEST_HARNESS_H_
#define TPU_TEST_HARNESS_H_

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/base.h"

static int harness_checks_ = 0;
static int harness_failures_ = 0;
static int harness_tests_ = 0;
static const char* harness_current_ = "";

#define TEST(name) static void name(void)

#define CHECK(x)                                                         \
  do {                                                                   \
    harness_checks_++;                                                   \
    if (!(x)) {                                                          \
      harness_failures_++;                                               \
      fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__, __LINE__, \
              harness_current_, #x);                                     \
    }                                                                    \
  } while (0)

#define CHECK_EQ(a, b)                                                    \
  do {                                                                    \
    long long ha_ = (long long)(a), hb_ = (long long)(b);                 \
    harness_checks_++;                                                    \
    if (ha_ != hb_) {                                                     \
      harness_failures_++;                                                \
      fprintf(stderr, "%s:%d: %s: CHECK_EQ(%s, %s) failed: %lld != %lld\n", \
              __FILE__, __LINE__, harness_current_, #a, #b, ha_, hb_);    \
    }                                                                     \
  } while (0)

#define CHECK_OK(expr)                                                    \
  do {                                                                    \
    tpu_status_t hs_ = (expr);                                            \
    harness_checks_++;                                                    \
    if (hs_) {                                                            \
      harness_failures_++;                                                \
      fprintf(stderr, "%s:%d: %s: %s failed: %s: %s\n", __FILE__, __LINE__, \
              harness_current_, #expr,                                    \
              tpu_status_code_name(tpu_status_code(hs_)),                 \
              tpu_status_message(hs_));                                   \
      tpu_status_free(hs_);                                               \
    }                                                                     \
  } while (0)

/* Checks that expr fails with the given code; frees the status. */
#define CHECK_CODE(expr, code)                                               \
  do {                                                                       \
    tpu_status_t hs_ = (expr);                                               \
    harness_checks_++;                                                       \
    if (tpu_status_code(hs_) != TPU_STATUS_##code) {                         \
      harness_failures_++;                                                   \
      fprintf(stderr, "%s:%d: %s: %s gave %s (%s), expected %s\n", __FILE__, \
              __LINE__, harness_current_, #expr,                             \
              tpu_status_code_name(tpu_status_code(hs_)),                    \
              tpu_status_message(hs_), #code);                               \
    }                                                                        \
    tpu_status_free(hs_);                                                    \
  } while (0)

/* Checks that a status message contains a substring (status kept). */
#define CHECK_MSG_HAS(status, text)                                        \
  do {                                                                     \
    harness_checks_++;                                                     \
    if (!strstr(tpu_status_message(status), (text))) {                     \
      harness_failures_++;                                                 \
      fprintf(stderr, "%s:%d: %s: message '%s' lacks '%s'\n", __FILE__,    \
              __LINE__, harness_current_, tpu_status_message(status), (text)); \
    }                                                                      \
  } while (0)

#define RUN(name)                            \
  do {                                       \
    harness_current_ = #name;                \
    harness_tests_++;                        \
    int before_ = harness_failures_;         \
    name();                                  \
    fprintf(stderr, "%s %s\n",               \
            harness_failures_ == before_ ? "  ok  " : "  FAIL", #name); \
  } while (0)

static inline int harness_report(void) {
  fprintf(stderr, "%d tests, %d checks, %d failures\n", harness_tests_,
          harness_checks_, harness_failures_);
  return harness_failures_ ? 1 : 0;
}

#endif

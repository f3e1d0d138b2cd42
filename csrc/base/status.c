/* Status objects: code + message + origin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpu/base.h"

struct tpu_status_s {
  tpu_status_code_t code;
  int line;
  const char* file;
  char* message; /* heap, NUL-terminated */
  bool is_static;
};

static struct tpu_status_s tpu_status_oom_ = {
    TPU_STATUS_RESOURCE_EXHAUSTED, 0, __FILE__,
    (char*)"host out of memory while reporting an error", true};

volatile uint64_t tpu_invariant_surprises = 0;

static const char* const kCodeNames[TPU_STATUS_COUNT] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};
_Static_assert(TPU_ARRAY_SIZE(kCodeNames) == TPU_STATUS_COUNT,
               "status code table out of date");

const char* tpu_status_code_name(tpu_status_code_t code) {
  if ((unsigned)code >= TPU_STATUS_COUNT) return "UNKNOWN";
  return kCodeNames[code];
}

tpu_status_t tpu_status_makev(tpu_status_code_t code, const char* file,
                              int line, const char* fmt, va_list ap) {
  if (code == TPU_STATUS_OK || (unsigned)code >= TPU_STATUS_COUNT)
    code = TPU_STATUS_UNKNOWN;
  struct tpu_status_s* s = malloc(sizeof(*s));
  if (!s) return &tpu_status_oom_;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  s->message = malloc((size_t)n + 1);
  if (!s->message) {
    free(s);
    return &tpu_status_oom_;
  }
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  s->code = code;
  s->file = file;
  s->line = line;
  s->is_static = false;
  return s;
}

tpu_status_t tpu_status_make(tpu_status_code_t code, const char* file,
                             int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tpu_status_t s = tpu_status_makev(code, file, line, fmt, ap);
  va_end(ap);
  return s;
}

tpu_status_t tpu_status_annotate(tpu_status_t status, const char* fmt, ...) {
  if (!status || status->is_static) return status;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  if (n < 0) return status;
  size_t plen = strlen(prefix), mlen = strlen(status->message);
  char* m = malloc(plen + 2 + mlen + 1);
  if (!m) return status;
  memcpy(m, prefix, plen);
  memcpy(m + plen, ": ", 2);
  memcpy(m + plen + 2, status->message, mlen + 1);
  free(status->message);
  status->message = m;
  return status;
}

tpu_status_code_t tpu_status_code(tpu_status_t s) {
  return s ? s->code : TPU_STATUS_OK;
}
const char* tpu_status_message(tpu_status_t s) { return s ? s->message : ""; }
const char* tpu_status_file(tpu_status_t s) { return s ? s->file : ""; }
int tpu_status_line(tpu_status_t s) { return s ? s->line : 0; }

void tpu_status_free(tpu_status_t s) {
  if (!s || s->is_static) return;
  free(s->message);
  free(s);
}

tpu_status_code_t tpu_status_consume(tpu_status_t s) {
  tpu_status_code_t c = tpu_status_code(s);
  tpu_status_free(s);
  return c;
}

void tpu_assert_fail(const char* expr, const char* file, int line) {
  fprintf(stderr, "torchtpu internal invariant failed: %s at %s:%d\n", expr,
          file, line);
  fflush(stderr);
  abort();
}

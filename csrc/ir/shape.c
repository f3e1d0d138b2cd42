/* Shapes. */
#include <stdio.h>
#include <string.h>

#include "tpu/ir.h"

int64_t tpu_shape_numel(const tpu_shape_t* s) {
  int64_t n = 1;
  for (int32_t i = 0; i < s->rank; i++)
    if (tpu_mul_overflow_i64(n, s->dims[i], &n)) return -1;
  return n;
}

bool tpu_shape_equal(const tpu_shape_t* a, const tpu_shape_t* b) {
  if (a->rank != b->rank) return false;
  for (int32_t i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

tpu_status_t tpu_shape_make(int32_t rank, const int64_t* dims,
                            tpu_shape_t* out) {
  memset(out, 0, sizeof(*out));
  if (rank < 0 || rank > TPU_MAX_RANK)
    return TPU_STATUS(INVALID_ARGUMENT,
                      "tensors of rank %d are not supported on tpu (maximum "
                      "rank is %d)",
                      rank, TPU_MAX_RANK);
  out->rank = rank;
  for (int32_t i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return TPU_STATUS(INVALID_ARGUMENT, "negative dimension %lld at index %d",
                        (long long)dims[i], i);
    out->dims[i] = dims[i];
  }
  if (tpu_shape_numel(out) < 0)
    return TPU_STATUS(INVALID_ARGUMENT, "shape has more than 2^63 elements");
  return NULL;
}

void tpu_shape_format(const tpu_shape_t* s, char* buf, size_t n) {
  if (n == 0) return;
  size_t used = 0;
  buf[0] = 0;
  used += (size_t)snprintf(buf + used, n - used, "[");
  for (int32_t i = 0; i < s->rank && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld",
                             (long long)s->dims[i]);
  if (used < n) snprintf(buf + used, n - used, "]");
}

void tpu_shape_contiguous_strides(const tpu_shape_t* s, int64_t* strides) {
  int64_t st = 1;
  for (int32_t i = s->rank - 1; i >= 0; i--) {
    strides[i] = st;
    st *= s->dims[i] > 0 ? s->dims[i] : 1;
  }
}

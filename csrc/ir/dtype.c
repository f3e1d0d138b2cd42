/* Element type table and half-precision conversions. */
#include <string.h>

#include "tpu/dtype.h"

/* DLPack codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLComplex 5,
 * kDLBool 6. */
static const tpu_dtype_info_t kDtypes[TPU_DTYPE_COUNT] = {
    [TPU_DTYPE_PRED] = {"i1", 1, TPU_DTYPE_KIND_BOOL, 32, true, 6, 8},
    [TPU_DTYPE_S8] = {"i8", 1, TPU_DTYPE_KIND_SINT, 32, true, 0, 8},
    [TPU_DTYPE_U8] = {"ui8", 1, TPU_DTYPE_KIND_UINT, 32, true, 1, 8},
    [TPU_DTYPE_S16] = {"i16", 2, TPU_DTYPE_KIND_SINT, 16, true, 0, 16},
    [TPU_DTYPE_U16] = {"ui16", 2, TPU_DTYPE_KIND_UINT, 16, true, 1, 16},
    [TPU_DTYPE_S32] = {"i32", 4, TPU_DTYPE_KIND_SINT, 8, true, 0, 32},
    [TPU_DTYPE_U32] = {"ui32", 4, TPU_DTYPE_KIND_UINT, 8, true, 1, 32},
    [TPU_DTYPE_S64] = {"i64", 8, TPU_DTYPE_KIND_SINT, 8, true, 0, 64},
    [TPU_DTYPE_U64] = {"ui64", 8, TPU_DTYPE_KIND_UINT, 8, true, 1, 64},
    [TPU_DTYPE_BF16] = {"bf16", 2, TPU_DTYPE_KIND_FLOAT, 16, true, 4, 16},
    [TPU_DTYPE_F16] = {"f16", 2, TPU_DTYPE_KIND_FLOAT, 16, true, 2, 16},
    [TPU_DTYPE_F32] = {"f32", 4, TPU_DTYPE_KIND_FLOAT, 8, true, 2, 32},
    [TPU_DTYPE_F64] = {"f64", 8, TPU_DTYPE_KIND_FLOAT, 8, false, 2, 64},
    [TPU_DTYPE_C64] = {"complex<f32>", 8, TPU_DTYPE_KIND_COMPLEX, 8, false, 5, 64},
    [TPU_DTYPE_C128] = {"complex<f64>", 16, TPU_DTYPE_KIND_COMPLEX, 8, false, 5, 128},
};

const tpu_dtype_info_t* tpu_dtype_info(tpu_dtype_t d) {
  TPU_ASSERT(tpu_dtype_valid((int32_t)d));
  return &kDtypes[d];
}

tpu_status_t tpu_dtype_parse(const char* name, size_t len, tpu_dtype_t* out) {
  for (int i = 0; i < TPU_DTYPE_COUNT; i++) {
    if (strlen(kDtypes[i].name) == len && memcmp(kDtypes[i].name, name, len) == 0) {
      *out = (tpu_dtype_t)i;
      return NULL;
    }
  }
  return TPU_STATUS(INVALID_ARGUMENT, "unknown element type '%.*s'", (int)len,
                    name);
}

/* IEEE half conversions written out bit by bit so every platform gets the
 * same answer (round to nearest even, subnormals kept, NaN stays NaN). */
uint16_t tpu_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflow */
  if (ax < 0x38800000u) { /* result is subnormal or zero */
    if (ax < 0x33000000u) return (uint16_t)sign; /* below half of min subnormal */
    uint32_t e = ax >> 23;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return (uint16_t)(sign | (r >> 13));
}

float tpu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    if (m == 0) {
      x = sign;
    } else { /* subnormal: normalise */
      int shift = 0;
      while (!(m & 0x400u)) {
        m <<= 1;
        shift++;
      }
      m &= 0x3ffu;
      x = sign | ((uint32_t)(113 - shift) << 23) | (m << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (m << 13);
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

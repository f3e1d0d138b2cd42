/* Element types. Names follow StableHLO element types. */
#ifndef TPU_DTYPE_H_
#define TPU_DTYPE_H_

#include "tpu/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_dtype_e {
  TPU_DTYPE_PRED = 0, /* bool, one byte */
  TPU_DTYPE_S8,
  TPU_DTYPE_U8,
  TPU_DTYPE_S16,
  TPU_DTYPE_U16,
  TPU_DTYPE_S32,
  TPU_DTYPE_U32,
  TPU_DTYPE_S64,
  TPU_DTYPE_U64,
  TPU_DTYPE_BF16,
  TPU_DTYPE_F16,
  TPU_DTYPE_F32,
  TPU_DTYPE_F64,
  TPU_DTYPE_C64,
  TPU_DTYPE_C128,
  TPU_DTYPE_COUNT
} tpu_dtype_t;

typedef enum tpu_dtype_kind_e {
  TPU_DTYPE_KIND_BOOL = 0,
  TPU_DTYPE_KIND_SINT,
  TPU_DTYPE_KIND_UINT,
  TPU_DTYPE_KIND_FLOAT,
  TPU_DTYPE_KIND_COMPLEX,
  TPU_DTYPE_KIND_COUNT
} tpu_dtype_kind_t;

typedef struct tpu_dtype_info_s {
  const char* name;      /* StableHLO spelling: "f32", "bf16", "i1", ... */
  int32_t size;          /* bytes per element */
  tpu_dtype_kind_t kind;
  int32_t tile_rows;     /* TPU second-minor tile: 8 (32-bit), 16, 32 */
  bool tpu_native;       /* false for f64, c64, c128: emulated on a TPU */
  uint8_t dlpack_code;   /* DLPack type code */
  uint8_t dlpack_bits;
} tpu_dtype_info_t;

/* Lends a pointer into a static table; dtype must be valid. */
const tpu_dtype_info_t* tpu_dtype_info(tpu_dtype_t dtype);
static inline bool tpu_dtype_valid(int32_t d) {
  return d >= 0 && d < (int32_t)TPU_DTYPE_COUNT;
}
static inline int32_t tpu_dtype_size(tpu_dtype_t d) {
  return tpu_dtype_info(d)->size;
}
static inline bool tpu_dtype_is_float(tpu_dtype_t d) {
  return tpu_dtype_info(d)->kind == TPU_DTYPE_KIND_FLOAT;
}
static inline bool tpu_dtype_is_int(tpu_dtype_t d) {
  tpu_dtype_kind_t k = tpu_dtype_info(d)->kind;
  return k == TPU_DTYPE_KIND_SINT || k == TPU_DTYPE_KIND_UINT;
}
/* Parses a StableHLO name; returns INVALID_ARGUMENT for unknown names. */
TPU_MUST_USE tpu_status_t tpu_dtype_parse(const char* name, size_t len,
                                          tpu_dtype_t* out);

/* bfloat16 / float16 conversions (round to nearest even; NaN preserved). */
static inline uint16_t tpu_f32_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float tpu_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
/* Rounds a float to the nearest bfloat16 value, returned as float. */
static inline float tpu_round_bf16(float f) {
  return tpu_bf16_to_f32(tpu_f32_to_bf16(f));
}
uint16_t tpu_f32_to_f16(float f);
float tpu_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif

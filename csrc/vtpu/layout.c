/* How many bytes of HBM a dense array occupies once tiled the TPU way. */
#include "tpu/vtpu.h"

/* XLA's TPU layouts tile the two minor dimensions; the lane (minor) tile is
 * always 128 wide and the sublane tile depends on how many elements pack into
 * a 32-bit word (dtype info's tile_rows). A rank-1 array is laid out as one
 * (8,128) tile row of 32-bit words, i.e. in multiples of 1024 elements. HBM is
 * handed out in 512-byte granules. */
enum {
  kLaneTile = 128,
  kRank1Tile = 1024,
  kGranule = 512,
};

/* Rounds x up to a multiple of m; false on overflow. */
static bool pad_up(int64_t x, int64_t m, int64_t* out) {
  int64_t t;
  if (tpu_add_overflow_i64(x, m - 1, &t)) return false;
  *out = t / m * m;
  return true;
}

int64_t tpu_tpu_padded_bytes(tpu_dtype_t dtype, const tpu_shape_t* shape) {
  if (!shape || !tpu_dtype_valid((int32_t)dtype)) return -1;
  if (shape->rank < 0 || shape->rank > TPU_MAX_RANK) return -1;
  const tpu_dtype_info_t* info = tpu_dtype_info(dtype);
  int32_t rank = shape->rank;

  for (int32_t i = 0; i < rank; i++) {
    if (shape->dims[i] < 0) return -1;
    if (shape->dims[i] == 0) return 0;
  }
  if (rank == 0) return kGranule;

  int64_t elems;
  if (rank == 1) {
    if (!pad_up(shape->dims[0], kRank1Tile, &elems)) return -1;
  } else {
    int64_t rows, cols;
    if (!pad_up(shape->dims[rank - 2], info->tile_rows, &rows)) return -1;
    if (!pad_up(shape->dims[rank - 1], kLaneTile, &cols)) return -1;
    if (tpu_mul_overflow_i64(rows, cols, &elems)) return -1;
    for (int32_t i = 0; i < rank - 2; i++)
      if (tpu_mul_overflow_i64(elems, shape->dims[i], &elems)) return -1;
  }

  int64_t bytes;
  if (tpu_mul_overflow_i64(elems, info->size, &bytes)) return -1;
  if (!pad_up(bytes, kGranule, &bytes)) return -1;
  return bytes;
}

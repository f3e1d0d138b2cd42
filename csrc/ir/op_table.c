/* The op table: one row per op kind (name, arity, class, type rule). */
#include <string.h>

#include "ir_impl.h"

static const tpu_op_info_t kOps[] = {
#define TPU_OP_ROW_(e, n, lo, hi, c) {n, lo, hi, TPU_OP_CLASS_##c},
    TPU_OP_LIST(TPU_OP_ROW_)
#undef TPU_OP_ROW_
};
_Static_assert(TPU_ARRAY_SIZE(kOps) == TPU_OP_COUNT,
               "every IR op needs exactly one op-table row");

const tpu_op_info_t* tpu_op_info(tpu_opcode_t op) {
  TPU_ASSERT((unsigned)op < TPU_OP_COUNT);
  return &kOps[op];
}

tpu_status_t tpu_op_from_name(const char* name, size_t len, tpu_opcode_t* out) {
  for (int i = 0; i < TPU_OP_COUNT; i++) {
    if (strlen(kOps[i].name) == len && memcmp(kOps[i].name, name, len) == 0) {
      *out = (tpu_opcode_t)i;
      return NULL;
    }
  }
  return TPU_STATUS(INVALID_ARGUMENT, "unknown op '%.*s'", (int)len, name);
}

static const char* const kCmpNames[TPU_CMP_COUNT] = {"EQ", "NE", "LT",
                                                     "LE", "GT", "GE"};
static const char* const kReduceNames[TPU_REDUCE_COUNT] = {
    "sum", "prod", "max", "min", "and", "or", "argmax", "argmin"};
static const char* const kPrecisionNames[TPU_PRECISION_COUNT] = {
    "DEFAULT", "HIGH", "HIGHEST"};
static const char* const kRngNames[TPU_RNG_COUNT] = {"uniform", "normal",
                                                     "bits"};

const char* tpu_cmp_name(tpu_cmp_t c) {
  return (unsigned)c < TPU_CMP_COUNT ? kCmpNames[c] : "?";
}
const char* tpu_reduce_kind_name(tpu_reduce_kind_t k) {
  return (unsigned)k < TPU_REDUCE_COUNT ? kReduceNames[k] : "?";
}
const char* tpu_precision_name(tpu_precision_t p) {
  return (unsigned)p < TPU_PRECISION_COUNT ? kPrecisionNames[p] : "?";
}
const char* tpu_rng_dist_name(tpu_rng_dist_t d) {
  return (unsigned)d < TPU_RNG_COUNT ? kRngNames[d] : "?";
}

tpu_status_t tpu_op_check_kind(tpu_opcode_t op, int32_t kind) {
  int32_t limit = 1;
  switch (op) {
    case TPU_OP_COMPARE: limit = TPU_CMP_COUNT; break;
    case TPU_OP_REDUCE: limit = TPU_REDUCE_COUNT; break;
    case TPU_OP_DOT_GENERAL: limit = TPU_PRECISION_COUNT; break;
    case TPU_OP_RNG: limit = TPU_RNG_COUNT; break;
    case TPU_OP_PARAMETER: limit = TPU_PARAM_COUNT; break;
    case TPU_OP_CUMULATIVE:
    case TPU_OP_REDUCE_WINDOW: limit = TPU_REDUCE_COUNT; break;
    case TPU_OP_SCATTER: limit = TPU_SCATTER_COUNT; break;
    case TPU_OP_SORT: limit = 2; break;
    case TPU_OP_CONVOLUTION: limit = TPU_PRECISION_COUNT; break;
    default: limit = 1; break;
  }
  if (kind < 0 || kind >= limit)
    return TPU_STATUS(INVALID_ARGUMENT, "%s: attribute kind %d out of range",
                      kOps[op].name, kind);
  return NULL;
}

/* ------------------------------------------------------------ helpers */

#define NODE(v) tpu_node_(g, (v))

static tpu_status_t shape_mismatch(tpu_opcode_t op, const tpu_shape_t* a,
                                   const tpu_shape_t* b) {
  char sa[160], sb[160];
  tpu_shape_format(a, sa, sizeof sa);
  tpu_shape_format(b, sb, sizeof sb);
  return TPU_STATUS(INVALID_ARGUMENT,
                    "%s: operand shapes %s and %s must be equal",
                    kOps[op].name, sa, sb);
}

static tpu_status_t dtype_mismatch(tpu_opcode_t op, tpu_dtype_t a,
                                   tpu_dtype_t b) {
  return TPU_STATUS(INVALID_ARGUMENT,
                    "%s: operand element types %s and %s must be equal",
                    kOps[op].name, tpu_dtype_info(a)->name,
                    tpu_dtype_info(b)->name);
}

/* Accepts an explicit result when asked, otherwise writes the inferred one. */
static tpu_status_t set_or_check(tpu_opcode_t op, bool explicit_type,
                                 tpu_dtype_t want_dtype,
                                 const tpu_shape_t* want_shape,
                                 tpu_dtype_t* dtype, tpu_shape_t* shape) {
  if (explicit_type) {
    if (*dtype != want_dtype)
      return TPU_STATUS(INVALID_ARGUMENT,
                        "%s: result element type %s, expected %s",
                        kOps[op].name, tpu_dtype_info(*dtype)->name,
                        tpu_dtype_info(want_dtype)->name);
    if (!tpu_shape_equal(shape, want_shape)) {
      char a[160], b[160];
      tpu_shape_format(shape, a, sizeof a);
      tpu_shape_format(want_shape, b, sizeof b);
      return TPU_STATUS(INVALID_ARGUMENT, "%s: result shape %s, expected %s",
                        kOps[op].name, a, b);
    }
    return NULL;
  }
  *dtype = want_dtype;
  *shape = *want_shape;
  return NULL;
}

static bool is_float_or_complex(tpu_dtype_t d) {
  tpu_dtype_kind_t k = tpu_dtype_info(d)->kind;
  return k == TPU_DTYPE_KIND_FLOAT || k == TPU_DTYPE_KIND_COMPLEX;
}

/* ------------------------------------------------------ type rules */

static tpu_status_t infer_leaf(const tpu_graph_t* g, tpu_opcode_t op,
                               const tpu_value_t* x, int32_t n,
                               const tpu_attrs_t* at, bool ex,
                               tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)g; (void)x; (void)n;
  if (!ex)
    return TPU_STATUS(INVALID_ARGUMENT, "%s needs an explicit result type",
                      kOps[op].name);
  if (op == TPU_OP_IOTA) {
    if (sh->rank == 0 || at->n_ints != 1 || at->ints[0] < 0 ||
        at->ints[0] >= sh->rank)
      return TPU_STATUS(INVALID_ARGUMENT,
                        "iota: iota_dimension must name a dimension of the "
                        "result (rank %d)", sh->rank);
    if (tpu_dtype_info(*dt)->kind == TPU_DTYPE_KIND_BOOL ||
        tpu_dtype_info(*dt)->kind == TPU_DTYPE_KIND_COMPLEX)
      return TPU_STATUS(INVALID_ARGUMENT, "iota: element type %s unsupported",
                        tpu_dtype_info(*dt)->name);
  }
  return NULL;
}

static tpu_status_t infer_rng(const tpu_graph_t* g, tpu_opcode_t op,
                              const tpu_value_t* x, int32_t n,
                              const tpu_attrs_t* at, bool ex, tpu_dtype_t* dt,
                              tpu_shape_t* sh) {
  (void)n;
  if (!ex) return TPU_STATUS(INVALID_ARGUMENT, "rng needs an explicit result type");
  for (int i = 0; i < 2; i++) {
    if (NODE(x[i])->dtype != TPU_DTYPE_U64 || NODE(x[i])->shape.rank != 0)
      return TPU_STATUS(INVALID_ARGUMENT,
                        "rng: seed and offset must be ui64 scalars");
  }
  if (at->kind == TPU_RNG_BITS) {
    if (*dt != TPU_DTYPE_U32 && *dt != TPU_DTYPE_U64)
      return TPU_STATUS(INVALID_ARGUMENT, "rng bits: result must be ui32/ui64");
  } else if (!tpu_dtype_is_float(*dt)) {
    return TPU_STATUS(INVALID_ARGUMENT, "%s: %s distribution needs a float result",
                      kOps[op].name, tpu_rng_dist_name(at->kind));
  }
  (void)sh;
  return NULL;
}

static tpu_status_t infer_unary(const tpu_graph_t* g, tpu_opcode_t op,
                                const tpu_value_t* x, int32_t n,
                                const tpu_attrs_t* at, bool ex,
                                tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)n;
  const tpu_node_t* a = NODE(x[0]);
  tpu_dtype_t out = a->dtype;
  tpu_dtype_kind_t k = tpu_dtype_info(a->dtype)->kind;
  switch (op) {
    case TPU_OP_CONVERT:
      out = at->dtype;
      if (!tpu_dtype_valid(out))
        return TPU_STATUS(INVALID_ARGUMENT, "convert: invalid target type");
      break;
    case TPU_OP_IS_FINITE:
      if (k != TPU_DTYPE_KIND_FLOAT)
        return TPU_STATUS(INVALID_ARGUMENT, "is_finite: operand must be float, got %s",
                          tpu_dtype_info(a->dtype)->name);
      out = TPU_DTYPE_PRED;
      break;
    case TPU_OP_NOT:
      if (k == TPU_DTYPE_KIND_FLOAT || k == TPU_DTYPE_KIND_COMPLEX)
        return TPU_STATUS(INVALID_ARGUMENT, "not: operand must be bool or integer, got %s",
                          tpu_dtype_info(a->dtype)->name);
      break;
    case TPU_OP_NEGATE:
    case TPU_OP_ABS:
    case TPU_OP_SIGN:
      if (k == TPU_DTYPE_KIND_BOOL)
        return TPU_STATUS(INVALID_ARGUMENT, "%s: operand must be numeric, got i1",
                          kOps[op].name);
      break;
    case TPU_OP_POPCNT:
      if (k != TPU_DTYPE_KIND_SINT && k != TPU_DTYPE_KIND_UINT)
        return TPU_STATUS(INVALID_ARGUMENT, "popcnt: operand must be integer, got %s",
                          tpu_dtype_info(a->dtype)->name);
      break;
    case TPU_OP_FLOOR:
    case TPU_OP_CEIL:
    case TPU_OP_ROUND_AFZ:
    case TPU_OP_ROUND_EVEN:
      if (k != TPU_DTYPE_KIND_FLOAT)
        return TPU_STATUS(INVALID_ARGUMENT, "%s: operand must be float, got %s",
                          kOps[op].name, tpu_dtype_info(a->dtype)->name);
      break;
    default: /* transcendental */
      if (!is_float_or_complex(a->dtype))
        return TPU_STATUS(INVALID_ARGUMENT, "%s: operand must be float, got %s",
                          kOps[op].name, tpu_dtype_info(a->dtype)->name);
      break;
  }
  return set_or_check(op, ex, out, &a->shape, dt, sh);
}

static tpu_status_t infer_binary(const tpu_graph_t* g, tpu_opcode_t op,
                                 const tpu_value_t* x, int32_t n,
                                 const tpu_attrs_t* at, bool ex,
                                 tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)n; (void)at;
  const tpu_node_t* a = NODE(x[0]);
  const tpu_node_t* b = NODE(x[1]);
  if (!tpu_shape_equal(&a->shape, &b->shape))
    return shape_mismatch(op, &a->shape, &b->shape);
  if (a->dtype != b->dtype) return dtype_mismatch(op, a->dtype, b->dtype);
  tpu_dtype_kind_t k = tpu_dtype_info(a->dtype)->kind;
  tpu_dtype_t out = a->dtype;
  switch (op) {
    case TPU_OP_COMPARE: out = TPU_DTYPE_PRED; break;
    case TPU_OP_AND:
    case TPU_OP_OR:
    case TPU_OP_XOR:
      if (k == TPU_DTYPE_KIND_FLOAT || k == TPU_DTYPE_KIND_COMPLEX)
        return TPU_STATUS(INVALID_ARGUMENT, "%s: operands must be bool or integer, got %s",
                          kOps[op].name, tpu_dtype_info(a->dtype)->name);
      break;
    case TPU_OP_SHIFT_LEFT:
    case TPU_OP_SHIFT_RIGHT_ARITHMETIC:
    case TPU_OP_SHIFT_RIGHT_LOGICAL:
      if (k != TPU_DTYPE_KIND_SINT && k != TPU_DTYPE_KIND_UINT)
        return TPU_STATUS(INVALID_ARGUMENT, "%s: operands must be integer, got %s",
                          kOps[op].name, tpu_dtype_info(a->dtype)->name);
      break;
    case TPU_OP_ATAN2:
      if (k != TPU_DTYPE_KIND_FLOAT)
        return TPU_STATUS(INVALID_ARGUMENT, "atan2: operands must be float, got %s",
                          tpu_dtype_info(a->dtype)->name);
      break;
    default:
      if (k == TPU_DTYPE_KIND_BOOL && op != TPU_OP_MAXIMUM && op != TPU_OP_MINIMUM)
        return TPU_STATUS(INVALID_ARGUMENT, "%s: operands must be numeric, got i1",
                          kOps[op].name);
      break;
  }
  return set_or_check(op, ex, out, &a->shape, dt, sh);
}

static tpu_status_t infer_ternary(const tpu_graph_t* g, tpu_opcode_t op,
                                  const tpu_value_t* x, int32_t n,
                                  const tpu_attrs_t* at, bool ex,
                                  tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)n; (void)at;
  const tpu_node_t* a = NODE(x[0]);
  const tpu_node_t* b = NODE(x[1]);
  const tpu_node_t* c = NODE(x[2]);
  if (op == TPU_OP_SELECT) {
    if (a->dtype != TPU_DTYPE_PRED)
      return TPU_STATUS(INVALID_ARGUMENT, "select: predicate must be i1, got %s",
                        tpu_dtype_info(a->dtype)->name);
    if (!tpu_shape_equal(&a->shape, &b->shape)) return shape_mismatch(op, &a->shape, &b->shape);
    if (!tpu_shape_equal(&b->shape, &c->shape)) return shape_mismatch(op, &b->shape, &c->shape);
    if (b->dtype != c->dtype) return dtype_mismatch(op, b->dtype, c->dtype);
    return set_or_check(op, ex, b->dtype, &b->shape, dt, sh);
  }
  /* clamp(min, x, max): min/max are scalars or x-shaped */
  if (a->dtype != b->dtype) return dtype_mismatch(op, a->dtype, b->dtype);
  if (c->dtype != b->dtype) return dtype_mismatch(op, c->dtype, b->dtype);
  if (a->shape.rank != 0 && !tpu_shape_equal(&a->shape, &b->shape))
    return shape_mismatch(op, &a->shape, &b->shape);
  if (c->shape.rank != 0 && !tpu_shape_equal(&c->shape, &b->shape))
    return shape_mismatch(op, &c->shape, &b->shape);
  return set_or_check(op, ex, b->dtype, &b->shape, dt, sh);
}

static tpu_status_t infer_shape_op(const tpu_graph_t* g, tpu_opcode_t op,
                                   const tpu_value_t* x, int32_t n,
                                   const tpu_attrs_t* at, bool ex,
                                   tpu_dtype_t* dt, tpu_shape_t* sh) {
  const tpu_node_t* a = NODE(x[0]);
  char sa[160];
  tpu_shape_format(&a->shape, sa, sizeof sa);
  switch (op) {
    case TPU_OP_BROADCAST_IN_DIM: {
      if (!ex)
        return TPU_STATUS(INVALID_ARGUMENT, "broadcast_in_dim needs a result shape");
      if (at->n_ints != a->shape.rank)
        return TPU_STATUS(INVALID_ARGUMENT,
                          "broadcast_in_dim: %d broadcast_dimensions for an operand of shape %s",
                          at->n_ints, sa);
      for (int32_t i = 0; i < at->n_ints; i++) {
        int64_t d = at->ints[i];
        if (d < 0 || d >= sh->rank || (i > 0 && d <= at->ints[i - 1]))
          return TPU_STATUS(INVALID_ARGUMENT,
                            "broadcast_in_dim: broadcast_dimensions must be increasing dims of the result");
        if (a->shape.dims[i] != 1 && a->shape.dims[i] != sh->dims[d]) {
          char sr[160];
          tpu_shape_format(sh, sr, sizeof sr);
          return TPU_STATUS(INVALID_ARGUMENT,
                            "broadcast_in_dim: operand %s cannot broadcast to %s",
                            sa, sr);
        }
      }
      return set_or_check(op, true, a->dtype, sh, dt, sh);
    }
    case TPU_OP_RESHAPE: {
      if (!ex) return TPU_STATUS(INVALID_ARGUMENT, "reshape needs a result shape");
      if (tpu_shape_numel(sh) != tpu_shape_numel(&a->shape)) {
        char sr[160];
        tpu_shape_format(sh, sr, sizeof sr);
        return TPU_STATUS(INVALID_ARGUMENT,
                          "reshape: cannot reshape %s into %s", sa, sr);
      }
      return set_or_check(op, true, a->dtype, sh, dt, sh);
    }
    case TPU_OP_TRANSPOSE: {
      if (at->n_ints != a->shape.rank)
        return TPU_STATUS(INVALID_ARGUMENT,
                          "transpose: permutation of length %d for shape %s",
                          at->n_ints, sa);
      tpu_shape_t out = {.rank = a->shape.rank};
      uint32_t seen = 0;
      for (int32_t i = 0; i < at->n_ints; i++) {
        int64_t p = at->ints[i];
        if (p < 0 || p >= a->shape.rank || (seen >> p) & 1)
          return TPU_STATUS(INVALID_ARGUMENT, "transpose: not a permutation");
        seen |= 1u << p;
        out.dims[i] = a->shape.dims[p];
      }
      return set_or_check(op, ex, a->dtype, &out, dt, sh);
    }
    case TPU_OP_SLICE: {
      int32_t r = a->shape.rank;
      if (at->n_ints != 3 * r)
        return TPU_STATUS(INVALID_ARGUMENT, "slice: needs start, limit, stride per dim");
      tpu_shape_t out = {.rank = r};
      for (int32_t i = 0; i < r; i++) {
        int64_t s = at->ints[i], l = at->ints[r + i], st = at->ints[2 * r + i];
        if (s < 0 || l < s || l > a->shape.dims[i] || st < 1)
          return TPU_STATUS(INVALID_ARGUMENT,
                            "slice: bounds [%lld:%lld:%lld] invalid for dim %d of %s",
                            (long long)s, (long long)l, (long long)st, i, sa);
        out.dims[i] = (l - s + st - 1) / st;
      }
      return set_or_check(op, ex, a->dtype, &out, dt, sh);
    }
    case TPU_OP_CONCATENATE: {
      if (at->n_ints != 1 || at->ints[0] < 0 || at->ints[0] >= a->shape.rank)
        return TPU_STATUS(INVALID_ARGUMENT, "concatenate: bad dimension for shape %s", sa);
      int32_t d = (int32_t)at->ints[0];
      tpu_shape_t out = a->shape;
      for (int32_t i = 1; i < n; i++) {
        const tpu_node_t* b = NODE(x[i]);
        if (b->dtype != a->dtype) return dtype_mismatch(op, a->dtype, b->dtype);
        bool ok = b->shape.rank == a->shape.rank;
        for (int32_t j = 0; ok && j < a->shape.rank; j++)
          if (j != d && b->shape.dims[j] != a->shape.dims[j]) ok = false;
        if (!ok) return shape_mismatch(op, &a->shape, &b->shape);
        out.dims[d] += b->shape.dims[d];
      }
      return set_or_check(op, ex, a->dtype, &out, dt, sh);
    }
    default:
      return TPU_STATUS(INTERNAL, "no shape rule for %s", kOps[op].name);
  }
}

static tpu_status_t infer_reduce(const tpu_graph_t* g, tpu_opcode_t op,
                                 const tpu_value_t* x, int32_t n,
                                 const tpu_attrs_t* at, bool ex,
                                 tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)n;
  const tpu_node_t* a = NODE(x[0]);
  uint32_t mask = 0;
  for (int32_t i = 0; i < at->n_ints; i++) {
    int64_t d = at->ints[i];
    if (d < 0 || d >= a->shape.rank || (mask >> d) & 1)
      return TPU_STATUS(INVALID_ARGUMENT,
                        "reduce: dimensions must be distinct dims of the operand (rank %d)",
                        a->shape.rank);
    mask |= 1u << d;
  }
  tpu_dtype_kind_t k = tpu_dtype_info(a->dtype)->kind;
  if ((at->kind == TPU_REDUCE_AND || at->kind == TPU_REDUCE_OR) &&
      k != TPU_DTYPE_KIND_BOOL)
    return TPU_STATUS(INVALID_ARGUMENT, "reduce %s: operand must be i1",
                      tpu_reduce_kind_name(at->kind));
  tpu_shape_t out = {.rank = 0};
  for (int32_t i = 0; i < a->shape.rank; i++)
    if (!((mask >> i) & 1)) out.dims[out.rank++] = a->shape.dims[i];
  bool arg = at->kind == TPU_REDUCE_ARGMAX || at->kind == TPU_REDUCE_ARGMIN;
  if (arg && k == TPU_DTYPE_KIND_COMPLEX)
    return TPU_STATUS(INVALID_ARGUMENT, "reduce %s: complex operands unsupported",
                      tpu_reduce_kind_name(at->kind));
  return set_or_check(op, ex, arg ? TPU_DTYPE_S64 : a->dtype, &out, dt, sh);
}

static tpu_status_t infer_window(const tpu_graph_t* g, tpu_opcode_t op,
                                 const tpu_value_t* x, int32_t n,
                                 const tpu_attrs_t* at, bool ex,
                                 tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)n;
  const tpu_node_t* a = NODE(x[0]);
  int32_t r = a->shape.rank;
  char sa[160];
  tpu_shape_format(&a->shape, sa, sizeof sa);
  if (at->n_ints != 5 * r)
    return TPU_STATUS(INVALID_ARGUMENT,
                      "reduce_window: needs window, strides, padding low/high and "
                      "dilation for each of the %d dims of %s", r, sa);
  const int64_t *w = at->ints, *s = w + r, *lo = s + r, *hi = lo + r, *dl = hi + r;
  tpu_shape_t out = {.rank = r};
  for (int32_t d = 0; d < r; d++) {
    if (w[d] < 1 || s[d] < 1 || dl[d] < 1 || lo[d] < 0 || hi[d] < 0)
      return TPU_STATUS(INVALID_ARGUMENT, "reduce_window: bad window attributes for %s", sa);
    int64_t span = (w[d] - 1) * dl[d] + 1;
    int64_t padded = a->shape.dims[d] + lo[d] + hi[d];
    out.dims[d] = padded < span ? 0 : (padded - span) / s[d] + 1;
  }
  bool arg = at->kind == TPU_REDUCE_ARGMAX || at->kind == TPU_REDUCE_ARGMIN;
  if (at->kind == TPU_REDUCE_AND || at->kind == TPU_REDUCE_OR)
    return TPU_STATUS(INVALID_ARGUMENT, "reduce_window: and/or unsupported");
  return set_or_check(op, ex, arg ? TPU_DTYPE_S64 : a->dtype, &out, dt, sh);
}

/* pad, scatter, sort, cumulative, gather, reverse */
static tpu_status_t infer_array(const tpu_graph_t* g, tpu_opcode_t op,
                                const tpu_value_t* x, int32_t n,
                                const tpu_attrs_t* at, bool ex, tpu_dtype_t* dt,
                                tpu_shape_t* sh) {
  (void)n;
  const tpu_node_t* a = NODE(x[0]);
  int32_t r = a->shape.rank;
  char sa[160];
  tpu_shape_format(&a->shape, sa, sizeof sa);
  switch (op) {
    case TPU_OP_COPY:
      return set_or_check(op, ex, a->dtype, &a->shape, dt, sh);
    case TPU_OP_REVERSE: {
      for (int32_t i = 0; i < at->n_ints; i++)
        if (at->ints[i] < 0 || at->ints[i] >= r)
          return TPU_STATUS(INVALID_ARGUMENT, "reverse: dim %lld out of range for %s",
                            (long long)at->ints[i], sa);
      return set_or_check(op, ex, a->dtype, &a->shape, dt, sh);
    }
    case TPU_OP_PAD: {
      const tpu_node_t* v = NODE(x[1]);
      if (v->shape.rank != 0 || v->dtype != a->dtype)
        return TPU_STATUS(INVALID_ARGUMENT, "pad: padding value must be a %s scalar",
                          tpu_dtype_info(a->dtype)->name);
      if (at->n_ints != 3 * r)
        return TPU_STATUS(INVALID_ARGUMENT, "pad: needs low, high, interior per dim of %s", sa);
      tpu_shape_t out = {.rank = r};
      for (int32_t d = 0; d < r; d++) {
        int64_t lo = at->ints[d], hi = at->ints[r + d], in = at->ints[2 * r + d];
        if (in < 0)
          return TPU_STATUS(INVALID_ARGUMENT, "pad: negative interior padding");
        int64_t sz = a->shape.dims[d];
        int64_t full = sz == 0 ? 0 : sz + (sz - 1) * in;
        out.dims[d] = full + lo + hi;
        if (out.dims[d] < 0)
          return TPU_STATUS(INVALID_ARGUMENT, "pad: padding crops dim %d of %s below zero", d, sa);
      }
      return set_or_check(op, ex, a->dtype, &out, dt, sh);
    }
    case TPU_OP_GATHER:
    case TPU_OP_SCATTER: {
      const tpu_node_t* idx = NODE(x[1]);
      if (at->n_ints != 1 || at->ints[0] < 0 || at->ints[0] >= (r ? r : 1))
        return TPU_STATUS(INVALID_ARGUMENT, "%s: bad dim for %s", kOps[op].name, sa);
      tpu_dtype_kind_t ik = tpu_dtype_info(idx->dtype)->kind;
      if (ik != TPU_DTYPE_KIND_SINT && ik != TPU_DTYPE_KIND_UINT)
        return TPU_STATUS(INVALID_ARGUMENT, "%s: indices must be integers, got %s",
                          kOps[op].name, tpu_dtype_info(idx->dtype)->name);
      if (idx->shape.rank != r)
        return TPU_STATUS(INVALID_ARGUMENT,
                          "%s: indices must have the operand's rank (%d), got %d",
                          kOps[op].name, r, idx->shape.rank);
      int32_t dim = (int32_t)at->ints[0];
      for (int32_t d = 0; d < r; d++) {
        if (d != dim && idx->shape.dims[d] > a->shape.dims[d]) {
          char si[160];
          tpu_shape_format(&idx->shape, si, sizeof si);
          return TPU_STATUS(INVALID_ARGUMENT,
                            "%s: index shape %s exceeds operand %s outside dim %d",
                            kOps[op].name, si, sa, dim);
        }
      }
      if (op == TPU_OP_GATHER) return set_or_check(op, ex, a->dtype, &idx->shape, dt, sh);
      const tpu_node_t* up = NODE(x[2]);
      if (!tpu_shape_equal(&up->shape, &idx->shape)) return shape_mismatch(op, &up->shape, &idx->shape);
      if (up->dtype != a->dtype) return dtype_mismatch(op, a->dtype, up->dtype);
      return set_or_check(op, ex, a->dtype, &a->shape, dt, sh);
    }
    case TPU_OP_SORT:
    case TPU_OP_CUMULATIVE: {
      if (at->n_ints != 1 || at->ints[0] < 0 || at->ints[0] >= (r ? r : 1))
        return TPU_STATUS(INVALID_ARGUMENT, "%s: bad dim for %s", kOps[op].name, sa);
      if (op == TPU_OP_SORT) {
        if (tpu_dtype_info(a->dtype)->kind == TPU_DTYPE_KIND_COMPLEX)
          return TPU_STATUS(INVALID_ARGUMENT, "sort: complex operands unsupported");
        return set_or_check(op, ex, TPU_DTYPE_S64, &a->shape, dt, sh);
      }
      if (at->kind > TPU_REDUCE_MIN)
        return TPU_STATUS(INVALID_ARGUMENT, "cumulative: kind must be sum/prod/max/min");
      return set_or_check(op, ex, a->dtype, &a->shape, dt, sh);
    }
    default:
      return TPU_STATUS(INTERNAL, "no rule for %s", kOps[op].name);
  }
}

static tpu_status_t infer_conv(const tpu_graph_t* g, tpu_opcode_t op,
                               const tpu_value_t* x, int32_t n,
                               const tpu_attrs_t* at, bool ex, tpu_dtype_t* dt,
                               tpu_shape_t* sh) {
  (void)n;
  const tpu_node_t* l = NODE(x[0]);
  const tpu_node_t* w = NODE(x[1]);
  char sl[160], sw[160];
  tpu_shape_format(&l->shape, sl, sizeof sl);
  tpu_shape_format(&w->shape, sw, sizeof sw);
  if (at->n_ints < 2)
    return TPU_STATUS(INVALID_ARGUMENT, "convolution: missing attributes");
  int64_t ns = at->ints[0];
  if (ns < 0 || ns > TPU_MAX_RANK - 2 || at->n_ints != 2 + 5 * ns)
    return TPU_STATUS(INVALID_ARGUMENT, "convolution: malformed attributes");
  if (l->shape.rank != ns + 2 || w->shape.rank != ns + 2)
    return TPU_STATUS(INVALID_ARGUMENT,
                      "convolution: input %s and weight %s must both have rank %lld",
                      sl, sw, (long long)(ns + 2));
  if (l->dtype != w->dtype) return dtype_mismatch(op, l->dtype, w->dtype);
  const int64_t *st = at->ints + 1, *lo = st + ns, *hi = lo + ns, *ld = hi + ns, *rd = ld + ns;
  int64_t groups = at->ints[1 + 5 * ns];
  if (groups < 1 || l->shape.dims[1] % groups || w->shape.dims[0] % groups ||
      w->shape.dims[1] * groups != l->shape.dims[1])
    return TPU_STATUS(INVALID_ARGUMENT,
                      "convolution: input %s, weight %s and groups=%lld do not fit "
                      "(weight must be [O, C/groups, ...])", sl, sw, (long long)groups);
  tpu_shape_t out = {.rank = (int32_t)(ns + 2)};
  out.dims[0] = l->shape.dims[0];
  out.dims[1] = w->shape.dims[0];
  for (int64_t d = 0; d < ns; d++) {
    if (st[d] < 1 || ld[d] < 1 || rd[d] < 1)
      return TPU_STATUS(INVALID_ARGUMENT, "convolution: strides and dilations must be >= 1");
    int64_t in = l->shape.dims[2 + d];
    int64_t din = in == 0 ? 0 : (in - 1) * ld[d] + 1;
    int64_t padded = din + lo[d] + hi[d];
    int64_t k = w->shape.dims[2 + d];
    int64_t dk = k == 0 ? 0 : (k - 1) * rd[d] + 1;
    if (padded < dk)
      return TPU_STATUS(INVALID_ARGUMENT,
                        "convolution: kernel %s larger than padded input %s in spatial dim %lld",
                        sw, sl, (long long)d);
    out.dims[2 + d] = (padded - dk) / st[d] + 1;
  }
  tpu_dtype_kind_t k = tpu_dtype_info(l->dtype)->kind;
  if (k == TPU_DTYPE_KIND_BOOL || k == TPU_DTYPE_KIND_COMPLEX)
    return TPU_STATUS(INVALID_ARGUMENT, "convolution: %s operands unsupported",
                      tpu_dtype_info(l->dtype)->name);
  if (ex) {
    if (!tpu_shape_equal(sh, &out)) {
      char so[160], se[160];
      tpu_shape_format(sh, so, sizeof so);
      tpu_shape_format(&out, se, sizeof se);
      return TPU_STATUS(INVALID_ARGUMENT, "convolution: result shape %s, expected %s", so, se);
    }
    if (tpu_dtype_info(*dt)->kind != k)
      return TPU_STATUS(INVALID_ARGUMENT, "convolution: result type mismatch");
    return NULL;
  }
  *dt = l->dtype;
  *sh = out;
  return NULL;
}

static tpu_status_t infer_dot(const tpu_graph_t* g, tpu_opcode_t op,
                              const tpu_value_t* x, int32_t n,
                              const tpu_attrs_t* at, bool ex, tpu_dtype_t* dt,
                              tpu_shape_t* sh) {
  (void)n; (void)op;
  const tpu_node_t* a = NODE(x[0]);
  const tpu_node_t* b = NODE(x[1]);
  char sa[160], sb[160];
  tpu_shape_format(&a->shape, sa, sizeof sa);
  tpu_shape_format(&b->shape, sb, sizeof sb);
  if (at->n_ints < 2)
    return TPU_STATUS(INVALID_ARGUMENT, "dot_general: missing dimension numbers");
  int64_t nb = at->ints[0], nc = at->ints[1];
  if (nb < 0 || nc < 0 || at->n_ints != 2 + 2 * nb + 2 * nc)
    return TPU_STATUS(INVALID_ARGUMENT, "dot_general: malformed dimension numbers");
  const int64_t* lb = at->ints + 2;
  const int64_t* rb = lb + nb;
  const int64_t* lc = rb + nb;
  const int64_t* rc = lc + nc;
  if (a->dtype != b->dtype) return dtype_mismatch(TPU_OP_DOT_GENERAL, a->dtype, b->dtype);
  uint32_t ml = 0, mr = 0;
  for (int64_t i = 0; i < nb + nc; i++) {
    int64_t l = i < nb ? lb[i] : lc[i - nb];
    int64_t r = i < nb ? rb[i] : rc[i - nb];
    if (l < 0 || l >= a->shape.rank || r < 0 || r >= b->shape.rank ||
        (ml >> l) & 1 || (mr >> r) & 1)
      return TPU_STATUS(INVALID_ARGUMENT,
                        "dot_general: bad dimension numbers for %s x %s", sa, sb);
    ml |= 1u << l;
    mr |= 1u << r;
    if (a->shape.dims[l] != b->shape.dims[r])
      return TPU_STATUS(INVALID_ARGUMENT,
                        "dot_general: %s dims differ (%lld vs %lld) for %s x %s",
                        i < nb ? "batch" : "contracting",
                        (long long)a->shape.dims[l], (long long)b->shape.dims[r],
                        sa, sb);
  }
  tpu_shape_t out = {.rank = 0};
  for (int64_t i = 0; i < nb; i++) out.dims[out.rank++] = a->shape.dims[lb[i]];
  for (int32_t i = 0; i < a->shape.rank; i++)
    if (!((ml >> i) & 1)) out.dims[out.rank++] = a->shape.dims[i];
  for (int32_t i = 0; i < b->shape.rank; i++)
    if (!((mr >> i) & 1)) out.dims[out.rank++] = b->shape.dims[i];
  if (out.rank > TPU_MAX_RANK)
    return TPU_STATUS(INVALID_ARGUMENT, "dot_general: result rank too large");
  tpu_dtype_kind_t k = tpu_dtype_info(a->dtype)->kind;
  if (k == TPU_DTYPE_KIND_BOOL)
    return TPU_STATUS(INVALID_ARGUMENT, "dot_general: i1 operands unsupported");
  if (ex) {
    /* the result may be wider than the operands (bf16 x bf16 -> f32) */
    if (!tpu_shape_equal(sh, &out)) {
      char so[160], se[160];
      tpu_shape_format(sh, so, sizeof so);
      tpu_shape_format(&out, se, sizeof se);
      return TPU_STATUS(INVALID_ARGUMENT, "dot_general: result shape %s, expected %s", so, se);
    }
    if (tpu_dtype_info(*dt)->kind != k)
      return TPU_STATUS(INVALID_ARGUMENT, "dot_general: result type %s does not match operands %s",
                        tpu_dtype_info(*dt)->name, tpu_dtype_info(a->dtype)->name);
    return NULL;
  }
  *dt = a->dtype;
  *sh = out;
  return NULL;
}

static tpu_status_t infer_param(const tpu_graph_t* g, tpu_opcode_t op,
                                const tpu_value_t* x, int32_t n,
                                const tpu_attrs_t* at, bool ex,
                                tpu_dtype_t* dt, tpu_shape_t* sh) {
  (void)g; (void)op; (void)x; (void)n; (void)at; (void)dt; (void)sh;
  if (!ex) return TPU_STATUS(INVALID_ARGUMENT, "parameter needs a type");
  return NULL;
}

tpu_infer_fn_t tpu_op_infer_fn(tpu_opcode_t op) {
  switch (op) {
    case TPU_OP_PARAMETER:
    case TPU_OP_CONSTANT: return infer_param;
    case TPU_OP_IOTA: return infer_leaf;
    case TPU_OP_RNG: return infer_rng;
    case TPU_OP_REDUCE: return infer_reduce;
    case TPU_OP_DOT_GENERAL: return infer_dot;
    case TPU_OP_CONVOLUTION: return infer_conv;
    case TPU_OP_REDUCE_WINDOW: return infer_window;
    case TPU_OP_REVERSE:
    case TPU_OP_COPY:
    case TPU_OP_GATHER:
    case TPU_OP_PAD:
    case TPU_OP_SCATTER:
    case TPU_OP_SORT:
    case TPU_OP_CUMULATIVE: return infer_array;
    default: break;
  }
  switch (kOps[op].op_class) {
    case TPU_OP_CLASS_UNARY: return infer_unary;
    case TPU_OP_CLASS_BINARY: return infer_binary;
    case TPU_OP_CLASS_TERNARY: return infer_ternary;
    case TPU_OP_CLASS_SHAPE: return infer_shape_op;
    default: return NULL;
  }
}

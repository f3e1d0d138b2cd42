/* The graph IR: a static-shape SSA dataflow graph whose ops mirror StableHLO
 * (and CHLO for the few math ops StableHLO lacks). Each op kind has one row in
 * the op table (ir/op_table.c); a static assertion there fails the build when
 * an op is added here without a row.
 *
 * A graph owns its nodes; values are node ids (int32). Graphs are built by one
 * thread; a finished graph is read-only and may be shared.
 */
#ifndef TPU_IR_H_
#define TPU_IR_H_

#include "tpu/base.h"
#include "tpu/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_RANK 16
/* The most integer attributes an op takes (reduce_window: 5 per dim). */
#define TPU_MAX_ATTR_INTS (6 * TPU_MAX_RANK + 4)

typedef struct tpu_shape_s {
  int32_t rank;
  int64_t dims[TPU_MAX_RANK];
} tpu_shape_t;

/* Number of elements, or -1 on overflow. */
int64_t tpu_shape_numel(const tpu_shape_t* s);
bool tpu_shape_equal(const tpu_shape_t* a, const tpu_shape_t* b);
/* Builds a shape; INVALID_ARGUMENT for rank > TPU_MAX_RANK or dims < 0. */
TPU_MUST_USE tpu_status_t tpu_shape_make(int32_t rank, const int64_t* dims,
                                         tpu_shape_t* out);
/* Writes "[2,3]" into buf (always NUL-terminated). */
void tpu_shape_format(const tpu_shape_t* s, char* buf, size_t n);
/* Row-major strides (in elements) of a shape. */
void tpu_shape_contiguous_strides(const tpu_shape_t* s, int64_t* strides);

/* X(ENUM, "name", min_operands, max_operands (-1 = variadic), class) */
#define TPU_OP_CLASS_LEAF 0
#define TPU_OP_CLASS_UNARY 1   /* elementwise, one operand */
#define TPU_OP_CLASS_BINARY 2  /* elementwise, two operands */
#define TPU_OP_CLASS_TERNARY 3 /* elementwise, three operands */
#define TPU_OP_CLASS_SHAPE 4   /* data movement */
#define TPU_OP_CLASS_REDUCE 5
#define TPU_OP_CLASS_CONTRACT 6 /* dot_general, convolution */
#define TPU_OP_CLASS_OTHER 7

#define TPU_OP_LIST(X)                                          \
  X(PARAMETER, "parameter", 0, 0, LEAF)                         \
  X(CONSTANT, "constant", 0, 0, LEAF)                           \
  X(IOTA, "iota", 0, 0, LEAF)                                   \
  X(RNG, "rng", 2, 2, OTHER)                                    \
  /* elementwise unary */                                       \
  X(NEGATE, "negate", 1, 1, UNARY)                              \
  X(ABS, "abs", 1, 1, UNARY)                                    \
  X(SIGN, "sign", 1, 1, UNARY)                                  \
  X(EXP, "exponential", 1, 1, UNARY)                            \
  X(EXPM1, "exponential_minus_one", 1, 1, UNARY)                \
  X(LOG, "log", 1, 1, UNARY)                                    \
  X(LOG1P, "log_plus_one", 1, 1, UNARY)                         \
  X(SQRT, "sqrt", 1, 1, UNARY)                                  \
  X(RSQRT, "rsqrt", 1, 1, UNARY)                                \
  X(TANH, "tanh", 1, 1, UNARY)                                  \
  X(LOGISTIC, "logistic", 1, 1, UNARY)                          \
  X(SIN, "sine", 1, 1, UNARY)                                   \
  X(COS, "cosine", 1, 1, UNARY)                                 \
  X(ERF, "erf", 1, 1, UNARY)                                    \
  X(FLOOR, "floor", 1, 1, UNARY)                                \
  X(CEIL, "ceil", 1, 1, UNARY)                                  \
  X(ROUND_EVEN, "round_nearest_even", 1, 1, UNARY)              \
  X(NOT, "not", 1, 1, UNARY)                                    \
  X(IS_FINITE, "is_finite", 1, 1, UNARY)                        \
  X(CONVERT, "convert", 1, 1, UNARY)                            \
  X(TAN, "tan", 1, 1, UNARY)                                    \
  X(ATAN, "atan", 1, 1, UNARY)                                  \
  X(ASIN, "asin", 1, 1, UNARY)                                  \
  X(ACOS, "acos", 1, 1, UNARY)                                  \
  X(SINH, "sinh", 1, 1, UNARY)                                  \
  X(COSH, "cosh", 1, 1, UNARY)                                  \
  X(ASINH, "asinh", 1, 1, UNARY)                                \
  X(ACOSH, "acosh", 1, 1, UNARY)                                \
  X(ATANH, "atanh", 1, 1, UNARY)                                \
  X(ERF_INV, "erf_inv", 1, 1, UNARY)                            \
  X(LGAMMA, "lgamma", 1, 1, UNARY)                              \
  X(DIGAMMA, "digamma", 1, 1, UNARY)                            \
  X(CBRT, "cbrt", 1, 1, UNARY)                                  \
  X(LOG2, "log2", 1, 1, UNARY)                                  \
  X(LOG10, "log10", 1, 1, UNARY)                                \
  X(ROUND_AFZ, "round_nearest_afz", 1, 1, UNARY)                \
  X(POPCNT, "popcnt", 1, 1, UNARY)                              \
  /* elementwise binary */                                      \
  X(ADD, "add", 2, 2, BINARY)                                   \
  X(SUBTRACT, "subtract", 2, 2, BINARY)                         \
  X(MULTIPLY, "multiply", 2, 2, BINARY)                         \
  X(DIVIDE, "divide", 2, 2, BINARY)                             \
  X(REMAINDER, "remainder", 2, 2, BINARY)                       \
  X(POWER, "power", 2, 2, BINARY)                               \
  X(MAXIMUM, "maximum", 2, 2, BINARY)                           \
  X(MINIMUM, "minimum", 2, 2, BINARY)                           \
  X(ATAN2, "atan2", 2, 2, BINARY)                               \
  X(AND, "and", 2, 2, BINARY)                                   \
  X(OR, "or", 2, 2, BINARY)                                     \
  X(XOR, "xor", 2, 2, BINARY)                                   \
  X(SHIFT_LEFT, "shift_left", 2, 2, BINARY)                     \
  X(SHIFT_RIGHT_ARITHMETIC, "shift_right_arithmetic", 2, 2, BINARY) \
  X(SHIFT_RIGHT_LOGICAL, "shift_right_logical", 2, 2, BINARY)   \
  X(COMPARE, "compare", 2, 2, BINARY)                           \
  /* elementwise ternary */                                     \
  X(SELECT, "select", 3, 3, TERNARY)                            \
  X(CLAMP, "clamp", 3, 3, TERNARY)                              \
  /* data movement */                                           \
  X(BROADCAST_IN_DIM, "broadcast_in_dim", 1, 1, SHAPE)          \
  X(RESHAPE, "reshape", 1, 1, SHAPE)                            \
  X(TRANSPOSE, "transpose", 1, 1, SHAPE)                        \
  X(SLICE, "slice", 1, 1, SHAPE)                                \
  X(CONCATENATE, "concatenate", 1, -1, SHAPE)                   \
  X(REVERSE, "reverse", 1, 1, SHAPE)                            \
  X(COPY, "copy", 1, 1, SHAPE) /* materializes its operand */   \
  X(GATHER, "gather", 2, 2, SHAPE)                              \
  /* whole-array kernels (operands materialized) */             \
  X(PAD, "pad", 2, 2, OTHER)                                    \
  X(SCATTER, "scatter", 3, 3, OTHER)                            \
  X(SORT, "sort", 1, 1, OTHER)                                  \
  X(CUMULATIVE, "cumulative", 1, 1, OTHER)                      \
  X(REDUCE_WINDOW, "reduce_window", 1, 1, OTHER)                \
  /* reductions */                                              \
  X(REDUCE, "reduce", 1, 1, REDUCE)                             \
  /* contractions */                                            \
  X(DOT_GENERAL, "dot_general", 2, 2, CONTRACT)                 \
  X(CONVOLUTION, "convolution", 2, 2, CONTRACT)

typedef enum tpu_opcode_e {
#define TPU_OP_ENUM_(e, n, lo, hi, c) TPU_OP_##e,
  TPU_OP_LIST(TPU_OP_ENUM_)
#undef TPU_OP_ENUM_
  TPU_OP_COUNT
} tpu_opcode_t;

/* Comparison directions (compare). */
typedef enum tpu_cmp_e {
  TPU_CMP_EQ = 0,
  TPU_CMP_NE,
  TPU_CMP_LT,
  TPU_CMP_LE,
  TPU_CMP_GT,
  TPU_CMP_GE,
  TPU_CMP_COUNT
} tpu_cmp_t;

/* Reduction kinds (reduce). */
typedef enum tpu_reduce_kind_e {
  TPU_REDUCE_SUM = 0,
  TPU_REDUCE_PROD,
  TPU_REDUCE_MAX,
  TPU_REDUCE_MIN,
  TPU_REDUCE_AND,
  TPU_REDUCE_OR,
  TPU_REDUCE_ARGMAX, /* s64 index of the first maximum (NaN is maximal) */
  TPU_REDUCE_ARGMIN, /* s64 index of the first minimum (NaN is minimal) */
  TPU_REDUCE_COUNT
} tpu_reduce_kind_t;

/* Scatter modes (scatter). */
typedef enum tpu_scatter_mode_e {
  TPU_SCATTER_REPLACE = 0, /* the last update in index order wins */
  TPU_SCATTER_ADD,
  TPU_SCATTER_MUL,
  TPU_SCATTER_MAX,
  TPU_SCATTER_MIN,
  TPU_SCATTER_COUNT
} tpu_scatter_mode_t;

/* Matmul precision (StableHLO precision_config). */
typedef enum tpu_precision_e {
  TPU_PRECISION_DEFAULT = 0, /* inputs rounded to bf16, fp32 accumulation */
  TPU_PRECISION_HIGH,        /* three bf16 passes */
  TPU_PRECISION_HIGHEST,     /* IEEE fp32 */
  TPU_PRECISION_COUNT
} tpu_precision_t;

/* Random distributions (rng). */
typedef enum tpu_rng_dist_e {
  TPU_RNG_UNIFORM = 0, /* [0, 1) */
  TPU_RNG_NORMAL,      /* mean 0, std 1 */
  TPU_RNG_BITS,        /* raw 32/64-bit integers */
  TPU_RNG_COUNT
} tpu_rng_dist_t;

/* Parameter kinds. */
typedef enum tpu_param_kind_e {
  TPU_PARAM_BUFFER = 0, /* a device buffer, bound at execution */
  TPU_PARAM_SCALAR,     /* a rank-0 value passed by value at execution */
  TPU_PARAM_COUNT
} tpu_param_kind_t;

typedef int32_t tpu_value_t;
#define TPU_NO_VALUE ((tpu_value_t)-1)

/* Attributes by op (attrs.kind / attrs.ints):
 *   compare        kind = tpu_cmp_t
 *   convert        dtype = target
 *   iota           ints = [dim]; explicit result type
 *   rng            kind = tpu_rng_dist_t; operands (seed, offset) ui64 scalars
 *   broadcast_in_dim ints = operand dim -> result dim; explicit result type
 *   reshape        explicit result type
 *   transpose      ints = permutation
 *   slice          ints = [start..., limit..., stride...]
 *   concatenate    ints = [dim]
 *   reverse        ints = dims to reverse
 *   gather         ints = [dim]; operands (operand, indices): result[i] =
 *                  operand[i with i[dim] := indices[i]] (torch.gather);
 *                  result shape = indices shape; an index out of range is
 *                  an error of the running kernel, never clamped
 *   pad            operands (operand, rank-0 value); ints = [low..., high...,
 *                  interior...]; negative low/high crop
 *   scatter        kind = tpu_scatter_mode_t; ints = [dim]; operands
 *                  (operand, indices, updates), indices/updates same shape
 *   sort           kind = 1 descending / 0 ascending; ints = [dim]; result:
 *                  s64 indices of a stable sort (NaN sorts as largest)
 *   cumulative     kind = tpu_reduce_kind_t (sum/prod/max/min); ints = [dim]
 *   reduce         kind = tpu_reduce_kind_t; ints = reduced dims
 *   reduce_window  kind = tpu_reduce_kind_t; ints = [window..., strides...,
 *                  pad_low..., pad_high..., dilation...] (5 x rank); argmax/
 *                  argmin give the s64 flat index inside the window
 *   dot_general    kind = tpu_precision_t; ints = [nb, nc, lhs_batch...,
 *                  rhs_batch..., lhs_contract..., rhs_contract...]
 *   convolution    kind = tpu_precision_t; lhs [N, C, spatial...], rhs
 *                  [O, C/groups, spatial...]; ints = [ns, strides[ns],
 *                  pad_low[ns], pad_high[ns], lhs_dilation[ns],
 *                  rhs_dilation[ns], groups]; result [N, O, spatial...]
 */

/* Op attributes. Which fields an op reads is stated in its table row and in
 * tpu_graph_add_* below; unused fields are zero. When passed in, ints is
 * copied; when read back it is a view into the graph. */
typedef struct tpu_attrs_s {
  int32_t kind;         /* cmp / reduce kind / precision / rng dist / param kind */
  tpu_dtype_t dtype;    /* convert target, iota and rng output type */
  int32_t n_ints;
  const int64_t* ints;  /* dims, permutation, slice bounds, ... */
  double f;             /* unused today */
} tpu_attrs_t;

typedef struct tpu_graph_s tpu_graph_t;

/* Static description of an op kind (one table row). */
typedef struct tpu_op_info_s {
  const char* name;
  int32_t min_operands;
  int32_t max_operands; /* -1 = variadic */
  int32_t op_class;
} tpu_op_info_t;
const tpu_op_info_t* tpu_op_info(tpu_opcode_t op);
/* Looks an op up by its printed name. */
TPU_MUST_USE tpu_status_t tpu_op_from_name(const char* name, size_t len,
                                           tpu_opcode_t* out);
const char* tpu_cmp_name(tpu_cmp_t c);
const char* tpu_reduce_kind_name(tpu_reduce_kind_t k);
const char* tpu_precision_name(tpu_precision_t p);
const char* tpu_rng_dist_name(tpu_rng_dist_t d);

/* ---------------------------------------------------------------- build */

TPU_MUST_USE tpu_status_t tpu_graph_create(tpu_allocator_t a,
                                           tpu_graph_t** out);
void tpu_graph_destroy(tpu_graph_t* g);

/* Parameters are numbered in creation order. Buffer parameters may carry a
 * layout (strides in elements) describing the strided view the executable
 * will be bound to; default row-major. */
TPU_MUST_USE tpu_status_t tpu_graph_add_parameter(tpu_graph_t* g,
                                                  tpu_dtype_t dtype,
                                                  const tpu_shape_t* shape,
                                                  const int64_t* strides,
                                                  tpu_value_t* out);
/* A rank-0 runtime operand passed by value at execution (e.g. alpha). */
TPU_MUST_USE tpu_status_t tpu_graph_add_scalar_parameter(tpu_graph_t* g,
                                                         tpu_dtype_t dtype,
                                                         tpu_value_t* out);
/* A constant: data holds numel elements of dtype (copied). Kept small. */
TPU_MUST_USE tpu_status_t tpu_graph_add_constant(tpu_graph_t* g,
                                                 tpu_dtype_t dtype,
                                                 const tpu_shape_t* shape,
                                                 const void* data,
                                                 tpu_value_t* out);
/* Generic node creation. The result type is inferred by the op's shape
 * function; an inconsistent request is INVALID_ARGUMENT naming the op and the
 * operand shapes. attrs may be NULL for ops without attributes. */
TPU_MUST_USE tpu_status_t tpu_graph_add_node(tpu_graph_t* g, tpu_opcode_t op,
                                             const tpu_value_t* operands,
                                             int32_t n_operands,
                                             const tpu_attrs_t* attrs,
                                             tpu_value_t* out);
/* Like add_node but with an explicit result type (iota, rng, reshape,
 * broadcast_in_dim need one); the verifier checks it. */
TPU_MUST_USE tpu_status_t tpu_graph_add_node_typed(
    tpu_graph_t* g, tpu_opcode_t op, const tpu_value_t* operands,
    int32_t n_operands, const tpu_attrs_t* attrs, tpu_dtype_t dtype,
    const tpu_shape_t* shape, tpu_value_t* out);

/* Declares the graph results. Each output may carry a layout (strides) and
 * may alias a buffer parameter (alias >= 0: written into that parameter's
 * buffer, as in-place aten ops do). */
TPU_MUST_USE tpu_status_t tpu_graph_add_output(tpu_graph_t* g, tpu_value_t v,
                                               const int64_t* strides,
                                               int32_t alias_param);

/* ----------------------------------------------------------------- read */

/* The allocator the graph was created with. */
tpu_allocator_t tpu_graph_allocator(const tpu_graph_t* g);
int32_t tpu_graph_node_count(const tpu_graph_t* g);
int32_t tpu_graph_param_count(const tpu_graph_t* g);
int32_t tpu_graph_output_count(const tpu_graph_t* g);
tpu_value_t tpu_graph_param(const tpu_graph_t* g, int32_t i);
tpu_value_t tpu_graph_output(const tpu_graph_t* g, int32_t i);
/* Output layout (strides, elements) and alias (-1 if none). */
const int64_t* tpu_graph_output_strides(const tpu_graph_t* g, int32_t i);
int32_t tpu_graph_output_alias(const tpu_graph_t* g, int32_t i);

tpu_opcode_t tpu_graph_node_op(const tpu_graph_t* g, tpu_value_t v);
tpu_dtype_t tpu_graph_node_dtype(const tpu_graph_t* g, tpu_value_t v);
const tpu_shape_t* tpu_graph_node_shape(const tpu_graph_t* g, tpu_value_t v);
int32_t tpu_graph_node_operand_count(const tpu_graph_t* g, tpu_value_t v);
tpu_value_t tpu_graph_node_operand(const tpu_graph_t* g, tpu_value_t v,
                                   int32_t i);
/* Attributes by value; attrs.ints stays valid until the graph is changed. */
tpu_attrs_t tpu_graph_node_attrs(const tpu_graph_t* g, tpu_value_t v);
/* For parameters: index, kind and strides (buffer params). */
int32_t tpu_graph_param_index(const tpu_graph_t* g, tpu_value_t v);
tpu_param_kind_t tpu_graph_param_kind(const tpu_graph_t* g, tpu_value_t v);
const int64_t* tpu_graph_param_strides(const tpu_graph_t* g, tpu_value_t v);
/* Constant payload (numel * dtype size bytes). */
const void* tpu_graph_constant_data(const tpu_graph_t* g, tpu_value_t v);

/* ------------------------------------------------------ check and print */

/* Checks every node against its op's rules (arity, dtypes, shapes,
 * attributes) and the outputs. */
TPU_MUST_USE tpu_status_t tpu_graph_verify(const tpu_graph_t* g);

/* Prints the graph as text (the format tpu_graph_parse reads). The returned
 * string is owned by the caller (free with the graph's allocator via
 * tpu_graph_free_text). */
TPU_MUST_USE tpu_status_t tpu_graph_print(const tpu_graph_t* g, char** out);
void tpu_graph_free_text(const tpu_graph_t* g, char* text);
TPU_MUST_USE tpu_status_t tpu_graph_parse(tpu_allocator_t a, const char* text,
                                          tpu_graph_t** out);

/* Structural fingerprint of a graph: equal for graphs that print equally. */
tpu_hash128_t tpu_graph_fingerprint(const tpu_graph_t* g);

#ifdef __cplusplus
}
#endif
#endif

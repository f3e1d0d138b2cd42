/* The compiler: named passes over the graph IR, then fusion into kernels and
 * a buffer plan. Backends (vtpu, stablehlo) consume the compiled form.
 *
 * Fusion legality is one predicate (tpu_fusible): elementwise ops, iota, rng
 * and the index-mapping ops (broadcast_in_dim, transpose, slice) are computed
 * inside the kernel that consumes them and never stored; everything else is a
 * kernel root whose result is materialized.
 */
#ifndef TPU_COMPILER_H_
#define TPU_COMPILER_H_

#include "tpu/base.h"
#include "tpu/ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_compile_options_s {
  bool verify_each_pass; /* run the verifier after every pass */
  bool dump;             /* print the graph before and after each pass */
  bool fuse;             /* false: every node is its own kernel (debugging) */
} tpu_compile_options_t;

/* Options from the environment: TORCHTPU_VERIFY_PASSES=1, TORCHTPU_DUMP_IR=1,
 * TORCHTPU_NO_FUSION=1. */
void tpu_compile_options_from_env(tpu_compile_options_t* out);

typedef enum tpu_kernel_kind_e {
  TPU_KERNEL_LOOP = 0, /* a fused elementwise region stored to a target */
  TPU_KERNEL_REDUCE,   /* reduce with a fused input region */
  TPU_KERNEL_DOT,      /* dot_general on materialized operands */
  TPU_KERNEL_ARRAY,    /* a whole-array op (pad, scatter, sort, cumulative,
                          reduce_window, convolution) on materialized operands */
  TPU_KERNEL_COUNT
} tpu_kernel_kind_t;

typedef enum tpu_loc_kind_e {
  TPU_LOC_NONE = 0, /* not materialized (fused or scalar) */
  TPU_LOC_PARAM,    /* a buffer parameter, with its layout */
  TPU_LOC_OUTPUT,   /* an output buffer, with its layout */
  TPU_LOC_TEMP,     /* scratch at a byte offset, row-major */
  TPU_LOC_CONSTANT, /* the graph's constant payload, row-major */
  TPU_LOC_COUNT
} tpu_loc_kind_t;

/* Where a materialized value lives: a buffer, an element offset into it
 * and strides (elements) over the value's shape. */
typedef struct tpu_location_s {
  tpu_loc_kind_t kind;
  int32_t index;          /* parameter or output number */
  int64_t offset;         /* temp: byte offset into the scratch arena */
  int64_t elem_offset;    /* element offset from the buffer start */
  int64_t strides[TPU_MAX_RANK]; /* elements */
} tpu_location_t;

/* One kernel launch: computes value (with its fused region) and stores it at
 * dst. Concatenate pieces store an operand into a slice of the result. */
typedef struct tpu_kernel_s {
  tpu_kernel_kind_t kind;
  tpu_value_t value;
  bool load_only;       /* LOOP: value is read from its location (a copy),
                           not recomputed from its operands */
  tpu_location_t dst;
} tpu_kernel_t;

typedef struct tpu_compiled_s {
  tpu_allocator_t allocator;
  tpu_graph_t* graph;       /* owned: the graph after passes */
  tpu_kernel_t* kernels;    /* in execution order */
  int32_t n_kernels;
  tpu_location_t* locs;     /* one per value of graph */
  int64_t temp_bytes;       /* scratch arena size */
  int64_t temp_bytes_unplanned; /* without reuse, for the log */
  int32_t n_passes_run;
  uint64_t compile_ns;
} tpu_compiled_t;

/* Compiles a verified graph. The input graph is not modified or kept. */
TPU_MUST_USE tpu_status_t tpu_compile(const tpu_graph_t* graph,
                                      const tpu_compile_options_t* options,
                                      tpu_compiled_t** out);
void tpu_compiled_destroy(tpu_compiled_t* c);

/* The fusion predicate: may v be computed inside its consumer's kernel? */
bool tpu_fusible(const tpu_graph_t* g, tpu_value_t v);

/* A pass rewrites a graph into a new graph. */
typedef tpu_status_t (*tpu_pass_fn_t)(const tpu_graph_t* in, tpu_graph_t** out);
typedef struct tpu_pass_s {
  const char* name;
  tpu_pass_fn_t run;
} tpu_pass_t;
/* The pass list, in pipeline order. */
const tpu_pass_t* tpu_passes(int32_t* count);

#ifdef __cplusplus
}
#endif
#endif

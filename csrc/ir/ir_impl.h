/* Private layout of the graph IR. */
#ifndef TPU_IR_IMPL_H_
#define TPU_IR_IMPL_H_

#include "tpu/ir.h"

typedef struct tpu_node_s {
  tpu_opcode_t op;
  tpu_dtype_t dtype;
  tpu_shape_t shape;
  int32_t operand_off, n_operands; /* into graph->operands */
  int32_t kind;                    /* attrs.kind */
  tpu_dtype_t attr_dtype;          /* attrs.dtype */
  int32_t ints_off, n_ints;        /* attrs.ints, into graph->ints */
  int32_t param_index;             /* parameters */
  int32_t extra_off;               /* param strides (ints) / constant (blob) */
} tpu_node_t;

typedef struct tpu_output_s {
  tpu_value_t value;
  int32_t strides_off; /* into graph->ints, rank entries */
  int32_t alias;
} tpu_output_t;

struct tpu_graph_s {
  tpu_allocator_t allocator;
  tpu_node_t* nodes;
  int32_t n_nodes, cap_nodes;
  int32_t* operands;
  int32_t n_operands, cap_operands;
  int64_t* ints;
  int32_t n_ints, cap_ints;
  uint8_t* blob;
  int64_t n_blob, cap_blob;
  tpu_value_t* params;
  int32_t n_params, cap_params;
  tpu_output_t* outputs;
  int32_t n_outputs, cap_outputs;
};

static inline const tpu_node_t* tpu_node_(const tpu_graph_t* g, tpu_value_t v) {
  TPU_ASSERT(v >= 0 && v < g->n_nodes);
  return &g->nodes[v];
}

/* Op table hook: infers (or, with explicit set, checks) the result type of a
 * node from its operands and attributes. Messages name the op and shapes. */
typedef tpu_status_t (*tpu_infer_fn_t)(const tpu_graph_t* g, tpu_opcode_t op,
                                       const tpu_value_t* operands, int32_t n,
                                       const tpu_attrs_t* attrs,
                                       bool explicit_type, tpu_dtype_t* dtype,
                                       tpu_shape_t* shape);
tpu_infer_fn_t tpu_op_infer_fn(tpu_opcode_t op);

/* Validates attrs.kind against the op's enum (compare, reduce, ...). */
tpu_status_t tpu_op_check_kind(tpu_opcode_t op, int32_t kind);

#endif

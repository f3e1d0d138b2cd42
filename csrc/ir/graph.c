/* Graph builder, accessors and structural fingerprint. */
#include <string.h>

#include "ir_impl.h"

tpu_status_t tpu_graph_create(tpu_allocator_t a, tpu_graph_t** out) {
  *out = NULL;
  tpu_graph_t* g;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*g), "graph", (void**)&g));
  g->allocator = a;
  *out = g;
  return NULL;
}

void tpu_graph_destroy(tpu_graph_t* g) {
  if (!g) return;
  tpu_allocator_t a = g->allocator;
  tpu_free(a, g->nodes);
  tpu_free(a, g->operands);
  tpu_free(a, g->ints);
  tpu_free(a, g->blob);
  tpu_free(a, g->params);
  tpu_free(a, g->outputs);
  tpu_free(a, g);
}

/* Grows an array so that it holds at least need elements. */
static tpu_status_t grow(tpu_graph_t* g, void** arr, int64_t* cap, int64_t need,
                         size_t elem) {
  if (need <= *cap) return NULL;
  int64_t c = *cap ? *cap * 2 : 16;
  while (c < need) c *= 2;
  void* p = tpu_realloc(g->allocator, *arr, (size_t)c * elem);
  if (!p) return TPU_STATUS(RESOURCE_EXHAUSTED, "graph storage: host out of memory");
  *arr = p;
  *cap = c;
  return NULL;
}

#define GROW32(field, capfield, need, type)                                   \
  do {                                                                        \
    int64_t cap64 = g->capfield;                                              \
    TPU_RETURN_IF_ERROR(grow(g, (void**)&g->field, &cap64, (need), sizeof(type))); \
    g->capfield = (int32_t)cap64;                                             \
  } while (0)

static tpu_status_t push_ints(tpu_graph_t* g, const int64_t* v, int32_t n,
                              int32_t* off) {
  GROW32(ints, cap_ints, (int64_t)g->n_ints + n + 1, int64_t);
  *off = g->n_ints;
  if (n) memcpy(g->ints + g->n_ints, v, sizeof(int64_t) * (size_t)n);
  g->n_ints += n;
  return NULL;
}

static tpu_status_t new_node(tpu_graph_t* g, tpu_node_t** out, tpu_value_t* id) {
  if (g->n_nodes >= (1 << 30))
    return TPU_STATUS(RESOURCE_EXHAUSTED, "graph too large");
  GROW32(nodes, cap_nodes, (int64_t)g->n_nodes + 1, tpu_node_t);
  tpu_node_t* n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof(*n));
  n->param_index = -1;
  n->extra_off = -1;
  *id = g->n_nodes++;
  *out = n;
  return NULL;
}

static tpu_status_t push_param(tpu_graph_t* g, tpu_value_t v) {
  GROW32(params, cap_params, (int64_t)g->n_params + 1, tpu_value_t);
  g->params[g->n_params++] = v;
  return NULL;
}

tpu_status_t tpu_graph_add_parameter(tpu_graph_t* g, tpu_dtype_t dtype,
                                     const tpu_shape_t* shape,
                                     const int64_t* strides, tpu_value_t* out) {
  *out = TPU_NO_VALUE;
  if (!tpu_dtype_valid((int32_t)dtype))
    return TPU_STATUS(INVALID_ARGUMENT, "parameter: invalid element type");
  tpu_shape_t sh;
  TPU_RETURN_IF_ERROR(tpu_shape_make(shape->rank, shape->dims, &sh));
  int64_t st[TPU_MAX_RANK];
  if (strides) {
    memcpy(st, strides, sizeof(int64_t) * (size_t)sh.rank);
  } else {
    tpu_shape_contiguous_strides(&sh, st);
  }
  int32_t off;
  TPU_RETURN_IF_ERROR(push_ints(g, st, sh.rank, &off));
  tpu_node_t* n;
  tpu_value_t id;
  TPU_RETURN_IF_ERROR(new_node(g, &n, &id));
  n->op = TPU_OP_PARAMETER;
  n->dtype = dtype;
  n->shape = sh;
  n->kind = TPU_PARAM_BUFFER;
  n->param_index = g->n_params;
  n->extra_off = off;
  TPU_RETURN_IF_ERROR(push_param(g, id));
  *out = id;
  return NULL;
}

tpu_status_t tpu_graph_add_scalar_parameter(tpu_graph_t* g, tpu_dtype_t dtype,
                                            tpu_value_t* out) {
  *out = TPU_NO_VALUE;
  if (!tpu_dtype_valid((int32_t)dtype))
    return TPU_STATUS(INVALID_ARGUMENT, "scalar parameter: invalid element type");
  tpu_node_t* n;
  tpu_value_t id;
  TPU_RETURN_IF_ERROR(new_node(g, &n, &id));
  n->op = TPU_OP_PARAMETER;
  n->dtype = dtype;
  n->shape.rank = 0;
  n->kind = TPU_PARAM_SCALAR;
  n->param_index = g->n_params;
  TPU_RETURN_IF_ERROR(push_param(g, id));
  *out = id;
  return NULL;
}

tpu_status_t tpu_graph_add_constant(tpu_graph_t* g, tpu_dtype_t dtype,
                                    const tpu_shape_t* shape, const void* data,
                                    tpu_value_t* out) {
  *out = TPU_NO_VALUE;
  if (!tpu_dtype_valid((int32_t)dtype))
    return TPU_STATUS(INVALID_ARGUMENT, "constant: invalid element type");
  tpu_shape_t sh;
  TPU_RETURN_IF_ERROR(tpu_shape_make(shape->rank, shape->dims, &sh));
  int64_t bytes = tpu_shape_numel(&sh) * tpu_dtype_size(dtype);
  if (bytes > (64 << 20))
    return TPU_STATUS(INVALID_ARGUMENT,
                      "constant of %lld bytes is too large for the IR; pass it "
                      "as a parameter", (long long)bytes);
  int64_t off = tpu_align_up((uint64_t)g->n_blob, 16);
  TPU_RETURN_IF_ERROR(grow(g, (void**)&g->blob, &g->cap_blob, off + bytes + 1, 1));
  memcpy(g->blob + off, data, (size_t)bytes);
  g->n_blob = off + bytes;
  tpu_node_t* n;
  tpu_value_t id;
  TPU_RETURN_IF_ERROR(new_node(g, &n, &id));
  n->op = TPU_OP_CONSTANT;
  n->dtype = dtype;
  n->shape = sh;
  n->extra_off = (int32_t)off;
  *out = id;
  return NULL;
}

static tpu_status_t add_node(tpu_graph_t* g, tpu_opcode_t op,
                             const tpu_value_t* operands, int32_t n_operands,
                             const tpu_attrs_t* attrs, bool explicit_type,
                             tpu_dtype_t dtype, const tpu_shape_t* shape,
                             tpu_value_t* out) {
  *out = TPU_NO_VALUE;
  if ((unsigned)op >= TPU_OP_COUNT)
    return TPU_STATUS(INVALID_ARGUMENT, "invalid opcode %d", (int)op);
  const tpu_op_info_t* info = tpu_op_info(op);
  if (op == TPU_OP_PARAMETER || op == TPU_OP_CONSTANT)
    return TPU_STATUS(INVALID_ARGUMENT, "use the %s builder", info->name);
  if (n_operands < info->min_operands ||
      (info->max_operands >= 0 && n_operands > info->max_operands))
    return TPU_STATUS(INVALID_ARGUMENT, "%s takes %d..%d operands, got %d",
                      info->name, info->min_operands, info->max_operands,
                      n_operands);
  for (int32_t i = 0; i < n_operands; i++)
    if (operands[i] < 0 || operands[i] >= g->n_nodes)
      return TPU_STATUS(INVALID_ARGUMENT, "%s: operand %d is not a value of this graph",
                        info->name, i);
  tpu_attrs_t at;
  memset(&at, 0, sizeof(at));
  if (attrs) at = *attrs;
  TPU_RETURN_IF_ERROR(tpu_op_check_kind(op, at.kind));
  if (at.n_ints < 0 || at.n_ints > TPU_MAX_ATTR_INTS)
    return TPU_STATUS(INVALID_ARGUMENT, "%s: too many integer attributes", info->name);
  tpu_dtype_t dt = dtype;
  tpu_shape_t sh;
  memset(&sh, 0, sizeof(sh));
  if (explicit_type) {
    if (!tpu_dtype_valid((int32_t)dtype))
      return TPU_STATUS(INVALID_ARGUMENT, "%s: invalid result type", info->name);
    TPU_RETURN_IF_ERROR(tpu_shape_make(shape->rank, shape->dims, &sh));
  }
  tpu_infer_fn_t fn = tpu_op_infer_fn(op);
  TPU_ASSERT(fn != NULL);
  TPU_RETURN_IF_ERROR(fn(g, op, operands, n_operands, &at, explicit_type, &dt, &sh));
  int32_t ops_off = g->n_operands, ints_off;
  GROW32(operands, cap_operands, (int64_t)g->n_operands + n_operands + 1, int32_t);
  if (n_operands)
    memcpy(g->operands + g->n_operands, operands, sizeof(int32_t) * (size_t)n_operands);
  g->n_operands += n_operands;
  TPU_RETURN_IF_ERROR(push_ints(g, at.ints, at.n_ints, &ints_off));
  tpu_node_t* nd;
  tpu_value_t id;
  TPU_RETURN_IF_ERROR(new_node(g, &nd, &id));
  nd->op = op;
  nd->dtype = dt;
  nd->shape = sh;
  nd->operand_off = ops_off;
  nd->n_operands = n_operands;
  nd->kind = at.kind;
  nd->attr_dtype = at.dtype;
  nd->ints_off = ints_off;
  nd->n_ints = at.n_ints;
  *out = id;
  return NULL;
}

tpu_status_t tpu_graph_add_node(tpu_graph_t* g, tpu_opcode_t op,
                                const tpu_value_t* operands, int32_t n_operands,
                                const tpu_attrs_t* attrs, tpu_value_t* out) {
  return add_node(g, op, operands, n_operands, attrs, false, TPU_DTYPE_F32, NULL,
                  out);
}

tpu_status_t tpu_graph_add_node_typed(tpu_graph_t* g, tpu_opcode_t op,
                                      const tpu_value_t* operands,
                                      int32_t n_operands,
                                      const tpu_attrs_t* attrs,
                                      tpu_dtype_t dtype,
                                      const tpu_shape_t* shape,
                                      tpu_value_t* out) {
  if (!shape) {
    *out = TPU_NO_VALUE;
    return TPU_STATUS(INVALID_ARGUMENT, "typed node without a shape");
  }
  return add_node(g, op, operands, n_operands, attrs, true, dtype, shape, out);
}

tpu_status_t tpu_graph_add_output(tpu_graph_t* g, tpu_value_t v,
                                  const int64_t* strides, int32_t alias_param) {
  if (v < 0 || v >= g->n_nodes)
    return TPU_STATUS(INVALID_ARGUMENT, "output is not a value of this graph");
  const tpu_node_t* n = &g->nodes[v];
  if (alias_param >= 0) {
    if (alias_param >= g->n_params)
      return TPU_STATUS(INVALID_ARGUMENT, "output alias names parameter %d of %d",
                        alias_param, g->n_params);
    const tpu_node_t* p = &g->nodes[g->params[alias_param]];
    if (p->kind != TPU_PARAM_BUFFER || p->dtype != n->dtype ||
        !tpu_shape_equal(&p->shape, &n->shape))
      return TPU_STATUS(INVALID_ARGUMENT,
                        "output aliased to parameter %d must match its type and shape",
                        alias_param);
    if (!strides) strides = g->ints + p->extra_off;
  }
  int64_t st[TPU_MAX_RANK];
  if (strides) {
    memcpy(st, strides, sizeof(int64_t) * (size_t)n->shape.rank);
  } else {
    tpu_shape_contiguous_strides(&n->shape, st);
  }
  int32_t off;
  TPU_RETURN_IF_ERROR(push_ints(g, st, n->shape.rank, &off));
  GROW32(outputs, cap_outputs, (int64_t)g->n_outputs + 1, tpu_output_t);
  g->outputs[g->n_outputs].value = v;
  g->outputs[g->n_outputs].strides_off = off;
  g->outputs[g->n_outputs].alias = alias_param;
  g->n_outputs++;
  return NULL;
}

/* ----------------------------------------------------------- accessors */

tpu_allocator_t tpu_graph_allocator(const tpu_graph_t* g) { return g->allocator; }
int32_t tpu_graph_node_count(const tpu_graph_t* g) { return g->n_nodes; }
int32_t tpu_graph_param_count(const tpu_graph_t* g) { return g->n_params; }
int32_t tpu_graph_output_count(const tpu_graph_t* g) { return g->n_outputs; }
tpu_value_t tpu_graph_param(const tpu_graph_t* g, int32_t i) {
  TPU_ASSERT(i >= 0 && i < g->n_params);
  return g->params[i];
}
tpu_value_t tpu_graph_output(const tpu_graph_t* g, int32_t i) {
  TPU_ASSERT(i >= 0 && i < g->n_outputs);
  return g->outputs[i].value;
}
const int64_t* tpu_graph_output_strides(const tpu_graph_t* g, int32_t i) {
  TPU_ASSERT(i >= 0 && i < g->n_outputs);
  return g->ints + g->outputs[i].strides_off;
}
int32_t tpu_graph_output_alias(const tpu_graph_t* g, int32_t i) {
  TPU_ASSERT(i >= 0 && i < g->n_outputs);
  return g->outputs[i].alias;
}
tpu_opcode_t tpu_graph_node_op(const tpu_graph_t* g, tpu_value_t v) {
  return tpu_node_(g, v)->op;
}
tpu_dtype_t tpu_graph_node_dtype(const tpu_graph_t* g, tpu_value_t v) {
  return tpu_node_(g, v)->dtype;
}
const tpu_shape_t* tpu_graph_node_shape(const tpu_graph_t* g, tpu_value_t v) {
  return &tpu_node_(g, v)->shape;
}
int32_t tpu_graph_node_operand_count(const tpu_graph_t* g, tpu_value_t v) {
  return tpu_node_(g, v)->n_operands;
}
tpu_value_t tpu_graph_node_operand(const tpu_graph_t* g, tpu_value_t v,
                                   int32_t i) {
  const tpu_node_t* n = tpu_node_(g, v);
  TPU_ASSERT(i >= 0 && i < n->n_operands);
  return g->operands[n->operand_off + i];
}
tpu_attrs_t tpu_graph_node_attrs(const tpu_graph_t* g, tpu_value_t v) {
  const tpu_node_t* n = tpu_node_(g, v);
  tpu_attrs_t a;
  memset(&a, 0, sizeof(a));
  a.kind = n->kind;
  a.dtype = n->attr_dtype;
  a.n_ints = n->n_ints;
  a.ints = n->n_ints ? g->ints + n->ints_off : NULL;
  if (n->op == TPU_OP_PARAMETER) a.kind = n->kind;
  return a;
}
int32_t tpu_graph_param_index(const tpu_graph_t* g, tpu_value_t v) {
  return tpu_node_(g, v)->param_index;
}
tpu_param_kind_t tpu_graph_param_kind(const tpu_graph_t* g, tpu_value_t v) {
  return (tpu_param_kind_t)tpu_node_(g, v)->kind;
}
const int64_t* tpu_graph_param_strides(const tpu_graph_t* g, tpu_value_t v) {
  const tpu_node_t* n = tpu_node_(g, v);
  if (n->op != TPU_OP_PARAMETER || n->kind != TPU_PARAM_BUFFER) return NULL;
  return g->ints + n->extra_off;
}
const void* tpu_graph_constant_data(const tpu_graph_t* g, tpu_value_t v) {
  const tpu_node_t* n = tpu_node_(g, v);
  if (n->op != TPU_OP_CONSTANT) return NULL;
  return g->blob + n->extra_off;
}

/* --------------------------------------------------------- fingerprint */

tpu_hash128_t tpu_graph_fingerprint(const tpu_graph_t* g) {
  tpu_hasher_t h;
  tpu_hasher_init(&h, 0x7470755f6972ull); /* "tpu_ir" */
  for (int32_t i = 0; i < g->n_nodes; i++) {
    const tpu_node_t* n = &g->nodes[i];
    tpu_hasher_add_u64(&h, ((uint64_t)n->op << 32) | (uint64_t)n->dtype);
    tpu_hasher_add_u64(&h, (uint64_t)n->shape.rank);
    for (int32_t d = 0; d < n->shape.rank; d++) tpu_hasher_add_u64(&h, (uint64_t)n->shape.dims[d]);
    tpu_hasher_add_u64(&h, (uint64_t)n->n_operands);
    for (int32_t k = 0; k < n->n_operands; k++)
      tpu_hasher_add_u64(&h, (uint64_t)g->operands[n->operand_off + k]);
    tpu_hasher_add_u64(&h, ((uint64_t)(uint32_t)n->kind << 32) | (uint64_t)n->attr_dtype);
    tpu_hasher_add_bytes(&h, g->ints + n->ints_off, sizeof(int64_t) * (size_t)n->n_ints);
    if (n->op == TPU_OP_PARAMETER) {
      tpu_hasher_add_u64(&h, (uint64_t)n->param_index);
      if (n->kind == TPU_PARAM_BUFFER)
        tpu_hasher_add_bytes(&h, g->ints + n->extra_off,
                             sizeof(int64_t) * (size_t)n->shape.rank);
    } else if (n->op == TPU_OP_CONSTANT) {
      tpu_hasher_add_bytes(&h, g->blob + n->extra_off,
                           (size_t)(tpu_shape_numel(&n->shape) * tpu_dtype_size(n->dtype)));
    }
  }
  for (int32_t i = 0; i < g->n_outputs; i++) {
    const tpu_output_t* o = &g->outputs[i];
    tpu_hasher_add_u64(&h, (uint64_t)o->value);
    tpu_hasher_add_u64(&h, (uint64_t)(int64_t)o->alias);
    tpu_hasher_add_bytes(&h, g->ints + o->strides_off,
                         sizeof(int64_t) * (size_t)g->nodes[o->value].shape.rank);
  }
  return tpu_hasher_finish(&h);
}

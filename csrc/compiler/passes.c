/* Graph-to-graph passes: simplify, CSE, DCE. Each rebuilds the graph through
 * the builder (which re-checks types), keeping parameter numbering. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler_impl.h"

/* Copies node v of in into out with operands remapped by map. */
tpu_status_t tpu_pass_copy_node(const tpu_graph_t* in, tpu_value_t v,
                                tpu_graph_t* out, const tpu_value_t* map,
                                tpu_value_t* res) {
  tpu_opcode_t op = tpu_graph_node_op(in, v);
  tpu_dtype_t dt = tpu_graph_node_dtype(in, v);
  const tpu_shape_t* sh = tpu_graph_node_shape(in, v);
  if (op == TPU_OP_PARAMETER) {
    if (tpu_graph_param_kind(in, v) == TPU_PARAM_SCALAR)
      return tpu_graph_add_scalar_parameter(out, dt, res);
    return tpu_graph_add_parameter(out, dt, sh, tpu_graph_param_strides(in, v), res);
  }
  if (op == TPU_OP_CONSTANT)
    return tpu_graph_add_constant(out, dt, sh, tpu_graph_constant_data(in, v), res);
  int32_t n = tpu_graph_node_operand_count(in, v);
  tpu_value_t ops[256];
  tpu_value_t* o = ops;
  if (n > (int32_t)TPU_ARRAY_SIZE(ops)) {
    o = malloc(sizeof(tpu_value_t) * (size_t)n);
    if (!o) return TPU_STATUS(RESOURCE_EXHAUSTED, "pass: host out of memory");
  }
  for (int32_t i = 0; i < n; i++) o[i] = map[tpu_graph_node_operand(in, v, i)];
  tpu_attrs_t at = tpu_graph_node_attrs(in, v);
  tpu_status_t st = tpu_graph_add_node_typed(out, op, o, n, &at, dt, sh, res);
  if (o != ops) free(o);
  return st;
}

static tpu_status_t copy_outputs(const tpu_graph_t* in, tpu_graph_t* out,
                                 const tpu_value_t* map) {
  for (int32_t i = 0; i < tpu_graph_output_count(in); i++)
    TPU_RETURN_IF_ERROR(tpu_graph_add_output(out, map[tpu_graph_output(in, i)],
                                             tpu_graph_output_strides(in, i),
                                             tpu_graph_output_alias(in, i)));
  return NULL;
}

static tpu_status_t alloc_map(const tpu_graph_t* in, tpu_value_t** map) {
  int32_t n = tpu_graph_node_count(in);
  *map = malloc(sizeof(tpu_value_t) * (size_t)(n ? n : 1));
  if (!*map) return TPU_STATUS(RESOURCE_EXHAUSTED, "pass: host out of memory");
  for (int32_t i = 0; i < n; i++) (*map)[i] = TPU_NO_VALUE;
  return NULL;
}

/* ------------------------------------------------------------ simplify */

static bool is_identity_perm(const tpu_attrs_t* at) {
  for (int32_t i = 0; i < at->n_ints; i++)
    if (at->ints[i] != i) return false;
  return true;
}

/* Returns the operand a node is equivalent to, or TPU_NO_VALUE. */
static tpu_value_t identity_of(const tpu_graph_t* g, tpu_value_t v) {
  tpu_opcode_t op = tpu_graph_node_op(g, v);
  if (op == TPU_OP_PARAMETER || op == TPU_OP_CONSTANT) return TPU_NO_VALUE;
  if (tpu_graph_node_operand_count(g, v) != 1) return TPU_NO_VALUE;
  tpu_value_t a = tpu_graph_node_operand(g, v, 0);
  bool same_type = tpu_graph_node_dtype(g, a) == tpu_graph_node_dtype(g, v) &&
                   tpu_shape_equal(tpu_graph_node_shape(g, a), tpu_graph_node_shape(g, v));
  if (!same_type) return TPU_NO_VALUE;
  tpu_attrs_t at = tpu_graph_node_attrs(g, v);
  switch (op) {
    case TPU_OP_CONVERT:
    case TPU_OP_RESHAPE:
    case TPU_OP_BROADCAST_IN_DIM:
      return a;
    case TPU_OP_TRANSPOSE:
      return is_identity_perm(&at) ? a : TPU_NO_VALUE;
    case TPU_OP_SLICE: {
      const tpu_shape_t* s = tpu_graph_node_shape(g, a);
      for (int32_t i = 0; i < s->rank; i++)
        if (at.ints[2 * s->rank + i] != 1) return TPU_NO_VALUE;
      return a;
    }
    case TPU_OP_REDUCE:
      return at.n_ints == 0 ? a : TPU_NO_VALUE;
    case TPU_OP_CONCATENATE:
      return a;
    default:
      return TPU_NO_VALUE;
  }
}

static tpu_status_t pass_simplify(const tpu_graph_t* in, tpu_graph_t** out) {
  *out = NULL;
  tpu_value_t* map;
  TPU_RETURN_IF_ERROR(alloc_map(in, &map));
  tpu_graph_t* g = NULL;
  tpu_status_t st = tpu_graph_create(tpu_graph_allocator(in), &g);
  for (tpu_value_t v = 0; !st && v < tpu_graph_node_count(in); v++) {
    tpu_value_t same = identity_of(in, v);
    if (same != TPU_NO_VALUE) {
      map[v] = map[same];
      continue;
    }
    st = tpu_pass_copy_node(in, v, g, map, &map[v]);
  }
  if (!st) st = copy_outputs(in, g, map);
  free(map);
  if (st) {
    tpu_graph_destroy(g);
    return st;
  }
  *out = g;
  return NULL;
}

/* ----------------------------------------------------------------- CSE */

static bool same_node(const tpu_graph_t* g, tpu_value_t a, tpu_value_t b) {
  if (tpu_graph_node_op(g, a) != tpu_graph_node_op(g, b)) return false;
  if (tpu_graph_node_dtype(g, a) != tpu_graph_node_dtype(g, b)) return false;
  if (!tpu_shape_equal(tpu_graph_node_shape(g, a), tpu_graph_node_shape(g, b))) return false;
  int32_t n = tpu_graph_node_operand_count(g, a);
  if (n != tpu_graph_node_operand_count(g, b)) return false;
  for (int32_t i = 0; i < n; i++)
    if (tpu_graph_node_operand(g, a, i) != tpu_graph_node_operand(g, b, i)) return false;
  tpu_attrs_t x = tpu_graph_node_attrs(g, a), y = tpu_graph_node_attrs(g, b);
  if (x.kind != y.kind || x.dtype != y.dtype || x.n_ints != y.n_ints) return false;
  return x.n_ints == 0 || memcmp(x.ints, y.ints, sizeof(int64_t) * (size_t)x.n_ints) == 0;
}

static uint64_t node_hash(const tpu_graph_t* g, tpu_value_t v) {
  tpu_hasher_t h;
  tpu_hasher_init(&h, 1);
  tpu_hasher_add_u64(&h, (uint64_t)tpu_graph_node_op(g, v));
  tpu_hasher_add_u64(&h, (uint64_t)tpu_graph_node_dtype(g, v));
  const tpu_shape_t* s = tpu_graph_node_shape(g, v);
  tpu_hasher_add_bytes(&h, s->dims, sizeof(int64_t) * (size_t)s->rank);
  for (int32_t i = 0; i < tpu_graph_node_operand_count(g, v); i++)
    tpu_hasher_add_u64(&h, (uint64_t)tpu_graph_node_operand(g, v, i));
  tpu_attrs_t at = tpu_graph_node_attrs(g, v);
  tpu_hasher_add_u64(&h, (uint64_t)at.kind);
  if (at.n_ints) tpu_hasher_add_bytes(&h, at.ints, sizeof(int64_t) * (size_t)at.n_ints);
  return tpu_hasher_finish(&h).lo;
}

static tpu_status_t pass_cse(const tpu_graph_t* in, tpu_graph_t** out) {
  *out = NULL;
  int32_t n = tpu_graph_node_count(in);
  tpu_value_t* map;
  TPU_RETURN_IF_ERROR(alloc_map(in, &map));
  /* open-addressing table of new-graph values keyed by structure */
  int32_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  tpu_value_t* table = malloc(sizeof(tpu_value_t) * (size_t)cap);
  if (!table) {
    free(map);
    return TPU_STATUS(RESOURCE_EXHAUSTED, "cse: host out of memory");
  }
  for (int32_t i = 0; i < cap; i++) table[i] = TPU_NO_VALUE;
  tpu_graph_t* g = NULL;
  tpu_status_t st = tpu_graph_create(tpu_graph_allocator(in), &g);
  for (tpu_value_t v = 0; !st && v < n; v++) {
    tpu_opcode_t op = tpu_graph_node_op(in, v);
    st = tpu_pass_copy_node(in, v, g, map, &map[v]);
    if (st || op == TPU_OP_PARAMETER || op == TPU_OP_CONSTANT || op == TPU_OP_RNG)
      continue;
    tpu_value_t nv = map[v];
    uint64_t h = node_hash(g, nv);
    for (int32_t i = (int32_t)(h & (uint64_t)(cap - 1));; i = (i + 1) & (cap - 1)) {
      if (table[i] == TPU_NO_VALUE) {
        table[i] = nv;
        break;
      }
      if (same_node(g, table[i], nv)) {
        map[v] = table[i]; /* the duplicate stays as dead code for DCE */
        break;
      }
    }
  }
  if (!st) st = copy_outputs(in, g, map);
  free(table);
  free(map);
  if (st) {
    tpu_graph_destroy(g);
    return st;
  }
  *out = g;
  return NULL;
}

/* ----------------------------------------------------------------- DCE */

static tpu_status_t pass_dce(const tpu_graph_t* in, tpu_graph_t** out) {
  *out = NULL;
  int32_t n = tpu_graph_node_count(in);
  uint8_t* live = calloc((size_t)(n ? n : 1), 1);
  tpu_value_t* map = NULL;
  tpu_status_t st = live ? alloc_map(in, &map)
                         : TPU_STATUS(RESOURCE_EXHAUSTED, "dce: host out of memory");
  if (st) {
    free(live);
    return st;
  }
  for (int32_t i = 0; i < tpu_graph_output_count(in); i++) live[tpu_graph_output(in, i)] = 1;
  for (tpu_value_t v = n - 1; v >= 0; v--) {
    if (tpu_graph_node_op(in, v) == TPU_OP_PARAMETER) live[v] = 1; /* numbering */
    if (!live[v]) continue;
    for (int32_t i = 0; i < tpu_graph_node_operand_count(in, v); i++)
      live[tpu_graph_node_operand(in, v, i)] = 1;
  }
  tpu_graph_t* g = NULL;
  st = tpu_graph_create(tpu_graph_allocator(in), &g);
  for (tpu_value_t v = 0; !st && v < n; v++)
    if (live[v]) st = tpu_pass_copy_node(in, v, g, map, &map[v]);
  if (!st) st = copy_outputs(in, g, map);
  free(live);
  free(map);
  if (st) {
    tpu_graph_destroy(g);
    return st;
  }
  *out = g;
  return NULL;
}

static const tpu_pass_t kPasses[] = {
    {"simplify", pass_simplify},
    {"cse", pass_cse},
    {"dce", pass_dce},
};

const tpu_pass_t* tpu_passes(int32_t* count) {
  *count = (int32_t)TPU_ARRAY_SIZE(kPasses);
  return kPasses;
}

void tpu_compile_options_from_env(tpu_compile_options_t* o) {
  memset(o, 0, sizeof(*o));
  o->fuse = true;
  const char* e;
  if ((e = getenv("TORCHTPU_VERIFY_PASSES")) && *e && *e != '0') o->verify_each_pass = true;
  if ((e = getenv("TORCHTPU_DUMP_IR")) && *e && *e != '0') o->dump = true;
  if ((e = getenv("TORCHTPU_NO_FUSION")) && *e && *e != '0') o->fuse = false;
}

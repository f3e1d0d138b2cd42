/* The pipeline: passes, fusion into kernels, locations and the temp plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler_impl.h"

bool tpu_fusible(const tpu_graph_t* g, tpu_value_t v) {
  tpu_opcode_t op = tpu_graph_node_op(g, v);
  switch (tpu_op_info(op)->op_class) {
    case TPU_OP_CLASS_UNARY:
    case TPU_OP_CLASS_BINARY:
    case TPU_OP_CLASS_TERNARY:
      return true;
    default:
      break;
  }
  switch (op) {
    case TPU_OP_IOTA:
    case TPU_OP_RNG:
    case TPU_OP_BROADCAST_IN_DIM:
    case TPU_OP_TRANSPOSE:
    case TPU_OP_SLICE:
    case TPU_OP_RESHAPE:
    case TPU_OP_REVERSE:
    case TPU_OP_GATHER:
      return true;
    default:
      return false;
  }
}

/* Ops the backend runs as one kernel over materialized operands. */
static bool is_array_op(tpu_opcode_t op) {
  switch (op) {
    case TPU_OP_PAD:
    case TPU_OP_SCATTER:
    case TPU_OP_SORT:
    case TPU_OP_CUMULATIVE:
    case TPU_OP_REDUCE_WINDOW:
    case TPU_OP_CONVOLUTION:
      return true;
    default:
      return false;
  }
}

static void dump_graph(const char* when, const char* pass, const tpu_graph_t* g) {
  char* text = NULL;
  tpu_status_t st = tpu_graph_print(g, &text);
  if (st) {
    tpu_status_free(st);
    return;
  }
  fprintf(stderr, "// ---- %s %s\n%s", when, pass, text);
  tpu_graph_free_text(g, text);
}

static tpu_status_t run_passes(const tpu_graph_t* in,
                               const tpu_compile_options_t* o,
                               tpu_graph_t** out, int32_t* n_run) {
  *out = NULL;
  int32_t n;
  const tpu_pass_t* passes = tpu_passes(&n);
  const tpu_graph_t* cur = in;
  tpu_graph_t* owned = NULL;
  for (int32_t i = 0; i < n; i++) {
    if (o->dump) dump_graph("before", passes[i].name, cur);
    tpu_graph_t* next = NULL;
    tpu_status_t st = passes[i].run(cur, &next);
    if (!st && o->verify_each_pass) st = tpu_graph_verify(next);
    if (st) {
      tpu_graph_destroy(next);
      tpu_graph_destroy(owned);
      return tpu_status_annotate(st, "pass '%s'", passes[i].name);
    }
    if (o->dump) dump_graph("after", passes[i].name, next);
    tpu_graph_destroy(owned);
    owned = next;
    cur = next;
    (*n_run)++;
  }
  *out = owned;
  return NULL;
}

/* -------------------------------------------------------------- regions */

typedef struct {
  const tpu_graph_t* g;
  const tpu_location_t* locs;
  uint8_t* seen; /* scratch, one byte per value */
  void (*leaf)(void* ctx, tpu_value_t v);
  void* ctx;
} walk_t;

/* Visits the materialized values a fused computation of v reads. */
static void walk_region(walk_t* w, tpu_value_t v, bool expand) {
  if (!expand) {
    if (w->locs[v].kind != TPU_LOC_NONE && !w->seen[v]) {
      w->seen[v] = 1;
      w->leaf(w->ctx, v);
    }
    return;
  }
  int32_t n = tpu_graph_node_operand_count(w->g, v);
  for (int32_t i = 0; i < n; i++) {
    tpu_value_t o = tpu_graph_node_operand(w->g, v, i);
    walk_region(w, o, w->locs[o].kind == TPU_LOC_NONE);
  }
}

static void kernel_reads(const tpu_graph_t* g, const tpu_location_t* locs,
                         const tpu_kernel_t* k, uint8_t* seen,
                         void (*leaf)(void*, tpu_value_t), void* ctx) {
  memset(seen, 0, (size_t)tpu_graph_node_count(g));
  walk_t w = {g, locs, seen, leaf, ctx};
  walk_region(&w, k->value, !k->load_only);
}

/* False if the fused computation of v reads param p through an
 * index-mapping op (broadcast, transpose, slice, reshape): then p is read at
 * other indices than the kernel writes, and writing p in place is unsafe. */
static bool reads_param_pointwise(const tpu_graph_t* g,
                                  const tpu_location_t* locs, tpu_value_t v,
                                  tpu_value_t p, bool under_map) {
  int32_t cls = tpu_op_info(tpu_graph_node_op(g, v))->op_class;
  bool map_here = under_map || !(cls == TPU_OP_CLASS_UNARY ||
                                 cls == TPU_OP_CLASS_BINARY ||
                                 cls == TPU_OP_CLASS_TERNARY);
  for (int32_t i = 0; i < tpu_graph_node_operand_count(g, v); i++) {
    tpu_value_t o = tpu_graph_node_operand(g, v, i);
    if (o == p) {
      if (map_here) return false;
    } else if (locs[o].kind == TPU_LOC_NONE &&
               !reads_param_pointwise(g, locs, o, p, map_here)) {
      return false;
    }
  }
  return true;
}

/* ------------------------------------------------------------ compile */

typedef struct {
  int32_t* last_use;
  int32_t kernel;
} liveness_ctx_t;

static void note_use(void* ctx, tpu_value_t v) {
  liveness_ctx_t* c = ctx;
  if (c->last_use[v] < c->kernel) c->last_use[v] = c->kernel;
}

typedef struct {
  tpu_value_t p;
  bool found;
} find_ctx_t;
static void note_param(void* ctx, tpu_value_t v) {
  find_ctx_t* c = ctx;
  if (v == c->p) c->found = true;
}

typedef struct {
  int64_t off, size;
} span_t;

/* First-fit allocation in a free list of spans (sorted by offset). */
static int64_t plan_alloc(span_t* free_list, int32_t* n_free, int64_t* top,
                          int64_t size) {
  for (int32_t i = 0; i < *n_free; i++) {
    if (free_list[i].size >= size) {
      int64_t off = free_list[i].off;
      free_list[i].off += size;
      free_list[i].size -= size;
      if (free_list[i].size == 0) {
        memmove(&free_list[i], &free_list[i + 1], sizeof(span_t) * (size_t)(*n_free - i - 1));
        (*n_free)--;
      }
      return off;
    }
  }
  int64_t off = *top;
  *top += size;
  return off;
}

static void plan_free(span_t* free_list, int32_t* n_free, int64_t off,
                      int64_t size) {
  int32_t i = 0;
  while (i < *n_free && free_list[i].off < off) i++;
  memmove(&free_list[i + 1], &free_list[i], sizeof(span_t) * (size_t)(*n_free - i));
  free_list[i].off = off;
  free_list[i].size = size;
  (*n_free)++;
  if (i + 1 < *n_free && free_list[i].off + free_list[i].size == free_list[i + 1].off) {
    free_list[i].size += free_list[i + 1].size;
    memmove(&free_list[i + 1], &free_list[i + 2], sizeof(span_t) * (size_t)(*n_free - i - 2));
    (*n_free)--;
  }
  if (i > 0 && free_list[i - 1].off + free_list[i - 1].size == free_list[i].off) {
    free_list[i - 1].size += free_list[i].size;
    memmove(&free_list[i], &free_list[i + 1], sizeof(span_t) * (size_t)(*n_free - i - 1));
    (*n_free)--;
  }
}

static bool reshape_compatible(const tpu_shape_t* in, const int64_t* strides,
                               const tpu_shape_t* out) {
  /* A reshape reads its operand as a linear sequence: fine when the operand's
   * non-unit dims are laid out row-major with no gaps. */
  (void)out;
  for (int32_t i = 0; i < in->rank; i++) {
    if (in->dims[i] == 0) return true; /* nothing to read */
  }
  int64_t expect = 1;
  for (int32_t i = in->rank - 1; i >= 0; i--) {
    if (in->dims[i] == 1) continue;
    if (strides[i] != expect) return false;
    expect *= in->dims[i];
  }
  return true;
}

void tpu_compiled_destroy(tpu_compiled_t* c) {
  if (!c) return;
  tpu_graph_destroy(c->graph);
  tpu_free(c->allocator, c->kernels);
  tpu_free(c->allocator, c->locs);
  tpu_free(c->allocator, c);
}

tpu_status_t tpu_compile(const tpu_graph_t* graph,
                         const tpu_compile_options_t* options,
                         tpu_compiled_t** out) {
  *out = NULL;
  uint64_t t0 = tpu_now_ns();
  tpu_compile_options_t defaults;
  if (!options) {
    tpu_compile_options_from_env(&defaults);
    options = &defaults;
  }
  TPU_RETURN_IF_ERROR(tpu_graph_verify(graph));
  tpu_allocator_t a = tpu_graph_allocator(graph);
  tpu_compiled_t* c;
  TPU_RETURN_IF_ERROR(tpu_alloc_zeroed(a, sizeof(*c), "compiled graph", (void**)&c));
  c->allocator = a;
  tpu_status_t st = run_passes(graph, options, &c->graph, &c->n_passes_run);
  if (st) {
    tpu_compiled_destroy(c);
    return st;
  }
  const tpu_graph_t* g = c->graph;
  int32_t n = tpu_graph_node_count(g);
  int32_t n_out = tpu_graph_output_count(g);
  uint8_t* mat = NULL;
  int32_t* last_use = NULL;
  int32_t* def_kernel = NULL;
  uint8_t* seen = NULL;
  span_t* free_list = NULL;
  tpu_value_t* dst_owner = NULL;
  int64_t* dst_delta = NULL;
  int32_t main_k = n + 4; /* kernels before the final copies */
  for (tpu_value_t v = 0; v < n; v++)
    if (tpu_graph_node_op(g, v) == TPU_OP_CONCATENATE)
      main_k += tpu_graph_node_operand_count(g, v);
  int32_t cap_k = main_k + 2 * n_out + 4;
  st = tpu_alloc_zeroed(a, sizeof(tpu_location_t) * (size_t)(n + 1), "locations", (void**)&c->locs);
  if (!st) st = tpu_alloc_zeroed(a, sizeof(tpu_kernel_t) * (size_t)cap_k, "kernels", (void**)&c->kernels);
  if (!st) st = tpu_alloc_zeroed(a, (size_t)n + 1, "fusion", (void**)&mat);
  if (!st) st = tpu_alloc_zeroed(a, sizeof(int32_t) * (size_t)(n + 1), "liveness", (void**)&last_use);
  if (!st) st = tpu_alloc_zeroed(a, sizeof(int32_t) * (size_t)(n + 1), "liveness", (void**)&def_kernel);
  if (!st) st = tpu_alloc_zeroed(a, (size_t)n + 1, "liveness", (void**)&seen);
  if (!st) st = tpu_alloc_zeroed(a, sizeof(span_t) * (size_t)(n + 2), "plan", (void**)&free_list);
  if (!st) st = tpu_alloc_zeroed(a, sizeof(tpu_value_t) * (size_t)cap_k, "plan", (void**)&dst_owner);
  if (!st) st = tpu_alloc_zeroed(a, sizeof(int64_t) * (size_t)cap_k, "plan", (void**)&dst_delta);
  if (st) goto done;

  /* 1. what is materialized */
  for (tpu_value_t v = 0; v < n; v++) {
    tpu_opcode_t op = tpu_graph_node_op(g, v);
    if (op == TPU_OP_PARAMETER)
      mat[v] = tpu_graph_param_kind(g, v) == TPU_PARAM_BUFFER;
    else if (op == TPU_OP_CONSTANT)
      mat[v] = tpu_graph_node_shape(g, v)->rank > 0;
    else
      mat[v] = !options->fuse || !tpu_fusible(g, v);
    if (op == TPU_OP_DOT_GENERAL || op == TPU_OP_RESHAPE || is_array_op(op) ||
        op == TPU_OP_GATHER) {
      int32_t n_ops = op == TPU_OP_GATHER ? 1 : tpu_graph_node_operand_count(g, v);
      for (int32_t i = 0; i < n_ops; i++) {
        tpu_value_t o = tpu_graph_node_operand(g, v, i);
        tpu_opcode_t oo = tpu_graph_node_op(g, o);
        /* rank-0 scalar parameters and constants are read by value */
        bool by_value = tpu_graph_node_shape(g, o)->rank == 0 &&
                        (oo == TPU_OP_CONSTANT ||
                         (oo == TPU_OP_PARAMETER && tpu_graph_param_kind(g, o) == TPU_PARAM_SCALAR));
        if (is_array_op(op) && by_value) continue;
        if (oo != TPU_OP_PARAMETER || tpu_graph_param_kind(g, o) == TPU_PARAM_BUFFER)
          mat[o] = 1;
      }
    }
  }
  for (int32_t j = 0; j < n_out; j++) {
    tpu_value_t v = tpu_graph_output(g, j);
    tpu_opcode_t op = tpu_graph_node_op(g, v);
    if (op != TPU_OP_PARAMETER && op != TPU_OP_CONSTANT) mat[v] = 1;
  }

  /* 2. locations of leaves and outputs */
  for (tpu_value_t v = 0; v < n; v++) {
    tpu_location_t* l = &c->locs[v];
    const tpu_shape_t* sh = tpu_graph_node_shape(g, v);
    tpu_opcode_t op = tpu_graph_node_op(g, v);
    if (op == TPU_OP_PARAMETER && mat[v]) {
      l->kind = TPU_LOC_PARAM;
      l->index = tpu_graph_param_index(g, v);
      memcpy(l->strides, tpu_graph_param_strides(g, v), sizeof(int64_t) * (size_t)sh->rank);
    } else if (op == TPU_OP_CONSTANT && mat[v]) {
      l->kind = TPU_LOC_CONSTANT;
      tpu_shape_contiguous_strides(sh, l->strides);
    }
  }
  /* reshape operands must be readable as a linear sequence */
  for (tpu_value_t v = 0; v < n; v++) {
    if (tpu_graph_node_op(g, v) != TPU_OP_RESHAPE) continue;
    tpu_value_t o = tpu_graph_node_operand(g, v, 0);
    if (c->locs[o].kind == TPU_LOC_PARAM &&
        !reshape_compatible(tpu_graph_node_shape(g, o), c->locs[o].strides,
                            tpu_graph_node_shape(g, v))) {
      st = TPU_STATUS(UNIMPLEMENTED,
                      "reshape of a non-contiguous parameter (make the operand "
                      "contiguous before reshaping)");
      goto done;
    }
  }
  /* Kernels; each destination is (owner value, element delta) until temps
   * have offsets, or an explicit location for copies into outputs. */
  int32_t nk = 0;
  for (int32_t i = 0; i < cap_k; i++) dst_owner[i] = -1;
  tpu_kernel_t* copies = c->kernels + main_k; /* staging for final copies */
  int32_t n_copies = 0;
  for (int32_t j = 0; j < n_out; j++) {
    tpu_value_t v = tpu_graph_output(g, j);
    int32_t alias = tpu_graph_output_alias(g, j);
    tpu_location_t dst;
    memset(&dst, 0, sizeof(dst));
    dst.kind = alias >= 0 ? TPU_LOC_PARAM : TPU_LOC_OUTPUT;
    dst.index = alias >= 0 ? alias : j;
    memcpy(dst.strides, tpu_graph_output_strides(g, j),
           sizeof(int64_t) * (size_t)tpu_graph_node_shape(g, v)->rank);
    bool is_leaf = tpu_graph_node_op(g, v) == TPU_OP_PARAMETER ||
                   tpu_graph_node_op(g, v) == TPU_OP_CONSTANT;
    if (is_leaf || c->locs[v].kind != TPU_LOC_NONE) {
      tpu_kernel_t* k = &copies[n_copies++];
      k->kind = TPU_KERNEL_LOOP;
      k->value = v;
      k->load_only = c->locs[v].kind != TPU_LOC_NONE;
      k->dst = dst;
    } else {
      c->locs[v] = dst;
    }
  }
  for (tpu_value_t v = 0; v < n; v++) {
    if (mat[v] && c->locs[v].kind == TPU_LOC_NONE) {
      c->locs[v].kind = TPU_LOC_TEMP;
      tpu_shape_contiguous_strides(tpu_graph_node_shape(g, v), c->locs[v].strides);
    }
  }

  /* 3. kernels in topological order */
  for (tpu_value_t v = 0; v < n; v++) {
    tpu_opcode_t op = tpu_graph_node_op(g, v);
    if (!mat[v] || op == TPU_OP_PARAMETER || op == TPU_OP_CONSTANT) continue;
    if (op == TPU_OP_CONCATENATE) {
      tpu_attrs_t at = tpu_graph_node_attrs(g, v);
      int32_t d = (int32_t)at.ints[0];
      int64_t pos = 0;
      for (int32_t i = 0; i < tpu_graph_node_operand_count(g, v); i++) {
        tpu_value_t o = tpu_graph_node_operand(g, v, i);
        tpu_kernel_t* k = &c->kernels[nk];
        k->kind = TPU_KERNEL_LOOP;
        k->value = o;
        k->load_only = c->locs[o].kind != TPU_LOC_NONE;
        dst_owner[nk] = v;
        dst_delta[nk] = pos * c->locs[v].strides[d];
        nk++;
        pos += tpu_graph_node_shape(g, o)->dims[d];
      }
      continue;
    }
    tpu_kernel_t* k = &c->kernels[nk];
    k->kind = op == TPU_OP_REDUCE ? TPU_KERNEL_REDUCE
              : op == TPU_OP_DOT_GENERAL ? TPU_KERNEL_DOT
              : is_array_op(op)          ? TPU_KERNEL_ARRAY
                                         : TPU_KERNEL_LOOP;
    k->value = v;
    k->load_only = false;
    dst_owner[nk] = v;
    dst_delta[nk] = 0;
    nk++;
  }

  /* 4. an output written into its aliased parameter must be the last reader
   * of that parameter and read it only pointwise; otherwise compute into a
   * temp and copy into the parameter at the end. */
  for (int32_t i = 0; i < nk; i++) {
    tpu_kernel_t* k = &c->kernels[i];
    tpu_value_t v = dst_owner[i];
    if (v < 0 || c->locs[v].kind != TPU_LOC_PARAM) continue;
    tpu_value_t p = tpu_graph_param(g, c->locs[v].index);
    bool hazard = tpu_graph_node_op(g, v) == TPU_OP_CONCATENATE ||
                  k->kind != TPU_KERNEL_LOOP ||
                  !reads_param_pointwise(g, c->locs, k->value, p, false);
    find_ctx_t fc = {p, false};
    for (int32_t j = i + 1; j < nk && !hazard && !fc.found; j++)
      kernel_reads(g, c->locs, &c->kernels[j], seen, note_param, &fc);
    for (int32_t j = 0; j < n_copies && !hazard && !fc.found; j++)
      kernel_reads(g, c->locs, &copies[j], seen, note_param, &fc);
    if (!hazard && !fc.found) continue;
    tpu_kernel_t* cp = &copies[n_copies++];
    cp->kind = TPU_KERNEL_LOOP;
    cp->value = v;
    cp->load_only = true;
    cp->dst = c->locs[v];
    c->locs[v].kind = TPU_LOC_TEMP;
    c->locs[v].index = 0;
    c->locs[v].elem_offset = 0;
    tpu_shape_contiguous_strides(tpu_graph_node_shape(g, v), c->locs[v].strides);
  }
  for (int32_t j = 0; j < n_copies; j++) {
    if (copies[j].dst.kind != TPU_LOC_PARAM) continue;
    tpu_value_t p = tpu_graph_param(g, copies[j].dst.index);
    for (int32_t j2 = j + 1; j2 < n_copies; j2++) {
      if (copies[j2].value == p) {
        st = TPU_STATUS(UNIMPLEMENTED,
                        "an output aliases a parameter that another output "
                        "returns unchanged");
        goto done;
      }
    }
  }
  memmove(&c->kernels[nk], copies, sizeof(tpu_kernel_t) * (size_t)n_copies);
  nk += n_copies;
  c->n_kernels = nk;

  /* 5. temp plan: liveness by kernel index, first-fit reuse */
  for (tpu_value_t v = 0; v < n; v++) {
    last_use[v] = -1;
    def_kernel[v] = -1;
  }
  for (int32_t i = 0; i < nk; i++) {
    tpu_value_t o = dst_owner[i];
    if (o >= 0 && def_kernel[o] < 0) def_kernel[o] = i;
    liveness_ctx_t lc = {last_use, i};
    kernel_reads(g, c->locs, &c->kernels[i], seen, note_use, &lc);
  }
  int32_t n_free = 0;
  int64_t top = 0, unplanned = 0;
  for (int32_t i = 0; i < nk; i++) {
    for (tpu_value_t v = 0; v < n; v++) {
      if (c->locs[v].kind != TPU_LOC_TEMP || def_kernel[v] != i) continue;
      int64_t bytes = tpu_shape_numel(tpu_graph_node_shape(g, v)) *
                      tpu_dtype_size(tpu_graph_node_dtype(g, v));
      bytes = (int64_t)tpu_align_up((uint64_t)(bytes ? bytes : 1), 64);
      unplanned += bytes;
      c->locs[v].offset = plan_alloc(free_list, &n_free, &top, bytes);
    }
    for (tpu_value_t v = 0; v < n; v++) {
      if (c->locs[v].kind != TPU_LOC_TEMP || def_kernel[v] < 0) continue;
      int32_t last = last_use[v] > def_kernel[v] ? last_use[v] : def_kernel[v];
      if (last != i) continue;
      int64_t bytes = tpu_shape_numel(tpu_graph_node_shape(g, v)) *
                      tpu_dtype_size(tpu_graph_node_dtype(g, v));
      bytes = (int64_t)tpu_align_up((uint64_t)(bytes ? bytes : 1), 64);
      plan_free(free_list, &n_free, c->locs[v].offset, bytes);
    }
  }
  for (int32_t i = 0; i < nk; i++) {
    if (dst_owner[i] < 0) continue;
    c->kernels[i].dst = c->locs[dst_owner[i]];
    c->kernels[i].dst.elem_offset += dst_delta[i];
  }
  c->temp_bytes = top;
  c->temp_bytes_unplanned = unplanned;
  c->compile_ns = tpu_now_ns() - t0;

done:
  tpu_free(a, mat);
  tpu_free(a, last_use);
  tpu_free(a, def_kernel);
  tpu_free(a, seen);
  tpu_free(a, free_list);
  tpu_free(a, dst_owner);
  tpu_free(a, dst_delta);
  if (st) {
    tpu_compiled_destroy(c);
    return st;
  }
  *out = c;
  return NULL;
}

/* Tests of base (status, allocators, hashing) and the IR (builder, verifier,
 * printer/parser round trip, fingerprint) and the compiler passes. */
#include "harness.h"
#include "tpu/compiler.h"
#include "tpu/ir.h"

static tpu_shape_t shape2(int64_t a, int64_t b) {
  tpu_shape_t s = {.rank = 2, .dims = {a, b}};
  return s;
}

TEST(status_codes_and_messages) {
  tpu_status_t s = TPU_STATUS(INVALID_ARGUMENT, "bad %s %d", "thing", 7);
  CHECK_EQ(tpu_status_code(s), TPU_STATUS_INVALID_ARGUMENT);
  CHECK(strcmp(tpu_status_message(s), "bad thing 7") == 0);
  CHECK(tpu_status_line(s) > 0);
  s = tpu_status_annotate(s, "while %s", "testing");
  CHECK(strcmp(tpu_status_message(s), "while testing: bad thing 7") == 0);
  CHECK(strcmp(tpu_status_code_name(TPU_STATUS_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED") == 0);
  tpu_status_free(s);
  CHECK_EQ(tpu_status_code(NULL), TPU_STATUS_OK);
  tpu_status_free(NULL);
}

TEST(fault_allocator_fails_and_builder_recovers) {
  /* every allocation failure in graph building must surface as a status
   * and leak nothing */
  for (uint64_t fail = 1; fail < 40; fail++) {
    tpu_fault_allocator_t fa = {0, fail, true, 0};
    tpu_allocator_t a = tpu_fault_allocator(&fa);
    tpu_graph_t* g = NULL;
    tpu_status_t st = tpu_graph_create(a, &g);
    tpu_value_t x = -1, y = -1;
    tpu_shape_t s = shape2(4, 5);
    for (int i = 0; !st && i < 20; i++) {
      st = tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x);
      if (!st) st = tpu_graph_add_node(g, TPU_OP_EXP, &x, 1, NULL, &y);
    }
    if (st) CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
    tpu_status_free(st);
    tpu_graph_destroy(g);
    CHECK_EQ(fa.live, 0);
  }
}

TEST(hash_distinguishes_inputs) {
  tpu_hasher_t h1, h2;
  tpu_hasher_init(&h1, 1);
  tpu_hasher_init(&h2, 1);
  tpu_hasher_add_u64(&h1, 1);
  tpu_hasher_add_u64(&h1, 2);
  tpu_hasher_add_u64(&h2, 2);
  tpu_hasher_add_u64(&h2, 1);
  tpu_hash128_t a = tpu_hasher_finish(&h1), b = tpu_hasher_finish(&h2);
  CHECK(a.lo != b.lo || a.hi != b.hi);
}

static tpu_graph_t* build_mlp_graph(void) {
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t xs = shape2(8, 16), ws = shape2(16, 4);
  tpu_value_t x, w, d, r, zero, bzero, s;
  int64_t tr[2] = {1, 16}; /* w given transposed in memory */
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &xs, NULL, &x));
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &ws, tr, &w));
  int64_t dn[] = {0, 1, 1, 0};
  tpu_attrs_t at = {.kind = TPU_PRECISION_HIGHEST, .n_ints = 4, .ints = dn};
  tpu_value_t ops[2] = {x, w};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_DOT_GENERAL, ops, 2, &at, &d));
  float zf = 0.0f;
  tpu_shape_t s0 = {.rank = 0};
  CHECK_OK(tpu_graph_add_constant(g, TPU_DTYPE_F32, &s0, &zf, &zero));
  tpu_shape_t os = shape2(8, 4);
  tpu_attrs_t bat = {.n_ints = 0};
  CHECK_OK(tpu_graph_add_node_typed(g, TPU_OP_BROADCAST_IN_DIM, &zero, 1, &bat, TPU_DTYPE_F32, &os, &bzero));
  tpu_value_t mx[2] = {d, bzero};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_MAXIMUM, mx, 2, NULL, &r));
  int64_t rd[] = {1};
  tpu_attrs_t red = {.kind = TPU_REDUCE_SUM, .n_ints = 1, .ints = rd};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_REDUCE, &r, 1, &red, &s));
  CHECK_OK(tpu_graph_add_output(g, r, NULL, -1));
  CHECK_OK(tpu_graph_add_output(g, s, NULL, -1));
  return g;
}

TEST(builder_infers_types) {
  tpu_graph_t* g = build_mlp_graph();
  CHECK_OK(tpu_graph_verify(g));
  tpu_value_t s = tpu_graph_output(g, 1);
  CHECK_EQ(tpu_graph_node_shape(g, s)->rank, 1);
  CHECK_EQ(tpu_graph_node_shape(g, s)->dims[0], 8);
  tpu_value_t d = tpu_graph_node_operand(g, tpu_graph_output(g, 0), 0);
  CHECK_EQ(tpu_graph_node_op(g, d), TPU_OP_DOT_GENERAL);
  CHECK_EQ(tpu_graph_node_shape(g, d)->dims[1], 4);
  tpu_graph_destroy(g);
}

TEST(builder_rejects_bad_input_with_clear_errors) {
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t a = shape2(2, 3), b = shape2(3, 2);
  tpu_value_t x, y, z;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &a, NULL, &x));
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &b, NULL, &y));
  tpu_value_t ops[2] = {x, y};
  tpu_status_t st = tpu_graph_add_node(g, TPU_OP_ADD, ops, 2, NULL, &z);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_INVALID_ARGUMENT);
  CHECK_MSG_HAS(st, "add");
  CHECK_MSG_HAS(st, "[2,3]");
  CHECK_MSG_HAS(st, "[3,2]");
  tpu_status_free(st);
  CHECK_EQ(z, TPU_NO_VALUE);
  /* wrong arity, bad operand id, bad dims */
  CHECK_CODE(tpu_graph_add_node(g, TPU_OP_ADD, ops, 1, NULL, &z), INVALID_ARGUMENT);
  tpu_value_t bad = 99;
  CHECK_CODE(tpu_graph_add_node(g, TPU_OP_EXP, &bad, 1, NULL, &z), INVALID_ARGUMENT);
  int64_t dims[] = {0, 0};
  tpu_attrs_t red = {.kind = TPU_REDUCE_SUM, .n_ints = 2, .ints = dims};
  CHECK_CODE(tpu_graph_add_node(g, TPU_OP_REDUCE, &x, 1, &red, &z), INVALID_ARGUMENT);
  tpu_attrs_t badkind = {.kind = 99};
  tpu_value_t cmp[2] = {x, x};
  CHECK_CODE(tpu_graph_add_node(g, TPU_OP_COMPARE, cmp, 2, &badkind, &z), INVALID_ARGUMENT);
  /* transcendental on integers */
  tpu_value_t iv;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_S32, &a, NULL, &iv));
  CHECK_CODE(tpu_graph_add_node(g, TPU_OP_EXP, &iv, 1, NULL, &z), INVALID_ARGUMENT);
  /* rank above the maximum */
  tpu_shape_t big = {.rank = TPU_MAX_RANK + 1};
  CHECK_CODE(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &big, NULL, &z), INVALID_ARGUMENT);
  /* the graph is still usable after every error */
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_EXP, &x, 1, NULL, &z));
  CHECK_OK(tpu_graph_verify(g));
  tpu_graph_destroy(g);
}

TEST(print_parse_round_trip) {
  tpu_graph_t* g = build_mlp_graph();
  char* text = NULL;
  CHECK_OK(tpu_graph_print(g, &text));
  CHECK(strstr(text, "dot_general") != NULL);
  CHECK(strstr(text, "strides=[1,16]") != NULL);
  CHECK(strstr(text, "kind=HIGHEST") != NULL);
  tpu_graph_t* g2 = NULL;
  CHECK_OK(tpu_graph_parse(tpu_allocator_system(), text, &g2));
  if (g2) {
    char* text2 = NULL;
    CHECK_OK(tpu_graph_print(g2, &text2));
    CHECK(text2 && strcmp(text, text2) == 0);
    tpu_hash128_t a = tpu_graph_fingerprint(g), b = tpu_graph_fingerprint(g2);
    CHECK(a.lo == b.lo && a.hi == b.hi);
    tpu_graph_free_text(g2, text2);
    tpu_graph_destroy(g2);
  }
  tpu_graph_free_text(g, text);
  tpu_graph_destroy(g);
}

TEST(parser_reports_errors) {
  tpu_graph_t* g = NULL;
  CHECK_CODE(tpu_graph_parse(tpu_allocator_system(), "graph {\n  %0 = bogus : f32[1]\n}\n", &g),
             INVALID_ARGUMENT);
  CHECK(g == NULL);
  CHECK_CODE(tpu_graph_parse(tpu_allocator_system(),
                             "graph {\n  %0 = parameter 0 buffer : f32[2] {strides=[1]}\n"
                             "  %1 = add %0, %7 : f32[2]\n}\n", &g),
             INVALID_ARGUMENT);
  CHECK_CODE(tpu_graph_parse(tpu_allocator_system(), "graph {\n", &g), INVALID_ARGUMENT);
}

TEST(fingerprint_changes_with_structure) {
  tpu_graph_t *a, *b;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &a));
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &b));
  tpu_shape_t s = shape2(2, 2);
  tpu_value_t x, y;
  int64_t st[2] = {1, 2};
  CHECK_OK(tpu_graph_add_parameter(a, TPU_DTYPE_F32, &s, NULL, &x));
  CHECK_OK(tpu_graph_add_parameter(b, TPU_DTYPE_F32, &s, st, &y));
  CHECK_OK(tpu_graph_add_output(a, x, NULL, -1));
  CHECK_OK(tpu_graph_add_output(b, y, NULL, -1));
  tpu_hash128_t ha = tpu_graph_fingerprint(a), hb = tpu_graph_fingerprint(b);
  CHECK(ha.lo != hb.lo || ha.hi != hb.hi); /* strides are part of the program */
  tpu_graph_destroy(a);
  tpu_graph_destroy(b);
}

TEST(passes_simplify_cse_dce) {
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shape2(3, 3);
  tpu_value_t x, e1, e2, dead, sum, conv;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  tpu_attrs_t cv = {.dtype = TPU_DTYPE_F32};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_CONVERT, &x, 1, &cv, &conv)); /* identity */
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_EXP, &conv, 1, NULL, &e1));
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_EXP, &x, 1, NULL, &e2)); /* same as e1 */
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_LOG, &x, 1, NULL, &dead));
  tpu_value_t ab[2] = {e1, e2};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_ADD, ab, 2, NULL, &sum));
  CHECK_OK(tpu_graph_add_output(g, sum, NULL, -1));
  tpu_compile_options_t o = {.verify_each_pass = true, .dump = false, .fuse = true};
  tpu_compiled_t* c = NULL;
  CHECK_OK(tpu_compile(g, &o, &c));
  if (c) {
    /* parameter, one exp, add */
    CHECK_EQ(tpu_graph_node_count(c->graph), 3);
    CHECK_EQ(c->n_passes_run, 3);
    /* everything fuses into one kernel writing the output */
    CHECK_EQ(c->n_kernels, 1);
    CHECK_EQ(c->kernels[0].kind, TPU_KERNEL_LOOP);
    CHECK_EQ(c->kernels[0].dst.kind, TPU_LOC_OUTPUT);
    tpu_compiled_destroy(c);
  }
  tpu_graph_destroy(g);
}

TEST(fusion_and_buffer_planning) {
  /* softmax-like: max-reduce, exp, sum-reduce, divide */
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shape2(4, 8);
  tpu_value_t x, mx, bmx, sub, e, sm, bsm, out;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  int64_t d1[] = {1}, d0[] = {0};
  tpu_attrs_t rmax = {.kind = TPU_REDUCE_MAX, .n_ints = 1, .ints = d1};
  tpu_attrs_t rsum = {.kind = TPU_REDUCE_SUM, .n_ints = 1, .ints = d1};
  tpu_attrs_t bc = {.n_ints = 1, .ints = d0};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_REDUCE, &x, 1, &rmax, &mx));
  CHECK_OK(tpu_graph_add_node_typed(g, TPU_OP_BROADCAST_IN_DIM, &mx, 1, &bc, TPU_DTYPE_F32, &s, &bmx));
  tpu_value_t xs[2] = {x, bmx};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_SUBTRACT, xs, 2, NULL, &sub));
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_EXP, &sub, 1, NULL, &e));
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_REDUCE, &e, 1, &rsum, &sm));
  CHECK_OK(tpu_graph_add_node_typed(g, TPU_OP_BROADCAST_IN_DIM, &sm, 1, &bc, TPU_DTYPE_F32, &s, &bsm));
  tpu_value_t es[2] = {e, bsm};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_DIVIDE, es, 2, NULL, &out));
  CHECK_OK(tpu_graph_add_output(g, out, NULL, -1));
  tpu_compiled_t* c = NULL;
  tpu_compile_options_t o = {.verify_each_pass = true, .fuse = true};
  CHECK_OK(tpu_compile(g, &o, &c));
  if (c) {
    /* reduce max, reduce sum (exp fused in), fused divide */
    CHECK_EQ(c->n_kernels, 3);
    CHECK_EQ(c->kernels[0].kind, TPU_KERNEL_REDUCE);
    CHECK_EQ(c->kernels[1].kind, TPU_KERNEL_REDUCE);
    CHECK_EQ(c->kernels[2].kind, TPU_KERNEL_LOOP);
    /* two [4] f32 temps, padded to 64 bytes each */
    CHECK_EQ(c->temp_bytes, 128);
    tpu_compiled_destroy(c);
  }
  /* without fusion every node is a kernel */
  o.fuse = false;
  CHECK_OK(tpu_compile(g, &o, &c));
  if (c) {
    CHECK(c->n_kernels >= 6);
    CHECK(c->temp_bytes < c->temp_bytes_unplanned); /* temps are reused */
    tpu_compiled_destroy(c);
  }
  tpu_graph_destroy(g);
}

TEST(aliased_output_hazard_goes_through_temp) {
  /* out (aliasing x) = transpose(x) + 1: x is read at other indices than
   * written, so the result must be staged */
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shape2(4, 4);
  tpu_value_t x, t, one, bone, y;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  int64_t perm[] = {1, 0};
  tpu_attrs_t tp = {.n_ints = 2, .ints = perm};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_TRANSPOSE, &x, 1, &tp, &t));
  float f1 = 1.0f;
  tpu_shape_t s0 = {.rank = 0};
  CHECK_OK(tpu_graph_add_constant(g, TPU_DTYPE_F32, &s0, &f1, &one));
  tpu_attrs_t bc = {.n_ints = 0};
  CHECK_OK(tpu_graph_add_node_typed(g, TPU_OP_BROADCAST_IN_DIM, &one, 1, &bc, TPU_DTYPE_F32, &s, &bone));
  tpu_value_t ab[2] = {t, bone};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_ADD, ab, 2, NULL, &y));
  CHECK_OK(tpu_graph_add_output(g, y, NULL, 0));
  tpu_compiled_t* c = NULL;
  CHECK_OK(tpu_compile(g, NULL, &c));
  if (c) {
    CHECK_EQ(c->n_kernels, 2);
    CHECK_EQ(c->kernels[0].dst.kind, TPU_LOC_TEMP);
    CHECK_EQ(c->kernels[1].dst.kind, TPU_LOC_PARAM);
    tpu_compiled_destroy(c);
  }
  tpu_graph_destroy(g);
}

int main(void) {
  RUN(status_codes_and_messages);
  RUN(fault_allocator_fails_and_builder_recovers);
  RUN(hash_distinguishes_inputs);
  RUN(builder_infers_types);
  RUN(builder_rejects_bad_input_with_clear_errors);
  RUN(print_parse_round_trip);
  RUN(parser_reports_errors);
  RUN(fingerprint_changes_with_structure);
  RUN(passes_simplify_cse_dce);
  RUN(fusion_and_buffer_planning);
  RUN(aliased_output_hazard_goes_through_temp);
  return harness_report();
}

/* Runtime and vTPU execution: streams, events, the executable cache, and
 * kernels compiled from IR graphs run on a vTPU against reference values. */
#include <math.h>
#include <pthread.h>

#include "harness.h"
#include "tpu/runtime.h"
#include "tpu/vtpu.h"

static tpu_device_t* make_vtpu(int threads) {
  tpu_vtpu_options_t o = {.chip = "v5e", .hbm_capacity = 256ull << 20, .n_threads = threads};
  tpu_device_t* dev = NULL;
  CHECK_OK(tpu_vtpu_device_create(tpu_allocator_system(), &o, &dev));
  return dev;
}

static tpu_buffer_t* buf_from(tpu_device_t* dev, const float* data, int64_t n) {
  tpu_buffer_t* b = NULL;
  CHECK_OK(tpu_buffer_allocate(dev, (uint64_t)n * 4, (uint64_t)n * 4, 0, &b));
  if (b && data) memcpy(b->data, data, (size_t)n * 4);
  return b;
}

static tpu_shape_t shp(int32_t r, int64_t a, int64_t b) {
  tpu_shape_t s = {.rank = r, .dims = {a, b}};
  return s;
}

TEST(unknown_chip_is_not_found_with_the_names) {
  tpu_vtpu_options_t o = {.chip = "v9x"};
  tpu_device_t* dev = NULL;
  tpu_status_t st = tpu_vtpu_device_create(tpu_allocator_system(), &o, &dev);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_NOT_FOUND);
  CHECK_MSG_HAS(st, "v5e");
  CHECK_MSG_HAS(st, "TORCHTPU_CHIP");
  tpu_status_free(st);
  CHECK(dev == NULL);
}

TEST(cache_is_lru_and_counts) {
  tpu_device_t* dev = NULL;
  CHECK_OK(tpu_null_device_create(tpu_allocator_system(), &dev));
  tpu_cache_t* c = NULL;
  CHECK_OK(tpu_cache_create(tpu_allocator_system(), 2, &c));
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shp(1, 4, 0);
  tpu_value_t x;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  CHECK_OK(tpu_graph_add_output(g, x, NULL, -1));
  tpu_executable_t* e[3];
  for (int i = 0; i < 3; i++) CHECK_OK(tpu_executable_compile(dev, g, TPU_PRECISION_HIGHEST, NULL, &e[i]));
  tpu_hash128_t k[3] = {{1, 1}, {2, 2}, {3, 3}};
  CHECK(tpu_cache_lookup(c, k[0]) == NULL);
  CHECK_OK(tpu_cache_insert(c, k[0], e[0]));
  CHECK_OK(tpu_cache_insert(c, k[1], e[1]));
  tpu_executable_t* hit = tpu_cache_lookup(c, k[0]); /* k0 now most recent */
  CHECK(hit == e[0]);
  tpu_executable_release(hit);
  CHECK_OK(tpu_cache_insert(c, k[2], e[2])); /* evicts k1 */
  CHECK(tpu_cache_lookup(c, k[1]) == NULL);
  tpu_executable_t* h0 = tpu_cache_lookup(c, k[0]);
  CHECK(h0 == e[0]);
  tpu_executable_release(h0);
  tpu_cache_stats_t st;
  tpu_cache_stats(c, &st);
  CHECK_EQ(st.entries, 2);
  CHECK_EQ(st.evictions, 1);
  CHECK_EQ(st.hits, 2);
  CHECK_EQ(st.misses, 2);
  tpu_cache_destroy(c);
  for (int i = 0; i < 3; i++) tpu_executable_release(e[i]);
  tpu_graph_destroy(g);
  tpu_device_release(dev);
}

/* y = exp(x) * 2 + x^T summed over rows: exercises fusion, a transpose
 * folded into a load, a reduction and a scalar parameter. */
static tpu_graph_t* test_graph(int64_t n, tpu_value_t* scale_param) {
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shp(2, n, n);
  tpu_value_t x, sc, bsc, e, m, t, sum, red;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  CHECK_OK(tpu_graph_add_scalar_parameter(g, TPU_DTYPE_F32, &sc));
  *scale_param = sc;
  tpu_attrs_t b0 = {.n_ints = 0};
  CHECK_OK(tpu_graph_add_node_typed(g, TPU_OP_BROADCAST_IN_DIM, &sc, 1, &b0, TPU_DTYPE_F32, &s, &bsc));
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_EXP, &x, 1, NULL, &e));
  tpu_value_t ms[2] = {e, bsc};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_MULTIPLY, ms, 2, NULL, &m));
  int64_t perm[2] = {1, 0};
  tpu_attrs_t tp = {.n_ints = 2, .ints = perm};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_TRANSPOSE, &x, 1, &tp, &t));
  tpu_value_t as[2] = {m, t};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_ADD, as, 2, NULL, &sum));
  int64_t d0[1] = {0};
  tpu_attrs_t r = {.kind = TPU_REDUCE_SUM, .n_ints = 1, .ints = d0};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_REDUCE, &sum, 1, &r, &red));
  CHECK_OK(tpu_graph_add_output(g, red, NULL, -1));
  return g;
}

static void run_test_graph(int threads, int64_t n, float* out) {
  tpu_device_t* dev = make_vtpu(threads);
  tpu_value_t scp;
  tpu_graph_t* g = test_graph(n, &scp);
  tpu_executable_t* exe = NULL;
  CHECK_OK(tpu_executable_compile(dev, g, TPU_PRECISION_HIGHEST, NULL, &exe));
  float* xs = malloc(sizeof(float) * (size_t)(n * n));
  for (int64_t i = 0; i < n * n; i++) xs[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  tpu_buffer_t* x = buf_from(dev, xs, n * n);
  tpu_buffer_t* y = buf_from(dev, NULL, n);
  tpu_stream_t* s = NULL;
  CHECK_OK(tpu_stream_create(dev, NULL, &s));
  tpu_arg_t args[2] = {{x, 0, {0}}, {NULL, 0, {.f = 2.0}}};
  tpu_arg_t outs[1] = {{y, 0, {0}}};
  CHECK_OK(tpu_stream_enqueue(s, exe, args, outs, "test"));
  CHECK_OK(tpu_stream_synchronize(s));
  memcpy(out, y->data, sizeof(float) * (size_t)n);
  /* reference in double */
  for (int64_t j = 0; j < n; j++) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += exp((double)xs[i * n + j]) * 2.0 + xs[j * n + i];
    CHECK(fabs(acc - out[j]) <= 1e-5 * fabs(acc) + 1e-5);
  }
  tpu_stream_destroy(s);
  tpu_buffer_release(x);
  tpu_buffer_release(y);
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
  free(xs);
  tpu_device_release(dev);
}

TEST(fused_kernels_match_reference_and_threads_agree_bitwise) {
  int64_t n = 300; /* several chunks per row, odd sizes */
  float* a = malloc(sizeof(float) * (size_t)n);
  float* b = malloc(sizeof(float) * (size_t)n);
  run_test_graph(1, n, a);
  run_test_graph(2, n, b);
  CHECK(memcmp(a, b, sizeof(float) * (size_t)n) == 0);
  free(a);
  free(b);
}

TEST(large_sum_is_accurate_and_thread_independent) {
  /* sum of 3M values of 0.1f: a running float sum would be off by ~1e-2
   * relative; pairwise/cascade summation stays near 1e-6 */
  int64_t n = 3 << 20;
  float res[2];
  for (int t = 0; t < 2; t++) {
    tpu_device_t* dev = make_vtpu(t + 1);
    tpu_graph_t* g;
    CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
    tpu_shape_t s = shp(1, n, 0);
    tpu_value_t x, r;
    CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
    int64_t d0[1] = {0};
    tpu_attrs_t ra = {.kind = TPU_REDUCE_SUM, .n_ints = 1, .ints = d0};
    CHECK_OK(tpu_graph_add_node(g, TPU_OP_REDUCE, &x, 1, &ra, &r));
    CHECK_OK(tpu_graph_add_output(g, r, NULL, -1));
    tpu_executable_t* exe = NULL;
    CHECK_OK(tpu_executable_compile(dev, g, TPU_PRECISION_HIGHEST, NULL, &exe));
    float* xs = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) xs[i] = 0.1f;
    tpu_buffer_t* xb = buf_from(dev, xs, n);
    tpu_buffer_t* yb = buf_from(dev, NULL, 1);
    tpu_stream_options_t so = {.synchronous = true};
    tpu_stream_t* st = NULL;
    CHECK_OK(tpu_stream_create(dev, &so, &st));
    tpu_arg_t args[1] = {{xb, 0, {0}}};
    tpu_arg_t outs[1] = {{yb, 0, {0}}};
    CHECK_OK(tpu_stream_enqueue(st, exe, args, outs, "sum"));
    res[t] = *(float*)yb->data;
    double want = (double)n * (double)0.1f;
    CHECK(fabs(res[t] - want) / want < 2e-6);
    tpu_stream_destroy(st);
    tpu_buffer_release(xb);
    tpu_buffer_release(yb);
    tpu_executable_release(exe);
    tpu_graph_destroy(g);
    free(xs);
    tpu_device_release(dev);
  }
  CHECK(memcmp(&res[0], &res[1], sizeof(float)) == 0);
}

/* An executable computing exp of n float32 values. */
static tpu_executable_t* exp_exe(tpu_device_t* dev, int64_t n) {
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shp(1, n, 0);
  tpu_value_t x, e;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_EXP, &x, 1, NULL, &e));
  CHECK_OK(tpu_graph_add_output(g, e, NULL, -1));
  tpu_executable_t* exe = NULL;
  CHECK_OK(tpu_executable_compile(dev, g, TPU_PRECISION_HIGHEST, NULL, &exe));
  tpu_graph_destroy(g);
  return exe;
}

TEST(stream_ordered_free_keeps_memory_until_work_completes) {
  tpu_device_t* dev = make_vtpu(1);
  tpu_hbm_t* hbm = tpu_vtpu_device_hbm(dev);
  tpu_executable_t* exe = exp_exe(dev, 1 << 20);
  tpu_stream_t* st = NULL;
  CHECK_OK(tpu_stream_create(dev, NULL, &st));
  tpu_buffer_t* in = buf_from(dev, NULL, 1 << 20);
  memset(in->data, 0, 4u << 20);
  tpu_buffer_t* outs[16];
  for (int i = 0; i < 16; i++) {
    outs[i] = buf_from(dev, NULL, 1 << 20);
    tpu_arg_t a[1] = {{in, 0, {0}}};
    tpu_arg_t o[1] = {{outs[i], 0, {0}}};
    CHECK_OK(tpu_stream_enqueue(st, exe, a, o, "exp"));
  }
  void* in_data = in->data;
  tpu_buffer_release(in); /* dropped by the host while queued work reads it */
  bool still_live_or_done = tpu_hbm_is_live(hbm, in_data) ||
                            tpu_stream_completed(st) == tpu_stream_enqueued(st);
  CHECK(still_live_or_done);
  CHECK_OK(tpu_stream_synchronize(st));
  CHECK(!tpu_hbm_is_live(hbm, in_data));
  for (int i = 0; i < 16; i++) {
    CHECK(((float*)outs[i]->data)[12345] == 1.0f);
    tpu_buffer_release(outs[i]);
  }
  tpu_hbm_stats_t hs;
  tpu_hbm_stats(hbm, &hs);
  CHECK_EQ(hs.n_live, 0);
  tpu_stream_destroy(st);
  tpu_executable_release(exe);
  tpu_device_release(dev);
}

TEST(write_snapshots_source_and_read_waits) {
  tpu_device_t* dev = make_vtpu(1);
  tpu_stream_t* st = NULL;
  CHECK_OK(tpu_stream_create(dev, NULL, &st));
  float host[64];
  for (int i = 0; i < 64; i++) host[i] = (float)i;
  tpu_buffer_t* b = buf_from(dev, NULL, 64);
  int64_t dims[1] = {64}, str[1] = {1};
  tpu_view_t v = {host, TPU_DTYPE_F32, 1, dims, str};
  CHECK_OK(tpu_stream_write(st, b, 0, str, &v));
  for (int i = 0; i < 64; i++) host[i] = -1.0f; /* overwrite at once */
  float back[64];
  tpu_view_t r = {back, TPU_DTYPE_F32, 1, dims, str};
  CHECK_OK(tpu_stream_read(st, b, 0, str, &r));
  CHECK(back[10] == 10.0f && back[63] == 63.0f);
  tpu_buffer_release(b);
  tpu_stream_destroy(st);
  tpu_device_release(dev);
}

TEST(events_record_in_order_and_time) {
  tpu_device_t* dev = NULL;
  CHECK_OK(tpu_null_device_create(tpu_allocator_system(), &dev));
  tpu_stream_t* st = NULL;
  CHECK_OK(tpu_stream_create(dev, NULL, &st));
  tpu_event_t *a, *b;
  CHECK_OK(tpu_event_create(tpu_allocator_system(), &a));
  CHECK_OK(tpu_event_create(tpu_allocator_system(), &b));
  double ms = -1;
  CHECK_CODE(tpu_event_elapsed_ms(a, b, &ms), FAILED_PRECONDITION);
  CHECK_OK(tpu_stream_record_event(st, a));
  CHECK_OK(tpu_stream_record_event(st, b));
  tpu_event_wait(b);
  CHECK(tpu_event_query(a) && tpu_event_query(b));
  CHECK_OK(tpu_event_elapsed_ms(a, b, &ms));
  CHECK(ms >= 0.0);
  tpu_event_destroy(a);
  tpu_event_destroy(b);
  tpu_stream_destroy(st);
  tpu_device_release(dev);
}

TEST(matmul_precisions) {
  tpu_device_t* dev = make_vtpu(2);
  int64_t m = 33, k = 300, n = 17;
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t as = shp(2, m, k), bs = shp(2, k, n);
  tpu_value_t a, b, d;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &as, NULL, &a));
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &bs, NULL, &b));
  int64_t dn[] = {0, 1, 1, 0};
  tpu_attrs_t at = {.kind = TPU_PRECISION_HIGHEST, .n_ints = 4, .ints = dn};
  tpu_value_t ab[2] = {a, b};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_DOT_GENERAL, ab, 2, &at, &d));
  CHECK_OK(tpu_graph_add_output(g, d, NULL, -1));
  float* A = malloc(sizeof(float) * (size_t)(m * k));
  float* B = malloc(sizeof(float) * (size_t)(k * n));
  for (int64_t i = 0; i < m * k; i++) A[i] = sinf((float)i * 0.37f) * 1.7f;
  for (int64_t i = 0; i < k * n; i++) B[i] = cosf((float)i * 0.11f);
  tpu_buffer_t* ba = buf_from(dev, A, m * k);
  tpu_buffer_t* bb = buf_from(dev, B, k * n);
  double err[TPU_PRECISION_COUNT];
  tpu_stream_options_t so = {.synchronous = true};
  tpu_stream_t* st = NULL;
  CHECK_OK(tpu_stream_create(dev, &so, &st));
  for (int p = 0; p < TPU_PRECISION_COUNT; p++) {
    tpu_executable_t* exe = NULL;
    CHECK_OK(tpu_executable_compile(dev, g, (tpu_precision_t)p, NULL, &exe));
    tpu_buffer_t* bc = buf_from(dev, NULL, m * n);
    tpu_arg_t args[2] = {{ba, 0, {0}}, {bb, 0, {0}}};
    tpu_arg_t outs[1] = {{bc, 0, {0}}};
    CHECK_OK(tpu_stream_enqueue(st, exe, args, outs, "dot"));
    float* C = bc->data;
    err[p] = 0;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double ref = 0, refb = 0, mag = 0;
        for (int64_t q = 0; q < k; q++) {
          ref += (double)A[i * k + q] * B[q * n + j];
          refb += (double)tpu_round_bf16(A[i * k + q]) * tpu_round_bf16(B[q * n + j]);
          mag += fabs((double)A[i * k + q] * B[q * n + j]);
        }
        double e = fabs(C[i * n + j] - ref);
        if (e > err[p]) err[p] = e;
        double bound = (double)k * 0x1p-24 * mag;
        if (p == TPU_PRECISION_HIGHEST) CHECK(e <= bound);
        if (p == TPU_PRECISION_DEFAULT) CHECK(fabs(C[i * n + j] - refb) <= bound);
      }
    tpu_buffer_release(bc);
    tpu_executable_release(exe);
  }
  CHECK(err[TPU_PRECISION_HIGHEST] < err[TPU_PRECISION_HIGH]);
  CHECK(err[TPU_PRECISION_HIGH] < err[TPU_PRECISION_DEFAULT]);
  tpu_stream_destroy(st);
  tpu_buffer_release(ba);
  tpu_buffer_release(bb);
  tpu_graph_destroy(g);
  free(A);
  free(B);
  tpu_device_release(dev);
}

TEST(bf16_compute_rounds_per_op) {
  /* bf16 add computes in f32 and rounds once to bf16 */
  tpu_device_t* dev = make_vtpu(1);
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shp(1, 3, 0);
  tpu_value_t a, b, c;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_BF16, &s, NULL, &a));
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_BF16, &s, NULL, &b));
  tpu_value_t ab[2] = {a, b};
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_ADD, ab, 2, NULL, &c));
  CHECK_OK(tpu_graph_add_output(g, c, NULL, -1));
  tpu_executable_t* exe = NULL;
  CHECK_OK(tpu_executable_compile(dev, g, TPU_PRECISION_HIGHEST, NULL, &exe));
  uint16_t A[3] = {tpu_f32_to_bf16(1.0f), tpu_f32_to_bf16(256.0f), tpu_f32_to_bf16(-3.5f)};
  uint16_t B[3] = {tpu_f32_to_bf16(0.00390625f), tpu_f32_to_bf16(1.0f), tpu_f32_to_bf16(3.5f)};
  tpu_buffer_t *ba, *bb, *bc;
  CHECK_OK(tpu_buffer_allocate(dev, 6, 6, 0, &ba));
  CHECK_OK(tpu_buffer_allocate(dev, 6, 6, 0, &bb));
  CHECK_OK(tpu_buffer_allocate(dev, 6, 6, 0, &bc));
  memcpy(ba->data, A, 6);
  memcpy(bb->data, B, 6);
  tpu_stream_options_t so = {.synchronous = true};
  tpu_stream_t* st = NULL;
  CHECK_OK(tpu_stream_create(dev, &so, &st));
  tpu_arg_t args[2] = {{ba, 0, {0}}, {bb, 0, {0}}};
  tpu_arg_t outs[1] = {{bc, 0, {0}}};
  CHECK_OK(tpu_stream_enqueue(st, exe, args, outs, "add"));
  uint16_t* C = bc->data;
  CHECK(tpu_bf16_to_f32(C[0]) == 1.0f);   /* 1 + 2^-8 rounds to even: 1 */
  CHECK(tpu_bf16_to_f32(C[1]) == 256.0f); /* 257 is not a bf16: ties to even */
  CHECK(tpu_bf16_to_f32(C[2]) == 0.0f);
  tpu_stream_destroy(st);
  tpu_buffer_release(ba);
  tpu_buffer_release(bb);
  tpu_buffer_release(bc);
  tpu_executable_release(exe);
  tpu_graph_destroy(g);
  tpu_device_release(dev);
}

typedef struct {
  tpu_stream_t* s;
  tpu_executable_t* exe;
  tpu_device_t* dev;
  int id;
  int failures;
} racer_t;

/* Each racer enqueues work on one shared stream, drops its inputs while the
 * work is queued, and reads results back; run under ThreadSanitizer too. */
static void* racer_main(void* arg) {
  racer_t* r = arg;
  for (int it = 0; it < 50; it++) {
    tpu_buffer_t* in = NULL;
    tpu_buffer_t* out = NULL;
    if (tpu_buffer_allocate(r->dev, 4096 * 4, 4096 * 4, 0, &in) ||
        tpu_buffer_allocate(r->dev, 4096 * 4, 4096 * 4, 0, &out)) {
      r->failures++;
      return NULL;
    }
    float v = (float)(r->id * 100 + it) * 1e-3f;
    int64_t dims[1] = {4096}, zero[1] = {0}, one[1] = {1};
    tpu_view_t src = {&v, TPU_DTYPE_F32, 1, dims, zero};
    if (tpu_stream_write(r->s, in, 0, one, &src)) r->failures++;
    tpu_arg_t a[1] = {{in, 0, {0}}};
    tpu_arg_t o[1] = {{out, 0, {0}}};
    if (tpu_stream_enqueue(r->s, r->exe, a, o, "exp")) r->failures++;
    tpu_buffer_release(in); /* freed while the work may still be queued */
    float back[4096];
    tpu_view_t dst = {back, TPU_DTYPE_F32, 1, dims, one};
    if (tpu_stream_read(r->s, out, 0, one, &dst)) r->failures++;
    if (back[4095] != expf(v) && fabsf(back[4095] - expf(v)) > 1e-6f) r->failures++;
    tpu_buffer_release(out);
  }
  return NULL;
}

static void run_racers(double inline_flops_max) {
  tpu_device_t* dev = make_vtpu(2);
  tpu_executable_t* exe = exp_exe(dev, 4096);
  tpu_stream_t* st = NULL;
  tpu_stream_options_t so = {.inline_flops_max = inline_flops_max};
  CHECK_OK(tpu_stream_create(dev, &so, &st));
  racer_t r[3];
  pthread_t th[3];
  for (int i = 0; i < 3; i++) {
    r[i] = (racer_t){st, exe, dev, i, 0};
    pthread_create(&th[i], NULL, racer_main, &r[i]);
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    CHECK_EQ(r[i].failures, 0);
  }
  CHECK_OK(tpu_stream_synchronize(st));
  tpu_hbm_stats_t hs;
  tpu_hbm_stats(tpu_vtpu_device_hbm(dev), &hs);
  CHECK_EQ(hs.n_live, 0);
  tpu_stream_destroy(st);
  tpu_executable_release(exe);
  tpu_device_release(dev);
}

TEST(concurrent_enqueue_free_and_read) { run_racers(0); }

TEST(concurrent_enqueue_free_and_read_with_inline_executions) {
  run_racers(1e12);
}

static tpu_executable_t* add_one_exe(tpu_device_t* dev, int64_t n) {
  tpu_graph_t* g;
  CHECK_OK(tpu_graph_create(tpu_allocator_system(), &g));
  tpu_shape_t s = shp(1, n, 0);
  tpu_shape_t sc = shp(0, 0, 0);
  tpu_value_t x, one, r;
  CHECK_OK(tpu_graph_add_parameter(g, TPU_DTYPE_F32, &s, NULL, &x));
  float v = 1.0f;
  CHECK_OK(tpu_graph_add_constant(g, TPU_DTYPE_F32, &sc, &v, &one));
  tpu_value_t ops[2] = {x, one};
  tpu_value_t ob;
  int64_t bd[1] = {0};
  tpu_attrs_t ba = {.n_ints = 0, .ints = bd};
  CHECK_OK(tpu_graph_add_node_typed(g, TPU_OP_BROADCAST_IN_DIM, &one, 1, &ba, TPU_DTYPE_F32, &s, &ob));
  ops[1] = ob;
  CHECK_OK(tpu_graph_add_node(g, TPU_OP_ADD, ops, 2, NULL, &r));
  CHECK_OK(tpu_graph_add_output(g, r, NULL, -1));
  tpu_executable_t* exe = NULL;
  CHECK_OK(tpu_executable_compile(dev, g, TPU_PRECISION_HIGHEST, NULL, &exe));
  tpu_graph_destroy(g);
  return exe;
}

TEST(inline_executions_keep_stream_order) {
  /* small executions run on the caller's thread only while the stream is
   * idle; interleaved with large queued ones, a dependent chain still sees
   * every update in order */
  tpu_device_t* dev = make_vtpu(2);
  tpu_executable_t* small = add_one_exe(dev, 16);
  tpu_executable_t* big = add_one_exe(dev, 1 << 20);
  CHECK(small->stats.flops < big->stats.flops);
  tpu_stream_options_t so = {.inline_flops_max = small->stats.flops};
  tpu_stream_t* st = NULL;
  CHECK_OK(tpu_stream_create(dev, &so, &st));
  tpu_buffer_t* a = buf_from(dev, NULL, 16);
  tpu_buffer_t* b = buf_from(dev, NULL, 16);
  tpu_buffer_t* big_a = buf_from(dev, NULL, 1 << 20);
  tpu_buffer_t* big_b = buf_from(dev, NULL, 1 << 20);
  memset(a->data, 0, 64);
  memset(big_a->data, 0, 4u << 20);
  for (int i = 0; i < 40; i++) {
    if (i == 20) CHECK_OK(tpu_stream_synchronize(st)); /* idle: later ones inline */
    if (i % 3 == 0 && (i < 20 || i == 30)) {
      tpu_arg_t x[1] = {{big_a, 0, {0}}};
      tpu_arg_t y[1] = {{big_b, 0, {0}}};
      CHECK_OK(tpu_stream_enqueue(st, big, x, y, "big"));
      tpu_buffer_t* t = big_a;
      big_a = big_b;
      big_b = t;
    }
    tpu_arg_t x[1] = {{a, 0, {0}}};
    tpu_arg_t y[1] = {{b, 0, {0}}};
    CHECK_OK(tpu_stream_enqueue(st, small, x, y, "small"));
    tpu_buffer_t* t = a;
    a = b;
    b = t;
  }
  float back[16];
  int64_t dims[1] = {16}, one[1] = {1};
  tpu_view_t dst = {back, TPU_DTYPE_F32, 1, dims, one};
  CHECK_OK(tpu_stream_read(st, a, 0, one, &dst));
  CHECK(back[0] == 40.0f && back[15] == 40.0f);
  CHECK_OK(tpu_stream_synchronize(st));
  CHECK(((float*)big_a->data)[777] == 8.0f);
  CHECK(tpu_stream_inlined(st) > 0);
  CHECK(tpu_stream_inlined(st) < tpu_stream_enqueued(st));
  CHECK_EQ(tpu_stream_completed(st), tpu_stream_enqueued(st));
  tpu_buffer_release(a);
  tpu_buffer_release(b);
  tpu_buffer_release(big_a);
  tpu_buffer_release(big_b);
  tpu_stream_destroy(st);
  tpu_executable_release(small);
  tpu_executable_release(big);
  tpu_device_release(dev);
}

int main(void) {
  RUN(unknown_chip_is_not_found_with_the_names);
  RUN(cache_is_lru_and_counts);
  RUN(fused_kernels_match_reference_and_threads_agree_bitwise);
  RUN(large_sum_is_accurate_and_thread_independent);
  RUN(stream_ordered_free_keeps_memory_until_work_completes);
  RUN(write_snapshots_source_and_read_waits);
  RUN(events_record_in_order_and_time);
  RUN(matmul_precisions);
  RUN(bf16_compute_rounds_per_op);
  RUN(concurrent_enqueue_free_and_read);
  RUN(concurrent_enqueue_free_and_read_with_inline_executions);
  RUN(inline_executions_keep_stream_order);
  return harness_report();
}

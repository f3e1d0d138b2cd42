/* Tests for the vTPU chip table, TPU tiling sizes and the HBM arena. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "tpu/vtpu.h"

#define KIB (1024ull)
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

/* ------------------------------------------------------------ helpers */

/* splitmix64: small, fixed-seed, good enough to drive a trace. */
typedef struct rng_s {
  uint64_t s;
} rng_t;
static uint64_t rng_next(rng_t* r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double rng_unit(rng_t* r) {
  return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}
static uint64_t rng_below(rng_t* r, uint64_t n) { return rng_next(r) % n; }

static const tpu_chip_spec_t* chip(const char* name) {
  const tpu_chip_spec_t* c = NULL;
  tpu_status_t st = tpu_chip_spec_find(name, &c);
  if (st) {
    fprintf(stderr, "chip %s: %s\n", name, tpu_status_message(st));
    tpu_status_free(st);
  }
  return c;
}

static tpu_hbm_t* make_hbm(const char* chip_name, uint64_t capacity,
                           uint64_t host_limit) {
  tpu_hbm_options_t o = {capacity, host_limit, true, 0};
  tpu_hbm_t* h = NULL;
  tpu_status_t st = tpu_hbm_create(tpu_allocator_system(), chip(chip_name),
                                   &o, &h);
  if (st) {
    fprintf(stderr, "tpu_hbm_create: %s\n", tpu_status_message(st));
    tpu_status_free(st);
  }
  return h;
}

static uint64_t round512(uint64_t x) {
  return (x ? (x + 511) : 512) / 512 * 512;
}

static long page_size(void) { return sysconf(_SC_PAGESIZE); }

static tpu_shape_t shape_of(int32_t rank, const int64_t* dims) {
  tpu_shape_t s;
  memset(&s, 0, sizeof(s));
  s.rank = rank;
  for (int32_t i = 0; i < rank; i++) s.dims[i] = dims[i];
  return s;
}

/* --------------------------------------------------------------- chips */

TEST(chip_table) {
  CHECK_EQ(tpu_chip_spec_count(), 5);
  const char* names[] = {"v4", "v5e", "v5p", "v6e", "7x"};
  /* Roofline ridges from REFERENCES.md: a check on the units. */
  const double ridge[] = {229, 240, 166, 560, 313};
  for (int i = 0; i < 5; i++) {
    const tpu_chip_spec_t* c = tpu_chip_spec_at(i);
    CHECK(c != NULL);
    if (!c) continue;
    CHECK(strcmp(c->name, names[i]) == 0);
    CHECK(chip(names[i]) == c);
    double r = c->peak_bf16_flops / c->hbm_bandwidth;
    CHECK(fabs(r - ridge[i]) < 1.0);
  }
  CHECK(tpu_chip_spec_at(-1) == NULL);
  CHECK(tpu_chip_spec_at(5) == NULL);

  CHECK_EQ(chip("v5e")->hbm_bytes, 16 * GIB);
  CHECK_EQ(chip("v4")->hbm_bytes, 32 * GIB);
  CHECK_EQ(chip("v5p")->hbm_bytes, 95 * GIB);
  CHECK_EQ(chip("v6e")->hbm_bytes, 32000000000ll);
  CHECK_EQ(chip("7x")->hbm_bytes, 192 * GIB);
  CHECK_EQ(chip("v6e")->mxu_dim, 256);
  CHECK_EQ(chip("v5e")->vmem_bytes, 128 * MIB);
  CHECK_EQ(chip("v4")->ici_bandwidth, 0);
  CHECK_EQ(chip("v5p")->ici_bandwidth, 1200e9);
  CHECK_EQ(chip("v5e")->pod_chips, 256);

  CHECK(chip("V5E") == chip("v5e"));
  CHECK(chip("v7x") == chip("7x"));
  CHECK(chip("V7X") == chip("7x"));
  CHECK(chip("ironwood") == chip("7x"));
  CHECK(chip("IronWood") == chip("7x"));
  CHECK(chip("trillium") == chip("v6e"));
  CHECK(chip("Trillium") == chip("v6e"));

  const tpu_chip_spec_t* c = (const tpu_chip_spec_t*)1;
  tpu_status_t st = tpu_chip_spec_find("v9z", &c);
  CHECK(c == NULL);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_NOT_FOUND);
  if (st) {
    CHECK_MSG_HAS(st, "'v9z'");
    CHECK_MSG_HAS(st, "v4, v5e, v5p, v6e, 7x");
    CHECK_MSG_HAS(st, "TORCHTPU_CHIP");
  }
  tpu_status_free(st);
  CHECK_CODE(tpu_chip_spec_find("", &c), NOT_FOUND);
  CHECK_CODE(tpu_chip_spec_find(NULL, &c), INVALID_ARGUMENT);
}

/* -------------------------------------------------------------- layout */

static int64_t padded(tpu_dtype_t dt, int32_t rank, const int64_t* dims) {
  tpu_shape_t s = shape_of(rank, dims);
  return tpu_tpu_padded_bytes(dt, &s);
}

TEST(padded_bytes) {
  CHECK_EQ(padded(TPU_DTYPE_F32, 2, (int64_t[]){3, 5}), 8 * 128 * 4);
  CHECK_EQ(padded(TPU_DTYPE_BF16, 2, (int64_t[]){3, 5}), 16 * 128 * 2);
  CHECK_EQ(padded(TPU_DTYPE_S8, 2, (int64_t[]){3, 5}), 32 * 128 * 1);
  CHECK_EQ(padded(TPU_DTYPE_PRED, 2, (int64_t[]){3, 5}), 32 * 128 * 1);
  CHECK_EQ(padded(TPU_DTYPE_F32, 3, (int64_t[]){2, 3, 5}), 8192);
  CHECK_EQ(padded(TPU_DTYPE_F32, 1, (int64_t[]){10}), 4096);
  CHECK_EQ(padded(TPU_DTYPE_F32, 1, (int64_t[]){1025}), 8192);
  CHECK_EQ(padded(TPU_DTYPE_S8, 1, (int64_t[]){1}), 1024);
  CHECK_EQ(padded(TPU_DTYPE_F32, 0, NULL), 512);
  CHECK_EQ(padded(TPU_DTYPE_S64, 2, (int64_t[]){8, 128}), 8192);
  CHECK_EQ(padded(TPU_DTYPE_F64, 2, (int64_t[]){9, 129}), 16 * 256 * 8);
  CHECK_EQ(padded(TPU_DTYPE_BF16, 2, (int64_t[]){17, 129}), 32 * 256 * 2);
  CHECK_EQ(padded(TPU_DTYPE_F32, 4, (int64_t[]){2, 3, 8, 128}), 6 * 4096);
  /* Exactly tiled arrays cost nothing extra. */
  CHECK_EQ(padded(TPU_DTYPE_F32, 2, (int64_t[]){1024, 1024}), 4 * MIB);
  /* Empty arrays occupy nothing. */
  CHECK_EQ(padded(TPU_DTYPE_F32, 2, (int64_t[]){0, 5}), 0);
  CHECK_EQ(padded(TPU_DTYPE_F32, 1, (int64_t[]){0}), 0);
  /* Overflow and bad input. */
  CHECK_EQ(padded(TPU_DTYPE_F32, 2, (int64_t[]){INT64_MAX / 2, 1000}), -1);
  CHECK_EQ(padded(TPU_DTYPE_F32, 1, (int64_t[]){INT64_MAX}), -1);
  CHECK_EQ(padded(TPU_DTYPE_F32, 2, (int64_t[]){INT64_MAX, 1}), -1);
  CHECK_EQ(padded(TPU_DTYPE_F32, 2, (int64_t[]){-1, 5}), -1);
  CHECK_EQ(padded((tpu_dtype_t)99, 2, (int64_t[]){3, 5}), -1);
  CHECK_EQ(tpu_tpu_padded_bytes(TPU_DTYPE_F32, NULL), -1);
}

/* ----------------------------------------------------------------- HBM */

TEST(reserve_192gib) {
  tpu_hbm_t* h = NULL;
  CHECK_OK(tpu_hbm_create(tpu_allocator_system(), chip("7x"), NULL, &h));
  if (!h) return;
  CHECK(tpu_hbm_chip(h) == chip("7x"));
  CHECK(tpu_hbm_reserved_bytes(h) >= 192 * GIB);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.capacity, 192 * GIB);
  CHECK_EQ(s.largest_free, 192 * GIB);
  CHECK_EQ(s.committed, 0);

  void* big = NULL;
  void* small = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 4096, 150 * GIB, 1, &big));
  CHECK_OK(tpu_hbm_alloc(h, 1 * MIB, 1 * MIB, 2, &small));
  if (big && small) {
    CHECK((char*)small - (char*)big == (ptrdiff_t)(150 * GIB));
    memset(big, 0x5a, 4096);
    memset(small, 0xa5, 1 * MIB);
    CHECK(((unsigned char*)small)[MIB - 1] == 0xa5);
    tpu_hbm_stats(h, &s);
    CHECK_EQ(s.committed, 4096 + MIB);
    CHECK_EQ(s.allocated, 150 * GIB + MIB);
    CHECK_EQ(s.largest_free, 192 * GIB - 150 * GIB - MIB);
  }
  tpu_hbm_free(h, big);
  tpu_hbm_free(h, small);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.largest_free, 192 * GIB);
  tpu_hbm_destroy(h);
}

TEST(alloc_write_read) {
  tpu_hbm_t* h = make_hbm("v5e", 0, 0);
  if (!h) return;
  uint64_t dense = 3 * MIB + 17;
  void* p = NULL;
  CHECK_OK(tpu_hbm_alloc(h, dense, 4 * MIB, 42, &p));
  CHECK(p != NULL);
  if (!p) goto out;
  CHECK(((uintptr_t)p & 511) == 0);
  CHECK(tpu_hbm_is_live(h, p));
  CHECK(!tpu_hbm_is_live(h, (char*)p + 512));
  unsigned char* b = p;
  for (uint64_t i = 0; i < dense; i++) b[i] = (unsigned char)(i * 7);
  int bad = 0;
  for (uint64_t i = 0; i < dense; i++) bad += b[i] != (unsigned char)(i * 7);
  CHECK_EQ(bad, 0);

  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 4 * MIB);
  CHECK_EQ(s.allocated_dense, dense);
  CHECK_EQ(s.n_live, 1);
  CHECK_EQ(s.committed,
           (dense + (uint64_t)page_size() - 1) / page_size() * page_size());
  CHECK_EQ(s.free_bytes, 16 * GIB - 4 * MIB);
  CHECK_EQ(s.capacity, 16 * GIB);

  tpu_hbm_block_info_t info[2];
  CHECK_EQ(tpu_hbm_largest_live(h, info, 2), 1);
  CHECK_EQ(info[0].offset, (char*)p - (char*)tpu_hbm_base(h));
  CHECK_EQ(info[0].dense_bytes, dense);
  CHECK_EQ(info[0].padded_bytes, 4 * MIB);
  CHECK_EQ(info[0].tag, 42);

  tpu_hbm_free(h, p);
  CHECK(!tpu_hbm_is_live(h, p));
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.n_frees, 1);
out:
  tpu_hbm_destroy(h);
}

TEST(out_of_hbm_message) {
  tpu_hbm_t* h = make_hbm("v5e", 0, 1ull << 50);
  if (!h) return;
  void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 4096, 8 * GIB, 1, &a));
  CHECK_OK(tpu_hbm_alloc(h, 4096, 4 * GIB, 2, &b));
  CHECK_OK(tpu_hbm_alloc(h, 4096, 512 * MIB, 3, &c));

  tpu_status_t st = tpu_hbm_alloc(h, 3 * GIB, 4 * GIB, 4, &d);
  CHECK(d == NULL);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
  if (st) {
    CHECK_MSG_HAS(st, "vTPU v5e HBM out of memory");
    CHECK_MSG_HAS(st, "tried to allocate 4.00 GiB");
    CHECK_MSG_HAS(st, "(3221225472 bytes; 4294967296 bytes with TPU tiling)");
    CHECK_MSG_HAS(st, "3.50 GiB free of 16.00 GiB capacity");
    CHECK_MSG_HAS(st, "(largest free block 3.50 GiB)");
    CHECK_MSG_HAS(st,
                  "Largest live allocations: 8.00 GiB, 4.00 GiB, 512.00 MiB.");
    CHECK_MSG_HAS(st, "del, or set them to None");
    CHECK_MSG_HAS(st, "reduce the batch size");
    CHECK_MSG_HAS(st, "TORCHTPU_CHIP");
  }
  tpu_status_free(st);

  /* A hole: more free bytes than the request, but no block large enough. */
  tpu_hbm_free(h, b);
  st = tpu_hbm_alloc(h, 0, 5 * GIB, 5, &d);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
  if (st) {
    CHECK_MSG_HAS(st, "7.50 GiB free of 16.00 GiB capacity");
    CHECK_MSG_HAS(st, "(largest free block 4.00 GiB)");
    CHECK_MSG_HAS(st, "Largest live allocations: 8.00 GiB, 512.00 MiB.");
  }
  tpu_status_free(st);
  /* ...and exactly the largest free block still fits. */
  CHECK_OK(tpu_hbm_alloc(h, 0, 4 * GIB, 6, &d));
  tpu_hbm_free(h, d);

  /* Larger than the whole chip. */
  CHECK_CODE(tpu_hbm_alloc(h, 0, 100 * GIB, 7, &d), RESOURCE_EXHAUSTED);
  CHECK_CODE(tpu_hbm_alloc(h, 0, UINT64_MAX, 7, &d), RESOURCE_EXHAUSTED);

  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.n_failed, 4);
  CHECK_EQ(s.n_allocs, 4);
  CHECK_EQ(s.allocated, 8 * GIB + 512 * MIB);
  tpu_hbm_free(h, a);
  tpu_hbm_free(h, c);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.largest_free, 16 * GIB);

  /* With nothing live the message says so. */
  st = tpu_hbm_alloc(h, 0, 17 * GIB, 8, &d);
  if (st) CHECK_MSG_HAS(st, "Largest live allocations: none.");
  tpu_status_free(st);
  tpu_hbm_destroy(h);
}

TEST(zero_byte_alloc) {
  tpu_hbm_t* h = make_hbm("v5e", 0, 0);
  if (!h) return;
  void *a = NULL, *b = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 0, 0, 0, &a));
  CHECK_OK(tpu_hbm_alloc(h, 0, 0, 0, &b));
  CHECK(a != NULL && b != NULL && a != b);
  CHECK(((uintptr_t)a & 511) == 0 && ((uintptr_t)b & 511) == 0);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 1024);
  CHECK_EQ(s.allocated_dense, 0);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.n_live, 2);
  tpu_hbm_free(h, a);
  tpu_hbm_free(h, b);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.largest_free, 16 * GIB);
  tpu_hbm_destroy(h);
}

TEST(page_sharing) {
  long ps = page_size();
  tpu_hbm_t* h = make_hbm("v5e", 1 * MIB, 0);
  if (!h) return;
  tpu_hbm_stats_t s;
  void *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 512, 512, 0, &a));
  CHECK_OK(tpu_hbm_alloc(h, 100, 512, 0, &b));
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, ps);
  /* The page is shared with b: it stays committed and readable. */
  tpu_hbm_free(h, a);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, ps);
  ((volatile char*)b)[99] = 1;
  /* A block straddling a page boundary commits both pages. */
  CHECK_OK(tpu_hbm_alloc(h, (uint64_t)ps, (uint64_t)ps + 512, 0, &c));
  CHECK_EQ((char*)c - (char*)tpu_hbm_base(h), 1024);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 2 * ps);
  tpu_hbm_free(h, b);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 2 * ps);
  tpu_hbm_free(h, c);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.largest_free, 1 * MIB);

  /* A capacity that is not a page multiple: the last page is still
   * released. */
  tpu_hbm_t* h2 = make_hbm("v5e", (uint64_t)ps + 512, 0);
  if (h2) {
    void* p = NULL;
    CHECK_OK(tpu_hbm_alloc(h2, 1, (uint64_t)ps + 512, 0, &p));
    CHECK_CODE(tpu_hbm_alloc(h2, 1, 1, 0, &c), RESOURCE_EXHAUSTED);
    tpu_hbm_free(h2, p);
    CHECK_OK(tpu_hbm_alloc(h2, 512, (uint64_t)ps, 0, &a));
    CHECK_OK(tpu_hbm_alloc(h2, 512, 512, 0, &b));
    tpu_hbm_stats(h2, &s);
    CHECK_EQ(s.committed, 2 * ps);
    tpu_hbm_free(h2, b);
    tpu_hbm_stats(h2, &s);
    CHECK_EQ(s.committed, ps);
    tpu_hbm_free(h2, a);
    tpu_hbm_stats(h2, &s);
    CHECK_EQ(s.committed, 0);
    tpu_hbm_destroy(h2);
  }
  tpu_hbm_destroy(h);
}

TEST(coalescing) {
  tpu_hbm_t* h = make_hbm("v5e", 1 * GIB, 1ull << 40);
  if (!h) return;
  enum { N = 600 };
  void* p[N];
  uint64_t sizes[N];
  rng_t r = {7};
  int n = 0;
  for (int i = 0; i < N; i++) {
    sizes[i] = 1 + rng_below(&r, 4 * MIB);
    tpu_status_t st = tpu_hbm_alloc(h, 512, sizes[i], (uint64_t)i, &p[n]);
    if (st) {
      CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
      tpu_status_free(st);
      break;
    }
    n++;
  }
  CHECK(n > 100);
  /* Free every other block: free space is fragmented. */
  for (int i = 0; i < n; i += 2) tpu_hbm_free(h, p[i]);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK(s.largest_free < s.free_bytes);
  /* Free the rest in a scrambled order. */
  for (int i = n - 1 - ((n - 1) % 2 == 0); i > 0; i -= 2) {
    int j = 1 + 2 * (int)rng_below(&r, (uint64_t)(i + 1) / 2);
    void* t = p[i];
    p[i] = p[j];
    p[j] = t;
  }
  for (int i = 1; i < n; i += 2) tpu_hbm_free(h, p[i]);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.allocated_dense, 0);
  CHECK_EQ(s.n_live, 0);
  CHECK_EQ(s.largest_free, 1 * GIB);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.n_allocs, n);
  CHECK_EQ(s.n_frees, n);
  /* The whole capacity is one block again. */
  void* all = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 0, 1 * GIB, 0, &all));
  tpu_hbm_free(h, all);
  tpu_hbm_destroy(h);
}

TEST(largest_live_and_peak) {
  tpu_hbm_t* h = make_hbm("v5e", 0, 0);
  if (!h) return;
  uint64_t sizes[] = {3 * MIB, 1 * MIB, 7 * MIB, 512, 7 * MIB, 2 * MIB};
  void* p[6];
  for (int i = 0; i < 6; i++)
    CHECK_OK(tpu_hbm_alloc(h, 100, sizes[i], (uint64_t)i, &p[i]));
  tpu_hbm_block_info_t info[4];
  CHECK_EQ(tpu_hbm_largest_live(h, info, 4), 4);
  CHECK_EQ(info[0].padded_bytes, 7 * MIB);
  CHECK_EQ(info[0].tag, 2); /* equal sizes: lower address first */
  CHECK_EQ(info[1].tag, 4);
  CHECK_EQ(info[2].tag, 0);
  CHECK_EQ(info[3].tag, 5);
  CHECK_EQ(tpu_hbm_largest_live(h, info, 0), 0);

  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  uint64_t total = 20 * MIB + 512;
  CHECK_EQ(s.peak, total);
  CHECK_EQ(s.peak_dense, 600);
  tpu_hbm_free(h, p[2]);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.peak, total);
  tpu_hbm_reset_peak(h);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.peak, total - 7 * MIB);
  CHECK_EQ(s.peak_dense, 500);
  for (int i = 0; i < 6; i++)
    if (i != 2) tpu_hbm_free(h, p[i]);
  tpu_hbm_destroy(h);
}

TEST(invalid_arguments) {
  tpu_hbm_t* h = make_hbm("v5e", 0, 0);
  if (!h) return;
  void* p = (void*)1;
  CHECK_CODE(tpu_hbm_alloc(h, 4096, 512, 0, &p), INVALID_ARGUMENT);
  CHECK(p == NULL);
  CHECK_CODE(tpu_hbm_alloc(NULL, 0, 0, 0, &p), INVALID_ARGUMENT);
  CHECK_CODE(tpu_hbm_alloc(h, 0, 0, 0, NULL), INVALID_ARGUMENT);

  uint64_t before = tpu_invariant_surprises;
  CHECK_OK(tpu_hbm_alloc(h, 0, 0, 0, &p));
  int on_stack = 0;
  tpu_hbm_free(h, &on_stack);
  tpu_hbm_free(h, (char*)p + 512);
  tpu_hbm_free(h, (char*)p + 1);
  CHECK_EQ(tpu_invariant_surprises - before, 3);
  CHECK(tpu_hbm_is_live(h, p));
  tpu_hbm_free(h, p);
  tpu_hbm_free(h, p); /* double free: ignored, counted */
  CHECK_EQ(tpu_invariant_surprises - before, 4);
  tpu_hbm_free(h, NULL);
  CHECK_EQ(tpu_invariant_surprises - before, 4);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.n_frees, 1);
  CHECK_EQ(s.n_live, 0);
  tpu_hbm_destroy(h);

  tpu_hbm_t* h2 = (tpu_hbm_t*)1;
  CHECK_CODE(tpu_hbm_create(tpu_allocator_system(), NULL, NULL, &h2),
             INVALID_ARGUMENT);
  CHECK(h2 == NULL);
  tpu_hbm_options_t o = {100, 0, true, 0};
  CHECK_CODE(tpu_hbm_create(tpu_allocator_system(), chip("v5e"), &o, &h2),
             INVALID_ARGUMENT);
  o.capacity = 1ull << 62;
  CHECK_CODE(tpu_hbm_create(tpu_allocator_system(), chip("v5e"), &o, &h2),
             INVALID_ARGUMENT);
  /* Larger than any process's address space: refused by mmap, not by a
   * crash while sizing metadata for it. */
  o.capacity = 1ull << 56;
  tpu_status_t st =
      tpu_hbm_create(tpu_allocator_system(), chip("v5e"), &o, &h2);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
  if (st) CHECK_MSG_HAS(st, "could not reserve 64.00 PiB of host address");
  tpu_status_free(st);
  CHECK(h2 == NULL);
  tpu_hbm_destroy(NULL);
}

TEST(host_budget) {
  tpu_hbm_t* h = make_hbm("v5e", 0, 64 * MIB);
  if (!h) return;
  void* p = NULL;
  tpu_status_t st = tpu_hbm_alloc(h, 100 * MIB, 100 * MIB, 0, &p);
  CHECK(p == NULL);
  CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
  if (st) {
    CHECK_MSG_HAS(st, "host memory limit is 64.00 MiB");
    CHECK_MSG_HAS(st, "host would run out of memory before the vTPU's HBM");
    CHECK_MSG_HAS(st, "TORCHTPU_HOST_MEMORY_LIMIT");
    CHECK_MSG_HAS(st, "v5e");
  }
  tpu_status_free(st);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.n_failed, 1);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.largest_free, 16 * GIB);

  /* Padding costs HBM but no host memory. */
  void *a = NULL, *b = NULL, *c = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 32 * MIB, 8 * GIB, 0, &a));
  CHECK_OK(tpu_hbm_alloc(h, 32 * MIB, 32 * MIB, 0, &b));
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 64 * MIB);
  CHECK_CODE(tpu_hbm_alloc(h, 1, 512, 0, &c), RESOURCE_EXHAUSTED);
  /* Zero dense bytes need no host memory. */
  CHECK_OK(tpu_hbm_alloc(h, 0, 512, 0, &c));
  tpu_hbm_free(h, a);
  tpu_hbm_free(h, b);
  tpu_hbm_free(h, c);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 0);
  CHECK_EQ(s.n_failed, 2);
  tpu_hbm_destroy(h);

  /* The default limit comes from /proc/meminfo: small tensors fit, a
   * tensor larger than any host cannot. */
  h = make_hbm("7x", 0, 0);
  if (!h) return;
  CHECK_OK(tpu_hbm_alloc(h, 1 * MIB, 1 * MIB, 0, &a));
  st = tpu_hbm_alloc(h, 150 * GIB, 150 * GIB, 0, &b);
  FILE* f = fopen("/proc/meminfo", "r");
  if (f) {
    fclose(f);
    CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
    if (st) CHECK_MSG_HAS(st, "MemAvailable");
  }
  tpu_status_free(st);
  tpu_hbm_free(h, a);
  tpu_hbm_free(h, b);
  tpu_hbm_destroy(h);
}

TEST(host_allocation_failures) {
  /* Every host allocation the HBM makes may fail; each failure must be a
   * status, and nothing may leak. */
  for (uint64_t k = 1; k <= 24; k++) {
    tpu_fault_allocator_t fa = {0, k, false, 0};
    tpu_hbm_options_t o = {64 * MIB, 1ull << 40, true, 0};
    tpu_hbm_t* h = NULL;
    tpu_status_t st =
        tpu_hbm_create(tpu_fault_allocator(&fa), chip("v5e"), &o, &h);
    if (st) {
      CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
      CHECK(h == NULL);
      tpu_status_free(st);
      CHECK_EQ(fa.live, 0);
      continue;
    }
    enum { N = 3000 };
    static void* p[N];
    int n = 0, failed = 0;
    for (int i = 0; i < N; i++) {
      st = tpu_hbm_alloc(h, i % 2 ? 512 : 0, 512, 0, &p[n]);
      if (st) {
        failed++;
        CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
        tpu_status_free(st);
      } else {
        n++;
      }
    }
    tpu_hbm_stats_t s;
    tpu_hbm_stats(h, &s);
    CHECK_EQ(s.n_live, n);
    CHECK_EQ(s.n_failed, failed);
    CHECK(failed <= 1);
    for (int i = 0; i < n; i++) tpu_hbm_free(h, p[i]);
    tpu_hbm_stats(h, &s);
    CHECK_EQ(s.largest_free, 64 * MIB);
    CHECK_EQ(s.committed, 0);
    tpu_hbm_destroy(h);
    CHECK_EQ(fa.live, 0);
  }
}

/* ----------------------------------------------------- randomized trace */

/* Frees handed to worker threads, so that blocks are freed from threads
 * other than the one that allocated them. */
typedef struct free_queue_s {
  pthread_mutex_t mu;
  pthread_cond_t nonempty, drained;
  void* items[1 << 14];
  uint64_t dense[1 << 14];
  unsigned char sig[1 << 14];
  size_t head, count, busy;
  bool stop;
  tpu_hbm_t* hbm;
  atomic_int corrupt;
} free_queue_t;

static void* free_worker(void* arg) {
  free_queue_t* q = arg;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->count && !q->stop) pthread_cond_wait(&q->nonempty, &q->mu);
    if (!q->count) break;
    size_t i = q->head;
    q->head = (q->head + 1) % TPU_ARRAY_SIZE(q->items);
    q->count--;
    q->busy++;
    void* p = q->items[i];
    uint64_t dense = q->dense[i];
    unsigned char sig = q->sig[i];
    pthread_mutex_unlock(&q->mu);

    unsigned char* b = p;
    if (b[0] != sig || b[dense - 1] != sig) atomic_fetch_add(&q->corrupt, 1);
    tpu_hbm_free(q->hbm, p);

    pthread_mutex_lock(&q->mu);
    q->busy--;
    if (!q->count && !q->busy) pthread_cond_broadcast(&q->drained);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

static void queue_push(free_queue_t* q, void* p, uint64_t dense,
                       unsigned char sig) {
  pthread_mutex_lock(&q->mu);
  while (q->count == TPU_ARRAY_SIZE(q->items))
    pthread_cond_wait(&q->drained, &q->mu);
  size_t i = (q->head + q->count) % TPU_ARRAY_SIZE(q->items);
  q->items[i] = p;
  q->dense[i] = dense;
  q->sig[i] = sig;
  q->count++;
  pthread_cond_signal(&q->nonempty);
  pthread_mutex_unlock(&q->mu);
}

static void queue_drain(free_queue_t* q) {
  pthread_mutex_lock(&q->mu);
  while (q->count || q->busy) pthread_cond_wait(&q->drained, &q->mu);
  pthread_mutex_unlock(&q->mu);
}

typedef struct live_rec_s {
  char* p;
  uint64_t dense, size;
  unsigned char sig;
} live_rec_t;

static int cmp_rec(const void* a, const void* b) {
  const live_rec_t *x = a, *y = b;
  return x->p < y->p ? -1 : x->p > y->p;
}

TEST(randomized_trace) {
  const uint64_t cap = 64 * GIB;
  const long ps = page_size();
  tpu_hbm_t* h = make_hbm("v5p", cap, 1ull << 50);
  if (!h) return;
  char* base = tpu_hbm_base(h);

  static free_queue_t q;
  memset(&q, 0, sizeof(q));
  pthread_mutex_init(&q.mu, NULL);
  pthread_cond_init(&q.nonempty, NULL);
  pthread_cond_init(&q.drained, NULL);
  q.hbm = h;
  pthread_t workers[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&workers[i], NULL, free_worker, &q);

  enum { MAX_LIVE = 1500, OPS = 40000, CHECK_EVERY = 2500 };
  static live_rec_t live[MAX_LIVE];
  int n_live = 0, n_big = 0;
  uint64_t sum_size = 0, sum_dense = 0, n_allocs = 0, n_frees = 0,
           n_failed = 0, n_remote = 0;
  rng_t r = {12345};
  int bad_sig = 0, bad_overlap = 0, bad_live = 0, checkpoints = 0;

  for (int op = 0; op < OPS; op++) {
    /* Big blocks are mostly freed quickly; in every other phase they are
     * left to pile up until the HBM runs out, to exercise that path too.
     * Only two bytes of each block are touched, so host memory stays small
     * either way. */
    bool hoard = (op / 5000) % 2 == 1;
    bool do_free;
    if (n_live == 0)
      do_free = false;
    else if (n_live >= MAX_LIVE || (n_big && !hoard && rng_unit(&r) < 0.5))
      do_free = true;
    else
      do_free = rng_unit(&r) < 0.45;

    if (!do_free) {
      uint64_t dense = (uint64_t)exp2(rng_unit(&r) * 30.0);
      if (dense < 1) dense = 1;
      uint64_t pad = dense;
      uint64_t kind = rng_below(&r, 4);
      if (kind == 1) pad = dense + dense / 2;
      if (kind == 2) pad = dense * 2;
      void* p = NULL;
      tpu_status_t st = tpu_hbm_alloc(h, dense, pad, (uint64_t)op, &p);
      if (st) {
        CHECK_EQ(tpu_status_code(st), TPU_STATUS_RESOURCE_EXHAUSTED);
        tpu_status_free(st);
        n_failed++;
        continue;
      }
      unsigned char sig = (unsigned char)(op * 131 + 7);
      ((unsigned char*)p)[0] = sig;
      ((unsigned char*)p)[dense - 1] = sig;
      live[n_live++] = (live_rec_t){p, dense, round512(pad), sig};
      sum_size += round512(pad);
      sum_dense += dense;
      n_allocs++;
      if (dense >= 16 * MIB) n_big++;
    } else {
      int i;
      if (n_big && !hoard && rng_unit(&r) < 0.9) {
        /* Pick a big one. */
        do i = (int)rng_below(&r, (uint64_t)n_live);
        while (live[i].dense < 16 * MIB);
      } else {
        i = (int)rng_below(&r, (uint64_t)n_live);
      }
      live_rec_t rec = live[i];
      live[i] = live[--n_live];
      sum_size -= rec.size;
      sum_dense -= rec.dense;
      n_frees++;
      if (rec.dense >= 16 * MIB) n_big--;
      if (rng_unit(&r) < 0.5) {
        queue_push(&q, rec.p, rec.dense, rec.sig);
        n_remote++;
      } else {
        unsigned char* b = (unsigned char*)rec.p;
        bad_sig += b[0] != rec.sig || b[rec.dense - 1] != rec.sig;
        tpu_hbm_free(h, rec.p);
      }
    }

    if (op % CHECK_EVERY == CHECK_EVERY - 1) {
      queue_drain(&q);
      checkpoints++;
      tpu_hbm_stats_t s;
      tpu_hbm_stats(h, &s);
      CHECK_EQ(s.allocated, sum_size);
      CHECK_EQ(s.allocated_dense, sum_dense);
      CHECK_EQ(s.n_live, n_live);
      CHECK_EQ(s.n_allocs, n_allocs);
      CHECK_EQ(s.n_frees, n_frees);
      CHECK_EQ(s.n_failed, n_failed);
      CHECK_EQ(s.free_bytes, cap - sum_size);
      CHECK(s.largest_free <= s.free_bytes);
      CHECK(s.peak >= s.allocated);
      CHECK_EQ(s.committed % (uint64_t)ps, 0);
      /* Committed pages: at least the whole pages inside each dense part,
       * at most the pages each dense part touches. */
      uint64_t lo = 0, hi = 0;
      for (int i = 0; i < n_live; i++) {
        uint64_t off = (uint64_t)(live[i].p - base), end = off + live[i].dense;
        uint64_t p0 = off / ps, p1 = (end + ps - 1) / ps;
        uint64_t w0 = (off + ps - 1) / ps, w1 = end / ps;
        hi += (p1 - p0) * ps;
        if (w1 > w0) lo += (w1 - w0) * ps;
      }
      CHECK(s.committed >= lo && s.committed <= hi);
      /* Live blocks are disjoint and inside the capacity. */
      qsort(live, (size_t)n_live, sizeof(live[0]), cmp_rec);
      for (int i = 0; i < n_live; i++) {
        if (live[i].p < base || live[i].p + live[i].size > base + cap)
          bad_overlap++;
        if (i && live[i - 1].p + live[i - 1].size > live[i].p) bad_overlap++;
        if (!tpu_hbm_is_live(h, live[i].p)) bad_live++;
      }
      if (n_live) {
        tpu_hbm_block_info_t top;
        uint64_t max_size = 0;
        for (int i = 0; i < n_live; i++)
          max_size = TPU_MAX(max_size, live[i].size);
        CHECK_EQ(tpu_hbm_largest_live(h, &top, 1), 1);
        CHECK_EQ(top.padded_bytes, max_size);
      }
    }
  }

  /* Free everything, half of it remotely. */
  for (int i = 0; i < n_live; i++) {
    unsigned char* b = (unsigned char*)live[i].p;
    bad_sig += b[0] != live[i].sig || b[live[i].dense - 1] != live[i].sig;
    if (i % 2)
      queue_push(&q, live[i].p, live[i].dense, live[i].sig);
    else
      tpu_hbm_free(h, live[i].p);
    n_frees++;
  }
  queue_drain(&q);
  pthread_mutex_lock(&q.mu);
  q.stop = true;
  pthread_cond_broadcast(&q.nonempty);
  pthread_mutex_unlock(&q.mu);
  for (int i = 0; i < 2; i++) pthread_join(workers[i], NULL);

  CHECK_EQ(bad_sig, 0);
  CHECK_EQ(atomic_load(&q.corrupt), 0);
  CHECK_EQ(bad_overlap, 0);
  CHECK_EQ(bad_live, 0);
  CHECK(checkpoints >= 10);
  CHECK(n_remote > 1000);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.allocated_dense, 0);
  CHECK_EQ(s.n_live, 0);
  CHECK_EQ(s.n_allocs, n_allocs);
  CHECK_EQ(s.n_frees, n_frees);
  CHECK_EQ(s.largest_free, cap);
  CHECK_EQ(s.committed, 0);
  fprintf(stderr,
          "        trace: %d ops, %llu allocs, %llu frees (%llu on other "
          "threads), %llu out of memory, peak %.1f GiB\n",
          (int)OPS, (unsigned long long)n_allocs, (unsigned long long)n_frees,
          (unsigned long long)n_remote, (unsigned long long)n_failed,
          (double)s.peak / (double)GIB);
  pthread_mutex_destroy(&q.mu);
  pthread_cond_destroy(&q.nonempty);
  pthread_cond_destroy(&q.drained);
  tpu_hbm_destroy(h);
}

/* ---------------------------------------------------------------- perf */

/* Not an assertion: a figure to watch. */
static double pair_ns(tpu_hbm_t* h, uint64_t dense, uint64_t pad, int iters) {
  uint64_t t0 = tpu_now_ns();
  for (int i = 0; i < iters; i++) {
    void* p = NULL;
    tpu_status_t st = tpu_hbm_alloc(h, dense, pad, 0, &p);
    if (st) {
      tpu_status_free(st);
      return -1;
    }
    tpu_hbm_free(h, p);
  }
  return (double)(tpu_now_ns() - t0) / iters;
}

TEST(perf_sanity) {
  tpu_hbm_t* h = make_hbm("v5p", 0, 1ull << 50);
  if (!h) return;
  /* A populated arena: 2000 live blocks of assorted sizes, with one of them
   * keeping the first page committed. */
  enum { N = 2000 };
  static void* keep[N];
  rng_t r = {99};
  for (int i = 0; i < N; i++) {
    uint64_t sz = 512 * (1 + rng_below(&r, 4096));
    CHECK_OK(tpu_hbm_alloc(h, i == 0 ? 512 : 0, sz, 0, &keep[i]));
  }
  /* Free a third to populate the free lists. */
  for (int i = 1; i < N; i += 3) {
    tpu_hbm_free(h, keep[i]);
    keep[i] = NULL;
  }
  double meta = pair_ns(h, 0, 4096, 200000);
  double mixed = 0;
  {
    uint64_t t0 = tpu_now_ns();
    int iters = 200000;
    for (int i = 0; i < iters; i++) {
      void* p = NULL;
      uint64_t sz = 512 * (1 + (rng_next(&r) & 2047));
      tpu_status_t st = tpu_hbm_alloc(h, 0, sz, 0, &p);
      if (st) tpu_status_free(st);
      tpu_hbm_free(h, p);
    }
    mixed = (double)(tpu_now_ns() - t0) / iters;
  }
  double syscalls = pair_ns(h, 64 * KIB, 64 * KIB, 20000);
  /* Small dense tensors whose page is kept committed by a live neighbour:
   * the dense path without syscalls. */
  tpu_hbm_t* h2 = make_hbm("v5e", 1 * GIB, 0);
  double shared = -1;
  if (h2) {
    void* pin = NULL;
    CHECK_OK(tpu_hbm_alloc(h2, 512, 512, 0, &pin));
    shared = pair_ns(h2, 512, 512, 200000);
    tpu_hbm_free(h2, pin);
    tpu_hbm_destroy(h2);
  }
  fprintf(stderr,
          "        perf: alloc+free pair %.0f ns (no host commit), %.0f ns "
          "(mixed sizes, no commit), %.0f ns (512 B dense in a shared "
          "committed page), %.0f ns (64 KiB dense: mprotect + madvise)\n",
          meta, mixed, shared, syscalls);
  for (int i = 0; i < N; i++) tpu_hbm_free(h, keep[i]);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.committed, 0);
  tpu_hbm_destroy(h);
}

TEST(freed_pages_are_cached_then_trimmed) {
  tpu_hbm_options_t o = {64ull << 20, 1ull << 40, true, 8ull << 20};
  const tpu_chip_spec_t* chip = NULL;
  CHECK_OK(tpu_chip_spec_find("v5e", &chip));
  tpu_hbm_t* h = NULL;
  CHECK_OK(tpu_hbm_create(tpu_allocator_system(), chip, &o, &h));
  if (!h) return;
  void* p = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 1 << 20, 1 << 20, 0, &p));
  memset(p, 1, 1 << 20);
  tpu_hbm_free(h, p);
  tpu_hbm_stats_t s;
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.allocated, 0);
  CHECK_EQ(s.committed, 1 << 20); /* kept for reuse */
  void* q = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 1 << 20, 1 << 20, 0, &q));
  CHECK(q == p);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 1 << 20); /* reused, nothing newly committed */
  tpu_hbm_free(h, q);
  /* alloc/free traffic far beyond the limit keeps reusing the cached pages */
  for (int i = 0; i < 40; i++) {
    CHECK_OK(tpu_hbm_alloc(h, 1 << 20, 1 << 20, 0, &q));
    CHECK(q == p);
    tpu_hbm_free(h, q);
    tpu_hbm_stats(h, &s);
    CHECK_EQ(s.committed, 1 << 20);
  }
  /* more free committed memory than the limit is released */
  void* many[12];
  for (int i = 0; i < 12; i++) CHECK_OK(tpu_hbm_alloc(h, 1 << 20, 1 << 20, 0, &many[i]));
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 12u << 20);
  for (int i = 0; i < 12; i++) tpu_hbm_free(h, many[i]);
  tpu_hbm_stats(h, &s);
  CHECK(s.committed <= (8u << 20));
  tpu_hbm_trim(h);
  tpu_hbm_stats(h, &s);
  CHECK_EQ(s.committed, 0);
  tpu_hbm_destroy(h);
}

TEST(cached_pages_are_trimmed_before_a_host_limit_error) {
  tpu_hbm_options_t o = {64ull << 20, 6ull << 20, true, 32ull << 20};
  const tpu_chip_spec_t* chip = NULL;
  CHECK_OK(tpu_chip_spec_find("v5e", &chip));
  tpu_hbm_t* h = NULL;
  CHECK_OK(tpu_hbm_create(tpu_allocator_system(), chip, &o, &h));
  if (!h) return;
  void *a = NULL, *b = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 4 << 20, 4 << 20, 0, &a));
  tpu_hbm_free(h, a);                 /* 4 MiB stays committed */
  CHECK_OK(tpu_hbm_alloc(h, 4 << 20, 4 << 20, 0, &a));
  CHECK_OK(tpu_hbm_alloc(h, 1 << 20, 1 << 20, 0, &b));
  tpu_hbm_free(h, a);
  /* 5 MiB needed at a fresh address: only fits after the cache is trimmed */
  void* c = NULL;
  CHECK_OK(tpu_hbm_alloc(h, 5 << 20, 5 << 20, 0, &c));
  tpu_hbm_free(h, b);
  tpu_hbm_free(h, c);
  tpu_hbm_destroy(h);
}

int main(void) {
  RUN(freed_pages_are_cached_then_trimmed);
  RUN(cached_pages_are_trimmed_before_a_host_limit_error);
  RUN(chip_table);
  RUN(padded_bytes);
  RUN(reserve_192gib);
  RUN(alloc_write_read);
  RUN(out_of_hbm_message);
  RUN(zero_byte_alloc);
  RUN(page_sharing);
  RUN(coalescing);
  RUN(largest_live_and_peak);
  RUN(invalid_arguments);
  RUN(host_budget);
  RUN(host_allocation_failures);
  RUN(randomized_trace);
  RUN(perf_sanity);
  return harness_report();
}

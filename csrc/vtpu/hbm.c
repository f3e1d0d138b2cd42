/* The vTPU's HBM: a reservation of host address space carved up by a TLSF
 * (two-level segregated fit) allocator.
 *
 * Why this shape:
 *  - A TPU's HBM is a fixed-size space in which padding and fragmentation are
 *    real; modelling it as a reserved range with padded block sizes makes
 *    out-of-memory happen where it would on the chip (and not earlier or
 *    later), while the host only pays for the dense bytes tensors use.
 *  - The reservation is PROT_NONE and MAP_NORESERVE, so reserving 192 GiB on
 *    a small host costs nothing; only the dense prefix of each block is made
 *    readable/writable. Stray accesses to padding or freed HBM fault.
 *  - Block headers live out of band, so freed pages can be returned to the
 *    kernel and the arena never has to be touched to manage it.
 *  - TLSF gives O(1) allocation and free with bounded fragmentation; blocks
 *    are placed at the low end of the chosen free block.
 *
 * Committed pages are tracked exactly with one bit per page of the
 * reservation, in 4 KiB leaves allocated when a region is first committed
 * (at most 6 MiB for 192 GiB, nothing for regions never used). A page is
 * committed when the dense part of an allocation first touches it, and
 * released (MADV_DONTNEED, then PROT_NONE) when a free leaves it wholly inside
 * a free range; a page shared with a live neighbour stays committed until
 * that neighbour goes too.
 *
 * Syscalls (mprotect/madvise) are made under the mutex: releasing outside it
 * could revoke a page that another thread has just committed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vtpu/hbm_impl.h"

#define KIB (1024ull)
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

/* Re-read /proc/meminfo after this many bytes of new commits. */
#define TPU_HBM_HOST_REFRESH (256ull * MIB)
#define TPU_HBM_INITIAL_BUCKETS_BITS 10
/* How many of the largest live allocations an out-of-memory error names. */
#define TPU_HBM_OOM_TOP 3

/* ----------------------------------------------------------- formatting */

typedef struct size_text_s {
  char s[32];
} size_text_t;

/* Human-readable size: "512 bytes", "1.50 GiB". */
static size_text_t size_text(uint64_t b) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  size_text_t t;
  if (b < KIB) {
    snprintf(t.s, sizeof(t.s), "%llu bytes", (unsigned long long)b);
    return t;
  }
  double v = (double)b / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < TPU_ARRAY_SIZE(kUnits)) {
    v /= 1024.0;
    u++;
  }
  snprintf(t.s, sizeof(t.s), "%.2f %s", v, kUnits[u]);
  return t;
}

/* ------------------------------------------------------ page bitmap */

static uint64_t word_mask(uint64_t bit, uint64_t take) {
  return (take == 64 ? ~0ull : ((1ull << take) - 1)) << bit;
}

static uint64_t bits_count(const uint64_t* m, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  while (lo < hi) {
    uint64_t bit = lo & 63, take = TPU_MIN(64 - bit, hi - lo);
    n += (uint64_t)__builtin_popcountll(m[lo >> 6] & word_mask(bit, take));
    lo += take;
  }
  return n;
}

static void bits_set(uint64_t* m, uint64_t lo, uint64_t hi, bool value) {
  while (lo < hi) {
    uint64_t bit = lo & 63, take = TPU_MIN(64 - bit, hi - lo);
    if (value)
      m[lo >> 6] |= word_mask(bit, take);
    else
      m[lo >> 6] &= ~word_mask(bit, take);
    lo += take;
  }
}

/* First set bit in [lo, hi); hi if none. */
static uint64_t bits_first(const uint64_t* m, uint64_t lo, uint64_t hi) {
  while (lo < hi) {
    uint64_t bit = lo & 63, take = TPU_MIN(64 - bit, hi - lo);
    uint64_t w = m[lo >> 6] & word_mask(bit, take);
    if (w) return (lo & ~63ull) + (uint64_t)__builtin_ctzll(w);
    lo += take;
  }
  return hi;
}

/* Last set bit in [lo, hi); hi if none. */
static uint64_t bits_last(const uint64_t* m, uint64_t lo, uint64_t hi) {
  uint64_t end = hi;
  while (lo < end) {
    uint64_t first = TPU_MAX(lo, (end - 1) & ~63ull);
    uint64_t bit = first & 63, take = end - first;
    uint64_t w = m[first >> 6] & word_mask(bit, take);
    if (w) return (first & ~63ull) + 63 - (uint64_t)__builtin_clzll(w);
    end = first;
  }
  return hi;
}

/* The same operations over the two-level map; page numbers are global. A
 * missing leaf reads as all clear. */
typedef struct leaf_span_s {
  uint64_t leaf, lo, hi; /* lo, hi: leaf-local page numbers */
} leaf_span_t;

static leaf_span_t leaf_span(uint64_t lo, uint64_t hi) {
  leaf_span_t s;
  s.leaf = lo >> TPU_HBM_LEAF_SHIFT;
  uint64_t start = s.leaf << TPU_HBM_LEAF_SHIFT;
  s.lo = lo - start;
  s.hi = TPU_MIN(hi - start, TPU_HBM_LEAF_PAGES);
  return s;
}

static uint64_t map_count(const tpu_hbm_t* h, uint64_t lo, uint64_t hi) {
  uint64_t n = 0;
  while (lo < hi) {
    leaf_span_t s = leaf_span(lo, hi);
    const uint64_t* m = h->page_leaves[s.leaf];
    if (m) n += bits_count(m, s.lo, s.hi);
    lo += s.hi - s.lo;
  }
  return n;
}

/* Leaves for [lo, hi) must exist when value is true (map_reserve). */
static void map_set(tpu_hbm_t* h, uint64_t lo, uint64_t hi, bool value) {
  while (lo < hi) {
    leaf_span_t s = leaf_span(lo, hi);
    uint64_t* m = h->page_leaves[s.leaf];
    TPU_ASSERT(m || !value);
    if (m) bits_set(m, s.lo, s.hi, value);
    lo += s.hi - s.lo;
  }
}

static bool map_reserve(tpu_hbm_t* h, uint64_t lo, uint64_t hi) {
  if (lo >= hi) return true;
  for (uint64_t i = lo >> TPU_HBM_LEAF_SHIFT;
       i <= (hi - 1) >> TPU_HBM_LEAF_SHIFT; i++) {
    if (h->page_leaves[i]) continue;
    size_t bytes = TPU_HBM_LEAF_PAGES / 8;
    uint64_t* m = tpu_alloc(h->allocator, bytes);
    if (!m) return false;
    memset(m, 0, bytes);
    h->page_leaves[i] = m;
  }
  return true;
}

/* First committed page in [lo, hi); hi if none. */
static uint64_t map_first(const tpu_hbm_t* h, uint64_t lo, uint64_t hi) {
  while (lo < hi) {
    leaf_span_t s = leaf_span(lo, hi);
    const uint64_t* m = h->page_leaves[s.leaf];
    if (m) {
      uint64_t i = bits_first(m, s.lo, s.hi);
      if (i < s.hi) return (s.leaf << TPU_HBM_LEAF_SHIFT) + i;
    }
    lo += s.hi - s.lo;
  }
  return hi;
}

/* Last committed page in [lo, hi); hi if none. */
static uint64_t map_last(const tpu_hbm_t* h, uint64_t lo, uint64_t hi) {
  uint64_t end = hi;
  while (lo < end) {
    uint64_t leaf = (end - 1) >> TPU_HBM_LEAF_SHIFT;
    uint64_t start = leaf << TPU_HBM_LEAF_SHIFT;
    uint64_t from = TPU_MAX(lo, start);
    const uint64_t* m = h->page_leaves[leaf];
    if (m) {
      uint64_t i = bits_last(m, from - start, end - start);
      if (i < end - start) return start + i;
    }
    end = from;
  }
  return hi;
}

/* ------------------------------------------------------------ TLSF */

static inline int floor_log2(uint64_t x) { return 63 - __builtin_clzll(x); }

static void tlsf_mapping(uint64_t granules, int* fl, int* sl) {
  if (granules < TPU_HBM_SL_COUNT) {
    *fl = 0;
    *sl = (int)granules;
    return;
  }
  int t = floor_log2(granules);
  *fl = t - TPU_HBM_SL_BITS + 1;
  *sl = (int)((granules >> (t - TPU_HBM_SL_BITS)) & (TPU_HBM_SL_COUNT - 1));
}

static void free_list_insert(tpu_hbm_t* h, tpu_hbm_block_t* b) {
  int fl, sl;
  tlsf_mapping(b->size >> TPU_HBM_GRANULE_SHIFT, &fl, &sl);
  TPU_ASSERT(fl < TPU_HBM_FL_COUNT);
  tpu_hbm_block_t* head = h->free_lists[fl][sl];
  b->prev = NULL;
  b->next = head;
  if (head) head->prev = b;
  h->free_lists[fl][sl] = b;
  h->fl_bitmap |= 1ull << fl;
  h->sl_bitmap[fl] |= 1u << sl;
  b->is_free = true;
}

static void free_list_remove(tpu_hbm_t* h, tpu_hbm_block_t* b) {
  int fl, sl;
  tlsf_mapping(b->size >> TPU_HBM_GRANULE_SHIFT, &fl, &sl);
  if (b->prev)
    b->prev->next = b->next;
  else
    h->free_lists[fl][sl] = b->next;
  if (b->next) b->next->prev = b->prev;
  b->next = b->prev = NULL;
  if (!h->free_lists[fl][sl]) {
    h->sl_bitmap[fl] &= ~(1u << sl);
    if (!h->sl_bitmap[fl]) h->fl_bitmap &= ~(1ull << fl);
  }
}

/* Head of the first non-empty list at class (fl, sl) or above. */
static tpu_hbm_block_t* tlsf_search(tpu_hbm_t* h, int fl, int sl) {
  uint32_t sl_map = h->sl_bitmap[fl] & (~0u << sl);
  if (!sl_map) {
    uint64_t fl_map = fl + 1 < 64 ? h->fl_bitmap & (~0ull << (fl + 1)) : 0;
    if (!fl_map) return NULL;
    fl = __builtin_ctzll(fl_map);
    sl_map = h->sl_bitmap[fl];
  }
  return h->free_lists[fl][__builtin_ctz(sl_map)];
}

/* A free block of at least size bytes, or NULL. Fails only if no free block
 * is large enough, so "largest free block" in errors is always honest. */
static tpu_hbm_block_t* find_free(tpu_hbm_t* h, uint64_t size) {
  uint64_t g = size >> TPU_HBM_GRANULE_SHIFT;
  int fl0, sl0;
  tlsf_mapping(g, &fl0, &sl0);
  /* Rounding up to the next class boundary makes any block of the found
   * list fit, which is what keeps the search O(1). */
  uint64_t rounded = g;
  if (g >= TPU_HBM_SL_COUNT)
    rounded += (1ull << (floor_log2(g) - TPU_HBM_SL_BITS)) - 1;
  int fl, sl;
  tlsf_mapping(rounded, &fl, &sl);
  tpu_hbm_block_t* b = fl < TPU_HBM_FL_COUNT ? tlsf_search(h, fl, sl) : NULL;
  if (b) return b;
  /* The rounding skipped the request's own class, whose larger members may
   * still fit: worth a scan before declaring the HBM full. */
  if (fl != fl0 || sl != sl0)
    for (b = h->free_lists[fl0][sl0]; b; b = b->next)
      if (b->size >= size) return b;
  return NULL;
}

static uint64_t largest_free_locked(const tpu_hbm_t* h) {
  if (!h->fl_bitmap) return 0;
  int fl = floor_log2(h->fl_bitmap);
  int sl = 31 - __builtin_clz(h->sl_bitmap[fl]);
  uint64_t best = 0;
  for (const tpu_hbm_block_t* b = h->free_lists[fl][sl]; b; b = b->next)
    best = TPU_MAX(best, b->size);
  return best;
}

/* ------------------------------------------------------ header pool */

static bool pool_reserve(tpu_hbm_t* h, uint64_t n) {
  while (h->n_spare < n) {
    tpu_hbm_chunk_t* c = tpu_alloc(h->allocator, sizeof(*c));
    if (!c) return false;
    c->next = h->chunks;
    h->chunks = c;
    for (int i = 0; i < TPU_HBM_CHUNK_BLOCKS; i++) {
      c->blocks[i].next = h->spare;
      h->spare = &c->blocks[i];
    }
    h->n_spare += TPU_HBM_CHUNK_BLOCKS;
  }
  return true;
}

static tpu_hbm_block_t* pool_take(tpu_hbm_t* h) {
  tpu_hbm_block_t* b = h->spare;
  TPU_ASSERT(b != NULL);
  h->spare = b->next;
  h->n_spare--;
  memset(b, 0, sizeof(*b));
  return b;
}

static void pool_put(tpu_hbm_t* h, tpu_hbm_block_t* b) {
  b->next = h->spare;
  h->spare = b;
  h->n_spare++;
}

/* ------------------------------------------------------- live hash */

static inline uint64_t hash_slot(const tpu_hbm_t* h, uint64_t offset) {
  return ((offset >> TPU_HBM_GRANULE_SHIFT) * 0x9e3779b97f4a7c15ull) >>
         (64 - h->bucket_bits);
}

/* Keeps the load factor at most one so lookups stay O(1). */
static bool hash_reserve(tpu_hbm_t* h, uint64_t n_live) {
  if (n_live <= h->n_buckets) return true;
  int bits = h->bucket_bits + 1;
  uint64_t n = 1ull << bits;
  tpu_hbm_block_t** nb = tpu_alloc(h->allocator, n * sizeof(*nb));
  if (!nb) return false;
  memset(nb, 0, n * sizeof(*nb));
  tpu_hbm_block_t** old = h->buckets;
  uint64_t old_n = h->n_buckets;
  h->buckets = nb;
  h->n_buckets = n;
  h->bucket_bits = bits;
  for (uint64_t i = 0; i < old_n; i++) {
    tpu_hbm_block_t* b = old[i];
    while (b) {
      tpu_hbm_block_t* next = b->next;
      uint64_t s = hash_slot(h, b->offset);
      b->next = nb[s];
      nb[s] = b;
      b = next;
    }
  }
  tpu_free(h->allocator, old);
  return true;
}

static void hash_insert(tpu_hbm_t* h, tpu_hbm_block_t* b) {
  uint64_t s = hash_slot(h, b->offset);
  b->next = h->buckets[s];
  b->prev = NULL;
  h->buckets[s] = b;
}

static tpu_hbm_block_t* hash_find(const tpu_hbm_t* h, uint64_t offset) {
  for (tpu_hbm_block_t* b = h->buckets[hash_slot(h, offset)]; b; b = b->next)
    if (b->offset == offset) return b;
  return NULL;
}

static tpu_hbm_block_t* hash_remove(tpu_hbm_t* h, uint64_t offset) {
  tpu_hbm_block_t** pp = &h->buckets[hash_slot(h, offset)];
  for (; *pp; pp = &(*pp)->next) {
    tpu_hbm_block_t* b = *pp;
    if (b->offset == offset) {
      *pp = b->next;
      b->next = NULL;
      return b;
    }
  }
  return NULL;
}

/* Pointer -> live block, or NULL for anything that is not a block start. */
static tpu_hbm_block_t* live_lookup(tpu_hbm_t* h, const void* ptr,
                                    bool remove) {
  const char* p = ptr;
  if (!p || p < h->base || p >= h->base + h->capacity) return NULL;
  uint64_t offset = (uint64_t)(p - h->base);
  if (offset & (TPU_HBM_GRANULE - 1)) return NULL;
  return remove ? hash_remove(h, offset) : hash_find(h, offset);
}

/* ----------------------------------------------------- host budget */

/* MemTotal and MemAvailable in bytes; false if /proc/meminfo is unreadable
 * (not Linux, or a sandbox without /proc). */
static bool read_meminfo(uint64_t* total, uint64_t* avail) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (!f) return false;
  char line[256];
  bool have_total = false, have_avail = false;
  while (fgets(line, sizeof(line), f)) {
    unsigned long long kb;
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
      *total = (uint64_t)kb * KIB;
      have_total = true;
    } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
      *avail = (uint64_t)kb * KIB;
      have_avail = true;
    }
  }
  fclose(f);
  return have_total && have_avail;
}

/* What we may still commit is what the kernel says is available, less a
 * reserve for the rest of the process and the system; expressed as a limit on
 * our own committed total so that our later commits count against it without
 * re-reading. */
static void host_limit_refresh(tpu_hbm_t* h) {
  uint64_t total = 0, avail = 0;
  h->committed_since_read = 0;
  if (!read_meminfo(&total, &avail)) {
    h->host_limit_auto = false;
    h->host_limit = UINT64_MAX;
    return;
  }
  uint64_t reserve = TPU_MAX(512 * MIB, total / 20);
  h->host_limit =
      h->stats.committed + (avail > reserve ? avail - reserve : 0);
}

static bool host_budget_allows(tpu_hbm_t* h, uint64_t bytes) {
  if (h->host_limit_auto && h->committed_since_read >= TPU_HBM_HOST_REFRESH)
    host_limit_refresh(h);
  if (h->stats.committed + bytes <= h->host_limit) return true;
  /* Other processes may have released memory since the last reading; a
   * refusal is rare enough to afford one more look. */
  if (!h->host_limit_auto) return false;
  host_limit_refresh(h);
  return h->stats.committed + bytes <= h->host_limit;
}

/* --------------------------------------------------------- commits */

static void release_pages(tpu_hbm_t* h, uint64_t lo, uint64_t hi) {
  uint64_t n = map_count(h, lo, hi);
  if (!n) return;
  uint64_t first = map_first(h, lo, hi);
  uint64_t last = map_last(h, lo, hi);
  char* p = h->base + (first << h->page_shift);
  size_t len = (size_t)((last + 1 - first) << h->page_shift);
  (void)madvise(p, len, MADV_DONTNEED);
  /* If the kernel refuses (e.g. vm.max_map_count reached), the pages stay
   * accessible, so they stay counted as committed; their contents are gone
   * either way. */
  if (mprotect(p, len, PROT_NONE) != 0) return;
  map_set(h, first, last + 1, false);
  h->stats.committed -= n << h->page_shift;
}

/* Releases the pages lying wholly inside free blocks. */
static void trim_locked(tpu_hbm_t* h) {
  for (tpu_hbm_block_t* b = h->head; b; b = b->addr_next) {
    if (!b->is_free) continue;
    uint64_t end = b->addr_next ? b->offset + b->size : h->reserved;
    uint64_t lo = (b->offset + h->page_size - 1) >> h->page_shift;
    uint64_t hi = end >> h->page_shift;
    if (lo < hi) release_pages(h, lo, hi);
  }
}

void tpu_hbm_trim(tpu_hbm_t* hbm) {
  if (!hbm) return;
  pthread_mutex_lock(&hbm->mu);
  trim_locked(hbm);
  pthread_mutex_unlock(&hbm->mu);
}

/* ----------------------------------------------------------- create */

static void hbm_release(tpu_hbm_t* h) {
  if (h->base) munmap(h->base, (size_t)h->reserved);
  while (h->chunks) {
    tpu_hbm_chunk_t* next = h->chunks->next;
    tpu_free(h->allocator, h->chunks);
    h->chunks = next;
  }
  tpu_free(h->allocator, h->buckets);
  if (h->page_leaves)
    for (uint64_t i = 0; i < h->n_leaves; i++)
      tpu_free(h->allocator, h->page_leaves[i]);
  tpu_free(h->allocator, h->page_leaves);
  pthread_mutex_destroy(&h->mu);
  tpu_free(h->allocator, h);
}

tpu_status_t tpu_hbm_create(tpu_allocator_t a, const tpu_chip_spec_t* chip,
                            const tpu_hbm_options_t* options,
                            tpu_hbm_t** out) {
  if (out) *out = NULL;
  if (!out || !chip)
    return TPU_STATUS(INVALID_ARGUMENT, "tpu_hbm_create: %s is NULL",
                      out ? "chip" : "out");
  uint64_t requested =
      options && options->capacity ? options->capacity : chip->hbm_bytes;
  /* A partial granule could never be handed out. */
  uint64_t capacity = requested & ~(TPU_HBM_GRANULE - 1);
  if (capacity == 0 || capacity > TPU_HBM_MAX_CAPACITY)
    return TPU_STATUS(INVALID_ARGUMENT,
                      "vTPU %s: HBM capacity of %llu bytes is out of range "
                      "(512 bytes to 2^56 bytes)",
                      chip->name, (unsigned long long)requested);
  long page = sysconf(_SC_PAGESIZE);
  if (page < (long)TPU_HBM_GRANULE || (page & (page - 1)))
    return TPU_STATUS(UNIMPLEMENTED,
                      "vTPU HBM needs a power-of-two page size of at least "
                      "512 bytes; this host's is %ld",
                      page);

  tpu_hbm_t* h = NULL;
  TPU_RETURN_IF_ERROR(
      tpu_alloc_zeroed(a, sizeof(*h), "the vTPU HBM state", (void**)&h));
  h->allocator = a;
  h->chip = chip;
  h->capacity = capacity;
  h->page_size = (uint64_t)page;
  h->page_shift = floor_log2(h->page_size);
  h->reserved = tpu_align_up(capacity, h->page_size);
  h->n_pages = h->reserved >> h->page_shift;
  if (pthread_mutex_init(&h->mu, NULL) != 0) {
    tpu_free(a, h);
    return TPU_STATUS(RESOURCE_EXHAUSTED,
                      "vTPU HBM: pthread_mutex_init failed");
  }

  /* Reserve first: an impossible capacity then fails cheaply, before any
   * metadata sized by it is allocated. */
  void* base = mmap(NULL, (size_t)h->reserved, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    tpu_status_t st = TPU_STATUS(
        RESOURCE_EXHAUSTED,
        "vTPU %s: could not reserve %s of host address space for its HBM "
        "(mmap: %s). Check the address-space limit (ulimit -v) or choose a "
        "chip with less HBM via TORCHTPU_CHIP.",
        chip->name, size_text(h->reserved).s, strerror(err));
    hbm_release(h);
    return st;
  }
  h->base = base;

  h->n_leaves = (h->n_pages + TPU_HBM_LEAF_PAGES - 1) >> TPU_HBM_LEAF_SHIFT;
  tpu_status_t st = tpu_alloc_zeroed(
      a, (size_t)h->n_leaves * sizeof(*h->page_leaves),
      "the vTPU HBM page map", (void**)&h->page_leaves);
  if (!st) {
    h->bucket_bits = TPU_HBM_INITIAL_BUCKETS_BITS;
    h->n_buckets = 1ull << h->bucket_bits;
    st = tpu_alloc_zeroed(a, (size_t)h->n_buckets * sizeof(*h->buckets),
                          "the vTPU HBM block table", (void**)&h->buckets);
  }
  if (!st && !pool_reserve(h, 1))
    st = TPU_STATUS(RESOURCE_EXHAUSTED,
                    "host allocation for vTPU HBM block headers failed");
  if (st) {
    hbm_release(h);
    return st;
  }

  tpu_hbm_block_t* all = pool_take(h);
  all->offset = 0;
  all->size = capacity;
  free_list_insert(h, all);
  h->head = all;
  h->cache_limit = options ? options->cache_bytes : 0;

  if (options && options->host_limit) {
    h->host_limit = options->host_limit;
  } else {
    h->host_limit_auto = true;
    host_limit_refresh(h);
  }
  *out = h;
  return NULL;
}

void tpu_hbm_destroy(tpu_hbm_t* hbm) {
  if (hbm) hbm_release(hbm);
}

/* ------------------------------------------------------------ alloc */

typedef enum alloc_result_e {
  ALLOC_OK = 0,
  ALLOC_NO_SPACE,   /* out of HBM */
  ALLOC_HOST_LIMIT, /* out of host budget */
  ALLOC_COMMIT,     /* mprotect refused */
  ALLOC_METADATA,   /* host allocation for our metadata failed */
} alloc_result_t;

/* What an error message needs, captured under the lock. */
typedef struct alloc_failure_s {
  uint64_t allocated, largest_free, committed, host_limit, need;
  bool host_limit_auto;
  int n_top;
  tpu_hbm_block_info_t top[TPU_HBM_OOM_TOP];
  int err;
} alloc_failure_t;

static int32_t largest_live_locked(const tpu_hbm_t* h,
                                   tpu_hbm_block_info_t* out, int32_t n) {
  int32_t k = 0;
  if (n <= 0) return 0;
  for (uint64_t i = 0; i < h->n_buckets; i++) {
    for (const tpu_hbm_block_t* b = h->buckets[i]; b; b = b->next) {
      tpu_hbm_block_info_t info = {b->offset, b->dense, b->size, b->tag};
      /* Largest first; equal sizes by address so the order is stable. */
      int32_t j = k < n ? k : n - 1;
      if (k == n && (out[j].padded_bytes > info.padded_bytes ||
                     (out[j].padded_bytes == info.padded_bytes &&
                      out[j].offset < info.offset)))
        continue;
      while (j > 0 && (out[j - 1].padded_bytes < info.padded_bytes ||
                       (out[j - 1].padded_bytes == info.padded_bytes &&
                        out[j - 1].offset > info.offset))) {
        out[j] = out[j - 1];
        j--;
      }
      out[j] = info;
      if (k < n) k++;
    }
  }
  return k;
}

static alloc_result_t alloc_locked(tpu_hbm_t* h, uint64_t dense, uint64_t size,
                                   uint64_t tag, uint64_t* offset,
                                   alloc_failure_t* fail) {
  /* Reserve metadata first so nothing below can fail half-way. */
  if (!pool_reserve(h, 1) || !hash_reserve(h, h->stats.n_live + 1))
    return ALLOC_METADATA;
  tpu_hbm_block_t* b = size <= h->capacity ? find_free(h, size) : NULL;
  if (!b) return ALLOC_NO_SPACE;

  if (dense) {
    uint64_t q0 = b->offset >> h->page_shift;
    uint64_t q1 = (b->offset + dense + h->page_size - 1) >> h->page_shift;
    uint64_t fresh = (q1 - q0) - map_count(h, q0, q1);
    if (fresh) {
      uint64_t bytes = fresh << h->page_shift;
      if (!host_budget_allows(h, bytes)) {
        fail->need = bytes;
        return ALLOC_HOST_LIMIT;
      }
      if (!map_reserve(h, q0, q1)) return ALLOC_METADATA;
      if (mprotect(h->base + (q0 << h->page_shift),
                   (size_t)((q1 - q0) << h->page_shift),
                   PROT_READ | PROT_WRITE) != 0) {
        fail->err = errno;
        fail->need = bytes;
        return ALLOC_COMMIT;
      }
      map_set(h, q0, q1, true);
      h->stats.committed += bytes;
      h->committed_since_read += bytes;
    }
  }

  free_list_remove(h, b);
  if (b->size > size) {
    tpu_hbm_block_t* rest = pool_take(h);
    rest->offset = b->offset + size;
    rest->size = b->size - size;
    rest->addr_prev = b;
    rest->addr_next = b->addr_next;
    if (b->addr_next) b->addr_next->addr_prev = rest;
    b->addr_next = rest;
    b->size = size;
    free_list_insert(h, rest);
  }
  b->is_free = false;
  b->dense = dense;
  b->tag = tag;
  hash_insert(h, b);

  tpu_hbm_stats_t* s = &h->stats;
  s->allocated += size;
  s->allocated_dense += dense;
  s->peak = TPU_MAX(s->peak, s->allocated);
  s->peak_dense = TPU_MAX(s->peak_dense, s->allocated_dense);
  s->n_live++;
  s->n_allocs++;
  *offset = b->offset;
  return ALLOC_OK;
}

static tpu_status_t oom_status(const tpu_hbm_t* h, uint64_t dense,
                               uint64_t size, const alloc_failure_t* f) {
  char top[TPU_HBM_OOM_TOP * 40] = "none";
  size_t used = 0;
  for (int i = 0; i < f->n_top && used < sizeof(top); i++)
    used += (size_t)snprintf(top + used, sizeof(top) - used, "%s%s",
                             i ? ", " : "",
                             size_text(f->top[i].padded_bytes).s);
  return TPU_STATUS(
      RESOURCE_EXHAUSTED,
      "vTPU %s HBM out of memory: tried to allocate %s (%llu bytes; %llu "
      "bytes with TPU tiling); %s free of %s capacity (largest free block "
      "%s). Largest live allocations: %s. Free tensors you no longer need "
      "(del, or set them to None), reduce the batch size, or choose a chip "
      "with more HBM via TORCHTPU_CHIP.",
      h->chip->name, size_text(size).s, (unsigned long long)dense,
      (unsigned long long)size, size_text(h->capacity - f->allocated).s,
      size_text(h->capacity).s, size_text(f->largest_free).s, top);
}

tpu_status_t tpu_hbm_alloc(tpu_hbm_t* hbm, uint64_t dense_bytes,
                           uint64_t padded_bytes, uint64_t tag, void** out) {
  if (out) *out = NULL;
  if (!hbm || !out)
    return TPU_STATUS(INVALID_ARGUMENT, "tpu_hbm_alloc: %s is NULL",
                      hbm ? "out" : "hbm");
  if (padded_bytes < dense_bytes)
    return TPU_STATUS(INVALID_ARGUMENT,
                      "tpu_hbm_alloc: padded size %llu is smaller than the "
                      "dense size %llu",
                      (unsigned long long)padded_bytes,
                      (unsigned long long)dense_bytes);
  /* Zero-byte tensors still get a granule so every pointer is distinct. A
   * request beyond the capacity keeps its real size for the message and
   * cannot overflow the rounding. */
  uint64_t size = padded_bytes > hbm->capacity
                      ? padded_bytes
                      : tpu_align_up(TPU_MAX(padded_bytes, 1), TPU_HBM_GRANULE);

  alloc_failure_t fail;
  memset(&fail, 0, sizeof(fail));
  uint64_t offset = 0;
  pthread_mutex_lock(&hbm->mu);
  alloc_result_t r = alloc_locked(hbm, dense_bytes, size, tag, &offset, &fail);
  if (r == ALLOC_HOST_LIMIT && hbm->cache_limit) {
    /* cached pages count against the host budget: give them back first */
    trim_locked(hbm);
    memset(&fail, 0, sizeof(fail));
    r = alloc_locked(hbm, dense_bytes, size, tag, &offset, &fail);
  }
  if (r != ALLOC_OK) {
    hbm->stats.n_failed++;
    fail.allocated = hbm->stats.allocated;
    fail.committed = hbm->stats.committed;
    fail.host_limit = hbm->host_limit;
    fail.host_limit_auto = hbm->host_limit_auto;
    if (r == ALLOC_NO_SPACE) {
      fail.largest_free = largest_free_locked(hbm);
      fail.n_top = largest_live_locked(hbm, fail.top, TPU_HBM_OOM_TOP);
    }
  }
  pthread_mutex_unlock(&hbm->mu);

  const char* chip = hbm->chip->name;
  switch (r) {
    case ALLOC_OK:
      *out = hbm->base + offset;
      return NULL;
    case ALLOC_NO_SPACE:
      return oom_status(hbm, dense_bytes, size, &fail);
    case ALLOC_HOST_LIMIT:
      return TPU_STATUS(
          RESOURCE_EXHAUSTED,
          "vTPU %s: a tensor of %s (%llu bytes) needs %s more host memory, "
          "but the host memory limit is %s (%s) and %s is already committed: "
          "the host would run out of memory before the vTPU's HBM does. Use "
          "smaller tensors, or set TORCHTPU_HOST_MEMORY_LIMIT (bytes) to "
          "change the limit.",
          chip, size_text(dense_bytes).s, (unsigned long long)dense_bytes,
          size_text(fail.need).s, size_text(fail.host_limit).s,
          fail.host_limit_auto ? "from MemAvailable in /proc/meminfo less a "
                                 "reserve"
                               : "as configured",
          size_text(fail.committed).s);
    case ALLOC_COMMIT:
      return TPU_STATUS(
          RESOURCE_EXHAUSTED,
          "vTPU %s: could not commit %s of host memory for a tensor of %s "
          "(mprotect: %s). With many live tensors the process may have "
          "reached the kernel's vm.max_map_count.",
          chip, size_text(fail.need).s, size_text(dense_bytes).s,
          strerror(fail.err));
    case ALLOC_METADATA:
      return TPU_STATUS(RESOURCE_EXHAUSTED,
                        "vTPU %s: host allocation for HBM block metadata "
                        "failed",
                        chip);
  }
  TPU_ASSERT(!"unreachable");
  return NULL;
}

/* ------------------------------------------------------------- free */

void tpu_hbm_free(tpu_hbm_t* hbm, void* ptr) {
  if (!hbm || !ptr) return;
  pthread_mutex_lock(&hbm->mu);
  tpu_hbm_block_t* b = live_lookup(hbm, ptr, true);
  if (TPU_NEVER(b == NULL)) {
    pthread_mutex_unlock(&hbm->mu);
    return;
  }
  tpu_hbm_stats_t* s = &hbm->stats;
  s->allocated -= b->size;
  s->allocated_dense -= b->dense;
  s->n_live--;
  s->n_frees++;

  /* Only pages the freed block touched can become releasable: everything
   * else wholly inside the merged range was already free, hence released. */
  uint64_t span_lo = b->offset >> hbm->page_shift;
  uint64_t span_hi =
      (b->offset + b->size + hbm->page_size - 1) >> hbm->page_shift;

  tpu_hbm_block_t* prev = b->addr_prev;
  if (prev && prev->is_free) {
    free_list_remove(hbm, prev);
    prev->size += b->size;
    prev->addr_next = b->addr_next;
    if (b->addr_next) b->addr_next->addr_prev = prev;
    pool_put(hbm, b);
    b = prev;
  }
  tpu_hbm_block_t* next = b->addr_next;
  if (next && next->is_free) {
    free_list_remove(hbm, next);
    b->size += next->size;
    b->addr_next = next->addr_next;
    if (next->addr_next) next->addr_next->addr_prev = b;
    pool_put(hbm, next);
  }
  free_list_insert(hbm, b);

  /* The tail of the last page past the capacity is never handed out, so it
   * counts as free. */
  uint64_t end = b->addr_next ? b->offset + b->size : hbm->reserved;
  uint64_t lo = TPU_MAX(span_lo, (b->offset + hbm->page_size - 1) >>
                                     hbm->page_shift);
  uint64_t hi = TPU_MIN(span_hi, end >> hbm->page_shift);
  if (hbm->cache_limit == 0) {
    if (lo < hi) release_pages(hbm, lo, hi);
  } else {
    /* keep the pages for the next allocation; release them in bulk once
     * the committed pages that back no live allocation exceed the limit
     * (counting freed bytes instead would flush the cache every
     * cache_limit bytes of ordinary alloc/free traffic) */
    if (hbm->stats.committed > hbm->stats.allocated_dense + hbm->cache_limit) trim_locked(hbm);
  }
  pthread_mutex_unlock(&hbm->mu);
}

/* ------------------------------------------------------- inspection */

void tpu_hbm_stats(tpu_hbm_t* hbm, tpu_hbm_stats_t* out) {
  if (!out) return;
  memset(out, 0, sizeof(*out));
  if (!hbm) return;
  pthread_mutex_lock(&hbm->mu);
  *out = hbm->stats;
  out->capacity = hbm->capacity;
  out->free_bytes = hbm->capacity - hbm->stats.allocated;
  out->largest_free = largest_free_locked(hbm);
  pthread_mutex_unlock(&hbm->mu);
}

void tpu_hbm_reset_peak(tpu_hbm_t* hbm) {
  if (!hbm) return;
  pthread_mutex_lock(&hbm->mu);
  hbm->stats.peak = hbm->stats.allocated;
  hbm->stats.peak_dense = hbm->stats.allocated_dense;
  pthread_mutex_unlock(&hbm->mu);
}

int32_t tpu_hbm_largest_live(tpu_hbm_t* hbm, tpu_hbm_block_info_t* out,
                             int32_t n) {
  if (!hbm || !out || n <= 0) return 0;
  pthread_mutex_lock(&hbm->mu);
  int32_t k = largest_live_locked(hbm, out, n);
  pthread_mutex_unlock(&hbm->mu);
  return k;
}

void* tpu_hbm_base(const tpu_hbm_t* hbm) { return hbm ? hbm->base : NULL; }

uint64_t tpu_hbm_reserved_bytes(const tpu_hbm_t* hbm) {
  return hbm ? hbm->reserved : 0;
}

bool tpu_hbm_is_live(tpu_hbm_t* hbm, const void* ptr) {
  if (!hbm) return false;
  pthread_mutex_lock(&hbm->mu);
  bool live = live_lookup(hbm, ptr, false) != NULL;
  pthread_mutex_unlock(&hbm->mu);
  return live;
}

const tpu_chip_spec_t* tpu_hbm_chip(const tpu_hbm_t* hbm) {
  return hbm ? hbm->chip : NULL;
}

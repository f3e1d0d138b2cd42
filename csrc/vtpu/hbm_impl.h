/* Private: the HBM arena's data structures (see hbm.c for the design). */
#ifndef TPU_VTPU_HBM_IMPL_H_
#define TPU_VTPU_HBM_IMPL_H_

#include <pthread.h>

#include "tpu/vtpu.h"

/* HBM is handed out in 512-byte granules, like a TPU allocator does. */
#define TPU_HBM_GRANULE 512ull
#define TPU_HBM_GRANULE_SHIFT 9

/* TLSF size classes over granule counts: first level = power of two, second
 * level = 2^SL_BITS linear steps inside it. 32 steps bound the internal
 * fragmentation of a class to ~3%. Capacities are capped at 2^56 bytes, so
 * granule counts stay below 2^47 and FL_COUNT first levels suffice. */
#define TPU_HBM_SL_BITS 5
#define TPU_HBM_SL_COUNT (1 << TPU_HBM_SL_BITS)
#define TPU_HBM_FL_COUNT 48
#define TPU_HBM_MAX_CAPACITY (1ull << 56)

/* Pages per leaf of the committed-page map (a 4 KiB leaf). */
#define TPU_HBM_LEAF_SHIFT 15
#define TPU_HBM_LEAF_PAGES (1ull << TPU_HBM_LEAF_SHIFT)

/* Header blocks are carved from chunks of this many. */
#define TPU_HBM_CHUNK_BLOCKS 256

/* One block of the arena: a live allocation or a free range. Headers live in
 * host memory, never inside the arena, so the arena itself can stay
 * PROT_NONE wherever nothing is committed. */
typedef struct tpu_hbm_block_s tpu_hbm_block_t;
struct tpu_hbm_block_s {
  uint64_t offset; /* bytes from the arena base; granule-aligned */
  uint64_t size;   /* bytes; a multiple of the granule */
  uint64_t dense;  /* live only: bytes requested (committed prefix) */
  uint64_t tag;    /* live only: the caller's tag */
  /* Address-ordered neighbours; together the blocks tile [0, capacity). */
  tpu_hbm_block_t* addr_prev;
  tpu_hbm_block_t* addr_next;
  /* Free: the size-class list. Live: next in the hash bucket (prev unused).
   * Spare (in the header pool): next spare. */
  tpu_hbm_block_t* next;
  tpu_hbm_block_t* prev;
  bool is_free;
};

typedef struct tpu_hbm_chunk_s {
  struct tpu_hbm_chunk_s* next;
  tpu_hbm_block_t blocks[TPU_HBM_CHUNK_BLOCKS];
} tpu_hbm_chunk_t;

struct tpu_hbm_s {
  tpu_allocator_t allocator;
  const tpu_chip_spec_t* chip;
  char* base;        /* start of the reservation (page-aligned) */
  uint64_t capacity; /* accounting capacity, granule multiple */
  uint64_t reserved; /* capacity rounded up to whole pages */
  uint64_t page_size;
  int page_shift;

  pthread_mutex_t mu; /* guards everything below */

  /* TLSF free lists. */
  uint64_t fl_bitmap;
  uint32_t sl_bitmap[TPU_HBM_FL_COUNT];
  tpu_hbm_block_t* free_lists[TPU_HBM_FL_COUNT][TPU_HBM_SL_COUNT];

  /* Live blocks by offset: chained hash, power-of-two buckets. */
  tpu_hbm_block_t** buckets;
  uint64_t n_buckets;
  int bucket_bits;

  /* Header pool. */
  tpu_hbm_chunk_t* chunks;
  tpu_hbm_block_t* spare;
  uint64_t n_spare;

  /* One bit per page of the reservation: committed (PROT_READ|PROT_WRITE).
   * Two levels so that only regions ever committed cost host memory: leaf i
   * covers pages [i * TPU_HBM_LEAF_PAGES, (i + 1) * TPU_HBM_LEAF_PAGES) and
   * is allocated on first commit (NULL = no page committed). */
  uint64_t** page_leaves;
  uint64_t n_leaves;
  uint64_t n_pages;

  /* Host budget. host_limit_auto: derived from /proc/meminfo and refreshed
   * after every TPU_HBM_HOST_REFRESH bytes of new commits. */
  bool host_limit_auto;
  uint64_t host_limit;
  uint64_t committed_since_read;

  /* Freed pages stay committed for reuse (no mprotect/madvise/page faults
   * on the next allocation) until cache_limit bytes have been freed since
   * the last trim; then every fully free page is released. head is the
   * block at offset 0 (never merged away). */
  uint64_t cache_limit;
  tpu_hbm_block_t* head;

  /* capacity, largest_free and free_bytes are filled in by tpu_hbm_stats. */
  tpu_hbm_stats_t stats;
};

#endif /* TPU_VTPU_HBM_IMPL_H_ */

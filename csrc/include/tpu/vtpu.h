/* The virtual TPU: chip specifications and the HBM model. */
#ifndef TPU_VTPU_H_
#define TPU_VTPU_H_

#include "tpu/base.h"
#include "tpu/dtype.h"
#include "tpu/ir.h"
#include "tpu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- chip specs */

/* Public per-chip numbers of one TPU generation. Sources are cited next to
 * the table in vtpu/chip.c. */
typedef struct tpu_chip_spec_s {
  const char* name;          /* "v5e" */
  const char* marketing;     /* "TPU v5e" */
  int32_t tensorcores;       /* per chip */
  int32_t mxu_dim;           /* 128 or 256 */
  double peak_bf16_flops;    /* per chip, FLOP/s */
  double peak_int8_ops;      /* per chip, OP/s (0 if not published) */
  uint64_t hbm_bytes;        /* per chip */
  double hbm_bandwidth;      /* bytes/s */
  uint64_t vmem_bytes;       /* per core */
  double ici_bandwidth;      /* bytes/s per chip, bidirectional (0 if n/a) */
  const char* ici_topology;  /* "2D torus", ... */
  int32_t pod_chips;
} tpu_chip_spec_t;

int32_t tpu_chip_spec_count(void);
/* Lends a pointer into a static table. */
const tpu_chip_spec_t* tpu_chip_spec_at(int32_t i);
/* Finds a chip by name ("v4", "v5e", "v5p", "v6e", "7x"; "v7x" and
 * "ironwood"/"trillium" are accepted aliases). NOT_FOUND lists the names. */
TPU_MUST_USE tpu_status_t tpu_chip_spec_find(const char* name,
                                             const tpu_chip_spec_t** out);

/* ----------------------------------------------------------- TPU layout */

/* Bytes a dense array of this type and shape occupies in TPU HBM: the two
 * minor dimensions padded to the (tile_rows, 128) tile of its element type,
 * rank-1 arrays padded to 1024 elements' tile, rank 0 to one 512-byte
 * granule; 64-bit types count as two 32-bit words. Returns -1 on overflow. */
int64_t tpu_tpu_padded_bytes(tpu_dtype_t dtype, const tpu_shape_t* shape);

/* ----------------------------------------------------------------- HBM */

typedef struct tpu_hbm_s tpu_hbm_t;

typedef struct tpu_hbm_options_s {
  uint64_t capacity;       /* bytes of HBM; 0 = the chip's */
  uint64_t host_limit;     /* max host bytes committed; 0 = from MemAvailable */
  bool protect_free;       /* PROT_NONE on freed pages (always true today) */
  uint64_t cache_bytes;    /* keep up to this many freed bytes committed
                              (0 = release pages at once) */
} tpu_hbm_options_t;

typedef struct tpu_hbm_stats_s {
  uint64_t capacity;        /* accounting capacity (padded bytes) */
  uint64_t allocated;       /* padded bytes of live allocations */
  uint64_t allocated_dense; /* dense (requested) bytes of live allocations */
  uint64_t peak;            /* max of allocated since reset */
  uint64_t peak_dense;
  uint64_t committed;       /* host bytes committed (page-rounded dense) */
  uint64_t largest_free;    /* largest contiguous free range */
  uint64_t free_bytes;      /* capacity - allocated */
  uint64_t n_live;          /* live allocations */
  uint64_t n_allocs;        /* allocations since creation */
  uint64_t n_frees;
  uint64_t n_failed;        /* failed allocations (out of memory) */
} tpu_hbm_stats_t;

typedef struct tpu_hbm_block_info_s {
  uint64_t offset;          /* from the start of HBM */
  uint64_t dense_bytes;
  uint64_t padded_bytes;
  uint64_t tag;             /* caller's tag (e.g. a shape hash) */
} tpu_hbm_block_info_t;

/* Reserves the address space of the HBM (nothing committed). Errors:
 * RESOURCE_EXHAUSTED if the reservation fails. */
TPU_MUST_USE tpu_status_t tpu_hbm_create(tpu_allocator_t a,
                                         const tpu_chip_spec_t* chip,
                                         const tpu_hbm_options_t* options,
                                         tpu_hbm_t** out);
/* Releases the reservation. Live allocations are dropped. */
void tpu_hbm_destroy(tpu_hbm_t* hbm);

/* Allocates padded_bytes of HBM accounting (>= dense_bytes) and commits
 * dense_bytes of host memory at the start of the block. The returned pointer
 * is 512-byte aligned and stays valid until tpu_hbm_free. Thread-safe.
 * Errors: RESOURCE_EXHAUSTED with a message naming the request, free bytes,
 * capacity, chip and the largest live allocations (out of HBM), or the host
 * budget (out of host memory). */
TPU_MUST_USE tpu_status_t tpu_hbm_alloc(tpu_hbm_t* hbm, uint64_t dense_bytes,
                                        uint64_t padded_bytes, uint64_t tag,
                                        void** out);
/* Frees a pointer returned by tpu_hbm_alloc. Thread-safe, any thread.
 * Unknown pointers are ignored and counted (an internal invariant). */
void tpu_hbm_free(tpu_hbm_t* hbm, void* ptr);

/* Releases every committed page that no live allocation uses (the pages a
 * nonzero cache_bytes keeps for reuse). Thread-safe. */
void tpu_hbm_trim(tpu_hbm_t* hbm);

/* Statistics snapshot. Thread-safe. */
void tpu_hbm_stats(tpu_hbm_t* hbm, tpu_hbm_stats_t* out);
void tpu_hbm_reset_peak(tpu_hbm_t* hbm);
/* Writes up to n largest live allocations (by padded size), largest first;
 * returns how many were written. */
int32_t tpu_hbm_largest_live(tpu_hbm_t* hbm, tpu_hbm_block_info_t* out,
                             int32_t n);
/* Base address and size of the reservation. */
void* tpu_hbm_base(const tpu_hbm_t* hbm);
uint64_t tpu_hbm_reserved_bytes(const tpu_hbm_t* hbm);
/* True if ptr is the start of a live allocation. */
bool tpu_hbm_is_live(tpu_hbm_t* hbm, const void* ptr);
const tpu_chip_spec_t* tpu_hbm_chip(const tpu_hbm_t* hbm);

/* --------------------------------------------------------- the device */

typedef struct tpu_vtpu_options_s {
  const char* chip;        /* chip name; NULL = "v5e" */
  uint64_t hbm_capacity;   /* 0 = the chip's HBM */
  uint64_t host_limit;     /* 0 = from MemAvailable */
  int32_t n_threads;       /* kernel threads; 0 = number of CPUs */
} tpu_vtpu_options_t;

/* Creates a virtual TPU device: reserves its HBM and starts its kernel
 * threads. NOT_FOUND for an unknown chip name. */
TPU_MUST_USE tpu_status_t tpu_vtpu_device_create(tpu_allocator_t a,
                                                 const tpu_vtpu_options_t* o,
                                                 tpu_device_t** out);
/* Lends the device's HBM and chip (valid while the device lives). */
tpu_hbm_t* tpu_vtpu_device_hbm(tpu_device_t* dev);
const tpu_chip_spec_t* tpu_vtpu_device_chip(tpu_device_t* dev);
int32_t tpu_vtpu_device_threads(tpu_device_t* dev);
/* True if dev is a vTPU device. */
bool tpu_device_is_vtpu(const tpu_device_t* dev);

/* ------------------------------------------------------------- the BLAS */

/* Loads a CBLAS library (e.g. scipy-openblas) for matmuls; without one a
 * slow built-in reference GEMM is used. Process-wide; later calls are
 * no-ops. */
TPU_MUST_USE tpu_status_t tpu_blas_load(const char* path);
const char* tpu_blas_name(void);
/* The kernel set the BLAS chose for this CPU (OpenBLAS core name) or "". */
const char* tpu_blas_core(void);

#ifdef __cplusplus
}
#endif
#endif

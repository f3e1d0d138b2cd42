/* Private structures of the vTPU backend: the device, its executables and
 * the VPU programs they run.
 *
 * A LOOP or REDUCE kernel runs a small vector program over chunks of up to
 * TPU_VPU_CHUNK consecutive elements of its (coalesced) iteration space, the
 * way the TPU's vector unit works on (8,128) tiles: loads gather strided
 * data into registers (converting to the compute type), instructions work
 * on whole registers, a store scatters the result. Index-mapping ops
 * (broadcast, transpose, slice, reshape) never run: they are folded into the
 * affine index maps of the loads at code generation time.
 */
#ifndef TPU_VTPU_IMPL_H_
#define TPU_VTPU_IMPL_H_

#include <pthread.h>

#include "runtime/runtime_impl.h"
#include "tpu/compiler.h"
#include "tpu/threadpool.h"
#include "tpu/vtpu.h"

#define TPU_VPU_CHUNK 1024
/* LOOP outputs of at least this many bytes are written with non-temporal
 * stores (larger than a core's share of the last-level cache). */
#define TPU_VPU_STREAM_BYTES (8ll << 20)

/* Register (compute) types: every element type computes in one of these. */
typedef enum tpu_ct_e {
  TPU_CT_F32 = 0, /* f32, bf16, f16 */
  TPU_CT_F64,
  TPU_CT_I32,     /* pred, s8, u8, s16, u16, s32 */
  TPU_CT_I64,     /* s64, u32, u64 (u64 wraps like s64) */
  TPU_CT_COUNT
} tpu_ct_t;

tpu_ct_t tpu_vtpu_compute_type(tpu_dtype_t d);

/* VPU instructions. */
typedef enum tpu_vop_e {
  TPU_VOP_LOAD = 0,   /* r = convert(load[acc]) */
  TPU_VOP_SCALAR,     /* r = broadcast(scalar param) */
  TPU_VOP_IMM,        /* r = broadcast(immediate) */
  TPU_VOP_IOTA,       /* r = affine index (acc) */
  TPU_VOP_RNG,        /* r = random(acc counter, seed/offset scalars) */
  TPU_VOP_UNARY,      /* r = op(a) */
  TPU_VOP_BINARY,     /* r = op(a, b) */
  TPU_VOP_SELECT,     /* r = a ? b : c */
  TPU_VOP_CLAMP,      /* r = min(max(b, a), c) */
  TPU_VOP_CONVERT,    /* r = convert(a) from aux ct/dtype to ct/dtype */
  TPU_VOP_NARROW,     /* r = value of a representable in dtype (round/wrap) */
  TPU_VOP_GATHER,     /* r = operand[affine(acc) + a * gather_stride] */
  TPU_VOP_COUNT
} tpu_vop_t;

typedef struct tpu_vinstr_s {
  uint8_t vop;          /* tpu_vop_t */
  uint8_t ct;           /* result compute type */
  uint8_t src_ct;       /* operand compute type (convert, compare) */
  uint8_t dtype;        /* element type of the result (narrow, convert) */
  uint8_t src_dtype;    /* element type of the operand (convert) */
  uint16_t op;          /* IR opcode for unary/binary */
  int16_t kind;         /* compare direction, rng distribution */
  int16_t dst, a, b, c; /* registers */
  int32_t acc;          /* accessor index (load, iota, rng), scalar param */
  int32_t acc2;         /* rng: offset scalar param */
  union {
    double f;
    int64_t i;
  } imm;
} tpu_vinstr_t;

/* Where an accessor reads: a parameter, a temp, a constant. */
typedef struct tpu_access_s {
  tpu_loc_kind_t where;
  int32_t index;        /* parameter index */
  int64_t byte_offset;  /* temp offset */
  const void* constant; /* constant payload */
  tpu_dtype_t dtype;
  int64_t elem_offset;
  int64_t strides[TPU_MAX_RANK]; /* per iteration dim (elements / coefs) */
  int64_t gather_stride;         /* gather: stride of the indexed dim */
  int64_t gather_size;           /* gather: its size (bounds check) */
  int32_t gather_dim;            /* gather: which dim (for messages) */
} tpu_access_t;

typedef struct tpu_vprogram_s {
  int32_t rank;                /* coalesced iteration rank */
  int64_t dims[TPU_MAX_RANK];
  int64_t numel;
  tpu_vinstr_t* code;
  int32_t n_code;
  tpu_access_t* acc;           /* loads, iotas, rngs */
  int32_t n_acc;
  int32_t n_regs;
  int32_t result;              /* register holding the value */
  tpu_ct_t result_ct;
} tpu_vprogram_t;

typedef struct tpu_vkernel_s {
  tpu_kernel_kind_t kind;
  tpu_vprogram_t prog;         /* LOOP: the region; REDUCE: the operand */
  tpu_access_t store;          /* destination (strides per iteration dim of
                                  prog for LOOP, of the kept dims for REDUCE) */
  /* REDUCE */
  tpu_reduce_kind_t reduce;
  bool row;                    /* reduced dims innermost */
  int64_t kept;                /* number of outputs */
  int64_t reduced;             /* elements reduced per output */
  int32_t kept_rank;           /* store iteration rank (coalesced kept dims) */
  int64_t kept_dims[TPU_MAX_RANK];
  /* DOT: lhs viewed as [batch..., m..., k...], rhs as [batch..., k..., n...],
   * store as [batch..., m..., n...] (strides in the accessors, same order) */
  tpu_access_t lhs, rhs;
  int32_t nb, nm, nn, nk;
  int64_t lhs_dims[TPU_MAX_RANK], rhs_dims[TPU_MAX_RANK], out_dims[TPU_MAX_RANK];
  tpu_dtype_t out_dtype;
  /* ARRAY: the op, its operands (strides per operand dim) and attributes;
   * a rank-0 operand read by value has scalar_param >= 0 or a constant */
  tpu_opcode_t op;
  int32_t n_opnd;
  tpu_access_t opnd[3];
  int32_t opnd_rank[3];
  int64_t opnd_dims[3][TPU_MAX_RANK];
  int32_t scalar_param[3];
  int32_t out_rank;
  int64_t ints[TPU_MAX_ATTR_INTS];
  int32_t n_ints;
  int32_t akind;
  double flops;
} tpu_vkernel_t;

typedef struct tpu_vtpu_executable_s {
  tpu_executable_t base;
  tpu_vkernel_t* kernels;
  int32_t n_kernels;
  int64_t temp_bytes;
  int32_t max_regs;
  uint8_t* constants;         /* copies of the graph's constant payloads */
  int64_t* constant_offset;   /* per graph value: offset in constants or -1 */
} tpu_vtpu_executable_t;

typedef struct tpu_vtpu_device_s {
  tpu_device_t base;
  const tpu_chip_spec_t* chip;
  tpu_hbm_t* hbm;
  tpu_pool_t* pool;
  /* scratch owned by whoever executes (serialised by the stream) */
  pthread_mutex_t scratch_mu;
  void* temp;            /* temp arena */
  int64_t temp_cap;
  void* regs;            /* per-thread VPU registers */
  int64_t regs_cap;      /* bytes per thread */
  void* dot_scratch;
  int64_t dot_cap;
} tpu_vtpu_device_t;

typedef struct tpu_vtpu_buffer_s {
  tpu_buffer_t base;
} tpu_vtpu_buffer_t;

/* codegen.c */
tpu_status_t tpu_vtpu_codegen(tpu_vtpu_device_t* dev, const tpu_compiled_t* c,
                              tpu_vtpu_executable_t* exe);
void tpu_vtpu_program_free(tpu_allocator_t a, tpu_vprogram_t* p);

/* exec.c */
typedef struct tpu_exec_ctx_s {
  tpu_vtpu_device_t* dev;
  tpu_vtpu_executable_t* exe;
  const tpu_arg_t* args;
  const tpu_arg_t* outs;
  char* temp;
  /* first out-of-range index seen by any thread (error reporting) */
  int32_t bad;          /* atomic flag */
  int64_t bad_index, bad_size;
  int32_t bad_dim;
} tpu_exec_ctx_t;

/* Records an out-of-range index (first one wins). */
void tpu_vtpu_note_bad_index(tpu_exec_ctx_t* x, int64_t index, int64_t size, int32_t dim);
void* tpu_vtpu_access_base(const tpu_exec_ctx_t* x, const tpu_access_t* a);
tpu_status_t tpu_vtpu_run_loop(tpu_exec_ctx_t* x, const tpu_vkernel_t* k);
tpu_status_t tpu_vtpu_run_reduce(tpu_exec_ctx_t* x, const tpu_vkernel_t* k);
/* Strided element copy with conversion (host <-> HBM copies and poison). */
void tpu_vtpu_copy_strided(void* dst, tpu_dtype_t dst_dtype,
                           const int64_t* dst_strides, const void* src,
                           tpu_dtype_t src_dtype, const int64_t* src_strides,
                           int32_t rank, const int64_t* dims);

/* array.c: pad, scatter, sort, cumulative, reduce_window, convolution */
tpu_status_t tpu_vtpu_run_array(tpu_exec_ctx_t* x, const tpu_vkernel_t* k);

/* dot.c */
tpu_status_t tpu_vtpu_run_dot(tpu_exec_ctx_t* x, const tpu_vkernel_t* k);
tpu_status_t tpu_vtpu_matmul_f32(tpu_vtpu_device_t* dev, tpu_precision_t prec, int64_t B,
                                 int64_t M, int64_t N, int64_t K, const float* a,
                                 const float* b, float* c, bool inputs_are_bf16);
/* f64 C = A @ B (row-major, contiguous), one call. */
void tpu_vtpu_dgemm(int64_t M, int64_t N, int64_t K, const double* a, const double* b, double* c);

/* rng.c: Philox4x32-10 keyed by seed; counter = offset + element index. */
void tpu_vtpu_philox(uint64_t seed, uint64_t counter, uint32_t out[4]);

#endif

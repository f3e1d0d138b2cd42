/* The DLPack ABI (v0.x "dltensor" capsules), written from the DLPack
 * specification (dmlc/dlpack, Apache-2.0). Only what torchtpu exchanges with
 * PyTorch: tensors on kDLExtDev, which PyTorch maps to PrivateUse1. */
#ifndef TPU_PY_DLPACK_H_
#define TPU_PY_DLPACK_H_

#include <stdint.h>

enum { TPU_DLPACK_CPU = 1, TPU_DLPACK_EXT_DEV = 12 };

typedef struct {
  int32_t device_type;
  int32_t device_id;
} tpu_dl_device_t;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} tpu_dl_dtype_t;

typedef struct {
  void* data;
  tpu_dl_device_t device;
  int32_t ndim;
  tpu_dl_dtype_t dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} tpu_dl_tensor_t;

typedef struct tpu_dl_managed_s {
  tpu_dl_tensor_t dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct tpu_dl_managed_s* self);
} tpu_dl_managed_t;

#endif

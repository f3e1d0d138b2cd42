/* Helpers for device implementations. */
#ifndef TPU_RUNTIME_IMPL_H_
#define TPU_RUNTIME_IMPL_H_

#include "tpu/runtime.h"

/* Fills the device-independent part of an executable (params, outputs). */
tpu_status_t tpu_executable_init_common(tpu_allocator_t a,
                                        const tpu_compiled_t* c,
                                        tpu_executable_t* exe);
void tpu_executable_deinit_common(tpu_allocator_t a, tpu_executable_t* exe);

#endif

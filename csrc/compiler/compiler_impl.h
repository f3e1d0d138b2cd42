/* Private helpers shared by the compiler's files. */
#ifndef TPU_COMPILER_IMPL_H_
#define TPU_COMPILER_IMPL_H_

#include "tpu/compiler.h"

tpu_status_t tpu_pass_copy_node(const tpu_graph_t* in, tpu_value_t v,
                                tpu_graph_t* out, const tpu_value_t* map,
                                tpu_value_t* res);

#endif

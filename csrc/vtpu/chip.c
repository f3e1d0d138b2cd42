/* Per-generation TPU chip specifications. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tpu/vtpu.h"

#define KIB (1024ull)
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

/* Published per-chip figures, in FLOP/s, bytes and bytes/s.
 *
 * Sources:
 *  - Cloud TPU system-architecture pages, one per generation:
 *    cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e, /tpu7x
 *    (TensorCores, peak bf16/int8, HBM capacity and bandwidth, ICI, pod size).
 *  - JAX Pallas TPU hardware page, per-core VMEM:
 *    docs.jax.dev/en/latest/pallas/tpu/hardware.html
 *  - "How to Scale Your Model", jax-ml.github.io/scaling-book/tpus/
 *    (MXU sizes, cross-checks of the above).
 *
 * Notes on the entries that need one:
 *  - v4: the Cloud page lists no per-chip ICI bandwidth, so it is 0 ("not
 *    published"). Its topology is a 3D mesh that full-cube slices wire as a
 *    3D torus; we record the torus, the shape pods are used in.
 *  - v6e: the Cloud page gives 32 GB of HBM (decimal), unlike the GiB of the
 *    other generations; we keep the published unit rather than round.
 *  - 7x: no int8 figure is published (fp8 is 4614 TF/s), so int8 is 0. The
 *    two TensorCores appear to software as two devices. The Cloud page gives
 *    1200 GB/s of ICI; it describes 7x as v5p-like (9216-chip pods), so the
 *    topology is recorded as v5p's 3D torus.
 */
static const tpu_chip_spec_t kChips[] = {
    {
        .name = "v4",
        .marketing = "TPU v4",
        .tensorcores = 2,
        .mxu_dim = 128,
        .peak_bf16_flops = 275e12,
        .peak_int8_ops = 275e12,
        .hbm_bytes = 32 * GIB,
        .hbm_bandwidth = 1200e9,
        .vmem_bytes = 16 * MIB,
        .ici_bandwidth = 0,
        .ici_topology = "3D torus",
        .pod_chips = 4096,
    },
    {
        .name = "v5e",
        .marketing = "TPU v5e",
        .tensorcores = 1,
        .mxu_dim = 128,
        .peak_bf16_flops = 197e12,
        .peak_int8_ops = 394e12,
        .hbm_bytes = 16 * GIB,
        .hbm_bandwidth = 819e9,
        .vmem_bytes = 128 * MIB,
        .ici_bandwidth = 400e9,
        .ici_topology = "2D torus",
        .pod_chips = 256,
    },
    {
        .name = "v5p",
        .marketing = "TPU v5p",
        .tensorcores = 2,
        .mxu_dim = 128,
        .peak_bf16_flops = 459e12,
        .peak_int8_ops = 918e12,
        .hbm_bytes = 95 * GIB,
        .hbm_bandwidth = 2765e9,
        .vmem_bytes = 64 * MIB,
        .ici_bandwidth = 1200e9,
        .ici_topology = "3D torus",
        .pod_chips = 8960,
    },
    {
        .name = "v6e",
        .marketing = "TPU v6e (Trillium)",
        .tensorcores = 1,
        .mxu_dim = 256,
        .peak_bf16_flops = 918e12,
        .peak_int8_ops = 1836e12,
        .hbm_bytes = 32000000000ull,
        .hbm_bandwidth = 1638e9,
        .vmem_bytes = 128 * MIB,
        .ici_bandwidth = 800e9,
        .ici_topology = "2D torus",
        .pod_chips = 256,
    },
    {
        .name = "7x",
        .marketing = "TPU7x (Ironwood)",
        .tensorcores = 2,
        .mxu_dim = 256,
        .peak_bf16_flops = 2307e12,
        .peak_int8_ops = 0,
        .hbm_bytes = 192 * GIB,
        .hbm_bandwidth = 7380e9,
        .vmem_bytes = 64 * MIB,
        .ici_bandwidth = 1200e9,
        .ici_topology = "3D torus",
        .pod_chips = 9216,
    },
};

/* Names people use for a generation besides our canonical one. */
static const struct {
  const char* alias;
  const char* name;
} kAliases[] = {
    {"v7x", "7x"},
    {"ironwood", "7x"},
    {"trillium", "v6e"},
};

int32_t tpu_chip_spec_count(void) { return (int32_t)TPU_ARRAY_SIZE(kChips); }

const tpu_chip_spec_t* tpu_chip_spec_at(int32_t i) {
  if (i < 0 || i >= tpu_chip_spec_count()) return NULL;
  return &kChips[i];
}

tpu_status_t tpu_chip_spec_find(const char* name, const tpu_chip_spec_t** out) {
  if (out) *out = NULL;
  if (!out)
    return TPU_STATUS(INVALID_ARGUMENT, "tpu_chip_spec_find: out is NULL");
  if (!name)
    return TPU_STATUS(INVALID_ARGUMENT, "tpu_chip_spec_find: name is NULL");

  const char* canonical = name;
  for (size_t i = 0; i < TPU_ARRAY_SIZE(kAliases); i++) {
    if (strcasecmp(name, kAliases[i].alias) == 0) {
      canonical = kAliases[i].name;
      break;
    }
  }
  for (size_t i = 0; i < TPU_ARRAY_SIZE(kChips); i++) {
    if (strcasecmp(canonical, kChips[i].name) == 0) {
      *out = &kChips[i];
      return NULL;
    }
  }

  char names[128];
  size_t used = 0;
  names[0] = 0;
  for (size_t i = 0; i < TPU_ARRAY_SIZE(kChips) && used < sizeof(names); i++)
    used += (size_t)snprintf(names + used, sizeof(names) - used, "%s%s",
                             i ? ", " : "", kChips[i].name);
  return TPU_STATUS(NOT_FOUND,
                    "unknown TPU chip '%s'; the vTPU models %s (aliases: v7x "
                    "and ironwood for 7x, trillium for v6e). Set "
                    "TORCHTPU_CHIP to one of them.",
                    name, names);
}

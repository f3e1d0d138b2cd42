"""A small MLP on the virtual TPU next to the same MLP on the CPU.

Run with `make demo`. Change TORCHTPU_CHIP (v4, v5e, v5p, v6e, 7x) to model
another TPU generation."""
import torch
import torch.nn as nn

import torchtpu  # noqa: F401  (registers the "tpu" device)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10), nn.Softmax(dim=-1))
    x = torch.randn(8, 64)

    with torch.no_grad():
        y_cpu = model(x)

    device = torch.device("tpu")
    model_tpu = model.to(device)
    with torch.no_grad():
        y_tpu = model_tpu(x.to(device))

    torch.set_printoptions(precision=4, sci_mode=False)
    print(f"device: {torch.tpu.get_device_name()}  ({torch.tpu.get_device_properties()})")
    print("\noutput on tpu (first 2 rows):")
    print(y_tpu[:2])
    print("\noutput on cpu (first 2 rows):")
    print(y_cpu[:2])
    diff = (y_tpu.cpu() - y_cpu).abs().max().item()
    print(f"\nmax |tpu - cpu| = {diff:.3e}  (fp32 matmuls at HIGHEST precision, "
          f"PyTorch's default)")
    stats = torch.tpu.memory_stats()
    print(f"vTPU HBM in use: {torch.tpu.memory_allocated() / 1024:.1f} KiB with TPU tiling "
          f"({stats['dense_bytes.all.current'] / 1024:.1f} KiB dense), "
          f"peak {torch.tpu.max_memory_allocated() / 1024:.1f} KiB of "
          f"{stats['hbm_capacity'] / 2**30:.0f} GiB")
    print(torchtpu.metrics.short_report())


if __name__ == "__main__":
    main()

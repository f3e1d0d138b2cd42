"""vTPU HBM: capacity, tiled accounting, out-of-memory errors, stream-ordered
frees, host budget."""
import gc

import pytest
import torch

from conftest import run_python


def test_accounting_charges_tpu_tiling():
    gc.collect()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    dense_before = torch.tpu.memory_stats()["dense_bytes.all.current"]
    x = torch.empty(3, 5, device="tpu")                       # f32 [3,5]
    y = torch.empty(3, 5, dtype=torch.bfloat16, device="tpu")  # bf16 tile (16,128)
    assert torch.tpu.memory_allocated() - before == 4096 + 4096
    assert torch.tpu.memory_stats()["dense_bytes.all.current"] - dense_before == 60 + 30
    del x, y
    gc.collect()
    assert torch.tpu.memory_allocated() == before


def test_peak_and_reset():
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    x = torch.empty(1024, 1024, device="tpu")
    del x
    assert torch.tpu.max_memory_allocated() >= base + 4 * 2**20
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    s = torch.tpu.memory_summary()
    assert "vTPU v5e HBM summary" in s and "capacity" in s and "16.00 GiB" in s
    free, total = torch.tpu.mem_get_info()
    assert total == 16 * 2**30 and 0 < free <= total


def test_out_of_memory_error_names_everything():
    keep = torch.empty(256, 1024, 1024, device="tpu")   # 1 GiB
    with pytest.raises(torch.tpu.OutOfMemoryError) as e:
        torch.empty(5 * 2**30, dtype=torch.float32, device="tpu")  # 20 GiB
    msg = str(e.value)
    assert isinstance(e.value, torch.OutOfMemoryError)
    assert "vTPU v5e HBM out of memory" in msg
    assert "tried to allocate 20.00 GiB" in msg
    assert "free of 16.00 GiB capacity" in msg
    assert "Largest live allocations: 1.00 GiB" in msg
    assert "TORCHTPU_CHIP" in msg
    del keep
    # nothing broken: the next allocation and op work
    assert (torch.ones(8, device="tpu") * 3).sum().item() == 24
    assert torch.tpu.memory_stats()["num_ooms"] >= 1


def test_tensor_larger_than_hbm_from_cpu_is_clear():
    r = run_python(
        "import torch, torchtpu\n"
        "x = torch.zeros(3 * 2**20)\n"  # 12 MiB on a 8 MiB vTPU
        "try:\n    x.to('tpu')\nexcept torch.OutOfMemoryError as e:\n    print('OOM', 'tried to allocate 12.00 MiB' in str(e))\n"
        "print((torch.ones(4, device='tpu') + 1).sum().item())",
        env={"TORCHTPU_HBM_BYTES": str(8 << 20)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["OOM", "True", "8.0"]


def test_memory_released_after_queued_work_completes():
    """A tensor dropped while queued work still reads it keeps its memory
    until that work is done (stream-ordered free)."""
    gc.collect()
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    a = torch.ones(512, 512, device="tpu")
    acc = torch.zeros(512, 512, device="tpu")
    for _ in range(20):
        acc = acc + a @ a          # queued work reading a
    del a                          # dropped while the queue still uses it
    torch.tpu.synchronize()
    assert acc[0, 0].item() == 20 * 512
    del acc
    gc.collect()
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base


def test_host_budget_error_before_host_oom():
    r = run_python(
        "import torch, torchtpu\n"
        "try:\n    torch.empty(64 * 2**20, dtype=torch.uint8, device='tpu').fill_(1)\n"
        "except torch.OutOfMemoryError as e:\n    print('HOST', 'host' in str(e))\n"
        "print(torch.ones(3, device='tpu').sum().item())",
        env={"TORCHTPU_HOST_MEMORY_LIMIT": str(16 << 20)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["HOST", "True", "3.0"]


def test_large_chip_reserves_without_committing():
    r = run_python(
        "import torch, torchtpu, resource\n"
        "x = torch.empty(8 * 2**30, dtype=torch.uint8, device='tpu')\n"  # 8 GiB, untouched
        "print(torch.tpu.memory_allocated() >= 8 * 2**30)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 * 2**20)",  # KiB
        env={"TORCHTPU_CHIP": "7x"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]

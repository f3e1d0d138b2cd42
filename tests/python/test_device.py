"""The tpu device and the torch.tpu module."""
import pytest
import torch

from conftest import run_python


def test_device_type_and_index():
    x = torch.zeros(2, 3, device="tpu")
    assert x.device.type == "tpu"
    assert x.device == torch.device("tpu:0")
    assert torch.zeros(1, device=torch.device("tpu:0")).device.index == 0
    assert x.is_tpu and not torch.zeros(1).is_tpu


def test_torch_tpu_module_basics():
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() == 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.synchronize()
    assert torch.tpu.get_device_name() == "vTPU v5e"
    p = torch.tpu.get_device_properties(0)
    assert p.name == "vTPU v5e"
    assert p.total_memory == 16 * 2**30
    assert p.mxu_dim == 128 and p.peak_bf16_flops == pytest.approx(197e12)
    assert torch.tpu.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.tpu.OutOfMemoryError.__mro__[1] is torch.OutOfMemoryError


def test_wrong_device_index_is_a_clear_error():
    with pytest.raises(RuntimeError, match="Invalid device index 1"):
        torch.tpu.set_device(1)
    with pytest.raises(RuntimeError, match="tpu"):
        torch.zeros(2, device="tpu:1")


@pytest.mark.parametrize("chip,name,hbm", [("v4", "vTPU v4", 32 * 2**30),
                                           ("7x", "vTPU 7x", 192 * 2**30),
                                           ("v6e", "vTPU v6e", 32 * 10**9)])
def test_chip_selection(chip, name, hbm):
    r = run_python(
        "import torch, torchtpu; p = torch.tpu.get_device_properties();"
        "print(p.name, p.total_memory); x = torch.ones(4, device='tpu'); print((x+x).sum().item())",
        env={"TORCHTPU_CHIP": chip})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [*name.split(), str(hbm), "8.0"]


def test_unknown_chip_is_a_clear_error():
    r = run_python("import torchtpu", env={"TORCHTPU_CHIP": "v99"})
    assert r.returncode != 0
    assert "TORCHTPU_CHIP='v99' is not a known TPU generation" in r.stderr
    assert "v5e" in r.stderr


def test_rng_state_and_manual_seed():
    torch.manual_seed(123)  # reaches torch.tpu.manual_seed_all
    a = torch.rand(5, device="tpu").cpu()
    state = torch.tpu.get_rng_state()
    b = torch.randn(5, device="tpu").cpu()
    torch.tpu.set_rng_state(state)
    b2 = torch.randn(5, device="tpu").cpu()
    torch.manual_seed(123)
    a2 = torch.rand(5, device="tpu").cpu()
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert not torch.equal(a, torch.rand(5, device="tpu").cpu())
    assert ((a >= 0) & (a < 1)).all()
    with pytest.raises(RuntimeError, match="16-byte"):
        torch.tpu.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_rand_statistics():
    torch.manual_seed(0)
    u = torch.rand(200_000, device="tpu").cpu().double()
    n = torch.randn(200_000, device="tpu").cpu().double()
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert abs(n.mean()) < 0.01 and abs(n.std() - 1) < 0.01


def test_events_time_work():
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    x = torch.randn(256, 256, device="tpu")
    start.record()
    for _ in range(5):
        x = x @ x
        x = x / x.abs().sum()
    end.record()
    end.synchronize()
    assert end.query()
    ms = start.elapsed_time(end)
    assert ms > 0.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.tpu.Event().elapsed_time(torch.tpu.Event())


def test_stream_api():
    s = torch.tpu.current_stream()
    assert s == torch.tpu.default_stream()
    with torch.tpu.stream(s):
        y = torch.ones(3, device="tpu") * 2
    s.synchronize()
    assert s.query()
    assert y.sum().item() == 6

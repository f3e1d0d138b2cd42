"""Limits of PyTorch's Python-only PrivateUse1 path (torch 2.13), each shown,
with what torchtpu provides instead."""
import io

import pytest
import torch

from conftest import run_python


def test_no_tpu_generator_object_but_device_rng_works():
    with pytest.raises(NotImplementedError, match="getNewGenerator"):
        torch.Generator("tpu")
    # instead: the device generator behind torch.tpu / torch.manual_seed
    torch.manual_seed(7)
    a = torch.randn(4, device="tpu").cpu()
    torch.tpu.manual_seed(7)
    assert torch.equal(torch.randn(4, device="tpu").cpu(), a)


def test_accelerator_synchronize_reaches_the_tpu_stream():
    # PyTorch's own path raises: the Python guard has no streams
    with pytest.raises(RuntimeError, match="synchronizing all streams"):
        torch._C._accelerator_synchronizeDevice(0)
    assert torch.accelerator.current_accelerator().type == "tpu"
    x = torch.randn(256, 256, device="tpu")
    for _ in range(10):
        x = x @ x / 256
    torch.accelerator.synchronize()
    assert torch.tpu.current_stream().query()


def test_untyped_storage_on_tpu_does_not_crash():
    r = run_python(
        "import torch\n"
        "torch.utils.backend_registration._setup_privateuseone_for_python_backend('tpu')\n"
        "torch.UntypedStorage(4, device='tpu')\n")
    assert r.returncode != 0          # without torchtpu: the process dies
    s = torch.UntypedStorage(4, device="tpu")
    assert s.device.type == "tpu" and s.nbytes() == 4
    assert torch.TypedStorage(3, device="tpu").size() == 3


def test_storage_tpu_and_torch_load_default_location():
    s = torch.arange(3.0).untyped_storage()
    assert s.tpu().device.type == "tpu"
    buf = io.BytesIO()
    torch.save(torch.arange(3.0).to("tpu"), buf)
    buf.seek(0)
    t = torch.load(buf)
    assert t.device.type == "tpu" and t.tolist() == [0.0, 1.0, 2.0]


def test_pin_memory_without_a_pinned_allocator():
    t = torch.ones(3)
    assert torch.equal(t.pin_memory(), t)
    with pytest.raises(NotImplementedError, match="getPinnedMemoryAllocator"):
        torch.empty(3, pin_memory=True)


def test_autocast_follows_cpu_autocast_policy():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = [(a @ b).dtype, torch.nn.functional.linear(a, b).dtype,
                torch.cat([a, a.bfloat16()]).dtype, (a + b).dtype]
    ta, tb = a.to("tpu"), b.to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        got = [(ta @ tb).dtype, torch.nn.functional.linear(ta, tb).dtype,
               torch.cat([ta, ta.bfloat16()]).dtype, (ta + tb).dtype]
    assert got == want == [torch.bfloat16, torch.bfloat16, torch.float32, torch.float32]


def test_exception_inside_backward_node_propagates():
    class Fail(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise ValueError("raised in backward")

    x = torch.ones(2, device="tpu", requires_grad=True)
    with pytest.raises(ValueError, match="raised in backward"):
        Fail.apply(x).sum().backward()
    y = torch.ones(2, device="tpu", requires_grad=True)
    (y * 2).sum().backward()
    assert y.grad.tolist() == [2.0, 2.0]


def test_sparse_tensors_are_refused_with_a_remedy():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError, match=r"sparse tensors are not supported.*x\.cpu\(\)\.to_sparse"):
            torch.ones(3, device="tpu").to_sparse()
    assert torch.ones(2, device="tpu").sum().item() == 2.0


def test_complex32_is_refused_with_a_clear_error():
    with pytest.raises(TypeError, match="complex32"):
        torch.zeros(2, dtype=torch.complex32).to("tpu")

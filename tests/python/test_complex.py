"""Complex tensors: not native on a TPU, computed on the device on their
float planes (torch.view_as_real), counted as not native, never a CPU
fallback; results match CPU."""
import math
import warnings

import pytest
import torch

import torchtpu
from torchtpu import metrics


@pytest.fixture(autouse=True)
def _no_fallback():
    metrics.reset()
    yield
    assert metrics.fallback_counts() == {}, metrics.fallback_counts()


def _c(*shape, seed=0, dtype=torch.complex64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def same(out, ref, **tol):
    assert out.device.type == "tpu"
    out = out.cpu()
    assert out.dtype == ref.dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, equal_nan=True, **tol)


def test_conversions_and_copies_stay_on_device():
    x = torch.randn(3, 4)
    z = _c(3, 4)
    zt = z.to("tpu")
    same(x.to("tpu").to(torch.complex64), x.to(torch.complex64))
    same(zt.to(torch.complex128), z.to(torch.complex128))
    same(zt.t().contiguous(), z.t().contiguous())
    same(zt.conj().clone(), z.conj().resolve_conj())
    same(zt.conj().imag.clone(), z.conj().imag.resolve_neg())
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        r = torch.empty(3, 4, device="tpu").copy_(zt)
    same(r, z.real)
    assert metrics.fallback_counts() == {}


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_arithmetic(dtype):
    a, b = _c(5, 6, dtype=dtype), _c(5, 6, seed=1, dtype=dtype)
    r = torch.randn(5, 6, dtype=torch.float32)
    a[0, :4] = torch.tensor([1 + 1j, 0, 1e30 + 1e30j, 3j], dtype=dtype)
    b[0, :4] = torch.tensor([0j, 0j, 1e30 - 1e30j, 1e-30], dtype=dtype)
    at, bt, rt = a.to("tpu"), b.to("tpu"), r.to("tpu")
    same(at + bt, a + b)
    same(at - 2 * bt, a - 2 * b)
    same(torch.add(at, bt, alpha=2j), torch.add(a, b, alpha=2j))
    same(at * bt, a * b)
    same(at * rt, a * r)
    same(at * (2 - 1j), a * (2 - 1j))
    same(at / bt, a / b)                       # scaled division: 1e30 parts, 0 / 0
    same(rt / at, r / a)
    same(at / (1 + 2j), a / (1 + 2j))
    same(-at, -a)
    same(at.conj_physical(), a.conj_physical())
    same(at.abs(), a.abs())
    same(at.angle(), a.angle())
    same(at.sgn(), a.sgn())
    same(at.exp(), a.exp())
    same(at.reciprocal(), a.reciprocal())
    same(at.sum(), a.sum())
    same(at.sum(1, keepdim=True), a.sum(1, keepdim=True))
    same(at.mean(0), a.mean(0))
    same(at @ bt.t(), a @ b.t())
    same(torch.nn.functional.pad(at, (1, 2, 0, 1)), torch.nn.functional.pad(a, (1, 2, 0, 1)))
    assert torch.equal((at == at.clone()).cpu(), a == a)
    assert torch.equal((at != bt).cpu(), a != b)
    y = at.clone()
    y += bt
    y *= 2
    same(y, (a + b) * 2)
    z = torch.zeros(3, dtype=dtype, device="tpu").fill_(1 - 2j)
    same(z, torch.full((3,), 1 - 2j, dtype=dtype))
    counts = metrics.not_native_counts()
    assert counts["aten::mul.Tensor"] >= 3 and counts["aten::div.Tensor"] >= 3
    assert "not native on TPU" in metrics.report()


def test_autograd_through_complex_values():
    x = torch.randn(4, 8)
    a = x.clone().requires_grad_()
    b = x.to("tpu").requires_grad_()
    for t in (a, b):
        z = t * (1 + 2j)
        (z.abs() * z.angle()).sum().backward()
    same(b.grad, a.grad)


def test_unlowered_complex_ops_still_fall_back_correctly():
    z = _c(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.sqrt(z.to("tpu"))
    same(out, torch.sqrt(z))
    assert "aten::sqrt" in metrics.fallback_counts()
    metrics.reset()


def test_float64_programs_are_counted_as_not_native():
    x = torch.randn(8, dtype=torch.float64)
    xt = x.to("tpu")
    same((xt * 2).sum(), (x * 2).sum())
    same(torch.ones(3, device="tpu") * 2, torch.ones(3) * 2)
    nn = metrics.not_native_counts()
    assert nn.get("aten::mul.Tensor") == 1 and nn.get("aten::sum") == 1, nn
    assert metrics.op_counts()["aten::mul.Tensor"] == 2

"""Autograd on tpu: gradients equal CPU's; precision reaches backward; errors
inside backward surface as Python exceptions."""
import pytest
import torch

import torchtpu


def _grads(device, x, w, b, precision_ctx=None):
    x = x.to(device).requires_grad_()
    w = w.to(device).requires_grad_()
    b = b.to(device).requires_grad_()
    h = torch.relu(x @ w + b)
    y = torch.softmax(h, dim=-1).exp()
    loss = (y * y).sum()
    loss.backward()
    return [t.cpu() for t in (loss.detach(), x.grad, w.grad, b.grad)]


def test_backward_matches_cpu():
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 5), torch.randn(5, 7), torch.randn(7)
    for got, want in zip(_grads("tpu", x, w, b), _grads("cpu", x, w, b)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_backward_ops_are_tpu_kernels_not_fallbacks():
    torchtpu.metrics.reset()
    torch.manual_seed(0)
    _grads("tpu", torch.randn(4, 3), torch.randn(3, 2), torch.randn(2))
    assert torchtpu.metrics.fallback_counts() == {}
    ops = torchtpu.metrics.op_counts()
    for name in ("aten::threshold_backward", "aten::_softmax_backward_data", "aten::mm"):
        assert ops.get(name, 0) >= 1, name


def _mm_precisions(fn):
    """Which precisions the executables of aten::mm were compiled with."""
    torchtpu._C.cache_clear()
    fn()
    torch.tpu.synchronize()
    return torch.tpu.get_precision()


def test_precision_context_reaches_backward_matmuls():
    torch.manual_seed(0)
    a = torch.randn(64, 256)
    b = torch.randn(256, 64)
    torch.set_float32_matmul_precision("medium")   # tpu default: bf16 passes
    ta = a.to("tpu").requires_grad_()
    tb = b.to("tpu").requires_grad_()
    loss = (ta @ tb).sum()
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        assert torch.tpu.get_precision() == torch.tpu.Precision.HIGHEST
        loss.backward()
    # d(sum(a@b))/da = ones @ b.T: at HIGHEST this equals CPU fp32
    want = torch.ones(64, 64) @ b.t()
    torch.testing.assert_close(ta.grad.cpu(), want, rtol=1e-5, atol=1e-4)
    # the same backward at DEFAULT differs (inputs rounded to bf16)
    ta.grad = None
    loss = (ta @ tb).sum()
    loss.backward()
    err = (ta.grad.cpu() - want).abs().max().item()
    assert err > 1e-3
    want_bf16 = torch.ones(64, 64) @ b.t().bfloat16().float()
    torch.testing.assert_close(ta.grad.cpu(), want_bf16, rtol=1e-5, atol=1e-3)


def test_error_inside_backward_is_a_python_exception():
    x = torch.randn(3, 3, device="tpu", requires_grad=True)

    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            return g @ torch.ones(4, 4, device="tpu")  # shape error in backward

    y = Boom.apply(x).sum()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        y.backward()
    # the process and the device still work
    assert (x.detach() * 0 + 1).sum().item() == 9


def test_out_of_memory_inside_backward_is_catchable():
    from conftest import run_python

    code = """
import torch, torchtpu
w = torch.randn(1024, 1024, device='tpu', requires_grad=True)   # 4 MiB
x = torch.randn(1024, 1024, device='tpu')
h = x @ w
for _ in range(3):
    h = h @ w
loss = h.sum()
try:
    loss.backward()
    print('no error')
except torch.OutOfMemoryError as e:
    print('OOM', type(e).__name__, 'backward' if 'HBM out of memory' in str(e) else str(e)[:80])
del h, loss
print('after', (torch.ones(4, device='tpu') * 2).sum().item())
"""
    # 28 MiB of HBM: forward fits, backward's extra gradients do not
    r = run_python(code, env={"TORCHTPU_HBM_BYTES": str(28 << 20)})
    assert r.returncode == 0, r.stderr
    assert "OOM OutOfMemoryError backward" in r.stdout, r.stdout + r.stderr
    assert "after 8.0" in r.stdout

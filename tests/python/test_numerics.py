"""Matmul numerics by precision, against the accumulation-order bound

    |C - C_ref| <= c * K * u * (|A| @ |B|)      elementwise, c = 1,

with K the contraction length and u = 2**-24 the fp32 unit roundoff (the
products' own rounding, where present, is added as a separate term)."""
import pytest
import torch

U32 = 2.0 ** -24
C = 1.0

P = torch.tpu.Precision


def _bf16(x):
    return x.bfloat16().double()


def _case(m, k, n, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    return a, b


@pytest.mark.parametrize("m,k,n", [(8, 16, 4), (64, 257, 33), (32, 4096, 16), (1, 1000, 1)])
def test_highest_matches_fp32_within_bound(m, k, n):
    a, b = _case(m, k, n, k)
    with torch.tpu.precision(P.HIGHEST):
        c = (a.to("tpu") @ b.to("tpu")).cpu().double()
    ref = a.double() @ b.double()
    bound = C * k * U32 * (a.double().abs() @ b.double().abs())
    assert ((c - ref).abs() <= bound).all()
    cpu = (a @ b).double()
    assert ((c - cpu).abs() <= 2 * bound).all()


@pytest.mark.parametrize("m,k,n", [(8, 16, 4), (64, 257, 33), (32, 4096, 16)])
def test_default_equals_bf16_rounded_inputs_in_fp32(m, k, n):
    a, b = _case(m, k, n, k + 1)
    with torch.tpu.precision(P.DEFAULT):
        c = (a.to("tpu") @ b.to("tpu")).cpu().double()
    ab, bb = _bf16(a), _bf16(b)
    ref = ab @ bb               # bf16 x bf16 products are exact in fp32
    bound = C * k * U32 * (ab.abs() @ bb.abs())
    assert ((c - ref).abs() <= bound).all()
    # and it really is less precise than fp32 for random data
    exact = a.double() @ b.double()
    fp32_err = ((a @ b).double() - exact).abs().max()
    assert (c - exact).abs().max() > 10 * fp32_err


@pytest.mark.parametrize("m,k,n", [(16, 300, 8), (8, 2048, 8)])
def test_high_lies_between(m, k, n):
    a, b = _case(m, k, n, 7)
    ta, tb = a.to("tpu"), b.to("tpu")
    exact = a.double() @ b.double()
    errs = {}
    for p in (P.DEFAULT, P.HIGH, P.HIGHEST):
        with torch.tpu.precision(p):
            errs[p] = ((ta @ tb).cpu().double() - exact).abs().max().item()
    assert errs[P.HIGHEST] < errs[P.HIGH] < errs[P.DEFAULT]
    # three bf16 passes keep ~16 significant bits of each input
    mag = a.double().abs() @ b.double().abs()
    with torch.tpu.precision(P.HIGH):
        c = (ta @ tb).cpu().double()
    bound = C * (k * U32 + 2.0 ** -15) * mag
    assert ((c - exact).abs() <= bound).all()


def test_bf16_inputs_accumulate_in_fp32():
    a, b = _case(32, 1024, 16, 3)
    ab, bb = a.bfloat16(), b.bfloat16()
    for p in (P.DEFAULT, P.HIGHEST):
        with torch.tpu.precision(p):
            c = (ab.to("tpu") @ bb.to("tpu")).cpu()
        assert c.dtype == torch.bfloat16
        ref = (ab.double() @ bb.double())
        # one final rounding to bf16 plus the fp32 accumulation
        bound = ref.abs() * 2.0 ** -8 + 1024 * U32 * (ab.double().abs() @ bb.double().abs())
        assert ((c.double() - ref).abs() <= bound).all()


def test_backward_matmul_numerics_at_highest():
    a, b = _case(16, 64, 8, 11)
    ta = a.to("tpu").requires_grad_()
    (ta @ b.to("tpu")).sum().backward()
    ref = torch.ones(16, 8).double() @ b.double().t()
    bound = C * 8 * U32 * (torch.ones(16, 8).double() @ b.double().abs().t())
    assert ((ta.grad.cpu().double() - ref).abs() <= bound).all()


def test_elementwise_math_runs_in_fp32_and_rounds_to_bf16():
    x = torch.randn(1000) * 3
    xb = x.bfloat16()
    got = xb.to("tpu").exp().cpu()
    want = xb.float().exp().bfloat16()        # compute in fp32, round once
    assert (got.float() - want.float()).abs().max() <= (want.float().abs() * 2.0 ** -8).max()
    s = (xb.to("tpu") + xb.to("tpu") * 3).cpu()
    ref = (xb.float() + xb.float() * 3).bfloat16()
    # each aten op rounds to bf16, as PyTorch's CPU kernels do
    ref2 = (xb + xb * 3)
    assert torch.equal(s, ref2)
    assert (s.float() - ref.float()).abs().max() <= (ref.float().abs() * 2.0 ** -7).max()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_addr_rounds_every_step_like_cpu(dtype):
    """PyTorch's CPU addr computes beta * self + (alpha * vec1) * vec2 in
    the dtype itself (bf16/f16 round every step, alpha and beta too) and
    ignores self when beta is zero: bitwise equal; float32 and the other
    dtypes within their usual tolerance."""
    g = torch.Generator().manual_seed(0)
    s = torch.randn(33, 40, generator=g) * 4
    a, b = torch.randn(33, generator=g) * 4, torch.randn(40, generator=g) * 4
    s[0, 0] = float("nan")
    for beta, alpha in ((1, 1), (0.3, 1.7), (0, 0.6), (2.5, 1)):
        args = [t.to(dtype) for t in (s, a, b)]
        got = torch.addr(*[t.to("tpu") for t in args], beta=beta, alpha=alpha).cpu()
        assert torch.equal(got.nan_to_num(), torch.addr(*args, beta=beta, alpha=alpha).nan_to_num())
        got = torch.addr(s.to("tpu"), a.to("tpu"), b.to("tpu"), beta=beta, alpha=alpha).cpu()
        torch.testing.assert_close(got, torch.addr(s, a, b, beta=beta, alpha=alpha),
                                   equal_nan=True)
    i = torch.arange(6)
    for t in (i.bool(), i):
        got = torch.addr(t.reshape(2, 3).to("tpu"), t[:2].to("tpu"), t[3:].to("tpu"))
        assert torch.equal(got.cpu(), torch.addr(t.reshape(2, 3), t[:2], t[3:]))
    c = torch.randn(3, 4, dtype=torch.complex64)
    got = torch.addr(c.to("tpu"), c[:, 0].to("tpu"), c[0].to("tpu"), beta=2, alpha=3)
    torch.testing.assert_close(got.cpu(), torch.addr(c, c[:, 0], c[0], beta=2, alpha=3))

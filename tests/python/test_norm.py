"""Reductions, normalization layers, losses, dropout and embedding on tpu
against PyTorch CPU: forward and backward, float32 (default tolerances)
and bfloat16, odd shapes, non-contiguous inputs, keepdim and negative dims,
NaN and ties, and no CPU fallback for the lowered ops."""
import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import _C, metrics
from torchtpu._env import DTYPE_CODE
from torchtpu.lowering import norm as norm_rules

A = torch.ops.aten
BF16 = dict(rtol=1.6e-2, atol=1e-2)
ODD = (3, 17, 129)
NAN = math.nan
INF = math.inf

# ops built on the IR argmax/argmin reduce (no longer expected to fall back)
ARGMAX_OPS = set()


def tol(dtype):
    return BF16 if dtype == torch.bfloat16 else {}


def rand(*shape, dtype=torch.float32, seed=0, lo=None, hi=None):
    g = torch.Generator().manual_seed(seed)
    if dtype in (torch.int32, torch.int64, torch.int8, torch.uint8):
        return torch.randint(lo if lo is not None else -5, hi if hi is not None else 6, shape,
                             generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    x = torch.randn(shape, generator=g)
    if lo is not None:
        x = lo + (hi - lo) * torch.rand(shape, generator=g)
    return x.to(dtype)


def dev(x):
    return x.to("tpu") if isinstance(x, torch.Tensor) else x


def check(out, ref, **kw):
    if isinstance(ref, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(ref)
        for o, r in zip(out, ref):
            check(o, r, **kw)
        return
    if ref is None:
        assert out is None
        return
    assert out.device.type == "tpu", out.device
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True, **kw)


def both(fn, *args, tol_=None, **kwargs):
    """fn on CPU tensors and on their tpu copies; compares the results."""
    dargs = [dev(a) for a in args]        # before fn mutates any argument
    dkwargs = {k: dev(v) for k, v in kwargs.items()}
    ref = fn(*args, **kwargs)
    out = fn(*dargs, **dkwargs)
    check(out, ref, **(tol_ or {}))
    return out, ref


@pytest.fixture
def nofallback():
    """Fails the test if any op it ran fell back to the CPU (apart from the
    argmax family, which waits for a C core fix)."""
    metrics.reset()
    yield
    torch.tpu.synchronize()
    counts = metrics.fallback_counts()
    if not norm_rules._IR_ARGMAX_WORKS:
        counts = {k: v for k, v in counts.items() if k not in ARGMAX_OPS}
    assert counts == {}


def noncontig(x):
    """A non-contiguous tpu view holding the same values as x."""
    t = dev(x.transpose(0, -1).contiguous()).transpose(0, -1)
    assert not t.is_contiguous() or x.dim() < 2
    return t


# ------------------------------------------------------------- mean / var / std


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), ((0, -1), True), (-1, True),
                                         ([], False)])
def test_mean(nofallback, dtype, dim, keepdim):
    x = rand(*ODD, dtype=dtype)
    if dim is None:
        both(lambda t: t.mean(), x, tol_=tol(dtype))
    else:
        both(lambda t: t.mean(dim, keepdim=keepdim), x, tol_=tol(dtype))
    both(lambda t: torch.mean(t, dim=1, dtype=torch.float32), x)


def test_mean_noncontiguous_and_errors(nofallback):
    x = rand(5, 7, 9)
    check(noncontig(x).mean((0, 2)), x.mean((0, 2)))
    check(dev(x)[:, ::2].mean(-1, keepdim=True), x[:, ::2].mean(-1, keepdim=True))
    check(dev(torch.empty(0, 3)).mean(0), torch.empty(0, 3).mean(0))
    check(dev(torch.tensor(2.5)).mean(), torch.tensor(2.5))
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype"):
        dev(torch.ones(3, dtype=torch.int64)).mean()
    both(lambda t: t.mean(dtype=torch.float32), torch.arange(10))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim,correction,keepdim", [
    (None, 1, False), (1, 0, False), ((0, 2), 1, True), (-1, 2, False), (-2, 0.5, True),
])
def test_var_std(nofallback, dtype, dim, correction, keepdim):
    x = rand(*ODD, dtype=dtype) * 3 + 1
    t = tol(dtype)
    kw = dict(dim=dim, correction=correction, keepdim=keepdim)
    both(lambda a: torch.var(a, **kw), x, tol_=t)
    both(lambda a: torch.std(a, **kw), x, tol_=t)
    both(lambda a: torch.var_mean(a, **kw), x, tol_=t)
    both(lambda a: torch.std_mean(a, **kw), x, tol_=t)


def test_var_edge_cases(nofallback):
    x = rand(4, 6)
    both(lambda a: a.var(1, unbiased=False), x)            # var.dim decomposes
    both(lambda a: a.std(0, unbiased=True, keepdim=True), x)
    check(noncontig(x).var(0), x.var(0))
    one = torch.tensor([[3.0], [4.0]])
    both(lambda a: a.var(1), one)                          # N - correction = 0: nan
    both(lambda a: a.std(1, correction=0), one)
    both(lambda a: a.var(), torch.tensor([1e4 + 1, 1e4 + 2, 1e4 + 3]))   # two-pass accuracy
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        dev(torch.ones(3, dtype=torch.int32)).var()


# ------------------------------------------------------------- prod / extrema


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_prod(nofallback, dtype):
    if dtype.is_floating_point:
        x = rand(3, 5, 7, dtype=torch.float32, lo=0.5, hi=1.5).to(dtype)
    else:
        x = rand(3, 5, 7, dtype=dtype, lo=-3, hi=4)
    t = tol(dtype)
    both(lambda a: a.prod(), x, tol_=t)
    both(lambda a: a.prod(1), x, tol_=t)
    both(lambda a: a.prod(-1, keepdim=True), x, tol_=t)
    if dtype.is_floating_point:
        both(lambda a: torch.prod(a, 0, dtype=torch.float32), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_amax_amin_max_min(nofallback, dtype):
    x = rand(*ODD, dtype=dtype)
    for fn in (lambda a: a.amax(1), lambda a: a.amin((0, -1), keepdim=True),
               lambda a: a.amax(), lambda a: a.max(), lambda a: a.min(),
               lambda a: torch.amin(a, -2)):
        both(fn, x)
    check(noncontig(x).amax(0), x.amax(0))


def test_extrema_nan_and_errors(nofallback):
    x = torch.tensor([[1.0, NAN, 3.0], [-INF, 2.0, 0.0], [5.0, 4.0, NAN]])
    for fn in (lambda a: a.amax(1), lambda a: a.amin(0), lambda a: a.max(),
               lambda a: a.min(), lambda a: a.amax(-1, keepdim=True)):
        both(fn, x)
    both(lambda a: a.max(), torch.tensor([-INF, -INF]))
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified"):
        dev(torch.empty(0, 3)).max()
    with pytest.raises(IndexError, match="to have non-zero size"):
        dev(torch.empty(0, 3)).amax(0)


TIES = torch.tensor([[1.0, 5.0, 3.0, 5.0, 0.0],
                     [NAN, 2.0, NAN, 7.0, 7.0],
                     [-1.0, -2.0, -2.0, -4.0, -4.0],
                     [2.0, 2.0, 2.0, 2.0, 2.0]])


@pytest.mark.parametrize("x", [TIES, TIES.t(), rand(*ODD),
                               rand(4, 9, dtype=torch.int64, lo=0, hi=3),
                               rand(4, 9, dtype=torch.bool), rand(3, 33, dtype=torch.bfloat16)],
                         ids=["ties", "ties_t", "odd", "int", "bool", "bf16"])
def test_max_dim_argmax(nofallback, x):
    """values and int64 indices of the first occurrence; NaN wins."""
    for fn in (lambda a: a.max(1), lambda a: a.min(0), lambda a: a.max(-1, keepdim=True),
               lambda a: a.min(1, keepdim=True), lambda a: a.argmax(), lambda a: a.argmin(),
               lambda a: a.argmax(1), lambda a: a.argmin(0, keepdim=True),
               lambda a: a.argmax(None, keepdim=True)):
        if x.dtype == torch.bool and fn.__code__.co_names[0].startswith("arg"):
            continue                    # argmax/argmin reject bool on CPU
        both(fn, x)
    if not norm_rules._IR_ARGMAX_WORKS:
        reasons = torchtpu._fallback.reasons()
        assert any("C core bug" in r for r in reasons.values())


def test_ir_reduce_argmax():
    """The IR reduce kinds argmax/argmin: first index of the extreme."""
    for kind, ref in ((6, TIES.argmax(1)), (7, TIES.argmin(1))):
        g = _C.Graph()
        p = g.param(DTYPE_CODE[torch.float32], (4, 5))
        g.output(g.node("reduce", [p], kind=kind, ints=(1,)))
        out = _C.run(_C.compile(g), [dev(TIES)])[0]
        assert torch.equal(out.cpu(), ref)


# ------------------------------------------------------------- any / all


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.uint8])
def test_any_all(nofallback, dtype):
    x = rand(3, 7, 5, dtype=dtype, lo=0, hi=2)
    if dtype == torch.float32:
        x = (x > 0.5).float() * x
        x[0, 0, 0] = NAN
    for fn in (lambda a: a.any(), lambda a: a.all(), lambda a: a.any(1),
               lambda a: a.all(-1, keepdim=True), lambda a: torch.any(a, dim=(0, 2)),
               lambda a: torch.all(a, dim=(0, -1), keepdim=True), lambda a: torch.any(a, dim=()),
               lambda a: torch.all(a, dim=())):
        both(fn, x)
    check(noncontig(x).all(0), x.all(0))
    both(lambda a: a.all(), torch.ones(0, 3, dtype=dtype))


# ------------------------------------------------------------- logsumexp / norms


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_logsumexp(nofallback, dtype):
    x = rand(*ODD, dtype=dtype) * 10
    t = tol(dtype)
    both(lambda a: a.logsumexp(1), x, tol_=t)
    both(lambda a: a.logsumexp((0, -1), keepdim=True), x, tol_=t)
    check(noncontig(x.float()).logsumexp(0), x.float().logsumexp(0))
    s = torch.tensor([[-INF, -INF], [INF, 1.0], [NAN, 0.0], [1000.0, 1000.0]])
    both(lambda a: a.logsumexp(1), s)
    both(lambda a: a.logsumexp(0), torch.arange(6).reshape(2, 3))   # int -> float


@pytest.mark.parametrize("ord", [2, 1, INF, -INF, 0, 3, 0.5, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_vector_norm(nofallback, ord, dtype):
    x = rand(3, 17, 9, dtype=dtype)
    x[0, 0, 0] = 0
    t = tol(dtype)
    both(lambda a: torch.linalg.vector_norm(a, ord), x, tol_=t)
    both(lambda a: torch.linalg.vector_norm(a, ord, dim=1), x, tol_=t)
    both(lambda a: torch.linalg.vector_norm(a, ord, dim=(0, -1), keepdim=True), x, tol_=t)
    if ord not in (0, -1):
        both(lambda a: a.norm(p=ord, dim=-1), x, tol_=t)


def test_norm_misc(nofallback):
    x = rand(6, 5)
    both(lambda a: a.norm(), x)
    both(lambda a: torch.norm(a, dim=0, keepdim=True), x)
    check(noncontig(x).norm(dim=1), x.norm(dim=1))
    both(lambda a: torch.linalg.vector_norm(a, dtype=torch.float32),
         x.bfloat16())


# ------------------------------------------------------------- scans


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.bool])
def test_cumsum_cumprod(nofallback, dtype):
    if dtype.is_floating_point:
        x = rand(3, 17, 9, dtype=torch.float32, lo=0.8, hi=1.2).to(dtype)
    else:
        x = rand(3, 17, 9, dtype=dtype, lo=-2, hi=3)
    t = tol(dtype)
    for d in (0, 1, -1):
        both(lambda a: a.cumsum(d), x, tol_=t)
        both(lambda a: a.cumprod(d), x, tol_=t)
    check(noncontig(x).cumsum(1), x.cumsum(1), **t)
    if dtype != torch.bool:
        y, ref = dev(x.clone()), x.clone()
        y.cumsum_(1)
        ref.cumsum_(1)
        check(y, ref, **t)
        y.cumprod_(-1)
        ref.cumprod_(-1)
        check(y, ref, **t)
    both(lambda a: a.cumsum(0, dtype=torch.float32), x)
    both(lambda a: a.cumsum(0), torch.tensor(3.0))


# ------------------------------------------------------------- log_softmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_log_softmax(nofallback, dtype, dim):
    x = rand(*ODD, dtype=dtype) * 5
    t = tol(dtype)
    xc = x.clone().requires_grad_()
    xt = dev(x).requires_grad_()
    g = rand(*ODD, dtype=dtype, seed=1)
    ref = F.log_softmax(xc, dim)
    out = F.log_softmax(xt, dim)
    check(out, ref.detach(), **t)
    ref.backward(g)
    out.backward(dev(g))
    check(xt.grad, xc.grad, **t)


def test_log_softmax_edge(nofallback):
    x = torch.tensor([[-INF, 0.0, 1.0], [NAN, 1.0, 2.0], [1e30, -1e30, 0.0]])
    both(lambda a: F.log_softmax(a, 1), x)
    both(lambda a: F.log_softmax(a, 0), torch.tensor(3.0))
    check(F.log_softmax(noncontig(rand(5, 7)), 0), F.log_softmax(rand(5, 7), 0))


# ------------------------------------------------------------- nll / cross entropy


def _grad_pair(fn, x, *rest, dtype_tol=None):
    xc = x.clone().requires_grad_()
    xt = dev(x).requires_grad_()
    ref = fn(xc, *rest)
    out = fn(xt, *[dev(r) for r in rest])
    check(out, ref.detach(), **(dtype_tol or {}))
    g = rand(*ref.shape, seed=7, dtype=ref.dtype)
    ref.backward(g)
    out.backward(dev(g))
    check(xt.grad, xc.grad, **(dtype_tol or {}))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(nofallback, reduction, weighted):
    x = F.log_softmax(rand(13, 7), 1)
    t = torch.tensor([0, 6, 3, -100, 2, 2, 1, 5, 4, 3, 0, -100, 6])
    w = rand(7, lo=0.1, hi=2.0) if weighted else None
    _grad_pair(lambda a, tt: F.nll_loss(a, tt, weight=dev(w) if a.device.type == "tpu" else w,
                                        reduction=reduction), x, t)
    _grad_pair(lambda a, tt: F.nll_loss(a, tt, reduction=reduction, ignore_index=3), x, t.clamp(0))
    _grad_pair(lambda a, tt: F.nll_loss(a, tt, reduction=reduction), x[2], t[2])   # 1-d input
    # (N, C, H, W): nll_loss2d
    x4 = F.log_softmax(rand(2, 5, 3, 4), 1)
    t4 = rand(2, 3, 4, dtype=torch.int64, lo=0, hi=5)
    t4[0, 0, 0] = -100
    w5 = rand(5, lo=0.1, hi=2.0) if weighted else None
    _grad_pair(lambda a, tt: F.nll_loss(a, tt, weight=dev(w5) if a.device.type == "tpu" else w5,
                                        reduction=reduction), x4, t4)


def test_nll_loss_edge(nofallback):
    x = F.log_softmax(rand(3, 4), 1)
    ign = torch.tensor([-100, -100, -100])
    for red in (0, 1, 2):
        both(lambda a, tt: A.nll_loss_forward(a, tt, None, red, -100), x, ign)
    both(lambda a, tt, w: A.nll_loss_forward(a, tt, w, 1, -100), x, torch.tensor([0, 1, 2]),
         torch.tensor([0.0, 0.0, 0.0, 1.0]))
    both(lambda a, tt: F.nll_loss(a, tt), x.bfloat16(), torch.tensor([1, 2, 3]), tol_=BF16)
    with pytest.raises(IndexError):
        F.nll_loss(dev(x), dev(torch.tensor([0, 9, 1]))).cpu()
        torch.tpu.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_no_fallback(nofallback, dtype):
    """F.cross_entropy forward and backward run entirely on the tpu."""
    x = rand(16, 37, dtype=dtype) * 3
    t = rand(16, dtype=torch.int64, lo=0, hi=37)
    t[3] = -100
    _grad_pair(lambda a, tt: F.cross_entropy(a, tt), x, t, dtype_tol=tol(dtype))
    w = rand(37, lo=0.5, hi=1.5).to(dtype)
    _grad_pair(lambda a, tt: F.cross_entropy(a, tt, weight=dev(w) if a.device.type == "tpu" else w,
                                             reduction="sum"), x, t, dtype_tol=tol(dtype))
    # K-dim: (N, C, d1)
    x3 = rand(4, 6, 5, dtype=dtype)
    t3 = rand(4, 5, dtype=torch.int64, lo=0, hi=6)
    _grad_pair(lambda a, tt: F.cross_entropy(a, tt), x3, t3, dtype_tol=tol(dtype))
    assert metrics.fallback_counts() == {}


# ------------------------------------------------------------- regression losses


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mse_smooth_l1_huber(nofallback, reduction, dtype):
    x = rand(5, 17, 9, dtype=dtype) * 2
    y = rand(5, 17, 9, dtype=dtype, seed=1) * 2
    y[0, 0, :3] = x[0, 0, :3]          # exact zeros of the difference
    t = tol(dtype)
    _grad_pair(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, y, dtype_tol=t)
    for beta in (1.0, 0.5):
        _grad_pair(lambda a, b: F.smooth_l1_loss(a, b, reduction=reduction, beta=beta), x, y,
                   dtype_tol=t)
    for delta in (1.0, 0.3):
        _grad_pair(lambda a, b: F.huber_loss(a, b, reduction=reduction, delta=delta), x, y,
                   dtype_tol=t)


def test_loss_edge(nofallback):
    x, y = rand(4, 6), rand(4, 6, seed=3)
    check(F.mse_loss(noncontig(x), noncontig(y)), F.mse_loss(x, y))
    both(lambda a, b: A.smooth_l1_loss(a, b, 1, 0.0), x, y)
    both(lambda a, b: A.smooth_l1_loss_backward(dev(torch.tensor(1.0)) if a.device.type == "tpu"
                                                else torch.tensor(1.0), a, b, 0, 0.0),
         torch.tensor([0.0, 1.0, -2.0]), torch.tensor([0.0, 3.0, -4.0]))
    with pytest.raises(RuntimeError, match="negative values for beta"):
        A.smooth_l1_loss(dev(x), dev(y), 1, -1.0)
    with pytest.raises(RuntimeError, match="non-positive values for delta"):
        A.huber_loss(dev(x), dev(y), 1, 0.0)


def test_l1_loss():
    """l1_loss decomposes into abs (another family's op) and mean/sum."""
    metrics.reset()
    x, y = rand(5, 7), rand(5, 7, seed=2)
    both(lambda a, b: F.l1_loss(a, b), x, y)
    both(lambda a, b: F.l1_loss(a, b, reduction="sum"), x, y)
    assert not [k for k in metrics.fallback_counts() if k.startswith(("aten::mean", "aten::sum"))]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy(nofallback, reduction):
    p = rand(7, 13, lo=0.01, hi=0.99)
    p[0, :2] = torch.tensor([0.0, 1.0])
    y = rand(7, 13, lo=0.0, hi=1.0, seed=4)
    y[0, :2] = torch.tensor([1.0, 0.0])           # log clamped at -100
    w = rand(13, lo=0.5, hi=2.0, seed=5)
    _grad_pair(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction), p, y)
    _grad_pair(lambda a, b: F.binary_cross_entropy(
        a, b, weight=dev(w) if a.device.type == "tpu" else w, reduction=reduction), p, y)
    both(lambda a, b: F.binary_cross_entropy(a, b), p.bfloat16(), y.bfloat16(), tol_=BF16)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy_with_logits(nofallback, reduction):
    x = rand(7, 13) * 4
    x[0, 0], x[0, 1] = 100.0, -100.0
    y = rand(7, 13, lo=0.0, hi=1.0, seed=4)
    w = rand(13, lo=0.5, hi=2.0, seed=5)
    pw = rand(13, lo=0.5, hi=3.0, seed=6)
    both(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction), x, y)
    both(lambda a, b, ww, pp: F.binary_cross_entropy_with_logits(
        a, b, weight=ww, pos_weight=pp, reduction=reduction), x, y, w, pw)
    both(lambda a, b: F.binary_cross_entropy_with_logits(a, b), x.bfloat16(), y.bfloat16(),
         tol_=BF16)


def test_binary_cross_entropy_with_logits_backward():
    """The backward is composed of other families' ops; values only."""
    x, y = rand(7, 13) * 4, rand(7, 13, lo=0.0, hi=1.0, seed=4)
    _grad_pair(lambda a, b: F.binary_cross_entropy_with_logits(a, b), x, y)


# ------------------------------------------------------------- layer / group norm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nshape,affine", [((129,), True), ((17, 129), True), ((129,), False)])
def test_layer_norm(nofallback, dtype, nshape, affine):
    x = rand(*ODD, dtype=dtype) * 2 + 0.5
    w = rand(*nshape, seed=1).to(dtype) if affine else None
    b = rand(*nshape, seed=2).to(dtype) if affine else None
    t = tol(dtype)
    xs = [x.clone().requires_grad_(), dev(x).requires_grad_()]
    ws = [w.clone().requires_grad_(), dev(w).requires_grad_()] if affine else [None, None]
    bs = [b.clone().requires_grad_(), dev(b).requires_grad_()] if affine else [None, None]
    outs = [F.layer_norm(xs[i], nshape, ws[i], bs[i], eps=1e-5) for i in range(2)]
    check(outs[1], outs[0].detach(), **t)
    g = rand(*ODD, dtype=dtype, seed=9)
    outs[0].backward(g)
    outs[1].backward(dev(g))
    check(xs[1].grad, xs[0].grad, **t)
    if affine:
        if dtype == torch.bfloat16:
            _, mean, rstd = A.native_layer_norm(dev(x), nshape, dev(w), dev(b), 1e-5)
            ref = A.native_layer_norm_backward(*_f64(g, x), nshape, *_f64(mean, rstd, w, b),
                                               [True] * 3)
        else:
            ref = (None, ws[0].grad, bs[0].grad)
        check(ws[1].grad, ref[1].to(dtype), **t)
        check(bs[1].grad, ref[2].to(dtype), **t)


def _f64(*ts):
    """float64 CPU copies: the reference for bfloat16 parameter gradients,
    which are sums the CPU kernels accumulate in bfloat16. The backward
    reads the saved bfloat16 statistics, as PyTorch's does."""
    return [t.detach().cpu().double() for t in ts]


def test_layer_norm_parts(nofallback):
    x = rand(4, 6, 10)
    w, b = rand(10, seed=1), rand(10, seed=2)
    both(lambda a, ww, bb: A.native_layer_norm(a, [10], ww, bb, 1e-5), x, w, b)
    both(lambda a: A.native_layer_norm(a, [6, 10], None, None, 1e-3), x)
    # mixed precision: bf16 input, f32 parameters -> f32 mean/rstd
    both(lambda a, ww, bb: A.native_layer_norm(a, [10], ww, bb, 1e-5), x.bfloat16(), w, b,
         tol_=BF16)
    check(F.layer_norm(noncontig(x), (10,)), F.layer_norm(x, (10,)))
    out, mean, rstd = A.native_layer_norm(x, [10], w, b, 1e-5)
    g = rand(4, 6, 10, seed=3)
    for mask in ([True, False, False], [False, True, True], [True, True, False]):
        both(lambda gg, a, mm, rr, ww, bb: A.native_layer_norm_backward(
            gg, a, [10], mm, rr, ww, bb, mask), g, x, mean, rstd, w, b)
    both(lambda gg, a, mm, rr: A.native_layer_norm_backward(
        gg, a, [10], mm, rr, None, None, [True, False, False]), g, x, mean, rstd)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,groups,affine", [((2, 6, 5, 7), 3, True), ((3, 4, 9), 2, False),
                                                 ((4, 8), 2, True)])
def test_group_norm(nofallback, dtype, shape, groups, affine):
    x = rand(*shape, dtype=dtype) * 2 + 1
    c = shape[1]
    t = tol(dtype)
    xs = [x.clone().requires_grad_(), dev(x).requires_grad_()]
    w = rand(c, seed=1).to(dtype) if affine else None
    b = rand(c, seed=2).to(dtype) if affine else None
    ws = [w.clone().requires_grad_(), dev(w).requires_grad_()] if affine else [None, None]
    bs = [b.clone().requires_grad_(), dev(b).requires_grad_()] if affine else [None, None]
    outs = [F.group_norm(xs[i], groups, ws[i], bs[i]) for i in range(2)]
    check(outs[1], outs[0].detach(), **t)
    g = rand(*shape, dtype=dtype, seed=9)
    outs[0].backward(g)
    outs[1].backward(dev(g))
    check(xs[1].grad, xs[0].grad, **t)
    if affine:
        if dtype == torch.bfloat16:
            n, hxw = shape[0], x[0, 0].numel()
            _, mean, rstd = A.native_group_norm(dev(x), dev(w), dev(b), n, c, hxw, groups, 1e-5)
            ref = A.native_group_norm_backward(*_f64(g, x, mean, rstd, w), n, c, hxw, groups,
                                               [True] * 3)
        else:
            ref = (None, ws[0].grad, bs[0].grad)
        check(ws[1].grad, ref[1].to(dtype), **t)
        check(bs[1].grad, ref[2].to(dtype), **t)
    hxw = x[0, 0].numel()
    both(lambda a: A.native_group_norm(a, None, None, shape[0], c, hxw, groups, 1e-5), x, tol_=t)


def test_group_norm_one_element_groups(nofallback):
    """groups of one element: zero deviation exactly (CPU is off by ~1e-5
    here, so the reference is float64)."""
    x, w, b = rand(4, 6) * 2 + 1, rand(6, seed=1), rand(6, seed=2)
    out = F.group_norm(dev(x), 6, dev(w), dev(b))
    check(out, F.group_norm(x.double(), 6, w.double(), b.double()).float())


# ------------------------------------------------------------- batch norm


def _bn_pair(x, affine, stats, training, momentum=0.1, dtype=None, grad=True):
    c = x.shape[1]
    w = rand(c, seed=1, lo=0.5, hi=1.5) if affine else None
    b = rand(c, seed=2) if affine else None
    rm = rand(c, seed=3) if stats else None
    rv = rand(c, seed=4, lo=0.5, hi=2.0) if stats else None
    res = []
    for d in ("cpu", "tpu"):
        xx = x.clone().to(d).requires_grad_(grad)
        ww = w.clone().to(d).requires_grad_(grad) if affine else None
        bb = b.clone().to(d).requires_grad_(grad) if affine else None
        rmm = rm.clone().to(d) if stats else None
        rvv = rv.clone().to(d) if stats else None
        out = F.batch_norm(xx, rmm, rvv, ww, bb, training=training, momentum=momentum, eps=1e-5)
        res.append((xx, ww, bb, rmm, rvv, out))
    return res


@pytest.mark.parametrize("shape", [(4, 3, 5, 7), (8, 5), (2, 3, 17)])
@pytest.mark.parametrize("training,stats", [(True, True), (False, True), (True, False)])
def test_batch_norm(nofallback, shape, training, stats):
    x = rand(*shape) * 2 + 1
    (xc, wc, bc, rmc, rvc, oc), (xt, wt, bt, rmt, rvt, ot) = _bn_pair(x, True, stats, training)
    check(ot, oc.detach())
    if stats:                                 # running statistics updated like CPU
        check(rmt, rmc)
        check(rvt, rvc)
    g = rand(*shape, seed=9)
    oc.backward(g)
    ot.backward(dev(g))
    check(xt.grad, xc.grad, rtol=1e-4, atol=1e-5)
    check(wt.grad, wc.grad, rtol=1e-4, atol=1e-4)
    check(bt.grad, bc.grad, rtol=1e-4, atol=1e-4)


def _bf16_layouts(x):
    """x as contiguous, channels-last and non-contiguous bfloat16 inputs."""
    x = x.bfloat16()
    t = x.transpose(0, 2).contiguous().transpose(0, 2)
    return {"contiguous": x, "channels_last": x.to(memory_format=torch.channels_last),
            "strided": t}


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_bfloat16_rounds_like_cpu(nofallback, training):
    """bf16 batch norm with bf16 parameters rounds where PyTorch's CPU
    kernels do (contiguous input: mean and sum of squares kept in bf16,
    divided in bf16, running statistics updated in bf16; other layouts: the
    output formed op by op in bf16): output, saved statistics and running
    statistics are bitwise CPU's (contiguous eval mode, x * a + b in float
    on the CPU, within tolerance)."""
    x = rand(4, 5, 6, 7, seed=3) * 3 + 2
    w, b = rand(5, seed=1).bfloat16(), rand(5, seed=2).bfloat16()
    rm, rv = rand(5, seed=4).bfloat16(), rand(5, seed=5, lo=0.5, hi=2).bfloat16()
    for name, xx in _bf16_layouts(x).items():
        for ww, bb in ((w, b), (None, None)):
            rmc, rvc, rmt, rvt = rm.clone(), rv.clone(), dev(rm), dev(rv)
            want = A.native_batch_norm(xx, ww, bb, rmc, rvc, training, 0.3, 1e-3)
            xt = torch.empty_strided(xx.shape, xx.stride(), dtype=xx.dtype, device="tpu")
            xt.copy_(xx)
            got = A.native_batch_norm(xt, dev(ww), dev(bb), rmt, rvt, training, 0.3, 1e-3)
            for o, r in zip(got + (rmt, rvt), want + (rmc, rvc)):
                if training or name == "strided":
                    assert torch.equal(o.cpu(), r), name
                else:
                    check(o, r, **BF16)


def test_batch_norm_variants(nofallback):
    x = rand(4, 3, 6, 5)
    w, b = rand(3, seed=1), rand(3, seed=2)
    rm, rv = rand(3, seed=3), rand(3, seed=4, lo=0.5, hi=2)

    def legit(a, ww, bb, m_, v_):
        return A._native_batch_norm_legit(a, ww, bb, m_, v_, True, 0.3, 1e-3) + (m_, v_)

    both(legit, x, w, b, rm.clone(), rv.clone())
    both(lambda a, ww, bb, m_, v_: A._native_batch_norm_legit(a, ww, bb, m_, v_, False, 0.3, 1e-3),
         x, w, b, rm, rv)
    both(lambda a, ww, bb: A._native_batch_norm_legit.no_stats(a, ww, bb, True, 0.1, 1e-5),
         x, w, b)
    both(lambda a, ww, bb, m_, v_: A._native_batch_norm_legit_no_training(a, ww, bb, m_, v_, 0.1,
                                                                          1e-5), x, w, b, rm, rv)
    both(lambda a, m_, v_: A.native_batch_norm(a, None, None, m_, v_, True, 0.1, 1e-5) + (m_, v_),
         x, rm.clone(), rv.clone())
    # bf16 input with f32 parameters and statistics
    both(lambda a, ww, bb, m_, v_: A.native_batch_norm(a, ww, bb, m_, v_, True, 0.1, 1e-5)
         + (m_, v_), x.bfloat16(), w, b, rm.clone(), rv.clone(), tol_=BF16)
    _, save_mean, save_invstd = A.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    g = rand(4, 3, 6, 5, seed=5)
    for train in (True, False):
        for mask in ([True, True, True], [True, False, False], [False, True, True]):
            both(lambda gg, a, ww, m_, v_, sm, si: A.native_batch_norm_backward(
                gg, a, ww, m_, v_, sm, si, train, 1e-5, mask), g, x, w, rm, rv, save_mean,
                save_invstd, tol_=dict(rtol=1e-4, atol=1e-5))
    # nn.BatchNorm2d in training then eval mode
    bn_c, bn_t = torch.nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3).to("tpu")
    for _ in range(3):
        check(bn_t(dev(x)), bn_c(x).detach())
    check(bn_t.running_mean, bn_c.running_mean)
    check(bn_t.running_var, bn_c.running_var)
    bn_c.eval(), bn_t.eval()
    check(bn_t(dev(x)), bn_c(x).detach())


def test_runtime_scalars_do_not_recompile(nofallback):
    """eps, momentum and the dropout probability are runtime operands."""
    x = dev(rand(4, 3, 5))
    rm, rv = dev(torch.zeros(3)), dev(torch.ones(3))
    A.native_batch_norm(x, None, None, rm, rv, True, 0.1, 1e-5)
    F.layer_norm(x, (5,), eps=1e-5)
    A.native_dropout(x, 0.2, True)
    before = dict(metrics.compile_counts())
    A.native_batch_norm(x, None, None, rm, rv, True, 0.7, 1e-3)
    F.layer_norm(x, (5,), eps=1e-2)
    A.native_dropout(x, 0.6, True)
    check(F.layer_norm(x, (5,), eps=0.5), F.layer_norm(x.cpu(), (5,), eps=0.5))
    assert metrics.compile_counts() == before
    ref_m, ref_v = torch.zeros(3), torch.ones(3)
    xc = x.cpu()
    A.native_batch_norm(xc, None, None, ref_m, ref_v, True, 0.1, 1e-5)
    A.native_batch_norm(xc, None, None, ref_m, ref_v, True, 0.7, 1e-3)
    check(rm, ref_m)
    check(rv, ref_v)


# ------------------------------------------------------------- dropout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout(nofallback, dtype):
    x = rand(64, 129, dtype=dtype)
    xt = dev(x)
    for p in (0.0, 0.3, 0.9, 1.0):
        out, mask = A.native_dropout(xt, p, True)
        out, mask = out.cpu(), mask.cpu()
        assert mask.dtype == torch.bool and out.dtype == dtype
        scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
        torch.testing.assert_close(out, (x.float() * mask * scale).to(dtype), rtol=0, atol=0)
        frac = mask.float().mean().item()
        assert abs(frac - (1 - p)) < 0.03, (p, frac)
    both(lambda a: A.native_dropout(a, 1.0, True), torch.tensor([NAN, 1.0]))   # NaN * 0
    out, mask = A.native_dropout(xt, 0.5, False)
    check(out, x)
    assert mask.cpu().all()
    a, b = A.native_dropout(xt, 0.5, True)[1].cpu(), A.native_dropout(xt, 0.5, True)[1].cpu()
    assert not torch.equal(a, b)      # a fresh mask per call
    # backward through autograd: grad = mask * scale
    xg = dev(x).requires_grad_()
    y = F.dropout(xg, 0.4, training=True)
    g = rand(64, 129, dtype=dtype, seed=2)
    y.backward(dev(g))
    kept = y.detach().cpu() != 0
    torch.testing.assert_close(xg.grad.cpu(), (g.float() * kept / 0.6).to(dtype),
                               **tol(dtype))
    check(A.native_dropout_backward(dev(g), dev(kept), 2.0), (g.float() * kept * 2.0).to(dtype))


def test_dropout_functional_edges():
    """F.dropout with p=0 and p=1 takes PyTorch's non-fused path."""
    x = rand(8, 9)
    check(F.dropout(dev(x), 0.0, training=True), x)
    check(F.dropout(dev(x), 1.0, training=True), torch.zeros(8, 9))
    check(F.dropout(dev(x), 0.5, training=False), x)


# ------------------------------------------------------------- embedding


@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
def test_embedding(nofallback, idx_dtype):
    w = rand(11, 7)
    idx = torch.tensor([[1, 3, 3, 0], [10, 3, 1, 1], [5, 5, 5, 2]], dtype=idx_dtype)
    both(lambda ww, ii: F.embedding(ii, ww), w, idx)
    both(lambda ww, ii: F.embedding(ii, ww), w.bfloat16(), idx)
    check(F.embedding(dev(idx), noncontig(w)), F.embedding(idx, w))
    check(F.embedding(dev(idx.t()), dev(w)), F.embedding(idx.t(), w))
    for pad, scale in ((None, False), (3, False), (None, True), (5, True)):
        wc = w.clone().requires_grad_()
        wt = dev(w).requires_grad_()
        ref = F.embedding(idx, wc, padding_idx=pad, scale_grad_by_freq=scale)
        out = F.embedding(dev(idx), wt, padding_idx=pad, scale_grad_by_freq=scale)
        check(out, ref.detach())
        g = rand(3, 4, 7, seed=3)
        ref.backward(g)
        out.backward(dev(g))
        check(wt.grad, wc.grad)
    both(lambda gg, ii: A.embedding_dense_backward(gg, ii, 11, -1, False),
         rand(3, 4, 7, dtype=torch.bfloat16), idx, tol_=BF16)


def test_embedding_index_error():
    w = dev(rand(5, 3))
    with pytest.raises(IndexError):
        F.embedding(dev(torch.tensor([0, 5])), w).cpu()
        torch.tpu.synchronize()


# ------------------------------------------------------------- out= and coverage


def test_out_variants(nofallback):
    x = rand(4, 6, 5)
    xt = dev(x)
    o = dev(torch.empty(0))
    torch.mean(xt, 1, out=o)
    check(o, x.mean(1))
    o = dev(torch.empty(4, 5, dtype=torch.float64))
    torch.mean(xt, 1, out=o)
    check(o, torch.mean(x, 1, out=torch.empty(4, 5, dtype=torch.float64)))
    o = dev(torch.empty(0))
    torch.cumsum(xt, -1, out=o)
    check(o, x.cumsum(-1))
    o = dev(torch.empty(0))
    torch.amax(xt, (0, 2), out=o)
    check(o, x.amax((0, 2)))
    o = dev(torch.empty(0, dtype=torch.bool))
    torch.any(dev(x > 0), 1, out=o)
    check(o, torch.any(x > 0, 1))
    o = dev(torch.empty(0))
    torch.linalg.vector_norm(xt, 3, dim=1, out=o)
    check(o, torch.linalg.vector_norm(x, 3, dim=1))
    o = dev(torch.empty(0))
    torch.logsumexp(xt, 1, out=o)
    check(o, torch.logsumexp(x, 1))
    with pytest.raises(RuntimeError, match="dtype"):
        torch.amax(xt, 1, out=dev(torch.empty(0, dtype=torch.int64)))
    v, i = dev(torch.empty(0)), dev(torch.empty(0, dtype=torch.int64))
    torch.max(xt, 1, out=(v, i))
    check((v, i), tuple(torch.max(x, 1)))


def test_registered_ops():
    names = set(torchtpu._registry.registered_ops())
    for n in ("aten::mean.dim", "aten::var_mean.correction", "aten::native_layer_norm",
              "aten::native_batch_norm_backward", "aten::nll_loss_forward",
              "aten::native_dropout", "aten::embedding_dense_backward", "aten::mean.out",
              "aten::_native_batch_norm_legit.no_stats", "aten::cumsum_"):
        assert n in names, n

"""Convolution, pooling, upsampling and fold/unfold on tpu against PyTorch
CPU: forward and gradients, odd shapes, strides, padding, dilation, groups,
transposed convolutions, ceil_mode, float32 (at HIGHEST precision, the
default), bfloat16 and float64; and that none of them falls back."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import _C

_MINE = ("convolution", "max_pool", "avg_pool", "adaptive", "upsample", "im2col", "col2im",
         "grid_sampler")


def _my_fallbacks():
    return {k: v for k, v in torchtpu.metrics.fallback_counts().items()
            if any(m in k for m in _MINE)}


def _tol(dtype):
    if dtype == torch.bfloat16:
        return dict(rtol=1.6e-2, atol=1e-2)
    return {}


def _compare(fn, shapes, dtype=torch.float32, seed=0, prepare=None, tol=None, exact=False,
             cpu_dtype=None):
    """fn on CPU and on tpu from the same inputs: outputs and input
    gradients (for a random output gradient) must match. cpu_dtype: compute
    the CPU reference in this dtype (where CPU lacks a dtype's kernel)."""
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    if prepare is not None:
        xs = [prepare(x) for x in xs]
    cpu = [x.clone().to(cpu_dtype or dtype).requires_grad_() for x in xs]
    tpu = []
    for x in xs:
        t = torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="tpu")
        t.copy_(x)
        tpu.append(t.requires_grad_())
    torchtpu.metrics.reset()
    yc, yt = fn(*cpu), fn(*tpu)
    gy = torch.randn(yc.shape, generator=g).to(dtype)
    yc.backward(gy.to(yc.dtype))
    yc = yc.to(dtype)
    yt.backward(gy.to("tpu"))
    tol = tol if tol is not None else _tol(dtype)
    assert yt.dtype == yc.dtype and yt.shape == yc.shape
    if exact:
        assert torch.equal(yt.detach().cpu(), yc.detach())
    else:
        torch.testing.assert_close(yt.detach().cpu(), yc.detach(), **tol)
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad.to(dtype), **tol)
    assert _my_fallbacks() == {}


# ------------------------------------------------------------ convolution

CONV = {
    "1d": (lambda x, w, b: F.conv1d(x, w, b, stride=3, padding=2), [(2, 3, 11), (5, 3, 4), (5,)]),
    "1d_dil_groups": (lambda x, w: F.conv1d(x, w, dilation=3, groups=3, padding=1),
                      [(2, 6, 13), (9, 2, 3)]),
    "2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), [(2, 3, 7, 6), (4, 3, 3, 3), (4,)]),
    "2d_stride_asym": (lambda x, w: F.conv2d(x, w, stride=(2, 3), padding=(1, 0)),
                       [(2, 3, 9, 10), (4, 3, 3, 2)]),
    "2d_dilation": (lambda x, w: F.conv2d(x, w, dilation=(2, 1), padding=2, stride=(2, 1)),
                    [(2, 3, 9, 8), (4, 3, 3, 3)]),
    "2d_groups": (lambda x, w: F.conv2d(x, w, groups=2, stride=2), [(2, 4, 7, 7), (6, 2, 3, 3)]),
    "2d_depthwise": (lambda x, w, b: F.conv2d(x, w, b, groups=4, padding=1),
                     [(2, 4, 7, 5), (8, 1, 3, 3), (8,)]),
    "2d_pad_larger_than_kernel": (lambda x, w: F.conv2d(x, w, padding=3),
                                  [(2, 3, 4, 4), (4, 3, 1, 1)]),
    "2d_same_odd": (lambda x, w: F.conv2d(x, w, padding="same", dilation=2),
                    [(2, 3, 6, 7), (4, 3, 3, 3)]),
    "2d_same_even": (lambda x, w: F.conv2d(x, w, padding="same"), [(2, 3, 6, 7), (4, 3, 4, 2)]),
    "2d_leftover_rows": (lambda x, w: F.conv2d(x, w, stride=3), [(1, 2, 8, 10), (3, 2, 2, 2)]),
    "3d": (lambda x, w, b: F.conv3d(x, w, b, padding=1, stride=(1, 2, 2)),
           [(1, 2, 5, 6, 5), (3, 2, 3, 3, 3), (3,)]),
    "3d_groups_dil": (lambda x, w: F.conv3d(x, w, groups=2, dilation=(1, 2, 1)),
                      [(2, 4, 4, 6, 3), (2, 2, 2, 2, 2)]),
    "T1d": (lambda x, w: F.conv_transpose1d(x, w, stride=3, padding=4), [(2, 3, 7), (3, 5, 4)]),
    "T2d_bias": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
                 [(2, 3, 5, 5), (3, 4, 3, 3), (4,)]),
    "T2d_output_padding": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1,
                                                           output_padding=1),
                           [(2, 3, 5, 4), (3, 4, 3, 3)]),
    "T2d_groups_dilation": (lambda x, w: F.conv_transpose2d(
        x, w, stride=(2, 3), padding=(2, 1), groups=3, dilation=2, output_padding=(1, 2)),
        [(2, 6, 5, 4), (6, 2, 3, 3)]),
    "T3d": (lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1),
            [(1, 2, 3, 4, 3), (2, 3, 3, 3, 3)]),
}


@pytest.mark.parametrize("case", list(CONV))
def test_conv_float32_matches_cpu(case):
    fn, shapes = CONV[case]
    _compare(fn, shapes)


@pytest.mark.parametrize("case", ["1d", "2d", "2d_depthwise", "3d", "T2d_bias",
                                  "T2d_groups_dilation"])
def test_conv_bfloat16_matches_cpu(case):
    fn, shapes = CONV[case]
    _compare(fn, shapes, torch.bfloat16)


@pytest.mark.parametrize("case", ["2d_groups", "T2d_output_padding"])
def test_conv_float64_matches_cpu(case):
    fn, shapes = CONV[case]
    _compare(fn, shapes, torch.float64, tol=dict(rtol=1e-12, atol=1e-12))


def test_conv_bfloat16_accumulates_in_float32_and_rounds_once():
    """A long contraction (C*k*k = 1152 terms) in bf16: the result is the
    exact sum rounded once to bf16 (within one bf16 ulp), which
    accumulating in bf16 would miss by far."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 128, 6, 6, generator=g).bfloat16()
    w = torch.randn(4, 128, 3, 3, generator=g).bfloat16()
    exact = F.conv2d(x.double(), w.double(), padding=1)
    got = F.conv2d(x.to("tpu"), w.to("tpu"), padding=1).cpu()
    assert got.dtype == torch.bfloat16
    err = (got.double() - exact).abs()
    assert (err <= exact.abs() * 2.0 ** -8 + 1e-6).all()


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_transpose_output_padding_past_stride_bfloat16_equals_cpu(dims):
    """output_padding >= stride (allowed below the dilation): PyTorch's CPU
    runs slow_conv_transpose, which rounds each kernel tap's column to
    bf16 and adds the taps in bf16; the tpu result is bitwise CPU's (f16
    within tolerance), and float32 (one float sum) still matches."""
    g = torch.Generator().manual_seed(dims)
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    kw = dict(stride=(3, 2, 1)[:dims], padding=(1, 2, 3)[:dims],
              output_padding=(2, 3, 1)[:dims], groups=2, dilation=4)
    x = torch.randn((2, 4) + (4, 5, 3)[:dims], generator=g) * 3
    w = torch.randn((4, 3) + (4, 5, 3)[:dims], generator=g) * 3
    b = torch.randn(6, generator=g)
    for dtype in (torch.bfloat16, torch.float16):
        xs, ws, bs = x.to(dtype), w.to(dtype), b.to(dtype)
        got = fn(xs.to("tpu"), ws.to("tpu"), bs.to("tpu"), **kw).cpu()
        if dtype == torch.bfloat16:
            assert torch.equal(got, fn(xs, ws, bs, **kw))
        else:
            torch.testing.assert_close(got, fn(xs, ws, bs, **kw), rtol=2e-3, atol=1e-3)
    torch.testing.assert_close(fn(x.to("tpu"), w.to("tpu"), b.to("tpu"), **kw).cpu(),
                               fn(x, w, b, **kw), rtol=1e-5, atol=1e-4)
    assert _my_fallbacks() == {}


def test_conv_noncontiguous_and_channels_last_inputs():
    _compare(CONV["2d"][0], CONV["2d"][1],
             prepare=lambda x: x.transpose(-1, -2).contiguous().transpose(-1, -2)
             if x.dim() > 1 else x)
    _compare(CONV["2d_groups"][0], CONV["2d_groups"][1],
             prepare=lambda x: x.contiguous(memory_format=torch.channels_last) if x.dim() == 4
             else x)


@pytest.mark.parametrize("which", ["input", "weight", "bias"])
def test_conv_backward_output_mask(which):
    """Gradients for only some operands (convolution_backward's output_mask)."""
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(s, generator=g) for s in [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]]
    gy = torch.randn(2, 4, 3, 3, generator=g)
    names = ["input", "weight", "bias"]
    res = {}
    for dev in ("cpu", "tpu"):
        ts = [x.detach().to(dev).requires_grad_(n == which) for x, n in zip(xs, names)]
        F.conv2d(*ts, stride=2, padding=1).backward(gy.to(dev))
        res[dev] = ts[names.index(which)].grad.cpu()
    torch.testing.assert_close(res["tpu"], res["cpu"])


def test_conv_follows_matmul_precision_and_caches():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 9, 9, generator=g)
    w = torch.randn(6, 8, 3, 3, generator=g)
    xt, wt = x.to("tpu"), w.to("tpu")
    hi = F.conv2d(xt, wt, padding=1).cpu()
    torch.testing.assert_close(hi, F.conv2d(x, w, padding=1))
    c0 = _C.stats()["compiles"]
    for _ in range(3):
        F.conv2d(xt, wt, padding=1)
    assert _C.stats()["compiles"] == c0
    torch.set_float32_matmul_precision("medium")        # DEFAULT: bf16 inputs
    lo = F.conv2d(xt, wt, padding=1).cpu()
    assert _C.stats()["compiles"] == c0 + 1
    ref = F.conv2d(x.bfloat16().double(), w.bfloat16().double(), padding=1)
    torch.testing.assert_close(lo.double(), ref, rtol=1e-5, atol=1e-4)
    assert (lo - hi).abs().max() > 1e-3


def test_conv_out_variant_and_errors():
    x, w = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3)
    out = torch.empty(2, 4, 3, 3, device="tpu")
    torch.ops.aten.convolution.out(x.to("tpu"), w.to("tpu"), None, [1, 1], [0, 0], [1, 1],
                                   False, [0, 0], 1, out=out)
    torch.testing.assert_close(out.cpu(), F.conv2d(x, w))
    with pytest.raises(RuntimeError, match="channels"):
        F.conv2d(torch.randn(2, 5, 5, 5, device="tpu"), w.to("tpu"))


# ---------------------------------------------------------------- pooling

POOL = {
    "max2d": lambda x: F.max_pool2d(x, 2),
    "max2d_ceil_pad": lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
    "max2d_dilation": lambda x: F.max_pool2d(x, 3, (2, 1), 1, dilation=2),
    "max1d": lambda x: F.max_pool1d(x, 3, 2, 1),
    "max3d_ceil": lambda x: F.max_pool3d(x, 2, ceil_mode=True),
    "avg2d": lambda x: F.avg_pool2d(x, 2),
    "avg2d_pad": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg2d_exclude_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avg2d_ceil": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
    "avg2d_ceil_exclude": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                 count_include_pad=False),
    "avg2d_divisor": lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 1), divisor_override=5),
    "avg1d": lambda x: F.avg_pool1d(x, 3, 2, 1),
    "avg3d_ceil": lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True),
    "adaptive_avg2d": lambda x: F.adaptive_avg_pool2d(x, 3),
    "adaptive_avg2d_divisible": lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
    "adaptive_avg2d_global": lambda x: F.adaptive_avg_pool2d(x, 1),
    "adaptive_avg2d_larger": lambda x: F.adaptive_avg_pool2d(x, (11, 4)),
    "adaptive_avg1d": lambda x: F.adaptive_avg_pool1d(x, 4),
    "adaptive_avg3d": lambda x: F.adaptive_avg_pool3d(x, (2, 3, 2)),
    "adaptive_max2d": lambda x: F.adaptive_max_pool2d(x, (3, 2)),
}

_POOL_SHAPE = {"1d": (2, 3, 10), "2d": (2, 3, 9, 8), "3d": (2, 3, 5, 6, 5)}


def _pool_shape(case):
    for k, s in _POOL_SHAPE.items():
        if k in case:
            return s
    return _POOL_SHAPE["2d"] if "adaptive_max" not in case else (2, 3, 9, 8)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(POOL))
def test_pooling_matches_cpu(case, dtype):
    # CPU has no bfloat16 avg_pool3d: reference in float32, rounded
    ref = torch.float32 if case.startswith("avg3d") and dtype == torch.bfloat16 else None
    _compare(POOL[case], [_pool_shape(case)], dtype, cpu_dtype=ref)


def test_pooling_unbatched_and_channels_last():
    _compare(lambda x: F.max_pool2d(x, 3, 2, 1), [(3, 7, 6)])
    _compare(lambda x: F.avg_pool2d(x, 3, 2), [(3, 7, 6)])
    _compare(lambda x: F.adaptive_avg_pool2d(x, 4), [(3, 7, 6)])
    cl = lambda x: x.contiguous(memory_format=torch.channels_last)  # noqa: E731
    _compare(lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 3, 7, 6)], prepare=cl)
    _compare(lambda x: F.avg_pool2d(x, 2), [(2, 3, 7, 6)], prepare=cl)


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=1, padding=1),
                                dict(kernel_size=2, stride=1, dilation=2),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)])
def test_max_pool_indices_equal_cpu_with_ties_nan_and_inf(kw):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[[[nan, 1., nan, 4, 1], [1, nan, 3, 2, 2], [0, 0, 0, nan, 2],
                        [5, nan, 1, 1, 2], [-inf, -inf, -inf, -inf, 2]]]])
    ties = torch.randint(0, 3, (2, 3, 9, 8)).float()
    for t in (x, ties, torch.full((1, 2, 5, 5), -inf)):
        vc, ic = F.max_pool2d(t, return_indices=True, **kw)
        vt, it = F.max_pool2d(t.to("tpu"), return_indices=True, **kw)
        assert torch.equal(it.cpu(), ic)
        torch.testing.assert_close(vt.cpu(), vc, equal_nan=True)


def test_max_pool_of_integers():
    x = torch.randint(-50, 50, (2, 3, 9, 8))
    for fn in (lambda t: F.max_pool2d(t, 3, 2, 1, return_indices=True),
               lambda t: F.max_pool3d(t.unsqueeze(0), 2, return_indices=True)):
        torchtpu.metrics.reset()
        (vt, it), (vc, ic) = fn(x.to("tpu")), fn(x)
        assert _my_fallbacks() == {}
        assert vt.dtype == torch.int64
        assert torch.equal(vt.cpu(), vc) and torch.equal(it.cpu(), ic)


def test_adaptive_max_pool_with_unequal_windows_falls_back_counted():
    x = torch.randn(2, 3, 7, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torchtpu.metrics.reset()
        v, i = F.adaptive_max_pool2d(x.to("tpu"), 3, return_indices=True)
    assert torchtpu.metrics.fallback_counts() == {"aten::adaptive_max_pool2d": 1}
    vc, ic = F.adaptive_max_pool2d(x, 3, return_indices=True)
    assert torch.equal(v.cpu(), vc) and torch.equal(i.cpu(), ic)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn,shape", [
    (lambda x: F.adaptive_avg_pool1d(x, 5), (0, 8, 8)),
    (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), (0, 3, 8, 8)),
    (lambda x: F.adaptive_avg_pool2d(x, 3), (0, 8, 8)),
    (lambda x: F.adaptive_avg_pool3d(x, (5, 7, 4)), (0, 8, 8, 8, 8)),
    (lambda x: F.adaptive_avg_pool3d(x, 2), (0, 5, 6, 7)),
], ids=["1d", "2d", "2d_unbatched", "3d", "3d_unbatched"])
def test_adaptive_avg_pool_of_empty_batch_matches_cpu(fn, shape, dtype):
    _compare(fn, [shape], dtype)


def test_adaptive_avg_pool_empty_results_and_errors_like_cpu():
    """Zero-size outputs are CPU's empty tensors; an empty channel or
    spatial dim raises CPU's error (its meta kernel accepts some of them)."""
    aten = torch.ops.aten
    torchtpu.metrics.reset()
    for fn, shape in ((lambda x: aten._adaptive_avg_pool2d(x, [0, 3]), (2, 3, 4, 4)),
                      (lambda x: aten._adaptive_avg_pool2d(x, [2, 3]), (2, 0, 4, 4)),
                      (lambda x: aten._adaptive_avg_pool3d(x, [2, 0, 2]), (2, 3, 4, 4, 4)),
                      (lambda x: aten._adaptive_avg_pool3d(x, [2, 3, 2]), (0, 4, 4, 4))):
        x = torch.randn(shape)
        y, want = fn(x.to("tpu")), fn(x)
        assert y.shape == want.shape and y.stride() == want.stride() and y.numel() == 0
    assert _my_fallbacks() == {}
    for fn, shape in ((lambda x: aten._adaptive_avg_pool2d(x, [2, 3]), (2, 3, 0, 4)),
                      (lambda x: aten._adaptive_avg_pool3d(x, [2, 3, 2]), (2, 0, 4, 4, 4)),
                      (lambda x: aten._adaptive_avg_pool3d(x, [2, 2, 2]), (3, 0, 4, 4)),
                      (lambda x: aten._adaptive_avg_pool2d_backward(
                          torch.randn(2, 0, 2, 3, device=x.device), x), (2, 0, 4, 4))):
        x = torch.randn(shape)
        with pytest.raises(RuntimeError) as cpu:
            fn(x)
        with pytest.raises(RuntimeError) as tpu:
            fn(x.to("tpu"))
        assert str(tpu.value) == str(cpu.value)
    assert _my_fallbacks() == {}


# ------------------------------------------------------------- upsampling

UPSAMPLE = []
for _mode, _dims in (("nearest", (1, 2, 3)), ("nearest-exact", (1, 2)), ("linear", (1,)),
                     ("bilinear", (2,)), ("trilinear", (3,))):
    for _d in _dims:
        for _kw in (dict(scale_factor=2), dict(scale_factor=1.7), dict(size=(7, 3, 4)[:_d]),
                    dict(size=(2, 9, 3)[:_d]), dict(scale_factor=2.3,
                                                    recompute_scale_factor=True)):
            for _ac in ([None] if "nearest" in _mode else [False, True]):
                UPSAMPLE.append((_mode, _d, _kw, _ac))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mode,dims,kw,align_corners", UPSAMPLE,
                         ids=[f"{m}-{d}d-{k}-{a}" for m, d, k, a in UPSAMPLE])
def test_upsample_matches_cpu(mode, dims, kw, align_corners, dtype):
    shape = (2, 3, 5, 4, 3)[:2 + dims]
    _compare(lambda x: F.interpolate(x, mode=mode, align_corners=align_corners, **kw), [shape],
             dtype, exact="nearest" in mode)


@pytest.mark.parametrize("mode,shape,size", [
    ("linear", (2, 3, 7), (17,)), ("linear", (2, 3, 9), (4,)),
    ("trilinear", (2, 3, 5, 4, 6), (9, 7, 11)), ("trilinear", (1, 2, 7, 6, 5), (3, 10, 4))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_linear_bfloat16_equals_cpu(mode, shape, size, align_corners):
    """PyTorch's CPU kernel for linear1d and trilinear3d stores the
    interpolation weights in bf16 (lambda1 rounded, lambda0 = 1 - lambda1
    rounded) and interpolates in float: the tpu result is bitwise CPU's."""
    g = torch.Generator().manual_seed(len(shape))
    x = (torch.randn(shape, generator=g) * 4).bfloat16()
    fn = lambda t: F.interpolate(t, size=size, mode=mode, align_corners=align_corners)  # noqa
    torchtpu.metrics.reset()
    assert torch.equal(fn(x.to("tpu")).cpu(), fn(x))
    assert _my_fallbacks() == {}


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 8, 8), (5, 7, 4)), ((4, 7, 9, 5), (3, 4, 2)),
                                       ((1, 2, 20, 24, 22), (2, 1, 3))])
def test_adaptive_avg_pool3d_bfloat16_equals_cpu(shape, out):
    """PyTorch's CPU kernel sums 3-d adaptive windows in bf16 (element by
    element) and divides by kd, kh, kw in bf16: bitwise equal, also for
    area interpolation and channels-last input."""
    g = torch.Generator().manual_seed(len(shape))
    x = (torch.randn(shape, generator=g) * 3 + 1).bfloat16()
    torchtpu.metrics.reset()
    assert torch.equal(F.adaptive_avg_pool3d(x.to("tpu"), out).cpu(),
                       F.adaptive_avg_pool3d(x, out))
    if x.dim() == 5:
        cl = x.to(memory_format=torch.channels_last_3d)
        assert torch.equal(F.adaptive_avg_pool3d(cl.to("tpu"), out).cpu(),
                           F.adaptive_avg_pool3d(cl, out))
        assert torch.equal(F.interpolate(x.to("tpu"), size=out, mode="area").cpu(),
                           F.interpolate(x, size=out, mode="area"))
    assert _my_fallbacks() == {}


def test_upsample_float64_and_out_variant():
    _compare(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), [(1, 2, 5, 4)],
             torch.float64, tol=dict(rtol=1e-12, atol=1e-12))
    x = torch.randn(1, 2, 3, 3)
    out = torch.empty(1, 2, 6, 6, device="tpu")
    torch.ops.aten.upsample_nearest2d.out(x.to("tpu"), [6, 6], out=out)
    assert torch.equal(out.cpu(), F.interpolate(x, size=(6, 6)))


# ----------------------------------------------------------- fold/unfold

@pytest.mark.parametrize("case", [
    (lambda x: F.unfold(x, 2), (2, 3, 4, 5)),
    (lambda x: F.unfold(x, (2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 3)), (2, 3, 7, 8)),
    (lambda x: F.unfold(x, 3, padding=1), (3, 5, 5)),
    (lambda x: F.fold(x, (3, 3), 2), (2, 12, 4)),
    (lambda x: F.fold(x, (7, 8), (2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 3)),
     (2, 18, 16)),
    (lambda x: F.fold(x, (5, 5), 3, padding=1, stride=2), (27, 9)),
])
def test_fold_unfold_match_cpu(case):
    fn, shape = case
    _compare(fn, [shape], exact=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn,shape", [
    (lambda x: F.unfold(x, (2, 2), dilation=(1, 2), padding=1, stride=2), (0, 1, 5, 5)),
    (lambda x: F.unfold(x, 3), (0, 2, 4, 4)),
    (lambda x: F.fold(x, (5, 5), 2), (0, 4, 16)),
], ids=["unfold", "unfold_3", "fold"])
def test_fold_unfold_of_empty_batch_match_cpu(fn, shape, dtype):
    """im2col/col2im of a zero-size batch (unfold's backward is col2im)."""
    _compare(fn, [shape], dtype, exact=True)


def test_fold_unfold_empty_errors_like_cpu():
    torchtpu.metrics.reset()
    for fn, shape in ((lambda x: F.unfold(x, 2), (2, 0, 5, 5)),
                      (lambda x: F.unfold(x, 2), (0, 1, 1, 1)),
                      (lambda x: F.fold(x, (5, 5), 2), (0, 4, 15)),
                      (lambda x: F.fold(x, (5, 5), 2), (0, 3, 16)),
                      (lambda x: F.fold(x, (5, 5), 2), (2, 0, 16))):
        x = torch.randn(shape)
        with pytest.raises(RuntimeError) as cpu:
            fn(x)
        with pytest.raises(RuntimeError) as tpu:
            fn(x.to("tpu"))
        assert str(tpu.value) == str(cpu.value)
    assert _my_fallbacks() == {}


def test_fold_bfloat16_rounds_once():
    """col2im sums overlapping patches in float32 and rounds once (the CPU
    kernel adds in bfloat16): compare with the float64 sum rounded."""
    x = torch.randn(2, 27, 25).bfloat16()
    got = F.fold(x.to("tpu"), (5, 5), 3, padding=1).cpu()
    want = F.fold(x.double(), (5, 5), 3, padding=1).bfloat16()
    assert torch.equal(got, want)


# ------------------------------------------------------------ grid_sample

GRID = [(m, p, a) for m in ("bilinear", "nearest", "bicubic")
        for p in ("zeros", "border", "reflection") for a in (False, True)]


def _grid_sample(mode, pad, ac):
    return lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=pad, align_corners=ac)


def _spread(t):
    """Grid values up to 1.3 outside [-1, 1], to exercise the padding modes."""
    return t * 1.3 if t.shape[-1] == 2 else t


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode,pad,ac", GRID)
def test_grid_sample_matches_cpu(mode, pad, ac, dtype):
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else None
    _compare(_grid_sample(mode, pad, ac), [(2, 3, 5, 6), (2, 4, 7, 2)], dtype, tol=tol,
             prepare=_spread)


def _grid_layouts(n, ho, wo, g):
    """Grids with PyTorch's three CPU iteration cases: dense, [N, 2, H, W]
    permuted, and a strided slice."""
    dense = (torch.rand(n, ho, wo, 2, generator=g) * 2.6 - 1.3)
    planes = dense.permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)
    sliced = (torch.rand(n, ho, wo + 3, 2, generator=g) * 2.6 - 1.3)[:, :, 1:wo + 1]
    return [dense, planes, sliced]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode,pad,ac", GRID)
def test_grid_sample_reduced_precision_equals_cpu(mode, pad, ac, dtype):
    """PyTorch's CPU kernel computes bf16/f16 grid sampling in the dtype
    itself, rounding every step (coordinates, weights, products, the sum of
    the corners); its backward scatters grad_input in its vector order and
    sums grad_grid channel by channel. Forward and backward are bitwise
    CPU's, for every grid layout."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 3, 5, 6, generator=g).to(dtype)
    m = {"bilinear": 0, "nearest": 1, "bicubic": 2}[mode]
    p = {"zeros": 0, "border": 1, "reflection": 2}[pad]
    torchtpu.metrics.reset()
    for grid in _grid_layouts(2, 4, 7, g):
        grid = grid.to(dtype)
        gt = torch.empty_strided(grid.shape, grid.stride(), dtype=dtype, device="tpu")
        gt.copy_(grid)
        gy = torch.randn(2, 3, 4, 7, generator=g).to(dtype)
        y = torch.ops.aten.grid_sampler_2d(x.to("tpu"), gt, m, p, ac).cpu()
        assert torch.equal(y, torch.ops.aten.grid_sampler_2d(x, grid, m, p, ac))
        got = torch.ops.aten.grid_sampler_2d_backward(gy.to("tpu"), x.to("tpu"), gt, m, p, ac,
                                                      [True, True])
        want = torch.ops.aten.grid_sampler_2d_backward(gy, x, grid, m, p, ac, [True, True])
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    assert _my_fallbacks() == {}


@pytest.mark.parametrize("mode", [0, 2])
def test_grid_sample_float32_gradients_match_cpu_at_default_tolerance(mode):
    """PyTorch's vectorized float32 kernel fuses some multiply-adds
    (unnormalizing without align_corners, the inner cubic weights), and the
    grid gradient's cancellations amplify the difference: the tpu computes
    those as fused multiply-adds too, so grad_grid stays within
    assert_close's default float32 tolerance of CPU's (a quarter of these
    bicubic cases exceed it without)."""
    g = torch.Generator().manual_seed(13)
    torchtpu.metrics.reset()
    for k in range(24):
        pad, ac = k % 3, k % 2 == 0
        x = torch.randn(2, 3, 5 + k % 3, 5 + k % 11, generator=g)
        grid = torch.rand(2, 7, 9, 2, generator=g) * 2.6 - 1.3
        gy = torch.randn(2, 3, 7, 9, generator=g)
        got = torch.ops.aten.grid_sampler_2d_backward(gy.to("tpu"), x.to("tpu"), grid.to("tpu"),
                                                      mode, pad, ac, [True, True])
        want = torch.ops.aten.grid_sampler_2d_backward(gy, x, grid, mode, pad, ac, [True, True])
        torch.testing.assert_close(got[1].cpu(), want[1])
        # grad_input is bitwise CPU's
        assert torch.equal(got[0].cpu(), want[0])
    assert _my_fallbacks() == {}


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_grid_sample_bfloat16_large_input_equals_cpu(mode):
    """Corner indices past 256 are integers, not bf16 values (CPU adds 1 to
    the integer index); sampling stays inside the input, where CPU's bf16
    border clip (299 rounds to 300) would read past a row."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 3, 300, generator=g).bfloat16()
    grid = (torch.rand(2, 5, 37, 2, generator=g) * 2.4 - 1.5).bfloat16()
    gy = torch.randn(2, 3, 5, 37, generator=g).bfloat16()
    torchtpu.metrics.reset()
    for pad in (0, 1, 2):
        for ac in (False, True):
            y = torch.ops.aten.grid_sampler_2d(x.to("tpu"), grid.to("tpu"), mode, pad, ac)
            assert torch.equal(y.cpu(), torch.ops.aten.grid_sampler_2d(x, grid, mode, pad, ac))
            got = torch.ops.aten.grid_sampler_2d_backward(
                gy.to("tpu"), x.to("tpu"), grid.to("tpu"), mode, pad, ac, [True, True])
            want = torch.ops.aten.grid_sampler_2d_backward(gy, x, grid, mode, pad, ac,
                                                           [True, True])
            assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    assert _my_fallbacks() == {}


GRID3 = [(m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection")
         for a in (False, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode,pad,ac", GRID3)
def test_grid_sample_3d_matches_cpu(mode, pad, ac, dtype):
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else None
    spread = lambda t: t * 1.3 if t.shape[-1] == 3 else t  # noqa: E731
    _compare(_grid_sample(mode, pad, ac), [(2, 3, 4, 5, 6), (2, 3, 4, 7, 3)], dtype, tol=tol,
             prepare=spread)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode,pad,ac", GRID3)
def test_grid_sample_3d_reduced_precision_equals_cpu(mode, pad, ac, dtype):
    """PyTorch's scalar CPU kernel for 5-d input computes in scalar_t, a
    rounding after every operation (its own unnormalizing and reflecting
    formulas), adds grad_input position by position, corner by corner, and
    sums grad_grid channel by channel: bitwise CPU's, also past bf16's 256
    and with a non-contiguous grid."""
    g = torch.Generator().manual_seed(9)
    m = {"bilinear": 0, "nearest": 1}[mode]
    p = {"zeros": 0, "border": 1, "reflection": 2}[pad]
    torchtpu.metrics.reset()
    for xs, gs in (((2, 3, 4, 5, 6), (2, 3, 4, 7)), ((1, 2, 2, 3, 300), (1, 2, 5, 37))):
        x = torch.randn(xs, generator=g).to(dtype)
        grid = (torch.rand(gs[0], gs[3], gs[2], gs[1], 3, generator=g) * 3 - 1.5).to(dtype)
        grid = grid.transpose(1, 3)
        gy = torch.randn(xs[:2] + gs[1:], generator=g).to(dtype)
        gt = torch.empty_strided(grid.shape, grid.stride(), dtype=dtype, device="tpu")
        gt.copy_(grid)
        y = torch.ops.aten.grid_sampler_3d(x.to("tpu"), gt, m, p, ac).cpu()
        assert torch.equal(y, torch.ops.aten.grid_sampler_3d(x, grid, m, p, ac))
        for mask in ([True, True], [False, True]):
            got = torch.ops.aten.grid_sampler_3d_backward(gy.to("tpu"), x.to("tpu"), gt, m, p, ac,
                                                          mask)
            want = torch.ops.aten.grid_sampler_3d_backward(gy, x, grid, m, p, ac, mask)
            assert (got[0] is None) == (want[0] is None)
            assert want[0] is None or torch.equal(got[0].cpu(), want[0])
            assert torch.equal(got[1].cpu(), want[1])
    assert _my_fallbacks() == {}


def test_grid_sample_empty_and_errors_like_cpu():
    """Empty batches, channels or grids give CPU's empty (or zero) results
    on the tpu; malformed calls raise CPU's errors, including those the
    meta kernels do not check."""
    aten = torch.ops.aten
    torchtpu.metrics.reset()
    for xs, gs in (((0, 3, 5, 5), (0, 4, 4, 2)), ((2, 0, 5, 5), (2, 4, 4, 2)),
                   ((2, 3, 5, 5), (2, 0, 4, 2)), ((0, 3, 5, 5, 5), (0, 4, 4, 4, 3)),
                   ((2, 3, 5, 5, 5), (2, 4, 0, 4, 3))):
        x, grid = torch.randn(xs), torch.rand(gs) * 2 - 1
        gy = torch.randn(xs[:2] + gs[1:-1])
        for mode in ((0, 1, 2) if len(xs) == 4 else (0, 1)):
            f = aten.grid_sampler_2d if len(xs) == 4 else aten.grid_sampler_3d
            b = aten.grid_sampler_2d_backward if len(xs) == 4 else aten.grid_sampler_3d_backward
            y = f(x.to("tpu"), grid.to("tpu"), mode, 0, False)
            want = f(x, grid, mode, 0, False)
            assert y.shape == want.shape and y.stride() == want.stride()
            for mask in ([True, True], [False, True]):
                got = b(gy.to("tpu"), x.to("tpu"), grid.to("tpu"), mode, 0, False, mask)
                want = b(gy, x, grid, mode, 0, False, mask)
                for t, w in zip(got, want):
                    assert (t is None) == (w is None)
                    assert w is None or torch.equal(t.cpu(), w)
    assert _my_fallbacks() == {}
    bad = [(lambda d: aten.grid_sampler_2d(torch.randn(2, 3, 5, 5, device=d),
                                           torch.randn(3, 4, 4, 2, device=d), 0, 0, False)),
           (lambda d: aten.grid_sampler_2d(torch.randn(2, 3, 0, 5, device=d),
                                           torch.randn(2, 4, 4, 2, device=d), 2, 0, False)),
           (lambda d: aten.grid_sampler_2d(torch.randn(2, 3, 5, 5, device=d),
                                           torch.randn(2, 4, 4, 4, 2, device=d), 0, 0, False)),
           (lambda d: aten.grid_sampler_2d_backward(
               torch.randn(2, 3, 4, 4, device=d), torch.randn(2, 3, 5, 5, device=d),
               torch.randn(3, 4, 4, 2, device=d), 0, 0, False, [True, True])),
           (lambda d: aten.grid_sampler_3d(torch.randn(2, 3, 5, 5, 5, device=d),
                                           torch.randn(2, 4, 4, 4, 2, device=d), 0, 0, False)),
           (lambda d: F.grid_sample(torch.randn(2, 3, 5, 5, 5, device=d),
                                    torch.randn(2, 4, 4, 4, 3, device=d), mode="bicubic",
                                    align_corners=False))]
    for fn in bad:
        with pytest.raises(RuntimeError) as cpu:
            fn("cpu")
        with pytest.raises(RuntimeError) as tpu:
            fn("tpu")
        assert str(tpu.value) == str(cpu.value)
    assert _my_fallbacks() == {}


# ------------------------------------------------------------- small CNN

class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
        self.fc = torch.nn.Linear(8 * 2 * 2, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        x = F.adaptive_avg_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def test_small_cnn_forward_backward_matches_cpu():
    torch.manual_seed(0)
    model = _CNN()
    x = torch.randn(4, 3, 12, 12)
    target = torch.randn(4, 5)
    res = {}
    for dev in ("cpu", "tpu"):
        m = _CNN().to(dev)
        m.load_state_dict(model.state_dict())
        torchtpu.metrics.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # batch norm may not be lowered yet
            d = m(x.to(dev)) - target.to(dev)
            loss = (d * d).sum()
            loss.backward()
        if dev == "tpu":
            assert _my_fallbacks() == {}
        res[dev] = [loss.detach().cpu()] + [p.grad.cpu() for p in m.parameters()]
    for a, b in zip(res["tpu"], res["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)

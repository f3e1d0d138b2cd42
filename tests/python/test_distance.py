"""Pairwise distances (cdist, pdist) and embedding_bag on tpu against PyTorch
CPU: forward and backward, every p and compute mode, float32 / bfloat16 /
float64, NaN and zero-distance cases, empty shapes, CPU's error messages, and
no CPU fallback or host sync for the lowered ops."""
import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401
from torchtpu import metrics

A = torch.ops.aten
INF = math.inf
NAN = math.nan
PS = [0.0, 1.0, 2.0, 3.0, 0.5, 1.5, 2.5, INF]
MODES = ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
         "donot_use_mm_for_euclid_dist"]
BF16 = dict(rtol=1.6e-2, atol=1e-2)


@pytest.fixture(autouse=True)
def _no_fallbacks():
    """Every op these tests call on the tpu is lowered: none may fall back,
    and none may read data back to the host."""
    metrics.reset()
    yield
    torch.tpu.synchronize()
    assert metrics.fallback_counts() == {}
    assert metrics.sync_counts() == {}


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def dev(x):
    return x.to("tpu") if isinstance(x, torch.Tensor) else x


def like(x, other):
    """x on other's device."""
    return x.to(other.device)


def tol(dtype):
    return BF16 if dtype in (torch.bfloat16, torch.float16) else {}


def check(out, ref, **kw):
    if isinstance(ref, (tuple, list)):
        assert len(out) == len(ref)
        for o, r in zip(out, ref):
            check(o, r, **kw)
        return
    if ref is None:
        assert out is None
        return
    assert out.device.type == "tpu"
    assert out.dtype == ref.dtype and out.shape == ref.shape, (out, ref)
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True, **kw)


def with_grads(fn, *inputs, tol_=None, seed=7):
    """fn on CPU and on tpu copies of inputs (floating ones require grad):
    compares the outputs and the gradients of sum(out * cotangent)."""
    results = []
    for device in ("cpu", "tpu"):
        xs = [x.detach().clone().to(device).requires_grad_(x.dtype.is_floating_point)
              if isinstance(x, torch.Tensor) else x for x in inputs]
        out = fn(*xs)
        cot = rand(*out.shape, dtype=out.dtype, seed=seed).to(device)
        leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = torch.autograd.grad((out * cot).sum(), leaves, allow_unused=True)
        results.append((out, grads))
    (ref, ref_g), (out, out_g) = results
    check(out, ref, **(tol_ or {}))
    for o, r in zip(out_g, ref_g):
        check(o, r, **(tol_ or {}))
    return out, ref


# ------------------------------------------------------------------ cdist


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("mode", MODES)
def test_cdist_forward_backward(p, mode):
    # batch broadcasting, and more than 25 rows on one side (CPU's matmul path
    # for p = 2 under the default mode)
    x1, x2 = rand(2, 1, 5, 4, seed=1), rand(3, 30, 4, seed=2)
    with_grads(lambda a, b: torch.cdist(a, b, p, compute_mode=mode), x1, x2)
    with_grads(lambda a, b: torch.cdist(a, b, p, compute_mode=mode),
               rand(6, 3, seed=3), rand(4, 3, seed=4))


@pytest.mark.parametrize("p", [2.0, 1.0, INF, 0.5])
@pytest.mark.parametrize("compute_mode", [None, 0, 1, 2])
def test_cdist_forward_op_and_its_backward(p, compute_mode):
    # the aten op itself: p = 2 takes CPU's matmul path for mode 1, and for
    # mode 0 with r1 > 25; its gradient is _cdist_backward
    x1, x2 = rand(2, 27, 6, seed=5), rand(1, 9, 6, seed=6)
    with_grads(lambda a, b: A._cdist_forward(a, b, p, compute_mode), x1, x2)


def test_cdist_float64_and_noncontiguous():
    x1, x2 = rand(7, 5, dtype=torch.float64, seed=1), rand(40, 5, dtype=torch.float64, seed=2)
    for p in (1.0, 2.0, 2.5):
        with_grads(lambda a, b: torch.cdist(a, b, p), x1, x2)
    a, b = rand(5, 8, seed=3), rand(6, 8, seed=4)
    ta, tb = dev(a.t().contiguous()).t(), dev(b)[:, :]
    assert not ta.is_contiguous()
    for p in (0.0, 1.0, 2.0, 3.0, INF):
        check(A._cdist_forward(ta, tb, p, None), A._cdist_forward(a.t().contiguous().t(), b, p,
                                                                  None))
    x = rand(1, 4, 3)
    check(A._cdist_forward(dev(x).expand(3, 4, 3), dev(x), 1.5, None),
          A._cdist_forward(x.expand(3, 4, 3), x, 1.5, None))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cdist_reduced_precision_matmul_path(dtype):
    # CPU computes p = 2 in bf16/f16 only on its matmul path, rounding after
    # each aten op of _euclidean_dist; the other paths raise like CPU
    x1, x2 = rand(30, 5, dtype=dtype, seed=1), rand(2, 7, 5, dtype=dtype, seed=2)
    for mode in (None, 1):
        ref = A._cdist_forward(x1, x2, 2.0, mode)
        out = A._cdist_forward(dev(x1), dev(x2), 2.0, mode)
        # the same roundings in the same places: equal, not merely close
        assert torch.equal(out.cpu(), ref)
    name = "BFloat16" if dtype == torch.bfloat16 else "Half"
    with pytest.raises(NotImplementedError, match=f'"cdist" not implemented for \'{name}\''):
        A._cdist_forward(dev(x1), dev(x2), 2.0, 2)
    with pytest.raises(NotImplementedError, match="cdist_backward"):
        A._cdist_backward(dev(rand(3, 4, dtype=dtype)), dev(rand(3, 2, dtype=dtype)),
                          dev(rand(4, 2, dtype=dtype)), 1.0, dev(rand(3, 4, dtype=dtype)))


def test_cdist_nan_and_zero_distances():
    x1 = torch.tensor([[0.0, 1.0, 2.0], [NAN, 1.0, 5.0], [1.0, 1.0, 1.0], [3.0, INF, 0.0]])
    x2 = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [2.0, -1.0, 0.5]])
    for p in PS:
        # CPU's scalar loop skips NaN for p = inf (max(agg, nan) keeps agg)
        check(A._cdist_forward(dev(x1), dev(x2), p, 2), A._cdist_forward(x1, x2, p, 2))
    # coinciding rows: zero distances, zero gradients (p = 2, p < 1 guards)
    y1 = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0], [0.5, 2.0, 1.0]])
    for p in (0.5, 1.0, 1.5, 2.0, 3.0, INF):
        with_grads(lambda a, b: torch.cdist(a, b, p, compute_mode=MODES[2]), y1, x2)


def test_cdist_empty_shapes():
    for s1, s2 in [((0, 5), (4, 5)), ((4, 5), (0, 5)), ((0, 4, 5), (3, 5)), ((3, 0), (2, 0)),
                   ((2, 3, 0), (2, 4, 0))]:
        for p in (0.0, 2.0, 3.0):
            with_grads(lambda a, b: torch.cdist(a, b, p), rand(*s1), rand(*s2))


def test_cdist_errors_like_cpu():
    a, b = dev(rand(3, 4)), dev(rand(5, 4))
    with pytest.raises(RuntimeError, match="cdist only supports non-negative p values"):
        A._cdist_forward(a, b, -1.0, None)
    with pytest.raises(RuntimeError, match="possible modes: 0, 1, 2, but was: 3"):
        A._cdist_forward(a, b, 2.0, 3)
    with pytest.raises(RuntimeError, match="X1 and X2 must have the same number of columns"):
        A._cdist_forward(a, dev(rand(5, 3)), 2.0, None)
    with pytest.raises(RuntimeError, match="at least 2D tensors, X1 got: 1D"):
        A._cdist_forward(dev(rand(4)), b, 2.0, None)
    with pytest.raises(RuntimeError, match="floating-point dtypes, X1 got: Long"):
        A._cdist_forward(dev(torch.ones(3, 4, dtype=torch.long)), b, 2.0, None)
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        A._cdist_forward(a, b.double(), 1.0, None)
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype, but got: "
                                           "float != double"):
        A._cdist_forward(a, dev(rand(30, 4)).double(), 2.0, None)
    with pytest.raises(RuntimeError, match="must match the size of tensor b"):
        A._cdist_forward(dev(rand(2, 3, 4)), dev(rand(3, 5, 4)), 2.0, None)


# ------------------------------------------------------------------ pdist


@pytest.mark.parametrize("p", PS + [10.0])
@pytest.mark.parametrize("n", [1, 2, 3, 17])
def test_pdist_forward_backward(p, n):
    x = rand(n, 5, seed=n)
    with_grads(lambda t: torch.pdist(t, p), x)
    with_grads(lambda t: F.pdist(t, p), x.double())


def test_pdist_special_values_and_shapes():
    x = torch.tensor([[0.0, 1.0], [NAN, 1.0], [0.0, 1.0], [2.0, -INF], [3.0, 4.0]])
    for p in PS:
        # the vectorized CPU loop propagates NaN, also for p = inf
        check(A._pdist_forward(dev(x), p), A._pdist_forward(x, p))
    y = torch.tensor([[0.0, 1.0], [0.0, 1.0], [2.0, 1.0], [2.0, 3.0]])   # a zero distance
    for p in (0.5, 1.0, 1.5, 2.0, 3.0, INF):
        with_grads(lambda t: torch.pdist(t, p), y)
    for shape in [(1, 3), (4, 0)]:
        with_grads(lambda t: torch.pdist(t), rand(*shape))
    # (CPU's backward crashes for no rows at all)
    e = dev(rand(0, 3)).requires_grad_()
    out = torch.pdist(e)
    out.sum().backward()
    check(out, torch.empty(0))
    check(e.grad, torch.zeros(0, 3))
    check(A._pdist_forward(dev(rand(1)), 2.0), A._pdist_forward(rand(1), 2.0))
    # backward with a non-contiguous (here: expanded) incoming gradient
    z = rand(6, 3)
    d = A._pdist_forward(z, 2.0)
    g = torch.tensor(0.5).expand(d.shape)
    check(A._pdist_backward(dev(g), dev(z), 2.0, dev(d)), A._pdist_backward(g, z, 2.0, d))


def test_pdist_errors_like_cpu():
    x = dev(rand(4, 5))
    with pytest.raises(RuntimeError, match="_pdist_forward requires contiguous input"):
        A._pdist_forward(x.t(), 2.0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        A._pdist_forward(dev(rand(4)), 2.0)
    with pytest.raises(NotImplementedError, match="\"pdist\" not implemented for 'BFloat16'"):
        A._pdist_forward(x.bfloat16(), 2.0)
    with pytest.raises(NotImplementedError, match="\"pdist\" not implemented for 'Long'"):
        A._pdist_forward(dev(torch.ones(3, 2, dtype=torch.long)), 2.0)
    with pytest.raises(RuntimeError, match="pdist only supports 2D tensors, got: 1D"):
        torch.pdist(dev(rand(4)))
    d = A._pdist_forward(x, 2.0)
    with pytest.raises(RuntimeError, match="_pdist_backward requires pdist to be contiguous"):
        A._pdist_backward(dev(rand(6)), x, 2.0, dev(rand(12))[::2])
    with pytest.raises(NotImplementedError, match="pdist_backward"):
        A._pdist_backward(d.bfloat16(), x.bfloat16(), 2.0, d.bfloat16())


# ------------------------------------------------------------ embedding_bag

IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 7, 0, 4, 4])
OFFSETS = [torch.tensor([0, 3, 3, 6]), torch.tensor([0, 3, 3, 6, 12]), torch.tensor([0])]


def table(dtype=torch.float32, seed=0):
    w = rand(10, 4, dtype=torch.float32, seed=seed)
    w[7, 1] = NAN          # a NaN inside a bag, not at its start
    w[2, 2] = w[1, 2]      # a tie in bag 0
    return w.to(dtype)


def bag_args(off, include_last_offset):
    if include_last_offset and off.numel() < 2:
        return None          # no bags at all: CPU's slow path writes out of bounds
    return off


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("op", ["_embedding_bag", "_embedding_bag_forward_only"])
@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_all_results_like_cpu(dtype, op, mode):
    # output, offset2bag, bag_size, max_indices: CPU's shapes (offset2bag is
    # empty on its 'sum' fast path) and values
    w = table(dtype)
    fn = getattr(A, op)
    for off in OFFSETS:
        for ilo in (False, True):
            if bag_args(off, ilo) is None:
                continue
            for pad in (-1, 4):
                for psw in ([None, rand(12, dtype=dtype, seed=3)] if mode == 0 else [None]):
                    args = (w, IDX, off, False, mode, False, psw, ilo, pad)
                    ref = fn(*args)
                    out = fn(*[dev(a) for a in args])
                    check(out, ref, **tol(dtype))


def test_embedding_bag_max_nan_and_ties():
    # CPU keeps a bag's first value and replaces it only by strictly greater
    # ones: a leading NaN sticks, later NaNs are skipped, ties keep the first
    w = torch.tensor([[NAN, 1.0], [2.0, NAN], [2.0, 3.0], [-INF, 3.0], [-INF, -INF]])
    idx = torch.tensor([0, 1, 2, 1, 2, 3, 4, 3, 4, 2])
    off = torch.tensor([0, 3, 5, 7, 7])
    for pad in (-1, 3, 2):
        args = (w, idx, off, False, 2, False, None, False, pad)
        check(A._embedding_bag(*[dev(a) for a in args]), A._embedding_bag(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_backward(dtype, mode):
    t = tol(dtype)
    for off, ilo in [(OFFSETS[0], False), (OFFSETS[1], True)]:
        for pad in (None, 4):
            for psw in ([None, rand(12, dtype=dtype, seed=5)] if mode == "sum" else [None]):
                with_grads(lambda w, p: F.embedding_bag(like(IDX, w), w, like(off, w),
                                                        mode=mode, padding_idx=pad,
                                                        include_last_offset=ilo,
                                                        per_sample_weights=p),
                           table(dtype), psw, tol_=t)
    # 2-D input (bags of equal size, offsets made by F.embedding_bag)
    idx2 = IDX.view(3, 4)
    with_grads(lambda w: F.embedding_bag(like(idx2, w), w, mode=mode), table(dtype), tol_=t)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    # CPU divides each index's gradient by the count of the i-th smallest
    # index (i = the rank of the distinct index); the tpu reproduces it
    idx = torch.tensor([3, 1, 3, 3, 5, 1, 0, 8, 8])
    off = torch.tensor([0, 2, 5, 7])
    for pad in (None, 3):
        for psw in ([None, rand(9, seed=2)] if mode == "sum" else [None]):
            with_grads(lambda w, p: F.embedding_bag(like(idx, w), w, like(off, w), mode=mode,
                                                    scale_grad_by_freq=True, padding_idx=pad,
                                                    per_sample_weights=p),
                       rand(10, 3), psw)


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_embedding_bag_dense_backward_op(mode):
    w = table()
    off = OFFSETS[0]
    _, o2b, bag_size, max_idx = A._embedding_bag(w, IDX, off, False, mode, False, None, False, 4)
    if mode == 0:
        o2b = A._embedding_bag(w, IDX, off, False, 1, False, None, False, 4)[1]
    grad = rand(4, 4, seed=9)
    for sgbf in ((False, True) if mode != 2 else (False,)):
        args = (grad, IDX, o2b, bag_size, max_idx, 10, sgbf, mode, None, 4)
        check(A._embedding_bag_dense_backward(*[dev(a) for a in args]),
              A._embedding_bag_dense_backward(*args))
    psw = rand(12, seed=1)
    args = (grad, w, IDX, off, o2b, 0, 4)
    check(A._embedding_bag_per_sample_weights_backward(*[dev(a) for a in args]),
          A._embedding_bag_per_sample_weights_backward(*args))
    # an empty offset2bag (CPU's 'sum' fast path) is rebuilt from the offsets
    empty = torch.empty(0, dtype=torch.long)
    args = (grad, w, IDX, off, empty, 0, -1)
    check(A._embedding_bag_per_sample_weights_backward(*[dev(a) for a in args]),
          A._embedding_bag_per_sample_weights_backward(*args))


def test_embedding_bag_index_dtypes_and_layouts():
    w = table()
    for it, ot in [(torch.int32, torch.int32), (torch.int32, torch.int64),
                   (torch.int16, torch.int64)]:
        args = (w, IDX.to(it), OFFSETS[0].to(ot), False, 1, False, None, False, -1)
        check(A._embedding_bag(*[dev(a) for a in args]), A._embedding_bag(*args))
    # a transposed table leaves CPU's fast path (offset2bag materialized)
    wt = w.t().contiguous().t()
    args = (wt, IDX, OFFSETS[0], False, 0, False, None, False, -1)
    out = A._embedding_bag(dev(w.t().contiguous()).t(), *[dev(a) for a in args[1:]])
    check(out, A._embedding_bag(*args))
    assert out[1].shape == (12,)
    # empty indices and empty offsets
    for idx, off in [(IDX[:0], torch.tensor([0, 0])), (IDX, torch.tensor([], dtype=torch.long))]:
        for mode in (0, 1, 2):
            args = (w, idx, off, False, mode, False, None, False, -1)
            if off.numel() == 0 and mode != 0:
                continue     # CPU's slow path writes to bag -1
            check(A._embedding_bag(*[dev(a) for a in args]), A._embedding_bag(*args))


def test_embedding_bag_max_norm_renorms_in_place():
    for norm_type in (2.0, 1.0, 3.0, INF):
        for dtype in (torch.float32, torch.bfloat16):
            w = (rand(10, 4, seed=4) * 2).to(dtype)
            tw = dev(w)
            idx = torch.tensor([1, 2, 4, 5, 4, 3, -1 + 10])
            ref = F.embedding_bag(idx, w, torch.tensor([0, 3]), max_norm=1.0, norm_type=norm_type)
            out = F.embedding_bag(dev(idx), tw, dev(torch.tensor([0, 3])), max_norm=1.0,
                                  norm_type=norm_type)
            check(out, ref, **tol(dtype))
            check(tw, w, **tol(dtype))          # the table was renormed in place, like CPU's
            if dtype == torch.bfloat16:
                # CPU computes the scale in bf16 tensor ops: same roundings, same bits
                assert torch.equal(tw.cpu(), w)
    w = rand(6, 3, seed=1) * 3
    t = dev(w)
    A.embedding_renorm_(t, dev(torch.tensor([[0, -1], [2, 0]])), 0.5, 2.0)
    A.embedding_renorm_(w, torch.tensor([[0, -1], [2, 0]]), 0.5, 2.0)
    check(t, w)


def _raises_at_sync(result, op):
    with pytest.raises(IndexError) as e:
        result.cpu()
    assert op in str(e.value) and "out of bounds" in str(e.value)


def test_embedding_bag_bad_indices_and_offsets_raise_at_the_next_sync():
    w = dev(table())
    i = lambda *v: dev(torch.tensor(v))    # noqa: E731
    fwd = "aten::_embedding_bag_forward_only"
    _raises_at_sync(F.embedding_bag(i(1, 12, 3), w, i(0, 2)), fwd)
    _raises_at_sync(F.embedding_bag(i(1, -1, 3), w, i(0, 2), mode="max"), fwd)
    _raises_at_sync(F.embedding_bag(i(1, 10, 3), w, i(0, 2), mode="mean", padding_idx=1), fwd)
    _raises_at_sync(A._embedding_bag(w, i(1, 2, 3), i(1, 2), False, 0, False, None, False, -1)[0],
                    "aten::_embedding_bag")
    _raises_at_sync(A._embedding_bag(w, i(1, 2, 3), i(0, 4), False, 1, False, None, False, -1)[0],
                    "aten::_embedding_bag")
    _raises_at_sync(A._embedding_bag(w, i(1, 2, 3), i(0, 2, 5), False, 2, False, None, True,
                                     -1)[0], "aten::_embedding_bag")
    _raises_at_sync(A._embedding_bag(w, i(1, 2, 3, 4), i(0, 3, 1), False, 0, False, None,
                                     False, -1)[0], "aten::_embedding_bag")
    t = w.clone()
    A.embedding_renorm_(t, i(2, 11), 1.0, 2.0)
    _raises_at_sync(t, "aten::embedding_renorm_")
    # the device is usable afterwards
    check(F.embedding_bag(i(1, 2, 3), w, i(0, 2)),
          F.embedding_bag(torch.tensor([1, 2, 3]), table(), torch.tensor([0, 2])))


def test_embedding_bag_errors_like_cpu():
    w, idx, off = dev(table()), dev(IDX), dev(OFFSETS[0])
    f = A._embedding_bag
    with pytest.raises(RuntimeError, match="per_sample_weights only supported with mode='sum'"):
        f(w, idx, off, False, 1, False, dev(rand(12)), False, -1)
    with pytest.raises(RuntimeError, match="per_sample_weights.value\\(\\).numel\\(\\) == "
                                           "indices.numel\\(\\)"):
        f(w, idx, off, False, 0, False, dev(rand(5)), False, -1)
    with pytest.raises(RuntimeError, match="'weight' to have the same type as tensor for "
                                           "argument #1 'per_sample_weights'"):
        f(w, idx, off, False, 0, False, dev(rand(12)).double(), False, -1)
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar "
                                           "types: Long, Int; but got torch.FloatTensor"):
        f(w, idx.float(), off, False, 0, False, None, False, -1)
    with pytest.raises(RuntimeError, match="weight has to be a 2D Tensor"):
        f(dev(rand(10)), idx, off, False, 0, False, None, False, -1)
    with pytest.raises(RuntimeError, match="offsets has to be a 1D Tensor"):
        f(w, idx, off.view(2, 2), False, 0, False, None, False, -1)
    with pytest.raises(RuntimeError, match="include_last_offset: number of offset should be at "
                                           "least 1"):
        f(w, idx, off[:0], False, 0, False, None, True, -1)
    with pytest.raises(RuntimeError, match="`mode` must be sum, mean, or max"):
        f(w, idx, off, False, 5, False, None, False, -1)
    with pytest.raises(RuntimeError, match="following scalar types: Half, BFloat16, Float, "
                                           "Double; but got torch.LongTensor"):
        f(w.long(), idx, off, False, 0, False, None, False, -1)
    with pytest.raises(RuntimeError, match="only supported for mode='sum'"):
        A._embedding_bag_per_sample_weights_backward(dev(rand(4, 4)), w, idx, off, idx, 1, -1)
    with pytest.raises(RuntimeError, match="Expected 2-dimensional tensor"):
        A.embedding_renorm_(dev(rand(10)), idx, 1.0, 2.0)

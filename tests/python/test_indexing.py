"""Indexing and data movement on tpu against PyTorch CPU: gather/scatter,
advanced indexing, cat, flips and pads, *_scatter, sorting, triangles and
the data-dependent ops (which count their host syncs)."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu import metrics

DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool]


@pytest.fixture(autouse=True)
def _no_fallbacks():
    """Every op these tests call has a tpu lowering: none may fall back."""
    metrics.reset()
    yield
    assert metrics.fallback_counts() == {}


def make(shape, dtype=torch.float32, seed=0, low=-5, high=5):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 3).to(dtype)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def tpu(x):
    return x.to("tpu")


def strided(x):
    """x on tpu as a non-contiguous view (every other element of a buffer)."""
    big = torch.zeros(*x.shape, 2, dtype=x.dtype)
    big[..., 0] = x
    y = tpu(big)[..., 0]
    assert not y.is_contiguous() or x.numel() <= 1
    return y


def same(actual, expected, exact=True):
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            same(a, e, exact)
        return
    a = actual.cpu()
    assert a.dtype == expected.dtype, (a.dtype, expected.dtype)
    assert a.shape == expected.shape, (a.shape, expected.shape)
    if exact:
        torch.testing.assert_close(a, expected, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(a, expected, equal_nan=True)


def idx(values, device="tpu", dtype=torch.int64):
    return torch.tensor(values, dtype=dtype, device=device)


# ------------------------------------------------------------------ cat


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_dims_and_noncontiguous(dtype):
    a, b, c = make((3, 5, 7), dtype, 1), make((3, 2, 7), dtype, 2), make((3, 1, 7), dtype, 3)
    same(torch.cat([tpu(a), strided(b), tpu(c)], 1), torch.cat([a, b, c], 1))
    same(torch.cat([tpu(a), tpu(a)], -1), torch.cat([a, a], -1))
    same(torch.cat([strided(a), tpu(a)]), torch.cat([a, a]))
    same(torch.stack([tpu(a), strided(a)], 2), torch.stack([a, a], 2))


def test_cat_promotes_and_skips_empty():
    i = make((2, 3), torch.int64)
    f = make((1, 3), torch.float32)
    h = make((4, 3), torch.bfloat16)
    bl = make((2, 3), torch.bool)
    same(torch.cat([tpu(i), tpu(f)]), torch.cat([i, f]))
    same(torch.cat([tpu(h), tpu(f)]), torch.cat([h, f]))
    same(torch.cat([tpu(bl), tpu(i)]), torch.cat([bl, i]))
    legacy = torch.empty(0)
    same(torch.cat([tpu(f), tpu(legacy), tpu(f)]), torch.cat([f, legacy, f]))
    z = torch.empty(0, 3)
    same(torch.cat([tpu(z), tpu(f)]), torch.cat([z, f]))
    same(torch.cat([tpu(z), tpu(z)]), torch.cat([z, z]))


def test_cat_many_inputs_and_out():
    xs = [make((2, k % 3 + 1), torch.float32, k) for k in range(70)]
    same(torch.cat([tpu(x) for x in xs], 1), torch.cat(xs, 1))
    out = torch.empty(0, device="tpu")
    r = torch.cat([tpu(xs[0]), tpu(xs[3])], out=out)
    assert r is out
    same(out, torch.cat([xs[0], xs[3]]))


def test_cat_errors_like_pytorch():
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([tpu(make((2, 3))), tpu(make((2, 4)))])


# ------------------------------------------------------- gather/scatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype):
    x = make((4, 5, 3), dtype)
    for dim in (0, 1, -1):
        shape = [3, 4, 2]
        i = torch.randint(0, x.shape[dim], shape)
        same(torch.gather(tpu(x), dim, tpu(i)), torch.gather(x, dim, i))
        same(torch.gather(strided(x), dim, strided(i)), torch.gather(x, dim, i))
    s = torch.tensor(2.5).to(dtype)
    same(torch.gather(tpu(s), 0, idx(0)), torch.gather(s, 0, torch.tensor(0)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_src_and_value(dtype):
    x = make((4, 6), dtype)
    src = make((3, 6), dtype, 5)
    i = torch.stack([torch.randperm(6)[:4] for _ in range(3)])
    same(torch.scatter(tpu(x), 1, tpu(i), tpu(src)), torch.scatter(x, 1, i, src))
    same(torch.scatter(strided(x), 1, strided(i), strided(src)), torch.scatter(x, 1, i, src))
    v = True if dtype == torch.bool else 3
    same(torch.scatter(tpu(x), 1, tpu(i), v), torch.scatter(x, 1, i, v))
    y = tpu(x)
    y.scatter_(1, tpu(i), tpu(src))
    same(y, x.clone().scatter_(1, i, src))


def test_scatter_value_is_a_runtime_operand():
    x, i = make((4, 6)), torch.randint(0, 6, (4, 2))
    tx, ti = tpu(x), tpu(i)
    torch.scatter(tx, 1, ti, 1.5)
    c0 = metrics.compile_counts().get("aten::scatter.value", 0)
    for v in (2.5, -7.0, 0.25):
        same(torch.scatter(tx, 1, ti, v), torch.scatter(x, 1, i, v))
    assert metrics.compile_counts().get("aten::scatter.value", 0) == c0


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_overloads(dtype):
    x = make((3, 5), dtype, 1, 1, 4)
    src = make((3, 5), dtype, 2, 1, 4)
    i = torch.randint(0, 5, (3, 5))
    for red in ("add", "multiply"):
        same(torch.scatter(tpu(x), 1, tpu(i), tpu(src), reduce=red),
             torch.scatter(x, 1, i, src, reduce=red))
        same(torch.scatter(tpu(x), 1, tpu(i), 2, reduce=red), torch.scatter(x, 1, i, 2, reduce=red))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_scatter_add_duplicates(dtype):
    x = make((5, 4), dtype)
    src = make((7, 4), dtype, 3)
    i = torch.randint(0, 5, (7, 4))   # many duplicates along dim 0
    exact = dtype != torch.bfloat16
    same(torch.scatter_add(tpu(x), 0, tpu(i), tpu(src)), torch.scatter_add(x, 0, i, src), exact)
    y = strided(x)
    y.scatter_add_(0, tpu(i), tpu(src))
    same(y, x.clone().scatter_add_(0, i, src), exact)
    out = torch.empty(5, 4, dtype=dtype, device="tpu")
    torch.scatter_add(tpu(x), 0, tpu(i), tpu(src), out=out)
    same(out, torch.scatter_add(x, 0, i, src), exact)


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_two(reduce, include_self, dtype):
    x = make((4, 5), dtype, 1, -4, 5)
    src = make((6, 5), dtype, 2, -4, 5)
    i = torch.randint(0, 3, (6, 5))   # row 3 is never hit
    ref = x.scatter_reduce(0, i, src, reduce, include_self=include_self)
    same(tpu(x).scatter_reduce(0, tpu(i), tpu(src), reduce, include_self=include_self), ref,
         exact=dtype != torch.float32 or reduce not in ("mean", "prod", "sum"))
    y = tpu(x)
    y.scatter_reduce_(0, tpu(i), tpu(src), reduce, include_self=include_self)
    same(y, ref, exact=dtype != torch.float32 or reduce not in ("mean", "prod", "sum"))


def test_scatter_reduce_nan_propagates():
    x = torch.tensor([1.0, 2.0, 3.0])
    src = torch.tensor([float("nan"), 5.0, -1.0])
    i = torch.tensor([0, 0, 2])
    for red in ("amax", "amin"):
        same(tpu(x).scatter_reduce(0, tpu(i), tpu(src), red), x.scatter_reduce(0, i, src, red))


def test_scatter_reduce_bfloat16_sum():
    x = make((4, 3), torch.bfloat16)
    src = make((8, 3), torch.bfloat16, 4)
    i = torch.randint(0, 4, (8, 3))
    ref = x.float().scatter_reduce(0, i, src.float(), "sum").bfloat16()
    same(tpu(x).scatter_reduce(0, tpu(i), tpu(src), "sum"), ref, exact=False)


# ---------------------------------------------------- index_* along a dim


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select(dtype):
    x = make((5, 6, 3), dtype)
    for dim in (0, 1, -1):
        i = torch.randint(0, x.shape[dim], (7,))
        same(torch.index_select(tpu(x), dim, tpu(i)), torch.index_select(x, dim, i))
        same(torch.index_select(strided(x), dim, tpu(i.int())), torch.index_select(x, dim, i.int()))
    same(torch.index_select(tpu(x), 1, idx(4)), torch.index_select(x, 1, torch.tensor(4)))
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.index_select(tpu(x), 0, idx([4, 0]), out=out)
    same(out, torch.index_select(x, 0, torch.tensor([4, 0])))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_add_copy_fill(dtype):
    x = make((5, 4), dtype)
    src = make((5, 6), dtype, 1)
    i = torch.tensor([3, 0, 3, 2, 3, 1])   # duplicates accumulate
    exact = dtype != torch.bfloat16
    same(tpu(x).index_add(1 - 2, tpu(i.remainder(4)), tpu(src)),
         x.index_add(-1, i.remainder(4), src), exact)
    same(tpu(x).index_add(1, tpu(i.remainder(4)), tpu(src), alpha=2),
         x.index_add(1, i.remainder(4), src, alpha=2), exact)
    y = strided(x)
    y.index_add_(0, idx([4, 0, 4]), tpu(src[:3, :4]))
    same(y, x.clone().index_add_(0, torch.tensor([4, 0, 4]), src[:3, :4]), exact)
    p = torch.tensor([2, 0, 3])
    same(tpu(x).index_copy(0, tpu(p), tpu(src[:3, :4])), x.index_copy(0, p, src[:3, :4]))
    y = tpu(x)
    y.index_copy_(1, tpu(p), tpu(src[:, :3]))
    same(y, x.clone().index_copy_(1, p, src[:, :3]))
    v = 7 if dtype != torch.bool else True
    n = torch.tensor([-1, 0, 2])   # index_fill wraps negative indices
    same(tpu(x).index_fill(1, tpu(n), v), x.index_fill(1, n, v))
    y = strided(x)
    y.index_fill_(0, tpu(n), torch.tensor(-2).to(dtype))
    same(y, x.clone().index_fill_(0, n, torch.tensor(-2).to(dtype)))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_reduce(reduce, include_self, dtype):
    x = make((5, 3), dtype, 1, -4, 5)
    src = make((5, 6), dtype, 2, -4, 5)
    i = torch.tensor([3, 0, 3, 2, 3, 0])   # column 1 is never hit
    ref = x.index_reduce(1 - 2, i.remainder(3), src, reduce, include_self=include_self)
    exact = dtype == torch.int64 or reduce in ("amax", "amin")
    same(tpu(x).index_reduce(-1, tpu(i.remainder(3)), tpu(src), reduce,
                             include_self=include_self), ref, exact)
    y = strided(x)
    y.index_reduce_(-1, tpu(i.remainder(3)), tpu(src), reduce, include_self=include_self)
    same(y, ref, exact)


def test_take_and_put():
    x = make((4, 5))
    i = torch.tensor([[0, -1], [7, 19]])
    same(torch.take(tpu(x), tpu(i)), torch.take(x, i))
    same(torch.take(strided(x), tpu(i)), torch.take(x, i))
    src = make((2, 2), seed=3)
    same(tpu(x).put(tpu(i), tpu(src)), x.put(i, src))
    dup = torch.tensor([1, 1, -19, 3])
    y = tpu(x)
    y.put_(tpu(dup), tpu(src.flatten()), accumulate=True)
    same(y, x.clone().put_(dup, src.flatten(), accumulate=True))


# --------------------------------------------------- advanced indexing


def _index_cases(x):
    i = torch.tensor([2, 0, -1, 2])
    j = torch.tensor([[1, -2], [0, 2]])
    k = torch.tensor([0, 2, 1, 1])
    return [
        (i,), (slice(None), k), (i, k), (i, slice(None), k), (Ellipsis, k),
        (None, i), (i, slice(1, 3)), (1, k), (j,), (j, slice(None), 0), (slice(None), j),
        (i.int(),), (torch.tensor(-1), k),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
def test_advanced_indexing_matches_cpu(dtype):
    x = make((3, 4, 5), dtype)
    tx, sx = tpu(x), strided(x)
    for case in _index_cases(x):
        dev = tuple(tpu(c) if isinstance(c, torch.Tensor) else c for c in case)
        same(tx[dev], x[case])
        same(sx[dev], x[case])
    i = torch.tensor([1, 0])
    same(tx[tpu(i)][None], x[i][None])
    same(tx[:, tpu(i)][1:, None], x[:, i][1:, None])


def test_index_tensors_on_the_cpu():
    x = make((4, 6))
    i = torch.tensor([3, -1, 0])
    same(tpu(x)[i], x[i])
    same(tpu(x)[i, torch.tensor(2)], x[i, torch.tensor(2)])
    same(tpu(x)[:, torch.tensor([True, False, True, True, False, False])],
         x[:, torch.tensor([True, False, True, True, False, False])])


@pytest.mark.parametrize("dtype", DTYPES)
def test_boolean_mask_indexing(dtype):
    x = make((4, 5, 3), dtype)
    m2 = make((4, 5), torch.bool, 7)
    m1 = torch.tensor([True, False, True, True, False])
    same(tpu(x)[tpu(m2)], x[m2])
    same(tpu(x)[:, tpu(m1)], x[:, m1])
    same(tpu(x)[tpu(m2), 1:], x[m2, 1:])
    same(tpu(x)[tpu(m1[:4]), :, tpu(torch.tensor([0, 2, 1]))],
         x[m1[:4], :, torch.tensor([0, 2, 1])])
    same(tpu(x)[tpu(torch.zeros(4, 5, dtype=torch.bool))],
         x[torch.zeros(4, 5, dtype=torch.bool)])
    assert metrics.sync_counts().get("aten::index.Tensor", 0) >= 4


def test_mask_shape_mismatch_is_an_index_error():
    with pytest.raises(IndexError, match="shape of the mask"):
        tpu(make((4, 5)))[tpu(torch.ones(3, dtype=torch.bool))]


def test_index_errors_like_pytorch():
    x = tpu(make((3, 4)))
    with pytest.raises(IndexError, match="too many indices"):
        x[idx([0]), idx([0]), idx([0])]
    with pytest.raises(IndexError, match="shape mismatch"):
        x[idx([0, 1]), idx([0, 1, 2])]


@pytest.mark.parametrize("dtype", DTYPES)
def test_index_put(dtype):
    x = make((4, 5, 3), dtype)
    v = make((2, 5, 3), dtype, 3)
    i = torch.tensor([-1, 1])
    cases = [((i,), v), ((slice(None), torch.tensor([4, 0])), make((4, 2, 3), dtype, 4)),
             ((i, slice(None), torch.tensor([2, 0])), make((2, 5), dtype, 5)),
             ((i, torch.tensor([0, 3])), make((3,), dtype, 6)),
             ((torch.tensor([[0], [2]]), torch.tensor([1, 4])), make((2, 2, 3), dtype, 8))]
    for case, val in cases:
        ref = x.clone()
        ref[case] = val
        dev = tuple(tpu(c) if isinstance(c, torch.Tensor) else c for c in case)
        y = tpu(x)
        y[dev] = tpu(val)
        same(y, ref)
        y = strided(x)
        y[dev] = tpu(val)
        same(y, ref)
    ref = x.clone()
    ref[i] = 1
    y = tpu(x)
    y[tpu(i)] = 1
    same(y, ref)


def test_index_put_duplicates():
    x = make((5, 3))
    i = torch.tensor([1, 3, 1, 1, -2])
    v = make((5, 3), seed=2)
    # accumulate: every duplicate adds
    y = tpu(x).index_put_((tpu(i),), tpu(v), accumulate=True)
    same(y, x.clone().index_put_((i,), v, accumulate=True), exact=False)
    # no accumulate: the last write wins, deterministically
    y = tpu(x).index_put_((tpu(i),), tpu(v))
    ref = x.clone()
    for r, k in enumerate(i.tolist()):
        ref[k] = v[r]
    same(y, ref)
    same(tpu(x).index_put((tpu(i),), tpu(v), accumulate=True),
         x.index_put((i,), v, accumulate=True), exact=False)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_index_put_accumulate_rounds_each_add_like_cpu(dtype):
    """PyTorch's CPU index_put_ with accumulate=True adds the values one by
    one in index order in the tensor's dtype (`self[i] += v`, rounding
    every time); so does the tpu, bitwise, also through
    _unsafe_masked_index_put_accumulate (the decomposition of masked
    index_put in compiled code)."""
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 6, generator=g) * 8).to(dtype)
    i = torch.randint(0, 4, (60,), generator=g)
    j = torch.randint(0, 6, (60,), generator=g)
    v = (torch.randn(60, 6, generator=g) * 8).to(dtype)
    same(tpu(x).index_put_((tpu(i),), tpu(v), accumulate=True),
         x.clone().index_put_((i,), v, accumulate=True))
    same(tpu(x).index_put_((tpu(i), tpu(j)), tpu(v[:, 0]), accumulate=True),
         x.clone().index_put_((i, j), v[:, 0], accumulate=True))
    mask = torch.rand(60, 1, generator=g) > 0.3
    same(torch.ops.aten._unsafe_masked_index_put_accumulate(tpu(x), tpu(mask), [tpu(i)], tpu(v)),
         torch.ops.aten._unsafe_masked_index_put_accumulate(x, mask, [i], v))


def test_index_add_in_place_through_python():
    x = make((6, 4))
    i = torch.tensor([0, 5, 2])
    y = tpu(x)
    y[tpu(i)] += 1.5
    ref = x.clone()
    ref[i] += 1.5
    same(y, ref)
    y = tpu(x)
    y[tpu(i), 1:] *= 2
    ref = x.clone()
    ref[i, 1:] *= 2
    same(y, ref)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_assignment_without_sync(dtype):
    x = make((4, 5, 3), dtype)
    m = make((4, 5), torch.bool, 9)
    v = True if dtype == torch.bool else 2
    cases = [(m, torch.tensor(v).to(dtype)), (m, make((3,), dtype, 1)),
             (m, make((1, 3), dtype, 2))]
    for mask, val in cases:
        ref = x.clone()
        ref[mask] = val
        y = tpu(x)
        y[tpu(mask)] = tpu(val)
        same(y, ref)
    ref = x.clone()
    ref[:, m[0]] = v
    y = strided(x)
    y[:, tpu(m[0])] = v
    same(y, ref)
    ref = x.clone().index_put_((m,), torch.tensor(v).to(dtype), accumulate=True)
    y = tpu(x).index_put_((tpu(m),), tpu(torch.tensor(v).to(dtype)), accumulate=True)
    same(y, ref)
    assert metrics.sync_counts() == {}


def test_mask_assignment_of_a_tensor_syncs():
    x = make((4, 5))
    m = make((4, 5), torch.bool, 3)
    v = make((int(m.sum()),), seed=4)
    ref = x.clone()
    ref[m] = v
    y = tpu(x)
    y[tpu(m)] = tpu(v)
    same(y, ref)
    assert metrics.sync_counts() == {"aten::index_put_": 1}


def _expect_index_error(result, op):
    with pytest.raises(IndexError) as e:
        result.cpu()
    assert op in str(e.value) and "out of bounds" in str(e.value)


def test_out_of_range_raises_at_the_next_sync():
    x = tpu(make((4, 5)))
    _expect_index_error(x[idx([1, 4])], "index.Tensor")
    _expect_index_error(x[idx([0, 1]), idx([2, -6])], "index.Tensor")
    _expect_index_error(x[:, idx([7])], "index.Tensor")
    _expect_index_error(torch.index_select(x, 1, idx([5])), "aten::index_select")
    _expect_index_error(torch.gather(x, 0, idx([[4]])), "aten::gather")
    _expect_index_error(torch.gather(x, 1, idx([[-1]])), "aten::gather")
    _expect_index_error(torch.take(x, idx([20])), "aten::take")
    _expect_index_error(x.scatter_add(0, idx([[9]]), x), "aten::scatter_add")
    y = x.clone()
    y[idx([-5])] = 1.0
    _expect_index_error(y, "_index_put_impl_")
    with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 1 with size 5"):
        x[:, idx([6])].cpu()
    # the device is usable afterwards
    same(x[idx([3])], x.cpu()[torch.tensor([3])])


# ----------------------------------------------- data-dependent sizes


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonzero(dtype):
    x = make((3, 4, 5), dtype, 1, -1, 2)
    same(torch.nonzero(tpu(x)), torch.nonzero(x))
    same(torch.nonzero(strided(x)), torch.nonzero(x))
    same(torch.argwhere(tpu(x)), torch.argwhere(x))
    same(torch.where(tpu(x) if dtype == torch.bool else tpu(x.bool())), torch.where(x.bool()))
    same(torch.nonzero(tpu(torch.zeros(3, dtype=dtype))), torch.nonzero(torch.zeros(3, dtype=dtype)))
    same(torch.nonzero(tpu(torch.tensor(5).to(dtype))), torch.nonzero(torch.tensor(5).to(dtype)))
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    torch.nonzero(tpu(x), out=out)
    same(out, torch.nonzero(x))
    assert metrics.sync_counts()["aten::nonzero"] >= 6


def test_nonzero_static_does_not_sync():
    x = torch.tensor([[0, 1, 0], [2, 0, 3]])
    for size in (0, 2, 3, 9):
        same(torch.nonzero_static(tpu(x), size=size, fill_value=-7),
             torch.nonzero_static(x, size=size, fill_value=-7))
    assert metrics.sync_counts() == {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_select_and_scatter(dtype):
    x = make((4, 5), dtype)
    m = make((4, 5), torch.bool, 2)
    row = make((5,), torch.bool, 3)
    same(torch.masked_select(tpu(x), tpu(m)), torch.masked_select(x, m))
    same(torch.masked_select(strided(x), tpu(row)), torch.masked_select(x, row))
    same(torch.masked_select(tpu(x[0]), tpu(m)), torch.masked_select(x[0], m))
    assert metrics.sync_counts()["aten::masked_select"] == 3
    src = make((6, 4), dtype, 4)
    same(tpu(x).masked_scatter(tpu(m), tpu(src)), x.masked_scatter(m, src))
    same(tpu(x).masked_scatter(tpu(row), tpu(src)), x.masked_scatter(row, src))
    y = strided(x)
    y.masked_scatter_(tpu(m), tpu(src))
    same(y, x.clone().masked_scatter_(m, src))


def test_masked_scatter_short_source_raises():
    x = tpu(make((3, 3)))
    _expect_index_error(x.masked_scatter(tpu(torch.ones(3, 3, dtype=torch.bool)),
                                         tpu(make((4,)))), "masked_scatter")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_unique(dtype):
    x = make((5, 7), dtype, 3, -3, 3)
    for kw in ({}, {"return_inverse": True}, {"return_counts": True},
               {"return_inverse": True, "return_counts": True}):
        same(torch.unique(tpu(x), **kw), torch.unique(x, **kw))
        same(torch.unique_consecutive(tpu(x), **kw), torch.unique_consecutive(x, **kw))
    same(torch.unique(strided(x)), torch.unique(x))
    assert metrics.sync_counts()["aten::_unique2"] == 5
    assert metrics.sync_counts()["aten::unique_consecutive"] == 4


def test_unique_nan_and_signed_zero():
    x = torch.tensor([3.0, float("nan"), 1.0, 3.0, float("nan"), 0.0, -0.0])
    same(torch.unique(tpu(x), return_inverse=True, return_counts=True),
         torch.unique(x, return_inverse=True, return_counts=True))
    same(torch.unique(tpu(torch.empty(0))), torch.unique(torch.empty(0)))


def test_repeat_interleave():
    r = torch.tensor([2, 0, 3, 1])
    same(torch.repeat_interleave(tpu(r)), torch.repeat_interleave(r))
    x = make((4, 3))
    same(torch.repeat_interleave(tpu(x), tpu(r), dim=0), torch.repeat_interleave(x, r, dim=0))
    same(torch.repeat_interleave(tpu(x), 2, dim=1), torch.repeat_interleave(x, 2, dim=1))
    same(torch.repeat_interleave(tpu(x), 3), torch.repeat_interleave(x, 3))
    same(torch.repeat_interleave(tpu(r), output_size=6), torch.repeat_interleave(r, output_size=6))
    assert metrics.sync_counts()["aten::repeat_interleave.Tensor"] == 2
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(idx([1, -1]))


# ------------------------------------------------- flips, rolls, pads


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_rot90(dtype):
    x = make((3, 4, 5), dtype)
    for dims in ([0], [1, 2], [-1, 0], []):
        same(torch.flip(tpu(x), dims), torch.flip(x, dims))
        same(torch.flip(strided(x), dims), torch.flip(x, dims))
    for shifts, dims in ((1, 0), (-2, 2), ((1, 7), (1, 2)), (5, None), (-13, None)):
        same(torch.roll(tpu(x), shifts, dims), torch.roll(x, shifts, dims))
        same(torch.roll(strided(x), shifts, dims), torch.roll(x, shifts, dims))
    for k in (1, 2, -1):
        same(torch.rot90(tpu(x), k, (1, 2)), torch.rot90(x, k, (1, 2)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_pad(dtype):
    x = make((2, 3, 4), dtype)
    for pad in ((1, 2), (0, 1, 2, 0), (-1, 2, 1, -2), (1, 1, 1, 1, 1, 1), (-2, -1)):
        for value in (0, 1):
            v = bool(value) if dtype == torch.bool else value
            same(F.pad(tpu(x), pad, value=v), F.pad(x, pad, value=v))
    same(F.pad(strided(x), (2, 1)), F.pad(x, (2, 1)))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reflection_replication_pads(mode, nd, dtype):
    shape = (2, 3) + (5, 4, 6)[:nd]
    x = make(shape, dtype)
    pad = (2, 1, 0, 3, 1, 2)[:2 * nd]
    same(F.pad(tpu(x), pad, mode=mode), F.pad(x, pad, mode=mode))
    same(F.pad(strided(x), pad, mode=mode), F.pad(x, pad, mode=mode))
    xc = x.float().clone().requires_grad_()
    xt = tpu(x.float()).detach().requires_grad_()
    g = make(F.pad(x, pad, mode=mode).shape, torch.float32, 5)
    F.pad(xc, pad, mode=mode).backward(g)
    F.pad(xt, pad, mode=mode).backward(tpu(g))
    same(xt.grad, xc.grad, exact=False)


def test_pads_unbatched():
    x = make((3, 7))
    same(F.pad(tpu(x), (3, 2), mode="reflect"), F.pad(x, (3, 2), mode="reflect"))
    same(F.pad(tpu(x), (3, 2), mode="replicate"), F.pad(x, (3, 2), mode="replicate"))


# ---------------------------------------------------------- *_scatter


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_select_diagonal_scatter(dtype):
    x = make((5, 6, 4), dtype)
    for dim, start, end, step in ((0, 1, 4, 1), (1, None, None, 2), (2, -3, None, 1),
                                  (1, 1, 6, 3), (0, 2, 2, 1)):
        n = len(range(*slice(start, end, step).indices(x.shape[dim])))
        shape = list(x.shape)
        shape[dim] = n
        src = make(tuple(shape), dtype, 4)
        same(torch.slice_scatter(tpu(x), tpu(src), dim, start, end, step),
             torch.slice_scatter(x, src, dim, start, end, step))
    src = make((5, 4), dtype, 5)
    same(torch.select_scatter(tpu(x), tpu(src), 1, -2), torch.select_scatter(x, src, 1, -2))
    same(torch.select_scatter(strided(x), tpu(src), 1, 3), torch.select_scatter(x, src, 1, 3))
    for off, d1, d2 in ((0, 0, 1), (2, 0, 1), (-1, 1, 2), (1, 2, 0), (-3, 0, 2)):
        s = make(torch.diagonal(x, off, d1, d2).shape, dtype, 6)
        same(torch.diagonal_scatter(tpu(x), tpu(s), off, d1, d2),
             torch.diagonal_scatter(x, s, off, d1, d2))
    s = make((2, 3), dtype, 7)
    same(torch.as_strided_scatter(tpu(x), tpu(s), (2, 3), (7, 2), 5),
         torch.as_strided_scatter(x, s, (2, 3), (7, 2), 5))


# ------------------------------------------------------------- sorting


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_sort_and_argsort(dtype):
    x = make((4, 9, 3), dtype, 1, -3, 3)   # many ties: stability matters
    for dim in (0, 1, -1):
        for desc in (False, True):
            same(torch.sort(tpu(x), dim=dim, descending=desc, stable=True),
                 torch.sort(x, dim=dim, descending=desc, stable=True))
            same(torch.argsort(strided(x), dim=dim, descending=desc, stable=True),
                 torch.argsort(x, dim=dim, descending=desc, stable=True))
    same(torch.msort(tpu(x)), torch.msort(x))
    v, i = torch.empty(0, dtype=dtype, device="tpu"), torch.empty(0, dtype=torch.int64, device="tpu")
    torch.sort(tpu(x), 1, out=(v, i))
    same((v, i), torch.sort(x, dim=1, stable=True))


def test_sort_nan_is_largest():
    x = torch.tensor([[3.0, float("nan"), -1.0, float("inf"), float("nan"), -float("inf")]])
    for desc in (False, True):
        same(torch.sort(tpu(x), descending=desc, stable=True),
             torch.sort(x, descending=desc, stable=True))
        same(torch.topk(tpu(x), 3, largest=not desc), torch.topk(x, 3, largest=not desc))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_topk_kthvalue(dtype):
    x = torch.randperm(60, generator=torch.Generator().manual_seed(1)).reshape(4, 15).to(dtype)
    for k, dim, largest in ((3, -1, True), (1, 0, False), (15, 1, False), (0, 1, True)):
        same(torch.topk(tpu(x), k, dim, largest), torch.topk(x, k, dim, largest))
        same(torch.topk(strided(x), k, dim, largest), torch.topk(x, k, dim, largest))
    v, i = torch.empty(0, dtype=dtype, device="tpu"), torch.empty(0, dtype=torch.int64, device="tpu")
    torch.topk(tpu(x), 2, out=(v, i))
    same((v, i), torch.topk(x, 2))
    for k, dim, keep in ((1, -1, False), (4, 0, True), (15, 1, False)):
        same(torch.kthvalue(tpu(x), k, dim, keep), torch.kthvalue(x, k, dim, keep))


def test_randperm():
    torch.manual_seed(3)
    a = torch.randperm(50, device="tpu")
    torch.manual_seed(3)
    b = torch.randperm(50, device="tpu")
    c = torch.randperm(50, device="tpu")
    assert a.dtype == torch.int64 and a.device.type == "tpu"
    same(a.sort().values, torch.arange(50))
    same(a, b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())
    f = torch.randperm(7, dtype=torch.float32, device="tpu")
    same(f.sort().values, torch.arange(7.0))
    out = torch.empty(0, dtype=torch.int32, device="tpu")
    torch.randperm(9, out=out)
    same(out.sort().values, torch.arange(9, dtype=torch.int32))
    assert torch.randperm(0, device="tpu").shape == (0,)


# ---------------------------------------------------- triangles, eye


@pytest.mark.parametrize("dtype", DTYPES)
def test_tril_triu(dtype):
    x = make((2, 4, 6), dtype)
    for k in (0, 2, -1, -5, 9):
        same(torch.tril(tpu(x), k), torch.tril(x, k))
        same(torch.triu(strided(x), k), torch.triu(x, k))
    y = tpu(x)
    y.tril_(1)
    same(y, x.tril(1))
    y = strided(x)
    y.triu_(-1)
    same(y, x.triu(-1))
    out = torch.empty(0, dtype=dtype, device="tpu")
    torch.triu(tpu(x), 1, out=out)
    same(out, torch.triu(x, 1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_eye(dtype):
    same(torch.eye(4, dtype=dtype, device="tpu"), torch.eye(4, dtype=dtype))
    same(torch.eye(3, 5, dtype=dtype, device="tpu"), torch.eye(3, 5, dtype=dtype))
    out = torch.empty(2, dtype=dtype, device="tpu")
    with pytest.warns(UserWarning, match="resized"):
        torch.eye(2, 3, out=out)
    same(out, torch.eye(2, 3, dtype=dtype))


# ------------------------------------------------------------ autograd


def _grad_pair(x, fn, seed=9):
    xc = x.clone().requires_grad_()
    xt = tpu(x).requires_grad_()
    yc, yt = fn(xc, torch), fn(xt, "tpu")
    g = make(yc.shape, yc.dtype, seed)
    yc.backward(g)
    yt.backward(tpu(g))
    same(yt, yc.detach(), exact=False)
    same(xt.grad, xc.grad, exact=False)


def _on(t, dev):
    return t if dev is torch else t.to(dev)


def test_autograd_through_indexing_ops():
    x = make((5, 6))
    i = torch.tensor([[0, 4, 4], [1, 1, 2]])
    _grad_pair(x, lambda a, d: torch.gather(a, 1, _on(i, d)))
    _grad_pair(x, lambda a, d: a[_on(torch.tensor([1, 1, -1]), d)])
    _grad_pair(x, lambda a, d: a[_on(torch.tensor([1, 3]), d), 1:][:, _on(torch.tensor([0, 0]), d)])
    _grad_pair(x, lambda a, d: torch.index_select(a, 1, _on(torch.tensor([5, 0, 5]), d)))
    _grad_pair(x, lambda a, d: torch.cat([a, a[:2] * 1.0, a.flip(0)], 0))
    _grad_pair(x, lambda a, d: torch.flip(a, [1]))
    _grad_pair(x, lambda a, d: F.pad(a, (2, -1, 1, 1)))
    _grad_pair(x[None], lambda a, d: F.pad(a, (2, 3), mode="reflect"))
    _grad_pair(x, lambda a, d: torch.sort(a, 1).values)
    _grad_pair(x, lambda a, d: torch.topk(a, 2, 0).values)
    _grad_pair(x, lambda a, d: torch.masked_select(a, _on(make((5, 6), torch.bool, 2), d)))
    _grad_pair(x, lambda a, d: torch.roll(a, 2, 1))
    _grad_pair(x, lambda a, d: a.unfold(1, 3, 2))
    _grad_pair(x, lambda a, d: torch.take(a, _on(torch.tensor([3, 3, -1]), d)))


def test_lowered_ops_are_registered():
    ops = set(torchtpu._registry.registered_ops())
    for name in ["aten::cat", "aten::gather", "aten::scatter.src", "aten::scatter_add",
                 "aten::scatter_reduce.two", "aten::index_select", "aten::index.Tensor",
                 "aten::_index_put_impl_", "aten::index_add", "aten::index_copy",
                 "aten::index_fill.int_Scalar", "aten::index_reduce", "aten::masked_scatter",
                 "aten::masked_select",
                 "aten::nonzero", "aten::flip", "aten::roll", "aten::constant_pad_nd",
                 "aten::reflection_pad2d", "aten::replication_pad3d_backward",
                 "aten::slice_scatter", "aten::sort.stable", "aten::topk", "aten::_unique2",
                 "aten::randperm.generator_out", "aten::tril", "aten::eye.m_out"]:
        assert name in ops, name


# ---------------------------------------------------------- edge cases


def _setitem(t, key, v):
    t = t.clone()
    t[key] = v
    return t


X = make((4, 5, 3), seed=11)
M = make((4, 5), torch.bool, 12)
L = torch.tensor
EDGE_CASES = {
    "mask with uint8": (lambda t, m: t[m], X, M.to(torch.uint8)),
    "mask put, values over the prefix": (
        lambda t, m, v: _setitem(t, (slice(None), m), v), X, M[0], make((4, 1, 3), seed=2)),
    "mask put, values per element": (
        lambda t, m, v: _setitem(t, (slice(None), m), v), X, M[0],
        make((int(M[0].sum()), 3), seed=3)),
    "index of an empty tensor": (lambda t, i: t[i], torch.zeros(0, 3), L([], dtype=torch.long)),
    "empty index": (lambda t, i: t[:, i], X, L([], dtype=torch.long)),
    "two empty indices": (lambda t, i: t[i, i], X, L([], dtype=torch.long)),
    "three indices": (lambda t, i, j, k: t[i, j, k], X, L([0, 3]), L([4, -5]), L([2, -3])),
    "non-adjacent 2-d indices": (lambda t, i, j: t[i, :, j], X, L([[0], [3]]), L([[2, 1]])),
    "put three indices, accumulate": (
        lambda t, i, j, k: t.index_put((i, j, k), L(1.0), accumulate=True), X, L([0, 0]),
        L([4, 4]), L([2, 2])),
    "put non-adjacent, accumulate": (
        lambda t, i, j: torch.ops.aten.index_put(t, [i, None, j], torch.ones(2, 5), True), X,
        L([0, 0]), L([2, 2])),
    "put bool, accumulate": (
        lambda t, i: t.index_put((i,), L(True), accumulate=True), L([False, True]), L([0, 0])),
    "gather, empty index": (lambda t, i: t.gather(1, i), X, torch.zeros(4, 0, 3, dtype=torch.long)),
    "scatter of a scalar": (lambda t, i, s: t.scatter(0, i, s), L(1.0), L(0), L(5.0)),
    "scatter_add of a scalar": (lambda t, i, s: t.scatter_add(0, i, s), L(1.0), L(0), L(5.0)),
    "index_select of a scalar": (lambda t, i: t.index_select(0, i), L(3.0), L(0)),
    "index_select of a scalar, two indices": (lambda t, i: t.index_select(0, i), L(3.0), L([0, 0])),
    "index_add, wrong source rank": (
        lambda t, i, s: t.index_add(0, i, s), L(3.0), L([0]), L([2.0])),
    "index_copy, 0-dim index": (
        lambda t, i, s: t.index_copy(0, i, s), make((3, 2)), L(1), make((1, 2), seed=1)),
    "sort of a scalar": (lambda t: t.sort(), L(3.0)),
    "sort of an empty tensor": (lambda t: t.sort(0), torch.zeros(0, 4)),
    "sort, signed zeros": (lambda t: t.sort(stable=True), L([0.0, -0.0, 0.0, -0.0])),
    "sort int8 and float64": (lambda a, b: (a.sort(stable=True), b.sort(stable=True)),
                              make((10,), torch.int8), make((10,), torch.float64)),
    "topk of a scalar": (lambda t: t.topk(1), L(3.0)),
    "kthvalue keepdim": (lambda t: t.kthvalue(2, 0, True), torch.arange(10.0).reshape(5, 2)),
    "masked_scatter, nothing to take": (
        lambda t, m, s: t.masked_scatter(m, s), X[..., 0], torch.zeros(4, 5, dtype=torch.bool),
        torch.zeros(0)),
    "take, empty and 0-dim index": (
        lambda t, i, j: (t.take(i), t.take(j)), X, L([], dtype=torch.long), L(-1)),
    "put, bfloat16 accumulate": (
        lambda t, i, s: t.put(i, s, accumulate=True), X.bfloat16(), L([1, 1, 2]),
        torch.ones(3, dtype=torch.bfloat16)),
    "empty tril/roll/pad": (lambda t: (t.tril(), t.roll(1, 0), F.pad(t, (1, 1))),
                            torch.zeros(0, 3)),
    "pad of a zero-size dim": (lambda t: F.pad(t, (1, 1), value=2.0), torch.zeros(2, 0)),
    "integer pad with a float value": (lambda t: F.pad(t, (1, 1), value=2.7), torch.arange(4)),
    "flip/roll of a scalar": (lambda t: (t.flip(0), t.roll(1)), L(3.0)),
    "repeat_interleave of zeros": (lambda r: torch.repeat_interleave(r), L([0, 0])),
    "repeat_interleave of nothing": (lambda r: torch.repeat_interleave(r),
                                     L([], dtype=torch.long)),
    "repeat_interleave int32": (lambda r: torch.repeat_interleave(r),
                                L([1, 2], dtype=torch.int32)),
    "unique of a scalar": (
        lambda t: torch.unique(t, return_inverse=True, return_counts=True), L(3.0)),
    "nonzero of an empty matrix": (lambda t: t.nonzero(), torch.zeros(0, 3)),
    "nonzero counts NaN": (lambda t: t.nonzero(), L([0.0, float("nan"), -0.0])),
    "nonzero_static of a scalar": (lambda t: torch.nonzero_static(t, size=2), L(3.0)),
    "masked_select broadcasts self": (lambda t, m: t.masked_select(m), make((5,)), M),
    "cat of scalars is an error": (lambda t: torch.cat([t, t]), L(1.0)),
    "cat with a legacy empty": (lambda a, b: torch.cat([a, b]), torch.zeros(0),
                                torch.ones(2, 2, dtype=torch.long)),
    "select_scatter, negative dim": (
        lambda t, s: torch.select_scatter(t, s, -1, 0), X, make((4, 5), seed=4)),
    "slice_scatter, step past the end": (
        lambda t, s: torch.slice_scatter(t, s, 1, 0, 5, 10), X, make((4, 1, 3), seed=5)),
    "diagonal_scatter of matrices": (
        lambda t, s, u: (torch.diagonal_scatter(t, s, 1), torch.diagonal_scatter(t, u, -2)),
        make((4, 5)), make((4,), seed=1), make((2,), seed=2)),
    "scatter_reduce: integer mean floors": (
        lambda t, i, s: t.scatter_reduce(0, i, s, "mean"), L([-7, 4]), L([0, 0, 1]),
        L([-2, -3, 5])),
    "scatter_reduce: bfloat16 amax": (
        lambda t, i, s: t.scatter_reduce(0, i, s, "amax", include_self=False),
        make((3,), torch.bfloat16), L([0, 0]), make((2,), torch.bfloat16, 1)),
    "scatter of a bool value": (lambda t, i: t.scatter(0, i, True), L([False, False]), L([1])),
}


def _tree(fn, x):
    if isinstance(x, (tuple, list)):
        return type(x)(_tree(fn, e) for e in x)
    return fn(x)


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_cases_match_cpu(name):
    fn, *args = EDGE_CASES[name]
    try:
        ref = fn(*args)
    except (RuntimeError, IndexError) as e:
        with pytest.raises(type(e)) as got:
            _tree(lambda t: t.cpu(), fn(*[tpu(a) for a in args]))
        assert str(got.value).split("\n")[0].endswith(str(e).split("\n")[0])
        return
    same(fn(*[tpu(a) for a in args]), ref)


def test_cpu_mask_needs_no_sync():
    x = make((4, 5))
    same(tpu(x)[M], x[M])
    same(tpu(x)[:, M[0]], x[:, M[0]])
    assert metrics.sync_counts() == {}


def test_unsupported_dtypes_fall_back_counted():
    x = torch.randn(4, 3, dtype=torch.complex64)
    i = torch.tensor([2, 0])
    same(tpu(x)[tpu(i)], x[i])
    same(torch.nonzero(tpu(x)), torch.nonzero(x))
    assert set(metrics.fallback_counts()) == {"aten::index.Tensor", "aten::nonzero"}
    metrics.reset()

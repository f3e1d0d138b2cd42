"""Pairwise distances: cdist and pdist, forward and backward.

The rules compute what PyTorch's CPU kernels compute. p-norm distances are
reduced from the differences directly, except cdist with p == 2 under compute
mode 1 ("use_mm_for_euclid_dist"), or mode 0 with more than 25 rows on either
side, where CPU expands |a - b|^2 = |a|^2 - 2 a.b + |b|^2 into one matmul
(``_euclidean_dist``); that case runs on the MXU at the current matmul
precision, the others on the VPU. pdist reduces all n x n differences (affine
loads, no gathers in the inner loop) and then picks the pairs i < j. Backward
passes use the difference formulas of the CPU kernels (including their
treatment of zero distances, ties and NaN); sums run in the device's fixed
order rather than CPU's sequential one.
"""
import torch

from .. import _C
from .._registry import lowering
from .ctx import NotLowerable
from .elementwise import _check_dtypes
from .pointwise import _CPU_NAME

I64 = torch.int64
_DIRECT = (torch.float32, torch.float64)
_CTYPE = {torch.float32: "float", torch.float64: "double", torch.bfloat16: "c10::BFloat16",
          torch.float16: "c10::Half"}


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def _acc(dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _kernel_dtype(kernel, dtype):
    """CPU's distance kernels exist for float and double only."""
    if dtype not in _DIRECT:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_CPU_NAME[dtype]}\'')


def _same_dtype(want, *ts):
    for t in ts:
        if t.dtype != want:
            raise RuntimeError(f"expected scalar type {_CPU_NAME[want]} but found "
                               f"{_CPU_NAME[t.dtype]}")


def _c(ctx, value, v):
    return ctx.const(value, v.dtype, v.shape)


def _bin(ctx, name, a, b):
    """Binary op with a Python number for either side."""
    if not hasattr(a, "id"):
        a = _c(ctx, a, b)
    if not hasattr(b, "id"):
        b = _c(ctx, b, a)
    return ctx.binary(name, a, b)


def _uses_mm(p, mode, r1, r2):
    return p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))


def _sign(ctx, v):
    """The kernels' sign: -1, 0 or 1, NaN for NaN."""
    return ctx.unary("sign", v)


def _norm_of(ctx, ad, p, dim, nan_max):
    """p-norm over dim of |a - b| (ad), as the CPU kernels reduce it: p == 0
    counts nonzero differences, inf takes the max (cdist's scalar loop
    skips NaN there, nan_max=False; pdist's vector loop propagates it)."""
    if p == 0:
        one = _c(ctx, 1, ad)
        return ctx.reduce("sum", ctx.binary("minimum", ctx.unary("ceil", ad), one), [dim])
    if p == 1:
        return ctx.reduce("sum", ad, [dim])
    if p == 2:
        return ctx.unary("sqrt", ctx.reduce("sum", ctx.binary("multiply", ad, ad), [dim]))
    if p == float("inf"):
        if not nan_max:
            ad = ctx.select(ctx.compare("ne", ad, ad), _c(ctx, 0, ad), ad)
        return ctx.reduce("max", ad, [dim])
    pv = float(torch.tensor(p, dtype=ad.dtype))
    s = ctx.reduce("sum", ctx.binary("power", ad, _c(ctx, pv, ad)), [dim])
    return ctx.binary("power", s, _c(ctx, 1.0 / pv, s))


def _norm_grad(ctx, diff, g, d, p):
    """The CPU kernels' gradient of one distance d with respect to one side,
    given diff = a - b and the incoming gradient g (broadcast alike)."""
    zero = _c(ctx, 0, diff)
    if p == 0:
        return zero
    if p == 1:
        return ctx.binary("multiply", g, _sign(ctx, diff))
    if p == float("inf"):
        ad = ctx.unary("abs", diff)
        far = ctx.unary("ceil", ctx.unary("abs", ctx.binary("subtract", ad, d)))
        hit = _bin(ctx, "subtract", 1, ctx.binary("minimum", _c(ctx, 1, far), far))
        return ctx.binary("multiply", ctx.binary("multiply", g, _sign(ctx, diff)), hit)
    pv = float(torch.tensor(p, dtype=diff.dtype))
    at_zero = ctx.compare("eq", d, zero)
    if p == 2:
        r = ctx.binary("divide", ctx.binary("multiply", g, diff), d)
        return ctx.select(at_zero, zero, r)
    ad = ctx.unary("abs", diff)
    dp = ctx.binary("power", d, _c(ctx, pv - 1, d))
    if p < 2:
        t = ctx.binary("multiply", _sign(ctx, diff), ctx.binary("power", ad, _c(ctx, pv - 1, ad)))
    else:
        t = ctx.binary("multiply", diff, ctx.binary("power", ad, _c(ctx, pv - 2, ad)))
    r = ctx.select(at_zero, zero, ctx.binary("divide", ctx.binary("multiply", t, g), dp))
    if p < 1:
        r = ctx.select(ctx.compare("eq", diff, zero), zero, r)
    return r


def _batched(ctx, v, batch, full, dims_tail):
    """v ([*b, r, c], broadcastable batch) laid into shape full, its last two
    dims at dims_tail."""
    nb = len(batch)
    lead = tuple(range(nb - (v.rank - 2), nb))
    return ctx.broadcast_in_dim(v, full, lead + tuple(dims_tail))


# ------------------------------------------------------------------ cdist


def _euclidean(ctx, x1, x2, batch):
    """CPU's _euclidean_dist: [-2 x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamped at
    zero, square-rooted; each step rounded to the input dtype as the separate
    aten ops are."""
    dt = x1.dtype
    acc = _acc(dt)
    r1, r2, c = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    nbt = _prod(batch)

    def prep(x, name, r, mine_first):
        v = ctx.input(x, name)
        v = _batched(ctx, v, batch, batch + (r, c), (len(batch), len(batch) + 1))
        v = ctx.reshape(v, (nbt, r, c))
        a = ctx.convert(v, acc)
        sq = ctx.convert(ctx.convert(ctx.binary("multiply", a, a), dt), acc)
        nrm = ctx.convert(ctx.reduce("sum", sq, [2]), dt)
        nrm = ctx.reshape(nrm, (nbt, r, 1))
        ones = ctx.const(1, dt, (nbt, r, 1))
        if mine_first:
            lhs = ctx.convert(ctx.binary("multiply", a, _c(ctx, -2, a)), dt)
            return ctx.op("concatenate", lhs, nrm, ones, ints=(2,))
        return ctx.op("concatenate", v, ones, nrm, ints=(2,))

    a = prep(x1, "x1", r1, True)
    b = prep(x2, "x2", r2, False)
    prod = ctx.dot_general(a, b, (0,), (0,), (2,), (2,), _C.get_precision(), out_dtype=acc,
                           out_shape=(nbt, r1, r2))
    prod = ctx.convert(ctx.convert(prod, dt), acc)
    prod = ctx.binary("maximum", prod, _c(ctx, 0, prod))
    r = ctx.convert(ctx.unary("sqrt", ctx.convert(ctx.convert(prod, dt), acc)), dt)
    return ctx.reshape(r, batch + (r1, r2))


@lowering("aten::_cdist_forward", uses_precision=True)
def cdist_forward(ctx, x1, x2, p, compute_mode=None):
    _check_dtypes(x1, x2)
    m = ctx.meta()
    shape = tuple(m.shape)
    r1, r2, c = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    if m.numel() == 0 or c == 0:
        ctx.output(ctx.const(0, m.dtype, shape), like=m)
        return
    batch = shape[:-2]
    if _uses_mm(p, 0 if compute_mode is None else compute_mode, r1, r2):
        if x1.dtype != x2.dtype:
            raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                               f"{_CTYPE[x1.dtype]} != {_CTYPE[x2.dtype]}")
        ctx.output(_euclidean(ctx, x1, x2, batch), like=m)
        return
    _kernel_dtype("cdist", x1.dtype)
    _same_dtype(x1.dtype, x2)
    nb = len(batch)
    full = batch + (r1, r2, c)
    a = _batched(ctx, ctx.input(x1, "x1"), batch, full, (nb, nb + 2))
    b = _batched(ctx, ctx.input(x2, "x2"), batch, full, (nb + 1, nb + 2))
    ad = ctx.unary("abs", ctx.binary("subtract", a, b))
    ctx.output(_norm_of(ctx, ad, p, nb + 2, nan_max=False), like=m)


@lowering("aten::_cdist_backward")
def cdist_backward(ctx, grad, x1, x2, p, cdist):
    _check_dtypes(grad, x1, x2, cdist)
    m = ctx.meta()
    r1, r2, c = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    batch = tuple(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    if r1 == 0 or r2 == 0 or c == 0 or _prod(batch) == 0:
        ctx.output(ctx.const(0, m.dtype, tuple(m.shape)), like=m)
        return
    _kernel_dtype("cdist_backward", x1.dtype)
    _same_dtype(x1.dtype, grad, cdist, x2)
    want = batch + (r1, r2)
    if tuple(grad.shape) != want or tuple(cdist.shape) != want:
        raise NotLowerable("cdist backward with mismatched grad/cdist shapes")
    nb = len(batch)
    full = batch + (r1, r2, c)
    a = _batched(ctx, ctx.input(x1, "x1"), batch, full, (nb, nb + 2))
    b = _batched(ctx, ctx.input(x2, "x2"), batch, full, (nb + 1, nb + 2))
    keep = tuple(range(nb + 2))
    g = ctx.broadcast_in_dim(ctx.input(grad, "grad"), full, keep)
    d = ctx.broadcast_in_dim(ctx.input(cdist, "cdist"), full, keep)
    r = ctx.reduce("sum", _norm_grad(ctx, ctx.binary("subtract", a, b), g, d, p), [nb + 1])
    ctx.output(r, like=m)


# ------------------------------------------------------------------ pdist


def _pair_positions(ctx, n):
    """Flat positions i n + j in an [n, n] matrix of the condensed pairs
    k = 0 .. n(n-1)/2 - 1 (i < j, row-major): the row i of each k is a
    running sum of ones marked where rows i >= 1 start."""
    k = n * (n - 1) // 2
    kk = ctx.iota(I64, (k,), 0)
    if n > 2:
        i = _bin(ctx, "add", ctx.iota(I64, (n - 2,), 0), 1)
        starts = _row_start(ctx, i, n)
        marks = ctx.op("scatter", ctx.const(0, I64, (k,)), starts, ctx.const(1, I64, (n - 2,)),
                       kind=1, ints=(0,))
        ik = ctx.op("cumulative", marks, kind=0, ints=(0,))
    else:
        ik = ctx.const(0, I64, (k,))
    jk = ctx.binary("add", _bin(ctx, "subtract", kk, _row_start(ctx, ik, n)),
                    _bin(ctx, "add", ik, 1))
    return ctx.materialize(ctx.binary("add", _bin(ctx, "multiply", ik, n), jk))


def _row_start(ctx, i, n):
    """k of the pair (i, i + 1): i n - i (i + 1) / 2."""
    t = _bin(ctx, "divide", ctx.binary("multiply", i, _bin(ctx, "add", i, 1)), 2)
    return ctx.binary("subtract", _bin(ctx, "multiply", i, n), t)


@lowering("aten::_pdist_forward")
def pdist_forward(ctx, self, p=2.0):
    _check_dtypes(self)
    if not self.is_contiguous():
        raise RuntimeError("_pdist_forward requires contiguous input")
    if self.dim() == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    n = self.shape[0]
    k = n * (n - 1) // 2
    if n <= 1:
        ctx.output(ctx.const(0, self.dtype, (0,)), strides=(1,))
        return
    if self.dim() == 1:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but got 1)")
    if self.dim() != 2:
        raise NotLowerable("pdist of a tensor with more than 2 dims")
    c = self.shape[1]
    if c == 0:
        ctx.output(ctx.const(0, self.dtype, (k,)), strides=(1,))
        return
    _kernel_dtype("pdist", self.dtype)
    x = ctx.input(self, "self")
    # all n x n distances (a fused reduce over affine loads), then the pairs
    full = (n, n, c)
    a = ctx.broadcast_in_dim(x, full, (0, 2))
    b = ctx.broadcast_in_dim(x, full, (1, 2))
    ad = ctx.unary("abs", ctx.binary("subtract", a, b))
    dist = ctx.reshape(_norm_of(ctx, ad, p, 2, nan_max=True), (n * n,))
    ctx.output(ctx.op("gather", dist, _pair_positions(ctx, n), ints=(0,)), strides=(1,))


def _square(ctx, v, n):
    """The condensed vector v (one value per pair i < j) as a symmetric
    [n, n] matrix (zero diagonal)."""
    i = ctx.iota(I64, (n, n), 0)
    j = ctx.iota(I64, (n, n), 1)
    lo = ctx.binary("minimum", i, j)
    hi = ctx.binary("maximum", i, j)
    kk = _bin(ctx, "subtract", ctx.binary("add", _row_start(ctx, lo, n),
                                          ctx.binary("subtract", hi, lo)), 1)
    off = ctx.compare("ne", i, j)
    kk = ctx.select(off, kk, ctx.const(0, I64, (n, n)))
    g = ctx.reshape(ctx.op("gather", v, ctx.reshape(kk, (n * n,)), ints=(0,)), (n, n))
    return ctx.materialize(ctx.select(off, g, _c(ctx, 0, g)))


@lowering("aten::_pdist_backward")
def pdist_backward(ctx, grad, self, p, pdist):
    _check_dtypes(grad, self, pdist)
    if not self.is_contiguous():
        raise RuntimeError("_pdist_backward requires self to be contiguous")
    if not pdist.is_contiguous():
        raise RuntimeError("_pdist_backward requires pdist to be contiguous")
    _kernel_dtype("pdist_backward", self.dtype)
    _same_dtype(self.dtype, grad, pdist)
    if self.dim() != 2:
        raise NotLowerable("pdist backward of a tensor that is not 2-D")
    n, c = self.shape
    k = n * (n - 1) // 2
    if k == 0 or c == 0:
        ctx.output(ctx.const(0, self.dtype, (n, c)), strides=tuple(self.stride()))
        return
    if tuple(grad.shape) != (k,) or tuple(pdist.shape) != (k,):
        raise NotLowerable("pdist backward with mismatched grad/pdist shapes")
    gv = ctx.input(grad, "grad")
    x = ctx.input(self, "self")
    full = (n, n, c)
    a = ctx.broadcast_in_dim(x, full, (0, 2))
    b = ctx.broadcast_in_dim(x, full, (1, 2))
    g = ctx.broadcast_in_dim(_square(ctx, gv, n), full, (0, 1))
    d = ctx.broadcast_in_dim(_square(ctx, ctx.input(pdist, "pdist"), n), full, (0, 1))
    t = _norm_grad(ctx, ctx.binary("subtract", a, b), g, d, p)
    off = ctx.materialize(ctx.compare("ne", ctx.iota(I64, (n, n), 0), ctx.iota(I64, (n, n), 1)))
    off = ctx.broadcast_in_dim(off, full, (0, 1))
    t = ctx.select(off, t, _c(ctx, 0, t))
    ctx.output(ctx.reduce("sum", t, [1]), strides=(c, 1))

"""Lowering rules: reductions beyond sum, normalization layers, losses,
dropout and embedding.

Everything computes in "opmath" (float32 for bfloat16/float16, int64 for
integer sums and products) and rounds once to the dtype PyTorch returns,
which ``ctx.meta()`` gives, except where PyTorch's CPU kernel rounds on the
way (bfloat16 batch norm's statistics). Statistics are two-pass (mean, then
the sum of squared deviations), reduced with the IR's pairwise/cascade
reduce.
"""
import math

import torch

from .._registry import _overload, composite, lowering, out_variant
from .ctx import V, NotLowerable
from .elementwise import _check_dtypes, broadcast_shapes
from .reduction import _dims, _keep

_INT = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}
_IDX = (torch.int32, torch.int64)

# The IR reduce kinds argmax/argmin return wrong indices on the vTPU (the
# REDUCE kernel has no argmax/argmin combine: see the report and
# tests/python/test_norm.py::test_ir_reduce_argmax). Until the C core is
# fixed, the ops that need them run as counted CPU fallbacks.
_IR_ARGMAX_WORKS = True
_ARG_KIND = {"argmax": 6, "argmin": 7}


# ------------------------------------------------------------- helpers


def _opmath(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return dtype


def _acc(dtype):
    """Accumulation dtype of sum/prod/cumsum with result dtype `dtype`."""
    return torch.int64 if dtype in _INT else _opmath(dtype)


def _no_complex(*dtypes):
    for d in dtypes:
        if d is not None and d.is_complex:
            raise NotLowerable(f"complex dtype {d}")


def _bin(ctx, name, a, b):
    """a <name> b with numpy broadcasting; a Python number becomes a
    constant of the other operand's dtype."""
    if not isinstance(a, V):
        a = ctx.const(a, b.dtype)
    if not isinstance(b, V):
        b = ctx.const(b, a.dtype)
    shape = broadcast_shapes(a.shape, b.shape)
    return ctx.binary(name, ctx.broadcast(a, shape), ctx.broadcast(b, shape))


def _add(ctx, a, b):
    return _bin(ctx, "add", a, b)


def _sub(ctx, a, b):
    return _bin(ctx, "subtract", a, b)


def _mul(ctx, a, b):
    return _bin(ctx, "multiply", a, b)


def _div(ctx, a, b):
    return _bin(ctx, "divide", a, b)


def _cmp(ctx, direction, a, b):
    if not isinstance(b, V):
        b = ctx.const(b, a.dtype)
    shape = broadcast_shapes(a.shape, b.shape)
    return ctx.compare(direction, ctx.broadcast(a, shape), ctx.broadcast(b, shape))


def _where(ctx, p, a, b):
    """select with broadcasting; numbers become constants."""
    ref = a if isinstance(a, V) else b
    if not isinstance(a, V):
        a = ctx.const(a, ref.dtype)
    if not isinstance(b, V):
        b = ctx.const(b, ref.dtype)
    shape = broadcast_shapes(p.shape, a.shape, b.shape)
    return ctx.select(ctx.broadcast(p, shape), ctx.broadcast(a, shape), ctx.broadcast(b, shape))


def _numel(shape, dims=None):
    n = 1
    for i, s in enumerate(shape):
        if dims is None or i in dims:
            n *= s
    return n


def _back(ctx, r, shape, dims):
    """r, the reduction of a value of `shape` over dims, broadcast back."""
    kept = [i for i in range(len(shape)) if i not in dims]
    return ctx.broadcast_in_dim(r, tuple(shape), kept)


def _mean(ctx, v, dims):
    """Sum over dims divided by the count (a float v; 0/0 gives NaN)."""
    return _div(ctx, ctx.reduce("sum", v, dims), float(_numel(v.shape, dims)))


def _emit_as(ctx, v, like):
    """Outputs v reshaped to like's shape (same element count)."""
    v = ctx.convert(v, like.dtype)
    if v.shape != tuple(like.shape):
        if _numel(v.shape) == like.numel():
            v = ctx.reshape(v, tuple(like.shape))
        else:
            v = ctx.broadcast(v, tuple(like.shape))
    ctx.output(v, like=like)


def _stat_dtype(input, *params):
    """dtype of the mean/rstd the CPU kernels save: the input's, or its
    opmath type when the parameters have another dtype (mixed precision:
    bfloat16 input, float32 weight). The meta kernels differ here."""
    given = {p.dtype for p in params if p is not None}
    if len(given) > 1:
        raise NotLowerable("normalization parameters of different dtypes")
    if given and given.pop() != input.dtype:
        return _opmath(input.dtype)
    return input.dtype


def _emit_stat(ctx, v, like, dtype):
    """A saved statistic: like's shape, the CPU kernels' dtype."""
    v = ctx.convert(v, dtype)
    if v.shape != tuple(like.shape):
        v = ctx.reshape(v, tuple(like.shape))
    ctx.output(v, strides=tuple(like.stride()))


def _emit_maybe(ctx, compute, like, wanted=True, dtype=None):
    """A result PyTorch may return undefined (None): not wanted by the
    output_mask, or undefined in the meta result. dtype: the CPU kernel's
    result dtype where the meta kernel's differs."""
    if like is None or not wanted:
        ctx.result_none()
    elif dtype is not None:
        _emit_stat(ctx, compute(), like, dtype)
    else:
        _emit_as(ctx, compute(), like)


def _update(ctx, v, t, name):
    """Writes v into tensor argument t (running statistics) without making
    it one of the op's results."""
    n = len(ctx.results)
    ctx.output_into(v, t, name)
    del ctx.results[n:]


def _reduction(r):
    """The loss reduction enum: 0 none, 1 mean, 2 sum (a static int)."""
    if r not in (0, 1, 2):
        raise NotLowerable(f"reduction={r}")
    return r


def _round(ctx, v, dtype):
    """v rounded to dtype and back: the rounding at the end of an aten op
    that a composite kernel's next op reads."""
    return ctx.convert(ctx.convert(v, dtype), v.dtype) if dtype != v.dtype else v


def _reduce_loss(ctx, loss, reduction, dtype):
    """The loss reduction; the CPU kernels store the elementwise loss (in
    the result dtype) and reduce it with mean/sum."""
    if reduction == 0:
        return loss
    loss = _round(ctx, loss, dtype)
    s = ctx.reduce("sum", loss, range(loss.rank))
    if reduction == 1:
        s = _div(ctx, s, float(_numel(loss.shape)))
    return s


# ------------------------------------------------------------- mean / var


@lowering("aten::mean", "aten::mean.dim")
def mean(ctx, self, dim=None, keepdim=False, *, dtype=None):
    _check_dtypes(self)
    m = ctx.meta()
    _no_complex(m.dtype, self.dtype)
    dims = _dims(self, dim)
    acc = _acc(m.dtype)
    x = ctx.convert(ctx.input(self, "self"), acc)
    r = _mean(ctx, x, dims)
    ctx.output(_keep(ctx, r, self, dims, keepdim), like=m)


def _var_common(ctx, self, dim, correction, keepdim):
    _check_dtypes(self)
    m = ctx.meta()
    _no_complex(self.dtype)
    if not self.dtype.is_floating_point:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = _dims(self, dim)
    x = ctx.convert(ctx.input(self, "self"), _opmath(self.dtype))
    n = _numel(self.shape, dims)
    mu = _mean(ctx, x, dims)
    d = _sub(ctx, x, _back(ctx, mu, x.shape, dims))
    m2 = ctx.reduce("sum", _mul(ctx, d, d), dims)
    c = 1 if correction is None else correction
    var = _div(ctx, m2, float(max(0, n - c)))
    return m, dims, _keep(ctx, var, self, dims, keepdim), _keep(ctx, mu, self, dims, keepdim)


@lowering("aten::var.correction")
def var(ctx, self, dim=None, *, correction=None, keepdim=False):
    m, _, v, _ = _var_common(ctx, self, dim, correction, keepdim)
    ctx.output(v, like=m)


@lowering("aten::std.correction")
def std(ctx, self, dim=None, *, correction=None, keepdim=False):
    m, _, v, _ = _var_common(ctx, self, dim, correction, keepdim)
    ctx.output(ctx.unary("sqrt", v), like=m)


@lowering("aten::var_mean.correction")
def var_mean(ctx, self, dim=None, *, correction=None, keepdim=False):
    m, _, v, mu = _var_common(ctx, self, dim, correction, keepdim)
    ctx.output(v, like=m[0])
    ctx.output(mu, like=m[1])


@lowering("aten::std_mean.correction")
def std_mean(ctx, self, dim=None, *, correction=None, keepdim=False):
    m, _, v, mu = _var_common(ctx, self, dim, correction, keepdim)
    ctx.output(ctx.unary("sqrt", v), like=m[0])
    ctx.output(mu, like=m[1])


# ------------------------------------------------------------- prod / max / min


@lowering("aten::prod", "aten::prod.dim_int")
def prod(ctx, self, dim=None, keepdim=False, *, dtype=None):
    _check_dtypes(self)
    m = ctx.meta()
    _no_complex(m.dtype, self.dtype)
    dims = _dims(self, dim)
    x = ctx.convert(ctx.input(self, "self"), _acc(m.dtype))
    r = ctx.reduce("prod", x, dims)
    ctx.output(_keep(ctx, r, self, dims, keepdim), like=m)


def _extremum(ctx, kind, self, dims, keepdim):
    x = ctx.input(self, "self")
    if self.dtype == torch.bool:
        # max/min of bools is or/and
        r = ctx.reduce("or" if kind == "max" else "and", x, dims)
    else:
        r = ctx.reduce(kind, x, dims)
    return _keep(ctx, r, self, dims, keepdim)


@lowering("aten::amax")
def amax(ctx, self, dim=(), keepdim=False):
    _check_dtypes(self)
    _no_complex(self.dtype)
    m = ctx.meta()
    ctx.output(_extremum(ctx, "max", self, _dims(self, dim), keepdim), like=m)


@lowering("aten::amin")
def amin(ctx, self, dim=(), keepdim=False):
    _check_dtypes(self)
    _no_complex(self.dtype)
    m = ctx.meta()
    ctx.output(_extremum(ctx, "min", self, _dims(self, dim), keepdim), like=m)


def _full_extremum(ctx, kind, self):
    _check_dtypes(self)
    _no_complex(self.dtype)
    m = ctx.meta()
    if self.numel() == 0:
        raise RuntimeError(
            f"{kind}(): Expected reduction dim to be specified for input.numel() == 0. "
            "Specify the reduction dim with the 'dim' argument.")
    ctx.output(_extremum(ctx, kind, self, list(range(self.dim())), False), like=m)


@lowering("aten::max")
def max_(ctx, self):
    _full_extremum(ctx, "max", self)


@lowering("aten::min")
def min_(ctx, self):
    _full_extremum(ctx, "min", self)


def _arg_reduce(ctx, kind, x, dim):
    """s64 index of the first max/min along dim (NaN counts as extreme)."""
    if not _IR_ARGMAX_WORKS:
        raise NotLowerable(f"IR reduce {kind} gives wrong indices on the vTPU (C core bug)")
    return ctx.op("reduce", x, kind=_ARG_KIND[kind], ints=(dim,))


def _arg_input(ctx, self):
    x = ctx.input(self, "self")
    if self.dtype == torch.bool:
        x = ctx.convert(x, torch.int32)
    return x


def _max_dim(ctx, kind, self, dim, keepdim):
    _check_dtypes(self)
    _no_complex(self.dtype)
    m = ctx.meta()
    d = dim % max(self.dim(), 1)
    dims = [d] if self.dim() > 0 else []
    x = _arg_input(ctx, self)
    if self.dim() == 0:
        idx = ctx.const(0, torch.int64)
    else:
        idx = _arg_reduce(ctx, "argmax" if kind == "max" else "argmin", x, d)
    vals = _extremum(ctx, kind, self, dims, keepdim)
    ctx.output(vals, like=m[0])
    ctx.output(_keep(ctx, idx, self, dims, keepdim), like=m[1])


@lowering("aten::max.dim")
def max_dim(ctx, self, dim, keepdim=False):
    _max_dim(ctx, "max", self, dim, keepdim)


@lowering("aten::min.dim")
def min_dim(ctx, self, dim, keepdim=False):
    _max_dim(ctx, "min", self, dim, keepdim)


def _argmax(ctx, kind, self, dim, keepdim):
    _check_dtypes(self)
    _no_complex(self.dtype)
    m = ctx.meta()
    x = _arg_input(ctx, self)
    if self.dim() == 0:
        idx = ctx.const(0, torch.int64)
    elif dim is None:
        flat = ctx.reshape(x, (self.numel(),))
        idx = _arg_reduce(ctx, kind, flat, 0)
    else:
        d = dim % self.dim()
        idx = _keep(ctx, _arg_reduce(ctx, kind, x, d), self, [d], keepdim)
    ctx.output(idx, like=m)


@lowering("aten::argmax")
def argmax(ctx, self, dim=None, keepdim=False):
    _argmax(ctx, "argmax", self, dim, keepdim)


@lowering("aten::argmin")
def argmin(ctx, self, dim=None, keepdim=False):
    _argmax(ctx, "argmin", self, dim, keepdim)


# ------------------------------------------------------------- any / all


def _any_all(ctx, kind, self, dim, keepdim):
    _check_dtypes(self)
    _no_complex(self.dtype)
    m = ctx.meta()
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dims = []          # any.dims(dim=[]) reduces nothing
    else:
        dims = _dims(self, dim)
    x = ctx.input(self, "self")
    if self.dtype != torch.bool:
        x = _cmp(ctx, "ne", x, 0)          # NaN counts as true
    r = ctx.reduce(kind, x, dims)
    ctx.output(_keep(ctx, r, self, dims, keepdim), like=m)


@lowering("aten::any", "aten::any.dim", "aten::any.dims")
def any_(ctx, self, dim=None, keepdim=False):
    _any_all(ctx, "or", self, dim, keepdim)


@lowering("aten::all", "aten::all.dim", "aten::all.dims")
def all_(ctx, self, dim=None, keepdim=False):
    _any_all(ctx, "and", self, dim, keepdim)


# ------------------------------------------------------------- logsumexp / norms


@lowering("aten::logsumexp")
def logsumexp(ctx, self, dim, keepdim=False):
    _check_dtypes(self)
    _no_complex(self.dtype)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        raise NotLowerable("logsumexp over dim=[]")   # CPU and meta disagree on the shape
    m = ctx.meta()
    dims = _dims(self, dim)
    x = ctx.convert(ctx.input(self, "self"), _opmath(m.dtype))
    mx = ctx.reduce("max", x, dims)
    # an infinite maximum is replaced by 0 (so that all -inf gives -inf)
    mx = _where(ctx, _cmp(ctx, "eq", ctx.unary("abs", mx), math.inf), 0.0, mx)
    e = ctx.unary("exponential", _sub(ctx, x, _back(ctx, mx, x.shape, dims)))
    r = _add(ctx, ctx.unary("log", ctx.reduce("sum", e, dims)), mx)
    ctx.output(_keep(ctx, r, self, dims, keepdim), like=m)


def _vector_norm(ctx, self, ord, dims, keepdim, m):
    _no_complex(self.dtype, m.dtype)
    x = ctx.convert(ctx.input(self, "self"), _opmath(m.dtype))
    ord = float(ord)
    if ord == 0:
        r = ctx.reduce("sum", ctx.convert(_cmp(ctx, "ne", x, 0), x.dtype), dims)
    elif ord == math.inf or ord == -math.inf:
        a = ctx.unary("abs", x)
        r = ctx.reduce("max" if ord > 0 else "min", a, dims)
    elif ord == 1:
        r = ctx.reduce("sum", ctx.unary("abs", x), dims)
    elif ord == 2:
        r = ctx.unary("sqrt", ctx.reduce("sum", _mul(ctx, x, x), dims))
    else:
        a = ctx.unary("abs", x)
        s = ctx.reduce("sum", _bin(ctx, "power", a, ord), dims)
        r = _bin(ctx, "power", s, 1.0 / ord)
    return _keep(ctx, r, self, dims, keepdim)


@lowering("aten::linalg_vector_norm")
def linalg_vector_norm(ctx, self, ord=2, dim=None, keepdim=False, *, dtype=None):
    _check_dtypes(self)
    m = ctx.meta()
    ctx.output(_vector_norm(ctx, self, ord, _dims(self, dim), keepdim, m), like=m)


@lowering("aten::norm.ScalarOpt_dim", "aten::norm.ScalarOpt_dim_dtype", "aten::norm.Scalar",
          "aten::norm.ScalarOpt_dtype")
def norm(ctx, self, p=2, dim=None, keepdim=False, *, dtype=None):
    _check_dtypes(self)
    m = ctx.meta()
    if not self.dtype.is_floating_point:
        raise NotLowerable(f"norm of {self.dtype}")
    ctx.output(_vector_norm(ctx, self, 2 if p is None else p, _dims(self, dim), keepdim, m),
               like=m)


# ------------------------------------------------------------- scans


def _scan(ctx, kind, self, dim, dtype, into=None):
    _check_dtypes(self)
    m = ctx.meta()
    target = into if into is not None else m
    _no_complex(self.dtype, target.dtype)
    x = ctx.convert(ctx.input(self, "self"), _acc(dtype or target.dtype))
    d = dim % max(self.dim(), 1)
    r = ctx.op("cumulative", x, kind=kind, ints=(d,))
    if into is not None:
        ctx.output_into(r, into, "self")
    else:
        ctx.output(r, like=m)


@lowering("aten::cumsum")
def cumsum(ctx, self, dim, *, dtype=None):
    _scan(ctx, 0, self, dim, dtype)


@lowering("aten::cumsum_")
def cumsum_(ctx, self, dim, *, dtype=None):
    _scan(ctx, 0, self, dim, dtype, into=self)


@lowering("aten::cumprod")
def cumprod(ctx, self, dim, *, dtype=None):
    _scan(ctx, 1, self, dim, dtype)


@lowering("aten::cumprod_")
def cumprod_(ctx, self, dim, *, dtype=None):
    _scan(ctx, 1, self, dim, dtype, into=self)


# ------------------------------------------------------------- log_softmax


@lowering("aten::_log_softmax")
def log_softmax(ctx, self, dim, half_to_float):
    _check_dtypes(self)
    m = ctx.meta()
    if not self.dtype.is_floating_point:
        raise NotLowerable("log_softmax of integers")
    x = ctx.convert(ctx.input(self, "self"), _opmath(m.dtype))
    dims = [dim % self.dim()] if self.dim() else []
    mx = _back(ctx, ctx.reduce("max", x, dims), x.shape, dims)
    z = _sub(ctx, x, mx)
    lse = ctx.unary("log", ctx.reduce("sum", ctx.unary("exponential", z), dims))
    ctx.output(_sub(ctx, z, _back(ctx, lse, x.shape, dims)), like=m)


@lowering("aten::_log_softmax_backward_data")
def log_softmax_backward(ctx, grad_output, output, dim, input_dtype):
    _check_dtypes(grad_output, output)
    m = ctx.meta()
    acc = _opmath(m.dtype)
    g = ctx.convert(ctx.input(grad_output, "grad_output"), acc)
    y = ctx.convert(ctx.input(output, "output"), acc)
    dims = [dim % output.dim()] if output.dim() else []
    s = _back(ctx, ctx.reduce("sum", g, dims), g.shape, dims)
    ctx.output(_sub(ctx, g, _mul(ctx, ctx.unary("exponential", y), s)), like=m)


# ------------------------------------------------------------- nll_loss


def _nll_parts(ctx, self, target, weight, ignore_index, acc):
    """(class dim, safe target with the class dim inserted as size 1,
    per-element weight with ignored targets at 0)."""
    if target.dtype != torch.int64:
        raise NotLowerable(f"nll_loss target of {target.dtype}")   # CPU: Long or Byte only
    cd = 1 if self.dim() >= 2 else 0
    t = ctx.input(target, "target")
    valid = _cmp(ctx, "ne", t, ignore_index)
    ts = _where(ctx, valid, t, 0)
    idx_shape = list(target.shape)
    idx_shape.insert(cd, 1)
    ts_idx = ctx.reshape(ts, tuple(idx_shape))
    if weight is not None:
        w = ctx.convert(ctx.input(weight, "weight"), acc)
        n = target.numel()
        wt = ctx.op("gather", w, ctx.reshape(ts, (n,)), ints=(0,))
        wt = ctx.reshape(wt, tuple(target.shape))
        wt = _where(ctx, valid, wt, 0.0)
    else:
        wt = ctx.convert(valid, acc)
    return cd, valid, ts_idx, wt


def _nll_forward(ctx, self, target, weight, reduction, ignore_index):
    _check_dtypes(self, target, weight)
    _no_complex(self.dtype)
    m = ctx.meta()
    reduction = _reduction(reduction)
    acc = _opmath(self.dtype)
    x = ctx.convert(ctx.input(self, "self"), acc)
    cd, valid, ts_idx, wt = _nll_parts(ctx, self, target, weight, ignore_index, acc)
    picked = ctx.reshape(ctx.op("gather", x, ts_idx, ints=(cd,)), tuple(target.shape))
    loss = _where(ctx, valid, ctx.unary("negate", _mul(ctx, picked, wt)), 0.0)
    alldims = range(loss.rank)
    if reduction == 0:
        out, total = loss, ctx.const(0.0, acc)
    else:
        out = ctx.reduce("sum", loss, alldims)
        total = ctx.reduce("sum", wt, alldims)
        if reduction == 1:
            out = _div(ctx, out, total)
    ctx.output(out, like=m[0])
    ctx.output(total, like=m[1])


@lowering("aten::nll_loss_forward")
def nll_loss_forward(ctx, self, target, weight, reduction, ignore_index):
    _nll_forward(ctx, self, target, weight, reduction, ignore_index)


@lowering("aten::nll_loss2d_forward")
def nll_loss2d_forward(ctx, self, target, weight, reduction, ignore_index):
    _nll_forward(ctx, self, target, weight, reduction, ignore_index)


def _nll_backward(ctx, grad_output, self, target, weight, reduction, ignore_index, total_weight):
    _check_dtypes(grad_output, self, target, weight, total_weight)
    _no_complex(self.dtype)
    m = ctx.meta()
    reduction = _reduction(reduction)
    acc = _opmath(self.dtype)
    cd, valid, ts_idx, wt = _nll_parts(ctx, self, target, weight, ignore_index, acc)
    g = ctx.convert(ctx.input(grad_output, "grad_output"), acc)
    if reduction == 1:
        g = _div(ctx, g, ctx.convert(ctx.input(total_weight, "total_weight"), acc))
    coef = _where(ctx, valid, ctx.unary("negate", _mul(ctx, wt, g)), 0.0)
    shape = tuple(self.shape)
    coef = ctx.broadcast(ctx.reshape(coef, tuple(ts_idx.shape)), shape)
    hot = _cmp(ctx, "eq", ctx.iota(torch.int64, shape, cd), ctx.broadcast(ts_idx, shape))
    ctx.output(_where(ctx, hot, coef, 0.0), like=m)


@lowering("aten::nll_loss_backward")
def nll_loss_backward(ctx, grad_output, self, target, weight, reduction, ignore_index,
                      total_weight):
    _nll_backward(ctx, grad_output, self, target, weight, reduction, ignore_index, total_weight)


@lowering("aten::nll_loss2d_backward")
def nll_loss2d_backward(ctx, grad_output, self, target, weight, reduction, ignore_index,
                        total_weight):
    _nll_backward(ctx, grad_output, self, target, weight, reduction, ignore_index, total_weight)


# ------------------------------------------------------------- regression losses


def _pair(ctx, self, target, m):
    """self and target in the computation dtype, broadcast together."""
    _check_dtypes(self, target)
    _no_complex(self.dtype, target.dtype)
    acc = _opmath(m.dtype)
    shape = broadcast_shapes(self.shape, target.shape)
    x = ctx.broadcast(ctx.convert(ctx.input(self, "self"), acc), shape)
    y = ctx.broadcast(ctx.convert(ctx.input(target, "target"), acc), shape)
    return x, y


def _loss_backward(ctx, grad_output, self, target, reduction, fn):
    m = ctx.meta()
    reduction = _reduction(reduction)
    x, y = _pair(ctx, self, target, m)
    g = ctx.convert(ctx.input(grad_output, "grad_output"), x.dtype)
    if reduction == 1:
        g = _div(ctx, g, float(self.numel()))       # the kernels divide by input.numel()
    r = fn(_sub(ctx, x, y), ctx.broadcast(g, x.shape))
    ctx.output(r, like=m)


@lowering("aten::mse_loss")
def mse_loss(ctx, self, target, reduction=1):
    m = ctx.meta()
    x, y = _pair(ctx, self, target, m)
    d = _sub(ctx, x, y)
    ctx.output(_reduce_loss(ctx, _mul(ctx, d, d), _reduction(reduction), m.dtype), like=m)


@lowering("aten::mse_loss_backward")
def mse_loss_backward(ctx, grad_output, self, target, reduction):
    _loss_backward(ctx, grad_output, self, target, reduction,
                   lambda d, g: _mul(ctx, _mul(ctx, d, 2.0), g))


def _smooth_l1(ctx, d, beta):
    z = ctx.unary("abs", d)
    quad = _div(ctx, _mul(ctx, _mul(ctx, z, z), 0.5), beta)
    return _where(ctx, _cmp(ctx, "lt", z, beta), quad, _sub(ctx, z, 0.5 * beta))


@lowering("aten::smooth_l1_loss")
def smooth_l1_loss(ctx, self, target, reduction=1, beta=1.0):
    m = ctx.meta()
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, y = _pair(ctx, self, target, m)
    loss = _smooth_l1(ctx, _sub(ctx, x, y), beta)
    ctx.output(_reduce_loss(ctx, loss, _reduction(reduction), m.dtype), like=m)


def _piecewise(ctx, d, g, bound, outer, inner):
    """d <= -bound ? -outer : d >= bound ? outer : inner (PyTorch's order)."""
    return _where(ctx, _cmp(ctx, "le", d, -bound), ctx.unary("negate", outer),
                  _where(ctx, _cmp(ctx, "ge", d, bound), outer, inner))


@lowering("aten::smooth_l1_loss_backward")
def smooth_l1_loss_backward(ctx, grad_output, self, target, reduction, beta):
    def fn(d, g):
        return _piecewise(ctx, d, g, beta, g, _div(ctx, _mul(ctx, d, g), beta))

    _loss_backward(ctx, grad_output, self, target, reduction, fn)


@lowering("aten::huber_loss")
def huber_loss(ctx, self, target, reduction=1, delta=1.0):
    m = ctx.meta()
    x, y = _pair(ctx, self, target, m)
    z = ctx.unary("abs", _sub(ctx, x, y))
    loss = _where(ctx, _cmp(ctx, "lt", z, delta), _mul(ctx, _mul(ctx, z, z), 0.5),
                  _mul(ctx, _sub(ctx, z, 0.5 * delta), delta))
    ctx.output(_reduce_loss(ctx, loss, _reduction(reduction), m.dtype), like=m)


@lowering("aten::huber_loss_backward")
def huber_loss_backward(ctx, grad_output, self, target, reduction, delta):
    def fn(d, g):
        return _piecewise(ctx, d, g, delta, _mul(ctx, g, delta), _mul(ctx, d, g))

    _loss_backward(ctx, grad_output, self, target, reduction, fn)


# ------------------------------------------------------------- binary cross entropy


def _weight(ctx, weight, shape, acc, name="weight"):
    if weight is None:
        return None
    _check_dtypes(weight)
    return ctx.broadcast(ctx.convert(ctx.input(weight, name), acc), shape)


@lowering("aten::binary_cross_entropy")
def binary_cross_entropy(ctx, self, target, weight=None, reduction=1):
    m = ctx.meta()
    x, y = _pair(ctx, self, target, m)
    log_x = _bin(ctx, "maximum", ctx.unary("log", x), -100.0)
    log_1mx = _bin(ctx, "maximum", ctx.unary("log_plus_one", ctx.unary("negate", x)), -100.0)
    loss = _sub(ctx, _mul(ctx, _sub(ctx, y, 1.0), log_1mx), _mul(ctx, y, log_x))
    w = _weight(ctx, weight, loss.shape, loss.dtype)
    if w is not None:
        loss = _mul(ctx, loss, w)
    ctx.output(_reduce_loss(ctx, loss, _reduction(reduction), m.dtype), like=m)


@lowering("aten::binary_cross_entropy_backward")
def binary_cross_entropy_backward(ctx, grad_output, self, target, weight=None, reduction=1):
    def fn(d, g):
        x = ctx.convert(ctx.input(self, "self"), d.dtype)
        x = ctx.broadcast(x, d.shape)
        den = _bin(ctx, "maximum", _mul(ctx, _sub(ctx, 1.0, x), x), 1e-12)
        r = _div(ctx, _mul(ctx, g, d), den)
        w = _weight(ctx, weight, r.shape, r.dtype)
        return _mul(ctx, r, w) if w is not None else r

    _loss_backward(ctx, grad_output, self, target, reduction, fn)


@lowering("aten::binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(ctx, self, target, weight=None, pos_weight=None,
                                     reduction=1):
    """PyTorch's composite: loss = (1 - t) * x - log_sigmoid(x) * log_weight,
    each of its aten ops rounding to the result dtype."""
    m = ctx.meta()
    x, y = _pair(ctx, self, target, m)
    acc = x.dtype

    def r(v):
        return _round(ctx, v, m.dtype)

    # log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))
    ls = r(_sub(ctx, _bin(ctx, "minimum", x, 0.0),
                ctx.unary("log_plus_one", ctx.unary("exponential",
                                                    ctx.unary("negate", ctx.unary("abs", x))))))
    if pos_weight is not None:
        pw = ctx.convert(ctx.input(pos_weight, "pos_weight"), acc)
        log_weight = r(_add(ctx, r(_mul(ctx, r(_sub(ctx, pw, 1.0)), y)), 1.0))
        ls = r(_mul(ctx, ls, log_weight))
    loss = r(_sub(ctx, r(_mul(ctx, r(_sub(ctx, 1.0, y)), x)), ls))
    if weight is not None:
        loss = r(_mul(ctx, loss, ctx.convert(ctx.input(weight, "weight"), acc)))
    ctx.output(_reduce_loss(ctx, loss, _reduction(reduction), m.dtype), like=m)


# ------------------------------------------------------------- layer norm


def _affine_param(ctx, t, name, shape, dims, acc):
    """A per-feature parameter broadcast into `shape` along `dims`."""
    if t is None:
        return None
    _check_dtypes(t)
    v = ctx.convert(ctx.input(t, name), acc)
    if v.rank != len(dims):
        v = ctx.reshape(v, tuple(shape[d] for d in dims))
    return ctx.broadcast_in_dim(v, tuple(shape), dims)


@lowering("aten::native_layer_norm", runtime=("eps",))
def native_layer_norm(ctx, input, normalized_shape, weight, bias, eps):
    _check_dtypes(input, weight, bias)
    _no_complex(input.dtype)
    m = ctx.meta()
    acc = _opmath(input.dtype)
    x = ctx.convert(ctx.input(input, "input"), acc)
    shape = tuple(input.shape)
    axis = input.dim() - len(normalized_shape)
    dims = list(range(axis, input.dim()))
    mu = _mean(ctx, x, dims)
    d = _sub(ctx, x, _back(ctx, mu, shape, dims))
    var = _mean(ctx, _mul(ctx, d, d), dims)
    rstd = ctx.unary("rsqrt", _add(ctx, var, ctx.operand(eps, acc, None, "eps")))
    y = _mul(ctx, d, _back(ctx, rstd, shape, dims))
    w = _affine_param(ctx, weight, "weight", shape, dims, acc)
    b = _affine_param(ctx, bias, "bias", shape, dims, acc)
    if w is not None:
        y = _mul(ctx, y, w)
    if b is not None:
        y = _add(ctx, y, b)
    ctx.output(y, like=m[0])
    sdt = _stat_dtype(input, weight, bias)
    _emit_stat(ctx, mu, m[1], sdt)
    _emit_stat(ctx, rstd, m[2], sdt)


@lowering("aten::native_layer_norm_backward")
def native_layer_norm_backward(ctx, grad_out, input, normalized_shape, mean, rstd, weight,
                               bias, output_mask):
    _check_dtypes(grad_out, input, mean, rstd, weight, bias)
    _no_complex(input.dtype)
    m = ctx.meta()
    acc = _opmath(input.dtype)
    shape = tuple(input.shape)
    axis = input.dim() - len(normalized_shape)
    dims = list(range(axis, input.dim()))
    outer = list(range(axis))
    x = ctx.convert(ctx.input(input, "input"), acc)
    dy = ctx.convert(ctx.input(grad_out, "grad_out"), acc)

    def stat(t, name):
        v = ctx.convert(ctx.input(t, name), acc)
        v = ctx.reshape(v, shape[:axis])
        return _back(ctx, v, shape, dims)

    mu, rs = stat(mean, "mean"), stat(rstd, "rstd")
    xhat = _mul(ctx, _sub(ctx, x, mu), rs)

    def grad_input():
        w = _affine_param(ctx, weight, "weight", shape, dims, acc)
        g = _mul(ctx, dy, w) if w is not None else dy
        mg = _back(ctx, _mean(ctx, g, dims), shape, dims)
        mgx = _back(ctx, _mean(ctx, _mul(ctx, g, xhat), dims), shape, dims)
        return _mul(ctx, rs, _sub(ctx, _sub(ctx, g, mg), _mul(ctx, xhat, mgx)))

    _emit_maybe(ctx, grad_input, m[0], output_mask[0])
    _emit_maybe(ctx, lambda: ctx.reduce("sum", _mul(ctx, dy, xhat), outer), m[1], output_mask[1])
    _emit_maybe(ctx, lambda: ctx.reduce("sum", dy, outer), m[2], output_mask[2])


# ------------------------------------------------------------- group norm


@lowering("aten::native_group_norm", runtime=("eps",))
def native_group_norm(ctx, input, weight, bias, N, C, HxW, group, eps):
    _check_dtypes(input, weight, bias)
    _no_complex(input.dtype)
    m = ctx.meta()
    acc = _opmath(input.dtype)
    shape = (N, group, C // group, HxW)
    x = ctx.reshape(ctx.convert(ctx.input(input, "input"), acc), shape)
    dims = [2, 3]
    mu = _mean(ctx, x, dims)
    d = _sub(ctx, x, _back(ctx, mu, shape, dims))
    var = _mean(ctx, _mul(ctx, d, d), dims)
    rstd = ctx.unary("rsqrt", _add(ctx, var, ctx.operand(eps, acc, None, "eps")))
    y = _mul(ctx, d, _back(ctx, rstd, shape, dims))
    w = _affine_param(ctx, weight, "weight", shape, [1, 2], acc)
    b = _affine_param(ctx, bias, "bias", shape, [1, 2], acc)
    if w is not None:
        y = _mul(ctx, y, w)
    if b is not None:
        y = _add(ctx, y, b)
    _emit_as(ctx, y, m[0])
    sdt = _stat_dtype(input, weight, bias)
    _emit_stat(ctx, mu, m[1], sdt)
    _emit_stat(ctx, rstd, m[2], sdt)


@lowering("aten::native_group_norm_backward")
def native_group_norm_backward(ctx, grad_out, input, mean, rstd, weight, N, C, HxW, group,
                               output_mask):
    _check_dtypes(grad_out, input, mean, rstd, weight)
    _no_complex(input.dtype)
    m = ctx.meta()
    acc = _opmath(input.dtype)
    shape = (N, group, C // group, HxW)
    dims = [2, 3]
    x = ctx.reshape(ctx.convert(ctx.input(input, "input"), acc), shape)
    dy = ctx.reshape(ctx.convert(ctx.input(grad_out, "grad_out"), acc), shape)
    mu = _back(ctx, ctx.convert(ctx.input(mean, "mean"), acc), shape, dims)
    rs = _back(ctx, ctx.convert(ctx.input(rstd, "rstd"), acc), shape, dims)
    xhat = _mul(ctx, _sub(ctx, x, mu), rs)

    def grad_input():
        w = _affine_param(ctx, weight, "weight", shape, [1, 2], acc)
        g = _mul(ctx, dy, w) if w is not None else dy
        mg = _back(ctx, _mean(ctx, g, dims), shape, dims)
        mgx = _back(ctx, _mean(ctx, _mul(ctx, g, xhat), dims), shape, dims)
        return _mul(ctx, rs, _sub(ctx, _sub(ctx, g, mg), _mul(ctx, xhat, mgx)))

    _emit_maybe(ctx, grad_input, m[0], output_mask[0], input.dtype)
    _emit_maybe(ctx, lambda: ctx.reduce("sum", _mul(ctx, dy, xhat), [0, 3]), m[1], output_mask[1])
    _emit_maybe(ctx, lambda: ctx.reduce("sum", dy, [0, 3]), m[2], output_mask[2])


# ------------------------------------------------------------- batch norm


def _cpu_contiguous(t):
    """Normalization.cpp's is_contiguous: contiguous or channels-last."""
    return t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(
        memory_format=torch.channels_last)) or (t.dim() == 5 and t.is_contiguous(
            memory_format=torch.channels_last_3d))


def _batch_norm(ctx, input, weight, bias, running_mean, running_var, training, m):
    """Emits (output, save_mean, save_invstd) and, when training with
    running statistics, updates them in place.

    bfloat16 with bfloat16 parameters rounds where PyTorch's CPU kernels do.
    Contiguous (or channels-last) input: the mean and the sum of squared
    deviations are kept in bfloat16, the sum divided by n (n - 1) in
    bfloat16, and the running statistics updated in bfloat16. Other
    layouts: the mean is rounded before the deviations are taken, and the
    output is formed op by op in bfloat16 ((x - mean) * invstd * w + b)."""
    _check_dtypes(input, weight, bias, running_mean, running_var)
    _no_complex(input.dtype)
    acc = _opmath(input.dtype)
    shape = tuple(input.shape)
    if input.dim() < 2:
        raise NotLowerable(f"batch_norm of a {input.dim()}-d input")
    dims = [0] + list(range(2, input.dim()))
    sdt = _stat_dtype(input, weight, bias, running_mean, running_var)
    bf16 = sdt == torch.bfloat16
    contig = _cpu_contiguous(input)
    x = ctx.convert(ctx.input(input, "input"), acc)
    eps = ctx.scalar("eps", acc)
    if training:
        n = _numel(shape, dims)
        mu = _mean(ctx, x, dims)
        if bf16 and not contig:
            mu = _round(ctx, mu, sdt)
        d = _sub(ctx, x, _back(ctx, mu, shape, dims))
        m2 = ctx.reduce("sum", _mul(ctx, d, d), dims)
        if bf16 and contig:
            mu = _round(ctx, mu, sdt)
            m2 = ctx.convert(m2, sdt)
            var = ctx.convert(_div(ctx, m2, ctx.const(n, sdt)), acc)
            unbiased = ctx.convert(_div(ctx, m2, ctx.const(n - 1, sdt)), acc)
        else:
            var = _div(ctx, m2, float(n))
            unbiased = _div(ctx, m2, float(n - 1))
        invstd = _div(ctx, 1.0, ctx.unary("sqrt", _add(ctx, var, eps)))
        # running = momentum * batch statistic + (1 - momentum) * running,
        # with the unbiased variance
        for t, name, stat in ((running_mean, "running_mean", mu),
                              (running_var, "running_var", unbiased)):
            if t is not None:
                mom = ctx.scalar("momentum", acc)
                old = ctx.convert(ctx.input(t, name), acc)
                if bf16 and contig:
                    # momentum and 1 - momentum in bf16; old * (1 - m)
                    # rounded, plus mean * m rounded, or plus var * m
                    keep = _round(ctx, _mul(ctx, old, _round(ctx, _sub(ctx, 1.0, mom), sdt)),
                                  sdt)
                    add = _mul(ctx, stat, _round(ctx, mom, sdt))
                    if name == "running_mean":
                        add = _round(ctx, add, sdt)
                    new = _add(ctx, keep, add)
                else:
                    new = _add(ctx, _mul(ctx, stat, mom), _mul(ctx, old, _sub(ctx, 1.0, mom)))
                _update(ctx, new, t, name)
        if sdt != acc:
            # the CPU kernels normalize with the saved statistics, rounded
            mu, invstd = _round(ctx, mu, sdt), _round(ctx, invstd, sdt)
    else:
        if running_mean is None or running_var is None:
            raise NotLowerable("eval-mode batch_norm without running statistics")
        mu = ctx.convert(ctx.input(running_mean, "running_mean"), acc)
        rv = ctx.convert(ctx.input(running_var, "running_var"), acc)
        if bf16 and not contig:
            # 1 / sqrt(running_var + eps) as bf16 tensor ops
            r = _round(ctx, _add(ctx, rv, ctx.convert(ctx.scalar("eps", sdt), acc)), sdt)
            r = _round(ctx, ctx.unary("sqrt", r), sdt)
            invstd = _round(ctx, _div(ctx, 1.0, r), sdt)
        else:
            invstd = _div(ctx, 1.0, ctx.unary("sqrt", _add(ctx, rv, eps)))
    w = _affine_param(ctx, weight, "weight", shape, [1], acc)
    b = _affine_param(ctx, bias, "bias", shape, [1], acc)
    step = (lambda v: _round(ctx, v, sdt)) if bf16 and not contig else (lambda v: v)
    y = step(_sub(ctx, x, _back(ctx, mu, shape, dims)))
    y = step(_mul(ctx, y, _back(ctx, invstd, shape, dims)))
    if w is not None:
        y = step(_mul(ctx, y, w))
    if b is not None:
        y = _add(ctx, y, b)
    ctx.output(y, like=m[0])
    for v in (mu, invstd):
        if training:
            _emit_stat(ctx, v, m[1], sdt)
        else:
            # the CPU kernels return empty save_mean/save_invstd in eval
            # mode (the meta kernels say [C])
            ctx.output(ctx.const(0, sdt, (0,)), strides=(1,))


@lowering("aten::native_batch_norm", runtime=("momentum", "eps"))
def native_batch_norm(ctx, input, weight, bias, running_mean, running_var, training,
                      momentum, eps):
    _batch_norm(ctx, input, weight, bias, running_mean, running_var, training, ctx.meta())


@lowering("aten::_native_batch_norm_legit", runtime=("momentum", "eps"))
def native_batch_norm_legit(ctx, input, weight, bias, running_mean, running_var, training,
                            momentum, eps):
    _batch_norm(ctx, input, weight, bias, running_mean, running_var, training, ctx.meta())


@lowering("aten::_native_batch_norm_legit.no_stats", runtime=("momentum", "eps"))
def native_batch_norm_legit_no_stats(ctx, input, weight, bias, training, momentum, eps):
    if not training:
        raise NotLowerable("eval-mode batch_norm without running statistics")
    _batch_norm(ctx, input, weight, bias, None, None, training, ctx.meta())


@lowering("aten::_native_batch_norm_legit_no_training", runtime=("momentum", "eps"))
def native_batch_norm_legit_no_training(ctx, input, weight, bias, running_mean, running_var,
                                        momentum, eps):
    _batch_norm(ctx, input, weight, bias, running_mean, running_var, False, ctx.meta())


@lowering("aten::native_batch_norm_backward", runtime=("eps",))
def native_batch_norm_backward(ctx, grad_out, input, weight, running_mean, running_var,
                               save_mean, save_invstd, train, eps, output_mask):
    _check_dtypes(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd)
    _no_complex(input.dtype)
    m = ctx.meta()
    acc = _opmath(input.dtype)
    shape = tuple(input.shape)
    if input.dim() < 2:
        raise NotLowerable(f"batch_norm of a {input.dim()}-d input")
    dims = [0] + list(range(2, input.dim()))
    n = _numel(shape, dims)
    x = ctx.convert(ctx.input(input, "input"), acc)
    dy = ctx.convert(ctx.input(grad_out, "grad_out"), acc)
    if train:
        if save_mean is None or save_invstd is None:
            raise NotLowerable("batch_norm backward without saved statistics")
        mu = ctx.convert(ctx.input(save_mean, "save_mean"), acc)
        invstd = ctx.convert(ctx.input(save_invstd, "save_invstd"), acc)
    else:
        if running_mean is None or running_var is None:
            raise NotLowerable("eval-mode batch_norm backward without running statistics")
        mu = ctx.convert(ctx.input(running_mean, "running_mean"), acc)
        rv = ctx.convert(ctx.input(running_var, "running_var"), acc)
        invstd = _div(ctx, 1.0, ctx.unary("sqrt", _add(ctx, rv, ctx.scalar("eps", acc))))
    d = _sub(ctx, x, _back(ctx, mu, shape, dims))
    sum_dy = ctx.reduce("sum", dy, dims)
    dotp = ctx.reduce("sum", _mul(ctx, d, dy), dims)
    if weight is not None:
        w = ctx.convert(ctx.input(weight, "weight"), acc)
    else:
        w = ctx.const(1.0, acc, (shape[1],))

    def grad_input():
        scale = _back(ctx, _mul(ctx, invstd, w), shape, dims)
        if not train:
            return _mul(ctx, dy, scale)
        k = _div(ctx, _mul(ctx, _mul(ctx, dotp, invstd), invstd), float(n))
        proj = _mul(ctx, d, _back(ctx, k, shape, dims))
        mean_dy = _back(ctx, _div(ctx, sum_dy, float(n)), shape, dims)
        return _mul(ctx, _sub(ctx, _sub(ctx, dy, mean_dy), proj), scale)

    pdt = _stat_dtype(input, weight, running_mean, running_var)
    _emit_maybe(ctx, grad_input, m[0], output_mask[0])
    _emit_maybe(ctx, lambda: _mul(ctx, dotp, invstd), m[1], output_mask[1], pdt)
    _emit_maybe(ctx, lambda: sum_dy, m[2], output_mask[2], pdt)


# ------------------------------------------------------------- dropout


@lowering("aten::native_dropout", runtime=("p",))
def native_dropout(ctx, input, p, train):
    _check_dtypes(input)
    _no_complex(input.dtype)
    m = ctx.meta()
    shape = tuple(input.shape)
    x = ctx.input(input, "input")
    if input.numel() == 0:
        # the CPU kernel returns a mask of the input's dtype here
        ctx.output(ctx.materialize(x), like=m[0])
        ctx.output(ctx.const(0, input.dtype, shape), like=m[0])
        return
    if train is False:
        ctx.output(ctx.materialize(x), like=m[0])
        ctx.output(ctx.const(True, torch.bool, shape), like=m[1])
        return
    if not input.dtype.is_floating_point:
        raise NotLowerable(f"dropout of {input.dtype}")
    acc = _opmath(input.dtype)
    # the keep probability 1 - p and scale 1 / (1 - p) in double, as PyTorch
    p64 = ctx.scalar("p", torch.float64)
    keep = _sub(ctx, 1.0, p64)
    scale = _where(ctx, _cmp(ctx, "eq", keep, 0.0), 0.0, _div(ctx, 1.0, keep))
    u = ctx.rng("uniform", torch.float64 if acc == torch.float64 else torch.float32, shape)
    mask = _cmp(ctx, "ge", ctx.convert(u, torch.float64), ctx.broadcast(p64, shape))
    y = _mul(ctx, _mul(ctx, ctx.convert(x, acc), ctx.convert(mask, acc)),
             ctx.convert(scale, acc))
    ctx.output(y, like=m[0])
    ctx.output(mask, like=m[1])


@lowering("aten::native_dropout_backward", runtime=("scale",))
def native_dropout_backward(ctx, grad_output, mask, scale):
    _check_dtypes(grad_output, mask)
    _no_complex(grad_output.dtype)
    m = ctx.meta()
    acc = _opmath(m.dtype)
    shape = tuple(m.shape)
    g = ctx.broadcast(ctx.convert(ctx.input(grad_output, "grad_output"), acc), shape)
    k = ctx.broadcast(ctx.convert(ctx.input(mask, "mask"), acc), shape)
    s = ctx.convert(ctx.scalar("scale", torch.float64), acc)
    ctx.output(_mul(ctx, _mul(ctx, g, k), s), like=m)


# ------------------------------------------------------------- embedding


@lowering("aten::embedding")
def embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    _check_dtypes(weight, indices)
    m = ctx.meta()
    if weight.dim() != 2 or indices.dtype not in _IDX:
        raise NotLowerable("embedding of this weight/indices")
    n, dim = indices.numel(), weight.shape[1]
    if n == 0 or dim == 0:
        ctx.output(ctx.const(0, m.dtype, tuple(m.shape)), like=m)
        return
    w = ctx.input(weight, "weight")
    idx = ctx.reshape(ctx.input(indices, "indices"), (n, 1))
    idx = ctx.broadcast_in_dim(idx, (n, dim), (0, 1))
    rows = ctx.op("gather", w, idx, ints=(0,))
    ctx.output(ctx.reshape(rows, tuple(m.shape)), like=m)


@lowering("aten::embedding_dense_backward")
def embedding_dense_backward(ctx, grad_output, indices, num_weights, padding_idx,
                             scale_grad_by_freq):
    _check_dtypes(grad_output, indices)
    m = ctx.meta()
    if indices.dtype not in _IDX:
        raise NotLowerable(f"embedding indices of {indices.dtype}")
    _no_complex(grad_output.dtype)
    acc = _opmath(m.dtype)
    n, dim = indices.numel(), m.shape[1]
    if n == 0 or dim == 0:
        ctx.output(ctx.const(0, m.dtype, tuple(m.shape)), like=m)
        return
    g = ctx.reshape(ctx.convert(ctx.input(grad_output, "grad_output"), acc), (n, dim))
    idx = ctx.convert(ctx.reshape(ctx.input(indices, "indices"), (n,)), torch.int64)
    keep = _cmp(ctx, "ne", idx, padding_idx)
    if scale_grad_by_freq:
        ones = ctx.convert(keep, acc)
        counts = ctx.op("scatter", ctx.const(0, acc, (num_weights,)), idx, ones, kind=1,
                        ints=(0,))
        per = ctx.op("gather", counts, idx, ints=(0,))
        g = _div(ctx, g, ctx.broadcast_in_dim(per, (n, dim), (0,)))
    g = _where(ctx, ctx.broadcast_in_dim(keep, (n, dim), (0,)), g, 0.0)
    idx2 = ctx.broadcast_in_dim(idx, (n, dim), (0,))
    r = ctx.op("scatter", ctx.const(0, acc, (num_weights, dim)), idx2, g, kind=1, ints=(0,))
    ctx.output(r, like=m)


# ------------------------------------------------------------- out= variants


for _o, _f, _d in [
    ("mean.out", "mean.dim", True),
    ("prod.int_out", "prod.dim_int", True),
    ("amax.out", "amax", False),
    ("amin.out", "amin", False),
    ("max.dim_max", "max.dim", False),
    ("min.dim_min", "min.dim", False),
    ("argmax.out", "argmax", False),
    ("argmin.out", "argmin", False),
    ("any.out", "any.dim", False),
    ("any.dims_out", "any.dims", False),
    ("any.all_out", "any", False),
    ("all.out", "all.dim", False),
    ("all.dims_out", "all.dims", False),
    ("all.all_out", "all", False),
    ("var.correction_out", "var.correction", False),
    ("std.correction_out", "std.correction", False),
    ("logsumexp.out", "logsumexp", False),
    ("linalg_vector_norm.out", "linalg_vector_norm", True),
    ("cumsum.out", "cumsum", True),
    ("cumprod.out", "cumprod", True),
    ("_log_softmax.out", "_log_softmax", False),
    ("_log_softmax_backward_data.out", "_log_softmax_backward_data", False),
    ("nll_loss_forward.output", "nll_loss_forward", False),
    ("nll_loss_backward.grad_input", "nll_loss_backward", False),
    ("nll_loss2d_forward.output", "nll_loss2d_forward", False),
    ("nll_loss2d_backward.grad_input", "nll_loss2d_backward", False),
    ("mse_loss.out", "mse_loss", False),
    ("mse_loss_backward.grad_input", "mse_loss_backward", False),
    ("smooth_l1_loss.out", "smooth_l1_loss", False),
    ("smooth_l1_loss_backward.grad_input", "smooth_l1_loss_backward", False),
    ("huber_loss.out", "huber_loss", False),
    ("huber_loss_backward.out", "huber_loss_backward", False),
    ("binary_cross_entropy.out", "binary_cross_entropy", False),
    ("binary_cross_entropy_backward.grad_input", "binary_cross_entropy_backward", False),
]:
    out_variant("aten::" + _o, _overload("aten::" + _f), _d)

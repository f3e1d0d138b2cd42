"""Lowering rules: indexing and data movement.

gather/scatter families, advanced indexing (x[i], x[i] = v, x[mask]),
concatenation, flips/rolls, padding, *_scatter, sorting, triangles and the
data-dependent ops (nonzero, masked_select, unique, repeat_interleave), which
are composites: a lowered program computes the result with a static bound,
the host reads the size (a counted sync), and the result is a view of it.

Index bounds are never clamped: gather/scatter check them at run time and the
error surfaces at the next sync as an IndexError naming the op. Where PyTorch
accepts negative indices they are wrapped first, keeping out-of-range values
as they are so that the message names the index the user wrote.
"""

import torch

from .. import _registry
from .._fallback import run_fallback
from .._registry import composite, lowering, meta_check, out_variant, resize_out
from .ctx import REDUCE, NotLowerable, is_tensor, to_meta
from .elementwise import _SUPPORTED, _check_dtypes, broadcast_shapes

OPMATH = {torch.bfloat16: torch.float32, torch.float16: torch.float32}
SCATTER = {"replace": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
I64 = torch.int64

# Private ops: the device halves of the composites below.
_LIB = torch.library.Library("torchtpu", "FRAGMENT")
_LIB.define("index.Tensor(Tensor self, Tensor?[] indices) -> Tensor")
_LIB.define("_index_put_impl_(Tensor(a!) self, Tensor?[] indices, Tensor values, "
            "bool accumulate) -> Tensor(a!)")
_LIB.define("nonzero_bound(Tensor self) -> (Tensor, Tensor)")
_LIB.define("unique_bound(Tensor self, bool consecutive, bool inverse, bool counts) "
            "-> (Tensor, Tensor, Tensor, Tensor)")
_LIB.define("repeats_stats(Tensor repeats) -> Tensor")
_LIB.define("repeats_index(Tensor repeats, int n) -> Tensor")
_LIB.define("randperm_fill_(Tensor(a!) self) -> Tensor(a!)")
_LIB.define("eye_fill_(Tensor(a!) self) -> Tensor(a!)")


# ------------------------------------------------------------- helpers


def _prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def _wrap(d, r):
    r = max(r, 1)
    return d + r if d < 0 else d


def _opmath(dtype):
    return OPMATH.get(dtype, dtype)


def _scalar(ctx, value, name, dtype):
    """A Scalar/0-dim Tensor argument (a runtime operand) as a rank-0 value of
    dtype. The Python type picks the parameter's type (the type is part of the
    fingerprint; the value never is)."""
    if is_tensor(value):
        v = ctx.input(value, name)
    elif name not in ctx.scalar_names:
        # the argument was left at its default: a constant of the program
        return ctx.const(value, dtype)
    elif isinstance(value, bool):
        v = ctx.scalar(name, torch.bool)
    elif isinstance(value, int):
        v = ctx.scalar(name, I64)
    elif isinstance(value, float):
        v = ctx.scalar(name, torch.float64)
    else:
        raise NotLowerable(f"{type(value).__name__} scalar")
    return ctx.convert(v, dtype)


def _zeros(ctx, dtype, shape):
    return ctx.const(0, dtype, tuple(shape)) if shape else ctx.const(0, dtype)


def _i64(ctx, v):
    return ctx.convert(v, I64)


def _c64(ctx, value, shape):
    return ctx.const(value, I64, tuple(shape)) if shape else ctx.const(value, I64)


def _slice(ctx, v, dim, start, limit, step=1):
    r = v.rank
    starts = [0] * r
    limits = list(v.shape)
    steps = [1] * r
    starts[dim], limits[dim], steps[dim] = start, limit, step
    return ctx.op("slice", v, ints=starts + limits + steps)


def _concat(ctx, vs, dim):
    vs = [v for v in vs if v.shape[dim] > 0] or vs[:1]
    return vs[0] if len(vs) == 1 else ctx.op("concatenate", *vs, ints=(dim,))


def _along(ctx, v, shape, dim):
    """A 1-D value laid along dim of shape (broadcast over the others)."""
    return ctx.broadcast_in_dim(v, tuple(shape), (dim,))


def _index_along(ctx, i, shape, dim):
    """A 1-D index laid along dim of shape: computed once, stored, then
    broadcast (so the index arithmetic is not redone per element)."""
    if _prod(shape) > i.shape[0] and all(v.id != i.id for v in ctx._inputs.values()):
        i = ctx.materialize(i)
    return _along(ctx, i, shape, dim)


def _wrap_index(ctx, i, size):
    """Negative indices wrapped by size; out-of-range ones keep their value
    (so the bounds check reports the index as written)."""
    i = _i64(ctx, i)
    w = ctx.binary("add", i, _c64(ctx, size, i.shape))
    ok = ctx.op("and", ctx.compare("lt", i, _c64(ctx, 0, i.shape)),
                ctx.compare("ge", w, _c64(ctx, 0, i.shape)))
    return ctx.select(ok, w, i)


def _checked(ctx, i, dim, size):
    """i (1-D, int64) bounds-checked against dimension dim of size `size`:
    a gather from an iota, which raises PyTorch's message for a bad index.
    Bad entries come back as -1."""
    n = i.shape[0]
    lead = (1,) * dim
    table = ctx.iota(I64, lead + (size,), dim)
    return ctx.reshape(ctx.op("gather", table, ctx.reshape(i, lead + (n,)), ints=(dim,)), (n,))


def _host(overload, args, kwargs, reason):
    """The counted CPU fallback, for composites (a private device op has no
    CPU kernel to fall back to)."""
    return run_fallback(overload, args, kwargs, reason=reason)


def _unsupported(*ts):
    return any(isinstance(t, torch.Tensor) and t.dtype not in _SUPPORTED for t in ts)


def _op(name):
    return _registry.op_handle(name)


# ------------------------------------------------------------------ cat


@lowering("aten::cat")
def cat(ctx, tensors, dim=0):
    _check_dtypes(*tensors)
    m = ctx.meta()
    d = _wrap(dim, m.dim())
    vs = [ctx.convert(ctx.input(t, "tensors", i), m.dtype)
          for i, t in enumerate(tensors) if t.numel() != 0]
    if not vs or m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
        return
    ctx.output(vs[0] if len(vs) == 1 else ctx.op("concatenate", *vs, ints=(d,)), like=m)


out_variant("aten::cat.out", _op("aten::cat"))


# ------------------------------------------------------- gather/scatter


@lowering("aten::gather")
def gather(ctx, self, dim, index, *, sparse_grad=False):
    _check_dtypes(self)
    m = ctx.meta()
    if m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
        return
    x = ctx.input(self, "self")
    i = ctx.input(index, "index")
    if x.rank == 0:
        x = ctx.reshape(x, (1,))
        i = ctx.reshape(i, (1,))
    ctx.output(ctx.reshape(ctx.op("gather", x, i, ints=(_wrap(dim, self.dim()),)),
                           tuple(m.shape)), like=m)


out_variant("aten::gather.out", _op("aten::gather"))


def _as_rank1(ctx, x, i, u):
    if x.rank == 0:
        return ctx.reshape(x, (1,)), ctx.reshape(i, (1,)), ctx.reshape(u, (1,))
    return x, i, u


def _scatter_core(ctx, self, dim, index, upd, mode, include_self=True):
    """self with upd scattered at index along dim (torch.scatter geometry):
    the result in self's opmath dtype."""
    dt = _opmath(self.dtype)
    x = ctx.convert(ctx.input(self, "self"), dt)
    if index.numel() == 0:
        return x
    i = ctx.input(index, "index")
    shape = x.shape
    x1, i1, u1 = _as_rank1(ctx, x, i, ctx.convert(upd, dt))
    return ctx.reshape(_reduce_into(ctx, x1, _wrap(dim, self.dim()), i1, u1, mode, include_self),
                       shape)


def _reduce_into(ctx, x, d, i, u, mode, include_self):
    """x (rank >= 1, opmath dtype) with u reduced into it at i along d, as
    scatter_reduce/index_reduce do: include_self=False starts every hit
    position from the reduction's identity; mean divides by the hit count
    (plus one for self), flooring for integers."""
    dt = x.dtype
    if not include_self or mode == "mean":
        hits = ctx.op("scatter", _zeros(ctx, I64, x.shape), i, _c64(ctx, 1, i.shape),
                      kind=SCATTER["add"], ints=(d,))
    if not include_self:
        ident = {"add": 0, "mul": 1, "max": _lowest(dt), "min": _highest(dt), "mean": 0}[mode]
        hit = ctx.compare("gt", hits, _c64(ctx, 0, hits.shape))
        x = ctx.select(hit, ctx.const(ident, dt, x.shape), x)
    r = ctx.op("scatter", x, i, u, kind=SCATTER["add" if mode == "mean" else mode], ints=(d,))
    if mode != "mean":
        return r
    n = hits if not include_self else ctx.binary("add", hits, _c64(ctx, 1, hits.shape))
    n = ctx.convert(ctx.binary("maximum", n, _c64(ctx, 1, n.shape)), dt)
    q = ctx.binary("divide", r, n)
    if not dt.is_floating_point:
        rem = ctx.binary("remainder", r, n)
        neg = ctx.op("and", ctx.compare("ne", rem, ctx.const(0, dt, rem.shape)),
                     ctx.compare("lt", rem, ctx.const(0, dt, rem.shape)))
        q = ctx.select(neg, ctx.binary("subtract", q, ctx.const(1, dt, q.shape)), q)
    return q


def _lowest(dt):
    if dt.is_floating_point:
        return float("-inf")
    return False if dt == torch.bool else torch.iinfo(dt).min


def _highest(dt):
    if dt.is_floating_point:
        return float("inf")
    return True if dt == torch.bool else torch.iinfo(dt).max


def _src_block(ctx, src, index, dt):
    """The part of src that index covers (torch.scatter uses src[:i0, :i1, ...])."""
    s = ctx.convert(ctx.input(src, "src"), dt)
    if s.shape != tuple(index.shape):
        r = s.rank
        s = ctx.op("slice", s, ints=[0] * r + list(index.shape) + [1] * r)
    return s


def _value_block(ctx, value, index, dt):
    v = _scalar(ctx, value, "value", dt)
    return ctx.broadcast(v, tuple(index.shape)) if index.dim() else v


_SCATTER_REDUCE = {"add": "add", "multiply": "mul", "sum": "add", "prod": "mul",
                   "amax": "max", "amin": "min", "mean": "mean"}


def _scatter_rule(ctx, self, dim, index, upd_of, reduce, include_self=True):
    inplace = ctx.name.startswith("aten::scatter_.") or ctx.name.startswith(
        "aten::scatter_add_") or ctx.name.startswith("aten::scatter_reduce_")
    m = ctx.meta()
    upd = upd_of(_opmath(self.dtype)) if index.numel() else None
    mode = "replace" if reduce is None else _SCATTER_REDUCE[reduce]
    r = _scatter_core(ctx, self, dim, index, upd, mode, include_self)
    if inplace:
        ctx.output_into(r, self, "self")
    else:
        ctx.output(r, like=m)


@lowering("aten::scatter.src", "aten::scatter.reduce", "aten::scatter_.src",
          "aten::scatter_.reduce")
def scatter_src(ctx, self, dim, index, src, *, reduce=None):
    _check_dtypes(self, src)
    _scatter_rule(ctx, self, dim, index, lambda dt: _src_block(ctx, src, index, dt), reduce)


@lowering("aten::scatter.value", "aten::scatter.value_reduce", "aten::scatter_.value",
          "aten::scatter_.value_reduce", runtime=("value",))
def scatter_value(ctx, self, dim, index, value, *, reduce=None):
    _check_dtypes(self)
    _scatter_rule(ctx, self, dim, index, lambda dt: _value_block(ctx, value, index, dt), reduce)


@lowering("aten::scatter_add", "aten::scatter_add_")
def scatter_add(ctx, self, dim, index, src):
    _check_dtypes(self, src)
    _scatter_rule(ctx, self, dim, index, lambda dt: _src_block(ctx, src, index, dt), "add")


@lowering("aten::scatter_reduce.two", "aten::scatter_reduce_.two")
def scatter_reduce(ctx, self, dim, index, src, reduce, *, include_self=True):
    _check_dtypes(self, src)
    _scatter_rule(ctx, self, dim, index, lambda dt: _src_block(ctx, src, index, dt), reduce,
                  include_self)


for _name, _fn in [("scatter.src_out", "scatter.src"), ("scatter.value_out", "scatter.value"),
                   ("scatter.reduce_out", "scatter.reduce"),
                   ("scatter.value_reduce_out", "scatter.value_reduce"),
                   ("scatter_add.out", "scatter_add"),
                   ("scatter_reduce.two_out", "scatter_reduce.two")]:
    out_variant("aten::" + _name, _op("aten::" + _fn))


# ---------------------------------------------------- index_* along a dim


def _dim_index(ctx, index, size, wrap):
    """An index argument (0-d or 1-d) as a 1-D int64 value."""
    i = ctx.input(index, "index")
    if i.rank == 0:
        i = ctx.reshape(i, (1,))
    return _wrap_index(ctx, i, size) if wrap else _i64(ctx, i)


@lowering("aten::index_select")
def index_select(ctx, self, dim, index):
    _check_dtypes(self)
    m = ctx.meta()
    if m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
        return
    if self.dim() == 0 and index.numel() != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got "
                           f"{index.numel()} value(s)")
    x = ctx.input(self, "self")
    if x.rank == 0:
        x = ctx.reshape(x, (1,))
    d = _wrap(dim, self.dim())
    i = _dim_index(ctx, index, x.shape[d], wrap=False)
    shape = x.shape[:d] + (i.shape[0],) + x.shape[d + 1:]
    g = ctx.op("gather", x, _index_along(ctx, i, shape, d), ints=(d,))
    ctx.output(ctx.reshape(g, tuple(m.shape)), like=m)


out_variant("aten::index_select.out", _op("aten::index_select"))


def _index_dim_scatter(ctx, self, dim, index, source, mode, alpha=None):
    if mode == "add" and source.dim() != self.dim():
        # the meta kernel lets a 1-element source through for a 0-dim self
        raise RuntimeError(
            f"source tensor shape must match self tensor shape, excluding the specified "
            f"dimension. Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    dt = _opmath(self.dtype)
    x = ctx.convert(ctx.input(self, "self"), dt)
    if index.numel() == 0:
        return x
    shape = x.shape
    if x.rank == 0:
        x = ctx.reshape(x, (1,))
    d = _wrap(dim, self.dim())
    i = _dim_index(ctx, index, x.shape[d], wrap=False)
    s = ctx.convert(ctx.input(source, "source"), dt)
    if alpha is not None:
        s = ctx.binary("multiply", s, ctx.broadcast(_scalar(ctx, alpha, "alpha", dt), s.shape))
    s = ctx.reshape(s, x.shape[:d] + (i.shape[0],) + x.shape[d + 1:])
    r = ctx.op("scatter", x, _index_along(ctx, i, s.shape, d), s, kind=SCATTER[mode], ints=(d,))
    return ctx.reshape(r, shape)


@lowering("aten::index_add", "aten::index_add_", runtime=("alpha",))
def index_add(ctx, self, dim, index, source, *, alpha=1):
    _check_dtypes(self, source)
    m = ctx.meta()
    r = _index_dim_scatter(ctx, self, dim, index, source, "add", alpha)
    if ctx.name.endswith("_"):
        ctx.output_into(r, self, "self")
    else:
        ctx.output(r, like=m)


@lowering("aten::index_copy", "aten::index_copy_")
def index_copy(ctx, self, dim, index, source):
    _check_dtypes(self, source)
    m = ctx.meta()
    r = _index_dim_scatter(ctx, self, dim, index, source, "replace")
    if ctx.name.endswith("_"):
        ctx.output_into(r, self, "self")
    else:
        ctx.output(r, like=m)


@lowering("aten::index_fill.int_Scalar", "aten::index_fill_.int_Scalar",
          "aten::index_fill.int_Tensor", "aten::index_fill_.int_Tensor", runtime=("value",))
def index_fill(ctx, self, dim, index, value):
    _check_dtypes(self)
    # the meta kernel rejects a 0-dim CPU value tensor, which PyTorch accepts
    if is_tensor(value) and value.dim() != 0:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got "
                           f"tensor with {value.dim()} dimension(s).")
    if index.dtype != I64:
        raise RuntimeError("index_fill_(): Expected dtype int64 for index.")
    if index.dim() > 1:
        raise IndexError("Index has to be a vector/scalar")
    if not -max(self.dim(), 1) <= dim < max(self.dim(), 1):
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-max(self.dim(), 1)}, {max(self.dim(), 1) - 1}], but got {dim})")
    m = torch.empty_like(to_meta(self))
    x = ctx.input(self, "self")
    if index.numel() and self.numel():
        shape = x.shape
        x1 = ctx.reshape(x, (1,)) if x.rank == 0 else x
        d = _wrap(dim, self.dim())
        size = x1.shape[d]
        i = _dim_index(ctx, index, size, wrap=True)
        hit = ctx.op("scatter", _zeros(ctx, torch.int32, (size,)), i,
                     ctx.const(1, torch.int32, i.shape), kind=SCATTER["replace"], ints=(0,))
        hit = _along(ctx, ctx.compare("ne", hit, ctx.const(0, torch.int32, (size,))), x1.shape, d)
        v = ctx.broadcast(_scalar(ctx, value, "value", self.dtype), x1.shape)
        x = ctx.reshape(ctx.select(hit, v, x1), shape)
    if ctx.name.startswith("aten::index_fill_"):
        ctx.output_into(x, self, "self")
    else:
        ctx.output(x, like=m)


@lowering("aten::index_reduce", "aten::index_reduce_")
def index_reduce(ctx, self, dim, index, source, reduce, *, include_self=True):
    _check_dtypes(self, source)
    m = ctx.meta()
    dt = _opmath(self.dtype)
    x = ctx.convert(ctx.input(self, "self"), dt)
    if index.numel():
        shape = x.shape
        x1 = ctx.reshape(x, (1,)) if x.rank == 0 else x
        d = _wrap(dim, self.dim())
        i = _dim_index(ctx, index, x1.shape[d], wrap=False)
        u = ctx.reshape(ctx.convert(ctx.input(source, "source"), dt),
                        x1.shape[:d] + (i.shape[0],) + x1.shape[d + 1:])
        x = ctx.reshape(_reduce_into(ctx, x1, d, _index_along(ctx, i, u.shape, d), u,
                                     _SCATTER_REDUCE[reduce], include_self), shape)
    if ctx.name.endswith("_"):
        ctx.output_into(x, self, "self")
    else:
        ctx.output(x, like=m)


for _name, _fn in [("index_add.out", "index_add"), ("index_copy.out", "index_copy"),
                   ("index_reduce.out", "index_reduce"),
                   ("index_fill.int_Scalar_out", "index_fill.int_Scalar"),
                   ("index_fill.int_Tensor_out", "index_fill.int_Tensor")]:
    out_variant("aten::" + _name, _op("aten::" + _fn))


@lowering("aten::take")
def take(ctx, self, index):
    _check_dtypes(self)
    m = ctx.meta()
    if m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
        return
    n_self = self.numel()
    x = ctx.reshape(ctx.input(self, "self"), (n_self,))
    i = ctx.input(index, "index")
    flat = _wrap_index(ctx, ctx.reshape(i, (index.numel(),)), n_self)
    ctx.output(ctx.reshape(ctx.op("gather", x, flat, ints=(0,)), tuple(m.shape)), like=m)


out_variant("aten::take.out", _op("aten::take"))


@lowering("aten::put_", "aten::put")
def put(ctx, self, index, source, accumulate=False):
    _check_dtypes(self, source)
    if not ctx.name.endswith("_"):
        m = ctx.meta()
    if index.numel() != source.numel():
        raise RuntimeError(
            f"put_(): Expected source and index to have the same number of elements, "
            f"but got source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    dt = _opmath(self.dtype)
    x = ctx.convert(ctx.input(self, "self"), dt)
    if index.numel():
        n = self.numel()
        flat = _wrap_index(ctx, ctx.reshape(ctx.input(index, "index"), (index.numel(),)), n)
        s = ctx.reshape(ctx.convert(ctx.input(source, "source"), dt), (source.numel(),))
        r = ctx.op("scatter", ctx.reshape(x, (n,)), flat, s,
                   kind=SCATTER["add" if accumulate else "replace"], ints=(0,))
        x = ctx.reshape(r, x.shape)
    if ctx.name.endswith("_"):
        ctx.output_into(x, self, "self")
    else:
        ctx.output(x, like=m)


# --------------------------------------------------- advanced indexing


def _index_broadcast(shapes):
    try:
        return broadcast_shapes(*shapes)
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together "
                         "with shapes " + ", ".join(str(list(s)) for s in shapes)) from None


class _Adv:
    """Geometry of x[indices] for integer index tensors at dims `dims`:
    broadcast index shape B, result shape R, and the (pre, P, post) layout
    in which the indexed dims are one dimension of size P at `axis`."""

    def __init__(self, shape, dims, idx_shapes):
        self.S = tuple(shape)
        self.dims = list(dims)
        self.B = _index_broadcast(idx_shapes)
        self.n = _prod(self.B)
        self.P = _prod(self.S[d] for d in dims)
        rest = [d for d in range(len(shape)) if d not in dims]
        self.rest = rest
        self.adjacent = dims == list(range(dims[0], dims[-1] + 1))
        S = self.S
        if self.adjacent:
            self.perm = None
            self.pre = S[:dims[0]]
            self.post = S[dims[-1] + 1:]
            self.R = self.pre + self.B + self.post
        else:
            self.perm = dims + rest
            self.pre = ()
            self.post = tuple(S[d] for d in rest)
            self.R = self.B + self.post
        self.axis = len(self.pre)
        self.merged = self.pre + (self.P,) + self.post
        self.spread = self.pre + (self.n,) + self.post

    def to_merged(self, ctx, x):
        if self.perm is not None:
            x = ctx.transpose(x, self.perm)
        return ctx.reshape(x, self.merged)

    def from_merged(self, ctx, x):
        if self.perm is None:
            return ctx.reshape(x, self.S)
        x = ctx.reshape(x, tuple(self.S[d] for d in self.perm))
        inv = [0] * len(self.perm)
        for k, p in enumerate(self.perm):
            inv[p] = k
        return ctx.transpose(x, inv)

    def linear(self, ctx, idx_vs):
        """The flat index (n,) into the merged dimension."""
        lin = None
        for j, (d, v) in enumerate(zip(self.dims, idx_vs)):
            f = ctx.reshape(ctx.broadcast(_i64(ctx, v), self.B), (self.n,))
            f = _wrap_index(ctx, f, self.S[d])
            if len(self.dims) == 1:
                return f
            f = _checked(ctx, f, d, self.S[d])
            stride = _prod(self.S[e] for e in self.dims[j + 1:])
            if stride != 1:
                f = ctx.binary("multiply", f, _c64(ctx, stride, f.shape))
            lin = f if lin is None else ctx.binary("add", lin, f)
        # entries with a bad component were reported by _checked; keep the
        # gather itself in range so it reports nothing of its own
        return ctx.op("clamp", _c64(ctx, 0, lin.shape), lin,
                      _c64(ctx, max(self.P - 1, 0), lin.shape))


def _check_index_dtypes(indices):
    for t in indices:
        if t is not None and t.dtype not in (torch.int64, torch.int32, torch.uint8, torch.bool):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


def _index_args(ctx, self, indices):
    """(dims, values) of the non-None index tensors."""
    dims, vals = [], []
    for k, t in enumerate(indices):
        if t is None:
            continue
        if t.dtype in (torch.bool, torch.uint8):
            raise RuntimeError("torchtpu internal error: a boolean index reached the integer path")
        dims.append(k)
        vals.append(ctx.input(t, "indices", k))
    return dims, vals


@lowering("torchtpu::index.Tensor")
def index_gather(ctx, self, indices):
    _check_dtypes(self)
    _check_index_dtypes(indices)
    _index_broadcast([tuple(t.shape) for t in indices if t is not None])
    m = torch.ops.aten.index.Tensor(to_meta(self), [to_meta(t) for t in indices])
    dims, vals = _index_args(ctx, self, indices)
    if not dims:
        ctx.output(ctx.input(self, "self"), like=m)
        return
    a = _Adv(self.shape, dims, [tuple(t.shape) for t in indices if t is not None])
    assert a.R == tuple(m.shape), (a.R, m.shape)
    if m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape))
        return
    x = a.to_merged(ctx, ctx.input(self, "self"))
    lin = a.linear(ctx, vals)
    g = ctx.op("gather", x, _index_along(ctx, lin, a.spread, a.axis), ints=(a.axis,))
    ctx.output(ctx.reshape(g, a.R))


def _mask_put(ctx, self, d, mask, values, accumulate):
    """x[mask] = values where values do not vary along the mask's count
    dimension: a select, with no data-dependent size."""
    x = ctx.input(self, "self")
    S = tuple(self.shape)
    mrank = mask.dim()
    mk = ctx.input(mask, "indices", d)
    if mk.dtype != torch.bool:
        mk = ctx.compare("ne", mk, ctx.const(0, mk.dtype, mk.shape))
    mk = ctx.broadcast_in_dim(mk, S, tuple(range(d, d + mrank)))
    v = ctx.input(values, "values")
    tail = S[d + mrank:]
    vs = tuple(values.shape)
    if len(vs) > len(tail):
        # drop the size-1 count dimension; the rest aligns with S[:d] and tail
        lead = vs[:len(vs) - len(tail) - 1]
        vs = lead + vs[len(vs) - len(tail):]
        full = [1] * len(S)
        for k, s in enumerate(lead):
            full[d - len(lead) + k] = s
        for k, s in enumerate(vs[len(lead):]):
            full[d + mrank + k] = s
        v = ctx.reshape(v, tuple(full))
    v = ctx.broadcast(ctx.convert(v, self.dtype), S)
    if accumulate:
        dt = _opmath(self.dtype)
        if dt == torch.bool:
            r = ctx.op("or", x, ctx.op("and", mk, v))
        else:
            xv = ctx.convert(x, dt)
            r = ctx.binary("add", xv, ctx.select(mk, ctx.convert(v, dt), ctx.const(0, dt, S)))
    else:
        r = ctx.select(mk, v, x)
    ctx.output_into(r, self, "self")


@lowering("torchtpu::_index_put_impl_")
def index_scatter_(ctx, self, indices, values, accumulate):
    _check_dtypes(self, values)
    if values.dtype != self.dtype:
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got "
            f"{_dtype_name(self.dtype)} for the destination and "
            f"{_dtype_name(values.dtype)} for the source.")
    masks = [k for k, t in enumerate(indices) if t is not None and t.dtype in (torch.bool, torch.uint8)]
    if masks:
        _mask_put(ctx, self, masks[0], indices[masks[0]], values, accumulate)
        return
    _check_index_dtypes(indices)
    _index_broadcast([tuple(t.shape) for t in indices if t is not None])
    torch.ops.aten.index_put.default(to_meta(self), [to_meta(t) for t in indices],
                                     to_meta(values), accumulate)
    dims, vals = _index_args(ctx, self, indices)
    x = ctx.input(self, "self")
    if not dims:
        # no index tensors: every element is written once
        v = ctx.broadcast(ctx.input(values, "values"), x.shape)
        ctx.output_into(ctx.binary("add", x, v) if accumulate else v, self, "self")
        return
    a = _Adv(self.shape, dims, [tuple(t.shape) for t in indices if t is not None])
    try:
        fits = broadcast_shapes(tuple(values.shape), a.R) == a.R
    except RuntimeError:
        fits = False
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot "
                           f"be broadcast to indexing result of shape {list(a.R)}")
    if a.n == 0:
        ctx.output_into(x, self, "self")
        return
    lin = a.linear(ctx, vals)
    v = ctx.broadcast(ctx.input(values, "values"), a.R)
    u = ctx.reshape(v, a.spread)
    r = ctx.op("scatter", a.to_merged(ctx, x), _index_along(ctx, lin, a.spread, a.axis), u,
               kind=SCATTER["add" if accumulate else "replace"], ints=(a.axis,))
    ctx.output_into(a.from_merged(ctx, r), self, "self")


def _dtype_name(dt):
    return {torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16",
            torch.float16: "Half", torch.int64: "Long", torch.int32: "Int",
            torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(dt, str(dt))


_INDEX_GATHER = _op("torchtpu::index.Tensor")
_INDEX_SCATTER = _op("torchtpu::_index_put_impl_")


def _is_mask(t):
    return t is not None and t.dtype in (torch.bool, torch.uint8)


def _check_mask(self, k, mask):
    for j, s in enumerate(mask.shape):
        if k + j >= self.dim() or self.shape[k + j] != s:
            raise IndexError(
                f"The shape of the mask {list(mask.shape)} at index {j} does not match the "
                f"shape of the indexed tensor {list(self.shape)} at index {k + j}")


def _expand_indices(self, indices, cause):
    """PyTorch's expansion of an index list: each boolean mask becomes the
    coordinates of its true elements (a sync, counted under cause); index
    tensors on the CPU move to the device (0-dim ones stay: they are runtime
    scalars)."""
    out = []
    k = 0
    for t in indices:
        if t is None:
            out.append(None)
            k += 1
            continue
        if _is_mask(t):
            _check_mask(self, k, t)
            if t.device.type == "cpu":
                coords = torch.nonzero(t).to(self.device)
            else:
                coords = _nonzero(t, cause)
            out.extend(coords.select(1, j) for j in range(t.dim()))
            k += t.dim()
            continue
        if t.device.type == "cpu" and t.dim() != 0:
            t = t.to(self.device)
        out.append(t)
        k += 1
    return out


def _needs_host(indices):
    return any(t is not None and (_is_mask(t) and t.dim() == 0) for t in indices)


@composite("aten::index.Tensor")
def index_tensor(self, indices):
    if _needs_host(indices) or _unsupported(self):
        return _host(torch.ops.aten.index.Tensor, (self, indices), {},
                     f"0-dim boolean index or dtype {self.dtype}")
    if any(_is_mask(t) for t in indices):
        return _INDEX_GATHER(self, _expand_indices(self, indices, "aten::index.Tensor"))
    if any(t is not None and t.device.type == "cpu" and t.dim() for t in indices):
        indices = _expand_indices(self, indices, "aten::index.Tensor")
    return _INDEX_GATHER(self, indices)


out_variant("aten::index.Tensor_out", index_tensor)


def _count_free(self, indices, values):
    """The single-mask form x[..., mask] = v with v constant along the
    mask's count dimension (no sync needed), or None."""
    present = [k for k, t in enumerate(indices) if t is not None]
    if len(present) != 1 or not _is_mask(indices[present[0]]):
        return None
    d = present[0]
    mask = indices[d]
    if mask.dim() == 0 or d + mask.dim() > self.dim() or mask.device != self.device:
        return None
    if any(self.shape[d + j] != s for j, s in enumerate(mask.shape)):
        return None
    tail = tuple(self.shape[d + mask.dim():])
    vs = tuple(values.shape)
    if len(vs) > len(tail):
        if vs[len(vs) - len(tail) - 1] != 1:
            return None
        lead = vs[:len(vs) - len(tail) - 1]
        if len(lead) > d or any(s not in (1, t) for s, t in zip(lead[::-1], self.shape[:d][::-1])):
            return None
    for s, t in zip(vs[::-1], tail[::-1]):
        if s not in (1, t):
            return None
    return d


@composite("aten::_index_put_impl_")
def index_put_impl_(self, indices, values, accumulate=False, unsafe=False):
    if _needs_host(indices) or _unsupported(self, values):
        return _host(torch.ops.aten._index_put_impl_.default,
                     (self, indices, values, accumulate, unsafe), {},
                     "0-dim boolean index or an unsupported dtype")
    if values.device != self.device and values.dim() != 0:
        values = values.to(self.device)
    if any(_is_mask(t) for t in indices):
        if _count_free(self, indices, values) is None:
            indices = _expand_indices(self, indices, "aten::index_put_")
    elif any(t is not None and t.device.type == "cpu" and t.dim() for t in indices):
        indices = _expand_indices(self, indices, "aten::index_put_")
    return _INDEX_SCATTER(self, indices, values, accumulate)


# ----------------------------------------------- data-dependent sizes


@lowering("torchtpu::nonzero_bound")
def nonzero_bound(ctx, self):
    """(count, coords): coords[:count] are the coordinates of the nonzero
    elements of self in row-major order (shape (numel, dim))."""
    _check_dtypes(self)
    S = tuple(self.shape)
    N = self.numel()
    r = len(S)
    if N == 0:
        ctx.output(_c64(ctx, 0, ()))
        ctx.output(_zeros(ctx, I64, (0, r)))
        return
    x = ctx.input(self, "self")
    b = x if x.dtype == torch.bool else ctx.compare("ne", x, ctx.const(0, x.dtype, x.shape))
    b = ctx.reshape(b, (N,))
    pos, count = _compress_positions(ctx, b)
    ctx.output(count)
    if r == 0:
        ctx.output(_zeros(ctx, I64, (N, 0)))
        return
    cols = []
    stride = N
    for s in S:
        stride //= s
        c = pos
        if stride != 1:
            c = ctx.binary("divide", c, _c64(ctx, stride, (N,)))
        c = ctx.binary("remainder", c, _c64(ctx, s, (N,)))
        cols.append(ctx.reshape(c, (N, 1)))
    ctx.output(_concat(ctx, cols, 1) if len(cols) > 1 else cols[0])


def _compress_positions(ctx, b):
    """For a 1-D bool b: (positions, count) where positions[:count] are the
    indices of its true entries in order (the rest 0)."""
    N = b.shape[0]
    ones = ctx.convert(b, I64)
    c = ctx.op("cumulative", ones, kind=REDUCE["sum"], ints=(0,))
    dest = ctx.select(b, ctx.binary("subtract", c, _c64(ctx, 1, (N,))), _c64(ctx, N, (N,)))
    pos = ctx.op("scatter", _zeros(ctx, I64, (N + 1,)), dest, ctx.iota(I64, (N,), 0),
                 kind=SCATTER["replace"], ints=(0,))
    count = ctx.reduce("sum", ones, (0,))
    return _slice(ctx, pos, 0, 0, N), count


_NONZERO_BOUND = _op("torchtpu::nonzero_bound")


def _record_sync(cause):
    from .. import metrics

    metrics.record_sync(cause)


def _nonzero(t, cause):
    count, coords = _NONZERO_BOUND(t)
    n = int(count.item())
    _record_sync(cause)
    return coords[:n]


@composite("aten::nonzero")
def nonzero(self):
    if _unsupported(self):
        return _host(torch.ops.aten.nonzero.default, (self,), {}, f"dtype {self.dtype}")
    return _nonzero(self, "aten::nonzero")


out_variant("aten::nonzero.out", nonzero)


@lowering("aten::nonzero_static")
def nonzero_static(ctx, self, *, size, fill_value=-1):
    _check_dtypes(self)
    m = ctx.meta()
    N, r = self.numel(), self.dim()
    if size == 0 or r == 0:
        # shape (size, 0) or (0, r): nothing to compute
        ctx.output(_zeros(ctx, I64, m.shape), like=m)
        return
    if N == 0:
        ctx.output(_c64(ctx, fill_value, tuple(m.shape)), like=m)
        return
    x = ctx.input(self, "self")
    b = x if x.dtype == torch.bool else ctx.compare("ne", x, ctx.const(0, x.dtype, x.shape))
    pos, count = _compress_positions(ctx, ctx.reshape(b, (N,)))
    cols = []
    stride = N
    for s in tuple(self.shape):
        stride //= s
        c = ctx.binary("divide", pos, _c64(ctx, stride, (N,)))
        cols.append(ctx.reshape(ctx.binary("remainder", c, _c64(ctx, s, (N,))), (N, 1)))
    coords = _concat(ctx, cols, 1)
    if size <= N:
        coords = _slice(ctx, coords, 0, 0, size)
    else:
        coords = ctx.op("pad", coords, ctx.const(0, I64), ints=(0, 0, size - N, 0, 0, 0))
    row = ctx.iota(I64, (size, r), 0)
    keep = ctx.compare("lt", row, ctx.broadcast(count, (size, r)))
    ctx.output(ctx.select(keep, coords, _c64(ctx, fill_value, (size, r))), like=m)


@composite("aten::masked_select")
def masked_select(self, mask):
    if mask.dtype != torch.bool:
        raise RuntimeError("masked_select: expected BoolTensor for mask")
    if _unsupported(self):
        return _host(torch.ops.aten.masked_select.default, (self, mask), {},
                     f"dtype {self.dtype}")
    shape = broadcast_shapes(tuple(self.shape), tuple(mask.shape))
    if not shape:
        shape = (1,)
    s, m = self.expand(shape), mask.expand(shape)
    if mask.device.type == "cpu":
        m = m.to(self.device)
    return _INDEX_GATHER(s, [_nonzero(m, "aten::masked_select").flatten()]
                         if len(shape) == 1 else
                         _expand_indices(s, [m], "aten::masked_select"))


out_variant("aten::masked_select.out", masked_select)


@lowering("aten::masked_scatter", "aten::masked_scatter_")
def masked_scatter(ctx, self, mask, source):
    """Elements of source, in order, where mask is true: each true element
    takes source[cumsum(mask) - 1]."""
    _check_dtypes(self, source)
    inplace = ctx.name.endswith("_")
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {mask.dtype}")
    m = None if inplace else ctx.meta()
    shape = tuple(self.shape) if inplace else tuple(m.shape)
    if inplace:
        if broadcast_shapes(shape, tuple(mask.shape)) != shape:
            raise RuntimeError(f"masked_scatter_: mask of shape {list(mask.shape)} cannot be "
                               f"broadcast to self of shape {list(shape)}")
    x = ctx.broadcast(ctx.input(self, "self"), shape)
    N = _prod(shape)
    if N == 0:
        r = x
    else:
        mk = ctx.broadcast(ctx.input(mask, "mask"), shape)
        flat = ctx.reshape(mk, (N,))
        c = ctx.op("cumulative", ctx.convert(flat, I64), kind=REDUCE["sum"], ints=(0,))
        M = source.numel()
        if M == 0:
            # nothing to take: any true element is out of range of the source
            k = ctx.select(flat, _c64(ctx, 1, (N,)), _c64(ctx, 0, (N,)))
            g = ctx.op("gather", ctx.iota(I64, (1,), 0), k, ints=(0,))
            g = ctx.convert(ctx.reshape(g, shape), self.dtype)
        else:
            k = ctx.select(flat, ctx.binary("subtract", c, _c64(ctx, 1, (N,))), _c64(ctx, 0, (N,)))
            src = ctx.reshape(ctx.input(source, "source"), (M,))
            g = ctx.reshape(ctx.op("gather", src, k, ints=(0,)), shape)
        r = ctx.select(mk, g, x)
    if inplace:
        ctx.output_into(r, self, "self")
    else:
        ctx.output(r, like=m)


out_variant("aten::masked_scatter.out", _op("aten::masked_scatter"))


@lowering("torchtpu::unique_bound")
def unique_bound(ctx, self, consecutive, inverse, counts):
    """(count, values, inverse, counts): values[:count] and counts[:count]
    are the unique values (sorted, or runs when consecutive) and their
    counts; inverse maps each element to its unique value."""
    _check_dtypes(self)
    N = self.numel()
    if N == 0:
        ctx.output(_c64(ctx, 0, ()))
        ctx.output(_zeros(ctx, self.dtype, (0,)))
        ctx.output(_zeros(ctx, I64, tuple(self.shape) if inverse else (0,)))
        ctx.output(_zeros(ctx, I64, (0,)))
        return
    x = ctx.reshape(ctx.input(self, "self"), (N,))
    if consecutive:
        s, perm = x, None
    else:
        perm = ctx.op("sort", x, kind=0, ints=(0,))
        s = ctx.op("gather", x, perm, ints=(0,))
    prev = _concat(ctx, [_slice(ctx, s, 0, 0, 1), _slice(ctx, s, 0, 0, N - 1)], 0)
    first = ctx.compare("eq", ctx.iota(I64, (N,), 0), _c64(ctx, 0, (N,)))
    new = ctx.op("or", ctx.compare("ne", s, prev), first)
    ones = ctx.convert(new, I64)
    group = ctx.binary("subtract", ctx.op("cumulative", ones, kind=REDUCE["sum"], ints=(0,)),
                       _c64(ctx, 1, (N,)))
    ctx.output(ctx.reduce("sum", ones, (0,)))
    ctx.output(ctx.op("scatter", _zeros(ctx, self.dtype, (N,)), group, s,
                      kind=SCATTER["replace"], ints=(0,)))
    if inverse:
        inv = group if perm is None else ctx.op(
            "scatter", _zeros(ctx, I64, (N,)), perm, group, kind=SCATTER["replace"], ints=(0,))
        ctx.output(ctx.reshape(inv, tuple(self.shape)))
    else:
        ctx.output(_zeros(ctx, I64, (0,)))
    if counts:
        ctx.output(ctx.op("scatter", _zeros(ctx, I64, (N,)), group, _c64(ctx, 1, (N,)),
                          kind=SCATTER["add"], ints=(0,)))
    else:
        ctx.output(_zeros(ctx, I64, (0,)))


_UNIQUE_BOUND = _op("torchtpu::unique_bound")


def _unique(self, consecutive, return_inverse, return_counts, cause):
    count, vals, inv, cnt = _UNIQUE_BOUND(self, consecutive, bool(return_inverse),
                                          bool(return_counts))
    n = int(count.item())
    _record_sync(cause)
    return vals[:n], inv, cnt[:n] if return_counts else cnt


@composite("aten::_unique2")
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    if _unsupported(self):
        return _host(torch.ops.aten._unique2.default,
                     (self, sorted, return_inverse, return_counts), {}, f"dtype {self.dtype}")
    return _unique(self, False, return_inverse, return_counts, "aten::_unique2")


@composite("aten::_unique")
def unique1(self, sorted=True, return_inverse=False):
    if _unsupported(self):
        return _host(torch.ops.aten._unique.default, (self, sorted, return_inverse), {},
                     f"dtype {self.dtype}")
    v, inv, _ = _unique(self, False, return_inverse, False, "aten::_unique")
    return v, inv


@composite("aten::unique_consecutive")
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    if dim is not None and self.dim() > 1 or _unsupported(self):
        return _host(torch.ops.aten.unique_consecutive.default,
                     (self, return_inverse, return_counts, dim), {},
                     f"dim= on a tensor of rank > 1 or dtype {self.dtype}")
    if dim is not None:
        _wrap(dim, self.dim())
    return _unique(self, True, return_inverse, return_counts, "aten::unique_consecutive")


@lowering("torchtpu::repeats_stats")
def repeats_stats(ctx, repeats):
    """[sum, min] of the repeats (one read for both)."""
    r = _i64(ctx, ctx.input(repeats, "repeats"))
    if repeats.numel() == 0:
        ctx.output(_zeros(ctx, I64, (2,)))
        return
    s = ctx.reshape(ctx.reduce("sum", r, (0,)), (1,))
    mn = ctx.reshape(ctx.reduce("min", r, (0,)), (1,))
    ctx.output(ctx.op("concatenate", s, mn, ints=(0,)))


@lowering("torchtpu::repeats_index")
def repeats_index(ctx, repeats, n):
    """[0]*r0 + [1]*r1 + ... of length n: ones scattered at the first
    position of each run, then a running sum."""
    m = repeats.numel()
    if n == 0 or m == 0:
        ctx.output(_zeros(ctx, repeats.dtype, (n,)))
        return
    r = _i64(ctx, ctx.input(repeats, "repeats"))
    start = ctx.binary("subtract", ctx.op("cumulative", r, kind=REDUCE["sum"], ints=(0,)), r)
    start = ctx.op("clamp", _c64(ctx, 0, (m,)), start, _c64(ctx, n, (m,)))
    marks = ctx.op("scatter", _zeros(ctx, I64, (n + 1,)), start, _c64(ctx, 1, (m,)),
                   kind=SCATTER["add"], ints=(0,))
    idx = ctx.op("cumulative", _slice(ctx, marks, 0, 0, n), kind=REDUCE["sum"], ints=(0,))
    ctx.output(ctx.convert(ctx.binary("subtract", idx, _c64(ctx, 1, (n,))), repeats.dtype))


_REPEATS_STATS = _op("torchtpu::repeats_stats")
_REPEATS_INDEX = _op("torchtpu::repeats_index")


@composite("aten::repeat_interleave.Tensor")
def repeat_interleave(repeats, *, output_size=None):
    if repeats.dim() != 1:
        raise RuntimeError("repeat_interleave only accept 1D vector as repeat")
    if repeats.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("repeats has to be Long or Int tensor")
    if output_size is None:
        total, low = _REPEATS_STATS(repeats).tolist()
        _record_sync("aten::repeat_interleave.Tensor")
        if repeats.numel() and low < 0:
            raise RuntimeError("repeats can not be negative")
        output_size = total
    return _REPEATS_INDEX(repeats, int(output_size))


out_variant("aten::repeat_interleave.Tensor_out", repeat_interleave)


# ------------------------------------------------- flips, rolls, pads


@lowering("aten::flip")
def flip(ctx, self, dims):
    _check_dtypes(self)
    m = ctx.meta()
    x = ctx.input(self, "self")
    ds = sorted({_wrap(d, self.dim()) for d in dims if self.dim()})
    ds = [d for d in ds if self.shape[d] > 1]
    ctx.output(ctx.op("reverse", x, ints=tuple(ds)) if ds and self.numel() else x, like=m)


out_variant("aten::flip.out", _op("aten::flip"))


def _roll1(ctx, x, shift, d):
    n = x.shape[d]
    if n == 0:
        return x
    s = shift % n
    if s == 0:
        return x
    return ctx.op("concatenate", _slice(ctx, x, d, n - s, n), _slice(ctx, x, d, 0, n - s),
                  ints=(d,))


@lowering("aten::roll")
def roll(ctx, self, shifts, dims=()):
    _check_dtypes(self)
    m = ctx.meta()
    x = ctx.input(self, "self")
    shifts, dims = list(shifts), list(dims)
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                               f"dims:{len(dims)}")
        n = self.numel()
        r = ctx.reshape(_roll1(ctx, ctx.reshape(x, (n,)), shifts[0], 0), tuple(self.shape))
    else:
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                               f"dims:{len(dims)}")
        r = x
        for s, d in zip(shifts, dims):
            r = _roll1(ctx, r, s, _wrap(d, self.dim()))
    ctx.output(r, like=m)


out_variant("aten::roll.out", _op("aten::roll"))


@lowering("aten::constant_pad_nd", runtime=("value",))
def constant_pad_nd(ctx, self, pad, value=0):
    _check_dtypes(self)
    m = ctx.meta()
    r = self.dim()
    lo, hi = [0] * r, [0] * r
    for k in range(len(pad) // 2):
        d = r - 1 - k
        lo[d], hi[d] = pad[2 * k], pad[2 * k + 1]
    x = ctx.input(self, "self")
    if m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
        return
    if self.numel() == 0:
        ctx.output(ctx.broadcast(_scalar(ctx, value, "value", self.dtype), tuple(m.shape)), like=m)
        return
    v = _scalar(ctx, value, "value", self.dtype)
    ctx.output(ctx.op("pad", x, v, ints=tuple(lo + hi + [0] * r)), like=m)


out_variant("aten::constant_pad_nd.out", _op("aten::constant_pad_nd"))


def _pad_source(ctx, kind, n, lo, out):
    """For each of the `out` positions along a padded dim, the input
    position (of `n`) it reads."""
    p = ctx.binary("subtract", ctx.iota(I64, (out,), 0), _c64(ctx, lo, (out,)))
    if kind == "reflect":
        top = _c64(ctx, n - 1, (out,))
        p = ctx.unary("abs", p)
        return ctx.binary("subtract", top, ctx.unary("abs", ctx.binary("subtract", top, p)))
    return ctx.op("clamp", _c64(ctx, 0, (out,)), p, _c64(ctx, n - 1, (out,)))


def _pad_plan(self, padding, out_shape):
    """[(dim, n, lo, out)] for the padded dims (the last len(padding)/2)."""
    r = self.dim()
    plan = []
    for k in range(len(padding) // 2):
        d = r - 1 - k
        plan.append((d, self.shape[d], padding[2 * k], out_shape[d]))
    return plan


def _pad_rule(kind):
    def rule(ctx, self, padding):
        _check_dtypes(self)
        m = ctx.meta()
        x = ctx.input(self, "self")
        if m.numel() == 0:
            ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
            return
        for d, n, lo, out in _pad_plan(self, padding, tuple(m.shape)):
            shape = x.shape[:d] + (out,) + x.shape[d + 1:]
            p = _pad_source(ctx, kind, n, lo, out)
            x = ctx.op("gather", x, _index_along(ctx, p, shape, d), ints=(d,))
        ctx.output(x, like=m)

    return rule


def _pad_backward_rule(kind):
    def rule(ctx, grad_output, self, padding):
        _check_dtypes(self, grad_output)
        m = ctx.meta()
        dt = _opmath(grad_output.dtype)
        g = ctx.convert(ctx.input(grad_output, "grad_output"), dt)
        if m.numel() == 0 or grad_output.numel() == 0:
            ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
            return
        plan = _pad_plan(self, padding, tuple(grad_output.shape))
        for d, n, lo, out in plan:
            shape = g.shape[:d] + (n,) + g.shape[d + 1:]
            p = _pad_source(ctx, kind, n, lo, out)
            g = ctx.op("scatter", _zeros(ctx, dt, shape), _index_along(ctx, p, g.shape, d), g,
                       kind=SCATTER["add"], ints=(d,))
        ctx.output(g, like=m)

    return rule


for _k, _kind in (("reflection", "reflect"), ("replication", "replicate")):
    for _nd in (1, 2, 3):
        _base = f"aten::{_k}_pad{_nd}d"
        lowering(_base)(_pad_rule(_kind))
        out_variant(_base + ".out", _op(_base))
        lowering(_base + "_backward")(_pad_backward_rule(_kind))
        out_variant(_base + "_backward.grad_input", _op(_base + "_backward"))


# ---------------------------------------------------------- *_scatter


def _place(ctx, x, src, d, start, step):
    """x with src written at start, start+step, ... along d (a strided slice
    of x the size of src)."""
    L = src.shape[d]
    if L == 0:
        return x
    n = x.shape[d]
    r = x.rank
    lo, hi, interior = [0] * r, [0] * r, [0] * r
    lo[d] = start
    hi[d] = n - (start + (L - 1) * step + 1)
    interior[d] = step - 1
    placed = ctx.op("pad", ctx.convert(src, x.dtype), ctx.const(0, x.dtype),
                    ints=tuple(lo + hi + interior))
    i = ctx.binary("subtract", ctx.iota(I64, (n,), 0), _c64(ctx, start, (n,)))
    hit = ctx.op("and", ctx.compare("ge", i, _c64(ctx, 0, (n,))),
                 ctx.compare("lt", i, _c64(ctx, L * step, (n,))))
    if step > 1:
        hit = ctx.op("and", hit, ctx.compare(
            "eq", ctx.binary("remainder", i, _c64(ctx, step, (n,))), _c64(ctx, 0, (n,))))
    return ctx.select(_along(ctx, hit, x.shape, d), placed, x)


@lowering("aten::slice_scatter")
def slice_scatter(ctx, self, src, dim=0, start=None, end=None, step=1):
    _check_dtypes(self, src)
    m = ctx.meta()
    d = _wrap(dim, self.dim())
    n = self.shape[d]
    s, _, _ = slice(start, end, step).indices(n)
    x = ctx.input(self, "self")
    ctx.output(_place(ctx, x, ctx.input(src, "src"), d, s, step), like=m)


@lowering("aten::select_scatter")
def select_scatter(ctx, self, src, dim, index):
    _check_dtypes(self, src)
    m = ctx.meta()
    d = _wrap(dim, self.dim())
    i = index + self.shape[d] if index < 0 else index
    shape = tuple(self.shape[:d]) + (1,) + tuple(self.shape[d + 1:])
    s = ctx.reshape(ctx.input(src, "src"), shape)
    ctx.output(_place(ctx, ctx.input(self, "self"), s, d, i, 1), like=m)


@lowering("aten::diagonal_scatter")
def diagonal_scatter(ctx, self, src, offset=0, dim1=0, dim2=1):
    _check_dtypes(self, src)
    m = ctx.meta()
    r = self.dim()
    d1, d2 = _wrap(dim1, r), _wrap(dim2, r)
    S = tuple(self.shape)
    x = ctx.input(self, "self")
    L = src.shape[-1] if src.dim() else 0
    if L == 0 or self.numel() == 0:
        ctx.output(x, like=m)
        return
    # diagonal element k sits at (k + max(-offset, 0), k + max(offset, 0)):
    # lay src's last dim along d1 (offset >= 0) or d2 (offset < 0), padded
    # to that dim's size, and broadcast it over the other one
    along = d1 if offset >= 0 else d2
    s = ctx.convert(ctx.input(src, "src"), self.dtype)
    k = src.dim() - 1
    hi = [0] * src.dim()
    hi[k] = S[along] - L
    s = ctx.op("pad", s, ctx.const(0, self.dtype), ints=tuple([0] * src.dim() + hi + [0] * src.dim()))
    rest = [d for d in range(r) if d not in (d1, d2)]
    src_dim = {d: i for i, d in enumerate(rest)}
    src_dim[along] = k
    order = sorted(rest + [along])
    s = ctx.transpose(s, [src_dim[d] for d in order])
    b = ctx.broadcast_in_dim(s, S, tuple(order))
    diff = ctx.binary("subtract", ctx.iota(I64, S, d2), ctx.iota(I64, S, d1))
    on = ctx.compare("eq", diff, _c64(ctx, offset, S))
    ctx.output(ctx.select(on, b, x), like=m)


@lowering("aten::as_strided_scatter")
def as_strided_scatter(ctx, self, src, size, stride, storage_offset=None):
    _check_dtypes(self, src)
    if not self.is_contiguous():
        raise NotLowerable("as_strided_scatter into a non-contiguous tensor")
    m = ctx.meta()
    x = ctx.input(self, "self")
    n_src = _prod(size)
    N = self.numel()
    if n_src == 0 or N == 0:
        ctx.output(x, like=m)
        return
    off = storage_offset or 0
    pos = _c64(ctx, off, tuple(size))
    for k, (sz, st) in enumerate(zip(size, stride)):
        if sz > 1 and st:
            pos = ctx.binary("add", pos, ctx.binary(
                "multiply", ctx.iota(I64, tuple(size), k), _c64(ctx, st, tuple(size))))
    flat = ctx.reshape(x, (N,))
    s = ctx.reshape(ctx.convert(ctx.input(src, "src"), self.dtype), (n_src,))
    r = ctx.op("scatter", flat, ctx.reshape(pos, (n_src,)), s, kind=SCATTER["replace"], ints=(0,))
    ctx.output(ctx.reshape(r, tuple(self.shape)), like=m)


for _name in ("slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter"):
    out_variant(f"aten::{_name}.out", _op(f"aten::{_name}"))


@lowering("aten::unfold_backward")
def unfold_backward(ctx, grad_in, input_sizes, dim, size, step):
    """Each window element adds into input position w*step + k."""
    _check_dtypes(grad_in)
    m = ctx.meta()
    S = tuple(input_sizes)
    r = len(S)
    d = _wrap(dim, r)
    dt = _opmath(grad_in.dtype)
    if grad_in.numel() == 0 or m.numel() == 0:
        ctx.output(_zeros(ctx, m.dtype, m.shape), like=m)
        return
    g = ctx.convert(ctx.input(grad_in, "grad_in"), dt)
    if r == 0:
        ctx.output(ctx.reshape(ctx.reduce("sum", g, tuple(range(g.rank))), ()), like=m)
        return
    W = grad_in.shape[d]
    # (..., W, ..., K) -> (..., W, K, ...) -> (..., W*K, ...)
    perm = list(range(d + 1)) + [r] + list(range(d + 1, r))
    g = ctx.transpose(g, perm)
    shape = S[:d] + (W * size,) + S[d + 1:]
    g = ctx.reshape(g, shape)
    w = ctx.iota(I64, (W, size), 0)
    k = ctx.iota(I64, (W, size), 1)
    pos = ctx.binary("add", ctx.binary("multiply", w, _c64(ctx, step, (W, size))), k)
    pos = ctx.reshape(pos, (W * size,))
    out = ctx.op("scatter", _zeros(ctx, dt, S), _index_along(ctx, pos, shape, d), g,
                 kind=SCATTER["add"], ints=(d,))
    ctx.output(out, like=m)


# ------------------------------------------------------------- sorting


def _sorted(ctx, self, dim, descending):
    """(values, indices) of self sorted along dim (stable; NaN largest)."""
    x = ctx.input(self, "self")
    if x.rank == 0:
        return x, _c64(ctx, 0, ())
    idx = ctx.op("sort", x, kind=int(bool(descending)), ints=(dim,))
    return ctx.op("gather", x, idx, ints=(dim,)), idx


@lowering("aten::sort", "aten::sort.stable")
def sort(ctx, self, *args, **kw):
    _check_dtypes(self)
    if ctx.name == "aten::sort.stable":
        dim, descending = kw.get("dim", -1), kw.get("descending", False)
    else:
        dim = args[0] if len(args) > 0 else kw.get("dim", -1)
        descending = args[1] if len(args) > 1 else kw.get("descending", False)
    mv, mi = ctx.meta()
    if self.numel() == 0:
        ctx.output(_zeros(ctx, mv.dtype, mv.shape), like=mv)
        ctx.output(_zeros(ctx, I64, mi.shape), like=mi)
        return
    v, i = _sorted(ctx, self, _wrap(dim, self.dim()), descending)
    ctx.output(v, like=mv)
    ctx.output(i, like=mi)


out_variant("aten::sort.values_stable", _op("aten::sort.stable"))
out_variant("aten::sort.values", _op("aten::sort"))


@lowering("aten::topk")
def topk(ctx, self, k, dim=-1, largest=True, sorted=True):
    _check_dtypes(self)
    mv, mi = ctx.meta()
    if mv.numel() == 0:
        ctx.output(_zeros(ctx, mv.dtype, mv.shape), like=mv)
        ctx.output(_zeros(ctx, I64, mi.shape), like=mi)
        return
    x = ctx.input(self, "self")
    if x.rank == 0:
        ctx.output(x, like=mv)
        ctx.output(_c64(ctx, 0, ()), like=mi)
        return
    d = _wrap(dim, self.dim())
    idx = ctx.op("sort", x, kind=int(bool(largest)), ints=(d,))
    idx = _slice(ctx, idx, d, 0, k)
    ctx.output(ctx.op("gather", x, idx, ints=(d,)), like=mv)
    ctx.output(idx, like=mi)


out_variant("aten::topk.values", _op("aten::topk"))


@lowering("aten::kthvalue")
def kthvalue(ctx, self, k, dim=-1, keepdim=False):
    _check_dtypes(self)
    mv, mi = ctx.meta()
    x = ctx.input(self, "self")
    if x.rank == 0:
        ctx.output(x, like=mv)
        ctx.output(_c64(ctx, 0, ()), like=mi)
        return
    if mv.numel() == 0:
        ctx.output(_zeros(ctx, mv.dtype, mv.shape), like=mv)
        ctx.output(_zeros(ctx, I64, mi.shape), like=mi)
        return
    d = _wrap(dim, self.dim())
    idx = _slice(ctx, ctx.op("sort", x, kind=0, ints=(d,)), d, k - 1, k)
    v = ctx.op("gather", x, idx, ints=(d,))
    ctx.output(ctx.reshape(v, tuple(mv.shape)), like=mv)
    ctx.output(ctx.reshape(idx, tuple(mi.shape)), like=mi)


out_variant("aten::kthvalue.values", _op("aten::kthvalue"))


@lowering("torchtpu::randperm_fill_")
def randperm_fill_(ctx, self):
    """A random permutation: the order of random 64-bit keys."""
    n = self.numel()
    if n == 0:
        ctx.output_into(_zeros(ctx, self.dtype, tuple(self.shape)), self, "self")
        return
    keys = ctx.rng("bits", torch.uint64, (n,))
    ctx.output_into(ctx.op("sort", keys, kind=0, ints=(0,)), self, "self")


_RANDPERM_FILL = _op("torchtpu::randperm_fill_")


def _randperm_out(n, *, generator=None, out):
    if generator is not None:
        return _host(torch.ops.aten.randperm.generator_out, (n,),
                     {"generator": generator, "out": out}, "explicit generator")
    meta_check(torch.ops.aten.randperm.out, (n,), {"out": out})
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    if out.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                         torch.float32, torch.float64, torch.bfloat16, torch.float16):
        raise RuntimeError(f"randperm is not implemented for {out.dtype}")
    resize_out(out, (n,))
    return _RANDPERM_FILL(out)


composite("aten::randperm.generator_out")(_randperm_out)
composite("aten::randperm.out")(lambda n, *, out: _randperm_out(n, out=out))


# ---------------------------------------------------- triangles, eye


def _triangle(lower):
    def rule(ctx, self, diagonal=0):
        _check_dtypes(self)
        inplace = ctx.name.endswith("_")
        m = None if inplace else ctx.meta()
        if self.dim() < 2:
            raise RuntimeError(f"{'tril' if lower else 'triu'}: input tensor must have at "
                               "least 2 dimensions")
        x = ctx.input(self, "self")
        S = x.shape
        r = len(S)
        if self.numel():
            col_minus_row = ctx.binary("subtract", ctx.iota(I64, S[-2:], 1), ctx.iota(I64, S[-2:], 0))
            keep = ctx.compare("le" if lower else "ge", col_minus_row, _c64(ctx, diagonal, S[-2:]))
            keep = ctx.broadcast_in_dim(keep, S, (r - 2, r - 1))
            x = ctx.select(keep, x, ctx.const(0, self.dtype, S))
        if inplace:
            ctx.output_into(x, self, "self")
        else:
            ctx.output(x, like=m)

    return rule


lowering("aten::tril", "aten::tril_")(_triangle(True))
lowering("aten::triu", "aten::triu_")(_triangle(False))
out_variant("aten::tril.out", _op("aten::tril"))
out_variant("aten::triu.out", _op("aten::triu"))


@lowering("torchtpu::eye_fill_")
def eye_fill_(ctx, self):
    S = tuple(self.shape)
    if self.numel() == 0:
        ctx.output_into(_zeros(ctx, self.dtype, S), self, "self")
        return
    on = ctx.compare("eq", ctx.iota(I64, S, 0), ctx.iota(I64, S, 1))
    ctx.output_into(ctx.convert(on, self.dtype), self, "self")


_EYE_FILL = _op("torchtpu::eye_fill_")


def _eye_out(n, m=None, *, out):
    m = n if m is None else m
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    if _unsupported(out):
        return _host(torch.ops.aten.eye.m_out, (n, m), {"out": out}, f"dtype {out.dtype}")
    resize_out(out, (n, m))
    return _EYE_FILL(out)


composite("aten::eye.out")(lambda n, *, out: _eye_out(n, out=out))
composite("aten::eye.m_out")(_eye_out)

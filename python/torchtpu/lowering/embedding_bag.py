"""embedding_bag: forward (sum / mean / max), its backward ops, and
embedding_renorm_.

Output shapes depend only on the lengths of indices and offsets, so nothing
is read back to the host. Bags come from the offsets as on CPU: an index at
position n belongs to bag (number of offsets <= n) - 1 (``offset2bag``), the
last bag running to the end of indices. Indices are bounds-checked by the
gathers and scatters that use them, and offsets (offsets[0] == 0, increasing,
offsets[-1] <= len(indices)) by gathers from small tables: a bad value
poisons the results and raises an IndexError naming the op at the next sync.
The four results have the shapes and values CPU gives them (offset2bag is
empty on CPU's fast path for mode 'sum'; bag_size and max_indices are zeros
there).
"""
import torch

from .._registry import lowering
from .ctx import NotLowerable

I64 = torch.int64
SUM, MEAN, MAX = 0, 1, 2
SCATTER_ADD, SCATTER_MAX, SCATTER_MIN = 1, 3, 4
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_CPU_TYPE = {
    torch.float32: "torch.FloatTensor", torch.float64: "torch.DoubleTensor",
    torch.float16: "torch.HalfTensor", torch.bfloat16: "CPUBFloat16Type",
    torch.int64: "torch.LongTensor", torch.int32: "torch.IntTensor",
    torch.int16: "torch.ShortTensor", torch.int8: "torch.CharTensor",
    torch.uint8: "torch.ByteTensor", torch.bool: "torch.BoolTensor",
}


def _acc(dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _type_name(dtype):
    return _CPU_TYPE.get(dtype, str(dtype))


def _check_types(name, dtype, allowed, names):
    if dtype not in allowed:
        raise RuntimeError(
            f"Expected tensor for argument #1 '{name}' to have one of the following scalar "
            f"types: {names}; but got {_type_name(dtype)} instead (while checking arguments "
            f"for embedding_bag)")


def _check_index_types(indices, offsets):
    """Indices and offsets are promoted to a common type first, as on CPU."""
    common = torch.promote_types(indices.dtype, offsets.dtype)
    _check_types("indices", common, (torch.int64, torch.int32), "Long, Int")
    return common


def _check_contiguous(name, t):
    if not t.is_contiguous():
        raise RuntimeError(f"Expected contiguous tensor, but got non-contiguous tensor for "
                           f"argument #1 '{name}' (while checking arguments for embedding_bag)")


def _check_weight_type(dtype):
    _check_types("weight", dtype, _FLOATS, "Half, BFloat16, Float, Double")


def _unsupported(*ts):
    for t in ts:
        if t is not None and (t.is_complex() or t.layout != torch.strided):
            raise NotLowerable("embedding_bag of this layout/dtype")


def _c64(ctx, value, shape):
    return ctx.const(value, I64, tuple(shape)) if shape else ctx.const(value, I64)


def _slice(ctx, v, start, limit, dim=0):
    starts = [0] * v.rank
    limits = list(v.shape)
    starts[dim], limits[dim] = start, limit
    return ctx.op("slice", v, ints=starts + limits + [1] * v.rank)


def _rows(ctx, v, n, d):
    """A length-n vector laid along the rows of an [n, d] array."""
    return ctx.broadcast_in_dim(v, (n, d), (0,))


def _idx(ctx, t, name):
    return ctx.convert(ctx.input(t, name), I64)


def _out(ctx, v):
    strides, s = [], 1
    for n in reversed(v.shape):
        strides.append(s)
        s *= max(n, 1)
    ctx.output(v, strides=tuple(reversed(strides)))


def _offset2bag(ctx, offsets, n):
    """Bag of each of the n indices: ones scattered at the offsets, summed,
    minus one (CPU's make_offset2bag; offsets beyond n raise)."""
    o = offsets.shape[0]
    marks = ctx.op("scatter", _c64(ctx, 0, (n + 1,)), offsets, _c64(ctx, 1, (o,)),
                   kind=SCATTER_ADD, ints=(0,))
    run = ctx.op("cumulative", _slice(ctx, marks, 0, n), kind=0, ints=(0,))
    return ctx.materialize(ctx.binary("subtract", run, _c64(ctx, 1, (n,))))


def _checked_offsets(ctx, off, n):
    """offsets checked on the device: offsets[0] == 0, each step >= 0 and
    offsets[-1] <= n; gathers from tables of the allowed values raise for
    anything else. Returns the offsets and a zero (rank 0) that depends on
    every check; the offsets carry it too, so any use of them runs all the
    checks."""
    o = off.shape[0]
    first = ctx.op("gather", _c64(ctx, 0, (1,)), _slice(ctx, off, 0, 1), ints=(0,))
    checks = [first]
    if o > 1:
        table = ctx.iota(I64, (n + 1,), 0)
        step = ctx.binary("subtract", _slice(ctx, off, 1, o), _slice(ctx, off, 0, o - 1))
        checks.append(ctx.op("gather", table, step, ints=(0,)))
        checks.append(ctx.op("gather", table, _slice(ctx, off, o - 1, o), ints=(0,)))
    low = [ctx.reduce("min", c, [0]) for c in checks]
    token = low[0]
    for v in low[1:]:
        token = ctx.binary("minimum", token, v)
    token = ctx.materialize(ctx.binary("multiply", token, _c64(ctx, 0, ())))
    return ctx.binary("add", off, ctx.broadcast(token, (o,))), token


def _bag_sizes(ctx, off, nb, n):
    """CPU's bag_size before padding: offsets[b + 1] - offsets[b], the last
    bag running to n."""
    last = ctx.binary("subtract", _c64(ctx, n, (1,)), _slice(ctx, off, nb - 1, nb))
    if nb == 1:
        return last
    steps = ctx.binary("subtract", _slice(ctx, off, 1, nb), _slice(ctx, off, 0, nb - 1))
    return ctx.op("concatenate", steps, last, ints=(0,))


def _not_padding(ctx, idx, padding_idx):
    if padding_idx < 0:
        return None
    return ctx.compare("ne", idx, _c64(ctx, padding_idx, idx.shape))


def _fast_path(weight, per_sample_weights, padding_idx):
    """CPU's fast path for sum/mean (bags read straight from the offsets,
    offset2bag not materialized for 'sum')."""
    ok = (weight.dtype in (torch.float32, torch.float16, torch.bfloat16)
          and weight.stride(1) == 1 and padding_idx < 0)
    if per_sample_weights is not None:
        ok = ok and per_sample_weights.stride(0) == 1
    return ok


def _max_bags(ctx, v, bag, keep, n, nb, d):
    """mode='max' as CPU's loop computes it: per bag and column, the first
    element, replaced by any later strictly greater one (so a leading NaN
    sticks and later NaNs are skipped). Returns (values, winning positions,
    non-empty mask)."""
    dt = v.dtype
    pos = ctx.iota(I64, (n,), 0)
    route = bag if keep is None else ctx.select(keep, bag, _c64(ctx, nb, (n,)))
    route = ctx.materialize(route)
    isnan = ctx.compare("ne", v, v)
    ninf = ctx.const(float("-inf"), dt, (n, d))
    best = ctx.op("scatter", ctx.const(float("-inf"), dt, (nb + 1, d)), _rows(ctx, route, n, d),
                  ctx.select(isnan, ninf, v), kind=SCATTER_MAX, ints=(0,))
    best = _slice(ctx, best, 0, nb)
    first = ctx.op("scatter", _c64(ctx, n, (nb + 1,)), route, pos, kind=SCATTER_MIN, ints=(0,))
    first = ctx.materialize(_slice(ctx, first, 0, nb))
    nonempty = ctx.compare("lt", first, _c64(ctx, n, (nb,)))
    safe = ctx.select(nonempty, first, _c64(ctx, 0, (nb,)))
    fv = ctx.op("gather", v, _rows(ctx, safe, nb, d), ints=(0,))
    fnan = ctx.compare("ne", fv, fv)
    top = ctx.select(fnan, fv, best)
    # positions that hold the bag's result: equal to it, or its leading NaN
    top_n = ctx.op("gather", top, _rows(ctx, bag, n, d), ints=(0,))
    fnan_n = ctx.op("gather", ctx.convert(fnan, I64), _rows(ctx, bag, n, d), ints=(0,))
    lead = ctx.compare("eq", pos, ctx.op("gather", first, bag, ints=(0,)))
    lead = ctx.op("and", _rows(ctx, lead, n, d), ctx.compare("ne", fnan_n, _c64(ctx, 0, (n, d))))
    cand = ctx.op("or", ctx.compare("eq", v, top_n), lead)
    if keep is not None:
        cand = ctx.op("and", cand, _rows(ctx, keep, n, d))
    at = ctx.op("scatter", _c64(ctx, n, (nb, d)), _rows(ctx, bag, n, d),
                ctx.select(cand, _rows(ctx, pos, n, d), _c64(ctx, n, (n, d))),
                kind=SCATTER_MIN, ints=(0,))
    return top, at, nonempty


def _bag_forward(ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                 padding_idx, requires_grad):
    _unsupported(weight, indices, offsets, per_sample_weights)
    if weight.dim() != 2:
        raise RuntimeError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                           f"{weight.dim()}")
    if offsets.dim() != 1:
        raise RuntimeError(f"offsets has to be a 1D Tensor, but got Tensor of dimension "
                           f"{offsets.dim()}")
    if indices.dim() > 2:
        raise RuntimeError(f"input has to be a 1D or 2D Tensor, but got Tensor of dimension "
                           f"{indices.dim()}")
    itype = _check_index_types(indices, offsets)
    _check_weight_type(weight.dtype)
    psw = per_sample_weights
    if psw is not None:
        if mode != SUM:
            raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
        if psw.dtype != weight.dtype:
            raise RuntimeError(
                f"Expected tensor for argument #1 'weight' to have the same type as tensor for "
                f"argument #1 'per_sample_weights'; but type {_type_name(weight.dtype)} does not "
                f"equal {_type_name(psw.dtype)} (while checking arguments for embedding_bag)")
        if psw.dim() != 1:
            raise RuntimeError("Expected per_sample_weights.value().dim() == 1 to be true, but "
                               "got false.  (Could this error message be improved?  If so, "
                               "please report an enhancement request to PyTorch.)")
        if psw.numel() != indices.numel():
            raise RuntimeError("Expected per_sample_weights.value().numel() == indices.numel() "
                               "to be true, but got false.  (Could this error message be "
                               "improved?  If so, please report an enhancement request to "
                               "PyTorch.)")
    if include_last_offset and offsets.shape[0] < 1:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")
    if mode not in (SUM, MEAN, MAX):
        raise RuntimeError("`mode` must be sum, mean, or max.")
    if indices.dim() != 1:
        raise NotLowerable("embedding_bag with 2-D indices (CPU reads them as rows)")

    wdt = weight.dtype
    acc = _acc(wdt)
    n, d = indices.shape[0], weight.shape[1]
    o = offsets.shape[0]
    nb = o - (1 if include_last_offset else 0)
    fast = mode != MAX and _fast_path(weight, psw, padding_idx)

    off, token = _checked_offsets(ctx, _idx(ctx, offsets, "offsets"), n) if o else (None, None)
    idx = _idx(ctx, indices, "indices") if n else None
    bag = _offset2bag(ctx, _slice(ctx, off, 0, nb), n) if n and nb else None
    keep = _not_padding(ctx, idx, padding_idx) if n else None

    sizes = None
    if nb and (mode != SUM):
        sizes = _bag_sizes(ctx, off, nb, n)
        if keep is not None:
            pad = ctx.convert(ctx.op("not", keep), I64)
            pads = ctx.op("scatter", _c64(ctx, 0, (nb,)), bag, pad, kind=SCATTER_ADD, ints=(0,))
            sizes = ctx.binary("subtract", sizes, pads)

    maxidx = None
    if nb == 0 or d == 0 or n == 0:
        out = ctx.const(0, wdt, (nb, d))
        if mode == MAX:
            maxidx = _c64(ctx, 0, (nb, d))
    elif mode == MAX:
        rows = ctx.op("gather", ctx.input(weight, "weight"), _rows(ctx, idx, n, d), ints=(0,))
        top, at, nonempty = _max_bags(ctx, ctx.convert(rows, acc), bag, keep, n, nb, d)
        full = _rows(ctx, nonempty, nb, d)
        out = ctx.select(full, top, ctx.const(0, acc, (nb, d)))
        safe = ctx.select(full, at, _c64(ctx, 0, (nb, d)))
        maxidx = ctx.select(full, ctx.op("gather", _rows(ctx, idx, n, d), safe, ints=(0,)),
                            _c64(ctx, 0, (nb, d)))
    else:
        rows = ctx.op("gather", ctx.input(weight, "weight"), _rows(ctx, idx, n, d), ints=(0,))
        vals = ctx.convert(rows, acc)
        if psw is not None:
            vals = ctx.binary("multiply", vals,
                              _rows(ctx, ctx.convert(ctx.input(psw, "per_sample_weights"), acc),
                                    n, d))
        use = keep
        if fast and include_last_offset:
            # the fast path stops each bag at the next offset, the last one too
            end = ctx.broadcast(_slice(ctx, off, nb, nb + 1), (n,))
            inside = ctx.compare("lt", ctx.iota(I64, (n,), 0), end)
            use = inside if use is None else ctx.op("and", use, inside)
        route = bag if use is None else ctx.select(use, bag, _c64(ctx, nb, (n,)))
        out = ctx.op("scatter", ctx.const(0, acc, (nb + 1, d)), _rows(ctx, route, n, d), vals,
                     kind=SCATTER_ADD, ints=(0,))
        out = _slice(ctx, out, 0, nb)
        if mode == MEAN:
            div = ctx.binary("maximum", sizes, _c64(ctx, 1, (nb,)))
            div = ctx.convert(ctx.convert(div, wdt), acc)
            out = ctx.binary("divide", ctx.convert(ctx.convert(out, wdt), acc),
                             _rows(ctx, div, nb, d))
    _out(ctx, ctx.convert(out, wdt))

    if mode == SUM and fast:
        _out(ctx, ctx.const(0, itype, (0,)))
    elif bag is None:
        # no bags: every index is before the first one (CPU's -1)
        _out(ctx, ctx.const(-1, itype, (n,)))
    else:
        _out(ctx, ctx.convert(bag, itype))
    if mode == SUM:
        shape = (nb,) if requires_grad else (o,)
        zeros = _c64(ctx, 0, shape) if token is None else ctx.broadcast(token, shape)
        _out(ctx, ctx.convert(zeros, itype))
        _out(ctx, ctx.convert(zeros, itype))
        return
    sizes = sizes if sizes is not None else _c64(ctx, 0, (nb,))
    _out(ctx, ctx.convert(sizes, itype))
    _out(ctx, ctx.convert(maxidx if mode == MAX else sizes, itype))


@lowering("aten::_embedding_bag", "aten::_embedding_bag_forward_only")
def embedding_bag(ctx, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    _bag_forward(ctx, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                 padding_idx, requires_grad=ctx.name == "aten::_embedding_bag")


# ------------------------------------------------------------ backward


def _bags_of(ctx, indices, offsets, offset2bag):
    """offset2bag as the backward ops take it: recomputed from all offsets
    when the forward's fast path left it empty."""
    n = indices.shape[0]
    if n != 0 and offset2bag.numel() == 0:
        return _offset2bag(ctx, _idx(ctx, offsets, "offsets"), n)
    _check_types("offset2bag", offset2bag.dtype, (torch.int64, torch.int32), "Long, Int")
    _check_contiguous("offset2bag", offset2bag)
    if offset2bag.dim() != 1 or offset2bag.shape[0] != n:
        raise NotLowerable("offset2bag of another length than indices")
    return _idx(ctx, offset2bag, "offset2bag")


def _freq_counts(ctx, idx, num_weights):
    """The count CPU divides each index's gradient by under
    scale_grad_by_freq: its loop over the distinct sorted indices looks the
    count up for the i-th sorted index (i = the distinct index's rank), not
    for the index itself; reproduced here."""
    n = idx.shape[0]
    counts = ctx.op("scatter", _c64(ctx, 0, (num_weights,)), idx, _c64(ctx, 1, (n,)),
                    kind=SCATTER_ADD, ints=(0,))
    present = ctx.convert(ctx.compare("gt", counts, _c64(ctx, 0, (num_weights,))), I64)
    rank = ctx.binary("subtract", ctx.op("cumulative", present, kind=0, ints=(0,)), present)
    ordered = ctx.op("gather", idx, ctx.op("sort", idx, kind=0, ints=(0,)), ints=(0,))
    k = ctx.op("gather", rank, idx, ints=(0,))
    return ctx.op("gather", counts, ctx.op("gather", ordered, k, ints=(0,)), ints=(0,))


def _dense_backward(ctx, grad, indices, bag, bag_size, maximum_indices, num_weights,
                    scale_grad_by_freq, mode, per_sample_weights, padding_idx):
    _check_types("grad_", grad.dtype, _FLOATS, "Half, BFloat16, Float, Double")
    gdt = grad.dtype
    acc = _acc(gdt)
    if grad.dim() != 2:
        raise NotLowerable("embedding_bag backward of a grad that is not 2-D")
    nb, d = grad.shape
    n = indices.shape[0]
    zero = ctx.const(0, acc, (num_weights, d))
    if mode == MAX:
        if maximum_indices is None or tuple(maximum_indices.shape) != (nb, d) or \
                tuple(bag_size.shape) != (nb,):
            raise NotLowerable("max backward with mismatched bag_size/max_indices")
        if nb == 0 or d == 0:
            _out(ctx, ctx.convert(zero, gdt))
            return
        full = _rows(ctx, ctx.compare("ne", _idx(ctx, bag_size, "bag_size"), _c64(ctx, 0, (nb,))),
                     nb, d)
        at = ctx.select(full, _idx(ctx, maximum_indices, "maximum_indices"),
                        _c64(ctx, 0, (nb, d)))
        g = ctx.convert(ctx.input(grad, "grad"), acc)
        g = ctx.select(full, g, ctx.const(0, acc, (nb, d)))
        r = ctx.op("scatter", zero, at, g, kind=SCATTER_ADD, ints=(0,))
        _out(ctx, ctx.convert(r, gdt))
        return
    if mode not in (SUM, MEAN):
        raise RuntimeError("mode == EmbeddingBagMode::MEAN || mode == EmbeddingBagMode::SUM "
                           "INTERNAL ASSERT FAILED")
    if n == 0 or d == 0:
        _out(ctx, ctx.convert(zero, gdt))
        return
    idx = _idx(ctx, indices, "indices")
    g = ctx.op("gather", ctx.convert(ctx.input(grad, "grad"), acc), _rows(ctx, bag, n, d),
               ints=(0,))
    scale = None
    if per_sample_weights is not None:
        scale = ctx.convert(ctx.input(per_sample_weights, "per_sample_weights"), acc)
    if scale_grad_by_freq:
        c = ctx.convert(_freq_counts(ctx, idx, num_weights), acc)
        scale = ctx.binary("divide", scale if scale is not None else ctx.const(1, acc, (n,)), c)
    if mode == MEAN:
        if bag_size.dim() != 1:
            raise NotLowerable("bag_size that is not 1-D")
        bs = ctx.op("gather", _idx(ctx, bag_size, "bag_size"), bag, ints=(0,))
        has = ctx.compare("ne", bs, _c64(ctx, 0, (n,)))
        base = scale if scale is not None else ctx.const(1, acc, (n,))
        scale = ctx.select(has, ctx.binary("divide", base, ctx.convert(bs, acc)), base)
    if scale is not None:
        # CPU rounds the scale and each product to the gradient's dtype
        scale = ctx.convert(ctx.convert(scale, gdt), acc)
        g = ctx.convert(ctx.convert(ctx.binary("multiply", g, _rows(ctx, scale, n, d)), gdt), acc)
    keep = _not_padding(ctx, idx, padding_idx)
    if keep is not None:
        g = ctx.select(_rows(ctx, keep, n, d), g, ctx.const(0, acc, (n, d)))
    r = ctx.op("scatter", zero, _rows(ctx, idx, n, d), g, kind=SCATTER_ADD, ints=(0,))
    _out(ctx, ctx.convert(r, gdt))


@lowering("aten::_embedding_bag_backward")
def embedding_bag_backward(ctx, grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse,
                           per_sample_weights=None, padding_idx=-1):
    _unsupported(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                 per_sample_weights)
    if sparse:
        raise NotLowerable("sparse embedding_bag gradient")
    _check_index_types(indices, offsets)
    _check_contiguous("indices", indices)
    _check_contiguous("offsets", offsets)
    if indices.dim() != 1 or offsets.dim() != 1:
        raise NotLowerable("embedding_bag backward of indices/offsets that are not 1-D")
    bag = _bags_of(ctx, indices, offsets, offset2bag) if mode != MAX else None
    _dense_backward(ctx, grad, indices, bag, bag_size, maximum_indices, num_weights,
                    scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering("aten::_embedding_bag_dense_backward")
def embedding_bag_dense_backward(ctx, grad, indices, offset2bag, bag_size, maximum_indices,
                                 num_weights, scale_grad_by_freq, mode, per_sample_weights=None,
                                 padding_idx=-1):
    _unsupported(grad, indices, offset2bag, bag_size, maximum_indices, per_sample_weights)
    if indices.dtype not in (torch.int64, torch.int32) or indices.dim() != 1:
        raise NotLowerable("dense backward of these indices")
    n = indices.shape[0]
    if mode == MAX:
        bag = None
    else:
        if offset2bag.dtype not in (torch.int64, torch.int32) or tuple(offset2bag.shape) != (n,):
            raise NotLowerable("dense backward of this offset2bag")
        bag = _idx(ctx, offset2bag, "offset2bag") if n else None
    _dense_backward(ctx, grad, indices, bag, bag_size, maximum_indices, num_weights,
                    scale_grad_by_freq, mode, per_sample_weights, padding_idx)


@lowering("aten::_embedding_bag_per_sample_weights_backward")
def embedding_bag_per_sample_weights_backward(ctx, grad, weight, indices, offsets, offset2bag,
                                              mode, padding_idx=-1):
    _unsupported(grad, weight, indices, offsets, offset2bag)
    if mode != SUM:
        raise RuntimeError("embedding_bag_backward: per_sample_weights only supported for "
                           "mode='sum'")
    if grad.dim() != 2 or weight.dim() != 2 or indices.dim() != 1 or \
            weight.shape[1] != grad.shape[1] or grad.dtype != weight.dtype:
        raise NotLowerable("per-sample-weights backward of these shapes")
    _check_index_types(indices, offsets)
    _check_contiguous("indices", indices)
    gdt = grad.dtype
    acc = _acc(gdt)
    n, d = indices.shape[0], grad.shape[1]
    if n == 0 or d == 0:
        _out(ctx, ctx.const(0, gdt, (n,)))
        return
    bag = _bags_of(ctx, indices, offsets, offset2bag)
    idx = _idx(ctx, indices, "indices")
    g = ctx.op("gather", ctx.input(grad, "grad"), _rows(ctx, bag, n, d), ints=(0,))
    w = ctx.op("gather", ctx.input(weight, "weight"), _rows(ctx, idx, n, d), ints=(0,))
    r = ctx.reduce("sum", ctx.binary("multiply", ctx.convert(g, acc), ctx.convert(w, acc)), [1])
    keep = _not_padding(ctx, idx, padding_idx)
    if keep is not None:
        r = ctx.select(keep, r, ctx.const(0, acc, (n,)))
    _out(ctx, ctx.convert(r, gdt))


# ------------------------------------------------------------ renorm


def _round(ctx, v, dtype):
    """v rounded to dtype, kept in v's dtype."""
    return ctx.convert(ctx.convert(v, dtype), v.dtype)


def _below(value):
    """The largest float32 <= value: for a float32 x, x > value (compared
    in double, as CPU does) exactly when x > _below(value)."""
    f = torch.tensor(value, dtype=torch.float32)
    if float(f) > value:
        f = torch.nextafter(f, torch.tensor(float("-inf")))
    return float(f)


def _row_norms(ctx, a, p):
    """p-norm of each row of a, as torch.norm reduces it."""
    ad = ctx.unary("abs", a)
    if p == 2:
        return ctx.unary("sqrt", ctx.reduce("sum", ctx.binary("multiply", a, a), [1]))
    if p == 1:
        return ctx.reduce("sum", ad, [1])
    if p == 0:
        nz = ctx.convert(ctx.compare("ne", a, ctx.const(0, a.dtype, a.shape)), a.dtype)
        return ctx.reduce("sum", nz, [1])
    if p == float("inf"):
        return ctx.reduce("max", ad, [1])
    if p == float("-inf"):
        return ctx.reduce("min", ad, [1])
    s = ctx.reduce("sum", ctx.binary("power", ad, ctx.const(p, a.dtype, a.shape)), [1])
    return ctx.binary("power", s, ctx.const(1.0 / p, s.dtype, s.shape))


@lowering("aten::embedding_renorm_")
def embedding_renorm_(ctx, self, indices, max_norm, norm_type):
    _unsupported(self, indices)
    if self.dim() != 2:
        raise RuntimeError(f"Expected 2-dimensional tensor, but got {self.dim()}-dimensional "
                           f"tensor for argument #1 'self' (while checking arguments for "
                           f"embedding_renorm_)")
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(
            f"Expected tensor for argument #2 'indices' to have one of the following scalar "
            f"types: Long, Int; but got {_type_name(indices.dtype)} instead (while checking "
            f"arguments for embedding_renorm_)")
    if self.dtype not in _FLOATS:
        raise NotLowerable(f"embedding_renorm_ of {self.dtype}")
    v, d = self.shape
    n = indices.numel()
    x = ctx.input(self, "self")
    if n == 0 or v == 0 or d == 0:
        ctx.output_into(x, self, "self")
        return
    dt = self.dtype
    acc = _acc(dt)
    idx = ctx.reshape(_idx(ctx, indices, "indices"), (n,))
    # rows are picked with self[i]: negative indices count from the end
    wrapped = ctx.binary("add", idx, _c64(ctx, v, (n,)))
    neg = ctx.op("and", ctx.compare("lt", idx, _c64(ctx, 0, (n,))),
                 ctx.compare("ge", wrapped, _c64(ctx, 0, (n,))))
    idx = ctx.select(neg, wrapped, idx)
    hits = ctx.op("scatter", _c64(ctx, 0, (v,)), idx, _c64(ctx, 1, (n,)), kind=SCATTER_ADD,
                  ints=(0,))
    a = ctx.convert(x, acc)
    norm = _round(ctx, _row_norms(ctx, a, norm_type), dt)
    big = ctx.op("and", ctx.compare("gt", hits, _c64(ctx, 0, (v,))),
                 ctx.compare("gt", norm, ctx.const(_below(max_norm), acc, (v,))))
    # the scale is computed with tensor ops in self's dtype, as on CPU
    eps = _round(ctx, ctx.binary("add", norm, ctx.const(1e-7, acc, (v,))), dt)
    scale = _round(ctx, ctx.binary("divide", ctx.const(max_norm, acc, (v,)), eps), dt)
    scaled = ctx.convert(ctx.binary("multiply", a, _rows(ctx, scale, v, d)), dt)
    ctx.output_into(ctx.select(_rows(ctx, big, v, d), scaled, x), self, "self")

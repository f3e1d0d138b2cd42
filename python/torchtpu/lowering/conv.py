"""Convolution, pooling and upsampling.

Convolutions (and their gradients) are IR ``convolution`` ops at the
matmul precision (docs/design/precision.md); reduced-precision inputs
accumulate in float32 inside the kernel and round once. Pooling is
``reduce_window`` (max/sum/argmax), its gradients ``scatter``-add or
``pad`` + ``reduce_window``; adaptive pooling and upsampling are ``gather``
along one spatial dimension at a time with index vectors computed in the
graph from iotas, exactly as PyTorch's CPU kernels compute them.

Where PyTorch's CPU kernel itself rounds to bf16/f16 along the way, the
rules round at the same places: transposed convolutions with an
output_padding not below the stride (slow_conv_transpose), 3-d adaptive
average pooling, the interpolation weights of linear1d/trilinear3d, and
grid sampling (computed entirely in the dtype, in the CPU kernels' order;
the float32/float64 2-d kernel's fused multiply-adds are computed as such
where its grid gradient is sensitive to them).
"""
import torch

from .. import _C
from .._registry import lowering
from .ctx import OPMATH, REDUCE, NotLowerable
from .elementwise import _check_dtypes

_FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_ARGMAX = 6     # tpu_reduce_kind_t TPU_REDUCE_ARGMAX
_SCATTER_ADD = 1
_S64 = torch.int64


def _acc(dtype):
    return OPMATH.get(dtype, dtype)


def _float_inputs(what, *ts):
    _check_dtypes(*ts)
    for t in ts:
        if t is not None and t.dtype not in _FLOATS:
            raise NotLowerable(f"{what} of {t.dtype}")


def _expand(v, n, what):
    """An int or a list of 1 or n ints as n ints."""
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise NotLowerable(f"{what} has {len(v)} entries for {n} spatial dims")
    return v


def _emit(ctx, v, m, kw):
    """Outputs v as the op's single result: into its out=/grad_input= tensor
    when given (m is then the meta of the resized out), else like m."""
    for name in ("out", "grad_input"):
        t = kw.get(name)
        if t is not None:
            if tuple(t.shape) != tuple(m.shape):
                raise NotLowerable(f"{name}= tensor of another shape (resize)")
            ctx.output_into(v, t, name)
            return
    ctx.output(v, like=m)


def _emit_empty(ctx, m, kw):
    """An empty single result, after the CPU kernel's own checks: for
    empty tensor arguments the meta kernels accept some calls the CPU
    kernel rejects, so the op runs on empty CPU stand-ins (no data)."""
    def stand_in(x):
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
        if isinstance(x, (list, tuple)):
            return type(x)(stand_in(e) for e in x)
        return x

    if all(t.numel() == 0 for t in ctx.tensors if isinstance(t, torch.Tensor)):
        args = [stand_in(a) for a in ctx.args]
        kwargs = {k: stand_in(v) for k, v in ctx.kwargs.items()}
        try:
            ctx.overload(*args, **kwargs)
        except Exception as e:
            raise e.with_traceback(None) from None
    if m.numel() != 0:
        raise NotLowerable("empty input, non-empty result")
    _emit(ctx, ctx.const(0, m.dtype, tuple(m.shape)), m, kw)


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


# ------------------------------------------------------------ convolution

def _conv(ctx, x, w, strides, lo, hi, lhs_dil, rhs_dil, groups, out_dtype):
    """IR convolution of x [N, C, sp...] with w [O, C/groups, k...]."""
    ns = x.rank - 2
    shape = [x.shape[0], w.shape[0]]
    for d in range(ns):
        n_in = x.shape[2 + d]
        din = 0 if n_in == 0 else (n_in - 1) * lhs_dil[d] + 1
        k = w.shape[2 + d]
        dk = 0 if k == 0 else (k - 1) * rhs_dil[d] + 1
        padded = din + lo[d] + hi[d]
        if padded < dk:
            raise NotLowerable("kernel larger than the padded input")
        shape.append((padded - dk) // strides[d] + 1)
    ints = (ns, *strides, *lo, *hi, *lhs_dil, *rhs_dil, groups)
    return ctx.op("convolution", x, w, kind=_C.get_precision(), ints=ints, dtype=out_dtype,
                  shape=tuple(shape))


def _spatial(v):
    return list(range(2, v.rank))


def _reverse_swap(ctx, w, groups):
    """[A, B, k...] with A = groups*Ag -> [groups*B, Ag, k...], spatially
    reversed: the kernel of the adjoint (transposed) convolution."""
    a, b, ks = w.shape[0], w.shape[1], w.shape[2:]
    ag = a // groups
    v = ctx.reshape(w, (groups, ag, b) + ks)
    v = ctx.transpose(v, (0, 2, 1) + tuple(range(3, v.rank)))
    v = ctx.reshape(v, (groups * b, ag) + ks)
    return ctx.op("reverse", v, ints=tuple(_spatial(v)))


def _grad_input(ctx, gy, w, in_sizes, stride, padding, dilation, groups, acc):
    """d conv(x, w) / dx applied to gy: gy lhs-dilated by the stride, padded,
    convolved with the reversed, in/out-swapped kernel."""
    ns = gy.rank - 2
    ks = w.shape[2:]
    lo, hi = [], []
    for d in range(ns):
        p = gy.shape[2 + d]
        lo.append(dilation[d] * (ks[d] - 1) - padding[d])
        hi.append(in_sizes[d] - 1 - (p - 1) * stride[d] + padding[d])
    return _conv(ctx, gy, _reverse_swap(ctx, w, groups), [1] * ns, lo, hi, stride, dilation,
                 groups, acc)


def _grad_weight(ctx, x, gy, ks, stride, padding, dilation, groups, acc):
    """dw[o, c, k] = sum_{n,p} gy[n, o, p] * x[n, g*Cg + c, p*s - pad + k*d]:
    a convolution where the batch dim is the contraction (channel) dim, the
    forward dilation the stride and the forward stride the kernel dilation."""
    ns = x.rank - 2
    n, c = x.shape[:2]
    o = gy.shape[1]
    cg, og = c // groups, o // groups
    sx, sg = x.shape[2:], gy.shape[2:]
    lhs = ctx.reshape(x, (n, groups, cg) + sx)
    lhs = ctx.transpose(lhs, (2, 1, 0) + tuple(range(3, 3 + ns)))
    lhs = ctx.reshape(lhs, (cg, groups * n) + sx)
    rhs = ctx.reshape(gy, (n, groups, og) + sg)
    rhs = ctx.transpose(rhs, (1, 2, 0) + tuple(range(3, 3 + ns)))
    rhs = ctx.reshape(rhs, (o, n) + sg)
    hi = [(ks[d] - 1) * dilation[d] + (sg[d] - 1) * stride[d] + 1 - sx[d] - padding[d]
          for d in range(ns)]
    r = _conv(ctx, lhs, rhs, dilation, padding, hi, [1] * ns, stride, groups, acc)
    return ctx.transpose(r, (1, 0) + tuple(range(2, 2 + ns)))


def _transposed_by_taps(ctx, x, w, bias, stride, padding, dilation, groups, acc, shape):
    """A reduced-precision transposed convolution as PyTorch's CPU kernel
    computes it when an output_padding is not below its stride (mkldnn
    declines; slow_conv_transpose{2,3}d runs): one column per kernel tap
    (a float GEMM over the input channels, rounded to the dtype), scattered
    into the output by adds in the dtype, taps in order, then the bias."""
    ns = x.rank - 2
    dt = x.dtype
    cin, og, ks = w.shape[0], w.shape[1], w.shape[2:]
    cg, taps = cin // groups, _prod(ks)
    n, sp = x.shape[0], x.shape[2:]
    # every tap as a 1x1 kernel: [groups * taps * og, cg, 1...]
    k = ctx.reshape(w, (groups, cg, og, taps))
    k = ctx.transpose(k, (0, 3, 2, 1))
    k = ctx.reshape(k, (groups * taps * og, cg) + (1,) * ns)
    cols = _conv(ctx, x, k, [1] * ns, [0] * ns, [0] * ns, [1] * ns, [1] * ns, groups, acc)
    cols = ctx.convert(ctx.reshape(cols, (n, groups, taps, og) + sp), dt)
    zero = ctx.const(0, dt)
    r = ctx.const(0, dt, shape)
    for t in range(taps):
        tap, rest = [], t
        for d in reversed(range(ns)):
            tap.insert(0, rest % ks[d])
            rest //= ks[d]
        c = ctx.op("slice", cols, ints=(0, 0, t, 0) + (0,) * ns + (n, groups, t + 1, og) + sp
                   + (1,) * (4 + ns))
        c = ctx.reshape(c, (n, groups * og) + sp)
        lo = [tap[d] * dilation[d] - padding[d] for d in range(ns)]
        hi = [shape[2 + d] - lo[d] - ((sp[d] - 1) * stride[d] + 1) for d in range(ns)]
        c = ctx.op("pad", c, zero, ints=(0, 0, *lo, 0, 0, *hi, 0, 0,
                                          *[s - 1 for s in stride]))
        r = ctx.binary("add", r, c)
    if bias is not None:
        b = ctx.input(bias, "bias")
        r = ctx.binary("add", r, ctx.broadcast_in_dim(b, shape, (1,)))
    return r


def _conv_args(input, weight, stride, padding, dilation, output_padding):
    ns = weight.dim() - 2
    if ns < 1 or input.dim() != weight.dim():
        raise NotLowerable("unbatched or malformed convolution")
    return (ns, _expand(stride, ns, "stride"), _expand(padding, ns, "padding"),
            _expand(dilation, ns, "dilation"), _expand(output_padding, ns, "output_padding"))


@lowering("aten::convolution", "aten::convolution.out", uses_precision=True)
def convolution(ctx, input, weight, bias, stride, padding, dilation, transposed,
                output_padding, groups, *, out=None):
    _float_inputs("convolution", input, weight, bias)
    m = ctx.meta()
    if input.dtype != weight.dtype or (bias is not None and bias.dtype != input.dtype):
        raise NotLowerable("mixed dtypes")
    ns, stride, padding, dilation, output_padding = _conv_args(
        input, weight, stride, padding, dilation, output_padding)
    acc = _acc(input.dtype)
    x, w = ctx.input(input, "input"), ctx.input(weight, "weight")
    if transposed and acc != input.dtype and any(
            output_padding[d] >= stride[d] for d in range(ns)):
        r = _transposed_by_taps(ctx, x, w, bias, stride, padding, dilation, groups, acc,
                                tuple(m.shape))
        _emit(ctx, r, m, {"out": out})
        return
    if transposed:
        ks = weight.shape[2:]
        lo = [dilation[d] * (ks[d] - 1) - padding[d] for d in range(ns)]
        hi = [lo[d] + output_padding[d] for d in range(ns)]
        r = _conv(ctx, x, _reverse_swap(ctx, w, groups), [1] * ns, lo, hi, stride, dilation,
                  groups, acc)
    else:
        r = _conv(ctx, x, w, stride, padding, padding, [1] * ns, dilation, groups, acc)
    if r.shape != tuple(m.shape):
        raise NotLowerable(f"convolution result {r.shape} differs from {tuple(m.shape)}")
    if bias is not None:
        b = ctx.convert(ctx.input(bias, "bias"), acc)
        r = ctx.binary("add", r, ctx.broadcast_in_dim(b, r.shape, (1,)))
    _emit(ctx, r, m, {"out": out})


@lowering("aten::convolution_backward", uses_precision=True)
def convolution_backward(ctx, grad_output, input, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    _float_inputs("convolution_backward", grad_output, input, weight)
    if not (grad_output.dtype == input.dtype == weight.dtype):
        raise NotLowerable("mixed dtypes")
    m = ctx.meta()
    ns, stride, padding, dilation, output_padding = _conv_args(
        input, weight, stride, padding, dilation, output_padding)
    acc = _acc(input.dtype)
    gy = ctx.input(grad_output, "grad_output")
    ks = tuple(weight.shape[2:])
    results = []
    if output_mask[0]:
        w = ctx.input(weight, "weight")
        if transposed:
            # the adjoint of a transposed convolution is the forward one
            hi = [(input.shape[2 + d] - 1) * stride[d] + dilation[d] * (ks[d] - 1) + 1
                  - grad_output.shape[2 + d] - padding[d] for d in range(ns)]
            gi = _conv(ctx, gy, w, stride, padding, hi, [1] * ns, dilation, groups, acc)
        else:
            gi = _grad_input(ctx, gy, w, input.shape[2:], stride, padding, dilation, groups, acc)
        results.append((gi, m[0]))
    else:
        results.append(None)
    if output_mask[1]:
        x = ctx.input(input, "input")
        if transposed:
            gw = _grad_weight(ctx, gy, x, ks, stride, padding, dilation, groups, acc)
        else:
            gw = _grad_weight(ctx, x, gy, ks, stride, padding, dilation, groups, acc)
        results.append((gw, m[1]))
    else:
        results.append(None)
    if output_mask[2]:
        g = ctx.convert(gy, acc)
        gb = ctx.reduce("sum", g, [0] + _spatial(g))
        results.append((gb, m[2]))
    else:
        results.append(None)
    for r in results:
        if r is None:
            ctx.result_none()
            continue
        v, like = r
        if v.shape != tuple(like.shape):
            raise NotLowerable(f"convolution_backward result {v.shape} differs from "
                               f"{tuple(like.shape)}")
        ctx.output(v, like=like)


# ---------------------------------------------------------------- pooling

def _pool_args(self, ns, kernel_size, stride, padding, dilation=1):
    if self.dim() not in (ns + 1, ns + 2):
        raise NotLowerable(f"{self.dim()}-d input")
    k = _expand(kernel_size, ns, "kernel_size")
    s = _expand(stride, ns, "stride") if stride else list(k)
    p = _expand(padding, ns, "padding")
    d = _expand(dilation, ns, "dilation")
    return k, s, p, d


def _window(ctx, v, kind, lead, k, s, p, d, out_sp):
    """reduce_window over the trailing spatial dims (window 1 elsewhere),
    with the high padding that gives PyTorch's (ceil_mode) output sizes."""
    ns = len(k)
    sp = v.shape[lead:]
    hi = [max(0, (out_sp[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - sp[i] - p[i])
          for i in range(ns)]
    one, zero = [1] * lead, [0] * lead
    ints = (one + list(k)) + (one + list(s)) + (zero + list(p)) + (zero + hi) + (one + list(d))
    r = ctx.op("reduce_window", v, kind=kind, ints=tuple(ints))
    if tuple(r.shape[lead:]) != tuple(out_sp):
        raise NotLowerable(f"pooling window gives {r.shape}, expected {out_sp}")
    return r


def _flat_position(ctx, shape, lead, sizes):
    """The flat index over the spatial dims of each element of shape (s64)."""
    pos = None
    for i in range(len(sizes)):
        t = ctx.iota(_S64, shape, lead + i)
        mult = _prod(sizes[i + 1:])
        if mult != 1:
            t = ctx.binary("multiply", t, ctx.const(mult, _S64, shape))
        pos = t if pos is None else ctx.binary("add", pos, t)
    return pos


def _emit_pair(ctx, vals, idx, m, out, indices):
    if out is not None:
        if tuple(out.shape) != tuple(m[0].shape) or tuple(indices.shape) != tuple(m[1].shape):
            raise NotLowerable("out= tensors of another shape (resize)")
        ctx.output_into(vals, out, "out")
        ctx.output_into(idx, indices, "indices")
    else:
        ctx.output(vals, like=m[0])
        ctx.output(idx, like=m[1])


def _max_pool(ctx, self, ns, kernel_size, stride, padding, dilation, ceil_mode, meta=None):
    _check_dtypes(self)
    if self.dtype == torch.bool:
        raise NotLowerable("max_pool of bool")
    m = meta if meta is not None else ctx.meta()
    k, s, p, d = _pool_args(self, ns, kernel_size, stride, padding, dilation)
    lead = self.dim() - ns
    out_sp = tuple(m[0].shape[lead:])
    x = ctx.input(self, "self")
    vals = _window(ctx, x, REDUCE["max"], lead, k, s, p, d, out_sp)
    q = _window(ctx, x, _ARGMAX, lead, k, s, p, d, out_sp)
    # the position inside the window -> PyTorch's flat input index
    shape = q.shape
    sizes = list(self.shape[lead:])
    idx = None
    for i in range(ns):
        qi = q
        inner = _prod(k[i + 1:])
        if inner != 1:
            qi = ctx.binary("divide", qi, ctx.const(inner, _S64, shape))
        qi = ctx.binary("remainder", qi, ctx.const(k[i], _S64, shape))
        o = ctx.iota(_S64, shape, lead + i)
        pos = ctx.binary("add", ctx.binary("multiply", o, ctx.const(s[i], _S64, shape)),
                         ctx.binary("multiply", qi, ctx.const(d[i], _S64, shape)))
        pos = ctx.binary("subtract", pos, ctx.const(p[i], _S64, shape))
        mult = _prod(sizes[i + 1:])
        if mult != 1:
            pos = ctx.binary("multiply", pos, ctx.const(mult, _S64, shape))
        idx = pos if idx is None else ctx.binary("add", idx, pos)
    if not self.dtype.is_floating_point:
        return m, vals, idx
    # PyTorch's kernel takes the last NaN of a window (val > max || isnan)
    isnan = ctx.compare("ne", x, x)
    key = ctx.select(isnan, _flat_position(ctx, x.shape, lead, sizes),
                     ctx.const(-1, _S64, x.shape))
    last_nan = _window(ctx, key, REDUCE["max"], lead, k, s, p, d, out_sp)
    idx = ctx.select(ctx.compare("ge", last_nan, ctx.const(0, _S64, shape)), last_nan, idx)
    return m, vals, idx


def _max_pool_rule(ns):
    def rule(ctx, self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, *,
             out=None, indices=None):
        m, vals, idx = _max_pool(ctx, self, ns, kernel_size, stride, padding, dilation,
                                 ceil_mode)
        _emit_pair(ctx, vals, idx, m, out, indices)
    return rule


lowering("aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices.out")(
    _max_pool_rule(2))
lowering("aten::max_pool3d_with_indices", "aten::max_pool3d_with_indices.out")(
    _max_pool_rule(3))


def _scatter_back(ctx, self, grad_output, indices, lead, acc):
    """grad_input[flat index] += grad_output (the adjoint of gathering the
    window maxima by their flat spatial indices)."""
    sp = _prod(self.shape[lead:])
    out_sp = _prod(grad_output.shape[lead:])
    lead_shape = tuple(self.shape[:lead])
    g = ctx.reshape(ctx.convert(ctx.input(grad_output, "grad_output"), acc),
                    lead_shape + (out_sp,))
    idx = ctx.reshape(ctx.input(indices, "indices"), lead_shape + (out_sp,))
    zeros = ctx.const(0, acc, lead_shape + (sp,))
    r = ctx.op("scatter", zeros, idx, g, kind=_SCATTER_ADD, ints=(lead,))
    return ctx.reshape(r, tuple(self.shape))


def _max_pool_backward_rule(ns):
    def rule(ctx, grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
             indices, *, grad_input=None):
        _float_inputs("max_pool backward", grad_output, self)
        if self.dim() not in (ns + 1, ns + 2):
            raise NotLowerable(f"{self.dim()}-d input")
        m = ctx.meta()
        lead = self.dim() - ns
        if tuple(indices.shape) != tuple(grad_output.shape):
            raise NotLowerable("indices and grad_output differ in shape")
        r = _scatter_back(ctx, self, grad_output, indices, lead, _acc(self.dtype))
        _emit(ctx, r, m, {"grad_input": grad_input})
    return rule


lowering("aten::max_pool2d_with_indices_backward",
         "aten::max_pool2d_with_indices_backward.grad_input")(_max_pool_backward_rule(2))
lowering("aten::max_pool3d_with_indices_backward",
         "aten::max_pool3d_with_indices_backward.grad_input")(_max_pool_backward_rule(3))


def _avg_divisor(ctx, shape, lead, sizes, k, s, p, count_include_pad, divisor_override, acc):
    """PyTorch's avg_pool divide factor of each output element."""
    if divisor_override is not None:
        return ctx.const(divisor_override, acc, shape)
    count = None
    for i in range(len(k)):
        o = ctx.iota(_S64, shape, lead + i)
        start = ctx.binary("subtract", ctx.binary("multiply", o, ctx.const(s[i], _S64, shape)),
                           ctx.const(p[i], _S64, shape))
        end = ctx.binary("minimum", ctx.binary("add", start, ctx.const(k[i], _S64, shape)),
                         ctx.const(sizes[i] + p[i], _S64, shape))
        if not count_include_pad:
            start = ctx.binary("maximum", start, ctx.const(0, _S64, shape))
            end = ctx.binary("minimum", end, ctx.const(sizes[i], _S64, shape))
        n = ctx.binary("subtract", end, start)
        count = n if count is None else ctx.binary("multiply", count, n)
    return ctx.convert(count, acc)


def _avg_pool_rule(ns):
    def rule(ctx, self, kernel_size, stride=(), padding=0, ceil_mode=False,
             count_include_pad=True, divisor_override=None, *, out=None):
        _float_inputs("avg_pool", self)
        m = ctx.meta()
        k, s, p, _ = _pool_args(self, ns, kernel_size, stride, padding)
        lead = self.dim() - ns
        out_sp = tuple(m.shape[lead:])
        acc = _acc(self.dtype)
        x = ctx.convert(ctx.input(self, "self"), acc)
        total = _window(ctx, x, REDUCE["sum"], lead, k, s, p, [1] * ns, out_sp)
        div = _avg_divisor(ctx, total.shape, lead, list(self.shape[lead:]), k, s, p,
                           count_include_pad, divisor_override, acc)
        _emit(ctx, ctx.binary("divide", total, div), m, {"out": out})
    return rule


lowering("aten::avg_pool2d", "aten::avg_pool2d.out")(_avg_pool_rule(2))
lowering("aten::avg_pool3d", "aten::avg_pool3d.out")(_avg_pool_rule(3))


def _avg_pool_backward_rule(ns):
    def rule(ctx, grad_output, self, kernel_size, stride, padding, ceil_mode,
             count_include_pad, divisor_override, *, grad_input=None):
        _float_inputs("avg_pool backward", grad_output, self)
        m = ctx.meta()
        k, s, p, _ = _pool_args(self, ns, kernel_size, stride, padding)
        lead = self.dim() - ns
        acc = _acc(self.dtype)
        g = ctx.convert(ctx.input(grad_output, "grad_output"), acc)
        sizes = list(self.shape[lead:])
        div = _avg_divisor(ctx, g.shape, lead, sizes, k, s, p, count_include_pad,
                           divisor_override, acc)
        g = ctx.binary("divide", g, div)
        # each input element sums the outputs whose window covers it: the
        # grad dilated by the stride, padded, summed over a k window
        lo = [k[i] - 1 - p[i] for i in range(ns)]
        hi = [sizes[i] - 1 - (g.shape[lead + i] - 1) * s[i] + p[i] for i in range(ns)]
        interior = [s[i] - 1 for i in range(ns)]
        zero = [0] * lead
        g = ctx.op("pad", g, ctx.const(0, acc), ints=tuple(zero + lo + zero + hi + zero + interior))
        r = _window(ctx, g, REDUCE["sum"], lead, k, [1] * ns, [0] * ns, [1] * ns, sizes)
        _emit(ctx, r, m, {"grad_input": grad_input})
    return rule


lowering("aten::avg_pool2d_backward", "aten::avg_pool2d_backward.grad_input")(
    _avg_pool_backward_rule(2))
lowering("aten::avg_pool3d_backward", "aten::avg_pool3d_backward.grad_input")(
    _avg_pool_backward_rule(3))


# ------------------------------------------------------- adaptive pooling

def _adaptive_bounds(ctx, n_in, n_out, kmax):
    """start/end of each adaptive window ([n_out, kmax] s64 values) and the
    gather index min(start + j, end - 1) with its validity."""
    shape = (n_out, kmax)
    o = ctx.iota(_S64, shape, 0)
    j = ctx.iota(_S64, shape, 1)
    c = lambda v: ctx.const(v, _S64, shape)  # noqa: E731
    start = ctx.binary("divide", ctx.binary("multiply", o, c(n_in)), c(n_out))
    end = ctx.binary("divide", ctx.binary("add", ctx.binary(
        "multiply", ctx.binary("add", o, c(1)), c(n_in)), c(n_out - 1)), c(n_out))
    pos = ctx.binary("add", start, j)
    valid = ctx.compare("lt", pos, end)
    idx = ctx.binary("minimum", pos, ctx.binary("subtract", end, c(1)))
    return start, end, idx, valid


def _window_sizes(n_in, n_out):
    return [-(-(o + 1) * n_in // n_out) - (o * n_in // n_out) for o in range(n_out)]


def _adaptive_windows(ctx, x, dim, n_out):
    """x with dim split into [n_out, kmax]: the adaptive windows along dim,
    zero past the end of the shorter ones."""
    n_in = x.shape[dim]
    shape = list(x.shape)
    if n_in % n_out == 0:
        k = n_in // n_out
        return ctx.reshape(x, tuple(shape[:dim] + [n_out, k] + shape[dim + 1:]))
    kmax = max(_window_sizes(n_in, n_out))
    _, _, idx, valid = _adaptive_bounds(ctx, n_in, n_out, kmax)
    gshape = tuple(shape[:dim] + [n_out * kmax] + shape[dim + 1:])
    idx = ctx.broadcast_in_dim(ctx.reshape(idx, (n_out * kmax,)), gshape, (dim,))
    valid = ctx.broadcast_in_dim(ctx.reshape(valid, (n_out * kmax,)), gshape, (dim,))
    v = ctx.op("gather", x, idx, ints=(dim,))
    v = ctx.select(valid, v, ctx.const(0, x.dtype, gshape))
    return ctx.reshape(v, tuple(shape[:dim] + [n_out, kmax] + shape[dim + 1:]))


def _adaptive_sum(ctx, x, dim, n_out):
    """Sums of x over the adaptive windows along dim."""
    return ctx.reduce("sum", _adaptive_windows(ctx, x, dim, n_out), [dim + 1])


def _adaptive_sum_sequential(ctx, x, lead, out_sp):
    """Sums of x (in its own dtype) over the adaptive windows of the trailing
    dims, adding the window's elements one by one in row-major order with a
    rounding after each add: a scatter-add of every element into its
    window's slot."""
    ns = len(out_sp)
    v = x
    for i in range(ns):
        v = _adaptive_windows(ctx, v, lead + 2 * i, out_sp[i])
    ks = [v.shape[lead + 2 * i + 1] for i in range(ns)]
    # [lead..., o0, k0, o1, k1, ...] -> [lead..., o0, o1, ..., k0 * k1 * ...]
    perm = list(range(lead)) + [lead + 2 * i for i in range(ns)] + \
        [lead + 2 * i + 1 for i in range(ns)]
    base = tuple(x.shape[:lead]) + tuple(out_sp)
    v = ctx.reshape(ctx.transpose(v, perm), base + (_prod(ks),))
    idx = ctx.const(0, _S64, v.shape)
    r = ctx.op("scatter", ctx.const(0, x.dtype, base + (1,)), idx, v, kind=_SCATTER_ADD,
               ints=(len(base),))
    return ctx.reshape(r, base)


def _adaptive_counts(ctx, shape, dim, n_in, n_out, acc):
    """Window length of each output along dim, broadcast to shape."""
    if n_in % n_out == 0:
        return ctx.const(n_in // n_out, acc, shape)
    o = ctx.iota(_S64, shape, dim)
    c = lambda v: ctx.const(v, _S64, shape)  # noqa: E731
    start = ctx.binary("divide", ctx.binary("multiply", o, c(n_in)), c(n_out))
    end = ctx.binary("divide", ctx.binary("add", ctx.binary(
        "multiply", ctx.binary("add", o, c(1)), c(n_in)), c(n_out - 1)), c(n_out))
    return ctx.convert(ctx.binary("subtract", end, start), acc)


def _adaptive_avg_rule(ns):
    def rule(ctx, self, output_size, *, out=None):
        _float_inputs("adaptive_avg_pool", self)
        m = ctx.meta()
        lead = self.dim() - ns
        if lead not in (1, 2):
            raise NotLowerable(f"{self.dim()}-d input")
        out_sp = tuple(m.shape[lead:])
        if self.numel() == 0 or m.numel() == 0:
            _emit_empty(ctx, m, {"out": out})
            return
        acc = _acc(self.dtype)
        if ns == 3 and acc != self.dtype:
            # PyTorch's CPU kernel sums 3-d windows in scalar_t and divides
            # in scalar_t too (bf16/f16: a rounding after every step)
            acc = self.dtype
            v = _adaptive_sum_sequential(ctx, ctx.input(self, "self"), lead, out_sp)
        else:
            v = ctx.convert(ctx.input(self, "self"), acc)
            for i in range(ns):
                v = _adaptive_sum(ctx, v, lead + i, out_sp[i])
        # sum / kd / kh / kw, as the CPU kernel divides
        for i in range(ns):
            v = ctx.binary("divide", v, _adaptive_counts(
                ctx, v.shape, lead + i, self.shape[lead + i], out_sp[i], acc))
        _emit(ctx, v, m, {"out": out})
    return rule


lowering("aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d.out")(_adaptive_avg_rule(2))
lowering("aten::_adaptive_avg_pool3d", "aten::_adaptive_avg_pool3d.out")(_adaptive_avg_rule(3))


def _adaptive_spread(ctx, g, dim, n_in):
    """The adjoint of _adaptive_sum along dim: each input element receives
    the value of every window that covers it."""
    n_out = g.shape[dim]
    shape = list(g.shape)
    if n_in % n_out == 0:
        k = n_in // n_out
        wide = tuple(shape[:dim] + [n_out, k] + shape[dim + 1:])
        keep = tuple(i for i in range(len(wide)) if i != dim + 1)
        v = ctx.broadcast_in_dim(g, wide, keep)
        return ctx.reshape(v, tuple(shape[:dim] + [n_in] + shape[dim + 1:]))
    kmax = max(_window_sizes(n_in, n_out))
    _, _, idx, valid = _adaptive_bounds(ctx, n_in, n_out, kmax)
    wide = tuple(shape[:dim] + [n_out, kmax] + shape[dim + 1:])
    keep = tuple(i for i in range(len(wide)) if i != dim + 1)
    gshape = tuple(shape[:dim] + [n_out * kmax] + shape[dim + 1:])
    upd = ctx.reshape(ctx.broadcast_in_dim(g, wide, keep), gshape)
    idx = ctx.broadcast_in_dim(ctx.reshape(idx, (n_out * kmax,)), gshape, (dim,))
    valid = ctx.broadcast_in_dim(ctx.reshape(valid, (n_out * kmax,)), gshape, (dim,))
    upd = ctx.select(valid, upd, ctx.const(0, g.dtype, gshape))
    zeros = ctx.const(0, g.dtype, tuple(shape[:dim] + [n_in] + shape[dim + 1:]))
    return ctx.op("scatter", zeros, idx, upd, kind=_SCATTER_ADD, ints=(dim,))


def _adaptive_avg_backward_rule(ns):
    def rule(ctx, grad_output, self, *, out=None):
        _float_inputs("adaptive_avg_pool backward", grad_output, self)
        m = ctx.meta()
        lead = self.dim() - ns
        if lead not in (1, 2):
            raise NotLowerable(f"{self.dim()}-d input")
        if self.numel() == 0:
            _emit_empty(ctx, m, {"out": out})
            return
        acc = _acc(self.dtype)
        g = ctx.convert(ctx.input(grad_output, "grad_output"), acc)
        out_sp = grad_output.shape[lead:]
        for i in range(ns):
            g = ctx.binary("divide", g, _adaptive_counts(
                ctx, g.shape, lead + i, self.shape[lead + i], out_sp[i], acc))
        for i in reversed(range(ns)):
            g = _adaptive_spread(ctx, g, lead + i, self.shape[lead + i])
        _emit(ctx, g, m, {"out": out})
    return rule


lowering("aten::_adaptive_avg_pool2d_backward", "aten::_adaptive_avg_pool2d_backward.out")(
    _adaptive_avg_backward_rule(2))
lowering("aten::_adaptive_avg_pool3d_backward", "aten::_adaptive_avg_pool3d_backward.out")(
    _adaptive_avg_backward_rule(3))


@lowering("aten::adaptive_max_pool2d", "aten::adaptive_max_pool2d.out")
def adaptive_max_pool2d(ctx, self, output_size, *, out=None, indices=None):
    """Windows of equal size only (the input divisible by the output): then
    it is max_pool2d with kernel = stride = input / output."""
    _float_inputs("adaptive_max_pool2d", self)
    lead = self.dim() - 2
    sizes = self.shape[lead:]
    osz = _expand(output_size, 2, "output_size")
    if lead not in (1, 2) or any(o is None or o <= 0 or n % o for n, o in zip(sizes, osz)):
        raise NotLowerable("adaptive max pooling with unequal windows")
    k = [n // o for n, o in zip(sizes, osz)]
    m, vals, idx = _max_pool(ctx, self, 2, k, k, 0, 1, False, meta=ctx.meta())
    _emit_pair(ctx, vals, idx, m, out, indices)


@lowering("aten::adaptive_max_pool2d_backward", "aten::adaptive_max_pool2d_backward.grad_input")
def adaptive_max_pool2d_backward(ctx, grad_output, self, indices, *, grad_input=None):
    _float_inputs("adaptive_max_pool2d backward", grad_output, self)
    m = ctx.meta()
    lead = self.dim() - 2
    if lead not in (1, 2) or tuple(indices.shape) != tuple(grad_output.shape):
        raise NotLowerable("malformed adaptive_max_pool2d_backward")
    r = _scatter_back(ctx, self, grad_output, indices, lead, _acc(self.dtype))
    _emit(ctx, r, m, {"grad_input": grad_input})


# ------------------------------------------------------------- upsampling

_SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w"),
                3: ("scales_d", "scales_h", "scales_w")}


def _scales(ns, args, kw):
    names = _SCALE_NAMES[ns]
    vals = list(args) + [None] * (ns - len(args))
    for i, n in enumerate(names):
        if n in kw:
            vals[i] = kw[n]
    return vals[:ns]


def _scale_value(scale, n_in, n_out, dtype):
    """compute_scales_value: 1/scale when given, else in/out, in dtype."""
    if scale is not None and scale > 0:
        v = torch.tensor(1.0 / scale, dtype=torch.float64).to(dtype)
    else:
        v = torch.tensor(n_in, dtype=dtype) / n_out
    return float(v)


def _nearest_src(ctx, n_in, n_out, scale, exact):
    """Source index of each output (s64 [n_out]), as PyTorch's nearest_idx /
    nearest_exact_idx compute it (float32 arithmetic)."""
    shape = (n_out,)
    i = ctx.iota(_S64, shape, 0)
    if not exact and n_out == n_in:
        return i
    if not exact and n_out == 2 * n_in:
        return ctx.binary("divide", i, ctx.const(2, _S64, shape))
    f32 = torch.float32
    sc = _scale_value(scale, n_in, n_out, f32)
    if exact:
        # floorf((dst + 0.5) * scale): the product in double, rounded to float
        t = ctx.binary("multiply", ctx.binary("add", ctx.convert(i, torch.float64),
                                              ctx.const(0.5, torch.float64, shape)),
                       ctx.const(sc, torch.float64, shape))
        t = ctx.convert(t, f32)
    else:
        t = ctx.binary("multiply", ctx.convert(i, f32), ctx.const(sc, f32, shape))
    src = ctx.convert(ctx.unary("floor", t), _S64)
    return ctx.binary("minimum", src, ctx.const(n_in - 1, _S64, shape))


def _linear_src(ctx, n_in, n_out, align_corners, scale, op):
    """(index0, index1, lambda0, lambda1) of each output ([n_out]) as
    PyTorch's compute_source_index_and_lambda computes them in opmath op."""
    shape = (n_out,)
    i = ctx.iota(_S64, shape, 0)
    if n_in == n_out:
        return i, i, ctx.const(1, op, shape), ctx.const(0, op, shape)
    if align_corners:
        sc = float(torch.tensor(n_in - 1, dtype=op) / (n_out - 1)) if n_out > 1 else 0.0
        real = ctx.binary("multiply", ctx.const(sc, op, shape), ctx.convert(i, op))
    else:
        sc = _scale_value(scale, n_in, n_out, op)
        half = ctx.const(0.5, op, shape)
        real = ctx.binary("subtract", ctx.binary(
            "multiply", ctx.const(sc, op, shape), ctx.binary("add", ctx.convert(i, op), half)),
            half)
        zero = ctx.const(0, op, shape)
        real = ctx.select(ctx.compare("lt", real, zero), zero, real)
    # floorf: the index rounds through float32 even for double
    i0 = ctx.convert(ctx.unary("floor", ctx.convert(real, torch.float32)), _S64)
    last = ctx.const(n_in - 1, _S64, shape)
    i0 = ctx.binary("minimum", i0, last)
    l1 = ctx.binary("subtract", real, ctx.convert(i0, op))
    l1 = ctx.binary("minimum", ctx.binary("maximum", l1, ctx.const(0, op, shape)),
                    ctx.const(1, op, shape))
    i1 = ctx.binary("add", i0, ctx.convert(ctx.compare("lt", i0, last), _S64))
    l0 = ctx.binary("subtract", ctx.const(1, op, shape), l1)
    return i0, i1, l0, l1


def _along(ctx, v, shape, dim):
    """A [n] vector broadcast along dim of shape."""
    return ctx.broadcast_in_dim(v, tuple(shape), (dim,))


def _gather_dim(ctx, x, idx, dim):
    shape = list(x.shape)
    shape[dim] = idx.shape[0]
    return ctx.op("gather", x, _along(ctx, idx, shape, dim), ints=(dim,))


def _scatter_dim(ctx, g, idx, dim, n_in):
    shape = list(g.shape)
    shape[dim] = n_in
    zeros = ctx.const(0, g.dtype, tuple(shape))
    return ctx.op("scatter", zeros, _along(ctx, idx, g.shape, dim), g, kind=_SCATTER_ADD,
                  ints=(dim,))


def _upsample_check(self, ns):
    _float_inputs("upsample", self)
    if self.dim() != ns + 2 or self.numel() == 0:
        raise NotLowerable(f"{self.dim()}-d or empty input")


def _nearest_rule(ns, exact):
    def rule(ctx, self, output_size, *scales, out=None, **kw):
        _upsample_check(self, ns)
        m = ctx.meta()
        sc = _scales(ns, scales, kw)
        v = ctx.input(self, "self")
        for d in range(ns):
            n_in, n_out = self.shape[2 + d], m.shape[2 + d]
            v = _gather_dim(ctx, v, _nearest_src(ctx, n_in, n_out, sc[d], exact), 2 + d)
        _emit(ctx, v, m, {"out": out})
    return rule


def _nearest_backward_rule(ns, exact):
    def rule(ctx, grad_output, output_size, input_size, *scales, grad_input=None, **kw):
        _upsample_check(grad_output, ns)
        m = ctx.meta()
        sc = _scales(ns, scales, kw)
        acc = _acc(grad_output.dtype)
        g = ctx.convert(ctx.input(grad_output, "grad_output"), acc)
        for d in range(ns):
            n_in, n_out = m.shape[2 + d], grad_output.shape[2 + d]
            g = _scatter_dim(ctx, g, _nearest_src(ctx, n_in, n_out, sc[d], exact), 2 + d, n_in)
        _emit(ctx, g, m, {"grad_input": grad_input})
    return rule


for _ns in (1, 2, 3):
    lowering(f"aten::upsample_nearest{_ns}d", f"aten::upsample_nearest{_ns}d.out")(
        _nearest_rule(_ns, False))
    lowering(f"aten::upsample_nearest{_ns}d_backward",
             f"aten::upsample_nearest{_ns}d_backward.grad_input")(
        _nearest_backward_rule(_ns, False))
    lowering(f"aten::_upsample_nearest_exact{_ns}d", f"aten::_upsample_nearest_exact{_ns}d.out")(
        _nearest_rule(_ns, True))
    lowering(f"aten::_upsample_nearest_exact{_ns}d_backward",
             f"aten::_upsample_nearest_exact{_ns}d_backward.grad_input")(
        _nearest_backward_rule(_ns, True))


def _linear_rule(ns):
    def rule(ctx, self, output_size, align_corners, *scales, out=None, **kw):
        _upsample_check(self, ns)
        m = ctx.meta()
        sc = _scales(ns, scales, kw)
        op = _acc(self.dtype)
        v = ctx.convert(ctx.input(self, "self"), op)
        # CPU's generic kernel (linear1d, trilinear3d unless channels-last with
        # C > 3) stores the lambdas as scalar_t: l1 rounded, l0 = 1 - l1 rounded
        cl = self.dim() == 5 and self.shape[1] > 3 and \
            self.is_contiguous(memory_format=torch.channels_last_3d)
        round_w = op != self.dtype and ns != 2 and not cl
        # innermost dim first: out = w0h * (row h0 along w) + w1h * (row h1 ...)
        for d in reversed(range(ns)):
            dim = 2 + d
            n_in, n_out = self.shape[dim], m.shape[dim]
            i0, i1, l0, l1 = _linear_src(ctx, n_in, n_out, align_corners, sc[d], op)
            if round_w:
                l1 = ctx.convert(ctx.convert(l1, self.dtype), op)
                l0 = ctx.binary("subtract", ctx.const(1, op, l1.shape), l1)
                l0 = ctx.convert(ctx.convert(l0, self.dtype), op)
            a = _gather_dim(ctx, v, i0, dim)
            b = _gather_dim(ctx, v, i1, dim)
            v = ctx.binary("add", ctx.binary("multiply", a, _along(ctx, l0, a.shape, dim)),
                           ctx.binary("multiply", b, _along(ctx, l1, b.shape, dim)))
        _emit(ctx, v, m, {"out": out})
    return rule


def _linear_backward_rule(ns):
    def rule(ctx, grad_output, output_size, input_size, align_corners, *scales,
             grad_input=None, **kw):
        _upsample_check(grad_output, ns)
        m = ctx.meta()
        sc = _scales(ns, scales, kw)
        op = _acc(grad_output.dtype)
        g = ctx.convert(ctx.input(grad_output, "grad_output"), op)
        for d in range(ns):
            dim = 2 + d
            n_in, n_out = m.shape[dim], grad_output.shape[dim]
            i0, i1, l0, l1 = _linear_src(ctx, n_in, n_out, align_corners, sc[d], op)
            a = _scatter_dim(ctx, ctx.binary("multiply", g, _along(ctx, l0, g.shape, dim)),
                             i0, dim, n_in)
            b = _scatter_dim(ctx, ctx.binary("multiply", g, _along(ctx, l1, g.shape, dim)),
                             i1, dim, n_in)
            g = ctx.binary("add", a, b)
        _emit(ctx, g, m, {"grad_input": grad_input})
    return rule


for _ns, _name in ((1, "linear1d"), (2, "bilinear2d"), (3, "trilinear3d")):
    lowering(f"aten::upsample_{_name}", f"aten::upsample_{_name}.out")(_linear_rule(_ns))
    lowering(f"aten::upsample_{_name}_backward", f"aten::upsample_{_name}_backward.grad_input")(
        _linear_backward_rule(_ns))


# ---------------------------------------------------------- im2col/col2im

def _im2col_args(kernel_size, dilation, padding, stride):
    return (_expand(kernel_size, 2, "kernel_size"), _expand(dilation, 2, "dilation"),
            _expand(padding, 2, "padding"), _expand(stride, 2, "stride"))


def _block_counts(h, w, k, d, p, s):
    """Kernel positions along the height and width of an (h, w) plane."""
    return ((h + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1,
            (w + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1)


@lowering("aten::im2col", "aten::im2col.out")
def im2col(ctx, self, kernel_size, dilation, padding, stride, *, out=None):
    """unfold: one strided slice of the padded input per kernel position."""
    _float_inputs("im2col", self)
    m = ctx.meta()
    k, d, p, s = _im2col_args(kernel_size, dilation, padding, stride)
    if self.dim() not in (3, 4):
        raise NotLowerable("malformed im2col")
    if self.numel() == 0 or m.numel() == 0:
        _emit_empty(ctx, m, {"out": out})
        return
    x = ctx.input(self, "self")
    if self.dim() == 3:
        x = ctx.reshape(x, (1,) + x.shape)
    n, c, h, w = x.shape
    oh, ow = _block_counts(h, w, k, d, p, s)
    x = ctx.op("pad", x, ctx.const(0, x.dtype), ints=(0, 0, p[0], p[1], 0, 0, p[0], p[1],
                                                      0, 0, 0, 0))
    cols = []
    for kh in range(k[0]):
        for kw in range(k[1]):
            y0, x0 = kh * d[0], kw * d[1]
            v = ctx.op("slice", x, ints=(0, 0, y0, x0, n, c, y0 + (oh - 1) * s[0] + 1,
                                         x0 + (ow - 1) * s[1] + 1, 1, 1, s[0], s[1]))
            cols.append(ctx.reshape(v, (n, c, 1, oh * ow)))
    v = cols[0] if len(cols) == 1 else ctx.op("concatenate", *cols, ints=(2,))
    v = ctx.reshape(v, tuple(m.shape))
    _emit(ctx, v, m, {"out": out})


@lowering("aten::col2im", "aten::col2im.out")
def col2im(ctx, self, output_size, kernel_size, dilation, padding, stride, *, out=None):
    """fold: the adjoint of im2col, summing kernel positions in their order."""
    _float_inputs("col2im", self)
    m = ctx.meta()
    k, d, p, s = _im2col_args(kernel_size, dilation, padding, stride)
    if self.dim() not in (2, 3):
        raise NotLowerable("malformed col2im")
    if self.numel() == 0 or m.numel() == 0:
        _emit_empty(ctx, m, {"out": out})
        return
    h, w = m.shape[-2:]
    oh, ow = _block_counts(h, w, k, d, p, s)
    acc = _acc(self.dtype)
    v = ctx.convert(ctx.input(self, "self"), acc)
    if self.dim() == 2:
        v = ctx.reshape(v, (1,) + v.shape)
    n = v.shape[0]
    c = v.shape[1] // (k[0] * k[1])
    if c * k[0] * k[1] != v.shape[1] or v.shape[2] != oh * ow:
        raise NotLowerable("malformed col2im")
    v = ctx.reshape(v, (n, c, k[0], k[1], oh, ow))
    total = None
    for kh in range(k[0]):
        for kw in range(k[1]):
            sl = ctx.op("slice", v, ints=(0, 0, kh, kw, 0, 0, n, c, kh + 1, kw + 1, oh, ow,
                                          1, 1, 1, 1, 1, 1))
            sl = ctx.reshape(sl, (n, c, oh, ow))
            lo = [kh * d[0] - p[0], kw * d[1] - p[1]]
            hi = [h - lo[0] - ((oh - 1) * s[0] + 1), w - lo[1] - ((ow - 1) * s[1] + 1)]
            sl = ctx.op("pad", sl, ctx.const(0, acc), ints=(0, 0, lo[0], lo[1], 0, 0, hi[0],
                                                            hi[1], 0, 0, s[0] - 1, s[1] - 1))
            total = sl if total is None else ctx.binary("add", total, sl)
    _emit(ctx, ctx.reshape(total, tuple(m.shape)), m, {"out": out})


# ------------------------------------------------------------ grid_sample

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2
_CUBIC_A = -0.75    # the cubic convolution constant of PyTorch's kernels


def _sizes(t):
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _check_grid(input, grid, ns):
    """PyTorch's grid_sampler shape checks, with its messages (the meta
    kernels skip some of them), then what the rules handle."""
    if input.dim() < 1 or grid.dim() < 1:
        raise NotLowerable("0-d grid_sampler arguments")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got input with sizes {_sizes(input)} and grid with sizes "
                           f"{_sizes(grid)}")
    if grid.shape[-1] != input.dim() - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {input.dim() - 2} in "
                           f"last dimension, but got grid with sizes {_sizes(grid)}")
    for i in range(2, input.dim()):
        if input.shape[i] == 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial "
                               f"dimensions, but input has sizes {_sizes(input)} with dimension "
                               f"{i} being empty")
    if input.dim() != ns + 2 or grid.dim() != ns + 2:
        raise RuntimeError(f"grid_sampler(): expected {ns + 2}D input and grid with same number "
                           f"of dimensions, but got input with sizes {_sizes(input)} and grid "
                           f"with sizes {_sizes(grid)}")
    _float_inputs(f"grid_sampler_{ns}d", input, grid)
    if input.dtype != grid.dtype:
        raise NotLowerable("mixed dtypes")


def _check_modes(interpolation_mode, padding_mode, ns):
    if interpolation_mode not in ((_BILINEAR, _NEAREST, _BICUBIC) if ns == 2
                                  else (_BILINEAR, _NEAREST)):
        raise NotLowerable(f"interpolation mode {interpolation_mode}")
    if padding_mode not in (_ZEROS, _BORDER, _REFLECTION):
        raise NotLowerable(f"padding mode {padding_mode}")


class _Arith:
    """Elementwise IR arithmetic in one dtype on values of one shape (each
    operation rounds to the dtype, as PyTorch's kernels for it do)."""

    def __init__(self, ctx, dtype, shape):
        self.ctx, self.dtype, self.shape = ctx, dtype, tuple(shape)

    def c(self, v):
        return self.ctx.const(v, self.dtype, self.shape)

    def _v(self, a):
        return a if not isinstance(a, (int, float)) else self.c(a)

    def add(self, a, b):
        return self.ctx.binary("add", self._v(a), self._v(b))

    def sub(self, a, b):
        return self.ctx.binary("subtract", self._v(a), self._v(b))

    def mul(self, a, b):
        return self.ctx.binary("multiply", self._v(a), self._v(b))

    def div(self, a, b):
        return self.ctx.binary("divide", self._v(a), self._v(b))

    def cmp(self, direction, a, b):
        return self.ctx.compare(direction, self._v(a), self._v(b))

    def select(self, p, a, b):
        return self.ctx.select(p, self._v(a), self._v(b))


def _fused(dtype):
    """Whether PyTorch's vectorized CPU kernels fuse a multiply and the add
    of its result into one rounding for dtype: float32/float64 vector
    arithmetic is contracted to FMA instructions by the compiler; the
    bf16/f16 vectors convert and round around every operation."""
    return dtype in (torch.float32, torch.float64)


def _fma(ctx, x, y, z):
    """x * y + z rounded once (float32/float64 values of one shape), from
    error-free transformations: the product split exactly into p + e
    (Veltkamp-Dekker), p + z into s + t (Knuth's two-sum), then s + (t + e),
    which differs from a fused multiply-add only in near-ties rarer than
    one in 2**22 roundings (and past the dtype's range / 4097: the plain
    rounded sum)."""
    a = _Arith(ctx, x.dtype, x.shape)
    split = 4097.0 if x.dtype == torch.float32 else 134217729.0

    def halves(v):
        t = a.mul(v, split)
        hi = a.sub(t, a.sub(t, v))
        return hi, a.sub(v, hi)

    p = a.mul(x, y)
    xh, xl = halves(x)
    yh, yl = halves(y)
    e = a.add(a.add(a.add(a.sub(a.mul(xh, yh), p), a.mul(xh, yl)), a.mul(xl, yh)),
              a.mul(xl, yl))
    s = a.add(p, z)
    bb = a.sub(s, p)
    t = a.add(a.sub(p, a.sub(s, bb)), a.sub(z, bb))
    r = a.add(s, a.add(t, e))
    return ctx.select(ctx.unary("is_finite", r), r, s)     # inf, NaN: the plain sum


def _grid_unnormalize(ctx, g, size, align_corners, op):
    """Grid values g (op [N, L]) -> input coordinates as the vectorized CPU
    kernel computes them, and d coordinate / d g. Its constants are
    scalar_t: size - 1 or size, rounded, then halved."""
    a = _Arith(ctx, op, g.shape)
    n = torch.tensor(size - 1 if align_corners else size, dtype=op)
    sf = float(n / 2)
    if align_corners:
        x = a.mul(a.add(g, 1), sf)
    elif _fused(op):
        x = _fma(ctx, a.add(g, 1), a.c(sf), a.c(-0.5))
    else:
        x = a.sub(a.mul(a.add(g, 1), sf), 0.5)
    return x, a.c(sf)


def _grid_pad(ctx, x, size, padding_mode, align_corners, mult=None):
    """Coordinates x reflected and/or clipped as the vectorized CPU kernel
    does for the padding mode (ComputeLocation), and the gradient multiplier
    mult updated (when given)."""
    a = _Arith(ctx, x.dtype, x.shape)
    if padding_mode == _REFLECTION:
        if align_corners and size <= 1:
            return a.c(0), (None if mult is None else a.c(0))
        low = 0.0 if align_corners else -0.5
        span2 = float(torch.tensor(size - 1 if align_corners else size, dtype=x.dtype) * 2)
        t = a.sub(x, low) if low else x
        neg = a.cmp("lt", t, 0)
        ab = ctx.unary("abs", t)
        flips = ctx.unary("floor", a.div(ab, span2))
        extra = a.sub(ab, a.mul(flips, span2))
        refl = a.sub(span2, extra)
        more = a.cmp("gt", extra, refl)
        x = a.select(more, refl, extra)
        if low:
            x = a.add(x, low)
        if mult is not None:
            mult = a.select(ctx.compare("ne", more, neg), ctx.unary("negate", mult), mult)
    if padding_mode in (_BORDER, _REFLECTION):
        hi = a.c(size - 1)
        inside = ctx.op("and", a.cmp("gt", x, 0), a.cmp("lt", x, hi))
        x = a.select(a.cmp("gt", x, 0), x, 0)      # NaN clamps to 0
        x = a.select(a.cmp("lt", x, hi), x, hi)
        if mult is not None:
            mult = a.select(inside, mult, 0)
    return x, mult


def _grid_corner(ctx, xi, yi, h, w):
    """Flat index (s64 [N, L]) of integral-valued float (or s64)
    coordinates and whether they lie inside the input (index 0 when not)."""
    xi, yi = ctx.convert(xi, _S64), ctx.convert(yi, _S64)
    a = _Arith(ctx, _S64, xi.shape)
    valid = ctx.op("and", ctx.op("and", a.cmp("gt", xi, -1), a.cmp("lt", xi, w)),
                   ctx.op("and", a.cmp("gt", yi, -1), a.cmp("lt", yi, h)))
    xs, ys = a.select(valid, xi, 0), a.select(valid, yi, 0)
    return a.add(a.mul(ys, w), xs), valid


def _cubic_coefficients(ctx, t):
    """The cubic convolution weights of the four taps at fraction t, in the
    vectorized CPU kernel's operation order (get_cubic_coefficients; the
    compiler fuses the inner taps' multiply-adds, not the outer taps',
    where both operands of each add are products)."""
    a = _Arith(ctx, t.dtype, t.shape)
    A = _CUBIC_A

    def outer(x):       # 1 < x < 2
        return a.sub(a.mul(a.add(a.mul(a.sub(a.mul(x, A), 5 * A), x), 8 * A), x), 4 * A)

    def inner(x):       # x <= 1: ((A + 2) * x - (A + 3)) * x * x + 1
        if _fused(t.dtype):
            u = a.mul(_fma(ctx, x, a.c(A + 2), a.c(-(A + 3))), x)
            return _fma(ctx, u, x, a.c(1))
        return a.add(a.mul(a.mul(a.sub(a.mul(x, A + 2), A + 3), x), x), 1)

    return [outer(a.add(t, 1)), inner(t), inner(a.sub(1, t)), outer(a.sub(2, t))]


def _cubic_coefficients_grad(ctx, t):
    """d coefficient / d t of the four taps (get_cubic_coefficients_grad)."""
    a = _Arith(ctx, t.dtype, t.shape)
    A = _CUBIC_A
    x0, x1, x2, x3 = a.sub(-1, t), ctx.unary("negate", t), a.sub(1, t), a.sub(2, t)
    return [a.sub(a.mul(a.sub(a.mul(x0, -3 * A), 10 * A), x0), 8 * A),
            a.mul(a.sub(a.mul(x1, -3 * (A + 2)), 2 * (A + 3)), x1),
            a.mul(a.sub(a.mul(x2, 3 * (A + 2)), 2 * (A + 3)), x2),
            a.add(a.mul(a.sub(a.mul(x3, 3 * A), 10 * A), x3), 8 * A)]


class _Grid:
    """What grid_sampler_2d and its backward share: coordinates, corners
    (taps), weights and the input values gathered at them, computed in op
    like PyTorch's vectorized CPU kernel (ApplyGridSample)."""

    def __init__(self, ctx, input, grid, interpolation_mode, padding_mode, align_corners, op):
        _check_modes(interpolation_mode, padding_mode, 2)
        self.ctx = ctx
        n, c, h, w = input.shape
        ho, wo = grid.shape[1:3]
        self.n, self.c, self.h, self.w, self.ho, self.wo = n, c, h, w, ho, wo
        self.L = ho * wo
        self.op = op
        self.mode = interpolation_mode
        gr = ctx.convert(ctx.input(grid, "grid"), op)
        gx = ctx.reshape(ctx.op("slice", gr, ints=(0, 0, 0, 0, n, ho, wo, 1, 1, 1, 1, 1)),
                         (n, self.L))
        gy = ctx.reshape(ctx.op("slice", gr, ints=(0, 0, 0, 1, n, ho, wo, 2, 1, 1, 1, 1)),
                         (n, self.L))
        self.inp = ctx.reshape(ctx.convert(ctx.input(input, "input"), op), (n, c, h * w))
        a = _Arith(ctx, op, (n, self.L))
        x, self.gx_mult = _grid_unnormalize(ctx, gx, w, align_corners, op)
        y, self.gy_mult = _grid_unnormalize(ctx, gy, h, align_corners, op)
        if interpolation_mode == _BICUBIC:
            # taps at floor(x) - 1 .. floor(x) + 2, each padded on its own;
            # the multipliers stay the unnormalizing scales
            x0, y0 = ctx.unary("floor", x), ctx.unary("floor", y)
            tx, ty = a.sub(x, x0), a.sub(y, y0)
            self.cx, self.cy = _cubic_coefficients(ctx, tx), _cubic_coefficients(ctx, ty)
            self.tx, self.ty = tx, ty
            xs = [_grid_pad(ctx, x0 if i == 1 else a.add(x0, i - 1), w, padding_mode,
                            align_corners)[0] for i in range(4)]
            ys = [_grid_pad(ctx, y0 if j == 1 else a.add(y0, j - 1), h, padding_mode,
                            align_corners)[0] for j in range(4)]
            # corner k = 4 * i + j: x tap i, y tap j (the kernel's loop order)
            self.corners = [(*_grid_corner(ctx, xs[i], ys[j], h, w), None)
                            for i in range(4) for j in range(4)]
            return
        self.x, self.gx_mult = _grid_pad(ctx, x, w, padding_mode, align_corners, self.gx_mult)
        self.y, self.gy_mult = _grid_pad(ctx, y, h, padding_mode, align_corners, self.gy_mult)
        if interpolation_mode == _BILINEAR:
            x_w, y_n = ctx.unary("floor", self.x), ctx.unary("floor", self.y)
            self.wd = a.sub(self.x, x_w)
            self.ed = a.sub(1, self.wd)
            self.nd = a.sub(self.y, y_n)
            self.sd = a.sub(1, self.nd)
            # the corners' indices are integers (exact past bf16's 256)
            x_w, y_n = ctx.convert(x_w, _S64), ctx.convert(y_n, _S64)
            one = ctx.const(1, _S64, x_w.shape)
            x_e, y_s = ctx.binary("add", x_w, one), ctx.binary("add", y_n, one)
            corners = [(x_w, y_n, self.sd, self.ed), (x_e, y_n, self.sd, self.wd),
                       (x_w, y_s, self.nd, self.ed), (x_e, y_s, self.nd, self.wd)]
            self.corners = [(*_grid_corner(ctx, xi, yi, h, w), a.mul(p, q))
                            for xi, yi, p, q in corners]
        else:
            xr = ctx.unary("round_nearest_even", self.x)
            yr = ctx.unary("round_nearest_even", self.y)
            self.corners = [(*_grid_corner(ctx, xr, yr, h, w), None)]

    def wide(self, v):
        """[N, L] -> [N, C, L]."""
        return self.ctx.broadcast_in_dim(v, (self.n, self.c, self.L), (0, 2))

    def values(self):
        """Input values at each corner ([N, C, L], zero outside)."""
        ctx = self.ctx
        out = []
        for idx, valid, _ in self.corners:
            v = ctx.op("gather", self.inp, self.wide(idx), ints=(2,))
            out.append(ctx.select(self.wide(valid), v, ctx.const(0, self.op, v.shape)))
        return out


def _sum_terms(ctx, terms, dim, in_order=True):
    """The terms (values of one shape) summed over dim and each other.
    in_order: one add after another with a rounding after each, index by
    index along dim, term by term at each index (a scatter-add into one
    slot); else a tree reduction."""
    shape = terms[0].shape
    if not in_order:
        v = terms[0]
        for t in terms[1:]:
            v = ctx.binary("add", v, t)
        return ctx.reduce("sum", v, [dim])
    if len(terms) > 1:
        wide = shape[:dim + 1] + (1,) + shape[dim + 1:]
        v = ctx.op("concatenate", *[ctx.reshape(t, wide) for t in terms], ints=(dim + 1,))
        v = ctx.reshape(v, shape[:dim] + (len(terms) * shape[dim],) + shape[dim + 1:])
    else:
        v = terms[0]
    slot = shape[:dim] + (1,) + shape[dim + 1:]
    r = ctx.op("scatter", ctx.const(0, v.dtype, slot), ctx.const(0, _S64, v.shape), v,
               kind=_SCATTER_ADD, ints=(dim,))
    return ctx.reshape(r, shape[:dim] + shape[dim + 1:])


def _zeros_result(ctx, like):
    ctx.output(ctx.const(0, like.dtype, tuple(like.shape)), like=like)


@lowering("aten::grid_sampler_2d", "aten::grid_sampler_2d.out")
def grid_sampler_2d(ctx, input, grid, interpolation_mode, padding_mode, align_corners, *,
                    out=None):
    _check_grid(input, grid, 2)
    m = ctx.meta()
    if m.numel() == 0:
        _emit(ctx, ctx.const(0, m.dtype, tuple(m.shape)), m, {"out": out})
        return
    # PyTorch's CPU kernel computes in scalar_t (Vectorized<BFloat16> rounds
    # every step: coordinates, weights, products and the running sums)
    gs = _Grid(ctx, input, grid, interpolation_mode, padding_mode, align_corners, input.dtype)
    vals = gs.values()
    a = _Arith(ctx, gs.op, (gs.n, gs.c, gs.L))
    if gs.mode == _BICUBIC:
        # each row along x, then the rows along y
        rows = []
        for j in range(4):
            r = None
            for i in range(4):
                t = a.mul(gs.wide(gs.cx[i]), vals[4 * i + j])
                r = t if r is None else a.add(r, t)
            rows.append(r)
        r = None
        for j in range(4):
            t = a.mul(gs.wide(gs.cy[j]), rows[j])
            r = t if r is None else a.add(r, t)
    elif gs.mode == _BILINEAR:
        r = None
        for v, (_, _, wt) in zip(vals, gs.corners):
            t = a.mul(v, gs.wide(wt))
            r = t if r is None else a.add(r, t)
    else:
        r = vals[0]
    r = ctx.reshape(r, (gs.n, gs.c, gs.ho, gs.wo))
    _emit(ctx, r, m, {"out": out})


def _grid_vec_len(dtype):
    """Lanes of the Vectorized<scalar_t> of PyTorch's grid sampler CPU
    kernel: 32-byte vectors (it is not built for AVX512)."""
    return 32 // torch.tensor([], dtype=dtype).element_size()


def _grid_segments(grid):
    """Length of the runs of output positions PyTorch's CPU kernel walks in
    vectors: all of them when the grid slice (or its [H, W] with the x and y
    planes apart) is dense, else each row."""
    _, ho, wo, _ = grid.shape
    sh, sw, sc = grid.stride()[1:]

    def dense(sizes, strides):
        expect = 1
        for n, st in reversed(list(zip(sizes, strides))):
            if n != 1 and st != expect:
                return False
            expect *= n
        return True

    if dense((ho, wo, 2), (sh, sw, sc)) or ((sw == 1 or wo == 1) and dense((ho, wo), (sh, sw))):
        return ho * wo
    return wo


def _in_vector_order(ctx, vs, seg, step):
    """[N, C, L] values of each corner -> [N, C, K] in the order PyTorch's CPU
    kernel scatters them: per vector of `step` positions of a run of `seg`,
    corner by corner, lane by lane (zero padding past each run's end)."""
    n, c, L = vs[0].shape
    runs = L // seg
    nvec = -(-seg // step)
    out = []
    for v in vs:
        v = ctx.reshape(v, (n, c, runs, seg))
        if nvec * step != seg:
            v = ctx.op("pad", v, ctx.const(0, v.dtype),
                       ints=(0, 0, 0, 0, 0, 0, 0, nvec * step - seg, 0, 0, 0, 0))
        out.append(ctx.reshape(v, (n, c, runs, nvec, 1, step)))
    v = out[0] if len(out) == 1 else ctx.op("concatenate", *out, ints=(4,))
    return ctx.reshape(v, (n, c, runs * nvec * len(vs) * step))


def _grid_backward_empty(ctx, m, output_mask):
    for i in range(2):
        if i == 0 and not output_mask[0]:
            ctx.result_none()
        else:
            _zeros_result(ctx, m[i])


def _expected_grad_output(grad_output, input, grid):
    if tuple(grad_output.shape) != tuple(input.shape[:2]) + tuple(grid.shape[1:-1]):
        raise NotLowerable("grad_output of another shape")
    if grad_output.dtype != input.dtype:
        raise NotLowerable("mixed dtypes")


@lowering("aten::grid_sampler_2d_backward")
def grid_sampler_2d_backward(ctx, grad_output, input, grid, interpolation_mode, padding_mode,
                             align_corners, output_mask):
    """As PyTorch's CPU kernel computes it, in the input dtype (bf16 rounds
    every step): grad_input adds weight * grad_output corner by corner in
    the kernel's vector order, grad_grid sums its per-channel terms channel
    by channel (bicubic: channel by channel, tap by tap)."""
    _check_grid(input, grid, 2)
    m = ctx.meta()
    _expected_grad_output(grad_output, input, grid)
    if grad_output.numel() == 0:
        _grid_backward_empty(ctx, m, output_mask)
        return
    gs = _Grid(ctx, input, grid, interpolation_mode, padding_mode, align_corners, input.dtype)
    dt = input.dtype
    a = _Arith(ctx, dt, (gs.n, gs.c, gs.L))
    go = ctx.reshape(ctx.input(grad_output, "grad_output"), (gs.n, gs.c, gs.L))
    if output_mask[0]:
        upds, idxs = [], []
        for k, (idx, valid, wt) in enumerate(gs.corners):
            if gs.mode == _BICUBIC:
                upd = a.mul(a.mul(go, gs.wide(gs.cx[k // 4])), gs.wide(gs.cy[k % 4]))
            else:
                upd = go if wt is None else a.mul(gs.wide(wt), go)
            upds.append(a.select(gs.wide(valid), upd, 0))
            idxs.append(gs.wide(idx))
        seg, step = _grid_segments(grid), _grid_vec_len(dt)
        upd = _in_vector_order(ctx, upds, seg, step)
        idx = _in_vector_order(ctx, idxs, seg, step)
        gi = ctx.op("scatter", ctx.const(0, dt, (gs.n, gs.c, gs.h * gs.w)), idx, upd,
                    kind=_SCATTER_ADD, ints=(2,))
        ctx.output(ctx.reshape(gi, tuple(input.shape)), like=m[0])
    else:
        ctx.result_none()
    if gs.mode == _NEAREST:
        _zeros_result(ctx, m[1])
        return
    vals = gs.values()
    # float32/float64: the kernel's fused multiply-adds make its sum's
    # roundings differ anyway; a tree sum is as close and much faster
    in_order = not _fused(dt)
    if gs.mode == _BICUBIC:
        cxg = _cubic_coefficients_grad(ctx, gs.tx)
        cyg = _cubic_coefficients_grad(ctx, gs.ty)
        tx, ty = [], []
        for k, v in enumerate(vals):
            i, j = divmod(k, 4)
            vg = a.mul(v, go)
            tx.append(a.mul(a.mul(vg, gs.wide(cxg[i])), gs.wide(gs.cy[j])))
            ty.append(a.mul(a.mul(vg, gs.wide(cyg[j])), gs.wide(gs.cx[i])))
        # gx = gx - term, channel by channel, tap by tap
        gx = _sum_terms(ctx, [ctx.unary("negate", t) for t in tx], 1, in_order)
        gy = _sum_terms(ctx, [ctx.unary("negate", t) for t in ty], 1, in_order)
    else:
        nw, ne, sw, se = vals
        gx = a.mul(a.add(a.mul(a.sub(ne, nw), gs.wide(gs.sd)),
                         a.mul(a.sub(se, sw), gs.wide(gs.nd))), go)
        gy = a.mul(a.add(a.mul(a.sub(sw, nw), gs.wide(gs.ed)),
                         a.mul(a.sub(se, ne), gs.wide(gs.wd))), go)
        gx, gy = _sum_terms(ctx, [gx], 1, in_order), _sum_terms(ctx, [gy], 1, in_order)
    gx = ctx.binary("multiply", gx, gs.gx_mult)
    gy = ctx.binary("multiply", gy, gs.gy_mult)
    shape = (gs.n, gs.ho, gs.wo, 1)
    gg = ctx.op("concatenate", ctx.reshape(gx, shape), ctx.reshape(gy, shape), ints=(3,))
    ctx.output(gg, like=m[1])


# -------------------------------------------------------- grid_sample 3-d

def _grid_source_scalar(ctx, g, size, padding_mode, align_corners, set_grad):
    """Grid values g ([N, L]) -> input coordinates as PyTorch's scalar CPU
    code computes them (grid_sampler_compute_source_index, or its _set_grad
    form with d coordinate / d g), each operation in g's dtype."""
    op = g.dtype
    a = _Arith(ctx, op, g.shape)
    if align_corners:
        x = a.mul(a.div(a.add(g, 1), 2), size - 1)
        mult = a.c(float(torch.tensor(size - 1, dtype=op) / 2))
    else:
        x = a.div(a.sub(a.mul(a.add(g, 1), size), 1), 2)
        mult = a.c(float(torch.tensor(size, dtype=op) / 2))
    if padding_mode == _REFLECTION:
        lo2, hi2 = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        if lo2 == hi2:
            x, mult = a.c(0), a.c(0)
        else:
            low = float(torch.tensor(lo2, dtype=op) / 2)
            span = float(torch.tensor(hi2 - lo2, dtype=op) / 2)
            t = a.sub(x, low) if low else x
            neg = a.cmp("lt", t, 0)
            t = ctx.unary("abs", t)
            extra = ctx.binary("remainder", t, a.c(span))
            flips = ctx.unary("floor", a.div(t, span))
            odd = a.cmp("ne", ctx.binary("remainder", flips, a.c(2)), 0)
            x = a.select(odd, a.sub(span, extra), extra)
            if low:
                x = a.add(x, low)
            mult = a.select(ctx.compare("ne", odd, neg), ctx.unary("negate", mult), mult)
    if padding_mode in (_BORDER, _REFLECTION):
        top = a.c(size - 1)
        if set_grad:
            # in <= 0 -> 0, in >= max -> max (gradient 0), else in (NaN too)
            low, high = a.cmp("le", x, 0), a.cmp("ge", x, top)
            x = a.select(low, 0, a.select(high, top, x))
            mult = a.select(ctx.op("or", low, high), 0, mult)
        else:
            # std::min(max, std::max(in, 0)): NaN becomes max
            x = a.select(a.cmp("lt", x, 0), 0, x)
            x = a.select(a.cmp("lt", x, top), x, top)
    return x, mult


class _Grid3:
    """What grid_sampler_3d and its backward share, as PyTorch's scalar CPU
    kernel computes them in scalar_t (bf16/f16: a rounding after every
    operation): coordinates, the corners, their weights and values."""

    def __init__(self, ctx, input, grid, interpolation_mode, padding_mode, align_corners,
                 set_grad):
        _check_modes(interpolation_mode, padding_mode, 3)
        self.ctx = ctx
        n, c, d, h, w = input.shape
        do, ho, wo = grid.shape[1:4]
        self.n, self.c, self.L = n, c, do * ho * wo
        self.op = op = input.dtype
        self.mode = interpolation_mode
        self.sizes = (w, h, d)
        gr = ctx.input(grid, "grid")
        coords, mults = [], []
        for k in range(3):
            g = ctx.op("slice", gr, ints=(0, 0, 0, 0, k, n, do, ho, wo, k + 1) + (1,) * 5)
            x, mult = _grid_source_scalar(ctx, ctx.reshape(g, (n, self.L)), self.sizes[k],
                                          padding_mode, align_corners, set_grad)
            coords.append(x)
            mults.append(mult)
        self.mults = mults
        self.inp = ctx.reshape(ctx.input(input, "input"), (n, c, d * h * w))
        shape = (n, self.L)
        a = _Arith(ctx, op, shape)
        one = ctx.const(1, _S64, shape)
        if interpolation_mode == _NEAREST:
            ints = [ctx.convert(ctx.unary("round_nearest_even", x), _S64) for x in coords]
            self.corners = [(*self._index(ints), None)]
            return
        lo = [ctx.unary("floor", x) for x in coords]
        ilo = [ctx.convert(v, _S64) for v in lo]
        ihi = [ctx.binary("add", v, one) for v in ilo]
        # weights along each dim: [to the far corner, from the near one]
        self.wt = [(a.sub(a.add(lo[k], 1), coords[k]), a.sub(coords[k], lo[k]))
                   for k in range(3)]
        # corners t/b (z) outermost, then n/s (y), then w/e (x)
        self.corners = []
        for dz in range(2):
            for dy in range(2):
                for dx in range(2):
                    ints = [(ilo, ihi)[dx][0], (ilo, ihi)[dy][1], (ilo, ihi)[dz][2]]
                    wx, wy, wz = self.wt[0][dx], self.wt[1][dy], self.wt[2][dz]
                    self.corners.append((*self._index(ints), a.mul(a.mul(wx, wy), wz),
                                         (dx, dy, dz)))

    def _index(self, ints):
        """Flat index and validity of s64 x, y, z coordinates."""
        ctx = self.ctx
        shape = ints[0].shape
        valid = None
        for v, size in zip(ints, self.sizes):
            ok = ctx.op("and", ctx.compare("ge", v, ctx.const(0, _S64, shape)),
                        ctx.compare("lt", v, ctx.const(size, _S64, shape)))
            valid = ok if valid is None else ctx.op("and", valid, ok)
        zero = ctx.const(0, _S64, shape)
        x, y, z = [ctx.select(valid, v, zero) for v in ints]
        w, h, _ = self.sizes
        idx = ctx.binary("add", ctx.binary("multiply", ctx.binary(
            "add", ctx.binary("multiply", z, ctx.const(h, _S64, shape)), y),
            ctx.const(w, _S64, shape)), x)
        return idx, valid

    def wide(self, v):
        """[N, L] -> [N, C, L]."""
        return self.ctx.broadcast_in_dim(v, (self.n, self.c, self.L), (0, 2))

    def values(self):
        """Input values at each corner ([N, C, L], zero outside)."""
        ctx = self.ctx
        out = []
        for idx, valid, *_ in self.corners:
            v = ctx.op("gather", self.inp, self.wide(idx), ints=(2,))
            out.append(ctx.select(self.wide(valid), v, ctx.const(0, self.op, v.shape)))
        return out


@lowering("aten::grid_sampler_3d", "aten::grid_sampler_3d.out")
def grid_sampler_3d(ctx, input, grid, interpolation_mode, padding_mode, align_corners, *,
                    out=None):
    """Trilinear or nearest sampling of [N, C, D, H, W]: the scalar CPU
    kernel's sums corner by corner in scalar_t."""
    _check_grid(input, grid, 3)
    m = ctx.meta()
    if m.numel() == 0:
        _emit(ctx, ctx.const(0, m.dtype, tuple(m.shape)), m, {"out": out})
        return
    gs = _Grid3(ctx, input, grid, interpolation_mode, padding_mode, align_corners, False)
    a = _Arith(ctx, gs.op, (gs.n, gs.c, gs.L))
    vals = gs.values()
    if gs.mode == _BILINEAR:
        r = None
        for v, (_, _, wt, _) in zip(vals, gs.corners):
            t = a.mul(v, gs.wide(wt))
            r = t if r is None else a.add(r, t)
    else:
        r = vals[0]
    _emit(ctx, ctx.reshape(r, tuple(m.shape)), m, {"out": out})


@lowering("aten::grid_sampler_3d_backward")
def grid_sampler_3d_backward(ctx, grad_output, input, grid, interpolation_mode, padding_mode,
                             align_corners, output_mask):
    """As the scalar CPU kernel computes it in scalar_t: grad_input adds
    weight * grad_output position by position, corner by corner; grad_grid
    sums its terms channel by channel, corner by corner."""
    _check_grid(input, grid, 3)
    m = ctx.meta()
    _expected_grad_output(grad_output, input, grid)
    if grad_output.numel() == 0:
        _grid_backward_empty(ctx, m, output_mask)
        return
    gs = _Grid3(ctx, input, grid, interpolation_mode, padding_mode, align_corners, True)
    dt = gs.op
    n, c, L = gs.n, gs.c, gs.L
    a = _Arith(ctx, dt, (n, c, L))
    go = ctx.reshape(ctx.input(grad_output, "grad_output"), (n, c, L))
    if output_mask[0]:
        upds, idxs = [], []
        for idx, valid, wt, *_ in gs.corners:
            upd = go if wt is None else a.mul(gs.wide(wt), go)
            upds.append(ctx.reshape(a.select(gs.wide(valid), upd, 0), (n, c, L, 1)))
            idxs.append(ctx.reshape(gs.wide(idx), (n, c, L, 1)))
        k = len(upds)
        if k > 1:
            upds = [ctx.op("concatenate", *upds, ints=(3,))]
            idxs = [ctx.op("concatenate", *idxs, ints=(3,))]
        size = _prod(input.shape[2:])
        gi = ctx.op("scatter", ctx.const(0, dt, (n, c, size)),
                    ctx.reshape(idxs[0], (n, c, L * k)), ctx.reshape(upds[0], (n, c, L * k)),
                    kind=_SCATTER_ADD, ints=(2,))
        ctx.output(ctx.reshape(gi, tuple(input.shape)), like=m[0])
    else:
        ctx.result_none()
    if gs.mode == _NEAREST:
        _zeros_result(ctx, m[1])
        return
    vals = gs.values()
    terms = [[], [], []]
    for v, (_, _, _, pos) in zip(vals, gs.corners):
        for k in range(3):
            # the value times the other two dims' weights times grad_output,
            # added for the far corner along dim k, subtracted for the near
            o1, o2 = [j for j in range(3) if j != k]
            t = a.mul(a.mul(a.mul(v, gs.wide(gs.wt[o1][pos[o1]])), gs.wide(gs.wt[o2][pos[o2]])),
                      go)
            terms[k].append(t if pos[k] else ctx.unary("negate", t))
    gg = []
    for k in range(3):
        s = _sum_terms(ctx, terms[k], 1)
        gg.append(ctx.reshape(ctx.binary("multiply", gs.mults[k], s), tuple(grid.shape[:4]) + (1,)))
    ctx.output(ctx.op("concatenate", *gg, ints=(4,)), like=m[1])

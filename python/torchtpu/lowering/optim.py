"""Optimizer ops: the ``_foreach_*`` family that torch.optim uses on the tpu
device (``foreach=None`` picks it for PrivateUse1 devices) and the fused
Adam/AdamW/SGD steps (``fused=True``).

A foreach call is one graph over all list elements, computed per element
like PyTorch's CPU (per-tensor) kernels: each element promotes its own
dtypes, reduced-precision floats compute in float32 and round once. Scalars,
scalar lists (one runtime operand per element, named "scalars.i") and the
fused optimizers' float hyper-parameters are runtime operands, so a learning
rate schedule never recompiles; branches on their values are selects.
"""
import math

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as K
from torch._prims_common import elementwise_dtypes

from .._registry import composite, lowering
from .ctx import OPMATH, NotLowerable, is_tensor
from .elementwise import _SUPPORTED

# Private op: the all-on-tpu half of _foreach_copy_ (one graph).
_LIB = torch.library.Library("torchtpu", "FRAGMENT")
_LIB.define("foreach_copy_(Tensor(a!)[] self, Tensor[] src) -> ()")

# The C dispatcher returns at most 32 results of one call (build_result in
# csrc/python/dispatch.c truncates longer Tensor[] returns), so functional
# foreach ops over longer lists run as a counted fallback.
_MAX_RESULTS = 32


def _unsupported(ctx, why):
    """Refuses a call. Functional ops run as the counted CPU fallback; ops
    that mutate tensor lists raise instead, because the fallback writes back
    only mutated Tensor arguments, not Tensor[] ones (torchtpu/_fallback.py),
    so it would drop their update silently."""
    if ctx.name.startswith("aten::_fused_") or _is_inplace(ctx):
        raise RuntimeError(f"{ctx.name}: {why} is not supported on the tpu device")
    raise NotLowerable(why)


def _check_dtypes(ctx, *xs):
    for x in xs:
        if is_tensor(x) and x.dtype not in _SUPPORTED:
            _unsupported(ctx, f"dtype {x.dtype}")


def _check_lists(ctx, lists, inplace):
    for ts in lists:
        for t in ts:
            if t.device.type != "tpu":
                _unsupported(ctx, "a tensor list with a tensor on another device")
            _check_dtypes(ctx, t)
    n = len(lists[0]) if lists else 0
    if not inplace and n > _MAX_RESULTS:
        raise NotLowerable(f"{n} results (the dispatcher returns at most {_MAX_RESULTS})")


def _operands(ctx, i, tensors, extras, compute, shape):
    """Element i's tensors ((tensor, name)) and extras ((value, name)) as
    values of dtype compute broadcast to shape."""
    vs = [ctx.broadcast(ctx.convert(ctx.input(t, n, i), compute), shape) for t, n in tensors]
    vs += [ctx.operand(x, compute, shape, n) for x, n in extras]
    return vs


def _foreach(ctx, fn, lists, names, inplace, kind=K.DEFAULT, promote=(), extras=()):
    """Builds one graph computing fn element by element.

    lists/names: the tensor-list arguments (self first) and their aten names;
    promote(i): scalars/0-dim tensors of element i that take part in type
    promotion, as (value, name); extras(i): further operands converted to
    the computation dtype without promoting (alpha, value, weight).
    fn(ctx, *values) gets the tensors, then promote, then extras."""
    m = ctx.meta()
    _check_lists(ctx, lists, inplace)
    for i in range(len(lists[0])):
        ts = [ts[i] for ts in lists]
        pr = list(promote(i)) if callable(promote) else list(promote)
        ex = list(extras(i)) if callable(extras) else list(extras)
        _check_dtypes(ctx, *[x for x, _ in pr + ex])
        compute, _ = elementwise_dtypes(*ts, *[x for x, _ in pr], type_promotion_kind=kind)
        if compute not in _SUPPORTED:
            _unsupported(ctx, f"dtype {compute}")
        shape = tuple(ts[0].shape) if inplace else tuple(m[i].shape)
        vs = _operands(ctx, i, list(zip(ts, names)), pr + ex, compute, shape)
        r = fn(ctx, *vs)
        if inplace:
            ctx.output_into(r, ts[0], "self")
        else:
            ctx.output(r, like=m[i])
    if inplace:
        ctx.results.clear()     # the in-place foreach ops return ()


def _variants(base, overloads):
    """'aten::_foreach_add' + ['List', 'Scalar'] -> functional and in-place names."""
    out = []
    for ov in overloads:
        suffix = f".{ov}" if ov else ""
        out += [f"aten::{base}{suffix}", f"aten::{base}_{suffix}"]
    return out


def _is_inplace(ctx):
    return ctx.name.split("::")[1].split(".")[0].endswith("_")


# ------------------------------------------------------------- binary ops

def _add(sign):
    def f(c, a, b, alpha=None):
        if alpha is not None:
            b = c.binary("multiply", b, alpha)
        return c.binary("add" if sign > 0 else "subtract", a, b)
    return f


_BINARY = {
    # name: (IR computation (alpha, when given, scales the other operand),
    #        promotion kind, overloads)
    "add": (_add(1), K.DEFAULT, ("List", "Scalar", "ScalarList", "Tensor")),
    "sub": (_add(-1), K.DEFAULT, ("List", "Scalar", "ScalarList")),
    "mul": (lambda c, a, b: c.binary("multiply", a, b), K.DEFAULT,
            ("List", "Scalar", "ScalarList", "Tensor")),
    "div": (lambda c, a, b: c.binary("divide", a, b), K.INT_TO_FLOAT,
            ("List", "Scalar", "ScalarList", "Tensor")),
    "maximum": (lambda c, a, b: c.binary("maximum", a, b), K.DEFAULT,
                ("List", "Scalar", "ScalarList")),
    "minimum": (lambda c, a, b: c.binary("minimum", a, b), K.DEFAULT,
                ("List", "Scalar", "ScalarList")),
    "clamp_min": (lambda c, a, b: c.binary("maximum", a, b), K.DEFAULT,
                  ("List", "Scalar", "ScalarList")),
    "clamp_max": (lambda c, a, b: c.binary("minimum", a, b), K.DEFAULT,
                  ("List", "Scalar", "ScalarList")),
}


def _binary_family(name, fn, kind, overloads):
    for ov in overloads:
        other_name = {"List": "other", "Scalar": "scalar", "ScalarList": "scalars",
                      "Tensor": "other"}[ov]

        def rule(ctx, self, *args, alpha=None, _ov=ov, _on=other_name, **kw):
            other = args[0] if args else kw[_on]
            inplace = _is_inplace(ctx)
            ctx.meta()
            extras = (lambda i: [(alpha, "alpha")]) if alpha is not None else ()
            if _ov == "List":
                lists, names, promote = [self, other], ["self", "other"], ()
            elif _ov == "Scalar":
                lists, names, promote = [self], ["self"], [(other, "scalar")]
            elif _ov == "ScalarList":
                lists, names = [self], ["self"]

                def promote(i):
                    return [(other[i], f"scalars.{i}")]
            else:
                if other.dim() != 0:
                    _unsupported(ctx, "a non-scalar tensor operand")
                lists, names, promote = [self], ["self"], [(other, "other")]
            _foreach(ctx, fn, lists, names, inplace, kind, promote, extras)

        runtime = (other_name, "alpha") if ov in ("Scalar", "ScalarList") else ("alpha",)
        lowering(*_variants(f"_foreach_{name}", [ov]), runtime=runtime)(rule)


for _n, _spec in _BINARY.items():
    _binary_family(_n, *_spec)


def _pow(c, a, b):
    return c.binary("power", a, b)


@lowering(*_variants("_foreach_pow", ["List", "Scalar", "ScalarList"]),
          runtime=("exponent",))
def foreach_pow(ctx, self, exponent):
    inplace = _is_inplace(ctx)
    if isinstance(exponent, (list, tuple)) and exponent and is_tensor(exponent[0]):
        lists, names, promote = [self, exponent], ["self", "exponent"], ()
    elif isinstance(exponent, (list, tuple)):
        lists, names = [self], ["self"]

        def promote(i):
            return [(exponent[i], f"exponent.{i}")]
    else:
        lists, names, promote = [self], ["self"], [(exponent, "exponent")]
    _float_only(ctx, self)
    _foreach(ctx, _pow, lists, names, inplace, K.DEFAULT, promote)


@lowering("aten::_foreach_pow.ScalarAndTensor", runtime=("self",))
def foreach_pow_scalar_base(ctx, self, exponent):
    _float_only(ctx, exponent)
    _foreach(ctx, lambda c, e, b: _pow(c, b, e), [exponent], ["exponent"], False,
             K.DEFAULT, [(self, "self")])


def _float_only(ctx, ts):
    ctx.meta()
    for t in ts:
        if not t.dtype.is_floating_point:
            _unsupported(ctx, f"{t.dtype} operands")


# ---------------------------------------------------- pointwise ternary

def _addcmul(c, s, t1, t2, v):
    return c.binary("add", s, c.binary("multiply", c.binary("multiply", v, t1), t2))


def _addcdiv(c, s, t1, t2, v):
    return c.binary("add", s, c.binary("multiply", v, c.binary("divide", t1, t2)))


def _pointwise_family(name, fn):
    def scalar_rule(ctx, self, tensor1, tensor2, value=1):
        if not is_tensor(value):
            _foreach(ctx, fn, [self, tensor1, tensor2], ["self", "tensor1", "tensor2"],
                     _is_inplace(ctx), K.DEFAULT, (), [(value, "value")])
        else:
            _unsupported(ctx, "a tensor value")

    def list_rule(ctx, self, tensor1, tensor2, scalars):
        _foreach(ctx, fn, [self, tensor1, tensor2], ["self", "tensor1", "tensor2"],
                 _is_inplace(ctx), K.DEFAULT, (), lambda i: [(scalars[i], f"scalars.{i}")])

    lowering(*_variants(f"_foreach_{name}", ["Scalar"]), runtime=("value",))(scalar_rule)
    lowering(*_variants(f"_foreach_{name}", ["ScalarList"]), runtime=("scalars",))(list_rule)


_pointwise_family("addcmul", _addcmul)
_pointwise_family("addcdiv", _addcdiv)


def _lerp(c, a, b, w):
    """PyTorch's lerp: exact at both ends, the formula chosen by |w| < 0.5."""
    small = c.compare("lt", c.unary("abs", w), c.const(0.5, w.dtype, w.shape))
    d = c.binary("subtract", b, a)
    lo = c.binary("add", a, c.binary("multiply", w, d))
    one = c.const(1, w.dtype, w.shape)
    hi = c.binary("subtract", b, c.binary("multiply", d, c.binary("subtract", one, w)))
    return c.select(small, lo, hi)


@lowering(*_variants("_foreach_lerp", ["List", "Scalar", "ScalarList"]), runtime=("weight",))
def foreach_lerp(ctx, self, tensors1, weight=None, weights=None):
    inplace = _is_inplace(ctx)
    _float_only(ctx, self)
    if weights is not None or (isinstance(weight, (list, tuple)) and weight
                               and is_tensor(weight[0])):
        ws = weights if weights is not None else weight
        _foreach(ctx, _lerp, [self, tensors1, ws], ["self", "tensors1", "weights"], inplace)
    elif isinstance(weight, (list, tuple)):
        _foreach(ctx, _lerp, [self, tensors1], ["self", "tensors1"], inplace, K.DEFAULT, (),
                 lambda i: [(weight[i], f"weight.{i}")])
    else:
        _foreach(ctx, _lerp, [self, tensors1], ["self", "tensors1"], inplace, K.DEFAULT, (),
                 [(weight, "weight")])


# ------------------------------------------------------------ unary ops

def _trunc(c, a):
    return c.select(c.compare("lt", a, c.const(0, a.dtype, a.shape)),
                    c.unary("ceil", a), c.unary("floor", a))


def _sign(c, a):
    """(0 < a) - (a < 0), as PyTorch computes sign: 0 for NaN and -0."""
    z = c.const(0, a.dtype, a.shape)
    return c.binary("subtract", c.convert(c.compare("gt", a, z), a.dtype),
                    c.convert(c.compare("lt", a, z), a.dtype))


def _un(ir):
    return lambda c, a: c.unary(ir, a)


_UNARY = {
    # name: (IR computation, promotion kind, defined for integers as identity)
    "sqrt": (_un("sqrt"), K.INT_TO_FLOAT, False),
    "rsqrt": (_un("rsqrt"), K.INT_TO_FLOAT, False),
    "exp": (_un("exponential"), K.INT_TO_FLOAT, False),
    "expm1": (_un("exponential_minus_one"), K.INT_TO_FLOAT, False),
    "log": (_un("log"), K.INT_TO_FLOAT, False),
    "log1p": (_un("log_plus_one"), K.INT_TO_FLOAT, False),
    "log2": (_un("log2"), K.INT_TO_FLOAT, False),
    "log10": (_un("log10"), K.INT_TO_FLOAT, False),
    "sin": (_un("sine"), K.INT_TO_FLOAT, False),
    "cos": (_un("cosine"), K.INT_TO_FLOAT, False),
    "tan": (_un("tan"), K.INT_TO_FLOAT, False),
    "asin": (_un("asin"), K.INT_TO_FLOAT, False),
    "acos": (_un("acos"), K.INT_TO_FLOAT, False),
    "atan": (_un("atan"), K.INT_TO_FLOAT, False),
    "sinh": (_un("sinh"), K.INT_TO_FLOAT, False),
    "cosh": (_un("cosh"), K.INT_TO_FLOAT, False),
    "tanh": (_un("tanh"), K.INT_TO_FLOAT, False),
    "sigmoid": (_un("logistic"), K.INT_TO_FLOAT, False),
    "erf": (_un("erf"), K.INT_TO_FLOAT, False),
    "lgamma": (_un("lgamma"), K.INT_TO_FLOAT, False),
    "reciprocal": (lambda c, a: c.binary("divide", c.const(1, a.dtype, a.shape), a),
                   K.INT_TO_FLOAT, False),
    "neg": (_un("negate"), K.DEFAULT, False),
    "abs": (_un("abs"), K.DEFAULT, False),
    "sign": (_sign, K.DEFAULT, False),
    "ceil": (_un("ceil"), K.DEFAULT, True),
    "floor": (_un("floor"), K.DEFAULT, True),
    "round": (_un("round_nearest_even"), K.DEFAULT, True),
    "trunc": (_trunc, K.DEFAULT, True),
    "frac": (lambda c, a: c.binary("subtract", a, _trunc(c, a)), K.DEFAULT, False),
}


def _unary_family(name, fn, kind, int_identity):
    def rule(ctx, self):
        ctx.meta()
        ints = [not t.dtype.is_floating_point for t in self]
        if any(ints) and (name == "frac" or any(t.dtype == torch.bool for t in self)):
            _unsupported(ctx, f"_foreach_{name} of a non-float tensor")
        _foreach(ctx, f, [self], ["self"], _is_inplace(ctx), kind)

    def f(c, a):
        if int_identity and not a.dtype.is_floating_point:
            return a            # rounding an integer is the identity
        return fn(c, a)

    lowering(f"aten::_foreach_{name}", f"aten::_foreach_{name}_")(rule)


for _n, _spec in _UNARY.items():
    _unary_family(_n, *_spec)


# ------------------------------------------------ copies and reductions

@lowering("aten::_foreach_zero_")
def foreach_zero_(ctx, self):
    ctx.meta()
    _check_lists(ctx, [self], True)
    for t in self:
        ctx.output_into(ctx.const(0, t.dtype, tuple(t.shape)), t, "self")
    ctx.results.clear()


@lowering("torchtpu::foreach_copy_")
def foreach_copy_tpu_(ctx, self, src):
    _check_lists(ctx, [self, src], True)
    for i, t in enumerate(self):
        ctx.output_into(ctx.input(src[i], "src", i), t, "self")
    ctx.results.clear()


@composite("aten::_foreach_copy_")
def foreach_copy_(self, src, non_blocking=False):
    """One graph when every tensor is on the tpu; per-tensor copies (which
    move data between devices) otherwise."""
    if len(self) != len(src):
        raise RuntimeError("Tensor lists must have the same number of tensors, got "
                           f"{len(self)} and {len(src)}")
    ts = list(self) + list(src)
    if all(t.device.type == "tpu" and t.dtype in _SUPPORTED for t in ts):
        torch.ops.torchtpu.foreach_copy_(self, src)
    else:
        for d, s_ in zip(self, src):
            d.copy_(s_, non_blocking)


@lowering("aten::_foreach_clone")
def foreach_clone(ctx, self, *, memory_format=None):
    m = ctx.meta()
    _check_lists(ctx, [self], False)
    for i, t in enumerate(self):
        ctx.output(ctx.materialize(ctx.input(t, "self", i)), like=m[i])


@lowering("aten::_foreach_max")
def foreach_max(ctx, self):
    m = ctx.meta()
    _check_lists(ctx, [self], False)
    for i, t in enumerate(self):
        if t.numel() == 0:
            _unsupported(ctx, "max of an empty tensor")
        v = ctx.input(t, "self", i)
        ctx.output(ctx.reduce("max", v, range(t.dim())), like=m[i])


@lowering("aten::_foreach_norm.Scalar")
def foreach_norm(ctx, self, ord=2, dtype=None):
    m = ctx.meta()
    _check_lists(ctx, [self], False)
    p = float(ord)
    for i, t in enumerate(self):
        if not t.dtype.is_floating_point:
            _unsupported(ctx, f"norm of {t.dtype}")
        acc = torch.float64 if torch.float64 in (t.dtype, m[i].dtype) else torch.float32
        x = ctx.convert(ctx.input(t, "self", i), acc)
        ctx.output(_vector_norm(ctx, x, p, t.numel()), like=m[i])


def _vector_norm(ctx, x, p, numel):
    """linalg.vector_norm of all of x (rank 0 result)."""
    dims = range(x.rank)
    a = ctx.unary("abs", x)
    if p == 2:
        return ctx.unary("sqrt", ctx.reduce("sum", ctx.binary("multiply", x, x), dims))
    if p == 1:
        return ctx.reduce("sum", a, dims)
    if p == 0:
        nz = ctx.convert(ctx.compare("ne", x, ctx.const(0, x.dtype, x.shape)), x.dtype)
        return ctx.reduce("sum", nz, dims)
    if math.isinf(p):
        if numel == 0:
            raise NotLowerable("infinity norm of an empty tensor")
        return ctx.reduce("max" if p > 0 else "min", a, dims)
    s = ctx.reduce("sum", ctx.binary("power", a, ctx.const(p, x.dtype, x.shape)), dims)
    return ctx.binary("power", s, ctx.const(1.0 / p, x.dtype))


# ----------------------------------------------------- fused optimizers

def _check_fused(ctx, lists, names, n):
    """Lengths, devices, dtypes and shapes of a fused optimizer's lists
    (params first)."""
    for ts, name in zip(lists, names):
        if len(ts) != n:
            raise RuntimeError(f"{ctx.name}: {name} must have the same length as params "
                               f"({n}), got {len(ts)}")
    dtype = lists[0][0].dtype
    if dtype not in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        _unsupported(ctx, f"a fused optimizer step of {dtype}")
    for ts in lists:
        for i, t in enumerate(ts):
            if t.device.type != "tpu":
                _unsupported(ctx, "a tensor on another device")
            if t.dtype != dtype or t.shape != lists[0][i].shape:
                raise RuntimeError(f"{ctx.name}: params, grads and states must have the "
                                   "same dtype and shapes")
    return dtype


def _found_inf(ctx, found_inf):
    """A predicate (rank 0) that is true when the step must be skipped."""
    if found_inf is None:
        return None
    f = ctx.convert(ctx.input(found_inf, "found_inf"), torch.float32)
    return ctx.compare("eq", f, ctx.const(1.0, torch.float32))


def _write(ctx, new, t, name, skip):
    """Stores new into t unless the step is skipped (found_inf)."""
    if skip is not None:
        old = ctx.input(t, name)
        new = ctx.select(ctx.broadcast(skip, new.shape), ctx.convert(old, new.dtype), new)
    ctx.output_into(new, t, name)


@lowering("aten::_fused_adam_", "aten::_fused_adam_.tensor_lr",
          "aten::_fused_adamw_", "aten::_fused_adamw_.tensor_lr",
          runtime=("lr", "beta1", "beta2", "weight_decay", "eps"))
def fused_adam_(ctx, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
                lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None,
                found_inf=None):
    """One step of torch.optim.Adam/AdamW(fused=True), as the CPU fused
    kernel computes it: coefficients in float64, the update in opmath."""
    adamw = "adamw" in ctx.name
    if not ctx.name.endswith("tensor_lr"):    # (no meta kernel for tensor_lr)
        ctx.meta()
    n = len(self)
    if n == 0:
        return
    lists = [self, grads, exp_avgs, exp_avg_sqs] + ([max_exp_avg_sqs] if amsgrad else [])
    names = ["params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"]
    dtype = _check_fused(ctx, lists, names, n)
    if len(state_steps) != n or any(t.numel() != 1 for t in state_steps):
        raise RuntimeError(f"{ctx.name}: expected one step per param")
    if any(t.device.type != "tpu" and t.dim() != 0 for t in state_steps):
        _unsupported(ctx, "state_steps on another device")
    f64 = torch.float64
    op = OPMATH.get(dtype, dtype)
    skip = _found_inf(ctx, found_inf)
    lr64 = ctx.operand(lr, f64, (), "lr")
    b1 = ctx.operand(beta1, f64, (), "beta1")
    b2 = ctx.operand(beta2, f64, (), "beta2")
    wd64 = ctx.operand(weight_decay, f64, (), "weight_decay")
    eps64 = ctx.operand(eps, f64, (), "eps")
    one64 = ctx.const(1.0, f64)
    c1 = ctx.binary("subtract", one64, b1)
    c2 = ctx.binary("subtract", one64, b2)
    decay = ctx.binary("subtract", one64, ctx.binary("multiply", lr64, wd64))
    wd_on = ctx.compare("ne", wd64, ctx.const(0.0, f64))
    scale = (ctx.convert(ctx.input(grad_scale, "grad_scale"), torch.float32)
             if grad_scale is not None else None)
    for i in range(n):
        shape = tuple(self[i].shape)

        def o(v64):
            return ctx.broadcast(ctx.convert(v64, op), shape)

        step = ctx.convert(ctx.input(state_steps[i], "state_steps", i), f64)
        bc1 = ctx.binary("subtract", one64, ctx.binary("power", b1, step))
        bc2 = ctx.binary("subtract", one64, ctx.binary("power", b2, step))
        step_size = ctx.binary("divide", lr64, bc1)
        bc2_sqrt = ctx.unary("sqrt", bc2)
        p = ctx.convert(ctx.input(self[i], "self", i), op)
        g = ctx.convert(ctx.input(grads[i], "grads", i), op)
        if scale is not None:
            g = ctx.binary("divide", g, ctx.broadcast(ctx.convert(scale, op), shape))
            _write(ctx, g, grads[i], "grads", skip)
        if maximize:
            g = ctx.unary("negate", g)
        wd_mask = ctx.broadcast(wd_on, shape)
        if adamw:
            p = ctx.select(wd_mask, ctx.binary("multiply", p, o(decay)), p)
        else:
            g = ctx.select(wd_mask, ctx.binary("add", g, ctx.binary("multiply", p, o(wd64))), g)
        # exp_avg.lerp_(grad, 1 - beta1)
        m = _lerp(ctx, ctx.convert(ctx.input(exp_avgs[i], "exp_avgs", i), op), g, o(c1))
        v = ctx.convert(ctx.input(exp_avg_sqs[i], "exp_avg_sqs", i), op)
        v = ctx.binary("add", ctx.binary("multiply", v, o(b2)),
                       ctx.binary("multiply", ctx.binary("multiply", o(c2), g), g))
        _write(ctx, m, exp_avgs[i], "exp_avgs", skip)
        _write(ctx, v, exp_avg_sqs[i], "exp_avg_sqs", skip)
        if amsgrad:
            mx = ctx.convert(ctx.input(max_exp_avg_sqs[i], "max_exp_avg_sqs", i), op)
            v = ctx.binary("maximum", mx, v)
            _write(ctx, v, max_exp_avg_sqs[i], "max_exp_avg_sqs", skip)
        denom = ctx.binary("add", ctx.binary("divide", ctx.unary("sqrt", v), o(bc2_sqrt)), o(eps64))
        p = ctx.binary("subtract", p, ctx.binary(
            "divide", ctx.binary("multiply", o(step_size), m), denom))
        _write(ctx, p, self[i], "self", skip)
    ctx.results.clear()


@lowering("aten::_fused_sgd_", "aten::_fused_sgd_.tensor_lr",
          runtime=("weight_decay", "momentum", "lr", "dampening"))
def fused_sgd_(ctx, self, grads, momentum_buffer_list, *, weight_decay, momentum, lr,
               dampening, nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    """One step of torch.optim.SGD(fused=True), as the CPU fused kernel
    computes it. An empty momentum_buffer_list means momentum == 0 (the
    caller's contract); with buffers, momentum 0 at run time skips them."""
    n = len(self)
    if n == 0:
        return
    has_buf = len(momentum_buffer_list) > 0
    lists = [self, grads] + ([momentum_buffer_list] if has_buf else [])
    dtype = _check_fused(ctx, lists, ["params", "grads", "momentum_buffer_list"], n)
    f64 = torch.float64
    op = OPMATH.get(dtype, dtype)
    skip = _found_inf(ctx, found_inf)
    wd64 = ctx.operand(weight_decay, f64, (), "weight_decay")
    mom64 = ctx.operand(momentum, f64, (), "momentum")
    lr_op = ctx.convert(ctx.operand(lr, f64, (), "lr"), op)
    damp = ctx.convert(ctx.binary("subtract", ctx.const(1.0, f64),
                                  ctx.operand(dampening, f64, (), "dampening")), op)
    wd_on = ctx.compare("ne", wd64, ctx.const(0.0, f64))
    mom_on = ctx.compare("ne", mom64, ctx.const(0.0, f64))
    wd_op, mom_op = ctx.convert(wd64, op), ctx.convert(mom64, op)
    scale = (ctx.convert(ctx.input(grad_scale, "grad_scale"), torch.float32)
             if grad_scale is not None else None)
    for i in range(n):
        shape = tuple(self[i].shape)

        def b(v):
            return ctx.broadcast(v, shape)

        p = ctx.convert(ctx.input(self[i], "self", i), op)
        g = ctx.convert(ctx.input(grads[i], "grads", i), op)
        if scale is not None:
            g = ctx.binary("divide", g, b(ctx.convert(scale, op)))
            _write(ctx, g, grads[i], "grads", skip)
        if maximize:
            g = ctx.unary("negate", g)
        g = ctx.select(b(wd_on), ctx.binary("add", g, ctx.binary("multiply", p, b(wd_op))), g)
        if has_buf:
            if is_first_step:
                buf = g
            else:
                buf = ctx.convert(ctx.input(momentum_buffer_list[i], "momentum_buffer_list", i), op)
                buf = ctx.binary("add", ctx.binary("multiply", buf, b(mom_op)),
                                 ctx.binary("multiply", g, b(damp)))
            if nesterov:
                upd = ctx.binary("add", g, ctx.binary("multiply", buf, b(mom_op)))
            else:
                upd = buf
            on = b(mom_on)
            old = ctx.convert(ctx.input(momentum_buffer_list[i], "momentum_buffer_list", i), op)
            _write(ctx, ctx.select(on, buf, old), momentum_buffer_list[i],
                   "momentum_buffer_list", skip)
            g = ctx.select(on, upd, g)
        p = ctx.binary("subtract", p, ctx.binary("multiply", g, b(lr_op)))
        _write(ctx, p, self[i], "self", skip)
    ctx.results.clear()

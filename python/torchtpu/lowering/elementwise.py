"""Elementwise ops: arithmetic, comparisons, activations, copies."""
import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as K
from torch._prims_common import elementwise_dtypes

from .._registry import lowering
from .ctx import NotLowerable, is_tensor

_SUPPORTED = {
    torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
    torch.bfloat16, torch.float16, torch.float32, torch.float64,
}


def _check_dtypes(*xs):
    for x in xs:
        if is_tensor(x) and x.dtype not in _SUPPORTED:
            raise NotLowerable(f"dtype {x.dtype}")


def broadcast_shapes(*shapes):
    """The broadcast of shapes, failing with TensorIterator's message."""
    out = []
    for shape in shapes:
        shape = list(shape)
        if len(shape) > len(out):
            out = [1] * (len(shape) - len(out)) + out
        for i in range(1, len(shape) + 1):
            a, b = out[-i], shape[-i]
            if a != b and a != 1 and b != 1:
                raise RuntimeError(
                    f"The size of tensor a ({a}) must match the size of tensor b ({b}) "
                    f"at non-singleton dimension {len(out) - i}")
            if a == 1:
                out[-i] = b
    return tuple(out)


def elementwise(ctx, fn, inputs, names, kind=K.DEFAULT, into=None):
    """Computes fn over inputs (tensors or scalars) with PyTorch's type
    promotion: operands converted to the computation dtype (float32 for
    reduced-precision floats), the result converted to the output dtype.
    names: the aten argument name of each input (a Python number passed
    for a runtime argument becomes a runtime operand, never a constant).
    into: a tensor to write (in-place ops, out=)."""
    _check_dtypes(*inputs)
    broadcast_shapes(*(x.shape for x in inputs if is_tensor(x)))
    compute, _ = elementwise_dtypes(*inputs, type_promotion_kind=kind)
    if compute not in _SUPPORTED:
        raise NotLowerable(f"dtype {compute}")
    m = ctx.meta()
    meta_out = m[0] if isinstance(m, (tuple, list)) else m
    shape = tuple(meta_out.shape)
    ops = [ctx.operand(x, compute, shape, n) for x, n in zip(inputs, names)]
    r = fn(ctx, *ops)
    if into is not None:
        ctx.output_into(r, into)
    else:
        ctx.output(r, like=meta_out)
    return r


def _bool_aware(ctx, ir, a, b):
    """Arithmetic on bools, as PyTorch computes it: + is or, * is and."""
    if a.dtype == torch.bool:
        ir = {"add": "or", "multiply": "and"}.get(ir, ir)
    return ctx.binary(ir, a, b)


def _binary_rule(name, ir, kind=K.DEFAULT, alpha=False):
    """add/sub-style ops in all their aten overloads."""

    def compute(ctx, a, b, alpha_v=None):
        if alpha_v is not None:
            b = _bool_aware(ctx, "multiply", b, alpha_v)
        return _bool_aware(ctx, ir, a, b)

    def make(overload, inplace=False, out=False, scalar_other=False):
        def rule(ctx, self, other, *, alpha=None, out_t=None, **kw):
            target = self if inplace else kw.get("out")
            inputs = [self, other]
            names = ["self", "other"]
            if alpha is not None:
                # alpha is a runtime operand: never specialise on its value
                def f(ctx, a, b):
                    av = ctx.operand(alpha, a.dtype, a.shape, "alpha")
                    return compute(ctx, a, b, av)
            else:
                def f(ctx, a, b):
                    return compute(ctx, a, b)
            elementwise(ctx, f, inputs, names, kind, into=target)

        lowering(overload, runtime=("alpha", "other"))(rule)

    make(f"aten::{name}.Tensor")
    make(f"aten::{name}_.Tensor", inplace=True)
    make(f"aten::{name}.out", out=True)
    make(f"aten::{name}.Scalar", scalar_other=True)
    make(f"aten::{name}_.Scalar", inplace=True, scalar_other=True)
    make(f"aten::{name}.Scalar_out", out=True, scalar_other=True)


_binary_rule("add", "add")
_binary_rule("sub", "subtract")


def _mul_div(name, ir, kind):
    def make(overload, inplace=False, scalar_other=False):
        def rule(ctx, self, other, **kw):
            target = self if inplace else kw.get("out")
            elementwise(ctx, lambda c, a, b: _bool_aware(c, ir, a, b), [self, other],
                        ["self", "other"], kind, into=target)

        lowering(overload, runtime=("other",))(rule)

    make(f"aten::{name}.Tensor")
    make(f"aten::{name}_.Tensor", inplace=True)
    make(f"aten::{name}.out")
    make(f"aten::{name}.Scalar", scalar_other=True)
    make(f"aten::{name}_.Scalar", inplace=True, scalar_other=True)
    make(f"aten::{name}.Scalar_out")


_mul_div("mul", "multiply", K.DEFAULT)
_mul_div("div", "divide", K.INT_TO_FLOAT)


def _div_mode(ctx, a, b, mode, store=None):
    """a / b rounded as rounding_mode says. store: the result dtype when it is
    narrower than the float32 computation; the CPU rounds each intermediate
    of a bfloat16/float16 rounding division to it, and so do we."""
    if store is not None and store != a.dtype:
        def rnd(v):
            return ctx.convert(ctx.convert(v, store), v.dtype)
    else:
        def rnd(v):
            return v
    q = rnd(ctx.binary("divide", a, b))
    if mode is None:
        return q
    if a.dtype.is_floating_point:
        if mode == "trunc":
            # trunc(q) = sign(q) * floor(|q|)
            return ctx.select(ctx.compare("lt", q, ctx.const(0, q.dtype, q.shape)),
                              ctx.unary("ceil", q), ctx.unary("floor", q))
        # PyTorch's div_floor: from fmod, rounded to the nearest integer, so
        # results are integral and bitwise equal to the CPU's
        c = lambda v: ctx.const(v, a.dtype, a.shape)
        mod = rnd(ctx.binary("remainder", a, b))
        div = rnd(ctx.binary("divide", rnd(ctx.binary("subtract", a, mod)), b))
        adjust = ctx.op("and", ctx.compare("ne", mod, c(0)),
                        ctx.compare("ne", ctx.compare("lt", b, c(0)), ctx.compare("lt", mod, c(0))))
        div = ctx.select(adjust, rnd(ctx.binary("subtract", div, c(1))), div)
        fd = ctx.unary("floor", div)
        fd = ctx.select(ctx.compare("gt", rnd(ctx.binary("subtract", div, fd)), c(0.5)),
                        rnd(ctx.binary("add", fd, c(1))), fd)
        # a zero quotient carries the sign of a / b (finite here)
        fd = ctx.select(ctx.compare("ne", div, c(0)), fd, ctx.binary("multiply", c(0), q))
        return ctx.select(ctx.compare("eq", b, c(0)), q, fd)
    if mode == "trunc":
        return q
    # integer floor division
    r = ctx.binary("remainder", a, b)
    zero = ctx.const(0, a.dtype, a.shape)
    adjust = ctx.op("and", ctx.compare("ne", r, zero),
                    ctx.compare("ne", ctx.compare("lt", r, zero), ctx.compare("lt", b, zero)))
    return ctx.select(adjust, ctx.binary("subtract", q, ctx.const(1, a.dtype, a.shape)), q)


def _rounding_store(self, other, kind):
    """The dtype the CPU rounds a rounding division's intermediates to: the
    result dtype, except when the divisor is a scalar (a number or a tensor
    of one element), which the CPU divides by in float32 without rounding."""
    if not is_tensor(other) or other.numel() == 1:
        return None
    return elementwise_dtypes(self, other, type_promotion_kind=kind)[1]


@lowering("aten::div.Tensor_mode", "aten::div_.Tensor_mode", "aten::div.out_mode",
          "aten::div.Scalar_mode", "aten::div_.Scalar_mode", "aten::div.Scalar_mode_out",
          runtime=("other",))
def div_mode(ctx, self, other, *, rounding_mode=None, out=None):
    inplace = ctx.name.startswith("aten::div_")
    kind = K.INT_TO_FLOAT if rounding_mode is None else K.DEFAULT
    store = _rounding_store(self, other, kind)
    elementwise(ctx, lambda c, a, b: _div_mode(c, a, b, rounding_mode, store), [self, other],
                ["self", "other"], kind, into=self if inplace else out)


@lowering("aten::floor_divide", "aten::floor_divide.Scalar", "aten::floor_divide.out",
          "aten::floor_divide.Scalar_out", "aten::floor_divide_.Tensor",
          "aten::floor_divide_.Scalar", runtime=("other",))
def floor_divide(ctx, self, other, *, out=None):
    """Python's //: division rounded toward negative infinity."""
    inplace = ctx.name.startswith("aten::floor_divide_")
    store = _rounding_store(self, other, K.DEFAULT)
    elementwise(ctx, lambda c, a, b: _div_mode(c, a, b, "floor", store), [self, other],
                ["self", "other"], K.DEFAULT, into=self if inplace else out)


def _unary(overloads, fn, kind=K.INT_TO_FLOAT):
    for ov in overloads:
        inplace = ov.split("::")[1].split(".")[0].endswith("_")

        def rule(ctx, self, *, out=None, _inplace=inplace):
            elementwise(ctx, fn, [self], ["self"], kind, into=self if _inplace else out)

        lowering(ov)(rule)


def _unary_family(name, fn, kind=K.INT_TO_FLOAT):
    _unary([f"aten::{name}", f"aten::{name}_", f"aten::{name}.out"], fn, kind)


_unary_family("exp", lambda c, a: c.unary("exponential", a))
_unary_family("neg", lambda c, a: c.unary("negate", a), K.DEFAULT)


def _relu(c, a):
    return c.binary("maximum", a, c.const(0, a.dtype, a.shape))


_unary(["aten::relu", "aten::relu_"], _relu, K.DEFAULT)


@lowering("aten::threshold_backward", "aten::threshold_backward.grad_input",
          runtime=("threshold",))
def threshold_backward(ctx, grad_output, self, threshold, *, grad_input=None):
    def f(c, g, x):
        th = c.operand(threshold, x.dtype, x.shape, "threshold")
        return c.select(c.compare("le", x, th), c.const(0, g.dtype, g.shape), g)

    elementwise(ctx, f, [grad_output, self], ["grad_output", "self"], K.DEFAULT,
                into=grad_input)


@lowering("torchtpu::copy_")
def copy_(ctx, self, src):
    """tpu -> tpu copy with dtype conversion and broadcasting."""
    _check_dtypes(self, src)
    ctx.output_into(ctx.input(src, "src"), self, "self")

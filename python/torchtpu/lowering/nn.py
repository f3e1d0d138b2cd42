"""Neural-network ops: softmax and friends."""
import torch

from .._registry import lowering
from .ctx import NotLowerable
from .elementwise import _check_dtypes


def _acc(dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


@lowering("aten::_softmax", "aten::_softmax.out")
def softmax(ctx, self, dim, half_to_float, *, out=None):
    _check_dtypes(self)
    if not self.dtype.is_floating_point:
        raise NotLowerable("softmax of integers")
    m = ctx.meta()
    x = ctx.convert(ctx.input(self, "self"), _acc(self.dtype))
    if self.dim() == 0:
        r = ctx.binary("divide", ctx.unary("exponential", ctx.binary("subtract", x, x)),
                       ctx.unary("exponential", ctx.binary("subtract", x, x)))
    else:
        d = dim % self.dim()
        kept = [i for i in range(self.dim()) if i != d]
        mx = ctx.broadcast_in_dim(ctx.reduce("max", x, [d]), x.shape, kept)
        e = ctx.unary("exponential", ctx.binary("subtract", x, mx))
        s = ctx.broadcast_in_dim(ctx.reduce("sum", e, [d]), x.shape, kept)
        r = ctx.binary("divide", e, s)
    if out is not None:
        ctx.output_into(r, out)
    else:
        ctx.output(r, like=m)


@lowering("aten::_softmax_backward_data", "aten::_softmax_backward_data.out")
def softmax_backward(ctx, grad_output, output, dim, input_dtype, *, grad_input=None):
    _check_dtypes(grad_output, output)
    m = ctx.meta()
    acc = _acc(output.dtype)
    g = ctx.convert(ctx.input(grad_output, "grad_output"), acc)
    y = ctx.convert(ctx.input(output, "output"), acc)
    if output.dim() == 0:
        r = ctx.binary("subtract", ctx.binary("multiply", g, y),
                       ctx.binary("multiply", y, ctx.binary("multiply", g, y)))
    else:
        d = dim % output.dim()
        kept = [i for i in range(output.dim()) if i != d]
        gy = ctx.binary("multiply", g, y)
        s = ctx.broadcast_in_dim(ctx.reduce("sum", gy, [d]), y.shape, kept)
        r = ctx.binary("subtract", gy, ctx.binary("multiply", y, s))
    if grad_input is not None:
        ctx.output_into(r, grad_input)
    else:
        ctx.output(r, like=m)

"""In-place fills and random numbers: what torch.zeros/ones/full/arange/rand/
randn become on the tpu device (empty + one of these)."""
import torch

from .._registry import lowering
from .ctx import NotLowerable
from .elementwise import _check_dtypes

_LIB = torch.library.Library("aten", "IMPL")


@lowering("aten::fill_.Scalar", runtime=("value",))
def fill_scalar(ctx, self, value):
    _check_dtypes(self)
    ctx.output_into(ctx.operand(value, self.dtype, tuple(self.shape), "value"), self)


@lowering("aten::fill_.Tensor")
def fill_tensor(ctx, self, value):
    _check_dtypes(self, value)
    ctx.output_into(ctx.operand(value, self.dtype, tuple(self.shape), "value"), self)


@lowering("aten::zero_")
def zero_(ctx, self):
    _check_dtypes(self)
    ctx.output_into(ctx.const(0, self.dtype, tuple(self.shape)), self)


def _float_target(self, what):
    _check_dtypes(self)
    if not self.dtype.is_floating_point:
        raise NotLowerable(f"{what} of {self.dtype}")


@lowering("aten::uniform_", runtime=("from", "to"))
def uniform_(ctx, self, *args, generator=None, **kw):
    _float_target(self, "uniform_")
    if generator is not None:
        raise NotLowerable("explicit generator")
    lo = args[0] if len(args) > 0 else kw.get("from", 0.0)
    hi = args[1] if len(args) > 1 else kw.get("to", 1.0)
    acc = torch.float64 if self.dtype == torch.float64 else torch.float32
    shape = tuple(self.shape)
    u = ctx.rng("uniform", acc, shape)
    a = ctx.operand(lo, acc, shape, "from")
    b = ctx.operand(hi, acc, shape, "to")
    ctx.output_into(ctx.binary("add", a, ctx.binary("multiply", u, ctx.binary("subtract", b, a))), self)


@lowering("aten::normal_", runtime=("mean", "std"))
def normal_(ctx, self, mean=0.0, std=1.0, *, generator=None):
    _float_target(self, "normal_")
    if generator is not None:
        raise NotLowerable("explicit generator")
    acc = torch.float64 if self.dtype == torch.float64 else torch.float32
    shape = tuple(self.shape)
    z = ctx.rng("normal", acc, shape)
    mu = ctx.operand(mean, acc, shape, "mean")
    sd = ctx.operand(std, acc, shape, "std")
    ctx.output_into(ctx.binary("add", mu, ctx.binary("multiply", z, sd)), self)


@lowering("torchtpu::iota_", runtime=("start", "step"))
def iota_(ctx, self, start, step):
    _check_dtypes(self)
    acc = torch.float64 if self.dtype.is_floating_point else torch.int64
    shape = tuple(self.shape)
    i = ctx.iota(acc, shape, 0)
    v = ctx.binary("add", ctx.operand(start, acc, shape, "start"),
                   ctx.binary("multiply", i, ctx.operand(step, acc, shape, "step")))
    ctx.output_into(v, self)


def arange_out(start, end, step=1, *, out):
    """aten::arange.start_out: size the output like PyTorch, then fill it."""
    n = torch.arange(start, end, step, dtype=out.dtype, device="meta").numel()
    if out.numel() != n or out.dim() != 1:
        out.resize_((n,))
    if n:
        torch.ops.torchtpu.iota_(out, start, step)
    return out


_LIB.impl("arange.start_out", arange_out, "PrivateUse1")

"""Matrix products: the MXU, with the precision rules of docs/design."""
import torch

from .. import _C
from .._registry import composite, lowering
from .ctx import NotLowerable
from .elementwise import _SUPPORTED, _check_dtypes

_MXU = {torch.float32, torch.bfloat16, torch.float16, torch.float64,
        torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64}


def _precision():
    return _C.get_precision()


def _acc(dtype):
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _mm(ctx, a, b, batch=0, names=("self", "mat2")):
    """dot of [..., M, K] x [..., K, N] with `batch` leading batch dims,
    accumulated in f32 for reduced precision inputs."""
    va, vb = ctx.input(a, names[0]), ctx.input(b, names[1])
    acc = _acc(a.dtype)
    shape = tuple(a.shape[:-1]) + (b.shape[-1],)
    bd = tuple(range(batch))
    return ctx.dot_general(va, vb, bd, bd, (batch + 1,), (batch,), _precision(),
                           out_dtype=acc, out_shape=shape)


def _check(*ts):
    _check_dtypes(*ts)
    for t in ts:
        if t.dtype not in _MXU:
            raise NotLowerable(f"matmul of {t.dtype}")


@lowering("aten::mm", "aten::mm.out", uses_precision=True)
def mm(ctx, self, mat2, *, out=None):
    _check(self, mat2)
    m = ctx.meta()
    r = _mm(ctx, self, mat2)
    if out is not None:
        ctx.output_into(r, out)
    else:
        ctx.output(r, like=m)


@lowering("aten::bmm", "aten::bmm.out", uses_precision=True)
def bmm(ctx, self, mat2, *, out=None):
    _check(self, mat2)
    m = ctx.meta()
    r = _mm(ctx, self, mat2, batch=1)
    if out is not None:
        ctx.output_into(r, out)
    else:
        ctx.output(r, like=m)


@lowering("aten::addmm", "aten::addmm.out", "aten::addmm_", uses_precision=True)
def addmm(ctx, self, mat1, mat2, *, beta=1, alpha=1, out=None):
    _check(self, mat1, mat2)
    inplace = ctx.name == "aten::addmm_"
    m = self if inplace else (out if out is not None else ctx.meta())
    prod = _mm(ctx, mat1, mat2, names=("mat1", "mat2"))
    acc = prod.dtype
    if alpha != 1:
        prod = ctx.binary("multiply", prod, ctx.const(alpha, acc, prod.shape))
    if beta != 0:
        bias = ctx.convert(ctx.input(self, "self"), acc)
        bias = ctx.broadcast(bias, prod.shape)
        if beta != 1:
            bias = ctx.binary("multiply", bias, ctx.const(beta, acc, prod.shape))
        prod = ctx.binary("add", bias, prod)
    if inplace:
        ctx.output_into(prod, self)
    elif out is not None:
        ctx.output_into(prod, out)
    else:
        ctx.output(prod, like=m)


# ------------------------------------------------------------------ addr

# The device half of aten::addr (the composite below); on other devices it
# is aten::addr itself, which gives meta shapes and PyTorch's error messages.
_LIB = torch.library.Library("torchtpu", "FRAGMENT")
_LIB.define("addr(Tensor self, Tensor vec1, Tensor vec2, Scalar beta, Scalar alpha) -> Tensor")
_LIB.impl("addr", lambda self, vec1, vec2, beta, alpha: torch.ops.aten.addr.default(
    self, vec1, vec2, beta=beta, alpha=alpha), "CompositeExplicitAutograd")


@lowering("torchtpu::addr")
def addr_lowered(ctx, self, vec1, vec2, beta, alpha):
    """beta * self + (alpha * vec1) (x) vec2 as PyTorch's CPU kernel computes
    it: in the common dtype itself (bf16 rounds every step; alpha and beta
    are converted to it first), self ignored when beta converts to zero."""
    m = ctx.meta()
    dt = m.dtype
    shape = tuple(m.shape)
    a = ctx.convert(ctx.input(vec1, "vec1"), dt)
    b = ctx.broadcast_in_dim(ctx.convert(ctx.input(vec2, "vec2"), dt), shape, (1,))
    beta_v = torch.tensor(beta).to(dt)
    if dt == torch.bool:
        prod = ctx.op("and", ctx.broadcast_in_dim(a, shape, (0,)), b) if bool(alpha) else \
            ctx.const(False, dt, shape)
        if bool(beta_v):
            s = ctx.broadcast(ctx.convert(ctx.input(self, "self"), dt), shape)
            prod = ctx.op("or", s, prod)
    else:
        a = ctx.binary("multiply", ctx.const(alpha, dt, a.shape), a)
        prod = ctx.binary("multiply", ctx.broadcast_in_dim(a, shape, (0,)), b)
        if beta_v.item() != 0:
            s = ctx.broadcast(ctx.convert(ctx.input(self, "self"), dt), shape)
            prod = ctx.binary("add", ctx.binary("multiply", ctx.const(beta, dt, shape), s), prod)
    ctx.output(prod, like=m)


_ADDR = torch.ops.torchtpu.addr.default
_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


@composite("aten::addr")
def addr(self, vec1, vec2, *, beta=1, alpha=1):
    """The lowered kernel for real dtypes; complex ones take PyTorch's own
    decomposition (outer, mul, add), which runs on the device."""
    ts = (self, vec1, vec2)
    if any(t.dtype not in _SUPPORTED for t in ts) or any(
            isinstance(s, complex) for s in (beta, alpha)):
        return torch.ops.aten.addr.default.redispatch(_COMPOSITE, self, vec1, vec2, beta=beta,
                                                      alpha=alpha)
    return _ADDR(self, vec1, vec2, beta, alpha)

"""Matrix products: the MXU, with the precision rules of docs/design."""
import torch

from .. import _C
from .._registry import lowering
from .ctx import NotLowerable
from .elementwise import _check_dtypes

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

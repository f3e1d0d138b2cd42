"""Reductions."""
import torch

from .._registry import lowering
from .ctx import NotLowerable
from .elementwise import _check_dtypes

_INT = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    if isinstance(dim, int):
        dim = [dim]
    r = max(x.dim(), 1)
    return sorted({d % r for d in dim}) if x.dim() > 0 else []


def _keep(ctx, v, x, dims, keepdim):
    """Re-inserts reduced dims as size 1 when keepdim."""
    if not keepdim or x.dim() == 0:
        return v
    shape = [1 if i in dims else s for i, s in enumerate(x.shape)]
    kept = [i for i in range(x.dim()) if i not in dims]
    return ctx.broadcast_in_dim(v, shape, kept)


def _acc_dtype(dtype):
    if dtype in _INT:
        return torch.int64
    if dtype in (torch.bfloat16, torch.float16):
        return torch.float32
    return dtype


@lowering("aten::sum", "aten::sum.dim_IntList", "aten::sum.IntList_out")
def sum_(ctx, self, dim=None, keepdim=False, *, dtype=None, out=None):
    _check_dtypes(self)
    m = ctx.meta()
    out_dtype = m.dtype
    if out_dtype.is_complex:
        raise NotLowerable("complex sum")
    dims = _dims(self, dim)
    acc = _acc_dtype(out_dtype)
    v = ctx.convert(ctx.input(self, "self"), acc)
    r = ctx.reduce("sum", v, dims)
    r = _keep(ctx, ctx.convert(r, out_dtype), self, dims, keepdim)
    if out is not None:
        ctx.output_into(r, out)
    else:
        ctx.output(r, like=m)

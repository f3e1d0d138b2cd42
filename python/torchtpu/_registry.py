"""Registration of aten ops on the tpu device.

A lowering rule is a small function ``rule(ctx, *args, **kwargs)`` that builds
an IR graph for one aten overload with the helpers of ``LowerCtx``. It runs
only on a cache miss: the C ``Op`` object registered with PyTorch fingerprints
every call (op, tensor dtypes/shapes/strides, scalar types, static
arguments, precision) and reuses the compiled executable on a hit.

    @lowering("aten::add.Tensor", runtime=("alpha",))
    def add(ctx, self, other, alpha=1): ...

Arguments named in ``runtime`` are Python scalars passed to the executable
at run time (a learning rate, alpha), not baked into the program.
"""
import warnings

import torch

from . import _C
from ._fallback import run_fallback
from .lowering.ctx import LowerCtx, NotLowerable, to_meta

_LIBS = {}      # namespace -> torch.library.Library
_OPS = {}       # "aten::name.overload" -> _C.Op
_RULES = {}     # "aten::name.overload" -> rule


def _overload(name):
    """torch OpOverload for 'aten::name.overload'."""
    ns, _, rest = name.partition("::")
    base, _, ov = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, ov or "default")


def _kind(arg, runtime):
    t = arg.type
    if isinstance(t, torch.TensorType):
        return _C.K_TENSOR
    if isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType):
        return _C.K_TENSOR
    if isinstance(t, torch.ListType):
        e = t.getElementType()
        if isinstance(e, torch.TensorType) or (
            isinstance(e, torch.OptionalType)
            and isinstance(e.getElementType(), torch.TensorType)
        ):
            return _C.K_TENSOR_LIST
    if arg.name in runtime:
        return _C.K_SCALAR
    return _C.K_STATIC


def _make_lower(name, rule, overload, pos_names, kinds):
    schema = overload._schema
    single = len(schema.returns) == 1 and isinstance(schema.returns[0].type, torch.TensorType)

    def lower(op, tensors, scalar_names, args, kwargs):
        ctx = LowerCtx(name, overload, tensors, scalar_names, args, kwargs or {},
                       pos_names, kinds)
        try:
            rule(ctx, *args, **(kwargs or {}))
        except NotLowerable as e:
            return ("fallback", run_fallback(overload, args, kwargs or {}, reason=str(e)))
        return ctx.finish(single)

    return lower


def _with_out_resize(op, overload, out_names):
    """out= overloads: PyTorch resizes `out` to the result's shape before
    writing (warning when it had elements). The cached program is built for
    a fixed `out` shape, so the resize happens here, outside the cache, with
    PyTorch's own meta kernel deciding the shape (and warning)."""

    def kernel(*args, **kwargs):
        outs = [kwargs.get(n) for n in out_names]
        if any(isinstance(o, torch.Tensor) and o.device.type == "tpu" for o in outs):
            meta_kwargs = {k: to_meta(v) for k, v in kwargs.items()}
            overload(*[to_meta(a) for a in args], **meta_kwargs)
            for n, o in zip(out_names, outs):
                want = meta_kwargs[n]
                if isinstance(o, torch.Tensor) and (o.shape != want.shape):
                    o.resize_(want.shape)
        return op(*args, **kwargs)

    return kernel


def lowering(*names, runtime=(), uses_precision=False, allow_cpu_tensors=False):
    """Registers rule for the given aten overloads on the tpu device."""

    def deco(rule):
        for name in names:
            overload = _overload(name)
            schema = overload._schema
            pos = [a for a in schema.arguments if not a.kwarg_only]
            kwo = [a for a in schema.arguments if a.kwarg_only]
            kinds = {a.name: _kind(a, runtime) for a in schema.arguments}
            pos_names = tuple(a.name for a in pos)
            op = _C.Op(
                name,
                _make_lower(name, rule, overload, pos_names, kinds),
                tuple(kinds[a.name] for a in pos),
                pos_names,
                {a.name: kinds[a.name] for a in kwo},
                uses_precision,
                allow_cpu_tensors,
            )
            _OPS[name] = op
            _RULES[name] = rule
            ns, _, short = name.partition("::")
            if ns not in _LIBS:
                _LIBS[ns] = torch.library.Library(ns, "IMPL")
            out_names = [a.name for a in kwo
                         if a.alias_info is not None and a.alias_info.is_write]
            kernel = _with_out_resize(op, overload, out_names) if out_names else op
            _LIBS[ns].impl(short, kernel, "PrivateUse1")
        return rule

    return deco


def composite(*names):
    """Registers a Python kernel for aten overloads that is written with other
    aten ops on tpu tensors (each of which runs through its own lowering), for
    ops whose output size depends on data (nonzero) or that chain several
    lowered ops (transformer fast paths). Counted in registered_ops()."""

    def deco(fn):
        for name in names:
            ns, _, short = name.partition("::")
            if ns not in _LIBS:
                _LIBS[ns] = torch.library.Library(ns, "IMPL")
            _LIBS[ns].impl(short, fn, "PrivateUse1")
            _COMPOSITES[name] = fn
        return fn

    return deco


_COMPOSITES = {}


def meta_check(overload, args, kwargs):
    """PyTorch's argument checks for a call, run on meta stand-ins (skipped
    where the meta kernel would need data, as for boolean masks)."""
    try:
        overload(*to_meta(list(args), True), **{k: to_meta(v, True) for k, v in kwargs.items()})
    except NotImplementedError:
        pass


def resize_out(out, shape):
    """Resizes an out= tensor to shape as PyTorch's resize_output does,
    warning when it had elements."""
    shape = tuple(shape)
    if tuple(out.shape) == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape "
            f"{list(shape)}. This behavior is deprecated, and in a future PyTorch release "
            "outputs will not be resized unless they have zero elements. You can explicitly "
            "reuse an out tensor t by resizing it, inplace, to zero elements with "
            "t.resize_(0).", UserWarning, stacklevel=3)
    out.resize_(shape)


def out_variant(out_name, functional, dtype_from_out=False):
    """Registers out_name (an out= overload) as a composite: PyTorch's meta
    kernel checks the out= tensors (dtype rules, argument errors), then the
    functional op runs and its results are copied into the outputs, resized
    like resize_output does. The resize happens on every call, not only when
    a program is lowered; out= calls are rare. dtype_from_out: the op's
    dtype= argument defaults to the output's dtype."""
    out_ov = _overload(out_name)
    outs = [a.name for a in out_ov._schema.arguments
            if a.alias_info is not None and a.alias_info.is_write]

    def kernel(*args, **kwargs):
        targets = [kwargs.pop(n) for n in outs]
        meta_check(out_ov, args, dict(kwargs, **{
            n: torch.empty(0, dtype=t.dtype, device="meta") for n, t in zip(outs, targets)}))
        if dtype_from_out and kwargs.get("dtype") is None:
            kwargs["dtype"] = targets[0].dtype
        res = functional(*args, **kwargs)
        res = res if isinstance(res, (tuple, list)) else (res,)
        for t, r in zip(targets, res):
            resize_out(t, r.shape)
            if t.numel():
                t.copy_(r)
        return targets[0] if len(targets) == 1 else tuple(targets)

    composite(out_name)(kernel)


def registered_ops():
    """Names of the aten overloads with a tpu implementation (a lowering rule
    or a composite of lowered ops)."""
    return sorted(set(_OPS) | set(_COMPOSITES))


def op_handle(name):
    return _OPS[name]

"""Registration of the tpu device with PyTorch: the PrivateUse1 key renamed
to "tpu", hooks and guard, storage/copy/view kernels, lowering rules, the
CPU fallback, printing and serialization."""
import warnings

import torch
import torch._prims_common as _prims_common
import torch.utils.backend_registration as _br

from . import _C
from . import tpu as _tpu_module
from ._env import DTYPE_CODE

_LIB = torch.library.Library("aten", "IMPL")
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


# ------------------------------------------------------------- storage


def _dtype_code(dtype):
    dtype = dtype or torch.get_default_dtype()
    try:
        return DTYPE_CODE[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} is not supported on tpu") from None


def _check_device(device):
    if device is not None:
        d = torch.device(device)
        if d.type == "tpu" and d.index not in (None, 0):
            _tpu_module._index(d)


def _strides_for(size, memory_format):
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        return None
    return torch.empty(size, device="meta", memory_format=memory_format).stride()


def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_device(device)
    return _C.empty(tuple(size), _strides_for(size, memory_format), _dtype_code(dtype))


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _check_device(device)
    return _C.empty(tuple(size), tuple(stride), _dtype_code(dtype))


def _same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def copy_(self, src, non_blocking=False):
    if self.numel() == 0:
        return self
    if src.is_conj() or src.is_neg():
        return _copy_lazy_bits(self, src)
    if src._is_zerotensor():
        # an efficient zero tensor has no storage: materialize its zeros
        src = torch.zeros(src.shape, dtype=src.dtype, device=src.device)
    if self.device.type == "tpu" and src.device.type == "tpu":
        if _same_storage(self, src) and (
            self.data_ptr() != src.data_ptr() or self.stride() != src.stride()
            or self.shape != src.shape
        ):
            src = src.clone()
        if self.is_complex() or src.is_complex():
            return _copy_complex(self, src)
        return torch.ops.torchtpu.copy_(self, src)
    if self.device.type == "tpu":
        # host -> device; the source is read before this returns
        s = src if src.dtype == self.dtype else src.to(self.dtype)
        s = s.expand_as(self)
        _C.copy_h2d(self, s)
        return self
    # device -> host
    s = src.expand_as(self) if src.shape != self.shape else src
    if self.dtype == src.dtype:
        _C.copy_d2h(self, s)
    else:
        tmp = torch.empty(s.shape, dtype=s.dtype)
        _C.copy_d2h(tmp, s)
        self.copy_(tmp)
    return self


def _copy_lazy_bits(self, src):
    """copy_ from a lazy conjugate/negative view: the data it views is
    copied, then the bit applied to the destination (resolve_conj would
    copy_ back into here)."""
    conj, neg = src.is_conj(), src.is_neg()
    plain = src.conj() if conj else src
    plain = torch._neg_view(plain) if neg else plain
    if src.device.type == "cpu":
        return copy_(self, src.resolve_conj().resolve_neg())
    if self.device.type == "cpu":
        host = torch.empty(plain.shape, dtype=plain.dtype)
        copy_(host, plain)
        host = host.conj() if conj else host
        host = torch._neg_view(host) if neg else host
        return self.copy_(host)
    copy_(self, plain)
    planes = torch.view_as_real(self) if self.is_complex() else None
    if conj and planes is not None:
        planes[..., 1].neg_()
    if neg:
        (planes if planes is not None else self).neg_()
    return self


def _copy_complex(self, src):
    """tpu -> tpu copies to or from complex dtypes, done on the float planes
    (torch.view_as_real): complex is not native on TPU, its parts are."""
    if self.is_complex():
        dst = torch.view_as_real(self)
        if src.is_complex():
            dst.copy_(torch.view_as_real(src))
        else:
            dst[..., 0].copy_(src)
            dst[..., 1].zero_()
        return self
    warnings.warn("Casting complex values to real discards the imaginary part", UserWarning,
                  stacklevel=3)
    return self.copy_(torch.view_as_real(src)[..., 0])


def _copy_from(self, dst, non_blocking=False):
    return copy_(dst, self, non_blocking)


def _copy_from_and_resize(self, dst):
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_(dst, self)


def _to_copy(self, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    device = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    mf = memory_format or torch.preserve_format
    if device.type == "tpu":
        _check_device(device)
    if mf == torch.preserve_format and _prims_common.is_non_overlapping_and_dense_or_false(self):
        out = torch.empty_strided(self.shape, self.stride(), dtype=dtype, device=device)
    else:
        fmt = torch.contiguous_format if mf == torch.preserve_format else mf
        out = torch.empty(self.shape, dtype=dtype, device=device, memory_format=fmt)
    return copy_(out, self)


def _local_scalar_dense(self):
    if self.numel() != 1:
        raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
    host = torch.empty(self.shape, dtype=self.dtype)
    _C.copy_d2h(host, self)
    return host.item()


def _set_storage(self, source, storage_offset=0, size=None, stride=None):
    return torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU, self, source, storage_offset, size, stride if stride is not None else ())


def resize_(self, size, memory_format=None):
    size = tuple(size)
    numel = 1
    for s in size:
        numel *= s
    strides = _strides_for(size, memory_format) or torch.empty(size, device="meta").stride()
    storage = self.untyped_storage()
    need = (self.storage_offset() + numel) * self.element_size()
    if need <= storage.nbytes():
        return torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            _CPU, self, storage, self.storage_offset(), size, strides)
    # grow: new storage holding the old contents (flat, in storage order)
    old_numel = storage.nbytes() // self.element_size()
    new = _C.empty((need // self.element_size(),), None, _dtype_code(self.dtype))
    if old_numel:
        old_flat = torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            _CPU, _C.empty((0,), None, _dtype_code(self.dtype)), storage, 0, (old_numel,), (1,))
        new[:old_numel].copy_(old_flat)
    return torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU, self, new.untyped_storage(), self.storage_offset(), size, strides)


def _redispatch_cpu(overload):
    def kernel(*args, **kwargs):
        return overload.redispatch(_CPU, *args, **kwargs)

    return kernel


_METADATA_OPS = [
    "as_strided", "view", "_reshape_alias", "unfold", "view_as_real",
    "view_as_complex", "set_.source_Storage_storage_offset", "set_.source_Storage",
    "set_.source_Tensor", "set_", "as_strided_",
]


def _register_storage_kernels():
    for name in _METADATA_OPS:
        base, _, ov = name.partition(".")
        overload = getattr(getattr(torch.ops.aten, base), ov or "default")
        _LIB.impl(name, _redispatch_cpu(overload), "PrivateUse1")
    _LIB.impl("empty.memory_format", empty, "PrivateUse1")
    _LIB.impl("empty_strided", empty_strided, "PrivateUse1")
    _LIB.impl("copy_", copy_, "PrivateUse1")
    _LIB.impl("_copy_from", _copy_from, "PrivateUse1")
    _LIB.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    _LIB.impl("_to_copy", _to_copy, "PrivateUse1")
    _LIB.impl("_local_scalar_dense", _local_scalar_dense, "PrivateUse1")
    _LIB.impl("resize_", resize_, "PrivateUse1")
    for op in ("_sparse_coo_tensor_with_dims_and_tensors", "_sparse_coo_tensor_with_dims"):
        _LIB.impl(op, _no_sparse(op), "SparsePrivateUse1")


def _no_sparse(op):
    def kernel(*args, **kwargs):
        raise NotImplementedError(
            f"aten::{op}: sparse tensors are not supported on the tpu device (a TPU "
            "computes on dense arrays). Keep the sparse tensor on the CPU "
            "(x.cpu().to_sparse()), or use a dense tensor on the tpu.")
    return kernel


# ------------------------------------------------------------- register

_registered = False


def register():
    global _registered
    if _registered:
        return
    _br._setup_privateuseone_for_python_backend(
        "tpu", backend_module=_tpu_module, hook=_Hooks(), device_guard=_Guard()
    )
    with warnings.catch_warnings():
        # PyTorch warns once when a PrivateUse1 kernel replaces the batching
        # rule's registration for copy_; that replacement is intended
        warnings.filterwarnings("ignore", message="Warning only once for all operators")
        _register_storage_kernels()
        from . import lowering  # noqa: F401  (registers the lowering rules)
    from . import _autocast, _compat, _fallback, _modules, _printing, _serialization

    from .lowering import complex as _complex_rules

    _fallback.register()
    _fallback.use_complex_rules(_complex_rules)
    _autocast.register()
    _printing.install()
    _serialization.install()
    _compat.install()
    # nn.Module.to("tpu") must keep tied parameters tied; see
    # docs/design/integration.md
    _modules.install()
    _registered = True
    _check_autograd_engine()


def _check_autograd_engine():
    """PyTorch's autograd engine sizes its per-device queues once, at the
    first backward pass; if that happened before torchtpu registered the tpu
    device, every backward through tpu tensors fails inside the engine."""
    try:
        t = torch.zeros(1, device="tpu", requires_grad=True)
        t.sum().backward()
    except RuntimeError as e:
        if "device_ready_queues_" not in str(e):
            raise
        warnings.warn(
            "torchtpu was imported after PyTorch's autograd engine had started "
            "(a .backward() ran before `import torchtpu`); backward passes through "
            "tpu tensors will fail in this process. Import torchtpu first.",
            RuntimeWarning,
            stacklevel=3,
        )

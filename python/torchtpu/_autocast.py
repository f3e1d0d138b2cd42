"""torch.autocast("tpu"): PyTorch registers no autocast kernels for the
PrivateUse1 key, so without these every op under autocast would fail. The
rules are CPU autocast's (same op lists, same cast policies), so a model
gives the same per-op dtypes under autocast on tpu as on the CPU.

Policies:
  lower: floating tensors (not float64) cast to the autocast dtype
  fp32:  floating tensors (not float64) cast to float32
  promote: all floating tensors cast to the widest floating dtype among them
"""
import torch
from torch._prims_common import get_higher_dtype

_LOWER = [
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding",
    "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "_addmm_activation", "addbmm",
    "linear", "_convolution.deprecated", "matmul", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "prelu",
    "scaled_dot_product_attention", "_native_multi_head_attention",
]

_FP32 = [
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "prod.dim_int",
    "quantile", "quantile.scalar", "nanquantile", "nanquantile.scalar", "stft", "stft.center",
    "cdist", "grid_sampler_2d", "grid_sampler_3d", "trace", "view_as_complex", "cholesky",
    "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr", "pinverse",
    "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss",
    "poisson_nll_loss", "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "huber_loss",
    "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "ctc_loss.IntList", "ctc_loss.Tensor", "kl_div", "multilabel_margin_loss",
    "binary_cross_entropy_with_logits", "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2",
    "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft", "fft_rfft2", "fft_irfft2", "fft_rfftn",
    "fft_irfftn", "fft_hfft", "fft_ihfft", "linalg_cond", "linalg_cond.p_str",
    "linalg_matrix_rank", "linalg_matrix_rank.tol_tensor", "linalg_matrix_rank.atol_rtol_tensor",
    "linalg_matrix_rank.atol_rtol_float", "linalg_solve", "linalg_cholesky", "linalg_svdvals",
    "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product",
    "linalg_tensorinv", "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf",
    "_lu_with_info", "qr", "svd", "triangular_solve", "fractional_max_pool2d",
    "fractional_max_pool3d", "adaptive_max_pool3d", "multilabel_margin_loss_forward",
    "linalg_qr", "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh",
    "linalg_lstsq", "linalg_inv_ex",
]

_PROMOTE = ["stack", "cat", "index_copy"]

_KEY = torch._C.DispatchKey.AutocastPrivateUse1
_KEYSET = torch._C.DispatchKeySet(_KEY)


def _eligible(x):
    return (isinstance(x, torch.Tensor) and x.is_floating_point()
            and x.dtype != torch.float64 and x.device.type in ("tpu", "cpu"))


def _map(x, f):
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map(e, f) for e in x)
    return x


def _cast_to(dtype):
    def f(t):
        return t.to(dtype) if _eligible(t) and t.dtype != dtype else t
    return f


def _widest(args, kwargs):
    found = []
    _map(list(args) + list(kwargs.values()),
         lambda t: found.append(t.dtype) if t.is_floating_point() else None)
    widest = None
    for d in found:
        widest = d if widest is None else get_higher_dtype(widest, d)
    return widest


def _kernel(overload, policy):
    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_KEYSET):
            if policy == "lower":
                dtype = torch.get_autocast_dtype("tpu")
            elif policy == "fp32":
                dtype = torch.float32
            else:
                dtype = _widest(args, kwargs)
            if dtype is not None:
                f = _cast_to(dtype) if policy != "promote" else (
                    lambda t: t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t)
                args = _map(args, f)
                kwargs = {k: _map(v, f) for k, v in kwargs.items()}
            return overload(*args, **kwargs)

    return kernel


_LIB_ATEN = None
_LIB_ALL = None


def _overload(name):
    base, _, ov = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, ov or "default", None)


def register():
    global _LIB_ATEN, _LIB_ALL
    _LIB_ALL = torch.library.Library("_", "IMPL")
    _LIB_ALL.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _LIB_ATEN = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", _LOWER), ("fp32", _FP32), ("promote", _PROMOTE)):
        for name in names:
            ov = _overload(name)
            if ov is None:
                continue
            _LIB_ATEN.impl(name, _kernel(ov, policy), "AutocastPrivateUse1")

"""Environment settings and start-up of the C core."""
import os

import torch

from . import _C
from ._errors import OutOfMemoryError

# Order of torchtpu's element types (csrc/include/tpu/dtype.h).
TORCH_DTYPES = [
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
    torch.bfloat16,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]
DTYPE_CODE = {d: i for i, d in enumerate(TORCH_DTYPES)}

DEFAULT_CHIP = "v5e"


def _flag(name):
    v = os.environ.get(name, "")
    return v not in ("", "0", "false", "False", "no")


def _int_env(name, default=0):
    v = os.environ.get(name, "")
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name}={v!r} is not an integer") from None


def blas_path():
    """Path of the CBLAS used for matmuls (scipy-openblas), or None."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    lib_dir = scipy_openblas32.get_lib_dir()
    for name in sorted(os.listdir(lib_dir)):
        if name.startswith("lib") and ".so" in name:
            return os.path.join(lib_dir, name)
    return None


def chip_name():
    chip = os.environ.get("TORCHTPU_CHIP", "") or DEFAULT_CHIP
    known = _C.chips()
    aliases = {"v7x": "7x", "ironwood": "7x", "trillium": "v6e"}
    c = aliases.get(chip.lower(), chip.lower())
    if c not in known:
        raise RuntimeError(
            f"TORCHTPU_CHIP={chip!r} is not a known TPU generation; "
            f"set it to one of: {', '.join(known)} (default {DEFAULT_CHIP})"
        )
    return c


def init_core():
    _C.set_package_dir(os.path.dirname(os.path.abspath(__file__)) + os.sep)
    # OpenBLAS must pick its kernels before it is loaded; our pool threads
    # provide the parallelism, so it runs single-threaded inside them.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    return _C.init(
        chip_name(),
        blas_path(),
        _int_env("TORCHTPU_NUM_THREADS", 0),
        torch._C._from_dlpack,
        TORCH_DTYPES,
        OutOfMemoryError,
        synchronous=_flag("TPU_LAUNCH_BLOCKING"),
        cache_capacity=_int_env("TORCHTPU_CACHE_CAPACITY", 4096),
        hbm_capacity=_int_env("TORCHTPU_HBM_BYTES", 0),
        host_limit=_int_env("TORCHTPU_HOST_MEMORY_LIMIT", 0),
    )

"""torchtpu: PyTorch on TPUs, with a C core.

Importing torchtpu registers the ``tpu`` device with PyTorch (PyTorch's
PrivateUse1 key, renamed) and the ``torch.tpu`` module. The default device is
the virtual TPU (vTPU): TPU numerics and memory limits, run on the host CPU.

Environment:
  TORCHTPU_CHIP            v4 | v5e (default) | v5p | v6e | 7x
  TPU_LAUNCH_BLOCKING=1    debug eager: every op runs before Python continues
  TORCHTPU_NUM_THREADS     kernel threads (default: all CPUs)
  TORCHTPU_HBM_BYTES       override the chip's HBM capacity (tests)
  TORCHTPU_HOST_MEMORY_LIMIT  cap on host memory the vTPU may commit
"""
import os as _os

import torch as _torch

_REQUIRED_TORCH = "2.13"
if not _torch.__version__.startswith(_REQUIRED_TORCH):
    raise ImportError(
        f"torchtpu needs PyTorch {_REQUIRED_TORCH} (found {_torch.__version__}); "
        "install it with: pip install torch==2.13.0"
    )

from . import _C  # noqa: E402
from . import _env  # noqa: E402

_env.init_core()

from . import tpu  # noqa: E402  (the torch.tpu module)
from . import _backend  # noqa: E402

_backend.register()

from . import execution_mode, metrics  # noqa: E402,F401
from ._registry import registered_ops  # noqa: E402,F401

__all__ = ["tpu", "metrics", "execution_mode"]
__version__ = "0.1.0"

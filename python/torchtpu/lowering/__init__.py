"""Lowering rules: aten ops -> IR graphs, grouped by family.

Importing this package defines torchtpu's own helper ops (namespace
``torchtpu``) and registers every rule with the tpu device."""
import torch

_DEF = torch.library.Library("torchtpu", "DEF")
_DEF.define("copy_(Tensor(a!) self, Tensor src) -> Tensor(a!)")
# the CPU kernel the counted fallback runs for conversions the tpu does not
# lower (e.g. to uint32)
_DEF.impl("copy_", lambda self, src: self.copy_(src), "CPU")
_DEF.define("iota_(Tensor(a!) self, Scalar start, Scalar step) -> Tensor(a!)")

from . import elementwise, factory, linalg, nn, reduction  # noqa: E402,F401
from . import conv, fft, indexing, norm, optim, pointwise, transformer  # noqa: E402,F401
from . import distance, embedding_bag  # noqa: E402,F401

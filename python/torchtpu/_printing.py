"""Printing tpu tensors.

PyTorch's formatter runs comparisons, masked_select and per-element .item()
on the tensor's own device for devices other than xla/lazy/ipu/mtia. For tpu
tensors we copy to the host only what will be printed: small tensors whole;
large ones as their edges (edgeitems per side and one element between, which
PyTorch's summarizer then replaces with '...')."""
import itertools

import torch
import torch._tensor_str as _ts

_orig_tensor_str = _ts._tensor_str


def _edges_on_host(t):
    e = _ts.PRINT_OPTS.edgeitems
    shape, ranges = [], []
    for n in t.shape:
        if n <= 2 * e:
            shape.append(n)
            ranges.append([(0, n, 0)])
        else:
            shape.append(2 * e + 1)
            ranges.append([(0, e, 0), (e, e + 1, e), (n - e, n, e + 1)])
    host = torch.empty(shape, dtype=t.dtype)
    for combo in itertools.product(*ranges):
        src = tuple(slice(a, b) for a, b, _ in combo)
        dst = tuple(slice(d, d + (b - a)) for a, b, d in combo)
        host[dst].copy_(t[src])
    return host


def _tensor_str(self, indent):
    if self.device.type != "tpu":
        return _orig_tensor_str(self, indent)
    if self.numel() <= _ts.PRINT_OPTS.threshold:
        return _orig_tensor_str(self.cpu(), indent)
    host = _edges_on_host(self)
    saved = _ts.PRINT_OPTS.threshold
    _ts.PRINT_OPTS.threshold = 0  # the host copy is already summarized
    try:
        return _orig_tensor_str(host, indent)
    finally:
        _ts.PRINT_OPTS.threshold = saved


def install():
    _ts._tensor_str = _tensor_str

"""nn.Module conversions that keep tied parameters tied.

For devices whose tensors are not "shallow-copy compatible" with CPU tensors
(every out-of-tree device), PyTorch's Module._apply replaces each parameter
with a new Parameter, separately per module, so weights shared by two
modules (tied embeddings) come out untied. torchtpu wraps Module._apply:

1. it first converts with `torch.utils.swap_tensors` (PyTorch's
   swap_module_params_on_conversion), which keeps every Parameter object,
   so ties and optimizers created before `.to("tpu")` keep working;
2. if a parameter cannot be swapped (something else, e.g. a live autograd
   graph, holds a reference to it), it converts the rest the classic way and
   re-ties: modules that shared a Parameter before share the new one after.
"""
import threading

import torch
import torch.nn as nn

_orig_apply = nn.Module._apply
_tls = threading.local()


def _tied_groups(module):
    seen = {}
    for mod in module.modules():
        for name, p in mod._parameters.items():
            if p is not None:
                seen.setdefault(id(p), []).append((mod, name))
    return [occ for occ in seen.values() if len(occ) > 1]


def _retie(groups):
    for occ in groups:
        mod0, name0 = occ[0]
        p = mod0._parameters[name0]
        for mod, name in occ[1:]:
            mod._parameters[name] = p


def _apply(self, fn, recurse=True):
    if getattr(_tls, "active", False):
        return _orig_apply(self, fn, recurse)
    groups = _tied_groups(self)
    prev = torch.__future__.get_swap_module_params_on_conversion()
    _tls.active = True
    try:
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            result = _orig_apply(self, fn, recurse)
        except RuntimeError as e:
            if "Couldn't swap" not in str(e):
                raise
            torch.__future__.set_swap_module_params_on_conversion(False)
            result = _orig_apply(self, fn, recurse)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(prev)
        _tls.active = False
    _retie(groups)
    return result


def install():
    nn.Module._apply = _apply

"""The counted CPU fallback: ops without a tpu lowering run on the CPU
through explicit copies (inputs copied out, outputs and mutated inputs
copied back), with a one-time warning per op and a per-op counter."""
import threading
import warnings

import torch
from torch.utils._pytree import tree_map

_lock = threading.Lock()
_counts = {}     # op name -> calls
_reasons = {}    # op name -> first warning text
_enabled = [True]


class FallbackWarning(UserWarning):
    """An op ran on the CPU instead of the tpu."""


def enabled() -> bool:
    return _enabled[0]


def set_enabled(flag: bool) -> None:
    _enabled[0] = bool(flag)


def counts() -> dict:
    with _lock:
        return dict(_counts)


def reasons() -> dict:
    with _lock:
        return dict(_reasons)


def reset() -> None:
    with _lock:
        _counts.clear()
        _reasons.clear()


def _is_tpu(x):
    return isinstance(x, torch.Tensor) and x.device.type == "tpu"


def note(name, reason):
    """Counts one CPU fallback of name (warning once)."""
    with _lock:
        first = name not in _counts
        _counts[name] = _counts.get(name, 0) + 1
        if first:
            msg = (
                f"torchtpu: {name} is not implemented on tpu"
                + (f" ({reason})" if reason else "")
                + "; it runs on the CPU with its tensors copied to the host and "
                "back. Each such call is counted in torchtpu.metrics."
            )
            _reasons[name] = msg
    if first:
        warnings.warn(_reasons[name], FallbackWarning, stacklevel=3)


def _device_kw(kwargs):
    d = kwargs.get("device")
    return d is not None and torch.device(d).type == "tpu"


def run_fallback(op, args, kwargs, reason=""):
    name = op.name()
    if _complex_rules is not None:
        rule = _complex_rules.rule_for(name)
        if rule is not None and _complex_rules.handles(args, kwargs):
            out = rule(*args, **kwargs)
            if out is not None:
                _complex_rules.note(name)
                return out
    if not _enabled[0]:
        raise NotImplementedError(
            f"Could not run '{name}' on the tpu device: it has no tpu implementation "
            "and the CPU fallback is disabled (torchtpu.execution_mode."
            "cpu_fallback_mode(False)). Enable the fallback, or avoid this op."
        )
    note(name, reason)
    schema = op._schema
    # positions of mutated arguments
    mutated = {}
    flat_args = list(args)
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            if i < len(flat_args):
                mutated[i] = flat_args[i]
            elif a.name in kwargs:
                mutated[a.name] = kwargs[a.name]
    to_cpu = {}

    def cpu(x):
        if _is_tpu(x):
            c = x.cpu()
            to_cpu[id(c)] = x
            return c
        return x

    cpu_args = tree_map(cpu, flat_args)
    cpu_kwargs = tree_map(cpu, dict(kwargs))
    factory = _device_kw(kwargs)
    if factory:
        cpu_kwargs["device"] = torch.device("cpu")
    out = op(*cpu_args, **cpu_kwargs)
    # write mutated inputs (and mutated tensor lists) back
    for key, orig in mutated.items():
        new = cpu_args[key] if isinstance(key, int) else cpu_kwargs[key]
        pairs = zip(orig, new) if isinstance(orig, (list, tuple)) else [(orig, new)]
        for o, n in pairs:
            if not _is_tpu(o):
                continue
            if n.shape != o.shape:
                o.resize_(n.shape)
            o.copy_(n)

    def back(x):
        if isinstance(x, torch.Tensor):
            src = to_cpu.get(id(x))
            if src is not None:
                return src  # the op returned a (mutated) input
            if x.device.type == "cpu" and (factory or _any_tpu(args, kwargs)):
                return x.to("tpu")
        return x

    return tree_map(back, out)


def _any_tpu(args, kwargs):
    found = []
    tree_map(lambda x: found.append(1) if _is_tpu(x) else None, (list(args), dict(kwargs)))
    return bool(found)


def _boxed(op, *args, **kwargs):
    return run_fallback(op, args, kwargs)


_LIB = None
_complex_rules = None   # lowering.complex, set at registration


def use_complex_rules(module):
    """Complex ops computed on float planes on the device, tried before the
    CPU fallback."""
    global _complex_rules
    _complex_rules = module


def register():
    global _LIB
    _LIB = torch.library.Library("_", "IMPL")
    _LIB.fallback(_boxed, "PrivateUse1")

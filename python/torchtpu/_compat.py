"""Where PyTorch's Python-only PrivateUse1 path falls short, what torchtpu
provides instead (each case has a test in tests/python/test_limits.py):

- torch.Generator("tpu") cannot exist (no generator hooks): the tpu generator
  is torch.tpu.manual_seed / get_rng_state / set_rng_state, and
  torch.manual_seed seeds it.
- The Python device guard has no streams: torch.accelerator.synchronize()
  raises; torchtpu routes it to torch.tpu.synchronize().
- There is no PrivateUse1 allocator: torch.UntypedStorage(n, device="tpu")
  would crash the process; torchtpu allocates such storages itself.
- There is no pinned-memory allocator: Tensor.pin_memory() would raise;
  host memory is what the vTPU reads anyway, so it returns the tensor.
- No autocast kernels are registered for PrivateUse1: torch.autocast("tpu")
  would make every op fail; torchtpu registers a fallthrough and autocast
  rules (torchtpu._autocast).
"""
import torch

_orig_accel_sync = torch.accelerator.synchronize


def _accelerator_synchronize(device=None):
    if device is None:
        dev = torch.accelerator.current_accelerator()
    elif isinstance(device, int):
        dev = torch.device(torch.accelerator.current_accelerator().type, device)
    else:
        dev = torch.device(device)
    if dev is not None and dev.type == "tpu":
        torch.tpu.synchronize(dev)
        return None
    return _orig_accel_sync(device)


_orig_storage_new = torch.UntypedStorage.__new__


def _storage_new(cls, *args, device=None, **kwargs):
    if device is not None and torch.device(device).type == "tpu":
        if len(args) == 1 and isinstance(args[0], int):
            n = args[0]
            torch.tpu._index(device)
            return torch.empty(n, dtype=torch.uint8, device="tpu").untyped_storage()
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            data = torch.tensor(list(args[0]), dtype=torch.uint8)
            return data.to("tpu").untyped_storage()
        if not args:
            return torch.empty(0, dtype=torch.uint8, device="tpu").untyped_storage()
    if device is not None:
        kwargs["device"] = device
    return _orig_storage_new(cls, *args, **kwargs)


_orig_pin_memory = torch.Tensor.pin_memory


def _pin_memory(self, device=None):
    if self.device.type == "cpu":
        return self
    return _orig_pin_memory(self, device) if device is not None else _orig_pin_memory(self)


def install():
    torch.accelerator.synchronize = _accelerator_synchronize
    torch.UntypedStorage.__new__ = _storage_new
    torch.Tensor.pin_memory = _pin_memory

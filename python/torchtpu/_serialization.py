"""torch.save / torch.load of tpu tensors, and storage.tpu().

torch.save copies tpu storages to the host through copy_ (set_ views); the
location tag is "tpu:0". Loading with the default location restores them on
the tpu through our own deserializer, since PyTorch's generic path allocates
with a device allocator the Python PrivateUse1 path does not have."""
import torch
import torch._utils as _utils
import torch.serialization as _ser


def storage_to_tpu(storage, non_blocking=False):
    """A tpu copy of a host UntypedStorage (or TypedStorage's untyped)."""
    if isinstance(storage, torch.TypedStorage):
        storage = storage.untyped()
    if storage.device.type == "tpu":
        return storage
    flat = torch.empty(0, dtype=torch.uint8).set_(
        storage, 0, (storage.nbytes(),), (1,))
    return flat.to("tpu").untyped_storage()


def _deserialize(obj, location):
    if location == "tpu" or location.startswith("tpu:"):
        idx = int(location.split(":")[1]) if ":" in location else 0
        torch.tpu._index(idx)
        return storage_to_tpu(obj)
    return None


def _tag(obj):
    if obj.device.type == "tpu":
        return f"tpu:{obj.device.index or 0}"
    return None


_orig_to = _utils._to


def _to(self, device, non_blocking=False):
    if isinstance(device, (str, int)):
        device = torch.device(device)
    if device.type == "tpu" and self.device.type != "tpu":
        return storage_to_tpu(self, non_blocking)
    return _orig_to(self, device, non_blocking)


def _storage_tpu(self, device=None, non_blocking=False):
    if device is not None:
        torch.tpu._index(device)
    untyped = storage_to_tpu(self, non_blocking)
    if isinstance(self, torch.TypedStorage):
        return torch.TypedStorage(wrap_storage=untyped, dtype=self.dtype, _internal=True)
    return untyped


def install():
    # priority 5: before the generic privateuse1 handler (which would need a
    # device allocator)
    _ser.register_package(5, _tag, _deserialize)
    _utils._to = _to
    torch.storage._StorageBase.to = _to_method(torch.storage._StorageBase.to)
    torch.storage._StorageBase.tpu = _storage_tpu
    torch.TypedStorage.tpu = _storage_tpu


def _to_method(orig):
    def to(self, *, device, non_blocking=False):
        d = torch.device(device)
        if d.type == "tpu":
            return storage_to_tpu(self, non_blocking)
        return orig(self, device=device, non_blocking=non_blocking)

    return to

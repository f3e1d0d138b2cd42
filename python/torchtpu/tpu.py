"""``torch.tpu``: the device module, mirroring ``torch.cuda`` where it makes
sense and the public TorchTPU interface where users port code from it."""
import contextlib
import enum
import random
import threading

import torch

from . import _C
from ._errors import OutOfMemoryError

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device",
    "set_device", "synchronize", "get_device_name", "get_device_properties",
    "get_device_capability", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats",
    "memory_stats", "memory_summary", "empty_cache", "mem_get_info",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
    "get_amp_supported_dtype", "is_bf16_supported", "Stream", "Event",
    "stream", "current_stream", "default_stream", "OutOfMemoryError",
    "precision", "Precision", "device",
]

# ------------------------------------------------------------- devices


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, int):
        idx = device
    elif isinstance(device, str):
        device = torch.device(device)
        idx = device.index if device.index is not None else 0
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
    elif isinstance(device, torch.device):
        if device.type != "tpu":
            raise ValueError(f"expected a tpu device, got {device}")
        idx = device.index if device.index is not None else 0
    else:
        raise TypeError(f"invalid device {device!r}")
    if idx < 0 or idx >= device_count():
        raise RuntimeError(
            f"Invalid device index {idx}: torchtpu exposes {device_count()} tpu "
            f"device(s); use tpu:0"
        )
    return idx


def set_device(device) -> None:
    _index(device)


class device:
    """Context manager selecting a tpu device (only tpu:0 exists)."""

    def __init__(self, device):
        self.idx = _index(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def synchronize(device=None) -> None:
    """Waits for all queued tpu work; raises the first error it hit."""
    _index(device)
    _C.synchronize()


def get_device_name(device=None) -> str:
    _index(device)
    return _C.device_info()["name"]


class _DeviceProperties:
    def __init__(self, info):
        self.name = info["name"]
        self.total_memory = info["hbm_bytes"]
        self.chip = info["chip"]
        self.tensorcores = info["tensorcores"]
        self.mxu_dim = info["mxu_dim"]
        self.peak_bf16_flops = info["peak_bf16_flops"]
        self.peak_int8_ops = info["peak_int8_ops"]
        self.hbm_bandwidth = info["hbm_bandwidth"]
        self.vmem_bytes = info["vmem_bytes"]
        self.ici_bandwidth = info["ici_bandwidth"]
        self.ici_topology = info["ici_topology"]
        self.pod_chips = info["pod_chips"]
        self.is_virtual = True

    def __repr__(self):
        return (
            f"_TpuDeviceProperties(name='{self.name}', total_memory="
            f"{self.total_memory // (1 << 20)}MB, mxu={self.mxu_dim}x{self.mxu_dim}, "
            f"peak_bf16={self.peak_bf16_flops / 1e12:.0f}TFLOP/s, "
            f"hbm_bw={self.hbm_bandwidth / 1e9:.0f}GB/s)"
        )


def get_device_properties(device=None) -> _DeviceProperties:
    _index(device)
    return _DeviceProperties(_C.device_info())


def get_device_capability(device=None):
    _index(device)
    return (0, 0)


# --------------------------------------------------------------- memory


def memory_allocated(device=None) -> int:
    """Bytes of HBM held by live tensors, counted with TPU tiling padding."""
    _index(device)
    return _C.memory_stats()["allocated"]


def max_memory_allocated(device=None) -> int:
    _index(device)
    return _C.memory_stats()["peak"]


def memory_reserved(device=None) -> int:
    """Host bytes backing the vTPU's HBM: live tensors plus freed pages kept
    for reuse (released by empty_cache())."""
    _index(device)
    return _C.memory_stats()["committed"]


def max_memory_reserved(device=None) -> int:
    return max(memory_reserved(device), max_memory_allocated(device))


def reset_peak_memory_stats(device=None) -> None:
    _index(device)
    _C.reset_peak_memory_stats()


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def mem_get_info(device=None):
    """(free, total) HBM bytes."""
    _index(device)
    s = _C.memory_stats()
    return s["free"], s["capacity"]


def memory_stats(device=None) -> dict:
    """HBM statistics, with torch.cuda's key names where they apply."""
    _index(device)
    s = _C.memory_stats()
    return {
        "allocated_bytes.all.current": s["allocated"],
        "allocated_bytes.all.peak": s["peak"],
        "reserved_bytes.all.current": s["committed"],
        "reserved_bytes.all.peak": max(s["peak"], s["committed"]),
        "active_bytes.all.current": s["allocated"],
        "allocation.all.current": s["live"],
        "allocation.all.allocated": s["allocs"],
        "allocation.all.freed": s["frees"],
        "num_ooms": s["failed"],
        "dense_bytes.all.current": s["allocated_dense"],
        "dense_bytes.all.peak": s["peak_dense"],
        "hbm_capacity": s["capacity"],
        "hbm_free": s["free"],
        "hbm_largest_free_block": s["largest_free"],
        "host_committed_bytes": s["committed"],
    }


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024


def memory_summary(device=None, abbreviated=False) -> str:
    _index(device)
    s = _C.memory_stats()
    info = _C.device_info()
    lines = [
        f"|{'=' * 70}|",
        f"| {info['name']} HBM summary".ljust(71) + "|",
        f"|{'-' * 70}|",
        f"| capacity            {_fmt_bytes(s['capacity']):>20}".ljust(71) + "|",
        f"| allocated (tiled)   {_fmt_bytes(s['allocated']):>20}   peak {_fmt_bytes(s['peak']):>12}".ljust(71) + "|",
        f"| allocated (dense)   {_fmt_bytes(s['allocated_dense']):>20}   peak {_fmt_bytes(s['peak_dense']):>12}".ljust(71) + "|",
        f"| free                {_fmt_bytes(s['free']):>20}   largest block {_fmt_bytes(s['largest_free'])}".ljust(71) + "|",
        f"| live allocations    {s['live']:>20}".ljust(71) + "|",
        f"| out-of-memory count {s['failed']:>20}".ljust(71) + "|",
        f"| host memory used    {_fmt_bytes(s['committed']):>20}".ljust(71) + "|",
    ]
    if not abbreviated:
        live = _C.largest_live(5)
        if live:
            lines.append(f"|{'-' * 70}|")
            lines.append("| largest live allocations (tiled / dense bytes)".ljust(71) + "|")
            for dense, padded, _numel in live:
                lines.append(f"|   {_fmt_bytes(padded):>12} / {_fmt_bytes(dense):>12}".ljust(71) + "|")
    lines.append(f"|{'=' * 70}|")
    return "\n".join(lines)


def empty_cache() -> None:
    """Returns host pages kept for reuse to the OS. HBM accounting is not
    affected: freed tensors leave memory_allocated() at once."""
    _C.empty_cache()


# ------------------------------------------------------------------ RNG

_rng_lock = threading.Lock()
_rng = {"seed": 67280421310721, "offset": 0}


def manual_seed(seed: int) -> None:
    with _rng_lock:
        _rng["seed"] = int(seed) & ((1 << 64) - 1)
        _rng["offset"] = 0


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    manual_seed(random.getrandbits(63))


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    return _rng["seed"]


def _next_rng(n: int):
    """Reserves n counters of the device generator: returns (seed, offset)."""
    with _rng_lock:
        s, o = _rng["seed"], _rng["offset"]
        _rng["offset"] = o + ((n + 3) // 4) * 4
    return s, o


def get_rng_state(device="tpu") -> torch.Tensor:
    _index(device)
    with _rng_lock:
        vals = [_rng["seed"], _rng["offset"]]
    return torch.tensor(
        [b for v in vals for b in int(v).to_bytes(8, "little")], dtype=torch.uint8
    )


def set_rng_state(new_state: torch.Tensor, device="tpu") -> None:
    _index(device)
    data = bytes(new_state.to("cpu", torch.uint8).tolist())
    if len(data) != 16:
        raise RuntimeError(
            f"set_rng_state: expected a 16-byte state from torch.tpu.get_rng_state(), "
            f"got {len(data)} bytes"
        )
    with _rng_lock:
        _rng["seed"] = int.from_bytes(data[:8], "little")
        _rng["offset"] = int.from_bytes(data[8:], "little")


def get_rng_state_all():
    return [get_rng_state()]


def set_rng_state_all(states):
    for s in states:
        set_rng_state(s)


# ------------------------------------------------------------------ AMP


def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


# ------------------------------------------------------- streams, events


class Stream:
    """The tpu device stream. The vTPU runs one in-order stream per device;
    every Stream object refers to it."""

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device("tpu", _index(device))
        self.priority = priority

    def synchronize(self):
        _C.synchronize()

    def query(self) -> bool:
        """True if all work queued so far has completed."""
        return _C.stream_idle()

    def wait_event(self, event):
        # one in-order stream: work recorded before the event runs first
        return None

    def wait_stream(self, stream):
        return None

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream)

    def __hash__(self):
        return hash("tpu-stream-0")

    def __repr__(self):
        return "<torch.tpu.Stream device=tpu:0 (default)>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_default_stream = None


def default_stream(device=None) -> Stream:
    global _default_stream
    _index(device)
    if _default_stream is None:
        _default_stream = Stream()
    return _default_stream


def current_stream(device=None) -> Stream:
    return default_stream(device)


@contextlib.contextmanager
def stream(s):
    yield s


class Event:
    """Marks a point in the tpu stream; with enable_timing, elapsed_time()
    gives milliseconds between two recorded events."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._e = _C.event_new()
        self._recorded = False

    def record(self, stream=None):
        _C.event_record(self._e)
        self._recorded = True

    def query(self) -> bool:
        return _C.event_query(self._e)

    def synchronize(self):
        _C.event_wait(self._e)

    def wait(self, stream=None):
        return None

    def elapsed_time(self, end_event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError(
                "Both events must be created with enable_timing=True to measure "
                "elapsed time"
            )
        if not (self._recorded and end_event._recorded):
            raise RuntimeError("elapsed_time: both events must be recorded first")
        return _C.event_elapsed(self._e, end_event._e)

    def __repr__(self):
        return f"<torch.tpu.Event recorded={self._recorded}>"


# ------------------------------------------------------------ precision


class Precision(enum.IntEnum):
    """Matmul/convolution precision (StableHLO precision_config names)."""

    DEFAULT = _C.PRECISION_DEFAULT  # bf16 inputs, fp32 accumulation
    HIGH = _C.PRECISION_HIGH        # three bf16 passes
    HIGHEST = _C.PRECISION_HIGHEST  # fp32


_precision_lock = threading.Lock()
_precision_stack = []


def _apply_precision():
    _C.set_precision(int(_precision_stack[-1]) if _precision_stack else -1)


@contextlib.contextmanager
def precision(p):
    """Overrides torch.get_float32_matmul_precision() for tpu matmuls.

    The setting is process-wide, like torch.set_float32_matmul_precision, so
    it also reaches the backward pass, which autograd runs on its own
    thread; each op captures the precision when it is enqueued."""
    p = Precision(p)
    with _precision_lock:
        _precision_stack.append(p)
        _apply_precision()
    try:
        yield p
    finally:
        with _precision_lock:
            _precision_stack.remove(p) if p in _precision_stack else None
            _apply_precision()


def get_precision() -> Precision:
    """The precision tpu matmuls use now."""
    return Precision(_C.get_precision())


# ------------------------------------------------------------ utilities


def _get_cache_stats() -> dict:
    s = _C.stats()
    return {
        "hits": s["cache_hits"],
        "misses": s["cache_misses"],
        "evictions": s["cache_evictions"],
        "entries": s["cache_entries"],
        "capacity": s["cache_capacity"],
        "compiles": s["compiles"],
        "compile_seconds": s["compile_ns"] / 1e9,
    }


def _hbm_usage_summary() -> str:
    return memory_summary(abbreviated=True)


class _utils:
    @staticmethod
    def _get_device_index(device, optional=False, allow_cpu=False):
        return _index(device)

_C.set_rng_source(_next_rng)

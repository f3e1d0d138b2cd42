"""Execution modes (names as in the public TorchTPU interface)."""
import contextlib
import enum
import os
import warnings

from . import _C, _fallback


class DeferMode(enum.Enum):
    DEFER_NEVER = "DEFER_NEVER"  # strict eager: asynchronous (default)
    DEFER_NEVER_AND_LAUNCH_BLOCKING = "DEFER_NEVER_AND_LAUNCH_BLOCKING"  # debug eager
    DEFER_AND_FUSE = "DEFER_AND_FUSE"  # fused eager (not built yet)


_notice = [False]


def _apply(mode):
    mode = DeferMode(mode)
    if mode == DeferMode.DEFER_AND_FUSE and not _notice[0]:
        _notice[0] = True
        warnings.warn(
            "torchtpu: DEFER_AND_FUSE (fused eager) is not available yet; running in "
            "strict eager mode (DEFER_NEVER)."
        )
    _C.set_synchronous(mode == DeferMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    return mode


_current = [DeferMode.DEFER_NEVER]


def get_defer_mode() -> DeferMode:
    return _current[0]


def set_defer_mode(mode) -> None:
    _current[0] = _apply(mode)


@contextlib.contextmanager
def defer_mode(mode):
    prev = _current[0]
    set_defer_mode(mode)
    try:
        yield
    finally:
        set_defer_mode(prev)


@contextlib.contextmanager
def cpu_fallback_mode(enabled: bool):
    """With False, ops without a tpu implementation raise NotImplementedError
    instead of running on the CPU."""
    prev = _fallback.enabled()
    _fallback.set_enabled(enabled)
    try:
        yield
    finally:
        _fallback.set_enabled(prev)


def set_debug_checks(enabled: bool) -> None:
    """NaN/Inf checks on every op's outputs in debug eager mode
    (TORCHTPU_DEBUG_CHECKS=1); index bounds are always checked."""
    _C.set_debug_checks(bool(enabled))


def _init_from_env():
    if os.environ.get("TORCHTPU_DEBUG_CHECKS", "") not in ("", "0"):
        set_debug_checks(True)
    if os.environ.get("TORCH_TPU_DEFER_AND_FUSE", "") not in ("", "0"):
        set_defer_mode(DeferMode.DEFER_AND_FUSE)
    elif os.environ.get("TPU_LAUNCH_BLOCKING", "") not in ("", "0"):
        set_defer_mode(DeferMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)


_init_from_env()

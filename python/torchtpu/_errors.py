"""Exceptions raised by torchtpu."""
import torch


class OutOfMemoryError(torch.OutOfMemoryError):
    """The vTPU's HBM (or the host memory backing it) is exhausted.

    The message names the request, the free bytes, the capacity, the chip and
    the largest live allocations.
    """


class TpuError(RuntimeError):
    """An error raised by work that ran asynchronously on the tpu stream."""

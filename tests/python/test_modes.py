"""Execution modes: strict eager (async), debug eager (sync), defer-and-fuse
notice; asynchronous errors surface at the next sync naming the op and where
it was enqueued."""
import pytest
import torch

import torchtpu
from torchtpu import _C
from torchtpu.execution_mode import DeferMode, defer_mode, get_defer_mode, set_defer_mode
from conftest import run_python


def _gather_graph():
    g = _C.Graph()
    p = g.param(11, (4, 6))
    i = g.param(7, (4, 3))
    g.output(g.node("gather", [p, i], ints=(1,)))
    return _C.compile(g)


def test_strict_eager_returns_before_the_work_is_done():
    assert get_defer_mode() == DeferMode.DEFER_NEVER
    a = torch.randn(1024, 1024, device="tpu")
    done = torch.tpu.Event()
    for _ in range(8):
        a = a @ a
        a = a / 1024.0
    done.record()
    assert not done.query()         # Python got here while the work is queued
    torch.tpu.synchronize()
    assert done.query()


def test_debug_eager_is_synchronous():
    with defer_mode(DeferMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        assert _C.is_synchronous()
        a = torch.randn(512, 512, device="tpu")
        b = a @ a
        assert _C.stream_idle()     # the op finished before returning
        assert b.shape == (512, 512)
    assert not _C.is_synchronous()


def test_env_selects_modes():
    r = run_python("import torchtpu; from torchtpu import _C; print(_C.is_synchronous())",
                   env={"TPU_LAUNCH_BLOCKING": "1"})
    assert r.stdout.strip() == "True", r.stderr
    r = run_python(
        "import warnings, torch, torchtpu\n"
        "from torchtpu.execution_mode import get_defer_mode\n"
        "print(get_defer_mode().name, torchtpu._C.is_synchronous())\n"
        "print((torch.ones(3, device='tpu') * 2).sum().item())",
        env={"TORCH_TPU_DEFER_AND_FUSE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["DEFER_AND_FUSE", "False", "6.0"]
    assert "DEFER_AND_FUSE (fused eager) is not available yet" in r.stderr


def test_async_index_error_surfaces_at_next_sync_with_site():
    exe = _gather_graph()
    x = torch.randn(4, 6, device="tpu")
    bad = torch.full((4, 3), 9, dtype=torch.int64, device="tpu")
    torch.tpu.synchronize()
    inlined = _C.stats()["inline_executions"]
    y = _C.run(exe, [x, bad])[0]       # enqueued; no error yet
    # a kernel this small ran on this thread (the stream was idle), and its
    # error is still reported at the next sync, like any asynchronous one
    assert _C.stats()["inline_executions"] == inlined + 1
    z = y * 2                          # later work still enqueues fine
    with pytest.raises(IndexError) as e:
        z.sum().item()                 # the next sync raises
    msg = str(e.value)
    assert "index 9 is out of bounds for dimension 1 with size 6" in msg
    assert "test_modes.py" in msg and "enqueued at" in msg
    # the error was consumed: the stream works and later syncs are clean
    assert (torch.ones(3, device="tpu") + 1).sum().item() == 6.0
    torch.tpu.synchronize()


def test_small_ops_behind_queued_work_wait_their_turn():
    """Small kernels run on the calling thread only when the stream is idle;
    behind queued work they are queued too, so order holds."""
    a = torch.randn(768, 768, device="tpu")
    torch.tpu.synchronize()
    inlined = _C.stats()["inline_executions"]
    b = a @ a                          # queued (large)
    c = b[:2, :2] + 1                  # small, but behind the matmul
    d = c * 2
    assert _C.stats()["inline_executions"] == inlined
    ref = b[:2, :2].cpu()
    assert torch.equal(d.cpu(), (ref + 1) * 2)
    e = d - 1                          # the stream is idle again: inline
    assert _C.stats()["inline_executions"] == inlined + 1
    assert torch.equal(e.cpu(), (ref + 1) * 2 - 1)


def test_failed_op_output_is_poisoned_not_garbage():
    exe = _gather_graph()
    x = torch.randn(4, 6, device="tpu")
    bad = torch.full((4, 3), -1, dtype=torch.int64, device="tpu")
    y = _C.run(exe, [x, bad])[0]
    with pytest.raises(IndexError):
        torch.tpu.synchronize()
    assert torch.isnan(y.cpu()).all()


def test_index_error_in_debug_eager_raises_at_the_op():
    exe = _gather_graph()
    with defer_mode(DeferMode.DEFER_NEVER_AND_LAUNCH_BLOCKING):
        x = torch.randn(4, 6, device="tpu")
        with pytest.raises(IndexError, match="out of bounds"):
            _C.run(exe, [x, torch.full((4, 3), 6, dtype=torch.int64, device="tpu")])
        assert (x * 0).sum().item() == 0.0


def test_debug_checks_name_the_op_that_made_nan():
    r = run_python(
        "import torch, torchtpu\n"
        "x = torch.tensor([1.0, 0.0]).to('tpu')\n"
        "try:\n    x / torch.zeros(2, device='tpu')\n"
        "except RuntimeError as e:\n    print(e)\n"
        "print((x + 1).tolist())",
        env={"TPU_LAUNCH_BLOCKING": "1", "TORCHTPU_DEBUG_CHECKS": "1"})
    assert r.returncode == 0, r.stderr
    assert "aten::div.Tensor produced Inf in output 0" in r.stdout
    assert "[2.0, 1.0]" in r.stdout


def test_set_defer_mode_round_trip():
    set_defer_mode(DeferMode.DEFER_NEVER_AND_LAUNCH_BLOCKING)
    try:
        assert _C.is_synchronous()
    finally:
        set_defer_mode(DeferMode.DEFER_NEVER)
    assert not _C.is_synchronous()

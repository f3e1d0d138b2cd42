"""The counted CPU fallback, exercised with test-only ops that have a CPU
kernel and no tpu kernel (so the test does not depend on coverage)."""
import warnings

import pytest
import torch

import torchtpu
from torchtpu.execution_mode import cpu_fallback_mode

_LIB = torch.library.Library("tpu_fallback_test", "DEF")
_LIB.define("double_it(Tensor x) -> Tensor")
_LIB.define("add_one_(Tensor(a!) x) -> Tensor(a!)")
_LIB.define("make(int n, *, Device? device=None) -> Tensor")
_LIB.define("bump_all_(Tensor(a!)[] xs) -> ()")
_IMPL = torch.library.Library("tpu_fallback_test", "IMPL")
_IMPL.impl("double_it", lambda x: x * 2, "CPU")
_IMPL.impl("add_one_", lambda x: x.add_(1), "CPU")
_IMPL.impl("make", lambda n, device=None: torch.arange(float(n)), "CPU")
_IMPL.impl("make", lambda n, device=None: torch.arange(float(n)), "BackendSelect")


def _bump_all(xs):
    for x in xs:
        x.add_(1)


_IMPL.impl("bump_all_", _bump_all, "CPU")
ops = torch.ops.tpu_fallback_test


def test_unsupported_op_falls_back_with_one_warning_and_a_counter():
    torchtpu.metrics.reset()
    x = torch.tensor([3.0, -1.0, 2.0]).to("tpu")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a = ops.double_it(x)
        b = ops.double_it(x * 2)
    msgs = [m for m in w if "tpu_fallback_test::double_it" in str(m.message)]
    assert len(msgs) == 1
    assert "runs on the CPU" in str(msgs[0].message)
    assert a.device.type == "tpu" and a.tolist() == [6.0, -2.0, 4.0]
    assert b.tolist() == [12.0, -4.0, 8.0]
    assert torchtpu.metrics.fallback_counts()["tpu_fallback_test::double_it"] == 2
    rep = torchtpu.metrics.report()
    assert "CPU fallbacks" in rep and "tpu_fallback_test::double_it" in rep


def test_fallback_writes_back_mutated_inputs_and_keeps_identity():
    x = torch.tensor([1.0, 4.0, 9.0]).to("tpu")
    v0 = x._version
    view = x[1:]
    out = ops.add_one_(x)
    assert out is x
    assert x.cpu().tolist() == [2.0, 5.0, 10.0]
    assert view.cpu().tolist() == [5.0, 10.0]       # views see the write-back
    assert x._version > v0


def test_fallback_writes_back_mutated_tensor_lists():
    xs = [torch.zeros(2, device="tpu"), torch.ones(3, device="tpu")]
    ops.bump_all_(xs)
    assert xs[0].tolist() == [1.0, 1.0] and xs[1].tolist() == [2.0, 2.0, 2.0]


def test_fallback_orders_with_queued_work():
    x = torch.ones(1000, device="tpu")
    for _ in range(20):
        x = x + 1.0                                  # queued work on x
    y = ops.double_it(x)                             # waits for it, copies out
    z = y + 1.0                                      # ordered after the write-back
    assert z[0].item() == 43.0


def test_fallback_disabled_raises_not_implemented():
    x = torch.ones(3, device="tpu")
    with cpu_fallback_mode(False):
        with pytest.raises(NotImplementedError,
                           match=r"tpu_fallback_test::double_it.*CPU fallback is disabled"):
            ops.double_it(x)
        assert (x + x).sum().item() == 6.0           # supported ops still run
    assert ops.double_it(x).device.type == "tpu"


def test_conversion_the_device_cannot_lower_is_a_counted_fallback():
    """uint32 has storage on the tpu but no kernels: a tpu->tpu conversion
    to it runs as aten's copy_ on host copies, counted, values exact."""
    torchtpu.metrics.reset()
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        u = x.to("tpu").to(torch.uint32)
    assert u.device.type == "tpu" and u.dtype == torch.uint32
    assert torch.equal(u.cpu(), x.to(torch.uint32))
    assert torchtpu.metrics.fallback_counts()["torchtpu::copy_"] >= 1

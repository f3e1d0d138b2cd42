"""The counted CPU fallback."""
import warnings

import pytest
import torch

import torchtpu
from torchtpu.execution_mode import cpu_fallback_mode


def test_unsupported_op_falls_back_with_one_warning_and_a_counter():
    torchtpu.metrics.reset()
    x = torch.tensor([3.0, -1.0, 2.0]).to("tpu")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        s1 = torch.sort(x).values
        s2 = torch.sort(x * 2).values
    sort_warnings = [m for m in w if "aten::sort.values_stable" in str(m.message)]
    assert len(sort_warnings) == 1
    assert "runs on the CPU" in str(sort_warnings[0].message)
    assert s1.device.type == "tpu" and s1.tolist() == [-1.0, 2.0, 3.0]
    assert s2.tolist() == [-2.0, 4.0, 6.0]
    counts = torchtpu.metrics.fallback_counts()
    assert counts["aten::sort.values_stable"] == 2
    assert "CPU fallbacks" in torchtpu.metrics.report()


def test_fallback_writes_back_mutated_inputs():
    x = torch.tensor([1.0, 4.0, 9.0]).to("tpu")
    v0 = x._version
    x.sqrt_()            # no tpu kernel yet: in-place through the fallback
    assert x._version > v0
    assert x.cpu().tolist() == [1.0, 2.0, 3.0]
    assert x.device.type == "tpu"


def test_fallback_disabled_raises_not_implemented():
    x = torch.ones(3, device="tpu")
    with cpu_fallback_mode(False):
        with pytest.raises(NotImplementedError,
                           match=r"aten::sort.values_stable.*CPU fallback is disabled"):
            torch.sort(x)
        assert (x + x).sum().item() == 6.0   # supported ops still run
    assert torch.sort(x).values.device.type == "tpu"

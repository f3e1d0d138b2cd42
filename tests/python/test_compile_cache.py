"""aten op -> IR graph -> compile -> cached executable: counters show when
lowering and compiling happen."""
import torch

import torchtpu
from torchtpu import _C


def _counts():
    s = _C.stats()
    return s["lowerings"], s["compiles"], s["cache_hits"]


def test_second_identical_call_neither_lowers_nor_compiles():
    a = torch.randn(7, 9, device="tpu")
    b = torch.randn(7, 9, device="tpu")
    torch.add(a, b)
    l0, c0, h0 = _counts()
    for _ in range(5):
        torch.add(a, b)
        torch.add(b, a)
    l1, c1, h1 = _counts()
    assert (l1, c1) == (l0, c0)
    assert h1 - h0 == 10


def test_scalar_value_change_does_not_recompile():
    x = torch.randn(5, 3, device="tpu")
    x * 2.0
    torch.add(x, x, alpha=0.5)
    l0, c0, _ = _counts()
    outs = [(x * s).cpu() for s in (3.0, -1.25, 1e-3)]
    outs += [torch.add(x, x, alpha=a).cpu() for a in (1.5, 2.5)]
    l1, c1, _ = _counts()
    assert (l1, c1) == (l0, c0)
    xc = x.cpu()
    torch.testing.assert_close(outs[1], xc * -1.25)
    torch.testing.assert_close(outs[4], xc + 2.5 * xc)


def test_scalar_type_and_shape_and_strides_are_part_of_the_key():
    x = torch.randn(4, 4, device="tpu")
    x * 2.0
    l0, _, _ = _counts()
    x * 2                   # int scalar: different promotion, new program
    x.t() * 2.0             # transposed strides: new program
    torch.randn(5, 4, device="tpu") * 2.0   # new shape
    l1, _, _ = _counts()
    assert l1 - l0 >= 3


def test_precision_is_part_of_the_key_for_matmuls_only():
    a = torch.randn(16, 32, device="tpu")
    b = torch.randn(32, 8, device="tpu")
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        hi = (a @ b).cpu()
        a + a
    l0, c0, _ = _counts()
    with torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        lo = (a @ b).cpu()
        a + a                # elementwise: same executable in any precision
    l1, c1, _ = _counts()
    assert c1 - c0 == 1
    assert not torch.equal(hi, lo)
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        assert torch.equal((a @ b).cpu(), hi)
    assert _counts()[1] == c1


def test_float32_matmul_precision_setting_is_followed():
    a = torch.randn(32, 64)
    b = torch.randn(64, 16)
    ta, tb = a.to("tpu"), b.to("tpu")
    torch.set_float32_matmul_precision("highest")
    assert torch.tpu.get_precision() == torch.tpu.Precision.HIGHEST
    torch.testing.assert_close((ta @ tb).cpu(), a @ b, rtol=1e-5, atol=1e-5)
    torch.set_float32_matmul_precision("medium")
    assert torch.tpu.get_precision() == torch.tpu.Precision.DEFAULT
    ref = a.bfloat16().float() @ b.bfloat16().float()
    torch.testing.assert_close((ta @ tb).cpu(), ref, rtol=1e-5, atol=1e-5)
    torch.set_float32_matmul_precision("high")
    assert torch.tpu.get_precision() == torch.tpu.Precision.HIGH


def test_metrics_report_lists_ops_and_cache():
    torchtpu.metrics.reset()
    x = torch.ones(3, device="tpu")
    (x + x).sum().item()
    rep = torchtpu.metrics.report()
    assert "aten::add.Tensor" in rep and "executable cache" in rep
    c = torchtpu.metrics.counters()
    assert c["dispatches"] >= 2 and c["syncs"] >= 1 and c["d2h_bytes"] >= 4


def test_cache_is_bounded_lru():
    _C.cache_clear()
    _C.cache_set_capacity(4)
    try:
        x = torch.ones(2, device="tpu")
        for n in range(2, 10):
            torch.ones(n, device="tpu") + 1.0
        s = _C.stats()
        assert s["cache_entries"] <= 4 and s["cache_evictions"] >= 4
        assert (x + 1.0).sum().item() == 4.0
    finally:
        _C.cache_set_capacity(4096)


def test_executable_text_is_the_ir():
    g = _C.Graph()
    p = g.param(11, (2, 3))
    e = g.node("exponential", [p])
    g.output(e)
    exe = _C.compile(g)
    assert "exponential %0 : f32[2,3]" in exe.text
    out = _C.run(exe, [torch.zeros(2, 3, device="tpu")])[0]
    assert torch.equal(out.cpu(), torch.ones(2, 3))
    g2 = _C.Graph.parse(g.text())
    assert g2.fingerprint() == g.fingerprint()

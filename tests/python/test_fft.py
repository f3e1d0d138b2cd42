"""Discrete Fourier transforms on the tpu against PyTorch CPU (pocketfft):
_fft_r2c, _fft_c2r and _fft_c2c as DFT matmuls on float planes, direct and
four-step, every normalization, forward and backward, with no CPU fallback."""
import warnings

import pytest
import torch

import torchtpu
from torchtpu import metrics
from torchtpu.lowering import fft as tpu_fft


def rel_err(out, ref):
    out = out.cpu()
    assert out.dtype == ref.dtype and out.shape == ref.shape
    scale = ref.abs().max().item() or 1.0
    return (out - ref).abs().max().item() / scale


@pytest.fixture(autouse=True)
def _no_fallback():
    metrics.reset()
    yield
    assert metrics.fallback_counts() == {}, metrics.fallback_counts()


def _real(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _complex(*shape, seed=0, dtype=torch.complex64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


CASES = [
    ("rfft", lambda t: torch.fft.rfft(t), "real"),
    ("rfft_dim0_ortho", lambda t: torch.fft.rfft(t, dim=0, norm="ortho"), "real"),
    ("rfft_n_pad", lambda t: torch.fft.rfft(t, n=13), "real"),
    ("fft_of_real", lambda t: torch.fft.fft(t, norm="forward"), "real"),
    ("fft", lambda t: torch.fft.fft(t), "complex"),
    ("ifft", lambda t: torch.fft.ifft(t, dim=1), "complex"),
    ("fft2", lambda t: torch.fft.fft2(t), "complex"),
    ("fft2_padded", lambda t: torch.fft.fft2(t, s=(8, 12)), "complex"),
    ("ifftn", lambda t: torch.fft.ifftn(t, norm="ortho"), "complex"),
    ("rfft2", lambda t: torch.fft.rfft2(t), "real"),
    ("rfftn", lambda t: torch.fft.rfftn(t), "real"),
    ("irfft", lambda t: torch.fft.irfft(t), "complex"),
    ("irfft_odd", lambda t: torch.fft.irfft(t, n=9), "complex"),
    ("irfftn", lambda t: torch.fft.irfftn(t, s=(6, 8)), "complex"),
    ("hfft", lambda t: torch.fft.hfft(t), "complex"),
    ("ihfft", lambda t: torch.fft.ihfft(t), "real"),
]


@pytest.mark.parametrize("name,fn,kind", CASES, ids=[c[0] for c in CASES])
def test_transforms_match_cpu(name, fn, kind):
    x = _real(4, 6, 10) if kind == "real" else _complex(4, 6, 10)
    assert rel_err(fn(x.to("tpu")), fn(x)) < 1e-6


@pytest.mark.parametrize("n", [2048, 3000, 4096])
def test_long_transforms_use_four_step(n):
    assert not tpu_fft._direct(n)
    x = _real(2, n)
    assert rel_err(torch.fft.rfft(x.to("tpu")), torch.fft.rfft(x)) < 1e-6
    z = _complex(2, n)
    assert rel_err(torch.fft.ifft(z.to("tpu")), torch.fft.ifft(z)) < 1e-6
    spec = torch.fft.rfft(x)
    assert rel_err(torch.fft.irfft(spec.to("tpu"), n=n), torch.fft.irfft(spec, n=n)) < 1e-6


def test_float64_is_computed_in_float64():
    z = _complex(3, 12, dtype=torch.complex128)
    assert rel_err(torch.fft.fft(z.to("tpu")), torch.fft.fft(z)) < 1e-14
    x = _real(3, 12, dtype=torch.float64)
    assert rel_err(torch.fft.rfft(x.to("tpu")), torch.fft.rfft(x)) < 1e-14


def test_precision_setting_does_not_degrade_transforms():
    x = _real(4, 64)
    with torch.tpu.precision(torch.tpu.Precision.DEFAULT):
        out = torch.fft.rfft(x.to("tpu"))
    assert rel_err(out, torch.fft.rfft(x)) < 1e-6


def test_c2r_ignores_imaginary_parts_of_dc_and_nyquist():
    z = _complex(2, 5)
    assert rel_err(torch.fft.irfft(z.to("tpu"), n=8), torch.fft.irfft(z, n=8)) < 1e-6


def test_gradients_match_cpu():
    x = _real(3, 8)
    c = _complex(3, 5)
    for fn, inp in ((lambda t: torch.fft.rfft(t).abs().sum(), x),
                    (lambda t: torch.fft.irfft(t, n=8).pow(2).sum(), c),
                    (lambda t: torch.fft.fft(t).real.sum() + torch.fft.fft(t).imag.pow(2).sum(), c)):
        a = inp.clone().requires_grad_()
        b = inp.to("tpu").requires_grad_()
        fn(a).backward()
        fn(b).backward()
        assert rel_err(b.grad, a.grad) < 1e-5


def test_repeat_calls_do_not_compile_again():
    x = _real(4, 32).to("tpu")
    torch.fft.rfft(x)
    before = torchtpu.metrics.counters()["compiles"]
    for _ in range(3):
        torch.fft.rfft(x)
    assert torchtpu.metrics.counters()["compiles"] == before


def test_unsupported_dtype_raises_like_cpu():
    x = torch.randn(8).bfloat16()
    with pytest.raises(RuntimeError) as cpu:
        torch.fft.rfft(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as tpu:
            torch.fft.rfft(x.to("tpu"))
    assert str(cpu.value).splitlines()[0] in str(tpu.value)
    metrics.reset()   # the CPU's check ran through the counted fallback

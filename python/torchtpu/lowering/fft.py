"""Discrete Fourier transforms (_fft_r2c, _fft_c2r, _fft_c2c) as MXU
matmuls, the way TPUs compute them: a transform of length n multiplies by
an n-point DFT matrix; lengths above DIRECT_MAX that factor as n1 * n2 use
the four-step algorithm (DFTs of n1 and n2 points with a twiddle multiply
between), so matrices stay small. Complex tensors are not native on TPU:
they are handled as their real and imaginary float planes
(torch.view_as_real), so every kernel is a float kernel. The DFT matmuls
always run at HIGHEST precision, whatever the matmul precision setting.

DFT matrices are computed on the host in float64 (exact at the quarter
turns) and kept on the device in a small LRU cache."""
import collections
import math
import threading

import torch

from .. import _C
from .._fallback import run_fallback
from .._registry import composite, lowering

DIRECT_MAX = 1024          # longest transform done as one DFT matmul
_PRIME_MAX = 4096          # longest unfactorable length done directly
_CACHE_ENTRIES = 32

_DEF = torch.library.Library("torchtpu", "FRAGMENT")
_DEF.define("dft(Tensor re, Tensor im, Tensor c, Tensor s, float scale) -> (Tensor, Tensor)")
_DEF.define("dft_r2c(Tensor re, Tensor c, Tensor s, float scale) -> (Tensor, Tensor)")
_DEF.define("dft_c2r(Tensor re, Tensor im, Tensor c, Tensor s, float scale) -> Tensor")

_FFT_DTYPES = {torch.float32: torch.complex64, torch.float64: torch.complex128}


# ------------------------------------------------------------ kernels


def _dot(ctx, v, m, t):
    """[..., K] x [K, N] at HIGHEST precision, as a 2-D matmul."""
    lead = tuple(t.shape[:-1])
    rows = math.prod(lead)
    k, n = m.shape
    a = ctx.reshape(v, (rows, k))
    r = ctx.dot_general(a, m, (), (), (1,), (0,), _C.PRECISION_HIGHEST,
                        out_dtype=t.dtype, out_shape=(rows, n))
    return ctx.reshape(r, lead + (n,))


def _scaled(ctx, v, scale):
    s = ctx.operand(scale, v.dtype, v.shape, "scale")
    return ctx.binary("multiply", v, s)


@lowering("torchtpu::dft", runtime=("scale",))
def dft(ctx, re, im, c, s, scale):
    """(re + i im) times (c - i s): R = re c + im s, I = im c - re s."""
    vr, vi = ctx.input(re, "re"), ctx.input(im, "im")
    vc, vs = ctx.input(c, "c"), ctx.input(s, "s")
    r = ctx.binary("add", _dot(ctx, vr, vc, re), _dot(ctx, vi, vs, im))
    i = ctx.binary("subtract", _dot(ctx, vi, vc, im), _dot(ctx, vr, vs, re))
    ctx.output(_scaled(ctx, r, scale))
    ctx.output(_scaled(ctx, i, scale))


@lowering("torchtpu::dft_r2c", runtime=("scale",))
def dft_r2c(ctx, re, c, s, scale):
    """A real input: R = re c, I = -re s."""
    vr = ctx.input(re, "re")
    vc, vs = ctx.input(c, "c"), ctx.input(s, "s")
    ctx.output(_scaled(ctx, _dot(ctx, vr, vc, re), scale))
    ctx.output(_scaled(ctx, ctx.unary("negate", _dot(ctx, vr, vs, re)), scale))


@lowering("torchtpu::dft_c2r", runtime=("scale",))
def dft_c2r(ctx, re, im, c, s, scale):
    """The real part only: re c + im s."""
    vr, vi = ctx.input(re, "re"), ctx.input(im, "im")
    vc, vs = ctx.input(c, "c"), ctx.input(s, "s")
    r = ctx.binary("add", _dot(ctx, vr, vc, re), _dot(ctx, vi, vs, im))
    ctx.output(_scaled(ctx, r, scale))


# ------------------------------------------------------------ DFT matrices

_cache = collections.OrderedDict()
_cache_lock = threading.Lock()


def _unit(p, n):
    """cos and sin of 2 pi p / n in float64, exact at multiples of a quarter
    turn (so the imaginary parts c2r ignores meet an exact zero)."""
    theta = p.to(torch.float64) * (2 * math.pi / n)
    c, s = torch.cos(theta), torch.sin(theta)
    quarter = (4 * p) % n == 0
    q = (4 * p) // n
    c = torch.where(quarter, torch.tensor([1.0, 0.0, -1.0, 0.0], dtype=torch.float64)[q % 4], c)
    s = torch.where(quarter, torch.tensor([0.0, 1.0, 0.0, -1.0], dtype=torch.float64)[q % 4], s)
    return c, s


def _matrices(kind, n, rows, cols, dtype, device):
    """(c, s) on the device, [rows, cols], for the product (j, k) -> j k mod n.
    kind: "fwd" (s = sin: a product with c - i s is one by exp(-i theta)),
    "inv" (s = -sin), "c2r" (c = w cos, s = -w sin with the Hermitian
    weight w of row k)."""
    key = (kind, n, rows, cols, dtype, device)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    j = torch.arange(rows, dtype=torch.int64)[:, None]
    k = torch.arange(cols, dtype=torch.int64)[None, :]
    c, s = _unit((j * k) % n, n)
    if kind == "inv":
        s = -s
    elif kind == "c2r":
        w = torch.full((rows, 1), 2.0, dtype=torch.float64)
        w[0] = 1.0
        if n % 2 == 0 and rows > n // 2:
            w[n // 2] = 1.0
        c, s = c * w, -s * w
    pair = (c.to(dtype).to(device), s.to(dtype).to(device))
    with _cache_lock:
        _cache[key] = pair
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return pair


def _split(n):
    """n1 * n2 = n with n1 the largest divisor <= sqrt(n), or None."""
    for n1 in range(int(math.isqrt(n)), 1, -1):
        if n % n1 == 0:
            return n1, n // n1
    return None


def _direct(n):
    return n <= DIRECT_MAX or (_split(n) is None and n <= _PRIME_MAX)


def _lowerable(n):
    if _direct(n):
        return True
    f = _split(n)
    return f is not None and _lowerable(f[0]) and _lowerable(f[1])


# ------------------------------------------------------------ transforms


def _c2c_last(re, im, inverse, scale):
    """DFT along the last dim of the complex (re, im), sign by inverse."""
    n = re.shape[-1]
    if _direct(n):
        c, s = _matrices("inv" if inverse else "fwd", n, n, n, re.dtype, re.device)
        return torch.ops.torchtpu.dft(re, im, c, s, scale)
    n1, n2 = _split(n)
    lead = tuple(re.shape[:-1])
    # x[j1 n2 + j2]: DFTs over j1, twiddle w_n^(j2 k1), DFTs over j2
    a_re, a_im = _c2c_last(re.reshape(lead + (n1, n2)).transpose(-1, -2),
                           im.reshape(lead + (n1, n2)).transpose(-1, -2), inverse, scale)
    tc, ts = _matrices("inv" if inverse else "fwd", n, n2, n1, re.dtype, re.device)
    # (a_re + i a_im)(tc - i ts)
    b_re = a_re * tc + a_im * ts
    b_im = a_im * tc - a_re * ts
    c_re, c_im = _c2c_last(b_re.transpose(-1, -2), b_im.transpose(-1, -2), inverse, 1.0)
    # X[k1 + n1 k2] = C[k1, k2]
    return (c_re.transpose(-1, -2).reshape(lead + (n,)),
            c_im.transpose(-1, -2).reshape(lead + (n,)))


def _c2c(re, im, dims, inverse, scale):
    for i, d in enumerate(dims):
        r, m = _c2c_last(re.movedim(d, -1), im.movedim(d, -1), inverse,
                         scale if i == 0 else 1.0)
        re, im = r.movedim(-1, d), m.movedim(-1, d)
    return re, im


def _scale(normalization, sizes):
    n = math.prod(sizes)
    if normalization == 1:
        return 1.0 / math.sqrt(n)
    if normalization == 2:
        return 1.0 / n
    return 1.0


def _planes(z):
    """The real and imaginary float planes of complex tpu tensor z (a lazy
    conjugate view negates the imaginary plane)."""
    if z.is_conj():
        v = torch.view_as_real(z.conj())
        return v[..., 0], -v[..., 1]
    v = torch.view_as_real(z)
    return v[..., 0], v[..., 1]


def _result(op, args, re, im):
    """A contiguous complex tpu tensor of the CPU kernel's shape (the CPU's
    FFT output strides depend on its library; ours are row-major)."""
    meta = op(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args])
    out = torch.empty(meta.shape, dtype=meta.dtype, device=re.device)
    torch.view_as_real(out).copy_(torch.stack([re, im], -1))
    return out


def _unsupported(x, sizes):
    return (x.dtype not in _FFT_DTYPES and x.dtype not in _FFT_DTYPES.values()) or \
        any(not _lowerable(n) for n in sizes if n > 0) or x.numel() == 0


@composite("aten::_fft_r2c")
def fft_r2c(self, dim, normalization, onesided):
    op = torch.ops.aten._fft_r2c.default
    dim = [d % self.dim() for d in dim] if self.dim() else list(dim)
    sizes = [self.shape[d] for d in dim]
    if _unsupported(self, sizes) or self.is_complex():
        return run_fallback(op, (self, dim, normalization, onesided), {},
                            reason=f"dtype {self.dtype} or lengths {sizes}")
    last = dim[-1]
    n = self.shape[last]
    m = n // 2 + 1 if onesided else n
    scale = _scale(normalization, sizes)
    if _direct(n):
        c, s = _matrices("fwd", n, n, m, self.dtype, self.device)
        re, im = torch.ops.torchtpu.dft_r2c(self.movedim(last, -1), c, s, scale)
    else:
        x = self.movedim(last, -1)
        re, im = _c2c_last(x, torch.zeros_like(x), False, scale)
        re, im = re[..., :m], im[..., :m]
    re, im = re.movedim(-1, last), im.movedim(-1, last)
    re, im = _c2c(re, im, dim[:-1], False, 1.0)
    return _result(op, (self, dim, normalization, onesided), re, im)


@composite("aten::_fft_c2c")
def fft_c2c(self, dim, normalization, forward):
    op = torch.ops.aten._fft_c2c.default
    dim = [d % self.dim() for d in dim] if self.dim() else list(dim)
    sizes = [self.shape[d] for d in dim]
    if _unsupported(self, sizes) or not self.is_complex():
        return run_fallback(op, (self, dim, normalization, forward), {},
                            reason=f"dtype {self.dtype} or lengths {sizes}")
    re, im = _planes(self)
    re, im = _c2c(re, im, dim, not forward, _scale(normalization, sizes))
    return _result(op, (self, dim, normalization, forward), re, im)


@composite("aten::_fft_c2r")
def fft_c2r(self, dim, normalization, last_dim_size):
    op = torch.ops.aten._fft_c2r.default
    dim = [d % self.dim() for d in dim] if self.dim() else list(dim)
    n = int(last_dim_size)
    sizes = [self.shape[d] for d in dim[:-1]] + [n]
    last = dim[-1]
    if _unsupported(self, sizes) or not self.is_complex() or \
            self.shape[last] not in (n, n // 2 + 1):
        # the CPU kernel's checks and messages
        return run_fallback(op, (self, dim, normalization, last_dim_size), {},
                            reason=f"dtype {self.dtype} or lengths {sizes}")
    m = n // 2 + 1
    re, im = _planes(self)
    re, im = _c2c(re, im, dim[:-1], True, 1.0)
    re, im = re.movedim(last, -1)[..., :m], im.movedim(last, -1)[..., :m]
    scale = _scale(normalization, sizes)
    if _direct(n):
        c, s = _matrices("c2r", n, m, n, re.dtype, re.device)
        y = torch.ops.torchtpu.dft_c2r(re, im, c, s, scale)
    else:
        # the Hermitian-symmetric spectrum of n points, transformed in full
        tail = slice(1, n - m + 1)
        full_re = torch.cat([re, re[..., tail].flip(-1)], -1)
        full_im = torch.cat([im, -im[..., tail].flip(-1)], -1)
        y = _c2c_last(full_re, full_im, True, scale)[0]
    y = y.movedim(-1, last)
    meta = op(self.to("meta"), dim, normalization, last_dim_size)
    return torch.empty(meta.shape, dtype=meta.dtype, device=self.device).copy_(y)

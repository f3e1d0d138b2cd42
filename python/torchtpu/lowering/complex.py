"""Complex arithmetic on float planes.

A TPU has no complex units: XLA computes complex values as pairs of floats.
So do we. A complex tpu tensor's storage is interleaved (real, imaginary)
pairs, and torch.view_as_real gives its two float planes as strided views;
the rules here compute an op's real and imaginary results from those planes
with lowered float ops, then write both into a complex result. They run
when an op's float lowering declines a complex operand. Each call is
counted as "not native on TPU" (torchtpu.metrics.not_native_counts()), not
as a CPU fallback: nothing leaves the device."""
import threading

import torch

_RULES = {}
_lock = threading.Lock()
_counts = {}

_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def rule_for(name):
    return _RULES.get(name)


def counts():
    with _lock:
        return dict(_counts)


def reset():
    with _lock:
        _counts.clear()


def note(name):
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1


def _rule(*names):
    def deco(fn):
        for n in names:
            _RULES[n] = fn
        return fn
    return deco


def handles(args, kwargs):
    """True when a complex tpu tensor (or a Python complex) is among args."""
    found = []

    def visit(x):
        if isinstance(x, torch.Tensor):
            if x.is_complex() and x.device.type == "tpu":
                found.append(x)
        elif isinstance(x, complex):
            found.append(x)
        elif isinstance(x, (list, tuple)):
            for e in x:
                visit(e)

    for a in list(args) + list(kwargs.values()):
        visit(a)
    return bool(found)


# ------------------------------------------------------------ planes


def planes(x, dtype):
    """(re, im) of x as values of the real dtype `dtype` (complex result
    dtype's parts): tensors give float tpu views or tensors, numbers give
    numbers; im is None for a real operand."""
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            if x.is_conj():
                v = torch.view_as_real(x.conj())
                re, im = v[..., 0], -v[..., 1]
            else:
                v = torch.view_as_real(x)
                re, im = v[..., 0], v[..., 1]
            if re.dtype != dtype:
                re, im = re.to(dtype), im.to(dtype)
            return re, im
        if x.device.type == "cpu" and x.dim() == 0:
            return x.item(), None
        return (x if x.dtype == dtype else x.to(dtype)), None
    if isinstance(x, complex):
        return x.real, x.imag
    return x, None


def _complex_like(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


def assemble(re, im, dtype, device, into=None):
    """A complex tensor of dtype from its planes (or written into `into`)."""
    if im is None:
        im = torch.zeros_like(re) if isinstance(re, torch.Tensor) else 0.0
    shape = torch.broadcast_shapes(*(p.shape for p in (re, im) if isinstance(p, torch.Tensor)))
    out = into if into is not None else _complex_like(shape, dtype, device)
    v = torch.view_as_real(out)
    part = _REAL[dtype]
    re_t = re if isinstance(re, torch.Tensor) else torch.full(shape, re, dtype=part, device=device)
    im_t = im if isinstance(im, torch.Tensor) else torch.full(shape, im, dtype=part, device=device)
    v.copy_(torch.stack([re_t.expand(shape), im_t.expand(shape)], -1))
    return out


def _result_dtype(*xs):
    ts = [x for x in xs if isinstance(x, (torch.Tensor, int, float, complex, bool))]
    dt = ts[0] if len(ts) == 1 and isinstance(ts[0], torch.Tensor) else None
    if dt is not None:
        return dt.dtype
    return torch.result_type(*ts[:2]) if len(ts) >= 2 else ts[0].dtype


def _device(*xs):
    for x in xs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return x.device
    return torch.device("tpu")


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


def _neg(a):
    return None if a is None else -a


def _mul(a, b):
    if a is None or b is None:
        return None
    return a * b


# ------------------------------------------------------------ binary


def _binary(fn, self, other, inplace, **kw):
    dtype = self.dtype if inplace else _result_dtype(self, other)
    if not dtype.is_complex:
        return None
    part = _REAL[dtype]
    ar, ai = planes(self, part)
    br, bi = planes(other, part)
    re, im = fn(ar, ai, br, bi, **kw)
    dev = _device(self, other)
    return assemble(re, im, dtype, dev, into=self if inplace else None)


def _addsub(sign):
    def f(ar, ai, br, bi, alpha=1):
        if alpha != 1:
            if isinstance(alpha, complex):
                br, bi = (_add(_mul(br, alpha.real), _neg(_mul(bi, alpha.imag))),
                          _add(_mul(br, alpha.imag), _mul(bi, alpha.real)))
            else:
                br, bi = _mul(br, alpha), _mul(bi, alpha)
        if sign < 0:
            br, bi = _neg(br), _neg(bi)
        return _add(ar, br), _add(ai, bi)
    return f


def _cmul(ar, ai, br, bi):
    return _add(_mul(ar, br), _neg(_mul(ai, bi))), _add(_mul(ar, bi), _mul(ai, br))


def _cdiv(ar, ai, br, bi):
    """(ar + i ai) / (br + i bi) as c10::complex divides (NumPy's scaled
    algorithm: no overflow in br^2 + bi^2)."""
    if bi is None:
        return ar / br, (None if ai is None else ai / br)
    like = next(x for x in (ar, ai, br, bi) if isinstance(x, torch.Tensor))

    def tensor(x):
        if x is None:
            return torch.zeros_like(like)
        return x if isinstance(x, torch.Tensor) else torch.full_like(like, x)

    ar, ai, br, bi = tensor(ar), tensor(ai), tensor(br), tensor(bi)
    big_re = br.abs() >= bi.abs()
    both_zero = (br == 0) & (bi == 0)
    # |br| >= |bi|: rat = bi / br; otherwise rat = br / bi
    num = torch.where(big_re, bi, br)
    den = torch.where(big_re, br, bi)
    rat = num / torch.where(den == 0, torch.ones_like(den), den)
    scl = 1.0 / (den + num * rat)
    re = torch.where(big_re, (ar + ai * rat) * scl, (ar * rat + ai) * scl)
    im = torch.where(big_re, (ai - ar * rat) * scl, (ai * rat - ar) * scl)
    # 0 / 0 and x / 0: inf or nan, as a / |c|, b / |d|
    re = torch.where(both_zero, ar / br.abs(), re)
    im = torch.where(both_zero, ai / bi.abs(), im)
    return re, im


for _name, _fn in (("add", _addsub(1)), ("sub", _addsub(-1)), ("mul", _cmul), ("div", _cdiv)):
    def _make(fn, inplace):
        def rule(self, other, alpha=1, **kw):
            if alpha != 1:
                return _binary(fn, self, other, inplace, alpha=alpha)
            return _binary(fn, self, other, inplace)
        return rule
    for _ov in ("Tensor", "Scalar"):
        _RULES[f"aten::{_name}.{_ov}"] = _make(_fn, False)
        _RULES[f"aten::{_name}_.{_ov}"] = _make(_fn, True)


# ------------------------------------------------------------ unary


@_rule("aten::neg")
def neg(self):
    re, im = planes(self, _REAL[self.dtype])
    return assemble(-re, -im, self.dtype, self.device)


@_rule("aten::neg_")
def neg_(self):
    re, im = planes(self, _REAL[self.dtype])
    return assemble(-re, -im, self.dtype, self.device, into=self)


@_rule("aten::conj_physical")
def conj_physical(self):
    re, im = planes(self, _REAL[self.dtype])
    return assemble(re, -im, self.dtype, self.device)


@_rule("aten::conj_physical.out")
def conj_physical_out(self, *, out):
    if out.shape != self.shape:
        out.resize_(self.shape)
    re, im = planes(self, _REAL[self.dtype])
    return assemble(re, -im, out.dtype, out.device, into=out)


@_rule("aten::conj_physical_")
def conj_physical_(self):
    re, im = planes(self, _REAL[self.dtype])
    return assemble(re, -im, self.dtype, self.device, into=self)


@_rule("aten::abs")
def abs_(self):
    re, im = planes(self, _REAL[self.dtype])
    return torch.hypot(re, im)


@_rule("aten::angle")
def angle(self):
    re, im = planes(self, _REAL[self.dtype])
    return torch.atan2(im, re)


@_rule("aten::sgn")
def sgn(self):
    """z / |z|, and 0 where z == 0."""
    re, im = planes(self, _REAL[self.dtype])
    mag = torch.hypot(re, im)
    zero = mag == 0
    safe = torch.where(zero, torch.ones_like(mag), mag)
    return assemble(torch.where(zero, 0.0, re / safe), torch.where(zero, 0.0, im / safe),
                    self.dtype, self.device)


@_rule("aten::exp")
def exp(self):
    re, im = planes(self, _REAL[self.dtype])
    m = torch.exp(re)
    return assemble(m * torch.cos(im), m * torch.sin(im), self.dtype, self.device)


@_rule("aten::reciprocal")
def reciprocal(self):
    re, im = planes(self, _REAL[self.dtype])
    one = torch.ones_like(re)
    r, i = _cdiv(one, None, re, im)
    return assemble(r, i, self.dtype, self.device)


@_rule("aten::where.self")
def where(condition, self, other):
    dtype = _result_dtype(self, other)
    part = _REAL[dtype]
    ar, ai = planes(self, part)
    br, bi = planes(other, part)
    ai = 0.0 if ai is None else ai
    bi = 0.0 if bi is None else bi
    return assemble(torch.where(condition, ar, br), torch.where(condition, ai, bi), dtype,
                    _device(self, other, condition))


@_rule("aten::constant_pad_nd")
def constant_pad_nd(self, pad, value=0):
    re, im = planes(self, _REAL[self.dtype])
    value = complex(value)
    return assemble(torch.constant_pad_nd(re, pad, value.real),
                    torch.constant_pad_nd(im, pad, value.imag), self.dtype, self.device)


@_rule("aten::zero_")
def zero_(self):
    torch.view_as_real(self).zero_()
    return self


@_rule("aten::fill_.Scalar")
def fill_(self, value):
    v = torch.view_as_real(self)
    value = complex(value)
    v[..., 0].fill_(value.real)
    v[..., 1].fill_(value.imag)
    return self


def _reduce_planes(name):
    """sum/mean: each plane reduced alone (both are linear)."""
    def rule(self, dim=None, keepdim=False, *, dtype=None):
        out_dtype = dtype or self.dtype
        re, im = planes(self, _REAL[out_dtype])
        if dim is None:
            r, i = getattr(re, name)(), getattr(im, name)()
        else:
            r, i = getattr(re, name)(dim, keepdim), getattr(im, name)(dim, keepdim)
        return assemble(r, i, out_dtype, self.device)
    return rule


_RULES["aten::sum"] = _RULES["aten::sum.dim_IntList"] = _reduce_planes("sum")
_RULES["aten::mean"] = _RULES["aten::mean.dim"] = _reduce_planes("mean")


@_rule("aten::eq.Tensor", "aten::eq.Scalar")
def eq(self, other):
    dtype = _result_dtype(self, other)
    part = _REAL[dtype] if dtype.is_complex else dtype
    ar, ai = planes(self, part)
    br, bi = planes(other, part)
    ai = 0.0 if ai is None else ai
    bi = 0.0 if bi is None else bi
    return (ar == br) & (ai == bi)


@_rule("aten::ne.Tensor", "aten::ne.Scalar")
def ne(self, other):
    return ~eq(self, other)


@_rule("aten::mm")
def mm(self, mat2):
    dtype = _result_dtype(self, mat2)
    part = _REAL[dtype]
    ar, ai = planes(self, part)
    br, bi = planes(mat2, part)
    re = ar @ br if ai is None or bi is None else ar @ br - ai @ bi
    im = _add(None if bi is None else ar @ bi, None if ai is None else ai @ br)
    return assemble(re, im, dtype, self.device)


@_rule("aten::bmm")
def bmm(self, mat2):
    return mm(self, mat2)

"""Lowering rules: pointwise math, comparisons, logic, activations and their
backwards.

Rules go through ``elementwise.elementwise`` (PyTorch type promotion, float32
opmath for reduced-precision floats, one rounding at the end), except the
logical ops and masked_fill, which have no computation dtype. Formulas
follow PyTorch's CPU kernels -- where its scalar and vectorized paths differ
(NaN in the backward of hardtanh, elu, logit; lerp's fused multiply-add),
the vectorized one, which handles all but the tails -- including NaN,
infinity and signed-zero behaviour. Scalars that vary from call to call
(clamp bounds, slopes, the pow exponent, ...) are runtime operands: the
program computes every case with selects instead of branching on their
values. Subnormals are flushed by the vTPU (docs/design/precision.md).
"""
import math

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as K
from torch._prims_common import elementwise_dtypes

from .._registry import lowering
from .ctx import NotLowerable, is_tensor
from .elementwise import _check_dtypes, elementwise

_CPU_NAME = {
    torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short",
    torch.int32: "Int", torch.int64: "Long", torch.float16: "Half",
    torch.bfloat16: "BFloat16", torch.float32: "Float", torch.float64: "Double",
}


def _cat(dtype):
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point else "int"


def _inplace(ctx):
    return ctx.name.split("::")[1].split(".")[0].endswith("_")


def _check_supported(kernel, dtype, allow):
    """Raises the CPU kernel's dispatch error for dtypes it does not handle."""
    if kernel is not None and _cat(dtype) not in allow:
        raise NotImplementedError(f'"{kernel}" not implemented for \'{_CPU_NAME[dtype]}\'')


def _wrap(x, device):
    """A 0-dim tensor on device standing in for a Tensor argument given as a
    Python number (a wrapped number) or a 0-dim CPU tensor, promoting like
    it."""
    if isinstance(x, bool):
        return torch.empty((), dtype=torch.bool, device=device)
    if isinstance(x, int):
        return torch.empty((), dtype=torch.int64, device=device)
    if isinstance(x, float):
        return torch.empty((), dtype=torch.get_default_dtype(), device=device)
    if device == "meta" and is_tensor(x) and x.device.type == "cpu" and x.dim() == 0:
        return torch.empty((), dtype=x.dtype, device=device)
    return x


def _meta(ctx):
    """ctx.meta(), also when PyTorch handed over a wrapped number as a plain
    Python number for a Tensor argument (where(c, x, 0.0), x % 2), which the
    meta kernels do not take, or a 0-dim CPU tensor where a meta kernel
    wants a meta one (masked_fill's value)."""
    schema = ctx.overload._schema
    tensor_args = {a.name for a in schema.arguments if "Tensor" in str(a.type)}
    pos = [a.name for a in schema.arguments if not a.kwarg_only]
    saved = ctx.args, ctx.kwargs

    def swapped(device):
        ctx.args = [_wrap(v, device) if i < len(pos) and pos[i] in tensor_args else v
                    for i, v in enumerate(saved[0])]
        ctx.kwargs = {k: _wrap(v, device) if k in tensor_args else v
                      for k, v in saved[1].items()}
        try:
            return ctx.meta()   # cached: elementwise() gets the same result
        finally:
            ctx.args, ctx.kwargs = saved

    try:
        return swapped("meta")
    except Exception:
        return swapped("cpu")   # errors worded by the CPU kernel


def _start(ctx, inputs, out, kind=K.DEFAULT):
    """Checks shared by every rule; returns the tensor to write (self for
    in-place ops, out for out= variants) or None. kind: the type promotion
    (None: the result has the dtype of inputs[0])."""
    _check_dtypes(*inputs)
    if any((is_tensor(x) and x.dtype.is_complex) or isinstance(x, complex) for x in inputs):
        raise NotLowerable("complex dtype")
    m = _meta(ctx)
    if _inplace(ctx):
        return inputs[0]
    if out is not None:
        if tuple(out.shape) != tuple(m.shape):
            raise NotLowerable("out= tensor needs resizing")
        result = inputs[0].dtype if kind is None else \
            elementwise_dtypes(*inputs, type_promotion_kind=kind)[1]
        if out.dtype != result:
            # some CPU kernels cast the result to out's dtype (rounding it to
            # the op's dtype first), others reject it
            raise NotLowerable(f"out= tensor of dtype {out.dtype}, result {result}")
    return out


def _pw(ctx, fn, inputs, names, kind=K.DEFAULT, out=None, allow=None, kernel=None):
    """elementwise() for one call of a pointwise rule: in-place ops write into
    self, out= variants into out; allow/kernel reproduce the CPU kernel's
    unsupported-dtype error (allow: categories 'bool', 'int', 'float' of the
    dtype the kernel dispatches on)."""
    into = _start(ctx, inputs, out, kind)     # shape errors come first
    if allow is not None:
        _, common = elementwise_dtypes(*inputs, type_promotion_kind=K.DEFAULT)
        _check_supported(kernel, common, allow)
    return elementwise(ctx, fn, inputs, names, kind, into=into)


def _variants(name, *suffixes):
    out = []
    for s in suffixes:
        if s == "":
            out.append(f"aten::{name}")
        elif s == "_":
            out.append(f"aten::{name}_")
        elif s.startswith("_."):
            out.append(f"aten::{name}_.{s[2:]}")
        else:
            out.append(f"aten::{name}.{s}")
    return out


# --------------------------------------------------------- IR shorthands

def _c(c, v, like):
    """Constant v of like's dtype and shape."""
    return c.const(v, like.dtype, like.shape)


def _add(c, a, b):
    return c.binary("add", a, b)


def _sub(c, a, b):
    return c.binary("subtract", a, b)


def _mul(c, a, b):
    return c.binary("multiply", a, b)


def _div(c, a, b):
    return c.binary("divide", a, b)


def _isnan(c, a):
    return c.compare("ne", a, a)


def _or(c, *ps):
    r = ps[0]
    for p in ps[1:]:
        r = c.op("or", r, p)
    return r


def _and(c, *ps):
    r = ps[0]
    for p in ps[1:]:
        r = c.op("and", r, p)
    return r


def _trunc(c, a):
    # keeps the sign of zero: trunc(-0.5) = -0.0
    return c.select(c.compare("lt", a, _c(c, 0, a)), c.unary("ceil", a), c.unary("floor", a))


def _round_to(c, v, dtype):
    """v rounded to a reduced-precision dtype and back (a CPU kernel that
    converts a Scalar to scalar_t before using it in opmath)."""
    if dtype in (torch.bfloat16, torch.float16) and v.dtype != dtype:
        return c.convert(c.convert(v, dtype), v.dtype)
    return v


def _sigmoid_div(c, a):
    """1 / (1 + exp(-x)), as the CPU activation kernels write it."""
    one = _c(c, 1, a)
    return _div(c, one, _add(c, one, c.unary("exponential", c.unary("negate", a))))


def _softplus1(c, a):
    """log1p(exp(x))."""
    return c.unary("log_plus_one", c.unary("exponential", a))


# ------------------------------------------------------------ unary math

def _unary_rule(name, fn, kind=K.INT_TO_FLOAT, allow=None, kernel=None, suffixes=("", "_", "out")):
    def rule(ctx, self, *, out=None):
        _pw(ctx, fn, [self], ["self"], kind, out=out, allow=allow, kernel=kernel)

    lowering(*_variants(name, *suffixes))(rule)


_FLOAT_UNARY = {
    "acos": "acos", "acosh": "acosh", "asin": "asin", "asinh": "asinh", "atan": "atan",
    "atanh": "atanh", "cos": "cosine", "cosh": "cosh", "erf": "erf", "erfinv": "erf_inv",
    "expm1": "exponential_minus_one", "log": "log", "log10": "log10", "log1p": "log_plus_one",
    "log2": "log2", "rsqrt": "rsqrt", "sigmoid": "logistic", "sin": "sine", "sinh": "sinh",
    "sqrt": "sqrt", "tan": "tan", "tanh": "tanh", "lgamma": "lgamma", "digamma": "digamma",
}

for _name, _ir in _FLOAT_UNARY.items():
    _unary_rule(_name, lambda c, a, _ir=_ir: c.unary(_ir, a))

_unary_rule("reciprocal", lambda c, a: _div(c, _c(c, 1, a), a))
_unary_rule("exp2", lambda c, a: c.binary("power", _c(c, 2, a), a))

# erfc in float64 (Cephes ndtr.c): 1 - erf(x) cancels for large x.
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)
_ERFC_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
           6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_ERFC_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
           1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)


def _poly(c, x, coeffs):
    r = _c(c, coeffs[0], x)
    for k in coeffs[1:]:
        r = _add(c, _mul(c, r, x), _c(c, k, x))
    return r


def _erfc(c, a):
    x = c.convert(a, torch.float64)
    ax = c.unary("abs", x)
    small = _sub(c, _c(c, 1, x), c.unary("erf", x))
    z = c.unary("exponential", c.unary("negate", _mul(c, x, x)))
    mid = _div(c, _mul(c, z, _poly(c, ax, _ERFC_P)), _poly(c, ax, _ERFC_Q))
    big = _div(c, _mul(c, z, _poly(c, ax, _ERFC_R)), _poly(c, ax, _ERFC_S))
    y = c.select(c.compare("lt", ax, _c(c, 8, x)), mid, big)
    y = c.select(c.compare("lt", x, _c(c, 0, x)), _sub(c, _c(c, 2, x), y), y)
    # erfc(+inf) = 0, erfc(-inf) = 2 (the polynomials give inf/inf there)
    y = c.select(c.compare("eq", x, _c(c, math.inf, x)), _c(c, 0, x), y)
    y = c.select(c.compare("eq", x, _c(c, -math.inf, x)), _c(c, 2, x), y)
    y = c.select(c.compare("lt", ax, _c(c, 1, x)), small, y)
    return c.convert(y, a.dtype)


_unary_rule("erfc", _erfc)


def _trigamma(c, x):
    """PyTorch's trigamma (reflection below 0.5, six recurrence steps, then
    the asymptotic series) with its precisions: float arithmetic for float
    inputs except the series, which C++ promotes to double."""
    wide = torch.float64
    one = _c(c, 1, x)
    small = c.compare("lt", x, _c(c, 0.5, x))
    pi = _c(c, math.pi, x)
    s = c.unary("sine", _mul(c, pi, x))
    result = c.select(small, c.unary("negate", _div(c, _mul(c, pi, pi), _mul(c, s, s))),
                      _c(c, 0, x))
    x = c.select(small, _sub(c, one, x), x)
    for _ in range(6):
        result = _add(c, result, _div(c, one, _mul(c, x, x)))
        x = _add(c, x, one)
    ixx = c.convert(_div(c, one, _mul(c, x, x)), wide)
    head = c.convert(_add(c, one, _div(c, one, _mul(c, _c(c, 2, x), x))), wide)
    tail = _sub(c, _c(c, 1 / 30, ixx), _mul(c, ixx, _c(c, 1 / 42, ixx)))
    tail = _mul(c, ixx, _sub(c, _c(c, 1 / 6, ixx), _mul(c, ixx, tail)))
    series = _div(c, _add(c, head, tail), c.convert(x, wide))
    result = c.convert(_add(c, c.convert(result, wide), series), result.dtype)
    return c.select(small, c.unary("negate", result), result)


def _polygamma_fn(n):
    if n == 0:
        return lambda c, a: c.unary("digamma", a)
    if n == 1:
        return _trigamma
    # n >= 2 needs the Hurwitz zeta function
    raise NotLowerable(f"polygamma of order {n}")


@lowering("aten::polygamma", "aten::polygamma.out")
def polygamma(ctx, n, self, *, out=None):
    _pw(ctx, _polygamma_fn(n), [self], ["self"], K.INT_TO_FLOAT, out=out)


@lowering("aten::polygamma_")
def polygamma_(ctx, self, n):
    _pw(ctx, _polygamma_fn(n), [self], ["self"], K.INT_TO_FLOAT)


def _abs(c, a):
    return c.unary("abs", a)


def _round_like(ir):
    def f(c, a):
        return c.unary(ir, a) if a.dtype.is_floating_point else a
    return f


def _trunc_any(c, a):
    return _trunc(c, a) if a.dtype.is_floating_point else a


def _sign(c, a):
    if a.dtype == torch.bool:
        return a
    if not a.dtype.is_floating_point:
        return c.unary("sign", a)
    # (0 < x) - (x < 0): NaN -> 0 and -0.0 -> +0.0, as PyTorch's CPU kernel
    zero = _c(c, 0, a)
    return _sub(c, c.convert(c.compare("gt", a, zero), a.dtype),
                c.convert(c.compare("lt", a, zero), a.dtype))


_unary_rule("abs", _abs, K.DEFAULT, allow=("int", "float"), kernel="abs_cpu")
_unary_rule("ceil", _round_like("ceil"), K.DEFAULT, ("int", "float"), "ceil_vml_cpu")
_unary_rule("floor", _round_like("floor"), K.DEFAULT, ("int", "float"), "floor_vml_cpu")
_unary_rule("round", _round_like("round_nearest_even"), K.DEFAULT, ("int", "float"),
            "round_vml_cpu")
_unary_rule("trunc", _trunc_any, K.DEFAULT, ("int", "float"), "trunc_vml_cpu")
_unary_rule("frac", lambda c, a: _sub(c, a, _trunc(c, a)), K.DEFAULT, ("float",), "frac_cpu")
_unary_rule("sign", _sign, K.DEFAULT)
_unary_rule("sgn", _sign, K.DEFAULT)
_unary_rule("bitwise_not", lambda c, a: c.unary("not", a), K.DEFAULT, ("bool", "int"),
            "bitwise_not_cpu")


@lowering("aten::round.decimals", "aten::round_.decimals", "aten::round.decimals_out")
def round_decimals(ctx, self, *, decimals=0, out=None):
    def f(c, a):
        if decimals == 0:
            return c.unary("round_nearest_even", a)
        ten = _c(c, float(10.0 ** abs(decimals)), a)
        if decimals < 0:
            return _mul(c, c.unary("round_nearest_even", _div(c, a, ten)), ten)
        return _div(c, c.unary("round_nearest_even", _mul(c, a, ten)), ten)

    _pw(ctx, f, [self], ["self"], K.DEFAULT, out=out, allow=("float",), kernel="round_cpu")


# ------------------------------------------------------ classification

def _class_rule(name, float_fn, int_value, suffixes=("", "out")):
    def f(c, a):
        if a.dtype.is_floating_point:
            return float_fn(c, a)
        return c.const(int_value, torch.bool, a.shape)

    _unary_rule(name, f, K.ALWAYS_BOOL, suffixes=suffixes)


_class_rule("isnan", _isnan, False)
_class_rule("isinf", lambda c, a: c.compare("eq", c.unary("abs", a), _c(c, math.inf, a)), False)
_class_rule("isposinf", lambda c, a: c.compare("eq", a, _c(c, math.inf, a)), False)
_class_rule("isneginf", lambda c, a: c.compare("eq", a, _c(c, -math.inf, a)), False)
# isfinite is CompositeImplicit in PyTorch; one kernel here
_class_rule("isfinite", lambda c, a: c.unary("is_finite", a), True, suffixes=("",))


@lowering("aten::signbit", "aten::signbit.out")
def signbit(ctx, self, *, out=None):
    if self.dtype.is_floating_point:
        # x < 0 or x is -0.0 is expressible, but the sign bit of a NaN is
        # not observable without a bitcast in the IR.
        raise NotLowerable("signbit of floats needs a bitcast (the sign of NaN)")

    def f(c, a):
        if a.dtype == torch.bool:
            return c.const(False, torch.bool, a.shape)
        return c.compare("lt", a, _c(c, 0, a))

    _pw(ctx, f, [self], ["self"], K.ALWAYS_BOOL, out=out)


def _nonzero(c, a):
    if a.dtype == torch.bool:
        return a
    return c.compare("ne", a, _c(c, 0, a))


@lowering("aten::logical_not", "aten::logical_not_", "aten::logical_not.out")
def logical_not(ctx, self, *, out=None):
    _pw(ctx, lambda c, a: c.unary("not", _nonzero(c, a)), [self], ["self"], K.ALWAYS_BOOL,
        out=out)


@lowering("aten::nan_to_num", "aten::nan_to_num_", "aten::nan_to_num.out",
          runtime=("nan", "posinf", "neginf"))
def nan_to_num(ctx, self, nan=None, posinf=None, neginf=None, *, out=None):
    def f(c, a):
        if not a.dtype.is_floating_point:
            return a
        fi = torch.finfo(self.dtype)

        def repl(value, name, default):
            if value is None:
                return _c(c, default, a)
            v = c.operand(value, self.dtype, None, name)   # rounded to the tensor's dtype
            return c.broadcast(c.convert(v, a.dtype), a.shape)

        r = c.select(_isnan(c, a), repl(nan, "nan", 0.0), a)
        r = c.select(c.compare("eq", a, _c(c, math.inf, a)), repl(posinf, "posinf", fi.max), r)
        return c.select(c.compare("eq", a, _c(c, -math.inf, a)), repl(neginf, "neginf", fi.min), r)

    _pw(ctx, f, [self], ["self"], K.DEFAULT, out=out)


# -------------------------------------------------------------- binary

_TENSOR_SCALAR = ("Tensor", "_.Tensor", "Tensor_out", "Scalar", "_.Scalar", "Scalar_out")


def _binary_rule(name, fn, kind=K.DEFAULT, allow=None, kernel=None, suffixes=_TENSOR_SCALAR):
    """Binary op overloads with other a tensor, a wrapped number or a Scalar
    (a runtime operand)."""
    ovs = _variants(name, *suffixes)

    def rule(ctx, self, other, *, out=None):
        _pw(ctx, fn, [self, other], ["self", "other"], kind, out=out, allow=allow,
            kernel=kernel)

    lowering(*ovs, runtime=("other",))(rule)


def _fmax(ir):
    def f(c, a, b):
        r = c.binary(ir, a, b)
        if not a.dtype.is_floating_point:
            return r
        # NaN is ignored unless both are NaN
        return c.select(_isnan(c, a), b, c.select(_isnan(c, b), a, r))
    return f


def _remainder(c, a, b):
    """Python's modulo: the result takes the sign of the divisor."""
    r = c.binary("remainder", a, b)
    zero = _c(c, 0, a)
    fix = _and(c, c.compare("ne", r, zero),
               c.compare("ne", c.compare("lt", r, zero), c.compare("lt", b, zero)))
    return c.select(fix, _add(c, r, b), r)


def _hypot(c, a, b):
    if a.dtype == torch.float32:
        # exact squares and one rounding in float64: no overflow/underflow
        x, y = c.convert(a, torch.float64), c.convert(b, torch.float64)
        r = c.unary("sqrt", _add(c, _mul(c, x, x), _mul(c, y, y)))
        r = c.convert(r, torch.float32)
    else:
        x, y = c.unary("abs", a), c.unary("abs", b)
        hi, lo = c.binary("maximum", x, y), c.binary("minimum", x, y)
        q = _div(c, lo, hi)
        r = _mul(c, hi, c.unary("sqrt", _add(c, _c(c, 1, a), _mul(c, q, q))))
        r = c.select(c.compare("eq", hi, _c(c, 0, a)), _c(c, 0, a), r)
    inf = _c(c, math.inf, a)
    either_inf = _or(c, c.compare("eq", c.unary("abs", a), inf),
                     c.compare("eq", c.unary("abs", b), inf))
    return c.select(either_inf, inf, r)


def _xlogy(c, x, y):
    r = _mul(c, x, c.unary("log", y))
    r = c.select(c.compare("eq", x, _c(c, 0, x)), _c(c, 0, x), r)
    return c.select(_isnan(c, y), _c(c, math.nan, x), r)


def _bitwise(ir):
    return lambda c, a, b: c.binary(ir, a, b)


_binary_rule("maximum", lambda c, a, b: c.binary("maximum", a, b), suffixes=("", "out"))
_binary_rule("minimum", lambda c, a, b: c.binary("minimum", a, b), suffixes=("", "out"))
_binary_rule("fmax", _fmax("maximum"), suffixes=("", "out"))
_binary_rule("fmin", _fmax("minimum"), suffixes=("", "out"))
_binary_rule("fmod", lambda c, a, b: c.binary("remainder", a, b), allow=("int", "float"),
             kernel="fmod_cpu")
_binary_rule("remainder", _remainder, allow=("int", "float"), kernel="remainder_cpu")
_binary_rule("atan2", lambda c, a, b: c.binary("atan2", a, b), K.INT_TO_FLOAT,
             suffixes=("", "_", "out"))
_binary_rule("hypot", _hypot, allow=("float",), kernel="hypot_cpu", suffixes=("", "_", "out"))
for _name, _ir in (("bitwise_and", "and"), ("bitwise_or", "or"), ("bitwise_xor", "xor")):
    _binary_rule(_name, _bitwise(_ir), allow=("bool", "int"), kernel=f"{_name}_cpu")


@lowering("aten::remainder.Scalar_Tensor", "aten::remainder.Scalar_Tensor_out",
          runtime=("self",))
def remainder_scalar_tensor(ctx, self, other, *, out=None):
    _pw(ctx, _remainder, [self, other], ["self", "other"], K.DEFAULT, out=out,
        allow=("int", "float"), kernel="remainder_cpu")


for _name, _ir in (("bitwise_and", "and"), ("bitwise_or", "or"), ("bitwise_xor", "xor")):
    def _bitwise_scalar_tensor(ctx, self, other, *, out=None, _ir=_ir, _name=_name):
        _pw(ctx, _bitwise(_ir), [self, other], ["self", "other"], K.DEFAULT, out=out,
            allow=("bool", "int"), kernel=f"{_name}_cpu")

    lowering(f"aten::{_name}.Scalar_Tensor", f"aten::{_name}.Scalar_Tensor_out",
          runtime=("self",))(_bitwise_scalar_tensor)


@lowering("aten::xlogy.Tensor", "aten::xlogy_.Tensor", "aten::xlogy.OutTensor",
          "aten::xlogy.Scalar_Other", "aten::xlogy_.Scalar_Other", "aten::xlogy.OutScalar_Other",
          "aten::xlogy.Scalar_Self", "aten::xlogy.OutScalar_Self", runtime=("self", "other"))
def xlogy(ctx, self, other, *, out=None):
    _pw(ctx, _xlogy, [self, other], ["self", "other"], K.INT_TO_FLOAT, out=out)


def _float_sign_source(x):
    return (is_tensor(x) and x.dtype.is_floating_point) or isinstance(x, float)


@lowering(*_variants("copysign", "Tensor", "_.Tensor", "out", "Scalar", "_.Scalar", "Scalar_out"),
          runtime=("other",))
def copysign(ctx, self, other, *, out=None):
    if _float_sign_source(other):
        # the sign of a NaN divisor is not observable without a bitcast
        raise NotLowerable("copysign with a float sign source needs a bitcast (the sign of NaN)")

    def f(c, a, b):
        neg = c.compare("lt", b, _c(c, 0, b))
        mag = c.unary("abs", a)
        return c.select(neg, c.unary("negate", mag), mag)

    _pw(ctx, f, [self, other], ["self", "other"], K.INT_TO_FLOAT, out=out)


# ---------------------------------------------------------- comparisons

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _binary_rule(_name, lambda c, a, b, _d=_name: c.compare(_d, a, b), K.ALWAYS_BOOL)


def _logical_rule(name, ir):
    """Logical ops test each operand against zero in its own dtype (there is
    no common computation dtype)."""
    def rule(ctx, self, other, *, out=None):
        into = _start(ctx, [self, other], out, K.ALWAYS_BOOL)
        m = _meta(ctx)
        shape = tuple(m.shape)
        a = ctx.broadcast(_nonzero(ctx, ctx.operand(self, _natural(self), None, "self")), shape)
        b = ctx.broadcast(_nonzero(ctx, ctx.operand(other, _natural(other), None, "other")), shape)
        r = ctx.op(ir, a, b)
        if into is not None:
            ctx.output_into(r, into)
        else:
            ctx.output(r, like=m)

    lowering(*_variants(name, "", "_", "out"))(rule)


def _natural(x):
    """The dtype a tensor or Python number is read in."""
    if is_tensor(x):
        return x.dtype
    if isinstance(x, bool):
        return torch.bool
    return torch.int64 if isinstance(x, int) else torch.float64


_logical_rule("logical_and", "and")
_logical_rule("logical_or", "or")
_logical_rule("logical_xor", "xor")


# ---------------------------------------------------------------- pow

def _pow_scalar_exponent(c, x, e):
    """x ** e for a runtime scalar exponent, with the CPU kernel's fast paths
    (sqrt, rsqrt, reciprocal, x*x, x*x*x, 1/(x*x)) chosen at run time, so
    their signed zeros, infinities and roundings match."""
    r = c.binary("power", x, e)
    if not x.dtype.is_floating_point:
        return r
    one = _c(c, 1, x)
    sq = _mul(c, x, x)
    cases = ((2.0, sq), (3.0, _mul(c, sq, x)), (-2.0, _div(c, one, sq)),
             (-1.0, _div(c, one, x)), (-0.5, c.unary("rsqrt", x)), (0.5, c.unary("sqrt", x)),
             (1.0, x), (0.0, one))
    for k, v in cases:
        r = c.select(c.compare("eq", e, _c(c, k, e)), v, r)
    return r


@lowering("aten::pow.Tensor_Scalar", "aten::pow_.Scalar", "aten::pow.Tensor_Scalar_out",
          runtime=("exponent",))
def pow_tensor_scalar(ctx, self, exponent, *, out=None):
    if isinstance(exponent, complex):
        raise NotLowerable("complex exponent")
    _, result = elementwise_dtypes(self, exponent, type_promotion_kind=K.BOOL_TO_LONG)

    def f(c, x, e):
        if result in (torch.bfloat16, torch.float16):
            # the CPU kernel rounds the exponent to the tensor's dtype
            e = c.convert(c.convert(e, result), x.dtype)
        if result == torch.float16:
            return c.binary("power", x, e)    # no fast paths for half on CPU
        return _pow_scalar_exponent(c, x, e)

    _pw(ctx, f, [self, exponent], ["self", "exponent"], K.BOOL_TO_LONG, out=out)


def _pow_tensor(ctx, self, exponent, out):
    if is_tensor(self) and is_tensor(exponent) and self.dtype == torch.bool \
            and exponent.dtype == torch.bool:
        _check_supported("pow", torch.bool, ())
    _pw(ctx, lambda c, a, b: c.binary("power", a, b), [self, exponent], ["self", "exponent"],
        K.BOOL_TO_LONG, out=out)


@lowering("aten::pow.Tensor_Tensor", "aten::pow_.Tensor", "aten::pow.Tensor_Tensor_out")
def pow_tensor_tensor(ctx, self, exponent, *, out=None):
    _pow_tensor(ctx, self, exponent, out)


@lowering("aten::pow.Scalar", "aten::pow.Scalar_out", runtime=("self",))
def pow_scalar(ctx, self, exponent, *, out=None):
    if isinstance(self, complex):
        raise NotLowerable("complex base")
    _pow_tensor(ctx, self, exponent, out)


# ------------------------------------------------------- clamp family

def _clamp_lo(c, x, lo):
    # maximum(lo, x) returns x when they compare equal (-0.0 vs 0.0), as
    # PyTorch's clamp does; NaN in either propagates
    return c.binary("maximum", lo, x)


def _clamp_hi(c, x, hi):
    return c.binary("minimum", hi, x)


def _clamp_fn(has_min, has_max):
    def f(c, x, *bounds):
        bounds = list(bounds)
        if has_min:
            x = _clamp_lo(c, x, bounds.pop(0))
        if has_max:
            x = _clamp_hi(c, x, bounds.pop(0))
        return x
    return f


def _clamp(ctx, self, min, max, out, allow=None, kernel=None):
    inputs, names = [self], ["self"]
    if min is not None:
        inputs.append(min)
        names.append("min")
    if max is not None:
        inputs.append(max)
        names.append("max")
    if min is None and max is None:
        ctx.meta()   # PyTorch's error: at least one of min and max
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    _pw(ctx, _clamp_fn(min is not None, max is not None), inputs, names, K.DEFAULT, out=out,
        allow=allow, kernel=kernel)


@lowering("aten::clamp", "aten::clamp_", "aten::clamp.out", "aten::clamp.Tensor",
          "aten::clamp_.Tensor", "aten::clamp.Tensor_out", runtime=("min", "max"))
def clamp(ctx, self, min=None, max=None, *, out=None):
    _clamp(ctx, self, min, max, out)


@lowering("aten::clamp_min", "aten::clamp_min_", "aten::clamp_min.out", "aten::clamp_min.Tensor",
          "aten::clamp_min_.Tensor", "aten::clamp_min.Tensor_out", runtime=("min",))
def clamp_min(ctx, self, min, *, out=None):
    _clamp(ctx, self, min, None, out)


@lowering("aten::clamp_max", "aten::clamp_max_", "aten::clamp_max.out", "aten::clamp_max.Tensor",
          "aten::clamp_max_.Tensor", "aten::clamp_max.Tensor_out", runtime=("max",))
def clamp_max(ctx, self, max, *, out=None):
    _clamp(ctx, self, None, max, out)


@lowering("aten::hardtanh", "aten::hardtanh_", "aten::hardtanh.out",
          runtime=("min_val", "max_val"))
def hardtanh(ctx, self, min_val=-1, max_val=1, *, out=None):
    if self.dtype == torch.bool:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    if self.dtype == torch.uint8:
        raise NotLowerable("hardtanh of uint8 checks the sign of its limits")
    _check_dtypes(self)

    def f(c, x):
        # integer inputs: the limits are truncated to integers, no promotion
        lo = c.operand(min_val, x.dtype, x.shape, "min_val")
        hi = c.operand(max_val, x.dtype, x.shape, "max_val")
        return _clamp_hi(c, _clamp_lo(c, x, lo), hi)

    _pw(ctx, f, [self], ["self"], K.DEFAULT, out=out)


@lowering("aten::hardtanh_backward", "aten::hardtanh_backward.grad_input",
          runtime=("min_val", "max_val"))
def hardtanh_backward(ctx, grad_output, self, min_val, max_val, *, grad_input=None):
    dtype = _meta(ctx).dtype

    def f(c, g, x):
        # the limits in the tensor's dtype, as the CPU kernel compares them
        lo = _round_to(c, c.operand(min_val, x.dtype, x.shape, "min_val"), dtype)
        hi = _round_to(c, c.operand(max_val, x.dtype, x.shape, "max_val"), dtype)
        # as the vectorized CPU kernel: NaN gives 0
        live = c.op("and", c.compare("gt", x, lo), c.compare("lt", x, hi))
        return c.select(live, g, _c(c, 0, g))

    _pw(ctx, f, [grad_output, self], ["grad_output", "self"], K.DEFAULT, out=grad_input)


# ------------------------------------------------------------ activations

_FLOAT = ("float",)


def _activation(names, kernel, fn_of_scalars, runtime=()):
    """Unary activation on floats with runtime scalar parameters."""
    def rule(ctx, self, *args, out=None, **kw):
        def f(c, x):
            return fn_of_scalars(c, x, *args, **kw)
        _pw(ctx, f, [self], ["self"], K.DEFAULT, out=out, allow=_FLOAT, kernel=kernel)

    lowering(*names, runtime=runtime)(rule)


def _scalar(c, value, like, name):
    return c.operand(value, like.dtype, like.shape, name)


def _leaky_relu(c, x, negative_slope=0.01):
    s = _scalar(c, negative_slope, x, "negative_slope")
    return c.select(c.compare("gt", x, _c(c, 0, x)), x, _mul(c, x, s))


def _elu(c, x, alpha=1, scale=1, input_scale=1):
    a = _scalar(c, alpha, x, "alpha")
    s = _scalar(c, scale, x, "scale")
    i = _scalar(c, input_scale, x, "input_scale")
    neg = _mul(c, c.unary("exponential_minus_one", _mul(c, x, i)), _mul(c, a, s))
    return c.select(c.compare("le", x, _c(c, 0, x)), neg, _mul(c, x, s))


_SQRT1_2 = 0.70710678118654752440
_GELU_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5
_GELU_KAPPA = 0.044715


def _gelu(c, x, approximate="none"):
    half, one = _c(c, 0.5, x), _c(c, 1, x)
    if approximate == "tanh":
        inner = _mul(c, _c(c, _GELU_BETA, x),
                     _add(c, x, _mul(c, _c(c, _GELU_KAPPA, x), _mul(c, _mul(c, x, x), x))))
        return _mul(c, _mul(c, half, x), _add(c, one, c.unary("tanh", inner)))
    if approximate != "none":
        raise RuntimeError("approximate argument must be either none or tanh.")
    cdf = _add(c, one, c.unary("erf", _mul(c, x, _c(c, _SQRT1_2, x))))
    return _mul(c, _mul(c, x, half), cdf)


def _silu(c, x):
    one = _c(c, 1, x)
    return _div(c, x, _add(c, one, c.unary("exponential", c.unary("negate", x))))


def _softplus(c, x, beta=1, threshold=20):
    b = _scalar(c, beta, x, "beta")
    t = _scalar(c, threshold, x, "threshold")
    xb = _mul(c, x, b)
    soft = _div(c, _softplus1(c, xb), b)
    return c.select(c.compare("gt", xb, t), x, soft)


def _hardsigmoid(c, x):
    r = c.binary("minimum", c.binary("maximum", _add(c, x, _c(c, 3, x)), _c(c, 0, x)),
                 _c(c, 6, x))
    return _div(c, r, _c(c, 6, x))


def _hardswish(c, x):
    r = c.binary("minimum", c.binary("maximum", _add(c, x, _c(c, 3, x)), _c(c, 0, x)),
                 _c(c, 6, x))
    return _div(c, _mul(c, x, r), _c(c, 6, x))


def _mish(c, x):
    return _mul(c, x, c.unary("tanh", _softplus1(c, x)))


_activation(_variants("leaky_relu", "", "_", "out"), "leaky_relu_cpu", _leaky_relu,
            runtime=("negative_slope",))
_activation(_variants("elu", "", "_", "out"), "elu_cpu", _elu,
            runtime=("alpha", "scale", "input_scale"))
_activation(_variants("gelu", "", "_", "out"), "GeluKernelImpl", _gelu)
_activation(_variants("silu", "", "_", "out"), "silu_cpu", _silu)
_activation(_variants("softplus", "", "out"), "softplus_cpu", _softplus,
            runtime=("beta", "threshold"))
_activation(_variants("hardsigmoid", "", "_", "out"), "hardsigmoid_cpu", _hardsigmoid)
_activation(_variants("hardswish", "", "_", "out"), "hardswish_cpu", _hardswish)
_activation(_variants("mish", "", "_", "out"), "mish_cpu", _mish)


@lowering("aten::logit", "aten::logit_", "aten::logit.out", runtime=("eps",))
def logit(ctx, self, eps=None, *, out=None):
    dtype = _meta(ctx).dtype

    def f(c, x):
        z = x
        if eps is not None:
            # eps and 1 - eps in the tensor's dtype, as the CPU kernel
            e = _round_to(c, _scalar(c, eps, x, "eps"), dtype)
            lo, hi = e, _round_to(c, _sub(c, _c(c, 1, x), e), dtype)
            clamped = c.select(c.compare("lt", x, lo), lo, c.select(c.compare("gt", x, hi), hi, x))
            # a negative eps means no clamping
            z = c.select(c.compare("lt", e, _c(c, 0, x)), x, clamped)
        return c.unary("log", _div(c, z, _sub(c, _c(c, 1, x), z)))

    _pw(ctx, f, [self], ["self"], K.INT_TO_FLOAT, out=out)


# ------------------------------------------------------------ backwards

def _backward(names, fn, second="self", runtime=(), allow=None, kernel=None, dtype=False):
    """A backward op (grad_output, self or output, *scalars). dtype: fn also
    gets the result dtype (for Scalars the CPU kernel rounds to it)."""
    def rule(ctx, grad_output, other, *args, grad_input=None, out=None, **kw):
        if dtype:
            kw["dtype"] = _meta(ctx).dtype

        def f(c, g, x):
            return fn(c, g, x, *args, **kw)
        _pw(ctx, f, [grad_output, other], ["grad_output", second], K.DEFAULT,
            out=grad_input if grad_input is not None else out, allow=allow, kernel=kernel)

    lowering(*names, runtime=runtime)(rule)


def _sigmoid_backward(c, g, y):
    return _mul(c, _mul(c, g, _sub(c, _c(c, 1, y), y)), y)


def _tanh_backward(c, g, y):
    return _mul(c, g, _sub(c, _c(c, 1, y), _mul(c, y, y)))


def _gelu_backward(c, g, x, approximate="none"):
    half, one = _c(c, 0.5, x), _c(c, 1, x)
    if approximate == "tanh":
        x_sq = _mul(c, x, x)
        inner = _mul(c, _c(c, _GELU_BETA, x), _add(c, x, _mul(c, _c(c, _GELU_KAPPA, x),
                                                               _mul(c, x_sq, x))))
        t = c.unary("tanh", inner)
        left = _mul(c, half, x)
        right = _add(c, one, t)
        left_d = _mul(c, half, right)
        tanh_d = _sub(c, one, _mul(c, t, t))
        inner_d = _mul(c, _c(c, _GELU_BETA, x),
                       _add(c, one, _mul(c, _c(c, 3 * _GELU_KAPPA, x), x_sq)))
        right_d = _mul(c, _mul(c, left, tanh_d), inner_d)
        return _mul(c, g, _add(c, left_d, right_d))
    if approximate != "none":
        raise RuntimeError("approximate argument must be either none or tanh.")
    alpha = (2.0 / math.sqrt(math.pi)) * _SQRT1_2 * 0.5
    cdf = _mul(c, half, _add(c, one, c.unary("erf", _mul(c, x, _c(c, _SQRT1_2, x)))))
    pdf = _mul(c, _c(c, alpha, x),
               c.unary("exponential", _mul(c, _mul(c, x, x), _c(c, -0.5, x))))
    return _mul(c, g, _add(c, cdf, _mul(c, x, pdf)))


def _silu_backward(c, g, x):
    one = _c(c, 1, x)
    s = _sigmoid_div(c, x)
    return _mul(c, _mul(c, g, s), _add(c, one, _mul(c, x, _sub(c, one, s))))


def _mish_backward(c, g, x):
    one = _c(c, 1, x)
    s = _sigmoid_div(c, x)
    t = c.unary("tanh", _softplus1(c, x))
    return _mul(c, g, _add(c, t, _mul(c, _mul(c, x, s), _sub(c, one, _mul(c, t, t)))))


@lowering("aten::elu_backward", "aten::elu_backward.grad_input",
          runtime=("alpha", "scale", "input_scale"))
def elu_backward(ctx, grad_output, alpha, scale, input_scale, is_result, self_or_result, *,
                 grad_input=None):
    def f(c, g, x):
        a = _scalar(c, alpha, x, "alpha")
        s = _scalar(c, scale, x, "scale")
        i = _scalar(c, input_scale, x, "input_scale")
        negcoef = _mul(c, a, s)
        if is_result:
            neg = _mul(c, _mul(c, g, i), _add(c, x, negcoef))
        else:
            neg = _mul(c, _mul(c, _mul(c, g, i), negcoef),
                       c.unary("exponential", _mul(c, x, i)))
        # the vectorized CPU kernel tests x > 0: NaN takes the negative branch
        return c.select(c.compare("gt", x, _c(c, 0, x)), _mul(c, g, s), neg)

    _pw(ctx, f, [grad_output, self_or_result], ["grad_output", "self_or_result"], K.DEFAULT,
        out=grad_input, allow=_FLOAT, kernel="elu_backward_cpu")


def _leaky_relu_backward(c, g, x, negative_slope, self_is_result):
    s = _scalar(c, negative_slope, x, "negative_slope")
    return c.select(c.compare("gt", x, _c(c, 0, x)), g, _mul(c, g, s))


def _softplus_backward(c, g, x, beta, threshold):
    b = _scalar(c, beta, x, "beta")
    t = _scalar(c, threshold, x, "threshold")
    xb = _mul(c, x, b)
    z = c.unary("exponential", xb)
    soft = _div(c, _mul(c, g, z), _add(c, z, _c(c, 1, z)))
    return c.select(c.compare("gt", xb, t), g, soft)


def _hardsigmoid_backward(c, g, x):
    live = c.op("and", c.compare("gt", x, _c(c, -3, x)), c.compare("lt", x, _c(c, 3, x)))
    return c.select(live, _mul(c, g, _c(c, 1.0 / 6.0, g)), _c(c, 0, g))


def _hardswish_backward(c, g, x):
    # the vectorized CPU kernel: 0 for x <= -3, grad for x >= 3, NaN -> NaN
    mid = _mul(c, g, _add(c, _div(c, x, _c(c, 3, x)), _c(c, 0.5, x)))
    r = c.select(c.compare("ge", x, _c(c, 3, x)), g, mid)
    return c.select(c.compare("le", x, _c(c, -3, x)), _c(c, 0, g), r)


def _logit_backward(c, g, x, eps=None, dtype=None):
    # as the vectorized CPU kernel: NaN x gives NaN without eps, 0 with it
    one, zero = _c(c, 1, x), _c(c, 0, x)
    d = _div(c, g, _mul(c, x, _sub(c, one, x)))
    inside = c.op("and", c.compare("ge", x, zero), c.compare("le", x, one))
    no_eps = c.select(inside, d, _c(c, math.nan, x))
    if eps is None:
        return no_eps
    e = _round_to(c, _scalar(c, eps, x, "eps"), dtype)
    hi = _round_to(c, _sub(c, one, e), dtype)
    inside_eps = c.op("and", c.compare("ge", x, e), c.compare("le", x, hi))
    with_eps = c.select(inside_eps, d, zero)
    return c.select(c.compare("lt", e, zero), no_eps, with_eps)


_backward(_variants("sigmoid_backward", "", "grad_input"), _sigmoid_backward, "output")
_backward(_variants("tanh_backward", "", "grad_input"), _tanh_backward, "output")
_backward(_variants("gelu_backward", "", "grad_input"), _gelu_backward, allow=_FLOAT,
          kernel="GeluBackwardKernelImpl")
_backward(_variants("silu_backward", "", "grad_input"), _silu_backward, allow=_FLOAT,
          kernel="silu_backward_cpu")
_backward(_variants("mish_backward", ""), _mish_backward, allow=_FLOAT,
          kernel="mish_backward_cpu")
_backward(_variants("leaky_relu_backward", "", "grad_input"), _leaky_relu_backward,
          runtime=("negative_slope",), allow=_FLOAT, kernel="leaky_relu_backward_cpu")
_backward(_variants("softplus_backward", "", "grad_input"), _softplus_backward,
          runtime=("beta", "threshold"), allow=_FLOAT, kernel="softplus_backward_cpu")
_backward(_variants("hardsigmoid_backward", "", "grad_input"), _hardsigmoid_backward,
          allow=_FLOAT, kernel="hardsigmoid_backward")
_backward(_variants("hardswish_backward", "", "out"), _hardswish_backward, allow=_FLOAT,
          kernel="hardswish_backward")
_backward(_variants("logit_backward", "", "grad_input"), _logit_backward, runtime=("eps",),
          dtype=True)


# ------------------------------------------------------ select and mix

@lowering("aten::where.self", "aten::where.self_out")
def where(ctx, condition, self, other, *, out=None):
    if condition.dtype != torch.bool:
        # uint8 is deprecated but accepted (with a warning) by the CPU kernel
        raise NotLowerable(f"where with a {condition.dtype} condition")

    def f(c, a, b):
        p = c.broadcast(c.input(condition, "condition"), a.shape)
        return c.select(p, a, b)

    _pw(ctx, f, [self, other], ["self", "other"], K.DEFAULT, out=out)


@lowering("aten::masked_fill.Scalar", "aten::masked_fill_.Scalar", "aten::masked_fill.Scalar_out",
          "aten::masked_fill.Tensor", "aten::masked_fill_.Tensor", "aten::masked_fill.Tensor_out",
          runtime=("value",))
def masked_fill(ctx, self, mask, value, *, out=None):
    into = _start(ctx, [self, value], out, None)
    m = _meta(ctx)
    shape = tuple(m.shape)
    x = ctx.broadcast(ctx.input(self, "self"), shape)
    p = ctx.broadcast(ctx.input(mask, "mask"), shape)
    # the value as given, then cast like value.to<scalar_t>()
    v = ctx.operand(value, _natural(value), None, "value")
    v = ctx.broadcast(ctx.convert(v, self.dtype), shape)
    r = ctx.select(p, v, x)
    if into is not None:
        ctx.output_into(r, into)
    else:
        ctx.output(r, like=m)


def _lerp(c, a, b, w):
    """PyTorch's vectorized lerp: fma(w, end - self, self) for |w| < 0.5,
    else fma(w - 1, end - self, end). The fused multiply-add is exact in
    float64 for float32 operands (one rounding of the sum)."""
    diff = _sub(c, b, a)
    small = c.compare("lt", c.unary("abs", w), _c(c, 0.5, w))
    coeff = c.select(small, w, _sub(c, w, _c(c, 1, w)))
    base = c.select(small, a, b)
    if a.dtype == torch.float32:
        wide = [c.convert(v, torch.float64) for v in (coeff, diff, base)]
        return c.convert(_add(c, _mul(c, wide[0], wide[1]), wide[2]), torch.float32)
    return _add(c, _mul(c, coeff, diff), base)


@lowering("aten::lerp.Scalar", "aten::lerp_.Scalar", "aten::lerp.Scalar_out", runtime=("weight",))
def lerp_scalar(ctx, self, end, weight, *, out=None):
    def f(c, a, b):
        return _lerp(c, a, b, _scalar(c, weight, a, "weight"))

    _pw(ctx, f, [self, end], ["self", "end"], K.DEFAULT, out=out, allow=_FLOAT,
        kernel="lerp_kernel_scalar")


@lowering("aten::lerp.Tensor", "aten::lerp_.Tensor", "aten::lerp.Tensor_out")
def lerp_tensor(ctx, self, end, weight, *, out=None):
    _pw(ctx, _lerp, [self, end, weight], ["self", "end", "weight"], K.DEFAULT, out=out,
        allow=_FLOAT, kernel="lerp_kernel_tensor")


@lowering("aten::addcmul", "aten::addcmul_", "aten::addcmul.out", runtime=("value",))
def addcmul(ctx, self, tensor1, tensor2, *, value=1, out=None):
    def f(c, s, t1, t2):
        v = _scalar(c, value, s, "value")
        return _add(c, s, _mul(c, _mul(c, v, t1), t2))

    _pw(ctx, f, [self, tensor1, tensor2], ["self", "tensor1", "tensor2"], K.DEFAULT, out=out,
        allow=("int", "float"), kernel="addcmul_cpu_out")


@lowering("aten::addcdiv", "aten::addcdiv_", "aten::addcdiv.out", runtime=("value",))
def addcdiv(ctx, self, tensor1, tensor2, *, value=1, out=None):
    if not tensor1.dtype.is_floating_point and not tensor2.dtype.is_floating_point:
        ctx.meta()
        raise RuntimeError(
            "Integer division with addcdiv is no longer supported, and in a future  release "
            "addcdiv will perform a true division of tensor1 and tensor2. The historic "
            "addcdiv behavior can be implemented as (input + value * torch.trunc(tensor1 / "
            "tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / "
            "tensor2) for float inputs. The future addcdiv behavior is just the latter "
            "implementation: (input + value * tensor1 / tensor2), for all dtypes.")

    def f(c, s, t1, t2):
        v = _scalar(c, value, s, "value")
        return _add(c, s, _div(c, _mul(c, v, t1), t2))

    _pw(ctx, f, [self, tensor1, tensor2], ["self", "tensor1", "tensor2"], K.DEFAULT, out=out)

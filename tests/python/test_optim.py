"""Optimizer ops on tpu: the _foreach_* family and the fused Adam/AdamW/SGD
steps against PyTorch CPU, one graph per call, with learning rates and
other scalars as runtime operands (no recompiles when they change)."""
import warnings

import pytest
import torch

import torchtpu
from torchtpu import _C


def _compiles():
    return _C.stats()["compiles"]


def _lists(shapes, dtype=torch.float32, seed=0, positive=False, noncontig=True):
    """CPU tensors of the given shapes; the last one non-contiguous."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, s in enumerate(shapes):
        if noncontig and i == len(shapes) - 1 and len(s) == 2:
            t = torch.randn(s[1], s[0], generator=g).t()
        else:
            t = torch.randn(s, generator=g)
        if positive:
            t = t.abs() + 0.5
        out.append(t.to(dtype))
    return out


def _tpu(ts):
    out = []
    for t in ts:
        d = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="tpu")
        d.copy_(t)
        out.append(d)
    return out


SHAPES = [(3, 4), (5,), (), (2, 3, 2), (4, 6)]


def _tol(dtype):
    return dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}


def _no_fallback():
    return {k: v for k, v in torchtpu.metrics.fallback_counts().items() if "_foreach" in k
            or "_fused" in k}


# (op name, argument builder(list factory) -> args after self, positive inputs)
def _scalar_cases():
    return [
        ("_foreach_add", lambda L: (L(1),), {"alpha": 0.3}),
        ("_foreach_add", lambda L: (1.25,), {}),
        ("_foreach_add", lambda L: ([0.5, -1.0, 2.0, 3.0, -0.25],), {}),
        ("_foreach_add", lambda L: (torch.tensor(0.75),), {"alpha": -2.0}),
        ("_foreach_sub", lambda L: (L(1),), {"alpha": 1.5}),
        ("_foreach_sub", lambda L: (0.5,), {}),
        ("_foreach_sub", lambda L: ([0.5, -1.0, 2.0, 3.0, -0.25],), {}),
        ("_foreach_mul", lambda L: (L(1),), {}),
        ("_foreach_mul", lambda L: (0.9,), {}),
        ("_foreach_mul", lambda L: ([0.5, -1.0, 2.0, 3.0, -0.25],), {}),
        ("_foreach_mul", lambda L: (torch.tensor(3.0),), {}),
        ("_foreach_div", lambda L: (L(1, positive=True),), {}),
        ("_foreach_div", lambda L: (3.0,), {}),
        ("_foreach_div", lambda L: ([0.5, -1.0, 2.0, 3.0, -0.25],), {}),
        ("_foreach_maximum", lambda L: (L(1),), {}),
        ("_foreach_maximum", lambda L: (0.1,), {}),
        ("_foreach_minimum", lambda L: ([0.5, -1.0, 2.0, 3.0, -0.25],), {}),
        ("_foreach_clamp_min", lambda L: (-0.2,), {}),
        ("_foreach_clamp_max", lambda L: (L(1),), {}),
        ("_foreach_pow", lambda L: (2.5,), {}),
        ("_foreach_pow", lambda L: (L(1),), {}),
        ("_foreach_pow", lambda L: ([0.5, 1.0, 2.0, 3.0, -0.25],), {}),
        ("_foreach_addcmul", lambda L: (L(1), L(2)), {"value": -0.5}),
        ("_foreach_addcmul", lambda L: (L(1), L(2), [0.5, -1.0, 2.0, 3.0, -0.25]), {}),
        ("_foreach_addcdiv", lambda L: (L(1), L(2, positive=True)), {"value": 0.5}),
        ("_foreach_addcdiv", lambda L: (L(1), L(2, positive=True), [0.5, -1.0, 2, 3.0, 1]), {}),
        ("_foreach_lerp", lambda L: (L(1), 0.3), {}),
        ("_foreach_lerp", lambda L: (L(1), 0.8), {}),
        ("_foreach_lerp", lambda L: (L(1), [0.1, 0.9, 0.5, -1.0, 2.0]), {}),
        ("_foreach_lerp", lambda L: (L(1), L(2)), {}),
    ]


_UNARY = ["sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos",
          "tan", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "lgamma", "reciprocal",
          "neg", "abs", "sign", "ceil", "floor", "round", "trunc", "frac"]


def _run(name, inplace, args, kw, dtype, positive_self=False):
    """The op on CPU and on tpu; returns (cpu results, tpu results)."""
    xs = _lists(SHAPES, dtype, seed=0, positive=positive_self)

    def conv(a, dev):
        if isinstance(a, list) and a and isinstance(a[0], torch.Tensor):
            return [t.clone() for t in a] if dev == "cpu" else _tpu(a)
        if isinstance(a, torch.Tensor):
            return a.clone()       # a 0-dim CPU tensor works for both devices
        return a

    res = {}
    for dev in ("cpu", "tpu"):
        s = [t.clone() for t in xs] if dev == "cpu" else _tpu(xs)
        a = [conv(x, dev) for x in args]
        op = getattr(torch, name + ("_" if inplace else ""))
        r = op(s, *a, **kw)
        res[dev] = [t.cpu() for t in (s if inplace else r)]
    return res["cpu"], res["tpu"]


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(_scalar_cases())))
def test_foreach_binary_and_pointwise_match_cpu(case, dtype, inplace):
    name, build, kw = _scalar_cases()[case]

    def L(seed, positive=False):
        return _lists(SHAPES, dtype, seed=seed, positive=positive)

    args = build(L)
    torchtpu.metrics.reset()
    want, got = _run(name, inplace, args, kw, dtype, positive_self=name == "_foreach_pow")
    assert _no_fallback() == {}
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, equal_nan=True, **_tol(dtype))


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("op", _UNARY)
def test_foreach_unary_match_cpu(op, inplace):
    positive = op in ("sqrt", "rsqrt", "log", "log2", "log10", "log1p", "lgamma")
    torchtpu.metrics.reset()
    want, got = _run(f"_foreach_{op}", inplace, (), {}, torch.float32, positive_self=positive)
    assert _no_fallback() == {}
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-6, atol=1e-6)


def test_foreach_unary_special_values():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([nan, inf, -inf, -0.0, 0.0, -2.5, 2.5, 0.5, -0.5, 1.5, 1e-30, 3e38])
    for op in _UNARY:
        want = getattr(torch, f"_foreach_{op}")([x])[0]
        got = getattr(torch, f"_foreach_{op}")([x.to("tpu")])[0].cpu()
        torch.testing.assert_close(got, want, equal_nan=True, msg=op)
        m = ~want.isnan()
        assert torch.equal(got[m].signbit(), want[m].signbit()), op


def test_foreach_integer_lists_promote_like_cpu():
    xs = [torch.arange(6).reshape(2, 3), torch.tensor([5, -3])]
    torchtpu.metrics.reset()
    mixed = [torch.tensor([1.5, -2.5]), torch.tensor([3, -4])]
    for g, w in zip(torch._foreach_floor(_tpu(mixed)), torch._foreach_floor(mixed)):
        assert g.dtype == w.dtype and torch.equal(g.cpu(), w)
    for fn in (lambda s: torch._foreach_add(s, 3),
               lambda s: torch._foreach_div(s, 2),           # int / int -> float
               lambda s: torch._foreach_mul(s, 0.5),         # int * float -> float
               lambda s: torch._foreach_sqrt(s),
               lambda s: torch._foreach_floor(s),            # identity on integers
               lambda s: torch._foreach_sign(s)):
        want = fn([t.clone() for t in xs])
        got = fn(_tpu(xs))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g.cpu(), w, equal_nan=True)
    assert _no_fallback() == {}
    t = _tpu(xs)
    torch._foreach_add_(t, [2, -1])
    assert t[1].cpu().tolist() == [4, -4]
    with pytest.raises(RuntimeError):
        torch._foreach_sqrt_(_tpu(xs))      # float result into an int64 list


def test_foreach_runtime_scalars_do_not_recompile():
    xs, ys = _tpu(_lists(SHAPES)), _tpu(_lists(SHAPES, seed=1))
    torch._foreach_add_(xs, ys, alpha=0.5)
    torch._foreach_mul_(xs, 0.5)
    torch._foreach_addcdiv_(xs, ys, ys, [1.0] * len(SHAPES))
    torch._foreach_lerp_(xs, ys, 0.1)
    c0 = _compiles()
    ref = [t.cpu() for t in xs]
    refy = [t.cpu() for t in ys]
    for k in range(3):
        a = 0.1 * (k + 1)
        torch._foreach_add_(xs, ys, alpha=a)
        torch._foreach_mul_(xs, 1.0 + a)
        torch._foreach_addcdiv_(xs, ys, ys, [a * i for i in range(len(SHAPES))])
        torch._foreach_lerp_(xs, ys, a)
        torch._foreach_add_(ref, refy, alpha=a)
        torch._foreach_mul_(ref, 1.0 + a)
        torch._foreach_addcdiv_(ref, refy, refy, [a * i for i in range(len(SHAPES))])
        torch._foreach_lerp_(ref, refy, a)
    assert _compiles() == c0
    for g, w in zip(xs, ref):
        torch.testing.assert_close(g.cpu(), w)


def test_foreach_is_one_graph_per_call():
    xs, ys = _tpu(_lists(SHAPES)), _tpu(_lists(SHAPES, seed=1))
    before = torchtpu.metrics.op_counts()
    torch._foreach_addcmul_(xs, ys, ys, value=2.0)
    after = torchtpu.metrics.op_counts()
    diff = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
    assert diff == {"aten::_foreach_addcmul_.Scalar": 1}


def test_foreach_copy_zero_clone_max_norm():
    xs = _lists(SHAPES)
    ys = _lists(SHAPES, seed=1)
    t = _tpu(xs)
    torch._foreach_copy_(t, _tpu(ys))
    for g, w in zip(t, ys):
        assert torch.equal(g.cpu(), w)
    c = torch._foreach_clone(t)
    torch._foreach_zero_(t)
    for g, w, z in zip(c, ys, t):
        assert torch.equal(g.cpu(), w) and torch.equal(z.cpu(), torch.zeros_like(w))
    for g, w in zip(torch._foreach_max(_tpu(xs)), torch._foreach_max(xs)):
        assert torch.equal(g.cpu(), w)
    for ord in (2, 1, 0, float("inf"), 3.0):
        for g, w in zip(torch._foreach_norm(_tpu(xs), ord), torch._foreach_norm(xs, ord)):
            torch.testing.assert_close(g.cpu(), w)
    xb = [x.bfloat16() for x in xs]
    got = torch._foreach_norm(_tpu(xb), 2)
    for g, w in zip(got, torch._foreach_norm(xb, 2)):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.cpu(), w, **_tol(torch.bfloat16))
    for g, w in zip(torch._foreach_norm(_tpu(xb), 2, dtype=torch.float32),
                    torch._foreach_norm(xb, 2, dtype=torch.float32)):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.cpu(), w)


def test_foreach_copy_across_devices_and_dtypes():
    xs = _lists(SHAPES)
    t = _tpu([torch.zeros_like(x) for x in xs])
    torch._foreach_copy_(t, [x.clone() for x in xs])         # from the host
    for g, w in zip(t, xs):
        assert torch.equal(g.cpu(), w)
    h = [torch.zeros_like(x) for x in xs]
    torch._foreach_copy_(h, t)                                # to the host
    for g, w in zip(h, xs):
        assert torch.equal(g, w)
    b = _tpu([torch.zeros_like(x, dtype=torch.bfloat16) for x in xs])
    torch._foreach_copy_(b, t)                                # converting
    for g, w in zip(b, xs):
        assert torch.equal(g.cpu(), w.bfloat16())


def test_inplace_list_op_refuses_instead_of_dropping_the_update():
    """The CPU fallback does not write back mutated tensor lists, so an
    unsupported in-place foreach call raises rather than silently doing
    nothing."""
    t = _tpu([torch.arange(4), torch.arange(3)])
    with pytest.raises(RuntimeError, match="not supported on the tpu device"):
        torch._foreach_pow_(t, 2)


def test_clip_grad_norm_matches_cpu():
    ps = _lists(SHAPES)
    gs = _lists(SHAPES, seed=3)
    cpu = [p.clone().requires_grad_() for p in ps]
    tpu = [p.requires_grad_() for p in _tpu(ps)]
    for p, g in zip(cpu, gs):
        p.grad = g.clone()
    for p, g in zip(tpu, _tpu(gs)):
        p.grad = g
    nc = torch.nn.utils.clip_grad_norm_(cpu, 0.5)
    torchtpu.metrics.reset()
    nt = torch.nn.utils.clip_grad_norm_(tpu, 0.5)
    assert "aten::_foreach_norm.Scalar" in torchtpu.metrics.op_counts()
    assert _no_fallback() == {}
    torch.testing.assert_close(nt.cpu(), nc)
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad)


def test_long_lists():
    """In-place ops over many tensors are one graph; functional ones with
    more than 32 results run as a counted fallback (the C dispatcher
    returns at most 32 results) and are still correct."""
    xs = [torch.randn(3) for _ in range(40)]
    t = _tpu(xs)
    torchtpu.metrics.reset()
    torch._foreach_mul_(t, 2.0)
    assert _no_fallback() == {}
    for g, w in zip(t, xs):
        torch.testing.assert_close(g.cpu(), w * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = torch._foreach_neg(t)
    assert len(r) == 40
    assert torchtpu.metrics.fallback_counts().get("aten::_foreach_neg", 0) == 1
    for g, w in zip(r, xs):
        torch.testing.assert_close(g.cpu(), -2 * w)


# ------------------------------------------------------------- optimizers

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 3))


def _train(device, make_opt, steps=5, dtype=torch.float32):
    model = _mlp().to(dtype).to(device)
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(1)
    losses, compiles, fallbacks = [], [], {}
    for _ in range(steps):
        x = torch.randn(7, 5, generator=g).to(dtype).to(device)
        y = torch.randn(7, 3, generator=g).to(dtype).to(device)
        d = model(x) - y
        loss = (d * d).sum() / 7
        opt.zero_grad()
        loss.backward()
        before = torchtpu.metrics.fallback_counts()
        opt.step()
        for k, v in torchtpu.metrics.fallback_counts().items():
            if v != before.get(k, 0):
                fallbacks[k] = v - before.get(k, 0)
        for group in opt.param_groups:       # a schedule: lr changes every step
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].mul_(0.9)
            else:
                group["lr"] *= 0.9
        losses.append(loss.item())
        compiles.append(_compiles())
    params = [p.detach().float().cpu() for p in model.parameters()]
    return losses, params, compiles, fallbacks


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    "sgd_plain": lambda p: torch.optim.SGD(p, lr=0.1),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adam_wd": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2),
    "adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True),
    "adam_maximize": lambda p: torch.optim.Adam(p, lr=1e-2, maximize=True),
    # capturable (state on the device, no host syncs): CPU reference is not
    "adam_capturable": (lambda p: torch.optim.Adam(p, lr=1e-2, capturable=True),
                        lambda p: torch.optim.Adam(p, lr=1e-2)),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-1),
    "fused_adam": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, fused=True),
    "fused_adamw_amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, fused=True),
    "fused_sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2,
                                           fused=True),
    "fused_sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                    dampening=0, fused=True),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_cpu_without_fallback_or_recompiles(name):
    make = OPTIMIZERS[name]
    make_tpu, make_cpu = make if isinstance(make, tuple) else (make, make)
    lt, pt, ct, fb = _train("tpu", make_tpu)
    lc, pc, _, _ = _train("cpu", make_cpu)
    assert fb == {}
    for a, b in zip(lt, lc):
        assert abs(a - b) <= 1e-5 * abs(b), (lt, lc)
    for a, b in zip(pt, pc):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert ct[1] == ct[-1], f"recompiled after step 2: {ct}"


@pytest.mark.parametrize("name", ["adam", "fused_adamw_amsgrad", "sgd_momentum"])
def test_optimizer_bfloat16_params(name):
    lt, pt, _, fb = _train("tpu", OPTIMIZERS[name], steps=3, dtype=torch.bfloat16)
    lc, pc, _, _ = _train("cpu", OPTIMIZERS[name], steps=3, dtype=torch.bfloat16)
    assert fb == {}
    torch.testing.assert_close(torch.tensor(lt), torch.tensor(lc), rtol=2e-2, atol=1e-2)
    for a, b in zip(pt, pc):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def _adam_state(dtype=torch.float32, n=3, amsgrad=True):
    shapes = [(4, 3), (5,), (2, 2, 2)][:n]
    p = _lists(shapes, dtype, seed=0, noncontig=False)
    g = _lists(shapes, dtype, seed=1, noncontig=False)
    m = _lists(shapes, dtype, seed=2, noncontig=False)
    v = [t.abs() for t in _lists(shapes, dtype, seed=3, noncontig=False)]
    mx = [t.abs() * 1.5 for t in _lists(shapes, dtype, seed=4, noncontig=False)] if amsgrad else []
    steps = [torch.tensor(float(i + 3)) for i in range(n)]
    return [p, g, m, v, mx, steps]


@pytest.mark.parametrize("op", ["_fused_adam_", "_fused_adamw_"])
@pytest.mark.parametrize("found", [None, 0.0, 1.0])
@pytest.mark.parametrize("tensor_lr", [False, True])
def test_fused_adam_with_grad_scale_and_found_inf(op, found, tensor_lr):
    st = _adam_state()
    kw = dict(beta1=0.9, beta2=0.99, weight_decay=0.05, eps=1e-6, amsgrad=True, maximize=False)
    cpu = [[t.clone() for t in ts] for ts in st]
    tpu = [_tpu(ts) for ts in st]
    lr = 0.01

    def call(state, dev):
        extra = dict(grad_scale=torch.tensor(4.0, device=dev))
        if found is not None:
            extra["found_inf"] = torch.tensor(found, device=dev)
        this_lr = torch.tensor(lr, device=dev) if tensor_lr else lr
        getattr(torch, op)(*state, lr=this_lr, **kw, **extra)

    call(cpu, "cpu")
    call(tpu, "tpu")
    for ts_t, ts_c in zip(tpu, cpu):
        for a, b in zip(ts_t, ts_c):
            torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("found", [None, 1.0])
def test_fused_sgd_with_grad_scale(found):
    p, g, b = _lists([(4, 3), (5,)], seed=0), _lists([(4, 3), (5,)], seed=1), \
        _lists([(4, 3), (5,)], seed=2)
    kw = dict(weight_decay=0.1, momentum=0.9, lr=0.05, dampening=0.1, nesterov=True,
              maximize=True, is_first_step=False)
    cpu = [[t.clone() for t in ts] for ts in (p, g, b)]
    tpu = [_tpu(ts) for ts in (p, g, b)]
    for state, dev in ((cpu, "cpu"), (tpu, "tpu")):
        extra = dict(grad_scale=torch.tensor(2.0, device=dev))
        if found is not None:
            extra["found_inf"] = torch.tensor(found, device=dev)
        torch._fused_sgd_(*state, **kw, **extra)
    for ts_t, ts_c in zip(tpu, cpu):
        for a, b_ in zip(ts_t, ts_c):
            torch.testing.assert_close(a.cpu(), b_, rtol=1e-6, atol=1e-7)

"""Conformance runner: PyTorch's own OpInfo samples on the tpu device, against CPU.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``
and every requested dtype, each sample runs on the CPU and on the tpu (its
tensors moved there). Outputs are compared with ``torch.testing.assert_close``
(dtype, shape and values), and for float32 samples of differentiable ops the
gradients of ``sum(output * cotangent)`` are compared too.

Attribution: the tpu run happens under a TorchDispatchMode that records every
aten overload it dispatched and, by default, re-runs each of those overloads
on CPU copies of its tpu inputs (the per-op check), so a failing sample names
the first op whose own result diverged, not just "something in this sample".
CPU fallback counters (``torchtpu.metrics.fallback_counts()``) taken before and
after each dispatched op tell which of them ran through the fallback, and under
which overload (functional ``sort`` falls back as ``sort.values_stable``).

Process layout: the parent (this module's ``main``/``run``) imports no torch.
It starts worker processes (this file with ``--worker``) that stream one JSON
line per event; a worker that dies (segfault, abort) or hangs (watchdog) is
restarted after the offending OpInfo, and the sample is rerun once without
the dispatch mode to tell a real crash from one only the mode provokes. The
parent aggregates the records and writes docs/ops.md and the expected-failure
list. ``torch.testing._internal`` needs the ``expecttest`` package.

    python -m tests.opinfo.runner --out docs/ops.md --dtypes float32,bfloat16 \\
        --write-expected tests/opinfo/expected_failures.txt
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Tolerances. float32 uses assert_close's defaults (rtol 1.3e-6, atol 1e-5)
# with matmuls at HIGHEST precision; bfloat16 has 8 mantissa bits, so one
# rounding step is 2**-8 = 3.9e-3 relative and a few ops' worth of them must
# fit: rtol 1.6e-2 (assert_close's own bfloat16 rtol), atol 1e-2 for values
# near zero.
TOLERANCES = {
    "float32": (None, None),
    "bfloat16": (1.6e-2, 1e-2),
}
# A mismatch that passes at these is marked "near" (accumulation order or
# rounding, not a wrong formula). float32: the tolerance of PyTorch's own
# device-vs-CPU test (test_ops.py test_compare_cpu); bfloat16: about 6 ulp.
LOOSE = {"float32": (1e-3, 1e-3), "bfloat16": (5e-2, 5e-2)}
DEFAULT_DTYPES = "float32,bfloat16"
DEFAULT_TIME_BUDGET = 20.0      # seconds per (OpInfo, dtype)
DEFAULT_WATCHDOG = 180.0        # seconds without progress before a worker is killed
MSG_LEN = 240                   # failure messages are cut to this length
MAX_RESTARTS_WITHOUT_PROGRESS = 5


# ====================================================================== worker
# Everything between here and the parent section runs in the worker process.


def _short(msg, n=MSG_LEN):
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= n else msg[: n - 3] + "..."


def _seed_for(*parts):
    return zlib.crc32("/".join(str(p) for p in parts).encode()) & 0x7FFFFFFF


class _Worker:
    """Runs OpInfo samples and writes JSON lines to a file."""

    def __init__(self, args):
        import warnings

        warnings.simplefilter("ignore")
        import torch
        import torchtpu
        from torch.testing._internal.common_methods_invocations import op_db
        from torch.utils._python_dispatch import TorchDispatchMode

        self.torch = torch
        self.torchtpu = torchtpu
        self.op_db = op_db
        self.args = args
        self.out = open(args.jsonl, "a", buffering=1)
        # the op being dispatched now, for the parent to name if we crash
        self.op_file = open(args.jsonl + ".op", "w")
        self.dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
        self._Mode = _make_mode_class(torch, TorchDispatchMode)

    # -------------------------------------------------------------- output
    def trace_op(self, name):
        f = self.op_file
        f.seek(0)
        f.write(name.ljust(160)[:160])
        f.flush()

    def emit(self, **rec):
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()

    def meta(self):
        torch = self.torch
        core = []
        for name in torch._C._dispatch_get_all_op_names():
            ov = _resolve(torch, name)
            if ov is not None and torch.Tag.core in ov.tags:
                core.append(name)
        native = [name for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("aten::")
                  and torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")]
        self.emit(t="meta", torch=torch.__version__, registered=self.torchtpu.registered_ops(),
                  core=sorted(core), native=sorted(native), pid=os.getpid())

    # --------------------------------------------------------------- units
    def units(self):
        """(unit number, OpInfo, dtype) in a fixed order: op_db's, or with
        --ops the order of that list (a name matches an OpInfo's full name or
        its base name, which selects all its variants)."""
        if self.args.ops:
            chosen = {}
            for want in self.args.ops.split(","):
                for op in self.op_db:
                    if want in (_full_name(op), op.name):
                        chosen.setdefault(id(op), op)
            ops = list(chosen.values())
        else:
            ops = self.op_db
        n = 0
        for op in ops:
            for dtype in self.dtypes:
                yield n, op, dtype
                n += 1

    def run(self):
        if self.args.plain:
            # one sample, without the dispatch mode: does a crash need the mode?
            u, s = (int(x) for x in self.args.plain.split(":"))
            for n, op, dtype in self.units():
                if n == u:
                    self.args.max_samples_per_op = s + 1
                    self.args.time_budget = float("inf")
                    self.run_unit(n, op, dtype, s)
            self.emit(t="done")
            return
        self.meta()
        shard, nshards = (int(x) for x in self.args.shard.split("/"))
        start_u, start_s = (int(x) for x in self.args.resume.split(":"))
        for n, op, dtype in self.units():
            # both dtypes of an OpInfo go to the same shard
            if (n // len(self.dtypes)) % nshards != shard or n < start_u:
                continue
            self.run_unit(n, op, dtype, start_s if n == start_u else 0)
        self.emit(t="done")

    def run_unit(self, n, op, dtype, first_sample):
        torch = self.torch
        name = _full_name(op)
        dname = str(dtype).replace("torch.", "")
        base = dict(u=n, opinfo=name, dtype=dname)
        if self.args.deadline_at and time.time() > self.args.deadline_at and not self.args.plain:
            self.emit(t="unit", status="deadline", **base)
            return
        if not op.supports_dtype(dtype, "cpu"):
            self.emit(t="unit", status="dtype-unsupported", **base)
            return
        grad = bool(op.supports_autograd) and dtype == torch.float32
        torch.manual_seed(_seed_for(name, dname))
        try:
            gen = iter(op.sample_inputs("cpu", dtype, requires_grad=grad))
        except Exception as e:  # noqa: BLE001  (any generator failure: not applicable)
            self.emit(t="unit", status="no-samples", msg=_short(f"{type(e).__name__}: {e}"), **base)
            return
        self.emit(t="unit", status="run", **base)
        t0 = time.monotonic()
        limit = self.args.max_samples_per_op
        i = 0
        budget_hit = False
        while limit is None or i < limit:
            if time.monotonic() - t0 > self.args.time_budget:
                budget_hit = True
                break
            # Seeding before each draw makes sample i independent of what
            # earlier samples did with the RNG, so a restarted worker can
            # skip ahead and still see the same sample i.
            torch.manual_seed(_seed_for(name, dname, i))
            try:
                sample = next(gen)
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001
                self.emit(t="gen_error", msg=_short(f"{type(e).__name__}: {e}"), s=i, **base)
                break
            if i >= first_sample:
                self.trace_op("")
                self.emit(t="begin", s=i, **base)
                rec = self.run_sample(op, sample, dtype, grad, _seed_for(name, dname, i, "run"))
                self.emit(t="sample", s=i, **base, **rec)
            i += 1
        self.emit(t="unit_end", samples=i, budget_hit=budget_hit,
                  secs=round(time.monotonic() - t0, 3), **base)

    # -------------------------------------------------------------- sample
    def run_sample(self, op, sample, dtype, grad, seed):
        import warnings

        torch = self.torch
        dname = str(dtype).replace("torch.", "")
        rtol, atol = TOLERANCES.get(dname, (None, None))
        t0 = time.monotonic()
        rec = {"status": "pass", "ops": [], "fallback": {}}

        why = _unsupported_input(torch, sample)
        if why:
            rec.update(status="skip", msg=why)
            return rec

        # ---- CPU reference
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(seed)
            cpu_in, cpu_leaves, _ = _clone_sample(torch, sample, "cpu")
            cpu_mode = self._Mode(check=None)
            try:
                with cpu_mode:
                    cpu_out = op(cpu_in[0], *cpu_in[1], **cpu_in[2])
            except Exception as e:  # noqa: BLE001  (CPU can't run it: not applicable)
                rec.update(status="na", msg=_short(f"CPU: {type(e).__name__}: {e}"))
                return rec
            values = not (cpu_mode.random or "empty" in op.name)
            rec["values_compared"] = values
            cpu_grads = cots = None
            if grad and values:
                try:
                    proc = sample.output_process_fn_grad(cpu_out)
                    douts = _diff_outputs(torch, proc)
                    if douts and cpu_leaves:
                        g = torch.Generator().manual_seed(seed)
                        cots = [torch.randn(_real(torch, o).shape, generator=g).to(
                            _real(torch, o).dtype) for o in douts]
                        cpu_grads = _grads(torch, douts, cots, cpu_leaves)
                except Exception:  # noqa: BLE001  (no CPU backward: compare forward only)
                    cpu_grads = None

        # ---- tpu run
        loose = LOOSE.get(dname, LOOSE["float32"])
        err, mode, phase = self._tpu_attempt(op, sample, cpu_out, cpu_grads, cots, values,
                                             rtol, atol, loose, seed, keep_cpu_ints=False)
        if err is not None and "cpu" in str(err).lower() and "on tpu" in str(err).lower():
            # an index argument that PyTorch wants on the CPU (tensor_split):
            # retry with the integer arguments other than the input left there
            err2, mode2, phase2 = self._tpu_attempt(op, sample, cpu_out, cpu_grads, cots, values,
                                                    rtol, atol, loose, seed, keep_cpu_ints=True)
            if err2 is None or not isinstance(err2, type(err)) or str(err2) != str(err):
                err, mode, phase = err2, mode2, phase2
                rec["note"] = "integer index arguments kept on the CPU"
        if isinstance(err, _NothingOnTpu):
            rec.update(status="skip", msg="no tensor or device argument to place on the tpu")
            return rec
        if err is not None:
            kind = "mismatch" if isinstance(err, AssertionError) else "exception"
            culprit = None
            if kind == "exception":
                culprit = mode.raised[0] if mode.raised else (mode.ops[-1] if mode.ops else None)
            if mode.diverged:
                culprit = culprit or mode.diverged[0]
            ename = "AssertionError" if kind == "mismatch" else type(err).__name__
            rec.update(status="fail", kind=kind, phase=phase, culprit=culprit,
                       msg=_short(f"{ename}: {err}"))
            if getattr(err, "near", False):
                rec["kind"] = "near-mismatch"
        rec["ops"] = _unique(mode.ops)
        # {dispatched op: [fallback overloads that ran inside it]}; an op can
        # fall back under another name (functional sort -> sort.values_stable)
        rec["fallback"] = {k: sorted(v) for k, v in mode.fallbacks.items()}
        if mode.diverged:
            rec["diverged"] = list(mode.diverged)
        rec["secs"] = round(time.monotonic() - t0, 4)
        return rec


    def _tpu_attempt(self, op, sample, cpu_out, cpu_grads, cots, values, rtol, atol, loose,
                     seed, keep_cpu_ints):
        """Runs the sample on the tpu and compares; returns (error or None, mode, phase)."""
        import warnings

        torch = self.torch
        if self.args.plain:
            mode = _NoMode()
        else:
            mode = self._Mode(check=(rtol, atol) if self.args.op_check else None,
                              trace=self.trace_op)
        phase = "to-tpu"
        err = None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.manual_seed(seed)
                with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
                    tpu_in, tpu_leaves, moved = _clone_sample(torch, sample, "tpu",
                                                              keep_cpu_ints=keep_cpu_ints)
                    if not moved:
                        raise _NothingOnTpu()
                    phase = "forward"
                    with mode:
                        tpu_out = op(tpu_in[0], *tpu_in[1], **tpu_in[2])
                    try:
                        _graded(torch, tpu_out, cpu_out, rtol, atol, loose, values, "output")
                    except AssertionError:
                        # outputs defined up to sign or order (linalg) are compared after
                        # the OpInfo's own post-processing, as PyTorch's test_compare_cpu does
                        pa = sample.output_process_fn_grad(tpu_out)
                        pe = sample.output_process_fn_grad(cpu_out)
                        if pa is tpu_out:
                            raise
                        _graded(torch, pa, pe, rtol, atol, loose, values, "output")
                    if cpu_grads is not None:
                        phase = "backward"
                        mode.phase = "backward"
                        douts = _diff_outputs(torch, sample.output_process_fn_grad(tpu_out))
                        if len(douts) != len(cots):
                            raise AssertionError(
                                f"{len(douts)} differentiable outputs on tpu, {len(cots)} on CPU")
                        with mode:
                            tpu_grads = _grads(torch, douts, [c.to("tpu") for c in cots],
                                               tpu_leaves)
                        _graded(torch, list(tpu_grads), list(cpu_grads), rtol, atol, loose, True,
                                "grad")
                    torch.tpu.synchronize()
        except Exception as e:  # noqa: BLE001  (any tpu failure is recorded, never fatal)
            err = e
            try:
                torch.tpu.synchronize()   # drop a pending asynchronous error
            except Exception:  # noqa: BLE001
                pass
        return err, mode, phase


class _NothingOnTpu(Exception):
    """The sample has no tensor or device argument to put on the tpu."""


class _NoMode:
    """Stands in for the recording mode in --plain runs."""

    ops = ()
    raised = diverged = None
    fallbacks = {}
    phase = "forward"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _full_name(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _unique(xs):
    seen = {}
    for x in xs:
        seen.setdefault(x, None)
    return list(seen)


def _resolve(torch, name):
    """OpOverload for 'ns::name.overload', or None."""
    ns, _, rest = name.partition("::")
    base, _, ov = rest.partition(".")
    try:
        return getattr(getattr(getattr(torch.ops, ns), base), ov or "default")
    except Exception:  # noqa: BLE001
        return None


def _walk(x, fn):
    """Applies fn to every leaf of nested lists/tuples/dicts, rebuilding them."""
    if isinstance(x, dict):
        return {k: _walk(v, fn) for k, v in x.items()}
    if isinstance(x, list):
        return [_walk(v, fn) for v in x]
    if type(x) is tuple:   # not torch.Size or other tuple subclasses
        return tuple(_walk(v, fn) for v in x)
    return fn(x)


def _flat(x):
    """Leaves of nested lists/tuples (including torch.return_types)/dicts."""
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _flat(v)]
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _flat(v)]
    return [x]


def _unsupported_input(torch, sample):
    for t in _flat([sample.input, list(sample.args), dict(sample.kwargs)]):
        if isinstance(t, torch.Tensor):
            if t.layout != torch.strided:
                return f"input layout {t.layout} has no tpu storage"
            if t.is_quantized or t.is_nested:
                return "quantized or nested input has no tpu storage"
            if t.dtype in (torch.complex32,) or "float8" in str(t.dtype) or "bits" in str(t.dtype):
                return f"dtype {t.dtype} has no tpu storage"
    return None


def _clone_sample(torch, sample, device, keep_cpu_ints=False):
    """((input, args, kwargs), leaves, moved): fresh leaf tensors on device;
    arguments naming the CPU device ('cpu', torch.device('cpu')) are pointed at
    the target device. moved counts what was placed there. With keep_cpu_ints,
    integer tensors other than the input stay on the CPU."""
    leaves = []
    moved = [0]

    def move(x, keep_ints=False):
        if isinstance(x, torch.Tensor):
            if device == "cpu" or (keep_ints and not (x.is_floating_point() or x.is_complex())):
                y = x.detach().clone()
            else:
                y = x.detach().to(device)
                moved[0] += 1
            if x.requires_grad and (y.is_floating_point() or y.is_complex()):
                y.requires_grad_(True)
                leaves.append(y)
            return y
        if device != "cpu" and (
                (isinstance(x, torch.device) and x.type == "cpu") or
                (isinstance(x, str) and x == "cpu")):
            moved[0] += 1
            return torch.device(device) if isinstance(x, torch.device) else device
        return x

    def move_arg(x):
        return move(x, keep_cpu_ints)

    inp = _walk(sample.input, move)
    args = _walk(list(sample.args), move_arg)
    kwargs = _walk(dict(sample.kwargs), move_arg)
    return (inp, args, kwargs), leaves, moved[0]


def _real(torch, t):
    return torch.view_as_real(t) if t.is_complex() else t


def _diff_outputs(torch, out):
    return [o for o in _flat(out) if isinstance(o, torch.Tensor) and o.requires_grad
            and (o.is_floating_point() or o.is_complex())]


def _grads(torch, outs, cots, leaves):
    total = None
    for o, c in zip(outs, cots):
        term = (_real(torch, o) * c).sum()
        total = term if total is None else total + term
    return torch.autograd.grad(total, leaves, allow_unused=True)


class _Mismatch(AssertionError):
    """A comparison failure; near = it passes at the LOOSE tolerances."""

    def __init__(self, msg, near):
        super().__init__(msg)
        self.near = near


def _graded(torch, actual, expected, rtol, atol, loose, values, path):
    """_compare, and on failure whether the loose tolerances would pass."""
    try:
        _compare(torch, actual, expected, rtol, atol, values, path, device=True)
    except AssertionError as err:
        try:
            _compare(torch, actual, expected, loose[0], loose[1], values, path, device=True)
            near = True
        except AssertionError:
            near = False
        raise _Mismatch(str(err), near) from None


def _compare(torch, actual, expected, rtol, atol, values, path, device=False):
    """Raises AssertionError naming path when actual (tpu) differs from expected.
    With device, a tensor result must be on the tpu."""
    import math

    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{path}: tpu gave {type(actual).__name__}, CPU a tensor")
        if device and actual.device.type != "tpu" and expected.device.type == "cpu":
            raise AssertionError(f"{path}: tpu result is on {actual.device}, expected tpu")
        if actual.dtype != expected.dtype:
            raise AssertionError(f"{path}: dtype {actual.dtype} on tpu, {expected.dtype} on CPU")
        if actual.shape != expected.shape:
            raise AssertionError(
                f"{path}: shape {tuple(actual.shape)} on tpu, {tuple(expected.shape)} on CPU")
        if not values:
            return
        a = actual.detach().cpu()
        e = expected.detach()
        exact = not (e.is_floating_point() or e.is_complex())
        try:
            torch.testing.assert_close(a, e, rtol=0 if exact else rtol, atol=0 if exact else atol,
                                       equal_nan=True, check_device=False, check_layout=False)
        except AssertionError as err:
            raise AssertionError(f"{path}: {err}") from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"{path}: tpu gave {_describe(actual)}, CPU {_describe(expected)}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(torch, a, e, rtol, atol, values, f"{path}[{i}]", device)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            raise AssertionError(f"{path}: tpu gave {_describe(actual)}, CPU {_describe(expected)}")
        for k in expected:
            _compare(torch, actual[k], expected[k], rtol, atol, values, f"{path}[{k!r}]", device)
        return
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{path}: tpu gave {_describe(actual)}, CPU None")
        return
    if isinstance(actual, torch.Tensor):
        raise AssertionError(f"{path}: tpu gave a tensor, CPU {_describe(expected)}")
    if not values:
        return
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        if math.isnan(expected) and math.isnan(actual):
            return
        if not math.isclose(actual, expected, rel_tol=rtol or 1.3e-6, abs_tol=atol or 1e-5):
            raise AssertionError(f"{path}: {actual!r} on tpu, {expected!r} on CPU")
        return
    try:
        same = actual == expected
        same = bool(same)
    except Exception:  # noqa: BLE001  (not comparable: ignored)
        return
    if not same:
        raise AssertionError(f"{path}: {_short(repr(actual), 80)} on tpu, "
                             f"{_short(repr(expected), 80)} on CPU")


def _describe(x):
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of {len(x)}"
    return type(x).__name__


# Ops whose result depends on more than the values of their inputs: the
# per-op check skips them (random, uninitialized, or storage-level).
_UNCHECKED_PREFIXES = ("aten::empty", "aten::new_empty", "aten::resize", "aten::set_",
                       "aten::as_strided", "aten::_local_scalar_dense", "aten::record_stream")


def _make_mode_class(torch, TorchDispatchMode):
    from torch.utils._pytree import tree_map
    from torchtpu.metrics import fallback_counts

    def is_tpu(x):
        return isinstance(x, torch.Tensor) and x.device.type == "tpu"

    def to_cpu(x):
        if is_tpu(x):
            return x.detach().cpu()
        if isinstance(x, torch.device) and x.type == "tpu":
            return torch.device("cpu")
        return x

    def checkable(func, args, kwargs):
        name = func.name()
        if name.startswith(_UNCHECKED_PREFIXES):
            return False
        if torch.Tag.nondeterministic_seeded in func.tags:
            return False
        schema = func._schema
        # views: metadata only, and a CPU copy of the input loses its storage
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            return False
        found = []
        tree_map(lambda x: found.append(1) if is_tpu(x) else None, (list(args), dict(kwargs)))
        return bool(found)

    def written(func, args, kwargs):
        out = []
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                if i < len(args):
                    out.append((a.name, args[i]))
                elif a.name in kwargs:
                    out.append((a.name, kwargs[a.name]))
        return out

    class _Recorder(TorchDispatchMode):
        """Records the aten overloads dispatched while active; with check
        (rtol, atol) also runs each on CPU copies of its inputs and keeps the
        first op whose result differs (diverged) and the first that raised."""

        def __init__(self, check=None, trace=None):
            super().__init__()
            self.trace = trace      # called with each op name (crash attribution)
            self.ops = []
            self.check = check
            self.raised = None      # (op, message)
            self.diverged = None    # (op, message)
            self.random = False
            self.phase = "forward"
            self.fallbacks = {}     # dispatched op -> fallback overloads it ran

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.name()
            self.ops.append(name)
            if self.trace is not None:
                self.trace(name)
            if torch.Tag.nondeterministic_seeded in func.tags:
                self.random = True
            ref = None
            if self.check is not None and self.diverged is None:
                try:
                    if checkable(func, args, kwargs):
                        ref = tree_map(to_cpu, (list(args), dict(kwargs)))
                except Exception:  # noqa: BLE001  (copying inputs failed: no check)
                    ref = None
            fb0 = fallback_counts()
            try:
                out = func(*args, **kwargs)
            except Exception as e:
                if self.raised is None:
                    self.raised = (name, _short(f"{type(e).__name__}: {e}"))
                raise
            finally:
                fb1 = fallback_counts()
                if fb1 != fb0:
                    got = self.fallbacks.setdefault(name, set())
                    got.update(k for k, v in fb1.items() if v > fb0.get(k, 0))
            if ref is not None:
                self._check(func, name, out, args, kwargs, ref)
            return out

        def _check(self, func, name, out, args, kwargs, ref):
            rargs, rkwargs = ref
            try:
                rout = func(*rargs, **rkwargs)
            except Exception:  # noqa: BLE001  (CPU can't run it on these inputs)
                return
            rtol, atol = self.check
            try:
                _compare(torch, out, rout, rtol, atol, True, "result")
                for (argname, a), (_, r) in zip(written(func, args, kwargs),
                                                written(func, rargs, rkwargs)):
                    if is_tpu(a):
                        _compare(torch, a, r, rtol, atol, True, argname)
            except AssertionError as e:
                self.diverged = (name, _short(f"{self.phase}: {e}"))
            except Exception:  # noqa: BLE001  (e.g. reading the result back failed)
                pass

    return _Recorder


def worker_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--worker", action="store_true")
    p.add_argument("--jsonl", required=True)
    p.add_argument("--dtypes", default=DEFAULT_DTYPES)
    p.add_argument("--ops", default="")
    p.add_argument("--max-samples-per-op", type=int, default=None)
    p.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET)
    p.add_argument("--shard", default="0/1")
    p.add_argument("--resume", default="0:0")
    p.add_argument("--no-op-check", dest="op_check", action="store_false")
    p.add_argument("--plain", default="", help="U:S: run only that sample, without the mode")
    p.add_argument("--deadline-at", type=float, default=0.0,
                   help="wall-clock time (epoch s) after which no further OpInfo starts")
    args = p.parse_args(argv)
    _Worker(args).run()
    return 0


# ====================================================================== parent


class _Shard:
    """One worker process and its record file; restarts after a crash."""

    def __init__(self, idx, nshards, opts, workdir, env):
        self.idx, self.nshards, self.opts, self.env = idx, nshards, opts, env
        self.path = os.path.join(workdir, f"shard{idx}.jsonl")
        open(self.path, "w").close()
        self.resume = (0, 0)
        self.proc = None
        self.read_pos = 0
        self.records = []
        self.open_begin = None     # (u, s, opinfo, dtype) of the sample running now
        self.open_unit = None      # (u, opinfo, dtype)
        self.done = False
        self.last_progress = time.monotonic()
        self.failed_starts = 0
        self.crashes = 0
        self.error = None

    def _cmd(self, jsonl):
        o = self.opts
        cmd = [sys.executable, self.opts.worker_script, "--worker", "--jsonl", jsonl,
               "--dtypes", o.dtypes, "--time-budget", str(o.time_budget)]
        if o.ops:
            cmd += ["--ops", o.ops]
        if o.max_samples_per_op is not None:
            cmd += ["--max-samples-per-op", str(o.max_samples_per_op)]
        if not o.op_check:
            cmd.append("--no-op-check")
        if o.deadline_at:
            cmd += ["--deadline-at", repr(o.deadline_at)]
        return cmd

    def start(self):
        cmd = self._cmd(self.path) + ["--shard", f"{self.idx}/{self.nshards}",
                                      "--resume", f"{self.resume[0]}:{self.resume[1]}"]
        self.stderr = open(self.path + ".stderr", "a")
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self.stderr, stderr=self.stderr)
        self.progress_since_start = False
        self.last_progress = time.monotonic()

    def _plain_rerun(self, u, s):
        """Reruns sample (u, s) without the dispatch mode: (what happened,
        whether it crashed or hung again)."""
        path = self.path + ".plain.jsonl"
        open(path, "w").close()
        try:
            r = subprocess.run(self._cmd(path) + ["--plain", f"{u}:{s}"], cwd=REPO, env=self.env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=self.opts.watchdog + 30)
            rc = r.returncode
        except subprocess.TimeoutExpired:
            return "without the dispatch mode it hangs too", True
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.endswith("\n")]
        got = [x for x in recs if x["t"] == "sample"]
        if got:
            x = got[0]
            if x["status"] == "fail":
                return f"without the dispatch mode it fails ({x.get('msg', '')})", False
            return f"without the dispatch mode: {x['status']}", False
        if rc == 0:
            return "without the dispatch mode the sample was not reached", True
        return f"without the dispatch mode it crashes too ({_exit_reason(rc)})", True

    def poll(self):
        """Reads new records; handles exit and the watchdog. True when finished."""
        self._read()
        if self.done:
            self.proc.wait()
            return True
        rc = self.proc.poll()
        if rc is None:
            if time.monotonic() - self.last_progress > self.opts.watchdog:
                self.proc.kill()            # the worker this shard started
                self.proc.wait()
                self._read()
                self._after_death(f"no progress for {self.opts.watchdog:.0f} s (killed)", "timeout")
            return self.done
        self._read()
        if self.done:
            return True
        self._after_death(_exit_reason(rc), "crash")
        return self.done

    def _read(self):
        with open(self.path) as f:
            f.seek(self.read_pos)
            while True:
                line = f.readline()
                if not line or not line.endswith("\n"):
                    break
                self.read_pos = f.tell()
                rec = json.loads(line)
                self.records.append(rec)
                self.last_progress = time.monotonic()
                t = rec["t"]
                if t == "meta":
                    self.meta = rec
                elif t == "unit":
                    if rec["status"] == "run":
                        self.open_unit = (rec["u"], rec["opinfo"], rec["dtype"])
                        self.resume = (rec["u"], 0)
                    else:
                        self.open_unit = None
                        self.resume = (rec["u"] + 1, 0)
                elif t == "begin":
                    self.open_begin = (rec["u"], rec["s"], rec["opinfo"], rec["dtype"])
                elif t == "sample":
                    self.open_begin = None
                    self.resume = (rec["u"], rec["s"] + 1)
                    self.progress_since_start = True
                elif t == "unit_end":
                    self.open_unit = None
                    self.resume = (rec["u"] + 1, 0)
                    self.progress_since_start = True
                elif t == "done":
                    self.done = True

    def _after_death(self, reason, kind):
        if self.open_begin is not None:
            u, s, opinfo, dtype = self.open_begin
            culprit = None
            try:
                with open(self.path + ".op") as f:
                    culprit = f.read().strip() or None
            except OSError:
                pass
            plain, again = self._plain_rerun(u, s) if self.opts.plain_rerun else ("", True)
            if not again:
                # only the recording dispatch mode makes this sample crash: a
                # bug (user-visible with any TorchDispatchMode), but not one
                # that kills a plain eager program
                kind = "mode-crash"
            msg = f"worker {kind} ({reason}) in {culprit or '?'}" + (f"; {plain}" if plain else "")
            self.records.append(dict(t="sample", u=u, s=s, opinfo=opinfo, dtype=dtype,
                                     status="fail", kind=kind, phase="?", culprit=culprit,
                                     msg=_short(msg), ops=[culprit] if culprit else [],
                                     fallback={}))
            self.records.append(dict(t="unit_end", u=u, opinfo=opinfo, dtype=dtype,
                                     samples=s + 1, budget_hit=False, secs=0,
                                     aborted=f"{kind} at sample {s}"))
            self.resume = (u + 1, 0)
            self.crashes += 1
        elif self.open_unit is not None:
            u, opinfo, dtype = self.open_unit
            self.records.append(dict(t="unit_end", u=u, opinfo=opinfo, dtype=dtype, samples=0,
                                     budget_hit=False, secs=0,
                                     aborted=f"worker {kind} outside a sample: {reason}"))
            self.resume = (u + 1, 0)
            self.crashes += 1
        else:
            self.failed_starts += 1
            if self.failed_starts >= MAX_RESTARTS_WITHOUT_PROGRESS:
                tail = ""
                try:
                    with open(self.path + ".stderr") as f:
                        tail = f.read()[-2000:]
                except OSError:
                    pass
                self.error = f"worker {self.idx} failed to start ({reason}):\n{tail}"
                self.done = True
                return
            time.sleep(10)     # e.g. the C extension being rebuilt: try again
        self.open_begin = None
        self.open_unit = None
        self.start()


def _exit_reason(rc):
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _git(*args):
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _extension_is_stale():
    """True when python/torchtpu/_C*.so is older than a source file in csrc/."""
    pkg = os.path.join(REPO, "python", "torchtpu")
    exts = [os.path.join(pkg, f) for f in os.listdir(pkg) if f.startswith("_C") and
            f.endswith(".so")]
    if not exts:
        return False
    built = max(os.path.getmtime(f) for f in exts)
    newest = 0.0
    for root, _, files in os.walk(os.path.join(REPO, "csrc")):
        for f in files:
            if f.endswith((".c", ".h")):
                newest = max(newest, os.path.getmtime(os.path.join(root, f)))
    return newest > built


def _snapshot(workdir, env):
    """Copies python/torchtpu (with the built extension) and this file to
    workdir, so edits made while a long sweep runs don't mix into it. Retries
    while the tree does not import (someone is mid-edit or mid-rebuild)."""
    import shutil

    dst = os.path.join(workdir, "snapshot")
    for attempt in range(10):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(os.path.join(REPO, "python", "torchtpu"), os.path.join(dst, "torchtpu"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(os.path.abspath(__file__), os.path.join(dst, "opinfo_runner.py"))
        r = subprocess.run([sys.executable, "-c", "import torchtpu"], cwd=workdir,
                           env=dict(env, PYTHONPATH=dst), capture_output=True, text=True)
        if r.returncode == 0:
            return dst
        time.sleep(15)
    raise RuntimeError(f"python/torchtpu does not import:\n{r.stderr[-2000:]}")


def run(opts):
    """Runs the workers to completion and returns the aggregated Results."""
    import importlib.util

    if importlib.util.find_spec("expecttest") is None:
        raise RuntimeError("PyTorch's OpInfo database (torch.testing._internal) needs the "
                           "expecttest package: pip install expecttest")
    t0 = time.monotonic()
    env = dict(os.environ)
    env.setdefault("PYTHONWARNINGS", "ignore")
    if opts.jobs > 1:
        env.setdefault("TORCHTPU_NUM_THREADS", "1")
    workdir = tempfile.mkdtemp(prefix="opinfo-")
    head = _git("rev-parse", "--short", "HEAD")
    dirty = [line for line in _git("status", "--porcelain", "--", "python", "csrc").splitlines()
             if line.strip()]
    provenance = f"git {head or '?'}" + (f" + {len(dirty)} uncommitted file(s) in python/, csrc/"
                                         if dirty else "")
    if _extension_is_stale():
        provenance += " (the built C extension is older than csrc/: run `make build`)"
    opts.worker_script = os.path.abspath(__file__)
    opts.deadline_at = time.time() + opts.deadline if opts.deadline else 0.0
    if opts.snapshot:
        snap = _snapshot(workdir, env)
        opts.worker_script = os.path.join(snap, "opinfo_runner.py")
        env["PYTHONPATH"] = os.pathsep.join(x for x in (snap, env.get("PYTHONPATH")) if x)
        provenance += ", run on a snapshot of python/torchtpu taken at the start"
    shards = [_Shard(i, opts.jobs, opts, workdir, env) for i in range(opts.jobs)]
    for s in shards:
        s.start()
    pending = list(shards)
    last_note = time.monotonic()
    try:
        while pending:
            time.sleep(0.2)
            pending = [s for s in pending if not s.poll()]
            if opts.verbose and time.monotonic() - last_note > 30:
                last_note = time.monotonic()
                done = sum(1 for s in shards for r in s.records if r["t"] == "unit_end")
                print(f"[opinfo] {time.monotonic() - t0:7.0f} s  {done} units done", flush=True)
    finally:
        for s in shards:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
    errors = [s.error for s in shards if s.error]
    if errors:
        raise RuntimeError("\n".join(errors))
    records = [r for s in shards for r in s.records]
    meta = next(r for s in shards for r in s.records if r["t"] == "meta")
    res = Results(records, meta, time.monotonic() - t0, opts,
                  crashes=sum(s.crashes for s in shards), workdir=workdir)
    res.provenance = provenance
    if not opts.keep_workdir:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    return res


class OpStats:
    __slots__ = ("samples", "passed", "failed", "fallback", "blamed", "first_fail", "dtypes",
                 "f32_fail", "f32_samples", "via")

    def __init__(self):
        self.samples = self.passed = self.failed = self.fallback = self.blamed = 0
        self.f32_fail = self.f32_samples = 0
        self.first_fail = None
        self.dtypes = set()
        self.via = set()           # CPU-fallback overloads that ran inside this op


class Results:
    """Aggregated records: per aten op, per (OpInfo, dtype), totals."""

    def __init__(self, records, meta, seconds, opts, crashes=0, workdir=None):
        self.meta, self.seconds, self.opts, self.crashes, self.workdir = (
            meta, seconds, opts, crashes, workdir)
        self.provenance = "?"       # set by run()
        self.registered = set(meta["registered"])
        self.core = set(meta["core"])
        self.native = set(meta["native"])
        self.ops = {}           # aten op -> OpStats
        self.units = {}         # (opinfo, dtype) -> dict
        self.samples = [r for r in records if r["t"] == "sample"]
        for r in records:
            key = (r.get("opinfo"), r.get("dtype"))
            if r["t"] == "unit":
                self.units.setdefault(key, dict(status=r["status"], msg=r.get("msg"), run=0,
                                                passed=0, failed=0, na=0, skip=0, budget=False,
                                                first=None, culprits={}, aborted=None, kinds={}))
            elif r["t"] == "unit_end":
                u = self.units.setdefault(key, dict(status="run", msg=None, run=0, passed=0,
                                                    failed=0, na=0, skip=0, budget=False,
                                                    first=None, culprits={}, aborted=None,
                                                    kinds={}))
                u["budget"] = u["budget"] or r.get("budget_hit", False)
                u["aborted"] = u["aborted"] or r.get("aborted")
        for r in self.samples:
            u = self.units[(r["opinfo"], r["dtype"])]
            st = r["status"]
            if st in ("na", "skip"):
                u[st] += 1
                continue
            u["run"] += 1
            if st == "pass":
                u["passed"] += 1
            else:
                u["failed"] += 1
                c = r.get("culprit") or "(unattributed)"
                u["culprits"][c] = u["culprits"].get(c, 0) + 1
                k = r.get("kind", "?")
                u["kinds"][k] = u["kinds"].get(k, 0) + 1
                if u["first"] is None:
                    u["first"] = r
            fb = r.get("fallback", {})
            for name in r.get("ops", []):
                s = self.ops.setdefault(name, OpStats())
                s.samples += 1
                s.dtypes.add(r["dtype"])
                if r["dtype"] == "float32":
                    s.f32_samples += 1
                if name in fb:
                    s.via.update(fb[name])
                if st == "pass":
                    if name in fb:
                        s.fallback += 1
                    else:
                        s.passed += 1
                else:
                    s.failed += 1
                    if r["dtype"] == "float32":
                        s.f32_fail += 1
                    if r.get("culprit") == name:
                        s.blamed += 1
                    if s.first_fail is None:
                        s.first_fail = r
            # an op that crashed the worker was never recorded as dispatched
            c = r.get("culprit")
            if st == "fail" and c and c not in r.get("ops", []):
                s = self.ops.setdefault(c, OpStats())
                s.blamed += 1

    # -------------------------------------------------------------- queries
    def failed_units(self):
        """Sorted (OpInfo, dtype) with any failing sample."""
        return sorted(k for k, u in self.units.items() if u["failed"])

    def crashed_samples(self):
        """Samples that killed or hung the process even without the dispatch mode."""
        return [r for r in self.samples if r.get("kind") in ("crash", "timeout")]

    def mode_crashed_samples(self):
        return [r for r in self.samples if r.get("kind") == "mode-crash"]

    def not_run(self):
        """(OpInfo, dtype) skipped because the --deadline passed."""
        return sorted(k for k, u in self.units.items() if u["status"] == "deadline")

    def totals(self):
        n = dict(pass_=0, fail=0, fallback=0, na=0, skip=0, kinds={})
        for r in self.samples:
            st = r["status"]
            if st == "pass":
                n["fallback" if r.get("fallback") else "pass_"] += 1
            elif st == "fail":
                n["fail"] += 1
                k = r.get("kind", "?")
                n["kinds"][k] = n["kinds"].get(k, 0) + 1
            else:
                n[st] += 1
        return n

    def core_summary(self):
        lowered = sorted(o for o in self.core if o in self.registered)
        reached = sorted(o for o in self.core if o in self.ops)
        f32_ok = sorted(o for o in reached if self.ops[o].f32_samples and not self.ops[o].f32_fail)
        unreached = sorted(o for o in self.core if o not in self.ops)
        return lowered, reached, f32_ok, unreached

    def culprit_ranking(self):
        """[(culprit op, failing samples blamed on it, [(opinfo, dtype)], first record)]."""
        agg = {}
        for r in self.samples:
            if r["status"] != "fail":
                continue
            c = r.get("culprit") or "(unattributed)"
            a = agg.setdefault(c, [0, {}, r])
            a[0] += 1
            a[1][(r["opinfo"], r["dtype"])] = None
        return sorted(((c, a[0], list(a[1]), a[2]) for c, a in agg.items()),
                      key=lambda x: (-len(x[2]), -x[1], x[0]))

    # -------------------------------------------------------------- output
    def kernel_kind(self, name):
        if name in self.registered:
            return "yes"
        if name in self.native:
            return "native"
        return "no"

    def markdown(self, command):
        o = self.opts
        lines = []
        w = lines.append
        tot = self.totals()
        lowered, reached, f32_ok, unreached = self.core_summary()
        units_run = [k for k, u in self.units.items() if u["run"]]
        w("# OpInfo conformance of the tpu device")
        w("")
        w("Generated by `tests/opinfo/runner.py`; do not edit by hand.")
        w("")
        w(f"- command: `{command}`")
        w(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}")
        w(f"- torch {self.meta['torch']}; torchtpu {self.provenance}, "
          f"{len(self.registered)} overloads lowered")
        w(f"- run time: {self.seconds:.0f} s ({o.jobs} worker process(es))")
        cap = (f"at most {o.max_samples_per_op} samples per OpInfo and dtype"
               if o.max_samples_per_op else "all samples")
        w(f"- samples: {cap}; time budget {o.time_budget:g} s per OpInfo and dtype "
          "(samples past it are skipped)" +
          (f"; no OpInfo started after {o.deadline:g} s" if o.deadline else ""))
        budget_hit = sorted(f"{k[0]} ({k[1]})" for k, u in self.units.items() if u["budget"])
        if budget_hit:
            w(f"- budget reached (remaining samples skipped) for {len(budget_hit)} "
              f"OpInfo/dtype pairs: {', '.join(budget_hit)}")
        w("")
        w("## Method")
        w("")
        w("Each OpInfo sample runs on the CPU and on the tpu (inputs moved there, "
          "`device=` keywords pointed at the tpu). Outputs must match in dtype, shape "
          "and values (`torch.testing.assert_close`, NaNs equal); for float32 samples "
          "of differentiable OpInfos, the gradients of `sum(output * cotangent)` with "
          "a fixed random cotangent must match too. Ops that draw random numbers or "
          "return uninitialized memory are checked for dtype and shape only.")
        w("")
        w("| dtype | rtol | atol | matmul precision |")
        w("| --- | --- | --- | --- |")
        w("| float32 | 1.3e-6 (assert_close default) | 1e-5 (default) | HIGHEST (fp32) |")
        r, a = TOLERANCES["bfloat16"]
        w(f"| bfloat16 | {r:g} | {a:g} | HIGHEST |")
        w("")
        w("Integer and bool outputs must be equal. Attribution: a sample counts for "
          "every aten overload its tpu run dispatched (forward and backward). `pass` = "
          "the sample passed and this op ran on the tpu; `fallback` = the sample passed "
          "and this op ran through the CPU fallback; `fail` = the sample failed "
          "(mismatch or exception). `blamed` = failing samples whose likely culprit is "
          "this op: the op that raised, else the first op whose own result differed "
          "from the same op run on CPU copies of its tpu inputs (the per-op check). "
          "Failure kinds: `exception` (the tpu run raised), `mismatch`, `near-mismatch` "
          f"(passes at rtol=atol={LOOSE['float32'][0]:g} for float32, "
          f"{LOOSE['bfloat16'][0]:g} for bfloat16: accumulation order or rounding), "
          "`crash`/`timeout` (the worker process died or hung, also when the sample "
          "is rerun without the recording dispatch mode), `mode-crash` (the process "
          "died only under the dispatch mode; without it the sample ran). A crashing "
          "OpInfo's remaining samples are skipped. "
          "Outputs that differ are compared again after the OpInfo's "
          "`output_process_fn_grad` (sign/order conventions of linalg results). "
          "`lowered`: `yes` = a tpu lowering (`torchtpu.registered_ops()`), `native` = "
          "a storage/metadata kernel of the backend, `no` = neither (the op runs "
          "through PyTorch's composite kernel or the CPU fallback). `falls back via` = "
          "the fallback overloads that ran inside "
          "this op (a functional op often falls back through its `out=` overload).")
        w("")
        w("## Summary")
        w("")
        w(f"- OpInfo/dtype pairs with samples run: {len(units_run)} "
          f"({len(self.failed_units())} with a failure)")
        by_status = {}
        for u in self.units.values():
            if u["status"] != "run":
                by_status[u["status"]] = by_status.get(u["status"], 0) + 1
        if by_status:
            w("- OpInfo/dtype pairs not run: " + ", ".join(
                f"{n} {_STATUS_TEXT.get(k, k)}" for k, n in sorted(by_status.items())))
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(tot["kinds"].items()))
        w(f"- samples: {tot['pass_']} pass on tpu, {tot['fallback']} pass with a CPU "
          f"fallback, {tot['fail']} fail ({kinds or 'none'}), {tot['na']} not applicable "
          f"(CPU raised), {tot['skip']} skipped (inputs the tpu cannot hold, or nothing "
          "to place on it)")
        for label, recs in (("process crashes/timeouts", self.crashed_samples()),
                            ("crashes under the dispatch mode only", self.mode_crashed_samples())):
            names = ", ".join(sorted(set(r["opinfo"] for r in recs)))
            w(f"- {label}: {len(recs)}" + (f" ({names})" if names else ""))
        if self.not_run():
            w(f"- not run (deadline): {len(self.not_run())} OpInfo/dtype pairs")
        n_fb = sum(1 for s in self.ops.values() if s.via)
        n_fail = sum(1 for s in self.ops.values() if s.failed)
        w(f"- aten ops reached: {len(self.ops)} ({sum(1 for x in self.ops if x in self.registered)}"
          f" lowered; {n_fail} in a failing sample; {n_fb} ran via the CPU fallback)")
        w(f"- core aten ops ({len(self.core)}): {len(lowered)} lowered on tpu, "
          f"{len(reached)} reached, {len(f32_ok)} pass all float32 samples that reach them, "
          f"{len(unreached)} unreached")
        w("")
        w("## Likely culprits")
        w("")
        w("Failing samples grouped by the op blamed for them.")
        w("")
        w("| culprit op | failing samples | OpInfo/dtype pairs | example | kind | first message |")
        w("| --- | ---: | ---: | --- | --- | --- |")
        for c, n, pairs, r in self.culprit_ranking():
            w(f"| `{c}` | {n} | {len(pairs)} | {r['opinfo']} ({r['dtype']}) | "
              f"{r.get('kind', '')} | {_md(_culprit_msg(r))} |")
        w("")
        w("## Aten ops")
        w("")
        w("| op | core | lowered | samples | pass | fail | fallback | blamed | falls back via |")
        w("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
        for name in sorted(self.ops):
            s = self.ops[name]
            via = ", ".join(f"`{v}`" for v in sorted(s.via))
            w(f"| `{name}` | {'core' if name in self.core else ''} | {self.kernel_kind(name)} | "
              f"{s.samples} | {s.passed} | {s.failed} | {s.fallback} | {s.blamed} | {via} |")
        w("")
        w("## Core ops")
        w("")
        w("`float32` = samples reaching the op in float32 / of them failing.")
        w("")
        w("| core op | lowered | reached | float32 samples / failing |")
        w("| --- | --- | --- | --- |")
        for name in sorted(self.core):
            s = self.ops.get(name)
            w(f"| `{name}` | {self.kernel_kind(name)} | {'yes' if s else '**no**'} | "
              f"{f'{s.f32_samples} / {s.f32_fail}' if s else ''} |")
        w("")
        w(f"### Core ops no sample reached ({len(unreached)})")
        w("")
        w(", ".join(f"`{x}`" for x in unreached) or "none")
        w("")
        w("## Failures")
        w("")
        w("Per aten op in a failing sample: the first failure seen.")
        w("")
        w("| op | dtype | OpInfo | culprit | first message |")
        w("| --- | --- | --- | --- | --- |")
        for name in sorted(self.ops):
            r = self.ops[name].first_fail
            if r is None:
                continue
            w(f"| `{name}` | {r['dtype']} | {r['opinfo']} | `{r.get('culprit') or '?'}` | "
              f"{_md(_culprit_msg(r))} |")
        w("")
        w("### Failing OpInfos")
        w("")
        w("| OpInfo | dtype | failed / run | kinds | culprits | first message |")
        w("| --- | --- | --- | --- | --- | --- |")
        for key in self.failed_units():
            u = self.units[key]
            cul = ", ".join(f"`{c}` ({n})" for c, n in
                            sorted(u["culprits"].items(), key=lambda x: -x[1]))
            kinds = ", ".join(f"{k} ({n})" for k, n in sorted(u["kinds"].items()))
            w(f"| {key[0]} | {key[1]} | {u['failed']} / {u['run']} | {kinds} | {cul} | "
              f"{_md(_culprit_msg(u['first']))} |")
        w("")
        return "\n".join(lines)

    def expected_text(self, command):
        head = [
            "# (OpInfo, dtype) pairs with at least one failing sample on the tpu.",
            "# Generated by tests/opinfo/runner.py; tests/python/test_opinfo.py fails",
            "# when a pair fails that is not listed here. Remove a line when it is fixed.",
            f"# {command}",
        ]
        return "\n".join(head + [f"{o} {d}" for o, d in self.failed_units()]) + "\n"

    def json_summary(self):
        return {
            "seconds": self.seconds,
            "totals": self.totals(),
            "failed_units": self.failed_units(),
            "crashes": [(r["opinfo"], r["dtype"], r["s"], r["msg"])
                        for r in self.crashed_samples()],
            "reached": sorted(self.ops),
        }


_STATUS_TEXT = {
    "dtype-unsupported": "dtype not supported by the OpInfo on CPU",
    "no-samples": "sample generation failed",
    "deadline": "not started before the deadline",
}


def _culprit_msg(r):
    if r is None:
        return ""
    msg = r.get("msg", "")
    d = r.get("diverged")
    if d and r.get("kind") == "mismatch":
        msg = f"{msg} [per-op check: {d[0]}: {d[1]}]"
    return _short(msg)


def _md(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def load_expected(path):
    """Set of (OpInfo, dtype) listed in an expected-failures file."""
    out = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, dtype = line.split()
                out.add((name, dtype))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m tests.opinfo.runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="write the markdown report here (e.g. docs/ops.md)")
    p.add_argument("--dtypes", default=DEFAULT_DTYPES)
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    p.add_argument("--max-samples-per-op", type=int, default=None)
    p.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET,
                   help="seconds per OpInfo and dtype before its remaining samples are skipped")
    p.add_argument("--watchdog", type=float, default=DEFAULT_WATCHDOG,
                   help="seconds without progress before a worker is killed")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--deadline", type=float, default=None,
                   help="seconds after which no further OpInfo starts (the rest are "
                        "reported as not run)")
    p.add_argument("--keep-workdir", action="store_true",
                   help="keep the workers' JSON-lines records in the temporary directory")
    p.add_argument("--no-op-check", dest="op_check", action="store_false",
                   help="skip the per-op CPU check used for attribution")
    p.add_argument("--no-plain-rerun", dest="plain_rerun", action="store_false",
                   help="after a worker crash, do not rerun the sample without the dispatch mode")
    p.add_argument("--snapshot", action="store_true",
                   help="run on a copy of python/torchtpu taken at the start (long sweeps while "
                        "the tree is being edited)")
    p.add_argument("--write-expected", help="write the failing (OpInfo, dtype) pairs here")
    p.add_argument("--check-expected",
                   help="exit 1 if a pair fails that this expected-failures file does not "
                        "list, or a sample crashes the process")
    p.add_argument("--json", help="write a JSON summary here")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:
        return worker_main(argv)
    opts = parse_args(argv)
    command = "python -m tests.opinfo.runner " + " ".join(argv)
    res = run(opts)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(res.markdown(command))
    if opts.write_expected:
        with open(opts.write_expected, "w") as f:
            f.write(res.expected_text(command))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(res.json_summary(), f, indent=1)
    tot = res.totals()
    lowered, reached, f32_ok, unreached = res.core_summary()
    print(f"{len(res.ops)} aten ops reached; samples: {tot['pass_']} pass, "
          f"{tot['fallback']} pass via fallback, {tot['fail']} fail, {tot['na']} n/a, "
          f"{tot['skip']} skipped; core: {len(lowered)} lowered, {len(f32_ok)} pass float32, "
          f"{len(unreached)} unreached; {len(res.crashed_samples())} crashes/timeouts, "
          f"{len(res.mode_crashed_samples())} crashes under the dispatch mode only; "
          f"{len(res.not_run())} pairs not run (deadline); "
          f"{res.seconds:.0f} s")
    if opts.check_expected:
        new = sorted(set(res.failed_units()) - load_expected(opts.check_expected))
        for o, d in new:
            print(f"new failure: {o} {d}: {_culprit_msg(res.units[(o, d)]['first'])}")
        for r in res.crashed_samples():
            print(f"crash: {r['opinfo']} {r['dtype']} sample {r['s']}: {r['msg']}")
        if new or res.crashed_samples():
            return 1
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        sys.exit(worker_main(sys.argv[1:]))
    sys.exit(main())

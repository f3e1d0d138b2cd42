"""LowerCtx: what a lowering rule uses to turn one aten call into an IR graph.

Values are ``V`` objects (an IR value id plus its dtype and shape). The
context binds graph parameters to the call's tensors and runtime scalars,
records outputs, and reports how the aten results are formed.
"""
import numbers

import torch

from .. import _C
from .._env import DTYPE_CODE, TORCH_DTYPES

# reduced-precision floats compute in float32, as PyTorch's CPU kernels do
OPMATH = {torch.bfloat16: torch.float32, torch.float16: torch.float32}

CMP = {"eq": 0, "ne": 1, "lt": 2, "le": 3, "gt": 4, "ge": 5}
REDUCE = {"sum": 0, "prod": 1, "max": 2, "min": 3, "and": 4, "or": 5, "argmax": 6,
          "argmin": 7}
RNG = {"uniform": 0, "normal": 1, "bits": 2}


class NotLowerable(Exception):
    """Raised by a rule for a call it does not support: the call then runs
    as a counted CPU fallback."""


class V:
    __slots__ = ("id", "dtype", "shape")

    def __init__(self, id, dtype, shape):
        self.id = id
        self.dtype = dtype
        self.shape = tuple(shape)

    @property
    def rank(self):
        return len(self.shape)

    def __repr__(self):
        return f"%{self.id}:{self.dtype}{list(self.shape)}"


def is_tensor(x):
    return isinstance(x, torch.Tensor)


def is_cpu_scalar(x):
    return isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0


def to_meta(x, all_devices=False):
    """Meta stand-ins of the tpu tensors in x (of every tensor with
    all_devices), through lists and tuples."""
    if isinstance(x, torch.Tensor) and (all_devices or x.device.type == "tpu"):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(to_meta(e, all_devices) for e in x)
    return x


class LowerCtx:
    def __init__(self, name, overload, tensors, scalar_names, args, kwargs,
                 pos_names=(), kinds=None):
        self.name = name
        self.overload = overload
        self.tensors = tensors
        self.scalar_names = scalar_names
        self.args = args
        self.kwargs = kwargs
        self.g = _C.Graph()
        self.binds = []          # per graph parameter: (B_*, index)
        self.results = []        # per aten result: (R_*, index)
        self.n_outputs = 0
        self._inputs = {}        # tensor index -> V
        self._scalars = {}       # scalar name -> V
        self._meta = None
        self._strided_params = set()
        self._positions = self._flat_positions(pos_names, kinds or {})

    def _flat_positions(self, pos_names, kinds):
        """(argument name, list index) -> index in the flattened tensors, in
        the order the C dispatcher flattens them."""
        pos = {}
        k = 0

        def visit(name, kind, v):
            nonlocal k
            if kind == _C.K_TENSOR_LIST and isinstance(v, (list, tuple)):
                for i, e in enumerate(v):
                    if isinstance(e, torch.Tensor):
                        pos[(name, i)] = k
                        k += 1
            elif kind in (_C.K_TENSOR, _C.K_SCALAR) and isinstance(v, torch.Tensor):
                pos[(name, None)] = k
                k += 1

        for i, v in enumerate(self.args):
            n = pos_names[i] if i < len(pos_names) else None
            visit(n, kinds.get(n, _C.K_STATIC), v)
        for n, v in self.kwargs.items():
            visit(n, kinds.get(n, _C.K_STATIC), v)
        return pos

    def _tensor_index(self, t, name=None, index=None):
        """Position of tensor argument t. The same tensor object may be passed
        for two arguments (x * x); those are distinct parameters, since the
        cached program must not depend on aliasing, so callers name the
        argument when an object occurs more than once."""
        if name is not None:
            k = self._positions.get((name, index))
            if k is not None and self.tensors[k] is t:
                return k
        hits = [i for i, x in enumerate(self.tensors) if x is t]
        if not hits:
            raise KeyError(f"{self.name}: tensor is not an argument of this call")
        if len(hits) > 1 and name is None:
            raise NotLowerable(f"{self.name}: ambiguous tensor argument (internal)")
        return hits[0]

    def input(self, t, name=None, index=None):
        """The IR value of a tensor argument (a buffer parameter with the
        tensor's strides, or a scalar parameter for a 0-dim CPU tensor).
        name/index: the aten argument (and list position) it was passed as."""
        k = self._tensor_index(t, name, index)
        if k in self._inputs:
            return self._inputs[k]
        if t.device.type == "cpu":
            vid = self.g.scalar(DTYPE_CODE[t.dtype])
            v = V(vid, t.dtype, ())
        else:
            vid = self.g.param(DTYPE_CODE[t.dtype], tuple(t.shape), tuple(t.stride()))
            v = V(vid, t.dtype, t.shape)
            if not t.is_contiguous():
                self._strided_params.add(vid)
        self.binds.append((_C.B_TENSOR, k))
        self._inputs[k] = v
        return v

    def scalar(self, name, dtype):
        """A runtime scalar argument (declared with runtime=...) as a rank-0
        value of dtype."""
        key = (name, dtype)
        if key in self._scalars:
            return self._scalars[key]
        k = list(self.scalar_names).index(name)
        vid = self.g.scalar(DTYPE_CODE[dtype])
        self.binds.append((_C.B_SCALAR, k))
        v = V(vid, dtype, ())
        self._scalars[key] = v
        return v

    def const(self, value, dtype, shape=()):
        """A constant (broadcast to shape when shape is given)."""
        t = torch.tensor(value, dtype=dtype).reshape(1)
        data = t.view(torch.uint8).numpy().tobytes()
        vid = self.g.constant(DTYPE_CODE[dtype], (), data)
        v = V(vid, dtype, ())
        return self.broadcast(v, shape) if shape else v

    def operand(self, x, dtype, shape=None, name=None):
        """Any argument (tensor, 0-dim CPU tensor, runtime scalar by name, or
        Python number) converted to dtype and broadcast to shape."""
        if is_tensor(x):
            v = self.input(x, name)
        elif name is not None and name in self.scalar_names:
            v = self.scalar(name, dtype)
        elif isinstance(x, (numbers.Number, bool)):
            v = self.const(x, dtype)
        else:
            raise NotLowerable(f"unsupported operand {type(x).__name__}")
        v = self.convert(v, dtype)
        if shape is not None:
            v = self.broadcast(v, shape)
        return v

    # --------------------------------------------------------------- ops

    def op(self, name, *operands, kind=0, ints=(), attr_dtype=None, dtype=None, shape=None):
        ids = [o.id for o in operands]
        ad = DTYPE_CODE[attr_dtype] if attr_dtype is not None else -1
        if dtype is not None:
            vid = self.g.node(name, ids, kind=kind, ints=tuple(ints), attr_dtype=ad,
                              dtype=DTYPE_CODE[dtype], shape=tuple(shape))
        else:
            vid = self.g.node(name, ids, kind=kind, ints=tuple(ints), attr_dtype=ad)
        code, shp = self.g.type(vid)
        return V(vid, TORCH_DTYPES[code], shp)

    def convert(self, v, dtype):
        if v.dtype == dtype:
            return v
        return self.op("convert", v, attr_dtype=dtype)

    def broadcast(self, v, shape):
        """numpy-style broadcast of v to shape."""
        shape = tuple(shape)
        if v.shape == shape:
            return v
        r, n = len(shape), v.rank
        if n > r:
            raise RuntimeError(f"{self.name}: cannot broadcast {list(v.shape)} to {list(shape)}")
        dims = tuple(range(r - n, r))
        for d, s in zip(dims, v.shape):
            if s != 1 and s != shape[d]:
                raise RuntimeError(
                    f"{self.name}: cannot broadcast {list(v.shape)} to {list(shape)}")
        return self.op("broadcast_in_dim", v, ints=dims, dtype=v.dtype, shape=shape)

    def broadcast_in_dim(self, v, shape, dims):
        return self.op("broadcast_in_dim", v, ints=tuple(dims), dtype=v.dtype, shape=tuple(shape))

    def unary(self, name, v):
        return self.op(name, v)

    def binary(self, name, a, b):
        return self.op(name, a, b)

    def compare(self, direction, a, b):
        return self.op("compare", a, b, kind=CMP[direction])

    def select(self, p, a, b):
        return self.op("select", p, a, b)

    def reduce(self, kind, v, dims):
        return self.op("reduce", v, kind=REDUCE[kind], ints=tuple(sorted(dims)))

    def transpose(self, v, perm):
        return self.op("transpose", v, ints=tuple(perm))

    def reshape(self, v, shape):
        if tuple(shape) == v.shape:
            return v
        if v.id in self._strided_params:
            v = self.materialize(v)   # reshape reads its operand linearly
        return self.op("reshape", v, dtype=v.dtype, shape=tuple(shape))

    def materialize(self, v):
        """v stored contiguously (a kernel boundary)."""
        return self.op("copy", v)

    def iota(self, dtype, shape, dim):
        return self.op("iota", ints=(dim,), dtype=dtype, shape=shape)

    def dot_general(self, a, b, lhs_batch, rhs_batch, lhs_contract, rhs_contract,
                    precision, out_dtype=None, out_shape=None):
        ints = (len(lhs_batch), len(lhs_contract), *lhs_batch, *rhs_batch,
                *lhs_contract, *rhs_contract)
        if out_dtype is None:
            return self.op("dot_general", a, b, kind=precision, ints=ints)
        return self.op("dot_general", a, b, kind=precision, ints=ints, dtype=out_dtype,
                       shape=out_shape)

    def rng(self, dist, dtype, shape):
        """Random values from the device generator (counter-based: seed and
        offset are runtime operands drawn at each call)."""
        numel = 1
        for s in shape:
            numel *= s
        seed = V(self.g.scalar(DTYPE_CODE[torch.uint64]), torch.uint64, ())
        self.binds.append((_C.B_RNG_SEED, numel))
        offset = V(self.g.scalar(DTYPE_CODE[torch.uint64]), torch.uint64, ())
        self.binds.append((_C.B_RNG_OFFSET, numel))
        return self.op("rng", seed, offset, kind=RNG[dist], dtype=dtype, shape=tuple(shape))

    # ---------------------------------------------------------- outputs

    def meta(self):
        """The aten op run on meta tensors: PyTorch's own output shapes,
        dtypes and strides (and its shape-error messages)."""
        if self._meta is None:
            args = [to_meta(a) for a in self.args]
            kwargs = {k: to_meta(v) for k, v in self.kwargs.items()}
            try:
                self._meta = self.overload(*args, **kwargs)
            except (RuntimeError, ValueError, IndexError, TypeError) as e:
                retry = self._numbers_as_tensors(args, kwargs)
                if retry is not None:
                    try:
                        self._meta = self.overload(*retry[0], **retry[1])
                        return self._meta
                    except (RuntimeError, ValueError, IndexError, TypeError):
                        pass
                self._raise_like_cpu(e)
        return self._meta

    def _numbers_as_tensors(self, args, kwargs):
        """PyTorch hands wrapped numbers (x + 2.5) to kernels as Python
        numbers, which meta kernels reject for Tensor arguments. A 0-dim
        tensor of dtype bool / int64 / the default float promotes exactly like
        the wrapped number it stands for."""
        schema = self.overload._schema
        tensor_args = {a.name for a in schema.arguments
                       if isinstance(a.type, torch.TensorType)}
        pos = [a.name for a in schema.arguments if not a.kwarg_only]

        def wrap(v):
            if isinstance(v, bool):
                return torch.tensor(v, dtype=torch.bool, device="meta")
            if isinstance(v, int):
                return torch.tensor(v, dtype=torch.int64, device="meta")
            if isinstance(v, float):
                return torch.tensor(v, dtype=torch.get_default_dtype(), device="meta")
            if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0:
                return torch.empty((), dtype=v.dtype, device="meta")
            return v

        changed = False
        new_args = list(args)
        for i, v in enumerate(args):
            if i < len(pos) and pos[i] in tensor_args and wrap(v) is not v:
                new_args[i] = wrap(v)
                changed = True
        new_kwargs = dict(kwargs)
        for k, v in kwargs.items():
            if k in tensor_args and wrap(v) is not v:
                new_kwargs[k] = wrap(v)
                changed = True
        return (new_args, new_kwargs) if changed else None

    def _raise_like_cpu(self, meta_error):
        """Meta kernels word some errors differently from the CPU kernels
        users know; when the tensors are small, the CPU kernel on
        uninitialised stand-ins produces PyTorch's usual message."""
        budget = [64 << 20]

        def stand_in(x):
            if isinstance(x, torch.Tensor) and x.device.type == "tpu":
                budget[0] -= x.numel() * x.element_size()
                return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
            if isinstance(x, (list, tuple)):
                return type(x)(stand_in(e) for e in x)
            return x

        args = [stand_in(a) for a in self.args]
        kwargs = {k: stand_in(v) for k, v in self.kwargs.items()}
        if budget[0] >= 0:
            try:
                self.overload(*args, **kwargs)
            except Exception as cpu_error:
                raise cpu_error.with_traceback(None) from None
        raise meta_error

    def output(self, v, like=None, strides=None):
        """Adds a new output holding v; like (a meta tensor) gives its strides."""
        if like is not None:
            strides = tuple(like.stride())
            if like.dtype != v.dtype:
                v = self.convert(v, like.dtype)
            if tuple(like.shape) != v.shape:
                v = self.broadcast(v, tuple(like.shape))
        self.g.output(v.id, strides, -1)
        j = self.n_outputs
        self.n_outputs += 1
        self.results.append((_C.R_OUTPUT, j))
        return j

    def output_into(self, v, t, name=None):
        """Writes v into tensor argument t (an in-place op: name "self";
        out=: name "out") and returns t as the aten result."""
        if name is None:
            name = "out" if ("out", None) in self._positions and \
                self.tensors[self._positions[("out", None)]] is t else "self"
        k = self._tensor_index(t, name)
        p = self.input(t, name)
        v = self.convert(v, t.dtype)
        v = self.broadcast(v, tuple(t.shape))
        param_index = self.binds.index((_C.B_TENSOR, k))
        self.g.output(v.id, tuple(t.stride()), param_index)
        self.n_outputs += 1
        self.results.append((_C.R_ALIAS, k))
        return p

    def result_none(self):
        self.results.append((_C.R_NONE, 0))

    def finish(self, single):
        return (self.g, tuple(self.binds), tuple(self.results), bool(single))

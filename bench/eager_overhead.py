"""Per-op dispatch overhead on small tensors: PyTorch CPU eager vs the tpu
device in strict eager (asynchronous) and debug eager (synchronous) mode,
then a per-stage breakdown of the strict-eager path measured by subtraction.

    python bench/eager_overhead.py [--quick]

Every number is the median over repetitions of a loop of N calls; the loop
body is compiled inline (no per-call lambda). Timings are never asserted.
"""
import argparse
import sys
import time

from _common import (header, import_torchtpu, make_loop, median, ratio, set_mode,
                     table, time_interleaved)

torch, torchtpu = import_torchtpu()
_C = torchtpu._C
F32 = torchtpu._env.DTYPE_CODE[torch.float32]


def us(s):
    return f"{s * 1e6:.2f}"


def make_values(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 16, generator=g)
    y = torch.randn(16, 16, generator=g)
    v = torch.randn(128, generator=g)
    w = torch.randn(128, generator=g)
    vals = dict(x=x, y=y, v=v, w=w, a=x.clone(), b=y.clone())
    vals = {k: t.to(device) for k, t in vals.items()}
    vals["relu"] = torch.relu
    return vals


# (label, statement, names the statement uses)
OPS = [
    ("x + y          [16x16]", "x + y", ("x", "y")),
    ("v + w          [128]", "v + w", ("v", "w")),
    ("x * 2.0        [16x16]", "x * 2.0", ("x",)),
    ("torch.relu(x)  [16x16]", "relu(x)", ("x", "relu")),
    ("x.sum()        [16x16]", "x.sum()", ("x",)),
    ("a @ b          [16x16]", "a @ b", ("a", "b")),
    ("x.add_(y)      [16x16]", "x.add_(y)", ("x", "y")),
    ("x.view(-1)     [16x16]", "x.view(-1)", ("x",)),
]


def _mode(debug):
    """before() hook for time_interleaved: None leaves the mode alone (CPU rows)."""
    if debug is not None:
        set_mode(torchtpu, debug)


def per_op_table(n, reps):
    cpu = make_values("cpu")
    tpu = make_values("tpu")
    sync = torch.tpu.synchronize
    rows = []
    ratios_strict, ratios_debug = [], []
    s0 = _C.stats()
    timed_lowerings = 0
    for label, stmt, names in OPS:
        loop = make_loop(stmt, names)
        cv = [cpu[k] for k in names]
        tv = [tpu[k] for k in names]
        loop(50, *cv)
        for debug in (False, True):
            set_mode(torchtpu, debug)
            loop(50, *tv)  # the first call lowers and compiles; later calls hit the cache
            sync()
        before = _C.stats()["lowerings"]
        r = time_interleaved([("cpu", loop, cv, None), ("strict", loop, tv, False),
                              ("debug", loop, tv, True)], n, reps, sync, _mode)
        set_mode(torchtpu, False)
        timed_lowerings += _C.stats()["lowerings"] - before
        t_cpu, t_strict, t_ret, t_debug = r["cpu"][0], r["strict"][0], r["strict"][1], r["debug"][0]
        ratios_strict.append(t_strict / t_cpu)
        ratios_debug.append(t_debug / t_cpu)
        rows.append([label, us(t_cpu), us(t_strict), us(t_ret), us(t_debug),
                     ratio(t_strict, t_cpu), ratio(t_debug, t_cpu)])
    print(f"\nPer-op time, microseconds (median of {reps} loops of {n} calls; CPU, strict and")
    print("debug loops run in round-robin so that host load hits them alike)")
    print("  strict = N calls + one torch.tpu.synchronize(), divided by N (amortized)")
    print("  return = the same loop until the last call returned (submit side only)")
    print("  debug  = debug eager (DEFER_NEVER_AND_LAUNCH_BLOCKING): each call waits for its op")
    table(["op", "CPU eager", "tpu strict", "tpu return", "tpu debug",
           "strict/CPU", "debug/CPU"], rows)
    gm = lambda xs: torch.tensor(xs).log().mean().exp().item()  # noqa: E731
    print(f"geometric mean ratio: strict/CPU {gm(ratios_strict):.1f}x, "
          f"debug/CPU {gm(ratios_debug):.1f}x")
    s1 = _C.stats()
    print(f"tpu counters over this table: dispatches +{s1['dispatches'] - s0['dispatches']}, "
          f"lowerings +{s1['lowerings'] - s0['lowerings']} ({timed_lowerings} inside timed "
          f"loops), cache hits +{s1['cache_hits'] - s0['cache_hits']}, "
          f"tensors created +{s1['tensors_created'] - s0['tensors_created']}")
    return tpu


# ------------------------------------------------------------ stages


def _define_noop():
    """A custom op whose tpu (PrivateUse1) kernel is a Python function that
    returns its first argument: the cost of reaching a Python-registered
    PrivateUse1 kernel through PyTorch's dispatcher, with nothing behind it."""
    lib = torch.library.Library("tpubench", "DEF")
    lib.define("noop(Tensor(a) x, Tensor y) -> Tensor(a)")

    def noop(x, y):
        return x

    lib.impl("noop", noop, "PrivateUse1")
    lib.impl("noop", noop, "CPU")
    return lib, torch.ops.tpubench.noop.default


def _executables():
    """add(x, y) compiled straight from an IR graph: once with a fresh
    output, once writing into parameter 0 (in place)."""
    out = []
    for alias in (-1, 0):
        g = _C.Graph()
        a = g.param(F32, (16, 16), (16, 1))
        b = g.param(F32, (16, 16), (16, 1))
        s = g.node("add", [a, b])
        g.output(s, (16, 1), alias)
        out.append(_C.compile(g, _C.PRECISION_HIGHEST))
    return out


def stage_breakdown(tpu, n, reps):
    sync = torch.tpu.synchronize
    set_mode(torchtpu, debug=False)
    x, y = tpu["x"], tpu["y"]
    xc = x.cpu()
    yc = y.cpu()
    _lib, noop = _define_noop()
    add, add_ = torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor

    cases = []

    def measure(name, stmt, debug=False, **vals):
        loop = make_loop(stmt, tuple(vals))
        args = list(vals.values())
        set_mode(torchtpu, debug)
        loop(100, *args)
        sync()
        cases.append((name, loop, args, debug))

    measure("a", "add(x, y)", add=add, x=x, y=y)
    measure("b", "add_(x, y)", add_=add_, x=x, y=y)
    measure("c", "noop(x, y)", noop=noop, x=x, y=y)
    measure("c_cpu", "noop(x, y)", noop=noop, x=xc, y=yc)
    try:
        exe_out, exe_in = _executables()
        measure("d", "run(e, [x, y])", run=_C.run, e=exe_in, x=x, y=y)
        measure("e", "run(e, [x, y])", run=_C.run, e=exe_out, x=x, y=y)
        exe_err = None
    except Exception as err:  # the IR/compile API may change under us
        exe_err = f"{type(err).__name__}: {err}"
    measure("f", "info(x)", info=_C.buffer_info, x=x)
    measure("g", "empty(s, None, dt)", empty=_C.empty, s=(16, 16), dt=F32)
    measure("h", "fdl(tdl(t))", fdl=torch._C._from_dlpack, tdl=torch._C._to_dlpack, t=xc)
    measure("i", "tdl(t)", tdl=torch._C._to_dlpack, t=xc)
    measure("j", "empty(16, device='tpu')", empty=torch.empty)
    measure("j_cpu", "empty(16)", empty=torch.empty)
    measure("k", "x.view(-1)", x=x)
    measure("k_cpu", "x.view(-1)", x=xc)
    measure("l", "x + y", x=x, y=y)
    measure("l_cpu", "x + y", x=xc, y=yc)
    measure("l_dbg", "x + y", debug=True, x=x, y=y)
    m = time_interleaved(cases, n, reps, sync, _mode)
    set_mode(torchtpu, debug=False)

    r = {k: v[1] for k, v in m.items()}  # submit side: time until the call returns
    print(f"\nStrict-eager stage breakdown of aten::add.Tensor on 16x16 float32 "
          f"(microseconds per call,\nmedian of {reps} round-robin loops of {n} calls)")
    print("Measured primitives (time until the call returns, strict mode):")
    prim = [
        ["[a] torch.ops.aten.add.Tensor(x, y)", us(r["a"]), "the whole submit path"],
        ["[b] torch.ops.aten.add_.Tensor(x, y)", us(r["b"]), "same, in place: no output"],
        ["[c] torch.ops.tpubench.noop(x, y)", us(r["c"]),
         f"Python no-op PrivateUse1 kernel (same op on CPU: {us(r['c_cpu'])})"],
    ]
    if exe_err is None:
        prim += [
            ["[d] _C.run(add_inplace_exe, [x, y])", us(r["d"]), "bind 2 params + enqueue"],
            ["[e] _C.run(add_exe, [x, y])", us(r["e"]), "same + output allocation"],
        ]
    prim += [
        ["[f] _C.buffer_info(x)", us(r["f"]), "read one tensor's metadata + buffer lookup"],
        ["[g] _C.empty((16,16), None, f32)", us(r["g"]), "HBM alloc + DLPack tensor (+ free)"],
        ["[h] _from_dlpack(_to_dlpack(cpu_t))", us(r["h"]), "PyTorch DLPack round trip"],
        ["[i] _to_dlpack(cpu_t)", us(r["i"]), "PyTorch DLPack export alone"],
        ["[j] torch.empty(16, device='tpu')", us(r["j"]), f"CPU: {us(r['j_cpu'])}"],
        ["[k] x.view(-1) on tpu", us(r["k"]), f"CPU: {us(r['k_cpu'])}"],
        ["[l] x + y on tpu", us(r["l"]), f"CPU: {us(r['l_cpu'])}"],
    ]
    table(["primitive", "us", "note"], prim, ["<", ">", "<"])

    print("\nDerived stages of [a] (by subtraction; they add up to [a] by construction):")
    rows = [["1 PyTorch entry + dispatcher -> Python PrivateUse1 kernel", us(r["c"]), "[c]"]]
    if exe_err is None:
        front = r["b"] - r["c"] - r["d"]
        bind = 2 * r["f"]
        enq = r["d"] - bind
        rows += [
            ["2 C op call: flatten args, fingerprint, cache hit", us(front), "[b] - [c] - [d]"],
            ["3 bind params (2 tensor metadata reads)", us(bind), "2 x [f]"],
            ["4 enqueue on the stream", us(enq), "[d] - 2 x [f]"],
        ]
    else:
        rows += [["2-4 C op call + bind + enqueue", us(r["b"] - r["c"]), "[b] - [c]"]]
    alloc = r["a"] - r["b"]
    wrap = r["h"] - r["i"]
    rows += [
        ["5 output allocation + tensor creation (+ free)", us(alloc), "[a] - [b]"],
        ["  5a of which PyTorch from_dlpack wrapping", us(wrap), "[h] - [i]"],
        ["  5b of which HBM alloc/free, capsule, buffer map", us(alloc - wrap), "5 - 5a"],
    ]
    table(["stage", "us", "derived as"], rows, ["<", ">", "<"])
    print("Cross-checks and extras:")
    if exe_err is None:
        print(f"  output allocation inside _C.run: [e] - [d] = {us(r['e'] - r['d'])} us; "
              f"_C.empty alone [g] = {us(r['g'])} us")
    else:
        print(f"  _C.run stages unavailable ({exe_err})")
    print(f"  torch.empty on tpu beyond _C.empty: [j] - [g] = {us(r['j'] - r['g'])} us "
          "(dispatcher + Python empty kernel)")
    print(f"  view via Python redispatch kernel: [k] tpu - CPU = {us(r['k'] - r['k_cpu'])} us")
    print(f"  method entry x + y vs torch.ops entry: [l] - [a] = {us(r['l'] - r['a'])} us "
          "(torch.ops adds a Python OpOverload.__call__)")
    print(f"  worker backlog not overlapped (strict total - return) for [a]: "
          f"{us(m['a'][0] - m['a'][1])} us")
    print(f"  debug eager x + y - strict return x + y = {us(r['l_dbg'] - r['l'])} us "
          "(debug eager runs the op on the calling thread; strict hands it to the")
    print("    stream worker, so a negative value means the asynchronous handoff costs "
          "more than running the op)")


def miss_cost():
    """Time of a first call (cache miss: Python lowering + compile) for fresh
    shapes, against a cache hit."""
    sync = torch.tpu.synchronize
    ts = []
    s0 = _C.stats()
    for k in range(5):
        a = torch.ones(3 + k, 29, device="tpu")
        sync()
        t0 = time.perf_counter()
        a - a  # noqa: B018  (a signature not seen before)
        sync()
        ts.append(time.perf_counter() - t0)
    s1 = _C.stats()
    comp = s1["compiles"] - s0["compiles"]
    cns = (s1["compile_ns"] - s0["compile_ns"]) / max(comp, 1) / 1e6
    print(f"\nCache miss (first x - x on a new shape): median {median(ts) * 1e3:.2f} ms per call; "
          f"lowering + compile {cns:.2f} ms per executable (from _C.stats(), {comp} compiles)")


def dispatch_profile():
    if "dispatch_profile" not in dir(_C):
        print("\n_C.dispatch_profile: not available in this build")
        return
    try:
        prof = _C.dispatch_profile()
    except Exception as err:
        print(f"\n_C.dispatch_profile() raised {type(err).__name__}: {err}")
        return
    print("\n_C.dispatch_profile() (the C core's own per-stage timers):")
    if isinstance(prof, dict):
        for k, v in prof.items():
            print(f"  {k:40s} {v}")
    else:
        print(f"  {prof!r}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer calls and repetitions")
    args = p.parse_args(argv)
    n, reps = (500, 3) if args.quick else (2000, 7)
    header("eager_overhead: per-op dispatch overhead on small tensors", torch, torchtpu)
    tpu = per_op_table(n, reps)
    stage_breakdown(tpu, n * 2, reps)
    miss_cost()
    dispatch_profile()


if __name__ == "__main__":
    sys.exit(main())

"""A 20-op elementwise chain on 4M-element float32 tensors: PyTorch CPU
eager, tpu strict eager, tpu debug eager, and JAX on CPU (jax.jit of the
same chain, and JAX op-by-op eager) as the XLA-based peer.

    python bench/elementwise_chain.py [--quick] [--numel N]

Throughput counts the bytes an unfused eager chain reads and writes: 12 B
per element for a tensor-tensor op (two reads, one write) and 8 B for a
tensor-scalar or unary op. The same count is used for every row, so a fused
jax.jit chain (which moves far fewer bytes) shows as an "effective" rate.
"""
import argparse
import sys

from _common import (header, import_jax, import_torchtpu, make_loop, ratio, set_mode, table,
                     time_interleaved)

torch, torchtpu = import_torchtpu()

# (op, operand): operand "x"/"y" is a tensor, a float is a scalar, None is unary.
# Values stay in a safe range: x, y in [0.5, 1.5); exp only sees values <= 0.
STEPS = [
    ("add", "y"), ("mul", 0.5), ("sub", "x"), ("div", 1.7), ("mul", "y"),
    ("relu", None), ("add", 1.0), ("neg", None), ("exp", None), ("mul", "x"),
    ("div", "y"), ("sub", 0.25), ("relu", None), ("add", "x"), ("mul", 3.0),
    ("sub", "y"), ("neg", None), ("exp", None), ("div", "x"), ("add", "y"),
]
assert len(STEPS) == 20


def bytes_per_element():
    return sum(12 if isinstance(a, str) else 8 for _, a in STEPS)


def make_chain(relu, exp):
    """The chain for any array library with Python operators."""

    def chain(x, y):
        t = x
        for op, a in STEPS:
            b = x if a == "x" else y if a == "y" else a
            if op == "add":
                t = t + b
            elif op == "sub":
                t = t - b
            elif op == "mul":
                t = t * b
            elif op == "div":
                t = t / b
            elif op == "neg":
                t = -t
            elif op == "relu":
                t = relu(t)
            elif op == "exp":
                t = exp(t)
            else:
                raise ValueError(op)
        return t

    return chain


def check_ops():
    have = set(torchtpu.registered_ops())
    need = {"add": "aten::add.Tensor", "sub": "aten::sub.Tensor", "mul": "aten::mul.Tensor",
            "div": "aten::div.Tensor", "neg": "aten::neg", "relu": "aten::relu",
            "exp": "aten::exp"}
    missing = sorted(v for k, v in need.items() if v not in have)
    if missing:
        print(f"note: not lowered on tpu (will run as CPU fallback): {', '.join(missing)}")


def diff(a, ref):
    d = (a.double() - ref.double()).abs()
    rel = d / ref.double().abs().clamp_min(1e-30)
    return d.max().item(), rel.max().item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--numel", type=int, default=4 * 1024 * 1024)
    args = p.parse_args(argv)
    reps = 3 if args.quick else 7
    n = args.numel
    header(f"elementwise_chain: {len(STEPS)}-op elementwise chain on {n} float32 elements",
           torch, torchtpu)
    check_ops()
    g = torch.Generator().manual_seed(0)
    xc = torch.rand(n, generator=g) + 0.5
    yc = torch.rand(n, generator=g) + 0.5
    xt, yt = xc.to("tpu"), yc.to("tpu")
    chain = make_chain(torch.relu, torch.exp)
    sync = torch.tpu.synchronize

    # correctness first: tpu (both modes) against CPU, printed, not asserted
    ref = chain(xc, yc)
    checks = []
    for debug in (False, True):
        set_mode(torchtpu, debug)
        out = chain(xt, yt).cpu()
        checks.append(("tpu debug eager" if debug else "tpu strict eager", out))
    set_mode(torchtpu, False)

    loop = make_loop("chain(x, y)", ("chain", "x", "y"))
    cases = [("PyTorch CPU eager", loop, [chain, xc, yc], False),
             ("tpu strict eager", loop, [chain, xt, yt], False),
             ("tpu debug eager", loop, [chain, xt, yt], True)]

    jax, jnp = import_jax()
    if jax is not None:
        jchain = make_chain(jax.nn.relu, jnp.exp)
        xj, yj = jnp.asarray(xc.numpy()), jnp.asarray(yc.numpy())
        jit_chain = jax.jit(jchain)
        checks.append(("jax.jit (CPU)", torch.from_numpy(jax.device_get(jit_chain(xj, yj)).copy())))
        checks.append(("jax eager (CPU)", torch.from_numpy(jax.device_get(jchain(xj, yj)).copy())))
        jloop = make_loop("chain(x, y).block_until_ready()", ("chain", "x", "y"))
        cases += [("jax.jit (CPU)", jloop, [jit_chain, xj, yj], False),
                  ("jax eager (CPU)", jloop, [jchain, xj, yj], False)]
        jax_info = f"jax {jax.__version__}, backend {jax.default_backend()}"
    else:
        jax_info = None

    print("\nResult check against PyTorch CPU eager (printed, not asserted):")
    for name, out in checks:
        a, r = diff(out, ref)
        verdict = "ok" if torch.allclose(out, ref, rtol=1e-5, atol=1e-6) else "DIFFERS"
        print(f"  {name:18s} max abs diff {a:.3e}  max rel diff {r:.3e}  "
              f"(rtol 1e-5, atol 1e-6: {verdict})")

    # warm-up: every mode, every case
    for name, lp, vals, debug in cases:
        set_mode(torchtpu, debug)
        lp(1, *vals)
        sync()
    set_mode(torchtpu, False)
    s0 = torchtpu._C.stats()
    res = time_interleaved(cases, 1, reps, sync, lambda debug: set_mode(torchtpu, debug))
    set_mode(torchtpu, False)
    s1 = torchtpu._C.stats()

    bpe = bytes_per_element()
    total_bytes = bpe * n
    t_cpu = res["PyTorch CPU eager"][0]
    t_jit = res.get("jax.jit (CPU)", (None,))[0]
    t_jeager = res.get("jax eager (CPU)", (None,))[0]
    rows = []
    for name, _, _, _ in cases:
        t = res[name][0]
        rows.append([name, f"{t * 1e3:.2f}", f"{t * 1e3 / len(STEPS):.3f}",
                     f"{total_bytes / t / 1e9:.2f}", ratio(t_cpu, t),
                     ratio(t_jit, t) if t_jit else "-", ratio(t_jeager, t) if t_jeager else "-"])
    print(f"\nms per chain: median of {reps} round-robin repetitions; tpu strict includes the")
    print(f"final torch.tpu.synchronize(). GB/s: {bpe} B/element per chain "
          f"({total_bytes / 1e6:.0f} MB), see the docstring.")
    print("speed ratios are throughput ratios (peer time / row time; >1 = faster than the peer)")
    table(["implementation", "ms/chain", "ms/op", "GB/s", "vs CPU eager",
           "vs jax.jit", "vs jax eager"], rows)
    if jax_info:
        print(f"peer: {jax_info}")
    per = reps * 2  # strict + debug chains timed
    d = s1["dispatches"] - s0["dispatches"]
    print(f"tpu counters per timed chain: dispatches {d / per:.0f}, "
          f"tensors created {(s1['tensors_created'] - s0['tensors_created']) / per:.0f}, "
          f"lowerings {s1['lowerings'] - s0['lowerings']} in total")


if __name__ == "__main__":
    sys.exit(main())

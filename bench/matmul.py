"""float32 matmul (n x n @ n x n, n = 256..2048): the tpu device at HIGHEST
precision (fp32) and DEFAULT precision (bf16 inputs, fp32 accumulation, as
a TPU's MXU runs it) against PyTorch CPU and JAX on CPU (jax.jit(jnp.matmul)).

    python bench/matmul.py [--quick] [--sizes 256,512,1024,2048]

Each time is the median over repetitions of one matmul plus
torch.tpu.synchronize() (block_until_ready for JAX), after a warm-up call.
The accuracy column is ||C - C64||_F / ||C64||_F against a float64 product
of the same inputs.
"""
import argparse
import sys
import time

from _common import header, import_jax, import_torchtpu, make_loop, ratio, table, time_interleaved

torch, torchtpu = import_torchtpu()
Precision = torch.tpu.Precision


def rel_err(c, ref64):
    c = c.double()
    return ((c - ref64).norm() / ref64.norm()).item()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument("--sizes", default="256,512,1024,2048")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    budget = 0.6 if args.quick else 1.5  # seconds of timed work per size
    header("matmul: float32 n x n matmul, tpu HIGHEST / DEFAULT vs PyTorch CPU and JAX CPU",
           torch, torchtpu)
    jax, jnp = import_jax()
    sync = torch.tpu.synchronize
    loop = make_loop("f()", ("f",))
    rows = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        a = torch.randn(n, n, generator=g)
        b = torch.randn(n, n, generator=g)
        at, bt = a.to("tpu"), b.to("tpu")
        ref64 = a.double() @ b.double()

        def tpu_mm(prec):
            def f():
                with torch.tpu.precision(prec):
                    c = at @ bt
                sync()
                return c
            return f

        fns = [("PyTorch CPU", lambda: a @ b),
               ("tpu HIGHEST", tpu_mm(Precision.HIGHEST)),
               ("tpu DEFAULT", tpu_mm(Precision.DEFAULT))]
        if jax is not None:
            aj, bj = jnp.asarray(a.numpy()), jnp.asarray(b.numpy())
            jmm = jax.jit(jnp.matmul)
            fns.append(("jax.jit CPU", lambda: jmm(aj, bj).block_until_ready()))

        errs, warm = {}, 0.0
        for name, f in fns:
            t0 = time.perf_counter()
            c = f()  # warm-up (compiles on first use) and the accuracy sample
            warm += time.perf_counter() - t0
            if name.startswith("jax"):
                c = torch.from_numpy(jax.device_get(c).copy())
            errs[name] = rel_err(c.cpu(), ref64)
        reps = max(3, min(15, int(budget / max(warm, 1e-6))))
        res = time_interleaved([(name, loop, [f], None) for name, f in fns], 1, reps, sync)
        t_cpu = res["PyTorch CPU"][0]
        t_jax = res["jax.jit CPU"][0] if jax is not None else None
        flops = 2.0 * n ** 3
        for name, _ in fns:
            t = res[name][0]
            rows.append([str(n), name, f"{t * 1e3:.2f}", f"{flops / t / 1e9:.1f}",
                         ratio(t_cpu, t), ratio(t_jax, t) if t_jax else "-",
                         f"{errs[name]:.1e}", str(reps)])
    print("\nspeed ratios are throughput ratios (peer time / row time; >1 = faster than the peer)")
    table(["n", "implementation", "ms", "GFLOP/s", "vs CPU", "vs JAX", "rel err vs f64",
           "reps"], rows, [">", "<", ">", ">", ">", ">", ">", ">"])
    info = torchtpu._C.device_info()
    print(f"vTPU matmuls run on the host through {info['blas']} "
          f"({info['blas_core']}, {info['host_threads']} threads); the chip's peak "
          f"bf16 rate ({info['peak_bf16_flops'] / 1e12:.0f} TFLOP/s) is not simulated in time.")
    if jax is not None:
        print(f"peer: jax {jax.__version__}, backend {jax.default_backend()}")


if __name__ == "__main__":
    sys.exit(main())

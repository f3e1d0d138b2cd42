"""Shared helpers for the benchmarks in bench/: timing loops, medians, table
printing, mode switching and the optional JAX peer.

Benchmarks are not tests: they print numbers side by side with their peers
from one run and never assert anything about timings.
"""
import os
import statistics
import sys
import time

JAX_MISSING = "jax not installed: pip install jax jaxlib"


def import_torchtpu():
    """Imports torch and torchtpu. The C extension may be rebuilt in place
    while a benchmark starts; one retry covers a half-written .so."""
    import torch

    try:
        import torchtpu
    except ImportError:
        time.sleep(2.0)
        for k in [k for k in sys.modules if k.startswith("torchtpu")]:
            del sys.modules[k]
        import torchtpu
    return torch, torchtpu


def import_jax():
    """(jax, jax.numpy) or (None, None), printing how to install it."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print(JAX_MISSING)
        return None, None
    return jax, jnp


def header(title, torch, torchtpu):
    info = torchtpu._C.device_info()
    try:
        load = "%.2f %.2f %.2f" % os.getloadavg()
    except OSError:
        load = "?"
    print("=" * 78)
    print(title)
    print("=" * 78)
    print(f"torch {torch.__version__} (CPU threads {torch.get_num_threads()}), "
          f"torchtpu {getattr(torchtpu, '__version__', '?')}, device {info['name']} "
          f"(host threads {info['host_threads']}, blas {os.path.basename(str(info['blas']))})")
    print(f"host CPUs {os.cpu_count()}, load average {load} "
          "(other processes on the host skew every row alike)")


def median(xs):
    return statistics.median(xs)


def make_loop(stmt, names):
    """A function loop(n, *values) running `stmt` n times with the values
    bound to `names` as locals: no per-iteration lambda call is measured."""
    args = ", ".join(names)
    src = f"def _loop(_n{', ' if args else ''}{args}):\n    for _ in range(_n):\n        {stmt}\n"
    ns = {}
    exec(compile(src, f"<loop {stmt}>", "exec"), ns)
    return ns["_loop"]


def set_mode(torchtpu, debug):
    """Debug eager (synchronous) when debug, strict eager otherwise."""
    em = torchtpu.execution_mode
    mode = (em.DeferMode.DEFER_NEVER_AND_LAUNCH_BLOCKING if debug
            else em.DeferMode.DEFER_NEVER)
    em.set_defer_mode(mode)


def time_interleaved(cases, n, reps, sync=None, before=None):
    """Times several loops in round-robin, so that load from other processes
    hits all of them alike. cases: [(name, loop, values, mode)], where mode
    is passed to before(mode) ahead of each loop (e.g. to switch execution
    mode). Returns {name: (median s/iter incl. sync, median s/iter until the
    loop returned)}."""
    total = {c[0]: [] for c in cases}
    ret = {c[0]: [] for c in cases}
    for _ in range(reps):
        for name, loop, values, mode in cases:
            if before:
                before(mode)
            if sync:
                sync()
            t0 = time.perf_counter()
            loop(n, *values)
            t1 = time.perf_counter()
            if sync:
                sync()
            t2 = time.perf_counter()
            total[name].append((t2 - t0) / n)
            ret[name].append((t1 - t0) / n)
    return {k: (median(total[k]), median(ret[k])) for k in total}


def time_call(fn, reps, sync=None, warmup=1):
    """Median seconds of fn() (+ sync) over reps runs after warmup runs."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    ts = []
    for _ in range(reps):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        ts.append(time.perf_counter() - t0)
    return median(ts)


def table(headers, rows, aligns=None):
    """Prints rows (lists of str) under headers, columns padded."""
    cols = len(headers)
    widths = [len(h) for h in headers]
    for r in rows:
        for i in range(cols):
            widths[i] = max(widths[i], len(r[i]))
    aligns = aligns or ["<"] + [">"] * (cols - 1)

    def fmt(r):
        return "  ".join(f"{r[i]:{aligns[i]}{widths[i]}}" for i in range(cols)).rstrip()

    print(fmt(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(fmt(r))


def ratio(a, b):
    if a is None or b is None or b == 0:
        return "-"
    return f"{a / b:.2f}x"

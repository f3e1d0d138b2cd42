"""Runs every benchmark in bench/ and prints their tables (`make bench`).

    python bench/run_all.py [--quick]

Each benchmark runs in its own process, so execution modes, precision
settings and caches do not leak between them. Nothing here fails on a
timing; the exit status is non-zero only if a benchmark crashed.
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = ["eager_overhead.py", "elementwise_chain.py", "matmul.py"]
# the C extension may be rebuilt in place while we start: retry once on these
RETRY_MARKERS = ("ImportError", "undefined symbol", "ModuleNotFoundError: No module named 'torchtpu._C'")


def run(script, extra):
    cmd = [sys.executable, os.path.join(HERE, script), *extra]
    for attempt in (1, 2):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             cwd=HERE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines = []
        for line in p.stdout:
            lines.append(line)
            sys.stdout.write(line)
        rc = p.wait()
        dt = time.perf_counter() - t0
        if rc == 0:
            print(f"[{script}: {dt:.1f} s]\n")
            return True
        text = "".join(lines)
        if attempt == 1 and any(m in text for m in RETRY_MARKERS):
            print(f"[{script}: import failed (extension being rebuilt?); retrying once]")
            time.sleep(3)
            continue
        print(f"[{script}: exited with status {rc} after {dt:.1f} s]\n")
        return False
    return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repetitions in every benchmark")
    args = p.parse_args(argv)
    try:
        import jax  # noqa: F401
    except ImportError:
        print("jax not installed: pip install jax jaxlib (continuing without the JAX peer)\n")
    extra = ["--quick"] if args.quick else []
    t0 = time.perf_counter()
    ok = [run(b, extra) for b in BENCHES]
    print(f"run_all: {sum(ok)}/{len(ok)} benchmarks completed in "
          f"{time.perf_counter() - t0:.0f} s")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())

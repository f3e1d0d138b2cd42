"""Counters of what torchtpu did: ops, compiles, cache, fallbacks, copies."""
from . import _C, _fallback, _registry


def counters() -> dict:
    """All counters as a flat dict."""
    s = dict(_C.stats())
    s["cpu_fallbacks"] = sum(_fallback.counts().values())
    return s


def fallback_counts() -> dict:
    """Per-op CPU fallback counts ({'aten::nonzero': 3, ...})."""
    return _fallback.counts()


def op_counts() -> dict:
    """Per-op call counts of ops with a tpu lowering."""
    out = {}
    for name in _registry.registered_ops():
        op = _registry.op_handle(name)
        if op.calls:
            out[name] = op.calls
    return out


def compile_counts() -> dict:
    """Per-op lowering counts (cache misses)."""
    out = {}
    for name in _registry.registered_ops():
        op = _registry.op_handle(name)
        if op.misses:
            out[name] = op.misses
    return out


def reset() -> None:
    _C.reset_stats()
    _fallback.reset()


def short_report() -> str:
    c = counters()
    return (
        f"ops={c['dispatches']} compiles={c['compiles']} "
        f"cache hit/miss={c['cache_hits']}/{c['cache_misses']} "
        f"compile_time={c['compile_ns'] / 1e9:.3f}s cpu_fallbacks={c['cpu_fallbacks']} "
        f"h2d={c['h2d_bytes']}B d2h={c['d2h_bytes']}B syncs={c['syncs']}"
    )


def report() -> str:
    c = counters()
    lines = ["torchtpu metrics", "  " + short_report(), "  executable cache: "
             f"{c['cache_entries']}/{c['cache_capacity']} entries, "
             f"{c['cache_evictions']} evictions"]
    ops = op_counts()
    if ops:
        lines.append("  tpu ops (calls / compiles):")
        comp = compile_counts()
        for name, n in sorted(ops.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:45s} {n:8d} / {comp.get(name, 0)}")
    fb = fallback_counts()
    if fb:
        lines.append("  CPU fallbacks (calls):")
        reasons = _fallback.reasons()
        for name, n in sorted(fb.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:45s} {n:8d}")
            lines.append(f"      {reasons.get(name, '')}")
    return "\n".join(lines)

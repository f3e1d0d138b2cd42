"""Counters of what torchtpu did: ops, compiles, cache, fallbacks, copies."""
from . import _C, _fallback, _registry


_sync_causes = {}


def record_sync(cause: str) -> None:
    """Counts a host synchronization forced by an op whose output shape
    depends on data (nonzero, masked_select, boolean indexing, unique)."""
    _sync_causes[cause] = _sync_causes.get(cause, 0) + 1


def sync_counts() -> dict:
    """Data-dependent synchronizations by cause ({'aten::nonzero': 2})."""
    return dict(_sync_causes)


def sync_points() -> dict:
    """Host synchronizations by cause: reads of tensors, synchronize calls,
    and the data-dependent ops (nonzero, masked_select, ...)."""
    out = {k: v for k, v in _C.sync_stats().items() if v}
    out.update(_sync_causes)
    return out


def counters() -> dict:
    """All counters as a flat dict."""
    s = dict(_C.stats())
    s["cpu_fallbacks"] = sum(_fallback.counts().values())
    s["data_dependent_syncs"] = sum(_sync_causes.values())
    return s


def fallback_counts() -> dict:
    """Per-op CPU fallback counts ({'aten::nonzero': 3, ...})."""
    return _fallback.counts()


_base = {}   # (counter, op name) -> value at the last reset()


def _per_op(counter):
    out = {}
    for name in _registry._OPS:
        n = getattr(_registry.op_handle(name), counter) - _base.get((counter, name), 0)
        if n:
            out[name] = n
    return out


def not_native_counts() -> dict:
    """Per-op calls computed in dtypes a TPU does not have natively: float64
    programs, and complex ops computed on float planes (a TPU has no complex
    units; XLA splits complex values the same way)."""
    from .lowering import complex as _complex

    out = _per_op("non_native_calls")
    for name, n in _complex.counts().items():
        out[name] = out.get(name, 0) + n
    return out


def op_counts() -> dict:
    """Per-op call counts of ops with a tpu lowering (since reset())."""
    return _per_op("calls")


def compile_counts() -> dict:
    """Per-op lowering counts (cache misses, since reset())."""
    return _per_op("misses")


def reset() -> None:
    from .lowering import complex as _complex

    _C.reset_stats()
    _fallback.reset()
    _complex.reset()
    for name in _registry._OPS:
        op = _registry.op_handle(name)
        for counter in ("calls", "misses", "non_native_calls"):
            _base[(counter, name)] = getattr(op, counter)
    _sync_causes.clear()


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
    sp = sync_points()
    if sp:
        lines.append("  host synchronizations by cause:")
        for name, n in sorted(sp.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:45s} {n:8d}")
    nn = not_native_counts()
    if nn:
        lines.append("  not native on TPU (float64 programs, complex on float planes), calls:")
        for name, n in sorted(nn.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:45s} {n:8d}")
    fb = fallback_counts()
    if fb:
        lines.append("  CPU fallbacks (calls):")
        reasons = _fallback.reasons()
        for name, n in sorted(fb.items(), key=lambda kv: -kv[1]):
            lines.append(f"    {name:45s} {n:8d}")
            lines.append(f"      {reasons.get(name, '')}")
    return "\n".join(lines)

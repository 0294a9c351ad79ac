"""What a run's compiles cost, apart from its measuring: one line for the answer's warnings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsight_agent.engine.harness import render
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest


def build_note(pre: PreflightResult | None, request: ProfileRequest, seconds: float) -> str | None:
    """The pre-flight's builds (a candidate's own ``load_inline`` and the ``cuda`` language's
    source): seconds each, or cached, and their share of the call's ``seconds``."""
    builds = list(pre.builds) if pre is not None else []
    cuda = pre.cuda_build if pre is not None else None
    if not builds and not cuda:
        return None
    names = _variants_by_module(request)
    parts = [
        f"{', '.join(repr(n) for n in names.get(b['module'], [b['module']]))}: " + _cost(b)
        for b in builds
    ]
    if cuda:
        parts.append("the CUDA source: " + _cost(cuda))
    alone = [b for b in [*builds, *([cuda] if cuda else [])] if not b.get("parallel")]
    together = [
        float(b.get("wall") or b.get("seconds") or 0.0) for b in builds if b.get("parallel")
    ]
    # Sources built side by side share one wall time: counted once.
    total = sum(float(b.get("seconds") or 0.0) for b in alone) + max(together, default=0.0)
    return (
        f"compile: {total:.1f} s of this call's {float(seconds):.1f} s, before measuring "
        f"and outside every measured time ({'; '.join(parts)})"
    )


def _cost(build: dict[str, Any]) -> str:
    seconds = float(build.get("seconds") or 0.0)
    if build.get("cache_hit"):
        return f"built before, loaded in {seconds:.1f} s"
    if build.get("parallel"):
        return f"compiled in {seconds:.1f} s, {build['parallel']} sources at once"
    return f"compiled in {seconds:.1f} s"


def _variants_by_module(request: ProfileRequest) -> dict[str, list[str]]:
    try:
        spec, _ = render.spec_for(request, Path())
    except (AttributeError, TypeError, ValueError):  # a request that does not render
        return {}
    out: dict[str, list[str]] = {}
    for v in spec["variants"]:
        out.setdefault(v["module"], []).append(v["name"])
    return out

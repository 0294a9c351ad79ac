"""What a run's compiles cost, apart from its measuring: one line for the answer's warnings.

The pre-flight records each build by the module it built; the variants of that module are
read from the request as the harness names its modules (a variant with a source of its own
is ``variant_<i>``, the rest share the main one), without rendering the harness."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nsight_agent.engine.harness.render import MAIN_MODULE
from nsight_agent.engine.store.run_status import read_status
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest


def build_note(
    pre: PreflightResult | None,
    request: ProfileRequest,
    seconds: float,
    stage_seconds: Mapping[str, float] | None = None,
) -> str | None:
    """The pre-flight's builds (a candidate's own ``load_inline`` and the ``cuda`` language's
    source): seconds each, or cached, and their share of the call's ``seconds`` (a build made
    before the call queued for a GPU is said apart, outside those seconds); with the
    run's ``stage_seconds``, where the rest of the call went (the pre-flight's own seconds
    beside its builds, then each later stage)."""
    builds = list(pre.builds) if pre is not None else []
    cuda = pre.cuda_build if pre is not None else None
    if not builds and not cuda:
        return None
    names = variants_by_module(request)
    labelled = [(", ".join(map(repr, names.get(b["module"], [b["module"]]))), b) for b in builds]
    labelled += [("the CUDA source", cuda)] if cuda else []
    here = [(label, b) for label, b in labelled if not b.get("ahead")]
    ahead = [(label, b) for label, b in labelled if b.get("ahead")]
    alone = [b for _, b in here if not b.get("parallel")]
    together = [
        float(b.get("wall") or b.get("seconds") or 0.0) for _, b in here if b.get("parallel")
    ]
    # Sources built side by side share one wall time: counted once.
    total = sum(float(b.get("seconds") or 0.0) for b in alone) + max(together, default=0.0)
    said = []
    if here:
        said.append(
            f"{total:.1f} s of this call's {float(seconds):.1f} s, before measuring and outside "
            f"every measured time ({'; '.join(f'{label}: {_cost(b)}' for label, b in here)})"
        )
    if ahead:
        said.append(
            f"built ahead, before this call queued for a GPU and holding none (not in its "
            f"{float(seconds):.1f} s): {'; '.join(f'{label}: {_cost(b)}' for label, b in ahead)}"
        )
    return "compile: " + "; ".join(said) + _rest(stage_seconds, total if here else None)


def stage_seconds_of(run_dir: Path) -> dict[str, float] | None:
    """The run's wall seconds by stage, from its status record (None if it has none)."""
    found = (read_status(run_dir) or {}).get("stage_seconds")
    return found if isinstance(found, dict) else None


def _rest(stage_seconds: Mapping[str, float] | None, compiled: float | None) -> str:
    """ "; the rest: pre-flight 6.1 s beside the compile, ncu 18.3 s, ...": the stages of
    0.1 s or more, the pre-flight less its builds (``compiled``: None, it built nothing)."""
    if not stage_seconds:
        return ""
    parts = []
    for stage, spent in stage_seconds.items():
        if stage == "pre-flight" and compiled is None:
            parts.append(f"pre-flight {float(spent):.1f} s")
        elif stage == "pre-flight" and compiled is not None:
            parts.append(f"pre-flight {max(0.0, float(spent) - compiled):.1f} s beside the compile")
        elif float(spent) >= 0.1:
            parts.append(f"{stage} {float(spent):.1f} s")
    return f"; the rest: {', '.join(parts)}" if parts else ""


def _cost(build: dict[str, Any]) -> str:
    seconds = float(build.get("seconds") or 0.0)
    if build.get("ahead"):
        at_once = int(build.get("parallel") or 1)
        waited = float(build.get("waited") or 0.0)
        return (
            f"compiled in {seconds:.1f} s"
            + (f", {at_once} builds at once" if at_once > 1 else "")
            + (f", after {waited:.1f} s waiting for a build slot" if waited >= 0.1 else "")
        )
    if build.get("cache_hit"):
        return f"built before, loaded in {seconds:.1f} s"
    if build.get("parallel"):
        return f"compiled in {seconds:.1f} s, {build['parallel']} sources at once"
    return f"compiled in {seconds:.1f} s"


def variants_by_module(request: ProfileRequest) -> dict[str, list[str]]:
    """Module name -> the variants it holds, as the harness names its modules."""
    out: dict[str, list[str]] = {}
    for i, v in enumerate(request.effective_variants()):
        own = v.source is not None and v.source != request.source
        out.setdefault(f"variant_{i}" if own else MAIN_MODULE, []).append(v.name)
    return out

"""A pre-flight that broke with several variants: each candidate again beside the baseline,
in a new process, so that its crash is its own row and the others are still measured.

A candidate that breaks the CUDA context (an illegal address, a device-side assert), aborts
or segfaults takes the whole harness down, and the error surfaces at whatever touches the GPU
next, often the baseline's call or the output check: "check failed [variant 'ref']". So the
baseline runs alone first (if it fails alone, the failure is its own and the run ends), then
each candidate beside it, one process each: a candidate whose pair breaks is dropped with
verdict ``error`` (its own message when the harness caught it, else the pair's), one that runs
past the limit with ``timeout``. If every pair passes, the variants fail only together and
the first error stands.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nsight_agent.engine.collection import preflight_run
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.errors import CollectionTimeoutError
from nsight_agent.request import ProfileRequest

ALONE_PREFIX = "alone-"


def attributed(
    first: Callable[[], PreflightResult],
    run_dir: Path,
    request: ProfileRequest,
    device: str,
    poll: Callable[[], None] | None,
) -> PreflightResult:
    """The pre-flight ``first``; when it broke (or hung) with several variants, each candidate
    again beside the baseline: the ones that crash or hang are dropped (``error``,
    ``timeout``) and the rest pre-flighted again without them, in a new process (cold: devices
    are named as a new process sees them)."""
    try:
        pre: PreflightResult | None = first()
    except CollectionTimeoutError:
        if not worth_isolating(request):
            raise
        pre = None
    first_prefix = preflight_run.PREFLIGHT_PREFIX
    if pre is not None and not (broken(pre, run_dir, first_prefix) and worth_isolating(request)):
        return pre
    crashed = crashed_variants(run_dir, request, device, poll)
    if not crashed:  # they fail only together: the first error stands
        if pre is None:
            raise CollectionTimeoutError(
                f"The pre-flight ran past its {request.timeout_s:g} s limit; every variant "
                "ran in time beside the baseline, so only all of them together do not.",
                "Raise options.timeout_s, or compare fewer variants per call.",
            )
        return pre
    again = preflight_run.run_preflight(run_dir, request, device, poll, skip=sorted(crashed))
    again.dropped = {**again.dropped, **crashed}
    (run_dir / f"{preflight_run.PREFLIGHT_PREFIX}result.json").write_text(
        again.model_dump_json(indent=1)
    )  # the run folder says which variants were dropped, and why
    return again


def broken(pre: PreflightResult, run_dir: Path, prefix: str) -> bool:
    """The run itself failed, not only a variant's outputs or a variant on its own: a stage
    before the check, or a harness that wrote an error report. A broken CUDA context surfaces
    wherever the GPU is touched next, often in the output check ("check failed [variant
    'ref']"), which is then no verdict on outputs but the harness failing."""
    if pre.ok:
        return False
    return pre.stage not in ("check", "variant") or (run_dir / f"{prefix}error.json").is_file()


def worth_isolating(request: ProfileRequest) -> bool:
    return len(request.effective_variants()) > 1


def crashed_variants(
    run_dir: Path, request: ProfileRequest, device: str, poll: Callable[[], None] | None
) -> dict[str, DroppedVariant]:
    """name -> dropped record (verdict, stage, message, line) of each candidate that fails
    beside the baseline; the baseline's own failure is raised."""
    base = request.baseline_name()
    names = [v.name for v in request.effective_variants()]

    def prefix_of(keep: list[str]) -> str:
        return f"{ALONE_PREFIX}{_safe(keep[-1])}-"

    def pair(keep: list[str]) -> PreflightResult:
        skip = [n for n in names if n not in keep]
        return preflight_run.run_preflight(
            run_dir, request, device, poll, skip=skip, prefix=prefix_of(keep)
        )

    alone = pair([base])  # a timeout here is the baseline's: raised as it is
    if broken(alone, run_dir, prefix_of([base])):
        message = "\n".join(alone.errors) or "the pre-flight failed"
        raise SourceError(alone.stage or "entry", message, line=alone.line, variant=base)
    found: dict[str, DroppedVariant] = {}
    for name in names:
        if name == base:
            continue
        try:
            beside = pair([base, name])
        except CollectionTimeoutError:
            found[name] = DroppedVariant(
                verdict="timeout",
                stage="entry",
                message=f"ran past the {request.timeout_s:g} s limit beside the baseline "
                "(which passed alone) and was killed; the other variants were measured",
            )
            continue
        if broken(beside, run_dir, prefix_of([base, name])):
            own = beside.dropped.get(name)
            message = (own.message if own else "") or "\n".join(beside.errors)
            line = (own.line if own else None) or beside.line
            where: dict[str, Any] = {"line": line} if line else {}  # no key when not known
            found[name] = DroppedVariant(
                verdict="error",
                stage=(own.stage if own else "") or beside.stage or "entry",
                message=f"{message} (it broke the run; the baseline passed alone)",
                **where,
            )
    return found


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._" else "_" for c in name)[:40]

"""Profile, compare, roofline: build the request from what the caller sent, measure it by
ncu or timing, return the run (its report, for the roofline)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nsight_agent.catalog import skills
from nsight_agent.diagnose import metrics as dm
from nsight_agent.errors import NsightAgentError, Problem
from nsight_agent.judge.run_warnings import budget_note
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.service.measure import (
    NO_NCU_COUNTERS,
    Measuring,
    Method,
    RunResult,
    measure,
    require_ncu,
)
from nsight_agent.service.runs import report_of
from nsight_agent.service.validate import validate


def build_request(**fields: Any) -> ProfileRequest:
    """A validated request (``service/validate.py``, no method's options checked): ``skill``
    merges its bundle, no metric means the time metric; ``None`` values take the defaults."""
    return validate(fields).request


def profile(
    where: Measuring,
    method: Method = "ncu",
    budget_s: float | None = None,
    *,
    files: Mapping[str, str] | None = None,
    also: Sequence[Problem] = (),
    **fields: Any,
) -> RunResult:
    """``profile_kernel`` and ``compare_variants`` (and the CLI's ``profile``/``compare``):
    the request built from ``fields`` and validated for ``method`` (``files``: the file each
    source came from, for the messages; ``also``: the front end's own problems, listed with
    the request's), then measured. ``budget_s`` (ncu): the sections
    asked for, in their order, that fit it once the pre-flight has counted the kernels
    (engine/collection/budget.py); the run's warnings say what was left out."""
    checked = validate({**fields, "budget_s": budget_s}, method, files=files, also=also)
    request = checked.request
    run = checked.finish(measure(request, method, where))
    if budget_s is None:
        return run
    said = budget_note(run)
    if not request.sections:  # said, not ignored: the metrics alone are never left out
        said = f"budget_s {budget_s:g} s: no sections asked for, nothing to leave out"
    run.warnings += [said] if said else []
    return run


def roofline_collection() -> tuple[list[str], list[str]]:
    """The roofline skill bundle when the skills folder is here, else diagnose's sections."""
    try:
        bundle = skills.get_skill("roofline")
        return list(bundle.metrics), list(bundle.sections)
    except NsightAgentError:
        return [TIME_METRIC], dm.bound_sections()


def roofline(
    where: Measuring,
    *,
    warmup: int | None = None,
    files: Mapping[str, str] | None = None,
    also: Sequence[Problem] = (),
    **fields: Any,
) -> tuple[RunResult, Path]:
    """``roofline_metrics`` from source: one run per config with the roofline collection,
    under ncu; the run and its report (``files``, ``also``: as ``profile``'s)."""
    metrics, sections = roofline_collection()
    collect = {"metrics": metrics, "sections": sections, "runs": 1}
    given = {**fields, **collect, "warmup": 1 if warmup is None else warmup}
    request = validate(given, "ncu", files=files, also=also).request
    require_ncu(where, NO_NCU_COUNTERS.format(what="A roofline", tool="roofline_metrics"))
    run = measure(request, "ncu", where)
    return run, report_of(run)

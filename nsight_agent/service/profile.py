"""Profile, compare, roofline: build the request from what the caller sent, measure it by
ncu or timing, return the run (its report, for the roofline)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsight_agent.catalog import metrics as catalog
from nsight_agent.catalog import skills
from nsight_agent.diagnose import metrics as dm
from nsight_agent.errors import InvalidRequestError, NsightAgentError
from nsight_agent.judge.run_warnings import budget_note
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.service.measure import Measuring, Method, RunResult, measure
from nsight_agent.service.runs import report_of


def build_request(**fields: Any) -> ProfileRequest:
    """A validated request: ``skill`` merges its bundle, no metric means the time metric.

    ``None`` values are dropped so the request's own defaults apply.
    """
    skill = fields.pop("skill", None)
    metrics: list[str] = list(fields.pop("metrics", None) or [])
    sections: list[str] = list(fields.pop("sections", None) or [])
    if skill:
        bundle = skills.get_skill(skill)
        metrics = list(dict.fromkeys([*bundle.metrics, *metrics]))
        sections = list(dict.fromkeys([*bundle.sections, *sections]))
        fields.setdefault("replay_mode", bundle.replay_mode)
    if not metrics and not sections:
        metrics = [TIME_METRIC]
    catalog.validate_metrics(metrics)
    catalog.validate_sections(sections)
    clean = {k: v for k, v in fields.items() if v is not None}
    return ProfileRequest(metrics=metrics, sections=sections, **clean)


def profile(
    where: Measuring, method: Method = "ncu", budget_s: float | None = None, **fields: Any
) -> RunResult:
    """``profile_kernel`` and ``compare_variants`` (and the CLI's ``profile``/``compare``):
    the request built from ``fields``, measured by ``method``. ``budget_s`` (ncu): the
    sections asked for, in their order, that fit it once the pre-flight has counted the
    kernels (engine/collection/budget.py); the run's warnings say what was left out."""
    if method == "timing":
        refuse_counters(fields)
        if budget_s is not None:
            raise InvalidRequestError(
                "options.budget_s chooses which ncu sections to collect; method='timing' "
                "collects none (it times the call), so there is nothing to leave out.",
                "Drop budget_s, or use method='ncu' with sections to collect within it.",
            )
    if budget_s is None:
        return measure(build_request(**fields), method, where)
    request = build_request(**fields, budget_s=budget_s)
    run = measure(request, method, where)
    said = budget_note(run)
    if not request.sections:  # said, not ignored: the metrics alone are never left out
        said = f"budget_s {budget_s:g} s: no sections asked for, nothing to leave out"
    run.warnings += [said] if said else []
    return run


def refuse_counters(fields: dict[str, Any]) -> None:
    """The timing path measures time only: counters asked of it are refused, not dropped."""
    asked = [k for k in ("metrics", "skill", "sections") if fields.get(k)]
    if fields.get("metrics") and list(fields["metrics"]) == [TIME_METRIC]:
        asked.remove("metrics")
    if asked:
        raise InvalidRequestError(
            f"method 'timing' measures each call's time only; it cannot collect {' or '.join(asked)}.",
            "Leave them out for a timing run, or use method 'ncu' (--method ncu), which "
            "collects metrics, skills and sections.",
        )


def roofline_collection() -> tuple[list[str], list[str]]:
    """The roofline skill bundle when the skills folder is here, else diagnose's sections."""
    try:
        bundle = skills.get_skill("roofline")
        return list(bundle.metrics), list(bundle.sections)
    except NsightAgentError:
        return [TIME_METRIC], dm.bound_sections()


def roofline(
    where: Measuring, *, warmup: int | None = None, **fields: Any
) -> tuple[RunResult, Path]:
    """``roofline_metrics`` from source: one run per config with the roofline collection,
    under ncu; the run and its report."""
    metrics, sections = roofline_collection()
    request = build_request(
        metrics=metrics,
        sections=sections,
        runs=1,
        warmup=1 if warmup is None else warmup,
        **fields,
    )
    run = measure(request, "ncu", where)
    return run, report_of(run)

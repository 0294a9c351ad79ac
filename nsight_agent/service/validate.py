"""The validation stage: every check of a request that needs nothing of the machine, run
before anything that does, for every front end (MCP tools, CLI, the service functions) and
both methods.

``validate(fields, method, files=...)`` checks, and collects every problem found:

1. the sources (``source_checks``): each compiles, with its file (or ``source``, ``variant
   'new' source``) and line; the language of a source sent without one (KernelBench, CUDA);
   the names the contract or KernelBench needs at module level;
2. the request's fields (pydantic's errors, in a user's words);
3. metric, section and skill names, each unknown one with close matches;
4. the options the method cannot honour (``method_problems``), and a time basis or
   KernelBench trial count the request cannot apply (``basis_checks``): refused, never
   ignored.

Then either ``RequestRejected`` with all of them, or the request to measure. A problem of a
candidate's own source drops that candidate alone, with the verdict a candidate that raises
at import gets (``error`` at stage ``import``, its file and line in the message): the others
are measured, and ``Validated.finish`` adds it to the run's result. A request left with no
candidate beside its baseline is rejected (nothing is worth measuring). The environment
(ncu, a GPU for CUDA) is checked after this stage, by ``service/measure.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from nsight_agent.arguments import problems_of
from nsight_agent.catalog import metrics as catalog
from nsight_agent.catalog import skills
from nsight_agent.engine.store import run_status, runs
from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.errors import NsightAgentError, Problem, RequestRejected
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.service.basis_checks import basis_problems
from nsight_agent.service.source_checks import check_sources, variants_of

Method = Literal["ncu", "timing"]

TIMING_HINT = (
    "Leave it out for a timing run, or use method 'ncu' (--method ncu), which collects "
    "metrics, skills and sections and honours ncu's replay and clock options."
)
COUNTERS = "method 'timing' measures each call's time only; it cannot collect"
# What the timing path cannot honour (a warm worker times each call: no ncu, no counters, no
# replay, no report): field -> (its default, why a value other than it is refused).
TIMING_REFUSES: dict[str, tuple[Any, str]] = {
    "sections": ([], f"{COUNTERS} sections"),
    "report_counters": ([], f"{COUNTERS} counters"),
    "skill": (None, f"{COUNTERS} a skill's metric bundle"),
    "clock_control": (
        "none",
        "locks the GPU clocks for ncu's passes (--clock-control); method 'timing' runs at the "
        "clocks the GPU chooses and would ignore it",
    ),
    "replay_mode": (
        "kernel",
        "is how ncu replays work for its passes; method 'timing' replays nothing",
    ),
    "torch_ranges": (
        False,
        "records operator ranges into ncu's report; method 'timing' writes none",
    ),
    "sample_launches": (
        False,
        "chooses the launches ncu profiles; method 'timing' times every call",
    ),
    "ignore_kernels": (
        [],
        "leaves kernels out of ncu's rows; method 'timing' times each call's GPU activity "
        "whole, every kernel in it",
    ),
    "combine_kernels": (
        "sum",
        "keeps a row per kernel under ncu; method 'timing' gives a call one time",
    ),
    "budget_keep": (0, "belongs to budget_s, which chooses ncu sections"),
}


BOM = "\ufeff"


def _without_bom(given: dict[str, Any]) -> dict[str, Any]:
    """The sources without a leading byte-order mark, as Python reads a file that starts with
    one (an editor's UTF-8 BOM): ``compile`` of the text would call it a syntax error."""
    for key in ("source", "cuda_source"):
        if isinstance(given.get(key), str) and given[key].startswith(BOM):
            given[key] = given[key][1:]
    if isinstance(given.get("variants"), list):
        given["variants"] = [_variant_without_bom(v) for v in given["variants"]]
    return given


def _variant_without_bom(variant: Any) -> Any:
    """A variant (a dict, or a ``Variant``) whose own source starts with a BOM, without it."""
    source = (
        variant.get("source") if isinstance(variant, dict) else getattr(variant, "source", None)
    )
    if not isinstance(source, str) or not source.startswith(BOM):
        return variant
    if isinstance(variant, dict):
        return {**variant, "source": source[1:]}
    return variant.model_copy(update={"source": source[1:]})


@dataclass(frozen=True)
class Validated:
    """A request that passed: what to measure (its candidates dropped at validation left
    out) and those candidates' verdicts."""

    request: ProfileRequest
    dropped: dict[str, DroppedVariant] = field(default_factory=dict)

    def finish(self, run: runs.RunResult) -> runs.RunResult:
        """The run with the candidates dropped here among its failed variants, stored."""
        if not self.dropped:
            return run
        run.dropped = {**run.dropped, **self.dropped}
        runs.save_result(run)
        entries = {n: d.status_entry() for n, d in self.dropped.items()}
        run_status.add_failed_alone(run.run_dir, entries)
        return run


def validate(
    fields: Mapping[str, Any],
    method: Method | None = None,
    *,
    files: Mapping[str, str] | None = None,
    also: Sequence[Problem] = (),
) -> Validated:
    """``fields`` (a ``ProfileRequest``'s, plus ``skill``; None values take the defaults)
    checked for ``method`` (None: no method's options checked); ``files``: the file each
    source came from, by variant name ("" for the shared source); ``also``: problems the
    front end found in its own arguments, listed with these. Raises ``RequestRejected``."""
    given = _without_bom({k: v for k, v in fields.items() if v is not None})
    found, language = check_sources(given, files)
    given.setdefault("language", language)  # None: not told (the shared source must compile)
    drop = {p.variant for p in found if p.variant}
    problems = list(found)
    build, named = _collected(given, method)
    names = [v.name for v in variants_of(build) or []]
    if language is None:  # whether configs are needed waits for the language
        build.update(language="triton", configs=build.get("configs", [{}]))
    if drop:
        build["variants"] = [v for v, n in zip(build["variants"], names) if n not in drop]
    request = None
    try:
        request = ProfileRequest(**build)
    except ValidationError as err:
        shared = any(p.variant is None for p in found)
        kept = [n for n in names if n not in drop]
        for p in problems_of(err, ProfileRequest.model_fields, kept):
            if not (shared and p.code == "request"):  # the sources' own problems said it
                problems.append(p)
    problems += named + _method_problems(given, method) + basis_problems(build) + list(also)
    left = request is not None and any(
        v.name != request.baseline_name() for v in request.effective_variants()
    )
    if request is None or any(p.variant is None for p in problems) or (drop and not left):
        raise RequestRejected(problems)
    return Validated(request, _dropped(found, files or {}))


def _collected(
    given: dict[str, Any], method: Method | None
) -> tuple[dict[str, Any], list[Problem]]:
    """The fields with ``skill`` merged into metrics and sections (no metric: the time), and
    every unknown metric, section or skill name."""
    build = dict(given)
    problems: list[Problem] = []
    skill = build.pop("skill", None)
    metrics: list[str] = list(build.pop("metrics", None) or [])
    sections: list[str] = list(build.pop("sections", None) or [])
    if skill:
        try:
            bundle = skills.get_skill(skill)
            if method != "timing":
                metrics = list(dict.fromkeys([*bundle.metrics, *metrics]))
                sections = list(dict.fromkeys([*bundle.sections, *sections]))
                build.setdefault("replay_mode", bundle.replay_mode)
        except NsightAgentError as err:
            problems.append(Problem("unknown_skill", "skill", err.message, hint=err.hint))
    for name in metrics:
        problems += _name_problem("unknown_metric", "metrics", catalog.validate_metrics, name)
    for name in sections:
        problems += _name_problem("unknown_section", "sections", catalog.validate_sections, name)
    build["metrics"] = metrics or ([] if sections else [TIME_METRIC])
    build["sections"] = sections
    return build, problems


def _name_problem(code: str, where: str, check: Any, name: str) -> list[Problem]:
    try:
        check([name])
    except NsightAgentError as err:
        return [Problem(code, where, err.message, hint=err.hint)]
    return []


def _method_problems(given: Mapping[str, Any], method: Method | None) -> list[Problem]:
    """Each option set (to other than its default) that ``method`` cannot honour."""
    if method != "timing":
        return []
    problems = []
    asked = [m for m in given.get("metrics") or [] if m != TIME_METRIC]
    if asked:
        message = f"{COUNTERS} metrics ({', '.join(asked)})"
        problems.append(Problem("option_method", "metrics", message, hint=TIMING_HINT))
    for name, (default, why) in TIMING_REFUSES.items():
        value = given.get(name, default)
        if value != default and value not in (None, []):
            said = why if why.startswith(COUNTERS) else f"{name}={value!r} {why}"
            problems.append(Problem("option_method", name, said, hint=TIMING_HINT))
    if given.get("budget_s") is not None:
        problems.append(
            Problem(
                "option_method",
                "budget_s",
                "budget_s chooses which ncu sections to collect; method='timing' collects "
                "none (it times the call), so there is nothing to leave out",
                hint="Drop budget_s, or use method='ncu' with sections to collect within it.",
            )
        )
    return problems


def _dropped(found: list[Problem], files: Mapping[str, str]) -> dict[str, DroppedVariant]:
    """The candidates dropped here, as a run records a candidate that raised at import."""
    out: dict[str, DroppedVariant] = {}
    for p in found:
        if p.variant is None:
            continue
        said = out[p.variant].message + "; " if p.variant in out else ""
        out[p.variant] = DroppedVariant(
            verdict="error",
            stage="import",
            message=said + p.text(),
            line=p.line,
            file=files.get(p.variant),
        )
    return out

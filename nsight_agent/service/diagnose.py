"""The diagnose use case: a report, an earlier run, or source profiled.

From source: one ncu run with every section the checks read (every one a diagnosis could ask
a deeper pass for), torch operator ranges and a few counters (DRAM bytes, tensor precision),
diagnosed. One run, not a cheap pass and then a deeper one: the two passes cost more than one
run of ncu's full set, as each pays ncu's start-up and the second replays every kernel again
with the first's sections too (``bench/deeper_pass.py`` measures both ways). ``deep=False`` runs
the cheap sections alone. With ``time_step``, one call is also timed on the timing path (the
host-gap finding). Every run goes through ``measure``, so the executor in use (the server's
GPU slots, a Ray pool) runs them all.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from nsight_agent.catalog import metrics as catalog
from nsight_agent.diagnose.bound import TENSOR_MIX
from nsight_agent.diagnose.by_name import BY_NAME_SECTIONS, COUNTERS
from nsight_agent.diagnose.checks_memory import TABLE_METRICS
from nsight_agent.diagnose.kernel import DEEPER, DEEPER_ORDER
from nsight_agent.engine.collection.launch_sampling import PreLaunch
from nsight_agent.errors import (
    InvalidRequestError,
    NsightAgentError,
    Problem,
    RequestRejected,
    RunCancelledError,
    UnknownMetricError,
)
from nsight_agent.judge import diagnosis
from nsight_agent.judge.reading import read_report
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.service.measure import (
    NO_NCU_COUNTERS,
    Measuring,
    RunResult,
    measure,
    require_ncu,
    require_torch,
)
from nsight_agent.service.runs import load_run
from nsight_agent.service.validate import validate
from nsight_agent.views.diagnosis import ReportDiagnosis, report_diagnosis

# The cheap sections: bound, launch shape, occupancy and the fp32/fp64 roofline.
FIRST_PASS_SECTIONS = ["SpeedOfLight", "LaunchStats", "Occupancy", "SpeedOfLight_RooflineChart"]
# One run: the cheap sections and every one a diagnosis may ask a deeper pass for.
ONE_PASS_SECTIONS = [*FIRST_PASS_SECTIONS, *(s for s in DEEPER if s not in FIRST_PASS_SECTIONS)]
# What goes to ncu by name instead of as sections (diagnose/by_name.py), chosen by
# NSIGHT_AGENT_DIAGNOSE_PASS: "counters" (the default) asks by name for what the checks read of
# every section they read only counters of; "tables" does so for the memory tables alone, which
# take 30 replay passes alone, all ten sections 34, on an H100
# (bench/results/section-costs/2026-12-06-h100-80gb-hbm3-1f031cd.json); "sections" asks for
# every section. The counters go into the report only (a kernel without one is no error). On
# an H100 the counters' one pass is 1.675x a pre-launched profile of the same kernel
# (bench/results/prelaunch/2026-12-06-h100-80gb-hbm3-2f84c92.json, diagnose_over_same_kernel;
# ``bench/prelaunch.py --by-name sections`` times the sections' pass beside it), with the
# planted kernels' first causes kept (docs/DIAGNOSIS.md).
TABLES = "MemoryWorkloadAnalysis_Tables"
PASS_ENV = "NSIGHT_AGENT_DIAGNOSE_PASS"
OnePass = Literal["sections", "tables", "counters"]
ONE_PASS_CHOICES: tuple[OnePass, ...] = ("sections", "tables", "counters")
BY_NAME: dict[OnePass, tuple[tuple[str, ...], tuple[str, ...]]] = {  # -> (sections out, counters)
    "sections": ((), ()),
    "tables": ((TABLES,), TABLE_METRICS),
    "counters": (BY_NAME_SECTIONS, COUNTERS),
}


def one_pass_choice(budgeted: bool = False) -> OnePass:
    """What the one pass asks for by name (``PASS_ENV``). Unset: the counters, but the sections
    under a budget, which leaves sections out by what each was measured to cost
    (engine/collection/budget.py) and has no cost for a counter asked by name."""
    chosen = os.environ.get(PASS_ENV) or ("sections" if budgeted else "counters")
    for choice in ONE_PASS_CHOICES:
        if chosen == choice:
            return choice
    raise InvalidRequestError(
        f"{PASS_ENV}={chosen!r} is not one of {', '.join(ONE_PASS_CHOICES)}",
        f"Set {PASS_ENV}=counters (every section the checks read only counters of, by name: "
        "the default), tables (the memory tables' counters by name) or sections (every "
        "section), or unset it.",
    )


def one_pass(choice: OnePass) -> tuple[list[str], list[str]]:
    """(sections, report counters) of the one pass: the counters not already asked for as
    metrics that this GPU's ncu knows (the checks fall back where one is missing, as on a
    report without it)."""
    out, counters = BY_NAME[choice]
    sections = [s for s in ONE_PASS_SECTIONS if s not in out]
    asked = set(FIRST_PASS_METRICS)
    return sections, [m for m in counters if m not in asked and catalog.is_valid_metric(m)]


# Cheap counters beside the first pass: DRAM bytes (the fusion finding) and the tensor op
# counts by source precision (the precision label of a tensor-core kernel).
FIRST_PASS_METRICS = [
    TIME_METRIC,
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    *TENSOR_MIX.values(),
]
# What a budget keeps first: the cheap sections (the bound), then what a deeper pass adds first.
BUDGET_ORDER = [*FIRST_PASS_SECTIONS, *(s for s in DEEPER_ORDER if s not in FIRST_PASS_SECTIONS)]
BUDGET_ORDER += [s for s in DEEPER if s not in BUDGET_ORDER]


def budget_order(sections: list[str], budget_s: float | None) -> list[str]:
    """``sections`` most needed first when there is a budget (engine/collection/budget.py
    keeps them in order while they fit); as they are without one."""
    if budget_s is None:
        return sections
    return [s for s in BUDGET_ORDER if s in sections] + [
        s for s in sections if s not in BUDGET_ORDER
    ]


def _time_one_call(first: ProfileRequest, where: Measuring) -> tuple[RunResult | None, str]:
    """(the timing run of one call, what it was for), or (None, why not) when the timing path
    cannot run here; a cancel is not a reason to go on, so it is raised."""
    try:
        run = measure(first.model_copy(update={"metrics": [TIME_METRIC]}), "timing", where)
    except RunCancelledError:
        raise
    except NsightAgentError as err:
        logging.getLogger("nsight_agent").warning("step wall time not measured: %s", err.message)
        return None, f"step wall time not measured (timing path: {err.message})"
    return run, f"timing (run {run.run_id}): one call's wall time"


def _one_run(first: ProfileRequest, where: Measuring) -> tuple[RunResult, ProfileRequest, str]:
    """The first ncu run; when ncu refuses a counter asked for by name (its catalog was read
    from another ncu), the same run with the sections, which every ncu has, and why."""
    try:
        return measure(first, "ncu", where), first, ""
    except UnknownMetricError as err:
        if err.metric not in first.report_counters:
            raise
        logging.getLogger("nsight_agent").warning("ncu refused the counter %s", err.metric)
        kept = budget_order(ONE_PASS_SECTIONS, first.budget_s)
        again = first.model_copy(update={"sections": kept, "report_counters": []})
        why = f"ncu refused the counter {err.metric}, so the sections were collected instead"
        return measure(again, "ncu", where), again, why


def diagnose_source(
    fields: dict[str, Any],
    where: Measuring,
    *,
    deep: bool = True,
    offset: int = 0,
    limit: int = 3,
    ideal_bytes: float | None = None,
    input_dtypes: list[str] | None = None,
    time_step: bool = False,
    sample_launches: bool | None = None,
    budget_s: float | None = None,
    by_name: OnePass | None = None,
    files: Mapping[str, str] | None = None,
    also: Sequence[Problem] = (),
) -> ReportDiagnosis:
    """Profile the source once with every section the checks read (one run per config) and
    diagnose the ``limit`` kernels from ``offset`` (by time share) in full. ``deep=False``:
    the cheap sections only. Torch operator ranges are recorded
    so a step's kernels group by operator. ``sample_launches`` (None: wherever one call is
    measured, one config and one variant): ncu profiles one launch per configuration.
    ``budget_s``: after the pre-flight counts the kernels, the sections (most needed first,
    the cheap four always) whose estimated cost fits (engine/collection/budget.py); the answer
    says what was left out, and each kernel's ``deeper`` what they would add.
    ``by_name`` (None: ``PASS_ENV``, else the counters; the sections under a budget): which
    sections the one pass asks for by their counters. ``files``: the file the source came
    from, named in the validation stage's messages; ``also``: the front end's own problems,
    listed with the request's."""
    budgeted = budget_s is not None
    choice = (one_pass_choice(budgeted) if by_name is None else by_name) if deep else "sections"
    sections, counters = one_pass(choice) if deep else (FIRST_PASS_SECTIONS, [])
    sections = budget_order(sections, budget_s)
    collect = dict(
        metrics=FIRST_PASS_METRICS,
        report_counters=counters,
        sections=sections,
        runs=1,
        warmup=1,
        torch_ranges=True,
        budget_s=budget_s,
        budget_keep=len(FIRST_PASS_SECTIONS) if budget_s is not None else 0,
    )
    also = [*also, *hint_problems(ideal_bytes, input_dtypes, offset, limit)]
    first = validate({**fields, **collect}, "ncu", files=files, also=also).request
    sample = first.one_measured_call() if sample_launches is None else sample_launches
    if sample and not first.one_measured_call():
        raise InvalidRequestError(
            "sample_launches maps one measured call onto its pre-flight; this request measures "
            f"{len(first.expanded_configs())} config(s) of {len(first.effective_variants())} "
            "variant(s)",
            "Give one config (or leave sample_launches unset: it is then on wherever it can be).",
        )
    first = first.model_copy(update={"sample_launches": sample}) if sample else first
    require_torch(where)
    require_ncu(where, NO_NCU_COUNTERS.format(what="A diagnosis", tool="diagnose_kernel"))
    hints: dict[str, Any] = {"offset": offset, "limit": limit, "ideal_bytes": ideal_bytes}
    hints |= {"input_dtypes": input_dtypes, "timing": None}
    run, first, refused = _one_run(first, where)
    if refused:
        sections, counters, choice = first.sections, [], "sections"
    # The step's wall time feeds the host-gap finding of a step of several kernels; a call of
    # one kernel has no step view, so it is not timed (a timing job is one more run).
    timed = None
    if time_step and len({k for names in run.kernels.values() for k in names}) > 1:
        hints["timing"], timed = _time_one_call(first, where)
    judged = diagnosis.diagnose_run(run, **hints)
    label = "one pass" if deep else "pass 1"
    named = ""
    if counters:
        left = ", ".join(s for s in BY_NAME[choice][0] if s not in sections)
        named = f"; by name: {len(counters)} counters the checks read of {left}"
    named += f"; {refused}" if refused else ""
    passed = f"{label} (run {run.run_id}): {', '.join(sections)}{named}"
    d = report_diagnosis(judged)
    d.run_id, d.passes = run.run_id, [passed, *([timed] if timed else [])]
    return d


# The dtype names the precision check reads: torch's (``torch.`` optional) and the usual short
# ones (fp16, bf16, tf32).
_DTYPE = re.compile(
    r"(torch\.)?((b?float|u?int|complex)\d+\w*|fp\d+\w*|bf16|tf32|double|half|float|bool"
    r"|long|int|short|cfloat|cdouble)"
)


def hint_problems(
    ideal_bytes: float | None,
    input_dtypes: Sequence[str] | None,
    offset: int = 0,
    limit: int = 1,
) -> list[Problem]:
    """The diagnosis's hints and page checked, on every path and before anything runs: a
    hint the checks cannot read would be ignored, so it is a problem of the request instead."""
    out = []
    page = "offset is the first kernel by time share (0: the longest); limit how many are "
    page += "diagnosed in full."
    if offset < 0:
        out.append(Problem("field", "offset", f"must be >= 0 (got {offset})", hint=page))
    if limit < 1:
        out.append(Problem("field", "limit", f"must be >= 1 (got {limit})", hint=page))
    if ideal_bytes is not None and not (math.isfinite(ideal_bytes) and ideal_bytes > 0):
        out.append(
            Problem(
                "field",
                "ideal_bytes",
                f"must be a positive number of bytes (got {ideal_bytes})",
                hint="Give the fewest bytes one kernel must read and write (out = a + b on "
                "n float32: 12 * n).",
            )
        )
    for name in input_dtypes or []:
        if not _DTYPE.fullmatch(str(name).strip().lower()):
            out.append(
                Problem(
                    "field",
                    "input_dtypes",
                    f"{name!r} is not a dtype name",
                    hint="Use torch's dtype names: 'bfloat16', 'float16', 'float32', "
                    "'float64', 'float8_e4m3fn', 'int8'.",
                )
            )
    return out


def _hints_checked(options: Mapping[str, Any]) -> None:
    hints = (options.get("ideal_bytes"), options.get("input_dtypes"))
    page = {k: options[k] for k in ("offset", "limit") if options.get(k) is not None}
    problems = hint_problems(*hints, **page)
    if problems:
        raise RequestRejected(problems)


def diagnose_run(run_id: str, runs_root: Path | None = None, **options: Any) -> ReportDiagnosis:
    """The diagnosis of an earlier run's report, without profiling again."""
    _hints_checked(options)
    judged = diagnosis.diagnose_run(load_run(run_id, runs_root=runs_root), **options)
    d = report_diagnosis(judged, f"diagnose_kernel(run_id={run_id!r}, offset={{offset}})")
    d.run_id = run_id
    return d


def diagnose_file(
    path: str | Path, *, launches: Sequence[PreLaunch] | None = None, **options: Any
) -> ReportDiagnosis:
    """The diagnosis of any .ncu-rep; ``launches``: a launch-sampled call's, from its
    pre-flight; ``options`` as ``judge.diagnosis.diagnose_report``'s (the page, hints on the
    kernels)."""
    _hints_checked(options)
    read = read_report(path, launches)
    return report_diagnosis(diagnosis.diagnose_report(read, **options))

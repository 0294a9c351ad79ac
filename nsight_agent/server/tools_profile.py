"""Tools that profile: profile_kernel, compare_variants, roofline_metrics, diagnose_kernel.

Each translates its arguments, calls one use case of ``nsight_agent.service`` through
``boundary.execute`` (worker thread, progress, cancellation, the session's executor) and
returns a compact view model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field

from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import RequestLanguage
from nsight_agent.server.boundary import execute, load, result, state, thread, tool_errors
from nsight_agent.server.boundary import report_path as boundary_report_path
from nsight_agent.server.options import USES, refuse_unused, unused
from nsight_agent.server.options import Options as Options
from nsight_agent.server.options import options_of as options_of
from nsight_agent.service import diagnose, profile, summaries
from nsight_agent.service.measure import RunResult
from nsight_agent.service.runs import report_of
from nsight_agent.views import compare, roofline, text
from nsight_agent.views import runs as run_views
from nsight_agent.views.diagnosis import ReportDiagnosis

CONTRACT_HINT = "Source follows the kernel contract (server instructions; nsight-agent://contract)."

Grid = list[dict[str, Any]] | dict[str, list[Any]]
SourceArg = Annotated[
    str, Field(description="Python module: setup() and the entry, or a KernelBench problem")
]
ConfigsArg = Annotated[
    Grid | None, Field(description='List of dicts, or a grid {"N": [1024, 4096]}')
]
# None: detected (a KernelBench problem, with Model and get_inputs, is "kernelbench"; a source
# with CUDA_SOURCE, "cuda"), else triton; said once, in profile_kernel's schema.
LanguageArg = Annotated[RequestLanguage | None, Field()]
MethodArg = Annotated[
    Literal["ncu", "timing"],
    Field(description="timing: CUPTI kernel records on a warm worker, no ncu"),
]


def uses(tool: str) -> str:
    """``options``' description for ``tool``: the knobs it uses, in ``Options``' order. Any
    other knob is refused with the tools that take it, so the list is complete and an agent
    reads no knob it cannot send."""
    return " ".join(name for name in Options.model_fields if name in USES[tool])


ProfileOptions = Annotated[dict[str, Any] | None, Field(description=uses("profile_kernel"))]
CompareOptions = Annotated[dict[str, Any] | None, Field(description=uses("compare_variants"))]
RooflineOptions = Annotated[dict[str, Any] | None, Field(description=uses("roofline_metrics"))]
DiagnoseOptions = Annotated[dict[str, Any] | None, Field(description=uses("diagnose_kernel"))]


def knobs(o: Options, tool: str, *apart: str) -> dict[str, Any]:
    """The knobs ``tool`` passes on to its request as fields (``apart``: those it passes
    otherwise; ``budget_s`` always goes apart)."""
    return o.fields(*sorted(USES[tool] - {"budget_s", *apart}))


def new_run_arguments(
    source: str | None, configs: Grid | None, language: str | None, entry: str
) -> dict[str, object]:
    """The arguments of a new measurement that were given (None: not given, the entry at its
    default): refused beside a run_id or a report, which are read as they were measured."""
    given: dict[str, object] = {"source": source, "configs": configs, "language": language}
    given["entry"] = entry if entry != "run" else None
    return given


# One implementation to compare. No docstring: pydantic would publish it as the model's
# description, which ``variants``' own description already says.
class VariantInput(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is refused, not dropped

    name: str = Field(description="Label in the results")
    entry: str = Field(default="run", description="Function in the source that runs it")
    source: str | None = Field(
        default=None, description="Its own source; omit to use the shared `source`"
    )


async def profile_kernel(
    ctx: Context,
    source: SourceArg,
    configs: ConfigsArg = None,
    language: Annotated[
        RequestLanguage | None, Field(description="Default: detected, else triton")
    ] = None,
    entry: Annotated[str, Field(description="Function that launches the kernel")] = "run",
    metrics: Annotated[list[str] | None, Field(description="ncu metrics (default: time)")] = None,
    skill: Annotated[str | None, Field(description="Metric bundle, e.g. 'memory'")] = None,
    runs: Annotated[int, Field(ge=1, le=100, description="Measured runs per config")] = 5,
    limit: Annotated[int, Field(ge=1, le=500, description="Results per page")] = 20,
    method: MethodArg = "ncu",
    options: ProfileOptions = None,
) -> Annotated[CallToolResult, run_views.ProfileSummary]:
    """Profile a kernel over configs: each metric's avg, std, n, stability; kernels seen;
    warnings; a run_id. A pre-flight reports source errors first."""
    with tool_errors():
        o = options_of(options)
        fields: dict[str, Any] = dict(
            source=source,
            configs=configs,
            language=language,
            entry=entry,
            metrics=metrics,
            skill=skill,
            runs=runs,
            **knobs(o, "profile_kernel"),
        )
        also = unused(o, "profile_kernel")
        run = await execute(
            ctx, lambda where: profile.profile(where, method, o.budget_s, also=also, **fields)
        )
        s = summaries.profile_summary(run, limit=limit)
        return result(s, text.render_profile(s, run_views.metric_labels(run)))


async def compare_variants(
    ctx: Context,
    variants: Annotated[
        list[VariantInput] | None, Field(description="At least two: named entries or sources")
    ] = None,
    configs: Annotated[Grid | None, Field(description="As profile_kernel")] = None,
    source: Annotated[str | None, Field(description="Shared source of the variants")] = None,
    baseline: Annotated[
        str | None, Field(description="Variant compared to (default: first)")
    ] = None,
    language: LanguageArg = None,
    runs: Annotated[int, Field(ge=2, le=100, description="Measured runs per config")] = 10,
    run_id: Annotated[str | None, Field(description="Re-read an earlier comparison")] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=500)] = 20,
    method: Annotated[Literal["ncu", "timing"], Field(description="As profile_kernel")] = "ncu",
    options: CompareOptions = None,
) -> Annotated[CallToolResult, compare.CompareSummary]:
    """Time variants against a baseline: per config time, speedup, verdict (faster, slower,
    within_noise by 95% intervals; incorrect if outputs differ)."""
    with tool_errors():
        o = options_of(options)
        if run_id is not None:
            new_run = new_run_arguments(source, configs, language, "run")  # no entry here
            new_run |= {"variants": variants, "runs": runs if runs != 10 else None}
            new_run |= {"method": method if method != "ncu" else None}
            refuse_unused(o, "compare_variants", arguments=new_run)
            run = await load(ctx, run_id)
            names = [v.name for v in run.request.effective_variants()]
            if len(names) < 2:
                raise InvalidRequestError(
                    f"Run {run_id} measured one variant ({', '.join(names)}): it has nothing "
                    "to compare.",
                    f"get_run(run_id={run_id!r}) reads it; compare_variants with a run_id "
                    "reads an earlier comparison.",
                )
        else:
            if not variants or len(variants) < 2:
                raise InvalidRequestError(
                    "compare_variants needs at least two variants (or a run_id).",
                    'Pass variants=[{"name": "ref", "entry": "run_ref"}, {"name": "new", '
                    '"entry": "run_new"}] with a shared source, and configs; for a KernelBench '
                    'problem: [{"name": "ref"}, {"name": "new", "source": "<ModelNew source>"}].',
                )
            fields: dict[str, Any] = dict(
                source=source or "",
                variants=[v.model_dump(exclude_none=True, exclude_unset=True) for v in variants],
                baseline=baseline or variants[0].name,
                configs=configs,
                language=language,
                runs=runs,
                **knobs(o, "compare_variants"),
            )
            also = unused(o, "compare_variants")
            run = await execute(
                ctx, lambda where: profile.profile(where, method, also=also, **fields)
            )
        effect = o.min_effect_pct if options and run_id else None
        basis = o.time_basis if run_id else None  # a new run's request holds its own
        s = summaries.compare_summary(
            run,
            baseline=baseline,
            time_basis=basis,
            offset=offset,
            limit=limit,
            min_effect_pct=effect,
        )
        return result(s, text.render_compare(s, run_views.metric_labels(run)))


async def roofline_metrics(
    ctx: Context,
    source: Annotated[str | None, Field(description="As profile_kernel")] = None,
    configs: Annotated[Grid | None, Field(description="Configs")] = None,
    language: LanguageArg = None,
    entry: Annotated[str, Field()] = "run",
    run_id: Annotated[str | None, Field(description="Use an earlier run's report")] = None,
    report_path: Annotated[str | None, Field(description="Or any .ncu-rep here")] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
    options: RooflineOptions = None,
) -> Annotated[CallToolResult, roofline.RooflineSummary]:
    """Roofline per kernel and config: FLOP/s by precision, DRAM bandwidth, intensity vs
    peaks, % of roofline, bound. From source, a run_id or a .ncu-rep."""
    with tool_errors():
        run: RunResult | None = None
        o = options_of(options)
        new_run = new_run_arguments(source, configs, language, entry)
        if report_path is not None:
            refuse_unused(o, "roofline_metrics", "report_path", {"run_id": run_id, **new_run})
            report = boundary_report_path(ctx, report_path)
        elif run_id is not None:
            refuse_unused(o, "roofline_metrics", arguments=new_run)
            run = await load(ctx, run_id)
            report = report_of(run)
        else:
            if source is None:
                raise InvalidRequestError(
                    "roofline_metrics needs source (and configs), a run_id, or a report_path."
                )
            fields: dict[str, Any] = {"source": source, "configs": configs, "language": language}
            fields |= {"entry": entry, **knobs(o, "roofline_metrics", "warmup")}
            fields["timeout_s"] = o.timeout_s or 900
            also = unused(o, "roofline_metrics")
            run, report = await execute(
                ctx, lambda where: profile.roofline(where, warmup=o.warmup, also=also, **fields)
            )
        s = await thread(
            lambda: summaries.roofline_summary(report, run=run, offset=offset, limit=limit)
        )
        return result(s, text.render_roofline(s))


async def diagnose_kernel(
    ctx: Context,
    source: Annotated[str | None, Field(description="As profile_kernel")] = None,
    configs: Annotated[Grid | None, Field(description="Configs")] = None,
    language: LanguageArg = None,
    entry: Annotated[str, Field()] = "run",
    run_id: Annotated[str | None, Field(description="Diagnose an earlier run's report")] = None,
    report_path: Annotated[str | None, Field(description="Or any .ncu-rep here")] = None,
    ideal_bytes: Annotated[
        float | None, Field(description="Bytes the kernel must move, for the excess check")
    ] = None,
    input_dtypes: Annotated[
        list[str] | None, Field(description="e.g. ['bfloat16'], for the precision check")
    ] = None,
    offset: Annotated[int, Field(ge=0, description="First kernel by time share")] = 0,
    limit: Annotated[int, Field(ge=1, le=10, description="Kernels diagnosed in full")] = 3,
    options: DiagnoseOptions = None,
) -> Annotated[CallToolResult, ReportDiagnosis]:
    """Why a kernel is slow: the bound and causes ranked by estimated gain, each with evidence,
    what to try, hot source lines, a skill. From source (one ncu run), a run_id or any .ncu-rep."""
    with tool_errors():
        hints: dict[str, Any] = {"ideal_bytes": ideal_bytes, "input_dtypes": input_dtypes}
        o = options_of(options)
        new_run = new_run_arguments(source, configs, language, entry)
        bad_hints = diagnose.hint_problems(ideal_bytes, input_dtypes)
        if report_path is not None:
            refuse_unused(
                o, "diagnose_kernel", "report_path", {"run_id": run_id, **new_run}, bad_hints
            )
        elif run_id is not None:
            refuse_unused(o, "diagnose_kernel", arguments=new_run, also=bad_hints)
        if report_path is not None:
            report = boundary_report_path(ctx, report_path)
            d = await thread(
                lambda: diagnose.diagnose_file(report, offset=offset, limit=limit, **hints)
            )
        elif run_id is not None:
            root = state(ctx).runs_root
            d = await thread(
                lambda: diagnose.diagnose_run(
                    run_id, runs_root=root, offset=offset, limit=limit, **hints
                )
            )
        else:
            if source is None:
                raise InvalidRequestError(
                    "diagnose_kernel needs source (and configs), a run_id, or a report_path."
                )
            fields: dict[str, Any] = {"source": source, "configs": configs, "language": language}
            fields |= {"entry": entry, **knobs(o, "diagnose_kernel", "deep", "budget_s")}
            fields["timeout_s"] = o.timeout_s or 900
            also = unused(o, "diagnose_kernel")
            # A step of several kernels: one call's wall time too, on the timing path, after
            # the ncu run (the host-gap finding).
            d = await execute(
                ctx,
                lambda where: diagnose.diagnose_source(
                    fields,
                    where,
                    deep=o.deep,
                    offset=offset,
                    limit=limit,
                    time_step=True,
                    budget_s=o.budget_s,
                    also=also,
                    **hints,
                ),
            )
        return result(d, text.render_diagnosis(d))

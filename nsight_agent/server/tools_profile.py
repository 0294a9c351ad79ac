"""Tools that profile: profile_kernel, compare_variants, roofline_metrics, diagnose_kernel.

Each validates, builds a request through the service layer, runs it (``boundary.execute``:
worker thread, progress, cancellation) and returns a compact view model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from nsight_agent import service
from nsight_agent.engine.pipeline import RunResult
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import KERNEL_CONTRACT_SUMMARY, Language
from nsight_agent.server.boundary import (
    execute,
    load,
    result,
    run_profile,
    state,
    thread,
    tool_errors,
)
from nsight_agent.views import compare, roofline, text
from nsight_agent.views import runs as run_views
from nsight_agent.views.diagnosis import ReportDiagnosis, diagnose_report

PROFILE_DOC = (
    "Profile a kernel under Nsight Compute over a grid of configs.\n\n"
    "Per config: each metric's avg, std, min, max, n, unit, RSD % and a stable flag (RSD < "
    "2%); the kernels seen; warnings (unstable, several kernels combined, clocks not "
    "locked); a run_id for later detail (get_run, get_run_rows, plot_run, resources). A CPU "
    "pre-flight runs the harness first, so source errors come back before ncu starts."
    f"\n\nKernel contract:\n{KERNEL_CONTRACT_SUMMARY}"
)

COMPARE_DOC = (
    "Time several implementations of one kernel against a baseline on the same configs.\n\n"
    "Per config: each variant's mean time, speedup vs the baseline and a verdict (faster / "
    "slower / within_noise from non-overlapping 95% confidence intervals; incorrect when its "
    "output differs from the baseline's, whatever its speed); per variant the geomean "
    "speedup. The rule is stated in the answer. Variants are named entry points of one "
    "source or named sources."
    f"\n\nKernel contract:\n{KERNEL_CONTRACT_SUMMARY}"
)


class VariantInput(BaseModel):
    """One implementation to compare."""

    name: str = Field(description="Label used in the results, e.g. 'baseline' or 'tiled_v2'")
    entry: str = Field(default="run", description="Function in the source that runs it")
    source: str | None = Field(
        default=None, description="Its own source; omit to use the shared `source`"
    )


async def profile_kernel(
    ctx: Context,
    source: Annotated[str, Field(description="Python source defining the kernel and its entry")],
    configs: Annotated[
        list[dict[str, Any]] | dict[str, list[Any]],
        Field(
            description="Configs passed to setup/entry as keyword arguments: a list of dicts, "
            'or a grid {"N": [1024, 4096], "BLOCK": [64, 128]} (cartesian product)'
        ),
    ],
    language: Annotated[Language, Field(description="How the source is run")] = "triton",
    entry: Annotated[str, Field(description="Function that launches the kernel")] = "run",
    setup: Annotated[str, Field(description="Function that builds the inputs")] = "setup",
    metrics: Annotated[
        list[str] | None,
        Field(description="ncu metric names (default gpu__time_duration.sum)"),
    ] = None,
    skill: Annotated[
        str | None, Field(description="A metric bundle from list_skills, e.g. 'memory'")
    ] = None,
    sections: Annotated[list[str] | None, Field(description="ncu section identifiers")] = None,
    runs: Annotated[int, Field(ge=1, le=100, description="Measured runs per config")] = 5,
    warmup: Annotated[int, Field(ge=0, le=100, description="Unmeasured runs first")] = 2,
    replay_mode: Annotated[
        Literal["kernel", "range"] | None, Field(description="ncu replay")
    ] = None,
    cache_control: Annotated[
        Literal["all", "none"], Field(description="'all' flushes caches before each kernel")
    ] = "all",
    clock_control: Annotated[
        Literal["base", "none"], Field(description="'base' locks clocks to base")
    ] = "none",
    timeout_s: Annotated[int, Field(ge=10, le=3600, description="Wall-clock limit")] = 600,
    ignore_kernels: Annotated[
        list[str] | None, Field(description="Kernel names to drop (helpers)")
    ] = None,
    combine_kernels: Annotated[
        Literal["sum", "none"], Field(description="Several kernels per run: sum or fail")
    ] = "sum",
    limit: Annotated[int, Field(ge=1, le=500, description="Results shown per page")] = 20,
) -> Annotated[CallToolResult, run_views.ProfileSummary]:
    with tool_errors():
        request = service.build_request(
            source=source,
            configs=configs,
            language=language,
            entry=entry,
            setup=setup,
            metrics=metrics,
            skill=skill,
            sections=sections,
            runs=runs,
            warmup=warmup,
            replay_mode=replay_mode,
            cache_control=cache_control,
            clock_control=clock_control,
            timeout_s=timeout_s,
            ignore_kernels=ignore_kernels,
            combine_kernels=combine_kernels,
        )
        run = await run_profile(request, ctx)
        s = run_views.profile_summary(run, limit=limit)
        return result(s, text.render_profile(s))


async def compare_variants(
    ctx: Context,
    variants: Annotated[
        list[VariantInput] | None,
        Field(description="Implementations to compare (named entry points or named sources)"),
    ] = None,
    configs: Annotated[
        list[dict[str, Any]] | dict[str, list[Any]] | None,
        Field(description="Configs (list of dicts or a grid of lists)"),
    ] = None,
    source: Annotated[
        str | None, Field(description="Shared source for variants without their own")
    ] = None,
    baseline: Annotated[
        str | None, Field(description="Variant every other is compared to (default: first)")
    ] = None,
    language: Annotated[Language, Field(description="How the source is run")] = "triton",
    setup: Annotated[str, Field(description="Function that builds the inputs")] = "setup",
    runs: Annotated[int, Field(ge=2, le=100, description="Measured runs per config")] = 10,
    warmup: Annotated[int, Field(ge=0, le=100)] = 2,
    rtol: Annotated[float | None, Field(description="Output check relative tolerance")] = None,
    atol: Annotated[float | None, Field(description="Output check absolute tolerance")] = None,
    cache_control: Annotated[Literal["all", "none"], Field()] = "all",
    clock_control: Annotated[Literal["base", "none"], Field()] = "none",
    timeout_s: Annotated[int, Field(ge=10, le=3600)] = 600,
    run_id: Annotated[
        str | None,
        Field(description="Re-read an earlier run instead of profiling (with offset/limit)"),
    ] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=500)] = 20,
) -> Annotated[CallToolResult, compare.CompareSummary]:
    with tool_errors():
        if run_id is not None:
            run = await load(ctx, run_id)
        else:
            if not variants or len(variants) < 2 or configs is None:
                raise InvalidRequestError(
                    "compare_variants needs at least two variants and configs (or a run_id).",
                    'Pass variants=[{"name": "ref", "entry": "run_ref"}, {"name": "new", '
                    '"entry": "run_new"}] with a shared source, and configs.',
                )
            request = service.build_request(
                source=source or "",
                variants=[v.model_dump(exclude_none=True) for v in variants],
                baseline=baseline or variants[0].name,
                configs=configs,
                language=language,
                setup=setup,
                runs=runs,
                warmup=warmup,
                rtol=rtol,
                atol=atol,
                cache_control=cache_control,
                clock_control=clock_control,
                timeout_s=timeout_s,
            )
            run = await run_profile(request, ctx)
        s = compare.compare_summary(run, baseline=baseline, offset=offset, limit=limit)
        return result(s, text.render_compare(s))


async def roofline_metrics(
    ctx: Context,
    source: Annotated[str | None, Field(description="Kernel source (as profile_kernel)")] = None,
    configs: Annotated[
        list[dict[str, Any]] | dict[str, list[Any]] | None, Field(description="Configs")
    ] = None,
    language: Annotated[Language, Field()] = "triton",
    entry: Annotated[str, Field()] = "run",
    setup: Annotated[str, Field()] = "setup",
    runs: Annotated[int, Field(ge=1, le=20, description="Runs per config (sections replay)")] = 1,
    timeout_s: Annotated[int, Field(ge=10, le=3600)] = 900,
    run_id: Annotated[
        str | None, Field(description="Use an earlier run's report instead of profiling")
    ] = None,
    report_path: Annotated[
        str | None, Field(description="Or any existing .ncu-rep on this machine")
    ] = None,
    offset: Annotated[int, Field(ge=0)] = 0,
    limit: Annotated[int, Field(ge=1, le=200)] = 20,
) -> Annotated[CallToolResult, roofline.RooflineSummary]:
    """Roofline position of each kernel and config on this GPU.

    Per kernel: achieved FLOP/s by precision (tensor cores separate), DRAM bytes and
    bandwidth, arithmetic intensity, this GPU's peaks read from ncu's peak metrics, % of
    roofline, and memory-/compute-/latency-bound with the thresholds used. Profiles the
    source with the roofline sections (slow: ncu replays each kernel), or reads an earlier
    run (run_id) or any .ncu-rep (report_path) without profiling.
    """
    with tool_errors():
        run: RunResult | None = None
        if report_path is not None:
            report = Path(report_path)
        elif run_id is not None:
            run = await load(ctx, run_id)
            report = service.report_of(run)
        else:
            if source is None or configs is None:
                raise InvalidRequestError(
                    "roofline_metrics needs source and configs, a run_id, or a report_path."
                )
            metrics, sections = service.roofline_collection()
            request = service.build_request(
                source=source,
                configs=configs,
                language=language,
                entry=entry,
                setup=setup,
                metrics=metrics,
                sections=sections,
                runs=runs,
                warmup=1,
                timeout_s=timeout_s,
            )
            run = await run_profile(request, ctx)
            report = service.report_of(run)
        s = await thread(
            lambda: roofline.roofline_summary(report, run=run, offset=offset, limit=limit)
        )
        return result(s, text.render_roofline(s))


async def diagnose_kernel(
    ctx: Context,
    source: Annotated[str | None, Field(description="Kernel source (as profile_kernel)")] = None,
    configs: Annotated[
        list[dict[str, Any]] | dict[str, list[Any]] | None, Field(description="Configs")
    ] = None,
    language: Annotated[Language, Field()] = "triton",
    entry: Annotated[str, Field()] = "run",
    setup: Annotated[str, Field()] = "setup",
    run_id: Annotated[str | None, Field(description="Diagnose an earlier run's report")] = None,
    report_path: Annotated[
        str | None, Field(description="Or any .ncu-rep on this machine (no GPU needed)")
    ] = None,
    deep: Annotated[
        bool, Field(description="Profile a second time with the sections the first pass asks for")
    ] = True,
    ideal_bytes: Annotated[
        float | None,
        Field(description="Bytes one kernel must move (inputs once + outputs once): excess check"),
    ] = None,
    input_dtypes: Annotated[
        list[str] | None, Field(description="e.g. ['bfloat16']: flags slower math precision")
    ] = None,
    timeout_s: Annotated[int, Field(ge=10, le=3600)] = 900,
    offset: Annotated[int, Field(ge=0, description="First kernel (by time share)")] = 0,
    limit: Annotated[int, Field(ge=1, le=10, description="Kernels diagnosed in full")] = 3,
) -> Annotated[CallToolResult, ReportDiagnosis]:
    """Why is this kernel slow? The bound with its numbers, then causes ranked by estimated
    gain, each with a fixed id (docs/DIAGNOSIS.md), 2-5 metrics with the thresholds that fired,
    what to try and the skill that explains it; a kernel at its roof says so first.

    From source (staged: a cheap first pass, then only the sections it calls for), a run_id,
    or any .ncu-rep (report_path). Kernels by share of GPU time: the top ones in full, one
    line for the rest.
    """
    with tool_errors():
        options: dict[str, Any] = {"ideal_bytes": ideal_bytes, "input_dtypes": input_dtypes}
        if report_path is not None:
            d = await thread(
                lambda: diagnose_report(Path(report_path), offset=offset, limit=limit, **options)
            )
        elif run_id is not None:
            root = state(ctx).runs_root
            d = await thread(
                lambda: service.diagnose_run(
                    run_id, runs_root=root, offset=offset, limit=limit, **options
                )
            )
        else:
            if source is None or configs is None:
                raise InvalidRequestError(
                    "diagnose_kernel needs source and configs, a run_id, or a report_path."
                )
            fields: dict[str, Any] = {"source": source, "configs": configs, "language": language}
            fields |= {"entry": entry, "setup": setup, "timeout_s": timeout_s}
            root = state(ctx).runs_root
            d = await execute(
                ctx,
                lambda say, cancel: service.diagnose_source(
                    fields,
                    runs_root=root,
                    on_progress=say,
                    cancel=cancel,
                    deep=deep,
                    limit=limit,
                    **options,
                ),
            )
        return result(d, text.render_diagnosis(d))

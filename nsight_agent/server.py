"""The MCP server: Nsight Compute profiling as tools for coding agents.

Thin by design: each tool validates its arguments, calls the library (``pipeline``,
``summarize``, ``diagnose``, ``metrics_catalog``, ``device``) and returns a compact pydantic
model as structured content, with a short text rendering beside it. Our own errors
(``NsightAgentError``) become ``ToolError`` at the boundary, so the model reads the message and
the hint; anything else would reach it only as "Error executing tool NAME".

Profiling runs the blocking pipeline in a worker thread: progress notifications report the
profiled ranges done / total, and a cancelled call sets the pipeline's cancel event, which
kills ncu's process group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context, Image
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from nsight_agent import __version__, device, metrics_catalog, summarize
from nsight_agent.diagnose import metrics as dm
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError, NsightAgentError
from nsight_agent.metrics_catalog import MetricInfo, SkillBundle
from nsight_agent.requests import KERNEL_CONTRACT_SUMMARY, Language, ProfileRequest

if TYPE_CHECKING:
    from nsight_agent.pipeline import PreflightResult, RunResult

log = logging.getLogger("nsight_agent.server")

T = TypeVar("T")

INSTRUCTIONS = """\
Nsight Compute (ncu) profiling of CUDA, Triton and PyTorch kernels.
Start with device_info (can this machine profile?). profile_kernel measures one kernel over a grid
of configs (time with spread and stability); compare_variants times several implementations
against a baseline with a noise-aware verdict and an output check; roofline_metrics places
kernels on this GPU's roofline and names the bound. summarize_report digests any existing
.ncu-rep without a GPU. Every run keeps its artifacts: pass its run_id to get_run, get_run_rows,
plot_run, compare_variants or roofline_metrics for more detail without profiling again, or read
nsight-agent://runs/{run_id}/{artifact}. query_metrics finds metric names; list_skills/get_skill
give curated metric bundles with a workflow."""

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
PROFILES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


class VariantInput(BaseModel):
    """One implementation to compare."""

    name: str = Field(description="Label used in the results, e.g. 'baseline' or 'tiled_v2'")
    entry: str = Field(default="run", description="Function in the source that runs it")
    source: str | None = Field(
        default=None, description="Its own source; omit to use the shared `source`"
    )


class MetricSearch(BaseModel):
    """query_metrics' answer."""

    query: str
    catalog: str = Field(description="Which list answered: live ncu query or the bundled one")
    results: list[MetricInfo]
    note: str | None = None


class SkillBrief(BaseModel):
    name: str
    description: str
    metrics: int = Field(description="How many metrics the bundle collects")
    sections: list[str]
    replay_mode: str


class SkillList(BaseModel):
    """list_skills' answer; get_skill(name) returns one bundle with its SKILL.md workflow."""

    skills: list[SkillBrief]


# ---------------------------------------------------------------------------------------------
# Boundary helpers


def _validation_text(err: ValidationError) -> str:
    parts = []
    for e in err.errors()[:8]:
        where = ".".join(str(p) for p in e["loc"]) or "request"
        parts.append(f"{where}: {e['msg']}")
    more = f" (+{err.error_count() - 8} more)" if err.error_count() > 8 else ""
    return "Malformed request: " + "; ".join(parts) + more


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Our errors and malformed requests -> ToolError with message and hint."""
    try:
        yield
    except ToolError:
        raise
    except NsightAgentError as err:
        raise ToolError(str(err)) from err
    except ValidationError as err:
        raise ToolError(_validation_text(err)) from err


def _result(model: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=summarize.dump(model)
    )


async def _thread(fn: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(fn)


# ---------------------------------------------------------------------------------------------
# The server


def build_server(runs_root: Path | None = None) -> MCPServer:
    """A server whose runs live under ``runs_root`` (default: the pipeline's runs folder)."""
    mcp = MCPServer(
        "nsight-agent",
        title="Nsight Compute profiling",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="INFO",
    )

    def load(run_id: str) -> RunResult:
        from nsight_agent import pipeline

        return pipeline.load_run(run_id, runs_root=runs_root)

    def build_request(**fields: Any) -> ProfileRequest:
        skill = fields.pop("skill", None)
        metrics: list[str] = list(fields.pop("metrics", None) or [])
        sections: list[str] = list(fields.pop("sections", None) or [])
        if skill:
            bundle = metrics_catalog.get_skill(skill)
            metrics = list(dict.fromkeys([*bundle.metrics, *metrics]))
            sections = list(dict.fromkeys([*bundle.sections, *sections]))
            fields.setdefault("replay_mode", bundle.replay_mode)
        if not metrics and not sections:
            metrics = [summarize.TIME_METRIC]
        metrics_catalog.validate_metrics(metrics)
        metrics_catalog.validate_sections(sections)
        clean = {k: v for k, v in fields.items() if v is not None}
        return ProfileRequest(metrics=metrics, sections=sections, **clean)

    async def execute(request: ProfileRequest, ctx: Context) -> RunResult:
        """The ncu run in a worker thread, with progress and cancellation.

        ``pipeline.profile`` runs its own pre-flight once ncu is found; without ncu the
        pre-flight runs here (on the CPU when there is no GPU), so source errors still come
        back first and "ncu not found" says the source itself is fine.
        """
        from nsight_agent import pipeline
        from nsight_agent.collection.ncu import find_ncu

        try:
            find_ncu()
        except NcuNotFoundError as err:
            await ctx.report_progress(0, None, "pre-flight: running the harness once, no ncu")
            pre = await _thread(lambda: pipeline.preflight(request, runs_root=runs_root))
            pipeline.raise_if_broken(pre)  # a SourceError with stage and line
            raise ToolError(f"{err.message} {_preflight_text(pre)}\nHint: {err.hint}") from err

        cancel = threading.Event()
        finished = threading.Event()

        def on_progress(done: int, total: int, message: str) -> None:
            with contextlib.suppress(Exception):  # a closed session must not stop the run
                anyio.from_thread.run(ctx.report_progress, done, total, message)

        def work() -> RunResult:
            try:
                return pipeline.profile(
                    request, runs_root=runs_root, on_progress=on_progress, cancel=cancel
                )
            finally:
                finished.set()

        try:
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancel.set()  # the pipeline kills ncu's process group on its next poll
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(finished.wait, 30.0)
            raise

    # -- profiling tools ------------------------------------------------------------------------

    @mcp.tool(annotations=PROFILES, description=PROFILE_DOC)
    async def profile_kernel(
        ctx: Context,
        source: Annotated[
            str, Field(description="Python source defining the kernel and its entry")
        ],
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
    ) -> Annotated[CallToolResult, summarize.ProfileSummary]:
        with _tool_errors():
            request = build_request(
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
            run = await execute(request, ctx)
            s = summarize.profile_summary(run, limit=limit)
            return _result(s, summarize.render_profile(s))

    @mcp.tool(annotations=PROFILES, description=COMPARE_DOC)
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
    ) -> Annotated[CallToolResult, summarize.CompareSummary]:
        with _tool_errors():
            if run_id is not None:
                run = await _thread(lambda: load(run_id))
            else:
                if not variants or len(variants) < 2 or configs is None:
                    raise InvalidRequestError(
                        "compare_variants needs at least two variants and configs (or a run_id).",
                        'Pass variants=[{"name": "ref", "entry": "run_ref"}, {"name": "new", '
                        '"entry": "run_new"}] with a shared source, and configs.',
                    )
                request = build_request(
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
                run = await execute(request, ctx)
            s = summarize.compare_summary(run, baseline=baseline, offset=offset, limit=limit)
            return _result(s, summarize.render_compare(s))

    @mcp.tool(annotations=PROFILES)
    async def roofline_metrics(
        ctx: Context,
        source: Annotated[
            str | None, Field(description="Kernel source (as profile_kernel)")
        ] = None,
        configs: Annotated[
            list[dict[str, Any]] | dict[str, list[Any]] | None, Field(description="Configs")
        ] = None,
        language: Annotated[Language, Field()] = "triton",
        entry: Annotated[str, Field()] = "run",
        setup: Annotated[str, Field()] = "setup",
        runs: Annotated[
            int, Field(ge=1, le=20, description="Runs per config (sections replay)")
        ] = 1,
        timeout_s: Annotated[int, Field(ge=10, le=3600)] = 900,
        run_id: Annotated[
            str | None, Field(description="Use an earlier run's report instead of profiling")
        ] = None,
        report_path: Annotated[
            str | None, Field(description="Or any existing .ncu-rep on this machine")
        ] = None,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
    ) -> Annotated[CallToolResult, summarize.RooflineSummary]:
        """Roofline position of each kernel and config on this GPU.

        Per kernel: achieved FLOP/s by precision (tensor cores separate), DRAM bytes and
        bandwidth, arithmetic intensity, this GPU's peaks read from ncu's peak metrics, % of
        roofline, and memory-/compute-/latency-bound with the thresholds used. Profiles the
        source with the roofline sections (slow: ncu replays each kernel), or reads an earlier
        run (run_id) or any .ncu-rep (report_path) without profiling.
        """
        with _tool_errors():
            run: RunResult | None = None
            if report_path is not None:
                report = Path(report_path)
            elif run_id is not None:
                run = await _thread(lambda: load(run_id))
                report = _report_of(run)
            else:
                if source is None or configs is None:
                    raise InvalidRequestError(
                        "roofline_metrics needs source and configs, a run_id, or a report_path."
                    )
                metrics, sections = _roofline_collection()
                request = build_request(
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
                run = await execute(request, ctx)
                report = _report_of(run)
            s = await _thread(
                lambda: summarize.roofline_summary(report, run=run, offset=offset, limit=limit)
            )
            return _result(s, summarize.render_roofline(s))

    # -- runs: more detail later, without profiling again ----------------------------------------

    @mcp.tool(annotations=READ_ONLY)
    async def get_run(
        run_id: Annotated[str, Field(description="From an earlier profiling answer")],
        metrics: Annotated[
            list[str] | None, Field(description="Only these metrics (default: all of the run)")
        ] = None,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=500)] = 20,
    ) -> Annotated[CallToolResult, summarize.ProfileSummary]:
        """An earlier run's per-config statistics (another metric's view, further pages)."""
        with _tool_errors():
            run = await _thread(lambda: load(run_id))
            s = summarize.profile_summary(run, metrics=metrics, offset=offset, limit=limit)
            return _result(s, summarize.render_profile(s))

    @mcp.tool(annotations=READ_ONLY)
    async def get_run_rows(
        run_id: Annotated[str, Field(description="From an earlier profiling answer")],
        table: Annotated[
            Literal["processed", "raw"],
            Field(description="processed: one row per variant/metric/config; raw: one per run"),
        ] = "processed",
        metric: Annotated[str | None, Field(description="Only this metric")] = None,
        offset: Annotated[int, Field(ge=0)] = 0,
        limit: Annotated[int, Field(ge=1, le=1000)] = 50,
    ) -> Annotated[CallToolResult, summarize.RowsPage]:
        """Rows of a run's nsight-python tables (processed or raw), paged."""
        with _tool_errors():
            run = await _thread(lambda: load(run_id))
            s = summarize.rows_page(run, table, metric=metric, offset=offset, limit=limit)
            text = f"{len(s.rows)} of {s.page.total} {table} rows; columns {s.columns}"
            return _result(s, text + (f"\n{s.page.truncated}" if s.page.truncated else ""))

    @mcp.tool(annotations=READ_ONLY)
    async def plot_run(
        run_id: Annotated[str, Field(description="From an earlier profiling answer")],
        metric: Annotated[
            str | None, Field(description="Metric to plot (default: the run's only/first one)")
        ] = None,
    ) -> Image:
        """A PNG plot of one metric of a run over its configs (one line per variant)."""
        with _tool_errors():
            run = await _thread(lambda: load(run_id))
            png = await _thread(lambda: _plot(run, metric))
            return Image(data=png.read_bytes(), format="png")

    # -- reports, metrics, skills, device ---------------------------------------------------------

    @mcp.tool(annotations=READ_ONLY)
    async def summarize_report(
        path: Annotated[str, Field(description="An existing .ncu-rep on the server's machine")],
        offset: Annotated[int, Field(ge=0, description="First kernel (action) shown")] = 0,
        limit: Annotated[int, Field(ge=1, le=200, description="Kernels shown")] = 10,
        findings: Annotated[int, Field(ge=0, le=50, description="ncu findings per kernel")] = 3,
        metrics: Annotated[
            list[str] | None, Field(description="Extra metric names to show when present")
        ] = None,
    ) -> Annotated[CallToolResult, summarize.ReportSummary]:
        """Compact digest of any Nsight Compute report, no GPU needed.

        Per kernel: name, NVTX ranges (any domain), duration, Speed Of Light %, key metrics
        present, roofline and bound when the report has the metrics, and ncu's findings with
        their estimated speedups. Works on reports from any tool.
        """
        with _tool_errors():
            s = await _thread(
                lambda: summarize.summarize_report(
                    path, offset=offset, limit=limit, findings=findings, metrics=metrics or ()
                )
            )
            return _result(s, summarize.render_report(s))

    @mcp.tool(annotations=READ_ONLY)
    async def query_metrics(
        query: Annotated[
            str, Field(description="Words or a metric name, e.g. 'dram bytes' or 'l2 hit rate'")
        ],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
    ) -> Annotated[CallToolResult, MetricSearch]:
        """Search ncu's metric names and descriptions for this GPU (or the bundled H100/H200 list)."""
        with _tool_errors():
            found = await _thread(lambda: metrics_catalog.search_metrics(query, limit))
            source = metrics_catalog.catalog_source()
            s = MetricSearch(
                query=query,
                catalog=source.label,
                results=found,
                note=source.note or None,
            )
            lines = [f"{m.example}  ({m.type}, {m.unit or '-'}): {m.description}" for m in found]
            return _result(s, "\n".join(lines) or f"No metric matches {query!r}.")

    @mcp.tool(annotations=READ_ONLY)
    async def list_skills() -> Annotated[CallToolResult, SkillList]:
        """The curated metric bundles (timing, memory, compute, occupancy, roofline, ...)."""
        with _tool_errors():
            skills = await _thread(metrics_catalog.list_skills)
            s = SkillList(
                skills=[
                    SkillBrief(
                        name=b.name,
                        description=b.description,
                        metrics=len(b.metrics),
                        sections=b.sections,
                        replay_mode=b.replay_mode,
                    )
                    for b in skills
                ]
            )
            return _result(s, "\n".join(f"{b.name}: {b.description}" for b in s.skills))

    @mcp.tool(annotations=READ_ONLY)
    async def get_skill(
        name: Annotated[str, Field(description="A name from list_skills")],
    ) -> Annotated[CallToolResult, SkillBundle]:
        """One metric bundle: its metrics, sections, and the SKILL.md workflow (when, how, next)."""
        with _tool_errors():
            b = await _thread(lambda: metrics_catalog.get_skill(name))
            return _result(b, b.skill_md)

    @mcp.tool(annotations=READ_ONLY)
    async def device_info(
        probe_counters: Annotated[
            bool,
            Field(description="Run one tiny kernel under ncu to confirm counter access (slow)"),
        ] = False,
    ) -> Annotated[CallToolResult, device.DeviceInfo]:
        """GPU, driver, ncu version, counter permission, SMs, clocks and peaks of this machine.

        Says plainly what is unknown (e.g. on a machine without a GPU) and why.
        """
        with _tool_errors():
            info = await _thread(lambda: device.device_info(probe=probe_counters))
            return _result(info, device.render(info))

    # -- resources: every run's artifacts ----------------------------------------------------------

    @mcp.resource(
        summarize.ARTIFACT_URI,
        name="run-artifact",
        description="A run's artifact: request, harness, manifest, report (.ncu-rep), ncu log, "
        "raw/processed CSV, plot. Names are listed in each profiling answer.",
    )
    def run_artifact(run_id: str, artifact: str) -> str | bytes:
        try:
            run = load(run_id)
        except NsightAgentError as err:
            raise ResourceNotFoundError(str(err)) from err
        path = run.artifacts.get(artifact)
        if path is None:
            candidate = run.run_dir / artifact
            path = candidate if candidate.is_file() and candidate.parent == run.run_dir else None
        if path is None or not Path(path).is_file():
            names = ", ".join(sorted(run.artifacts))
            raise ResourceNotFoundError(
                f"Run {run_id} has no artifact {artifact!r}; it has {names}."
            )
        p = Path(path)
        if p.suffix in {".json", ".csv", ".log", ".py", ".txt", ".md", ".cu", ".toml"}:
            return p.read_text(errors="replace")
        return p.read_bytes()

    @mcp.resource(
        "nsight-agent://runs",
        name="runs",
        description="Run ids under the runs folder, newest first (JSON)",
        mime_type="application/json",
    )
    def runs_index() -> str:
        from nsight_agent import pipeline

        root = runs_root or pipeline.default_runs_root()
        dirs = sorted(
            (d for d in Path(root).iterdir() if d.is_dir()) if Path(root).is_dir() else [],
            key=lambda d: d.stat().st_mtime,
            reverse=True,
        )
        return json.dumps({"runs_root": str(root), "runs": [d.name for d in dirs[:200]]})

    return mcp


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


def _preflight_text(pre: PreflightResult) -> str:
    """What the pre-flight showed, for an answer that cannot go on to ncu."""
    ran = (
        f"The pre-flight passed on {pre.device}: the source imports, and setup and every entry "
        "ran on each config"
    )
    if pre.ok:
        checked = ", outputs checked" if pre.checks else ""
        return f"{ran}{checked}; only the profiler is missing."
    wrong = "; ".join(pre.errors[:3]) + (" ..." if len(pre.errors) > 3 else "")
    return (
        f"{ran}, but some outputs are wrong ({wrong}); with ncu those variants would be "
        "profiled and reported 'incorrect'."
    )


def _roofline_collection() -> tuple[list[str], list[str]]:
    """The roofline skill bundle when the skills folder is here, else diagnose's sections."""

    try:
        bundle = metrics_catalog.get_skill("roofline")
        return list(bundle.metrics), list(bundle.sections)
    except NsightAgentError:
        return [summarize.TIME_METRIC], dm.bound_sections()


def _report_of(run: RunResult) -> Path:
    for key in ("report", "ncu_report", "ncu-rep"):
        path = run.artifacts.get(key)
        if path is not None:
            return Path(path)
    found = sorted(run.run_dir.glob("*.ncu-rep"))
    if not found:
        raise InvalidRequestError(f"Run {run.run_id} kept no .ncu-rep in {run.run_dir}.")
    return found[0]


def _plot(run: RunResult, metric: str | None) -> Path:
    from nsight_agent.visualization import plot_dataframe, select_metric

    frame = run.processed
    chosen = select_metric(frame, metric) if metric else str(frame["Metric"].iloc[0])
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in chosen)
    target = run.run_dir / f"plot-{safe}.png"
    plot_dataframe(
        frame,
        summarize.param_names(frame),
        filename=str(target),
        metric=chosen,
        title=f"run {run.run_id}",
    )
    return target


def serve(
    transport: Literal["stdio", "streamable-http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    runs_root: Path | None = None,
) -> None:
    """Run the server; logs go to stderr (on stdio, stdout is the wire)."""
    server = build_server(runs_root)
    if transport == "stdio":
        server.run()
    else:
        server.run(transport="streamable-http", host=host, port=port)

"""The use cases both front ends (the MCP server and the CLI) call, written once.

Build and validate a request (skill bundles merged, default metric, metric and section names
checked), profile it or, without ncu, pre-flight it and say what is missing; load a run, find
its report, plot it. Blocking functions: the server runs them in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path
from typing import Any

from nsight_agent.catalog import metrics as catalog
from nsight_agent.catalog import skills
from nsight_agent.diagnose import metrics as dm
from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import ncu
from nsight_agent.engine.executors.base import Executor
from nsight_agent.engine.pipeline import PreflightResult, Progress, RunResult
from nsight_agent.engine.store import baselines, retention, run_status, runs
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError, NsightAgentError
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.views import run_diff
from nsight_agent.views.compare import CompareSummary, compare_summary
from nsight_agent.views.history import History, build_history
from nsight_agent.views.runs import param_names


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


def preflight_text(pre: PreflightResult) -> str:
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


def ncu_or_preflight(
    request: ProfileRequest, runs_root: Path | None, cancel: threading.Event | None = None
) -> None:
    """Return when ncu is here. Without it, run the harness once (on the CPU when there is
    no GPU) so source errors still come first, then raise "ncu not found" with what the
    pre-flight showed (and its run id)."""
    try:
        ncu.find_ncu()
    except NcuNotFoundError as err:
        pre = pipeline.preflight(request, runs_root=runs_root, cancel=cancel)
        pipeline.raise_if_broken(pre)  # a SourceError with stage and line
        text = f"{err.message} {preflight_text(pre)} (pre-flight run {pre.run_id})"
        raise NcuNotFoundError(text, err.hint) from err


def profile(
    request: ProfileRequest,
    *,
    runs_root: Path | None = None,
    on_progress: Progress | None = None,
    cancel: threading.Event | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """Pre-flight, then the ncu run; without ncu, the pre-flight alone and a clear error.

    ``executor`` decides where the job runs (default: here, in this thread; the server passes
    its LocalExecutor, one job per GPU, or a RayExecutor, whose nodes have ncu, not this
    machine). After a run, the retention policy trims the runs folder (newest runs stay)."""
    if executor is None or executor.checks_ncu_here:
        ncu_or_preflight(request, runs_root, cancel)
    if executor is None:
        run = pipeline.profile(request, runs_root=runs_root, on_progress=on_progress, cancel=cancel)
    else:
        run = executor.profile(request, runs_root=runs_root, on_progress=on_progress, cancel=cancel)
    retention.prune(run.run_dir.parent, *retention.policy())
    return run


def time_only(
    request: ProfileRequest,
    pool: WorkerPool,
    *,
    runs_root: Path | None = None,
    cancel: threading.Event | None = None,
    executor: Executor | None = None,
) -> RunResult:
    """The counter-free path (``method="timing"``): a warm worker pre-flights and times the
    variants interleaved with CUDA events; no ncu, no counter permission needed. An executor
    that queues timing jobs (the server's local one, or the Ray pool's GPU hosts) runs it on
    one of its GPUs, never beside an ncu job on the same GPU."""
    if executor is not None and executor.runs_timing:
        run = executor.time(request, runs_root=runs_root, cancel=cancel)
    else:
        run = pipeline.time_request(request, pool, runs_root=runs_root, cancel=cancel)
    retention.prune(run.run_dir.parent, *retention.policy())
    return run


def load_run(run_id: str, runs_root: Path | None = None) -> RunResult:
    return pipeline.load_run(run_id, runs_root=runs_root)


def list_runs(runs_root: Path | None = None, limit: int = 200) -> dict[str, Any]:
    """Run ids under the runs folder, newest first, with their status; only run folders
    (not the CUDA build cache or anything else kept there)."""
    root = Path(runs_root or pipeline.default_runs_root())
    try:
        found = [d for d in root.iterdir() if runs.is_run_dir(d)] if root.is_dir() else []
    except OSError:
        found = []
    dirs = sorted(found, key=lambda d: d.name, reverse=True)[:limit]
    status = {d.name: (run_status.read_status(d) or {}).get("status", "passed") for d in dirs}
    return {"runs_root": str(root), "runs": [d.name for d in dirs], "status": status}


def list_runs_json(runs_root: Path | None = None) -> str:
    return json.dumps(list_runs(runs_root))


def roofline_collection() -> tuple[list[str], list[str]]:
    """The roofline skill bundle when the skills folder is here, else diagnose's sections."""
    try:
        bundle = skills.get_skill("roofline")
        return list(bundle.metrics), list(bundle.sections)
    except NsightAgentError:
        return [TIME_METRIC], dm.bound_sections()


def report_of(run: RunResult) -> Path:
    """The run's kept .ncu-rep."""
    for key in ("report", "ncu_report", "ncu-rep"):
        path = run.artifacts.get(key)
        if path is not None:
            return Path(path)
    found = sorted(run.run_dir.glob("*.ncu-rep"))
    if not found:
        raise InvalidRequestError(f"Run {run.run_id} kept no .ncu-rep in {run.run_dir}.")
    return found[0]


def artifact_path(run: RunResult, artifact: str) -> Path | None:
    """A named artifact of the run, or a plain file directly in its folder; None otherwise."""
    path = run.artifacts.get(artifact)
    if path is None:
        candidate = run.run_dir / artifact
        path = candidate if candidate.is_file() and candidate.parent == run.run_dir else None
    return Path(path) if path is not None and Path(path).is_file() else None


def plot_run(run: RunResult, metric: str | None) -> Path:
    """A PNG of one metric of the run over its configs, kept in the run folder."""
    from nsight_agent.views.plot import plot_dataframe
    from nsight_agent.views.plot_options import select_metric

    frame = run.processed
    chosen = select_metric(frame, metric) if metric else str(frame["Metric"].iloc[0])
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in chosen)
    target = run.run_dir / f"plot-{safe}.png"
    plot_dataframe(
        frame,
        param_names(frame),
        filename=str(target),
        metric=chosen,
        title=f"run {run.run_id}",
    )
    return target


def prune_runs(
    runs_root: Path | None = None,
    *,
    keep: int = retention.DEFAULT_KEEP,
    max_gb: float = retention.DEFAULT_MAX_GB,
) -> retention.Pruned:
    """Apply the retention policy to the runs folder (newest runs kept first)."""
    return retention.prune(Path(runs_root or pipeline.default_runs_root()), keep, max_gb)


# ---------------------------------------------------------------------------------------------
# Baselines, run-to-run comparison, the regression gate, history (docs/BASELINES.md)


def _root(runs_root: Path | None) -> Path:
    return Path(runs_root or pipeline.default_runs_root())


def record_environment(run: RunResult) -> dict[str, Any]:
    """Write the run's ``environment.json`` from this machine: call it only in the process
    that just made the run (driver, ncu and torch versions are read now, not then)."""
    from nsight_agent.engine import device

    info = device.device_info()
    env = {
        "recorded": baselines.utc_now(),
        "host": info.host,
        "gpus": [g.name for g in info.gpus],
        "driver_version": info.driver_version,
        "cuda_version": info.cuda_version,
        "ncu_version": info.ncu_version,
        "packages": {k: v for k, v in info.packages.items() if k in ("torch", "triton")},
    }
    baselines.write_environment(run.run_dir, env)
    return env


def _with_environment(run: RunResult) -> RunResult:
    """A run of this process gets its environment recorded, once (a server's own runs)."""
    if not baselines.read_environment(run.run_dir) and baselines.made_by_this_process(run.run_dir):
        record_environment(run)
    return run


def set_baseline(
    name: str, run_id: str, variant: str | None = None, runs_root: Path | None = None
) -> baselines.Baseline:
    """Name one variant of a finished run as a baseline (kept by retention from now on)."""
    baselines.check_name(name)
    run = _with_environment(load_run(run_id, runs_root))
    if run.status != "passed":
        raise InvalidRequestError(f"Run {run_id} {run.status}: only a finished run can be named.")
    return baselines.save(_root(runs_root), run_diff.baseline_entry(run, variant, name))


def list_baselines(runs_root: Path | None = None) -> list[baselines.Baseline]:
    return sorted(baselines.read_all(_root(runs_root)).values(), key=lambda b: b.name)


def remove_baseline(name: str, runs_root: Path | None = None) -> baselines.Baseline:
    return baselines.remove(_root(runs_root), name)


def resolve(ref: str, runs_root: Path | None = None) -> tuple[RunResult, str | None, str | None]:
    """``NAME``, ``RUN_ID`` or either with ``@VARIANT`` -> (run, variant, baseline name)."""
    key, _, variant = ref.partition("@")
    found = baselines.read_all(_root(runs_root))
    if key in found or not (_root(runs_root) / runs.check_run_id(key)).is_dir():
        b = baselines.get(_root(runs_root), key)  # says which baselines there are
        return _with_environment(load_run(b.run_id, runs_root)), variant or b.variant, key
    return _with_environment(load_run(key, runs_root)), variant or None, None


def diff(
    run_ref: str,
    against: str,
    runs_root: Path | None = None,
    threshold_pct: float | None = None,
) -> run_diff.RunDiff:
    """A run (or baseline) against a baseline (or run): comparable or why not, then verdicts."""
    base_run, base_variant, name = resolve(against, runs_root)
    run, variant, _ = resolve(run_ref, runs_root)
    d = run_diff.diff_runs(
        base_run,
        run,
        base_variant=base_variant,
        cand_variant=variant,
        name=name,
        threshold_pct=threshold_pct,
    )
    if name is not None and run.run_id != base_run.run_id:
        baselines.record_check(_root(runs_root), name, run.run_id)
    return d


def check_source(
    source: str,
    baseline: str,
    *,
    entry: str | None = None,
    threshold_pct: float | None = None,
    remeasure: bool = False,
    runs_root: Path | None = None,
    pool: WorkerPool | None = None,
) -> tuple[run_diff.RunDiff, CompareSummary | None]:
    """The regression gate: time ``source`` the way the baseline was measured (its configs,
    runs, method, clocks), then compare. With ``remeasure``, runs that are not comparable are
    measured again side by side (stored baseline source vs ``source``) in one run."""
    b = baselines.get(_root(runs_root), baseline)
    base_run = load_run(b.run_id, runs_root)
    request = baselines.check_request(base_run.request, b.variant, source, entry)
    method = "ncu" if b.method == "ncu" else "timing"
    run = _measure(request, method, runs_root, pool)
    record_environment(run)
    d = run_diff.diff_runs(
        base_run, run, base_variant=b.variant, name=baseline, threshold_pct=threshold_pct
    )
    baselines.record_check(_root(runs_root), baseline, run.run_id)
    if d.comparable or not remeasure:
        return d, None
    pair = baselines.pair_request(base_run.request, b.variant, request)
    both = _measure(pair, method, runs_root, pool)  # the first _measure proved it runs here
    return d, compare_summary(both, baseline="baseline", limit=10_000)


def _measure(
    request: ProfileRequest, method: str, runs_root: Path | None, pool: WorkerPool | None
) -> RunResult:
    if method == "ncu":
        return profile(request, runs_root=runs_root)
    if pool is not None:
        return time_only(request, pool, runs_root=runs_root)
    with WorkerPool() as own:
        return time_only(request, own, runs_root=runs_root)


def history(key: str, runs_root: Path | None = None, limit: int = 50) -> History:
    """The trend of one kernel: a baseline's name (its run, the runs of the same source and
    the runs checked against it) or a source hash (prefix), oldest first."""
    root = _root(runs_root)
    found = baselines.read_all(root)
    named = found.get(key)
    wanted = named.source_hash if named else key
    if len(wanted) < 4:
        raise InvalidRequestError(f"{key!r} is neither a baseline nor a source hash (4+ hex).")
    points: list[tuple[RunResult, str]] = []
    for run_id, variants in baselines.runs_of(root, wanted, named.checks if named else []):
        with contextlib.suppress(NsightAgentError, OSError, ValueError):
            run = load_run(run_id, runs_root)
            if run.status == "passed":
                points += [(run, v) for v in variants or [run_diff.pick_variant(run, None)]]
    if named is not None:
        reference = (load_run(named.run_id, runs_root), named.variant)
    elif points:
        reference = points[0]
    else:
        raise InvalidRequestError(f"No kept run of source {key!r} and no baseline of that name.")
    return build_history(key, reference, points[-limit:], name=named.name if named else None)

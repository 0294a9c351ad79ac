"""Baselines, run-to-run comparison, the regression gate, history (docs/BASELINES.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsight_agent.engine.pipeline import RunResult
from nsight_agent.engine.store import baselines, runs
from nsight_agent.errors import InvalidRequestError, NsightAgentError
from nsight_agent.judge import gate
from nsight_agent.judge.comparability import baseline_entry, pick_variant
from nsight_agent.judge.history import History, build_history
from nsight_agent.judge.run_diff import RunDiff, diff_runs
from nsight_agent.service.measure import Measuring, Method, Progress, WorkerPool, measure
from nsight_agent.service.runs import load_run
from nsight_agent.service.runs import runs_root_or_default as _root
from nsight_agent.service.summaries import compare_summary
from nsight_agent.service.validate import validate
from nsight_agent.views.compare import CompareSummary


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
    return baselines.save(_root(runs_root), baseline_entry(run, variant, name))


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
) -> RunDiff:
    """A run (or baseline) against a baseline (or run): comparable or why not, then verdicts."""
    base_run, base_variant, name = resolve(against, runs_root)
    run, variant, _ = resolve(run_ref, runs_root)
    d = diff_runs(
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


@dataclass(frozen=True)
class GateCheck:
    """The regression gate's answer: the run against the baseline, and when they were not
    comparable and both were measured again side by side, that comparison; ``regression``
    from whichever of the two decided (None: not comparable and not re-measured)."""

    diff: RunDiff
    remeasured: CompareSummary | None
    regression: bool | None


def check_source(
    source: str,
    baseline: str,
    *,
    entry: str | None = None,
    threshold_pct: float | None = None,
    remeasure: bool = False,
    runs_root: Path | None = None,
    pool: WorkerPool | None = None,
    files: Mapping[str, str] | None = None,
    on_progress: Progress | None = None,
) -> GateCheck:
    """The regression gate: time ``source`` the way the baseline was measured (its configs,
    runs, method, clocks), then compare. With ``remeasure``, runs that are not comparable are
    measured again side by side (stored baseline source vs ``source``) in one run.
    ``source`` goes through the validation stage first (``files``: the file it came from)."""
    b = baselines.get(_root(runs_root), baseline)
    base_run = load_run(b.run_id, runs_root)
    method: Method = "ncu" if b.method == "ncu" else "timing"
    fields = baselines.check_fields(base_run.request, b.variant, source, entry)
    request = validate(fields, method, files=files).request
    where = Measuring(runs_root=runs_root, workers=pool, on_progress=on_progress)
    run = measure(request, method, where)
    record_environment(run)
    d = diff_runs(base_run, run, base_variant=b.variant, name=baseline, threshold_pct=threshold_pct)
    baselines.record_check(_root(runs_root), baseline, run.run_id)
    if d.comparable or not remeasure:
        return GateCheck(d, None, d.regression)
    pair = baselines.pair_request(base_run.request, b.variant, request)
    both = measure(pair, method, where)  # the first measure proved it runs here
    summary = compare_summary(both, baseline="baseline", limit=10_000)
    regressed = gate.within_run_regression(summary.configs, "candidate", threshold_pct)
    return GateCheck(d, summary, regressed)


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
                points += [(run, v) for v in variants or [pick_variant(run, None)]]
    if named is not None:
        reference = (load_run(named.run_id, runs_root), named.variant)
    elif points:
        reference = points[0]
    else:
        raise InvalidRequestError(f"No kept run of source {key!r} and no baseline of that name.")
    return build_history(key, reference, points[-limit:], name=named.name if named else None)

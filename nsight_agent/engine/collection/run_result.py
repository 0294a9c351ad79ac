"""A run's measurements read into its result (``RunResult``): an ncu run's folder (its report
and manifest extracted and aggregated into rows, then checked) and a timing run's samples
(checked). The pipeline stores what comes back.
"""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any

from nsight_agent.engine.collection import call_rows, check, measure, preflight_run
from nsight_agent.engine.store import records
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult, RunResult, artifact_paths
from nsight_agent.errors import UnknownMetricError
from nsight_agent.request import ProfileRequest


def of_ncu_run(
    request: ProfileRequest,
    run_dir: Path,
    run_id: str,
    pre: PreflightResult,
    seconds: float,
    dram_peak: float | None,
) -> RunResult:
    """extract and aggregate (report + manifest -> rows -> frame), then check (outputs and
    kernel counts -> OutputOK, warnings); ``seconds``: ncu's; ``dram_peak``: the GPU's DRAM
    bandwidth, which no honest call's bytes beat (``check.floor_suspects``)."""
    files = records.RunFiles.in_folder(run_dir)
    metrics = check.row_metrics(request)
    added = check.added_metrics(request)  # read for the work check, not asked for
    manifest = measure.read_manifest(files.manifest)
    params = request.param_names()
    configs = [tuple(c[k] for k in params) for c in request.expanded_configs()]
    baseline = request.baseline_name()
    droppable = {v.name: "" for v in request.effective_variants() if v.name != baseline}

    def measured_with(names: list[str]) -> measure.Measured:
        return measure.measure(
            files.report,
            manifest,
            names,
            configs,
            params,
            ignore_kernels=request.ignore_kernels,
            combine=operator.add if request.combine_kernels == "sum" else None,
            droppable=droppable,
            expected_kernels=preflight_run.expected_kernels(pre),
        )

    try:
        measured = measured_with(metrics)
    except UnknownMetricError as err:  # a report without the work metrics: no work check
        if err.metric not in added:
            raise
        measured = measured_with([m for m in metrics if m not in added])
    uneven = {
        name: records.DroppedVariant(verdict="suspect", stage="profile", message=why)
        for name, why in droppable.items()
        if why
    }
    variants = [v.name for v in request.effective_variants()]
    kernels = {
        v: list(dict.fromkeys(r.kernel for r in measured.records if r.annotation == v))
        for v in variants
    }
    most = check.most_kernels_per_run(measured.records, variants, request.ignore_kernels)
    checks = [OutputCheck(**c) for c in manifest.get("checks", [])] or pre.checks
    manifest["kernels"] = kernels
    found_suspects = [
        *records.suspects_from(manifest.get("suspects")),
        *check.floor_suspects(
            measured.processed,
            request,
            manifest.get("out_bytes") or [],
            dram_peak,
        ),
        *check.work_suspects(measured.processed, request),
    ]
    processed, raw = check.without(measured.processed, added), check.without(measured.raw, added)
    processed = call_rows.with_call_rows(processed, request, pre, None)
    files.manifest.write_text(json.dumps(manifest, indent=1))
    facts = measured.ncu_cost(seconds)
    facts.profile_cuda_build = manifest.get("cuda_build")
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=check.with_ok_column(processed, request, checks),
        raw=raw,
        checks=checks,
        kernels=kernels,
        warnings=check.ncu_run_warnings(request, checks, kernels, most, pre),
        artifacts={k: p for k, p in artifact_paths(run_dir).items() if p.exists()},
        seconds=seconds,
        cuda_build=pre.cuda_build,
        preflight=pre,
        facts=facts,
        dropped={**pre.dropped, **records.dropped_from(manifest.get("dropped")), **uneven},
        suspects=check.first_per_config(found_suspects),
    )


def of_timing(
    request: ProfileRequest, run_dir: Path, run_id: str, pre: PreflightResult, timed: Any
) -> RunResult:
    """The timing loop's samples (``timed``: a ``worker/timing.TimingResult``, which imports
    torch) checked: its own output checks, else the pre-flight's; its notes and method."""
    frame = timed.frame()
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=call_rows.with_call_rows(frame, request, pre, timed.method),
        raw=frame.iloc[0:0],
        checks=[OutputCheck(**c) for c in timed.checks] or pre.checks,
        kernels={v.name: [] for v in request.effective_variants()},
        warnings=[
            *timed.notes,
            f"measured by {timed.method} (no ncu, no counters)",
            *check.short_kernel_warning(frame, timed.method),
        ],
        artifacts={k: p for k, p in artifact_paths(run_dir).items() if p.exists()},
        seconds=0.0,
        preflight=pre,
        facts=RunFacts(
            method=timed.method, order=timed.order[:64], cpu_probe_ns=timed.cpu_probe_ns
        ),
        dropped={**pre.dropped, **timed.dropped},
        suspects=check.first_per_config([*pre.suspects, *timed.suspects]),
    )

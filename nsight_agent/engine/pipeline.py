"""The request pipeline: pre-flight -> render -> collect under ncu -> extract -> aggregate.

Each run lives in ``<runs_root>/<run_id>/``: request.json, the user's source file(s), the
rendered harness.py, manifest.json, report.ncu-rep, ncu.log, program-output.log, raw.csv,
processed.csv and result.json (what ``load_run`` rebuilds a result from). The pre-flight runs
the same harness without ncu first, so a broken source costs seconds, not an ncu run.
"""

from __future__ import annotations

import json
import operator
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from nsight_agent.engine import measure, ncu, process
from nsight_agent.engine.harness import render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.runs import (
    OutputCheck,
    PreflightResult,
    RunResult,
    artifact_paths,
    default_runs_root,
    load_run,
    new_run_dir,
    save_result,
)
from nsight_agent.errors import (
    CollectionTimeoutError,
    NsightAgentError,
    ProfiledProcessError,
)
from nsight_agent.request import TIME_METRIC, ProfileRequest

Progress = Callable[[int, int, str], None]

# Check failures that make the outputs incomparable: profiling such a variant is pointless.
STRUCTURAL_REASONS = frozenset({"shape", "dtype", "structure", "alias"})
CUDA_CACHE = ".cuda-cache"
PREFLIGHT_PREFIX = "preflight-"


class CancelledError(NsightAgentError):
    """The caller cancelled the run (``cancel`` was set); its processes were killed."""


def preflight(
    request: ProfileRequest, *, runs_root: Path | None = None, device: str | None = None
) -> PreflightResult:
    """Run the harness once per config without ncu (on ``device``, default cuda if present)."""
    root = runs_root or default_runs_root()
    run_id, run_dir = new_run_dir(root)
    (run_dir / "request.json").write_text(request.model_dump_json(indent=1))
    render.write_run_files(request, run_dir, root / CUDA_CACHE)
    result = _preflight(run_dir, request, device or _default_device(), poll=None)
    result.run_id = run_id
    return result


def profile(
    request: ProfileRequest,
    *,
    runs_root: Path | None = None,
    on_progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> RunResult:
    """Pre-flight, then profile every (variant, config, run) under ncu in one process."""
    start = time.monotonic()
    root = runs_root or default_runs_root()
    ncu.find_ncu()  # fail before any work when ncu is missing
    run_id, run_dir = new_run_dir(root)
    (run_dir / "request.json").write_text(request.model_dump_json(indent=1))
    render.write_run_files(request, run_dir, root / CUDA_CACHE)
    total = len(request.expanded_configs()) * len(request.effective_variants()) * request.runs
    say = on_progress or (lambda done, total, message: None)

    say(0, total, "pre-flight: running the harness once without the profiler")
    pre = _preflight(run_dir, request, _default_device(), poll=_poller(cancel, None, None, 0))
    raise_if_broken(pre)

    say(0, total, "profiling under ncu")
    metrics = list(request.metrics) or [TIME_METRIC]
    options = ncu.NcuOptions(
        metrics=metrics,
        sections=request.sections,
        replay_mode=request.replay_mode,
        cache_control=request.cache_control,
        clock_control=request.clock_control,
    )
    artifacts = artifact_paths(run_dir)
    try:
        ncu.collect(
            [ncu.python_executable(), "harness.py", "--device", "cuda"],
            options,
            report_path=artifacts["report"],
            log_path=artifacts["ncu_log"],
            output_path=artifacts["program_output"],
            timeout=request.timeout_s,
            error_path=run_dir / "error.json",
            cwd=run_dir,
            env=ncu.child_env(),
            poll=_poller(cancel, on_progress, run_dir / "progress.txt", total),
        )
    except ProfiledProcessError as err:
        raise _source_error(run_dir / "error.json", err.stderr_tail) from err

    manifest = measure.read_manifest(artifacts["manifest"])
    params = request.param_names()
    configs = [tuple(c[k] for k in params) for c in request.expanded_configs()]
    combine = operator.add if request.combine_kernels == "sum" else None
    done = measure.measure(
        artifacts["report"],
        manifest,
        metrics,
        configs,
        params,
        ignore_kernels=request.ignore_kernels,
        combine=combine,
    )
    variants = [v.name for v in request.effective_variants()]
    kernels = {
        v: list(dict.fromkeys(r.kernel for r in done.records if r.annotation == v))
        for v in variants
    }
    raw = done.raw
    checks = [OutputCheck(**c) for c in manifest.get("checks", [])] or pre.checks
    processed = _with_ok_column(done.processed, request, checks)

    manifest["kernels"] = kernels
    artifacts["manifest"].write_text(json.dumps(manifest, indent=1))
    result = RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=processed,
        raw=raw,
        checks=checks,
        kernels=kernels,
        warnings=_warnings(request, checks, kernels, pre),
        artifacts={k: p for k, p in artifacts.items() if p.exists()},
        seconds=time.monotonic() - start,
        cuda_build=pre.cuda_build,
        preflight=pre,
        extra={"profile_cuda_build": manifest.get("cuda_build")},
    )
    save_result(result)
    say(total, total, f"done in {result.seconds:.1f} s")
    return result


# --- pre-flight -------------------------------------------------------------------------------


def _preflight(
    run_dir: Path, request: ProfileRequest, device: str, poll: Callable[[], None] | None
) -> PreflightResult:
    env = {"NSIGHT_AGENT_PREFLIGHT": "1"}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run on CPU tensors in the interpreter
    files = {n: run_dir / f"{PREFLIGHT_PREFIX}{n}" for n in ("manifest.json", "error.json")}
    output = run_dir / f"{PREFLIGHT_PREFIX}output.log"
    argv = [ncu.python_executable(), "harness.py", "--preflight", "--device", device]
    argv += ["--prefix", PREFLIGHT_PREFIX]
    try:
        done = process.run_to_file(
            argv,
            output_path=output,
            timeout=request.timeout_s,
            cwd=run_dir,
            env=ncu.child_env(env),
            poll=poll,
        )
    except process.RunTimeout:
        raise CollectionTimeoutError(
            f"The pre-flight ran past its {request.timeout_s} s limit and was killed.",
            f"A kernel or the setup may hang; its output so far is in {output}.",
        ) from None
    manifest: dict[str, Any] = {}
    if files["manifest.json"].exists():
        manifest = json.loads(files["manifest.json"].read_text())
    checks = [OutputCheck(**c) for c in manifest.get("checks", [])]
    result = PreflightResult(
        ok=True,
        device=device,
        seconds=done.seconds,
        checks=checks,
        kernels_per_call=_kernels_per_call(manifest),
        notes=manifest.get("notes", []),
        cuda_build=manifest.get("cuda_build"),
    )
    if done.returncode != 0:
        err = _source_error(files["error.json"], output.read_text(errors="replace")[-4000:])
        result.ok, result.stage, result.line = False, err.stage, err.line
        result.errors.append(err.message)
    else:
        _add_check_errors(result, manifest)
    (run_dir / f"{PREFLIGHT_PREFIX}result.json").write_text(result.model_dump_json(indent=1))
    return result


def _add_check_errors(result: PreflightResult, manifest: dict[str, Any]) -> None:
    checks = result.checks
    errors = [
        f"variant {c.variant!r}, config #{c.config_index}: {c.message}" for c in checks if not c.ok
    ]
    errors += _kernel_count_errors(manifest)
    if errors:
        result.ok, result.errors = False, errors
        result.stage = "check" if any(not c.ok for c in checks) else "entry"


def _kernels_per_call(manifest: dict[str, Any]) -> dict[str, list[list[str]]] | None:
    calls = manifest.get("calls", [])
    if not calls or any(c.get("kernels") is None for c in calls):
        return None  # counted only on a GPU
    out: dict[str, list[list[str]]] = {}
    for c in calls:
        out.setdefault(c["variant"], []).append(list(c["kernels"]))
    return out


def _kernel_count_errors(manifest: dict[str, Any]) -> list[str]:
    """Runs of one (variant, config) must launch the same kernels, and at least one."""
    seen: dict[tuple[str, int], set[int]] = {}
    for c in manifest.get("calls", []):
        if c.get("kernels") is not None:
            seen.setdefault((c["variant"], c["config"]), set()).add(len(c["kernels"]))
    errors = []
    for (variant, config), counts in seen.items():
        if len(counts) > 1:
            errors.append(
                f"variant {variant!r}, config #{config}: the number of kernels changes between "
                f"runs ({sorted(counts)}); warm up autotuners/caches in the first call or use "
                "replay_mode='range'"
            )
        elif counts == {0}:
            errors.append(
                f"variant {variant!r}, config #{config}: the entry launched no CUDA kernel "
                "(are the tensors on the GPU? does it return a cached result?)"
            )
    return errors


def raise_if_broken(pre: PreflightResult) -> None:
    """Raise SourceError for a broken source or incomparable outputs (shape, dtype, structure,
    aliasing); wrong values alone do not raise: they are profiled and flagged not ok."""
    if pre.ok:
        return
    structural = [c for c in pre.checks if not c.ok and c.reason in STRUCTURAL_REASONS]
    if pre.stage != "check" or structural:
        message = "\n".join(pre.errors) or "the pre-flight run failed"
        raise SourceError(pre.stage or "entry", message, line=pre.line)


def _source_error(error_file: Path, output_tail: str) -> SourceError:
    if error_file.exists():
        try:
            return SourceError.from_json(json.loads(error_file.read_text()))
        except (ValueError, TypeError):
            pass
    return SourceError(
        "entry", f"the harness died without an error report (crash in native code?):\n{output_tail}"
    )


# --- helpers ----------------------------------------------------------------------------------


def _default_device() -> str:
    from nsight_agent.engine.harness.runtime import default_device

    return default_device()


def _poller(
    cancel: threading.Event | None, on_progress: Progress | None, progress: Path | None, total: int
) -> Callable[[], None]:
    shown = [-1]

    def poll() -> None:
        if cancel is not None and cancel.is_set():
            raise CancelledError("The run was cancelled; its processes were killed.")
        if on_progress is None or progress is None or not progress.exists():
            return
        lines = progress.read_text().splitlines()
        if len(lines) != shown[0] and lines:
            shown[0] = len(lines)
            message = lines[-1].split(" ", 1)[-1]
            on_progress(len(lines), total, message)

    return poll


def _with_ok_column(
    processed: pd.DataFrame, request: ProfileRequest, checks: list[OutputCheck]
) -> pd.DataFrame:
    """OutputOK per row: no speedup may be read off a row whose outputs were wrong."""
    params = request.param_names()
    configs = request.expanded_configs()
    ok: dict[tuple[str, tuple[str, ...]], bool] = {}
    for c in checks:
        key = (c.variant, tuple(str(configs[c.config_index][k]) for k in params))
        ok[key] = ok.get(key, True) and c.ok
    out = processed.copy()
    out["OutputOK"] = [
        ok.get((str(row["Annotation"]), tuple(str(row[k]) for k in params)), False)
        for _, row in out.iterrows()
    ]
    return out


def _warnings(
    request: ProfileRequest,
    checks: list[OutputCheck],
    kernels: dict[str, list[str]],
    pre: PreflightResult,
) -> list[str]:
    out = [
        f"variant {c.variant!r} is WRONG for config #{c.config_index} {c.config}: {c.message}; "
        "no speedup is claimed for it"
        for c in checks
        if not c.ok
    ]
    for variant, names in kernels.items():
        kept = [n for n in names if n not in request.ignore_kernels]
        if len(kept) > 1 and request.combine_kernels == "sum":
            out.append(
                f"variant {variant!r} launches {len(kept)} kernels per run ({', '.join(kept)}); "
                "their metrics are summed. Name helpers in ignore_kernels to drop them."
            )
    out += pre.notes
    return out


__all__ = [
    "CancelledError",
    "OutputCheck",
    "PreflightResult",
    "RunResult",
    "default_runs_root",
    "load_run",
    "preflight",
    "profile",
    "raise_if_broken",
    "save_result",
]

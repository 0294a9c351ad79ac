"""The collect stage of a tool run: the rendered harness under ncu, every (variant, config,
run) call in one process; the report, the manifest and the logs land in the run folder.

A profiled process that raised is the user's error with its stage and line (from error.json);
one that ended early (``os._exit``) is named as such, not as "no kernels".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nsight_agent.engine.collection import ncu, preflight_run, work
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store.runs import artifact_paths
from nsight_agent.errors import NcuError, NoKernelsProfiledError, ProfiledProcessError
from nsight_agent.request import ProfileRequest


def collect(
    request: ProfileRequest,
    run_dir: Path,
    run_id: str,
    poll: Callable[[], None],
    skip: list[str] | None = None,
) -> float:
    """collect: the harness under ncu, every call of the run in one process; the report,
    the manifest and the logs land in ``run_dir``; ``skip``: variants dropped at the
    pre-flight, not run. Returns ncu's wall time."""
    options = ncu.NcuOptions(
        metrics=work.collected_metrics(request),
        sections=request.sections,
        replay_mode=request.replay_mode,
        cache_control=request.cache_control,
        clock_control=request.clock_control,
    )
    artifacts = artifact_paths(run_dir)
    try:
        done = ncu.collect(
            [ncu.python_executable(), "harness.py", "--device", "cuda"]
            + (["--skip", ",".join(skip)] if skip else []),
            options,
            report_path=artifacts["report"],
            log_path=artifacts["ncu_log"],
            output_path=artifacts["program_output"],
            timeout=request.timeout_s,
            error_path=run_dir / "error.json",
            cwd=run_dir,
            env=ncu.child_env(),
            poll=poll,
            tag=f"{run_id}.ncu",
        )
    except ProfiledProcessError as err:
        raise preflight_run.source_error(run_dir / "error.json", err.stderr_tail) from err
    except (NoKernelsProfiledError, NcuError) as err:
        # An early exit (os._exit at import or in the entry) looks like "no kernels".
        early = ended_early(artifacts["manifest"], request)
        if early is not None:
            raise early from err
        raise
    early = ended_early(artifacts["manifest"], request)
    if early is not None:
        raise early
    return done.seconds


def ended_early(manifest: Path, request: ProfileRequest) -> SourceError | None:
    """Trust no exit status: a run whose manifest lacks calls ended early."""
    found = preflight_run.read_manifest(manifest)
    return preflight_run.early_exit(found, request, request.runs, 0)

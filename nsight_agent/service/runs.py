"""Earlier runs: load, list, their report and artifacts, plot, prune."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from nsight_agent.arguments import fields_text
from nsight_agent.engine import pipeline
from nsight_agent.engine.pipeline import RunResult
from nsight_agent.engine.store import retention, run_status, runs
from nsight_agent.errors import InvalidRequestError, NsightAgentError
from nsight_agent.judge.reading import report_of as report_of  # the run's .ncu-rep
from nsight_agent.judge.run import param_names
from nsight_agent.views.run_list import RunRow, run_row


def runs_root_or_default(runs_root: Path | None) -> Path:
    return Path(runs_root or pipeline.default_runs_root())


def load_run(run_id: str, runs_root: Path | None = None) -> RunResult:
    """The run ``run_id``; one whose stored request no longer reads as a request (written by
    another version, or edited) is refused saying so, in place of pydantic's words."""
    try:
        return pipeline.load_run(run_id, runs_root=runs_root)
    except ValidationError as err:
        raise NsightAgentError(
            f"Run {run_id}'s request.json does not read as a request of this version "
            f"({fields_text(err)}).",
            "It was written by another version of nsight-agent, or edited: profile again to "
            "make a run this version reads (its other files stay readable as artifacts).",
        ) from err


def is_run(run_id: str, runs_root: Path | None = None) -> bool:
    """Whether ``run_id`` names a run folder under the runs folder."""
    try:
        runs.check_run_id(run_id)
    except NsightAgentError:
        return False
    return runs.is_run_dir(runs_root_or_default(runs_root) / run_id)


def list_runs(runs_root: Path | None = None, limit: int = 200) -> dict[str, Any]:
    """Run ids under the runs folder, newest first, with their status; only run folders
    (not the CUDA build cache or anything else kept there)."""
    root = runs_root_or_default(runs_root)
    try:
        found = [d for d in root.iterdir() if runs.is_run_dir(d)] if root.is_dir() else []
    except OSError:
        found = []
    dirs = sorted(found, key=lambda d: d.name, reverse=True)[:limit]
    status = {d.name: (run_status.read_status(d) or {}).get("status", "passed") for d in dirs}
    return {"runs_root": str(root), "runs": [d.name for d in dirs], "status": status}


def run_rows(runs_root: Path | None = None, limit: int = 50) -> list[RunRow]:
    """The newest runs, each with its date, source, method, status and verdict; a run that
    does not load (another version's, a partial folder) is listed with what its status says."""
    listing = list_runs(runs_root, limit)
    root = Path(listing["runs_root"])
    rows = []
    for run_id in listing["runs"]:
        status = run_status.read_status(root / run_id) or {}
        try:
            run: RunResult | None = pipeline.load_run(run_id, runs_root=root)
        except (NsightAgentError, ValidationError, OSError, ValueError, KeyError, TypeError):
            run = None
        rows.append(run_row(run_id, status, run))
    return rows


def name_source(run_dir: Path, name: str) -> None:
    """Record in the run's status the name of the file it profiled (the command line knows
    it; a listing shows it)."""
    status = run_status.read_status(run_dir)
    if status is not None:
        run_status.write_atomic(
            run_dir / run_status.STATUS_FILE, json.dumps(status | {"source": name}, indent=1)
        )


def list_runs_json(runs_root: Path | None = None) -> str:
    return json.dumps(list_runs(runs_root))


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
    if frame.empty:
        raise InvalidRequestError(
            f"Run {run.run_id} has no measurements to plot.",
            f"get_run(run_id={run.run_id!r}) says why (its warnings and each variant's check).",
        )
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
    return retention.prune(runs_root_or_default(runs_root), keep, max_gb)

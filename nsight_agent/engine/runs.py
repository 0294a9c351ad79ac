"""The run store: one folder per run with its request, files, report and results, and the
models of what a run produced. ``load_run`` rebuilds a finished run without profiling again."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from nsight_agent.engine.harness import render
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import ProfileRequest


class OutputCheck(BaseModel):
    """Whether one variant's outputs were right for one config (vs the baseline's)."""

    variant: str
    config_index: int
    config: dict[str, Any]
    ok: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    message: str = ""
    reason: str = "ok"  # ok | mismatch | nonfinite | shape | dtype | structure | alias


class PreflightResult(BaseModel):
    """The harness run once without the profiler: did it import, set up, run and check?"""

    ok: bool
    device: str
    seconds: float
    checks: list[OutputCheck] = []
    kernels_per_call: dict[str, list[list[str]]] | None = None  # variant -> one list per call
    errors: list[str] = []
    stage: str | None = None  # where the first error happened: import/setup/compile/entry/check
    line: int | None = None  # its line in the user's source, when known
    notes: list[str] = []
    cuda_build: dict[str, Any] | None = None
    run_id: str | None = None  # set by preflight(): its files are in <runs_root>/<run_id>/


@dataclass
class RunResult:
    """Everything one profiling run produced; ``load_run`` rebuilds it from its directory."""

    run_id: str
    run_dir: Path
    request: ProfileRequest
    processed: pd.DataFrame
    raw: pd.DataFrame
    checks: list[OutputCheck]
    kernels: dict[str, list[str]]
    warnings: list[str]
    artifacts: dict[str, Path]
    seconds: float
    cuda_build: dict[str, Any] | None = None  # first build of this request (pre-flight)
    preflight: PreflightResult | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def ok(self, variant: str, config_index: int) -> bool:
        """False unless the variant's outputs were checked correct for that config."""
        return any(
            c.ok for c in self.checks if c.variant == variant and c.config_index == config_index
        )


def default_runs_root() -> Path:
    return Path(os.environ.get("NSIGHT_AGENT_RUNS") or Path.home() / ".cache/nsight-agent/runs")


def load_run(run_id: str, runs_root: Path | None = None) -> RunResult:
    """Rebuild a finished run's result from its directory, without profiling again."""
    if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
        raise InvalidRequestError(f"malformed run id {run_id!r}")
    run_dir = (runs_root or default_runs_root()) / run_id
    if not (run_dir / "result.json").is_file():
        raise InvalidRequestError(
            f"No finished run {run_id!r} in {run_dir.parent}.",
            "Use the run_id a previous profile call returned; runs that failed keep their "
            "directory (logs, error.json) but have no result.",
        )
    data = json.loads((run_dir / "result.json").read_text())
    pre = data.get("preflight")
    artifacts = {k: p for k, p in artifact_paths(run_dir).items() if p.exists()}
    artifacts["result"] = run_dir / "result.json"
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=ProfileRequest.model_validate_json((run_dir / "request.json").read_text()),
        processed=pd.read_csv(run_dir / "processed.csv"),
        raw=pd.read_csv(run_dir / "raw.csv"),
        checks=[OutputCheck(**c) for c in data["checks"]],
        kernels=data["kernels"],
        warnings=data["warnings"],
        artifacts=artifacts,
        seconds=data["seconds"],
        cuda_build=data.get("cuda_build"),
        preflight=PreflightResult(**pre) if pre else None,
        extra=data.get("extra", {}),
    )


def new_run_dir(root: Path) -> tuple[str, Path]:
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    run_dir = root / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_id, run_dir


def artifact_paths(run_dir: Path) -> dict[str, Path]:
    names = {
        "request": "request.json",
        "harness": "harness.py",
        "source": f"{render.MAIN_MODULE}.py",
        "manifest": "manifest.json",
        "report": "report.ncu-rep",
        "ncu_log": "ncu.log",
        "program_output": "program-output.log",
        "raw_csv": "raw.csv",
        "processed_csv": "processed.csv",
    }
    return {k: run_dir / v for k, v in names.items()}


def save_result(result: RunResult) -> None:
    """Write raw.csv, processed.csv and result.json: what ``load_run`` reads back."""
    result.raw.to_csv(result.run_dir / "raw.csv", index=False)
    result.processed.to_csv(result.run_dir / "processed.csv", index=False)
    data = {
        "run_id": result.run_id,
        "checks": [c.model_dump() for c in result.checks],
        "kernels": result.kernels,
        "warnings": result.warnings,
        "seconds": result.seconds,
        "cuda_build": result.cuda_build,
        "preflight": result.preflight.model_dump() if result.preflight else None,
        "extra": result.extra,
    }
    (result.run_dir / "result.json").write_text(json.dumps(data, indent=1, default=str))
    for key, name in (("raw_csv", "raw.csv"), ("processed_csv", "processed.csv")):
        result.artifacts[key] = result.run_dir / name
    result.artifacts["result"] = result.run_dir / "result.json"

"""The run store: one folder per run with its request, files, report and results, and the
models of what a run produced. ``load_run`` rebuilds a run without profiling again: a
finished one in full, a failed one from what it left (status, logs, error, pre-flight).

Every run folder has ``status.json`` (written atomically): running, then passed, failed
(with the stage and the message), timed_out, cancelled or interrupted. The sources are stored
once, in their own files; ``request.json`` names those files instead of repeating them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from nsight_agent.engine import bytecode
from nsight_agent.engine.harness import render
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.records import (
    DroppedVariant,
    RunFiles,
    Suspect,
    dropped_from,
    suspects_from,
)
from nsight_agent.engine.store.run_status import (
    STATUS_FILE,
    owner_gone,
    read_status,
    storage_errors,
    write_atomic,
    write_status,
)
from nsight_agent.errors import (
    InvalidRequestError,
    RunIdCollisionError,
)
from nsight_agent.request import ProfileRequest

# The tables' columns (aggregate, extract), for the empty tables of a run that did not pass.
PER_KERNEL = ["Kernel", "GPU", "Host", "ComputeClock", "MemoryClock", "Unit"]
RAW_COLUMNS = ["Annotation", "Value", "Metric", *PER_KERNEL]
PROCESSED_COLUMNS = [
    *("Annotation", "Metric", "AvgValue", "StdDev", "MinValue", "MaxValue", "NumRuns"),
    *("CI95_Lower", "CI95_Upper", "RelativeStdDevPct", "StableMeasurement", "Normalized"),
    *("Geomean", "OutputOK", *PER_KERNEL, "MedianValue", "P20Value", "P80Value"),
]


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
    # variant -> config index -> kernels in each measured call, where its runs agreed: what an
    # attached run's call markers must bracket (collection/call_markers.py); GPU only
    kernel_counts: dict[str, dict[int, int]] = {}
    # variant -> config index -> median GPU time (ns) of a call's copies and memsets, where
    # there were any: work ncu does not profile (CUPTI, measured calls of the pre-flight)
    copies_ns: dict[str, dict[int, float]] = {}
    # variant -> config index -> its calls timed end to end (ns), outside every profiler
    # (harness/call_loop.py): the per-call time, and KernelBench's timed trials; GPU only
    call_ns: dict[str, dict[int, list[float]]] = {}
    kernelbench_ns: dict[str, dict[int, list[float]]] = {}
    errors: list[str] = []
    stage: str | None = None  # where the first error happened: import/setup/compile/entry/check
    # the harness itself ended with an error (its error file): the run broke at ``stage``,
    # also at "check" (the baseline's outputs invalid), not only a variant
    harness_failed: bool = False
    line: int | None = None  # its line in the user's source, when known
    notes: list[str] = []
    cuda_build: dict[str, Any] | None = None
    builds: list[dict[str, Any]] = []  # torch extensions the sources built at import
    run_id: str | None = None  # set by preflight(): its files are in <runs_root>/<run_id>/
    warm: bool = False  # run on a warm worker (no new interpreter), not in a new process
    dropped: dict[str, DroppedVariant] = {}  # variants that failed alone, by name
    suspects: list[Suspect] = []


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
    facts: RunFacts = field(default_factory=RunFacts)  # what its stages learned of it
    dropped: dict[str, DroppedVariant] = field(default_factory=dict)  # as PreflightResult's
    suspects: list[Suspect] = field(default_factory=list)
    status: str = "passed"  # passed | failed | timed_out | cancelled | interrupted (status.json)
    failure: dict[str, Any] | None = None  # stage and message of a run that did not pass

    @property
    def files(self) -> RunFiles:
        """Its files by role (``artifacts`` names those that exist, for answers)."""
        return RunFiles.in_folder(self.run_dir)

    def ok(self, variant: str, config_index: int) -> bool:
        """False unless the variant's outputs were checked correct for that config."""
        return any(
            c.ok for c in self.checks if c.variant == variant and c.config_index == config_index
        )


def default_runs_root() -> Path:
    """``NSIGHT_AGENT_RUNS``, else the user's cache folder (``XDG_CACHE_HOME`` on Linux,
    through platformdirs where it is installed) + ``nsight-agent/runs``."""
    if os.environ.get("NSIGHT_AGENT_RUNS"):
        return Path(os.environ["NSIGHT_AGENT_RUNS"])
    return bytecode.user_cache_dir() / "runs"


def check_run_id(run_id: str) -> str:
    """Refuse run ids that are not plain folder names (traversal, hidden folders)."""
    bad = not run_id or len(run_id) > 128 or run_id.startswith(".")
    if bad or any(not (c.isalnum() or c in "-_.") for c in run_id):
        raise InvalidRequestError(
            f"malformed run id {run_id!r}",
            "Use the run_id a profiling answer gave (e.g. 20261130-101500-0a1b2c3d4e5f); the "
            "runs resource nsight-agent://runs lists them.",
        )
    return run_id


def is_run_dir(path: Path) -> bool:
    """A folder made by ``new_run_dir`` (not the CUDA cache or another folder in the root)."""
    return (
        not path.name.startswith(".")
        and path.is_dir()
        and any((path / n).is_file() for n in (STATUS_FILE, "request.json", "result.json"))
    )


def load_run(run_id: str, runs_root: Path | None = None) -> RunResult:
    """Rebuild a run from its directory, without profiling again.

    A finished run comes back in full; one that failed, timed out or was cancelled comes
    back with what it left (its status, request, pre-flight and files) and empty tables.
    """
    check_run_id(run_id)
    run_dir = (runs_root or default_runs_root()) / run_id
    status = read_status(run_dir)
    if status is None and not (run_dir / "result.json").is_file():
        raise InvalidRequestError(
            f"No finished run {run_id!r} in {run_dir.parent}: there is no such run.",
            "Use the run_id a previous profile call returned (the runs resource "
            "nsight-agent://runs lists them).",
        )
    state = (status or {}).get("status", "passed")
    if state == "running":
        if _owner_alive(status or {}):
            raise InvalidRequestError(
                f"Run {run_id} is still running (stage {(status or {}).get('stage')}).",
                "Wait for the profiling call to answer, then read the run again.",
            )
        state = "interrupted"
        status = {
            **(status or {}),
            "message": f"interrupted: its server (pid {(status or {}).get('pid')}) ended while "
            "it ran, without recording an end",
        }
    if state != "passed" or not (run_dir / "result.json").is_file():
        return _failed_run(run_id, run_dir, status or {"status": "failed"}, state)
    data = json.loads((run_dir / "result.json").read_text())
    pre = data.get("preflight")
    artifacts = {k: p for k, p in artifact_paths(run_dir).items() if p.exists()}
    artifacts["result"] = run_dir / "result.json"
    files = RunFiles.in_folder(run_dir)
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=read_request(run_dir),
        processed=pd.read_csv(files.processed_csv),
        raw=pd.read_csv(files.raw_csv),
        checks=[OutputCheck(**c) for c in data["checks"]],
        kernels=data["kernels"],
        warnings=data["warnings"],
        artifacts=artifacts,
        seconds=data["seconds"],
        cuda_build=data.get("cuda_build"),
        preflight=PreflightResult(**pre) if pre else None,
        facts=RunFacts.from_stored(data),
        dropped=dropped_from(data.get("dropped")),
        suspects=suspects_from(data.get("suspects")),
    )


def _owner_alive(status: dict[str, Any]) -> bool:
    return isinstance(status.get("pid"), int) and not owner_gone(status)


def _failed_run(run_id: str, run_dir: Path, status: dict[str, Any], state: str) -> RunResult:
    """What a run that did not pass left behind, as a result with empty tables."""
    pre_file = run_dir / "preflight-result.json"
    pre = None
    with contextlib.suppress(OSError, ValueError):
        pre = PreflightResult.model_validate_json(pre_file.read_text())
    try:
        request = read_request(run_dir)
    except (OSError, ValueError) as err:
        raise InvalidRequestError(
            f"Run {run_id} {state} before its request was stored: {status.get('message')}",
            f"Its folder {run_dir} holds what it left (status.json).",
        ) from err
    failure = {k: status.get(k) for k in ("status", "stage", "message", "error")}
    failure["status"] = state
    named = artifact_paths(run_dir) | {"error_json": RunFiles.in_folder(run_dir).error}
    for extra in ("preflight-output.log", "preflight-error.json"):
        named[extra.replace(".", "_").replace("-", "_")] = run_dir / extra
    return RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=pd.DataFrame(columns=[*request.param_names(), *PROCESSED_COLUMNS]),
        raw=pd.DataFrame(columns=[*request.param_names(), *RAW_COLUMNS]),
        checks=list(pre.checks) if pre else [],
        kernels={},
        warnings=[f"run {run_id} {state} at {status.get('stage')}: {status.get('message')}"],
        artifacts={k: p for k, p in named.items() if p.is_file()},
        seconds=float(status.get("seconds") or 0.0),
        preflight=pre,
        status=state,
        failure=failure,
    )


# --- writing a run ---------------------------------------------------------------------------


def new_run_id() -> str:
    """A time-sortable id with 48 random bits: collisions need the same second and bits."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(6)}"


def new_run_dir(root: Path) -> tuple[str, Path]:
    """Create a fresh run folder (a new id on the rare collision), with status ``running``."""
    with storage_errors(root):
        root.mkdir(parents=True, exist_ok=True)
        for _ in range(8):
            run_id = new_run_id()
            run_dir = root / run_id
            try:
                run_dir.mkdir()
            except FileExistsError:
                continue
            write_status(run_dir, run_id, "running", stage="created")
            return run_id, run_dir
    raise RunIdCollisionError(
        f"No free run id in {root} after 8 tries.",
        "Another process creates runs with the same ids: give this server its own runs "
        "folder (NSIGHT_AGENT_RUNS or --runs-root).",
    )


def write_request(run_dir: Path, request: ProfileRequest) -> None:
    """``request.json`` with each source replaced by the name of the file that holds it."""
    data = request.model_dump(mode="json")
    data["source"] = {"file": f"{render.MAIN_MODULE}.py"}
    for i, v in enumerate(data.get("variants", [])):
        if v.get("source") is not None:
            same = v["source"] == request.source
            v["source"] = {"file": f"{render.MAIN_MODULE}.py" if same else f"variant_{i}.py"}
    if data.get("cuda_source") is not None:
        data["cuda_source"] = {"file": "kernel.cu"}
    write_atomic(run_dir / "request.json", json.dumps(data, indent=1))


def read_request(run_dir: Path) -> ProfileRequest:
    """The request of a run, its sources read back from their files."""
    data = json.loads((run_dir / "request.json").read_text())

    def text(value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("file"), str):
            name = Path(value["file"]).name
            return (run_dir / name).read_text()
        return value

    data["source"] = text(data.get("source"))
    data["cuda_source"] = text(data.get("cuda_source"))
    for v in data.get("variants", []):
        v["source"] = text(v.get("source"))
    return ProfileRequest.model_validate(data)


def artifact_paths(run_dir: Path) -> dict[str, Path]:
    """A run's files by the names answers publish (resources nsight-agent://runs/{id}/{name});
    the engine itself reads them by role (``RunFiles``)."""
    files = RunFiles.in_folder(run_dir)
    return {
        "request": run_dir / "request.json",
        "harness": run_dir / "harness.py",
        "source": run_dir / f"{render.MAIN_MODULE}.py",
        "manifest": files.manifest,
        "report": files.report,
        "ncu_log": files.ncu_log,
        "program_output": files.program_output,
        "raw_csv": files.raw_csv,
        "processed_csv": files.processed_csv,
        "status": run_dir / STATUS_FILE,
    }


def save_result(result: RunResult) -> None:
    """Write raw.csv, processed.csv and result.json: what ``load_run`` reads back."""
    files = result.files
    result.raw.to_csv(files.raw_csv, index=False)
    result.processed.to_csv(files.processed_csv, index=False)
    data = {
        "run_id": result.run_id,
        "checks": [c.model_dump() for c in result.checks],
        "kernels": result.kernels,
        "warnings": result.warnings,
        "seconds": result.seconds,
        "cuda_build": result.cuda_build,
        "preflight": result.preflight.model_dump() if result.preflight else None,
        "facts": result.facts.model_dump(mode="json", exclude_defaults=True),
        "dropped": {name: d.model_dump() for name, d in result.dropped.items()},
        "suspects": [s.model_dump() for s in result.suspects],
    }
    write_atomic(result.run_dir / "result.json", json.dumps(data, indent=1, default=str))
    result.artifacts |= {"raw_csv": files.raw_csv, "processed_csv": files.processed_csv}
    result.artifacts["result"] = result.run_dir / "result.json"

"""Shared test set-up: `gpu` tests run only where a CUDA GPU and ncu are present; the
`sweep` fixture gives the recorded H200 engine sweep as frames or as a finished pipeline run."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import settings

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import aggregate as aggregation
from nsight_agent.engine.collection import extract as extraction
from nsight_agent.engine.pipeline import OutputCheck, RunResult
from nsight_agent.engine.worker.timer import CPU_PROBE_ENV
from nsight_agent.request import ProfileRequest

# Property tests draw the same examples on every run, so CI cannot turn red at random;
# HYPOTHESIS_EXPLORE=N draws N fresh random examples per test instead, to hunt on purpose.
EXPLORE = int(os.environ.get("HYPOTHESIS_EXPLORE", "0") or 0)
settings.register_profile(
    "nsight-agent", derandomize=not EXPLORE, **({"max_examples": EXPLORE} if EXPLORE else {})
)
settings.load_profile("nsight-agent")

# The gate compares a CPU run's speed probe with its baseline's (judge/gate.py); this suite's
# own parallel workers load the CPU at random, so the runs it makes skip the probe (the gate's
# tests give stand-in runs probes of their own, and run the probe itself).
os.environ.setdefault(CPU_PROBE_ENV, "0")
# Builds' precompiled torch headers go to a folder of the tests' own, not the user's cache.
os.environ.setdefault("NSIGHT_AGENT_PCH_DIR", f"{tempfile.gettempdir()}/nsight-agent-test-pch")

FIXTURES = Path(__file__).parent / "fixtures"
SWEEP = FIXTURES / "engine" / "sweep"
TIME = "gpu__time_duration.sum"


def gpu_available() -> tuple[bool, str]:
    if shutil.which("ncu") is None and not os.environ.get("NCU"):
        return False, "ncu is not installed"
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # `make test` runs with pytest-xdist (--dist loadgroup): tests that start a local Ray
    # cluster share one worker, one after another (two local clusters at once compete for
    # the machine's cores and Ray's session folder).
    for item in items:
        if "ray" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("ray"))
    ok, why = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# ---------------------------------------------------------------------------------------------
# The recorded H200 sweep (3 sizes x 3 runs, 2 variants)


def _sweep_variants() -> tuple[str, str]:
    """(candidate, baseline): the sweep's two annotations, in recorded order."""
    names = [str(a) for a in dict.fromkeys(_sweep_frames([TIME])[1]["Annotation"])]
    return names[0], names[1]


def _sweep_frames(
    metrics: list[str], variants: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Raw and processed frames of the recorded H200 sweep (3 sizes x 3 runs, 2 variants)."""
    configs = [(4096,), (65536,), (1048576,)]
    calls = extraction.calls_from_manifest(json.loads((SWEEP / "manifest.json").read_text()))
    records = extraction.read_actions(SWEEP / "report.ncu-rep", metrics)
    grouped = extraction.group_kernels(records, calls, None, lambda a, b: a + b)
    if variants is not None:
        grouped = {k: v for k, v in grouped.items() if k in variants}
    raw = extraction.raw_frame(grouped, metrics, configs, ["n"])
    return raw, aggregation.aggregate(raw, ["n"])


def _sweep_run(
    root: Path,
    *,
    variants: list[str] | None = None,
    metrics: list[str] | None = None,
    checks: list[OutputCheck] | None = None,
    run_id: str = "20261129-sweep",
) -> RunResult:
    """The recorded sweep as a finished pipeline run under ``root`` (``load_run`` reads it)."""
    metrics = metrics or [TIME]
    raw, processed = _sweep_frames(metrics, variants)
    names = list(dict.fromkeys(processed["Annotation"]))
    run_dir = root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(SWEEP / "report.ncu-rep", run_dir / "report.ncu-rep")
    shutil.copy(SWEEP / "manifest.json", run_dir / "manifest.json")
    request = ProfileRequest(
        source="def setup(n, device):\n    return ()\n",
        variants=[{"name": n, "entry": "run"} for n in names] if len(names) > 1 else [],
        entry=names[0] if len(names) == 1 else "run",
        configs={"n": [4096, 65536, 1048576]},
        metrics=metrics,
        runs=3,
    )
    (run_dir / "request.json").write_text(request.model_dump_json())
    kernels = {
        str(a): sorted({str(k) for k in processed.loc[processed["Annotation"] == a, "Kernel"]})
        for a in names
    }
    run = RunResult(
        run_id=run_id,
        run_dir=run_dir,
        request=request,
        processed=processed,
        raw=raw,
        checks=checks or [],
        kernels=kernels,
        warnings=[],
        artifacts={},
        seconds=9.1,
    )
    pipeline.save_result(run)
    return pipeline.load_run(run_id, runs_root=root)


@dataclass(frozen=True)
class Sweep:
    """The sweep's readers, handed to tests as a fixture instead of imported."""

    variants: Callable[[], tuple[str, str]]
    frames: Callable[..., tuple[pd.DataFrame, pd.DataFrame]]
    run: Callable[..., RunResult]
    report: Path
    manifest: Path


@pytest.fixture
def sweep() -> Sweep:
    return Sweep(
        _sweep_variants,
        _sweep_frames,
        _sweep_run,
        SWEEP / "report.ncu-rep",
        SWEEP / "manifest.json",
    )

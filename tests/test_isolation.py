"""A crashing or hanging candidate is its own row: the baseline and the other
variants are still measured and compared, on both methods, and the baseline is never blamed.

On the CPU a crash is a process that dies (``os.abort()``, a segfault); on a GPU the same route
takes a broken CUDA context (tests/test_isolation_gpu.py). The ncu path runs under the stand-in
ncu of tests/test_faults.py (the harness on the CPU, no report), through the real pre-flights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent.engine import pipeline
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import NcuError
from nsight_agent.request import ProfileRequest
from nsight_agent.server.app import build_server
from tests.test_faults import stand_in_ncu  # noqa: F401 - a fixture

SOURCE = """
import ctypes, os, time
import torch

def setup(n, device="cpu"):
    return (torch.arange(n, dtype=torch.float32, device=device),)

def run(x):
    return x * 2

def fine(x):
    return x + x

def aborts(x):
    os.abort()

def segfaults(x):
    return ctypes.string_at(0)

def hangs(x):
    time.sleep(600)
    return x * 2

def exits(x):
    os._exit(0)
"""


def _request(*entries: str, timeout_s: int = 120) -> ProfileRequest:
    return ProfileRequest(
        source=SOURCE,
        language="torch",
        configs=[{"n": 256}],
        runs=2,
        warmup=0,
        timeout_s=timeout_s,
        variants=[{"name": e, "entry": e} for e in entries],
    )


def test_a_candidate_that_aborts_is_dropped_and_the_others_are_timed(tmp_path: Path) -> None:
    with WorkerPool() as pool:
        run = pipeline.time_request(_request("run", "aborts", "fine"), pool, runs_root=tmp_path)
    assert run.dropped["aborts"].verdict == "error", run.dropped
    assert "baseline passed alone" in run.dropped["aborts"].message
    measured = set(run.processed["Annotation"])
    assert measured == {"run", "fine"}, measured
    assert {c.variant for c in run.checks if c.ok} >= {"fine"}
    # the evidence stays in the run folder: the baseline alone, then the pair that broke
    assert (tmp_path / run.run_id / "alone-run-result.json").is_file()
    assert (tmp_path / run.run_id / "alone-aborts-result.json").is_file()


def test_a_candidate_that_exits_quietly_is_dropped_and_no_other_variant_is_named(
    tmp_path: Path,
) -> None:
    """os._exit(0) in a candidate's first call leaves the manifest with no measured call: the
    exit is placed in its config, never guessed onto the baseline ("around variant 'run'")."""
    with WorkerPool() as pool:
        run = pipeline.time_request(_request("run", "exits"), pool, runs_root=tmp_path)
    dropped = run.dropped["exits"]
    assert dropped.verdict == "error" and "in config #0" in dropped.message, dropped
    assert "'run'" not in dropped.message, dropped.message
    assert set(run.processed["Annotation"]) == {"run"}


@pytest.mark.usefixtures("stand_in_ncu")
def test_a_candidate_that_segfaults_before_ncu_is_dropped(tmp_path: Path) -> None:
    """The ncu path's pre-flight: the pair attributes the crash and the run goes on to ncu
    without it (the stand-in ncu writes no report, so the run ends there, not at the
    pre-flight and not with the baseline blamed)."""
    with pytest.raises(NcuError) as caught:
        pipeline.profile(_request("run", "segfaults", "fine"), runs_root=tmp_path)
    run_dir = tmp_path / str(caught.value.run_id)
    pre = PreflightResult.model_validate_json((run_dir / "preflight-result.json").read_text())
    assert pre.ok, pre.errors
    assert pre.dropped["segfaults"].verdict == "error", pre.dropped
    assert "exit status" in pre.dropped["segfaults"].message


def test_a_candidate_that_hangs_is_a_timeout_row(tmp_path: Path) -> None:
    with WorkerPool() as pool:
        run = pipeline.time_request(
            _request("run", "hangs", timeout_s=10), pool, runs_root=tmp_path
        )
    assert run.dropped["hangs"].verdict == "timeout", run.dropped
    assert set(run.processed["Annotation"]) == {"run"}


def test_a_baseline_that_crashes_is_the_runs_error_and_names_the_baseline(tmp_path: Path) -> None:
    from nsight_agent.engine.harness.errors import SourceError

    with WorkerPool() as pool, pytest.raises(SourceError) as caught:
        pipeline.time_request(_request("aborts", "run"), pool, runs_root=tmp_path)
    assert caught.value.variant == "aborts"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_compare_variants_answers_with_an_error_row(tmp_path: Path) -> None:
    args: dict[str, Any] = {
        "source": SOURCE,
        "language": "torch",
        "configs": [{"n": 256}],
        "method": "timing",
        "variants": [{"name": "run"}, {"name": "aborts", "entry": "aborts"}],
    }
    async with Client(build_server(tmp_path)) as client:
        result = await client.call_tool("compare_variants", args)
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        assert not result.is_error, text
        overall = (result.structured_content or {})["overall"]
        assert overall["aborts"]["verdict"] == "error", overall
        assert overall["run"]["verdict"] == "baseline"
        assert not (await client.call_tool("list_skills", {})).is_error  # still serving

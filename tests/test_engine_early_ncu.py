"""The collect stage started beside the pre-flight (collection/collect/early.py): the real harness
waits at its gate, the pipeline opens it with the pre-flight's verdict, and the rows are the
staged order's. Through the stand-in ncu of test_engine_targets (the harness on the CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nsight_agent.engine import children, pipeline
from nsight_agent.engine.collection.collect import profiled
from nsight_agent.engine.collection.collect.choose import choose
from nsight_agent.engine.collection.collect.cold import Cold
from nsight_agent.engine.collection.collect.early import ENV, GATE, Early, EarlyCollect, open_gate
from nsight_agent.engine.collection.collect.strategy import Collected, RunPlace
from nsight_agent.engine.harness import render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.process import child_env
from nsight_agent.errors import CollectionTimeoutError, RunCancelledError
from nsight_agent.request import ProfileRequest, Variant
from tests.fakes import FakeSlot
from tests.test_engine_targets import (  # noqa: F401 - stand_in is a fixture
    KERNELS,
    SWEEP_SOURCE,
    calls,
    stand_in,
    sweep_request,
)


@pytest.fixture
def early_on(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> Path:  # noqa: F811
    """The stand-in ncu (its state folder), with the collect stage started early (the
    default: the variable unset)."""
    monkeypatch.delenv(ENV, raising=False)
    return stand_in


def test_started_beside_the_preflight_it_measures_what_the_staged_order_measures(
    early_on: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    early = pipeline.profile(sweep_request(), runs_root=tmp_path / "runs")
    monkeypatch.setenv(ENV, "0")
    staged = pipeline.profile(sweep_request(), runs_root=tmp_path / "runs")

    gate = early.run_dir / GATE
    assert json.loads(gate.read_text()) == {"skip": []}
    first, second = calls(early_on, "cold")
    assert first[first.index("--gate") + 1] == str(gate) and "--gate" not in second
    columns = ["Annotation", "Metric", "n", "AvgValue", "StdDev", "NumRuns", "OutputOK"]
    assert early.processed[columns].equals(staged.processed[columns])
    assert early.checks == staged.checks and early.kernels == staged.kernels == KERNELS
    assert early.facts.collection == staged.facts.collection
    stages = json.loads((early.run_dir / "status.json").read_text())["stage_seconds"]
    assert {"pre-flight", "ncu", "extract"} <= stages.keys(), stages


def test_a_broken_source_stops_the_early_harness_and_is_the_runs_error(
    early_on: Path, tmp_path: Path
) -> None:
    broken = sweep_request().model_copy(
        update={"source": SWEEP_SOURCE.format(flag="/x").replace("return (torch", "return (nope")}
    )
    with pytest.raises(SourceError, match="nope"):
        pipeline.profile(broken, runs_root=tmp_path / "runs")
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if (d / "status.json").exists()]
    assert json.loads((run_dir / GATE).read_text()) == {"stop": True}
    status = json.loads((run_dir / "status.json").read_text())
    assert status["stage"].startswith("pre-flight") and "nope" in status["message"], status

    deadline = time.monotonic() + 30
    while _runs_processes(run_dir):
        assert time.monotonic() < deadline, _runs_processes(run_dir)
        time.sleep(0.05)


def test_an_early_collect_cut_by_its_limit_is_estimated_from_the_verdict_on(
    tmp_path: Path,
) -> None:
    # Started beside the pre-flight, ncu's limit covers both stages (here 60 s) but it
    # profiles only after the verdict: 30 of 300 kernels in the ~1 s since then is about 10 s
    # for all, said rounded up to 30 (the whole limit would have said 600).
    def collect(gate: Path) -> Collected:
        while not gate.exists():
            time.sleep(0.01)
        time.sleep(1.0)
        raise CollectionTimeoutError("The profiled program ran past its 60 s limit.", "", 60, 30)

    early = EarlyCollect(tmp_path, collect, runs=3)
    with pytest.raises(CollectionTimeoutError) as info:
        early.measure(["gone"], {("ref", 0): 100, ("gone", 0): 7})
    assert "launch 300 kernels in all" in info.value.message, info.value.message
    assert "about 30 s" in info.value.message and info.value.hint.startswith("Raise timeout_s")
    assert "its limit was timeout_s twice" in info.value.message


def _runs_processes(run_dir: Path) -> list[str]:
    """This run's processes (ncu's, its harness's) still alive."""
    marked = children.marked_processes(children.owner_prefix()).values()
    return [m for m in marked if run_dir.name in m]


def test_a_variant_that_fails_alone_reaches_the_early_harness_through_its_gate(
    early_on: Path, tmp_path: Path
) -> None:
    # The staged order passes it as --skip (test_engine_pipeline); here ncu started before
    # the pre-flight knew, so the gate carries it.
    base = sweep_request()
    source = base.source + "\ndef boom(x):\n    raise RuntimeError('boom')\n"
    variants = [*base.variants, Variant(name="boom", entry="boom")]
    result = pipeline.profile(
        base.model_copy(update={"source": source, "variants": variants}),
        runs_root=tmp_path / "runs",
    )
    assert json.loads((result.run_dir / GATE).read_text()) == {"skip": ["boom"]}
    assert result.dropped["boom"].verdict == "error" and "boom" in result.dropped["boom"].message
    assert set(result.processed["Annotation"]) == {"triton_add", "triton_scale"}
    (first,) = calls(early_on, "cold")
    assert "--gate" in first and "--skip" not in first


def test_a_run_cancelled_at_once_stops_the_early_harness(early_on: Path, tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RunCancelledError):
        pipeline.profile(sweep_request(), runs_root=tmp_path / "runs", cancel=cancel)
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if (d / "status.json").exists()]
    assert json.loads((run_dir / GATE).read_text()) == {"stop": True}
    deadline = time.monotonic() + 30
    while _runs_processes(run_dir):
        assert time.monotonic() < deadline, _runs_processes(run_dir)
        time.sleep(0.05)


def _rendered(tmp_path: Path) -> Path:
    request = ProfileRequest(
        source=SWEEP_SOURCE.format(flag="/nonexistent"),
        language="torch",
        configs={"n": [64]},
        variants=[
            Variant(name="add", entry="triton_add"),
            Variant(name="scale", entry="triton_scale"),
        ],
        runs=2,
    )
    tmp_path.mkdir()
    render.write_run_files(request, tmp_path, tmp_path / "cache")
    return tmp_path


def _harness(run_dir: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "harness.py", "--device", "cpu", "--gate", "gate.json"],
        cwd=run_dir,
        env=child_env({}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_harness_waits_at_its_gate_and_takes_the_verdict_from_it(tmp_path: Path) -> None:
    run_dir = _rendered(tmp_path / "go")
    harness = _harness(run_dir)
    time.sleep(3.0)  # nothing is imported or run before the gate opens (torch alone: ~2 s)
    assert harness.poll() is None and not (run_dir / "manifest.json").exists()
    open_gate(run_dir / GATE, {"skip": ["scale"]})
    out, _ = harness.communicate(timeout=300)
    assert harness.returncode == 0, out
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["skipped"] == ["scale"] and manifest["variants"] == ["add"]
    assert {c["variant"] for c in manifest["calls"]} == {"add"} and len(manifest["calls"]) == 2

    stopped = _rendered(tmp_path / "stop")
    harness = _harness(stopped)
    open_gate(stopped / GATE, {"stop": True})
    out, _ = harness.communicate(timeout=300)
    assert harness.returncode == 0, out
    assert not (stopped / "manifest.json").exists() and not (stopped / "error.json").exists()


def test_a_failed_early_collect_is_raised_where_the_pipeline_waits(tmp_path: Path) -> None:
    started = threading.Event()

    def collect(gate: Path) -> Collected:
        started.set()
        raise RuntimeError(f"ncu could not start (gate {gate.name})")

    early = EarlyCollect(tmp_path, collect)
    assert started.wait(10)
    with pytest.raises(RuntimeError, match="could not start"):
        early.measure([])
    assert isinstance(choose(sweep_request(), None, {ENV: "0"}), Cold)  # the staged order


def test_the_collect_starts_early_unless_a_ready_target_will_serve_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With targets on by default, a job no target can serve (torch operator ranges, launch
    sampling) or a slot whose target is still starting keeps the early start: its harness
    waits at the gate while the pre-flight runs, and its answer says why it ran cold; a ready
    target that can serve the job takes the staged order."""

    def cold(job: object, run: RunPlace, why: str, *, gate: Path | None = None) -> Collected:
        assert gate is not None  # the early harness waits at its gate for the verdict
        while not gate.exists():
            time.sleep(0.01)
        return Collected(0.0, f"cold: {why}")

    monkeypatch.setattr(profiled, "cold", cold)
    plain = sweep_request()
    assert not isinstance(choose(plain, FakeSlot(True), {}), Early)
    ranges = plain.model_copy(update={"torch_ranges": True})
    run = RunPlace(tmp_path, "r", lambda: None)
    passed = pipeline.PreflightResult(ok=True, device="cuda", seconds=0.1)
    for targets, request, why in [
        (FakeSlot(False), plain, "cold: no pre-launched target ready yet"),
        (FakeSlot(True), ranges, "cold: torch operator ranges"),
        (None, plain, "cold: no pre-launched targets here"),
    ]:
        way = choose(request, targets, {})
        assert isinstance(way, Early)
        assert way.preflight(run, lambda: passed) is passed
        assert way.collect(run, passed).path.startswith(why)
        (tmp_path / GATE).unlink()

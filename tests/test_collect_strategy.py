"""The collect stage's way, chosen once before the pre-flight (engine/collection/collect/):
the choice as a pure function over the situations a job meets (targets none, ready,
starting or off; options an attach can or cannot serve; a budget; the early start turned
off; a diagnosis a ready target may serve plainly), then each way's collect and fallback
through fakes of the slot's targets and of the ncu runs (``profiled.cold``/``attached``)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine.collection.collect import profiled
from nsight_agent.engine.collection.collect.attach import AttachFailed
from nsight_agent.engine.collection.collect.budgeted import Budgeted
from nsight_agent.engine.collection.collect.choose import choose
from nsight_agent.engine.collection.collect.cold import NO_TARGETS, Cold
from nsight_agent.engine.collection.collect.early import ENV, GATE
from nsight_agent.engine.collection.collect.plain import SAID
from nsight_agent.engine.collection.collect.strategy import (
    PRELAUNCHED,
    Collected,
    CollectJob,
    RunPlace,
    Strategy,
)
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest
from tests.fakes import FakeSlot
from tests.test_engine_targets import SWEEP_SOURCE, sweep_request
from tests.test_plain_collect import OWN, diagnosing

STARTING = "no pre-launched target ready yet (one is starting)"
OFF = "pre-launched targets are off (NSIGHT_AGENT_TARGETS=0)"
RANGES = "torch operator ranges (NVTX, which an attached report does not record)"
RANGE_REPLAY = "replay_mode=range (targets serve kernel replay only)"
SAMPLING = "launch sampling (needs the NVTX filter, which attach mode lacks)"
STAGED = {ENV: "0"}


def slot(state: str) -> FakeSlot | None:
    return {
        "none": None,
        "ready": FakeSlot(True),
        "starting": FakeSlot(False),
        "off": FakeSlot(False, why=OFF),
    }[state]


def sampled() -> ProfileRequest:
    """Launch sampling of one measured call, in a source that defines no kernel of its own."""
    return ProfileRequest(
        source=SWEEP_SOURCE.format(flag="/nonexistent"),
        language="torch",
        configs={"n": [4096]},
        entry="triton_add",
        runs=1,
        sample_launches=True,
    )


REQUESTS = {
    "plain": sweep_request,
    "budget": lambda: sweep_request(sections=["SpeedOfLight", "Occupancy"], budget_s=9.0),
    "range replay": lambda: sweep_request(replay_mode="range"),
    "sampling": sampled,
    "ranges, no kernels of its own": lambda: sweep_request(torch_ranges=True),
    "diagnosis": diagnosing,
    "diagnosis, budget": lambda: diagnosing(sections=["SpeedOfLight"], budget_s=9.0),
}


def shape(way: Strategy) -> tuple[str, ...]:
    """A way as the table names it: its class, and the reason it holds for a cold path."""
    if isinstance(way, Budgeted):
        return ("Budgeted", *shape(way.way))
    why = getattr(way, "why", None)
    return (type(way).__name__,) if why is None else (type(way).__name__, why)


@pytest.mark.parametrize(
    ("targets", "request_", "env", "expected"),
    [
        # No targets in this slot (the CLI, a machine without ncu's launch mode).
        ("none", "plain", {}, ("Early", NO_TARGETS)),
        ("none", "plain", STAGED, ("Cold", NO_TARGETS)),
        ("none", "budget", {}, ("Budgeted", "Cold", NO_TARGETS)),
        ("none", "diagnosis", {}, ("Early", NO_TARGETS)),
        # Options an attach serves: a ready target takes it; one still starting (or off)
        # starts cold beside the pre-flight, or, staged, takes a target ready by then.
        ("ready", "plain", {}, ("Attached",)),
        ("ready", "plain", STAGED, ("Attached",)),
        ("ready", "budget", {}, ("Budgeted", "Attached")),
        ("starting", "plain", {}, ("Early", STARTING)),
        ("starting", "plain", STAGED, ("Attached",)),
        ("starting", "budget", {}, ("Budgeted", "Attached")),
        ("off", "plain", {}, ("Early", OFF)),
        # Options an attach cannot serve: cold, saying why, whatever the targets.
        ("ready", "range replay", {}, ("Early", RANGE_REPLAY)),
        ("ready", "range replay", STAGED, ("Cold", RANGE_REPLAY)),
        ("ready", "sampling", {}, ("Early", SAMPLING)),
        ("ready", "ranges, no kernels of its own", {}, ("Early", RANGES)),
        # A diagnosis a ready target may serve plainly: the pre-flight decides.
        ("ready", "diagnosis", {}, ("PlainServed", RANGES)),
        ("ready", "diagnosis", STAGED, ("PlainServed", RANGES)),
        ("starting", "diagnosis", {}, ("Early", RANGES)),
        ("starting", "diagnosis", STAGED, ("PlainServed", RANGES)),
        ("ready", "diagnosis, budget", {}, ("Budgeted", "PlainServed", RANGES)),
    ],
)
def test_the_way_is_chosen_once_from_the_request_the_targets_and_the_environment(
    targets: str, request_: str, env: dict[str, str], expected: tuple[str, ...]
) -> None:
    pool = slot(targets)
    way = choose(REQUESTS[request_](), pool, env)
    assert shape(way) == expected
    assert pool is None or pool.taken == 0  # choosing takes no target: the collect stage does


def test_a_budgeted_way_keeps_the_sections_it_must_and_a_budget_without_sections_is_none() -> None:
    way = choose(REQUESTS["budget"](), None, {})
    assert isinstance(way, Budgeted) and way.budget_s == 9.0 and way.keep == 0  # metrics read
    only_sections = sweep_request(metrics=[], sections=["SpeedOfLight"], budget_s=9.0)
    assert isinstance(way := choose(only_sections, None, {}), Budgeted) and way.keep == 1
    kept = sweep_request(sections=["SpeedOfLight"], budget_s=9.0, budget_keep=3)
    assert isinstance(way := choose(kept, None, {}), Budgeted) and way.keep == 3
    metrics_only = sweep_request(budget_s=9.0)  # no section to leave out: nothing to fit
    assert shape(choose(metrics_only, None, {})) == ("Early", NO_TARGETS)


def test_the_job_takes_what_the_collect_stage_needs_from_the_request() -> None:
    request = sweep_request(sections=["SpeedOfLight"], torch_ranges=True)
    job = CollectJob.of(request.model_copy(update={"timeout_s": 50.0}))
    assert job.variants == ("triton_add", "triton_scale") and job.configs == 3 and job.runs == 3
    assert job.timeout_s == 50 and job.op_ranges and not job.plain
    assert job.options.sections == ["SpeedOfLight"] and "smsp__inst_executed.sum" in (
        job.options.metrics
    )  # the work check's metrics, for a comparison
    plain = job.as_plain()
    assert plain.plain and not plain.op_ranges and not plain.options.sample_launches
    assert profiled.harness_argv(plain, ["b"])[-3:] == ["--skip", "b", "--no-op-ranges"]
    assert profiled.harness_argv(job, [], Path("g.json"))[-2:] == ["--gate", "g.json"]


# --- each way's collect and fallback, through fakes --------------------------------------------


@dataclass
class Runs:
    """Stands in for ``profiled``: records each ncu run asked for; an attach may fail."""

    attach_fails: AttachFailed | None = None
    cold: list[tuple[CollectJob, str, list[str]]] = field(default_factory=list)
    attached: list[tuple[CollectJob, object]] = field(default_factory=list)

    def run_cold(
        self, job: CollectJob, run: RunPlace, why: str, *, skip: Any = (), **_: Any
    ) -> Collected:
        self.cold.append((job, why, list(skip)))
        return Collected(1.0, f"cold: {why}")

    def run_attached(self, job: CollectJob, run: RunPlace, target: object, **_: Any) -> Collected:
        self.attached.append((job, target))
        (run.run_dir / "error.json").write_text("{}")  # what a failed attempt leaves
        if self.attach_fails is not None:
            raise self.attach_fails
        return Collected(0.5, PRELAUNCHED)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Runs:
    fake = Runs()
    monkeypatch.setattr(profiled, "cold", fake.run_cold)
    monkeypatch.setattr(profiled, "attached", fake.run_attached)
    return fake


@pytest.fixture
def run(tmp_path: Path) -> RunPlace:
    folder = tmp_path / "runs" / "r1"
    folder.mkdir(parents=True)
    return RunPlace(folder, "r1", lambda: None)


def passed(**fields: Any) -> PreflightResult:
    return PreflightResult(ok=True, device="cuda", seconds=0.1, **fields)


TARGET = object()


def test_attached_takes_a_target_and_goes_cold_where_none_is_ready(
    runs: Runs, run: RunPlace
) -> None:
    pool = FakeSlot(True, target=TARGET)
    way = choose(sweep_request(), pool, {})
    assert way.collect(run, passed()).path == PRELAUNCHED
    assert runs.attached == [(CollectJob.of(sweep_request()), TARGET)] and not runs.cold
    again = way.collect(run, passed())  # the target was taken: none is ready now
    assert again.path == f"cold: {STARTING}" and pool.taken == 2


@pytest.mark.parametrize("lasting", [False, True])
def test_a_failed_attach_goes_cold_with_its_reason_and_a_lasting_one_turns_targets_off(
    runs: Runs, run: RunPlace, lasting: bool
) -> None:
    runs.attach_fails = AttachFailed("the call markers do not fit", lasting=lasting)
    pool = FakeSlot(True, target=TARGET)
    skip = {"gone": DroppedVariant(verdict="error", stage="entry", message="x")}
    done = choose(sweep_request(), pool, {}).collect(run, passed(dropped=skip))
    assert done.path == "cold: attach failed: the call markers do not fit"
    assert [(why, left_out) for _, why, left_out in runs.cold] == [
        ("attach failed: the call markers do not fit", ["gone"])
    ]
    assert not (run.run_dir / "error.json").exists()  # the attempt's files are forgotten
    assert pool.turned_off == (["the call markers do not fit"] if lasting else [])


def test_plain_served_attaches_plainly_when_the_preflight_allows_else_goes_cold(
    runs: Runs, run: RunPlace
) -> None:
    pool = FakeSlot(True, target=TARGET)
    way = choose(diagnosing(), pool, {})
    done = way.collect(run, passed(kernels_per_call=OWN))
    assert done.path == PRELAUNCHED and done.plain == SAID
    ((job, _),) = runs.attached
    assert job.plain and not job.op_ranges

    aten = {"triton_add": [["add_kernel", "vectorized_elementwise_kernel<4>"]]}
    cold = way.collect(run, passed(kernels_per_call=aten))
    assert cold.path == f"cold: {RANGES}" and cold.plain is None
    assert runs.cold[-1][0].op_ranges  # with the ranges the request asked for

    pool.ready = False  # the target went away during the pre-flight
    assert way.collect(run, passed(kernels_per_call=OWN)).path == f"cold: {RANGES}"


def test_plain_served_falls_back_cold_but_plain_when_its_attach_fails(
    runs: Runs, run: RunPlace
) -> None:
    runs.attach_fails = AttachFailed("ncu --mode attach exited with status 1")
    way = choose(diagnosing(), FakeSlot(True, target=TARGET), {})
    done = way.collect(run, passed(kernels_per_call=OWN))
    assert done.path == "cold: attach failed: ncu --mode attach exited with status 1"
    assert done.plain == SAID and runs.cold[-1][0].plain  # the cold run left the ranges out too


def test_early_starts_beside_the_preflight_and_is_stopped_by_a_broken_source(
    runs: Runs, run: RunPlace, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Path | None] = []

    def cold(job: CollectJob, place: RunPlace, why: str, *, gate: Path | None = None) -> Any:
        started.append(gate)
        assert gate is not None
        deadline = time.monotonic() + 30
        while not gate.exists():  # the harness waits for the pre-flight's verdict
            assert time.monotonic() < deadline, "the gate never opened"
            time.sleep(0.01)
        return Collected(2.0, f"cold: {why}")

    monkeypatch.setattr(profiled, "cold", cold)
    way = choose(sweep_request(), None, {})
    pre = way.preflight(run, lambda: passed())
    assert way.collect(run, pre).path == f"cold: {NO_TARGETS}"
    assert started == [run.run_dir / GATE]
    assert json.loads((run.run_dir / GATE).read_text()) == {"skip": []}

    broken = PreflightResult(ok=False, device="cuda", seconds=0.1, stage="import", errors=["x"])
    way = choose(sweep_request(), None, {})
    with pytest.raises(SourceError, match="x"):
        way.preflight(run, lambda: broken)
    assert json.loads((run.run_dir / GATE).read_text()) == {"stop": True}


def test_budgeted_fits_the_sections_to_the_preflights_counts_and_says_what_it_left_out(
    runs: Runs, run: RunPlace
) -> None:
    sections = ["LaunchStats", "Occupancy", "MemoryWorkloadAnalysis_Tables"]
    way = choose(sweep_request(sections=sections, budget_s=12.0), None, {})
    counts = {"triton_add": {0: 1, 1: 1, 2: 1}, "triton_scale": {0: 1, 1: 1, 2: 1}}
    done = way.collect(run, passed(kernel_counts=counts))
    ((job, why, _),) = runs.cold
    assert why == NO_TARGETS and list(job.options.sections) == ["LaunchStats", "Occupancy"]
    assert done.budget is not None and done.budget.left_out == ["MemoryWorkloadAnalysis_Tables"]
    facts = RunFacts()
    done.record(facts)
    assert facts.collection == f"cold: {NO_TARGETS}" and facts.budget == done.budget.line()
    assert facts.budget_left_out == ["MemoryWorkloadAnalysis_Tables"]
    assert facts.budget.startswith("budget 12 s: est. ")


def test_cold_leaves_the_dropped_variants_out_and_records_its_path(
    runs: Runs, run: RunPlace
) -> None:
    skip = {"b": DroppedVariant(verdict="timeout", stage="entry", message="x")}
    done = Cold(CollectJob.of(sweep_request()), "because").collect(run, passed(dropped=skip))
    assert runs.cold[0][1:] == ("because", ["b"]) and done.path == "cold: because"
    facts = RunFacts()
    done.record(facts)
    assert facts.collection == "cold: because" and facts.collected_plain is None
    assert facts.budget is None

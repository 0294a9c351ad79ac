"""The profiling budget: what an ncu run costs here and which sections fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import budget
from nsight_agent.engine.collection.collect.budgeted import Budgeted
from nsight_agent.engine.collection.collect.choose import choose
from nsight_agent.engine.collection.collect.cold import Cold
from nsight_agent.engine.collection.collect.early import Early
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.server.tools_profile import options_of
from nsight_agent.service import diagnose
from nsight_agent.service.measure import Measuring
from tests.test_engine_targets import (  # noqa: F401 - stand_in is a fixture
    KERNELS,
    calls,
    stand_in,
    sweep_request,
)
from tests.test_service import FIELDS, StandInExecutor

COST = budget.PassCost(start_s=2.0, pass_s=0.1, basis="test")


def test_the_sections_kept_are_those_that_fit_in_the_order_given() -> None:
    # 2 s start; one metric pass + SpeedOfLight's 10 = 3.1 s; + LaunchStats 1 = 3.2 s; the
    # memory tables' 30 would make 6.2 s; Occupancy's 1 still fits after them.
    plan = budget.fit(
        ["SpeedOfLight", "LaunchStats", "MemoryWorkloadAnalysis_Tables", "Occupancy"], 4.0, COST
    )
    assert plan.kept == ["SpeedOfLight", "LaunchStats", "Occupancy"]
    assert plan.left_out == ["MemoryWorkloadAnalysis_Tables"]
    assert plan.estimate_s == pytest.approx(3.3) and plan.full_s == pytest.approx(6.3)
    assert "left out MemoryWorkloadAnalysis_Tables (est. +3.0 s" in plan.line()


def test_kernels_multiply_the_passes_and_the_first_section_always_stays() -> None:
    plan = budget.fit(["SpeedOfLight", "Occupancy"], 2.5, COST, kernels=10)
    assert plan.kept == ["SpeedOfLight"] and plan.left_out == ["Occupancy"]
    assert plan.estimate_s == pytest.approx(2.0 + 10 * 11 * 0.1)
    assert "over it" not in plan.line()  # something was left out: the line says what
    alone = budget.fit(["SpeedOfLight"], 2.5, COST, kernels=10)
    assert alone.kept == ["SpeedOfLight"] and alone.line().endswith("nothing left to leave out")


def _runs(root: Path, points: list[tuple[int, float]]) -> None:
    for i, (passes, seconds) in enumerate(points):
        folder = root / f"run-{i}"
        folder.mkdir(parents=True)
        (folder / "request.json").write_text("{}")
        facts = {"ncu_passes": passes, "ncu_s": seconds}
        key = "facts" if i % 2 else "extra"  # the untyped mapping of older stores counts too
        (folder / "result.json").write_text(json.dumps({key: facts}))


def test_the_cost_is_fitted_to_this_machines_runs(tmp_path: Path) -> None:
    _runs(tmp_path, [(1, 3.0), (11, 4.0), (34, 6.3), (5, 3.4)])
    cost = budget.pass_cost(tmp_path)
    assert cost.basis == "measured here: the newest 4 ncu runs"
    assert cost.start_s == pytest.approx(2.9, abs=0.05)
    assert cost.pass_s == pytest.approx(0.1, abs=0.005)


@pytest.mark.parametrize(
    "points",
    [[], [(10, 4.0), (10, 5.0), (10, 6.0)], [(1, 9.0), (30, 3.0), (5, 8.0)]],
    ids=["no runs", "one pass count", "a line that falls"],
)
def test_without_a_sensible_fit_the_recorded_figures_stand_in(
    tmp_path: Path, points: list[tuple[int, float]]
) -> None:
    _runs(tmp_path, points)
    assert budget.pass_cost(tmp_path) == budget.RECORDED
    assert budget.pass_cost(None).basis.startswith("recorded on an H200")


def test_a_diagnosis_asks_for_its_sections_most_needed_first_and_the_cheap_four_always(
    tmp_path: Path,
) -> None:
    executor = StandInExecutor(tmp_path, kernels=1)
    where = Measuring(runs_root=tmp_path / "runs", executor=executor)
    diagnose.diagnose_source(FIELDS, where, budget_s=8.0)
    asked = executor.jobs[0].request
    assert asked.budget_s == 8.0 and asked.budget_keep == len(diagnose.FIRST_PASS_SECTIONS)
    assert asked.sections[:4] == diagnose.FIRST_PASS_SECTIONS
    assert asked.sections == diagnose.budget_order(diagnose.ONE_PASS_SECTIONS, 8.0)
    assert sorted(asked.sections) == sorted(diagnose.ONE_PASS_SECTIONS)
    diagnose.diagnose_source(FIELDS, where)
    assert executor.jobs[1].request.budget_s is None


@pytest.mark.parametrize("left_out", [["WarpStateStats"], []], ids=["some", "none"])
def test_a_diagnosis_says_what_its_budget_left_out_would_add_only_when_it_left_some(
    tmp_path: Path, left_out: list[str]
) -> None:
    line = "budget 8 s: est. 7.1 s" + (
        " ; left out WarpStateStats (est. +0.7 s)" if left_out else ""
    )
    facts = RunFacts(budget=line, budget_left_out=left_out, ncu_s=6.5)
    executor = StandInExecutor(tmp_path, kernels=1, facts=facts)
    where = Measuring(runs_root=tmp_path / "runs", executor=executor)
    d = diagnose.diagnose_source(FIELDS, where, budget_s=8.0)
    assert d.budget is not None and d.budget.startswith(line + "; ncu took 6.5 s")
    assert d.budget.endswith("what they would add: each kernel's deeper") == bool(left_out)


def test_the_pipeline_fits_the_sections_after_the_preflight_and_says_what_it_left_out(
    stand_in: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Through the real pipeline and the stand-in ncu (the harness on the CPU): no early start
    (the sections wait for the pre-flight's count), the ncu command carries only the sections
    that fit, and the run says what it left out. On the CPU the pre-flight counts no kernels,
    so each of the sweep's 18 calls counts as one; the H200's recorded figures stand in."""
    sections = ["LaunchStats", "Occupancy", "MemoryWorkloadAnalysis_Tables"]
    request = sweep_request(sections=sections, budget_s=12.0)
    run = pipeline.profile(request, runs_root=tmp_path / "runs")
    (argv,) = calls(stand_in, "cold")
    asked = [argv[i + 1] for i, a in enumerate(argv) if a == "--section"]
    assert asked == ["LaunchStats", "Occupancy"]
    said = run.facts.budget
    assert (
        said is not None and said.startswith("budget 12 s: est. ") and "recorded on an H200" in said
    )
    assert "left out MemoryWorkloadAnalysis_Tables (est. +" in said
    assert run.facts.budget_left_out == ["MemoryWorkloadAnalysis_Tables"]
    assert run.kernels == KERNELS  # the rows as without a budget
    whole = pipeline.profile(sweep_request(sections=sections), runs_root=tmp_path / "runs")
    assert whole.facts.budget is None and whole.facts.budget_left_out == []


def test_budget_s_is_an_option_of_the_tools_and_is_checked() -> None:
    assert options_of({"budget_s": 6}).budget_s == 6.0
    with pytest.raises(ValueError, match="budget_s"):
        options_of({"budget_s": 0})


def test_a_budgeted_job_does_not_start_its_collect_stage_early() -> None:
    """Started beside the pre-flight, the collect stage would fix its sections before the
    pre-flight has counted the kernels the budget weighs."""
    request = sweep_request(sections=["SpeedOfLight"], budget_s=5.0)
    way = choose(request, None, {})  # early starts are on: only the budget stops this one
    assert isinstance(way, Budgeted) and isinstance(way.way, Cold)
    assert isinstance(choose(request.model_copy(update={"budget_s": None}), None, {}), Early)


@pytest.mark.anyio
async def test_a_tool_with_nothing_to_leave_out_refuses_a_budget_and_keeps_serving() -> None:
    """compare_variants (time only) and roofline_metrics (a fixed set) would ignore budget_s:
    each says so, before any work, and the server answers the next call."""
    from mcp import Client

    from nsight_agent.server.app import build_server

    source = "def setup(n, device):\n    return (n,)\n\n\ndef run(n):\n    return n\n"
    async with Client(build_server()) as client:
        compare = await client.call_tool(
            "compare_variants",
            {
                "source": source,
                "configs": [{"n": 1}],
                "variants": [{"name": "a"}, {"name": "b"}],
                "options": {"budget_s": 5},
            },
        )
        roof = await client.call_tool(
            "roofline_metrics",
            {"source": source, "configs": [{"n": 1}], "options": {"budget_s": 5}},
        )
        diagnosed = await client.call_tool(
            "diagnose_kernel",
            {"source": source, "configs": [{"n": 1}], "options": {"budget_s": 5}},
        )
        listed = await client.call_tool("list_skills", {})
    for answer, tool in ((compare, "compare_variants"), (roof, "roofline_metrics")):
        said = " ".join(getattr(c, "text", "") for c in answer.content)
        assert answer.is_error and f"{tool} collects" in said and "Drop budget_s" in said, said
    # diagnose_kernel takes a budget: here it stops only for want of ncu, not at the option
    said = " ".join(getattr(c, "text", "") for c in diagnosed.content)
    assert "budget_s" not in said and "ncu" in said.lower(), said
    assert not listed.is_error


def test_a_budget_on_the_timing_path_is_refused(tmp_path: Path) -> None:
    from nsight_agent.errors import InvalidRequestError
    from nsight_agent.service import profile

    executor = StandInExecutor(tmp_path)
    with pytest.raises(InvalidRequestError, match="method='timing' collects none"):
        profile.profile(Measuring(executor=executor), "timing", 5.0, **FIELDS)
    assert executor.jobs == []  # refused before any work


def test_a_budget_with_no_sections_to_weigh_is_said_not_ignored(
    stand_in: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Through the real pipeline and the stand-in ncu: the metrics alone are collected and the
    answer says the budget had nothing to leave out."""
    from nsight_agent.service import profile

    fields = sweep_request().model_dump(
        include={"source", "language", "configs", "variants", "runs", "timeout_s"}
    )
    run = profile.profile(Measuring(runs_root=tmp_path / "runs"), "ncu", 5.0, **fields)
    assert run.kernels == KERNELS
    assert "budget_s 5 s: no sections asked for, nothing to leave out" in run.warnings

"""The use-case layer: every pass of diagnose_kernel from source goes through the executor in
use, a failed timing pass is said,
not swallowed, and a cancel is not taken for a reason to go on. From source the diagnosis is
one ncu run with every section its checks read.

A stand-in executor records each job and answers with a run whose report is a planted kernel
recorded on the H200 (``tiny_launch_triton``: its first-pass diagnosis asks for a second pass).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsight_agent.diagnose import by_name, checks_memory, kernel
from nsight_agent.engine.executors.base import Executor, JobHandle
from nsight_agent.engine.pipeline import Job, Progress
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.engine.store.runs import RunResult
from nsight_agent.errors import (
    InvalidRequestError,
    NsightAgentError,
    RunCancelledError,
    UnknownMetricError,
)
from nsight_agent.judge import diagnosis as judge_diagnosis
from nsight_agent.service import diagnose
from nsight_agent.service.measure import Measuring

PLANTED = Path(__file__).parent / "fixtures" / "planted" / "tiny_launch_triton.ncu-rep"
SOURCE = "def setup(n, device):\n    return ()\n\ndef run():\n    return None\n"
FIELDS: dict[str, Any] = {"source": SOURCE, "configs": [{"n": 1}], "language": "torch"}


class StandInExecutor(Executor):
    """Runs nothing: records each job and answers it with the planted report (profile jobs)
    or a one-row timing frame (timing jobs); ``fail_timing`` makes a timing job raise it."""

    name = "stand-in"
    checks_ncu_here = False
    runs_timing = True

    def __init__(
        self,
        tmp: Path,
        fail_timing: Exception | None = None,
        kernels: int = 2,
        facts: RunFacts | None = None,
        fail_first: Exception | None = None,
    ) -> None:
        self.tmp = tmp
        self.fail_first = fail_first  # what the first profile job raises (ncu refusing it)
        self.facts = facts or RunFacts()  # what each profile run's result carries (a budget's plan)
        self.jobs: list[Job] = []
        self.fail_timing = fail_timing
        self.kernels = {"run": [f"kernel_{i}" for i in range(kernels)]}  # a profile run's

    def pool_info(self) -> dict[str, Any]:
        return {"jobs": len(self.jobs)}

    def submit(
        self,
        job: Job,
        *,
        cancel: threading.Event | None = None,
        on_progress: Progress | None = None,
    ) -> JobHandle:
        self.jobs.append(job)
        handle = JobHandle(job, cancel)
        if job.mode == "timing" and self.fail_timing is not None:
            handle.future.set_exception(self.fail_timing)
            return handle
        if job.mode != "timing" and self.fail_first is not None:
            handle.future.set_exception(self.fail_first)
            self.fail_first = None
            return handle
        run_dir = self.tmp / f"run-{len(self.jobs)}"
        run_dir.mkdir()
        if job.mode != "timing":
            (run_dir / "report.ncu-rep").symlink_to(PLANTED)
        frame = pd.DataFrame({"AvgValue": [1234.0]}) if job.mode == "timing" else pd.DataFrame()
        handle.future.set_result(
            RunResult(
                run_id=run_dir.name,
                run_dir=run_dir,
                request=job.request,
                processed=frame,
                raw=pd.DataFrame(),
                checks=[],
                kernels={} if job.mode == "timing" else self.kernels,
                warnings=[],
                artifacts={},
                seconds=0.0,
                facts=self.facts.model_copy() if job.mode != "timing" else RunFacts(),
            )
        )
        return handle


def test_the_one_run_and_the_timing_call_go_through_the_executor(tmp_path: Path) -> None:
    executor = StandInExecutor(tmp_path)
    where = Measuring(runs_root=tmp_path, executor=executor)
    d = diagnose.diagnose_source(FIELDS, where, time_step=True)
    modes = [job.mode for job in executor.jobs]
    assert modes == ["profile", "timing"], modes
    sections = executor.jobs[0].request.sections
    assert (sections, executor.jobs[0].request.report_counters) == diagnose.one_pass("counters")
    # every section a first pass could ask a deeper one for is in the one run, or its counters
    assert set(kernel.DEEPER) <= set(sections) | set(by_name.BY_NAME_SECTIONS)
    assert d.run_id == "run-1"
    assert d.passes is not None and len(d.passes) == 2, d.passes
    assert d.passes[0].startswith("one pass (run run-1): SpeedOfLight, ")
    assert d.passes[1].startswith("timing (run run-2)")


def test_a_call_of_one_kernel_is_not_timed(tmp_path: Path) -> None:
    """No step view for one kernel, so no wall time to read: the timing job is not run."""
    executor = StandInExecutor(tmp_path, kernels=1)
    d = diagnose.diagnose_source(FIELDS, Measuring(executor=executor), time_step=True)
    assert [job.mode for job in executor.jobs] == ["profile"]
    assert d.passes is not None and len(d.passes) == 1 and d.passes[0].startswith("one pass")


def test_a_timing_pass_that_cannot_run_is_said_and_the_diagnosis_goes_on(tmp_path: Path) -> None:
    failed = NsightAgentError("no GPU for the timing path", "use a GPU")
    executor = StandInExecutor(tmp_path, fail_timing=failed)
    d = diagnose.diagnose_source(FIELDS, Measuring(executor=executor), time_step=True)
    assert [job.mode for job in executor.jobs] == ["profile", "timing"]
    assert d.passes is not None
    assert d.passes[1] == "step wall time not measured (timing path: no GPU for the timing path)"


def test_a_cancel_during_the_timing_pass_ends_the_diagnosis(tmp_path: Path) -> None:
    executor = StandInExecutor(tmp_path, fail_timing=RunCancelledError("cancelled"))
    with pytest.raises(RunCancelledError):
        diagnose.diagnose_source(FIELDS, Measuring(executor=executor), time_step=True)
    assert [job.mode for job in executor.jobs] == ["profile", "timing"]  # nothing after it


def test_a_bug_in_the_timing_pass_is_not_swallowed(tmp_path: Path) -> None:
    executor = StandInExecutor(tmp_path, fail_timing=KeyError("bug"))
    with pytest.raises(KeyError):
        diagnose.diagnose_source(FIELDS, Measuring(executor=executor), time_step=True)


def test_without_time_step_only_the_ncu_passes_run(tmp_path: Path) -> None:
    executor = StandInExecutor(tmp_path)
    diagnose.diagnose_source(FIELDS, Measuring(executor=executor), deep=False)
    assert [job.mode for job in executor.jobs] == ["profile"]
    assert executor.jobs[0].request.sections == diagnose.FIRST_PASS_SECTIONS


@pytest.mark.parametrize(
    ("choice", "how", "out"),
    [
        ("tables", "env", {diagnose.TABLES}),
        ("tables", "argument", {diagnose.TABLES}),
        ("counters", "env", set(by_name.BY_NAME_SECTIONS)),
        ("counters", "argument", set(by_name.BY_NAME_SECTIONS)),
    ],
)
def test_sections_go_by_their_counters_when_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, choice: str, how: str, out: set[str]
) -> None:
    """NSIGHT_AGENT_DIAGNOSE_PASS (or by_name): the one pass leaves those sections out and asks
    ncu for the counters the checks read of them, into the report only; the answer says so."""
    executor = StandInExecutor(tmp_path, kernels=1)
    where = Measuring(runs_root=tmp_path, executor=executor)
    if how == "env":
        monkeypatch.setenv(diagnose.PASS_ENV, choice)
    d = diagnose.diagnose_source(FIELDS, where, by_name=choice if how == "argument" else None)
    request = executor.jobs[0].request
    assert set(kernel.DEEPER) - set(request.sections) == out
    assert request.sections == [s for s in diagnose.ONE_PASS_SECTIONS if s not in out]
    named = checks_memory.TABLE_METRICS if choice == "tables" else by_name.COUNTERS
    expected = [m for m in named if m not in diagnose.FIRST_PASS_METRICS]
    assert request.report_counters == expected and len(expected) >= 10
    assert not set(request.report_counters) & set(request.metrics)  # not read into rows
    assert d.passes and f"by name: {len(expected)} counters the checks read of " in d.passes[0]
    assert all(s in d.passes[0].split("by name:")[1] for s in out)


def test_a_counter_ncu_refuses_falls_back_to_the_sections_and_says_so(tmp_path: Path) -> None:
    """A GPU whose ncu lacks a counter the catalog read allowed (another architecture): the
    one pass runs again with the sections, which every ncu has, and the answer says why."""
    refused = diagnose.one_pass("counters")[1][-1]
    executor = StandInExecutor(tmp_path, kernels=1, fail_first=UnknownMetricError(refused, []))
    where = Measuring(runs_root=tmp_path, executor=executor)
    d = diagnose.diagnose_source(FIELDS, where, by_name="counters")
    first, second = (job.request for job in executor.jobs)
    assert first.report_counters and refused in first.report_counters
    assert second.sections == diagnose.ONE_PASS_SECTIONS and second.report_counters == []
    assert d.passes and d.passes[0].startswith("one pass (run run-2)")
    assert f"ncu refused the counter {refused}, so the sections were collected" in d.passes[0]
    assert "by name" not in d.passes[0]


def test_an_unknown_metric_that_is_not_a_counter_is_the_callers_error(tmp_path: Path) -> None:
    error = UnknownMetricError("not__a_metric.sum", [])
    executor = StandInExecutor(tmp_path, kernels=1, fail_first=error)
    where = Measuring(runs_root=tmp_path, executor=executor)
    with pytest.raises(UnknownMetricError, match="not__a_metric"):
        diagnose.diagnose_source(FIELDS, where, by_name="counters")
    assert len(executor.jobs) == 1  # no second run


def test_the_default_one_pass_asks_for_the_counters_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset, the one pass asks for the counter sections' counters by name; =sections asks for
    every section, as does a budget (which costs sections, not counters)."""
    monkeypatch.delenv(diagnose.PASS_ENV, raising=False)
    executor = StandInExecutor(tmp_path, kernels=1)
    where = Measuring(runs_root=tmp_path, executor=executor)
    d = diagnose.diagnose_source(FIELDS, where)
    request = executor.jobs[0].request
    sections, counters = diagnose.one_pass("counters")
    assert request.sections == sections and request.report_counters == counters
    assert not set(sections) & set(by_name.BY_NAME_SECTIONS) and len(counters) > 60
    assert d.passes and "by name" in d.passes[0]
    diagnose.diagnose_source(FIELDS, where, budget_s=30.0)
    budgeted = executor.jobs[-1].request
    assert sorted(budgeted.sections) == sorted(diagnose.ONE_PASS_SECTIONS)
    assert budgeted.report_counters == []
    monkeypatch.setenv(diagnose.PASS_ENV, "sections")
    d = diagnose.diagnose_source(FIELDS, where)
    request = executor.jobs[-1].request
    assert request.sections == diagnose.ONE_PASS_SECTIONS and request.report_counters == []
    assert d.passes and "by name" not in d.passes[0]


def test_counters_this_gpus_ncu_lacks_are_not_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU whose ncu lacks a counter (another architecture), it is left out, not sent to
    ncu to fail the run; the checks fall back as on a report without it."""
    lacking = {by_name.COUNTERS[0], checks_memory.TABLE_METRICS[-1]}
    real = diagnose.catalog.is_valid_metric
    monkeypatch.setattr(
        diagnose.catalog, "is_valid_metric", lambda m, c=None: m not in lacking and real(m, c)
    )
    _, counters = diagnose.one_pass("counters")
    asked = set(diagnose.FIRST_PASS_METRICS)
    assert counters == [m for m in by_name.COUNTERS if m not in lacking and m not in asked]
    assert diagnose.one_pass("tables")[1] == list(checks_memory.TABLE_METRICS[:-1])


def test_a_wrong_one_pass_choice_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(diagnose.PASS_ENV, "names")
    with pytest.raises(InvalidRequestError, match="not one of sections, tables, counters"):
        diagnose.diagnose_source(FIELDS, Measuring(executor=StandInExecutor(tmp_path)))


def test_a_variants_own_kernels_count_as_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KernelBench candidate (a variant with its own source) defines kernels of the user's
    too: the diagnosis names them as the user's, not as another library's."""
    seen: dict[str, Any] = {}
    real = judge_diagnosis.diagnose_report

    def spy(report: Any, **hints: Any) -> Any:
        seen.update(hints)
        return real(report, **hints)

    monkeypatch.setattr(judge_diagnosis, "diagnose_report", spy)
    candidate = (
        "import triton\n\n\n@triton.jit\ndef candidate_kernel(x):\n    pass\n\n\n"
        "def run(n):\n    return n\n"
    )
    fields = {
        **FIELDS,
        "variants": [{"name": "base", "entry": "run"}, {"name": "new", "source": candidate}],
    }
    diagnose.diagnose_source(fields, Measuring(executor=StandInExecutor(tmp_path, kernels=1)))
    assert "candidate_kernel" in seen["user_kernels"]

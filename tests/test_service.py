"""The use-case layer: every pass of diagnose_kernel from source goes through the executor in
use (the defect of issue 35: its two ncu passes once bypassed it), a failed timing pass is said,
not swallowed, and a cancel is not taken for a reason to go on. From source the diagnosis is
one ncu run with every section its checks read (issue 37); the staged two passes stay for the
bench that compares them.

A stand-in executor records each job and answers with a run whose report is a planted kernel
recorded on the H200 (``tiny_launch_triton``: its first-pass diagnosis asks for a second pass).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsight_agent.diagnose import checks_memory, kernel
from nsight_agent.engine.executors.base import Executor, JobHandle
from nsight_agent.engine.pipeline import Job, Progress
from nsight_agent.engine.store.runs import RunResult
from nsight_agent.errors import InvalidRequestError, NsightAgentError, RunCancelledError
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

    def __init__(self, tmp: Path, fail_timing: Exception | None = None, kernels: int = 2) -> None:
        self.tmp = tmp
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
    assert sections == diagnose.ONE_PASS_SECTIONS
    # every section a first pass could ask a deeper one for is in the one run
    assert set(kernel.DEEPER) <= set(sections) and "InstructionStats" in sections
    assert executor.jobs[0].request.report_counters == []
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


def test_staged_both_passes_go_through_the_executor(tmp_path: Path) -> None:
    executor = StandInExecutor(tmp_path)
    where = Measuring(runs_root=tmp_path, executor=executor)
    d = diagnose.diagnose_source(FIELDS, where, staged=True)
    assert [job.mode for job in executor.jobs] == ["profile", "profile"]
    first, second = (job.request.sections for job in executor.jobs)
    assert first == diagnose.FIRST_PASS_SECTIONS
    assert second[: len(first)] == first and "InstructionStats" in second[len(first) :]
    assert d.run_id == "run-2" and d.passes is not None and len(d.passes) == 2, d.passes
    assert d.passes[0].startswith("pass 1 (run run-1)") and "pass 2 (run run-2)" in d.passes[1]


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


@pytest.mark.parametrize("how", ["env", "argument"])
def test_the_memory_tables_by_name_when_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """NSIGHT_AGENT_DIAGNOSE_TABLES=names (or tables_named=True): the one pass leaves the
    memory tables' section out and asks ncu for the counters its checks read, into the report
    only; the diagnosis still counts that evidence as collected."""
    executor = StandInExecutor(tmp_path, kernels=1)
    where = Measuring(runs_root=tmp_path, executor=executor)
    if how == "env":
        monkeypatch.setenv(diagnose.TABLES_ENV, "names")
    d = diagnose.diagnose_source(FIELDS, where, tables_named=True if how == "argument" else None)
    request = executor.jobs[0].request
    assert request.sections == diagnose.LEAN_PASS_SECTIONS
    assert set(kernel.DEEPER) - set(request.sections) == {diagnose.TABLES}
    assert request.report_counters == list(checks_memory.TABLE_METRICS)
    assert not set(request.report_counters) & set(request.metrics)  # not read into rows
    assert d.kernels and diagnose.TABLES in d.kernels[0].diagnosis.collected


def test_a_wrong_tables_choice_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(diagnose.TABLES_ENV, "some")
    with pytest.raises(InvalidRequestError, match="neither 'section' nor 'names'"):
        diagnose.diagnose_source(FIELDS, Measuring(executor=StandInExecutor(tmp_path)))


def test_a_variants_own_kernels_count_as_the_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KernelBench candidate (a variant with its own source) defines kernels of the user's
    too: the diagnosis names them as the user's, not as another library's."""
    seen: dict[str, Any] = {}
    real = diagnose.diagnose_report

    def spy(path: Any, **hints: Any) -> Any:
        seen.update(hints)
        return real(path, **hints)

    monkeypatch.setattr(diagnose, "diagnose_report", spy)
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

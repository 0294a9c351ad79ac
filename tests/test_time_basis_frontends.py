"""Per-call time and KernelBench's trial counts at the front ends, on the CPU: the
validation stage refuses a time basis or a trial count that cannot apply, only
compare_variants takes a basis (and may change it when it re-reads a run), and a CPU timing
run end to end holds both bases, its wall time, with KernelBench's fields beside."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.errors import RequestRejected
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.server.options import Options, unused
from nsight_agent.service import summaries
from nsight_agent.service.validate import validate
from nsight_agent.time_basis import CALL_METRIC

FIXTURES = Path(__file__).parent / "fixtures" / "kernelbench"
PROBLEM = (FIXTURES / "problem_linear_relu.py").read_text()
HONEST = (FIXTURES / "new_honest.py").read_text()


@pytest.fixture(scope="module")
def cpu_pool() -> Iterator[WorkerPool]:
    with WorkerPool() as pool:
        yield pool


# --- the validation stage ---------------------------------------------------------------------


KB_FIELDS = {"source": PROBLEM, "variants": [{"name": "ref"}, {"name": "new", "source": HONEST}]}


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"time_basis": "call", "sections": ["SpeedOfLight"]}, "sections"),
        ({"time_basis": "call", "skill": "memory"}, "sections"),
        ({"time_basis": "call", "metrics": ["dram__bytes.sum"]}, "metrics"),
        ({"time_basis": "call", "ignore_kernels": ["copy"]}, "ignore_kernels"),
        ({"time_basis": "call", "combine_kernels": "none"}, "combine_kernels"),
        ({"num_perf_trials": 10}, "num_perf_trials"),
        ({"num_correct_trials": 2}, "num_correct_trials"),
    ],
)
def test_what_cannot_apply_is_refused_where_it_is(extra: dict[str, Any], where: str) -> None:
    with pytest.raises(RequestRejected) as err:
        validate({**KB_FIELDS, **extra}, "ncu")
    found = [p for p in err.value.problems if p.code == "option_basis"]
    assert [p.where for p in found] == [where], err.value.problems


def test_what_applies_is_accepted_on_both_methods() -> None:
    for method in ("ncu", "timing"):
        fields = {**KB_FIELDS, "correctness": "kernelbench", "num_perf_trials": 10}
        checked = validate({**fields, "num_correct_trials": 2, "time_basis": "gpu"}, method)
        assert checked.request.num_perf_trials == 10 and checked.request.basis() == "gpu"
        assert validate({**KB_FIELDS, "time_basis": "call"}, method).request.basis() == "call"


def test_only_compare_variants_takes_a_time_basis_and_a_re_read_may_change_it() -> None:
    options = Options(time_basis="call", num_perf_trials=10)
    assert unused(options, "compare_variants") == []
    assert [p.where for p in unused(options, "profile_kernel")] == [
        "options.time_basis",
        "options.num_perf_trials",
    ]
    assert [p.where for p in unused(options, "compare_variants", reread=True)] == [
        "options.num_perf_trials"
    ]


# --- both bases on the CPU path, end to end ---------------------------------------------------


def test_a_cpu_timing_run_holds_both_bases_as_its_wall_time(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    req = ProfileRequest(
        source=PROBLEM,
        variants=[{"name": "ref"}, {"name": "new", "source": HONEST}],
        runs=5,
        warmup=1,
        correctness="kernelbench",
        num_correct_trials=2,
    )
    run = pipeline.time_request(req, cpu_pool, runs_root=tmp_path)
    metrics = run.processed.groupby("Metric")["AvgValue"].apply(list)
    assert metrics[TIME_METRIC] == metrics[CALL_METRIC]
    s = summaries.compare_summary(run)
    assert s.time_basis == "call" and s.basis is not None and "perf_counter" in s.basis
    assert s.other_basis is not None and s.other_basis.basis == s.basis
    report = s.kernelbench
    assert report is not None and report.num_correct_trials == 2
    assert report.timing is not None and "no KernelBench trials" in report.timing
    again = pipeline.load_run(run.run_id, runs_root=tmp_path)
    assert summaries.compare_summary(again, time_basis="gpu").time_basis == "gpu"
